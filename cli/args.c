/*
 * cli/args.c — the one argv parser of the `acx` command's subcommands
 * (cli/args.h). The subcommands (cli/acx.c, cli/launch.c, cli/env.c,
 * cli/slurm.c) say what their options mean and word their usage errors;
 * this file only walks argv.
 */
#include <string.h>

#include "cli/args.h"

int is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

int take_option(int argc, char **argv, int *i, const char *long_name, const char *short_name,
                const char **value_p) {
    const char *arg = argv[*i];
    size_t n = strlen(long_name);
    if (strncmp(arg, long_name, n) == 0 && arg[n] == '=') {
        if (arg[n + 1] == '\0') return -1;
        *value_p = arg + n + 1;
        return 1;
    }
    if (strcmp(arg, long_name) != 0 && (short_name == NULL || strcmp(arg, short_name) != 0))
        return 0;
    if (*i + 1 >= argc || argv[*i + 1][0] == '\0') return -1;
    *i += 1;
    *value_p = argv[*i];
    return 1;
}

void cli_args_init(cli_args_t *a, int argc, char **argv) {
    *a = (cli_args_t){.argc = argc, .argv = argv, .i = 0, .arg = NULL, .value = NULL};
}

int cli_args_next(cli_args_t *a) {
    if (a->i + 1 >= a->argc) {
        a->i = a->argc;
        a->arg = NULL;
        return 0;
    }
    a->arg = a->argv[++a->i];
    return 1;
}

int cli_args_help(const cli_args_t *a) { return a->arg != NULL && is_help(a->arg); }

int cli_args_flag(const cli_args_t *a, const char *long_name, const char *short_name) {
    return a->arg != NULL && (strcmp(a->arg, long_name) == 0 ||
                              (short_name != NULL && strcmp(a->arg, short_name) == 0));
}

int cli_args_value(cli_args_t *a, const char *long_name, const char *short_name) {
    if (a->arg == NULL) return 0;
    return take_option(a->argc, a->argv, &a->i, long_name, short_name, &a->value);
}

int cli_args_is_option(const cli_args_t *a) {
    return a->arg != NULL && a->arg[0] == '-' && a->arg[1] != '\0';
}

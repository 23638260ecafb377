/*
 * cli/args.h — the one argv parser of the `acx` command's subcommands.
 *
 * Every subcommand walks its arguments the same way: a cursor over argv
 * (argv[0] is the command's name), -h/--help, flags, options with a value
 * ("--name VALUE", "--name=VALUE", or a short alias "-x VALUE"), and where
 * the options end (PROGRAM, "--"). What an option means and the text of a
 * usage error stay the subcommand's; this file only decides what the next
 * argument is. No MPI, no allocation.
 */
#ifndef ACX_CLI_ARGS_H
#define ACX_CLI_ARGS_H

typedef struct cli_args {
    int argc;
    char **argv;
    int i;             /* index of the current argument (0 before the first cli_args_next) */
    const char *arg;   /* argv[i] */
    const char *value; /* the value of the option cli_args_value matched last */
} cli_args_t;

/* Start a walk over argv[1 .. argc - 1]. */
void cli_args_init(cli_args_t *a, int argc, char **argv);

/* Move to the next argument: 1 (a->arg is it), 0 past the last one. */
int cli_args_next(cli_args_t *a);

/* The current argument is -h or --help. */
int cli_args_help(const cli_args_t *a);

/* The current argument is the flag long_name or short_name (may be NULL). */
int cli_args_flag(const cli_args_t *a, const char *long_name, const char *short_name);

/* The current argument is the value-taking option long_name (or its short
 * alias): 1 with a->value set (a following value argument is consumed), 0
 * if it is not this option, -1 if its value is missing or empty. */
int cli_args_value(cli_args_t *a, const char *long_name, const char *short_name);

/* The current argument looks like an option: "-" followed by something. */
int cli_args_is_option(const cli_args_t *a);

/* The primitive under cli_args_value, on a bare index (for loops not yet
 * on a cli_args_t): match argv[*i] against a value-taking option; returns
 * 1 and sets *value_p (consuming the value's argument), 0 if argv[*i] is
 * another option, -1 if the value is missing or empty. */
int take_option(int argc, char **argv, int *i, const char *long_name, const char *short_name,
                const char **value_p);

/* "-h" or "--help". */
int is_help(const char *arg);

#endif /* ACX_CLI_ARGS_H */

/*
 * tools/acx.c — the `acx` command: a dispatcher over subcommands.
 *
 * Owns: argument parsing, usage texts and exit codes of the command line
 * tool. Now: `acx version`, `acx config show`, `acx data import-idx` and
 * `acx ckpt info|verify|export`. `launch`, `env`, `estimate-memory` and
 * `slurm` slot into the command table below as they are written (a name,
 * a handler, a one-line summary); the top-level help lists exactly the
 * table, so it never advertises a command that does not exist.
 * Leaves to others: all real work, done through the public API (acx/acx.h)
 * only — the tool is a program like any user's, and links libacx.so.
 *
 * Conventions (every subcommand follows them):
 *   - `acx <cmd> --help` / `-h` and `acx help <cmd> ...` print the command's
 *     usage on stdout and exit 0;
 *   - a usage error (unknown command or option, missing or extra argument)
 *     prints one line naming it on stderr plus a hint, and exits 2;
 *   - a failed acx call prints `acx: <acx_last_error()>` and exits 1.
 * The usage texts are written next to the parser that implements them; keep
 * the two in step.
 */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "acx/acx.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* ---- shared helpers ---- */

static int is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

/* A usage error: "acx <where>: <what>" and a hint at the right --help. */
static int usage_error(const char *where, const char *fmt, const char *arg) {
    fprintf(stderr, "acx%s%s: ", where[0] ? " " : "", where);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'acx%s%s --help' for usage.\n", where[0] ? " " : "", where);
    return EXIT_USAGE;
}

/* A failed acx call: the library's own message, which names file:line, the
 * file and what was expected. */
static int acx_failure(acx_status_t status) {
    const char *msg = acx_last_error();
    fprintf(stderr, "acx: %s\n", msg[0] ? msg : acx_status_string(status));
    return EXIT_FAIL;
}

/* Match argv[*i] against a value-taking option: "--name VALUE",
 * "--name=VALUE", or the short alias "-x VALUE" (short may be NULL).
 * Returns 1 and sets *value_p (consuming the value's argument), 0 if
 * argv[*i] is another option, -1 if the value is missing or empty. */
static int take_option(int argc, char **argv, int *i, const char *long_name,
                       const char *short_name, const char **value_p) {
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

/* ---- acx version ---- */

static const char version_usage[] =
    "usage: acx version\n"
    "\n"
    "Print the acx version and the MPI library acx runs on (the first line of\n"
    "MPI_Get_library_version). Does not start MPI.\n";

static int cmd_version(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(version_usage, stdout);
            return EXIT_OK;
        }
    }
    if (argc > 1)
        return usage_error("version", argv[1][0] == '-' ? "unknown option '%s'"
                                                        : "unexpected argument '%s'",
                           argv[1]);

    /* MPI_Get_library_version is one of the few MPI calls allowed before
     * MPI_Init: `acx version` works without a launcher. */
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    printf("acx %s\n", acx_version());
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        lib[strcspn(lib, "\r\n")] = '\0';
        printf("MPI: %s\n", lib);
    } else {
        printf("MPI: (MPI_Get_library_version failed)\n");
    }
    return EXIT_OK;
}

/* ---- acx data import-idx ---- */

static const char import_idx_usage[] =
    "usage: acx data import-idx DIR -o OUT.h5\n"
    "       acx data import-idx --train-images FILE --train-labels FILE\n"
    "                           [--test-images FILE --test-labels FILE] -o OUT.h5\n"
    "\n"
    "Convert IDX files (the MNIST / Fashion-MNIST format, gzipped or not) into an\n"
    "HDF5 file holding /train/images [N x rows x cols] uint8, /train/labels [N]\n"
    "uint8 and, with a test pair, /test/images and /test/labels. The output is\n"
    "written to OUT.h5.tmp and renamed: an existing OUT.h5 is replaced only on\n"
    "success. Single process; no launcher needed.\n"
    "\n"
    "With DIR, the files are looked up there by their standard names, the\n"
    "gzipped one first when both exist:\n"
    "  train-images-idx3-ubyte[.gz]  train-labels-idx1-ubyte[.gz]  (required)\n"
    "  t10k-images-idx3-ubyte[.gz]   t10k-labels-idx1-ubyte[.gz]   (optional pair)\n"
    "\n"
    "options:\n"
    "  -o, --output FILE      the HDF5 file to write (required)\n"
    "  --train-images FILE    training images (IDX, N x rows x cols)\n"
    "  --train-labels FILE    training labels (IDX, N)\n"
    "  --test-images FILE     test images (needs --test-labels)\n"
    "  --test-labels FILE     test labels (needs --test-images)\n"
    "  -h, --help             show this text\n"
    "\n"
    "A long option's value may also follow '=' (--output=OUT.h5); '--' ends the\n"
    "options. DIR and the file options are mutually exclusive.\n"
    "Exit status: 0 imported, 1 the import failed, 2 usage error.\n";

#define IDX_PATH_MAX 4096

/* Look for dir/base.gz, then dir/base; the path found goes into path.
 * Returns 1 if found, 0 if neither exists, -1 if the path is too long. */
static int find_idx(const char *dir, const char *base, char *path, size_t size) {
    static const char *const suffixes[] = {".gz", ""};
    size_t dl = strlen(dir);
    const char *sep = (dl > 0 && dir[dl - 1] == '/') ? "" : "/";
    for (int k = 0; k < 2; k++) {
        struct stat st;
        int n = snprintf(path, size, "%s%s%s%s", dir, sep, base, suffixes[k]);
        if (n < 0 || (size_t)n >= size) return -1;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) return 1;
    }
    path[0] = '\0';
    return 0;
}

/* Resolve DIR into the four paths (test ones left empty when the test pair
 * is absent). Returns EXIT_OK or EXIT_FAIL after printing why. */
static int resolve_idx_dir(const char *dir, char paths[4][IDX_PATH_MAX]) {
    static const char *const bases[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    struct stat st;
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "acx: data import-idx: cannot read directory '%s': %s\n", dir,
                strerror(errno));
        return EXIT_FAIL;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "acx: data import-idx: '%s' is not a directory\n", dir);
        return EXIT_FAIL;
    }
    int found[4];
    for (int k = 0; k < 4; k++) {
        found[k] = find_idx(dir, bases[k], paths[k], IDX_PATH_MAX);
        if (found[k] < 0) {
            fprintf(stderr, "acx: data import-idx: path too long: '%s/%s'\n", dir, bases[k]);
            return EXIT_FAIL;
        }
    }
    int failed = 0;
    for (int k = 0; k < 2; k++) {
        if (!found[k]) {
            fprintf(stderr, "acx: data import-idx: no %s.gz or %s in '%s'\n", bases[k],
                    bases[k], dir);
            failed = 1;
        }
    }
    /* Half a test pair is almost certainly a mistake (a failed download):
     * say so rather than silently importing no test set. */
    if (found[2] != found[3]) {
        int have = found[2] ? 2 : 3, miss = found[2] ? 3 : 2;
        fprintf(stderr, "acx: data import-idx: found '%s' but no %s.gz or %s in '%s'\n",
                paths[have], bases[miss], bases[miss], dir);
        failed = 1;
    }
    return failed ? EXIT_FAIL : EXIT_OK;
}

static int cmd_data_import_idx(int argc, char **argv) {
    static const char where[] = "data import-idx";
    static const char *const names[4] = {"--train-images", "--train-labels", "--test-images",
                                         "--test-labels"};
    const char *files[4] = {NULL, NULL, NULL, NULL};
    const char *out = NULL, *dir = NULL;
    int options_done = 0;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL;
        int r;
        if (!options_done && is_help(arg)) {
            fputs(import_idx_usage, stdout);
            return EXIT_OK;
        }
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = 1;
            continue;
        }
        if (options_done || arg[0] != '-' || arg[1] == '\0') {
            if (dir != NULL) return usage_error(where, "unexpected argument '%s'", arg);
            dir = arg;
            continue;
        }
        if ((r = take_option(argc, argv, &i, "--output", "-o", &value)) != 0) {
            if (r < 0) return usage_error(where, "option '%s' needs a FILE", arg);
            if (out != NULL) return usage_error(where, "option '%s' given twice", arg);
            out = value;
            continue;
        }
        int matched = 0;
        for (int k = 0; k < 4 && !matched; k++) {
            if ((r = take_option(argc, argv, &i, names[k], NULL, &value)) == 0) continue;
            matched = 1;
            if (r < 0) return usage_error(where, "option '%s' needs a FILE", arg);
            if (files[k] != NULL) return usage_error(where, "option '%s' given twice", names[k]);
            files[k] = value;
        }
        if (!matched) return usage_error(where, "unknown option '%s'", arg);
    }

    int any_file = files[0] || files[1] || files[2] || files[3];
    if (dir != NULL && any_file)
        return usage_error(where, "give either DIR ('%s') or the --train-/--test- file options, "
                                  "not both",
                           dir);
    if (dir == NULL && !any_file)
        return usage_error(where, "%s", "missing DIR or --train-images/--train-labels");
    if (out == NULL) return usage_error(where, "%s", "missing -o OUT.h5");
    if (any_file) {
        for (int k = 0; k < 2; k++)
            if (files[k] == NULL) return usage_error(where, "missing %s FILE", names[k]);
        if ((files[2] == NULL) != (files[3] == NULL))
            return usage_error(where, "%s",
                               "--test-images and --test-labels go together: give both or "
                               "neither");
    }

    char paths[4][IDX_PATH_MAX];
    if (dir != NULL) {
        int rc = resolve_idx_dir(dir, paths);
        if (rc != EXIT_OK) return rc;
        for (int k = 0; k < 4; k++) files[k] = paths[k][0] ? paths[k] : NULL;
    }

    acx_status_t status = acx_import_idx(files[0], files[1], files[2], files[3], out);
    if (status != ACX_OK) return acx_failure(status);
    printf("%s: ok (%s)\n", out, files[2] ? "train and test sets" : "train set only");
    return EXIT_OK;
}

/* ---- acx data ---- */

static const char data_usage[] =
    "usage: acx data <subcommand> [<args>]\n"
    "\n"
    "Prepare datasets for acx's data loader.\n"
    "\n"
    "subcommands:\n"
    "  import-idx   convert IDX files (MNIST, Fashion-MNIST) into an HDF5 file\n"
    "\n"
    "Run 'acx data <subcommand> --help' for its options.\n";

static int cmd_data(int argc, char **argv) {
    if (argc < 2) {
        fputs(data_usage, stderr);
        return EXIT_USAGE;
    }
    if (is_help(argv[1])) {
        fputs(data_usage, stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "import-idx") == 0) return cmd_data_import_idx(argc - 1, argv + 1);
    return usage_error("data", argv[1][0] == '-' ? "unknown option '%s'"
                                                 : "unknown subcommand '%s'",
                       argv[1]);
}

/* ---- acx config show ---- */

static const char config_show_usage[] =
    "usage: acx config show [--config FILE] [--acx-KEY=VALUE ...]\n"
    "\n"
    "Print the configuration a program started here would get from acx_init:\n"
    "every key with its resolved value and where the value came from (default,\n"
    "FILE:LINE, an ACX_* environment variable, an --acx-KEY option), then the\n"
    "launch information of the config file (num_processes, main_process_ip, ...\n"
    "of an Accelerate default_config.yaml) and the settings of the file acx\n"
    "cannot honour. The sources are acx_init's, lowest first: defaults, the\n"
    "config file (--config FILE, else $ACX_CONFIG_FILE, else\n"
    "~/.config/acx/default_config.yaml), ACX_* environment variables, --acx-KEY\n"
    "options. A program's own acx_config_t settings, which come last, are not\n"
    "known here. Does not start MPI.\n"
    "\n"
    "options:\n"
    "  --config FILE          the config file: acx's keys or an Accelerate\n"
    "                         default_config.yaml (see docs/config.md)\n"
    "  --acx-KEY=VALUE        set KEY as on a program's command line; also\n"
    "                         --acx-KEY VALUE ('-', '_' and '.' alike in KEY)\n"
    "  -h, --help             show this text\n"
    "\n"
    "Exit status: 0 shown, 1 the configuration is invalid (the message names\n"
    "file:line, key, value and accepted values), 2 usage error.\n";

static int cmd_config_show(int argc, char **argv) {
    static const char where[] = "config show";
    const char *config_file = NULL;
    int status = EXIT_OK, n = 0;
    char **opts = calloc((size_t)argc, sizeof *opts); /* "--acx-KEY=VALUE" strings */
    if (opts == NULL) {
        fprintf(stderr, "acx: config show: out of memory\n");
        return EXIT_FAIL;
    }

    for (int i = 1; i < argc && status == EXIT_OK; i++) {
        const char *arg = argv[i], *value = NULL;
        int r;
        if (is_help(arg)) {
            fputs(config_show_usage, stdout);
            goto out;
        }
        if ((r = take_option(argc, argv, &i, "--config", NULL, &value)) != 0) {
            if (r < 0)
                status = usage_error(where, "option '%s' needs a FILE", arg);
            else if (config_file != NULL)
                status = usage_error(where, "option '%s' given twice", "--config");
            else
                config_file = value;
            continue;
        }
        if (strncmp(arg, "--acx-", 6) == 0 && arg[6] != '\0' && arg[6] != '=') {
            /* As acx_init reads them: the value after '=' or in the next argument. */
            if (strchr(arg, '=') == NULL) {
                if (i + 1 >= argc) {
                    status = usage_error(where, "option '%s' needs a VALUE", arg);
                    continue;
                }
                value = argv[++i];
            }
            size_t len = strlen(arg) + (value ? strlen(value) + 1 : 0) + 1;
            if ((opts[n] = malloc(len)) == NULL) {
                fprintf(stderr, "acx: config show: out of memory\n");
                status = EXIT_FAIL;
                continue;
            }
            snprintf(opts[n++], len, "%s%s%s", arg, value ? "=" : "", value ? value : "");
            continue;
        }
        status = usage_error(where, arg[0] == '-' ? "unknown option '%s'"
                                                  : "unexpected argument '%s'",
                             arg);
    }
    if (status != EXIT_OK) goto out;

    char *text = NULL;
    acx_status_t st = acx_config_describe(NULL, config_file, n, (const char *const *)opts, &text);
    if (st != ACX_OK) {
        status = acx_failure(st);
        goto out;
    }
    fputs(text, stdout);
    free(text);
out:
    for (int k = 0; k < n; k++) free(opts[k]);
    free(opts);
    return status;
}

/* ---- acx config ---- */

static const char config_usage[] =
    "usage: acx config <subcommand> [<args>]\n"
    "\n"
    "Inspect acx's configuration (keys, files, environment: docs/config.md).\n"
    "\n"
    "subcommands:\n"
    "  show   print the resolved configuration and where each value came from\n"
    "\n"
    "Run 'acx config <subcommand> --help' for its options.\n";

static int cmd_config(int argc, char **argv) {
    if (argc < 2) {
        fputs(config_usage, stderr);
        return EXIT_USAGE;
    }
    if (is_help(argv[1])) {
        fputs(config_usage, stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "show") == 0) return cmd_config_show(argc - 1, argv + 1);
    return usage_error("config", argv[1][0] == '-' ? "unknown option '%s'"
                                                   : "unknown subcommand '%s'",
                       argv[1]);
}

/* ---- acx ckpt ---- */

static const char ckpt_info_usage[] =
    "usage: acx ckpt info PATH\n"
    "\n"
    "Summarize a checkpoint written by acx_save_state: format version, step,\n"
    "epoch, world size, sharding strategy and mixed precision at save, the\n"
    "number of parameters and their elements, the file size, and every dataset\n"
    "with its dtype, shape and checksum. PATH is a checkpoint file, or a\n"
    "directory holding a 'latest' file (e.g. PROJECT_DIR/checkpoints).\n"
    "Single process; no launcher needed.\n"
    "\n"
    "options:\n"
    "  -h, --help             show this text\n"
    "\n"
    "Exit status: 0 shown, 1 not a readable acx checkpoint, 2 usage error.\n";

static const char ckpt_verify_usage[] =
    "usage: acx ckpt verify PATH\n"
    "\n"
    "Read every dataset of a checkpoint completely, which checks each chunk's\n"
    "Fletcher-32 checksum, and check the structure (format name and version,\n"
    "the step attribute, the /model group). Prints 'PATH: ok' on success; on\n"
    "failure the message names the first bad dataset. PATH as for 'acx ckpt\n"
    "info'. Single process.\n"
    "\n"
    "options:\n"
    "  -h, --help             show this text\n"
    "\n"
    "Exit status: 0 intact, 1 damaged or unreadable, 2 usage error.\n";

static const char ckpt_export_usage[] =
    "usage: acx ckpt export PATH -o OUT [--format safetensors|hdf5]\n"
    "\n"
    "Write the model's parameters from a checkpoint, consolidated (full\n"
    "tensors whatever the world size at save) and in float32, to OUT:\n"
    "  safetensors  Hugging Face's safetensors layout, tensors named as the\n"
    "               parameters (fc1.weight, ...), metadata format=pt, source,\n"
    "               step, acx_version (the default)\n"
    "  hdf5         one dataset per parameter, root attributes format =\n"
    "               \"acx-weights\" and step (what acx_model_save_weights writes)\n"
    "OUT is written as OUT.tmp and renamed: an existing OUT is replaced only on\n"
    "success. PATH as for 'acx ckpt info'. Single process.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE      the file to write (required)\n"
    "  --format FORMAT        safetensors or hdf5 (default safetensors)\n"
    "  -h, --help             show this text\n"
    "\n"
    "A long option's value may also follow '=' (--format=hdf5); '--' ends the\n"
    "options.\n"
    "Exit status: 0 exported, 1 the export failed, 2 usage error.\n";

/* `acx ckpt info|verify|export ...`: argv[0] is the subcommand. */
static int cmd_ckpt_sub(int argc, char **argv) {
    const char *sub = argv[0];
    int is_export = strcmp(sub, "export") == 0;
    const char *usage = is_export                     ? ckpt_export_usage
                        : strcmp(sub, "info") == 0 ? ckpt_info_usage
                                                      : ckpt_verify_usage;
    char where[32];
    snprintf(where, sizeof where, "ckpt %s", sub);
    const char *path = NULL, *out = NULL, *format = NULL;
    int options_done = 0;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL;
        int r;
        if (!options_done && is_help(arg)) {
            fputs(usage, stdout);
            return EXIT_OK;
        }
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = 1;
            continue;
        }
        if (options_done || arg[0] != '-' || arg[1] == '\0') {
            if (path != NULL) return usage_error(where, "unexpected argument '%s'", arg);
            path = arg;
            continue;
        }
        if (is_export && (r = take_option(argc, argv, &i, "--output", "-o", &value)) != 0) {
            if (r < 0) return usage_error(where, "option '%s' needs a FILE", arg);
            if (out != NULL) return usage_error(where, "option '%s' given twice", arg);
            out = value;
            continue;
        }
        if (is_export && (r = take_option(argc, argv, &i, "--format", NULL, &value)) != 0) {
            if (r < 0) return usage_error(where, "option '%s' needs a FORMAT", arg);
            if (format != NULL) return usage_error(where, "option '%s' given twice", "--format");
            format = value;
            continue;
        }
        return usage_error(where, "unknown option '%s'", arg);
    }
    if (path == NULL) return usage_error(where, "%s", "missing PATH (a checkpoint file)");

    acx_status_t status;
    if (strcmp(sub, "info") == 0) {
        char *text = NULL;
        if ((status = acx_checkpoint_info(path, &text)) != ACX_OK) return acx_failure(status);
        fputs(text, stdout);
        free(text);
        return EXIT_OK;
    }
    if (!is_export) {
        if ((status = acx_checkpoint_verify(path)) != ACX_OK) return acx_failure(status);
        printf("%s: ok\n", path);
        return EXIT_OK;
    }
    acx_export_format_t fmt = ACX_EXPORT_SAFETENSORS;
    if (format != NULL && strcmp(format, "hdf5") == 0)
        fmt = ACX_EXPORT_HDF5;
    else if (format != NULL && strcmp(format, "safetensors") != 0)
        return usage_error(where, "invalid --format '%s' (expected safetensors or hdf5)", format);
    if (out == NULL) return usage_error(where, "%s", "missing -o OUT");
    if ((status = acx_checkpoint_export(path, out, fmt)) != ACX_OK) return acx_failure(status);
    printf("%s: ok (%s, from %s)\n", out, fmt == ACX_EXPORT_HDF5 ? "hdf5" : "safetensors", path);
    return EXIT_OK;
}

static const char ckpt_usage[] =
    "usage: acx ckpt <subcommand> [<args>]\n"
    "\n"
    "Inspect, verify and export checkpoints written by acx_save_state\n"
    "(the format: docs/checkpoint-format.md).\n"
    "\n"
    "subcommands:\n"
    "  info     summarize a checkpoint: step, world size, parameters, datasets\n"
    "  verify   read every dataset and check its checksum (exit 1 if damaged)\n"
    "  export   write the model's parameters as safetensors or HDF5\n"
    "\n"
    "Run 'acx ckpt <subcommand> --help' for its options.\n";

static int cmd_ckpt(int argc, char **argv) {
    if (argc < 2) {
        fputs(ckpt_usage, stderr);
        return EXIT_USAGE;
    }
    if (is_help(argv[1])) {
        fputs(ckpt_usage, stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "info") == 0 || strcmp(argv[1], "verify") == 0 ||
        strcmp(argv[1], "export") == 0)
        return cmd_ckpt_sub(argc - 1, argv + 1);
    return usage_error("ckpt", argv[1][0] == '-' ? "unknown option '%s'"
                                                 : "unknown subcommand '%s'",
                       argv[1]);
}

/* ---- the command table ---- */

typedef struct tool_command {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the command's name */
    const char *summary;               /* one line for `acx --help` */
} tool_command_t;

static int cmd_help(int argc, char **argv);
int cmd_slurm(int argc, char **argv); /* tools/slurm_cmd.c */

/* In the order `acx --help` lists them. */
static const tool_command_t commands[] = {
    {"version", cmd_version, "print the acx version and the MPI library it runs on"},
    {"config", cmd_config, "show the resolved configuration and where each value came from"},
    {"data", cmd_data, "prepare datasets (data import-idx: IDX files to HDF5)"},
    {"ckpt", cmd_ckpt, "inspect, verify and export checkpoints (info, verify, export)"},
    {"slurm", cmd_slurm, "write and submit Slurm batch scripts (slurm sbatch)"},
    {"help", cmd_help, "show this text, or a command's usage (acx help <command>)"},
};
#define NUM_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void print_usage(FILE *f) {
    fputs("usage: acx <command> [<args>]\n"
          "\n"
          "The command-line tool of acx, an MPI-based training runtime.\n"
          "\n"
          "commands:\n",
          f);
    for (int k = 0; k < NUM_COMMANDS; k++)
        fprintf(f, "  %-10s %s\n", commands[k].name, commands[k].summary);
    fputs("\n"
          "Run 'acx <command> --help' for a command's usage; -h, --help alone show this.\n",
          f);
}

static const tool_command_t *find_command(const char *name) {
    for (int k = 0; k < NUM_COMMANDS; k++)
        if (strcmp(commands[k].name, name) == 0) return &commands[k];
    return NULL;
}

/* `acx help CMD [SUB...]` is `acx CMD [SUB...] --help`. */
static int cmd_help(int argc, char **argv) {
    if (argc < 2 || is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
        print_usage(stdout);
        return EXIT_OK;
    }
    const tool_command_t *cmd = find_command(argv[1]);
    if (cmd == NULL) return usage_error("", "unknown command '%s'", argv[1]);
    char *args[64];
    if (argc > 62) return usage_error("help", "%s", "too many arguments");
    int n = 0;
    for (int i = 1; i < argc; i++) args[n++] = argv[i];
    args[n++] = (char *)"--help";
    args[n] = NULL;
    return cmd->run(n, args);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return EXIT_USAGE;
    }
    if (is_help(argv[1])) {
        print_usage(stdout);
        return EXIT_OK;
    }
    const tool_command_t *cmd = find_command(argv[1]);
    if (cmd == NULL)
        return usage_error("", argv[1][0] == '-' ? "unknown option '%s'" : "unknown command '%s'",
                           argv[1]);
    return cmd->run(argc - 1, argv + 1);
}

/*
 * cli/acx.c — the `acx` command: a dispatcher over subcommands.
 *
 * Owns: the command table, usage texts and exit codes of the command line
 * tool (walking argv: cli/args.c). Here: `acx version`, `acx config
 * show|doc`, `acx data import-idx|import-text`, `acx ckpt info|verify|export` and
 * `acx estimate-memory`; `acx launch` is in cli/launch.c, `acx env` and
 * `acx config default` (and the questions of a bare `acx config`) in
 * cli/env.c, `acx slurm` in cli/slurm.c. The top-level help lists exactly
 * the table, so it never advertises a command that does not exist.
 * Leaves to others: all real work. This is the library's top layer (cli/):
 * it may use every layer below; the `acx` program (tools/acx.c) calls
 * acx_cli_main (acx/cli.h) and links libacx.so.
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
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acx/acx.h"
#include "acx/cli.h"
#include "base/settings.h"
#include "sharding/plan.h"
#include "io/checkpoint.h"
#include "io/ckpt_crc.h"
#include "cli/cli.h"

/* ---- shared helpers ---- */

/* A usage error: "acx <where>: <what>" and a hint at the right --help. */
int usage_error(const char *where, const char *fmt, const char *arg) {
    fprintf(stderr, "acx%s%s: ", where[0] ? " " : "", where);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'acx%s%s --help' for usage.\n", where[0] ? " " : "", where);
    return EXIT_USAGE;
}

/* A failed acx call: the library's own message, which names file:line, the
 * file and what was expected. */
int acx_failure(acx_status_t status) {
    const char *msg = acx_last_error();
    fprintf(stderr, "acx: %s\n", msg[0] ? msg : acx_status_string(status));
    return EXIT_FAIL;
}

/* ---- acx version ---- */

static const char version_usage[] =
    "usage: acx version\n"
    "\n"
    "Print the acx version, the MPI library acx runs on (the first line of\n"
    "MPI_Get_library_version) and the library that computes checkpoint\n"
    "CRC-32s (ISA-L when acx was built with it, else zlib). Does not start MPI.\n";

static int cmd_version(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(version_usage, stdout);
            return EXIT_OK;
        }
    }
    if (argc > 1)
        return usage_error("version",
                           argv[1][0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'",
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
    printf("checkpoint CRC-32: %s\n", acx_ckpt_crc_impl());
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
            fprintf(stderr, "acx: data import-idx: no %s.gz or %s in '%s'\n", bases[k], bases[k],
                    dir);
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
        return usage_error(where,
                           "give either DIR ('%s') or the --train-/--test- file options, "
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
        for (int k = 0; k < 4; k++)
            files[k] = paths[k][0] ? paths[k] : NULL;
    }

    acx_status_t status = acx_import_idx(files[0], files[1], files[2], files[3], out);
    if (status != ACX_OK) return acx_failure(status);
    printf("%s: ok (%s)\n", out, files[2] ? "train and test sets" : "train set only");
    return EXIT_OK;
}

/* ---- acx data import-text ---- */

static const char import_text_usage[] =
    "usage: acx data import-text TEXT -o OUT.h5 [--val-fraction F | --val-tokens N]\n"
    "       acx data import-text --tokens FILE [--dtype uint16|int32] [--vocab-size V]\n"
    "                            [--format auto|raw|llmc] -o OUT.h5\n"
    "                            [--val-fraction F | --val-tokens N]\n"
    "\n"
    "Write the token streams acx_token_loader_open reads: /train/tokens and the\n"
    "held-out /val/tokens (the END of the stream), 1-D, with attributes\n"
    "vocab_size and tokenizer.\n"
    "\n"
    "  TEXT               a UTF-8 text file, '-' = standard input: byte-level,\n"
    "                     every byte one token (vocab 256, stored uint16)\n"
    "  --tokens FILE      token ids another tokenizer wrote: a raw little-endian\n"
    "                     array of --dtype, or llm.c's .bin (256 x int32 header,\n"
    "                     magic 20240520, version 1 = uint16; recognized by it)\n"
    "  --dtype T          uint16 (default) or int32: the raw file's element type\n"
    "  --format L         auto (default: llm.c when the file starts with its\n"
    "                     magic), raw (no header ever), llmc (header required)\n"
    "  --vocab-size V     the tokenizer's vocabulary (default: largest id + 1);\n"
    "                     every id must be below it\n"
    "  --val-fraction F   share held out, 0 <= F < 1 (default 0.1; 0: no /val)\n"
    "  --val-tokens N     hold out exactly N tokens instead\n"
    "  -o, --output FILE  the HDF5 file (written to FILE.tmp, then renamed)\n"
    "\n"
    "Exit status: 0 imported, 1 the import failed, 2 usage error.\n";

static int cmd_data_import_text(int argc, char **argv) {
    static const char where[] = "data import-text";
    acx_import_text_options_t o = ACX_IMPORT_TEXT_OPTIONS_DEFAULT;
    const char *out = NULL, *text = NULL, *tokens = NULL, *dtype = NULL, *format = NULL;
    int have_fraction = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL;
        int r;
        if (is_help(arg)) {
            fputs(import_text_usage, stdout);
            return EXIT_OK;
        }
        if (arg[0] != '-' || arg[1] == '\0') { /* "-" is standard input */
            if (text != NULL) return usage_error(where, "unexpected argument '%s'", arg);
            text = arg;
            continue;
        }
        const char *names[] = {"--output",       "--tokens",     "--dtype", "--vocab-size",
                               "--val-fraction", "--val-tokens", "--format"};
        int k;
        for (k = 0; k < 7; k++)
            if ((r = take_option(argc, argv, &i, names[k], k == 0 ? "-o" : NULL, &value)) != 0)
                break;
        if (k == 7) return usage_error(where, "unknown option '%s'", arg);
        if (r < 0) return usage_error(where, "option '%s' needs a value", arg);
        char *end = NULL;
        errno = 0;
        switch (k) {
        case 0: out = value; break;
        case 1: tokens = value; break;
        case 2: dtype = value; break;
        case 3:
            o.vocab_size = strtoll(value, &end, 10);
            if (errno || *end || end == value || o.vocab_size < 1)
                return usage_error(where, "--vocab-size '%s': expected an integer >= 1", value);
            break;
        case 4:
            o.val_fraction = strtod(value, &end);
            if (errno || *end || end == value || !(o.val_fraction >= 0 && o.val_fraction < 1))
                return usage_error(where, "--val-fraction '%s': expected 0 <= F < 1", value);
            have_fraction = 1;
            break;
        case 6: format = value; break;
        default:
            o.val_tokens = strtoll(value, &end, 10);
            if (errno || *end || end == value || o.val_tokens < 0)
                return usage_error(where, "--val-tokens '%s': expected an integer >= 0", value);
            break;
        }
    }
    if ((text == NULL) == (tokens == NULL))
        return usage_error(where, "%s", "give either a TEXT file or --tokens FILE (one of them)");
    if (out == NULL) return usage_error(where, "%s", "missing -o OUT.h5");
    if (have_fraction && o.val_tokens >= 0)
        return usage_error(where, "%s", "--val-fraction and --val-tokens exclude each other");
    if (text != NULL && (dtype != NULL || o.vocab_size > 0 || format != NULL))
        return usage_error(where, "%s",
                           "--dtype, --vocab-size and --format go with --tokens (text is "
                           "byte-level)");
    if (format != NULL) {
        static const char *const formats[] = {"auto", "raw", "llmc"};
        o.format = -1;
        for (int f = 0; f < 3; f++)
            if (strcmp(format, formats[f]) == 0) o.format = f;
        if (o.format < 0)
            return usage_error(where, "--format '%s': expected auto, raw or llmc", format);
    }
    if (dtype != NULL) {
        if (strcmp(dtype, "uint16") == 0)
            o.dtype = ACX_DTYPE_UINT16;
        else if (strcmp(dtype, "int32") == 0)
            o.dtype = ACX_DTYPE_INT32;
        else
            return usage_error(where, "--dtype '%s': expected uint16 or int32", dtype);
    }
    o.tokens = tokens != NULL;
    acx_status_t status = acx_import_text(tokens != NULL ? tokens : text, &o, out);
    if (status != ACX_OK) return acx_failure(status);
    printf("%s: ok\n", out);
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
    "  import-text  text (byte-level) or a tokenizer's token file into token streams\n"
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
    if (strcmp(argv[1], "import-text") == 0) return cmd_data_import_text(argc - 1, argv + 1);
    return usage_error(
        "data", argv[1][0] == '-' ? "unknown option '%s'" : "unknown subcommand '%s'", argv[1]);
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
        status = usage_error(
            where, arg[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", arg);
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
    for (int k = 0; k < n; k++)
        free(opts[k]);
    free(opts);
    return status;
}

/* ---- acx config doc ---- */

static const char config_doc_usage[] =
    "usage: acx config doc\n"
    "\n"
    "Print, as Markdown, the tables of docs/config.md that list every config\n"
    "key (environment variable, type, default, accepted values), the launch\n"
    "information keys and the environment variables that are not config keys.\n"
    "They come from the one registry of settings the configuration is read\n"
    "with (base/settings.c); docs/config.md holds this output between its\n"
    "generated-table markers, and tests/config_doc.test fails when the two\n"
    "differ.\n"
    "\n"
    "options:\n"
    "  -h, --help             show this text\n"
    "\n"
    "Exit status: 0 printed, 1 a write failed, 2 usage error.\n";

static int cmd_config_doc(int argc, char **argv) {
    static const char where[] = "config doc";
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(config_doc_usage, stdout);
            return EXIT_OK;
        }
        return usage_error(
            where, argv[i][0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", argv[i]);
    }
    if (acx_settings_write_doc(stdout) != 0 || fflush(stdout) != 0) {
        fprintf(stderr, "acx: config doc: cannot write standard output\n");
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ---- acx config ---- */

static const char config_usage[] =
    "usage: acx config <subcommand> [<args>]\n"
    "\n"
    "Inspect acx's configuration (keys, files, environment: docs/config.md).\n"
    "\n"
    "Without a subcommand, on a terminal: ask a few questions (processes,\n"
    "mixed precision, sharding, gradient accumulation, project directory) and\n"
    "write the answers as the default config file\n"
    "(~/.config/acx/default_config.yaml; --output FILE, --force to replace).\n"
    "\n"
    "subcommands:\n"
    "  show      print the resolved configuration and where each value came from\n"
    "  default   write a default config file without asking\n"
    "  doc       print the key and environment tables of docs/config.md\n"
    "\n"
    "Run 'acx config <subcommand> --help' for its options.\n";

static int cmd_config(int argc, char **argv) {
    if (argc >= 2 && is_help(argv[1])) {
        fputs(config_usage, stdout);
        return EXIT_OK;
    }
    if (argc < 2 || argv[1][0] == '-') return cmd_config_interactive(argc, argv);
    if (strcmp(argv[1], "show") == 0) return cmd_config_show(argc - 1, argv + 1);
    if (strcmp(argv[1], "default") == 0) return cmd_config_default(argc - 1, argv + 1);
    if (strcmp(argv[1], "doc") == 0) return cmd_config_doc(argc - 1, argv + 1);
    return usage_error(
        "config", argv[1][0] == '-' ? "unknown option '%s'" : "unknown subcommand '%s'", argv[1]);
}

/* ---- acx ckpt ---- */

/* acx ckpt info's text, with one change: the file's epoch attribute counts
 * from 0 (the data loader's index), people and acx-fmnist ("epoch 2:
 * train_loss ...") count from 1, so the summary line shows the epoch the
 * checkpoint was saved in as acx-fmnist names it, and the stored value
 * beside it. */
static void print_ckpt_info(const char *text) {
    for (const char *line = text; *line != '\0';) {
        const char *nl = strchr(line, '\n');
        size_t len = nl != NULL ? (size_t)(nl - line) + 1 : strlen(line);
        long long epoch;
        char rest;
        if (strncmp(line, "epoch: ", 7) == 0 && sscanf(line + 7, "%lld%c", &epoch, &rest) == 2 &&
            rest == '\n' && epoch >= 0)
            printf("epoch: %lld (counting from 1, as acx-fmnist prints it; stored 0-based: %lld)\n",
                   epoch + 1, epoch);
        else
            fwrite(line, 1, len, stdout);
        line += len;
    }
}

static const char ckpt_info_usage[] =
    "usage: acx ckpt info PATH\n"
    "\n"
    "Summarize a checkpoint written by acx_save_state: format version, step,\n"
    "epoch (counting from 1), world size, sharding strategy and mixed precision\n"
    "at save, the number of parameters and their elements, the file size, and\n"
    "every dataset with its dtype, shape and checksum. PATH is a checkpoint\n"
    "file, or a directory holding a 'latest' file (e.g. PROJECT_DIR/checkpoints).\n"
    "Single process; no launcher needed.\n"
    "\n"
    "options:\n"
    "  -h, --help             show this text\n"
    "\n"
    "Exit status: 0 shown, 1 not a readable acx checkpoint, 2 usage error.\n";

static const char ckpt_verify_usage[] =
    "usage: acx ckpt verify PATH [--allow-unverified]\n"
    "\n"
    "Read every object header and attribute of a checkpoint (HDF5 checks their\n"
    "checksums) and every dataset completely, checking its CRC-32 blocks (or,\n"
    "in format version 1, its chunks' Fletcher-32), and check the structure\n"
    "(format name and version, the step attribute, the /model group). Prints\n"
    "'PATH: ok' on success; on failure the message says what is damaged and\n"
    "where. A dataset without any checksum fails unless --allow-unverified.\n"
    "Datasets that need an HDF5 filter plugin, or are virtual or external,\n"
    "fail: acx never loads plugins. PATH is a checkpoint file, a `latest`\n"
    "pointer, or a directory: a checkpoints directory (or a project directory\n"
    "holding checkpoints/) has EVERY checkpoint in it (*.h5) verified, one line\n"
    "each ('FILE: ok' or 'FILE: DAMAGED: why'), then a count. Single process.\n"
    "\n"
    "options:\n"
    "  --allow-unverified     read datasets without any checksum, with a warning\n"
    "  -h, --help             show this text\n"
    "\n"
    "Exit status: 0 intact (every one, for a directory), 1 damaged or\n"
    "unreadable (any one), 2 usage error.\n";

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

/* ---- acx ckpt verify ---- */

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The checkpoint files of directory `dir`: every regular *.h5 whose name
 * does not start with '.' (a save in progress writes a hidden temporary),
 * sorted by name (step_%08lld.h5 sorts by step). *names_p is malloc'd, as
 * each name. Returns the count, or -1 with errno set. */
static int list_h5(const char *dir, char ***names_p) {
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    char **names = NULL;
    int n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len < 4 || strcmp(e->d_name + len - 3, ".h5") != 0) continue;
        char full[PATH_MAX];
        struct stat st;
        if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= (int)sizeof full ||
            stat(full, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(names, (size_t)cap * sizeof *names);
            if (grown == NULL) break;
            names = grown;
        }
        if ((names[n] = strdup(e->d_name)) == NULL) break;
        n++;
    }
    closedir(d);
    if (n > 0) qsort(names, (size_t)n, sizeof *names, cmp_names);
    *names_p = names;
    return n;
}

/* `acx ckpt verify PATH`: a file (or a `latest` pointer) is verified alone;
 * a directory — a checkpoints directory, or a project directory holding
 * checkpoints/ — has EVERY checkpoint in it verified, each named with its
 * verdict, so an older damaged checkpoint is not hidden by a good newest
 * one. Exit 0 only if every one is intact and there is at least one. */
static int ckpt_verify(const char *path, unsigned flags) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        acx_status_t status = acx_checkpoint_verify_flags(path, flags);
        if (status != ACX_OK) return acx_failure(status);
        printf("%s: ok\n", path);
        return EXIT_OK;
    }
    char dir[PATH_MAX], sub[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char **names = NULL;
    int n = list_h5(dir, &names);
    if (n == 0 && snprintf(sub, sizeof sub, "%s/checkpoints", path) < (int)sizeof sub &&
        stat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
        free(names);
        snprintf(dir, sizeof dir, "%s", sub); /* a project directory */
        n = list_h5(dir, &names);
    }
    if (n < 0) {
        fprintf(stderr, "acx: cannot read directory '%s': %s\n", dir, strerror(errno));
        return EXIT_FAILURE;
    }
    if (n == 0) {
        fprintf(stderr, "acx: no checkpoint (*.h5) in '%s'\n", dir);
        free(names);
        return EXIT_FAILURE;
    }
    int damaged = 0;
    for (int i = 0; i < n; i++) {
        char file[2 * PATH_MAX]; /* dir and a name that list_h5 found fit in PATH_MAX */
        snprintf(file, sizeof file, "%s/%s", dir, names[i]);
        if (acx_checkpoint_verify_flags(file, flags) == ACX_OK) {
            printf("%s: ok\n", file);
        } else {
            printf("%s: DAMAGED: %s\n", file, acx_last_error());
            damaged++;
        }
        fflush(stdout);
        free(names[i]);
    }
    free(names);
    printf("%s: %d checkpoint(s) verified, %d ok, %d damaged\n", dir, n, n - damaged, damaged);
    return damaged == 0 ? EXIT_OK : EXIT_FAILURE;
}

/* `acx ckpt info|verify|export ...`: argv[0] is the subcommand. */
static int cmd_ckpt_sub(int argc, char **argv) {
    const char *sub = argv[0];
    int is_export = strcmp(sub, "export") == 0;
    const char *usage = is_export                  ? ckpt_export_usage
                        : strcmp(sub, "info") == 0 ? ckpt_info_usage
                                                   : ckpt_verify_usage;
    char where[32];
    snprintf(where, sizeof where, "ckpt %s", sub);
    const char *path = NULL, *out = NULL, *format = NULL;
    int options_done = 0, allow_unverified = 0;

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
        if (!is_export && strcmp(sub, "verify") == 0 && strcmp(arg, "--allow-unverified") == 0) {
            allow_unverified = 1;
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
        print_ckpt_info(text);
        free(text);
        return EXIT_OK;
    }
    if (!is_export) return ckpt_verify(path, allow_unverified ? ACX_VERIFY_ALLOW_UNVERIFIED : 0);
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
    return usage_error(
        "ckpt", argv[1][0] == '-' ? "unknown option '%s'" : "unknown subcommand '%s'", argv[1]);
}

/* ---- acx estimate-memory ---- */

static const char estimate_memory_usage[] =
    "usage: acx estimate-memory (--params N | --model FILE.h5) --world-size W [options]\n"
    "\n"
    "Print the bytes of model state one rank holds under each sharding strategy,\n"
    "as acx allocates them (acx_memory_estimate): parameters, gradients, fp32\n"
    "master weights, optimizer state, transient buffers (gathered units and\n"
    "communication staging) and their total, with the ZeRO paper's figure for\n"
    "mixed-precision Adam below. Activations, the data loader and MPI's own\n"
    "buffers are not counted. This is the host layout: compute copies and\n"
    "full gradients are float32 even under bf16/fp16 (16-bit buffers only\n"
    "carry communication), so mixed precision holds more than the paper's\n"
    "no_shard figure. The formulas, and how they differ from the paper's:\n"
    "docs/memory.md. Does not start MPI.\n"
    "\n"
    "the model (one of):\n"
    "  --params N             N parameter elements; a suffix K, M, B or T (10^3,\n"
    "                         10^6, 10^9, 10^12), with a fraction if you like:\n"
    "                         400M, 1.5B\n"
    "  --model FILE.h5        an acx checkpoint (its float datasets under /model)\n"
    "                         or weights file (root attribute format =\n"
    "                         \"acx-weights\": its float datasets). A unit is the\n"
    "                         parameters whose names share the part before the\n"
    "                         first '.' (fc1.weight and fc1.bias form fc1), and\n"
    "                         shards are padded to whole rows as acx pads them\n"
    "\n"
    "options:\n"
    "  --world-size W         ranks (required)\n"
    "  --strategy S           no_shard, shard_grad_op, full_shard, hybrid_shard,\n"
    "                         or all: every strategy side by side (default all)\n"
    "  --mixed-precision MP   no, bf16 or fp16 (default no)\n"
    "  --reduce-dtype RD      fp32, bf16 or fp16: the dtype gradients are reduced\n"
    "                         in, independent of MP (default fp32)\n"
    "  --optimizer OPT        adamw or adam (2 fp32 states per element),\n"
    "                         sgd-momentum (1) or sgd (0) (default adamw)\n"
    "  --ranks-per-node R     hybrid_shard's shard group, a divisor of W\n"
    "                         (default W: one node)\n"
    "  --limit-all-gathers G  units gathered at once under full_shard and\n"
    "                         hybrid_shard; 0 = no cap (default 2). Printed;\n"
    "                         the estimate no longer depends on it (acx\n"
    "                         prefetches one unit ahead)\n"
    "  --largest-unit N       elements of the largest unit, with --params, same\n"
    "                         suffixes (default P/8 rounded up: eight equal units)\n"
    "  --shared-numel N       elements of the units that have shared units\n"
    "                         (acx_model_add_shared_unit: tied parameters, such as\n"
    "                         an embedding reused by the output layer), summed;\n"
    "                         same suffixes, 0..P (default 0). Their full gradient\n"
    "                         buffers stay from the first use's backward to the\n"
    "                         last: 4*N more gradient bytes under the sharded\n"
    "                         strategies\n"
    "  --bytes                exact byte counts instead of B/KiB/MiB/GiB/TiB with\n"
    "                         two decimals\n"
    "  -h, --help             show this text\n"
    "\n"
    "A long option's value may also follow '=' (--params=7B).\n"
    "Exit status: 0 printed, 1 the model file could not be read or its byte\n"
    "counts overflow, 2 usage error.\n";

/* "400M", "1.5B", "7000": a count with an optional fraction and a K/M/B/T
 * suffix (powers of ten, the way model sizes are quoted); the value must be
 * a whole number that fits int64. Returns 0 and sets *n_p, or -1. */
static int parse_count(const char *s, int64_t *n_p) {
    int64_t whole = 0, frac = 0, frac_scale = 1, scale = 1;
    const char *p = s;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (whole > (INT64_MAX - 9) / 10) return -1;
        whole = whole * 10 + (*p - '0');
    }
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
            if (frac_scale > INT64_MAX / 100) return -1; /* 17 decimals are plenty */
            frac = frac * 10 + (*p - '0');
            frac_scale *= 10;
        }
    }
    if (digits == 0) return -1;
    switch (*p) {
    case 'k':
    case 'K':
        scale = INT64_C(1000);
        p++;
        break;
    case 'm':
    case 'M':
        scale = INT64_C(1000000);
        p++;
        break;
    case 'b':
    case 'B':
        scale = INT64_C(1000000000);
        p++;
        break;
    case 't':
    case 'T':
        scale = INT64_C(1000000000000);
        p++;
        break;
    default: break;
    }
    if (*p != '\0') return -1;
    /* frac / frac_scale * scale, both powers of ten: cancel common tens.
     * "1.5B" leaves 5 * 10^8; "1.5" leaves 5 / 10, not a whole element. */
    int64_t fs = frac_scale, sc = scale, n;
    while (fs > 1 && sc > 1) {
        fs /= 10;
        sc /= 10;
    }
    if (frac % fs != 0) return -1;
    if (__builtin_mul_overflow(whole, scale, &n) || __builtin_add_overflow(n, frac / fs * sc, &n))
        return -1;
    *n_p = n;
    return 0;
}

/* A decimal int >= min. Returns 0 and sets *v_p, or -1. */
static int parse_int(const char *s, int min, int *v_p) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || errno != 0 || *end != '\0' || v < min || v > INT_MAX) return -1;
    *v_p = (int)v;
    return 0;
}

/* ---- reading a model's tensor shapes from an HDF5 file ---- */

/* One float dataset: its name below the parameters' group, its elements
 * and its rows (io/checkpoint.h). */
typedef acx_ckpt_param_shape_t est_tensor_t;

typedef struct est_tensors {
    est_tensor_t *t;
    int count, cap;
} est_tensors_t;

static void est_tensors_free(est_tensors_t *l) {
    acx_ckpt_param_shapes_free(l->t, l->count);
    *l = (est_tensors_t){0};
}

/* Every float dataset of an acx checkpoint (under /model) or weights file
 * (the whole file) into *l; *kind_p says which (io/ckpt_scan.c reads the
 * file). Prints why and returns EXIT_FAIL when the file is not one of
 * them. */
static int est_read_model(const char *path, est_tensors_t *l, const char **kind_p) {
    acx_ckpt_param_shape_t *t = NULL;
    int count = 0;
    if (acx_ckpt_param_shapes(path, &t, &count, kind_p) != ACX_OK) {
        const char *msg = acx_last_error(), *sep = strstr(msg, ": ");
        fprintf(stderr, "acx: estimate-memory: %s\n", sep != NULL ? sep + 2 : msg);
        return EXIT_FAIL;
    }
    l->t = t;
    l->count = l->cap = count;
    return EXIT_OK;
}

/* The unit of a parameter: its name up to the first '.'. */
static size_t unit_len(const char *name) { return strcspn(name, "."); }

static int cmp_by_unit(const void *a, const void *b) {
    const est_tensor_t *x = a, *y = b;
    size_t lx = unit_len(x->name), ly = unit_len(y->name);
    int c = memcmp(x->name, y->name, lx < ly ? lx : ly);
    if (c != 0) return c;
    return (lx > ly) - (lx < ly);
}

/* ---- the model, as the estimate needs it ---- */

typedef struct est_input {
    int64_t numel, largest_unit;
    int num_units;
    const est_tensors_t *file; /* NULL for --params: shards are ceil(P / S) */
    char largest_name[128];    /* file: the largest unit's name */
} est_input_t;

/* Units from the tensors sorted by unit name: their count, the largest. */
static int est_units(est_tensors_t *l, est_input_t *in) {
    qsort(l->t, (size_t)l->count, sizeof *l->t, cmp_by_unit);
    in->numel = 0;
    in->largest_unit = 0;
    in->num_units = 0;
    for (int k = 0; k < l->count;) {
        int64_t sum = 0;
        int j = k;
        for (; j < l->count && cmp_by_unit(&l->t[k], &l->t[j]) == 0; j++) {
            if (__builtin_add_overflow(sum, l->t[j].numel, &sum)) return -1;
        }
        if (__builtin_add_overflow(in->numel, sum, &in->numel)) return -1;
        if (sum > in->largest_unit || in->num_units == 0) {
            in->largest_unit = sum;
            snprintf(in->largest_name, sizeof in->largest_name, "%.*s", (int)unit_len(l->t[k].name),
                     l->t[k].name);
        }
        in->num_units++;
        k = j;
    }
    return 0;
}

/* The largest rank's shard under S ranks: rank 0 owns ceil(R/S) rows of
 * every parameter (the dim-0 rule, sharding/plan.h), so it holds the most. */
static int64_t est_shard_numel(const est_tensors_t *l, int64_t S) {
    int64_t sh = 0;
    for (int k = 0; k < l->count; k++) {
        const est_tensor_t *t = &l->t[k];
        if (t->rows > 0) sh += acx_plan_rows_per_rank(t->rows, S) * (t->numel / t->rows);
    }
    return sh;
}

/* ---- printing ---- */

static const char *const est_strategy_names[4] = {"no_shard", "shard_grad_op", "full_shard",
                                                  "hybrid_shard"};
static const char *const est_row_names[7] = {
    "params", "grads", "master weights", "optimizer state", "transient", "total", "ZeRO paper"};

/* bytes as text: exact, or in binary units with two decimals. */
static void est_format_bytes(int64_t b, int exact, char *buf, size_t n) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (b < 0) {
        snprintf(buf, n, "-");
        return;
    }
    if (exact || b < 1024) {
        snprintf(buf, n, exact ? "%lld" : "%lld B", (long long)b);
        return;
    }
    double v = (double)b / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, n, "%.2f %s", v, units[u]);
}

/* ceil(a * b / c) for the paper's figures, in 128-bit (a*b may pass int64
 * even when the result does not). -1 if the result does not fit. */
static int64_t est_paper_div(int64_t a, int64_t b, int64_t c) {
    __int128 v = ((__int128)a * b + c - 1) / c;
    return v > INT64_MAX ? -1 : (int64_t)v;
}

static int cmd_estimate_memory(int argc, char **argv) {
    static const char where[] = "estimate-memory";
    const char *params = NULL, *model_path = NULL, *largest = NULL;
    const char *strategy = NULL, *mp = NULL, *reduce = NULL, *optimizer = NULL;
    const char *world = NULL, *rpn = NULL, *limit = NULL, *shared = NULL;
    int exact = 0;

    /* value-taking options, in the usage's order */
    struct {
        const char *name, *meta;
        const char **value;
    } opts[] = {
        {"--params", "N", &params},           {"--model", "FILE", &model_path},
        {"--world-size", "W", &world},        {"--strategy", "S", &strategy},
        {"--mixed-precision", "MP", &mp},     {"--reduce-dtype", "RD", &reduce},
        {"--optimizer", "OPT", &optimizer},   {"--ranks-per-node", "R", &rpn},
        {"--limit-all-gathers", "G", &limit}, {"--largest-unit", "N", &largest},
        {"--shared-numel", "N", &shared},
    };
    const int num_opts = (int)(sizeof opts / sizeof opts[0]);

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL;
        if (is_help(arg)) {
            fputs(estimate_memory_usage, stdout);
            return EXIT_OK;
        }
        if (strcmp(arg, "--bytes") == 0) {
            exact = 1;
            continue;
        }
        int matched = 0;
        for (int k = 0; k < num_opts && !matched; k++) {
            int r = take_option(argc, argv, &i, opts[k].name, NULL, &value);
            if (r == 0) continue;
            matched = 1;
            if (r < 0) {
                fprintf(stderr, "acx %s: option '%s' needs a value (%s)\n", where, opts[k].name,
                        opts[k].meta);
                fprintf(stderr, "Run 'acx %s --help' for usage.\n", where);
                return EXIT_USAGE;
            }
            if (*opts[k].value != NULL)
                return usage_error(where, "option '%s' given twice", opts[k].name);
            *opts[k].value = value;
        }
        if (!matched)
            return usage_error(
                where, arg[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", arg);
    }

    /* ---- check every value, naming the option and what it expects ---- */
    char msg[512];
#define EST_BAD(...)                                                                               \
    do {                                                                                           \
        snprintf(msg, sizeof msg, __VA_ARGS__);                                                    \
        return usage_error(where, "%s", msg);                                                      \
    } while (0)

    if ((params == NULL) == (model_path == NULL))
        EST_BAD("%s", params ? "give either --params N or --model FILE, not both"
                             : "missing --params N or --model FILE (the model's size)");
    if (world == NULL) EST_BAD("missing --world-size W (the number of ranks)");
    int W, R, G = 2;
    if (parse_int(world, 1, &W) != 0)
        EST_BAD("invalid --world-size '%s' (expected an integer >= 1)", world);
    R = W;
    if (rpn != NULL) {
        if (parse_int(rpn, 1, &R) != 0)
            EST_BAD("invalid --ranks-per-node '%s' (expected an integer >= 1 dividing "
                    "--world-size %d)",
                    rpn, W);
        if (W % R != 0)
            EST_BAD("invalid --ranks-per-node '%s' (expected a divisor of --world-size %d)", rpn,
                    W);
    }
    if (limit != NULL && parse_int(limit, 0, &G) != 0)
        EST_BAD("invalid --limit-all-gathers '%s' (expected an integer >= 0; 0 = no cap)", limit);

    int first = 0, last = 3; /* strategies shown */
    if (strategy != NULL && strcmp(strategy, "all") != 0) {
        first = -1;
        for (int s = 0; s < 4; s++)
            if (strcasecmp(strategy, est_strategy_names[s]) == 0) first = last = s;
        if (first < 0)
            EST_BAD("invalid --strategy '%s' (expected no_shard, shard_grad_op, full_shard, "
                    "hybrid_shard or all)",
                    strategy);
    }
    int mixed = ACX_MP_NO;
    if (mp != NULL) {
        if (strcmp(mp, "no") == 0)
            mixed = ACX_MP_NO;
        else if (strcmp(mp, "bf16") == 0)
            mixed = ACX_MP_BF16;
        else if (strcmp(mp, "fp16") == 0)
            mixed = ACX_MP_FP16;
        else
            EST_BAD("invalid --mixed-precision '%s' (expected no, bf16 or fp16)", mp);
    }
    int reduce_dtype = ACX_REDUCE_FP32;
    if (reduce != NULL) {
        if (strcmp(reduce, "fp32") == 0)
            reduce_dtype = ACX_REDUCE_FP32;
        else if (strcmp(reduce, "bf16") == 0)
            reduce_dtype = ACX_REDUCE_BF16;
        else if (strcmp(reduce, "fp16") == 0)
            reduce_dtype = ACX_REDUCE_FP16;
        else
            EST_BAD("invalid --reduce-dtype '%s' (expected fp32, bf16 or fp16)", reduce);
    }
    int states = 2, adam = 1;
    if (optimizer != NULL) {
        if (strcmp(optimizer, "adamw") == 0 || strcmp(optimizer, "adam") == 0)
            states = 2;
        else if (strcmp(optimizer, "sgd-momentum") == 0)
            states = 1, adam = 0;
        else if (strcmp(optimizer, "sgd") == 0)
            states = 0, adam = 0;
        else
            EST_BAD("invalid --optimizer '%s' (expected adamw, adam, sgd or sgd-momentum)",
                    optimizer);
    }

    est_input_t in = {0};
    est_tensors_t tensors = {0};
    const char *file_kind = "";
    if (params != NULL) {
        if (parse_count(params, &in.numel) != 0)
            EST_BAD("invalid --params '%s' (expected a whole number of elements, e.g. 7000000, "
                    "400M, 1.5B)",
                    params);
        in.largest_unit = in.numel / 8 + (in.numel % 8 != 0);
        if (largest != NULL &&
            (parse_count(largest, &in.largest_unit) != 0 || in.largest_unit > in.numel ||
             (in.largest_unit == 0 && in.numel > 0)))
            EST_BAD("invalid --largest-unit '%s' (expected a whole number of elements, 1..%lld "
                    "(--params))",
                    largest, (long long)in.numel);
        int64_t units = in.largest_unit > 0
                            ? in.numel / in.largest_unit + (in.numel % in.largest_unit != 0)
                            : 0;
        if (units > INT_MAX)
            EST_BAD("invalid --largest-unit '%s' (--params %s makes more than %d units of it)",
                    largest, params, INT_MAX);
        in.num_units = (int)units;
    } else {
        if (largest != NULL)
            EST_BAD("--largest-unit goes with --params (with --model '%s' the file's units count)",
                    model_path);
        int rc = est_read_model(model_path, &tensors, &file_kind);
        if (rc != EXIT_OK) return rc;
        if (est_units(&tensors, &in) != 0) {
            fprintf(stderr, "acx: estimate-memory: the sizes in '%s' overflow int64\n", model_path);
            est_tensors_free(&tensors);
            return EXIT_FAIL;
        }
        in.file = &tensors;
    }
    int64_t shared_numel = 0;
    if (shared != NULL && (parse_count(shared, &shared_numel) != 0 || shared_numel > in.numel)) {
        est_tensors_free(&tensors);
        EST_BAD("invalid --shared-numel '%s' (expected a whole number of elements, 0..%lld (%s))",
                shared, (long long)in.numel, params != NULL ? "--params" : "the model's P");
    }
#undef EST_BAD

    /* ---- the estimates ---- */
    acx_memory_estimate_t est[4];
    int64_t paper[4];
    for (int s = first; s <= last; s++) {
        int64_t S = s == ACX_HYBRID_SHARD ? R : W;
        acx_memory_model_t m = {.numel = in.numel,
                                .largest_unit = in.largest_unit,
                                .shard_numel = in.file ? est_shard_numel(in.file, S) : 0,
                                .world_size = W,
                                .ranks_per_node = R,
                                .strategy = s,
                                .mixed_precision = mixed,
                                .optimizer_states = states,
                                .limit_all_gathers = G,
                                .num_units = in.num_units,
                                .reduce_dtype = reduce_dtype,
                                .shared_numel = shared_numel};
        acx_status_t st = acx_memory_estimate(&m, &est[s]);
        if (st != ACX_OK) {
            est_tensors_free(&tensors);
            return acx_failure(st);
        }
        /* Rajbhandari et al. (SC'20) figure 1, mixed-precision Adam (K = 12) */
        int64_t P = in.numel;
        if (mixed == ACX_MP_NO || !adam)
            paper[s] = -1;
        else if (s == ACX_NO_SHARD)
            paper[s] = est_paper_div(16, P, 1);
        else if (s == ACX_SHARD_GRAD_OP)
            paper[s] = est_paper_div(2, P, 1) < 0 || est_paper_div(14, P, S) < 0
                           ? -1
                           : est_paper_div(2, P, 1) + est_paper_div(14, P, S);
        else
            paper[s] = est_paper_div(16, P, S);
    }

    /* ---- what was assumed ---- */
    static const char *const mp_names[3] = {"no", "bf16", "fp16"};
    static const char *const rd_names[3] = {"fp32", "bf16", "fp16"};
    printf("Model state per rank (acx_memory_estimate; formulas in docs/memory.md)\n");
    if (in.file != NULL)
        printf("model:    %lld parameter elements (P) in %d tensors of %s '%s';\n"
               "          %d units, the largest %s with %lld elements\n",
               (long long)in.numel, tensors.count, file_kind, model_path, in.num_units,
               in.largest_name, (long long)in.largest_unit);
    else
        printf("model:    %lld parameter elements (P); %d units, the largest %lld elements%s\n",
               (long long)in.numel, in.num_units, (long long)in.largest_unit,
               largest ? "" : " (P/8)");
    if (shared_numel > 0)
        printf("          units with shared units %lld elements (tied parameters: their full\n"
               "          gradient buffers stay through backward)\n",
               (long long)shared_numel);
    printf("ranks:    world size %d (N)", W);
    if (last == ACX_HYBRID_SHARD) printf("; hybrid_shard shards over %d ranks per node (R)", R);
    printf("\ntraining: mixed precision %s, reduce dtype %s, optimizer %s (%d fp32 state%s per "
           "element),\n          limit_all_gathers %d%s\n\n",
           mp_names[mixed], rd_names[reduce_dtype], optimizer ? optimizer : "adamw", states,
           states == 1 ? "" : "s", G, G == 0 ? " (no cap)" : "");

    /* ---- the table: a row per category, a column per strategy ---- */
    char cell[7][4][48];
    int width[4];
    for (int s = first; s <= last; s++) {
        const acx_memory_estimate_t *e = &est[s];
        const int64_t v[7] = {e->params,    e->grads, e->master, e->optimizer,
                              e->transient, e->total, paper[s]};
        width[s] = (int)strlen(est_strategy_names[s]);
        for (int r = 0; r < 7; r++) {
            est_format_bytes(v[r], exact, cell[r][s], sizeof cell[r][s]);
            int len = (int)strlen(cell[r][s]);
            if (len > width[s]) width[s] = len;
        }
    }
    printf("%-16s", exact ? "bytes per rank" : "per rank");
    for (int s = first; s <= last; s++)
        printf("  %*s", width[s], est_strategy_names[s]);
    printf("\n");
    for (int r = 0; r < 7; r++) {
        printf("%-16s", est_row_names[r]);
        for (int s = first; s <= last; s++)
            printf("  %*s", width[s], cell[r][s]);
        printf("\n");
    }
    printf("\nZeRO paper: Rajbhandari et al. (SC'20), mixed-precision Adam: 16P (no_shard), "
           "2P + 14P/N\n(shard_grad_op), 16P/N (full_shard), 16P/R (hybrid_shard)%s\n",
           paper[first] < 0 ? "; not shown: it needs\n--mixed-precision bf16 or fp16 and "
                              "--optimizer adam or adamw"
                            : ".");
    /* A sharded strategy above no_shard surprises: say why. Not padding
     * (a shard is P/N rounded up to whole rows): sharding divides the state
     * at rest by N, but adds buffers sized by the largest unit U, which do
     * not shrink with N; when U is a large part of P they outweigh it. */
    if (first == ACX_NO_SHARD) {
        int worse = 0;
        for (int s = first + 1; s <= last; s++) {
            if (est[s].total <= est[ACX_NO_SHARD].total) continue;
            char t[48], n[48], tr[48];
            est_format_bytes(est[s].total, exact, t, sizeof t);
            est_format_bytes(est[ACX_NO_SHARD].total, exact, n, sizeof n);
            est_format_bytes(est[s].transient, exact, tr, sizeof tr);
            if (!worse++) printf("\n");
            printf("%s needs more than no_shard here (%s against %s; transient %s).\n",
                   est_strategy_names[s], t, n, tr);
        }
        if (worse) {
            char u4[48];
            est_format_bytes(in.largest_unit * 4, exact, u4, sizeof u4);
            printf("Why: sharding divides the state at rest by the ranks, but a sharded unit\n"
                   "also needs a full-size float32 gradient buffer (4*U = %s for the largest\n"
                   "unit, U = %lld elements, %.0f%% of P), the gathered unit in use and the\n"
                   "staging of one all-gather and one reduce-scatter (the transient row),\n"
                   "and these do not shrink with the world size. Not padding: a shard is P/N\n"
                   "rounded up to whole rows. With units this large next to P/N they outweigh\n"
                   "the saving: split the model into more, smaller units, or keep\n"
                   "no_shard (docs/memory.md).\n",
                   u4, (long long)in.largest_unit,
                   in.numel > 0 ? 100.0 * (double)in.largest_unit / (double)in.numel : 0.0);
        }
    }
    if (mixed != ACX_MP_NO)
        printf("On the host acx computes with float32 arrays of bf16/fp16-rounded values and\n"
               "float32 gradients (4 bytes where the paper counts 2), so no_shard and\n"
               "shard_grad_op hold more than the paper; 16-bit buffers only carry\n"
               "communication (docs/memory.md).\n");
    est_tensors_free(&tensors);
    return EXIT_OK;
}

/* ---- the command table ---- */

typedef struct tool_command {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the command's name */
    const char *summary;               /* one line for `acx --help` */
} tool_command_t;

static int cmd_help(int argc, char **argv);
int cmd_slurm(int argc, char **argv); /* cli/slurm.c */

/* In the order `acx --help` lists them. */
static const tool_command_t commands[] = {
    {"version", cmd_version, "print the acx version and the MPI library it runs on"},
    {"launch", cmd_launch, "run a program on N ranks (srun in Slurm, else mpirun)"},
    {"config", cmd_config, "write or show the configuration (default, show; questions)"},
    {"env", cmd_env, "versions, resolved configuration and launcher: for bug reports"},
    {"data", cmd_data, "prepare datasets (import-idx: IDX to HDF5; import-text: token streams)"},
    {"ckpt", cmd_ckpt, "inspect, verify and export checkpoints (info, verify, export)"},
    {"estimate-memory", cmd_estimate_memory,
     "bytes of model state per rank under each sharding strategy"},
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
        fprintf(f, "  %-15s %s\n", commands[k].name, commands[k].summary);
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
    for (int i = 1; i < argc; i++)
        args[n++] = argv[i];
    args[n++] = (char *)"--help";
    args[n] = NULL;
    return cmd->run(n, args);
}

ACX_API int acx_cli_main(int argc, char **argv) {
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

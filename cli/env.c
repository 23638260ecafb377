/*
 * cli/env.c — `acx env` (what a bug report needs: versions, the resolved
 * configuration with each value's source, the launcher) and writing config
 * files: `acx config default` without questions, a bare `acx config` with
 * questions on a terminal.
 *
 * Owns: the texts these commands print and write, and the fake environment
 * the tools hand the config resolver (tool_env_*, also used by `acx
 * launch` to check its options).
 * Leaves to others: the keys, their defaults, parsing and sources
 * (base/config.c — every value printed or written here comes from
 * the resolver, and every file written is read back through it before the
 * command reports success), launch-environment detection
 * (launch/env.c), the launch command (launch/command.c).
 *
 * Output of `acx env`, one "key: value" per line, valid YAML as a whole:
 * first the versions and the machine, then the line
 *   # resolved configuration
 * after which every line loads back as a config file (`acx config show
 * --config FILE` resolves the same values), each value followed by a
 * comment naming its source ("# default", "# run.yaml:3", "# ACX_SEED").
 *
 * This file reports the CUDA and NCCL libraries when acx was built with
 * them (ACX_HAVE_CUDA / ACX_HAVE_NCCL: the one place outside the backends
 * that tests them, because reporting the build is its job). It loads them
 * with dlopen, so `acx` itself never links NCCL (a 200 MB library every
 * rank supervisor would otherwise map) and runs where the driver is absent.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>
#if ACX_HAVE_CUDA || ACX_HAVE_NCCL
#include <dlfcn.h>
#endif
#if ACX_HAVE_CUDA
#include <cuda_runtime_api.h> /* CUDART_VERSION: which libcudart soname to load */
#endif

#include "acx/acx.h"
#include "io/ckpt_crc.h"
#include "base/config_resolve.h"
#include "launch/env.h"
#include "launch/command.h"
#include "cli/cli.h"

/* ---- a fake environment for the config resolver ---- */

#define TOOL_ENV_MAX 16
static const char *tool_env_names[TOOL_ENV_MAX], *tool_env_values[TOOL_ENV_MAX];
static int tool_env_n, tool_env_alone;

void tool_env_reset(int alone) {
    tool_env_n = 0;
    tool_env_alone = alone;
}

void tool_env_set(const char *name, const char *value) {
    if (value == NULL || tool_env_n >= TOOL_ENV_MAX) return;
    tool_env_names[tool_env_n] = name;
    tool_env_values[tool_env_n++] = value;
}

const char *tool_env(const char *name) {
    for (int k = 0; k < tool_env_n; k++)
        if (strcmp(tool_env_names[k], name) == 0) return tool_env_values[k];
    return tool_env_alone ? NULL : getenv(name);
}

/* ---- YAML scalars ---- */

/* Words a YAML 1.1 reader (PyYAML, Accelerate) takes for a bool or null. */
static int yaml_special_word(const char *s) {
    static const char *const words[] = {"y",   "n",    "yes",   "no",   "on",
                                        "off", "true", "false", "null", "~"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasecmp(s, words[i]) == 0) return 1;
    return 0;
}

/* Write s as a YAML scalar: plain when a reader takes it back as the same
 * text (bools "true"/"false" stay plain: they are bools), else double-quoted. */
static void yaml_scalar(FILE *f, const char *s) {
    int plain = s[0] != '\0' && strchr("-?:,[]{}#&*!|>'\"%@` ", s[0]) == NULL &&
                s[strlen(s) - 1] != ' ' && strstr(s, ": ") == NULL && strstr(s, " #") == NULL &&
                s[strlen(s) - 1] != ':' &&
                (!yaml_special_word(s) || strcmp(s, "true") == 0 || strcmp(s, "false") == 0);
    for (const char *p = s; plain && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) plain = 0;
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void yaml_line(FILE *f, const char *key, const char *value) {
    fprintf(f, "%s: ", key);
    yaml_scalar(f, value);
    fputc('\n', f);
}

/* ---- acx env ---- */

static const char env_usage[] =
    "usage: acx env [--config FILE]\n"
    "\n"
    "Print what a bug report needs, as YAML \"key: value\" lines: the versions\n"
    "of acx, MPI, HDF5 and (when built with them) CUDA and NCCL; the machine;\n"
    "the launcher this process runs under and the one `acx launch` would use;\n"
    "then, after '# resolved configuration', every configuration key with its\n"
    "value and, as a comment, where the value came from. That part loads back\n"
    "as a config file (acx config show --config FILE gives the same values).\n"
    "Does not start MPI.\n"
    "\n"
    "options:\n"
    "  --config FILE          the config file, as for acx config show\n"
    "  -h, --help             show this text\n"
    "\n"
    "Exit status: 0 printed, 1 the configuration is invalid, 2 usage error.\n";

long tool_count_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

int tool_mpi_flavor(void) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS && strstr(lib, "Open MPI") == NULL &&
        (strstr(lib, "MPICH") != NULL || strstr(lib, "Intel(R) MPI") != NULL))
        return ACX_MPI_FLAVOR_MPICH;
    return ACX_MPI_FLAVOR_OPENMPI;
}

#if ACX_HAVE_CUDA
static void print_cuda(FILE *f) {
    char line[256];
    int n = snprintf(line, sizeof line, "built with %d.%d", CUDART_VERSION / 1000,
                     (CUDART_VERSION % 1000) / 10);
    /* The runtime of the same major version (its soname), else any. */
    char soname[64];
    snprintf(soname, sizeof soname, "libcudart.so.%d", CUDART_VERSION / 1000);
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) h = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(line + n, sizeof line - (size_t)n, "; runtime not loadable (%s)", soname);
    } else {
        int (*runtime_version)(int *) = (int (*)(int *))dlsym(h, "cudaRuntimeGetVersion");
        int (*driver_version)(int *) = (int (*)(int *))dlsym(h, "cudaDriverGetVersion");
        int (*device_count)(int *) = (int (*)(int *))dlsym(h, "cudaGetDeviceCount");
        int rt = 0, drv = 0, count = 0; /* cudaGetDeviceCount leaves it alone on error */
        if (runtime_version != NULL && runtime_version(&rt) == 0)
            n += snprintf(line + n, sizeof line - (size_t)n, "; runtime %d.%d", rt / 1000,
                          (rt % 1000) / 10);
        if (driver_version != NULL && driver_version(&drv) == 0 && drv > 0)
            n += snprintf(line + n, sizeof line - (size_t)n, "; driver %d.%d", drv / 1000,
                          (drv % 1000) / 10);
        else
            n += snprintf(line + n, sizeof line - (size_t)n, "; no driver");
        int err = device_count != NULL ? device_count(&count) : -1;
        if (err == 0)
            snprintf(line + n, sizeof line - (size_t)n, "; %d device(s)", count);
        else
            snprintf(line + n, sizeof line - (size_t)n, "; no device (cudaGetDeviceCount: %d)",
                     err);
        /* Not dlclose'd: the CUDA runtime does not support being unloaded. */
    }
    yaml_line(f, "cuda", line);
}
#endif

#if ACX_HAVE_NCCL
static void print_nccl(FILE *f) {
    char line[160];
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    int (*get_version)(int *) = h ? (int (*)(int *))dlsym(h, "ncclGetVersion") : NULL;
    int v = 0;
    if (get_version != NULL && get_version(&v) == 0 && v > 0) {
        /* NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9,
         * major*1000 + minor*100 + patch before. */
        int major = v >= 10000 ? v / 10000 : v / 1000;
        int minor = v >= 10000 ? (v / 100) % 100 : (v / 100) % 10;
        snprintf(line, sizeof line,
                 "built with NCCL; library %d.%d.%d (the NCCL backend: built, needs a CUDA "
                 "device and device_state: cuda; not yet run on a GPU)",
                 major, minor, v % 100);
    } else {
        snprintf(line, sizeof line, "built with NCCL; library libnccl.so.2 not loadable");
    }
    yaml_line(f, "nccl", line);
}
#endif

/* The config section: every key, then the launch information the file
 * gave, each with its source as a comment. Flat dotted keys
 * ("dataloader.drop_last") are what the resolver reads for sections. */
static void print_config(FILE *f, const acx_resolved_config_t *cfg) {
    char value[ACX_PATH_MAX];
    fprintf(f, "# resolved configuration: the lines below load back as a config file\n"
               "# (acx config show --config FILE); each comment says where the value came from\n");
    for (int i = 0; i < acx_config_num_keys(); i++) {
        acx_config_format_value(cfg, i, value, sizeof value);
        fprintf(f, "%s: ", acx_config_key_name(i));
        yaml_scalar(f, value);
        fprintf(f, "  # %s\n",
                cfg->origin[i].source == ACX_SRC_DEFAULT ? "default" : cfg->origin[i].where);
    }
    for (int i = 0; i < acx_config_num_info(); i++) {
        if (!acx_config_format_info(cfg, i, value, sizeof value)) continue;
        /* Launch information under a section (fsdp.backward_prefetch) exists
         * only in Accelerate's own layout, which an acx file does not take:
         * shown, but as a comment, so the section still loads back. */
        const char *name = acx_config_info_name(i);
        fprintf(f, "%s%s: ", strchr(name, '.') != NULL ? "# " : "", name);
        yaml_scalar(f, value);
        fprintf(f, "  # %s (launch information)\n", cfg->info_origin[i].where);
    }
}

int cmd_env(int argc, char **argv) {
    static const char where[] = "env";
    const char *config_file = NULL;
    cli_args_t a;
    cli_args_init(&a, argc, argv);
    while (cli_args_next(&a)) {
        const char *arg = a.arg;
        int r;
        if (cli_args_help(&a)) {
            fputs(env_usage, stdout);
            return EXIT_OK;
        }
        if ((r = cli_args_value(&a, "--config", NULL)) != 0) {
            if (r < 0) return usage_error(where, "option '%s' needs a FILE", arg);
            if (config_file != NULL) return usage_error(where, "option '%s' given twice", arg);
            config_file = a.value;
            continue;
        }
        return usage_error(where,
                           arg[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", arg);
    }
    acx_resolved_config_t *cfg = malloc(sizeof *cfg);
    if (cfg == NULL) {
        fprintf(stderr, "acx env: out of memory\n");
        return EXIT_FAIL;
    }
    /* Resolve first: an invalid configuration is the one failure, and then
     * nothing half-printed is left on stdout. */
    acx_status_t st = acx_config_resolve(NULL, config_file, 0, NULL, NULL, cfg);
    if (st != ACX_OK) {
        free(cfg);
        return acx_failure(st);
    }

    FILE *f = stdout;
    char buf[1024];
    fprintf(f, "# acx env: paste all of it into a bug report\n");
    yaml_line(f, "acx", acx_version());

    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        lib[strcspn(lib, "\r\n")] = '\0';
        yaml_line(f, "mpi", lib);
    } else {
        yaml_line(f, "mpi", "unknown (MPI_Get_library_version failed)");
    }
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    snprintf(buf, sizeof buf, "%u.%u.%u%s", maj, min, rel,
#ifdef H5_HAVE_PARALLEL
             " (parallel)"
#else
             " (serial)"
#endif
    );
    yaml_line(f, "hdf5", buf);
    yaml_line(f, "checkpoint_crc32", acx_ckpt_crc_impl());
#if ACX_HAVE_CUDA
    print_cuda(f);
#else
    yaml_line(f, "cuda", "not built (configure --with-cuda)");
#endif
#if ACX_HAVE_NCCL
    print_nccl(f);
#else
    yaml_line(f, "nccl", "not built (configure --with-nccl)");
#endif

    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(buf, sizeof buf, "%s %s %s", u.sysname, u.release, u.machine);
        yaml_line(f, "os", buf);
        yaml_line(f, "host", u.nodename);
    }
    snprintf(buf, sizeof buf, "%ld", tool_count_cpus());
    yaml_line(f, "cpus", buf);

    /* The launcher this process runs under (two lines at most: the
     * description, then its warnings). */
    acx_launch_env_t le;
    acx_launch_env_detect(NULL, &le);
    char desc[2048];
    acx_launch_env_format(&le, desc, sizeof desc);
    char *nl = strchr(desc, '\n');
    if (nl != NULL) *nl = '\0';
    yaml_line(f, "launch_environment", desc);
    if (nl != NULL) yaml_line(f, "launch_environment_warnings", le.warnings);
    /* the launcher `acx launch` would run here (launch/command.c decides) */
    acx_launch_host_t host = {tool_count_cpus(), geteuid() == 0, tool_mpi_flavor()};
    const char *launcher = acx_launch_launcher_name(&host, NULL);
    if (strcmp(launcher, "srun") == 0 && le.slurm_job_id > 0)
        snprintf(buf, sizeof buf, "srun --mpi=pmix (inside Slurm job %ld)", le.slurm_job_id);
    else if (strcmp(launcher, "srun") == 0) /* the id is in launch_environment_warnings */
        snprintf(buf, sizeof buf, "srun --mpi=pmix (inside a Slurm job)");
    else
        snprintf(buf, sizeof buf, "%s (no Slurm allocation)", launcher);
    yaml_line(f, "acx_launch_uses", buf);

    yaml_line(f, "config_file", cfg->config_file[0] ? cfg->config_file : "none");
    if (cfg->accelerate) yaml_line(f, "config_file_kind", "Accelerate default_config.yaml");
    if (cfg->warning[0] != '\0') yaml_line(f, "config_warning", cfg->warning);
    print_config(f, cfg);
    free(cfg);
    return fflush(f) == 0 ? EXIT_OK : EXIT_FAIL;
}

/* ---- writing a config file ---- */

/* The settings a written file holds, in its order, with the comment that
 * explains each. Values come from the resolver (its defaults, or the
 * answers given, checked by it); num_processes is the launch information
 * `acx launch` uses when -n is not given. */
static const struct {
    const char *key, *comment;
} written_keys[] = {
    {"mixed_precision", "no, bf16 or fp16"},
    {"sharding_strategy", "no_shard, shard_grad_op, full_shard or hybrid_shard"},
    {"gradient_accumulation_steps", "micro-batches per optimizer step"},
    {"seed", NULL},
    {"project_dir", "checkpoints and metrics go here"},
    {"log_level", "error, warn, info or debug"},
    {"collective_timeout", "seconds"},
};
#define NUM_WRITTEN ((int)(sizeof written_keys / sizeof written_keys[0]))

/* answers[k] is the value of written_keys[k] (NULL = the default), given
 * to the resolver as the key's environment variable (the registry's,
 * base/settings.h), so that a wrong answer is refused with the message an
 * environment variable gets. Resolved alone (no real environment, no other
 * file): the file holds exactly these settings. */
static acx_status_t resolve_answers(const char *const answers[NUM_WRITTEN],
                                    acx_resolved_config_t *cfg) {
    tool_env_reset(1);
    for (int k = 0; k < NUM_WRITTEN; k++) {
        const acx_setting_t *s = acx_config_key(acx_config_key_index(written_keys[k].key));
        if (s != NULL && s->env != NULL) tool_env_set(s->env, answers[k]);
    }
    acx_status_t st = acx_config_resolve(NULL, NULL, 0, NULL, tool_env, cfg);
    tool_env_reset(0);
    return st;
}

static void render_config(FILE *f, const acx_resolved_config_t *cfg, int num_processes,
                          const char *how) {
    fprintf(f,
            "# acx configuration, written by `%s` (acx %s).\n"
            "# Keys and values: docs/config.md. Precedence, lowest first: this file <\n"
            "# ACX_* environment variables (acx launch sets them from its options) <\n"
            "# --acx-KEY options < what the program sets.\n"
            "\n"
            "# Ranks `acx launch` starts outside Slurm when -n is not given.\n"
            "num_processes: %d\n",
            how, acx_version(), num_processes);
    char value[ACX_PATH_MAX];
    for (int k = 0; k < NUM_WRITTEN; k++) {
        int i = acx_config_key_index(written_keys[k].key);
        if (i < 0) continue; /* a key this version no longer has */
        acx_config_format_value(cfg, i, value, sizeof value);
        fprintf(f, "%s: ", written_keys[k].key);
        yaml_scalar(f, value);
        if (written_keys[k].comment != NULL) fprintf(f, "  # %s", written_keys[k].comment);
        fputc('\n', f);
    }
}

/* mkdir -p of path's parent directory. */
static int make_parent(const char *path) {
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return -1;
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(dir, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

static int default_path(char *buf, size_t size) {
    const char *home = getenv("HOME");
    if (home == NULL || home[0] == '\0') {
        fprintf(stderr, "acx config: HOME is not set; give --output FILE\n");
        return 0;
    }
    if ((size_t)snprintf(buf, size, "%s/.config/acx/default_config.yaml", home) >= size) {
        fprintf(stderr, "acx config: path too long\n");
        return 0;
    }
    return 1;
}

/* Write the file (or stdout for "-") via FILE.tmp and rename, then read it
 * back through the resolver. */
static int write_config(const char *path, const acx_resolved_config_t *cfg, int num_processes,
                        const char *how) {
    if (strcmp(path, "-") == 0) {
        render_config(stdout, cfg, num_processes, how);
        return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
    }
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (make_parent(path) != 0) {
        fprintf(stderr, "acx config: cannot create the directory of '%s': %s\n", path,
                strerror(errno));
        return EXIT_FAIL;
    }
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        fprintf(stderr, "acx config: cannot write '%s': %s\n", tmp, strerror(errno));
        return EXIT_FAIL;
    }
    render_config(f, cfg, num_processes, how);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "acx config: cannot write '%s': %s\n", path, strerror(errno));
        unlink(tmp);
        return EXIT_FAIL;
    }
    acx_resolved_config_t *back = malloc(sizeof *back);
    if (back == NULL) return EXIT_FAIL;
    tool_env_reset(1);
    acx_status_t st = acx_config_resolve(NULL, path, 0, NULL, tool_env, back);
    tool_env_reset(0);
    free(back);
    if (st != ACX_OK) {
        fprintf(stderr, "acx config: the file written does not load back (a bug): %s\n",
                acx_last_error());
        return EXIT_FAIL;
    }
    printf("wrote %s\n", path);
    return EXIT_OK;
}

/* The options both commands take. Returns EXIT_OK, EXIT_USAGE, or -1 for
 * --help (printed). */
static int parse_write_options(int argc, char **argv, const char *where, const char *usage,
                               const char **output_p, int *force_p) {
    cli_args_t a;
    cli_args_init(&a, argc, argv);
    while (cli_args_next(&a)) {
        const char *arg = a.arg;
        int r;
        if (cli_args_help(&a)) {
            fputs(usage, stdout);
            return -1;
        }
        if (cli_args_flag(&a, "--force", "-f")) {
            *force_p = 1;
            continue;
        }
        if ((r = cli_args_value(&a, "--output", "-o")) != 0) {
            if (r < 0) return usage_error(where, "option '%s' needs a FILE", arg);
            if (*output_p != NULL) return usage_error(where, "option '%s' given twice", arg);
            *output_p = a.value;
            continue;
        }
        return usage_error(where,
                           arg[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", arg);
    }
    return EXIT_OK;
}

/* ---- acx config default ---- */

static const char config_default_usage[] =
    "usage: acx config default [--output FILE] [--force]\n"
    "\n"
    "Write a config file with acx's defaults and num_processes set to the CPUs\n"
    "of this machine (what `acx launch` starts without -n), without asking.\n"
    "The default FILE is ~/.config/acx/default_config.yaml, which acx_init and\n"
    "`acx launch` read when neither --config nor ACX_CONFIG_FILE names another.\n"
    "An existing file is kept unless --force is given. The file is read back\n"
    "through the configuration resolver before this reports success.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE      the file to write ('-': standard output)\n"
    "  -f, --force            replace an existing FILE\n"
    "  -h, --help             show this text\n"
    "\n"
    "Exit status: 0 written, 1 not written (FILE exists, or cannot be\n"
    "written), 2 usage error.\n";

int cmd_config_default(int argc, char **argv) {
    const char *output = NULL;
    int force = 0;
    int rc =
        parse_write_options(argc, argv, "config default", config_default_usage, &output, &force);
    if (rc < 0) return EXIT_OK;
    if (rc != EXIT_OK) return rc;
    char path[PATH_MAX];
    if (output == NULL) {
        if (!default_path(path, sizeof path)) return EXIT_FAIL;
        output = path;
    }
    struct stat sb;
    if (strcmp(output, "-") != 0 && !force && stat(output, &sb) == 0) {
        fprintf(stderr, "acx config default: '%s' exists; use --force to replace it\n", output);
        return EXIT_FAIL;
    }
    const char *answers[NUM_WRITTEN] = {NULL};
    acx_resolved_config_t *cfg = malloc(sizeof *cfg);
    if (cfg == NULL) return EXIT_FAIL;
    acx_status_t st = resolve_answers(answers, cfg);
    rc = st != ACX_OK ? acx_failure(st)
                      : write_config(output, cfg, (int)tool_count_cpus(), "acx config default");
    free(cfg);
    return rc;
}

/* ---- acx config (questions) ---- */

static const char config_questions_usage[] =
    "usage: acx config [--output FILE] [--force]\n"
    "\n"
    "On a terminal: ask for the number of processes, mixed precision, sharding\n"
    "strategy, gradient accumulation steps and project directory (the default\n"
    "in brackets; Enter keeps it) and write them as a config file, by default\n"
    "~/.config/acx/default_config.yaml. Not on a terminal: use 'acx config\n"
    "default'. Subcommands: 'acx config --help'.\n";

/* One answer: the line typed, or def for an empty line. Returns 0 at EOF. */
static int ask(const char *question, const char *def, char *buf, size_t size) {
    printf("%s [%s]: ", question, def);
    fflush(stdout);
    if (fgets(buf, (int)size, stdin) == NULL) return 0;
    buf[strcspn(buf, "\r\n")] = '\0';
    size_t a = strspn(buf, " \t"), n = strlen(buf);
    while (n > a && (buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    memmove(buf, buf + a, n - a);
    buf[n - a] = '\0';
    if (buf[0] == '\0') snprintf(buf, size, "%s", def);
    return 1;
}

int cmd_config_interactive(int argc, char **argv) {
    const char *output = NULL;
    int force = 0;
    int rc = parse_write_options(argc, argv, "config", config_questions_usage, &output, &force);
    if (rc < 0) return EXIT_OK;
    if (rc != EXIT_OK) return rc;
    if (!isatty(STDIN_FILENO)) {
        fprintf(stderr, "acx config: standard input is not a terminal, so there is no one to ask.\n"
                        "Use 'acx config default [--output FILE]' to write a config file without "
                        "questions, or 'acx config show' to see the configuration.\n");
        return EXIT_USAGE;
    }
    char path[PATH_MAX];
    if (output == NULL) {
        if (!default_path(path, sizeof path)) return EXIT_FAIL;
        output = path;
    }
    acx_resolved_config_t *cfg = malloc(sizeof *cfg);
    if (cfg == NULL) return EXIT_FAIL;
    const char *answers[NUM_WRITTEN] = {NULL};
    if ((rc = resolve_answers(answers, cfg)) != ACX_OK) {
        rc = acx_failure((acx_status_t)rc);
        goto out;
    }

    /* The questions: key (NULL = num_processes), text. Each answer is
     * checked by the resolver at once and asked again when it is wrong. */
    static const struct {
        const char *key, *question;
    } questions[] = {
        {NULL, "How many processes (ranks) should acx launch start on this machine"},
        {"mixed_precision", "Mixed precision (no, bf16, fp16)"},
        {"sharding_strategy", "Sharding strategy (no_shard, shard_grad_op, full_shard, "
                              "hybrid_shard)"},
        {"gradient_accumulation_steps", "Gradient accumulation steps"},
        {"project_dir", "Project directory (checkpoints, metrics)"},
    };
    static char given[NUM_WRITTEN][ACX_PATH_MAX];
    int num_processes = (int)tool_count_cpus();
    for (size_t q = 0; q < sizeof questions / sizeof questions[0]; q++) {
        int k = -1;
        char def[ACX_PATH_MAX], line[ACX_PATH_MAX];
        if (questions[q].key == NULL) {
            snprintf(def, sizeof def, "%d", num_processes);
        } else {
            for (int j = 0; j < NUM_WRITTEN; j++)
                if (strcmp(written_keys[j].key, questions[q].key) == 0) k = j;
            acx_config_format_value(cfg, acx_config_key_index(questions[q].key), def, sizeof def);
        }
        for (;;) {
            if (!ask(questions[q].question, def, line, sizeof line)) {
                fprintf(stderr, "\nacx config: no answer (end of input); nothing written\n");
                rc = EXIT_FAIL;
                goto out;
            }
            if (k < 0) {
                char *end;
                errno = 0;
                long n = strtol(line, &end, 10);
                if (errno == 0 && *end == '\0' && n >= 1 && n <= INT_MAX) {
                    num_processes = (int)n;
                    break;
                }
                printf("  '%s' is not a number >= 1\n", line);
                continue;
            }
            snprintf(given[k], sizeof given[k], "%s", line);
            answers[k] = given[k];
            if (resolve_answers(answers, cfg) == ACX_OK) break;
            const char *why = strstr(acx_last_error(), "expected");
            printf("  '%s': %s\n", line, why ? why : acx_last_error());
            answers[k] = NULL;
        }
    }
    if (resolve_answers(answers, cfg) != ACX_OK) {
        rc = acx_failure(ACX_ERR_INVALID_CONFIG);
        goto out;
    }
    struct stat sb;
    if (strcmp(output, "-") != 0 && !force && stat(output, &sb) == 0) {
        char line[16];
        if (!ask("The file exists; replace it? (y/n)", "n", line, sizeof line) ||
            (line[0] != 'y' && line[0] != 'Y')) {
            printf("kept %s; nothing written\n", output);
            rc = EXIT_FAIL;
            goto out;
        }
    }
    rc = write_config(output, cfg, num_processes, "acx config");
out:
    free(cfg);
    return rc;
}

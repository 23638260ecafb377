/*
 * cli/slurm.c — `acx slurm sbatch`: write (and optionally submit) a
 * Slurm batch script that runs a program on every rank with `srun
 * --mpi=pmix`, stops it with a checkpoint before the time limit, requeues
 * it, and resumes it from that checkpoint (docs/slurm.md).
 *
 * Owns: the options, the script text and its shell quoting, and running
 * sbatch for --submit. Leaves to others: what the ranks do with the
 * settings the script exports (runtime/preempt.c: preemption.signals,
 * preemption.requeue, resume), and checking the acx settings, which
 * acx_config_describe does exactly as acx_init would.
 *
 * Why the script looks as it does. `#SBATCH --signal=B:USR1@S` makes Slurm
 * signal the batch shell alone, S seconds before the time limit; a shell
 * that is running srun in the foreground would only act on the signal once
 * srun has returned, i.e. too late. So srun runs in the background, the
 * shell waits for it, and a trap forwards USR1 to srun, which passes it on
 * to every task. `wait` returns early when a trapped signal arrives, hence
 * the loop that waits again until srun itself has ended. TERM is not
 * trapped: on a cancel or at the time limit Slurm signals the tasks itself.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acx/acx.h"
#include "base/settings.h"
#include "cli/args.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

#define MAX_EXTRA 32 /* --acx-KEY=VALUE and --sbatch options */

static const char sbatch_usage[] =
    "usage: acx slurm sbatch [options] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Write a Slurm batch script that runs PROGRAM on every rank with\n"
    "`srun --mpi=pmix`, asks the ranks to checkpoint and stop before the time\n"
    "limit (#SBATCH --signal=B:USR1@SECONDS, forwarded to srun by a trap),\n"
    "requeues the job once they have, and resumes it from that checkpoint\n"
    "(the ranks get ACX_PREEMPTION_REQUEUE=true and ACX_RESUME=auto). The\n"
    "program must be built on acx and stop when acx_preempted() (docs/slurm.md).\n"
    "\n"
    "options:\n"
    "  -N, --nodes N            nodes (default: num_machines of the config file, else 1)\n"
    "  --ntasks-per-node N      ranks per node (default: num_processes / num_machines\n"
    "                           of the config file, else 1)\n"
    "  -t, --time TIME          time limit as sbatch takes it (30, 2:00:00, 1-00:00:00)\n"
    "  -p, --partition NAME     partition (default: the cluster's default)\n"
    "  -J, --job-name NAME      job name (default: PROGRAM's base name)\n"
    "  --signal-before SECONDS  USR1 this long before the time limit (default 120,\n"
    "                           shorter than --time; 0 = no warning signal)\n"
    "  --no-requeue             stop with the checkpoint but do not requeue\n"
    "  --output FILE            job output, appended across requeues (default %x-%j.out)\n"
    "  --config FILE            acx config file for the ranks (ACX_CONFIG_FILE)\n"
    "  --acx-KEY=VALUE          an acx setting for the ranks, exported as ACX_KEY\n"
    "  --sbatch OPTION          one more #SBATCH line, e.g. --sbatch=--gres=gpu:4\n"
    "                           (repeatable)\n"
    "  -o, --out FILE           write the script to FILE (default: standard output)\n"
    "  --submit                 run sbatch on the script (written to --out, else to\n"
    "                           acx-sbatch-JOBNAME.sh) and print the job id\n"
    "  -h, --help               show this text\n"
    "\n"
    "The config file and --acx-* settings are checked as acx_init would check\n"
    "them before anything is written. Exit status: 0 written (and submitted),\n"
    "1 invalid settings or sbatch failed, 2 usage error.\n";

static const char slurm_usage[] =
    "usage: acx slurm <subcommand> [<args>]\n"
    "\n"
    "Run acx programs under Slurm (docs/slurm.md).\n"
    "\n"
    "subcommands:\n"
    "  sbatch   write (and submit) a batch script: srun --mpi=pmix, checkpoint\n"
    "           before the time limit, requeue, resume\n"
    "\n"
    "Run 'acx slurm <subcommand> --help' for its options.\n";

typedef struct sbatch_opts {
    long nodes, tasks_per_node, signal_before;
    const char *time, *partition, *job_name, *output, *config_file, *out;
    int requeue, submit;
    int n_acx, n_sbatch;
    const char *acx[MAX_EXTRA];    /* "--acx-KEY=VALUE" as given */
    const char *sbatch[MAX_EXTRA]; /* extra sbatch options */
    int argc;                      /* PROGRAM and its arguments */
    char **argv;
} sbatch_opts_t;

/* ---- helpers ---- */

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "acx slurm sbatch: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'acx slurm sbatch --help' for usage.\n");
    return EXIT_USAGE;
}

static int parse_count(const char *text, long min, long *value_p) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > INT_MAX) return 0;
    *value_p = v;
    return 1;
}

/* 1 when s holds a control character: a newline in a value written after
 * "#SBATCH --name=" would end the comment and run the rest as a command of
 * the batch script. */
/* A value that cannot go into an #SBATCH line: control characters (a
 * newline would start a new line) or a double quote (sbatch's quoting has
 * no escape for it). */
static int has_control(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == '"') return 1;
    return 0;
}

/* Digits only, at most 9 of them (so the sums below fit a long). */
static int parse_digits(const char *s, size_t n, long *v) {
    if (n == 0 || n > 9) return 0;
    long x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        x = 10 * x + (s[i] - '0');
    }
    *v = x;
    return 1;
}

/* Seconds of a Slurm time limit in one of sbatch's forms: M, M:S, H:M:S,
 * D-H, D-H:M, D-H:M:S. 0 for anything else ("0", UNLIMITED, a typo): sbatch
 * judges those itself. */
static long slurm_seconds(const char *t) {
    long days = -1, f[3];
    int n = 0;
    const char *p = t, *dash = strchr(t, '-');
    if (dash != NULL) {
        if (!parse_digits(t, (size_t)(dash - t), &days)) return 0;
        p = dash + 1;
    }
    for (;;) {
        size_t len = strcspn(p, ":");
        if (n == 3 || !parse_digits(p, len, &f[n])) return 0;
        n++;
        if (p[len] == '\0') break;
        p += len + 1;
    }
    if (days >= 0) /* D-H, D-H:M, D-H:M:S */
        return days * 86400 + f[0] * 3600 + (n > 1 ? f[1] * 60 : 0) + (n > 2 ? f[2] : 0);
    if (n == 1) return f[0] * 60;          /* M */
    if (n == 2) return f[0] * 60 + f[1];   /* M:S */
    return f[0] * 3600 + f[1] * 60 + f[2]; /* H:M:S */
}

/* Write s for a POSIX shell: bare when it is made of safe characters, else
 * in single quotes with each ' as '\''. */
static void put_quoted(FILE *f, const char *s) {
    int safe = s[0] != '\0';
    for (const char *p = s; *p && safe; p++)
        safe = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%",
                      *p) != NULL;
    if (safe) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = s; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

/* The value printed for `key` by acx_config_describe ("num_machines   2
 * file:3"), or 0 when the key is absent or has no value. */
static int described_value(const char *text, const char *key, char *buf, size_t n) {
    size_t klen = strlen(key);
    for (const char *line = text; line != NULL && *line; line = strchr(line, '\n')) {
        if (*line == '\n') line++;
        if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != '\t')) continue;
        const char *v = line + klen;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t len = strcspn(v, " \t\n");
        if (len == 0 || len >= n) return 0;
        memcpy(buf, v, len);
        buf[len] = '\0';
        return 1;
    }
    return 0;
}

/* The variable of the config key `key` (klen bytes), from the settings
 * registry (base/settings.c): the one place ACX_* names are spelled.
 * parse_args accepted only known keys, so the lookup finds one. */
static void env_name(const char *key, size_t klen, char *buf, size_t n) {
    char k[128];
    snprintf(k, sizeof k, "%.*s", (int)klen, key);
    int i = acx_config_option_index(k);
    snprintf(buf, n, "%s", i >= 0 && acx_config_key(i)->env ? acx_config_key(i)->env : "");
}

/* The variable of the config key named exactly `key`. */
static const char *key_env(const char *key) {
    return acx_config_key(acx_config_key_index(key))->env;
}

/* ---- the script ---- */

/* "#SBATCH --NAME=VALUE", the value in double quotes when it holds blanks:
 * sbatch splits an #SBATCH line at blanks outside quotes ("my job" unquoted
 * is refused at submission: "Invalid directive ... job"). Values with '"'
 * or control characters were refused by parse_args. */
static void put_directive(FILE *f, const char *name, const char *value) {
    const char *q = strpbrk(value, " \t") != NULL ? "\"" : "";
    fprintf(f, "#SBATCH %s=%s%s%s\n", name, q, value, q);
}

static void write_script(FILE *f, const sbatch_opts_t *o, const char *program) {
    time_t now = time(NULL);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, "#!/bin/bash\n");
    fprintf(f, "# Written by `acx slurm sbatch` (acx %s) at %s. Submit: sbatch FILE\n",
            acx_version(), stamp);
    fprintf(f, "# See docs/slurm.md: the ranks checkpoint and stop on USR1, the job is\n"
               "# requeued, and the next run resumes from the checkpoint.\n");
    put_directive(f, "--job-name", o->job_name);
    fprintf(f, "#SBATCH --nodes=%ld\n", o->nodes);
    fprintf(f, "#SBATCH --ntasks-per-node=%ld\n", o->tasks_per_node);
    if (o->time) put_directive(f, "--time", o->time);
    if (o->partition) put_directive(f, "--partition", o->partition);
    if (o->signal_before > 0) fprintf(f, "#SBATCH --signal=B:USR1@%ld\n", o->signal_before);
    fprintf(f, "#SBATCH %s\n", o->requeue ? "--requeue" : "--no-requeue");
    fprintf(f, "#SBATCH --open-mode=append\n");
    put_directive(f, "--output", o->output);
    for (int k = 0; k < o->n_sbatch; k++)
        fprintf(f, "#SBATCH %s\n", o->sbatch[k]);

    fprintf(f, "\n# acx settings of every rank (lowest precedence: the program's own win)\n");
    const char *signals = key_env("preemption.signals");
    fprintf(f, "export %s=${%s:-USR1,TERM}\n", signals, signals);
    fprintf(f, "export %s=%s\n", key_env("preemption.requeue"), o->requeue ? "true" : "false");
    fprintf(f, "export %s=auto\n", key_env("resume"));
    if (o->config_file) {
        fprintf(f, "export %s=", acx_env_name(ACX_ENV_CONFIG_FILE));
        put_quoted(f, o->config_file);
        fputc('\n', f);
    }
    for (int k = 0; k < o->n_acx; k++) {
        const char *key = o->acx[k] + 6, *eq = strchr(key, '=');
        char name[256];
        env_name(key, eq ? (size_t)(eq - key) : strlen(key), name, sizeof name);
        fprintf(f, "export %s=", name);
        put_quoted(f, eq ? eq + 1 : "true");
        fputc('\n', f);
    }

    /* The node's CPUs are known only where the script runs. Without
     * yielding, ranks that outnumber them busy-poll each other off the CPU:
     * 3x slower on the 2-core test machine (11,136 vs 32,117 samples/s). */
    fprintf(f, "\n# Ranks that outnumber this node's CPUs must yield while they wait, or\n"
               "# Open MPI's busy polling slows them down several times (docs/slurm.md);\n"
               "# mpirun does this itself, srun does not.\n");
    fprintf(f,
            "if [ %ld -gt \"$(getconf _NPROCESSORS_ONLN)\" ]; then\n"
            "    export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}\n"
            "fi\n",
            o->tasks_per_node);
    fprintf(f, "\necho \"acx: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on "
               "$SLURM_JOB_NODELIST, $(date -u +%%FT%%TZ)\"\n");
    fprintf(f, "\n# --signal=B:USR1 signals this shell only: srun runs in the background and\n"
               "# the trap passes USR1 on to it (srun forwards it to every task).\n");
    fprintf(f, "srun_pid=\ninterrupted=0\n");
    fprintf(f, "forward_usr1() {\n"
               "    interrupted=1\n"
               "    echo \"acx: USR1 at $(date -u +%%FT%%TZ): asking the ranks to checkpoint and "
               "stop\"\n"
               "    if [ -n \"$srun_pid\" ]; then kill -USR1 \"$srun_pid\"; fi\n"
               "}\n");
    fprintf(f, "trap forward_usr1 USR1\n\n");
    fprintf(f, "srun --mpi=pmix --kill-on-bad-exit=1 ");
    put_quoted(f, program);
    for (int i = 1; i < o->argc; i++) {
        fputc(' ', f);
        put_quoted(f, o->argv[i]);
    }
    fprintf(f, " &\nsrun_pid=$!\n");
    fprintf(f, "# wait returns early when the trap runs: wait again until srun has ended\n"
               "while :; do\n"
               "    interrupted=0\n"
               "    wait \"$srun_pid\"\n"
               "    rc=$?\n"
               "    [ \"$interrupted\" = 1 ] || break\n"
               "done\n");
    fprintf(f, "echo \"acx: srun exited $rc\"\n");
    fprintf(f, "exit \"$rc\"\n");
}

/* sbatch PATH: its output (the job id line) passes through. */
static int submit(const char *path) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "acx slurm sbatch: fork failed: %s\n", strerror(errno));
        return EXIT_FAIL;
    }
    if (pid == 0) {
        execlp("sbatch", "sbatch", path, (char *)NULL);
        fprintf(stderr, "acx slurm sbatch: cannot run sbatch: %s\n", strerror(errno));
        _exit(127);
    }
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return EXIT_OK;
    fprintf(stderr, "acx slurm sbatch: `sbatch %s` failed (exit %d)\n", path,
            WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus));
    return EXIT_FAIL;
}

/* ---- acx slurm sbatch ---- */

static int parse_sbatch(int argc, char **argv, sbatch_opts_t *o) {
    *o = (sbatch_opts_t){.nodes = -1,
                         .tasks_per_node = -1,
                         .signal_before = 120,
                         .output = "%x-%j.out",
                         .requeue = 1};
    cli_args_t args;
    cli_args_init(&args, argc, argv);
    int i = argc; /* PROGRAM's index once the options end */
    while (cli_args_next(&args)) {
        const char *a = args.arg, *v = NULL;
        int r;
        if (cli_args_help(&args)) {
            fputs(sbatch_usage, stdout);
            return 1;
        }
        if (cli_args_flag(&args, "--", NULL)) {
            i = args.i + 1;
            break;
        }
        if (a[0] != '-') { /* PROGRAM */
            i = args.i;
            break;
        }
#define VALUE(name, short_name)                                                                    \
    ((r = cli_args_value(&args, name, short_name)) < 0                                             \
         ? (usage_error("option '%s' needs a value", a), -1)                                       \
         : (v = args.value, r))
        if ((r = VALUE("--nodes", "-N")) != 0) {
            if (r < 0) return -1;
            if (!parse_count(v, 1, &o->nodes))
                return usage_error("--nodes: '%s' is not an integer >= 1", v), -1;
        } else if ((r = VALUE("--ntasks-per-node", NULL)) != 0) {
            if (r < 0) return -1;
            if (!parse_count(v, 1, &o->tasks_per_node))
                return usage_error("--ntasks-per-node: '%s' is not an integer >= 1", v), -1;
        } else if ((r = VALUE("--signal-before", NULL)) != 0) {
            if (r < 0) return -1;
            if (!parse_count(v, 0, &o->signal_before) || o->signal_before > 65535)
                return usage_error("--signal-before: '%s' is not a number of seconds (0..65535)",
                                   v),
                       -1;
        } else if ((r = VALUE("--time", "-t")) != 0) {
            if (r < 0) return -1;
            o->time = v;
        } else if ((r = VALUE("--partition", "-p")) != 0) {
            if (r < 0) return -1;
            o->partition = v;
        } else if ((r = VALUE("--job-name", "-J")) != 0) {
            if (r < 0) return -1;
            o->job_name = v;
        } else if ((r = VALUE("--output", NULL)) != 0) {
            if (r < 0) return -1;
            o->output = v;
        } else if ((r = VALUE("--config", NULL)) != 0) {
            if (r < 0) return -1;
            o->config_file = v;
        } else if ((r = VALUE("--out", "-o")) != 0) {
            if (r < 0) return -1;
            o->out = v;
        } else if ((r = VALUE("--sbatch", NULL)) != 0) {
            if (r < 0) return -1;
            if (o->n_sbatch == MAX_EXTRA)
                return usage_error("more than %s --sbatch options", "32"), -1;
            if (strchr(v, '\n') != NULL) return usage_error("--sbatch '%s' spans lines", v), -1;
            o->sbatch[o->n_sbatch++] = v;
        } else if (strcmp(a, "--no-requeue") == 0) {
            o->requeue = 0;
        } else if (strcmp(a, "--submit") == 0) {
            o->submit = 1;
        } else if (strncmp(a, "--acx-", 6) == 0 && a[6] != '\0' && a[6] != '=') {
            if (o->n_acx == MAX_EXTRA) return usage_error("more than %s --acx-* options", "32"), -1;
            if (strchr(a, '=') == NULL)
                return usage_error("'%s' needs =VALUE here (the script exports it)", a), -1;
            o->acx[o->n_acx++] = a;
        } else {
            return usage_error("unknown option '%s'", a), -1;
        }
#undef VALUE
    }
    if (i >= argc) return usage_error("%s", "no PROGRAM to run"), -1;
    const char *const directive[][2] = {{"--time", o->time},
                                        {"--partition", o->partition},
                                        {"--job-name", o->job_name},
                                        {"--output", o->output}};
    for (size_t k = 0; k < sizeof directive / sizeof directive[0]; k++)
        if (directive[k][1] != NULL && has_control(directive[k][1]))
            return usage_error("%s: the value spans lines or holds control characters or '\"' "
                               "(it goes into an #SBATCH line)",
                               directive[k][0]),
                   -1;
    long limit = o->time != NULL ? slurm_seconds(o->time) : 0;
    if (o->signal_before > 0 && limit > 0 && o->signal_before >= limit) {
        char msg[384];
        snprintf(msg, sizeof msg,
                 "--signal-before %ld is not shorter than --time %.40s (%ld s): Slurm would ask "
                 "the job to stop as soon as it starts, and it would checkpoint and requeue "
                 "again and again; give a shorter --signal-before, or 0",
                 o->signal_before, o->time, limit);
        return usage_error("%s", msg), -1;
    }
    o->argc = argc - i;
    o->argv = argv + i;
    return 0;
}

static int cmd_sbatch(int argc, char **argv) {
    sbatch_opts_t o;
    int r = parse_sbatch(argc, argv, &o);
    if (r != 0) return r > 0 ? EXIT_OK : EXIT_USAGE;

    /* The settings the ranks will get, checked now as acx_init will check
     * them; the config file's launch information sizes the job. */
    char *text = NULL;
    acx_status_t st = acx_config_describe(NULL, o.config_file, o.n_acx, o.acx, &text);
    if (st != ACX_OK) {
        fprintf(stderr, "acx: %s\n", acx_last_error());
        return EXIT_FAIL;
    }
    char value[64];
    long machines = 0, processes = 0;
    if (described_value(text, "num_machines", value, sizeof value))
        parse_count(value, 1, &machines);
    if (described_value(text, "num_processes", value, sizeof value))
        parse_count(value, 1, &processes);
    free(text);
    if (o.nodes < 0) o.nodes = machines > 0 ? machines : 1;
    if (o.tasks_per_node < 0) {
        long nodes = machines > 0 ? machines : o.nodes;
        if (processes > 0 && processes % nodes != 0) {
            fprintf(stderr,
                    "acx slurm sbatch: the config file's num_processes %ld is not a "
                    "multiple of %ld node(s); give --ntasks-per-node\n",
                    processes, nodes);
            return EXIT_FAIL;
        }
        o.tasks_per_node = processes > 0 ? processes / nodes : 1;
    }

    /* Absolute paths, so the script runs from any directory. */
    char program[PATH_MAX], config[PATH_MAX];
    snprintf(program, sizeof program, "%s", o.argv[0]);
    if (strchr(o.argv[0], '/') != NULL && realpath(o.argv[0], program) == NULL) {
        fprintf(stderr, "acx slurm sbatch: PROGRAM '%s': %s\n", o.argv[0], strerror(errno));
        return EXIT_FAIL;
    }
    if (o.config_file != NULL) {
        if (realpath(o.config_file, config) == NULL) {
            fprintf(stderr, "acx slurm sbatch: --config '%s': %s\n", o.config_file,
                    strerror(errno));
            return EXIT_FAIL;
        }
        o.config_file = config;
    }
    char name[128];
    if (o.job_name == NULL) {
        const char *base = strrchr(program, '/');
        snprintf(name, sizeof name, "%.127s", base ? base + 1 : program);
        o.job_name = name;
        if (has_control(name))
            return usage_error("PROGRAM '%s': its name spans lines or holds control characters "
                               "or '\"' (it becomes the job name); give --job-name",
                               program);
    }

    char path[PATH_MAX];
    const char *out = o.out;
    if (out == NULL && o.submit) {
        snprintf(path, sizeof path, "acx-sbatch-%s.sh", o.job_name);
        out = path;
    }
    FILE *f = out ? fopen(out, "w") : stdout;
    if (f == NULL) {
        fprintf(stderr, "acx slurm sbatch: cannot write '%s': %s\n", out, strerror(errno));
        return EXIT_FAIL;
    }
    write_script(f, &o, program);
    if (out != NULL) {
        if (fclose(f) != 0) {
            fprintf(stderr, "acx slurm sbatch: writing '%s' failed: %s\n", out, strerror(errno));
            return EXIT_FAIL;
        }
        fprintf(stderr, "acx slurm sbatch: wrote %s (%ld node(s) x %ld task(s))\n", out, o.nodes,
                o.tasks_per_node);
    } else if (fflush(stdout) != 0) {
        return EXIT_FAIL;
    }
    return o.submit ? submit(out) : EXIT_OK;
}

int cmd_slurm(int argc, char **argv);

int cmd_slurm(int argc, char **argv) {
    if (argc < 2) {
        fputs(slurm_usage, stderr);
        return EXIT_USAGE;
    }
    if (is_help(argv[1])) {
        fputs(slurm_usage, stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "sbatch") == 0) return cmd_sbatch(argc - 1, argv + 1);
    fprintf(stderr, "acx slurm: %s '%s'\nRun 'acx slurm --help' for usage.\n",
            argv[1][0] == '-' ? "unknown option" : "unknown subcommand", argv[1]);
    return EXIT_USAGE;
}

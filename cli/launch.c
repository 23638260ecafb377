/*
 * cli/launch.c — `acx launch`: run a program on N ranks and, when a rank
 * fails, end the job at once and say which rank failed first and how.
 *
 * Owns: the command's options and usage text; starting the launcher (srun
 * or mpirun, built by launch/command.c) with the ACX_* settings in its
 * environment; forwarding signals to it; reading the ranks' exit records
 * and printing the one-line summary; and the hidden rank supervisor mode
 * (`acx launch --rank-supervisor DIR PROGRAM ARGS`) that every rank runs
 * under.
 * Preemption. A SIGTERM (or SIGINT from kill, SIGHUP) that the ranks'
 * preemption.signals name is passed to the launcher as SIGUSR1 (or SIGUSR2,
 * whichever the ranks take): mpirun answers SIGTERM by killing the ranks
 * itself (SIGKILL 1 s later, exit status 1, before they can save) and
 * srun by SIGKILL, but both pass SIGUSR1/SIGUSR2 on to every rank, which
 * then stop at the next step boundary with a checkpoint and exit 75
 * (ACX_EXIT_PREEMPTED). When every rank exited 75, acx launch says so and
 * exits 75 too, so a wrapper that requeues on 75 does.
 *
 * Leaves to others: the command line itself and the record format
 * (launch/command.c), what the settings mean (the config resolver), tearing
 * the job down (mpirun ends every rank when one exits non-zero or by a
 * signal; srun does with --kill-on-bad-exit=1).
 *
 * The supervisor, per rank:
 *
 *   launcher ── acx launch --rank-supervisor DIR ── PROGRAM (own process group,
 *                   │   forwards TERM INT HUP QUIT      dies with the supervisor:
 *                   │   USR1 USR2 to PROGRAM            PR_SET_PDEATHSIG)
 *                   ├── while PROGRAM runs: DIR/live-R.PID (its rank and host),
 *                   │   renamed stop-R.PID at the first signal to pass on,
 *                   │   removed when PROGRAM has ended (and reported)
 *                   └── PROGRAM ended badly: DIR/rank-R.PID gets one record
 *                       {rank, host, pid, exit code or signal, time, Slurm
 *                       job/step}; then the supervisor ends the same way
 *                       (same exit code, same signal re-raised), so the
 *                       launcher sees what it would have seen without it.
 *
 * The environment is passed through untouched: PROGRAM sees exactly what
 * the launcher gave the rank. A rank whose supervisor was told to stop it
 * (a forwarded signal: the launcher's teardown, a user's Ctrl-C, a
 * preemption signal) is marked `teardown`, so the summary names the rank
 * that failed by itself first, not the ones killed because of it. A rank
 * whose live-* file outlives the job vanished with its supervisor, never
 * told to stop: a node lost whole (killed, powered off, cut off) leaves
 * exactly its ranks so, and the summary names them with their host.
 */
#define _GNU_SOURCE /* pipe2, PR_SET_PDEATHSIG */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acx/acx.h"
#include "base/config_resolve.h"
#include "base/settings.h"
#include "base/signal_list.h"
#include "launch/env.h"
#include "launch/command.h"
#include "cli/cli.h"

/* ---- usage ---- */

static const char launch_usage[] =
    "usage: acx launch [options] PROGRAM [ARGS...] [-- LAUNCHER-OPTIONS...]\n"
    "       acx launch [options] -- LAUNCHER-OPTIONS... -- PROGRAM [ARGS...]\n"
    "\n"
    "Run PROGRAM on N ranks. Inside a Slurm allocation (SLURM_JOB_ID set):\n"
    "  srun --mpi=pmix --kill-on-bad-exit=1 -n N ...\n"
    "with N the allocation's task count unless -n says otherwise. Elsewhere:\n"
    "  mpirun -np N ... (root: --allow-run-as-root; more ranks than CPUs:\n"
    "  --oversubscribe --mca mpi_yield_when_idle 1)\n"
    "with N from -n, else num_processes of the config file, else 1.\n"
    "The options below reach every rank as ACX_* environment variables\n"
    "(docs/config.md), exported by mpirun -x or inherited through srun.\n"
    "\n"
    "When a rank exits non-zero or is killed, the launcher ends the others at\n"
    "once and acx launch prints one line naming the rank that failed first,\n"
    "its host and its exit code or signal, and exits with that code (128 +\n"
    "the signal for a signal).\n"
    "\n"
    "options:\n"
    "  -n, --num-processes N         number of ranks (>= 1)\n"
    "  --config FILE                 config file for every rank (ACX_CONFIG_FILE)\n"
    "  --mixed-precision MODE        no, bf16 or fp16 (ACX_MIXED_PRECISION)\n"
    "  --sharding-strategy S         no_shard, shard_grad_op, full_shard or\n"
    "                                hybrid_shard (ACX_SHARDING_STRATEGY)\n"
    "  --gradient-accumulation-steps K\n"
    "                                micro-steps per optimizer step, >= 1\n"
    "                                (ACX_GRADIENT_ACCUMULATION_STEPS)\n"
    "  --debug                       debug logging and cross-rank collective checks on\n"
    "                                every rank (ACX_LOG_LEVEL=debug, ACX_DEBUG_MODE=1);\n"
    "                                also print the command before running it\n"
    "  --hostfile FILE               mpirun's host file (not inside Slurm)\n"
    "  --host LIST                   hosts and their slots in mpirun's syntax,\n"
    "                                node1:2,node2:1 (not inside Slurm); without\n"
    "                                -n, N is the sum of the slots. mpirun starts\n"
    "                                the other hosts' daemons with its launch agent\n"
    "                                (ssh, or OMPI_MCA_plm_rsh_agent)\n"
    "  --dry-run                     print the command and the variables it sets, as\n"
    "                                one line a shell runs as is; run nothing\n"
    "  -h, --help                    show this text\n"
    "\n"
    "Arguments after a '--' that follows PROGRAM go to the launcher, before\n"
    "the program. To pass PROGRAM an argument '--', give the launcher's options\n"
    "first, between two '--' (the second form; it may be empty: '-- --').\n"
    "A long option's value may also follow '=' (--num-processes=4).\n"
    "\n"
    "SIGTERM, SIGHUP or a SIGINT sent with kill, when preemption.signals names\n"
    "it (default USR1,TERM), reaches the ranks as SIGUSR1 (SIGUSR2 when only\n"
    "that is named): they stop at the next step boundary with a checkpoint\n"
    "and exit 75. Ctrl-C at the terminal and SIGKILL stop the job at once.\n"
    "\n"
    "Exit status: 0 all ranks succeeded; 75 every rank was preempted and saved\n"
    "a checkpoint (ACX_EXIT_PREEMPTED); otherwise the first failed rank's exit\n"
    "code, or 128 + its signal; 1 acx launch itself failed; 2 usage error.\n";

/* ---- the rank supervisor ---- */

/* Signals the supervisor passes on to the program. SIGKILL cannot be
 * caught: the program then dies through PR_SET_PDEATHSIG instead. */
static const int forwarded_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NUM_FORWARDED ((int)(sizeof forwarded_signals / sizeof forwarded_signals[0]))

static void gethost(char *host, size_t size) {
    if (gethostname(host, size) != 0) snprintf(host, size, "?");
    host[size - 1] = '\0';
}

/* Write r as DIR/KIND-R.PID (via a temporary name and rename, so acx launch
 * never reads half a record): KIND "rank" for how the rank ended, "live" for
 * a rank running (below). Failures are reported on stderr only: the rank's
 * exit status still reaches the launcher. */
static void write_record(const char *dir, const char *kind, const acx_rank_exit_t *r) {
    char line[1024], path[PATH_MAX], tmp[PATH_MAX + 8];
    size_t len = acx_rank_exit_format(r, line, sizeof line);
    if (len >= sizeof line) len = sizeof line - 1;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "acx launch: rank supervisor: cannot create '%s': %s\n", dir,
                strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/%s-%d.%ld", dir, kind, r->rank, r->pid);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, line, len) != (ssize_t)len || close(fd) != 0 || rename(tmp, path) != 0)
        fprintf(stderr, "acx launch: rank supervisor: cannot write '%s': %s\n", path,
                strerror(errno));
}

/* End this process the way the program ended: the same exit code, or the
 * same signal re-raised (without a second core dump). */
static int end_like(int wstatus) {
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    int sig = WTERMSIG(wstatus);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    return 128 + sig; /* a signal whose default is not to terminate */
}

/* Child side of the supervisor's fork: become the program. Reports an exec
 * failure's errno through fd (close-on-exec, so success closes it). */
static void exec_program(char **args, const sigset_t *old_mask, pid_t supervisor, int fd) {
    /* Its own process group: a signal the launcher sends the supervisor's
     * group reaches the program once, through the supervisor. */
    setpgid(0, 0);
    /* If the supervisor is SIGKILLed (the launcher's last resort), the
     * program must not live on as an orphan spinning in a collective. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != supervisor) _exit(127);
    sigprocmask(SIG_SETMASK, old_mask, NULL);
    execvp(args[0], args);
    int err = errno;
    ssize_t w = write(fd, &err, sizeof err);
    (void)w;
    _exit(err == ENOENT ? 127 : 126);
}

/* Whether process pid catches signal sig (its SigCgt mask in
 * /proc/PID/status). 1 when that cannot be read: the signal is then passed
 * on at once, as before. */
static int catches(pid_t pid, int sig) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 1;
    unsigned long long mask = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = sscanf(line, "SigCgt: %llx", &mask) == 1;
    fclose(f);
    return !found || (sig >= 1 && sig <= 64 && (mask >> (sig - 1)) & 1);
}

static double seconds_since(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* How long a SIGUSR1/SIGUSR2 for the program is held while the program does
 * not catch it yet. The launcher passes preemption on as one of these, and
 * it may reach a rank before acx_init has installed its handlers (a
 * preemption in the job's first seconds): delivered then, its default
 * action would kill the rank, with no checkpoint. Held until the program
 * catches it — acx_init installs the handlers first thing — the job stops
 * at its first step boundary with a checkpoint. A program that never
 * catches it (not an acx program) gets it after this long. */
#define HOLD_USR_SIGNAL_S 10.0

static int run_supervisor(int argc, char **argv) {
    /* argv: DIR PROGRAM [ARGS...] */
    if (argc < 2) {
        fprintf(stderr, "acx launch: --rank-supervisor needs DIR and PROGRAM\n");
        return EXIT_USAGE;
    }
    const char *dir = argv[0];
    acx_launch_env_t le;
    acx_launch_env_detect(NULL, &le);

    sigset_t set, old_mask;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    for (int k = 0; k < NUM_FORWARDED; k++)
        sigaddset(&set, forwarded_signals[k]);
    sigprocmask(SIG_BLOCK, &set, &old_mask);

    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        fprintf(stderr, "acx launch: rank supervisor: pipe: %s\n", strerror(errno));
        return EXIT_FAIL;
    }
    pid_t self = getpid();
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "acx launch: rank supervisor: fork: %s\n", strerror(errno));
        return EXIT_FAIL;
    }
    if (child == 0) {
        close(pipefd[0]);
        exec_program(argv + 1, &old_mask, self, pipefd[1]);
    }
    close(pipefd[1]);
    int exec_errno = 0;
    ssize_t got;
    while ((got = read(pipefd[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
    }
    if (got != (ssize_t)sizeof exec_errno) exec_errno = 0;
    close(pipefd[0]);

    /* DIR/live-R.PID while the program runs, renamed stop-R.PID when the
     * supervisor is first told to stop it, removed once it has ended (after
     * its exit record). One left as live-* when the job is over means the
     * rank and its supervisor vanished without a word — SIGKILLed with no
     * stop signal first, or on a node that died or lost its network: acx
     * launch names those ranks and their hosts. */
    acx_rank_exit_t r;
    memset(&r, 0, sizeof r);
    r.rank = le.rank;
    gethost(r.host, sizeof r.host);
    r.pid = (long)child;
    r.job_id = le.in_slurm_job ? le.slurm_job_id : 0;
    r.step_id = le.in_slurm_step ? le.slurm_step_id : -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r.time_ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec; /* started */
    /* (a live record's exit code is unused: the record format has no "running") */
    char live[PATH_MAX], stop[PATH_MAX];
    snprintf(live, sizeof live, "%s/live-%d.%ld", dir, r.rank, r.pid);
    snprintf(stop, sizeof stop, "%s/stop-%d.%ld", dir, r.rank, r.pid);
    if (exec_errno == 0) write_record(dir, "live", &r);

    int teardown = 0, wstatus = 0, held = 0; /* held: a SIGUSR1/2 not passed on yet */
    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    for (;;) {
        siginfo_t info;
        struct timespec poll = {0, 50 * 1000 * 1000};
        int sig = held ? sigtimedwait(&set, &info, &poll) : sigwaitinfo(&set, &info);
        if (held && (catches(child, held) || seconds_since(&started) > HOLD_USR_SIGNAL_S)) {
            kill(child, held);
            held = 0;
        }
        if (sig < 0) continue; /* EINTR, or the poll's timeout */
        if (sig == SIGCHLD) {
            pid_t w = waitpid(child, &wstatus, WNOHANG);
            if (w == child) break;
            continue;
        }
        if (!teardown && rename(live, stop) != 0 && errno != ENOENT)
            fprintf(stderr, "acx launch: rank supervisor: cannot rename '%s': %s\n", live,
                    strerror(errno));
        teardown = 1;
        if ((sig == SIGUSR1 || sig == SIGUSR2) && !catches(child, sig) &&
            seconds_since(&started) <= HOLD_USR_SIGNAL_S) {
            held = sig;
            continue;
        }
        kill(child, sig);
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
        unlink(teardown ? stop : live);
        return EXIT_OK;
    }

    clock_gettime(CLOCK_REALTIME, &ts);
    r.time_ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    r.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    r.signal = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
    r.teardown = teardown;
    if (exec_errno != 0)
        snprintf(r.why, sizeof r.why, "cannot execute '%.300s': %s", argv[1], strerror(exec_errno));
    write_record(dir, "rank", &r);
    unlink(teardown ? stop : live);
    return end_like(wstatus);
}

/* ---- options ---- */

typedef struct launch_options {
    acx_launch_request_t req;
    int dry_run;
} launch_options_t;

/* Parse argv into *o. Returns EXIT_OK, or EXIT_USAGE after the message
 * (and a help request: -1 after printing the usage). */
static int parse_options(int argc, char **argv, launch_options_t *o) {
    static const char where[] = "launch";
    acx_launch_request_t *q = &o->req;
    cli_args_t a;
    cli_args_init(&a, argc, argv);
    int i = 1;
    while (cli_args_next(&a)) {
        const char *arg = a.arg, *value = NULL;
        int r;
        i = a.i;
        if (cli_args_help(&a)) {
            fputs(launch_usage, stdout);
            return -1;
        }
        if (cli_args_flag(&a, "--", NULL)) {
            /* The second form: launcher options up to the next '--'. */
            int end = i + 1;
            while (end < argc && strcmp(argv[end], "--") != 0)
                end++;
            if (end >= argc)
                return usage_error(where, "%s",
                                   "a '--' before PROGRAM opens the launcher's options and needs "
                                   "a second '--' before PROGRAM");
            q->n_launcher_args = end - i - 1;
            q->launcher_args = (const char *const *)argv + i + 1;
            i = end + 1;
            if (i >= argc) return usage_error(where, "%s", "missing PROGRAM after '-- ... --'");
            q->n_program_args = argc - i;
            q->program_args = (const char *const *)argv + i;
            return EXIT_OK;
        }
        if (!cli_args_is_option(&a)) break; /* PROGRAM */
        if (cli_args_flag(&a, "--debug", NULL)) {
            q->debug = 1;
            continue;
        }
        if (cli_args_flag(&a, "--dry-run", NULL)) {
            o->dry_run = 1;
            continue;
        }
        if ((r = cli_args_value(&a, "--num-processes", "-n")) != 0) {
            if (r < 0) return usage_error(where, "option '%s' needs a number", arg);
            value = a.value;
            char *end;
            errno = 0;
            long n = strtol(value, &end, 10);
            if (errno != 0 || *end != '\0' || n < 1 || n > INT_MAX)
                return usage_error(where, "invalid number of processes '%s' (expected >= 1)",
                                   value);
            q->num_processes = (int)n;
            continue;
        }
        static const struct {
            const char *name, *what;
            size_t offset;
        } strings[] = {
            {"--config", "a FILE", offsetof(acx_launch_request_t, config_file)},
            {"--mixed-precision", "a MODE", offsetof(acx_launch_request_t, mixed_precision)},
            {"--sharding-strategy", "a STRATEGY",
             offsetof(acx_launch_request_t, sharding_strategy)},
            {"--gradient-accumulation-steps", "a number",
             offsetof(acx_launch_request_t, gradient_accumulation_steps)},
            {"--hostfile", "a FILE", offsetof(acx_launch_request_t, hostfile)},
            {"--host", "a host LIST (e.g. node1:2,node2:1)", offsetof(acx_launch_request_t, hosts)},
        };
        int matched = 0;
        for (size_t k = 0; k < sizeof strings / sizeof strings[0] && !matched; k++) {
            if ((r = cli_args_value(&a, strings[k].name, NULL)) == 0) continue;
            value = a.value;
            matched = 1;
            char msg[96];
            snprintf(msg, sizeof msg, "option '%%s' needs %s", strings[k].what);
            if (r < 0) return usage_error(where, msg, strings[k].name);
            const char **field = (const char **)((char *)q + strings[k].offset);
            if (*field != NULL)
                return usage_error(where, "option '%s' given twice", strings[k].name);
            *field = value;
        }
        if (!matched) return usage_error(where, "unknown option '%s'", arg);
    }
    i = a.i; /* PROGRAM's index, or argc when there is none */
    if (i >= argc) return usage_error(where, "%s", "missing PROGRAM");
    /* PROGRAM ARGS [-- LAUNCHER-OPTIONS] */
    int end = i;
    while (end < argc && strcmp(argv[end], "--") != 0)
        end++;
    q->n_program_args = end - i;
    q->program_args = (const char *const *)argv + i;
    if (end < argc) {
        q->n_launcher_args = argc - end - 1;
        q->launcher_args = (const char *const *)argv + end + 1;
    }
    return EXIT_OK;
}

/* ---- checking the settings ---- */

/* Resolve the configuration the ranks will get: each option alone first
 * (a bad value is a usage error naming the option), then everything (a
 * bad config file or ACX_* variable is a failure). num_processes of the
 * file, when given, goes to *config_np_p; the project directory to
 * project_dir; the preemption.signals mask (base/signal_list.h) to
 * *preempt_mask_p. */
static int check_settings(const acx_launch_request_t *q, int *config_np_p, int *preempt_mask_p,
                          char *project_dir, size_t size) {
    /* Each option sets its key's variable; the names come from the settings
     * registry (base/settings.c), the one place they are spelled. */
    static const struct {
        const char *option, *key;
        size_t offset;
    } opts[] = {
        {"--mixed-precision", "mixed_precision", offsetof(acx_launch_request_t, mixed_precision)},
        {"--sharding-strategy", "sharding_strategy",
         offsetof(acx_launch_request_t, sharding_strategy)},
        {"--gradient-accumulation-steps", "gradient_accumulation_steps",
         offsetof(acx_launch_request_t, gradient_accumulation_steps)},
    };
    acx_resolved_config_t *cfg = malloc(sizeof *cfg);
    if (cfg == NULL) {
        fprintf(stderr, "acx launch: out of memory\n");
        return EXIT_FAIL;
    }
    int rc = EXIT_OK;
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
        const char *value = *(const char *const *)((const char *)q + opts[k].offset);
        if (value == NULL) continue;
        tool_env_reset(1);
        tool_env_set(acx_config_key(acx_config_key_index(opts[k].key))->env, value);
        if (acx_config_resolve(NULL, NULL, 0, NULL, tool_env, cfg) != ACX_OK) {
            const char *why = strstr(acx_last_error(), "expected");
            fprintf(stderr, "acx launch: invalid %s '%s'%s%s\nRun 'acx launch --help' for usage.\n",
                    opts[k].option, value, why ? ": " : "", why ? why : "");
            rc = EXIT_USAGE;
            goto out;
        }
    }
    tool_env_reset(0);
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++)
        tool_env_set(acx_config_key(acx_config_key_index(opts[k].key))->env,
                     *(const char *const *)((const char *)q + opts[k].offset));
    if (q->debug) tool_env_set(acx_config_key(acx_config_key_index("log_level"))->env, "debug");
    if (acx_config_resolve(NULL, q->config_file, 0, NULL, tool_env, cfg) != ACX_OK) {
        rc = acx_failure(ACX_ERR_INVALID_CONFIG);
        goto out;
    }
    *config_np_p = cfg->info.num_processes > 0 ? cfg->info.num_processes : 0;
    /* checked by the resolver: parses */
    if (acx_signal_list_parse(cfg->values.preemption.signals, preempt_mask_p, NULL, 0) != 0)
        *preempt_mask_p = 0;
    snprintf(project_dir, size, "%s", cfg->project_dir[0] ? cfg->project_dir : ".");
out:
    tool_env_reset(0);
    free(cfg);
    return rc;
}

/* ---- running the launcher ---- */

static volatile sig_atomic_t launcher_pid;

/* What each signal of forwarded_signals becomes for the launcher (index k
 * of forwarded_signals); set before the handler is installed. */
static int launcher_signal[NUM_FORWARDED];

/* Fill launcher_signal from the ranks' preemption.signals mask: TERM, INT
 * and HUP, when the ranks take them as preemption, become USR1 (else USR2)
 * when the ranks take that too — the one kind of signal mpirun and srun
 * pass on to the ranks instead of killing them. Anything else goes as is. */
static void plan_forwarding(int preempt_mask) {
    int takes[65] = {0};
    for (int i = 0; i < ACX_NUM_SIGNAL_NAMES; i++)
        if ((preempt_mask & (1 << i)) && acx_signal_names[i].sig < 65)
            takes[acx_signal_names[i].sig] = 1;
    int as = takes[SIGUSR1] ? SIGUSR1 : takes[SIGUSR2] ? SIGUSR2 : 0;
    for (int k = 0; k < NUM_FORWARDED; k++) {
        int sig = forwarded_signals[k];
        int stop = sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
        launcher_signal[k] = stop && takes[sig] && as != 0 ? as : sig;
    }
}

/* Pass a signal on to the launcher, unless the terminal sent it: a Ctrl-C
 * reaches the whole foreground process group, the launcher included, and a
 * second SIGINT makes mpirun and srun abort without their cleanup. */
static void forward_to_launcher(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    if (info != NULL && info->si_code == SI_KERNEL) return;
    int to = sig;
    for (int k = 0; k < NUM_FORWARDED; k++)
        if (forwarded_signals[k] == sig) to = launcher_signal[k];
    if (launcher_pid > 0) kill((pid_t)launcher_pid, to);
}

/* The status directory: node-local $TMPDIR for one node; the project
 * directory when ranks may run on other nodes (a Slurm allocation of
 * several nodes, a host file or a host list), since their supervisors
 * write there. */
static int status_dir_parent(const acx_launch_request_t *q, const char *project_dir, char *buf,
                             size_t size) {
    const char *nodes = getenv("SLURM_JOB_NUM_NODES");
    int multi = q->hostfile != NULL || q->hosts != NULL || (nodes != NULL && atoi(nodes) > 1);
    const char *parent = multi ? project_dir : getenv("TMPDIR");
    if (parent == NULL || parent[0] == '\0') parent = "/tmp";
    char abs[PATH_MAX];
    if (parent[0] != '/' && realpath(parent, abs) != NULL) parent = abs;
    int n = snprintf(buf, size, "%s/acx-launch.XXXXXX", parent);
    return n > 0 && (size_t)n < size;
}

static int compare_records(const void *a, const void *b) {
    const acx_rank_exit_t *x = a, *y = b;
    return (x->time_ns > y->time_ns) - (x->time_ns < y->time_ns);
}

/* Append rec to *arr (n, cap); 0 when out of memory. */
static int push_record(acx_rank_exit_t **arr, int *n, int *cap, const acx_rank_exit_t *rec) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 16;
        acx_rank_exit_t *r = realloc(*arr, (size_t)c * sizeof *r);
        if (r == NULL) return 0;
        *arr = r;
        *cap = c;
    }
    (*arr)[(*n)++] = *rec;
    return 1;
}

/* Read every record in dir (and remove the files and dir): the exit
 * records (rank-*) into *recs_p, sorted by time, and the ranks still
 * marked running (live-*, see run_supervisor) into *live_p, *n_live_p.
 * Returns the number of exit records, -1 on a failure to read. */
static int read_records(const char *dir, acx_rank_exit_t **recs_p, acx_rank_exit_t **live_p,
                        int *n_live_p) {
    *n_live_p = 0;
    DIR *d = opendir(dir);
    if (d == NULL) return errno == ENOENT ? 0 : -1;
    acx_rank_exit_t *recs = NULL, *live = NULL;
    int n = 0, cap = 0, n_live = 0, cap_live = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[PATH_MAX + 256], line[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        int ok = f != NULL && fgets(line, sizeof line, f) != NULL;
        if (f) fclose(f);
        unlink(path);
        int is_live = strncmp(e->d_name, "live-", 5) == 0;
        if (!ok || (!is_live && strncmp(e->d_name, "rank-", 5) != 0)) continue;
        acx_rank_exit_t rec;
        if (acx_rank_exit_parse(line, &rec) != ACX_OK) {
            fprintf(stderr, "acx launch: ignoring %s: %s\n", path, acx_last_error());
            continue;
        }
        if (!(is_live ? push_record(&live, &n_live, &cap_live, &rec)
                      : push_record(&recs, &n, &cap, &rec)))
            break;
    }
    closedir(d);
    rmdir(dir);
    if (n > 1) qsort(recs, (size_t)n, sizeof *recs, compare_records);
    *recs_p = recs;
    *live_p = live;
    *n_live_p = n_live;
    return n;
}

static int compare_rank(const void *a, const void *b) {
    const acx_rank_exit_t *x = a, *y = b;
    int h = strcmp(x->host, y->host);
    return h != 0 ? h : (x->rank > y->rank) - (x->rank < y->rank);
}

/* The ranks that vanished: a live record and no exit record (a supervisor
 * killed between the two leaves both). One line on stderr naming them per
 * host, "ranks 2-3 on node2, rank 5 on node3" — after a whole node is
 * killed or lost, the only word of which one it was and whose ranks it
 * held: the launcher's own message may name no node (mpirun: "unable to
 * reliably start one or more daemons") and the node's ranks can say
 * nothing. Sorts live. */
static void report_vanished(acx_rank_exit_t *live, int n_live, const acx_rank_exit_t *recs, int n) {
    int k = 0;
    for (int i = 0; i < n_live; i++) {
        int ended = 0;
        for (int j = 0; j < n && !ended; j++)
            ended = recs[j].rank == live[i].rank;
        if (!ended) live[k++] = live[i];
    }
    if (k == 0) return;
    qsort(live, (size_t)k, sizeof *live, compare_rank);
    char list[2048];
    size_t len = 0;
    int count = 0, cut = 0; /* cut: ranks left out for lack of room */
    for (int i = 0; i < k; i++) {
        if (len + ACX_LAUNCH_HOST_MAX + 40 >= sizeof list) {
            cut = 1;
            break;
        }
        int hi = i; /* ranks live[i..hi]: consecutive, one host */
        while (hi + 1 < k && strcmp(live[hi + 1].host, live[i].host) == 0 &&
               live[hi + 1].rank == live[hi].rank + 1)
            hi++;
        if (hi > i)
            len += (size_t)snprintf(list + len, sizeof list - len, "%sranks %d-%d on %s",
                                    count ? ", " : "", live[i].rank, live[hi].rank, live[i].host);
        else
            len += (size_t)snprintf(list + len, sizeof list - len, "%srank %d on %s",
                                    count ? ", " : "", live[i].rank, live[i].host);
        count++;
        i = hi;
    }
    fprintf(stderr,
            "acx launch: %s%s vanished without an exit status, never told to stop: a node "
            "that died or lost its network, or processes SIGKILLed with their rank "
            "supervisors\n",
            list, cut ? ", ..." : "");
}

/* The earliest exit record in dir of a rank that failed by itself (not a
 * teardown, not a stop for preemption: acx_rank_exit_first_failure), left
 * in place for read_records; 1 when there is one. Records being written
 * (*.tmp, renamed into place when complete) are skipped. */
static int find_failure(const char *dir, acx_rank_exit_t *first) {
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    acx_rank_exit_t *recs = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "rank-", 5) != 0 ||
            (len >= 4 && strcmp(e->d_name + len - 4, ".tmp") == 0))
            continue;
        char path[PATH_MAX + 256], line[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        int ok = f != NULL && fgets(line, sizeof line, f) != NULL;
        if (f) fclose(f);
        acx_rank_exit_t rec;
        if (ok && acx_rank_exit_parse(line, &rec) == ACX_OK && !push_record(&recs, &n, &cap, &rec))
            break;
    }
    closedir(d);
    int i = acx_rank_exit_first_failure(recs, n);
    if (i >= 0) *first = recs[i];
    free(recs);
    return i >= 0;
}

/* How long mpirun may take to end the job once a rank has failed by
 * itself. Its teardown takes a second or two (SIGTERM, then SIGKILL 1 s
 * later); but when a node's network is down, mpirun waits for that node's
 * daemon until TCP gives up on the connection — about 15 minutes with
 * Linux's default tcp_retries2 — after every rank it can reach has ended.
 * Past this, acx launch ends mpirun itself. (srun: Slurm's own teardown
 * and node health checks decide.) */
#define LAUNCHER_TEARDOWN_S 10.0

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Wait for the launcher (pid) to end, into *wstatus. With mpirun, watch the
 * status directory: once a rank has failed by itself and mpirun is still
 * running LAUNCHER_TEARDOWN_S later, say so, send it SIGTERM and, 3 s later,
 * SIGKILL. */
static void wait_launcher(const acx_launch_cmd_t *cmd, pid_t pid, const char *status_dir,
                          int *wstatus) {
    int watch = strcmp(cmd->launcher, "srun") != 0;
    double failed_at = -1, term_at = -1, scanned = 0;
    acx_rank_exit_t first;
    for (;;) {
        pid_t w = waitpid(pid, wstatus, watch ? WNOHANG : 0);
        if (w == pid || (w < 0 && errno != EINTR)) return;
        if (!watch || w < 0) continue;
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
        double now = mono_s();
        if (failed_at < 0 && now - scanned >= 0.5) {
            scanned = now;
            if (find_failure(status_dir, &first)) failed_at = now;
        } else if (failed_at >= 0 && term_at < 0 && now - failed_at > LAUNCHER_TEARDOWN_S) {
            char what[256];
            acx_rank_exit_describe(&first, what, sizeof what);
            fprintf(stderr,
                    "acx launch: %s has not ended %.0f s after rank %d on %s failed (%s): "
                    "ending it (is a node it started daemons on unreachable?)\n",
                    cmd->launcher, LAUNCHER_TEARDOWN_S, first.rank, first.host, what);
            kill(pid, SIGTERM);
            term_at = now;
        } else if (term_at >= 0 && now - term_at > 3.0) {
            kill(pid, SIGKILL);
            term_at = now + 1e9; /* once */
        }
    }
}

/* Every rank stopped for preemption with its checkpoint saved: a record
 * of exit code ACX_EXIT_PREEMPTED from each of the num_processes ranks (0:
 * srun's default count, unknown here; then the launcher's own status, the
 * highest of the tasks', must be 75 too). A rank exits 75 only after the
 * save's closing agreement, so the checkpoint is complete on all. */
static int all_preempted(const acx_rank_exit_t *recs, int n, int num_processes, int wstatus) {
    if (n <= 0) return 0;
    if (num_processes > 0 ? n != num_processes
                          : !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == ACX_EXIT_PREEMPTED))
        return 0;
    for (int i = 0; i < n; i++)
        if (recs[i].signal != 0 || recs[i].exit_code != ACX_EXIT_PREEMPTED) return 0;
    return 1;
}

/* Start cmd, wait for it, summarize. Returns acx launch's exit status. */
static int run_command(const acx_launch_cmd_t *cmd, const char *status_dir, int debug) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        fprintf(stderr, "acx launch: pipe: %s\n", strerror(errno));
        return EXIT_FAIL;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forward_to_launcher;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int k = 0; k < NUM_FORWARDED; k++)
        sigaction(forwarded_signals[k], &sa, NULL);

    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "acx launch: fork: %s\n", strerror(errno));
        return EXIT_FAIL;
    }
    if (pid == 0) {
        close(pipefd[0]);
        for (int k = 0; k < NUM_FORWARDED; k++)
            signal(forwarded_signals[k], SIG_DFL);
        for (int k = 0; k < cmd->n_env; k++)
            putenv(cmd->env[k]);
        execvp(cmd->argv[0], cmd->argv);
        int err = errno;
        ssize_t w = write(pipefd[1], &err, sizeof err);
        (void)w;
        _exit(127);
    }
    launcher_pid = pid;
    close(pipefd[1]);
    int exec_errno = 0;
    ssize_t got;
    while ((got = read(pipefd[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
    }
    close(pipefd[0]);

    int wstatus = 0;
    wait_launcher(cmd, pid, status_dir, &wstatus);
    launcher_pid = 0;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);

    if (got == (ssize_t)sizeof exec_errno) {
        rmdir(status_dir);
        fprintf(stderr, "acx launch: cannot run '%s': %s%s\n", cmd->argv[0], strerror(exec_errno),
                strcmp(cmd->launcher, "srun") == 0 ? " (is Slurm's srun on PATH?)"
                                                   : " (is the MPI acx was built with installed "
                                                     "and its mpirun on PATH?)");
        return EXIT_FAIL;
    }

    acx_rank_exit_t *recs = NULL, *live = NULL;
    int n_live = 0;
    int n = read_records(status_dir, &recs, &live, &n_live);
    int rc;
    if (all_preempted(recs, n, cmd->num_processes, wstatus)) {
        fprintf(stderr,
                "acx launch: preempted: all %d rank(s) stopped at a step boundary with a "
                "checkpoint and exited %d (ACX_EXIT_PREEMPTED); run again to resume "
                "from it\n",
                n, ACX_EXIT_PREEMPTED);
        rc = ACX_EXIT_PREEMPTED;
    } else if (n > 0) {
        int first = acx_rank_exit_first(recs, n);
        char line[1024];
        acx_rank_exit_summary(&recs[first], line, sizeof line);
        fprintf(stderr, "acx launch: %s\n", line);
        rc = acx_rank_exit_status(&recs[first]);
    } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) {
        rc = WEXITSTATUS(wstatus);
        fprintf(stderr,
                "acx launch: %s exited with code %d and no rank reported a failure (see %s's "
                "messages above)\n",
                cmd->launcher, rc, cmd->launcher);
    } else if (WIFSIGNALED(wstatus)) {
        rc = 128 + WTERMSIG(wstatus);
        const char *name = acx_signal_name(WTERMSIG(wstatus));
        fprintf(stderr, "acx launch: %s was killed by signal %d%s%s%s\n", cmd->launcher,
                WTERMSIG(wstatus), name ? " (" : "", name ? name : "", name ? ")" : "");
    } else {
        rc = EXIT_OK;
    }
    /* (srun's teardown may SIGKILL the tasks without a signal first, and
     * Slurm names a lost node itself: "Node failure on ...") */
    if (rc != EXIT_OK && strcmp(cmd->launcher, "srun") != 0)
        report_vanished(live, n_live, recs, n > 0 ? n : 0);
    if (n < 0) fprintf(stderr, "acx launch: cannot read '%s': %s\n", status_dir, strerror(errno));
    if (debug)
        fprintf(stderr, "acx launch: %s ended after %.2f s (exit %d)\n", cmd->launcher, secs, rc);
    free(recs);
    free(live);
    return rc;
}

/* ---- acx launch ---- */

int cmd_launch(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "--rank-supervisor") == 0)
        return run_supervisor(argc - 2, argv + 2);

    launch_options_t o;
    memset(&o, 0, sizeof o);
    int rc = parse_options(argc, argv, &o);
    if (rc < 0) return EXIT_OK; /* --help */
    if (rc != EXIT_OK) return rc;
    acx_launch_request_t *q = &o.req;
    /* srun inside an allocation: launch/command.c decides (only the MPI
     * flavour of host matters here, and srun does not depend on it) */
    acx_launch_host_t host = {tool_count_cpus(), geteuid() == 0, tool_mpi_flavor()};
    if (q->hostfile != NULL && strcmp(acx_launch_launcher_name(&host, NULL), "srun") == 0)
        return usage_error("launch",
                           "--hostfile '%s' inside a Slurm allocation: srun runs on the "
                           "allocation's nodes (give srun's --nodelist after '--' instead)",
                           q->hostfile);
    if (q->hosts != NULL && strcmp(acx_launch_launcher_name(&host, NULL), "srun") == 0)
        return usage_error("launch",
                           "--host '%s' inside a Slurm allocation: srun runs on the "
                           "allocation's nodes (give srun's --nodelist after '--' instead)",
                           q->hosts);
    if (q->hosts != NULL) {
        char why[512];
        if (acx_launch_host_slots(q->hosts, why, sizeof why) < 0)
            return usage_error("launch", "--host: %s", why);
        if (q->hostfile != NULL)
            return usage_error("launch", "both --hostfile and --host '%s' given (give one)",
                               q->hosts);
    }

    char project_dir[PATH_MAX];
    int preempt_mask = 0;
    rc =
        check_settings(q, &q->config_num_processes, &preempt_mask, project_dir, sizeof project_dir);
    if (rc != EXIT_OK) return rc;

    char self[PATH_MAX], status_dir[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "acx launch: cannot find this program (/proc/self/exe): %s\n",
                strerror(errno));
        return EXIT_FAIL;
    }
    self[len] = '\0';
    if (!status_dir_parent(q, project_dir, status_dir, sizeof status_dir)) {
        fprintf(stderr, "acx launch: status directory path too long\n");
        return EXIT_FAIL;
    }
    if (!o.dry_run && mkdtemp(status_dir) == NULL) {
        fprintf(stderr, "acx launch: cannot create '%s': %s\n", status_dir, strerror(errno));
        return EXIT_FAIL;
    }
    q->supervisor = self;
    q->status_dir = status_dir;
    /* ranks may start elsewhere (srun, other nodes, another working
     * directory): hand them the config file by absolute path */
    char config_abs[PATH_MAX];
    if (q->config_file != NULL && q->config_file[0] != '/' &&
        realpath(q->config_file, config_abs) != NULL)
        q->config_file = config_abs;

    acx_launch_cmd_t *cmd = NULL;
    acx_status_t st = acx_launch_cmd_build(q, &host, NULL, &cmd);
    if (st != ACX_OK) {
        if (!o.dry_run) rmdir(status_dir);
        return acx_failure(st);
    }
    if (o.dry_run || q->debug) {
        char *text = NULL;
        if ((st = acx_launch_cmd_format(cmd, &text)) != ACX_OK) {
            acx_launch_cmd_free(cmd);
            return acx_failure(st);
        }
        fprintf(o.dry_run ? stdout : stderr, "%s%s\n",
                o.dry_run ? "" : "acx launch: running: ", text);
        free(text);
    }
    plan_forwarding(preempt_mask);
    rc = o.dry_run ? EXIT_OK : run_command(cmd, status_dir, q->debug);
    acx_launch_cmd_free(cmd);
    return rc;
}

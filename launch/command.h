/*
 * launch/command.h — what `acx launch` runs, and how it reports the rank
 * that failed first (library-private; used by cli/launch.c and the unit
 * tests).
 *
 * Two groups of pure functions, no process is started here:
 *   - the command: from the parsed options, the environment (Slurm or not)
 *     and this machine (CPUs, root, MPI flavour) to the launcher's argv and
 *     the ACX_* variables the ranks get; and its shell-quoted rendering for
 *     `acx launch --dry-run`;
 *   - the exit records: one line per abnormally ended rank, written by the
 *     rank supervisor into the launch's status directory, read back by
 *     `acx launch`, which picks the first failure and prints one summary.
 */
#ifndef ACX_LAUNCH_COMMAND_H
#define ACX_LAUNCH_COMMAND_H

#include <stddef.h>

#include "acx/status.h"

/* ---- the command ---- */

typedef enum acx_mpi_flavor {
    ACX_MPI_FLAVOR_OPENMPI = 0, /* mpirun of Open MPI (and the default) */
    ACX_MPI_FLAVOR_MPICH = 1    /* mpiexec of MPICH's Hydra */
} acx_mpi_flavor_t;

/* What `acx launch` was asked for, its options already parsed (the tool
 * checks the values). Strings are borrowed; NULL / 0 = not given. */
typedef struct acx_launch_request {
    int num_processes;                       /* -n N, >= 1; 0 = not given */
    int config_num_processes;                /* num_processes of the config file, >= 1; 0 = none */
    const char *config_file;                 /* --config FILE -> ACX_CONFIG_FILE */
    const char *mixed_precision;             /* -> ACX_MIXED_PRECISION */
    const char *sharding_strategy;           /* -> ACX_SHARDING_STRATEGY */
    const char *gradient_accumulation_steps; /* -> ACX_GRADIENT_ACCUMULATION_STEPS */
    int debug;                               /* --debug -> ACX_LOG_LEVEL=debug */
    const char *hostfile;                    /* --hostfile FILE (mpirun/mpiexec only) */
    const char
        *hosts; /* --host LIST: "n1:2,n2:1" (mpirun/mpiexec only; see acx_launch_host_slots) */
    int n_launcher_args; /* passthrough: inserted before the rank command */
    const char *const *launcher_args;
    /* The rank supervisor: `supervisor launch --rank-supervisor status_dir
     * PROGRAM ARGS`. supervisor NULL = run PROGRAM directly (no summary). */
    const char *supervisor;
    const char *status_dir;
    int n_program_args; /* >= 1: PROGRAM and its arguments */
    const char *const *program_args;
} acx_launch_request_t;

/* This machine. */
typedef struct acx_launch_host {
    long nproc;     /* CPUs this process may run on (sched_getaffinity), >= 1 */
    int is_root;    /* effective uid 0: Open MPI's mpirun refuses root without a flag */
    int mpi_flavor; /* acx_mpi_flavor_t: the MPI acx was built with */
} acx_launch_host_t;

/* The command to run. argv[argc] == NULL; env holds "NAME=VALUE" strings
 * to set in the launcher's environment (the ranks inherit them: srun
 * exports the whole environment, mpirun gets one `-x NAME` each). All
 * strings are owned by the command; free it with acx_launch_cmd_free. */
typedef struct acx_launch_cmd {
    const char *launcher; /* "srun", "mpirun" or "mpiexec" (static) */
    int num_processes;    /* ranks, or 0 = srun's default (the allocation's tasks) */
    int oversubscribed;   /* more ranks per node than nproc */
    int argc;
    char **argv;
    int n_env;
    char **env;
} acx_launch_cmd_t;

/* The ranks a host list places: LIST is mpirun's --host syntax, items
 * "NAME" (1 slot) or "NAME:SLOTS" separated by commas, NAME a host name
 * (letters, digits, '.', '-', '_'), SLOTS 1..65536. Returns the sum of the
 * slots (a name listed twice counts twice, as mpirun counts it), or -1
 * with why (size bytes, NUL-terminated) naming the bad item and what was
 * expected. Pure; not collective. */
int acx_launch_host_slots(const char *list, char *why, size_t size);

/* Build the command. Inside a Slurm allocation (SLURM_JOB_ID set in env):
 *   srun --mpi=pmix --kill-on-bad-exit=1 [-n N] [LAUNCHER-ARGS] RANK-COMMAND
 * with N = req->num_processes, else $SLURM_NTASKS (else srun's default);
 * when ceil(N / nodes) > host->nproc, OMPI_MCA_mpi_yield_when_idle=1 is
 * exported (Open MPI busy-polls otherwise; srun does not set it).
 * Outside, for Open MPI:
 *   mpirun -np N [--allow-run-as-root] [--oversubscribe --mca
 *   mpi_yield_when_idle 1] [--hostfile F | --host LIST] [-x NAME ...]
 *   [LAUNCHER-ARGS] RANK-COMMAND
 * with N = num_processes, else config_num_processes, else the host list's
 * slots (acx_launch_host_slots), else 1; oversubscription when N > nproc
 * and neither a hostfile nor a host list (their slots decide). For MPICH:
 * mpiexec -n N [-f F | -hosts LIST] [LAUNCHER-ARGS] RANK-COMMAND (Hydra
 * passes the whole environment). RANK-COMMAND is the supervisor's command
 * line or PROGRAM ARGS. env: lookup (getenv when NULL).
 * Errors: ACX_ERR_INVALID_ARG (NULL arguments, no program, num_processes
 * < 0, a hostfile or host list inside Slurm — srun takes its nodes from the
 * allocation —, both a hostfile and a host list, a malformed host list),
 * ACX_ERR_NO_MEMORY. *cmd_p is written only on success. */
acx_status_t acx_launch_cmd_build(const acx_launch_request_t *req, const acx_launch_host_t *host,
                                  const char *(*env)(const char *name), acx_launch_cmd_t **cmd_p);

void acx_launch_cmd_free(acx_launch_cmd_t *cmd);

/* The launcher acx_launch_cmd_build picks, without building the command:
 * "srun" inside a Slurm allocation (SLURM_JOB_ID set and not empty in env),
 * else "mpiexec" when host->mpi_flavor is ACX_MPI_FLAVOR_MPICH, else
 * "mpirun" (static strings; cmd->launcher of the built command). Only
 * host->mpi_flavor is read. env: lookup (getenv when NULL). Never fails. */
const char *acx_launch_launcher_name(const acx_launch_host_t *host,
                                     const char *(*env)(const char *name));

/* Quote word for a POSIX shell: as is when it holds only
 * [A-Za-z0-9_@%+=:,./-] (and is not empty), else in single quotes with
 * each ' written as '\''. Writes at most size bytes (NUL-terminated when
 * size > 0) and returns the length of the whole quoted text. */
size_t acx_shell_quote(const char *word, char *buf, size_t size);

/* The command as one line a shell runs as is: the variables as
 * NAME=VALUE assignments, then the argv, each word quoted. *text_p is
 * malloc'ed (caller frees); ACX_ERR_NO_MEMORY, ACX_ERR_INVALID_ARG. */
acx_status_t acx_launch_cmd_format(const acx_launch_cmd_t *cmd, char **text_p);

/* ---- exit records ---- */

#define ACX_LAUNCH_HOST_MAX 256
#define ACX_LAUNCH_WHY_MAX  512

/* How one rank ended, as its supervisor saw it. */
typedef struct acx_rank_exit {
    int rank; /* from the launcher's variables; -1 unknown */
    char host[ACX_LAUNCH_HOST_MAX];
    long pid;                     /* the program's pid */
    int exit_code;                /* 0..255 when it exited, else -1 */
    int signal;                   /* the signal that killed it, else 0 */
    int teardown;                 /* 1: the supervisor was told to stop it first (the
                                     launcher tearing the job down, or a user's
                                     signal): not a failure of its own */
    long long time_ns;            /* CLOCK_REALTIME when the supervisor saw the end */
    long job_id;                  /* Slurm job, 0 if none */
    long step_id;                 /* Slurm step, -1 if none */
    char why[ACX_LAUNCH_WHY_MAX]; /* e.g. "cannot execute 'x': ..."; "" = nothing to add */
} acx_rank_exit_t;

/* One line "acx-rank-exit v1 rank=2 host=n1 pid=77 code=-1 signal=9
 * teardown=0 time=1700000000123456789 job=0 step=-1 why=TEXT\n" (why last,
 * to the end of the line; newlines in it become spaces). Returns the
 * length of the whole line, as snprintf does. */
size_t acx_rank_exit_format(const acx_rank_exit_t *r, char *buf, size_t size);

/* Parse such a line. ACX_ERR_FORMAT when it is not one (the message names
 * the field); *r_p written only on success. */
acx_status_t acx_rank_exit_parse(const char *line, acx_rank_exit_t *r_p);

/* The record to report among n: the earliest (time, then rank) that is not
 * a teardown; when all are teardowns, the earliest of them; -1 when n == 0. */
int acx_rank_exit_first(const acx_rank_exit_t *r, int n);

/* The earliest (time, then rank) among n records of a rank that failed by
 * itself: neither a teardown nor a deliberate stop for preemption (exit
 * code ACX_EXIT_PREEMPTED, signal 0: the rank saved its checkpoint and
 * exited on purpose, and its peers may still be saving). -1 when none. */
int acx_rank_exit_first_failure(const acx_rank_exit_t *r, int n);

/* "SIGKILL" for 9, ...; NULL for a signal without a name here. */
const char *acx_signal_name(int sig);

/* "killed by signal 9 (SIGKILL) — out of memory?", "exit code 3",
 * "killed by signal 11 (SIGSEGV)". Returns the length as snprintf does. */
size_t acx_rank_exit_describe(const acx_rank_exit_t *r, char *buf, size_t size);

/* The summary line (no newline):
 *   rank 2 on node01 failed first: killed by signal 9 (SIGKILL) — out of
 *   memory? (Slurm job 1234, step 0)
 * with "; " and r->why appended when set. Returns the length as snprintf
 * does. */
size_t acx_rank_exit_summary(const acx_rank_exit_t *r, char *buf, size_t size);

/* The exit status `acx launch` returns for r: its exit code (1..255), or
 * 128 + signal, like a shell. */
int acx_rank_exit_status(const acx_rank_exit_t *r);

#endif /* ACX_LAUNCH_COMMAND_H */

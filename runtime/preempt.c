/*
 * runtime/preempt.c — preemption and time limits: the signals that ask a
 * job to stop, the agreement of all ranks at a step boundary, the
 * checkpoint taken there, the Slurm requeue, and resume: auto.
 *
 * Owns: parsing preemption.signals, the handlers and the one flag they set,
 * the per-boundary agreement, running `scontrol requeue`, and loading the
 * latest checkpoint at acx_prepare when resume is auto.
 * Leaves to others: writing and reading checkpoints (checkpoint.c), the
 * boundary bookkeeping (accelerator.c calls the hooks of preempt.h), the
 * batch script that turns Slurm's warning signal into one the ranks get
 * (`acx slurm sbatch`, docs/slurm.md), and the program's exit status
 * (ACX_EXIT_PREEMPTED, acx/accelerator.h).
 *
 * Why a flag and a boundary. A signal arrives at any instruction of any
 * rank — in the middle of a backward pass, inside an all-reduce, on one
 * rank only (kill -USR1 to one process) or on all (scancel --signal). The
 * handler does the only async-signal-safe thing, recording the signal
 * number; the decision is taken at the next synchronization boundary, where
 * the state is consistent (no gradients pending) and every rank is anyway.
 * There one MPI_Allreduce (MAXLOC over {signal, rank}) tells every rank
 * whether any rank was signalled, and which: they all stop at the same
 * step, so the one checkpoint they write together is that step's. The cost
 * when nothing happens is that all-reduce of 8 bytes per optimizer step
 * (~0.5 us at 2 ranks here); preemption.signals: none removes it.
 *
 * Before MPI. A job is often signalled in its first second: a preemption
 * that lands while the ranks are still starting, a scancel right after
 * sbatch. Most of that second is MPI_Init_thread, and a handler installed
 * after it leaves such a signal its default action: the rank dies with no
 * checkpoint. So acx_init resolves the configuration first (it needs no
 * MPI; its outcome is agreed once MPI is up) and installs the handlers of
 * exactly preemption.signals before MPI_Init_thread (acx_preempt_install);
 * acx_preempt_init installs them again later (MPI may have replaced them)
 * and keeps a signal already recorded, so the first step boundary stops
 * the job with a checkpoint as it would for a later one. A configuration
 * that does not resolve installs nothing early (acx_init fails anyway).
 *
 * A signal sent twice. Repeats are ignored while a stop is pending: the
 * same signal often arrives twice by design (Slurm signals a job step's
 * tasks directly and srun forwards what it gets too; a user presses scancel
 * twice), and none of them may cost the checkpoint. The exception is INT:
 * Ctrl-C twice at a terminal ends the process at once (the default action),
 * for a run that cannot reach its next boundary. The launchers' SIGKILL
 * after a grace period (Open MPI: 1 s after TERM; Slurm: KillWait) stays
 * the hard stop.
 *
 * Requeue. Inside a Slurm job with preemption.requeue set, rank 0 runs
 * `scontrol requeue $SLURM_JOB_ID` after the checkpoint is complete on every
 * rank (the save ends with an agreement), bounded to 30 s. Slurm then ends
 * the job's processes and starts the batch script again, with
 * SLURM_RESTART_COUNT incremented; with resume: auto that run loads the
 * checkpoint at acx_prepare. A failed requeue is logged, not returned: the
 * checkpoint is safe and the job still stops (acx_preempted).
 */
#include <errno.h>
#include <mpi.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collectives/watchdog.h"
#include "runtime/accelerator.h"
#include "base/error.h"
#include "base/log.h"
#include "base/settings.h"
#include "base/signal_list.h"
#include "runtime/preempt.h"
#include "runtime/project.h"

#define PREEMPT_PATH_MAX  4096
#define REQUEUE_TIMEOUT_S 30

extern char **environ;

/* ---- the handler and its state (process-wide, as dispositions are) ---- */

static volatile sig_atomic_t pending_signal;   /* first signal not yet acted on, 0 = none */
static volatile sig_atomic_t repeat_ends_mask; /* bit i: acx_signal_names[i] ends on repeat */
static struct sigaction default_action;        /* SIG_DFL, built before any handler runs */
static struct sigaction saved_action[ACX_NUM_SIGNAL_NAMES];
static int installed[ACX_NUM_SIGNAL_NAMES];

static void on_signal(int sig) {
    if (pending_signal == 0) {
        pending_signal = sig;
        return;
    }
    for (int i = 0; i < ACX_NUM_SIGNAL_NAMES; i++)
        if (acx_signal_names[i].sig == sig && (repeat_ends_mask & (1 << i))) {
            sigaction(sig, &default_action, NULL); /* both async-signal-safe */
            raise(sig);
        }
}

static const char *signal_name(int sig) {
    for (int i = 0; i < ACX_NUM_SIGNAL_NAMES; i++)
        if (acx_signal_names[i].sig == sig) return acx_signal_names[i].name;
    return "?";
}

/* ---- preemption.signals ---- */

static const acx_config_origin_t *key_origin(const acx_accelerator_t *acc, const char *key) {
    int k = acx_config_key_index(key);
    return k >= 0 ? &acc->config.origin[k] : NULL;
}

/* preemption.signals -> a mask over acx_signal_names (base/signal_list.c
 * parses; the config layer has already checked the text, so this fails only
 * for a value set after resolution). Returns ACX_OK or ACX_ERR_INVALID_CONFIG
 * naming the value, where it came from and what is wrong. */
static acx_status_t parse_signals(const acx_accelerator_t *acc, const char *text, int *mask_p) {
    const acx_config_origin_t *o = key_origin(acc, "preemption.signals");
    const char *from = o == NULL || o->source == ACX_SRC_DEFAULT ? "default" : o->where;
    char why[256];
    if (acx_signal_list_parse(text, mask_p, why, sizeof why) != 0)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "preemption.signals='%s' (from %s): %s", text,
                         from, why);
    return ACX_OK;
}

/* ---- lifecycle hooks ---- */

/* Install on_signal for every signal of mask not installed yet, keeping the
 * disposition it replaces; (re)install it for those that are, in case the
 * MPI library replaced it while starting. Never touches pending_signal. */
static acx_status_t install_handlers(int mask) {
    memset(&default_action, 0, sizeof default_action);
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* MPI and file I/O carry on; the flag waits for the boundary */
    for (int i = 0; i < ACX_NUM_SIGNAL_NAMES; i++) {
        if (!(mask & (1 << i))) continue;
        if (acx_signal_names[i].repeat_ends) repeat_ends_mask |= 1 << i;
        if (sigaction(acx_signal_names[i].sig, &sa, installed[i] ? NULL : &saved_action[i]) != 0) {
            int err = errno;
            return ACX_ERROR(ACX_ERR_SYSTEM, "sigaction(SIG%s) failed: %s",
                             acx_signal_names[i].name, strerror(err));
        }
        installed[i] = 1;
    }
    return ACX_OK;
}

acx_status_t acx_preempt_install(acx_accelerator_t *acc) {
    int mask = 0;
    ACX_CHECK(parse_signals(acc, acc->config.values.preemption.signals, &mask));
    acx_status_t status = install_handlers(mask);
    if (status != ACX_OK) acx_preempt_fini(acc);
    return status;
}

void acx_preempt_test_raise(void) {
    const char *name = acx_env_text(ACX_ENV_TEST_PREEMPT_RAISE_AT_INIT);
    int mask = 0;
    if (name == NULL || acx_signal_list_parse(name, &mask, NULL, 0) != 0) return;
    for (int i = 0; i < ACX_NUM_SIGNAL_NAMES; i++)
        if (mask & (1 << i)) raise(acx_signal_names[i].sig);
}

acx_status_t acx_preempt_init(acx_accelerator_t *acc) {
    const acx_config_t *c = &acc->config.values;
    int mask = 0;
    ACX_CHECK(parse_signals(acc, c->preemption.signals, &mask));

    long job = acc->launch.slurm_job_id; /* 0: not a Slurm job (or no usable id) */
    const char *restarts = getenv("SLURM_RESTART_COUNT");
    if (acc->rank == 0 && job > 0)
        ACX_INFO(ACX_SUBSYS_LAUNCH, "Slurm job %ld: SLURM_RESTART_COUNT=%s%s", job,
                 restarts != NULL ? restarts : "0",
                 restarts != NULL ? " (requeued)" : " (first run)");
    if (acc->rank == 0 && c->preemption.requeue && job <= 0 && mask != 0)
        ACX_WARN(ACX_SUBSYS_LAUNCH, "preemption.requeue is set but this is not a Slurm job "
                                    "(no SLURM_JOB_ID): a preempted run will not be requeued");
    if (mask == 0) return ACX_OK;

    /* Installed before MPI_Init_thread already (acx_preempt_install); again
     * here, keeping a signal that arrived since: it stops the job at the
     * first boundary. */
    acx_status_t status = install_handlers(mask);
    if (status != ACX_OK) {
        acx_preempt_fini(acc);
        return status;
    }
    char names[64] = "";
    for (int i = 0; i < ACX_NUM_SIGNAL_NAMES; i++) {
        if (!(mask & (1 << i))) continue;
        size_t n = strlen(names);
        snprintf(names + n, sizeof names - n, "%sSIG%s", n ? ", " : "", acx_signal_names[i].name);
    }
    acc->preempt_active = 1;
    if (acc->rank == 0)
        ACX_INFO(ACX_SUBSYS_LAUNCH,
                 "preemption: %s stop the job at the next step boundary with a "
                 "checkpoint%s",
                 names, c->preemption.requeue && job > 0 ? ", then requeue it" : "");
    if (pending_signal != 0)
        ACX_INFO(ACX_SUBSYS_LAUNCH,
                 "SIG%s arrived while acx_init was starting: the job stops at "
                 "the first step boundary",
                 signal_name(pending_signal));
    return ACX_OK;
}

void acx_preempt_fini(acx_accelerator_t *acc) {
    for (int i = 0; i < ACX_NUM_SIGNAL_NAMES; i++) {
        if (!installed[i]) continue;
        sigaction(acx_signal_names[i].sig, &saved_action[i], NULL);
        installed[i] = 0;
    }
    pending_signal = 0;
    repeat_ends_mask = 0;
    if (acc != NULL) acc->preempt_active = 0;
}

acx_status_t acx_preempt_prepared(acx_accelerator_t *acc) {
    /* resume_from, when set, was loaded already (runtime/project.c) */
    if (acc->config.values.resume != ACX_RESUME_AUTO || acx_project_loaded(acc)) return ACX_OK;
    char dir[PREEMPT_PATH_MAX], latest[PREEMPT_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/checkpoints", acc->config.values.project_dir);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    /* rank 0 looks (the directory may be on a shared file system that other
     * nodes see late); every rank follows its answer */
    int found = 0;
    if (acc->rank == 0) {
        struct stat st;
        found = stat(latest, &st) == 0;
    }
    ACX_MPI_CHECK(MPI_Bcast(&found, 1, MPI_INT, 0, acc->world->mpi));
    const char *restarts = getenv("SLURM_RESTART_COUNT");
    if (!found) {
        if (acc->rank == 0)
            ACX_INFO(ACX_SUBSYS_LAUNCH,
                     "resume: auto: no checkpoint in '%s' (no 'latest'): "
                     "starting fresh",
                     dir);
        return ACX_OK;
    }
    ACX_CHECK(acx_load_state(acc, NULL, 1));
    if (acc->rank == 0)
        ACX_INFO(ACX_SUBSYS_LAUNCH, "resume: auto: continuing from '%s' at step %lld%s%s", dir,
                 (long long)acc->step, restarts != NULL ? "; SLURM_RESTART_COUNT=" : "",
                 restarts != NULL ? restarts : "");
    return ACX_OK;
}

/* ---- the stop ---- */

/* `scontrol requeue JOB`, waited for at most REQUEUE_TIMEOUT_S seconds.
 * Its own messages go to this process's stderr. */
static acx_status_t slurm_requeue(long job_id) {
    char job[24];
    snprintf(job, sizeof job, "%ld", job_id);
    char *argv[] = {"scontrol", "requeue", job, NULL};
    pid_t pid;
    int ret = posix_spawnp(&pid, "scontrol", NULL, NULL, argv, environ);
    if (ret != 0)
        return ACX_ERROR(ACX_ERR_SYSTEM, "cannot run `scontrol requeue %s`: %s", job,
                         strerror(ret));
    int wstatus = 0;
    struct timespec tick = {0, 20 * 1000 * 1000};
    for (int waited = 0;; waited++) {
        pid_t r = waitpid(pid, &wstatus, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR)
            return ACX_ERROR(ACX_ERR_SYSTEM, "waitpid(scontrol) failed: %s", strerror(errno));
        if (waited * 20 >= REQUEUE_TIMEOUT_S * 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &wstatus, 0);
            return ACX_ERROR(ACX_ERR_TIMEOUT,
                             "`scontrol requeue %s` did not finish within %d s "
                             "(slurmctld unreachable?)",
                             job, REQUEUE_TIMEOUT_S);
        }
        nanosleep(&tick, NULL);
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return ACX_OK;
    if (WIFEXITED(wstatus))
        return ACX_ERROR(ACX_ERR_SYSTEM,
                         "`scontrol requeue %s` exited %d (its message is above; "
                         "was the job submitted with --no-requeue, or is it not a batch job?)",
                         job, WEXITSTATUS(wstatus));
    return ACX_ERROR(ACX_ERR_SYSTEM, "`scontrol requeue %s` was killed by signal %d", job,
                     WTERMSIG(wstatus));
}

acx_status_t acx_preempt_step_end(acx_accelerator_t *acc) {
    if (!acc->preempt_active) return ACX_OK;
    struct {
        int sig, rank;
    } mine = {pending_signal, acc->rank}, first;
    ACX_MPI_CHECK(ACX_WATCHED("preemption agreement", MPI_Allreduce(&mine, &first, 1, MPI_2INT,
                                                                    MPI_MAXLOC, acc->world->mpi)));
    if (first.sig == 0) return ACX_OK;
    pending_signal = 0; /* acted on: a later signal asks for a later stop */

    /* The periodic save of this very step already wrote the checkpoint. */
    const acx_config_t *c = &acc->config.values;
    int64_t every = c->checkpoint.save_every_steps;
    if (!(every > 0 && acc->step % every == 0)) ACX_CHECK(acx_save_state(acc, NULL));
    /* the job stops: its requeued successor may take the project at once */
    if (acc->rank == 0) acx_project_release(acc);
    char file[PREEMPT_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/checkpoints/step_%08lld.h5", c->project_dir,
             (long long)acc->step);
    /* Every rank says it: the logs then show that all stopped at one step. */
    ACX_LOG(acc->rank == 0 ? ACX_LOG_WARN : ACX_LOG_INFO, ACX_SUBSYS_LAUNCH,
            "preempted: SIG%s received by rank %d; stopped at step %lld and saved '%s'",
            signal_name(first.sig), first.rank, (long long)acc->step, file);

    long job = acc->launch.slurm_job_id;
    if (c->preemption.requeue && job > 0) {
        acx_status_t status = acc->rank == 0 ? slurm_requeue(job) : ACX_OK;
        status = acx_coll_agree(acc->world, status);
        if (acc->rank == 0 && status == ACX_OK)
            ACX_WARN(ACX_SUBSYS_LAUNCH,
                     "requeued Slurm job %ld (`scontrol requeue`): it starts "
                     "again from the batch script%s",
                     job,
                     c->resume == ACX_RESUME_AUTO
                         ? " and resumes from this checkpoint"
                         : "; set resume: auto to continue from this checkpoint");
        else if (acc->rank == 0)
            ACX_WARN(ACX_SUBSYS_LAUNCH,
                     "the job was not requeued: %s; the checkpoint is saved: "
                     "resubmit to continue",
                     acx_last_error());
    }
    /* a stop is not an error (acx/status.h): acx_preempted says it */
    acc->preempted = 1;
    return ACX_OK;
}

ACX_API int acx_preempted(const acx_accelerator_t *acc) { return acc != NULL && acc->preempted; }

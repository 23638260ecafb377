/*
 * runtime/preempt.h — preemption, time limits and automatic resume
 * (library-private to runtime/; the public side is in acx/accelerator.h).
 *
 * The accelerator calls these hooks: before MPI_Init_thread and at the end
 * of acx_init, at the end of acx_prepare, after every synchronization boundary, and when it is
 * freed. The signal disposition is process-wide, as signals are; one
 * accelerator per process.
 */
#ifndef ACX_RUNTIME_PREEMPT_H
#define ACX_RUNTIME_PREEMPT_H

#include "acx/acx.h"

/* Before MPI_Init_thread, with acc->config resolved: install the handlers
 * of preemption.signals (none for "none"), so a signal that arrives while
 * MPI starts is recorded instead of ending the rank. Not collective (MPI is
 * not up yet); the caller reports an error after MPI is up, agreed. Keeps a
 * signal already recorded. Errors: ACX_ERR_INVALID_CONFIG, ACX_ERR_SYSTEM
 * (sigaction; the dispositions are then restored). */
acx_status_t acx_preempt_install(acx_accelerator_t *acc);

/* Test hook, just before MPI_Init_thread: ACX_TEST_PREEMPT_RAISE_AT_INIT=SIG
 * (names as preemption.signals takes them) raises SIG in this process, the
 * way a signal that arrives during MPI's start would. Unset: nothing. */
void acx_preempt_test_raise(void);

/* Parse preemption.signals and install its handlers (none for "none"),
 * again after MPI_Init_thread, keeping a signal recorded since
 * acx_preempt_install: the first boundary then stops the job;
 * log the Slurm job and SLURM_RESTART_COUNT. Every rank parses the same
 * agreed config, so all succeed or all fail. Errors: ACX_ERR_INVALID_CONFIG
 * (an unknown signal name: the message names the key, value, origin and the
 * accepted names), ACX_ERR_SYSTEM (sigaction). */
acx_status_t acx_preempt_init(acx_accelerator_t *acc);

/* resume: auto — load <project_dir>/checkpoints/latest when it exists.
 * Collective (rank 0 looks; all load). Errors: those of acx_load_state. */
acx_status_t acx_preempt_prepared(acx_accelerator_t *acc);

/* After a boundary's step count and periodic save: agree whether any rank
 * got a preemption signal (one MPI_Allreduce, MAXLOC of the signal number);
 * if so save (unless the periodic save just did), requeue under Slurm
 * (preemption.requeue) and set acc->preempted on every rank (ACX_OK: a stop
 * is not an error, acx/status.h). Collective.
 * Errors: ACX_ERR_MPI, those of acx_save_state. */
acx_status_t acx_preempt_step_end(acx_accelerator_t *acc);

/* Put back the signal dispositions acx_preempt_init replaced. */
void acx_preempt_fini(acx_accelerator_t *acc);

#endif /* ACX_RUNTIME_PREEMPT_H */

/*
 * runtime/project.h — the project directory (runtime/project.c): the one
 * place that knows what project_dir/checkpoints holds and who may write it.
 * Library-private.
 */
#ifndef ACX_RUNTIME_PROJECT_H
#define ACX_RUNTIME_PROJECT_H

#include <stdint.h>

#include "acx/status.h"

typedef struct acx_accelerator acx_accelerator_t;

/* A run's identity: 32 lower-case hex digits and a NUL. */
#define ACX_RUN_ID_LEN 33

/* At acx_prepare, before any checkpoint is loaded. When the run will write
 * the project directory (checkpoint.save_every_steps > 0, resume: auto, or
 * resume_from set), rank 0 creates <project_dir>/checkpoints, checks that it
 * is writable, takes the project lock and refuses a run that does not resume
 * into a directory that holds checkpoints (or, with checkpoint.existing:
 * archive, moves them aside); then, with resume_from set, loads that
 * checkpoint. Otherwise the same happens at the first automatically named
 * save (acx_project_for_save). Collective; every rank returns the same
 * status: ACX_ERR_IO (cannot create / not writable / checkpoints present /
 * locked by another job, each message naming the path and what to do),
 * or a load's error. */
acx_status_t acx_project_prepare(acx_accelerator_t *acc);

/* Before an automatically named save of step `step`: open the project if
 * acx_prepare did not (see above), check that the lock is still this job's
 * and that `name` (step_%08lld.h5) would not replace a checkpoint this
 * process did not write. Writes the checkpoint directory into dir[n] and the
 * file name into name[n_name]. Collective. */
acx_status_t acx_project_for_save(acx_accelerator_t *acc, int64_t step, char *dir, size_t n,
                                  char *name, size_t n_name);

/* After an automatically named save is complete on every rank (rank 0
 * only): point `latest` at `name`, then apply checkpoint.total_limit to this
 * run's checkpoints. The names retention deleted go into removed[n], comma
 * separated ("" when none; "..." ends a list that did not fit). */
acx_status_t acx_project_saved(acx_accelerator_t *acc, const char *dir, const char *name,
                               int64_t step, char *removed, size_t n);

/* The run identity written into every checkpoint ("run_id" root attribute);
 * "" before acx_prepare. A load adopts the checkpoint's (acx_project_adopt). */
const char *acx_project_run_id(const acx_accelerator_t *acc);
void acx_project_adopt(acx_accelerator_t *acc, const char *run_id);

/* Whether this run loaded a checkpoint (resume_from, resume: auto or
 * acx_load_state). */
int acx_project_loaded(const acx_accelerator_t *acc);

/* Release the project lock (rank 0; nothing elsewhere): when a preempted
 * job stops, so that its requeued successor can take it at once. A later
 * automatically named save takes it again. Idempotent. */
void acx_project_release(acx_accelerator_t *acc);

/* Release the lock and free the project state: at acx_finalize. */
void acx_project_free(acx_accelerator_t *acc);

/* Whether a file name is an automatically named checkpoint, and its step
 * (>= 0), else -1: "step_" then 1 to 19 decimal digits then ".h5". */
int64_t acx_project_step_of_name(const char *name);

#endif /* ACX_RUNTIME_PROJECT_H */

/*
 * collectives/watchdog.h — the stall detector (library-private).
 *
 * Every blocking collective and every wait of a backend is bracketed by
 * acx_watch_enter / acx_watch_exit (collectives/mpi/coll_mpi.c), and so are
 * the runtime's own MPI calls on the training path (ACX_WATCHED below). A
 * background thread checks, once or twice a second, whether the collective
 * in progress has been running longer than collective_timeout; if so it
 * prints one diagnostic line — the op, its sequence number on this rank, the
 * training step, and for every rank of this node whether it has arrived
 * (in the same collective), is in another one, or has not arrived (still
 * computing, or stuck) since its last collective — and ends the process
 * with ACX_EXIT_STALL, so the launcher (mpirun, srun --kill-on-bad-exit)
 * tears the whole job down within seconds instead of waiting for ever.
 *
 * The ranks of a node publish their state in a shared-memory table
 * (MPI_Win_allocate_shared over the node's shared-memory communicator),
 * which the thread reads without any MPI call: it works when a peer is stuck
 * in its own code and makes no MPI progress. Ranks on other nodes are not
 * visible (their own watchdogs report them).
 *
 * Threading: enter/exit are called by the thread that calls MPI (acx uses
 * MPI_THREAD_FUNNELED); the watchdog thread never calls MPI.
 */
#ifndef ACX_COLL_WATCHDOG_H
#define ACX_COLL_WATCHDOG_H

#include <mpi.h>
#include <stdint.h>

#include "acx/status.h"

/* Exit status of a process ended by the stall detector. */
#define ACX_EXIT_STALL 76 /* ACX_EXIT_PREEMPTED is 75 */

/* Start the watchdog: timeout_s > 0 seconds; step_p (may be NULL) is read
 * for the diagnostic. Collective over MPI_COMM_WORLD (allocates the node
 * table). A second start is an error. Errors: ACX_ERR_MPI, ACX_ERR_SYSTEM
 * (thread creation), ACX_ERR_STATE. */
acx_status_t acx_watchdog_start(double timeout_s, int world_rank, const char *host,
                                const volatile int64_t *step_p);

/* Stop the thread and free the table. Collective over MPI_COMM_WORLD (the
 * shared window is freed collectively). No-op when not started. */
void acx_watchdog_stop(void);

/* The calling rank enters / leaves a (possibly nested) collective; only the
 * outermost one is timed. op: a static string ("all_reduce", "wait", ...). */
void acx_watch_enter(const char *op);
void acx_watch_exit(void);

/* A plain MPI collective outside the backends, timed like the backends'
 * collectives so that a rank stuck elsewhere is reported while the others
 * wait in it: ACX_MPI_CHECK(ACX_WATCHED("clip_grad_norm", MPI_Allreduce(...))).
 * Used for the runtime's small reductions of the training and evaluation
 * loop (the preemption agreement at every boundary, the loss scaler's flag,
 * the clipping norm, the item count, the debug mode's check, the evaluation
 * helpers) — not for the status agreements after local work of unbounded
 * length (file I/O, setup), which a slow file system may legitimately
 * stretch past collective_timeout. Evaluates to the call's MPI return code;
 * op is a static name of at most 23 characters. */
static inline int acx_watch_exit_ret(int ret) {
    acx_watch_exit();
    return ret;
}
#define ACX_WATCHED(op, call) (acx_watch_enter(op), acx_watch_exit_ret(call))

#endif /* ACX_COLL_WATCHDOG_H */

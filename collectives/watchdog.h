/*
 * collectives/watchdog.h — the stall detector (library-private).
 *
 * Every blocking collective and every wait of a backend is bracketed by
 * acx_watch_enter / acx_watch_exit (collectives/mpi/coll_mpi.c), and so are
 * the runtime's own MPI calls on the training path (ACX_WATCHED below), the
 * status agreements, checkpoint saves and loads as a whole (with their own
 * limit, checkpoint.timeout) and acx_finalize. A background thread checks,
 * once or twice a second, whether the collective in progress has been
 * running longer than its limit; if so it prints one diagnostic line — the
 * op, its sequence number on this rank, the training step, and for every
 * rank of this node whether it is not responding (its own thread has
 * stopped stamping a heartbeat: the process is stopped or dead), has
 * arrived (in the same collective), is in another one, or has not arrived
 * (still computing, or stuck) since its last collective; when none of them
 * holds it up, which ranks elsewhere do — and ends the process
 * with ACX_EXIT_STALL, so the launcher (mpirun, srun --kill-on-bad-exit)
 * tears the whole job down within seconds instead of waiting for ever.
 *
 * The ranks of a node publish their state in a shared-memory table
 * (MPI_Win_allocate_shared over the node's shared-memory communicator),
 * which the thread reads without any MPI call: it works when a peer is stuck
 * in its own code and makes no MPI progress. Ranks on other nodes are not
 * visible (their own watchdogs report them); every rank's host name is
 * gathered at start, so that when the collective waits on other nodes only,
 * the line names those ranks with their hosts — the only word of a node
 * that is dead or cut off, whose own detector's line cannot arrive.
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

/* Start the watchdog: timeout_s > 0 seconds, the limit of a collective;
 * io_timeout_s (<= 0: timeout_s) the limit of a watch that includes file
 * I/O (acx_watch_enter_io); step_p (may be NULL) is read for the
 * diagnostic; host (this rank's host name, NULL: "?") prefixes its lines
 * and is gathered from every rank (64 bytes each, truncated) for the line
 * about other nodes. Collective over MPI_COMM_WORLD (allocates the node
 * table).
 * A second start is an error. Errors: ACX_ERR_MPI, ACX_ERR_SYSTEM (thread
 * creation), ACX_ERR_NO_MEMORY (the host names), ACX_ERR_STATE. */
acx_status_t acx_watchdog_start(double timeout_s, double io_timeout_s, int world_rank,
                                const char *host, const volatile int64_t *step_p);

/* Stop the thread and free the table. Collective over MPI_COMM_WORLD (the
 * shared window is freed collectively). The thread's wait between checks is
 * signalled, so stopping it costs no part of a period. No-op when not
 * started. */
void acx_watchdog_stop(void);

/* The calling rank enters / leaves a (possibly nested) collective; the
 * outermost one is timed, from its entry, against the longest limit of the
 * watches open (so a collective inside a checkpoint save has the save's
 * limit). op: a static string of at most 23 characters ("all_reduce",
 * "wait", ...). acx_watch_enter: limit collective_timeout;
 * acx_watch_enter_io: io_timeout_s (checkpoint.timeout), for a span whose
 * waits include file I/O on some rank (a save, a load, a dataset open). */
void acx_watch_enter(const char *op);
void acx_watch_enter_io(const char *op);
void acx_watch_exit(void);

/* A deadline for waits after the watchdog's table is gone (acx_finalize:
 * the table's own MPI_Win_free, MPI_Finalize): a plain timer thread that
 * ends the process with ACX_EXIT_STALL and one line naming `what` and the
 * current step unless acx_deadline_stop comes within limit_s seconds.
 * what and step: static strings; acx_deadline_step names the next step.
 * Local; one at a time. Errors: ACX_ERR_SYSTEM, ACX_ERR_STATE. */
acx_status_t acx_deadline_start(double limit_s, const char *what, const char *step, int world_rank,
                                const char *host);
void acx_deadline_step(const char *step);
void acx_deadline_stop(void);

/* A plain MPI collective outside the backends, timed like the backends'
 * collectives so that a rank stuck elsewhere is reported while the others
 * wait in it: ACX_MPI_CHECK(ACX_WATCHED("clip_grad_norm", MPI_Allreduce(...))).
 * Used for the runtime's small reductions of the training and evaluation
 * loop (the preemption agreement at every boundary, the loss scaler's flag,
 * the clipping norm, the item count, the debug mode's check and its
 * agreement at init, the evaluation helpers, acx_prepare's and
 * acx_dataloader_open's argument agreements, acx_print_ordered's gathers)
 * and for the status agreements (acx_coll_agree). Spans whose
 * waits follow file I/O of unbounded length on some rank (a checkpoint save
 * or load, a weights file, a dataset open) are bracketed as a whole by
 * acx_watch_enter_io, whose longer limit then covers the agreements and
 * collective I/O inside. Evaluates to the call's MPI return code; op is a
 * static name of at most 23 characters. */
static inline int acx_watch_exit_ret(int ret) {
    acx_watch_exit();
    return ret;
}
#define ACX_WATCHED(op, call) (acx_watch_enter(op), acx_watch_exit_ret(call))

#endif /* ACX_COLL_WATCHDOG_H */

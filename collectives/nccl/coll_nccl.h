/*
 * collectives/nccl/coll_nccl.h — the NCCL backend (library-private; only in
 * builds with NCCL, ACX_HAVE_NCCL). Its table, and the table's two
 * entries beyond the collectives, also callable directly (tests/gpu): the
 * live-communicator abort of the fatal paths (abort_all, reached through
 * acx_coll_abort_all in ../coll.c) and the compute stream a communicator
 * orders its collectives after (set_compute_stream).
 */
#ifndef ACX_COLL_NCCL_H
#define ACX_COLL_NCCL_H

#include "collectives/coll.h"

/* The NCCL backend's table (coll_nccl.c): buffers are device memory of the
 * device current when the communicator was created. */
extern const acx_coll_ops_t acx_coll_nccl_ops;

/* ncclCommAbort on every live NCCL communicator of this process (see
 * acx_coll_abort_all). */
void acx_coll_nccl_abort_all(void);

/* Collectives on comm (an NCCL communicator) start after all work enqueued
 * so far on `stream` (a cudaStream_t; NULL: the legacy default stream, the
 * initial setting, which also covers every blocking stream). They run on the
 * communicator's own stream, so compute enqueued later on `stream` overlaps
 * them. Not collective. Errors: ACX_ERR_INVALID_ARG (not an NCCL comm). */
acx_status_t acx_coll_nccl_set_compute_stream(acx_comm_t *comm, void *stream);

#endif /* ACX_COLL_NCCL_H */

/*
 * collectives/coll.h — the collective backend interface (library-private).
 *
 * As in Open MPI's coll framework: one backend = one folder with one table of
 * function pointers (acx_coll_ops_t), chosen at run time in coll.c, the only
 * file that knows which backends were compiled in. A communicator
 * (acx_comm_t) pairs an MPI communicator — always present: bootstrap, status
 * agreement and host-memory fallbacks use it — with the backend that moves
 * the data.
 *
 * Backend functions are collective over comm, record their own errors and
 * never abort. Counts are in elements; buffers are host memory for the MPI
 * backend and device memory for NCCL.
 */
#ifndef ACX_COLL_H
#define ACX_COLL_H

#include <mpi.h>
#include <stddef.h>

#include "acx/config.h"
#include "acx/status.h"
#include "acx/types.h"

typedef struct acx_comm acx_comm_t;
typedef struct acx_coll_req acx_coll_req_t; /* backend-defined pending operation */

typedef struct acx_coll_ops {
    const char *name;                            /* "mpi", "nccl" */
    int device_memory; /* buffers are CUDA device memory (NCCL); 0: host memory (MPI) */
    acx_status_t (*comm_init)(acx_comm_t *comm); /* set comm->state */
    void (*comm_fini)(acx_comm_t *comm);

    /* recvbuf [count] = op over ranks of sendbuf [count]; sendbuf == recvbuf
     * is in place. Every dtype takes SUM, MAX, MIN (and PROD); AVG needs a
     * float dtype. */
    acx_status_t (*all_reduce)(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                               acx_dtype_t dtype, acx_red_op_t op);
    /* recvbuf [count] on rank r = op over ranks of block r of sendbuf
     * [size x count] (blocks in rank order). In place (NCCL's rule): recvbuf
     * == sendbuf + r * count elements; any other overlap is an error. */
    acx_status_t (*reduce_scatter)(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype, acx_red_op_t op);
    acx_status_t (*broadcast)(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                              int root);
    /* recvbuf [size x count] in rank order. In place: sendbuf == recvbuf +
     * rank * count elements. */
    acx_status_t (*all_gather)(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                               acx_dtype_t dtype);
    /* On root, recvbuf [size x count] gets every rank's sendbuf [count] in
     * rank order (in place: root's sendbuf == recvbuf + root * count);
     * recvbuf is not used on the other ranks (may be NULL). */
    acx_status_t (*gather)(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                           acx_dtype_t dtype, int root);
    acx_status_t (*barrier)(acx_comm_t *comm);

    /* Non-blocking forms of the above, same arguments: each starts the
     * operation and writes *req_p, which completes in test/wait. Buffers
     * belong to the operation until then. Every rank must start collectives
     * on a communicator in the same order, blocking and non-blocking alike. */
    acx_status_t (*all_reduce_start)(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                     acx_coll_req_t **req_p);
    acx_status_t (*reduce_scatter_start)(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                         acx_coll_req_t **req_p);
    acx_status_t (*broadcast_start)(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                                    int root, acx_coll_req_t **req_p);
    acx_status_t (*all_gather_start)(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, acx_dtype_t dtype, acx_coll_req_t **req_p);
    acx_status_t (*gather_start)(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                 acx_dtype_t dtype, int root, acx_coll_req_t **req_p);
    acx_status_t (*barrier_start)(acx_comm_t *comm, acx_coll_req_t **req_p);
    /* Drive progress; *done_p = 1 when complete (req is then still owned by
     * the caller until wait). */
    acx_status_t (*test)(acx_coll_req_t *req, int *done_p);
    /* Complete and free req (also when it fails). */
    acx_status_t (*wait)(acx_coll_req_t *req);
} acx_coll_ops_t;

struct acx_comm {
    MPI_Comm mpi; /* owned (a dup) */
    int rank, size;
    const acx_coll_ops_t *ops;
    void *state; /* backend-private */
};

/* Pick the backend for `kind` (AUTO: the highest-priority backend usable
 * here — NCCL when compiled in and a device is visible, else MPI). Writes
 * the chosen backend's ops. Errors: ACX_ERR_NOT_SUPPORTED (NCCL requested
 * but not compiled in / no device; the message says which). */
acx_status_t acx_coll_select(acx_backend_kind_t kind, const acx_coll_ops_t **ops_p);

/* Duplicate `parent` and bind it to ops. Collective over parent. */
acx_status_t acx_comm_create(MPI_Comm parent, const acx_coll_ops_t *ops, acx_comm_t **comm_p);
/* Split like MPI_Comm_split; same backend. Collective over parent. */
acx_status_t acx_comm_split(acx_comm_t *parent, int color, int key, acx_comm_t **comm_p);
void acx_comm_destroy(acx_comm_t *comm);

/* The MPI backend's table (collectives/mpi/). */
extern const acx_coll_ops_t acx_coll_mpi_ops;

/* Abort every live communicator of a device backend (ncclCommAbort), so
 * that kernels waiting for a dead peer end. Only for the fatal paths, just
 * before the process exits: acx_abort before MPI_Abort, and the stall
 * detector before it ends the process. Callable from any thread; the
 * communicators must not be used afterwards. No-op without NCCL. */
void acx_coll_abort_all(void);

/* Order comm's collectives after the work enqueued on `stream` (a
 * cudaStream_t; NULL: the legacy default stream): the NCCL backend's
 * acx_coll_nccl_set_compute_stream. A host-memory backend (MPI) has nothing
 * to order (its callers synchronize the stream before handing it device
 * buffers): ACX_OK. Not collective. */
acx_status_t acx_coll_set_compute_stream(acx_comm_t *comm, void *stream);

/* MPI datatype / op of an acx dtype / op: the predefined ones only
 * (MPI_DATATYPE_NULL for float16/bfloat16, which MPI has no type for — the
 * MPI backend moves them as MPI_UINT16_T and reduces them with its own ops;
 * MPI_OP_NULL for ACX_OP_AVG, a sum followed by a division). */
MPI_Datatype acx_mpi_datatype(acx_dtype_t dtype);
MPI_Op acx_mpi_op(acx_red_op_t op);

/* Make every rank of comm return the same status: ACX_OK if all passed
 * `local` == ACX_OK, else the status of the lowest failing rank, whose error
 * message is broadcast so every rank's acx_last_error() reads
 * "rank R: <that rank's message>" (ACX_ERR_REMOTE on the others is NOT used:
 * all ranks return the failing rank's status, so callers can test it).
 * Collective; uses MPI on host memory whatever the backend. */
acx_status_t acx_coll_agree(acx_comm_t *comm, acx_status_t local);

#endif /* ACX_COLL_H */

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
 * backend and device memory for NCCL (and for its test double,
 * nccl-emulated: the emulated device's memory, device/ops.h).
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
    const char *name;  /* "mpi", "nccl", "nccl-emulated" */
    int device_memory; /* buffers are device memory (NCCL); 0: host memory (MPI) */
    int emulated;      /* 1: a test double whose device memory is the emulated device's
                          (nccl-emulated): no CUDA device is used */
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

    /* Order comm's later collectives after the work enqueued on `stream`
     * (a cudaStream_t; NULL: the legacy default stream). NULL entry: the
     * backend has nothing to order (host memory: its callers synchronize
     * the stream before handing it device buffers). Not collective. */
    acx_status_t (*set_compute_stream)(acx_comm_t *comm, void *stream);
    /* Abort every live communicator of this backend (ncclCommAbort), so
     * that kernels waiting for a dead peer end; fatal paths only, from any
     * thread. NULL entry: nothing can hang outside MPI (MPI_Abort ends
     * it). */
    void (*abort_all)(void);
} acx_coll_ops_t;

struct acx_comm {
    MPI_Comm mpi; /* owned (a dup) */
    int rank, size;
    const acx_coll_ops_t *ops;
    void *state; /* backend-private */
};

/* The backend a (backend, device_state) pair gets (acx_coll_decide). */
typedef enum acx_coll_pick {
    ACX_COLL_PICK_MPI = 0,
    ACX_COLL_PICK_NCCL = 1,
    ACX_COLL_PICK_NCCL_EMULATED = 2 /* the NCCL test double (acx_coll_nccl_emul_ops) */
} acx_coll_pick_t;

/*
 * The backend decision, pure (no probing, no logging: what acx_coll_select
 * does around it, and what tests/unit/test_coll_select.c checks):
 *   mpi                       -> MPI;
 *   nccl + device_state emulated -> the NCCL test double (never chosen
 *                                otherwise: backend nccl must be asked for);
 *   nccl + any other state    -> NCCL when nccl_usable, else
 *                                ACX_ERR_NOT_SUPPORTED naming nccl_why;
 *   auto                      -> NCCL when nccl_usable AND device_state is
 *                                cuda (the program said its model runs on
 *                                the device: NCCL would force device state
 *                                on a program that reads acx_param_data on
 *                                the host), else MPI.
 * why [why_len] gets the reason for the info line (auto) or the selection.
 * Errors: ACX_ERR_NOT_SUPPORTED, ACX_ERR_INVALID_ARG (kind or device_state
 * out of range). Writes *pick_p on success only.
 */
acx_status_t acx_coll_decide(acx_backend_kind_t kind, acx_device_state_t device_state,
                             int nccl_usable, const char *nccl_why, acx_coll_pick_t *pick_p,
                             char *why, size_t why_len);

/* Pick the backend for `kind` and the configured `device_state`
 * (acx_coll_decide, with NCCL usable when compiled in and a device is
 * visible) and log the choice. Writes the chosen backend's ops. Errors:
 * ACX_ERR_NOT_SUPPORTED (NCCL requested but not compiled in / no device;
 * the message says which), ACX_ERR_INVALID_ARG. Not collective. */
acx_status_t acx_coll_select(acx_backend_kind_t kind, acx_device_state_t device_state,
                             const acx_coll_ops_t **ops_p);

/* Bind the device the backend's memory needs (device/device.h's
 * acx_device_select): a CUDA device for a backend on device memory
 * (ops->device_memory), none for a host-memory backend or for a test double
 * on the emulated device (ops->emulated); logs the "device:" info line.
 * local_rank/local_size: this rank on its node. Not collective (callers
 * agree on the outcome). Errors: ACX_ERR_NOT_SUPPORTED (device backend, no
 * device visible: the message says to use backend: mpi),
 * ACX_ERR_INVALID_ARG, ACX_ERR_CUDA (cudaSetDevice failed). */
acx_status_t acx_coll_device_setup(const acx_coll_ops_t *ops, int local_rank, int local_size);

/* Duplicate `parent` and bind it to ops. Collective over parent. */
acx_status_t acx_comm_create(MPI_Comm parent, const acx_coll_ops_t *ops, acx_comm_t **comm_p);
/* Split like MPI_Comm_split; same backend. Collective over parent. */
acx_status_t acx_comm_split(acx_comm_t *parent, int color, int key, acx_comm_t **comm_p);
void acx_comm_destroy(acx_comm_t *comm);

/* The MPI backend's table (collectives/mpi/). */
extern const acx_coll_ops_t acx_coll_mpi_ops;

/* The NCCL backend's test double (collectives/nccl/coll_nccl_emul.c, every
 * build): NCCL's argument rules, every buffer checked to be emulated device
 * memory (a host pointer is ACX_ERR_INVALID_ARG where NCCL would fault),
 * the data moved by the MPI backend. Chosen only by backend: nccl together
 * with device_state: emulated. */
extern const acx_coll_ops_t acx_coll_nccl_emul_ops;

/* Abort every live communicator of every compiled-in backend (each
 * table's abort_all), so that kernels waiting for a dead peer end. Only
 * for the fatal paths, just before the process exits: acx_abort before
 * MPI_Abort, and the stall detector before it ends the process. Callable
 * from any thread; the communicators must not be used afterwards. No-op
 * when no backend has an abort_all (builds without NCCL). */
void acx_coll_abort_all(void);

/* Order comm's collectives after the work enqueued on `stream` (a
 * cudaStream_t; NULL: the legacy default stream): comm->ops's
 * set_compute_stream; ACX_OK at once for a backend without one (host
 * memory, MPI). Not collective. Errors: ACX_ERR_INVALID_ARG (comm NULL),
 * the backend's. */
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

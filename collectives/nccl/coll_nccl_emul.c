/*
 * collectives/nccl/coll_nccl_emul.c — the NCCL backend's test double
 * (acx_coll_nccl_emul_ops, "nccl-emulated"), compiled in every build, so
 * that the code paths that hand buffers to a device-memory backend run in
 * CI without a GPU.
 *
 * What it checks, per call, before anything moves:
 *   - NCCL's argument rules, with the NCCL backend's own checks
 *     (coll_nccl_args.h): NULL buffers, AVG only for float dtypes, roots,
 *     the in-place forms (reduce-scatter's recvbuf is block `rank` of
 *     sendbuf, all-gather's sendbuf is block `rank` of recvbuf; any other
 *     overlap is an error);
 *   - that EVERY buffer it is given is emulated device memory
 *     (acx_devops_emulated_owns over the bytes the call touches): a host
 *     pointer that the MPI backend would accept (and stage or use as it
 *     is) makes the real NCCL backend's kernel read an illegal address, so
 *     here it is ACX_ERR_INVALID_ARG naming the operation and the argument.
 * Then the MPI backend's table (acx_coll_mpi_ops, which stages emulated
 * buffers through host memory) moves the data: same results as backend:
 * mpi, bit for bit.
 *
 * Communicator state: each communicator of the double owns an MPI-backend
 * communicator (a dup of its MPI communicator, created in comm_init), and
 * every operation runs on that one. So comm->state is NOT the MPI backend's
 * state, as it is not with the real NCCL backend: code that calls the MPI
 * table directly with a device-backend communicator is refused there
 * (collectives/mpi/coll_mpi.c) instead of working by accident here.
 * Requests are the MPI backend's, completed by its test/wait.
 *
 * Semantics it does NOT reproduce: NCCL's streams (the MPI backend is
 * synchronous with respect to the emulated device, whose operations
 * complete on return, so ordering bugs between the compute stream and the
 * communication stream are invisible here), NCCL's rounding of 16-bit
 * sums and of AVG (the MPI backend's rules apply), and NCCL's failures.
 * It is chosen only by backend: nccl together with device_state: emulated
 * (../coll.c), says so once in the log, and is never a fallback.
 */
#include <stdio.h>

#include "collectives/coll.h"
#include "collectives/nccl/coll_nccl_args.h"
#include "device/ops.h"
#include "base/error.h"
#include "base/log.h"

#define MPI_TABLE (&acx_coll_mpi_ops)

/* ---- communicators ---- */

static acx_status_t emul_comm_init(acx_comm_t *comm) {
    static int warned;
    acx_comm_t *inner = NULL;
    ACX_CHECK(acx_comm_create(comm->mpi, MPI_TABLE, &inner));
    comm->state = inner;
    if (!warned && comm->rank == 0)
        ACX_WARN(ACX_SUBSYS_COLL,
                 "backend: nccl with device_state: emulated: collectives run on the "
                 "NCCL-EMULATED backend, a test double of the NCCL backend (NCCL's argument "
                 "rules and device-memory checks, MPI moving the data); for testing without a "
                 "GPU, never a fallback");
    warned = 1;
    return ACX_OK;
}

static void emul_comm_fini(acx_comm_t *comm) {
    acx_comm_destroy(comm->state);
    comm->state = NULL;
}

/* The MPI-backend communicator doing comm's work. */
static acx_status_t inner_of(const acx_comm_t *comm, const char *what, acx_comm_t **inner_p) {
    if (comm == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: comm is NULL", what);
    if (comm->state == NULL)
        return ACX_ERROR(ACX_ERR_STATE, "%s: the nccl-emulated communicator has no state", what);
    *inner_p = comm->state;
    return ACX_OK;
}

/* ---- arguments ---- */

static acx_status_t check_dtype(acx_dtype_t dtype, const char *what) {
    if (acx_dtype_size(dtype) == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: dtype %d is not an acx_dtype_t", what,
                         (int)dtype);
    return ACX_OK;
}

/* buf [count x dtype] (`name` in the error) lies in emulated device memory:
 * the NCCL backend would read or write it on the device. */
static acx_status_t check_device(const void *buf, size_t count, acx_dtype_t dtype, const char *name,
                                 const char *what) {
    size_t bytes = count * acx_dtype_size(dtype);
    if (bytes == 0 || acx_devops_emulated_owns(buf, bytes)) return ACX_OK;
    return ACX_ERROR(ACX_ERR_INVALID_ARG,
                     "nccl-emulated %s of %zu elements: %s (%p, %zu bytes) is host memory: the "
                     "NCCL backend would fault on it (illegal address); host data goes through "
                     "MPI (the communicator's MPI communicator, or backend: mpi)",
                     what, count, name, buf, bytes);
}

/* ---- the collectives (req_p NULL: blocking) ---- */

static acx_status_t all_reduce(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                               acx_dtype_t dtype, acx_red_op_t op, acx_coll_req_t **req_p) {
    const char *what = "all-reduce";
    acx_comm_t *in = NULL;
    ACX_CHECK(inner_of(comm, what, &in));
    ACX_CHECK(check_dtype(dtype, what));
    ACX_CHECK(acx_nccl_check_op(op, dtype, what));
    ACX_CHECK(acx_nccl_check_not_null(sendbuf, recvbuf, count, what));
    ACX_CHECK(check_device(sendbuf, count, dtype, "sendbuf", what));
    ACX_CHECK(check_device(recvbuf, count, dtype, "recvbuf", what));
    if (req_p == NULL) return MPI_TABLE->all_reduce(in, sendbuf, recvbuf, count, dtype, op);
    return MPI_TABLE->all_reduce_start(in, sendbuf, recvbuf, count, dtype, op, req_p);
}

static acx_status_t reduce_scatter(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                   acx_coll_req_t **req_p) {
    const char *what = "reduce-scatter";
    acx_comm_t *in = NULL;
    ACX_CHECK(inner_of(comm, what, &in));
    ACX_CHECK(check_dtype(dtype, what));
    ACX_CHECK(acx_nccl_check_op(op, dtype, what));
    ACX_CHECK(acx_nccl_check_not_null(sendbuf, recvbuf, count, what));
    ACX_CHECK(acx_nccl_check_in_place(comm, sendbuf, recvbuf, count, dtype, what,
                                      "recvbuf == sendbuf + rank * count elements"));
    ACX_CHECK(check_device(sendbuf, (size_t)comm->size * count, dtype, "sendbuf", what));
    ACX_CHECK(check_device(recvbuf, count, dtype, "recvbuf", what));
    if (req_p == NULL) return MPI_TABLE->reduce_scatter(in, sendbuf, recvbuf, count, dtype, op);
    return MPI_TABLE->reduce_scatter_start(in, sendbuf, recvbuf, count, dtype, op, req_p);
}

static acx_status_t broadcast(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                              int root, acx_coll_req_t **req_p) {
    const char *what = "broadcast";
    acx_comm_t *in = NULL;
    ACX_CHECK(inner_of(comm, what, &in));
    ACX_CHECK(check_dtype(dtype, what));
    ACX_CHECK(acx_nccl_check_root(comm, root, what));
    ACX_CHECK(acx_nccl_check_not_null(buf, buf, count, what));
    ACX_CHECK(check_device(buf, count, dtype, "buf", what));
    if (req_p == NULL) return MPI_TABLE->broadcast(in, buf, count, dtype, root);
    return MPI_TABLE->broadcast_start(in, buf, count, dtype, root, req_p);
}

static acx_status_t all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                               acx_dtype_t dtype, acx_coll_req_t **req_p) {
    const char *what = "all-gather";
    acx_comm_t *in = NULL;
    ACX_CHECK(inner_of(comm, what, &in));
    ACX_CHECK(check_dtype(dtype, what));
    ACX_CHECK(acx_nccl_check_not_null(sendbuf, recvbuf, count, what));
    ACX_CHECK(acx_nccl_check_in_place(comm, recvbuf, sendbuf, count, dtype, what,
                                      "sendbuf == recvbuf + rank * count elements"));
    ACX_CHECK(check_device(sendbuf, count, dtype, "sendbuf", what));
    ACX_CHECK(check_device(recvbuf, (size_t)comm->size * count, dtype, "recvbuf", what));
    if (req_p == NULL) return MPI_TABLE->all_gather(in, sendbuf, recvbuf, count, dtype);
    return MPI_TABLE->all_gather_start(in, sendbuf, recvbuf, count, dtype, req_p);
}

/* recvbuf is used (and checked) on root only, as the NCCL backend does. */
static acx_status_t gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                           acx_dtype_t dtype, int root, acx_coll_req_t **req_p) {
    const char *what = "gather";
    acx_comm_t *in = NULL;
    ACX_CHECK(inner_of(comm, what, &in));
    ACX_CHECK(check_dtype(dtype, what));
    ACX_CHECK(acx_nccl_check_root(comm, root, what));
    int is_root = comm->rank == root;
    ACX_CHECK(acx_nccl_check_not_null(sendbuf, is_root ? recvbuf : sendbuf, count, what));
    ACX_CHECK(check_device(sendbuf, count, dtype, "sendbuf", what));
    if (is_root) {
        ACX_CHECK(acx_nccl_check_in_place(comm, recvbuf, sendbuf, count, dtype, what,
                                          "root's sendbuf == recvbuf + root * count elements"));
        ACX_CHECK(check_device(recvbuf, (size_t)comm->size * count, dtype, "recvbuf", what));
    }
    if (req_p == NULL) return MPI_TABLE->gather(in, sendbuf, recvbuf, count, dtype, root);
    return MPI_TABLE->gather_start(in, sendbuf, recvbuf, count, dtype, root, req_p);
}

/* ---- the table's entries ---- */

static acx_status_t emul_all_reduce(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    return all_reduce(comm, sendbuf, recvbuf, count, dtype, op, NULL);
}

static acx_status_t emul_reduce_scatter(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    return reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op, NULL);
}

static acx_status_t emul_broadcast(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                                   int root) {
    return broadcast(comm, buf, count, dtype, root, NULL);
}

static acx_status_t emul_all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype) {
    return all_gather(comm, sendbuf, recvbuf, count, dtype, NULL);
}

static acx_status_t emul_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                acx_dtype_t dtype, int root) {
    return gather(comm, sendbuf, recvbuf, count, dtype, root, NULL);
}

static acx_status_t emul_barrier(acx_comm_t *comm) {
    acx_comm_t *in = NULL;
    ACX_CHECK(inner_of(comm, "barrier", &in));
    return MPI_TABLE->barrier(in);
}

static acx_status_t emul_all_reduce_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                          size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                          acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "all-reduce"));
    return all_reduce(comm, sendbuf, recvbuf, count, dtype, op, req_p);
}

static acx_status_t emul_reduce_scatter_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                              size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                              acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "reduce-scatter"));
    return reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op, req_p);
}

static acx_status_t emul_broadcast_start(acx_comm_t *comm, void *buf, size_t count,
                                         acx_dtype_t dtype, int root, acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "broadcast"));
    return broadcast(comm, buf, count, dtype, root, req_p);
}

static acx_status_t emul_all_gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                          size_t count, acx_dtype_t dtype, acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "all-gather"));
    return all_gather(comm, sendbuf, recvbuf, count, dtype, req_p);
}

static acx_status_t emul_gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, acx_dtype_t dtype, int root,
                                      acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "gather"));
    return gather(comm, sendbuf, recvbuf, count, dtype, root, req_p);
}

static acx_status_t emul_barrier_start(acx_comm_t *comm, acx_coll_req_t **req_p) {
    acx_comm_t *in = NULL;
    ACX_CHECK(acx_nccl_check_req(req_p, "barrier"));
    ACX_CHECK(inner_of(comm, "barrier", &in));
    return MPI_TABLE->barrier_start(in, req_p);
}

/* Requests are the MPI backend's. */
static acx_status_t emul_test(acx_coll_req_t *req, int *done_p) {
    return MPI_TABLE->test(req, done_p);
}

static acx_status_t emul_wait(acx_coll_req_t *req) { return MPI_TABLE->wait(req); }

/* ---- the table ---- */

const acx_coll_ops_t acx_coll_nccl_emul_ops = {
    .name = "nccl-emulated",
    .device_memory = 1,
    .emulated = 1,
    .comm_init = emul_comm_init,
    .comm_fini = emul_comm_fini,
    .all_reduce = emul_all_reduce,
    .reduce_scatter = emul_reduce_scatter,
    .broadcast = emul_broadcast,
    .all_gather = emul_all_gather,
    .gather = emul_gather,
    .barrier = emul_barrier,
    .all_reduce_start = emul_all_reduce_start,
    .reduce_scatter_start = emul_reduce_scatter_start,
    .broadcast_start = emul_broadcast_start,
    .all_gather_start = emul_all_gather_start,
    .gather_start = emul_gather_start,
    .barrier_start = emul_barrier_start,
    .test = emul_test,
    .wait = emul_wait,
};

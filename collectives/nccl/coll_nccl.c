/*
 * collectives/nccl/coll_nccl.c — the NCCL backend (acx_coll_nccl_ops):
 * all-reduce, reduce-scatter, broadcast, all-gather, gather and barrier on
 * device memory, blocking and non-blocking, bootstrapped from MPI.
 *
 * Bootstrap (DESIGN.md "Bootstrap and devices"), collective over the acx
 * communicator's MPI communicator:
 *   1. every rank creates its CUDA resources on the current device (bound by
 *      device/device.c at acx_init): the communication stream, two events, a
 *      device word for the barrier;
 *   2. rank 0 calls ncclGetUniqueId;
 *   3. the ranks agree on steps 1-2 (acx_coll_agree: the lowest failing
 *      rank's message everywhere) and rank 0's 128-byte id is broadcast
 *      (MPI_Bcast);
 *   4. every rank calls ncclCommInitRank(size, id, rank), and the ranks agree
 *      on the outcome again; a rank whose init succeeded while another's
 *      failed aborts its communicator. Split communicators (node, HYBRID_SHARD
 *      groups) go through the same steps on the split MPI communicator.
 *
 * Streams: each communicator enqueues its collectives on its own stream
 * (non-blocking with respect to the legacy default stream, so gradient
 * reduction can overlap the backward pass). Before each collective it
 * records `ready` on the compute stream (the legacy default stream unless
 * acx_coll_nccl_set_compute_stream says otherwise) and makes the
 * communication stream wait for it: the collective reads what the compute
 * work enqueued so far wrote. Completion is an event recorded after the
 * collective: the blocking forms wait for it before returning, the *_start
 * forms return a request that test queries and wait waits for.
 *
 * Waiting never blocks inside CUDA: it polls the event and
 * ncclCommGetAsyncError. A communicator that reports an asynchronous error
 * (a peer died, a network failure) is aborted there (ncclCommAbort) and the
 * wait returns ACX_ERR_NCCL; the stall detector times every blocking call
 * and wait (collectives/watchdog.h brackets, as the MPI backend), and the
 * fatal paths — acx_abort, the stall detector's exit — abort every live
 * communicator through acx_coll_abort_all (../coll.c) -> acx_coll_nccl_abort_all,
 * so no rank is left spinning in a kernel that waits for a dead peer.
 *
 * Semantics that differ from the MPI backend: float16/bfloat16 reduce
 * natively in NCCL's kernels (no float32 staging), so a sum over more than
 * two ranks may round more than once; ACX_OP_AVG is ncclAvg (float dtypes
 * only, as acx's contract says), which NCCL computes for floats as a sum of
 * inputs pre-multiplied by 1/size, within a rounding of the MPI backend's
 * sum-then-divide. Counts are size_t: no chunking.
 *
 * Choosing the backend is ../coll.c's; the device choice device/device.c's.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/nccl/coll_nccl.h"
#include "collectives/nccl/coll_nccl_args.h"
#include "collectives/watchdog.h"
#include "device/cuda_check.h"
#include "device/memory.h"
#include "base/error.h"
#include "base/log.h"

/* ---- errors ---- */

/* "ncclAllReduce(...) failed: <ncclGetErrorString>: <ncclGetLastError>"
 * (the last-error text carries NCCL's detail, e.g. which argument). */
static acx_status_t nccl_error(ncclResult_t ret, const char *call, const char *file, int line) {
    const char *last = ncclGetLastError(NULL);
    int has_last = last != NULL && last[0] != '\0';
    return acx_error_set(ACX_ERR_NCCL, file, line, "%s failed: %s%s%s", call,
                         ncclGetErrorString(ret), has_last ? ": " : "", has_last ? last : "");
}

#define ACX_NCCL_CHECK(call)                                                                       \
    do {                                                                                           \
        ncclResult_t acx_nccl_ret_ = (call);                                                       \
        if (acx_nccl_ret_ != ncclSuccess)                                                          \
            return nccl_error(acx_nccl_ret_, #call, __FILE__, __LINE__);                           \
    } while (0)

#define ACX_NCCL_CHECK_GOTO(call, status, label)                                                   \
    do {                                                                                           \
        ncclResult_t acx_nccl_ret_ = (call);                                                       \
        if (acx_nccl_ret_ != ncclSuccess) {                                                        \
            (status) = nccl_error(acx_nccl_ret_, #call, __FILE__, __LINE__);                       \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- communicator state ---- */

typedef struct nccl_state {
    ncclComm_t nccl;       /* NULL once destroyed or aborted */
    cudaStream_t stream;   /* the communication stream */
    cudaStream_t compute;  /* collectives start after its work; NULL: legacy default stream */
    cudaEvent_t ready;     /* recorded on compute before each collective */
    cudaEvent_t done;      /* completion of a blocking collective */
    int32_t *barrier_word; /* device [1]: the barrier's all-reduce */
    int device;
    atomic_int aborted;      /* ncclCommAbort called: the communicator is unusable */
    struct nccl_state *next; /* the live list */
} nccl_state_t;

/* Live communicators, for acx_coll_nccl_abort_all (which may run on the
 * stall detector's thread: hence the lock). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static nccl_state_t *live;

static void live_add(nccl_state_t *st) {
    pthread_mutex_lock(&live_lock);
    st->next = live;
    live = st;
    pthread_mutex_unlock(&live_lock);
}

static void live_remove(nccl_state_t *st) {
    pthread_mutex_lock(&live_lock);
    for (nccl_state_t **pp = &live; *pp != NULL; pp = &(*pp)->next)
        if (*pp == st) {
            *pp = st->next;
            break;
        }
    pthread_mutex_unlock(&live_lock);
}

/* Abort st's communicator once (ncclCommAbort also ends its kernels). */
static void state_abort(nccl_state_t *st) {
    if (atomic_exchange(&st->aborted, 1)) return;
    if (st->nccl != NULL) ncclCommAbort(st->nccl);
}

/* The fatal paths only: the communicators stay in the list (their memory
 * is not freed: the process is about to end), and every later use of one
 * fails with ACX_ERR_STATE. */
void acx_coll_nccl_abort_all(void) {
    pthread_mutex_lock(&live_lock);
    for (nccl_state_t *st = live; st != NULL; st = st->next)
        state_abort(st);
    pthread_mutex_unlock(&live_lock);
}

static void state_free(nccl_state_t *st) {
    if (st->barrier_word != NULL) cudaFree(st->barrier_word);
    if (st->done != NULL) cudaEventDestroy(st->done);
    if (st->ready != NULL) cudaEventDestroy(st->ready);
    if (st->stream != NULL) cudaStreamDestroy(st->stream);
    cudaGetLastError(); /* teardown errors are not reported: clear them */
    free(st);
}

/* Step 1 of the bootstrap: this rank's CUDA resources. */
static acx_status_t state_create(nccl_state_t **st_p) {
    acx_status_t status = ACX_OK;
    nccl_state_t *st = acx_calloc(1, sizeof *st, "NCCL communicator state");
    if (st == NULL) return ACX_ERR_NO_MEMORY;
    atomic_init(&st->aborted, 0);
    ACX_CUDA_CHECK_GOTO(cudaGetDevice(&st->device), status, err_free);
    ACX_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), status,
                        err_free);
    ACX_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming), status,
                        err_free);
    ACX_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming), status,
                        err_free);
    ACX_CUDA_CHECK_GOTO(cudaMalloc((void **)&st->barrier_word, sizeof(int32_t)), status, err_free);
    ACX_CUDA_CHECK_GOTO(cudaMemset(st->barrier_word, 0, sizeof(int32_t)), status, err_free);
    *st_p = st;
    return ACX_OK;

err_free:
    state_free(st);
    return status;
}

static acx_status_t nccl_comm_init(acx_comm_t *comm) {
    acx_status_t status = ACX_OK;
    nccl_state_t *st = NULL;
    ncclUniqueId id;
    ncclResult_t ret = ncclSuccess;
    memset(&id, 0, sizeof id);

    status = state_create(&st);
    if (status == ACX_OK && comm->rank == 0 && (ret = ncclGetUniqueId(&id)) != ncclSuccess)
        status = nccl_error(ret, "ncclGetUniqueId(&id)", __FILE__, __LINE__);
    /* every rank learns whether every rank can go on, with the first
     * failure's message, before anyone enters NCCL's collective init */
    status = acx_coll_agree(comm, status);
    if (status != ACX_OK) goto err_free;
    ACX_MPI_CHECK_GOTO(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm->mpi), status, err_free);

    ret = ncclCommInitRank(&st->nccl, comm->size, id, comm->rank);
    if (ret != ncclSuccess) {
        st->nccl = NULL;
        status = nccl_error(ret, "ncclCommInitRank(size, id, rank)", __FILE__, __LINE__);
    }
    status = acx_coll_agree(comm, status);
    if (status != ACX_OK) goto err_abort;

    if (comm->rank == 0) {
        int version = 0;
        ncclGetVersion(&version);
        ACX_DEBUG(ACX_SUBSYS_COLL, "NCCL communicator of %d rank%s on cuda:%d (NCCL %d.%d.%d)",
                  comm->size, comm->size == 1 ? "" : "s", st->device, version / 10000,
                  version / 100 % 100, version % 100);
    }
    live_add(st);
    comm->state = st;
    return ACX_OK;

err_abort:
    /* another rank's init failed: ours may be half connected, so abort
     * rather than destroy (which could wait for the missing peer) */
    if (st->nccl != NULL) ncclCommAbort(st->nccl);
err_free:
    if (st != NULL) state_free(st);
    return status;
}

static void nccl_comm_fini(acx_comm_t *comm) {
    nccl_state_t *st = comm->state;
    if (st == NULL) return;
    live_remove(st);
    if (!atomic_load(&st->aborted) && st->nccl != NULL) {
        /* finish what is enqueued, then free NCCL's resources; a failure
         * here is only logged: teardown continues */
        cudaError_t ret = cudaStreamSynchronize(st->stream);
        if (ret != cudaSuccess)
            ACX_WARN(ACX_SUBSYS_COLL, "NCCL communicator teardown: cudaStreamSynchronize: %s",
                     cudaGetErrorString(ret));
        ncclResult_t nret = ncclCommDestroy(st->nccl);
        if (nret != ncclSuccess)
            ACX_WARN(ACX_SUBSYS_COLL, "ncclCommDestroy: %s", ncclGetErrorString(nret));
    }
    st->nccl = NULL;
    state_free(st);
    comm->state = NULL;
}

acx_status_t acx_coll_nccl_set_compute_stream(acx_comm_t *comm, void *stream) {
    if (comm == NULL || comm->ops != &acx_coll_nccl_ops || comm->state == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "set compute stream: %s",
                         comm == NULL ? "comm is NULL" : "comm is not an NCCL communicator");
    ((nccl_state_t *)comm->state)->compute = (cudaStream_t)stream;
    return ACX_OK;
}

/* ---- datatypes, ops, arguments ---- */

static int nccl_datatype(acx_dtype_t dtype, ncclDataType_t *type_p) {
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: *type_p = ncclFloat32; return 1;
    case ACX_DTYPE_FLOAT64: *type_p = ncclFloat64; return 1;
    case ACX_DTYPE_FLOAT16: *type_p = ncclFloat16; return 1;
    case ACX_DTYPE_BFLOAT16: *type_p = ncclBfloat16; return 1;
    case ACX_DTYPE_INT8: *type_p = ncclInt8; return 1;
    case ACX_DTYPE_UINT8: *type_p = ncclUint8; return 1;
    case ACX_DTYPE_INT32: *type_p = ncclInt32; return 1;
    case ACX_DTYPE_INT64: *type_p = ncclInt64; return 1;
    default: return 0;
    }
}

/* The communicator's state, usable: not NULL, not aborted. */
static acx_status_t usable(const acx_comm_t *comm, const char *what, nccl_state_t **st_p) {
    if (comm == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: comm is NULL", what);
    nccl_state_t *st = comm->state;
    if (st == NULL || st->nccl == NULL || atomic_load(&st->aborted))
        return ACX_ERROR(ACX_ERR_STATE,
                         "%s: the NCCL communicator was aborted after an earlier error and "
                         "cannot be used",
                         what);
    *st_p = st;
    return ACX_OK;
}

static acx_status_t check_dtype(acx_dtype_t dtype, const char *what, ncclDataType_t *type_p) {
    if (dtype == ACX_DTYPE_UINT16) /* token ids: the MPI backend moves them */
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "%s: NCCL has no uint16 type; move token ids as int32, or through "
                         "the MPI backend",
                         what);
    if (!nccl_datatype(dtype, type_p))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: dtype %d is not an acx_dtype_t", what,
                         (int)dtype);
    return ACX_OK;
}

/* NCCL's op rules (coll_nccl_args.c), then NCCL's op. */
static acx_status_t check_op(acx_red_op_t op, acx_dtype_t dtype, const char *what,
                             ncclRedOp_t *op_p) {
    ACX_CHECK(acx_nccl_check_op(op, dtype, what));
    switch (op) {
    case ACX_OP_SUM: *op_p = ncclSum; break;
    case ACX_OP_PROD: *op_p = ncclProd; break;
    case ACX_OP_MAX: *op_p = ncclMax; break;
    case ACX_OP_MIN: *op_p = ncclMin; break;
    default: *op_p = ncclAvg; break; /* ACX_OP_AVG: checked above */
    }
    return ACX_OK;
}

static acx_status_t check_bufs(const void *sendbuf, const void *recvbuf, size_t count,
                               const char *what) {
    ACX_CHECK(acx_nccl_check_not_null(sendbuf, recvbuf, count, what));
    /* A host address in an NCCL kernel is an illegal access that poisons
     * the context (a sticky error: the process cannot continue), so refuse
     * it here, with a message, at one runtime call per buffer. Pinned and
     * managed memory count as host memory (device/memory.h). */
    const void *bufs[2] = {sendbuf, recvbuf};
    for (int i = 0; i < 2 && count > 0; i++) {
        if (i == 1 && recvbuf == sendbuf) break;
        int on_device = 0;
        ACX_CHECK(acx_cuda_pointer_is_device(bufs[i], &on_device));
        if (!on_device)
            return ACX_ERROR(
                ACX_ERR_INVALID_ARG,
                "%s of %zu elements on the nccl backend: %s (%p) is not device memory "
                "(cudaMalloc); host buffers go through the MPI backend (backend: mpi), "
                "host scalars through acx_reduce_scalar/acx_reduce",
                what, count, i == 0 ? "sendbuf" : "recvbuf", bufs[i]);
    }
    return ACX_OK;
}

/* ---- enqueueing and completion ---- */

/* The communication stream waits for the compute stream's work so far. */
static acx_status_t order_after_compute(nccl_state_t *st) {
    ACX_CUDA_CHECK(cudaEventRecord(st->ready, st->compute));
    ACX_CUDA_CHECK(cudaStreamWaitEvent(st->stream, st->ready, 0));
    return ACX_OK;
}

/* ACX_OK while st has no asynchronous error. When NCCL reports one (a peer
 * died, the network failed), record it, abort the communicator so that its
 * kernels end instead of waiting for ever, and return ACX_ERR_NCCL. */
static acx_status_t check_async(nccl_state_t *st, const char *what) {
    if (atomic_load(&st->aborted))
        return ACX_ERROR(ACX_ERR_STATE, "%s: the NCCL communicator was aborted while waiting",
                         what);
    ncclResult_t async = ncclSuccess;
    ncclResult_t ret = ncclCommGetAsyncError(st->nccl, &async);
    if (ret != ncclSuccess) return nccl_error(ret, "ncclCommGetAsyncError", __FILE__, __LINE__);
    if (async == ncclSuccess || async == ncclInProgress) return ACX_OK;
    acx_status_t status = ACX_ERROR(ACX_ERR_NCCL,
                                    "%s: NCCL reported an asynchronous error: %s: %s; the "
                                    "communicator was aborted (ncclCommAbort)",
                                    what, ncclGetErrorString(async), ncclGetLastError(st->nccl));
    state_abort(st);
    return status;
}

/* Wait for `ev` (recorded on st->stream after a collective), polling so an
 * asynchronous NCCL error (or an abort from another thread) ends the wait:
 * cudaEventSynchronize would block for ever on a collective whose peer
 * died. The first spins are tight (most collectives finish within
 * microseconds of the event query), then the thread yields the core. */
static acx_status_t wait_event(nccl_state_t *st, cudaEvent_t ev, const char *what) {
    for (unsigned spin = 0;; spin++) {
        cudaError_t ret = cudaEventQuery(ev);
        if (ret == cudaSuccess) return ACX_OK;
        if (ret != cudaErrorNotReady)
            return ACX_ERROR(ACX_ERR_CUDA, "%s: cudaEventQuery failed: %s: %s", what,
                             cudaGetErrorName(ret), cudaGetErrorString(ret));
        ACX_CHECK(check_async(st, what));
        if (spin >= 1000) sched_yield();
    }
}

struct acx_coll_req {
    nccl_state_t *st;
    cudaEvent_t done; /* recorded on st->stream after the collective */
    int complete;
    const char *what;
};

/* After a collective was enqueued: blocking (req_p NULL) waits for it;
 * otherwise a request with its own completion event is returned. */
static acx_status_t complete_or_request(nccl_state_t *st, const char *what,
                                        acx_coll_req_t **req_p) {
    acx_status_t status = ACX_OK;
    if (req_p == NULL) {
        ACX_CUDA_CHECK(cudaEventRecord(st->done, st->stream));
        return wait_event(st, st->done, what);
    }
    acx_coll_req_t *req = acx_calloc(1, sizeof *req, "NCCL request");
    if (req == NULL) return ACX_ERR_NO_MEMORY;
    req->st = st;
    req->what = what;
    ACX_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&req->done, cudaEventDisableTiming), status,
                        err_free);
    ACX_CUDA_CHECK_GOTO(cudaEventRecord(req->done, st->stream), status, err_event);
    *req_p = req;
    return ACX_OK;

err_event:
    cudaEventDestroy(req->done);
err_free:
    free(req);
    return status;
}

static acx_status_t nccl_test(acx_coll_req_t *req, int *done_p) {
    if (req == NULL || done_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "test: %s is NULL", req == NULL ? "req" : "done_p");
    if (!req->complete) {
        cudaError_t ret = cudaEventQuery(req->done);
        if (ret == cudaErrorNotReady) {
            ACX_CHECK(check_async(req->st, req->what)); /* not done: failed? */
            *done_p = 0;
            return ACX_OK;
        }
        if (ret != cudaSuccess)
            return ACX_ERROR(ACX_ERR_CUDA, "%s: cudaEventQuery failed: %s: %s", req->what,
                             cudaGetErrorName(ret), cudaGetErrorString(ret));
        req->complete = 1;
    }
    *done_p = 1;
    return ACX_OK;
}

static acx_status_t nccl_wait(acx_coll_req_t *req) {
    if (req == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "wait: req is NULL");
    acx_status_t status = req->complete ? ACX_OK : wait_event(req->st, req->done, req->what);
    /* the request is spent either way */
    cudaEventDestroy(req->done);
    free(req);
    return status;
}

/* ---- the collectives (req_p NULL: blocking) ---- */

static acx_status_t all_reduce(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                               acx_dtype_t dtype, acx_red_op_t op, acx_coll_req_t **req_p) {
    const char *what = "all-reduce";
    nccl_state_t *st;
    ncclDataType_t type;
    ncclRedOp_t nop;
    ACX_CHECK(usable(comm, what, &st));
    ACX_CHECK(check_dtype(dtype, what, &type));
    ACX_CHECK(check_op(op, dtype, what, &nop));
    ACX_CHECK(check_bufs(sendbuf, recvbuf, count, what));
    ACX_CHECK(order_after_compute(st));
    if (count > 0)
        ACX_NCCL_CHECK(ncclAllReduce(sendbuf, recvbuf, count, type, nop, st->nccl, st->stream));
    return complete_or_request(st, what, req_p);
}

static acx_status_t reduce_scatter(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                   acx_coll_req_t **req_p) {
    const char *what = "reduce-scatter";
    nccl_state_t *st;
    ncclDataType_t type;
    ncclRedOp_t nop;
    ACX_CHECK(usable(comm, what, &st));
    ACX_CHECK(check_dtype(dtype, what, &type));
    ACX_CHECK(check_op(op, dtype, what, &nop));
    ACX_CHECK(check_bufs(sendbuf, recvbuf, count, what));
    ACX_CHECK(acx_nccl_check_in_place(comm, sendbuf, recvbuf, count, dtype, what,
                                      "recvbuf == sendbuf + rank * count elements"));
    ACX_CHECK(order_after_compute(st));
    if (count > 0)
        ACX_NCCL_CHECK(ncclReduceScatter(sendbuf, recvbuf, count, type, nop, st->nccl, st->stream));
    return complete_or_request(st, what, req_p);
}

static acx_status_t broadcast(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                              int root, acx_coll_req_t **req_p) {
    const char *what = "broadcast";
    nccl_state_t *st;
    ncclDataType_t type;
    ACX_CHECK(usable(comm, what, &st));
    ACX_CHECK(check_dtype(dtype, what, &type));
    ACX_CHECK(acx_nccl_check_root(comm, root, what));
    ACX_CHECK(check_bufs(buf, buf, count, what));
    ACX_CHECK(order_after_compute(st));
    if (count > 0) ACX_NCCL_CHECK(ncclBroadcast(buf, buf, count, type, root, st->nccl, st->stream));
    return complete_or_request(st, what, req_p);
}

static acx_status_t all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                               acx_dtype_t dtype, acx_coll_req_t **req_p) {
    const char *what = "all-gather";
    nccl_state_t *st;
    ncclDataType_t type;
    ACX_CHECK(usable(comm, what, &st));
    ACX_CHECK(check_dtype(dtype, what, &type));
    ACX_CHECK(check_bufs(sendbuf, recvbuf, count, what));
    ACX_CHECK(acx_nccl_check_in_place(comm, recvbuf, sendbuf, count, dtype, what,
                                      "sendbuf == recvbuf + rank * count elements"));
    ACX_CHECK(order_after_compute(st));
    if (count > 0)
        ACX_NCCL_CHECK(ncclAllGather(sendbuf, recvbuf, count, type, st->nccl, st->stream));
    return complete_or_request(st, what, req_p);
}

/*
 * Gather as one NCCL group of point-to-point calls (NCCL >= 2.7; ncclGather
 * exists only from 2.28): every other rank ncclSend's its block to root,
 * root ncclRecv's block r into recvbuf + r * count and copies its own block
 * on the stream unless it is already in place.
 */
static acx_status_t gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                           acx_dtype_t dtype, int root, acx_coll_req_t **req_p) {
    const char *what = "gather";
    acx_status_t status = ACX_OK;
    nccl_state_t *st;
    ncclDataType_t type;
    ACX_CHECK(usable(comm, what, &st));
    ACX_CHECK(check_dtype(dtype, what, &type));
    ACX_CHECK(acx_nccl_check_root(comm, root, what));
    int is_root = comm->rank == root;
    ACX_CHECK(check_bufs(sendbuf, is_root ? recvbuf : sendbuf, count, what));
    if (is_root)
        ACX_CHECK(acx_nccl_check_in_place(comm, recvbuf, sendbuf, count, dtype, what,
                                          "root's sendbuf == recvbuf + root * count elements"));
    ACX_CHECK(order_after_compute(st));
    if (count > 0) {
        size_t block = count * acx_dtype_size(dtype);
        ACX_NCCL_CHECK(ncclGroupStart());
        if (is_root) {
            for (int r = 0; r < comm->size; r++)
                if (r != root)
                    ACX_NCCL_CHECK_GOTO(
                        ncclRecv((void *)acx_nccl_byte_at(recvbuf, (size_t)r * block), count, type,
                                 r, st->nccl, st->stream),
                        status, end_group);
        } else {
            ACX_NCCL_CHECK_GOTO(ncclSend(sendbuf, count, type, root, st->nccl, st->stream), status,
                                end_group);
        }
    end_group:;
        /* a group once started must be ended, also after a failed call */
        ncclResult_t gret = ncclGroupEnd();
        if (status != ACX_OK) return status;
        if (gret != ncclSuccess) return nccl_error(gret, "ncclGroupEnd()", __FILE__, __LINE__);
        void *mine = (void *)acx_nccl_byte_at(recvbuf, (size_t)root * block);
        if (is_root && mine != sendbuf)
            ACX_CUDA_CHECK(
                cudaMemcpyAsync(mine, sendbuf, block, cudaMemcpyDeviceToDevice, st->stream));
    }
    return complete_or_request(st, what, req_p);
}

/* An all-reduce of one device int: no rank leaves before all arrived. */
static acx_status_t barrier(acx_comm_t *comm, acx_coll_req_t **req_p) {
    const char *what = "barrier";
    nccl_state_t *st;
    ACX_CHECK(usable(comm, what, &st));
    ACX_CHECK(order_after_compute(st));
    ACX_NCCL_CHECK(ncclAllReduce(st->barrier_word, st->barrier_word, 1, ncclInt32, ncclSum,
                                 st->nccl, st->stream));
    return complete_or_request(st, what, req_p);
}

/* ---- the table's entries: blocking forms under the stall detector ---- */

static acx_status_t nccl_all_reduce(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    acx_watch_enter("all_reduce");
    acx_status_t st = all_reduce(comm, sendbuf, recvbuf, count, dtype, op, NULL);
    acx_watch_exit();
    return st;
}

static acx_status_t nccl_reduce_scatter(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    acx_watch_enter("reduce_scatter");
    acx_status_t st = reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op, NULL);
    acx_watch_exit();
    return st;
}

static acx_status_t nccl_broadcast(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                                   int root) {
    acx_watch_enter("broadcast");
    acx_status_t st = broadcast(comm, buf, count, dtype, root, NULL);
    acx_watch_exit();
    return st;
}

static acx_status_t nccl_all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype) {
    acx_watch_enter("all_gather");
    acx_status_t st = all_gather(comm, sendbuf, recvbuf, count, dtype, NULL);
    acx_watch_exit();
    return st;
}

static acx_status_t nccl_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                acx_dtype_t dtype, int root) {
    acx_watch_enter("gather");
    acx_status_t st = gather(comm, sendbuf, recvbuf, count, dtype, root, NULL);
    acx_watch_exit();
    return st;
}

static acx_status_t nccl_barrier(acx_comm_t *comm) {
    acx_watch_enter("barrier");
    acx_status_t st = barrier(comm, NULL);
    acx_watch_exit();
    return st;
}

static acx_status_t nccl_watched_wait(acx_coll_req_t *req) {
    acx_watch_enter("wait");
    acx_status_t st = nccl_wait(req);
    acx_watch_exit();
    return st;
}

/* The starts return at once (they only enqueue) and are not timed. */
static acx_status_t nccl_all_reduce_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                          size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                          acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "all-reduce"));
    return all_reduce(comm, sendbuf, recvbuf, count, dtype, op, req_p);
}

static acx_status_t nccl_reduce_scatter_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                              size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                              acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "reduce-scatter"));
    return reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op, req_p);
}

static acx_status_t nccl_broadcast_start(acx_comm_t *comm, void *buf, size_t count,
                                         acx_dtype_t dtype, int root, acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "broadcast"));
    return broadcast(comm, buf, count, dtype, root, req_p);
}

static acx_status_t nccl_all_gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                          size_t count, acx_dtype_t dtype, acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "all-gather"));
    return all_gather(comm, sendbuf, recvbuf, count, dtype, req_p);
}

static acx_status_t nccl_gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, acx_dtype_t dtype, int root,
                                      acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "gather"));
    return gather(comm, sendbuf, recvbuf, count, dtype, root, req_p);
}

static acx_status_t nccl_barrier_start(acx_comm_t *comm, acx_coll_req_t **req_p) {
    ACX_CHECK(acx_nccl_check_req(req_p, "barrier"));
    return barrier(comm, req_p);
}

/* ---- the table ---- */

const acx_coll_ops_t acx_coll_nccl_ops = {
    .name = "nccl",
    .device_memory = 1,
    .comm_init = nccl_comm_init,
    .comm_fini = nccl_comm_fini,
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .broadcast = nccl_broadcast,
    .all_gather = nccl_all_gather,
    .gather = nccl_gather,
    .barrier = nccl_barrier,
    .all_reduce_start = nccl_all_reduce_start,
    .reduce_scatter_start = nccl_reduce_scatter_start,
    .broadcast_start = nccl_broadcast_start,
    .all_gather_start = nccl_all_gather_start,
    .gather_start = nccl_gather_start,
    .barrier_start = nccl_barrier_start,
    .test = nccl_test,
    .wait = nccl_watched_wait,
    .set_compute_stream = acx_coll_nccl_set_compute_stream,
    .abort_all = acx_coll_nccl_abort_all,
};

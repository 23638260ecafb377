/*
 * collectives/mpi/coll_mpi_stage.c — the MPI backend's table
 * (acx_coll_mpi_ops): every collective of coll_mpi.c, also on device
 * buffers, which are staged through host memory.
 *
 * Open MPI as Debian builds it is not CUDA-aware: given a device pointer it
 * reads host memory at that address and crashes. So each entry point asks
 * the device layer which device, if any, owns each buffer
 * (acx_devops_owner: no CUDA call at all in a build without CUDA or on a
 * machine without a device), and when one does:
 *
 *   1. takes a host block per device buffer from that device's table
 *      (stage_acquire: CUDA's reused pinned pool), copies the input bytes
 *      device -> host (stage_copy);
 *   2. runs coll_mpi.c's collective (acx_coll_mpi_host_ops) on the host
 *      blocks — same semantics, same rounding, same errors;
 *   3. copies the output bytes host -> device and gives the blocks back.
 *
 * Host buffers go to coll_mpi.c unchanged, so host-memory runs behave as
 * before; mixing a host and a device buffer in one call works too.
 *
 * In place stays in place: a buffer that lies inside another device buffer
 * of the same call (the in-place forms: reduce-scatter's recvbuf is block r
 * of sendbuf, all-gather's sendbuf is block r of recvbuf) is mapped into
 * that buffer's host block at the same offset, so coll_mpi.c sees the same
 * aliasing and takes the same path. Only the bytes a call reads are copied
 * in (an in-place all-gather: this rank's block) and only those it writes
 * are copied out (an in-place reduce-scatter: this rank's block).
 *
 * This file knows no device by name: the emulated test device
 * (device_state: emulated), whose memory host code cannot touch, is staged
 * through its table like CUDA's; MPI sees host memory only.
 *
 * The copies are synchronous (device/ops.h, "staging": cudaMemcpy on the
 * legacy default stream for CUDA): they follow the work already enqueued
 * on blocking streams, and the device buffers hold the result when a
 * blocking call returns. Non-blocking calls copy in at the start and copy out when test
 * or wait sees the MPI side complete; the device buffers belong to the
 * operation until then, as for host buffers.
 *
 * Cost (what 2-4 ranks sharing one GPU in a test pay): two PCIe copies of
 * each buffer plus the host collective. This is a correctness path for
 * machines without a CUDA-aware MPI, not a fast one; the NCCL backend is
 * the fast path on device memory.
 */
#include <stdint.h>
#include <stdlib.h>

#include "collectives/coll.h"
#include "collectives/mpi/coll_mpi.h"
#include "device/ops.h"
#include "base/error.h"

#define HOST (&acx_coll_mpi_host_ops)

/* ---- staging one call ---- */

/* The device buffers of one call and their host blocks (at most two: a
 * send and a receive buffer), and the copies back once MPI is done. */
typedef struct stage {
    int nblocks, nout;
    struct {
        uintptr_t dev; /* device address of the staged range */
        char *pin;     /* its host block (owner->stage_acquire) */
        size_t bytes;
        const acx_devops_t *owner; /* the device whose memory the range is */
    } block[2];
    struct {
        void *dev;
        const void *pin;
        size_t bytes;
        const acx_devops_t *owner;
    } out[2];
} stage_t;

/* bytes = count * mult elements of dtype; 0 when the arguments are not
 * valid (then nothing is staged and coll_mpi.c reports the error). */
static size_t extent(size_t count, size_t mult, acx_dtype_t dtype) {
    size_t esize = acx_dtype_size(dtype);
    if (esize == 0 || mult == 0 || count > SIZE_MAX / esize / mult) return 0;
    return count * mult * esize;
}

/*
 * Map p [bytes] for one call: *mapped_p = the host address coll_mpi.c gets
 * for it. Host memory maps to itself. Device memory inside a range already
 * staged maps into that range's block at the same offset; other device
 * memory gets a pinned block of its own. copy_in: the call reads p (copied
 * device -> host now); copy_out: it writes p (copied back by stage_finish).
 * Map the larger buffer of an in-place pair first.
 */
static acx_status_t stage_map(stage_t *st, const void *p, size_t bytes, int copy_in, int copy_out,
                              void **mapped_p) {
    *mapped_p = (void *)p;
    if (p == NULL || bytes == 0) return ACX_OK;
    uintptr_t a = (uintptr_t)p;
    char *mapped = NULL;
    const acx_devops_t *owner = NULL;
    for (int b = 0; b < st->nblocks && mapped == NULL; b++) {
        uintptr_t lo = st->block[b].dev, hi = lo + st->block[b].bytes;
        if (a >= lo && a + bytes <= hi) {
            mapped = st->block[b].pin + (a - lo);
            owner = st->block[b].owner;
        } else if (a < hi && lo < a + bytes)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "MPI backend, device buffers: the send and receive buffers overlap "
                             "but neither holds the other (in place means one is this rank's "
                             "block of the other)");
    }
    if (mapped == NULL) {
        ACX_CHECK(acx_devops_owner(p, bytes, &owner));
        if (owner == NULL) return ACX_OK; /* host memory */
        void *pin = NULL;
        ACX_CHECK(owner->stage_acquire(bytes, &pin));
        st->block[st->nblocks].dev = a;
        st->block[st->nblocks].pin = pin;
        st->block[st->nblocks].bytes = bytes;
        st->block[st->nblocks].owner = owner;
        st->nblocks++;
        mapped = pin;
    }
    if (copy_in) ACX_CHECK(owner->stage_copy(mapped, p, bytes));
    if (copy_out) {
        st->out[st->nout].dev = (void *)p;
        st->out[st->nout].pin = mapped;
        st->out[st->nout].bytes = bytes;
        st->out[st->nout].owner = owner;
        st->nout++;
    }
    *mapped_p = mapped;
    return ACX_OK;
}

static void stage_release(stage_t *st) {
    for (int b = 0; b < st->nblocks; b++)
        st->block[b].owner->stage_release(st->block[b].pin);
    st->nblocks = st->nout = 0;
}

/* After the host collective returned `status`: on success copy the outputs
 * back to the device; give the blocks back either way. */
static acx_status_t stage_finish(stage_t *st, acx_status_t status) {
    for (int o = 0; o < st->nout && status == ACX_OK; o++)
        status = st->out[o].owner->stage_copy(st->out[o].dev, st->out[o].pin, st->out[o].bytes);
    stage_release(st);
    return status;
}

/* ---- the shapes of each collective ---- */

/* Each *_map stages the buffers of one call as that collective reads and
 * writes them and returns the host addresses to call coll_mpi.c with. On
 * failure nothing is left staged. */

/* all-reduce: sendbuf [count] read, recvbuf [count] written (the same
 * buffer in place). */
static acx_status_t all_reduce_map(stage_t *st, const acx_comm_t *comm, const void *sendbuf,
                                   void *recvbuf, size_t count, acx_dtype_t dtype, void **s_p,
                                   void **r_p) {
    acx_status_t status = ACX_OK;
    size_t bytes = comm != NULL ? extent(count, 1, dtype) : 0;
    *s_p = (void *)sendbuf;
    *r_p = recvbuf;
    if (sendbuf == recvbuf) {
        status = stage_map(st, recvbuf, bytes, 1, 1, r_p);
        *s_p = *r_p;
    } else {
        status = stage_map(st, sendbuf, bytes, 1, 0, s_p);
        if (status == ACX_OK) status = stage_map(st, recvbuf, bytes, 0, 1, r_p);
    }
    if (status != ACX_OK) stage_release(st);
    return status;
}

/* reduce-scatter: sendbuf [size x count] read, recvbuf [count] written
 * (in place: block rank of sendbuf). */
static acx_status_t reduce_scatter_map(stage_t *st, const acx_comm_t *comm, const void *sendbuf,
                                       void *recvbuf, size_t count, acx_dtype_t dtype, void **s_p,
                                       void **r_p) {
    acx_status_t status = ACX_OK;
    *s_p = (void *)sendbuf;
    *r_p = recvbuf;
    if (comm == NULL) return ACX_OK;
    status = stage_map(st, sendbuf, extent(count, (size_t)comm->size, dtype), 1, 0, s_p);
    if (status == ACX_OK) status = stage_map(st, recvbuf, extent(count, 1, dtype), 0, 1, r_p);
    if (status != ACX_OK) stage_release(st);
    return status;
}

/* all-gather (root < 0) and gather: recvbuf [size x count] written where
 * this rank receives, sendbuf [count] read (in place: block rank of
 * recvbuf). */
static acx_status_t gather_map(stage_t *st, const acx_comm_t *comm, const void *sendbuf,
                               void *recvbuf, size_t count, acx_dtype_t dtype, int root, void **s_p,
                               void **r_p) {
    acx_status_t status = ACX_OK;
    *s_p = (void *)sendbuf;
    *r_p = recvbuf;
    if (comm == NULL) return ACX_OK;
    if (root < 0 || comm->rank == root)
        status = stage_map(st, recvbuf, extent(count, (size_t)comm->size, dtype), 0, 1, r_p);
    if (status == ACX_OK) status = stage_map(st, sendbuf, extent(count, 1, dtype), 1, 0, s_p);
    if (status != ACX_OK) stage_release(st);
    return status;
}

/* broadcast: buf [count] read on the root, written on the others. */
static acx_status_t broadcast_map(stage_t *st, const acx_comm_t *comm, void *buf, size_t count,
                                  acx_dtype_t dtype, int root, void **b_p) {
    *b_p = buf;
    if (comm == NULL) return ACX_OK;
    int is_root = comm->rank == root;
    acx_status_t status = stage_map(st, buf, extent(count, 1, dtype), is_root, !is_root, b_p);
    if (status != ACX_OK) stage_release(st);
    return status;
}

/* ---- blocking collectives ---- */

static acx_status_t stage_all_reduce(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    stage_t st = {0};
    void *s, *r;
    ACX_CHECK(all_reduce_map(&st, comm, sendbuf, recvbuf, count, dtype, &s, &r));
    return stage_finish(&st, HOST->all_reduce(comm, s, r, count, dtype, op));
}

static acx_status_t stage_reduce_scatter(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    stage_t st = {0};
    void *s, *r;
    ACX_CHECK(reduce_scatter_map(&st, comm, sendbuf, recvbuf, count, dtype, &s, &r));
    return stage_finish(&st, HOST->reduce_scatter(comm, s, r, count, dtype, op));
}

static acx_status_t stage_broadcast(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                                    int root) {
    stage_t st = {0};
    void *b;
    ACX_CHECK(broadcast_map(&st, comm, buf, count, dtype, root, &b));
    return stage_finish(&st, HOST->broadcast(comm, b, count, dtype, root));
}

static acx_status_t stage_all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, acx_dtype_t dtype) {
    stage_t st = {0};
    void *s, *r;
    ACX_CHECK(gather_map(&st, comm, sendbuf, recvbuf, count, dtype, -1, &s, &r));
    return stage_finish(&st, HOST->all_gather(comm, s, r, count, dtype));
}

static acx_status_t stage_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                 acx_dtype_t dtype, int root) {
    stage_t st = {0};
    void *s, *r;
    /* a negative root is coll_mpi.c's to refuse, not an all-gather here */
    ACX_CHECK(
        gather_map(&st, comm, sendbuf, recvbuf, count, dtype, root < 0 ? INT32_MAX : root, &s, &r));
    return stage_finish(&st, HOST->gather(comm, s, r, count, dtype, root));
}

static acx_status_t stage_barrier(acx_comm_t *comm) { return HOST->barrier(comm); }

/* ---- non-blocking collectives ---- */

/*
 * Every request this table hands out is a stage_req_t (also for host
 * buffers: one small allocation per start), holding coll_mpi.c's request
 * and the staging of its call. The acx_coll_req_t pointers the callers see
 * are stage_req_t pointers converted; coll_mpi.c's struct stays its own.
 */
typedef struct stage_req {
    acx_coll_req_t *inner; /* coll_mpi.c's request */
    stage_t st;
    int finished;        /* the copies back have run (test saw completion) */
    acx_status_t status; /* their outcome */
} stage_req_t;

static acx_coll_req_t *to_req(stage_req_t *w) { return (acx_coll_req_t *)(void *)w; }
static stage_req_t *from_req(acx_coll_req_t *r) { return (stage_req_t *)(void *)r; }

static acx_status_t req_new(acx_coll_req_t **req_p, const char *what, stage_req_t **w_p) {
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s start: req_p is NULL", what);
    stage_req_t *w = acx_calloc(1, sizeof *w, "MPI backend request");
    if (w == NULL) return ACX_ERR_NO_MEMORY;
    *w_p = w;
    return ACX_OK;
}

/* After HOST's start returned `status` into w->inner: hand w out, or undo. */
static acx_status_t req_started(stage_req_t *w, acx_status_t status, acx_coll_req_t **req_p) {
    if (status != ACX_OK) {
        stage_release(&w->st);
        free(w);
        return status;
    }
    *req_p = to_req(w);
    return ACX_OK;
}

static acx_status_t stage_all_reduce_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                           acx_coll_req_t **req_p) {
    stage_req_t *w = NULL;
    void *s, *r;
    ACX_CHECK(req_new(req_p, "all-reduce", &w));
    acx_status_t status = all_reduce_map(&w->st, comm, sendbuf, recvbuf, count, dtype, &s, &r);
    if (status == ACX_OK) status = HOST->all_reduce_start(comm, s, r, count, dtype, op, &w->inner);
    return req_started(w, status, req_p);
}

static acx_status_t stage_reduce_scatter_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                               size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                               acx_coll_req_t **req_p) {
    stage_req_t *w = NULL;
    void *s, *r;
    ACX_CHECK(req_new(req_p, "reduce-scatter", &w));
    acx_status_t status = reduce_scatter_map(&w->st, comm, sendbuf, recvbuf, count, dtype, &s, &r);
    if (status == ACX_OK)
        status = HOST->reduce_scatter_start(comm, s, r, count, dtype, op, &w->inner);
    return req_started(w, status, req_p);
}

static acx_status_t stage_broadcast_start(acx_comm_t *comm, void *buf, size_t count,
                                          acx_dtype_t dtype, int root, acx_coll_req_t **req_p) {
    stage_req_t *w = NULL;
    void *b;
    ACX_CHECK(req_new(req_p, "broadcast", &w));
    acx_status_t status = broadcast_map(&w->st, comm, buf, count, dtype, root, &b);
    if (status == ACX_OK) status = HOST->broadcast_start(comm, b, count, dtype, root, &w->inner);
    return req_started(w, status, req_p);
}

static acx_status_t stage_all_gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           size_t count, acx_dtype_t dtype,
                                           acx_coll_req_t **req_p) {
    stage_req_t *w = NULL;
    void *s, *r;
    ACX_CHECK(req_new(req_p, "all-gather", &w));
    acx_status_t status = gather_map(&w->st, comm, sendbuf, recvbuf, count, dtype, -1, &s, &r);
    if (status == ACX_OK) status = HOST->all_gather_start(comm, s, r, count, dtype, &w->inner);
    return req_started(w, status, req_p);
}

static acx_status_t stage_gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, acx_dtype_t dtype, int root,
                                       acx_coll_req_t **req_p) {
    stage_req_t *w = NULL;
    void *s, *r;
    ACX_CHECK(req_new(req_p, "gather", &w));
    acx_status_t status = gather_map(&w->st, comm, sendbuf, recvbuf, count, dtype,
                                     root < 0 ? INT32_MAX : root, &s, &r);
    if (status == ACX_OK) status = HOST->gather_start(comm, s, r, count, dtype, root, &w->inner);
    return req_started(w, status, req_p);
}

static acx_status_t stage_barrier_start(acx_comm_t *comm, acx_coll_req_t **req_p) {
    stage_req_t *w = NULL;
    ACX_CHECK(req_new(req_p, "barrier", &w));
    return req_started(w, HOST->barrier_start(comm, &w->inner), req_p);
}

static acx_status_t stage_test(acx_coll_req_t *req, int *done_p) {
    if (req == NULL || done_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "test: %s is NULL", req == NULL ? "req" : "done_p");
    stage_req_t *w = from_req(req);
    if (!w->finished) {
        int done = 0;
        ACX_CHECK(HOST->test(w->inner, &done));
        if (!done) {
            *done_p = 0;
            return ACX_OK;
        }
        w->status = stage_finish(&w->st, ACX_OK);
        w->finished = 1;
        if (w->status != ACX_OK) return w->status;
    }
    *done_p = 1;
    return ACX_OK;
}

/* Complete and free req (also when it fails). coll_mpi.c's wait frees its
 * own request; a test that saw completion has already copied back. */
static acx_status_t stage_wait(acx_coll_req_t *req) {
    if (req == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "wait: req is NULL");
    stage_req_t *w = from_req(req);
    acx_status_t status = HOST->wait(w->inner);
    if (!w->finished)
        status = stage_finish(&w->st, status);
    else if (status == ACX_OK)
        status = w->status;
    free(w);
    return status;
}

/* ---- communicators ---- */

/* Live MPI-backend communicators: when the last one goes (acx_finalize),
 * the pinned blocks cached for staging are freed. Communicators are created
 * and destroyed on the thread that makes MPI calls. */
static int live_comms;

static acx_status_t stage_comm_init(acx_comm_t *comm) {
    ACX_CHECK(HOST->comm_init(comm));
    live_comms++;
    return ACX_OK;
}

static void stage_comm_fini(acx_comm_t *comm) {
    HOST->comm_fini(comm);
    if (live_comms > 0 && --live_comms == 0) acx_devops_stage_trim();
}

/* ---- the table ---- */

const acx_coll_ops_t acx_coll_mpi_ops = {
    .name = "mpi",
    .device_memory = 0, /* works on host memory; device buffers are accepted, staged */
    .comm_init = stage_comm_init,
    .comm_fini = stage_comm_fini,
    .all_reduce = stage_all_reduce,
    .reduce_scatter = stage_reduce_scatter,
    .broadcast = stage_broadcast,
    .all_gather = stage_all_gather,
    .gather = stage_gather,
    .barrier = stage_barrier,
    .all_reduce_start = stage_all_reduce_start,
    .reduce_scatter_start = stage_reduce_scatter_start,
    .broadcast_start = stage_broadcast_start,
    .all_gather_start = stage_all_gather_start,
    .gather_start = stage_gather_start,
    .barrier_start = stage_barrier_start,
    .test = stage_test,
    .wait = stage_wait,
};

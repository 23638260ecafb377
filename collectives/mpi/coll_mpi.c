/*
 * collectives/mpi/coll_mpi.c — the MPI backend (acx_coll_mpi_ops): all-reduce,
 * reduce-scatter, broadcast, all-gather, gather and barrier on host memory,
 * blocking and non-blocking, through the MPI library; the acx -> MPI
 * datatype and op mapping; and the MPI reduction ops for 16-bit floats.
 *
 * What MPI 3.1 lacks is filled in here:
 *   - ACX_OP_AVG (NCCL's ncclAvg): MPI_SUM, then a division by the
 *     communicator size on the result; float dtypes only. The non-blocking
 *     forms divide when test/wait sees the request complete.
 *   - float16 and bfloat16, which MPI has no type for. They travel as
 *     MPI_UINT16_T. MAX and MIN are exact, so they run on the 16-bit words
 *     with user-defined ops (MPI_Op_create) that compare the values. SUM,
 *     AVG and PROD are *staged*: the input is widened to float32 (exact),
 *     reduced with MPI_SUM/MPI_PROD on MPI_FLOAT, and the float32 result is
 *     rounded to the 16-bit format once, to nearest even (AVG: the float32
 *     sum divided by the size, that quotient rounded once). The trade-off:
 *     a user-defined 16-bit SUM op would keep the wire at 2 bytes per
 *     element, but every combine step of MPI's reduction tree would round
 *     to 16 bits again — p - 1 roundings on p ranks, in an order MPI picks,
 *     so the result would depend on the algorithm MPI chose for the message
 *     size. Staging costs twice the bytes on the wire and a float32 copy
 *     (4 bytes per element of the reduced buffer, held until completion),
 *     and in exchange the result is the float32 sum rounded once: when that
 *     sum is exact (few ranks, values of similar scale), it is the correctly
 *     rounded true sum, identical on every rank whatever MPI's algorithm.
 *     A reduce-scatter in float32 followed by a 16-bit all-gather would keep
 *     the rounding single at 1.5x the bytes; that is a later optimization.
 *   - counts above INT_MAX elements (MPI takes int counts): all-reduce,
 *     broadcast, all-gather and gather split the buffer into chunks of at
 *     most ACX_COLL_MPI_CHUNK_MAX elements, one MPI call (or one request)
 *     per chunk. Reduce-scatter refuses such counts (ACX_ERR_NOT_SUPPORTED).
 *
 * Device buffers are staged through pinned host memory by the table the
 * rest of acx uses (coll_mpi_stage.c), which calls this file's table
 * (acx_coll_mpi_host_ops) with host buffers only.
 *
 * Choosing a backend, creating communicators and status agreement live in
 * ../coll.c; the float16/bfloat16 conversions in ../half.c; this file never
 * decides which backend runs.
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/half.h"
#include "collectives/mpi/coll_mpi.h"
#include "collectives/watchdog.h"
#include "runtime/base/error.h"

/* Most elements one MPI call moves. Overridable at compile time only, so the
 * chunking paths can be exercised with small buffers (-DACX_COLL_MPI_CHUNK_MAX=1000). */
#ifndef ACX_COLL_MPI_CHUNK_MAX
#define ACX_COLL_MPI_CHUNK_MAX ((size_t)INT_MAX)
#endif

/* ---- datatype and op mapping ---- */

MPI_Datatype acx_mpi_datatype(acx_dtype_t dtype) {
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: return MPI_FLOAT;
    case ACX_DTYPE_FLOAT64: return MPI_DOUBLE;
    case ACX_DTYPE_INT8: return MPI_INT8_T;
    case ACX_DTYPE_UINT8: return MPI_UINT8_T;
    case ACX_DTYPE_INT32: return MPI_INT32_T;
    case ACX_DTYPE_INT64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL; /* float16/bfloat16: no predefined MPI type */
    }
}

/* ACX_OP_AVG has no MPI op: callers (this backend) reduce with MPI_SUM and
 * divide. Returning MPI_SUM for it would let a caller forget the division. */
MPI_Op acx_mpi_op(acx_red_op_t op) {
    switch (op) {
    case ACX_OP_SUM: return MPI_SUM;
    case ACX_OP_MAX: return MPI_MAX;
    case ACX_OP_MIN: return MPI_MIN;
    case ACX_OP_PROD: return MPI_PROD;
    default: return MPI_OP_NULL;
    }
}

static const char *op_name(acx_red_op_t op) {
    switch (op) {
    case ACX_OP_SUM: return "sum";
    case ACX_OP_AVG: return "avg";
    case ACX_OP_MAX: return "max";
    case ACX_OP_MIN: return "min";
    case ACX_OP_PROD: return "prod";
    default: return "invalid";
    }
}

/* Type used to *move* (not reduce) elements: half-precision values travel as
 * 16-bit words, which is exact for broadcast and the gathers. */
static MPI_Datatype move_datatype(acx_dtype_t dtype) {
    if (acx_dtype_is_half(dtype)) return MPI_UINT16_T;
    return acx_mpi_datatype(dtype);
}

static int dtype_valid(acx_dtype_t dtype) { return (int)dtype >= 0 && dtype < ACX_DTYPE_COUNT_; }

static int dtype_is_float(acx_dtype_t dtype) {
    return dtype == ACX_DTYPE_FLOAT32 || dtype == ACX_DTYPE_FLOAT64 || acx_dtype_is_half(dtype);
}

/* base + bytes, without forming NULL + 0 (undefined behavior in C) for
 * empty buffers. */
static void *byte_at(const void *base, size_t bytes) {
    return bytes ? (void *)((const char *)base + bytes) : (void *)base;
}

static size_t chunk_len(size_t remaining) {
    return remaining < ACX_COLL_MPI_CHUNK_MAX ? remaining : ACX_COLL_MPI_CHUNK_MAX;
}

/* Chunks a count of elements takes; 0 elements still make one (empty) call,
 * so every rank enters the same collectives. */
static size_t num_chunks(size_t count) {
    return count == 0 ? 1 : (count - 1) / ACX_COLL_MPI_CHUNK_MAX + 1;
}

/* [a, a + abytes) and [b, b + bbytes) share a byte. */
static int overlap(const void *a, size_t abytes, const void *b, size_t bbytes) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return abytes > 0 && bbytes > 0 && x < y + bbytes && y < x + abytes;
}

/* ---- MAX and MIN of 16-bit floats (user-defined MPI ops) ---- */

/*
 * float16 and bfloat16 are both sign-magnitude with the exponent above the
 * fraction, so for non-NaN values the integer key below orders them as
 * their real values do — with -0 just below +0, the order IEEE 754-2019's
 * maximum/minimum use. A NaN wins over any number (NaN propagates, as in
 * torch.maximum); between two NaNs the larger bit pattern wins. Every pair of
 * distinct bit patterns is thus strictly ordered, which makes the op exactly
 * commutative and associative: all ranks get the same bits whatever order or
 * tree MPI combines in.
 */
static inline int half_key(uint16_t h) {
    int mag = h & 0x7fff;
    return (h & 0x8000) ? -mag - 1 : mag;
}

/* inout[i] = max (want_max) or min of in[i], inout[i]; nan_above: the
 * largest non-NaN magnitude (0x7c00 float16, 0x7f80 bfloat16, the infinities). */
static inline void half_minmax(const uint16_t *in, uint16_t *inout, int n, int nan_above,
                               int want_max) {
    for (int i = 0; i < n; i++) {
        uint16_t a = in[i], b = inout[i];
        int a_nan = (a & 0x7fff) > nan_above, b_nan = (b & 0x7fff) > nan_above;
        int take_a;
        if (a_nan || b_nan)
            take_a = a_nan && (!b_nan || a > b);
        else
            take_a = want_max ? half_key(a) > half_key(b) : half_key(a) < half_key(b);
        if (take_a) inout[i] = a;
    }
}

static void f16_max_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type; /* always MPI_UINT16_T */
    half_minmax(in, inout, *len, 0x7c00, 1);
}
static void f16_min_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    half_minmax(in, inout, *len, 0x7c00, 0);
}
static void bf16_max_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    half_minmax(in, inout, *len, 0x7f80, 1);
}
static void bf16_min_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    half_minmax(in, inout, *len, 0x7f80, 0);
}

/*
 * The four ops are created at first use and live until MPI_Finalize, which
 * frees them through the delete callback of an attribute on MPI_COMM_SELF
 * (MPI 3.1 §8.7.1: MPI_Finalize deletes MPI_COMM_SELF's attributes first,
 * while MPI is still fully usable). Creation and use are on the thread that
 * makes MPI calls (DESIGN.md, Threads), so a plain flag guards them.
 */
static MPI_Op half_ops[2][2]; /* [float16, bfloat16][max, min] */
static int half_ops_ready;

static int half_ops_free_at_finalize(MPI_Comm comm, int keyval, void *attr, void *extra) {
    (void)comm, (void)keyval, (void)attr, (void)extra;
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < 2; m++)
            if (half_ops[d][m] != MPI_OP_NULL) MPI_Op_free(&half_ops[d][m]);
    half_ops_ready = 0;
    return MPI_SUCCESS;
}

static acx_status_t half_ops_create(void) {
    static MPI_User_function *const fns[2][2] = {{f16_max_fn, f16_min_fn},
                                                 {bf16_max_fn, bf16_min_fn}};
    acx_status_t status = ACX_OK;
    int keyval = MPI_KEYVAL_INVALID;
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < 2; m++)
            half_ops[d][m] = MPI_OP_NULL;
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < 2; m++)
            ACX_MPI_CHECK_GOTO(MPI_Op_create(fns[d][m], 1, &half_ops[d][m]), status, err_free);
    ACX_MPI_CHECK_GOTO(
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, half_ops_free_at_finalize, &keyval, NULL),
        status, err_free);
    ACX_MPI_CHECK_GOTO(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, NULL), status, err_keyval);
    /* Freeing the key now is allowed: the attribute keeps it alive (§6.7.2). */
    MPI_Comm_free_keyval(&keyval);
    half_ops_ready = 1;
    return ACX_OK;

err_keyval:
    MPI_Comm_free_keyval(&keyval);
err_free:
    half_ops_free_at_finalize(MPI_COMM_SELF, MPI_KEYVAL_INVALID, NULL, NULL);
    return status;
}

/* The MPI op for MAX/MIN of a 16-bit float dtype. */
static acx_status_t half_op(acx_dtype_t dtype, acx_red_op_t op, MPI_Op *mop_p) {
    if (!half_ops_ready) ACX_CHECK(half_ops_create());
    *mop_p = half_ops[dtype == ACX_DTYPE_BFLOAT16][op == ACX_OP_MIN];
    return ACX_OK;
}

/* ---- argument checks and reduction plans ---- */

static acx_status_t check_comm(const acx_comm_t *comm, const char *what) {
    if (comm == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: comm is NULL", what);
    return ACX_OK;
}

static acx_status_t check_dtype(acx_dtype_t dtype, const char *what) {
    if (!dtype_valid(dtype))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: dtype %d is not an acx_dtype_t", what,
                         (int)dtype);
    return ACX_OK;
}

/* How one reduction runs on MPI. */
typedef struct red_plan {
    MPI_Datatype type; /* on the wire (MPI_FLOAT when staged) */
    MPI_Op op;
    int staged; /* float16/bfloat16 SUM/AVG/PROD: reduced in a float32 copy */
    int avg;    /* divide the sum by the communicator size */
} red_plan_t;

static acx_status_t plan_reduce(acx_dtype_t dtype, acx_red_op_t op, const char *what,
                                red_plan_t *plan_p) {
    ACX_CHECK(check_dtype(dtype, what));
    if ((int)op < 0 || op >= ACX_OP_COUNT_)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: op %d is not an acx_red_op_t", what, (int)op);
    if (op == ACX_OP_AVG && !dtype_is_float(dtype))
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "%s op avg needs a float dtype (float32, float64, float16, bfloat16), "
                         "got %s; use sum and divide",
                         what, acx_dtype_name(dtype));
    red_plan_t plan = {.avg = op == ACX_OP_AVG};
    MPI_Op mop = op == ACX_OP_AVG ? MPI_SUM : acx_mpi_op(op);
    if (acx_dtype_is_half(dtype) && (op == ACX_OP_MAX || op == ACX_OP_MIN)) {
        plan.type = MPI_UINT16_T;
        ACX_CHECK(half_op(dtype, op, &plan.op));
    } else if (acx_dtype_is_half(dtype)) {
        plan.type = MPI_FLOAT;
        plan.op = mop;
        plan.staged = 1;
    } else {
        plan.type = acx_mpi_datatype(dtype);
        plan.op = mop;
    }
    if (plan.type == MPI_DATATYPE_NULL || plan.op == MPI_OP_NULL)
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED, "%s (%s) of %s is not supported by the MPI backend",
                         what, op_name(op), acx_dtype_name(dtype));
    *plan_p = plan;
    return ACX_OK;
}

/* ---- completion ---- */

/* What is left to do once MPI has finished: ACX_OP_AVG's division, the
 * float32 -> 16-bit rounding of a staged reduction, or the copy out of a
 * scratch buffer. Shared by the blocking calls and test/wait. */
typedef struct post {
    void *scratch; /* owned buffer MPI worked in (float32 stage or copy), or NULL */
    void *result;  /* where MPI left the count result elements */
    void *out;     /* the caller's buffer [count] of dtype; NULL: nothing to do */
    size_t count;
    acx_dtype_t dtype; /* the caller's */
    int staged;        /* result is float32, out is 16-bit */
    int avg_size;      /* divide by it when > 1 */
} post_t;

/* ACX_OP_AVG's second half on a float32/float64 buffer [count] holding the
 * sum over `size` ranks. A true division (not a multiply by 1/size) so the
 * result is the correctly rounded mean of the sum, as torch's div_. */
static void avg_divide(void *buf, size_t count, acx_dtype_t dtype, int size) {
    if (dtype == ACX_DTYPE_FLOAT32) {
        float *x = buf, d = (float)size;
        for (size_t i = 0; i < count; i++)
            x[i] /= d;
    } else {
        double *x = buf, d = (double)size;
        for (size_t i = 0; i < count; i++)
            x[i] /= d;
    }
}

/* Staged AVG: the float32 sum divided in float64 (the quotient of a float32
 * by a small integer, correctly rounded to 53 bits) and rounded to 16 bits
 * once (round-to-odd through float32, half.h), so sum / size is rounded a
 * single time, as for float32. */
static void half_avg_round(const float *sum, uint16_t *out, size_t count, acx_dtype_t dtype,
                           int size) {
    double d = (double)size;
    if (dtype == ACX_DTYPE_FLOAT16)
        for (size_t i = 0; i < count; i++)
            out[i] = acx_f16_from_f64((double)sum[i] / d);
    else
        for (size_t i = 0; i < count; i++)
            out[i] = acx_bf16_from_f64((double)sum[i] / d);
}

static void post_run(const post_t *p) {
    if (p->out == NULL) return;
    if (p->staged) {
        if (p->avg_size > 1)
            half_avg_round(p->result, p->out, p->count, p->dtype, p->avg_size);
        else
            acx_half_from_f32_n(p->dtype, p->result, p->out, p->count);
        return;
    }
    if (p->result != p->out && p->count > 0)
        memmove(p->out, p->result, p->count * acx_dtype_size(p->dtype));
    if (p->avg_size > 1) avg_divide(p->out, p->count, p->dtype, p->avg_size);
}

/* ---- requests ---- */

/* A pending non-blocking collective: one MPI request per chunk, and what
 * is left to do once they complete. */
struct acx_coll_req {
    post_t post;
    int complete; /* MPI finished and post_run applied */
    int nreq;
    MPI_Request mpi[]; /* [nreq] */
};

static acx_status_t req_create(size_t nchunks, const char *what, acx_coll_req_t **req_p) {
    if (nchunks > (size_t)INT_MAX)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: %zu chunks of %zu elements is too many", what,
                         nchunks, (size_t)ACX_COLL_MPI_CHUNK_MAX);
    acx_coll_req_t *req = acx_calloc(1, sizeof *req + nchunks * sizeof(MPI_Request), what);
    if (req == NULL) return ACX_ERR_NO_MEMORY;
    *req_p = req;
    return ACX_OK;
}

/* Give up a request whose start failed part way. Requests of a
 * non-blocking collective may not be freed or cancelled (MPI 3.1 §5.12):
 * complete the chunks already started first. */
static void req_abandon(acx_coll_req_t *req) {
    if (req == NULL) return;
    if (req->nreq > 0) MPI_Waitall(req->nreq, req->mpi, MPI_STATUSES_IGNORE);
    free(req->post.scratch);
    free(req);
}

static acx_status_t mpi_test(acx_coll_req_t *req, int *done_p) {
    if (req == NULL || done_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "test: %s is NULL", req == NULL ? "req" : "done_p");
    if (!req->complete) {
        int flag = 0;
        ACX_MPI_CHECK(MPI_Testall(req->nreq, req->mpi, &flag, MPI_STATUSES_IGNORE));
        if (!flag) {
            *done_p = 0;
            return ACX_OK;
        }
        post_run(&req->post);
        req->complete = 1;
    }
    *done_p = 1;
    return ACX_OK;
}

static acx_status_t mpi_wait(acx_coll_req_t *req) {
    acx_status_t status = ACX_OK;
    if (req == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "wait: req is NULL");
    if (!req->complete) {
        ACX_MPI_CHECK_GOTO(MPI_Waitall(req->nreq, req->mpi, MPI_STATUSES_IGNORE), status, out_free);
        post_run(&req->post);
        req->complete = 1;
    }
out_free:
    /* the request is spent either way: the caller cannot retry it */
    free(req->post.scratch);
    free(req);
    return status;
}

/* ---- communicator state ---- */

/* The MPI backend needs nothing beyond the duplicated MPI communicator. */
static acx_status_t mpi_comm_init(acx_comm_t *comm) {
    comm->state = NULL;
    return ACX_OK;
}

static void mpi_comm_fini(acx_comm_t *comm) { comm->state = NULL; }

/* ---- all-reduce ---- */

/*
 * Set up an all-reduce: check, plan, and for a staged reduction widen
 * sendbuf into a float32 scratch [count] that MPI then reduces in place.
 * Fills *post and the MPI buffers to use (src may be MPI_IN_PLACE).
 */
static acx_status_t all_reduce_setup(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                     red_plan_t *plan, post_t *post, const void **src_p,
                                     void **dst_p) {
    ACX_CHECK(check_comm(comm, "all-reduce"));
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce of %zu elements: %s is NULL", count,
                         sendbuf == NULL ? "sendbuf" : "recvbuf");
    ACX_CHECK(plan_reduce(dtype, op, "all-reduce", plan));
    *post = (post_t){.out = recvbuf,
                     .result = recvbuf,
                     .count = count,
                     .dtype = dtype,
                     .staged = plan->staged,
                     .avg_size = plan->avg ? comm->size : 1};
    if (plan->staged) {
        float *stage = acx_malloc(count * sizeof(float), "float32 stage of a 16-bit all-reduce");
        if (stage == NULL) return ACX_ERR_NO_MEMORY;
        acx_half_to_f32_n(dtype, sendbuf, stage, count);
        post->scratch = post->result = stage;
        *src_p = MPI_IN_PLACE; /* on every rank: all stage */
        *dst_p = stage;
        return ACX_OK;
    }
    /* sendbuf == recvbuf selects MPI_IN_PLACE on this rank only (MPI asks
     * for it on all ranks alike; Open MPI decides per rank, and callers so
     * far are in place everywhere or nowhere). */
    *src_p = sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf;
    *dst_p = recvbuf;
    return ACX_OK;
}

static acx_status_t mpi_all_reduce(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    red_plan_t plan;
    post_t post;
    const void *src;
    void *dst;
    acx_status_t status = ACX_OK;
    ACX_CHECK(all_reduce_setup(comm, sendbuf, recvbuf, count, dtype, op, &plan, &post, &src, &dst));
    size_t esize = plan.staged ? sizeof(float) : acx_dtype_size(dtype), done = 0;
    do {
        size_t n = chunk_len(count - done);
        const void *s = src == MPI_IN_PLACE ? MPI_IN_PLACE : byte_at(src, done * esize);
        ACX_MPI_CHECK_GOTO(
            MPI_Allreduce(s, byte_at(dst, done * esize), (int)n, plan.type, plan.op, comm->mpi),
            status, out);
        done += n;
    } while (done < count);
    post_run(&post);
out:
    free(post.scratch);
    return status;
}

static acx_status_t mpi_all_reduce_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                         acx_coll_req_t **req_p) {
    red_plan_t plan;
    post_t post;
    const void *src;
    void *dst;
    acx_status_t status = ACX_OK;
    acx_coll_req_t *req = NULL;
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce start: req_p is NULL");
    ACX_CHECK(all_reduce_setup(comm, sendbuf, recvbuf, count, dtype, op, &plan, &post, &src, &dst));
    status = req_create(num_chunks(count), "all-reduce request", &req);
    if (status != ACX_OK) {
        free(post.scratch);
        return status;
    }
    req->post = post;
    size_t esize = plan.staged ? sizeof(float) : acx_dtype_size(dtype), done = 0;
    do {
        size_t n = chunk_len(count - done);
        const void *s = src == MPI_IN_PLACE ? MPI_IN_PLACE : byte_at(src, done * esize);
        ACX_MPI_CHECK_GOTO(MPI_Iallreduce(s, byte_at(dst, done * esize), (int)n, plan.type, plan.op,
                                          comm->mpi, &req->mpi[req->nreq]),
                           status, err_started);
        req->nreq++;
        done += n;
    } while (done < count);
    *req_p = req;
    return ACX_OK;

err_started:
    req_abandon(req);
    return status;
}

/* ---- reduce-scatter ---- */

/*
 * One MPI_Reduce_scatter_block, in one of three shapes:
 *   plain     sendbuf [size x count] -> recvbuf [count]
 *   in place  recvbuf is block r of sendbuf: MPI may not see aliased
 *             arguments, so the result goes to a scratch [count] and is
 *             copied into place (MPI_IN_PLACE would have to be chosen by
 *             every rank alike, and this is a per-rank property)
 *   staged    sendbuf widened into a float32 scratch [size x count], reduced
 *             there with MPI_IN_PLACE (every rank stages), rounded out once
 */
static acx_status_t reduce_scatter_setup(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                         red_plan_t *plan, post_t *post, const void **src_p,
                                         void **dst_p) {
    ACX_CHECK(check_comm(comm, "reduce-scatter"));
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "reduce-scatter of %zu elements per rank: %s is NULL",
                         count, sendbuf == NULL ? "sendbuf" : "recvbuf");
    ACX_CHECK(plan_reduce(dtype, op, "reduce-scatter", plan));
    size_t size = (size_t)comm->size, esize = acx_dtype_size(dtype);
    if (count > ACX_COLL_MPI_CHUNK_MAX || count > SIZE_MAX / sizeof(double) / size)
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "reduce-scatter of %zu elements per rank: the MPI backend takes at most "
                         "%zu (MPI's int count); split the buffer",
                         count, (size_t)ACX_COLL_MPI_CHUNK_MAX);
    const void *mine = byte_at(sendbuf, (size_t)comm->rank * count * esize);
    int in_place = count > 0 && recvbuf == mine;
    if (count > 0 && !in_place && overlap(sendbuf, size * count * esize, recvbuf, count * esize))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "reduce-scatter: recvbuf overlaps sendbuf but is not this rank's block "
                         "(in place means recvbuf == sendbuf + rank * count elements)");
    *post = (post_t){.out = recvbuf,
                     .result = recvbuf,
                     .count = count,
                     .dtype = dtype,
                     .staged = plan->staged,
                     .avg_size = plan->avg ? comm->size : 1};
    *src_p = sendbuf;
    *dst_p = recvbuf;
    if (plan->staged) {
        float *stage =
            acx_malloc(size * count * sizeof(float), "float32 stage of a 16-bit reduce-scatter");
        if (stage == NULL) return ACX_ERR_NO_MEMORY;
        acx_half_to_f32_n(dtype, sendbuf, stage, size * count);
        post->scratch = post->result = stage;
        *src_p = MPI_IN_PLACE;
        *dst_p = stage;
    } else if (in_place) {
        void *tmp = acx_malloc(count * esize, "in-place reduce-scatter result");
        if (tmp == NULL) return ACX_ERR_NO_MEMORY;
        post->scratch = post->result = tmp;
        *dst_p = tmp;
    }
    return ACX_OK;
}

static acx_status_t mpi_reduce_scatter(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    red_plan_t plan;
    post_t post;
    const void *src;
    void *dst;
    acx_status_t status = ACX_OK;
    ACX_CHECK(
        reduce_scatter_setup(comm, sendbuf, recvbuf, count, dtype, op, &plan, &post, &src, &dst));
    ACX_MPI_CHECK_GOTO(
        MPI_Reduce_scatter_block(src, dst, (int)count, plan.type, plan.op, comm->mpi), status, out);
    post_run(&post);
out:
    free(post.scratch);
    return status;
}

static acx_status_t mpi_reduce_scatter_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                             size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                             acx_coll_req_t **req_p) {
    red_plan_t plan;
    post_t post;
    const void *src;
    void *dst;
    acx_status_t status = ACX_OK;
    acx_coll_req_t *req = NULL;
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "reduce-scatter start: req_p is NULL");
    ACX_CHECK(
        reduce_scatter_setup(comm, sendbuf, recvbuf, count, dtype, op, &plan, &post, &src, &dst));
    status = req_create(1, "reduce-scatter request", &req);
    if (status != ACX_OK) {
        free(post.scratch);
        return status;
    }
    req->post = post;
    ACX_MPI_CHECK_GOTO(MPI_Ireduce_scatter_block(src, dst, (int)count, plan.type, plan.op,
                                                 comm->mpi, &req->mpi[0]),
                       status, err_started);
    req->nreq = 1;
    *req_p = req;
    return ACX_OK;

err_started:
    req_abandon(req);
    return status;
}

/* ---- broadcast ---- */

static acx_status_t check_broadcast(const acx_comm_t *comm, const void *buf, size_t count,
                                    acx_dtype_t dtype, int root) {
    ACX_CHECK(check_comm(comm, "broadcast"));
    ACX_CHECK(check_dtype(dtype, "broadcast"));
    if (count > 0 && buf == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "broadcast of %zu elements: buf is NULL", count);
    if (root < 0 || root >= comm->size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "broadcast: root %d is not a rank of 0..%d", root,
                         comm->size - 1);
    return ACX_OK;
}

static acx_status_t mpi_broadcast(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                                  int root) {
    ACX_CHECK(check_broadcast(comm, buf, count, dtype, root));
    MPI_Datatype type = move_datatype(dtype);
    size_t esize = acx_dtype_size(dtype), done = 0;
    do {
        size_t n = chunk_len(count - done);
        ACX_MPI_CHECK(MPI_Bcast(byte_at(buf, done * esize), (int)n, type, root, comm->mpi));
        done += n;
    } while (done < count);
    return ACX_OK;
}

static acx_status_t mpi_broadcast_start(acx_comm_t *comm, void *buf, size_t count,
                                        acx_dtype_t dtype, int root, acx_coll_req_t **req_p) {
    acx_status_t status = ACX_OK;
    acx_coll_req_t *req = NULL;
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "broadcast start: req_p is NULL");
    ACX_CHECK(check_broadcast(comm, buf, count, dtype, root));
    ACX_CHECK(req_create(num_chunks(count), "broadcast request", &req));
    MPI_Datatype type = move_datatype(dtype);
    size_t esize = acx_dtype_size(dtype), done = 0;
    do {
        size_t n = chunk_len(count - done);
        ACX_MPI_CHECK_GOTO(MPI_Ibcast(byte_at(buf, done * esize), (int)n, type, root, comm->mpi,
                                      &req->mpi[req->nreq]),
                           status, err_started);
        req->nreq++;
        done += n;
    } while (done < count);
    *req_p = req;
    return ACX_OK;

err_started:
    req_abandon(req);
    return status;
}

/* ---- all-gather and gather ---- */

/*
 * All-gather (root < 0) and gather to root share one shape: every rank's
 * sendbuf [count] lands at element r * count of recvbuf [size x count].
 *
 * In place (sendbuf is this rank's own block of recvbuf) the block is first
 * copied to a scratch [count] and sent from there: MPI forbids aliased
 * arguments, and MPI_IN_PLACE would have to be chosen alike on every rank.
 *
 * Counts above the chunk limit go chunk by chunk: chunk [off, off + n) of
 * rank r belongs at (r * count + off) elements, so the receive type is n
 * contiguous elements resized to an extent of count elements — MPI then
 * strides the ranks' blocks by one full per-rank row:
 *
 *   recvbuf  | r0: [off, off+n) ...... | r1: [off, off+n) ...... | ...
 *            |<------ count elements ->|
 */
typedef struct gather_args {
    const void *send; /* after the in-place copy */
    void *recv;       /* NULL on non-root ranks of a gather */
    size_t count, esize;
    MPI_Datatype type;
    int root; /* -1: all-gather */
} gather_args_t;

static acx_status_t gather_setup(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                 acx_dtype_t dtype, int root, post_t *post, gather_args_t *args) {
    const char *what = root < 0 ? "all-gather" : "gather";
    ACX_CHECK(check_comm(comm, what));
    ACX_CHECK(check_dtype(dtype, what));
    if (root >= comm->size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "gather: root %d is not a rank of 0..%d", root,
                         comm->size - 1);
    int receives = root < 0 || comm->rank == root;
    if (count > 0 && (sendbuf == NULL || (receives && recvbuf == NULL)))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s of %zu elements: %s is NULL", what, count,
                         sendbuf == NULL ? "sendbuf" : "recvbuf");
    size_t size = (size_t)comm->size, esize = acx_dtype_size(dtype);
    if (count > SIZE_MAX / esize / size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s of %zu elements per rank overflows size_t", what,
                         count);
    *post = (post_t){0};
    *args = (gather_args_t){.send = sendbuf,
                            .recv = receives ? recvbuf : NULL,
                            .count = count,
                            .esize = esize,
                            .type = move_datatype(dtype),
                            .root = root};
    if (receives && count > 0 && sendbuf == byte_at(recvbuf, (size_t)comm->rank * count * esize)) {
        void *copy = acx_malloc(count * esize, "in-place gather block");
        if (copy == NULL) return ACX_ERR_NO_MEMORY;
        memcpy(copy, sendbuf, count * esize);
        post->scratch = copy;
        args->send = copy;
    }
    return ACX_OK;
}

/* Chunk [off, off + n) of every rank's block; blocking when req is NULL. */
static acx_status_t gather_chunk(acx_comm_t *comm, const gather_args_t *a, size_t off, size_t n,
                                 MPI_Request *req) {
    acx_status_t status = ACX_OK;
    MPI_Datatype block = MPI_DATATYPE_NULL, row = MPI_DATATYPE_NULL, rtype = a->type;
    int rcount = (int)n;
    if (n < a->count) { /* a chunk of a larger block: strided receive */
        ACX_MPI_CHECK_GOTO(MPI_Type_contiguous((int)n, a->type, &block), status, out);
        ACX_MPI_CHECK_GOTO(MPI_Type_create_resized(block, 0, (MPI_Aint)(a->count * a->esize), &row),
                           status, out);
        ACX_MPI_CHECK_GOTO(MPI_Type_commit(&row), status, out);
        rtype = row;
        rcount = 1;
    }
    const void *s = byte_at(a->send, off * a->esize);
    void *r = a->recv != NULL ? byte_at(a->recv, off * a->esize) : NULL;
    if (a->root < 0 && req == NULL)
        ACX_MPI_CHECK_GOTO(MPI_Allgather(s, (int)n, a->type, r, rcount, rtype, comm->mpi), status,
                           out);
    else if (a->root < 0)
        ACX_MPI_CHECK_GOTO(MPI_Iallgather(s, (int)n, a->type, r, rcount, rtype, comm->mpi, req),
                           status, out);
    else if (req == NULL)
        ACX_MPI_CHECK_GOTO(MPI_Gather(s, (int)n, a->type, r, rcount, rtype, a->root, comm->mpi),
                           status, out);
    else
        ACX_MPI_CHECK_GOTO(
            MPI_Igather(s, (int)n, a->type, r, rcount, rtype, a->root, comm->mpi, req), status,
            out);
out:
    /* Freeing a type a pending operation uses is allowed (MPI 3.1 §4.1.9). */
    if (row != MPI_DATATYPE_NULL) MPI_Type_free(&row);
    if (block != MPI_DATATYPE_NULL) MPI_Type_free(&block);
    return status;
}

static acx_status_t gather_blocking(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, acx_dtype_t dtype, int root) {
    post_t post;
    gather_args_t a;
    acx_status_t status = ACX_OK;
    ACX_CHECK(gather_setup(comm, sendbuf, recvbuf, count, dtype, root, &post, &a));
    size_t off = 0;
    do {
        size_t n = chunk_len(count - off);
        ACX_CHECK_GOTO(gather_chunk(comm, &a, off, n, NULL), status, out);
        off += n;
    } while (off < count);
out:
    free(post.scratch);
    return status;
}

static acx_status_t gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                 acx_dtype_t dtype, int root, acx_coll_req_t **req_p) {
    post_t post;
    gather_args_t a;
    acx_status_t status = ACX_OK;
    acx_coll_req_t *req = NULL;
    ACX_CHECK(gather_setup(comm, sendbuf, recvbuf, count, dtype, root, &post, &a));
    status =
        req_create(num_chunks(count), root < 0 ? "all-gather request" : "gather request", &req);
    if (status != ACX_OK) {
        free(post.scratch);
        return status;
    }
    req->post = post; /* holds the in-place copy until the wait */
    size_t off = 0;
    do {
        size_t n = chunk_len(count - off);
        ACX_CHECK_GOTO(gather_chunk(comm, &a, off, n, &req->mpi[req->nreq]), status, err_started);
        req->nreq++;
        off += n;
    } while (off < count);
    *req_p = req;
    return ACX_OK;

err_started:
    req_abandon(req);
    return status;
}

static acx_status_t mpi_all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype) {
    return gather_blocking(comm, sendbuf, recvbuf, count, dtype, -1);
}

static acx_status_t mpi_all_gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, acx_dtype_t dtype, acx_coll_req_t **req_p) {
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-gather start: req_p is NULL");
    return gather_start(comm, sendbuf, recvbuf, count, dtype, -1, req_p);
}

static acx_status_t check_root(const acx_comm_t *comm, int root) {
    ACX_CHECK(check_comm(comm, "gather"));
    if (root < 0 || root >= comm->size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "gather: root %d is not a rank of 0..%d", root,
                         comm->size - 1);
    return ACX_OK;
}

static acx_status_t mpi_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                               acx_dtype_t dtype, int root) {
    ACX_CHECK(check_root(comm, root));
    return gather_blocking(comm, sendbuf, recvbuf, count, dtype, root);
}

static acx_status_t mpi_gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, acx_dtype_t dtype, int root,
                                     acx_coll_req_t **req_p) {
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "gather start: req_p is NULL");
    ACX_CHECK(check_root(comm, root));
    return gather_start(comm, sendbuf, recvbuf, count, dtype, root, req_p);
}

/* ---- barrier ---- */

static acx_status_t mpi_barrier(acx_comm_t *comm) {
    ACX_CHECK(check_comm(comm, "barrier"));
    ACX_MPI_CHECK(MPI_Barrier(comm->mpi));
    return ACX_OK;
}

static acx_status_t mpi_barrier_start(acx_comm_t *comm, acx_coll_req_t **req_p) {
    acx_status_t status = ACX_OK;
    acx_coll_req_t *req = NULL;
    ACX_CHECK(check_comm(comm, "barrier start"));
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "barrier start: req_p is NULL");
    ACX_CHECK(req_create(1, "barrier request", &req));
    ACX_MPI_CHECK_GOTO(MPI_Ibarrier(comm->mpi, &req->mpi[0]), status, err_free);
    req->nreq = 1;
    *req_p = req;
    return ACX_OK;

err_free:
    free(req);
    return status;
}

/* ---- the stall detector's brackets ---- */

/* Every call that can block waiting for other ranks is timed by the stall
 * detector (collectives/watchdog.c): the blocking collectives and wait. The
 * starts and test return at once and are not. */
static acx_status_t watched_all_reduce(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    acx_watch_enter("all_reduce");
    acx_status_t st = mpi_all_reduce(comm, sendbuf, recvbuf, count, dtype, op);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_reduce_scatter(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    acx_watch_enter("reduce_scatter");
    acx_status_t st = mpi_reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_broadcast(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                                      int root) {
    acx_watch_enter("broadcast");
    acx_status_t st = mpi_broadcast(comm, buf, count, dtype, root);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, acx_dtype_t dtype) {
    acx_watch_enter("all_gather");
    acx_status_t st = mpi_all_gather(comm, sendbuf, recvbuf, count, dtype);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype, int root) {
    acx_watch_enter("gather");
    acx_status_t st = mpi_gather(comm, sendbuf, recvbuf, count, dtype, root);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_barrier(acx_comm_t *comm) {
    acx_watch_enter("barrier");
    acx_status_t st = mpi_barrier(comm);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_wait(acx_coll_req_t *req) {
    acx_watch_enter("wait");
    acx_status_t st = mpi_wait(req);
    acx_watch_exit();
    return st;
}

/* ---- the table ---- */

/* Host memory only: coll_mpi_stage.c's acx_coll_mpi_ops wraps it for device buffers. */
const acx_coll_ops_t acx_coll_mpi_host_ops = {
    .name = "mpi",
    .comm_init = mpi_comm_init,
    .comm_fini = mpi_comm_fini,
    .all_reduce = watched_all_reduce,
    .reduce_scatter = watched_reduce_scatter,
    .broadcast = watched_broadcast,
    .all_gather = watched_all_gather,
    .gather = watched_gather,
    .barrier = watched_barrier,
    .all_reduce_start = mpi_all_reduce_start,
    .reduce_scatter_start = mpi_reduce_scatter_start,
    .broadcast_start = mpi_broadcast_start,
    .all_gather_start = mpi_all_gather_start,
    .gather_start = mpi_gather_start,
    .barrier_start = mpi_barrier_start,
    .test = mpi_test,
    .wait = watched_wait,
};

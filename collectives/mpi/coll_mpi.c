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
 *     with user-defined ops (MPI_Op_create) that compare the values.
 *   - SUM, AVG and PROD of float16/bfloat16 keep 2 bytes per element on the
 *     wire *and* round once. They do not use an MPI op: the all-reduce is
 *     the bandwidth-optimal shape "reduce-scatter, then all-gather"
 *     (Rabenseifner, "Optimization of collective reduction operations",
 *     ICCS 2004; Thakur, Rabenseifner & Gropp, "Optimization of collective
 *     communication operations in MPICH", IJHPCA 19(1), 2005), with the
 *     reduce-scatter done as its pairwise-exchange form — every rank's
 *     block q sent to rank q (one MPI_Alltoallv) — and the arithmetic done
 *     here, where the order is ours:
 *
 *       N elements, p ranks, p blocks (q < N mod p: one element more)
 *
 *       rank 0 [a0|a1|a2]   MPI_Alltoallv,      rank 0 a0 b0 c0 -> s0
 *       rank 1 [b0|b1|b2]   16-bit blocks:      rank 1 a1 b1 c1 -> s1
 *       rank 2 [c0|c1|c2]   block q to rank q   rank 2 a2 b2 c2 -> s2
 *
 *       s_r = round16(((x_0 + x_1) + x_2) + ...): float32, rank order,
 *             one rounding (AVG: round16(float32 sum / p); PROD: products)
 *
 *       MPI_Allgatherv of the 16-bit s_r, in place -> [s0|s1|s2] everywhere
 *
 *     Bytes each rank sends: (p-1)/p N x 2 in each half, 2 (p-1)/p N x 2 in
 *     all — what a ring all-reduce of 16-bit data moves, half of a float32
 *     all-reduce of the same N (the 2 (p-1)/p N elements lower bound of
 *     Patarasuk & Yuan, JPDC 69(2), 2009). Each block is summed once, by
 *     its owner, in rank order, and then copied: the result is the same on
 *     every rank and does not depend on the algorithm MPI picks; when the
 *     float32 sum is exact (few ranks, values of similar scale) it is the
 *     correctly rounded true sum. Scratch: the p blocks received, 2 bytes
 *     per element of the buffer, held until completion. Reduce-scatter is
 *     the first half alone (one MPI_Alltoall of the [p x count] rows).
 *
 *     Why not a user-defined MPI_Op on 16-bit words, which also keeps the
 *     wire at 2 bytes: MPI combines partial results in an order and a tree
 *     of its own choosing, and such an op rounds to 16 bits at every
 *     combine — p - 1 roundings on p ranks, the result depending on the
 *     algorithm MPI selects for the message size and rank count. Why not
 *     float32 on the wire (widen, MPI_SUM on MPI_FLOAT, round — what this
 *     file did before): the same single rounding at twice the bytes and a
 *     4-byte-per-element stage. The cost here is two collectives instead of
 *     one — latency, for small buffers — and the local sums.
 *
 *     A non-blocking 16-bit all-reduce starts its all-to-all; its
 *     all-gather can start only when that has finished and the sums are
 *     done, so test and wait post it, on a duplicate communicator and in
 *     start order through a queue that keeps the ranks' collectives
 *     matched ("requests and the queue" below says how, and what a caller
 *     must not do).
 *   - counts above INT_MAX elements (MPI takes int counts): all-reduce,
 *     broadcast, all-gather and gather split the buffer into chunks of at
 *     most ACX_COLL_MPI_CHUNK_MAX elements, one MPI call (or one request)
 *     per chunk. Reduce-scatter refuses such counts (ACX_ERR_NOT_SUPPORTED).
 *
 * When every rank of the communicator shares one node, all-reduce,
 * reduce-scatter and all-gather go through a shared-memory segment instead
 * of MPI (coll_mpi_shm.h; ACX_SHM_DISABLE=1 turns it off): all-gather of
 * any dtype; all-reduce and reduce-scatter for SUM of float32, float64,
 * int32, int64 (AVG of float32/float64: that SUM, then the division
 * above) and SUM and AVG of float16/bfloat16, with the float32 rank-order
 * sum and single rounding described above — so a 16-bit result has the
 * same bits on either path, and a 32/64-bit sum is the left-to-right sum
 * in rank order. Blocking and non-blocking, in and out of place. Their
 * requests are shared-memory ops, advanced by test and wait like the
 * 16-bit queue below. 16-bit PROD, MAX and MIN, int8/uint8 reductions,
 * broadcast, gather, barrier and multi-node communicators take the MPI
 * paths.
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
#include "base/half.h"
#include "collectives/mpi/coll_mpi.h"
#include "collectives/mpi/coll_mpi_shm.h"
#include "collectives/watchdog.h"
#include "base/error.h"

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
    case ACX_DTYPE_UINT16: return MPI_UINT16_T;
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

/* 1 when comm's state was made by this backend (the staging table's
 * comm_init or the host table's; a table that wraps either keeps it). */
static int is_mpi_comm(const acx_comm_t *comm) {
    return comm != NULL && comm->ops != NULL &&
           (comm->ops->comm_init == acx_coll_mpi_ops.comm_init ||
            comm->ops->comm_init == acx_coll_mpi_host_ops.comm_init);
}

/* comm must be an MPI-backend communicator: its state made by this
 * backend's comm_init (a table that wraps this one keeps it; a device
 * backend's communicator has its own state there). */
static acx_status_t check_comm(const acx_comm_t *comm, const char *what) {
    if (comm == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: comm is NULL", what);
    if (!is_mpi_comm(comm))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s on the MPI backend: comm is a communicator of the %s backend; "
                         "host data on such a communicator goes through its MPI communicator",
                         what, comm->ops != NULL ? comm->ops->name : "(none)");
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
    MPI_Datatype type; /* on the wire */
    MPI_Op op;         /* MPI_OP_NULL when half is set */
    int half; /* float16/bfloat16 SUM/AVG/PROD: all-to-all + float32 sums (below), not an MPI op */
    int avg;  /* divide the sum by the communicator size */
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
    red_plan_t plan = {.avg = op == ACX_OP_AVG, .op = MPI_OP_NULL};
    if (acx_dtype_is_half(dtype) && (op == ACX_OP_MAX || op == ACX_OP_MIN)) {
        plan.type = MPI_UINT16_T;
        ACX_CHECK(half_op(dtype, op, &plan.op));
    } else if (acx_dtype_is_half(dtype)) {
        plan.type = MPI_UINT16_T;
        plan.half = 1;
        *plan_p = plan;
        return ACX_OK;
    } else {
        plan.type = acx_mpi_datatype(dtype);
        plan.op = op == ACX_OP_AVG ? MPI_SUM : acx_mpi_op(op);
    }
    if (plan.type == MPI_DATATYPE_NULL || plan.op == MPI_OP_NULL)
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED, "%s (%s) of %s is not supported by the MPI backend",
                         what, op_name(op), acx_dtype_name(dtype));
    *plan_p = plan;
    return ACX_OK;
}

/* ---- SUM, AVG and PROD of 16-bit floats: all-to-all, float32 sums, all-gather ---- */

/*
 * The algorithm of the header comment. A reduction is described by a
 * half_red_t that lives as long as the collective (the non-blocking forms
 * keep it in the request: MPI reads the count and displacement arrays of a
 * pending MPI_Ialltoallv/MPI_Iallgatherv until it completes).
 *
 * An all-reduce is cut into *pieces* of at most half_piece_max(p) elements,
 * each an independent all-reduce, so that every count and displacement MPI
 * sees fits in an int; a piece of n elements is cut into p *blocks*, block q
 * (the one rank q sums) holding n/p elements, one more when q < n mod p, at
 * offset q*(n/p) + min(q, n mod p). All pieces but the last have the same
 * length, so two layouts (full piece, last piece) describe them all. What a
 * rank receives in the first half is, per piece, p copies of its own block
 * shape, rank q's at row q:
 *
 *   in  [ piece 0: rank 0's block r | rank 1's block r | ... | piece 1: ... ]
 *
 * A reduce-scatter is one piece whose blocks are the caller's [p x count]
 * rows (an MPI_Alltoall: no displacement arrays, so p x count may exceed
 * INT_MAX while count does not).
 */
typedef struct half_red {
    acx_dtype_t dtype; /* ACX_DTYPE_FLOAT16 or ACX_DTYPE_BFLOAT16 */
    acx_red_op_t op;   /* ACX_OP_SUM, ACX_OP_AVG or ACX_OP_PROD */
    int size, rank;
    int all_reduce; /* 1: both halves; 0: reduce-scatter (the first half only) */
    size_t count;   /* all-reduce: elements of the buffer; reduce-scatter: per rank */
    size_t piece;   /* all-reduce: elements per piece (the last one may be shorter) */
    size_t npieces;
    uint16_t *in;  /* the blocks received, as drawn above */
    uint16_t *out; /* the caller's recvbuf: [count] (all-reduce) or this rank's [count] */
    int *layout;   /* all-reduce: [2][4][size], see piece_layout */
} half_red_t;

/* Largest piece: at most the chunk limit, and a multiple of p no larger
 * than INT_MAX, so that a block holds at most INT_MAX/p elements and the p
 * blocks a rank receives (and their displacements) stay within an int. */
static size_t half_piece_max(int size) {
    size_t p = (size_t)size, cap = (size_t)INT_MAX / p * p;
    return ACX_COLL_MPI_CHUNK_MAX < cap ? ACX_COLL_MPI_CHUNK_MAX : cap;
}

static size_t half_piece_len(const half_red_t *h, size_t k) {
    return k + 1 < h->npieces ? h->piece : h->count - k * h->piece;
}

/* Block q of a piece of n elements on p ranks: [*off_p, *off_p + *len_p). */
static void half_block(size_t n, int p, int q, size_t *off_p, size_t *len_p) {
    size_t base = n / (size_t)p, rem = n % (size_t)p, uq = (size_t)q;
    *len_p = base + (uq < rem);
    *off_p = uq * base + (uq < rem ? uq : rem);
}

/* The arrays MPI reads for piece k, 4 x size ints: block lengths (what this
 * rank sends to each rank, and the all-gather's receive counts), block
 * offsets (send and all-gather displacements), receive counts (this rank's
 * block length, from every rank) and receive displacements (q x that). */
static const int *piece_layout(const half_red_t *h, size_t k) {
    return h->layout + (k + 1 < h->npieces ? 0 : 4 * (size_t)h->size);
}

/* Where piece k's received rows start in h->in: every piece before it is a
 * full one, and this rank received size x its block of each. */
static size_t piece_in_offset(const half_red_t *h, size_t k) {
    size_t off, len;
    half_block(h->piece, h->size, h->rank, &off, &len);
    return k * (size_t)h->size * len;
}

static void half_red_free(half_red_t *h) {
    if (h == NULL) return;
    free(h->in);
    free(h->layout);
    free(h);
}

/* The plan of a 16-bit SUM/AVG/PROD over comm, and the buffer it receives
 * into. all_reduce: count elements reduced everywhere into recvbuf;
 * otherwise a reduce-scatter of [size x count] into this rank's [count]. */
static acx_status_t half_red_create(const acx_comm_t *comm, void *recvbuf, size_t count,
                                    acx_dtype_t dtype, acx_red_op_t op, int all_reduce,
                                    half_red_t **h_p) {
    half_red_t *h = acx_calloc(1, sizeof *h, "16-bit reduction plan");
    if (h == NULL) return ACX_ERR_NO_MEMORY;
    *h = (half_red_t){.dtype = dtype,
                      .op = op,
                      .size = comm->size,
                      .rank = comm->rank,
                      .all_reduce = all_reduce,
                      .count = count,
                      .npieces = 1,
                      .out = recvbuf};
    size_t p = (size_t)comm->size, in_elems = p * count;
    if (all_reduce) {
        h->piece = half_piece_max(comm->size);
        if (count > h->piece) h->npieces = (count - 1) / h->piece + 1;
        if (h->npieces > (size_t)INT_MAX) {
            half_red_free(h);
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce of %zu elements: too many pieces",
                             count);
        }
        h->layout = acx_malloc(8 * p * sizeof(int), "16-bit all-reduce layout");
        if (h->layout == NULL) {
            half_red_free(h);
            return ACX_ERR_NO_MEMORY;
        }
        for (int s = 0; s < 2; s++) { /* 0: a full piece, 1: the last one */
            size_t n =
                s == 0 ? (count < h->piece ? count : h->piece) : half_piece_len(h, h->npieces - 1);
            int *L = h->layout + (size_t)s * 4 * p;
            size_t roff, rlen;
            half_block(n, comm->size, comm->rank, &roff, &rlen);
            for (int q = 0; q < comm->size; q++) {
                size_t off, len;
                half_block(n, comm->size, q, &off, &len);
                L[q] = (int)len;
                L[p + (size_t)q] = (int)off;
                L[2 * p + (size_t)q] = (int)rlen;
                L[3 * p + (size_t)q] = (int)((size_t)q * rlen);
            }
        }
        size_t off, full_len, last_len;
        half_block(h->piece, comm->size, comm->rank, &off, &full_len);
        half_block(half_piece_len(h, h->npieces - 1), comm->size, comm->rank, &off, &last_len);
        in_elems = (h->npieces - 1) * p * full_len + p * last_len;
    }
    h->in = acx_malloc(in_elems * sizeof(uint16_t), "16-bit reduction blocks received");
    if (h->in == NULL) {
        half_red_free(h);
        return ACX_ERR_NO_MEMORY;
    }
    *h_p = h;
    return ACX_OK;
}

/* The first half: every rank's blocks to their owners (MPI_Alltoallv per
 * piece; a reduce-scatter: one MPI_Alltoall). Blocking when reqs is NULL;
 * else one request per piece at reqs[*nreq_p], *nreq_p counting those
 * started (also on failure, so they can be completed). */
static acx_status_t half_exchange(const half_red_t *h, const void *sendbuf, MPI_Comm comm,
                                  MPI_Request *reqs, int *nreq_p) {
    if (!h->all_reduce) {
        int n = (int)h->count;
        if (reqs == NULL) {
            ACX_MPI_CHECK(MPI_Alltoall(sendbuf, n, MPI_UINT16_T, h->in, n, MPI_UINT16_T, comm));
        } else {
            ACX_MPI_CHECK(MPI_Ialltoall(sendbuf, n, MPI_UINT16_T, h->in, n, MPI_UINT16_T, comm,
                                        &reqs[*nreq_p]));
            (*nreq_p)++;
        }
        return ACX_OK;
    }
    size_t p = (size_t)h->size;
    for (size_t k = 0; k < h->npieces; k++) {
        const int *L = piece_layout(h, k);
        const void *s = byte_at(sendbuf, k * h->piece * sizeof(uint16_t));
        uint16_t *r = h->in + piece_in_offset(h, k);
        if (reqs == NULL) {
            ACX_MPI_CHECK(MPI_Alltoallv(s, L, L + p, MPI_UINT16_T, r, L + 2 * p, L + 3 * p,
                                        MPI_UINT16_T, comm));
        } else {
            ACX_MPI_CHECK(MPI_Ialltoallv(s, L, L + p, MPI_UINT16_T, r, L + 2 * p, L + 3 * p,
                                         MPI_UINT16_T, comm, &reqs[*nreq_p]));
            (*nreq_p)++;
        }
    }
    return ACX_OK;
}

/* AVG of 16-bit values: the float32 sum divided in float64 (the quotient
 * of a float32 by a small integer, correctly rounded to 53 bits) and
 * rounded to 16 bits once (round-to-odd through float32, half.h), so
 * sum / size is rounded a single time, as for float32. */
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

/* dst[i] = op over q = 0, 1, ..., p-1 (in that order) of rows[q*n + i],
 * in float32, rounded once to the 16-bit format (AVG: the float32 sum
 * divided by p, rounded once). The first row starts the accumulator, so a
 * single rank's value (a -0 included) comes back unchanged. Tiles keep
 * the accumulator in L1 and let the widening loops (half.c) vectorize. */
static void half_combine_rows(const half_red_t *h, const uint16_t *rows, size_t n, uint16_t *dst) {
    enum { TILE = 512 };
    float acc[TILE], x[TILE];
    for (size_t i0 = 0; i0 < n; i0 += TILE) {
        size_t m = n - i0 < TILE ? n - i0 : TILE;
        acx_half_to_f32_n(h->dtype, rows + i0, acc, m);
        for (int q = 1; q < h->size; q++) {
            acx_half_to_f32_n(h->dtype, rows + (size_t)q * n + i0, x, m);
            if (h->op == ACX_OP_PROD)
                for (size_t i = 0; i < m; i++)
                    acc[i] *= x[i];
            else
                for (size_t i = 0; i < m; i++)
                    acc[i] += x[i];
        }
        if (h->op == ACX_OP_AVG)
            half_avg_round(acc, dst + i0, m, h->dtype, h->size);
        else
            acx_half_from_f32_n(h->dtype, acc, dst + i0, m);
    }
}

/* Between the halves: this rank's block of every piece, from the rows
 * received, into its place in out. */
static void half_combine(const half_red_t *h) {
    if (!h->all_reduce) {
        half_combine_rows(h, h->in, h->count, h->out);
        return;
    }
    for (size_t k = 0; k < h->npieces; k++) {
        size_t off, len;
        half_block(half_piece_len(h, k), h->size, h->rank, &off, &len);
        if (len > 0)
            half_combine_rows(h, h->in + piece_in_offset(h, k), len, h->out + k * h->piece + off);
    }
}

/* The second half of an all-reduce: every rank's rounded blocks to every
 * rank, in place in out (MPI_IN_PLACE on every rank: they all run this
 * code). Blocking when reqs is NULL; else as half_exchange. */
static acx_status_t half_all_gather(const half_red_t *h, MPI_Comm comm, MPI_Request *reqs,
                                    int *nreq_p) {
    size_t p = (size_t)h->size;
    for (size_t k = 0; k < h->npieces; k++) {
        const int *L = piece_layout(h, k);
        void *r = byte_at(h->out, k * h->piece * sizeof(uint16_t));
        if (reqs == NULL) {
            ACX_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r, L, L + p,
                                         MPI_UINT16_T, comm));
        } else {
            ACX_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r, L, L + p,
                                          MPI_UINT16_T, comm, &reqs[*nreq_p]));
            (*nreq_p)++;
        }
    }
    return ACX_OK;
}

/* ---- completion ---- */

/* What is left to do once MPI has finished: ACX_OP_AVG's division, the
 * copy out of a scratch buffer, or a 16-bit reduce-scatter's sums. Shared
 * by the blocking calls and test/wait. */
typedef struct post {
    void *scratch; /* owned buffer MPI worked in (a copy), or NULL */
    void *result;  /* where MPI left the count result elements */
    void *out;     /* the caller's buffer [count] of dtype; NULL: nothing to do */
    size_t count;
    acx_dtype_t dtype; /* the caller's */
    int avg_size;      /* divide by it when > 1 */
    half_red_t *half;  /* 16-bit SUM/AVG/PROD (owned): a reduce-scatter combines
                        * here; an all-reduce between its halves */
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

static void post_run(const post_t *p) {
    if (p->half != NULL) {
        if (!p->half->all_reduce) half_combine(p->half);
        return;
    }
    if (p->out == NULL) return;
    if (p->result != p->out && p->count > 0)
        memmove(p->out, p->result, p->count * acx_dtype_size(p->dtype));
    if (p->avg_size > 1) avg_divide(p->out, p->count, p->dtype, p->avg_size);
}

static void post_free(post_t *p) {
    free(p->scratch);
    half_red_free(p->half);
    p->scratch = NULL;
    p->half = NULL;
}

/* ---- requests, and the queue of half-done 16-bit all-reduces ---- */

/*
 * A non-blocking 16-bit all-reduce is two collectives, and the second (the
 * all-gather) can only start once the first (the all-to-all) has finished
 * and this rank has summed its blocks. MPI 3.1 §5.12 requires every rank
 * to start the collectives of a communicator in the same order, but when a
 * rank's test or wait sees the all-to-all finished is a matter of timing:
 * posting the all-gather on the request's own communicator would interleave
 * it with the program's later collectives differently on each rank. So:
 *
 *   - the all-gathers go on a duplicate of the communicator (`late`), which
 *     carries nothing else;
 *   - on it they are posted in the order the all-reduces were started, the
 *     same on every rank: a started all-reduce waits in its communicator's
 *     queue (oldest first) until its all-to-all has finished *and* every
 *     all-reduce started before it has posted its all-gather;
 *   - the queue moves (queues_advance, never blocking) in every test and
 *     wait, on any request of any communicator;
 *   - a rank that is about to block must not leave an all-gather unposted
 *     that another rank may be waiting for: wait, while any queue is
 *     non-empty, polls (test + advance) instead of blocking in MPI, and a
 *     blocking collective on a communicator first polls that
 *     communicator's queue empty. (The all-to-alls it polls for were
 *     started before it by every rank — MPI's same-order rule — so they
 *     finish.)
 *
 * Shared-memory all-reduces (coll_mpi_shm.h) follow the same rules: a
 * start only queues the op (on the segment's own FIFO, in start order) and
 * does what it can without waiting; test, wait and every shared-memory
 * wait move every communicator's ops and queues on (progress_all); and a
 * wait on an MPI request polls while any such op is unfinished, since
 * another rank may be waiting for this one's part of it.
 *
 * What remains outside this file's reach: a rank blocked in MPI directly
 * (not through this backend), or in a blocking collective of another
 * communicator, while a 16-bit all-reduce it started is still queued, and
 * another rank waiting for that all-reduce — where a single MPI_Iallreduce
 * would have completed. The same holds for a started shared-memory
 * all-reduce. (Draining every communicator's queue before any
 * blocking collective would trade that for a deadlock when a rank blocks
 * on communicator B before it starts the all-reduce on A.) acx's own
 * callers wait for their gradient all-reduces before any such call.
 */
typedef struct mpi_comm_state {
    MPI_Comm late;               /* dup of comm->mpi for the posted-late all-gathers */
    acx_shm_t *shm;              /* the node's shared-memory collectives, or NULL */
    acx_coll_req_t *head, *tail; /* the queue, oldest first */
    struct mpi_comm_state *next; /* every MPI-backend communicator (all_states) */
} mpi_comm_state_t;

/* The thread that makes MPI calls owns these (DESIGN.md, Threads). */
static mpi_comm_state_t *all_states;
static int queued_total; /* requests in all queues: 0 is the fast path everywhere */

/* A pending non-blocking collective: one MPI request per chunk (or piece),
 * and what is left to do once they complete. */
struct acx_coll_req {
    post_t post;
    int complete;            /* MPI finished and post_run applied */
    acx_status_t status;     /* an error met while the queue moved it on (its last error was
                              * recorded then); test and wait return it */
    mpi_comm_state_t *queue; /* a 16-bit all-reduce in its first half: the queue it is in */
    acx_coll_req_t *next;    /* in that queue */
    acx_shm_t *shm;          /* a shared-memory op: its segment (else NULL) ... */
    acx_shm_op_t shm_op;     /* ... and the op */
    const char *what;        /* "all-reduce request", ...: the stall detector's name for a wait */
    int nreq;                /* requests of the current half */
    MPI_Request mpi[];       /* [nreq] */
};

static acx_status_t req_create(size_t nchunks, const char *what, acx_coll_req_t **req_p) {
    if (nchunks > (size_t)INT_MAX)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: %zu chunks of %zu elements is too many", what,
                         nchunks, (size_t)ACX_COLL_MPI_CHUNK_MAX);
    acx_coll_req_t *req = acx_calloc(1, sizeof *req + nchunks * sizeof(MPI_Request), what);
    if (req == NULL) return ACX_ERR_NO_MEMORY;
    req->what = what;
    *req_p = req;
    return ACX_OK;
}

/* Give up a request whose start failed part way (never queued). Requests
 * of a non-blocking collective may not be freed or cancelled (MPI 3.1
 * §5.12): complete the chunks already started first. */
static void req_abandon(acx_coll_req_t *req) {
    if (req == NULL) return;
    if (req->nreq > 0) MPI_Waitall(req->nreq, req->mpi, MPI_STATUSES_IGNORE);
    post_free(&req->post);
    free(req);
}

static void queue_push(mpi_comm_state_t *cs, acx_coll_req_t *req) {
    req->queue = cs;
    req->next = NULL;
    if (cs->tail != NULL)
        cs->tail->next = req;
    else
        cs->head = req;
    cs->tail = req;
    queued_total++;
}

static acx_coll_req_t *queue_pop(mpi_comm_state_t *cs) {
    acx_coll_req_t *req = cs->head;
    cs->head = req->next;
    if (cs->head == NULL) cs->tail = NULL;
    req->queue = NULL;
    req->next = NULL;
    queued_total--;
    return req;
}

/* Move cs's queue on without blocking: while the oldest all-reduce's
 * all-to-all has finished, sum its blocks and post its all-gather on
 * cs->late. Errors stay with the request they belong to. */
static void queue_advance(mpi_comm_state_t *cs) {
    while (cs->head != NULL) {
        acx_coll_req_t *r = cs->head;
        int done = 0, ret = MPI_Testall(r->nreq, r->mpi, &done, MPI_STATUSES_IGNORE);
        if (ret == MPI_SUCCESS && !done) return;
        queue_pop(cs);
        if (ret != MPI_SUCCESS) {
            r->status = acx_error_mpi(ret, "MPI_Testall (16-bit all-reduce, all-to-all half)",
                                      __FILE__, __LINE__);
            r->nreq = 0; /* in an undefined state after the failure: not waited again */
            continue;
        }
        half_combine(r->post.half);
        r->nreq = 0;
        r->status = half_all_gather(r->post.half, cs->late, r->mpi, &r->nreq);
    }
}

static void queues_advance(void) {
    for (mpi_comm_state_t *cs = all_states; cs != NULL && queued_total > 0; cs = cs->next)
        queue_advance(cs);
}

/* Ops started on any communicator's shared-memory segment and not done. */
static int shm_pending(void) {
    for (const mpi_comm_state_t *cs = all_states; cs != NULL; cs = cs->next)
        if (acx_shm_pending(cs->shm) != NULL) return 1;
    return 0;
}

/* Move everything this backend progresses itself on, without blocking:
 * the 16-bit queues and every communicator's shared-memory ops. Also the
 * progress hook of a shared-memory wait (coll_mpi_shm.h). */
static void progress_all(void) {
    if (queued_total > 0) queues_advance();
    for (mpi_comm_state_t *cs = all_states; cs != NULL; cs = cs->next)
        if (cs->shm != NULL) acx_shm_progress(cs->shm);
}

/* Before a blocking collective on comm (see above). */
static void queue_drain(const acx_comm_t *comm) {
    /* (another backend's communicator: its state is not ours to read;
     * check_comm refuses the call that follows) */
    if (queued_total == 0 || !is_mpi_comm(comm) || comm->state == NULL) return;
    const mpi_comm_state_t *cs = comm->state;
    while (cs->head != NULL)
        queues_advance();
}

static acx_status_t mpi_test(acx_coll_req_t *req, int *done_p) {
    if (req == NULL || done_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "test: %s is NULL", req == NULL ? "req" : "done_p");
    if (!req->complete) {
        progress_all();
        if (req->status != ACX_OK) return req->status;
        int flag = 0;
        if (req->shm != NULL) {
            flag = acx_shm_test(req->shm, &req->shm_op);
            if (flag && (req->status = acx_shm_op_status(&req->shm_op)) != ACX_OK)
                return req->status;
        } else if (req->queue == NULL)
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

/* Complete req, blocking: a shared-memory op in acx_shm_wait (which moves
 * everything else on meanwhile); an MPI one by polling while any queue holds
 * an all-reduce (this rank may owe another rank an all-gather) or any
 * shared-memory op is unfinished (another rank may be waiting for this
 * one's part), else in MPI_Waitall. */
static acx_status_t req_complete(acx_coll_req_t *req) {
    if (req->status == ACX_OK && req->shm != NULL) {
        acx_shm_wait(req->shm, &req->shm_op, progress_all);
        ACX_CHECK(acx_shm_op_status(&req->shm_op)); /* the ranks' arguments differed */
        post_run(&req->post);
        req->complete = 1;
        return ACX_OK;
    }
    while ((queued_total > 0 || shm_pending()) && req->status == ACX_OK) {
        progress_all();
        if (req->queue != NULL || req->status != ACX_OK) continue;
        int flag = 0;
        ACX_MPI_CHECK(MPI_Testall(req->nreq, req->mpi, &flag, MPI_STATUSES_IGNORE));
        if (flag) {
            req->nreq = 0;
            break;
        }
    }
    if (req->status != ACX_OK) {
        /* a half-posted all-gather: complete what was started, report the error */
        if (req->nreq > 0) MPI_Waitall(req->nreq, req->mpi, MPI_STATUSES_IGNORE);
        return req->status;
    }
    ACX_MPI_CHECK(MPI_Waitall(req->nreq, req->mpi, MPI_STATUSES_IGNORE));
    post_run(&req->post);
    req->complete = 1;
    return ACX_OK;
}

static acx_status_t mpi_wait(acx_coll_req_t *req) {
    if (req == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "wait: req is NULL");
    acx_status_t status = req->complete ? ACX_OK : req_complete(req);
    /* the request is spent either way: the caller cannot retry it */
    post_free(&req->post);
    free(req);
    return status;
}

/* ---- communicator state ---- */

/* The MPI backend's state per communicator: the queue above and its late
 * communicator (one MPI_Comm_dup, collective like comm_init itself). */
static acx_status_t mpi_comm_init(acx_comm_t *comm) {
    mpi_comm_state_t *cs = acx_calloc(1, sizeof *cs, "MPI backend communicator state");
    if (cs == NULL) return ACX_ERR_NO_MEMORY;
    int ret = MPI_Comm_dup(comm->mpi, &cs->late);
    if (ret != MPI_SUCCESS) {
        free(cs);
        return acx_error_mpi(ret, "MPI_Comm_dup (the late all-gathers' communicator)", __FILE__,
                             __LINE__);
    }
    acx_status_t status = acx_shm_create(comm->mpi, &cs->shm);
    if (status != ACX_OK) {
        MPI_Comm_free(&cs->late);
        free(cs);
        return status;
    }
    cs->next = all_states;
    all_states = cs;
    comm->state = cs;
    return ACX_OK;
}

static void mpi_comm_fini(acx_comm_t *comm) {
    mpi_comm_state_t *cs = comm->state;
    if (cs == NULL) return;
    /* Requests belong to the program until waited, and should be before
     * their communicator goes; any still queued can no longer get their
     * all-gather: they fail in wait. */
    while (cs->head != NULL)
        queue_pop(cs)->status =
            ACX_ERROR(ACX_ERR_STATE, "16-bit all-reduce: its communicator was destroyed before "
                                     "the request was waited for");
    for (acx_shm_op_t *op = acx_shm_pending(cs->shm); op != NULL; op = op->next) {
        acx_coll_req_t *r = op->owner; /* blocking calls never leave an op behind */
        r->shm = NULL;
        r->status = ACX_ERROR(ACX_ERR_STATE, "shared-memory collective: its communicator was "
                                             "destroyed before the request was waited for");
    }
    for (mpi_comm_state_t **pp = &all_states; *pp != NULL; pp = &(*pp)->next)
        if (*pp == cs) {
            *pp = cs->next;
            break;
        }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && cs->late != MPI_COMM_NULL) MPI_Comm_free(&cs->late);
    acx_shm_free(cs->shm);
    free(cs);
    comm->state = NULL;
}

/* ---- all-reduce ---- */

/* The shared-memory segment (coll_mpi_shm.c) when comm's ranks share a
 * node and it takes this reduction of count elements (all_reduce: of the
 * buffer; else a reduce-scatter's per rank), else NULL: MPI. 32- and
 * 64-bit AVG is summed there (post_run divides; the start still gets AVG,
 * which the segment compares with the other ranks' op); 16-bit SUM and
 * AVG go as they are (the segment rounds once, as half_combine_rows). The
 * same answer on every rank. */
static acx_shm_t *shm_for(const acx_comm_t *comm, const red_plan_t *plan, size_t count,
                          acx_dtype_t dtype, acx_red_op_t op, int all_reduce) {
    const mpi_comm_state_t *cs = comm->state;
    if (cs == NULL || cs->shm == NULL) return NULL;
    acx_red_op_t shm_op = plan->avg && !plan->half ? ACX_OP_SUM : op;
    int ok = all_reduce ? acx_shm_all_reduce_ok(cs->shm, count, dtype, shm_op)
                        : acx_shm_reduce_scatter_ok(cs->shm, count, dtype, shm_op);
    return ok ? cs->shm : NULL;
}

/*
 * Set up an all-reduce: check and plan. Through shared memory (*shm_p set)
 * nothing else is needed; a 16-bit SUM/AVG/PROD through MPI gets its
 * half_red_t in post->half; otherwise fills the MPI buffers to use (src may
 * be MPI_IN_PLACE).
 */
static acx_status_t all_reduce_setup(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                     red_plan_t *plan, post_t *post, acx_shm_t **shm_p,
                                     const void **src_p, void **dst_p) {
    ACX_CHECK(check_comm(comm, "all-reduce"));
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce of %zu elements: %s is NULL", count,
                         sendbuf == NULL ? "sendbuf" : "recvbuf");
    ACX_CHECK(plan_reduce(dtype, op, "all-reduce", plan));
    *post = (post_t){.out = recvbuf,
                     .result = recvbuf,
                     .count = count,
                     .dtype = dtype,
                     .avg_size = plan->avg ? comm->size : 1};
    *shm_p = shm_for(comm, plan, count, dtype, op, 1);
    if (*shm_p != NULL) {
        if (plan->half) post->avg_size = 1; /* the segment divided before rounding */
        return ACX_OK;
    }
    if (plan->half) {
        if (comm->state == NULL)
            return ACX_ERROR(ACX_ERR_STATE, "all-reduce: communicator has no MPI backend state");
        return half_red_create(comm, recvbuf, count, dtype, op, 1, &post->half);
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
    const void *src = NULL;
    void *dst = NULL;
    acx_status_t status = ACX_OK;
    acx_shm_t *shm = NULL;
    ACX_CHECK(
        all_reduce_setup(comm, sendbuf, recvbuf, count, dtype, op, &plan, &post, &shm, &src, &dst));
    if (shm != NULL) { /* behind the ops started before it on comm */
        acx_shm_op_t sop;
        acx_shm_all_reduce_start(shm, &sop, sendbuf, recvbuf, count, dtype, op, NULL);
        acx_shm_wait(shm, &sop, progress_all);
        status = acx_shm_op_status(&sop); /* the ranks' arguments differed */
        if (status == ACX_OK) post_run(&post);
        goto out;
    }
    if (plan.half) { /* both halves on comm itself: blocking, every rank in the same place */
        ACX_CHECK_GOTO(half_exchange(post.half, sendbuf, comm->mpi, NULL, NULL), status, out);
        half_combine(post.half);
        ACX_CHECK_GOTO(half_all_gather(post.half, comm->mpi, NULL, NULL), status, out);
        goto out;
    }
    size_t esize = acx_dtype_size(dtype), done = 0;
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
    post_free(&post);
    return status;
}

static acx_status_t mpi_all_reduce_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                         acx_coll_req_t **req_p) {
    red_plan_t plan;
    post_t post;
    const void *src = NULL;
    void *dst = NULL;
    acx_status_t status = ACX_OK;
    acx_coll_req_t *req = NULL;
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-reduce start: req_p is NULL");
    acx_shm_t *shm = NULL;
    ACX_CHECK(
        all_reduce_setup(comm, sendbuf, recvbuf, count, dtype, op, &plan, &post, &shm, &src, &dst));
    status = req_create(shm != NULL ? 0
                        : plan.half ? post.half->npieces
                                    : num_chunks(count),
                        "all-reduce request", &req);
    if (status != ACX_OK) {
        post_free(&post);
        return status;
    }
    req->post = post;
    if (shm != NULL) { /* advanced by test and wait, and by every other op's */
        req->shm = shm;
        acx_shm_all_reduce_start(shm, &req->shm_op, sendbuf, recvbuf, count, dtype, op, req);
        *req_p = req;
        return ACX_OK;
    }
    if (plan.half) { /* the first half now; test/wait post the second (the queue) */
        ACX_CHECK_GOTO(half_exchange(post.half, sendbuf, comm->mpi, req->mpi, &req->nreq), status,
                       err_started);
        queue_push(comm->state, req);
        *req_p = req;
        return ACX_OK;
    }
    size_t esize = acx_dtype_size(dtype), done = 0;
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
 * Through the shared-memory segment when shm_for says so (it reads and
 * writes the caller's buffers directly, in place or not); otherwise one
 * MPI_Reduce_scatter_block, or for 16-bit SUM/AVG/PROD one MPI_Alltoall
 * (the first half of the all-reduce above), in one of three shapes:
 *   plain     sendbuf [size x count] -> recvbuf [count]
 *   in place  recvbuf is block r of sendbuf: MPI may not see aliased
 *             arguments, so the result goes to a scratch [count] and is
 *             copied into place (MPI_IN_PLACE would have to be chosen by
 *             every rank alike, and this is a per-rank property); the
 *             16-bit path receives into its own buffer anyway and writes
 *             recvbuf only once the all-to-all has finished
 *   16-bit    the [size x count] blocks received into post->half->in,
 *             summed in rank order in float32 on completion, rounded once
 */
static acx_status_t reduce_scatter_setup(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                         red_plan_t *plan, post_t *post, acx_shm_t **shm_p,
                                         const void **src_p, void **dst_p) {
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
                     .avg_size = plan->avg ? comm->size : 1};
    *src_p = sendbuf;
    *dst_p = recvbuf;
    *shm_p = shm_for(comm, plan, count, dtype, op, 0);
    if (*shm_p != NULL) { /* in place or not, the segment writes recvbuf directly */
        if (plan->half) post->avg_size = 1; /* the segment divided before rounding */
        return ACX_OK;
    }
    if (plan->half) return half_red_create(comm, recvbuf, count, dtype, op, 0, &post->half);
    if (in_place) {
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
    acx_shm_t *shm = NULL;
    ACX_CHECK(reduce_scatter_setup(comm, sendbuf, recvbuf, count, dtype, op, &plan, &post, &shm,
                                   &src, &dst));
    if (shm != NULL) { /* behind the ops started before it on comm */
        acx_shm_op_t sop;
        acx_shm_reduce_scatter_start(shm, &sop, src, dst, count, dtype, op, NULL);
        acx_shm_wait(shm, &sop, progress_all);
        ACX_CHECK_GOTO(acx_shm_op_status(&sop), status, out); /* the ranks' arguments differed */
    } else if (plan.half)
        ACX_CHECK_GOTO(half_exchange(post.half, src, comm->mpi, NULL, NULL), status, out);
    else
        ACX_MPI_CHECK_GOTO(
            MPI_Reduce_scatter_block(src, dst, (int)count, plan.type, plan.op, comm->mpi), status,
            out);
    post_run(&post);
out:
    post_free(&post);
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
    acx_shm_t *shm = NULL;
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "reduce-scatter start: req_p is NULL");
    ACX_CHECK(reduce_scatter_setup(comm, sendbuf, recvbuf, count, dtype, op, &plan, &post, &shm,
                                   &src, &dst));
    status = req_create(shm != NULL ? 0 : 1, "reduce-scatter request", &req);
    if (status != ACX_OK) {
        post_free(&post);
        return status;
    }
    req->post = post;
    if (shm != NULL) { /* advanced by test and wait, and by every other op's */
        req->shm = shm;
        acx_shm_reduce_scatter_start(shm, &req->shm_op, src, dst, count, dtype, op, req);
        *req_p = req;
        return ACX_OK;
    }
    if (plan.half)
        ACX_CHECK_GOTO(half_exchange(post.half, src, comm->mpi, req->mpi, &req->nreq), status,
                       err_started);
    else {
        ACX_MPI_CHECK_GOTO(MPI_Ireduce_scatter_block(src, dst, (int)count, plan.type, plan.op,
                                                     comm->mpi, &req->mpi[0]),
                           status, err_started);
        req->nreq = 1;
    }
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
 * An all-gather on one node goes through the shared-memory segment
 * (shm_for_gather; in place or not, no copy); what follows is the MPI path.
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

/* The argument checks of gather_setup. */
static acx_status_t gather_check(const acx_comm_t *comm, const void *sendbuf, const void *recvbuf,
                                 size_t count, acx_dtype_t dtype, int root) {
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
    return ACX_OK;
}

static acx_status_t gather_setup(acx_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                 acx_dtype_t dtype, int root, post_t *post, gather_args_t *args) {
    ACX_CHECK(gather_check(comm, sendbuf, recvbuf, count, dtype, root));
    int receives = root < 0 || comm->rank == root;
    size_t esize = acx_dtype_size(dtype);
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

/* The shared-memory all-gather (coll_mpi_shm.c) when comm's ranks share a
 * node and the buffer is large enough, else NULL: MPI. Arguments checked. */
static acx_shm_t *shm_for_gather(const acx_comm_t *comm, size_t count, acx_dtype_t dtype) {
    const mpi_comm_state_t *cs = comm->state;
    if (cs == NULL || cs->shm == NULL) return NULL;
    return acx_shm_all_gather_ok(cs->shm, count, acx_dtype_size(dtype)) ? cs->shm : NULL;
}

static acx_status_t mpi_all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype) {
    ACX_CHECK(gather_check(comm, sendbuf, recvbuf, count, dtype, -1));
    acx_shm_t *shm = shm_for_gather(comm, count, dtype);
    if (shm != NULL) { /* in place: the segment leaves this rank's block as it is */
        acx_shm_op_t sop;
        acx_shm_all_gather_start(shm, &sop, sendbuf, recvbuf, count, acx_dtype_size(dtype), NULL);
        acx_shm_wait(shm, &sop, progress_all);
        return acx_shm_op_status(&sop); /* the ranks' arguments differed */
    }
    return gather_blocking(comm, sendbuf, recvbuf, count, dtype, -1);
}

static acx_status_t mpi_all_gather_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, acx_dtype_t dtype, acx_coll_req_t **req_p) {
    if (req_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "all-gather start: req_p is NULL");
    ACX_CHECK(gather_check(comm, sendbuf, recvbuf, count, dtype, -1));
    acx_shm_t *shm = shm_for_gather(comm, count, dtype);
    if (shm == NULL) return gather_start(comm, sendbuf, recvbuf, count, dtype, -1, req_p);
    acx_coll_req_t *req = NULL;
    ACX_CHECK(req_create(0, "all-gather request", &req));
    req->shm = shm; /* advanced by test and wait, and by every other op's */
    acx_shm_all_gather_start(shm, &req->shm_op, sendbuf, recvbuf, count, acx_dtype_size(dtype),
                             req);
    *req_p = req;
    return ACX_OK;
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
 * starts and test return at once and are not. A blocking collective first
 * moves this communicator's queued 16-bit all-reduces on to their
 * all-gathers (queue_drain, "requests" above), inside the bracket: it may
 * wait for their all-to-alls. */
static acx_status_t watched_all_reduce(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    acx_watch_enter("all_reduce");
    queue_drain(comm);
    acx_status_t st = mpi_all_reduce(comm, sendbuf, recvbuf, count, dtype, op);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_reduce_scatter(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           size_t count, acx_dtype_t dtype, acx_red_op_t op) {
    acx_watch_enter("reduce_scatter");
    queue_drain(comm);
    acx_status_t st = mpi_reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_broadcast(acx_comm_t *comm, void *buf, size_t count, acx_dtype_t dtype,
                                      int root) {
    acx_watch_enter("broadcast");
    queue_drain(comm);
    acx_status_t st = mpi_broadcast(comm, buf, count, dtype, root);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_all_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, acx_dtype_t dtype) {
    acx_watch_enter("all_gather");
    queue_drain(comm);
    acx_status_t st = mpi_all_gather(comm, sendbuf, recvbuf, count, dtype);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_gather(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype, int root) {
    acx_watch_enter("gather");
    queue_drain(comm);
    acx_status_t st = mpi_gather(comm, sendbuf, recvbuf, count, dtype, root);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_barrier(acx_comm_t *comm) {
    acx_watch_enter("barrier");
    queue_drain(comm);
    acx_status_t st = mpi_barrier(comm);
    acx_watch_exit();
    return st;
}

static acx_status_t watched_wait(acx_coll_req_t *req) {
    /* named after what it waits for: "collective all-reduce request #N" */
    acx_watch_enter(req != NULL && req->what != NULL ? req->what : "wait");
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

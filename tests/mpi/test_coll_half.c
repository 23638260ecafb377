/*
 * tests/mpi/test_coll_half.c — the MPI backend's SUM, AVG and PROD of
 * float16 and bfloat16 (collectives/mpi/coll_mpi.c): 2 bytes per element on
 * the wire, one rounding, the same bits on every rank.
 *
 *   values   rank r's element i is a deterministic function of (r, i, salt)
 *            spread over ~30 binades (SUM/AVG) or near 1 (PROD), so that
 *            float32 sums and products of 3-4 ranks are often inexact and
 *            their order shows. Expected, computed here: the float32 sum (or
 *            product) in rank order ((x0 + x1) + x2) + ..., rounded once to
 *            nearest even by this file's rint-based rounding (not half.h);
 *            AVG: that float32 sum divided by p in double, rounded once.
 *            Results must be EQUAL bit for bit. On 3+ ranks the reverse
 *            order gives other bits somewhere (checked, so an order other
 *            than rank order would fail).
 *   shapes   counts 0 (NULL buffers), 1, p-1, p, p+1, 2p+1, 1000, 4097:
 *            fewer elements than ranks, splits that are not even; in and
 *            out of place; blocking, start + test until done + wait, start
 *            + wait. Reduce-scatter likewise (counts 0, 1, 3, 1000).
 *   wire     an MPI profiling layer (the MPI_* functions below call PMPI_*)
 *            adds up, per collective acx calls, the bytes this rank sends to
 *            the other ranks: all-to-all: its counts to the others;
 *            all-gather: its own block x (p - 1); all-reduce: 2 (p-1)/p n
 *            (a ring's, the bandwidth-optimal amount); reduce-scatter
 *            block: (p - 1) n. A 16-bit all-reduce of N elements must use
 *            MPI_UINT16_T only and send, over all ranks, exactly
 *            2 (p-1) N x 2 bytes — half of the float32 all-reduce of the same
 *            N, counted the same way in the same run. A 16-bit
 *            reduce-scatter: (p-1) count x 2 bytes per rank. Staging through
 *            float32 (MPI_FLOAT on the wire) fails both checks.
 *   queue    non-blocking 16-bit all-reduces in flight together, tested in
 *            a rank-dependent order with a blocking all-reduce and a
 *            non-blocking broadcast between, waited in another order; and
 *            the waits one rank makes before a blocking collective or
 *            another request that the other ranks reach only after their
 *            own wait (legal MPI; the backend must not deadlock).
 *
 * Built twice: test_coll_half, and test_coll_half_chunked with the
 * backend's chunk limit at 7 elements (TEST_CHUNK_MAX), which cuts every
 * all-reduce into pieces with an uneven last one; there reduce-scatters
 * above the limit are refused (ACX_ERR_NOT_SUPPORTED), as documented.
 * Ranks agree on pass/fail; a watchdog turns a hang into a failure.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "tests/acx_test_mpi.h"

#ifndef TEST_CHUNK_MAX
#define TEST_CHUNK_MAX 0 /* the library's own limit (INT_MAX) */
#endif

static acx_comm_t *world;
static int rank_, size_;

/* ---- counting the bytes each rank sends (MPI profiling interface) ---- */

static int counting;
static double sent_bytes; /* to the other ranks, while counting */
static long calls, calls_not16;

static void note(MPI_Datatype t, double elems) {
    if (!counting) return;
    int sz = 0;
    PMPI_Type_size(t, &sz);
    sent_bytes += elems * sz;
    calls++;
    if (t != MPI_UINT16_T) calls_not16++;
}

static int comm_size(MPI_Comm c) {
    int p = 1;
    PMPI_Comm_size(c, &p);
    return p;
}

static double to_others_v(const int *n, MPI_Comm c) {
    int p = comm_size(c), me = 0;
    PMPI_Comm_rank(c, &me);
    double s = 0;
    for (int q = 0; q < p; q++)
        if (q != me) s += n[q];
    return s;
}

static double own_block_v(const void *s, int sn, const int *rn, MPI_Comm c) {
    int me = 0;
    PMPI_Comm_rank(c, &me);
    return (double)(s == MPI_IN_PLACE ? rn[me] : sn) * (comm_size(c) - 1);
}

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    int p = comm_size(c);
    note(t, 2.0 * (p - 1) / p * n);
    return PMPI_Allreduce(s, r, n, t, op, c);
}
int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                   MPI_Request *q) {
    int p = comm_size(c);
    note(t, 2.0 * (p - 1) / p * n);
    return PMPI_Iallreduce(s, r, n, t, op, c, q);
}
int MPI_Reduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    note(t, (double)n * (comm_size(c) - 1));
    return PMPI_Reduce_scatter_block(s, r, n, t, op, c);
}
int MPI_Ireduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                              MPI_Request *q) {
    note(t, (double)n * (comm_size(c) - 1));
    return PMPI_Ireduce_scatter_block(s, r, n, t, op, c, q);
}
int MPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                 MPI_Comm c) {
    note(st, (double)sn * (comm_size(c) - 1));
    return PMPI_Alltoall(s, sn, st, r, rn, rt, c);
}
int MPI_Ialltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                  MPI_Comm c, MPI_Request *q) {
    note(st, (double)sn * (comm_size(c) - 1));
    return PMPI_Ialltoall(s, sn, st, r, rn, rt, c, q);
}
int MPI_Alltoallv(const void *s, const int sn[], const int sd[], MPI_Datatype st, void *r,
                  const int rn[], const int rd[], MPI_Datatype rt, MPI_Comm c) {
    note(st, to_others_v(sn, c));
    return PMPI_Alltoallv(s, sn, sd, st, r, rn, rd, rt, c);
}
int MPI_Ialltoallv(const void *s, const int sn[], const int sd[], MPI_Datatype st, void *r,
                   const int rn[], const int rd[], MPI_Datatype rt, MPI_Comm c, MPI_Request *q) {
    note(st, to_others_v(sn, c));
    return PMPI_Ialltoallv(s, sn, sd, st, r, rn, rd, rt, c, q);
}
int MPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                  MPI_Comm c) {
    note(rt, (double)(s == MPI_IN_PLACE ? rn : sn) * (comm_size(c) - 1));
    return PMPI_Allgather(s, sn, st, r, rn, rt, c);
}
int MPI_Iallgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                   MPI_Comm c, MPI_Request *q) {
    note(rt, (double)(s == MPI_IN_PLACE ? rn : sn) * (comm_size(c) - 1));
    return PMPI_Iallgather(s, sn, st, r, rn, rt, c, q);
}
int MPI_Allgatherv(const void *s, int sn, MPI_Datatype st, void *r, const int rn[], const int d[],
                   MPI_Datatype rt, MPI_Comm c) {
    note(rt, own_block_v(s, sn, rn, c));
    return PMPI_Allgatherv(s, sn, st, r, rn, d, rt, c);
}
int MPI_Iallgatherv(const void *s, int sn, MPI_Datatype st, void *r, const int rn[], const int d[],
                    MPI_Datatype rt, MPI_Comm c, MPI_Request *q) {
    note(rt, own_block_v(s, sn, rn, c));
    return PMPI_Iallgatherv(s, sn, st, r, rn, d, rt, c, q);
}

/* ---- the reference: rounding by rint, float32 arithmetic in rank order ---- */

/* Finite x rounded to nearest even in a format with `mant` fraction bits,
 * smallest normal exponent emin and largest exponent emax; the bit pattern
 * (past the largest finite value: infinity). */
static uint16_t ref_round(double x, int mant, int emin, int emax) {
    int ebits = mant == 10 ? 5 : 8, bias = (1 << (ebits - 1)) - 1;
    uint16_t sign = signbit(x) ? 0x8000 : 0,
             inf = (uint16_t)(sign | (((1u << ebits) - 1u) << mant));
    double a = fabs(x);
    int e = a > 0 ? ilogb(a) : emin;
    if (e < emin) e = emin;
    double ulp = ldexp(1.0, e - mant), r = rint(a / ulp) * ulp; /* exact: ulp is 2^k */
    if (r >= ldexp(1.0, emax + 1)) return inf;
    if (r < ldexp(1.0, emin)) return (uint16_t)(sign | (uint16_t)(r / ldexp(1.0, emin - mant)));
    e = ilogb(r);
    uint32_t frac = (uint32_t)(r / ldexp(1.0, e - mant)) - (1u << mant);
    return (uint16_t)(sign | ((uint32_t)(e + bias) << mant) | frac);
}

static uint16_t round16(acx_dtype_t dt, double x) {
    return dt == ACX_DTYPE_FLOAT16 ? ref_round(x, 10, -14, 15) : ref_round(x, 7, -126, 127);
}

/* The value of a finite 16-bit pattern, from the format's definition. */
static double value16(acx_dtype_t dt, uint16_t h) {
    int mant = dt == ACX_DTYPE_FLOAT16 ? 10 : 7, ebits = mant == 10 ? 5 : 8;
    int bias = (1 << (ebits - 1)) - 1, e = (h >> mant) & ((1 << ebits) - 1);
    int m = h & ((1 << mant) - 1);
    double v = e == 0 ? ldexp((double)m, 1 - bias - mant)
                      : ldexp((double)((1 << mant) + m), e - bias - mant);
    return (h & 0x8000) ? -v : v;
}

/* Rank r's element i, before rounding to dt (input()). SUM/AVG: k 2^(j -
 * mant) with k < 2^(mant + 1), over 21 binades (float16, j in -14..6:
 * subnormals included) or 29 (bfloat16, j in -20..8) — exact in dt — so a
 * float32 sum of 3-4 of them often needs more than 24 bits. PROD: 1 + k
 * 2^-mant in [0.5, 1.5), signs mixed: a product of 4 needs ~30-44 bits. */
static double gen(acx_dtype_t dt, acx_red_op_t op, int r, size_t i, int salt) {
    uint32_t h = acx_test_hash3(r, i, salt);
    int f16 = dt == ACX_DTYPE_FLOAT16, mant = f16 ? 10 : 7;
    double sign = (h >> 31) ? -1.0 : 1.0;
    if (op == ACX_OP_PROD) {
        int k = (int)(h % (1u << mant)) - (1 << (mant - 1)); /* |1 + k 2^-mant| in (0.5, 1.5) */
        return sign * (1.0 + ldexp((double)k, -mant));
    }
    int j = f16 ? (int)((h >> 16) % 21u) - 14 : (int)((h >> 16) % 29u) - 20;
    int k = (int)(h % (1u << (mant + 1)));
    return sign * ldexp((double)k, j - mant);
}

static uint16_t input(acx_dtype_t dt, acx_red_op_t op, int r, size_t i, int salt) {
    return round16(dt, gen(dt, op, r, i, salt));
}

/* The expected result of element i: float32 accumulation over ranks in
 * rank order (reverse: in reverse order, for the order check). */
static uint16_t expected(acx_dtype_t dt, acx_red_op_t op, size_t i, int salt, int reverse) {
    float acc = 0;
    for (int k = 0; k < size_; k++) {
        int r = reverse ? size_ - 1 - k : k;
        float x = (float)value16(dt, input(dt, op, r, i, salt)); /* exact */
        acc = k == 0 ? x : op == ACX_OP_PROD ? acc * x : acc + x;
    }
    return round16(dt, op == ACX_OP_AVG ? (double)acc / size_ : (double)acc);
}

/* ---- cases ---- */

static const acx_dtype_t dts[2] = {ACX_DTYPE_BFLOAT16, ACX_DTYPE_FLOAT16};
static const acx_red_op_t ops[3] = {ACX_OP_SUM, ACX_OP_AVG, ACX_OP_PROD};
static const char *const op_names[3] = {"sum", "avg", "prod"};
enum mode { BLOCKING, NB_TEST, NB_WAIT, NUM_MODES };

static uint16_t *xmalloc16(size_t n) {
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    if (p == NULL) MPI_Abort(MPI_COMM_WORLD, 99);
    return p;
}

static acx_status_t run_all_reduce(int mode, const void *s, void *r, size_t n, acx_dtype_t dt,
                                   acx_red_op_t op) {
    if (mode == BLOCKING) return world->ops->all_reduce(world, s, r, n, dt, op);
    acx_coll_req_t *req;
    acx_status_t st = world->ops->all_reduce_start(world, s, r, n, dt, op, &req);
    if (st != ACX_OK) return st;
    for (int done = 0; mode == NB_TEST && !done;)
        if ((st = world->ops->test(req, &done)) != ACX_OK) break;
    acx_status_t w = world->ops->wait(req);
    return st != ACX_OK ? st : w;
}

static acx_status_t run_reduce_scatter(int mode, const void *s, void *r, size_t n, acx_dtype_t dt,
                                       acx_red_op_t op) {
    if (mode == BLOCKING) return world->ops->reduce_scatter(world, s, r, n, dt, op);
    acx_coll_req_t *req;
    acx_status_t st = world->ops->reduce_scatter_start(world, s, r, n, dt, op, &req);
    if (st != ACX_OK) return st;
    for (int done = 0; mode == NB_TEST && !done;)
        if ((st = world->ops->test(req, &done)) != ACX_OK) break;
    acx_status_t w = world->ops->wait(req);
    return st != ACX_OK ? st : w;
}

/* Every rank's total of `local`. */
static double sum_ranks(double local) {
    double s = 0;
    PMPI_Allreduce(&local, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return s;
}

static int test_all_reduce(void) {
    size_t p = (size_t)size_;
    const size_t counts[] = {0, 1, p - 1, p, p + 1, 2 * p + 1, 1000, 4097};
    int ncounts = (int)(sizeof counts / sizeof counts[0]);
    int failed = 0, salt = 0;
    long order_differs = 0;
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < 3; o++)
            for (int c = 0; c < ncounts; c++)
                for (int inplace = 0; inplace < 2; inplace++)
                    for (int mode = 0; mode < NUM_MODES; mode++) {
                        size_t n = counts[c];
                        acx_dtype_t dt = dts[d];
                        acx_red_op_t op = ops[o];
                        salt++;
                        uint16_t *x = n ? xmalloc16(n) : NULL, *y = n ? xmalloc16(n) : NULL;
                        for (size_t i = 0; i < n; i++) {
                            x[i] = input(dt, op, rank_, i, salt);
                            y[i] = 0x5555; /* overwritten */
                        }
                        uint16_t *out = inplace ? x : y;
                        counting = 1;
                        sent_bytes = 0;
                        calls = calls_not16 = 0;
                        acx_status_t st = run_all_reduce(mode, x, out, n, dt, op);
                        counting = 0;
                        int bad = 0;
                        if (st != ACX_OK) {
                            fprintf(stderr, "\n[r%d] all-reduce failed: %s\n", rank_,
                                    acx_last_error());
                            bad = 1;
                        }
                        for (size_t i = 0; i < n && !bad; i++) {
                            uint16_t want = expected(dt, op, i, salt, 0);
                            if (out[i] != want) {
                                fprintf(stderr,
                                        "\n[r%d] %s %s n=%zu %s mode %d: element %zu = 0x%04x, "
                                        "expected 0x%04x\n",
                                        rank_, acx_dtype_name(dt), op_names[o], n,
                                        inplace ? "in place" : "out of place", mode, i, out[i],
                                        want);
                                bad = 1;
                            }
                            order_differs +=
                                op == ACX_OP_SUM && want != expected(dt, op, i, salt, 1);
                        }
                        /* the wire: 16-bit only, 2 (p-1) N x 2 bytes over all ranks */
                        double total = sum_ranks(sent_bytes);
                        if (calls_not16 != 0 || total != 2.0 * (size_ - 1) * (double)n * 2) {
                            fprintf(stderr,
                                    "\n[r%d] %s %s n=%zu: %ld non-16-bit calls, %.0f bytes sent "
                                    "by all ranks, expected 0 and %.0f\n",
                                    rank_, acx_dtype_name(dt), op_names[o], n, calls_not16, total,
                                    2.0 * (size_ - 1) * (double)n * 2);
                            bad = 1;
                        }
                        free(x), free(y);
                        failed |= bad;
                    }
    if (size_ >= 3 && order_differs == 0) {
        fprintf(stderr,
                "\n[r%d] rank-order and reverse-order sums never differ: the values "
                "cannot tell the summation order\n",
                rank_);
        failed = 1;
    }
    return failed;
}

/* The same N as float32: the 16-bit all-reduce sends half the bytes. */
static int test_half_the_bytes(void) {
    const size_t n = TEST_CHUNK_MAX > 0 ? 1003 : 100003;
    float *f = malloc(n * sizeof *f);
    uint16_t *h = xmalloc16(n);
    CHECK(f != NULL);
    for (size_t i = 0; i < n; i++) {
        h[i] = input(ACX_DTYPE_BFLOAT16, ACX_OP_SUM, rank_, i, 7);
        f[i] = (float)value16(ACX_DTYPE_BFLOAT16, h[i]);
    }
    double bytes[2];
    for (int k = 0; k < 2; k++) {
        counting = 1;
        sent_bytes = 0;
        calls = calls_not16 = 0;
        acx_status_t st =
            k == 0 ? world->ops->all_reduce(world, f, f, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM)
                   : world->ops->all_reduce(world, h, h, n, ACX_DTYPE_BFLOAT16, ACX_OP_SUM);
        counting = 0;
        CHECK_OK(st);
        CHECK(calls > 0);
        bytes[k] = sum_ranks(sent_bytes);
    }
    if (rank_ == 0 && size_ > 1)
        printf(
            "\n  %zu elements on %d ranks: float32 %.0f bytes, bfloat16 %.0f bytes (ratio %.4f) ",
            n, size_, bytes[0], bytes[1], bytes[1] / bytes[0]);
    CHECK(fabs(bytes[1] - 0.5 * bytes[0]) <= 1e-9 * bytes[0]);
    CHECK(bytes[1] == 2.0 * (size_ - 1) * (double)n * 2);
    for (size_t i = 0; i < n; i++)
        if (h[i] != expected(ACX_DTYPE_BFLOAT16, ACX_OP_SUM, i, 7, 0)) {
            fprintf(stderr, "\n[r%d] element %zu = 0x%04x\n", rank_, i, h[i]);
            TEST_ERROR;
        }
    free(f), free(h);
    return 0;
error:
    free(f), free(h);
    return 1;
}

static int test_reduce_scatter(void) {
    const size_t counts[] = {0, 1, 3, 1000};
    int failed = 0, salt = 5000;
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < 3; o++)
            for (int c = 0; c < 4; c++)
                for (int inplace = 0; inplace < 2; inplace++)
                    for (int mode = 0; mode < NUM_MODES; mode++) {
                        size_t n = counts[c], total = n * (size_t)size_;
                        acx_dtype_t dt = dts[d];
                        acx_red_op_t op = ops[o];
                        salt++;
                        uint16_t *x = xmalloc16(total), *y = xmalloc16(n);
                        /* element i of rank r's block q is global element q*n + i */
                        for (size_t i = 0; i < total; i++)
                            x[i] = input(dt, op, rank_, i, salt);
                        uint16_t *out = inplace ? x + (size_t)rank_ * n : y;
                        counting = 1;
                        sent_bytes = 0;
                        calls = calls_not16 = 0;
                        acx_status_t st = run_reduce_scatter(mode, x, out, n, dt, op);
                        counting = 0;
                        int bad = 0;
                        if (TEST_CHUNK_MAX > 0 && n > (size_t)TEST_CHUNK_MAX) {
                            if (st != ACX_ERR_NOT_SUPPORTED) {
                                fprintf(stderr, "\n[r%d] reduce-scatter of %zu > chunk limit: %d\n",
                                        rank_, n, (int)st);
                                bad = 1;
                            }
                            free(x), free(y);
                            failed |= bad;
                            continue;
                        }
                        if (st != ACX_OK) {
                            fprintf(stderr, "\n[r%d] reduce-scatter failed: %s\n", rank_,
                                    acx_last_error());
                            bad = 1;
                        }
                        for (size_t i = 0; i < n && !bad; i++) {
                            uint16_t want = expected(dt, op, (size_t)rank_ * n + i, salt, 0);
                            if (out[i] != want) {
                                fprintf(stderr,
                                        "\n[r%d] reduce-scatter %s %s n=%zu %s mode %d: element "
                                        "%zu = 0x%04x, expected 0x%04x\n",
                                        rank_, acx_dtype_name(dt), op_names[o], n,
                                        inplace ? "in place" : "out of place", mode, i, out[i],
                                        want);
                                bad = 1;
                            }
                        }
                        if (calls_not16 != 0 || sent_bytes != (double)(size_ - 1) * (double)n * 2) {
                            fprintf(stderr,
                                    "\n[r%d] reduce-scatter n=%zu: %ld non-16-bit calls, %.0f "
                                    "bytes sent, expected 0 and %.0f\n",
                                    rank_, n, calls_not16, sent_bytes,
                                    (double)(size_ - 1) * (double)n * 2);
                            bad = 1;
                        }
                        free(x), free(y);
                        failed |= bad;
                    }
    return failed;
}

/* ---- several in flight: the all-gathers stay matched ---- */

#define NQ 5

static int check_result(const uint16_t *got, size_t n, acx_dtype_t dt, acx_red_op_t op, int salt,
                        const char *what) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != expected(dt, op, i, salt, 0)) {
            fprintf(stderr, "\n[r%d] %s: element %zu of %zu = 0x%04x, expected 0x%04x\n", rank_,
                    what, i, n, got[i], expected(dt, op, i, salt, 0));
            return 1;
        }
    return 0;
}

static int test_in_flight(void) {
    static const size_t n[NQ] = {3, 1000, 1, 4097, 65};
    static const acx_dtype_t dt[NQ] = {ACX_DTYPE_BFLOAT16, ACX_DTYPE_FLOAT16, ACX_DTYPE_BFLOAT16,
                                       ACX_DTYPE_BFLOAT16, ACX_DTYPE_FLOAT16};
    static const acx_red_op_t op[NQ] = {ACX_OP_SUM, ACX_OP_AVG, ACX_OP_PROD, ACX_OP_SUM,
                                        ACX_OP_SUM};
    uint16_t *buf[NQ], *mid = xmalloc16(300);
    acx_coll_req_t *req[NQ] = {0}, *bc = NULL;
    int failed = 0;
    for (int round = 0; round < 3; round++) {
        for (int q = 0; q < NQ; q++) {
            buf[q] = xmalloc16(n[q]);
            for (size_t i = 0; i < n[q]; i++)
                buf[q][i] = input(dt[q], op[q], rank_, i, 9000 + 10 * round + q);
            CHECK_OK(
                world->ops->all_reduce_start(world, buf[q], buf[q], n[q], dt[q], op[q], &req[q]));
            if (q == 2) { /* a blocking 16-bit all-reduce and a broadcast among them */
                for (size_t i = 0; i < 300; i++)
                    mid[i] = input(ACX_DTYPE_BFLOAT16, ACX_OP_AVG, rank_, i, 9500 + round);
                CHECK_OK(
                    world->ops->all_reduce(world, mid, mid, 300, ACX_DTYPE_BFLOAT16, ACX_OP_AVG));
                failed |= check_result(mid, 300, ACX_DTYPE_BFLOAT16, ACX_OP_AVG, 9500 + round,
                                       "blocking among non-blocking");
                CHECK_OK(world->ops->broadcast_start(world, mid, 300, ACX_DTYPE_BFLOAT16, size_ - 1,
                                                     &bc));
            }
        }
        /* test in a rank-dependent order (odd ranks: newest first), a few times */
        for (int t = 0; t < 3; t++)
            for (int k = 0; k < NQ; k++) {
                int q = rank_ % 2 ? NQ - 1 - k : k, done;
                CHECK_OK(world->ops->test(req[q], &done));
            }
        /* wait: round 0 newest first, round 1 from the middle, round 2 oldest first */
        for (int k = 0; k < NQ; k++) {
            int q = round == 0 ? NQ - 1 - k : round == 1 ? (k + rank_ + 2) % NQ : k;
            acx_status_t st = world->ops->wait(req[q]);
            req[q] = NULL;
            CHECK_OK(st);
        }
        CHECK_OK(world->ops->wait(bc));
        bc = NULL;
        for (int q = 0; q < NQ; q++) {
            char what[64];
            snprintf(what, sizeof what, "round %d, request %d", round, q);
            failed |= check_result(buf[q], n[q], dt[q], op[q], 9000 + 10 * round + q, what);
            free(buf[q]);
        }
    }
    free(mid);
    return failed;
error:
    for (int q = 0; q < NQ; q++)
        if (req[q] != NULL) world->ops->wait(req[q]);
    if (bc != NULL) world->ops->wait(bc);
    return 1;
}

/* Rank 0 waits for a 16-bit all-reduce where the other ranks wait only
 * after a blocking barrier (then: after another non-blocking collective
 * completes, which rank 0 starts before its wait and the others after
 * theirs). Both are legal MPI orders; rank 0 must not hold back the
 * all-gather the others need. */
static int test_asymmetric_waits(void) {
    const size_t n = 777;
    uint16_t *x = xmalloc16(n);
    acx_coll_req_t *req = NULL, *bar = NULL;
    for (int variant = 0; variant < 2; variant++) {
        int salt = 9900 + variant;
        for (size_t i = 0; i < n; i++)
            x[i] = input(ACX_DTYPE_BFLOAT16, ACX_OP_SUM, rank_, i, salt);
        CHECK_OK(
            world->ops->all_reduce_start(world, x, x, n, ACX_DTYPE_BFLOAT16, ACX_OP_SUM, &req));
        if (variant == 0) {
            if (rank_ == 0) {
                CHECK_OK(world->ops->barrier(world));
                CHECK_OK(world->ops->wait(req));
            } else {
                CHECK_OK(world->ops->wait(req));
                CHECK_OK(world->ops->barrier(world));
            }
        } else {
            if (rank_ == 0) {
                CHECK_OK(world->ops->barrier_start(world, &bar));
                CHECK_OK(world->ops->wait(bar));
                bar = NULL;
                CHECK_OK(world->ops->wait(req));
            } else {
                CHECK_OK(world->ops->wait(req));
                CHECK_OK(world->ops->barrier_start(world, &bar));
                CHECK_OK(world->ops->wait(bar));
                bar = NULL;
            }
        }
        req = NULL;
        CHECK(check_result(x, n, ACX_DTYPE_BFLOAT16, ACX_OP_SUM, salt, "asymmetric waits") == 0);
    }
    free(x);
    return 0;
error:
    if (req != NULL) world->ops->wait(req);
    if (bar != NULL) world->ops->wait(bar);
    free(x);
    return 1;
}

int main(int argc, char **argv) {
    /* The float32 side of "half the bytes" is MPI's wire; on one node it
     * would take the shared-memory path, which sends nothing through MPI. */
    setenv("ACX_SHM_DISABLE", "1", 1);
    acx_test_mpi_begin(&argc, &argv, 240, &rank_, &size_);
    if (acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &world) != ACX_OK) {
        fprintf(stderr, "[r%d] acx_comm_create: %s\n", rank_, acx_last_error());
        MPI_Abort(MPI_COMM_WORLD, 99);
    }
    if (rank_ == 0 && TEST_CHUNK_MAX > 0)
        printf("(the backend built with a chunk limit of %d elements)\n", TEST_CHUNK_MAX);
    int failed = 0;
    failed |=
        acx_test_run_case("16-bit all-reduce: rank-order f32 sums, 2-byte wire", test_all_reduce);
    failed |=
        acx_test_run_case("16-bit all-reduce: half the bytes of float32", test_half_the_bytes);
    failed |= acx_test_run_case("16-bit reduce-scatter: rank-order f32 sums, 2-byte wire",
                                test_reduce_scatter);
    failed |= acx_test_run_case("16-bit all-reduces in flight, tested and waited out of order",
                                test_in_flight);
    failed |= acx_test_run_case("a wait before a collective others reach after theirs",
                                test_asymmetric_waits);
    acx_comm_destroy(world);
    MPI_Finalize();
    return failed ? 1 : 0;
}

/*
 * tests/mpi/test_coll_full.c — every collective of the MPI backend
 * (collectives/coll.h) x dtype x op x blocking/non-blocking, in and out of
 * place, against results each rank computes on its own; 16-bit gradient
 * buckets; and the public wrappers (acx/collectives.h).
 *
 * Every rank's input is a deterministic function of (rank, index, salt), so
 * each rank can compute the expected result of any collective by looping
 * over all ranks' values in float64. The values are chosen so float64 sums
 * are exact, and for float16/bfloat16 so that the float32 accumulation is
 * exact too: the backend's result must then be, bit for bit, the exact sum
 * (or sum / size for AVG) rounded once to nearest even — the property the
 * backend claims. The rounding reference here is float64 arithmetic (rint
 * on a power-of-two grid), independent of base/half.h.
 *
 * Counts {0, 1, 3, world-1, 7, 1000, 4097}: empty, smaller than the world,
 * not multiples of anything. Modes: blocking; start + test until done +
 * wait; start + wait only (the completion work then happens in the wait).
 * Ranks agree on pass/fail with an MPI_LOR all-reduce per case; a watchdog
 * turns a hang into a failure. Run with mpirun -np 1..4.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/acx_test_mpi.h"
#include "collectives/bucket.h"
#include "collectives/coll.h"
#include "base/error.h"

static acx_comm_t *world;
static int rank_, size_;

static const acx_dtype_t dtypes[] = {ACX_DTYPE_FLOAT32,  ACX_DTYPE_FLOAT64, ACX_DTYPE_FLOAT16,
                                     ACX_DTYPE_BFLOAT16, ACX_DTYPE_INT32,   ACX_DTYPE_INT64};
#define NUM_DTYPES (int)(sizeof dtypes / sizeof dtypes[0])
static const acx_red_op_t ops[] = {ACX_OP_SUM, ACX_OP_AVG, ACX_OP_MAX, ACX_OP_MIN};
#define NUM_OPS (int)(sizeof ops / sizeof ops[0])
static size_t counts[] = {0, 1, 3, 0 /* world - 1, set in main */, 7, 1000, 4097};
#define NUM_COUNTS (int)(sizeof counts / sizeof counts[0])

enum mode { BLOCKING = 0, NB_TEST, NB_WAIT, NUM_MODES };
static const char *const mode_name[] = {"blocking", "start+test+wait", "start+wait"};

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "[r%d] out of memory (%zu bytes)\n", rank_, bytes);
        MPI_Abort(MPI_COMM_WORLD, 99);
    }
    return p;
}

/* ---- the rounding reference (float64 arithmetic, not half.h) ---- */

/* x rounded to nearest even in a binary format with `mant` fraction bits,
 * minimum normal exponent emin and overflow at 2^(emax + 1); the bit
 * pattern. x is not NaN. */
static uint16_t ref_round(double x, int mant, int emin, int emax) {
    int bias = -emin + 1, ebits = mant == 10 ? 5 : 8;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    uint16_t inf = (uint16_t)(sign | (((1u << ebits) - 1u) << mant));
    double a = fabs(x);
    if (isinf(a)) return inf;
    int e;
    (void)frexp(a, &e);
    int exp = e - 1 < emin ? emin : e - 1;
    double ulp = ldexp(1.0, exp - mant);
    double r = rint(a / ulp) * ulp;
    if (r >= ldexp(1.0, emax + 1)) return inf;
    if (r < ldexp(1.0, emin)) return (uint16_t)(sign | (uint16_t)(r / ldexp(1.0, emin - mant)));
    (void)frexp(r, &e);
    uint32_t frac = (uint32_t)(r / ldexp(1.0, e - 1 - mant)) - (1u << mant);
    return (uint16_t)(sign | ((uint32_t)(e - 1 + bias) << mant) | frac);
}

/* The value of a finite 16-bit pattern, from the format's definition. */
static double ref_value(uint16_t h, int mant, int emin) {
    int ebits = mant == 10 ? 5 : 8, bias = -emin + 1;
    int e = (h >> mant) & ((1 << ebits) - 1), m = h & ((1 << mant) - 1);
    double v =
        e == 0 ? ldexp((double)m, emin - mant) : ldexp((double)((1 << mant) + m), e - bias - mant);
    return (h & 0x8000) ? -v : v;
}

static uint16_t round16(acx_dtype_t dt, double x) {
    return dt == ACX_DTYPE_FLOAT16 ? ref_round(x, 10, -14, 15) : ref_round(x, 7, -126, 127);
}

static double value16(acx_dtype_t dt, uint16_t h) {
    return dt == ACX_DTYPE_FLOAT16 ? ref_value(h, 10, -14) : ref_value(h, 7, -126);
}

static int is_half(acx_dtype_t dt) { return dt == ACX_DTYPE_FLOAT16 || dt == ACX_DTYPE_BFLOAT16; }

/* ---- deterministic data ---- */

/*
 * Rank r's element i, exactly representable in dt:
 *   float32/float64  24-bit values in [-1, 1) (float64 sums exact)
 *   float16          k * 2^(j - 11), |k| < 2^11, j in -4..4: 11 significant
 *                    bits, subnormals included; a sum of 4 spans < 2^6 down
 *                    to 2^-15, 21 bits: exact in float32
 *   bfloat16         k * 2^(j - 8), |k| < 2^8, j in -4..4: 18-bit sums
 *   int32            [-1000, 1000];  int64: about +-1e12 (beyond int32)
 */
static double gen(acx_dtype_t dt, int rank, size_t i, int salt) {
    uint32_t h = acx_test_hash3(rank, i, salt);
    int j = (int)((h >> 20) % 9u) - 4;
    switch (dt) {
    case ACX_DTYPE_FLOAT16: return ldexp((double)((int)(h % 4095u) - 2047), j - 11);
    case ACX_DTYPE_BFLOAT16: return ldexp((double)((int)(h % 511u) - 255), j - 8);
    case ACX_DTYPE_INT32: return (double)((int)(h % 2001u) - 1000);
    case ACX_DTYPE_INT64: return (double)((int64_t)(h % 2000001u) - 1000000) * 1000003.0;
    default: return (double)((int32_t)(h >> 8) - (1 << 23)) / (double)(1 << 23);
    }
}

static void store(void *buf, acx_dtype_t dt, size_t i, double v) {
    switch (dt) {
    case ACX_DTYPE_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case ACX_DTYPE_FLOAT64: ((double *)buf)[i] = v; break;
    case ACX_DTYPE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ACX_DTYPE_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: ((uint16_t *)buf)[i] = round16(dt, v); break;
    }
}

static double load(const void *buf, acx_dtype_t dt, size_t i) {
    switch (dt) {
    case ACX_DTYPE_FLOAT32: return ((const float *)buf)[i];
    case ACX_DTYPE_FLOAT64: return ((const double *)buf)[i];
    case ACX_DTYPE_INT32: return ((const int32_t *)buf)[i];
    case ACX_DTYPE_INT64: return (double)((const int64_t *)buf)[i];
    default: return value16(dt, ((const uint16_t *)buf)[i]);
    }
}

/* buf [n] of dt = rank's elements first .. first + n - 1. */
static void fill(void *buf, acx_dtype_t dt, size_t n, int rank, size_t first, int salt) {
    for (size_t i = 0; i < n; i++)
        store(buf, dt, i, gen(dt, rank, first + i, salt));
}

/* ---- expected reductions ---- */

/*
 * want [n] and tol [n] for the reduction over ranks of elements first .. of
 * every rank. Sums are exact in float64. float32 in any order is within
 * (p-1) u sum|x| (Higham 4.2; u = 2^-24), allowed p u sum|x|; AVG adds one
 * rounding of the division. float16/bfloat16 are compared bit for bit with
 * round16(want) (tol unused); integers and MAX/MIN exactly.
 */
static void expect(acx_dtype_t dt, acx_red_op_t op, size_t n, size_t first, int salt, double *want,
                   double *tol) {
    double u = dt == ACX_DTYPE_FLOAT32 ? 0x1p-24 : dt == ACX_DTYPE_FLOAT64 ? 0x1p-53 : 0.0;
    for (size_t i = 0; i < n; i++) {
        double sum = 0, abs_sum = 0, mx = -INFINITY, mn = INFINITY;
        for (int r = 0; r < size_; r++) {
            double v = gen(dt, r, first + i, salt);
            sum += v;
            abs_sum += fabs(v);
            mx = v > mx ? v : mx;
            mn = v < mn ? v : mn;
        }
        switch (op) {
        case ACX_OP_SUM: want[i] = sum, tol[i] = size_ * u * abs_sum; break;
        case ACX_OP_AVG:
            want[i] = sum / size_;
            tol[i] = u * abs_sum + 2 * u * fabs(want[i]);
            break;
        case ACX_OP_MAX: want[i] = mx, tol[i] = 0; break;
        default: want[i] = mn, tol[i] = 0; break;
        }
    }
}

/* Elements of got [n] that miss want/tol (the first is printed). */
static long compare(const char *what, const void *got, acx_dtype_t dt, acx_red_op_t op, size_t n,
                    const double *want, const double *tol) {
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        int ok;
        if (is_half(dt))
            ok = ((const uint16_t *)got)[i] == round16(dt, want[i]);
        else
            ok = fabs(load(got, dt, i) - want[i]) <= tol[i];
        if (!ok && bad++ == 0)
            fprintf(stderr,
                    "\n[r%d] %s %s op %d n=%zu: element %zu = %.17g (bits 0x%04x), expected "
                    "%.17g\n",
                    rank_, what, acx_dtype_name(dt), (int)op, n, i, load(got, dt, i),
                    is_half(dt) ? ((const uint16_t *)got)[i] : 0u, want[i]);
    }
    return bad;
}

/* ---- running one collective in a mode ---- */

/* Complete a started request per mode: test until done then wait, or wait
 * only. A failed start leaves no request. */
static acx_status_t complete(acx_status_t st, acx_coll_req_t *req, enum mode mode) {
    if (st != ACX_OK) return st;
    if (mode == NB_TEST) {
        int done = 0;
        while (st == ACX_OK && !done)
            st = world->ops->test(req, &done);
        if (st == ACX_OK) st = world->ops->test(req, &done); /* done stays done */
        if (st == ACX_OK && !done) st = ACX_ERR_INTERNAL;
    }
    acx_status_t st2 = world->ops->wait(req);
    return st != ACX_OK ? st : st2;
}

static long report(acx_status_t st, const char *what, acx_dtype_t dt, size_t n, enum mode mode) {
    if (st == ACX_OK) return 0;
    fprintf(stderr, "\n[r%d] %s %s n=%zu (%s) failed: %s\n", rank_, what, acx_dtype_name(dt), n,
            mode_name[mode], acx_last_error());
    return 1;
}

/* ---- all-reduce ---- */

static long one_all_reduce(acx_dtype_t dt, acx_red_op_t op, size_t n, enum mode mode,
                           int in_place) {
    int salt = 11 + (int)dt * 97 + (int)op * 13 + (int)n;
    size_t es = acx_dtype_size(dt);
    char *send = xmalloc(n * es), *recv = in_place ? send : xmalloc(n * es);
    char *orig = xmalloc(n * es);
    double *want = xmalloc(n * sizeof *want), *tol = xmalloc(n * sizeof *tol);
    fill(send, dt, n, rank_, 0, salt);
    memcpy(orig, send, n * es);
    if (!in_place) memset(recv, 0x5a, n * es);
    expect(dt, op, n, 0, salt, want, tol);

    acx_status_t st;
    acx_coll_req_t *req = NULL;
    if (mode == BLOCKING) {
        st = world->ops->all_reduce(world, send, recv, n, dt, op);
    } else {
        st = world->ops->all_reduce_start(world, send, recv, n, dt, op, &req);
        st = complete(st, req, mode);
    }
    long bad = report(st, "all-reduce", dt, n, mode);
    if (st == ACX_OK) bad += compare("all-reduce", recv, dt, op, n, want, tol);
    if (!in_place && memcmp(send, orig, n * es) != 0) {
        fprintf(stderr, "\n[r%d] out-of-place all-reduce modified sendbuf\n", rank_);
        bad++;
    }
    free(want), free(tol), free(orig);
    if (!in_place) free(recv);
    free(send);
    return bad;
}

static int test_all_reduce(void) {
    long bad = 0;
    for (int d = 0; d < NUM_DTYPES; d++)
        for (int o = 0; o < NUM_OPS; o++) {
            acx_dtype_t dt = dtypes[d];
            if (ops[o] == ACX_OP_AVG && !is_half(dt) && dt != ACX_DTYPE_FLOAT32 &&
                dt != ACX_DTYPE_FLOAT64)
                continue; /* not supported: see test_invalid */
            for (int c = 0; c < NUM_COUNTS; c++)
                for (int m = 0; m < NUM_MODES; m++)
                    for (int ip = 0; ip < 2; ip++)
                        bad += one_all_reduce(dt, ops[o], counts[c], (enum mode)m, ip);
        }
    return bad != 0;
}

/* ---- reduce-scatter ---- */

static long one_reduce_scatter(acx_dtype_t dt, acx_red_op_t op, size_t n, enum mode mode,
                               int in_place) {
    int salt = 23 + (int)dt * 89 + (int)op * 17 + (int)n;
    size_t es = acx_dtype_size(dt), total = n * (size_t)size_;
    char *send = xmalloc(total * es), *orig = xmalloc(total * es);
    char *recv = in_place ? send + (size_t)rank_ * n * es : xmalloc(n * es);
    double *want = xmalloc(n * sizeof *want), *tol = xmalloc(n * sizeof *tol);
    fill(send, dt, total, rank_, 0, salt);
    memcpy(orig, send, total * es);
    if (!in_place) memset(recv, 0xa5, n * es);
    /* rank_'s result reduces block rank_ = elements rank_ * n .. of everyone */
    expect(dt, op, n, (size_t)rank_ * n, salt, want, tol);

    acx_status_t st;
    acx_coll_req_t *req = NULL;
    if (mode == BLOCKING) {
        st = world->ops->reduce_scatter(world, send, recv, n, dt, op);
    } else {
        st = world->ops->reduce_scatter_start(world, send, recv, n, dt, op, &req);
        st = complete(st, req, mode);
    }
    long bad = report(st, "reduce-scatter", dt, n, mode);
    if (st == ACX_OK) bad += compare("reduce-scatter", recv, dt, op, n, want, tol);
    if (!in_place && memcmp(send, orig, total * es) != 0) {
        fprintf(stderr, "\n[r%d] out-of-place reduce-scatter modified sendbuf\n", rank_);
        bad++;
    }
    free(want), free(tol), free(orig);
    if (!in_place) free(recv);
    free(send);
    return bad;
}

static int test_reduce_scatter(void) {
    long bad = 0;
    for (int d = 0; d < NUM_DTYPES; d++)
        for (int o = 0; o < NUM_OPS; o++) {
            acx_dtype_t dt = dtypes[d];
            if (ops[o] == ACX_OP_AVG && !is_half(dt) && dt != ACX_DTYPE_FLOAT32 &&
                dt != ACX_DTYPE_FLOAT64)
                continue;
            for (int c = 0; c < NUM_COUNTS; c++)
                for (int m = 0; m < NUM_MODES; m++)
                    for (int ip = 0; ip < 2; ip++)
                        bad += one_reduce_scatter(dt, ops[o], counts[c], (enum mode)m, ip);
        }
    return bad != 0;
}

/* ---- all-gather, gather, broadcast (bit-exact moves) ---- */

/* recv [size x n] must hold rank r's elements 0..n-1 at r * n. */
static long check_gathered(const char *what, const char *recv, acx_dtype_t dt, size_t n, int salt) {
    size_t es = acx_dtype_size(dt);
    char *want = xmalloc(n * es);
    long bad = 0;
    for (int r = 0; r < size_ && bad == 0; r++) {
        fill(want, dt, n, r, 0, salt);
        if (memcmp(recv + (size_t)r * n * es, want, n * es) != 0) {
            fprintf(stderr, "\n[r%d] %s %s n=%zu: block of rank %d is wrong\n", rank_, what,
                    acx_dtype_name(dt), n, r);
            bad++;
        }
    }
    free(want);
    return bad;
}

static long one_all_gather(acx_dtype_t dt, size_t n, enum mode mode, int in_place) {
    int salt = 31 + (int)dt * 7 + (int)n;
    size_t es = acx_dtype_size(dt), total = n * (size_t)size_;
    char *recv = xmalloc(total * es);
    char *send = in_place ? recv + (size_t)rank_ * n * es : xmalloc(n * es);
    memset(recv, 0x3c, total * es);
    fill(send, dt, n, rank_, 0, salt);
    acx_status_t st;
    acx_coll_req_t *req = NULL;
    if (mode == BLOCKING) {
        st = world->ops->all_gather(world, send, recv, n, dt);
    } else {
        st = world->ops->all_gather_start(world, send, recv, n, dt, &req);
        st = complete(st, req, mode);
    }
    long bad = report(st, "all-gather", dt, n, mode);
    if (st == ACX_OK) bad += check_gathered("all-gather", recv, dt, n, salt);
    if (!in_place) free(send);
    free(recv);
    return bad;
}

static int test_all_gather(void) {
    long bad = 0;
    for (int d = 0; d < NUM_DTYPES; d++)
        for (int c = 0; c < NUM_COUNTS; c++)
            for (int m = 0; m < NUM_MODES; m++)
                for (int ip = 0; ip < 2; ip++)
                    bad += one_all_gather(dtypes[d], counts[c], (enum mode)m, ip);
    return bad != 0;
}

/* Gather to root; recv is NULL on the other ranks; in place on root. */
static long one_gather(acx_dtype_t dt, size_t n, int root, enum mode mode, int in_place) {
    int salt = 41 + (int)dt * 5 + (int)n + root * 1000;
    size_t es = acx_dtype_size(dt), total = n * (size_t)size_;
    int am_root = rank_ == root;
    char *recv = am_root ? xmalloc(total * es) : NULL;
    char *send = am_root && in_place ? recv + (size_t)root * n * es : xmalloc(n * es);
    if (am_root) memset(recv, 0x3c, total * es);
    fill(send, dt, n, rank_, 0, salt);
    acx_status_t st;
    acx_coll_req_t *req = NULL;
    if (mode == BLOCKING) {
        st = world->ops->gather(world, send, recv, n, dt, root);
    } else {
        st = world->ops->gather_start(world, send, recv, n, dt, root, &req);
        st = complete(st, req, mode);
    }
    long bad = report(st, "gather", dt, n, mode);
    if (st == ACX_OK && am_root) bad += check_gathered("gather", recv, dt, n, salt);
    if (!(am_root && in_place)) free(send);
    free(recv);
    return bad;
}

static int test_gather(void) {
    long bad = 0;
    for (int d = 0; d < NUM_DTYPES; d++)
        for (int c = 0; c < NUM_COUNTS; c++)
            for (int m = 0; m < NUM_MODES; m++)
                for (int root = 0; root < size_; root++)
                    bad += one_gather(dtypes[d], counts[c], root, (enum mode)m, (c + root) % 2);
    return bad != 0;
}

static long one_broadcast(acx_dtype_t dt, size_t n, int root, enum mode mode) {
    int salt = 53 + (int)dt * 3 + (int)n + root * 100;
    size_t es = acx_dtype_size(dt);
    char *buf = xmalloc(n * es), *want = xmalloc(n * es);
    fill(want, dt, n, root, 0, salt);
    if (rank_ == root)
        memcpy(buf, want, n * es);
    else
        memset(buf, 0xa5, n * es);
    acx_status_t st;
    acx_coll_req_t *req = NULL;
    if (mode == BLOCKING) {
        st = world->ops->broadcast(world, buf, n, dt, root);
    } else {
        st = world->ops->broadcast_start(world, buf, n, dt, root, &req);
        st = complete(st, req, mode);
    }
    long bad = report(st, "broadcast", dt, n, mode);
    if (st == ACX_OK && memcmp(buf, want, n * es) != 0) {
        fprintf(stderr, "\n[r%d] broadcast %s n=%zu root %d: wrong data\n", rank_,
                acx_dtype_name(dt), n, root);
        bad++;
    }
    free(buf), free(want);
    return bad;
}

static int test_broadcast(void) {
    long bad = 0;
    for (int d = 0; d < NUM_DTYPES; d++)
        for (int c = 0; c < NUM_COUNTS; c++)
            for (int m = 0; m < NUM_MODES; m++)
                for (int root = 0; root < size_; root++)
                    bad += one_broadcast(dtypes[d], counts[c], root, (enum mode)m);
    return bad != 0;
}

/* ---- barrier ---- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last rank enters 0.2 s late. The others must not leave the blocking
 * barrier before it entered, and the non-blocking one must test as not done
 * while it is away. (A barrier that returned at once would fail both.) */
static int test_barrier(void) {
    const double late = 0.2;
    int last = rank_ == size_ - 1;
    acx_coll_req_t *req = NULL;
    CHECK_OK(world->ops->barrier(world)); /* line everyone up */
    double t0 = now();
    if (last) nanosleep(&(struct timespec){0, 200000000}, NULL);
    CHECK_OK(world->ops->barrier(world));
    if (!last) CHECK(now() - t0 >= 0.5 * late);

    CHECK_OK(world->ops->barrier(world));
    if (last) nanosleep(&(struct timespec){0, 200000000}, NULL);
    CHECK_OK(world->ops->barrier_start(world, &req));
    if (!last) {
        int done = 1;
        CHECK_OK(world->ops->test(req, &done));
        CHECK(done == 0);
    }
    CHECK_OK(complete(ACX_OK, req, NB_TEST));
    req = NULL;
    CHECK_OK(world->ops->barrier_start(world, &req));
    CHECK_OK(complete(ACX_OK, req, NB_WAIT));
    return 0;
error:
    return 1;
}

/* ---- several requests in flight ---- */

/* Four different non-blocking collectives started back to back (two of
 * them staged through float32) and completed in reverse order: each
 * request keeps its own buffers and completion work. */
static int test_in_flight(void) {
    enum { N = 1001 };
    const size_t total = (size_t)N * (size_t)size_;
    uint16_t *ar = xmalloc(N * 2), *rs_in = xmalloc(total * 2), *rs_out = xmalloc(N * 2);
    double *ag_in = xmalloc(N * 8), *ag_out = xmalloc(total * 8);
    int32_t *bc = xmalloc(N * 4);
    double *want = xmalloc(N * sizeof *want), *tol = xmalloc(N * sizeof *tol);
    acx_coll_req_t *req[4] = {NULL, NULL, NULL, NULL};
    int bad = 0;
    fill(ar, ACX_DTYPE_BFLOAT16, N, rank_, 0, 901);
    fill(rs_in, ACX_DTYPE_FLOAT16, total, rank_, 0, 902);
    fill(ag_in, ACX_DTYPE_FLOAT64, N, rank_, 0, 903);
    fill(bc, ACX_DTYPE_INT32, N, size_ - 1, 0, 904);
    CHECK_OK(
        world->ops->all_reduce_start(world, ar, ar, N, ACX_DTYPE_BFLOAT16, ACX_OP_AVG, &req[0]));
    CHECK_OK(world->ops->reduce_scatter_start(world, rs_in, rs_out, N, ACX_DTYPE_FLOAT16,
                                              ACX_OP_SUM, &req[1]));
    CHECK_OK(world->ops->all_gather_start(world, ag_in, ag_out, N, ACX_DTYPE_FLOAT64, &req[2]));
    CHECK_OK(world->ops->broadcast_start(world, bc, N, ACX_DTYPE_INT32, size_ - 1, &req[3]));
    for (int k = 3; k >= 0; k--) {
        acx_status_t st = world->ops->wait(req[k]);
        req[k] = NULL;
        CHECK_OK(st);
    }
    expect(ACX_DTYPE_BFLOAT16, ACX_OP_AVG, N, 0, 901, want, tol);
    bad += compare("in-flight all-reduce", ar, ACX_DTYPE_BFLOAT16, ACX_OP_AVG, N, want, tol) != 0;
    expect(ACX_DTYPE_FLOAT16, ACX_OP_SUM, N, (size_t)rank_ * N, 902, want, tol);
    bad += compare("in-flight reduce-scatter", rs_out, ACX_DTYPE_FLOAT16, ACX_OP_SUM, N, want,
                   tol) != 0;
    bad += check_gathered("in-flight all-gather", (char *)ag_out, ACX_DTYPE_FLOAT64, N, 903) != 0;
    for (int i = 0; i < N; i++)
        bad += bc[i] != (int32_t)gen(ACX_DTYPE_INT32, size_ - 1, (size_t)i, 904);
    CHECK(bad == 0);
    free(ar), free(rs_in), free(rs_out), free(ag_in), free(ag_out), free(bc), free(want), free(tol);
    return 0;
error:
    for (int k = 0; k < 4; k++)
        if (req[k] != NULL) world->ops->wait(req[k]);
    free(ar), free(rs_in), free(rs_out), free(ag_in), free(ag_out), free(bc), free(want), free(tol);
    return 1;
}

/* ---- 16-bit semantics the generators above do not reach ---- */

/* MAX/MIN of 16-bit floats: NaN propagates, -0 < +0, infinities order. Rank
 * r contributes pattern[(r + k) % 4] at element k, so every element sees
 * a different mix. */
static int test_half_specials(void) {
    static const uint16_t f16[][4] = {
        {0x7e00, 0x3c00, 0xfc00, 0x0001}, /* NaN wins max and min */
        {0x8000, 0x0000, 0x8000, 0x0000}, /* -0 < +0 */
        {0xfc00, 0x7c00, 0xbc00, 0x0400}, /* -inf .. +inf */
        {0x8001, 0x0001, 0x83ff, 0x03ff}, /* subnormals */
    };
    static const uint16_t bf16[][4] = {
        {0x7fc0, 0x3f80, 0xff80, 0x0001},
        {0x8000, 0x0000, 0x8000, 0x0000},
        {0xff80, 0x7f80, 0xbf80, 0x0080},
        {0x8001, 0x0001, 0x807f, 0x007f},
    };
    for (int bf = 0; bf < 2; bf++) {
        acx_dtype_t dt = bf ? ACX_DTYPE_BFLOAT16 : ACX_DTYPE_FLOAT16;
        const uint16_t(*pat)[4] = bf ? bf16 : f16;
        uint16_t nan = bf ? 0x7fc0 : 0x7e00;
        for (int o = 0; o < 2; o++) {
            acx_red_op_t op = o ? ACX_OP_MIN : ACX_OP_MAX;
            uint16_t x[4], want[4];
            for (int k = 0; k < 4; k++) {
                x[k] = pat[k][(rank_ + k) % 4];
                int have_nan = 0, have_best = 0;
                double best = 0;
                uint16_t best_bits = 0;
                for (int r = 0; r < size_; r++) {
                    uint16_t h = pat[k][(r + k) % 4];
                    if (h == nan) {
                        have_nan = 1;
                        continue;
                    }
                    double v = h == 0x7c00 || h == 0x7f80   ? INFINITY
                               : h == 0xfc00 || h == 0xff80 ? -INFINITY
                                                            : value16(dt, h);
                    /* -0 counts below +0 */
                    int better = o ? (v < best || (v == best && (h & 0x8000)))
                                   : (v > best || (v == best && !(h & 0x8000)));
                    if (!have_best || better) best = v, best_bits = h, have_best = 1;
                }
                want[k] = have_nan ? nan : best_bits;
            }
            CHECK_OK(world->ops->all_reduce(world, x, x, 4, dt, op));
            for (int k = 0; k < 4; k++)
                if (x[k] != want[k]) {
                    fprintf(stderr, "\n[r%d] %s %s element %d = 0x%04x, expected 0x%04x\n", rank_,
                            acx_dtype_name(dt), o ? "min" : "max", k, x[k], want[k]);
                    TEST_ERROR;
                }
        }
    }
    /* PROD, staged like SUM: 2^size exactly; SUM overflowing float16 is inf */
    uint16_t two = 0x4000, big = 0x7bff; /* 2.0, 65504 */
    CHECK_OK(world->ops->all_reduce(world, &two, &two, 1, ACX_DTYPE_FLOAT16, ACX_OP_PROD));
    CHECK(two == (uint16_t)(0x3c00 + (size_ << 10)));
    CHECK_OK(world->ops->all_reduce(world, &big, &big, 1, ACX_DTYPE_FLOAT16, ACX_OP_SUM));
    CHECK(big == (size_ == 1 ? 0x7bff : 0x7c00));
    return 0;
error:
    return 1;
}

/* ---- 16-bit (and other) gradient buckets ---- */

/* A bucket gradient: gen() for most dtypes; for 16-bit ones k * 2^-8 with
 * |k| < 2^8 (exact in both formats), so that after the prescale (>= 1/4)
 * every term is a multiple of 2^-20 below 1 and a float32 sum of 4 is exact. */
static double bucket_grad(acx_dtype_t dt, int rank, size_t i, int salt) {
    if (!is_half(dt)) return gen(dt, rank, i, salt);
    return ldexp((double)((int)(acx_test_hash3(rank, i, salt) % 511u) - 255), -8);
}

/*
 * Buckets of each float dtype and int32 over 3 units: a step scales by
 * prescale 1/size (for 16-bit dtypes the product is exact in float64 and
 * rounded once) and sums. The float32 sums of the scaled 16-bit terms are
 * exact, so the result is bit for bit round16(sum of round16(g * s)).
 */
static int one_bucket_dtype(acx_dtype_t dt) {
    enum { TOTAL = 3000 };
    static const size_t seg_counts[5] = {7, 1000, 993, 500, 500};
    static const int seg_units[5] = {2, 2, 1, 0, 0};
    acx_bucket_segment_t segs[5];
    size_t off = 0, es = acx_dtype_size(dt);
    for (int i = 0; i < 5; i++) {
        segs[i] =
            (acx_bucket_segment_t){.offset = off, .count = seg_counts[i], .unit = seg_units[i]};
        off += seg_counts[i];
    }
    int integer = dt == ACX_DTYPE_INT32;
    float s = integer ? 1.0f : 1.0f / (float)size_;
    char *flat = xmalloc(TOTAL * es);
    acx_buckets_t *b = NULL;
    long bad = 0;
    int salt = 70 + (int)dt;
    for (size_t i = 0; i < TOTAL; i++)
        store(flat, dt, i, bucket_grad(dt, rank_, i, salt));
    CHECK_OK(acx_buckets_create(world, flat, dt, TOTAL, 3, 5, segs, 1024, &b));
    CHECK(acx_buckets_count(b) >= 3);
    for (int u = 2; u >= 0; u--)
        CHECK_OK(acx_buckets_unit_ready(b, u, s));
    CHECK_OK(acx_buckets_wait_all(b));
    for (size_t i = 0; i < TOTAL; i++) {
        double sum = 0, abs_sum = 0;
        for (int r = 0; r < size_; r++) {
            double g = bucket_grad(dt, r, i, salt);
            double scaled = is_half(dt)               ? value16(dt, round16(dt, g * (double)s))
                            : dt == ACX_DTYPE_FLOAT32 ? (double)(float)(g * (double)s)
                                                      : g * (double)s;
            sum += scaled;
            abs_sum += fabs(scaled);
        }
        int ok = is_half(dt) ? ((uint16_t *)flat)[i] == round16(dt, sum)
                             : fabs(load(flat, dt, i) - sum) <= size_ * 0x1p-24 * abs_sum;
        if (!ok && bad++ == 0)
            fprintf(stderr, "\n[r%d] %s bucket element %zu = %.17g, expected %.17g\n", rank_,
                    acx_dtype_name(dt), i, load(flat, dt, i), sum);
    }
    CHECK(bad == 0);
    if (integer) { /* integers take no prescale: refused before any communication */
        CHECK_STATUS(acx_buckets_unit_ready(b, 2, 0.5f), ACX_ERR_INVALID_ARG, "prescale");
        acx_buckets_reset(b);
    }
    acx_buckets_destroy(b);
    free(flat);
    return 0;
error:
    acx_buckets_destroy(b);
    free(flat);
    return 1;
}

static int test_buckets(void) {
    static const acx_dtype_t dts[] = {ACX_DTYPE_BFLOAT16, ACX_DTYPE_FLOAT16, ACX_DTYPE_FLOAT64,
                                      ACX_DTYPE_FLOAT32, ACX_DTYPE_INT32};
    int bad = 0;
    for (int k = 0; k < 5; k++)
        bad |= one_bucket_dtype(dts[k]);
    return bad;
}

/* ---- invalid and unsupported ---- */

static int test_invalid(void) {
    int64_t iv[8] = {0};
    uint16_t hv[8] = {0};
    acx_coll_req_t *req = NULL;
    CHECK_STATUS(world->ops->all_reduce(world, iv, iv, 4, ACX_DTYPE_INT64, ACX_OP_AVG),
                 ACX_ERR_NOT_SUPPORTED, "int64");
    CHECK_STATUS(world->ops->reduce_scatter(world, iv, iv, 1, ACX_DTYPE_INT32, ACX_OP_AVG),
                 ACX_ERR_NOT_SUPPORTED, "int32");
    CHECK_STATUS(
        world->ops->reduce_scatter_start(world, iv, iv, 1, ACX_DTYPE_INT32, ACX_OP_AVG, &req),
        ACX_ERR_NOT_SUPPORTED, "avg");
    CHECK(req == NULL);
    CHECK_STATUS(world->ops->all_reduce(world, hv, hv, 4, ACX_DTYPE_FLOAT16, (acx_red_op_t)9),
                 ACX_ERR_INVALID_ARG, "op 9");
    /* recvbuf overlapping sendbuf anywhere but this rank's block */
    if (size_ > 1) {
        char *wrong = (char *)hv + (rank_ == 0 ? 2 : 0); /* block 0 is not mine on rank > 0 */
        CHECK_STATUS(world->ops->reduce_scatter(world, hv, wrong, 1, ACX_DTYPE_FLOAT16, ACX_OP_SUM),
                     ACX_ERR_INVALID_ARG, "overlaps");
    }
    CHECK_STATUS(world->ops->gather(world, hv, hv, 1, ACX_DTYPE_FLOAT16, size_),
                 ACX_ERR_INVALID_ARG, "root");
    CHECK_STATUS(world->ops->gather_start(world, hv, hv, 1, ACX_DTYPE_FLOAT16, -1, &req),
                 ACX_ERR_INVALID_ARG, "root");
    CHECK_STATUS(world->ops->broadcast_start(world, hv, 1, ACX_DTYPE_FLOAT16, size_, &req),
                 ACX_ERR_INVALID_ARG, "root");
    CHECK_STATUS(world->ops->all_gather(world, NULL, hv, 1, ACX_DTYPE_FLOAT16), ACX_ERR_INVALID_ARG,
                 "sendbuf");
    CHECK_STATUS(world->ops->barrier_start(world, NULL), ACX_ERR_INVALID_ARG, "req_p");
    CHECK(req == NULL);
    return 0;
error:
    return 1;
}

/* ---- the public wrappers ---- */

/* acx/collectives.h over the accelerator's world: shapes and results of
 * each wrapper once (the backend cases above cover the combinations). */
static int test_public(void) {
    acx_accelerator_t *acc = NULL;
    acx_request_t *req = NULL;
    enum { N = 5 };
    const size_t total = (size_t)N * (size_t)size_;
    uint16_t *rs_in = xmalloc(total * 2), rs_out[N], *all = xmalloc(total * 2), mine[N];
    double want[N], tol[N];
    CHECK_OK(acx_init(NULL, NULL, NULL, &acc));

    fill(rs_in, ACX_DTYPE_BFLOAT16, total, rank_, 0, 1234);
    CHECK_OK(acx_reduce_scatter(acc, rs_in, rs_out, N, ACX_DTYPE_BFLOAT16, ACX_OP_SUM));
    expect(ACX_DTYPE_BFLOAT16, ACX_OP_SUM, N, (size_t)rank_ * N, 1234, want, tol);
    CHECK(compare("acx_reduce_scatter", rs_out, ACX_DTYPE_BFLOAT16, ACX_OP_SUM, N, want, tol) == 0);
    memset(rs_out, 0, sizeof rs_out);
    CHECK_OK(acx_reduce_scatter_async(acc, rs_in, rs_out, N, ACX_DTYPE_BFLOAT16, ACX_OP_SUM, &req));
    int done = 0;
    while (!done)
        CHECK_OK(acx_request_test(req, &done));
    CHECK_OK(acx_request_wait(req));
    req = NULL;
    CHECK(compare("acx_reduce_scatter_async", rs_out, ACX_DTYPE_BFLOAT16, ACX_OP_SUM, N, want,
                  tol) == 0);

    fill(mine, ACX_DTYPE_FLOAT16, N, rank_, 0, 77);
    CHECK_OK(acx_gather(acc, mine, rank_ == 0 ? all : NULL, N, ACX_DTYPE_FLOAT16, 0));
    if (rank_ == 0) CHECK(check_gathered("acx_gather", (char *)all, ACX_DTYPE_FLOAT16, N, 77) == 0);
    memset(all, 0, total * 2);
    CHECK_OK(acx_gather_async(acc, mine, all, N, ACX_DTYPE_FLOAT16, size_ - 1, &req));
    CHECK_OK(acx_request_wait(req));
    req = NULL;
    if (rank_ == size_ - 1)
        CHECK(check_gathered("acx_gather_async", (char *)all, ACX_DTYPE_FLOAT16, N, 77) == 0);
    memset(all, 0, total * 2);
    CHECK_OK(acx_all_gather_async(acc, mine, all, N, ACX_DTYPE_FLOAT16, &req));
    CHECK_OK(acx_request_wait(req));
    req = NULL;
    CHECK(check_gathered("acx_all_gather_async", (char *)all, ACX_DTYPE_FLOAT16, N, 77) == 0);

    int64_t v = rank_ == size_ - 1 ? 987654321012345 : -1;
    CHECK_OK(acx_broadcast_async(acc, &v, 1, ACX_DTYPE_INT64, size_ - 1, &req));
    CHECK_OK(acx_request_wait(req));
    req = NULL;
    CHECK(v == 987654321012345);
    CHECK_OK(acx_barrier(acc));
    CHECK_OK(acx_barrier_async(acc, &req));
    CHECK_OK(acx_request_wait(req));
    req = NULL;

    CHECK_STATUS(acx_reduce_scatter(acc, rs_in, rs_out, N, ACX_DTYPE_INT32, ACX_OP_AVG),
                 ACX_ERR_NOT_SUPPORTED, "avg");
    CHECK_STATUS(acx_gather(acc, mine, all, N, ACX_DTYPE_FLOAT16, size_), ACX_ERR_INVALID_ARG,
                 "root");
    CHECK_STATUS(acx_broadcast_async(acc, &v, 1, ACX_DTYPE_INT64, 0, NULL), ACX_ERR_INVALID_ARG,
                 "req_p");
    CHECK_STATUS(acx_request_test(NULL, &done), ACX_ERR_INVALID_ARG, "req");
    CHECK_OK(acx_finalize(acc));
    free(rs_in), free(all);
    return 0;
error:
    if (req != NULL) acx_request_wait(req);
    if (acc != NULL) acx_finalize(acc);
    free(rs_in), free(all);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 150, &rank_, &size_);
    counts[3] = (size_t)size_ - 1;
    if (acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &world) != ACX_OK) {
        fprintf(stderr, "[r%d] acx_comm_create: %s\n", rank_, acx_last_error());
        MPI_Abort(MPI_COMM_WORLD, 99);
    }

    int failed = 0;
    failed |= acx_test_run_case("all-reduce: 6 dtypes x sum/avg/max/min x 3 modes x in/out",
                                test_all_reduce);
    failed |= acx_test_run_case("reduce-scatter: 6 dtypes x sum/avg/max/min x 3 modes x in/out",
                                test_reduce_scatter);
    failed |=
        acx_test_run_case("all-gather: 6 dtypes x 3 modes x in/out of place", test_all_gather);
    failed |= acx_test_run_case("gather to every root: 6 dtypes x 3 modes", test_gather);
    failed |= acx_test_run_case("broadcast from every root: 6 dtypes x 3 modes", test_broadcast);
    failed |=
        acx_test_run_case("barrier: blocking waits, non-blocking tests not done", test_barrier);
    failed |= acx_test_run_case("four requests in flight, completed in reverse", test_in_flight);
    failed |= acx_test_run_case("16-bit max/min specials (NaN, -0, inf), prod, overflow",
                                test_half_specials);
    failed |=
        acx_test_run_case("gradient buckets of bf16/f16/f64/f32/i32 with prescale", test_buckets);
    failed |= acx_test_run_case("unsupported ops and invalid arguments", test_invalid);
    failed |=
        acx_test_run_case("public wrappers (acx_reduce_scatter, acx_gather, ...)", test_public);

    acx_comm_destroy(world);
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}

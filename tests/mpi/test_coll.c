/*
 * tests/mpi/test_coll.c — the MPI collective backend (collectives/coll.h)
 * against values computed independently on every rank.
 *
 * Every rank's data is a deterministic function of (rank, index, salt), so
 * each rank can compute the expected reduction itself by looping over all
 * ranks' generator values in double; the backend is then compared with that.
 * Covers all-reduce (sum/avg/max/min; float32, float64, int32; blocking and
 * non-blocking; in and out of place; 0 to 1<<20 elements), broadcast from
 * every root, all-gather, status agreement, unsupported cases, backend
 * selection and communicator split, and the NCCL test double
 * (acx_coll_nccl_emul_ops) on emulated device buffers. Run with mpirun
 * -np 1..4.
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "device/ops.h"
#include "tests/acx_test_mpi.h"
#include "collectives/coll.h"
#include "base/error.h"

static acx_comm_t *world;
static int rank_, size_;

/* ---- deterministic data ---- */

/* A value in [-1, 1) with 24 significant bits: exact in float and double, so
 * the only float error is the reduction's own. */
static double gen_real(int rank, size_t i, int salt) {
    int32_t v = (int32_t)(acx_test_hash3(rank, i, salt) >> 8) - (1 << 23);
    return (double)v / (double)(1 << 23);
}

static int32_t gen_int(int rank, size_t i, int salt) {
    return (int32_t)(acx_test_hash3(rank, i, salt) % 2001u) - 1000;
}

/* Fill buf [n] of dtype with rank's data. Reals for float types, integers
 * for int32, raw bit patterns for the rest (moved, never reduced). */
static void fill(void *buf, acx_dtype_t dt, size_t n, int rank, int salt) {
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case ACX_DTYPE_FLOAT32: ((float *)buf)[i] = (float)gen_real(rank, i, salt); break;
        case ACX_DTYPE_FLOAT64: ((double *)buf)[i] = gen_real(rank, i, salt); break;
        case ACX_DTYPE_INT32: ((int32_t *)buf)[i] = gen_int(rank, i, salt); break;
        case ACX_DTYPE_INT64:
            ((int64_t *)buf)[i] = (int64_t)(((uint64_t)acx_test_hash3(rank, i, salt) << 32) |
                                            acx_test_hash3(rank, i, ~salt));
            break;
        default: ((uint16_t *)buf)[i] = (uint16_t)acx_test_hash3(rank, i, salt); break;
        }
    }
}

static double gen_value(acx_dtype_t dt, int rank, size_t i, int salt) {
    return dt == ACX_DTYPE_INT32 ? (double)gen_int(rank, i, salt) : gen_real(rank, i, salt);
}

static double load(const void *buf, acx_dtype_t dt, size_t i) {
    switch (dt) {
    case ACX_DTYPE_FLOAT32: return ((const float *)buf)[i];
    case ACX_DTYPE_FLOAT64: return ((const double *)buf)[i];
    default: return ((const int32_t *)buf)[i];
    }
}

/* ---- all-reduce ---- */

static const size_t sizes[] = {0, 1, 7, 1000, 1u << 20};
#define NUM_SIZES (sizeof sizes / sizeof sizes[0])

/*
 * Expected result of reducing every rank's generator values, want [n], and
 * the allowed error, tol [n]. Sums: exact in double (at most 4 terms of 24
 * bits each). A float32 sum of n terms in any order is off by at most
 * (n-1) u sum|x_r| (u = 2^-24; Higham, Accuracy and Stability of Numerical
 * Algorithms, 4.2); we allow n u sum|x_r|. AVG divides that by n and adds
 * one rounding of the division (u |mean|, doubled). float64 uses u = 2^-53
 * (its sums are exact anyway); int32 and max/min must match exactly.
 */
static void expect(acx_dtype_t dt, acx_red_op_t op, size_t n, int salt, double *want, double *tol) {
    double u = dt == ACX_DTYPE_FLOAT32 ? 0x1p-24 : dt == ACX_DTYPE_FLOAT64 ? 0x1p-53 : 0.0;
    for (size_t i = 0; i < n; i++) {
        double sum = 0, abs_sum = 0, mx = -INFINITY, mn = INFINITY;
        for (int r = 0; r < size_; r++) {
            double v = gen_value(dt, r, i, salt);
            sum += v;
            abs_sum += fabs(v);
            mx = v > mx ? v : mx;
            mn = v < mn ? v : mn;
        }
        switch (op) {
        case ACX_OP_SUM:
            want[i] = sum;
            tol[i] = size_ * u * abs_sum;
            break;
        case ACX_OP_AVG:
            want[i] = sum / size_;
            tol[i] = u * abs_sum + 2 * u * fabs(want[i]);
            break;
        case ACX_OP_MAX: want[i] = mx, tol[i] = 0; break;
        default: want[i] = mn, tol[i] = 0; break;
        }
    }
}

/* Elements of recv [n] outside want +- tol (the first one is printed). */
static long compare(const void *recv, acx_dtype_t dt, acx_red_op_t op, size_t n, const double *want,
                    const double *tol) {
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        double got = load(recv, dt, i);
        if (!(fabs(got - want[i]) <= tol[i])) {
            if (bad == 0)
                fprintf(stderr,
                        "\n[r%d] %s op %d n=%zu: element %zu = %.17g, expected %.17g (tol %g)\n",
                        rank_, acx_dtype_name(dt), (int)op, n, i, got, want[i], tol[i]);
            bad++;
        }
    }
    return bad;
}

/* One all-reduce of n elements in the given mode, checked against want/tol;
 * returns mismatches (or 1 when a call failed, with the message printed).
 * Every rank makes the same collective calls whatever the local outcome, so
 * a wrong value never desynchronizes the ranks. */
static long one_all_reduce(acx_dtype_t dt, acx_red_op_t op, size_t n, int salt, int nonblocking,
                           int in_place, const double *want, const double *tol) {
    size_t es = acx_dtype_size(dt);
    long bad = 1;
    void *send = malloc(n * es + 1), *recv = in_place ? send : malloc(n * es + 1);
    void *orig = malloc(n * es + 1);
    if (!send || !recv || !orig) goto out;
    fill(send, dt, n, rank_, salt);
    memcpy(orig, send, n * es);
    if (!in_place) memset(recv, 0x5a, n * es);

    acx_status_t st;
    if (!nonblocking) {
        st = world->ops->all_reduce(world, send, recv, n, dt, op);
    } else {
        acx_coll_req_t *req = NULL;
        st = world->ops->all_reduce_start(world, send, recv, n, dt, op, &req);
        int done = 0;
        while (st == ACX_OK && !done)
            st = world->ops->test(req, &done);
        if (st == ACX_OK) st = world->ops->test(req, &done); /* done stays done */
        if (st == ACX_OK && !done) st = ACX_ERR_INTERNAL;
        if (req != NULL) {
            acx_status_t st2 = world->ops->wait(req);
            if (st == ACX_OK) st = st2;
        }
    }
    if (st != ACX_OK) {
        fprintf(stderr, "\n[r%d] all-reduce %s n=%zu failed: %s\n", rank_, acx_dtype_name(dt), n,
                acx_last_error());
        goto out;
    }
    bad = compare(recv, dt, op, n, want, tol);
    if (!in_place && memcmp(send, orig, n * es) != 0) {
        fprintf(stderr, "\n[r%d] out-of-place all-reduce modified sendbuf\n", rank_);
        bad++;
    }
out:
    free(orig);
    if (recv != send) free(recv);
    free(send);
    return bad;
}

/* Every size in the four modes (blocking or not, in place or not). */
static int all_reduce_cases(acx_dtype_t dt, acx_red_op_t op) {
    long bad = 0;
    for (size_t s = 0; s < NUM_SIZES; s++) {
        size_t n = sizes[s];
        int salt = 1 + (int)dt * 97 + (int)op * 13 + (int)n;
        double *want = malloc(n * sizeof *want + 1), *tol = malloc(n * sizeof *tol + 1);
        if (want == NULL || tol == NULL) return 1;
        expect(dt, op, n, salt, want, tol);
        for (int nb = 0; nb < 2; nb++)
            for (int ip = 0; ip < 2; ip++)
                bad += one_all_reduce(dt, op, n, salt, nb, ip, want, tol);
        free(want);
        free(tol);
    }
    return bad != 0;
}

static int test_f32_sum(void) { return all_reduce_cases(ACX_DTYPE_FLOAT32, ACX_OP_SUM); }
static int test_f32_avg(void) { return all_reduce_cases(ACX_DTYPE_FLOAT32, ACX_OP_AVG); }
static int test_f32_max(void) { return all_reduce_cases(ACX_DTYPE_FLOAT32, ACX_OP_MAX); }
static int test_f32_min(void) { return all_reduce_cases(ACX_DTYPE_FLOAT32, ACX_OP_MIN); }
static int test_f64_sum(void) { return all_reduce_cases(ACX_DTYPE_FLOAT64, ACX_OP_SUM); }
static int test_f64_avg(void) { return all_reduce_cases(ACX_DTYPE_FLOAT64, ACX_OP_AVG); }
static int test_f64_max(void) { return all_reduce_cases(ACX_DTYPE_FLOAT64, ACX_OP_MAX); }
static int test_f64_min(void) { return all_reduce_cases(ACX_DTYPE_FLOAT64, ACX_OP_MIN); }
static int test_i32_sum(void) { return all_reduce_cases(ACX_DTYPE_INT32, ACX_OP_SUM); }
static int test_i32_max(void) { return all_reduce_cases(ACX_DTYPE_INT32, ACX_OP_MAX); }
static int test_i32_min(void) { return all_reduce_cases(ACX_DTYPE_INT32, ACX_OP_MIN); }

/* The AVG division happens in the wait when the request completed unseen
 * (no test call before it). */
static int test_avg_wait_only(void) {
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x);
    acx_coll_req_t *req = NULL;
    CHECK(x != NULL);
    fill(x, ACX_DTYPE_FLOAT32, N, rank_, 777);
    CHECK_OK(world->ops->all_reduce_start(world, x, x, N, ACX_DTYPE_FLOAT32, ACX_OP_AVG, &req));
    CHECK_OK(world->ops->wait(req));
    double want[N], tol[N];
    expect(ACX_DTYPE_FLOAT32, ACX_OP_AVG, N, 777, want, tol);
    CHECK(compare(x, ACX_DTYPE_FLOAT32, ACX_OP_AVG, N, want, tol) == 0);
    free(x);
    return 0;
error:
    free(x);
    return 1;
}

/* ---- unsupported and invalid ---- */

static int test_unsupported(void) {
    int32_t iv[4] = {1, 2, 3, 4};
    uint16_t hv[4] = {0};
    acx_coll_req_t *req = NULL;
    CHECK_STATUS(world->ops->all_reduce(world, iv, iv, 4, ACX_DTYPE_INT32, ACX_OP_AVG),
                 ACX_ERR_NOT_SUPPORTED, "int32");
    CHECK_STATUS(world->ops->all_reduce_start(world, iv, iv, 4, ACX_DTYPE_INT32, ACX_OP_AVG, &req),
                 ACX_ERR_NOT_SUPPORTED, "int32");
    CHECK(req == NULL); /* output argument untouched on failure */
    /* float16/bfloat16 reductions work now (tests/mpi/test_coll_full.c);
     * an op outside acx_red_op_t is still refused for them */
    CHECK_STATUS(world->ops->all_reduce(world, hv, hv, 4, ACX_DTYPE_BFLOAT16, (acx_red_op_t)7),
                 ACX_ERR_INVALID_ARG, "op 7");
    CHECK_STATUS(world->ops->all_reduce(world, iv, iv, 4, (acx_dtype_t)42, ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "dtype 42");
    CHECK_STATUS(world->ops->all_reduce(world, NULL, iv, 4, ACX_DTYPE_INT32, ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "sendbuf");
    CHECK_STATUS(world->ops->broadcast(world, iv, 4, ACX_DTYPE_INT32, size_), ACX_ERR_INVALID_ARG,
                 "root");
    CHECK(acx_mpi_datatype(ACX_DTYPE_BFLOAT16) == MPI_DATATYPE_NULL);
    CHECK(acx_mpi_datatype(ACX_DTYPE_FLOAT32) == MPI_FLOAT);
    CHECK(acx_mpi_op(ACX_OP_AVG) == MPI_OP_NULL);
    CHECK(acx_mpi_op(ACX_OP_SUM) == MPI_SUM);
    return 0;
error:
    return 1;
}

/* ---- broadcast, all-gather ---- */

static int test_broadcast(void) {
    static const acx_dtype_t dts[] = {ACX_DTYPE_FLOAT32, ACX_DTYPE_INT64, ACX_DTYPE_BFLOAT16};
    static const size_t ns[] = {0, 7, 1u << 20};
    int bad = 0;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 3; k++)
            for (int root = 0; root < size_; root++) {
                size_t n = ns[k], es = acx_dtype_size(dts[d]);
                int salt = 31 * root + d + (int)k;
                char *buf = malloc(n * es + 1), *want = malloc(n * es + 1);
                if (!buf || !want) return 1;
                fill(want, dts[d], n, root, salt);
                if (rank_ == root)
                    memcpy(buf, want, n * es);
                else
                    memset(buf, 0xa5, n * es);
                acx_status_t st = world->ops->broadcast(world, buf, n, dts[d], root);
                if (st != ACX_OK || memcmp(buf, want, n * es) != 0) {
                    fprintf(stderr, "\n[r%d] broadcast %s n=%zu root %d: %s\n", rank_,
                            acx_dtype_name(dts[d]), n, root,
                            st != ACX_OK ? acx_last_error() : "wrong data");
                    bad = 1;
                }
                free(buf);
                free(want);
            }
    return bad;
}

static int test_all_gather(void) {
    static const acx_dtype_t dts[] = {ACX_DTYPE_FLOAT32, ACX_DTYPE_INT32, ACX_DTYPE_FLOAT16};
    static const size_t ns[] = {0, 1, 7, 1000, 1u << 18};
    int bad = 0;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 5; k++) {
            size_t n = ns[k], es = acx_dtype_size(dts[d]), total = n * es * (size_t)size_;
            int salt = 500 + d * 10 + k;
            char *send = malloc(n * es + 1), *recv = malloc(total + 1), *want = malloc(total + 1);
            if (!send || !recv || !want) return 1;
            fill(send, dts[d], n, rank_, salt);
            for (int r = 0; r < size_; r++)
                fill(want + (size_t)r * n * es, dts[d], n, r, salt);
            memset(recv, 0x3c, total);
            acx_status_t st = world->ops->all_gather(world, send, recv, n, dts[d]);
            if (st != ACX_OK || memcmp(recv, want, total) != 0) {
                fprintf(stderr, "\n[r%d] all-gather %s n=%zu: %s\n", rank_, acx_dtype_name(dts[d]),
                        n, st != ACX_OK ? acx_last_error() : "wrong data");
                bad = 1;
            }
            free(send);
            free(recv);
            free(want);
        }
    return bad;
}

static int test_barrier(void) {
    CHECK_OK(world->ops->barrier(world));
    return 0;
error:
    return 1;
}

/* ---- status agreement ---- */

static int test_agree_ok(void) {
    acx_error_set_raw(ACX_OK, "untouched");
    CHECK_OK(acx_coll_agree(world, ACX_OK));
    CHECK(strcmp(acx_last_error(), "untouched") == 0);
    return 0;
error:
    return 1;
}

/* The last rank fails: everyone returns its status and its message. */
static int test_agree_one(void) {
    char want[256];
    acx_status_t local = ACX_OK;
    if (rank_ == size_ - 1) {
        char own[64];
        snprintf(own, sizeof own, "custom failure on world rank %d", rank_);
        local = acx_error_set_raw(ACX_ERR_IO, own);
    } else {
        acx_error_set_raw(ACX_OK, "stale message that must be replaced");
    }
    snprintf(want, sizeof want, "rank %d: custom failure on world rank %d", size_ - 1, size_ - 1);
    CHECK_STATUS(acx_coll_agree(world, local), ACX_ERR_IO, "rank ");
    if (strcmp(acx_last_error(), want) != 0) {
        fprintf(stderr, "\n[r%d] last error '%s', expected '%s'\n", rank_, acx_last_error(), want);
        TEST_ERROR;
    }
    /* agreeing on an agreed error again (a caller's agreement around a
     * callee's) names the rank once, not "rank R: rank R: ..." */
    local = rank_ == size_ - 1 ? ACX_ERR_IO : ACX_OK;
    CHECK_STATUS(acx_coll_agree(world, local), ACX_ERR_IO, "rank ");
    if (strcmp(acx_last_error(), want) != 0) {
        fprintf(stderr, "\n[r%d] re-agreed error '%s', expected '%s'\n", rank_, acx_last_error(),
                want);
        TEST_ERROR;
    }
    return 0;
error:
    return 1;
}

/* Ranks size/2 .. size-1 fail with different statuses: the lowest wins. */
static int test_agree_lowest(void) {
    int lowest = size_ / 2;
    acx_status_t st_of[2] = {ACX_ERR_FORMAT, ACX_ERR_TIMEOUT};
    acx_status_t local = ACX_OK;
    if (rank_ >= lowest) {
        char own[64];
        snprintf(own, sizeof own, "failure number %d", rank_);
        local = acx_error_set_raw(st_of[rank_ % 2], own);
    }
    char want[128];
    snprintf(want, sizeof want, "rank %d: failure number %d", lowest, lowest);
    CHECK_STATUS(acx_coll_agree(world, local), st_of[lowest % 2], "rank ");
    if (strcmp(acx_last_error(), want) != 0) {
        fprintf(stderr, "\n[r%d] last error '%s', expected '%s'\n", rank_, acx_last_error(), want);
        TEST_ERROR;
    }
    return 0;
error:
    return 1;
}

/* ---- selection and split ---- */

static int test_select(void) {
    const acx_coll_ops_t *ops = NULL;
    CHECK_OK(acx_coll_select(ACX_BACKEND_MPI, ACX_DEVICE_STATE_AUTO, &ops));
    CHECK(ops == &acx_coll_mpi_ops && strcmp(ops->name, "mpi") == 0);
    ops = NULL;
    CHECK_OK(acx_coll_select(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_AUTO, &ops));
    CHECK(ops == &acx_coll_mpi_ops);
    ops = NULL;
    if (acx_device_count(NULL, 0) == 0) { /* with a GPU (and NCCL) the selection succeeds */
        CHECK_STATUS(acx_coll_select(ACX_BACKEND_NCCL, ACX_DEVICE_STATE_CUDA, &ops),
                     ACX_ERR_NOT_SUPPORTED, "backend: mpi");
        CHECK(strstr(acx_last_error(), "NCCL backend is not available") != NULL);
        CHECK(ops == NULL);
        /* auto with device_state cuda: MPI when NCCL is not usable */
        CHECK_OK(acx_coll_select(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_CUDA, &ops));
        CHECK(ops == &acx_coll_mpi_ops);
        ops = NULL;
    }
    /* the NCCL test double: backend nccl with the emulated device only, in
     * every build */
    CHECK_OK(acx_coll_select(ACX_BACKEND_NCCL, ACX_DEVICE_STATE_EMULATED, &ops));
    CHECK(ops == &acx_coll_nccl_emul_ops && ops->device_memory && ops->emulated &&
          strcmp(ops->name, "nccl-emulated") == 0);
    CHECK_OK(acx_coll_select(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_EMULATED, &ops));
    CHECK(ops == &acx_coll_mpi_ops);
    CHECK_STATUS(acx_coll_select((acx_backend_kind_t)7, ACX_DEVICE_STATE_AUTO, &ops),
                 ACX_ERR_INVALID_ARG, "7");
    return 0;
error:
    return 1;
}

/* Split by parity (key = world rank): the sub-communicator holds the ranks
 * of my parity in increasing order, and reduces only among them. */
static int test_split(void) {
    acx_comm_t *sub = NULL;
    int parity = rank_ % 2, members = (size_ - parity + 1) / 2;
    CHECK_OK(acx_comm_split(world, parity, rank_, &sub));
    CHECK(sub != NULL);
    CHECK(sub->size == members);
    CHECK(sub->rank == rank_ / 2);
    CHECK(sub->ops == world->ops);
    int32_t mine = rank_, sum = -1, *all = malloc((size_t)members * sizeof *all);
    CHECK(all != NULL);
    CHECK_OK(sub->ops->all_reduce(sub, &mine, &sum, 1, ACX_DTYPE_INT32, ACX_OP_SUM));
    CHECK_OK(sub->ops->all_gather(sub, &mine, all, 1, ACX_DTYPE_INT32));
    int32_t want = 0;
    for (int r = parity; r < size_; r += 2)
        want += r;
    CHECK(sum == want);
    for (int k = 0; k < members; k++)
        CHECK(all[k] == parity + 2 * k);
    free(all);
    acx_comm_destroy(sub);
    return 0;
error:
    acx_comm_destroy(sub);
    return 1;
}

/* ---- the NCCL test double ---- */

/* x [n] int32 on the emulated device from host values (to_host reads back). */
static acx_status_t dev_put(const acx_devops_t *d, void *dev, const int32_t *host, size_t n) {
    return d->to_device(dev, host, n * sizeof *host, NULL);
}

/*
 * acx_coll_nccl_emul_ops on emulated device buffers (rank r's block element
 * i is (r + 1) * (i + 1), sums by hand): blocking and non-blocking
 * all-reduce, in-place reduce-scatter and all-gather, broadcast from the
 * last rank, gather to rank 0 with recvbuf NULL elsewhere, a split
 * communicator, barrier; then what it refuses before moving anything, on
 * every rank alike: a host sendbuf or recvbuf (ACX_ERR_INVALID_ARG "is host
 * memory"), avg of int32 (ACX_ERR_NOT_SUPPORTED, NCCL's rule), a
 * reduce-scatter whose buffers overlap but not in place, the MPI table
 * given a communicator of the double.
 */
static int test_nccl_double(void) {
    enum { N = 6 };
    const acx_devops_t *d = &acx_devops_emulated;
    const size_t S = (size_t)size_;
    acx_comm_t *c = NULL, *sub = NULL;
    void *x = NULL, *big = NULL;
    int32_t h[N], *hb = malloc(S * N * sizeof *hb);
    acx_coll_req_t *req = NULL;
    CHECK(hb != NULL);
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_nccl_emul_ops, &c));
    CHECK_OK(d->alloc(N * sizeof(int32_t), "x", &x));
    CHECK_OK(d->alloc(S * N * sizeof(int32_t), "big", &big));
    const int32_t tri = (int32_t)(S * (S + 1) / 2); /* sum over ranks of (r + 1) */

    for (int i = 0; i < N; i++)
        h[i] = (rank_ + 1) * (i + 1);
    CHECK_OK(dev_put(d, x, h, N));
    CHECK_OK(c->ops->all_reduce(c, x, x, N, ACX_DTYPE_INT32, ACX_OP_SUM));
    CHECK_OK(d->to_host(h, x, sizeof h, NULL));
    for (int i = 0; i < N; i++)
        CHECK(h[i] == tri * (i + 1));

    for (int i = 0; i < N; i++)
        h[i] = (rank_ + 1) * (i + 1);
    CHECK_OK(dev_put(d, x, h, N));
    CHECK_OK(c->ops->all_reduce_start(c, x, x, N, ACX_DTYPE_INT32, ACX_OP_MAX, &req));
    CHECK_OK(c->ops->wait(req));
    req = NULL;
    CHECK_OK(d->to_host(h, x, sizeof h, NULL));
    for (int i = 0; i < N; i++)
        CHECK(h[i] == (int32_t)S * (i + 1));

    /* reduce-scatter in place: block r of big sums (q + 1) * (r * N + i + 1) */
    for (size_t k = 0; k < S * N; k++)
        hb[k] = (rank_ + 1) * (int32_t)(k + 1);
    CHECK_OK(dev_put(d, big, hb, S * N));
    void *mine = (char *)big + (size_t)rank_ * N * sizeof(int32_t);
    CHECK_OK(c->ops->reduce_scatter(c, big, mine, N, ACX_DTYPE_INT32, ACX_OP_SUM));
    CHECK_OK(d->to_host(h, mine, sizeof h, NULL));
    for (int i = 0; i < N; i++)
        CHECK(h[i] == tri * (rank_ * N + i + 1));

    /* all-gather in place: block q is rank q's (q + 1) * (i + 1) */
    for (int i = 0; i < N; i++)
        h[i] = (rank_ + 1) * (i + 1);
    CHECK_OK(dev_put(d, mine, h, N));
    CHECK_OK(c->ops->all_gather(c, mine, big, N, ACX_DTYPE_INT32));
    CHECK_OK(d->to_host(hb, big, S * N * sizeof *hb, NULL));
    for (size_t k = 0; k < S * N; k++)
        CHECK(hb[k] == (int32_t)(k / N + 1) * (int32_t)(k % N + 1));

    /* broadcast from the last rank */
    for (int i = 0; i < N; i++)
        h[i] = rank_ == size_ - 1 ? 7 * (i + 1) : -1;
    CHECK_OK(dev_put(d, x, h, N));
    CHECK_OK(c->ops->broadcast(c, x, N, ACX_DTYPE_INT32, size_ - 1));
    CHECK_OK(d->to_host(h, x, sizeof h, NULL));
    for (int i = 0; i < N; i++)
        CHECK(h[i] == 7 * (i + 1));

    /* gather to 0; recvbuf is not looked at elsewhere */
    for (int i = 0; i < N; i++)
        h[i] = (rank_ + 1) * (i + 1);
    CHECK_OK(dev_put(d, x, h, N));
    CHECK_OK(c->ops->gather(c, x, rank_ == 0 ? big : NULL, N, ACX_DTYPE_INT32, 0));
    if (rank_ == 0) {
        CHECK_OK(d->to_host(hb, big, S * N * sizeof *hb, NULL));
        for (size_t k = 0; k < S * N; k++)
            CHECK(hb[k] == (int32_t)(k / N + 1) * (int32_t)(k % N + 1));
    }

    /* a split communicator is the double's too */
    CHECK_OK(acx_comm_split(c, rank_ % 2, rank_, &sub));
    CHECK(sub->ops == &acx_coll_nccl_emul_ops);
    for (int i = 0; i < N; i++)
        h[i] = 1;
    CHECK_OK(dev_put(d, x, h, N));
    CHECK_OK(sub->ops->all_reduce(sub, x, x, N, ACX_DTYPE_INT32, ACX_OP_SUM));
    CHECK_OK(d->to_host(h, x, sizeof h, NULL));
    CHECK(h[0] == sub->size && h[N - 1] == sub->size);
    CHECK_OK(c->ops->barrier(c));

    /* refusals (local, the same on every rank: nobody enters a collective) */
    CHECK_STATUS(c->ops->all_reduce(c, h, x, N, ACX_DTYPE_INT32, ACX_OP_SUM), ACX_ERR_INVALID_ARG,
                 "all-reduce of 6 elements: sendbuf");
    CHECK(strstr(acx_last_error(), "is host memory: the NCCL backend would fault on it") != NULL);
    CHECK_STATUS(c->ops->all_gather_start(c, x, hb, N, ACX_DTYPE_INT32, &req), ACX_ERR_INVALID_ARG,
                 "recvbuf");
    CHECK_STATUS(c->ops->broadcast(c, h, N, ACX_DTYPE_INT32, 0), ACX_ERR_INVALID_ARG,
                 "is host memory");
    CHECK_STATUS(c->ops->all_reduce(c, x, x, N, ACX_DTYPE_INT32, ACX_OP_AVG), ACX_ERR_NOT_SUPPORTED,
                 "avg needs a float dtype");
    /* refused by the double's NCCL rules, not only later by the MPI backend */
    CHECK(strstr(acx_last_error(), "coll_nccl_args.c") != NULL);
    CHECK_STATUS(c->ops->reduce_scatter(c, big, (char *)big + sizeof(int32_t), N, ACX_DTYPE_INT32,
                                        ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "overlap but not in place");
    CHECK_STATUS(acx_coll_mpi_ops.all_reduce(c, x, x, N, ACX_DTYPE_INT32, ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "nccl-emulated backend");
    acx_comm_destroy(sub);
    acx_comm_destroy(c);
    d->free(x);
    d->free(big);
    free(hb);
    return 0;
error:
    acx_comm_destroy(sub);
    acx_comm_destroy(c);
    d->free(x);
    d->free(big);
    free(hb);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 120, &rank_, &size_);
    if (acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &world) != ACX_OK) {
        fprintf(stderr, "[r%d] acx_comm_create: %s\n", rank_, acx_last_error());
        MPI_Abort(MPI_COMM_WORLD, 99);
    }
    if (world->rank != rank_ || world->size != size_ || world->mpi == MPI_COMM_WORLD) {
        fprintf(stderr, "[r%d] acx_comm_create: wrong rank/size or not a duplicate\n", rank_);
        MPI_Abort(MPI_COMM_WORLD, 99);
    }

    int failed = 0;
    failed |=
        acx_test_run_case("all-reduce float32 sum (blocking/async, in/out of place)", test_f32_sum);
    failed |= acx_test_run_case("all-reduce float32 avg", test_f32_avg);
    failed |= acx_test_run_case("all-reduce float32 max", test_f32_max);
    failed |= acx_test_run_case("all-reduce float32 min", test_f32_min);
    failed |= acx_test_run_case("all-reduce float64 sum", test_f64_sum);
    failed |= acx_test_run_case("all-reduce float64 avg", test_f64_avg);
    failed |= acx_test_run_case("all-reduce float64 max", test_f64_max);
    failed |= acx_test_run_case("all-reduce float64 min", test_f64_min);
    failed |= acx_test_run_case("all-reduce int32 sum", test_i32_sum);
    failed |= acx_test_run_case("all-reduce int32 max", test_i32_max);
    failed |= acx_test_run_case("all-reduce int32 min", test_i32_min);
    failed |= acx_test_run_case("async avg divides in wait without a test", test_avg_wait_only);
    failed |= acx_test_run_case("unsupported dtypes/ops and invalid arguments", test_unsupported);
    failed |= acx_test_run_case("broadcast from every root", test_broadcast);
    failed |= acx_test_run_case("all-gather", test_all_gather);
    failed |= acx_test_run_case("barrier", test_barrier);
    failed |= acx_test_run_case("agree: all ranks OK", test_agree_ok);
    failed |= acx_test_run_case("agree: last rank fails, all get its message", test_agree_one);
    failed |= acx_test_run_case("agree: lowest failing rank wins", test_agree_lowest);
    failed |= acx_test_run_case("backend selection", test_select);
    failed |= acx_test_run_case("comm split by parity", test_split);
    failed |=
        acx_test_run_case("the NCCL test double: emulated buffers, refusals", test_nccl_double);

    acx_comm_destroy(world);
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}

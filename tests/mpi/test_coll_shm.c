/*
 * tests/mpi/test_coll_shm.c — the shared-memory all-reduce, reduce-scatter
 * and all-gather of one node (collectives/mpi/coll_mpi_shm.c), directly and
 * through the MPI backend.
 *
 * The references are computed independently on every rank: all inputs are
 * gathered with a plain MPI_Allgather and summed left to right in rank
 * order, in the element type ((x_0 + x_1) + x_2) + ..., integers wrapping;
 * a reduce-scatter's is block `rank` of that sum over the [size x count]
 * rows, an all-gather's the MPI_Allgather itself. For float16/bfloat16 the
 * reference is coll_mpi.c's definition computed element by element with
 * half.h's scalar conversions: the float32 rank-order sum rounded once
 * (AVG: / size in float64, rounded once). coll_mpi_shm.h promises exactly
 * these, so results are compared bitwise — with inputs spread over 2^20 in
 * magnitude, where a different order changes float sums. Covers float32,
 * float64, int32, int64, float16, bfloat16; counts around the direct-round
 * limit, the block alignment and the round sizes (slots of 64 bytes force
 * thousands of rounds); in and out of place; AVG and the non-blocking
 * starts through the backend, also with ACX_SHM_DISABLE=1 (the MPI paths,
 * held to the same references); reduce-scatter + all-gather = all-reduce
 * bitwise; several ops in flight waited out of order; a non-blocking MPI
 * collective completed in opposite orders around a shared-memory one,
 * starts in different orders across two communicators and a 16-bit
 * all-reduce waited on either side of one (no deadlock: each would hang if
 * a start blocked or a wait moved nothing else); split communicators; the
 * environment switches and bad values. Run with mpirun -np 1..4 (1 rank:
 * no segment, MPI path checked).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "base/half.h"
#include "collectives/mpi/coll_mpi_shm.h"
#include "base/error.h"
#include "tests/acx_test_mpi.h"

static int rank_, size_;

static const acx_dtype_t dtypes[] = {ACX_DTYPE_FLOAT32, ACX_DTYPE_FLOAT64, ACX_DTYPE_INT32,
                                     ACX_DTYPE_INT64};
#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])

/* Element i of rank r: floats of either sign over 2^-10 .. 2^10 (so the
 * summation order shows), integers over their whole range (so sums wrap). */
static double gen_real(int r, size_t i, int salt) {
    uint32_t h = acx_test_hash3(r, i, salt), g = acx_test_hash3(r, i, ~salt);
    double mag = (double)(h >> 8) / (double)(1u << 24) * (double)(1u << (g % 21)) / 1024.0;
    return (h & 1) ? -mag : mag;
}

static void fill(void *buf, acx_dtype_t dt, size_t n, int r, int salt) {
    for (size_t i = 0; i < n; i++) {
        uint32_t h = acx_test_hash3(r, i, salt), g = acx_test_hash3(r, i, ~salt);
        double real = gen_real(r, i, salt);
        switch (dt) {
        case ACX_DTYPE_FLOAT32: ((float *)buf)[i] = (float)real; break;
        case ACX_DTYPE_FLOAT64: ((double *)buf)[i] = real * (1.0 + (double)g / 4294967296.0); break;
        case ACX_DTYPE_INT32: ((uint32_t *)buf)[i] = h ^ g << 7; break;
        default: ((uint64_t *)buf)[i] = (uint64_t)h << 32 | g; break;
        }
    }
}

/* want [n] = the rank-order sum of all [size_][n] rows (a plain MPI_Allgather of mine). */
static int reference(const void *mine, void *want, acx_dtype_t dt, size_t n) {
    size_t es = acx_dtype_size(dt);
    char *rows = malloc((size_t)size_ * n * es + 1);
    if (rows == NULL) return 1;
    MPI_Allgather(mine, (int)(n * es), MPI_BYTE, rows, (int)(n * es), MPI_BYTE, MPI_COMM_WORLD);
    memcpy(want, rows, n * es);
    for (int r = 1; r < size_; r++) {
        const char *row = rows + (size_t)r * n * es;
        for (size_t i = 0; i < n; i++) {
            switch (dt) {
            case ACX_DTYPE_FLOAT32:
                ((float *)want)[i] += ((const float *)(const void *)row)[i];
                break;
            case ACX_DTYPE_FLOAT64:
                ((double *)want)[i] += ((const double *)(const void *)row)[i];
                break;
            case ACX_DTYPE_INT32:
                ((uint32_t *)want)[i] += ((const uint32_t *)(const void *)row)[i];
                break;
            default: ((uint64_t *)want)[i] += ((const uint64_t *)(const void *)row)[i]; break;
            }
        }
    }
    free(rows);
    return 0;
}

/* The first element where got and want differ, or -1. */
static long first_diff(const void *got, const void *want, size_t n, size_t es) {
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0)
            return (long)i;
    return -1;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The blocking forms, for the direct tests: start, then wait. */
static void shm_all_reduce(acx_shm_t *shm, const void *in, void *out, size_t n, acx_dtype_t dt,
                           acx_red_op_t op) {
    acx_shm_op_t o;
    acx_shm_all_reduce_start(shm, &o, in, out, n, dt, op, NULL);
    acx_shm_wait(shm, &o, NULL);
}

static void shm_reduce_scatter(acx_shm_t *shm, const void *in, void *out, size_t n, acx_dtype_t dt,
                               acx_red_op_t op) {
    acx_shm_op_t o;
    acx_shm_reduce_scatter_start(shm, &o, in, out, n, dt, op, NULL);
    acx_shm_wait(shm, &o, NULL);
}

static void shm_all_gather(acx_shm_t *shm, const void *in, void *out, size_t n, size_t es) {
    acx_shm_op_t o;
    acx_shm_all_gather_start(shm, &o, in, out, n, es, NULL);
    acx_shm_wait(shm, &o, NULL);
}

static int set_env(const char *name, const char *value) {
    return value ? setenv(name, value, 1) : unsetenv(name);
}

/* ---- the segment ---- */

static int test_create(void) {
    acx_shm_t *shm = NULL;
    CHECK_OK(acx_shm_create(MPI_COMM_WORLD, &shm));
    CHECK((shm != NULL) == (size_ > 1)); /* one node here: a segment from 2 ranks up */
    acx_shm_free(shm);
    shm = NULL;

    CHECK(set_env("ACX_SHM_DISABLE", "1") == 0);
    CHECK_OK(acx_shm_create(MPI_COMM_WORLD, &shm));
    CHECK(shm == NULL);
    CHECK(set_env("ACX_SHM_DISABLE", "0") == 0); /* "0" means enabled */
    CHECK_OK(acx_shm_create(MPI_COMM_WORLD, &shm));
    CHECK((shm != NULL) == (size_ > 1));
    acx_shm_free(shm);
    shm = NULL;
    CHECK(set_env("ACX_SHM_DISABLE", NULL) == 0);

    if (size_ > 1) { /* read on rank 0 and reported on every rank; only rank 0's value counts */
        const char *bad[] = {"100", "0", "abc", "-64", "64k"};
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            CHECK(set_env("ACX_SHM_SLOT_BYTES", rank_ == 0 ? bad[k] : "4096") == 0);
            char needle[64];
            snprintf(needle, sizeof needle, "ACX_SHM_SLOT_BYTES=%s", bad[k]);
            CHECK_STATUS(acx_shm_create(MPI_COMM_WORLD, &shm), ACX_ERR_INVALID_ARG, needle);
            CHECK(shm == NULL);
        }
        CHECK(set_env("ACX_SHM_SLOT_BYTES", NULL) == 0);
        CHECK(set_env("ACX_SHM_DISABLE", "yes") == 0);
        CHECK_STATUS(acx_shm_create(MPI_COMM_WORLD, &shm), ACX_ERR_INVALID_ARG,
                     "ACX_SHM_DISABLE=yes: expected 1 or 0");
        CHECK(set_env("ACX_SHM_DISABLE", NULL) == 0);
        CHECK(set_env("ACX_SHM_MIN_BYTES", "1x") == 0);
        CHECK_STATUS(acx_shm_create(MPI_COMM_WORLD, &shm), ACX_ERR_INVALID_ARG,
                     "ACX_SHM_MIN_BYTES=1x");
        CHECK(set_env("ACX_SHM_MIN_BYTES", NULL) == 0);
    }
    return 0;
error:
    acx_shm_free(shm);
    set_env("ACX_SHM_DISABLE", NULL);
    set_env("ACX_SHM_SLOT_BYTES", NULL);
    set_env("ACX_SHM_MIN_BYTES", NULL);
    return 1;
}

/* ---- the all-reduce itself, bitwise against the reference ---- */

/* What each check_* case works with: a segment made with
 * ACX_SHM_SLOT_BYTES=slot_bytes (NULL: the default) and three buffers of
 * cap bytes. slot_case_close frees them and returns failed. */
typedef struct slot_case {
    acx_shm_t *shm;
    void *in, *out, *want;
} slot_case_t;

static int slot_case_close(slot_case_t *c, int failed) {
    set_env("ACX_SHM_SLOT_BYTES", NULL);
    acx_shm_free(c->shm);
    free(c->in);
    free(c->out);
    free(c->want);
    *c = (slot_case_t){0};
    return failed;
}

static int slot_case_open(slot_case_t *c, const char *slot_bytes, size_t cap) {
    *c = (slot_case_t){0};
    CHECK(set_env("ACX_SHM_SLOT_BYTES", slot_bytes) == 0);
    CHECK_OK(acx_shm_create(MPI_COMM_WORLD, &c->shm));
    CHECK(set_env("ACX_SHM_SLOT_BYTES", NULL) == 0);
    CHECK(c->shm != NULL);
    c->in = malloc(cap);
    c->out = malloc(cap);
    c->want = malloc(cap);
    CHECK(c->in && c->out && c->want);
    return 0;
error:
    return slot_case_close(c, 1);
}

/* acx_memory_stats' comm_segments counts what this rank allocated of a
 * segment: its two slot sets, rank 0 also the flags (128 bytes per rank,
 * rounded up to 4096), from creation to free; nothing with
 * ACX_SHM_DISABLE=1 or on one rank. */
static int64_t comm_segments(void) {
    acx_memory_stats_t st;
    memset(&st, 0xff, sizeof st);
    if (acx_memory_stats(&st) != ACX_OK) return -1;
    return st.comm_segments;
}

static int test_memory_stats(void) {
    acx_shm_t *shm = NULL;
    int64_t before = comm_segments();
    CHECK(before >= 0);
    CHECK(set_env("ACX_SHM_SLOT_BYTES", "4160") == 0);
    CHECK_OK(acx_shm_create(MPI_COMM_WORLD, &shm));
    CHECK(set_env("ACX_SHM_SLOT_BYTES", NULL) == 0);
    int64_t header = ((int64_t)size_ * 128 + 4095) / 4096 * 4096;
    int64_t want = size_ > 1 ? 2 * 4160 + (rank_ == 0 ? header : 0) : 0;
    CHECK(comm_segments() - before == want);
    acx_shm_free(shm);
    shm = NULL;
    CHECK(comm_segments() == before);
    CHECK(set_env("ACX_SHM_DISABLE", "1") == 0);
    CHECK_OK(acx_shm_create(MPI_COMM_WORLD, &shm));
    CHECK(set_env("ACX_SHM_DISABLE", NULL) == 0);
    CHECK(shm == NULL && comm_segments() == before);
    return 0;
error:
    acx_shm_free(shm);
    set_env("ACX_SHM_DISABLE", NULL);
    set_env("ACX_SHM_SLOT_BYTES", NULL);
    return 1;
}

/* Counts around: the 64-byte block alignment, the direct-round limit
 * (ACX_SHM_DIRECT_BYTES = 1024 float32 / 512 float64 elements), the rank
 * count, and for the small slots many rounds with a short last one. */
static const size_t counts[] = {1,   2,    3,    15,   16,   17,    511,   512,
                                513, 1023, 1024, 1025, 4099, 65539, 300007};
#define NUM_COUNTS (sizeof counts / sizeof counts[0])

static int check_slot(const char *slot_bytes) {
    size_t nmax = counts[NUM_COUNTS - 1];
    slot_case_t sc;
    if (slot_case_open(&sc, slot_bytes, nmax * 8)) return 1;
    acx_shm_t *shm = sc.shm;
    char *in = sc.in, *out = sc.out, *want = sc.want;
    for (size_t d = 0; d < NUM_DTYPES; d++) {
        acx_dtype_t dt = dtypes[d];
        size_t es = acx_dtype_size(dt);
        for (size_t c = 0; c < NUM_COUNTS; c++) {
            size_t n = counts[c];
            int salt = (int)(d * 100 + c);
            CHECK(acx_shm_all_reduce_ok(shm, n, dt, ACX_OP_SUM));
            fill(in, dt, n, rank_, salt);
            CHECK(reference(in, want, dt, n) == 0);
            for (int in_place = 0; in_place < 2; in_place++) {
                memset(out, 0x5a, nmax * 8);
                acx_shm_op_t op;
                if (in_place) {
                    memcpy(out, in, n * es);
                    acx_shm_all_reduce_start(shm, &op, out, out, n, dt, ACX_OP_SUM, NULL);
                } else {
                    acx_shm_all_reduce_start(shm, &op, in, out, n, dt, ACX_OP_SUM, NULL);
                }
                acx_shm_wait(shm, &op, NULL);
                CHECK(acx_shm_test(shm, &op) && acx_shm_pending(shm) == NULL);
                long bad = first_diff(out, want, n, es);
                if (bad >= 0 || (n < nmax && (unsigned char)out[n * es] != 0x5a)) {
                    fprintf(stderr,
                            "\n[r%d] slot %s, %s x %zu, %s: element %ld differs from the "
                            "rank-order sum (or the element after the buffer was written)\n",
                            rank_, slot_bytes ? slot_bytes : "default", acx_dtype_name(dt), n,
                            in_place ? "in place" : "out of place", bad);
                    goto error;
                }
            }
        }
    }
    return slot_case_close(&sc, 0);
error:
    return slot_case_close(&sc, 1);
}

static int test_sum_default_slot(void) { return size_ > 1 ? check_slot(NULL) : 0; }
static int test_sum_slot_64(void) { return size_ > 1 ? check_slot("64") : 0; }
static int test_sum_slot_4160(void) { return size_ > 1 ? check_slot("4160") : 0; }

/* ---- reduce-scatter and all-gather, bitwise against plain MPI ---- */

/* Per-rank counts around: the block alignment (16 float32), a reduce-
 * scatter round of 4160-byte slots (4160 / size / esize, rounded down to
 * whole lines: 256 and 336 float32 at 4 and 3 ranks, 512 at 2), an
 * all-gather round (1040 float32), and many rounds with a short last. */
static const size_t rs_counts[] = {1,   2,   3,   15,  16,  17,   255,  256,  257,  335,
                                   336, 337, 511, 512, 513, 1039, 1040, 1041, 4099, 75001};
#define NUM_RS_COUNTS (sizeof rs_counts / sizeof rs_counts[0])

/* want [size_ x n] = every rank's mine [n], through a plain MPI_Allgather of bytes. */
static void reference_gather(const void *mine, void *want, size_t n, size_t es) {
    MPI_Allgather(mine, (int)(n * es), MPI_BYTE, want, (int)(n * es), MPI_BYTE, MPI_COMM_WORLD);
}

static int report(const char *what, const char *slot_bytes, acx_dtype_t dt, size_t n, int in_place,
                  long bad) {
    fprintf(stderr,
            "\n[r%d] %s, slot %s, %s x %zu, %s: element %ld differs from plain MPI (or the "
            "element after the buffer was written)\n",
            rank_, what, slot_bytes ? slot_bytes : "default", acx_dtype_name(dt), n,
            in_place ? "in place" : "out of place", bad);
    return 1;
}

static int check_rs_ag(const char *slot_bytes) {
    size_t nmax = rs_counts[NUM_RS_COUNTS - 1], p = (size_t)size_, cap = (p * nmax + 1) * 8;
    slot_case_t sc;
    if (slot_case_open(&sc, slot_bytes, cap)) return 1;
    acx_shm_t *shm = sc.shm;
    char *in = sc.in, *out = sc.out, *want = sc.want;
    for (size_t d = 0; d < NUM_DTYPES; d++) {
        acx_dtype_t dt = dtypes[d];
        size_t es = acx_dtype_size(dt);
        for (size_t c = 0; c < NUM_RS_COUNTS; c++) {
            size_t n = rs_counts[c];
            int salt = (int)(1000 + d * 100 + c);
            /* reduce-scatter: block rank_ of the rank-order sum of the [p x n] rows */
            CHECK(acx_shm_reduce_scatter_ok(shm, n, dt, ACX_OP_SUM));
            fill(in, dt, p * n, rank_, salt);
            CHECK(reference(in, want, dt, p * n) == 0);
            const char *want_rs = want + (size_t)rank_ * n * es;
            for (int in_place = 0; in_place < 2; in_place++) {
                memset(out, 0x5a, cap);
                char *got;
                if (in_place) {
                    memcpy(out, in, p * n * es);
                    got = out + (size_t)rank_ * n * es;
                    shm_reduce_scatter(shm, out, got, n, dt, ACX_OP_SUM);
                    /* the other blocks of sendbuf are left as they were */
                    for (size_t q = 0; q < p; q++)
                        if ((int)q != rank_)
                            CHECK(memcmp(out + q * n * es, in + q * n * es, n * es) == 0);
                } else {
                    got = out;
                    shm_reduce_scatter(shm, in, out, n, dt, ACX_OP_SUM);
                    CHECK((unsigned char)out[n * es] == 0x5a);
                }
                long bad = first_diff(got, want_rs, n, es);
                if (bad >= 0) {
                    report("reduce-scatter", slot_bytes, dt, n, in_place, bad);
                    goto error;
                }
            }
            /* all-gather: every rank's [n] at row q, bytes as MPI_Allgather moves them */
            fill(in, dt, n, rank_, salt + 7);
            reference_gather(in, want, n, es);
            CHECK(acx_shm_all_gather_ok(shm, n, es));
            for (int in_place = 0; in_place < 2; in_place++) {
                memset(out, 0x5a, cap);
                if (in_place) {
                    memcpy(out + (size_t)rank_ * n * es, in, n * es);
                    shm_all_gather(shm, out + (size_t)rank_ * n * es, out, n, es);
                } else {
                    shm_all_gather(shm, in, out, n, es);
                }
                long bad = first_diff(out, want, p * n, es);
                if (bad >= 0 || (unsigned char)out[p * n * es] != 0x5a) {
                    report("all-gather", slot_bytes, dt, n, in_place, bad);
                    goto error;
                }
            }
        }
    }
    return slot_case_close(&sc, 0);
error:
    return slot_case_close(&sc, 1);
}

static int test_rs_ag_default_slot(void) { return size_ > 1 ? check_rs_ag(NULL) : 0; }
static int test_rs_ag_slot_64(void) { return size_ > 1 ? check_rs_ag("64") : 0; }
static int test_rs_ag_slot_4160(void) { return size_ > 1 ? check_rs_ag("4160") : 0; }

/* ---- 16-bit SUM and AVG ---- */

static const acx_dtype_t half_dtypes[] = {ACX_DTYPE_FLOAT16, ACX_DTYPE_BFLOAT16};

static uint16_t half_from_double(acx_dtype_t dt, double v) {
    return dt == ACX_DTYPE_FLOAT16 ? acx_f16_from_f64(v) : acx_bf16_from_f64(v);
}

static float half_to_float(acx_dtype_t dt, uint16_t h) {
    return dt == ACX_DTYPE_FLOAT16 ? acx_f16_to_f32(h) : acx_bf16_to_f32(h);
}

/* Element i of rank r as a 16-bit value (the float spread of gen_real). */
static void fill_half(uint16_t *buf, acx_dtype_t dt, size_t n, int r, int salt) {
    for (size_t i = 0; i < n; i++)
        buf[i] = half_from_double(dt, gen_real(r, i, salt));
}

/* want [n] = the 16-bit result coll_mpi.c's header comment defines, one
 * element at a time with the scalar conversions of half.h: the float32 sum
 * of the ranks' values in rank order, rounded once (AVG: that sum / size,
 * divided in float64, rounded once). The rows come from a plain MPI_Allgather. */
static int reference_half(const uint16_t *mine, uint16_t *want, acx_dtype_t dt, size_t n, int avg) {
    uint16_t *rows = malloc((size_t)size_ * n * 2 + 2);
    if (rows == NULL) return 1;
    reference_gather(mine, rows, n, 2);
    for (size_t i = 0; i < n; i++) {
        float acc = half_to_float(dt, rows[i]);
        for (int r = 1; r < size_; r++)
            acc += half_to_float(dt, rows[(size_t)r * n + i]);
        want[i] = avg ? half_from_double(dt, (double)acc / (double)size_)
                      : (dt == ACX_DTYPE_FLOAT16 ? acx_f16_from_f32(acc) : acx_bf16_from_f32(acc));
    }
    free(rows);
    return 0;
}

static int check_half(const char *slot_bytes) {
    size_t p = (size_t)size_, nmax = 300007, cap = p * nmax + 1;
    slot_case_t sc;
    if (slot_case_open(&sc, slot_bytes, cap * 2)) return 1;
    acx_shm_t *shm = sc.shm;
    uint16_t *in = sc.in, *out = sc.out, *want = sc.want;
    /* all-reduce counts around the direct limit (2048 elements), the
     * 32-element blocks, and rounds; reduce-scatter per-rank counts */
    static const size_t ar_counts[] = {1, 31, 32, 33, 2047, 2048, 2049, 2080, 4099, 300007};
    for (size_t d = 0; d < 2; d++) {
        acx_dtype_t dt = half_dtypes[d];
        for (int avg = 0; avg < 2; avg++) {
            acx_red_op_t op = avg ? ACX_OP_AVG : ACX_OP_SUM;
            for (size_t c = 0; c < sizeof ar_counts / sizeof ar_counts[0]; c++) {
                size_t n = ar_counts[c];
                fill_half(in, dt, n, rank_, (int)(2000 + d * 100 + c));
                CHECK(reference_half(in, want, dt, n, avg) == 0);
                CHECK(acx_shm_all_reduce_ok(shm, n, dt, op));
                for (int in_place = 0; in_place < 2; in_place++) {
                    memset(out, 0x5a, cap * 2);
                    if (in_place) {
                        memcpy(out, in, n * 2);
                        shm_all_reduce(shm, out, out, n, dt, op);
                    } else {
                        shm_all_reduce(shm, in, out, n, dt, op);
                    }
                    long bad = first_diff(out, want, n, 2);
                    if (bad >= 0 || out[n] != 0x5a5a) {
                        report(avg ? "16-bit all-reduce avg" : "16-bit all-reduce sum", slot_bytes,
                               dt, n, in_place, bad);
                        goto error;
                    }
                }
            }
            for (size_t c = 0; c < NUM_RS_COUNTS; c++) {
                size_t n = rs_counts[c];
                fill_half(in, dt, p * n, rank_, (int)(3000 + d * 100 + c));
                CHECK(reference_half(in, want, dt, p * n, avg) == 0);
                CHECK(acx_shm_reduce_scatter_ok(shm, n, dt, op));
                const uint16_t *want_rs = want + (size_t)rank_ * n;
                for (int in_place = 0; in_place < 2; in_place++) {
                    memset(out, 0x5a, cap * 2);
                    uint16_t *got = out;
                    if (in_place) {
                        memcpy(out, in, p * n * 2);
                        got = out + (size_t)rank_ * n;
                        shm_reduce_scatter(shm, out, got, n, dt, op);
                    } else {
                        shm_reduce_scatter(shm, in, out, n, dt, op);
                    }
                    long bad = first_diff(got, want_rs, n, 2);
                    if (bad >= 0) {
                        report(avg ? "16-bit reduce-scatter avg" : "16-bit reduce-scatter sum",
                               slot_bytes, dt, n, in_place, bad);
                        goto error;
                    }
                }
            }
        }
    }
    return slot_case_close(&sc, 0);
error:
    return slot_case_close(&sc, 1);
}

static int test_half_default_slot(void) { return size_ > 1 ? check_half(NULL) : 0; }
static int test_half_slot_64(void) { return size_ > 1 ? check_half("64") : 0; }
static int test_half_slot_4160(void) { return size_ > 1 ? check_half("4160") : 0; }

static int test_not_taken(void) {
    acx_shm_t *shm = NULL;
    CHECK(set_env("ACX_SHM_MIN_BYTES", "4096") == 0);
    CHECK_OK(acx_shm_create(MPI_COMM_WORLD, &shm));
    CHECK(set_env("ACX_SHM_MIN_BYTES", NULL) == 0);
    if (size_ == 1) return 0;
    CHECK(shm != NULL);
    CHECK(!acx_shm_all_reduce_ok(shm, 1023, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(acx_shm_all_reduce_ok(shm, 1024, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(!acx_shm_all_reduce_ok(shm, 0, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(!acx_shm_all_reduce_ok(shm, 1 << 20, ACX_DTYPE_FLOAT32, ACX_OP_MAX));
    CHECK(!acx_shm_all_reduce_ok(shm, 1 << 20, ACX_DTYPE_FLOAT32, ACX_OP_AVG));
    CHECK(acx_shm_all_reduce_ok(shm, 1 << 20, ACX_DTYPE_BFLOAT16, ACX_OP_SUM));
    CHECK(acx_shm_all_reduce_ok(shm, 1 << 20, ACX_DTYPE_FLOAT16, ACX_OP_AVG));
    CHECK(!acx_shm_all_reduce_ok(shm, 1 << 20, ACX_DTYPE_BFLOAT16, ACX_OP_PROD));
    CHECK(!acx_shm_all_reduce_ok(shm, 2047, ACX_DTYPE_FLOAT16, ACX_OP_SUM));
    CHECK(acx_shm_all_reduce_ok(shm, 2048, ACX_DTYPE_FLOAT16, ACX_OP_SUM));
    /* reduce-scatter and all-gather: the [size x count] buffer counts */
    size_t q = (1024 + (size_t)size_ - 1) / (size_t)size_;
    CHECK(acx_shm_reduce_scatter_ok(shm, q, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(!acx_shm_reduce_scatter_ok(shm, 1023 / (size_t)size_, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(!acx_shm_reduce_scatter_ok(shm, 1 << 20, ACX_DTYPE_FLOAT32, ACX_OP_AVG));
    CHECK(!acx_shm_reduce_scatter_ok(shm, 1 << 20, ACX_DTYPE_FLOAT32, ACX_OP_MIN));
    CHECK(acx_shm_reduce_scatter_ok(shm, 1 << 20, ACX_DTYPE_BFLOAT16, ACX_OP_AVG));
    CHECK(!acx_shm_reduce_scatter_ok(shm, 0, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(acx_shm_all_gather_ok(shm, q, 4));
    CHECK(!acx_shm_all_gather_ok(shm, 1023 / (size_t)size_, 4));
    CHECK(acx_shm_all_gather_ok(shm, 4096, 1));
    CHECK(!acx_shm_all_gather_ok(shm, 0, 4));
    CHECK(!acx_shm_all_gather_ok(NULL, 1 << 20, 4));
    CHECK(!acx_shm_all_reduce_ok(shm, 1 << 20, ACX_DTYPE_UINT8, ACX_OP_SUM));
    CHECK(!acx_shm_all_reduce_ok(NULL, 1 << 20, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    acx_shm_free(shm);
    return 0;
error:
    set_env("ACX_SHM_MIN_BYTES", NULL);
    acx_shm_free(shm);
    return 1;
}

/* ---- through the MPI backend ---- */

/* SUM blocking and non-blocking, AVG (the sum, then / size in the type),
 * on comm; every result bitwise the rank-order one. The reference gathers
 * over MPI_COMM_WORLD, so comm must be world-sized. */
static int check_backend(acx_comm_t *comm) {
    const size_t n = 70001;
    float *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out),
          *want = malloc(n * sizeof *want);
    acx_coll_req_t *req = NULL;
    CHECK(in && out && want);
    fill(in, ACX_DTYPE_FLOAT32, n, rank_, 7);
    CHECK(reference(in, want, ACX_DTYPE_FLOAT32, n) == 0);

    CHECK_OK(comm->ops->all_reduce(comm, in, out, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(first_diff(out, want, n, 4) < 0);

    memcpy(out, in, n * sizeof *in);
    CHECK_OK(comm->ops->all_reduce_start(comm, out, out, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM, &req));
    int done = 0;
    CHECK_OK(comm->ops->test(req, &done));
    CHECK(done == 0 || done == 1);
    CHECK_OK(comm->ops->wait(req));
    req = NULL;
    CHECK(first_diff(out, want, n, 4) < 0);

    CHECK_OK(comm->ops->all_reduce(comm, in, out, n, ACX_DTYPE_FLOAT32, ACX_OP_AVG));
    for (size_t i = 0; i < n; i++)
        want[i] /= (float)size_;
    CHECK(first_diff(out, want, n, 4) < 0);
    free(in);
    free(out);
    free(want);
    return 0;
error:
    if (req != NULL) comm->ops->wait(req);
    free(in);
    free(out);
    free(want);
    return 1;
}

/* Reduce-scatter and all-gather through comm (float32 SUM/AVG, blocking
 * and start, in and out of place), each bitwise the plain-MPI reference;
 * the all-gather of the reduce-scatter's blocks equals the all-reduce of
 * the same rows, bit for bit. 16-bit SUM and AVG all-reduce and
 * reduce-scatter against reference_half. shm: comm has a segment (its
 * starts then complete at once); without one the float32 inputs are whole
 * numbers, since MPI_Reduce_scatter_block and MPI_Allreduce add in an
 * order of their own (the 16-bit path adds in rank order either way). */
static int check_backend_rs_ag(acx_comm_t *comm, int shm) {
    const size_t n = 30011, p = (size_t)size_;
    float *in = malloc(p * n * sizeof *in), *out = malloc(p * n * sizeof *out),
          *want = malloc(p * n * sizeof *want), *ag = malloc(p * n * sizeof *ag);
    uint16_t *h_in = malloc(p * n * 2), *h_out = malloc(p * n * 2), *h_want = malloc(p * n * 2);
    acx_coll_req_t *req = NULL;
    int done = 0;
    CHECK(in && out && want && ag && h_in && h_out && h_want);
    fill(in, ACX_DTYPE_FLOAT32, p * n, rank_, 9);
    if (!shm) /* MPI sums float32 in an order of its own: whole numbers make any order exact */
        for (size_t i = 0; i < p * n; i++)
            in[i] = (float)(int)in[i];
    CHECK(reference(in, want, ACX_DTYPE_FLOAT32, p * n) == 0);
    const float *mine = want + (size_t)rank_ * n;

    CHECK_OK(comm->ops->reduce_scatter(comm, in, out, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(first_diff(out, mine, n, 4) < 0);
    CHECK_OK(comm->ops->all_gather(comm, out, ag, n, ACX_DTYPE_FLOAT32));
    CHECK(first_diff(ag, want, p * n, 4) < 0); /* = the all-reduce below */
    CHECK_OK(comm->ops->all_reduce(comm, in, out, p * n, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(first_diff(out, ag, p * n, 4) < 0);

    /* in place, non-blocking */
    memcpy(out, in, p * n * sizeof *in);
    float *block = out + (size_t)rank_ * n;
    CHECK_OK(
        comm->ops->reduce_scatter_start(comm, out, block, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM, &req));
    CHECK_OK(comm->ops->test(req, &done));
    CHECK(done == 0 || done == 1); /* started, perhaps done: it never waited for the others */
    CHECK_OK(comm->ops->wait(req));
    req = NULL;
    CHECK(first_diff(block, mine, n, 4) < 0);
    memset(ag, 0, p * n * sizeof *ag);
    memcpy(ag + (size_t)rank_ * n, block, n * sizeof *ag);
    CHECK_OK(
        comm->ops->all_gather_start(comm, ag + (size_t)rank_ * n, ag, n, ACX_DTYPE_FLOAT32, &req));
    CHECK_OK(comm->ops->test(req, &done));
    CHECK(done == 0 || done == 1); /* started, perhaps done: it never waited for the others */
    CHECK_OK(comm->ops->wait(req));
    req = NULL;
    CHECK(first_diff(ag, want, p * n, 4) < 0);

    /* AVG: the sum, then / size in float32 */
    CHECK_OK(comm->ops->reduce_scatter(comm, in, out, n, ACX_DTYPE_FLOAT32, ACX_OP_AVG));
    for (size_t i = 0; i < n; i++) {
        float w = mine[i] / (float)size_;
        CHECK(memcmp(&out[i], &w, 4) == 0);
    }

    for (size_t d = 0; d < 2; d++) {
        acx_dtype_t dt = half_dtypes[d];
        for (int avg = 0; avg < 2; avg++) {
            acx_red_op_t op = avg ? ACX_OP_AVG : ACX_OP_SUM;
            fill_half(h_in, dt, p * n, rank_, (int)(50 + d * 2 + (size_t)avg));
            CHECK(reference_half(h_in, h_want, dt, p * n, avg) == 0);
            memset(h_out, 0, p * n * 2);
            CHECK_OK(comm->ops->all_reduce_start(comm, h_in, h_out, p * n, dt, op, &req));
            CHECK_OK(comm->ops->test(req, &done));
            CHECK(done == 0 ||
                  done == 1); /* started, perhaps done: it never waited for the others */
            CHECK_OK(comm->ops->wait(req));
            req = NULL;
            CHECK(first_diff(h_out, h_want, p * n, 2) < 0);
            memcpy(h_out, h_in, p * n * 2);
            CHECK_OK(comm->ops->all_reduce(comm, h_out, h_out, p * n, dt, op));
            CHECK(first_diff(h_out, h_want, p * n, 2) < 0);
            CHECK_OK(comm->ops->reduce_scatter(comm, h_in, h_out, n, dt, op));
            CHECK(first_diff(h_out, h_want + (size_t)rank_ * n, n, 2) < 0);
            memcpy(h_out, h_in, p * n * 2);
            uint16_t *hb = h_out + (size_t)rank_ * n;
            CHECK_OK(comm->ops->reduce_scatter_start(comm, h_out, hb, n, dt, op, &req));
            CHECK_OK(comm->ops->wait(req));
            req = NULL;
            CHECK(first_diff(hb, h_want + (size_t)rank_ * n, n, 2) < 0);
        }
    }
    free(in);
    free(out);
    free(want);
    free(ag);
    free(h_in);
    free(h_out);
    free(h_want);
    return 0;
error:
    if (req != NULL) comm->ops->wait(req);
    free(in);
    free(out);
    free(want);
    free(ag);
    free(h_in);
    free(h_out);
    free(h_want);
    return 1;
}

/* The same checks with and without the segment (ACX_SHM_DISABLE=1: the
 * MPI paths), so both are held to the same references. */
static int test_backend_rs_ag(void) {
    acx_comm_t *comm = NULL;
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &comm));
    CHECK(check_backend_rs_ag(comm, size_ > 1) == 0);
    acx_comm_destroy(comm);
    comm = NULL;
    CHECK(set_env("ACX_SHM_DISABLE", "1") == 0);
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &comm));
    CHECK(set_env("ACX_SHM_DISABLE", NULL) == 0);
    CHECK(check_backend_rs_ag(comm, 0) == 0);
    acx_comm_destroy(comm);
    return 0;
error:
    set_env("ACX_SHM_DISABLE", NULL);
    acx_comm_destroy(comm);
    return 1;
}

static int test_backend(void) {
    acx_comm_t *comm = NULL;
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &comm));
    CHECK(check_backend(comm) == 0);
    acx_comm_destroy(comm);
    return 0;
error:
    acx_comm_destroy(comm);
    return 1;
}

/* A non-blocking MPI gather to rank 0 (the all-gather goes through shared
 * memory now, and its start completes at once) is started everywhere, then
 * even ranks wait for it before a shared-memory all-reduce and odd ranks
 * after. An odd rank sits in the all-reduce while rank 0 waits for the
 * gather, which needs the odd rank's MPI progress (4 MiB: a rendezvous
 * send): the shared-memory wait must provide it, or this hangs (and the
 * test watchdog fails it). */
static int test_progress_while_waiting(void) {
    const size_t n = (size_t)1 << 20, m = 4099;
    acx_comm_t *comm = NULL;
    acx_coll_req_t *req = NULL;
    float *ag = malloc(n * (size_t)size_ * sizeof *ag), *x = malloc(m * sizeof *x),
          *want = malloc(m * sizeof *want);
    CHECK(ag && x && want);
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &comm));
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++)
            ag[(size_t)rank_ * n + i] = (float)(rank_ * 1000 + round) + (float)(i % 977);
        fill(x, ACX_DTYPE_FLOAT32, m, rank_, 40 + round);
        CHECK(reference(x, want, ACX_DTYPE_FLOAT32, m) == 0);
        CHECK_OK(comm->ops->gather_start(comm, ag + (size_t)rank_ * n, ag, n, ACX_DTYPE_FLOAT32, 0,
                                         &req));
        if (rank_ % 2 == 0) {
            CHECK_OK(comm->ops->wait(req));
            req = NULL;
        }
        CHECK_OK(comm->ops->all_reduce(comm, x, x, m, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
        if (req != NULL) {
            CHECK_OK(comm->ops->wait(req));
            req = NULL;
        }
        CHECK(first_diff(x, want, m, 4) < 0);
        for (int r = 0; r < size_ && rank_ == 0; r++)
            CHECK(ag[(size_t)r * n + n - 1] == (float)(r * 1000 + round) + (float)((n - 1) % 977));
    }
    acx_comm_destroy(comm);
    free(ag);
    free(x);
    free(want);
    return 0;
error:
    if (req != NULL) comm->ops->wait(req);
    acx_comm_destroy(comm);
    free(ag);
    free(x);
    free(want);
    return 1;
}

/* Three all-reduces started back to back and waited newest first: ops run
 * in start order whatever the wait order, each with its own result. */
static int test_in_flight(void) {
    const size_t n[3] = {70001, 333, 1 << 16};
    float *x[3] = {NULL, NULL, NULL}, *want[3] = {NULL, NULL, NULL};
    acx_coll_req_t *req[3] = {NULL, NULL, NULL};
    acx_comm_t *comm = NULL;
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &comm));
    for (int k = 0; k < 3; k++) {
        x[k] = malloc(n[k] * sizeof(float));
        want[k] = malloc(n[k] * sizeof(float));
        CHECK(x[k] && want[k]);
        fill(x[k], ACX_DTYPE_FLOAT32, n[k], rank_, 90 + k);
        CHECK(reference(x[k], want[k], ACX_DTYPE_FLOAT32, n[k]) == 0);
    }
    for (int k = 0; k < 3; k++)
        CHECK_OK(comm->ops->all_reduce_start(comm, x[k], x[k], n[k], ACX_DTYPE_FLOAT32, ACX_OP_SUM,
                                             &req[k]));
    for (int k = 2; k >= 0; k--) {
        CHECK_OK(comm->ops->wait(req[k]));
        req[k] = NULL;
        CHECK(first_diff(x[k], want[k], n[k], 4) < 0);
    }
    acx_comm_destroy(comm);
    for (int k = 0; k < 3; k++) {
        free(x[k]);
        free(want[k]);
    }
    return 0;
error:
    for (int k = 0; k < 3; k++) {
        if (req[k] != NULL) comm->ops->wait(req[k]);
        free(x[k]);
        free(want[k]);
    }
    acx_comm_destroy(comm);
    return 1;
}

/* Legal MPI that a blocking start would deadlock: on two communicators,
 * even ranks start an all-reduce on B and then call a blocking barrier on
 * A; odd ranks call the barrier first and start the all-reduce after. Then
 * a bfloat16 PROD all-reduce on A (MPI, the backend's 16-bit queue) is
 * started everywhere; odd ranks wait for it before starting the
 * shared-memory one on B, even ranks wait in shared memory for B first.
 * The odd ranks' wait needs the even ranks' queue moved on, which only
 * the shared-memory wait's progress hook does: without it, this hangs. */
static int test_cross_comm_order(void) {
    const size_t n = 20011;
    acx_comm_t *a = NULL, *b = NULL;
    acx_coll_req_t *rb = NULL, *rh = NULL;
    float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want);
    uint16_t *h = malloc(n * sizeof *h);
    CHECK(x && want && h);
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &a));
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &b));
    for (int round = 0; round < 2; round++) {
        fill(x, ACX_DTYPE_FLOAT32, n, rank_, 60 + round);
        CHECK(reference(x, want, ACX_DTYPE_FLOAT32, n) == 0);
        if (round == 0) {
            if (rank_ % 2 == 0)
                CHECK_OK(b->ops->all_reduce_start(b, x, x, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM, &rb));
            CHECK_OK(a->ops->barrier(a));
            if (rank_ % 2 == 1)
                CHECK_OK(b->ops->all_reduce_start(b, x, x, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM, &rb));
        } else {
            /* bfloat16 PROD stays on MPI (the backend's 16-bit queue); of
             * 1s and 2s, so every product is exact */
            for (size_t i = 0; i < n; i++)
                h[i] = (uint16_t)(f32_bits((float)(1 + (i + (size_t)rank_) % 2)) >> 16);
            CHECK_OK(a->ops->all_reduce_start(a, h, h, n, ACX_DTYPE_BFLOAT16, ACX_OP_PROD, &rh));
            if (rank_ % 2 == 1) { /* waits for A, which needs the even ranks' queue moved */
                CHECK_OK(a->ops->wait(rh));
                rh = NULL;
            }
            CHECK_OK(b->ops->all_reduce_start(b, x, x, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM, &rb));
            if (rh != NULL) { /* even: waits in shared memory for B first */
                CHECK_OK(b->ops->wait(rb));
                rb = NULL;
                CHECK_OK(a->ops->wait(rh));
                rh = NULL;
            }
            for (size_t i = 0; i < n; i++) {
                float prod = 1.0f;
                for (int r = 0; r < size_; r++)
                    prod *= (float)(1 + (i + (size_t)r) % 2);
                CHECK(f32_bits(prod) >> 16 == h[i]);
            }
        }
        if (rb != NULL) CHECK_OK(b->ops->wait(rb));
        rb = NULL;
        CHECK(first_diff(x, want, n, 4) < 0);
    }
    acx_comm_destroy(b);
    acx_comm_destroy(a);
    free(x);
    free(want);
    free(h);
    return 0;
error:
    if (rb != NULL) b->ops->wait(rb);
    if (rh != NULL) a->ops->wait(rh);
    acx_comm_destroy(b);
    acx_comm_destroy(a);
    free(x);
    free(want);
    free(h);
    return 1;
}

/* Two parity groups, each with its own segment, reducing at the same
 * time; each group's result is its members' rank-order sum. */
static int test_split(void) {
    const size_t n = 10007;
    acx_comm_t *world = NULL, *sub = NULL;
    float *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out),
          *want = malloc(n * sizeof *want);
    CHECK(in && out && want);
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &world));
    CHECK_OK(acx_comm_split(world, rank_ % 2, rank_, &sub));
    fill(in, ACX_DTYPE_FLOAT32, n, rank_, 77);
    for (size_t i = 0; i < n; i++) { /* members rank%2, rank%2 + 2, ...: in rank order */
        float s = 0.0f;
        int first = 1;
        for (int r = rank_ % 2; r < size_; r += 2) {
            float v = (float)gen_real(r, i, 77);
            s = first ? v : s + v;
            first = 0;
        }
        want[i] = s;
    }
    CHECK_OK(sub->ops->all_reduce(sub, in, out, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(first_diff(out, want, n, 4) < 0);
    acx_comm_destroy(sub);
    acx_comm_destroy(world);
    free(in);
    free(out);
    free(want);
    return 0;
error:
    acx_comm_destroy(sub);
    acx_comm_destroy(world);
    free(in);
    free(out);
    free(want);
    return 1;
}

/* ---- mismatched arguments (issue 17 item 5) ---- */

/* A correct all-reduce of n float32 after a refused one: the segment is
 * still in step (no hang, the rank-order sum). */
static int still_in_step(acx_comm_t *comm, size_t n, int salt) {
    float *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out),
          *want = malloc(n * sizeof *want);
    CHECK(in && out && want);
    fill(in, ACX_DTYPE_FLOAT32, n, rank_, salt);
    CHECK(reference(in, want, ACX_DTYPE_FLOAT32, n) == 0);
    CHECK_OK(comm->ops->all_reduce(comm, in, out, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(first_diff(out, want, n, 4) < 0);
    free(in);
    free(out);
    free(want);
    return 0;
error:
    free(in);
    free(out);
    free(want);
    return 1;
}

/* recvbuf [n] bytes still holds the sentinel: a refused op writes nothing. */
static int untouched(const unsigned char *buf, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (buf[i] != 0xA5) return 0;
    return 1;
}

/*
 * Every rank passes the same count, dtype and op, or every rank is refused
 * with both values named — also when only the last rank differs, for a
 * count spanning several rounds, for reduce-scatter and all-gather, for a
 * different collective altogether, and through a start and a wait — and the
 * segment stays in step for the next, correct call. (Before the check the
 * all-reduce returned ACX_OK everywhere with rank 0's upper half
 * unreduced.) The expected messages are written out here, from the values
 * each case passes.
 */
static int test_mismatch(void) {
    if (size_ < 2) return 0;
    const size_t big = (size_t)1 << 20; /* float32: 4 MiB, several 1 MiB rounds */
    acx_comm_t *comm = NULL;
    unsigned char *in = malloc(2 * big * sizeof(double) * (size_t)size_);
    unsigned char *out = malloc(2 * big * sizeof(double) * (size_t)size_);
    char want[256];
    CHECK(in && out);
    memset(in, 0, 2 * big * sizeof(double) * (size_t)size_);
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &comm));
    int last = size_ - 1;

    /* count: 256 on rank 0, 128 elsewhere (the case) */
    memset(out, 0xA5, 256 * 4);
    CHECK_STATUS(
        comm->ops->all_reduce(comm, in, out, rank_ == 0 ? 256 : 128, ACX_DTYPE_FLOAT32, ACX_OP_SUM),
        ACX_ERR_INVALID_ARG,
        "all-reduce count mismatch on the shared-memory path: rank 0 passed 256, rank 1 "
        "passed 128");
    CHECK(untouched(out, 256 * 4));
    CHECK(still_in_step(comm, 256, 1) == 0);

    /* count, only the last rank differs, several rounds on some ranks */
    snprintf(want, sizeof want,
             "all-reduce count mismatch on the shared-memory path: rank 0 passed %zu, rank %d "
             "passed %zu",
             big, last, big / 2 + 3);
    CHECK_STATUS(comm->ops->all_reduce(comm, in, out, rank_ == last ? big / 2 + 3 : big,
                                       ACX_DTYPE_FLOAT32, ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, want);
    CHECK(still_in_step(comm, big, 2) == 0);

    /* dtype: float64 on rank 0, float32 elsewhere */
    CHECK_STATUS(comm->ops->all_reduce(comm, in, out, 256,
                                       rank_ == 0 ? ACX_DTYPE_FLOAT64 : ACX_DTYPE_FLOAT32,
                                       ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG,
                 "all-reduce dtype mismatch on the shared-memory path: rank 0 passed float64, "
                 "rank 1 passed float32");
    CHECK(still_in_step(comm, 300, 3) == 0);

    /* op: avg on rank 0, sum elsewhere; float32 (the segment sums both) and bfloat16 */
    CHECK_STATUS(comm->ops->all_reduce(comm, in, out, 256, ACX_DTYPE_FLOAT32,
                                       rank_ == 0 ? ACX_OP_AVG : ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG,
                 "all-reduce op mismatch on the shared-memory path: rank 0 passed avg, rank 1 "
                 "passed sum");
    snprintf(want, sizeof want,
             "all-reduce op mismatch on the shared-memory path: rank 0 passed sum, rank %d "
             "passed avg",
             last);
    CHECK_STATUS(comm->ops->all_reduce(comm, in, out, 4096, ACX_DTYPE_BFLOAT16,
                                       rank_ == last ? ACX_OP_AVG : ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, want);
    CHECK(still_in_step(comm, 5000, 4) == 0);

    /* reduce-scatter and all-gather counts (all-gather: bytes per rank) */
    memset(out, 0xA5, 64 * 4);
    CHECK_STATUS(comm->ops->reduce_scatter(comm, in, out, rank_ == 0 ? 64 : 32, ACX_DTYPE_FLOAT32,
                                           ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG,
                 "reduce-scatter count mismatch on the shared-memory path: rank 0 passed 64, rank "
                 "1 passed 32");
    CHECK(untouched(out, 64 * 4));
    CHECK_STATUS(comm->ops->all_gather(comm, in, out, rank_ == 0 ? 100 : 50, ACX_DTYPE_INT32),
                 ACX_ERR_INVALID_ARG,
                 "all-gather count mismatch on the shared-memory path: rank 0 passed 400, rank 1 "
                 "passed 200 (bytes per rank)");
    CHECK(still_in_step(comm, 77, 5) == 0);

    /* a different collective: all-reduce on rank 0, all-gather elsewhere */
    if (rank_ == 0)
        CHECK_STATUS(comm->ops->all_reduce(comm, in, out, 64, ACX_DTYPE_FLOAT32, ACX_OP_SUM),
                     ACX_ERR_INVALID_ARG,
                     "collective mismatch on the shared-memory path: rank 0 called all-reduce, "
                     "rank 1 called all-gather");
    else
        CHECK_STATUS(comm->ops->all_gather(comm, in, out, 64, ACX_DTYPE_FLOAT32),
                     ACX_ERR_INVALID_ARG,
                     "collective mismatch on the shared-memory path: rank 0 called all-reduce, "
                     "rank 1 called all-gather");
    CHECK(still_in_step(comm, 64, 6) == 0);

    /* non-blocking: the start succeeds, the wait refuses */
    acx_coll_req_t *req = NULL;
    CHECK_OK(comm->ops->all_reduce_start(comm, in, out, rank_ == 0 ? 256 : 128, ACX_DTYPE_FLOAT32,
                                         ACX_OP_SUM, &req));
    CHECK_STATUS(comm->ops->wait(req), ACX_ERR_INVALID_ARG,
                 "all-reduce count mismatch on the shared-memory path: rank 0 passed 256, rank 1 "
                 "passed 128");
    CHECK(still_in_step(comm, 256, 7) == 0);

    acx_comm_destroy(comm);
    free(in);
    free(out);
    return 0;
error:
    acx_comm_destroy(comm);
    free(in);
    free(out);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 120, &rank_, &size_);
    int failed = 0;
    failed |= acx_test_run_case("segment: created on one node, switches, bad values", test_create);
    failed |= acx_test_run_case("segment bytes in acx_memory_stats", test_memory_stats);
    failed |= acx_test_run_case("sum = rank-order sum, default slot", test_sum_default_slot);
    failed |= acx_test_run_case("sum = rank-order sum, 64-byte slots", test_sum_slot_64);
    failed |= acx_test_run_case("sum = rank-order sum, 4160-byte slots", test_sum_slot_4160);
    failed |= acx_test_run_case("reduce-scatter, all-gather = MPI, default slot",
                                test_rs_ag_default_slot);
    failed |=
        acx_test_run_case("reduce-scatter, all-gather = MPI, 64-byte slots", test_rs_ag_slot_64);
    failed |= acx_test_run_case("reduce-scatter, all-gather = MPI, 4160-byte slots",
                                test_rs_ag_slot_4160);
    failed |=
        acx_test_run_case("16-bit sum/avg = one rounding, default slot", test_half_default_slot);
    failed |= acx_test_run_case("16-bit sum/avg = one rounding, 64-byte slots", test_half_slot_64);
    failed |=
        acx_test_run_case("16-bit sum/avg = one rounding, 4160-byte slots", test_half_slot_4160);
    failed |= acx_test_run_case("what the shared-memory path takes", test_not_taken);
    failed |= acx_test_run_case("MPI backend: sum, start, avg", test_backend);
    failed |= acx_test_run_case("MPI backend: reduce-scatter, all-gather, 16-bit; shm and MPI",
                                test_backend_rs_ag);
    failed |= acx_test_run_case("MPI progress while waiting in shared memory",
                                test_progress_while_waiting);
    failed |= acx_test_run_case("split communicators reduce at once", test_split);
    failed |= acx_test_run_case("ops in flight complete in start order", test_in_flight);
    failed |=
        acx_test_run_case("start never blocks: orders across communicators", test_cross_comm_order);
    failed |= acx_test_run_case("mismatched count, dtype, op or collective: refused on every rank",
                                test_mismatch);
    MPI_Finalize();
    return failed ? 1 : 0;
}

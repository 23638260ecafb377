/*
 * tests/unit/test_busbw.c — the collective benchmarks' bandwidth formulas
 * (benchmarks/osu_bw.c) on numbers derived by hand from nccl-tests'
 * definitions (doc/PERFORMANCE.md): algbw = S / t in 1e9 B/s, where S is the
 * buffer for all-reduce and broadcast and the whole ranks x Size array for
 * all-gather and reduce-scatter; busbw = algbw x 2(n-1)/n (all-reduce),
 * x (n-1)/n (all-gather, reduce-scatter), x 1 (broadcast). One case is a row
 * of published nccl-tests output (all_reduce_perf, 2 GPUs: 8192 B in 8.69 us
 * printed as 0.94 GB/s algbw and busbw).
 */
#include <math.h>

#include "acx_test.h"
#include "benchmarks/osu_bw.h"

#define MIB 1048576u

/* algbw and busbw of one case against hand-computed values. */
static int bw_is(osu_op_t op, size_t bytes, int n, double seconds, double algbw, double busbw) {
    double a = -1.0, b = -1.0;
    osu_bandwidth(op, bytes, n, seconds, &a, &b);
    CHECK_CLOSE(a, algbw, 1e-12, 0.0);
    CHECK_CLOSE(b, busbw, 1e-12, 0.0);
    return 0;
error:
    fprintf(stderr, "  (op %d, %zu bytes, %d ranks, %g s)\n", (int)op, bytes, n, seconds);
    return 1;
}

static int test_factors(void) {
    TESTING("bus bandwidth factors of each op and world size");
    CHECK(osu_busbw_factor(OSU_ALL_REDUCE, 1) == 0.0);
    CHECK(osu_busbw_factor(OSU_ALL_REDUCE, 2) == 1.0);
    CHECK_CLOSE(osu_busbw_factor(OSU_ALL_REDUCE, 3), 4.0 / 3.0, 1e-15, 0.0);
    CHECK(osu_busbw_factor(OSU_ALL_REDUCE, 4) == 1.5);
    CHECK(osu_busbw_factor(OSU_ALL_REDUCE, 8) == 1.75);
    CHECK(osu_busbw_factor(OSU_ALL_GATHER, 1) == 0.0);
    CHECK(osu_busbw_factor(OSU_ALL_GATHER, 2) == 0.5);
    CHECK(osu_busbw_factor(OSU_ALL_GATHER, 4) == 0.75);
    CHECK_CLOSE(osu_busbw_factor(OSU_REDUCE_SCATTER, 3), 2.0 / 3.0, 1e-15, 0.0);
    CHECK(osu_busbw_factor(OSU_REDUCE_SCATTER, 8) == 0.875);
    CHECK(osu_busbw_factor(OSU_BROADCAST, 1) == 1.0);
    CHECK(osu_busbw_factor(OSU_BROADCAST, 64) == 1.0);
    CHECK(osu_busbw_factor(OSU_ALL_REDUCE, 0) < 0.0);
    CHECK(osu_busbw_factor((osu_op_t)42, 4) < 0.0);
    /* the rated bytes: whole array for the gathers/scatters */
    CHECK(osu_rated_bytes(OSU_ALL_REDUCE, MIB, 4) == (double)MIB);
    CHECK(osu_rated_bytes(OSU_BROADCAST, MIB, 4) == (double)MIB);
    CHECK(osu_rated_bytes(OSU_ALL_GATHER, MIB, 4) == 4.0 * MIB);
    CHECK(osu_rated_bytes(OSU_REDUCE_SCATTER, 1000, 3) == 3000.0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_golden(void) {
    TESTING("algbw and busbw on hand-computed cases");
    /* 1 MiB in 100 us: 1048576 / 1e-4 / 1e9 = 10.48576 GB/s */
    if (bw_is(OSU_ALL_REDUCE, MIB, 4, 100e-6, 10.48576, 15.72864)) goto error; /* x 6/4 */
    if (bw_is(OSU_ALL_REDUCE, MIB, 1, 100e-6, 10.48576, 0.0)) goto error;
    if (bw_is(OSU_ALL_REDUCE, 8, 2, 0.5e-6, 0.016, 0.016)) goto error;  /* x 1 */
    if (bw_is(OSU_ALL_REDUCE, 3000, 3, 1e-3, 0.003, 0.004)) goto error; /* x 4/3 */
    /* all-gather: 4 x 1 MiB gathered in 100 us = 41.94304 GB/s, x 3/4 */
    if (bw_is(OSU_ALL_GATHER, MIB, 4, 100e-6, 41.94304, 31.45728)) goto error;
    if (bw_is(OSU_ALL_GATHER, MIB, 1, 100e-6, 10.48576, 0.0)) goto error;
    /* reduce-scatter: 3 x 1000 B scattered in 1 us = 3 GB/s, x 2/3 */
    if (bw_is(OSU_REDUCE_SCATTER, 1000, 3, 1e-6, 3.0, 2.0)) goto error;
    if (bw_is(OSU_REDUCE_SCATTER, 4096, 8, 2e-6, 16.384, 14.336)) goto error; /* 32768 B, x 7/8 */
    /* broadcast: busbw = algbw whatever n */
    if (bw_is(OSU_BROADCAST, MIB, 8, 100e-6, 10.48576, 10.48576)) goto error;
    /* no time, no bandwidth (and no division by zero) */
    if (bw_is(OSU_ALL_REDUCE, MIB, 4, 0.0, 0.0, 0.0)) goto error;
    if (bw_is(OSU_ALL_GATHER, MIB, 4, -1.0, 0.0, 0.0)) goto error;
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_nccl_tests_row(void) {
    TESTING("a published nccl-tests all_reduce_perf row (2 ranks)");
    double a, b;
    osu_bandwidth(OSU_ALL_REDUCE, 8192, 2, 8.69e-6, &a, &b);
    CHECK(round(a * 100.0) / 100.0 == 0.94); /* printed with 2 decimals */
    CHECK(round(b * 100.0) / 100.0 == 0.94);
    osu_bandwidth(OSU_ALL_REDUCE, 8192, 2, 8.69e-6, NULL, NULL); /* outputs are optional */
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_factors();
    failed += test_golden();
    failed += test_nccl_tests_row();
    return failed ? 1 : 0;
}

/*
 * tests/unit/test_rng.c — the counter-based RNG: Philox-4x32-10 against
 * Random123's known-answer vectors, the documented address layout, the
 * FNV-1a hash against its published vectors, and the statistics of the
 * derived draws (uniform, normal, bounded integers, permutations).
 *
 * Statistical bounds are 5 standard errors of the sample statistic, or the
 * chi-square quantile with upper tail 1e-6 (computed from the regularized
 * gamma function): a correct generator fails a given fixed-seed check with
 * probability about 1e-6, while a biased one (wrong bit extraction, modulo
 * bias, an off-by-one in Fisher–Yates) moves the statistic by far more.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acx_test.h"
#include "base/rng.h"

/* ---- Philox and addressing ---- */

static int test_kat(void) {
    TESTING("Philox-4x32-10 known-answer vectors (Random123)");
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                       {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
    static const uint32_t want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        acx_philox4x32_10(ctr[v], key[v], out);
        for (int w = 0; w < 4; w++)
            CHECK(out[w] == want[v][w]);
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_layout(void) {
    TESTING("acx_rng_block address layout and FNV-1a vectors");
    /* purpose 0, key 0: stream = splitmix64 finalizer of 0 + golden, which is
     * the first output of splitmix64 seeded with 0: 0xe220a8397b1dcdaf. */
    uint64_t seed = 0x0123456789abcdefull, index = 0x0000000500000007ull;
    uint32_t ctr[4] = {0x00000007, 0x00000005, 0x7b1dcdaf, 0xe220a839};
    uint32_t k[2] = {0x89abcdef, 0x01234567};
    uint32_t a[4], b[4];
    acx_philox4x32_10(ctr, k, a);
    acx_rng_block(seed, 0, 0, index, b);
    CHECK(memcmp(a, b, sizeof a) == 0);

    /* Different purpose, key, seed or index: a different block. */
    uint32_t c[4];
    acx_rng_block(seed, 1, 0, index, c);
    CHECK(memcmp(b, c, sizeof b) != 0);
    acx_rng_block(seed, 0, 1, index, c);
    CHECK(memcmp(b, c, sizeof b) != 0);
    acx_rng_block(seed + 1, 0, 0, index, c);
    CHECK(memcmp(b, c, sizeof b) != 0);
    acx_rng_block(seed, 0, 0, index + 1, c);
    CHECK(memcmp(b, c, sizeof b) != 0);

    /* FNV-1a 64 reference vectors (Fowler/Noll/Vo test suite). */
    CHECK(acx_hash64("") == 0xcbf29ce484222325ull);
    CHECK(acx_hash64("a") == 0xaf63dc4c8601ec8cull);
    CHECK(acx_hash64("foobar") == 0x85944171f73967e8ull);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- real-valued draws ---- */

static int test_u01(void) {
    TESTING("acx_rng_u01: 53 bits, strictly inside (0, 1)");
    CHECK(acx_rng_u01(0, 0) > 0.0);
    CHECK(acx_rng_u01(0, 0) == 0x1p-54);
    CHECK(acx_rng_u01(0, 0x800) == 0x1p-53); /* lowest bit used from lo is bit 11 */
    CHECK(acx_rng_u01(0, 0x7ff) == 0x1p-54); /* bits below 11 are dropped */
    CHECK(acx_rng_u01(0x80000000u, 0) == 0.5);
    CHECK(acx_rng_u01(0xffffffffu, 0xffffffffu) == 1.0 - 0x1p-53);
    CHECK(acx_rng_u01(0xffffffffu, 0xffffffffu) < 1.0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

#define NSTAT 1000000

static int test_uniform_stats(void) {
    TESTING("uniform: mean 1/2, variance 1/12 over 1e6 draws (5 sigma)");
    double sum = 0, sum2 = 0;
    for (uint64_t i = 0; i < NSTAT; i++) {
        double u = acx_rng_uniform(42, ACX_RNG_USER, 7, i);
        CHECK(u > 0.0 && u < 1.0);
        sum += u;
        sum2 += u * u;
    }
    double mean = sum / NSTAT, var = sum2 / NSTAT - mean * mean;
    /* se(mean) = sqrt(1/12 / n) = 2.89e-4; se(var) = sqrt((1/80 - 1/144) / n) = 7.45e-5 */
    CHECK_CLOSE(mean, 0.5, 0, 5 * 2.887e-4);
    CHECK_CLOSE(var, 1.0 / 12.0, 0, 5 * 7.454e-5);

    /* Two streams are uncorrelated: se(corr) ~ 1/sqrt(n) = 1e-3. */
    double sxy = 0, sx = 0, sy = 0, sxx = 0, syy = 0;
    for (uint64_t i = 0; i < NSTAT; i++) {
        double x = acx_rng_uniform(42, ACX_RNG_USER, 1, i);
        double y = acx_rng_uniform(42, ACX_RNG_USER, 2, i);
        sx += x, sy += y, sxy += x * y, sxx += x * x, syy += y * y;
    }
    double cov = sxy / NSTAT - (sx / NSTAT) * (sy / NSTAT);
    double corr = cov / sqrt((sxx / NSTAT - (sx / NSTAT) * (sx / NSTAT)) *
                             (syy / NSTAT - (sy / NSTAT) * (sy / NSTAT)));
    CHECK_CLOSE(corr, 0.0, 0, 5e-3);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_normal_stats(void) {
    TESTING("normal: mean 0, variance 1, tails over 1e6 draws (5 sigma)");
    double sum = 0, sum2 = 0, sum4 = 0;
    long tail = 0;
    for (uint64_t i = 0; i < NSTAT; i++) {
        double z = acx_rng_normal(123, ACX_RNG_USER, 99, i);
        CHECK(isfinite(z));
        sum += z;
        sum2 += z * z;
        sum4 += z * z * z * z;
        tail += fabs(z) > 1.959963984540054;
    }
    double mean = sum / NSTAT, var = sum2 / NSTAT - mean * mean;
    /* se(mean) = 1/sqrt(n) = 1e-3; se(var) = sqrt(2/n) = 1.414e-3;
     * E z^4 = 3 with se sqrt((105 - 9)/n) = 9.8e-3;
     * P(|z| > 1.96) = 0.05 with se sqrt(0.05*0.95/n) = 2.18e-4. */
    CHECK_CLOSE(mean, 0.0, 0, 5 * 1e-3);
    CHECK_CLOSE(var, 1.0, 0, 5 * 1.414e-3);
    CHECK_CLOSE(sum4 / NSTAT, 3.0, 0, 5 * 9.8e-3);
    CHECK_CLOSE((double)tail / NSTAT, 0.05, 0, 5 * 2.18e-4);
    /* The same address gives the same value. */
    CHECK(acx_rng_normal(123, ACX_RNG_USER, 99, 17) == acx_rng_normal(123, ACX_RNG_USER, 99, 17));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- integers and permutations ---- */

static int test_below(void) {
    TESTING("acx_rng_below: range, consumption, chi-square uniformity");
    static const uint64_t bounds[] = {
        1, 2, 3, 7, 10, 1000, (1ull << 33) + 1, (1ull << 63) + 1, UINT64_MAX};
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
        uint64_t index = 0;
        for (int i = 0; i < 2000; i++) {
            uint64_t before = index;
            uint64_t r = acx_rng_below(5, ACX_RNG_USER, b, &index, bounds[b]);
            CHECK(r < bounds[b]);
            CHECK(index > before); /* at least one block per draw */
            /* Replaying from the same index gives the same value and index. */
            uint64_t again = before;
            CHECK(acx_rng_below(5, ACX_RNG_USER, b, &again, bounds[b]) == r);
            CHECK(again == index);
        }
    }

    /* Small bound: no rejection in practice, so the value is the high half of
     * x * bound with x = (w0 << 32) | w1 of the block at the index. */
    {
        uint64_t index = 11;
        uint32_t w[4];
        acx_rng_block(9, ACX_RNG_SHUFFLE, 3, 11, w);
        uint64_t x = ((uint64_t)w[0] << 32) | w[1];
        uint64_t want = (uint64_t)(((unsigned __int128)x * 6) >> 64);
        CHECK(acx_rng_below(9, ACX_RNG_SHUFFLE, 3, &index, 6) == want);
        CHECK(index == 12);
    }

    /* Bound just above 2^63: about half the 64-bit draws are rejected, so
     * 1000 draws consume about 2000 blocks (binomial: 1000 / 0.5 +- 5 sigma). */
    {
        uint64_t index = 0, hi = 0;
        for (int i = 0; i < 1000; i++)
            hi += acx_rng_below(1, ACX_RNG_USER, 0, &index, (1ull << 63) + 1) >= (1ull << 62);
        CHECK(index > 1700 && index < 2300);
        CHECK_CLOSE((double)hi / 1000, 0.5, 0, 5 * 0.0159); /* half the range */
    }

    /* Chi-square over 10 cells, 100000 draws: 9 dof, P(chi2 > 44.81) = 1e-6. */
    {
        long count[10] = {0};
        uint64_t index = 0;
        for (int i = 0; i < 100000; i++)
            count[acx_rng_below(77, ACX_RNG_USER, 0, &index, 10)]++;
        double chi2 = 0;
        for (int c = 0; c < 10; c++)
            chi2 += (count[c] - 10000.0) * (count[c] - 10000.0) / 10000.0;
        CHECK(chi2 < 44.81);
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int is_permutation(const int64_t *p, int64_t n) {
    char *seen = calloc((size_t)n + 1, 1);
    int ok = seen != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]])
            ok = 0;
        else
            seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static int test_permutation(void) {
    TESTING("acx_rng_permutation: valid, deterministic, key-dependent, uniform");
    enum { N = 1000 };
    int64_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    CHECK(a != NULL && b != NULL);
    acx_rng_permutation(42, ACX_RNG_SHUFFLE, 0, N, a);
    CHECK(is_permutation(a, N));
    acx_rng_permutation(42, ACX_RNG_SHUFFLE, 0, N, b);
    CHECK(memcmp(a, b, N * sizeof *a) == 0);
    acx_rng_permutation(42, ACX_RNG_SHUFFLE, 1, N, b); /* next epoch */
    CHECK(is_permutation(b, N));
    CHECK(memcmp(a, b, N * sizeof *a) != 0);
    acx_rng_permutation(43, ACX_RNG_SHUFFLE, 0, N, b); /* other seed */
    CHECK(memcmp(a, b, N * sizeof *a) != 0);
    long fixed = 0;
    for (int i = 0; i < N; i++)
        fixed += a[i] == i;
    CHECK(fixed < 10); /* fixed points ~ Poisson(1): P(>= 10) ~ 1e-7 */

    /* Fisher–Yates driven by below(i + 1) itself: j for i = N-1 is the first
     * draw of the stream, so a[N-1] = below(N) from index 0. */
    uint64_t index = 0;
    CHECK(a[N - 1] == (int64_t)acx_rng_below(42, ACX_RNG_SHUFFLE, 0, &index, N));

    acx_rng_permutation(1, ACX_RNG_SHUFFLE, 0, 0, a); /* n = 0: nothing to do */
    acx_rng_permutation(1, ACX_RNG_SHUFFLE, 0, 1, a);
    CHECK(a[0] == 0);

    /* All 6 orders of 3 items equally likely over 60000 keys: 5 dof,
     * P(chi2 > 35.89) = 1e-6. */
    long count[6] = {0};
    for (uint64_t key = 0; key < 60000; key++) {
        int64_t p[3];
        acx_rng_permutation(7, ACX_RNG_SHUFFLE, key, 3, p);
        CHECK(is_permutation(p, 3));
        int code = (int)(p[0] * 3 + p[1]); /* p[0], p[1] determine the order */
        static const int slot[9] = {-1, 0, 1, 2, -1, 3, 4, 5, -1};
        CHECK(slot[code] >= 0);
        count[slot[code]]++;
    }
    double chi2 = 0;
    for (int c = 0; c < 6; c++)
        chi2 += (count[c] - 10000.0) * (count[c] - 10000.0) / 10000.0;
    CHECK(chi2 < 35.89);
    free(a);
    free(b);
    PASSED();
    return 0;
error:
    free(a);
    free(b);
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(120);
    int failed = 0;
    failed += test_kat();
    failed += test_layout();
    failed += test_u01();
    failed += test_uniform_stats();
    failed += test_normal_stats();
    failed += test_below();
    failed += test_permutation();
    return failed ? 1 : 0;
}

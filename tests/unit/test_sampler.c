/*
 * tests/unit/test_sampler.c — the distributed sampler (io/sampler.c) without
 * MPI: every rank of a world is simulated by calling the sampler with r =
 * 0..W-1. Checks hand-derived batches for small cases, then sweeps N, W,
 * batch size, shuffle and the three last-batch modes for the invariants of
 * acx/data.h: shares are disjoint and cover the data exactly once
 * (drop_last: exactly floor(N/G)*G distinct rows), even_batches gives every
 * rank the same number of full batches with trailing padding that wraps
 * around the permutation, and epochs reshuffle deterministically.
 */
#include <stdint.h>
#include <stdlib.h>

#include "io/sampler.h"
#include "base/rng.h"
#include "tests/acx_test.h"

enum { MODE_DROP_LAST, MODE_EVEN, MODE_NEITHER, MODE_COUNT };
static const char *const mode_name[MODE_COUNT] = {"drop_last", "even_batches", "neither"};

/* One rank's epoch, flattened: batch sizes, padding counts and the rows. */
typedef struct {
    int64_t num_batches;
    int64_t *size, *padding; /* [num_batches] */
    int64_t *rows;           /* [num_batches x b], row j of batch g at g*b + j */
} epoch_t;

static void epoch_free(epoch_t *e) {
    free(e->size);
    free(e->padding);
    free(e->rows);
}

/* Run rank r's sampler for one epoch. Returns the sampler's status. */
static acx_status_t run_epoch(int64_t n, int64_t b, int w, int r, int shuffle, int mode,
                              uint64_t seed, int64_t epoch, epoch_t *out) {
    acx_sampler_t s;
    acx_status_t st =
        acx_sampler_init(&s, n, b, w, r, shuffle, mode == MODE_DROP_LAST, mode == MODE_EVEN, seed);
    if (st != ACX_OK) return st;
    acx_sampler_set_epoch(&s, epoch);
    int64_t nb = acx_sampler_num_batches(&s);
    out->num_batches = nb;
    out->size = calloc((size_t)nb + 1, sizeof(int64_t));
    out->padding = calloc((size_t)nb + 1, sizeof(int64_t));
    out->rows = calloc((size_t)(nb * b) + 1, sizeof(int64_t));
    for (int64_t g = 0; g < nb; g++)
        acx_sampler_batch(&s, g, out->rows + g * b, &out->size[g], &out->padding[g]);
    acx_sampler_fini(&s);
    return ACX_OK;
}

/* ---- hand-derived cases (no shuffle: the permutation is the identity) ---- */

/* Compare rank r's epoch with expected rows, given as rows per batch with -1
 * ending each batch and -2 ending the list; pads[] per batch. */
static int expect_rank(int64_t n, int64_t b, int w, int r, int mode, const int64_t *expected,
                       const int64_t *pads, int64_t expected_batches) {
    epoch_t e = {0};
    CHECK_OK(run_epoch(n, b, w, r, 0, mode, 7, 0, &e));
    CHECK(e.num_batches == expected_batches);
    int64_t k = 0;
    for (int64_t g = 0; g < expected_batches; g++) {
        int64_t j = 0;
        for (; expected[k] >= 0; k++, j++) {
            CHECK(j < e.size[g]);
            CHECK(e.rows[g * b + j] == expected[k]);
        }
        k++; /* the -1 */
        CHECK(e.size[g] == j);
        CHECK(e.padding[g] == pads[g]);
    }
    CHECK(expected[k] == -2);
    epoch_free(&e);
    return 0;
error:
    epoch_free(&e);
    return 1;
}

static int test_hand_cases(void) {
    TESTING("sampler: hand-derived batches (N=10/7/1, W=3/4)");
    /* N=10, W=3, b=2, even: G=6, one full global batch, m=4.
     * batch 1 positions 6..11 → rows 6,7 | 8,9 | 10%10=0, 11%10=1 (padding) */
    CHECK(!expect_rank(10, 2, 3, 0, MODE_EVEN, (int64_t[]){0, 1, -1, 6, 7, -1, -2},
                       (int64_t[]){0, 0}, 2));
    CHECK(!expect_rank(10, 2, 3, 1, MODE_EVEN, (int64_t[]){2, 3, -1, 8, 9, -1, -2},
                       (int64_t[]){0, 0}, 2));
    CHECK(!expect_rank(10, 2, 3, 2, MODE_EVEN, (int64_t[]){4, 5, -1, 0, 1, -1, -2},
                       (int64_t[]){0, 2}, 2));
    /* same, drop_last: only the first global batch */
    CHECK(!expect_rank(10, 2, 3, 2, MODE_DROP_LAST, (int64_t[]){4, 5, -1, -2}, (int64_t[]){0}, 1));
    /* same, neither: rank 2 has nothing in the last global batch → 1 batch */
    CHECK(!expect_rank(10, 2, 3, 1, MODE_NEITHER, (int64_t[]){2, 3, -1, 8, 9, -1, -2},
                       (int64_t[]){0, 0}, 2));
    CHECK(!expect_rank(10, 2, 3, 2, MODE_NEITHER, (int64_t[]){4, 5, -1, -2}, (int64_t[]){0}, 1));
    /* N=10, W=4, b=3, even: G=12 > N, positions 9,10,11 → rows 9,0,1 */
    CHECK(!expect_rank(10, 3, 4, 3, MODE_EVEN, (int64_t[]){9, 0, 1, -1, -2}, (int64_t[]){2}, 1));
    /* N=7, W=4, b=3, neither: 0,1,2 | 3,4,5 | 6 | (nothing) */
    CHECK(!expect_rank(7, 3, 4, 2, MODE_NEITHER, (int64_t[]){6, -1, -2}, (int64_t[]){0}, 1));
    CHECK(!expect_rank(7, 3, 4, 3, MODE_NEITHER, (int64_t[]){-2}, (int64_t[]){0}, 0));
    /* N=1, W=4, b=3, even: every position wraps to row 0; rank 0 has one real */
    CHECK(!expect_rank(1, 3, 4, 0, MODE_EVEN, (int64_t[]){0, 0, 0, -1, -2}, (int64_t[]){2}, 1));
    CHECK(!expect_rank(1, 3, 4, 3, MODE_EVEN, (int64_t[]){0, 0, 0, -1, -2}, (int64_t[]){3}, 1));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_errors(void) {
    TESTING("sampler: drop_last with N < G, N = 0, bad arguments");
    acx_sampler_t s;
    CHECK_STATUS(acx_sampler_init(&s, 5, 3, 2, 0, 1, 1, 0, 1), ACX_ERR_FORMAT,
                 "dataset has 5 samples, fewer than one global batch of 6 "
                 "(batch_size 3 x world size 2) with drop_last");
    /* drop_last with drop_last and even_batches both set: drop_last wins */
    CHECK_STATUS(acx_sampler_init(&s, 5, 3, 2, 1, 1, 1, 1, 1), ACX_ERR_FORMAT, "drop_last");
    CHECK_STATUS(acx_sampler_init(&s, 0, 3, 2, 0, 1, 0, 1, 1), ACX_ERR_FORMAT, "no samples");
    CHECK_STATUS(acx_sampler_init(&s, 10, 0, 2, 0, 1, 0, 1, 1), ACX_ERR_INVALID_ARG,
                 "batch_size 0");
    CHECK_STATUS(acx_sampler_init(&s, 10, 2, 2, 2, 1, 0, 1, 1), ACX_ERR_INVALID_ARG, "rank 2");
    /* even_batches with N < G is fine (it pads) */
    CHECK_OK(acx_sampler_init(&s, 5, 3, 2, 1, 1, 0, 1, 1));
    CHECK(acx_sampler_num_batches(&s) == 1);
    acx_sampler_fini(&s);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- invariants over a sweep ---- */

/* The reference order: the permutation defined in acx/data.h. */
static void reference_perm(int64_t n, int shuffle, uint64_t seed, int64_t epoch, int64_t *perm) {
    if (shuffle)
        acx_rng_permutation(seed, ACX_RNG_SHUFFLE, (uint64_t)epoch, n, perm);
    else
        for (int64_t i = 0; i < n; i++)
            perm[i] = i;
}

static int check_config(int64_t n, int64_t b, int w, int shuffle, int mode, uint64_t seed,
                        int64_t epoch, int64_t *perm, int *seen) {
    int64_t g_size = b * w, full = n / g_size, m = n % g_size;
    epoch_t e[4] = {{0}};
    int nr = 0;
    reference_perm(n, shuffle, seed, epoch, perm);

    if (mode == MODE_DROP_LAST && full == 0) {
        acx_sampler_t s;
        CHECK_STATUS(acx_sampler_init(&s, n, b, w, 0, shuffle, 1, 0, seed), ACX_ERR_FORMAT,
                     "fewer than one global batch");
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        seen[i] = 0;
    int64_t real_total = 0;
    for (int r = 0; r < w; r++, nr++) {
        CHECK_OK(run_epoch(n, b, w, r, shuffle, mode, seed, epoch, &e[r]));
        /* what this rank should have in the last global batch, from the picture
         * in sampler.c: its positions [r*b, (r+1)*b) against the remainder m */
        int64_t real_last = m - r * b < 0 ? 0 : m - r * b > b ? b : m - r * b;
        int64_t expect_nb = mode == MODE_DROP_LAST ? full
                            : m == 0               ? full
                            : mode == MODE_EVEN    ? full + 1
                                                   : full + (real_last > 0);
        CHECK(e[r].num_batches == expect_nb);
        for (int64_t g = 0; g < e[r].num_batches; g++) {
            int last_incomplete = g == full; /* only exists when m > 0 and not drop_last */
            int64_t sz = e[r].size[g], pad = e[r].padding[g];
            if (mode == MODE_NEITHER) {
                CHECK(pad == 0);
                CHECK(sz == (last_incomplete ? real_last : b));
                CHECK(sz > 0);
            } else {
                CHECK(sz == b);
                CHECK(pad == (last_incomplete ? b - real_last : 0));
            }
            for (int64_t j = 0; j < sz; j++) {
                int64_t row = e[r].rows[g * b + j];
                CHECK(row >= 0 && row < n);
                /* stream position of this sample; padding wraps around perm */
                int64_t q = g * g_size + r * b + j;
                if (j < sz - pad) {
                    CHECK(q < n);
                    CHECK(row == perm[q]);
                    seen[row]++;
                    real_total++;
                } else {
                    CHECK(q >= n);
                    CHECK(row == perm[q % n]);
                }
            }
        }
    }
    if (mode == MODE_EVEN)
        for (int r = 1; r < w; r++)
            CHECK(e[r].num_batches == e[0].num_batches);
    if (mode == MODE_DROP_LAST) {
        /* exactly floor(N/G)*G distinct rows, none twice */
        CHECK(real_total == full * g_size);
        for (int64_t i = 0; i < n; i++)
            CHECK(seen[i] <= 1);
    } else {
        /* every row exactly once among the non-padding samples */
        CHECK(real_total == n);
        for (int64_t i = 0; i < n; i++)
            CHECK(seen[i] == 1);
    }
    for (int r = 0; r < nr; r++)
        epoch_free(&e[r]);
    return 0;
error:
    fprintf(stderr, "  config: N=%lld b=%lld W=%d shuffle=%d %s epoch=%lld\n", (long long)n,
            (long long)b, w, shuffle, mode_name[mode], (long long)epoch);
    for (int r = 0; r <= nr && r < 4; r++)
        epoch_free(&e[r]);
    return 1;
}

static int test_sweep(void) {
    TESTING("sampler: coverage/padding invariants, N x W x b x modes");
    static const int64_t ns[] = {1, 7, 10, 64, 100, 1000, 60000};
    static const int64_t bs[] = {1, 3, 8, 64};
    int64_t *perm = malloc(60000 * sizeof *perm);
    int *seen = malloc(60000 * sizeof *seen);
    int failed = 0, configs = 0;
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
        for (int w = 1; w <= 4; w++)
            for (size_t bi = 0; bi < sizeof bs / sizeof *bs; bi++)
                for (int shuffle = 0; shuffle <= 1; shuffle++)
                    for (int mode = 0; mode < MODE_COUNT; mode++) {
                        /* epoch 3 on large N keeps the sweep fast but still
                         * exercises a non-zero epoch key */
                        int64_t epoch = ns[ni] >= 1000 ? 3 : (int64_t)(configs % 3);
                        failed |= check_config(ns[ni], bs[bi], w, shuffle, mode, 12345, epoch, perm,
                                               seen);
                        configs++;
                    }
    free(perm);
    free(seen);
    CHECK(configs == 7 * 4 * 4 * 2 * 3);
    CHECK(!failed);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- epochs ---- */

static int test_epochs(void) {
    TESTING("sampler: epochs reshuffle; same (seed, epoch) same order");
    enum { N = 100 };
    acx_sampler_t a, c;
    int64_t e0[N], e1[N], tmp[N], size, pad;
    CHECK_OK(acx_sampler_init(&a, N, N, 1, 0, 1, 0, 1, 99));
    CHECK_OK(acx_sampler_init(&c, N, N, 1, 0, 1, 0, 1, 99));
    acx_sampler_set_epoch(&a, 0);
    acx_sampler_batch(&a, 0, e0, &size, &pad);
    CHECK(size == N && pad == 0);
    acx_sampler_set_epoch(&a, 1);
    acx_sampler_batch(&a, 0, e1, &size, &pad);
    /* a shuffle is a permutation; epochs 0 and 1 differ; epoch 0 is not the identity */
    int differ = 0, moved = 0;
    for (int i = 0; i < N; i++) {
        differ += e0[i] != e1[i];
        moved += e0[i] != i;
    }
    CHECK(differ > 0);
    CHECK(moved > 0);
    /* a separate sampler with the same (seed, epoch) gives the same order,
     * and going back to epoch 0 reproduces it */
    acx_sampler_set_epoch(&c, 1);
    acx_sampler_batch(&c, 0, tmp, &size, &pad);
    for (int i = 0; i < N; i++)
        CHECK(tmp[i] == e1[i]);
    acx_sampler_set_epoch(&a, 0);
    acx_sampler_batch(&a, 0, tmp, &size, &pad);
    for (int i = 0; i < N; i++)
        CHECK(tmp[i] == e0[i]);
    /* order is the documented one: acx_rng_permutation(seed, SHUFFLE, epoch) */
    acx_rng_permutation(99, ACX_RNG_SHUFFLE, 1, N, tmp);
    for (int i = 0; i < N; i++)
        CHECK(tmp[i] == e1[i]);
    acx_sampler_fini(&a);
    acx_sampler_fini(&c);

    /* another seed, another order */
    CHECK_OK(acx_sampler_init(&a, N, N, 1, 0, 1, 0, 1, 100));
    acx_sampler_batch(&a, 0, tmp, &size, &pad);
    differ = 0;
    for (int i = 0; i < N; i++)
        differ += tmp[i] != e0[i];
    CHECK(differ > 0);
    acx_sampler_fini(&a);

    /* without shuffle every epoch is the identity */
    CHECK_OK(acx_sampler_init(&a, 10, 10, 1, 0, 0, 0, 1, 99));
    for (int64_t ep = 0; ep < 3; ep++) {
        acx_sampler_set_epoch(&a, ep);
        acx_sampler_batch(&a, 0, tmp, &size, &pad);
        CHECK(size == 10);
        for (int i = 0; i < 10; i++)
            CHECK(tmp[i] == i);
    }
    acx_sampler_fini(&a);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* Token windows, by hand: N = 11, T = 5 -> windows [0..5], [5..10]; every
 * token but the first is a target exactly once; a remainder shorter than a
 * window is not used. */
static int test_token_windows(void) {
    TESTING("token windows: count, starts, targets cover the stream");
    CHECK(acx_token_num_windows(11, 5) == 2);
    CHECK(acx_token_num_windows(10, 5) == 1); /* tokens 5..9 lack their last target */
    CHECK(acx_token_num_windows(6, 5) == 1);
    CHECK(acx_token_num_windows(5, 5) == 0); /* fewer than T + 1 */
    CHECK(acx_token_num_windows(1001, 10) == 100);
    CHECK(acx_token_num_windows(100, 1) == 99);
    CHECK(acx_token_num_windows(100, 0) == 0 && acx_token_num_windows(0, 4) == 0);
    /* seq_len + 1 would overflow: no window, not a wrapped comparison */
    CHECK(acx_token_num_windows(1001, INT64_MAX) == 0 &&
          acx_token_num_windows(INT64_MAX, INT64_MAX) == 0);
    CHECK(acx_token_window_start(0, 5) == 0 && acx_token_window_start(1, 5) == 5);
    CHECK(acx_token_window_start(99, 10) == 990);
    for (int64_t n = 2; n < 60; n++)
        for (int64_t t = 1; t < 9; t++) {
            int64_t nw = acx_token_num_windows(n, t);
            int target[64] = {0};
            for (int64_t w = 0; w < nw; w++) {
                int64_t s = acx_token_window_start(w, t);
                CHECK(s >= 0 && s + t <= n - 1); /* the window's T + 1 tokens exist */
                for (int64_t k = 1; k <= t; k++)
                    target[s + k]++;
            }
            /* targets: tokens 1 .. nw*T once each, nothing else */
            for (int64_t i = 0; i < n; i++)
                CHECK(target[i] == (i >= 1 && i <= nw * t));
            /* maximal: one more window would not fit */
            CHECK(acx_token_window_start(nw, t) + t > n - 1);
        }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* An epoch resumed inside a global batch: N = 10, b = 2, W = 3 (G = 6). */
static int test_start(void) {
    TESTING("sampler: epoch starting at a stream position (resume)");
    acx_sampler_t s[3];
    int64_t idx[2], size, pad;
    for (int r = 0; r < 3; r++)
        CHECK_OK(acx_sampler_init(&s[r], 10, 2, 3, r, 0, 0, 1, 1));
    for (int r = 0; r < 3; r++) {
        /* start 4: positions 4..9, one full global batch, no padding */
        acx_sampler_set_start(&s[r], 4);
        CHECK(acx_sampler_num_batches(&s[r]) == 1);
        acx_sampler_batch(&s[r], 0, idx, &size, &pad);
        CHECK(size == 2 && pad == 0 && idx[0] == 4 + 2 * r && idx[1] == 5 + 2 * r);
        /* start 5: positions 5..9 then padding wraps to the epoch's start */
        acx_sampler_set_start(&s[r], 5);
        CHECK(acx_sampler_num_batches(&s[r]) == 1);
        acx_sampler_batch(&s[r], 0, idx, &size, &pad);
        CHECK(size == 2 && idx[0] == 5 + 2 * r && idx[1] == (6 + 2 * r) % 10);
        CHECK(pad == (r == 2 ? 1 : 0));
        /* start 0 again: the whole epoch, 2 batches */
        acx_sampler_set_start(&s[r], 0);
        CHECK(acx_sampler_num_batches(&s[r]) == 2);
        acx_sampler_fini(&s[r]);
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(120);
    int failed = 0;
    failed |= test_hand_cases();
    failed |= test_errors();
    failed |= test_sweep();
    failed |= test_epochs();
    failed |= test_token_windows();
    failed |= test_start();
    return failed ? 1 : 0;
}

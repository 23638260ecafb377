/*
 * tests/unit/test_memory_estimate.c — acx_memory_estimate
 * (sharding/memory_estimate.c) against numbers worked out by hand in the
 * comments below for every strategy, with and without mixed precision and
 * with every reduce_dtype; the host layout against the ZeRO paper's
 * mixed-precision Adam totals when the unit is tiny (FULL_SHARD's 16P/N
 * reached, NO_SHARD's 20P and SHARD_GRAD_OP's 4P + 16P/N above the paper's
 * 16P and 2P + 14P/N: float32 compute copies); padding of units and of
 * shards; the all-gather's 16-bit send buffer; that the cap on gathered
 * units no longer changes FULL_SHARD's peak;
 * and every argument error, which must name the field and its value and
 * leave the output untouched.
 *
 * Notation as in memory_estimate.c: P numel, U largest unit, S shard group,
 * Sh shard elements, Up = S * ceil(U / S), pb all-gather bytes (4, or 2
 * under bf16/fp16), rb reduce bytes (4, or 2 for a 16-bit reduce_dtype),
 * snd = pb * ceil(U / S) when pb = 2 else 0, K optimizer states. Compute
 * copies and full gradients are 4 bytes always. FULL_SHARD's transient is
 * 4U (the unit in use) + pb*Up + snd (one all-gather in flight) + rb*Up
 * (one reduce-scatter), whatever limit_all_gathers says.
 */
#include <stdint.h>

#include "tests/acx_test.h"

/* A model of P elements whose largest unit is U, on N ranks, fp32 AdamW,
 * fp32 reduction, two units gathered at most, four units. */
static acx_memory_model_t model(int64_t P, int64_t U, int N, int strategy) {
    return (acx_memory_model_t){.numel = P,
                                .largest_unit = U,
                                .shard_numel = 0,
                                .world_size = N,
                                .ranks_per_node = 0,
                                .strategy = strategy,
                                .mixed_precision = ACX_MP_NO,
                                .optimizer_states = 2,
                                .limit_all_gathers = 2,
                                .num_units = 4,
                                .reduce_dtype = ACX_REDUCE_FP32};
}

/* est equals the six expected numbers (total given separately, so that
 * the sum is checked too). */
static int same(const acx_memory_estimate_t *e, int64_t params, int64_t grads, int64_t master,
                int64_t optimizer, int64_t transient, int64_t total) {
    if (e->params == params && e->grads == grads && e->master == master &&
        e->optimizer == optimizer && e->transient == transient && e->total == total)
        return 1;
    fprintf(stderr,
            "\n  got      params %lld grads %lld master %lld optimizer %lld transient %lld "
            "total %lld\n  expected params %lld grads %lld master %lld optimizer %lld "
            "transient %lld total %lld\n",
            (long long)e->params, (long long)e->grads, (long long)e->master,
            (long long)e->optimizer, (long long)e->transient, (long long)e->total,
            (long long)params, (long long)grads, (long long)master, (long long)optimizer,
            (long long)transient, (long long)total);
    return 0;
}

/* ---- fp32 ---- */

static int test_fp32(void) {
    TESTING("fp32 AdamW, P=1000 U=300 N=4, every strategy");
    acx_memory_estimate_t e;
    acx_memory_model_t m;

    /* NO_SHARD: params 4*1000; grads 4*1000; master 0 (the params are the
     * master); optimizer 4*2*1000; transient 0. 4000+4000+8000 = 16000. */
    m = model(1000, 300, 4, ACX_NO_SHARD);
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 4000, 4000, 0, 8000, 0, 16000));

    /* SHARD_GRAD_OP: Sh = 250, Up = 4*ceil(300/4) = 300.
     * params 4000; grads 4*300 + 4*250 = 2200; master 4*250 = 1000;
     * optimizer 4*2*250 = 2000; transient max(one reduce-scatter 4*300 =
     * 1200, the two all-gathers after the step 2*4*300 = 2400) = 2400.
     * 4000+2200+1000+2000+2400 = 11600. */
    m = model(1000, 300, 4, ACX_SHARD_GRAD_OP);
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 4000, 2200, 1000, 2000, 2400, 11600));

    /* FULL_SHARD: params 0; grads, master, optimizer as above; transient
     * 4*300 + 4*300 + 4*300 = 3600. 2200+1000+2000+3600 = 8800. */
    m = model(1000, 300, 4, ACX_FULL_SHARD);
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 2200, 1000, 2000, 3600, 8800));

    /* HYBRID_SHARD with ranks_per_node 0 (= world size) is FULL_SHARD. */
    m = model(1000, 300, 4, ACX_HYBRID_SHARD);
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 2200, 1000, 2000, 3600, 8800));

    /* HYBRID_SHARD on 8 ranks, 4 per node: shards over S = 4, the same. */
    m = model(1000, 300, 8, ACX_HYBRID_SHARD);
    m.ranks_per_node = 4;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 2200, 1000, 2000, 3600, 8800));

    /* ... and 2 per node: S = 2, Sh = 500, Up = 2*150 = 300.
     * grads 1200 + 2000 = 3200; master 2000; optimizer 4000; transient
     * 1200 + 1200 + 1200 = 3600. 3200+2000+4000+3600 = 12800. */
    m.ranks_per_node = 2;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 3200, 2000, 4000, 3600, 12800));

    /* ranks_per_node does not change the other strategies: FULL_SHARD on 8
     * shards over all 8. Sh = 125, Up = 8*ceil(300/8) = 8*38 = 304.
     * grads 1200 + 500 = 1700; master 500; optimizer 1000; transient
     * 1200 + 4*304 + 4*304 = 3632. 1700+500+1000+3632 = 6832. */
    m = model(1000, 300, 8, ACX_FULL_SHARD);
    m.ranks_per_node = 2;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 1700, 500, 1000, 3632, 6832));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- mixed precision ---- */

static int test_mixed(void) {
    TESTING("bf16/fp16 AdamW, fp32 reduction, P=1000 U=300 N=4, every strategy");
    acx_memory_estimate_t e;
    acx_memory_model_t m;

    for (int mp = ACX_MP_BF16; mp <= ACX_MP_FP16; mp++) {
        /* NO_SHARD: params 4*1000 (float32 compute copies); grads 4*1000;
         * master 4*1000; optimizer 8*1000. 4000+4000+4000+8000 = 20000 =
         * 20P, not the paper's 16P. */
        m = model(1000, 300, 4, ACX_NO_SHARD);
        m.mixed_precision = mp;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 4000, 4000, 4000, 8000, 0, 20000));

        /* SHARD_GRAD_OP: Sh = 250, Up = 300, ceil(U/S) = 75.
         * params 4000; grads 4*300 + 4*250 = 2200; master 1000; optimizer
         * 2000; transient max(one fp32 reduce-scatter 4*300 = 1200,
         * two bf16 all-gathers 2*(2*300 + 2*75) = 1500) = 1500.
         * 4000+2200+1000+2000+1500 = 10700. */
        m.strategy = ACX_SHARD_GRAD_OP;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 4000, 2200, 1000, 2000, 1500, 10700));

        /* FULL_SHARD: params 0; grads 2200; master 1000; optimizer 2000;
         * transient 4*300 + (2*300 + 2*75) + 4*300 = 3150.
         * 2200+1000+2000+3150 = 8350. */
        m.strategy = ACX_FULL_SHARD;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 0, 2200, 1000, 2000, 3150, 8350));
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- reduce_dtype ---- */

static int test_reduce_dtype(void) {
    TESTING("16-bit reduce_dtype, with and without mixed precision");
    acx_memory_estimate_t e;
    acx_memory_model_t m;

    for (int rd = ACX_REDUCE_BF16; rd <= ACX_REDUCE_FP16; rd++) {
        /* bf16 params, 16-bit reduction, P=1000 U=300 N=4.
         * NO_SHARD: grads 4*1000 + a 2*1000 wire buffer = 6000;
         * 4000+6000+4000+8000 = 22000. */
        m = model(1000, 300, 4, ACX_NO_SHARD);
        m.mixed_precision = ACX_MP_BF16;
        m.reduce_dtype = rd;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 4000, 6000, 4000, 8000, 0, 22000));

        /* SHARD_GRAD_OP: transient max(2*300 = 600, 2*(2*300 + 2*75) =
         * 1500) = 1500: the all-gathers with their send buffers are the
         * peak. 4000+2200+1000+2000+1500 = 10700. */
        m.strategy = ACX_SHARD_GRAD_OP;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 4000, 2200, 1000, 2000, 1500, 10700));

        /* FULL_SHARD: transient 1200 + (600 + 150) + 2*300 = 2550.
         * 2200+1000+2000+2550 = 7750. */
        m.strategy = ACX_FULL_SHARD;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 0, 2200, 1000, 2000, 2550, 7750));

        /* fp32 params, 16-bit reduction (the two are independent).
         * NO_SHARD: master 0, grads 4000 + 2000; 4000+6000+8000 = 18000. */
        m = model(1000, 300, 4, ACX_NO_SHARD);
        m.reduce_dtype = rd;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 4000, 6000, 0, 8000, 0, 18000));
        /* SHARD_GRAD_OP: transient max(600, fp32 all-gathers without send
         * buffer 2*4*300 = 2400) = 2400; total 11600. */
        m.strategy = ACX_SHARD_GRAD_OP;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 4000, 2200, 1000, 2000, 2400, 11600));
        /* FULL_SHARD: 1200 + 1200 + 600 = 3000; total 8200. */
        m.strategy = ACX_FULL_SHARD;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 0, 2200, 1000, 2000, 3000, 8200));
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* With a one-element unit (U = 1, so Up = N, ceil(U/N) = 1) the unit's
 * gradient buffer is 4 bytes and the transient buffers are a few bytes:
 * what remains is the model-state count of the ZeRO paper (Rajbhandari et
 * al. SC'20, figure 1, mixed-precision Adam, K = 12). P = 8,000,000, N = 8
 * (P/N = 1,000,000), AdamW:
 *   baseline 16P        = 128,000,000; acx NO_SHARD on the host 4P compute
 *                         copies + 4P grads + 4P master + 8P = 20P
 *                       = 160,000,000 (22P = 176,000,000 with a bf16
 *                         wire buffer)
 *   ZeRO-3   16P/N      =  16,000,000 = acx FULL_SHARD
 *   ZeRO-2   2P + 14P/N =  30,000,000; acx SHARD_GRAD_OP 4P + 16P/N
 *                       =  48,000,000 (float32 compute copies, fp32
 *                         gradient shard)
 * (total - transient - 4U, U = 1). */
static int test_paper(void) {
    TESTING("mixed precision against the ZeRO paper (tiny unit)");
    const int64_t P = 8000000, N = 8;
    acx_memory_estimate_t e;
    acx_memory_model_t m = model(P, 1, (int)N, ACX_NO_SHARD);
    m.mixed_precision = ACX_MP_BF16;

    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(e.total == 20 * P);
    CHECK(e.total == 160000000);
    CHECK(e.total - 16 * P == 4 * P); /* 2 + 2 bytes more than the paper */
    m.reduce_dtype = ACX_REDUCE_BF16;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(e.total == 176000000);

    m = model(P, 1, (int)N, ACX_FULL_SHARD);
    m.mixed_precision = ACX_MP_BF16;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(e.total - e.transient - 4 == 16 * P / N);
    CHECK(e.total - e.transient - 4 == 16000000);
    /* the split: no parameters at rest, a 4-byte gradient shard */
    CHECK(e.params == 0 && e.grads - 4 == 4 * P / N && e.master + e.optimizer == 12 * P / N);
    /* transient: the unit in use 4*1 (float32 copy), one all-gather in
     * flight 2*8 (bf16 staging) + 2*1 (send buffer), one fp32
     * reduce-scatter staging 4*8 */
    CHECK(e.transient == 4 + 16 + 2 + 32);

    m.strategy = ACX_HYBRID_SHARD; /* 16 ranks, nodes of 8: 16P/8 again */
    m.world_size = 16;
    m.ranks_per_node = 8;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(e.total - e.transient - 4 == 16 * P / 8);

    m = model(P, 1, (int)N, ACX_SHARD_GRAD_OP);
    m.mixed_precision = ACX_MP_FP16;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(e.total - e.transient - 4 == 4 * P + 16 * P / N);
    CHECK(e.total - e.transient - 4 == 48000000);
    /* max(one fp32 reduce-scatter 4*8 = 32, two fp16 all-gathers
     * 2*(2*8 + 2*1) = 36) */
    CHECK(e.transient == 36);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- padding ---- */

static int test_padding(void) {
    TESTING("padded units and shards (7x3 weight + 7 bias on N=4)");
    acx_memory_estimate_t e;
    acx_memory_model_t m;

    /* A unit of 301 elements on 4 ranks pads to Up = 4*76 = 304.
     * SHARD_GRAD_OP fp32: grads 4*301 + 4*250 = 2204; transient (the
     * all-gathers after the step) 2*4*304 = 2432; total 4000+2204+1000+2000+2432 = 11636. */
    m = model(1000, 301, 4, ACX_SHARD_GRAD_OP);
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 4000, 2204, 1000, 2000, 2432, 11636));
    /* FULL_SHARD: transient 4*301 + 4*304 + 4*304 = 3636;
     * total 2204+1000+2000+3636 = 8840. */
    m.strategy = ACX_FULL_SHARD;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 2204, 1000, 2000, 3636, 8840));
    /* bf16: the send buffer is one rank's padded piece, 2*ceil(301/4) =
     * 2*76 = 152 bytes. FULL_SHARD, fp32 reduction: transient
     * 4*301 + (2*304 + 152) + 4*304 = 3180; total 2204+1000+2000+3180 =
     * 8384. */
    m.mixed_precision = ACX_MP_BF16;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 2204, 1000, 2000, 3180, 8384));
    /* SHARD_GRAD_OP, bf16 reduction: transient max(2*2*304 = 1216,
     * 2*(2*304 + 152) = 1520) = 1520; total 4000+2204+1000+2000+1520 =
     * 10724. Without the send buffer it would be 1216. */
    m.strategy = ACX_SHARD_GRAD_OP;
    m.reduce_dtype = ACX_REDUCE_BF16;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 4000, 2204, 1000, 2000, 1520, 10724));

    /* One unit: fc.weight [7, 3] and fc.bias [7], P = 28, on 4 ranks. Rank 0
     * owns ceil(7/4) = 2 rows of each: 2*3 + 2 = 8 elements, one more than
     * ceil(28/4) = 7. Up = 4*7 = 28.
     * Sh = 8: grads 4*28 + 4*8 = 144; master 32; optimizer 64;
     *         transient 4*28 + 4*28 + 4*28 = 336;
     *         total 144+32+64+336 = 576. */
    m = model(28, 28, 4, ACX_FULL_SHARD);
    m.num_units = 1;
    m.shard_numel = 8;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 144, 32, 64, 336, 576));
    /* Sh = 0 -> ceil(28/4) = 7: grads 112 + 28 = 140; master 28;
     * optimizer 56; total 140+28+56+336 = 560. */
    m.shard_numel = 0;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 140, 28, 56, 336, 560));
    /* The number of units unknown (0): the same (it no longer counts). */
    m.num_units = 0;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 140, 28, 56, 336, 560));
    /* Tied parameters: a unit of 10 elements with a shared unit keeps its
     * full gradient buffer (4*10 = 40) beside the largest unit's: grads
     * 140 + 40 = 180, total 600; NO_SHARD holds every gradient anyway. */
    m.shared_numel = 10;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 180, 28, 56, 336, 600));
    m.strategy = ACX_NO_SHARD;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(e.grads == 4 * 28);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- optimizers, gather limits, edge sizes ---- */

static int test_variants(void) {
    TESTING("SGD, momentum, limit_all_gathers 0, N=1, P=0");
    acx_memory_estimate_t e;
    acx_memory_model_t m;

    /* SGD (K=0), NO_SHARD fp32: 4000 + 4000 = 8000. Momentum (K=1): + 4000. */
    m = model(1000, 300, 4, ACX_NO_SHARD);
    m.optimizer_states = 0;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 4000, 4000, 0, 0, 0, 8000));
    m.optimizer_states = 1;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 4000, 4000, 0, 4000, 0, 12000));

    /* limit_all_gathers 0 (no cap) and 1 (no prefetch) give FULL_SHARD's
     * peak of the cap 2: acx prefetches one unit ahead, and without a
     * prefetch the acquired unit's own staging sits beside its full copy
     * during the copy-out. Transient 1200 + 1200 + 1200 = 3600; total
     * 2200+1000+2000+3600 = 8800. */
    m = model(1000, 300, 4, ACX_FULL_SHARD);
    m.limit_all_gathers = 0;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 2200, 1000, 2000, 3600, 8800));
    m.limit_all_gathers = 1;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 2200, 1000, 2000, 3600, 8800));

    /* One rank: the shard is the model. FULL_SHARD fp32: Sh = 1000, Up = 300;
     * grads 1200 + 4000 = 5200; master 4000; optimizer 8000; transient
     * 1200 + 1200 + 1200 = 3600; total 20800. */
    m = model(1000, 300, 1, ACX_FULL_SHARD);
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 5200, 4000, 8000, 3600, 20800));

    /* An empty model holds nothing under any strategy. */
    for (int s = ACX_NO_SHARD; s <= ACX_HYBRID_SHARD; s++) {
        m = model(0, 0, 4, s);
        m.mixed_precision = ACX_MP_BF16;
        m.reduce_dtype = ACX_REDUCE_BF16;
        CHECK_OK(acx_memory_estimate(&m, &e));
        CHECK(same(&e, 0, 0, 0, 0, 0, 0));
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- errors ---- */

/* The call fails with ACX_ERR_INVALID_ARG, the message holds `needle`, and
 * the output is untouched. */
static int fails(const acx_memory_model_t *m, const char *needle) {
    acx_memory_estimate_t e = {.total = -7};
    acx_status_t st = acx_memory_estimate(m, &e);
    if (st == ACX_ERR_INVALID_ARG && strstr(acx_last_error(), needle) != NULL && e.total == -7 &&
        e.params == 0)
        return 1;
    fprintf(stderr, "\n  status %d (%s), message '%s', expected '%s'; total %lld\n", (int)st,
            acx_status_string(st), acx_last_error(), needle, (long long)e.total);
    return 0;
}

static int test_errors(void) {
    TESTING("argument errors name the field and value");
    acx_memory_estimate_t e = {.total = -7};
    acx_memory_model_t ok = model(1000, 300, 8, ACX_HYBRID_SHARD), m;

    CHECK_STATUS(acx_memory_estimate(NULL, &e), ACX_ERR_INVALID_ARG, "m is NULL");
    CHECK_STATUS(acx_memory_estimate(&ok, NULL), ACX_ERR_INVALID_ARG, "est_p is NULL");
    CHECK(e.total == -7);

    m = ok, m.numel = -1;
    CHECK(fails(&m, "numel = -1"));
    m = ok, m.world_size = 0;
    CHECK(fails(&m, "world_size = 0"));
    m = ok, m.strategy = 4;
    CHECK(fails(&m, "strategy = 4"));
    m = ok, m.strategy = -1;
    CHECK(fails(&m, "strategy = -1"));
    m = ok, m.mixed_precision = 3;
    CHECK(fails(&m, "mixed_precision = 3"));
    m = ok, m.mixed_precision = -1;
    CHECK(fails(&m, "mixed_precision = -1"));
    m = ok, m.reduce_dtype = 3;
    CHECK(fails(&m, "reduce_dtype = 3 (expected an acx_reduce_dtype_t, 0..2)"));
    m = ok, m.reduce_dtype = -1;
    CHECK(fails(&m, "reduce_dtype = -1"));
    m = ok, m.ranks_per_node = 3;
    CHECK(fails(&m, "ranks_per_node = 3 (expected 0 or a divisor of world_size 8)"));
    m = ok, m.ranks_per_node = -2;
    CHECK(fails(&m, "ranks_per_node = -2"));
    m = ok, m.largest_unit = 1001;
    CHECK(fails(&m, "largest_unit = 1001 (expected 0..numel = 1000)"));
    m = ok, m.largest_unit = -1;
    CHECK(fails(&m, "largest_unit = -1"));
    m = ok, m.optimizer_states = -1;
    CHECK(fails(&m, "optimizer_states = -1"));
    m = ok, m.limit_all_gathers = -1;
    CHECK(fails(&m, "limit_all_gathers = -1"));
    m = ok, m.num_units = -1;
    CHECK(fails(&m, "num_units = -1"));
    m = ok, m.shared_numel = -1;
    CHECK(fails(&m, "shared_numel = -1"));
    m = ok, m.shared_numel = m.numel + 1;
    CHECK(fails(&m, "shared_numel"));
    /* shards of 1000 over 8 are 125..1000 elements */
    m = ok, m.shard_numel = 124;
    CHECK(fails(&m, "shard_numel = 124"));
    m = ok, m.shard_numel = 1001;
    CHECK(fails(&m, "shard_numel = 1001"));
    m = ok, m.shard_numel = -1;
    CHECK(fails(&m, "shard_numel = -1"));
    /* 2^62 elements at 4 bytes (with 8 bytes of AdamW state) overflow int64 */
    m = model(INT64_C(1) << 62, 1, 1, ACX_NO_SHARD);
    CHECK(fails(&m, "exceed int64"));
    /* the largest model that fits is accepted: 16 bytes x 2^58 = 2^62 */
    m = model(INT64_C(1) << 58, 1, 1, ACX_NO_SHARD);
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(e.total == INT64_C(1) << 62);
    /* 2^62 elements sharded over 2^30 ranks fit, though one replica would
     * not: bf16 FULL_SHARD, U = 1, Sh = 2^32, Up = 2^30, ceil(U/S) = 1,
     * grads 4 + 4*2^32; master 2^34; optimizer 8*2^32 = 2^35;
     * transient 4 + (2*2^30 + 2) + 4*2^30 = 2^31 + 2^32 + 6;
     * total 4 + 2^34 + 2^34 + 2^35 + 2^32 + 2^31 + 6
     *     = 2^36 + 2^32 + 2^31 + 10. */
    m = model(INT64_C(1) << 62, 1, 1 << 30, ACX_FULL_SHARD);
    m.mixed_precision = ACX_MP_BF16;
    CHECK_OK(acx_memory_estimate(&m, &e));
    CHECK(same(&e, 0, 4 + (INT64_C(1) << 34), INT64_C(1) << 34, INT64_C(1) << 35,
               (INT64_C(1) << 32) + (INT64_C(1) << 31) + 6,
               (INT64_C(1) << 36) + (INT64_C(1) << 32) + (INT64_C(1) << 31) + 10));
    m.strategy = ACX_SHARD_GRAD_OP; /* its float32 replica is 2^64 bytes */
    CHECK(fails(&m, "exceed int64"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_fp32();
    failed += test_mixed();
    failed += test_reduce_dtype();
    failed += test_paper();
    failed += test_padding();
    failed += test_variants();
    failed += test_errors();
    return failed ? 1 : 0;
}

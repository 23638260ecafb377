/*
 * tests/mpi/test_shard_memory.c — what each sharding strategy really holds
 * (acx_memory_stats) against what the ZeRO formulas say it should
 * (acx_memory_estimate fed with the exact model).
 *
 * A synthetic model of 6 units, each a [R, C] weight and an [R] bias with
 * row counts that do not divide by 2, 3 or 4 (plus a [3] vector that leaves
 * rank 3 empty), 1.47 M floats in all, trains 3 steps with AdamW under each
 * strategy, every unit acquired and released as an FSDP program does. The
 * gradients are a fixed pattern: the values do not matter here, only the
 * buffers. Peaks are restarted after prepare (steady state of training).
 *
 * With P = numel, U = the largest unit, S = the shard group (world size;
 * ranks_per_node under HYBRID_SHARD), Sh = sum over parameters of
 * ceil(R/S) x row_numel (rank 0's shard: it owns the full c rows of every
 * parameter), the checks, on every world size, with TOL = 8 KiB of slack for
 * bookkeeping:
 *   - at rest (after a step and zero_grad), over the ranks' maximum: params,
 *     master and optimizer state equal the estimate's; the gradients hold at
 *     least the reduced shard (4 Sh; NO_SHARD: the full 4 P) and at most the
 *     estimate (which adds one reusable unit buffer);
 *   - on every rank, every category's peak and the total peak are at most
 *     the estimate, and the total peak at least the persistent part;
 *   - FULL_SHARD and HYBRID_SHARD, on every rank: the total peak is at most
 *     16 Sh + 4 U + 4 U + 4 Ug + 4 Ug, with Ug = S x (the largest unit's
 *     padded segment), computed here from the shapes: the fp32 master,
 *     gradient shard and AdamW m, v (4 + 4 + 8 bytes per shard element),
 *     then at the peak in backward the unit in use (float32), its gradient
 *     buffer, the next unit's all-gather staging and one reduce-scatter
 *     staging; and the estimate's total is above the measured peak by less
 *     than one U (it counts the largest unit everywhere: not loose);
 *   - at 2 ranks or more, FULL_SHARD's total peak is below NO_SHARD's;
 *   - after acx_finalize nothing is left (current total 0, nothing cached);
 *   - the caching allocator keeps the freed unit buffers of the sharded
 *     strategies (cached > 0 at rest), within its bound: in use + cached at
 *     most the estimate + 1/8.
 * And full_shard drops a prefetch nobody acquired without allocating the
 * unit's full buffer (unacquired_prefetch, below).
 */
#include <stdint.h>

#include "tests/acx_test_mpi.h"

#define NUNITS 6
#define STEPS  3
#define TOL    (8 * 1024)

static int rank, world;

static const struct {
    int64_t rows, cols;
} wshape[NUNITS] = {{301, 800}, {257, 1000}, {199, 1200}, {403, 600}, {97, 2500}, {350, 700}};

/* ---- the model's sizes, computed here independently of acx ---- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Elements of unit u (its weight, its bias, and unit 5's extra [3] vector). */
static int64_t unit_numel(int u) {
    return wshape[u].rows * wshape[u].cols + wshape[u].rows + (u == NUNITS - 1 ? 3 : 0);
}

/* Rank 0's shard when rows are split over S ranks: ceil(R/S) rows of each. */
static int64_t shard_numel(int S) {
    int64_t n = 0;
    for (int u = 0; u < NUNITS; u++)
        n += ceil_div(wshape[u].rows, S) * wshape[u].cols + ceil_div(wshape[u].rows, S);
    return n + ceil_div(3, S);
}

/* Elements of unit u's padded segment: ceil(R/S) rows of every parameter. */
static int64_t segment(int u, int S) {
    int64_t c = ceil_div(wshape[u].rows, S);
    return c * wshape[u].cols + c + (u == NUNITS - 1 ? ceil_div(3, S) : 0);
}

/* ---- one training run under a strategy ---- */

typedef struct measured {
    acx_memory_stats_t rest;   /* after the last step and zero_grad */
    acx_memory_stats_t after;  /* after acx_finalize */
    acx_memory_stats_t before; /* before acx_init */
} measured_t;

static int run(int strategy, int rpn, measured_t *out) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    acx_accelerator_t *acc = NULL;
    acx_model_t *m;
    acx_unit_t *unit[NUNITS];
    acx_param_t *par[NUNITS][3] = {{0}};
    acx_optimizer_t *opt;
    cfg.seed = 7;
    cfg.sharding_strategy = strategy;
    if (rpn > 0) cfg.ranks_per_node = rpn;
    cfg.fsdp.limit_all_gathers = 2;
    CHECK_OK(acx_memory_stats(&out->before));
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    CHECK(acx_get_config(acc)->sharding_strategy == strategy);
    CHECK(rpn == 0 || acx_get_config(acc)->ranks_per_node == rpn);
    CHECK_OK(acx_model_create(acc, &m));
    for (int u = 0; u < NUNITS; u++) {
        char name[64];
        snprintf(name, sizeof name, "u%d", u);
        CHECK_OK(acx_model_add_unit(m, name, &unit[u]));
        snprintf(name, sizeof name, "u%d.weight", u);
        CHECK_OK(acx_unit_add_param(unit[u], name, 2, (int64_t[]){wshape[u].rows, wshape[u].cols},
                                    ACX_INIT_SPEC_UNIFORM(-0.01, 0.01), &par[u][0]));
        snprintf(name, sizeof name, "u%d.bias", u);
        CHECK_OK(acx_unit_add_param(unit[u], name, 1, (int64_t[]){wshape[u].rows},
                                    ACX_INIT_SPEC_ZEROS, &par[u][1]));
        if (u == NUNITS - 1)
            CHECK_OK(acx_unit_add_param(unit[u], "u5.scale", 1, (int64_t[]){3},
                                        ACX_INIT_SPEC_CONSTANT(1.0), &par[u][2]));
    }
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
    CHECK_OK(acx_adamw_create(m, &hp, &opt));
    CHECK_OK(acx_prepare(acc, m, opt, NULL));
    acx_memory_reset_peak();

    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(acx_accumulate_begin(acc));
        volatile float sink = 0;
        for (int u = 0; u < NUNITS; u++) { /* forward: every parameter is read */
            CHECK_OK(acx_unit_acquire(unit[u]));
            for (int k = 0; k < 3 && par[u][k] != NULL; k++) {
                const float *d = acx_param_data(par[u][k]);
                CHECK(d != NULL);
                sink += d[0] + d[acx_param_numel(par[u][k]) - 1];
            }
            CHECK_OK(acx_unit_release(unit[u]));
        }
        for (int u = NUNITS - 1; u >= 0; u--) { /* backward */
            CHECK_OK(acx_unit_acquire(unit[u]));
            for (int k = 0; k < 3 && par[u][k] != NULL; k++) {
                float *g = acx_param_grad(par[u][k]);
                CHECK(g != NULL);
                for (int64_t e = 0; e < acx_param_numel(par[u][k]); e++)
                    g[e] += 1e-4f * (float)((e + u) % 13 - 6);
            }
            CHECK_OK(acx_unit_grads_ready(unit[u]));
            CHECK_OK(acx_unit_release(unit[u]));
        }
        (void)sink;
        CHECK_OK(acx_backward_end(acc));
        CHECK_OK(acx_optimizer_step(opt));
        CHECK_OK(acx_optimizer_zero_grad(opt));
        CHECK_OK(acx_accumulate_end(acc));
    }
    CHECK_OK(acx_memory_stats(&out->rest));
    CHECK_OK(acx_finalize(acc));
    acc = NULL;
    CHECK_OK(acx_memory_stats(&out->after));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

/* ---- a prefetch nobody acquires ----
 *
 * full_shard with forward_prefetch: acquiring u0 starts u1's all-gather,
 * and the pass ends (acx_backward_end of the first of 2 accumulation
 * micro-steps, no synchronization) without acquiring u1. Dropping that
 * prefetch must allocate nothing — before, it allocated u1's full buffer
 * (4 x numel(u1) bytes, ~1 MB) and copied into it only to free it, a new
 * way to run out of memory at the end of a pass. So acx_backward_end's
 * total peak stays at the total before it (within TOL), and the staging
 * it held (4 x S x segment(u1) bytes) is freed. */
static int unacquired_prefetch(void) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    acx_accelerator_t *acc = NULL;
    acx_model_t *m;
    acx_unit_t *unit[2];
    acx_param_t *w[2];
    cfg.seed = 7;
    cfg.sharding_strategy = ACX_FULL_SHARD;
    cfg.fsdp.forward_prefetch = 1;
    cfg.fsdp.backward_prefetch = ACX_BACKWARD_NONE;
    cfg.fsdp.limit_all_gathers = 0;
    cfg.gradient_accumulation_steps = 2;
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    CHECK_OK(acx_model_create(acc, &m));
    for (int u = 0; u < 2; u++) {
        char name[64];
        snprintf(name, sizeof name, "u%d", u);
        CHECK_OK(acx_model_add_unit(m, name, &unit[u]));
        snprintf(name, sizeof name, "u%d.weight", u);
        CHECK_OK(acx_unit_add_param(unit[u], name, 2, (int64_t[]){wshape[u].rows, wshape[u].cols},
                                    ACX_INIT_SPEC_UNIFORM(-0.01, 0.01), &w[u]));
    }
    CHECK_OK(acx_prepare(acc, m, NULL, NULL));
    CHECK_OK(acx_accumulate_begin(acc));
    CHECK_OK(acx_unit_acquire(unit[0])); /* forward: starts u1's gather */
    CHECK(acx_param_data(w[0]) != NULL);
    CHECK_OK(acx_unit_release(unit[0]));
    CHECK_OK(acx_unit_acquire(unit[0])); /* backward of u0 only */
    float *g = acx_param_grad(w[0]);
    CHECK(g != NULL);
    g[0] += 1.0f;
    CHECK_OK(acx_unit_grads_ready(unit[0]));
    CHECK_OK(acx_unit_release(unit[0]));
    acx_memory_stats_t before, after;
    CHECK_OK(acx_memory_stats(&before));
    acx_memory_reset_peak();
    CHECK_OK(acx_backward_end(acc)); /* drops u1's prefetch */
    CHECK_OK(acx_memory_stats(&after));
    int64_t staging = 4 * world * (ceil_div(wshape[1].rows, world) * wshape[1].cols);
    if (after.peak_total > before.current_total + TOL ||
        after.current_total > before.current_total - staging + TOL) {
        fprintf(stderr,
                "\nrank %d: dropping the prefetch: total %lld bytes before, peak %lld, after "
                "%lld (expected peak <= before + %d, after <= before - %lld of staging)\n",
                rank, (long long)before.current_total, (long long)after.peak_total,
                (long long)after.current_total, TOL, (long long)staging);
        goto error;
    }
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

/* ---- the comparison ---- */

static const char *const cat_name[ACX_MEM_NUM_CATEGORIES] = {"params", "grads", "master",
                                                             "optimizer", "transient"};

static int64_t max_over_ranks(int64_t v) {
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    return v;
}

static char table[1024]; /* the last strategy's numbers, printed after its verdict */

/* Measure one strategy and hold it against the estimate; *peak_p = the
 * ranks' largest total peak. */
static int check_strategy(int strategy, int rpn, const char *label, int64_t *peak_p) {
    measured_t ms;
    acx_memory_estimate_t est;
    int S = strategy == ACX_HYBRID_SHARD ? rpn : world;
    int64_t P = 0, U = 0, Sh = shard_numel(S);
    for (int u = 0; u < NUNITS; u++) {
        P += unit_numel(u);
        if (unit_numel(u) > U) U = unit_numel(u);
    }
    acx_memory_model_t mm = {.numel = P,
                             .largest_unit = U,
                             .shard_numel = strategy == ACX_NO_SHARD ? 0 : Sh,
                             .world_size = world,
                             .ranks_per_node = strategy == ACX_HYBRID_SHARD ? rpn : 0,
                             .strategy = strategy,
                             .mixed_precision = ACX_MP_NO,
                             .optimizer_states = 2,
                             .limit_all_gathers = 2,
                             .num_units = NUNITS};
    CHECK_OK(acx_memory_estimate(&mm, &est));
    CHECK(run(strategy, rpn, &ms) == 0);

    const int64_t e[ACX_MEM_NUM_CATEGORIES] = {est.params, est.grads, est.master, est.optimizer,
                                               est.transient};
    int64_t cur_max[ACX_MEM_NUM_CATEGORIES], peak_max[ACX_MEM_NUM_CATEGORIES];
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++) {
        cur_max[c] = max_over_ranks(ms.rest.current[c]);
        peak_max[c] = max_over_ranks(ms.rest.peak[c]);
    }
    int64_t peak_total_max = max_over_ranks(ms.rest.peak_total);
    int64_t grads_rest = strategy == ACX_NO_SHARD ? est.grads : 4 * Sh;
    int64_t persistent = est.params + est.master + est.optimizer + grads_rest;
    {
        int len =
            snprintf(table, sizeof table,
                     "  %s, KiB: measured at rest / peak (max over ranks) vs estimate\n", label);
        for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++)
            len += snprintf(table + len, sizeof table - (size_t)len,
                            "    %-10s %9lld / %9lld  vs %9lld\n", cat_name[c],
                            (long long)(cur_max[c] / 1024), (long long)(peak_max[c] / 1024),
                            (long long)(e[c] / 1024));
        snprintf(table + len, sizeof table - (size_t)len,
                 "    %-10s %9s   %9lld  vs %9lld (persistent part %lld)\n", "total", "",
                 (long long)(peak_total_max / 1024), (long long)(est.total / 1024),
                 (long long)(persistent / 1024));
    }
    int bad = 0;
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (!bad) {                                                                            \
                fprintf(stderr, "\n[r%d] %s: ", rank, label);                                      \
                fprintf(stderr, __VA_ARGS__);                                                      \
            }                                                                                      \
            bad = 1;                                                                               \
        }                                                                                          \
    } while (0)
    /* nothing of an earlier run was left, nothing of this one is */
    EXPECT(ms.before.current_total == 0, "%lld bytes held before acx_init",
           (long long)ms.before.current_total);
    EXPECT(ms.after.current_total == 0, "%lld bytes still held after acx_finalize",
           (long long)ms.after.current_total);
    /* persistent state at rest, the largest rank: what the formula says */
    for (int c = ACX_MEM_PARAMS; c <= ACX_MEM_OPTIMIZER; c++) {
        if (c == ACX_MEM_GRADS) continue;
        EXPECT(llabs(cur_max[c] - e[c]) <= TOL, "%s at rest %lld bytes, estimate %lld", cat_name[c],
               (long long)cur_max[c], (long long)e[c]);
    }
    EXPECT(cur_max[ACX_MEM_GRADS] >= grads_rest - TOL && cur_max[ACX_MEM_GRADS] <= est.grads + TOL,
           "gradients at rest %lld bytes, expected the reduced shard %lld .. the estimate %lld",
           (long long)cur_max[ACX_MEM_GRADS], (long long)grads_rest, (long long)est.grads);
    /* every rank within the estimate, category by category and in total */
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++)
        EXPECT(ms.rest.peak[c] <= e[c] + TOL, "%s peak %lld bytes > estimate %lld", cat_name[c],
               (long long)ms.rest.peak[c], (long long)e[c]);
    EXPECT(ms.rest.peak_total <= est.total + TOL, "total peak %lld bytes > estimate %lld",
           (long long)ms.rest.peak_total, (long long)est.total);
    EXPECT(peak_total_max >= persistent - TOL, "total peak %lld bytes < the persistent part %lld",
           (long long)peak_total_max, (long long)persistent);
    if (strategy == ACX_FULL_SHARD || strategy == ACX_HYBRID_SHARD) {
        /* ZeRO-3's 16 bytes per shard element, then what is held in full at
         * the peak: the unit in use and its gradient buffer (4 U each), the
         * next unit's all-gather staging and the one reduce-scatter staging
         * (4 Ug each; fp32 on the wire here) */
        int64_t Ug = 0;
        for (int u = 0; u < NUNITS; u++)
            if (S * segment(u, S) > Ug) Ug = S * segment(u, S);
        int64_t bound = 16 * Sh + 4 * U + 4 * U + 4 * Ug + 4 * Ug;
        EXPECT(ms.rest.peak_total <= bound + TOL,
               "total peak %lld bytes > 16 Sh + 8 U + 8 Ug = %lld (%.3f x; U = %lld, Ug = %lld)",
               (long long)ms.rest.peak_total, (long long)bound,
               (double)ms.rest.peak_total / (double)bound, (long long)U, (long long)Ug);
        EXPECT(est.total - peak_total_max < 4 * U,
               "estimate %lld bytes is more than 4 U = %lld above the measured peak %lld",
               (long long)est.total, (long long)(4 * U), (long long)peak_total_max);
    }
    /* the caching allocator: the freed unit buffers are kept (sharded
     * strategies free them every step), in use + cached stays within the
     * estimate + 1/8 (its bound; plus a page of rounding per buffer), and
     * nothing is cached after acx_finalize */
    if (strategy != ACX_NO_SHARD)
        EXPECT(ms.rest.cached > 0, "no freed buffer cached at rest (cached %lld)",
               (long long)ms.rest.cached);
    EXPECT(ms.rest.current_total + ms.rest.cached <= est.total + est.total / 8 + 64 * 4096,
           "in use %lld + cached %lld bytes > estimate %lld + 1/8",
           (long long)ms.rest.current_total, (long long)ms.rest.cached, (long long)est.total);
    EXPECT(ms.after.cached == 0, "%lld bytes still cached after acx_finalize",
           (long long)ms.after.cached);
#undef EXPECT
    *peak_p = peak_total_max;
    return bad;
error:
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 280, &rank, &world);
    int failed = 0;
    int64_t peak[4] = {0};
    const int rpn = world == 4 ? 2 : 1;
    static const char *const names[4] = {"no_shard", "shard_grad_op", "full_shard", "hybrid_shard"};
    char what[160];
    for (int s = ACX_NO_SHARD; s <= ACX_HYBRID_SHARD; s++) {
        char label[64];
        if (s == ACX_HYBRID_SHARD)
            snprintf(label, sizeof label, "%s(rpn=%d)", names[s], rpn);
        else
            snprintf(label, sizeof label, "%s", names[s]);
        snprintf(what, sizeof what, "%s memory vs estimate, np=%d", label, world);
        TESTING(what);
        table[0] = '\0';
        failed |=
            acx_test_report(check_strategy(s, s == ACX_HYBRID_SHARD ? rpn : 0, label, &peak[s]));
        if (rank == 0) fputs(table, stdout);
    }
    if (world >= 2) {
        snprintf(what, sizeof what, "full_shard peak below no_shard's, np=%d", world);
        TESTING(what);
        int bad = !(peak[ACX_FULL_SHARD] > 0 && peak[ACX_FULL_SHARD] < peak[ACX_NO_SHARD]);
        if (bad && rank == 0)
            fprintf(stderr, "\nfull_shard peak %lld bytes, no_shard %lld\n",
                    (long long)peak[ACX_FULL_SHARD], (long long)peak[ACX_NO_SHARD]);
        failed |= acx_test_report(bad);
    }
    snprintf(what, sizeof what, "full_shard drops an unacquired prefetch without its buffer, np=%d",
             world);
    TESTING(what);
    failed |= acx_test_report(unacquired_prefetch());
    MPI_Finalize();
    return failed ? 1 : 0;
}

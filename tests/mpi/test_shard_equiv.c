/*
 * tests/mpi/test_shard_equiv.c — every sharding strategy computes the same
 * training as one rank in double precision; prefetching changes nothing;
 * global gradient clipping sees the whole model whatever the layout;
 * initial parameters do not depend on the world size or the strategy.
 *
 * The model is tests/mpi/shard_net.h's (awkward row counts: a [7,3] weight,
 * a scalar, [3] and [2] vectors that leave some ranks without rows), trained
 * 4 steps on a fixed global batch of 24, every unit acquired and released as
 * an FSDP program does. Run on 1, 2, 3 and 4 ranks (tests/mpi/shard_equiv.test);
 * every world size checks against the double reference itself, so the runs
 * do not depend on each other.
 *
 * Strategies: no_shard, shard_grad_op, full_shard and hybrid_shard with
 * ranks_per_node 2 on 4 ranks (two simulated nodes of two), else 1 and the
 * world size (every rank its own node / one node).
 *
 *   equivalence  SGD with momentum and AdamW, each with 1 and 2 accumulation
 *                micro-steps: every parameter (acx_param_gather) after 4 steps
 *                against the double reference, relative <= 1e-5, and against
 *                NO_SHARD in the same process, relative <= 1e-5. The gathered
 *                initial values are bitwise those of the initializer filled
 *                over all rows (acx_param_init_fill, rows 0..R): the same for
 *                every world size and strategy.
 *   prefetch     FULL_SHARD (and HYBRID_SHARD) under every forward_prefetch x
 *                backward_prefetch x limit_all_gathers: bitwise equal to the
 *                run without any prefetch.
 *   clip norm    after backward_end on each boundary: the infinity norm and
 *                the 2-norm (acx_clip_grad_norm) are the same bits on every
 *                rank and equal (relative 1e-6) the norm of the reference's
 *                gradient at acx's own parameters of that step; with
 *                max_norm below the norm, the training equals the clipped
 *                reference (1e-5), which differs from the unclipped one.
 *   clip value   acx_clip_grad_value: the training equals the reference with
 *                the mean gradient clamped.
 *   errors       max_norm < 0 or NaN, norm_type 3, clip_value < 0 ->
 *                ACX_ERR_INVALID_ARG; clipping before any backward or off a
 *                boundary -> ACX_ERR_STATE; FULL_SHARD parameters are not
 *                available outside acquire/release.
 */
#include <stdint.h>

#include "tests/acx_test_mpi.h"
#include "tests/mpi/shard_net.h"

#define STEPS   4
#define TOL_REF 1e-5 /* float training vs the double reference */
#define TOL_NS  1e-5 /* a strategy vs NO_SHARD */
#define MAXN    0.15 /* below every step's gradient norm (0.25 .. 0.56) */
#define CLIPV   0.05 /* clamps some gradient elements and leaves others */

static int rank, world;

/* ---- the strategies run at this world size ---- */

typedef struct strat {
    int strategy, rpn;
    char label[48];
} strat_t;

static strat_t strats[8];
static int num_strats;

static void add_strat(int strategy, int rpn, const char *label) {
    strat_t *s = &strats[num_strats++];
    s->strategy = strategy;
    s->rpn = rpn;
    if (rpn > 0)
        snprintf(s->label, sizeof s->label, "%s(rpn=%d)", label, rpn);
    else
        snprintf(s->label, sizeof s->label, "%s", label);
}

static void plan_strategies(void) {
    add_strat(ACX_NO_SHARD, 0, "no_shard");
    add_strat(ACX_SHARD_GRAD_OP, 0, "shard_grad_op");
    add_strat(ACX_FULL_SHARD, 0, "full_shard");
    if (world == 4) {
        add_strat(ACX_HYBRID_SHARD, 2, "hybrid_shard");
    } else {
        add_strat(ACX_HYBRID_SHARD, 1, "hybrid_shard");
        if (world > 1) add_strat(ACX_HYBRID_SHARD, world, "hybrid_shard");
    }
}

static sn_run_cfg_t run_cfg(const strat_t *s, int sgd, int accum) {
    return (sn_run_cfg_t){.strategy = s->strategy,
                          .ranks_per_node = s->rpn,
                          .sgd = sgd,
                          .accum = accum,
                          .fwd_prefetch = -1,
                          .bwd_prefetch = -1,
                          .limit_all_gathers = -1};
}

/* ---- one acx training run ---- */

typedef enum { CLIP_NONE, CLIP_NORM, CLIP_VALUE } clip_t;

typedef struct result {
    float init[SN_NP];         /* gathered after prepare */
    float start[STEPS][SN_NP]; /* gathered at the start of each step */
    float final[SN_NP];        /* gathered after STEPS steps */
    double norm2[STEPS], norminf[STEPS];
} result_t;

/* 0 when v is the same bits on every rank. Collective. */
static int same_on_all_ranks(double v) {
    double all[64];
    MPI_Allgather(&v, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    for (int r = 0; r < world; r++)
        if (memcmp(&all[r], &all[0], sizeof v) != 0) {
            fprintf(stderr, "\n[r%d] norm differs across ranks: rank 0 %.17g, rank %d %.17g\n",
                    rank, all[0], r, all[r]);
            return 1;
        }
    return 0;
}

static int train(const sn_run_cfg_t *rc, clip_t clip, result_t *res) {
    sn_net_t net = {0};
    float want_init[SN_NP];
    memset(res, 0, sizeof *res);
    CHECK_OK(sn_open(&net, rc));
    CHECK_OK(sn_gather(&net, res->init));
    sn_expected_init(want_init);
    for (int q = 0; q < SN_NPAR; q++)
        if (memcmp(res->init + sn_off[q], want_init + sn_off[q],
                   (size_t)(sn_off[q + 1] - sn_off[q]) * sizeof(float)) != 0) {
            fprintf(stderr, "\ninitial %s is not the initializer's over all rows (%.9g vs %.9g)\n",
                    sn_par[q].name, (double)res->init[sn_off[q]], (double)want_init[sn_off[q]]);
            TEST_ERROR;
        }
    for (int s = 0; s < STEPS; s++) {
        if (clip == CLIP_NORM) CHECK_OK(sn_gather(&net, res->start[s]));
        for (int mi = 0; mi < rc->accum; mi++) {
            CHECK_OK(acx_accumulate_begin(net.acc));
            CHECK(acx_sync_gradients(net.acc) == (mi == rc->accum - 1));
            CHECK_OK(sn_micro_step(&net, s, mi, rc->accum));
            CHECK_OK(acx_backward_end(net.acc));
            if (acx_sync_gradients(net.acc)) {
                if (clip == CLIP_NORM) {
                    /* max_norm = inf: the factor is 1, the gradients stay */
                    CHECK_OK(acx_clip_grad_norm(net.acc, INFINITY, INFINITY, &res->norminf[s]));
                    CHECK_OK(acx_clip_grad_norm(net.acc, MAXN, 2.0, &res->norm2[s]));
                    CHECK(same_on_all_ranks(res->norminf[s]) == 0);
                    CHECK(same_on_all_ranks(res->norm2[s]) == 0);
                } else if (clip == CLIP_VALUE) {
                    CHECK_OK(acx_clip_grad_value(net.acc, CLIPV));
                }
                CHECK_OK(acx_optimizer_step(net.opt));
                CHECK_OK(acx_optimizer_zero_grad(net.opt));
            }
            CHECK_OK(acx_accumulate_end(net.acc));
        }
    }
    CHECK(acx_step(net.acc) == STEPS);
    CHECK_OK(sn_gather(&net, res->final));
    sn_close(&net);
    return 0;
error:
    sn_close(&net);
    return 1;
}

/* ---- the reference training ---- */

static void ref_train(int sgd, clip_t clip, double *final) {
    sn_ref_t r = {0};
    float init[SN_NP];
    sn_expected_init(init);
    for (int e = 0; e < SN_NP; e++)
        r.p[e] = init[e];
    for (int s = 0; s < STEPS; s++) {
        double g[SN_NP], n2 = 0;
        sn_ref_grad(r.p, s, g);
        for (int e = 0; e < SN_NP; e++)
            n2 += g[e] * g[e];
        n2 = sqrt(n2);
        for (int e = 0; e < SN_NP; e++) {
            if (clip == CLIP_NORM && n2 > MAXN) g[e] *= MAXN / (n2 + 1e-6);
            if (clip == CLIP_VALUE) g[e] = g[e] > CLIPV ? CLIPV : g[e] < -CLIPV ? -CLIPV : g[e];
        }
        sn_ref_step(&r, g, sgd);
    }
    memcpy(final, r.p, sizeof r.p);
}

/* ---- equivalence ---- */

static const struct {
    const char *name;
    int sgd, accum;
} opt_cases[] = {{"sgd", 1, 1}, {"adamw", 0, 1}, {"sgd_accum2", 1, 2}, {"adamw_accum2", 0, 2}};
#define NUM_OPT_CASES 4

static float no_shard_final[NUM_OPT_CASES][SN_NP];
static double worst_ref, worst_ns;

static int equiv_case(int oc, const strat_t *s) {
    result_t res;
    double want[SN_NP];
    char what[160];
    snprintf(what, sizeof what, "%s %s np=%d", s->label, opt_cases[oc].name, world);
    sn_run_cfg_t rc = run_cfg(s, opt_cases[oc].sgd, opt_cases[oc].accum);
    CHECK(train(&rc, CLIP_NONE, &res) == 0);
    ref_train(opt_cases[oc].sgd, CLIP_NONE, want);
    CHECK(sn_compare_fd(what, res.final, want, TOL_REF, &worst_ref) == 0);
    if (s->strategy == ACX_NO_SHARD)
        memcpy(no_shard_final[oc], res.final, sizeof res.final);
    else
        CHECK(sn_compare_ff(what, res.final, no_shard_final[oc], TOL_NS, &worst_ns) == 0);
    return 0;
error:
    return 1;
}

/* ---- prefetch: timing only, never values ---- */

static int prefetch_case(const strat_t *s) {
    static result_t base, res;
    sn_run_cfg_t rc = run_cfg(s, 0, 2);
    rc.fwd_prefetch = 0;
    rc.bwd_prefetch = ACX_BACKWARD_NONE;
    rc.limit_all_gathers = 1;
    static const char *const bwd_name[] = {"backward_pre", "backward_post", "no_prefetch"};
    int bad = 0;
    CHECK(train(&rc, CLIP_NONE, &base) == 0);
    for (int fwd = 0; fwd <= 1; fwd++)
        for (int bwd = ACX_BACKWARD_PRE; bwd <= ACX_BACKWARD_NONE; bwd++)
            for (int lim = 0; lim <= 2; lim++) {
                if (fwd == 0 && bwd == ACX_BACKWARD_NONE && lim == 1) continue; /* the base */
                rc.fwd_prefetch = fwd;
                rc.bwd_prefetch = bwd;
                rc.limit_all_gathers = lim;
                CHECK(train(&rc, CLIP_NONE, &res) == 0);
                if (memcmp(res.final, base.final, sizeof base.final) != 0) {
                    fprintf(
                        stderr,
                        "\n%s forward_prefetch=%d %s limit_all_gathers=%d: parameters differ "
                        "from the run without prefetch (relative %.3g; must be bitwise equal)\n",
                        s->label, fwd, bwd_name[bwd], lim, sn_rel_ff(res.final, base.final, SN_NP));
                    bad = 1;
                }
            }
    return bad;
error:
    return 1;
}

/* ---- global gradient norm and value clipping ---- */

static int clip_norm_case(const strat_t *s) {
    static result_t res;
    double want[SN_NP], unclipped[SN_NP];
    char what[160];
    snprintf(what, sizeof what, "%s clipped SGD np=%d", s->label, world);
    sn_run_cfg_t rc = run_cfg(s, 1, 2);
    CHECK(train(&rc, CLIP_NORM, &res) == 0);
    for (int st = 0; st < STEPS; st++) {
        double p[SN_NP], g[SN_NP], n2 = 0, ninf = 0;
        for (int e = 0; e < SN_NP; e++)
            p[e] = res.start[st][e];
        sn_ref_grad(p, st, g);
        for (int e = 0; e < SN_NP; e++) {
            n2 += g[e] * g[e];
            if (fabs(g[e]) > ninf) ninf = fabs(g[e]);
        }
        n2 = sqrt(n2);
        CHECK_CLOSE(res.norm2[st], n2, 1e-6, 0);
        CHECK_CLOSE(res.norminf[st], ninf, 1e-6, 0);
        CHECK(res.norm2[st] > MAXN); /* the clipping below was active */
    }
    ref_train(1, CLIP_NORM, want);
    ref_train(1, CLIP_NONE, unclipped);
    /* the check can fail: clipping moved the result well beyond the tolerance */
    CHECK(sn_rel_fd(res.final, unclipped, SN_NP) > 1e-3);
    CHECK(sn_compare_fd(what, res.final, want, TOL_REF, &worst_ref) == 0);
    return 0;
error:
    return 1;
}

static int clip_value_case(const strat_t *s) {
    static result_t res;
    double want[SN_NP], unclipped[SN_NP];
    char what[160];
    snprintf(what, sizeof what, "%s value-clipped SGD np=%d", s->label, world);
    /* the reference clamps some elements of the first step and not others */
    {
        double p[SN_NP], g[SN_NP];
        int over = 0;
        sn_expected_init(res.init);
        for (int e = 0; e < SN_NP; e++)
            p[e] = res.init[e];
        sn_ref_grad(p, 0, g);
        for (int e = 0; e < SN_NP; e++)
            over += fabs(g[e]) > CLIPV;
        CHECK(over > 0 && over < SN_NP);
    }
    sn_run_cfg_t rc = run_cfg(s, 1, 1);
    CHECK(train(&rc, CLIP_VALUE, &res) == 0);
    ref_train(1, CLIP_VALUE, want);
    ref_train(1, CLIP_NONE, unclipped);
    CHECK(sn_rel_fd(res.final, unclipped, SN_NP) > 1e-3);
    CHECK(sn_compare_fd(what, res.final, want, TOL_REF, &worst_ref) == 0);
    return 0;
error:
    return 1;
}

/* ---- argument and state errors ---- */

static int errors_case(const strat_t *s) {
    sn_net_t net = {0};
    double norm = -7;
    sn_run_cfg_t rc = run_cfg(s, 1, 2);
    if (s->strategy == ACX_FULL_SHARD) {
        rc.fwd_prefetch = 0;
        rc.bwd_prefetch = ACX_BACKWARD_NONE;
    }
    CHECK_OK(sn_open(&net, &rc));
    /* before any backward */
    CHECK_STATUS(acx_clip_grad_norm(net.acc, 1.0, 2.0, &norm), ACX_ERR_STATE, "");
    CHECK_STATUS(acx_clip_grad_value(net.acc, 1.0), ACX_ERR_STATE, "");
    CHECK(norm == -7);
    /* micro-step 1 of 2: not a boundary */
    CHECK_OK(acx_accumulate_begin(net.acc));
    CHECK(!acx_sync_gradients(net.acc));
    CHECK_OK(sn_micro_step(&net, 0, 0, 2));
    CHECK_OK(acx_backward_end(net.acc));
    CHECK_STATUS(acx_clip_grad_norm(net.acc, 1.0, 2.0, &norm), ACX_ERR_STATE, "");
    CHECK_STATUS(acx_clip_grad_value(net.acc, 1.0), ACX_ERR_STATE, "");
    CHECK_OK(acx_accumulate_end(net.acc));
    /* micro-step 2: the boundary; bad arguments change nothing */
    CHECK_OK(acx_accumulate_begin(net.acc));
    CHECK(acx_sync_gradients(net.acc));
    CHECK_OK(sn_micro_step(&net, 0, 1, 2));
    CHECK_OK(acx_backward_end(net.acc));
    CHECK_STATUS(acx_clip_grad_norm(net.acc, -1.0, 2.0, &norm), ACX_ERR_INVALID_ARG, "");
    CHECK_STATUS(acx_clip_grad_norm(net.acc, NAN, 2.0, &norm), ACX_ERR_INVALID_ARG, "");
    CHECK_STATUS(acx_clip_grad_norm(net.acc, 1.0, 3.0, &norm), ACX_ERR_INVALID_ARG, "");
    CHECK_STATUS(acx_clip_grad_norm(net.acc, 1.0, 1.0, &norm), ACX_ERR_INVALID_ARG, "");
    CHECK_STATUS(acx_clip_grad_value(net.acc, -0.5), ACX_ERR_INVALID_ARG, "");
    CHECK_STATUS(acx_clip_grad_value(net.acc, NAN), ACX_ERR_INVALID_ARG, "");
    CHECK(norm == -7);
    /* the errors left the state alone: a valid call works */
    CHECK_OK(acx_clip_grad_norm(net.acc, 1e30, 2.0, &norm));
    CHECK(norm > 0 && isfinite(norm));
    CHECK_OK(acx_optimizer_step(net.opt));
    CHECK_OK(acx_optimizer_zero_grad(net.opt));
    CHECK_OK(acx_accumulate_end(net.acc));
    if (s->strategy == ACX_FULL_SHARD) {
        /* released units (nothing prefetched): no parameter values to hand out */
        for (int q = 0; q < SN_NPAR; q++)
            if (acx_param_data(net.p[q]) != NULL) {
                fprintf(stderr,
                        "\nfull_shard: acx_param_data(%s) outside acquire/release is not NULL\n",
                        sn_par[q].name);
                TEST_ERROR;
            }
    }
    sn_close(&net);
    return 0;
error:
    sn_close(&net);
    return 1;
}

/* ---- main ---- */

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 280, &rank, &world);
    plan_strategies();
    int failed = 0;
    char what[160];
    for (int oc = 0; oc < NUM_OPT_CASES; oc++)
        for (int i = 0; i < num_strats; i++) {
            snprintf(what, sizeof what, "%s %s == reference, np=%d", strats[i].label,
                     opt_cases[oc].name, world);
            TESTING(what);
            failed |= acx_test_report(equiv_case(oc, &strats[i]));
        }
    for (int i = 0; i < num_strats; i++) {
        if (strats[i].strategy != ACX_FULL_SHARD && strats[i].strategy != ACX_HYBRID_SHARD)
            continue;
        if (strats[i].strategy == ACX_HYBRID_SHARD && strats[i].rpn != (world == 4 ? 2 : world))
            continue;
        snprintf(what, sizeof what, "%s prefetch variants bitwise, np=%d", strats[i].label, world);
        TESTING(what);
        failed |= acx_test_report(prefetch_case(&strats[i]));
    }
    for (int i = 0; i < num_strats; i++) {
        snprintf(what, sizeof what, "%s clip_grad_norm (2, inf), np=%d", strats[i].label, world);
        TESTING(what);
        failed |= acx_test_report(clip_norm_case(&strats[i]));
        snprintf(what, sizeof what, "%s clip_grad_value, np=%d", strats[i].label, world);
        TESTING(what);
        failed |= acx_test_report(clip_value_case(&strats[i]));
    }
    for (int i = 0; i < num_strats; i++) {
        if (strats[i].strategy != ACX_NO_SHARD && strats[i].strategy != ACX_FULL_SHARD) continue;
        snprintf(what, sizeof what, "%s clipping errors, np=%d", strats[i].label, world);
        TESTING(what);
        failed |= acx_test_report(errors_case(&strats[i]));
    }
    if (rank == 0)
        printf("worst relative difference: vs reference %.3g, vs no_shard %.3g\n", worst_ref,
               worst_ns);
    MPI_Finalize();
    return failed ? 1 : 0;
}

/*
 * tests/mpi/test_mixed_precision.c — mixed precision under every sharding
 * strategy: the compute copies, 16-bit gradient reduction, fp16 dynamic loss
 * scaling (skips agreed by every rank, growth, the stop diagnostics, the
 * state in checkpoints) and clipping of scaled gradients.
 *
 * Expectations are computed here, independently of acx: the rounding to
 * bfloat16/float16 by a function of this file (double arithmetic and rint,
 * whose default rounding is to nearest even — not base/half.h's bit
 * manipulation), AdamW/SGD and the norms in double.
 *
 * The model: unit a = {a.w [7,3] (nn.Linear init), a.e [NE] (zeros)},
 * unit b = {b.w [2,5], b.s [1] (0.75)}; the program writes gradients
 * directly (no forward needed), each unit acquired, its gradients added,
 * reported ready and released, in backward order (b, then a).
 *
 *   compute copies   mixed_precision bf16 and fp16: after prepare and after
 *                    each of 2 SGD steps, acx_param_data (inside acquire)
 *                    equals, bit for bit, acx_param_gather (the fp32 master)
 *                    rounded by this file's function. The first step moves
 *                    a.e's master onto hand-picked values (ties of both
 *                    formats, fp16's overflow and subnormal boundaries, one
 *                    value below every 16-bit ulp): the master holds them
 *                    exactly (it is fp32), the copy holds their rounding.
 *   reduce_dtype     bf16 and fp16 (mixed_precision no), zero-initialized
 *                    parameters, SGD lr 1: the new master is minus the
 *                    reduced gradient. Each rank's gradient, pre-divided by
 *                    the world size in float32, rounded to the 16-bit
 *                    format, summed (exactly: the values keep the sum within
 *                    float32's 24 bits) and rounded once (hybrid_shard: once
 *                    per node, then once over the nodes) — docs/mixed-
 *                    precision.md's rule. The result must be EQUAL, bit for
 *                    bit, to that (no ulp of slack), and differ from the
 *                    float32 reduction somewhere (the check can fail).
 *   fp16 skip        loss scale 1024, growth_interval 3, AdamW with a linear
 *                    schedule: step 2 gets +inf in one gradient element on
 *                    the last rank only (an element the first rank owns).
 *                    Every rank skips (acx_optimizer_step_was_skipped);
 *                    gathered parameters and this rank's optimizer moments
 *                    are bitwise unchanged, the step count too; the scale
 *                    is 512 on every rank; acx_scheduler_step leaves the LR.
 *                    Three clean steps later the scale doubles back to 1024
 *                    (not before: the skip reset the growth tracker), and the
 *                    parameters equal a double AdamW of the 4 real steps.
 *   fp16 stop        NaN loss recorded and NaN gradients every step (every
 *                    rank; or one rank only): acx_optimizer_step returns
 *                    ACX_ERR_STATE on every rank at the same step — the 17th,
 *                    when the scale (2^16 halved each time) would drop below
 *                    loss_scale.min = 1, at scale 0.5, not after it reached 0
 *                    — saying the loss itself was not finite; with
 *                    max_consecutive_skips 4 at the 4th. A finite loss and
 *                    overflowing gradients (max_consecutive_skips 3): the
 *                    message says the gradients overflowed.
 *   no fp16 stop     mixed_precision no and bf16: a NaN loss recorded (or a
 *                    +inf gradient) on the last rank only at step 2 makes
 *                    acx_optimizer_step fail with ACX_ERR_STATE on every
 *                    rank, naming step 2 (and the loss's rank); parameters
 *                    bitwise and the step count unchanged.
 *   fp16 checkpoint  the scaler's scale, growth tracker and consecutive
 *                    skips survive acx_save_state/acx_load_state: loaded
 *                    after 2 clean steps, one more clean step doubles the
 *                    scale; loaded after a skip (max_consecutive_skips 2),
 *                    one more skip stops the run — a fresh run does not.
 *   fp16 tiny scale  loss_scale.init 1e-40 is below 1/FLT_MAX, so 1/scale
 *                    is inf in float32 and every (tiny) scaled gradient would
 *                    unscale to inf/NaN: the step is skipped, the weights stay
 *                    bitwise unchanged, and the run stops saying the scale is
 *                    too small. A checkpoint whose /scaler holds an infinite
 *                    or such a tiny scale, or a counter beyond INT_MAX, is
 *                    refused at load (ACX_ERR_FORMAT, the scale unchanged);
 *                    with the saved values put back it loads.
 *   fp16 clipping    acx_clip_grad_norm on gradients scaled by 2^16: the
 *                    inf-norm and 2-norm are those of the unscaled mean
 *                    gradient (double, relative 1e-6), the same bits on
 *                    every rank, every strategy; the clipped SGD step equals
 *                    the clipped reference (the scale divided out once).
 */
#include <stdint.h>

#include "runtime/optim_state.h"
#include "sharding/model.h"
#include "tests/acx_test_mpi.h"

#define NE   20 /* hand-picked values for a.e */
#define NPAR 4
#define NPV  (21 + NE + 10 + 1)

static int rank, world;
static char dir[1024];

static const int par_off[NPAR + 1] = {0, 21, 21 + NE, 21 + NE + 10, NPV};
static const int par_unit[NPAR] = {0, 0, 1, 1};

/* ---- rounding to 16-bit formats, written independently ---- */

/* x rounded to the binary format with `prec` significand bits, smallest
 * normal exponent emin and largest finite value maxf: to nearest, ties to
 * even (rint in the default rounding mode), subnormals by the same ulp as
 * the smallest normals, magnitudes past maxf after rounding -> inf. */
static double round_fmt(double x, int prec, int emin, double maxf) {
    if (isnan(x) || isinf(x) || x == 0) return x;
    int e = ilogb(x);
    if (e < emin) e = emin;
    double ulp = ldexp(1.0, e - (prec - 1));
    double r = rint(x / ulp) * ulp; /* x / ulp is exact: ulp is a power of two */
    if (fabs(r) > maxf) r = copysign(INFINITY, x);
    return r;
}
static double to_bf16(double x) { return round_fmt(x, 8, -126, 0x1.fep127); }
static double to_f16(double x) { return round_fmt(x, 11, -14, 65504.0); }
static double to_dt(int bf16, double x) { return bf16 ? to_bf16(x) : to_f16(x); }

/* The hand-picked master values of a.e. */
static const double edge[NE] = {
    1.0 + 0x1p-8,              /* bf16 tie -> 1 (even) */
    1.0 + 3 * 0x1p-8,          /* bf16 tie -> 1 + 2^-6 (even) */
    -(1.0 + 0x1p-8 + 0x1p-20), /* just past a bf16 tie -> away from zero */
    1.0 + 0x1p-11,             /* fp16 tie -> 1 */
    1.0 + 3 * 0x1p-11,         /* fp16 tie -> 1 + 2^-9 */
    1.0 + 0x1p-20,             /* below every 16-bit ulp: the master keeps it */
    65504.0,                   /* fp16 max */
    65519.0,                   /* fp16: -> 65504 */
    65520.0,                   /* fp16: tie at the overflow boundary -> inf */
    -70000.0,                  /* fp16: -> -inf */
    0x1p-24,                   /* fp16 smallest subnormal */
    0x1p-25,                   /* fp16: tie -> 0 */
    1.5 * 0x1p-25,             /* fp16: -> 2^-24 */
    3 * 0x1p-25,               /* fp16: tie -> 2^-23 (even) */
    -0x1.8p-20,                /* fp16 subnormal range */
    1e-30,                     /* fp16: -> 0 */
    3.0e38,                    /* bf16 near the top of the range */
    0x1.7fp-3,                 /* bf16: between two values, not a tie */
    -12345.678,
    0.1,
};

/* ---- the model ---- */

typedef struct opts {
    int strategy, rpn;
    int mp;         /* ACX_MP_* */
    int reduce;     /* ACX_REDUCE_*, or -1 = unset */
    double ls_init; /* loss_scale.* (<= 0 / 0: unset) */
    int ls_growth, ls_max_skips;
    int zero_init; /* every parameter starts at 0 */
    int adamw;     /* AdamW(lr 0.01) with a linear schedule over 10 steps; else SGD(lr 1) */
} opts_t;

typedef struct net {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u[2];
    acx_param_t *p[NPAR];
    acx_optimizer_t *opt;
    acx_scheduler_t *sched;
} net_t;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        acx_status_t st_ = (call);                                                                 \
        if (st_ != ACX_OK) return st_;                                                             \
    } while (0)

static acx_status_t net_open(net_t *net, const opts_t *o) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = 777;
    cfg.sharding_strategy = o->strategy;
    if (o->rpn > 0) cfg.ranks_per_node = o->rpn;
    cfg.mixed_precision = o->mp;
    if (o->reduce >= 0) cfg.reduce_dtype = o->reduce;
    if (o->ls_init > 0) cfg.loss_scale.init = o->ls_init;
    if (o->ls_growth > 0) cfg.loss_scale.growth_interval = o->ls_growth;
    if (o->ls_max_skips > 0) cfg.loss_scale.max_consecutive_skips = o->ls_max_skips;
    memset(net, 0, sizeof *net);
    TRY(acx_init(NULL, NULL, &cfg, &net->acc));
    const acx_config_t *got = acx_get_config(net->acc);
    if (got->sharding_strategy != o->strategy || got->mixed_precision != o->mp ||
        (o->reduce >= 0 && got->reduce_dtype != o->reduce)) {
        fprintf(stderr, "\nacx resolved strategy %d mp %d reduce %d; asked %d %d %d\n",
                got->sharding_strategy, got->mixed_precision, got->reduce_dtype, o->strategy, o->mp,
                o->reduce);
        return ACX_ERR_INTERNAL;
    }
    TRY(acx_model_create(net->acc, &net->m));
    TRY(acx_model_add_unit(net->m, "a", &net->u[0]));
    TRY(acx_model_add_unit(net->m, "b", &net->u[1]));
    acx_init_spec_t z = ACX_INIT_SPEC_ZEROS;
    TRY(acx_unit_add_param(net->u[0], "a.w", 2, (int64_t[]){7, 3},
                           o->zero_init ? z : ACX_INIT_SPEC_LINEAR_WEIGHT, &net->p[0]));
    TRY(acx_unit_add_param(net->u[0], "a.e", 1, (int64_t[]){NE}, z, &net->p[1]));
    TRY(acx_unit_add_param(net->u[1], "b.w", 2, (int64_t[]){2, 5},
                           o->zero_init ? z : ACX_INIT_SPEC_LINEAR_WEIGHT, &net->p[2]));
    TRY(acx_unit_add_param(net->u[1], "b.s", 1, (int64_t[]){1},
                           o->zero_init ? z : ACX_INIT_SPEC_CONSTANT(0.75), &net->p[3]));
    if (o->adamw) {
        acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
        hp.lr = 0.01;
        TRY(acx_adamw_create(net->m, &hp, &net->opt));
        TRY(acx_scheduler_create(net->opt, ACX_SCHED_LINEAR, 0, 10, 0.0, &net->sched));
    } else {
        acx_sgd_hparams_t hp = {.lr = 1.0};
        TRY(acx_sgd_create(net->m, &hp, &net->opt));
    }
    return acx_prepare(net->acc, net->m, net->opt, NULL);
}

static void net_close(net_t *net) {
    if (net->acc) acx_finalize(net->acc);
    net->acc = NULL;
}

/* Every parameter's master values, gathered: out [NPV]. Collective. */
static acx_status_t net_gather(net_t *net, float *out) {
    for (int q = 0; q < NPAR; q++)
        TRY(acx_param_gather(net->p[q], out + par_off[q]));
    return ACX_OK;
}

/* gradient element e (flat index) of rank r at step s, before any scaling */
typedef double (*grad_fn)(int s, int r, int e);

/* Add grad(s, rank, e) * mult into every gradient, in backward order, then
 * wait for the reduction. poison: element `poison_e` is set to poison_v
 * instead (poison_e < 0: none). */
static acx_status_t backward(net_t *net, grad_fn grad, int s, double mult, int poison_e,
                             float poison_v) {
    for (int u = 1; u >= 0; u--) {
        TRY(acx_unit_acquire(net->u[u]));
        for (int q = 0; q < NPAR; q++) {
            if (par_unit[q] != u) continue;
            float *g = acx_param_grad(net->p[q]);
            if (g == NULL) {
                fprintf(stderr, "\nacx_param_grad(%d) is NULL: %s\n", q, acx_last_error());
                return ACX_ERR_INTERNAL;
            }
            for (int e = par_off[q]; e < par_off[q + 1]; e++)
                g[e - par_off[q]] += e == poison_e ? poison_v : (float)(grad(s, rank, e) * mult);
        }
        TRY(acx_unit_grads_ready(net->u[u]));
        TRY(acx_unit_release(net->u[u]));
    }
    return acx_backward_end(net->acc);
}

/* The strategies at this world size (hybrid: 2 ranks per node on even world
 * sizes, else every rank its own node). */
typedef struct strat {
    int strategy, rpn;
    const char *name;
} strat_t;
static strat_t strats[4];

/* ---- compute copies ---- */

/* step 0: a.e's master becomes edge[] (rank 0 only contributes, one item in
 * all: the reduced gradient is exactly rank 0's); the rest gets a mild
 * update. */
static double copies_grad(int s, int r, int e) {
    if (r != 0) return 0.0;
    if (e >= par_off[1] && e < par_off[2])
        return s == 0 ? -(double)(float)edge[e - par_off[1]] : 0.0;
    return 0.01 * sin(1.7 * e + 0.3 * s);
}

static int check_copies(net_t *net, int bf16, const char *when) {
    float master[NPV];
    CHECK_OK(net_gather(net, master));
    for (int u = 0; u < 2; u++) {
        CHECK_OK(acx_unit_acquire(net->u[u]));
        for (int q = 0; q < NPAR; q++) {
            if (par_unit[q] != u) continue;
            const float *d = acx_param_data(net->p[q]);
            CHECK(d != NULL);
            for (int e = par_off[q]; e < par_off[q + 1]; e++) {
                float want = (float)to_dt(bf16, master[e]);
                if (memcmp(&want, &d[e - par_off[q]], sizeof want) != 0) {
                    fprintf(
                        stderr, "\n[r%d] %s %s: %s[%d]: compute copy %a, master %a rounds to %a\n",
                        rank, bf16 ? "bf16" : "fp16", when, acx_param_name(net->p[q]),
                        e - par_off[q], (double)d[e - par_off[q]], (double)master[e], (double)want);
                    TEST_ERROR;
                }
            }
        }
        CHECK_OK(acx_unit_release(net->u[u]));
    }
    return 0;
error:
    return 1;
}

static int copies_case(const strat_t *s, int bf16) {
    net_t net = {0};
    /* fp16: scale 1 so the hand-picked values pass through unscaled */
    opts_t o = {.strategy = s->strategy,
                .rpn = s->rpn,
                .mp = bf16 ? ACX_MP_BF16 : ACX_MP_FP16,
                .reduce = -1,
                .ls_init = 1.0};
    CHECK_OK(net_open(&net, &o));
    if (check_copies(&net, bf16, "after prepare")) TEST_ERROR;
    for (int step = 0; step < 2; step++) {
        CHECK_OK(acx_accumulate_begin(net.acc));
        CHECK_OK(acx_accumulate_items(net.acc, rank == 0 ? 1 : 0));
        CHECK_OK(backward(&net, copies_grad, step, 1.0, -1, 0));
        CHECK_OK(acx_optimizer_step(net.opt));
        CHECK(!acx_optimizer_step_was_skipped(net.opt));
        CHECK_OK(acx_optimizer_zero_grad(net.opt));
        CHECK_OK(acx_accumulate_end(net.acc));
        if (check_copies(&net, bf16, step == 0 ? "after step 1" : "after step 2")) TEST_ERROR;
        if (step == 0) {
            /* the master is float32: it holds the hand-picked values themselves */
            float master[NPV];
            CHECK_OK(net_gather(&net, master));
            for (int i = 0; i < NE; i++)
                if (master[par_off[1] + i] != (float)edge[i]) {
                    fprintf(stderr, "\n[r%d] master a.e[%d] = %a, expected %a\n", rank, i,
                            (double)master[par_off[1] + i], (double)(float)edge[i]);
                    TEST_ERROR;
                }
        }
    }
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* ---- reduce_dtype ---- */

/* Magnitudes in [2^-3, 2^4), 8 significant bits, both signs. */
static double reduce_grad(int s, int r, int e) {
    uint32_t h = acx_test_hash3(r, (size_t)e, 50 + s);
    double v = (1.0 + (double)(h & 0x7f) / 128.0) * ldexp(1.0, (int)((h >> 8) % 7) - 3);
    return (h >> 16) & 1 ? -v : v;
}

static int reduce_case(const strat_t *s, int bf16) {
    net_t net = {0};
    opts_t o = {.strategy = s->strategy,
                .rpn = s->rpn,
                .mp = ACX_MP_NO,
                .reduce = bf16 ? ACX_REDUCE_BF16 : ACX_REDUCE_FP16,
                .zero_init = 1};
    float got[NPV];
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(acx_accumulate_begin(net.acc));
    CHECK_OK(backward(&net, reduce_grad, 0, 1.0, -1, 0));
    CHECK_OK(acx_optimizer_step(net.opt));
    CHECK_OK(acx_optimizer_zero_grad(net.opt));
    CHECK_OK(acx_accumulate_end(net.acc));
    CHECK_OK(net_gather(&net, got));
    /* nodes of `npn` consecutive ranks: hybrid_shard reduces inside each
     * node, then over the nodes; the others in one reduction */
    int npn = s->strategy == ACX_HYBRID_SHARD ? s->rpn : world;
    float pre = 1.0f / (float)world; /* the documented pre-division, in float32 */
    int differs_from_fp32 = 0;
    for (int e = 0; e < NPV; e++) {
        double outer = 0, exact32 = 0;
        for (int n0 = 0; n0 < world; n0 += npn) {
            double inner = 0;
            for (int r = n0; r < n0 + npn; r++) {
                float c = (float)reduce_grad(0, r, e) * pre; /* float32 product */
                inner += to_dt(bf16, c);                     /* rounded once, summed exactly */
                exact32 += c;
            }
            outer += to_dt(bf16, inner);
        }
        float want = (float)-to_dt(bf16, outer);
        if (memcmp(&want, &got[e], sizeof want) != 0) {
            fprintf(stderr,
                    "\n[r%d] %s reduce %s np=%d: element %d: reduced gradient %a, expected %a\n",
                    rank, s->name, bf16 ? "bf16" : "fp16", world, e, -(double)got[e],
                    -(double)want);
            TEST_ERROR;
        }
        if ((float)-exact32 != want) differs_from_fp32 = 1;
    }
    if (world > 1) CHECK(differs_from_fp32); /* the 16-bit wire is visible */
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* ---- fp16 loss scaling ---- */

static double mild_grad(int s, int r, int e) {
    return 0.05 * sin(0.9 * e + 1.3 * r + 0.7 * s) + 0.01 * r;
}

/* 1 when every rank passed the same v (equal doubles). Collective. */
static int all_equal_d(double v) {
    double lo = v, hi = v;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi && lo == v;
}

/* torch.optim.AdamW(lr, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01), double */
static void ref_adamw(double *p, double *m, double *v, const double *g, double lr, int t) {
    double bc1 = 1 - pow(0.9, t), bc2 = 1 - pow(0.999, t);
    for (int e = 0; e < NPV; e++) {
        p[e] *= 1 - lr * 0.01;
        m[e] = 0.9 * m[e] + 0.1 * g[e];
        v[e] = 0.999 * v[e] + 0.001 * g[e] * g[e];
        p[e] -= lr / bc1 * m[e] / (sqrt(v[e]) / sqrt(bc2) + 1e-8);
    }
}

static int skip_case(const strat_t *s) {
    net_t net = {0};
    opts_t o = {.strategy = s->strategy,
                .rpn = s->rpn,
                .mp = ACX_MP_FP16,
                .reduce = -1,
                .ls_init = 1024,
                .ls_growth = 3,
                .adamw = 1};
    float before[NPV], after[NPV], *st_before[2] = {NULL, NULL};
    double p[NPV], m[NPV] = {0}, v[NPV] = {0};
    int t = 0;
    CHECK_OK(net_open(&net, &o));
    {
        float init[NPV];
        CHECK_OK(net_gather(&net, init));
        for (int e = 0; e < NPV; e++)
            p[e] = init[e];
    }
    CHECK(acx_loss_scale(net.acc) == 1024);
    size_t n = net.m->shard_numel;
    CHECK(acx_optimizer_num_state(net.opt) == 2);
    for (int i = 0; i < 2; i++) {
        st_before[i] = malloc((n ? n : 1) * sizeof(float));
        CHECK(st_before[i] != NULL);
    }
    /* step index -> expected scale after it */
    static const double scale_after[5] = {1024, 512, 512, 512, 1024};
    for (int step = 0; step < 5; step++) {
        int inject = step == 1;
        double lr_before = acx_optimizer_lr(net.opt);
        int64_t nsteps_before = acx_optimizer_num_steps(net.opt);
        CHECK_OK(net_gather(&net, before));
        for (int i = 0; i < 2; i++)
            if (n) memcpy(st_before[i], acx_optimizer_state(net.opt, i), n * sizeof(float));
        CHECK_OK(acx_accumulate_begin(net.acc));
        acx_record_loss(net.acc, 0.25);
        /* +inf at a.w[0][0] (row 0: the first rank owns it) on the last rank only */
        CHECK_OK(backward(&net, mild_grad, step, acx_loss_scale(net.acc),
                          inject && rank == world - 1 ? 0 : -1, INFINITY));
        CHECK_OK(acx_optimizer_step(net.opt));
        int skipped = acx_optimizer_step_was_skipped(net.opt);
        CHECK_OK(acx_scheduler_step(net.sched));
        CHECK_OK(acx_optimizer_zero_grad(net.opt));
        CHECK_OK(acx_accumulate_end(net.acc));
        int lo = skipped, hi = skipped;
        MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (lo != inject || hi != inject) {
            fprintf(stderr,
                    "\n[r%d] %s step %d: skipped %d here, min %d max %d over ranks; expected %d\n",
                    rank, s->name, step + 1, skipped, lo, hi, inject);
            TEST_ERROR;
        }
        if (!all_equal_d(acx_loss_scale(net.acc)) || acx_loss_scale(net.acc) != scale_after[step]) {
            fprintf(stderr, "\n[r%d] %s after step %d: loss scale %g, expected %g on every rank\n",
                    rank, s->name, step + 1, acx_loss_scale(net.acc), scale_after[step]);
            TEST_ERROR;
        }
        CHECK_OK(net_gather(&net, after));
        if (inject) {
            CHECK(memcmp(before, after, sizeof before) == 0);
            for (int i = 0; i < 2; i++)
                CHECK(n == 0 || memcmp(st_before[i], acx_optimizer_state(net.opt, i),
                                       n * sizeof(float)) == 0);
            CHECK(acx_optimizer_num_steps(net.opt) == nsteps_before);
            CHECK(acx_optimizer_lr(net.opt) == lr_before);
        } else {
            CHECK(memcmp(before, after, sizeof before) != 0);
            CHECK(acx_optimizer_num_steps(net.opt) == nsteps_before + 1);
            /* reference: the mean over ranks of the unscaled gradients, at lr(t) */
            double g[NPV];
            for (int e = 0; e < NPV; e++) {
                g[e] = 0;
                for (int r = 0; r < world; r++)
                    g[e] += (double)(float)(mild_grad(step, r, e) * 1.0);
                g[e] /= world;
            }
            double lr = 0.01 * (10 - t) / 10.0;
            t++;
            ref_adamw(p, m, v, g, lr, t);
            CHECK_CLOSE(acx_optimizer_lr(net.opt), 0.01 * (10 - t) / 10.0, 1e-12, 0);
        }
    }
    CHECK(acx_optimizer_num_steps(net.opt) == 4);
    {
        double num = 0, den = 0;
        for (int e = 0; e < NPV; e++) {
            num += (after[e] - p[e]) * (after[e] - p[e]);
            den += p[e] * p[e];
        }
        if (!(sqrt(num / den) <= 1e-5)) {
            fprintf(stderr,
                    "\n[r%d] %s: parameters after 4 real steps differ from the double AdamW "
                    "by %.3g (relative)\n",
                    rank, s->name, sqrt(num / den));
            TEST_ERROR;
        }
    }
    free(st_before[0]);
    free(st_before[1]);
    net_close(&net);
    return 0;
error:
    free(st_before[0]);
    free(st_before[1]);
    net_close(&net);
    return 1;
}

/* Run steps with a bad loss/gradients until acx_optimizer_step fails (at
 * most 40). who: -1 every rank, else that rank only. nan_loss: record NaN
 * (else 1.0) and NaN gradients (else +inf). Returns the step (1-based) that
 * failed on this rank with ACX_ERR_STATE and copies the message; 0 if none
 * did, -1 on another error. */
static int run_until_stop(net_t *net, int who, int nan_loss, char *msg, size_t len) {
    for (int step = 1; step <= 40; step++) {
        int bad = who < 0 || rank == who;
        if (acx_accumulate_begin(net->acc) != ACX_OK) return -1;
        acx_record_loss(net->acc, bad && nan_loss ? NAN : 1.0);
        if (backward(net, mild_grad, step, acx_loss_scale(net->acc), bad ? 3 : -1,
                     nan_loss ? NAN : INFINITY) != ACX_OK)
            return -1;
        acx_status_t st = acx_optimizer_step(net->opt);
        if (st == ACX_ERR_STATE) snprintf(msg, len, "%s", acx_last_error());
        (void)acx_optimizer_zero_grad(net->opt);
        (void)acx_accumulate_end(net->acc);
        if (st == ACX_ERR_STATE) return step;
        if (st != ACX_OK) return -1;
        if (!acx_optimizer_step_was_skipped(net->opt)) return -1;
    }
    return 0;
}

typedef struct stop_spec {
    const char *what;
    int who, nan_loss, max_skips, want_step;
    double want_scale;                   /* the scale when the run stopped */
    const char *must, *must2, *must_not; /* must2 may be NULL */
} stop_spec_t;

static int stop_case(const strat_t *s, const stop_spec_t *sp) {
    net_t net = {0};
    opts_t o = {.strategy = s->strategy,
                .rpn = s->rpn,
                .mp = ACX_MP_FP16,
                .reduce = -1,
                .ls_max_skips = sp->max_skips};
    char msg[1024] = "";
    CHECK_OK(net_open(&net, &o));
    CHECK(acx_loss_scale(net.acc) == 65536); /* loss_scale.init's default, 2^16 */
    int who = sp->who == -2 ? world - 1 : sp->who;
    int got = run_until_stop(&net, who, sp->nan_loss, msg, sizeof msg);
    int lo = got, hi = got;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (lo != sp->want_step || hi != sp->want_step) {
        fprintf(stderr,
                "\n[r%d] %s %s: acx_optimizer_step stopped the run at step %d here (%d..%d "
                "over ranks); expected %d on every rank. Message: %s\n",
                rank, s->name, sp->what, got, lo, hi, sp->want_step, msg);
        TEST_ERROR;
    }
    if (acx_loss_scale(net.acc) != sp->want_scale || strstr(msg, sp->must) == NULL ||
        (sp->must2 != NULL && strstr(msg, sp->must2) == NULL) ||
        (sp->must_not != NULL && strstr(msg, sp->must_not) != NULL)) {
        fprintf(stderr,
                "\n[r%d] %s %s: scale %g (expected %g); the message should contain \"%s\"%s%s%s "
                "and not \"%s\": %s\n",
                rank, s->name, sp->what, acx_loss_scale(net.acc), sp->want_scale, sp->must,
                sp->must2 ? " and \"" : "", sp->must2 ? sp->must2 : "", sp->must2 ? "\"" : "",
                sp->must_not, msg);
        TEST_ERROR;
    }
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* ---- without fp16: a non-finite loss or gradient stops the run ---- */

/* mixed_precision no or bf16, AdamW: 2 clean steps, then step 2 (acx_step
 * 2) with, on the last rank only, a NaN recorded loss (bad_loss) or a +inf
 * gradient element with a finite loss. acx_optimizer_step must return
 * ACX_ERR_STATE on every rank, naming step 2 and the kind (and, for the
 * loss, the rank); the parameters and the step count stay those of step 2. */
static int nonfinite_case(const strat_t *s, int mp, int bad_loss) {
    net_t net = {0};
    opts_t o = {.strategy = s->strategy, .rpn = s->rpn, .mp = mp, .reduce = -1, .adamw = 1};
    float before[NPV], after[NPV];
    char want[128];
    CHECK_OK(net_open(&net, &o));
    for (int step = 0; step < 3; step++) {
        int bad = step == 2 && rank == world - 1;
        CHECK_OK(acx_accumulate_begin(net.acc));
        acx_record_loss(net.acc, bad && bad_loss ? NAN : 0.5);
        CHECK_OK(backward(&net, mild_grad, step, 1.0, bad && !bad_loss ? 3 : -1, INFINITY));
        if (step == 2) CHECK_OK(net_gather(&net, before));
        acx_status_t st = acx_optimizer_step(net.opt);
        if (step < 2) {
            CHECK_OK(st);
        } else {
            CHECK_STATUS(st, ACX_ERR_STATE, "training stopped at step 2");
            if (bad_loss)
                snprintf(want, sizeof want, "the loss was not finite (first on rank %d", world - 1);
            else
                snprintf(want, sizeof want, "the reduced gradients hold inf/NaN");
            if (strstr(acx_last_error(), want) == NULL) {
                fprintf(stderr, "\n[r%d] the message lacks \"%s\": %s\n", rank, want,
                        acx_last_error());
                TEST_ERROR;
            }
        }
        CHECK_OK(acx_optimizer_zero_grad(net.opt));
        CHECK_OK(acx_accumulate_end(net.acc));
    }
    CHECK_OK(net_gather(&net, after));
    CHECK(memcmp(before, after, sizeof before) == 0);
    CHECK(acx_optimizer_num_steps(net.opt) == 2);
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* ---- fp16 scaler state in checkpoints ---- */

/* One micro-step; inf: +inf gradient on rank 0. Returns the step's status. */
static acx_status_t one_step(net_t *net, int inf) {
    TRY(acx_accumulate_begin(net->acc));
    acx_record_loss(net->acc, 0.5);
    TRY(backward(net, mild_grad, 0, acx_loss_scale(net->acc), inf && rank == 0 ? 5 : -1, INFINITY));
    acx_status_t st = acx_optimizer_step(net->opt);
    (void)acx_optimizer_zero_grad(net->opt);
    TRY(acx_accumulate_end(net->acc));
    return st;
}

static int ckpt_case(void) {
    net_t net = {0};
    opts_t o = {.strategy = ACX_NO_SHARD,
                .mp = ACX_MP_FP16,
                .reduce = -1,
                .ls_init = 1024,
                .ls_growth = 3,
                .ls_max_skips = 2};
    char pa[1100], pb[1100];
    snprintf(pa, sizeof pa, "%s/mp_scaler_a_np%d.h5", dir, world);
    snprintf(pb, sizeof pb, "%s/mp_scaler_b_np%d.h5", dir, world);
    /* run 1: two clean steps (tracker 2) -> A; a skip (scale 512, 1 skip in a row) -> B */
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(one_step(&net, 0));
    CHECK_OK(one_step(&net, 0));
    CHECK(acx_loss_scale(net.acc) == 1024);
    CHECK_OK(acx_save_state(net.acc, pa));
    CHECK_OK(one_step(&net, 1));
    CHECK(acx_optimizer_step_was_skipped(net.opt) && acx_loss_scale(net.acc) == 512);
    CHECK_OK(acx_save_state(net.acc, pb));
    net_close(&net);
    /* run 2: from A, one clean step completes the growth interval */
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(acx_load_state(net.acc, pa, 1));
    CHECK(acx_loss_scale(net.acc) == 1024);
    CHECK_OK(one_step(&net, 0));
    if (acx_loss_scale(net.acc) != 2048) {
        fprintf(stderr,
                "\n[r%d] after loading A (growth tracker 2 of 3) and one clean step the "
                "scale is %g, expected 2048\n",
                rank, acx_loss_scale(net.acc));
        TEST_ERROR;
    }
    net_close(&net);
    /* run 3: from B, one more skip is the 2nd in a row: the run stops */
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(acx_load_state(net.acc, pb, 1));
    CHECK(acx_loss_scale(net.acc) == 512);
    CHECK_STATUS(one_step(&net, 1), ACX_ERR_STATE, "max_consecutive_skips");
    net_close(&net);
    /* control: a fresh run survives one skip */
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(one_step(&net, 1));
    CHECK(acx_optimizer_step_was_skipped(net.opt) && acx_loss_scale(net.acc) == 512);
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* ---- a loss scale too small for float32 ---- */

/* Rank 0 replaces attribute `name` of /scaler in the checkpoint at path by
 * a scalar double or int64 (as f64 says), deleted and created again (HDF5
 * 1.10 cannot rewrite an attribute kept in dense storage in place); every
 * rank returns the agreed outcome. */
static int set_scaler_attr(const char *path, const char *name, int f64, double d, int64_t i) {
    int failed = 0;
    if (rank == 0) {
        hid_t type = f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
        hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t g = f >= 0 ? H5Gopen2(f, "/scaler", H5P_DEFAULT) : -1;
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t a = g >= 0 && H5Adelete(g, name) >= 0
                      ? H5Acreate2(g, name, f64 ? H5T_IEEE_F64LE : H5T_STD_I64LE, sp, H5P_DEFAULT,
                                   H5P_DEFAULT)
                      : -1;
        failed = a < 0 || H5Awrite(a, type, f64 ? (const void *)&d : (const void *)&i) < 0;
        if (a >= 0) H5Aclose(a);
        H5Sclose(sp);
        if (g >= 0) H5Gclose(g);
        if (f >= 0) H5Fclose(f);
        if (failed) fprintf(stderr, "\ncannot write /scaler attribute %s of %s\n", name, path);
    }
    return acx_test_agree(failed);
}

static int tiny_scale_case(void) {
    net_t net = {0};
    opts_t o = {.strategy = ACX_FULL_SHARD, .mp = ACX_MP_FP16, .reduce = -1, .ls_init = 1e-40};
    float before[NPV], after[NPV];
    char path[1100];
    snprintf(path, sizeof path, "%s/mp_scaler_bad_np%d.h5", dir, world);
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(net_gather(&net, before));
    CHECK_STATUS(one_step(&net, 0), ACX_ERR_STATE, "too small for float32");
    CHECK(acx_optimizer_step_was_skipped(net.opt));
    CHECK_OK(net_gather(&net, after));
    CHECK(memcmp(before, after, sizeof before) == 0);
    net_close(&net);

    /* saved after one clean step at scale 1024: tracker 1, no skips */
    o.ls_init = 1024;
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(one_step(&net, 0));
    CHECK_OK(acx_save_state(net.acc, path));
    static const struct {
        const char *name;
        int f64;
        double bad_d, good_d; /* f64 */
        int64_t bad_i, good_i;
    } bad[] = {{"scale", 1, INFINITY, 1024, 0, 0},
               {"scale", 1, 1e-40, 1024, 0, 0},
               {"growth_tracker", 0, 0, 0, (int64_t)1 << 40, 1},
               {"consecutive_skips", 0, 0, 0, (int64_t)1 << 33, 0}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK(set_scaler_attr(path, bad[k].name, bad[k].f64, bad[k].bad_d, bad[k].bad_i) == 0);
        CHECK_STATUS(acx_load_state(net.acc, path, 1), ACX_ERR_FORMAT, "/scaler");
        CHECK(acx_loss_scale(net.acc) == 1024);
        CHECK(set_scaler_attr(path, bad[k].name, bad[k].f64, bad[k].good_d, bad[k].good_i) == 0);
    }
    CHECK_OK(acx_load_state(net.acc, path, 1));
    CHECK(acx_loss_scale(net.acc) == 1024);
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* ---- clipping under fp16 ---- */

static int clip_case(const strat_t *s) {
    net_t net = {0};
    opts_t o = {
        .strategy = s->strategy, .rpn = s->rpn, .mp = ACX_MP_FP16, .reduce = -1, .zero_init = 1};
    float got[NPV];
    double g[NPV], n2 = 0, ninf = 0, norm_inf, norm2;
    for (int e = 0; e < NPV; e++) {
        g[e] = 0;
        for (int r = 0; r < world; r++)
            g[e] += (float)mild_grad(7, r, e);
        g[e] /= world;
        n2 += g[e] * g[e];
        if (fabs(g[e]) > ninf) ninf = fabs(g[e]);
    }
    n2 = sqrt(n2);
    CHECK_OK(net_open(&net, &o));
    CHECK(acx_loss_scale(net.acc) == 65536);
    CHECK_OK(acx_accumulate_begin(net.acc));
    CHECK_OK(backward(&net, mild_grad, 7, acx_loss_scale(net.acc), -1, 0));
    CHECK_OK(acx_clip_grad_norm(net.acc, 1e30, INFINITY, &norm_inf)); /* no clipping */
    double max_norm = 0.5 * n2;
    CHECK_OK(acx_clip_grad_norm(net.acc, max_norm, 2.0, &norm2));
    CHECK_OK(acx_optimizer_step(net.opt));
    CHECK(!acx_optimizer_step_was_skipped(net.opt));
    CHECK_OK(acx_optimizer_zero_grad(net.opt));
    CHECK_OK(acx_accumulate_end(net.acc));
    CHECK(all_equal_d(norm_inf) && all_equal_d(norm2));
    CHECK_CLOSE(norm_inf, ninf, 1e-6, 0);
    CHECK_CLOSE(norm2, n2, 1e-6, 0);
    CHECK_OK(net_gather(&net, got));
    {
        double coef = max_norm / (n2 + 1e-6), num = 0, den = 0;
        for (int e = 0; e < NPV; e++) {
            double want = -g[e] * coef;
            num += (got[e] - want) * (got[e] - want);
            den += want * want;
        }
        if (!(sqrt(num / den) <= 1e-5)) {
            fprintf(stderr,
                    "\n[r%d] %s: the clipped step differs from the reference by %.3g "
                    "(relative)\n",
                    rank, s->name, sqrt(num / den));
            TEST_ERROR;
        }
    }
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 280, &rank, &world);
    acx_test_tmp_path(dir, sizeof dir, "");
    int hr = world % 2 == 0 ? 2 : 1;
    strats[0] = (strat_t){ACX_NO_SHARD, 0, "no_shard"};
    strats[1] = (strat_t){ACX_SHARD_GRAD_OP, 0, "shard_grad_op"};
    strats[2] = (strat_t){ACX_FULL_SHARD, 0, "full_shard"};
    strats[3] =
        (strat_t){ACX_HYBRID_SHARD, hr, hr == 2 ? "hybrid_shard(2/node)" : "hybrid_shard(1/node)"};
    int failed = 0;
    char what[160];
    for (int si = 0; si < 4; si++)
        for (int bf16 = 1; bf16 >= 0; bf16--) {
            snprintf(what, sizeof what, "%s %s compute copies = RNE(master) np=%d", strats[si].name,
                     bf16 ? "bf16" : "fp16", world);
            TESTING(what);
            failed |= acx_test_report(copies_case(&strats[si], bf16));
        }
    for (int si = 0; si < 4; si++)
        for (int bf16 = 1; bf16 >= 0; bf16--) {
            snprintf(what, sizeof what, "%s reduce_dtype %s sum exact np=%d", strats[si].name,
                     bf16 ? "bf16" : "fp16", world);
            TESTING(what);
            failed |= acx_test_report(reduce_case(&strats[si], bf16));
        }
    for (int si = 0; si < 4; si++) {
        snprintf(what, sizeof what, "%s fp16 inf on one rank: all skip np=%d", strats[si].name,
                 world);
        TESTING(what);
        failed |= acx_test_report(skip_case(&strats[si]));
    }
    static const char *const loss_msg = "loss itself was not finite";
    static const char *const ovf_msg = "overflowed";
    const stop_spec_t stops[4] = {
        {"NaN loss everywhere", -1, 1, 0, 17, 0.5, loss_msg, "loss_scale.min", ovf_msg},
        {"NaN loss on one rank", -2, 1, 0, 17, 0.5, loss_msg, "loss_scale.min", ovf_msg},
        {"NaN loss, max skips 4", -1, 1, 4, 4, 4096, loss_msg, "max_consecutive_skips", ovf_msg},
        {"inf grads, finite loss", 0, 0, 3, 3, 8192, ovf_msg, "max_consecutive_skips", loss_msg},
    };
    for (int si = 0; si < 4; si++)
        for (int k = 0; k < 4; k++) {
            if (si != 0 && si != 2 && k != 0)
                continue; /* the scaler does not care; keep it short */
            snprintf(what, sizeof what, "%s fp16 stop: %s np=%d", strats[si].name, stops[k].what,
                     world);
            TESTING(what);
            failed |= acx_test_report(stop_case(&strats[si], &stops[k]));
        }
    for (int si = 0; si < 4; si += 2)
        for (int k = 0; k < 3; k++) {
            int mp = k == 2 ? ACX_MP_BF16 : ACX_MP_NO;
            snprintf(what, sizeof what, "%s %s %s on one rank: the run stops np=%d",
                     strats[si].name, mp == ACX_MP_BF16 ? "bf16" : "fp32",
                     k == 1 ? "inf gradient" : "NaN loss", world);
            TESTING(what);
            failed |= acx_test_report(nonfinite_case(&strats[si], mp, k != 1));
        }
    snprintf(what, sizeof what, "fp16 scaler state through a checkpoint np=%d", world);
    TESTING(what);
    failed |= acx_test_report(ckpt_case());
    snprintf(what, sizeof what, "fp16 scale too small for float32, bad /scaler np=%d", world);
    TESTING(what);
    failed |= acx_test_report(tiny_scale_case());
    for (int si = 0; si < 4; si++) {
        snprintf(what, sizeof what, "%s fp16 clip_grad_norm unscales first np=%d", strats[si].name,
                 world);
        TESTING(what);
        failed |= acx_test_report(clip_case(&strats[si]));
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}

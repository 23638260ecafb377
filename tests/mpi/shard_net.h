/*
 * tests/mpi/shard_net.h — the small model the sharded-strategy tests train
 * (test_shard_equiv.c, test_shard_ckpt.c), written twice: in float against
 * acx the way an FSDP program uses it, and in double as the independent
 * reference (forward, backward and the torch.optim formulas, nothing from
 * acx). What the tests check with it is theirs.
 *
 * The shapes are chosen to be awkward for the dim-0 rule (c = ceil(R/N),
 * rank r owns rows [r*c, min(R, (r+1)*c))):
 *
 *   unit  parameter     shape   rows on 2 / 3 / 4 ranks
 *   enc   enc.weight    [7, 3]  4,3 / 3,3,1 / 2,2,2,1
 *         enc.gain      [1]     1,0 / 1,0,0 / 1,0,0,0   (a scalar: one owner)
 *   mid   mid.weight    [3, 7]  2,1 / 1,1,1 / 1,1,1,0
 *         mid.bias      [3]     2,1 / 1,1,1 / 1,1,1,0   (rank 3 owns nothing)
 *   head  head.weight   [2, 3]  1,1 / 1,1,0 / 1,1,0,0
 *         head.bias     [2]     1,1 / 1,1,0 / 1,1,0,0   (fewer rows than ranks)
 *
 * Per sample, x in R^3, y in R^2:
 *   a = W1 x            [7]    z = gain * a    h = tanh(z)
 *   u = W2 h + c        [3]    v = tanh(u)
 *   o = W3 v + b        [2]    loss = 0.5 * ||o - y||^2, averaged over samples
 *
 * Data is a fixed function of the global sample index: step s uses samples
 * s*SN_GB .. s*SN_GB + SN_GB-1, split into `accum` micro-batches and each
 * micro-batch into equal contiguous slices per rank, so every world size and
 * accumulation count trains on the same global batch and the update is the
 * mean gradient over it (acx divides by world x accum).
 */
#ifndef ACX_TEST_SHARD_NET_H
#define ACX_TEST_SHARD_NET_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "acx/acx.h"
#include "base/param_init.h"

#define SN_DIN   3
#define SN_DH    7
#define SN_DV    3
#define SN_DOUT  2
#define SN_GB    24 /* global batch: divisible by 1..4 ranks x 1..2 micro-steps */
#define SN_NPAR  6
#define SN_NUNIT 3
#define SN_NP    (SN_DH * SN_DIN + 1 + SN_DV * SN_DH + SN_DV + SN_DOUT * SN_DV + SN_DOUT) /* 54 */

#define SN_SEED 1234

enum { SN_W1, SN_GAIN, SN_W2, SN_C, SN_W3, SN_B };

static const char *const sn_unit_name[SN_NUNIT] = {"enc", "mid", "head"};
static const struct {
    const char *name;
    int unit, ndim;
    int64_t shape[2];
} sn_par[SN_NPAR] = {
    {"enc.weight", 0, 2, {SN_DH, SN_DIN}},   {"enc.gain", 0, 1, {1, 0}},
    {"mid.weight", 1, 2, {SN_DV, SN_DH}},    {"mid.bias", 1, 1, {SN_DV, 0}},
    {"head.weight", 2, 2, {SN_DOUT, SN_DV}}, {"head.bias", 2, 1, {SN_DOUT, 0}},
};
/* element offset of parameter q in the flat [SN_NP] vectors below */
static const int sn_off[SN_NPAR + 1] = {0, 21, 22, 43, 46, 52, SN_NP};

static inline acx_init_spec_t sn_init_spec(int q) {
    switch (q) {
    case SN_GAIN: return ACX_INIT_SPEC_UNIFORM(0.5, 1.5);
    case SN_C: return ACX_INIT_SPEC_LINEAR_BIAS(SN_DH);
    case SN_B: return ACX_INIT_SPEC_LINEAR_BIAS(SN_DV);
    default: return ACX_INIT_SPEC_LINEAR_WEIGHT;
    }
}

/* The initial values every world size and strategy must produce: the
 * initializer filled over all rows (the library-private filler; its values
 * are checked against torch.nn.init's formulas in tests/unit/test_param_init.c).
 * out [SN_NP]. */
static inline void sn_expected_init(float *out) {
    for (int q = 0; q < SN_NPAR; q++) {
        acx_init_spec_t spec = sn_init_spec(q);
        acx_param_init_fill(&spec, sn_par[q].ndim, sn_par[q].shape, SN_SEED, sn_par[q].name, 0,
                            sn_par[q].shape[0], out + sn_off[q]);
    }
}

static inline double sn_x(int64_t i, int j) { return sin(0.37 * (double)i + 1.3 * j) + 0.1 * j; }
static inline double sn_y(int64_t i, int k) { return 0.5 * cos(0.21 * (double)i - 0.7 * k); }

/* ---- hyperparameters (torch.optim semantics) ---- */

#define SN_SGD_LR  0.05 /* SGD(lr, momentum=0.9, weight_decay=0.01) */
#define SN_ADAM_LR 0.01 /* AdamW(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01) */

/* ---- the acx side, in float ---- */

typedef struct sn_run_cfg {
    int strategy;       /* acx_sharding_strategy_t */
    int ranks_per_node; /* HYBRID_SHARD's node size; 0 = leave unset */
    int sgd;            /* 1: SGD with momentum, 0: AdamW */
    int accum;          /* gradient_accumulation_steps */
    int fwd_prefetch, bwd_prefetch, limit_all_gathers; /* -1 = leave unset */
    /* NULL, or called between creating the optimizer and acx_prepare with
     * the parameters in sn_par's order (parameter groups) */
    acx_status_t (*groups)(acx_optimizer_t *opt, acx_param_t *const *p);
} sn_run_cfg_t;

typedef struct sn_net {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u[SN_NUNIT];
    acx_param_t *p[SN_NPAR];
    acx_optimizer_t *opt;
    int rank, world;
} sn_net_t;

static inline acx_config_t sn_config(const sn_run_cfg_t *rc) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = SN_SEED;
    cfg.sharding_strategy = rc->strategy;
    cfg.gradient_accumulation_steps = rc->accum;
    cfg.bucket_size_mb = 64.0 / (1024 * 1024); /* NO_SHARD: several buckets per step */
    if (rc->ranks_per_node > 0) cfg.ranks_per_node = rc->ranks_per_node;
    if (rc->fwd_prefetch >= 0) cfg.fsdp.forward_prefetch = rc->fwd_prefetch;
    if (rc->bwd_prefetch >= 0) cfg.fsdp.backward_prefetch = rc->bwd_prefetch;
    if (rc->limit_all_gathers >= 0) cfg.fsdp.limit_all_gathers = rc->limit_all_gathers;
    return cfg;
}

/* acx_init (MPI already up), register the model, create the optimizer,
 * prepare without a loader. On failure net->acc is left for sn_close. */
static inline acx_status_t sn_open(sn_net_t *net, const sn_run_cfg_t *rc) {
    acx_config_t cfg = sn_config(rc);
    acx_status_t st;
    memset(net, 0, sizeof *net);
#define SN_TRY(call)                                                                               \
    do {                                                                                           \
        if ((st = (call)) != ACX_OK) return st;                                                    \
    } while (0)
    SN_TRY(acx_init(NULL, NULL, &cfg, &net->acc));
    /* the program's choices took effect (else a test could pass vacuously) */
    const acx_config_t *got = acx_get_config(net->acc);
    if (got->sharding_strategy != rc->strategy ||
        (rc->ranks_per_node > 0 && got->ranks_per_node != rc->ranks_per_node) ||
        (rc->fwd_prefetch >= 0 && got->fsdp.forward_prefetch != rc->fwd_prefetch) ||
        (rc->bwd_prefetch >= 0 && got->fsdp.backward_prefetch != rc->bwd_prefetch) ||
        (rc->limit_all_gathers >= 0 && got->fsdp.limit_all_gathers != rc->limit_all_gathers)) {
        fprintf(stderr,
                "\nacx_init resolved strategy %d, ranks_per_node %d, fsdp %d/%d/%d; the "
                "program asked for %d, %d, %d/%d/%d\n",
                got->sharding_strategy, got->ranks_per_node, got->fsdp.forward_prefetch,
                got->fsdp.backward_prefetch, got->fsdp.limit_all_gathers, rc->strategy,
                rc->ranks_per_node, rc->fwd_prefetch, rc->bwd_prefetch, rc->limit_all_gathers);
        return ACX_ERR_INTERNAL;
    }
    net->rank = acx_rank(net->acc);
    net->world = acx_world_size(net->acc);
    SN_TRY(acx_model_create(net->acc, &net->m));
    for (int u = 0; u < SN_NUNIT; u++)
        SN_TRY(acx_model_add_unit(net->m, sn_unit_name[u], &net->u[u]));
    for (int q = 0; q < SN_NPAR; q++)
        SN_TRY(acx_unit_add_param(net->u[sn_par[q].unit], sn_par[q].name, sn_par[q].ndim,
                                  sn_par[q].shape, sn_init_spec(q), &net->p[q]));
    if (rc->sgd) {
        acx_sgd_hparams_t hp = {.lr = SN_SGD_LR, .momentum = 0.9, .weight_decay = 0.01};
        SN_TRY(acx_sgd_create(net->m, &hp, &net->opt));
    } else {
        acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
        hp.lr = SN_ADAM_LR;
        SN_TRY(acx_adamw_create(net->m, &hp, &net->opt));
    }
    if (rc->groups != NULL) SN_TRY(rc->groups(net->opt, net->p));
    SN_TRY(acx_prepare(net->acc, net->m, net->opt, NULL));
#undef SN_TRY
    return ACX_OK;
}

static inline void sn_close(sn_net_t *net) {
    if (net->acc != NULL) acx_finalize(net->acc);
    net->acc = NULL;
}

/* Every parameter's full values, gathered: out [SN_NP]. Collective. */
static inline acx_status_t sn_gather(sn_net_t *net, float *out) {
    for (int q = 0; q < SN_NPAR; q++) {
        acx_status_t st = acx_param_gather(net->p[q], out + sn_off[q]);
        if (st != ACX_OK) return st;
    }
    return ACX_OK;
}

/* A pointer acx must hand out here is missing: say which and fail. */
static inline acx_status_t sn_missing(const char *what, int q) {
    fprintf(stderr, "\n%s(%s) is NULL inside acquire/release: %s\n", what, sn_par[q].name,
            acx_last_error());
    return ACX_ERR_INTERNAL;
}

/* One micro-step (micro-batch mi of `accum` in step `step`) of forward and
 * backward on this rank's slice, units acquired and released as FSDP does:
 * forward enc, mid, head (each released after use), then backward head,
 * mid, enc (re-acquired, gradients added, grads_ready, released). Data and
 * gradient pointers are fetched after each acquire: under the sharded
 * strategies neither survives a release or a boundary's grads_ready. */
static inline acx_status_t sn_micro_step(sn_net_t *net, int64_t step, int mi, int accum) {
    const int n = SN_GB / accum / net->world;
    const int64_t first = step * SN_GB + (int64_t)mi * (SN_GB / accum) + (int64_t)net->rank * n;
    float x[SN_GB][SN_DIN], y[SN_GB][SN_DOUT];
    float a[SN_GB][SN_DH], h[SN_GB][SN_DH], v[SN_GB][SN_DV], dout[SN_GB][SN_DOUT];
    float du[SN_GB][SN_DV];
    float gain;
    acx_status_t st;
#define SN_TRY(call)                                                                               \
    do {                                                                                           \
        if ((st = (call)) != ACX_OK) return st;                                                    \
    } while (0)
#define SN_DATA(var, q)                                                                            \
    const float *var = acx_param_data(net->p[q]);                                                  \
    if (var == NULL) return sn_missing("acx_param_data", q)
#define SN_GRAD(var, q)                                                                            \
    float *var = acx_param_grad(net->p[q]);                                                        \
    if (var == NULL) return sn_missing("acx_param_grad", q)
    for (int s = 0; s < n; s++) {
        for (int j = 0; j < SN_DIN; j++)
            x[s][j] = (float)sn_x(first + s, j);
        for (int k = 0; k < SN_DOUT; k++)
            y[s][k] = (float)sn_y(first + s, k);
    }

    /* forward */
    SN_TRY(acx_unit_acquire(net->u[0]));
    {
        SN_DATA(W1, SN_W1);
        SN_DATA(G, SN_GAIN);
        gain = G[0];
        for (int s = 0; s < n; s++)
            for (int i = 0; i < SN_DH; i++) {
                float acc = 0;
                for (int j = 0; j < SN_DIN; j++)
                    acc += W1[i * SN_DIN + j] * x[s][j];
                a[s][i] = acc;
                h[s][i] = tanhf(gain * acc);
            }
    }
    SN_TRY(acx_unit_release(net->u[0]));
    SN_TRY(acx_unit_acquire(net->u[1]));
    {
        SN_DATA(W2, SN_W2);
        SN_DATA(C, SN_C);
        for (int s = 0; s < n; s++)
            for (int k = 0; k < SN_DV; k++) {
                float acc = C[k];
                for (int i = 0; i < SN_DH; i++)
                    acc += W2[k * SN_DH + i] * h[s][i];
                v[s][k] = tanhf(acc);
            }
    }
    SN_TRY(acx_unit_release(net->u[1]));
    SN_TRY(acx_unit_acquire(net->u[2]));
    {
        SN_DATA(W3, SN_W3);
        SN_DATA(B, SN_B);
        for (int s = 0; s < n; s++)
            for (int m = 0; m < SN_DOUT; m++) {
                float o = B[m];
                for (int k = 0; k < SN_DV; k++)
                    o += W3[m * SN_DV + k] * v[s][k];
                dout[s][m] = (o - y[s][m]) / (float)n; /* d/do of the local mean loss */
            }
    }
    SN_TRY(acx_unit_release(net->u[2]));

    /* backward */
    SN_TRY(acx_unit_acquire(net->u[2]));
    {
        SN_DATA(W3, SN_W3);
        SN_GRAD(gW3, SN_W3);
        SN_GRAD(gB, SN_B);
        for (int s = 0; s < n; s++)
            for (int m = 0; m < SN_DOUT; m++) {
                gB[m] += dout[s][m];
                for (int k = 0; k < SN_DV; k++)
                    gW3[m * SN_DV + k] += dout[s][m] * v[s][k];
            }
        for (int s = 0; s < n; s++)
            for (int k = 0; k < SN_DV; k++) {
                float d = 0;
                for (int m = 0; m < SN_DOUT; m++)
                    d += dout[s][m] * W3[m * SN_DV + k];
                du[s][k] = d * (1.0f - v[s][k] * v[s][k]);
            }
    }
    SN_TRY(acx_unit_grads_ready(net->u[2]));
    SN_TRY(acx_unit_release(net->u[2]));
    SN_TRY(acx_unit_acquire(net->u[1]));
    float dz[SN_GB][SN_DH];
    {
        SN_DATA(W2, SN_W2);
        SN_GRAD(gW2, SN_W2);
        SN_GRAD(gC, SN_C);
        for (int s = 0; s < n; s++)
            for (int k = 0; k < SN_DV; k++) {
                gC[k] += du[s][k];
                for (int i = 0; i < SN_DH; i++)
                    gW2[k * SN_DH + i] += du[s][k] * h[s][i];
            }
        for (int s = 0; s < n; s++)
            for (int i = 0; i < SN_DH; i++) {
                float d = 0;
                for (int k = 0; k < SN_DV; k++)
                    d += du[s][k] * W2[k * SN_DH + i];
                dz[s][i] = d * (1.0f - h[s][i] * h[s][i]);
            }
    }
    SN_TRY(acx_unit_grads_ready(net->u[1]));
    SN_TRY(acx_unit_release(net->u[1]));
    SN_TRY(acx_unit_acquire(net->u[0]));
    {
        SN_DATA(G, SN_GAIN);
        SN_GRAD(gW1, SN_W1);
        SN_GRAD(gG, SN_GAIN);
        if (G[0] != gain) {
            fprintf(stderr, "\nenc.gain changed between forward and backward: %.9g then %.9g\n",
                    gain, G[0]);
            return ACX_ERR_INTERNAL;
        }
        for (int s = 0; s < n; s++)
            for (int i = 0; i < SN_DH; i++) {
                gG[0] += dz[s][i] * a[s][i];
                for (int j = 0; j < SN_DIN; j++)
                    gW1[i * SN_DIN + j] += dz[s][i] * gain * x[s][j];
            }
    }
    SN_TRY(acx_unit_grads_ready(net->u[0]));
    SN_TRY(acx_unit_release(net->u[0]));
#undef SN_DATA
#undef SN_GRAD
#undef SN_TRY
    return ACX_OK;
}

/* ---- the independent reference, in double ---- */

typedef struct sn_ref {
    double p[SN_NP], m[SN_NP], v[SN_NP]; /* parameters, momentum / exp_avg, exp_avg_sq */
    int64_t t;                           /* optimizer steps taken */
} sn_ref_t;

/* g [SN_NP] = the mean gradient over step `step`'s global batch at p. */
static inline void sn_ref_grad(const double *p, int64_t step, double *g) {
    const double *W1 = p + sn_off[SN_W1], *W2 = p + sn_off[SN_W2], *C = p + sn_off[SN_C];
    const double *W3 = p + sn_off[SN_W3], *B = p + sn_off[SN_B];
    const double gain = p[sn_off[SN_GAIN]];
    memset(g, 0, SN_NP * sizeof *g);
    for (int s = 0; s < SN_GB; s++) {
        int64_t i = step * SN_GB + s;
        double x[SN_DIN], a[SN_DH], h[SN_DH], v[SN_DV], dout[SN_DOUT], du[SN_DV];
        for (int j = 0; j < SN_DIN; j++)
            x[j] = (float)sn_x(i, j);
        for (int r = 0; r < SN_DH; r++) {
            a[r] = 0;
            for (int j = 0; j < SN_DIN; j++)
                a[r] += W1[r * SN_DIN + j] * x[j];
            h[r] = tanh(gain * a[r]);
        }
        for (int k = 0; k < SN_DV; k++) {
            double u = C[k];
            for (int r = 0; r < SN_DH; r++)
                u += W2[k * SN_DH + r] * h[r];
            v[k] = tanh(u);
        }
        for (int m = 0; m < SN_DOUT; m++) {
            double o = B[m];
            for (int k = 0; k < SN_DV; k++)
                o += W3[m * SN_DV + k] * v[k];
            dout[m] = (o - (double)(float)sn_y(i, m)) / SN_GB;
            g[sn_off[SN_B] + m] += dout[m];
            for (int k = 0; k < SN_DV; k++)
                g[sn_off[SN_W3] + m * SN_DV + k] += dout[m] * v[k];
        }
        for (int k = 0; k < SN_DV; k++) {
            double d = 0;
            for (int m = 0; m < SN_DOUT; m++)
                d += dout[m] * W3[m * SN_DV + k];
            du[k] = d * (1 - v[k] * v[k]);
            g[sn_off[SN_C] + k] += du[k];
            for (int r = 0; r < SN_DH; r++)
                g[sn_off[SN_W2] + k * SN_DH + r] += du[k] * h[r];
        }
        for (int r = 0; r < SN_DH; r++) {
            double d = 0;
            for (int k = 0; k < SN_DV; k++)
                d += du[k] * W2[k * SN_DH + r];
            double dz = d * (1 - h[r] * h[r]);
            g[sn_off[SN_GAIN]] += dz * a[r];
            for (int j = 0; j < SN_DIN; j++)
                g[sn_off[SN_W1] + r * SN_DIN + j] += dz * gain * x[j];
        }
    }
}

/* One optimizer step on grad, torch.optim.SGD / AdamW with the
 * hyperparameters above. */
static inline void sn_ref_step(sn_ref_t *r, const double *grad, int sgd) {
    r->t++;
    for (int e = 0; e < SN_NP; e++) {
        if (sgd) {
            double g = grad[e] + 0.01 * r->p[e];
            r->m[e] = r->t == 1 ? g : 0.9 * r->m[e] + g;
            r->p[e] -= SN_SGD_LR * r->m[e];
        } else {
            r->p[e] *= 1 - SN_ADAM_LR * 0.01;
            r->m[e] = 0.9 * r->m[e] + 0.1 * grad[e];
            r->v[e] = 0.999 * r->v[e] + 0.001 * grad[e] * grad[e];
            double bc1 = 1 - pow(0.9, (double)r->t), bc2 = 1 - pow(0.999, (double)r->t);
            r->p[e] -= SN_ADAM_LR / bc1 * r->m[e] / (sqrt(r->v[e]) / sqrt(bc2) + 1e-8);
        }
    }
}

/* ---- comparisons ---- */

/* ||a - b|| / ||b|| over n elements (the absolute difference when b is 0). */
static inline double sn_rel_fd(const float *a, const double *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline double sn_rel_ff(const float *a, const float *b, int n) {
    double bd[SN_NP];
    for (int i = 0; i < n; i++)
        bd[i] = b[i];
    return sn_rel_fd(a, bd, n);
}

/* Every parameter of got [SN_NP] against want, relative <= tol; prints the
 * first that is not, naming `what`. Returns 0 when all agree. */
static inline int sn_compare_fd(const char *what, const float *got, const double *want, double tol,
                                double *worst_p) {
    int bad = 0;
    for (int q = 0; q < SN_NPAR; q++) {
        int n = sn_off[q + 1] - sn_off[q];
        double r = sn_rel_fd(got + sn_off[q], want + sn_off[q], n);
        if (worst_p != NULL && r > *worst_p) *worst_p = r;
        if (!(r <= tol) && !bad) {
            fprintf(stderr, "\n%s: %s differs: relative %.3g > %g (element 0: %.9g vs %.9g)\n",
                    what, sn_par[q].name, r, tol, (double)got[sn_off[q]], want[sn_off[q]]);
            bad = 1;
        }
    }
    return bad;
}

static inline int sn_compare_ff(const char *what, const float *got, const float *want, double tol,
                                double *worst_p) {
    double wd[SN_NP];
    for (int i = 0; i < SN_NP; i++)
        wd[i] = want[i];
    return sn_compare_fd(what, got, wd, tol, worst_p);
}

#endif /* ACX_TEST_SHARD_NET_H */

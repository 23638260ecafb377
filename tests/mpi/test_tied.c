/*
 * tests/mpi/test_tied.c — tied parameters through a shared unit
 * (acx_model_add_shared_unit): a tiny language model whose token embedding
 * is also its output layer, trained under every strategy.
 *
 *   unit   parameter   shape   use
 *   embed  wte         [5, 3]  e = wte[tok] * gain          (the lookup)
 *          emb.gain    [3]
 *   blk0   blk0.w      [3, 3]  h1 = tanh(W0 e + b0)
 *          blk0.b      [3]
 *   blk1   blk1.w      [3, 3]  h2 = h1 + tanh(W1 h1)
 *   head   (shared unit of embed)  logits = wte . h2 [5]
 *   loss = cross-entropy(softmax(logits), target), mean over the global batch
 *
 * wte's 5 rows split 3,2 on 2 ranks and 2,2,1 on 3. Backward is written by
 * hand: the head adds dlogits x h2 into acx_param_grad(wte), the embedding
 * adds the lookup's gradient into the same buffer. Run on 1, 2 and 3 ranks
 * (tests/mpi/tied.test); every world size checks against references it
 * computes itself:
 *
 *   untied reference  double precision, with the lookup matrix E and the
 *                     output matrix H kept apart and their gradients summed
 *                     by hand (g = gE + gH, applied to both; SGD with
 *                     momentum per torch.optim): every strategy's parameters
 *                     after 3 steps, relative (max-norm) <= 1e-6. The same
 *                     reference with the head's gradient dropped differs by
 *                     far more (the test would see a lost use).
 *   1-rank NO_SHARD   acx NO_SHARD where every rank trains on the whole
 *                     global batch: each rank runs exactly a 1-rank program
 *                     and the mean of equal gradients is that gradient, so
 *                     the run is the 1-rank run (to rounding of the 1/world
 *                     prescale). Every strategy, relative <= 1e-6.
 *                     Each storage unit's gradients are reduced once per
 *                     step (counted: buckets reported under no_shard,
 *                     reduce-scatters under the sharded strategies).
 *   strategies        no_shard (host and emulated device state),
 *                     shard_grad_op, full_shard (host and emulated),
 *                     hybrid_shard (one node, and one node per rank); with
 *                     1 and 2 accumulation micro-steps; the head kept
 *                     acquired into backward or released and re-acquired.
 *   mixed precision   bf16 parameters: full_shard and hybrid_shard against
 *                     no_shard, relative <= 1e-4.
 *   debug mode        ACX_DEBUG_MODE=1 (the unit checks of every gather and
 *                     reduce-scatter): full_shard trains to the same values.
 *   counters          full_shard without prefetch: the owner's storage is
 *                     all-gathered once per use that needed it (4 per step
 *                     re-acquiring the head, 3 keeping it), the blocks twice;
 *                     acquiring the head while embed is acquired gathers
 *                     nothing. With forward_prefetch, backward_pre and
 *                     limit_all_gathers 2: per step exactly 3 forward
 *                     prefetches (blk0, blk1, the head's = embed's storage)
 *                     and 3 backward ones (blk1, blk0, embed), which a
 *                     direction rule misreading the head's backward acquire
 *                     as a new forward pass would not give; values bitwise
 *                     equal to the run without prefetch.
 *   memory            full_shard's gradient peak (acx_memory_stats) within
 *                     acx_memory_estimate with shared_numel = embed's
 *                     elements, and on rank 0 above the estimate without it.
 *   errors            a parameter added to a shared unit, a shared unit
 *                     shared, an owner of another model, NULL owner,
 *                     after prepare; the head reporting twice; the head not
 *                     reporting (backward_end names it); wte readable while
 *                     only the head is acquired, not while nothing is.
 */
#include <stdint.h>
#include <stdlib.h>

#include "base/param_init.h"
#include "sharding/model.h"
#include "tests/acx_test_mpi.h"

#define V     5
#define D     3
#define GB    12 /* global batch: 1..3 ranks x 1..2 micro-steps */
#define STEPS 3
#define LR    0.1
#define MOM   0.9
#define WD    0.01
#define SEED  777
#define TOL   1e-6

enum { P_WTE, P_GAIN, P_W0, P_B0, P_W1, NPAR };
#define NP (V * D + D + D * D + D + D * D) /* 39 */
static const int par_off[NPAR + 1] = {0, 15, 18, 27, 30, NP};
static const char *const par_name[NPAR] = {"wte", "emb.gain", "blk0.w", "blk0.b", "blk1.w"};
static const int par_unit[NPAR] = {0, 0, 1, 1, 2};
static const int64_t par_shape[NPAR][2] = {{V, D}, {D, 0}, {D, D}, {D, 0}, {D, D}};
static const int par_ndim[NPAR] = {2, 1, 2, 1, 2};

static int rank, world;

static acx_init_spec_t spec_of(int q) {
    switch (q) {
    case P_WTE: return ACX_INIT_SPEC_NORMAL(0.0, 0.7);
    case P_GAIN: return ACX_INIT_SPEC_UNIFORM(0.5, 1.5);
    case P_B0: return ACX_INIT_SPEC_LINEAR_BIAS(D);
    default: return ACX_INIT_SPEC_LINEAR_WEIGHT;
    }
}

static int tok_in(int64_t i) { return (int)((i * 7 + 3) % V); }
static int tok_out(int64_t i) { return (int)((i * 3 + 1 + i / 5) % V); }

/* ---- the acx program ---- */

typedef struct run_cfg {
    int strategy, rpn, device, accum;
    int keep_head;       /* 1: the head stays acquired from forward into backward */
    int replicated;      /* 1: every rank trains on the whole global batch */
    int mixed;           /* bf16 parameters */
    int fwd, bwd, limit; /* fsdp.*; -1: no prefetch at all */
} run_cfg_t;

typedef struct net {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u[4]; /* embed, blk0, blk1, head */
    acx_param_t *p[NPAR];
    acx_optimizer_t *opt;
} net_t;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        acx_status_t st_ = (call);                                                                 \
        if (st_ != ACX_OK) return st_;                                                             \
    } while (0)

static acx_status_t net_open(net_t *net, const run_cfg_t *rc) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    memset(net, 0, sizeof *net);
    cfg.seed = SEED;
    cfg.sharding_strategy = rc->strategy;
    cfg.gradient_accumulation_steps = rc->accum;
    cfg.bucket_size_mb = 40.0 / (1024 * 1024); /* NO_SHARD: several buckets */
    if (rc->rpn > 0) cfg.ranks_per_node = rc->rpn;
    cfg.device_state = rc->device ? ACX_DEVICE_STATE_EMULATED : ACX_DEVICE_STATE_HOST;
    if (rc->mixed) cfg.mixed_precision = ACX_MP_BF16;
    if (rc->fwd < 0) {
        cfg.fsdp.forward_prefetch = 0;
        cfg.fsdp.backward_prefetch = ACX_BACKWARD_NONE;
        cfg.fsdp.limit_all_gathers = 0;
    } else {
        cfg.fsdp.forward_prefetch = rc->fwd;
        cfg.fsdp.backward_prefetch = rc->bwd;
        cfg.fsdp.limit_all_gathers = rc->limit;
    }
    TRY(acx_init(NULL, NULL, &cfg, &net->acc));
    if (acx_get_config(net->acc)->sharding_strategy != rc->strategy) return ACX_ERR_INTERNAL;
    TRY(acx_model_create(net->acc, &net->m));
    TRY(acx_model_add_unit(net->m, "embed", &net->u[0]));
    TRY(acx_model_add_unit(net->m, "blk0", &net->u[1]));
    TRY(acx_model_add_unit(net->m, "blk1", &net->u[2]));
    TRY(acx_model_add_shared_unit(net->m, "head", net->u[0], &net->u[3]));
    for (int q = 0; q < NPAR; q++)
        TRY(acx_unit_add_param(net->u[par_unit[q]], par_name[q], par_ndim[q], par_shape[q],
                               spec_of(q), &net->p[q]));
    acx_sgd_hparams_t hp = {.lr = LR, .momentum = MOM, .weight_decay = WD};
    TRY(acx_sgd_create(net->m, &hp, &net->opt));
    return acx_prepare(net->acc, net->m, net->opt, NULL);
}

static void net_close(net_t *net) {
    if (net->acc != NULL) acx_finalize(net->acc);
    net->acc = NULL;
}

/* Parameter q's values (host copy, tmp [numel]): from the device with
 * device state. NULL pointer from acx: an error. */
static acx_status_t get_data(net_t *net, int q, float *out) {
    const float *d = acx_param_data(net->p[q]);
    size_t n = (size_t)(par_off[q + 1] - par_off[q]);
    if (d == NULL) return ACX_ERR_STATE;
    if (net->m->ctx.dev != NULL)
        return net->m->ctx.dev->to_host(out, d, n * sizeof(float), net->m->ctx.stream);
    memcpy(out, d, n * sizeof(float));
    return ACX_OK;
}

/* acx_param_grad(q) += add [numel], wherever the buffer lives. */
static acx_status_t add_grad(net_t *net, int q, const float *add) {
    float *g = acx_param_grad(net->p[q]);
    size_t n = (size_t)(par_off[q + 1] - par_off[q]);
    float tmp[V * D];
    if (g == NULL) return ACX_ERR_STATE;
    const acx_devops_t *d = net->m->ctx.dev;
    if (d != NULL) TRY(d->to_host(tmp, g, n * sizeof(float), net->m->ctx.stream));
    if (d == NULL) memcpy(tmp, g, n * sizeof(float));
    for (size_t k = 0; k < n; k++)
        tmp[k] += add[k];
    if (d != NULL) return d->to_device(g, tmp, n * sizeof(float), net->m->ctx.stream);
    memcpy(g, tmp, n * sizeof(float));
    return ACX_OK;
}

/* One micro-step: forward embed, blk0, blk1, head; backward head, blk1,
 * blk0, embed; units acquired and released as an FSDP program does. */
static acx_status_t micro_step(net_t *net, const run_cfg_t *rc, int step, int mi) {
    const int per_micro = GB / rc->accum;
    const int n = rc->replicated ? per_micro : per_micro / world;
    const int64_t first =
        (int64_t)step * GB + (int64_t)mi * per_micro + (rc->replicated ? 0 : (int64_t)rank * n);
    float wte[V * D], gain[D], W0[D * D], b0[D], W1[D * D];
    float e[GB][D], h1[GB][D], r[GB][D], h2[GB][D], dl[GB][V], dh2[GB][D], dh1[GB][D];
    float g_wte[V * D] = {0}, g_gain[D] = {0}, g_W0[D * D] = {0}, g_b0[D] = {0}, g_W1[D * D] = {0};

    /* forward */
    TRY(acx_unit_acquire(net->u[0]));
    TRY(get_data(net, P_WTE, wte));
    TRY(get_data(net, P_GAIN, gain));
    for (int s = 0; s < n; s++)
        for (int j = 0; j < D; j++)
            e[s][j] = wte[tok_in(first + s) * D + j] * gain[j];
    TRY(acx_unit_release(net->u[0]));
    TRY(acx_unit_acquire(net->u[1]));
    TRY(get_data(net, P_W0, W0));
    TRY(get_data(net, P_B0, b0));
    for (int s = 0; s < n; s++)
        for (int k = 0; k < D; k++) {
            float a = b0[k];
            for (int j = 0; j < D; j++)
                a += W0[k * D + j] * e[s][j];
            h1[s][k] = tanhf(a);
        }
    TRY(acx_unit_release(net->u[1]));
    TRY(acx_unit_acquire(net->u[2]));
    TRY(get_data(net, P_W1, W1));
    for (int s = 0; s < n; s++)
        for (int k = 0; k < D; k++) {
            float c = 0;
            for (int i = 0; i < D; i++)
                c += W1[k * D + i] * h1[s][i];
            r[s][k] = tanhf(c);
            h2[s][k] = h1[s][k] + r[s][k];
        }
    TRY(acx_unit_release(net->u[2]));
    TRY(acx_unit_acquire(net->u[3]));
    TRY(get_data(net, P_WTE, wte)); /* the owner's parameter, through the head */
    for (int s = 0; s < n; s++) {
        float lg[V], mx = -INFINITY, z = 0;
        for (int v = 0; v < V; v++) {
            lg[v] = 0;
            for (int j = 0; j < D; j++)
                lg[v] += wte[v * D + j] * h2[s][j];
            mx = fmaxf(mx, lg[v]);
        }
        for (int v = 0; v < V; v++)
            z += expf(lg[v] - mx);
        for (int v = 0; v < V; v++)
            dl[s][v] = (expf(lg[v] - mx) / z - (v == tok_out(first + s))) / (float)n;
    }
    if (!rc->keep_head) TRY(acx_unit_release(net->u[3]));

    /* backward */
    if (!rc->keep_head) {
        TRY(acx_unit_acquire(net->u[3]));
        TRY(get_data(net, P_WTE, wte));
    }
    for (int s = 0; s < n; s++)
        for (int j = 0; j < D; j++) {
            float d = 0;
            for (int v = 0; v < V; v++) {
                g_wte[v * D + j] += dl[s][v] * h2[s][j];
                d += dl[s][v] * wte[v * D + j];
            }
            dh2[s][j] = d;
        }
    TRY(add_grad(net, P_WTE, g_wte));
    TRY(acx_unit_grads_ready(net->u[3]));
    TRY(acx_unit_release(net->u[3]));
    TRY(acx_unit_acquire(net->u[2]));
    TRY(get_data(net, P_W1, W1));
    for (int s = 0; s < n; s++) {
        float dc[D];
        for (int k = 0; k < D; k++)
            dc[k] = dh2[s][k] * (1.0f - r[s][k] * r[s][k]);
        for (int i = 0; i < D; i++) {
            float d = dh2[s][i];
            for (int k = 0; k < D; k++) {
                g_W1[k * D + i] += dc[k] * h1[s][i];
                d += dc[k] * W1[k * D + i];
            }
            dh1[s][i] = d;
        }
    }
    TRY(add_grad(net, P_W1, g_W1));
    TRY(acx_unit_grads_ready(net->u[2]));
    TRY(acx_unit_release(net->u[2]));
    TRY(acx_unit_acquire(net->u[1]));
    TRY(get_data(net, P_W0, W0));
    float de[GB][D];
    for (int s = 0; s < n; s++) {
        float da[D];
        for (int k = 0; k < D; k++) {
            da[k] = dh1[s][k] * (1.0f - h1[s][k] * h1[s][k]);
            g_b0[k] += da[k];
        }
        for (int j = 0; j < D; j++) {
            float d = 0;
            for (int k = 0; k < D; k++) {
                g_W0[k * D + j] += da[k] * e[s][j];
                d += da[k] * W0[k * D + j];
            }
            de[s][j] = d;
        }
    }
    TRY(add_grad(net, P_W0, g_W0));
    TRY(add_grad(net, P_B0, g_b0));
    TRY(acx_unit_grads_ready(net->u[1]));
    TRY(acx_unit_release(net->u[1]));
    TRY(acx_unit_acquire(net->u[0]));
    TRY(get_data(net, P_WTE, wte));
    TRY(get_data(net, P_GAIN, gain));
    memset(g_wte, 0, sizeof g_wte);
    for (int s = 0; s < n; s++) {
        int t = tok_in(first + s);
        for (int j = 0; j < D; j++) {
            g_wte[t * D + j] += de[s][j] * gain[j];
            g_gain[j] += de[s][j] * wte[t * D + j];
        }
    }
    TRY(add_grad(net, P_WTE, g_wte));
    TRY(add_grad(net, P_GAIN, g_gain));
    TRY(acx_unit_grads_ready(net->u[0]));
    TRY(acx_unit_release(net->u[0]));
    return ACX_OK;
}

/* Per-step statistics of one run (full_shard). */
typedef struct stats {
    uint64_t gathers[3];    /* per storage unit (embed, blk0, blk1), per step */
    uint64_t reductions[3]; /* per storage unit, per step */
    uint64_t fwd, bwd;      /* prefetches per step */
    int uniform;            /* every step counted the same */
} stats_t;

static int train(const run_cfg_t *rc, float *final, stats_t *stp) {
    net_t net;
    stats_t first = {0}, prev = {0};
    int uniform = 1;
    CHECK_OK(net_open(&net, rc));
    for (int u = 0; u < 3; u++) /* shard_grad_op gathers at prepare */
        prev.gathers[u] = net.u[u]->gathers;
    for (int s = 0; s < STEPS; s++) {
        for (int mi = 0; mi < rc->accum; mi++) {
            CHECK_OK(acx_accumulate_begin(net.acc));
            CHECK_OK(micro_step(&net, rc, s, mi));
            CHECK_OK(acx_backward_end(net.acc));
            if (acx_sync_gradients(net.acc)) {
                CHECK_OK(acx_optimizer_step(net.opt));
                CHECK_OK(acx_optimizer_zero_grad(net.opt));
            }
            CHECK_OK(acx_accumulate_end(net.acc));
        }
        stats_t now = {0}, d = {0};
        for (int u = 0; u < 3; u++) {
            now.gathers[u] = net.u[u]->gathers;
            now.reductions[u] = net.u[u]->reductions;
            d.gathers[u] = now.gathers[u] - prev.gathers[u];
            d.reductions[u] = now.reductions[u] - prev.reductions[u];
        }
        now.fwd = net.m->prefetch_stats.forward;
        now.bwd = net.m->prefetch_stats.backward;
        d.fwd = now.fwd - prev.fwd;
        d.bwd = now.bwd - prev.bwd;
        if (s == 0)
            first = d;
        else if (memcmp(d.gathers, first.gathers, sizeof d.gathers) != 0 ||
                 memcmp(d.reductions, first.reductions, sizeof d.reductions) != 0 ||
                 d.fwd != first.fwd || d.bwd != first.bwd)
            uniform = 0;
        prev = now;
    }
    for (int q = 0; q < NPAR; q++)
        CHECK_OK(acx_param_gather(net.p[q], final + par_off[q]));
    if (stp != NULL) {
        *stp = first;
        stp->uniform = uniform;
    }
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* ---- the untied reference, in double ---- */

/* STEPS of SGD (momentum, weight decay: torch.optim.SGD) on the mean
 * gradient over each step's global batch. The lookup matrix E and the
 * output matrix H are separate arrays that start equal; each step their
 * gradients gE and gH are summed by hand and the sum applied to both.
 * drop_head: leave gH out (what losing the head's use would train). */
static void ref_train(int drop_head, double *final) {
    float init[NP];
    double p[NP], mom[NP] = {0}, H[V * D], momH[V * D] = {0};
    for (int q = 0; q < NPAR; q++) {
        acx_init_spec_t spec = spec_of(q);
        acx_param_init_fill(&spec, par_ndim[q], par_shape[q], SEED, par_name[q], 0, par_shape[q][0],
                            init + par_off[q]);
    }
    for (int k = 0; k < NP; k++)
        p[k] = init[k];
    memcpy(H, p, sizeof H);
    for (int step = 0; step < STEPS; step++) {
        double g[NP] = {0}, gH[V * D] = {0};
        double *E = p + par_off[P_WTE], *gain = p + par_off[P_GAIN], *W0 = p + par_off[P_W0];
        double *b0 = p + par_off[P_B0], *W1 = p + par_off[P_W1];
        for (int s = 0; s < GB; s++) {
            int64_t i = (int64_t)step * GB + s;
            int t = tok_in(i), y = tok_out(i);
            double e[D], h1[D], r[D], h2[D], lg[V], dl[V], dh2[D], dh1[D], mx = -INFINITY, z = 0;
            for (int j = 0; j < D; j++)
                e[j] = E[t * D + j] * gain[j];
            for (int k = 0; k < D; k++) {
                double a = b0[k];
                for (int j = 0; j < D; j++)
                    a += W0[k * D + j] * e[j];
                h1[k] = tanh(a);
            }
            for (int k = 0; k < D; k++) {
                double c = 0;
                for (int j = 0; j < D; j++)
                    c += W1[k * D + j] * h1[j];
                r[k] = tanh(c);
                h2[k] = h1[k] + r[k];
            }
            for (int v = 0; v < V; v++) {
                lg[v] = 0;
                for (int j = 0; j < D; j++)
                    lg[v] += H[v * D + j] * h2[j];
                mx = fmax(mx, lg[v]);
            }
            for (int v = 0; v < V; v++)
                z += exp(lg[v] - mx);
            for (int v = 0; v < V; v++)
                dl[v] = (exp(lg[v] - mx) / z - (v == y)) / GB;
            for (int j = 0; j < D; j++) {
                dh2[j] = 0;
                for (int v = 0; v < V; v++) {
                    gH[v * D + j] += dl[v] * h2[j];
                    dh2[j] += dl[v] * H[v * D + j];
                }
            }
            for (int i2 = 0; i2 < D; i2++)
                dh1[i2] = dh2[i2];
            for (int k = 0; k < D; k++) {
                double dc = dh2[k] * (1 - r[k] * r[k]);
                for (int j = 0; j < D; j++) {
                    g[par_off[P_W1] + k * D + j] += dc * h1[j];
                    dh1[j] += dc * W1[k * D + j];
                }
            }
            for (int k = 0; k < D; k++) {
                double da = dh1[k] * (1 - h1[k] * h1[k]);
                g[par_off[P_B0] + k] += da;
                for (int j = 0; j < D; j++)
                    g[par_off[P_W0] + k * D + j] += da * e[j];
            }
            for (int j = 0; j < D; j++) {
                double de = 0;
                for (int k = 0; k < D; k++)
                    de += (dh1[k] * (1 - h1[k] * h1[k])) * W0[k * D + j];
                g[par_off[P_WTE] + t * D + j] += de * gain[j]; /* gE */
                g[par_off[P_GAIN] + j] += de * E[t * D + j];
            }
        }
        /* the tie, by hand: both matrices take gE + gH */
        double gsum[V * D];
        for (int k = 0; k < V * D; k++)
            gsum[k] = g[par_off[P_WTE] + k] + (drop_head ? 0.0 : gH[k]);
        for (int k = 0; k < V * D; k++)
            g[par_off[P_WTE] + k] = gsum[k];
        for (int k = 0; k < NP; k++) {
            double gk = g[k] + WD * p[k];
            mom[k] = step == 0 ? gk : MOM * mom[k] + gk;
            p[k] -= LR * mom[k];
        }
        for (int k = 0; k < V * D; k++) {
            double gk = gsum[k] + WD * H[k];
            momH[k] = step == 0 ? gk : MOM * momH[k] + gk;
            H[k] -= LR * momH[k];
        }
    }
    memcpy(final, p, sizeof p);
}

/* max |a - b| / max |b| over the NP parameters */
static double rel_fd(const float *a, const double *b) {
    double num = 0, den = 0;
    for (int k = 0; k < NP; k++) {
        num = fmax(num, fabs((double)a[k] - b[k]));
        den = fmax(den, fabs(b[k]));
    }
    return num / den;
}

static double rel_ff(const float *a, const float *b) {
    double bd[NP];
    for (int k = 0; k < NP; k++)
        bd[k] = b[k];
    return rel_fd(a, bd);
}

/* ---- cases ---- */

typedef struct strat {
    int strategy, rpn, device;
    const char *label;
} strat_t;

static strat_t strats[8];
static int num_strats;

static void plan_strategies(void) {
    static char hyb[32];
    strats[num_strats++] = (strat_t){ACX_NO_SHARD, 0, 0, "no_shard"};
    strats[num_strats++] = (strat_t){ACX_NO_SHARD, 0, 1, "no_shard(emulated)"};
    strats[num_strats++] = (strat_t){ACX_SHARD_GRAD_OP, 0, 0, "shard_grad_op"};
    strats[num_strats++] = (strat_t){ACX_FULL_SHARD, 0, 0, "full_shard"};
    strats[num_strats++] = (strat_t){ACX_FULL_SHARD, 0, 1, "full_shard(emulated)"};
    strats[num_strats++] = (strat_t){ACX_HYBRID_SHARD, 1, 0, "hybrid_shard(rpn=1)"};
    if (world > 1) {
        snprintf(hyb, sizeof hyb, "hybrid_shard(rpn=%d)", world);
        strats[num_strats++] = (strat_t){ACX_HYBRID_SHARD, world, 0, hyb};
    }
}

static run_cfg_t cfg_of(const strat_t *s, int accum, int keep_head) {
    return (run_cfg_t){.strategy = s->strategy,
                       .rpn = s->rpn,
                       .device = s->device,
                       .accum = accum,
                       .keep_head = keep_head,
                       .fwd = -1};
}

static int case_equivalence(void) {
    double ref[NP], ref_lost[NP];
    float one_rank[2][NP], got[NP];
    int bad = 0;
    ref_train(0, ref);
    ref_train(1, ref_lost);
    for (int a = 0; a < 2; a++) {
        run_cfg_t rc = cfg_of(&strats[0], a + 1, 0);
        rc.replicated = 1;
        CHECK(train(&rc, one_rank[a], NULL) == 0);
        double e = rel_fd(one_rank[a], ref);
        if (e > TOL) {
            fprintf(stderr, "\n1-rank no_shard accum=%d vs the untied reference: relative %.3g\n",
                    a + 1, e);
            bad = 1;
        }
    }
    /* the test sees a lost use: the reference without the head's gradient
     * is far from the tied one */
    CHECK(rel_fd(one_rank[0], ref_lost) > 1e-3);
    double worst1 = 0, worst2 = 0;
    for (int si = 0; si < num_strats; si++)
        for (int a = 0; a < 2; a++)
            for (int keep = 0; keep < 2; keep++) {
                run_cfg_t rc = cfg_of(&strats[si], a + 1, keep);
                stats_t st;
                CHECK(train(&rc, got, &st) == 0);
                /* one reduction per storage unit and step, whatever the
                 * micro-steps and uses: embed's after its second use */
                if (!st.uniform || st.reductions[0] != 1 || st.reductions[1] != 1 ||
                    st.reductions[2] != 1) {
                    fprintf(stderr,
                            "\n%s accum=%d keep_head=%d: %llu/%llu/%llu reductions of "
                            "embed/blk0/blk1 per step (expected 1/1/1)\n",
                            strats[si].label, a + 1, keep, (unsigned long long)st.reductions[0],
                            (unsigned long long)st.reductions[1],
                            (unsigned long long)st.reductions[2]);
                    bad = 1;
                }
                double e1 = rel_ff(got, one_rank[a]), e2 = rel_fd(got, ref);
                worst1 = fmax(worst1, e1);
                worst2 = fmax(worst2, e2);
                if (e1 > TOL || e2 > TOL) {
                    fprintf(stderr,
                            "\n[r%d] %s accum=%d keep_head=%d np=%d: relative %.3g vs the 1-rank "
                            "no_shard run, %.3g vs the untied reference (limit %g)\n",
                            rank, strats[si].label, a + 1, keep, world, e1, e2, TOL);
                    bad = 1;
                }
            }
    if (rank == 0)
        printf(" (worst %.2g / %.2g; no head gradient: %.2g)", worst1, worst2,
               rel_fd(one_rank[0], ref_lost));
    return bad;
error:
    return 1;
}

static int case_mixed(void) {
    float base[NP], got[NP];
    int bad = 0;
    for (int a = 1; a <= 2; a++) {
        run_cfg_t rc = cfg_of(&strats[0], a, 0);
        rc.mixed = 1;
        CHECK(train(&rc, base, NULL) == 0);
        for (int si = 2; si < num_strats; si++) {
            if (strats[si].device) continue;
            rc = cfg_of(&strats[si], a, a - 1);
            rc.mixed = 1;
            CHECK(train(&rc, got, NULL) == 0);
            double e = rel_ff(got, base);
            if (e > 1e-4) {
                fprintf(stderr, "\n%s bf16 accum=%d: relative %.3g vs no_shard bf16\n",
                        strats[si].label, a, e);
                bad = 1;
            }
        }
    }
    return bad;
error:
    return 1;
}

static int case_debug_mode(void) {
    float base[NP], got[NP];
    run_cfg_t rc = cfg_of(&strats[3], 2, 0); /* full_shard, 2 micro-steps */
    CHECK(train(&rc, base, NULL) == 0);
    setenv("ACX_DEBUG_MODE", "1", 1);
    int failed = train(&rc, got, NULL);
    unsetenv("ACX_DEBUG_MODE");
    CHECK(failed == 0);
    CHECK(memcmp(got, base, sizeof got) == 0);
    return 0;
error:
    unsetenv("ACX_DEBUG_MODE");
    return 1;
}

static int case_counters(void) {
    float base[NP], got[NP];
    stats_t st;
    strat_t fs = strats[3];
    net_t net = {0};
    for (int keep = 0; keep < 2; keep++) {
        run_cfg_t rc = cfg_of(&fs, 1, keep);
        CHECK(train(&rc, base, &st) == 0);
        CHECK(st.uniform);
        /* uses of embed's storage that found no values: embed forward, the
         * head's forward acquire, the head's backward re-acquire (unless
         * kept), embed backward */
        if (st.gathers[0] != (uint64_t)(4 - keep) || st.gathers[1] != 2 || st.gathers[2] != 2 ||
            st.fwd != 0 || st.bwd != 0) {
            fprintf(stderr,
                    "\nfull_shard keep_head=%d without prefetch: per step %llu/%llu/%llu "
                    "all-gathers of embed/blk0/blk1 (expected %d/2/2), %llu/%llu prefetches\n",
                    keep, (unsigned long long)st.gathers[0], (unsigned long long)st.gathers[1],
                    (unsigned long long)st.gathers[2], 4 - keep, (unsigned long long)st.fwd,
                    (unsigned long long)st.bwd);
            TEST_ERROR;
        }
    }
    /* prefetch: forward from embed fetches blk0, from blk0 blk1, from blk1
     * the head (embed's storage, released after the lookup); backward from
     * the head's re-acquire fetches blk1, then blk0, then embed. With the
     * head read as a new forward pass, backward would prefetch forward. */
    run_cfg_t rc = cfg_of(&fs, 1, 0);
    CHECK(train(&rc, base, NULL) == 0);
    rc.fwd = 1;
    rc.bwd = ACX_BACKWARD_PRE;
    rc.limit = 2;
    CHECK(train(&rc, got, &st) == 0);
    CHECK(st.uniform);
    if (st.fwd != 3 || st.bwd != 3 || st.gathers[0] != 4 || st.gathers[1] != 2 ||
        st.gathers[2] != 2) {
        fprintf(stderr,
                "\nfull_shard forward_prefetch backward_pre limit 2: per step %llu forward and "
                "%llu backward prefetches (expected 3 and 3), all-gathers %llu/%llu/%llu "
                "(expected 4/2/2)\n",
                (unsigned long long)st.fwd, (unsigned long long)st.bwd,
                (unsigned long long)st.gathers[0], (unsigned long long)st.gathers[1],
                (unsigned long long)st.gathers[2]);
        TEST_ERROR;
    }
    CHECK(memcmp(got, base, sizeof got) == 0);
    /* backward_post from the kept head: grads_ready(head) prefetches blk1 */
    rc.keep_head = 1;
    rc.bwd = ACX_BACKWARD_POST;
    CHECK(train(&rc, got, &st) == 0);
    CHECK(st.bwd >= 1);
    rc.keep_head = 0;
    rc.fwd = -1;
    CHECK(train(&rc, base, NULL) == 0);

    /* acquiring the head while embed holds the values gathers nothing */
    rc = cfg_of(&fs, 1, 0);
    CHECK_OK(net_open(&net, &rc));
    CHECK(acx_param_data(net.p[P_WTE]) == NULL); /* nothing acquired */
    CHECK_OK(acx_unit_acquire(net.u[0]));
    uint64_t g0 = net.u[0]->gathers;
    CHECK_OK(acx_unit_acquire(net.u[3]));
    CHECK(net.u[0]->gathers == g0);
    CHECK_OK(acx_unit_release(net.u[0]));
    CHECK(acx_param_data(net.p[P_WTE]) != NULL); /* the head still holds them */
    CHECK_OK(acx_unit_acquire(net.u[0]));
    CHECK(net.u[0]->gathers == g0);
    CHECK_OK(acx_unit_release(net.u[3]));
    CHECK_OK(acx_unit_release(net.u[0]));
    CHECK(acx_param_data(net.p[P_WTE]) == NULL);
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* full_shard's gradient memory (acx_memory_stats) against
 * acx_memory_estimate: embed's full gradient buffer lives from the head's
 * backward to its own, beside blk1's and blk0's, which the estimate covers
 * with shared_numel = embed's elements and would miss without it. */
static int case_memory(void) {
    net_t net = {0};
    run_cfg_t rc = cfg_of(&strats[3], 1, 0);
    acx_memory_stats_t ms;
    acx_memory_estimate_t est, est_untied;
    int64_t sh = 0; /* rank 0's shard: ceil(R / world) rows of every parameter */
    for (int q = 0; q < NPAR; q++) {
        int64_t rows = par_shape[q][0], row_numel = (par_off[q + 1] - par_off[q]) / rows;
        sh += (rows + world - 1) / world * row_numel;
    }
    acx_memory_model_t mm = {.numel = NP,
                             .largest_unit = V * D + D, /* embed */
                             .shard_numel = sh,
                             .world_size = world,
                             .strategy = ACX_FULL_SHARD,
                             .optimizer_states = 1,
                             .limit_all_gathers = 0,
                             .num_units = 3, /* the head has no storage */
                             .shared_numel = V * D + D};
    CHECK_OK(acx_memory_estimate(&mm, &est));
    mm.shared_numel = 0;
    CHECK_OK(acx_memory_estimate(&mm, &est_untied));
    CHECK_OK(net_open(&net, &rc));
    acx_memory_reset_peak();
    for (int s = 0; s < 2; s++) {
        CHECK_OK(acx_accumulate_begin(net.acc));
        CHECK_OK(micro_step(&net, &rc, s, 0));
        CHECK_OK(acx_backward_end(net.acc));
        CHECK_OK(acx_optimizer_step(net.opt));
        CHECK_OK(acx_optimizer_zero_grad(net.opt));
        CHECK_OK(acx_accumulate_end(net.acc));
    }
    CHECK_OK(acx_memory_stats(&ms));
    if (ms.peak[ACX_MEM_GRADS] > est.grads || ms.peak_total > est.total ||
        (rank == 0 && ms.peak[ACX_MEM_GRADS] <= est_untied.grads)) {
        fprintf(stderr,
                "\n[r%d] full_shard gradients peaked at %lld bytes (total %lld); estimate %lld "
                "(total %lld), %lld without the shared term\n",
                rank, (long long)ms.peak[ACX_MEM_GRADS], (long long)ms.peak_total,
                (long long)est.grads, (long long)est.total, (long long)est_untied.grads);
        TEST_ERROR;
    }
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

static int case_errors(void) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    acx_accelerator_t *acc = NULL;
    acx_model_t *m = NULL, *other = NULL;
    acx_unit_t *embed, *head, *x, *foreign;
    acx_param_t *p;
    const int64_t shape[2] = {V, D};
    cfg.sharding_strategy = ACX_FULL_SHARD;
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    CHECK_OK(acx_model_create(acc, &m));
    CHECK_OK(acx_model_create(acc, &other));
    CHECK_OK(acx_model_add_unit(m, "embed", &embed));
    CHECK_OK(acx_model_add_unit(other, "elsewhere", &foreign));
    CHECK_OK(acx_unit_add_param(embed, "wte", 2, shape, ACX_INIT_SPEC_ZEROS, &p));
    CHECK_OK(acx_model_add_shared_unit(m, "head", embed, &head));
    CHECK_STATUS(acx_unit_add_param(head, "head.w", 2, shape, ACX_INIT_SPEC_ZEROS, &p),
                 ACX_ERR_INVALID_ARG, "shared unit of 'embed'");
    CHECK_STATUS(acx_model_add_shared_unit(m, "head2", head, &x), ACX_ERR_INVALID_ARG,
                 "is itself a shared unit");
    CHECK_STATUS(acx_model_add_shared_unit(m, "x", foreign, &x), ACX_ERR_INVALID_ARG,
                 "another model");
    CHECK_STATUS(acx_model_add_shared_unit(m, "x", NULL, &x), ACX_ERR_INVALID_ARG, "NULL");
    CHECK_STATUS(acx_model_add_shared_unit(m, "embed", embed, &x), ACX_ERR_INVALID_ARG,
                 "already registered");
    CHECK_OK(acx_prepare(acc, m, NULL, NULL));
    CHECK_STATUS(acx_model_add_shared_unit(m, "late", embed, &x), ACX_ERR_STATE,
                 "already prepared");
    /* the head reports twice; then a micro-step where it does not report */
    CHECK_OK(acx_accumulate_begin(acc));
    CHECK_OK(acx_unit_acquire(head));
    CHECK(acx_param_data(p) != NULL);
    CHECK(acx_param_grad(p) != NULL);
    CHECK_OK(acx_unit_grads_ready(head));
    CHECK_STATUS(acx_unit_grads_ready(head), ACX_ERR_STATE, "twice");
    CHECK_OK(acx_unit_release(head));
    CHECK_OK(acx_unit_acquire(embed));
    CHECK_OK(acx_unit_grads_ready(embed));
    CHECK_OK(acx_unit_release(embed));
    CHECK_OK(acx_backward_end(acc));
    CHECK_OK(acx_accumulate_end(acc));
    CHECK_OK(acx_accumulate_begin(acc));
    CHECK_OK(acx_unit_acquire(embed));
    CHECK_OK(acx_unit_grads_ready(embed));
    CHECK_OK(acx_unit_release(embed));
    CHECK_STATUS(acx_backward_end(acc), ACX_ERR_STATE, "'head'");
    acx_finalize(acc);
    return 0;
error:
    if (acc != NULL) acx_finalize(acc);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 280, &rank, &world);
    if (GB % world != 0 || (GB / 2) % world != 0) {
        if (rank == 0) printf("tied: world size %d does not divide the batch\n", world);
        MPI_Finalize();
        return 77;
    }
    plan_strategies();
    int failed = 0;
    failed |= acx_test_run_case("tied: every strategy = 1-rank no_shard = untied reference",
                                case_equivalence);
    failed |= acx_test_run_case("tied: mixed precision, sharded = no_shard", case_mixed);
    failed |= acx_test_run_case("tied: debug mode (unit checks)", case_debug_mode);
    failed |= acx_test_run_case("tied: gathers and prefetches counted", case_counters);
    failed |= acx_test_run_case("tied: gradient memory within the estimate", case_memory);
    failed |= acx_test_run_case("tied: errors", case_errors);
    MPI_Finalize();
    return failed ? 1 : 0;
}

/*
 * tests/mpi/test_accumulate.c — gradient accumulation and global item
 * normalization under every sharding strategy, with the gradient
 * communication counted independently of acx.
 *
 * The model works on "tokens": sample `id` holds ntok tokens, token t has an
 * input x(id, t) in R^4 and a target y(id, t) in R^3, and the per-token loss
 * is 0.5 ||W2 tanh(W1 x + b1) + b2 - y||^2. Two units (enc: [5,4] + [5];
 * head: [3,5] + [3]) are acquired and released as an FSDP program does; the
 * row counts 5 and 3 leave some ranks without rows at 4 ranks.
 *
 * The reference is an independent double-precision implementation written
 * here (forward, backward, torch.optim.SGD with momentum), fed every rank's
 * micro-batches: one SGD step per global batch on the token mean of the
 * gradient over the concatenation of the k micro-batches of all ranks.
 *
 *   accumulation  k = 2 and 4, 3 optimizer steps, every strategy (no_shard,
 *                 shard_grad_op, full_shard, hybrid_shard with ranks_per_node
 *                 2 on even world sizes, else 1), three ways:
 *                   equal/mean:  every micro-batch of every rank holds 6
 *                                tokens; the program adds the gradient of its
 *                                micro-batch's MEAN loss and acx divides by
 *                                world x k (Accelerate's default);
 *                   equal/items: the same data through acx_accumulate_items
 *                                (the program adds SUM gradients);
 *                   unequal:     0..3 samples of 1..5 tokens per micro-batch
 *                                and rank (some hold none) through
 *                                acx_accumulate_items.
 *                 Parameters after 3 steps vs the reference: relative
 *                 difference (per parameter, ||a-b|| / ||b||) <= 1e-5. In the
 *                 unequal case the two wrong normalizations — a mean of
 *                 per-(micro-batch, rank) means, and a mean over micro-steps
 *                 of per-micro-step token means — are computed too and must
 *                 be > 1e-3 away, so the check can tell them apart.
 *                 acx_accumulated_items = the global token total of the step.
 *   epoch         a loader epoch of 10 micro-batches per rank with k = 4:
 *                 boundaries exactly at micro-steps 4, 8 and 10 (the end of
 *                 data), acx_step = acx_optimizer_num_steps = 3, a LINEAR
 *                 schedule advanced 3 times, the last step normalized by the
 *                 tokens of micro-batches 9 and 10 only (acx_accumulated_items
 *                 and the parameters vs the reference). Also without
 *                 acx_accumulate_items: the last step is the mean of 2
 *                 micro-steps, not 4.
 *   communication the MPI profiling interface (MPI_* defined here, calling
 *                 PMPI_*) counts every collective acx issues. On a
 *                 non-boundary micro-step: no reduction at all (NO_SHARD: no
 *                 MPI collective of any kind; the sharded strategies only
 *                 all-gather parameters). Over the epoch the float
 *                 reductions (gradients; the item count is an int64) number
 *                 optimizer steps x reductions per boundary: 1 under
 *                 NO_SHARD (one bucket), one reduce-scatter per unit under
 *                 the sharded strategies (+ one all-reduce per unit across
 *                 hybrid_shard's node replicas), all on the 3 boundaries.
 */
#include <stdint.h>

#include "tests/acx_test_mpi.h"

#define DIN    4
#define DH     5
#define DOUT   3
#define NPAR   4
#define NP     (DH * DIN + DH + DOUT * DH + DOUT) /* 43 */
#define MAXS   3                                  /* samples per micro-batch and rank */
#define MAXTOK 5                                  /* tokens per sample */
#define STEPS  3
#define SEED   4321
#define LR     0.2
#define MOM    0.5
#define TOL    1e-5

static int rank, world;
static char dir[1024];

/* ---- PMPI counting ---- */

/* What acx issued while `counting` is set: reductions (all-reduce,
 * reduce-scatter, reduce; those of MPI_FLOAT are gradients: this test
 * reduces in float32) and every other collective. */
typedef struct counts {
    long red, red_float, other;
} counts_t;
static counts_t cnt;
static int counting;

static void count_red(MPI_Datatype t) {
    if (!counting) return;
    cnt.red++;
    if (t == MPI_FLOAT) cnt.red_float++;
}
static void count_other(void) {
    if (counting) cnt.other++;
}

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    count_red(t);
    return PMPI_Allreduce(s, r, n, t, op, c);
}
int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                   MPI_Request *q) {
    count_red(t);
    return PMPI_Iallreduce(s, r, n, t, op, c, q);
}
int MPI_Reduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    count_red(t);
    return PMPI_Reduce_scatter_block(s, r, n, t, op, c);
}
int MPI_Ireduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                              MPI_Request *q) {
    count_red(t);
    return PMPI_Ireduce_scatter_block(s, r, n, t, op, c, q);
}
int MPI_Reduce_scatter(const void *s, void *r, const int n[], MPI_Datatype t, MPI_Op op,
                       MPI_Comm c) {
    count_red(t);
    return PMPI_Reduce_scatter(s, r, n, t, op, c);
}
int MPI_Ireduce_scatter(const void *s, void *r, const int n[], MPI_Datatype t, MPI_Op op,
                        MPI_Comm c, MPI_Request *q) {
    count_red(t);
    return PMPI_Ireduce_scatter(s, r, n, t, op, c, q);
}
int MPI_Reduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c) {
    count_red(t);
    return PMPI_Reduce(s, r, n, t, op, root, c);
}
int MPI_Ireduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c,
                MPI_Request *q) {
    count_red(t);
    return PMPI_Ireduce(s, r, n, t, op, root, c, q);
}
int MPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                  MPI_Comm c) {
    count_other();
    return PMPI_Allgather(s, sn, st, r, rn, rt, c);
}
int MPI_Iallgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                   MPI_Comm c, MPI_Request *q) {
    count_other();
    return PMPI_Iallgather(s, sn, st, r, rn, rt, c, q);
}
int MPI_Allgatherv(const void *s, int sn, MPI_Datatype st, void *r, const int rn[], const int d[],
                   MPI_Datatype rt, MPI_Comm c) {
    count_other();
    return PMPI_Allgatherv(s, sn, st, r, rn, d, rt, c);
}
int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c) {
    count_other();
    return PMPI_Bcast(b, n, t, root, c);
}
int MPI_Ibcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c, MPI_Request *q) {
    count_other();
    return PMPI_Ibcast(b, n, t, root, c, q);
}
int MPI_Gather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root,
               MPI_Comm c) {
    count_other();
    return PMPI_Gather(s, sn, st, r, rn, rt, root, c);
}
int MPI_Igather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root,
                MPI_Comm c, MPI_Request *q) {
    count_other();
    return PMPI_Igather(s, sn, st, r, rn, rt, root, c, q);
}
int MPI_Barrier(MPI_Comm c) {
    count_other();
    return PMPI_Barrier(c);
}
int MPI_Ibarrier(MPI_Comm c, MPI_Request *q) {
    count_other();
    return PMPI_Ibarrier(c, q);
}
int MPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                 MPI_Comm c) {
    count_other();
    return PMPI_Alltoall(s, sn, st, r, rn, rt, c);
}

/* ---- data: tokens are fixed functions of (sample id, token) ---- */

static double tok_x(int64_t id, int t, int j) {
    return sin(0.37 * (double)id + 0.91 * t + 1.3 * j) + 0.1 * j;
}
static double tok_y(int64_t id, int t, int k) {
    return 0.5 * cos(0.21 * (double)id - 0.53 * t - 0.7 * k);
}

/* One rank's micro-batch. */
typedef struct mb {
    int n;            /* samples */
    int64_t id[MAXS]; /* sample ids */
    int ntok[MAXS];   /* tokens of each */
    int tokens;       /* sum of ntok */
} mb_t;

typedef enum { MODE_EQUAL_MEAN, MODE_EQUAL_ITEMS, MODE_UNEQUAL, NUM_MODES } accum_mode_t;
static const char *const mode_name[NUM_MODES] = {"equal/mean", "equal/items", "unequal/items"};

static uint32_t h4(int a, int b, int c, int d) {
    return acx_test_mix32(acx_test_hash3(a, (size_t)b * 131u + (size_t)c, d) ^ 0x9e3779b9u);
}

/* Micro-batch `micro` of step `step` on rank r (k micro-steps per step). */
static mb_t make_mb(accum_mode_t mode, int step, int micro, int r, int k) {
    mb_t b = {0};
    int64_t base = (((int64_t)step * k + micro) * world + r) * MAXS;
    if (mode == MODE_UNEQUAL) {
        b.n = (int)(h4(step, micro, r, k) % (MAXS + 1));
        if (r == 0 && micro == 0 && b.n == 0) b.n = 1; /* the step is never empty */
    } else {
        b.n = 2;
    }
    for (int j = 0; j < b.n; j++) {
        b.id[j] = base + j;
        b.ntok[j] = mode == MODE_UNEQUAL ? 1 + (int)(h4(step, micro, r, 100 + j) % MAXTOK) : 3;
        b.tokens += b.ntok[j];
    }
    return b;
}

/* ---- the model in float, as an FSDP program writes it against acx ---- */

typedef struct net {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *enc, *head;
    acx_param_t *p[NPAR]; /* enc.weight, enc.bias, head.weight, head.bias */
    acx_optimizer_t *opt;
    acx_scheduler_t *sched;
} net_t;

static const int par_off[NPAR + 1] = {0, DH *DIN, DH *DIN + DH, DH *DIN + DH + DOUT *DH, NP};

static acx_status_t missing(const char *what) {
    fprintf(stderr, "\n[r%d] %s returned NULL: %s\n", rank, what, acx_last_error());
    return ACX_ERR_INTERNAL;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        acx_status_t st_ = (call);                                                                 \
        if (st_ != ACX_OK) return st_;                                                             \
    } while (0)

/* Forward and backward over the tokens of b. Adds into the gradients the
 * gradient of the SUM of the per-token losses (sum != 0) or of their MEAN
 * over b's tokens. */
static acx_status_t micro_step(net_t *net, const mb_t *b, int sum) {
    float x[MAXS * MAXTOK][DIN], y[MAXS * MAXTOK][DOUT], h[MAXS * MAXTOK][DH];
    float dout[MAXS * MAXTOK][DOUT];
    int n = 0;
    for (int s = 0; s < b->n; s++)
        for (int t = 0; t < b->ntok[s]; t++, n++) {
            for (int j = 0; j < DIN; j++)
                x[n][j] = (float)tok_x(b->id[s], t, j);
            for (int k = 0; k < DOUT; k++)
                y[n][k] = (float)tok_y(b->id[s], t, k);
        }
    float w = sum || n == 0 ? 1.0f : 1.0f / (float)n;
    /* forward */
    TRY(acx_unit_acquire(net->enc));
    {
        const float *W1 = acx_param_data(net->p[0]), *B1 = acx_param_data(net->p[1]);
        if (W1 == NULL || B1 == NULL) return missing("acx_param_data(enc)");
        for (int s = 0; s < n; s++)
            for (int a = 0; a < DH; a++) {
                float z = B1[a];
                for (int j = 0; j < DIN; j++)
                    z += W1[a * DIN + j] * x[s][j];
                h[s][a] = tanhf(z);
            }
    }
    TRY(acx_unit_release(net->enc));
    TRY(acx_unit_acquire(net->head));
    {
        const float *W2 = acx_param_data(net->p[2]), *B2 = acx_param_data(net->p[3]);
        if (W2 == NULL || B2 == NULL) return missing("acx_param_data(head)");
        for (int s = 0; s < n; s++)
            for (int k = 0; k < DOUT; k++) {
                float o = B2[k];
                for (int a = 0; a < DH; a++)
                    o += W2[k * DH + a] * h[s][a];
                dout[s][k] = (o - y[s][k]) * w;
            }
    }
    TRY(acx_unit_release(net->head));
    /* backward: head, then enc */
    float dh[MAXS * MAXTOK][DH];
    TRY(acx_unit_acquire(net->head));
    {
        const float *W2 = acx_param_data(net->p[2]);
        float *gW2 = acx_param_grad(net->p[2]), *gB2 = acx_param_grad(net->p[3]);
        if (W2 == NULL || gW2 == NULL || gB2 == NULL) return missing("head data/grad");
        for (int s = 0; s < n; s++) {
            for (int k = 0; k < DOUT; k++) {
                gB2[k] += dout[s][k];
                for (int a = 0; a < DH; a++)
                    gW2[k * DH + a] += dout[s][k] * h[s][a];
            }
            for (int a = 0; a < DH; a++) {
                float d = 0;
                for (int k = 0; k < DOUT; k++)
                    d += dout[s][k] * W2[k * DH + a];
                dh[s][a] = d * (1.0f - h[s][a] * h[s][a]);
            }
        }
        TRY(acx_unit_grads_ready(net->head));
    }
    TRY(acx_unit_release(net->head));
    TRY(acx_unit_acquire(net->enc));
    {
        float *gW1 = acx_param_grad(net->p[0]), *gB1 = acx_param_grad(net->p[1]);
        if (gW1 == NULL || gB1 == NULL) return missing("acx_param_grad(enc)");
        for (int s = 0; s < n; s++)
            for (int a = 0; a < DH; a++) {
                gB1[a] += dh[s][a];
                for (int j = 0; j < DIN; j++)
                    gW1[a * DIN + j] += dh[s][a] * x[s][j];
            }
        TRY(acx_unit_grads_ready(net->enc));
    }
    return acx_unit_release(net->enc);
}

typedef struct strat {
    int strategy, rpn;
    const char *name;
} strat_t;

static acx_status_t net_open(net_t *net, const strat_t *s, int k, const char *data,
                             acx_dataloader_t **dl_p, int64_t batch) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = SEED;
    cfg.sharding_strategy = s->strategy;
    cfg.gradient_accumulation_steps = k;
    if (s->rpn > 0) cfg.ranks_per_node = s->rpn;
    memset(net, 0, sizeof *net);
    TRY(acx_init(NULL, NULL, &cfg, &net->acc));
    const acx_config_t *got = acx_get_config(net->acc);
    if (got->sharding_strategy != s->strategy || got->gradient_accumulation_steps != k) {
        fprintf(stderr, "\nacx resolved strategy %d / k %d, asked %d / %d\n",
                got->sharding_strategy, got->gradient_accumulation_steps, s->strategy, k);
        return ACX_ERR_INTERNAL;
    }
    TRY(acx_model_create(net->acc, &net->m));
    TRY(acx_model_add_unit(net->m, "enc", &net->enc));
    TRY(acx_unit_add_param(net->enc, "enc.weight", 2, (int64_t[]){DH, DIN},
                           ACX_INIT_SPEC_LINEAR_WEIGHT, &net->p[0]));
    TRY(acx_unit_add_param(net->enc, "enc.bias", 1, (int64_t[]){DH}, ACX_INIT_SPEC_LINEAR_BIAS(DIN),
                           &net->p[1]));
    TRY(acx_model_add_unit(net->m, "head", &net->head));
    TRY(acx_unit_add_param(net->head, "head.weight", 2, (int64_t[]){DOUT, DH},
                           ACX_INIT_SPEC_LINEAR_WEIGHT, &net->p[2]));
    TRY(acx_unit_add_param(net->head, "head.bias", 1, (int64_t[]){DOUT},
                           ACX_INIT_SPEC_LINEAR_BIAS(DH), &net->p[3]));
    acx_sgd_hparams_t hp = {.lr = LR, .momentum = MOM};
    TRY(acx_sgd_create(net->m, &hp, &net->opt));
    acx_dataloader_t *dl = NULL;
    if (data != NULL) {
        acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
        lo.batch_size = batch;
        lo.shuffle = 1;
        lo.prefetch = 1;
        TRY(acx_dataloader_open(net->acc, data, 1, (const char *const[]){"/id"}, &lo, &dl));
        /* transformers' linear schedule without warmup over 10 steps:
         * factor(s) = (10 - s) / 10 */
        TRY(acx_scheduler_create(net->opt, ACX_SCHED_LINEAR, 0, 10, 0.0, &net->sched));
    }
    TRY(acx_prepare(net->acc, net->m, net->opt, dl));
    if (dl_p) *dl_p = dl;
    return ACX_OK;
}

static acx_status_t net_gather(net_t *net, double *out) {
    float f[NP];
    for (int q = 0; q < NPAR; q++)
        TRY(acx_param_gather(net->p[q], f + par_off[q]));
    for (int e = 0; e < NP; e++)
        out[e] = f[e];
    return ACX_OK;
}

/* ---- the independent reference, in double ---- */

/* g += gradient of the sum over b's tokens of the per-token loss, x w. */
static void ref_add_grad(const double *p, const mb_t *b, double w, double *g) {
    const double *W1 = p, *B1 = p + par_off[1], *W2 = p + par_off[2], *B2 = p + par_off[3];
    for (int s = 0; s < b->n; s++)
        for (int t = 0; t < b->ntok[s]; t++) {
            double x[DIN], h[DH], d[DOUT];
            for (int j = 0; j < DIN; j++)
                x[j] = (float)tok_x(b->id[s], t, j);
            for (int a = 0; a < DH; a++) {
                double z = B1[a];
                for (int j = 0; j < DIN; j++)
                    z += W1[a * DIN + j] * x[j];
                h[a] = tanh(z);
            }
            for (int k = 0; k < DOUT; k++) {
                double o = B2[k];
                for (int a = 0; a < DH; a++)
                    o += W2[k * DH + a] * h[a];
                d[k] = (o - (float)tok_y(b->id[s], t, k)) * w;
            }
            for (int k = 0; k < DOUT; k++) {
                g[par_off[3] + k] += d[k];
                for (int a = 0; a < DH; a++)
                    g[par_off[2] + k * DH + a] += d[k] * h[a];
            }
            for (int a = 0; a < DH; a++) {
                double da = 0;
                for (int k = 0; k < DOUT; k++)
                    da += d[k] * W2[k * DH + a];
                da *= 1 - h[a] * h[a];
                g[par_off[1] + a] += da;
                for (int j = 0; j < DIN; j++)
                    g[a * DIN + j] += da * x[j];
            }
        }
}

/* torch.optim.SGD(lr, momentum=MOM): buf = g (first step) else MOM*buf + g; p -= lr*buf. */
static void ref_sgd(double *p, double *buf, const double *g, double lr, int first) {
    for (int e = 0; e < NP; e++) {
        buf[e] = first ? g[e] : MOM * buf[e] + g[e];
        p[e] -= lr * buf[e];
    }
}

typedef enum { NORM_TOKEN_MEAN, NORM_MEAN_OF_MEANS, NORM_PER_MICRO } norm_t;

/* One reference step over mbs[micro][rank] (nm micro-steps), normalized by
 * `norm`; returns the token total. */
static int ref_step(double *p, double *buf, mb_t mbs[][4], int nm, norm_t norm, double lr,
                    int first) {
    double g[NP] = {0};
    int total = 0;
    for (int mi = 0; mi < nm; mi++)
        for (int r = 0; r < world; r++)
            total += mbs[mi][r].tokens;
    for (int mi = 0; mi < nm; mi++) {
        int tm = 0;
        for (int r = 0; r < world; r++)
            tm += mbs[mi][r].tokens;
        for (int r = 0; r < world; r++) {
            const mb_t *b = &mbs[mi][r];
            double w = norm == NORM_TOKEN_MEAN  ? 1.0 / total
                       : norm == NORM_PER_MICRO ? 1.0 / ((double)tm * nm)
                       : b->tokens > 0          ? 1.0 / ((double)b->tokens * world * nm)
                                                : 0.0;
            ref_add_grad(p, b, w, g);
        }
    }
    ref_sgd(p, buf, g, lr, first);
    return total;
}

/* max over parameters of ||a - b|| / ||b|| */
static double rel_diff(const double *a, const double *b) {
    double worst = 0;
    for (int q = 0; q < NPAR; q++) {
        double num = 0, den = 0;
        for (int e = par_off[q]; e < par_off[q + 1]; e++) {
            num += (a[e] - b[e]) * (a[e] - b[e]);
            den += b[e] * b[e];
        }
        double r = sqrt(num / den);
        if (!(r <= worst)) worst = r;
    }
    return worst;
}

/* ---- accumulation vs one step on the concatenation ---- */

static int accum_case(const strat_t *s, int k, accum_mode_t mode) {
    net_t net;
    double p[NP], buf[NP] = {0}, alt_mm[NP], buf_mm[NP] = {0}, alt_pm[NP], buf_pm[NP] = {0};
    double got[NP];
    int use_items = mode != MODE_EQUAL_MEAN;
    CHECK_OK(net_open(&net, s, k, NULL, NULL, 0));
    CHECK_OK(net_gather(&net, p));
    memcpy(alt_mm, p, sizeof p);
    memcpy(alt_pm, p, sizeof p);
    for (int step = 0; step < STEPS; step++) {
        mb_t mbs[4][4];
        for (int mi = 0; mi < k; mi++)
            for (int r = 0; r < world; r++)
                mbs[mi][r] = make_mb(mode, step, mi, r, k);
        for (int mi = 0; mi < k; mi++) {
            const mb_t *b = &mbs[mi][rank];
            CHECK_OK(acx_accumulate_begin(net.acc));
            int boundary = mi == k - 1;
            CHECK(acx_sync_gradients(net.acc) == boundary);
            cnt = (counts_t){0};
            counting = 1;
            if (use_items) CHECK_OK(acx_accumulate_items(net.acc, b->tokens));
            CHECK_OK(micro_step(&net, b, use_items));
            CHECK_OK(acx_backward_end(net.acc));
            counting = 0;
            if (!boundary) {
                /* nothing reduced between boundaries; NO_SHARD: nothing at all */
                if (cnt.red != 0 || (s->strategy == ACX_NO_SHARD && cnt.other != 0)) {
                    fprintf(stderr,
                            "\n[r%d] %s k=%d micro-step %d (not a boundary): %ld reductions, "
                            "%ld other collectives; expected none\n",
                            rank, s->name, k, mi, cnt.red, cnt.other);
                    TEST_ERROR;
                }
            } else {
                if (cnt.red_float == 0) {
                    fprintf(stderr, "\n[r%d] %s: no gradient reduction on a boundary\n", rank,
                            s->name);
                    TEST_ERROR;
                }
                if (use_items) {
                    int total = 0;
                    for (int m2 = 0; m2 < k; m2++)
                        for (int r = 0; r < world; r++)
                            total += mbs[m2][r].tokens;
                    CHECK(acx_accumulated_items(net.acc) == total);
                }
                CHECK_OK(acx_optimizer_step(net.opt));
                CHECK_OK(acx_optimizer_zero_grad(net.opt));
            }
            CHECK_OK(acx_accumulate_end(net.acc));
        }
        ref_step(p, buf, mbs, k, NORM_TOKEN_MEAN, LR, step == 0);
        ref_step(alt_mm, buf_mm, mbs, k, NORM_MEAN_OF_MEANS, LR, step == 0);
        ref_step(alt_pm, buf_pm, mbs, k, NORM_PER_MICRO, LR, step == 0);
    }
    CHECK(acx_step(net.acc) == STEPS && acx_optimizer_num_steps(net.opt) == STEPS);
    CHECK(acx_micro_step(net.acc) == (int64_t)STEPS * k);
    CHECK_OK(net_gather(&net, got));
    double rel = rel_diff(got, p);
    if (!(rel <= TOL)) {
        fprintf(stderr,
                "\n[r%d] %s k=%d %s np=%d: relative difference to the token-mean "
                "reference %.3g > %g (vs mean of means %.3g, vs per-micro-step means %.3g)\n",
                rank, s->name, k, mode_name[mode], world, rel, TOL, rel_diff(got, alt_mm),
                rel_diff(got, alt_pm));
        TEST_ERROR;
    }
    if (mode == MODE_UNEQUAL) {
        /* the data really tell the normalizations apart */
        CHECK(rel_diff(alt_mm, p) > 1e-3);
        CHECK(rel_diff(alt_pm, p) > 1e-3);
    }
    acx_finalize(net.acc);
    return 0;
error:
    if (net.acc) acx_finalize(net.acc);
    return 1;
}

/* ---- a 10-micro-batch epoch with k = 4 ---- */

#define EPOCH_MB 10
#define EPOCH_B  2 /* samples per rank per micro-batch */

static int ntok_of(int64_t id) { return 1 + (int)((id * 5 + 3) % 4); }

static int epoch_case(const strat_t *s, int use_items, const char *data) {
    net_t net;
    acx_dataloader_t *dl = NULL;
    double p[NP], buf[NP] = {0}, got[NP];
    int k = 4;
    /* reductions of float data per boundary: the gradients */
    int rs_replicas = s->strategy == ACX_HYBRID_SHARD && world / s->rpn > 1;
    long per_boundary = s->strategy == ACX_NO_SHARD ? 1 : 2 * (1 + rs_replicas);
    long grad_calls = 0, micro_with_grads = 0;
    CHECK_OK(net_open(&net, s, k, data, &dl, EPOCH_B));
    CHECK(acx_dataloader_num_batches(dl) == EPOCH_MB);
    CHECK_OK(net_gather(&net, p));
    mb_t group[4][4];
    int in_group = 0, steps_ref = 0;
    const acx_batch_t *bt;
    for (int mi = 0; mi < EPOCH_MB; mi++) {
        CHECK_OK(acx_dataloader_next(dl, &bt));
        CHECK(bt->size == EPOCH_B && bt->num_padding == 0);
        int64_t all[4 * EPOCH_B];
        CHECK_OK(acx_all_gather(net.acc, bt->indices, all, EPOCH_B, ACX_DTYPE_INT64));
        for (int r = 0; r < world; r++) {
            mb_t *b = &group[in_group][r];
            *b = (mb_t){.n = EPOCH_B};
            for (int j = 0; j < EPOCH_B; j++) {
                b->id[j] = all[r * EPOCH_B + j];
                b->ntok[j] = use_items ? ntok_of(b->id[j]) : 3;
                b->tokens += b->ntok[j];
            }
        }
        in_group++;
        const mb_t *mine = &group[in_group - 1][rank];
        int boundary = (mi + 1) % k == 0 || mi == EPOCH_MB - 1;
        cnt = (counts_t){0};
        counting = 1;
        CHECK_OK(acx_accumulate_begin(net.acc));
        CHECK(acx_sync_gradients(net.acc) == boundary);
        if (use_items) CHECK_OK(acx_accumulate_items(net.acc, mine->tokens));
        CHECK_OK(micro_step(&net, mine, use_items));
        CHECK_OK(acx_backward_end(net.acc));
        if (boundary) {
            CHECK_OK(acx_optimizer_step(net.opt));
            CHECK_OK(acx_scheduler_step(net.sched));
            CHECK_OK(acx_optimizer_zero_grad(net.opt));
        }
        CHECK_OK(acx_accumulate_end(net.acc));
        counting = 0;
        grad_calls += cnt.red_float;
        if (cnt.red_float > 0) micro_with_grads++;
        if (!boundary && (cnt.red != 0 || (s->strategy == ACX_NO_SHARD && cnt.other != 0))) {
            fprintf(stderr,
                    "\n[r%d] %s epoch micro-step %d (not a boundary): %ld reductions, %ld "
                    "other collectives; expected none\n",
                    rank, s->name, mi + 1, cnt.red, cnt.other);
            TEST_ERROR;
        }
        if (boundary) {
            /* reference: one step on the group, at the schedule's lr(s) = LR (10 - s) / 10 */
            double lr = LR * (10 - steps_ref) / 10.0;
            int total = ref_step(p, buf, group, in_group, NORM_TOKEN_MEAN, lr, steps_ref == 0);
            if (use_items && acx_accumulated_items(net.acc) != total) {
                fprintf(stderr,
                        "\n[r%d] %s step %d normalized by %lld items; the %d micro-batches "
                        "of the group hold %d\n",
                        rank, s->name, steps_ref + 1, (long long)acx_accumulated_items(net.acc),
                        in_group, total);
                TEST_ERROR;
            }
            steps_ref++;
            in_group = 0;
        }
    }
    CHECK(in_group == 0 && steps_ref == 3);
    CHECK(acx_step(net.acc) == 3);
    CHECK(acx_optimizer_num_steps(net.opt) == 3);
    CHECK_CLOSE(acx_optimizer_lr(net.opt), LR * 0.7, 1e-12, 0);
    if (grad_calls != 3 * per_boundary || micro_with_grads != 3) {
        fprintf(stderr,
                "\n[r%d] %s epoch: %ld gradient reductions on %ld micro-steps; expected "
                "%ld on 3 (3 optimizer steps x %ld per boundary)\n",
                rank, s->name, grad_calls, micro_with_grads, 3 * per_boundary, per_boundary);
        TEST_ERROR;
    }
    CHECK_OK(net_gather(&net, got));
    double rel = rel_diff(got, p);
    if (!(rel <= TOL)) {
        fprintf(stderr,
                "\n[r%d] %s epoch (%s) np=%d: relative difference to the reference %.3g > %g\n",
                rank, s->name, use_items ? "items" : "mean", world, rel, TOL);
        TEST_ERROR;
    }
    acx_finalize(net.acc);
    return 0;
error:
    counting = 0;
    if (net.acc) acx_finalize(net.acc);
    return 1;
}

int main(int argc, char **argv) {
    /* Communication is counted in MPI calls; the shared-memory all-reduce of
     * one node makes none (tests/mpi/test_coll_shm.c tests it). When to
     * reduce is the bucket layer's decision, the same over either path. */
    setenv("ACX_SHM_DISABLE", "1", 1);
    acx_test_mpi_begin(&argc, &argv, 280, &rank, &world);
    if (world > 4) {
        if (rank == 0) printf("test_accumulate: written for 1..4 ranks\n");
        MPI_Finalize();
        return 77;
    }
    acx_test_tmp_path(dir, sizeof dir, "");
    char data[1100];
    snprintf(data, sizeof data, "%s/accumulate_np%d.h5", dir, world);
    int n = EPOCH_MB * EPOCH_B * world;
    int32_t ids[EPOCH_MB * EPOCH_B * 4];
    for (int i = 0; i < n; i++)
        ids[i] = i;
    if (acx_test_write_i32(rank, data, "id", ids, (hsize_t)n) != 0) {
        MPI_Finalize();
        return 99;
    }
    const strat_t strats[4] = {
        {ACX_NO_SHARD, 0, "no_shard"},
        {ACX_SHARD_GRAD_OP, 0, "shard_grad_op"},
        {ACX_FULL_SHARD, 0, "full_shard"},
        {ACX_HYBRID_SHARD, world % 2 == 0 ? 2 : 1,
         world % 2 == 0 ? "hybrid_shard(2/node)" : "hybrid_shard(1/node)"},
    };
    int failed = 0;
    for (int si = 0; si < 4; si++)
        for (int k = 2; k <= 4; k += 2)
            for (int mode = 0; mode < NUM_MODES; mode++) {
                char what[128];
                snprintf(what, sizeof what, "%s k=%d %s np=%d == one step", strats[si].name, k,
                         mode_name[mode], world);
                TESTING(what);
                failed |= acx_test_report(accum_case(&strats[si], k, (accum_mode_t)mode));
            }
    for (int si = 0; si < 4; si++)
        for (int items = 0; items <= 1; items++) {
            char what[128];
            snprintf(what, sizeof what, "%s 10-batch epoch k=4 (%s) np=%d", strats[si].name,
                     items ? "items" : "mean", world);
            TESTING(what);
            failed |= acx_test_report(epoch_case(&strats[si], items, data));
        }
    MPI_Finalize();
    return failed ? 1 : 0;
}

/*
 * benchmarks/fmnist_ddp.c — acx-bench-fmnist-ddp: the acx-fmnist training
 * step through acx against the same model written as a hand-rolled MPI
 * data-parallel loop, in one MPI job, alternating, so both see the same
 * machine state. Reports the throughput ratio acx/raw (target >= 0.98).
 *
 *   acx side   exactly fmnist.c's step: units fc1..fc3 registered with acx,
 *              acquire, forward, backward layer by layer with
 *              acx_unit_grads_ready after each, acx_backward_end, AdamW
 *              through acx_optimizer_step, acx_optimizer_zero_grad.
 *   raw side   the same mlp.c arithmetic on the benchmark's own contiguous
 *              buffers: ONE MPI_Allreduce(SUM) of all gradients per step,
 *              a scale by 1/world, and a plain AdamW loop (torch formulas)
 *              under FTZ/DAZ, as acx's optimizer kernel runs.
 *
 * Both sides start from the same parameters (the raw side copies acx's
 * initial values) and consume the same in-memory batches, so a cross-check
 * first compares their parameters after S steps (default 20). The two differ
 * by rounding only (acx scales each bucket by 1/world before summing and
 * uses torch's lerp for the first moment): ~1e-7 relative, measured flat up
 * to ~500 steps on Fashion-MNIST. Far beyond that, some sample's ReLU input
 * crosses zero on one side only and the trajectories drift apart, as any two
 * float implementations do; so the check is short and on fresh state.
 *
 * Then R rounds time K steps of each side, alternating which goes first (a
 * barrier before each block, the slowest rank's time). The timed region is
 * the training step only: batches are loaded (or synthesized) up front.
 *
 * What this file leaves to others: the model arithmetic (examples/
 * fashion_mnist/mlp.c, shared with acx-fmnist) and everything distributed on
 * the acx side (libacx, public API only). Launch with mpirun; see
 * benchmarks/run-fmnist-ddp.sh.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include <acx/acx.h>

#include "mlp.h"

#define PROG "acx-bench-fmnist-ddp"
#define CHECK_LIMIT 1e-5 /* max ||a-b||/||b|| per tensor after the cross-check */

typedef struct options {
    const char *data, *json;
    int64_t batch_size;
    int batches, rounds, steps, warmup, check_steps, check_only;
} options_t;

/* ---- options ---- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpirun -np N " PROG " [options]\n"
            "Time the Fashion-MNIST MLP training step through acx against a hand-rolled\n"
            "MPI data-parallel loop (one MPI_Allreduce per step), alternating in one run.\n\n"
            "  --data FILE.h5      batches from /train/images, /train/labels (`acx data import-idx`);\n"
            "                      default: deterministic synthetic pixels and labels\n"
            "  --batch-size N      samples per rank per step (default 64)\n"
            "  --batches N         distinct batches kept in memory per rank (default 200)\n"
            "  --rounds R          timed rounds (default 20)\n"
            "  --steps K           steps per side per round (default 50)\n"
            "  --warmup W          untimed steps per side before the rounds (default 10)\n"
            "  --check-steps S     steps of the correctness cross-check (default 20)\n"
            "  --check             run only the cross-check (no timing)\n"
            "  --json FILE         write the numbers as JSON (rank 0)\n"
            "  --config FILE, --acx-KEY=VALUE   acx configuration (see docs/config.md)\n");
}

static int parse_int(const char *s, long lo, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > 1000000000L) return -1;
    *out = v;
    return 0;
}

/* Returns 0 to run, 1 after --help, -1 on a bad argument. */
static int parse_options(int argc, char **argv, options_t *o) {
    *o = (options_t){.batch_size = 64, .batches = 200, .rounds = 20, .steps = 50, .warmup = 10,
                     .check_steps = 20};
    static const struct option longopts[] = {
        {"data", required_argument, 0, 'd'},   {"batch-size", required_argument, 0, 'b'},
        {"batches", required_argument, 0, 'n'}, {"rounds", required_argument, 0, 'r'},
        {"steps", required_argument, 0, 'k'},  {"warmup", required_argument, 0, 'w'},
        {"check-steps", required_argument, 0, 's'}, {"check", no_argument, 0, 'c'},
        {"json", required_argument, 0, 'j'},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c, idx = 0;
    long v;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        switch (c) {
        case 'd': o->data = optarg; break;
        case 'j': o->json = optarg; break;
        case 'c': o->check_only = 1; break;
        case 'b': if (parse_int(optarg, 1, &v)) goto bad; o->batch_size = v; break;
        case 'n': if (parse_int(optarg, 1, &v)) goto bad; o->batches = (int)v; break;
        case 'r': if (parse_int(optarg, 1, &v)) goto bad; o->rounds = (int)v; break;
        case 'k': if (parse_int(optarg, 1, &v)) goto bad; o->steps = (int)v; break;
        case 'w': if (parse_int(optarg, 0, &v)) goto bad; o->warmup = (int)v; break;
        case 's': if (parse_int(optarg, 1, &v)) goto bad; o->check_steps = (int)v; break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
        continue;
    bad:
        fprintf(stderr, PROG ": invalid value '%s' for --%s\n", optarg, longopts[idx].name);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* ---- input batches (in memory, identical for both sides) ---- */

/* nb batches of B samples on this rank: pixels [nb x B x 784] uint8,
 * labels [nb x B] uint8. */
typedef struct batches {
    int nb, B;
    uint8_t *pixels, *labels;
} batches_t;

static int batches_alloc(batches_t *bs, int nb, int B, int in) {
    bs->nb = nb;
    bs->B = B;
    bs->pixels = malloc((size_t)nb * (size_t)B * (size_t)in);
    bs->labels = malloc((size_t)nb * (size_t)B);
    return bs->pixels && bs->labels ? 0 : -1;
}

static void batches_free(batches_t *bs) {
    free(bs->pixels);
    free(bs->labels);
    memset(bs, 0, sizeof *bs);
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Synthetic data, different on every rank like a real shard: about half the
 * pixels black (as in Fashion-MNIST, so dead inputs exist), the rest random. */
static void batches_synthesize(batches_t *bs, int in, int classes, int rank) {
    uint64_t s = 0x5eed0000ull + (uint64_t)rank;
    size_t npix = (size_t)bs->nb * (size_t)bs->B * (size_t)in;
    for (size_t i = 0; i < npix; i++) {
        uint64_t r = splitmix64(&s);
        bs->pixels[i] = (r >> 63) ? (uint8_t)(r & 0xff) : 0;
    }
    for (size_t i = 0; i < (size_t)bs->nb * (size_t)bs->B; i++)
        bs->labels[i] = (uint8_t)(splitmix64(&s) % (uint64_t)classes);
}

/* Read up to nb full batches of this rank's shard through an acx loader and
 * copy them out; *loaded_p = batches read (fewer if the epoch is shorter).
 * Prints what went wrong. Collective (the loader's open is). */
static acx_status_t batches_load(acx_accelerator_t *acc, const char *path, batches_t *bs, int in,
                                 int *loaded_p) {
    static const char *const sets[] = {"/train/images", "/train/labels"};
    acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
    acx_dataloader_t *dl = NULL;
    const acx_batch_t *b;
    acx_status_t st = ACX_OK;
    int got = 0;
    lo.batch_size = bs->B;
    lo.drop_last = 1; /* full batches only: every step has B samples */
    lo.prefetch = 0;  /* no reader thread left running during the timing */
    if ((st = acx_dataloader_open(acc, path, 2, sets, &lo, &dl)) != ACX_OK) goto err_acx;
    while (got < bs->nb && (st = acx_dataloader_next(dl, &b)) == ACX_OK) {
        if (b->dtypes[0] != ACX_DTYPE_UINT8 || b->dtypes[1] != ACX_DTYPE_UINT8 ||
            b->sample_numel[0] != in || b->sample_numel[1] != 1 || b->size != bs->B) {
            fprintf(stderr,
                    PROG ": %s: expected uint8 images of %d pixels and uint8 labels in full batches "
                         "of %d, got %s[%lld] and %s[%lld], batch of %lld\n",
                    path, in, bs->B, acx_dtype_name(b->dtypes[0]), (long long)b->sample_numel[0],
                    acx_dtype_name(b->dtypes[1]), (long long)b->sample_numel[1], (long long)b->size);
            acx_dataloader_close(dl);
            return ACX_ERR_FORMAT;
        }
        memcpy(bs->pixels + (size_t)got * (size_t)bs->B * (size_t)in, b->tensors[0],
               (size_t)bs->B * (size_t)in);
        memcpy(bs->labels + (size_t)got * (size_t)bs->B, b->tensors[1], (size_t)bs->B);
        got++;
    }
    if (got < bs->nb && st != ACX_END_OF_DATA) { /* a read error */
        acx_dataloader_close(dl);
        goto err_acx;
    }
    if ((st = acx_dataloader_close(dl)) != ACX_OK) goto err_acx;
    *loaded_p = got;
    return ACX_OK;

err_acx:
    fprintf(stderr, PROG ": %s\n", acx_last_error());
    return st;
}

static const uint8_t *batch_pixels(const batches_t *bs, int64_t step, int in) {
    return bs->pixels + (size_t)(step % bs->nb) * (size_t)bs->B * (size_t)in;
}

static const uint8_t *batch_labels(const batches_t *bs, int64_t step) {
    return bs->labels + (size_t)(step % bs->nb) * (size_t)bs->B;
}

/* ---- the acx side (as examples/fashion_mnist/fmnist.c) ---- */

typedef struct acx_side {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_optimizer_t *opt;
    acx_unit_t *unit[MLP_LAYERS];
    acx_param_t *w[MLP_LAYERS], *b[MLP_LAYERS];
    mlp_workspace_t ws;
    int64_t steps; /* steps taken: selects the next batch */
    double loss;   /* of the last step */
} acx_side_t;

static acx_status_t acx_side_register(acx_side_t *s, const mlp_dims_t *d) {
    static const char *const names[MLP_LAYERS] = {"fc1", "fc2", "fc3"};
    ACX_TRY(acx_model_create(s->acc, &s->m));
    for (int l = 0; l < MLP_LAYERS; l++) {
        int64_t fi = mlp_fan_in(d, l), fo = mlp_fan_out(d, l);
        char wname[32], bname[32];
        snprintf(wname, sizeof wname, "%s.weight", names[l]);
        snprintf(bname, sizeof bname, "%s.bias", names[l]);
        ACX_TRY(acx_model_add_unit(s->m, names[l], &s->unit[l]));
        ACX_TRY(acx_unit_add_param(s->unit[l], wname, 2, (int64_t[]){fo, fi},
                                   ACX_INIT_SPEC_LINEAR_WEIGHT, &s->w[l]));
        ACX_TRY(acx_unit_add_param(s->unit[l], bname, 1, (int64_t[]){fo},
                                   ACX_INIT_SPEC_LINEAR_BIAS(fi), &s->b[l]));
    }
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT; /* lr 1e-3, weight decay 0.01 */
    ACX_TRY(acx_adamw_create(s->m, &hp, &s->opt));
    return ACX_OK;
}

/* One training step: one micro-step that is always a boundary (the
 * benchmark sets gradient_accumulation_steps = 1 and prepares no loader). */
static acx_status_t acx_side_step(acx_side_t *s, const mlp_dims_t *d, const batches_t *bs) {
    int n = bs->B;
    mlp_tensors_t p, g;
    ACX_TRY(acx_accumulate_begin(s->acc));
    for (int l = 0; l < MLP_LAYERS; l++) ACX_TRY(acx_unit_acquire(s->unit[l]));
    for (int l = 0; l < MLP_LAYERS; l++) {
        p.w[l] = acx_param_data(s->w[l]);
        p.b[l] = acx_param_data(s->b[l]);
        g.w[l] = acx_param_grad(s->w[l]);
        g.b[l] = acx_param_grad(s->b[l]);
    }
    mlp_load_input(&s->ws, d, batch_pixels(bs, s->steps, d->in), n);
    mlp_forward(d, &p, &s->ws, n);
    s->loss = mlp_loss(d, &s->ws, batch_labels(bs, s->steps), n);
    for (int l = MLP_LAYERS - 1; l >= 0; l--) {
        mlp_backward_layer(d, &p, &g, &s->ws, l, n);
        ACX_TRY(acx_unit_grads_ready(s->unit[l]));
        ACX_TRY(acx_unit_release(s->unit[l]));
    }
    ACX_TRY(acx_backward_end(s->acc));
    if (acx_sync_gradients(s->acc)) {
        ACX_TRY(acx_optimizer_step(s->opt));
        ACX_TRY(acx_optimizer_zero_grad(s->opt));
    }
    ACX_TRY(acx_accumulate_end(s->acc));
    s->steps++;
    return ACX_OK;
}

/* ---- the hand-rolled side: plain MPI, one all-reduce per step ---- */

/* All 6 tensors in one contiguous buffer each for parameters, gradients and
 * the two AdamW moments, in registration order fc1.weight [256 x 784],
 * fc1.bias [256], fc2.weight [128 x 256], fc2.bias [128], fc3.weight
 * [10 x 128], fc3.bias [10]: [numel] floats each. */
typedef struct raw_side {
    MPI_Comm comm; /* our own duplicate of MPI_COMM_WORLD */
    int world;
    size_t numel;
    float *param, *grad, *m, *v;
    mlp_tensors_t p, g; /* views into param and grad */
    size_t off[2 * MLP_LAYERS], len[2 * MLP_LAYERS]; /* w0, b0, w1, b1, w2, b2 */
    double lr, beta1, beta2, eps, wd;
    mlp_workspace_t ws;
    int64_t steps;
    double loss;
} raw_side_t;

static int raw_side_init(raw_side_t *r, const mlp_dims_t *d, MPI_Comm comm) {
    r->comm = comm;
    MPI_Comm_size(comm, &r->world);
    r->numel = 0;
    for (int l = 0; l < MLP_LAYERS; l++) {
        size_t fi = (size_t)mlp_fan_in(d, l), fo = (size_t)mlp_fan_out(d, l);
        r->off[2 * l] = r->numel;
        r->len[2 * l] = fo * fi;
        r->numel += fo * fi;
        r->off[2 * l + 1] = r->numel;
        r->len[2 * l + 1] = fo;
        r->numel += fo;
    }
    r->param = calloc(r->numel, sizeof(float));
    r->grad = calloc(r->numel, sizeof(float));
    r->m = calloc(r->numel, sizeof(float));
    r->v = calloc(r->numel, sizeof(float));
    if (!r->param || !r->grad || !r->m || !r->v) return -1;
    for (int l = 0; l < MLP_LAYERS; l++) {
        r->p.w[l] = r->param + r->off[2 * l];
        r->p.b[l] = r->param + r->off[2 * l + 1];
        r->g.w[l] = r->grad + r->off[2 * l];
        r->g.b[l] = r->grad + r->off[2 * l + 1];
    }
    r->lr = 1e-3;
    r->beta1 = 0.9;
    r->beta2 = 0.999;
    r->eps = 1e-8;
    r->wd = 0.01;
    return 0;
}

static void raw_side_free(raw_side_t *r) {
    free(r->param);
    free(r->grad);
    free(r->m);
    free(r->v);
}

/* torch.optim.AdamW on element i at step t (scalars already rounded to float):
 *   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps) */
typedef struct adamw_coef {
    float decay, b1, one_b1, b2, one_b2, step_size, bc2_sqrt, eps;
} adamw_coef_t;

static inline __attribute__((always_inline)) void adamw_elem(float *restrict p, const float *restrict g,
                                                             float *restrict m, float *restrict v,
                                                             size_t i, adamw_coef_t c) {
    float gi = g[i];
    float pi = p[i] * c.decay;
    float mi = c.b1 * m[i] + c.one_b1 * gi;
    float vi = c.b2 * v[i] + c.one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - c.step_size * mi / (sqrtf(vi) / c.bc2_sqrt + c.eps);
}

/* The loop is written to be vectorized by the same -O2 build as libacx's
 * optimizer, so the comparison measures the runtime, not a slower baseline
 * (a plain scalar loop measured ~4x slower here: ~0.75 ms more per step):
 * - GCC's -O2 ("very cheap") vectorizer needs a trip count that is a known
 *   multiple of the vector width: blocks of RAW_BLOCK plus a scalar tail;
 * - under the default -fmath-errno, sqrtf stays a libm call (errno on a
 *   negative input) and blocks vectorization; v is never negative, so
 *   declare sqrtf const, and GCC emits sqrtps (correctly rounded, like the
 *   libm call). */
#define RAW_BLOCK 16
#if defined(__GNUC__) && !defined(__NO_MATH_ERRNO__)
float sqrtf(float x) __attribute__((const, nothrow));
#endif

/* Noinline: MXCSR is switched around the call, so no float arithmetic may
 * move across the switch. */
static __attribute__((noinline)) void adamw_loop(float *restrict p, const float *restrict g,
                                                 float *restrict m, float *restrict v, size_t n,
                                                 adamw_coef_t c) {
    size_t nb = n - n % RAW_BLOCK;
    for (size_t b = 0; b < nb; b += RAW_BLOCK)
        for (size_t j = 0; j < RAW_BLOCK; j++) adamw_elem(p, g, m, v, b + j, c);
    for (size_t i = nb; i < n; i++) adamw_elem(p, g, m, v, i, c);
}

/* One AdamW step over all numel elements at step t (from 1). Scalars in
 * double, rounded to float once; the loop runs with FTZ/DAZ set (and the
 * caller's MXCSR restored after), as acx's optimizer does, so a first moment
 * decaying into the subnormal range does not slow one side only. */
static void raw_adamw(raw_side_t *r, int64_t t) {
    adamw_coef_t c = {
        .decay = (float)(1.0 - r->lr * r->wd),
        .b1 = (float)r->beta1,
        .one_b1 = (float)(1.0 - r->beta1),
        .b2 = (float)r->beta2,
        .one_b2 = (float)(1.0 - r->beta2),
        .step_size = (float)(r->lr / (1.0 - pow(r->beta1, (double)t))),
        .bc2_sqrt = (float)sqrt(1.0 - pow(r->beta2, (double)t)),
        .eps = (float)r->eps,
    };
#if defined(__SSE2__)
    unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
#endif
    adamw_loop(r->param, r->grad, r->m, r->v, r->numel, c);
#if defined(__SSE2__)
    _mm_setcsr(saved);
#endif
}

static void raw_side_step(raw_side_t *r, const mlp_dims_t *d, const batches_t *bs) {
    int n = bs->B;
    memset(r->grad, 0, r->numel * sizeof(float)); /* mlp_backward_layer adds into g */
    mlp_load_input(&r->ws, d, batch_pixels(bs, r->steps, d->in), n);
    mlp_forward(d, &r->p, &r->ws, n);
    r->loss = mlp_loss(d, &r->ws, batch_labels(bs, r->steps), n);
    for (int l = MLP_LAYERS - 1; l >= 0; l--) mlp_backward_layer(d, &r->p, &r->g, &r->ws, l, n);
    /* The whole model's gradients in one all-reduce, then the mean. The
     * communicator's error handler is MPI's default (errors are fatal). */
    MPI_Allreduce(MPI_IN_PLACE, r->grad, (int)r->numel, MPI_FLOAT, MPI_SUM, r->comm);
    float inv = 1.0f / (float)r->world;
    for (size_t i = 0; i < r->numel; i++) r->grad[i] *= inv;
    r->steps++;
    raw_adamw(r, r->steps);
}

/* ---- cross-check ---- */

/* The raw side's parameters := the acx side's (valid under NO_SHARD after
 * prepare). */
static void raw_copy_params(raw_side_t *r, acx_side_t *s) {
    for (int l = 0; l < MLP_LAYERS; l++) {
        memcpy(r->p.w[l], acx_param_data(s->w[l]), r->len[2 * l] * sizeof(float));
        memcpy(r->p.b[l], acx_param_data(s->b[l]), r->len[2 * l + 1] * sizeof(float));
    }
}

/* max over tensors (and ranks) of ||acx - raw|| / ||raw||; *worst_p = the
 * index (w0, b0, w1, ...) of the tensor where it is largest. Collective. */
static double params_max_rel_diff(acx_side_t *s, raw_side_t *r, int *worst_p) {
    double worst = 0.0;
    *worst_p = 0;
    for (int k = 0; k < 2 * MLP_LAYERS; k++) {
        acx_param_t *ap = k % 2 == 0 ? s->w[k / 2] : s->b[k / 2];
        const float *a = acx_param_data(ap), *b = r->param + r->off[k];
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < r->len[k]; i++) {
            double e = (double)a[i] - (double)b[i];
            num += e * e;
            den += (double)b[i] * (double)b[i];
        }
        double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
        if (!(rel <= worst)) { /* NaN counts as worst */
            worst = rel;
            *worst_p = k;
        }
    }
    double all;
    MPI_Allreduce(&worst, &all, 1, MPI_DOUBLE, MPI_MAX, r->comm);
    return all;
}

static const char *tensor_name(int k) {
    static const char *const names[2 * MLP_LAYERS] = {"fc1.weight", "fc1.bias", "fc2.weight",
                                                      "fc2.bias",   "fc3.weight", "fc3.bias"};
    return names[k];
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *x, int n) {
    double *t = malloc((size_t)n * sizeof *t);
    if (t == NULL) return NAN;
    memcpy(t, x, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return med;
}

static double min_of(const double *x, int n) {
    double v = x[0];
    for (int i = 1; i < n; i++) v = x[i] < v ? x[i] : v;
    return v;
}

static double max_of(const double *x, int n) {
    double v = x[0];
    for (int i = 1; i < n; i++) v = x[i] > v ? x[i] : v;
    return v;
}

static void json_array(FILE *f, const double *x, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.1f", i ? ", " : "", x[i]);
    fputc(']', f);
}

/* ---- the benchmark ---- */

#define FAIL_IF(cond, ...)                                                         \
    do {                                                                           \
        if (cond) {                                                                \
            fprintf(stderr, PROG ": rank %d: ", rank);                             \
            fprintf(stderr, __VA_ARGS__);                                          \
            fputc('\n', stderr);                                                   \
            goto fail;                                                             \
        }                                                                          \
    } while (0)

#define ACX_OK_OR_FAIL(call)                                                       \
    do {                                                                           \
        if ((call) != ACX_OK) {                                                    \
            fprintf(stderr, PROG ": rank %d: %s\n", rank, acx_last_error());      \
            goto fail;                                                             \
        }                                                                          \
    } while (0)

/* One step of one side; an acx failure here may be local to this rank. */
static void side_step(int side_acx, acx_side_t *s, raw_side_t *r, const mlp_dims_t *d,
                      const batches_t *bs, int rank) {
    if (!side_acx) {
        raw_side_step(r, d, bs);
    } else if (acx_side_step(s, d, bs) != ACX_OK) {
        fprintf(stderr, PROG ": rank %d: %s\n", rank, acx_last_error());
        acx_abort(s->acc, 1, PROG ": acx training step failed");
    }
}

/* Time K steps of one side: the slowest rank's time. One untimed step
 * first, so each timed block starts with its own side's data in the caches
 * (as in a real run, where a step follows a step of the same program)
 * rather than paying for what the other side left behind; then a barrier. */
static double time_block(int side_acx, acx_side_t *s, raw_side_t *r, const mlp_dims_t *d,
                         const batches_t *bs, int K, int rank) {
    side_step(side_acx, s, r, d, bs, rank);
    MPI_Barrier(r->comm);
    double t0 = MPI_Wtime();
    for (int i = 0; i < K; i++) side_step(side_acx, s, r, d, bs, rank);
    double mine = MPI_Wtime() - t0, slowest;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, r->comm);
    return slowest;
}

static int run(int argc, char **argv) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    /* The comparison is DDP against DDP in fp32 on host memory, one
     * optimizer step per batch: the program's choices override any config. */
    cfg.sharding_strategy = ACX_NO_SHARD;
    cfg.mixed_precision = ACX_MP_NO;
    cfg.gradient_accumulation_steps = 1;
    cfg.backend = ACX_BACKEND_MPI;

    int provided, rank, world, rc = 1, in_loop = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm); /* before acx_init, so it keeps MPI's fatal errors */
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);

    acx_side_t s;
    raw_side_t r;
    batches_t bs;
    options_t o;
    double *t_acx = NULL, *t_raw = NULL, *ratio = NULL;
    memset(&s, 0, sizeof s);
    memset(&r, 0, sizeof r);
    memset(&bs, 0, sizeof bs);
    mlp_dims_t d = {784, 256, 128, 10};

    if (acx_init(&argc, &argv, &cfg, &s.acc) != ACX_OK) {
        fprintf(stderr, PROG ": %s\n", acx_last_error());
        MPI_Comm_free(&comm);
        MPI_Finalize();
        return 1;
    }
    int parsed = parse_options(argc, argv, &o);
    if (parsed != 0) { /* every rank parsed the same arguments */
        rc = parsed < 0 ? 2 : 0;
        goto done;
    }
    FAIL_IF(o.batch_size > 1000000, "--batch-size %lld is too large", (long long)o.batch_size);

    /* Inputs, before anything is timed. */
    FAIL_IF(batches_alloc(&bs, o.batches, (int)o.batch_size, d.in) != 0,
            "out of memory for %d batches of %lld", o.batches, (long long)o.batch_size);
    if (o.data) {
        int loaded = 0;
        if (batches_load(s.acc, o.data, &bs, d.in, &loaded) != ACX_OK) goto fail;
        int fewest;
        MPI_Allreduce(&loaded, &fewest, 1, MPI_INT, MPI_MIN, comm);
        FAIL_IF(fewest < 1, "%s has no full batch of %lld per rank", o.data, (long long)o.batch_size);
        bs.nb = fewest;
    } else {
        batches_synthesize(&bs, d.in, d.out, rank);
    }

    /* Both models, from the same initial parameters. */
    ACX_OK_OR_FAIL(acx_side_register(&s, &d));
    ACX_OK_OR_FAIL(acx_prepare(s.acc, s.m, s.opt, NULL));
    ACX_OK_OR_FAIL(acx_optimizer_zero_grad(s.opt));
    FAIL_IF(mlp_workspace_init(&s.ws, &d, bs.B) != 0 || mlp_workspace_init(&r.ws, &d, bs.B) != 0 ||
                raw_side_init(&r, &d, comm) != 0,
            "out of memory");
    for (int l = 0; l < MLP_LAYERS; l++) ACX_OK_OR_FAIL(acx_unit_acquire(s.unit[l]));
    raw_copy_params(&r, &s);
    for (int l = 0; l < MLP_LAYERS; l++) ACX_OK_OR_FAIL(acx_unit_release(s.unit[l]));
    in_loop = 1; /* from here on a failure may be local to one rank */

    const char *coretype = getenv("OPENBLAS_CORETYPE"), *threads = getenv("OPENBLAS_NUM_THREADS");
    acx_print(s.acc,
              PROG ": MLP %d-%d-%d-%d (%zu parameters), AdamW lr 1e-3 wd 0.01, acx %s\n"
              "  %d rank(s) x batch %d (global %d), %d batch(es) per rank in memory from %s\n"
              "  OPENBLAS_CORETYPE=%s OPENBLAS_NUM_THREADS=%s\n",
              d.in, d.h1, d.h2, d.out, r.numel, acx_version(), world, bs.B, bs.B * world, bs.nb,
              o.data ? o.data : "synthetic data", coretype ? coretype : "(unset)",
              threads ? threads : "(unset)");

    /* Cross-check on fresh state: S steps each on the same batches. */
    for (int i = 0; i < o.check_steps; i++) {
        ACX_OK_OR_FAIL(acx_side_step(&s, &d, &bs));
        raw_side_step(&r, &d, &bs);
    }
    int worst;
    double diff = params_max_rel_diff(&s, &r, &worst);
    int check_ok = diff <= CHECK_LIMIT;
    acx_print(s.acc,
              "cross-check: %d steps from identical parameters, max relative difference %.3e "
              "(%s; limit %.0e): %s\n",
              o.check_steps, diff, tensor_name(worst), CHECK_LIMIT, check_ok ? "OK" : "FAILED");
    acx_print(s.acc, "  last loss: acx %.6f, raw %.6f\n", s.loss, r.loss);
    if (!check_ok || o.check_only) {
        rc = check_ok ? 0 : 1;
        goto done;
    }

    /* Timing: warm-up, then rounds alternating which side goes first. */
    int R = o.rounds, K = o.steps;
    t_acx = malloc((size_t)R * sizeof *t_acx);
    t_raw = malloc((size_t)R * sizeof *t_raw);
    ratio = malloc((size_t)R * sizeof *ratio);
    FAIL_IF(!t_acx || !t_raw || !ratio, "out of memory");
    for (int i = 0; i < o.warmup; i++) side_step(1, &s, &r, &d, &bs, rank);
    for (int i = 0; i < o.warmup; i++) side_step(0, &s, &r, &d, &bs, rank);
    double samples = (double)K * bs.B * world; /* global samples per block */
    acx_print(s.acc, "\ntiming: %d rounds x %d steps per side, alternating, %d warm-up step(s) each; "
                     "slowest rank per block, each block after 1 untimed step\n\n",
              R, K, o.warmup);
    acx_print(s.acc, "round  first  acx samples/s  raw samples/s  acx/raw\n");
    for (int i = 0; i < R; i++) {
        int acx_first = i % 2 == 0;
        double ta, tr;
        if (acx_first) {
            ta = time_block(1, &s, &r, &d, &bs, K, rank);
            tr = time_block(0, &s, &r, &d, &bs, K, rank);
        } else {
            tr = time_block(0, &s, &r, &d, &bs, K, rank);
            ta = time_block(1, &s, &r, &d, &bs, K, rank);
        }
        t_acx[i] = samples / ta;
        t_raw[i] = samples / tr;
        ratio[i] = t_acx[i] / t_raw[i];
        acx_print(s.acc, "%5d  %-5s  %13.1f  %13.1f  %7.3f\n", i + 1, acx_first ? "acx" : "raw",
                  t_acx[i], t_raw[i], ratio[i]);
    }
    double med_acx = median(t_acx, R), med_raw = median(t_raw, R), med_ratio = median(ratio, R);
    acx_print(s.acc, "\nside  median samples/s  min samples/s  max samples/s  ms/step (median)\n");
    acx_print(s.acc, "acx   %16.1f  %13.1f  %13.1f  %16.3f\n", med_acx, min_of(t_acx, R), max_of(t_acx, R),
              1e3 * bs.B * world / med_acx);
    acx_print(s.acc, "raw   %16.1f  %13.1f  %13.1f  %16.3f\n", med_raw, min_of(t_raw, R), max_of(t_raw, R),
              1e3 * bs.B * world / med_raw);
    acx_print(s.acc, "\nratio of medians acx/raw = %.3f; per-round ratios: median %.3f, min %.3f, max %.3f\n",
              med_acx / med_raw, med_ratio, min_of(ratio, R), max_of(ratio, R));

    if (o.json && rank == 0) {
        FILE *f = fopen(o.json, "w");
        if (f == NULL) {
            fprintf(stderr, PROG ": cannot write '%s'\n", o.json);
        } else {
            fprintf(f,
                    "{\"benchmark\": \"fmnist_ddp\", \"world_size\": %d, \"batch_size\": %d, "
                    "\"rounds\": %d, \"steps\": %d, \"warmup\": %d, \"data\": \"%s\", "
                    "\"openblas_coretype\": \"%s\",\n"
                    " \"check_steps\": %d, \"check_max_rel_diff\": %.6e,\n",
                    world, bs.B, R, K, o.warmup, o.data ? "file" : "synthetic",
                    coretype ? coretype : "", o.check_steps, diff);
            fprintf(f, " \"acx\": {\"median\": %.1f, \"min\": %.1f, \"max\": %.1f, \"samples_per_s\": ",
                    med_acx, min_of(t_acx, R), max_of(t_acx, R));
            json_array(f, t_acx, R);
            fprintf(f, "},\n \"raw\": {\"median\": %.1f, \"min\": %.1f, \"max\": %.1f, \"samples_per_s\": ",
                    med_raw, min_of(t_raw, R), max_of(t_raw, R));
            json_array(f, t_raw, R);
            fprintf(f, "},\n \"ratio_of_medians\": %.4f, \"ratio_median_of_rounds\": %.4f}\n",
                    med_acx / med_raw, med_ratio);
            fclose(f);
        }
    }
    acx_print(s.acc, "ratio acx/raw = %.3fx (median of %d rounds)\n", med_ratio, R);
    rc = 0;
    goto done;

fail:
    rc = 1;
    /* Past setup a failure may be local to this rank: the others would wait
     * in their next collective, so end the job. */
    if (in_loop) acx_abort(s.acc, rc, PROG " failed");
done:
    free(t_acx);
    free(t_raw);
    free(ratio);
    mlp_workspace_free(&s.ws);
    mlp_workspace_free(&r.ws);
    raw_side_free(&r);
    batches_free(&bs);
    if (acx_finalize(s.acc) != ACX_OK && rc == 0) rc = 1;
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return rc;
}

int main(int argc, char **argv) { return run(argc, argv); }

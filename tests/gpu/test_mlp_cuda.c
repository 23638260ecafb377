/*
 * tests/gpu/test_mlp_cuda.c — the cuBLAS MLP (examples/fashion_mnist/
 * mlp_cuda.c) against the CPU MLP (mlp.c): the same weights, gradients to
 * accumulate into and batch through both, on the first visible GPU; exit 77
 * (skip) without one.
 *
 * For batch sizes 1, 7, 32, 100, 257 and 500 (257 and 7: not multiples of
 * 32, so sgemm's edge tiles run), in cuBLAS's default float32 mode and in
 * its pedantic mode, on a stream of the test's own (non-blocking) and on
 * one mlp_cuda creates:
 *   - the normalized input is bitwise mlp_load_input's;
 *   - activations, logits, loss and d loss / d logits agree within 1e-5
 *     relative, ReLU masks exactly, the argmax flags exactly (samples whose
 *     top two CPU logits are within 1e-4 are not counted);
 *   - the six gradients (accumulated onto nonzero starting values, beta = 1)
 *     agree within 1e-4 relative; also with fp16-style loss scaling (x1024);
 *   - a second run on the device is bitwise equal to the first (no atomics);
 *   - pointer classification and argument errors.
 *
 * Relative error is in the max norm: max |gpu - cpu| / max |cpu| over a
 * tensor (for gradients, over the part this batch added: g - g0).
 *
 * The bounds. cuBLAS and OpenBLAS sum the k products of each output in
 * different orders (blocking, FMA or not), so one output of a product of
 * length k differs by rounding only: at most ~k * 2^-24 * sum |a_i b_i| in
 * the worst case, ~sqrt(k) * 2^-24 * sum |a_i b_i| typically — for k = 784,
 * 1.7e-6 relative to the terms' magnitude, which for these O(1) activations
 * is the output's. The forward stacks three such products, each also
 * propagating the previous layer's difference (with gain ~1 for these
 * weights): a few 1e-6, hence 1e-5 for activations, logits and the loss
 * (the softmax and the log-sum-exp are evaluated in double from the logits,
 * with condition ~1). A gradient is a further product over the batch (k up
 * to 500) of two inputs that each already differ by ~1e-5 relative, and the
 * sums over samples cancel (the mean loss's gradients shrink with B while
 * the terms do not), which multiplies the relative error by up to ~10:
 * hence 1e-4.
 *
 * The one non-rounding difference: a pre-activation within rounding of 0
 * can pass the ReLU on one side and not the other, which changes a whole
 * sample's contribution to the layers below. The test's batches avoid it
 * by construction: a sample is redrawn while any hidden pre-activation
 * (computed in double) is within 1e-3 of 0 — 500 times the differences
 * above — and the masks are then checked to be identical.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "mlp.h"
#include "mlp_cuda.h"
#include "tests/acx_test.h"

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t cu_ret_ = (call);                                                              \
        if (cu_ret_ != cudaSuccess) {                                                              \
            fprintf(stderr, "\n%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,                    \
                    cudaGetErrorName(cu_ret_), cudaGetErrorString(cu_ret_));                       \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

/* An mlp_cuda call on context ctx: 0, or print its message and fail. */
#define MC(ctx, call)                                                                              \
    do {                                                                                           \
        if ((call) != 0) {                                                                         \
            fprintf(stderr, "\n%s:%d: %s: %s\n", __FILE__, __LINE__, #call, (ctx)->err);           \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

#define MAX_BATCH  500
#define FWD_RTOL   1e-5
#define GRAD_RTOL  1e-4
#define RELU_GAP   1e-3 /* |pre-activation| kept above this (see the file comment) */
#define ARGMAX_GAP 1e-4 /* top-two logit gap below which a sample is ambiguous */

static const mlp_dims_t dims = {784, 256, 128, 10};

/* ---- deterministic data ---- */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint32_t rnd32(void) {
    rng_state ^= rng_state >> 12; /* xorshift64* */
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() >> 8) * 0x1p-24f; }

/* Host copies of everything both sides start from. */
typedef struct model {
    float *w[MLP_LAYERS], *b[MLP_LAYERS];     /* nn.Linear's init: U(-1/sqrt(fan_in), +) */
    float *gw0[MLP_LAYERS], *gb0[MLP_LAYERS]; /* starting gradients, U(-1e-3, 1e-3) */
} model_t;

static size_t wsize(int l) { return (size_t)mlp_fan_out(&dims, l) * (size_t)mlp_fan_in(&dims, l); }
static size_t bsize(int l) { return (size_t)mlp_fan_out(&dims, l); }

static int model_init(model_t *m) {
    memset(m, 0, sizeof *m);
    for (int l = 0; l < MLP_LAYERS; l++) {
        float bound = 1.0f / sqrtf((float)mlp_fan_in(&dims, l));
        m->w[l] = malloc(wsize(l) * sizeof(float));
        m->b[l] = malloc(bsize(l) * sizeof(float));
        m->gw0[l] = malloc(wsize(l) * sizeof(float));
        m->gb0[l] = malloc(bsize(l) * sizeof(float));
        if (!m->w[l] || !m->b[l] || !m->gw0[l] || !m->gb0[l]) return -1;
        for (size_t i = 0; i < wsize(l); i++)
            m->w[l][i] = rndf(-bound, bound);
        for (size_t i = 0; i < bsize(l); i++)
            m->b[l][i] = rndf(-bound, bound);
        for (size_t i = 0; i < wsize(l); i++)
            m->gw0[l][i] = rndf(-1e-3f, 1e-3f);
        for (size_t i = 0; i < bsize(l); i++)
            m->gb0[l][i] = rndf(-1e-3f, 1e-3f);
    }
    return 0;
}

static void model_free(model_t *m) {
    for (int l = 0; l < MLP_LAYERS; l++) {
        free(m->w[l]);
        free(m->b[l]);
        free(m->gw0[l]);
        free(m->gb0[l]);
    }
}

/* Smallest |pre-activation| of the hidden layers for one normalized sample,
 * in double. */
static double relu_margin(const model_t *m, const float *x) {
    double h1[784], margin = INFINITY; /* h1 <= in: the 784-256-128-10 model */
    for (int j = 0; j < dims.h1; j++) {
        double s = m->b[0][j];
        for (int i = 0; i < dims.in; i++)
            s += (double)m->w[0][(size_t)j * dims.in + i] * x[i];
        margin = fmin(margin, fabs(s));
        h1[j] = s > 0 ? s : 0;
    }
    for (int j = 0; j < dims.h2; j++) {
        double s = m->b[1][j];
        for (int i = 0; i < dims.h1; i++)
            s += (double)m->w[1][(size_t)j * dims.h1 + i] * h1[i];
        margin = fmin(margin, fabs(s));
    }
    return margin;
}

/* A batch of Fashion-MNIST-like pixels (about half background zeros) and
 * labels, each sample redrawn until its hidden pre-activations stay
 * RELU_GAP away from the ReLU's kink. Returns the number of redraws, -1 if
 * a sample could not be drawn. */
static int make_batch(const model_t *m, mlp_workspace_t *ws, uint8_t *px, uint8_t *labels, int n) {
    int redraws = 0;
    for (int s = 0; s < n; s++) {
        uint8_t *p = px + (size_t)s * dims.in;
        for (int tries = 0;; tries++) {
            if (tries == 1000) return -1;
            for (int i = 0; i < dims.in; i++)
                p[i] = (rnd32() & 1) ? (uint8_t)(rnd32() & 0xff) : 0;
            mlp_load_input(ws, &dims, p, 1); /* the exact floats both sides will see */
            if (relu_margin(m, ws->x) >= RELU_GAP) break;
            redraws++;
        }
        labels[s] = (uint8_t)(rnd32() % (uint32_t)dims.out);
    }
    return redraws;
}

/* ---- comparisons ---- */

/* max |a - b| / max |ref - base| (base NULL: 0) over n floats. */
static double rel_err(const float *a, const float *b, const float *base, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - (double)b[i]));
        den = fmax(den, fabs((double)b[i] - (base ? (double)base[i] : 0.0)));
    }
    return den > 0 ? num / den : num;
}

static int report(const char *what, int batch, double err, double tol) {
    if (err <= tol) return 0;
    fprintf(stderr, "\n  batch %d: %s: relative error %.3g > %.0e", batch, what, err, tol);
    return 1;
}

static int top2_ambiguous(const float *z, int k) {
    float a = -INFINITY, b = -INFINITY;
    for (int j = 0; j < k; j++) {
        if (z[j] > a) {
            b = a;
            a = z[j];
        } else if (z[j] > b) {
            b = z[j];
        }
    }
    return (double)a - (double)b < ARGMAX_GAP;
}

/* ---- the device side ---- */

typedef struct device_model {
    mlp_tensors_t p, g; /* device */
} device_model_t;

static int device_model_init(device_model_t *dm, const model_t *m) {
    memset(dm, 0, sizeof *dm);
    for (int l = 0; l < MLP_LAYERS; l++) {
        CU(cudaMalloc((void **)&dm->p.w[l], wsize(l) * sizeof(float)));
        CU(cudaMalloc((void **)&dm->p.b[l], bsize(l) * sizeof(float)));
        CU(cudaMalloc((void **)&dm->g.w[l], wsize(l) * sizeof(float)));
        CU(cudaMalloc((void **)&dm->g.b[l], bsize(l) * sizeof(float)));
        CU(cudaMemcpy(dm->p.w[l], m->w[l], wsize(l) * sizeof(float), cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dm->p.b[l], m->b[l], bsize(l) * sizeof(float), cudaMemcpyHostToDevice));
    }
    return 0;
error:
    return 1;
}

static void device_model_free(device_model_t *dm) {
    for (int l = 0; l < MLP_LAYERS; l++) {
        cudaFree(dm->p.w[l]);
        cudaFree(dm->p.b[l]);
        cudaFree(dm->g.w[l]);
        cudaFree(dm->g.b[l]);
    }
}

/* What one device step leaves, copied to the host. */
typedef struct device_result {
    float *x, *act[MLP_LAYERS], *dlogits, *gw[MLP_LAYERS], *gb[MLP_LAYERS];
    uint8_t *correct;
    double loss;
    int hits;
} device_result_t;

static int result_init(device_result_t *r) {
    memset(r, 0, sizeof *r);
    size_t b = MAX_BATCH;
    r->x = malloc(b * (size_t)dims.in * sizeof(float));
    r->dlogits = malloc(b * (size_t)dims.out * sizeof(float));
    r->correct = malloc(b);
    if (!r->x || !r->dlogits || !r->correct) return -1;
    for (int l = 0; l < MLP_LAYERS; l++) {
        r->act[l] = malloc(b * bsize(l) * sizeof(float));
        r->gw[l] = malloc(wsize(l) * sizeof(float));
        r->gb[l] = malloc(bsize(l) * sizeof(float));
        if (!r->act[l] || !r->gw[l] || !r->gb[l]) return -1;
    }
    return 0;
}

static void result_free(device_result_t *r) {
    free(r->x);
    free(r->dlogits);
    free(r->correct);
    for (int l = 0; l < MLP_LAYERS; l++) {
        free(r->act[l]);
        free(r->gw[l]);
        free(r->gb[l]);
    }
}

/* Load, forward, loss (x scale), backward onto g0, accuracy: the sequence
 * of acx-fmnist's train and eval steps, on the device. */
static int device_step(mlp_cuda_t *cp, device_model_t *dm, const model_t *m, const uint8_t *px,
                       const uint8_t *labels, int n, float scale, device_result_t *r) {
    cudaStream_t s = (cudaStream_t)mlp_cuda_stream(cp);
    for (int l = 0; l < MLP_LAYERS; l++) {
        CU(cudaMemcpyAsync(dm->g.w[l], m->gw0[l], wsize(l) * sizeof(float), cudaMemcpyHostToDevice,
                           s));
        CU(cudaMemcpyAsync(dm->g.b[l], m->gb0[l], bsize(l) * sizeof(float), cudaMemcpyHostToDevice,
                           s));
    }
    MC(cp, mlp_cuda_load_batch(cp, &dims, px, labels, n));
    mlp_params_t dp = mlp_params_of(&dm->p);
    MC(cp, mlp_cuda_forward(&dims, &dp, cp, n));
    MC(cp, mlp_cuda_loss(&dims, cp, n));
    MC(cp, mlp_cuda_sync(cp));
    CU(cudaMemcpy(r->dlogits, cp->dact, (size_t)n * dims.out * sizeof(float),
                  cudaMemcpyDeviceToHost));
    if (scale != 1.0f) { /* fp16 loss scaling as acx_backward_begin does it: one product each */
        size_t nd = (size_t)n * (size_t)dims.out;
        float *scaled = malloc(nd * sizeof *scaled);
        if (scaled == NULL) goto error;
        for (size_t i = 0; i < nd; i++)
            scaled[i] = r->dlogits[i] * scale;
        cudaError_t ce = cudaMemcpy(cp->dact, scaled, nd * sizeof(float), cudaMemcpyHostToDevice);
        free(scaled);
        CU(ce);
    }
    for (int l = MLP_LAYERS - 1; l >= 0; l--)
        MC(cp, mlp_cuda_backward_layer(&dims, &dp, &dm->g, cp, l, n));
    MC(cp, mlp_cuda_loss_value(cp, &r->loss));
    MC(cp, mlp_cuda_count_correct(&dims, cp, n, r->correct, &r->hits));
    MC(cp, mlp_cuda_sync(cp));
    CU(cudaMemcpy(r->x, cp->x, (size_t)n * dims.in * sizeof(float), cudaMemcpyDeviceToHost));
    for (int l = 0; l < MLP_LAYERS; l++) {
        CU(cudaMemcpy(r->act[l], cp->act[l], (size_t)n * bsize(l) * sizeof(float),
                      cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(r->gw[l], dm->g.w[l], wsize(l) * sizeof(float), cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(r->gb[l], dm->g.b[l], bsize(l) * sizeof(float), cudaMemcpyDeviceToHost));
    }
    return 0;
error:
    return 1;
}

/* The same step on the CPU (mlp.c), as acx-fmnist's train_step runs it. */
static void cpu_step(mlp_workspace_t *ws, const model_t *m, mlp_tensors_t *g, const uint8_t *px,
                     const uint8_t *labels, int n, float scale, float *dlogits, double *loss_p,
                     uint8_t *correct, int *hits_p) {
    mlp_params_t p;
    for (int l = 0; l < MLP_LAYERS; l++) {
        p.w[l] = m->w[l];
        p.b[l] = m->b[l];
        memcpy(g->w[l], m->gw0[l], wsize(l) * sizeof(float));
        memcpy(g->b[l], m->gb0[l], bsize(l) * sizeof(float));
    }
    mlp_load_input(ws, &dims, px, n);
    mlp_forward(&dims, &p, ws, n);
    *loss_p = mlp_loss(&dims, ws, labels, n);
    memcpy(dlogits, ws->dact, (size_t)n * dims.out * sizeof(float));
    if (scale != 1.0f)
        for (size_t i = 0; i < (size_t)n * (size_t)dims.out; i++)
            ws->dact[i] *= scale;
    /* the logits survive the backward (it writes dact/dtmp only) */
    for (int l = MLP_LAYERS - 1; l >= 0; l--)
        mlp_backward_layer(&dims, &p, g, ws, l, n);
    *hits_p = mlp_count_correct(&dims, ws, labels, n, correct);
}

/* ---- the cases ---- */

static model_t model;

/* Every batch size through both sides, in one cuBLAS mode, on a given stream. */
static int run_mode(int flags, int own_stream) {
    static const int batches[] = {1, 7, 32, 100, 257, 500};
    mlp_cuda_t mc = {0};
    mlp_workspace_t ws = {0};
    device_model_t dm = {0};
    device_result_t r1 = {0}, r2 = {0};
    mlp_tensors_t g = {0};
    cudaStream_t s = NULL;
    uint8_t *px = malloc((size_t)MAX_BATCH * dims.in), *labels = malloc(MAX_BATCH),
            *correct = malloc(MAX_BATCH);
    float *dlogits = malloc((size_t)MAX_BATCH * dims.out * sizeof(float));
    int bad = 0, status = 1;
    CHECK(px && labels && correct && dlogits);
    CHECK(mlp_workspace_init(&ws, &dims, MAX_BATCH) == 0);
    CHECK(result_init(&r1) == 0 && result_init(&r2) == 0);
    for (int l = 0; l < MLP_LAYERS; l++) {
        g.w[l] = malloc(wsize(l) * sizeof(float));
        g.b[l] = malloc(bsize(l) * sizeof(float));
        CHECK(g.w[l] && g.b[l]);
    }
    if (!own_stream) CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    MC(&mc, mlp_cuda_init(&mc, &dims, MAX_BATCH, 0, s, flags));
    CHECK(own_stream ? mlp_cuda_stream(&mc) != NULL : mlp_cuda_stream(&mc) == (void *)s);
    CHECK(device_model_init(&dm, &model) == 0);
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        int n = batches[bi];
        float scale = n == 100 ? 1024.0f : 1.0f; /* fp16 loss scaling, a power of two */
        int redraws = make_batch(&model, &ws, px, labels, n);
        CHECK(redraws >= 0);
        double loss;
        int hits;
        cpu_step(&ws, &model, &g, px, labels, n, scale, dlogits, &loss, correct, &hits);
        CHECK(device_step(&mc, &dm, &model, px, labels, n, scale, &r1) == 0);
        CHECK(device_step(&mc, &dm, &model, px, labels, n, scale, &r2) == 0);

        /* the input: bitwise */
        if (memcmp(r1.x, ws.x, (size_t)n * dims.in * sizeof(float)) != 0) {
            fprintf(stderr, "\n  batch %d: normalized input differs from mlp_load_input's", n);
            bad = 1;
        }
        /* forward */
        for (int l = 0; l < MLP_LAYERS; l++) {
            size_t len = (size_t)n * bsize(l);
            char what[48];
            snprintf(what, sizeof what, "activations of layer %d", l + 1);
            bad |= report(what, n, rel_err(r1.act[l], ws.act[l], NULL, len), FWD_RTOL);
            if (l < MLP_LAYERS - 1) {
                size_t flips = 0;
                for (size_t i = 0; i < len; i++)
                    flips += (r1.act[l][i] == 0.0f) != (ws.act[l][i] == 0.0f);
                if (flips) {
                    fprintf(stderr, "\n  batch %d: %zu ReLU decisions of layer %d differ", n, flips,
                            l + 1);
                    bad = 1;
                }
            }
        }
        bad |= report("loss", n, fabs(r1.loss - loss) / fabs(loss), FWD_RTOL);
        bad |= report("d loss / d logits", n,
                      rel_err(r1.dlogits, dlogits, NULL, (size_t)n * dims.out), FWD_RTOL);
        /* gradients, relative to what this batch added */
        for (int l = 0; l < MLP_LAYERS; l++) {
            char what[48];
            snprintf(what, sizeof what, "weight gradient of layer %d", l + 1);
            bad |= report(what, n, rel_err(r1.gw[l], g.w[l], model.gw0[l], wsize(l)), GRAD_RTOL);
            snprintf(what, sizeof what, "bias gradient of layer %d", l + 1);
            bad |= report(what, n, rel_err(r1.gb[l], g.b[l], model.gb0[l], bsize(l)), GRAD_RTOL);
        }
        /* accuracy: every sample whose top two logits are not within rounding */
        int counted = 0, agree = 0;
        for (int i = 0; i < n; i++) {
            if (top2_ambiguous(ws.act[MLP_LAYERS - 1] + (size_t)i * dims.out, dims.out)) continue;
            counted++;
            agree += r1.correct[i] == correct[i];
        }
        if (agree != counted) {
            fprintf(stderr, "\n  batch %d: argmax flags differ on %d of %d samples", n,
                    counted - agree, counted);
            bad = 1;
        }
        int sum = 0;
        for (int i = 0; i < n; i++)
            sum += r1.correct[i];
        CHECK(sum == r1.hits);
        if (counted == n && r1.hits != hits) {
            fprintf(stderr, "\n  batch %d: %d correct on the device, %d on the CPU", n, r1.hits,
                    hits);
            bad = 1;
        }
        /* reproducibility: the second device run is bitwise the first */
        int same = r1.loss == r2.loss && r1.hits == r2.hits &&
                   !memcmp(r1.dlogits, r2.dlogits, (size_t)n * dims.out * sizeof(float));
        for (int l = 0; l < MLP_LAYERS; l++)
            same = same && !memcmp(r1.act[l], r2.act[l], (size_t)n * bsize(l) * sizeof(float)) &&
                   !memcmp(r1.gw[l], r2.gw[l], wsize(l) * sizeof(float)) &&
                   !memcmp(r1.gb[l], r2.gb[l], bsize(l) * sizeof(float));
        if (!same) {
            fprintf(stderr, "\n  batch %d: two device runs of the same step differ", n);
            bad = 1;
        }
        if (getenv("ACX_TEST_VERBOSE"))
            fprintf(stderr,
                    "\n  batch %d (x%g, %d redraws): logits %.2e, loss %.2e, fc1.weight grad %.2e",
                    n, (double)scale, redraws,
                    rel_err(r1.act[2], ws.act[2], NULL, (size_t)n * dims.out),
                    fabs(r1.loss - loss) / loss, rel_err(r1.gw[0], g.w[0], model.gw0[0], wsize(0)));
    }
    CHECK(!bad);
    CHECK(cudaGetLastError() == cudaSuccess);
    status = 0;
error:
    mlp_cuda_free(&mc);
    device_model_free(&dm);
    if (s) cudaStreamDestroy(s);
    mlp_workspace_free(&ws);
    result_free(&r1);
    result_free(&r2);
    for (int l = 0; l < MLP_LAYERS; l++) {
        free(g.w[l]);
        free(g.b[l]);
    }
    free(px);
    free(labels);
    free(correct);
    free(dlogits);
    return status;
}

static int test_default_own_stream(void) { return run_mode(0, 1); }
static int test_pedantic_given_stream(void) { return run_mode(MLP_CUDA_PEDANTIC, 0); }

/* Pointer classification and the argument errors. */
static int test_misuse(void) {
    mlp_cuda_t mc = {0};
    float *d = NULL, host = 0.0f;
    uint8_t px[784] = {0};
    MC(&mc, mlp_cuda_init(&mc, &dims, 4, 0, NULL, 0));
    CU(cudaMalloc((void **)&d, 64));
    CHECK(mlp_cuda_is_device_pointer(&mc, d) == 1);
    CHECK(mlp_cuda_is_device_pointer(&mc, &host) == 0);
    CHECK(mlp_cuda_load_batch(&mc, &dims, px, NULL, 5) == -1);
    CHECK(strstr(mc.err, "batch of 5 samples, expected 1..4") != NULL);
    CHECK(mlp_cuda_load_batch(&mc, &dims, px, NULL, 0) == -1);
    mlp_tensors_t t = {0};
    mlp_params_t tp = mlp_params_of(&t);
    CHECK(mlp_cuda_backward_layer(&dims, &tp, &t, &mc, 3, 1) == -1);
    CHECK(strstr(mc.err, "layer 3, expected 0..2") != NULL);
    mlp_cuda_t bad;
    CHECK(mlp_cuda_init(&bad, &dims, 0, 0, NULL, 0) == -1);
    CHECK(strstr(bad.err, "max_batch 0") != NULL);
    CHECK(mlp_cuda_init(&bad, &dims, 4, 9999, NULL, 0) == -1);
    CHECK(strstr(bad.err, "cudaSetDevice (device 9999) failed: cudaErrorInvalidDevice") != NULL);
    CU(cudaSetDevice(0));
    cudaFree(d);
    mlp_cuda_free(&mc);
    return 0;
error:
    cudaFree(d);
    mlp_cuda_free(&mc);
    return 1;
}

int main(void) {
    acx_test_watchdog(600);
    char why[256];
    if (acx_device_count(why, sizeof why) == 0) {
        printf("SKIP: test_mlp_cuda needs a CUDA device: %s\n", why);
        return 77;
    }
    if (cudaSetDevice(0) != cudaSuccess) {
        fprintf(stderr, "cudaSetDevice(0) failed\n");
        return 1;
    }
    if (model_init(&model) != 0) {
        fprintf(stderr, "out of memory\n");
        return 99;
    }
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"mlp_cuda: batches 1..500 vs mlp.c (default math, own stream)", test_default_own_stream},
        {"mlp_cuda: batches 1..500 vs mlp.c (pedantic, non-blocking stream)",
         test_pedantic_given_stream},
        {"mlp_cuda: pointer classification, argument errors", test_misuse},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TESTING(cases[i].name);
        if (cases[i].fn()) {
            FAILED();
            failed = 1;
        } else {
            PASSED();
        }
    }
    model_free(&model);
    return failed;
}

/*
 * tests/gpu/test_gpt_cuda.c — acx-gpt's device model (examples/gpt/
 * gpt_cuda.c) against its CPU model (gpt_model.c), pass by pass, on the
 * first visible GPU; exit 77 (skip) without one.
 *
 * The same random weights, batch (tokens with repeats, so the embedding's
 * scatter-add sums several rows per token) and starting gradients (nonzero:
 * every backward must ADD) go through both, for a model whose dimensions
 * are pairwise different (V 53, T 16, C 48, 3 heads of 16, 2 blocks, batch
 * 5), in cuBLAS's default float32 mode and in its pedantic mode:
 *   - the embedding output is bitwise gpt_model.c's (one float add each);
 *   - every block's output, ln_f's output, the probabilities and the loss
 *     agree within 1e-5 relative (max norm over the tensor);
 *   - every parameter's gradient (the part this batch added) within 1e-4;
 *   - a second run on the device gives bitwise the same gradients (no
 *     atomics anywhere);
 *   - a batch with a token outside the vocabulary is refused, naming it.
 * The bounds are test_mlp_cuda.c's, for the same reasons: the products sum
 * in cuBLAS's order (and the device contracts multiply-adds), a few 1e-7
 * per product relative to its terms, grown through two blocks in forward
 * (1e-5) and through cancelling sums over the batch in backward (1e-4).
 *
 * The same program is built, in every build, as tests/unit/
 * test_gpt_cuda_host (GPT_CUDA_HOST_SHIM) on the CPU test double of the
 * CUDA runtime and cuBLAS in tests/unit/cuda_shim/: "device" memory is
 * host memory (filled with NaN bytes when allocated), the products are
 * CBLAS, the kernels their gpt_math.h bodies over every item. That runs
 * gpt_cuda.c itself — its buffers, the order of its passes, each
 * product's operands and the gradient hand-offs — without a GPU; only the
 * device's execution is left to this program on a GPU.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef GPT_CUDA_HOST_SHIM
#include "device/device.h"
#endif
#include "gpt_cuda.h"
#include "gpt_model.h"
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

/* A gpt_cuda call: 0, or print its message and fail. */
#define GC(call)                                                                                   \
    do {                                                                                           \
        if ((call) != 0) {                                                                         \
            fprintf(stderr, "\n%s:%d: %s: %s\n", __FILE__, __LINE__, #call, g.err);                \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

#define FWD_RTOL  1e-5
#define GRAD_RTOL 1e-4

static const gpt_config_t cfg = {
    .vocab = 53, .seq_len = 16, .d_model = 48, .heads = 3, .layers = 2};
#define BATCH 5

/* Every parameter in one flat array: wte, wpe, the blocks' tensors, ln_f. */
typedef struct layout {
    size_t wte, wpe, blk[8][GPT_BLOCK_TENSORS], lnf_w, lnf_b, total;
} layout_t;

static void make_layout(layout_t *l) {
    size_t at = 0, C = (size_t)cfg.d_model;
    l->wte = at, at += (size_t)cfg.vocab * C;
    l->wpe = at, at += (size_t)cfg.seq_len * C;
    for (int b = 0; b < cfg.layers; b++)
        for (int i = 0; i < GPT_BLOCK_TENSORS; i++) {
            int64_t s[2];
            int nd = gpt_block_tensor_shape(&cfg, i, s);
            l->blk[b][i] = at;
            at += (size_t)(nd == 2 ? s[0] * s[1] : s[0]);
        }
    l->lnf_w = at, at += C;
    l->lnf_b = at, at += C;
    l->total = at;
}

static uint64_t rng_state = 0x853c49e6748fea9bull;
static double urand(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

/* max |a - b| / max |b| over n elements (1e-30 floor); infinite with a NaN */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0.0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (isnan(e)) return INFINITY; /* a NaN on either side fails every bound */
        if (e > d) d = e;
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return d / m;
}

/* The pointers of a flat array (host or device) as the passes take them. */
static void block_ptrs(const layout_t *l, float *base, int b, gpt_block_params_t *p,
                       gpt_block_tensors_t *t) {
    for (int i = 0; i < GPT_BLOCK_TENSORS; i++) {
        if (p) p->t[i] = base + l->blk[b][i];
        if (t) t->t[i] = base + l->blk[b][i];
    }
}

static layout_t L;
static float *params, *grads0, *cpu_grads;
static int32_t tok[BATCH * 16], tgt[BATCH * 16];
static gpt_workspace_t ws;
static double cpu_loss;

/* The CPU reference: forward and backward once (gradients from grads0). */
static int cpu_reference(void) {
    int B = BATCH, T = cfg.seq_len;
    gpt_block_params_t p;
    gpt_block_tensors_t t;
    memcpy(cpu_grads, grads0, L.total * sizeof(float));
    gpt_forward_embed(&ws, params + L.wte, params + L.wpe, tok, B, T);
    for (int b = 0; b < cfg.layers; b++) {
        block_ptrs(&L, params, b, &p, NULL);
        gpt_forward_block(&ws, b, &p, B, T);
    }
    cpu_loss =
        gpt_forward_final(&ws, params + L.lnf_w, params + L.lnf_b, params + L.wte, tgt, B, T);
    gpt_backward_head(&ws, params + L.wte, cpu_grads + L.wte, B, T);
    gpt_backward_lnf(&ws, params + L.lnf_w, cpu_grads + L.lnf_w, cpu_grads + L.lnf_b, B, T);
    for (int b = cfg.layers - 1; b >= 0; b--) {
        block_ptrs(&L, params, b, &p, NULL);
        block_ptrs(&L, cpu_grads, b, NULL, &t);
        gpt_backward_block(&ws, b, &p, &t, B, T);
    }
    gpt_backward_embed(&ws, cpu_grads + L.wte, cpu_grads + L.wpe, tok, B, T);
    return 0;
}

/* One forward and backward on the device with `flags`; the gradients (from
 * grads0) into out [L.total]. Compares the activations with the CPU's. */
static int device_run(int flags, float *out) {
    gpt_cuda_t g;
    float *dp = NULL, *dg = NULL, *h = NULL;
    int B = BATCH, T = cfg.seq_len, N = B * T, C = cfg.d_model, V = cfg.vocab, rc = 1;
    size_t nc = (size_t)N * C;
    gpt_block_params_t p;
    gpt_block_tensors_t t;
    double loss;
    memset(&g, 0, sizeof g);
    GC(gpt_cuda_init(&g, &cfg, B, 0, NULL, flags));
    CU(cudaMalloc((void **)&dp, L.total * sizeof(float)));
    CU(cudaMalloc((void **)&dg, L.total * sizeof(float)));
    CU(cudaMemcpy(dp, params, L.total * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dg, grads0, L.total * sizeof(float), cudaMemcpyHostToDevice));
    h = malloc((size_t)N * V * sizeof(float));
    CHECK(h != NULL);
    GC(gpt_cuda_load_batch(&g, tok, tgt, B, T));
    GC(gpt_cuda_forward_embed(&g, dp + L.wte, dp + L.wpe, B, T));
    for (int b = 0; b < cfg.layers; b++) {
        block_ptrs(&L, dp, b, &p, NULL);
        GC(gpt_cuda_forward_block(&g, b, &p, B, T));
    }
    GC(gpt_cuda_forward_lnf(&g, dp + L.lnf_w, dp + L.lnf_b, B, T));
    GC(gpt_cuda_forward_head(&g, dp + L.wte, B, T));
    GC(gpt_cuda_loss_value(&g, &loss));
    CU(cudaMemcpy(h, g.encoded, nc * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(memcmp(h, ws.encoded, nc * sizeof(float)) == 0);
    for (int b = 0; b < cfg.layers; b++) {
        CU(cudaMemcpy(h, g.blocks[b].res3, nc * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(rel_diff(h, ws.blocks[b].res3, nc) < FWD_RTOL);
    }
    CU(cudaMemcpy(h, g.lnf, nc * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(rel_diff(h, ws.lnf, nc) < FWD_RTOL);
    CU(cudaMemcpy(h, g.probs, (size_t)N * V * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(rel_diff(h, ws.probs, (size_t)N * V) < FWD_RTOL);
    CHECK(fabs(loss - cpu_loss) / cpu_loss < FWD_RTOL);
    GC(gpt_cuda_backward_head(&g, dp + L.wte, dg + L.wte, B, T));
    GC(gpt_cuda_backward_lnf(&g, dp + L.lnf_w, dg + L.lnf_w, dg + L.lnf_b, B, T));
    for (int b = cfg.layers - 1; b >= 0; b--) {
        block_ptrs(&L, dp, b, &p, NULL);
        block_ptrs(&L, dg, b, NULL, &t);
        GC(gpt_cuda_backward_block(&g, b, &p, &t, B, T));
    }
    GC(gpt_cuda_backward_embed(&g, dg + L.wte, dg + L.wpe, B, T));
    GC(gpt_cuda_sync(&g));
    CU(cudaMemcpy(out, dg, L.total * sizeof(float), cudaMemcpyDeviceToHost));
    rc = 0;
error:
    gpt_cuda_free(&g);
    cudaFree(dp);
    cudaFree(dg);
    free(h);
    return rc;
}

/* Each tensor's added gradient (minus grads0) against the CPU's. */
static int compare_grads(const float *got) {
    size_t n = L.total;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    int rc = 1;
    CHECK(a != NULL && b != NULL);
    for (size_t i = 0; i < n; i++) {
        a[i] = got[i] - grads0[i];
        b[i] = cpu_grads[i] - grads0[i];
    }
    size_t C = (size_t)cfg.d_model;
    CHECK(rel_diff(a + L.wte, b + L.wte, (size_t)cfg.vocab * C) < GRAD_RTOL);
    CHECK(rel_diff(a + L.wpe, b + L.wpe, (size_t)cfg.seq_len * C) < GRAD_RTOL);
    CHECK(rel_diff(a + L.lnf_w, b + L.lnf_w, C) < GRAD_RTOL);
    CHECK(rel_diff(a + L.lnf_b, b + L.lnf_b, C) < GRAD_RTOL);
    for (int blk = 0; blk < cfg.layers; blk++)
        for (int i = 0; i < GPT_BLOCK_TENSORS; i++) {
            size_t end = i + 1 < GPT_BLOCK_TENSORS ? L.blk[blk][i + 1]
                         : blk + 1 < cfg.layers    ? L.blk[blk + 1][0]
                                                   : L.lnf_w;
            double d = rel_diff(a + L.blk[blk][i], b + L.blk[blk][i], end - L.blk[blk][i]);
            if (d >= GRAD_RTOL)
                fprintf(stderr, "\nh.%d.%s: relative difference %.3g\n", blk,
                        gpt_block_tensor_name(i), d);
            CHECK(d < GRAD_RTOL);
        }
    rc = 0;
error:
    free(a);
    free(b);
    return rc;
}

static int test_vs_cpu(int flags) {
    float *got = malloc(L.total * sizeof(float)), *again = malloc(L.total * sizeof(float));
    int rc = 1;
    CHECK(got != NULL && again != NULL);
    if (device_run(flags, got)) goto error;
    if (compare_grads(got)) goto error;
    if (device_run(flags, again)) goto error;
    CHECK(memcmp(got, again, L.total * sizeof(float)) == 0);
    rc = 0;
error:
    free(got);
    free(again);
    return rc;
}

static int test_bad_token(void) {
    gpt_cuda_t g;
    int rc = 1;
    int32_t bad[BATCH * 16];
    memcpy(bad, tok, sizeof bad);
    bad[7] = cfg.vocab;
    memset(&g, 0, sizeof g);
    GC(gpt_cuda_init(&g, &cfg, BATCH, 0, NULL, 0));
    CHECK(gpt_cuda_load_batch(&g, bad, tgt, BATCH, cfg.seq_len) == -1);
    CHECK(strstr(g.err, "token 7") != NULL && strstr(g.err, "53") != NULL);
    CHECK(gpt_cuda_load_batch(&g, tok, tgt, BATCH + 1, cfg.seq_len) == -1);
    rc = 0;
error:
    gpt_cuda_free(&g);
    return rc;
}

static int test_default(void) { return test_vs_cpu(0); }
static int test_pedantic(void) { return test_vs_cpu(GPT_CUDA_PEDANTIC); }

int main(void) {
    acx_test_watchdog(600);
#ifndef GPT_CUDA_HOST_SHIM
    char why[256];
    if (acx_device_count(why, sizeof why) == 0) {
        printf("SKIP: test_gpt_cuda needs a CUDA device: %s\n", why);
        return 77;
    }
#endif
    if (cudaSetDevice(0) != cudaSuccess) {
        fprintf(stderr, "cudaSetDevice(0) failed\n");
        return 1;
    }
    make_layout(&L);
    params = malloc(L.total * sizeof(float));
    grads0 = malloc(L.total * sizeof(float));
    cpu_grads = malloc(L.total * sizeof(float));
    if (params == NULL || grads0 == NULL || cpu_grads == NULL ||
        gpt_workspace_init(&ws, &cfg, BATCH) != 0) {
        fprintf(stderr, "out of memory\n");
        return 99;
    }
    for (size_t i = 0; i < L.total; i++) {
        params[i] = (float)(0.3 * (urand() - 0.5));
        grads0[i] = (float)(urand() - 0.5);
    }
    for (int b = 0; b < cfg.layers; b++) /* LayerNorm weights near 1 */
        for (int i = 0; i < cfg.d_model; i++) {
            params[L.blk[b][GPT_LN1_W] + i] += 1.0f;
            params[L.blk[b][GPT_LN2_W] + i] += 1.0f;
        }
    for (int i = 0; i < cfg.d_model; i++)
        params[L.lnf_w + i] += 1.0f;
    for (int n = 0; n < BATCH * cfg.seq_len; n++) {
        tok[n] = (int32_t)(urand() * 9) * 5; /* 0, 5, .., 40: repeats */
        tgt[n] = (int32_t)(urand() * cfg.vocab);
    }
    cpu_reference();
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"gpt_cuda: forward and backward vs gpt_model.c (default math)", test_default},
        {"gpt_cuda: forward and backward vs gpt_model.c (pedantic)", test_pedantic},
        {"gpt_cuda: a token outside the vocabulary, a batch too large", test_bad_token},
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
    gpt_workspace_free(&ws);
    free(params), free(grads0), free(cpu_grads);
    return failed;
}

/*
 * tests/unit/test_gpt_cuda_math.c — acx-gpt's device path, checked on the
 * CPU where it can be: the per-thread bodies of its CUDA kernels
 * (examples/gpt/gpt_math.h) and the arguments of its cuBLAS products
 * (examples/gpt/gpt_cuda_gemm.h), against the CPU model's kernels
 * (examples/gpt/gpt_model.c), which were written apart from them.
 *
 * Each kernel body is run on the host for every item i of its grid, in
 * reverse order (a body must not depend on another item's result: the
 * device runs them in any order), and each GEMM plan through cblas_sgemm in
 * CblasColMajor with exactly the arguments gpt_cuda.c hands
 * cublasGemmStridedBatchedEx (every head, every sequence at its offset and
 * stride); the attention is then composed as gpt_cuda.c does (scores,
 * softmax rows, output; and backward: dA, dV, softmax backward rows, dQ,
 * dK). Shapes are pairwise different (B 3, T 5, C 12, NH 3 so hs 4, V 11),
 * so a swapped dimension, leading dimension or stride reads other elements.
 *
 * Bounds: the embedding and bias bodies repeat gpt_model.c's float
 * operations in its order, so their results are bitwise equal on the host
 * (checked exactly: a differently ordered or missing term fails). The row
 * reductions (layernorm, softmax cross-entropy) sum in order on the device
 * but in vector lanes on the CPU, and the CPU's GELU runs as an FMA clone
 * where the CPU has FMA: within ROW_TOL (2e-6) of the tensor's largest magnitude, ten times
 * float rounding over these rows and far below a missing term's effect
 * (a dropped element moves a row's mean by ~1/C). The products differ from
 * gpt_model.c's by summation order only (the CPU's attention sums its dot
 * products in loops): within 1e-5 of the tensor's largest magnitude.
 * What this cannot check: the CUDA launches themselves, the device's FMA
 * contraction and its expf/log (tests/gpu/gpt_cuda.test on a GPU).
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../acx_test.h"
#include "gpt_cuda_gemm.h"
#include "gpt_math.h"
#include "gpt_model.h"

#define B  3
#define T  5
#define C  12
#define NH 3
#define V  11
#define N  (B * T)

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void) { /* splitmix64 -> [0, 1) */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}
static void fill(float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * urand());
}
static float *falloc(size_t n) { return calloc(n, sizeof(float)); }

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

/* Run one plan as gpt_cuda.c does: every head, every sequence, column-major. */
static void run_gemm(const gpt_gemm_t *g, const float *a, const float *b, float *c) {
    for (int h = 0; h < g->calls; h++)
        for (int s = 0; s < g->batch; s++)
            cblas_sgemm(CblasColMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                        g->trans_b ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, g->alpha,
                        a + g->off_a + h * g->head_a + s * g->stride_a, g->lda,
                        b + g->off_b + h * g->head_b + s * g->stride_b, g->ldb, g->beta,
                        c + g->off_c + h * g->head_c + s * g->stride_c, g->ldc);
}

/* the row reductions' bound (see the header) */
#define ROW_TOL 2e-6

static int32_t tok[N], tgt[N];

static int test_embedding(void) {
    TESTING("embedding forward and deterministic scatter-add backward");
    float *wte = falloc(V * C), *wpe = falloc(T * C), *out = falloc(N * C), *ref = falloc(N * C);
    float *dout = falloc(N * C), *dwte = falloc(V * C), *dwpe = falloc(T * C);
    float *rwte = falloc(V * C), *rwpe = falloc(T * C);
    int32_t count[V], ids[V], start[V + 1], rows[N];
    int rc = 1;
    fill(wte, V * C, -1, 1);
    fill(wpe, T * C, -1, 1);
    fill(dout, N * C, -1, 1);
    fill(dwte, V * C, -1, 1); /* gradients are added into */
    fill(dwpe, T * C, -1, 1);
    memcpy(rwte, dwte, V * C * sizeof(float));
    memcpy(rwpe, dwpe, T * C * sizeof(float));
    gpt_embed_fwd(ref, tok, wte, wpe, B, T, C);
    for (size_t i = N * C; i-- > 0;)
        gptm_embed_fwd(i, out, tok, wte, wpe, T, C);
    CHECK(rel_diff(out, ref, N * C) < ROW_TOL);
    gpt_embed_bwd(rwte, rwpe, dout, tok, B, T, C);
    int u = gptm_embed_plan(tok, N, V, count, ids, start, rows);
    CHECK(u > 1 && u < N); /* the batch repeats tokens: several rows per id */
    CHECK(start[0] == 0 && start[u] == N);
    for (size_t i = (size_t)u * C; i-- > 0;)
        gptm_embed_bwd_wte(i, dwte, dout, ids, start, rows, C);
    for (size_t i = T * C; i-- > 0;)
        gptm_embed_bwd_wpe(i, dwpe, dout, B, T, C);
    CHECK(memcmp(dwte, rwte, V * C * sizeof(float)) == 0);
    CHECK(memcmp(dwpe, rwpe, T * C * sizeof(float)) == 0);
    int32_t bad[2] = {3, V};
    CHECK(gptm_embed_plan(bad, 2, V, count, ids, start, rows) == -1);
    PASSED();
    rc = 0;
error:
    if (rc) FAILED();
    free(wte), free(wpe), free(out), free(ref), free(dout), free(dwte), free(dwpe);
    free(rwte), free(rwpe);
    return rc;
}

static int test_layernorm(void) {
    TESTING("layernorm rows (forward, input gradient) and columns (dw, db)");
    float *x = falloc(N * C), *w = falloc(C), *b = falloc(C), *out = falloc(N * C);
    float *ref = falloc(N * C), *mean = falloc(N), *rstd = falloc(N), *rmean = falloc(N),
          *rrstd = falloc(N);
    float *dout = falloc(N * C), *dx = falloc(N * C), *rdx = falloc(N * C);
    float *dw = falloc(C), *db = falloc(C), *rdw = falloc(C), *rdb = falloc(C);
    int rc = 1;
    fill(x, N * C, -2, 3);
    fill(w, C, 0.5, 1.5);
    fill(b, C, -0.5, 0.5);
    fill(dout, N * C, -1, 1);
    fill(dx, N * C, -1, 1);
    fill(dw, C, -1, 1);
    fill(db, C, -1, 1);
    memcpy(rdx, dx, N * C * sizeof(float));
    memcpy(rdw, dw, C * sizeof(float));
    memcpy(rdb, db, C * sizeof(float));
    gpt_layernorm_fwd(ref, rmean, rrstd, x, w, b, N, C);
    for (size_t n = N; n-- > 0;)
        gptm_layernorm_fwd_row(n, out, mean, rstd, x, w, b, C);
    CHECK(rel_diff(out, ref, N * C) < ROW_TOL);
    CHECK(rel_diff(mean, rmean, N) < ROW_TOL);
    CHECK(rel_diff(rstd, rrstd, N) < ROW_TOL);
    gpt_layernorm_bwd(rdx, rdw, rdb, dout, x, w, mean, rstd, N, C);
    for (size_t n = N; n-- > 0;)
        gptm_layernorm_bwd_row(n, dx, dout, x, w, mean, rstd, C);
    for (size_t c = C; c-- > 0;)
        gptm_layernorm_bwd_col(c, dw, db, dout, x, mean, rstd, N, C);
    CHECK(rel_diff(dx, rdx, N * C) < ROW_TOL);
    CHECK(rel_diff(dw, rdw, C) < ROW_TOL);
    CHECK(rel_diff(db, rdb, C) < ROW_TOL);
    PASSED();
    rc = 0;
error:
    if (rc) FAILED();
    free(x), free(w), free(b), free(out), free(ref), free(mean), free(rstd), free(rmean);
    free(rrstd), free(dout), free(dx), free(rdx), free(dw), free(db), free(rdw), free(rdb);
    return rc;
}

/* the c_fc shape: C inputs, 4C... here OC = 7 (pairwise different from N and C) */
#define OC 7

static int test_linear(void) {
    TESTING("linear layer: forward, dgrad, wgrad (+=), bias add and bias grad");
    float *inp = falloc(N * C), *W = falloc(OC * C), *bias = falloc(OC), *out = falloc(N * OC);
    float *ref = falloc(N * OC), *dout = falloc(N * OC), *dinp = falloc(N * C),
          *rdinp = falloc(N * C);
    float *dW = falloc(OC * C), *rdW = falloc(OC * C), *db = falloc(OC), *rdb = falloc(OC);
    int rc = 1;
    fill(inp, N * C, -1, 1);
    fill(W, OC * C, -1, 1);
    fill(bias, OC, -1, 1);
    fill(dout, N * OC, -1, 1);
    fill(out, N * OC, 5, 6); /* beta 0: overwritten */
    fill(dinp, N * C, 5, 6); /* likewise */
    fill(dW, OC * C, -1, 1); /* beta 1: added into */
    fill(db, OC, -1, 1);
    memcpy(rdW, dW, OC * C * sizeof(float));
    memcpy(rdb, db, OC * sizeof(float));
    gpt_matmul_fwd(ref, inp, W, bias, N, C, OC);
    gpt_gemm_t g = gpt_gemm_linear(GPT_GEMM_LINEAR_FWD, N, C, OC);
    run_gemm(&g, W, inp, out);
    for (size_t i = N * OC; i-- > 0;)
        gptm_bias_add(i, out, bias, OC);
    CHECK(rel_diff(out, ref, N * OC) < 1e-6);
    gpt_matmul_bwd(rdinp, rdW, rdb, dout, inp, W, N, C, OC); /* rdinp starts at 0 */
    g = gpt_gemm_linear(GPT_GEMM_LINEAR_DGRAD, N, C, OC);
    run_gemm(&g, W, dout, dinp);
    g = gpt_gemm_linear(GPT_GEMM_LINEAR_WGRAD, N, C, OC);
    run_gemm(&g, inp, dout, dW);
    for (size_t j = OC; j-- > 0;)
        gptm_bias_grad_col(j, db, dout, N, OC);
    CHECK(rel_diff(dinp, rdinp, N * C) < 1e-6);
    CHECK(rel_diff(dW, rdW, OC * C) < 1e-6);
    CHECK(memcmp(db, rdb, OC * sizeof(float)) == 0);
    PASSED();
    rc = 0;
error:
    if (rc) FAILED();
    free(inp), free(W), free(bias), free(out), free(ref), free(dout), free(dinp), free(rdinp);
    free(dW), free(rdW), free(db), free(rdb);
    return rc;
}

static int test_attention(void) {
    TESTING("causal attention from strided-batched products and softmax rows");
    size_t natt = (size_t)B * NH * T * T;
    float scale = 1.0f / sqrtf((float)(C / NH));
    float *qkv = falloc(N * 3 * C), *y = falloc(N * C), *ry = falloc(N * C);
    float *att = falloc(natt), *ratt = falloc(natt), *datt = falloc(natt);
    float *dy = falloc(N * C), *dqkv = falloc(N * 3 * C), *rdqkv = falloc(N * 3 * C);
    float *scratch = falloc((size_t)T * T); /* gpt_attention_bwd: [T x T] */
    int rc = 1;
    fill(qkv, N * 3 * C, -2, 2);
    fill(dy, N * C, -1, 1);
    fill(att, natt, 7, 8); /* every element written: the masked ones too */
    fill(datt, natt, 7, 8);
    fill(y, N * C, 7, 8);
    fill(dqkv, N * 3 * C, 7, 8);
    gpt_attention_fwd(ry, ratt, qkv, B, T, C, NH);
    gpt_gemm_t g = gpt_gemm_attention(GPT_GEMM_ATT_SCORES, B, T, C, NH);
    run_gemm(&g, qkv, qkv, att);
    for (size_t r = (size_t)B * NH * T; r-- > 0;)
        gptm_softmax_causal_row(r, att, T, scale);
    g = gpt_gemm_attention(GPT_GEMM_ATT_OUT, B, T, C, NH);
    run_gemm(&g, qkv, att, y);
    CHECK(rel_diff(att, ratt, natt) < 1e-5);
    for (size_t i = 0; i < natt; i++) /* above the diagonal: exactly 0 */
        if ((i % T) > ((i / T) % T)) CHECK(att[i] == 0.0f);
    CHECK(rel_diff(y, ry, N * C) < 1e-5);
    /* backward, from the CPU's own weights (so only the backward differs) */
    memcpy(att, ratt, natt * sizeof(float));
    gpt_attention_bwd(rdqkv, dy, qkv, ratt, B, T, C, NH, scratch); /* rdqkv starts at 0 */
    g = gpt_gemm_attention(GPT_GEMM_ATT_DA, B, T, C, NH);
    run_gemm(&g, qkv, dy, datt);
    g = gpt_gemm_attention(GPT_GEMM_ATT_DV, B, T, C, NH);
    run_gemm(&g, dy, att, dqkv);
    for (size_t r = (size_t)B * NH * T; r-- > 0;)
        gptm_softmax_causal_bwd_row(r, datt, att, T, scale);
    g = gpt_gemm_attention(GPT_GEMM_ATT_DQ, B, T, C, NH);
    run_gemm(&g, qkv, datt, dqkv);
    g = gpt_gemm_attention(GPT_GEMM_ATT_DK, B, T, C, NH);
    run_gemm(&g, qkv, datt, dqkv);
    CHECK(rel_diff(dqkv, rdqkv, N * 3 * C) < 1e-5);
    for (int part = 0; part < 3; part++) { /* q, k and v each: not hidden by the others */
        double d = 0.0, m = 1e-30;
        for (int n = 0; n < N; n++)
            for (int c = part * C; c < (part + 1) * C; c++) {
                size_t k = (size_t)n * 3 * C + c;
                if (fabs((double)dqkv[k] - rdqkv[k]) > d) d = fabs((double)dqkv[k] - rdqkv[k]);
                if (fabs((double)rdqkv[k]) > m) m = fabs((double)rdqkv[k]);
            }
        CHECK(m > 1e-3 && d / m < 1e-5);
    }
    PASSED();
    rc = 0;
error:
    if (rc) FAILED();
    free(qkv), free(y), free(ry), free(att), free(ratt), free(datt), free(dy), free(dqkv);
    free(rdqkv), free(scratch);
    return rc;
}

static int test_crossentropy_gelu(void) {
    TESTING("cross-entropy rows (loss, probabilities, dlogits) and GELU");
    float *z = falloc(N * V), *p = falloc(N * V), *rp = falloc(N * V), *d = falloc(N * V);
    float *rd = falloc(N * V), *x = falloc(N * C), *gy = falloc(N * C), *dx = falloc(N * C);
    float *rgy = falloc(N * C), *rdx = falloc(N * C), *dy = falloc(N * C);
    double row_loss[N], loss = 0.0;
    int rc = 1;
    fill(z, N * V, -4, 4);
    fill(d, N * V, 5, 6); /* overwritten */
    double rloss = gpt_crossentropy_fwd(rp, z, tgt, N, V);
    gpt_crossentropy_bwd(rd, rp, tgt, N, V, 1.0f / (float)N); /* rd starts at 0 */
    for (size_t n = N; n-- > 0;)
        gptm_crossentropy_row(n, p, d, row_loss, z, tgt, V, 1.0f / (float)N);
    for (int n = 0; n < N; n++) /* the device's mean: one thread, rows in order */
        loss += row_loss[n];
    loss /= N;
    CHECK(fabs(loss - rloss) <= ROW_TOL * fabs(rloss));
    CHECK(rel_diff(p, rp, N * V) < ROW_TOL);
    CHECK(rel_diff(d, rd, N * V) < ROW_TOL);
    fill(x, N * C, -6, 6);
    fill(dy, N * C, -1, 1);
    gpt_gelu_fwd(rgy, x, N * C);
    gpt_gelu_bwd(rdx, x, dy, N * C); /* rdx starts at 0 */
    for (size_t i = N * C; i-- > 0;) {
        gy[i] = gptm_gelu(x[i]);
        dx[i] = gptm_gelu_grad(x[i]) * dy[i];
    }
    /* gpt_model.c's GELU runs as an AVX2+FMA clone where the CPU has it:
     * contracted into FMAs, it rounds differently from these bodies */
    CHECK(rel_diff(gy, rgy, N * C) < ROW_TOL);
    CHECK(rel_diff(dx, rdx, N * C) < ROW_TOL);
    /* and the tanh itself against libm's, as gpt_model.c's comment states */
    for (float u = -12.0f; u <= 12.0f; u += 0.01f)
        CHECK(fabsf(gptm_tanh(u) - tanhf(u)) < 2e-7f);
    PASSED();
    rc = 0;
error:
    if (rc) FAILED();
    free(z), free(p), free(rp), free(d), free(rd), free(x), free(gy), free(dx), free(rgy);
    free(rdx), free(dy);
    return rc;
}

int main(void) {
    acx_test_watchdog(60);
    /* tokens from a small alphabet (repeats: the scatter-add sums rows) */
    for (int n = 0; n < N; n++) {
        tok[n] = (int32_t)(urand() * 5) * 2; /* 0, 2, .., 8: < V, some ids unused */
        tgt[n] = (int32_t)(urand() * V);
    }
    int failed = 0;
    failed += test_embedding();
    failed += test_layernorm();
    failed += test_linear();
    failed += test_attention();
    failed += test_crossentropy_gelu();
    return failed ? 1 : 0;
}

/*
 * examples/gpt/gpt_model.c — the GPT's kernels and per-unit passes (see
 * gpt_model.h). Single-threaded: the matrix products, the attention's
 * included, are CBLAS sgemm; the element-wise loops are written to
 * vectorize (a polynomial exp, row sums in eight float lanes: LayerNorm
 * statistics, softmax normalizers), and the mean loss accumulates in
 * double. At these row lengths (C, T, V in the hundreds) the float sums
 * round at ~1e-7 relative: tests/gpt.test's losses agree with PyTorch's
 * within 2e-7 in fp32.
 */
#include "gpt_model.h"
#include "gpt_math.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The element-wise loops that dominate outside the products (GELU) are
 * also compiled for x86-64-v3 (AVX2, FMA), chosen at load time by the CPU
 * (glibc's ifunc): the build's baseline is SSE2, and the GELU ran 2.5-3.5x
 * faster with 8-wide vectors and FMA. FMA contracts a*b + c, so results
 * differ from the SSE2 build in the last bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define GPT_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GPT_CLONES
#endif

/* ---- vectorizable exp and sums ---- */

/* e^-m for m >= 0 (or NaN), m clamped to 87 (e^-87 = 1.6e-38, where a
 * softmax term no longer counts beside the row's maximum's 1): the clamp
 * on the bits, as m >= 0 orders like them (a float compare is a branch to
 * the vectorizer under the default -ftrapping-math). */
static inline float exp_neg(float m) {
    int32_t mbits;
    memcpy(&mbits, &m, sizeof m);
    mbits = mbits < 0x42ae0000 ? mbits : 0x42ae0000; /* 87.0f */
    memcpy(&m, &mbits, sizeof m);
    return gptm_exp_poly(-m);
}

/* Sum of a[i] * b[i] in eight float lanes (a fixed-width inner loop the
 * vectorizer takes; a plain reduction it does not reorder without
 * -ffast-math). */
static inline float dot_lanes(const float *restrict a, const float *restrict b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static inline float sum_lanes(const float *restrict a, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++)
        s += a[i];
    return s;
}

/* ---- embedding ---- */

void gpt_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T,
                   int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *e = wte + (size_t)tok[b * T + t] * C, *p = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++)
                o[i] = e[i] + p[i];
        }
}

void gpt_embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T,
                   int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *de = dwte + (size_t)tok[b * T + t] * C, *dp = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                de[i] += d[i];
                dp[i] += d[i];
            }
        }
}

/* ---- layernorm ---- */

/* The row sums (mean, variance, the backward's two means) in eight float
 * lanes (sum_lanes, dot_lanes): vectorized, where double accumulators
 * kept them scalar; over C = 128 terms the float sums round at ~1e-7
 * relative. */
GPT_CLONES void gpt_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C;
        float *restrict o = out + (size_t)n * C;
        float m = sum_lanes(x, C) / (float)C;
        float acc[8] = {0}, v;
        int i = 0;
        for (; i + 8 <= C; i += 8)
            for (int j = 0; j < 8; j++)
                acc[j] += (x[i + j] - m) * (x[i + j] - m);
        v = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; i < C; i++)
            v += (x[i] - m) * (x[i] - m);
        float r = (float)(1.0 / sqrt((double)v / C + GPT_LN_EPS));
        for (i = 0; i < C; i++)
            o[i] = (x[i] - m) * r * w[i] + b[i];
        mean[n] = m;
        rstd[n] = r;
    }
}

/* y = xhat*w + b, xhat = (x - mean)*rstd. With g = dout*w:
 * dx = rstd * (g - mean(g) - xhat * mean(g*xhat)). */
GPT_CLONES void gpt_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, const float *mean,
                                  const float *rstd, int N, int C) {
    float *restrict gw = dw, *restrict gb = db; /* distinct from dinp: no alias checks */
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C, *restrict d = dout + (size_t)n * C;
        float *restrict dx = dinp + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        float ag[8] = {0}, agx[8] = {0};
        int i = 0;
        for (; i + 8 <= C; i += 8)
            for (int j = 0; j < 8; j++) {
                float xhat = (x[i + j] - m) * r, g = d[i + j] * w[i + j];
                ag[j] += g;
                agx[j] += g * xhat;
            }
        float sg = ((ag[0] + ag[4]) + (ag[1] + ag[5])) + ((ag[2] + ag[6]) + (ag[3] + ag[7]));
        float sgx =
            ((agx[0] + agx[4]) + (agx[1] + agx[5])) + ((agx[2] + agx[6]) + (agx[3] + agx[7]));
        for (; i < C; i++) {
            float xhat = (x[i] - m) * r, g = d[i] * w[i];
            sg += g;
            sgx += g * xhat;
        }
        float mg = sg / (float)C, mgx = sgx / (float)C;
        for (i = 0; i < C; i++) {
            float xhat = (x[i] - m) * r, g = d[i] * w[i];
            dx[i] += r * (g - mg - xhat * mgx);
            gw[i] += d[i] * xhat;
            gb[i] += d[i];
        }
    }
}

/* ---- matmul ---- */

/* The bias is written first and the product added to it (beta 1): one
 * pass over out before the sgemm instead of sgemm's beta 0 pass and a
 * bias pass after it. */
void gpt_matmul_fwd(float *out, const float *inp, const float *W, const float *bias, int N, int C,
                    int OC) {
    if (bias == NULL)
        memset(out, 0, (size_t)N * OC * sizeof(float));
    else
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, W, C, 1.0f, out,
                OC);
}

/* beta 1: dinp += dout W; beta 0: dinp = dout W. dW and dbias always add
 * (they accumulate over the micro-steps of a step, and the tied wte's over
 * its two uses). */
static void matmul_bwd(float *dinp, float *dW, float *dbias, const float *dout, const float *inp,
                       const float *W, int N, int C, int OC, float beta) {
    /* dinp [N x C] (+)= dout [N x OC] W [OC x C]; dW [OC x C] += dout^T inp */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, W, C, beta,
                dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dW,
                C);
    if (dbias == NULL) return;
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * OC;
        for (int j = 0; j < OC; j++)
            dbias[j] += d[j];
    }
}

void gpt_matmul_bwd(float *dinp, float *dW, float *dbias, const float *dout, const float *inp,
                    const float *W, int N, int C, int OC) {
    matmul_bwd(dinp, dW, dbias, dout, inp, W, N, C, OC, 1.0f);
}

void gpt_matmul_bwd_set(float *dinp, float *dW, float *dbias, const float *dout, const float *inp,
                        const float *W, int N, int C, int OC) {
    matmul_bwd(dinp, dW, dbias, dout, inp, W, N, C, OC, 0.0f);
}

/* ---- causal self-attention ---- */

/* The products of one (sequence, head) are sgemms on the packed qkv rows:
 * Q, K, V are T x hs matrices with leading dimension 3C (column offsets 0,
 * C, 2C, plus h*hs), out and dout T x hs with leading dimension C. Causal:
 * query t reads keys 0..t, so the products take the rows (or columns) in
 * blocks of ATT_BLOCK and block [r0, r1) multiplies only keys 0..r1-1: the
 * masked upper triangle costs the diagonal blocks' halves, not half the
 * matrix (T 64: 5/8 of the full products with 16, against 1/2 exact). */
#define ATT_BLOCK 16

static inline int imin(int a, int b) { return a < b ? a : b; }

/* p[0..t] = softmax(p[0..t]) (p holds scaled scores), p[t+1..T-1] = 0. */
static void softmax_causal_row(float *restrict p, int t, int T) {
    int n = t + 1;
    float mx = p[0];
    for (int s = 1; s < n; s++)
        mx = p[s] > mx ? p[s] : mx;
    for (int s = 0; s < n; s++)
        p[s] = exp_neg(mx - p[s]);
    float inv = 1.0f / sum_lanes(p, n);
    for (int s = 0; s < n; s++)
        p[s] *= inv;
    for (int s = n; s < T; s++)
        p[s] = 0.0f;
}

void gpt_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    /* every product adds (beta 1) into zeroed memory: OpenBLAS's beta 0
     * pass over a strided block cost more than the products here */
    memset(out, 0, (size_t)B * T * C * sizeof(float));
    memset(att, 0, (size_t)B * NH * T * T * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            float *o = out + (size_t)b * T * C + h * hs;
            /* a[t, s] = scale q_t . k_s, s < the block's end */
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = imin(T, r0 + ATT_BLOCK);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale,
                            q + (size_t)r0 * C3, C3, k, C3, 1.0f, a + (size_t)r0 * T, T);
            }
            for (int t = 0; t < T; t++)
                softmax_causal_row(a + (size_t)t * T, t, T);
            /* o_t = sum_{s <= t} a[t, s] v_s */
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = imin(T, r0 + ATT_BLOCK);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f,
                            a + (size_t)r0 * T, T, v, C3, 1.0f, o + (size_t)r0 * C, C);
            }
        }
}

/* Per (sequence, head), A the softmax weights, dO the output's gradient:
 * dV = A^T dO; dA = dO V^T; dS[t, s] = scale A[t, s] (dA[t, s] - sum_j
 * A[t, j] dA[t, j]) (the softmax's and the scale's backward, in place in
 * scratch, 0 above the diagonal); dQ = dS K; dK = dS^T Q. The products add
 * (beta 1) into dqkv, and with set it is zeroed first: one memset, where
 * OpenBLAS's beta 0 pass over the strided T x hs blocks cost more than the
 * products. Key s is read by queries s..T-1, so the transposed products
 * (dV, dK) take columns in blocks [c0, c1) and rows c0..T-1. */
static void attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                          int T, int C, int NH, float *scratch, int set) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs), beta = 1.0f;
    float *ds = scratch;
    if (set) memset(dqkv, 0, (size_t)B * T * C3 * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t off = (size_t)b * T * C3 + h * hs;
            const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            const float *d = dout + (size_t)b * T * C + h * hs;
            for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
                int c1 = imin(T, c0 + ATT_BLOCK);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, 1.0f,
                            a + (size_t)c0 * T + c0, T, d + (size_t)c0 * C, C, beta,
                            dv + (size_t)c0 * C3, C3);
            }
            memset(ds, 0, (size_t)T * T * sizeof(float));
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = imin(T, r0 + ATT_BLOCK);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1.0f,
                            d + (size_t)r0 * C, C, v, C3, 1.0f, ds + (size_t)r0 * T, T);
            }
            for (int t = 0; t < T; t++) {
                const float *restrict at = a + (size_t)t * T;
                float *restrict dst = ds + (size_t)t * T;
                int n = t + 1;
                float dot = dot_lanes(at, dst, n);
                for (int s = 0; s < n; s++)
                    dst[s] = scale * at[s] * (dst[s] - dot);
                for (int s = n; s < T; s++)
                    dst[s] = 0.0f;
            }
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = imin(T, r0 + ATT_BLOCK);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f,
                            ds + (size_t)r0 * T, T, k, C3, beta, dq + (size_t)r0 * C3, C3);
            }
            for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
                int c1 = imin(T, c0 + ATT_BLOCK);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, 1.0f,
                            ds + (size_t)c0 * T + c0, T, q + (size_t)c0 * C3, C3, beta,
                            dk + (size_t)c0 * C3, C3);
            }
        }
}

void gpt_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                       int T, int C, int NH, float *scratch) {
    attention_bwd(dqkv, dout, qkv, att, B, T, C, NH, scratch, 0);
}

void gpt_attention_bwd_set(float *dqkv, const float *dout, const float *qkv, const float *att,
                           int B, int T, int C, int NH, float *scratch) {
    attention_bwd(dqkv, dout, qkv, att, B, T, C, NH, scratch, 1);
}

/* ---- gelu (tanh approximation) ---- */

/* The element formulas are gptm_gelu and gptm_gelu_grad (gpt_math.h, which
 * the device kernels share), with a branch-free tanh so that these loops
 * vectorize. The loops run over blocks of GELU_BLOCK elements with restrict pointers:
 * a constant trip count without aliasing is what -O2's vectorizer (the
 * "very cheap" cost model: no runtime checks, no epilogue) accepts. */
#define GELU_BLOCK 16

static inline void gelu_fwd_block(float *restrict out, const float *restrict inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        out[i] = gptm_gelu(inp[i]);
    }
}

/* acc 1: dinp += gelu'(inp) dout; acc 0: dinp = gelu'(inp) dout (a
 * constant at each call site: the branch is hoisted). */
static inline void gelu_bwd_block(float *restrict dinp, const float *restrict inp,
                                  const float *restrict dout, size_t n, int acc) {
    for (size_t i = 0; i < n; i++) {
        float g = gptm_gelu_grad(inp[i]);
        dinp[i] = acc ? dinp[i] + g * dout[i] : g * dout[i];
    }
}

GPT_CLONES void gpt_gelu_fwd(float *out, const float *inp, size_t n) {
    size_t i = 0;
    for (; i + GELU_BLOCK <= n; i += GELU_BLOCK)
        gelu_fwd_block(out + i, inp + i, GELU_BLOCK);
    gelu_fwd_block(out + i, inp + i, n - i);
}

GPT_CLONES void gpt_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t i = 0;
    for (; i + GELU_BLOCK <= n; i += GELU_BLOCK)
        gelu_bwd_block(dinp + i, inp + i, dout + i, GELU_BLOCK, 1);
    gelu_bwd_block(dinp + i, inp + i, dout + i, n - i, 1);
}

GPT_CLONES void gpt_gelu_bwd_set(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t i = 0;
    for (; i + GELU_BLOCK <= n; i += GELU_BLOCK)
        gelu_bwd_block(dinp + i, inp + i, dout + i, GELU_BLOCK, 0);
    gelu_bwd_block(dinp + i, inp + i, dout + i, n - i, 0);
}

/* ---- residual ---- */

void gpt_residual_fwd(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void gpt_residual_bwd(float *da, float *db, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* ---- softmax cross-entropy ---- */

/* exp by exp_neg and the normalizer in float lanes: vectorized (also in
 * place, probs == logits: each element is read before it is written);
 * the loss itself accumulates in double. A NaN logit, which the clamped
 * exp would hide, makes its row's probabilities and the loss NaN. */
GPT_CLONES double gpt_crossentropy_fwd(float *probs, const float *logits, const int32_t *targets,
                                       int N, int V) {
    double loss = 0.0;
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float mx = -INFINITY;
        int nan = 0;
        for (int j = 0; j < V; j++) {
            nan |= z[j] != z[j];
            mx = z[j] > mx ? z[j] : mx;
        }
        /* -log p[target] = log(sum) - (z[target] - mx): exact also when p
         * underflows; read before p (which may alias z) is written */
        double zt = (double)z[targets[n]] - mx;
        if (nan)
            for (int j = 0; j < V; j++)
                p[j] = NAN;
        else
            for (int j = 0; j < V; j++)
                p[j] = exp_neg(mx - z[j]);
        float sum = sum_lanes(p, V), inv = 1.0f / sum;
        loss += log((double)sum) - zt;
        for (int j = 0; j < V; j++)
            p[j] *= inv;
    }
    return loss / N;
}

/* acc 1: dlogits += scale (probs - onehot); acc 0: dlogits = ... */
static void crossentropy_bwd(float *dlogits, const float *probs, const int32_t *targets, int N,
                             int V, float scale, int acc) {
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        if (acc)
            for (int j = 0; j < V; j++)
                d[j] += scale * p[j];
        else
            for (int j = 0; j < V; j++)
                d[j] = scale * p[j];
        d[targets[n]] -= scale;
    }
}

void gpt_crossentropy_bwd(float *dlogits, const float *probs, const int32_t *targets, int N, int V,
                          float scale) {
    crossentropy_bwd(dlogits, probs, targets, N, V, scale, 1);
}

void gpt_crossentropy_bwd_set(float *dlogits, const float *probs, const int32_t *targets, int N,
                              int V, float scale) {
    crossentropy_bwd(dlogits, probs, targets, N, V, scale, 0);
}

/* ---- the model ---- */

static const char *const block_names[GPT_BLOCK_TENSORS] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

const char *gpt_block_tensor_name(int i) {
    return i >= 0 && i < GPT_BLOCK_TENSORS ? block_names[i] : NULL;
}

int gpt_block_tensor_shape(const gpt_config_t *cfg, int i, int64_t shape[2]) {
    int64_t C = cfg->d_model;
    switch (i) {
    case GPT_QKV_W: shape[0] = 3 * C, shape[1] = C; return 2;
    case GPT_QKV_B: shape[0] = 3 * C; return 1;
    case GPT_ATTPROJ_W: shape[0] = C, shape[1] = C; return 2;
    case GPT_FC_W: shape[0] = 4 * C, shape[1] = C; return 2;
    case GPT_FC_B: shape[0] = 4 * C; return 1;
    case GPT_FCPROJ_W: shape[0] = C, shape[1] = 4 * C; return 2;
    default: shape[0] = C; return 1; /* layernorm weights and biases, projection biases */
    }
}

int64_t gpt_num_params(const gpt_config_t *cfg) {
    int64_t n = (int64_t)cfg->vocab * cfg->d_model + (int64_t)cfg->seq_len * cfg->d_model;
    for (int i = 0; i < GPT_BLOCK_TENSORS; i++) {
        int64_t s[2];
        int nd = gpt_block_tensor_shape(cfg, i, s);
        n += (int64_t)cfg->layers * (nd == 2 ? s[0] * s[1] : s[0]);
    }
    return n + 2 * (int64_t)cfg->d_model;
}

/* n zeroed floats; counted into ws->bytes (the program's activation memory,
 * which acx-gpt --memory-report prints beside acx's model state) */
static float *alloc_f(gpt_workspace_t *ws, size_t n, int *bad) {
    float *p = calloc(n > 0 ? n : 1, sizeof(float));
    if (p == NULL) *bad = 1;
    ws->bytes += (n > 0 ? n : 1) * sizeof(float);
    return p;
}

int gpt_workspace_init(gpt_workspace_t *ws, const gpt_config_t *cfg, int max_B) {
    memset(ws, 0, sizeof *ws);
    ws->cfg = *cfg;
    ws->max_B = max_B;
    size_t T = (size_t)cfg->seq_len, C = (size_t)cfg->d_model, N = (size_t)max_B * T;
    size_t NH = (size_t)cfg->heads, V = (size_t)cfg->vocab;
    int bad = 0;
    ws->blocks = calloc((size_t)cfg->layers, sizeof *ws->blocks);
    if (ws->blocks == NULL) return -1;
    ws->encoded = alloc_f(ws, N * C, &bad);
    for (int l = 0; l < cfg->layers; l++) {
        gpt_block_acts_t *a = &ws->blocks[l];
        a->ln1 = alloc_f(ws, N * C, &bad);
        a->ln1_mean = alloc_f(ws, N, &bad);
        a->ln1_rstd = alloc_f(ws, N, &bad);
        a->qkv = alloc_f(ws, N * 3 * C, &bad);
        a->att = alloc_f(ws, (size_t)max_B * NH * T * T, &bad);
        a->atty = alloc_f(ws, N * C, &bad);
        a->attproj = alloc_f(ws, N * C, &bad);
        a->res2 = alloc_f(ws, N * C, &bad);
        a->ln2 = alloc_f(ws, N * C, &bad);
        a->ln2_mean = alloc_f(ws, N, &bad);
        a->ln2_rstd = alloc_f(ws, N, &bad);
        a->fch = alloc_f(ws, N * 4 * C, &bad);
        a->fch_gelu = alloc_f(ws, N * 4 * C, &bad);
        a->fcproj = alloc_f(ws, N * C, &bad);
        a->res3 = alloc_f(ws, N * C, &bad);
    }
    ws->lnf = alloc_f(ws, N * C, &bad);
    ws->lnf_mean = alloc_f(ws, N, &bad);
    ws->lnf_rstd = alloc_f(ws, N, &bad);
    ws->probs = alloc_f(ws, N * V, &bad);
    ws->dlogits = alloc_f(ws, N * V, &bad);
    ws->dres = alloc_f(ws, N * C, &bad);
    ws->dres_in = alloc_f(ws, N * C, &bad);
    ws->dres_mid = alloc_f(ws, N * C, &bad);
    ws->dln = alloc_f(ws, N * C, &bad);
    ws->datty = alloc_f(ws, N * C, &bad);
    ws->dqkv = alloc_f(ws, N * 3 * C, &bad);
    ws->dfch = alloc_f(ws, N * 4 * C, &bad);
    ws->dfch_gelu = alloc_f(ws, N * 4 * C, &bad);
    ws->scratch = alloc_f(ws, T * T, &bad);
    if (bad) {
        gpt_workspace_free(ws);
        return -1;
    }
    return 0;
}

void gpt_workspace_free(gpt_workspace_t *ws) {
    if (ws->blocks != NULL)
        for (int l = 0; l < ws->cfg.layers; l++) {
            gpt_block_acts_t *a = &ws->blocks[l];
            float *all[] = {a->ln1,      a->ln1_mean, a->ln1_rstd, a->qkv,    a->att,
                            a->atty,     a->attproj,  a->res2,     a->ln2,    a->ln2_mean,
                            a->ln2_rstd, a->fch,      a->fch_gelu, a->fcproj, a->res3};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                free(all[i]);
        }
    free(ws->blocks);
    float *rest[] = {ws->encoded, ws->lnf,  ws->lnf_mean, ws->lnf_rstd,  ws->probs,
                     ws->dlogits, ws->dres, ws->dres_in,  ws->dres_mid,  ws->dln,
                     ws->datty,   ws->dqkv, ws->dfch,     ws->dfch_gelu, ws->scratch};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        free(rest[i]);
    memset(ws, 0, sizeof *ws);
}

void gpt_forward_embed(gpt_workspace_t *ws, const float *wte, const float *wpe, const int32_t *tok,
                       int B, int T) {
    gpt_embed_fwd(ws->encoded, tok, wte, wpe, B, T, ws->cfg.d_model);
}

void gpt_forward_block(gpt_workspace_t *ws, int l, const gpt_block_params_t *p, int B, int T) {
    int C = ws->cfg.d_model, N = B * T;
    gpt_block_acts_t *a = &ws->blocks[l];
    const float *x = l == 0 ? ws->encoded : ws->blocks[l - 1].res3;
    const float *const *w = p->t;
    gpt_layernorm_fwd(a->ln1, a->ln1_mean, a->ln1_rstd, x, w[GPT_LN1_W], w[GPT_LN1_B], N, C);
    gpt_matmul_fwd(a->qkv, a->ln1, w[GPT_QKV_W], w[GPT_QKV_B], N, C, 3 * C);
    gpt_attention_fwd(a->atty, a->att, a->qkv, B, T, C, ws->cfg.heads);
    gpt_matmul_fwd(a->attproj, a->atty, w[GPT_ATTPROJ_W], w[GPT_ATTPROJ_B], N, C, C);
    gpt_residual_fwd(a->res2, x, a->attproj, (size_t)N * C);
    gpt_layernorm_fwd(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w[GPT_LN2_W], w[GPT_LN2_B], N, C);
    gpt_matmul_fwd(a->fch, a->ln2, w[GPT_FC_W], w[GPT_FC_B], N, C, 4 * C);
    gpt_gelu_fwd(a->fch_gelu, a->fch, (size_t)N * 4 * C);
    gpt_matmul_fwd(a->fcproj, a->fch_gelu, w[GPT_FCPROJ_W], w[GPT_FCPROJ_B], N, 4 * C, C);
    gpt_residual_fwd(a->res3, a->res2, a->fcproj, (size_t)N * C);
}

void gpt_forward_lnf(gpt_workspace_t *ws, const float *lnf_w, const float *lnf_b, int B, int T) {
    int C = ws->cfg.d_model, N = B * T;
    const float *x = ws->cfg.layers > 0 ? ws->blocks[ws->cfg.layers - 1].res3 : ws->encoded;
    gpt_layernorm_fwd(ws->lnf, ws->lnf_mean, ws->lnf_rstd, x, lnf_w, lnf_b, N, C);
}

double gpt_forward_head(gpt_workspace_t *ws, const float *wte, const int32_t *targets, int B,
                        int T) {
    int C = ws->cfg.d_model, V = ws->cfg.vocab, N = B * T;
    gpt_matmul_fwd(ws->probs, ws->lnf, wte, NULL, N, C, V); /* the head: wte tied */
    double loss = gpt_crossentropy_fwd(ws->probs, ws->probs, targets, N, V);
    gpt_crossentropy_bwd_set(ws->dlogits, ws->probs, targets, N, V, 1.0f / (float)N);
    return loss;
}

double gpt_forward_final(gpt_workspace_t *ws, const float *lnf_w, const float *lnf_b,
                         const float *wte, const int32_t *targets, int B, int T) {
    gpt_forward_lnf(ws, lnf_w, lnf_b, B, T);
    return gpt_forward_head(ws, wte, targets, B, T);
}

void gpt_backward_head(gpt_workspace_t *ws, const float *wte, float *dwte, int B, int T) {
    int C = ws->cfg.d_model, V = ws->cfg.vocab, N = B * T;
    gpt_matmul_bwd_set(ws->dln, dwte, NULL, ws->dlogits, ws->lnf, wte, N, C, V);
}

void gpt_backward_lnf(gpt_workspace_t *ws, const float *lnf_w, float *dlnf_w, float *dlnf_b, int B,
                      int T) {
    int C = ws->cfg.d_model, N = B * T;
    const float *x = ws->cfg.layers > 0 ? ws->blocks[ws->cfg.layers - 1].res3 : ws->encoded;
    memset(ws->dres, 0, (size_t)N * C * sizeof(float));
    gpt_layernorm_bwd(ws->dres, dlnf_w, dlnf_b, ws->dln, x, lnf_w, ws->lnf_mean, ws->lnf_rstd, N,
                      C);
}

void gpt_backward_block(gpt_workspace_t *ws, int l, const gpt_block_params_t *p,
                        gpt_block_tensors_t *g, int B, int T) {
    int C = ws->cfg.d_model, N = B * T;
    size_t nc = (size_t)N * C, bytes = nc * sizeof(float);
    gpt_block_acts_t *a = &ws->blocks[l];
    const float *x = l == 0 ? ws->encoded : ws->blocks[l - 1].res3;
    const float *const *w = p->t;
    float *const *dw = g->t;
    /* res3 = res2 + fcproj: both inputs' gradients are dres, so fcproj's is
     * dres itself and res2's starts as a copy (ln_2's backward adds to it) */
    float *dfcproj = ws->dres;
    memcpy(ws->dres_mid, ws->dres, bytes);
    /* the activation gradients below are overwritten (the _set kernels),
     * not zeroed and added into: each holds one term */
    gpt_matmul_bwd_set(ws->dfch_gelu, dw[GPT_FCPROJ_W], dw[GPT_FCPROJ_B], dfcproj, a->fch_gelu,
                       w[GPT_FCPROJ_W], N, 4 * C, C);
    gpt_gelu_bwd_set(ws->dfch, a->fch, ws->dfch_gelu, 4 * nc);
    gpt_matmul_bwd_set(ws->dln, dw[GPT_FC_W], dw[GPT_FC_B], ws->dfch, a->ln2, w[GPT_FC_W], N, C,
                       4 * C);
    gpt_layernorm_bwd(ws->dres_mid, dw[GPT_LN2_W], dw[GPT_LN2_B], ws->dln, a->res2, w[GPT_LN2_W],
                      a->ln2_mean, a->ln2_rstd, N, C);
    /* res2 = x + attproj: likewise, attproj's gradient is dres_mid, x's a copy */
    float *dattproj = ws->dres_mid;
    memcpy(ws->dres_in, ws->dres_mid, bytes);
    gpt_matmul_bwd_set(ws->datty, dw[GPT_ATTPROJ_W], dw[GPT_ATTPROJ_B], dattproj, a->atty,
                       w[GPT_ATTPROJ_W], N, C, C);
    gpt_attention_bwd_set(ws->dqkv, ws->datty, a->qkv, a->att, B, T, C, ws->cfg.heads, ws->scratch);
    gpt_matmul_bwd_set(ws->dln, dw[GPT_QKV_W], dw[GPT_QKV_B], ws->dqkv, a->ln1, w[GPT_QKV_W], N, C,
                       3 * C);
    gpt_layernorm_bwd(ws->dres_in, dw[GPT_LN1_W], dw[GPT_LN1_B], ws->dln, x, w[GPT_LN1_W],
                      a->ln1_mean, a->ln1_rstd, N, C);
    /* the input's gradient becomes the next (lower) block's output gradient */
    float *t = ws->dres;
    ws->dres = ws->dres_in;
    ws->dres_in = t;
}

void gpt_backward_embed(gpt_workspace_t *ws, float *dwte, float *dwpe, const int32_t *tok, int B,
                        int T) {
    gpt_embed_bwd(dwte, dwpe, ws->dres, tok, B, T, ws->cfg.d_model);
}

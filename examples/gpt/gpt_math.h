/*
 * examples/gpt/gpt_math.h — the per-element and per-row arithmetic of
 * acx-gpt that the CPU kernels (gpt_model.c) and the CUDA kernels
 * (gpt_cuda_kernels.cu) share, as static inline functions that compile as
 * C and as CUDA host/device code (GPT_HD).
 *
 * Each gptm_* function below is the body of one CUDA thread: it computes
 * item i (an element, a row or a column) of a kernel and touches nothing
 * else, so a kernel is a grid-stride loop over i and the host can run the
 * same bodies in a plain loop (tests/unit/test_gpt_cuda_math.c runs them
 * over every i and compares with gpt_model.c's kernels). The sums run in
 * gpt_model.c's order (rows ascending), in double where gpt_model.c uses
 * double, so given the same inputs the two differ by the device's
 * rounding only: nvcc contracts a*b + c into fused multiply-adds (gcc on
 * x86-64 does not) and CUDA's expf/log are within 1-2 ulp of glibc's.
 *
 * Shapes as in gpt_model.h: row-major, N = B*T rows, C = d_model, V vocab,
 * att rows of T for each (b, head, t).
 *
 * What is not here: the matrix products (cuBLAS on the device, CBLAS on
 * the CPU; the device's arguments are gpt_cuda_gemm.h) and the CPU's
 * attention, which gpt_model.c computes with loops (the device with
 * products and the softmax rows below).
 */
#ifndef ACX_EXAMPLE_GPT_MATH_H
#define ACX_EXAMPLE_GPT_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define GPT_HD __host__ __device__
#else
#define GPT_HD
#endif

#define GPT_LN_EPS 1e-5f               /* torch.nn.LayerNorm's default */
#define GPT_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GPT_GELU_C 0.044715f

/* ---- GELU, tanh approximation ---- */

/* e^a for a in [-87, 88] (callers clamp), branch-free so that the CPU's
 * loops calling it vectorize (glibc's expf is a scalar call): a = k ln2 +
 * r, k rounded to nearest by the 1.5 x 2^23 trick and ln2 split in two
 * (Cody and Waite), e^r by its Taylor polynomial to degree 7 (|r| <= ln2/2:
 * truncation < 2e-8 relative), 2^k from the exponent bits (k >= -126: a
 * normal number). The device runs the same formula (not CUDA's expf), so
 * both sides approximate alike. */
GPT_HD static inline float gptm_exp_poly(float a) {
    const float shifter = 12582912.0f; /* 1.5 x 2^23 */
    float kf = (a * 1.44269504088896341f + shifter) - shifter;
    float r = (a - kf * 0.693145751953125f) - kf * 1.428606765330187e-06f;
    float p =
        1.0f +
        r * (1.0f +
             r * (0.5f +
                  r * (1.0f / 6 +
                       r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
    int32_t bits = ((int32_t)kf + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* tanh(u) = 1 - 2 / (e^(2u) + 1), with e^a by gptm_exp_poly so that the
 * CPU's GELU loops vectorize (glibc's tanhf is a scalar call, and it was a
 * third of acx-gpt's CPU time): a = 2|u| clamped to 40 (2/(e^a + 1) <
 * 1e-17: tanh rounds to 1, as libm's does). Absolute error of the result a
 * few 1e-8, against PyTorch's tanh. */
GPT_HD static inline float gptm_tanh(float u) {
    /* on |u|, sign restored at the end: for u << 0 the quotient 2/(e+1)
     * would be near 2, whose rounding (2.4e-7) the backward's 1 - th^2
     * magnifies; near 0 it rounds like th itself */
    float a = 2.0f * fabsf(u);
    /* clamp in the integers (a >= 0 orders like its bits; a NaN clamps to
     * 40): a float compare is a branch to the vectorizer under the
     * default -ftrapping-math */
    int32_t abits;
    memcpy(&abits, &a, sizeof a);
    abits = abits < 0x42200000 ? abits : 0x42200000; /* 40.0f */
    memcpy(&a, &abits, sizeof a);
    float t = 1.0f - 2.0f / (gptm_exp_poly(a) + 1.0f);
    return copysignf(t, u);
}

/* gelu(x) = x/2 (1 + tanh(k (x + c x^3))) */
GPT_HD static inline float gptm_gelu(float x) {
    return 0.5f * x * (1.0f + gptm_tanh(GPT_GELU_K * (x + GPT_GELU_C * x * x * x)));
}

/* d gelu / dx */
GPT_HD static inline float gptm_gelu_grad(float x) {
    float th = gptm_tanh(GPT_GELU_K * (x + GPT_GELU_C * x * x * x));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GPT_GELU_K * (1.0f + 3.0f * GPT_GELU_C * x * x);
}

/* ---- embedding (item i < N*C: one element of row n = i / C) ---- */

GPT_HD static inline void gptm_embed_fwd(size_t i, float *out, const int32_t *tok, const float *wte,
                                         const float *wpe, int T, int C) {
    size_t n = i / (size_t)C, c = i % (size_t)C;
    size_t t = n % (size_t)T;
    out[i] = wte[(size_t)tok[n] * C + c] + wpe[t * C + c];
}

/* dwpe[t][c] += dout[b*T+t][c] for b = 0..B-1 in order; item i < T*C. */
GPT_HD static inline void gptm_embed_bwd_wpe(size_t i, float *dwpe, const float *dout, int B, int T,
                                             int C) {
    size_t t = i / (size_t)C, c = i % (size_t)C;
    float acc = dwpe[i];
    for (int b = 0; b < B; b++)
        acc += dout[((size_t)b * T + t) * C + c];
    dwpe[i] = acc;
}

/* The token embedding's scatter-add without atomics: the rows of each
 * distinct token, ascending (gptm_embed_plan), are summed by one thread per
 * (token, column), in the order gpt_embed_bwd adds them. Item i < U*C for
 * the U distinct tokens; ids[u] the token, rows[start[u] .. start[u+1]) its
 * rows. Deterministic: no two threads write one element. */
GPT_HD static inline void gptm_embed_bwd_wte(size_t i, float *dwte, const float *dout,
                                             const int32_t *ids, const int32_t *start,
                                             const int32_t *rows, int C) {
    size_t u = i / (size_t)C, c = i % (size_t)C;
    float *d = dwte + (size_t)ids[u] * C + c;
    float acc = *d;
    for (int32_t r = start[u]; r < start[u + 1]; r++)
        acc += dout[(size_t)rows[r] * C + c];
    *d = acc;
}

/* The plan gptm_embed_bwd_wte reads, from the N token ids (a counting sort,
 * stable): count [V] scratch; ids [<= V], start [<= V+1], rows [N]. Returns
 * U, the number of distinct tokens, or -1 if a token is outside 0..V-1. */
static inline int gptm_embed_plan(const int32_t *tok, int N, int V, int32_t *count, int32_t *ids,
                                  int32_t *start, int32_t *rows) {
    for (int v = 0; v < V; v++)
        count[v] = 0;
    for (int n = 0; n < N; n++) {
        if (tok[n] < 0 || tok[n] >= V) return -1;
        count[tok[n]]++;
    }
    int u = 0;
    int32_t at = 0;
    for (int v = 0; v < V; v++) {
        if (count[v] == 0) continue;
        ids[u] = v;
        start[u++] = at;
        int32_t c = count[v];
        count[v] = at; /* from here: the next free slot of token v */
        at += c;
    }
    start[u] = at;
    for (int n = 0; n < N; n++)
        rows[count[tok[n]]++] = n;
    return u;
}

/* ---- layernorm ---- */

/* Row n of gpt_layernorm_fwd: statistics in double, as there. */
GPT_HD static inline void gptm_layernorm_fwd_row(size_t n, float *out, float *mean, float *rstd,
                                                 const float *inp, const float *w, const float *b,
                                                 int C) {
    const float *x = inp + n * C;
    float *o = out + n * C;
    double s = 0.0;
    for (int i = 0; i < C; i++)
        s += x[i];
    float m = (float)(s / C);
    double v = 0.0;
    for (int i = 0; i < C; i++) {
        double d = (double)x[i] - m;
        v += d * d;
    }
    float r = (float)(1.0 / sqrt(v / C + GPT_LN_EPS));
    for (int i = 0; i < C; i++)
        o[i] = (x[i] - m) * r * w[i] + b[i];
    mean[n] = m;
    rstd[n] = r;
}

/* Row n of gpt_layernorm_bwd's input gradient: dinp[n] += rstd (g - mean(g)
 * - xhat mean(g xhat)), g = dout w. */
GPT_HD static inline void gptm_layernorm_bwd_row(size_t n, float *dinp, const float *dout,
                                                 const float *inp, const float *w,
                                                 const float *mean, const float *rstd, int C) {
    const float *x = inp + n * C, *d = dout + n * C;
    float *dx = dinp + n * C;
    float m = mean[n], r = rstd[n];
    double sg = 0.0, sgx = 0.0;
    for (int i = 0; i < C; i++) {
        float xhat = (x[i] - m) * r, g = d[i] * w[i];
        sg += g;
        sgx += (double)g * xhat;
    }
    float mg = (float)(sg / C), mgx = (float)(sgx / C);
    for (int i = 0; i < C; i++) {
        float xhat = (x[i] - m) * r, g = d[i] * w[i];
        dx[i] += r * (g - mg - xhat * mgx);
    }
}

/* Column c of gpt_layernorm_bwd's weight and bias gradients, summed over
 * the N rows in order: dw[c] += sum dout xhat, db[c] += sum dout. */
GPT_HD static inline void gptm_layernorm_bwd_col(size_t c, float *dw, float *db, const float *dout,
                                                 const float *inp, const float *mean,
                                                 const float *rstd, int N, int C) {
    float aw = dw[c], ab = db[c];
    for (int n = 0; n < N; n++) {
        size_t k = (size_t)n * C + c;
        float xhat = (inp[k] - mean[n]) * rstd[n];
        aw += dout[k] * xhat;
        ab += dout[k];
    }
    dw[c] = aw;
    db[c] = ab;
}

/* ---- linear layers' bias ---- */

/* out[i] += bias[i % OC] (item i < N*OC), as gpt_matmul_fwd after its sgemm. */
GPT_HD static inline void gptm_bias_add(size_t i, float *out, const float *bias, int OC) {
    out[i] += bias[i % (size_t)OC];
}

/* Column j of gpt_matmul_bwd's bias gradient: dbias[j] += sum over rows of dout. */
GPT_HD static inline void gptm_bias_grad_col(size_t j, float *dbias, const float *dout, int N,
                                             int OC) {
    float acc = dbias[j];
    for (int n = 0; n < N; n++)
        acc += dout[(size_t)n * OC + j];
    dbias[j] = acc;
}

/* ---- causal softmax of the attention scores ----
 * Row r < B*NH*T of att [B x NH x T x T] is query t = r % T; columns
 * s <= t are its keys, s > t are masked. */

/* In place: the row's raw scores q.k_s (the product of the queries and
 * keys, every s) become softmax(scale * score) over s <= t, 0 above the
 * diagonal, as gpt_attention_fwd (expf, the sum in double). */
GPT_HD static inline void gptm_softmax_causal_row(size_t r, float *att, int T, float scale) {
    int t = (int)(r % (size_t)T);
    float *a = att + r * T;
    float mx = -INFINITY;
    for (int s = 0; s <= t; s++) {
        a[s] = a[s] * scale;
        if (a[s] > mx) mx = a[s];
    }
    double sum = 0.0;
    for (int s = 0; s <= t; s++) {
        a[s] = expf(a[s] - mx);
        sum += a[s];
    }
    float inv = (float)(1.0 / sum);
    for (int s = 0; s <= t; s++)
        a[s] *= inv;
    for (int s = t + 1; s < T; s++)
        a[s] = 0.0f;
}

/* In place: the row of d loss / d att (dout . v_s, every s) becomes
 * d loss / d score: scale a_s (da_s - sum_j a_j da_j) for s <= t, 0 above
 * the diagonal (masked scores get no gradient), as gpt_attention_bwd. */
GPT_HD static inline void gptm_softmax_causal_bwd_row(size_t r, float *datt, const float *att,
                                                      int T, float scale) {
    int t = (int)(r % (size_t)T);
    const float *a = att + r * T;
    float *da = datt + r * T;
    double dot = 0.0;
    for (int s = 0; s <= t; s++)
        dot += (double)a[s] * da[s];
    for (int s = 0; s <= t; s++)
        da[s] = a[s] * (da[s] - (float)dot) * scale;
    for (int s = t + 1; s < T; s++)
        da[s] = 0.0f;
}

/* ---- softmax cross-entropy over the vocabulary ---- */

/* Row n: probs = softmax(logits) (in place allowed), row_loss[n] = -log
 * p[target] = log(sum) - (z[target] - max), and dlogits = scale (probs -
 * onehot(target)) (overwritten: gpt_forward_head zeroes it before adding),
 * as gpt_crossentropy_fwd and gpt_crossentropy_bwd. */
GPT_HD static inline void gptm_crossentropy_row(size_t n, float *probs, float *dlogits,
                                                double *row_loss, const float *logits,
                                                const int32_t *targets, int V, float scale) {
    const float *z = logits + n * V;
    float *p = probs + n * V, *d = dlogits + n * V;
    float mx = -INFINITY;
    for (int j = 0; j < V; j++)
        if (z[j] > mx) mx = z[j];
    double zt = (double)z[targets[n]] - mx, sum = 0.0;
    for (int j = 0; j < V; j++) {
        p[j] = expf(z[j] - mx);
        sum += p[j];
    }
    row_loss[n] = log(sum) - zt;
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < V; j++) {
        p[j] *= inv;
        d[j] = 0.0f + scale * p[j];
    }
    d[targets[n]] -= scale;
}

#endif /* ACX_EXAMPLE_GPT_MATH_H */

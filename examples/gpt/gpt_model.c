/*
 * examples/gpt/gpt_model.c — the GPT's kernels and per-unit passes (see
 * gpt_model.h). Single-threaded loops in float32 except the matrix products
 * (CBLAS sgemm); sums over long rows (layernorm statistics, softmax
 * normalizers, the loss) accumulate in double so that the finite-difference
 * tests and the PyTorch comparison see float rounding of the results only.
 */
#include "gpt_model.h"
#include "gpt_math.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

void gpt_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
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
}

/* y = xhat*w + b, xhat = (x - mean)*rstd. With g = dout*w:
 * dx = rstd * (g - mean(g) - xhat * mean(g*xhat)). */
void gpt_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
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
            dw[i] += d[i] * xhat;
            db[i] += d[i];
        }
    }
}

/* ---- matmul ---- */

void gpt_matmul_fwd(float *out, const float *inp, const float *W, const float *bias, int N, int C,
                    int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, W, C, 0.0f, out,
                OC);
    if (bias == NULL) return;
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
        for (int j = 0; j < OC; j++)
            o[j] += bias[j];
    }
}

void gpt_matmul_bwd(float *dinp, float *dW, float *dbias, const float *dout, const float *inp,
                    const float *W, int N, int C, int OC) {
    /* dinp [N x C] += dout [N x OC] W [OC x C]; dW [OC x C] += dout^T inp */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, W, C, 1.0f,
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

/* ---- causal self-attention ---- */

void gpt_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float mx = -INFINITY;
                for (int s = 0; s <= t; s++) {
                    const float *k = qkv + ((size_t)b * T + s) * C3 + C + h * hs;
                    float dot = 0.0f;
                    for (int i = 0; i < hs; i++)
                        dot += q[i] * k[i];
                    a[s] = dot * scale;
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
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0.0f;
                for (int s = 0; s <= t; s++) {
                    const float *v = qkv + ((size_t)b * T + s) * C3 + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++)
                        o[i] += a[s] * v[i];
                }
            }
}

/* Per row (b, h, t): o = sum_s a_s v_s, a = softmax(scale * q.k_s).
 * da_s = dout.v_s, dv_s += a_s dout; dp_s = a_s (da_s - sum_j a_j da_j);
 * dq += scale dp_s k_s, dk_s += scale dp_s q. */
void gpt_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                       int T, int C, int NH, float *scratch) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + h * hs;
                const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
                double dot = 0.0;
                for (int s = 0; s <= t; s++) {
                    const float *v = qkv + ((size_t)b * T + s) * C3 + 2 * C + h * hs;
                    float *dv = dqkv + ((size_t)b * T + s) * C3 + 2 * C + h * hs;
                    float da = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        da += d[i] * v[i];
                        dv[i] += a[s] * d[i];
                    }
                    scratch[s] = da;
                    dot += (double)a[s] * da;
                }
                for (int s = 0; s <= t; s++) {
                    float dp = a[s] * (scratch[s] - (float)dot) * scale;
                    const float *k = qkv + ((size_t)b * T + s) * C3 + C + h * hs;
                    float *dk = dqkv + ((size_t)b * T + s) * C3 + C + h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dp * k[i];
                        dk[i] += dp * q[i];
                    }
                }
            }
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

static inline void gelu_bwd_block(float *restrict dinp, const float *restrict inp,
                                  const float *restrict dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        dinp[i] += gptm_gelu_grad(inp[i]) * dout[i];
    }
}

void gpt_gelu_fwd(float *out, const float *inp, size_t n) {
    size_t i = 0;
    for (; i + GELU_BLOCK <= n; i += GELU_BLOCK)
        gelu_fwd_block(out + i, inp + i, GELU_BLOCK);
    gelu_fwd_block(out + i, inp + i, n - i);
}

void gpt_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t i = 0;
    for (; i + GELU_BLOCK <= n; i += GELU_BLOCK)
        gelu_bwd_block(dinp + i, inp + i, dout + i, GELU_BLOCK);
    gelu_bwd_block(dinp + i, inp + i, dout + i, n - i);
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

double gpt_crossentropy_fwd(float *probs, const float *logits, const int32_t *targets, int N,
                            int V) {
    double loss = 0.0;
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float mx = -INFINITY;
        for (int j = 0; j < V; j++)
            if (z[j] > mx) mx = z[j];
        /* -log p[target] = log(sum) - (z[target] - mx): exact also when p
         * underflows; read before p (which may alias z) is written */
        double zt = (double)z[targets[n]] - mx, sum = 0.0;
        for (int j = 0; j < V; j++) {
            p[j] = expf(z[j] - mx);
            sum += p[j];
        }
        loss += log(sum) - zt;
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++)
            p[j] *= inv;
    }
    return loss / N;
}

void gpt_crossentropy_bwd(float *dlogits, const float *probs, const int32_t *targets, int N, int V,
                          float scale) {
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        for (int j = 0; j < V; j++)
            d[j] += scale * p[j];
        d[targets[n]] -= scale;
    }
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
    ws->dfcproj = alloc_f(ws, N * C, &bad);
    ws->dqkv = alloc_f(ws, N * 3 * C, &bad);
    ws->dfch = alloc_f(ws, N * 4 * C, &bad);
    ws->dfch_gelu = alloc_f(ws, N * 4 * C, &bad);
    ws->scratch = alloc_f(ws, T, &bad);
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
    float *rest[] = {ws->encoded, ws->lnf,     ws->lnf_mean,  ws->lnf_rstd, ws->probs, ws->dlogits,
                     ws->dres,    ws->dres_in, ws->dres_mid,  ws->dln,      ws->datty, ws->dfcproj,
                     ws->dqkv,    ws->dfch,    ws->dfch_gelu, ws->scratch};
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
    memset(ws->dlogits, 0, (size_t)N * V * sizeof(float));
    gpt_crossentropy_bwd(ws->dlogits, ws->probs, targets, N, V, 1.0f / (float)N);
    return loss;
}

double gpt_forward_final(gpt_workspace_t *ws, const float *lnf_w, const float *lnf_b,
                         const float *wte, const int32_t *targets, int B, int T) {
    gpt_forward_lnf(ws, lnf_w, lnf_b, B, T);
    return gpt_forward_head(ws, wte, targets, B, T);
}

void gpt_backward_head(gpt_workspace_t *ws, const float *wte, float *dwte, int B, int T) {
    int C = ws->cfg.d_model, V = ws->cfg.vocab, N = B * T;
    memset(ws->dln, 0, (size_t)N * C * sizeof(float));
    gpt_matmul_bwd(ws->dln, dwte, NULL, ws->dlogits, ws->lnf, wte, N, C, V);
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
    /* res3 = res2 + fcproj */
    memset(ws->dres_mid, 0, bytes);
    memset(ws->dfcproj, 0, bytes);
    gpt_residual_bwd(ws->dres_mid, ws->dfcproj, ws->dres, nc);
    memset(ws->dfch_gelu, 0, 4 * bytes);
    gpt_matmul_bwd(ws->dfch_gelu, dw[GPT_FCPROJ_W], dw[GPT_FCPROJ_B], ws->dfcproj, a->fch_gelu,
                   w[GPT_FCPROJ_W], N, 4 * C, C);
    memset(ws->dfch, 0, 4 * bytes);
    gpt_gelu_bwd(ws->dfch, a->fch, ws->dfch_gelu, 4 * nc);
    memset(ws->dln, 0, bytes);
    gpt_matmul_bwd(ws->dln, dw[GPT_FC_W], dw[GPT_FC_B], ws->dfch, a->ln2, w[GPT_FC_W], N, C, 4 * C);
    gpt_layernorm_bwd(ws->dres_mid, dw[GPT_LN2_W], dw[GPT_LN2_B], ws->dln, a->res2, w[GPT_LN2_W],
                      a->ln2_mean, a->ln2_rstd, N, C);
    /* res2 = x + attproj */
    memset(ws->dres_in, 0, bytes);
    memset(ws->datty, 0, bytes);
    float *dattproj = ws->dfcproj; /* free again: reused */
    memset(dattproj, 0, bytes);
    gpt_residual_bwd(ws->dres_in, dattproj, ws->dres_mid, nc);
    gpt_matmul_bwd(ws->datty, dw[GPT_ATTPROJ_W], dw[GPT_ATTPROJ_B], dattproj, a->atty,
                   w[GPT_ATTPROJ_W], N, C, C);
    memset(ws->dqkv, 0, 3 * bytes);
    gpt_attention_bwd(ws->dqkv, ws->datty, a->qkv, a->att, B, T, C, ws->cfg.heads, ws->scratch);
    memset(ws->dln, 0, bytes);
    gpt_matmul_bwd(ws->dln, dw[GPT_QKV_W], dw[GPT_QKV_B], ws->dqkv, a->ln1, w[GPT_QKV_W], N, C,
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

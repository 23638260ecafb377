/*
 * examples/gpt/gpt_cuda.c — the GPT of gpt_cuda.h: device memory, the
 * cuBLAS products (arguments from gpt_cuda_gemm.h) and the order of the
 * launches, pass by pass as gpt_model.c's gpt_forward_* / gpt_backward_*.
 * The kernels are in gpt_cuda_kernels.cu; the CPU version this must track
 * is gpt_model.c.
 *
 * Buffers that gpt_model.c zeroes and then adds into are written here with
 * beta 0 (products) or overwritten (kernels), which gives the same values;
 * the ones it adds into without zeroing (the parameter gradients; dres_mid
 * and dres_in, which start as copies of the output's gradient) are added
 * into here too.
 *
 * Precision: cublasGemmStridedBatchedEx with float32 data and
 * CUBLAS_COMPUTE_32F (or _PEDANTIC under GPT_CUDA_PEDANTIC) in
 * CUBLAS_DEFAULT_MATH: no TF32, no atomics (CUBLAS_ATOMICS_NOT_ALLOWED is
 * the default), and the kernels use none: a run is bitwise reproducible
 * on one GPU model and cuBLAS version.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_cuda.h"
#include "gpt_cuda_gemm.h"
#include "gpt_cuda_kernels.h"
#include "gpt_math.h"

/* ---- errors ---- */

static int fail(gpt_cuda_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(gpt_cuda_t *g, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* A failed runtime call leaves a (non-sticky) last error that a later
 * launch check would report again: read it back. */
static int cuda_fail(gpt_cuda_t *g, cudaError_t ret, const char *call, const char *what) {
    (void)cudaGetLastError();
    return fail(g, "%s (%s) failed: %s: %s", call, what, cudaGetErrorName(ret),
                cudaGetErrorString(ret));
}

static int cublas_fail(gpt_cuda_t *g, cublasStatus_t ret, const char *call, const char *what) {
    return fail(g, "%s (%s) failed: %s: %s", call, what, cublasGetStatusName(ret),
                cublasGetStatusString(ret));
}

/* A runtime call or a kernel launcher; `name` is the call without its
 * arguments, `what` what it was doing. */
#define CU(call, name, what)                                                                       \
    do {                                                                                           \
        cudaError_t gpt_cu_ret_ = (call);                                                          \
        if (gpt_cu_ret_ != cudaSuccess) return cuda_fail(g, gpt_cu_ret_, (name), (what));          \
    } while (0)

static cudaStream_t stream_of(const gpt_cuda_t *g) { return (cudaStream_t)g->stream; }

static int check_shape(gpt_cuda_t *g, int B, int T, const char *fn) {
    if (B < 1 || B > g->max_B || T < 1 || T > g->cfg.seq_len)
        return fail(g, "%s: batch of %d x %d tokens, expected 1..%d sequences of 1..%d", fn, B, T,
                    g->max_B, g->cfg.seq_len);
    return 0;
}

/* ---- setup ---- */

static int alloc(gpt_cuda_t *g, void **p, size_t bytes, const char *what) {
    char desc[96];
    snprintf(desc, sizeof desc, "%s, %zu bytes", what, bytes);
    CU(cudaMalloc(p, bytes > 0 ? bytes : 1), "cudaMalloc", desc);
    g->bytes += bytes;
    return 0;
}

#define ALLOC_F(ptr, n, what) alloc(g, (void **)&(ptr), (size_t)(n) * sizeof(float), (what))

int gpt_cuda_init(gpt_cuda_t *g, const gpt_config_t *cfg, int max_B, int device, void *stream,
                  int flags) {
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    g->max_B = max_B;
    g->device = device;
    g->flags = flags;
    if (max_B < 1) return fail(g, "gpt_cuda_init: max_B %d, expected >= 1", max_B);
    if (cfg->heads < 1 || cfg->d_model % cfg->heads != 0 || cfg->layers < 1 || cfg->vocab < 1 ||
        cfg->seq_len < 1)
        return fail(g, "gpt_cuda_init: bad model shape (vocab %d, T %d, C %d, heads %d, L %d)",
                    cfg->vocab, cfg->seq_len, cfg->d_model, cfg->heads, cfg->layers);
    if (device >= 0) {
        char what[32];
        snprintf(what, sizeof what, "device %d", device);
        CU(cudaSetDevice(device), "cudaSetDevice", what);
    } else {
        CU(cudaGetDevice(&g->device), "cudaGetDevice", "the current device");
    }
    size_t T = (size_t)cfg->seq_len, C = (size_t)cfg->d_model, N = (size_t)max_B * T;
    size_t NH = (size_t)cfg->heads, V = (size_t)cfg->vocab, natt = (size_t)max_B * NH * T * T;
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t ret;
    cublasStatus_t bret;
    if (s == NULL) {
        /* cudaStreamDefault flags: blocking, ordered with the legacy default stream */
        CU(cudaStreamCreate(&s), "cudaStreamCreate", "the GPT's stream");
        g->own_stream = 1;
    }
    g->stream = s;
    cublasHandle_t h;
    if ((bret = cublasCreate(&h)) != CUBLAS_STATUS_SUCCESS) {
        cublas_fail(g, bret, "cublasCreate", "the GPT's handle");
        goto err;
    }
    g->cublas = h;
    if ((bret = cublasSetStream(h, s)) != CUBLAS_STATUS_SUCCESS) {
        cublas_fail(g, bret, "cublasSetStream", "the GPT's stream");
        goto err;
    }
    cudaEvent_t ev;
    if ((ret = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess) {
        cuda_fail(g, ret, "cudaEventCreateWithFlags", "loss ready");
        goto err;
    }
    g->loss_ready = ev;
    if ((g->blocks = calloc((size_t)cfg->layers, sizeof *g->blocks)) == NULL ||
        (g->host_plan = malloc((3 * V + 1 + N) * sizeof(int32_t))) == NULL) {
        fail(g, "gpt_cuda_init: out of host memory");
        goto err;
    }
    if (alloc(g, (void **)&g->tok, N * sizeof(int32_t), "tokens") ||
        alloc(g, (void **)&g->tgt, N * sizeof(int32_t), "targets") ||
        alloc(g, (void **)&g->emb_ids, V * sizeof(int32_t), "embedding plan ids") ||
        alloc(g, (void **)&g->emb_start, (V + 1) * sizeof(int32_t), "embedding plan starts") ||
        alloc(g, (void **)&g->emb_rows, N * sizeof(int32_t), "embedding plan rows") ||
        ALLOC_F(g->encoded, N * C, "embedding output"))
        goto err;
    for (int l = 0; l < cfg->layers; l++) {
        gpt_block_acts_t *a = &g->blocks[l];
        char what[64];
        snprintf(what, sizeof what, "activations of h.%d", l);
        if (ALLOC_F(a->ln1, N * C, what) || ALLOC_F(a->ln1_mean, N, what) ||
            ALLOC_F(a->ln1_rstd, N, what) || ALLOC_F(a->qkv, N * 3 * C, what) ||
            ALLOC_F(a->att, natt, what) || ALLOC_F(a->atty, N * C, what) ||
            ALLOC_F(a->attproj, N * C, what) || ALLOC_F(a->res2, N * C, what) ||
            ALLOC_F(a->ln2, N * C, what) || ALLOC_F(a->ln2_mean, N, what) ||
            ALLOC_F(a->ln2_rstd, N, what) || ALLOC_F(a->fch, N * 4 * C, what) ||
            ALLOC_F(a->fch_gelu, N * 4 * C, what) || ALLOC_F(a->fcproj, N * C, what) ||
            ALLOC_F(a->res3, N * C, what))
            goto err;
    }
    if (ALLOC_F(g->lnf, N * C, "ln_f output") || ALLOC_F(g->lnf_mean, N, "ln_f mean") ||
        ALLOC_F(g->lnf_rstd, N, "ln_f rstd") || ALLOC_F(g->probs, N * V, "logits") ||
        ALLOC_F(g->dlogits, N * V, "logits' gradient") || ALLOC_F(g->dres, N * C, "gradients") ||
        ALLOC_F(g->dres_in, N * C, "gradients") || ALLOC_F(g->dres_mid, N * C, "gradients") ||
        ALLOC_F(g->dln, N * C, "gradients") || ALLOC_F(g->datty, N * C, "gradients") ||
        ALLOC_F(g->dfcproj, N * C, "gradients") || ALLOC_F(g->dqkv, N * 3 * C, "gradients") ||
        ALLOC_F(g->dfch, N * 4 * C, "gradients") || ALLOC_F(g->dfch_gelu, N * 4 * C, "gradients") ||
        ALLOC_F(g->datt, natt, "attention gradients") ||
        alloc(g, (void **)&g->row_loss, N * sizeof(double), "per-token losses") ||
        alloc(g, (void **)&g->loss, sizeof(double), "mean loss"))
        goto err;
    if ((ret = cudaMallocHost((void **)&g->loss_host, sizeof(double))) != cudaSuccess) {
        cuda_fail(g, ret, "cudaMallocHost", "pinned mean loss, 8 bytes");
        goto err;
    }
    *g->loss_host = 0.0;
    return 0;
err:;
    char why[sizeof g->err];
    memcpy(why, g->err, sizeof why);
    gpt_cuda_free(g);
    memcpy(g->err, why, sizeof why);
    return -1;
}

void gpt_cuda_free(gpt_cuda_t *g) {
    if (g->stream) cudaStreamSynchronize(stream_of(g));
    if (g->cublas) cublasDestroy((cublasHandle_t)g->cublas);
    if (g->loss_ready) cudaEventDestroy((cudaEvent_t)g->loss_ready);
    if (g->blocks != NULL)
        for (int l = 0; l < g->cfg.layers; l++) {
            gpt_block_acts_t *a = &g->blocks[l];
            float *all[] = {a->ln1,      a->ln1_mean, a->ln1_rstd, a->qkv,    a->att,
                            a->atty,     a->attproj,  a->res2,     a->ln2,    a->ln2_mean,
                            a->ln2_rstd, a->fch,      a->fch_gelu, a->fcproj, a->res3};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                cudaFree(all[i]);
        }
    free(g->blocks);
    void *rest[] = {g->tok,     g->tgt,       g->emb_ids,  g->emb_start, g->emb_rows, g->encoded,
                    g->lnf,     g->lnf_mean,  g->lnf_rstd, g->probs,     g->dlogits,  g->dres,
                    g->dres_in, g->dres_mid,  g->dln,      g->datty,     g->dfcproj,  g->dqkv,
                    g->dfch,    g->dfch_gelu, g->datt,     g->row_loss,  g->loss};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        cudaFree(rest[i]);
    cudaFreeHost(g->loss_host);
    free(g->host_plan);
    if (g->own_stream && g->stream) cudaStreamDestroy(stream_of(g));
    (void)cudaGetLastError();
    char err[sizeof g->err];
    memcpy(err, g->err, sizeof err);
    memset(g, 0, sizeof *g);
    memcpy(g->err, err, sizeof err);
}

void *gpt_cuda_stream(const gpt_cuda_t *g) { return g->stream; }

int gpt_cuda_is_device_pointer(gpt_cuda_t *g, const void *p) {
    struct cudaPointerAttributes a;
    CU(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes", "a parameter pointer");
    return a.type == cudaMemoryTypeDevice;
}

/* ---- a batch ---- */

int gpt_cuda_load_batch(gpt_cuda_t *g, const int32_t *tok, const int32_t *targets, int B, int T) {
    if (check_shape(g, B, T, "gpt_cuda_load_batch")) return -1;
    int N = B * T, V = g->cfg.vocab;
    for (int n = 0; n < N; n++)
        if (tok[n] < 0 || tok[n] >= V || (targets != NULL && (targets[n] < 0 || targets[n] >= V)))
            return fail(g, "gpt_cuda_load_batch: token %d (%s) of the batch is %d, outside 0..%d",
                        n, tok[n] < 0 || tok[n] >= V ? "input" : "target",
                        tok[n] < 0 || tok[n] >= V ? tok[n] : targets[n], V - 1);
    int32_t *count = g->host_plan, *ids = count + V, *start = ids + V, *rows = start + V + 1;
    g->emb_unique = gptm_embed_plan(tok, N, V, count, ids, start, rows);
    cudaStream_t s = stream_of(g);
    /* From pageable memory: each copy returns once the bytes are staged,
     * so the caller's arrays and host_plan may be reused right away. */
    size_t ni = (size_t)N * sizeof(int32_t);
    CU(cudaMemcpyAsync(g->tok, tok, ni, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync",
       "tokens to the device");
    if (targets != NULL)
        CU(cudaMemcpyAsync(g->tgt, targets, ni, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync",
           "targets to the device");
    g->have_targets = targets != NULL;
    size_t u = (size_t)g->emb_unique;
    CU(cudaMemcpyAsync(g->emb_ids, ids, u * sizeof(int32_t), cudaMemcpyHostToDevice, s),
       "cudaMemcpyAsync", "the embedding plan to the device");
    CU(cudaMemcpyAsync(g->emb_start, start, (u + 1) * sizeof(int32_t), cudaMemcpyHostToDevice, s),
       "cudaMemcpyAsync", "the embedding plan to the device");
    CU(cudaMemcpyAsync(g->emb_rows, rows, ni, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync",
       "the embedding plan to the device");
    return 0;
}

/* ---- products ---- */

/* Run one plan of gpt_cuda_gemm.h: per call (head), one strided-batched
 * product over the sequences. `unit` and `what` name it in errors. */
static int gemm(gpt_cuda_t *g, const gpt_gemm_t *p, const float *a, const float *b, float *c,
                const char *unit, const char *what) {
    cublasComputeType_t ct =
        g->flags & GPT_CUDA_PEDANTIC ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    for (int h = 0; h < p->calls; h++) {
        cublasStatus_t ret = cublasGemmStridedBatchedEx(
            (cublasHandle_t)g->cublas, p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
            p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, p->m, p->n, p->k, &p->alpha,
            a + p->off_a + h * p->head_a, CUDA_R_32F, p->lda, p->stride_a,
            b + p->off_b + h * p->head_b, CUDA_R_32F, p->ldb, p->stride_b, &p->beta,
            c + p->off_c + h * p->head_c, CUDA_R_32F, p->ldc, p->stride_c, p->batch, ct,
            CUBLAS_GEMM_DEFAULT);
        if (ret != CUBLAS_STATUS_SUCCESS) {
            char desc[128];
            snprintf(desc, sizeof desc, "%s %s, %d x %d x %d x %d", unit, what, p->m, p->n, p->k,
                     p->batch);
            return cublas_fail(g, ret, "cublasGemmStridedBatchedEx", desc);
        }
    }
    return 0;
}

/* gpt_matmul_fwd: out [N x OC] = inp W^T (+ bias). */
static int linear_fwd(gpt_cuda_t *g, float *out, const float *inp, const float *W,
                      const float *bias, int N, int C, int OC, const char *unit, const char *what) {
    gpt_gemm_t p = gpt_gemm_linear(GPT_GEMM_LINEAR_FWD, N, C, OC);
    if (gemm(g, &p, W, inp, out, unit, what)) return -1;
    if (bias != NULL) CU(gptk_bias_add(out, bias, N, OC, stream_of(g)), "launching bias_add", what);
    return 0;
}

/* gpt_matmul_bwd: dinp = dout W (overwritten; NULL: not wanted),
 * dW += dout^T inp, dbias += column sums (NULL: no bias). */
static int linear_bwd(gpt_cuda_t *g, float *dinp, float *dW, float *dbias, const float *dout,
                      const float *inp, const float *W, int N, int C, int OC, const char *unit,
                      const char *what) {
    gpt_gemm_t p;
    if (dinp != NULL) {
        p = gpt_gemm_linear(GPT_GEMM_LINEAR_DGRAD, N, C, OC);
        if (gemm(g, &p, W, dout, dinp, unit, what)) return -1;
    }
    p = gpt_gemm_linear(GPT_GEMM_LINEAR_WGRAD, N, C, OC);
    if (gemm(g, &p, inp, dout, dW, unit, what)) return -1;
    if (dbias != NULL)
        CU(gptk_bias_grad(dbias, dout, N, OC, stream_of(g)), "launching bias_grad", what);
    return 0;
}

static float att_scale(const gpt_cuda_t *g) {
    return 1.0f / sqrtf((float)(g->cfg.d_model / g->cfg.heads)); /* gpt_attention_fwd's */
}

/* ---- forward ---- */

int gpt_cuda_forward_embed(gpt_cuda_t *g, const float *wte, const float *wpe, int B, int T) {
    if (check_shape(g, B, T, "gpt_cuda_forward_embed")) return -1;
    CU(gptk_embed_fwd(g->encoded, g->tok, wte, wpe, B * T, T, g->cfg.d_model, stream_of(g)),
       "launching embed_fwd", "embed");
    return 0;
}

static const float *block_input(const gpt_cuda_t *g, int l) {
    return l == 0 ? g->encoded : g->blocks[l - 1].res3;
}

int gpt_cuda_forward_block(gpt_cuda_t *g, int l, const gpt_block_params_t *p, int B, int T) {
    if (check_shape(g, B, T, "gpt_cuda_forward_block")) return -1;
    if (l < 0 || l >= g->cfg.layers)
        return fail(g, "gpt_cuda_forward_block: block %d, expected 0..%d", l, g->cfg.layers - 1);
    int C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
    size_t nc = (size_t)N * C;
    gpt_block_acts_t *a = &g->blocks[l];
    const float *x = block_input(g, l);
    const float *const *w = p->t;
    cudaStream_t s = stream_of(g);
    char unit[32];
    snprintf(unit, sizeof unit, "h.%d", l);
    CU(gptk_layernorm_fwd(a->ln1, a->ln1_mean, a->ln1_rstd, x, w[GPT_LN1_W], w[GPT_LN1_B], N, C, s),
       "launching layernorm_fwd", "ln_1");
    if (linear_fwd(g, a->qkv, a->ln1, w[GPT_QKV_W], w[GPT_QKV_B], N, C, 3 * C, unit, "c_attn"))
        return -1;
    gpt_gemm_t pl = gpt_gemm_attention(GPT_GEMM_ATT_SCORES, B, T, C, NH);
    if (gemm(g, &pl, a->qkv, a->qkv, a->att, unit, "attention scores")) return -1;
    CU(gptk_softmax_causal_fwd(a->att, (size_t)B * NH * T, T, att_scale(g), s),
       "launching softmax_causal_fwd", "attention");
    pl = gpt_gemm_attention(GPT_GEMM_ATT_OUT, B, T, C, NH);
    if (gemm(g, &pl, a->qkv, a->att, a->atty, unit, "attention output")) return -1;
    if (linear_fwd(g, a->attproj, a->atty, w[GPT_ATTPROJ_W], w[GPT_ATTPROJ_B], N, C, C, unit,
                   "attn.c_proj"))
        return -1;
    CU(gptk_residual_fwd(a->res2, x, a->attproj, nc, s), "launching residual_fwd", "res2");
    CU(gptk_layernorm_fwd(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w[GPT_LN2_W], w[GPT_LN2_B], N,
                          C, s),
       "launching layernorm_fwd", "ln_2");
    if (linear_fwd(g, a->fch, a->ln2, w[GPT_FC_W], w[GPT_FC_B], N, C, 4 * C, unit, "mlp.c_fc"))
        return -1;
    CU(gptk_gelu_fwd(a->fch_gelu, a->fch, 4 * nc, s), "launching gelu_fwd", "mlp");
    if (linear_fwd(g, a->fcproj, a->fch_gelu, w[GPT_FCPROJ_W], w[GPT_FCPROJ_B], N, 4 * C, C, unit,
                   "mlp.c_proj"))
        return -1;
    CU(gptk_residual_fwd(a->res3, a->res2, a->fcproj, nc, s), "launching residual_fwd", "res3");
    return 0;
}

int gpt_cuda_forward_lnf(gpt_cuda_t *g, const float *lnf_w, const float *lnf_b, int B, int T) {
    if (check_shape(g, B, T, "gpt_cuda_forward_lnf")) return -1;
    int N = B * T, C = g->cfg.d_model;
    CU(gptk_layernorm_fwd(g->lnf, g->lnf_mean, g->lnf_rstd, block_input(g, g->cfg.layers), lnf_w,
                          lnf_b, N, C, stream_of(g)),
       "launching layernorm_fwd", "ln_f");
    return 0;
}

int gpt_cuda_forward_head(gpt_cuda_t *g, const float *wte, int B, int T) {
    if (check_shape(g, B, T, "gpt_cuda_forward_head")) return -1;
    if (!g->have_targets) return fail(g, "gpt_cuda_forward_head: the loaded batch has no targets");
    int N = B * T, C = g->cfg.d_model, V = g->cfg.vocab;
    cudaStream_t s = stream_of(g);
    if (linear_fwd(g, g->probs, g->lnf, wte, NULL, N, C, V, "head", "logits")) return -1;
    CU(gptk_crossentropy(g->probs, g->dlogits, g->row_loss, g->loss, g->probs, g->tgt, N, V,
                         1.0f / (float)N, s),
       "launching crossentropy", "the loss");
    CU(cudaMemcpyAsync(g->loss_host, g->loss, sizeof(double), cudaMemcpyDeviceToHost, s),
       "cudaMemcpyAsync", "the mean loss to the host");
    CU(cudaEventRecord((cudaEvent_t)g->loss_ready, s), "cudaEventRecord", "after the loss");
    return 0;
}

int gpt_cuda_loss_value(gpt_cuda_t *g, double *loss_p) {
    CU(cudaEventSynchronize((cudaEvent_t)g->loss_ready), "cudaEventSynchronize",
       "waiting for the loss");
    *loss_p = *g->loss_host;
    return 0;
}

/* ---- backward ---- */

int gpt_cuda_backward_head(gpt_cuda_t *g, const float *wte, float *dwte, int B, int T) {
    if (check_shape(g, B, T, "gpt_cuda_backward_head")) return -1;
    int N = B * T, C = g->cfg.d_model, V = g->cfg.vocab;
    /* dln = dlogits wte (gpt_model.c: into a zeroed dln), dwte += dlogits^T lnf */
    return linear_bwd(g, g->dln, dwte, NULL, g->dlogits, g->lnf, wte, N, C, V, "head", "logits");
}

int gpt_cuda_backward_lnf(gpt_cuda_t *g, const float *lnf_w, float *dlnf_w, float *dlnf_b, int B,
                          int T) {
    if (check_shape(g, B, T, "gpt_cuda_backward_lnf")) return -1;
    int N = B * T, C = g->cfg.d_model;
    cudaStream_t s = stream_of(g);
    CU(cudaMemsetAsync(g->dres, 0, (size_t)N * C * sizeof(float), s), "cudaMemsetAsync",
       "ln_f's input gradient");
    CU(gptk_layernorm_bwd(g->dres, dlnf_w, dlnf_b, g->dln, block_input(g, g->cfg.layers), lnf_w,
                          g->lnf_mean, g->lnf_rstd, N, C, s),
       "launching layernorm_bwd", "ln_f");
    return 0;
}

int gpt_cuda_backward_block(gpt_cuda_t *g, int l, const gpt_block_params_t *p,
                            gpt_block_tensors_t *grads, int B, int T) {
    if (check_shape(g, B, T, "gpt_cuda_backward_block")) return -1;
    if (l < 0 || l >= g->cfg.layers)
        return fail(g, "gpt_cuda_backward_block: block %d, expected 0..%d", l, g->cfg.layers - 1);
    int C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
    size_t nc = (size_t)N * C, bytes = nc * sizeof(float);
    gpt_block_acts_t *a = &g->blocks[l];
    const float *x = block_input(g, l);
    const float *const *w = p->t;
    float *const *dw = grads->t;
    cudaStream_t s = stream_of(g);
    char unit[32];
    snprintf(unit, sizeof unit, "h.%d", l);
    /* res3 = res2 + fcproj: both get dres (dfcproj is dres itself; dres_mid
     * a copy, which ln_2's backward adds into) */
    CU(cudaMemcpyAsync(g->dres_mid, g->dres, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync",
       "res3's gradient");
    if (linear_bwd(g, g->dfch_gelu, dw[GPT_FCPROJ_W], dw[GPT_FCPROJ_B], g->dres, a->fch_gelu,
                   w[GPT_FCPROJ_W], N, 4 * C, C, unit, "mlp.c_proj backward"))
        return -1;
    CU(gptk_gelu_bwd(g->dfch, a->fch, g->dfch_gelu, 4 * nc, s), "launching gelu_bwd", "mlp");
    if (linear_bwd(g, g->dln, dw[GPT_FC_W], dw[GPT_FC_B], g->dfch, a->ln2, w[GPT_FC_W], N, C, 4 * C,
                   unit, "mlp.c_fc backward"))
        return -1;
    CU(gptk_layernorm_bwd(g->dres_mid, dw[GPT_LN2_W], dw[GPT_LN2_B], g->dln, a->res2, w[GPT_LN2_W],
                          a->ln2_mean, a->ln2_rstd, N, C, s),
       "launching layernorm_bwd", "ln_2");
    /* res2 = x + attproj: dres_in starts as a copy, attproj's gradient is dres_mid */
    CU(cudaMemcpyAsync(g->dres_in, g->dres_mid, bytes, cudaMemcpyDeviceToDevice, s),
       "cudaMemcpyAsync", "res2's gradient");
    if (linear_bwd(g, g->datty, dw[GPT_ATTPROJ_W], dw[GPT_ATTPROJ_B], g->dres_mid, a->atty,
                   w[GPT_ATTPROJ_W], N, C, C, unit, "attn.c_proj backward"))
        return -1;
    /* attention: dA = dy V^T, dV = A^T dy, dS = softmax backward, dQ = dS K, dK = dS^T Q */
    gpt_gemm_t pl = gpt_gemm_attention(GPT_GEMM_ATT_DA, B, T, C, NH);
    if (gemm(g, &pl, a->qkv, g->datty, g->datt, unit, "attention dA")) return -1;
    pl = gpt_gemm_attention(GPT_GEMM_ATT_DV, B, T, C, NH);
    if (gemm(g, &pl, g->datty, a->att, g->dqkv, unit, "attention dV")) return -1;
    CU(gptk_softmax_causal_bwd(g->datt, a->att, (size_t)B * NH * T, T, att_scale(g), s),
       "launching softmax_causal_bwd", "attention");
    pl = gpt_gemm_attention(GPT_GEMM_ATT_DQ, B, T, C, NH);
    if (gemm(g, &pl, a->qkv, g->datt, g->dqkv, unit, "attention dQ")) return -1;
    pl = gpt_gemm_attention(GPT_GEMM_ATT_DK, B, T, C, NH);
    if (gemm(g, &pl, a->qkv, g->datt, g->dqkv, unit, "attention dK")) return -1;
    if (linear_bwd(g, g->dln, dw[GPT_QKV_W], dw[GPT_QKV_B], g->dqkv, a->ln1, w[GPT_QKV_W], N, C,
                   3 * C, unit, "c_attn backward"))
        return -1;
    CU(gptk_layernorm_bwd(g->dres_in, dw[GPT_LN1_W], dw[GPT_LN1_B], g->dln, x, w[GPT_LN1_W],
                          a->ln1_mean, a->ln1_rstd, N, C, s),
       "launching layernorm_bwd", "ln_1");
    /* the input's gradient becomes the next (lower) block's output gradient */
    float *t = g->dres;
    g->dres = g->dres_in;
    g->dres_in = t;
    return 0;
}

int gpt_cuda_backward_embed(gpt_cuda_t *g, float *dwte, float *dwpe, int B, int T) {
    if (check_shape(g, B, T, "gpt_cuda_backward_embed")) return -1;
    CU(gptk_embed_bwd(dwte, dwpe, g->dres, g->emb_ids, g->emb_start, g->emb_rows, g->emb_unique, B,
                      T, g->cfg.d_model, stream_of(g)),
       "launching embed_bwd", "embed");
    return 0;
}

int gpt_cuda_sync(gpt_cuda_t *g) {
    CU(cudaStreamSynchronize(stream_of(g)), "cudaStreamSynchronize", "the GPT's stream");
    return 0;
}

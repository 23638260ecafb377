/*
 * examples/gpt/gpt_cuda.h — the GPT of gpt_model.h on a CUDA device: the
 * same per-unit passes (embed, block l, ln_f, the tied head and the loss,
 * and their backward in reverse), the same shapes, parameters and
 * "gradients are ADDED" contract, with the parameters, gradients and
 * activations in device memory. Matrix products are cuBLAS sgemm in
 * float32 (CUBLAS_COMPUTE_32F, never TF32; the attention's as one
 * strided-batched product per head over the sequences, gpt_cuda_gemm.h);
 * everything else is small kernels (gpt_cuda_kernels.cu) on the
 * arithmetic of gpt_math.h. Everything is enqueued on one stream; the
 * only host waits are gpt_cuda_loss_value and gpt_cuda_sync.
 *
 * What matches gpt_model.c: every element-, row- and column-wise step
 * computes the same float/double operations in the same order (checked on
 * the host by tests/unit/test_gpt_cuda_math.c), up to the device's fused
 * multiply-adds and CUDA's expf/log; the products sum in cuBLAS's order.
 * So the two agree to float rounding, not bit for bit
 * (tests/gpu/gpt_cuda.test compares acx-gpt's losses on both).
 *
 * Plain C interface with no acx dependency (like gpt_model.h) and no CUDA
 * types. Every function returns 0 on success and -1 on failure, with the
 * reason in g->err, naming the CUDA or cuBLAS call and what it was doing,
 * e.g. "cublasGemmStridedBatchedEx (h.2 attention scores, 64 x 64 x 32 x 16)
 * failed: CUBLAS_STATUS_EXECUTION_FAILED: ...". A failed launch or an
 * asynchronous device fault may surface only at the next call that waits.
 *
 * Compiled only in builds with CUDA and cuBLAS (Makefile.am).
 */
#ifndef ACX_EXAMPLE_GPT_CUDA_H
#define ACX_EXAMPLE_GPT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_model.h"

/* gpt_cuda_init flags */
#define GPT_CUDA_PEDANTIC 1 /* cuBLAS in CUBLAS_COMPUTE_32F_PEDANTIC (slower; for tests) */

/* The device workspace for batches of up to max_B sequences of up to
 * cfg->seq_len tokens: gpt_workspace_t's buffers in device memory (same
 * names and shapes), plus what the device side needs to receive a batch
 * and hand back the loss. Fields are read-only to callers; device pointers
 * may be copied from (tests do) after gpt_cuda_sync. */
typedef struct gpt_cuda {
    gpt_config_t cfg;
    int max_B, device, flags;
    void *stream;     /* cudaStream_t: every call's work goes here */
    int own_stream;   /* created by gpt_cuda_init (destroyed by gpt_cuda_free) */
    void *cublas;     /* cublasHandle_t, bound to stream */
    void *loss_ready; /* cudaEvent_t recorded after the loss is copied out */
    /* the batch: tokens and targets [N], the embedding's scatter plan
     * (gptm_embed_plan: ids [V], start [V+1], rows [N]), built on the host
     * in host_plan (pageable: its copy returns once staged) */
    int32_t *tok, *tgt, *emb_ids, *emb_start, *emb_rows;
    int32_t *host_plan; /* host [V count + V ids + V+1 start + N rows] */
    int emb_unique;     /* U of the loaded batch */
    int have_targets;
    /* activations (device), as gpt_workspace_t */
    float *encoded;
    gpt_block_acts_t *blocks; /* [L] (the array on the host, the buffers on the device) */
    float *lnf, *lnf_mean, *lnf_rstd, *probs, *dlogits;
    float *dres, *dres_in, *dres_mid, *dln, *datty, *dfcproj, *dqkv, *dfch, *dfch_gelu;
    float *datt;       /* [B x NH x T x T]: d loss / d att, then d loss / d scores */
    double *row_loss;  /* [N] */
    double *loss;      /* [1]: the mean */
    double *loss_host; /* pinned [1] */
    size_t bytes;      /* device bytes of all the buffers above */
    char err[512];     /* why the last call failed */
} gpt_cuda_t;

/* Bind `device` (cudaSetDevice; -1: keep the current one), allocate the
 * workspace for up to max_B sequences, create a cuBLAS handle on `stream`
 * (a cudaStream_t, or NULL: one created here, blocking, destroyed by
 * gpt_cuda_free). flags: 0 or GPT_CUDA_PEDANTIC. On failure everything
 * allocated is freed and g->err says why. */
int gpt_cuda_init(gpt_cuda_t *g, const gpt_config_t *cfg, int max_B, int device, void *stream,
                  int flags);
/* Wait for the stream, then free what gpt_cuda_init allocated (g->err kept). */
void gpt_cuda_free(gpt_cuda_t *g);
/* The stream every call enqueues on (give it to acx_set_compute_stream). */
void *gpt_cuda_stream(const gpt_cuda_t *g);
/* 1 if p is device memory, 0 if host memory, -1 with g->err set on error. */
int gpt_cuda_is_device_pointer(gpt_cuda_t *g, const void *p);

/* Copy a batch to the device: tok and targets [B*T] (targets NULL: none;
 * then gpt_cuda_forward_head must not follow), every id < cfg->vocab
 * (checked: -1 names the first bad one). Builds the embedding backward's
 * plan on the host. The host arrays may be reused when this returns. */
int gpt_cuda_load_batch(gpt_cuda_t *g, const int32_t *tok, const int32_t *targets, int B, int T);

/* The forward passes of gpt_model.h on the loaded batch, in order. */
int gpt_cuda_forward_embed(gpt_cuda_t *g, const float *wte, const float *wpe, int B, int T);
int gpt_cuda_forward_block(gpt_cuda_t *g, int l, const gpt_block_params_t *p, int B, int T);
int gpt_cuda_forward_lnf(gpt_cuda_t *g, const float *lnf_w, const float *lnf_b, int B, int T);
/* logits = lnf wte^T, probabilities, the mean loss over the B*T targets
 * (kept on the device until gpt_cuda_loss_value) and dlogits =
 * (probs - onehot)/(B*T) in g->dlogits, the seed of backward. */
int gpt_cuda_forward_head(gpt_cuda_t *g, const float *wte, int B, int T);
/* The mean loss of the last gpt_cuda_forward_head: waits for it only. */
int gpt_cuda_loss_value(gpt_cuda_t *g, double *loss_p);

/* Backward in reverse order, ADDING into the device gradients, as
 * gpt_backward_head / _lnf / _block / _embed. */
int gpt_cuda_backward_head(gpt_cuda_t *g, const float *wte, float *dwte, int B, int T);
int gpt_cuda_backward_lnf(gpt_cuda_t *g, const float *lnf_w, float *dlnf_w, float *dlnf_b, int B,
                          int T);
int gpt_cuda_backward_block(gpt_cuda_t *g, int l, const gpt_block_params_t *p,
                            gpt_block_tensors_t *grads, int B, int T);
int gpt_cuda_backward_embed(gpt_cuda_t *g, float *dwte, float *dwpe, int B, int T);

/* Wait for everything enqueued so far; reports asynchronous device errors. */
int gpt_cuda_sync(gpt_cuda_t *g);

#endif

/*
 * examples/gpt/gpt_cuda_kernels.h — the elementwise, per-row and per-column
 * kernels of acx-gpt's device path (gpt_cuda.c), with C launchers;
 * everything but the matrix products (cuBLAS, gpt_cuda_gemm.h). Each kernel
 * is a grid-stride loop over the items of one gpt_math.h body, which is
 * what gpt_model.c computes for that item (see gpt_math.h for how they
 * differ: FMA contraction, CUDA's expf/log).
 *
 * Shapes as in gpt_model.h: row-major, N = B*T rows of C, V vocab.
 * Every launcher enqueues on `stream` and returns the launch's cudaError_t
 * (cudaGetLastError), not the kernel's outcome. Zero items launch nothing.
 */
#ifndef ACX_EXAMPLE_GPT_CUDA_KERNELS_H
#define ACX_EXAMPLE_GPT_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out [N x C] = wte[tok] + wpe[t]. */
cudaError_t gptk_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe,
                           int N, int T, int C, cudaStream_t stream);
/* dwte[ids[u]] += the rows rows[start[u]..start[u+1]) of dout, u < U
 * (gptm_embed_plan), and dwpe[t] += dout[b*T+t] over the B sequences. */
cudaError_t gptk_embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *ids,
                           const int32_t *start, const int32_t *rows, int U, int B, int T, int C,
                           cudaStream_t stream);

/* LayerNorm of N rows of C: out, mean [N], rstd [N]. */
cudaError_t gptk_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C, cudaStream_t stream);
/* dinp += (input gradient), dw += sum dout xhat, db += sum dout. */
cudaError_t gptk_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C, cudaStream_t stream);

/* out [N x OC] += bias (every row). */
cudaError_t gptk_bias_add(float *out, const float *bias, int N, int OC, cudaStream_t stream);
/* dbias [OC] += the column sums of dout [N x OC]. */
cudaError_t gptk_bias_grad(float *dbias, const float *dout, int N, int OC, cudaStream_t stream);

/* out[i] = gelu(inp[i]); dinp[i] = gelu'(inp[i]) dout[i] (overwritten), i < n. */
cudaError_t gptk_gelu_fwd(float *out, const float *inp, size_t n, cudaStream_t stream);
cudaError_t gptk_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n,
                          cudaStream_t stream);

/* out[i] = a[i] + b[i], i < n. */
cudaError_t gptk_residual_fwd(float *out, const float *a, const float *b, size_t n,
                              cudaStream_t stream);

/* The rows (B*NH*T of T) of att in place: scores -> causal softmax weights
 * (fwd); d att -> d scores (bwd, given the weights att). */
cudaError_t gptk_softmax_causal_fwd(float *att, size_t rows, int T, float scale,
                                    cudaStream_t stream);
cudaError_t gptk_softmax_causal_bwd(float *datt, const float *att, size_t rows, int T, float scale,
                                    cudaStream_t stream);

/* Softmax cross-entropy of N rows of V logits against targets: probs (may
 * be logits), dlogits = scale (probs - onehot) (overwritten), row_loss [N];
 * then *mean = sum of row_loss in row order / N (one thread). */
cudaError_t gptk_crossentropy(float *probs, float *dlogits, double *row_loss, double *mean,
                              const float *logits, const int32_t *targets, int N, int V,
                              float scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif

/*
 * examples/gpt/gpt_cuda_kernels.cu — the kernels of gpt_cuda_kernels.h:
 * grid-stride loops over the per-item bodies of gpt_math.h (shared with the
 * CPU model and checked against it on the host by
 * tests/unit/test_gpt_cuda_math.c). The matrix products are cuBLAS
 * (gpt_cuda.c).
 *
 * One thread per item: an element, a row (layernorm, softmax, the loss)
 * or a column (the bias and layernorm parameter gradients, the
 * embedding's per-token sums), so every sum runs sequentially in
 * gpt_model.c's order and no kernel uses atomics: a run is reproducible
 * bit for bit on one GPU model. Launch shapes favour that simplicity over
 * speed: the model's time is in the products (cuBLAS), and the per-row
 * loops are over C, T or V (hundreds).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "gpt_cuda_kernels.h"
#include "gpt_math.h"

#define THREADS    256
#define MAX_BLOCKS 4096

static unsigned grid_for(size_t n) {
    size_t blocks = (n + THREADS - 1) / THREADS;
    return (unsigned)(blocks < MAX_BLOCKS ? (blocks > 0 ? blocks : 1) : MAX_BLOCKS);
}

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* Launch KERNEL over n items with the arguments that follow. */
#define LAUNCH(kernel, n, stream, ...)                                                             \
    do {                                                                                           \
        if ((n) == 0) break;                                                                       \
        kernel<<<grid_for(n), THREADS, 0, (stream)>>>(__VA_ARGS__);                                \
        cudaError_t gptk_ret_ = cudaGetLastError();                                                \
        if (gptk_ret_ != cudaSuccess) return gptk_ret_;                                            \
    } while (0)

/* ---- embedding ---- */

__global__ void embed_fwd_kernel(float *out, const int32_t *tok, const float *wte, const float *wpe,
                                 size_t n, int T, int C) {
    GRID_STRIDE(i, n) gptm_embed_fwd(i, out, tok, wte, wpe, T, C);
}

extern "C" cudaError_t gptk_embed_fwd(float *out, const int32_t *tok, const float *wte,
                                      const float *wpe, int N, int T, int C, cudaStream_t stream) {
    size_t n = (size_t)N * (size_t)C;
    LAUNCH(embed_fwd_kernel, n, stream, out, tok, wte, wpe, n, T, C);
    return cudaSuccess;
}

__global__ void embed_bwd_wte_kernel(float *dwte, const float *dout, const int32_t *ids,
                                     const int32_t *start, const int32_t *rows, size_t n, int C) {
    GRID_STRIDE(i, n) gptm_embed_bwd_wte(i, dwte, dout, ids, start, rows, C);
}

__global__ void embed_bwd_wpe_kernel(float *dwpe, const float *dout, size_t n, int B, int T,
                                     int C) {
    GRID_STRIDE(i, n) gptm_embed_bwd_wpe(i, dwpe, dout, B, T, C);
}

extern "C" cudaError_t gptk_embed_bwd(float *dwte, float *dwpe, const float *dout,
                                      const int32_t *ids, const int32_t *start, const int32_t *rows,
                                      int U, int B, int T, int C, cudaStream_t stream) {
    size_t nu = (size_t)U * (size_t)C, nt = (size_t)T * (size_t)C;
    LAUNCH(embed_bwd_wte_kernel, nu, stream, dwte, dout, ids, start, rows, nu, C);
    LAUNCH(embed_bwd_wpe_kernel, nt, stream, dwpe, dout, nt, B, T, C);
    return cudaSuccess;
}

/* ---- layernorm ---- */

__global__ void layernorm_fwd_kernel(float *out, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, size_t n, int C) {
    GRID_STRIDE(r, n) gptm_layernorm_fwd_row(r, out, mean, rstd, inp, w, b, C);
}

extern "C" cudaError_t gptk_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                          const float *w, const float *b, int N, int C,
                                          cudaStream_t stream) {
    LAUNCH(layernorm_fwd_kernel, (size_t)N, stream, out, mean, rstd, inp, w, b, (size_t)N, C);
    return cudaSuccess;
}

__global__ void layernorm_bwd_row_kernel(float *dinp, const float *dout, const float *inp,
                                         const float *w, const float *mean, const float *rstd,
                                         size_t n, int C) {
    GRID_STRIDE(r, n) gptm_layernorm_bwd_row(r, dinp, dout, inp, w, mean, rstd, C);
}

__global__ void layernorm_bwd_col_kernel(float *dw, float *db, const float *dout, const float *inp,
                                         const float *mean, const float *rstd, int N, size_t n) {
    GRID_STRIDE(c, n) gptm_layernorm_bwd_col(c, dw, db, dout, inp, mean, rstd, N, (int)n);
}

extern "C" cudaError_t gptk_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                                          const float *inp, const float *w, const float *mean,
                                          const float *rstd, int N, int C, cudaStream_t stream) {
    LAUNCH(layernorm_bwd_row_kernel, (size_t)N, stream, dinp, dout, inp, w, mean, rstd, (size_t)N,
           C);
    LAUNCH(layernorm_bwd_col_kernel, (size_t)C, stream, dw, db, dout, inp, mean, rstd, N,
           (size_t)C);
    return cudaSuccess;
}

/* ---- linear layers' bias ---- */

__global__ void bias_add_kernel(float *out, const float *bias, size_t n, int OC) {
    GRID_STRIDE(i, n) gptm_bias_add(i, out, bias, OC);
}

extern "C" cudaError_t gptk_bias_add(float *out, const float *bias, int N, int OC,
                                     cudaStream_t stream) {
    size_t n = (size_t)N * (size_t)OC;
    LAUNCH(bias_add_kernel, n, stream, out, bias, n, OC);
    return cudaSuccess;
}

/* neighbouring threads read neighbouring columns of a row (coalesced) */
__global__ void bias_grad_kernel(float *dbias, const float *dout, int N, size_t n) {
    GRID_STRIDE(j, n) gptm_bias_grad_col(j, dbias, dout, N, (int)n);
}

extern "C" cudaError_t gptk_bias_grad(float *dbias, const float *dout, int N, int OC,
                                      cudaStream_t stream) {
    LAUNCH(bias_grad_kernel, (size_t)OC, stream, dbias, dout, N, (size_t)OC);
    return cudaSuccess;
}

/* ---- GELU, residual ---- */

__global__ void gelu_fwd_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) out[i] = gptm_gelu(inp[i]);
}

extern "C" cudaError_t gptk_gelu_fwd(float *out, const float *inp, size_t n, cudaStream_t stream) {
    LAUNCH(gelu_fwd_kernel, n, stream, out, inp, n);
    return cudaSuccess;
}

__global__ void gelu_bwd_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    GRID_STRIDE(i, n) dinp[i] = gptm_gelu_grad(inp[i]) * dout[i];
}

extern "C" cudaError_t gptk_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n,
                                     cudaStream_t stream) {
    LAUNCH(gelu_bwd_kernel, n, stream, dinp, inp, dout, n);
    return cudaSuccess;
}

__global__ void residual_fwd_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

extern "C" cudaError_t gptk_residual_fwd(float *out, const float *a, const float *b, size_t n,
                                         cudaStream_t stream) {
    LAUNCH(residual_fwd_kernel, n, stream, out, a, b, n);
    return cudaSuccess;
}

/* ---- attention softmax ---- */

__global__ void softmax_causal_fwd_kernel(float *att, size_t n, int T, float scale) {
    GRID_STRIDE(r, n) gptm_softmax_causal_row(r, att, T, scale);
}

extern "C" cudaError_t gptk_softmax_causal_fwd(float *att, size_t rows, int T, float scale,
                                               cudaStream_t stream) {
    LAUNCH(softmax_causal_fwd_kernel, rows, stream, att, rows, T, scale);
    return cudaSuccess;
}

__global__ void softmax_causal_bwd_kernel(float *datt, const float *att, size_t n, int T,
                                          float scale) {
    GRID_STRIDE(r, n) gptm_softmax_causal_bwd_row(r, datt, att, T, scale);
}

extern "C" cudaError_t gptk_softmax_causal_bwd(float *datt, const float *att, size_t rows, int T,
                                               float scale, cudaStream_t stream) {
    LAUNCH(softmax_causal_bwd_kernel, rows, stream, datt, att, rows, T, scale);
    return cudaSuccess;
}

/* ---- the loss ---- */

__global__ void crossentropy_kernel(float *probs, float *dlogits, double *row_loss,
                                    const float *logits, const int32_t *targets, size_t n, int V,
                                    float scale) {
    GRID_STRIDE(r, n) gptm_crossentropy_row(r, probs, dlogits, row_loss, logits, targets, V, scale);
}

/* The mean in row order, by one thread: gpt_crossentropy_fwd's sum. */
__global__ void mean_kernel(const double *row_loss, int N, double *mean) {
    double total = 0.0;
    for (int i = 0; i < N; i++)
        total += row_loss[i];
    *mean = total / N;
}

extern "C" cudaError_t gptk_crossentropy(float *probs, float *dlogits, double *row_loss,
                                         double *mean, const float *logits, const int32_t *targets,
                                         int N, int V, float scale, cudaStream_t stream) {
    if (N <= 0) return cudaSuccess;
    LAUNCH(crossentropy_kernel, (size_t)N, stream, probs, dlogits, row_loss, logits, targets,
           (size_t)N, V, scale);
    mean_kernel<<<1, 1, 0, stream>>>(row_loss, N, mean);
    return cudaGetLastError();
}

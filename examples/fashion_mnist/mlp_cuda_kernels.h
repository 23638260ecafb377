/*
 * examples/fashion_mnist/mlp_cuda_kernels.h — the elementwise and per-row
 * kernels of mlp_cuda.c (everything but the matrix products, which are
 * cuBLAS), with C launchers. Each computes what the matching loop of mlp.c
 * computes, with the same float operations in the same order (explicit _rn
 * intrinsics: nvcc may not contract them into FMAs), so given the same
 * inputs the results are bitwise mlp.c's; the double exp/log of the loss are
 * CUDA's (within 1 ulp of glibc's before rounding to float).
 *
 * Shapes as in mlp.h: row-major [B x features]. Every launcher enqueues on
 * `stream` and returns the launch's cudaError_t (cudaGetLastError), not the
 * kernel's outcome.
 */
#ifndef ACX_EXAMPLE_MLP_CUDA_KERNELS_H
#define ACX_EXAMPLE_MLP_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[i] = ((float)px[i] / 255 - mean) / std, i < n (mlp_load_input). */
cudaError_t mlpk_normalize(const uint8_t *px, float *x, size_t n, float mean, float std,
                           cudaStream_t stream);

/* out[i][j] = out[i][j] + b[j], then max(., 0) when relu (mlp_forward's
 * loop; -0 and NaN pass the ReLU unchanged, as `v < 0 ? 0 : v` does).
 * out [batch x fo]. */
cudaError_t mlpk_bias_act(float *out, const float *b, int batch, int fo, int relu,
                          cudaStream_t stream);

/* Softmax cross-entropy per row of logits [batch x k] against labels [batch]:
 * row_loss[i] = log(sum_j exp(z_ij - max_i)) - (z_i,label - max_i) in
 * double, dz[i][j] = (softmax_ij - onehot_ij) * inv_b in float; then
 * *mean = sum_i row_loss[i] (in row order) / batch (mlp_loss). */
cudaError_t mlpk_softmax_xent(const float *logits, const uint8_t *labels, int batch, int k,
                              float inv_b, float *dz, double *row_loss, double *mean,
                              cudaStream_t stream);

/* db[j] += sum over i (in order 0..batch-1) of dout[i][j]; dout [batch x fo]
 * (mlp_backward_layer's bias loop: one float add per sample). */
cudaError_t mlpk_bias_grad(const float *dout, float *db, int batch, int fo, cudaStream_t stream);

/* d[i] = 0 where in[i] <= 0 (the ReLU's backward: in is the post-ReLU
 * activation, so a unit that was cut passes no gradient), i < n. */
cudaError_t mlpk_relu_mask(const float *in, float *d, size_t n, cudaStream_t stream);

/* correct[i] = argmax_j z[i][j] == labels[i] (first maximum wins; a NaN
 * never wins), logits [n x k] (mlp_count_correct). */
cudaError_t mlpk_argmax_correct(const float *logits, const uint8_t *labels, int n, int k,
                                uint8_t *correct, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif

/*
 * benchmarks/train_gpu_kernels.h — the elementwise and per-row kernels of
 * acx-bench-train-gpu (train_gpu.c): the float32 -> bfloat16 cast of the
 * weights, ReLU and its backward on bfloat16 activations, the mean squared
 * error and its gradient, and a pseudo-random fill for the GEMM-rate
 * buffers. The matrix products are cuBLAS (train_gpu.c).
 *
 * bfloat16 values cross this interface as uint16_t bit patterns (the C side
 * needs no CUDA bfloat16 type). Shapes are row-major [rows x features].
 * Every launcher enqueues on `stream` and returns the launch's cudaError_t
 * (cudaGetLastError), not the kernel's outcome.
 *
 * Each kernel computes what the CPU reference in train_gpu.c computes, with
 * the same float operations (explicit _rn intrinsics: nvcc may not contract
 * them into FMAs) and the same round-to-nearest-even bfloat16 conversion.
 */
#ifndef ACX_BENCH_TRAIN_GPU_KERNELS_H
#define ACX_BENCH_TRAIN_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[i] = bfloat16(x[i]) rounded to nearest even, i < n. */
cudaError_t tgk_f32_to_bf16(const float *x, uint16_t *y, size_t n, cudaStream_t stream);

/* x[i] = x[i] < 0 ? 0 : x[i] on bfloat16 values (-0 and NaN pass), i < n. */
cudaError_t tgk_relu_bf16(uint16_t *x, size_t n, cudaStream_t stream);

/* d[i] = 0 where act[i] <= 0 (act is the post-ReLU activation: a unit the
 * ReLU cut passes no gradient), i < n; bfloat16 both. */
cudaError_t tgk_relu_mask_bf16(const uint16_t *act, uint16_t *d, size_t n, cudaStream_t stream);

/* Mean squared error of y [batch x k] (bfloat16) against t [batch x k]
 * (float32): with e = (float)y - t (one float subtraction),
 *   dy[i][j] = bfloat16(e * inv_b)                (d loss / d y; inv_b = 1/batch)
 *   row_loss[i] = sum_j (double)e * e             (a fixed reduction tree per row)
 *   *loss = (sum_i row_loss[i]) / (2 batch)       (a fixed reduction tree)
 * so loss = 1/(2 batch) * sum_ij (y - t)^2. Deterministic: the trees depend
 * on batch and k only. */
cudaError_t tgk_mse_bf16(const uint16_t *y, const float *t, int batch, int k, float inv_b,
                         uint16_t *dy, double *row_loss, double *loss, cudaStream_t stream);

/* x[i] = a bfloat16 value in [-1, 1] from a hash of (seed, i), i < n: k/32768
 * for k in -32768..32767 rounded to bfloat16, where every k/32768 >= 1 - 2^-9
 * rounds up to 1.0, so 1 is included (the GEMM-rate benchmark's operands:
 * realistic bit patterns, no zeros runs). */
cudaError_t tgk_fill_bf16(uint16_t *x, size_t n, uint64_t seed, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif

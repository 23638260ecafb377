/*
 * benchmarks/train_gpu_kernels.cu — the kernels of train_gpu_kernels.h:
 * the weight cast, ReLU forward and backward on bfloat16, the mean squared
 * error, the pseudo-random fill. The matrix products are cuBLAS
 * (train_gpu.c).
 *
 * Rounding: float operations are explicit _rn intrinsics (nvcc contracts
 * a*b + c into an FMA by default) and conversions to bfloat16 are
 * __float2bfloat16_rn, so the results are what the CPU reference in
 * train_gpu.c computes. These kernels are memory-bound and small next to
 * the GEMMs; launch shapes favour simplicity (grid-stride loops, one block
 * per row for the loss).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "train_gpu_kernels.h"

#define THREADS     256
#define MAX_BLOCKS  8192
#define ROW_THREADS 256  /* the loss's per-row reduction tree */
#define SUM_THREADS 1024 /* the loss's batch reduction tree */

static unsigned grid_for(size_t n) {
    size_t blocks = (n + THREADS - 1) / THREADS;
    return (unsigned)(blocks < MAX_BLOCKS ? (blocks > 0 ? blocks : 1) : MAX_BLOCKS);
}

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

__device__ static uint16_t bf16_bits(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__device__ static float bf16_value(uint16_t bits) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
}

/* ---- weights ---- */

__global__ void f32_to_bf16_kernel(const float *x, uint16_t *y, size_t n) {
    GRID_STRIDE(i, n) y[i] = bf16_bits(x[i]);
}

extern "C" cudaError_t tgk_f32_to_bf16(const float *x, uint16_t *y, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    f32_to_bf16_kernel<<<grid_for(n), THREADS, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}

/* ---- ReLU ---- */

__global__ void relu_kernel(uint16_t *x, size_t n) {
    GRID_STRIDE(i, n) if (bf16_value(x[i]) < 0.0f) x[i] = 0;
}

extern "C" cudaError_t tgk_relu_bf16(uint16_t *x, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    relu_kernel<<<grid_for(n), THREADS, 0, stream>>>(x, n);
    return cudaGetLastError();
}

__global__ void relu_mask_kernel(const uint16_t *act, uint16_t *d, size_t n) {
    GRID_STRIDE(i, n) if (bf16_value(act[i]) <= 0.0f) d[i] = 0;
}

extern "C" cudaError_t tgk_relu_mask_bf16(const uint16_t *act, uint16_t *d, size_t n,
                                          cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    relu_mask_kernel<<<grid_for(n), THREADS, 0, stream>>>(act, d, n);
    return cudaGetLastError();
}

/* ---- loss ---- */

/* Sum of the block's `v` in a fixed tree (blockDim.x a power of two); the
 * result in thread 0. */
__device__ static double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    return sh[0];
}

/* One block per row i. */
__global__ void mse_row_kernel(const uint16_t *y, const float *t, int k, float inv_b, uint16_t *dy,
                               double *row_loss) {
    __shared__ double sh[ROW_THREADS];
    size_t row = (size_t)blockIdx.x * (size_t)k;
    double acc = 0.0;
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        float e = __fsub_rn(bf16_value(y[row + j]), t[row + j]);
        dy[row + j] = bf16_bits(__fmul_rn(e, inv_b));
        acc = __dadd_rn(acc, __dmul_rn((double)e, (double)e));
    }
    double s = block_sum(acc, sh);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = s;
}

/* One block: *loss = sum of row_loss / (2 batch). */
__global__ void mse_mean_kernel(const double *row_loss, int batch, double *loss) {
    __shared__ double sh[SUM_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < batch; i += blockDim.x)
        acc = __dadd_rn(acc, row_loss[i]);
    double s = block_sum(acc, sh);
    if (threadIdx.x == 0) *loss = __ddiv_rn(s, 2.0 * (double)batch);
}

extern "C" cudaError_t tgk_mse_bf16(const uint16_t *y, const float *t, int batch, int k,
                                    float inv_b, uint16_t *dy, double *row_loss, double *loss,
                                    cudaStream_t stream) {
    if (batch <= 0 || k <= 0) return cudaSuccess;
    mse_row_kernel<<<(unsigned)batch, ROW_THREADS, 0, stream>>>(y, t, k, inv_b, dy, row_loss);
    cudaError_t ret = cudaGetLastError();
    if (ret != cudaSuccess) return ret;
    mse_mean_kernel<<<1, SUM_THREADS, 0, stream>>>(row_loss, batch, loss);
    return cudaGetLastError();
}

/* ---- the GEMM-rate operands ---- */

__global__ void fill_kernel(uint16_t *x, size_t n, uint64_t seed) {
    GRID_STRIDE(i, n) {
        uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        /* k/32768 is in [-1, 1); rounded to bfloat16 in [-1, 1] (from 1 - 2^-9 up it is 1.0) */
        int k = (int)(z >> 48) - 32768; /* -32768 .. 32767 */
        x[i] = bf16_bits(__fdiv_rn((float)k, 32768.0f));
    }
}

extern "C" cudaError_t tgk_fill_bf16(uint16_t *x, size_t n, uint64_t seed, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    fill_kernel<<<grid_for(n), THREADS, 0, stream>>>(x, n, seed);
    return cudaGetLastError();
}

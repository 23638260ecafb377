/*
 * examples/fashion_mnist/mlp_cuda_kernels.cu — the kernels of
 * mlp_cuda_kernels.h: bias + ReLU, the ReLU's backward, the bias gradient,
 * softmax cross-entropy and its gradient, argmax accuracy, input
 * normalization. The matrix products are cuBLAS (mlp_cuda.c).
 *
 * Rounding: every float operation is an explicit _rn intrinsic, as in
 * device/cuda_kernels.cu: nvcc contracts a*b + c into an FMA by default, and the
 * intrinsics keep each operation rounded on its own, so the kernels compute
 * mlp.c's expression tree exactly (gcc on x86-64 does not contract: no FMA
 * in the baseline ISA). Division is IEEE (no --use_fast_math). The one
 * exception is the softmax: CUDA's double exp and log are accurate to about
 * 1 ulp, glibc's are (nearly) correctly rounded, so the softmax and the
 * loss agree with mlp.c's to double rounding before their float rounding,
 * not bitwise (tests/gpu/test_mlp_cuda.c compares with a tolerance).
 *
 * Sizes are small (B <= a few hundred, width <= 784): launch shapes favour
 * simplicity. The per-row and per-column kernels use one thread per row or
 * column so that sums run sequentially in mlp.c's order.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "mlp_cuda_kernels.h"

#define THREADS    256
#define MAX_BLOCKS 4096

static unsigned grid_for(size_t n) {
    size_t blocks = (n + THREADS - 1) / THREADS;
    return (unsigned)(blocks < MAX_BLOCKS ? (blocks > 0 ? blocks : 1) : MAX_BLOCKS);
}

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- forward ---- */

__global__ void normalize_kernel(const uint8_t *px, float *x, size_t n, float mean, float std) {
    GRID_STRIDE(i, n) x[i] = __fdiv_rn(__fsub_rn(__fdiv_rn((float)px[i], 255.0f), mean), std);
}

extern "C" cudaError_t mlpk_normalize(const uint8_t *px, float *x, size_t n, float mean, float std,
                                      cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    normalize_kernel<<<grid_for(n), THREADS, 0, stream>>>(px, x, n, mean, std);
    return cudaGetLastError();
}

__global__ void bias_act_kernel(float *out, const float *b, size_t n, int fo, int relu) {
    GRID_STRIDE(i, n) {
        float v = __fadd_rn(out[i], b[i % (size_t)fo]);
        out[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

extern "C" cudaError_t mlpk_bias_act(float *out, const float *b, int batch, int fo, int relu,
                                     cudaStream_t stream) {
    size_t n = (size_t)batch * (size_t)fo;
    if (n == 0) return cudaSuccess;
    bias_act_kernel<<<grid_for(n), THREADS, 0, stream>>>(out, b, n, fo, relu);
    return cudaGetLastError();
}

/* ---- loss ---- */

/* One thread per row; k is 10 here, so the row's loops are short. */
__global__ void softmax_xent_kernel(const float *logits, const uint8_t *labels, int batch, int k,
                                    float inv_b, float *dz, double *row_loss) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < batch; i += gridDim.x * blockDim.x) {
        const float *z = logits + (size_t)i * k;
        float *g = dz + (size_t)i * k;
        int label = labels[i];
        float zmax = z[0];
        for (int j = 1; j < k; j++)
            zmax = z[j] > zmax ? z[j] : zmax;
        double sum = 0.0;
        for (int j = 0; j < k; j++)
            sum = __dadd_rn(sum, exp((double)__fsub_rn(z[j], zmax)));
        double log_sum = log(sum);
        row_loss[i] = __dsub_rn(log_sum, (double)__fsub_rn(z[label], zmax));
        for (int j = 0; j < k; j++) {
            float s = (float)exp(__dsub_rn((double)__fsub_rn(z[j], zmax), log_sum));
            g[j] = __fmul_rn(__fsub_rn(s, j == label ? 1.0f : 0.0f), inv_b);
        }
    }
}

/* The batch mean in row order, by one thread: B additions, bitwise mlp.c's. */
__global__ void mean_kernel(const double *row_loss, int batch, double *mean) {
    double total = 0.0;
    for (int i = 0; i < batch; i++)
        total = __dadd_rn(total, row_loss[i]);
    *mean = __ddiv_rn(total, (double)batch);
}

extern "C" cudaError_t mlpk_softmax_xent(const float *logits, const uint8_t *labels, int batch,
                                         int k, float inv_b, float *dz, double *row_loss,
                                         double *mean, cudaStream_t stream) {
    if (batch <= 0) return cudaSuccess;
    softmax_xent_kernel<<<grid_for((size_t)batch), THREADS, 0, stream>>>(logits, labels, batch, k,
                                                                         inv_b, dz, row_loss);
    cudaError_t ret = cudaGetLastError();
    if (ret != cudaSuccess) return ret;
    mean_kernel<<<1, 1, 0, stream>>>(row_loss, batch, mean);
    return cudaGetLastError();
}

/* ---- backward ---- */

/* One thread per output feature j, summing the batch in order; neighbouring
 * threads read neighbouring columns of a row (coalesced). */
__global__ void bias_grad_kernel(const float *dout, float *db, int batch, int fo) {
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < fo; j += gridDim.x * blockDim.x) {
        float acc = db[j];
        for (int i = 0; i < batch; i++)
            acc = __fadd_rn(acc, dout[(size_t)i * fo + j]);
        db[j] = acc;
    }
}

extern "C" cudaError_t mlpk_bias_grad(const float *dout, float *db, int batch, int fo,
                                      cudaStream_t stream) {
    if (fo <= 0 || batch <= 0) return cudaSuccess;
    bias_grad_kernel<<<grid_for((size_t)fo), THREADS, 0, stream>>>(dout, db, batch, fo);
    return cudaGetLastError();
}

__global__ void relu_mask_kernel(const float *in, float *d, size_t n) {
    GRID_STRIDE(i, n) if (in[i] <= 0.0f) d[i] = 0.0f;
}

extern "C" cudaError_t mlpk_relu_mask(const float *in, float *d, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    relu_mask_kernel<<<grid_for(n), THREADS, 0, stream>>>(in, d, n);
    return cudaGetLastError();
}

/* ---- accuracy ---- */

__global__ void argmax_kernel(const float *logits, const uint8_t *labels, int n, int k,
                              uint8_t *correct) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float *z = logits + (size_t)i * k;
        int best = 0;
        for (int j = 1; j < k; j++)
            if (z[j] > z[best]) best = j;
        correct[i] = (uint8_t)(best == labels[i]);
    }
}

extern "C" cudaError_t mlpk_argmax_correct(const float *logits, const uint8_t *labels, int n, int k,
                                           uint8_t *correct, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    argmax_kernel<<<grid_for((size_t)n), THREADS, 0, stream>>>(logits, labels, n, k, correct);
    return cudaGetLastError();
}

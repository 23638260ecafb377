/*
 * device/cuda_kernels.h — device kernels for the training step (library-private):
 * the AdamW/Adam/SGD update of a flat shard, float32 <-> float16/bfloat16
 * casts, the loss scaler's inf/NaN check and scaling, and gradient
 * clipping's clamp and reductions (sum of squares, max |x|).
 *
 * Every function is a host-callable launcher with a C interface (the
 * implementation, device/cuda_kernels.cu, is compiled by nvcc): pointers are device
 * memory (cudaMalloc), counts are elements, and `stream` is a cudaStream_t
 * passed as void * (NULL: the legacy default stream) so that C code needs no
 * CUDA header. The work is enqueued on the stream and the launcher returns
 * at once: results are valid once the stream has reached that point. A
 * launcher returns ACX_ERR_CUDA (cudaGetErrorString in the message) when the
 * launch fails — errors of the kernel itself surface at the next
 * synchronization, as everywhere in CUDA — and ACX_ERR_INVALID_ARG for NULL
 * pointers with a non-zero count. n == 0 enqueues nothing (the reductions
 * still write their result).
 *
 * Each kernel computes exactly what its CPU counterpart computes, so that a
 * GPU rank and a CPU rank (or a checkpoint moved between them) agree:
 *   - optimizer steps: base/optim_kernels.c, operation by operation in
 *     float with the same coefficients (computed on the host in double, as
 *     torch's Python floats); `madd` says whether a multiply-add is fused
 *     (one rounding: torch's vectorized and CUDA kernels) or not (two: the CPU
 *     kernels of a build without FMA). With the same choice as the CPU build
 *     (ACX_CUDA_MADD_OF_HOST) the result is bitwise the CPU's; subnormals are
 *     kept (no FTZ), as in acx_kernel_*_ieee;
 *   - casts: base/half.h's rules bit for bit (round to nearest even,
 *     float16 overflow from 65520, subnormals, NaN quieted with its payload);
 *   - inf/NaN check and unscale: runtime/scaler.c;
 *   - clamp: runtime/clip.c's clip-by-value loop (comparisons: exact);
 *   - norms: runtime/clip.c's sums in double; the order of the additions is
 *     a fixed tree (per block, then over blocks) that depends on n only, so
 *     the result is the same on every run and every device.
 * Users: device/ops_cuda.c (the device table behind device-resident
 * state, device/ops.h) and tests/gpu.
 */
#ifndef ACX_CUDA_KERNELS_H
#define ACX_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "acx/optim.h"
#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- optimizer steps ---- */

typedef enum acx_cuda_madd {
    ACX_CUDA_MADD_SEPARATE = 0, /* a*b + c rounded twice */
    ACX_CUDA_MADD_FUSED = 1     /* fmaf(a, b, c): rounded once */
} acx_cuda_madd_t;

/* The choice base/optim_kernels.c made when it was compiled (its MADD:
 * fused where the target has FMA). Same compiler flags, same macro. */
#if defined(__FMA__)
#define ACX_CUDA_MADD_OF_HOST ACX_CUDA_MADD_FUSED
#else
#define ACX_CUDA_MADD_OF_HOST ACX_CUDA_MADD_SEPARATE
#endif

/* torch.optim.Adam (decoupled == 0) or AdamW (decoupled != 0) on p[n] with
 * gradients g[n], exp_avg m[n] and exp_avg_sq v[n] updated in place; t is
 * the step number from 1, lr overrides hp->lr. Formulas and rounding as
 * acx_kernel_adam_ieee (base/optim_kernels.h). One launch over the whole
 * shard. p, g, m, v: distinct device arrays. */
acx_status_t acx_cuda_adam_step(float *p, const float *g, float *m, float *v, size_t n,
                                const acx_adam_hparams_t *hp, double lr, int64_t t, int decoupled,
                                acx_cuda_madd_t madd, void *stream);

/* torch.optim.SGD on p[n] as acx_kernel_sgd_ieee: buf[n] is the momentum
 * buffer (may be NULL when hp->momentum == 0), first_step initializes it. */
acx_status_t acx_cuda_sgd_step(float *p, const float *g, float *buf, size_t n,
                               const acx_sgd_hparams_t *hp, double lr, int first_step,
                               acx_cuda_madd_t madd, void *stream);

/* ---- casts (dtype: ACX_DTYPE_FLOAT16 or ACX_DTYPE_BFLOAT16) ---- */

/* dst[n] (16-bit words of dtype) = src[n] rounded as half.h's
 * acx_f16_from_f32 / acx_bf16_from_f32. src and dst must not overlap.
 * Errors: ACX_ERR_INVALID_ARG for another dtype. */
acx_status_t acx_cuda_half_from_f32(acx_dtype_t dtype, const float *src, uint16_t *dst, size_t n,
                                    void *stream);

/* dst[n] = src[n] widened exactly (NaN quieted), as acx_f16_to_f32 /
 * acx_bf16_to_f32. */
acx_status_t acx_cuda_half_to_f32(acx_dtype_t dtype, const uint16_t *src, float *dst, size_t n,
                                  void *stream);

/* dst[n] = src[n] rounded to dtype (as acx_cuda_half_from_f32) and widened
 * back (as acx_cuda_half_to_f32): half.h's acx_half_round_f32_n, the compute
 * copies of mixed precision kept as float32. src == dst is allowed (each
 * element is read once, then written). */
acx_status_t acx_cuda_half_round_f32(acx_dtype_t dtype, const float *src, float *dst, size_t n,
                                     void *stream);

/* ---- loss scaling ---- */

/* *flag = 1 if any of x[n] is inf or NaN; *flag is left as it was
 * otherwise (the caller zeroes it once, then may check several buffers). */
acx_status_t acx_cuda_nonfinite_check(const float *x, size_t n, int *flag, void *stream);

/* *flag = 1 if any x[i] or x[i] * inv (one float multiplication) is inf or
 * NaN: runtime/scaler.c's whole test, which also catches a finite gradient
 * whose unscaled value overflows (scales below 1). *flag as above. */
acx_status_t acx_cuda_nonfinite_check_scaled(const float *x, size_t n, float inv, int *flag,
                                             void *stream);

/* dst[i] += src[i] widened to float32 (one float addition); src is float32,
 * float16 or bfloat16: sharding/sharded.c's reduced segment added into the
 * gradient shard. Errors: ACX_ERR_INVALID_ARG for another dtype. */
acx_status_t acx_cuda_accumulate(acx_dtype_t dtype, const void *src, float *dst, size_t n,
                                 void *stream);

/* x[i] = x[i] * scale (one float multiplication, as runtime/scaler.c's unscale). */
acx_status_t acx_cuda_scale(float *x, size_t n, float scale, void *stream);

/* ---- gradient clipping ---- */

/* x[i] = x[i] < -v ? -v : (x[i] > v ? v : x[i]) in place (v >= 0):
 * runtime/clip.c's clip-by-value loop, torch.clamp(x, -v, v). Comparisons
 * only, so exact: NaN stays NaN (not fminf/fmaxf, which would drop it),
 * +-inf become +-v, -0.0 stays -0.0. */
acx_status_t acx_cuda_clamp(float *x, size_t n, float v, void *stream);

/* ---- norms (gradient clipping) ---- */

/* Doubles of device workspace a norm launch needs. */
#define ACX_CUDA_NORM_WORKSPACE 1024

/* *result (one device double) = sum of (double)x[i]^2 over i < n; or, for
 * the max form, max |x[i]| (NaN if any x[i] is NaN, as runtime/clip.c's
 * loop). workspace: ACX_CUDA_NORM_WORKSPACE device doubles, not shared with
 * another launch in flight. Deterministic: the same bits on every run. */
acx_status_t acx_cuda_sum_squares(const float *x, size_t n, double *workspace, double *result,
                                  void *stream);
acx_status_t acx_cuda_max_abs(const float *x, size_t n, double *workspace, double *result,
                              void *stream);

#ifdef __cplusplus
}
#endif
#endif /* ACX_CUDA_KERNELS_H */

/*
 * device/cuda_kernels.cu — the device kernels of device/cuda_kernels.h and their host
 * launchers: optimizer steps, 16-bit casts, the inf/NaN check and scaling,
 * the clip-by-value clamp and the deterministic norms.
 *
 * Leaves to others: where the arrays live and when to call (the sharding
 * layer), the CPU versions these must match (base/optim_kernels.c,
 * base/half.h, runtime/scaler.c, runtime/clip.c), moving data
 * between ranks (collectives/nccl/).
 *
 * Rounding: every float operation is written as an explicit _rn intrinsic
 * (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn; __fmaf_rn where a
 * multiply-add is fused on purpose). nvcc contracts a*b + c into an FMA by
 * default (--fmad=true), and the intrinsics are the documented way to keep
 * a product rounded on its own; with them the kernels compute the CPU's
 * expression tree exactly. Division and square root are IEEE correctly
 * rounded (as are the CPU's divss/sqrtss), and without --use_fast_math
 * subnormals are neither flushed on input nor on output.
 *
 * Launch shape: grid-stride loops, 256 threads per block, at most
 * MAX_BLOCKS blocks — enough to fill an H200 (132 SMs x 2048 threads) and
 * independent of the device, which the norms rely on for determinism.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

extern "C" {
#include "base/error.h"
}
#include "device/cuda_check.h"
#include "device/cuda_kernels.h"

#define THREADS    256
#define MAX_BLOCKS 8192

static unsigned grid_for(size_t n) {
    size_t blocks = (n + THREADS - 1) / THREADS;
    return (unsigned)(blocks < MAX_BLOCKS ? (blocks > 0 ? blocks : 1) : MAX_BLOCKS);
}

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* A launch just enqueued: report a failed launch (bad configuration, no
 * device, an earlier sticky error) as ACX_ERR_CUDA naming the kernel. */
static acx_status_t launched(const char *what) {
    cudaError_t ret = cudaGetLastError();
    if (ret != cudaSuccess)
        return ACX_ERROR(ACX_ERR_CUDA, "launching the %s kernel failed: %s: %s", what,
                         cudaGetErrorName(ret), cudaGetErrorString(ret));
    return ACX_OK;
}

static acx_status_t need(const void *ptr, size_t n, const char *what, const char *name) {
    if (n > 0 && ptr == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s of %zu elements: %s is NULL", what, n, name);
    return ACX_OK;
}

/* a*b + c, rounded once (FUSED) or twice. */
template <bool FUSED> __device__ __forceinline__ float madd(float a, float b, float c) {
    return FUSED ? __fmaf_rn(a, b, c) : __fadd_rn(__fmul_rn(a, b), c);
}

/* ---- Adam / AdamW ---- */

/* Coefficients rounded to float once on the host: base/optim_kernels.c's
 * adam_coef_t, computed by the same expressions. */
struct adam_coef {
    float decay, wd, w, one_minus_w, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step;
};

/* optim_kernels.c's adam_elem, per element i:
 *   p = p * decay                       (AdamW)
 *   g = wd*p + g                        (Adam with L2)
 *   m = w*(g - m) + m  or  (m - g)*(1 - w) + g   (lerp, by the size of w)
 *   v = ((1-beta2)*g)*g + v*beta2
 *   p = p + (neg_step*m) / (sqrt(v)/bc2_sqrt + eps) */
template <bool DECOUPLED, bool L2, bool SMALL_W, bool FUSED>
__global__ void adam_kernel(float *__restrict__ p, const float *__restrict__ g,
                            float *__restrict__ m, float *__restrict__ v, size_t n, adam_coef c) {
    GRID_STRIDE(i, n) {
        float pi = p[i];
        float gi = g[i];
        if (DECOUPLED) pi = __fmul_rn(pi, c.decay);
        if (L2) gi = madd<FUSED>(c.wd, pi, gi);
        float mi = m[i];
        mi = SMALL_W ? madd<FUSED>(c.w, __fsub_rn(gi, mi), mi)
                     : madd<FUSED>(__fsub_rn(mi, gi), c.one_minus_w, gi);
        float vi = __fmul_rn(v[i], c.beta2);
        vi = madd<FUSED>(__fmul_rn(c.one_minus_beta2, gi), gi, vi);
        m[i] = mi;
        v[i] = vi;
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), c.eps);
        p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(c.neg_step, mi), denom));
    }
}

template <bool DECOUPLED, bool L2, bool SMALL_W>
static void adam_launch(float *p, const float *g, float *m, float *v, size_t n, adam_coef c,
                        bool fused, cudaStream_t s) {
    if (fused)
        adam_kernel<DECOUPLED, L2, SMALL_W, true><<<grid_for(n), THREADS, 0, s>>>(p, g, m, v, n, c);
    else
        adam_kernel<DECOUPLED, L2, SMALL_W, false>
            <<<grid_for(n), THREADS, 0, s>>>(p, g, m, v, n, c);
}

extern "C" acx_status_t acx_cuda_adam_step(float *p, const float *g, float *m, float *v, size_t n,
                                           const acx_adam_hparams_t *hp, double lr, int64_t t,
                                           int decoupled, acx_cuda_madd_t madd_kind, void *stream) {
    const char *what = decoupled ? "AdamW step" : "Adam step";
    if (hp == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: hp is NULL", what);
    ACX_CHECK(need(p, n, what, "p"));
    ACX_CHECK(need(g, n, what, "g"));
    ACX_CHECK(need(m, n, what, "m"));
    ACX_CHECK(need(v, n, what, "v"));
    if (n == 0) return ACX_OK;
    /* acx_kernel_adam_ieee's host arithmetic, expression for expression */
    double bias_correction1 = 1.0 - pow(hp->beta1, (double)t);
    double bias_correction2 = 1.0 - pow(hp->beta2, (double)t);
    double step_size = lr / bias_correction1;
    float w = (float)(1.0 - hp->beta1);
    adam_coef c;
    c.decay = (float)(1.0 - lr * hp->weight_decay);
    c.wd = (float)hp->weight_decay;
    c.w = w;
    c.one_minus_w = 1.0f - w;
    c.beta2 = (float)hp->beta2;
    c.one_minus_beta2 = (float)(1.0 - hp->beta2);
    c.bc2_sqrt = (float)sqrt(bias_correction2);
    c.eps = (float)hp->eps;
    c.neg_step = (float)(-step_size);
    bool wd = hp->weight_decay != 0.0, dec = decoupled && wd, l2 = !decoupled && wd;
    bool small_w = fabsf(w) < 0.5f, fused = madd_kind == ACX_CUDA_MADD_FUSED;
    cudaStream_t s = (cudaStream_t)stream;
    /* AdamW never adds L2 decay: (dec, l2) is one of (0,0), (1,0), (0,1) */
    if (dec && small_w)
        adam_launch<true, false, true>(p, g, m, v, n, c, fused, s);
    else if (dec)
        adam_launch<true, false, false>(p, g, m, v, n, c, fused, s);
    else if (l2 && small_w)
        adam_launch<false, true, true>(p, g, m, v, n, c, fused, s);
    else if (l2)
        adam_launch<false, true, false>(p, g, m, v, n, c, fused, s);
    else if (small_w)
        adam_launch<false, false, true>(p, g, m, v, n, c, fused, s);
    else
        adam_launch<false, false, false>(p, g, m, v, n, c, fused, s);
    return launched(what);
}

/* ---- SGD ---- */

struct sgd_coef {
    float wd, mom, one_minus_damp, neg_lr;
};

enum { SGD_NO_MOMENTUM = 0, SGD_FIRST = 1, SGD_LATER = 2 };

/* optim_kernels.c's sgd_elem:
 *   d = wd*p + g;  buf = d (first) or (1-damp)*d + buf*mom;
 *   d = nesterov ? mom*buf + d : buf;  p = (-lr)*d + p */
template <bool WD, int MOMENTUM, bool NESTEROV, bool FUSED>
__global__ void sgd_kernel(float *__restrict__ p, const float *__restrict__ g,
                           float *__restrict__ buf, size_t n, sgd_coef c) {
    GRID_STRIDE(i, n) {
        float pi = p[i];
        float d = g[i];
        if (WD) d = madd<FUSED>(c.wd, pi, d);
        if (MOMENTUM != SGD_NO_MOMENTUM) {
            float b = MOMENTUM == SGD_FIRST
                          ? d
                          : madd<FUSED>(c.one_minus_damp, d, __fmul_rn(buf[i], c.mom));
            buf[i] = b;
            d = NESTEROV ? madd<FUSED>(c.mom, b, d) : b;
        }
        p[i] = madd<FUSED>(c.neg_lr, d, pi);
    }
}

template <bool WD, int MOMENTUM, bool NESTEROV>
static void sgd_launch(float *p, const float *g, float *buf, size_t n, sgd_coef c, bool fused,
                       cudaStream_t s) {
    if (fused)
        sgd_kernel<WD, MOMENTUM, NESTEROV, true><<<grid_for(n), THREADS, 0, s>>>(p, g, buf, n, c);
    else
        sgd_kernel<WD, MOMENTUM, NESTEROV, false><<<grid_for(n), THREADS, 0, s>>>(p, g, buf, n, c);
}

template <bool WD>
static void sgd_dispatch(float *p, const float *g, float *buf, size_t n, sgd_coef c, int momentum,
                         bool nesterov, bool fused, cudaStream_t s) {
    if (momentum == SGD_NO_MOMENTUM)
        sgd_launch<WD, SGD_NO_MOMENTUM, false>(p, g, buf, n, c, fused, s);
    else if (momentum == SGD_FIRST && nesterov)
        sgd_launch<WD, SGD_FIRST, true>(p, g, buf, n, c, fused, s);
    else if (momentum == SGD_FIRST)
        sgd_launch<WD, SGD_FIRST, false>(p, g, buf, n, c, fused, s);
    else if (nesterov)
        sgd_launch<WD, SGD_LATER, true>(p, g, buf, n, c, fused, s);
    else
        sgd_launch<WD, SGD_LATER, false>(p, g, buf, n, c, fused, s);
}

extern "C" acx_status_t acx_cuda_sgd_step(float *p, const float *g, float *buf, size_t n,
                                          const acx_sgd_hparams_t *hp, double lr, int first_step,
                                          acx_cuda_madd_t madd_kind, void *stream) {
    if (hp == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "SGD step: hp is NULL");
    ACX_CHECK(need(p, n, "SGD step", "p"));
    ACX_CHECK(need(g, n, "SGD step", "g"));
    if (hp->momentum != 0.0) ACX_CHECK(need(buf, n, "SGD step with momentum", "buf"));
    if (n == 0) return ACX_OK;
    /* acx_kernel_sgd_ieee's host arithmetic */
    sgd_coef c;
    c.wd = (float)hp->weight_decay;
    c.mom = (float)hp->momentum;
    c.one_minus_damp = (float)(1.0 - hp->dampening);
    c.neg_lr = (float)(-lr);
    int momentum = hp->momentum != 0.0 ? (first_step ? SGD_FIRST : SGD_LATER) : SGD_NO_MOMENTUM;
    bool nesterov = momentum != SGD_NO_MOMENTUM && hp->nesterov;
    bool fused = madd_kind == ACX_CUDA_MADD_FUSED;
    cudaStream_t s = (cudaStream_t)stream;
    if (hp->weight_decay != 0.0)
        sgd_dispatch<true>(p, g, buf, n, c, momentum, nesterov, fused, s);
    else
        sgd_dispatch<false>(p, g, buf, n, c, momentum, nesterov, fused, s);
    return launched("SGD step");
}

/* ---- casts: base/half.h's algorithms on the bit patterns ---- */

/* float16: a normal result rebiases the exponent and rounds the 13 dropped
 * bits to nearest even with an add-and-carry; a subnormal one (|f| < 2^-14)
 * is |f| + 0.5 in float32, whose spacing in [0.5, 1) is exactly 2^-24, so
 * the float adder does the rounding (ties to even); >= 65520 is inf; a NaN
 * keeps sign and top payload with the quiet bit set. */
__device__ __forceinline__ uint16_t f16_from_f32(float f) {
    uint32_t x = __float_as_uint(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    uint32_t rn = ax - 0x38000000u;
    rn = (rn + 0xfffu + ((rn >> 13) & 1u)) >> 13;
    uint32_t rs = __float_as_uint(__fadd_rn(__uint_as_float(ax), 0.5f)) - 0x3f000000u;
    uint32_t h = ax >= 0x38800000u ? rn : rs;
    h = ax >= 0x477ff000u ? 0x7c00u : h;
    h = ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x3ffu)) : h;
    return (uint16_t)(sign | h);
}

__device__ __forceinline__ float f16_to_f32(uint16_t hv) {
    uint32_t sign = (uint32_t)(hv & 0x8000u) << 16, em = hv & 0x7fffu;
    uint32_t normal = (em << 13) + 0x38000000u;
    uint32_t special = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u);
    /* zero or subnormal: em * 2^-24, exact */
    uint32_t sub = __float_as_uint(__fmul_rn((float)em, 5.9604644775390625e-08f));
    uint32_t r = em >= 0x7c00u ? special : (em >= 0x0400u ? normal : sub);
    return __uint_as_float(sign | r);
}

/* bfloat16: float32's top half, the low 16 bits rounded to nearest even. */
__device__ __forceinline__ uint16_t bf16_from_f32(float f) {
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

__device__ __forceinline__ float bf16_to_f32(uint16_t hv) {
    uint32_t x = (uint32_t)hv << 16;
    if ((x & 0x7fffffffu) > 0x7f800000u) x |= 0x00400000u;
    return __uint_as_float(x);
}

template <bool BF16>
__global__ void from_f32_kernel(const float *__restrict__ src, uint16_t *__restrict__ dst,
                                size_t n) {
    GRID_STRIDE(i, n) dst[i] = BF16 ? bf16_from_f32(src[i]) : f16_from_f32(src[i]);
}

template <bool BF16>
__global__ void to_f32_kernel(const uint16_t *__restrict__ src, float *__restrict__ dst, size_t n) {
    GRID_STRIDE(i, n) dst[i] = BF16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
}

static acx_status_t check_half(acx_dtype_t dtype, const void *src, const void *dst, size_t n,
                               const char *what) {
    if (dtype != ACX_DTYPE_FLOAT16 && dtype != ACX_DTYPE_BFLOAT16)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: dtype %d is not float16 or bfloat16", what,
                         (int)dtype);
    ACX_CHECK(need(src, n, what, "src"));
    return need(dst, n, what, "dst");
}

extern "C" acx_status_t acx_cuda_half_from_f32(acx_dtype_t dtype, const float *src, uint16_t *dst,
                                               size_t n, void *stream) {
    ACX_CHECK(check_half(dtype, src, dst, n, "float32 -> 16-bit cast"));
    if (n == 0) return ACX_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == ACX_DTYPE_BFLOAT16)
        from_f32_kernel<true><<<grid_for(n), THREADS, 0, s>>>(src, dst, n);
    else
        from_f32_kernel<false><<<grid_for(n), THREADS, 0, s>>>(src, dst, n);
    return launched("float32 -> 16-bit cast");
}

extern "C" acx_status_t acx_cuda_half_to_f32(acx_dtype_t dtype, const uint16_t *src, float *dst,
                                             size_t n, void *stream) {
    ACX_CHECK(check_half(dtype, src, dst, n, "16-bit -> float32 cast"));
    if (n == 0) return ACX_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == ACX_DTYPE_BFLOAT16)
        to_f32_kernel<true><<<grid_for(n), THREADS, 0, s>>>(src, dst, n);
    else
        to_f32_kernel<false><<<grid_for(n), THREADS, 0, s>>>(src, dst, n);
    return launched("16-bit -> float32 cast");
}

template <bool BF16> __global__ void round_f32_kernel(const float *src, float *dst, size_t n) {
    GRID_STRIDE(i, n)
    dst[i] = BF16 ? bf16_to_f32(bf16_from_f32(src[i])) : f16_to_f32(f16_from_f32(src[i]));
}

extern "C" acx_status_t acx_cuda_half_round_f32(acx_dtype_t dtype, const float *src, float *dst,
                                                size_t n, void *stream) {
    ACX_CHECK(check_half(dtype, src, dst, n, "float32 rounding to 16 bits"));
    if (n == 0) return ACX_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == ACX_DTYPE_BFLOAT16)
        round_f32_kernel<true><<<grid_for(n), THREADS, 0, s>>>(src, dst, n);
    else
        round_f32_kernel<false><<<grid_for(n), THREADS, 0, s>>>(src, dst, n);
    return launched("float32 rounding to 16 bits");
}

/* ---- loss scaling ---- */

/* Exponent all ones: inf or NaN (isfinite without a float comparison). */
static __global__ void nonfinite_kernel(const float *__restrict__ x, size_t n, int *flag) {
    int found = 0;
    GRID_STRIDE(i, n) found |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
    /* every block that found one writes the same 1: a benign race */
    if (__syncthreads_or(found) && threadIdx.x == 0) *flag = 1;
}

static __global__ void scale_kernel(float *__restrict__ x, size_t n, float scale) {
    GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], scale);
}

/* dst[i] += widen(src[i]): KIND 0 float32, 1 bfloat16, 2 float16. */
template <int KIND>
static __global__ void accumulate_kernel(const void *__restrict__ src, float *__restrict__ dst,
                                         size_t n) {
    GRID_STRIDE(i, n) {
        float x = KIND == 0   ? ((const float *)src)[i]
                  : KIND == 1 ? bf16_to_f32(((const uint16_t *)src)[i])
                              : f16_to_f32(((const uint16_t *)src)[i]);
        dst[i] = __fadd_rn(dst[i], x);
    }
}

extern "C" acx_status_t acx_cuda_accumulate(acx_dtype_t dtype, const void *src, float *dst,
                                            size_t n, void *stream) {
    if (dtype != ACX_DTYPE_FLOAT32 && dtype != ACX_DTYPE_FLOAT16 && dtype != ACX_DTYPE_BFLOAT16)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "accumulate: dtype %d is not float32, float16 or "
                         "bfloat16",
                         (int)dtype);
    ACX_CHECK(need(src, n, "accumulate", "src"));
    ACX_CHECK(need(dst, n, "accumulate", "dst"));
    if (n == 0) return ACX_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == ACX_DTYPE_FLOAT32)
        accumulate_kernel<0><<<grid_for(n), THREADS, 0, s>>>(src, dst, n);
    else if (dtype == ACX_DTYPE_BFLOAT16)
        accumulate_kernel<1><<<grid_for(n), THREADS, 0, s>>>(src, dst, n);
    else
        accumulate_kernel<2><<<grid_for(n), THREADS, 0, s>>>(src, dst, n);
    return launched("accumulate");
}

extern "C" acx_status_t acx_cuda_nonfinite_check(const float *x, size_t n, int *flag,
                                                 void *stream) {
    ACX_CHECK(need(x, n, "inf/NaN check", "x"));
    if (flag == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "inf/NaN check: flag is NULL");
    if (n == 0) return ACX_OK;
    nonfinite_kernel<<<grid_for(n), THREADS, 0, (cudaStream_t)stream>>>(x, n, flag);
    return launched("inf/NaN check");
}

extern "C" acx_status_t acx_cuda_scale(float *x, size_t n, float scale, void *stream) {
    ACX_CHECK(need(x, n, "scale", "x"));
    if (n == 0) return ACX_OK;
    scale_kernel<<<grid_for(n), THREADS, 0, (cudaStream_t)stream>>>(x, n, scale);
    return launched("scale");
}

/* runtime/scaler.c's full test: x[i] not finite, or x[i] * inv not finite
 * (a finite gradient whose unscaled value overflows). */
static __global__ void nonfinite_scaled_kernel(const float *__restrict__ x, size_t n, float inv,
                                               int *flag) {
    int found = 0;
    GRID_STRIDE(i, n) {
        float y = __fmul_rn(x[i], inv);
        found |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
        found |= (__float_as_uint(y) & 0x7f800000u) == 0x7f800000u;
    }
    if (__syncthreads_or(found) && threadIdx.x == 0) *flag = 1;
}

extern "C" acx_status_t acx_cuda_nonfinite_check_scaled(const float *x, size_t n, float inv,
                                                        int *flag, void *stream) {
    ACX_CHECK(need(x, n, "inf/NaN check", "x"));
    if (flag == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "inf/NaN check: flag is NULL");
    if (n == 0) return ACX_OK;
    nonfinite_scaled_kernel<<<grid_for(n), THREADS, 0, (cudaStream_t)stream>>>(x, n, inv, flag);
    return launched("inf/NaN check (scaled)");
}

/* ---- clip by value ---- */

/* runtime/clip.c's ternaries, not fminf/fmaxf: a NaN fails both
 * comparisons and is kept, as on the host and in torch.clamp. */
static __global__ void clamp_kernel(float *__restrict__ x, size_t n, float lo, float hi) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        x[i] = v < lo ? lo : (v > hi ? hi : v);
    }
}

extern "C" acx_status_t acx_cuda_clamp(float *x, size_t n, float v, void *stream) {
    ACX_CHECK(need(x, n, "clamp", "x"));
    if (n == 0) return ACX_OK;
    clamp_kernel<<<grid_for(n), THREADS, 0, (cudaStream_t)stream>>>(x, n, -v, v);
    return launched("clamp");
}

/* ---- norms ---- */

/*
 * Two launches, both with a fixed shape:
 *   1. partial: B = min(ceil(n / THREADS), ACX_CUDA_NORM_WORKSPACE) blocks;
 *      thread t of block b accumulates elements b*THREADS + t, then every
 *      B*THREADS further, in order; the block's THREADS sums are combined
 *      by a halving tree in shared memory (t += t + w for w = 128, 64, ..., 1)
 *      into workspace[b];
 *   2. final: one block; thread t accumulates workspace[t], [t + THREADS],
 *      ... in order, then the same tree, into *result.
 * B and every order depend on n alone, so the result is bitwise
 * reproducible. Squares of floats are exact in double (48 significant
 * bits), so only the additions round.
 */
enum { NORM_SUMSQ = 0, NORM_MAXABS = 1 };

/* max with NaN propagating (either operand NaN -> NaN), as clip.c's loop */
__device__ __forceinline__ double max_nan(double a, double b) {
    return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b);
}

template <int KIND> __device__ __forceinline__ double combine(double a, double b) {
    return KIND == NORM_SUMSQ ? __dadd_rn(a, b) : max_nan(a, b);
}

template <int KIND> __device__ __forceinline__ double block_tree(double acc, double *sh) {
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            sh[threadIdx.x] = combine<KIND>(sh[threadIdx.x], sh[threadIdx.x + w]);
        __syncthreads();
    }
    return sh[0];
}

template <int KIND>
__global__ void norm_partial_kernel(const float *__restrict__ x, size_t n, double *partial) {
    __shared__ double sh[THREADS];
    double acc = 0.0;
    GRID_STRIDE(i, n) {
        double d = (double)x[i];
        acc = KIND == NORM_SUMSQ ? __dadd_rn(acc, __dmul_rn(d, d)) : max_nan(acc, fabs(d));
    }
    double r = block_tree<KIND>(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = r;
}

template <int KIND>
__global__ void norm_final_kernel(const double *__restrict__ partial, unsigned nblocks,
                                  double *result) {
    __shared__ double sh[THREADS];
    double acc = 0.0;
    for (unsigned b = threadIdx.x; b < nblocks; b += THREADS)
        acc = combine<KIND>(acc, partial[b]);
    double r = block_tree<KIND>(acc, sh);
    if (threadIdx.x == 0) *result = r;
}

template <int KIND>
static acx_status_t norm_launch(const float *x, size_t n, double *workspace, double *result,
                                void *stream, const char *what) {
    ACX_CHECK(need(x, n, what, "x"));
    if (workspace == NULL || result == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: %s is NULL", what,
                         workspace == NULL ? "workspace" : "result");
    cudaStream_t s = (cudaStream_t)stream;
    size_t want = (n + THREADS - 1) / THREADS;
    unsigned blocks = (unsigned)(want < ACX_CUDA_NORM_WORKSPACE ? (want > 0 ? want : 1)
                                                                : ACX_CUDA_NORM_WORKSPACE);
    norm_partial_kernel<KIND><<<blocks, THREADS, 0, s>>>(x, n, workspace);
    ACX_CHECK(launched(what));
    norm_final_kernel<KIND><<<1, THREADS, 0, s>>>(workspace, blocks, result);
    return launched(what);
}

extern "C" acx_status_t acx_cuda_sum_squares(const float *x, size_t n, double *workspace,
                                             double *result, void *stream) {
    return norm_launch<NORM_SUMSQ>(x, n, workspace, result, stream, "sum of squares");
}

extern "C" acx_status_t acx_cuda_max_abs(const float *x, size_t n, double *workspace,
                                         double *result, void *stream) {
    return norm_launch<NORM_MAXABS>(x, n, workspace, result, stream, "max |x|");
}

/*
 * base/optim_kernels.c — the fused optimizer loops (SGD, Adam, AdamW),
 * the MXCSR handling around them, and the learning-rate schedule formulas.
 *
 * Owns only arithmetic on flat arrays; the optimizer object, its state
 * allocation and the strategy hooks are runtime/optimizer.c's, the schedule
 * object is runtime/scheduler.c's.
 *
 * Rounding: each update is written once, as an inline per-element function
 * that performs torch's tensor operations in torch's order in float, with
 * scalars rounded to float once (torch's CPU opmath type for float is
 * float). torch's vectorized CPU kernels fuse a multiply-add (vec::fmadd) in
 * add(alpha=), lerp and addcmul; MADD does the same where the target has FMA
 * and rounds twice where it does not, as torch's default (non-AVX2) kernels
 * do. Checked against torch 1.13's tensor ops on 1000 elements x 5 steps:
 * 0 ulp apart in both builds (with torch's matching CPU capability).
 *
 * Shape of a loop, and why:
 * - The variants torch selects with Python `if`s (weight decay present or
 *   not, lerp's two formulas, momentum first step, Nesterov) are
 *   compile-time constants of an always-inline body: the inner loop has no
 *   branch, and "+ 0*p" never turns an inf into a NaN where torch would not.
 * - GCC's -O2 vectorizer ("very cheap" cost model) only vectorizes a loop
 *   whose trip count is a known multiple of the vector width, so the arrays
 *   are walked in blocks of KBLOCK elements (a fixed-count inner loop, which
 *   vectorizes for SSE, AVX and AVX-512 alike) plus a scalar tail that calls
 *   the same per-element function: the tail rounds exactly like the body.
 * - sqrtf may set errno (on a negative input), so under the default
 *   -fmath-errno the Adam loop keeps a scalar libm call and is not vectorized
 *   (4x slower). The library is built with -fno-math-errno (configure.ac;
 *   acx never reads errno after a math call): the compiler then emits
 *   sqrtps, correctly rounded like sqrtss and the libm call.
 * - The loops sit in noinline functions: MXCSR is switched around a call, so
 *   the compiler cannot move float arithmetic across the switch.
 */
#include "base/optim_kernels.h"

#include <string.h>
#include <math.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#define KBLOCK 16

#ifndef M_PI /* not in ISO C; Python's math.pi */
#define M_PI 3.14159265358979323846
#endif

#if defined(__GNUC__) && !defined(__NO_MATH_ERRNO__)
#warning "build with -fno-math-errno: otherwise the Adam loop is not vectorized (see above)"
#endif

/* a*b + c with torch's rounding: one rounding where the target has FMA. */
#if defined(__FMA__)
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

/* No contraction beyond MADD's: GCC's gnu11 default (-ffp-contract=fast)
 * would fuse e.g. AdamW's p*(1-lr*wd) into the final add where torch rounds
 * twice. */
#if defined(__GNUC__) && !defined(__clang__)
#define ACX_NO_CONTRACT , optimize("fp-contract=off")
#else
#define ACX_NO_CONTRACT
#endif
#define ACX_LOOP_ATTR __attribute__((noinline ACX_NO_CONTRACT))
#define ACX_INLINE    static inline __attribute__((always_inline ACX_NO_CONTRACT))

/* ---- floating-point environment ---- */

#if defined(__SSE2__)
#define MXCSR_FLAGS 0x003Fu /* sticky exception flags IE DE ZE OE UE PE */
#define MXCSR_DAZ   0x0040u /* denormal inputs read as zero */
#define MXCSR_FTZ   0x8000u /* underflowing results written as zero */

unsigned acx_fp_flush_begin(void) {
    unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | MXCSR_FTZ | MXCSR_DAZ);
    return saved;
}

void acx_fp_flush_end(unsigned saved) {
    unsigned now = _mm_getcsr();
    _mm_setcsr((saved & ~MXCSR_FLAGS) | ((saved | now) & MXCSR_FLAGS));
}
#else
unsigned acx_fp_flush_begin(void) { return 0; }
void acx_fp_flush_end(unsigned saved) { (void)saved; }
#endif

/* ---- SGD ---- */

/* torch _single_tensor_sgd, float32:
 *   d = g + wd*p                   (grad.add(param, alpha=wd), only if wd != 0)
 *   buf = d                        (first step)
 *   buf = buf*mom + (1-damp)*d     (buf.mul_(mom).add_(d, alpha=1-damp))
 *   d = nesterov ? d + mom*buf : buf
 *   p = p + (-lr)*d                (param.add_(d, alpha=-lr)) */
typedef struct sgd_coef {
    float wd, mom, one_minus_damp, neg_lr;
} sgd_coef_t;

enum { SGD_NO_MOMENTUM = 0, SGD_FIRST = 1, SGD_LATER = 2 };

ACX_INLINE void sgd_elem(float *restrict p, const float *restrict g, float *restrict buf, size_t i,
                         sgd_coef_t c, const int wd, const int momentum, const int nesterov) {
    float pi = p[i];
    float d = g[i];
    if (wd) d = MADD(c.wd, pi, d);
    if (momentum != SGD_NO_MOMENTUM) {
        float b = momentum == SGD_FIRST ? d : MADD(c.one_minus_damp, d, buf[i] * c.mom);
        buf[i] = b;
        d = nesterov ? MADD(c.mom, b, d) : b;
    }
    p[i] = MADD(c.neg_lr, d, pi);
}

ACX_INLINE void sgd_range(float *restrict p, const float *restrict g, float *restrict buf, size_t n,
                          sgd_coef_t c, const int wd, const int momentum, const int nesterov) {
    size_t nb = n - n % KBLOCK;
    for (size_t b = 0; b < nb; b += KBLOCK)
        for (size_t j = 0; j < KBLOCK; j++)
            sgd_elem(p, g, buf, b + j, c, wd, momentum, nesterov);
    for (size_t i = nb; i < n; i++)
        sgd_elem(p, g, buf, i, c, wd, momentum, nesterov);
}

/* One instantiation per (weight decay, momentum phase, nesterov). */
ACX_LOOP_ATTR static void sgd_loop(float *restrict p, const float *restrict g, float *restrict buf,
                                   size_t n, sgd_coef_t c, int wd, int momentum, int nesterov) {
#define SGD_CASE(W, M, N)                                                                          \
    if (wd == (W) && momentum == (M) && nesterov == (N)) {                                         \
        sgd_range(p, g, buf, n, c, (W), (M), (N));                                                 \
        return;                                                                                    \
    }
    SGD_CASE(0, SGD_NO_MOMENTUM, 0)
    SGD_CASE(1, SGD_NO_MOMENTUM, 0)
    SGD_CASE(0, SGD_FIRST, 0)
    SGD_CASE(1, SGD_FIRST, 0)
    SGD_CASE(0, SGD_LATER, 0)
    SGD_CASE(1, SGD_LATER, 0)
    SGD_CASE(0, SGD_FIRST, 1)
    SGD_CASE(1, SGD_FIRST, 1)
    SGD_CASE(0, SGD_LATER, 1)
    SGD_CASE(1, SGD_LATER, 1)
#undef SGD_CASE
}

void acx_kernel_sgd_ieee(float *p, const float *g, float *buf, size_t n,
                         const acx_sgd_hparams_t *hp, double lr, int first_step) {
    sgd_coef_t c = {
        .wd = (float)hp->weight_decay,
        .mom = (float)hp->momentum,
        .one_minus_damp = (float)(1.0 - hp->dampening),
        .neg_lr = (float)(-lr),
    };
    int momentum = hp->momentum != 0.0 ? (first_step ? SGD_FIRST : SGD_LATER) : SGD_NO_MOMENTUM;
    int nesterov = momentum != SGD_NO_MOMENTUM && hp->nesterov;
    sgd_loop(p, g, buf, n, c, hp->weight_decay != 0.0, momentum, nesterov);
}

void acx_kernel_sgd(float *p, const float *g, float *buf, size_t n, const acx_sgd_hparams_t *hp,
                    double lr, int first_step) {
    unsigned saved = acx_fp_flush_begin();
    acx_kernel_sgd_ieee(p, g, buf, n, hp, lr, first_step);
    acx_fp_flush_end(saved);
}

/* ---- Adam / AdamW ---- */

/* torch _single_tensor_adam / _single_tensor_adamw, float32, step t:
 *   p = p * (1 - lr*wd)                       (AdamW: param.mul_)
 *   g = g + wd*p                              (Adam, wd != 0: grad.add(param, alpha=wd))
 *   m = lerp(m, g, 1-beta1)                   (exp_avg.lerp_: m + w*(g-m) for w < 0.5,
 *                                              else g - (g-m)*(1-w))
 *   v = v*beta2 + ((1-beta2)*g)*g             (exp_avg_sq.mul_(beta2).addcmul_(g, g, 1-beta2))
 *   denom = sqrt(v) / sqrt(1-beta2^t) + eps   (bias corrections in double)
 *   p = p + ((-lr/(1-beta1^t)) * m) / denom   (param.addcdiv_(m, denom, value=-step_size)) */
typedef struct adam_coef {
    float decay, wd, w, one_minus_w, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step;
} adam_coef_t;

ACX_INLINE void adam_elem(float *restrict p, const float *restrict g, float *restrict m,
                          float *restrict v, size_t i, adam_coef_t c, const int decoupled,
                          const int l2, const int small_w) {
    float pi = p[i];
    float gi = g[i];
    if (decoupled) pi = pi * c.decay;
    if (l2) gi = MADD(c.wd, pi, gi);
    float mi = m[i];
    mi = small_w ? MADD(c.w, gi - mi, mi) : MADD(mi - gi, c.one_minus_w, gi);
    float vi = v[i] * c.beta2;
    vi = MADD(c.one_minus_beta2 * gi, gi, vi);
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
    p[i] = pi + c.neg_step * mi / denom;
}

ACX_INLINE void adam_range(float *restrict p, const float *restrict g, float *restrict m,
                           float *restrict v, size_t n, adam_coef_t c, const int decoupled,
                           const int l2, const int small_w) {
    size_t nb = n - n % KBLOCK;
    for (size_t b = 0; b < nb; b += KBLOCK)
        for (size_t j = 0; j < KBLOCK; j++)
            adam_elem(p, g, m, v, b + j, c, decoupled, l2, small_w);
    for (size_t i = nb; i < n; i++)
        adam_elem(p, g, m, v, i, c, decoupled, l2, small_w);
}

/* One instantiation per (decoupled decay, L2 decay, lerp formula); AdamW
 * never adds L2 decay. */
ACX_LOOP_ATTR static void adam_loop(float *restrict p, const float *restrict g, float *restrict m,
                                    float *restrict v, size_t n, adam_coef_t c, int decoupled,
                                    int l2, int small_w) {
#define ADAM_CASE(D, L, S)                                                                         \
    if (decoupled == (D) && l2 == (L) && small_w == (S)) {                                         \
        adam_range(p, g, m, v, n, c, (D), (L), (S));                                               \
        return;                                                                                    \
    }
    ADAM_CASE(1, 0, 1)
    ADAM_CASE(0, 0, 1)
    ADAM_CASE(0, 1, 1)
    ADAM_CASE(1, 0, 0)
    ADAM_CASE(0, 0, 0)
    ADAM_CASE(0, 1, 0)
#undef ADAM_CASE
}

void acx_kernel_adam_ieee(float *p, const float *g, float *m, float *v, size_t n,
                          const acx_adam_hparams_t *hp, double lr, int64_t t, int decoupled) {
    /* Python-float arithmetic, as in torch: bias corrections, step size and
     * 1 - lr*wd in double; each becomes a float when applied to the tensor. */
    double bias_correction1 = 1.0 - pow(hp->beta1, (double)t);
    double bias_correction2 = 1.0 - pow(hp->beta2, (double)t);
    double step_size = lr / bias_correction1;
    float w = (float)(1.0 - hp->beta1);
    adam_coef_t c = {
        .decay = (float)(1.0 - lr * hp->weight_decay),
        .wd = (float)hp->weight_decay,
        .w = w,
        .one_minus_w = 1.0f - w, /* lerp computes 1 - weight in float */
        .beta2 = (float)hp->beta2,
        .one_minus_beta2 = (float)(1.0 - hp->beta2),
        .bc2_sqrt = (float)sqrt(bias_correction2),
        .eps = (float)hp->eps,
        .neg_step = (float)(-step_size),
    };
    int wd = hp->weight_decay != 0.0;
    adam_loop(p, g, m, v, n, c, decoupled && wd, !decoupled && wd, fabsf(w) < 0.5f);
}

void acx_kernel_adam(float *p, const float *g, float *m, float *v, size_t n,
                     const acx_adam_hparams_t *hp, double lr, int64_t t, int decoupled) {
    unsigned saved = acx_fp_flush_begin();
    acx_kernel_adam_ieee(p, g, m, v, n, hp, lr, t, decoupled);
    acx_fp_flush_end(saved);
}

/* ---- the gradient check ---- */

/* All exponent bits set: inf or NaN. */
#define F32_EXP_MASK 0x7f800000u

int acx_kernel_any_nonfinite(const float *x, size_t n, float factor) {
    enum { BLOCK = 4096 }; /* 16 KiB: an early exit costs at most one block */
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t e = n - b < BLOCK ? n : b + BLOCK;
        uint32_t bad = 0;
        /* a branch-free OR over the block vectorizes; isfinite() with a
         * break per element does not. x * 1 is finite exactly when x is. */
        if (factor == 1.0f) {
            for (size_t i = b; i < e; i++) {
                uint32_t u;
                memcpy(&u, &x[i], sizeof u);
                bad |= (uint32_t)((u & F32_EXP_MASK) == F32_EXP_MASK);
            }
            if (bad) return 1;
            continue;
        }
        for (size_t i = b; i < e; i++) {
            uint32_t u, w;
            float y = x[i] * factor;
            memcpy(&u, &x[i], sizeof u);
            memcpy(&w, &y, sizeof w);
            bad |= (uint32_t)((u & F32_EXP_MASK) == F32_EXP_MASK) |
                   (uint32_t)((w & F32_EXP_MASK) == F32_EXP_MASK);
        }
        if (bad) return 1;
    }
    return 0;
}

/* ---- learning-rate schedules ---- */

/* transformers.optimization: _get_*_schedule_with_warmup_lr_lambda, with
 * Python's int/float arithmetic in double. */
double acx_schedule_factor(acx_schedule_kind_t kind, int64_t warmup_steps, int64_t total_steps,
                           double num_cycles, int64_t s) {
    if (kind == ACX_SCHED_CONSTANT) return 1.0;
    if (s < warmup_steps) return (double)s / (double)(warmup_steps > 1 ? warmup_steps : 1);
    int64_t span = total_steps - warmup_steps;
    double denom = (double)(span > 1 ? span : 1);
    switch (kind) {
    case ACX_SCHED_CONSTANT_WITH_WARMUP: return 1.0;
    case ACX_SCHED_LINEAR: return fmax(0.0, (double)(total_steps - s) / denom);
    case ACX_SCHED_COSINE: {
        double progress = (double)(s - warmup_steps) / denom;
        return fmax(0.0, 0.5 * (1.0 + cos(M_PI * num_cycles * 2.0 * progress)));
    }
    default: return 1.0;
    }
}

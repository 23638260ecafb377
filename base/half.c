/*
 * base/half.c — array conversions between float32 and the two 16-bit
 * float formats, and the in-place scaling of 16-bit buffers (exact product,
 * rounded once) that gradient buckets use for their prescale.
 *
 * The rounding rules are the scalar ones in half.h (round to nearest even,
 * once); these are loops over them, with restrict pointers and no calls, so
 * the compiler can vectorize them. The MPI reduction ops built on the
 * conversions live in the MPI backend (mpi/coll_mpi.c).
 */
/* GCC's -O2 vectorizes only loops whose trip count needs no scalar
 * epilogue; these conversion loops pay off with one, so allow it here
 * (configure also sets -fvect-cost-model=dynamic project-wide where the
 * compiler accepts it; this keeps the file fast in any other build, and
 * clang vectorizes them at -O2 as they are). Without trapping math (these
 * loops never look at floating-point exception flags) GCC may turn the
 * selects of half.h into blends. Before the includes: the inline
 * conversions must be compiled under the same options. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif

#include <stddef.h>
#include <stdint.h>

#include <string.h>

#include "base/half.h"

/* ---- float16 ---- */

void acx_f16_from_f32_n(const float *restrict src, uint16_t *restrict dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = acx_f16_from_f32(src[i]);
}

void acx_f16_to_f32_n(const uint16_t *restrict src, float *restrict dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = acx_f16_to_f32(src[i]);
}

/* ---- bfloat16 ---- */

void acx_bf16_from_f32_n(const float *restrict src, uint16_t *restrict dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = acx_bf16_from_f32(src[i]);
}

void acx_bf16_to_f32_n(const uint16_t *restrict src, float *restrict dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = acx_bf16_to_f32(src[i]);
}

/* ---- by dtype ---- */

void acx_half_from_f32_n(acx_dtype_t dtype, const float *src, uint16_t *dst, size_t n) {
    if (dtype == ACX_DTYPE_FLOAT16)
        acx_f16_from_f32_n(src, dst, n);
    else if (dtype == ACX_DTYPE_BFLOAT16)
        acx_bf16_from_f32_n(src, dst, n);
}

void acx_half_to_f32_n(acx_dtype_t dtype, const uint16_t *src, float *dst, size_t n) {
    if (dtype == ACX_DTYPE_FLOAT16)
        acx_f16_to_f32_n(src, dst, n);
    else if (dtype == ACX_DTYPE_BFLOAT16)
        acx_bf16_to_f32_n(src, dst, n);
}

/* The product of a 16-bit value (at most 11 significant bits) and a float32
 * (24) has at most 35 significant bits, so float64 holds it exactly; one
 * rounding to the 16-bit format follows (through round-to-odd, half.h). A
 * float32 product rounded again to 16 bits could round twice. */
void acx_half_round_f32_n(acx_dtype_t dtype, const float *src, float *dst, size_t n) {
    if (dtype == ACX_DTYPE_FLOAT16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = acx_f16_to_f32(acx_f16_from_f32(src[i]));
    } else if (dtype == ACX_DTYPE_BFLOAT16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = acx_bf16_to_f32(acx_bf16_from_f32(src[i]));
    } else if (src != dst) {
        memmove(dst, src, n * sizeof *dst);
    }
}

void acx_half_scale_n(acx_dtype_t dtype, uint16_t *x, float scale, size_t n) {
    double s = scale;
    if (dtype == ACX_DTYPE_FLOAT16) {
        for (size_t i = 0; i < n; i++)
            x[i] = acx_f16_from_f64((double)acx_f16_to_f32(x[i]) * s);
    } else if (dtype == ACX_DTYPE_BFLOAT16) {
        for (size_t i = 0; i < n; i++)
            x[i] = acx_bf16_from_f64((double)acx_bf16_to_f32(x[i]) * s);
    }
}

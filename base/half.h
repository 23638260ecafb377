/*
 * base/half.h — float32 <-> float16 (IEEE 754 binary16) and
 * float32 <-> bfloat16 conversions (library-private).
 *
 * Portable C on the bit patterns (no F16C, no _Float16), so the results are
 * the same on every machine; the few float32 operations inside are exact
 * or rely on the default round-to-nearest mode only, and FTZ/DAZ do not
 * change any result. The scalar forms are inline (the MPI reduction ops and the
 * bucket prescale call them in loops); the array forms in half.c are plain
 * loops the compiler can vectorize. The reductions that use them (sums that
 * accumulate in float32 and round once) are the MPI backend's.
 *
 * The exact rules, float32 -> 16 bits (both formats):
 *   - rounding is to nearest, ties to even (IEEE roundTiesToEven), applied
 *     once to the exact float32 value;
 *   - float16: finite values whose magnitude is >= 65520 (halfway between
 *     the largest finite float16, 65504, and 2^16) round to +-inf; magnitudes
 *     below 2^-14 become float16 subnormals (multiples of 2^-24, rounded to
 *     nearest even), and magnitudes <= 2^-25 (half the smallest subnormal;
 *     the tie goes to the even value 0) become +-0;
 *   - bfloat16 has float32's exponent range: it overflows to +-inf only when
 *     rounding carries past the largest finite value (magnitudes >=
 *     0x1.ffp127, halfway to 2^128), and float32 subnormals round to
 *     bfloat16 subnormals by the same rule;
 *   - +-0 and +-inf keep their sign; a NaN stays a NaN, always quiet (the
 *     quiet bit is set), with its sign and as many leading payload bits as
 *     the format holds — never an infinity.
 * 16 bits -> float32 is exact for every non-NaN value (subnormals
 * included); a NaN becomes a quiet float32 NaN with the payload shifted up.
 */
#ifndef ACX_HALF_H
#define ACX_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "acx/types.h"

static inline uint32_t acx_half_f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static inline float acx_half_bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* ---- float16 (binary16: 1 sign, 5 exponent, 10 fraction bits) ---- */

/* Written without branches (selects only) so that array loops over it
 * vectorize. */
static inline uint16_t acx_f16_from_f32(float f) {
    uint32_t x = acx_half_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    /* A normal float16 (|f| >= 2^-14): rebias the exponent (127 -> 15: minus
     * 112 << 23), then round the 13 dropped bits to nearest even: adding
     * 0xfff plus the kept LSB carries exactly when the dropped part is more
     * than half, or half with an odd LSB. A carry out of the fraction bumps
     * the exponent, which is the right result (up to 0x7bff -> inf). */
    uint32_t rn = ax - 0x38000000u;
    rn = (rn + 0xfffu + ((rn >> 13) & 1u)) >> 13;
    /* A subnormal float16 (|f| < 2^-14, multiples of 2^-24): in [0.5, 1)
     * float32's spacing is 2^-24, so |f| + 0.5 performs exactly the
     * rounding to a multiple of 2^-24, to nearest even (the default
     * rounding mode, which acx never changes); the multiple is then the
     * low bits. An exact float32 sum of a normal result, so FTZ cannot
     * touch it; DAZ zeroes only float32 subnormal inputs, which round to
     * 0 anyway. Rounding up to 2^-14 gives 0x400, the smallest normal. */
    uint32_t rs = acx_half_f32_bits(acx_half_bits_f32(ax) + 0.5f) - 0x3f000000u;
    uint32_t h = ax >= 0x38800000u ? rn : rs;
    h = ax >= 0x477ff000u ? 0x7c00u : h;                        /* >= 65520 (and inf): inf */
    h = ax > 0x7f800000u ? 0x7e00u | ((ax >> 13) & 0x3ffu) : h; /* NaN: quiet, top payload */
    return (uint16_t)(sign | h);
}

static inline float acx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t normal = (em << 13) + 0x38000000u; /* rebias 15 -> 127 */
    uint32_t special = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u); /* quiet */
    /* zero or subnormal: em * 2^-24 exactly (a normal float32) */
    uint32_t sub = acx_half_f32_bits((float)(int32_t)em * 0x1p-24f);
    uint32_t r = em >= 0x7c00u ? special : em >= 0x0400u ? normal : sub;
    return acx_half_bits_f32(sign | r);
}

/* ---- bfloat16 (1 sign, 8 exponent, 7 fraction bits: float32's top half) ---- */

static inline uint16_t acx_bf16_from_f32(float f) {
    uint32_t x = acx_half_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, set quiet */
        return (uint16_t)((x >> 16) | 0x0040u);
    /* Round the low 16 bits to nearest even; the carry runs into the
     * exponent (and from the largest finite value into inf) as it should. */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float acx_bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    if ((x & 0x7fffffffu) > 0x7f800000u) x |= 0x00400000u; /* NaN: quiet */
    return acx_half_bits_f32(x);
}

/* ---- from float64, rounded once ---- */

/* float32 nearest to d in the round-to-odd sense: d itself when it is a
 * float32, else the float32 next to d toward zero with its last bit forced
 * to 1. Rounding that float32 to a format with at most 22 significand bits
 * (float16: 11, bfloat16: 8) then gives exactly the nearest-even rounding
 * of d itself (Boldo & Melquiond, "Emulation of FMA and correctly rounded
 * sums: proved algorithms using rounding to odd", 2008): the two roundings
 * act as one. Needs the default rounding mode (nearest) and no FTZ; NaN
 * passes through. */
static inline float acx_half_f32_round_odd(double d) {
    float f = (float)d;
    if ((double)f != d && d == d) {
        uint32_t b = acx_half_f32_bits(f);
        if (d > 0 ? (double)f > d : (double)f < d) b -= 1; /* rounded away from 0: step back */
        return acx_half_bits_f32(b | 1u);
    }
    return f;
}

/* d rounded to nearest even, once (the rules above apply to d's exact value). */
static inline uint16_t acx_f16_from_f64(double d) {
    return acx_f16_from_f32(acx_half_f32_round_odd(d));
}

static inline uint16_t acx_bf16_from_f64(double d) {
    return acx_bf16_from_f32(acx_half_f32_round_odd(d));
}

/* ---- arrays ---- */

/* dst[i] = conversion of src[i], i < n. src and dst must not overlap. */
void acx_f16_from_f32_n(const float *src, uint16_t *dst, size_t n);
void acx_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void acx_bf16_from_f32_n(const float *src, uint16_t *dst, size_t n);
void acx_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);

/* The same, for dtype ACX_DTYPE_FLOAT16 or ACX_DTYPE_BFLOAT16 (other dtypes:
 * nothing is written). */
void acx_half_from_f32_n(acx_dtype_t dtype, const float *src, uint16_t *dst, size_t n);
void acx_half_to_f32_n(acx_dtype_t dtype, const uint16_t *src, float *dst, size_t n);

/* dst[i] = src[i] rounded to dtype's nearest value (ties to even) and
 * widened back: float32 values a 16-bit compute copy holds exactly (mixed
 * precision's parameters on the host). src == dst is allowed. Other dtypes
 * copy. */
void acx_half_round_f32_n(acx_dtype_t dtype, const float *src, float *dst, size_t n);

/* x[i] = x[i] * scale, in place: the exact product (a float64 holds it)
 * rounded once to the 16-bit format. */
void acx_half_scale_n(acx_dtype_t dtype, uint16_t *x, float scale, size_t n);

/* 1 for ACX_DTYPE_FLOAT16 and ACX_DTYPE_BFLOAT16. */
static inline int acx_dtype_is_half(acx_dtype_t dtype) {
    return dtype == ACX_DTYPE_FLOAT16 || dtype == ACX_DTYPE_BFLOAT16;
}

#endif /* ACX_HALF_H */

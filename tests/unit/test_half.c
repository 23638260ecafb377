/*
 * tests/unit/test_half.c — float32 <-> float16 / bfloat16 conversions
 * (base/half.h) against hand-derived bit patterns and an independent
 * reference.
 *
 * The reference rounds in float64 arithmetic rather than on bits: scale
 * |x| by the target's unit in the last place (a power of two, so exact),
 * rint() (round half to even in the default rounding mode), scale back, and
 * call anything that reaches the next binade past the largest finite value
 * an infinity. It shares no code with half.h. Covered: every rounding class
 * (exact, ties to even both ways, just above/below a tie, largest finite,
 * the overflow threshold, smallest normal/subnormal, subnormal rounding,
 * underflow to zero, +-0, +-inf, NaN payloads), exhaustive 16 -> 32 -> 16
 * round trips of all 65536 patterns of each format, a strided sweep over
 * float32 patterns against the reference, the array forms against the
 * scalar ones, single rounding from float64 (round-to-odd) and the bucket
 * prescale, and the accuracy of a float32-accumulated sum rounded once.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx_test.h"
#include "base/half.h"

/* ---- helpers ---- */

static float f32_of(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t bits_of(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* Independent reference: x rounded to nearest even in a binary format with
 * `mant` fraction bits, minimum normal exponent emin and overflow at
 * 2^(emax + 1); returns the bit pattern (sign, exponent bias, fraction).
 * x must not be NaN. */
static uint16_t ref_round(double x, int mant, int emin, int emax) {
    int bias = -emin + 1, ebits = mant == 10 ? 5 : 8;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    uint16_t inf = (uint16_t)(sign | (((1u << ebits) - 1u) << mant));
    double a = fabs(x);
    if (isinf(a)) return inf;
    int e;
    (void)frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int exp = e - 1 < emin ? emin : e - 1;
    double ulp = ldexp(1.0, exp - mant);
    double r = rint(a / ulp) * ulp;
    if (r >= ldexp(1.0, emax + 1)) return inf;
    if (r < ldexp(1.0, emin)) /* subnormal (or zero): a multiple of 2^(emin - mant) */
        return (uint16_t)(sign | (uint16_t)(r / ldexp(1.0, emin - mant)));
    (void)frexp(r, &e);
    int E = e - 1;
    uint32_t frac = (uint32_t)(r / ldexp(1.0, E - mant)) - (1u << mant);
    return (uint16_t)(sign | ((uint32_t)(E + bias) << mant) | frac);
}

static uint16_t ref_f16(double x) { return ref_round(x, 10, -14, 15); }
static uint16_t ref_bf16(double x) { return ref_round(x, 7, -126, 127); }

/* Exact value of a 16-bit pattern (non-NaN), derived from the format's
 * definition. */
static double ref_value(uint16_t h, int mant, int emin) {
    int ebits = mant == 10 ? 5 : 8, bias = -emin + 1;
    int e = (h >> mant) & ((1 << ebits) - 1);
    int m = h & ((1 << mant) - 1);
    double v =
        e == 0 ? ldexp((double)m, emin - mant) : ldexp((double)((1 << mant) + m), e - bias - mant);
    if (e == (1 << ebits) - 1) v = INFINITY;
    return (h & 0x8000) ? -v : v;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

#define CHECK_BITS(got, want)                                                                      \
    do {                                                                                           \
        unsigned g_ = (got), w_ = (want);                                                          \
        if (g_ != w_) {                                                                            \
            fprintf(stderr, "\n%s:%d: %s = 0x%04x, expected 0x%04x\n", __FILE__, __LINE__, #got,   \
                    g_, w_);                                                                       \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

static int is_f16_nan(uint16_t h) { return (h & 0x7fff) > 0x7c00; }
static int is_bf16_nan(uint16_t h) { return (h & 0x7fff) > 0x7f80; }

/* ---- float16: hand-derived cases ---- */

static int test_f16_cases(void) {
    /* exact */
    CHECK_BITS(acx_f16_from_f32(1.0f), 0x3c00);
    CHECK_BITS(acx_f16_from_f32(-2.0f), 0xc000);
    CHECK_BITS(acx_f16_from_f32(0.5f), 0x3800);
    CHECK_BITS(acx_f16_from_f32(1.0f + 0x1p-10f), 0x3c01);
    /* ties: 1 + 2^-11 is halfway between 0x3c00 (even) and 0x3c01 */
    CHECK_BITS(acx_f16_from_f32(1.0f + 0x1p-11f), 0x3c00);
    CHECK_BITS(acx_f16_from_f32(-(1.0f + 0x1p-11f)), 0xbc00);
    /* 1 + 3 * 2^-11 is halfway between 0x3c01 (odd) and 0x3c02: up */
    CHECK_BITS(acx_f16_from_f32(1.0f + 3 * 0x1p-11f), 0x3c02);
    CHECK_BITS(acx_f16_from_f32(-(1.0f + 3 * 0x1p-11f)), 0xbc02);
    /* just above / below a tie */
    CHECK_BITS(acx_f16_from_f32(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01);
    CHECK_BITS(acx_f16_from_f32(nextafterf(1.0f + 3 * 0x1p-11f, 0.0f)), 0x3c01);
    CHECK_BITS(acx_f16_from_f32(nextafterf(1.0f + 0x1p-11f, 0.0f)), 0x3c00);
    /* a tie at a binade edge: 2 - 2^-11 is halfway between 0x3bff (odd) and 2.0 */
    CHECK_BITS(acx_f16_from_f32(2.0f - 0x1p-11f), 0x4000);
    /* largest finite, and the overflow threshold 65520 (tie, goes to the
     * even neighbour 2^16, which is inf) */
    CHECK_BITS(acx_f16_from_f32(65504.0f), 0x7bff);
    CHECK_BITS(acx_f16_from_f32(nextafterf(65520.0f, 0.0f)), 0x7bff);
    CHECK_BITS(acx_f16_from_f32(65520.0f), 0x7c00);
    CHECK_BITS(acx_f16_from_f32(-65520.0f), 0xfc00);
    CHECK_BITS(acx_f16_from_f32(1e10f), 0x7c00);
    CHECK_BITS(acx_f16_from_f32(FLT_MAX), 0x7c00);
    CHECK_BITS(acx_f16_from_f32(-FLT_MAX), 0xfc00);
    /* smallest normal, largest and smallest subnormal */
    CHECK_BITS(acx_f16_from_f32(0x1p-14f), 0x0400);
    CHECK_BITS(acx_f16_from_f32(0x1p-14f - 0x1p-24f), 0x03ff);
    CHECK_BITS(acx_f16_from_f32(0x1p-24f), 0x0001);
    CHECK_BITS(acx_f16_from_f32(-0x1p-24f), 0x8001);
    /* subnormal rounding: 2^-14 - 2^-25 is halfway between 0x03ff (odd) and
     * 0x0400: up into the normals; 3 * 2^-25 is halfway 1..2 -> 2; 5 * 2^-25
     * halfway 2..3 -> 2 */
    CHECK_BITS(acx_f16_from_f32(0x1p-14f - 0x1p-25f), 0x0400);
    CHECK_BITS(acx_f16_from_f32(nextafterf(0x1p-14f - 0x1p-25f, 0.0f)), 0x03ff);
    CHECK_BITS(acx_f16_from_f32(3 * 0x1p-25f), 0x0002);
    CHECK_BITS(acx_f16_from_f32(5 * 0x1p-25f), 0x0002);
    CHECK_BITS(acx_f16_from_f32(5 * 0x1p-25f + 0x1p-40f), 0x0003);
    CHECK_BITS(acx_f16_from_f32(1.25f * 0x1p-24f), 0x0001);
    /* underflow: 2^-25 is a tie between 0 and 2^-24 -> 0; above it -> 2^-24 */
    CHECK_BITS(acx_f16_from_f32(0x1p-25f), 0x0000);
    CHECK_BITS(acx_f16_from_f32(-0x1p-25f), 0x8000);
    CHECK_BITS(acx_f16_from_f32(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    CHECK_BITS(acx_f16_from_f32(0x1p-30f), 0x0000);
    CHECK_BITS(acx_f16_from_f32(1e-40f), 0x0000); /* a float32 subnormal */
    CHECK_BITS(acx_f16_from_f32(-1e-40f), 0x8000);
    /* signed zero, infinities */
    CHECK_BITS(acx_f16_from_f32(0.0f), 0x0000);
    CHECK_BITS(acx_f16_from_f32(-0.0f), 0x8000);
    CHECK_BITS(acx_f16_from_f32(INFINITY), 0x7c00);
    CHECK_BITS(acx_f16_from_f32(-INFINITY), 0xfc00);
    /* NaN: stays NaN (quiet), keeps sign and top payload; a payload only in
     * the low 13 bits (0x7f800001, signaling) must not become inf */
    CHECK_BITS(acx_f16_from_f32(f32_of(0x7fc00000u)), 0x7e00);
    CHECK_BITS(acx_f16_from_f32(f32_of(0xffc00000u)), 0xfe00);
    CHECK_BITS(acx_f16_from_f32(f32_of(0x7f800001u)), 0x7e00);
    CHECK_BITS(acx_f16_from_f32(f32_of(0x7fa00000u)), 0x7f00);
    CHECK_BITS(acx_f16_from_f32(f32_of(0x7fbfe000u)), 0x7fff);

    /* to float32 */
    CHECK(acx_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(acx_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    CHECK(acx_f16_to_f32(0x0400) == 0x1p-14f);
    CHECK(acx_f16_to_f32(0x3c00) == 1.0f);
    CHECK(acx_f16_to_f32(0x3555) == 0x1.554p-2f);
    CHECK(acx_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(acx_f16_to_f32(0xc000) == -2.0f);
    CHECK(acx_f16_to_f32(0x8000) == 0.0f && signbit(acx_f16_to_f32(0x8000)));
    CHECK(acx_f16_to_f32(0x0000) == 0.0f && !signbit(acx_f16_to_f32(0x0000)));
    CHECK(acx_f16_to_f32(0x7c00) == INFINITY);
    CHECK(acx_f16_to_f32(0xfc00) == -INFINITY);
    CHECK(isnan(acx_f16_to_f32(0x7c01)) && (bits_of(acx_f16_to_f32(0x7c01)) & 0x00400000u));
    CHECK(bits_of(acx_f16_to_f32(0x7e00)) == 0x7fc00000u);
    CHECK(bits_of(acx_f16_to_f32(0xfe00)) == 0xffc00000u);
    return 0;
error:
    return 1;
}

/* ---- bfloat16: hand-derived cases ---- */

static int test_bf16_cases(void) {
    CHECK_BITS(acx_bf16_from_f32(1.0f), 0x3f80);
    CHECK_BITS(acx_bf16_from_f32(-2.0f), 0xc000);
    CHECK_BITS(acx_bf16_from_f32(1.0f + 0x1p-7f), 0x3f81);
    /* ties: 1 + 2^-8 -> even 0x3f80; 1 + 3 * 2^-8 -> even 0x3f82 */
    CHECK_BITS(acx_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);
    CHECK_BITS(acx_bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3f82);
    CHECK_BITS(acx_bf16_from_f32(-(1.0f + 3 * 0x1p-8f)), 0xbf82);
    CHECK_BITS(acx_bf16_from_f32(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
    CHECK_BITS(acx_bf16_from_f32(nextafterf(1.0f + 3 * 0x1p-8f, 0.0f)), 0x3f81);
    /* largest finite 0x7f7f; the tie 0x7f7f8000 goes to even = inf */
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x7f7f0000u)), 0x7f7f);
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x7f7f7fffu)), 0x7f7f);
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x7f7f8000u)), 0x7f80);
    CHECK_BITS(acx_bf16_from_f32(FLT_MAX), 0x7f80);
    CHECK_BITS(acx_bf16_from_f32(-FLT_MAX), 0xff80);
    /* float32's exponent range: 1e-30 and the smallest normal stay finite */
    CHECK_BITS(acx_bf16_from_f32(FLT_MIN), 0x0080);
    CHECK_BITS(acx_bf16_from_f32(65520.0f), 0x4780);
    /* subnormals: 0x00008000 is a tie between 0 and 0x0001 -> 0; 0x00018000
     * a tie between 0x0001 and 0x0002 -> 2; 0x00008001 above the tie -> 1 */
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x00008000u)), 0x0000);
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x00018000u)), 0x0002);
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x00008001u)), 0x0001);
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x80007fffu)), 0x8000);
    /* the largest subnormal rounds up into the smallest normal */
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x007fffffu)), 0x0080);
    CHECK_BITS(acx_bf16_from_f32(0.0f), 0x0000);
    CHECK_BITS(acx_bf16_from_f32(-0.0f), 0x8000);
    CHECK_BITS(acx_bf16_from_f32(INFINITY), 0x7f80);
    CHECK_BITS(acx_bf16_from_f32(-INFINITY), 0xff80);
    /* NaN: a payload only in the low 16 bits must not round into inf */
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x7f800001u)), 0x7fc0);
    CHECK_BITS(acx_bf16_from_f32(f32_of(0xff80ffffu)), 0xffc0);
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x7fffffffu)), 0x7fff);
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x7fc00000u)), 0x7fc0);
    CHECK_BITS(acx_bf16_from_f32(f32_of(0x7f810000u)), 0x7fc1);

    CHECK(acx_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(acx_bf16_to_f32(0x0001) == 0x1p-133f);
    CHECK(acx_bf16_to_f32(0x7f7f) == 0x1.fep127f);
    CHECK(acx_bf16_to_f32(0x8000) == 0.0f && signbit(acx_bf16_to_f32(0x8000)));
    CHECK(acx_bf16_to_f32(0xff80) == -INFINITY);
    CHECK(isnan(acx_bf16_to_f32(0x7f81)) && (bits_of(acx_bf16_to_f32(0x7f81)) & 0x00400000u));
    CHECK(bits_of(acx_bf16_to_f32(0xffc0)) == 0xffc00000u);
    return 0;
error:
    return 1;
}

/* ---- exhaustive round trips ---- */

/* Every 16-bit pattern: to float32 is the exact value the format defines;
 * back to 16 bits gives the same pattern (NaN: the same pattern, quieted). */
static int round_trip_all(int bf) {
    int mant = bf ? 7 : 10, emin = bf ? -126 : -14;
    uint16_t quiet = bf ? 0x0040 : 0x0200;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = bf ? acx_bf16_to_f32(h) : acx_f16_to_f32(h);
        uint16_t back = bf ? acx_bf16_from_f32(f) : acx_f16_from_f32(f);
        int nan = bf ? is_bf16_nan(h) : is_f16_nan(h);
        if (nan) {
            if (!isnan(f) || back != (h | quiet) || !(bits_of(f) & 0x00400000u) ||
                (signbit(f) != 0) != ((h & 0x8000) != 0)) {
                fprintf(stderr, "\n%s NaN 0x%04x -> %08x -> 0x%04x\n", bf ? "bf16" : "f16", h,
                        bits_of(f), back);
                return 1;
            }
            continue;
        }
        double want = ref_value(h, mant, emin);
        if ((double)f != want || !signbit(f) != !signbit(want) || back != h) {
            fprintf(stderr, "\n%s 0x%04x -> %.9g (expected %.9g) -> 0x%04x\n", bf ? "bf16" : "f16",
                    h, (double)f, want, back);
            return 1;
        }
    }
    return 0;
}

static int test_f16_round_trip(void) { return round_trip_all(0); }
static int test_bf16_round_trip(void) { return round_trip_all(1); }

/* ---- sweep of float32 patterns against the reference ---- */

static long sweep_one(uint32_t b) {
    float f = f32_of(b);
    uint16_t h = acx_f16_from_f32(f), g = acx_bf16_from_f32(f);
    if (isnan(f)) return !is_f16_nan(h) || !is_bf16_nan(g) || (h >> 15) != (b >> 31);
    uint16_t wh = ref_f16(f), wg = ref_bf16(f);
    if (h != wh || g != wg) {
        fprintf(stderr, "\nf32 0x%08x: f16 0x%04x (want 0x%04x), bf16 0x%04x (want 0x%04x)\n", b, h,
                wh, g, wg);
        return 1;
    }
    return 0;
}

/* A stride through all 2^32 patterns (prime, so every exponent and low-bit
 * residue shows up), plus every pattern within 64 of each 16-bit tie and
 * rounding boundary of float16's range (the fraction bits that decide). */
static int test_sweep(void) {
    long bad = 0;
    for (uint64_t b = 0; b < (1ull << 32) && bad < 5; b += 251)
        bad += sweep_one((uint32_t)b);
    for (uint32_t e = 100; e < 145 && bad < 5; e++)             /* float16's exponents and around */
        for (uint32_t top = 0; top < 1024 && bad < 5; top += 7) /* fraction's 10 kept bits */
            for (int d = -64; d <= 64; d++) {
                uint32_t base = (e << 23) | (top << 13) | 0x1000u; /* the tie */
                bad += sweep_one(base + (uint32_t)d);
                bad += sweep_one((base + (uint32_t)d) | 0x80000000u);
            }
    for (int k = 0; k < 1000000 && bad < 5; k++)
        bad += sweep_one(rnd32());
    return bad != 0;
}

/* ---- arrays against scalars ---- */

static int test_arrays(void) {
    enum { N = 1003 }; /* not a multiple of any vector width */
    float *f = malloc(N * sizeof *f), *back = malloc(N * sizeof *back);
    uint16_t *h = malloc(N * sizeof *h), *h2 = malloc(N * sizeof *h2);
    CHECK(f && back && h && h2);
    for (int i = 0; i < N; i++)
        f[i] = f32_of(rnd32());
    f[0] = NAN, f[1] = -INFINITY, f[2] = -0.0f, f[3] = 65520.0f, f[4] = 0x1p-25f, f[5] = 1e-40f;
    for (int i = 6; i < N / 2; i++) /* plenty in float16's range too */
        f[i] = ldexpf((float)(rnd32() % 4096) - 2048.0f, (int)(rnd32() % 40) - 35);
    for (int bf = 0; bf < 2; bf++) {
        acx_dtype_t dt = bf ? ACX_DTYPE_BFLOAT16 : ACX_DTYPE_FLOAT16;
        if (bf)
            acx_bf16_from_f32_n(f, h, N);
        else
            acx_f16_from_f32_n(f, h, N);
        acx_half_from_f32_n(dt, f, h2, N);
        for (int i = 0; i < N; i++) {
            CHECK_BITS(h[i], bf ? acx_bf16_from_f32(f[i]) : acx_f16_from_f32(f[i]));
            CHECK_BITS(h2[i], h[i]);
        }
        if (bf)
            acx_bf16_to_f32_n(h, back, N);
        else
            acx_f16_to_f32_n(h, back, N);
        for (int i = 0; i < N; i++) {
            float want = bf ? acx_bf16_to_f32(h[i]) : acx_f16_to_f32(h[i]);
            CHECK(bits_of(back[i]) == bits_of(want));
        }
        memset(back, 0, N * sizeof *back);
        acx_half_to_f32_n(dt, h, back, N);
        for (int i = 0; i < N; i++)
            CHECK(bits_of(back[i]) == bits_of(bf ? acx_bf16_to_f32(h[i]) : acx_f16_to_f32(h[i])));
    }
    /* other dtypes: nothing written */
    memset(h2, 0xab, N * sizeof *h2);
    acx_half_from_f32_n(ACX_DTYPE_FLOAT32, f, h2, N);
    CHECK(h2[0] == 0xabab && h2[N - 1] == 0xabab);
    free(f), free(back), free(h), free(h2);
    return 0;
error:
    free(f), free(back), free(h), free(h2);
    return 1;
}

/* ---- one rounding from float64, and the prescale ---- */

static int test_from_f64(void) {
    /* Just above a float16 tie by less than a float32 ulp: float32 rounding
     * would land on the tie and then go to even (down); once-rounding goes
     * up. */
    CHECK_BITS(acx_f16_from_f64(1.0 + 0x1p-11 + 0x1p-40), 0x3c01);
    CHECK_BITS(acx_f16_from_f64(1.0 + 0x1p-11 - 0x1p-40), 0x3c00);
    CHECK_BITS(acx_f16_from_f64(1.0 + 0x1p-11), 0x3c00);
    CHECK_BITS(acx_bf16_from_f64(1.0 + 0x1p-8 + 0x1p-30), 0x3f81);
    CHECK_BITS(acx_bf16_from_f64(-(1.0 + 0x1p-8 + 0x1p-30)), 0xbf81);
    CHECK_BITS(acx_bf16_from_f64(1.0 + 3 * 0x1p-8 - 0x1p-30), 0x3f81);
    CHECK_BITS(acx_f16_from_f64(65520.0 - 0x1p-30), 0x7bff);
    CHECK_BITS(acx_f16_from_f64(1e300), 0x7c00);
    CHECK_BITS(acx_bf16_from_f64(1e300), 0x7f80);
    CHECK_BITS(acx_bf16_from_f64(-1e300), 0xff80);
    CHECK_BITS(acx_f16_from_f64(0x1p-25 + 0x1p-60), 0x0001);
    CHECK_BITS(acx_f16_from_f64(1e-300), 0x0000);
    CHECK_BITS(acx_f16_from_f64(-1e-300), 0x8000);
    CHECK_BITS(acx_bf16_from_f64(0x1p-134 + 0x1p-170), 0x0001);
    CHECK(is_f16_nan(acx_f16_from_f64(NAN)) && is_bf16_nan(acx_bf16_from_f64(NAN)));
    /* random doubles with all 53 bits used, over both formats' ranges */
    for (int k = 0; k < 1000000; k++) {
        double m = (double)(((uint64_t)rnd32() << 21) ^ rnd32()) * 0x1p-53 + 0.5;
        double x = ldexp(k & 1 ? -m : m, (int)(rnd32() % 60) - 40);
        uint16_t h = acx_f16_from_f64(x), g = acx_bf16_from_f64(x);
        if (h != ref_f16(x) || g != ref_bf16(x)) {
            fprintf(stderr, "\n%a: f16 0x%04x (want 0x%04x) bf16 0x%04x (want 0x%04x)\n", x, h,
                    ref_f16(x), g, ref_bf16(x));
            TEST_ERROR;
        }
    }
    return 0;
error:
    return 1;
}

static int test_scale(void) {
    enum { N = 4096 };
    uint16_t x[N], y[N];
    const float scales[] = {1.0f / 3.0f, 0.125f, 1.0f / 6.0f, 3.0f, 1e-3f};
    for (int s = 0; s < 5; s++)
        for (int bf = 0; bf < 2; bf++) {
            acx_dtype_t dt = bf ? ACX_DTYPE_BFLOAT16 : ACX_DTYPE_FLOAT16;
            for (int i = 0; i < N; i++) {
                uint16_t v = (uint16_t)rnd32();
                x[i] = y[i] = (bf ? is_bf16_nan(v) : is_f16_nan(v)) ? 0x3c00 : v;
            }
            acx_half_scale_n(dt, x, scales[s], N);
            for (int i = 0; i < N; i++) {
                double v = (bf ? acx_bf16_to_f32(y[i]) : acx_f16_to_f32(y[i]));
                double p = v * (double)scales[s]; /* exact */
                uint16_t want = bf ? ref_bf16(p) : ref_f16(p);
                if (x[i] != want) {
                    fprintf(stderr, "\n%s 0x%04x * %g = 0x%04x, expected 0x%04x\n",
                            acx_dtype_name(dt), y[i], (double)scales[s], x[i], want);
                    return 1;
                }
            }
        }
    return 0;
}

/* ---- summation accuracy ---- */

/*
 * What the MPI backend does for a 16-bit SUM: widen to float32, accumulate
 * in float32, round once. Over n terms the float32 sum is within (n-1) u32
 * sum|x| of the exact one (Higham, 4.2), so the result is within half a
 * 16-bit ulp of the exact sum plus that. When the float32 sum is exact (few
 * terms of similar scale) the result is exactly the exact sum rounded.
 * Rounding to 16 bits after every addition instead is much worse; the test
 * shows the difference on the same data.
 */
static int test_sum_accuracy(void) {
    enum { N = 1000 };
    for (int bf = 0; bf < 2; bf++) {
        double worst_once = 0, worst_each = 0;
        for (int trial = 0; trial < 50; trial++) {
            uint16_t h[N];
            double exact = 0, abs_sum = 0;
            float acc = 0;
            uint16_t each = bf ? acx_bf16_from_f32(0.0f) : acx_f16_from_f32(0.0f);
            for (int i = 0; i < N; i++) {
                float v = ((float)(rnd32() % 2001) - 1000.0f) / 1024.0f; /* in [-0.98, 0.98] */
                h[i] = bf ? acx_bf16_from_f32(v) : acx_f16_from_f32(v);
                double hv = bf ? acx_bf16_to_f32(h[i]) : acx_f16_to_f32(h[i]);
                exact += hv; /* exact: 11-bit terms of scale >= 2^-24, |sum| < 2^10 */
                abs_sum += fabs(hv);
                acc += (float)hv;
                float e = (bf ? acx_bf16_to_f32(each) : acx_f16_to_f32(each)) + (float)hv;
                each = bf ? acx_bf16_from_f32(e) : acx_f16_from_f32(e);
            }
            uint16_t once = bf ? acx_bf16_from_f32(acc) : acx_f16_from_f32(acc);
            double got = bf ? acx_bf16_to_f32(once) : acx_f16_to_f32(once);
            double ulp = ldexp(1.0, (int)floor(log2(fabs(exact) > 1e-30 ? fabs(exact) : 1e-30)) -
                                        (bf ? 7 : 10));
            double bound = 0.5 * ulp + (N - 1) * 0x1p-24 * abs_sum + 0.5 * ulp;
            CHECK(fabs(got - exact) <= bound);
            double eacc = bf ? acx_bf16_to_f32(each) : acx_f16_to_f32(each);
            double rel_once = fabs(got - exact) / ulp, rel_each = fabs(eacc - exact) / ulp;
            worst_once = rel_once > worst_once ? rel_once : worst_once;
            worst_each = rel_each > worst_each ? rel_each : worst_each;
        }
        /* the float32 sums here are exact (|terms| are multiples of 2^-10
         * below 1), so once-rounding is within half an ulp; per-step 16-bit
         * rounding drifts by many ulps */
        CHECK(worst_once <= 0.5);
        CHECK(worst_each > 2.0);
    }
    /* exactly: 4 terms whose float32 sum is exact -> the exact sum rounded */
    float t[4] = {1.0f, 0x1p-11f, 0x1p-12f, 0x1p-13f};
    float s = 0;
    double e = 0;
    for (int i = 0; i < 4; i++)
        s += t[i], e += t[i];
    CHECK_BITS(acx_f16_from_f32(s), ref_f16(e)); /* 1 + 7 * 2^-13 -> 0x3c01 */
    CHECK_BITS(acx_f16_from_f32(s), 0x3c01);
    return 0;
error:
    return 1;
}

int main(void) {
    acx_test_watchdog(120);
    int failed = 0;
    struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"float16: rounding classes, specials, NaN payloads", test_f16_cases},
        {"bfloat16: rounding classes, specials, NaN payloads", test_bf16_cases},
        {"float16: all 65536 patterns round-trip exactly", test_f16_round_trip},
        {"bfloat16: all 65536 patterns round-trip exactly", test_bf16_round_trip},
        {"float32 patterns (stride, ties, random) vs reference", test_sweep},
        {"array forms equal the scalar forms", test_arrays},
        {"from float64: one rounding (round-to-odd)", test_from_f64},
        {"prescale: exact product rounded once", test_scale},
        {"sum in float32 rounded once vs float64", test_sum_accuracy},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TESTING(cases[i].name);
        if (cases[i].fn() == 0) {
            PASSED();
        } else {
            FAILED();
            failed = 1;
        }
    }
    return failed;
}

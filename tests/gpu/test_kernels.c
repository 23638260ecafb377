/*
 * tests/gpu/test_kernels.c — the device kernels (device/cuda_kernels.h) against
 * their CPU references, on the first visible GPU; exit 77 (skip) without one.
 *
 *   - casts: every one of the 65536 16-bit patterns widened, and ~12 million
 *     float32 patterns narrowed (every bfloat16 prefix with the low halves
 *     that decide rounding, the float16 tie points and their neighbours, the
 *     float16 subnormal and overflow ranges, uniform random patterns),
 *     compared bit for bit with base/half.h;
 *   - Adam, AdamW and SGD (every variant) over several steps: bitwise equal
 *     to acx_kernel_*_ieee with the host build's multiply-add rounding, and
 *     within 1e-6 relative error (max norm) on the parameters with the
 *     other one;
 *   - the inf/NaN check and the unscale multiply (runtime/scaler.c's);
 *   - accumulate (dst += widen(src), sharding/sharded.c's loop) from float32,
 *     bfloat16 and float16 sources (random 16-bit patterns), bitwise;
 *   - clamp (runtime/clip.c's clip by value): bitwise the host loop, with
 *     +-inf, NaN payloads, -0.0 and the bound's neighbours;
 *   - the sum of squares (relative error <= 1e-11 against runtime/clip.c's
 *     sequential double sum, and bitwise reproducible) and max |x| (exact,
 *     NaN propagating);
 *   - argument errors;
 *   - the device table's copy stream (device/ops.h): an asynchronous
 *     device -> host copy into pinned memory on a stream that waits for an
 *     event behind 64 MiB of memsets and a scale on a non-blocking compute
 *     stream sees their result, bitwise.
 *
 * `test_kernels --bench` also prints device throughput of the AdamW step and
 * the casts on 64 Mi elements (tests/gpu/run-on-device.sh records it).
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "device/device.h"
#include "device/ops.h"
#include "device/cuda_kernels.h"
#include "base/optim_kernels.h"
#include "tests/acx_test.h"

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t cu_ret_ = (call);                                                              \
        if (cu_ret_ != cudaSuccess) {                                                              \
            fprintf(stderr, "\n%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                        \
                    cudaGetErrorString(cu_ret_));                                                  \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- deterministic data ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd32(void) {
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* uniform in [lo, hi) */
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() >> 8) * 0x1p-24f; }

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

/* ---- casts ---- */

static int test_widen_all(void) {
    const size_t n = 65536;
    uint16_t *h = malloc(n * sizeof *h);
    float *got = malloc(n * sizeof *got);
    uint16_t *d_h = NULL;
    float *d_f = NULL;
    CHECK(h && got);
    for (size_t i = 0; i < n; i++)
        h[i] = (uint16_t)i;
    CU(cudaMalloc((void **)&d_h, n * sizeof *d_h));
    CU(cudaMalloc((void **)&d_f, n * sizeof *d_f));
    CU(cudaMemcpy(d_h, h, n * sizeof *h, cudaMemcpyHostToDevice));
    for (int bf = 0; bf < 2; bf++) {
        acx_dtype_t dt = bf ? ACX_DTYPE_BFLOAT16 : ACX_DTYPE_FLOAT16;
        CHECK_OK(acx_cuda_half_to_f32(dt, d_h, d_f, n, NULL));
        CU(cudaMemcpy(got, d_f, n * sizeof *got, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = bf ? acx_bf16_to_f32(h[i]) : acx_f16_to_f32(h[i]);
            if (f32_bits(want) != f32_bits(got[i]) && bad++ < 5)
                fprintf(stderr, "\n%s 0x%04zx: gpu 0x%08x, cpu 0x%08x", bf ? "bf16" : "f16", i,
                        f32_bits(got[i]), f32_bits(want));
        }
        CHECK(bad == 0);
    }
    cudaFree(d_h);
    cudaFree(d_f);
    free(h);
    free(got);
    return 0;
error:
    cudaFree(d_h);
    cudaFree(d_f);
    free(h);
    free(got);
    return 1;
}

/* The float32 patterns the narrowing is checked on (see the file comment). */
static size_t narrow_patterns(uint32_t *x) {
    static const uint16_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x17ff, 0x1800,
                                    0x1801, 0x1fff, 0x2000, 0x2001, 0x3fff, 0x4000, 0x7ffe,
                                    0x7fff, 0x8000, 0x8001, 0x8fff, 0x9000, 0xbfff, 0xc000,
                                    0xefff, 0xf000, 0xf001, 0xfffe, 0xffff};
    size_t k = 0;
    /* every bfloat16 prefix (sign, exponent, 7 fraction bits): the low
     * halves around bfloat16's tie (0x8000) and float16's (bit 12) */
    for (uint32_t hi = 0; hi < 65536; hi++) {
        for (size_t j = 0; j < sizeof lows / sizeof lows[0]; j++)
            x[k++] = hi << 16 | lows[j];
        for (int j = 0; j < 6; j++)
            x[k++] = hi << 16 | (rnd32() & 0xffff);
    }
    /* float16 tie points: the float32 halfway between consecutive float16
     * values, and one ulp either side */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float a = acx_f16_to_f32((uint16_t)h), b = acx_f16_to_f32((uint16_t)(h + 1));
        uint32_t mid = f32_bits((float)(((double)a + (double)b) / 2));
        for (int s = 0; s < 2; s++) {
            uint32_t sg = s ? 0x80000000u : 0;
            x[k++] = sg | mid;
            x[k++] = sg | (mid - 1);
            x[k++] = sg | (mid + 1);
        }
    }
    /* float16 overflow threshold region, exhaustively: 65504 .. 65536 */
    for (uint32_t a = 0x477fe000u; a <= 0x47800000u; a++) {
        x[k++] = a;
        x[k++] = a | 0x80000000u;
    }
    /* float16 subnormal range |x| in [2^-26, 2^-14): random */
    for (int i = 0; i < 2000000; i++)
        x[k++] = (rnd32() & 0x80000000u) | (0x32800000u + rnd32() % (0x38800000u - 0x32800000u));
    /* anything */
    for (int i = 0; i < 8000000; i++)
        x[k++] = rnd32();
    return k;
}

#define NARROW_MAX (65536u * 32u + 0x7c00u * 6u + 2u * 8193u + 2000000u + 8000000u)

static int test_narrow(void) {
    uint32_t *x = malloc((size_t)NARROW_MAX * sizeof *x);
    uint16_t *got = malloc((size_t)NARROW_MAX * sizeof *got);
    float *d_x = NULL;
    uint16_t *d_h = NULL;
    CHECK(x && got);
    size_t n = narrow_patterns(x);
    CHECK(n <= NARROW_MAX);
    CU(cudaMalloc((void **)&d_x, n * sizeof(float)));
    CU(cudaMalloc((void **)&d_h, n * sizeof(uint16_t)));
    CU(cudaMemcpy(d_x, x, n * sizeof(float), cudaMemcpyHostToDevice));
    for (int bf = 0; bf < 2; bf++) {
        acx_dtype_t dt = bf ? ACX_DTYPE_BFLOAT16 : ACX_DTYPE_FLOAT16;
        CHECK_OK(acx_cuda_half_from_f32(dt, d_x, d_h, n, NULL));
        CU(cudaMemcpy(got, d_h, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, &x[i], sizeof f);
            uint16_t want = bf ? acx_bf16_from_f32(f) : acx_f16_from_f32(f);
            if (want != got[i] && bad++ < 5)
                fprintf(stderr, "\n%s of 0x%08x: gpu 0x%04x, cpu 0x%04x", bf ? "bf16" : "f16", x[i],
                        got[i], want);
        }
        CHECK(bad == 0);
    }
    printf("(%zu patterns) ", n);
    cudaFree(d_x);
    cudaFree(d_h);
    free(x);
    free(got);
    return 0;
error:
    cudaFree(d_x);
    cudaFree(d_h);
    free(x);
    free(got);
    return 1;
}

/* ---- optimizer steps ---- */

#define OPT_N (1000003u) /* not a multiple of any block size */

typedef struct arrays {
    float *p, *g, *m, *v;     /* host: the CPU reference's state */
    float *dp, *dg, *dm, *dv; /* device: the kernels' */
    float *out;               /* host scratch for comparisons */
} arrays_t;

static void arrays_free(arrays_t *a) {
    free(a->p), free(a->g), free(a->m), free(a->v), free(a->out);
    cudaFree(a->dp), cudaFree(a->dg), cudaFree(a->dm), cudaFree(a->dv);
    memset(a, 0, sizeof *a);
}

/* Random state, with a few elements in the subnormal range and zero
 * gradients (the decay of a moment into subnormals must not be flushed). */
static int arrays_init(arrays_t *a, size_t n) {
    memset(a, 0, sizeof *a);
    a->p = malloc(n * 4), a->g = malloc(n * 4), a->m = malloc(n * 4), a->v = malloc(n * 4);
    a->out = malloc(n * 4);
    CHECK(a->p && a->g && a->m && a->v && a->out);
    for (size_t i = 0; i < n; i++) {
        a->p[i] = rndf(-1, 1);
        a->g[i] = rndf(-1e-2f, 1e-2f);
        a->m[i] = rndf(-1e-3f, 1e-3f);
        a->v[i] = rndf(0, 1e-4f);
        if (i % 1000 == 7) a->g[i] = 0, a->m[i] = 3e-39f, a->v[i] = 1e-40f;
    }
    CU(cudaMalloc((void **)&a->dp, n * 4));
    CU(cudaMalloc((void **)&a->dg, n * 4));
    CU(cudaMalloc((void **)&a->dm, n * 4));
    CU(cudaMalloc((void **)&a->dv, n * 4));
    CU(cudaMemcpy(a->dp, a->p, n * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(a->dg, a->g, n * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(a->dm, a->m, n * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(a->dv, a->v, n * 4, cudaMemcpyHostToDevice));
    return 0;
error:
    return 1;
}

/* Device array d[n] against host h[n]: bitwise (max_rel < 0), or within
 * max_rel relative error in the max norm (|d - h| <= max_rel * max |h|: an
 * elementwise ratio is meaningless for parameters that pass through 0);
 * returns the number of elements out of bounds. */
static size_t compare(const float *d, const float *h, float *scratch, size_t n, double max_rel,
                      const char *what) {
    if (cudaMemcpy(scratch, d, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return n;
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)h[i]));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        int ok = max_rel < 0 ? f32_bits(scratch[i]) == f32_bits(h[i])
                             : fabs((double)scratch[i] - h[i]) <= max_rel * scale;
        if (!ok && bad++ < 3)
            fprintf(stderr, "\n%s[%zu]: gpu %.9g (0x%08x), cpu %.9g (0x%08x)", what, i, scratch[i],
                    f32_bits(scratch[i]), h[i], f32_bits(h[i]));
    }
    return bad;
}

/* Adam (decoupled 0) / AdamW (1) with hyperparameters hp, 5 steps, a new
 * gradient each step. bitwise: the host build's multiply-add rounding;
 * else the other one, parameters within 1e-6. */
static int run_adam(const acx_adam_hparams_t *hp, int decoupled, int bitwise) {
    arrays_t a;
    const size_t n = OPT_N;
    if (arrays_init(&a, n)) goto error;
    acx_cuda_madd_t madd = bitwise ? ACX_CUDA_MADD_OF_HOST : !ACX_CUDA_MADD_OF_HOST;
    for (int64_t t = 1; t <= 5; t++) {
        double lr = hp->lr * (1.0 - 0.1 * (double)t); /* a schedule's lr */
        acx_kernel_adam_ieee(a.p, a.g, a.m, a.v, n, hp, lr, t, decoupled);
        CHECK_OK(acx_cuda_adam_step(a.dp, a.dg, a.dm, a.dv, n, hp, lr, t, decoupled, madd, NULL));
        for (size_t i = 0; i < n; i += 3)
            a.g[i] = -a.g[i] * 1.5f; /* next gradient */
        CU(cudaMemcpy(a.dg, a.g, n * 4, cudaMemcpyHostToDevice));
    }
    if (bitwise) {
        CHECK(compare(a.dp, a.p, a.out, n, -1, "p") == 0);
        CHECK(compare(a.dm, a.m, a.out, n, -1, "m") == 0);
        CHECK(compare(a.dv, a.v, a.out, n, -1, "v") == 0);
    } else {
        CHECK(compare(a.dp, a.p, a.out, n, 1e-6, "p") == 0);
    }
    arrays_free(&a);
    return 0;
error:
    arrays_free(&a);
    return 1;
}

static int test_adam(void) {
    acx_adam_hparams_t adamw = ACX_ADAMW_DEFAULT, adam = ACX_ADAM_DEFAULT;
    acx_adam_hparams_t adam_l2 = ACX_ADAM_DEFAULT, big_w = ACX_ADAMW_DEFAULT;
    adam_l2.weight_decay = 0.05;
    big_w.beta1 = 0.3; /* 1 - beta1 >= 0.5: lerp's second formula */
    big_w.lr = 3e-2;
    for (int bitwise = 1; bitwise >= 0; bitwise--) {
        CHECK(run_adam(&adamw, 1, bitwise) == 0);
        CHECK(run_adam(&adam, 0, bitwise) == 0);
        CHECK(run_adam(&adam_l2, 0, bitwise) == 0);
        CHECK(run_adam(&big_w, 1, bitwise) == 0);
        CHECK(run_adam(&big_w, 0, bitwise) == 0);
    }
    return 0;
error:
    return 1;
}

static int run_sgd(const acx_sgd_hparams_t *hp, int bitwise) {
    arrays_t a;
    const size_t n = OPT_N;
    if (arrays_init(&a, n)) goto error;
    acx_cuda_madd_t madd = bitwise ? ACX_CUDA_MADD_OF_HOST : !ACX_CUDA_MADD_OF_HOST;
    float *buf = hp->momentum != 0 ? a.m : NULL, *dbuf = hp->momentum != 0 ? a.dm : NULL;
    for (int step = 0; step < 4; step++) {
        acx_kernel_sgd_ieee(a.p, a.g, buf, n, hp, hp->lr, step == 0);
        CHECK_OK(acx_cuda_sgd_step(a.dp, a.dg, dbuf, n, hp, hp->lr, step == 0, madd, NULL));
        for (size_t i = 0; i < n; i += 2)
            a.g[i] = a.g[i] * -0.75f;
        CU(cudaMemcpy(a.dg, a.g, n * 4, cudaMemcpyHostToDevice));
    }
    CHECK(compare(a.dp, a.p, a.out, n, bitwise ? -1 : 1e-6, "p") == 0);
    if (buf && bitwise) CHECK(compare(dbuf, buf, a.out, n, -1, "momentum") == 0);
    arrays_free(&a);
    return 0;
error:
    arrays_free(&a);
    return 1;
}

static int test_sgd(void) {
    acx_sgd_hparams_t plain = {.lr = 0.1}, wd = {.lr = 0.1, .weight_decay = 1e-2};
    acx_sgd_hparams_t mom = {.lr = 0.05, .momentum = 0.9, .dampening = 0.1};
    acx_sgd_hparams_t nest = {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = 1};
    for (int bitwise = 1; bitwise >= 0; bitwise--) {
        CHECK(run_sgd(&plain, bitwise) == 0);
        CHECK(run_sgd(&wd, bitwise) == 0);
        CHECK(run_sgd(&mom, bitwise) == 0);
        CHECK(run_sgd(&nest, bitwise) == 0);
    }
    return 0;
error:
    return 1;
}

/* ---- loss scaling ---- */

static int test_nonfinite_and_scale(void) {
    const size_t n = 300001;
    float *x = malloc(n * 4), *out = malloc(n * 4), *d = NULL;
    int *dflag = NULL, flag = -1;
    CHECK(x && out);
    for (size_t i = 0; i < n; i++)
        x[i] = rndf(-65504, 65504);
    x[5] = 3.4e38f; /* large but finite */
    CU(cudaMalloc((void **)&d, n * 4));
    CU(cudaMalloc((void **)&dflag, sizeof(int)));
    CU(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice));
    /* all finite: 0 */
    CU(cudaMemset(dflag, 0, sizeof(int)));
    CHECK_OK(acx_cuda_nonfinite_check(d, n, dflag, NULL));
    CU(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
    CHECK(flag == 0);
    /* n == 0 leaves the flag alone */
    CU(cudaMemset(dflag, 0xff, sizeof(int)));
    CHECK_OK(acx_cuda_nonfinite_check(d, 0, dflag, NULL));
    CU(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
    CHECK(flag == -1);
    /* one inf at the end, one NaN at the start, a -inf in the middle */
    const size_t where[3] = {n - 1, 0, n / 2};
    const float bad[3] = {INFINITY, NAN, -INFINITY};
    for (int k = 0; k < 3; k++) {
        CU(cudaMemcpy(d + where[k], &bad[k], 4, cudaMemcpyHostToDevice));
        CU(cudaMemset(dflag, 0, sizeof(int)));
        CHECK_OK(acx_cuda_nonfinite_check(d, n, dflag, NULL));
        CU(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
        CHECK(flag == 1);
        CU(cudaMemcpy(d + where[k], &x[where[k]], 4, cudaMemcpyHostToDevice));
    }
    /* unscale: the float product, as runtime/scaler.c */
    float inv = (float)(1.0 / 65536.0 / 3.0);
    CHECK_OK(acx_cuda_scale(d, n, inv, NULL));
    CU(cudaMemcpy(out, d, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        CHECK(f32_bits(out[i]) == f32_bits(x[i] * inv));
    cudaFree(d);
    cudaFree(dflag);
    free(x);
    free(out);
    return 0;
error:
    cudaFree(d);
    cudaFree(dflag);
    free(x);
    free(out);
    return 1;
}

/* ---- norms ---- */

static int test_norms(void) {
    static const size_t sizes[] = {0, 1, 255, 256, 257, 100003, 5000011};
    const size_t nmax = 5000011;
    float *x = malloc(nmax * 4), *d = NULL;
    double *ws = NULL, *dres = NULL;
    CHECK(x);
    for (size_t i = 0; i < nmax; i++)
        x[i] = rndf(-3, 3);
    CU(cudaMalloc((void **)&d, nmax * 4));
    CU(cudaMalloc((void **)&ws, ACX_CUDA_NORM_WORKSPACE * sizeof(double)));
    CU(cudaMalloc((void **)&dres, 2 * sizeof(double)));
    CU(cudaMemcpy(d, x, nmax * 4, cudaMemcpyHostToDevice));
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        double sumsq = 0, maxabs = 0, got[2], again;
        for (size_t i = 0; i < n; i++) { /* runtime/clip.c's loops */
            sumsq += (double)x[i] * (double)x[i];
            double a = fabs((double)x[i]);
            if (a > maxabs || isnan(a)) maxabs = a;
        }
        CHECK_OK(acx_cuda_sum_squares(d, n, ws, dres, NULL));
        CHECK_OK(acx_cuda_max_abs(d, n, ws, dres + 1, NULL));
        CU(cudaMemcpy(got, dres, sizeof got, cudaMemcpyDeviceToHost));
        /* the sequential sum's own rounding is ~u sqrt(n) relative */
        CHECK(fabs(got[0] - sumsq) <= 1e-11 * sumsq);
        CHECK(got[1] == maxabs);
        /* the same bits again */
        CHECK_OK(acx_cuda_sum_squares(d, n, ws, dres, NULL));
        CU(cudaMemcpy(&again, dres, sizeof again, cudaMemcpyDeviceToHost));
        CHECK(memcmp(&again, &got[0], sizeof again) == 0);
    }
    /* a NaN anywhere makes max |x| NaN (and the sum of squares) */
    float nan = NAN;
    double got[2];
    CU(cudaMemcpy(d + 77777, &nan, 4, cudaMemcpyHostToDevice));
    CHECK_OK(acx_cuda_sum_squares(d, 100003, ws, dres, NULL));
    CHECK_OK(acx_cuda_max_abs(d, 100003, ws, dres + 1, NULL));
    CU(cudaMemcpy(got, dres, sizeof got, cudaMemcpyDeviceToHost));
    CHECK(isnan(got[0]) && isnan(got[1]));
    cudaFree(d);
    cudaFree(ws);
    cudaFree(dres);
    free(x);
    return 0;
error:
    cudaFree(d);
    cudaFree(ws);
    cudaFree(dres);
    free(x);
    return 1;
}

/* ---- arguments ---- */

static int test_errors(void) {
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
    acx_sgd_hparams_t sgd = {.lr = 0.1, .momentum = 0.9};
    float *d = NULL;
    CU(cudaMalloc((void **)&d, 16));
    CHECK_STATUS(acx_cuda_adam_step(d, NULL, d, d, 4, &hp, 1e-3, 1, 1, ACX_CUDA_MADD_FUSED, NULL),
                 ACX_ERR_INVALID_ARG, "g is NULL");
    CHECK_STATUS(acx_cuda_sgd_step(d, d, NULL, 4, &sgd, 0.1, 1, ACX_CUDA_MADD_FUSED, NULL),
                 ACX_ERR_INVALID_ARG, "buf is NULL");
    CHECK_STATUS(acx_cuda_half_from_f32(ACX_DTYPE_INT32, d, (uint16_t *)d, 2, NULL),
                 ACX_ERR_INVALID_ARG, "not float16 or bfloat16");
    CHECK_STATUS(acx_cuda_sum_squares(d, 4, NULL, NULL, NULL), ACX_ERR_INVALID_ARG,
                 "workspace is NULL");
    /* nothing to do: fine with NULL arrays */
    CHECK_OK(
        acx_cuda_adam_step(NULL, NULL, NULL, NULL, 0, &hp, 1e-3, 1, 1, ACX_CUDA_MADD_FUSED, NULL));
    cudaFree(d);
    return 0;
error:
    cudaFree(d);
    return 1;
}

/* ---- throughput (--bench) ---- */

static int bench(void) {
    const size_t n = (size_t)64 << 20; /* 64 Mi elements: 256 MiB per float array */
    float *p = NULL, *g = NULL, *m = NULL, *v = NULL;
    uint16_t *h = NULL;
    cudaEvent_t t0, t1;
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
    CU(cudaMalloc((void **)&p, n * 4));
    CU(cudaMalloc((void **)&g, n * 4));
    CU(cudaMalloc((void **)&m, n * 4));
    CU(cudaMalloc((void **)&v, n * 4));
    CU(cudaMalloc((void **)&h, n * 2));
    CU(cudaMemset(p, 0, n * 4));
    CU(cudaMemset(g, 0, n * 4));
    CU(cudaMemset(m, 0, n * 4));
    CU(cudaMemset(v, 0, n * 4));
    CU(cudaEventCreate(&t0));
    CU(cudaEventCreate(&t1));
    const int iters = 20;
    float ms = 0;
    for (int which = 0; which < 3; which++) {
        for (int it = -2; it < iters; it++) { /* 2 warm-up launches */
            if (it == 0) CU(cudaEventRecord(t0, NULL));
            if (which == 0)
                CHECK_OK(acx_cuda_adam_step(p, g, m, v, n, &hp, 1e-3, it + 3, 1,
                                            ACX_CUDA_MADD_FUSED, NULL));
            else if (which == 1)
                CHECK_OK(acx_cuda_half_from_f32(ACX_DTYPE_BFLOAT16, p, h, n, NULL));
            else
                CHECK_OK(acx_cuda_sum_squares(g, n, (double *)m, (double *)v, NULL));
        }
        CU(cudaEventRecord(t1, NULL));
        CU(cudaEventSynchronize(t1));
        CU(cudaEventElapsedTime(&ms, t0, t1));
        double sec = ms / 1e3 / iters;
        /* bytes moved per element: AdamW reads p g m v, writes p m v;
         * the cast reads 4 and writes 2; the norm reads 4 */
        double bytes = (double)n * (which == 0 ? 28 : which == 1 ? 6 : 4);
        printf("bench %-22s n=%zu: %.3f ms, %.1f GB/s\n",
               which == 0   ? "adamw_step"
               : which == 1 ? "cast_f32_to_bf16"
                            : "sum_squares",
               n, sec * 1e3, bytes / sec / 1e9);
    }
    cudaFree(p), cudaFree(g), cudaFree(m), cudaFree(v), cudaFree(h);
    return 0;
error:
    cudaFree(p), cudaFree(g), cudaFree(m), cudaFree(v), cudaFree(h);
    return 1;
}

/* half_round_f32 (mixed precision's compute copies) against half.h's
 * acx_half_round_f32_n on random float32 patterns, in place and not; the
 * scaled inf check (a finite x whose x * inv overflows counts). */
static int test_round_and_scaled_check(void) {
    const size_t n = 1 << 20;
    float *x = malloc(n * 4), *want = malloc(n * 4), *out = malloc(n * 4), *d = NULL, *d2 = NULL;
    int *dflag = NULL, flag = -1, rc = 1;
    CHECK(x && want && out);
    CU(cudaMalloc((void **)&d, n * 4));
    CU(cudaMalloc((void **)&d2, n * 4));
    CU(cudaMalloc((void **)&dflag, sizeof(int)));
    for (int f = 0; f < 2; f++) {
        acx_dtype_t dt = f ? ACX_DTYPE_BFLOAT16 : ACX_DTYPE_FLOAT16;
        for (size_t i = 0; i < n; i++) {
            uint32_t b = rnd32();
            memcpy(&x[i], &b, 4);
        }
        acx_half_round_f32_n(dt, x, want, n);
        CU(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice));
        CHECK_OK(acx_cuda_half_round_f32(dt, d, d2, n, NULL));
        CU(cudaMemcpy(out, d2, n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++)
            CHECK(f32_bits(out[i]) == f32_bits(want[i]));
        CHECK_OK(acx_cuda_half_round_f32(dt, d, d, n, NULL)); /* in place */
        CU(cudaMemcpy(out, d, n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++)
            CHECK(f32_bits(out[i]) == f32_bits(want[i]));
    }
    for (size_t i = 0; i < n; i++)
        x[i] = rndf(-4, 4);
    CU(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice));
    CU(cudaMemset(dflag, 0, sizeof(int)));
    CHECK_OK(acx_cuda_nonfinite_check_scaled(d, n, 0x1p100f, dflag, NULL));
    CU(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
    CHECK(flag == 0);          /* 4 * 2^100 is finite */
    const float big = 0x1p30f; /* finite, but big * 2^100 overflows */
    CU(cudaMemcpy(d + n / 3, &big, 4, cudaMemcpyHostToDevice));
    CHECK_OK(acx_cuda_nonfinite_check_scaled(d, n, 0x1p100f, dflag, NULL));
    CU(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
    CHECK(flag == 1);
    CU(cudaMemset(dflag, 0, sizeof(int)));
    CHECK_OK(acx_cuda_nonfinite_check_scaled(d, n, 1.0f, dflag, NULL)); /* inv 1: plain check */
    CU(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
    CHECK(flag == 0);
    rc = 0;
error:
    cudaFree(d);
    cudaFree(d2);
    cudaFree(dflag);
    free(x);
    free(want);
    free(out);
    return rc;
}

/* ---- accumulate (sharding/sharded.c's widen-and-add) ---- */

/* dst[i] += widen(src[i]) for float32, bfloat16 and float16 sources, bitwise
 * the host loop (acx_bf16_to_f32 / acx_f16_to_f32, one float addition); a
 * 32-bit dtype that is not float32 is refused. */
static int test_accumulate(void) {
    const size_t n = 200003;
    float *dst0 = malloc(n * 4), *src32 = malloc(n * 4), *out = malloc(n * 4),
          *want = malloc(n * 4);
    uint16_t *src16 = malloc(n * 2);
    float *d_dst = NULL;
    void *d_src = NULL;
    int rc = 1;
    CHECK(dst0 && src32 && out && want && src16);
    for (size_t i = 0; i < n; i++) {
        dst0[i] = rndf(-4, 4);
        src32[i] = rndf(-4, 4);
        src16[i] = (uint16_t)rnd32();
    }
    CU(cudaMalloc((void **)&d_dst, n * 4));
    CU(cudaMalloc(&d_src, n * 4));
    const acx_dtype_t dts[3] = {ACX_DTYPE_FLOAT32, ACX_DTYPE_BFLOAT16, ACX_DTYPE_FLOAT16};
    for (int k = 0; k < 3; k++) {
        acx_dtype_t dt = dts[k];
        for (size_t i = 0; i < n; i++) {
            float x = dt == ACX_DTYPE_FLOAT32    ? src32[i]
                      : dt == ACX_DTYPE_BFLOAT16 ? acx_bf16_to_f32(src16[i])
                                                 : acx_f16_to_f32(src16[i]);
            want[i] = dst0[i] + x;
        }
        CU(cudaMemcpy(d_dst, dst0, n * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(d_src, dt == ACX_DTYPE_FLOAT32 ? (const void *)src32 : (const void *)src16,
                      dt == ACX_DTYPE_FLOAT32 ? n * 4 : n * 2, cudaMemcpyHostToDevice));
        CHECK_OK(acx_cuda_accumulate(dt, d_src, d_dst, n, NULL));
        CU(cudaMemcpy(out, d_dst, n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) /* NaN + x: any NaN; else the same bits */
            CHECK(f32_bits(out[i]) == f32_bits(want[i]) || (isnan(out[i]) && isnan(want[i])));
    }
    CHECK(acx_cuda_accumulate(ACX_DTYPE_INT32, d_src, d_dst, n, NULL) == ACX_ERR_INVALID_ARG);
    rc = 0;
error:
    cudaFree(d_dst);
    cudaFree(d_src);
    free(dst0);
    free(src32);
    free(out);
    free(want);
    free(src16);
    return rc;
}

/* ---- clamp (runtime/clip.c's clip by value) ---- */

/* acx_cuda_clamp against the host loop, bit for bit: random values around
 * the bound, the bound itself and its float neighbours, +-inf, NaNs with
 * payloads, -0.0; v = 0.75, 0 and inf. */
static int test_clamp(void) {
    const size_t n = 100003;
    float *x0 = malloc(n * 4), *out = malloc(n * 4), *want = malloc(n * 4);
    float *d = NULL;
    int rc = 1;
    CHECK(x0 && out && want);
    const float vs[3] = {0.75f, 0.0f, INFINITY};
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rnd32();
        switch (r % 8) {
        case 0: x0[i] = (r & 8) ? 0.75f : -0.75f; break;
        case 1: x0[i] = nextafterf((r & 8) ? 0.75f : -0.75f, (r & 16) ? 2.0f : 0.0f); break;
        case 2: x0[i] = (r & 8) ? INFINITY : -INFINITY; break;
        case 3: {
            uint32_t b = 0x7fc00000u | (rnd32() & 0x803fffffu); /* NaN, random sign/payload */
            memcpy(&x0[i], &b, 4);
            break;
        }
        case 4: x0[i] = (r & 8) ? -0.0f : 0.0f; break;
        default: x0[i] = rndf(-2, 2);
        }
    }
    CU(cudaMalloc((void **)&d, n * 4));
    for (int k = 0; k < 3; k++) {
        const float hi = vs[k], lo = -hi;
        for (size_t i = 0; i < n; i++)
            want[i] = x0[i] < lo ? lo : (x0[i] > hi ? hi : x0[i]);
        CU(cudaMemcpy(d, x0, n * 4, cudaMemcpyHostToDevice));
        CHECK_OK(acx_cuda_clamp(d, n, vs[k], NULL));
        CU(cudaMemcpy(out, d, n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++)
            CHECK(f32_bits(out[i]) == f32_bits(want[i]));
    }
    CHECK(acx_cuda_clamp(NULL, 1, 1.0f, NULL) == ACX_ERR_INVALID_ARG);
    CHECK_OK(acx_cuda_clamp(NULL, 0, 1.0f, NULL));
    rc = 0;
error:
    cudaFree(d);
    free(x0);
    free(out);
    free(want);
    return rc;
}

/* The device table's copy stream (device/ops.h): work queued on a
 * non-blocking compute stream — 16 memsets to zero of 64 MiB, then the
 * bytes 0x3f, then a scale by 2 — is followed, without a host wait, by an
 * event on the compute stream, the copy stream waiting for it and an
 * asynchronous device -> host copy into pinned memory; after event_sync of
 * an event recorded behind the copy every float must be exactly
 * 2 * 0x1.7e7e7ep-1 (0x3f3f3f3f doubled). A copy that did not wait would
 * read zeros or a mix. Then event_query reports done, and the argument
 * errors. */
static int test_copy_stream(void) {
    const size_t n = (size_t)16 << 20; /* 64 MiB of float */
    char why[256] = "";
    const acx_devops_t *d = acx_devops_cuda(why, sizeof why);
    cudaStream_t compute = NULL;
    void *copy = NULL, *ready = NULL, *copied = NULL;
    float *x = NULL, *h = NULL;
    int rc = 1, done = 0;
    CHECK(d != NULL);
    CU(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    CHECK_OK(d->stream_create("test copy stream", &copy));
    CHECK_OK(d->event_create(&ready));
    CHECK_OK(d->event_create(&copied));
    CHECK_OK(d->alloc(n * sizeof(float), "x", (void **)&x));
    CHECK_OK(d->host_alloc(n * sizeof(float), "h", (void **)&h));
    for (int k = 0; k < 16; k++)
        CHECK_OK(d->memset(x, 0, n * sizeof(float), compute));
    CHECK_OK(d->memset(x, 0x3f, n * sizeof(float), compute));
    CHECK_OK(d->scale(x, n, 2.0f, compute));
    CHECK_OK(d->event_record(ready, compute));
    CHECK_OK(d->stream_wait_event(copy, ready));
    CHECK_OK(d->to_host_async(h, x, n * sizeof(float), copy));
    CHECK_OK(d->event_record(copied, copy));
    CHECK_OK(d->event_sync(copied));
    const uint32_t b = 0x3f3f3f3fu;
    float want;
    memcpy(&want, &b, sizeof want);
    want *= 2.0f;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&h[i], &want, sizeof want) != 0;
    CHECK(bad == 0);
    CHECK_OK(d->event_query(copied, &done));
    CHECK(done == 1);
    CHECK_STATUS(d->event_record(NULL, copy), ACX_ERR_INVALID_ARG, "event is NULL");
    CHECK_STATUS(d->event_query(copied, NULL), ACX_ERR_INVALID_ARG, "done_p");
    CHECK_STATUS(d->to_host_async(NULL, x, 4, copy), ACX_ERR_INVALID_ARG, "NULL pointer");
    rc = 0;
error:
    if (compute != NULL) cudaStreamSynchronize(compute);
    if (d != NULL) {
        if (copy != NULL) (void)d->sync(copy);
        d->stream_destroy(copy);
        d->event_destroy(ready);
        d->event_destroy(copied);
        d->free(x);
        d->host_free(h);
    }
    if (compute != NULL) cudaStreamDestroy(compute);
    return rc;
}

int main(int argc, char **argv) {
    acx_test_watchdog(600);
    char why[256];
    if (acx_device_count(why, sizeof why) == 0) {
        printf("SKIP: test_kernels needs a CUDA device: %s\n", why);
        return 77;
    }
    if (cudaSetDevice(0) != cudaSuccess) {
        fprintf(stderr, "cudaSetDevice(0) failed\n");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) return bench() ? 1 : 0;

    int failed = 0;
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"kernels: 16-bit -> float32, all 65536 patterns, bitwise", test_widen_all},
        {"kernels: float32 -> 16-bit, 12M patterns, bitwise", test_narrow},
        {"kernels: Adam/AdamW steps vs the CPU kernel", test_adam},
        {"kernels: SGD steps vs the CPU kernel", test_sgd},
        {"kernels: inf/NaN check and unscale", test_nonfinite_and_scale},
        {"kernels: sum of squares and max |x| (deterministic)", test_norms},
        {"kernels: argument errors", test_errors},
        {"kernels: half_round_f32, scaled inf/NaN check", test_round_and_scaled_check},
        {"kernels: accumulate (float32, bf16, fp16 sources)", test_accumulate},
        {"kernels: clamp (clip by value) vs the host loop, bitwise", test_clamp},
        {"device table: copy stream waits for the compute stream", test_copy_stream},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TESTING(cases[i].name);
        if (cases[i].fn()) {
            FAILED();
            failed = 1;
        } else {
            PASSED();
        }
    }
    return failed;
}

/*
 * tests/unit/test_train_gpu_gemm.c — the column-major GEMM arguments of
 * acx-bench-train-gpu (benchmarks/train_gpu_gemm.h), checked on the CPU:
 * each product is run through cblas_sgemm in CblasColMajor with exactly the
 * arguments the benchmark hands cublasGemmEx (transposes, m, n, k, leading
 * dimensions, which tensor is A, B and C) and compared with the layer's
 * math written as plain row-major loops in double (y = x W^T,
 * dW += dy^T x, dx = dy W). The shapes are all different (fi, fo, B
 * pairwise distinct), so a swapped dimension, a wrong leading dimension or
 * a missing transpose reads the wrong elements or the wrong count and
 * fails. The beta is the header's too: forward and input gradient must
 * overwrite C (C is pre-filled with other values), the weight gradient must
 * add into it (acx's gradient buffer), and two accumulated micro-steps on
 * the same batch, divided by 2 as acx does, must give the one-batch
 * gradient, which is what acx-bench-train-gpu --check relies on to tell
 * beta 1 from beta 0 (beta 0 gives half of it). The GPU run of the same
 * arguments is tests/gpu/train_gpu.test.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "acx_test.h"
#include "benchmarks/train_gpu_gemm.h"

#define FI 7
#define FO 5
#define NB 3

static uint64_t rng_state = 0x1234567ull;

/* Small integers in [-4, 4]: every product and sum below is exact in float. */
static float small_int(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int)(rng_state >> 60) % 9 - 4);
}

static void fill(float *x, int n) {
    for (int i = 0; i < n; i++)
        x[i] = small_int();
}

/* The tensors of one layer, row-major (train_gpu_gemm.h's layout). */
typedef struct layer {
    float w[FO * FI], x[NB * FI], dy[NB * FO];
    float y[NB * FO], dw[FO * FI], dx[NB * FI];
} layer_t;

static float *operand(layer_t *t, tg_operand_t which) {
    switch (which) {
    case TG_W: return t->w;
    case TG_X: return t->x;
    case TG_DY: return t->dy;
    case TG_Y: return t->y;
    case TG_DW: return t->dw;
    case TG_DX: return t->dx;
    }
    return NULL;
}

/* C = op(A) op(B) + beta C with the benchmark's arguments, beta included. */
static void run(layer_t *t, tg_gemm_kind_t kind) {
    tg_gemm_t g = tg_gemm_args(kind, FI, FO, NB);
    cblas_sgemm(CblasColMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f, operand(t, g.a), g.lda,
                operand(t, g.b), g.ldb, g.beta, operand(t, g.c), g.ldc);
}

static int test_forward(void) {
    TESTING("forward y = x W^T (column-major arguments)");
    layer_t t;
    fill(t.w, FO * FI);
    fill(t.x, NB * FI);
    fill(t.y, NB * FO); /* beta 0: overwritten */
    run(&t, TG_FORWARD);
    for (int b = 0; b < NB; b++)
        for (int o = 0; o < FO; o++) {
            double s = 0.0;
            for (int i = 0; i < FI; i++)
                s += (double)t.x[b * FI + i] * t.w[o * FI + i];
            CHECK(t.y[b * FO + o] == (float)s);
        }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_wgrad(void) {
    TESTING("weight gradient dW += dy^T x (beta 1 accumulates)");
    layer_t t;
    float before[FO * FI];
    fill(t.x, NB * FI);
    fill(t.dy, NB * FO);
    fill(t.dw, FO * FI);
    memcpy(before, t.dw, sizeof before);
    run(&t, TG_WGRAD);
    for (int o = 0; o < FO; o++)
        for (int i = 0; i < FI; i++) {
            double s = before[o * FI + i];
            for (int b = 0; b < NB; b++)
                s += (double)t.dy[b * FO + o] * t.x[b * FI + i];
            CHECK(t.dw[o * FI + i] == (float)s);
        }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_wgrad_accumulation(void) {
    TESTING("two micro-steps on one batch, halved, give the one-batch dW");
    layer_t t;
    int nonzero = 0;
    fill(t.x, NB * FI);
    fill(t.dy, NB * FO);
    memset(t.dw, 0, sizeof t.dw); /* acx_optimizer_zero_grad */
    run(&t, TG_WGRAD);
    run(&t, TG_WGRAD);
    for (int o = 0; o < FO; o++)
        for (int i = 0; i < FI; i++) {
            double s = 0.0;
            for (int b = 0; b < NB; b++)
                s += (double)t.dy[b * FO + o] * t.x[b * FI + i];
            nonzero += s != 0.0;
            CHECK(t.dw[o * FI + i] / 2.0f == (float)s); /* exact: small integers */
        }
    CHECK(nonzero > 0); /* else beta 0 (half of it) would pass too */
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_dgrad(void) {
    TESTING("input gradient dx = dy W");
    layer_t t;
    fill(t.w, FO * FI);
    fill(t.dy, NB * FO);
    fill(t.dx, NB * FI);
    run(&t, TG_DGRAD);
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < FI; i++) {
            double s = 0.0;
            for (int o = 0; o < FO; o++)
                s += (double)t.dy[b * FO + o] * t.w[o * FI + i];
            CHECK(t.dx[b * FI + i] == (float)s);
        }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_shapes(void) {
    TESTING("each product is m x n x k = the layer's 2 B fi fo flops");
    for (int kind = TG_FORWARD; kind <= TG_DGRAD; kind++) {
        tg_gemm_t g = tg_gemm_args((tg_gemm_kind_t)kind, FI, FO, NB);
        CHECK((long)g.m * g.n * g.k == (long)FI * FO * NB);
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_forward();
    failed += test_wgrad();
    failed += test_wgrad_accumulation();
    failed += test_dgrad();
    failed += test_shapes();
    return failed ? 1 : 0;
}

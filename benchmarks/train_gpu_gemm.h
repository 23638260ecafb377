/*
 * benchmarks/train_gpu_gemm.h — the three matrix products of a linear
 * layer (y = x . W^T, torch.nn.Linear without bias) as column-major GEMM
 * arguments (BLAS/cuBLAS conventions), for acx-bench-train-gpu
 * (train_gpu.c) and its CPU test (tests/unit/test_train_gpu_gemm.c, which
 * runs these arguments through cblas_sgemm in CblasColMajor and compares
 * with plain row-major loops).
 *
 * Layout: W is [fo x fi], x [B x fi], y and dy [B x fo], dx [B x fi], all
 * row-major. Column-major code reads a row-major [r x c] matrix as its
 * transpose [c x r] with leading dimension c, so each product is computed
 * as the product of the transposes (as examples/fashion_mnist/mlp_cuda.c):
 *
 *   forward  y[B x fo] = x . W^T        <=>  y^T = W . x^T
 *            gemm(T, N, m fo, n B, k fi; A W lda fi, B x ldb fi; C y ldc fo)
 *   wgrad    dW[fo x fi] += dy^T . x    <=>  dW^T += x^T . dy
 *            gemm(N, T, m fi, n fo, k B; A x lda fi, B dy ldb fo; C dW ldc fi;
 *                 beta 1: the gradient is ADDED into acx's buffer, as
 *                 include/acx/model.h asks, so micro-steps accumulate)
 *   dgrad    dx[B x fi] = dy . W        <=>  dx^T = W^T . dy^T
 *            gemm(N, N, m fi, n B, k fo; A W lda fi, B dy ldb fo; C dx ldc fi)
 *
 * forward and dgrad overwrite C (beta 0). Each is 2 * B * fi * fo
 * floating-point operations.
 */
#ifndef ACX_BENCH_TRAIN_GPU_GEMM_H
#define ACX_BENCH_TRAIN_GPU_GEMM_H

typedef enum tg_gemm_kind { TG_FORWARD = 0, TG_WGRAD = 1, TG_DGRAD = 2 } tg_gemm_kind_t;

/* Which tensor of the layer an operand is. */
typedef enum tg_operand {
    TG_W = 0,
    TG_X = 1,
    TG_DY = 2,
    TG_Y = 3,
    TG_DW = 4,
    TG_DX = 5
} tg_operand_t;

typedef struct tg_gemm {
    int trans_a, trans_b; /* 1: op(.) is the transpose */
    int m, n, k, lda, ldb, ldc;
    tg_operand_t a, b, c;
    float beta; /* C = op(A) op(B) + beta C */
} tg_gemm_t;

static inline tg_gemm_t tg_gemm_args(tg_gemm_kind_t kind, int fi, int fo, int batch) {
    switch (kind) {
    case TG_FORWARD: return (tg_gemm_t){1, 0, fo, batch, fi, fi, fi, fo, TG_W, TG_X, TG_Y, 0.0f};
    case TG_WGRAD: return (tg_gemm_t){0, 1, fi, fo, batch, fi, fo, fi, TG_X, TG_DY, TG_DW, 1.0f};
    case TG_DGRAD:
    default: return (tg_gemm_t){0, 0, fi, batch, fo, fi, fo, fi, TG_W, TG_DY, TG_DX, 0.0f};
    }
}

#endif

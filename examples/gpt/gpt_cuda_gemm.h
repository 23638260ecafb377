/*
 * examples/gpt/gpt_cuda_gemm.h — every matrix product of acx-gpt's device
 * path (gpt_cuda.c) as column-major GEMM arguments (BLAS/cuBLAS
 * conventions), in plain C so that tests/unit/test_gpt_cuda_math.c can run
 * exactly these arguments through cblas_sgemm in CblasColMajor on the CPU
 * and compare with gpt_model.c's kernels.
 *
 * Layout: gpt_model.h's tensors are row-major; column-major code reads a
 * row-major [r x c] matrix (leading dimension ld >= c) as its transpose
 * [c x r], so each product is computed as the product of the transposes
 * (as examples/fashion_mnist/mlp_cuda.c).
 *
 * Linear layer, inp [N x C], W [OC x C], out/dout [N x OC]:
 *   forward  out = inp W^T       <=> out^T = W . inp^T
 *            gemm(T, N, m OC, n N, k C; A W lda C, B inp ldb C; C out ldc OC), beta 0
 *   dgrad    dinp = dout W       <=> dinp^T = W^T . dout^T
 *            gemm(N, N, m C, n N, k OC; A W lda C, B dout ldb OC; C dinp ldc C), beta 0
 *            (gpt_model.c adds into a zeroed buffer: the same values)
 *   wgrad    dW += dout^T inp    <=> dW^T += inp^T . dout
 *            gemm(N, T, m C, n OC, k N; A inp lda C, B dout ldb OC; C dW ldc C), beta 1
 *            (ADDED into acx's gradient buffer: micro-steps accumulate)
 *
 * Attention of sequence b and head h (hs = C/NH columns): Q, K, V are the
 * [T x hs] blocks of qkv [N x 3C] at columns h*hs, C + h*hs, 2C + h*hs of
 * rows b*T.., leading dimension 3C; the head's output block of y [N x C]
 * has leading dimension C; its scores/weights A are the [T x T] matrix
 * (b, h) of att [B x NH x T x T], leading dimension T.
 *   scores   S = Q K^T           <=> S^T = K . Q^T
 *            gemm(T, N, m T, n T, k hs; A K lda 3C, B Q ldb 3C; C S ldc T)
 *            (every (t, s); the softmax rows mask s > t)
 *   output   y = A V             <=> y^T = V^T . A^T
 *            gemm(N, N, m hs, n T, k T; A V lda 3C, B A ldb T; C y ldc C)
 *   dA       dA = dy V^T         <=> dA^T = V . dy^T
 *            gemm(T, N, m T, n T, k hs; A V lda 3C, B dy ldb C; C dA ldc T)
 *   dV       dV = A^T dy         <=> dV^T = dy^T . A
 *            gemm(N, T, m hs, n T, k T; A dy lda C, B A ldb T; C dV ldc 3C)
 *   dQ       dQ = dS K           <=> dQ^T = K^T . dS^T
 *            gemm(N, N, m hs, n T, k T; A K lda 3C, B dS ldb T; C dQ ldc 3C)
 *   dK       dK = dS^T Q         <=> dK^T = Q^T . dS
 *            gemm(N, T, m hs, n T, k T; A Q lda 3C, B dS ldb T; C dK ldc 3C)
 * all beta 0 (each block of dqkv is written once). The scale 1/sqrt(hs) is
 * the softmax rows' (gpt_math.h), as in gpt_model.c.
 *
 * Batching: one strided-batched GEMM per head, over the B sequences (the
 * operands of sequence b+1 are a fixed stride after those of b: T*3C in
 * qkv, T*C in y, NH*T*T in att), so NH calls per product; the head moves
 * each operand's start by a fixed step (hs columns, or T*T in att).
 */
#ifndef ACX_EXAMPLE_GPT_CUDA_GEMM_H
#define ACX_EXAMPLE_GPT_CUDA_GEMM_H

#include <stdint.h>

typedef enum gpt_gemm_kind {
    GPT_GEMM_LINEAR_FWD,
    GPT_GEMM_LINEAR_DGRAD,
    GPT_GEMM_LINEAR_WGRAD,
    GPT_GEMM_ATT_SCORES,
    GPT_GEMM_ATT_OUT,
    GPT_GEMM_ATT_DA,
    GPT_GEMM_ATT_DV,
    GPT_GEMM_ATT_DQ,
    GPT_GEMM_ATT_DK
} gpt_gemm_kind_t;

/* C = alpha op(A) op(B) + beta C, column-major. The operands are given by
 * the caller as base pointers (the tensors named in the comment above: for
 * a linear layer A/B/C as listed; for attention qkv, y or dy, att or datt);
 * call h (0 <= h < calls) of batch entry b uses
 *   A = base_a + off_a + h * head_a + b * stride_a   (likewise B, C). */
typedef struct gpt_gemm {
    int trans_a, trans_b; /* 1: op(.) is the transpose */
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    int calls, batch; /* heads (1 for a linear layer) x sequences (1) */
    int64_t off_a, off_b, off_c;
    int64_t head_a, head_b, head_c;
    int64_t stride_a, stride_b, stride_c;
} gpt_gemm_t;

/* A linear layer's product: N rows, C inputs, OC outputs. */
static inline gpt_gemm_t gpt_gemm_linear(gpt_gemm_kind_t kind, int N, int C, int OC) {
    gpt_gemm_t g = {0};
    g.alpha = 1.0f;
    g.calls = 1;
    g.batch = 1;
    switch (kind) {
    case GPT_GEMM_LINEAR_FWD:
        g.trans_a = 1, g.m = OC, g.n = N, g.k = C, g.lda = C, g.ldb = C, g.ldc = OC;
        break;
    case GPT_GEMM_LINEAR_DGRAD: g.m = C, g.n = N, g.k = OC, g.lda = C, g.ldb = OC, g.ldc = C; break;
    default: /* GPT_GEMM_LINEAR_WGRAD */
        g.trans_b = 1, g.m = C, g.n = OC, g.k = N, g.lda = C, g.ldb = OC, g.ldc = C;
        g.beta = 1.0f;
        break;
    }
    return g;
}

/* An attention product for B sequences of T tokens, width C, NH heads.
 * Operands: SCORES (A qkv, B qkv, C att), OUT (A qkv, B att, C y),
 * DA (A qkv, B dy, C datt), DV (A dy, B att, C dqkv), DQ (A qkv, B datt,
 * C dqkv), DK (A qkv, B datt, C dqkv). */
static inline gpt_gemm_t gpt_gemm_attention(gpt_gemm_kind_t kind, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    int64_t tt = (int64_t)T * T;
    int64_t qkv_seq = (int64_t)T * C3, y_seq = (int64_t)T * C, att_seq = (int64_t)NH * tt;
    gpt_gemm_t g = {0};
    g.alpha = 1.0f;
    g.calls = NH;
    g.batch = B;
    switch (kind) {
    case GPT_GEMM_ATT_SCORES: /* A = K, B = Q, C = S */
        g.trans_a = 1, g.m = T, g.n = T, g.k = hs, g.lda = C3, g.ldb = C3, g.ldc = T;
        g.off_a = C, g.head_a = hs, g.stride_a = qkv_seq;
        g.off_b = 0, g.head_b = hs, g.stride_b = qkv_seq;
        g.off_c = 0, g.head_c = tt, g.stride_c = att_seq;
        break;
    case GPT_GEMM_ATT_OUT: /* A = V, B = att, C = y */
        g.m = hs, g.n = T, g.k = T, g.lda = C3, g.ldb = T, g.ldc = C;
        g.off_a = 2 * (int64_t)C, g.head_a = hs, g.stride_a = qkv_seq;
        g.off_b = 0, g.head_b = tt, g.stride_b = att_seq;
        g.off_c = 0, g.head_c = hs, g.stride_c = y_seq;
        break;
    case GPT_GEMM_ATT_DA: /* A = V, B = dy, C = datt */
        g.trans_a = 1, g.m = T, g.n = T, g.k = hs, g.lda = C3, g.ldb = C, g.ldc = T;
        g.off_a = 2 * (int64_t)C, g.head_a = hs, g.stride_a = qkv_seq;
        g.off_b = 0, g.head_b = hs, g.stride_b = y_seq;
        g.off_c = 0, g.head_c = tt, g.stride_c = att_seq;
        break;
    case GPT_GEMM_ATT_DV: /* A = dy, B = att, C = dV */
        g.trans_b = 1, g.m = hs, g.n = T, g.k = T, g.lda = C, g.ldb = T, g.ldc = C3;
        g.off_a = 0, g.head_a = hs, g.stride_a = y_seq;
        g.off_b = 0, g.head_b = tt, g.stride_b = att_seq;
        g.off_c = 2 * (int64_t)C, g.head_c = hs, g.stride_c = qkv_seq;
        break;
    case GPT_GEMM_ATT_DQ: /* A = K, B = dS, C = dQ */
        g.m = hs, g.n = T, g.k = T, g.lda = C3, g.ldb = T, g.ldc = C3;
        g.off_a = C, g.head_a = hs, g.stride_a = qkv_seq;
        g.off_b = 0, g.head_b = tt, g.stride_b = att_seq;
        g.off_c = 0, g.head_c = hs, g.stride_c = qkv_seq;
        break;
    default: /* GPT_GEMM_ATT_DK: A = Q, B = dS, C = dK */
        g.trans_b = 1, g.m = hs, g.n = T, g.k = T, g.lda = C3, g.ldb = T, g.ldc = C3;
        g.off_a = 0, g.head_a = hs, g.stride_a = qkv_seq;
        g.off_b = 0, g.head_b = tt, g.stride_b = att_seq;
        g.off_c = C, g.head_c = hs, g.stride_c = qkv_seq;
        break;
    }
    return g;
}

#endif /* ACX_EXAMPLE_GPT_CUDA_GEMM_H */

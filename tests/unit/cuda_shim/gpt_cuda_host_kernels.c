/*
 * tests/unit/cuda_shim/gpt_cuda_host_kernels.c — gpt_cuda_kernels.h's
 * launchers for the CPU test double (see cuda_runtime_api.h here): each
 * runs the gpt_math.h body its kernel runs (gpt_cuda_kernels.cu) for every
 * item, in reverse order (a device runs items in no fixed order; a body
 * that read another item's result would show). The arguments and item
 * counts are the .cu launchers'; the grid itself is not modelled.
 */
#include "gpt_cuda_kernels.h"
#include "gpt_math.h"

#define FOR_ITEMS(i, n) for (size_t i = (n); i-- > 0;)

cudaError_t gptk_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe,
                           int N, int T, int C, cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(i, (size_t)N * C) gptm_embed_fwd(i, out, tok, wte, wpe, T, C);
    return cudaSuccess;
}

cudaError_t gptk_embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *ids,
                           const int32_t *start, const int32_t *rows, int U, int B, int T, int C,
                           cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(i, (size_t)U * C) gptm_embed_bwd_wte(i, dwte, dout, ids, start, rows, C);
    FOR_ITEMS(i, (size_t)T * C) gptm_embed_bwd_wpe(i, dwpe, dout, B, T, C);
    return cudaSuccess;
}

cudaError_t gptk_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C, cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(r, (size_t)N) gptm_layernorm_fwd_row(r, out, mean, rstd, inp, w, b, C);
    return cudaSuccess;
}

cudaError_t gptk_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C, cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(r, (size_t)N) gptm_layernorm_bwd_row(r, dinp, dout, inp, w, mean, rstd, C);
    FOR_ITEMS(c, (size_t)C) gptm_layernorm_bwd_col(c, dw, db, dout, inp, mean, rstd, N, C);
    return cudaSuccess;
}

cudaError_t gptk_bias_add(float *out, const float *bias, int N, int OC, cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(i, (size_t)N * OC) gptm_bias_add(i, out, bias, OC);
    return cudaSuccess;
}

cudaError_t gptk_bias_grad(float *dbias, const float *dout, int N, int OC, cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(j, (size_t)OC) gptm_bias_grad_col(j, dbias, dout, N, OC);
    return cudaSuccess;
}

cudaError_t gptk_gelu_fwd(float *out, const float *inp, size_t n, cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(i, n) out[i] = gptm_gelu(inp[i]);
    return cudaSuccess;
}

cudaError_t gptk_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n,
                          cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(i, n) dinp[i] = gptm_gelu_grad(inp[i]) * dout[i];
    return cudaSuccess;
}

cudaError_t gptk_residual_fwd(float *out, const float *a, const float *b, size_t n,
                              cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(i, n) out[i] = a[i] + b[i];
    return cudaSuccess;
}

cudaError_t gptk_softmax_causal_fwd(float *att, size_t rows, int T, float scale,
                                    cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(r, rows) gptm_softmax_causal_row(r, att, T, scale);
    return cudaSuccess;
}

cudaError_t gptk_softmax_causal_bwd(float *datt, const float *att, size_t rows, int T, float scale,
                                    cudaStream_t stream) {
    (void)stream;
    FOR_ITEMS(r, rows) gptm_softmax_causal_bwd_row(r, datt, att, T, scale);
    return cudaSuccess;
}

cudaError_t gptk_crossentropy(float *probs, float *dlogits, double *row_loss, double *mean,
                              const float *logits, const int32_t *targets, int N, int V,
                              float scale, cudaStream_t stream) {
    (void)stream;
    if (N <= 0) return cudaSuccess;
    FOR_ITEMS(r, (size_t)N)
    gptm_crossentropy_row(r, probs, dlogits, row_loss, logits, targets, V, scale);
    double total = 0.0;
    for (int i = 0; i < N; i++)
        total += row_loss[i];
    *mean = total / N;
    return cudaSuccess;
}

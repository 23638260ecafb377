/*
 * examples/gpt/gpt_model.h — a GPT-2-style decoder (byte or small vocab) on
 * the CPU: the kernels (forward and backward of each operation) and the
 * per-unit passes the program strings together. Plain C on CBLAS sgemm with
 * no acx dependency: acx-gpt (gpt.c) hands it the parameter and gradient
 * pointers of each unit between acquire and release, and the tests run the
 * same arithmetic on plain arrays.
 *
 * Shapes (row-major): B sequences of T tokens, N = B*T rows, C = d_model,
 * NH heads of hs = C/NH, V = vocab. Linear weights are torch.nn.Linear's
 * [out x in]; activations are [N x features].
 *
 * Contract of every backward: gradients are ADDED into (d... += ...), never
 * overwritten, as autograd accumulates and as acx_param_grad expects. The
 * _set variants overwrite the activation gradient (the input's) instead,
 * for a buffer that holds that one term, and still add into the parameter
 * gradients.
 */
#ifndef ACX_EXAMPLE_GPT_MODEL_H
#define ACX_EXAMPLE_GPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* ---- kernels ---- */

/* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]. tok: [B*T], every value < V (checked by the caller). */
void gpt_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T,
                   int C);
/* dwte[tok] += dout; dwpe[t] += dout. */
void gpt_embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T,
                   int C);

/* torch.nn.LayerNorm over the last dimension (biased variance, eps GPT_LN_EPS of
 * gpt_math.h: 1e-5).
 * mean, rstd: [N], saved for backward. */
void gpt_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C);
void gpt_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C);

/* out[N x OC] = inp[N x C] W^T + bias; W [OC x C], bias [OC] or NULL (sgemm). */
void gpt_matmul_fwd(float *out, const float *inp, const float *W, const float *bias, int N, int C,
                    int OC);
/* dinp += dout W; dW += dout^T inp; dbias += column sums of dout. dbias may be NULL. */
void gpt_matmul_bwd(float *dinp, float *dW, float *dbias, const float *dout, const float *inp,
                    const float *W, int N, int C, int OC);
/* The same with dinp = dout W overwritten (sgemm beta 0; its previous
 * contents, NaN included, are not read); dW and dbias still added. For an
 * activation gradient that holds this one term: no zeroing first. */
void gpt_matmul_bwd_set(float *dinp, float *dW, float *dbias, const float *dout, const float *inp,
                        const float *W, int N, int C, int OC);

/* Causal multi-head self-attention. qkv [B x T x 3C] holds q, k, v side by
 * side (columns 0..C-1, C..2C-1, 2C..3C-1), head h in columns h*hs..h*hs+hs-1
 * of each. out [B x T x C]; att [B x NH x T x T] the softmax weights (0 above
 * the diagonal), saved for backward. Scale 1/sqrt(hs). */
void gpt_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* dqkv += d(out)/d(qkv) . dout. scratch: [T x T] floats. */
void gpt_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                       int T, int C, int NH, float *scratch);
/* The same with dqkv overwritten. */
void gpt_attention_bwd_set(float *dqkv, const float *dout, const float *qkv, const float *att,
                           int B, int T, int C, int NH, float *scratch);

/* GELU, tanh approximation (GPT-2; torch's gelu(approximate="tanh")). */
void gpt_gelu_fwd(float *out, const float *inp, size_t n);
void gpt_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n);
/* dinp = gelu'(inp) dout, overwritten. */
void gpt_gelu_bwd_set(float *dinp, const float *inp, const float *dout, size_t n);

/* out = a + b; backward da += dout, db += dout. */
void gpt_residual_fwd(float *out, const float *a, const float *b, size_t n);
void gpt_residual_bwd(float *da, float *db, const float *dout, size_t n);

/* Softmax cross-entropy. probs [N x V] = softmax(logits) (may alias
 * logits); returns the mean over the N rows of -log probs[target].
 * targets: [N], each < V. */
double gpt_crossentropy_fwd(float *probs, const float *logits, const int32_t *targets, int N,
                            int V);
/* dlogits += scale * (probs - onehot(target)); scale = 1/N for the mean loss. */
void gpt_crossentropy_bwd(float *dlogits, const float *probs, const int32_t *targets, int N, int V,
                          float scale);
/* dlogits = scale * (probs - onehot(target)), overwritten. */
void gpt_crossentropy_bwd_set(float *dlogits, const float *probs, const int32_t *targets, int N,
                              int V, float scale);

/* ---- the model ---- */

typedef struct gpt_config {
    int vocab;   /* V */
    int seq_len; /* T: the context, and wpe's rows */
    int d_model; /* C */
    int heads;   /* NH, divides C */
    int layers;  /* L */
} gpt_config_t;

/* One block's tensors (parameters or their gradients), in torch's names:
 * ln_1, attn.c_attn [3C x C], attn.c_proj [C x C], ln_2, mlp.c_fc [4C x C],
 * mlp.c_proj [C x 4C]. */
enum {
    GPT_LN1_W,
    GPT_LN1_B,
    GPT_QKV_W,
    GPT_QKV_B,
    GPT_ATTPROJ_W,
    GPT_ATTPROJ_B,
    GPT_LN2_W,
    GPT_LN2_B,
    GPT_FC_W,
    GPT_FC_B,
    GPT_FCPROJ_W,
    GPT_FCPROJ_B,
    GPT_BLOCK_TENSORS
};
typedef struct gpt_block_tensors {
    float *t[GPT_BLOCK_TENSORS];
} gpt_block_tensors_t;
/* The same, read-only: a block's parameters (acx_param_data is const). */
typedef struct gpt_block_params {
    const float *t[GPT_BLOCK_TENSORS];
} gpt_block_params_t;

/* Name suffix ("ln_1.weight"...) and shape of block tensor i (ndim 1 or 2). */
const char *gpt_block_tensor_name(int i);
int gpt_block_tensor_shape(const gpt_config_t *cfg, int i, int64_t shape[2]);
/* Total parameters of the model (wte, wpe, blocks, ln_f). */
int64_t gpt_num_params(const gpt_config_t *cfg);

/* Activations of one block, saved by forward for backward. */
typedef struct gpt_block_acts {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *attproj, *res2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
} gpt_block_acts_t;

/* Everything forward and backward need for batches of up to B x T. */
typedef struct gpt_workspace {
    gpt_config_t cfg;
    int max_B;
    float *encoded;           /* [N x C] embedding output = block 0's input */
    gpt_block_acts_t *blocks; /* [L] */
    float *lnf, *lnf_mean, *lnf_rstd;
    float *probs;            /* [N x V] logits, then softmax probabilities */
    float *dlogits;          /* [N x V] the seed of backward */
    float *dres, *dres_in;   /* [N x C] gradient w.r.t. a block's output / input */
    float *dres_mid;         /* [N x C] gradient w.r.t. res2 inside a block */
    float *dln, *datty;      /* [N x C] */
    float *dqkv;             /* [N x 3C] */
    float *dfch, *dfch_gelu; /* [N x 4C] */
    float *scratch;          /* [T x T] */
    size_t bytes;            /* of all the buffers above (activation memory) */
} gpt_workspace_t;

/* Allocate for batches of up to max_B sequences (of cfg->seq_len); 0 or -1 (out of memory). */
int gpt_workspace_init(gpt_workspace_t *ws, const gpt_config_t *cfg, int max_B);
void gpt_workspace_free(gpt_workspace_t *ws);

/* The per-unit passes, in forward order; B <= max_B, T <= seq_len.
 * embed: encoded = wte[tok] + wpe. */
void gpt_forward_embed(gpt_workspace_t *ws, const float *wte, const float *wpe, const int32_t *tok,
                       int B, int T);
/* Block l: res3 = x + attn(ln1(x)) + mlp(ln2(...)), x = block l-1's res3 (or encoded). */
void gpt_forward_block(gpt_workspace_t *ws, int l, const gpt_block_params_t *p, int B, int T);
/* The final unit and the tied head, apart (acx-gpt runs them under two
 * units: "final" holds ln_f, the shared unit "head" reads wte):
 * lnf: ws->lnf = ln_f(last block's output);
 * head: logits = ws->lnf wte^T, probabilities, the mean loss over the B*T
 * targets and dlogits = (probs - onehot)/(B*T). Returns the mean loss. */
void gpt_forward_lnf(gpt_workspace_t *ws, const float *lnf_w, const float *lnf_b, int B, int T);
double gpt_forward_head(gpt_workspace_t *ws, const float *wte, const int32_t *targets, int B,
                        int T);
/* Both (the program hands dlogits, the seed of backward, to
 * acx_backward_begin before gpt_backward_head). Returns the mean loss. */
double gpt_forward_final(gpt_workspace_t *ws, const float *lnf_w, const float *lnf_b,
                         const float *wte, const int32_t *targets, int B, int T);

/* Backward, in reverse order. head: from ws->dlogits, adds into dwte (the
 * tied weight's gradient) and sets ws->dln (the gradient w.r.t. ln_f's
 * output); lnf: from ws->dln, adds into dlnf_w/dlnf_b and leaves the
 * gradient w.r.t. the last block's output in ws->dres. */
void gpt_backward_head(gpt_workspace_t *ws, const float *wte, float *dwte, int B, int T);
void gpt_backward_lnf(gpt_workspace_t *ws, const float *lnf_w, float *dlnf_w, float *dlnf_b, int B,
                      int T);
/* Block l: from ws->dres (its output's gradient) to ws->dres (its input's),
 * adding into the block's parameter gradients g. */
void gpt_backward_block(gpt_workspace_t *ws, int l, const gpt_block_params_t *p,
                        gpt_block_tensors_t *g, int B, int T);
/* Embedding: adds ws->dres into dwte and dwpe. */
void gpt_backward_embed(gpt_workspace_t *ws, float *dwte, float *dwpe, const int32_t *tok, int B,
                        int T);

#endif /* ACX_EXAMPLE_GPT_MODEL_H */

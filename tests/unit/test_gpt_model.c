/*
 * tests/unit/test_gpt_model.c — acx-gpt's kernels (examples/gpt/gpt_model.c)
 * against central finite differences.
 *
 * Each kernel's forward is turned into a scalar L = sum_i out_i r_i (r fixed
 * random weights, the sum taken in double); its backward, given dout = r,
 * must give dL/dx for every input x. The finite difference perturbs one
 * float element by +-eps (the difference of the two perturbed floats is the
 * denominator, so float rounding of x +- eps does not bias it). The error
 * measure is max |analytic - fd| over a tensor, relative to max |analytic|:
 * float forwards make the differences noisy at ~1e-4 of that scale, a wrong
 * formula (a missing term, a transposed index) is off by O(1).
 * Every backward is also checked to ADD into its gradient buffers (they
 * start at 0.25, which is subtracted before comparing); the _set variants
 * to overwrite the input's gradient and add into the parameters'. Then the whole
 * model (two blocks, tied head, loss) is checked element by element for every
 * parameter, with the tokens and targets of a tiny batch.
 */
#include <stdint.h>

#include "../acx_test.h"
#include "gpt_model.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* splitmix64 -> [0, 1) */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}
static void fill(float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * urand());
}

#define PRE 0.25f /* gradient buffers start here: backward must add */

typedef double (*objective_fn)(void *ctx);

/* Compare analytic[0..n) (minus PRE) with central differences of f in x. */
static int fd_check(const char *what, float *x, size_t n, const float *analytic, objective_fn f,
                    void *ctx, float eps, double tol) {
    double max_err = 0.0, max_ref = 1e-6;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        float old = x[i], hi = old + eps, lo = old - eps;
        x[i] = hi;
        double lp = f(ctx);
        x[i] = lo;
        double lm = f(ctx);
        x[i] = old;
        double fd = (lp - lm) / ((double)hi - (double)lo);
        double a = (double)analytic[i] - PRE;
        if (fabs(a) > max_ref) max_ref = fabs(a);
        if (fabs(a - fd) > max_err) {
            max_err = fabs(a - fd);
            worst = i;
        }
    }
    if (max_err / max_ref > tol) {
        fprintf(stderr, "\n%s: max |analytic - fd| = %.3g at %zu (analytic %.6g), scale %.3g\n",
                what, max_err, worst, (double)analytic[worst] - PRE, max_ref);
        return 1;
    }
    return 0;
}

static float *falloc(size_t n) { return calloc(n, sizeof(float)); }
static void preset(float *g, size_t n) {
    for (size_t i = 0; i < n; i++)
        g[i] = PRE;
}
static double dot_r(const float *out, const float *r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)out[i] * r[i];
    return s;
}

/* One kernel under test: its inputs, output and the weights r. */
typedef struct kctx {
    int kind, B, T, C, NH, N, V, OC;
    float *x, *w, *b, *out, *aux1, *aux2, *r;
    int32_t *tok;
    size_t n_out;
} kctx_t;

enum { K_EMBED, K_LN, K_MATMUL, K_ATTN, K_GELU, K_RESID, K_XENT };

static double k_objective(void *p) {
    kctx_t *k = p;
    switch (k->kind) {
    case K_EMBED: gpt_embed_fwd(k->out, k->tok, k->x, k->w, k->B, k->T, k->C); break;
    case K_LN: gpt_layernorm_fwd(k->out, k->aux1, k->aux2, k->x, k->w, k->b, k->N, k->C); break;
    case K_MATMUL: gpt_matmul_fwd(k->out, k->x, k->w, k->b, k->N, k->C, k->OC); break;
    case K_ATTN: gpt_attention_fwd(k->out, k->aux1, k->x, k->B, k->T, k->C, k->NH); break;
    case K_GELU: gpt_gelu_fwd(k->out, k->x, k->n_out); break;
    case K_RESID: gpt_residual_fwd(k->out, k->x, k->w, k->n_out); break;
    case K_XENT: return gpt_crossentropy_fwd(k->out, k->x, k->tok, k->N, k->V);
    }
    return dot_r(k->out, k->r, k->n_out);
}

static int test_embed(void) {
    TESTING("gpt: embedding backward = finite differences");
    kctx_t k = {.kind = K_EMBED, .B = 2, .T = 3, .C = 4, .V = 5};
    int32_t tok[6] = {1, 4, 1, 0, 2, 4}; /* repeats: gradients of one row add up */
    k.tok = tok;
    k.n_out = 24;
    k.x = falloc(20), k.w = falloc(12), k.out = falloc(24), k.r = falloc(24);
    float *dwte = falloc(20), *dwpe = falloc(12);
    fill(k.x, 20, -1, 1), fill(k.w, 12, -1, 1), fill(k.r, 24, -1, 1);
    preset(dwte, 20), preset(dwpe, 12);
    gpt_embed_bwd(dwte, dwpe, k.r, tok, 2, 3, 4);
    CHECK(fd_check("dwte", k.x, 20, dwte, k_objective, &k, 1e-2f, 1e-3) == 0);
    CHECK(fd_check("dwpe", k.w, 12, dwpe, k_objective, &k, 1e-2f, 1e-3) == 0);
    CHECK_CLOSE(dwte[3 * 4] - PRE, 0.0, 0, 0); /* token 3 never occurs */
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_layernorm(void) {
    TESTING("gpt: layernorm forward (mean 0, var 1) and backward");
    enum { N = 3, C = 7 };
    kctx_t k = {.kind = K_LN, .N = N, .C = C, .n_out = N * C};
    k.x = falloc(N * C), k.w = falloc(C), k.b = falloc(C), k.out = falloc(N * C);
    k.aux1 = falloc(N), k.aux2 = falloc(N), k.r = falloc(N * C);
    float *dx = falloc(N * C), *dw = falloc(C), *db = falloc(C);
    fill(k.x, N * C, -2, 3), fill(k.w, C, 0.5, 1.5), fill(k.b, C, -0.5, 0.5);
    fill(k.r, N * C, -1, 1);
    /* with w = 1, b = 0 each row has mean 0 and (biased) variance 1/(1+eps/var) */
    float ones[C], zeros[C] = {0};
    for (int i = 0; i < C; i++)
        ones[i] = 1.0f;
    gpt_layernorm_fwd(k.out, k.aux1, k.aux2, k.x, ones, zeros, N, C);
    for (int n = 0; n < N; n++) {
        double s = 0, s2 = 0, v = 0, m;
        for (int i = 0; i < C; i++)
            s += k.x[n * C + i];
        m = s / C;
        for (int i = 0; i < C; i++)
            v += (k.x[n * C + i] - m) * (k.x[n * C + i] - m) / C;
        s = 0;
        for (int i = 0; i < C; i++)
            s += k.out[n * C + i], s2 += (double)k.out[n * C + i] * k.out[n * C + i];
        CHECK_CLOSE(s / C, 0.0, 0, 1e-6);
        CHECK_CLOSE(s2 / C, v / (v + 1e-5), 1e-5, 0);
    }
    k_objective(&k); /* the statistics of x for backward */
    preset(dx, N * C), preset(dw, C), preset(db, C);
    gpt_layernorm_bwd(dx, dw, db, k.r, k.x, k.w, k.aux1, k.aux2, N, C);
    CHECK(fd_check("dinp", k.x, N * C, dx, k_objective, &k, 1e-2f, 2e-3) == 0);
    CHECK(fd_check("dw", k.w, C, dw, k_objective, &k, 1e-2f, 2e-3) == 0);
    CHECK(fd_check("db", k.b, C, db, k_objective, &k, 1e-2f, 2e-3) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_matmul(int with_bias) {
    TESTING(with_bias ? "gpt: matmul (sgemm) with bias, backward"
                      : "gpt: matmul (sgemm) without bias, backward");
    enum { N = 5, C = 4, OC = 6 };
    kctx_t k = {.kind = K_MATMUL, .N = N, .C = C, .OC = OC, .n_out = N * OC};
    k.x = falloc(N * C), k.w = falloc(OC * C), k.b = with_bias ? falloc(OC) : NULL;
    k.out = falloc(N * OC), k.r = falloc(N * OC);
    float *dx = falloc(N * C), *dw = falloc(OC * C), *db = falloc(OC);
    fill(k.x, N * C, -1, 1), fill(k.w, OC * C, -1, 1), fill(k.r, N * OC, -1, 1);
    if (with_bias) fill(k.b, OC, -1, 1);
    /* forward against a plain triple loop: out[n][j] = b[j] + sum_i x[n][i] W[j][i] */
    k_objective(&k);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < OC; j++) {
            double s = with_bias ? k.b[j] : 0.0;
            for (int i = 0; i < C; i++)
                s += (double)k.x[n * C + i] * k.w[j * C + i];
            CHECK_CLOSE(k.out[n * OC + j], s, 1e-5, 1e-6);
        }
    preset(dx, N * C), preset(dw, OC * C), preset(db, OC);
    gpt_matmul_bwd(dx, dw, with_bias ? db : NULL, k.r, k.x, k.w, N, C, OC);
    CHECK(fd_check("dinp", k.x, N * C, dx, k_objective, &k, 1e-2f, 1e-3) == 0);
    CHECK(fd_check("dW", k.w, OC * C, dw, k_objective, &k, 1e-2f, 1e-3) == 0);
    if (with_bias) CHECK(fd_check("dbias", k.b, OC, db, k_objective, &k, 1e-2f, 1e-3) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_attention(void) {
    TESTING("gpt: causal attention forward (t=0, mask) and backward");
    enum { B = 2, T = 5, C = 6, NH = 2 };
    kctx_t k = {.kind = K_ATTN, .B = B, .T = T, .C = C, .NH = NH, .n_out = B * T * C};
    k.x = falloc(B * T * 3 * C), k.out = falloc(B * T * C), k.r = falloc(B * T * C);
    k.aux1 = falloc(B * NH * T * T);
    float *dqkv = falloc(B * T * 3 * C), scratch[T * T];
    fill(k.x, B * T * 3 * C, -1.5, 1.5), fill(k.r, B * T * C, -1, 1);
    k_objective(&k);
    /* position 0 attends only to itself: its output is its own v */
    for (int b = 0; b < B; b++)
        for (int i = 0; i < C; i++)
            CHECK_CLOSE(k.out[(b * T) * C + i], k.x[(b * T) * 3 * C + 2 * C + i], 0, 1e-7);
    /* rows of att sum to 1 and vanish above the diagonal */
    for (int row = 0; row < B * NH * T; row++) {
        int t = row % T;
        double s = 0;
        for (int j = 0; j < T; j++) {
            s += k.aux1[row * T + j];
            if (j > t) CHECK(k.aux1[row * T + j] == 0.0f);
        }
        CHECK_CLOSE(s, 1.0, 1e-6, 0);
    }
    preset(dqkv, B * T * 3 * C);
    gpt_attention_bwd(dqkv, k.r, k.x, k.aux1, B, T, C, NH, scratch);
    CHECK(fd_check("dqkv", k.x, B * T * 3 * C, dqkv, k_objective, &k, 1e-2f, 2e-3) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* The attention's products run in blocks of rows and columns (gpt_model.c's
 * ATT_BLOCK, 16): at T 37 (two full blocks and a partial one) forward and
 * backward against a plain reference in double, written from the formulas:
 * o_t = sum_{s<=t} a_ts v_s, a_t = softmax_s<=t(q_t.k_s / sqrt(hs));
 * dv_s = sum_{t>=s} a_ts do_t, da_ts = do_t.v_s,
 * dz_ts = a_ts (da_ts - sum_j a_tj da_tj) / sqrt(hs), dq_t = sum_s dz_ts k_s,
 * dk_s = sum_t dz_ts q_t. */
static int test_attention_blocks(void) {
    TESTING("gpt: attention at T 37 (blocked products) = reference");
    enum { B = 2, T = 37, C = 8, NH = 2, hs = C / NH, C3 = 3 * C };
    float *qkv = falloc(B * T * C3), *out = falloc(B * T * C), *att = falloc(B * NH * T * T);
    float *dout = falloc(B * T * C), *dqkv = falloc(B * T * C3), *scratch = falloc(T * T);
    double *ref = calloc(B * T * C, sizeof(double)), *dref = calloc(B * T * C3, sizeof(double));
    double a[T][T], dz[T][T];
    fill(qkv, B * T * C3, -2, 2), fill(dout, B * T * C, -1, 1);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
#define Q(t, i)  qkv[((b)*T + (t)) * C3 + h * hs + (i)]
#define K(t, i)  qkv[((b)*T + (t)) * C3 + C + h * hs + (i)]
#define V(t, i)  qkv[((b)*T + (t)) * C3 + 2 * C + h * hs + (i)]
#define DO(t, i) dout[((b)*T + (t)) * C + h * hs + (i)]
            for (int t = 0; t < T; t++) {
                double mx = -1e300, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double z = 0;
                    for (int i = 0; i < hs; i++)
                        z += (double)Q(t, i) * K(s, i);
                    a[t][s] = z / sqrt((double)hs);
                    if (a[t][s] > mx) mx = a[t][s];
                }
                for (int s = 0; s <= t; s++)
                    sum += (a[t][s] = exp(a[t][s] - mx));
                for (int s = 0; s <= t; s++) {
                    a[t][s] /= sum;
                    for (int i = 0; i < hs; i++)
                        ref[(b * T + t) * C + h * hs + i] += a[t][s] * V(s, i);
                }
                double dot = 0;
                for (int s = 0; s <= t; s++) {
                    double da = 0;
                    for (int i = 0; i < hs; i++)
                        da += (double)DO(t, i) * V(s, i);
                    dz[t][s] = da;
                    dot += a[t][s] * da;
                }
                for (int s = 0; s <= t; s++)
                    dz[t][s] = a[t][s] * (dz[t][s] - dot) / sqrt((double)hs);
            }
            for (int t = 0; t < T; t++)
                for (int s = 0; s <= t; s++)
                    for (int i = 0; i < hs; i++) {
                        dref[(b * T + t) * C3 + h * hs + i] += dz[t][s] * K(s, i);
                        dref[(b * T + s) * C3 + C + h * hs + i] += dz[t][s] * Q(t, i);
                        dref[(b * T + s) * C3 + 2 * C + h * hs + i] += a[t][s] * DO(t, i);
                    }
#undef Q
#undef K
#undef V
#undef DO
        }
    gpt_attention_fwd(out, att, qkv, B, T, C, NH);
    for (int i = 0; i < B * T * C; i++)
        CHECK_CLOSE(out[i], ref[i], 1e-5, 1e-6);
    for (int row = 0; row < B * NH * T; row++)
        for (int s = row % T + 1; s < T; s++)
            CHECK(att[(size_t)row * T + s] == 0.0f);
    preset(dqkv, B * T * C3);
    gpt_attention_bwd(dqkv, dout, qkv, att, B, T, C, NH, scratch);
    for (int i = 0; i < B * T * C3; i++)
        CHECK_CLOSE(dqkv[i] - PRE, dref[i], 1e-4, 1e-5);
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(scratch), free(ref), free(dref);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* The _set backward variants against the adding ones: started on NaN (so
 * a value read before being written shows), the overwritten input gradient
 * equals the adding kernel's on zeros bit for bit (0 + x = x), and the
 * parameter gradients are still added into (both start at PRE). */
static int same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}
static int test_set_variants(void) {
    TESTING("gpt: _set backward variants overwrite the input gradient only");
    enum { B = 2, T = 19, C = 6, NH = 2, N = B * T, OC = 12 }; /* N*C = 228: a GELU tail */
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, nqkv = (size_t)N * 3 * C;
    float *x = falloc(nx), *w = falloc(nw), *dout = falloc((size_t)N * OC);
    float *dx_add = falloc(nx), *dx_set = falloc(nx), *dw_add = falloc(nw), *dw_set = falloc(nw);
    float *db_add = falloc(OC), *db_set = falloc(OC);
    float *qkv = falloc(nqkv), *att = falloc((size_t)B * NH * T * T), *out = falloc(nx);
    float *dq_add = falloc(nqkv), *dq_set = falloc(nqkv), *scratch = falloc(T * T);
    fill(x, nx, -1, 1), fill(w, nw, -1, 1), fill(dout, (size_t)N * OC, -1, 1);
    fill(qkv, nqkv, -1.5, 1.5);
    for (size_t i = 0; i < nx; i++)
        dx_set[i] = NAN;
    preset(dw_add, nw), preset(dw_set, nw), preset(db_add, OC), preset(db_set, OC);
    gpt_matmul_bwd(dx_add, dw_add, db_add, dout, x, w, N, C, OC);
    gpt_matmul_bwd_set(dx_set, dw_set, db_set, dout, x, w, N, C, OC);
    CHECK(same_bits(dx_add, dx_set, nx));
    CHECK(same_bits(dw_add, dw_set, nw) && same_bits(db_add, db_set, OC));
    CHECK(dw_add[0] != PRE); /* something was added */
    gpt_attention_fwd(out, att, qkv, B, T, C, NH);
    for (size_t i = 0; i < nqkv; i++)
        dq_set[i] = NAN;
    gpt_attention_bwd(dq_add, dout, qkv, att, B, T, C, NH, scratch); /* dout: read as [N x C] */
    gpt_attention_bwd_set(dq_set, dout, qkv, att, B, T, C, NH, scratch);
    CHECK(same_bits(dq_add, dq_set, nqkv));
    for (size_t i = 0; i < nx; i++)
        dx_set[i] = NAN, dx_add[i] = 0.0f;
    gpt_gelu_bwd(dx_add, x, out, nx);
    gpt_gelu_bwd_set(dx_set, x, out, nx);
    CHECK(same_bits(dx_add, dx_set, nx));
    free(x), free(w), free(dout), free(dx_add), free(dx_set), free(dw_add), free(dw_set);
    free(db_add), free(db_set), free(qkv), free(att), free(out), free(dq_add), free(dq_set);
    free(scratch);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_gelu_residual(void) {
    TESTING("gpt: gelu (tanh) and residual, forward and backward");
    enum { n = 41 };
    kctx_t k = {.kind = K_GELU, .n_out = n};
    k.x = falloc(n), k.w = falloc(n), k.out = falloc(n), k.r = falloc(n);
    float *dx = falloc(n), *dw = falloc(n);
    for (int i = 0; i < n; i++)
        k.x[i] = -5.0f + 0.25f * (float)i; /* -5 .. 5 */
    fill(k.r, n, -1, 1), fill(k.w, n, -1, 1);
    /* values of torch.nn.functional.gelu(x, approximate="tanh") */
    gpt_gelu_fwd(k.out, (float[]){1.0f, -1.0f, 3.0f}, 3);
    CHECK_CLOSE(k.out[0], 0.8411920, 0, 2e-7);
    CHECK_CLOSE(k.out[1], -0.1588080, 0, 2e-7);
    CHECK_CLOSE(k.out[2], 2.9963627, 0, 3e-7);
    /* over [-12, 12], forward and backward against the formulas in double
     * with libm's tanh (the kernels use their own, vectorizable tanh) */
    {
        enum { NG = 4801 };
        float *gx = falloc(NG), *gy = falloc(NG), *gd = falloc(NG), *ones = falloc(NG);
        for (int i = 0; i < NG; i++)
            gx[i] = -12.0f + 0.005f * (float)i, ones[i] = 1.0f, gd[i] = 0.0f;
        gpt_gelu_fwd(gy, gx, NG);
        gpt_gelu_bwd(gd, gx, ones, NG);
        /* the bound: what the same float formulas give with libm's
         * tanhf (1 - th^2 cancels near |th| = 1 in any float tanh) */
        double worst_y = 0, worst_d = 0, libm_y = 0, libm_d = 0;
        for (int i = 0; i < NG; i++) {
            double x = gx[i], u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
            double y = 0.5 * x * (1 + th);
            double d = 0.5 * (1 + th) +
                       0.5 * x * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
            float xf = gx[i], tf = tanhf(0.7978845608028654f * (xf + 0.044715f * xf * xf * xf));
            float yf = 0.5f * xf * (1.0f + tf);
            float df = 0.5f * (1.0f + tf) + 0.5f * xf * (1.0f - tf * tf) * 0.7978845608028654f *
                                                (1.0f + 3.0f * 0.044715f * xf * xf);
            worst_y = fmax(worst_y, fabs(gy[i] - y) / fmax(1.0, fabs(y)));
            worst_d = fmax(worst_d, fabs(gd[i] - d) / fmax(1.0, fabs(d)));
            libm_y = fmax(libm_y, fabs(yf - y) / fmax(1.0, fabs(y)));
            libm_d = fmax(libm_d, fabs(df - d) / fmax(1.0, fabs(d)));
        }
        free(gx), free(gy), free(gd), free(ones);
        if (worst_y > 2 * libm_y + 1e-7 || worst_d > 2 * libm_d + 1e-7)
            fprintf(stderr, "gelu: worst error %.3g / %.3g (libm tanhf: %.3g / %.3g)\n", worst_y,
                    worst_d, libm_y, libm_d);
        CHECK(worst_y <= 2 * libm_y + 1e-7);
        CHECK(worst_d <= 2 * libm_d + 1e-7);
    }
    preset(dx, n);
    gpt_gelu_bwd(dx, k.x, k.r, n);
    CHECK(fd_check("gelu", k.x, n, dx, k_objective, &k, 1e-2f, 1e-3) == 0);
    k.kind = K_RESID;
    preset(dx, n), preset(dw, n);
    gpt_residual_bwd(dx, dw, k.r, n);
    CHECK(fd_check("residual a", k.x, n, dx, k_objective, &k, 1e-2f, 1e-4) == 0);
    CHECK(fd_check("residual b", k.w, n, dw, k_objective, &k, 1e-2f, 1e-4) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_crossentropy(void) {
    TESTING("gpt: softmax cross-entropy forward (log V) and backward");
    enum { N = 4, V = 9 };
    kctx_t k = {.kind = K_XENT, .N = N, .V = V};
    int32_t tg[N] = {0, 8, 3, 3};
    k.tok = tg;
    k.x = falloc(N * V), k.out = falloc(N * V);
    float *d = falloc(N * V);
    /* equal logits: every probability 1/V, loss log V */
    CHECK_CLOSE(gpt_crossentropy_fwd(k.out, k.x, tg, N, V), log(9.0), 1e-7, 0);
    CHECK_CLOSE(k.out[5], 1.0 / 9.0, 1e-6, 0);
    fill(k.x, N * V, -3, 3);
    k.x[2] = 60.0f; /* a large logit: no overflow (the max is subtracted) */
    double loss = k_objective(&k), ref = 0.0;
    for (int n = 0; n < N; n++) {
        double s = 0;
        for (int j = 0; j < V; j++)
            s += exp((double)k.x[n * V + j]);
        ref += log(s) - k.x[n * V + tg[n]];
    }
    CHECK_CLOSE(loss, ref / N, 1e-6, 0);
    /* in place (probs aliasing logits, as gpt_forward_final calls it): the same loss */
    memcpy(d, k.x, N * V * sizeof(float));
    CHECK_CLOSE(gpt_crossentropy_fwd(d, d, tg, N, V), loss, 1e-12, 0);
    CHECK(memcmp(d, k.out, N * V * sizeof(float)) == 0);
    preset(d, N * V);
    gpt_crossentropy_bwd(d, k.out, tg, N, V, 1.0f / N);
    CHECK(fd_check("dlogits", k.x, N * V, d, k_objective, &k, 1e-2f, 2e-3) == 0);
    /* the _set variant: the same values without the preset (probs of the
     * unperturbed logits again: fd_check's last call left perturbed ones) */
    k_objective(&k);
    float *d2 = falloc(N * V);
    for (int i = 0; i < N * V; i++)
        d2[i] = NAN;
    gpt_crossentropy_bwd_set(d2, k.out, tg, N, V, 1.0f / N);
    for (int i = 0; i < N * V; i++)
        CHECK_CLOSE(d2[i], d[i] - PRE, 0, 1e-7);
    free(d2);
    /* a NaN logit (not its row's target) makes the loss NaN, not hidden by the exp's clamp */
    k.x[N * V - 1] = NAN;
    CHECK(isnan(k_objective(&k)));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- the whole model ---- */

typedef struct mctx {
    gpt_config_t cfg;
    gpt_workspace_t ws;
    int B, T;
    float *wte, *wpe, *lnf_w, *lnf_b;
    gpt_block_tensors_t blk[2];
    int32_t *tok, *tgt;
} mctx_t;

static gpt_block_params_t m_params(const mctx_t *m, int l) {
    gpt_block_params_t p;
    for (int i = 0; i < GPT_BLOCK_TENSORS; i++)
        p.t[i] = m->blk[l].t[i];
    return p;
}

static double m_loss(void *p) {
    mctx_t *m = p;
    gpt_forward_embed(&m->ws, m->wte, m->wpe, m->tok, m->B, m->T);
    for (int l = 0; l < m->cfg.layers; l++) {
        gpt_block_params_t bp = m_params(m, l);
        gpt_forward_block(&m->ws, l, &bp, m->B, m->T);
    }
    return gpt_forward_final(&m->ws, m->lnf_w, m->lnf_b, m->wte, m->tgt, m->B, m->T);
}

static int test_model(void) {
    TESTING("gpt: whole model (2 blocks, tied head) gradient = fd");
    mctx_t m = {.cfg = {.vocab = 7, .seq_len = 4, .d_model = 8, .heads = 2, .layers = 2}, .B = 2};
    int C = 8, V = 7, Tm = 4;
    m.T = 3; /* shorter than the context: wpe's last row gets no gradient */
    CHECK(gpt_workspace_init(&m.ws, &m.cfg, m.B) == 0);
    int32_t tok[6] = {1, 6, 2, 2, 0, 5}, tgt[6] = {6, 2, 3, 0, 5, 5};
    m.tok = tok, m.tgt = tgt;
    m.wte = falloc(V * C), m.wpe = falloc(Tm * C), m.lnf_w = falloc(C), m.lnf_b = falloc(C);
    float *g_wte = falloc(V * C), *g_wpe = falloc(Tm * C), *g_lw = falloc(C), *g_lb = falloc(C);
    fill(m.wte, V * C, -0.5, 0.5), fill(m.wpe, Tm * C, -0.5, 0.5);
    fill(m.lnf_w, C, 0.7, 1.3), fill(m.lnf_b, C, -0.2, 0.2);
    preset(g_wte, V * C), preset(g_wpe, Tm * C), preset(g_lw, C), preset(g_lb, C);
    gpt_block_tensors_t grads[2];
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < GPT_BLOCK_TENSORS; i++) {
            int64_t s[2];
            size_t n = gpt_block_tensor_shape(&m.cfg, i, s) == 2 ? s[0] * s[1] : s[0];
            m.blk[l].t[i] = falloc(n);
            grads[l].t[i] = falloc(n);
            int is_ln_w = i == GPT_LN1_W || i == GPT_LN2_W;
            fill(m.blk[l].t[i], n, is_ln_w ? 0.7 : -0.4, is_ln_w ? 1.3 : 0.4);
            preset(grads[l].t[i], n);
        }
    /* forward, then backward as acx-gpt runs it: the tied head, ln_f, blocks
     * in reverse, embedding */
    double loss = m_loss(&m);
    CHECK(loss > 0.5 && loss < 5.0);
    gpt_backward_head(&m.ws, m.wte, g_wte, m.B, m.T);
    gpt_backward_lnf(&m.ws, m.lnf_w, g_lw, g_lb, m.B, m.T);
    for (int l = 1; l >= 0; l--) {
        gpt_block_params_t p = m_params(&m, l);
        gpt_backward_block(&m.ws, l, &p, &grads[l], m.B, m.T);
    }
    gpt_backward_embed(&m.ws, g_wte, g_wpe, tok, m.B, m.T);
    CHECK(fd_check("wte (embedding + tied head)", m.wte, V * C, g_wte, m_loss, &m, 1e-2f, 5e-3) ==
          0);
    CHECK(fd_check("wpe", m.wpe, Tm * C, g_wpe, m_loss, &m, 1e-2f, 5e-3) == 0);
    CHECK_CLOSE(g_wpe[3 * C] - PRE, 0.0, 0, 0);
    CHECK(fd_check("ln_f.weight", m.lnf_w, C, g_lw, m_loss, &m, 1e-2f, 5e-3) == 0);
    CHECK(fd_check("ln_f.bias", m.lnf_b, C, g_lb, m_loss, &m, 1e-2f, 5e-3) == 0);
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < GPT_BLOCK_TENSORS; i++) {
            int64_t s[2];
            size_t n = gpt_block_tensor_shape(&m.cfg, i, s) == 2 ? s[0] * s[1] : s[0];
            char what[64];
            snprintf(what, sizeof what, "h.%d.%s", l, gpt_block_tensor_name(i));
            CHECK(fd_check(what, m.blk[l].t[i], n, grads[l].t[i], m_loss, &m, 1e-2f, 5e-3) == 0);
        }
    gpt_workspace_free(&m.ws);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(120);
    int fails = 0;
    fails += test_embed();
    fails += test_layernorm();
    fails += test_matmul(1);
    fails += test_matmul(0);
    fails += test_attention();
    fails += test_attention_blocks();
    fails += test_set_variants();
    fails += test_gelu_residual();
    fails += test_crossentropy();
    fails += test_model();
    return fails ? 1 : 0;
}

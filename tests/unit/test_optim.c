/*
 * tests/unit/test_optim.c — the optimizer kernels (base/optim_kernels.c)
 * and the optimizer objects' argument checks (runtime/optimizer.c).
 *
 * Three kinds of expected values, none computed by the code under test:
 * - numbers worked out by hand in the comments (SGD variants over two steps;
 *   Adam moving every weight by exactly lr*sign(g) while the gradient is
 *   constant, because then m/(1-beta1^t) = g and v/(1-beta2^t) = g^2);
 * - a plain double-precision reference written from the textbook formulas
 *   (Loshchilov & Hutter; torch.optim's documentation), a different
 *   formulation from the kernel's (bias-corrected m-hat and v-hat, no lerp),
 *   compared after every step of 5 with varying gradients;
 * - literals printed by torch 1.13 (python3-torch, torch.optim.SGD/Adam/AdamW,
 *   3 steps, script in the comment above them).
 * Plus the floating-point environment: subnormal moments are flushed inside
 * the kernel, and the caller's MXCSR control bits are restored after it,
 * and the argument checks of acx_optimizer_add_param_group (its arithmetic
 * is tests/mpi/test_param_groups.c's: a step needs a prepared model).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "runtime/accelerator.h"
#include "base/optim_kernels.h"
#include "sharding/model.h"
#include "tests/acx_test.h"

#define N3 3

/* ---- double-precision reference (textbook formulas) ---- */

typedef struct ref_state {
    double p[64], m[64], v[64], buf[64];
} ref_state_t;

static void ref_sgd(ref_state_t *r, const float *g, int n, const acx_sgd_hparams_t *hp, int t) {
    for (int i = 0; i < n; i++) {
        double d = g[i] + hp->weight_decay * r->p[i];
        if (hp->momentum != 0.0) {
            r->buf[i] = t == 1 ? d : hp->momentum * r->buf[i] + (1.0 - hp->dampening) * d;
            d = hp->nesterov ? d + hp->momentum * r->buf[i] : r->buf[i];
        }
        r->p[i] -= hp->lr * d;
    }
}

static void ref_adam(ref_state_t *r, const float *g, int n, const acx_adam_hparams_t *hp, int t,
                     int decoupled) {
    for (int i = 0; i < n; i++) {
        double gi = g[i];
        if (decoupled)
            r->p[i] -= hp->lr * hp->weight_decay * r->p[i];
        else
            gi += hp->weight_decay * r->p[i];
        r->m[i] = hp->beta1 * r->m[i] + (1.0 - hp->beta1) * gi;
        r->v[i] = hp->beta2 * r->v[i] + (1.0 - hp->beta2) * gi * gi;
        double mhat = r->m[i] / (1.0 - pow(hp->beta1, t));
        double vhat = r->v[i] / (1.0 - pow(hp->beta2, t));
        r->p[i] -= hp->lr * mhat / (sqrt(vhat) + hp->eps);
    }
}

/* 37 elements = two 16-element blocks and a 5-element tail; 5 steps of
 * gradients of mixed magnitude and sign, with exact zeros and sign flips. */
#define NR 37
#define TR 5
static float p_init[NR], grads[TR][NR];

static void make_fixture(void) {
    for (int i = 0; i < NR; i++) {
        p_init[i] = (float)(0.2371 * ((i * 7) % 11) - 1.3);
        for (int t = 0; t < TR; t++) {
            int k = (i * 5 + t * 3) % 13;
            float mag = (float)(k == 0 ? 0.0 : pow(10.0, -(double)(k % 4)));
            grads[t][i] = ((i + t) % 3 == 0 ? -mag : mag) * (float)(1.0 + 0.1 * (i % 5));
        }
    }
}

/* ---- SGD ---- */

/* p = [1, -2, 0.5], g = [0.5, 0.25, -1] on both steps, lr = 0.1. */
static const float sgd_p0[N3] = {1.0f, -2.0f, 0.5f};
static const float sgd_g[N3] = {0.5f, 0.25f, -1.0f};

static int sgd_two_steps(const acx_sgd_hparams_t *hp, const float want1[N3], const float want2[N3],
                         const float want_buf[N3]) {
    float p[N3], buf[N3] = {7, 7, 7}; /* garbage: the first step must overwrite it */
    memcpy(p, sgd_p0, sizeof p);
    acx_kernel_sgd(p, sgd_g, buf, N3, hp, hp->lr, 1);
    for (int i = 0; i < N3; i++)
        CHECK_CLOSE(p[i], want1[i], 1e-6, 1e-7);
    acx_kernel_sgd(p, sgd_g, buf, N3, hp, hp->lr, 0);
    for (int i = 0; i < N3; i++)
        CHECK_CLOSE(p[i], want2[i], 1e-6, 1e-7);
    if (want_buf != NULL)
        for (int i = 0; i < N3; i++)
            CHECK_CLOSE(buf[i], want_buf[i], 1e-6, 1e-7);
    return 0;
error:
    return 1;
}

static int test_sgd_hand(void) {
    TESTING("SGD by hand: plain, decay, momentum, dampening, Nesterov");
    /* plain: p - 0.1 g each step */
    acx_sgd_hparams_t hp = {.lr = 0.1};
    CHECK(sgd_two_steps(&hp, (float[]){0.95f, -2.025f, 0.6f}, (float[]){0.9f, -2.05f, 0.7f},
                        NULL) == 0);
    /* weight decay 0.1: d1 = g + 0.1 p = [0.6, 0.05, -0.95] -> [0.94, -2.005, 0.595];
     * d2 = [0.594, 0.0495, -0.9405] -> [0.8806, -2.00995, 0.68905] */
    hp = (acx_sgd_hparams_t){.lr = 0.1, .weight_decay = 0.1};
    CHECK(sgd_two_steps(&hp, (float[]){0.94f, -2.005f, 0.595f},
                        (float[]){0.8806f, -2.00995f, 0.68905f}, NULL) == 0);
    /* momentum 0.9: buf1 = g (no dampening on the first step) -> p1 = p - 0.1 g;
     * buf2 = 0.9 g + g = 1.9 g -> p2 = p1 - 0.19 g */
    hp = (acx_sgd_hparams_t){.lr = 0.1, .momentum = 0.9};
    CHECK(sgd_two_steps(&hp, (float[]){0.95f, -2.025f, 0.6f}, (float[]){0.855f, -2.0725f, 0.79f},
                        (float[]){0.95f, 0.475f, -1.9f}) == 0);
    /* dampening 0.5: buf1 = g still; buf2 = 0.9 g + 0.5 g = 1.4 g -> p2 = p1 - 0.14 g */
    hp = (acx_sgd_hparams_t){.lr = 0.1, .momentum = 0.9, .dampening = 0.5};
    CHECK(sgd_two_steps(&hp, (float[]){0.95f, -2.025f, 0.6f}, (float[]){0.88f, -2.06f, 0.74f},
                        (float[]){0.7f, 0.35f, -1.4f}) == 0);
    /* Nesterov 0.9: buf1 = g, d1 = g + 0.9 g = 1.9 g -> p1 = p - 0.19 g;
     * buf2 = 1.9 g, d2 = g + 0.9*1.9 g = 2.71 g -> p2 = p1 - 0.271 g */
    hp = (acx_sgd_hparams_t){.lr = 0.1, .momentum = 0.9, .nesterov = 1};
    CHECK(sgd_two_steps(&hp, (float[]){0.905f, -2.0475f, 0.69f},
                        (float[]){0.7695f, -2.11525f, 0.961f},
                        (float[]){0.95f, 0.475f, -1.9f}) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int run_sgd_vs_ref(const acx_sgd_hparams_t *hp) {
    float p[NR], buf[NR];
    ref_state_t r;
    memset(&r, 0, sizeof r);
    memcpy(p, p_init, sizeof p);
    for (int i = 0; i < NR; i++)
        r.p[i] = p_init[i];
    for (int t = 1; t <= TR; t++) {
        acx_kernel_sgd(p, grads[t - 1], buf, NR, hp, hp->lr, t == 1);
        ref_sgd(&r, grads[t - 1], NR, hp, t);
        for (int i = 0; i < NR; i++) {
            CHECK_CLOSE(p[i], r.p[i], 1e-5, 1e-6);
            if (hp->momentum != 0.0) CHECK_CLOSE(buf[i], r.buf[i], 1e-5, 1e-6);
        }
    }
    return 0;
error:
    return 1;
}

static int test_sgd_reference(void) {
    TESTING("SGD against a double reference, 5 steps, 37 elements");
    acx_sgd_hparams_t cases[] = {
        {.lr = 0.05},
        {.lr = 0.05, .weight_decay = 0.02},
        {.lr = 0.05, .momentum = 0.9},
        {.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.01},
        {.lr = 0.05, .momentum = 0.9, .nesterov = 1, .weight_decay = 0.01},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        CHECK(run_sgd_vs_ref(&cases[k]) == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- Adam / AdamW ---- */

static int test_adam_hand(void) {
    TESTING("Adam/AdamW by hand: constant gradient moves lr*sign(g)");
    /* Constant g: m_t = (1-beta1^t) g and v_t = (1-beta2^t) g^2, so after
     * bias correction every step is lr * g/(|g| + eps) = lr*sign(g) (eps
     * shifts it by lr*eps/|g| < 1e-9 here). 5 steps, lr 0.01:
     * [1, -2, 0.5] - 0.05*sign([0.5, 0.25, -1]) = [0.95, -2.05, 0.55]. */
    acx_adam_hparams_t hp = ACX_ADAM_DEFAULT;
    hp.lr = 0.01;
    float p[N3] = {1.0f, -2.0f, 0.5f}, m[N3] = {0}, v[N3] = {0};
    acx_kernel_adam(p, sgd_g, m, v, N3, &hp, hp.lr, 1, 0);
    CHECK_CLOSE(p[0], 0.99, 0, 1e-6);
    CHECK_CLOSE(p[1], -2.01, 0, 1e-6);
    CHECK_CLOSE(p[2], 0.51, 0, 1e-6);
    CHECK_CLOSE(m[1], 0.025, 1e-6, 0); /* (1-0.9) * 0.25 */
    CHECK_CLOSE(v[2], 0.001, 1e-6, 0); /* (1-0.999) * 1 */
    for (int t = 2; t <= 5; t++)
        acx_kernel_adam(p, sgd_g, m, v, N3, &hp, hp.lr, t, 0);
    CHECK_CLOSE(p[0], 0.95, 0, 2e-6);
    CHECK_CLOSE(p[1], -2.05, 0, 2e-6);
    CHECK_CLOSE(p[2], 0.55, 0, 2e-6);

    /* Adam's L2 decay changes the gradient, so it can flip the direction:
     * g = [0.5, 0.1, -1] + 0.1*[1, -2, 0.5] = [0.6, -0.1, -0.95]: step 1
     * moves by -0.01*sign -> [0.99, -1.99, 0.51] (the middle one goes up). */
    hp.weight_decay = 0.1;
    float p2[N3] = {1.0f, -2.0f, 0.5f}, m2[N3] = {0}, v2[N3] = {0};
    acx_kernel_adam(p2, (const float[]){0.5f, 0.1f, -1.0f}, m2, v2, N3, &hp, hp.lr, 1, 0);
    CHECK_CLOSE(p2[0], 0.99, 0, 1e-6);
    CHECK_CLOSE(p2[1], -1.99, 0, 1e-6);
    CHECK_CLOSE(p2[2], 0.51, 0, 1e-6);

    /* AdamW decouples it: p *= 1 - 0.01*0.1 = 0.999 first, then the Adam step
     * on the raw gradient: [0.999, -1.998, 0.4995] - 0.01*sign([0.5, 0.1, -1])
     * = [0.989, -2.008, 0.5095]. */
    float p3[N3] = {1.0f, -2.0f, 0.5f}, m3[N3] = {0}, v3[N3] = {0};
    acx_kernel_adam(p3, (const float[]){0.5f, 0.1f, -1.0f}, m3, v3, N3, &hp, hp.lr, 1, 1);
    CHECK_CLOSE(p3[0], 0.989, 0, 1e-6);
    CHECK_CLOSE(p3[1], -2.008, 0, 1e-6);
    CHECK_CLOSE(p3[2], 0.5095, 0, 1e-6);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int run_adam_vs_ref(const acx_adam_hparams_t *hp, int decoupled) {
    float p[NR], m[NR] = {0}, v[NR] = {0};
    ref_state_t r;
    memset(&r, 0, sizeof r);
    memcpy(p, p_init, sizeof p);
    for (int i = 0; i < NR; i++)
        r.p[i] = p_init[i];
    for (int t = 1; t <= TR; t++) {
        acx_kernel_adam(p, grads[t - 1], m, v, NR, hp, hp->lr, t, decoupled);
        ref_adam(&r, grads[t - 1], NR, hp, t, decoupled);
        for (int i = 0; i < NR; i++) {
            CHECK_CLOSE(p[i], r.p[i], 1e-6, 1e-6);
            CHECK_CLOSE(m[i], r.m[i], 1e-5, 1e-9);
            CHECK_CLOSE(v[i], r.v[i], 1e-5, 1e-12);
        }
    }
    return 0;
error:
    return 1;
}

static int test_adam_reference(void) {
    TESTING("Adam/AdamW vs a double reference, bias correction, 5 steps");
    acx_adam_hparams_t cases[] = {
        {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
        {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1},
        {.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05},
        /* beta1 < 0.5: torch's lerp takes its other formula */
        {.lr = 1e-2, .beta1 = 0.3, .beta2 = 0.9, .eps = 1e-8, .weight_decay = 0.02},
        {.lr = 1e-2, .beta1 = 0.0, .beta2 = 0.0, .eps = 1e-3},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        CHECK(run_adam_vs_ref(&cases[k], 0) == 0);
        CHECK(run_adam_vs_ref(&cases[k], 1) == 0);
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- torch literals ---- */

/* /usr/bin/python3 (python3-torch 1.13.1), p = [1, -2, 0.5], three steps with
 * grads [0.5, 0.1, -1], [-0.3, 0.2, 0], [0.05, -0.4, 2]:
 *   p = torch.tensor(p0, requires_grad=True); o = torch.optim.X([p], **kw)
 *   for g in G: p.grad = g.clone(); o.step()
 * printed with %.9g. (torch 1.13's Adam updates exp_avg with mul_/add_, newer
 * torch and acx with lerp_: a few ulp apart, within the tolerance.) */
static const float lit_g[3][N3] = {{0.5f, 0.1f, -1.0f}, {-0.3f, 0.2f, 0.0f}, {0.05f, -0.4f, 2.0f}};

static int test_torch_literals(void) {
    TESTING("SGD/Adam/AdamW against numbers printed by torch 1.13");
    float p[N3], m[N3], v[N3], buf[N3];

    /* AdamW(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1) */
    acx_adam_hparams_t aw = {
        .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    memcpy(p, sgd_p0, sizeof p);
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    for (int t = 1; t <= 3; t++)
        acx_kernel_adam(p, lit_g[t - 1], m, v, N3, &aw, aw.lr, t, 1);
    const float aw_p[N3] = {0.983088851f, -2.01169062f, 0.511775076f};
    const float aw_m[N3] = {0.0184999965f, -0.0139000006f, 0.11900001f};
    const float aw_v[N3] = {0.000341910258f, 0.000209940015f, 0.00499800127f};
    for (int i = 0; i < N3; i++) {
        CHECK_CLOSE(p[i], aw_p[i], 1e-6, 0);
        CHECK_CLOSE(m[i], aw_m[i], 1e-6, 0);
        CHECK_CLOSE(v[i], aw_v[i], 1e-6, 0);
    }

    /* Adam(lr=0.01, betas=(0.3, 0.99), eps=1e-6, weight_decay=0.05) */
    acx_adam_hparams_t a = {
        .lr = 0.01, .beta1 = 0.3, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.05};
    memcpy(p, sgd_p0, sizeof p);
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    for (int t = 1; t <= 3; t++)
        acx_kernel_adam(p, lit_g[t - 1], m, v, N3, &a, a.lr, t, 0);
    const float a_p[N3] = {0.99003166f, -1.99941945f, 0.502236068f};
    const float a_m[N3] = {0.05174895f, -0.329379797f, 1.36188447f};
    const float a_v[N3] = {0.00368518615f, 0.00260442868f, 0.050356064f};
    for (int i = 0; i < N3; i++) {
        CHECK_CLOSE(p[i], a_p[i], 1e-6, 0);
        CHECK_CLOSE(m[i], a_m[i], 1e-6, 0);
        CHECK_CLOSE(v[i], a_v[i], 1e-6, 0);
    }

    /* SGD(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01) and
     * SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01) */
    acx_sgd_hparams_t s = {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01};
    memcpy(p, sgd_p0, sizeof p);
    for (int t = 1; t <= 3; t++)
        acx_kernel_sgd(p, lit_g[t - 1], buf, N3, &s, s.lr, t == 1);
    const float s_p[N3] = {0.90613085f, -2.01461816f, 0.588000238f};
    const float s_b[N3] = {0.231150091f, -0.167747334f, 1.0051024f};
    for (int i = 0; i < N3; i++) {
        CHECK_CLOSE(p[i], s_p[i], 1e-6, 1e-7);
        CHECK_CLOSE(buf[i], s_b[i], 1e-6, 1e-7);
    }
    s = (acx_sgd_hparams_t){.lr = 0.1, .momentum = 0.9, .nesterov = 1, .weight_decay = 0.01};
    memcpy(p, sgd_p0, sizeof p);
    for (int t = 1; t <= 3; t++)
        acx_kernel_sgd(p, lit_g[t - 1], buf, N3, &s, s.lr, t == 1);
    const float n_p[N3] = {0.892221212f, -1.99634457f, 0.458853364f};
    const float n_b[N3] = {0.210398614f, -0.19389534f, 1.20793474f};
    for (int i = 0; i < N3; i++) {
        CHECK_CLOSE(p[i], n_p[i], 1e-6, 1e-7);
        CHECK_CLOSE(buf[i], n_b[i], 1e-6, 1e-7);
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- edge cases ---- */

static int test_zero_grad_and_tail(void) {
    TESTING("zero gradients; tail elements round like block elements");
    float zero[NR] = {0}, p[NR], m[NR] = {0}, v[NR] = {0}, buf[NR];
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT; /* lr 1e-3, wd 1e-2 */

    /* Adam: m = v = 0, update 0/(0 + eps) = 0: p unchanged, bit for bit. */
    acx_adam_hparams_t plain = hp;
    plain.weight_decay = 0.0;
    memcpy(p, p_init, sizeof p);
    for (int t = 1; t <= 5; t++)
        acx_kernel_adam(p, zero, m, v, NR, &plain, plain.lr, t, 0);
    for (int i = 0; i < NR; i++)
        CHECK(p[i] == p_init[i] && m[i] == 0.0f && v[i] == 0.0f);
    /* AdamW: only the decay acts: p * (1 - 1e-5)^5. */
    memcpy(p, p_init, sizeof p);
    for (int t = 1; t <= 5; t++)
        acx_kernel_adam(p, zero, m, v, NR, &hp, hp.lr, t, 1);
    for (int i = 0; i < NR; i++)
        CHECK_CLOSE(p[i], p_init[i] * pow(1.0 - 1e-5, 5), 1e-6, 0);
    /* eps = 0 (allowed, as in torch): 0/0 is NaN, as in torch. */
    {
        acx_adam_hparams_t no_eps = hp;
        no_eps.eps = 0.0;
        no_eps.weight_decay = 0.0;
        float q[1] = {1.0f}, mq[1] = {0}, vq[1] = {0};
        acx_kernel_adam(q, zero, mq, vq, 1, &no_eps, no_eps.lr, 1, 0);
        CHECK(isnan(q[0]));
    }
    /* SGD with momentum: buffer and p stay put. */
    acx_sgd_hparams_t s = {.lr = 0.1, .momentum = 0.9};
    memcpy(p, p_init, sizeof p);
    for (int t = 1; t <= 3; t++)
        acx_kernel_sgd(p, zero, buf, NR, &s, s.lr, t == 1);
    for (int i = 0; i < NR; i++)
        CHECK(p[i] == p_init[i] && buf[i] == 0.0f);

    /* The same element everywhere: the 16-wide blocks and the scalar tail
     * (elements 32..36) must give bitwise equal results. */
    for (int i = 0; i < NR; i++) {
        p[i] = 0.7f;
        m[i] = 0.01f;
        v[i] = 3e-4f;
        buf[i] = 0.2f;
    }
    float g[NR];
    for (int i = 0; i < NR; i++)
        g[i] = -0.123f;
    acx_kernel_adam(p, g, m, v, NR, &hp, hp.lr, 7, 1);
    for (int i = 1; i < NR; i++)
        CHECK(p[i] == p[0] && m[i] == m[0] && v[i] == v[0]);
    s = (acx_sgd_hparams_t){.lr = 0.1, .momentum = 0.9, .nesterov = 1, .weight_decay = 0.01};
    acx_kernel_sgd(p, g, buf, NR, &s, s.lr, 0);
    for (int i = 1; i < NR; i++)
        CHECK(p[i] == p[0] && buf[i] == buf[0]);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- the gradient check ---- */

/* The reference: isfinite() per element, as the check was first written. */
static int ref_any_nonfinite(const float *x, size_t n, float factor) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || !isfinite(x[i] * factor)) return 1;
    return 0;
}

/* One bad value at positions around the kernel's 4096-element blocks and
 * the tail, each kind of non-finite value, and values that are finite but
 * extreme (largest float, smallest subnormal, -0): the answer must be
 * isfinite()'s everywhere, with factor 1 and with an overflowing factor. */
static int test_any_nonfinite(void) {
    enum { N = 3 * 4096 + 17 };
    static float x[N];
    const size_t pos[] = {0, 1, 4095, 4096, 4097, 8191, 8192, N - 17, N - 1};
    const float bad[] = {INFINITY, -INFINITY, NAN, -NAN};
    for (size_t i = 0; i < N; i++)
        x[i] = (float)((int)(i % 7) - 3) * 0.125f;
    x[5] = FLT_MAX;
    x[6] = -FLT_MAX;
    x[7] = 1.4e-45f; /* the smallest subnormal */
    x[8] = -0.0f;
    CHECK(acx_kernel_any_nonfinite(x, N, 1.0f) == 0);
    CHECK(ref_any_nonfinite(x, N, 1.0f) == 0);
    /* FLT_MAX * 2 overflows: non-finite after unscaling by factor 2 */
    CHECK(acx_kernel_any_nonfinite(x, N, 2.0f) == 1);
    CHECK(acx_kernel_any_nonfinite(x, N, 0.5f) == 0);
    CHECK(acx_kernel_any_nonfinite(x, 0, 1.0f) == 0);
    x[5] = 1.0f;
    x[6] = -1.0f;
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
        for (size_t k = 0; k < sizeof pos / sizeof pos[0]; k++) {
            float keep = x[pos[k]];
            x[pos[k]] = bad[b];
            for (int f = 0; f < 2; f++) {
                float factor = f ? 0.25f : 1.0f;
                int want = ref_any_nonfinite(x, N, factor);
                CHECK(want == 1);
                CHECK(acx_kernel_any_nonfinite(x, N, factor) == want);
                /* a prefix that ends before the bad value has none */
                CHECK(acx_kernel_any_nonfinite(x, pos[k], factor) == 0);
            }
            x[pos[k]] = keep;
        }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- floating-point environment ---- */

static int test_mxcsr(void) {
    TESTING("subnormals flushed in the kernel, caller's MXCSR restored");
#if defined(__SSE2__)
    const unsigned flags = 0x3Fu, daz = 0x40u, ftz = 0x8000u;
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
    float zero[2] = {0}, p[2], m[2], v[2];
    /* Element 0: m subnormal on input (DAZ reads it as 0, so it becomes 0;
     * IEEE keeps 0.9 m, still subnormal). Element 1: v = FLT_MIN (normal)
     * times beta2 underflows (FTZ writes 0; IEEE writes 0.999 FLT_MIN). */
    const float m_sub = FLT_MIN / 4;
    p[0] = p[1] = 1.0f;
    m[0] = m_sub, m[1] = 0.0f;
    v[0] = 1.0f, v[1] = FLT_MIN;
    unsigned before = _mm_getcsr();
    CHECK((before & (ftz | daz)) == 0); /* the process default */
    acx_kernel_adam(p, zero, m, v, 2, &hp, hp.lr, 3, 1);
    unsigned after = _mm_getcsr();
    CHECK((after & ~flags) == (before & ~flags));
    CHECK(m[0] == 0.0f);
    CHECK(v[1] == 0.0f);

    p[0] = p[1] = 1.0f;
    m[0] = m_sub, m[1] = 0.0f;
    v[0] = 1.0f, v[1] = FLT_MIN;
    acx_kernel_adam_ieee(p, zero, m, v, 2, &hp, hp.lr, 3, 1);
    CHECK(m[0] > 0.0f && m[0] < FLT_MIN);
    CHECK(v[1] > 0.0f && v[1] < FLT_MIN);

    /* A caller that runs with FTZ itself (and round-toward-zero) gets exactly
     * its own control bits back, not the process default. */
    unsigned mine = (before & ~flags) | ftz | 0x6000u;
    _mm_setcsr(mine);
    acx_sgd_hparams_t s = {.lr = 0.1};
    acx_kernel_sgd(p, zero, NULL, 2, &s, s.lr, 1);
    after = _mm_getcsr();
    _mm_setcsr(before);
    CHECK((after & ~flags) == mine);

    /* Exception flags raised inside stay raised for the caller (inexact). */
    _mm_setcsr(before & ~flags);
    float q[1] = {1.0f}, gq[1] = {0.3f}, mq[1] = {0}, vq[1] = {0};
    acx_kernel_adam(q, gq, mq, vq, 1, &hp, hp.lr, 1, 1);
    after = _mm_getcsr();
    _mm_setcsr(before);
    CHECK((after & 0x20u) != 0);
    PASSED();
    return 0;
error:
    _mm_setcsr(before);
    FAILED();
    return 1;
#else
    SKIPPED("no MXCSR on this target");
    return 0;
#endif
}

/* ---- argument checks of the optimizer objects ---- */

static int test_create_checks(void) {
    TESTING("optimizer creation: invalid hyperparameters, prepared model");
    acx_model_t *model = NULL;
    acx_optimizer_t *opt = NULL;
    acx_shard_context_t ctx = {0}; /* no accelerator: this test frees what it makes */
    CHECK_OK(acx_model_new(&ctx, &model));

    acx_sgd_hparams_t s = ACX_SGD_DEFAULT;
    s.lr = -0.5;
    CHECK_STATUS(acx_sgd_create(model, &s, &opt), ACX_ERR_INVALID_ARG, "lr -0.5");
    s = (acx_sgd_hparams_t){.lr = 0.1, .momentum = -0.1};
    CHECK_STATUS(acx_sgd_create(model, &s, &opt), ACX_ERR_INVALID_ARG, "momentum -0.1");
    s = (acx_sgd_hparams_t){.lr = 0.1, .weight_decay = NAN};
    CHECK_STATUS(acx_sgd_create(model, &s, &opt), ACX_ERR_INVALID_ARG, "weight_decay");
    s = (acx_sgd_hparams_t){.lr = 0.1, .nesterov = 1};
    CHECK_STATUS(acx_sgd_create(model, &s, &opt), ACX_ERR_INVALID_ARG,
                 "nesterov requires momentum");
    s = (acx_sgd_hparams_t){.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = 1};
    CHECK_STATUS(acx_sgd_create(model, &s, &opt), ACX_ERR_INVALID_ARG, "dampening 0.1");
    CHECK_STATUS(acx_sgd_create(model, NULL, &opt), ACX_ERR_INVALID_ARG, "NULL");
    CHECK(opt == NULL); /* output written only on success */

    acx_adam_hparams_t a = ACX_ADAM_DEFAULT;
    a.beta1 = 1.0;
    CHECK_STATUS(acx_adam_create(model, &a, &opt), ACX_ERR_INVALID_ARG, "beta1 1");
    a = ACX_ADAM_DEFAULT;
    a.beta2 = -0.5;
    CHECK_STATUS(acx_adamw_create(model, &a, &opt), ACX_ERR_INVALID_ARG, "beta2 -0.5");
    a = ACX_ADAMW_DEFAULT;
    a.eps = -1e-8;
    CHECK_STATUS(acx_adamw_create(model, &a, &opt), ACX_ERR_INVALID_ARG,
                 "acx_adamw_create: invalid eps");
    a = ACX_ADAMW_DEFAULT;
    a.weight_decay = -0.01;
    CHECK_STATUS(acx_adamw_create(model, &a, &opt), ACX_ERR_INVALID_ARG, "weight_decay -0.01");
    a = ACX_ADAMW_DEFAULT;
    a.lr = INFINITY;
    CHECK_STATUS(acx_adamw_create(model, &a, &opt), ACX_ERR_INVALID_ARG, "lr inf");
    /* acx's upper bound (runtime/optim_state.h; torch has none): 1e300 is
     * refused naming the range, 1e3 itself is accepted below */
    a.lr = 1e300;
    CHECK_STATUS(acx_adamw_create(model, &a, &opt), ACX_ERR_INVALID_ARG,
                 "invalid lr 1e+300: expected a finite value in [0, 1000]");
    s = (acx_sgd_hparams_t){.lr = 1000.5};
    CHECK_STATUS(acx_sgd_create(model, &s, &opt), ACX_ERR_INVALID_ARG, "lr 1000.5");
    CHECK(opt == NULL);

    /* valid: eps = 0 and beta = 0 are allowed, as in torch */
    a = ACX_ADAMW_DEFAULT;
    a.eps = 0.0;
    a.beta1 = 0.0;
    CHECK_OK(acx_adamw_create(model, &a, &opt));
    CHECK(acx_optimizer_lr(opt) == 1e-3);
    CHECK_OK(acx_optimizer_set_lr(opt, 1e3));
    CHECK_STATUS(acx_optimizer_set_lr(opt, 1e4), ACX_ERR_INVALID_ARG, "lr 10000");
    CHECK(acx_optimizer_lr(opt) == 1e3);
    CHECK_OK(acx_optimizer_set_lr(opt, 1e-3));
    CHECK(acx_optimizer_num_steps(opt) == 0);
    CHECK_STATUS(acx_optimizer_step(opt), ACX_ERR_STATE, "before acx_prepare");
    CHECK(acx_optimizer_num_steps(opt) == 0);
    CHECK_OK(acx_optimizer_set_lr(opt, 0.25));
    CHECK(acx_optimizer_lr(opt) == 0.25);
    CHECK_STATUS(acx_optimizer_set_lr(opt, -1.0), ACX_ERR_INVALID_ARG, "lr -1");
    CHECK(acx_optimizer_lr(opt) == 0.25);
    acx_optimizer_free(opt);
    opt = NULL;

    /* too late once the model is prepared */
    model->prepared = 1;
    s = (acx_sgd_hparams_t){.lr = 0.1};
    CHECK_STATUS(acx_sgd_create(model, &s, &opt), ACX_ERR_STATE, "already prepared");
    model->prepared = 0;
    acx_model_free(model);
    PASSED();
    return 0;
error:
    acx_optimizer_free(opt);
    if (model != NULL) model->prepared = 0;
    acx_model_free(model);
    FAILED();
    return 1;
}

/* ---- parameter groups: the argument checks ---- */

static int test_group_checks(void) {
    TESTING("parameter groups: invalid groups are refused, naming group and parameter");
    acx_model_t *model = NULL, *other = NULL;
    acx_optimizer_t *opt = NULL;
    acx_shard_context_t ctx = {0}; /* no accelerator: this test frees what it makes */
    acx_unit_t *u = NULL, *ou = NULL;
    acx_param_t *w = NULL, *b = NULL, *g = NULL, *foreign = NULL;
    int64_t shape[2] = {4, 3}, bshape[1] = {4};
    CHECK_OK(acx_model_new(&ctx, &model));
    CHECK_OK(acx_model_new(&ctx, &other));
    CHECK_OK(acx_model_add_unit(model, "layer", &u));
    CHECK_OK(acx_unit_add_param(u, "layer.weight", 2, shape, ACX_INIT_SPEC_ZEROS, &w));
    CHECK_OK(acx_unit_add_param(u, "layer.bias", 1, bshape, ACX_INIT_SPEC_ZEROS, &b));
    CHECK_OK(acx_unit_add_param(u, "layer.gain", 1, bshape, ACX_INIT_SPEC_ZEROS, &g));
    CHECK_OK(acx_model_add_unit(other, "layer", &ou));
    CHECK_OK(acx_unit_add_param(ou, "layer.weight", 2, shape, ACX_INIT_SPEC_ZEROS, &foreign));
    acx_adam_hparams_t a = ACX_ADAMW_DEFAULT;
    CHECK_OK(acx_adamw_create(model, &a, &opt));

    acx_param_t *nd[2] = {b, g};
    CHECK_OK(acx_optimizer_add_param_group(opt, "no_decay", 0.0, 1.0, 2, nd));
    /* a parameter in two groups: the message names both groups and it */
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "again", 0.1, 1.0, 1, &b), ACX_ERR_INVALID_ARG,
                 "group 'again': parameter 'layer.bias' is already in group "
                 "'no_decay'");
    acx_param_t *twice[2] = {w, w};
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "twice", 0.1, 1.0, 2, twice),
                 ACX_ERR_INVALID_ARG, "parameter 'layer.weight' is listed twice");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "no_decay", 0.1, 1.0, 1, &w),
                 ACX_ERR_INVALID_ARG, "parameter group 'no_decay' already exists");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "other", 0.1, 1.0, 1, &foreign),
                 ACX_ERR_INVALID_ARG,
                 "group 'other': params[0] ('layer.weight') is not a parameter of the "
                 "optimizer's model");
    acx_param_t *withnull[2] = {w, NULL};
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "nul", 0.1, 1.0, 2, withnull),
                 ACX_ERR_INVALID_ARG, "group 'nul': params[1] is NULL");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "neg", -0.1, 1.0, 1, &w), ACX_ERR_INVALID_ARG,
                 "group 'neg': invalid weight_decay -0.1");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "nan", NAN, 1.0, 1, &w), ACX_ERR_INVALID_ARG,
                 "group 'nan': invalid weight_decay nan");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "inf", INFINITY, 1.0, 1, &w),
                 ACX_ERR_INVALID_ARG, "group 'inf': invalid weight_decay inf");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "zero", 0.1, 0.0, 1, &w), ACX_ERR_INVALID_ARG,
                 "group 'zero': invalid lr_scale 0: expected a finite value in (0, 1000]");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "big", 0.1, 1000.5, 1, &w), ACX_ERR_INVALID_ARG,
                 "group 'big': invalid lr_scale 1000.5");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "nan", 0.1, NAN, 1, &w), ACX_ERR_INVALID_ARG,
                 "invalid lr_scale nan");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "empty", 0.1, 1.0, 0, &w), ACX_ERR_INVALID_ARG,
                 "group 'empty': num_params 0");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "", 0.1, 1.0, 1, &w), ACX_ERR_INVALID_ARG,
                 "is empty");
    CHECK_STATUS(acx_optimizer_add_param_group(opt, NULL, 0.1, 1.0, 1, &w), ACX_ERR_INVALID_ARG,
                 "must not be NULL");
    CHECK_STATUS(acx_optimizer_add_param_group(NULL, "x", 0.1, 1.0, 1, &w), ACX_ERR_INVALID_ARG,
                 "must not be NULL");
    /* the refused calls added nothing: w is still free for a group, and
     * the bounds themselves are accepted */
    CHECK_OK(acx_optimizer_add_param_group(opt, "decay", 0.0, 1e3, 1, &w));
    CHECK(acx_optimizer_lr(opt) == a.lr); /* the base lr, not scaled */

    model->prepared = 1;
    CHECK_STATUS(acx_optimizer_add_param_group(opt, "late", 0.1, 1.0, 1, &g), ACX_ERR_STATE,
                 "group 'late': the model is already prepared");
    model->prepared = 0;
    acx_optimizer_free(opt);
    acx_model_free(model);
    acx_model_free(other);
    PASSED();
    return 0;
error:
    acx_optimizer_free(opt);
    if (model != NULL) model->prepared = 0;
    acx_model_free(model);
    acx_model_free(other);
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    make_fixture();
    int failed = 0;
    failed += test_sgd_hand();
    failed += test_sgd_reference();
    failed += test_adam_hand();
    failed += test_adam_reference();
    failed += test_torch_literals();
    failed += test_zero_grad_and_tail();
    failed += test_any_nonfinite();
    failed += test_mxcsr();
    failed += test_create_checks();
    failed += test_group_checks();
    return failed ? 1 : 0;
}

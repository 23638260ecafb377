/*
 * tests/unit/test_param_init.c — parameter initializers against
 * torch.nn.init's formulas worked by hand, the element addressing contract
 * (value of element e = f(seed, hash(name), e)), the sample statistics of
 * filled tensors, rank independence of partial fills, and the validation
 * messages.
 *
 * Hand-derived references (torch.nn.init, _calculate_fan_in_and_fan_out):
 *   nn.Linear(784, 256).weight: kaiming_uniform(a=sqrt 5), gain sqrt(2/6), fan_in 784:
 *     bound = sqrt(1/3) * sqrt(3/784) = 1/28
 *   kaiming_normal relu, fan_in 784: std = sqrt 2 / 28
 *   kaiming_uniform relu, fan_out 256: bound = sqrt 2 * sqrt(3/256) = sqrt 6 / 16
 *   xavier_uniform [256, 784]: bound = sqrt(6/1040); xavier_normal std = sqrt(2/1040)
 *   conv weight [64, 3, 5, 5]: fan_in = 3*25 = 75, fan_out = 64*25 = 1600
 */
#include <stdlib.h>
#include <string.h>

#include "acx_test.h"
#include "base/param_init.h"
#include "base/rng.h"

static acx_init_spec_t kaiming(acx_init_kind_t kind, acx_nonlinearity_t nl, double a,
                               acx_fan_mode_t mode) {
    return (acx_init_spec_t){.kind = kind, .a = a, .nonlinearity = nl, .mode = mode};
}

/* ---- scales ---- */

static int test_scale(void) {
    TESTING("acx_param_init_scale matches torch.nn.init by hand");
    const int64_t lin[2] = {256, 784};
    const int64_t conv[4] = {64, 3, 5, 5};
    const int64_t bias[1] = {256};
    acx_init_spec_t s;

    s = ACX_INIT_SPEC_LINEAR_WEIGHT;
    CHECK_CLOSE(acx_param_init_scale(&s, 2, lin), 1.0 / 28.0, 1e-12, 0);
    s = kaiming(ACX_INIT_KAIMING_NORMAL, ACX_NONLIN_RELU, 0, ACX_FAN_IN);
    CHECK_CLOSE(acx_param_init_scale(&s, 2, lin), sqrt(2.0) / 28.0, 1e-12, 0);
    s = kaiming(ACX_INIT_KAIMING_UNIFORM, ACX_NONLIN_RELU, 0, ACX_FAN_OUT);
    CHECK_CLOSE(acx_param_init_scale(&s, 2, lin), sqrt(6.0) / 16.0, 1e-12, 0);
    s = kaiming(ACX_INIT_KAIMING_NORMAL, ACX_NONLIN_TANH, 0, ACX_FAN_IN);
    CHECK_CLOSE(acx_param_init_scale(&s, 2, (int64_t[]){10, 100}), (5.0 / 3.0) / 10.0, 1e-12, 0);
    s = kaiming(ACX_INIT_KAIMING_NORMAL, ACX_NONLIN_LINEAR, 0, ACX_FAN_IN);
    CHECK_CLOSE(acx_param_init_scale(&s, 2, (int64_t[]){10, 100}), 0.1, 1e-12, 0);
    /* leaky_relu with slope 0.2: gain sqrt(2 / 1.04) */
    s = kaiming(ACX_INIT_KAIMING_NORMAL, ACX_NONLIN_LEAKY_RELU, 0.2, ACX_FAN_IN);
    CHECK_CLOSE(acx_param_init_scale(&s, 2, (int64_t[]){10, 100}), sqrt(2.0 / 1.04) / 10.0, 1e-12,
                0);

    s = (acx_init_spec_t){.kind = ACX_INIT_XAVIER_UNIFORM};
    CHECK_CLOSE(acx_param_init_scale(&s, 2, lin), sqrt(6.0 / 1040.0), 1e-12, 0);
    s.a = 2.0; /* gain */
    CHECK_CLOSE(acx_param_init_scale(&s, 2, lin), 2.0 * sqrt(6.0 / 1040.0), 1e-12, 0);
    s = (acx_init_spec_t){.kind = ACX_INIT_XAVIER_NORMAL};
    CHECK_CLOSE(acx_param_init_scale(&s, 2, lin), sqrt(2.0 / 1040.0), 1e-12, 0);

    /* 4-D: receptive field 25 */
    s = ACX_INIT_SPEC_LINEAR_WEIGHT; /* Conv2d's default is the same formula */
    CHECK_CLOSE(acx_param_init_scale(&s, 4, conv), 1.0 / sqrt(75.0), 1e-12, 0);
    s = kaiming(ACX_INIT_KAIMING_NORMAL, ACX_NONLIN_RELU, 0, ACX_FAN_OUT);
    CHECK_CLOSE(acx_param_init_scale(&s, 4, conv), sqrt(2.0 / 1600.0), 1e-12, 0);
    s = (acx_init_spec_t){.kind = ACX_INIT_XAVIER_UNIFORM};
    CHECK_CLOSE(acx_param_init_scale(&s, 4, conv), sqrt(6.0 / 1675.0), 1e-12, 0);
    /* 3-D [8, 4, 7]: fan_in 28, fan_out 56 */
    CHECK_CLOSE(acx_param_init_scale(&s, 3, (int64_t[]){8, 4, 7}), sqrt(6.0 / 84.0), 1e-12, 0);

    /* A bias with its weight's fan. */
    s = ACX_INIT_SPEC_LINEAR_WEIGHT;
    s.fan_override = 784;
    CHECK_CLOSE(acx_param_init_scale(&s, 1, bias), 1.0 / 28.0, 1e-12, 0);
    s = ACX_INIT_SPEC_LINEAR_BIAS(784);
    CHECK_CLOSE(acx_param_init_scale(&s, 1, bias), 1.0 / 28.0, 1e-12, 0);

    s = ACX_INIT_SPEC_NORMAL(1.0, 0.02);
    CHECK(acx_param_init_scale(&s, 1, bias) == 0.02);
    s = ACX_INIT_SPEC_UNIFORM(-0.25, 0.75);
    CHECK(acx_param_init_scale(&s, 1, bias) == 0.5);
    s = ACX_INIT_SPEC_ZEROS;
    CHECK(acx_param_init_scale(&s, 1, bias) == 0.0);
    s = ACX_INIT_SPEC_CONSTANT(3.0);
    CHECK(acx_param_init_scale(&s, 1, bias) == 0.0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- filled values ---- */

static void moments(const float *x, int64_t n, double *mean, double *std) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i], s2 += (double)x[i] * x[i];
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
}

static int test_fill_values(void) {
    TESTING("fill: bounds, element addressing, mean/std (5 sigma)");
    const int64_t lin[2] = {256, 784};
    const int64_t n = 256 * 784;
    float *w = malloc((size_t)n * sizeof *w);
    CHECK(w != NULL);

    acx_init_spec_t s = ACX_INIT_SPEC_LINEAR_WEIGHT;
    acx_param_init_fill(&s, 2, lin, 42, "fc1.weight", 0, 256, w);
    const double b = 1.0 / 28.0;
    for (int64_t i = 0; i < n; i++)
        CHECK(w[i] >= -(float)b && w[i] <= (float)b);
    /* Element e = -b + 2b * uniform(seed, PARAM_INIT, hash(name), e). */
    uint64_t key = acx_hash64("fc1.weight");
    for (int64_t e = 0; e < n; e += 9973)
        CHECK(w[e] ==
              (float)(-b + 2 * b * acx_rng_uniform(42, ACX_RNG_PARAM_INIT, key, (uint64_t)e)));
    double mean, std;
    moments(w, n, &mean, &std);
    /* U(-b, b): sd b/sqrt(3); se(mean) = sd/sqrt(n); se(std)/std = sqrt(0.8/n)/2 */
    double sd = b / sqrt(3.0);
    CHECK_CLOSE(mean, 0.0, 0, 5 * sd / sqrt((double)n));
    CHECK_CLOSE(std, sd, 5 * 0.5 * sqrt(0.8 / (double)n), 0);

    /* Another name, another seed: other values. */
    float other[16];
    acx_param_init_fill(&s, 2, lin, 42, "fc2.weight", 0, 1, w + n - 784); /* scratch */
    memcpy(other, w + n - 784, sizeof other);
    acx_param_init_fill(&s, 2, lin, 42, "fc1.weight", 0, 1, w);
    CHECK(memcmp(other, w, sizeof other) != 0);
    acx_param_init_fill(&s, 2, lin, 43, "fc1.weight", 0, 1, w + n - 784);
    CHECK(memcmp(w + n - 784, w, 16 * sizeof *w) != 0);

    /* kaiming_normal relu [128, 512]: std sqrt(2/512) = 0.0625 */
    const int64_t shp[2] = {128, 512};
    const int64_t m = 128 * 512;
    s = kaiming(ACX_INIT_KAIMING_NORMAL, ACX_NONLIN_RELU, 0, ACX_FAN_IN);
    acx_param_init_fill(&s, 2, shp, 7, "conv.w", 0, 128, w);
    moments(w, m, &mean, &std);
    CHECK_CLOSE(mean, 0.0, 0, 5 * 0.0625 / sqrt((double)m));
    CHECK_CLOSE(std, 0.0625, 5 * 0.5 * sqrt(2.0 / (double)m), 0);
    for (int64_t e = 0; e < m; e += 4099)
        CHECK(w[e] == (float)(0.0625 * acx_rng_normal(7, ACX_RNG_PARAM_INIT, acx_hash64("conv.w"),
                                                      (uint64_t)e)));

    /* N(mean 1, std 0.5) */
    s = ACX_INIT_SPEC_NORMAL(1.0, 0.5);
    acx_param_init_fill(&s, 2, shp, 7, "ln.w", 0, 128, w);
    moments(w, m, &mean, &std);
    CHECK_CLOSE(mean, 1.0, 0, 5 * 0.5 / sqrt((double)m));
    CHECK_CLOSE(std, 0.5, 5 * 0.5 * sqrt(2.0 / (double)m), 0);

    /* U(-0.25, 0.75) */
    s = ACX_INIT_SPEC_UNIFORM(-0.25, 0.75);
    acx_param_init_fill(&s, 2, shp, 7, "u", 0, 128, w);
    for (int64_t i = 0; i < m; i++)
        CHECK(w[i] >= -0.25f && w[i] <= 0.75f);
    moments(w, m, &mean, &std);
    CHECK_CLOSE(mean, 0.25, 0, 5 * (1.0 / sqrt(12.0)) / sqrt((double)m));

    /* zeros, ones, constant: exact */
    s = ACX_INIT_SPEC_ZEROS;
    w[0] = 5;
    acx_param_init_fill(&s, 2, shp, 7, "z", 0, 128, w);
    for (int64_t i = 0; i < m; i++)
        CHECK(w[i] == 0.0f);
    s = (acx_init_spec_t){.kind = ACX_INIT_ONES};
    acx_param_init_fill(&s, 2, shp, 7, "o", 0, 128, w);
    for (int64_t i = 0; i < m; i++)
        CHECK(w[i] == 1.0f);
    s = ACX_INIT_SPEC_CONSTANT(-0.125);
    acx_param_init_fill(&s, 2, shp, 7, "c", 3, 5, w);
    for (int64_t i = 0; i < 2 * 512; i++)
        CHECK(w[i] == -0.125f);
    free(w);
    PASSED();
    return 0;
error:
    free(w);
    FAILED();
    return 1;
}

/* ---- rank independence ---- */

/* Fill rows [r*ceil(R/N), min(R, (r+1)*ceil(R/N))) for every r of N (the
 * sharding rule) and compare each piece with the same rows of a full fill. */
static int check_slices(const acx_init_spec_t *s, int ndim, const int64_t *shape, int nranks,
                        const float *full, float *piece) {
    int64_t rows = shape[0], row_numel = 1;
    for (int d = 1; d < ndim; d++)
        row_numel *= shape[d];
    int64_t per = (rows + nranks - 1) / nranks;
    for (int r = 0; r < nranks; r++) {
        int64_t b = r * per < rows ? r * per : rows;
        int64_t e = (r + 1) * per < rows ? (r + 1) * per : rows;
        acx_param_init_fill(s, ndim, shape, 1234, "layer.w", b, e, piece);
        if (e > b &&
            memcmp(piece, full + b * row_numel, (size_t)((e - b) * row_numel) * sizeof *piece) != 0)
            return 0;
    }
    return 1;
}

static int test_rank_independence(void) {
    TESTING("fill of rows [a, b) == same rows of a full fill, any N");
    const int64_t lin[2] = {257, 33};
    const int64_t conv[4] = {10, 3, 3, 3};
    float *full = malloc(257 * 33 * sizeof *full), *piece = malloc(257 * 33 * sizeof *piece);
    CHECK(full != NULL && piece != NULL);

    acx_init_spec_t specs[3] = {ACX_INIT_SPEC_LINEAR_WEIGHT,
                                kaiming(ACX_INIT_KAIMING_NORMAL, ACX_NONLIN_RELU, 0, ACX_FAN_IN),
                                {.kind = ACX_INIT_XAVIER_UNIFORM}};
    for (int k = 0; k < 3; k++) {
        acx_param_init_fill(&specs[k], 2, lin, 1234, "layer.w", 0, 257, full);
        for (int nr = 1; nr <= 8; nr++)
            CHECK(check_slices(&specs[k], 2, lin, nr, full, piece));
        acx_param_init_fill(&specs[k], 4, conv, 1234, "layer.w", 0, 10, full);
        for (int nr = 1; nr <= 12; nr++)
            CHECK(check_slices(&specs[k], 4, conv, nr, full, piece));
    }
    /* A 1-D bias by single rows. */
    acx_init_spec_t bias = ACX_INIT_SPEC_LINEAR_BIAS(33);
    acx_param_init_fill(&bias, 1, (int64_t[]){257}, 1234, "layer.w", 0, 257, full);
    for (int64_t r = 0; r < 257; r++) {
        acx_param_init_fill(&bias, 1, (int64_t[]){257}, 1234, "layer.w", r, r + 1, piece);
        CHECK(piece[0] == full[r]);
    }
    /* An empty range writes nothing. */
    piece[0] = 12345.0f;
    acx_param_init_fill(&specs[0], 2, lin, 1234, "layer.w", 5, 5, piece);
    CHECK(piece[0] == 12345.0f);
    free(full);
    free(piece);
    PASSED();
    return 0;
error:
    free(full);
    free(piece);
    FAILED();
    return 1;
}

/* ---- validation ---- */

static int test_check(void) {
    TESTING("acx_param_init_check: errors name the parameter and problem");
    const int64_t bias[1] = {256};
    const int64_t lin[2] = {256, 784};
    acx_init_spec_t s;

    s = ACX_INIT_SPEC_LINEAR_WEIGHT;
    CHECK_OK(acx_param_init_check("fc1.weight", &s, 2, lin));
    CHECK_STATUS(acx_param_init_check("fc1.bias", &s, 1, bias), ACX_ERR_INVALID_ARG,
                 "parameter 'fc1.bias': kaiming_uniform needs at least 2 dims or fan_override "
                 "(shape [256])");
    s.fan_override = 784;
    CHECK_OK(acx_param_init_check("fc1.bias", &s, 1, bias));
    s.fan_override = -3;
    CHECK_STATUS(acx_param_init_check("fc1.bias", &s, 1, bias), ACX_ERR_INVALID_ARG,
                 "fan_override -3");

    s = (acx_init_spec_t){.kind = ACX_INIT_XAVIER_NORMAL};
    CHECK_STATUS(acx_param_init_check("ln.bias", &s, 1, bias), ACX_ERR_INVALID_ARG,
                 "parameter 'ln.bias': xavier_normal needs at least 2 dims");

    s = ACX_INIT_SPEC_UNIFORM(1.0, -1.0);
    CHECK_STATUS(acx_param_init_check("emb", &s, 2, lin), ACX_ERR_INVALID_ARG,
                 "parameter 'emb': uniform needs a <= b (got a=1, b=-1)");
    s = ACX_INIT_SPEC_UNIFORM(0.5, 0.5); /* a == b is a constant, allowed */
    CHECK_OK(acx_param_init_check("emb", &s, 2, lin));
    s = ACX_INIT_SPEC_NORMAL(0.0, -0.1);
    CHECK_STATUS(acx_param_init_check("head.w", &s, 2, lin), ACX_ERR_INVALID_ARG,
                 "parameter 'head.w': normal needs std b >= 0");
    s = ACX_INIT_SPEC_NORMAL(NAN, 1.0);
    CHECK_STATUS(acx_param_init_check("head.w", &s, 2, lin), ACX_ERR_INVALID_ARG,
                 "'head.w': normal with non-finite argument");
    s = (acx_init_spec_t){.kind = (acx_init_kind_t)42};
    CHECK_STATUS(acx_param_init_check("x", &s, 2, lin), ACX_ERR_INVALID_ARG,
                 "parameter 'x': unknown init kind 42");
    s = kaiming(ACX_INIT_KAIMING_NORMAL, (acx_nonlinearity_t)9, 0, ACX_FAN_IN);
    CHECK_STATUS(acx_param_init_check("x", &s, 2, lin), ACX_ERR_INVALID_ARG,
                 "unknown nonlinearity 9");
    s = kaiming(ACX_INIT_KAIMING_NORMAL, ACX_NONLIN_RELU, 0, (acx_fan_mode_t)2);
    CHECK_STATUS(acx_param_init_check("x", &s, 2, lin), ACX_ERR_INVALID_ARG, "unknown fan mode 2");
    s = ACX_INIT_SPEC_ZEROS;
    CHECK_STATUS(acx_param_init_check("x", &s, 2, (int64_t[]){4, 0}), ACX_ERR_INVALID_ARG,
                 "parameter 'x': dimension 1 is 0 (shape [4, 0])");
    CHECK_STATUS(acx_param_init_check("x", &s, 0, lin), ACX_ERR_INVALID_ARG, "ndim 0");
    CHECK_STATUS(acx_param_init_check("x", &s, ACX_MAX_DIMS + 1, lin), ACX_ERR_INVALID_ARG,
                 "ndim 9");
    CHECK_OK(acx_param_init_check("x", &s, 1, bias)); /* zeros need no fan */
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(120);
    int failed = 0;
    failed += test_scale();
    failed += test_fill_values();
    failed += test_rank_independence();
    failed += test_check();
    return failed ? 1 : 0;
}

/*
 * base/param_init.c — parameter initializers with torch.nn.init
 * semantics, drawn from the counter-based RNG element by element.
 *
 * Owns: fan computation (torch.nn.init._calculate_fan_in_and_fan_out),
 * gains (torch.nn.init.calculate_gain), the bound/std of each kind, spec
 * validation, and filling any row range of a tensor. Leaves to others: where
 * the rows live and which rank fills which rows (sharding/), and the seed
 * (the resolved config).
 *
 * Element e (flat row-major index in the full tensor) takes
 *   uniform kinds: lo + (hi - lo) * acx_rng_uniform(seed, PARAM_INIT, hash64(name), e)
 *   normal kinds:  mean + std * acx_rng_normal(seed, PARAM_INIT, hash64(name), e)
 * computed in double and rounded once to float, so a rank that fills rows
 * [a, b) gets bit-for-bit the values a 1-rank run has there.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/param_init.h"
#include "base/rng.h"

static const char *kind_name(acx_init_kind_t kind) {
    switch (kind) {
    case ACX_INIT_ZEROS: return "zeros";
    case ACX_INIT_CONSTANT: return "constant";
    case ACX_INIT_UNIFORM: return "uniform";
    case ACX_INIT_NORMAL: return "normal";
    case ACX_INIT_KAIMING_UNIFORM: return "kaiming_uniform";
    case ACX_INIT_KAIMING_NORMAL: return "kaiming_normal";
    case ACX_INIT_XAVIER_UNIFORM: return "xavier_uniform";
    case ACX_INIT_XAVIER_NORMAL: return "xavier_normal";
    case ACX_INIT_ONES: return "ones";
    }
    return "invalid";
}

static int is_fan_based(acx_init_kind_t kind) {
    return kind == ACX_INIT_KAIMING_UNIFORM || kind == ACX_INIT_KAIMING_NORMAL ||
           kind == ACX_INIT_XAVIER_UNIFORM || kind == ACX_INIT_XAVIER_NORMAL;
}

/* ---- fans and gains ---- */

/* torch.nn.init._calculate_fan_in_and_fan_out: shape [d0, d1, d2, ...],
 * receptive field = d2*d3*..., fan_in = d1*receptive, fan_out = d0*receptive.
 * fan_override > 0 stands for both fans (a bias has no fans of its own; it
 * takes its weight's). Returns 0 when there is no fan (ndim < 2, no override). */
static int compute_fans(const acx_init_spec_t *spec, int ndim, const int64_t *shape, double *fan_in,
                        double *fan_out) {
    if (spec->fan_override > 0) {
        *fan_in = *fan_out = (double)spec->fan_override;
        return 1;
    }
    if (ndim < 2) return 0;
    double receptive = 1.0;
    for (int d = 2; d < ndim; d++)
        receptive *= (double)shape[d];
    *fan_in = (double)shape[1] * receptive;
    *fan_out = (double)shape[0] * receptive;
    return 1;
}

/* torch.nn.init.calculate_gain for the nonlinearities acx names. */
static double nonlin_gain(acx_nonlinearity_t nl, double a) {
    switch (nl) {
    case ACX_NONLIN_LINEAR: return 1.0;
    case ACX_NONLIN_RELU: return sqrt(2.0);
    case ACX_NONLIN_LEAKY_RELU: return sqrt(2.0 / (1.0 + a * a));
    case ACX_NONLIN_TANH: return 5.0 / 3.0;
    }
    return NAN;
}

/* The (lo, hi) of a uniform kind or (mean, std) of a normal kind; 0 if the
 * spec cannot be resolved for this shape (acx_param_init_check says why). */
static int resolve(const acx_init_spec_t *spec, int ndim, const int64_t *shape, double *p0,
                   double *p1) {
    double fan_in = 0, fan_out = 0, s;
    switch (spec->kind) {
    case ACX_INIT_ZEROS: *p0 = *p1 = 0.0; return 1;
    case ACX_INIT_ONES: *p0 = *p1 = 1.0; return 1;
    case ACX_INIT_CONSTANT: *p0 = *p1 = spec->a; return 1;
    case ACX_INIT_UNIFORM:
    case ACX_INIT_NORMAL:
        *p0 = spec->a;
        *p1 = spec->b;
        return 1;
    case ACX_INIT_KAIMING_UNIFORM:
    case ACX_INIT_KAIMING_NORMAL: {
        if (!compute_fans(spec, ndim, shape, &fan_in, &fan_out)) return 0;
        double fan = spec->mode == ACX_FAN_OUT ? fan_out : fan_in;
        double gain = nonlin_gain(spec->nonlinearity, spec->a);
        if (spec->kind == ACX_INIT_KAIMING_UNIFORM) {
            s = gain * sqrt(3.0 / fan);
            *p0 = -s, *p1 = s;
        } else {
            *p0 = 0.0, *p1 = gain / sqrt(fan);
        }
        return 1;
    }
    case ACX_INIT_XAVIER_UNIFORM:
    case ACX_INIT_XAVIER_NORMAL: {
        if (!compute_fans(spec, ndim, shape, &fan_in, &fan_out)) return 0;
        double gain = spec->a != 0.0 ? spec->a : 1.0; /* zero-initialized spec = gain 1 */
        if (spec->kind == ACX_INIT_XAVIER_UNIFORM) {
            s = gain * sqrt(6.0 / (fan_in + fan_out));
            *p0 = -s, *p1 = s;
        } else {
            *p0 = 0.0, *p1 = gain * sqrt(2.0 / (fan_in + fan_out));
        }
        return 1;
    }
    }
    return 0;
}

/* "[256, 784]" for error messages. */
static void format_shape(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    o += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* ---- public (library-private) interface ---- */

acx_status_t acx_param_init_check(const char *name, const acx_init_spec_t *spec, int ndim,
                                  const int64_t *shape) {
    const char *pname = name ? name : "(unnamed)";
    if (spec == NULL || shape == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "parameter '%s': %s is NULL", pname,
                         spec == NULL ? "init spec" : "shape");
    if (ndim < 1 || ndim > ACX_MAX_DIMS)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "parameter '%s': ndim %d out of range (1..%d)", pname,
                         ndim, ACX_MAX_DIMS);
    char shp[ACX_MAX_DIMS * 24 + 4];
    format_shape(ndim, shape, shp, sizeof shp);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 1)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "parameter '%s': dimension %d is %lld (shape %s); every "
                             "dimension must be >= 1",
                             pname, d, (long long)shape[d], shp);

    const char *kn = kind_name(spec->kind);
    if (strcmp(kn, "invalid") == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "parameter '%s': unknown init kind %d (expected ACX_INIT_ZEROS .. "
                         "ACX_INIT_ONES)",
                         pname, (int)spec->kind);
    if (!isfinite(spec->a) || !isfinite(spec->b))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "parameter '%s': %s with non-finite argument (a=%g, b=%g)", pname, kn,
                         spec->a, spec->b);

    switch (spec->kind) {
    case ACX_INIT_UNIFORM:
        if (spec->a > spec->b)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "parameter '%s': uniform needs a <= b (got a=%g, b=%g)", pname,
                             spec->a, spec->b);
        break;
    case ACX_INIT_NORMAL:
        if (spec->b < 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "parameter '%s': normal needs std b >= 0 (got b=%g)", pname, spec->b);
        break;
    case ACX_INIT_KAIMING_UNIFORM:
    case ACX_INIT_KAIMING_NORMAL:
        if ((unsigned)spec->nonlinearity > ACX_NONLIN_TANH)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "parameter '%s': %s with unknown nonlinearity %d (expected "
                             "linear, relu, leaky_relu or tanh)",
                             pname, kn, (int)spec->nonlinearity);
        if ((unsigned)spec->mode > ACX_FAN_OUT)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "parameter '%s': %s with unknown fan mode %d (expected fan_in "
                             "or fan_out)",
                             pname, kn, (int)spec->mode);
        break;
    default: break;
    }

    if (is_fan_based(spec->kind)) {
        if (spec->fan_override < 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "parameter '%s': %s with fan_override %lld (expected > 0, or 0 "
                             "for the shape's fans)",
                             pname, kn, (long long)spec->fan_override);
        if (ndim < 2 && spec->fan_override == 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "parameter '%s': %s needs at least 2 dims or fan_override "
                             "(shape %s)",
                             pname, kn, shp);
    }
    return ACX_OK;
}

double acx_param_init_scale(const acx_init_spec_t *spec, int ndim, const int64_t *shape) {
    double p0, p1;
    if (spec == NULL || !resolve(spec, ndim, shape, &p0, &p1)) return NAN;
    switch (spec->kind) {
    case ACX_INIT_UNIFORM: return 0.5 * (p1 - p0); /* half-width of [a, b] */
    case ACX_INIT_KAIMING_UNIFORM:
    case ACX_INIT_XAVIER_UNIFORM: return p1; /* U(-bound, bound) */
    case ACX_INIT_NORMAL:
    case ACX_INIT_KAIMING_NORMAL:
    case ACX_INIT_XAVIER_NORMAL: return p1; /* std */
    default: return 0.0;
    }
}

/* The caller has validated spec with acx_param_init_check; an unresolvable
 * spec here is a bug upstream, and the rows are zero-filled rather than left
 * uninitialized. */
void acx_param_init_fill(const acx_init_spec_t *spec, int ndim, const int64_t *shape, uint64_t seed,
                         const char *name, int64_t row_begin, int64_t row_end, float *out) {
    if (row_end <= row_begin) return;
    int64_t row_numel = 1;
    for (int d = 1; d < ndim; d++)
        row_numel *= shape[d];
    int64_t first = row_begin * row_numel; /* flat index of out[0] */
    int64_t count = (row_end - row_begin) * row_numel;

    double p0 = 0, p1 = 0;
    if (!resolve(spec, ndim, shape, &p0, &p1)) {
        memset(out, 0, (size_t)count * sizeof *out);
        return;
    }
    uint64_t key = acx_hash64(name);
    switch (spec->kind) {
    case ACX_INIT_UNIFORM:
    case ACX_INIT_KAIMING_UNIFORM:
    case ACX_INIT_XAVIER_UNIFORM:
        for (int64_t i = 0; i < count; i++) {
            double u = acx_rng_uniform(seed, ACX_RNG_PARAM_INIT, key, (uint64_t)(first + i));
            out[i] = (float)(p0 + (p1 - p0) * u);
        }
        break;
    case ACX_INIT_NORMAL:
    case ACX_INIT_KAIMING_NORMAL:
    case ACX_INIT_XAVIER_NORMAL:
        for (int64_t i = 0; i < count; i++) {
            double z = acx_rng_normal(seed, ACX_RNG_PARAM_INIT, key, (uint64_t)(first + i));
            out[i] = (float)(p0 + p1 * z);
        }
        break;
    default: /* zeros, ones, constant: p0 is the value */
        for (int64_t i = 0; i < count; i++)
            out[i] = (float)p0;
        break;
    }
}

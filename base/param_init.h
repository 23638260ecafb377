/*
 * base/param_init.h — parameter initializers (library-private),
 * torch.nn.init formulas driven by the counter-based RNG.
 *
 * Element e (flat row-major index in the full tensor) of a parameter named
 * `name` draws from address (seed, ACX_RNG_PARAM_INIT, hash64(name), e), so a
 * rank can fill just the rows it owns and get exactly the values a 1-rank run
 * has there.
 */
#ifndef ACX_BASE_PARAM_INIT_H
#define ACX_BASE_PARAM_INIT_H

#include <stdint.h>

#include "acx/model.h"

/* Validate spec for the shape (records ACX_ERR_INVALID_ARG naming `name`,
 * e.g. fan-based init of a 1-D tensor without fan_override, std < 0, lo > hi). */
acx_status_t acx_param_init_check(const char *name, const acx_init_spec_t *spec, int ndim,
                                  const int64_t *shape);

/* The bound (uniform kinds) or std (normal kinds) the spec resolves to for
 * the shape; 0 for zeros/ones/constant. For tests and logs. */
double acx_param_init_scale(const acx_init_spec_t *spec, int ndim, const int64_t *shape);

/* Fill rows [row_begin, row_end) of the tensor into out
 * [(row_end-row_begin) x row_numel], row_numel = prod(shape[1..]). */
void acx_param_init_fill(const acx_init_spec_t *spec, int ndim, const int64_t *shape, uint64_t seed,
                         const char *name, int64_t row_begin, int64_t row_end, float *out);

#endif /* ACX_BASE_PARAM_INIT_H */

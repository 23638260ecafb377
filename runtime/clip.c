/*
 * runtime/clip.c — gradient clipping over the whole model, whatever the
 * sharding: acx_clip_grad_norm and acx_clip_grad_value
 * (torch.nn.utils.clip_grad_norm_ / clip_grad_value_ semantics).
 *
 * The reduced gradients live in model->shard_grad: each rank's owned rows
 * (padding rows are zero and add nothing). Under NO_SHARD every rank holds
 * every row, so its local norm is the global one; under the sharded
 * strategies the owned rows of the shard group partition the model, so the
 * partial sums (or maxima) are all-reduced over model->shard_comm — under
 * HYBRID_SHARD that is the node, whose replicas on other nodes hold the
 * same rows and must not be counted twice.
 *
 * Sums of squares accumulate in double: the norm then agrees with a 1-rank
 * run to float rounding of the final value, whatever the partition.
 * With device-resident state (model->shard_dev; not with CPU offload,
 * where shard_grad is the host copy and the loops below run) the sum or maximum is a
 * kernel of the device table into a device double, copied back (8 bytes),
 * and the scaling another kernel: the emulated device sums in this loop's
 * order (bitwise), the CUDA kernels in a fixed tree (~1e-12 relative).
 * Clipping by value is the device table's clamp, exactly this file's loop
 * (comparisons only: bitwise on every device, NaN kept as torch.clamp).
 * Under fp16 the gradients are unscaled first (runtime/scaler.c), as
 * torch's recipe scaler.unscale_(opt) before clip_grad_norm_ does.
 */
#include <math.h>

#include "collectives/watchdog.h"
#include "runtime/accelerator.h"
#include "base/error.h"
#include "runtime/scaler.h"
#include "sharding/model.h"

static acx_status_t require_reduced(const acx_accelerator_t *acc, const char *what) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: acc is NULL", what);
    if (acc->model == NULL) return ACX_ERROR(ACX_ERR_STATE, "%s before acx_prepare", what);
    if (!acc->grads_reduced)
        return ACX_ERROR(ACX_ERR_STATE,
                         "%s: no reduced gradients in this micro-step: call it after "
                         "acx_backward_end on a synchronization boundary (acx_sync_gradients() "
                         "true), before acx_optimizer_step",
                         what);
    return ACX_OK;
}

ACX_API acx_status_t acx_clip_grad_norm(acx_accelerator_t *acc, double max_norm, double norm_type,
                                        double *total_norm_p) {
    ACX_CHECK(require_reduced(acc, "acx_clip_grad_norm"));
    if (!(max_norm >= 0.0))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_clip_grad_norm: max_norm %g; expected >= 0",
                         max_norm);
    int inf = isinf(norm_type) && norm_type > 0;
    if (!inf && norm_type != 2.0)
        return ACX_ERROR(
            ACX_ERR_INVALID_ARG,
            "acx_clip_grad_norm: norm_type %g is not supported; expected 2 or INFINITY", norm_type);
    /* under fp16 the norm is of the true gradients: unscale first (once) */
    ACX_CHECK(acx_scaler_unscale(acc));
    acx_model_t *m = acc->model;
    const float *g = m->shard_grad;
    double acc_v = 0.0;
    const acx_devops_t *d = m->shard_dev;                 /* NULL with host state or CPU offload */
    if (d == NULL) ACX_CHECK(acx_model_grads_to_host(m)); /* offload: the copies into g */
    if (d != NULL) { /* device state: the same reduction as a kernel, 8 bytes read back */
        double *r = (double *)((char *)m->dev_scratch + 8);
        if (inf)
            ACX_CHECK(d->max_abs(g, m->shard_numel, r, m->ctx.stream));
        else
            ACX_CHECK(d->sum_squares(g, m->shard_numel, r, m->ctx.stream));
        ACX_CHECK(d->to_host(&acc_v, r, sizeof acc_v, m->ctx.stream));
    } else if (inf) {
        for (size_t i = 0; i < m->shard_numel; i++) {
            double a = fabs((double)g[i]);
            if (a > acc_v || isnan(a)) acc_v = a;
        }
    } else {
        for (size_t i = 0; i < m->shard_numel; i++)
            acc_v += (double)g[i] * (double)g[i];
    }
    if (m->shard_comm != NULL && m->shard_comm->size > 1)
        ACX_MPI_CHECK(ACX_WATCHED("clip_grad_norm",
                                  MPI_Allreduce(MPI_IN_PLACE, &acc_v, 1, MPI_DOUBLE,
                                                inf ? MPI_MAX : MPI_SUM, m->shard_comm->mpi)));
    double total = inf ? acc_v : sqrt(acc_v);
    /* torch: clip_coef = max_norm / (total + 1e-6), clamped to 1, applied
     * unconditionally (a factor of exactly 1 changes nothing) */
    double coef = max_norm / (total + 1e-6);
    if (coef < 1.0 || isnan(coef)) {
        float c = (float)coef;
        float *w = m->shard_grad;
        if (d != NULL)
            ACX_CHECK(d->scale(w, m->shard_numel, c, m->ctx.stream));
        else
            for (size_t i = 0; i < m->shard_numel; i++)
                w[i] *= c;
    }
    if (total_norm_p != NULL) *total_norm_p = total;
    return ACX_OK;
}

ACX_API acx_status_t acx_clip_grad_value(acx_accelerator_t *acc, double clip_value) {
    ACX_CHECK(require_reduced(acc, "acx_clip_grad_value"));
    if (!(clip_value >= 0.0))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_clip_grad_value: clip_value %g; expected >= 0",
                         clip_value);
    ACX_CHECK(acx_scaler_unscale(acc));
    acx_model_t *m = acc->model;
    float hi = (float)clip_value, lo = -hi;
    float *w = m->shard_grad;
    /* no communication: every rank clamps its own rows (the replicas of a
     * row hold the same values, so they stay the same) */
    if (m->shard_dev != NULL) { /* device state: the same loop as a kernel (exact) */
        ACX_CHECK(m->shard_dev->clamp(w, m->shard_numel, hi, m->ctx.stream));
    } else {
        ACX_CHECK(acx_model_grads_to_host(m)); /* offload: the copies into w */
        for (size_t i = 0; i < m->shard_numel; i++)
            w[i] = w[i] < lo ? lo : (w[i] > hi ? hi : w[i]);
    }
    return ACX_OK;
}

/*
 * runtime/scaler.c — dynamic loss scaling under mixed_precision fp16, with
 * torch.amp.GradScaler's semantics (torch/amp/grad_scaler.py):
 *
 *   - the program multiplies its loss (the seed of its backward) by
 *     acx_loss_scale(acc), initially loss_scale.init = 2^16;
 *   - before the optimizer update, the reduced gradients are checked for
 *     inf/NaN and multiplied by 1/scale ("unscale_"; acx_clip_grad_norm does
 *     it first when it runs, so the norm is of the true gradients);
 *   - a non-finite gradient on ANY rank skips the update on EVERY rank (one
 *     all-reduce on a flag): master weights, optimizer moments and the step
 *     count stay bitwise unchanged and the LR schedule does not advance; the
 *     scale is multiplied by 0.5 (backoff_factor) and the growth tracker
 *     restarts;
 *   - after growth_interval clean steps in a row the scale is multiplied by
 *     2 (growth_factor).
 * Beyond torch: the run stops (acx_optimizer_step returns ACX_ERR_STATE)
 * when the scale would fall below loss_scale.min or after
 * loss_scale.max_consecutive_skips skipped steps in a row, with a diagnostic
 * that says whether the loss itself was non-finite (acx_record_loss tells
 * acx the loss) or the gradients overflowed fp16 while the loss was finite.
 *
 * Without fp16 the same check guards every update, and a hit stops the run
 * at that step instead of skipping it: a non-finite recorded loss or
 * reduced gradient on any rank makes acx_optimizer_step return
 * ACX_ERR_STATE on every rank (one all-reduce of 3 ints), naming the step
 * and the first rank of each kind, with the weights and moments unchanged.
 * Skipping is right for fp16, where an overflow is a property of the scale
 * and halving it cures it; in fp32/bf16 nothing changes between steps that
 * would cure it, and torch (no check) and Accelerate (no check outside its
 * GradScaler) train on and write NaN into every weight, a run that ends
 * with exit 0 and garbage. docs/mixed-precision.md has the comparison.
 *
 * Left to others: where gradients live (sharding/), the update (optimizer.c).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "collectives/watchdog.h"
#include "device/ops.h"
#include "runtime/accelerator.h"
#include "base/error.h"
#include "base/log.h"
#include "base/optim_kernels.h"
#include "runtime/scaler.h"
#include "sharding/model.h"

void acx_scaler_init(acx_scaler_t *s, const acx_config_t *c) {
    *s = (acx_scaler_t){.enabled = c->mixed_precision == ACX_MP_FP16,
                        .scale = 1.0,
                        .growth_interval = c->loss_scale.growth_interval,
                        .min_scale = c->loss_scale.min,
                        .max_consecutive_skips = c->loss_scale.max_consecutive_skips,
                        .last_loss_step = -1};
    if (s->enabled) s->scale = c->loss_scale.init;
}

acx_status_t acx_scaler_unscale(acx_accelerator_t *acc) {
    acx_scaler_t *s = &acc->scaler;
    if (!s->enabled || s->unscaled) return ACX_OK;
    acx_model_t *m = acc->model;
    float *g = m->shard_grad;
    /* torch multiplies by the float32 reciprocal of the scale; powers of
     * two make it exact. A gradient that is finite but whose unscaled value
     * is not (a scale below 1/FLT_MAX makes inv infinite, and 0 * inf is
     * NaN; or a scale below 1 overflows a large gradient) counts as an
     * overflow too: the update would write inf/NaN into the master weights. */
    float inv = (float)(1.0 / s->scale);
    /* flags: a non-finite gradient, a non-finite loss, a failed device op */
    int flags[3] = {0, s->loss_nonfinite, 0};
    acx_status_t dev_status = ACX_OK;
    const acx_devops_t *d = m->shard_dev; /* NULL with host state or CPU offload */
    if (d != NULL) { /* device state: the same test as a kernel, one int read back */
        int *flag = m->dev_scratch;
        dev_status = d->memset(flag, 0, sizeof *flag, m->ctx.stream);
        if (dev_status == ACX_OK)
            dev_status = d->nonfinite(g, m->shard_numel, inv, flag, m->ctx.stream);
        /* the read back is also where a fault of the program's own kernels
         * surfaces (CUDA reports them at the next synchronization), on this
         * rank only: it still joins the all-reduce below, so that the
         * others fail with it instead of waiting for it */
        if (dev_status == ACX_OK)
            dev_status = d->to_host(&flags[0], flag, sizeof flags[0], m->ctx.stream);
        flags[2] = dev_status != ACX_OK;
    } else {
        ACX_CHECK(acx_model_grads_to_host(m)); /* offload: the copies into g */
        flags[0] = acx_kernel_any_nonfinite(g, m->shard_numel, inv);
    }
    /* every rank decides from the same two bits: any non-finite gradient
     * anywhere, and any non-finite recorded loss anywhere */
    ACX_MPI_CHECK(ACX_WATCHED("loss scaler check", MPI_Allreduce(MPI_IN_PLACE, flags, 3, MPI_INT,
                                                                 MPI_MAX, acc->world->mpi)));
    if (dev_status != ACX_OK) return dev_status;
    if (flags[2])
        return ACX_ERROR(ACX_ERR_CUDA,
                         "loss scaler check: the device state of another rank "
                         "failed (see that rank's error); this rank's step is abandoned too");
    s->found_inf = flags[0];
    s->loss_nonfinite = flags[1];
    if (!s->found_inf && d != NULL)
        ACX_CHECK(d->scale(g, m->shard_numel, inv, m->ctx.stream));
    else if (!s->found_inf)
        for (size_t i = 0; i < m->shard_numel; i++)
            g[i] *= inv;
    s->unscaled = 1;
    return ACX_OK;
}

/* Without fp16: stop at a non-finite loss or reduced gradient (file
 * comment). Collective. */
static acx_status_t check_finite(acx_accelerator_t *acc) {
    acx_scaler_t *s = &acc->scaler;
    acx_model_t *m = acc->model;
    const float *g = m->shard_grad;
    int grad_bad = 0, loss_bad = s->loss_nonfinite;
    acx_status_t dev_status = ACX_OK;
    const acx_devops_t *d = m->shard_dev; /* NULL with host state or CPU offload */
    s->loss_nonfinite = 0;
    if (d != NULL) { /* the fp16 check's kernel, with a factor of 1 */
        int *flag = m->dev_scratch;
        dev_status = d->memset(flag, 0, sizeof *flag, m->ctx.stream);
        if (dev_status == ACX_OK)
            dev_status = d->nonfinite(m->shard_grad, m->shard_numel, 1.0f, flag, m->ctx.stream);
        if (dev_status == ACX_OK)
            dev_status = d->to_host(&grad_bad, flag, sizeof grad_bad, m->ctx.stream);
    } else {
        ACX_CHECK(acx_model_grads_to_host(m)); /* offload: the copies into g */
        grad_bad = acx_kernel_any_nonfinite(g, m->shard_numel, 1.0f);
    }
    /* the lowest rank of each kind, and whether every device op worked */
    int v[3] = {loss_bad ? acc->rank : INT_MAX, grad_bad ? acc->rank : INT_MAX,
                dev_status != ACX_OK};
    v[2] = -v[2]; /* MIN over -failed: -1 when any rank failed */
    ACX_MPI_CHECK(ACX_WATCHED(
        "non-finite check", MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MIN, acc->world->mpi)));
    if (dev_status != ACX_OK) return dev_status;
    if (v[2] < 0)
        return ACX_ERROR(ACX_ERR_CUDA,
                         "non-finite check: the device state of another rank "
                         "failed (see that rank's error); this rank's step is abandoned too");
    if (v[0] == INT_MAX && v[1] == INT_MAX) return ACX_OK;
    char what[160];
    if (v[0] != INT_MAX && v[1] != INT_MAX)
        snprintf(what, sizeof what,
                 "the loss was not finite (first on rank %d, acx_record_loss) and the reduced "
                 "gradients hold inf/NaN (first on rank %d)",
                 v[0], v[1]);
    else if (v[0] != INT_MAX)
        snprintf(what, sizeof what, "the loss was not finite (first on rank %d, acx_record_loss)",
                 v[0]);
    else
        snprintf(what, sizeof what, "the reduced gradients hold inf/NaN (first on rank %d)", v[1]);
    return ACX_ERROR(ACX_ERR_STATE,
                     "training stopped at step %lld: %s; the update was not applied (weights "
                     "and optimizer state are those of step %lld). Without fp16 loss scaling "
                     "nothing cures a NaN or inf by itself: lower the learning rate, clip "
                     "gradients (acx_clip_grad_norm), or check the data and the loss",
                     (long long)acc->step, what, (long long)acc->step);
}

acx_status_t acx_scaler_step(acx_accelerator_t *acc, int *skip_p) {
    acx_scaler_t *s = &acc->scaler;
    *skip_p = 0;
    s->step_skipped = 0;
    if (!s->enabled) return check_finite(acc);
    ACX_CHECK(acx_scaler_unscale(acc));
    int skip = s->found_inf;
    double used = s->scale;
    int loss_bad = s->loss_nonfinite;
    s->unscaled = 0;
    s->found_inf = 0;
    s->loss_nonfinite = 0;
    if (!skip) {
        s->consecutive_skips = 0;
        if (++s->growth_tracker >= s->growth_interval) {
            s->scale *= 2.0;
            s->growth_tracker = 0;
            ACX_DEBUG(ACX_SUBSYS_OPTIM, "loss scale grows to %g", s->scale);
        }
        return ACX_OK;
    }
    *skip_p = 1;
    s->step_skipped = 1;
    s->skipped_total++;
    s->consecutive_skips++;
    s->growth_tracker = 0;
    s->scale *= 0.5;
    ACX_INFO(ACX_SUBSYS_OPTIM,
             "step %lld skipped: non-finite gradients at loss scale %g; scale now %g",
             (long long)acc->step, used, s->scale);
    const char *why;
    if (!isfinite((float)(1.0 / used)))
        why = "the scale itself is too small for float32 (its reciprocal overflows): check "
              "loss_scale.init and loss_scale.min, or the checkpoint's /scaler";
    else if (loss_bad)
        why = "the loss itself was not finite on at least one rank (see acx_record_loss): a bug, "
              "bad data or a diverged model, not an fp16 overflow";
    else
        why = "the recorded losses were finite, so the gradients overflowed fp16's range (65504) "
              "even at this scale: reduce the learning rate, clip gradients, or train in bf16";
    if (s->scale < s->min_scale)
        return ACX_ERROR(ACX_ERR_STATE,
                         "fp16 loss scaling gave up at step %lld: the scale fell to %g, below "
                         "loss_scale.min = %g, after %d skipped step(s) in a row; %s",
                         (long long)acc->step, s->scale, s->min_scale, s->consecutive_skips, why);
    if (s->consecutive_skips >= s->max_consecutive_skips)
        return ACX_ERROR(ACX_ERR_STATE,
                         "fp16 loss scaling gave up at step %lld: %d steps in a row were skipped "
                         "for non-finite gradients (loss_scale.max_consecutive_skips = %d; scale "
                         "now %g); %s",
                         (long long)acc->step, s->consecutive_skips, s->max_consecutive_skips,
                         s->scale, why);
    return ACX_OK;
}

/* ---- public ---- */

ACX_API double acx_loss_scale(const acx_accelerator_t *acc) {
    return acc != NULL ? acc->scaler.scale : 1.0;
}

ACX_API acx_status_t acx_backward_begin(acx_accelerator_t *acc, float *seed, size_t count) {
    if (acc == NULL || (seed == NULL && count > 0))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_backward_begin: %s is NULL",
                         acc == NULL ? "acc" : "seed");
    /* the same single float multiplication on either side (the device
     * table's scale kernel is x[i] *= s), so host and device runs agree */
    const float s = (float)acc->scaler.scale;
    if (s == 1.0f || count == 0) return ACX_OK;
    if (acc->dev != NULL) return acc->dev->scale(seed, count, s, acc->compute_stream);
    for (size_t i = 0; i < count; i++)
        seed[i] *= s;
    return ACX_OK;
}

ACX_API void acx_record_loss(acx_accelerator_t *acc, double loss) {
    if (acc == NULL) return;
    acc->scaler.last_loss = loss;
    acc->scaler.last_loss_step = acc->step;
    if (!isfinite(loss)) acc->scaler.loss_nonfinite = 1;
}

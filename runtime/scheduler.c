/*
 * runtime/scheduler.c — the learning-rate schedule object: validates the
 * schedule, remembers the base learning rate and how many scheduler steps
 * were taken, and writes base_lr * factor(s) into its optimizer.
 *
 * The formulas (transformers' get_*_schedule_with_warmup) are pure and live
 * in base/optim_kernels.c (acx_schedule_factor); the optimizer owns the
 * scheduler and frees it (runtime/optimizer.c). Like torch's LambdaLR, the
 * schedule applies factor(0) at creation, so the first optimizer step uses
 * it, and each acx_scheduler_step moves to the next factor.
 */
#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/optim_kernels.h"
#include "runtime/optim_state.h"

struct acx_scheduler {
    acx_optimizer_t *opt;
    acx_schedule_kind_t kind;
    int64_t warmup_steps, total_steps;
    double num_cycles;
    double base_lr; /* the optimizer's lr when the schedule was created */
    int64_t step;   /* acx_scheduler_step calls so far (LambdaLR's last_epoch) */
};

/* ---- lifecycle ---- */

static acx_status_t check_schedule(acx_schedule_kind_t kind, int64_t warmup_steps,
                                   int64_t total_steps, double num_cycles) {
    const char *fn = "acx_scheduler_create";
    if (kind < ACX_SCHED_CONSTANT || kind > ACX_SCHED_COSINE)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: invalid schedule kind %d: expected ACX_SCHED_CONSTANT (0), "
                         "CONSTANT_WITH_WARMUP (1), LINEAR (2) or COSINE (3)",
                         fn, (int)kind);
    if (warmup_steps < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: invalid warmup_steps %lld: expected >= 0", fn,
                         (long long)warmup_steps);
    if ((kind == ACX_SCHED_LINEAR || kind == ACX_SCHED_COSINE) && total_steps < warmup_steps)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: invalid total_steps %lld: expected >= warmup_steps (%lld)", fn,
                         (long long)total_steps, (long long)warmup_steps);
    if (kind == ACX_SCHED_COSINE && (!(num_cycles >= 0.0) || isinf(num_cycles)))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: invalid num_cycles %g: expected a finite value >= 0 (0.5 = half a "
                         "cosine)",
                         fn, num_cycles);
    return ACX_OK;
}

ACX_API acx_status_t acx_scheduler_create(acx_optimizer_t *opt, acx_schedule_kind_t kind,
                                          int64_t warmup_steps, int64_t total_steps,
                                          double num_cycles, acx_scheduler_t **sched_p) {
    if (opt == NULL || sched_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_scheduler_create: opt and sched_p must not be NULL");
    ACX_CHECK(check_schedule(kind, warmup_steps, total_steps, num_cycles));
    acx_scheduler_t *s = acx_calloc(1, sizeof *s, "scheduler");
    if (s == NULL) return ACX_ERR_NO_MEMORY;
    *s = (acx_scheduler_t){
        .opt = opt,
        .kind = kind,
        .warmup_steps = warmup_steps,
        .total_steps = total_steps,
        .num_cycles = num_cycles,
        .base_lr = acx_optimizer_lr(opt),
        .step = 0,
    };
    acx_status_t status = acx_optimizer_attach_scheduler(opt, s);
    if (status != ACX_OK) {
        free(s);
        return status;
    }
    /* Cannot fail: base_lr was a valid lr and every factor is in [0, 1]. */
    (void)acx_optimizer_set_lr(opt, s->base_lr * acx_scheduler_factor(s, 0));
    *sched_p = s;
    return ACX_OK;
}

void acx_scheduler_free(acx_scheduler_t *sched) { free(sched); }

/* ---- stepping ---- */

ACX_API acx_status_t acx_scheduler_step(acx_scheduler_t *sched) {
    if (sched == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_scheduler_step: sched is NULL");
    /* A step the fp16 loss scaler skipped did not happen: the schedule,
     * which counts optimizer steps, stays (Accelerate's AcceleratedScheduler). */
    if (acx_optimizer_step_was_skipped(sched->opt)) return ACX_OK;
    sched->step++;
    return acx_optimizer_set_lr(sched->opt,
                                sched->base_lr * acx_scheduler_factor(sched, sched->step));
}

ACX_API double acx_scheduler_factor(const acx_scheduler_t *sched, int64_t s) {
    if (sched == NULL) return 0.0;
    return acx_schedule_factor(sched->kind, sched->warmup_steps, sched->total_steps,
                               sched->num_cycles, s);
}

/* ---- checkpoint state (runtime/optim_state.h) ---- */

void acx_scheduler_get_state(const acx_scheduler_t *sched, acx_scheduler_state_t *state) {
    *state = (acx_scheduler_state_t){
        .kind = sched->kind,
        .warmup_steps = sched->warmup_steps,
        .total_steps = sched->total_steps,
        .num_cycles = sched->num_cycles,
        .base_lr = sched->base_lr,
        .step = sched->step,
    };
}

void acx_scheduler_set_position(acx_scheduler_t *sched, double base_lr, int64_t step) {
    sched->base_lr = base_lr;
    sched->step = step;
}

const char *acx_schedule_kind_name(int kind) {
    static const char *const names[] = {"constant", "constant_with_warmup", "linear", "cosine"};
    return kind >= ACX_SCHED_CONSTANT && kind <= ACX_SCHED_COSINE ? names[kind] : "none";
}

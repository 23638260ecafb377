/*
 * acx/optim.h — optimizers and learning-rate schedules.
 *
 * Semantics are exactly torch.optim's (SGD, Adam, AdamW) and the
 * transformers get_*_schedule_with_warmup functions; the formulas are in
 * each doc comment. An optimizer updates the fp32 master weights of the
 * rank's local shard (the whole model under NO_SHARD) in one fused pass
 * (one per contiguous run of a parameter group's parameters, when the
 * program adds groups: acx_optimizer_add_param_group), after
 * acx_backward_end on a synchronization boundary.
 */
#ifndef ACX_OPTIM_H
#define ACX_OPTIM_H

#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.optim.SGD. With g = grad + weight_decay * p:
 *   momentum == 0:   p -= lr * g
 *   otherwise:       buf = g on the first step, else buf = momentum*buf + (1-dampening)*g
 *                    d = nesterov ? g + momentum*buf : buf;  p -= lr * d
 * nesterov requires momentum > 0 and dampening == 0. */
typedef struct acx_sgd_hparams {
    double lr, momentum, dampening, weight_decay;
    int nesterov;
} acx_sgd_hparams_t;
#define ACX_SGD_DEFAULT ((acx_sgd_hparams_t){.lr = 1e-3})

/* torch.optim.Adam (weight_decay is L2: g = grad + wd*p) and torch.optim.AdamW
 * (decoupled, Loshchilov & Hutter 2019: p *= 1 - lr*wd before the Adam update).
 * With t the step count (from 1):
 *   m = beta1*m + (1-beta1)*g;   v = beta2*v + (1-beta2)*g^2
 *   p -= (lr / (1-beta1^t)) * m / (sqrt(v) / sqrt(1-beta2^t) + eps) */
typedef struct acx_adam_hparams {
    double lr, beta1, beta2, eps, weight_decay;
} acx_adam_hparams_t;
#define ACX_ADAM_DEFAULT                                                                           \
    ((acx_adam_hparams_t){                                                                         \
        .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0})
#define ACX_ADAMW_DEFAULT                                                                          \
    ((acx_adam_hparams_t){                                                                         \
        .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2})

/* Create an optimizer over every parameter of `model` (before acx_prepare;
 * its state is allocated there, sharded like the master weights). Owned by
 * the model's accelerator. Not collective. Errors: ACX_ERR_INVALID_ARG
 * (lr outside [0, 1e3] or not finite — torch has no upper bound; acx's
 * keeps a corrupted or mistyped rate from training on NaN, and checkpoints
 * are checked against the same bound —, negative eps/weight_decay, betas
 * outside [0,1), nesterov without momentum or with dampening),
 * ACX_ERR_STATE (model already prepared). */
ACX_API acx_status_t acx_sgd_create(acx_model_t *model, const acx_sgd_hparams_t *hp,
                                    acx_optimizer_t **opt_p);
ACX_API acx_status_t acx_adam_create(acx_model_t *model, const acx_adam_hparams_t *hp,
                                     acx_optimizer_t **opt_p);
ACX_API acx_status_t acx_adamw_create(acx_model_t *model, const acx_adam_hparams_t *hp,
                                      acx_optimizer_t **opt_p);

/* Add a parameter group to opt, as torch.optim's param_groups: the
 * `num_params` parameters in params[] (of opt's model) are updated with
 * this group's weight_decay instead of the create-time one, and with
 * learning rate lr x lr_scale, where lr is the optimizer's (the schedule's
 * once one is attached, or acx_optimizer_set_lr's; acx_optimizer_lr keeps
 * returning that base lr). Every other hyperparameter (momentum, betas,
 * eps, ...) is the create-time one. Parameters in no group form the default
 * group: the create-time hyperparameters, lr_scale 1. Typical use (GPT):
 * one group "no_decay" with weight_decay 0 holding every parameter with
 * acx_param_ndim(p) < 2 (biases, LayerNorm gains), decay on the 2-D
 * weights from the create-time weight_decay (docs/user-guide.md).
 *
 * Before acx_prepare (the groups become contiguous ranges of the rank's
 * shard there; the step runs its fused update once per range, once over
 * the whole shard without groups). Not collective, but every rank must add
 * the same groups (checkpoints record them). The group's name (1..127
 * bytes, unique in opt) names it in errors and in checkpoints, which save
 * the groups and refuse, under a strict load, a file whose groups differ
 * (docs/checkpoint-format.md). params is copied; the caller keeps it.
 * Errors (nothing added): ACX_ERR_INVALID_ARG (NULL opt/name/params, a
 * name already used, weight_decay negative or not finite, lr_scale outside
 * (0, 1e3] or not finite, num_params < 1, a NULL parameter or one of
 * another model, a parameter already in this or another group — the
 * message names the group and the parameter), ACX_ERR_STATE (the model is
 * prepared), ACX_ERR_NO_MEMORY. */
ACX_API acx_status_t acx_optimizer_add_param_group(acx_optimizer_t *opt, const char *name,
                                                   double weight_decay, double lr_scale,
                                                   int num_params, acx_param_t *const *params);

/* Apply one update to the local shard with the current learning rate and
 * refresh the parameters the program sees. Call after acx_backward_end on a
 * boundary. Collective (sharded strategies all-gather inside; under fp16 the
 * loss scaler agrees on skipping over all ranks). Under mixed_precision fp16
 * the gradients are first unscaled and checked (runtime/scaler.c): a
 * non-finite one anywhere skips the update everywhere (see
 * acx_optimizer_step_was_skipped). Without fp16 the same check stops the
 * run instead: a non-finite reduced gradient, or a non-finite loss given to
 * acx_record_loss, on any rank makes every rank return ACX_ERR_STATE with
 * the update not applied, the message naming the step and the first rank
 * (docs/mixed-precision.md says why: nothing cures a NaN outside fp16).
 * Errors: ACX_ERR_STATE (not prepared; no reduced gradients to apply — not
 * after acx_backward_end on a boundary, or a second step for the same
 * gradients; a non-finite loss or gradient without fp16; or fp16 loss
 * scaling gave up: the scale fell below loss_scale.min or
 * loss_scale.max_consecutive_skips steps in a row were skipped — the
 * message says whether the loss itself was non-finite), ACX_ERR_MPI. */
ACX_API acx_status_t acx_optimizer_step(acx_optimizer_t *opt);

/* 1 when the last acx_optimizer_step skipped the update because the fp16
 * loss scaler found inf/NaN gradients on some rank (every rank skips
 * together; weights, moments and the step count are unchanged, and
 * acx_scheduler_step does not advance after it); else 0. */
ACX_API int acx_optimizer_step_was_skipped(const acx_optimizer_t *opt);

/* Zero every gradient the program adds into. Not collective. */
ACX_API acx_status_t acx_optimizer_zero_grad(acx_optimizer_t *opt);

/* Current learning rate (the schedule's, once one is attached), and set it.
 * This is the base lr: a parameter group updates with it times its
 * lr_scale (acx_optimizer_add_param_group). */
ACX_API double acx_optimizer_lr(const acx_optimizer_t *opt);
ACX_API acx_status_t acx_optimizer_set_lr(acx_optimizer_t *opt, double lr);
/* Optimizer steps taken so far. */
ACX_API int64_t acx_optimizer_num_steps(const acx_optimizer_t *opt);

/* ---- schedules (transformers.get_*_schedule_with_warmup, in optimizer steps) ---- */

typedef enum acx_schedule_kind {
    ACX_SCHED_CONSTANT = 0,             /* factor 1 */
    ACX_SCHED_CONSTANT_WITH_WARMUP = 1, /* s/w for s < w, then 1 */
    ACX_SCHED_LINEAR = 2,               /* s/w for s < w, then max(0, (T-s)/max(1, T-w)) */
    ACX_SCHED_COSINE =
        3 /* s/w for s < w, then max(0, 0.5(1+cos(pi*2c*p))), p=(s-w)/max(1,T-w), c=num_cycles */
} acx_schedule_kind_t;

/* Attach a schedule to opt: lr(s) = base_lr * factor(s), where s counts
 * acx_scheduler_step calls (0 at creation, as torch's LambdaLR: the first
 * optimizer step uses factor(0)). base_lr is the optimizer's lr at creation.
 * warmup_steps >= 0; total_steps >= warmup_steps for LINEAR/COSINE;
 * num_cycles (COSINE only; 0.5 = half a cosine, the transformers default).
 * The scheduler is owned by the optimizer. Errors: ACX_ERR_INVALID_ARG. */
ACX_API acx_status_t acx_scheduler_create(acx_optimizer_t *opt, acx_schedule_kind_t kind,
                                          int64_t warmup_steps, int64_t total_steps,
                                          double num_cycles, acx_scheduler_t **sched_p);

/* Advance one optimizer step and set the optimizer's lr. Not collective. */
ACX_API acx_status_t acx_scheduler_step(acx_scheduler_t *sched);

/* factor(s) of the schedule, for any s >= 0 (pure; used by tests and tools). */
ACX_API double acx_scheduler_factor(const acx_scheduler_t *sched, int64_t s);

#ifdef __cplusplus
}
#endif
#endif /* ACX_OPTIM_H */

/*
 * runtime/optim_state.h — what a checkpoint needs to see of an optimizer and
 * its schedule (library-private to runtime/; used by runtime/checkpoint.c).
 *
 * The objects stay private to runtime/optimizer.c and runtime/scheduler.c;
 * these accessors expose exactly the state a resumed run must get back:
 * the state arrays (each laid out like model->master: shard_numel floats,
 * parameter p's owned rows at p->shard_offset), the step count, the
 * hyperparameters as named numbers, and the schedule's position.
 */
#ifndef ACX_RUNTIME_OPTIM_STATE_H
#define ACX_RUNTIME_OPTIM_STATE_H

#include <stdint.h>

#include "acx/optim.h"
#include "base/optim_kernels.h" /* ACX_OPTIM_LR_MAX */

#define ACX_OPTIM_MAX_HPARAMS 8

/* ---- optimizer (runtime/optimizer.c) ---- */

/* "SGD", "Adam" or "AdamW". */
const char *acx_optimizer_kind_name(const acx_optimizer_t *opt);

/* State arrays after acx_prepare: 0 (SGD without momentum), 1 (SGD:
 * "momentum_buffer") or 2 (Adam/AdamW: "exp_avg", "exp_avg_sq", torch's
 * names). acx_optimizer_state returns array i ([model shard_numel] floats). */
int acx_optimizer_num_state(const acx_optimizer_t *opt);
const char *acx_optimizer_state_name(const acx_optimizer_t *opt, int i);
float *acx_optimizer_state(acx_optimizer_t *opt, int i);

/* The hyperparameters fixed at creation, as (name, value) pairs (torch's
 * names: "initial_lr", "momentum", "dampening", "weight_decay", "nesterov";
 * "beta1", "beta2", "eps", "weight_decay"). Writes at most max pairs and
 * returns how many the optimizer has. */
int acx_optimizer_hparams(const acx_optimizer_t *opt, const char **names, double *values, int max);

/* Set the number of steps taken (the next Adam step uses t = n + 1; SGD's
 * step 1 initializes its momentum buffer). Also the model's step count. */
void acx_optimizer_set_num_steps(acx_optimizer_t *opt, int64_t n);

/* Parameter groups (acx_optimizer_add_param_group), in the order added:
 * group k's name, weight_decay, lr_scale and member parameter names
 * (pointers into the optimizer and the model, valid while they live).
 * acx_optimizer_param_group: the group of the model's parameter with
 * registration index i, -1 for the default group. */
int acx_optimizer_num_groups(const acx_optimizer_t *opt);
void acx_optimizer_group(const acx_optimizer_t *opt, int k, const char **name, double *weight_decay,
                         double *lr_scale, int *num_params, const char *const **param_names);
int acx_optimizer_param_group(const acx_optimizer_t *opt, int i);

/* The attached schedule, or NULL. */
acx_scheduler_t *acx_optimizer_scheduler(const acx_optimizer_t *opt);

/* ---- schedule (runtime/scheduler.c) ---- */

typedef struct acx_scheduler_state {
    acx_schedule_kind_t kind;
    int64_t warmup_steps, total_steps;
    double num_cycles;
    double base_lr; /* the optimizer's lr when the schedule was created */
    int64_t step;   /* acx_scheduler_step calls so far */
} acx_scheduler_state_t;

void acx_scheduler_get_state(const acx_scheduler_t *sched, acx_scheduler_state_t *state);

/* Restore the position (base_lr and step; the shape of the schedule stays
 * the program's). Does not touch the optimizer's lr: the caller restores it. */
void acx_scheduler_set_position(acx_scheduler_t *sched, double base_lr, int64_t step);

/* Name of a schedule kind ("constant", "constant_with_warmup", "linear",
 * "cosine"), or "none" for an invalid one. */
const char *acx_schedule_kind_name(int kind);

#endif /* ACX_RUNTIME_OPTIM_STATE_H */

/*
 * base/optim_kernels.h — the arithmetic of the optimizers and learning-rate
 * schedules (library-private: runtime/, the emulated device in device/ops_emulated.c
 * and io/ckpt_state.c's range checks use it; tests call it directly).
 *
 * The kernels are pure functions over flat fp32 arrays of n elements (the
 * rank's local shard: p = master weights, g = reduced gradients, the state
 * arrays of the same length). They reproduce torch.optim's single-tensor CPU
 * implementations for float32 tensors (torch >= 2.0, whose Adam updates
 * exp_avg with lerp_) operation by operation: scalars are computed in double
 * (as Python floats) and rounded to float once, every tensor operation is
 * one float operation in torch's order, and a multiply-add is fused where
 * torch's vectorized kernels fuse it, if the target has FMA. Against torch's
 * tensor ops with the matching CPU capability the results are bitwise equal
 * (see optim_kernels.c); otherwise they agree to float rounding.
 *
 * Subnormals: the acx_kernel_sgd/acx_kernel_adam entry points set FTZ and DAZ
 * in MXCSR (x86 with SSE2) for the duration of the loop and restore the
 * caller's control bits afterwards, so a moment that decays below FLT_MIN
 * (the first moment of a weight whose gradient is always zero reaches that
 * after ~800 AdamW steps) becomes 0 instead of a subnormal that makes the
 * step ~2x slower. The program's own code never runs with an altered MXCSR.
 * The *_ieee variants do the same update under the caller's environment.
 *
 * Objects (optimizer, scheduler) live in runtime/optimizer.c and
 * runtime/scheduler.c; the two hooks they share are declared at the end.
 */
#ifndef ACX_BASE_OPTIM_KERNELS_H
#define ACX_BASE_OPTIM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* The largest learning rate acx accepts anywhere: at creation, in
 * acx_optimizer_set_lr and from a checkpoint (lr and the schedule's base_lr:
 * io/ckpt_state.c). torch accepts any lr >= 0; acx bounds it so that a corrupted or
 * mistyped value (1e300 from an edited file) is refused with its name
 * instead of training on NaN: updates of that size overflow float32
 * weights at once, and the largest rates in use (SGD/LARS at large batch)
 * are in the tens. The same bound everywhere means every checkpoint acx
 * writes loads again. */
#define ACX_OPTIM_LR_MAX 1e3

/* The largest lr_scale of a parameter group (acx_optimizer_add_param_group,
 * and from a checkpoint): a group's lr is the optimizer's times its scale,
 * and scales in use are fractions or small multiples (layer-wise decay,
 * 10x for a new head); 1e3 keeps an edited value from the same overflow. */
#define ACX_OPTIM_LR_SCALE_MAX 1e3

#include "acx/optim.h"

/* ---- floating-point environment ---- */

/* Enter flush-to-zero/denormals-are-zero mode; returns the MXCSR to hand to
 * acx_fp_flush_end. No-op (returns 0) where MXCSR does not exist. */
unsigned acx_fp_flush_begin(void);

/* Restore the control bits (rounding, masks, FTZ, DAZ) saved by
 * acx_fp_flush_begin; exception flags raised in between stay raised, as if
 * the caller had done the arithmetic. */
void acx_fp_flush_end(unsigned saved);

/* ---- optimizer kernels ---- */

/* torch.optim.SGD on p[n] with gradients g[n] (formulas in acx/optim.h).
 * buf[n] is the momentum buffer (unused, may be NULL, when momentum == 0);
 * first_step != 0 initializes it to the (weight-decayed) gradient, as torch
 * does when momentum_buffer is None. lr overrides hp->lr (the schedule's). */
void acx_kernel_sgd(float *p, const float *g, float *buf, size_t n, const acx_sgd_hparams_t *hp,
                    double lr, int first_step);

/* torch.optim.Adam (decoupled == 0: weight_decay is L2, added to the
 * gradient) or torch.optim.AdamW (decoupled != 0: p *= 1 - lr*wd first) on
 * p[n], with m[n] = exp_avg and v[n] = exp_avg_sq updated in place. t is the
 * step number counted from 1 (bias corrections 1 - beta^t); lr overrides
 * hp->lr. With eps == 0 an element whose gradients were all zero gets 0/0 =
 * NaN, as in torch. */
void acx_kernel_adam(float *p, const float *g, float *m, float *v, size_t n,
                     const acx_adam_hparams_t *hp, double lr, int64_t t, int decoupled);

/* The same updates without touching MXCSR (gradual underflow unless the
 * caller set FTZ/DAZ itself): reference and benchmark use. */
void acx_kernel_sgd_ieee(float *p, const float *g, float *buf, size_t n,
                         const acx_sgd_hparams_t *hp, double lr, int first_step);
void acx_kernel_adam_ieee(float *p, const float *g, float *m, float *v, size_t n,
                          const acx_adam_hparams_t *hp, double lr, int64_t t, int decoupled);

/* Whether any of x[0..n) or x[i] * factor is not finite (inf or NaN): the
 * gradient check before an update (runtime/scaler.c; factor 1 without
 * loss scaling, 1/scale with it). Tests the exponent bits, which compilers
 * vectorize, in blocks, stopping at the first block that has one; the same
 * answer as isfinite() per element, at memory speed. */
int acx_kernel_any_nonfinite(const float *x, size_t n, float factor);

/* ---- learning-rate schedules ---- */

/* factor(s) of transformers.get_<kind>_schedule_with_warmup after s
 * scheduler steps (formulas in acx/optim.h; arguments are not validated
 * here: acx_scheduler_create does that). COSINE is not clamped past T:
 * like transformers, the cosine rises again there when num_cycles = 0.5. */
double acx_schedule_factor(acx_schedule_kind_t kind, int64_t warmup_steps, int64_t total_steps,
                           double num_cycles, int64_t s);

/* ---- shared by runtime/optimizer.c and runtime/scheduler.c ---- */

/* Give opt ownership of sched (freed by acx_optimizer_free).
 * ACX_ERR_STATE if opt already has a schedule. */
acx_status_t acx_optimizer_attach_scheduler(acx_optimizer_t *opt, acx_scheduler_t *sched);
void acx_scheduler_free(acx_scheduler_t *sched);

#endif /* ACX_BASE_OPTIM_KERNELS_H */

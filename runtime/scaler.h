/*
 * runtime/scaler.h — dynamic loss scaling for fp16 (library-private to
 * runtime/), torch.amp.GradScaler's semantics.
 */
#ifndef ACX_RUNTIME_SCALER_H
#define ACX_RUNTIME_SCALER_H

#include <stdint.h>

#include "acx/acx.h"

typedef struct acx_scaler {
    int enabled;               /* mixed_precision fp16 */
    double scale;              /* the loss is multiplied by this */
    int growth_interval;       /* clean steps before x2 */
    int growth_tracker;        /* clean steps since the last change */
    double min_scale;          /* stop below this */
    int max_consecutive_skips; /* stop after this many skips in a row */
    int consecutive_skips;
    /* this step */
    int unscaled;       /* gradients already multiplied by 1/scale */
    int found_inf;      /* agreed over every rank when unscaled */
    int loss_nonfinite; /* a loss recorded since the last step was inf/NaN (this rank) */
    double last_loss;   /* the last recorded loss (this rank) */
    int64_t last_loss_step;
    int step_skipped; /* the last optimizer step was skipped */
    int64_t skipped_total;
} acx_scaler_t;

/* Set up from the resolved config (scale 1 and disabled unless fp16). */
void acx_scaler_init(acx_scaler_t *s, const acx_config_t *c);

/* Under fp16, once per step: check the reduced gradients for inf/NaN (all
 * ranks agree through one all-reduce on a flag) and multiply them by
 * 1/scale. Nothing to do when disabled or already done this step.
 * Collective. Errors: ACX_ERR_MPI. */
acx_status_t acx_scaler_unscale(acx_accelerator_t *acc);

/* Called by acx_optimizer_step before the update: unscale if needed, then
 * decide. *skip_p = 1: skip the update (gradients were not finite); the
 * scale is then halved. Otherwise the growth tracker advances and the scale
 * doubles after growth_interval clean steps. Errors: ACX_ERR_STATE when the
 * run must stop (the scale fell below loss_scale.min, or
 * loss_scale.max_consecutive_skips steps in a row were skipped), with the
 * diagnostic; ACX_ERR_MPI. Collective. */
acx_status_t acx_scaler_step(acx_accelerator_t *acc, int *skip_p);

#endif /* ACX_RUNTIME_SCALER_H */

/*
 * runtime/optimizer.c — the optimizer object: SGD, Adam and AdamW over a
 * model's local shard, with their hyperparameters, learning rate, step count
 * and state arrays.
 *
 * The arithmetic is base/optim_kernels.c's; where the shard lives and how
 * updated master weights reach the program (all-gather under ZeRO) is the
 * strategy's (sharding/, through acx_model_after_step); the schedule is
 * runtime/scheduler.c's, owned by the optimizer and freed with it. The
 * optimizer itself belongs to the model's accelerator, which frees it at
 * acx_finalize.
 *
 * State, sharded exactly like the master weights (each array holds the
 * model's shard_numel elements, element i belonging to master[i]):
 *   SGD with momentum   state[0] = momentum_buffer
 *   Adam, AdamW         state[0] = exp_avg, state[1] = exp_avg_sq
 * (torch's state names, which the checkpoint uses as group names).
 * With device-resident state (model->shard_dev) the state arrays are device
 * memory of that table and the update is its adam/sgd kernel: one launch
 * over the whole local shard (under NO_SHARD the flat model), enqueued on
 * the program's compute stream. With the optimizer offloaded to the CPU
 * (model->ctx.offload: shard_dev is NULL, the local shard is host memory)
 * the state arrays are host memory from the device table's host_alloc
 * (pinned with CUDA) and the update is the host kernel, as with host state.
 *
 * Parameter groups (acx_optimizer_add_param_group, torch's param_groups):
 * a group overrides weight_decay and scales the lr of its parameters. At
 * bind the groups become a sorted list of ranges of the local shard, each
 * a run of parameters of one group (neighbours of the same group merged),
 * and the step runs the same kernel once per range with that range's
 * hyperparameters. Without groups the list is one range over the whole
 * shard, so the step is the single fused call it always was. A range never
 * starts inside a parameter: between two ranges there is only the padding
 * of the sharded strategies (zero weights, gradients and state), which is
 * either inside a merged range — as in the single call, where 0 stays 0 —
 * or not updated at all.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/accelerator.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "base/optim_kernels.h"
#include "runtime/optim_state.h"
#include "sharding/model.h"

#define ACX_OPTIM_MAX_STATE 2

typedef enum acx_optimizer_kind {
    ACX_OPTIM_SGD = 0,
    ACX_OPTIM_ADAM = 1,
    ACX_OPTIM_ADAMW = 2
} acx_optimizer_kind_t;

static const char *const kind_names[] = {"SGD", "Adam", "AdamW"};

/* A parameter group as the program gave it. */
typedef struct param_group {
    char name[ACX_MAX_NAME];
    double weight_decay, lr_scale;
    int num_params;
    acx_param_t **params;
    const char **names; /* params[i]->name, for the checkpoint (optim_state.h) */
} param_group_t;

/* A run of the local shard updated with one group's hyperparameters
 * (group -1: the default group, the create-time ones). */
typedef struct shard_range {
    size_t offset, len;
    int group;
} shard_range_t;

struct acx_optimizer {
    acx_optimizer_kind_t kind;
    acx_sgd_hparams_t sgd;   /* kind == ACX_OPTIM_SGD */
    acx_adam_hparams_t adam; /* kind == ACX_OPTIM_ADAM or ACX_OPTIM_ADAMW */
    double lr;               /* current learning rate (the schedule's once attached) */
    int64_t num_steps;       /* steps taken; the next Adam step uses t = num_steps + 1 */
    acx_model_t *model;
    acx_scheduler_t *sched; /* owned; NULL without a schedule */

    /* valid after acx_optimizer_bind: num_state arrays of model->shard_numel
     * floats, 64-byte aligned */
    int bound;
    int num_state;
    float *state[ACX_OPTIM_MAX_STATE];
    size_t state_bytes; /* of each state array */
    int step_skipped;   /* the last acx_optimizer_step skipped the update (fp16 overflow) */

    /* parameter groups, in the order added */
    int num_groups;
    param_group_t *groups;
    /* valid after bind: group_of[param index] (-1: default), and the ranges
     * of the local shard the step updates, by offset (one range over the
     * whole shard without groups) */
    int *group_of;
    int num_ranges;
    shard_range_t *ranges;
};

/* ---- creation ---- */

/* Hyperparameter checks, after torch.optim's (same conditions; the messages
 * name the function, the field and the value). NaN fails every check. */
static acx_status_t check_nonneg(const char *fn, const char *field, double x) {
    if (!(x >= 0.0) || isinf(x))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: invalid %s %g: expected a finite value >= 0", fn,
                         field, x);
    return ACX_OK;
}

/* A learning rate: finite, 0 <= lr <= ACX_OPTIM_LR_MAX (optim_state.h). */
static acx_status_t check_lr(const char *fn, double lr) {
    if (!(lr >= 0.0 && lr <= ACX_OPTIM_LR_MAX))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: invalid lr %g: expected a finite value in [0, %g]", fn, lr,
                         ACX_OPTIM_LR_MAX);
    return ACX_OK;
}

static acx_status_t check_beta(const char *fn, const char *field, double x) {
    if (!(x >= 0.0 && x < 1.0))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: invalid %s %g: expected 0 <= %s < 1", fn, field,
                         x, field);
    return ACX_OK;
}

static acx_status_t check_sgd(const acx_sgd_hparams_t *hp) {
    const char *fn = "acx_sgd_create";
    ACX_CHECK(check_lr(fn, hp->lr));
    ACX_CHECK(check_nonneg(fn, "momentum", hp->momentum));
    ACX_CHECK(check_nonneg(fn, "weight_decay", hp->weight_decay));
    if (!isfinite(hp->dampening))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: invalid dampening %g: expected a finite value",
                         fn, hp->dampening);
    if (hp->nesterov && (hp->momentum <= 0.0 || hp->dampening != 0.0))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: nesterov requires momentum > 0 and dampening == 0 (got momentum %g, "
                         "dampening %g)",
                         fn, hp->momentum, hp->dampening);
    return ACX_OK;
}

static acx_status_t check_adam(const char *fn, const acx_adam_hparams_t *hp) {
    ACX_CHECK(check_lr(fn, hp->lr));
    /* torch accepts eps == 0; an element whose gradients were all zero then
     * becomes 0/0 = NaN, as in torch. */
    ACX_CHECK(check_nonneg(fn, "eps", hp->eps));
    ACX_CHECK(check_beta(fn, "beta1", hp->beta1));
    ACX_CHECK(check_beta(fn, "beta2", hp->beta2));
    ACX_CHECK(check_nonneg(fn, "weight_decay", hp->weight_decay));
    return ACX_OK;
}

/* Common tail of the create functions: checks the model, allocates the
 * object and hands it to the model's accelerator. */
static acx_status_t optimizer_new(const char *fn, acx_model_t *model, acx_optimizer_kind_t kind,
                                  double lr, acx_optimizer_t **opt_p) {
    if (model->prepared)
        return ACX_ERROR(
            ACX_ERR_STATE,
            "%s: the model is already prepared (create the optimizer before acx_prepare)", fn);
    acx_optimizer_t *opt = acx_calloc(1, sizeof *opt, "optimizer");
    if (opt == NULL) return ACX_ERR_NO_MEMORY;
    opt->kind = kind;
    opt->lr = lr;
    opt->model = model;
    /* A model made by acx_model_create knows its accelerator, which frees the
     * optimizer at acx_finalize. One built directly with acx_model_new (unit
     * tests) has no owner: its creator calls acx_optimizer_free. */
    acx_accelerator_t *acc = model->ctx.owner;
    if (acc != NULL) {
        acx_status_t status = acx_accelerator_adopt_optimizer(acc, opt);
        if (status != ACX_OK) {
            free(opt);
            return status;
        }
    }
    *opt_p = opt;
    return ACX_OK;
}

ACX_API acx_status_t acx_sgd_create(acx_model_t *model, const acx_sgd_hparams_t *hp,
                                    acx_optimizer_t **opt_p) {
    if (model == NULL || hp == NULL || opt_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_sgd_create: model, hp and opt_p must not be NULL");
    ACX_CHECK(check_sgd(hp));
    acx_optimizer_t *opt = NULL;
    ACX_CHECK(optimizer_new("acx_sgd_create", model, ACX_OPTIM_SGD, hp->lr, &opt));
    opt->sgd = *hp;
    *opt_p = opt;
    return ACX_OK;
}

static acx_status_t adam_create(const char *fn, acx_optimizer_kind_t kind, acx_model_t *model,
                                const acx_adam_hparams_t *hp, acx_optimizer_t **opt_p) {
    if (model == NULL || hp == NULL || opt_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: model, hp and opt_p must not be NULL", fn);
    ACX_CHECK(check_adam(fn, hp));
    acx_optimizer_t *opt = NULL;
    ACX_CHECK(optimizer_new(fn, model, kind, hp->lr, &opt));
    opt->adam = *hp;
    *opt_p = opt;
    return ACX_OK;
}

ACX_API acx_status_t acx_adam_create(acx_model_t *model, const acx_adam_hparams_t *hp,
                                     acx_optimizer_t **opt_p) {
    return adam_create("acx_adam_create", ACX_OPTIM_ADAM, model, hp, opt_p);
}

ACX_API acx_status_t acx_adamw_create(acx_model_t *model, const acx_adam_hparams_t *hp,
                                      acx_optimizer_t **opt_p) {
    return adam_create("acx_adamw_create", ACX_OPTIM_ADAMW, model, hp, opt_p);
}

/* ---- parameter groups ---- */

static void group_free(param_group_t *g) {
    free(g->params);
    free(g->names);
}

/* The group (index) that already holds p, or -1. */
static int group_holding(const acx_optimizer_t *opt, const acx_param_t *p) {
    for (int k = 0; k < opt->num_groups; k++)
        for (int i = 0; i < opt->groups[k].num_params; i++)
            if (opt->groups[k].params[i] == p) return k;
    return -1;
}

ACX_API acx_status_t acx_optimizer_add_param_group(acx_optimizer_t *opt, const char *name,
                                                   double weight_decay, double lr_scale,
                                                   int num_params, acx_param_t *const *params) {
    const char *fn = "acx_optimizer_add_param_group";
    if (opt == NULL || name == NULL || (num_params > 0 && params == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: opt, name and params must not be NULL", fn);
    if (name[0] == '\0' || strlen(name) >= ACX_MAX_NAME)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: group name '%.40s' is empty or %zu bytes: expected 1..%d bytes", fn,
                         name, strlen(name), ACX_MAX_NAME - 1);
    acx_model_t *m = opt->model;
    if (m->prepared || opt->bound)
        return ACX_ERROR(ACX_ERR_STATE,
                         "%s: parameter group '%s': the model is already prepared (add groups "
                         "before acx_prepare)",
                         fn, name);
    for (int k = 0; k < opt->num_groups; k++)
        if (strcmp(opt->groups[k].name, name) == 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "%s: parameter group '%s' already exists (group names are unique)", fn,
                             name);
    if (!(weight_decay >= 0.0) || isinf(weight_decay))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: parameter group '%s': invalid weight_decay %g: expected a finite "
                         "value >= 0",
                         fn, name, weight_decay);
    if (!(lr_scale > 0.0 && lr_scale <= ACX_OPTIM_LR_SCALE_MAX))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: parameter group '%s': invalid lr_scale %g: expected a finite value "
                         "in (0, %g]",
                         fn, name, lr_scale, ACX_OPTIM_LR_SCALE_MAX);
    if (num_params < 1)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s: parameter group '%s': num_params %d: expected at least one "
                         "parameter",
                         fn, name, num_params);
    for (int i = 0; i < num_params; i++) {
        const acx_param_t *p = params[i];
        if (p == NULL)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: parameter group '%s': params[%d] is NULL",
                             fn, name, i);
        /* a parameter of another model (or not a parameter at all): its
         * registration index does not lead back to it in this model */
        if (p->index < 0 || p->index >= m->num_params || m->params[p->index] != p)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "%s: parameter group '%s': params[%d] ('%.*s') is not a parameter "
                             "of the optimizer's model",
                             fn, name, i, ACX_MAX_NAME - 1, p->name);
        int k = group_holding(opt, p);
        if (k >= 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "%s: parameter group '%s': parameter '%s' is already in group '%s' "
                             "(a parameter belongs to at most one group)",
                             fn, name, p->name, opt->groups[k].name);
        for (int j = 0; j < i; j++)
            if (params[j] == p)
                return ACX_ERROR(ACX_ERR_INVALID_ARG,
                                 "%s: parameter group '%s': parameter '%s' is listed twice "
                                 "(params[%d] and params[%d])",
                                 fn, name, p->name, j, i);
    }
    param_group_t g = {
        .weight_decay = weight_decay, .lr_scale = lr_scale, .num_params = num_params};
    snprintf(g.name, sizeof g.name, "%s", name);
    g.params = acx_calloc((size_t)num_params, sizeof *g.params, "parameter group");
    g.names = acx_calloc((size_t)num_params, sizeof *g.names, "parameter group");
    param_group_t *grown =
        realloc(opt->groups, (size_t)(opt->num_groups + 1) * sizeof *opt->groups);
    if (g.params == NULL || g.names == NULL || grown == NULL) {
        group_free(&g);
        if (grown != NULL) opt->groups = grown;
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "%s: out of memory adding parameter group '%s'", fn,
                         name);
    }
    for (int i = 0; i < num_params; i++) {
        g.params[i] = params[i];
        g.names[i] = params[i]->name;
    }
    opt->groups = grown;
    opt->groups[opt->num_groups++] = g;
    return ACX_OK;
}

static int range_cmp(const void *a, const void *b) {
    const shard_range_t *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* group_of and the ranges of the local shard (file comment). Without
 * groups: one range [0, shard_numel). With them: each parameter's owned
 * elements, by offset, neighbours of one group merged (also across the
 * padding between them: the single call updates that padding as well). */
static acx_status_t build_ranges(acx_optimizer_t *opt) {
    const acx_model_t *m = opt->model;
    int np = m->num_params;
    opt->group_of = acx_calloc(np > 0 ? (size_t)np : 1, sizeof *opt->group_of, "parameter groups");
    opt->ranges =
        acx_calloc(np > 0 ? (size_t)np : 1, sizeof *opt->ranges, "optimizer shard ranges");
    if (opt->group_of == NULL || opt->ranges == NULL) return ACX_ERR_NO_MEMORY;
    for (int i = 0; i < np; i++)
        opt->group_of[i] = -1;
    for (int k = 0; k < opt->num_groups; k++)
        for (int i = 0; i < opt->groups[k].num_params; i++)
            opt->group_of[opt->groups[k].params[i]->index] = k;
    if (opt->num_groups == 0) {
        opt->ranges[0] = (shard_range_t){.offset = 0, .len = m->shard_numel, .group = -1};
        opt->num_ranges = 1;
        return ACX_OK;
    }
    int n = 0;
    for (int i = 0; i < np; i++) {
        const acx_param_t *p = m->params[i];
        size_t len = (size_t)(p->row_end - p->row_begin) * (size_t)p->row_numel;
        if (len == 0) continue; /* no rows of it on this rank */
        opt->ranges[n++] =
            (shard_range_t){.offset = p->shard_offset, .len = len, .group = opt->group_of[i]};
    }
    qsort(opt->ranges, (size_t)n, sizeof *opt->ranges, range_cmp);
    int merged = 0;
    for (int r = 0; r < n; r++) {
        shard_range_t *last = merged > 0 ? &opt->ranges[merged - 1] : NULL;
        if (last != NULL && last->group == opt->ranges[r].group)
            last->len = opt->ranges[r].offset + opt->ranges[r].len - last->offset;
        else
            opt->ranges[merged++] = opt->ranges[r];
    }
    opt->num_ranges = merged;
    return ACX_OK;
}

/* ---- accelerator hooks (runtime/accelerator.h) ---- */

/* Free state array i (bytes each), in host or device memory. */
static void state_free(acx_optimizer_t *opt, int i, size_t bytes) {
    const acx_model_t *m = opt->model;
    if (m->shard_dev != NULL)
        acx_devops_free(m->shard_dev, ACX_MEM_OPTIMIZER, opt->state[i], bytes);
    else if (m->ctx.offload)
        acx_devops_host_free(m->ctx.dev, ACX_MEM_OPTIMIZER, opt->state[i], bytes);
    else
        acx_mem_free(ACX_MEM_OPTIMIZER, opt->state[i], bytes);
}

acx_status_t acx_optimizer_bind(acx_optimizer_t *opt) {
    acx_model_t *m = opt->model;
    if (!m->prepared)
        return ACX_ERROR(ACX_ERR_INTERNAL, "acx_optimizer_bind: the model is not prepared");
    if (opt->bound)
        return ACX_ERROR(ACX_ERR_STATE, "the %s optimizer is already bound to a prepared model",
                         kind_names[opt->kind]);
    int num_state = opt->kind == ACX_OPTIM_SGD ? (opt->sgd.momentum != 0.0 ? 1 : 0) : 2;
    /* Zeroed: Adam's moments start at 0; SGD's buffer is overwritten on the
     * first step but starts defined for checkpoints written before it. */
    size_t bytes = m->shard_numel * sizeof(float);
    for (int i = 0; i < num_state; i++) {
        acx_status_t status = ACX_OK;
        if (m->shard_dev != NULL)
            status = acx_devops_alloc(m->shard_dev, ACX_MEM_OPTIMIZER, bytes, "optimizer state",
                                      (void **)&opt->state[i]);
        else if (m->ctx.offload)
            status = acx_devops_host_alloc(m->ctx.dev, ACX_MEM_OPTIMIZER, bytes,
                                           "offloaded optimizer state", (void **)&opt->state[i]);
        else if ((opt->state[i] = acx_mem_alloc(ACX_MEM_OPTIMIZER, bytes, "optimizer state")) ==
                 NULL)
            status = ACX_ERR_NO_MEMORY;
        if (status != ACX_OK) {
            for (int j = 0; j < i; j++) {
                state_free(opt, j, bytes);
                opt->state[j] = NULL;
            }
            return status;
        }
    }
    opt->num_state = num_state;
    opt->state_bytes = bytes;
    acx_status_t status = build_ranges(opt);
    if (status != ACX_OK) {
        for (int i = 0; i < num_state; i++) {
            state_free(opt, i, bytes);
            opt->state[i] = NULL;
        }
        opt->num_state = 0;
        return status;
    }
    opt->bound = 1;
    ACX_DEBUG(ACX_SUBSYS_OPTIM,
              "%s bound: %zu shard elements, %d state arrays (%zu bytes), %d parameter "
              "group(s) in %d range(s)",
              kind_names[opt->kind], m->shard_numel, num_state, (size_t)num_state * bytes,
              opt->num_groups, opt->num_ranges);
    return ACX_OK;
}

acx_model_t *acx_optimizer_model(acx_optimizer_t *opt) { return opt->model; }

void acx_optimizer_free(acx_optimizer_t *opt) {
    if (opt == NULL) return;
    acx_scheduler_free(opt->sched);
    for (int i = 0; i < opt->num_state; i++)
        state_free(opt, i, opt->state_bytes);
    for (int k = 0; k < opt->num_groups; k++)
        group_free(&opt->groups[k]);
    free(opt->groups);
    free(opt->group_of);
    free(opt->ranges);
    free(opt);
}

/* ---- scheduler hook (base/optim_kernels.h) ---- */

acx_status_t acx_optimizer_attach_scheduler(acx_optimizer_t *opt, acx_scheduler_t *sched) {
    if (opt->sched != NULL)
        return ACX_ERROR(ACX_ERR_STATE,
                         "acx_scheduler_create: the %s optimizer already has a schedule",
                         kind_names[opt->kind]);
    opt->sched = sched;
    return ACX_OK;
}

/* ---- training ---- */

/* a + o, keeping NULL (an empty shard's arrays may be NULL; NULL + 0 is
 * undefined in C). */
static float *at(float *a, size_t o) { return a != NULL ? a + o : NULL; }

/* The update of one range with its group's hyperparameters: the device
 * table's kernel (enqueued on the compute stream) with device state, the
 * host kernel otherwise. */

static acx_status_t update_range(acx_optimizer_t *opt, const shard_range_t *rg) {
    acx_model_t *m = opt->model;
    const param_group_t *g = rg->group >= 0 ? &opt->groups[rg->group] : NULL;
    double lr = g != NULL ? opt->lr * g->lr_scale : opt->lr;
    size_t o = rg->offset, n = rg->len;
    float *p = at(m->master, o), *s0 = at(opt->state[0], o);
    const float *grad = at(m->shard_grad, o);
    if (opt->kind == ACX_OPTIM_SGD) {
        acx_sgd_hparams_t hp = opt->sgd;
        if (g != NULL) hp.weight_decay = g->weight_decay;
        int first = opt->num_steps == 1;
        if (m->shard_dev != NULL)
            return m->shard_dev->sgd(p, grad, s0, n, &hp, lr, first, m->ctx.stream);
        acx_kernel_sgd(p, grad, s0, n, &hp, lr, first);
        return ACX_OK;
    }
    acx_adam_hparams_t hp = opt->adam;
    if (g != NULL) hp.weight_decay = g->weight_decay;
    int decoupled = opt->kind == ACX_OPTIM_ADAMW;
    float *s1 = at(opt->state[1], o);
    if (m->shard_dev != NULL)
        return m->shard_dev->adam(p, grad, s0, s1, n, &hp, lr, opt->num_steps, decoupled,
                                  m->ctx.stream);
    acx_kernel_adam(p, grad, s0, s1, n, &hp, lr, opt->num_steps, decoupled);
    return ACX_OK;
}

ACX_API acx_status_t acx_optimizer_step(acx_optimizer_t *opt) {
    if (opt == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_optimizer_step: opt is NULL");
    acx_model_t *m = opt->model;
    if (!opt->bound || !m->prepared)
        return ACX_ERROR(
            ACX_ERR_STATE,
            "acx_optimizer_step before acx_prepare (the %s optimizer has no state yet)",
            kind_names[opt->kind]);
    acx_accelerator_t *acc = m->ctx.owner;
    /* An update needs a boundary's reduced gradients, and each reduction
     * feeds one update. Elsewhere the gradient buffers hold this rank's own
     * partial sums (NO_SHARD replicas would step apart) or reductions still
     * in flight (before acx_backward_end); a second step would apply the
     * same gradients again (under fp16, unscaled twice). Every rank reached
     * the same state, so every rank refuses alike. */
    if (!acc->grads_reduced)
        return ACX_ERROR(ACX_ERR_STATE,
                         "acx_optimizer_step: no reduced gradients to apply: call it once per "
                         "synchronization boundary, after acx_backward_end, when "
                         "acx_sync_gradients() is true (on other micro-steps gradients only "
                         "accumulate)");
    /* debug mode: a write into acx_param_data since acx made it (model.c) */
    ACX_CHECK(acx_model_check_writes(m));
    int skip = 0;
    opt->step_skipped = 0;
    acx_status_t status = acx_scaler_step(acc, &skip);
    acc->grads_reduced = 0; /* used up, whether the update happens or is skipped */
    m->grads_pending = 0;   /* (acx_model_load_weights may replace the weights now) */
    if (status != ACX_OK) { /* loss scaling gave up: this step did not happen either */
        opt->step_skipped = 1;
        return status;
    }
    if (skip) { /* fp16 overflow: weights, moments and step count unchanged */
        opt->step_skipped = 1;
        return ACX_OK;
    }
    /* host code reads shard_grad: with CPU offload, wait for its copies */
    if (m->shard_dev == NULL) ACX_CHECK(acx_model_grads_to_host(m));
    opt->num_steps++;
    /* One fused pass per range of the local shard (one range over all of
     * it without groups): master[o..o+n), shard_grad and state alike. */
    for (int r = 0; r < opt->num_ranges; r++) {
        const shard_range_t *rg = &opt->ranges[r];
        acx_status_t st = update_range(opt, rg);
        if (st != ACX_OK) {
            opt->num_steps--;
            return st;
        }
    }
    m->step = opt->num_steps;
    /* Make the parameters the program sees consistent with the new master
     * weights (NO_SHARD: nothing to do; ZeRO: all-gather, collective). */
    return acx_model_after_step(m);
}

ACX_API int acx_optimizer_step_was_skipped(const acx_optimizer_t *opt) {
    return opt != NULL && opt->step_skipped;
}

ACX_API acx_status_t acx_optimizer_zero_grad(acx_optimizer_t *opt) {
    if (opt == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_optimizer_zero_grad: opt is NULL");
    return acx_model_zero_grad(opt->model);
}

ACX_API double acx_optimizer_lr(const acx_optimizer_t *opt) { return opt != NULL ? opt->lr : 0.0; }

ACX_API acx_status_t acx_optimizer_set_lr(acx_optimizer_t *opt, double lr) {
    if (opt == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_optimizer_set_lr: opt is NULL");
    ACX_CHECK(check_lr("acx_optimizer_set_lr", lr));
    opt->lr = lr;
    return ACX_OK;
}

ACX_API int64_t acx_optimizer_num_steps(const acx_optimizer_t *opt) {
    return opt != NULL ? opt->num_steps : 0;
}

/* ---- checkpoint state (runtime/optim_state.h) ---- */

const char *acx_optimizer_kind_name(const acx_optimizer_t *opt) { return kind_names[opt->kind]; }

int acx_optimizer_num_state(const acx_optimizer_t *opt) { return opt->bound ? opt->num_state : 0; }

const char *acx_optimizer_state_name(const acx_optimizer_t *opt, int i) {
    if (i < 0 || i >= opt->num_state) return NULL;
    if (opt->kind == ACX_OPTIM_SGD) return "momentum_buffer";
    return i == 0 ? "exp_avg" : "exp_avg_sq";
}

float *acx_optimizer_state(acx_optimizer_t *opt, int i) {
    return i >= 0 && i < opt->num_state ? opt->state[i] : NULL;
}

int acx_optimizer_hparams(const acx_optimizer_t *opt, const char **names, double *values, int max) {
    static const char *const sgd_names[] = {"initial_lr", "momentum", "dampening", "weight_decay",
                                            "nesterov"};
    static const char *const adam_names[] = {"initial_lr", "beta1", "beta2", "eps", "weight_decay"};
    const acx_sgd_hparams_t *s = &opt->sgd;
    const acx_adam_hparams_t *a = &opt->adam;
    int sgd = opt->kind == ACX_OPTIM_SGD;
    const double v[5] = {sgd ? s->lr : a->lr, sgd ? s->momentum : a->beta1,
                         sgd ? s->dampening : a->beta2, sgd ? s->weight_decay : a->eps,
                         sgd ? (double)s->nesterov : a->weight_decay};
    for (int i = 0; i < 5 && i < max; i++) {
        names[i] = sgd ? sgd_names[i] : adam_names[i];
        values[i] = v[i];
    }
    return 5;
}

void acx_optimizer_set_num_steps(acx_optimizer_t *opt, int64_t n) {
    opt->num_steps = n;
    opt->model->step = n;
}

acx_scheduler_t *acx_optimizer_scheduler(const acx_optimizer_t *opt) { return opt->sched; }

int acx_optimizer_num_groups(const acx_optimizer_t *opt) { return opt->num_groups; }

void acx_optimizer_group(const acx_optimizer_t *opt, int k, const char **name, double *weight_decay,
                         double *lr_scale, int *num_params, const char *const **param_names) {
    const param_group_t *g = &opt->groups[k];
    *name = g->name;
    *weight_decay = g->weight_decay;
    *lr_scale = g->lr_scale;
    *num_params = g->num_params;
    *param_names = g->names;
}

int acx_optimizer_param_group(const acx_optimizer_t *opt, int i) {
    if (opt->group_of != NULL) return opt->group_of[i]; /* bound: the table */
    for (int k = 0; k < opt->num_groups; k++)
        for (int j = 0; j < opt->groups[k].num_params; j++)
            if (opt->groups[k].params[j]->index == i) return k;
    return -1;
}

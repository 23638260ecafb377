/*
 * sharding/model.c — registering units and parameters, the dim-0 ownership
 * rule, and dispatch to the configured strategy.
 *
 * This file owns the objects' bookkeeping; where storage lives and how units
 * are gathered and gradients reduced is the strategy's business (no_shard.c;
 * sharded.c for SHARD_GRAD_OP, FULL_SHARD and HYBRID_SHARD).
 * Initial values come from base/param_init.c, keyed by parameter name,
 * so they never depend on the strategy or the world size.
 *
 * Shared units (acx_model_add_shared_unit; sharding/model.h's struct
 * acx_unit): the bookkeeping of uses is here — each acquire/release counts
 * on the owner how many of its uses hold the values (uses_held), each
 * grads_ready how many uses have reported (uses_reported, reset at
 * backward_end) — so the strategies only ask "may the storage go" and "is
 * the gradient final".
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/watchdog.h"
#include "base/error.h"
#include "base/log.h"
#include "device/cache.h"
#include "base/mem_cache.h"
#include "base/memstat.h"
#include "base/param_init.h"
#include "sharding/model.h"

/* ---- ownership ---- */

/* The plan answers (sharding/plan.h); these take a parameter's owned rows. */

void acx_param_save_rows(const acx_param_t *p, int64_t *begin_p, int64_t *end_p) {
    acx_plan_write_rows(&p->unit->model->plan, p->row_begin, p->row_end, begin_p, end_p);
}

void acx_param_load_rows(const acx_param_t *p, int64_t *begin_p, int64_t *end_p) {
    acx_plan_read_rows(&p->unit->model->plan, p->row_begin, p->row_end, begin_p, end_p);
}

/* ---- lifecycle ---- */

acx_status_t acx_model_new(const acx_shard_context_t *ctx, acx_model_t **model_p) {
    acx_model_t *m = acx_calloc(1, sizeof *m, "model");
    if (m == NULL) return ACX_ERR_NO_MEMORY;
    m->ctx = *ctx;
    m->grad_prescale = 1.0f;
    *model_p = m;
    return ACX_OK;
}

void acx_model_free(acx_model_t *m) {
    if (m == NULL) return;
    if (m->strategy != NULL && m->strategy->destroy != NULL) m->strategy->destroy(m);
    for (int i = 0; i < m->num_units; i++) {
        free(m->units[i]->params);
        free(m->units[i]);
    }
    for (int i = 0; i < m->num_params; i++)
        free(m->params[i]);
    free(m->units);
    free(m->params);
    free(m);
    /* the model's freed buffers go back to the system (and its device
     * blocks to the device), not to the next model */
    acx_mem_cache_empty();
    acx_devcache_empty();
}

/* Grow *arr (of elements of `size` bytes) to hold n+1 entries. */
static acx_status_t grow(void **arr, int *cap, int n, size_t size, const char *what) {
    if (n < *cap) return ACX_OK;
    int nc = *cap ? 2 * *cap : 8;
    void *p = realloc(*arr, (size_t)nc * size);
    if (p == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "cannot grow the %s list to %d", what, nc);
    *arr = p;
    *cap = nc;
    return ACX_OK;
}

static acx_status_t check_name(const char *name, const char *what) {
    if (name == NULL || name[0] == '\0')
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s name is NULL or empty", what);
    if (strlen(name) >= ACX_MAX_NAME)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s name '%.40s...' is %zu bytes; at most %d allowed",
                         what, name, strlen(name), ACX_MAX_NAME - 1);
    /* Names become HDF5 dataset names in weight files and checkpoints:
     * '/' would make groups and "." / ".." name the group itself. */
    if (strchr(name, '/') != NULL || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "%s name '%s' is not allowed: no '/', and not '.' or '..' (names become "
                         "HDF5 dataset names; use e.g. 'encoder.layer0.weight')",
                         what, name);
    return ACX_OK;
}

/* ---- registration (public) ---- */

/* Append a unit (ordinary when owner is NULL, else a shared unit of owner)
 * after the checks both public calls share. */
static acx_status_t add_unit(acx_model_t *model, const char *name, acx_unit_t *owner,
                             const char *fn, acx_unit_t **unit_p) {
    if (model->prepared)
        return ACX_ERROR(ACX_ERR_STATE, "%s: cannot add unit '%s': the model is already prepared",
                         fn, name ? name : "(null)");
    ACX_CHECK(check_name(name, "unit"));
    for (int i = 0; i < model->num_units; i++)
        if (strcmp(model->units[i]->name, name) == 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: unit '%s' is already registered", fn, name);
    ACX_CHECK(grow((void **)&model->units, &model->cap_units, model->num_units,
                   sizeof *model->units, "unit"));
    acx_unit_t *u = acx_calloc(1, sizeof *u, "unit");
    if (u == NULL) return ACX_ERR_NO_MEMORY;
    strcpy(u->name, name);
    u->model = model;
    u->index = model->num_units;
    u->owner = owner;
    u->num_uses = 1;
    if (owner != NULL) owner->num_uses++;
    model->units[model->num_units++] = u;
    *unit_p = u;
    return ACX_OK;
}

ACX_API acx_status_t acx_model_add_unit(acx_model_t *model, const char *name, acx_unit_t **unit_p) {
    if (model == NULL || unit_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_model_add_unit: model and unit_p must not be NULL");
    return add_unit(model, name, NULL, "acx_model_add_unit", unit_p);
}

ACX_API acx_status_t acx_model_add_shared_unit(acx_model_t *model, const char *name,
                                               acx_unit_t *owner, acx_unit_t **unit_p) {
    if (model == NULL || owner == NULL || unit_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_model_add_shared_unit: model, owner and unit_p must not be NULL");
    if (owner->model != model)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_model_add_shared_unit('%s'): owner unit '%s' belongs to another "
                         "model",
                         name ? name : "(null)", owner->name);
    if (owner->owner != NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_model_add_shared_unit('%s'): unit '%s' is itself a shared unit (of "
                         "'%s'); share its owner '%s' instead",
                         name ? name : "(null)", owner->name, owner->owner->name,
                         owner->owner->name);
    return add_unit(model, name, owner, "acx_model_add_shared_unit", unit_p);
}

ACX_API acx_status_t acx_unit_add_param(acx_unit_t *unit, const char *name, int ndim,
                                        const int64_t *shape, acx_init_spec_t init,
                                        acx_param_t **param_p) {
    if (unit == NULL || param_p == NULL || shape == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_unit_add_param: unit, shape and param_p must not be NULL");
    acx_model_t *m = unit->model;
    if (m->prepared)
        return ACX_ERROR(ACX_ERR_STATE, "cannot add parameter '%s': the model is already prepared",
                         name ? name : "(null)");
    if (unit->owner != NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "cannot add parameter '%s' to unit '%s': it is a shared unit of '%s' and "
                         "has no parameters of its own (add the parameter to '%s')",
                         name ? name : "(null)", unit->name, unit->owner->name, unit->owner->name);
    ACX_CHECK(check_name(name, "parameter"));
    if (ndim < 1 || ndim > ACX_MAX_DIMS)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "parameter '%s': ndim %d is outside 1..%d", name,
                         ndim, ACX_MAX_DIMS);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "parameter '%s': dimension %d is %lld; must be >= 1", name, d,
                             (long long)shape[d]);
        if (numel > INT64_MAX / shape[d])
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "parameter '%s': element count overflows", name);
        numel *= shape[d];
    }
    for (int i = 0; i < m->num_params; i++)
        if (strcmp(m->params[i]->name, name) == 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "parameter '%s' is already registered (unit '%s')", name,
                             m->params[i]->unit->name);
    ACX_CHECK(acx_param_init_check(name, &init, ndim, shape));
    ACX_CHECK(
        grow((void **)&m->params, &m->cap_params, m->num_params, sizeof *m->params, "parameter"));
    ACX_CHECK(grow((void **)&unit->params, &unit->cap_params, unit->num_params,
                   sizeof *unit->params, "unit parameter"));
    acx_param_t *p = acx_calloc(1, sizeof *p, "parameter");
    if (p == NULL) return ACX_ERR_NO_MEMORY;
    strcpy(p->name, name);
    p->ndim = ndim;
    memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
    p->numel = numel;
    p->rows = shape[0];
    p->row_numel = numel / shape[0];
    p->init = init;
    p->index = m->num_params;
    p->unit = unit;
    m->params[m->num_params++] = p;
    unit->params[unit->num_params++] = p;
    m->numel += numel;
    *param_p = p;
    return ACX_OK;
}

/* ---- accessors (public) ---- */

ACX_API const float *acx_param_data(acx_param_t *param) {
    if (param == NULL) {
        ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_param_data: param is NULL");
        return NULL;
    }
    if (!param->unit->model->prepared) {
        ACX_ERROR(ACX_ERR_STATE, "parameter '%s': no data before acx_prepare", param->name);
        return NULL;
    }
    if (param->data == NULL) {
        ACX_ERROR(ACX_ERR_STATE, "parameter '%s': unit '%s'%s is not acquired", param->name,
                  param->unit->name, param->unit->num_uses > 1 ? " (nor a shared unit of it)" : "");
        return NULL;
    }
    return param->data;
}

ACX_API float *acx_param_grad(acx_param_t *param) {
    if (param == NULL) {
        ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_param_grad: param is NULL");
        return NULL;
    }
    const acx_model_t *m = param->unit->model;
    if (!m->prepared) {
        ACX_ERROR(ACX_ERR_STATE, "parameter '%s': no gradient buffer before acx_prepare",
                  param->name);
        return NULL;
    }
    if (param->grad == NULL && m->strategy->materialize_grads != NULL &&
        m->strategy->materialize_grads(param->unit) != ACX_OK)
        return NULL;
    return param->grad;
}

ACX_API acx_status_t acx_param_gather(acx_param_t *param, float *out) {
    if (param == NULL || out == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_param_gather: param and out must not be NULL");
    acx_model_t *m = param->unit->model;
    if (!m->prepared)
        return ACX_ERROR(ACX_ERR_STATE, "acx_param_gather('%s') before acx_prepare", param->name);
    const float *mine = m->master + param->shard_offset;
    if (m->shard_dev != NULL && m->shard_comm == NULL) /* device state (NO_SHARD): copy it back */
        return m->shard_dev->to_host(out, mine, (size_t)param->numel * sizeof(float),
                                     m->ctx.stream);
    if (m->shard_comm == NULL) { /* every row is here */
        memcpy(out, mine, (size_t)param->numel * sizeof(float));
        return ACX_OK;
    }
    /* One all-gather of every rank's padded piece (shard_rows rows, the
     * owned ones first), then rank s's rows to their place in out. */
    acx_comm_t *c = m->shard_comm;
    size_t piece = (size_t)(param->shard_rows * param->row_numel);
    size_t bytes = (size_t)c->size * piece * sizeof(float);
    float *all = acx_mem_alloc(ACX_MEM_TRANSIENT, bytes, "parameter gather");
    if (all == NULL) return ACX_ERR_NO_MEMORY;
    acx_status_t status = ACX_OK;
    if (m->shard_dev != NULL && piece > (size_t)INT_MAX) {
        status = ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                           "acx_param_gather('%s'): a piece of %zu elements per rank is more "
                           "than one MPI call moves",
                           param->name, piece);
    } else if (m->shard_dev != NULL) { /* device state: this rank's piece to the host first */
        float *host =
            acx_mem_alloc_raw(ACX_MEM_TRANSIENT, piece * sizeof(float), "parameter gather piece");
        if (host == NULL) status = ACX_ERR_NO_MEMORY;
        if (status == ACX_OK)
            status = m->shard_dev->to_host(host, mine, piece * sizeof(float), m->ctx.stream);
        /* every rank joins the all-gather; a failed copy is reported after
         * it. host and all are host memory: MPI moves them directly (a
         * device backend's all-gather would read them on the device; the
         * piece, padded to the same rows on every rank, fits an int:
         * checked above on every rank alike). */
        int ret = ACX_WATCHED("acx_param_gather",
                              MPI_Allgather(host != NULL ? host : all, (int)piece, MPI_FLOAT, all,
                                            (int)piece, MPI_FLOAT, c->mpi));
        if (status == ACX_OK && ret != MPI_SUCCESS)
            status = acx_error_mpi(ret, "MPI_Allgather (acx_param_gather)", __FILE__, __LINE__);
        if (host != NULL) acx_mem_free(ACX_MEM_TRANSIENT, host, piece * sizeof(float));
    } else {
        status = c->ops->all_gather(c, mine, all, piece, ACX_DTYPE_FLOAT32);
    }
    for (int s = 0; status == ACX_OK && s < c->size; s++) {
        int64_t b, e;
        acx_plan_rows_of(&m->plan, param->rows, s, &b, &e);
        if (e > b)
            memcpy(out + b * param->row_numel, all + (size_t)s * piece,
                   (size_t)((e - b) * param->row_numel) * sizeof(float));
    }
    acx_mem_free(ACX_MEM_TRANSIENT, all, bytes);
    return status;
}

/* Root receives every row once: each rank sends the rows the plan has it
 * write (acx_param_save_rows: its owned rows, split among replicas), so
 * NO_SHARD's replicas send 1/N of the rows each and nothing is sent twice.
 * The row ranges go to root first (one MPI_Gather of two int64), then one
 * MPI_Gatherv of whole rows (a contiguous datatype of one row, so counts
 * are rows). */
ACX_API acx_status_t acx_param_gather_to(acx_param_t *param, int root, float *out) {
    if (param == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_param_gather_to: param must not be NULL");
    acx_model_t *m = param->unit->model;
    if (!m->prepared)
        return ACX_ERROR(ACX_ERR_STATE, "acx_param_gather_to('%s') before acx_prepare",
                         param->name);
    acx_comm_t *w = m->ctx.world;
    if (root < 0 || root >= w->size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_param_gather_to('%s'): root %d is not a rank (world size %d)",
                         param->name, root, w->size);
    acx_status_t status = ACX_OK;
    if (w->rank == root && out == NULL)
        status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                           "acx_param_gather_to('%s'): out is NULL on the root rank %d",
                           param->name, root);
    if (status == ACX_OK && (param->row_numel > INT_MAX || param->rows > INT_MAX))
        status = ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                           "acx_param_gather_to('%s'): %lld rows of %lld elements is more than "
                           "one MPI call moves",
                           param->name, (long long)param->rows, (long long)param->row_numel);
    int64_t wb, we;
    acx_param_save_rows(param, &wb, &we);
    size_t rn = (size_t)param->row_numel, mine_n = (size_t)(we - wb) * rn;
    const float *mine = m->master + param->shard_offset + (size_t)(wb - param->row_begin) * rn;
    float *host = NULL;
    if (status == ACX_OK && m->shard_dev != NULL && mine_n > 0) { /* device state: to the host */
        host = acx_mem_alloc_raw(ACX_MEM_TRANSIENT, mine_n * sizeof(float), "parameter gather");
        if (host == NULL) status = ACX_ERR_NO_MEMORY;
        if (status == ACX_OK)
            status = m->shard_dev->to_host(host, mine, mine_n * sizeof(float), m->ctx.stream);
        mine = host;
    }
    status = acx_coll_agree(w, status);
    int64_t range[2] = {wb, we}, *ranges = NULL;
    int *counts = NULL, *displs = NULL;
    if (status == ACX_OK && w->rank == root) {
        ranges = acx_malloc((size_t)w->size * sizeof range, "parameter gather rows");
        counts = acx_malloc((size_t)w->size * 2 * sizeof *counts, "parameter gather rows");
        if (ranges == NULL || counts == NULL) status = ACX_ERR_NO_MEMORY;
        displs = counts + w->size;
    }
    status = acx_coll_agree(w, status);
    MPI_Datatype row = MPI_DATATYPE_NULL;
    if (status == ACX_OK) {
        int ret = MPI_Gather(range, 2, MPI_INT64_T, ranges, 2, MPI_INT64_T, root, w->mpi);
        if (ret == MPI_SUCCESS) ret = MPI_Type_contiguous((int)rn, MPI_FLOAT, &row);
        if (ret == MPI_SUCCESS) ret = MPI_Type_commit(&row);
        if (ret == MPI_SUCCESS && w->rank == root)
            for (int r = 0; r < w->size; r++) {
                counts[r] = (int)(ranges[2 * r + 1] - ranges[2 * r]);
                displs[r] = (int)ranges[2 * r];
            }
        if (ret == MPI_SUCCESS)
            ret = ACX_WATCHED("acx_param_gather_to",
                              MPI_Gatherv(mine_n > 0 ? mine : NULL, (int)(we - wb), row, out,
                                          counts, displs, row, root, w->mpi));
        if (ret != MPI_SUCCESS)
            status = acx_error_mpi(ret, "MPI_Gatherv (acx_param_gather_to)", __FILE__, __LINE__);
    }
    if (row != MPI_DATATYPE_NULL) MPI_Type_free(&row);
    if (host != NULL) acx_mem_free(ACX_MEM_TRANSIENT, host, mine_n * sizeof(float));
    free(ranges);
    free(counts);
    return status;
}

ACX_API const char *acx_param_name(const acx_param_t *param) { return param ? param->name : NULL; }
ACX_API int acx_param_ndim(const acx_param_t *param) { return param ? param->ndim : 0; }
ACX_API const int64_t *acx_param_shape(const acx_param_t *param) {
    return param ? param->shape : NULL;
}
ACX_API int64_t acx_param_numel(const acx_param_t *param) { return param ? param->numel : 0; }
ACX_API int acx_model_num_params(const acx_model_t *model) { return model ? model->num_params : 0; }
ACX_API int64_t acx_model_numel(const acx_model_t *model) { return model ? model->numel : 0; }
ACX_API acx_param_t *acx_model_param(acx_model_t *model, int i) {
    if (model == NULL || i < 0 || i >= model->num_params) return NULL;
    return model->params[i];
}

/* ---- strategy dispatch ---- */

acx_status_t acx_model_prepare(acx_model_t *m) {
    if (m->prepared) return ACX_ERROR(ACX_ERR_STATE, "the model is already prepared");
    if (m->num_params == 0)
        return ACX_ERROR(
            ACX_ERR_STATE,
            "the model has no parameters: register units and parameters before acx_prepare");
    for (int i = 0; i < m->num_units; i++)
        if (m->units[i]->num_params == 0 && m->units[i]->owner == NULL)
            return ACX_ERROR(ACX_ERR_STATE, "unit '%s' has no parameters", m->units[i]->name);
    switch (m->ctx.strategy) {
    case ACX_NO_SHARD: m->strategy = &acx_strategy_no_shard; break;
    case ACX_SHARD_GRAD_OP: m->strategy = &acx_strategy_shard_grad_op; break;
    case ACX_FULL_SHARD: m->strategy = &acx_strategy_full_shard; break;
    case ACX_HYBRID_SHARD: m->strategy = &acx_strategy_hybrid_shard; break;
    default:
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "sharding_strategy %d is not one of no_shard, "
                         "shard_grad_op, full_shard, hybrid_shard",
                         m->ctx.strategy);
    }
    /* ctx.offload implies device state: the accelerator leaves it 0 with
     * host state (the optimizer is on the host already) */
    if (m->ctx.offload && m->ctx.dev == NULL)
        return ACX_ERROR(ACX_ERR_INTERNAL, "offload_optimizer: cpu without device-resident state");
    if (m->ctx.offload && m->ctx.strategy != ACX_NO_SHARD)
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "offload_optimizer: cpu supports NO_SHARD only in this version (have "
                         "sharding_strategy: %s; use no_shard, or offload_optimizer: none)",
                         m->strategy->name);
    m->shard_dev = m->ctx.offload ? NULL : m->ctx.dev;
    ACX_CHECK(m->strategy->prepare(m));
    m->prepared = 1;
    ACX_INFO(ACX_SUBSYS_SHARD,
             "model prepared: %d units, %d parameters, %lld elements, strategy %s, local shard %zu "
             "elements",
             m->num_units, m->num_params, (long long)m->numel, m->strategy->name, m->shard_numel);
    return ACX_OK;
}

/* ---- the debug mode's write check ----
 *
 * acx_param_data is read-only for the program: under NO_SHARD with fp32
 * it is the master itself, elsewhere a copy acx remakes from the master
 * (a rounding, a gather), so a write is lost or, worse, trains one rank
 * apart. With ACX_DEBUG_MODE and host state each parameter's compute copy
 * is checksummed when acx makes it (acquire, after a step or a load) and
 * compared at release and before the next optimizer step: a write is
 * caught there, naming the parameter. Cost: one pass over the unit's
 * values per acquire and release, debug mode only. Device state is left
 * alone (its values are not host memory; compute-sanitizer's job). */

static int write_check_on(const acx_model_t *m) {
    return m->ctx.unit_check != NULL && m->ctx.dev == NULL;
}

static uint64_t data_sum(const acx_param_t *p) {
    const uint32_t *w = (const uint32_t *)p->data;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over 32-bit words */
    for (int64_t i = 0; i < p->numel; i++)
        h = (h ^ w[i]) * 1099511628211ull;
    return h;
}

static void sum_take(acx_param_t *p) {
    p->data_sum_set = p->data != NULL;
    if (p->data_sum_set) p->data_sum = data_sum(p);
}

static int sum_differs(const acx_param_t *p) {
    return p->data_sum_set && p->data != NULL && data_sum(p) != p->data_sum;
}

static acx_status_t written_error(const acx_param_t *p, const char *when) {
    return ACX_ERROR(ACX_ERR_STATE,
                     "parameter '%s' (unit '%s'): the program wrote into its values "
                     "(acx_param_data is read-only; found %s by ACX_DEBUG_MODE): the write is "
                     "lost or makes ranks differ; to set weights use acx_model_load_weights",
                     p->name, p->unit->name, when);
}

acx_status_t acx_model_check_writes(acx_model_t *m) {
    if (!write_check_on(m) || !m->prepared) return ACX_OK;
    acx_status_t status = ACX_OK;
    for (int i = 0; i < m->num_params; i++) {
        acx_param_t *p = m->params[i];
        if (status == ACX_OK && p->data_written)
            status = written_error(p, "at acx_unit_release");
        else if (status == ACX_OK && sum_differs(p))
            status = written_error(p, "before the optimizer step");
        p->data_written = 0;
    }
    return acx_coll_agree(m->ctx.world, status);
}

static acx_status_t require_prepared(const acx_model_t *m, const char *what) {
    if (!m->prepared) return ACX_ERROR(ACX_ERR_STATE, "%s before acx_prepare", what);
    return ACX_OK;
}

ACX_API acx_status_t acx_unit_acquire(acx_unit_t *unit) {
    if (unit == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_unit_acquire: unit is NULL");
    ACX_CHECK(require_prepared(unit->model, "acx_unit_acquire"));
    if (unit->acquired++ > 0) return ACX_OK; /* nested acquire: already gathered */
    acx_unit_t *storage = acx_unit_storage(unit);
    storage->uses_held++;
    acx_status_t st = unit->model->strategy->acquire(unit);
    if (st != ACX_OK) {
        unit->acquired--;
        storage->uses_held--;
    } else if (write_check_on(unit->model) && storage->uses_held == 1) {
        /* the values were just made: a later write is the program's */
        for (int i = 0; i < storage->num_params; i++)
            sum_take(storage->params[i]);
    }
    return st;
}

ACX_API acx_status_t acx_unit_release(acx_unit_t *unit) {
    if (unit == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_unit_release: unit is NULL");
    ACX_CHECK(require_prepared(unit->model, "acx_unit_release"));
    if (unit->acquired == 0)
        return ACX_ERROR(ACX_ERR_STATE, "unit '%s' released without being acquired", unit->name);
    if (--unit->acquired > 0) return ACX_OK;
    acx_unit_t *storage = acx_unit_storage(unit); /* a shared unit's params are its owner's */
    storage->uses_held--;
    if (write_check_on(unit->model))
        for (int i = 0; i < storage->num_params; i++) {
            acx_param_t *p = storage->params[i];
            if (!p->data_written && sum_differs(p)) {
                p->data_written = 1; /* the error comes, agreed, before the next step */
                ACX_WARN(ACX_SUBSYS_SHARD,
                         "parameter '%s': the program wrote into its values (found at "
                         "acx_unit_release by ACX_DEBUG_MODE); every rank stops at the next "
                         "acx_optimizer_step",
                         p->name);
            }
        }
    acx_status_t rel = unit->model->strategy->release(unit);
    for (int i = 0; i < storage->num_params; i++) /* freed copies have no sum */
        if (storage->params[i]->data == NULL) storage->params[i]->data_sum_set = 0;
    return rel;
}

ACX_API acx_status_t acx_unit_grads_ready(acx_unit_t *unit) {
    if (unit == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_unit_grads_ready: unit is NULL");
    ACX_CHECK(require_prepared(unit->model, "acx_unit_grads_ready"));
    if (unit->grads_reported)
        return ACX_ERROR(ACX_ERR_STATE, "unit '%s' reported its gradients twice in one micro-step",
                         unit->name);
    unit->grads_reported = 1;
    unit->model->grads_pending = 1;
    acx_unit_storage(unit)->uses_reported++; /* the strategy reduces after the last use */
    return unit->model->strategy->grads_ready(unit);
}

acx_status_t acx_model_backward_end(acx_model_t *m) {
    ACX_CHECK(require_prepared(m, "acx_backward_end"));
    acx_status_t st = m->strategy->backward_end(m);
    if (st == ACX_ERR_STATE && m->sync) {
        /* The strategy knows unit indices; the program knows names. */
        char names[512] = "";
        size_t len = 0;
        int missing = 0;
        for (int i = 0; i < m->num_units; i++) {
            if (m->units[i]->grads_reported) continue;
            missing++;
            if (len < sizeof names - 2)
                len += (size_t)snprintf(names + len, sizeof names - len, "%s'%s'",
                                        missing > 1 ? ", " : "", m->units[i]->name);
        }
        if (missing > 0)
            st = ACX_ERROR(ACX_ERR_STATE,
                           "acx_backward_end: %d unit(s) did not call acx_unit_grads_ready in this "
                           "micro-step: %s (every unit must report once per micro-step, on every "
                           "rank; or acx_backward_end was called twice)",
                           missing, names);
    }
    for (int i = 0; i < m->num_units; i++) {
        m->units[i]->grads_reported = 0;
        m->units[i]->uses_reported = 0;
    }
    return st;
}

acx_status_t acx_model_after_step(acx_model_t *m) {
    ACX_CHECK(require_prepared(m, "optimizer step"));
    ACX_CHECK(m->strategy->after_step(m));
    if (write_check_on(m)) /* the copies acx just made (or kept) */
        for (int i = 0; i < m->num_params; i++)
            sum_take(m->params[i]);
    return ACX_OK;
}

acx_status_t acx_model_zero_grad(acx_model_t *m) {
    ACX_CHECK(require_prepared(m, "zero_grad"));
    ACX_CHECK(m->strategy->zero_grad(m));
    m->grads_pending = 0;
    return ACX_OK;
}

acx_status_t acx_model_grads_to_host(acx_model_t *m) {
    ACX_CHECK(require_prepared(m, "reading the reduced gradients"));
    return m->strategy->grads_to_host != NULL ? m->strategy->grads_to_host(m) : ACX_OK;
}

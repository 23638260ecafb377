/*
 * io/weights.c — acx_model_save_weights: every parameter of a prepared model
 * into one HDF5 weights file, described as tensors (which rows each rank
 * writes) and handed to the one writer (io/ckpt_write.c, without
 * checksums: collective metadata, each rank's rows, fsync, rename).
 *
 * Layout (io/ckpt_format.h):
 *   /              attrs: format = "acx-weights", step (int64), and source
 *                  for an export (acx_weights_write, the one writer of them)
 *   /<param name>  float32 [the parameter's true shape]   (one per parameter;
 *                  a '/' in a name makes intermediate groups)
 *
 * Who writes what: the sharding plan (sharding/plan.h, through
 * acx_param_save_rows), as for checkpoints; this file knows no strategy.
 * Each rank writes its part of the rows it holds (its owned rows, split
 * among the ranks that hold the same rows), so every row is written
 * exactly once, possibly nothing on a rank. The rows come from the local
 * shard (model->master at param->shard_offset).
 *
 * Crash safety and agreed statuses are the writer's: the file is written as
 * path + ".tmp" and only renamed to `path` when everything succeeded, so a
 * failure never harms a file already at `path`, and a failure on one rank
 * is the same error on every rank.
 *
 * A path ending in ".safetensors" is written as a safetensors file instead
 * (save_safetensors below; the format is io/safetensors.c's): rank 0
 * writes it alone, each parameter gathered to it (acx_param_gather_to).
 *
 * Left to others: the full checkpoint (optimizer state, RNG, config) and
 * loading (the checkpoint reader; acx_model_load_weights, io/weights_load.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/config.h"
#include "acx/model.h"
#include "collectives/coll.h"
#include "collectives/watchdog.h"
#include "io/checkpoint.h"
#include "io/h5.h" /* acx_io_check_target */
#include "io/safetensors.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "sharding/model.h"

/* ---- the file's attributes ---- */

acx_status_t acx_weights_write(acx_comm_t *world, const char *path,
                               const acx_ckpt_tensor_t *tensors, int num_tensors, int64_t step,
                               const char *source) {
    const acx_ckpt_attr_t attrs[] = {
        {.object = "/",
         .name = ACX_CKPT_ATTR_FORMAT,
         .type = ACX_CKPT_STR,
         .str = ACX_WEIGHTS_FORMAT},
        {.object = "/", .name = ACX_CKPT_ATTR_STEP, .type = ACX_CKPT_I64, .i64 = step},
        {.object = "/", .name = ACX_WEIGHTS_ATTR_SOURCE, .type = ACX_CKPT_STR, .str = source}};
    const acx_ckpt_save_opts_t opts = {.no_checksums = 1};
    return acx_ckpt_save_opts(world, path, tensors, num_tensors, attrs, source != NULL ? 3 : 2,
                              &opts);
}

/* ---- the public entry point ---- */

static acx_status_t save_weights(acx_model_t *model, const char *path);
static acx_status_t save_safetensors(acx_model_t *model, const char *path);

static int is_safetensors_path(const char *path) {
    static const char ext[] = ".safetensors";
    size_t n = path != NULL ? strlen(path) : 0;
    return n > sizeof ext - 1 && strcmp(path + n - (sizeof ext - 1), ext) == 0;
}

/* One watch with the checkpoint's limit over the whole save: its
 * agreements follow file I/O (collectives/watchdog.h). */
ACX_API acx_status_t acx_model_save_weights(acx_model_t *model, const char *path) {
    acx_watch_enter_io("weights save");
    acx_status_t status =
        is_safetensors_path(path) ? save_safetensors(model, path) : save_weights(model, path);
    acx_watch_exit();
    return status;
}

/* The safetensors export (io/safetensors.c writes the file): rank 0 opens
 * the writer, then for each parameter in the file's (name-sorted) order
 * every rank takes part in acx_param_gather_to(p, 0) and rank 0 appends
 * the values. A failure on rank 0 mid-way keeps it in the gathers (the
 * others cannot know) and is agreed at the end; the temporary file is
 * removed then. Rank 0 holds one full parameter at a time. */
static acx_status_t save_safetensors(acx_model_t *model, const char *path) {
    if (model == NULL || path == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_model_save_weights: model and path must not be "
                                              "NULL");
    if (!model->prepared)
        return ACX_ERROR(ACX_ERR_STATE, "acx_model_save_weights before acx_prepare (no weights "
                                        "to save yet)");
    acx_comm_t *world = model->ctx.world;
    int n = model->num_params, root = world->rank == 0;
    acx_status_t status = ACX_OK;
    acx_st_writer_t *w = NULL;
    acx_st_out_t *outs = calloc((size_t)n + 1, sizeof *outs);
    float *buf = NULL;
    size_t buf_bytes = 0;
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)model->step);
    const char *meta[4] = {"format", ACX_WEIGHTS_FORMAT, "step", step};
    if (outs == NULL) status = ACX_ERR_NO_MEMORY;
    for (int i = 0; i < n && status == ACX_OK; i++) {
        const acx_param_t *p = model->params[i];
        outs[i] = (acx_st_out_t){.name = p->name, .ndim = p->ndim, .shape = p->shape};
        if ((size_t)p->numel * sizeof(float) > buf_bytes)
            buf_bytes = (size_t)p->numel * sizeof(float);
    }
    if (status == ACX_OK && root) {
        status = acx_io_check_target(path);
        if (status == ACX_OK) status = acx_st_writer_open(path, outs, n, meta, 2, &w);
        if (status == ACX_OK) {
            buf = acx_mem_alloc_raw(ACX_MEM_TRANSIENT, buf_bytes, "safetensors export buffer");
            if (buf == NULL) status = ACX_ERR_NO_MEMORY;
        }
    }
    status = acx_coll_agree(world, status);
    /* the file's order is the writer's: name-sorted, the same on every rank */
    int *order = NULL;
    if (status == ACX_OK) {
        order = calloc((size_t)n + 1, sizeof *order);
        /* agreed before the broadcast, which every rank must then join */
        status = acx_coll_agree(world, order != NULL ? ACX_OK
                                                     : ACX_ERROR(ACX_ERR_NO_MEMORY,
                                                                 "acx_model_save_weights: no "
                                                                 "memory for the file order"));
    }
    if (status == ACX_OK) {
        if (root)
            for (int k = 0; k < n; k++)
                order[k] = acx_st_writer_order(w, k);
        if (MPI_Bcast(order, n, MPI_INT, 0, world->mpi) != MPI_SUCCESS) /* agreed below */
            status = ACX_ERROR(ACX_ERR_MPI, "acx_model_save_weights: cannot share the file order");
    }
    status = acx_coll_agree(world, status);
    acx_status_t local = ACX_OK; /* rank 0's writes */
    for (int k = 0; k < n && status == ACX_OK; k++) {
        acx_param_t *p = model->params[order[k]];
        status = acx_param_gather_to(p, 0, buf); /* agreed by the call */
        if (status == ACX_OK && root && local == ACX_OK)
            local = acx_st_writer_put(w, buf, p->numel);
    }
    if (status == ACX_OK && root && local == ACX_OK) {
        local = acx_st_writer_commit(w);
        w = NULL;
    }
    if (status == ACX_OK) status = acx_coll_agree(world, local);
    acx_st_writer_abort(w);
    if (buf != NULL) acx_mem_free(ACX_MEM_TRANSIENT, buf, buf_bytes);
    free(order);
    free(outs);
    if (status == ACX_OK)
        ACX_DEBUG(ACX_SUBSYS_IO, "saved %d parameters (step %lld) to safetensors '%s'", n,
                  (long long)model->step, path);
    return status;
}

static acx_status_t save_weights(acx_model_t *model, const char *path) {
    if (model == NULL || path == NULL || path[0] == '\0')
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_model_save_weights: model and path must not be NULL or empty");
    if (!model->prepared)
        return ACX_ERROR(ACX_ERR_STATE, "acx_model_save_weights before acx_prepare (no weights "
                                        "to save yet)");
    acx_comm_t *world = model->ctx.world;
    if (world == NULL)
        return ACX_ERROR(ACX_ERR_INTERNAL, "acx_model_save_weights: the model has no communicator");

    acx_status_t status = acx_io_check_target(path);
    int n = model->num_params;
    acx_ckpt_tensor_t *tensors = calloc((size_t)(n > 0 ? n : 1), sizeof *tensors);
    char(*names)[ACX_MAX_NAME + 2] = calloc((size_t)(n > 0 ? n : 1), sizeof *names);
    if (status == ACX_OK && (tensors == NULL || names == NULL))
        status =
            ACX_ERROR(ACX_ERR_NO_MEMORY, "acx_model_save_weights: no memory for %d tensors", n);
    /* Device-resident state (shard_dev; with CPU offload the master is host
     * memory already): HDF5 writes from host memory, so the shard's
     * master weights are copied to a host mirror first (shard_numel floats,
     * freed on return), before any collective call, so that a failed copy
     * is agreed on with the file's creation by the writer. */
    const float *master = model->master;
    float *mirror = NULL;
    if (status == ACX_OK && model->shard_dev != NULL && model->shard_numel > 0) {
        size_t bytes = (size_t)model->shard_numel * sizeof(float);
        mirror =
            acx_mem_alloc_raw(ACX_MEM_TRANSIENT, bytes, "weights host copy of the master weights");
        if (mirror == NULL)
            status = ACX_ERROR(ACX_ERR_NO_MEMORY,
                               "acx_model_save_weights: no memory for a %zu-byte "
                               "host copy of the device-resident weights",
                               bytes);
        else
            status = model->shard_dev->to_host(mirror, model->master, bytes, model->ctx.stream);
        master = mirror;
    }

    /* One tensor per parameter at /<name>: the local buffer holds the
     * shard's rows [row_begin, row_end) at shard_offset; this rank writes
     * the part of them the sharding plan gives it. */
    for (int i = 0; i < n && status == ACX_OK; i++) {
        const acx_param_t *p = model->params[i];
        acx_ckpt_tensor_t *t = &tensors[i];
        snprintf(names[i], sizeof names[i], "/%s", p->name);
        *t = (acx_ckpt_tensor_t){.path = names[i],
                                 .dtype = ACX_DTYPE_FLOAT32,
                                 .ndim = p->ndim,
                                 .buf = (void *)(master + p->shard_offset),
                                 .buf_row0 = p->row_begin,
                                 .buf_rows = p->row_end - p->row_begin};
        for (int d = 0; d < p->ndim; d++)
            t->shape[d] = p->shape[d];
        acx_param_save_rows(p, &t->io_begin, &t->io_end); /* the plan's rows for this rank */
    }
    /* every rank's part of the description, agreed before the collective
     * writer starts */
    status = acx_coll_agree(world, status);
    if (status == ACX_OK) status = acx_weights_write(world, path, tensors, n, model->step, NULL);
    if (status == ACX_OK)
        ACX_DEBUG(ACX_SUBSYS_IO, "saved %d parameters (step %lld) to '%s'", model->num_params,
                  (long long)model->step, path);
    if (mirror != NULL)
        acx_mem_free(ACX_MEM_TRANSIENT, mirror, (size_t)model->shard_numel * sizeof(float));
    free(names);
    free(tensors);
    return status;
}

/*
 * io/weights.c — acx_model_save_weights: every parameter of a prepared model
 * into one HDF5 weights file, described as tensors (which rows each rank
 * writes) and handed to the one writer (io/ckpt_write.c, without
 * checksums: collective metadata, each rank's rows, fsync, rename).
 *
 * Layout (io/ckpt_format.h):
 *   /              attrs: format = "acx-weights", step (int64)
 *   /<param name>  float32 [the parameter's true shape]   (one per parameter;
 *                  a '/' in a name makes intermediate groups)
 *
 * Who writes what. Each parameter's rows come from the local shard
 * (model->master at param->shard_offset). Under NO_SHARD every rank holds
 * every row: rank 0 writes them all and the others take part with an empty
 * selection. Under HYBRID_SHARD the rows are replicated across nodes: the
 * ranks of the node that holds world rank 0 write their [row_begin, row_end)
 * and the other nodes select nothing. Otherwise (SHARD_GRAD_OP, FULL_SHARD)
 * each rank writes exactly its owned rows [row_begin, row_end), possibly
 * none. Every row is written by exactly one rank, as the writer requires.
 *
 * Crash safety and agreed statuses are the writer's: the file is written as
 * path + ".tmp" and only renamed to `path` when everything succeeded, so a
 * failure never harms a file already at `path`, and a failure on one rank
 * is the same error on every rank.
 *
 * Left to others: the full checkpoint (optimizer state, RNG, config) and
 * loading, which belong to the checkpoint writer/reader.
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
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "sharding/model.h"

/* ---- which rows this rank writes ---- */

/* Is this rank a writer for replicated data under HYBRID_SHARD, i.e. on the
 * node of world rank 0? A local question (group rank translation, no
 * communication). */
static int on_first_node(const acx_model_t *m) {
    const acx_comm_t *node = m->ctx.node;
    if (node == NULL) return m->ctx.world->rank == 0;
    MPI_Group wg, ng;
    int zero = 0, in_node = MPI_UNDEFINED;
    MPI_Comm_group(m->ctx.world->mpi, &wg);
    MPI_Comm_group(node->mpi, &ng);
    MPI_Group_translate_ranks(wg, 1, &zero, ng, &in_node);
    MPI_Group_free(&wg);
    MPI_Group_free(&ng);
    return in_node != MPI_UNDEFINED;
}

/* Rows [*begin_p, *end_p) of p this rank writes, and where they start in
 * the shard arrays. */
static void writer_rows(const acx_model_t *m, const acx_param_t *p, int first_node,
                        int64_t *begin_p, int64_t *end_p) {
    int64_t b = p->row_begin, e = p->row_end;
    if (m->ctx.strategy == ACX_NO_SHARD) {
        if (m->ctx.world->rank != 0) e = b;
    } else if (m->ctx.strategy == ACX_HYBRID_SHARD) {
        if (!first_node) e = b;
    }
    *begin_p = b;
    *end_p = e;
}

/* ---- the public entry point ---- */

static acx_status_t save_weights(acx_model_t *model, const char *path);

/* One watch with the checkpoint's limit over the whole save: its
 * agreements follow file I/O (collectives/watchdog.h). */
ACX_API acx_status_t acx_model_save_weights(acx_model_t *model, const char *path) {
    acx_watch_enter_io("weights save");
    acx_status_t status = save_weights(model, path);
    acx_watch_exit();
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
    int first_node = model->ctx.strategy == ACX_HYBRID_SHARD ? on_first_node(model) : 0;
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
     * writer_rows of them. */
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
        writer_rows(model, p, first_node, &t->io_begin, &t->io_end);
    }
    const acx_ckpt_attr_t attrs[] = {
        {.object = "/", .name = "format", .type = ACX_CKPT_STR, .str = ACX_WEIGHTS_FORMAT},
        {.object = "/", .name = "step", .type = ACX_CKPT_I64, .i64 = model->step}};
    const acx_ckpt_save_opts_t opts = {.no_checksums = 1};
    /* every rank's part of the description, agreed before the collective
     * writer starts */
    status = acx_coll_agree(world, status);
    if (status == ACX_OK) status = acx_ckpt_save_opts(world, path, tensors, n, attrs, 2, &opts);
    if (status == ACX_OK)
        ACX_DEBUG(ACX_SUBSYS_IO, "saved %d parameters (step %lld) to '%s'", model->num_params,
                  (long long)model->step, path);
    if (mirror != NULL)
        acx_mem_free(ACX_MEM_TRANSIENT, mirror, (size_t)model->shard_numel * sizeof(float));
    free(names);
    free(tensors);
    return status;
}

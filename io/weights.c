/*
 * io/weights.c — acx_model_save_weights: every parameter of a prepared model
 * into one HDF5 file, written collectively with parallel HDF5 (MPI-IO driver,
 * collective metadata, collective transfers), then renamed into place.
 *
 * Layout:
 *   /              attrs: format = "acx-weights", step (int64)
 *   /<param name>  float32 [the parameter's true shape]   (one per parameter;
 *                  a '/' in a name makes intermediate groups)
 *
 * Who writes what: the sharding plan (sharding/plan.h, through
 * acx_param_save_rows), as for checkpoints; this file knows no strategy.
 * Each rank writes its part of the rows it holds (its owned rows, split
 * among the ranks that hold the same rows), so every row is written
 * exactly once, possibly nothing on a rank. The rows come from the local
 * shard (model->master at param->shard_offset). Every rank writes one
 * hyperslab per parameter (an empty selection when it has none), so the
 * transfer is one collective H5Dwrite per parameter whatever the world
 * size.
 *
 * Crash safety: the file is written as path + ".tmp" and only renamed to
 * `path` (by rank 0, after the collective close) when everything succeeded,
 * so a failure never harms a file already at `path`. Statuses are agreed
 * (acx_coll_agree) after each collective phase, so a failure on one rank
 * becomes the same error on every rank and no rank is left inside a
 * collective HDF5 call the others abandoned.
 *
 * Left to others: the full checkpoint (optimizer state, RNG, config) and
 * loading, which belong to the checkpoint writer/reader.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/model.h"
#include "collectives/coll.h"
#include "collectives/watchdog.h"
#include "io/h5.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "sharding/model.h"

/* ---- one parameter ---- */

static acx_status_t write_param(hid_t file, hid_t lcpl, hid_t dxpl, const float *master,
                                const acx_param_t *p, const char *tmp) {
    acx_status_t status = ACX_OK;
    char what[ACX_MAX_NAME + 512];
    hsize_t dims[ACX_MAX_DIMS], start[ACX_MAX_DIMS] = {0}, count[ACX_MAX_DIMS];
    hid_t fspace = -1, mspace = -1, dset = -1;
    int64_t b, e;
    static const float dummy = 0.0f; /* a non-NULL buffer for an empty selection */

    snprintf(what, sizeof what, "parameter '%s' in '%s'", p->name, tmp);
    for (int k = 0; k < p->ndim; k++) {
        dims[k] = (hsize_t)p->shape[k];
        count[k] = dims[k];
    }
    acx_param_save_rows(p, &b, &e); /* the plan's rows for this rank */

    ACX_H5_CHECK_GOTO(fspace = H5Screate_simple(p->ndim, dims, NULL), what, status, done);
    ACX_H5_CHECK_GOTO(
        dset = H5Dcreate2(file, p->name, H5T_IEEE_F32LE, fspace, lcpl, H5P_DEFAULT, H5P_DEFAULT),
        what, status, done);
    hsize_t melems = (hsize_t)(e - b) * (hsize_t)p->row_numel;
    const float *buf = &dummy;
    if (melems > 0) {
        /* rows [b, e) x all other dims: one block */
        start[0] = (hsize_t)b;
        count[0] = (hsize_t)(e - b);
        ACX_H5_CHECK_GOTO(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL),
                          what, status, done);
        ACX_H5_CHECK_GOTO(mspace = H5Screate_simple(1, &melems, NULL), what, status, done);
        /* the owned rows start at shard_offset; b may lie past row_begin
         * (a slice of replicated rows) */
        buf = master + p->shard_offset + (size_t)(b - p->row_begin) * (size_t)p->row_numel;
    } else {
        hsize_t one = 1;
        ACX_H5_CHECK_GOTO(H5Sselect_none(fspace), what, status, done);
        ACX_H5_CHECK_GOTO(mspace = H5Screate_simple(1, &one, NULL), what, status, done);
        ACX_H5_CHECK_GOTO(H5Sselect_none(mspace), what, status, done);
    }
    ACX_H5_CHECK_GOTO(H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf), what, status,
                      done);
done:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (dset >= 0 && H5Dclose(dset) < 0 && status == ACX_OK)
        status = acx_error_h5("H5Dclose", what, __FILE__, __LINE__);
    return status;
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

    acx_status_t status = ACX_OK;
    hid_t fapl = -1, lcpl = -1, dxpl = -1, file = -1;
    size_t len = strlen(path);
    char *tmp = malloc(len + 5);
    char what[1024];
    if (tmp == NULL)
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "acx_model_save_weights: no memory for a path");
    else {
        memcpy(tmp, path, len);
        memcpy(tmp + len, ".tmp", 5);
    }
    snprintf(what, sizeof what, "weights file '%s.tmp'", path);
    if (status == ACX_OK) status = acx_io_check_target(path);
    /* Device-resident state (shard_dev; with CPU offload the master is host
     * memory already): HDF5 writes from host memory, so the shard's
     * master weights are copied to a host mirror first (shard_numel floats,
     * freed on return), before any collective call, so that a failed copy
     * is agreed on with the file's creation below. */
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

    /* The lock is held across the collective calls below: the prefetch
     * thread of a loader on this rank then waits, but it never makes MPI
     * calls, so no rank can wait on it. */
    acx_h5_lock();
    acx_h5_quiet();
    if (status != ACX_OK) goto agreed_create;
    ACX_H5_CHECK_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(H5Pset_fapl_mpio(fapl, world->mpi, MPI_INFO_NULL), what, status,
                      agreed_create);
    /* every rank issues the same metadata operations: let HDF5 do them
     * collectively (one reader broadcasts, one writer flushes) */
    ACX_H5_CHECK_GOTO(H5Pset_all_coll_metadata_ops(fapl, 1), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(H5Pset_coll_metadata_write(fapl, 1), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(lcpl = H5Pcreate(H5P_LINK_CREATE), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(H5Pset_create_intermediate_group(lcpl, 1), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(dxpl = H5Pcreate(H5P_DATASET_XFER), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), what, status, agreed_create);
    /* collective: MPI_File_open on every rank */
    ACX_H5_CHECK_GOTO(file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), what, status,
                      agreed_create);
agreed_create:
    status = acx_coll_agree(world, status);
    if (status != ACX_OK) goto out;

    ACX_H5_CHECK_GOTO(acx_h5_write_attr_str(file, "format", "acx-weights"), what, status,
                      agreed_write);
    ACX_H5_CHECK_GOTO(acx_h5_write_attr_i64(file, "step", model->step), what, status, agreed_write);
agreed_write:
    status = acx_coll_agree(world, status);
    if (status != ACX_OK) goto out;
    for (int i = 0; i < model->num_params; i++) {
        status = write_param(file, lcpl, dxpl, master, model->params[i], tmp);
        /* agree per parameter: a rank that failed must not leave the others
         * inside the next collective create/write */
        status = acx_coll_agree(world, status);
        if (status != ACX_OK) goto out;
    }

    /* collective close: flushes metadata and data */
    {
        herr_t ret = H5Fclose(file);
        file = -1;
        if (ret < 0) status = acx_error_h5("H5Fclose", what, __FILE__, __LINE__);
    }
    status = acx_coll_agree(world, status);
    if (status != ACX_OK) goto out;
    if (world->rank == 0 && rename(tmp, path) != 0)
        status = ACX_ERROR(ACX_ERR_IO, "rename('%s', '%s') failed: %s", tmp, path, strerror(errno));
    /* the agreement is also the barrier: nobody returns before the rename */
    status = acx_coll_agree(world, status);

out:
    if (file >= 0) H5Fclose(file); /* collective; every rank reaches it after an agreed failure */
    if (dxpl >= 0) H5Pclose(dxpl);
    if (lcpl >= 0) H5Pclose(lcpl);
    if (fapl >= 0) H5Pclose(fapl);
    acx_h5_unlock();
    if (status != ACX_OK && tmp != NULL && world->rank == 0) unlink(tmp);
    if (status == ACX_OK)
        ACX_DEBUG(ACX_SUBSYS_IO, "saved %d parameters (step %lld) to '%s'", model->num_params,
                  (long long)model->step, path);
    if (mirror != NULL)
        acx_mem_free(ACX_MEM_TRANSIENT, mirror, (size_t)model->shard_numel * sizeof(float));
    free(tmp);
    return status;
}

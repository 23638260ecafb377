/*
 * io/ckpt_scan.c — the checkpoint reader's whole-file passes, for one
 * process inspecting a file (`acx ckpt info | verify | export`,
 * io/ckpt_tools.c): every byte of metadata read at open
 * (ACX_CKPT_OPEN_INSPECT), every dataset listed, every byte of a dataset
 * read and verified, and a parameter's rows read as float32 for export;
 * and the parameter shapes of a checkpoint or weights file, for `acx
 * estimate-memory` (acx_ckpt_param_shapes).
 * The rest of the reader (open, queries, the collective row reads of a
 * load, damage) is io/ckpt_read.c's; the file's layout is
 * io/ckpt_format.h's.
 *
 * Checksums. Format version 2 stores CRC-32s of fixed-size blocks of every
 * dataset's bytes in its attributes (io/ckpt_crc.h): a dataset is read
 * front to back in the file's own type (so the bytes are the stored ones)
 * and every block is checked as it passes. Version 1 used HDF5's
 * Fletcher-32 filter, which HDF5 checks itself on every read of a chunk:
 * for those files reading every dataset completely is the verification.
 * Either way a failure names the dataset. (Metadata carries HDF5's own
 * checksums, checked when the objects are opened.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/ckpt_crc.h"
#include "io/ckpt_pkg.h"
#include "io/h5.h"
#include "base/error.h"

/* Rows are read in blocks of about this many bytes (more when one row is
 * larger), so a pass's memory stays bounded whatever the checkpoint size. */
#define BLOCK_BYTES ((size_t)32 << 20)
#define PATH_CAP    4096

/* ---- every byte of metadata ---- */

/* The walk over every object of a file (walk_metadata). */
typedef struct meta_walk {
    const char *real;
    acx_status_t status; /* the first failure, recorded where it happened */
} meta_walk_t;

static herr_t walk_attr_cb(hid_t obj, const char *name, const H5A_info_t *ainfo, void *data) {
    meta_walk_t *w = data;
    char what[PATH_CAP + 512], oname[PATH_CAP] = "?";
    hid_t attr = -1, type = -1, space = -1;
    void *buf = NULL;
    (void)ainfo;
    (void)H5Iget_name(obj, oname, sizeof oname);
    snprintf(what, sizeof what, "attribute '%s' on %s in '%s'", name, oname, w->real);
    if ((attr = H5Aopen(obj, name, H5P_DEFAULT)) < 0) {
        w->status = acx_error_h5("H5Aopen", what, __FILE__, __LINE__);
        goto out;
    }
    /* its size against the file's before the buffer is allocated */
    if ((w->status = acx_h5_check_attr(attr, what)) != ACX_OK) goto out;
    if ((type = H5Aget_type(attr)) < 0 || (space = H5Aget_space(attr)) < 0) {
        w->status = acx_error_h5("H5Aget_type", what, __FILE__, __LINE__);
        goto out;
    }
    hssize_t npts = H5Sget_simple_extent_npoints(space);
    size_t bytes = (size_t)(npts > 0 ? npts : 0) * H5Tget_size(type);
    if ((buf = calloc(bytes + 1, 1)) == NULL) {
        w->status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory (%zu bytes) to read %s", bytes, what);
        goto out;
    }
    if (H5Aread(attr, type, buf) < 0) {
        w->status = acx_error_h5("H5Aread", what, __FILE__, __LINE__);
        goto out;
    }
    if (H5Tdetect_class(type, H5T_VLEN) > 0 || H5Tis_variable_str(type) > 0)
        H5Dvlen_reclaim(type, space, H5P_DEFAULT, buf);
out:
    free(buf);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    return w->status == ACX_OK ? 0 : -1;
}

/* One object, by its path from the root: its whole object header (every
 * continuation chunk: H5O_INFO_ALL walks them), every attribute read, and
 * a dataset's storage checked (acx_h5_check_dataset). */
static acx_status_t walk_object(hid_t file, const char *path, haddr_t addr, meta_walk_t *w) {
    char what[PATH_CAP + 256], at[64] = "";
    hid_t obj = -1;
    H5O_info_t oi;
    hsize_t idx = 0;
    if (addr != HADDR_UNDEF)
        snprintf(at, sizeof at, " (object header at byte %llu)", (unsigned long long)addr);
    snprintf(what, sizeof what, "object %s%s in '%s'", path, at, w->real);
    if ((obj = H5Oopen(file, path, H5P_DEFAULT)) < 0) {
        w->status = acx_error_h5("H5Oopen", what, __FILE__, __LINE__);
        goto out;
    }
    if (H5Oget_info2(obj, &oi, H5O_INFO_ALL) < 0) {
        w->status = acx_error_h5("H5Oget_info2", what, __FILE__, __LINE__);
        goto out;
    }
    if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, walk_attr_cb, w) < 0) {
        if (w->status == ACX_OK) w->status = acx_error_h5("H5Aiterate2", what, __FILE__, __LINE__);
        goto out;
    }
    if (oi.type == H5O_TYPE_DATASET) {
        snprintf(what, sizeof what, "dataset %s in '%s'", path, w->real);
        w->status = acx_h5_check_dataset(obj, what, 1, NULL);
    }
out:
    if (obj >= 0) H5Oclose(obj);
    return w->status;
}

static herr_t walk_link_cb(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    meta_walk_t *w = data;
    char path[PATH_CAP];
    (void)group;
    if (info->type != H5L_TYPE_HARD) {
        /* soft and external links could point anywhere (another file):
         * acx writes none */
        w->status = ACX_ERROR(ACX_ERR_FORMAT,
                              "checkpoint '%s' has a %s link /%s: an acx checkpoint has only "
                              "hard links",
                              w->real, info->type == H5L_TYPE_SOFT ? "soft" : "external", name);
        return -1;
    }
    snprintf(path, sizeof path, "/%s", name);
    return walk_object(group, path, info->u.address, w) == ACX_OK ? 0 : -1;
}

/* Read every byte of metadata the file's objects use, before anything is
 * interpreted: every object header whole, every attribute, every link.
 * HDF5 checks the checksums of these structures only when it loads them,
 * and 1.10.8 keeps an object header whose continuation chunk failed in its
 * cache without that chunk: a later look at the object "succeeds" with
 * that chunk's attributes and links missing. So a tool that looked only at
 * what it needed, retried, or took "absent" for an answer, called a
 * damaged file complete (or another checkpoint). The first failure ends
 * the walk: nothing is asked of HDF5 about a damaged file afterwards.
 * Lock held. */
acx_status_t acx_ckpt_walk_metadata(hid_t file, const char *real) {
    meta_walk_t w = {.real = real, .status = ACX_OK};
    if (walk_object(file, "/", HADDR_UNDEF, &w) != ACX_OK) return w.status;
    if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, walk_link_cb, &w) < 0 && w.status == ACX_OK) {
        char what[PATH_CAP + 64];
        snprintf(what, sizeof what, "the groups of '%s'", real);
        w.status = acx_error_h5("H5Lvisit", what, __FILE__, __LINE__);
    }
    return w.status;
}

/* ---- the datasets of a file ---- */

typedef struct ds_list {
    char **paths; /* "/model/fc1.weight", ... in visiting order */
    int count, cap;
    int failed;
} ds_list_t;

static herr_t collect_cb(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    ds_list_t *l = data;
    if (info->type != H5L_TYPE_HARD) return 0;
    hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0) return -1;
    int is_ds = H5Iget_type(obj) == H5I_DATASET;
    H5Oclose(obj);
    if (!is_ds) return 0;
    if (l->count == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **p = realloc(l->paths, (size_t)cap * sizeof *p);
        if (p == NULL) {
            l->failed = 1;
            return -1;
        }
        l->paths = p;
        l->cap = cap;
    }
    size_t n = strlen(name);
    char *s = malloc(n + 2);
    if (s == NULL) {
        l->failed = 1;
        return -1;
    }
    s[0] = '/';
    memcpy(s + 1, name, n + 1);
    l->paths[l->count++] = s;
    return 0;
}

/* Sets *(H5_index_t *)data to H5_INDEX_NAME when a group does not index
 * its links' creation order. */
static herr_t order_cb(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    H5O_info_t oi;
    unsigned flags = 0;
    if (info->type != H5L_TYPE_HARD) return 0;
    if (H5Oget_info_by_name2(group, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return -1;
    if (oi.type != H5O_TYPE_GROUP) return 0;
    hid_t g = H5Gopen2(group, name, H5P_DEFAULT), gcpl = g >= 0 ? H5Gget_create_plist(g) : -1;
    herr_t ret = gcpl >= 0 ? H5Pget_link_creation_order(gcpl, &flags) : -1;
    if (gcpl >= 0) H5Pclose(gcpl);
    if (g >= 0) H5Gclose(g);
    if (ret < 0) return -1;
    if (!(flags & H5P_CRT_ORDER_INDEXED)) *(H5_index_t *)data = H5_INDEX_NAME;
    return 0;
}

static void ds_list_free(ds_list_t *l) {
    for (int k = 0; k < l->count; k++)
        free(l->paths[k]);
    free(l->paths);
    *l = (ds_list_t){0};
}

/* Every dataset under `group` (recursively), in creation order when the
 * file tracks it (the writer's order: parameters in registration order),
 * else by name. Lock held. */
static acx_status_t list_datasets(hid_t file, const char *group, const char *real, ds_list_t *l) {
    acx_status_t status = ACX_OK;
    char what[PATH_CAP + 128];
    snprintf(what, sizeof what, "group %s in '%s'", group, real);
    hid_t g;
    ACX_H5_CHECK_GOTO(g = H5Gopen2(file, group, H5P_DEFAULT), what, status, out);
    /* creation order when every group below tracks it (acx's files), else
     * by name; asked, not tried: a failed walk retried would see a damaged
     * group's cached remains (walk_metadata) */
    H5_index_t index = H5_INDEX_CRT_ORDER;
    unsigned flags = 0;
    hid_t gcpl = H5Gget_create_plist(g);
    herr_t ret = gcpl >= 0 ? H5Pget_link_creation_order(gcpl, &flags) : -1;
    if (gcpl >= 0) H5Pclose(gcpl);
    if (ret >= 0 && !(flags & H5P_CRT_ORDER_INDEXED)) index = H5_INDEX_NAME;
    if (ret >= 0) ret = H5Lvisit(g, H5_INDEX_NAME, H5_ITER_INC, order_cb, &index);
    if (ret >= 0) ret = H5Lvisit(g, index, H5_ITER_INC, collect_cb, l);
    if (l->failed)
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory to list the datasets of '%s'", real);
    else if (ret < 0)
        status = acx_error_h5("H5Lvisit", what, __FILE__, __LINE__);
    H5Gclose(g);
    if (status == ACX_OK && strcmp(group, "/") != 0) {
        /* the walk named them relative to the group */
        size_t gl = strlen(group);
        for (int k = 0; k < l->count; k++) {
            char *s = malloc(gl + strlen(l->paths[k]) + 1);
            if (s == NULL) {
                status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for a dataset path");
                break;
            }
            sprintf(s, "%s%s", group, l->paths[k]);
            free(l->paths[k]);
            l->paths[k] = s;
        }
    }
out:
    if (status != ACX_OK) ds_list_free(l);
    return status;
}

/* ---- checksums ---- */

/* The CRC-32 check of one dataset read whole, front to back. */
typedef struct crc_reader {
    int on; /* the dataset carries checksum attributes */
    acx_ckpt_crc_t crc;
    acx_ckpt_crc_check_t k;
    char what[PATH_CAP + 512]; /* "dataset /model/x of 'f.h5' is damaged" */
} crc_reader_t;

/* Set up `r` for dataset `dset`: on when it carries the CRC-32 attributes
 * (version 2, or a newer version that still writes ours); off when HDF5
 * checks it itself (Fletcher-32 chunks: version 1) or it is empty. Data
 * with neither is refused or read with a loud warning as the file allows
 * (acx_ckpt_dataset_crc). Lock held. */
static acx_status_t crc_reader_open(acx_ckpt_file_t *f, hid_t dset, const char *dpath,
                                    crc_reader_t *r) {
    char what[PATH_CAP + 256];
    hid_t type = -1;
    int present = 0;
    acx_ckpt_shape_t s;
    r->on = 0;
    snprintf(what, sizeof what, "dataset %s of '%s'", dpath, f->path);
    if (acx_ckpt_dataset_shape(dset, &s) < 0 || (type = H5Dget_type(dset)) < 0)
        return acx_error_h5("H5Dget_space", what, __FILE__, __LINE__);
    uint64_t bytes = (uint64_t)s.numel * H5Tget_size(type);
    H5Tclose(type);
    ACX_CHECK(acx_ckpt_dataset_crc(f, dset, bytes, what, &present, &r->crc));
    if (present) {
        r->on = 1;
        snprintf(r->what, sizeof r->what, "%s is damaged", what);
        acx_ckpt_crc_check_init(&r->k, &r->crc, r->what, 0);
    }
    return ACX_OK;
}

static void crc_reader_close(crc_reader_t *r) {
    if (r->on) acx_ckpt_crc_free(&r->crc);
    r->on = 0;
}

/* ---- reading a dataset whole ---- */

/* Called with each block of the dataset, in row-major order: `bytes` bytes
 * of elements converted to the memory type. */
typedef acx_status_t (*block_fn_t)(const void *buf, size_t bytes, void *ctx);

/* Read dataset `dset` completely, converted to `mem` (a fixed-size type),
 * in blocks of whole rows (whole chunks along dim 0 when chunked, so no
 * chunk is read twice); each block goes to the checksum check `crc` (when
 * on: `mem` must then be the file's type, so the bytes are the stored ones),
 * then to fn (may be NULL). A failed read is recorded naming the dataset
 * (for Fletcher-32 datasets the HDF5 text says the checksum failed). Lock
 * held. */
static acx_status_t read_blocks(hid_t dset, hid_t mem, const char *what, crc_reader_t *crc,
                                block_fn_t fn, void *ctx) {
    acx_status_t status = ACX_OK;
    acx_ckpt_shape_t s;
    hid_t fspace = -1, mspace = -1, dcpl = -1;
    void *buf = NULL;
    size_t esize = H5Tget_size(mem);
    if (acx_ckpt_dataset_shape(dset, &s) < 0 || esize == 0)
        return acx_error_h5("H5Dget_space", what, __FILE__, __LINE__);
    if (s.numel == 0) return ACX_OK;

    /* one row = all elements after dim 0; a scalar is one row of one */
    hsize_t rows = s.ndim > 0 ? s.dims[0] : 1;
    size_t row_bytes = esize * (size_t)(s.ndim > 0 ? s.numel / rows : 1);
    hsize_t step = BLOCK_BYTES / row_bytes;
    if (step == 0) step = 1;
    ACX_H5_CHECK_GOTO(dcpl = H5Dget_create_plist(dset), what, status, out);
    if (s.ndim > 0 && H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t cdims[H5S_MAX_RANK];
        if (H5Pget_chunk(dcpl, H5S_MAX_RANK, cdims) == s.ndim && cdims[0] > 0)
            step = step < cdims[0] ? cdims[0] : step / cdims[0] * cdims[0];
    }
    if (step > rows) step = rows;
    if ((buf = malloc((size_t)step * row_bytes)) == NULL) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory (%zu bytes) to read %s",
                           (size_t)step * row_bytes, what);
        goto out;
    }
    if (s.ndim == 0) {
        ACX_H5_CHECK_GOTO(H5Dread(dset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), what, status,
                          out);
        if (crc != NULL && crc->on)
            ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&crc->k, buf, row_bytes), status, out);
        if (fn != NULL) status = fn(buf, row_bytes, ctx);
        goto out;
    }
    ACX_H5_CHECK_GOTO(fspace = H5Dget_space(dset), what, status, out);
    for (hsize_t r = 0; r < rows && status == ACX_OK; r += step) {
        hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
        hsize_t n = rows - r < step ? rows - r : step;
        memcpy(count, s.dims, sizeof count);
        start[0] = r;
        count[0] = n;
        ACX_H5_CHECK_GOTO(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL),
                          what, status, out);
        /* the memory space has the selection's shape, not a flat [n]: with
         * ranks that differ HDF5 maps every element to its chunk one by one
         * (measured 1.10.8, 256 MiB of 4 MiB chunks: 85 MiB/s flat against
         * 614 MiB/s same-shape, Fletcher-32 included) */
        ACX_H5_CHECK_GOTO(mspace = H5Screate_simple(s.ndim, count, NULL), what, status, out);
        ACX_H5_CHECK_GOTO(H5Dread(dset, mem, mspace, fspace, H5P_DEFAULT, buf), what, status, out);
        H5Sclose(mspace);
        mspace = -1;
        if (crc != NULL && crc->on)
            ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&crc->k, buf, (uint64_t)n * row_bytes), status,
                           out);
        if (fn != NULL) status = fn(buf, (size_t)n * row_bytes, ctx);
    }
out:
    free(buf);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (dcpl >= 0) H5Pclose(dcpl);
    return status;
}

/* Read one dataset completely: its CRC-32 blocks are checked as they pass
 * (version 2), or HDF5 checks each chunk's Fletcher-32 (version 1). */
static acx_status_t verify_dataset(acx_ckpt_file_t *f, const char *dpath) {
    hid_t file = f->file;
    const char *real = f->path;
    acx_status_t status = ACX_OK;
    char what[PATH_CAP + 256];
    hid_t dset = -1, type = -1;
    crc_reader_t crc = {0};
    snprintf(what, sizeof what, "dataset %s in '%s'", dpath, real);
    ACX_H5_CHECK_GOTO(dset = H5Dopen2(file, dpath, H5P_DEFAULT), what, status, out);
    ACX_H5_CHECK_GOTO(type = H5Dget_type(dset), what, status, out);
    ACX_CHECK_GOTO(crc_reader_open(f, dset, dpath, &crc), status, out);

    if (H5Tdetect_class(type, H5T_VLEN) > 0 || H5Tis_variable_str(type) > 0) {
        /* variable-length data (strings): one read, then give HDF5's
         * allocations back */
        acx_ckpt_shape_t s;
        hid_t space = -1;
        void *buf = NULL;
        ACX_H5_CHECK_GOTO(acx_ckpt_dataset_shape(dset, &s), what, status, out);
        if (s.numel > 0) {
            buf = calloc((size_t)s.numel, H5Tget_size(type));
            if (buf == NULL) {
                status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory to read %s", what);
                goto out;
            }
            herr_t ret = H5Dread(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
            if (ret < 0) status = acx_error_h5("H5Dread", what, __FILE__, __LINE__);
            if (ret >= 0 && (space = H5Dget_space(dset)) >= 0) {
                H5Dvlen_reclaim(type, space, H5P_DEFAULT, buf);
                H5Sclose(space);
            }
            free(buf);
        }
        goto out;
    }

    /* the file's own type as the memory type: no conversion, only the
     * read and the checksum */
    status = read_blocks(dset, type, what, &crc, NULL, NULL);
out:
    crc_reader_close(&crc);
    if (status == ACX_ERR_HDF5) {
        /* a dataset that cannot be read is a damaged checkpoint: say which,
         * keeping HDF5's words (a Fletcher-32 failure reads "... data error
         * detected by Fletcher32 checksum") */
        char msg[ACX_ERRMSG_MAX];
        const char *inner = acx_last_error(), *tail = strstr(inner, " failed: ");
        snprintf(msg, sizeof msg, "%s", tail ? tail + strlen(" failed: ") : inner);
        status = ACX_ERROR(ACX_ERR_FORMAT, "dataset %s of '%s' is damaged: %s", dpath, real, msg);
    }
    if (type >= 0) H5Tclose(type);
    if (dset >= 0) H5Dclose(dset);
    return status;
}

/* ---- the public passes ---- */

acx_status_t acx_ckpt_list_all(acx_ckpt_file_t *f, const char *group, int *count_p,
                               char ***names_p) {
    if (f == NULL || group == NULL || count_p == NULL || names_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_list_all: NULL argument");
    if (f->damaged != ACX_OK) return acx_ckpt_damage_replay(f);
    ds_list_t l = {0};
    acx_h5_lock();
    acx_h5_quiet();
    acx_status_t status = list_datasets(f->file, group, f->path, &l);
    acx_h5_unlock();
    if (status != ACX_OK) return status;
    /* one block: the pointer array, then the strings */
    size_t bytes = 0;
    for (int k = 0; k < l.count; k++)
        bytes += strlen(l.paths[k]) + 1;
    char **block = acx_malloc((size_t)l.count * sizeof(char *) + bytes + 1, "checkpoint name list");
    if (block == NULL) {
        ds_list_free(&l);
        return ACX_ERR_NO_MEMORY;
    }
    char *p = (char *)(block + l.count);
    for (int k = 0; k < l.count; k++) {
        size_t n = strlen(l.paths[k]) + 1;
        memcpy(p, l.paths[k], n);
        block[k] = p;
        p += n;
    }
    *count_p = l.count;
    *names_p = block;
    ds_list_free(&l);
    return ACX_OK;
}

acx_status_t acx_ckpt_verify_dataset(acx_ckpt_file_t *f, const char *path) {
    if (f == NULL || path == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_verify_dataset: NULL argument");
    if (f->damaged != ACX_OK) return acx_ckpt_damage_replay(f);
    acx_h5_lock();
    acx_h5_quiet();
    acx_status_t status = verify_dataset(f, path);
    acx_h5_unlock();
    return status;
}

acx_status_t acx_ckpt_read_rows_f32(acx_ckpt_file_t *f, const char *path, int64_t row0,
                                    int64_t nrows, float *buf) {
    int ndim;
    int64_t shape[ACX_MAX_DIMS];
    acx_dtype_t dtype;
    ACX_CHECK(acx_ckpt_shape(f, path, &ndim, shape, &dtype));
    if (row0 < 0 || nrows < 0 || row0 + nrows > shape[0])
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_ckpt_read_rows_f32: rows [%lld, +%lld) of '%s' "
                         "outside [0, %lld)",
                         (long long)row0, (long long)nrows, path, (long long)shape[0]);
    if (dtype == ACX_DTYPE_FLOAT32) {
        /* the verified read of a load: the CRC blocks the rows touch */
        acx_ckpt_tensor_t t = {.path = path,
                               .dtype = ACX_DTYPE_FLOAT32,
                               .ndim = ndim,
                               .buf = buf,
                               .buf_row0 = row0,
                               .buf_rows = nrows,
                               .io_begin = row0,
                               .io_end = row0 + nrows};
        memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
        return acx_ckpt_read(f, &t, 1);
    }
    /* another type, converted by HDF5: the caller verified the stored bytes */
    acx_status_t status = ACX_OK;
    char what[PATH_CAP + 256];
    hid_t dset = -1, fspace = -1, mspace = -1;
    hsize_t dims[ACX_MAX_DIMS];
    snprintf(what, sizeof what, "dataset %s of '%s'", path, f->path);
    for (int k = 0; k < ndim; k++)
        dims[k] = (hsize_t)shape[k];
    if (nrows == 0) return ACX_OK;
    acx_h5_lock();
    acx_h5_quiet();
    ACX_H5_CHECK_GOTO(dset = H5Dopen2(f->file, path, H5P_DEFAULT), what, status, out);
    ACX_H5_CHECK_GOTO(fspace = H5Dget_space(dset), what, status, out);
    ACX_CHECK_GOTO(
        acx_ckpt_select_rows(fspace, ndim, dims, (hsize_t)row0, (hsize_t)nrows, &mspace, what),
        status, out);
    ACX_H5_CHECK_GOTO(H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, buf), what,
                      status, out);
out:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (dset >= 0) H5Dclose(dset);
    acx_h5_unlock();
    return acx_ckpt_note_damage(f, status, path);
}

/* ---- a model file's parameter shapes ---- */

typedef struct shape_list {
    acx_ckpt_param_shape_t *t;
    int count, cap;
    int failed; /* out of memory inside the walk */
} shape_list_t;

/* H5Lvisit callback: record every float dataset (other datasets, groups and
 * soft links are not parameters). */
static herr_t shapes_visit(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    shape_list_t *l = data;
    if (info->type != H5L_TYPE_HARD) return 0;
    hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0) return -1;
    if (H5Iget_type(obj) != H5I_DATASET) {
        H5Oclose(obj);
        return 0;
    }
    hid_t type = H5Dget_type(obj), space = H5Dget_space(obj);
    hsize_t dims[H5S_MAX_RANK];
    int is_float = type >= 0 && H5Tget_class(type) == H5T_FLOAT;
    int nd = space >= 0 ? H5Sget_simple_extent_dims(space, dims, NULL) : -1;
    int is_null = space >= 0 && H5Sget_simple_extent_type(space) == H5S_NULL;
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    H5Oclose(obj);
    if (nd < 0) return -1;
    if (!is_float) return 0;

    int64_t numel = is_null ? 0 : 1, rows = nd > 0 ? (int64_t)dims[0] : 1;
    for (int k = 0; k < nd; k++) {
        if (__builtin_mul_overflow(numel, (int64_t)dims[k], &numel)) return -1;
    }
    if (l->count == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        acx_ckpt_param_shape_t *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (t == NULL) {
            l->failed = 1;
            return -1;
        }
        l->t = t;
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (copy == NULL) {
        l->failed = 1;
        return -1;
    }
    l->t[l->count++] =
        (acx_ckpt_param_shape_t){.name = copy, .numel = numel, .rows = is_null ? 0 : rows};
    return 0;
}

acx_status_t acx_ckpt_param_shapes(const char *path, acx_ckpt_param_shape_t **shapes_p,
                                   int *count_p, const char **kind_p) {
    if (path == NULL || shapes_p == NULL || count_p == NULL || kind_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_param_shapes: NULL argument");
    acx_status_t status = ACX_OK;
    char format[64] = "";
    shape_list_t l = {0};
    hid_t file = -1, group = -1;
    const char *where = "/";
    acx_h5_lock();
    acx_h5_quiet();
    file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        /* HDF5's own stack says little; a missing or unreadable file says more */
        int unreadable = access(path, R_OK) != 0;
        status = ACX_ERROR(ACX_ERR_IO, "cannot open '%s' as an HDF5 file%s%s", path,
                           unreadable ? ": " : "", unreadable ? strerror(errno) : "");
        goto out;
    }
    /* Not the reader's open (acx_ckpt_open_flags): a weights file has no
     * format_version, and neither has a model file written by hand (h5py)
     * that estimate-memory sizes; only shapes are read, which every version
     * keeps at /model. The format's name is read as the open reads it. */
    acx_ckpt_file_t view = {.file = file, .path = (char *)path, .flags = ACX_CKPT_OPEN_INSPECT};
    int has = 0;
    acx_status_t fs = acx_ckpt_format_name(&view, format, sizeof format, &has);
    if (fs == ACX_ERR_INVALID_ARG) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "'%s' has a root attribute 'format' of %zu bytes or more (expected %s "
                           "or %s)",
                           path, sizeof format, ACX_CKPT_FORMAT, ACX_WEIGHTS_FORMAT);
        goto out;
    }
    if (fs != ACX_OK || !has) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "'%s' has no string root attribute 'format' (expected an acx "
                           "checkpoint or weights file)",
                           path);
        goto out;
    }
    if (strcmp(format, ACX_CKPT_FORMAT) == 0) {
        where = ACX_CKPT_GROUP_MODEL;
        *kind_p = "acx checkpoint";
    } else if (strcmp(format, ACX_WEIGHTS_FORMAT) == 0) {
        where = "/";
        *kind_p = "acx weights file";
    } else {
        status = ACX_ERROR(ACX_ERR_FORMAT, "'%s' has format '%s' (expected %s or %s)", path, format,
                           ACX_CKPT_FORMAT, ACX_WEIGHTS_FORMAT);
        goto out;
    }
    if ((group = H5Gopen2(file, where, H5P_DEFAULT)) < 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "'%s' (%s) has no group %s", path, *kind_p, where);
        goto out;
    }
    /* by name: the caller forms units whatever the order */
    if (H5Lvisit(group, H5_INDEX_NAME, H5_ITER_INC, shapes_visit, &l) < 0) {
        status = ACX_ERROR(l.failed ? ACX_ERR_NO_MEMORY : ACX_ERR_HDF5,
                           "%s listing the datasets of %s in '%s'",
                           l.failed ? "out of memory" : "failed", where, path);
        goto out;
    }
    if (l.count == 0)
        status = ACX_ERROR(ACX_ERR_FORMAT, "no float datasets under %s in '%s'", where, path);
out:
    if (group >= 0) H5Gclose(group);
    if (file >= 0) H5Fclose(file);
    H5Eclear2(H5E_DEFAULT);
    acx_h5_unlock();
    if (status != ACX_OK) {
        acx_ckpt_param_shapes_free(l.t, l.count);
        return status;
    }
    *shapes_p = l.t;
    *count_p = l.count;
    return ACX_OK;
}

void acx_ckpt_param_shapes_free(acx_ckpt_param_shape_t *shapes, int count) {
    for (int k = 0; k < count && shapes != NULL; k++)
        free(shapes[k].name);
    free(shapes);
}

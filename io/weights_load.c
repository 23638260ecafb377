/*
 * io/weights_load.c — acx_model_load_weights: existing weights into a
 * prepared model, from a safetensors file, an acx weights file or the
 * /model of an acx checkpoint.
 *
 * What this file owns: telling the formats apart by their content (the
 * HDF5 signature, then the root attribute `format`; else a safetensors
 * header), matching parameters to tensors (the name map, a slice of a
 * stacked tensor, a transposed 2-D tensor), the strict/non-strict rules,
 * and moving each rank's rows into its master weights. Everything is
 * checked before any parameter changes: the plan (which tensor feeds which
 * parameter, with what shape) is made and agreed first, the rows are read
 * into a staging copy of the local shard, and only when every rank read
 * everything is the staging copied over model->master. Then the strategy's
 * after_step makes every other copy agree with the new master weights
 * (NO_SHARD's rounded compute copies, SHARD_GRAD_OP's resident parameters,
 * FULL_SHARD's held units; replicas read the same rows), exactly as after a
 * checkpoint load (runtime/checkpoint.c).
 *
 * Reading. Every rank opens the file by itself (HDF5: acx_ckpt_open with
 * no world, the sec2 driver; safetensors: io/safetensors.c) and reads only
 * the rows it owns ([row_begin, row_end) of each parameter, the sharding
 * plan's), so no collective I/O can hang on a rank that failed; a
 * transposed tensor is read whole by the ranks owning any of its rows (its
 * rows are the file's columns). HDF5 data goes through the checkpoint
 * reader's verified row reads (acx_ckpt_read_rows_f32: a checkpoint's CRC
 * blocks are checked; a weights file has none by its layout).
 *
 * Left to others: the formats themselves (io/safetensors.c, io/ckpt_read.c),
 * the rest of a checkpoint's state (runtime/checkpoint.c), where rows live
 * (the strategies, through the shard offsets).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/model.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "collectives/coll.h"
#include "collectives/watchdog.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "sharding/model.h"

/* ---- the source file, whatever its format ---- */

typedef struct src_tensor {
    char *name;   /* as a map names it: "fc1.weight" */
    char *h5path; /* HDF5: the dataset's path; NULL for safetensors */
    int ndim;
    int64_t shape[ACX_ST_MAX_DIMS];
    int64_t numel;
    int is_float;
    const char *dtype; /* for messages */
    int used;
} src_tensor_t;

typedef struct source {
    const char *path;
    const char *kind; /* "safetensors file", "acx weights file", "acx checkpoint" */
    acx_st_file_t *st;
    acx_ckpt_file_t *h5;
    int n;
    src_tensor_t *t;
} source_t;

static void source_close(source_t *s) {
    acx_st_close(s->st);
    if (s->h5 != NULL) acx_ckpt_close(s->h5);
    for (int i = 0; i < s->n; i++) {
        free(s->t[i].name);
        free(s->t[i].h5path);
    }
    free(s->t);
    memset(s, 0, sizeof *s);
}

static int find_tensor(const source_t *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0) return i;
    return -1;
}

/* The HDF5 signature at byte 0 (acx's writers use no user block)? */
static acx_status_t is_hdf5(const char *path, int *yes_p) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8];
    *yes_p = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ACX_ERROR(ACX_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    ssize_t r = pread(fd, head, sizeof head, 0);
    int e = errno;
    close(fd);
    if (r < 0) return ACX_ERROR(ACX_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    *yes_p = r == (ssize_t)sizeof head && memcmp(head, sig, sizeof sig) == 0;
    return ACX_OK;
}

static acx_status_t open_hdf5(source_t *s) {
    ACX_CHECK(acx_ckpt_open_flags(NULL, s->path, ACX_CKPT_OPEN_WEIGHTS, &s->h5));
    int weights = acx_ckpt_version(s->h5) == 0;
    s->kind = weights ? "acx weights file" : "acx checkpoint";
    const char *group = weights ? "/" : ACX_CKPT_GROUP_MODEL;
    size_t skip = weights ? 1 : strlen(ACX_CKPT_GROUP_MODEL "/");
    int count = 0;
    char **names = NULL;
    if (!weights && !acx_ckpt_exists(s->h5, group))
        return ACX_ERROR(ACX_ERR_FORMAT, "acx checkpoint '%s' has no %s group", s->path, group);
    ACX_CHECK(acx_ckpt_list_all(s->h5, group, &count, &names));
    acx_status_t status = ACX_OK;
    s->t = acx_calloc((size_t)count + 1, sizeof *s->t, "weights source tensors");
    if (s->t == NULL) status = ACX_ERR_NO_MEMORY;
    for (int i = 0; i < count && status == ACX_OK; i++) {
        src_tensor_t *t = &s->t[s->n];
        acx_dtype_t dt;
        int64_t shape[ACX_MAX_DIMS];
        status = acx_ckpt_shape(s->h5, names[i], &t->ndim, shape, &dt);
        if (status != ACX_OK) break;
        memcpy(t->shape, shape, (size_t)t->ndim * sizeof *shape);
        t->numel = 1;
        for (int d = 0; d < t->ndim; d++)
            t->numel *= t->shape[d];
        /* acx writes float32 only; the reader verifies float32 rows against
         * the checkpoint's CRC blocks, and nothing else */
        t->is_float = dt == ACX_DTYPE_FLOAT32;
        t->dtype = acx_dtype_name(dt);
        t->h5path = strdup(names[i]);
        t->name = strlen(names[i]) > skip ? strdup(names[i] + skip) : NULL;
        if (t->h5path == NULL || t->name == NULL) status = ACX_ERR_NO_MEMORY;
        s->n++;
    }
    free(names);
    return status;
}

/* Open `path` as whatever it is (see the file comment). Not collective. */
static acx_status_t source_open(const char *path, source_t *s) {
    memset(s, 0, sizeof *s);
    s->path = path;
    int h5 = 0, st = 0;
    ACX_CHECK(is_hdf5(path, &h5));
    if (h5) return open_hdf5(s);
    ACX_CHECK(acx_st_sniff(path, &st));
    /* named as one: the reader's checks say precisely what is wrong */
    size_t len = strlen(path);
    if (!st && len > 12 && strcmp(path + len - 12, ".safetensors") == 0) st = 1;
    if (!st)
        return ACX_ERROR(ACX_ERR_IO,
                         "'%s' is neither an HDF5 file (an acx weights file or checkpoint) nor a "
                         "safetensors file (its first 8 bytes are not the HDF5 signature, nor a "
                         "header length that fits the file followed by '{')",
                         path);
    s->kind = "safetensors file";
    ACX_CHECK(acx_st_open(path, &s->st));
    int n = acx_st_count(s->st);
    s->t = acx_calloc((size_t)n + 1, sizeof *s->t, "weights source tensors");
    if (s->t == NULL) return ACX_ERR_NO_MEMORY;
    for (int i = 0; i < n; i++) {
        const acx_st_tensor_t *e = acx_st_tensor(s->st, i);
        src_tensor_t *t = &s->t[s->n++];
        t->name = strdup(e->name);
        if (t->name == NULL) return ACX_ERR_NO_MEMORY;
        t->ndim = e->ndim;
        memcpy(t->shape, e->shape, sizeof t->shape);
        t->numel = e->numel;
        t->is_float = acx_st_dtype_is_float(e->dtype);
        t->dtype = acx_st_dtype_name(e->dtype);
    }
    return ACX_OK;
}

/* Elements [e0, e0 + n) of tensor ti (row-major) as float32. HDF5 reads
 * whole rows of dim 0: a range inside rows goes through a scratch block. */
static acx_status_t read_range(source_t *s, int ti, int64_t e0, int64_t n, float *out) {
    if (n == 0) return ACX_OK;
    if (s->st != NULL) return acx_st_read_f32(s->st, ti, e0, n, out);
    const src_tensor_t *t = &s->t[ti];
    int64_t rn = t->ndim > 0 && t->shape[0] > 0 ? t->numel / t->shape[0] : 1;
    int64_t r0 = e0 / rn, r1 = (e0 + n + rn - 1) / rn;
    if (e0 % rn == 0 && n % rn == 0)
        return acx_ckpt_read_rows_f32(s->h5, t->h5path, r0, r1 - r0, out);
    size_t bytes = (size_t)((r1 - r0) * rn) * sizeof(float);
    float *tmp = acx_malloc(bytes, "weights rows");
    if (tmp == NULL) return ACX_ERR_NO_MEMORY;
    acx_status_t status = acx_ckpt_read_rows_f32(s->h5, t->h5path, r0, r1 - r0, tmp);
    if (status == ACX_OK) memcpy(out, tmp + (e0 - r0 * rn), (size_t)n * sizeof(float));
    free(tmp);
    return status;
}

/* ---- the plan: which tensor feeds which parameter ---- */

typedef struct feed {
    int tensor; /* index in source, or -1: not loaded */
    int64_t index;
    int transpose;
} feed_t;

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && used < n; d++)
        used +=
            (size_t)snprintf(buf + used, n - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* Append "name" to a list (bounded text, for messages). */
static void list_add(char *list, size_t cap, int *count, const char *name) {
    size_t used = strlen(list);
    if (used + strlen(name) + 8 < cap)
        snprintf(list + used, cap - used, "%s'%s'", *count ? ", " : "", name);
    else if (used + 5 < cap && (used < 4 || strcmp(list + used - 3, "...") != 0))
        snprintf(list + used, cap - used, ", ...");
    (*count)++;
}

/* The map's entries checked against the model. */
static acx_status_t check_map(const acx_model_t *m, const acx_load_options_t *o, const char *path,
                              const acx_weight_source_t **entry_of) {
    for (int k = 0; k < o->map_len; k++) {
        const acx_weight_source_t *e = &o->map[k];
        if (e->param == NULL || e->tensor == NULL)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "acx_model_load_weights('%s'): map entry %d has a NULL param or "
                             "tensor name",
                             path, k);
        int i = 0;
        while (i < m->num_params && strcmp(m->params[i]->name, e->param) != 0)
            i++;
        if (i == m->num_params)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "acx_model_load_weights('%s'): map entry %d names parameter '%s', "
                             "which the model does not have",
                             path, k, e->param);
        if (entry_of[i] != NULL)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "acx_model_load_weights('%s'): parameter '%s' is in the map twice "
                             "(entries for tensors '%s' and '%s')",
                             path, e->param, entry_of[i]->tensor, e->tensor);
        if (e->index < -1)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "acx_model_load_weights('%s'): map entry for '%s': index %lld; "
                             "expected -1 (whole tensor) or a slice >= 0",
                             path, e->param, (long long)e->index);
        if (e->transpose && m->params[i]->ndim != 2)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "acx_model_load_weights('%s'): map entry for '%s' asks for a "
                             "transpose, but the parameter has %d dimensions (2 needed)",
                             path, e->param, m->params[i]->ndim);
        entry_of[i] = e;
    }
    return ACX_OK;
}

/* Match every parameter; strict and shape rules. Not collective (the same
 * answer on every rank from the same file). */
static acx_status_t plan_feeds(const acx_model_t *m, source_t *s, const acx_load_options_t *o,
                               feed_t *feeds, char *skipped, size_t cap, int *num_skipped) {
    const acx_weight_source_t **entry_of =
        acx_calloc((size_t)m->num_params + 1, sizeof *entry_of, "weights map");
    if (entry_of == NULL) return ACX_ERR_NO_MEMORY;
    acx_status_t status = check_map(m, o, s->path, entry_of);
    for (int i = 0; i < m->num_params && status == ACX_OK; i++) {
        const acx_param_t *p = m->params[i];
        const acx_weight_source_t *e = entry_of[i];
        const char *tname = e != NULL ? e->tensor : p->name;
        feed_t *f = &feeds[i];
        f->index = e != NULL ? e->index : -1;
        f->transpose = e != NULL && e->transpose;
        f->tensor = find_tensor(s, tname);
        if (f->tensor < 0) {
            if (o->strict)
                status = ACX_ERROR(ACX_ERR_FORMAT,
                                   "%s '%s' has no tensor '%s' for parameter '%s' (strict load; "
                                   "map it with acx_load_options_t.map, or load with strict = 0 "
                                   "to keep its values)",
                                   s->kind, s->path, tname, p->name);
            else
                list_add(skipped, cap, num_skipped, p->name);
            continue;
        }
        src_tensor_t *t = &s->t[f->tensor];
        /* the expected file shape: [L,] then the parameter's (transposed) dims */
        int64_t want[ACX_ST_MAX_DIMS];
        int nd = 0, stacked = f->index >= 0;
        if (stacked) want[nd++] = t->ndim > 0 ? t->shape[0] : 0;
        for (int d = 0; d < p->ndim; d++)
            want[nd++] = f->transpose ? p->shape[p->ndim - 1 - d] : p->shape[d];
        int same = t->ndim == nd && (!stacked || t->shape[0] > f->index);
        for (int d = 0; same && d < nd; d++)
            same = t->shape[d] == want[d];
        if (!same) {
            char found[256], exp[256], ps[256];
            shape_str(found, sizeof found, t->ndim, t->shape);
            shape_str(exp, sizeof exp, nd, want);
            shape_str(ps, sizeof ps, p->ndim, p->shape);
            char how[96] = "";
            if (stacked)
                snprintf(how, sizeof how, ", with slice %lld of dim 0 (so dim 0 > %lld)",
                         (long long)f->index, (long long)f->index);
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "%s '%s': tensor '%s' has shape %s, expected %s for parameter "
                               "'%s' of shape %s%s%s",
                               s->kind, s->path, tname, found, exp, p->name, ps,
                               f->transpose ? ", stored transposed" : "", how);
            break;
        }
        if (!t->is_float) {
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "%s '%s': tensor '%s' (for parameter '%s') is %s; parameters load "
                               "from %s",
                               s->kind, s->path, tname, p->name, t->dtype,
                               s->h5 != NULL ? "float32 datasets (what acx writes)"
                                             : "float tensors (F32, F16, BF16, F64)");
            break;
        }
        t->used = 1;
    }
    if (status == ACX_OK) {
        int unused = 0;
        char first[ACX_MAX_NAME + 8] = "";
        for (int k = 0; k < s->n; k++)
            if (!s->t[k].used) {
                if (unused++ == 0) snprintf(first, sizeof first, "%s", s->t[k].name);
                if (!o->strict) list_add(skipped, cap, num_skipped, s->t[k].name);
            }
        if (o->strict && unused > 0)
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "%s '%s': %d tensor(s) feed no parameter, the first '%s' (strict "
                               "load: every tensor must be used; map it, or load with strict = 0)",
                               s->kind, s->path, unused, first);
    }
    free(entry_of);
    return status;
}

/* ---- reading the rows ---- */

/* p's owned rows into dst (its place in the staging shard). */
static acx_status_t read_param(source_t *s, const acx_param_t *p, const feed_t *f, float *dst) {
    int64_t rb = p->row_begin, re = p->row_end, rn = p->row_numel;
    if (re <= rb) return ACX_OK;
    int64_t base = f->index >= 0 ? f->index * p->numel : 0;
    if (!f->transpose) return read_range(s, f->tensor, base + rb * rn, (re - rb) * rn, dst);
    /* the file holds [C, R]: our rows are its columns, read it whole */
    int64_t R = p->shape[0], C = p->shape[1];
    float *all = acx_mem_alloc_raw(ACX_MEM_TRANSIENT, (size_t)p->numel * sizeof(float),
                                   "transposed weights");
    if (all == NULL) return ACX_ERR_NO_MEMORY;
    acx_status_t status = read_range(s, f->tensor, base, p->numel, all);
    for (int64_t i = rb; status == ACX_OK && i < re; i++)
        for (int64_t j = 0; j < C; j++)
            dst[(i - rb) * C + j] = all[j * R + i];
    acx_mem_free(ACX_MEM_TRANSIENT, all, (size_t)p->numel * sizeof(float));
    return status;
}

/* ---- the public entry point ---- */

static acx_status_t load_weights(acx_model_t *m, const char *path, const acx_load_options_t *o);

/* One watch with the checkpoint's limit over the whole load: its
 * agreements follow file I/O (collectives/watchdog.h). */
ACX_API acx_status_t acx_model_load_weights(acx_model_t *model, const char *path,
                                            const acx_load_options_t *opts) {
    if (model == NULL || path == NULL || path[0] == '\0')
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_model_load_weights: model and path must not be NULL or empty");
    if (!model->prepared)
        return ACX_ERROR(ACX_ERR_STATE,
                         "acx_model_load_weights('%s') before acx_prepare (the "
                         "model's storage does not exist yet)",
                         path);
    const acx_load_options_t strict = {.strict = 1};
    acx_watch_enter_io("weights load");
    acx_status_t status = load_weights(model, path, opts != NULL ? opts : &strict);
    acx_watch_exit();
    return status;
}

static acx_status_t load_weights(acx_model_t *m, const char *path, const acx_load_options_t *o) {
    acx_comm_t *world = m->ctx.world;
    source_t src;
    char skipped[1024] = "";
    int num_skipped = 0, loaded = 0;
    size_t bytes = m->shard_numel * sizeof(float);
    float *stage = NULL;
    feed_t *feeds = acx_calloc((size_t)m->num_params + 1, sizeof *feeds, "weights plan");

    /* 1. open and match, on every rank; agreed before any rows move. Not
     * with gradients pending: they were computed with the weights this
     * would replace, and the next step would apply them to the new ones
     * (every rank reached the same state, and the agreement below makes
     * them all refuse alike). */
    acx_status_t status = feeds != NULL ? ACX_OK : ACX_ERR_NO_MEMORY;
    if (status == ACX_OK && m->grads_pending)
        status = ACX_ERROR(ACX_ERR_STATE,
                           "acx_model_load_weights('%s') with gradients pending "
                           "(acx_unit_grads_ready was called since the last optimizer step): "
                           "they were computed with the weights it would replace; call it "
                           "between optimizer steps, after acx_optimizer_step or "
                           "acx_optimizer_zero_grad",
                           path);
    if (status == ACX_OK && (o->map_len < 0 || (o->map_len > 0 && o->map == NULL)))
        status =
            ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_model_load_weights('%s'): map_len %d with map %s",
                      path, o->map_len, o->map == NULL ? "NULL" : "set");
    if (status == ACX_OK)
        status = source_open(path, &src);
    else
        memset(&src, 0, sizeof src);
    if (status == ACX_OK)
        status = plan_feeds(m, &src, o, feeds, skipped, sizeof skipped, &num_skipped);
    /* 2. the staging shard: the current master (kept where nothing loads) */
    if (status == ACX_OK) {
        stage = acx_mem_alloc_raw(ACX_MEM_TRANSIENT, bytes ? bytes : 1, "weights load staging");
        if (stage == NULL)
            status = ACX_ERROR(ACX_ERR_NO_MEMORY,
                               "acx_model_load_weights: no memory for a %zu-byte staging copy of "
                               "the local shard",
                               bytes);
        else if (m->shard_dev != NULL)
            status = m->shard_dev->to_host(stage, m->master, bytes, m->ctx.stream);
        else
            memcpy(stage, m->master, bytes);
    }
    status = acx_coll_agree(world, status);
    /* 3. each rank its rows (after a failed agreement every rank holds the
     * same status already: no more agreements to make) */
    if (status == ACX_OK) {
        for (int i = 0; i < m->num_params && status == ACX_OK; i++) {
            const acx_param_t *p = m->params[i];
            if (feeds[i].tensor < 0) continue;
            status = read_param(&src, p, &feeds[i], stage + p->shard_offset);
            loaded++;
        }
        status = acx_coll_agree(world, status);
    }
    /* 4. commit, then every copy from the master (collective) */
    if (status == ACX_OK) {
        if (m->shard_dev != NULL)
            status = m->shard_dev->to_device(m->master, stage, bytes, m->ctx.stream);
        else
            memcpy(m->master, stage, bytes);
        /* a device copy that failed on one rank: every rank stops here,
         * before after_step's collectives, which that rank would skip */
        status = acx_coll_agree(world, status);
    }
    if (status == ACX_OK) {
        status = acx_model_after_step(m);
        status = acx_coll_agree(world, status);
    }
    if (status == ACX_OK && world->rank == 0) {
        if (num_skipped > 0)
            ACX_WARN(ACX_SUBSYS_IO,
                     "%s '%s' loaded partly (strict = 0): %d parameter(s) and tensor(s) not "
                     "loaded or not used: %s",
                     src.kind, path, num_skipped, skipped);
        ACX_INFO(ACX_SUBSYS_IO, "loaded %d of %d parameter(s) from %s '%s'", loaded, m->num_params,
                 src.kind, path);
    }
    if (stage != NULL) acx_mem_free(ACX_MEM_TRANSIENT, stage, bytes ? bytes : 1);
    source_close(&src);
    free(feeds);
    return status;
}

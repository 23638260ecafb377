/*
 * io/ckpt_tools.c — a checkpoint file seen from one process: the summary
 * `acx ckpt info` prints, the full check `acx ckpt verify` does, and the
 * export of the model's parameters to safetensors or to a weights-only HDF5
 * file (`acx ckpt export`).
 *
 * Everything here runs in a single process (no MPI_Init, no communicator,
 * no launcher) on the one checkpoint reader: the file is opened by
 * acx_ckpt_open_flags(NULL, ..., ACX_CKPT_OPEN_INSPECT) (every byte of
 * metadata read first, a newer format_version reported rather than
 * refused), its datasets are listed and verified by the reader's
 * whole-file passes (io/ckpt_scan.c), its scalar state is read with the
 * range checks a load makes (io/ckpt_state.c: verify fails on a value a
 * load would refuse), and export reads the parameters through the
 * reader's checked row reads; its weights-only HDF5 output is written by
 * the one writer (io/ckpt_write.c), as acx_model_save_weights writes the
 * format. What stays here is presentation: the text
 * of `info` (which shows any attribute and dataset type as HDF5 stores
 * it, through the open file's handle) and the output formats.
 *
 * Left to others: the layout (io/ckpt_format.h), the reader
 * (io/ckpt_read.c, io/ckpt_scan.c), what the state means
 * (runtime/checkpoint.c), the command-line parsing (cli/acx.c). The format
 * is docs/checkpoint-format.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acx/checkpoint.h"
#include "acx/types.h"
#include "io/checkpoint.h"
#include "io/ckpt_crc.h"
#include "io/ckpt_pkg.h"
#include "io/h5.h"
#include "base/error.h"

/* Rows are copied in blocks of about this many bytes (more when one row is
 * larger), so an export's memory stays bounded whatever the checkpoint size. */
#define BLOCK_BYTES ((size_t)32 << 20)
#define PATH_CAP    4096

/* ---- a growing text buffer ---- */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int failed; /* an allocation failed: the text is incomplete */
} sbuf_t;

static void sb_vprintf(sbuf_t *b, const char *fmt, va_list ap) {
    if (b->failed) return;
    for (;;) {
        size_t room = b->cap - b->len;
        va_list aq;
        va_copy(aq, ap);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, aq);
        va_end(aq);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->s != NULL && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (s == NULL) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
}

/* A JSON string literal (RFC 8259 escapes; bytes >= 0x80 pass through, so
 * UTF-8 names stay UTF-8). */
static void sb_json_str(sbuf_t *b, const char *s) {
    sb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            sb_printf(b, "\\%c", *p);
        else if (*p == '\n')
            sb_printf(b, "\\n");
        else if (*p == '\t')
            sb_printf(b, "\\t");
        else if (*p < 0x20)
            sb_printf(b, "\\u%04x", *p);
        else
            sb_printf(b, "%c", *p);
    }
    sb_printf(b, "\"");
}

/* ---- finding and opening the file ---- */

/* Resolve `path` to a checkpoint file: a file is itself; a directory means
 * its `latest`; a `latest` that is not HDF5 holds the name of the newest
 * checkpoint, relative to its own directory (or absolute). */
static acx_status_t resolve_path(const char *path, char *out, size_t cap) {
    struct stat st;
    char cand[PATH_CAP];
    if (path == NULL || path[0] == '\0')
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint path must not be NULL or empty");
    if (stat(path, &st) != 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    if (snprintf(cand, sizeof cand, "%s", path) >= (int)sizeof cand)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint path too long: '%s'", path);
    if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path);
        if (snprintf(cand, sizeof cand, "%s%slatest", path, n && path[n - 1] == '/' ? "" : "/") >=
            (int)sizeof cand)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint path too long: '%s'", path);
        if (stat(cand, &st) != 0)
            return ACX_ERROR(ACX_ERR_IO, "'%s' is a directory without a readable 'latest' (%s)",
                             path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return ACX_ERROR(ACX_ERR_IO, "checkpoint '%s' is not a regular file", cand);

    const char *base = strrchr(cand, '/');
    base = base ? base + 1 : cand;
    if (strcmp(base, "latest") == 0 && st.st_size < PATH_CAP) {
        acx_h5_lock();
        acx_h5_quiet();
        htri_t is_h5 = H5Fis_hdf5(cand);
        acx_h5_unlock();
        if (is_h5 <= 0) {
            /* a pointer file: one line naming the checkpoint */
            char name[PATH_CAP];
            FILE *f = fopen(cand, "r");
            if (f == NULL)
                return ACX_ERROR(ACX_ERR_IO, "cannot read '%s': %s", cand, strerror(errno));
            size_t n = fread(name, 1, sizeof name - 1, f);
            fclose(f);
            name[n] = '\0';
            name[strcspn(name, "\r\n")] = '\0';
            if (name[0] == '\0')
                return ACX_ERROR(ACX_ERR_FORMAT, "'%s' is empty (expected a checkpoint's name)",
                                 cand);
            int len = name[0] == '/' ? snprintf(out, cap, "%s", name)
                                     : snprintf(out, cap, "%.*s%s", (int)(base - cand), cand, name);
            if (len < 0 || (size_t)len >= cap)
                return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint path too long in '%s'", cand);
            if (stat(out, &st) != 0)
                return ACX_ERROR(ACX_ERR_IO, "'%s' names '%s', which cannot be opened: %s", cand,
                                 out, strerror(errno));
            return ACX_OK;
        }
    }
    if (snprintf(out, cap, "%s", cand) >= (int)cap)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint path too long: '%s'", cand);
    return ACX_OK;
}

/* Read a scalar string attribute (fixed or variable length) into buf[n].
 * Returns 0, or -1 if absent or not a string. Lock held by the caller. */
static int attr_str(hid_t obj, const char *name, char *buf, size_t n) {
    int rc = -1;
    hid_t attr = -1, type = -1, mem = -1;
    if (H5Aexists(obj, name) <= 0) goto out;
    if ((attr = H5Aopen(obj, name, H5P_DEFAULT)) < 0) goto out;
    if ((type = H5Aget_type(attr)) < 0 || H5Tget_class(type) != H5T_STRING) goto out;
    if (H5Tis_variable_str(type) > 0) {
        char *p = NULL;
        if ((mem = H5Tcopy(H5T_C_S1)) < 0 || H5Tset_size(mem, H5T_VARIABLE) < 0) goto out;
        if (H5Aread(attr, mem, &p) < 0) goto out;
        snprintf(buf, n, "%s", p ? p : "");
        H5free_memory(p);
    } else {
        size_t size = H5Tget_size(type);
        char *tmp = calloc(size + 1, 1);
        if (tmp == NULL) goto out;
        if (H5Aread(attr, type, tmp) < 0) {
            free(tmp);
            goto out;
        }
        /* space-padded strings (Fortran style) lose their padding */
        size_t len = strnlen(tmp, size);
        while (len > 0 && H5Tget_strpad(type) == H5T_STR_SPACEPAD && tmp[len - 1] == ' ')
            len--;
        snprintf(buf, n, "%.*s", (int)len, tmp);
        free(tmp);
    }
    rc = 0;
out:
    if (mem >= 0) H5Tclose(mem);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}

/* Read a scalar integer attribute. Returns 0, or -1 if absent or not an
 * integer. Lock held by the caller. */
static int attr_i64(hid_t obj, const char *name, int64_t *v) {
    int rc = -1;
    hid_t attr = -1, type = -1, space = -1;
    if (H5Aexists(obj, name) <= 0) goto out;
    if ((attr = H5Aopen(obj, name, H5P_DEFAULT)) < 0) goto out;
    if ((type = H5Aget_type(attr)) < 0 || H5Tget_class(type) != H5T_INTEGER) goto out;
    if ((space = H5Aget_space(attr)) < 0 || H5Sget_simple_extent_npoints(space) != 1) goto out;
    if (H5Aread(attr, H5T_NATIVE_INT64, v) < 0) goto out;
    rc = 0;
out:
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}

/* Any attribute as text, for display: strings as they are, integers and
 * floats in full precision, enums by member name, short arrays as
 * "[a, b, ...]". Returns 0, or -1 if absent. Lock held by the caller. */
static int attr_text(hid_t obj, const char *name, char *buf, size_t n) {
    if (attr_str(obj, name, buf, n) == 0) return 0;
    int rc = -1;
    hid_t attr = -1, type = -1, space = -1;
    unsigned char *raw = NULL;
    if (H5Aexists(obj, name) <= 0) goto out;
    if ((attr = H5Aopen(obj, name, H5P_DEFAULT)) < 0) goto out;
    if ((type = H5Aget_type(attr)) < 0 || (space = H5Aget_space(attr)) < 0) goto out;
    hssize_t npts = H5Sget_simple_extent_npoints(space);
    H5T_class_t cls = H5Tget_class(type);
    size_t tsize = H5Tget_size(type);
    if (npts < 0) goto out;
    if (cls != H5T_INTEGER && cls != H5T_FLOAT && cls != H5T_ENUM) {
        snprintf(buf, n, "(%lld values of HDF5 class %d)", (long long)npts, (int)cls);
        rc = 0;
        goto out;
    }
    size_t esize = cls == H5T_ENUM ? tsize : 8;
    if ((raw = calloc((size_t)npts + 1, esize)) == NULL) goto out;
    hid_t mem = cls == H5T_INTEGER ? H5T_NATIVE_INT64 : cls == H5T_FLOAT ? H5T_NATIVE_DOUBLE : type;
    if (H5Aread(attr, mem, raw) < 0) goto out;
    sbuf_t sb = {0};
    int show = npts > 16 ? 16 : (int)npts;
    int is_array = H5Sget_simple_extent_ndims(space) > 0;
    if (is_array) sb_printf(&sb, "[");
    for (int k = 0; k < show; k++) {
        if (k) sb_printf(&sb, ", ");
        if (cls == H5T_INTEGER) {
            int64_t v;
            memcpy(&v, raw + 8 * (size_t)k, 8);
            sb_printf(&sb, "%lld", (long long)v);
        } else if (cls == H5T_FLOAT) {
            double v;
            char num[32];
            memcpy(&v, raw + 8 * (size_t)k, 8);
            /* the shortest of %.15g and %.17g that reads back exactly */
            snprintf(num, sizeof num, "%.15g", v);
            if (strtod(num, NULL) != v) snprintf(num, sizeof num, "%.17g", v);
            sb_printf(&sb, "%s", num);
        } else {
            char member[128];
            if (H5Tenum_nameof(type, raw + esize * (size_t)k, member, sizeof member) < 0)
                snprintf(member, sizeof member, "?");
            sb_printf(&sb, "%s", member);
        }
    }
    if (npts > show) sb_printf(&sb, ", ... (%lld values)", (long long)npts);
    if (is_array) sb_printf(&sb, "]");
    snprintf(buf, n, "%s", sb.s && !sb.failed ? sb.s : "?");
    free(sb.s);
    rc = 0;
out:
    free(raw);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}

/* Resolve `path` (resolve_path) and open the checkpoint on the one reader
 * for inspection (acx_ckpt_open_flags: ACX_CKPT_OPEN_INSPECT). */
static acx_status_t open_ckpt(const char *path, char *real, size_t cap, acx_ckpt_file_t **f_p) {
    ACX_CHECK(resolve_path(path, real, cap));
    return acx_ckpt_open_flags(NULL, real, ACX_CKPT_OPEN_INSPECT, f_p);
}

static void shape_text(const acx_ckpt_shape_t *s, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int k = 0; k < s->ndim && len < n; k++)
        len += (size_t)snprintf(buf + len, n - len, "%s%llu", k ? ", " : "",
                                (unsigned long long)s->dims[k]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

/* "float32", "bfloat16", "int16", "string", ... for any HDF5 type. */
static void type_text(hid_t type, char *buf, size_t n) {
    int dt = acx_h5_to_dtype(type);
    if (dt >= 0) {
        snprintf(buf, n, "%s", acx_dtype_name((acx_dtype_t)dt));
        return;
    }
    size_t size = H5Tget_size(type);
    switch (H5Tget_class(type)) {
    case H5T_INTEGER:
        snprintf(buf, n, "%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", 8 * size);
        break;
    case H5T_FLOAT: snprintf(buf, n, "float(%zu bytes)", size); break;
    case H5T_STRING: snprintf(buf, n, "string"); break;
    case H5T_ENUM: snprintf(buf, n, "enum"); break;
    case H5T_COMPOUND: snprintf(buf, n, "compound"); break;
    case H5T_OPAQUE: snprintf(buf, n, "opaque(%zu bytes)", size); break;
    default: snprintf(buf, n, "other(%zu bytes)", size); break;
    }
}

/* ---- acx_checkpoint_info ---- */

typedef struct attr_walk {
    sbuf_t *sb;
    int n;
} attr_walk_t;

/* " name=value" for each attribute of a group; long strings (the config's
 * YAML) by their length only. */
static herr_t attr_cb(hid_t obj, const char *name, const H5A_info_t *info, void *data) {
    attr_walk_t *w = data;
    char v[256];
    (void)info;
    /* a long string's dataset's checksums: the table's last column says it */
    if (strncmp(name, ACX_CKPT_CRC_ATTR, strlen(ACX_CKPT_CRC_ATTR)) == 0) return 0;
    /* /optimizer's parameter groups: a section of their own (param_groups) */
    if (strncmp(name, ACX_CKPT_PARAM_GROUP_PREFIX, strlen(ACX_CKPT_PARAM_GROUP_PREFIX)) == 0 ||
        strcmp(name, ACX_CKPT_ATTR_PARAM_GROUPS) == 0)
        return 0;
    if (attr_str(obj, name, v, sizeof v) == 0 && strlen(v) + 1 >= sizeof v) {
        hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = a >= 0 ? H5Aget_type(a) : -1;
        sb_printf(w->sb, " %s=(text, %zu bytes)", name, t >= 0 ? H5Tget_size(t) - 1 : 0);
        if (t >= 0) H5Tclose(t);
        if (a >= 0) H5Aclose(a);
    } else if (attr_text(obj, name, v, sizeof v) == 0) {
        sb_printf(w->sb, " %s=%s", name, v);
    }
    w->n++;
    H5Eclear2(H5E_DEFAULT);
    return 0;
}

/* "/optimizer: type=AdamW step=8 lr=0.001 ..." for each group of the
 * layout that carries attributes. Lock held. */
static void group_attrs(hid_t file, sbuf_t *sb) {
    static const char *const groups[] = {ACX_CKPT_GROUP_OPTIMIZER, ACX_CKPT_GROUP_SCHEDULER,
                                         ACX_CKPT_GROUP_DATALOADER, ACX_CKPT_GROUP_CONFIG};
    for (size_t k = 0; k < sizeof groups / sizeof groups[0]; k++) {
        if (H5Lexists(file, groups[k], H5P_DEFAULT) <= 0) {
            H5Eclear2(H5E_DEFAULT);
            continue;
        }
        hid_t g = H5Oopen(file, groups[k], H5P_DEFAULT);
        if (g < 0) {
            H5Eclear2(H5E_DEFAULT);
            continue;
        }
        sbuf_t line = {0};
        attr_walk_t w = {.sb = &line, .n = 0};
        hsize_t idx = 0;
        if (H5Aiterate2(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, attr_cb, &w) < 0) {
            /* creation order not tracked for attributes: by name */
            H5Eclear2(H5E_DEFAULT);
            free(line.s);
            line = (sbuf_t){0};
            w.n = 0;
            idx = 0;
            H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_cb, &w);
            H5Eclear2(H5E_DEFAULT);
        }
        if (w.n > 0 && line.s != NULL) sb_printf(sb, "%s:%s\n", groups[k], line.s);
        free(line.s);
        H5Oclose(g);
    }
}

/* "parameter groups: 2" and a line per group: its name, weight_decay,
 * lr_scale and members (the rest in the default group). A file that
 * predates groups says so. */
static void param_groups_text(acx_ckpt_file_t *f, sbuf_t *sb) {
    if (!acx_ckpt_exists(f, ACX_CKPT_GROUP_OPTIMIZER)) return;
    int has = 0, n = 0;
    acx_ckpt_param_group_t *g = NULL;
    if (acx_ckpt_read_param_groups(f, &has, &n, &g) != ACX_OK) {
        sb_printf(sb, "parameter groups: (unreadable: %s)\n", acx_last_error());
        return;
    }
    if (!has) {
        sb_printf(sb, "parameter groups: (none recorded: every parameter in the default group)\n");
        return;
    }
    sb_printf(sb, "parameter groups: %d (other parameters: the default group)\n", n);
    for (int k = 0; k < n; k++) {
        sb_printf(sb, "  %s: weight_decay=%.17g lr_scale=%.17g, %d parameter(s):", g[k].name,
                  g[k].weight_decay, g[k].lr_scale, g[k].num_params);
        for (int j = 0; j < g[k].num_params; j++)
            sb_printf(sb, " %s", g[k].params[j]);
        sb_printf(sb, "\n");
    }
    acx_ckpt_free_param_groups(g, n);
}

/* The parameter datasets: everything under /model. */
static int is_model_path(const char *p) {
    return strncmp(p, ACX_CKPT_GROUP_MODEL "/", sizeof ACX_CKPT_GROUP_MODEL) == 0;
}

ACX_API acx_status_t acx_checkpoint_info(const char *path, char **text_p) {
    if (text_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_checkpoint_info: text_p must not be NULL");
    char real[PATH_CAP];
    acx_ckpt_file_t *f;
    ACX_CHECK(open_ckpt(path, real, sizeof real, &f));
    int64_t version = acx_ckpt_version(f);
    /* the presentation below reads what HDF5 stores, any type, through
     * the open file's handle (its metadata was all read at open) */
    hid_t file = f->file;

    acx_status_t status = ACX_OK;
    struct {
        char **paths;
        int count;
    } l = {0};
    sbuf_t sb = {0}, groups = {0};
    char v[1024], what[PATH_CAP + 256];
    struct stat st;
    /* through the reader's calls, which take the HDF5 lock themselves */
    param_groups_text(f, &groups);
    acx_h5_lock();
    ACX_CHECK_GOTO(acx_ckpt_list_all(f, "/", &l.count, &l.paths), status, out);

    sb_printf(&sb, "checkpoint: %s\n", real);
    sb_printf(&sb, "format: %s version %lld%s\n", ACX_CKPT_FORMAT, (long long)version,
              version > ACX_CKPT_FORMAT_VERSION ? " (newer than this acx reads)" : "");
    /* the root attributes the writer defines, in a fixed order */
    static const struct {
        const char *attr, *label;
    } known[] = {{ACX_CKPT_ATTR_STEP, "step"},
                 {ACX_CKPT_ATTR_EPOCH, "epoch"},
                 {ACX_CKPT_ATTR_WORLD_SIZE, "world size at save"},
                 {ACX_CKPT_ATTR_SHARDING_STRATEGY, "sharding strategy"},
                 {ACX_CKPT_ATTR_MIXED_PRECISION, "mixed precision"},
                 {ACX_CKPT_ATTR_ACX_VERSION, "written by acx"},
                 {ACX_CKPT_ATTR_CREATED, "created"}};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        sb_printf(&sb, "%s: %s\n", known[k].label,
                  attr_text(file, known[k].attr, v, sizeof v) == 0 ? v : "(absent)");

    /* per-dataset lines, and the totals */
    sbuf_t rows = {0};
    int64_t nparams = 0, param_elems = 0, param_bytes = 0, data_bytes = 0;
    size_t width = 8;
    for (int k = 0; k < l.count; k++)
        if (strlen(l.paths[k]) > width) width = strlen(l.paths[k]);
    for (int k = 0; k < l.count && status == ACX_OK; k++) {
        hid_t dset = -1, type = -1, dcpl = -1;
        acx_ckpt_shape_t s;
        char shp[256], tname[64];
        snprintf(what, sizeof what, "dataset %s in '%s'", l.paths[k], real);
        ACX_H5_CHECK_GOTO(dset = H5Dopen2(file, l.paths[k], H5P_DEFAULT), what, status, next);
        ACX_H5_CHECK_GOTO(type = H5Dget_type(dset), what, status, next);
        ACX_H5_CHECK_GOTO(dcpl = H5Dget_create_plist(dset), what, status, next);
        ACX_H5_CHECK_GOTO(acx_ckpt_dataset_shape(dset, &s), what, status, next);
        shape_text(&s, shp, sizeof shp);
        type_text(type, tname, sizeof tname);
        hsize_t stored = H5Dget_storage_size(dset);
        data_bytes += (int64_t)stored;
        /* the checksum: CRC-32 attributes (version 2: "crc32/B" with the
         * block size), or the filters (Fletcher-32 on every non-empty
         * dataset of version 1) */
        char filt[128] = "";
        int64_t block = 0;
        if (attr_i64(dset, ACX_CKPT_CRC_BLOCK_BYTES_ATTR, &block) == 0 &&
            H5Aexists(dset, ACX_CKPT_CRC_BLOCKS_ATTR) > 0) {
            if (block % 1024 == 0)
                snprintf(filt, sizeof filt, "crc32/%lldKiB", (long long)(block / 1024));
            else
                snprintf(filt, sizeof filt, "crc32/%lldB", (long long)block);
        }
        H5Eclear2(H5E_DEFAULT);
        int nf = filt[0] == '\0' ? H5Pget_nfilters(dcpl) : 0;
        for (int fi = 0; fi < nf; fi++) {
            unsigned flags;
            size_t nelem = 0;
            char fname[64] = "";
            H5Z_filter_t id =
                H5Pget_filter2(dcpl, (unsigned)fi, &flags, &nelem, NULL, sizeof fname, fname, NULL);
            size_t len = strlen(filt);
            snprintf(filt + len, sizeof filt - len, "%s%s", len ? "," : "",
                     id == H5Z_FILTER_FLETCHER32 ? "fletcher32"
                     : id == H5Z_FILTER_DEFLATE  ? "deflate"
                     : id == H5Z_FILTER_SHUFFLE  ? "shuffle"
                                                 : (fname[0] ? fname : "filter"));
        }
        sb_printf(&rows, "  %-*s  %-8s  %-16s  %s\n", (int)width, l.paths[k], tname, shp,
                  filt[0] ? filt : "-");
        if (is_model_path(l.paths[k])) {
            nparams++;
            param_elems += (int64_t)s.numel;
            param_bytes += (int64_t)(s.numel * H5Tget_size(type));
        }
    next:
        if (dcpl >= 0) H5Pclose(dcpl);
        if (type >= 0) H5Tclose(type);
        if (dset >= 0) H5Dclose(dset);
    }
    if (status != ACX_OK) {
        free(rows.s);
        goto out;
    }
    sb_printf(&sb, "parameters: %lld tensors, %lld elements, %lld bytes\n", (long long)nparams,
              (long long)param_elems, (long long)param_bytes);
    sb_printf(&sb, "file: %lld bytes, %d datasets, %lld bytes of data\n",
              stat(real, &st) == 0 ? (long long)st.st_size : -1LL, l.count, (long long)data_bytes);
    group_attrs(file, &sb);
    sb_printf(&sb, "%s", groups.s != NULL ? groups.s : "");
    sb_printf(&sb, "datasets (name, dtype, shape, checksum):\n%s", rows.s ? rows.s : "");
    free(rows.s);
    if (sb.failed || groups.failed) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for the description of '%s'", real);
        goto out;
    }
    *text_p = sb.s;
    sb.s = NULL;
out:
    free(sb.s);
    free(groups.s);
    free(l.paths);
    acx_h5_unlock();
    acx_ckpt_close(f);
    return status;
}

/* ---- acx_checkpoint_verify ---- */

ACX_API acx_status_t acx_checkpoint_verify(const char *path) {
    return acx_checkpoint_verify_flags(path, 0);
}

ACX_API acx_status_t acx_checkpoint_verify_flags(const char *path, unsigned flags) {
    if ((flags & ~(unsigned)ACX_VERIFY_ALLOW_UNVERIFIED) != 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_checkpoint_verify_flags: unknown flags 0x%x",
                         flags);
    char real[PATH_CAP];
    acx_ckpt_file_t *f;
    ACX_CHECK(open_ckpt(path, real, sizeof real, &f));
    acx_ckpt_allow_unverified(f, (flags & ACX_VERIFY_ALLOW_UNVERIFIED) != 0);
    acx_status_t status = ACX_OK;
    char **paths = NULL;
    int count = 0;
    int64_t v;
    acx_ckpt_state_t *st = NULL;

    /* structure: what every version-1 checkpoint holds */
    if (acx_ckpt_get_i64(f, "/", ACX_CKPT_ATTR_STEP, &v) != ACX_OK) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' lacks the integer root attribute step",
                           real);
        goto out;
    }
    if (!acx_ckpt_exists(f, ACX_CKPT_GROUP_MODEL)) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no /model group", real);
        goto out;
    }
    /* the values a load checks before it uses them, with the same
     * messages (a newer version's layout is not this acx's to judge) */
    if (acx_ckpt_version(f) <= ACX_CKPT_FORMAT_VERSION) {
        st = malloc(sizeof *st);
        if (st == NULL) {
            status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory to check '%s'", real);
            goto out;
        }
        ACX_CHECK_GOTO(acx_ckpt_state_read(f, st), status, out);
    }
    /* every byte of every dataset against its checksum */
    ACX_CHECK_GOTO(acx_ckpt_list_all(f, "/", &count, &paths), status, out);
    for (int k = 0; k < count && status == ACX_OK; k++)
        status = acx_ckpt_verify_dataset(f, paths[k]);
out:
    acx_ckpt_state_free(st);
    free(st);
    free(paths);
    acx_ckpt_close(f);
    return status;
}

/* ---- acx_checkpoint_export ---- */

/* The safetensors output file, written under a temporary name (the HDF5
 * output is the writer's: export_hdf5). */
typedef struct out_file {
    FILE *f;
    char *tmp; /* out_path + ".tmp" */
    const char *final;
} out_file_t;

static acx_status_t out_open(out_file_t *o, const char *out_path) {
    size_t n = strlen(out_path);
    o->final = out_path;
    o->f = NULL;
    if ((o->tmp = malloc(n + 5)) == NULL)
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for a path");
    memcpy(o->tmp, out_path, n);
    memcpy(o->tmp + n, ".tmp", 5);
    return ACX_OK;
}

/* Rename tmp to its final name and sync the directory (best effort: some
 * file systems refuse to fsync a directory). On failure remove tmp. */
static acx_status_t out_commit(out_file_t *o, acx_status_t status) {
    if (status == ACX_OK && rename(o->tmp, o->final) != 0)
        status = ACX_ERROR(ACX_ERR_IO, "rename('%s', '%s') failed: %s", o->tmp, o->final,
                           strerror(errno));
    if (status == ACX_OK) {
        char dir[PATH_CAP];
        const char *slash = strrchr(o->final, '/');
        if (slash == NULL)
            snprintf(dir, sizeof dir, ".");
        else
            snprintf(dir, sizeof dir, "%.*s", (int)(slash - o->final) + (slash == o->final),
                     o->final);
        int fd = open(dir, O_RDONLY | O_DIRECTORY);
        if (fd >= 0) {
            (void)fsync(fd);
            close(fd);
        }
    } else {
        unlink(o->tmp);
    }
    free(o->tmp);
    o->tmp = NULL;
    return status;
}

/* One parameter to export: its name (path under /model) and shape. */
typedef struct param_entry {
    const char *dpath; /* "/model/fc1.weight" (owned by the name list) */
    const char *name;  /* "fc1.weight" */
    int ndim;
    int64_t dims[ACX_MAX_DIMS];
    int64_t numel;
    acx_dtype_t dtype;
} param_entry_t;

static int cmp_param_name(const void *a, const void *b) {
    return strcmp(((const param_entry_t *)a)->name, ((const param_entry_t *)b)->name);
}

/* The parameters under /model with their shapes; each must be a float
 * dataset (converted to float32 on export). *paths_p owns the names. */
static acx_status_t collect_params(acx_ckpt_file_t *f, const char *real, char ***paths_p,
                                   int *count_p, param_entry_t **params_p) {
    acx_status_t status = ACX_OK;
    param_entry_t *params = NULL;
    char **paths = NULL;
    int count = 0;
    if (!acx_ckpt_exists(f, ACX_CKPT_GROUP_MODEL))
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no /model group", real);
    ACX_CHECK(acx_ckpt_list_all(f, ACX_CKPT_GROUP_MODEL, &count, &paths));
    if (count == 0) {
        free(paths);
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no parameters under /model", real);
    }
    if ((params = calloc((size_t)count, sizeof *params)) == NULL) {
        free(paths);
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for %d parameters", count);
    }
    for (int k = 0; k < count && status == ACX_OK; k++) {
        param_entry_t *p = &params[k];
        p->dpath = paths[k];
        p->name = paths[k] + sizeof ACX_CKPT_GROUP_MODEL;
        status = acx_ckpt_shape(f, p->dpath, &p->ndim, p->dims, &p->dtype);
        if (status != ACX_OK) break;
        if (p->dtype != ACX_DTYPE_FLOAT32 && p->dtype != ACX_DTYPE_FLOAT64 &&
            p->dtype != ACX_DTYPE_FLOAT16 && p->dtype != ACX_DTYPE_BFLOAT16)
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "parameter %s in '%s' is %s; parameters are floating point",
                               p->dpath, real, acx_dtype_name(p->dtype));
        else if (p->ndim < 1)
            status = ACX_ERROR(ACX_ERR_FORMAT, "parameter %s in '%s' is a scalar dataset", p->dpath,
                               real);
        p->numel = 1;
        for (int d = 0; d < p->ndim; d++)
            p->numel *= p->dims[d];
    }
    if (status != ACX_OK) {
        free(params);
        free(paths);
        return status;
    }
    *paths_p = paths;
    *count_p = count;
    *params_p = params;
    return ACX_OK;
}

static acx_status_t write_block(const void *buf, size_t bytes, void *ctx) {
    out_file_t *o = ctx;
    if (fwrite(buf, 1, bytes, o->f) != bytes)
        return ACX_ERROR(ACX_ERR_IO, "writing '%s' failed: %s", o->tmp, strerror(errno));
    return ACX_OK;
}

/* Copy parameter p as float32, row block by row block, to fn: each block
 * read through the reader's checked row read (a float32 parameter's CRC-32
 * blocks checked as a load checks them; another float type verified
 * whole first, then converted). */
typedef acx_status_t (*rows_fn_t)(const float *rows, int64_t row0, int64_t nrows, void *ctx);

static acx_status_t copy_param(acx_ckpt_file_t *f, const param_entry_t *p, rows_fn_t fn,
                               void *ctx) {
    acx_status_t status = ACX_OK;
    if (p->numel == 0) return ACX_OK;
    if (p->dtype != ACX_DTYPE_FLOAT32) ACX_CHECK(acx_ckpt_verify_dataset(f, p->dpath));
    int64_t rows = p->dims[0], row = p->numel / rows;
    int64_t step = (int64_t)(BLOCK_BYTES / (4 * (size_t)row));
    if (step == 0) step = 1;
    if (step > rows) step = rows;
    float *buf = malloc((size_t)(step * row) * sizeof *buf);
    if (buf == NULL)
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory to copy parameter %s", p->dpath);
    for (int64_t r = 0; r < rows && status == ACX_OK; r += step) {
        int64_t n = rows - r < step ? rows - r : step;
        status = acx_ckpt_read_rows_f32(f, p->dpath, r, n, buf);
        if (status == ACX_OK) status = fn(buf, r, n, ctx);
    }
    free(buf);
    return status;
}

static acx_status_t safetensors_rows(const float *rows, int64_t row0, int64_t nrows, void *ctx) {
    (void)row0;
    out_file_t *o = ((void **)ctx)[0];
    const param_entry_t *p = ((void **)ctx)[1];
    /* float32 little-endian, as safetensors' F32 (x86: native) */
    return write_block(rows, (size_t)(nrows * (p->numel / p->dims[0])) * sizeof(float), o);
}

/* safetensors (huggingface/safetensors, tensor.rs): an 8-byte little-endian
 * header length N; N bytes of JSON, padded with spaces to a multiple of 8
 * so the data that follows is aligned; then the tensors back to back.
 * Header: "__metadata__" (string -> string) first, then one entry per
 * tensor {"dtype", "shape", "data_offsets": [begin, end)} with offsets
 * relative to the first byte after the header, in the order of the data.
 * The reference writer orders tensors by decreasing dtype alignment, then
 * by name; all ours are F32, so by name (byte order, as Rust's str does),
 * and we write the JSON compactly as serde_json does. */
static acx_status_t export_safetensors(acx_ckpt_file_t *f, const char *real, param_entry_t *params,
                                       int n, out_file_t *o) {
    acx_status_t status = ACX_OK;
    sbuf_t h = {0};
    char v[256];
    int64_t step = 0;

    qsort(params, (size_t)n, sizeof *params, cmp_param_name);
    for (int k = 1; k < n; k++)
        if (strcmp(params[k - 1].name, params[k].name) == 0)
            return ACX_ERROR(ACX_ERR_FORMAT, "parameter name '%s' appears twice in '%s'",
                             params[k].name, real);

    /* metadata keys sorted, so the header is the same for the same input */
    sb_printf(&h, "{\"__metadata__\":{\"acx_version\":");
    sb_json_str(&h, acx_ckpt_get_str(f, "/", ACX_CKPT_ATTR_ACX_VERSION, v, sizeof v) == ACX_OK
                        ? v
                        : acx_version());
    sb_printf(&h, ",\"format\":\"pt\",\"source\":");
    sb_json_str(&h, real);
    sb_printf(&h, ",\"step\":");
    if (acx_ckpt_get_i64(f, "/", ACX_CKPT_ATTR_STEP, &step) == ACX_OK)
        snprintf(v, sizeof v, "%lld", (long long)step);
    else
        v[0] = '\0';
    sb_json_str(&h, v);
    sb_printf(&h, "}");
    uint64_t offset = 0;
    for (int k = 0; k < n; k++) {
        const param_entry_t *s = &params[k];
        sb_printf(&h, ",");
        sb_json_str(&h, params[k].name);
        sb_printf(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < s->ndim; d++)
            sb_printf(&h, "%s%llu", d ? "," : "", (unsigned long long)s->dims[d]);
        uint64_t end = offset + 4 * (uint64_t)s->numel;
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                  (unsigned long long)end);
        offset = end;
    }
    sb_printf(&h, "}");
    while (!h.failed && h.len % 8 != 0)
        sb_printf(&h, " ");
    if (h.failed) return ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for the safetensors header");

    unsigned char len8[8];
    for (int b = 0; b < 8; b++)
        len8[b] = (unsigned char)((uint64_t)h.len >> (8 * b));
    ACX_CHECK_GOTO(write_block(len8, 8, o), status, out);
    ACX_CHECK_GOTO(write_block(h.s, h.len, o), status, out);
    for (int k = 0; k < n && status == ACX_OK; k++) {
        void *ctx[2] = {o, &params[k]};
        status = copy_param(f, &params[k], safetensors_rows, ctx);
    }
out:
    free(h.s);
    return status;
}

/* Weights-only HDF5, the layout of acx_model_save_weights (io/weights.c;
 * io/ckpt_format.h): root attrs format = "acx-weights", step, source; one
 * float32 dataset per parameter at /<name> with its true shape, in the
 * checkpoint's order. Written by acx_weights_write (io/weights.c: the
 * weights file's attributes, the one writer, this process alone), whose
 * row source reads each piece of a parameter through the reader's checked
 * row read: memory stays at one piece, whatever the model's size. */
typedef struct export_src {
    acx_ckpt_file_t *f;
    const param_entry_t *p;
} export_src_t;

static acx_status_t export_fill(void *ctx, int64_t row0, int64_t nrows, void *dst) {
    const export_src_t *src = ctx;
    return acx_ckpt_read_rows_f32(src->f, src->p->dpath, row0, nrows, dst);
}

static acx_status_t export_hdf5(acx_ckpt_file_t *f, const char *real, const param_entry_t *params,
                                int n, const char *out_path) {
    acx_status_t status = ACX_OK;
    int64_t step = 0;
    (void)acx_ckpt_get_i64(f, "/", ACX_CKPT_ATTR_STEP, &step);
    acx_ckpt_tensor_t *t = calloc((size_t)n, sizeof *t);
    export_src_t *src = calloc((size_t)n, sizeof *src);
    char(*paths)[PATH_CAP] = calloc((size_t)n, sizeof *paths);
    if (t == NULL || src == NULL || paths == NULL) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory to describe %d parameters", n);
        goto out;
    }
    for (int k = 0; k < n && status == ACX_OK; k++) {
        const param_entry_t *p = &params[k];
        /* another float type is converted: its stored bytes are verified
         * whole first (acx_ckpt_read_rows_f32) */
        if (p->dtype != ACX_DTYPE_FLOAT32)
            ACX_CHECK_GOTO(acx_ckpt_verify_dataset(f, p->dpath), status, out);
        snprintf(paths[k], sizeof paths[k], "/%s", p->name);
        src[k] = (export_src_t){.f = f, .p = p};
        t[k] = (acx_ckpt_tensor_t){.path = paths[k],
                                   .dtype = ACX_DTYPE_FLOAT32,
                                   .ndim = p->ndim,
                                   .io_begin = 0,
                                   .io_end = p->dims[0],
                                   .fill = export_fill,
                                   .fill_ctx = &src[k]};
        memcpy(t[k].shape, p->dims, (size_t)p->ndim * sizeof *p->dims);
    }
    status = acx_weights_write(NULL, out_path, t, n, step, real);
out:
    free(paths);
    free(src);
    free(t);
    return status;
}

ACX_API acx_status_t acx_checkpoint_export(const char *path, const char *out_path,
                                           acx_export_format_t format) {
    if (out_path == NULL || out_path[0] == '\0')
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_checkpoint_export: out_path must not be NULL "
                                              "or empty");
    if (format != ACX_EXPORT_SAFETENSORS && format != ACX_EXPORT_HDF5)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_checkpoint_export: format %d is not ACX_EXPORT_SAFETENSORS (0) or "
                         "ACX_EXPORT_HDF5 (1)",
                         (int)format);
    /* the rename would replace a device or a directory's entry with a file */
    ACX_CHECK(acx_io_check_target(out_path));
    char real[PATH_CAP];
    acx_ckpt_file_t *f;
    ACX_CHECK(open_ckpt(path, real, sizeof real, &f));

    acx_status_t status = ACX_OK;
    char **paths = NULL;
    int count = 0;
    param_entry_t *params = NULL;
    out_file_t o = {0};
    /* export interprets the layout: only the versions this acx reads */
    int64_t version = acx_ckpt_version(f);
    if (version > ACX_CKPT_FORMAT_VERSION) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "checkpoint '%s' has format_version %lld; this acx reads versions 1 "
                           "to %d",
                           real, (long long)version, ACX_CKPT_FORMAT_VERSION);
        goto out;
    }
    ACX_CHECK_GOTO(collect_params(f, real, &paths, &count, &params), status, out);
    if (format == ACX_EXPORT_HDF5) {
        /* the writer's own temporary file, fsync and rename */
        status = export_hdf5(f, real, params, count, out_path);
        goto out;
    }
    ACX_CHECK_GOTO(out_open(&o, out_path), status, out);
    if ((o.f = fopen(o.tmp, "wb")) == NULL) {
        status = ACX_ERROR(ACX_ERR_IO, "cannot create '%s': %s", o.tmp, strerror(errno));
    } else {
        status = export_safetensors(f, real, params, count, &o);
        if (status == ACX_OK && (fflush(o.f) != 0 || fsync(fileno(o.f)) != 0))
            status = ACX_ERROR(ACX_ERR_IO, "writing '%s' failed: %s", o.tmp, strerror(errno));
        if (fclose(o.f) != 0 && status == ACX_OK)
            status = ACX_ERROR(ACX_ERR_IO, "closing '%s' failed: %s", o.tmp, strerror(errno));
    }
    status = out_commit(&o, status);
out:
    free(params);
    free(paths);
    acx_ckpt_close(f);
    return status;
}

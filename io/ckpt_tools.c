/*
 * io/ckpt_tools.c — a checkpoint file seen from one process: the summary
 * `acx ckpt info` prints, the full read `acx ckpt verify` does, and the
 * export of the model's parameters to safetensors or to a weights-only HDF5
 * file (`acx ckpt export`).
 *
 * Everything here runs in a single process with HDF5's default sec2 driver:
 * no MPI_Init, no communicator, no launcher. The file is read through HDF5's
 * own view of it (links, dataspaces, datatypes, filters), not through the
 * collective reader of io/checkpoint.c, so these tools also inspect files
 * that reader would refuse (a newer format version is reported, not hidden).
 *
 * Checksums. Format version 2 stores CRC-32s of fixed-size blocks of every
 * dataset's bytes in its attributes (io/ckpt_crc.h): verify reads each
 * dataset front to back in the file's own type (so the bytes are the
 * stored ones) and checks every block as it passes, and export checks the
 * parameters the same way while it copies them. Version 1 used HDF5's
 * Fletcher-32 filter, which HDF5 checks itself on every read of a chunk:
 * for those files reading every dataset completely is the verification.
 * Either way a failure names the dataset. (Metadata carries HDF5's own
 * checksums, checked when the objects are opened.)
 *
 * Left to others: the layout itself and the collective writer/reader
 * (io/checkpoint.c), what the state means (runtime/checkpoint.c), the
 * command-line parsing (cli/acx.c). The format is docs/checkpoint-format.md.
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
#include "io/h5.h"
#include "base/error.h"

/* Rows are read in blocks of about this many bytes (more when one row is
 * larger), so a tool's memory stays bounded whatever the checkpoint size. */
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
static acx_status_t walk_metadata(hid_t file, const char *real) {
    meta_walk_t w = {.real = real, .status = ACX_OK};
    if (walk_object(file, "/", HADDR_UNDEF, &w) != ACX_OK) return w.status;
    if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, walk_link_cb, &w) < 0 && w.status == ACX_OK) {
        char what[PATH_CAP + 64];
        snprintf(what, sizeof what, "the groups of '%s'", real);
        w.status = acx_error_h5("H5Lvisit", what, __FILE__, __LINE__);
    }
    return w.status;
}

/* Open a checkpoint read-only with the sec2 driver and check that it is one:
 * the root attribute format = "acx-checkpoint". A newer format_version is
 * refused only when `strict_version` (export, which interprets the layout);
 * info and verify report it. Takes the HDF5 lock, which the caller releases
 * after closing *file_p. On failure the lock is released. */
static acx_status_t open_ckpt(const char *path, int strict_version, char *real, size_t cap,
                              hid_t *file_p, int64_t *version_p) {
    acx_status_t status = resolve_path(path, real, cap);
    if (status != ACX_OK) return status;

    hid_t fapl = -1, file = -1;
    char what[PATH_CAP + 64], fmt[128];
    int64_t version = -1;
    snprintf(what, sizeof what, "checkpoint '%s'", real);
    acx_h5_lock();
    acx_h5_quiet();
    htri_t is_h5 = H5Fis_hdf5(real);
    H5Eclear2(H5E_DEFAULT);
    if (is_h5 <= 0) {
        status =
            ACX_ERROR(ACX_ERR_FORMAT, "'%s' is not an HDF5 file (an acx checkpoint is one)", real);
        goto err;
    }
    ACX_H5_CHECK_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), what, status, err);
    ACX_H5_CHECK_GOTO(H5Pset_fapl_sec2(fapl), what, status, err);
    if ((file = H5Fopen(real, H5F_ACC_RDONLY, fapl)) < 0) {
        /* in acx's terms, keeping HDF5's words: a short file is an I/O
         * matter (an interrupted copy), a bad signature or metadata
         * checksum a damaged one */
        char msg[ACX_ERRMSG_MAX];
        status = acx_error_h5("H5Fopen", what, __FILE__, __LINE__);
        const char *inner = acx_last_error(), *tail = strstr(inner, " failed: ");
        snprintf(msg, sizeof msg, "%s", tail ? tail + strlen(" failed: ") : inner);
        if (strstr(msg, "truncated") != NULL)
            status = ACX_ERROR(ACX_ERR_IO, "checkpoint '%s' is truncated: %s", real, msg);
        else if (!acx_h5_last_damaged() &&
                 (strstr(msg, "signature") != NULL || strstr(msg, "checksum") != NULL))
            status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' is damaged: %s", real, msg);
        goto err;
    }
    if ((status = walk_metadata(file, real)) != ACX_OK) goto err;
    if (attr_str(file, "format", fmt, sizeof fmt) != 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "'%s' is not an acx checkpoint: it has no root attribute "
                           "format = \"%s\"",
                           real, ACX_CKPT_FORMAT);
        goto err;
    }
    if (strcmp(fmt, ACX_CKPT_FORMAT) != 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "'%s' is not an acx checkpoint: its format is \"%s\", expected \"%s\"%s",
                           real, fmt, ACX_CKPT_FORMAT,
                           strcmp(fmt, "acx-weights") == 0 ? " (it is a weights file)" : "");
        goto err;
    }
    if (attr_i64(file, "format_version", &version) != 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "checkpoint '%s' lacks the integer root attribute format_version", real);
        goto err;
    }
    if (version < 1 || (strict_version && version > ACX_CKPT_FORMAT_VERSION)) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "checkpoint '%s' has format_version %lld; this acx reads versions 1 "
                           "to %d",
                           real, (long long)version, ACX_CKPT_FORMAT_VERSION);
        goto err;
    }
    H5Pclose(fapl);
    *file_p = file;
    *version_p = version;
    return ACX_OK;
err:
    if (file >= 0) H5Fclose(file);
    if (fapl >= 0) H5Pclose(fapl);
    acx_h5_unlock();
    return status;
}

static void close_ckpt(hid_t file) {
    H5Fclose(file);
    acx_h5_unlock();
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

/* A dataset's shape and element count. Lock held. */
typedef struct ds_shape {
    int ndim;
    hsize_t dims[H5S_MAX_RANK];
    hsize_t numel;
} ds_shape_t;

static int get_shape(hid_t dset, ds_shape_t *s) {
    hid_t space = H5Dget_space(dset);
    if (space < 0) return -1;
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd < 0 || nd > H5S_MAX_RANK || H5Sget_simple_extent_dims(space, s->dims, NULL) < 0) {
        H5Sclose(space);
        return -1;
    }
    H5S_class_t cls = H5Sget_simple_extent_type(space);
    H5Sclose(space);
    s->ndim = nd;
    s->numel = cls == H5S_NULL ? 0 : 1;
    for (int k = 0; k < nd; k++)
        s->numel *= s->dims[k];
    return 0;
}

static void shape_text(const ds_shape_t *s, char *buf, size_t n) {
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

/* ---- checksums (format version 2) ---- */

/* The CRC-32 check of one dataset read whole, front to back. */
typedef struct crc_reader {
    int on; /* the dataset carries checksum attributes */
    acx_ckpt_crc_t crc;
    acx_ckpt_crc_check_t k;
    char what[PATH_CAP + 512]; /* "dataset /model/x of 'f.h5' is damaged" */
} crc_reader_t;

/* Set up `r` for dataset `dset` of a file of format `version`: on when
 * it carries the CRC-32 attributes (version 2, or a newer version that
 * still writes ours); off when HDF5 checks it itself (Fletcher-32 chunks:
 * version 1) or it is empty. A dataset with neither cannot be verified
 * (its attributes deleted, or a file not written by acx): ACX_ERR_FORMAT
 * naming it, unless `allow_unverified`, and then a loud warning. Lock
 * held. */
static acx_status_t crc_reader_open(hid_t dset, int64_t version, const char *dpath,
                                    const char *real, int allow_unverified, crc_reader_t *r) {
    char what[PATH_CAP + 256];
    hid_t type = -1, dcpl = -1;
    int present = 0;
    ds_shape_t s;
    r->on = 0;
    snprintf(what, sizeof what, "dataset %s of '%s'", dpath, real);
    if (get_shape(dset, &s) < 0 || (type = H5Dget_type(dset)) < 0)
        return acx_error_h5("H5Dget_space", what, __FILE__, __LINE__);
    uint64_t bytes = (uint64_t)s.numel * H5Tget_size(type);
    H5Tclose(type);
    ACX_CHECK(acx_ckpt_crc_read_attrs(dset, bytes, what, &present, &r->crc));
    if (present) {
        r->on = 1;
        snprintf(r->what, sizeof r->what, "%s is damaged", what);
        acx_ckpt_crc_check_init(&r->k, &r->crc, r->what, 0);
        return ACX_OK;
    }
    unsigned flags = 0;
    size_t nelem = 0;
    int fletcher =
        (dcpl = H5Dget_create_plist(dset)) >= 0 &&
        H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelem, NULL, 0, NULL, NULL) >= 0;
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    if (fletcher || bytes == 0) return ACX_OK;
    if (!allow_unverified)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "%s has no checksum (no CRC-32 attributes '%s', no Fletcher-32 "
                         "filter; format version %lld): its data cannot be verified (damaged, "
                         "edited, or not written by acx?); acx ckpt verify --allow-unverified "
                         "reads it anyway",
                         what, ACX_CKPT_CRC_BLOCKS_ATTR, (long long)version);
    fprintf(stderr,
            "acx: WARNING: UNVERIFIED: %s has no checksum (no CRC-32 attributes, no "
            "Fletcher-32 filter): read, but damage in it cannot be detected\n",
            what);
    return ACX_OK;
}

static void crc_reader_close(crc_reader_t *r) {
    if (r->on) acx_ckpt_crc_free(&r->crc);
    r->on = 0;
}

/* ---- reading a dataset in row blocks ---- */

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
    ds_shape_t s;
    hid_t fspace = -1, mspace = -1, dcpl = -1;
    void *buf = NULL;
    size_t esize = H5Tget_size(mem);
    if (get_shape(dset, &s) < 0 || esize == 0)
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
    static const char *const groups[] = {"/optimizer", "/scheduler", "/dataloader", "/config"};
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

/* The parameter datasets: everything under /model. */
static int is_model_path(const char *p) { return strncmp(p, "/model/", 7) == 0; }

ACX_API acx_status_t acx_checkpoint_info(const char *path, char **text_p) {
    if (text_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_checkpoint_info: text_p must not be NULL");
    char real[PATH_CAP];
    hid_t file;
    int64_t version;
    ACX_CHECK(open_ckpt(path, 0, real, sizeof real, &file, &version));

    acx_status_t status = ACX_OK;
    ds_list_t l = {0};
    sbuf_t sb = {0};
    char v[1024], what[PATH_CAP + 256];
    struct stat st;
    ACX_CHECK_GOTO(list_datasets(file, "/", real, &l), status, out);

    sb_printf(&sb, "checkpoint: %s\n", real);
    sb_printf(&sb, "format: %s version %lld%s\n", ACX_CKPT_FORMAT, (long long)version,
              version > ACX_CKPT_FORMAT_VERSION ? " (newer than this acx reads)" : "");
    /* the root attributes the writer defines, in a fixed order */
    static const struct {
        const char *attr, *label;
    } known[] = {{"step", "step"},
                 {"epoch", "epoch"},
                 {"world_size", "world size at save"},
                 {"sharding_strategy", "sharding strategy"},
                 {"mixed_precision", "mixed precision"},
                 {"acx_version", "written by acx"},
                 {"created", "created"}};
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
        ds_shape_t s;
        char shp[256], tname[64];
        snprintf(what, sizeof what, "dataset %s in '%s'", l.paths[k], real);
        ACX_H5_CHECK_GOTO(dset = H5Dopen2(file, l.paths[k], H5P_DEFAULT), what, status, next);
        ACX_H5_CHECK_GOTO(type = H5Dget_type(dset), what, status, next);
        ACX_H5_CHECK_GOTO(dcpl = H5Dget_create_plist(dset), what, status, next);
        ACX_H5_CHECK_GOTO(get_shape(dset, &s), what, status, next);
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
        for (int f = 0; f < nf; f++) {
            unsigned flags;
            size_t nelem = 0;
            char fname[64] = "";
            H5Z_filter_t id =
                H5Pget_filter2(dcpl, (unsigned)f, &flags, &nelem, NULL, sizeof fname, fname, NULL);
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
    sb_printf(&sb, "datasets (name, dtype, shape, checksum):\n%s", rows.s ? rows.s : "");
    free(rows.s);
    if (sb.failed) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for the description of '%s'", real);
        goto out;
    }
    *text_p = sb.s;
    sb.s = NULL;
out:
    free(sb.s);
    ds_list_free(&l);
    close_ckpt(file);
    return status;
}

/* ---- acx_checkpoint_verify ---- */

/* Read one dataset completely: its CRC-32 blocks are checked as they pass
 * (version 2), or HDF5 checks each chunk's Fletcher-32 (version 1). */
static acx_status_t verify_dataset(hid_t file, const char *dpath, const char *real, int64_t version,
                                   int allow_unverified) {
    acx_status_t status = ACX_OK;
    char what[PATH_CAP + 256];
    hid_t dset = -1, type = -1;
    crc_reader_t crc = {0};
    snprintf(what, sizeof what, "dataset %s in '%s'", dpath, real);
    ACX_H5_CHECK_GOTO(dset = H5Dopen2(file, dpath, H5P_DEFAULT), what, status, out);
    ACX_H5_CHECK_GOTO(type = H5Dget_type(dset), what, status, out);
    ACX_CHECK_GOTO(crc_reader_open(dset, version, dpath, real, allow_unverified, &crc), status,
                   out);

    if (H5Tdetect_class(type, H5T_VLEN) > 0 || H5Tis_variable_str(type) > 0) {
        /* variable-length data (strings): one read, then give HDF5's
         * allocations back */
        ds_shape_t s;
        hid_t space = -1;
        void *buf = NULL;
        ACX_H5_CHECK_GOTO(get_shape(dset, &s), what, status, out);
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

ACX_API acx_status_t acx_checkpoint_verify(const char *path) {
    return acx_checkpoint_verify_flags(path, 0);
}

ACX_API acx_status_t acx_checkpoint_verify_flags(const char *path, unsigned flags) {
    if ((flags & ~(unsigned)ACX_VERIFY_ALLOW_UNVERIFIED) != 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_checkpoint_verify_flags: unknown flags 0x%x",
                         flags);
    char real[PATH_CAP];
    hid_t file;
    int64_t version;
    ACX_CHECK(open_ckpt(path, 0, real, sizeof real, &file, &version));
    acx_status_t status = ACX_OK;
    ds_list_t l = {0};
    int64_t v;

    /* structure: what every version-1 checkpoint holds */
    if (attr_i64(file, "step", &v) != 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' lacks the integer root attribute step",
                           real);
        goto out;
    }
    if (H5Lexists(file, "/model", H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no /model group", real);
        goto out;
    }
    ACX_CHECK_GOTO(list_datasets(file, "/", real, &l), status, out);
    for (int k = 0; k < l.count && status == ACX_OK; k++)
        status = verify_dataset(file, l.paths[k], real, version,
                                (flags & ACX_VERIFY_ALLOW_UNVERIFIED) != 0);
out:
    ds_list_free(&l);
    close_ckpt(file);
    return status;
}

/* ---- acx_checkpoint_export ---- */

/* The output file, written under a temporary name. */
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

/* fsync a file by name (HDF5 closed it; the data must be on disk before
 * the rename makes it visible under its final name). */
static acx_status_t fsync_path(const char *p) {
    int fd = open(p, O_RDONLY);
    if (fd < 0) return ACX_ERROR(ACX_ERR_IO, "cannot open '%s' to sync it: %s", p, strerror(errno));
    int ret = fsync(fd);
    int err = errno;
    close(fd);
    if (ret != 0) return ACX_ERROR(ACX_ERR_IO, "fsync('%s') failed: %s", p, strerror(err));
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

/* The checksum check of parameter `dpath` as export reads it converted to
 * `mem`: inline when `mem` is the file's own type (float32 parameters, the
 * case of every acx checkpoint), else by a verifying read first. Lock
 * held. */
static acx_status_t export_crc_open(hid_t file, hid_t dset, int64_t version, const char *dpath,
                                    const char *real, hid_t mem, crc_reader_t *r) {
    ACX_CHECK(crc_reader_open(dset, version, dpath, real, 0, r));
    if (!r->on) return ACX_OK;
    hid_t type = H5Dget_type(dset);
    htri_t same = type >= 0 ? H5Tequal(type, mem) : -1;
    if (type >= 0) H5Tclose(type);
    H5Eclear2(H5E_DEFAULT);
    if (same > 0) return ACX_OK;
    crc_reader_close(r);
    return verify_dataset(file, dpath, real, version, 0);
}

/* One parameter to export: its name (path under /model) and shape. */
typedef struct param_entry {
    const char *dpath; /* "/model/fc1.weight" (owned by the ds_list) */
    const char *name;  /* "fc1.weight" */
    ds_shape_t shape;
} param_entry_t;

static int cmp_param_name(const void *a, const void *b) {
    return strcmp(((const param_entry_t *)a)->name, ((const param_entry_t *)b)->name);
}

/* The parameters under /model with their shapes; each must be a float
 * dataset (converted to float32 on export). Lock held. */
static acx_status_t collect_params(hid_t file, const char *real, ds_list_t *l,
                                   param_entry_t **params_p) {
    acx_status_t status = ACX_OK;
    param_entry_t *params = NULL;
    char what[PATH_CAP + 256];
    if (H5Lexists(file, "/model", H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no /model group", real);
    }
    ACX_CHECK(list_datasets(file, "/model", real, l));
    if (l->count == 0)
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no parameters under /model", real);
    if ((params = calloc((size_t)l->count, sizeof *params)) == NULL)
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for %d parameters", l->count);
    for (int k = 0; k < l->count && status == ACX_OK; k++) {
        hid_t dset = -1, type = -1;
        param_entry_t *p = &params[k];
        p->dpath = l->paths[k];
        p->name = l->paths[k] + strlen("/model/");
        snprintf(what, sizeof what, "dataset %s in '%s'", p->dpath, real);
        ACX_H5_CHECK_GOTO(dset = H5Dopen2(file, p->dpath, H5P_DEFAULT), what, status, next);
        ACX_H5_CHECK_GOTO(type = H5Dget_type(dset), what, status, next);
        ACX_H5_CHECK_GOTO(get_shape(dset, &p->shape), what, status, next);
        if (H5Tget_class(type) != H5T_FLOAT) {
            char tname[64];
            type_text(type, tname, sizeof tname);
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "parameter %s in '%s' is %s; parameters are floating point",
                               p->dpath, real, tname);
        }
    next:
        if (type >= 0) H5Tclose(type);
        if (dset >= 0) H5Dclose(dset);
    }
    if (status != ACX_OK) {
        free(params);
        return status;
    }
    *params_p = params;
    return ACX_OK;
}

static acx_status_t write_block(const void *buf, size_t bytes, void *ctx) {
    out_file_t *o = ctx;
    if (fwrite(buf, 1, bytes, o->f) != bytes)
        return ACX_ERROR(ACX_ERR_IO, "writing '%s' failed: %s", o->tmp, strerror(errno));
    return ACX_OK;
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
static acx_status_t export_safetensors(hid_t file, const char *real, int64_t version,
                                       param_entry_t *params, int n, out_file_t *o) {
    acx_status_t status = ACX_OK;
    sbuf_t h = {0};
    char v[256], what[PATH_CAP + 256];

    qsort(params, (size_t)n, sizeof *params, cmp_param_name);
    for (int k = 1; k < n; k++)
        if (strcmp(params[k - 1].name, params[k].name) == 0)
            return ACX_ERROR(ACX_ERR_FORMAT, "parameter name '%s' appears twice in '%s'",
                             params[k].name, real);

    /* metadata keys sorted, so the header is the same for the same input */
    sb_printf(&h, "{\"__metadata__\":{\"acx_version\":");
    sb_json_str(&h, attr_str(file, "acx_version", v, sizeof v) == 0 ? v : acx_version());
    sb_printf(&h, ",\"format\":\"pt\",\"source\":");
    sb_json_str(&h, real);
    sb_printf(&h, ",\"step\":");
    sb_json_str(&h, attr_text(file, "step", v, sizeof v) == 0 ? v : "");
    sb_printf(&h, "}");
    uint64_t offset = 0;
    for (int k = 0; k < n; k++) {
        const ds_shape_t *s = &params[k].shape;
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
        hid_t dset;
        snprintf(what, sizeof what, "dataset %s in '%s'", params[k].dpath, real);
        crc_reader_t crc = {0};
        ACX_H5_CHECK_GOTO(dset = H5Dopen2(file, params[k].dpath, H5P_DEFAULT), what, status, out);
        /* HDF5 converts to IEEE float32 little-endian whatever the stored
         * float type and byte order */
        status = export_crc_open(file, dset, version, params[k].dpath, real, H5T_IEEE_F32LE, &crc);
        if (status == ACX_OK)
            status = read_blocks(dset, H5T_IEEE_F32LE, what, &crc, write_block, o);
        crc_reader_close(&crc);
        H5Dclose(dset);
    }
out:
    free(h.s);
    return status;
}

/* Weights-only HDF5, the layout of acx_model_save_weights (io/weights.c):
 * root attrs format = "acx-weights", step, source; one float32 dataset per
 * parameter at /<name> with its true shape, in the checkpoint's order. */
static acx_status_t export_hdf5(hid_t file, const char *real, int64_t version,
                                const param_entry_t *params, int n, const char *tmp) {
    acx_status_t status = ACX_OK;
    char what[PATH_CAP + 256];
    int64_t step = 0;
    hid_t fapl = -1, lcpl = -1, out = -1;
    (void)attr_i64(file, "step", &step);
    snprintf(what, sizeof what, "weights file '%s'", tmp);
    ACX_H5_CHECK_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), what, status, done);
    ACX_H5_CHECK_GOTO(H5Pset_fapl_sec2(fapl), what, status, done);
    ACX_H5_CHECK_GOTO(lcpl = H5Pcreate(H5P_LINK_CREATE), what, status, done);
    ACX_H5_CHECK_GOTO(H5Pset_create_intermediate_group(lcpl, 1), what, status, done);
    ACX_H5_CHECK_GOTO(out = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), what, status, done);
    ACX_H5_CHECK_GOTO(acx_h5_write_attr_str(out, "format", "acx-weights"), what, status, done);
    ACX_H5_CHECK_GOTO(acx_h5_write_attr_i64(out, "step", step), what, status, done);
    ACX_H5_CHECK_GOTO(acx_h5_write_attr_str(out, "source", real), what, status, done);
    for (int k = 0; k < n && status == ACX_OK; k++) {
        const param_entry_t *p = &params[k];
        hid_t src = -1, dst = -1, space = -1, fsel = -1, msel = -1;
        float *buf = NULL;
        crc_reader_t crc = {0};
        const ds_shape_t *s = &p->shape;
        snprintf(what, sizeof what, "parameter %s from '%s' into '%s'", p->name, real, tmp);
        ACX_H5_CHECK_GOTO(src = H5Dopen2(file, p->dpath, H5P_DEFAULT), what, status, next);
        ACX_CHECK_GOTO(export_crc_open(file, src, version, p->dpath, real, H5T_NATIVE_FLOAT, &crc),
                       status, next);
        ACX_H5_CHECK_GOTO(space = s->ndim > 0 ? H5Screate_simple(s->ndim, s->dims, NULL)
                                              : H5Screate(H5S_SCALAR),
                          what, status, next);
        ACX_H5_CHECK_GOTO(
            dst = H5Dcreate2(out, p->name, H5T_IEEE_F32LE, space, lcpl, H5P_DEFAULT, H5P_DEFAULT),
            what, status, next);
        if (s->numel == 0) goto next;
        /* the same row blocks on both sides */
        hsize_t rows = s->ndim > 0 ? s->dims[0] : 1, row = s->ndim > 0 ? s->numel / rows : 1;
        hsize_t step_rows = BLOCK_BYTES / (4 * row);
        if (step_rows == 0) step_rows = 1;
        if (step_rows > rows) step_rows = rows;
        if ((buf = malloc((size_t)(step_rows * row) * 4)) == NULL) {
            status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory to copy %s", what);
            goto next;
        }
        if (s->ndim == 0) {
            ACX_H5_CHECK_GOTO(H5Dread(src, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf),
                              what, status, next);
            if (crc.on) ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&crc.k, buf, 4), status, next);
            ACX_H5_CHECK_GOTO(H5Dwrite(dst, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf),
                              what, status, next);
            goto next;
        }
        ACX_H5_CHECK_GOTO(fsel = H5Scopy(space), what, status, next);
        for (hsize_t r = 0; r < rows && status == ACX_OK; r += step_rows) {
            hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
            hsize_t nr = rows - r < step_rows ? rows - r : step_rows;
            memcpy(count, s->dims, sizeof count);
            start[0] = r;
            count[0] = nr;
            ACX_H5_CHECK_GOTO(H5Sselect_hyperslab(fsel, H5S_SELECT_SET, start, NULL, count, NULL),
                              what, status, next);
            /* same shape as the selection (see read_blocks) */
            ACX_H5_CHECK_GOTO(msel = H5Screate_simple(s->ndim, count, NULL), what, status, next);
            ACX_H5_CHECK_GOTO(H5Dread(src, H5T_NATIVE_FLOAT, msel, fsel, H5P_DEFAULT, buf), what,
                              status, next);
            if (crc.on)
                ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&crc.k, buf, (uint64_t)(nr * row) * 4),
                               status, next);
            ACX_H5_CHECK_GOTO(H5Dwrite(dst, H5T_NATIVE_FLOAT, msel, fsel, H5P_DEFAULT, buf), what,
                              status, next);
            H5Sclose(msel);
            msel = -1;
        }
    next:
        crc_reader_close(&crc);
        free(buf);
        if (msel >= 0) H5Sclose(msel);
        if (fsel >= 0) H5Sclose(fsel);
        if (space >= 0) H5Sclose(space);
        if (dst >= 0) H5Dclose(dst);
        if (src >= 0) H5Dclose(src);
    }
    if (status == ACX_OK) {
        herr_t ret = H5Fclose(out);
        out = -1;
        if (ret < 0) status = acx_error_h5("H5Fclose", what, __FILE__, __LINE__);
    }
done:
    if (out >= 0) H5Fclose(out);
    if (lcpl >= 0) H5Pclose(lcpl);
    if (fapl >= 0) H5Pclose(fapl);
    if (status == ACX_OK) status = fsync_path(tmp);
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
    hid_t file;
    int64_t version;
    ACX_CHECK(open_ckpt(path, 1, real, sizeof real, &file, &version));

    acx_status_t status = ACX_OK;
    ds_list_t l = {0};
    param_entry_t *params = NULL;
    out_file_t o = {0};
    ACX_CHECK_GOTO(collect_params(file, real, &l, &params), status, out);
    ACX_CHECK_GOTO(out_open(&o, out_path), status, out);
    if (format == ACX_EXPORT_SAFETENSORS) {
        if ((o.f = fopen(o.tmp, "wb")) == NULL) {
            status = ACX_ERROR(ACX_ERR_IO, "cannot create '%s': %s", o.tmp, strerror(errno));
        } else {
            status = export_safetensors(file, real, version, params, l.count, &o);
            if (status == ACX_OK && (fflush(o.f) != 0 || fsync(fileno(o.f)) != 0))
                status = ACX_ERROR(ACX_ERR_IO, "writing '%s' failed: %s", o.tmp, strerror(errno));
            if (fclose(o.f) != 0 && status == ACX_OK)
                status = ACX_ERROR(ACX_ERR_IO, "closing '%s' failed: %s", o.tmp, strerror(errno));
        }
    } else {
        status = export_hdf5(file, real, version, params, l.count, o.tmp);
    }
    status = out_commit(&o, status);
out:
    free(params);
    ds_list_free(&l);
    close_ckpt(file);
    return status;
}

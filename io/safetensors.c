/*
 * io/safetensors.c — the safetensors reader and writer (io/safetensors.h
 * says what the format is and what is checked).
 *
 * The header is parsed by json-c in strict mode; this file only walks the
 * parsed object and checks every value before anything uses it. Entries
 * are then sorted by their begin offset once, so the overlap check is one
 * pass. Data is read with pread(2) at the entry's place, in pieces of at
 * most ST_PIECE bytes converted to float32 as they arrive (bounded memory
 * for any tensor size).
 *
 * The writer lays the data out in the header's (sorted) order, each tensor
 * right after the previous one, the header padded with spaces to a
 * multiple of 8 bytes (what the reference writer does, so the data area
 * starts aligned), and replaces `path` only once everything is written and
 * fsynced (path.tmp, rename, fsync of the directory).
 *
 * Byte order: the format is little-endian and so is every machine acx
 * builds for; a big-endian build stops at compile time below rather than
 * read garbage.
 */
#define _GNU_SOURCE /* qsort_r */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/half.h"
#include "base/log.h"
#include "io/h5.h"
#include "io/safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "io/safetensors.c reads and writes little-endian data in place"
#endif

#define ST_PIECE ((size_t)1 << 20) /* bytes converted at a time */

/* ---- dtypes ---- */

static const struct {
    const char *name;
    size_t size;
} st_dtypes[ACX_ST_DTYPE_COUNT_] = {
    [ACX_ST_F32] = {"F32", 4}, [ACX_ST_F16] = {"F16", 2},         [ACX_ST_BF16] = {"BF16", 2},
    [ACX_ST_F64] = {"F64", 8}, [ACX_ST_BOOL] = {"BOOL", 1},       [ACX_ST_U8] = {"U8", 1},
    [ACX_ST_I8] = {"I8", 1},   [ACX_ST_I16] = {"I16", 2},         [ACX_ST_U16] = {"U16", 2},
    [ACX_ST_I32] = {"I32", 4}, [ACX_ST_U32] = {"U32", 4},         [ACX_ST_I64] = {"I64", 8},
    [ACX_ST_U64] = {"U64", 8}, [ACX_ST_F8_E4M3] = {"F8_E4M3", 1}, [ACX_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *acx_st_dtype_name(acx_st_dtype_t dt) {
    return (unsigned)dt < ACX_ST_DTYPE_COUNT_ ? st_dtypes[dt].name : "?";
}
size_t acx_st_dtype_size(acx_st_dtype_t dt) {
    return (unsigned)dt < ACX_ST_DTYPE_COUNT_ ? st_dtypes[dt].size : 0;
}
int acx_st_dtype_is_float(acx_st_dtype_t dt) {
    return dt == ACX_ST_F32 || dt == ACX_ST_F16 || dt == ACX_ST_BF16 || dt == ACX_ST_F64;
}

/* ---- the open file ---- */

struct acx_st_file {
    char *path;
    int fd;
    uint64_t file_size, data_start, data_size;
    int n;
    acx_st_tensor_t *t;
    int num_meta;
    char **meta; /* key, value, key, value ... */
};

const char *acx_st_path(const acx_st_file_t *f) { return f != NULL ? f->path : ""; }
int acx_st_count(const acx_st_file_t *f) { return f != NULL ? f->n : 0; }
const acx_st_tensor_t *acx_st_tensor(const acx_st_file_t *f, int i) {
    return f != NULL && i >= 0 && i < f->n ? &f->t[i] : NULL;
}
int acx_st_find(const acx_st_file_t *f, const char *name) {
    for (int i = 0; f != NULL && i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return i;
    return -1;
}
const char *acx_st_metadata(const acx_st_file_t *f, const char *key) {
    for (int i = 0; f != NULL && i < f->num_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

void acx_st_close(acx_st_file_t *f) {
    if (f == NULL) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++)
        free(f->t[i].name);
    for (int i = 0; i < 2 * f->num_meta; i++)
        free(f->meta[i]);
    free(f->meta);
    free(f->t);
    free(f->path);
    free(f);
}

/* pread all of [off, off + n) or fail naming the file. */
static acx_status_t read_at(int fd, const char *path, void *buf, size_t n, uint64_t off) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return ACX_ERROR(ACX_ERR_IO, "cannot read '%s' at byte %llu: %s", path,
                             (unsigned long long)(off + done), strerror(errno));
        if (r == 0)
            return ACX_ERROR(ACX_ERR_IO,
                             "'%s' ends at byte %llu, before the %zu bytes at %llu it should "
                             "hold (truncated, or changed while being read?)",
                             path, (unsigned long long)(off + done), n, (unsigned long long)off);
        done += (size_t)r;
    }
    return ACX_OK;
}

static uint64_t le64(const unsigned char *b) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = v << 8 | b[k];
    return v;
}

acx_status_t acx_st_sniff(const char *path, int *yes_p) {
    *yes_p = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ACX_ERROR(ACX_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    unsigned char head[9];
    acx_status_t status = ACX_OK;
    if (fstat(fd, &sb) != 0)
        status = ACX_ERROR(ACX_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    else if (sb.st_size >= 9 && (status = read_at(fd, path, head, 9, 0)) == ACX_OK) {
        uint64_t n = le64(head);
        *yes_p = n >= 2 && n <= (uint64_t)sb.st_size - 8 && head[8] == '{';
    }
    close(fd);
    return status;
}

/* A JSON integer in [0, max], or -1 (not an integer, negative, too big). */
static int64_t json_count(struct json_object *v, int64_t max) {
    if (v == NULL || !json_object_is_type(v, json_type_int)) return -1;
    errno = 0;
    int64_t x = json_object_get_int64(v);
    /* json-c keeps integers past INT64_MAX as uint64 and answers INT64_MAX */
    if (x < 0 || x > max || errno != 0 || json_object_get_uint64(v) > (uint64_t)max) return -1;
    return x;
}

static int by_begin(const void *a, const void *b) {
    const acx_st_tensor_t *x = *(acx_st_tensor_t *const *)a, *y = *(acx_st_tensor_t *const *)b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

/* One header entry `name` -> t, every field checked. */
static acx_status_t parse_entry(acx_st_file_t *f, const char *name, struct json_object *v,
                                acx_st_tensor_t *t) {
    const char *p = f->path;
    if (!json_object_is_type(v, json_type_object))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "safetensors file '%s': header entry '%s' is not an object (expected "
                         "{\"dtype\", \"shape\", \"data_offsets\"})",
                         p, name);
    struct json_object *jd = NULL, *js = NULL, *jo = NULL;
    json_object_object_get_ex(v, "dtype", &jd);
    json_object_object_get_ex(v, "shape", &js);
    json_object_object_get_ex(v, "data_offsets", &jo);
    if (jd == NULL || !json_object_is_type(jd, json_type_string))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "safetensors file '%s': tensor '%s' has no \"dtype\" string", p, name);
    const char *dname = json_object_get_string(jd);
    t->dtype = ACX_ST_DTYPE_COUNT_;
    for (int k = 0; k < ACX_ST_DTYPE_COUNT_; k++)
        if (strcmp(dname, st_dtypes[k].name) == 0) t->dtype = (acx_st_dtype_t)k;
    if (t->dtype == ACX_ST_DTYPE_COUNT_)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "safetensors file '%s': tensor '%s' has dtype '%.32s', which is not a "
                         "safetensors dtype (F32, F16, BF16, F64, I64, ...)",
                         p, name, dname);
    if (js == NULL || !json_object_is_type(js, json_type_array))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "safetensors file '%s': tensor '%s' has no \"shape\" array", p, name);
    size_t nd = json_object_array_length(js);
    if (nd > ACX_ST_MAX_DIMS)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "safetensors file '%s': tensor '%s' has %zu dimensions; acx reads at "
                         "most %d",
                         p, name, nd, ACX_ST_MAX_DIMS);
    t->ndim = (int)nd;
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        int64_t x = json_count(json_object_array_get_idx(js, (size_t)d), INT64_MAX);
        if (x < 0)
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "safetensors file '%s': tensor '%s': shape[%d] is '%.32s', not an "
                             "integer >= 0",
                             p, name, d,
                             json_object_to_json_string(json_object_array_get_idx(js, (size_t)d)));
        t->shape[d] = x;
        if (x > 0 && t->numel > INT64_MAX / 8 / x)
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "safetensors file '%s': tensor '%s': the element count of its shape "
                             "overflows",
                             p, name);
        t->numel *= x;
    }
    if (jo == NULL || !json_object_is_type(jo, json_type_array) ||
        json_object_array_length(jo) != 2)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "safetensors file '%s': tensor '%s' has no \"data_offsets\" [begin, "
                         "end]",
                         p, name);
    int64_t b = json_count(json_object_array_get_idx(jo, 0), INT64_MAX);
    int64_t e = json_count(json_object_array_get_idx(jo, 1), INT64_MAX);
    if (b < 0 || e < 0 || b > e || (uint64_t)e > f->data_size)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "safetensors file '%s': tensor '%s': data_offsets %s are not [begin, "
                         "end] with 0 <= begin <= end <= %llu (the data area's size)",
                         p, name, json_object_to_json_string(jo), (unsigned long long)f->data_size);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    uint64_t want = (uint64_t)t->numel * st_dtypes[t->dtype].size;
    if (t->end - t->begin != want)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "safetensors file '%s': tensor '%s' holds %llu bytes (data_offsets "
                         "[%llu, %llu]) but its shape and dtype %s need %llu",
                         p, name, (unsigned long long)(t->end - t->begin),
                         (unsigned long long)t->begin, (unsigned long long)t->end,
                         st_dtypes[t->dtype].name, (unsigned long long)want);
    return ACX_OK;
}

static acx_status_t parse_metadata(acx_st_file_t *f, struct json_object *v) {
    if (!json_object_is_type(v, json_type_object))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "safetensors file '%s': __metadata__ is not an object of strings",
                         f->path);
    int n = json_object_object_length(v);
    f->meta = acx_calloc((size_t)(2 * n + 1), sizeof *f->meta, "safetensors metadata");
    if (f->meta == NULL) return ACX_ERR_NO_MEMORY;
    json_object_object_foreach(v, key, val) {
        if (!json_object_is_type(val, json_type_string))
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "safetensors file '%s': __metadata__ value of '%s' is not a string",
                             f->path, key);
        f->meta[2 * f->num_meta] = strdup(key);
        f->meta[2 * f->num_meta + 1] = strdup(json_object_get_string(val));
        f->num_meta++;
        if (f->meta[2 * f->num_meta - 2] == NULL || f->meta[2 * f->num_meta - 1] == NULL)
            return ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for safetensors metadata");
    }
    return ACX_OK;
}

/* The header text [len] -> f's entries. */
static acx_status_t parse_header(acx_st_file_t *f, const char *text, size_t len) {
    acx_status_t status = ACX_OK;
    struct json_tokener *tok = json_tokener_new();
    if (tok == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for a JSON parser");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    struct json_object *root = len <= INT_MAX ? json_tokener_parse_ex(tok, text, (int)len) : NULL;
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    if (root == NULL || jerr != json_tokener_success) {
        status = ACX_ERROR(
            ACX_ERR_FORMAT,
            "safetensors file '%s': its %zu-byte header is not valid JSON (%s, "
            "near byte %zu of it)",
            f->path, len,
            jerr == json_tokener_continue ? "it ends early" : json_tokener_error_desc(jerr), end);
        goto out;
    }
    for (size_t k = end; k < len; k++) /* the writer's padding */
        if (text[k] != ' ' && text[k] != '\t' && text[k] != '\n' && text[k] != '\r') {
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "safetensors file '%s': its header has bytes after the JSON "
                               "object (at byte %zu of %zu)",
                               f->path, k, len);
            goto out;
        }
    if (!json_object_is_type(root, json_type_object)) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "safetensors file '%s': its header is not a JSON object",
                           f->path);
        goto out;
    }
    int total = json_object_object_length(root);
    f->t = acx_calloc((size_t)total + 1, sizeof *f->t, "safetensors entries");
    if (f->t == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto out;
    }
    json_object_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            status = parse_metadata(f, val);
        } else {
            acx_st_tensor_t *t = &f->t[f->n];
            status = parse_entry(f, key, val, t);
            if (status == ACX_OK) {
                t->name = strdup(key);
                if (t->name == NULL) status = ACX_ERR_NO_MEMORY;
                f->n++;
            }
        }
        if (status != ACX_OK) goto out;
    }
    /* The tensors tile the data area exactly, as the format's reference
     * reader requires: sorted by begin, each begins where the one before
     * ends, and the last ends at the end of the file. This refuses overlaps,
     * holes and trailing bytes — and the hole a key given twice leaves (the
     * JSON parser keeps only the last of equal keys). */
    if (f->n > 0) {
        acx_st_tensor_t **s = acx_malloc((size_t)f->n * sizeof *s, "safetensors layout check");
        if (s == NULL) {
            status = ACX_ERR_NO_MEMORY;
            goto out;
        }
        for (int i = 0; i < f->n; i++)
            s[i] = &f->t[i];
        qsort(s, (size_t)f->n, sizeof *s, by_begin);
        uint64_t next = 0; /* where the next tensor must begin */
        const char *prev = NULL;
        for (int i = 0; i < f->n && status == ACX_OK; i++) {
            if (s[i]->begin < next)
                status =
                    ACX_ERROR(ACX_ERR_FORMAT,
                              "safetensors file '%s': tensors '%s' and '%s' (bytes [%llu, "
                              "%llu)) overlap: '%s' begins before byte %llu",
                              f->path, prev, s[i]->name, (unsigned long long)s[i]->begin,
                              (unsigned long long)s[i]->end, s[i]->name, (unsigned long long)next);
            else if (s[i]->begin > next)
                status = ACX_ERROR(ACX_ERR_FORMAT,
                                   "safetensors file '%s': bytes [%llu, %llu) of the data area "
                                   "belong to no tensor (before '%s'; a key given twice leaves "
                                   "such a hole)",
                                   f->path, (unsigned long long)next,
                                   (unsigned long long)s[i]->begin, s[i]->name);
            next = s[i]->end;
            prev = s[i]->name;
        }
        if (status == ACX_OK && next != f->data_size)
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "safetensors file '%s': bytes [%llu, %llu) at the end of the data "
                               "area belong to no tensor",
                               f->path, (unsigned long long)next, (unsigned long long)f->data_size);
        free(s);
    }
out:
    if (root != NULL) json_object_put(root);
    json_tokener_free(tok);
    return status;
}

acx_status_t acx_st_open(const char *path, acx_st_file_t **file_p) {
    if (path == NULL || file_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_st_open: path and file_p must not be NULL");
    *file_p = NULL;
    acx_status_t status = ACX_OK;
    char *text = NULL;
    acx_st_file_t *f = acx_calloc(1, sizeof *f, "safetensors file");
    if (f == NULL) return ACX_ERR_NO_MEMORY;
    f->fd = -1;
    f->path = strdup(path);
    if (f->path == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto out;
    }
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        status = ACX_ERROR(ACX_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        goto out;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) {
        status = ACX_ERROR(ACX_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        goto out;
    }
    f->file_size = (uint64_t)sb.st_size;
    unsigned char head[8];
    if (f->file_size < 8) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "'%s' is %llu bytes: too short for a safetensors file (8-byte header "
                           "length, then the header)",
                           path, (unsigned long long)f->file_size);
        goto out;
    }
    ACX_CHECK_GOTO(read_at(f->fd, path, head, 8, 0), status, out);
    uint64_t n = le64(head);
    if (n < 2 || n > ACX_ST_HEADER_MAX || n > f->file_size - 8) {
        status = ACX_ERROR(
            ACX_ERR_FORMAT,
            "safetensors file '%s': header length %llu is outside 2..%llu (the "
            "file has %llu bytes after the length; at most %llu allowed)",
            path, (unsigned long long)n,
            (unsigned long long)(f->file_size - 8 < ACX_ST_HEADER_MAX ? f->file_size - 8
                                                                      : ACX_ST_HEADER_MAX),
            (unsigned long long)(f->file_size - 8), (unsigned long long)ACX_ST_HEADER_MAX);
        goto out;
    }
    text = acx_malloc((size_t)n + 1, "safetensors header");
    if (text == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto out;
    }
    ACX_CHECK_GOTO(read_at(f->fd, path, text, (size_t)n, 8), status, out);
    text[n] = '\0';
    f->data_start = 8 + n;
    f->data_size = f->file_size - f->data_start;
    status = parse_header(f, text, (size_t)n);
out:
    free(text);
    if (status != ACX_OK) {
        acx_st_close(f);
        return status;
    }
    ACX_DEBUG(ACX_SUBSYS_IO, "safetensors '%s': %d tensor(s), %llu data bytes", path, f->n,
              (unsigned long long)f->data_size);
    *file_p = f;
    return ACX_OK;
}

acx_status_t acx_st_read_f32(acx_st_file_t *f, int i, int64_t e0, int64_t n, float *out) {
    if (f == NULL || i < 0 || i >= f->n || e0 < 0 || n < 0 || e0 > f->t[i].numel - n ||
        (n > 0 && out == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_st_read_f32: elements [%lld, +%lld) of entry "
                         "%d are not in the file's tensor",
                         (long long)e0, (long long)n, i);
    const acx_st_tensor_t *t = &f->t[i];
    if (!acx_st_dtype_is_float(t->dtype))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "safetensors file '%s': tensor '%s' is %s; acx reads F32, F16, BF16 or "
                         "F64 tensors as parameters",
                         f->path, t->name, st_dtypes[t->dtype].name);
    size_t es = st_dtypes[t->dtype].size;
    uint64_t off = f->data_start + t->begin + (uint64_t)e0 * es;
    if (t->dtype == ACX_ST_F32) /* in place, no conversion */
        return read_at(f->fd, f->path, out, (size_t)n * es, off);
    unsigned char *buf = acx_malloc(ST_PIECE, "safetensors conversion");
    if (buf == NULL) return ACX_ERR_NO_MEMORY;
    acx_status_t status = ACX_OK;
    size_t per = ST_PIECE / es;
    for (int64_t k = 0; k < n && status == ACX_OK; k += (int64_t)per) {
        size_t m = (size_t)(n - k) < per ? (size_t)(n - k) : per;
        status = read_at(f->fd, f->path, buf, m * es, off + (uint64_t)k * es);
        if (status != ACX_OK) break;
        float *dst = out + k;
        if (t->dtype == ACX_ST_F16)
            acx_f16_to_f32_n((const uint16_t *)buf, dst, m);
        else if (t->dtype == ACX_ST_BF16)
            acx_bf16_to_f32_n((const uint16_t *)buf, dst, m);
        else {
            const double *d = (const double *)buf;
            for (size_t j = 0; j < m; j++)
                dst[j] = (float)d[j];
        }
    }
    free(buf);
    return status;
}

/* ---- the writer ---- */

struct acx_st_writer {
    char *path, *tmp;
    FILE *fp;
    int n, next;
    int *order;       /* file position -> tensor index */
    int64_t *numel;   /* by tensor index */
    acx_status_t bad; /* a failed put: commit refuses */
};

int acx_st_writer_order(const acx_st_writer_t *w, int k) {
    return w != NULL && k >= 0 && k < w->n ? w->order[k] : -1;
}

static int by_name(const void *a, const void *b, void *tensors) {
    const acx_st_out_t *t = tensors;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

void acx_st_writer_abort(acx_st_writer_t *w) {
    if (w == NULL) return;
    if (w->fp != NULL) fclose(w->fp);
    if (w->tmp != NULL) unlink(w->tmp);
    free(w->path);
    free(w->tmp);
    free(w->order);
    free(w->numel);
    free(w);
}

/* the header object: keys in sorted order (json-c keeps insertion order) */
static struct json_object *build_header(const acx_st_out_t *t, const int *order, int n,
                                        const int64_t *numel, const char *const *meta,
                                        int num_meta) {
    struct json_object *root = json_object_new_object(), *md = NULL;
    if (root == NULL) return NULL;
    if (num_meta > 0) {
        md = json_object_new_object();
        if (md == NULL) goto fail;
        for (int k = 0; k < num_meta; k++)
            if (json_object_object_add(md, meta[2 * k], json_object_new_string(meta[2 * k + 1])) !=
                0)
                goto fail;
    }
    int meta_done = md == NULL;
    uint64_t off = 0;
    for (int k = 0; k <= n; k++) {
        if (!meta_done && (k == n || strcmp("__metadata__", t[order[k]].name) < 0)) {
            if (json_object_object_add(root, "__metadata__", md) != 0) goto fail;
            md = NULL;
            meta_done = 1;
        }
        if (k == n) break;
        const acx_st_out_t *o = &t[order[k]];
        struct json_object *e = json_object_new_object(), *sh = json_object_new_array(),
                           *of = json_object_new_array();
        int bad = e == NULL || sh == NULL || of == NULL;
        for (int d = 0; !bad && d < o->ndim; d++)
            bad = json_object_array_add(sh, json_object_new_int64(o->shape[d])) != 0;
        uint64_t end = off + (uint64_t)numel[order[k]] * 4;
        bad = bad || json_object_array_add(of, json_object_new_int64((int64_t)off)) != 0 ||
              json_object_array_add(of, json_object_new_int64((int64_t)end)) != 0;
        bad = bad || json_object_object_add(e, "dtype", json_object_new_string("F32")) != 0;
        if (!bad) {
            json_object_object_add(e, "shape", sh);
            json_object_object_add(e, "data_offsets", of);
            sh = of = NULL;
            bad = json_object_object_add(root, o->name, e) != 0;
            e = NULL;
        }
        json_object_put(sh);
        json_object_put(of);
        json_object_put(e);
        if (bad) goto fail;
        off = end;
    }
    return root;
fail:
    json_object_put(md);
    json_object_put(root);
    return NULL;
}

acx_status_t acx_st_writer_open(const char *path, const acx_st_out_t *tensors, int n,
                                const char *const *meta, int num_meta, acx_st_writer_t **w_p) {
    *w_p = NULL;
    acx_status_t status = ACX_OK;
    struct json_object *root = NULL;
    acx_st_writer_t *w = acx_calloc(1, sizeof *w, "safetensors writer");
    if (w == NULL) return ACX_ERR_NO_MEMORY;
    w->n = n;
    w->path = strdup(path);
    w->tmp = malloc(strlen(path) + 5);
    w->order = acx_malloc((size_t)(n > 0 ? n : 1) * sizeof *w->order, "safetensors order");
    w->numel = acx_malloc((size_t)(n > 0 ? n : 1) * sizeof *w->numel, "safetensors sizes");
    if (w->path == NULL || w->tmp == NULL || w->order == NULL || w->numel == NULL) {
        acx_st_writer_abort(w);
        return ACX_ERR_NO_MEMORY;
    }
    sprintf(w->tmp, "%s.tmp", path);
    for (int i = 0; i < n; i++) {
        w->order[i] = i;
        w->numel[i] = 1;
        for (int d = 0; d < tensors[i].ndim; d++)
            w->numel[i] *= tensors[i].shape[d];
    }
    qsort_r(w->order, (size_t)n, sizeof *w->order, by_name, (void *)tensors);
    for (int k = 1; k < n; k++)
        if (strcmp(tensors[w->order[k]].name, tensors[w->order[k - 1]].name) == 0) {
            status = ACX_ERROR(ACX_ERR_INVALID_ARG, "safetensors '%s': two tensors named '%s'",
                               path, tensors[w->order[k]].name);
            goto out;
        }
    root = build_header(tensors, w->order, n, w->numel, meta, num_meta);
    if (root == NULL) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for the safetensors header of '%s'", path);
        goto out;
    }
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    w->fp = fopen(w->tmp, "wb");
    if (w->fp == NULL) {
        status = ACX_ERROR(ACX_ERR_IO, "cannot create '%s': %s", w->tmp, strerror(errno));
        goto out;
    }
    unsigned char head[8];
    for (int k = 0; k < 8; k++)
        head[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    int ok = fwrite(head, 1, 8, w->fp) == 8 && fwrite(text, 1, len, w->fp) == len;
    for (size_t k = len; ok && k < padded; k++)
        ok = fputc(' ', w->fp) != EOF;
    if (!ok) status = ACX_ERROR(ACX_ERR_IO, "cannot write '%s': %s", w->tmp, strerror(errno));
out:
    if (root != NULL) json_object_put(root);
    if (status != ACX_OK) {
        acx_st_writer_abort(w);
        return status;
    }
    *w_p = w;
    return ACX_OK;
}

acx_status_t acx_st_writer_put(acx_st_writer_t *w, const float *data, int64_t numel) {
    if (w->bad != ACX_OK) return w->bad;
    if (w->next >= w->n || numel != w->numel[w->order[w->next]])
        return w->bad = ACX_ERROR(ACX_ERR_INTERNAL,
                                  "safetensors '%s': tensor %d of %d given %lld elements", w->path,
                                  w->next, w->n, (long long)numel);
    if (numel > 0 && fwrite(data, sizeof(float), (size_t)numel, w->fp) != (size_t)numel)
        return w->bad = ACX_ERROR(ACX_ERR_IO, "cannot write '%s': %s", w->tmp, strerror(errno));
    w->next++;
    return ACX_OK;
}

acx_status_t acx_st_writer_commit(acx_st_writer_t *w) {
    acx_status_t status = w->bad;
    if (status == ACX_OK && w->next != w->n)
        status = ACX_ERROR(ACX_ERR_INTERNAL, "safetensors '%s': %d of %d tensors written", w->path,
                           w->next, w->n);
    if (status == ACX_OK && (fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0))
        status = ACX_ERROR(ACX_ERR_IO, "cannot write '%s' to storage: %s", w->tmp, strerror(errno));
    if (status == ACX_OK) {
        int rc = fclose(w->fp);
        w->fp = NULL;
        if (rc != 0)
            status = ACX_ERROR(ACX_ERR_IO, "cannot close '%s': %s", w->tmp, strerror(errno));
    }
    if (status == ACX_OK && rename(w->tmp, w->path) != 0)
        status = ACX_ERROR(ACX_ERR_IO, "cannot rename '%s' to '%s': %s", w->tmp, w->path,
                           strerror(errno));
    if (status == ACX_OK) {
        status = acx_io_fsync_dir_of(w->path);
        free(w->tmp); /* renamed: nothing to remove */
        w->tmp = NULL;
    }
    acx_st_writer_abort(w);
    return status;
}

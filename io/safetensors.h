/*
 * io/safetensors.h — safetensors files (library-private): the reader of
 * their header and data, and the one writer of them.
 *
 * The format (huggingface/safetensors, docs/user-guide.md): 8 bytes, the
 * little-endian length N of a JSON header; N bytes of UTF-8 JSON, an object
 * {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}
 * with an optional "__metadata__" object of string values; then the data
 * area, each tensor's bytes row-major little-endian at [begin, end) of it.
 *
 * The reader trusts nothing in the file: acx_st_open checks the whole
 * header before anything uses it (the header length inside the file and
 * at most ACX_ST_HEADER_MAX, the JSON well formed and an object, every
 * entry's dtype known, dims >= 0, the element count without overflow,
 * end - begin == numel x dtype size, offsets inside the data area, no two
 * tensors overlapping) and every error names the file and the entry. It
 * is one process's work (no MPI): acx_model_load_weights (io/weights_load.c)
 * has every rank open the file and agrees on the outcome.
 *
 * Left to others: which parameter a tensor feeds, name maps, slices and
 * transposes, sharding (io/weights_load.c); gathering a model for the
 * writer (io/weights.c).
 */
#ifndef ACX_IO_SAFETENSORS_H
#define ACX_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "acx/model.h"
#include "acx/status.h"

/* The largest header accepted (the reference implementation's limit). */
#define ACX_ST_HEADER_MAX ((uint64_t)100 * 1024 * 1024)
/* The most dimensions of a tensor in a file acx reads (a parameter has at
 * most ACX_MAX_DIMS; a stacked tensor one more). */
#define ACX_ST_MAX_DIMS (ACX_MAX_DIMS + 1)

/* The dtypes of the format; the float ones convert to float32 on read. */
typedef enum acx_st_dtype {
    ACX_ST_F32 = 0,
    ACX_ST_F16,
    ACX_ST_BF16,
    ACX_ST_F64,
    ACX_ST_BOOL,
    ACX_ST_U8,
    ACX_ST_I8,
    ACX_ST_I16,
    ACX_ST_U16,
    ACX_ST_I32,
    ACX_ST_U32,
    ACX_ST_I64,
    ACX_ST_U64,
    ACX_ST_F8_E4M3,
    ACX_ST_F8_E5M2,
    ACX_ST_DTYPE_COUNT_
} acx_st_dtype_t;

/* The format's name of a dtype ("F32") and its size in bytes. */
const char *acx_st_dtype_name(acx_st_dtype_t dt);
size_t acx_st_dtype_size(acx_st_dtype_t dt);
/* 1 for F32, F16, BF16, F64: what acx_st_read_f32 converts. */
int acx_st_dtype_is_float(acx_st_dtype_t dt);

/* One entry of the header, checked. */
typedef struct acx_st_tensor {
    char *name;
    acx_st_dtype_t dtype;
    int ndim; /* 0 (a scalar: one element) .. ACX_ST_MAX_DIMS */
    int64_t shape[ACX_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* bytes of the data area */
} acx_st_tensor_t;

typedef struct acx_st_file acx_st_file_t;

/* Is the file at `path` shaped like a safetensors file at all: its first 8
 * bytes a header length that fits the file, followed by '{'? *yes_p 0
 * otherwise (the caller then says what it is not). ACX_ERR_IO when it
 * cannot be opened or read. */
acx_status_t acx_st_sniff(const char *path, int *yes_p);

/* Open and check (see the file comment) the safetensors file at `path`.
 * Errors: ACX_ERR_IO (cannot open or read, shorter than its header says),
 * ACX_ERR_FORMAT (anything wrong in the header: the message names the
 * file, the entry and the value), ACX_ERR_NO_MEMORY. Not collective. */
acx_status_t acx_st_open(const char *path, acx_st_file_t **file_p);
void acx_st_close(acx_st_file_t *f);

/* The entries, in the header's order (__metadata__ is not one). */
int acx_st_count(const acx_st_file_t *f);
const acx_st_tensor_t *acx_st_tensor(const acx_st_file_t *f, int i);
/* The index of the entry named `name`, or -1. */
int acx_st_find(const acx_st_file_t *f, const char *name);
/* __metadata__'s string value of `key`, or NULL. */
const char *acx_st_metadata(const acx_st_file_t *f, const char *key);
const char *acx_st_path(const acx_st_file_t *f);

/* Elements [e0, e0 + n) of entry i (row-major) as float32 into out,
 * converted from F16, BF16 or F64 (F64 rounds to nearest). Errors:
 * ACX_ERR_INVALID_ARG (outside the entry, not a float dtype), ACX_ERR_IO
 * (a short read: the file changed since it was opened). Not collective. */
acx_status_t acx_st_read_f32(acx_st_file_t *f, int i, int64_t e0, int64_t n, float *out);

/* ---- the writer (one process) ---- */

/* A tensor of the file to write: F32, `shape` of ndim dims. */
typedef struct acx_st_out {
    const char *name;
    int ndim;
    const int64_t *shape;
} acx_st_out_t;

typedef struct acx_st_writer acx_st_writer_t;

/* Start writing `path`: creates path + ".tmp" and writes the header for
 * the n tensors (keys sorted by name, __metadata__ among them with
 * num_meta key/value pairs meta[2k], meta[2k+1]; data in the same sorted
 * order, F32). Then acx_st_writer_put each tensor's data in the order
 * acx_st_writer_order gives, and acx_st_writer_commit. Errors: ACX_ERR_IO,
 * ACX_ERR_INVALID_ARG (duplicate names), ACX_ERR_NO_MEMORY. */
acx_status_t acx_st_writer_open(const char *path, const acx_st_out_t *tensors, int n,
                                const char *const *meta, int num_meta, acx_st_writer_t **w_p);
/* The index (into the open's tensors) of the k-th tensor in the file. */
int acx_st_writer_order(const acx_st_writer_t *w, int k);
/* The next tensor's data: its numel floats (host memory). */
acx_status_t acx_st_writer_put(acx_st_writer_t *w, const float *data, int64_t numel);
/* Every tensor written: close, fsync, rename to path, fsync the directory.
 * Frees w. */
acx_status_t acx_st_writer_commit(acx_st_writer_t *w);
/* Give up: remove the temporary file. Frees w (NULL is fine). */
void acx_st_writer_abort(acx_st_writer_t *w);

#endif /* ACX_IO_SAFETENSORS_H */

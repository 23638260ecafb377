/*
 * io/idx.c — acx_import_idx: convert IDX files (the MNIST family format) into
 * the HDF5 layout the data loader reads. Single process, no MPI.
 *
 * IDX (http://yann.lecun.com/exdb/mnist/): 4 magic bytes 0x00 0x00 <type>
 * <ndim>, then ndim big-endian uint32 dims, then prod(dims) elements. Only
 * type 0x08 (unsigned byte) is accepted: images are [N x rows x cols], labels
 * [N]. Files may be gzipped or plain; zlib's gzread reads both transparently.
 *
 * Output (contiguous layout, so a batch of random rows costs one seek per
 * row and no chunk decompression):
 *   /                attrs: source = "idx"
 *   /train/images    [N x rows x cols] uint8     /train/labels  [N] uint8
 *   /test/images     ...                         /test/labels   ...
 * written to out_path + ".tmp", fsynced and renamed, the directory fsynced
 * (acx_io_commit), so neither a failed import nor a crash leaves a
 * half-written file at out_path or harms one that is already there.
 *
 * Left to others: the loader (dataloader.c) that reads the result.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "acx/data.h"
#include "io/h5.h"
#include "base/error.h"

#define IDX_TYPE_UBYTE 0x08

/* One parsed IDX file. */
typedef struct {
    const char *path;
    int ndim;
    uint32_t dims[3];
    size_t bytes;  /* prod(dims) */
    uint8_t *data; /* [bytes] */
} idx_file_t;

/* ---- zlib errors ---- */

/* zlib is used only in this file, so its checking macro lives here and not
 * in base/error.h. The calls fail in different ways:
 *   gzopen    NULL; errno as set by open(2) or malloc, still 0 when zlib
 *             failed on its own (idx_read clears errno before the call)
 *   gzread    < 0; the reason in gzerror(gz), Z_ERRNO meaning read(2)
 *             failed and errno says why
 *   gzbuffer  -1 when called after the first read or with a bad size; no
 *             reason is recorded
 *   gzclose   a zlib code (Z_OK = 0, errors < 0) and the handle is freed
 *             either way, so the code is all there is: Z_ERRNO = close(2)
 *             failed (errno), the others are named by zError()
 * An errno reason is ACX_ERR_IO, as for any file that cannot be read;
 * zlib's own reasons (a corrupt stream, ...) are ACX_ERR_ZLIB. The message
 * is "<zlib function> of <what> failed: <reason>" at the call site's
 * file:line. */
static acx_status_t zlib_error(const char *call, gzFile gz, int ret, const char *what,
                               const char *file, int line) {
    int err = errno; /* before anything here can change it */
    /* "got = gzread(gz, buf, n)" -> "gzread" */
    const char *name = call, *eq = strstr(call, " = "), *paren = strchr(call, '(');
    if (eq != NULL && (paren == NULL || eq < paren)) name = eq + 3;
    int name_len = (int)strcspn(name, "( ");

    if (gz != NULL) { /* a live handle: zlib kept the reason */
        int errnum = Z_OK;
        const char *msg = gzerror(gz, &errnum);
        if (errnum == Z_ERRNO)
            return acx_error_set(ACX_ERR_IO, file, line, "%.*s of %s failed: %s", name_len, name,
                                 what, strerror(err));
        if (errnum != Z_OK && msg != NULL && msg[0] != '\0')
            return acx_error_set(ACX_ERR_ZLIB, file, line, "%.*s of %s failed: %s", name_len, name,
                                 what, msg);
        return acx_error_set(ACX_ERR_ZLIB, file, line,
                             "%.*s of %s failed: zlib returned %d "
                             "and recorded no reason",
                             name_len, name, what, ret);
    }
    if (ret == Z_ERRNO) { /* gzopen, or gzclose's close(2) */
        if (err == 0)
            return acx_error_set(ACX_ERR_NO_MEMORY, file, line,
                                 "%.*s of %s failed: out of "
                                 "memory in zlib",
                                 name_len, name, what);
        return acx_error_set(err == ENOMEM ? ACX_ERR_NO_MEMORY : ACX_ERR_IO, file, line,
                             "%.*s of %s failed: %s", name_len, name, what, strerror(err));
    }
    return acx_error_set(ACX_ERR_ZLIB, file, line, "%.*s of %s failed: %s (zlib error %d)",
                         name_len, name, what, zError(ret), ret);
}

/* Calls returning an int (gzread, gzbuffer, gzclose): negative is failure.
 * `gz` is the handle whose gzerror() holds the reason; NULL for gzclose,
 * which frees it. `call` may assign the result: `got = gzread(...)`. */
#define ACX_ZLIB_CHECK_GOTO(call, gz, what, status, label)                                         \
    do {                                                                                           \
        int acx_zlib_ret_ = (call);                                                                \
        if (acx_zlib_ret_ < 0) {                                                                   \
            (status) = zlib_error(#call, (gz), acx_zlib_ret_, (what), __FILE__, __LINE__);         \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* gzopen: NULL is failure and errno holds the reason. */
#define ACX_ZLIB_CHECK_PTR_GOTO(call, what, status, label)                                         \
    do {                                                                                           \
        if ((call) == NULL) {                                                                      \
            (status) = zlib_error(#call, NULL, Z_ERRNO, (what), __FILE__, __LINE__);               \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- reading ---- */

/* Read up to len bytes (gzread takes an unsigned int count: loop in 1 GiB
 * pieces) into *got_p. `what` names the file in messages. */
static acx_status_t gz_read_all(gzFile gz, const char *what, void *buf, size_t len,
                                int64_t *got_p) {
    acx_status_t status = ACX_OK;
    size_t done = 0;
    while (done < len) {
        size_t want = len - done;
        if (want > (1u << 30)) want = 1u << 30;
        int got;
        ACX_ZLIB_CHECK_GOTO(got = gzread(gz, (uint8_t *)buf + done, (unsigned)want), gz, what,
                            status, out);
        if (got == 0) break;
        done += (size_t)got;
    }
    *got_p = (int64_t)done;
out:
    return status;
}

/* Parse `path` as an IDX uint8 file of `ndim` dims (`kind` names it in
 * messages: "images", "labels"). */
static acx_status_t idx_read(const char *path, int ndim, const char *kind, idx_file_t *f) {
    acx_status_t status = ACX_OK;
    uint8_t head[4 + 4 * 3];
    int64_t got;
    char what[512];
    *f = (idx_file_t){.path = path, .ndim = ndim};
    snprintf(what, sizeof what, "IDX %s file '%s'", kind, path);

    gzFile gz;
    errno = 0; /* a NULL with errno still 0 is zlib's own failure */
    ACX_ZLIB_CHECK_PTR_GOTO(gz = gzopen(path, "rb"), what, status, err_out);
    ACX_ZLIB_CHECK_GOTO(gzbuffer(gz, 1u << 20), gz, what, status, err_close);

    ACX_CHECK_GOTO(gz_read_all(gz, what, head, 4, &got), status, err_close);
    if (got < 4) {
        status = ACX_ERROR(ACX_ERR_IO,
                           "IDX %s file '%s' is truncated: %lld bytes, shorter "
                           "than the 4-byte magic",
                           kind, path, (long long)got);
        goto err_close;
    }
    if (head[0] != 0 || head[1] != 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "'%s' is not an IDX file: magic %02x %02x %02x %02x, "
                           "expected 00 00 08 %02x",
                           path, head[0], head[1], head[2], head[3], ndim);
        goto err_close;
    }
    if (head[2] != IDX_TYPE_UBYTE) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "IDX %s file '%s' has element type 0x%02x; only 0x08 "
                           "(unsigned byte) is supported",
                           kind, path, head[2]);
        goto err_close;
    }
    if (head[3] != ndim) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "IDX %s file '%s' has %d dimension(s), expected %d",
                           kind, path, head[3], ndim);
        goto err_close;
    }
    size_t dim_bytes = 4 * (size_t)ndim;
    ACX_CHECK_GOTO(gz_read_all(gz, what, head + 4, dim_bytes, &got), status, err_close);
    if ((size_t)got < dim_bytes) {
        status = ACX_ERROR(ACX_ERR_IO,
                           "IDX %s file '%s' is truncated inside its header "
                           "(%d dims expected)",
                           kind, path, ndim);
        goto err_close;
    }
    size_t bytes = 1;
    for (int d = 0; d < ndim; d++) {
        const uint8_t *p = head + 4 + 4 * d;
        f->dims[d] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (f->dims[d] == 0) {
            status =
                ACX_ERROR(ACX_ERR_FORMAT, "IDX %s file '%s': dimension %d is 0", kind, path, d);
            goto err_close;
        }
        if (bytes > SIZE_MAX / f->dims[d]) {
            status = ACX_ERROR(ACX_ERR_FORMAT, "IDX %s file '%s': dimensions overflow", kind, path);
            goto err_close;
        }
        bytes *= f->dims[d];
    }
    f->bytes = bytes;
    f->data = acx_malloc(bytes, "IDX data");
    if (f->data == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto err_close;
    }
    ACX_CHECK_GOTO(gz_read_all(gz, what, f->data, bytes, &got), status, err_free);
    if ((size_t)got < bytes) {
        status = ACX_ERROR(ACX_ERR_IO,
                           "IDX %s file '%s' is truncated: expected %zu data bytes "
                           "after the header, got %lld",
                           kind, path, bytes, (long long)got);
        goto err_free;
    }
    uint8_t extra;
    ACX_CHECK_GOTO(gz_read_all(gz, what, &extra, 1, &got), status, err_free);
    if (got != 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "IDX %s file '%s' has data after the %zu bytes its "
                           "header announces (trailing garbage)",
                           kind, path, bytes);
        goto err_free;
    }
    /* gzclose frees gz whatever it returns: no handle for the reason */
    ACX_ZLIB_CHECK_GOTO(gzclose(gz), NULL, what, status, err_free_only);
    return ACX_OK;

err_free:
    free(f->data);
    f->data = NULL;
err_close:
    gzclose(gz);
err_out:
    return status;
err_free_only:
    free(f->data);
    f->data = NULL;
    return status;
}

/* ---- writing ---- */

/* Write one uint8 dataset /<group>/<name> with f's shape. */
static acx_status_t write_u8(hid_t group, const char *gname, const char *name, const idx_file_t *f,
                             const char *out) {
    acx_status_t status = ACX_OK;
    hsize_t dims[3];
    char what[512];
    snprintf(what, sizeof what, "dataset /%s/%s in '%s'", gname, name, out);
    for (int d = 0; d < f->ndim; d++)
        dims[d] = f->dims[d];
    hid_t space = -1, dset = -1;
    ACX_H5_CHECK_GOTO(space = H5Screate_simple(f->ndim, dims, NULL), what, status, done);
    /* default creation properties: contiguous layout, no filters */
    ACX_H5_CHECK_GOTO(
        dset = H5Dcreate2(group, name, H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
        what, status, done);
    ACX_H5_CHECK_GOTO(H5Dwrite(dset, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, f->data),
                      what, status, done);
    ACX_H5_CHECK_GOTO(H5Dclose(dset), what, status, done);
    dset = -1;
done:
    if (dset >= 0) H5Dclose(dset);
    if (space >= 0) H5Sclose(space);
    return status;
}

/* One split ("train"/"test"): images and labels, either may be absent. */
typedef struct {
    const char *name;
    idx_file_t images, labels;
} split_t;

static acx_status_t write_h5(const char *tmp, split_t *splits, int nsplits) {
    acx_status_t status = ACX_OK;
    char what[512];
    hid_t file = -1;
    snprintf(what, sizeof what, "'%s'", tmp);

    acx_h5_lock();
    acx_h5_quiet();
    ACX_CHECK_GOTO(acx_h5_create_import(tmp, "idx", &file), status, done);
    for (int s = 0; s < nsplits; s++) {
        split_t *sp = &splits[s];
        if (sp->images.data == NULL && sp->labels.data == NULL) continue;
        hid_t group;
        snprintf(what, sizeof what, "group /%s in '%s'", sp->name, tmp);
        ACX_H5_CHECK_GOTO(group = H5Gcreate2(file, sp->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                          what, status, done);
        if (sp->images.data != NULL) status = write_u8(group, sp->name, "images", &sp->images, tmp);
        if (status == ACX_OK && sp->labels.data != NULL)
            status = write_u8(group, sp->name, "labels", &sp->labels, tmp);
        if (status != ACX_OK) {
            H5Gclose(group);
            goto done;
        }
        ACX_H5_CHECK_GOTO(H5Gclose(group), what, status, done);
    }
    snprintf(what, sizeof what, "'%s'", tmp);
    /* H5Fclose flushes: its failure means the file is incomplete */
    ACX_H5_CHECK_GOTO(H5Fclose(file), what, status, done);
    file = -1;
done:
    if (file >= 0) H5Fclose(file);
    acx_h5_unlock();
    return status;
}

/* ---- the public entry point ---- */

ACX_API acx_status_t acx_import_idx(const char *train_images, const char *train_labels,
                                    const char *test_images, const char *test_labels,
                                    const char *out_path) {
    acx_status_t status = ACX_OK;
    split_t splits[2] = {{.name = "train"}, {.name = "test"}};
    const char *paths[2][2] = {{train_images, train_labels}, {test_images, test_labels}};
    char *tmp = NULL;

    if (out_path == NULL || out_path[0] == '\0')
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_import_idx: no output path");
    if (!((train_images && train_labels) || (test_images && test_labels)))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_import_idx: need at least one pair of images "
                                              "and labels files (train or test)");

    ACX_CHECK(acx_io_check_target(out_path));

    /* Read and validate everything before creating any file. */
    for (int s = 0; s < 2; s++) {
        split_t *sp = &splits[s];
        if (paths[s][0] != NULL)
            ACX_CHECK_GOTO(idx_read(paths[s][0], 3, "images", &sp->images), status, err_free);
        if (paths[s][1] != NULL)
            ACX_CHECK_GOTO(idx_read(paths[s][1], 1, "labels", &sp->labels), status, err_free);
        if (sp->images.data != NULL && sp->labels.data != NULL &&
            sp->images.dims[0] != sp->labels.dims[0]) {
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "%s images '%s' has %u samples but labels '%s' "
                               "has %u",
                               sp->name, sp->images.path, sp->images.dims[0], sp->labels.path,
                               sp->labels.dims[0]);
            goto err_free;
        }
    }

    size_t len = strlen(out_path);
    tmp = acx_malloc(len + 5, "temporary path");
    if (tmp == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto err_free;
    }
    memcpy(tmp, out_path, len);
    memcpy(tmp + len, ".tmp", 5);

    status = write_h5(tmp, splits, 2);
    if (status != ACX_OK) goto err_unlink;
    /* fsync, rename, fsync the directory: a crash leaves the old file or
     * the whole new one */
    status = acx_io_commit(tmp, out_path);
    if (status != ACX_OK) goto err_unlink;
    goto out;

err_unlink:
    unlink(tmp);
err_free:
out:
    for (int s = 0; s < 2; s++) {
        free(splits[s].images.data);
        free(splits[s].labels.data);
    }
    free(tmp);
    return status;
}

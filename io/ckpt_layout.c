/*
 * io/ckpt_layout.c — the pieces of the checkpoint file's HDF5 layout that
 * its writer (io/ckpt_write.c) and reader (io/ckpt_read.c) both use: the
 * check of a tensor's description, the existence of a path, a dataset's
 * shape and the row selection (io/ckpt_pkg.h). The names and the layout are
 * io/ckpt_format.h's.
 */
#include <stdio.h>
#include <string.h>

#include "io/ckpt_pkg.h"
#include "io/h5.h"

/* Check one tensor's description; the same for save and read. */
acx_status_t acx_ckpt_check_tensor(const acx_ckpt_tensor_t *t, int i) {
    if (t->path == NULL || t->path[0] == '\0')
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint tensor %d has no path", i);
    if ((int)t->dtype < 0 || t->dtype >= ACX_DTYPE_COUNT_)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint tensor '%s': bad dtype %d", t->path,
                         (int)t->dtype);
    if (t->ndim < 1 || t->ndim > ACX_MAX_DIMS)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint tensor '%s': ndim %d, expected 1..%d",
                         t->path, t->ndim, ACX_MAX_DIMS);
    for (int k = 0; k < t->ndim; k++)
        if (t->shape[k] < 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint tensor '%s': negative dim %d",
                             t->path, k);
    if (t->io_begin < 0 || t->io_end < t->io_begin || t->io_end > t->shape[0])
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "checkpoint tensor '%s': io rows [%lld, %lld) outside [0, %lld)", t->path,
                         (long long)t->io_begin, (long long)t->io_end, (long long)t->shape[0]);
    if (t->io_end > t->io_begin && t->fill == NULL &&
        (t->buf == NULL || t->io_begin < t->buf_row0 || t->io_end > t->buf_row0 + t->buf_rows))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "checkpoint tensor '%s': io rows [%lld, %lld) not inside the buffer's "
                         "rows [%lld, %lld)%s",
                         t->path, (long long)t->io_begin, (long long)t->io_end,
                         (long long)t->buf_row0, (long long)(t->buf_row0 + t->buf_rows),
                         t->buf == NULL ? " (buffer is NULL)" : "");
    return ACX_OK;
}

/* Whether every component of `path` exists: 1 yes, 0 no, -1 HDF5 failed
 * (a damaged group: the error stack is kept for acx_error_h5, and the
 * answer is not "absent"). Asked component by component because H5Lexists
 * fails, rather than saying no, when an intermediate group is missing.
 * Lock held. */
int acx_ckpt_path_exists(hid_t file, const char *path) {
    char buf[1024];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, path, n + 1);
    if (strcmp(buf, "/") == 0) return 1;
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (i > 0 && buf[i - 1] != '/') {
            htri_t e = H5Lexists(file, buf, H5P_DEFAULT);
            if (e < 0) return -1;
            if (e == 0) return 0;
        }
        buf[i] = c;
    }
    return 1;
}

/* Select rows [r0, r0 + n) x all inner dims of `fspace` (a dataspace of
 * dims[ndim]) and create the memory space of the selection's shape: HDF5
 * then moves whole runs (a flat [n * row] memory space makes it map every
 * element). Lock held. */
acx_status_t acx_ckpt_select_rows(hid_t fspace, int ndim, const hsize_t *dims, hsize_t r0,
                                  hsize_t n, hid_t *mspace_p, const char *what) {
    acx_status_t status = ACX_OK;
    hsize_t start[ACX_MAX_DIMS] = {0}, count[ACX_MAX_DIMS];
    for (int k = 0; k < ndim; k++)
        count[k] = dims[k];
    start[0] = r0;
    count[0] = n;
    ACX_H5_CHECK_GOTO(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL), what,
                      status, out);
    hid_t m;
    ACX_H5_CHECK_GOTO(m = H5Screate_simple(ndim, count, NULL), what, status, out);
    *mspace_p = m;
out:
    return status;
}

int acx_ckpt_dataset_shape(hid_t dset, acx_ckpt_shape_t *s) {
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

/*
 * io/h5.h — HDF5 helpers (library-private): the error check that keeps
 * HDF5's own message, and the one lock every HDF5 call in acx takes
 * (Debian's parallel HDF5 is not thread-safe; the data loader's prefetch
 * thread and the main thread both use it).
 */
#ifndef ACX_IO_H5_H
#define ACX_IO_H5_H

#include <hdf5.h>
#include <stdint.h>

#include "acx/status.h"

/* Take / release the library-wide HDF5 lock (recursive). */
void acx_h5_lock(void);
void acx_h5_unlock(void);

/* Silence HDF5's automatic error printing (acx reports errors itself) and
 * turn off HDF5's dynamic plugin loading (H5PLset_loading_state(0)): acx
 * never loads a shared library because a file it opens names a filter
 * (a file with a dataset that needs one is refused by
 * acx_h5_check_dataset). Every io/ function calls it before it opens a
 * file. Idempotent. Takes the lock. */
void acx_h5_quiet(void);

/* Record an HDF5 failure: "<call> <what> failed: <innermost HDF5 message>".
 * A failure whose HDF5 error stack says the file itself is bad (a metadata
 * checksum, a signature, a version or value that cannot be decoded, an
 * address past the end of the file) is recorded instead as ACX_ERR_FORMAT
 * "<what> is damaged: <HDF5 message> (<call>)": damage, never "absent" or
 * "mismatch". acx_h5_last_damaged() then returns 1 on this thread. */
acx_status_t acx_error_h5(const char *call, const char *what, const char *file, int line);

/* 1 when the last acx_error_h5 on this thread classified damage. */
int acx_h5_last_damaged(void);

/* ret < 0 means failure for herr_t and hid_t alike. `what` names the
 * object ("dataset /train/images in 'x.h5'"). */
#define ACX_H5_CHECK_GOTO(call, what, status, label)                                               \
    do {                                                                                           \
        if ((call) < 0) {                                                                          \
            (status) = acx_error_h5(#call, (what), __FILE__, __LINE__);                            \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* acx dtype of an HDF5 datatype (integer/float classes only), or -1. */
int acx_h5_to_dtype(hid_t type);
/* Native HDF5 type for an acx dtype (not to be closed), or -1. */
hid_t acx_h5_native(int dtype);

/* Scalar root/object attributes: a fixed-length NUL-terminated ASCII string,
 * and a 64-bit signed integer (stored little-endian). Take the lock. Return
 * < 0 on failure with HDF5's error stack kept for ACX_H5_CHECK_GOTO. */
herr_t acx_h5_write_attr_str(hid_t obj, const char *name, const char *value);
herr_t acx_h5_write_attr_i64(hid_t obj, const char *name, int64_t value);

/* What acx_h5_check_dataset found out about a dataset's storage. */
typedef struct acx_h5_storage {
    uint64_t bytes;  /* logical: elements x element size (file type) */
    uint64_t stored; /* bytes of storage the file holds for it (H5Dget_storage_size) */
    int layout;      /* H5D_layout_t */
    int written;     /* stored > 0, or bytes == 0 */
} acx_h5_storage_t;

/* Check an open dataset before anything is read or allocated for it, so
 * a small file can make acx neither load code, nor allocate or iterate
 * more than the file holds:
 *  - every filter must be built into HDF5 (a dataset needing a plugin:
 *    ACX_ERR_NOT_SUPPORTED "needs HDF5 filter N (a plugin); acx never
 *    loads HDF5 plugins");
 *  - virtual and external layouts are refused (their data lives outside
 *    the file, or is a 2^40-element fill value);
 *  - its storage must lie within the file's size (H5Fget_filesize);
 *  - with `need_written` (checkpoints: every byte is written by the
 *    writer), its logical size must match what the file stores for it:
 *    contiguous and compact storage exactly, chunked at least as much
 *    unless a compression filter is set (then at most 1100x: deflate's
 *    ratio is bounded by 1032:1), and a dataset of non-zero size that was
 *    never written (no storage) is refused (ACX_ERR_FORMAT "... is
 *    damaged: it was never written"). Data files (the loader) pass 0: an
 *    unwritten chunk reads as fill values, which a batch-sized read
 *    bounds.
 * `what` names the dataset in messages. Lock held (or taken). */
acx_status_t acx_h5_check_dataset(hid_t dset, const char *what, int need_written,
                                  acx_h5_storage_t *st_p);

/* An attribute's data must fit in the file (its elements x size <=
 * H5Fget_filesize): checked before allocating to read it. ACX_ERR_FORMAT
 * "... is damaged" otherwise. */
acx_status_t acx_h5_check_attr(hid_t attr, const char *what);

/* io's writers replace their output atomically (write path.tmp, rename):
 * refuse a `path` that exists and is not a regular file (a device such as
 * /dev/null, a directory, a FIFO), which the rename would silently replace.
 * ACX_ERR_IO naming the path and what it is; ACX_OK if absent or regular. */
acx_status_t acx_io_check_target(const char *path);

/* Durable output, the one home of the fsync/rename sequence io's writers
 * share (the checkpoint writer, safetensors, the importers):
 *   acx_io_fsync_path: fsync the file (directory 0) or directory
 *     (directory 1) `path`, opened by name; a directory whose file system
 *     refuses fsync on it (EINVAL, EROFS) counts as synced (the rename is
 *     then as durable as that file system makes it). ACX_ERR_IO naming the
 *     path, errno left as fsync (or open) set it.
 *   acx_io_fsync_dir_of: acx_io_fsync_path of the directory holding `path`
 *     ("." for a bare name).
 *   acx_io_commit: fsync `tmp` (closed, complete), rename it to `path`,
 *     fsync path's directory: after a crash `path` is either its old self
 *     or the whole new file, never a name for data still in the page
 *     cache. ACX_ERR_IO naming the step; the caller removes tmp on failure
 *     (a failed directory fsync leaves the renamed file in place).
 * Not collective, no HDF5 calls (no lock needed). */
acx_status_t acx_io_fsync_path(const char *path, int directory);
acx_status_t acx_io_fsync_dir_of(const char *path);
acx_status_t acx_io_commit(const char *tmp, const char *path);

/* The importers' output (acx data import-idx, import-text): create or
 * truncate the HDF5 file `path` (sec2 driver) with the root attribute
 * "source" = source and return it open in *file_p (the caller closes it;
 * H5Fclose's failure means the file is incomplete). The caller holds the
 * HDF5 lock. ACX_ERR_HDF5 naming the path. */
acx_status_t acx_h5_create_import(const char *path, const char *source, hid_t *file_p);

#endif /* ACX_IO_H5_H */

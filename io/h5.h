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

/* Silence HDF5's automatic error printing (acx reports errors itself).
 * Idempotent. Call with the lock held. */
void acx_h5_quiet(void);

/* Record an HDF5 failure: "<call> <what> failed: <innermost HDF5 message>". */
acx_status_t acx_error_h5(const char *call, const char *what, const char *file, int line);

/* ret < 0 means failure for herr_t and hid_t alike. `what` names the
 * object ("dataset /train/images in 'x.h5'"). */
#define ACX_H5_CHECK_GOTO(call, what, status, label)                           \
    do {                                                                       \
        if ((call) < 0) {                                                      \
            (status) = acx_error_h5(#call, (what), __FILE__, __LINE__);        \
            goto label;                                                        \
        }                                                                      \
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

/* io's writers replace their output atomically (write path.tmp, rename):
 * refuse a `path` that exists and is not a regular file (a device such as
 * /dev/null, a directory, a FIFO), which the rename would silently replace.
 * ACX_ERR_IO naming the path and what it is; ACX_OK if absent or regular. */
acx_status_t acx_io_check_target(const char *path);

#endif /* ACX_IO_H5_H */

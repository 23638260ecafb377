/*
 * base/error.h — recording errors (library-private).
 *
 * The function that detects an error records it once with ACX_ERROR (status,
 * file:line, the failing call and the foreign library's own text); callers
 * only propagate the status (ACX_CHECK / ACX_CHECK_GOTO). One checking macro
 * per foreign library keeps the foreign message: ACX_MPI_CHECK and
 * ACX_SYS_CHECK / ACX_SYS_ERRNUM_CHECK here, ACX_H5_CHECK in io/h5.h,
 * ACX_YAML_CHECK_GOTO and ACX_ZLIB_CHECK_GOTO next to their only callers
 * (base/config.c, io/idx.c).
 */
#ifndef ACX_BASE_ERROR_H
#define ACX_BASE_ERROR_H

#include <errno.h>
#include <string.h>

#include "acx/status.h"

#define ACX_ERRMSG_MAX 1024

/* Record "file:line: <formatted message>" as the calling thread's last error
 * (file stripped of leading "./" and "../") and return status. */
acx_status_t acx_error_set(acx_status_t status, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Replace the thread's last error with `message` verbatim (used to carry
 * another rank's message). Returns status. */
acx_status_t acx_error_set_raw(acx_status_t status, const char *message);

/* Clear the calling thread's last error. */
void acx_error_clear(void);

#define ACX_ERROR(status, ...) acx_error_set((status), __FILE__, __LINE__, __VA_ARGS__)

#define ACX_CHECK(call)                                                                            \
    do {                                                                                           \
        acx_status_t acx_chk_ = (call);                                                            \
        if (acx_chk_ != ACX_OK) return acx_chk_;                                                   \
    } while (0)

/* For functions that hold resources: set `status` and jump to `label`. */
#define ACX_CHECK_GOTO(call, status, label)                                                        \
    do {                                                                                           \
        (status) = (call);                                                                         \
        if ((status) != ACX_OK) goto label;                                                        \
    } while (0)

/* Record an MPI failure "MPI_Xxx(...) failed: <MPI_Error_string>". */
acx_status_t acx_error_mpi(int ret, const char *call, const char *file, int line);

#define ACX_MPI_CHECK(call)                                                                        \
    do {                                                                                           \
        int acx_mpi_ret_ = (call);                                                                 \
        if (acx_mpi_ret_ != 0 /* MPI_SUCCESS */)                                                   \
            return acx_error_mpi(acx_mpi_ret_, #call, __FILE__, __LINE__);                         \
    } while (0)

#define ACX_MPI_CHECK_GOTO(call, status, label)                                                    \
    do {                                                                                           \
        int acx_mpi_ret_ = (call);                                                                 \
        if (acx_mpi_ret_ != 0) {                                                                   \
            (status) = acx_error_mpi(acx_mpi_ret_, #call, __FILE__, __LINE__);                     \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* System calls that return -1 and set errno (open, rename, fstat, ...):
 * record "<call> failed: <strerror(errno)>" at the caller's file:line with
 * status ACX_ERR_SYSTEM. The call text is the whole expression, so write
 * the call itself (or `fd = open(...)`) as the argument. */
#define ACX_SYS_CHECK(call)                                                                        \
    do {                                                                                           \
        if ((call) == -1)                                                                          \
            return ACX_ERROR(ACX_ERR_SYSTEM, "%s failed: %s", #call, strerror(errno));             \
    } while (0)

#define ACX_SYS_CHECK_GOTO(call, status, label)                                                    \
    do {                                                                                           \
        if ((call) == -1) {                                                                        \
            (status) = ACX_ERROR(ACX_ERR_SYSTEM, "%s failed: %s", #call, strerror(errno));         \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* Calls that return an error number instead of setting errno (pthread_*,
 * posix_memalign): 0 is success, anything else is the errno value. */
#define ACX_SYS_ERRNUM_CHECK(call)                                                                 \
    do {                                                                                           \
        int acx_sys_ret_ = (call);                                                                 \
        if (acx_sys_ret_ != 0)                                                                     \
            return ACX_ERROR(ACX_ERR_SYSTEM, "%s failed: %s", #call, strerror(acx_sys_ret_));      \
    } while (0)

#define ACX_SYS_ERRNUM_CHECK_GOTO(call, status, label)                                             \
    do {                                                                                           \
        int acx_sys_ret_ = (call);                                                                 \
        if (acx_sys_ret_ != 0) {                                                                   \
            (status) = ACX_ERROR(ACX_ERR_SYSTEM, "%s failed: %s", #call, strerror(acx_sys_ret_));  \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* Allocation that records ACX_ERR_NO_MEMORY with the byte count. */
void *acx_malloc_(size_t bytes, const char *what, const char *file, int line);
void *acx_calloc_(size_t n, size_t size, const char *what, const char *file, int line);
#define acx_malloc(bytes, what)   acx_malloc_((bytes), (what), __FILE__, __LINE__)
#define acx_calloc(n, size, what) acx_calloc_((n), (size), (what), __FILE__, __LINE__)
/* 64-byte aligned allocation (free with free()); NULL and last error on failure. */
void *acx_aligned_alloc_(size_t bytes, const char *what, const char *file, int line);
#define acx_aligned_alloc(bytes, what) acx_aligned_alloc_((bytes), (what), __FILE__, __LINE__)

#endif /* ACX_BASE_ERROR_H */

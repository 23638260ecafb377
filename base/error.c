/*
 * base/error.c — status strings, the per-thread last-error message,
 * and the allocation wrappers that record ACX_ERR_NO_MEMORY.
 *
 * The message lives in thread-local storage so the data loader's prefetch
 * thread and the main thread never overwrite each other's errors.
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static _Thread_local char last_error[ACX_ERRMSG_MAX];

static const char *const status_text[ACX_STATUS_COUNT_] = {
    [ACX_OK] = "success",
    [ACX_ERR_INVALID_ARG] = "invalid argument",
    [ACX_ERR_INVALID_CONFIG] = "invalid configuration",
    [ACX_ERR_NO_MEMORY] = "out of memory",
    [ACX_ERR_SYSTEM] = "system call failed",
    [ACX_ERR_MPI] = "MPI error",
    [ACX_ERR_HDF5] = "HDF5 error",
    [ACX_ERR_IO] = "I/O error",
    [ACX_ERR_FORMAT] = "invalid file contents",
    [ACX_ERR_STATE] = "call not valid in this state",
    [ACX_ERR_NOT_SUPPORTED] = "not supported",
    [ACX_ERR_REMOTE] = "another rank failed",
    [ACX_ERR_NCCL] = "NCCL error",
    [ACX_ERR_CUDA] = "CUDA error",
    [ACX_ERR_YAML] = "YAML error",
    [ACX_ERR_ZLIB] = "zlib error",
    [ACX_ERR_TIMEOUT] = "timed out",
    [ACX_ERR_INTERNAL] = "internal error (a bug in acx)",
};

ACX_API const char *acx_status_string(acx_status_t status) {
    if ((int)status < 0 || status >= ACX_STATUS_COUNT_ || status_text[status] == NULL)
        return "unknown status";
    return status_text[status];
}

ACX_API const char *acx_last_error(void) { return last_error; }

/* "../../runtime/x.c" and "./runtime/x.c" both print as "runtime/x.c". */
static const char *short_path(const char *file) {
    for (;;) {
        if (strncmp(file, "./", 2) == 0)
            file += 2;
        else if (strncmp(file, "../", 3) == 0)
            file += 3;
        else
            return file;
    }
}

acx_status_t acx_error_set(acx_status_t status, const char *file, int line, const char *fmt, ...) {
    int n = snprintf(last_error, sizeof last_error, "%s:%d: ", short_path(file), line);
    if (n < 0 || (size_t)n >= sizeof last_error) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

acx_status_t acx_error_set_raw(acx_status_t status, const char *message) {
    snprintf(last_error, sizeof last_error, "%s", message ? message : "");
    return status;
}

void acx_error_clear(void) { last_error[0] = '\0'; }

acx_status_t acx_error_mpi(int ret, const char *call, const char *file, int line) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(ret, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error code %d", ret);
    return acx_error_set(ACX_ERR_MPI, file, line, "%s failed: %s", call, text);
}

void *acx_malloc_(size_t bytes, const char *what, const char *file, int line) {
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL)
        acx_error_set(ACX_ERR_NO_MEMORY, file, line, "cannot allocate %zu bytes for %s", bytes,
                      what);
    return p;
}

void *acx_calloc_(size_t n, size_t size, const char *what, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        acx_error_set(ACX_ERR_NO_MEMORY, file, line, "cannot allocate %zu x %zu bytes for %s", n,
                      size, what);
    return p;
}

void *acx_aligned_alloc_(size_t bytes, const char *what, const char *file, int line) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        acx_error_set(ACX_ERR_NO_MEMORY, file, line, "cannot allocate %zu bytes for %s", bytes,
                      what);
        return NULL;
    }
    return p;
}

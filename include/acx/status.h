/*
 * acx/status.h — status codes and the last-error message.
 *
 * Every fallible public function returns acx_status_t. On failure the
 * function that detected the problem records a message for the calling
 * thread, e.g.
 *   "io/dataloader.c:212: H5Dopen2(/train/images) in 'fmnist.h5' failed: ..."
 * which acx_last_error() returns until the next failure on that thread.
 * Output arguments (named *_p) are written only on success.
 *
 * Every status other than ACX_OK is an error, so ACX_TRY can propagate any
 * of them. The two ordinary outcomes that once were statuses are not: the
 * end of an epoch is acx_dataloader_next giving *batch_p = NULL with ACX_OK
 * (a loop ends the way a Python `for` over a DataLoader does), and a
 * preemption stop is acx_accumulate_end returning ACX_OK with
 * acx_preempted(acc) true. A status that ACX_TRY passes up as an error but
 * the program must treat as success (NCCL reserves ncclInProgress for the
 * same reason) would make the checking macro wrong in the commonest loops;
 * a flag the program tests only where it cares cannot be mistaken for a
 * failure.
 */
#ifndef ACX_STATUS_H
#define ACX_STATUS_H

#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Explicit values: they appear in logs and bug reports. Never renumber;
 * add new codes at the end. */
typedef enum acx_status {
    ACX_OK = 0,
    /* 1: unused (was END_OF_DATA: acx_dataloader_next now gives a NULL batch) */
    ACX_ERR_INVALID_ARG = 2,    /* a NULL pointer, a bad size, a bad enum value */
    ACX_ERR_INVALID_CONFIG = 3, /* a config file, key, value or environment variable */
    ACX_ERR_NO_MEMORY = 4,
    ACX_ERR_SYSTEM = 5, /* a system call failed (errno text in the message) */
    ACX_ERR_MPI = 6,
    ACX_ERR_HDF5 = 7,
    ACX_ERR_IO = 8,             /* a file is missing, truncated or not what was expected */
    ACX_ERR_FORMAT = 9,         /* a file parsed but its contents are invalid */
    ACX_ERR_STATE = 10,         /* a call made at the wrong time (e.g. before acx_prepare) */
    ACX_ERR_NOT_SUPPORTED = 11, /* compiled out, or not implemented for this case */
    ACX_ERR_REMOTE = 12,        /* another rank failed; the message says which and why */
    ACX_ERR_NCCL = 13,
    ACX_ERR_CUDA = 14,
    ACX_ERR_YAML = 15,
    ACX_ERR_ZLIB = 16,
    ACX_ERR_TIMEOUT = 17,
    ACX_ERR_INTERNAL = 18, /* a bug in acx: please report it */
    /* 19: unused (was PREEMPTED: acx_accumulate_end returns ACX_OK and
     * acx_preempted(acc) says the job stopped) */
    ACX_STATUS_COUNT_ = 20
} acx_status_t;

/* Short fixed text for a status ("invalid argument"). Static storage; never NULL. */
ACX_API const char *acx_status_string(acx_status_t status);

/* The calling thread's most recent error message (empty string if none).
 * Valid until the next acx call on this thread that fails. Never NULL. */
ACX_API const char *acx_last_error(void);

/* Evaluate an acx call and return its status from the enclosing function
 * (which must return acx_status_t) when it is not ACX_OK. A convenience for
 * programs; acx_last_error() still holds the detailed message. Safe around
 * every acx call: no call returns a non-error status other than ACX_OK. */
#define ACX_TRY(call)                                                                              \
    do {                                                                                           \
        acx_status_t acx_try_status_ = (call);                                                     \
        if (acx_try_status_ != ACX_OK) return acx_try_status_;                                     \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif /* ACX_STATUS_H */

/*
 * device/device.h — which CUDA device this process uses (library-private).
 *
 * One device per rank: local rank modulo the visible devices (with Slurm's
 * GPU binding each task sees one device: device 0). The device is bound
 * (cudaSetDevice) at acx_init only when the memory acx's buffers live in
 * needs it (acx_device_need_t: the collective backend says which,
 * collectives/coll.h's acx_coll_device_setup); with host memory every buffer
 * acx owns is host memory and no device is bound, whatever the machine
 * has. Either way acx_device_select logs one info line that says which
 * and why. This layer knows nothing of collectives: its user names itself
 * in a string.
 *
 * device/device.c is compiled in every build: without CUDA it reports no
 * devices ("this build has no CUDA") and never binds one.
 */
#ifndef ACX_DEVICE_DEVICE_H
#define ACX_DEVICE_DEVICE_H

#include <stddef.h>

#include "acx/status.h"

/* The memory a user of the device (a collective backend) works on. */
typedef enum acx_device_need {
    ACX_DEVICE_NEED_HOST = 0,    /* host memory: no device is bound */
    ACX_DEVICE_NEED_CUDA = 1,    /* CUDA device memory: local rank modulo the devices is bound */
    ACX_DEVICE_NEED_EMULATED = 2 /* the emulated device's memory (device/ops.h): none bound */
} acx_device_need_t;

/* Number of CUDA devices this process sees (0 without CUDA, without a
 * driver, or with none visible); probed once, then cached. why (may be
 * NULL) receives, when the count is 0, the reason in a few words
 * ("cudaGetDeviceCount: cudaErrorInsufficientDriver: ..."). Not collective;
 * never fails. */
int acx_device_count(char *why, size_t why_len);

/* Choose and bind this rank's device when `need` is CUDA device memory,
 * else stay on host memory (also for ACX_DEVICE_NEED_EMULATED, whose device
 * memory is the emulated device's); log one info line (device name and PCI
 * bus id, or "none bound" and why) that names `user` (e.g. "mpi backend").
 * local_rank/local_size: this rank on its node. Not collective (callers
 * agree on the outcome). Errors: ACX_ERR_NOT_SUPPORTED (CUDA memory needed,
 * no device visible), ACX_ERR_INVALID_ARG (user NULL, need out of range),
 * ACX_ERR_CUDA (cudaSetDevice failed). */
acx_status_t acx_device_select(acx_device_need_t need, const char *user, int local_rank,
                               int local_size);

/* Bind local_rank modulo the visible devices whatever the backend, for a
 * program that brings its own device buffers to a host-memory backend (the
 * MPI backend stages them through pinned memory): acx-bench-* -d cuda -b mpi,
 * tests/gpu. Several ranks may share a device (no warning). Logs the same
 * "device:" info line. Not collective. Errors: ACX_ERR_NOT_SUPPORTED ("no
 * CUDA device: <reason>"), ACX_ERR_INVALID_ARG, ACX_ERR_CUDA. */
acx_status_t acx_device_use(int local_rank, int local_size);

/* The device bound by acx_device_select or acx_device_use, or -1 (host
 * memory). Process state, like CUDA's own current device. */
int acx_device_bound(void);

#endif /* ACX_DEVICE_DEVICE_H */

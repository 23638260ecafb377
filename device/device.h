/*
 * device/device.h — which CUDA device this process uses (library-private).
 *
 * One device per rank: local rank modulo the visible devices (with Slurm's
 * GPU binding each task sees one device: device 0). The device is bound
 * (cudaSetDevice) at acx_init only when the collective backend works on
 * device memory (NCCL); with the MPI backend every buffer acx owns is host
 * memory and no device is bound, whatever the machine has. Either way
 * acx_device_setup logs one info line that says which and why.
 *
 * device/device.c is compiled in every build: without CUDA it reports no
 * devices ("this build has no CUDA") and never binds one.
 */
#ifndef ACX_CUDA_DEVICE_H
#define ACX_CUDA_DEVICE_H

#include <stddef.h>

#include "acx/status.h"

struct acx_coll_ops;

/* Number of CUDA devices this process sees (0 without CUDA, without a
 * driver, or with none visible); probed once, then cached. why (may be
 * NULL) receives, when the count is 0, the reason in a few words
 * ("cudaGetDeviceCount: cudaErrorInsufficientDriver: ..."). Not collective;
 * never fails. */
int acx_device_count(char *why, size_t why_len);

/* Choose and bind this rank's device when `ops` works on device memory
 * (ops->device_memory), else stay on host memory (also for a test double,
 * ops->emulated, whose device memory is the emulated device's); log one info line (device
 * name and PCI bus id, or "host memory" and why). local_rank/local_size:
 * this rank on its node. Not collective (callers agree on the outcome).
 * Errors: ACX_ERR_NOT_SUPPORTED (device backend, no device visible),
 * ACX_ERR_CUDA (cudaSetDevice failed). */
acx_status_t acx_device_setup(const struct acx_coll_ops *ops, int local_rank, int local_size);

/* Bind local_rank modulo the visible devices whatever the backend, for a
 * program that brings its own device buffers to a host-memory backend (the
 * MPI backend stages them through pinned memory): acx-bench-* -d cuda -b mpi,
 * tests/gpu. Several ranks may share a device (no warning). Logs the same
 * "device:" info line. Not collective. Errors: ACX_ERR_NOT_SUPPORTED ("no
 * CUDA device: <reason>"), ACX_ERR_INVALID_ARG, ACX_ERR_CUDA. */
acx_status_t acx_device_use(int local_rank, int local_size);

/* The device bound by acx_device_setup or acx_device_use, or -1 (host memory). */
int acx_device_bound(void);

#endif /* ACX_CUDA_DEVICE_H */

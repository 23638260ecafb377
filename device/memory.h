/*
 * device/memory.h — device memory for C code that must not include a CUDA
 * header (library-private): is a pointer device memory, device buffers and
 * copies, and a reused pool of pinned (page-locked) host blocks for staging
 * device data through host memory.
 *
 * Users: the MPI backend, which accepts device buffers by staging them
 * through pinned host memory (collectives/mpi/coll_mpi_stage.c), and the
 * programs that bring their own device buffers (acx-bench-* -d cuda,
 * tests/gpu). device/memory.c is compiled in every build: without CUDA no
 * pointer is device memory and the allocating functions return
 * ACX_ERR_NOT_SUPPORTED ("this build has no CUDA").
 *
 * Every CUDA failure is ACX_ERR_CUDA naming the call, with cudaGetErrorName
 * and cudaGetErrorString (device/cuda_check.h). Copies are synchronous cudaMemcpy
 * calls on the legacy default stream: they start after the work already
 * enqueued on the legacy stream and on every blocking stream of the device,
 * and they are complete when the function returns. Work on a stream created
 * with cudaStreamNonBlocking is not waited for: synchronize it first.
 */
#ifndef ACX_DEVICE_MEMORY_H
#define ACX_DEVICE_MEMORY_H

#include <stddef.h>

#include "acx/status.h"

/* *is_device_p = 1 when p points into memory allocated with cudaMalloc (CUDA
 * reports cudaMemoryTypeDevice), 0 otherwise: pageable or pinned host
 * memory, managed memory (the host can read it), NULL. Without CUDA, or when
 * this process sees no device (acx_device_count, probed once), it answers 0
 * without calling CUDA at all. With a device visible the check is one
 * cudaPointerGetAttributes call (a fraction of a microsecond), which may
 * create CUDA's primary context on the current device when this process has
 * none yet. Not collective. Errors: ACX_ERR_CUDA (*is_device_p untouched). */
acx_status_t acx_cuda_pointer_is_device(const void *p, int *is_device_p);

/* *p_p = a device buffer of bytes bytes on the current device (cudaMalloc;
 * NULL for 0 bytes); `what` names it in the error. Errors: ACX_ERR_CUDA,
 * ACX_ERR_NOT_SUPPORTED (no CUDA in this build). */
acx_status_t acx_cuda_malloc(size_t bytes, const char *what, void **p_p);

/* cudaFree(p); NULL is fine. An error here (a sticky error from an earlier
 * kernel) is logged, not returned: a free cannot be retried. */
void acx_cuda_free(void *p);

/* Copy bytes bytes from src to dst, host or device either (cudaMemcpyDefault:
 * unified addressing decides the direction); synchronous. Errors:
 * ACX_ERR_CUDA, ACX_ERR_NOT_SUPPORTED. */
acx_status_t acx_cuda_memcpy(void *dst, const void *src, size_t bytes);

/* Set bytes bytes of device memory at dst to `byte` (cudaMemset); the
 * memset is complete when this returns. Errors as acx_cuda_memcpy. */
acx_status_t acx_cuda_memset(void *dst, int byte, size_t bytes);

/* ---- pinned staging blocks ---- */

/*
 * A small pool of pinned host blocks (cudaMallocHost), reused from call to
 * call so that staging a collective does not pin and unpin memory each time
 * (pinning is a system call that costs ~1 ms per 100 MiB). Blocks are kept
 * in ACX_CUDA_PINNED_SLOTS slots, sized up to a multiple of 2 MiB; a request
 * takes the smallest free cached block that fits, else replaces the
 * smallest free one, else (every slot in use) gets a block of its own that
 * its release frees. Thread-safe (a mutex); one process-wide pool.
 */
#define ACX_CUDA_PINNED_SLOTS 8

/* *p_p = a pinned host block of at least bytes bytes (NULL for 0 bytes),
 * owned by the caller until acx_cuda_pinned_release. Contents are
 * undefined. Errors: ACX_ERR_CUDA (cudaMallocHost failed: pinned memory is
 * limited by `ulimit -l` and the machine), ACX_ERR_NOT_SUPPORTED. */
acx_status_t acx_cuda_pinned_acquire(size_t bytes, void **p_p);

/* Give a block from acx_cuda_pinned_acquire back to the pool (NULL is fine). */
void acx_cuda_pinned_release(void *p);

/* Free every cached block that is not in use (cudaFreeHost): called when the
 * last MPI-backend communicator is destroyed, so that acx_finalize leaves no
 * pinned memory behind. Returns the bytes freed. */
size_t acx_cuda_pinned_trim(void);

#endif /* ACX_DEVICE_MEMORY_H */

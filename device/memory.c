/*
 * device/memory.c — the pointer check, device buffers and copies, and the
 * pinned staging pool of device/memory.h, through the CUDA runtime API only.
 *
 * Compiled in every build. Without CUDA the pointer check answers "host" and
 * everything that would need a device fails with ACX_ERR_NOT_SUPPORTED, so
 * callers (the MPI backend's staging, the benchmarks) need no #if.
 *
 * Owns only memory; which device is current is device/device.c's, and when to
 * stage a collective is collectives/mpi/coll_mpi_stage.c's.
 */
#include <pthread.h>
#include <stdint.h>

#include "device/device.h"
#include "device/memory.h"
#include "base/error.h"
#include "base/log.h"

#if ACX_HAVE_CUDA
#include "device/cuda_check.h"

/* ---- pointers, buffers, copies ---- */

acx_status_t acx_cuda_pointer_is_device(const void *p, int *is_device_p) {
    if (is_device_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_cuda_pointer_is_device: is_device_p is NULL");
    /* no device visible: no device memory can exist, and no CUDA call is
     * made (a host-only run of a CUDA build never touches the runtime here) */
    if (p == NULL || acx_device_count(NULL, 0) == 0) {
        *is_device_p = 0;
        return ACX_OK;
    }
    struct cudaPointerAttributes attr;
    /* CUDA 11 and later: host memory CUDA does not know is reported as
     * cudaMemoryTypeUnregistered, not as an error */
    ACX_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
    *is_device_p = attr.type == cudaMemoryTypeDevice;
    return ACX_OK;
}

acx_status_t acx_cuda_malloc(size_t bytes, const char *what, void **p_p) {
    void *p = NULL;
    if (p_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_cuda_malloc: p_p is NULL");
    if (bytes > 0) {
        cudaError_t ret = cudaMalloc(&p, bytes);
        if (ret != cudaSuccess) {
            cudaGetLastError();
            return ACX_ERROR(ACX_ERR_CUDA, "cudaMalloc(%zu bytes) for %s failed: %s: %s", bytes,
                             what != NULL ? what : "a device buffer", cudaGetErrorName(ret),
                             cudaGetErrorString(ret));
        }
    }
    *p_p = p;
    return ACX_OK;
}

void acx_cuda_free(void *p) {
    if (p == NULL) return;
    cudaError_t ret = cudaFree(p);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        ACX_WARN(ACX_SUBSYS_COLL, "cudaFree(%p) failed: %s: %s", p, cudaGetErrorName(ret),
                 cudaGetErrorString(ret));
    }
}

acx_status_t acx_cuda_memcpy(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return ACX_OK;
    ACX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    return ACX_OK;
}

acx_status_t acx_cuda_memset(void *dst, int byte, size_t bytes) {
    if (bytes == 0) return ACX_OK;
    ACX_CUDA_CHECK(cudaMemset(dst, byte, bytes));
    /* cudaMemset is asynchronous for device memory and runs on the default
     * stream (stream 0: the legacy stream, or the per-thread one when built
     * with --default-stream per-thread; 0 names the same one either way):
     * the promise is "done", so wait for that stream only, not for the
     * other streams (an NCCL communicator's stream may hold a bucket's
     * all-reduce in flight) as cudaDeviceSynchronize would. */
    ACX_CUDA_CHECK(cudaStreamSynchronize(0));
    return ACX_OK;
}

/* ---- the pinned pool ---- */

#define PINNED_ROUND ((size_t)2 << 20)

static struct {
    void *p;
    size_t cap;
    int in_use;
} slots[ACX_CUDA_PINNED_SLOTS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static acx_status_t pinned_alloc(size_t bytes, void **p_p) {
    void *p = NULL;
    cudaError_t ret = cudaMallocHost(&p, bytes);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        return ACX_ERROR(ACX_ERR_CUDA,
                         "cudaMallocHost(%zu bytes) for a pinned staging block failed: %s: %s "
                         "(pinned memory is limited by `ulimit -l` and the machine's RAM)",
                         bytes, cudaGetErrorName(ret), cudaGetErrorString(ret));
    }
    *p_p = p;
    return ACX_OK;
}

static void pinned_free(void *p) {
    cudaError_t ret = cudaFreeHost(p);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        ACX_WARN(ACX_SUBSYS_COLL, "cudaFreeHost(%p) failed: %s: %s", p, cudaGetErrorName(ret),
                 cudaGetErrorString(ret));
    }
}

acx_status_t acx_cuda_pinned_acquire(size_t bytes, void **p_p) {
    if (p_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_cuda_pinned_acquire: p_p is NULL");
    if (bytes == 0) {
        *p_p = NULL;
        return ACX_OK;
    }
    if (bytes > SIZE_MAX - PINNED_ROUND)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "pinned staging block of %zu bytes: too large",
                         bytes);
    size_t cap = (bytes + PINNED_ROUND - 1) / PINNED_ROUND * PINNED_ROUND;
    acx_status_t status = ACX_OK;
    pthread_mutex_lock(&pool_lock);
    int fit = -1, spare = -1; /* smallest free block that fits; smallest free slot */
    for (int s = 0; s < ACX_CUDA_PINNED_SLOTS; s++) {
        if (slots[s].in_use) continue;
        if (slots[s].p != NULL && slots[s].cap >= bytes &&
            (fit < 0 || slots[s].cap < slots[fit].cap))
            fit = s;
        if (spare < 0 || slots[s].cap < slots[spare].cap) spare = s;
    }
    if (fit >= 0) {
        slots[fit].in_use = 1;
        *p_p = slots[fit].p;
    } else if (spare >= 0) { /* replace a smaller free block (or fill an empty slot) */
        if (slots[spare].p != NULL) pinned_free(slots[spare].p);
        slots[spare].p = NULL;
        slots[spare].cap = 0;
        status = pinned_alloc(cap, &slots[spare].p);
        if (status == ACX_OK) {
            slots[spare].cap = cap;
            slots[spare].in_use = 1;
            *p_p = slots[spare].p;
        }
    } else { /* every slot busy: a block of its own, freed on release */
        status = pinned_alloc(bytes, p_p);
    }
    pthread_mutex_unlock(&pool_lock);
    return status;
}

void acx_cuda_pinned_release(void *p) {
    if (p == NULL) return;
    pthread_mutex_lock(&pool_lock);
    int s = 0;
    while (s < ACX_CUDA_PINNED_SLOTS && slots[s].p != p)
        s++;
    if (s < ACX_CUDA_PINNED_SLOTS)
        slots[s].in_use = 0;
    else
        pinned_free(p);
    pthread_mutex_unlock(&pool_lock);
}

size_t acx_cuda_pinned_trim(void) {
    size_t freed = 0;
    pthread_mutex_lock(&pool_lock);
    for (int s = 0; s < ACX_CUDA_PINNED_SLOTS; s++)
        if (slots[s].p != NULL && !slots[s].in_use) {
            pinned_free(slots[s].p);
            freed += slots[s].cap;
            slots[s].p = NULL;
            slots[s].cap = 0;
        }
    pthread_mutex_unlock(&pool_lock);
    return freed;
}

#else /* !ACX_HAVE_CUDA */

static acx_status_t no_cuda(const char *what) {
    return ACX_ERROR(ACX_ERR_NOT_SUPPORTED, "%s: this build has no CUDA (configure --with-cuda)",
                     what);
}

acx_status_t acx_cuda_pointer_is_device(const void *p, int *is_device_p) {
    (void)p;
    if (is_device_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_cuda_pointer_is_device: is_device_p is NULL");
    *is_device_p = 0;
    return ACX_OK;
}

acx_status_t acx_cuda_malloc(size_t bytes, const char *what, void **p_p) {
    (void)bytes, (void)p_p;
    return no_cuda(what != NULL ? what : "a device buffer");
}

void acx_cuda_free(void *p) { (void)p; }

acx_status_t acx_cuda_memcpy(void *dst, const void *src, size_t bytes) {
    (void)dst, (void)src, (void)bytes;
    return no_cuda("cudaMemcpy");
}

acx_status_t acx_cuda_memset(void *dst, int byte, size_t bytes) {
    (void)dst, (void)byte, (void)bytes;
    return no_cuda("cudaMemset");
}

acx_status_t acx_cuda_pinned_acquire(size_t bytes, void **p_p) {
    (void)bytes, (void)p_p;
    return no_cuda("a pinned staging block");
}

void acx_cuda_pinned_release(void *p) { (void)p; }

size_t acx_cuda_pinned_trim(void) { return 0; }

#endif /* ACX_HAVE_CUDA */

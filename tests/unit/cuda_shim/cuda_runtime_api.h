/*
 * tests/unit/cuda_shim/cuda_runtime_api.h — a CPU test double of the few
 * CUDA runtime calls acx-gpt's device model (examples/gpt/gpt_cuda.c)
 * makes, so that tests/unit/test_gpt_cuda_host can run gpt_cuda.c's
 * orchestration (buffers, the order of the passes, the products' operands)
 * on the host, in every build. Only that test puts this directory on its
 * include path (before CUDA's); nothing else sees it.
 *
 * "Device" memory is host memory (malloc); streams and events are tokens
 * and every call completes before it returns, so stream order is program
 * order. What this cannot show: anything about real device execution
 * (asynchrony, launch configuration, device arithmetic) — that is
 * tests/gpu/gpt_cuda.test's.
 */
#ifndef ACX_TEST_CUDA_SHIM_RUNTIME_H
#define ACX_TEST_CUDA_SHIM_RUNTIME_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum cudaError { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 } cudaError_t;
typedef struct shim_stream *cudaStream_t;
typedef struct shim_event *cudaEvent_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice
};
enum cudaMemoryType { cudaMemoryTypeUnregistered, cudaMemoryTypeHost, cudaMemoryTypeDevice };
struct cudaPointerAttributes {
    enum cudaMemoryType type;
};
#define cudaEventDisableTiming 2

static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaSuccess ? "cudaSuccess" : "cudaErrorMemoryAllocation";
}
static inline const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : "out of memory";
}
static inline cudaError_t cudaSetDevice(int d) {
    return d == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
/* tokens: distinct non-NULL addresses, never dereferenced */
static char shim_stream_token_, shim_event_token_;
static inline cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = (cudaStream_t)(void *)&shim_stream_token_;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    (void)s;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) {
    (void)f;
    *e = (cudaEvent_t)(void *)&shim_event_token_;
    return cudaSuccess;
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    (void)e;
    return cudaSuccess;
}
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    (void)e, (void)s;
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    (void)e;
    return cudaSuccess;
}
/* Fresh "device" memory is filled with NaN-looking bytes (0xff), not
 * zeros: a buffer read before it is written shows in the results. */
static inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = malloc(n > 0 ? n : 1);
    if (*p == NULL) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
static inline cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) {
    (void)k;
    memmove(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                                          cudaStream_t st) {
    (void)st;
    return cudaMemcpy(d, s, n, k);
}
static inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
    (void)st;
    memset(d, v, n);
    return cudaSuccess;
}
static inline cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    (void)p;
    a->type = cudaMemoryTypeDevice;
    return cudaSuccess;
}

#endif

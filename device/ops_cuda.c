/*
 * device/ops_cuda.c — the CUDA device of device/ops.h, over the
 * CUDA runtime API and the kernels of device/cuda_kernels.h (CUDA builds only).
 *
 * Memory is cudaMalloc'd on the current device (device/device.c binds it);
 * a fresh allocation is zeroed with cudaMemset and synchronized, so it is
 * zero before any stream uses it. Copies to and from the host are
 * cudaMemcpyAsync on the caller's stream followed by
 * cudaStreamSynchronize: they come after the work enqueued on that stream
 * and are complete on return, whatever kind of stream it is. The copy
 * stream's entries (non-blocking streams, events without timing,
 * cudaMemcpyAsync device -> host into pinned memory) are the runtime calls
 * themselves; the ordering is the caller's (device/ops.h).
 *
 * The optimizer kernels use the host build's multiply-add choice
 * (ACX_CUDA_MADD_OF_HOST), so they are bitwise the CPU's. The norms need a
 * workspace of ACX_CUDA_NORM_WORKSPACE doubles: one, allocated on first
 * use and kept for the process (8 KiB), serialized by the stream order of
 * their single caller (the clip code, main thread).
 *
 * Not run on a GPU yet: compiled and linked only (docs/gpu.md).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "device/cuda_check.h"
#include "device/device.h"
#include "device/memory.h"
#include "device/ops.h"
#include "device/cuda_kernels.h"
#include "base/error.h"
#include "base/log.h"

static acx_status_t cu_alloc(size_t bytes, const char *what, void **p_p) {
    acx_status_t status = ACX_OK;
    void *p = NULL;
    if (p_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "device alloc: p_p is NULL");
    if (bytes == 0) {
        *p_p = NULL;
        return ACX_OK;
    }
    cudaError_t ret = cudaMalloc(&p, bytes);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        return ACX_ERROR(ACX_ERR_CUDA, "cudaMalloc(%zu bytes) for %s failed: %s: %s", bytes,
                         what != NULL ? what : "a device buffer", cudaGetErrorName(ret),
                         cudaGetErrorString(ret));
    }
    ACX_CUDA_CHECK_GOTO(cudaMemset(p, 0, bytes), status, err_free);
    /* the fill is complete on return (the table's promise): wait for the
     * default stream it ran on (stream 0, legacy or per-thread alike), not
     * for every stream of the device (an NCCL stream may hold a reduction
     * in flight) */
    ACX_CUDA_CHECK_GOTO(cudaStreamSynchronize(0), status, err_free);
    *p_p = p;
    return ACX_OK;

err_free:
    cudaFree(p);
    return status;
}

static void cu_free(void *p) {
    if (p == NULL) return;
    cudaError_t ret = cudaFree(p);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        ACX_WARN(ACX_SUBSYS_SHARD, "cudaFree(%p) failed: %s: %s", p, cudaGetErrorName(ret),
                 cudaGetErrorString(ret));
    }
}

/* Page-locked host memory (cudaHostAlloc, portable to every device of the
 * process), zeroed on the host. */
static acx_status_t cu_host_alloc(size_t bytes, const char *what, void **p_p) {
    void *p = NULL;
    if (p_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "pinned host alloc: p_p is NULL");
    *p_p = NULL;
    if (bytes == 0) return ACX_OK;
    cudaError_t ret = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        return ACX_ERROR(ACX_ERR_CUDA, "cudaHostAlloc(%zu bytes) for %s failed: %s: %s", bytes,
                         what != NULL ? what : "a pinned host buffer", cudaGetErrorName(ret),
                         cudaGetErrorString(ret));
    }
    memset(p, 0, bytes);
    *p_p = p;
    return ACX_OK;
}

static void cu_host_free(void *p) {
    if (p == NULL) return;
    cudaError_t ret = cudaFreeHost(p);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        ACX_WARN(ACX_SUBSYS_SHARD, "cudaFreeHost(%p) failed: %s: %s", p, cudaGetErrorName(ret),
                 cudaGetErrorString(ret));
    }
}

static acx_status_t cu_memset(void *p, int byte, size_t bytes, void *stream) {
    if (bytes == 0) return ACX_OK;
    ACX_CUDA_CHECK(cudaMemsetAsync(p, byte, bytes, (cudaStream_t)stream));
    return ACX_OK;
}

static acx_status_t cu_to_device(void *dev, const void *host, size_t bytes, void *stream) {
    if (bytes == 0) return ACX_OK;
    ACX_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream));
    ACX_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    return ACX_OK;
}

static acx_status_t cu_to_host(void *host, const void *dev, size_t bytes, void *stream) {
    if (bytes == 0) return ACX_OK;
    ACX_CUDA_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
    ACX_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    return ACX_OK;
}

static acx_status_t cu_copy(void *dst, const void *src, size_t bytes, void *stream) {
    if (bytes == 0) return ACX_OK;
    ACX_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    return ACX_OK;
}

static acx_status_t cu_sync(void *stream) {
    ACX_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    return ACX_OK;
}

/* ---- copy streams and events ---- */

static acx_status_t cu_stream_create(const char *what, void **stream_p) {
    cudaStream_t st = NULL;
    if (stream_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "stream create: stream_p is NULL");
    cudaError_t ret = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        return ACX_ERROR(ACX_ERR_CUDA, "cudaStreamCreateWithFlags for %s failed: %s: %s",
                         what != NULL ? what : "a stream", cudaGetErrorName(ret),
                         cudaGetErrorString(ret));
    }
    *stream_p = st;
    return ACX_OK;
}

static void cu_stream_destroy(void *stream) {
    if (stream == NULL) return;
    cudaError_t ret = cudaStreamDestroy((cudaStream_t)stream);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        ACX_WARN(ACX_SUBSYS_SHARD, "cudaStreamDestroy(%p) failed: %s: %s", stream,
                 cudaGetErrorName(ret), cudaGetErrorString(ret));
    }
}

static acx_status_t cu_event_create(void **event_p) {
    cudaEvent_t ev = NULL;
    if (event_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "event create: event_p is NULL");
    ACX_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *event_p = ev;
    return ACX_OK;
}

static void cu_event_destroy(void *event) {
    if (event == NULL) return;
    cudaError_t ret = cudaEventDestroy((cudaEvent_t)event);
    if (ret != cudaSuccess) {
        cudaGetLastError();
        ACX_WARN(ACX_SUBSYS_SHARD, "cudaEventDestroy(%p) failed: %s: %s", event,
                 cudaGetErrorName(ret), cudaGetErrorString(ret));
    }
}

static acx_status_t cu_event_record(void *event, void *stream) {
    if (event == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "event record: the event is NULL");
    ACX_CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
    return ACX_OK;
}

static acx_status_t cu_stream_wait_event(void *stream, void *event) {
    if (event == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "stream wait for an event: the event is NULL");
    ACX_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
    return ACX_OK;
}

static acx_status_t cu_to_host_async(void *host, const void *dev, size_t bytes, void *stream) {
    if (bytes == 0) return ACX_OK;
    if (host == NULL || dev == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "asynchronous copy device -> host: a NULL pointer for %zu bytes", bytes);
    ACX_CUDA_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
    return ACX_OK;
}

static acx_status_t cu_event_sync(void *event) {
    if (event == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "event synchronize: the event is NULL");
    ACX_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)event));
    return ACX_OK;
}

/* cudaErrorNotReady is an answer, not an error (and is not sticky). */
static acx_status_t cu_event_query(void *event, int *done_p) {
    if (event == NULL || done_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "event query: the event or done_p is NULL");
    cudaError_t ret = cudaEventQuery((cudaEvent_t)event);
    if (ret == cudaErrorNotReady) {
        *done_p = 0;
        return ACX_OK;
    }
    if (ret != cudaSuccess) return ACX_CUDA_ERROR(ret, "cudaEventQuery");
    *done_p = 1;
    return ACX_OK;
}

/* ---- kernels ---- */

static acx_status_t cu_adam(float *p, const float *g, float *m, float *v, size_t n,
                            const acx_adam_hparams_t *hp, double lr, int64_t t, int decoupled,
                            void *stream) {
    return acx_cuda_adam_step(p, g, m, v, n, hp, lr, t, decoupled, ACX_CUDA_MADD_OF_HOST, stream);
}

static acx_status_t cu_sgd(float *p, const float *g, float *buf, size_t n,
                           const acx_sgd_hparams_t *hp, double lr, int first_step, void *stream) {
    return acx_cuda_sgd_step(p, g, buf, n, hp, lr, first_step, ACX_CUDA_MADD_OF_HOST, stream);
}

static acx_status_t cu_scale(float *x, size_t n, float s, void *stream) {
    return acx_cuda_scale(x, n, s, stream);
}

static acx_status_t cu_clamp(float *x, size_t n, float v, void *stream) {
    return acx_cuda_clamp(x, n, v, stream);
}

static acx_status_t cu_nonfinite(const float *x, size_t n, float inv, int *flag, void *stream) {
    return acx_cuda_nonfinite_check_scaled(x, n, inv, flag, stream);
}

static double *workspace; /* ACX_CUDA_NORM_WORKSPACE device doubles, kept */

static acx_status_t norm_workspace(void) {
    if (workspace != NULL) return ACX_OK;
    void *p = NULL;
    ACX_CHECK(cu_alloc(ACX_CUDA_NORM_WORKSPACE * sizeof(double), "the norm workspace", &p));
    workspace = p;
    return ACX_OK;
}

static acx_status_t cu_sum_squares(const float *x, size_t n, double *result, void *stream) {
    ACX_CHECK(norm_workspace());
    return acx_cuda_sum_squares(x, n, workspace, result, stream);
}

static acx_status_t cu_max_abs(const float *x, size_t n, double *result, void *stream) {
    ACX_CHECK(norm_workspace());
    return acx_cuda_max_abs(x, n, workspace, result, stream);
}

static acx_status_t cu_half_from_f32(acx_dtype_t dtype, const float *src, uint16_t *dst, size_t n,
                                     void *stream) {
    return acx_cuda_half_from_f32(dtype, src, dst, n, stream);
}

static acx_status_t cu_half_to_f32(acx_dtype_t dtype, const uint16_t *src, float *dst, size_t n,
                                   void *stream) {
    return acx_cuda_half_to_f32(dtype, src, dst, n, stream);
}

static acx_status_t cu_accumulate(acx_dtype_t dtype, const void *src, float *dst, size_t n,
                                  void *stream) {
    return acx_cuda_accumulate(dtype, src, dst, n, stream);
}

static acx_status_t cu_half_round_f32(acx_dtype_t dtype, const float *src, float *dst, size_t n,
                                      void *stream) {
    return acx_cuda_half_round_f32(dtype, src, dst, n, stream);
}

/* ---- staging (device/memory.c: the pinned pool, cudaMemcpy) ---- */

static acx_status_t cu_owns(const void *p, size_t bytes, int *owns_p) {
    (void)bytes; /* one allocation holds the whole range, or the caller is wrong anyway */
    return acx_cuda_pointer_is_device(p, owns_p);
}

static const acx_devops_t cuda_ops = {
    .name = "cuda",
    .emulated = 0,
    .alloc = cu_alloc,
    .free = cu_free,
    .memset = cu_memset,
    .to_device = cu_to_device,
    .to_host = cu_to_host,
    .copy = cu_copy,
    .sync = cu_sync,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .adam = cu_adam,
    .sgd = cu_sgd,
    .scale = cu_scale,
    .clamp = cu_clamp,
    .nonfinite = cu_nonfinite,
    .sum_squares = cu_sum_squares,
    .max_abs = cu_max_abs,
    .half_from_f32 = cu_half_from_f32,
    .half_to_f32 = cu_half_to_f32,
    .half_round_f32 = cu_half_round_f32,
    .accumulate = cu_accumulate,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait_event = cu_stream_wait_event,
    .to_host_async = cu_to_host_async,
    .event_sync = cu_event_sync,
    .event_query = cu_event_query,
    .owns = cu_owns,
    .stage_acquire = acx_cuda_pinned_acquire,
    .stage_release = acx_cuda_pinned_release,
    .stage_copy = acx_cuda_memcpy,
};

const acx_devops_t *acx_devops_cuda(char *why, size_t why_len) {
    char reason[256];
    if (acx_device_count(reason, sizeof reason) == 0) {
        if (why != NULL && why_len > 0) snprintf(why, why_len, "no CUDA device: %s", reason);
        return NULL;
    }
    return &cuda_ops;
}

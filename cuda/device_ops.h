/*
 * cuda/device_ops.h — the device-operations table (library-private): what
 * the sharding layer, the gradient buckets and the optimizer step need of a
 * device to keep model state in device memory, as one struct of function
 * pointers, compiled in every build so that sharding/, collectives/bucket.c
 * and runtime/ have no #if.
 *
 * Two implementations:
 *   - "cuda" (cuda/device_ops_cuda.c, CUDA builds only): the CUDA runtime
 *     (cudaMalloc, cudaMemsetAsync, cudaMemcpyAsync + stream synchronize)
 *     and the kernels of cuda/kernels.h, each bitwise its CPU reference;
 *   - "emulated" (cuda/device_ops_emul.c, every build): a test double for
 *     running the device-resident code paths without a GPU. Its "device
 *     memory" is anonymous mappings kept PROT_NONE except while one of its
 *     own operations runs on them (mprotect around the op; the CPU
 *     references do the work). Host code that dereferences a device
 *     pointer therefore segfaults in CI exactly where it would read an
 *     illegal address on a GPU, and a host pointer given to a device op is
 *     an error (ACX_ERR_INVALID_ARG naming the op). Streams are accepted and
 *     ignored: every op completes before it returns. It is selected only
 *     by an explicit `device_state: emulated` (ACX_DEVICE_STATE) and says
 *     so in the log; it is never a fallback.
 *
 * Conventions for every entry: pointers named dev/p/x/g/... are device
 * memory of this table; counts are elements unless named bytes; `stream` is
 * a cudaStream_t as void * (NULL: the legacy default stream). Kernels and
 * memset are enqueued on `stream` and return at once; copies to the host
 * (to_host) and from it (to_device) wait for the work enqueued on `stream`
 * before them and are complete when they return, so the host buffer may be
 * read or reused right away. Errors: ACX_ERR_CUDA (the runtime's message),
 * ACX_ERR_INVALID_ARG (NULL with n > 0, a host pointer given to the
 * emulated device, a dtype that is not 16-bit), ACX_ERR_NO_MEMORY.
 *
 * Arithmetic: each kernel computes exactly its CPU reference (see
 * cuda/kernels.h): adam/sgd as runtime/optim_kernels.c's acx_kernel_*_ieee
 * (subnormals kept; the host strategies run acx_kernel_* with FTZ/DAZ, so
 * the two agree bitwise whenever no value falls below FLT_MIN), casts as
 * collectives/half.h, nonfinite/scale as runtime/scaler.c, clamp as runtime/clip.c's
 * clip-by-value loop (exact: comparisons only). The norms:
 * the emulated device sums in the host loop's order (bitwise the host's);
 * the CUDA kernels use a fixed tree, within ~1e-12 relative of it.
 */
#ifndef ACX_CUDA_DEVICE_OPS_H
#define ACX_CUDA_DEVICE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "acx/memory.h"
#include "acx/optim.h"
#include "acx/status.h"
#include "acx/types.h"

typedef struct acx_devops {
    const char *name; /* "cuda" or "emulated" */
    int emulated;     /* 1 for the test double */

    /* ---- memory ---- */
    /* *p_p = bytes of device memory, zero-filled (the fill is complete when
     * this returns), NULL for 0 bytes; `what` names it in errors. */
    acx_status_t (*alloc)(size_t bytes, const char *what, void **p_p);
    /* Free an allocation (NULL is fine); waits for nothing, so the caller
     * makes sure no enqueued work still uses it. */
    void (*free)(void *p);
    /* p[0..bytes) = byte, enqueued on stream. */
    acx_status_t (*memset)(void *p, int byte, size_t bytes, void *stream);
    /* host -> device and device -> host, complete on return (see above). */
    acx_status_t (*to_device)(void *dev, const void *host, size_t bytes, void *stream);
    acx_status_t (*to_host)(void *host, const void *dev, size_t bytes, void *stream);
    /* device -> device, enqueued; the ranges must not overlap. */
    acx_status_t (*copy)(void *dst, const void *src, size_t bytes, void *stream);
    /* Wait until everything enqueued on stream so far has run. */
    acx_status_t (*sync)(void *stream);
    /* Host memory that the copies above move fastest (cuda: page-locked,
     * cudaHostAlloc; emulated: 64-byte aligned malloc), zero-filled, for the
     * CPU-offloaded optimizer's master weights, state and gradient copy. It
     * is ordinary host memory to the CPU. *p_p = NULL for 0 bytes. */
    acx_status_t (*host_alloc)(size_t bytes, const char *what, void **p_p);
    void (*host_free)(void *p);

    /* ---- kernels (one launch each over the whole range) ---- */
    /* torch.optim.Adam/AdamW on p[n] with g[n], m[n], v[n] (cuda/kernels.h's
     * acx_cuda_adam_step with the host build's multiply-add choice). */
    acx_status_t (*adam)(float *p, const float *g, float *m, float *v, size_t n,
                         const acx_adam_hparams_t *hp, double lr, int64_t t, int decoupled,
                         void *stream);
    /* torch.optim.SGD on p[n] (buf[n] may be NULL when momentum is 0). */
    acx_status_t (*sgd)(float *p, const float *g, float *buf, size_t n, const acx_sgd_hparams_t *hp,
                        double lr, int first_step, void *stream);
    /* x[i] *= s (one float multiplication). */
    acx_status_t (*scale)(float *x, size_t n, float s, void *stream);
    /* x[i] = x[i] < -v ? -v : (x[i] > v ? v : x[i]), in place (v >= 0):
     * runtime/clip.c's clip-by-value loop, torch.clamp(x, -v, v) — NaN
     * stays NaN (both comparisons are false), -0.0 and +-v stay as they
     * are, +-inf become +-v (v itself may be inf). */
    acx_status_t (*clamp)(float *x, size_t n, float v, void *stream);
    /* *flag (a device int) = 1 when some x[i] or x[i] * inv is not finite;
     * left as it was otherwise (inv = 1: the plain inf/NaN check). */
    acx_status_t (*nonfinite)(const float *x, size_t n, float inv, int *flag, void *stream);
    /* *result (a device double) = sum of (double)x[i]^2, or max |x[i]| (NaN
     * if any x[i] is NaN), as runtime/clip.c. */
    acx_status_t (*sum_squares)(const float *x, size_t n, double *result, void *stream);
    acx_status_t (*max_abs)(const float *x, size_t n, double *result, void *stream);
    /* 16-bit casts (dtype float16 or bfloat16) as collectives/half.h:
     * from_f32 rounds to nearest even into dst[n] 16-bit words, to_f32
     * widens exactly, round_f32 does both (dst[n] float32; src == dst ok). */
    acx_status_t (*half_from_f32)(acx_dtype_t dtype, const float *src, uint16_t *dst, size_t n,
                                  void *stream);
    acx_status_t (*half_to_f32)(acx_dtype_t dtype, const uint16_t *src, float *dst, size_t n,
                                void *stream);
    acx_status_t (*half_round_f32)(acx_dtype_t dtype, const float *src, float *dst, size_t n,
                                   void *stream);
    /* dst[i] += src[i] widened to float32 (one float addition), src an
     * array of dtype float32, float16 or bfloat16: the sharded strategies'
     * reduced segment added into the gradient shard (sharding/sharded.c's
     * host loop). src and dst must not overlap. */
    acx_status_t (*accumulate)(acx_dtype_t dtype, const void *src, float *dst, size_t n,
                               void *stream);
} acx_devops_t;

/* The emulated device (every build). */
extern const acx_devops_t acx_devops_emulated;

/* The CUDA device, or NULL with the reason in why (may be NULL): a build
 * without CUDA ("this build has no CUDA") or no visible device. Does not
 * bind a device (cuda/device.h does). Not collective. */
const acx_devops_t *acx_devops_cuda(char *why, size_t why_len);

/* ---- accounted allocation (acx_memory_stats' device counters) ---- */

/* dev->alloc, then the bytes are added to category cat's device counters
 * (runtime/base/memstat.h: acx_mem_note). */
acx_status_t acx_devops_alloc(const acx_devops_t *dev, acx_mem_category_t cat, size_t bytes,
                              const char *what, void **p_p);
/* dev->free and the counters back down; bytes as allocated. NULL is fine. */
void acx_devops_free(const acx_devops_t *dev, acx_mem_category_t cat, void *p, size_t bytes);

/* dev->host_alloc / host_free, accounted in category cat's HOST counters
 * (the memory is the host's, only registered with the device). */
acx_status_t acx_devops_host_alloc(const acx_devops_t *dev, acx_mem_category_t cat, size_t bytes,
                                   const char *what, void **p_p);
void acx_devops_host_free(const acx_devops_t *dev, acx_mem_category_t cat, void *p, size_t bytes);

/* ---- for the MPI backend's staging (collectives/mpi/coll_mpi_stage.c) ---- */

/* 1 when [p, p + bytes) lies inside one emulated device allocation. The MPI
 * backend stages such buffers through host blocks (malloc) with
 * acx_devops_emulated_memcpy, as it stages CUDA buffers through pinned
 * memory with cudaMemcpy: MPI itself never sees an emulated address. */
int acx_devops_emulated_owns(const void *p, size_t bytes);

/* For tests of the device cache (cuda/device_cache.h): how many times the
 * emulated table's alloc has mapped memory since the process started, and
 * the bytes of its allocations alive now (as requested). Either pointer may
 * be NULL. */
void acx_devops_emulated_counters(size_t *alloc_calls_p, size_t *live_bytes_p);

/* memcpy where either side (or both) may be emulated device memory. */
acx_status_t acx_devops_emulated_memcpy(void *dst, const void *src, size_t bytes);

#endif /* ACX_CUDA_DEVICE_OPS_H */

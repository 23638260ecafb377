/*
 * device/ops.h — the device-operations table (library-private): what
 * the sharding layer, the gradient buckets and the optimizer step need of a
 * device to keep model state in device memory, as one struct of function
 * pointers, compiled in every build so that sharding/, collectives/bucket.c
 * and runtime/ have no #if.
 *
 * One table, three implementations; callers hold a `const acx_devops_t *`
 * and test only whether it is NULL:
 *   - none: the NULL table. Model state in host memory, no device op is
 *     called (the host code paths run instead, chosen once at prepare).
 *     acx_devops_cuda answers NULL, with the reason, in a build without
 *     CUDA or on a rank without a visible device, and acx_devops_owner
 *     answers NULL for host memory; no user of the table tests
 *     ACX_HAVE_CUDA;
 *   - "cuda" (device/ops_cuda.c, CUDA builds only): the CUDA runtime
 *     (cudaMalloc, cudaMemsetAsync, cudaMemcpyAsync + stream synchronize)
 *     and the kernels of device/cuda_kernels.h, each bitwise its CPU reference;
 *   - "emulated" (device/ops_emulated.c, every build): a test double for
 *     running the device-resident code paths without a GPU. Its "device
 *     memory" is anonymous mappings kept PROT_NONE except while one of its
 *     own operations runs on them (mprotect around the op; the CPU
 *     references do the work). Host code that dereferences a device
 *     pointer therefore segfaults in CI exactly where it would read an
 *     illegal address on a GPU, and a host pointer given to a device op is
 *     an error (ACX_ERR_INVALID_ARG naming the op). Every op completes
 *     before it returns, whatever its stream, except the asynchronous
 *     device -> host copy, which is deferred until the program waits for it
 *     (see "copy streams and events" below). It is selected only
 *     by an explicit `device_state: emulated` (ACX_DEVICE_STATE) and says
 *     so in the log; it is never a fallback.
 *
 * Conventions for every entry: pointers named dev/p/x/g/... are device
 * memory of this table; counts are elements unless named bytes; `stream` is
 * a cudaStream_t as void * (NULL: the legacy default stream). Kernels and
 * memset are enqueued on `stream` and return at once; copies to the host
 * (to_host) and from it (to_device) wait for the work enqueued on `stream`
 * before them and are complete when they return, so the host buffer may be
 * read or reused right away (to_host_async, on a copy stream, is the
 * exception). Errors: ACX_ERR_CUDA (the runtime's message),
 * ACX_ERR_INVALID_ARG (NULL with n > 0, a host pointer given to the
 * emulated device, a dtype that is not 16-bit), ACX_ERR_NO_MEMORY.
 *
 * Arithmetic: each kernel computes exactly its CPU reference (see
 * device/cuda_kernels.h): adam/sgd as base/optim_kernels.c's acx_kernel_*_ieee
 * (subnormals kept; the host strategies run acx_kernel_* with FTZ/DAZ, so
 * the two agree bitwise whenever no value falls below FLT_MIN), casts as
 * base/half.h, nonfinite/scale as runtime/scaler.c, clamp as runtime/clip.c's
 * clip-by-value loop (exact: comparisons only). The norms:
 * the emulated device sums in the host loop's order (bitwise the host's);
 * the CUDA kernels use a fixed tree, within ~1e-12 relative of it.
 */
#ifndef ACX_DEVICE_OPS_H
#define ACX_DEVICE_OPS_H

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
    /* torch.optim.Adam/AdamW on p[n] with g[n], m[n], v[n] (device/cuda_kernels.h's
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
    /* 16-bit casts (dtype float16 or bfloat16) as base/half.h:
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

    /* ---- copy streams and events ----
     *
     * A second stream beside the compute stream lets device -> host copies
     * run while the compute stream goes on (the CPU-offloaded optimizer's
     * gradient copies, sharding/no_shard.c). The ordering is CUDA's: work on
     * one stream runs in the order it was enqueued; work on two streams is
     * unordered unless one stream waits for an event recorded on the other
     * (stream_wait_event: the waiting stream's later work starts after the
     * work enqueued on the other stream before the record); the host sees
     * an asynchronous copy's result only after event_sync (or event_query
     * reporting done) of an event recorded after it, or sync of its stream.
     *
     * The emulated device (the test double) keeps these rules observable:
     *   1. to_host_async fills the host destination with all-ones bytes (a
     *      NaN in every float32, bfloat16 and float16 slot) at once and
     *      queues the copy on its stream; the copy is performed, in stream
     *      order, only when the program could rely on it: event_sync or
     *      event_query of an event recorded after it on that stream, sync
     *      or stream_destroy of that stream, another stream's
     *      stream_wait_event on such an event (that stream's later work
     *      may read the destination or overwrite the source), or another op
     *      enqueued on that stream. A host read before the wait sees NaN
     *      where a GPU would show stale or torn data.
     *   2. Every other op runs when called, as before. Each records the
     *      device ranges it writes (kernels, memset, copy; the last 1024
     *      writes). to_host_async checks its source against them: a range
     *      written by an op on another stream that is not ordered before
     *      the copy — no event recorded after the write was waited for by
     *      the copy's stream, and the host did not synchronize the writer's
     *      stream since (sync, to_host, to_device, event_sync) — is a
     *      missing stream wait, refused with ACX_ERR_STATE naming both
     *      streams. So is an op that writes the source of a copy still
     *      queued on another stream (the copy could read the new values).
     *   3. Asynchronous copies run only on streams from stream_create;
     *      streams and events are checked against the live ones (a NULL or
     *      unknown handle is ACX_ERR_INVALID_ARG).
     * One mutex keeps the emulation's lists consistent; the library drives
     * streams and events from the main thread only. */

    /* *stream_p = a new stream that does not synchronize with the legacy
     * default stream (cuda: cudaStreamCreateWithFlags(cudaStreamNonBlocking));
     * `what` names it in errors. Free with stream_destroy. */
    acx_status_t (*stream_create)(const char *what, void **stream_p);
    /* Destroy a stream from stream_create (NULL is fine). Work still
     * enqueued on it completes (cuda: in the background; emulated: at once),
     * so the caller keeps its buffers alive until it has waited for it. */
    void (*stream_destroy)(void *stream);
    /* *event_p = a new event without timing (cuda:
     * cudaEventCreateWithFlags(cudaEventDisableTiming)), never recorded: a
     * wait for it returns at once. Free with event_destroy. */
    acx_status_t (*event_create)(void **event_p);
    /* Destroy an event (NULL is fine); a stream already waiting for it
     * still waits for what it captured. */
    void (*event_destroy)(void *event);
    /* Capture the work enqueued on stream so far into event (replacing what
     * it captured before): a later wait for the event waits for exactly
     * that work. Enqueued; returns at once. */
    acx_status_t (*event_record)(void *event, void *stream);
    /* Work enqueued on stream after this call starts only after the work
     * event captured (at its latest event_record before this call). The
     * host does not wait. */
    acx_status_t (*stream_wait_event)(void *stream, void *event);
    /* Copy bytes from device memory dev to host memory host (from
     * host_alloc: page-locked with CUDA, so the copy is truly asynchronous),
     * enqueued on stream (one from stream_create; cuda:
     * cudaMemcpyAsync(DeviceToHost)). Returns at once: host must not be
     * read or written, nor dev written, until the copy is known complete
     * (event_sync / event_query of an event recorded after it on stream, or
     * sync(stream)). ACX_ERR_INVALID_ARG: NULL with bytes > 0, dev not
     * device memory or host device memory (emulated), a stream not from
     * stream_create (emulated); ACX_ERR_STATE: a missing stream wait
     * (emulated, rule 2 above). */
    acx_status_t (*to_host_async)(void *host, const void *dev, size_t bytes, void *stream);
    /* The host waits until the work event captured has run (cuda:
     * cudaEventSynchronize); its results are then visible to the host. */
    acx_status_t (*event_sync)(void *event);
    /* *done_p = 1 when the work event captured has run (its results are
     * then visible to the host, as after event_sync), 0 when some is still
     * pending (cuda: cudaEventQuery's cudaErrorNotReady). Never waits
     * (emulated: always 1, its queued copies performed). */
    acx_status_t (*event_query)(void *event, int *done_p);

    /* ---- staging: a host-memory user moving this device's buffers ----
     *
     * The MPI backend (collectives/mpi/coll_mpi_stage.c) accepts device
     * buffers by copying them through host blocks: it asks which table owns
     * a buffer (acx_devops_owner), takes a block, copies, runs MPI on host
     * memory, copies back. These entries do that without a stream of the
     * caller's: cuda copies with cudaMemcpy on the legacy default stream
     * (after the work enqueued on it and on every blocking stream), the
     * emulated device at once, without its stream bookkeeping. */

    /* *owns_p = 1 when [p, p + bytes) is memory of this device (cuda: CUDA
     * reports cudaMemoryTypeDevice for p; emulated: inside one of its
     * allocations), else 0 (host memory, NULL). Errors: ACX_ERR_CUDA
     * (*owns_p untouched). */
    acx_status_t (*owns)(const void *p, size_t bytes, int *owns_p);
    /* *p_p = a host block of at least bytes bytes for staging, contents
     * undefined (cuda: pinned, from a reused pool, device/memory.h;
     * emulated: malloc), NULL for 0 bytes; give it back with
     * stage_release. */
    acx_status_t (*stage_acquire)(size_t bytes, void **p_p);
    void (*stage_release)(void *p);
    /* dst[0..bytes) = src[0..bytes), either side (or both) this device's
     * memory, the other host memory; complete on return. */
    acx_status_t (*stage_copy)(void *dst, const void *src, size_t bytes);
} acx_devops_t;

/* The emulated device (every build). */
extern const acx_devops_t acx_devops_emulated;

/* The CUDA device, or NULL with the reason in why (may be NULL): a build
 * without CUDA ("this build has no CUDA") or no visible device. Does not
 * bind a device (device/device.h does). Not collective. */
const acx_devops_t *acx_devops_cuda(char *why, size_t why_len);

/* ---- accounted allocation (acx_memory_stats' device counters) ---- */

/* dev->alloc, then the bytes are added to category cat's device counters
 * (base/memstat.h: acx_mem_note). */
acx_status_t acx_devops_alloc(const acx_devops_t *dev, acx_mem_category_t cat, size_t bytes,
                              const char *what, void **p_p);
/* dev->free and the counters back down; bytes as allocated. NULL is fine. */
void acx_devops_free(const acx_devops_t *dev, acx_mem_category_t cat, void *p, size_t bytes);

/* dev->host_alloc / host_free, accounted in category cat's HOST counters
 * (the memory is the host's, only registered with the device). */
acx_status_t acx_devops_host_alloc(const acx_devops_t *dev, acx_mem_category_t cat, size_t bytes,
                                   const char *what, void **p_p);
void acx_devops_host_free(const acx_devops_t *dev, acx_mem_category_t cat, void *p, size_t bytes);

/* ---- which device owns a buffer ---- */

/* *dev_p = the table whose memory [p, p + bytes) is (its owns entry): the
 * emulated device, else the CUDA device when this build has CUDA and a
 * device is visible, else NULL: host memory (no CUDA call at all then).
 * Not collective. Errors: ACX_ERR_CUDA (*dev_p untouched). */
acx_status_t acx_devops_owner(const void *p, size_t bytes, const acx_devops_t **dev_p);

/* Free the host blocks every device keeps cached for staging and that are
 * not in use (the CUDA pinned pool, device/memory.h): for when the last
 * user of staging goes (the MPI backend's last communicator). Returns the
 * bytes freed. */
size_t acx_devops_stage_trim(void);

/* ---- the emulated device, for its tests ---- */

/* 1 when [p, p + bytes) lies inside one emulated device allocation (the
 * emulated table's owns). */
int acx_devops_emulated_owns(const void *p, size_t bytes);

/* For tests of the device cache (device/cache.h): how many times the
 * emulated table's alloc has mapped memory since the process started, and
 * the bytes of its allocations alive now (as requested). Either pointer may
 * be NULL. */
void acx_devops_emulated_counters(size_t *alloc_calls_p, size_t *live_bytes_p);

/* memcpy where either side (or both) may be emulated device memory (the
 * emulated table's stage_copy). */
acx_status_t acx_devops_emulated_memcpy(void *dst, const void *src, size_t bytes);

#endif /* ACX_DEVICE_OPS_H */

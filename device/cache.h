/*
 * device/cache.h — a caching allocator in front of a device table's
 * alloc/free (device/ops.h), for the buffers the sharded strategies
 * allocate and free every step (gathered units, all-gather and
 * reduce-scatter staging, 16-bit send buffers, unit gradients).
 * Library-private, compiled in every build (it only calls the table).
 *
 * Without it each such buffer costs a cudaMalloc (which zero-fills and
 * synchronizes the device, device/ops_cuda.c) and, at its free, a
 * compute-stream synchronize plus a cudaFree, per unit per step. With it,
 * as in PyTorch's CUDACachingAllocator:
 *
 *   - a freed block is kept, tagged with the stream it was freed on, and
 *     serves a later request of that stream by best fit (the smallest free
 *     block of at least the requested bytes and at most 1/8 more);
 *   - the free does not synchronize: work still enqueued on the stream may
 *     read or write the block, and a request on the same stream enqueues
 *     its own work after that work (stream order), so reuse is safe with no
 *     wait. A block is never handed to another stream while work on its
 *     stream may be pending; acx_devcache_stream_idle says that a stream
 *     has drained (acx_set_compute_stream does), after which its blocks
 *     serve any stream. acx enqueues all its device work on one compute
 *     stream per model, and the collectives that touch these buffers on
 *     other streams (NCCL's, the MPI backend's staging copies) are waited
 *     for by the host before the buffer is freed (their wait returns after
 *     the collective's device work is done), so the compute stream is the
 *     only one a freed block can still be busy on;
 *   - a request no free block fits goes to the table; if the table fails
 *     (out of device memory), the cache is emptied and the request retried
 *     once;
 *   - acx_devcache_empty (acx_memory_empty_cache, every model free,
 *     acx_finalize) synchronizes the streams of the blocks it releases and
 *     gives them back to the table.
 *
 * Accounting: in-use bytes are counted in their category's device counters
 * (base/memstat.h, acx_mem_note) exactly as acx_devops_alloc does,
 * for the bytes requested; the cached free blocks (their full size) in
 * acx_memory_stats_t.device_cached, apart from them.
 *
 * ACX_DEVICE_CACHE_DISABLE=1 (read at each request) turns caching off: each
 * request is a table alloc, each free a stream synchronize and a table
 * free, as before the cache (a block taken while caching was on is
 * released at its free). Not thread-safe beyond a mutex around the block
 * list; acx drives device state from the main thread only.
 */
#ifndef ACX_DEVICE_CACHE_H
#define ACX_DEVICE_CACHE_H

#include <stddef.h>

#include "device/ops.h"

/* *p_p = bytes of device memory of dev for category cat, usable by work
 * enqueued on `stream` (a cudaStream_t as void *; NULL: the legacy default
 * stream), NULL for 0 bytes. zero != 0: the first `bytes` read as zero in
 * the stream's order (a fresh block is zeroed by the table before this
 * returns; a reused one by a memset enqueued on stream). zero == 0: the
 * contents are undefined (the caller writes them in full before reading;
 * on the emulated device a reused block is filled with 0xff bytes, NaNs,
 * so that a read of stale contents shows in the tests). Errors: the
 * table's (ACX_ERR_CUDA, ACX_ERR_NO_MEMORY, ...), after one retry with the
 * cache emptied. Not collective. */
acx_status_t acx_devcache_alloc(const acx_devops_t *dev, acx_mem_category_t cat, size_t bytes,
                                int zero, void *stream, const char *what, void **p_p);

/* Give back p (from acx_devcache_alloc with the same dev, cat and bytes;
 * NULL is fine). Work enqueued on `stream` may still use it: the block is
 * reused only on that stream until the stream is known to be idle. A
 * pointer the cache does not know (allocated while caching was off) is
 * freed as acx_devops_free does, after a stream synchronize. */
void acx_devcache_free(const acx_devops_t *dev, acx_mem_category_t cat, void *p, size_t bytes,
                       void *stream);

/* Everything enqueued on stream so far has run (the caller synchronized
 * it): its cached blocks may serve any stream from now on, and need no
 * synchronize when released. */
void acx_devcache_stream_idle(void *stream);

/* Release every cached block to its table (each pending stream is
 * synchronized first; blocks in use are untouched). */
void acx_devcache_empty(void);

/* Bytes of cached free blocks (full block sizes). */
size_t acx_devcache_bytes(void);

#endif /* ACX_DEVICE_CACHE_H */

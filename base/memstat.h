/*
 * base/memstat.h — allocation of model-state buffers with per-category
 * accounting (library-private).
 *
 * Every buffer that holds parameters, gradients, master weights, optimizer
 * state or gathered/staged units goes through acx_mem_alloc/acx_mem_free, so
 * acx_memory_stats (acx/memory.h) reports what a strategy really holds and
 * tests can hold it against acx_memory_estimate. Buffers are 64-byte aligned
 * (cache line, AVX-512; those of 64 KiB and more page-aligned) and
 * zero-filled by acx_mem_alloc, also when the caching allocator hands back a
 * used block: a fresh gradient or optimizer state must start at zero, and
 * padding rows of a shard must stay zero.
 *
 * Called from the main thread only (the loader's prefetch thread never
 * allocates model state); the counters are atomics anyway so that reading
 * stats from another thread is safe.
 */
#ifndef ACX_BASE_MEMSTAT_H
#define ACX_BASE_MEMSTAT_H

#include <stddef.h>
#include <stdint.h>

#include "acx/memory.h"

/* bytes zeroed bytes in category cat, 64-byte aligned; NULL with the last
 * error set (ACX_ERR_NO_MEMORY naming `what` and the size) on failure. */
void *acx_mem_alloc_(acx_mem_category_t cat, size_t bytes, const char *what, const char *file,
                     int line);
#define acx_mem_alloc(cat, bytes, what) acx_mem_alloc_((cat), (bytes), (what), __FILE__, __LINE__)

/* The same without zero-filling, for buffers that are written in full
 * before they are read (gathered units, all-gather staging). */
void *acx_mem_alloc_raw_(acx_mem_category_t cat, size_t bytes, const char *what, const char *file,
                         int line);
#define acx_mem_alloc_raw(cat, bytes, what)                                                        \
    acx_mem_alloc_raw_((cat), (bytes), (what), __FILE__, __LINE__)

/* Free a buffer from acx_mem_alloc of `bytes` bytes in cat (NULL is fine).
 * `bytes` must be the size it was allocated with: buffers of 64 KiB and
 * more go back to the caching allocator (mem_cache.h; memstat.c says why),
 * which keeps them mapped for the next request that fits. */
void acx_mem_free(acx_mem_category_t cat, void *p, size_t bytes);

/* Account delta bytes (negative: freed) in category cat without allocating:
 * on_device != 0 counts them in the device counters of acx_memory_stats
 * (memory a device table allocated: device/ops.c), else in the host
 * ones. The base layer cannot call CUDA; the device side notes here. */
void acx_mem_note(acx_mem_category_t cat, int64_t delta, int on_device);

/* Account delta bytes (negative: released) of shared memory this rank
 * allocated for a communicator's node-local collectives (collectives/mpi/
 * coll_mpi_shm.c): acx_memory_stats_t's comm_segments, apart from the
 * categories. Thread-safe. */
void acx_mem_note_comm_segment(int64_t delta);

/* The device caching allocator (device/cache.h) registers itself at
 * its first request: `empty` releases its cached blocks (called by
 * acx_memory_empty_cache), `bytes` reports them (acx_memory_stats_t's
 * device_cached). The base layer cannot call upward; this is how it
 * reaches the cache. Registering again replaces the pair. */
void acx_mem_set_device_cache(void (*empty)(void), size_t (*bytes)(void));

#endif /* ACX_BASE_MEMSTAT_H */

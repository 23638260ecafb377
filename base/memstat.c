/*
 * base/memstat.c — per-category accounting of model-state buffers
 * (current and peak bytes) and the public acx_memory_stats and
 * acx_memory_empty_cache. The estimate side (the formulas) lives with the
 * strategies, in sharding/.
 *
 * Buffers of CACHED_MIN bytes and more are page-aligned mappings from the
 * caching allocator (mem_cache.c): freed ones stay mapped and serve the
 * next request that fits, so the transient buffers a sharded strategy
 * allocates and frees every step (gathered units, staging, unit gradients)
 * cost no mmap, munmap or page fault after the first steps (measured
 * without the cache: 557 page faults per step under SHARD_GRAD_OP and 754
 * under FULL_SHARD on the Fashion-MNIST MLP, vs 0 for NO_SHARD; with it, 0).
 * The cache holds no more than the peak of the bytes in use plus an eighth
 * (mem_cache.h), so the peak RSS stays about what it was. malloc is not
 * used for them: glibc's dynamic mmap
 * threshold would serve them from its heap after the first free, and freed
 * heap memory stays resident beyond any bound of ours (measured: peak RSS
 * 1.28 x 16P/N instead of 1.11 x under FULL_SHARD on a 400M-parameter
 * model, benchmarks/run-shard-mem.sh); mallopt(M_MMAP_THRESHOLD) would
 * change the whole program's malloc policy, which a library must not do.
 * Smaller buffers (biases, small layers) come from posix_memalign.
 *
 * The accounting counts the bytes asked for, while in use; the cached free
 * bytes are reported on their own (acx_memory_stats_t.cached), and so are
 * the device caching allocator's (device/cache.h: device_cached,
 * through the hooks it registers here; acx_memory_empty_cache empties
 * both).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem_cache.h"
#include "base/memstat.h"

#define CACHED_MIN ((size_t)64 << 10) /* buffers at least this large come from the cache */

static _Atomic int64_t current[ACX_MEM_NUM_CATEGORIES];
static _Atomic int64_t peak[ACX_MEM_NUM_CATEGORIES];
static _Atomic int64_t current_total, peak_total;
/* the same for device memory (acx_mem_note with on_device) */
static _Atomic int64_t dev_current[ACX_MEM_NUM_CATEGORIES];
static _Atomic int64_t dev_peak[ACX_MEM_NUM_CATEGORIES];
static _Atomic int64_t dev_current_total, dev_peak_total;

/* the device caching allocator's hooks (acx_mem_set_device_cache) */
static void (*_Atomic dev_cache_empty)(void);
static size_t (*_Atomic dev_cache_bytes)(void);

void acx_mem_set_device_cache(void (*empty)(void), size_t (*bytes)(void)) {
    atomic_store(&dev_cache_empty, empty);
    atomic_store(&dev_cache_bytes, bytes);
}

static void raise_peak(_Atomic int64_t *pk, int64_t value) {
    int64_t old = atomic_load(pk);
    while (value > old && !atomic_compare_exchange_weak(pk, &old, value)) {
    }
}

static void account(acx_mem_category_t cat, int64_t delta) {
    int64_t c = atomic_fetch_add(&current[cat], delta) + delta;
    int64_t t = atomic_fetch_add(&current_total, delta) + delta;
    if (delta > 0) {
        raise_peak(&peak[cat], c);
        raise_peak(&peak_total, t);
    }
}

/* shared-memory segments of the node-local collectives (this rank's part) */
static _Atomic int64_t comm_segment_bytes;

void acx_mem_note_comm_segment(int64_t delta) { atomic_fetch_add(&comm_segment_bytes, delta); }

void acx_mem_note(acx_mem_category_t cat, int64_t delta, int on_device) {
    if ((unsigned)cat >= ACX_MEM_NUM_CATEGORIES) return;
    if (!on_device) {
        account(cat, delta);
        return;
    }
    int64_t c = atomic_fetch_add(&dev_current[cat], delta) + delta;
    int64_t t = atomic_fetch_add(&dev_current_total, delta) + delta;
    if (delta > 0) {
        raise_peak(&dev_peak[cat], c);
        raise_peak(&dev_peak_total, t);
    }
}

static void *mem_alloc(acx_mem_category_t cat, size_t bytes, int zero, const char *what,
                       const char *file, int line) {
    void *p = NULL;
    if ((unsigned)cat >= ACX_MEM_NUM_CATEGORIES) {
        acx_error_set(ACX_ERR_INTERNAL, file, line, "memory category %d for %s", (int)cat, what);
        return NULL;
    }
    /* round up so that aligned vector loops may run over the tail */
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (bytes >= CACHED_MIN) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t len = (bytes + page - 1) / page * page;
        int reused = 0;
        p = acx_mem_cache_alloc(len, &reused);
        if (p == NULL) {
            acx_error_set(ACX_ERR_NO_MEMORY, file, line, "cannot map %zu bytes for %s", bytes,
                          what);
            return NULL;
        }
        /* a fresh mapping is zero pages from the kernel; a reused block
         * holds its last user's data */
        if (zero && reused) memset(p, 0, rounded);
        account(cat, (int64_t)bytes);
        return p;
    }
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) {
        acx_error_set(ACX_ERR_NO_MEMORY, file, line, "cannot allocate %zu bytes for %s", bytes,
                      what);
        return NULL;
    }
    if (zero) memset(p, 0, rounded);
    account(cat, (int64_t)bytes);
    return p;
}

void *acx_mem_alloc_(acx_mem_category_t cat, size_t bytes, const char *what, const char *file,
                     int line) {
    return mem_alloc(cat, bytes, 1, what, file, line);
}

void *acx_mem_alloc_raw_(acx_mem_category_t cat, size_t bytes, const char *what, const char *file,
                         int line) {
    return mem_alloc(cat, bytes, 0, what, file, line);
}

void acx_mem_free(acx_mem_category_t cat, void *p, size_t bytes) {
    if (p == NULL) return;
    if (bytes >= CACHED_MIN) {
        if (acx_mem_cache_free(p) != 0) {
            /* a caller passed a size other than the allocated one: the block
             * came from malloc, or is unknown; leak it rather than corrupt */
            ACX_ERROR(ACX_ERR_INTERNAL, "acx_mem_free: %p (%zu bytes) is not a cached block", p,
                      bytes);
            return;
        }
    } else {
        free(p);
    }
    if ((unsigned)cat < ACX_MEM_NUM_CATEGORIES) account(cat, -(int64_t)bytes);
}

ACX_API acx_status_t acx_memory_stats(acx_memory_stats_t *stats_p) {
    if (stats_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_memory_stats: stats_p is NULL");
    acx_memory_stats_t s;
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++) {
        s.current[c] = atomic_load(&current[c]);
        s.peak[c] = atomic_load(&peak[c]);
    }
    s.current_total = atomic_load(&current_total);
    s.peak_total = atomic_load(&peak_total);
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++) {
        s.device_current[c] = atomic_load(&dev_current[c]);
        s.device_peak[c] = atomic_load(&dev_peak[c]);
    }
    s.device_current_total = atomic_load(&dev_current_total);
    s.device_peak_total = atomic_load(&dev_peak_total);
    s.cached = (int64_t)acx_mem_cache_bytes();
    size_t (*dev_bytes)(void) = atomic_load(&dev_cache_bytes);
    s.device_cached = dev_bytes != NULL ? (int64_t)dev_bytes() : 0;
    s.comm_segments = atomic_load(&comm_segment_bytes);
    *stats_p = s;
    return ACX_OK;
}

ACX_API void acx_memory_reset_peak(void) {
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++)
        atomic_store(&peak[c], atomic_load(&current[c]));
    atomic_store(&peak_total, atomic_load(&current_total));
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++)
        atomic_store(&dev_peak[c], atomic_load(&dev_current[c]));
    atomic_store(&dev_peak_total, atomic_load(&dev_current_total));
}

ACX_API void acx_memory_empty_cache(void) {
    acx_mem_cache_empty();
    void (*dev_empty)(void) = atomic_load(&dev_cache_empty);
    if (dev_empty != NULL) dev_empty();
}

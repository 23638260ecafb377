/*
 * runtime/base/memstat.c — per-category accounting of model-state buffers
 * (current and peak bytes) and the public acx_memory_stats. The estimate
 * side (the formulas) lives with the strategies, in sharding/.
 *
 * Large buffers (>= 1 MiB) are mapped and unmapped directly. glibc's mmap
 * threshold is dynamic: once a large block is freed it serves later blocks
 * of that size from its heap, and freed heap memory stays resident — under
 * FULL_SHARD, whose gathered units and staging come and go every step, the
 * process then keeps ~2 units' worth of free memory resident for good
 * (measured: peak RSS 1.28 x 16P/N instead of 1.11 x on a 400M-parameter
 * model, benchmarks/run-shard-mem.sh). A mapping returns its pages to the
 * system at munmap, and comes zero-filled from the kernel (no memset).
 * MADV_HUGEPAGE (transparent huge pages in madvise mode) cuts the page-fault
 * cost of a fresh mapping about 3.5x. Setting mallopt(M_MMAP_THRESHOLD)
 * instead would change the whole program's malloc policy, which a library
 * must not do.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MMAP_MIN ((size_t)1 << 20) /* buffers at least this large are mapped */

#include "runtime/base/error.h"
#include "runtime/base/memstat.h"

static _Atomic int64_t current[ACX_MEM_NUM_CATEGORIES];
static _Atomic int64_t peak[ACX_MEM_NUM_CATEGORIES];
static _Atomic int64_t current_total, peak_total;
/* the same for device memory (acx_mem_note with on_device) */
static _Atomic int64_t dev_current[ACX_MEM_NUM_CATEGORIES];
static _Atomic int64_t dev_peak[ACX_MEM_NUM_CATEGORIES];
static _Atomic int64_t dev_current_total, dev_peak_total;

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
    if (bytes >= MMAP_MIN) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t len = (bytes + page - 1) / page * page;
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            acx_error_set(ACX_ERR_NO_MEMORY, file, line, "cannot map %zu bytes for %s", bytes, what);
            return NULL;
        }
#ifdef MADV_HUGEPAGE
        (void)madvise(p, len, MADV_HUGEPAGE); /* a hint; failure is harmless */
#endif
        account(cat, (int64_t)bytes); /* the kernel's pages are zero already */
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
    if (bytes >= MMAP_MIN) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        munmap(p, (bytes + page - 1) / page * page);
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
    *stats_p = s;
    return ACX_OK;
}

ACX_API void acx_memory_reset_peak(void) {
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++) atomic_store(&peak[c], atomic_load(&current[c]));
    atomic_store(&peak_total, atomic_load(&current_total));
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++)
        atomic_store(&dev_peak[c], atomic_load(&dev_current[c]));
    atomic_store(&dev_peak_total, atomic_load(&dev_current_total));
}

/*
 * base/mem_cache.c — the caching allocator of mem_cache.h: free
 * mappings kept for reuse, by size class, split when they must be,
 * bounded by the peak in-use bytes plus an eighth.
 *
 * Blocks. Every block the cache knows, in use or free, is one entry of a
 * flat array (a training model has tens of them: a scan is cheaper than
 * any tree at that size, and far cheaper than the page faults it saves).
 * A block is a page-aligned range inside some mapping; splitting a free
 * block leaves two entries (never merged again: a block's size is its
 * size class). Any page range of an anonymous private mapping can be
 * unmapped on its own, so a block is unmapped exactly as it is.
 *
 * The bound. held = in_use + free_bytes stays within peak + peak/8, peak
 * being the largest in_use seen since the last empty (page multiples, the
 * page-rounded sum the allocator without a cache mapped), the eighth being
 * what size classes round: a request takes, in this order,
 *   1. the smallest free block of its size up to 1/8 more, whole;
 *   2. while held stays within the limit, a fresh block of its size — so
 *      that every size a step uses gets blocks of its own (a step that
 *      needs two blocks of size a at one moment and a + 2b later finds
 *      them all, instead of re-splitting a b every step);
 *   3. else the head of the smallest larger free block (split);
 *   4. else (free bytes only in smaller pieces) a fresh address range into
 *      which free blocks are *moved* with mremap(MREMAP_FIXED) — the kernel
 *      moves their page-table entries, the pages stay resident, nothing is
 *      copied or faulted in — with fresh pages only for what they do not
 *      cover; held then grows only by a new peak.
 * Training repeats the same requests in the same order every step, so
 * after the first steps every request is served by 1.: no mmap, mremap,
 * munmap or page fault. (Moving costs ~0.1-0.2 ms a call: a step that
 * needs it every time — as with the bound exactly at the peak — pays more
 * in system time than the page faults it saves.) Where mremap is missing,
 * 4. unmaps the least recently freed blocks instead.
 *
 * MADV_HUGEPAGE (transparent huge pages in madvise mode) cuts the
 * page-fault cost of a fresh mapping about 3.5x; it is a hint, so failure
 * is harmless.
 */
#define _GNU_SOURCE /* mremap, MREMAP_FIXED */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/mem_cache.h"

typedef struct block {
    char *p;
    size_t len;    /* bytes, a page multiple */
    int free;      /* 1: cached, 0: in use */
    uint64_t tick; /* when it was last freed (eviction order where mremap is missing) */
} block_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block_t *blocks;
static size_t num_blocks, cap_blocks;
static size_t in_use, free_bytes, peak_in_use;
static uint64_t clock_ticks;
static size_t page_size; /* set at the first request */

#define SLACK_DIV 8 /* held may exceed the peak in use by 1/8 (size classes) */

/* ---- the block table (called with the lock held) ---- */

static block_t *block_add(char *p, size_t len, int is_free, uint64_t tick) {
    if (num_blocks == cap_blocks) {
        size_t cap = cap_blocks ? 2 * cap_blocks : 64;
        block_t *b = realloc(blocks, cap * sizeof *b);
        if (b == NULL) return NULL;
        blocks = b;
        cap_blocks = cap;
    }
    blocks[num_blocks] = (block_t){p, len, is_free, tick};
    return &blocks[num_blocks++];
}

static void block_remove(size_t i) { blocks[i] = blocks[--num_blocks]; }

/* Unmap free block i and drop it from the table. */
static void evict(size_t i) {
    munmap(blocks[i].p, blocks[i].len);
    free_bytes -= blocks[i].len;
    block_remove(i);
}

/* The most held (in use + free) may reach while in_use + len is the new
 * in-use total: the peak plus SLACK_DIV-th of it. */
static size_t held_limit(size_t len) {
    size_t peak = in_use + len > peak_in_use ? in_use + len : peak_in_use;
    return peak + peak / SLACK_DIV;
}

/* The index of the free block to use next when assembling a block, or
 * num_blocks when none is free: the largest (fewest moves). */
static size_t largest_free(void) {
    size_t best = num_blocks;
    for (size_t i = 0; i < num_blocks; i++)
        if (blocks[i].free && (best == num_blocks || blocks[i].len > blocks[best].len)) best = i;
    return best;
}

/* A fresh mapping of len bytes at p (in no table yet): move free blocks
 * into it from its start, as long as there are any. Returns 1 when some
 * bytes came from free blocks (their contents are stale), else 0. */
static int assemble(char *p, size_t len) {
    int moved = 0;
#ifdef MREMAP_FIXED
    size_t off = 0;
    while (off < len) {
        size_t i = largest_free();
        if (i == num_blocks) break;
        block_t *b = &blocks[i];
        size_t n = b->len < len - off ? b->len : len - off;
        /* A free block may span several kernel mappings (pieces moved in
         * by an earlier call); kernels before 6.17 move only within one
         * mapping (EFAULT), so halve the piece until it moves. */
        while (mremap(b->p, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, p + off) == MAP_FAILED) {
            size_t half = (n / 2 + page_size - 1) / page_size * page_size;
            n = half < n ? half : 0;
            if (n == 0) break;
        }
        if (n == 0) {
            evict(i); /* e.g. the limit on mappings: let it go, keep fresh pages */
            continue;
        }
        moved = 1;
        off += n;
        free_bytes -= n;
        if (n == b->len)
            block_remove(i);
        else { /* the block's head moved; the rest stays free */
            b->p += n;
            b->len -= n;
        }
    }
#else
    (void)p;
    (void)page_size;
    /* no mremap: unmap the least recently freed blocks until in use + free
     * is back under the limit (in_use does not count this block yet) */
    while (in_use + len + free_bytes > held_limit(len)) {
        size_t oldest = num_blocks;
        for (size_t i = 0; i < num_blocks; i++)
            if (blocks[i].free && (oldest == num_blocks || blocks[i].tick < blocks[oldest].tick))
                oldest = i;
        if (oldest == num_blocks) break;
        evict(oldest);
    }
#endif
    return moved;
}

static void empty_locked(void) {
    for (size_t i = num_blocks; i-- > 0;)
        if (blocks[i].free) evict(i);
    peak_in_use = in_use;
}

/* ---- allocation ---- */

/* Take free block i for a request of len bytes: whole, or its head when
 * split (the tail stays free). */
static char *take(size_t i, size_t len, int split) {
    block_t *b = &blocks[i];
    char *p = b->p;
    size_t used = split ? len : b->len;
    if (used < b->len) {
        char *tail = p + used;
        size_t tail_len = b->len - used;
        uint64_t tick = b->tick;
        b->len = used;
        if (block_add(tail, tail_len, 1, tick) == NULL) { /* table full: drop the tail */
            munmap(tail, tail_len);
            free_bytes -= tail_len;
        }
        b = &blocks[i]; /* the table may have moved */
    }
    b->free = 0;
    free_bytes -= used;
    in_use += used;
    if (in_use > peak_in_use) peak_in_use = in_use;
    return p;
}

void *acx_mem_cache_alloc(size_t len, int *reused_p) {
    pthread_mutex_lock(&lock);
    if (page_size == 0) page_size = (size_t)sysconf(_SC_PAGESIZE);
    size_t best = num_blocks;
    for (size_t i = 0; i < num_blocks; i++)
        if (blocks[i].free && blocks[i].len >= len &&
            (best == num_blocks || blocks[i].len < blocks[best].len))
            best = i;
    /* 1. a block of about this size (a size class: at most 1/8 larger) */
    if (best < num_blocks && blocks[best].len - len <= len / SLACK_DIV) {
        char *p = take(best, len, 0);
        pthread_mutex_unlock(&lock);
        *reused_p = 1;
        return p;
    }
    /* 2. within the slack, a fresh block of this size: the free blocks keep
     *    their sizes for the requests that fit them (no split drifting
     *    from step to step) */
    int fresh = in_use + free_bytes + len <= held_limit(len);
    /* 3. else split the best-fitting larger block */
    if (!fresh && best < num_blocks) {
        char *p = take(best, len, 1);
        pthread_mutex_unlock(&lock);
        *reused_p = 1;
        return p;
    }
    /* 2., or 4.: no block is large enough: a fresh range, into which free
     *    blocks are moved (4.) */
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED && free_bytes > 0) { /* give back what we hold, try once more */
        empty_locked();
        fresh = 1;
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (p == MAP_FAILED || block_add(p, len, 0, 0) == NULL) {
        int err = p == MAP_FAILED ? errno : ENOMEM;
        if (p != MAP_FAILED) munmap(p, len);
        pthread_mutex_unlock(&lock);
        errno = err;
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE);
#endif
    int moved = fresh ? 0 : assemble(p, len);
    in_use += len;
    if (in_use > peak_in_use) peak_in_use = in_use;
    pthread_mutex_unlock(&lock);
    *reused_p = moved;
    return p;
}

int acx_mem_cache_free(void *ptr) {
    if (ptr == NULL) return 0;
    char *p = ptr;
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < num_blocks && !(blocks[i].p == p && !blocks[i].free))
        i++;
    if (i == num_blocks) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    /* No merging with free neighbours in memory: a freed block keeps the
     * size it was asked for, its size class. Merged, two freed 16 MiB
     * units become one 32 MiB block that the next 16 MiB request does not
     * take whole (1.), so it maps a fresh block within the slack (2.):
     * measured, a FULL_SHARD model then held ~3 units more at its peak. */
    blocks[i].free = 1;
    blocks[i].tick = ++clock_ticks;
    in_use -= blocks[i].len;
    free_bytes += blocks[i].len;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* ---- state ---- */

size_t acx_mem_cache_bytes(void) {
    pthread_mutex_lock(&lock);
    size_t n = free_bytes;
    pthread_mutex_unlock(&lock);
    return n;
}

void acx_mem_cache_empty(void) {
    pthread_mutex_lock(&lock);
    empty_locked();
    pthread_mutex_unlock(&lock);
}

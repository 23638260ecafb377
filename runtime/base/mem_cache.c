/*
 * runtime/base/mem_cache.c — the caching allocator of mem_cache.h: free
 * mappings kept for reuse, best fit with splitting and merging, bounded by
 * the peak in-use bytes.
 *
 * Blocks. Every block the cache knows, in use or free, is one entry of a
 * flat array (a training model has tens of them: a scan is cheaper than
 * any tree at that size, and far cheaper than the page faults it saves).
 * A block is a page-aligned range inside some mapping; splitting a free
 * block leaves two entries, and merging address-adjacent free entries
 * undoes it. Any page range of anonymous private mappings can be unmapped
 * on its own, so a block is unmapped exactly as it is, whatever mappings
 * it came from.
 *
 * The bound. held = in_use + free_bytes never exceeds peak_in_use, the
 * largest in_use seen since the last empty (bytes are page multiples, so
 * in_use is the page-rounded sum the allocator without a cache mapped):
 * reusing a free block moves bytes from free to in use (held unchanged).
 * A request that no free block fits (the free bytes are there, but in
 * pieces) gets a fresh address range into which free blocks are *moved*
 * with mremap(MREMAP_FIXED) — the kernel moves their page-table entries,
 * the pages stay resident, nothing is copied or faulted in — and fresh
 * pages only for what the free bytes do not cover. So held grows only when
 * in_use does, to a new peak, and once a training loop has run one step
 * (the same requests in the same order every step) no request needs a
 * fresh page again: the peak resident memory of the buffers is what it
 * was without the cache, and the steady state costs no page faults.
 * (Splitting and merging alone, best fit, do not reach that: the pieces
 * drift from step to step. Evicting instead of moving, the fallback where
 * mremap is missing, faults the evicted bytes in again.)
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

#include "runtime/base/mem_cache.h"

typedef struct block {
    char *p;
    size_t len;    /* bytes, a page multiple */
    int free;      /* 1: cached, 0: in use */
    uint64_t tick; /* when it was last freed (LRU order of eviction) */
} block_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block_t *blocks;
static size_t num_blocks, cap_blocks;
static size_t in_use, free_bytes, peak_in_use;
static uint64_t clock_ticks;
static size_t page_size; /* set at the first request */

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
        /* A free block may span several kernel mappings (merged neighbours,
         * moved pieces); kernels before 6.17 move only within one mapping
         * (EFAULT), so halve the piece until it moves. */
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
    /* no mremap: unmap the least recently freed blocks until in use + free
     * is back under the peak (in_use already counts this block) */
    while (in_use + free_bytes > peak_in_use) {
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

void *acx_mem_cache_alloc(size_t len, int *reused_p) {
    pthread_mutex_lock(&lock);
    if (page_size == 0) page_size = (size_t)sysconf(_SC_PAGESIZE);
    size_t best = num_blocks;
    for (size_t i = 0; i < num_blocks; i++)
        if (blocks[i].free && blocks[i].len >= len &&
            (best == num_blocks || blocks[i].len < blocks[best].len))
            best = i;
    if (best < num_blocks) {
        block_t *b = &blocks[best];
        char *p = b->p;
        if (b->len > len) { /* split: the tail stays free */
            char *tail = p + len;
            size_t tail_len = b->len - len;
            uint64_t tick = b->tick;
            b->len = len;
            b->free = 0;
            if (block_add(tail, tail_len, 1, tick) == NULL) { /* table full: drop the tail */
                munmap(tail, tail_len);
                free_bytes -= tail_len;
            }
        } else {
            b->free = 0;
        }
        free_bytes -= len;
        in_use += len;
        pthread_mutex_unlock(&lock);
        *reused_p = 1;
        return p;
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED && free_bytes > 0) { /* give back what we hold, try once more */
        empty_locked();
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
    in_use += len;
    if (in_use > peak_in_use) peak_in_use = in_use;
    int moved = assemble(p, len);
    pthread_mutex_unlock(&lock);
    *reused_p = moved;
    return p;
}

int acx_mem_cache_free(void *ptr) {
    if (ptr == NULL) return 0;
    char *p = ptr;
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < num_blocks && !(blocks[i].p == p && !blocks[i].free)) i++;
    if (i == num_blocks) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    block_t b = blocks[i];
    block_remove(i);
    in_use -= b.len;
    free_bytes += b.len;
    b.free = 1;
    b.tick = ++clock_ticks;
    /* merge with free neighbours in memory: [prev][b][next] */
    for (size_t j = num_blocks; j-- > 0;) {
        if (!blocks[j].free) continue;
        if (blocks[j].p + blocks[j].len == b.p) {
            b.p = blocks[j].p;
            b.len += blocks[j].len;
            block_remove(j);
        } else if (b.p + b.len == blocks[j].p) {
            b.len += blocks[j].len;
            block_remove(j);
        }
    }
    /* the slot freed above is still there, so this cannot fail */
    (void)block_add(b.p, b.len, 1, b.tick);
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

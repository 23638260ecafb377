/*
 * runtime/base/mem_cache.h — a caching allocator of page-aligned anonymous
 * mappings for model-state buffers (library-private; used by memstat.c).
 *
 * Sharded strategies allocate and free the same transient buffers every
 * step (gathered units, all-gather and reduce-scatter staging, unit
 * gradients). Mapping them afresh costs a page fault per page each time;
 * this cache keeps freed mappings and hands them out again, the way
 * PyTorch's CUDA caching allocator keeps freed device blocks:
 *
 *   - a request of `len` bytes (a multiple of the page size) takes the
 *     smallest free block of at least len bytes (best fit); a larger block
 *     is split, its tail stays free. Freed blocks merge with free blocks
 *     adjacent in memory (split pieces, or mappings the kernel happened to
 *     place side by side), so a large request finds a large block again.
 *   - the cache never makes the process hold more than it held at its peak:
 *     held = in use + free <= the largest in-use total seen (page-rounded),
 *     since the last acx_mem_cache_empty. A request that no free block fits
 *     maps a new block, and unmaps the least recently freed blocks first
 *     until held is back under that bound. In the steady state of a training
 *     loop (the same sizes every step) nothing is mapped or unmapped, and
 *     the peak resident memory is the peak of the buffers in use.
 *
 * What it does not do: accounting per category (memstat.c), zero-filling
 * (memstat.c, for blocks that come back from the cache), small buffers
 * (memstat.c gives those to malloc). Thread-safe (one mutex); acx calls it
 * from the main thread only.
 */
#ifndef ACX_BASE_MEM_CACHE_H
#define ACX_BASE_MEM_CACHE_H

#include <stddef.h>

/* A block of exactly len bytes (len > 0, a multiple of the page size),
 * page-aligned: a cached one when one fits (*reused_p = 1: its contents are
 * whatever the last user left), else a fresh mapping (*reused_p = 0: zero
 * pages from the kernel). NULL when the system refuses a mapping even after
 * the cache was emptied (errno from mmap). */
void *acx_mem_cache_alloc(size_t len, int *reused_p);

/* Give back a block from acx_mem_cache_alloc (NULL is fine); it stays
 * mapped, free for reuse. Returns 0, or -1 when p is not a live block of
 * the cache (a caller bug; the block is left alone). */
int acx_mem_cache_free(void *p);

/* Bytes of free blocks the cache holds (mapped, not in use). */
size_t acx_mem_cache_bytes(void);

/* Unmap every free block and restart the peak bound from the bytes in
 * use. Blocks in use are untouched. */
void acx_mem_cache_empty(void);

#endif /* ACX_BASE_MEM_CACHE_H */

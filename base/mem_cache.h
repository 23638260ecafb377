/*
 * base/mem_cache.h — a caching allocator of page-aligned anonymous
 * mappings for model-state buffers (library-private; used by memstat.c).
 *
 * Sharded strategies allocate and free the same transient buffers every
 * step (gathered units, all-gather and reduce-scatter staging, unit
 * gradients). Mapping them afresh costs a page fault per page each time;
 * this cache keeps freed mappings and hands them out again, the way
 * PyTorch's CUDA caching allocator keeps freed device blocks:
 *
 *   - a request of `len` bytes (a multiple of the page size) takes a free
 *     block of about that size (at most 1/8 larger), else a fresh one
 *     while the bound allows, else splits a larger free block (its tail
 *     stays free), else moves free pieces into a fresh range (mremap: the
 *     pages stay resident). A freed block keeps its size (its size class).
 *     mem_cache.c gives the order and why.
 *   - the cache never makes the process hold much more than it held at its
 *     peak: held = in use + free <= the largest in-use total seen since the
 *     last acx_mem_cache_empty (page-rounded), plus 1/8 of it for size
 *     classes. In the steady state of a training loop (the same sizes every
 *     step) nothing is mapped, moved or unmapped, and no page is faulted in.
 *
 * What it does not do: accounting per category (memstat.c), zero-filling
 * (memstat.c, for blocks that come back from the cache), small buffers
 * (memstat.c gives those to malloc). Thread-safe (one mutex); acx calls it
 * from the main thread only.
 */
#ifndef ACX_BASE_MEM_CACHE_H
#define ACX_BASE_MEM_CACHE_H

#include <stddef.h>

/* A block of at least len bytes (len > 0, a multiple of the page size; at
 * most len + len/8), page-aligned: a cached one when one fits (*reused_p = 1: its contents are
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

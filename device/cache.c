/*
 * device/cache.c — the caching allocator of device/cache.h: freed
 * device blocks kept per table, tagged with the stream that may still use
 * them, reused by best fit on that stream.
 *
 * Blocks. Every block the cache handed out or keeps is one entry of a flat
 * array (a sharded model has a handful per unit: a scan is far cheaper than
 * the cudaMalloc/cudaFree pair and the synchronize it saves). A block keeps
 * the size it was allocated with; it is never split or merged — training
 * repeats the same requests every step, so after the first step each one
 * finds a block of its own size (exact fit) and the table is not called.
 * The fit allows 1/8 more than asked, as base/mem_cache.c's size
 * classes, so a small request does not take a large block.
 *
 * Streams. A block freed on stream s is "pending on s": only a request on
 * s may take it (its work runs after the old work, in stream order). When
 * the caller says s drained (acx_devcache_stream_idle), its blocks become
 * idle and serve any stream; releasing a pending block synchronizes its
 * stream first, since the table's free waits for nothing.
 *
 * The public counters: in use through acx_mem_note (as acx_devops_alloc),
 * cached through the hook registered with memstat.c (acx_mem_set_device_cache)
 * at the first request, which also lets acx_memory_empty_cache reach this
 * cache from the base layer.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/cache.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "base/settings.h"

#define SLACK_DIV 8 /* a block may be up to 1/8 larger than the request it serves */

typedef struct dblock {
    const acx_devops_t *dev;
    void *p;
    size_t len;  /* bytes allocated from the table */
    int in_use;  /* 1: handed out; 0: cached */
    int pending; /* cached and freed on `stream`, which may still use it */
    void *stream;
} dblock_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dblock_t *blocks;
static size_t num_blocks, cap_blocks;
static size_t cached_bytes;
static int registered;

static int caching_on(void) {
    int off;
    acx_env_flag(ACX_ENV_DEVICE_CACHE_DISABLE, &off); /* anything but 1: caching stays on */
    return !off;
}

/* Caller holds the lock. */
static int block_add(const acx_devops_t *dev, void *p, size_t len) {
    if (num_blocks == cap_blocks) {
        size_t cap = cap_blocks ? 2 * cap_blocks : 64;
        dblock_t *b = realloc(blocks, cap * sizeof *b);
        if (b == NULL) return -1;
        blocks = b;
        cap_blocks = cap;
    }
    blocks[num_blocks++] = (dblock_t){.dev = dev, .p = p, .len = len, .in_use = 1};
    return 0;
}

/* Take the best-fitting cached block of dev for `bytes` on stream, or
 * return -1. Caller holds the lock. */
static long take_best(const acx_devops_t *dev, size_t bytes, void *stream) {
    long best = -1;
    size_t limit = bytes + bytes / SLACK_DIV;
    for (size_t i = 0; i < num_blocks; i++) {
        const dblock_t *b = &blocks[i];
        if (b->in_use || b->dev != dev || b->len < bytes || b->len > limit) continue;
        if (b->pending && b->stream != stream) continue; /* may be busy on another stream */
        if (best < 0 || b->len < blocks[best].len) best = (long)i;
    }
    if (best >= 0) {
        blocks[best].in_use = 1;
        blocks[best].pending = 0;
        cached_bytes -= blocks[best].len;
    }
    return best;
}

/* Release one cached block (lock NOT held: sync and free may take long). */
static void release(const dblock_t *b) {
    if (b->pending && b->dev->sync(b->stream) != ACX_OK)
        ACX_WARN(ACX_SUBSYS_SHARD,
                 "device cache: synchronizing a stream before freeing a cached "
                 "block: %s",
                 acx_last_error());
    b->dev->free(b->p);
}

/* Take every cached block out of the list (of dev only, or all for NULL)
 * into *out_p (malloc'd, *n_p entries); the caller releases them. */
static void detach_cached(const acx_devops_t *dev, dblock_t **out_p, size_t *n_p) {
    *out_p = NULL;
    *n_p = 0;
    pthread_mutex_lock(&lock);
    size_t n = 0;
    for (size_t i = 0; i < num_blocks; i++)
        n += !blocks[i].in_use && (!dev || blocks[i].dev == dev);
    dblock_t *out = n ? malloc(n * sizeof *out) : NULL;
    if (out != NULL) {
        size_t k = 0;
        for (size_t i = 0; i < num_blocks;) {
            if (!blocks[i].in_use && (!dev || blocks[i].dev == dev)) {
                cached_bytes -= blocks[i].len;
                out[k++] = blocks[i];
                blocks[i] = blocks[--num_blocks];
            } else {
                i++;
            }
        }
        *out_p = out;
        *n_p = k;
    }
    pthread_mutex_unlock(&lock);
}

static void empty_of(const acx_devops_t *dev) {
    dblock_t *out;
    size_t n;
    detach_cached(dev, &out, &n);
    for (size_t i = 0; i < n; i++)
        release(&out[i]);
    free(out);
}

/* ---- the interface ---- */

void acx_devcache_empty(void) { empty_of(NULL); }

size_t acx_devcache_bytes(void) {
    pthread_mutex_lock(&lock);
    size_t b = cached_bytes;
    pthread_mutex_unlock(&lock);
    return b;
}

acx_status_t acx_devcache_alloc(const acx_devops_t *dev, acx_mem_category_t cat, size_t bytes,
                                int zero, void *stream, const char *what, void **p_p) {
    if (bytes == 0 || !caching_on()) return acx_devops_alloc(dev, cat, bytes, what, p_p);
    pthread_mutex_lock(&lock);
    if (!registered) {
        acx_mem_set_device_cache(acx_devcache_empty, acx_devcache_bytes);
        registered = 1;
    }
    long i = take_best(dev, bytes, stream);
    void *p = i >= 0 ? blocks[i].p : NULL;
    pthread_mutex_unlock(&lock);
    if (p != NULL) { /* reused: the caller's work comes after the old work on stream */
        acx_status_t status = ACX_OK;
        if (zero)
            status = dev->memset(p, 0, bytes, stream);
        else if (dev->emulated) /* stale contents made loud (NaN) for the tests */
            status = dev->memset(p, 0xff, bytes, stream);
        if (status != ACX_OK) { /* back to the cache, pending on stream */
            pthread_mutex_lock(&lock);
            for (size_t k = 0; k < num_blocks; k++)
                if (blocks[k].p == p) {
                    blocks[k].in_use = 0;
                    blocks[k].pending = 1;
                    blocks[k].stream = stream;
                    cached_bytes += blocks[k].len;
                }
            pthread_mutex_unlock(&lock);
            return status;
        }
        acx_mem_note(cat, (int64_t)bytes, 1);
        *p_p = p;
        return ACX_OK;
    }
    /* a fresh block (zeroed by the table); on failure, give the cache back
     * to this table and try once more */
    acx_status_t status = dev->alloc(bytes, what, &p);
    if (status != ACX_OK && acx_devcache_bytes() > 0) {
        ACX_INFO(ACX_SUBSYS_SHARD,
                 "device cache: allocating %zu bytes for %s failed; releasing "
                 "%zu cached bytes and retrying",
                 bytes, what != NULL ? what : "a buffer", acx_devcache_bytes());
        empty_of(dev);
        status = dev->alloc(bytes, what, &p);
    }
    if (status != ACX_OK) return status;
    pthread_mutex_lock(&lock);
    int added = block_add(dev, p, bytes);
    pthread_mutex_unlock(&lock);
    if (added != 0) {
        dev->free(p);
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "device cache: cannot grow the block list");
    }
    acx_mem_note(cat, (int64_t)bytes, 1);
    *p_p = p;
    return ACX_OK;
}

void acx_devcache_free(const acx_devops_t *dev, acx_mem_category_t cat, void *p, size_t bytes,
                       void *stream) {
    if (p == NULL) return;
    int on = caching_on();
    dblock_t b = {0};
    int known = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < num_blocks; i++) {
        if (blocks[i].p != p || !blocks[i].in_use) continue;
        known = 1;
        if (on) { /* kept: busy on stream until the stream moves past this point */
            blocks[i].in_use = 0;
            blocks[i].pending = 1;
            blocks[i].stream = stream;
            cached_bytes += blocks[i].len;
        } else {
            b = blocks[i];
            blocks[i] = blocks[--num_blocks];
        }
        break;
    }
    pthread_mutex_unlock(&lock);
    acx_mem_note(cat, -(int64_t)bytes, 1);
    if (known && on) return;
    /* not cached: the table's free waits for nothing, so drain the stream */
    if (dev->sync(stream) != ACX_OK)
        ACX_WARN(ACX_SUBSYS_SHARD,
                 "device cache: synchronizing the stream before freeing device "
                 "memory: %s",
                 acx_last_error());
    dev->free(known ? b.p : p);
}

void acx_devcache_stream_idle(void *stream) {
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < num_blocks; i++)
        if (!blocks[i].in_use && blocks[i].pending && blocks[i].stream == stream)
            blocks[i].pending = 0;
    pthread_mutex_unlock(&lock);
}

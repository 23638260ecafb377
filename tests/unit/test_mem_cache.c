/*
 * tests/unit/test_mem_cache.c — the caching allocator behind acx_mem_alloc
 * (base/mem_cache.c, memstat.c): a freed buffer comes back for the
 * next request of its size (the same pointer); a larger free block is
 * split, and the pieces keep their sizes when freed; the zeroing allocation
 * zero-fills a reused block; acx_memory_stats counts the bytes in use per
 * category (as asked for) and the cached free bytes apart, page-rounded;
 * the cache never holds more than the peak in use + 1/8 (a request no free
 * block fits gets the free pieces moved into it: resident, no faults);
 * acx_memory_empty_cache and small buffers (not cached); and a
 * FULL_SHARD-like step pattern that, after its first steps, neither maps
 * nor faults pages in.
 *
 * The numbers are worked out by hand from the page size: this test is the
 * only user of the allocator in its process, so the cache starts empty.
 */
#include <stdint.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/memstat.h"
#include "tests/acx_test.h"

#define MIB ((size_t)1 << 20)
#define T   ACX_MEM_TRANSIENT
#define G   ACX_MEM_GRADS

static size_t page;

static size_t page_round(size_t n) { return (n + page - 1) / page * page; }

static acx_memory_stats_t stats(void) {
    acx_memory_stats_t s;
    memset(&s, 0xff, sizeof s);
    (void)acx_memory_stats(&s);
    return s;
}

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0) return 0;
    return 1;
}

/* same size class: the same pointer back, and the bytes move between in
 * use and cached */
static int test_reuse(void) {
    TESTING("reuse of a freed block for the same size");
    size_t n = 3 * MIB + 100, len = page_round(n);
    unsigned char *p = acx_mem_alloc_raw(T, n, "test");
    CHECK(p != NULL && (uintptr_t)p % 64 == 0);
    acx_memory_stats_t s = stats();
    CHECK(s.current[T] == (int64_t)n && s.current_total == (int64_t)n && s.cached == 0);
    acx_mem_free(T, p, n);
    s = stats();
    CHECK(s.current[T] == 0 && s.current_total == 0 && s.peak[T] == (int64_t)n);
    CHECK(s.cached == (int64_t)len);
    /* any request that rounds to the same pages fits exactly */
    unsigned char *q = acx_mem_alloc_raw(T, len - 7, "test");
    CHECK(q == p);
    s = stats();
    CHECK(s.current[T] == (int64_t)(len - 7) && s.cached == 0);
    acx_mem_free(T, q, len - 7);
    CHECK(stats().cached == (int64_t)len);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* acx_mem_alloc zero-fills a reused block (all the bytes asked for) */
static int test_zeroing(void) {
    TESTING("zero-filling of a reused block");
    size_t n = 3 * MIB + 100;
    unsigned char *p = acx_mem_alloc_raw(T, n, "test");
    CHECK(p != NULL);
    memset(p, 0xab, n);
    acx_mem_free(T, p, n);
    unsigned char *q = acx_mem_alloc(G, n, "test");
    CHECK(q == p); /* reused, in another category */
    CHECK(all_zero(q, n));
    acx_memory_stats_t s = stats();
    CHECK(s.current[G] == (int64_t)n && s.current[T] == 0 && s.cached == 0);
    acx_mem_free(G, q, n);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* a larger free block is split (best fit, the head in use); the pieces
 * keep their sizes when freed (size classes), and a request larger than
 * each gets them moved into its range */
static int test_split(void) {
    TESTING("splitting of cached blocks; pieces keep their size");
    size_t big = page_round(3 * MIB + 100); /* the cached block of the tests above */
    CHECK(stats().cached == (int64_t)big);
    unsigned char *a = acx_mem_alloc_raw(T, MIB, "test");
    acx_memory_stats_t s = stats();
    CHECK(a != NULL && s.cached == (int64_t)(big - MIB));
    /* the 2 MiB + 1 page tail is of this size class (at most 1/8 more):
     * taken whole */
    unsigned char *b = acx_mem_alloc_raw(G, 2 * MIB, "test");
    CHECK(b == a + MIB);
    s = stats();
    CHECK(s.cached == 0);
    CHECK(s.current[T] == (int64_t)MIB && s.current[G] == (int64_t)(2 * MIB));
    CHECK(s.current_total == (int64_t)(3 * MIB));
    acx_mem_free(T, a, MIB);
    acx_mem_free(G, b, 2 * MIB);
    CHECK(stats().cached == (int64_t)big);
    /* each piece serves its own size again */
    CHECK(acx_mem_alloc_raw(G, 2 * MIB, "test") == b);
    CHECK(acx_mem_alloc_raw(T, MIB, "test") == a);
    acx_mem_free(T, a, MIB);
    acx_mem_free(G, b, 2 * MIB);
    /* the whole fits neither piece, and a fresh block beside them would be
     * over the peak (big) + 1/8: both move into the new range */
    unsigned char *c = acx_mem_alloc_raw(T, big, "test");
    CHECK(c != NULL && stats().cached == 0 && stats().current[T] == (int64_t)big);
    acx_mem_free(T, c, big);
    CHECK(stats().cached == (int64_t)big);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* in use + cached never exceeds the peak in use: a request no free block
 * fits gets the free blocks moved into its range, fresh pages only for the
 * rest */
static int test_bound(void) {
    TESTING("cache bounded by the peak in use; empty_cache");
    size_t big = page_round(3 * MIB + 100); /* peak in use so far: one such block */
    CHECK(stats().cached == (int64_t)big);
    /* 4 MiB fits nothing, and a fresh 4 MiB beside the cached 3 MiB would
     * be 7 MiB held, over the peak (4 MiB) + 1/8: the 3 MiB block moves
     * into the new range */
    unsigned char *p = acx_mem_alloc_raw(T, 4 * MIB, "test");
    acx_memory_stats_t s = stats();
    CHECK(p != NULL && s.cached == 0 && s.current[T] == (int64_t)(4 * MIB));
    acx_mem_free(T, p, 4 * MIB);
    CHECK(stats().cached == (int64_t)(4 * MIB));
    /* two blocks of 1 MiB: fresh ones would exceed 4 MiB + 1/8, so they
     * are split from the cached 4 MiB; held stays 4 MiB */
    unsigned char *a = acx_mem_alloc_raw(T, MIB, "test");
    unsigned char *b = acx_mem_alloc_raw(T, MIB, "test");
    CHECK(a == p && b == p + MIB);
    CHECK(stats().cached == (int64_t)(2 * MIB));
    /* 3 MiB does not fit the 2 MiB left: they move into a new range with
     * 1 MiB of fresh pages; in use (and the peak) 5 MiB, nothing cached */
    unsigned char *c = acx_mem_alloc_raw(T, 3 * MIB, "test");
    s = stats();
    CHECK(c != NULL && s.cached == 0 && s.current[T] == (int64_t)(5 * MIB));
    CHECK(s.peak[T] == (int64_t)(5 * MIB));
    acx_mem_free(T, a, MIB);
    acx_mem_free(T, b, MIB);
    acx_mem_free(T, c, 3 * MIB);
    s = stats();
    CHECK(s.cached == (int64_t)(5 * MIB) && s.current_total == 0);
    acx_memory_empty_cache();
    s = stats();
    CHECK(s.cached == 0 && s.current_total == 0 && s.peak[T] == (int64_t)(5 * MIB));
    /* within the eighth above the peak, a request of another size gets a
     * fresh block instead of splitting the cached one: peak 4 MiB, held
     * 4 MiB + 256 KiB <= 4.5 MiB */
    p = acx_mem_alloc_raw(T, 4 * MIB, "test");
    acx_mem_free(T, p, 4 * MIB);
    unsigned char *q = acx_mem_alloc_raw(T, 256 << 10, "test");
    s = stats();
    CHECK(q != NULL && (q < p || q >= p + 4 * MIB) && s.cached == (int64_t)(4 * MIB));
    /* a second 256 KiB too (4.5 MiB held); a third would exceed: split */
    unsigned char *r = acx_mem_alloc_raw(T, 256 << 10, "test");
    CHECK(r != NULL && (r < p || r >= p + 4 * MIB) && stats().cached == (int64_t)(4 * MIB));
    unsigned char *w = acx_mem_alloc_raw(T, 256 << 10, "test");
    CHECK(w == p && stats().cached == (int64_t)(4 * MIB - (256 << 10)));
    acx_mem_free(T, q, 256 << 10);
    acx_mem_free(T, r, 256 << 10);
    acx_mem_free(T, w, 256 << 10);
    acx_memory_empty_cache();
    CHECK(stats().cached == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* the moved pages stay resident (no faults to touch them again) and a
 * zeroing request over moved pages gets zeros */
static int test_assemble(void) {
    TESTING("free pieces moved into a larger block");
    /* the peak bound restarted at 0 with the empty above */
    unsigned char *a = acx_mem_alloc_raw(T, MIB, "test");
    CHECK(a != NULL);
    memset(a, 0xab, MIB); /* resident now */
    acx_mem_free(T, a, MIB);
    CHECK(stats().cached == (int64_t)MIB);
    unsigned char *p = acx_mem_alloc_raw(T, 2 * MIB, "test"); /* 1 MiB moved + 1 MiB fresh */
    CHECK(p != NULL && stats().cached == 0);
    long before = minor_faults();
    volatile unsigned char sum = 0;
    for (size_t i = 0; i < MIB; i += page)
        sum += p[i]; /* the moved MiB: its old contents */
    long faults = minor_faults() - before;
    CHECK(sum == (unsigned char)(0xab * (MIB / page)));
    CHECK(faults <= 2);
    memset(p, 0xcd, 2 * MIB);
    acx_mem_free(T, p, 2 * MIB);
    /* a zeroing request of 3 MiB: the 2 MiB move in, stale; all must be 0 */
    unsigned char *z = acx_mem_alloc(G, 3 * MIB, "test");
    CHECK(z != NULL && all_zero(z, 3 * MIB));
    CHECK(stats().current[G] == (int64_t)(3 * MIB) && stats().cached == 0);
    acx_mem_free(G, z, 3 * MIB);
    CHECK(stats().cached == (int64_t)(3 * MIB));
    acx_memory_empty_cache();
    CHECK(stats().cached == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* small buffers come from malloc and are not cached */
static int test_small(void) {
    TESTING("small buffers bypass the cache");
    size_t n = 1000;
    unsigned char *p = acx_mem_alloc(T, n, "test");
    CHECK(p != NULL && (uintptr_t)p % 64 == 0 && all_zero(p, n));
    CHECK(stats().current[T] == (int64_t)n);
    acx_mem_free(T, p, n);
    acx_memory_stats_t s = stats();
    CHECK(s.cached == 0 && s.current[T] == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- a FULL_SHARD-like step ---- */

/* The page-rounded bytes in use by step(), counted by hand, their peak,
 * and the largest in use + cached seen. */
typedef struct tally {
    size_t in_use, peak, held_max;
} tally_t;

static void take(tally_t *t, size_t n) {
    t->in_use += page_round(n);
    if (t->in_use > t->peak) t->peak = t->in_use;
    size_t held = t->in_use + (size_t)stats().cached;
    if (held > t->held_max) t->held_max = held;
}

static void drop(tally_t *t, size_t n) { t->in_use -= page_round(n); }

/* One step over three units of different sizes, written in full as the
 * strategies do: forward gathers and frees each unit (data + staging);
 * backward gathers in reverse, makes zeroed gradients and reduce-scatter
 * staging, two reductions in flight. Returns 0, or 1 on a failure (an
 * allocation, or a zeroed buffer not zero). */
static int step(tally_t *t) {
    static const size_t unit[3] = {3 * MIB + 4096 * 3 + 100, MIB + 5000, 200 * 1024};
    for (int u = 0; u < 3; u++) {
        size_t n = unit[u], ns = n + 4096;
        unsigned char *d = acx_mem_alloc_raw(T, n, "data");
        take(t, n);
        unsigned char *st = acx_mem_alloc_raw(T, ns, "staging");
        take(t, ns);
        if (d == NULL || st == NULL) return 1;
        memset(st, 1, ns);
        memcpy(d, st, n);
        acx_mem_free(T, st, ns);
        drop(t, ns);
        acx_mem_free(T, d, n);
        drop(t, n);
    }
    unsigned char *rs[2] = {NULL, NULL};
    size_t rsn[2] = {0, 0};
    for (int u = 2; u >= 0; u--) {
        size_t n = unit[u], ns = n + 4096;
        unsigned char *d = acx_mem_alloc_raw(T, n, "data");
        take(t, n);
        unsigned char *st = acx_mem_alloc_raw(T, ns, "staging");
        take(t, ns);
        if (d == NULL || st == NULL) return 1;
        memset(st, 2, ns);
        memcpy(d, st, n);
        acx_mem_free(T, st, ns);
        drop(t, ns);
        unsigned char *g = acx_mem_alloc(G, n, "grad");
        take(t, n);
        if (g == NULL || !all_zero(g, n)) return 1;
        memset(g, 3, n);
        if (rs[1] != NULL) {
            acx_mem_free(T, rs[1], rsn[1]);
            drop(t, rsn[1]);
        }
        rs[1] = rs[0];
        rsn[1] = rsn[0];
        rs[0] = acx_mem_alloc(T, ns, "reduce-scatter staging");
        rsn[0] = ns;
        take(t, ns);
        if (rs[0] == NULL || !all_zero(rs[0], ns)) return 1;
        memcpy(rs[0], g, n);
        acx_mem_free(G, g, n);
        drop(t, n);
        acx_mem_free(T, d, n);
        drop(t, n);
    }
    for (int k = 0; k < 2; k++) {
        acx_mem_free(T, rs[k], rsn[k]);
        drop(t, rsn[k]);
    }
    return t->in_use != 0;
}

static int test_steps(void) {
    TESTING("repeated steps: no page faults after the first ones");
    tally_t t = {0, 0, 0};
    CHECK(step(&t) == 0);
    size_t peak = t.peak, limit = peak + peak / 8;
    CHECK(step(&t) == 0); /* the sizes that need blocks of their own get them */
    long before = minor_faults();
    for (int k = 0; k < 3; k++)
        CHECK(step(&t) == 0);
    long faults = minor_faults() - before;
    /* without the cache every step maps about twice its peak afresh and
     * faults each page in; allow a few for stdio and the stack */
    if (faults > 16)
        fprintf(stderr, "\n%ld minor faults in 3 steps (peak %zu pages)\n", faults, peak / page);
    CHECK(faults <= 16);
    /* in use (counted by hand) + cached within the peak + 1/8 */
    CHECK(t.peak == peak && t.held_max <= limit);
    acx_memory_stats_t s = stats();
    CHECK(s.current_total == 0 && s.cached > 0 && (size_t)s.cached <= limit);
    acx_memory_empty_cache();
    CHECK(stats().cached == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    page = (size_t)sysconf(_SC_PAGESIZE);
    int failed = 0;
    failed += test_reuse();
    failed += test_zeroing();
    failed += test_split();
    failed += test_bound();
    failed += test_assemble();
    failed += test_small();
    failed += test_steps();
    return failed ? 1 : 0;
}

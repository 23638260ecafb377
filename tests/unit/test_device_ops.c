/*
 * tests/unit/test_device_ops.c — the emulated device of device/ops.h:
 * its memory is inaccessible to host code (a dereference outside an op is
 * SIGSEGV, checked in a child process), a host pointer given to an op is
 * refused, allocations are zeroed and accounted in acx_memory_stats'
 * device counters, copies round-trip, and every kernel equals its CPU
 * reference bit for bit (optimizer steps against acx_kernel_*_ieee run on
 * host copies; casts, scale, the inf check, the norms and the clamp
 * against hand-derived values). The copy stream: asynchronous copies
 * deferred until waited for (NaN until then), event order, the missing
 * stream waits refused, the argument errors. The device cache (device/cache.h) in
 * front of the emulated table. Also: the CUDA table says why it is absent
 * on a machine without a device.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acx_test.h"
#include "device/cache.h"
#include "device/ops.h"
#include "base/optim_kernels.h"

static const acx_devops_t *D = &acx_devops_emulated;

/* 1 if fn(arg) ends the child process with SIGSEGV. */
static int segfaults(void (*fn)(void *), void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn(arg);
        _exit(0);
    }
    int wst = 0;
    if (pid < 0 || waitpid(pid, &wst, 0) != pid) return 0;
    return WIFSIGNALED(wst) && WTERMSIG(wst) == SIGSEGV;
}

static void read_float(void *p) {
    volatile float x = *(volatile float *)p;
    (void)x;
}
static void write_float(void *p) { *(volatile float *)p = 1.0f; }

static int test_memory(void) {
    float *d = NULL, h[8], back[8];
    CHECK_OK(D->alloc(sizeof h, "test", (void **)&d));
    CHECK(d != NULL);
    CHECK(acx_devops_emulated_owns(d, sizeof h));
    CHECK(!acx_devops_emulated_owns(h, sizeof h));
    CHECK(segfaults(read_float, d));
    CHECK(segfaults(write_float, d + 3));
    memset(back, 0xff, sizeof back);
    CHECK_OK(D->to_host(back, d, sizeof back, NULL));
    for (int i = 0; i < 8; i++)
        CHECK(back[i] == 0.0f); /* zeroed */
    for (int i = 0; i < 8; i++)
        h[i] = (float)i + 0.5f;
    CHECK_OK(D->to_device(d, h, sizeof h, NULL));
    CHECK(segfaults(read_float, d)); /* still closed after an op */
    CHECK_OK(D->to_host(back, d, sizeof back, NULL));
    CHECK(memcmp(back, h, sizeof h) == 0);
    CHECK_OK(D->copy(d, d + 4, 4 * sizeof(float), NULL)); /* d[0..4) = d[4..8) */
    CHECK_OK(D->to_host(back, d, sizeof back, NULL));
    CHECK(back[0] == 4.5f && back[3] == 7.5f && back[4] == 4.5f);
    CHECK_OK(D->memset(d + 2, 0, 2 * sizeof(float), NULL));
    CHECK_OK(D->to_host(back, d, sizeof back, NULL));
    CHECK(back[1] == 5.5f && back[2] == 0.0f && back[3] == 0.0f && back[4] == 4.5f);
    /* the staging copy of the MPI backend, both directions */
    float t[2] = {-1.0f, -2.0f};
    CHECK_OK(acx_devops_emulated_memcpy(d + 6, t, sizeof t));
    CHECK_OK(acx_devops_emulated_memcpy(back, d + 5, 3 * sizeof(float)));
    CHECK(back[0] == 5.5f && back[1] == -1.0f && back[2] == -2.0f);
    /* host pointers, ranges running past an allocation */
    CHECK_STATUS(D->scale(h, 8, 2.0f, NULL), ACX_ERR_INVALID_ARG, "is not device memory");
    CHECK_STATUS(D->to_host(back, d + 4, 5 * sizeof(float), NULL), ACX_ERR_INVALID_ARG,
                 "is not device memory");
    CHECK(!acx_devops_emulated_owns(d + 4, 5 * sizeof(float)));
    D->free(d);
    CHECK(!acx_devops_emulated_owns(d, 4));
    return 0;
error:
    return 1;
}

static int test_accounting(void) {
    acx_memory_stats_t s0, s1, s2;
    void *p = NULL;
    CHECK_OK(acx_memory_stats(&s0));
    CHECK_OK(acx_devops_alloc(D, ACX_MEM_OPTIMIZER, 1000, "moments", &p));
    CHECK_OK(acx_memory_stats(&s1));
    CHECK(s1.device_current[ACX_MEM_OPTIMIZER] - s0.device_current[ACX_MEM_OPTIMIZER] == 1000);
    CHECK(s1.device_current_total - s0.device_current_total == 1000);
    CHECK(s1.current_total == s0.current_total); /* host counters untouched */
    acx_devops_free(D, ACX_MEM_OPTIMIZER, p, 1000);
    CHECK_OK(acx_memory_stats(&s2));
    CHECK(s2.device_current[ACX_MEM_OPTIMIZER] == s0.device_current[ACX_MEM_OPTIMIZER]);
    CHECK(s2.device_peak[ACX_MEM_OPTIMIZER] >= 1000);
    return 0;
error:
    return 1;
}

/* host_alloc (for the CPU-offloaded optimizer): zeroed host memory that
 * host code reads and writes, not the device's, counted in the HOST
 * counters; the device copies move data to and from it. */
static int test_host_alloc(void) {
    acx_memory_stats_t s0, s1, s2;
    float *h = NULL, *d = NULL, back[250];
    CHECK_OK(acx_memory_stats(&s0));
    CHECK_OK(acx_devops_host_alloc(D, ACX_MEM_MASTER, 1000, "master", (void **)&h));
    CHECK_OK(acx_memory_stats(&s1));
    CHECK(s1.current[ACX_MEM_MASTER] - s0.current[ACX_MEM_MASTER] == 1000);
    CHECK(s1.device_current_total == s0.device_current_total);
    CHECK(((uintptr_t)h & 63) == 0);
    CHECK(!acx_devops_emulated_owns(h, 1000));
    for (int i = 0; i < 250; i++)
        CHECK(h[i] == 0.0f);
    for (int i = 0; i < 250; i++)
        h[i] = (float)i * 0.25f; /* host code may write it */
    CHECK_OK(acx_devops_alloc(D, ACX_MEM_PARAMS, 1000, "params", (void **)&d));
    CHECK_OK(D->to_device(d, h, 1000, NULL));
    CHECK_OK(D->to_host(back, d, 1000, NULL));
    CHECK(memcmp(back, h, 1000) == 0);
    acx_devops_free(D, ACX_MEM_PARAMS, d, 1000);
    acx_devops_host_free(D, ACX_MEM_MASTER, h, 1000);
    CHECK_OK(acx_memory_stats(&s2));
    CHECK(s2.current[ACX_MEM_MASTER] == s0.current[ACX_MEM_MASTER]);
    CHECK_OK(D->host_alloc(0, "nothing", (void **)&h));
    CHECK(h == NULL);
    return 0;
error:
    return 1;
}

/* deterministic values of mixed magnitude and sign */
static void fill(float *x, size_t n, uint32_t seed, float scale) {
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
}

enum { N = 1000 };

static int test_optimizers(void) {
    float hp_[4][N], dv[4][N];
    float *d[4] = {NULL, NULL, NULL, NULL};
    int rc = 1;
    for (int k = 0; k < 4; k++)
        CHECK_OK(D->alloc(sizeof hp_[k], "opt", (void **)&d[k]));
    acx_adam_hparams_t ah = {
        .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    fill(hp_[0], N, 1, 2.0f);
    fill(hp_[1], N, 2, 0.5f);
    memset(hp_[2], 0, sizeof hp_[2]);
    memset(hp_[3], 0, sizeof hp_[3]);
    for (int k = 0; k < 4; k++)
        CHECK_OK(D->to_device(d[k], hp_[k], sizeof hp_[k], NULL));
    for (int64_t t = 1; t <= 3; t++) {
        acx_kernel_adam_ieee(hp_[0], hp_[1], hp_[2], hp_[3], N, &ah, 1e-2, t, 1);
        CHECK_OK(D->adam(d[0], d[1], d[2], d[3], N, &ah, 1e-2, t, 1, NULL));
    }
    for (int k = 0; k < 4; k++) {
        CHECK_OK(D->to_host(dv[k], d[k], sizeof dv[k], NULL));
        CHECK(memcmp(dv[k], hp_[k], sizeof dv[k]) == 0);
    }
    CHECK(hp_[0][0] != dv[1][0]); /* something moved */
    acx_sgd_hparams_t sh = {
        .lr = 0.1, .momentum = 0.9, .dampening = 0.0, .weight_decay = 1e-3, .nesterov = 1};
    for (int t = 1; t <= 3; t++) {
        acx_kernel_sgd_ieee(hp_[0], hp_[1], hp_[2], N, &sh, 0.1, t == 1);
        CHECK_OK(D->sgd(d[0], d[1], d[2], N, &sh, 0.1, t == 1, NULL));
    }
    for (int k = 0; k < 3; k++) {
        CHECK_OK(D->to_host(dv[k], d[k], sizeof dv[k], NULL));
        CHECK(memcmp(dv[k], hp_[k], sizeof dv[k]) == 0);
    }
    rc = 0;
error:
    for (int k = 0; k < 4; k++)
        D->free(d[k]);
    return rc;
}

static int test_kernels(void) {
    float *x = NULL, *y = NULL;
    uint16_t *w = NULL;
    double *r = NULL, rh = 0.0;
    int *flag = NULL, fh = 0, rc = 1;
    CHECK_OK(D->alloc(4 * sizeof(float), "x", (void **)&x));
    CHECK_OK(D->alloc(4 * sizeof(float), "y", (void **)&y));
    CHECK_OK(D->alloc(4 * sizeof(uint16_t), "w", (void **)&w));
    CHECK_OK(D->alloc(sizeof(double), "r", (void **)&r));
    CHECK_OK(D->alloc(sizeof(int), "flag", (void **)&flag));
    const float v[4] = {1.0f, -2.0f, 3.0f, 1.0f + 0x1p-12f};
    CHECK_OK(D->to_device(x, v, sizeof v, NULL));
    CHECK_OK(D->sum_squares(x, 3, r, NULL));
    CHECK_OK(D->to_host(&rh, r, sizeof rh, NULL));
    CHECK(rh == 14.0);
    CHECK_OK(D->max_abs(x, 3, r, NULL));
    CHECK_OK(D->to_host(&rh, r, sizeof rh, NULL));
    CHECK(rh == 3.0);
    CHECK_OK(D->nonfinite(x, 4, 1.0f, flag, NULL));
    CHECK_OK(D->to_host(&fh, flag, sizeof fh, NULL));
    CHECK(fh == 0);
    /* finite, but 3 * 2^127 overflows: the unscaled-overflow test */
    CHECK_OK(D->nonfinite(x, 4, 0x1p127f, flag, NULL));
    CHECK_OK(D->to_host(&fh, flag, sizeof fh, NULL));
    CHECK(fh == 1);
    CHECK_OK(D->scale(x, 4, 0.5f, NULL));
    float h[4];
    CHECK_OK(D->to_host(h, x, sizeof h, NULL));
    CHECK(h[0] == 0.5f && h[1] == -1.0f && h[2] == 1.5f);
    CHECK_OK(D->to_device(x, v, sizeof v, NULL));
    uint16_t hw[4];
    CHECK_OK(D->half_from_f32(ACX_DTYPE_FLOAT16, x, w, 4, NULL));
    CHECK_OK(D->to_host(hw, w, sizeof hw, NULL));
    CHECK(hw[0] == 0x3c00 && hw[1] == 0xc000 && hw[2] == 0x4200 && hw[3] == 0x3c00);
    CHECK_OK(D->half_from_f32(ACX_DTYPE_BFLOAT16, x, w, 4, NULL));
    CHECK_OK(D->to_host(hw, w, sizeof hw, NULL));
    CHECK(hw[0] == 0x3f80 && hw[1] == 0xc000 && hw[2] == 0x4040 && hw[3] == 0x3f80);
    CHECK_OK(D->half_to_f32(ACX_DTYPE_BFLOAT16, w, y, 4, NULL));
    CHECK_OK(D->to_host(h, y, sizeof h, NULL));
    CHECK(h[0] == 1.0f && h[1] == -2.0f && h[2] == 3.0f && h[3] == 1.0f);
    CHECK_OK(D->half_round_f32(ACX_DTYPE_FLOAT16, x, x, 4, NULL)); /* in place */
    CHECK_OK(D->to_host(h, x, sizeof h, NULL));
    CHECK(h[3] == 1.0f && h[2] == 3.0f); /* 1 + 2^-12 is below fp16's half-ulp 2^-11 */
    CHECK_STATUS(D->half_from_f32(ACX_DTYPE_FLOAT32, x, w, 4, NULL), ACX_ERR_INVALID_ARG, "16-bit");
    rc = 0;
error:
    D->free(x);
    D->free(y);
    D->free(w);
    D->free(r);
    D->free(flag);
    return rc;
}

/* clamp (clip by value) against hand-computed values: ordinary elements
 * clipped, the exact boundaries kept, the neighbours just inside kept and
 * just outside clipped, +-inf clipped, NaN (with its payload) and -0.0 kept;
 * v = 0 (clipped values become -0.0 and +0.0, as the host loop's -v and v)
 * and v = inf (nothing changes). Compared as bit patterns. */
static int bits_equal(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            fprintf(stderr, "\n[%zu]: got %a, want %a\n", i, (double)a[i], (double)b[i]);
            return 0;
        }
    return 1;
}

static int test_clamp(void) {
    enum { K = 14 };
    float *x = NULL, got[K];
    int rc = 1;
    const float below = 0x1.fffffep-1f, above = 0x1.000002p+0f; /* 1 -+ one ulp */
    float qnan, nnan;
    uint32_t qb = 0x7fc01234u, nb = 0xffc00005u; /* NaNs with payloads, both signs */
    memcpy(&qnan, &qb, sizeof qnan);
    memcpy(&nnan, &nb, sizeof nnan);
    const float in[K] = {-INFINITY, INFINITY, qnan,   nnan,  1.5f,   -1.5f, 1.0f,
                         -1.0f,     below,    -below, above, -above, -0.0f, 3e38f};
    const float want1[K] = {-1.0f, 1.0f,  qnan,   nnan, 1.0f,  -1.0f, 1.0f,
                            -1.0f, below, -below, 1.0f, -1.0f, -0.0f, 1.0f};
    const float want0[K] = {-0.0f, 0.0f, qnan,  nnan, 0.0f,  -0.0f, 0.0f,
                            -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, -0.0f, 0.0f};
    CHECK_OK(D->alloc(sizeof in, "x", (void **)&x));
    CHECK_OK(D->to_device(x, in, sizeof in, NULL));
    CHECK_OK(D->clamp(x, K, 1.0f, NULL));
    CHECK_OK(D->to_host(got, x, sizeof got, NULL));
    CHECK(bits_equal(got, want1, K));
    CHECK_OK(D->to_device(x, in, sizeof in, NULL));
    CHECK_OK(D->clamp(x, K, 0.0f, NULL));
    CHECK_OK(D->to_host(got, x, sizeof got, NULL));
    CHECK(bits_equal(got, want0, K));
    CHECK_OK(D->to_device(x, in, sizeof in, NULL));
    CHECK_OK(D->clamp(x, K, INFINITY, NULL));
    CHECK_OK(D->to_host(got, x, sizeof got, NULL));
    CHECK(bits_equal(got, in, K));
    /* only the n elements asked for */
    CHECK_OK(D->to_device(x, in, sizeof in, NULL));
    CHECK_OK(D->clamp(x + 4, 2, 1.0f, NULL));
    CHECK_OK(D->to_host(got, x, sizeof got, NULL));
    CHECK(got[4] == 1.0f && got[5] == -1.0f && isinf(got[0]) && got[13] == 3e38f);
    CHECK_STATUS(D->clamp(got, K, 1.0f, NULL), ACX_ERR_INVALID_ARG, "is not device memory");
    rc = 0;
error:
    D->free(x);
    return rc;
}

/* The device cache (device/cache.h) on the emulated device, with two
 * made-up stream handles (the emulated device ignores streams; the cache
 * only compares them): a freed block comes back for a request on its
 * stream (no table alloc: the emulated alloc counter stays), zeroed when
 * asked and NaN-filled (0xff) when not; never for another stream until
 * its stream is idle; not for a request it exceeds by more than 1/8; the
 * in-use and cached counters; acx_memory_empty_cache unmaps the cached
 * blocks; ACX_DEVICE_CACHE_DISABLE=1 goes straight to the table. */
static int test_cache(void) {
    void *const S1 = (void *)0x1, *const S2 = (void *)0x2;
    acx_memory_stats_t s0, s;
    size_t calls0, live0, calls, live;
    unsigned char *a = NULL, *b = NULL, *c = NULL, *e = NULL;
    unsigned char buf[4000];
    int rc = 1;
    const acx_mem_category_t T = ACX_MEM_TRANSIENT;
    acx_memory_empty_cache();
    CHECK_OK(acx_memory_stats(&s0));
    acx_devops_emulated_counters(&calls0, &live0);
    CHECK_OK(acx_devcache_alloc(D, T, 4000, 1, S1, "a", (void **)&a));
    acx_devops_emulated_counters(&calls, &live);
    CHECK(calls == calls0 + 1 && live == live0 + 4000);
    memset(buf, 0x11, sizeof buf);
    CHECK_OK(D->to_device(a, buf, sizeof buf, NULL));
    CHECK_OK(acx_memory_stats(&s));
    CHECK(s.device_current[T] - s0.device_current[T] == 4000 && s.device_cached == 0);
    acx_devcache_free(D, T, a, 4000, S1);
    CHECK_OK(acx_memory_stats(&s));
    CHECK(s.device_current[T] == s0.device_current[T] && s.device_cached == 4000);
    CHECK(acx_devcache_bytes() == 4000);
    acx_devops_emulated_counters(&calls, &live);
    CHECK(live == live0 + 4000); /* kept mapped */
    /* another stream: a may still be busy on S1 */
    CHECK_OK(acx_devcache_alloc(D, T, 4000, 0, S2, "b", (void **)&b));
    CHECK(b != a);
    acx_devops_emulated_counters(&calls, NULL);
    CHECK(calls == calls0 + 2);
    /* the same stream, 1/8 smaller: a again, zeroed */
    CHECK_OK(acx_devcache_alloc(D, T, 3600, 1, S1, "c", (void **)&c));
    CHECK(c == a);
    acx_devops_emulated_counters(&calls, NULL);
    CHECK(calls == calls0 + 2);
    CHECK_OK(acx_memory_stats(&s));
    CHECK(s.device_current[T] - s0.device_current[T] == 4000 + 3600 && s.device_cached == 0);
    CHECK_OK(D->to_host(buf, c, 3600, NULL));
    for (int i = 0; i < 3600; i++)
        CHECK(buf[i] == 0);
    acx_devcache_free(D, T, c, 3600, S1);
    /* not zeroed: NaN bytes on the emulated device */
    CHECK_OK(acx_devcache_alloc(D, T, 4000, 0, S1, "c", (void **)&c));
    CHECK(c == a);
    CHECK_OK(D->to_host(buf, c, 4000, NULL));
    for (int i = 0; i < 4000; i++)
        CHECK(buf[i] == 0xff);
    acx_devcache_free(D, T, c, 4000, S1);
    /* a request a exceeds by more than 1/8: a fresh block */
    CHECK_OK(acx_devcache_alloc(D, T, 3500, 0, S1, "e", (void **)&e));
    CHECK(e != a);
    acx_devops_emulated_counters(&calls, NULL);
    CHECK(calls == calls0 + 3);
    /* S1 drained: its block serves S2 */
    acx_devcache_stream_idle(S1);
    CHECK_OK(acx_devcache_alloc(D, T, 4000, 0, S2, "c", (void **)&c));
    CHECK(c == a);
    acx_devcache_free(D, T, c, 4000, S2);
    acx_devcache_free(D, T, b, 4000, S2);
    acx_devcache_free(D, T, e, 3500, S1);
    CHECK_OK(acx_memory_stats(&s));
    CHECK(s.device_current[T] == s0.device_current[T] && s.device_cached == 4000 + 4000 + 3500);
    acx_memory_empty_cache();
    CHECK_OK(acx_memory_stats(&s));
    CHECK(s.device_cached == 0 && acx_devcache_bytes() == 0);
    acx_devops_emulated_counters(&calls, &live);
    CHECK(live == live0);
    CHECK(!acx_devops_emulated_owns(a, 1));
    /* caching off: a table alloc per request, freed at once */
    setenv("ACX_DEVICE_CACHE_DISABLE", "1", 1);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(acx_devcache_alloc(D, T, 4000, 1, S1, "off", (void **)&a));
        acx_devcache_free(D, T, a, 4000, S1);
    }
    unsetenv("ACX_DEVICE_CACHE_DISABLE");
    acx_devops_emulated_counters(&calls, &live);
    CHECK(calls == calls0 + 5 && live == live0);
    CHECK_OK(acx_memory_stats(&s));
    CHECK(s.device_cached == 0 && s.device_current[T] == s0.device_current[T]);
    rc = 0;
error:
    unsetenv("ACX_DEVICE_CACHE_DISABLE");
    return rc;
}

/* ---- copy streams and events (rules: device/ops.h) ---- */

static int all_ones(const void *p, size_t bytes) {
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++)
        if (c[i] != 0xff) return 0;
    return 1;
}

/* The asynchronous copy is deferred (its destination NaN until the program
 * waits), performed in stream order up to the event waited for; another
 * stream's wait for a later event performs it too; a write to its source
 * while it is queued, and a copy of a range written on another stream with
 * no wait, are refused; sync and stream_destroy perform what is queued. */
static int test_copy_stream(void) {
    float *d = NULL, h[8], h2[8];
    void *s = NULL, *e1 = NULL, *e2 = NULL;
    int rc = 1, done = 0;
    const float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_OK(D->alloc(sizeof v, "d", (void **)&d));
    CHECK_OK(D->to_device(d, v, sizeof v, NULL));
    CHECK_OK(D->stream_create("test copies", &s));
    CHECK_OK(D->event_create(&e1));
    CHECK_OK(D->event_create(&e2));
    CHECK_OK(D->event_sync(e1)); /* never recorded: returns at once */

    /* deferral and the NaN fill; performed at the event */
    for (int i = 0; i < 8; i++)
        h[i] = -1.0f;
    CHECK_OK(D->to_host_async(h, d, sizeof h, s));
    CHECK(all_ones(h, sizeof h) && isnan(h[0]) && isnan(h[7]));
    CHECK_OK(D->event_record(e1, s));
    CHECK(all_ones(h, sizeof h)); /* recording is no wait */
    CHECK_OK(D->event_sync(e1));
    CHECK(memcmp(h, v, sizeof v) == 0);

    /* event order: e1 captures copy A only, e2 both */
    CHECK_OK(D->to_host_async(h, d, 4 * sizeof(float), s)); /* A: h[0..4) */
    CHECK_OK(D->event_record(e1, s));
    CHECK_OK(D->to_host_async(h2, d + 4, 4 * sizeof(float), s)); /* B: h2[0..4) */
    CHECK_OK(D->event_record(e2, s));
    CHECK(all_ones(h, 4 * sizeof(float)) && all_ones(h2, 4 * sizeof(float)));
    CHECK_OK(D->event_query(e1, &done));
    CHECK(done == 1 && memcmp(h, v, 4 * sizeof(float)) == 0);
    CHECK(all_ones(h2, 4 * sizeof(float))); /* B comes after e1: still queued */
    CHECK_OK(D->event_sync(e2));
    CHECK(memcmp(h2, v + 4, 4 * sizeof(float)) == 0);

    /* a write to the source of a queued copy (no wait) is refused ... */
    CHECK_OK(D->to_host_async(h, d, sizeof h, s));
    CHECK_OK(D->event_record(e1, s));
    CHECK_STATUS(D->scale(d + 6, 1, 2.0f, NULL), ACX_ERR_STATE, "still queued");
    /* ... until the writer's stream waits for an event after it, which
     * performs it (the stream's later work may depend on it) */
    CHECK_OK(D->stream_wait_event(NULL, e1));
    CHECK(memcmp(h, v, sizeof v) == 0);
    CHECK_OK(D->scale(d + 6, 1, 2.0f, NULL)); /* d[6] = 14, on the default stream */

    /* the missing stream wait: d[6] was written on the default stream,
     * nothing orders it before a copy on s */
    CHECK_STATUS(D->to_host_async(h, d, sizeof h, s), ACX_ERR_STATE, "missing stream wait");
    CHECK_OK(D->to_host_async(h, d, 6 * sizeof(float), s)); /* d[0..6): not written */
    CHECK_OK(D->event_record(e2, NULL));
    CHECK_OK(D->stream_wait_event(s, e2));
    CHECK_OK(D->to_host_async(h2, d, sizeof h2, s)); /* ordered now */
    CHECK_OK(D->sync(s));                            /* performs both */
    CHECK(memcmp(h, v, 6 * sizeof(float)) == 0 && h2[6] == 14.0f && h2[7] == 8.0f);
    /* a host synchronization of the writer's stream orders it too */
    CHECK_OK(D->scale(d + 7, 1, 2.0f, NULL));
    CHECK_STATUS(D->to_host_async(h, d + 7, sizeof(float), s), ACX_ERR_STATE, "missing");
    CHECK_OK(D->sync(NULL));
    CHECK_OK(D->to_host_async(h, d + 7, sizeof(float), s));
    /* stream_destroy performs what is queued */
    D->stream_destroy(s);
    s = NULL;
    CHECK(h[0] == 16.0f);

    /* errors */
    CHECK_OK(D->stream_create("test copies", &s));
    for (int i = 0; i < 8; i++)
        h[i] = -1.0f;
    CHECK_STATUS(D->to_host_async(h, h2, sizeof h, s), ACX_ERR_INVALID_ARG, "is not device memory");
    CHECK_STATUS(D->to_host_async(d, d, sizeof h, s), ACX_ERR_INVALID_ARG,
                 "device memory, not host");
    CHECK_STATUS(D->to_host_async(NULL, d, sizeof h, s), ACX_ERR_INVALID_ARG, "NULL host");
    CHECK_STATUS(D->to_host_async(h, d, sizeof h, NULL), ACX_ERR_INVALID_ARG, "stream_create");
    CHECK_STATUS(D->to_host_async(h, d, sizeof h, h2), ACX_ERR_INVALID_ARG, "stream_create");
    CHECK_STATUS(D->event_record(NULL, s), ACX_ERR_INVALID_ARG, "not an event");
    CHECK_STATUS(D->event_sync(NULL), ACX_ERR_INVALID_ARG, "not an event");
    CHECK_STATUS(D->stream_wait_event(s, h2), ACX_ERR_INVALID_ARG, "not an event");
    CHECK_STATUS(D->event_query(e1, NULL), ACX_ERR_INVALID_ARG, "done_p");
    CHECK_STATUS(D->stream_create("x", NULL), ACX_ERR_INVALID_ARG, "stream_p");
    CHECK_STATUS(D->event_create(NULL), ACX_ERR_INVALID_ARG, "event_p");
    CHECK(h[0] == -1.0f); /* the refused copies queued nothing, filled nothing */
    CHECK_OK(D->sync(s));
    CHECK(h[0] == -1.0f);
    rc = 0;
error:
    D->stream_destroy(s);
    D->event_destroy(e1);
    D->event_destroy(e2);
    D->free(d);
    return rc;
}

static int test_cuda_absent(void) {
    char why[256] = "";
    const acx_devops_t *c = acx_devops_cuda(why, sizeof why);
    if (c != NULL) return strcmp(c->name, "cuda") != 0; /* a GPU machine: the table exists */
    CHECK(why[0] != '\0');
    return 0;
error:
    return 1;
}

int main(void) {
    acx_test_watchdog(120);
    int failed = 0;
    struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"emulated device: memory closed to host code, copies", test_memory},
        {"emulated device: allocations in the device counters", test_accounting},
        {"emulated device: host_alloc, host memory, host counters", test_host_alloc},
        {"emulated device: AdamW, SGD bitwise the CPU kernels", test_optimizers},
        {"emulated device: norms, inf check, scale, 16-bit casts", test_kernels},
        {"emulated device: clamp (clip by value): bounds, inf, NaN, -0", test_clamp},
        {"emulated device: copy stream: deferral, NaN fill, event order, waits", test_copy_stream},
        {"device cache: reuse per stream, zero/NaN fill, fit, counters", test_cache},
        {"cuda device table: absent with a reason, or present", test_cuda_absent},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TESTING(cases[i].name);
        if (cases[i].fn() == 0) {
            PASSED();
        } else {
            FAILED();
            failed = 1;
        }
    }
    return failed;
}

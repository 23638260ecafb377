/*
 * cuda/device_ops_emul.c — the emulated device of cuda/device_ops.h: a test
 * double that lets CI run every device-resident code path without a GPU.
 *
 * Memory. Each allocation is an anonymous mapping of its own, PROT_NONE at
 * rest. An operation opens the allocations it touches (mprotect read/write
 * on the whole mapping), does its work with the CPU reference, and closes
 * them again (PROT_NONE). Host code that reads or writes a device pointer
 * outside an op therefore takes SIGSEGV at the faulting line — the place
 * where a GPU build would read an illegal address — instead of silently
 * working on host memory. A pointer that is not inside an allocation (a
 * host pointer where device memory is expected) is an error of the op.
 * Opens nest (an op whose arguments share a mapping opens it once).
 *
 * Work. Each kernel is its CPU reference, element for element:
 * runtime/optim_kernels.c's acx_kernel_adam_ieee/acx_kernel_sgd_ieee (what
 * cuda/kernels.cu reproduces; this is the one include of a runtime/ header
 * below runtime/: the optimizer arithmetic is a leaf of pure functions and
 * the reference itself), collectives/half.h's casts, runtime/scaler.c's
 * check and runtime/clip.c's loops (norms, clamp) (same order: the norms are bitwise the
 * host's, where the CUDA kernels' tree differs by ~1e-12 relative).
 *
 * Streams are ignored: every op is complete when it returns. Not
 * thread-safe beyond a mutex around the allocation list (the library
 * drives device state from the main thread only).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collectives/half.h"
#include "cuda/device_ops.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/optim_kernels.h"

/* ---- allocations ---- */

typedef struct region {
    char *base;
    size_t len;   /* mapped bytes (whole pages) */
    size_t bytes; /* requested */
    int open;     /* nesting count of open ops */
} region_t;

static region_t *regions;
static int num_regions, cap_regions;
static size_t alloc_calls, live_bytes; /* acx_devops_emulated_counters */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Index of the allocation holding [p, p + bytes), or -1. Caller holds lock. */
static int find(const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < num_regions; i++) {
        /* the requested size, not the page-rounded mapping: a range past
         * the end of an allocation is an error as on a GPU */
        uintptr_t lo = (uintptr_t)regions[i].base, hi = lo + regions[i].bytes;
        if (a >= lo && a < lo + regions[i].len) return a <= hi && bytes <= hi - a ? i : -1;
    }
    return -1;
}

int acx_devops_emulated_owns(const void *p, size_t bytes) {
    if (p == NULL) return 0;
    pthread_mutex_lock(&lock);
    int i = find(p, bytes);
    pthread_mutex_unlock(&lock);
    return i >= 0;
}

/* The ranges an op works on: opened together, closed together. */
#define MAX_ARGS 4
typedef struct op {
    const char *what;
    int idx[MAX_ARGS];
    int n;
} op_t;

/* Open [p, p + bytes) for op (p NULL with 0 bytes: nothing). */
static acx_status_t op_open(op_t *op, const void *p, size_t bytes) {
    if (p == NULL && bytes == 0) return ACX_OK;
    if (p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "emulated device, %s: a NULL pointer for %zu bytes",
                         op->what, bytes);
    pthread_mutex_lock(&lock);
    int i = find(p, bytes);
    if (i < 0) {
        pthread_mutex_unlock(&lock);
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "emulated device, %s: %p (+%zu bytes) is not device memory of this device "
                         "(a host pointer where a device pointer is expected: on a GPU this is an "
                         "illegal address)",
                         op->what, p, bytes);
    }
    if (regions[i].open++ == 0 &&
        mprotect(regions[i].base, regions[i].len, PROT_READ | PROT_WRITE) != 0) {
        regions[i].open--;
        pthread_mutex_unlock(&lock);
        return ACX_ERROR(ACX_ERR_SYSTEM, "emulated device, %s: mprotect(read/write) failed",
                         op->what);
    }
    pthread_mutex_unlock(&lock);
    op->idx[op->n++] = i;
    return ACX_OK;
}

static void op_close(op_t *op) {
    pthread_mutex_lock(&lock);
    for (int k = 0; k < op->n; k++) {
        region_t *r = &regions[op->idx[k]];
        if (--r->open == 0) (void)mprotect(r->base, r->len, PROT_NONE);
    }
    pthread_mutex_unlock(&lock);
    op->n = 0;
}

/* Open up to four ranges at once (unused: NULL, 0); on failure none stays open. */
static acx_status_t op_begin(op_t *op, const char *what, const void *p0, size_t b0, const void *p1,
                             size_t b1, const void *p2, size_t b2, const void *p3, size_t b3) {
    const void *p[MAX_ARGS] = {p0, p1, p2, p3};
    size_t b[MAX_ARGS] = {b0, b1, b2, b3};
    op->what = what;
    op->n = 0;
    for (int k = 0; k < MAX_ARGS; k++) {
        acx_status_t status = op_open(op, p[k], b[k]);
        if (status != ACX_OK) {
            op_close(op);
            return status;
        }
    }
    return ACX_OK;
}

static acx_status_t emul_alloc(size_t bytes, const char *what, void **p_p) {
    if (p_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "emulated device alloc: p_p is NULL");
    if (bytes == 0) {
        *p_p = NULL;
        return ACX_OK;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (bytes + page - 1) / page * page;
    pthread_mutex_lock(&lock);
    if (num_regions == cap_regions) {
        int nc = cap_regions ? 2 * cap_regions : 16;
        region_t *nr = realloc(regions, (size_t)nc * sizeof *nr);
        if (nr == NULL) {
            pthread_mutex_unlock(&lock);
            return ACX_ERROR(ACX_ERR_NO_MEMORY, "emulated device: cannot grow the allocation list");
        }
        regions = nr;
        cap_regions = nc;
    }
    /* zero-filled by the kernel; no access until an op opens it */
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&lock);
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "emulated device: cannot map %zu bytes for %s", bytes,
                         what != NULL ? what : "a device buffer");
    }
    regions[num_regions++] = (region_t){.base = p, .len = len, .bytes = bytes};
    alloc_calls++;
    live_bytes += bytes;
    pthread_mutex_unlock(&lock);
    *p_p = p;
    return ACX_OK;
}

void acx_devops_emulated_counters(size_t *alloc_calls_p, size_t *live_bytes_p) {
    pthread_mutex_lock(&lock);
    if (alloc_calls_p != NULL) *alloc_calls_p = alloc_calls;
    if (live_bytes_p != NULL) *live_bytes_p = live_bytes;
    pthread_mutex_unlock(&lock);
}

static void emul_free(void *p) {
    if (p == NULL) return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < num_regions; i++) {
        if (regions[i].base != p) continue;
        munmap(regions[i].base, regions[i].len);
        live_bytes -= regions[i].bytes;
        regions[i] = regions[--num_regions];
        pthread_mutex_unlock(&lock);
        return;
    }
    pthread_mutex_unlock(&lock);
    ACX_WARN(ACX_SUBSYS_SHARD, "emulated device: free(%p): not an allocation of this device", p);
}

/* Host memory for the offloaded optimizer: plain aligned host memory (the
 * emulated copies need nothing special of it). */
static acx_status_t emul_host_alloc(size_t bytes, const char *what, void **p_p) {
    if (p_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "emulated host alloc: p_p is NULL");
    *p_p = NULL;
    if (bytes == 0) return ACX_OK;
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == NULL)
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "cannot allocate %zu bytes of host memory for %s",
                         bytes, what != NULL ? what : "a host buffer");
    memset(p, 0, bytes);
    *p_p = p;
    return ACX_OK;
}

static void emul_host_free(void *p) { free(p); }

/* ---- copies ---- */

static acx_status_t emul_memset(void *p, int byte, size_t bytes, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "memset", p, bytes, NULL, 0, NULL, 0, NULL, 0));
    if (bytes > 0) memset(p, byte, bytes);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_to_device(void *dev, const void *host, size_t bytes, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "copy host -> device", dev, bytes, NULL, 0, NULL, 0, NULL, 0));
    if (bytes > 0) memcpy(dev, host, bytes);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_to_host(void *host, const void *dev, size_t bytes, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "copy device -> host", dev, bytes, NULL, 0, NULL, 0, NULL, 0));
    if (bytes > 0) memcpy(host, dev, bytes);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_copy(void *dst, const void *src, size_t bytes, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "copy device -> device", dst, bytes, src, bytes, NULL, 0, NULL, 0));
    if (bytes > 0) memmove(dst, src, bytes);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_sync(void *stream) {
    (void)stream;
    return ACX_OK;
}

acx_status_t acx_devops_emulated_memcpy(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return ACX_OK;
    op_t op = {.what = "staging copy", .n = 0};
    acx_status_t status = ACX_OK;
    if (acx_devops_emulated_owns(dst, bytes)) status = op_open(&op, dst, bytes);
    if (status == ACX_OK && acx_devops_emulated_owns(src, bytes)) status = op_open(&op, src, bytes);
    if (status == ACX_OK) memmove(dst, src, bytes);
    op_close(&op);
    return status;
}

/* ---- kernels ---- */

#define F4(n) ((n) * sizeof(float))

static acx_status_t emul_adam(float *p, const float *g, float *m, float *v, size_t n,
                              const acx_adam_hparams_t *hp, double lr, int64_t t, int decoupled,
                              void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "adam step", p, F4(n), g, F4(n), m, F4(n), v, F4(n)));
    acx_kernel_adam_ieee(p, g, m, v, n, hp, lr, t, decoupled);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_sgd(float *p, const float *g, float *buf, size_t n,
                             const acx_sgd_hparams_t *hp, double lr, int first_step, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "sgd step", p, F4(n), g, F4(n), buf, buf ? F4(n) : 0, NULL, 0));
    acx_kernel_sgd_ieee(p, g, buf, n, hp, lr, first_step);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_scale(float *x, size_t n, float s, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "scale", x, F4(n), NULL, 0, NULL, 0, NULL, 0));
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
    op_close(&op);
    return ACX_OK;
}

/* runtime/clip.c's clip-by-value loop (NaN fails both comparisons: kept) */
static acx_status_t emul_clamp(float *x, size_t n, float v, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "clamp", x, F4(n), NULL, 0, NULL, 0, NULL, 0));
    const float lo = -v, hi = v;
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
    op_close(&op);
    return ACX_OK;
}

/* runtime/scaler.c's loop (x[i] or x[i] * inv not finite) */
static acx_status_t emul_nonfinite(const float *x, size_t n, float inv, int *flag, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "inf/NaN check", x, F4(n), flag, sizeof *flag, NULL, 0, NULL, 0));
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || !isfinite(x[i] * inv)) {
            *flag = 1;
            break;
        }
    op_close(&op);
    return ACX_OK;
}

/* runtime/clip.c's loops, same order */
static acx_status_t emul_sum_squares(const float *x, size_t n, double *result, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "sum of squares", x, F4(n), result, sizeof *result, NULL, 0, NULL, 0));
    double acc = 0.0;
    for (size_t i = 0; i < n; i++)
        acc += (double)x[i] * (double)x[i];
    *result = acc;
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_max_abs(const float *x, size_t n, double *result, void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(op_begin(&op, "max |x|", x, F4(n), result, sizeof *result, NULL, 0, NULL, 0));
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)x[i]);
        if (a > acc || isnan(a)) acc = a;
    }
    *result = acc;
    op_close(&op);
    return ACX_OK;
}

static acx_status_t half_dtype(acx_dtype_t dtype, const char *what) {
    if (!acx_dtype_is_half(dtype))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "emulated device, %s: dtype %s is not 16-bit", what,
                         acx_dtype_name(dtype));
    return ACX_OK;
}

static acx_status_t emul_half_from_f32(acx_dtype_t dtype, const float *src, uint16_t *dst, size_t n,
                                       void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(half_dtype(dtype, "float32 -> 16-bit cast"));
    ACX_CHECK(op_begin(&op, "float32 -> 16-bit cast", src, F4(n), dst, n * 2, NULL, 0, NULL, 0));
    acx_half_from_f32_n(dtype, src, dst, n);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_half_to_f32(acx_dtype_t dtype, const uint16_t *src, float *dst, size_t n,
                                     void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(half_dtype(dtype, "16-bit -> float32 cast"));
    ACX_CHECK(op_begin(&op, "16-bit -> float32 cast", src, n * 2, dst, F4(n), NULL, 0, NULL, 0));
    acx_half_to_f32_n(dtype, src, dst, n);
    op_close(&op);
    return ACX_OK;
}

/* sharding/sharded.c's loop: dst[i] += widen(src[i]) */
static acx_status_t emul_accumulate(acx_dtype_t dtype, const void *src, float *dst, size_t n,
                                    void *stream) {
    (void)stream;
    op_t op;
    int half = dtype == ACX_DTYPE_BFLOAT16 || dtype == ACX_DTYPE_FLOAT16;
    if (!half && dtype != ACX_DTYPE_FLOAT32)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "accumulate: dtype %d is not float32, float16 or "
                         "bfloat16",
                         (int)dtype);
    ACX_CHECK(op_begin(&op, "accumulate", src, half ? n * 2 : F4(n), dst, F4(n), NULL, 0, NULL, 0));
    if (dtype == ACX_DTYPE_BFLOAT16) {
        const uint16_t *h = src;
        for (size_t i = 0; i < n; i++)
            dst[i] += acx_bf16_to_f32(h[i]);
    } else if (dtype == ACX_DTYPE_FLOAT16) {
        const uint16_t *h = src;
        for (size_t i = 0; i < n; i++)
            dst[i] += acx_f16_to_f32(h[i]);
    } else {
        const float *f = src;
        for (size_t i = 0; i < n; i++)
            dst[i] += f[i];
    }
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_half_round_f32(acx_dtype_t dtype, const float *src, float *dst, size_t n,
                                        void *stream) {
    (void)stream;
    op_t op;
    ACX_CHECK(half_dtype(dtype, "float32 rounding to 16 bits"));
    ACX_CHECK(
        op_begin(&op, "float32 rounding to 16 bits", src, F4(n), dst, F4(n), NULL, 0, NULL, 0));
    acx_half_round_f32_n(dtype, src, dst, n);
    op_close(&op);
    return ACX_OK;
}

const acx_devops_t acx_devops_emulated = {
    .name = "emulated",
    .emulated = 1,
    .alloc = emul_alloc,
    .free = emul_free,
    .memset = emul_memset,
    .to_device = emul_to_device,
    .to_host = emul_to_host,
    .copy = emul_copy,
    .sync = emul_sync,
    .host_alloc = emul_host_alloc,
    .host_free = emul_host_free,
    .adam = emul_adam,
    .sgd = emul_sgd,
    .scale = emul_scale,
    .clamp = emul_clamp,
    .nonfinite = emul_nonfinite,
    .sum_squares = emul_sum_squares,
    .max_abs = emul_max_abs,
    .half_from_f32 = emul_half_from_f32,
    .half_to_f32 = emul_half_to_f32,
    .accumulate = emul_accumulate,
    .half_round_f32 = emul_half_round_f32,
};

/*
 * device/ops_emulated.c — the emulated device of device/ops.h: a test
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
 * base/optim_kernels.c's acx_kernel_adam_ieee/acx_kernel_sgd_ieee (what
 * device/cuda_kernels.cu reproduces: the optimizer arithmetic is a leaf of
 * pure functions in base/, and the reference itself), base/half.h's casts,
 * and the loops of runtime/scaler.c's check and runtime/clip.c (norms,
 * clamp), written again here since the device layer may not call up (same
 * order: the norms are bitwise the host's, where the CUDA kernels' tree
 * differs by ~1e-12 relative).
 *
 * Streams. Every op but one is complete when it returns, whatever its
 * stream. The exception is to_host_async on a stream from stream_create:
 * it fills the host destination with all-ones bytes (NaN) and queues the
 * copy, performed only when the program waits for it (event_sync or
 * event_query of a later event, sync or destroy of the stream, another
 * stream waiting for a later event, the next op on that stream). Every op
 * that writes device memory on a stream logs the range with a sequence
 * number; events capture (stream, sequence number, queue position, what
 * the stream has waited for); an asynchronous copy whose source was
 * written on another stream with nothing ordering the write before it
 * (no event waited for, no host synchronization since) is refused, and so
 * is a write to the source of a copy still queued on another stream: the
 * two hazards a missing cudaStreamWaitEvent leaves on a GPU. The rules
 * are listed in device/ops.h. Not thread-safe beyond two mutexes that
 * keep the allocation list and the stream/event lists consistent (the
 * library drives device state from the main thread only).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/half.h"
#include "device/ops.h"
#include "base/error.h"
#include "base/log.h"
#include "base/optim_kernels.h"

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
    const void *p[MAX_ARGS]; /* the ranges as given to op_begin (for op_writes) */
    size_t b[MAX_ARGS];
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
        op->p[k] = p[k];
        op->b[k] = b[k];
    }
    for (int k = 0; k < MAX_ARGS; k++) {
        acx_status_t status = op_open(op, p[k], b[k]);
        if (status != ACX_OK) {
            op_close(op);
            return status;
        }
    }
    return ACX_OK;
}

/* ---- streams, events and the write log (rules: device/ops.h) ---- */

#define WRITE_LOG 1024 /* device writes remembered for the missing-wait check */
#define MAX_SEEN  16   /* streams whose work a stream can know to be ordered before it */
#define W(k)      (1u << (k))

/* "stream's work up to sequence number seq" */
typedef struct seen {
    const void *stream;
    uint64_t seq;
} seen_t;

typedef struct pending {
    void *host;
    const void *dev;
    size_t bytes;
} pending_t;

/* A stream's state: one per stream from stream_create (id: the state
 * itself; its asynchronous copies queue here), and one per other stream
 * handle the ops were given (the compute stream, NULL: registered on first
 * use; their work is always complete). */
typedef struct estream {
    const void *id;
    int created;
    char what[64];
    pending_t *q; /* queued copies q[head .. tail) */
    size_t head, tail, cap;
    uint64_t enqueued, performed; /* copies ever queued on it / performed */
    uint64_t synced;              /* the host waited for its work up to this seq */
    seen_t seen[MAX_SEEN];        /* other streams' work ordered before its next op */
    int nseen;
} estream_t;

typedef struct eevent {
    int recorded;
    const void *stream;    /* recorded on */
    uint64_t seq;          /* the write log's sequence number at the record */
    uint64_t ticket;       /* the stream's `enqueued` at the record */
    seen_t seen[MAX_SEEN]; /* what the stream had waited for at the record */
    int nseen;
} eevent_t;

typedef struct wlog {
    uintptr_t lo, hi; /* [lo, hi) device bytes written */
    const void *stream;
    uint64_t seq;
} wlog_t;

static estream_t **streams;
static int num_streams, cap_streams;
static eevent_t **events;
static int num_events, cap_events;
static wlog_t wlog[WRITE_LOG];
static uint64_t seq_now; /* device writes logged so far (the last one's number) */
static pthread_mutex_t slock = PTHREAD_MUTEX_INITIALIZER; /* taken before `lock`, never after */

static int grow(void **arr, int *cap, int num, size_t esize) {
    if (num < *cap) return 1;
    int nc = *cap ? 2 * *cap : 8;
    void *n = realloc(*arr, (size_t)nc * esize);
    if (n == NULL) return 0;
    *arr = n;
    *cap = nc;
    return 1;
}

/* The state of stream handle id; an unknown handle that is not from
 * stream_create is registered (register_other) or not (NULL). Caller holds slock. */
static estream_t *stream_find(const void *id, int register_other) {
    for (int i = 0; i < num_streams; i++)
        if (streams[i]->id == id) return streams[i];
    if (!register_other) return NULL;
    estream_t *s = calloc(1, sizeof *s);
    if (s == NULL || !grow((void **)&streams, &cap_streams, num_streams, sizeof *streams)) {
        free(s);
        return NULL;
    }
    s->id = id;
    if (id == NULL)
        snprintf(s->what, sizeof s->what, "NULL (the default stream)");
    else
        snprintf(s->what, sizeof s->what, "%p", id);
    streams[num_streams++] = s;
    return s;
}

static eevent_t *event_find(const void *ev) {
    for (int i = 0; i < num_events; i++)
        if (events[i] == ev) return events[i];
    return NULL;
}

static uint64_t seen_get(const seen_t *v, int n, const void *stream) {
    for (int i = 0; i < n; i++)
        if (v[i].stream == stream) return v[i].seq;
    return 0;
}

/* Merge (stream, seq) into v; when full, the oldest knowledge is dropped
 * (a later check may then refuse a correct program: 16 streams is far
 * beyond what acx uses). */
static void seen_put(seen_t *v, int *n, const void *stream, uint64_t seq) {
    int low = 0;
    for (int i = 0; i < *n; i++) {
        if (v[i].stream == stream) {
            if (v[i].seq < seq) v[i].seq = seq;
            return;
        }
        if (v[i].seq < v[low].seq) low = i;
    }
    if (*n < MAX_SEEN) low = (*n)++;
    v[low] = (seen_t){stream, seq};
}

/* Perform s's queued copies until `upto` of them ever queued are done.
 * Caller holds slock. A failing copy is dropped from the queue. */
static acx_status_t perform(estream_t *s, uint64_t upto) {
    acx_status_t status = ACX_OK;
    while (s->performed < upto && s->head < s->tail) {
        pending_t c = s->q[s->head++];
        s->performed++;
        op_t op;
        acx_status_t st = op_begin(&op, "asynchronous copy device -> host (performed)", c.dev,
                                   c.bytes, NULL, 0, NULL, 0, NULL, 0);
        if (st == ACX_OK) {
            memcpy(c.host, c.dev, c.bytes);
            op_close(&op);
        }
        if (status == ACX_OK) status = st;
    }
    if (s->head == s->tail) s->head = s->tail = 0;
    return status;
}

/* The host waits for everything enqueued on stream (sync, to_host,
 * to_device): its queued copies are performed and its writes so far are
 * complete for every other stream's later work. */
static acx_status_t stream_host_wait(void *stream) {
    pthread_mutex_lock(&slock);
    estream_t *s = stream_find(stream, 1);
    acx_status_t status = s != NULL ? perform(s, s->enqueued) : ACX_OK;
    if (s != NULL) s->synced = seq_now;
    pthread_mutex_unlock(&slock);
    if (s == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "emulated device: cannot track a stream");
    return status;
}

/* op writes its arguments in mask, on stream: stream order first (the
 * stream's own queued copies come before it), then the check that no copy
 * queued on another stream still reads what it overwrites, then the log.
 * On failure op is closed. */
static acx_status_t op_writes(op_t *op, void *stream, unsigned mask) {
    acx_status_t status = ACX_OK;
    pthread_mutex_lock(&slock);
    estream_t *s = stream_find(stream, 1);
    if (s == NULL)
        status =
            ACX_ERROR(ACX_ERR_NO_MEMORY, "emulated device, %s: cannot track a stream", op->what);
    else if (s->created)
        status = perform(s, s->enqueued);
    for (int k = 0; k < MAX_ARGS && status == ACX_OK; k++) {
        if (!(mask & W(k)) || op->p[k] == NULL || op->b[k] == 0) continue;
        uintptr_t lo = (uintptr_t)op->p[k], hi = lo + op->b[k];
        for (int i = 0; i < num_streams && status == ACX_OK; i++) {
            estream_t *o = streams[i];
            for (size_t j = o->head; o != s && j < o->tail; j++) {
                uintptr_t clo = (uintptr_t)o->q[j].dev, chi = clo + o->q[j].bytes;
                if (lo < chi && clo < hi) {
                    status = ACX_ERROR(ACX_ERR_STATE,
                                       "emulated device, %s on stream %s: overwrites device bytes "
                                       "that an asynchronous copy still queued on stream %s "
                                       "reads (a missing stream wait: on a GPU the copy may "
                                       "read the new values)",
                                       op->what, s->what, o->what);
                    break;
                }
            }
        }
        if (status != ACX_OK) break;
        seq_now++; /* write number seq_now lives at wlog[(seq_now - 1) % WRITE_LOG] */
        wlog[(seq_now - 1) % WRITE_LOG] = (wlog_t){lo, hi, stream, seq_now};
    }
    pthread_mutex_unlock(&slock);
    if (status != ACX_OK) op_close(op);
    return status;
}

/* Drop the logged writes inside [lo, hi) (memory freed). */
static void forget_writes(uintptr_t lo, uintptr_t hi) {
    pthread_mutex_lock(&slock);
    for (size_t i = 0; i < WRITE_LOG; i++)
        if (wlog[i].lo >= lo && wlog[i].lo < hi) wlog[i].lo = wlog[i].hi = 0;
    pthread_mutex_unlock(&slock);
}

/* 1 when write w is ordered before the next op on stream s. */
static int ordered_before(const estream_t *s, const wlog_t *w) {
    if (w->stream == s->id) return 1; /* stream order */
    if (w->seq <= seen_get(s->seen, s->nseen, w->stream)) return 1;
    estream_t *ws = stream_find(w->stream, 0);
    return ws != NULL && w->seq <= ws->synced;
}

static acx_status_t emul_stream_create(const char *what, void **stream_p) {
    if (stream_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "emulated device stream create: stream_p is NULL");
    estream_t *s = calloc(1, sizeof *s);
    pthread_mutex_lock(&slock);
    if (s == NULL || !grow((void **)&streams, &cap_streams, num_streams, sizeof *streams)) {
        pthread_mutex_unlock(&slock);
        free(s);
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "emulated device: cannot create a stream for %s",
                         what != NULL ? what : "copies");
    }
    s->id = s;
    s->created = 1;
    snprintf(s->what, sizeof s->what, "%s", what != NULL ? what : "(created)");
    streams[num_streams++] = s;
    pthread_mutex_unlock(&slock);
    *stream_p = s;
    return ACX_OK;
}

static void emul_stream_destroy(void *stream) {
    if (stream == NULL) return;
    pthread_mutex_lock(&slock);
    for (int i = 0; i < num_streams; i++) {
        estream_t *s = streams[i];
        if (s->id != stream || !s->created) continue;
        if (perform(s, s->enqueued) != ACX_OK)
            ACX_WARN(ACX_SUBSYS_SHARD, "emulated device: destroying stream %s: %s", s->what,
                     acx_last_error());
        streams[i] = streams[--num_streams];
        pthread_mutex_unlock(&slock);
        free(s->q);
        free(s);
        return;
    }
    pthread_mutex_unlock(&slock);
    ACX_WARN(ACX_SUBSYS_SHARD, "emulated device: stream_destroy(%p): not a stream of this device",
             stream);
}

static acx_status_t emul_event_create(void **event_p) {
    if (event_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "emulated device event create: event_p is NULL");
    eevent_t *e = calloc(1, sizeof *e);
    pthread_mutex_lock(&slock);
    if (e == NULL || !grow((void **)&events, &cap_events, num_events, sizeof *events)) {
        pthread_mutex_unlock(&slock);
        free(e);
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "emulated device: cannot create an event");
    }
    events[num_events++] = e;
    pthread_mutex_unlock(&slock);
    *event_p = e;
    return ACX_OK;
}

static void emul_event_destroy(void *event) {
    if (event == NULL) return;
    pthread_mutex_lock(&slock);
    for (int i = 0; i < num_events; i++) {
        if (events[i] != event) continue;
        events[i] = events[--num_events];
        pthread_mutex_unlock(&slock);
        free(event);
        return;
    }
    pthread_mutex_unlock(&slock);
    ACX_WARN(ACX_SUBSYS_SHARD, "emulated device: event_destroy(%p): not an event of this device",
             event);
}

/* The event's state, or an error naming `what`. Caller holds slock. */
static acx_status_t event_get(void *event, const char *what, eevent_t **e_p) {
    *e_p = event != NULL ? event_find(event) : NULL;
    if (*e_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "emulated device, %s: %p is not an event of this "
                         "device (NULL, destroyed or never created)",
                         what, event);
    return ACX_OK;
}

static acx_status_t emul_event_record(void *event, void *stream) {
    eevent_t *e;
    pthread_mutex_lock(&slock);
    acx_status_t status = event_get(event, "event record", &e);
    estream_t *s = status == ACX_OK ? stream_find(stream, 1) : NULL;
    if (status == ACX_OK && s == NULL)
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "emulated device: cannot track a stream");
    if (status == ACX_OK) {
        e->recorded = 1;
        e->stream = s->id;
        e->seq = seq_now;
        e->ticket = s->enqueued;
        memcpy(e->seen, s->seen, sizeof e->seen);
        e->nseen = s->nseen;
    }
    pthread_mutex_unlock(&slock);
    return status;
}

/* Perform the copies e captured (the host or another stream relies on them
 * from now on). Nothing when e was never recorded or its stream is gone
 * (stream_destroy performed them). Caller holds slock. */
static acx_status_t event_complete(const eevent_t *e) {
    if (!e->recorded) return ACX_OK;
    estream_t *es = stream_find(e->stream, 0);
    return es != NULL ? perform(es, e->ticket) : ACX_OK;
}

static acx_status_t emul_stream_wait_event(void *stream, void *event) {
    eevent_t *e;
    pthread_mutex_lock(&slock);
    acx_status_t status = event_get(event, "stream wait for an event", &e);
    estream_t *s = status == ACX_OK ? stream_find(stream, 1) : NULL;
    if (status == ACX_OK && s == NULL)
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "emulated device: cannot track a stream");
    if (status == ACX_OK && e->recorded && e->stream != s->id) {
        status = event_complete(e);
        seen_put(s->seen, &s->nseen, e->stream, e->seq);
        for (int i = 0; i < e->nseen; i++)
            seen_put(s->seen, &s->nseen, e->seen[i].stream, e->seen[i].seq);
    }
    pthread_mutex_unlock(&slock);
    return status;
}

static acx_status_t emul_to_host_async(void *host, const void *dev, size_t bytes, void *stream) {
    static const char what[] = "asynchronous copy device -> host";
    acx_status_t status = ACX_OK;
    op_t op;
    pthread_mutex_lock(&slock);
    estream_t *s = stream != NULL ? stream_find(stream, 0) : NULL;
    if (s == NULL || !s->created) {
        status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                           "emulated device, %s: stream %p is not a stream from stream_create "
                           "(the emulation defers copies on its own streams only)",
                           what, stream);
        goto out;
    }
    if (bytes == 0) goto out;
    if (host == NULL) {
        status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                           "emulated device, %s: a NULL host destination "
                           "for %zu bytes",
                           what, bytes);
        goto out;
    }
    if (acx_devops_emulated_owns(host, 1)) {
        status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                           "emulated device, %s: the destination %p is "
                           "device memory, not host memory",
                           what, host);
        goto out;
    }
    /* the source must be device memory: checked now, read when performed */
    status = op_begin(&op, what, dev, bytes, NULL, 0, NULL, 0, NULL, 0);
    if (status != ACX_OK) goto out;
    op_close(&op);
    uintptr_t lo = (uintptr_t)dev, hi = lo + bytes;
    uint64_t first = seq_now > WRITE_LOG ? seq_now - WRITE_LOG : 0;
    for (uint64_t q = first; q < seq_now; q++) {
        const wlog_t *w = &wlog[q % WRITE_LOG];
        if (w->lo < hi && lo < w->hi && !ordered_before(s, w)) {
            estream_t *ws = stream_find(w->stream, 0);
            status = ACX_ERROR(ACX_ERR_STATE,
                               "emulated device, %s on stream %s: its source was written on "
                               "stream %s (write #%llu) with nothing ordering that write before "
                               "this copy (a missing stream wait: record an event on stream %s "
                               "after the write and make stream %s wait for it)",
                               what, s->what, ws != NULL ? ws->what : "?",
                               (unsigned long long)w->seq, ws != NULL ? ws->what : "?", s->what);
            goto out;
        }
    }
    if (s->tail == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 16;
        pending_t *nq = realloc(s->q, nc * sizeof *nq);
        if (nq == NULL) {
            status = ACX_ERROR(ACX_ERR_NO_MEMORY, "emulated device, %s: cannot queue it", what);
            goto out;
        }
        s->q = nq;
        s->cap = nc;
    }
    memset(host, 0xff, bytes); /* NaN until performed: a read before the wait is loud */
    s->q[s->tail++] = (pending_t){host, dev, bytes};
    s->enqueued++;
out:
    pthread_mutex_unlock(&slock);
    return status;
}

static acx_status_t emul_event_sync(void *event) {
    eevent_t *e;
    pthread_mutex_lock(&slock);
    acx_status_t status = event_get(event, "event synchronize", &e);
    if (status == ACX_OK) status = event_complete(e);
    if (status == ACX_OK && e->recorded) {
        estream_t *es = stream_find(e->stream, 0);
        if (es != NULL && es->synced < e->seq) es->synced = e->seq;
    }
    pthread_mutex_unlock(&slock);
    return status;
}

static acx_status_t emul_event_query(void *event, int *done_p) {
    if (done_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "emulated device, event query: done_p is NULL");
    ACX_CHECK(emul_event_sync(event));
    *done_p = 1;
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
        uintptr_t lo = (uintptr_t)regions[i].base, hi = lo + regions[i].len;
        munmap(regions[i].base, regions[i].len);
        live_bytes -= regions[i].bytes;
        regions[i] = regions[--num_regions];
        pthread_mutex_unlock(&lock);
        forget_writes(lo, hi); /* a later allocation at the same address starts clean */
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
    op_t op;
    ACX_CHECK(op_begin(&op, "memset", p, bytes, NULL, 0, NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(0)));
    if (bytes > 0) memset(p, byte, bytes);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_to_device(void *dev, const void *host, size_t bytes, void *stream) {
    op_t op;
    ACX_CHECK(stream_host_wait(stream));
    ACX_CHECK(op_begin(&op, "copy host -> device", dev, bytes, NULL, 0, NULL, 0, NULL, 0));
    if (bytes > 0) memcpy(dev, host, bytes);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_to_host(void *host, const void *dev, size_t bytes, void *stream) {
    op_t op;
    ACX_CHECK(stream_host_wait(stream));
    ACX_CHECK(op_begin(&op, "copy device -> host", dev, bytes, NULL, 0, NULL, 0, NULL, 0));
    if (bytes > 0) memcpy(host, dev, bytes);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_copy(void *dst, const void *src, size_t bytes, void *stream) {
    op_t op;
    ACX_CHECK(op_begin(&op, "copy device -> device", dst, bytes, src, bytes, NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(0)));
    if (bytes > 0) memmove(dst, src, bytes);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_sync(void *stream) { return stream_host_wait(stream); }

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
    op_t op;
    ACX_CHECK(op_begin(&op, "adam step", p, F4(n), g, F4(n), m, F4(n), v, F4(n)));
    ACX_CHECK(op_writes(&op, stream, W(0) | W(2) | W(3)));
    acx_kernel_adam_ieee(p, g, m, v, n, hp, lr, t, decoupled);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_sgd(float *p, const float *g, float *buf, size_t n,
                             const acx_sgd_hparams_t *hp, double lr, int first_step, void *stream) {
    op_t op;
    ACX_CHECK(op_begin(&op, "sgd step", p, F4(n), g, F4(n), buf, buf ? F4(n) : 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(0) | W(2)));
    acx_kernel_sgd_ieee(p, g, buf, n, hp, lr, first_step);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_scale(float *x, size_t n, float s, void *stream) {
    op_t op;
    ACX_CHECK(op_begin(&op, "scale", x, F4(n), NULL, 0, NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(0)));
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
    op_close(&op);
    return ACX_OK;
}

/* runtime/clip.c's clip-by-value loop (NaN fails both comparisons: kept) */
static acx_status_t emul_clamp(float *x, size_t n, float v, void *stream) {
    op_t op;
    ACX_CHECK(op_begin(&op, "clamp", x, F4(n), NULL, 0, NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(0)));
    const float lo = -v, hi = v;
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
    op_close(&op);
    return ACX_OK;
}

/* runtime/scaler.c's loop (x[i] or x[i] * inv not finite) */
static acx_status_t emul_nonfinite(const float *x, size_t n, float inv, int *flag, void *stream) {
    op_t op;
    ACX_CHECK(op_begin(&op, "inf/NaN check", x, F4(n), flag, sizeof *flag, NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(1)));
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
    op_t op;
    ACX_CHECK(op_begin(&op, "sum of squares", x, F4(n), result, sizeof *result, NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(1)));
    double acc = 0.0;
    for (size_t i = 0; i < n; i++)
        acc += (double)x[i] * (double)x[i];
    *result = acc;
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_max_abs(const float *x, size_t n, double *result, void *stream) {
    op_t op;
    ACX_CHECK(op_begin(&op, "max |x|", x, F4(n), result, sizeof *result, NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(1)));
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
    op_t op;
    ACX_CHECK(half_dtype(dtype, "float32 -> 16-bit cast"));
    ACX_CHECK(op_begin(&op, "float32 -> 16-bit cast", src, F4(n), dst, n * 2, NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(1)));
    acx_half_from_f32_n(dtype, src, dst, n);
    op_close(&op);
    return ACX_OK;
}

static acx_status_t emul_half_to_f32(acx_dtype_t dtype, const uint16_t *src, float *dst, size_t n,
                                     void *stream) {
    op_t op;
    ACX_CHECK(half_dtype(dtype, "16-bit -> float32 cast"));
    ACX_CHECK(op_begin(&op, "16-bit -> float32 cast", src, n * 2, dst, F4(n), NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(1)));
    acx_half_to_f32_n(dtype, src, dst, n);
    op_close(&op);
    return ACX_OK;
}

/* sharding/sharded.c's loop: dst[i] += widen(src[i]) */
static acx_status_t emul_accumulate(acx_dtype_t dtype, const void *src, float *dst, size_t n,
                                    void *stream) {
    op_t op;
    int half = dtype == ACX_DTYPE_BFLOAT16 || dtype == ACX_DTYPE_FLOAT16;
    if (!half && dtype != ACX_DTYPE_FLOAT32)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "accumulate: dtype %d is not float32, float16 or "
                         "bfloat16",
                         (int)dtype);
    ACX_CHECK(op_begin(&op, "accumulate", src, half ? n * 2 : F4(n), dst, F4(n), NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(1)));
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
    op_t op;
    ACX_CHECK(half_dtype(dtype, "float32 rounding to 16 bits"));
    ACX_CHECK(
        op_begin(&op, "float32 rounding to 16 bits", src, F4(n), dst, F4(n), NULL, 0, NULL, 0));
    ACX_CHECK(op_writes(&op, stream, W(1)));
    acx_half_round_f32_n(dtype, src, dst, n);
    op_close(&op);
    return ACX_OK;
}

/* ---- staging ---- */

static acx_status_t emul_owns(const void *p, size_t bytes, int *owns_p) {
    *owns_p = acx_devops_emulated_owns(p, bytes);
    return ACX_OK;
}

/* A malloc'd block: the emulated device needs no pinned memory. */
static acx_status_t emul_stage_acquire(size_t bytes, void **p_p) {
    *p_p = NULL;
    if (bytes == 0) return ACX_OK;
    *p_p = acx_malloc(bytes, "emulated-device staging block");
    return *p_p != NULL ? ACX_OK : ACX_ERR_NO_MEMORY;
}

static void emul_stage_release(void *p) { free(p); }

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
    .stream_create = emul_stream_create,
    .stream_destroy = emul_stream_destroy,
    .event_create = emul_event_create,
    .event_destroy = emul_event_destroy,
    .event_record = emul_event_record,
    .stream_wait_event = emul_stream_wait_event,
    .to_host_async = emul_to_host_async,
    .event_sync = emul_event_sync,
    .event_query = emul_event_query,
    .owns = emul_owns,
    .stage_acquire = emul_stage_acquire,
    .stage_release = emul_stage_release,
    .stage_copy = acx_devops_emulated_memcpy,
};

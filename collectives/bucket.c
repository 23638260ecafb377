/*
 * collectives/bucket.c — gradient fusion buckets over one flat gradient
 * buffer of any dtype: the plan (which contiguous range each bucket covers),
 * per-step bookkeeping of which units reported, and starting/finishing the
 * buckets' all-reduces.
 *
 * The layout of the flat buffer (segments in ready order) is the sharding
 * layer's; what a gradient means and when a step is a sync step is the
 * runtime's. This file only turns "unit u is ready" into in-place SUM
 * all-reduces of whole buckets, overlapped with the caller's computation.
 *
 * Invariant that keeps ranks from deadlocking: buckets are started in the
 * same order on every rank. Every rank plans the same buckets from the same
 * segment list and reports the same units in the same order, so the same
 * bucket completes at the same call on every rank; within one call the
 * completed buckets are started in increasing index order. MPI requires
 * collectives on a communicator to be issued in the same order everywhere
 * (blocking and non-blocking alike), and this is what satisfies it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/bucket.h"
#include "base/half.h"
#include "base/error.h"
#include "base/log.h"
#include "base/settings.h"

/* Most non-blocking bucket all-reduces in flight at once. Open MPI's
 * non-blocking all-reduce (libnbc) allocates a temporary buffer the size of
 * the message for each request and touches it on the ranks that combine:
 * with every bucket of a 384 MiB model in flight, ranks 0 and 2 of 4 peaked
 * 382 MiB above acx's own accounting (benchmarks/shard_mem.c, NO_SHARD).
 * Two keep one bucket reducing while the next fills (double buffering, as
 * DeepSpeed's reduce buckets and sharded.c's reduce-scatters do) and bound
 * that transient memory to two buckets. Starting a third waits for the
 * oldest, which MPI had to finish before the optimizer step anyway. */
#define MAX_IN_FLIGHT 2

/* MAX_IN_FLIGHT, or ACX_TEST_BUCKETS_MAX_IN_FLIGHT (1 to 2^20; base/settings.c) for
 * benchmarks that compare limits in one build (benchmarks/run-shard-mem.sh). */
static int max_in_flight(void) {
    int64_t v;
    return acx_env_int(ACX_ENV_TEST_BUCKETS_MAX_IN_FLIGHT, &v) == 1 ? (int)v : MAX_IN_FLIGHT;
}

enum bucket_state {
    BUCKET_IDLE = 0,  /* waiting for some of its segments this step */
    BUCKET_IN_FLIGHT, /* non-blocking all-reduce started; req is live */
    BUCKET_DONE       /* reduced (blocking, or request completed and freed) */
};

typedef struct bucket {
    size_t offset, count;    /* range of the flat buffer, elements */
    int first_seg, num_segs; /* its segments: segs[first_seg .. first_seg + num_segs) */
    int pending;             /* segments not yet reported this step */
    enum bucket_state state;
    acx_coll_req_t *req; /* while BUCKET_IN_FLIGHT */
} bucket_t;

struct acx_buckets {
    acx_comm_t *comm;
    void *flat; /* [total] gradients of dtype, not owned */
    acx_dtype_t dtype;
    size_t esize; /* bytes per element */
    size_t total;
    int num_units, num_segs, num_buckets;
    acx_bucket_segment_t *segs; /* [num_segs] copy, ready order */
    bucket_t *buckets;          /* [num_buckets] in ready (= start) order */
    int *seg_bucket;            /* [num_segs] bucket of each segment */
    int *unit_first;            /* [num_units + 1] unit u's segments are */
    int *unit_segs;             /*   unit_segs[unit_first[u] .. unit_first[u + 1]) */
    unsigned char *reported;    /* [num_units] reported this step */
    int num_started;            /* buckets in flight or done this step */
    int num_in_flight;          /* buckets in state BUCKET_IN_FLIGHT */
    int max_in_flight;          /* the limit on num_in_flight (max_in_flight()) */
    /* Reduction in a 16-bit dtype of float32 gradients (mixed precision's
     * reduce_dtype): a bucket is rounded into wire[range] at its start,
     * reduced there, and widened back into flat[range] when complete. */
    acx_dtype_t wire_dtype;
    uint16_t *wire; /* [total], not owned; NULL = reduce flat in place */
    /* Device-resident gradients (acx_buckets_set_device), else NULL: flat
     * and wire are dev's memory, never touched by host code here. */
    const acx_devops_t *dev;
    void *const *stream_p;      /* the compute stream, read at each use */
    acx_bucket_done_fn done_fn; /* acx_buckets_on_done, or NULL */
    void *done_arg;
};

/* ---- plan ---- */

static acx_status_t check_segments(size_t total, int num_units, int num_segs,
                                   const acx_bucket_segment_t *segs) {
    for (int i = 0; i < num_segs; i++) {
        const acx_bucket_segment_t *s = &segs[i];
        if (s->unit < 0 || s->unit >= num_units)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "bucket segment %d: unit %d is not in 0..%d", i,
                             s->unit, num_units - 1);
        if (i > 0 && s->offset != segs[i - 1].offset + segs[i - 1].count)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "bucket segment %d starts at element %zu, expected %zu (segments "
                             "must be contiguous and increasing, in ready order)",
                             i, s->offset, segs[i - 1].offset + segs[i - 1].count);
        if (s->offset > total || s->count > total - s->offset)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "bucket segment %d [%zu, +%zu elements) runs past the flat "
                             "buffer of %zu elements",
                             i, s->offset, s->count, total);
    }
    return ACX_OK;
}

/* Greedy, in ready order: a bucket closes when the next segment would push it
 * past bucket_bytes; a segment larger than bucket_bytes therefore ends up
 * alone. Fills b->buckets (sized num_segs: at most one bucket per segment). */
static void plan_buckets(acx_buckets_t *b, size_t bucket_bytes) {
    int nb = 0;
    size_t bytes = 0;
    for (int i = 0; i < b->num_segs; i++) {
        size_t seg_bytes = b->segs[i].count * b->esize;
        bucket_t *cur = nb > 0 ? &b->buckets[nb - 1] : NULL;
        if (cur == NULL || bytes + seg_bytes > bucket_bytes) {
            cur = &b->buckets[nb++];
            cur->offset = b->segs[i].offset;
            cur->count = 0;
            cur->first_seg = i;
            cur->num_segs = 0;
            bytes = 0;
        }
        cur->count += b->segs[i].count;
        cur->num_segs++;
        bytes += seg_bytes;
        b->seg_bucket[i] = nb - 1;
    }
    b->num_buckets = nb;
}

/* Per-unit segment lists (CSR), so a report touches only its own segments:
 * unit u's segments are unit_segs[unit_first[u] .. unit_first[u + 1]), in
 * ready order. */
static void index_units(acx_buckets_t *b) {
    for (int i = 0; i < b->num_segs; i++)
        b->unit_first[b->segs[i].unit + 1]++;
    for (int u = 0; u < b->num_units; u++)
        b->unit_first[u + 1] += b->unit_first[u];
    /* Fill using unit_first[u] as unit u's cursor; afterwards each cursor sits
     * at the next unit's start, so shift the array back by one. */
    for (int i = 0; i < b->num_segs; i++)
        b->unit_segs[b->unit_first[b->segs[i].unit]++] = i;
    for (int u = b->num_units; u > 0; u--)
        b->unit_first[u] = b->unit_first[u - 1];
    b->unit_first[0] = 0;
}

static void log_plan(const acx_buckets_t *b, size_t bucket_bytes) {
    if (!acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_COLL)) return;
    char sizes[512];
    size_t len = 0;
    sizes[0] = '\0';
    for (int i = 0; i < b->num_buckets && len < sizeof sizes - 32; i++) {
        int n =
            snprintf(sizes + len, sizeof sizes - len, "%s%zu", i ? " " : "", b->buckets[i].count);
        if (n < 0) break;
        len += (size_t)n;
    }
    if (len >= sizeof sizes - 32) snprintf(sizes + len, sizeof sizes - len, " ...");
    acx_log_write(ACX_LOG_DEBUG, ACX_SUBSYS_COLL,
                  "bucket plan: %d buckets over %d segments of %zu elements (bucket size %zu "
                  "bytes); bucket sizes in elements, ready order: %s",
                  b->num_buckets, b->num_segs, b->total, bucket_bytes, sizes);
}

static void step_reset(acx_buckets_t *b) {
    for (int i = 0; i < b->num_buckets; i++) {
        b->buckets[i].pending = b->buckets[i].num_segs;
        b->buckets[i].state = BUCKET_IDLE;
        b->buckets[i].req = NULL;
    }
    if (b->num_units > 0) memset(b->reported, 0, (size_t)b->num_units);
    b->num_started = 0;
    b->num_in_flight = 0;
}

acx_status_t acx_buckets_create(acx_comm_t *comm, void *flat, acx_dtype_t dtype, size_t total,
                                int num_units, int num_segs, const acx_bucket_segment_t *segs,
                                size_t bucket_bytes, acx_buckets_t **buckets_p) {
    acx_status_t status = ACX_OK;
    if (comm == NULL || buckets_p == NULL || (total > 0 && flat == NULL) ||
        (num_segs > 0 && segs == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "buckets create: %s is NULL",
                         comm == NULL        ? "comm"
                         : buckets_p == NULL ? "buckets_p"
                         : flat == NULL      ? "flat"
                                             : "segs");
    if (num_units < 0 || num_segs < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "buckets create: num_units %d, num_segs %d",
                         num_units, num_segs);
    if (bucket_bytes == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "buckets create: bucket size is 0 bytes");
    if (acx_dtype_size(dtype) == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "buckets create: dtype %d is not an acx_dtype_t",
                         (int)dtype);
    ACX_CHECK(check_segments(total, num_units, num_segs, segs));

    acx_buckets_t *b = acx_calloc(1, sizeof *b, "gradient buckets");
    if (b == NULL) return ACX_ERR_NO_MEMORY;
    b->comm = comm;
    b->flat = flat;
    b->dtype = dtype;
    b->esize = acx_dtype_size(dtype);
    b->total = total;
    b->num_units = num_units;
    b->num_segs = num_segs;
    size_t ns = (size_t)num_segs, nu = (size_t)num_units;
    b->segs = acx_malloc(ns * sizeof *b->segs, "bucket segments");
    b->buckets = acx_calloc(ns, sizeof *b->buckets, "buckets");
    b->seg_bucket = acx_malloc(ns * sizeof *b->seg_bucket, "bucket segment index");
    b->unit_first = acx_calloc(nu + 1, sizeof *b->unit_first, "bucket unit index");
    b->unit_segs = acx_malloc(ns * sizeof *b->unit_segs, "bucket unit segments");
    b->reported = acx_calloc(nu, 1, "bucket unit reports");
    if (!b->segs || !b->buckets || !b->seg_bucket || !b->unit_first || !b->unit_segs ||
        !b->reported) {
        status = ACX_ERR_NO_MEMORY;
        goto err_free;
    }
    if (num_segs > 0) memcpy(b->segs, segs, ns * sizeof *segs);

    plan_buckets(b, bucket_bytes);
    index_units(b);
    b->max_in_flight = max_in_flight();
    step_reset(b);
    log_plan(b, bucket_bytes);
    *buckets_p = b;
    return ACX_OK;

err_free:
    acx_buckets_destroy(b);
    return status;
}

acx_status_t acx_buckets_set_wire(acx_buckets_t *b, acx_dtype_t wire_dtype, uint16_t *wire) {
    if (b == NULL || wire == NULL || b->dtype != ACX_DTYPE_FLOAT32 ||
        !acx_dtype_is_half(wire_dtype))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "buckets: a wire buffer needs float32 gradients and a 16-bit float wire "
                         "dtype (have %s gradients, %s wire)",
                         b ? acx_dtype_name(b->dtype) : "no", acx_dtype_name(wire_dtype));
    b->wire_dtype = wire_dtype;
    b->wire = wire;
    return ACX_OK;
}

acx_status_t acx_buckets_set_device(acx_buckets_t *b, const acx_devops_t *dev,
                                    void *const *stream_p) {
    if (b == NULL || dev == NULL || stream_p == NULL || b->dtype != ACX_DTYPE_FLOAT32)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "buckets: device gradients need a device table, a stream and float32 "
                         "gradients (have %s gradients)",
                         b ? acx_dtype_name(b->dtype) : "no");
    b->dev = dev;
    b->stream_p = stream_p;
    return ACX_OK;
}

acx_status_t acx_buckets_on_done(acx_buckets_t *b, acx_bucket_done_fn fn, void *arg) {
    if (b == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "buckets on done: buckets is NULL");
    b->done_fn = fn;
    b->done_arg = arg;
    return ACX_OK;
}

/* Bucket i's reduction finished: widen the wire values into the gradients
 * (on the device: enqueued on the compute stream, after the host saw the
 * collective complete), then tell the done hook. */
static acx_status_t bucket_done(acx_buckets_t *b, int i) {
    bucket_t *bk = &b->buckets[i];
    if (bk->state == BUCKET_IN_FLIGHT) b->num_in_flight--;
    bk->state = BUCKET_DONE;
    if (b->wire != NULL && b->dev != NULL)
        ACX_CHECK(b->dev->half_to_f32(b->wire_dtype, b->wire + bk->offset,
                                      (float *)b->flat + bk->offset, bk->count, *b->stream_p));
    else if (b->wire != NULL)
        acx_half_to_f32_n(b->wire_dtype, b->wire + bk->offset, (float *)b->flat + bk->offset,
                          bk->count);
    if (b->done_fn != NULL) return b->done_fn(b->done_arg, bk->offset, bk->count);
    return ACX_OK;
}

/* Complete every bucket still in flight (errors: the first is returned, the
 * rest are waited anyway so no request is abandoned). */
static acx_status_t finish_in_flight(acx_buckets_t *b) {
    acx_status_t status = ACX_OK;
    for (int i = 0; i < b->num_buckets; i++) {
        bucket_t *bk = &b->buckets[i];
        if (bk->state != BUCKET_IN_FLIGHT) continue;
        acx_status_t st = b->comm->ops->wait(bk->req);
        bk->req = NULL;
        acx_status_t st2 = bucket_done(b, i);
        if (status == ACX_OK) status = st != ACX_OK ? st : st2;
    }
    return status;
}

/* Destroying mid-step completes the buckets in flight: MPI may still be
 * writing into the flat buffer, which the caller frees next. */
void acx_buckets_destroy(acx_buckets_t *b) {
    if (b == NULL) return;
    if (b->buckets != NULL) (void)finish_in_flight(b);
    free(b->reported);
    free(b->unit_segs);
    free(b->unit_first);
    free(b->seg_bucket);
    free(b->buckets);
    free(b->segs);
    free(b);
}

int acx_buckets_count(const acx_buckets_t *b) { return b ? b->num_buckets : 0; }

void acx_buckets_range(const acx_buckets_t *b, int i, size_t *offset_p, size_t *count_p) {
    if (b == NULL || i < 0 || i >= b->num_buckets) return;
    if (offset_p) *offset_p = b->buckets[i].offset;
    if (count_p) *count_p = b->buckets[i].count;
}

/* ---- per step ---- */

/* Test every bucket in flight; free the finished ones. Besides harvesting,
 * the MPI_Test inside is what advances Open MPI's non-blocking collectives
 * (libnbc progresses only inside MPI calls) while the program computes. */
static acx_status_t drive_progress(acx_buckets_t *b) {
    for (int i = 0; i < b->num_buckets; i++) {
        bucket_t *bk = &b->buckets[i];
        if (bk->state != BUCKET_IN_FLIGHT) continue;
        int done = 0;
        ACX_CHECK(b->comm->ops->test(bk->req, &done));
        if (!done) continue;
        acx_coll_req_t *req = bk->req;
        bk->req = NULL;
        ACX_CHECK(b->comm->ops->wait(req)); /* frees; already complete */
        ACX_CHECK(bucket_done(b, i));
    }
    return ACX_OK;
}

/* x [n] of dtype *= prescale, in the dtype's own precision (16-bit floats:
 * the exact product, rounded once). */
static acx_status_t bucket_scale(const acx_buckets_t *b, void *x, size_t n, float prescale) {
    if (b->dev != NULL) return b->dev->scale(x, n, prescale, *b->stream_p); /* float32 only */
    switch (b->dtype) {
    case ACX_DTYPE_FLOAT32:
        for (size_t k = 0; k < n; k++)
            ((float *)x)[k] *= prescale;
        return ACX_OK;
    case ACX_DTYPE_FLOAT64:
        for (size_t k = 0; k < n; k++)
            ((double *)x)[k] *= (double)prescale;
        return ACX_OK;
    case ACX_DTYPE_FLOAT16:
    case ACX_DTYPE_BFLOAT16: acx_half_scale_n(b->dtype, x, prescale, n); return ACX_OK;
    default:
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "gradient bucket of %s: prescale %g cannot apply to integers (use 1)",
                         acx_dtype_name(b->dtype), (double)prescale);
    }
}

/* Scale bucket i and start its SUM all-reduce in place. The last bucket of
 * the step has nothing left to overlap with, so it runs blocking: MPI
 * implementations pick tuned algorithms for blocking all-reduce (Open MPI's
 * coll/tuned) but a generic schedule for the non-blocking one (libnbc). */
static acx_status_t bucket_start(acx_buckets_t *b, int i, float prescale) {
    bucket_t *bk = &b->buckets[i];
    void *x = (char *)b->flat + bk->offset * b->esize; /* [bk->count] of dtype */
    acx_dtype_t dtype = b->dtype;
    if (prescale != 1.0f && bk->count > 0) ACX_CHECK(bucket_scale(b, x, bk->count, prescale));
    if (b->wire != NULL) { /* round the scaled float32 values once, onto the wire */
        if (b->dev != NULL)
            ACX_CHECK(b->dev->half_from_f32(b->wire_dtype, x, b->wire + bk->offset, bk->count,
                                            *b->stream_p));
        else
            acx_half_from_f32_n(b->wire_dtype, x, b->wire + bk->offset, bk->count);
        x = b->wire + bk->offset;
        dtype = b->wire_dtype;
    }
    /* A host-memory backend copies device buffers with synchronous copies
     * that do not wait for a non-blocking compute stream: wait here for the
     * backward kernels and the scaling above. NCCL orders itself. */
    if (b->dev != NULL && !b->comm->ops->device_memory) ACX_CHECK(b->dev->sync(*b->stream_p));
    b->num_started++;
    if (b->num_started == b->num_buckets) {
        ACX_CHECK(b->comm->ops->all_reduce(b->comm, x, x, bk->count, dtype, ACX_OP_SUM));
        return bucket_done(b, i);
    }
    /* Make room: the oldest in flight is the lowest index (started in
     * increasing order), the same bucket on every rank. */
    for (int j = 0; j < i && b->num_in_flight >= b->max_in_flight; j++) {
        bucket_t *old = &b->buckets[j];
        if (old->state != BUCKET_IN_FLIGHT) continue;
        acx_coll_req_t *req = old->req;
        old->req = NULL;
        acx_status_t st = b->comm->ops->wait(req); /* frees the request */
        acx_status_t st2 = bucket_done(b, j);
        ACX_CHECK(st);
        ACX_CHECK(st2);
    }
    ACX_CHECK(
        b->comm->ops->all_reduce_start(b->comm, x, x, bk->count, dtype, ACX_OP_SUM, &bk->req));
    bk->state = BUCKET_IN_FLIGHT;
    b->num_in_flight++;
    return ACX_OK;
}

acx_status_t acx_buckets_unit_ready(acx_buckets_t *b, int unit, float prescale) {
    if (b == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "bucket unit ready: buckets is NULL");
    if (unit < 0 || unit >= b->num_units)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "bucket unit ready: unit %d is not in 0..%d", unit,
                         b->num_units - 1);
    if (b->reported[unit])
        return ACX_ERROR(ACX_ERR_STATE,
                         "unit %d reported its gradients ready twice in one step (each unit "
                         "reports once between wait_all/reset)",
                         unit);
    b->reported[unit] = 1;

    ACX_CHECK(drive_progress(b));
    /* The unit's segments are in ready order, so the buckets they complete
     * come out in increasing index order: the start order every rank shares. */
    for (int k = b->unit_first[unit]; k < b->unit_first[unit + 1]; k++) {
        int i = b->seg_bucket[b->unit_segs[k]];
        if (--b->buckets[i].pending == 0) ACX_CHECK(bucket_start(b, i, prescale));
    }
    return ACX_OK;
}

/* Name the units whose missing reports left buckets unstarted: those that
 * did not report and own a segment of a bucket still idle. */
static acx_status_t missing_units_error(const acx_buckets_t *b) {
    char list[512];
    size_t len = 0;
    int listed = 0, more = 0;
    list[0] = '\0';
    for (int u = 0; u < b->num_units; u++) {
        if (b->reported[u]) continue;
        int blocks = 0;
        for (int k = b->unit_first[u]; k < b->unit_first[u + 1] && !blocks; k++)
            blocks = b->buckets[b->seg_bucket[b->unit_segs[k]]].state == BUCKET_IDLE;
        if (!blocks) continue;
        if (len > sizeof list - 16) {
            more++;
            continue;
        }
        int n = snprintf(list + len, sizeof list - len, "%s%d", listed ? ", " : "", u);
        if (n > 0) len += (size_t)n;
        listed++;
    }
    return ACX_ERROR(ACX_ERR_STATE,
                     "%d of %d gradient buckets never started this step; units that did not "
                     "report: %s%s",
                     b->num_buckets - b->num_started, b->num_buckets, list, more ? ", ..." : "");
}

acx_status_t acx_buckets_wait_all(acx_buckets_t *b) {
    if (b == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "bucket wait all: buckets is NULL");
    acx_status_t status = ACX_OK;
    /* Record the missing units before finishing (which marks buckets done);
     * still finish: the buckets that did start were started on every rank. */
    if (b->num_started < b->num_buckets) status = missing_units_error(b);
    acx_status_t st = finish_in_flight(b);
    if (status == ACX_OK) status = st;
    step_reset(b);
    return status;
}

/* Buckets already in flight (a reset after some reports) are completed, not
 * abandoned: MPI owns their memory until then, and every rank started them. */
void acx_buckets_reset(acx_buckets_t *b) {
    if (b == NULL) return;
    if (finish_in_flight(b) != ACX_OK)
        ACX_WARN(ACX_SUBSYS_COLL, "bucket reset: completing buckets in flight failed: %s",
                 acx_last_error());
    step_reset(b);
}

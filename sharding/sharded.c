/*
 * sharding/sharded.c — SHARD_GRAD_OP (ZeRO-2), FULL_SHARD (ZeRO-3) and
 * HYBRID_SHARD: one engine, three policies.
 *
 * Layout (DESIGN.md). Each parameter is split along dim 0 among the S ranks
 * of the shard group (the world; the node under HYBRID_SHARD): with
 * c = ceil(R/S), group rank s owns rows [s*c, min(R, (s+1)*c)), possibly
 * none. A unit's pieces are packed into one per-rank *segment*, each piece
 * padded to c rows, so that the unit costs one all-gather and one
 * reduce-scatter of `seg` elements per rank (FSDP2's per-parameter dim-0
 * sharding with FSDP1's one-collective-per-unit flat buffers):
 *
 *   segment of rank s  [ p0: c0 rows (owned, then zeros) | p1: c1 rows | ... ]   seg elements
 *   master/shard_grad  [ segment of unit 0 | segment of unit 1 | ... ]           shard_numel
 *   gather staging     [ segment of rank 0 | segment of rank 1 | ... ]           S x seg
 *   unit full buffer   [ p0 rows 0..R0 | p1 rows 0..R1 | ... ]                    numel of the unit
 *
 * The rank's segments are its rows of master weights, reduced gradients and
 * optimizer state: the optimizer runs one fused loop over them (padding stays
 * zero: zero gradient, zero state, zero weight decay of zero). The segment is
 * also the all-gather's send buffer, with no packing copy. The gathered
 * staging is copied out into the contiguous per-parameter full buffer the
 * program reads (FSDP2's all-gather copy-out); gradients are copied into a
 * staging buffer in segment order, pre-scaled, and reduce-scattered in place
 * (FSDP2's reduce-scatter copy-in), and the received segment is added to the
 * reduced-gradient shard.
 *
 * Policies:
 *   SHARD_GRAD_OP  full parameters stay resident (category PARAMS) and are
 *                  refreshed by one all-gather per unit after each optimizer
 *                  step; acquire/release do nothing.
 *   FULL_SHARD     at rest only the segments exist; acquire all-gathers the
 *                  unit into a transient full buffer, release frees it;
 *                  forward/backward prefetch start the neighbour's all-gather
 *                  early, at most limit_all_gathers units gathered at once
 *                  (in flight or held). A unit in flight holds only its
 *                  staging: the full buffer is allocated at the copy-out
 *                  (gather_finish), so a prefetch costs pb x S x seg bytes,
 *                  not 4 x numel more.
 *   HYBRID_SHARD   FULL_SHARD inside a node; after the node's
 *                  reduce-scatter, the segment is all-reduced with the same
 *                  local rank on the other nodes (the replicas), which then
 *                  take identical optimizer steps.
 *
 * Gradients. The program adds into the unit's full gradient buffer, created
 * zeroed on first use (materialize_grads) and kept across non-boundary
 * micro-steps (accumulation without communication, like FSDP's no_sync). On
 * a boundary, grads_ready hands it to a non-blocking reduce-scatter and frees
 * it; at most MAX_PENDING_RS reductions are in flight (the oldest is
 * completed first), so transient memory stays bounded while the next
 * unit's backward overlaps the communication.
 *
 * Mixed precision: the full buffers hold the master values rounded to
 * param_dtype (the compute copies), and the all-gather moves param_dtype
 * (each rank rounds its segment into a 16-bit send buffer: half the bytes);
 * gradients are rounded to reduce_dtype after the prescale, reduce-scattered
 * in it (the MPI backend accumulates 16-bit sums in float32) and widened
 * into the float32 shard. Rounding is to nearest, ties to even (half.h).
 *
 * Device-resident state (m->ctx.dev: device_state cuda, or the emulated
 * test device; CPU offload is refused for these strategies, so m->shard_dev
 * is ctx.dev here). The same buffers, layout and offsets live in device memory
 * through the device table (device/ops.h), and the host loops become
 * table operations on the program's compute stream (m->ctx.stream):
 * the segment's rounding onto the 16-bit wire (half_from_f32), the
 * copy-out of the gathered staging (copy, or half_to_f32 from 16 bits), the
 * prescale (scale of the unit's gradient buffer in place, just before it is
 * freed) and the copy-in (copy, or half_from_f32 rounding once, as
 * store_scaled), the widen-and-add of the received segment (accumulate),
 * zero_grad (memset). Initial values are computed on the host per owned
 * piece (acx_param_init_fill: the same values as with host state) and
 * copied in. The collectives get device pointers; with a host-memory
 * backend (MPI, which stages device buffers through host memory with
 * copies on the legacy stream) the compute stream is synchronized before
 * each collective, as in collectives/bucket.c. Buffers are allocated and
 * freed exactly when the host path does, through the device caching
 * allocator (device/cache.h: zeroed in stream order where the host
 * path zeroes, so the padding is zero as with acx_mem_alloc): a freed
 * block is kept for the next request on the compute stream, which stream
 * order makes safe while enqueued work may still use it, so after the
 * first step a unit's gather and reduce-scatter cost no cudaMalloc, no
 * cudaFree and no stream synchronize. Keeping the
 * buffers for the model's life instead would make FULL_SHARD hold every
 * unit's full parameters, which is what it exists to avoid.
 *
 * Shared units (tied parameters; sharding/model.h): a unit's *position*
 * (unit->index) drives the direction rule and the prefetch targets, its
 * *storage* (acx_unit_storage: the owner's for a shared unit) is what is
 * gathered, freed and reduced. A shared unit has an empty segment and no
 * buffers of its own. The storage's full values stay while any use holds
 * them (uses_held); its full gradient buffer collects every use's
 * gradients and goes to the reduce-scatter once, after the last use's
 * grads_ready (acx_unit_uses_complete).
 *
 * Memory accounting: every buffer goes through acx_mem_alloc (host) or
 * acx_devcache_alloc (device; counted as acx_devops_alloc counts) with its category, so
 * acx_memory_stats measures what acx_memory_estimate predicts. Left to others: the optimizer math
 * (runtime/), checkpoint rows (the plan, sharding/plan.h), the shared bookkeeping (model.c).
 */
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "device/cache.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "base/param_init.h"
#include "sharding/model.h"

/* Reduce-scatters in flight, each holding S x seg staging. One: unit k's
 * reduction overlaps unit k-1's backward and is completed when k-1's
 * gradients are handed over, before k-1's staging is allocated, so backward
 * holds one staging at a time (2 held a second one: a unit's 4 x numel more
 * at the peak, docs/gpt.md's memory section). */
#define MAX_PENDING_RS 1

typedef enum policy { POLICY_GRAD_OP, POLICY_FULL, POLICY_HYBRID } policy_t;

typedef struct unit_state {
    size_t seg;          /* elements of one rank's segment */
    size_t shard_off;    /* the segment's offset in master / shard_grad */
    float *data;         /* [numel] full parameters; NULL when resharded or in flight */
    float *grad;         /* [numel] full gradients being accumulated, or NULL */
    float *stale;        /* ACX_DEBUG_MODE, host state: the last handed-over grad, poisoned */
    void *staging;       /* [S x seg] of param_dtype: all-gather in flight, or NULL */
    void *send;          /* [seg] of param_dtype when 16-bit: the rounded segment, or NULL */
    acx_coll_req_t *req; /* the in-flight all-gather */
    int prefetched;      /* gathered (or gathering) without an acquire */
} unit_state_t;

typedef struct pending_rs {
    int unit;
    void *staging; /* [S x seg] of reduce_dtype; this rank's result at element s * seg */
    acx_coll_req_t *req;
} pending_rs_t;

typedef struct sharded_state {
    policy_t policy;
    acx_comm_t *shard;   /* = ctx.world, or ctx.node under HYBRID (not owned) */
    acx_comm_t *replica; /* HYBRID: same local rank on every node (owned), else NULL */
    unit_state_t *units;
    pending_rs_t pending[MAX_PENDING_RS];
    int num_pending;
    int num_gathered;  /* units gathering or gathered: staging or full buffer (FULL/HYBRID) */
    int last_acquired; /* unit index of the last acquire this pass; -1 at a pass start */
} sharded_state_t;

static sharded_state_t *state_of(const acx_model_t *m) { return m->strategy_state; }

/* ---- buffers: host memory, or device memory through the table ---- */

/* *p_p = bytes of category cat: device memory from the device cache with
 * device state (zeroed in the compute stream's order when zero is set),
 * else host memory, zeroed when zero is set (acx_mem_alloc) or not
 * (acx_mem_alloc_raw). ACX_ERR_NO_MEMORY (host) or the table's error. */
static acx_status_t buf_alloc(const acx_model_t *m, acx_mem_category_t cat, size_t bytes, int zero,
                              const char *what, void **p_p) {
    if (m->ctx.dev != NULL)
        return acx_devcache_alloc(m->ctx.dev, cat, bytes, zero, m->ctx.stream, what, p_p);
    void *p = zero ? acx_mem_alloc(cat, bytes, what) : acx_mem_alloc_raw(cat, bytes, what);
    if (p == NULL) return ACX_ERR_NO_MEMORY;
    *p_p = p;
    return ACX_OK;
}

/* Free what buf_alloc gave (NULL is fine). A device buffer may still be
 * used by work enqueued on the compute stream: the device cache keeps it
 * for requests on that stream only (stream order makes reuse safe), so
 * nothing is waited for. */
static void buf_free(const acx_model_t *m, acx_mem_category_t cat, void *p, size_t bytes) {
    const acx_devops_t *d = m->ctx.dev;
    if (p == NULL) return;
    if (d == NULL) {
        acx_mem_free(cat, p, bytes);
        return;
    }
    acx_devcache_free(d, cat, p, bytes, m->ctx.stream);
}

/* Before a collective on device buffers with a host-memory backend (MPI
 * stages them with copies on the legacy stream, which do not wait for a
 * non-blocking compute stream): let the work enqueued so far finish. NCCL
 * orders itself after the compute stream. */
static acx_status_t before_collective(const acx_model_t *m, const acx_comm_t *comm) {
    const acx_devops_t *d = m->ctx.dev;
    if (d != NULL && !comm->ops->device_memory) return d->sync(m->ctx.stream);
    return ACX_OK;
}

/* ---- 16-bit or 32-bit buffers ---- */

static size_t dsize(acx_dtype_t dt) { return acx_dtype_is_half(dt) ? 2 : 4; }

/* dst[k] = src[k] * scale, rounded to dt; dst is an array of dt at element
 * offset off (the scaling is a float32 product, rounded once to dt). */
static void store_scaled(acx_dtype_t dt, void *dst, size_t off, const float *src, size_t n,
                         float scale) {
    if (dt == ACX_DTYPE_BFLOAT16) {
        uint16_t *d = (uint16_t *)dst + off;
        for (size_t k = 0; k < n; k++)
            d[k] = acx_bf16_from_f32(src[k] * scale);
    } else if (dt == ACX_DTYPE_FLOAT16) {
        uint16_t *d = (uint16_t *)dst + off;
        for (size_t k = 0; k < n; k++)
            d[k] = acx_f16_from_f32(src[k] * scale);
    } else {
        float *d = (float *)dst + off;
        for (size_t k = 0; k < n; k++)
            d[k] = src[k] * scale;
    }
}

/* dst[k] = src[k] (element offset off of an array of dt), widened to float32. */
static void load_f32(acx_dtype_t dt, float *dst, const void *src, size_t off, size_t n) {
    if (acx_dtype_is_half(dt))
        acx_half_to_f32_n(dt, (const uint16_t *)src + off, dst, n);
    else
        memcpy(dst, (const float *)src + off, n * sizeof(float));
}

/* ---- plan ---- */

/* Segment layout and ownership of every unit and parameter. */
static void plan_layout(acx_model_t *m, sharded_state_t *st) {
    size_t off = 0;
    for (int u = 0; u < m->num_units; u++) {
        acx_unit_t *unit = m->units[u];
        unit_state_t *us = &st->units[u];
        size_t seg = 0, full = 0;
        for (int i = 0; i < unit->num_params; i++) {
            acx_param_t *p = unit->params[i];
            p->shard_rows = acx_plan_piece_rows(&m->plan, p->rows);
            p->piece_offset = seg;
            p->full_offset = full;
            acx_plan_owned_rows(&m->plan, p->rows, &p->row_begin, &p->row_end);
            p->shard_offset = off + seg;
            seg += (size_t)(p->shard_rows * p->row_numel);
            full += (size_t)p->numel;
        }
        us->seg = seg;
        us->shard_off = off;
        unit->numel = full;
        off += seg;
    }
    m->shard_numel = off;
}

static void log_plan(const acx_model_t *m, const sharded_state_t *st) {
    if (!acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_SHARD)) return;
    for (int u = 0; u < m->num_units; u++) {
        const acx_unit_t *unit = m->units[u];
        ACX_DEBUG(ACX_SUBSYS_SHARD,
                  "%s plan: unit '%s' (%zu elements): segment %zu elements at %zu; "
                  "one all-gather/reduce-scatter of %zu x %d",
                  m->strategy->name, unit->name, unit->numel, st->units[u].seg,
                  st->units[u].shard_off, st->units[u].seg, st->shard->size);
        for (int i = 0; i < unit->num_params; i++) {
            const acx_param_t *p = unit->params[i];
            ACX_DEBUG(ACX_SUBSYS_SHARD,
                      "%s plan:   '%s' %lld rows: owns rows [%lld, %lld) of %lld "
                      "per rank, at shard offset %zu",
                      m->strategy->name, p->name, (long long)p->rows, (long long)p->row_begin,
                      (long long)p->row_end, (long long)p->shard_rows, p->shard_offset);
        }
    }
}

/* ---- gathering parameters ---- */

/* Debug mode: every rank of the shard group about to run the same
 * collective on the same unit? (ctx.unit_check; NULL when the mode is off) */
static acx_status_t unit_check(acx_model_t *m, int u, int reduce_scatter, acx_dtype_t dt) {
    if (m->ctx.unit_check == NULL) return ACX_OK;
    acx_unit_call_t call = {reduce_scatter, u, m->units[u]->name, state_of(m)->units[u].seg, dt};
    return m->ctx.unit_check(m->ctx.owner, state_of(m)->shard, &call);
}

static acx_mem_category_t data_category(const sharded_state_t *st) {
    return st->policy == POLICY_GRAD_OP ? ACX_MEM_PARAMS : ACX_MEM_TRANSIENT;
}

static void set_data_pointers(acx_unit_t *unit, float *data) {
    for (int i = 0; i < unit->num_params; i++)
        unit->params[i]->data = data ? data + unit->params[i]->full_offset : NULL;
}

/* Start the all-gather of unit u's segments into fresh staging. The full
 * buffer is not allocated here but at the copy-out (gather_finish), unless
 * it exists (SHARD_GRAD_OP's resident parameters, a refresh): from now
 * until then the unit holds its staging only. */
static acx_status_t gather_start(acx_model_t *m, int u) {
    sharded_state_t *st = state_of(m);
    unit_state_t *us = &st->units[u];
    acx_unit_t *unit = m->units[u];
    size_t S = (size_t)st->shard->size;
    acx_dtype_t dt = m->ctx.param_dtype;
    size_t esz = dsize(dt);
    const acx_devops_t *d = m->ctx.dev;
    ACX_CHECK(unit_check(m, u, 0, dt));
    unit->gathers++;
    acx_status_t status =
        buf_alloc(m, ACX_MEM_TRANSIENT, S * us->seg * esz, 0, "all-gather staging", &us->staging);
    if (status != ACX_OK) return status;
    /* FULL/HYBRID: the unit counts against limit_all_gathers from now */
    if (us->data == NULL && st->policy != POLICY_GRAD_OP) st->num_gathered++;
    const void *send = m->master + us->shard_off;
    if (acx_dtype_is_half(dt)) { /* round the segment once: the wire carries param_dtype */
        status =
            buf_alloc(m, ACX_MEM_TRANSIENT, us->seg * esz, 0, "all-gather send buffer", &us->send);
        if (status == ACX_OK && d != NULL)
            status =
                d->half_from_f32(dt, m->master + us->shard_off, us->send, us->seg, m->ctx.stream);
        else if (status == ACX_OK)
            acx_half_from_f32_n(dt, m->master + us->shard_off, us->send, us->seg);
        send = us->send;
    }
    if (status == ACX_OK) status = before_collective(m, st->shard);
    if (status == ACX_OK)
        status =
            st->shard->ops->all_gather_start(st->shard, send, us->staging, us->seg, dt, &us->req);
    if (status != ACX_OK) {
        buf_free(m, ACX_MEM_TRANSIENT, us->staging, S * us->seg * esz);
        buf_free(m, ACX_MEM_TRANSIENT, us->send, us->seg * esz);
        us->staging = us->send = NULL;
        us->req = NULL;
        if (us->data == NULL && st->policy != POLICY_GRAD_OP) st->num_gathered--;
    }
    return status;
}

/* Wait for unit u's all-gather, allocate the full buffer (unless resident)
 * and copy every rank's pieces into it: rank s's rows of p land at rows
 * [b_s, e_s). The staging is freed right after, so the full buffer and the
 * staging coexist only for the copy. (Gathering straight into the full
 * buffer would need the gathered order — rank by rank, each rank's rows of
 * every parameter — to be the full buffer's — parameter by parameter: true
 * only for one parameter whose rows divide evenly, or S = 1; and under
 * bf16/fp16 the wire is 16-bit while the full buffer is float32.) */
static acx_status_t gather_finish(acx_model_t *m, int u) {
    sharded_state_t *st = state_of(m);
    unit_state_t *us = &st->units[u];
    acx_unit_t *unit = m->units[u];
    int S = st->shard->size;
    acx_dtype_t dt = m->ctx.param_dtype;
    size_t esz = dsize(dt);
    const acx_devops_t *d = m->ctx.dev;
    acx_status_t status = st->shard->ops->wait(us->req);
    us->req = NULL;
    buf_free(m, ACX_MEM_TRANSIENT, us->send, us->seg * esz); /* sent: before the full buffer */
    us->send = NULL;
    if (status == ACX_OK && us->data == NULL) {
        void *data = NULL;
        status =
            buf_alloc(m, data_category(st), unit->numel * sizeof(float), 0, "gathered unit", &data);
        us->data = data;
    }
    if (status == ACX_OK) {
        for (int i = 0; status == ACX_OK && i < unit->num_params; i++) {
            const acx_param_t *p = unit->params[i];
            for (int s = 0; status == ACX_OK && s < S; s++) {
                int64_t b, e;
                acx_plan_rows_of(&p->unit->model->plan, p->rows, s, &b, &e);
                if (e <= b) continue;
                float *dst = us->data + p->full_offset + (size_t)(b * p->row_numel);
                size_t off = (size_t)s * us->seg + p->piece_offset;
                size_t n = (size_t)((e - b) * p->row_numel);
                if (d == NULL)
                    load_f32(dt, dst, us->staging, off, n);
                else if (acx_dtype_is_half(dt))
                    status = d->half_to_f32(dt, (const uint16_t *)us->staging + off, dst, n,
                                            m->ctx.stream);
                else
                    status = d->copy(dst, (const float *)us->staging + off, n * sizeof(float),
                                     m->ctx.stream);
            }
        }
        if (status == ACX_OK) set_data_pointers(unit, us->data);
    }
    buf_free(m, ACX_MEM_TRANSIENT, us->staging, (size_t)S * us->seg * esz);
    us->staging = NULL;
    if (us->data == NULL && st->policy != POLICY_GRAD_OP) { /* failed: nothing held */
        st->num_gathered--;
        us->prefetched = 0;
    }
    return status;
}

/* Complete unit u's all-gather that nobody is going to use (a prefetch
 * not acquired, teardown): wait for it, as every rank of the shard group
 * must, then drop the staging and send buffers without allocating the full
 * buffer gather_finish would copy into — no new memory on the way out. A
 * resident full buffer (SHARD_GRAD_OP, a refresh) is left to the caller. */
static acx_status_t gather_cancel(acx_model_t *m, int u) {
    sharded_state_t *st = state_of(m);
    unit_state_t *us = &st->units[u];
    size_t S = (size_t)st->shard->size, esz = dsize(m->ctx.param_dtype);
    acx_status_t status = st->shard->ops->wait(us->req);
    us->req = NULL;
    buf_free(m, ACX_MEM_TRANSIENT, us->send, us->seg * esz);
    buf_free(m, ACX_MEM_TRANSIENT, us->staging, S * us->seg * esz);
    us->send = us->staging = NULL;
    /* as gather_start counted it: FULL/HYBRID, with no full buffer */
    if (us->data == NULL && st->policy != POLICY_GRAD_OP) st->num_gathered--;
    us->prefetched = 0;
    return status;
}

static void free_data(acx_model_t *m, int u) {
    sharded_state_t *st = state_of(m);
    unit_state_t *us = &st->units[u];
    if (us->data == NULL) return;
    buf_free(m, data_category(st), us->data, m->units[u]->numel * sizeof(float));
    us->data = NULL;
    us->prefetched = 0;
    set_data_pointers(m->units[u], NULL);
    if (st->policy != POLICY_GRAD_OP) st->num_gathered--;
}

/* Start gathering the unit at position `pos` of the order ahead of its
 * acquire, if its storage (its own, or its owner's for a shared unit) is
 * resharded and the cap on gathered units allows. Every rank makes the same
 * decision: it depends only on the sequence of calls, which is the same
 * everywhere. backward: counted as a backward prefetch (statistics). */
static acx_status_t prefetch(acx_model_t *m, int pos, int backward) {
    sharded_state_t *st = state_of(m);
    if (pos < 0 || pos >= m->num_units) return ACX_OK;
    int u = acx_unit_storage(m->units[pos])->index;
    if (st->units[u].data != NULL || st->units[u].req != NULL) return ACX_OK;
    int limit = m->ctx.limit_all_gathers;
    if (limit > 0 && st->num_gathered >= limit) return ACX_OK;
    ACX_CHECK(gather_start(m, u));
    st->units[u].prefetched = 1;
    if (backward)
        m->prefetch_stats.backward++;
    else
        m->prefetch_stats.forward++;
    ACX_DEBUG(ACX_SUBSYS_SHARD, "prefetching unit '%s'%s%s (%d unit(s) gathered)",
              m->units[pos]->name, pos != u ? ", the storage of " : "",
              pos != u ? m->units[u]->name : "", st->num_gathered);
    return ACX_OK;
}

/* Complete (or drop) prefetches nobody acquired: at the end of a pass. */
static acx_status_t drain_prefetches(acx_model_t *m) {
    sharded_state_t *st = state_of(m);
    acx_status_t status = ACX_OK;
    for (int u = 0; u < m->num_units; u++) {
        unit_state_t *us = &st->units[u];
        if (!us->prefetched) continue;
        if (us->req != NULL) { /* never acquired (an acquire completes it) */
            acx_status_t s = gather_cancel(m, u);
            if (status == ACX_OK) status = s;
        }
        if (m->units[u]->uses_held == 0) free_data(m, u);
        us->prefetched = 0;
    }
    return status;
}

/* All-gather every unit, two in flight (SHARD_GRAD_OP's refresh after a
 * step and at prepare; FULL_SHARD's refresh of units held across a step). */
static acx_status_t gather_units(acx_model_t *m, int only_resident) {
    sharded_state_t *st = state_of(m);
    int prev = -1;
    for (int u = 0; u <= m->num_units; u++) {
        if (u < m->num_units) {
            if (m->units[u]->owner != NULL) continue; /* a shared unit: no storage */
            if (only_resident && st->units[u].data == NULL && st->units[u].req == NULL) continue;
            if (st->units[u].req != NULL) ACX_CHECK(gather_finish(m, u)); /* a prefetch */
            ACX_CHECK(gather_start(m, u));
        }
        if (prev >= 0) ACX_CHECK(gather_finish(m, prev));
        prev = u < m->num_units ? u : -1;
    }
    return ACX_OK;
}

/* ---- reducing gradients ---- */

static acx_status_t rs_complete(acx_model_t *m, pending_rs_t *pr) {
    sharded_state_t *st = state_of(m);
    unit_state_t *us = &st->units[pr->unit];
    size_t S = (size_t)st->shard->size, seg = us->seg;
    acx_dtype_t dt = m->ctx.reduce_dtype;
    size_t esz = dsize(dt);
    acx_status_t status = st->shard->ops->wait(pr->req);
    void *mine = (char *)pr->staging + (size_t)st->shard->rank * seg * esz;
    /* (device state: nothing enqueued writes `mine`; the reduce-scatter
     * filled it, so no synchronize is needed before the all-reduce. With
     * NCCL the wait returned once the reduce-scatter finished on the shard
     * communicator's stream, so the replica communicator — whose compute
     * stream stays the legacy default, acx_set_compute_stream does not
     * reach it — reads finished data; the accumulate below is enqueued
     * after the blocking all-reduce returned.) */
    if (status == ACX_OK && st->replica != NULL && st->replica->size > 1)
        status = st->replica->ops->all_reduce(st->replica, mine, mine, seg, dt, ACX_OP_SUM);
    if (status == ACX_OK && m->ctx.dev != NULL) {
        status =
            m->ctx.dev->accumulate(dt, mine, m->shard_grad + us->shard_off, seg, m->ctx.stream);
    } else if (status == ACX_OK) {
        float *g = m->shard_grad + us->shard_off;
        if (acx_dtype_is_half(dt)) {
            const uint16_t *h = mine; /* widen and add, one pass */
            for (size_t k = 0; k < seg; k++)
                g[k] += dt == ACX_DTYPE_BFLOAT16 ? acx_bf16_to_f32(h[k]) : acx_f16_to_f32(h[k]);
        } else {
            const float *f = mine;
            for (size_t k = 0; k < seg; k++)
                g[k] += f[k];
        }
    }
    buf_free(m, ACX_MEM_TRANSIENT, pr->staging, S * seg * esz);
    pr->staging = NULL;
    pr->req = NULL;
    return status;
}

static acx_status_t rs_complete_oldest(acx_model_t *m) {
    sharded_state_t *st = state_of(m);
    acx_status_t status = rs_complete(m, &st->pending[0]);
    memmove(&st->pending[0], &st->pending[1],
            (size_t)(st->num_pending - 1) * sizeof st->pending[0]);
    st->num_pending--;
    return status;
}

/* ---- stale gradient pointers (ACX_DEBUG_MODE) ----
 *
 * A unit's full gradient buffer is handed to the reduce-scatter on a
 * boundary (and dropped by zero_grad), so an acx_param_grad pointer a
 * program kept from before (llm.c-style code caches them) points at memory
 * acx no longer reads. In debug mode with host state the handed-over buffer
 * is not freed but kept until the unit's next hand-over, filled with a
 * signalling-NaN pattern: a read through a stale pointer gives NaN (the
 * loss or the non-finite check shows it), and a write changes the pattern,
 * which the unit's next acx_unit_grads_ready and hand-over detect
 * (ACX_ERR_STATE naming the parameter). Cost: a second full gradient buffer
 * per unit, debug mode only. (Device state: the emulated device already
 * faults on host access; a CUDA buffer is left to compute-sanitizer.) */

#define STALE_POISON 0x7fa5a5a5u /* a signalling NaN no arithmetic produces */

static acx_status_t stale_check(acx_model_t *m, int u) {
    unit_state_t *us = &state_of(m)->units[u];
    acx_unit_t *unit = m->units[u];
    if (us->stale == NULL) return ACX_OK;
    const uint32_t *w = (const uint32_t *)us->stale;
    size_t n = (size_t)unit->numel, i = 0;
    while (i < n && w[i] == STALE_POISON)
        i++;
    if (i == n) return ACX_OK;
    const char *name = "?";
    for (int k = 0; k < unit->num_params; k++) {
        const acx_param_t *p = unit->params[k];
        if ((size_t)p->full_offset <= i && i < (size_t)p->full_offset + (size_t)p->numel)
            name = p->name;
    }
    acx_status_t status = ACX_ERROR(
        ACX_ERR_STATE,
        "parameter '%s' (unit '%s'): the program wrote into a gradient buffer acx had already "
        "handed to the reduce-scatter (or dropped at zero_grad): an acx_param_grad pointer kept "
        "across a synchronization boundary is stale under the sharded strategies; call "
        "acx_param_grad again after each acx_unit_grads_ready and acx_optimizer_zero_grad "
        "(found by ACX_DEBUG_MODE)",
        name, unit->name);
    buf_free(m, ACX_MEM_GRADS, us->stale, n * sizeof(float));
    us->stale = NULL;
    return status;
}

/* The unit's full gradient buffer is no longer the program's: free it, or
 * in debug mode poison it and keep it (after checking the one it replaces). */
static acx_status_t free_grad(acx_model_t *m, int u) {
    unit_state_t *us = &state_of(m)->units[u];
    acx_unit_t *unit = m->units[u];
    if (us->grad == NULL) return ACX_OK;
    size_t n = (size_t)unit->numel;
    acx_status_t status = ACX_OK;
    if (m->ctx.unit_check != NULL && m->ctx.dev == NULL) {
        status = stale_check(m, u);
        if (us->stale != NULL) buf_free(m, ACX_MEM_GRADS, us->stale, n * sizeof(float));
        uint32_t *w = (uint32_t *)us->grad;
        for (size_t i = 0; i < n; i++)
            w[i] = STALE_POISON;
        us->stale = us->grad;
    } else {
        buf_free(m, ACX_MEM_GRADS, us->grad, n * sizeof(float));
    }
    us->grad = NULL;
    for (int i = 0; i < unit->num_params; i++)
        unit->params[i]->grad = NULL;
    return status;
}

/* Copy unit u's full gradients (x prescale) into segment order and start
 * the reduce-scatter; the full buffer is freed at once. */
static acx_status_t rs_start(acx_model_t *m, int u) {
    sharded_state_t *st = state_of(m);
    unit_state_t *us = &st->units[u];
    acx_unit_t *unit = m->units[u];
    int S = st->shard->size;
    acx_dtype_t dt = m->ctx.reduce_dtype;
    size_t esz = dsize(dt);
    ACX_CHECK(unit_check(m, u, 1, dt));
    unit->reductions++;
    if (st->num_pending == MAX_PENDING_RS) ACX_CHECK(rs_complete_oldest(m));
    void *staging = NULL;
    ACX_CHECK(buf_alloc(m, ACX_MEM_TRANSIENT, (size_t)S * us->seg * esz, 1,
                        "reduce-scatter staging", &staging));
    const float scale = m->grad_prescale;
    const acx_devops_t *d = m->ctx.dev;
    acx_status_t status = ACX_OK;
    if (us->grad != NULL && d != NULL) {
        /* the same float product, then one rounding to dt, as store_scaled:
         * scale the full buffer in place (it is freed next), then copy or
         * round every piece into its place in segment order */
        status = d->scale(us->grad, unit->numel, scale, m->ctx.stream);
        for (int i = 0; status == ACX_OK && i < unit->num_params; i++) {
            const acx_param_t *p = unit->params[i];
            for (int s = 0; status == ACX_OK && s < S; s++) {
                int64_t b, e;
                acx_plan_rows_of(&p->unit->model->plan, p->rows, s, &b, &e);
                const float *src = us->grad + p->full_offset + (size_t)(b * p->row_numel);
                size_t off = (size_t)s * us->seg + p->piece_offset;
                size_t n = (size_t)((e - b) * p->row_numel);
                if (n == 0) continue;
                if (acx_dtype_is_half(dt))
                    status = d->half_from_f32(dt, src, (uint16_t *)staging + off, n, m->ctx.stream);
                else
                    status = d->copy((float *)staging + off, src, n * sizeof(float), m->ctx.stream);
            }
        }
        acx_status_t s = free_grad(m, u);
        if (status == ACX_OK) status = s;
    } else if (us->grad != NULL) { /* NULL: no gradient was touched, it is all zeros */
        for (int i = 0; i < unit->num_params; i++) {
            const acx_param_t *p = unit->params[i];
            for (int s = 0; s < S; s++) {
                int64_t b, e;
                acx_plan_rows_of(&p->unit->model->plan, p->rows, s, &b, &e);
                store_scaled(dt, staging, (size_t)s * us->seg + p->piece_offset,
                             us->grad + p->full_offset + (size_t)(b * p->row_numel),
                             (size_t)((e - b) * p->row_numel), scale);
            }
        }
        status = free_grad(m, u);
    }
    pending_rs_t *pr = &st->pending[st->num_pending];
    if (status == ACX_OK) status = before_collective(m, st->shard);
    if (status == ACX_OK)
        status = st->shard->ops->reduce_scatter_start(
            st->shard, staging, (char *)staging + (size_t)st->shard->rank * us->seg * esz, us->seg,
            dt, ACX_OP_SUM, &pr->req);
    if (status != ACX_OK) {
        buf_free(m, ACX_MEM_TRANSIENT, staging, (size_t)S * us->seg * esz);
        return status;
    }
    pr->unit = u;
    pr->staging = staging;
    st->num_pending++;
    return ACX_OK;
}

/* ---- strategy operations ---- */

/* Device state: p's owned rows computed on the host exactly as with host
 * state, in one pageable block per parameter, and copied to its place in
 * the master shard. */
static acx_status_t device_init_piece(acx_model_t *m, acx_param_t *p) {
    size_t bytes = (size_t)((p->row_end - p->row_begin) * p->row_numel) * sizeof(float);
    float *host = acx_malloc(bytes ? bytes : 1, "initial values");
    if (host == NULL) return ACX_ERR_NO_MEMORY;
    acx_param_init_fill(&p->init, p->ndim, p->shape, m->ctx.seed, p->name, p->row_begin, p->row_end,
                        host);
    acx_status_t status =
        m->ctx.dev->to_device(m->master + p->shard_offset, host, bytes, m->ctx.stream);
    free(host);
    return status;
}

static acx_status_t sharded_prepare_policy(acx_model_t *m, policy_t policy) {
    sharded_state_t *st = acx_calloc(1, sizeof *st, "sharded strategy state");
    if (st == NULL) return ACX_ERR_NO_MEMORY;
    m->strategy_state = st;
    st->policy = policy;
    st->last_acquired = -1;
    st->units = acx_calloc((size_t)m->num_units, sizeof *st->units, "unit states");
    if (st->units == NULL) return ACX_ERR_NO_MEMORY;
    acx_comm_t *world = m->ctx.world;
    if (policy == POLICY_HYBRID) {
        /* Nodes must be alike: node-local rank i of every node holds the
         * same rows, and those ranks form the replica group. */
        int sz[2] = {m->ctx.node->size, -m->ctx.node->size};
        ACX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sz, 2, MPI_INT, MPI_MAX, world->mpi));
        if (sz[0] != -sz[1])
            return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                             "hybrid_shard needs the same number of ranks on every node; nodes "
                             "have between %d and %d (set ranks_per_node to a divisor of the "
                             "world size, or use full_shard)",
                             -sz[1], sz[0]);
        st->shard = m->ctx.node;
        ACX_CHECK(acx_comm_split(world, m->ctx.node->rank, world->rank, &st->replica));
        /* rows split over the node, replicated across the nodes */
        acx_plan_set(&m->plan, st->shard->rank, st->shard->size, st->replica->rank,
                     st->replica->size, st->replica->size > 1 ? st->replica : NULL);
    } else {
        st->shard = world;
        /* rows split over the world, no replicas */
        acx_plan_set(&m->plan, world->rank, world->size, 0, 1, NULL);
    }
    m->shard_comm = st->shard;
    plan_layout(m, st);

    size_t bytes = m->shard_numel * sizeof(float);
    void *master = NULL, *shard_grad = NULL;
    ACX_CHECK(buf_alloc(m, ACX_MEM_MASTER, bytes, 1, "master weights (shard)", &master));
    m->master = master;
    ACX_CHECK(buf_alloc(m, ACX_MEM_GRADS, bytes, 1, "reduced gradients (shard)", &shard_grad));
    m->shard_grad = shard_grad;
    if (m->ctx.dev != NULL) /* the scaler's flag and clipping's norm (runtime/) */
        ACX_CHECK(
            acx_devops_alloc(m->ctx.dev, ACX_MEM_TRANSIENT, 16, "scalar results", &m->dev_scratch));
    /* Each rank initializes only its rows; the initializer is keyed by
     * (seed, name, element), so they equal a 1-rank run's values and no
     * rank ever materializes the full model (init_empty_weights, done at
     * the source). Padding rows stay zero. */
    for (int i = 0; i < m->num_params; i++) {
        acx_param_t *p = m->params[i];
        if (p->row_end > p->row_begin && m->ctx.dev != NULL)
            ACX_CHECK(device_init_piece(m, p));
        else if (p->row_end > p->row_begin)
            acx_param_init_fill(&p->init, p->ndim, p->shape, m->ctx.seed, p->name, p->row_begin,
                                p->row_end, m->master + p->shard_offset);
    }
    log_plan(m, st);
    if (policy == POLICY_GRAD_OP) ACX_CHECK(gather_units(m, 0));
    ACX_INFO(ACX_SUBSYS_SHARD,
             "%s: %d unit(s) sharded over %d rank(s)%s; local shard %zu of %lld "
             "elements in %s memory",
             m->strategy->name, m->num_units, st->shard->size,
             st->replica ? " per node, replicated across nodes" : "", m->shard_numel,
             (long long)m->numel, m->ctx.dev != NULL ? m->ctx.dev->name : "host");
    return ACX_OK;
}

static acx_status_t grad_op_prepare(acx_model_t *m) {
    return sharded_prepare_policy(m, POLICY_GRAD_OP);
}
static acx_status_t full_prepare(acx_model_t *m) { return sharded_prepare_policy(m, POLICY_FULL); }
static acx_status_t hybrid_prepare(acx_model_t *m) {
    return sharded_prepare_policy(m, POLICY_HYBRID);
}

/* The unit's position (unit->index) drives the direction rule and the
 * prefetch targets; its storage (the owner's, for a shared unit) is what is
 * gathered. A shared unit acquired while its owner still holds the values
 * (or the reverse), or after a prefetch of them, gathers nothing. */
static acx_status_t sharded_acquire(acx_unit_t *unit) {
    acx_model_t *m = unit->model;
    sharded_state_t *st = state_of(m);
    if (st->policy == POLICY_GRAD_OP) return ACX_OK; /* resident */
    int pos = unit->index, u = acx_unit_storage(unit)->index;
    /* Direction: a pass runs forward in increasing position order, backward
     * in decreasing order; a repeat of the last position starts backward. */
    int backward = st->last_acquired >= 0 && pos <= st->last_acquired;
    st->last_acquired = pos;
    unit_state_t *us = &st->units[u];
    if (us->data == NULL && us->req == NULL) ACX_CHECK(gather_start(m, u));
    if (us->req != NULL) ACX_CHECK(gather_finish(m, u));
    us->prefetched = 0;
    if (!backward && m->ctx.forward_prefetch) ACX_CHECK(prefetch(m, pos + 1, 0));
    if (backward && m->ctx.backward_prefetch == ACX_BACKWARD_PRE)
        ACX_CHECK(prefetch(m, pos - 1, 1));
    return ACX_OK;
}

/* The storage goes only when no use holds it any more (uses_held, kept by
 * model.c). */
static acx_status_t sharded_release(acx_unit_t *unit) {
    acx_model_t *m = unit->model;
    if (state_of(m)->policy == POLICY_GRAD_OP) return ACX_OK;
    acx_unit_t *storage = acx_unit_storage(unit);
    if (storage->uses_held == 0 && state_of(m)->units[storage->index].req == NULL)
        free_data(m, storage->index);
    return ACX_OK;
}

static acx_status_t sharded_materialize_grads(acx_unit_t *unit) {
    acx_model_t *m = unit->model;
    unit_state_t *us = &state_of(m)->units[unit->index];
    if (us->grad != NULL) return ACX_OK;
    void *grad = NULL;
    ACX_CHECK(buf_alloc(m, ACX_MEM_GRADS, unit->numel * sizeof(float), 1, "unit gradients", &grad));
    us->grad = grad;
    for (int i = 0; i < unit->num_params; i++)
        unit->params[i]->grad = us->grad + unit->params[i]->full_offset;
    return ACX_OK;
}

/* The storage's full gradient buffer collects every use's gradients: it is
 * handed to the reduce-scatter once, on a boundary, after the last use
 * reported (until then it stays, for the uses still to come). */
static acx_status_t sharded_grads_ready(acx_unit_t *unit) {
    acx_model_t *m = unit->model;
    sharded_state_t *st = state_of(m);
    int u = acx_unit_storage(unit)->index;
    ACX_CHECK(stale_check(m, u));
    if (st->policy != POLICY_GRAD_OP && m->ctx.backward_prefetch == ACX_BACKWARD_POST)
        ACX_CHECK(prefetch(m, unit->index - 1, 1));
    if (!m->sync) return ACX_OK; /* accumulate in the full buffer; no communication */
    if (!acx_unit_uses_complete(unit)) return ACX_OK;
    return rs_start(m, u);
}

static acx_status_t sharded_backward_end(acx_model_t *m) {
    sharded_state_t *st = state_of(m);
    acx_status_t status = ACX_OK;
    while (st->num_pending > 0) {
        acx_status_t s = rs_complete_oldest(m);
        if (status == ACX_OK) status = s;
    }
    acx_status_t s = drain_prefetches(m);
    if (status == ACX_OK) status = s;
    st->last_acquired = -1;
    if (status != ACX_OK || !m->sync) return status;
    for (int u = 0; u < m->num_units; u++)
        if (!m->units[u]->grads_reported) return ACX_ERR_STATE; /* model.c names them */
    return ACX_OK;
}

static acx_status_t sharded_after_step(acx_model_t *m) {
    sharded_state_t *st = state_of(m);
    /* SHARD_GRAD_OP: every replicated unit; FULL/HYBRID: only units the
     * program holds across the step (normally none). */
    return gather_units(m, st->policy != POLICY_GRAD_OP);
}

static acx_status_t sharded_zero_grad(acx_model_t *m) {
    if (m->ctx.dev != NULL)
        ACX_CHECK(
            m->ctx.dev->memset(m->shard_grad, 0, m->shard_numel * sizeof(float), m->ctx.stream));
    else
        memset(m->shard_grad, 0, m->shard_numel * sizeof(float));
    /* set_to_none for the full buffers: they are recreated zeroed on use */
    acx_status_t status = ACX_OK;
    for (int u = 0; u < m->num_units; u++) {
        acx_status_t s = free_grad(m, u);
        if (status == ACX_OK) status = s;
    }
    return status;
}

static void sharded_destroy(acx_model_t *m) {
    sharded_state_t *st = state_of(m);
    if (st == NULL) return;
    while (st->num_pending > 0)
        (void)rs_complete_oldest(m);
    if (st->units != NULL) {
        for (int u = 0; u < m->num_units; u++) {
            unit_state_t *us = &st->units[u];
            if (us->req != NULL) (void)gather_cancel(m, u);
            if (us->data != NULL) free_data(m, u);
            buf_free(m, ACX_MEM_GRADS, us->grad, (size_t)m->units[u]->numel * sizeof(float));
            buf_free(m, ACX_MEM_GRADS, us->stale, (size_t)m->units[u]->numel * sizeof(float));
        }
    }
    buf_free(m, ACX_MEM_MASTER, m->master, m->shard_numel * sizeof(float));
    buf_free(m, ACX_MEM_GRADS, m->shard_grad, m->shard_numel * sizeof(float));
    m->master = m->shard_grad = NULL;
    if (m->ctx.dev != NULL) {
        acx_devops_free(m->ctx.dev, ACX_MEM_TRANSIENT, m->dev_scratch, 16);
        m->dev_scratch = NULL;
    }
    acx_comm_destroy(st->replica);
    free(st->units);
    free(st);
    m->strategy_state = NULL;
    m->shard_comm = NULL;
    m->plan.read_group = NULL; /* was st->replica */
}

#define SHARDED_OPS(NAME, PREPARE)                                                                 \
    {                                                                                              \
        .name = NAME, .prepare = PREPARE, .acquire = sharded_acquire, .release = sharded_release,  \
        .materialize_grads = sharded_materialize_grads, .grads_ready = sharded_grads_ready,        \
        .backward_end = sharded_backward_end, .after_step = sharded_after_step,                    \
        .zero_grad = sharded_zero_grad, .destroy = sharded_destroy,                                \
    }

const acx_strategy_ops_t acx_strategy_shard_grad_op = SHARDED_OPS("shard_grad_op", grad_op_prepare);
const acx_strategy_ops_t acx_strategy_full_shard = SHARDED_OPS("full_shard", full_prepare);
const acx_strategy_ops_t acx_strategy_hybrid_shard = SHARDED_OPS("hybrid_shard", hybrid_prepare);

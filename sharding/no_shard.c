/*
 * sharding/no_shard.c — NO_SHARD (DDP): every rank holds all parameters,
 * gradients and optimizer state; gradients are averaged with bucketed
 * all-reduces that overlap the rest of backward.
 *
 * Storage layout. Parameters and gradients live in two flat fp32 arrays laid
 * out in *ready order* — reverse registration order, the order backward
 * produces gradients — so that every fusion bucket is one contiguous range of
 * the gradient array and is all-reduced in place (PyTorch DDP's
 * gradient_as_bucket_view, without its copy-in fallback):
 *
 *   flat_grad: [ p_last ... | ... p_1 | p_0 ]   bucket 0 starts at p_last
 *
 * The local shard the optimizer sees is the whole model: master == the flat
 * parameter array, shard_grad == the flat gradient array, so the optimizer
 * updates the parameters the program reads, with no copy after the step.
 *
 * Mixed precision (param_dtype bf16/fp16): the fp32 master weights get their
 * own array (same offsets) and the parameters the program reads hold the
 * master values rounded to param_dtype (nearest, ties to even), refreshed
 * after every step. A reduce_dtype of 16 bits adds a 16-bit wire buffer the
 * buckets round into and reduce in (collectives/bucket.c).
 *
 * Device-resident state (m->ctx.dev: device_state cuda, or the emulated
 * test device). The same arrays, same layout and offsets, live in device
 * memory through the device table (device/ops.h): initial values are
 * computed on the host per parameter (acx_param_init_fill, the same values
 * as with host state) and copied in; zero_grad is a memset and the
 * mixed-precision refresh a half_round_f32 launch, both on the program's
 * compute stream; the buckets scale and cast on the device
 * (acx_buckets_set_device). A host-side pointer to device memory is never
 * dereferenced here.
 *
 * CPU offload of the optimizer (m->ctx.offload: offload_optimizer: cpu,
 * with device state; ZeRO-Offload's split for NO_SHARD). Device memory
 * holds flat_param (the compute copy, param_dtype values in fp32 slots),
 * flat_grad and the wire; host memory from dev->host_alloc (pinned with
 * CUDA) holds the fp32 master weights host_master — always, in fp32
 * training too: the master is the optimizer's parameter copy — and
 * host_grad, the reduced gradients. The model's local shard (m->master,
 * m->shard_grad) is the host pair and m->shard_dev is NULL, so the loss
 * scaler, clipping, the optimizer (base/optim_kernels.c on the CPU) and
 * checkpoints run their host code on it, exactly as host NO_SHARD does.
 * Each bucket is copied device -> host as its reduction completes (the
 * buckets' done hook: offload_bucket_done), while later buckets are still
 * reducing, on a copy stream of its own, without a host wait:
 *
 *   compute stream: ... widen bucket k | record ready ...(backward goes on)
 *   copy stream:          wait ready --> copy bucket k into host_grad
 *
 * (ready: one event, re-recorded per bucket; each wait captures the latest
 * record). The host waits once, for an event recorded on the copy stream
 * after the last copy (copied), right before host code touches host_grad:
 * acx_model_grads_to_host (no_shard_grads_to_host), called by the loss
 * scaler, clipping and the optimizer step, and by the write-back below.
 * zero_grad makes the compute stream wait for `copied` before zeroing the
 * device gradients the copies read (a stream wait, not a host wait).
 * After the step the whole compute copy is written back with one
 * host -> device copy (synchronous): from host_master in fp32 training,
 * from host_grad holding the master rounded to param_dtype under mixed
 * precision (the reduced gradients are used up by then; the next
 * boundary's copies overwrite it).
 *
 * Checkpoints. Every rank holds every row: a save splits the writing over
 * the world (the plan's replicas). A load is split over the nodes only
 * (the plan's read group: one rank per node, the same local rank): the
 * ranks of a node read the same rows, which the node's page cache fetches
 * from storage once, each copying and checksumming them itself, and the
 * nodes all-gather their parts. Splitting within a node too (each rank 1/N,
 * then an all-gather through shared memory) measured slower on the 2-core
 * build machine: a 1 GiB load on 2 ranks spent 0.6 s reading and
 * checksumming its half and 1.3-6.4 s in the MPI_Allgatherv (Open MPI 4.1
 * vader, no single-copy mechanism; 0.5-0.7 s for the same all-gather alone,
 * 0.27 s with CMA), while reading the other half from the page cache and
 * checksumming it costs ~0.2 s.
 */
#include <stdlib.h>
#include <string.h>

#include "collectives/bucket.h"
#include "base/half.h"
#include "base/error.h"
#include "base/log.h"
#include "base/memstat.h"
#include "base/param_init.h"
#include "sharding/model.h"

typedef struct no_shard_state {
    const acx_devops_t *dev; /* device-resident state, or NULL (host memory) */
    float *flat_param;       /* [numel] in ready order */
    float *flat_grad;        /* [numel] in ready order */
    float *master;  /* [numel] fp32 master weights under mixed precision; else flat_param */
    uint16_t *wire; /* [numel] 16-bit gradients on the wire, or NULL */
    /* offload_optimizer: cpu: host memory (dev->host_alloc), else NULL */
    float *host_master;    /* [numel] fp32 master weights (m->master) */
    float *host_grad;      /* [numel] reduced gradients (m->shard_grad); after a step, the
                              rounded compute copy under mixed precision */
    void *copy_stream;     /* offload: the stream of the gradient copies (dev->stream_create) */
    void *ev_ready;        /* offload: recorded on the compute stream when a bucket is final */
    void *ev_copied;       /* offload: recorded on the copy stream after the copies */
    int copies_unrecorded; /* copies enqueued since ev_copied was last recorded */
    int copies_unwaited;   /* copies enqueued that the host has not waited for */
    acx_model_t *model;    /* for the done hook */
    acx_buckets_t *buckets;
    acx_comm_t *load_comm; /* m->plan.read_group (owned), or NULL */
} no_shard_state_t;

static int mixed(const acx_model_t *m) { return m->ctx.param_dtype != ACX_DTYPE_FLOAT32; }

/* The checkpoint-load group (see the file comment): the ranks with this
 * rank's local rank, one per node, when there are several nodes of equal
 * rank counts; else NULL. Collective over the world. */
static acx_status_t load_group(acx_model_t *m, acx_comm_t **comm_p) {
    acx_comm_t *world = m->ctx.world, *node = m->ctx.node;
    *comm_p = NULL;
    if (node == NULL || node->size == world->size) return ACX_OK; /* one node */
    int sz[2] = {node->size, -node->size};
    ACX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sz, 2, MPI_INT, MPI_MAX, world->mpi));
    if (sz[0] != -sz[1]) return ACX_OK; /* unequal nodes: every rank reads every row */
    return acx_comm_split(world, node->rank, world->rank, comm_p);
}

/* ---- device-resident state ---- */

/* The arrays in device memory (zeroed), accounted as device bytes, plus
 * the scalar scratch of the scaler and clipping; with offload, the master
 * weights and the gradients' host copy in host memory instead of the
 * device master and the scratch (host counters). */
static acx_status_t device_alloc(acx_model_t *m, no_shard_state_t *s) {
    const acx_devops_t *d = s->dev;
    size_t n = (size_t)m->numel;
    ACX_CHECK(acx_devops_alloc(d, ACX_MEM_PARAMS, n * sizeof(float), "parameters",
                               (void **)&s->flat_param));
    ACX_CHECK(
        acx_devops_alloc(d, ACX_MEM_GRADS, n * sizeof(float), "gradients", (void **)&s->flat_grad));
    s->master = s->flat_param;
    if (m->ctx.offload) {
        ACX_CHECK(acx_devops_host_alloc(d, ACX_MEM_MASTER, n * sizeof(float),
                                        "offloaded master weights", (void **)&s->host_master));
        ACX_CHECK(acx_devops_host_alloc(d, ACX_MEM_GRADS, n * sizeof(float),
                                        "host copy of the reduced gradients",
                                        (void **)&s->host_grad));
        s->master = s->host_master;
        ACX_CHECK(d->stream_create("the offloaded gradients' copy stream", &s->copy_stream));
        ACX_CHECK(d->event_create(&s->ev_ready));
        ACX_CHECK(d->event_create(&s->ev_copied));
        if (m->ctx.reduce_dtype != ACX_DTYPE_FLOAT32)
            ACX_CHECK(acx_devops_alloc(d, ACX_MEM_GRADS, n * sizeof(uint16_t),
                                       "gradient wire buffer", (void **)&s->wire));
        return ACX_OK;
    }
    if (mixed(m))
        ACX_CHECK(acx_devops_alloc(d, ACX_MEM_MASTER, n * sizeof(float), "master weights",
                                   (void **)&s->master));
    if (m->ctx.reduce_dtype != ACX_DTYPE_FLOAT32)
        ACX_CHECK(acx_devops_alloc(d, ACX_MEM_GRADS, n * sizeof(uint16_t), "gradient wire buffer",
                                   (void **)&s->wire));
    return acx_devops_alloc(d, ACX_MEM_TRANSIENT, 16, "scalar results", &m->dev_scratch);
}

/* p's initial values, computed on the host exactly as with host state and
 * copied to master[off .. off + numel) on the device. One host block per
 * parameter at a time bounds the host memory this needs. (With offload the
 * master is host memory and is filled directly.) */
static acx_status_t device_init_param(acx_model_t *m, no_shard_state_t *s, acx_param_t *p,
                                      size_t off) {
    size_t bytes = (size_t)p->numel * sizeof(float);
    float *host = acx_malloc(bytes ? bytes : 1, "initial values");
    if (host == NULL) return ACX_ERR_NO_MEMORY;
    acx_param_init_fill(&p->init, p->ndim, p->shape, m->ctx.seed, p->name, 0, p->rows, host);
    acx_status_t status = s->dev->to_device(s->master + off, host, bytes, m->ctx.stream);
    free(host);
    return status;
}

/* ---- CPU offload of the optimizer ---- */

/* The buckets' done hook: bucket [offset, offset + count) of the device
 * gradients is reduced (and widened back, enqueued on the compute stream):
 * the copy stream waits for that point and copies the range into
 * host_grad. The host does not wait here. */
static acx_status_t offload_bucket_done(void *arg, size_t offset, size_t count) {
    no_shard_state_t *s = arg;
    const acx_devops_t *d = s->dev;
    ACX_CHECK(d->event_record(s->ev_ready, s->model->ctx.stream));
    ACX_CHECK(d->stream_wait_event(s->copy_stream, s->ev_ready));
    ACX_CHECK(d->to_host_async(s->host_grad + offset, s->flat_grad + offset, count * sizeof(float),
                               s->copy_stream));
    s->copies_unrecorded = 1;
    s->copies_unwaited = 1;
    return ACX_OK;
}

/* ev_copied captures every copy enqueued so far. */
static acx_status_t offload_record_copied(no_shard_state_t *s) {
    if (!s->copies_unrecorded) return ACX_OK;
    ACX_CHECK(s->dev->event_record(s->ev_copied, s->copy_stream));
    s->copies_unrecorded = 0;
    return ACX_OK;
}

/* The host is about to touch host_grad: wait for the copies into it. */
static acx_status_t no_shard_grads_to_host(acx_model_t *m) {
    no_shard_state_t *s = m->strategy_state;
    if (!m->ctx.offload || !s->copies_unwaited) return ACX_OK;
    ACX_CHECK(offload_record_copied(s));
    ACX_CHECK(s->dev->event_sync(s->ev_copied));
    s->copies_unwaited = 0;
    return ACX_OK;
}

/* The compute copy from the host master weights, in one host -> device
 * copy: fp32 training copies host_master itself; mixed precision rounds it
 * to param_dtype into host_grad first (see the file comment). */
static acx_status_t offload_write_back(acx_model_t *m, no_shard_state_t *s) {
    size_t n = (size_t)m->numel;
    const float *src = s->host_master;
    if (mixed(m)) {
        ACX_CHECK(no_shard_grads_to_host(m)); /* host_grad is overwritten */
        acx_half_round_f32_n(m->ctx.param_dtype, s->host_master, s->host_grad, n);
        src = s->host_grad;
    }
    return s->dev->to_device(s->flat_param, src, n * sizeof(float), m->ctx.stream);
}

static acx_status_t no_shard_prepare(acx_model_t *m) {
    acx_status_t status = ACX_OK;
    size_t n = (size_t)m->numel;
    no_shard_state_t *s = acx_calloc(1, sizeof *s, "NO_SHARD state");
    acx_bucket_segment_t *segs = NULL;
    if (s == NULL) return ACX_ERR_NO_MEMORY;
    m->strategy_state = s;
    s->dev = m->ctx.dev;
    s->model = m;
    if (s->dev != NULL) {
        status = device_alloc(m, s);
        if (status != ACX_OK) goto out;
    } else {
        s->flat_param = acx_mem_alloc(ACX_MEM_PARAMS, n * sizeof(float), "parameters");
        s->flat_grad = acx_mem_alloc(ACX_MEM_GRADS, n * sizeof(float), "gradients");
        s->master = mixed(m) ? acx_mem_alloc(ACX_MEM_MASTER, n * sizeof(float), "master weights")
                             : s->flat_param;
        if (m->ctx.reduce_dtype != ACX_DTYPE_FLOAT32)
            s->wire = acx_mem_alloc(ACX_MEM_GRADS, n * sizeof(uint16_t), "gradient wire buffer");
        if (s->flat_param == NULL || s->flat_grad == NULL || s->master == NULL ||
            (m->ctx.reduce_dtype != ACX_DTYPE_FLOAT32 && s->wire == NULL)) {
            status = ACX_ERR_NO_MEMORY;
            goto out;
        }
    }
    segs = acx_malloc((size_t)m->num_params * sizeof *segs, "bucket segments");
    if (segs == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto out;
    }
    /* every rank holds every row: the replicas are the whole world */
    m->shard_comm = NULL;
    status = load_group(m, &s->load_comm);
    if (status != ACX_OK) goto out;
    acx_plan_set(&m->plan, 0, 1, m->ctx.world->rank, m->ctx.world->size, s->load_comm);

    size_t off = 0;
    for (int i = m->num_params - 1, k = 0; i >= 0; i--, k++) {
        acx_param_t *p = m->params[i];
        p->data = s->flat_param + off;
        p->grad = s->flat_grad + off;
        acx_plan_owned_rows(&m->plan, p->rows, &p->row_begin, &p->row_end); /* all of them */
        p->shard_offset = off;
        p->shard_rows = acx_plan_piece_rows(&m->plan, p->rows);
        p->full_offset = off;
        /* Every rank computes every value itself: the initializer is keyed
         * by (seed, name, element), so no broadcast from rank 0 is needed
         * for the replicas to agree. */
        if (s->dev != NULL && !m->ctx.offload)
            status = device_init_param(m, s, p, off);
        else
            acx_param_init_fill(&p->init, p->ndim, p->shape, m->ctx.seed, p->name, 0, p->rows,
                                s->master + off);
        if (status != ACX_OK) goto out;
        segs[k] = (acx_bucket_segment_t){
            .offset = off, .count = (size_t)p->numel, .unit = p->unit->index};
        off += (size_t)p->numel;
    }
    if (m->ctx.offload)
        status = offload_write_back(m, s);
    else if (mixed(m) && s->dev != NULL)
        status =
            s->dev->half_round_f32(m->ctx.param_dtype, s->master, s->flat_param, n, m->ctx.stream);
    else if (mixed(m))
        acx_half_round_f32_n(m->ctx.param_dtype, s->master, s->flat_param, n);
    if (status != ACX_OK) goto out;
    m->master = s->master;
    m->shard_grad = m->ctx.offload ? s->host_grad : s->flat_grad;
    m->shard_numel = n;
    status = acx_buckets_create(m->ctx.world, s->flat_grad, ACX_DTYPE_FLOAT32, n, m->num_units,
                                m->num_params, segs, m->ctx.bucket_bytes, &s->buckets);
    if (status == ACX_OK && s->dev != NULL)
        status = acx_buckets_set_device(s->buckets, s->dev, &m->ctx.stream);
    if (status == ACX_OK && s->wire != NULL)
        status = acx_buckets_set_wire(s->buckets, m->ctx.reduce_dtype, s->wire);
    if (status == ACX_OK && m->ctx.offload)
        status = acx_buckets_on_done(s->buckets, offload_bucket_done, s);
    if (status == ACX_OK)
        ACX_INFO(ACX_SUBSYS_SHARD,
                 "NO_SHARD: %zu parameters' elements in %d gradient bucket(s) of <= %zu bytes; "
                 "state in %s memory%s",
                 n, acx_buckets_count(s->buckets), m->ctx.bucket_bytes,
                 s->dev != NULL ? s->dev->name : "host",
                 m->ctx.offload ? "; master weights and optimizer offloaded to host memory" : "");
out:
    free(segs);
    return status;
}

/* Parameters are always resident: acquire and release have nothing to do. */
static acx_status_t no_shard_acquire(acx_unit_t *u) { return ACX_OK; }
static acx_status_t no_shard_release(acx_unit_t *u) { return ACX_OK; }

/* A shared unit's parameters are its owner's (their segments carry the
 * owner's index): the owner's buckets are reported once, after the last of
 * its uses, so no bucket starts while a use may still add into it. */
static acx_status_t no_shard_grads_ready(acx_unit_t *u) {
    acx_model_t *m = u->model;
    if (!m->sync) return ACX_OK; /* accumulate locally; nothing to communicate */
    if (!acx_unit_uses_complete(u)) return ACX_OK;
    no_shard_state_t *s = m->strategy_state;
    acx_unit_storage(u)->reductions++;
    return acx_buckets_unit_ready(s->buckets, acx_unit_storage(u)->index, m->grad_prescale);
}

static acx_status_t no_shard_backward_end(acx_model_t *m) {
    no_shard_state_t *s = m->strategy_state;
    if (!m->sync) return ACX_OK;
    return acx_buckets_wait_all(s->buckets);
}

/* The optimizer updated the master weights; under mixed precision the
 * compute copies follow (rounded). */
static acx_status_t no_shard_after_step(acx_model_t *m) {
    no_shard_state_t *s = m->strategy_state;
    if (m->ctx.offload) return offload_write_back(m, s);
    if (mixed(m) && s->dev != NULL)
        return s->dev->half_round_f32(m->ctx.param_dtype, s->master, s->flat_param,
                                      (size_t)m->numel, m->ctx.stream);
    if (mixed(m))
        acx_half_round_f32_n(m->ctx.param_dtype, s->master, s->flat_param, (size_t)m->numel);
    return ACX_OK;
}

static acx_status_t no_shard_zero_grad(acx_model_t *m) {
    no_shard_state_t *s = m->strategy_state;
    if (m->ctx.offload && s->copies_unwaited) { /* the copies still read flat_grad */
        ACX_CHECK(offload_record_copied(s));
        ACX_CHECK(s->dev->stream_wait_event(m->ctx.stream, s->ev_copied));
    }
    if (s->dev != NULL)
        return s->dev->memset(s->flat_grad, 0, (size_t)m->numel * sizeof(float), m->ctx.stream);
    memset(s->flat_grad, 0, (size_t)m->numel * sizeof(float));
    return ACX_OK;
}

static void no_shard_destroy(acx_model_t *m) {
    no_shard_state_t *s = m->strategy_state;
    if (s == NULL) return;
    acx_buckets_destroy(s->buckets);
    acx_comm_destroy(s->load_comm);
    m->plan.read_group = NULL;
    size_t n = (size_t)m->numel;
    if (s->dev != NULL) {
        /* nothing acx enqueued may still run on the buffers */
        if (s->dev->sync(m->ctx.stream) != ACX_OK)
            ACX_WARN(ACX_SUBSYS_SHARD, "NO_SHARD: synchronizing before freeing device state: %s",
                     acx_last_error());
        if (m->ctx.offload) {
            /* the copies still queued write host_grad: done before it goes */
            if (s->copy_stream != NULL && s->dev->sync(s->copy_stream) != ACX_OK)
                ACX_WARN(ACX_SUBSYS_SHARD,
                         "NO_SHARD: synchronizing the gradient copy stream before freeing "
                         "the host gradients: %s",
                         acx_last_error());
            s->dev->stream_destroy(s->copy_stream);
            s->dev->event_destroy(s->ev_ready);
            s->dev->event_destroy(s->ev_copied);
            acx_devops_host_free(s->dev, ACX_MEM_MASTER, s->host_master, n * sizeof(float));
            acx_devops_host_free(s->dev, ACX_MEM_GRADS, s->host_grad, n * sizeof(float));
        } else if (s->master != s->flat_param) {
            acx_devops_free(s->dev, ACX_MEM_MASTER, s->master, n * sizeof(float));
        }
        acx_devops_free(s->dev, ACX_MEM_GRADS, s->wire, n * sizeof(uint16_t));
        acx_devops_free(s->dev, ACX_MEM_PARAMS, s->flat_param, n * sizeof(float));
        acx_devops_free(s->dev, ACX_MEM_GRADS, s->flat_grad, n * sizeof(float));
        acx_devops_free(s->dev, ACX_MEM_TRANSIENT, m->dev_scratch, 16);
        m->dev_scratch = NULL;
    } else {
        if (s->master != s->flat_param) acx_mem_free(ACX_MEM_MASTER, s->master, n * sizeof(float));
        acx_mem_free(ACX_MEM_GRADS, s->wire, n * sizeof(uint16_t));
        acx_mem_free(ACX_MEM_PARAMS, s->flat_param, n * sizeof(float));
        acx_mem_free(ACX_MEM_GRADS, s->flat_grad, n * sizeof(float));
    }
    free(s);
    m->strategy_state = NULL;
}

const acx_strategy_ops_t acx_strategy_no_shard = {
    .name = "no_shard",
    .prepare = no_shard_prepare,
    .acquire = no_shard_acquire,
    .release = no_shard_release,
    .grads_ready = no_shard_grads_ready,
    .backward_end = no_shard_backward_end,
    .after_step = no_shard_after_step,
    .zero_grad = no_shard_zero_grad,
    .grads_to_host = no_shard_grads_to_host,
    .destroy = no_shard_destroy,
};

/*
 * sharding/model.h — the model, unit and parameter objects, and the
 * strategy interface (library-private).
 *
 * The program registers parameters; a strategy (NO_SHARD here; SHARD_GRAD_OP,
 * FULL_SHARD, HYBRID_SHARD later) decides at prepare where their storage
 * lives and how units are gathered and gradients reduced. Whatever the
 * strategy, the rank's *local shard* is presented to the optimizer the same
 * way: flat fp32 arrays `master` and `grad` of `shard_numel` elements, with
 * each parameter's owned rows at param->shard_offset. The optimizer runs one
 * fused loop over those arrays and never needs to know the strategy.
 *
 * Which rank owns, writes and reads which rows is the model's plan
 * (sharding/plan.h), filled by the strategy at prepare.
 */
#ifndef ACX_SHARDING_MODEL_H
#define ACX_SHARDING_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "acx/config.h"
#include "acx/model.h"
#include "collectives/coll.h"
#include "device/ops.h"
#include "sharding/plan.h"

/* A collective a sharded strategy is about to run on one unit, as the
 * debug mode compares it across ranks (acx_shard_context_t.unit_check). */
typedef struct acx_unit_call {
    int reduce_scatter; /* 0: all-gather of its parameters, 1: reduce-scatter of its gradients */
    int unit;           /* the unit's index in the model */
    const char *name;   /* the unit's name */
    size_t count;       /* elements per rank (the unit's segment) */
    acx_dtype_t dtype;  /* on the wire */
} acx_unit_call_t;

/* What the runtime hands the model at creation (so sharding never includes
 * runtime headers). */
typedef struct acx_shard_context {
    acx_comm_t *world; /* all ranks */
    acx_comm_t *node;  /* ranks of this node (HYBRID_SHARD) */
    uint64_t seed;
    int strategy; /* acx_sharding_strategy_t */
    size_t bucket_bytes;
    acx_dtype_t param_dtype;  /* compute copies: float32, or bfloat16/float16 (mixed precision) */
    acx_dtype_t reduce_dtype; /* gradients on the wire: float32, bfloat16 or float16 */
    int forward_prefetch;     /* fsdp.* options (acx/config.h) */
    int backward_prefetch;
    int limit_all_gathers;
    void *owner; /* the runtime's accelerator (opaque here) */
    /* Device-resident state (device_state: cuda or emulated), else NULL:
     * the strategy keeps parameters, gradients and master weights in this
     * device's memory, and the runtime keeps optimizer state there too. The
     * choice is made once, at acx_init; everything branches on it at
     * prepare, not per element. Every strategy (sharding/no_shard.c,
     * sharding/sharded.c). */
    const acx_devops_t *dev;
    /* The stream the program's kernels run on (acx_set_compute_stream; NULL:
     * the legacy default stream): device work acx enqueues on the model's
     * buffers goes there, after the program's. */
    void *stream;
    /* offload_optimizer: cpu (needs dev; NO_SHARD only): the parameters the
     * program computes with and the gradients stay in dev's memory; the
     * fp32 master weights, a host copy of the reduced gradients and the
     * optimizer state live in host memory (dev->host_alloc: pinned with
     * CUDA) and the step runs on the CPU (sharding/no_shard.c). */
    int offload;
    /* ACX_DEBUG_MODE (runtime/coll_debug.c), else NULL: the sharded
     * strategies call it on every rank of `comm` right before each
     * collective on a unit; it compares the call across comm's ranks and
     * returns the same error on all of them when they differ (ranks that
     * gather or reduce different units would otherwise mix their data or
     * hang). Collective over comm. */
    acx_status_t (*unit_check)(void *owner, acx_comm_t *comm, const acx_unit_call_t *call);
} acx_shard_context_t;

struct acx_param {
    char name[ACX_MAX_NAME];
    int ndim;
    int64_t shape[ACX_MAX_DIMS];
    int64_t numel;
    int64_t rows;      /* shape[0] */
    int64_t row_numel; /* numel / rows */
    acx_init_spec_t init;
    int index; /* registration index in the model */
    acx_unit_t *unit;

    /* valid after prepare */
    float *data;       /* full values; valid while the unit is acquired */
    float *grad;       /* full gradient the program adds into */
    int64_t row_begin; /* rows owned by this rank in the local shard */
    int64_t row_end;
    size_t shard_offset; /* element offset of the owned rows in the shard arrays */
    /* sharded strategies: the unit's per-rank segment holds, for each of its
     * params, a piece of shard_rows rows (the owned ones, then zero padding) */
    int64_t shard_rows;  /* ceil(rows / shard group size) */
    size_t piece_offset; /* element offset of the piece in the unit's segment */
    size_t full_offset;  /* element offset of the full values in the unit's buffers */
    /* ACX_DEBUG_MODE with host state (model.c, write check): a checksum of
     * data taken when acx made it (acquire, after a step or a load), valid
     * while data_sum_set; compared at release and before the next step */
    uint64_t data_sum;
    int data_sum_set;
    /* a write found at a release: reported on every rank (agreed) before
     * the next optimizer step, since a release is not collective and the
     * write is often on one rank only (rank-0-only code) */
    int data_written;
};

/* A unit is either ordinary (owner NULL: it has parameters and storage)
 * or a *shared unit* of another unit (acx_model_add_shared_unit): a use of
 * the owner's parameters at another point of the forward order (GPT's
 * token embedding reused as the output layer). A shared unit has no
 * parameters, no storage and no segment; everything about storage —
 * gathered values, the full gradient buffer, the reduction — is kept on
 * the owner, and the strategies map a unit to its storage with
 * acx_unit_storage. What a shared unit keeps is its own position (index)
 * in the order, which the prefetch direction rule reads (sharded.c), and
 * its own acquire count and grads_ready report. */
struct acx_unit {
    char name[ACX_MAX_NAME];
    int index; /* position in the forward (registration) order */
    acx_model_t *model;
    acx_param_t **params;
    int num_params, cap_params;
    int acquired;       /* acquire count (nesting allowed) */
    int grads_reported; /* this micro-step */
    size_t numel;       /* elements of all its parameters (set at prepare) */
    acx_unit_t *owner;  /* shared unit: the unit whose parameters it uses; else NULL */
    /* Storage units only (owner NULL): */
    int num_uses;      /* 1 + its shared units */
    int uses_held;     /* units of {this, its shared units} acquired now: the full values
                          must stay while it is > 0 */
    int uses_reported; /* of num_uses, those that called grads_ready this micro-step:
                          the reduction starts when all have */
    /* Counted since prepare, for tests: */
    uint64_t gathers;    /* all-gathers of its storage started (sharded strategies) */
    uint64_t reductions; /* reductions of its gradients started: its buckets reported
                            (NO_SHARD), reduce-scatters (sharded strategies) */
};

/* The unit that holds u's storage: u's owner for a shared unit, else u. */
static inline acx_unit_t *acx_unit_storage(acx_unit_t *u) {
    return u->owner != NULL ? u->owner : u;
}

/* Every use of u's storage (the owner and its shared units) has reported
 * grads_ready in this micro-step: the gradient buffer is final and may be
 * reduced. */
static inline int acx_unit_uses_complete(acx_unit_t *u) {
    const acx_unit_t *s = acx_unit_storage(u);
    return s->uses_reported == s->num_uses;
}

/* Prefetch statistics of the sharded strategies (FULL_SHARD, HYBRID_SHARD),
 * counted since prepare; tests read them to see that prefetching fires. */
typedef struct acx_prefetch_stats {
    uint64_t forward;  /* all-gathers started by forward prefetch */
    uint64_t backward; /* all-gathers started by backward prefetch (pre or post) */
} acx_prefetch_stats_t;

typedef struct acx_strategy_ops acx_strategy_ops_t;

struct acx_model {
    acx_shard_context_t ctx;
    acx_unit_t **units;
    int num_units, cap_units;
    acx_param_t **params;
    int num_params, cap_params;
    int64_t numel;
    int prepared;

    const acx_strategy_ops_t *strategy;
    void *strategy_state;

    /* the local shard (valid after prepare) */
    float *master;     /* [shard_numel] fp32 master weights of the owned rows */
    float *shard_grad; /* [shard_numel] reduced gradients of the owned rows */
    /* With ctx.dev: master and shard_grad (and every param's data/grad) are
     * device pointers, and dev_scratch is 16 bytes of device memory for the
     * scalar results read back by the loss scaler (an int at byte 0) and
     * clipping (a double at byte 8). NULL with host state. */
    void *dev_scratch;
    /* Where master and shard_grad live: ctx.dev with device state, NULL
     * (host memory) with host state or with ctx.offload. The optimizer,
     * the loss scaler, clipping and checkpoints branch on this, not on
     * ctx.dev. Set by acx_model_prepare. */
    const acx_devops_t *shard_dev;
    size_t shard_numel;
    /* shard_comm: the ranks among which rows are split (NULL under
     * NO_SHARD: every rank holds every row) — norms and gathers reduce over
     * it. Who owns, writes and reads which rows: the plan (sharding/plan.h;
     * its read group is owned by the strategy). Replicas on the same node
     * do not split a read: they read the same rows, which the node's page
     * cache reads from storage once, each checking its own — an all-gather
     * through shared memory measured slower than that copy and checksum
     * (see sharding/no_shard.c). */
    acx_comm_t *shard_comm;
    acx_shard_plan_t plan;

    /* set by the runtime before each micro-step */
    int sync;            /* this micro-step ends at a boundary */
    float grad_prescale; /* 1 / (world size x micro-steps accumulated) */
    int64_t step;        /* optimizer steps taken (written into weight files) */
    /* A unit reported gradients (acx_unit_grads_ready) since the last
     * optimizer step or zero_grad: they were computed with the current
     * weights, so acx_model_load_weights refuses to replace those. Set by
     * model.c, cleared by zero_grad and by the optimizer step (runtime/). */
    int grads_pending;

    acx_prefetch_stats_t prefetch_stats; /* sharded strategies */
};

struct acx_strategy_ops {
    const char *name;
    /* Allocate storage, fill the owned rows with initial values
     * (acx_param_init_fill), set every param's data/grad/row range/
     * shard_offset and the model's shard arrays; plan communication. Collective. */
    acx_status_t (*prepare)(acx_model_t *m);
    /* u's acquire count went 0 -> 1 (acquire) or 1 -> 0 (release); model.c
     * has updated the storage unit's uses_held first. u may be a shared
     * unit: the values to gather or free are its storage unit's, and the
     * storage is freed only when uses_held is 0. */
    acx_status_t (*acquire)(acx_unit_t *u);
    acx_status_t (*release)(acx_unit_t *u);
    /* Make the unit's full gradient buffers exist (zeroed) and set every
     * param's grad; NULL when they always exist (NO_SHARD). */
    acx_status_t (*materialize_grads)(acx_unit_t *u);
    /* Unit u (ordinary or shared) reported; model.c has counted the report
     * on its storage unit. On m->sync, once every use of the storage has
     * reported (acx_unit_uses_complete), start reducing what the storage
     * unit completes — once per boundary, after the last use. */
    acx_status_t (*grads_ready)(acx_unit_t *u);
    /* On m->sync, wait for all reductions: shard_grad then holds the mean. */
    acx_status_t (*backward_end)(acx_model_t *m);
    /* After the optimizer updated `master`: make data consistent again
     * (NO_SHARD: nothing; ZeRO-2: all-gather). Collective. */
    acx_status_t (*after_step)(acx_model_t *m);
    acx_status_t (*zero_grad)(acx_model_t *m);
    /* The host is about to read or write shard_grad (host memory: shard_dev
     * NULL): wait for the asynchronous copies still filling it (NO_SHARD
     * with CPU offload). NULL when shard_grad is never filled
     * asynchronously. */
    acx_status_t (*grads_to_host)(acx_model_t *m);
    void (*destroy)(acx_model_t *m);
};

extern const acx_strategy_ops_t acx_strategy_no_shard;
extern const acx_strategy_ops_t acx_strategy_shard_grad_op; /* sharding/sharded.c */
extern const acx_strategy_ops_t acx_strategy_full_shard;
extern const acx_strategy_ops_t acx_strategy_hybrid_shard;

/* Rows [*begin_p, *end_p) of p that this rank writes into a checkpoint or
 * weight file: the model's plan for p's owned rows (acx_plan_write_rows;
 * the replicas together write each row exactly once). */
void acx_param_save_rows(const acx_param_t *p, int64_t *begin_p, int64_t *end_p);

/* Rows [*begin_p, *end_p) of p that this rank reads from a checkpoint: the
 * model's plan for p's owned rows (acx_plan_read_rows); the members of
 * plan.read_group then all-gather the parts. */
void acx_param_load_rows(const acx_param_t *p, int64_t *begin_p, int64_t *end_p);

/* Create/destroy a model (registration functions are public, in model.c). */
acx_status_t acx_model_new(const acx_shard_context_t *ctx, acx_model_t **model_p);
void acx_model_free(acx_model_t *m);

/* Pick the strategy from ctx and run its prepare. Collective. */
acx_status_t acx_model_prepare(acx_model_t *m);

/* Strategy dispatch used by the runtime. */
acx_status_t acx_model_backward_end(acx_model_t *m);
acx_status_t acx_model_after_step(acx_model_t *m);
/* ACX_DEBUG_MODE with host state: did the program write into a compute
 * copy (acx_param_data is read-only) since acx made it? ACX_ERR_STATE
 * naming the first such parameter, agreed over the world (collective in
 * debug mode; ACX_OK at once otherwise). The optimizer calls it before
 * each step; acx_unit_release checks the unit's own parameters. */
acx_status_t acx_model_check_writes(acx_model_t *m);
acx_status_t acx_model_zero_grad(acx_model_t *m);
/* Call before host code reads or writes m->shard_grad when m->shard_dev is
 * NULL (the loss scaler, clipping, the optimizer step): waits for the
 * device -> host gradient copies still in flight, if the strategy has any
 * (strategy->grads_to_host); ACX_OK at once otherwise. Not collective. */
acx_status_t acx_model_grads_to_host(acx_model_t *m);

#endif /* ACX_SHARDING_MODEL_H */

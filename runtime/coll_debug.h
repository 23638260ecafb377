/*
 * runtime/coll_debug.h — the collective debug mode (ACX_DEBUG_MODE) and the
 * per-accelerator sequence number of public collectives (library-private to
 * runtime/).
 *
 * Every public collective (runtime/collectives_api.c, runtime/eval.c) calls
 * acx_coll_debug_check first, on every rank, with what it is about to do and
 * the outcome of its own argument checks. Off (the default) that is a
 * counter increment and a branch; on, it is one MPI_Allgather of a fixed
 * record per rank and a comparison (coll_debug.c). What the mode promises is
 * documented in acx/collectives.h. In debug mode the sharded strategies'
 * collectives on a unit are checked the same way, through the hook
 * acx_coll_debug_unit_check that acx_model_create puts in the shard context.
 */
#ifndef ACX_RUNTIME_COLL_DEBUG_H
#define ACX_RUNTIME_COLL_DEBUG_H

#include <stdint.h>

#include "runtime/accelerator.h"
#include "sharding/model.h"

/* The public collectives, as named in reports. Blocking and non-blocking
 * forms are distinct: MPI never matches one with the other. */
typedef enum acx_coll_id {
    ACX_COLL_ALL_REDUCE,
    ACX_COLL_ALL_REDUCE_ASYNC,
    ACX_COLL_REDUCE_SCATTER,
    ACX_COLL_REDUCE_SCATTER_ASYNC,
    ACX_COLL_BROADCAST,
    ACX_COLL_BROADCAST_ASYNC,
    ACX_COLL_ALL_GATHER,
    ACX_COLL_ALL_GATHER_ASYNC,
    ACX_COLL_GATHER,
    ACX_COLL_GATHER_ASYNC,
    ACX_COLL_BARRIER,
    ACX_COLL_BARRIER_ASYNC,
    ACX_COLL_REDUCE_SCALAR,
    ACX_COLL_REDUCE,
    ACX_COLL_GATHER_FOR_METRICS,
    ACX_COLL_PAD_ACROSS_PROCESSES,
    ACX_COLL_MAIN_PROCESS_FIRST,
    ACX_COLL_LOCAL_MAIN_PROCESS_FIRST,
    ACX_COLL_CHECK_TRIGGER,
    /* not public calls: the sharded strategies' collectives on a unit
     * (acx_unit_acquire, acx_unit_grads_ready, the refresh after a step),
     * checked through acx_coll_debug_unit_check */
    ACX_COLL_UNIT_ALL_GATHER,
    ACX_COLL_UNIT_REDUCE_SCATTER,
    ACX_COLL_ID_COUNT_
} acx_coll_id_t;

/* One call as this rank sees it. -1 marks a field the operation does not
 * have (a barrier's count, an all-gather's op, ...); count is whatever must
 * agree across ranks (see acx/collectives.h). file may be NULL. */
typedef struct acx_coll_call {
    acx_coll_id_t id;
    int64_t count;
    int dtype, op, root;
    const char *file;
    int line;
} acx_coll_call_t;

/* acc->coll_debug */
enum { ACX_COLL_DEBUG_UNREAD = 0, ACX_COLL_DEBUG_OFF = 1, ACX_COLL_DEBUG_ON = 2 };

/* Read ACX_DEBUG_MODE into acc->coll_debug. Local. Errors:
 * ACX_ERR_INVALID_CONFIG (a value that is not a boolean). */
acx_status_t acx_coll_debug_read(acx_accelerator_t *acc);

/* For acx_init (collective over the world): read ACX_DEBUG_MODE now and
 * check that every rank has the same setting (a rank in debug mode would
 * otherwise wait in its check while the others run the collective). Without
 * this call the variable is read, unchecked, at the first collective.
 * Errors: ACX_ERR_INVALID_CONFIG (not a boolean, or different on some
 * ranks), ACX_ERR_MPI. */
acx_status_t acx_coll_debug_init(acx_accelerator_t *acc);

/* acx_shard_context_t.unit_check (sharding/model.h) in debug mode: the
 * same check, before a sharded strategy's all-gather or reduce-scatter of a
 * unit, over the communicator that collective runs on (the world, or the
 * node under HYBRID_SHARD). The record names the unit (index and name) and
 * carries the public-collective count reached (acc->coll_seq, not
 * incremented). owner: the accelerator. Collective over comm. Errors:
 * ACX_ERR_INVALID_ARG on every rank of comm when the calls differ — the
 * message lists each rank's unit and collective — and ACX_ERR_MPI. */
acx_status_t acx_coll_debug_unit_check(void *owner, acx_comm_t *comm, const acx_unit_call_t *call);

/* The exchange and comparison; the slow half of acx_coll_debug_check. */
acx_status_t acx_coll_debug_exchange(acx_accelerator_t *acc, const acx_coll_call_t *call,
                                     acx_status_t local);

/*
 * Before a public collective, on every rank: count it and, in debug mode,
 * compare it with the other ranks' calls. `local` is this rank's argument
 * check (its error already recorded). Returns ACX_OK when the collective may
 * run; else a status the caller returns as is (off: `local` itself; on: the
 * same status on every rank — a mismatch, or the lowest failing rank's
 * argument error).
 */
static inline acx_status_t acx_coll_debug_check(acx_accelerator_t *acc, const acx_coll_call_t *call,
                                                acx_status_t local) {
    acc->coll_seq++;
    if (acc->coll_debug == ACX_COLL_DEBUG_UNREAD) {
        acx_status_t status = acx_coll_debug_read(acc);
        if (status != ACX_OK) return status;
    }
    if (acc->coll_debug != ACX_COLL_DEBUG_ON) return local;
    return acx_coll_debug_exchange(acc, call, local);
}

#endif /* ACX_RUNTIME_COLL_DEBUG_H */

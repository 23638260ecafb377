/*
 * sharding/plan.h — the sharding plan (library-private): the one place that
 * answers which rank owns, writes and reads which rows of each parameter,
 * whatever the strategy.
 *
 * The dim-0 rule (DESIGN.md): a parameter of R rows split over a group of N
 * ranks, c = ceil(R/N): group rank r holds rows [r*c, min(R, (r+1)*c)),
 * possibly none (R=3, N=4: 1,1,1,0) — never "R must divide by N".
 *
 * A strategy fills the plan at prepare (acx_plan_set) with two positions
 * and one group:
 *
 *   strategy        shard group (rows split)   replicas (same rows)      read group
 *   NO_SHARD        this rank alone (0 of 1)   the world                 one rank per node *
 *   SHARD_GRAD_OP   the world                  this rank alone           none
 *   FULL_SHARD      the world                  this rank alone           none
 *   HYBRID_SHARD    the node                   one rank per node         the replicas **
 *
 *   * when there are several nodes with equal rank counts (sharding/no_shard.c);
 *  ** when there are several nodes.
 *
 * Owned rows: the dim-0 rule over the shard group. Written rows (checkpoints,
 * weight files): the owned rows split again by the dim-0 rule over the
 * replicas, so every row of a file is written exactly once and the I/O is
 * spread over the ranks holding it. Read rows (checkpoint load): the owned
 * rows split over the read group, whose members then all-gather the parts
 * (a replicated tensor is read once per job, not once per node); every owned
 * row without a read group.
 *
 * The plan holds positions, not data: where rows sit in the shard arrays
 * (shard_offset, padding) is the strategy's, and moving them is io/'s and
 * the strategies'.
 */
#ifndef ACX_SHARDING_PLAN_H
#define ACX_SHARDING_PLAN_H

#include <stdint.h>

#include "collectives/coll.h"

typedef struct acx_shard_plan {
    int shard_rank, shard_size;     /* this rank in the group the rows are split over */
    int replica_rank, replica_size; /* this rank among the ranks holding the same rows */
    acx_comm_t *read_group;         /* splits checkpoint reads, or NULL; owned by the strategy */
} acx_shard_plan_t;

/* Fill plan (see the table above). read_group may be NULL; the plan does
 * not own it. Sizes must be >= 1 and ranks in range (the strategies'
 * communicators guarantee it). */
void acx_plan_set(acx_shard_plan_t *plan, int shard_rank, int shard_size, int replica_rank,
                  int replica_size, acx_comm_t *read_group);

/* Rows [*begin_p, *end_p) of a parameter with `rows` rows that shard-group
 * rank `shard_rank` owns (the dim-0 rule over the plan's shard group; empty:
 * begin == end). Any rank of the group may be asked about, not only this
 * one: gathers place every rank's piece with it. */
void acx_plan_rows_of(const acx_shard_plan_t *plan, int64_t rows, int shard_rank, int64_t *begin_p,
                      int64_t *end_p);

/* The rows this rank owns: acx_plan_rows_of for its own shard rank. */
void acx_plan_owned_rows(const acx_shard_plan_t *plan, int64_t rows, int64_t *begin_p,
                         int64_t *end_p);

/* ceil(rows / shard group size): the rows of every rank's piece once padded
 * to equal size (the sharded strategies' segments, the gathers). */
int64_t acx_plan_piece_rows(const acx_shard_plan_t *plan, int64_t rows);

/* The dim-0 rule's c = ceil(rows / group_size) for a group of group_size
 * ranks, without a plan: the rows of a padded piece, and the most rows any
 * rank holds (rank 0 holds that many whenever rows > 0). For estimates made
 * before any group exists (`acx estimate-memory`). rows >= 0,
 * group_size >= 1. Pure arithmetic, not collective. */
int64_t acx_plan_rows_per_rank(int64_t rows, int64_t group_size);

/* Of the owned rows [owned_begin, owned_end), the rows [*begin_p, *end_p)
 * this rank writes into a checkpoint or weight file: the dim-0 rule over
 * the replicas. Together the replicas write each row exactly once. */
void acx_plan_write_rows(const acx_shard_plan_t *plan, int64_t owned_begin, int64_t owned_end,
                         int64_t *begin_p, int64_t *end_p);

/* Of the owned rows, the rows this rank reads from a checkpoint: the dim-0
 * rule over the read group (every owned row without one); the members then
 * all-gather the parts over plan->read_group. */
void acx_plan_read_rows(const acx_shard_plan_t *plan, int64_t owned_begin, int64_t owned_end,
                        int64_t *begin_p, int64_t *end_p);

#endif /* ACX_SHARDING_PLAN_H */

/*
 * sharding/plan.c — the sharding plan: the dim-0 rule and who owns, writes
 * and reads which rows (sharding/plan.h has the table per strategy).
 *
 * Owns only the arithmetic; the strategies (sharding/no_shard.c,
 * sharding/sharded.c) make the groups and fill the plan at prepare, and the
 * writers and readers (io/weights.c, the checkpoint) ask it.
 */
#include "sharding/plan.h"

int64_t acx_plan_rows_per_rank(int64_t rows, int64_t group_size) {
    return (rows + group_size - 1) / group_size;
}

/* c = ceil(R/N); rank r holds [r*c, min(R, (r+1)*c)). */
static void dim0_rows(int64_t rows, int rank, int size, int64_t *begin_p, int64_t *end_p) {
    int64_t c = acx_plan_rows_per_rank(rows, size);
    int64_t b = (int64_t)rank * c, e = b + c;
    if (b > rows) b = rows;
    if (e > rows) e = rows;
    *begin_p = b;
    *end_p = e;
}

void acx_plan_set(acx_shard_plan_t *plan, int shard_rank, int shard_size, int replica_rank,
                  int replica_size, acx_comm_t *read_group) {
    plan->shard_rank = shard_rank;
    plan->shard_size = shard_size;
    plan->replica_rank = replica_rank;
    plan->replica_size = replica_size;
    plan->read_group = read_group;
}

void acx_plan_rows_of(const acx_shard_plan_t *plan, int64_t rows, int shard_rank, int64_t *begin_p,
                      int64_t *end_p) {
    dim0_rows(rows, shard_rank, plan->shard_size, begin_p, end_p);
}

void acx_plan_owned_rows(const acx_shard_plan_t *plan, int64_t rows, int64_t *begin_p,
                         int64_t *end_p) {
    dim0_rows(rows, plan->shard_rank, plan->shard_size, begin_p, end_p);
}

int64_t acx_plan_piece_rows(const acx_shard_plan_t *plan, int64_t rows) {
    return acx_plan_rows_per_rank(rows, plan->shard_size);
}

void acx_plan_write_rows(const acx_shard_plan_t *plan, int64_t owned_begin, int64_t owned_end,
                         int64_t *begin_p, int64_t *end_p) {
    int64_t b, e;
    dim0_rows(owned_end - owned_begin, plan->replica_rank, plan->replica_size, &b, &e);
    *begin_p = owned_begin + b;
    *end_p = owned_begin + e;
}

void acx_plan_read_rows(const acx_shard_plan_t *plan, int64_t owned_begin, int64_t owned_end,
                        int64_t *begin_p, int64_t *end_p) {
    int64_t b = 0, e = owned_end - owned_begin;
    if (plan->read_group != NULL)
        dim0_rows(owned_end - owned_begin, plan->read_group->rank, plan->read_group->size, &b, &e);
    *begin_p = owned_begin + b;
    *end_p = owned_begin + e;
}

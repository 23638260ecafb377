/*
 * benchmarks/osu_allreduce.c — acx-bench-allreduce: acx_all_reduce (SUM)
 * against MPI_Allreduce, OSU-style; and with --fused K, K tensors reduced
 * through acx's gradient fusion buckets against K separate MPI_Allreduce
 * calls. Timing, options and output are the shared driver's (osu_common.c).
 *
 * --fused needs the library's internals (collectives/bucket.h: the buckets
 * acx_prepare builds for data-parallel gradients), so this one benchmark
 * links libacx_core instead of the public libacx: it times exactly the code
 * a training step runs in acx_unit_grads_ready / acx_backward_end, without
 * a model and optimizer around it. The buckets run on their own acx
 * communicator (a duplicate of MPI_COMM_WORLD with the MPI backend, the
 * accelerator's kind of communicator).
 */
#include <stdlib.h>

#include "collectives/bucket.h"
#include "collectives/coll.h"
#include "osu_common.h"

/* send [count] -> recv [count] */
static acx_status_t run_acx(osu_ctx_t *c) {
    return osu_acx_all_reduce(c, c->send, c->recv, c->count);
}

static int run_raw(osu_ctx_t *c) {
    return MPI_Allreduce(c->raw_send, c->raw_recv, (int)c->count, c->mpi_type, c->mpi_sum, c->comm);
}

static void fill(osu_ctx_t *c, int round, int vmax) {
    for (size_t i = 0; i < c->count; i++)
        osu_put(c->send, i, c->dtype, osu_value(c->rank, i, round, vmax));
}

static size_t check(const osu_ctx_t *c, int round, int vmax) {
    size_t bad = 0;
    for (size_t i = 0; i < c->count; i++) {
        long want = 0;
        for (int q = 0; q < c->size; q++)
            want += osu_value(q, i, round, vmax);
        bad += !osu_is(c->recv, i, c->dtype, want);
    }
    return bad;
}

/* ---- --fused: acx's fusion buckets ---- */

typedef struct fused {
    acx_comm_t *comm;
    acx_buckets_t *buckets;
    int k;
} fused_t;

static void fused_destroy(void *state) {
    fused_t *f = state;
    if (f == NULL) return;
    acx_buckets_destroy(f->buckets);
    acx_comm_destroy(f->comm);
    free(f);
}

/* Tensor u = unit u = segment u of flat [k x count], ready in order 0..k-1
 * (one segment per unit, as a model whose units each hold one tensor). */
static acx_status_t fused_create(void *flat, size_t count, int k, acx_dtype_t dtype,
                                 size_t bucket_bytes, void **state_p) {
    const acx_coll_ops_t *ops;
    acx_status_t st = acx_coll_select(ACX_BACKEND_MPI, ACX_DEVICE_STATE_AUTO, &ops);
    if (st != ACX_OK) return st;
    fused_t *f = calloc(1, sizeof *f);
    acx_bucket_segment_t *segs = calloc((size_t)k, sizeof *segs);
    if (f == NULL || segs == NULL) {
        free(f);
        free(segs);
        return ACX_ERR_NO_MEMORY;
    }
    f->k = k;
    for (int u = 0; u < k; u++)
        segs[u] = (acx_bucket_segment_t){.offset = (size_t)u * count, .count = count, .unit = u};
    st = acx_comm_create(MPI_COMM_WORLD, ops, &f->comm);
    if (st == ACX_OK)
        st = acx_buckets_create(f->comm, flat, dtype, (size_t)k * count, k, k, segs, bucket_bytes,
                                &f->buckets);
    free(segs);
    if (st != ACX_OK) {
        fused_destroy(f);
        return st;
    }
    *state_p = f;
    return ACX_OK;
}

/* What a training step does with them: each unit reports its gradients
 * ready (a full bucket starts its all-reduce at once), then wait for all. */
static acx_status_t fused_step(void *state) {
    fused_t *f = state;
    for (int u = 0; u < f->k; u++) {
        acx_status_t st = acx_buckets_unit_ready(f->buckets, u, 1.0f);
        if (st != ACX_OK) return st;
    }
    return acx_buckets_wait_all(f->buckets);
}

static int fused_num_buckets(const void *state) {
    return acx_buckets_count(((const fused_t *)state)->buckets);
}

int main(int argc, char **argv) {
    static const osu_fused_ops_t fused = {
        .create = fused_create,
        .step = fused_step,
        .num_buckets = fused_num_buckets,
        .destroy = fused_destroy,
    };
    static const osu_coll_t coll = {
        .prog = "acx-bench-allreduce",
        .title = "Allreduce",
        .op = OSU_ALL_REDUCE,
        .default_dtype = ACX_DTYPE_FLOAT32, /* a gradient's dtype */
        .reduces = 1,
        .send_extent = OSU_ONE,
        .recv_extent = OSU_ONE,
        .run_acx = run_acx,
        .run_raw = run_raw,
        .fill = fill,
        .check = check,
        .fused = &fused,
    };
    return osu_main(argc, argv, &coll);
}

/*
 * benchmarks/osu_allreduce.c — acx-bench-allreduce: acx_all_reduce (SUM)
 * against MPI_Allreduce, OSU-style; and with --fused K, K gradients
 * synchronized as a data-parallel training step does it, through acx's
 * gradient fusion buckets, against K separate MPI_Allreduce calls. Timing,
 * options and output are the shared driver's (osu_common.c).
 *
 * --fused uses only the public model API: a model of K small parameters,
 * one per unit, under NO_SHARD; each step reports every unit's gradients
 * ready (acx_unit_grads_ready starts a bucket's all-reduce as it fills) and
 * waits in acx_backward_end — the code a training step runs there, without
 * a forward, a backward or an optimizer around it. The gradients are
 * float32 (acx's); -t bfloat16/float16 is their reduce_dtype on the wire.
 */
#include <stdio.h>
#include <stdlib.h>

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

/* ---- --fused: a training step's gradient synchronization ---- */

typedef struct fused {
    acx_accelerator_t *acc;
    acx_unit_t **units;   /* [k] */
    acx_param_t **params; /* [k]: unit u's one parameter [count] */
    int k;
} fused_t;

static void fused_destroy(void *state) {
    fused_t *f = state;
    if (f == NULL) return;
    free(f->units);
    free(f->params);
    free(f);
}

/* Tensor u = unit u's one parameter, registered in order 0..k-1 (forward
 * order), so its gradients become ready in the order k-1..0, as backward
 * produces them, and buckets fill in that order. */
static acx_status_t fused_create(acx_accelerator_t *acc, size_t count, int k, void **state_p) {
    fused_t *f = calloc(1, sizeof *f);
    if (f != NULL) {
        f->units = calloc((size_t)k, sizeof *f->units);
        f->params = calloc((size_t)k, sizeof *f->params);
    }
    if (f == NULL || f->units == NULL || f->params == NULL) {
        fused_destroy(f);
        return ACX_ERR_NO_MEMORY;
    }
    f->acc = acc;
    f->k = k;
    acx_model_t *m = NULL;
    acx_status_t st = acx_model_create(acc, &m);
    const int64_t shape[1] = {(int64_t)count};
    for (int u = 0; st == ACX_OK && u < k; u++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", u);
        st = acx_model_add_unit(m, name, &f->units[u]);
        if (st == ACX_OK)
            st =
                acx_unit_add_param(f->units[u], name, 1, shape, ACX_INIT_SPEC_ZEROS, &f->params[u]);
    }
    if (st == ACX_OK) st = acx_prepare(acc, m, NULL, NULL);
    if (st != ACX_OK) {
        fused_destroy(f);
        return st;
    }
    *state_p = f;
    return ACX_OK;
}

/* What a training step does: in one micro-step each unit reports its
 * gradients ready in backward order (a full bucket starts its all-reduce at
 * once), then acx_backward_end waits for them all. */
static acx_status_t fused_step(void *state, int exact_sum) {
    fused_t *f = state;
    ACX_TRY(acx_accumulate_begin(f->acc));
    /* one item over all ranks: the gradients are divided by 1 */
    if (exact_sum) ACX_TRY(acx_accumulate_items(f->acc, acx_rank(f->acc) == 0 ? 1 : 0));
    for (int u = f->k - 1; u >= 0; u--)
        ACX_TRY(acx_unit_grads_ready(f->units[u]));
    ACX_TRY(acx_backward_end(f->acc));
    return acx_accumulate_end(f->acc);
}

static float *fused_grad(void *state, int u) {
    return acx_param_grad(((fused_t *)state)->params[u]);
}

int main(int argc, char **argv) {
    static const osu_fused_ops_t fused = {
        .create = fused_create,
        .step = fused_step,
        .grad = fused_grad,
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

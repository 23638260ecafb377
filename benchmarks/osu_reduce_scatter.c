/*
 * benchmarks/osu_reduce_scatter.c — acx-bench-reduce-scatter:
 * acx_reduce_scatter (SUM) against MPI_Reduce_scatter_block, OSU-style.
 * Size is each rank's share of the result (torch's reduce_scatter_tensor
 * output); every rank sends world_size x Size. OSU's osu_reduce_scatter
 * counts the whole send buffer instead (docs/benchmarks.md). Timing, options
 * and output are the shared driver's (osu_common.c).
 */
#include "osu_common.h"

/* send [size x count] -> recv [count] = SUM over ranks of block `rank` */
static acx_status_t run_acx(osu_ctx_t *c) {
    return osu_acx_reduce_scatter(c, c->send, c->recv, c->count);
}

static int run_raw(osu_ctx_t *c) {
    return MPI_Reduce_scatter_block(c->raw_send, c->raw_recv, (int)c->count, c->mpi_type,
                                    c->mpi_sum, c->comm);
}

/* Element j of the whole send array (block j / count) on rank r. */
static void fill(osu_ctx_t *c, int round, int vmax) {
    size_t n = (size_t)c->size * c->count;
    for (size_t j = 0; j < n; j++)
        osu_put(c->send, j, c->dtype, osu_value(c->rank, j, round, vmax));
}

static size_t check(const osu_ctx_t *c, int round, int vmax) {
    size_t bad = 0, base = (size_t)c->rank * c->count;
    for (size_t i = 0; i < c->count; i++) {
        long want = 0;
        for (int q = 0; q < c->size; q++)
            want += osu_value(q, base + i, round, vmax);
        bad += !osu_is(c->recv, i, c->dtype, want);
    }
    return bad;
}

int main(int argc, char **argv) {
    static const osu_coll_t coll = {
        .prog = "acx-bench-reduce-scatter",
        .title = "Reduce_scatter",
        .op = OSU_REDUCE_SCATTER,
        .default_dtype = ACX_DTYPE_FLOAT32, /* a gradient's dtype */
        .reduces = 1,
        .send_extent = OSU_WORLD,
        .recv_extent = OSU_ONE,
        .run_acx = run_acx,
        .run_raw = run_raw,
        .fill = fill,
        .check = check,
    };
    return osu_main(argc, argv, &coll);
}

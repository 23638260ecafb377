/*
 * benchmarks/osu_allgather.c — acx-bench-allgather: acx_all_gather against
 * MPI_Allgather, OSU-style. Size is each rank's contribution (OSU's
 * osu_allgather); every rank receives world_size x Size. Timing, options and
 * output are the shared driver's (osu_common.c).
 */
#include "osu_common.h"

/* send [count] -> recv [size x count] */
static acx_status_t run_acx(osu_ctx_t *c) {
    return osu_acx_all_gather(c, c->send, c->recv, c->count);
}

static int run_raw(osu_ctx_t *c) {
    return MPI_Allgather(c->raw_send, (int)c->count, c->mpi_type, c->raw_recv, (int)c->count,
                         c->mpi_type, c->comm);
}

static void fill(osu_ctx_t *c, int round, int vmax) {
    for (size_t i = 0; i < c->count; i++)
        osu_put(c->send, i, c->dtype, osu_value(c->rank, i, round, vmax));
}

/* Block q of recv must be rank q's contribution. */
static size_t check(const osu_ctx_t *c, int round, int vmax) {
    size_t bad = 0;
    for (int q = 0; q < c->size; q++)
        for (size_t i = 0; i < c->count; i++)
            bad +=
                !osu_is(c->recv, (size_t)q * c->count + i, c->dtype, osu_value(q, i, round, vmax));
    return bad;
}

int main(int argc, char **argv) {
    static const osu_coll_t coll = {
        .prog = "acx-bench-allgather",
        .title = "Allgather",
        .op = OSU_ALL_GATHER,
        .default_dtype = ACX_DTYPE_UINT8, /* OSU's MPI_CHAR: every size from 1 byte */
        .reduces = 0,
        .send_extent = OSU_ONE,
        .recv_extent = OSU_WORLD,
        .run_acx = run_acx,
        .run_raw = run_raw,
        .fill = fill,
        .check = check,
    };
    return osu_main(argc, argv, &coll);
}

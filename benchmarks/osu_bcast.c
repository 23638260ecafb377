/*
 * benchmarks/osu_bcast.c — acx-bench-bcast: acx_broadcast from rank 0
 * against MPI_Bcast, OSU-style (osu_bcast's root 0). Timing, options and
 * output are the shared driver's (osu_common.c).
 */
#include <string.h>

#include "osu_common.h"

#define ROOT 0

/* buf [count], root's copied to every rank */
static acx_status_t run_acx(osu_ctx_t *c) { return osu_acx_broadcast(c, c->send, c->count, ROOT); }

static int run_raw(osu_ctx_t *c) {
    return MPI_Bcast(c->raw_send, (int)c->count, c->mpi_type, ROOT, c->comm);
}

/* The root holds the values; every other rank starts from a pattern that is
 * none of them, so a broadcast that does nothing fails the check. */
static void fill(osu_ctx_t *c, int round, int vmax) {
    if (c->rank != ROOT) {
        memset(c->send, 0xa5, c->count * c->esize);
        return;
    }
    for (size_t i = 0; i < c->count; i++)
        osu_put(c->send, i, c->dtype, osu_value(ROOT, i, round, vmax));
}

static size_t check(const osu_ctx_t *c, int round, int vmax) {
    size_t bad = 0;
    for (size_t i = 0; i < c->count; i++)
        bad += !osu_is(c->send, i, c->dtype, osu_value(ROOT, i, round, vmax));
    return bad;
}

int main(int argc, char **argv) {
    static const osu_coll_t coll = {
        .prog = "acx-bench-bcast",
        .title = "Broadcast",
        .op = OSU_BROADCAST,
        .default_dtype = ACX_DTYPE_UINT8, /* OSU's MPI_CHAR: every size from 1 byte */
        .reduces = 0,
        .send_extent = OSU_ONE,
        .recv_extent = OSU_NONE,
        .run_acx = run_acx,
        .run_raw = run_raw,
        .fill = fill,
        .check = check,
    };
    return osu_main(argc, argv, &coll);
}

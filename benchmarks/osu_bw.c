/*
 * benchmarks/osu_bw.c — nccl-tests' algorithm and bus bandwidth for the
 * collective benchmarks (definitions and units in osu_bw.h). Timing and
 * output are osu_common.c's.
 */
#include "osu_bw.h"

double osu_rated_bytes(osu_op_t op, size_t bytes_per_rank, int nranks) {
    double b = (double)bytes_per_rank;
    switch (op) {
    case OSU_ALL_GATHER:
    case OSU_REDUCE_SCATTER: return b * (double)nranks;
    default: return b;
    }
}

double osu_busbw_factor(osu_op_t op, int nranks) {
    if (nranks < 1) return -1.0;
    double n = (double)nranks;
    switch (op) {
    case OSU_ALL_REDUCE: return 2.0 * (n - 1.0) / n;
    case OSU_ALL_GATHER:
    case OSU_REDUCE_SCATTER: return (n - 1.0) / n;
    case OSU_BROADCAST: return 1.0;
    default: return -1.0;
    }
}

void osu_bandwidth(osu_op_t op, size_t bytes_per_rank, int nranks, double seconds, double *algbw_p,
                   double *busbw_p) {
    double algbw = 0.0, busbw = 0.0, factor = osu_busbw_factor(op, nranks);
    if (seconds > 0.0 && factor >= 0.0) {
        algbw = osu_rated_bytes(op, bytes_per_rank, nranks) / seconds / 1e9;
        busbw = algbw * factor;
    }
    if (algbw_p) *algbw_p = algbw;
    if (busbw_p) *busbw_p = busbw;
}

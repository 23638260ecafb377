/*
 * benchmarks/osu_bw.h — algorithm and bus bandwidth of the collective
 * benchmarks (acx-bench-allreduce & co.), with nccl-tests' definitions
 * (nccl-tests doc/PERFORMANCE.md). Pure arithmetic, no MPI: unit-tested by
 * tests/unit/test_busbw.c on hand-computed numbers.
 *
 * Conventions, shared with the benchmarks' output:
 *   - bytes_per_rank is the "Size" column: the buffer every rank passes to
 *     all-reduce and broadcast, each rank's contribution to an all-gather,
 *     each rank's share of a reduce-scatter's result.
 *   - The bytes an operation is rated on (nccl-tests' S): all-reduce and
 *     broadcast: the buffer; all-gather and reduce-scatter: the whole
 *     n x bytes_per_rank array (the gathered output, the scattered input).
 *   - algbw = S / t; busbw = algbw x factor, factor = 2(n-1)/n for
 *     all-reduce, (n-1)/n for all-gather and reduce-scatter, 1 for broadcast:
 *     what each rank's link must carry with an optimal (ring) algorithm, so
 *     busbw can be held against the hardware's peak whatever n is.
 *   - GB/s means 1e9 bytes per second, as in nccl-tests.
 */
#ifndef ACX_BENCH_OSU_BW_H
#define ACX_BENCH_OSU_BW_H

#include <stddef.h>

typedef enum osu_op {
    OSU_ALL_REDUCE = 0,
    OSU_ALL_GATHER = 1,
    OSU_REDUCE_SCATTER = 2,
    OSU_BROADCAST = 3
} osu_op_t;

/* S: the bytes an operation on nranks ranks is rated on. */
double osu_rated_bytes(osu_op_t op, size_t bytes_per_rank, int nranks);

/* busbw / algbw for op on nranks ranks (0 for all-reduce, all-gather and
 * reduce-scatter on one rank: nothing crosses a link; -1 for an unknown op or
 * nranks < 1). */
double osu_busbw_factor(osu_op_t op, int nranks);

/* algbw and busbw in GB/s (1e9 B/s) of one operation that took seconds
 * (> 0; otherwise both are 0). */
void osu_bandwidth(osu_op_t op, size_t bytes_per_rank, int nranks, double seconds, double *algbw_p,
                   double *busbw_p);

#endif /* ACX_BENCH_OSU_BW_H */

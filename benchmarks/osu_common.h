/*
 * benchmarks/osu_common.h — the shared driver of the OSU-style collective
 * benchmarks (acx-bench-allreduce, -allgather, -reduce-scatter, -bcast).
 *
 * The driver (osu_common.c) owns everything the four have in common: option
 * parsing (OSU Micro-Benchmarks 7.x flags plus acx's), MPI and acx start-up,
 * buffers, the timing loop, statistics across ranks, validation rounds, the
 * OSU-format table and the --json file. Each benchmark's main (osu_<op>.c)
 * only describes its operation in an osu_coll_t: buffer shapes, the acx call,
 * the raw MPI call it is compared with, and how to fill inputs and check
 * outputs for -c. docs/benchmarks.md is the user's side of this.
 */
#ifndef ACX_BENCH_OSU_COMMON_H
#define ACX_BENCH_OSU_COMMON_H

#include <mpi.h>
#include <stddef.h>

#include <acx/acx.h>

#include "osu_bw.h"

/* One size of one run, as the operation callbacks see it. */
typedef struct osu_ctx {
    acx_accelerator_t *acc;
    MPI_Comm comm; /* the raw side's communicator: a duplicate of MPI_COMM_WORLD */
    int rank, size;
    acx_dtype_t dtype;
    size_t esize;          /* bytes per element */
    MPI_Datatype mpi_type; /* raw side: the dtype (16-bit floats: MPI_UINT16_T) */
    MPI_Op mpi_sum;        /* raw side: SUM for the dtype (16-bit floats: a user op) */
    size_t count;          /* elements per rank at this size */
    /* acx's buffers (acx_buffer_alloc: the accelerator's memory) and the
     * raw side's own, of the operation's shapes: send [send_extent x count],
     * recv [recv_extent x count] (NULL if none). With -d cuda, send and recv
     * are device memory (the fill and check callbacks then see host copies,
     * osu_common.c swaps them in), and the raw side has no buffers
     * (--compare-raw is refused). */
    void *send, *recv;
    void *raw_send, *raw_recv;
    int nccl; /* -b nccl: the accelerator's backend is NCCL (else MPI) */
} osu_ctx_t;

/* How big a buffer is, in units of count elements. */
typedef enum osu_extent {
    OSU_NONE = 0, /* not used */
    OSU_ONE = 1,  /* [count] */
    OSU_WORLD = 2 /* [world_size x count] */
} osu_extent_t;

/* --fused K (all-reduce only): K gradients of count elements reduced the
 * way a training step reduces them, through the public model API: a model
 * of K units of one float32 parameter [count] each on an accelerator the
 * driver configured (NO_SHARD, --bucket-mb, the dtype as reduce_dtype), its
 * gradients reported ready unit by unit and synchronized by
 * acx_backward_end in acx's gradient buckets. Provided by osu_allreduce.c. */
typedef struct osu_fused_ops {
    /* Register the model on acc and acx_prepare it. Collective. */
    acx_status_t (*create)(acx_accelerator_t *acc, size_t count, int k, void **state_p);
    /* One micro-step that is a synchronization boundary: every unit's
     * gradients ready, then acx_backward_end. The gradients become their
     * mean over ranks, or with exact_sum their plain sum (the step reports
     * one item in all: acx_accumulate_items). Collective. */
    acx_status_t (*step)(void *state, int exact_sum);
    /* Unit u's gradient [count] (host memory; --fused refuses -d cuda). */
    float *(*grad)(void *state, int u);
    /* Free the state (the model is the accelerator's, freed by acx_finalize). */
    void (*destroy)(void *state);
} osu_fused_ops_t;

typedef struct osu_coll {
    const char *prog;  /* "acx-bench-allreduce" */
    const char *title; /* "Allreduce": "# OSU-style acx Allreduce Latency Test" */
    osu_op_t op;
    acx_dtype_t default_dtype;
    int reduces; /* a reduction (SUM): validation values must stay exact when summed */
    osu_extent_t send_extent, recv_extent;
    /* The timed calls (the raw one returns MPI's code). */
    acx_status_t (*run_acx)(osu_ctx_t *c);
    int (*run_raw)(osu_ctx_t *c);
    /* -c: fill acx's inputs for validation round `round` (the same call on
     * every rank, each filling its own), then after run_acx count the output
     * elements that differ from the values this rank computes on its own. */
    void (*fill)(osu_ctx_t *c, int round, int vmax);
    size_t (*check)(const osu_ctx_t *c, int round, int vmax);
    const osu_fused_ops_t *fused; /* NULL: --fused is refused */
} osu_coll_t;

/* The benchmark: parse, run, print; returns the process's exit status
 * (0 ok, 1 a failure or a -c mismatch, 2 bad usage, 77 an unavailable
 * device or backend: "-d cuda: no CUDA device: <reason>", "-b nccl: not
 * available ..."). */
int osu_main(int argc, char **argv, const osu_coll_t *coll);

/* ---- acx's side of the timed calls (for run_acx) ---- */

/* The accelerator's public collective (on its backend, -b), on c's buffers
 * as passed. */
acx_status_t osu_acx_all_reduce(osu_ctx_t *c, const void *send, void *recv, size_t count);
acx_status_t osu_acx_all_gather(osu_ctx_t *c, const void *send, void *recv, size_t count);
acx_status_t osu_acx_reduce_scatter(osu_ctx_t *c, const void *send, void *recv, size_t count);
acx_status_t osu_acx_broadcast(osu_ctx_t *c, void *buf, size_t count, int root);

/* ---- validation values (for the fill/check callbacks) ---- */

/* The integer rank `rank` holds at element i in validation round `round`:
 * in 0..vmax, different for neighbouring ranks and elements. The driver
 * picks vmax so that the sum over all ranks is still an integer the dtype
 * holds exactly (bfloat16: <= 256, float16: <= 2048, int8: <= 127). */
int osu_value(int rank, size_t i, int round, int vmax);

/* buf[i] of dtype = v (a small non-negative integer, exact in dtype). */
void osu_put(void *buf, size_t i, acx_dtype_t dtype, long v);

/* buf[i] of dtype is exactly v (bit for bit its encoding). */
int osu_is(const void *buf, size_t i, acx_dtype_t dtype, long v);

#endif /* ACX_BENCH_OSU_COMMON_H */

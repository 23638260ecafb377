/*
 * io/sampler.h — the distributed sampler (library-private): which dataset
 * rows rank r reads in batch b of epoch e. A pure function of its inputs,
 * so it is unit-tested for every (n, world size, rank) without MPI.
 * Semantics are documented in acx/data.h.
 */
#ifndef ACX_SAMPLER_H
#define ACX_SAMPLER_H

#include <stdint.h>

#include "acx/status.h"

typedef struct acx_sampler {
    int64_t num_samples; /* dataset rows N */
    int64_t batch_size;  /* per rank (after split_batches division) */
    int world_size, rank;
    int shuffle, drop_last, even_batches;
    uint64_t seed;
    /* derived */
    int64_t global_batch; /* batch_size * world_size */
    int64_t num_batches;  /* batches per epoch (from start) on this rank */
    int64_t start;        /* stream positions of this epoch consumed before batch 0 (0) */
    /* current epoch's permutation */
    int64_t epoch;
    int64_t *perm; /* [num_samples] */
} acx_sampler_t;

/* Set up. batch_size is what each rank gets (the caller divides a global
 * batch for split_batches and checks divisibility). Errors:
 * ACX_ERR_INVALID_ARG, ACX_ERR_FORMAT (drop_last with fewer samples than one
 * global batch: nothing to train on), ACX_ERR_NO_MEMORY. */
acx_status_t acx_sampler_init(acx_sampler_t *s, int64_t num_samples, int64_t batch_size,
                              int world_size, int rank, int shuffle, int drop_last,
                              int even_batches, uint64_t seed);
void acx_sampler_fini(acx_sampler_t *s);

/* Compute epoch e's permutation (identity without shuffle). */
void acx_sampler_set_epoch(acx_sampler_t *s, int64_t epoch);

/* Begin the current epoch's batches at stream position start (clamped to
 * [0, N]) and recount num_batches; 0 restores the whole epoch. */
void acx_sampler_set_start(acx_sampler_t *s, int64_t start);

/* Batches this rank runs per epoch (the same on every rank with
 * even_batches or drop_last). */
int64_t acx_sampler_num_batches(const acx_sampler_t *s);

/* Rows of batch b (0 <= b < num_batches) on this rank: writes *size_p
 * indices into idx (capacity batch_size) and the number of trailing padding
 * samples into *num_padding_p. */
void acx_sampler_batch(const acx_sampler_t *s, int64_t b, int64_t *idx, int64_t *size_p,
                       int64_t *num_padding_p);

/* ---- token streams ---- */

/* A token stream of num_tokens tokens read as windows of seq_len + 1:
 * window w is tokens [w*T, w*T + T] (its first T tokens are the inputs, its
 * last T the targets), so consecutive windows share one token and every
 * token but the first is a target exactly once. The number of windows is
 * (N - 1) / T; 0 when N < T + 1 or T < 1. */
int64_t acx_token_num_windows(int64_t num_tokens, int64_t seq_len);

/* The first token of window w: w * T. */
int64_t acx_token_window_start(int64_t window, int64_t seq_len);

#endif /* ACX_SAMPLER_H */

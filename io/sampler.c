/*
 * io/sampler.c — the distributed sampler: which dataset rows rank r reads in
 * batch b of epoch e. Pure arithmetic over (N, batch size, world size, rank,
 * flags, seed, epoch); no MPI, no HDF5, no I/O. The loader (dataloader.c)
 * owns reading the rows and decides which configurations are errors for a
 * user (e.g. a batch larger than the dataset); split_batches is resolved by
 * the loader before it gets here.
 *
 * The order, as in acx/data.h (PyTorch DistributedSampler + Accelerate's
 * BatchSamplerShard):
 *
 *   perm      = acx_rng_permutation(seed, SHUFFLE, key = epoch, N), or 0..N-1
 *   G         = b x W                      (global batch)
 *   full      = floor(N / G), m = N mod G  (full global batches, remainder)
 *
 *   global batch g covers stream positions [g*G, (g+1)*G); rank r takes
 *   positions [g*G + r*b, g*G + (r+1)*b). Position q reads perm[q mod N].
 *
 *                    global batch `full` (the last, incomplete one), m = 5, b = 3, W = 3
 *                    pos:  0 1 2 | 3 4 5 | 6 7 8
 *                          rank0 | rank1 | rank2
 *   drop_last:       not run at all (every rank runs `full` batches)
 *   even_batches:    r r r | r r p | p p p      p = padding, wraps to perm[0..]
 *   neither:         r r r | r r   |          rank2 has one batch fewer
 *
 * With even_batches a position >= m wraps around the permutation (position
 * q -> perm[q mod N], repeatedly when N < G); a rank's padding is therefore
 * always the tail of its batch, and its count is the number of its
 * positions >= m. Without either flag a rank gets its real positions < m and
 * nothing else; if that is none, the batch does not exist for that rank
 * (num_batches counts only non-empty batches).
 *
 * start (0 unless a checkpoint resumes in mid-epoch under a global batch
 * that does not divide the samples consumed): the epoch's stream begins at
 * position start instead of 0 — batch g covers [start + g*G, start +
 * (g+1)*G) — so exactly the positions not yet consumed are served.
 */
#include <stdlib.h>

#include "io/sampler.h"
#include "base/error.h"
#include "base/rng.h"

/* ---- set-up ---- */

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Real (non-padding) samples rank r has in the last, incomplete global
 * batch of what remains of the epoch after s->start. */
static int64_t last_real(const acx_sampler_t *s) {
    int64_t m = (s->num_samples - s->start) % s->global_batch;
    return clamp64(m - (int64_t)s->rank * s->batch_size, 0, s->batch_size);
}

/* Batches of the epoch's stream positions [start, N) on this rank. */
static int64_t count_batches(const acx_sampler_t *s) {
    int64_t rest = s->num_samples - s->start, n = rest / s->global_batch;
    if (!s->drop_last && rest % s->global_batch != 0 && (s->even_batches || last_real(s) > 0)) n++;
    return n;
}

acx_status_t acx_sampler_init(acx_sampler_t *s, int64_t num_samples, int64_t batch_size,
                              int world_size, int rank, int shuffle, int drop_last,
                              int even_batches, uint64_t seed) {
    if (s == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "sampler: NULL sampler");
    if (num_samples < 0 || batch_size < 1 || world_size < 1 || rank < 0 || rank >= world_size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "sampler: invalid arguments (num_samples %lld, batch_size %lld, "
                         "world size %d, rank %d)",
                         (long long)num_samples, (long long)batch_size, world_size, rank);
    if (num_samples == 0) return ACX_ERROR(ACX_ERR_FORMAT, "dataset has no samples");
    if (batch_size > INT64_MAX / world_size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "sampler: batch_size %lld x world size %d overflows",
                         (long long)batch_size, world_size);

    int64_t global = batch_size * world_size;
    int64_t full = num_samples / global;
    if (drop_last && full == 0)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "dataset has %lld samples, fewer than one global batch of %lld "
                         "(batch_size %lld x world size %d) with drop_last",
                         (long long)num_samples, (long long)global, (long long)batch_size,
                         world_size);

    int64_t *perm = NULL;
    if (shuffle) {
        perm = acx_malloc((size_t)num_samples * sizeof *perm, "sampler permutation");
        if (perm == NULL) return ACX_ERR_NO_MEMORY;
    }

    *s = (acx_sampler_t){
        .num_samples = num_samples,
        .batch_size = batch_size,
        .world_size = world_size,
        .rank = rank,
        .shuffle = !!shuffle,
        .drop_last = !!drop_last,
        /* drop_last wins: there is no incomplete batch left to even out */
        .even_batches = !drop_last && even_batches,
        .seed = seed,
        .global_batch = global,
        .epoch = -1,
        .perm = perm,
    };
    s->num_batches = count_batches(s);
    acx_sampler_set_epoch(s, 0);
    return ACX_OK;
}

void acx_sampler_fini(acx_sampler_t *s) {
    if (s == NULL) return;
    free(s->perm);
    s->perm = NULL;
}

/* ---- per epoch ---- */

void acx_sampler_set_epoch(acx_sampler_t *s, int64_t epoch) {
    if (s->shuffle && epoch != s->epoch)
        acx_rng_permutation(s->seed, ACX_RNG_SHUFFLE, (uint64_t)epoch, s->num_samples, s->perm);
    s->epoch = epoch;
}

int64_t acx_sampler_num_batches(const acx_sampler_t *s) { return s->num_batches; }

void acx_sampler_set_start(acx_sampler_t *s, int64_t start) {
    s->start = clamp64(start, 0, s->num_samples);
    s->num_batches = count_batches(s);
}

/* ---- token streams ---- */

int64_t acx_token_num_windows(int64_t num_tokens, int64_t seq_len) {
    /* seq_len >= num_tokens: no window of seq_len + 1 tokens (not computed:
     * it overflows for seq_len = INT64_MAX) */
    if (seq_len < 1 || seq_len >= num_tokens) return 0;
    return (num_tokens - 1) / seq_len;
}

int64_t acx_token_window_start(int64_t window, int64_t seq_len) { return window * seq_len; }

void acx_sampler_batch(const acx_sampler_t *s, int64_t b, int64_t *idx, int64_t *size_p,
                       int64_t *num_padding_p) {
    int64_t n = s->num_samples;
    int64_t full = (n - s->start) / s->global_batch;
    int64_t size = s->batch_size, padding = 0;
    if (b >= full) {
        /* the last, incomplete global batch */
        int64_t real = last_real(s);
        if (s->even_batches)
            padding = s->batch_size - real;
        else
            size = real;
    }
    /* q: this rank's first stream position in global batch b */
    int64_t q = s->start + b * s->global_batch + (int64_t)s->rank * s->batch_size;
    for (int64_t j = 0; j < size; j++) {
        int64_t pos = (q + j) % n;
        idx[j] = s->perm ? s->perm[pos] : pos;
    }
    *size_p = size;
    *num_padding_p = padding;
}

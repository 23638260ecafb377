/*
 * runtime/rng.c — each rank's random stream: the public draws
 * acx_random_u64 and acx_random_uniform (acx/checkpoint.h) and the
 * stream's position as checkpoint state (runtime/rng.h). The stream of a
 * rank is Philox at (seed, ACX_RNG_USER, key = rank), one block per draw:
 * draw k is block index k, so a resumed run that restores the counter
 * draws exactly what an uninterrupted one would. The seed is the config's
 * unless a checkpoint restored another.
 * Leaves to others: the Philox math (base/rng.c); saving and loading the
 * position (runtime/checkpoint.c).
 */
#include "acx/checkpoint.h"
#include "base/rng.h"
#include "runtime/accelerator.h"
#include "runtime/rng.h"

static uint64_t stream_seed(const acx_accelerator_t *acc) {
    return acc->rng_restored ? acc->rng_seed : (uint64_t)acc->config.values.seed;
}

ACX_API uint64_t acx_random_u64(acx_accelerator_t *acc) {
    if (acc == NULL) return 0;
    uint32_t w[4];
    acx_rng_block(stream_seed(acc), ACX_RNG_USER, (uint64_t)acc->rank, acc->rng_counter++, w);
    return (uint64_t)w[0] << 32 | w[1];
}

ACX_API double acx_random_uniform(acx_accelerator_t *acc) {
    if (acc == NULL) return 0.0;
    uint32_t w[4];
    acx_rng_block(stream_seed(acc), ACX_RNG_USER, (uint64_t)acc->rank, acc->rng_counter++, w);
    return acx_rng_u01(w[0], w[1]);
}

void acx_random_get_position(const acx_accelerator_t *acc, uint64_t *seed_p, uint64_t *counter_p) {
    *seed_p = stream_seed(acc);
    *counter_p = acc->rng_counter;
}

void acx_random_set_position(acx_accelerator_t *acc, uint64_t seed, uint64_t counter) {
    acc->rng_restored = 1;
    acc->rng_seed = seed;
    acc->rng_counter = counter;
}

/*
 * runtime/rng.h — each rank's random stream (library-private): the public
 * draws acx_random_u64/acx_random_uniform (acx/checkpoint.h) and the
 * stream's position, which a checkpoint saves and restores
 * (runtime/checkpoint.c). The Philox math is base/rng.c's.
 */
#ifndef ACX_RUNTIME_RNG_H
#define ACX_RUNTIME_RNG_H

#include <stdint.h>

#include "runtime/accelerator.h"

/* This rank's stream position: its seed (the config's, or the one a
 * checkpoint restored) and the number of draws taken. Not collective. */
void acx_random_get_position(const acx_accelerator_t *acc, uint64_t *seed_p, uint64_t *counter_p);

/* Continue the stream at (seed, counter) from now on: a loaded
 * checkpoint's position, or (the config's seed, 0) for a rank the
 * checkpoint has no stream for. Not collective. */
void acx_random_set_position(acx_accelerator_t *acc, uint64_t seed, uint64_t counter);

#endif /* ACX_RUNTIME_RNG_H */

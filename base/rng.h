/*
 * base/rng.h — counter-based random numbers (library-private).
 *
 * Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as
 * easy as 1, 2, 3", SC 2011; the Random123 reference). A draw is addressed by
 * (seed, purpose, key, index): the 64-bit seed is the Philox key, the
 * 128-bit counter is (index, stream) with stream = mix(purpose, key). No
 * generator state exists, so the value of element i of parameter "fc1.weight"
 * is the same on every rank and for every world size, and data order is the
 * same on every rank without communication.
 */
#ifndef ACX_BASE_RNG_H
#define ACX_BASE_RNG_H

#include <stdint.h>

typedef enum acx_rng_purpose {
    ACX_RNG_PARAM_INIT = 1, /* key: hash of the parameter name; index: element */
    ACX_RNG_SHUFFLE = 2,    /* key: epoch; index: draw number */
    ACX_RNG_USER = 3
} acx_rng_purpose_t;

/* One Philox-4x32-10 block: out = philox(ctr, key). */
void acx_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The 4 words at address (seed, purpose, key, index). */
void acx_rng_block(uint64_t seed, uint32_t purpose, uint64_t key, uint64_t index, uint32_t out[4]);

/* FNV-1a 64-bit hash of a NUL-terminated string (stable across platforms). */
uint64_t acx_hash64(const char *s);

/* Uniform double in the open interval (0, 1) from two 32-bit words (53 bits). */
double acx_rng_u01(uint32_t hi, uint32_t lo);

/* Uniform in (0,1) and standard normal (Box–Muller on the block's words) at an address. */
double acx_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t key, uint64_t index);
double acx_rng_normal(uint64_t seed, uint32_t purpose, uint64_t key, uint64_t index);

/* Unbiased integer in [0, bound) for bound >= 1, from the stream (seed,
 * purpose, key) starting at *index (advanced past the words used; rejection
 * sampling, Lemire 2019). */
uint64_t acx_rng_below(uint64_t seed, uint32_t purpose, uint64_t key, uint64_t *index,
                       uint64_t bound);

/* perm[0..n-1] = a uniformly random permutation of 0..n-1 (Fisher–Yates
 * driven by acx_rng_below on the stream (seed, purpose, key)). n >= 0. */
void acx_rng_permutation(uint64_t seed, uint32_t purpose, uint64_t key, int64_t n, int64_t *perm);

#endif /* ACX_BASE_RNG_H */

/*
 * base/rng.c — counter-based random numbers: Philox-4x32-10 and the
 * draws built on it (uniform, normal, bounded integers, permutations).
 *
 * Owns: the Philox block function, the mapping of an address (seed, purpose,
 * key, index) to a counter and key, and the conversions from words to
 * numbers. Leaves to others: what the addresses mean (param_init.c uses one
 * index per tensor element; io/sampler.c one stream per epoch).
 *
 * Address layout (fixed: checkpoints and cross-rank agreement depend on it):
 *   Philox key     = { seed lo32, seed hi32 }
 *   Philox counter = { index lo32, index hi32, stream lo32, stream hi32 }
 *   stream         = splitmix64(key ^ (purpose * 0x9E3779B97F4A7C15))
 * so every (purpose, key) pair owns a 2^64-block stream and nothing is
 * shared between purposes unless the 64-bit mix collides.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"

/* ---- Philox-4x32-10 ---- */

/* Constants from Salmon et al. (SC 2011) and Random123's philox.h. */
#define PHILOX_M0     0xD2511F53u /* multiplier applied to counter word 0 */
#define PHILOX_M1     0xCD9E8D57u /* multiplier applied to counter word 2 */
#define PHILOX_W0     0x9E3779B9u /* Weyl increment of key word 0 (golden ratio) */
#define PHILOX_W1     0xBB67AE85u /* Weyl increment of key word 1 (sqrt(3) - 1) */
#define PHILOX_ROUNDS 10

#define ACX_TWO_PI 6.283185307179586476925286766559

/* One round: two 32x32->64 multiplies, the high halves XORed with the other
 * two counter words and the round key, and a fixed word permutation:
 *   out = { hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1, lo(M0*c0) } */
static inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0];
    uint32_t n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void acx_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    /* Round 0 uses the key as given; the key is bumped between rounds. */
    for (int r = 0; r < PHILOX_ROUNDS; r++) {
        if (r > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

/* ---- addressing ---- */

/* splitmix64's finalizer (Steele, Lea, Flood 2014): a bijection on 64-bit
 * values with good avalanche, so nearby (purpose, key) pairs land on
 * unrelated streams. */
static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void acx_rng_block(uint64_t seed, uint32_t purpose, uint64_t key, uint64_t index, uint32_t out[4]) {
    uint64_t stream = mix64(key ^ ((uint64_t)purpose * 0x9E3779B97F4A7C15ull));
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    acx_philox4x32_10(ctr, k, out);
}

uint64_t acx_hash64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a offset basis */
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull; /* FNV prime */
    }
    return h;
}

/* ---- real-valued draws ---- */

/* x = (hi << 21) | (lo >> 11): all 32 bits of hi above the top 21 bits of
 * lo, 53 random bits; u = x * 2^-53 in [0, 1 - 2^-53]. The single value x = 0 is
 * moved to 2^-54 so u is never 0 (log(u) in Box–Muller stays finite); this
 * shifts one of 2^53 outcomes by half an ulp and is otherwise exact — a
 * midpoint lattice (x + 0.5) * 2^-53 would need 54 bits and round the top
 * value to 1.0. */
double acx_rng_u01(uint32_t hi, uint32_t lo) {
    uint64_t x = ((uint64_t)hi << 21) | (uint64_t)(lo >> 11);
    if (x == 0) return 0x1p-54;
    return (double)x * 0x1p-53;
}

double acx_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t key, uint64_t index) {
    uint32_t w[4];
    acx_rng_block(seed, purpose, key, index, w);
    return acx_rng_u01(w[0], w[1]);
}

/* Box–Muller on the block's two 53-bit uniforms (words 0,1 and 2,3); the
 * cosine branch only, so element i depends on block i alone. */
double acx_rng_normal(uint64_t seed, uint32_t purpose, uint64_t key, uint64_t index) {
    uint32_t w[4];
    acx_rng_block(seed, purpose, key, index, w);
    double u1 = acx_rng_u01(w[0], w[1]);
    double u2 = acx_rng_u01(w[2], w[3]);
    return sqrt(-2.0 * log(u1)) * cos(ACX_TWO_PI * u2);
}

/* ---- integers and permutations ---- */

/* Lemire, "Fast random integer generation in an interval" (ACM TOMACS 2019):
 * the high 64 bits of x * bound are uniform on [0, bound) once the products
 * whose low half falls below 2^64 mod bound are rejected. Each 64-bit x is
 * (word 0 << 32) | word 1 of the block at *index, and *index advances by one
 * block per x drawn (accepted or rejected), so the consumption is a pure
 * function of the draws. bound 0 is treated as 1 (returns 0, still one block). */
uint64_t acx_rng_below(uint64_t seed, uint32_t purpose, uint64_t key, uint64_t *index,
                       uint64_t bound) {
    if (bound == 0) bound = 1;
    uint32_t w[4];
    acx_rng_block(seed, purpose, key, (*index)++, w);
    uint64_t x = ((uint64_t)w[0] << 32) | w[1];
    unsigned __int128 m = (unsigned __int128)x * bound;
    uint64_t low = (uint64_t)m;
    if (low < bound) {
        uint64_t threshold = (0 - bound) % bound; /* 2^64 mod bound */
        while (low < threshold) {
            acx_rng_block(seed, purpose, key, (*index)++, w);
            x = ((uint64_t)w[0] << 32) | w[1];
            m = (unsigned __int128)x * bound;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* Fisher–Yates (Durstenfeld): for i = n-1 down to 1, j = below(i + 1) drawn
 * from the stream starting at index 0, swap perm[i] and perm[j]. */
void acx_rng_permutation(uint64_t seed, uint32_t purpose, uint64_t key, int64_t n, int64_t *perm) {
    if (n <= 0) return;
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    uint64_t index = 0;
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)acx_rng_below(seed, purpose, key, &index, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

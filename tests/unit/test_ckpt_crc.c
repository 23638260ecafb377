/*
 * tests/unit/test_ckpt_crc.c — the CRC-32 arithmetic of checkpoint format
 * version 2 (io/ckpt_crc.h), whichever library computes it (ISA-L or zlib).
 *
 * References, none of them acx's code: the standard check value of
 * CRC-32/ISO-HDLC ("123456789" -> 0xcbf43926); values computed with
 * Python's zlib.crc32 (written down below with the expression that gave
 * them); a bit-at-a-time CRC written here from the polynomial (reflected
 * 0xEDB88320, initial value and final XOR 0xFFFFFFFF); and zlib's crc32_z /
 * crc32_combine called directly. So a checkpoint whose CRCs ISA-L computed
 * is one zlib (and h5py users) can check, and the reverse — format 2 does
 * not depend on the library.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "acx_test.h"
#include "io/ckpt_crc.h"

/* ---- the independent reference ---- */

static uint32_t ref_crc(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* xorshift64*: deterministic test bytes */
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t next_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static void fill(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(next_u64() >> 56);
}

/* ---- cases ---- */

static int test_known_values(void) {
    TESTING("CRC-32 check value and values from Python's zlib.crc32");
    /* the catalogue's check value of CRC-32/ISO-HDLC */
    CHECK(acx_ckpt_crc_update(0, "123456789", 9) == 0xcbf43926u);
    CHECK(acx_ckpt_crc_update(0, "", 0) == 0);
    /* zlib.crc32(b''.join(struct.pack('<f', i * 0.5) for i in range(1000)))
     * = 0xcc8870fa: a float32 tensor as a checkpoint stores it */
    float f[1000];
    for (int i = 0; i < 1000; i++)
        f[i] = (float)i * 0.5f;
    CHECK(acx_ckpt_crc_update(0, f, sizeof f) == 0xcc8870fau);
    /* b = bytes((i * 7 + 3) & 255 for i in range(100000)): zlib.crc32(b) =
     * 0xf730caa8, of b[:65536] 0xd660af09, of b[65536:] 0xf12be74d */
    static unsigned char b[100000];
    for (int i = 0; i < 100000; i++)
        b[i] = (unsigned char)((i * 7 + 3) & 255);
    CHECK(acx_ckpt_crc_update(0, b, sizeof b) == 0xf730caa8u);
    CHECK(acx_ckpt_crc_update(0, b, 65536) == 0xd660af09u);
    CHECK(acx_ckpt_crc_update(0, b + 65536, sizeof b - 65536) == 0xf12be74du);
    /* continuing a CRC = the CRC of the concatenation */
    CHECK(acx_ckpt_crc_update(acx_ckpt_crc_update(0, b, 12345), b + 12345, sizeof b - 12345) ==
          0xf730caa8u);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_against_reference(void) {
    TESTING("every length 0..1100, any alignment and start CRC vs bitwise");
    unsigned char buf[1200];
    fill(buf, sizeof buf);
    for (size_t n = 0; n <= 1100; n++) {
        size_t off = (size_t)(next_u64() % 64);
        uint32_t seed = n % 3 == 0 ? 0 : (uint32_t)next_u64();
        uint32_t want = ref_crc(seed, buf + off, n);
        if (acx_ckpt_crc_update(seed, buf + off, n) != want) {
            fprintf(stderr, "\nlength %zu offset %zu seed 0x%08x: got 0x%08x, want 0x%08x\n", n,
                    off, seed, acx_ckpt_crc_update(seed, buf + off, n), want);
            TEST_ERROR;
        }
    }
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_against_zlib(void) {
    TESTING("16 MiB in pieces of random sizes vs zlib's crc32_z");
    size_t n = (size_t)16 << 20;
    unsigned char *p = malloc(n + 64);
    CHECK(p != NULL);
    fill(p, n + 64);
    uLong z = crc32_z(0, p + 3, n);
    CHECK(acx_ckpt_crc_update(0, p + 3, n) == (uint32_t)z);
    uint32_t c = 0;
    for (size_t at = 0; at < n;) {
        size_t k = 1 + (size_t)(next_u64() % (3u << 20));
        if (k > n - at) k = n - at;
        c = acx_ckpt_crc_update(c, p + 3 + at, k);
        at += k;
    }
    CHECK(c == (uint32_t)z);
    free(p);
    PASSED();
    return 0;
error:
    free(p);
    FAILED();
    return 1;
}

/* The writer's sums: pieces of blocks from several "ranks" XOR into each
 * block's CRC; the reader's check passes them and names a damaged block. */
static int test_sum_and_check(void) {
    TESTING("block sums from pieces (save) and the streaming check (load)");
    enum { BYTES = 1000003 };
    unsigned char *p = malloc(BYTES);
    acx_ckpt_crc_t c = {.bytes = BYTES, .block = 65536};
    c.nblocks = acx_ckpt_crc_nblocks(BYTES, c.block);
    c.blocks = calloc(c.nblocks, sizeof *c.blocks);
    CHECK(p != NULL && c.blocks != NULL && c.nblocks == 16);
    fill(p, BYTES);
    /* 5 ranks with ragged cuts, each feeding its run in uneven pieces */
    uint64_t cuts[6] = {0, 1, 70000, 131072, 500001, BYTES};
    for (int r = 0; r < 5; r++) {
        acx_ckpt_crc_sum_t s;
        acx_ckpt_crc_sum_init(&s, &c, cuts[r]);
        for (uint64_t at = cuts[r]; at < cuts[r + 1];) {
            uint64_t k = 1 + next_u64() % 40000;
            if (k > cuts[r + 1] - at) k = cuts[r + 1] - at;
            acx_ckpt_crc_sum_feed(&s, p + at, k);
            at += k;
        }
        acx_ckpt_crc_sum_end(&s);
    }
    for (uint64_t k = 0; k < c.nblocks; k++) {
        uint64_t b = k * c.block, e = b + c.block < BYTES ? b + c.block : BYTES;
        CHECK(c.blocks[k] == ref_crc(0, p + b, e - b));
    }
    c.whole = acx_ckpt_crc_combine_blocks(&c);
    CHECK(c.whole == (uint32_t)crc32_z(0, p, BYTES));
    /* shift = zlib's crc32_combine with a zero second CRC */
    CHECK(acx_ckpt_crc_shift(0x12345678u, 777) == (uint32_t)crc32_combine(0x12345678u, 0, 777));

    acx_ckpt_crc_check_t k;
    acx_ckpt_crc_check_init(&k, &c, "dataset '/t'", 131072);
    CHECK_OK(acx_ckpt_crc_check_feed(&k, p + 131072, 300000));
    CHECK_OK(acx_ckpt_crc_check_feed(&k, p + 431072, BYTES - 431072));
    p[200000] ^= 0x10; /* block 3 */
    acx_ckpt_crc_check_init(&k, &c, "dataset '/t'", 131072);
    CHECK_STATUS(acx_ckpt_crc_check_feed(&k, p + 131072, BYTES - 131072), ACX_ERR_FORMAT,
                 "dataset '/t': checksum mismatch (corrupted file?) in bytes [196608, 262144) "
                 "(CRC-32 block 3 of 16)");
    free(c.blocks);
    free(p);
    PASSED();
    return 0;
error:
    free(c.blocks);
    free(p);
    FAILED();
    return 1;
}

static int test_impl_name(void) {
    TESTING("acx_ckpt_crc_impl names the library configure chose");
    const char *name = acx_ckpt_crc_impl();
#if ACX_HAVE_ISAL
    CHECK(strncmp(name, "ISA-L ", 6) == 0 && strstr(name, "(crc32_gzip_refl)") != NULL);
#else
    CHECK(strncmp(name, "zlib ", 5) == 0 && strstr(name, "(crc32_z)") != NULL);
#endif
    PASSED();
    return 0;
error:
    fprintf(stderr, "  acx_ckpt_crc_impl() = '%s'\n", name);
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_known_values();
    failed += test_against_reference();
    failed += test_against_zlib();
    failed += test_sum_and_check();
    failed += test_impl_name();
    return failed ? 1 : 0;
}

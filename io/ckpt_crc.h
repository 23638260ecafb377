/*
 * io/ckpt_crc.h — the checksums of checkpoint format version 2
 * (library-private): CRC-32 of fixed-size blocks of each dataset's raw
 * bytes, stored as attributes of the dataset. Shared by the collective
 * writer (io/ckpt_write.c), the reader (io/ckpt_read.c) and the tools
 * (io/ckpt_tools.c). Format: docs/checkpoint-format.md, "Storage and
 * checksums".
 *
 * The bytes are the dataset's elements as stored (little-endian, row-major,
 * dim 0 first): byte i of a dataset of n bytes is byte i of its contiguous
 * storage. Block k covers bytes [k*B, min((k+1)*B, n)); the CRC is zlib's
 * crc32 (CRC-32/ISO-HDLC, as Python's zlib.crc32), started from 0.
 */
#ifndef ACX_IO_CKPT_CRC_H
#define ACX_IO_CKPT_CRC_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "acx/status.h"

/* The three attributes of every dataset (format version 2). */
#define ACX_CKPT_CRC_ATTR             "acx_crc32"             /* uint32: the whole dataset */
#define ACX_CKPT_CRC_BLOCKS_ATTR      "acx_crc32_blocks"      /* uint32 [nblocks] */
#define ACX_CKPT_CRC_BLOCK_BYTES_ATTR "acx_crc32_block_bytes" /* int64: B */

/* The smallest block (bytes) and the most blocks of one dataset: B is the
 * smallest power-of-two multiple of the minimum that keeps nblocks at or
 * below the cap, so the block array stays at 16 KiB (HDF5 1.10 keeps an
 * attribute in one object-header message of at most 64 KiB). */
#define ACX_CKPT_CRC_BLOCK_MIN  ((uint64_t)64 << 10)
#define ACX_CKPT_CRC_MAX_BLOCKS 4096

/* A dataset's checksums: `blocks` holds nblocks CRCs (malloc'd when read
 * from a file, free with acx_ckpt_crc_free). */
typedef struct acx_ckpt_crc {
    uint64_t bytes;   /* the dataset's size */
    uint64_t block;   /* B */
    uint64_t nblocks; /* ceil(bytes / B) */
    uint32_t whole;   /* CRC of all `bytes` */
    uint32_t *blocks;
} acx_ckpt_crc_t;

/* B for a dataset of `bytes` bytes (see above). The test hook
 * ACX_TEST_CKPT_CRC_BLOCK=N (bytes, >= 1) replaces the minimum, so small
 * test tensors span many blocks. */
uint64_t acx_ckpt_crc_block_bytes(uint64_t bytes);

/* ceil(bytes / block); block >= 1. */
static inline uint64_t acx_ckpt_crc_nblocks(uint64_t bytes, uint64_t block) {
    return bytes / block + (bytes % block != 0);
}

/* CRC of bytes [0, len) given c = the CRC of bytes [0, len - n) — as if the
 * last n bytes were zeros and contributed nothing: the linear part of
 * zlib's crc32_combine. The CRC of a block cut into pieces p_1..p_j (in
 * order) is the XOR over i of shift(crc(p_i), bytes after p_i in the block),
 * which is what lets ranks sum their pieces with one MPI_BXOR all-reduce. */
uint32_t acx_ckpt_crc_shift(uint32_t crc, uint64_t n);

/* CRC of bytes [0, len) of `buf`, continuing `crc` (0 to start): zlib's
 * crc32(crc, buf, len), computed by ISA-L when acx was built with it (and
 * it passed its check against zlib), else by zlib. Thread-safe. */
uint32_t acx_ckpt_crc_update(uint32_t crc, const void *buf, uint64_t len);

/* Which library computes acx_ckpt_crc_update, e.g. "ISA-L 2.30.0
 * (crc32_gzip_refl)" or "zlib 1.2.13 (crc32_z)"; for `acx version`, `acx
 * env` and the io log. A static string. */
const char *acx_ckpt_crc_impl(void);

/* The whole dataset's CRC from its block CRCs (c->blocks, nblocks, block,
 * bytes). */
uint32_t acx_ckpt_crc_combine_blocks(const acx_ckpt_crc_t *c);

/* Write the three attributes on `dset` (collective when the file's
 * metadata writes are: every rank passes the same values). Returns < 0
 * with HDF5's error stack for ACX_H5_CHECK_GOTO. Lock held. */
herr_t acx_ckpt_crc_write_attrs(hid_t dset, const acx_ckpt_crc_t *c);

/* Read the attributes of `dset`, a dataset of `bytes` bytes. *present_p: 1
 * when they are there (c filled; free with acx_ckpt_crc_free), 0 when none
 * of the three is (a version-1 dataset; c untouched). ACX_ERR_FORMAT naming
 * `what` when only some are, or they are of the wrong type or size, or the
 * blocks do not combine to the whole-dataset CRC. Lock held. */
acx_status_t acx_ckpt_crc_read_attrs(hid_t dset, uint64_t bytes, const char *what, int *present_p,
                                     acx_ckpt_crc_t *c);
void acx_ckpt_crc_free(acx_ckpt_crc_t *c);

/* This rank's share of a dataset's block CRCs, as its bytes go by (save):
 * start at any offset `from`, feed consecutive bytes, end. The bytes of
 * each block are CRCed as one run; a run is XORed into the block's slot of
 * crc->blocks, shifted past the block's bytes after it (acx_ckpt_crc_shift)
 * — so when the ranks' runs tile every block, the MPI_BXOR of the slots
 * over the ranks is each block's CRC. Shifts happen only for a run that
 * stops inside a block (at most one per call of _end). */
typedef struct acx_ckpt_crc_sum {
    acx_ckpt_crc_t *crc;
    uint64_t pos; /* dataset offset of the next byte */
    uint32_t run; /* CRC of the current run, [max(from, its block's start), pos) */
} acx_ckpt_crc_sum_t;

void acx_ckpt_crc_sum_init(acx_ckpt_crc_sum_t *s, acx_ckpt_crc_t *crc, uint64_t from);
void acx_ckpt_crc_sum_feed(acx_ckpt_crc_sum_t *s, const void *buf, uint64_t n);
void acx_ckpt_crc_sum_end(acx_ckpt_crc_sum_t *s);

/* Checking bytes as they arrive: start at a block boundary `from`, feed
 * consecutive bytes; each block is compared as soon as its last byte is fed.
 * A mismatch is ACX_ERR_FORMAT: "<what>: checksum mismatch (corrupted
 * file?) in bytes [a, b) (CRC-32 block k of n): computed 0x.., stored
 * 0x..". */
typedef struct acx_ckpt_crc_check {
    const acx_ckpt_crc_t *crc;
    const char *what;
    uint64_t pos; /* dataset offset of the next byte */
    uint32_t run; /* CRC of [start of pos's block, pos) */
} acx_ckpt_crc_check_t;

void acx_ckpt_crc_check_init(acx_ckpt_crc_check_t *k, const acx_ckpt_crc_t *crc, const char *what,
                             uint64_t from);
acx_status_t acx_ckpt_crc_check_feed(acx_ckpt_crc_check_t *k, const void *buf, uint64_t n);

#endif /* ACX_IO_CKPT_CRC_H */

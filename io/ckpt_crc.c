/*
 * io/ckpt_crc.c — io/ckpt_crc.h: the block layout of a checkpoint
 * dataset's CRC-32s, combining CRCs of pieces, the three attributes that
 * hold them, and the streaming check. Which ranks compute which pieces, and
 * the all-reduce that joins them, are the writer's (io/ckpt_write.c); which
 * bytes a reader checks is the reader's (io/ckpt_read.c, io/ckpt_tools.c).
 *
 * Arithmetic: zlib's crc32 (reflected CRC-32, polynomial 0xEDB88320,
 * initial and final XOR 0xFFFFFFFF). zlib's crc32_combine(c1, c2, n2) is
 * M(n2)·c1 XOR c2, with M(n) the GF(2)-linear map "append n zero bytes
 * to a message whose conditioned CRC is c1"; the conditioning cancels in
 * that form, so CRCs of consecutive pieces combine by XOR once each is
 * shifted past the bytes that follow it (acx_ckpt_crc_shift). zlib >= 1.2.12
 * precomputes M(n) for a fixed n (crc32_combine_gen/op): joining 4096 blocks
 * then costs 4096 GF(2) multiplications instead of 4096 exponentiations.
 *
 * Speed. The CRC of the bytes themselves (acx_ckpt_crc_update) is ISA-L's
 * crc32_gzip_refl when configure found ISA-L (ACX_HAVE_ISAL; folding with
 * carry-less multiplication, AVX-512 where the CPU has it): the same values
 * as zlib's crc32 — same polynomial, same conditioning, and continuing a
 * CRC from a previous value works alike — at 10-11 GB/s on one core of the
 * build machine against zlib 1.2.13's 1.6-4 GB/s (a 256 MiB buffer, in one
 * run). On a load from the page cache that was most of the time. Before
 * its first use ISA-L is checked against zlib on fixed vectors (the
 * standard check value of "123456789", 0xcbf43926, and runs of every length
 * to 300 bytes continued from a nonzero CRC); should they ever disagree,
 * zlib computes every CRC and acx_ckpt_crc_impl says so. The combining
 * arithmetic stays zlib's.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#if ACX_HAVE_ISAL
#include <isa-l.h>
#include <isa-l/crc.h>
#endif

#include "io/ckpt_crc.h"
#include "io/h5.h"
#include "base/error.h"
#include "base/settings.h"

/* The CRCs are of the bytes as stored (little-endian). The writer and the
 * reader checksum acx's in-memory buffers, which hold the same bytes only
 * on a little-endian host; a big-endian port must checksum the file type's
 * bytes instead. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "io/ckpt_crc.c: checkpoint checksums assume a little-endian host"
#endif

uint64_t acx_ckpt_crc_block_bytes(uint64_t bytes) {
    uint64_t block = ACX_CKPT_CRC_BLOCK_MIN;
    int64_t v;
    if (acx_env_int(ACX_ENV_TEST_CKPT_CRC_BLOCK, &v) == 1) block = (uint64_t)v;
    while (acx_ckpt_crc_nblocks(bytes, block) > ACX_CKPT_CRC_MAX_BLOCKS)
        block *= 2;
    return block;
}

uint32_t acx_ckpt_crc_shift(uint32_t crc, uint64_t n) {
    /* crc32_combine(c, 0, n) = M(n)·c; older zlib returns c1 unchanged for
     * n == 0, which is also M(0)·c */
    return n == 0 ? crc : (uint32_t)crc32_combine(crc, 0, (z_off_t)n);
}

/* ---- the CRC of bytes: ISA-L or zlib ---- */

static uint32_t update_zlib(uint32_t crc, const unsigned char *p, uint64_t len) {
    uLong c = crc;
    /* crc32_z takes a size_t; a uInt-sized loop would cap at 4 GiB */
    while (len > 0) {
        size_t take = len > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)len;
        c = crc32_z(c, p, take);
        p += take;
        len -= take;
    }
    return (uint32_t)c;
}

#if ACX_HAVE_ISAL
static uint32_t update_isal(uint32_t crc, const unsigned char *p, uint64_t len) {
    return crc32_gzip_refl(crc, p, len);
}

/* ISA-L against zlib (see the file comment). 1 when they agree. */
static int isal_agrees(void) {
    unsigned char v[300];
    if (crc32_gzip_refl(0, (const unsigned char *)"123456789", 9) != 0xcbf43926u) return 0;
    for (int i = 0; i < (int)sizeof v; i++)
        v[i] = (unsigned char)(i * 131 + 7);
    for (uint64_t n = 0; n <= sizeof v; n++) {
        uint32_t seed = (uint32_t)(0x9e3779b9u * (n + 1));
        if (crc32_gzip_refl(seed, v, n) != update_zlib(seed, v, n)) return 0;
    }
    return 1;
}
#endif

static uint32_t (*crc_fn)(uint32_t, const unsigned char *, uint64_t) = update_zlib;
static char crc_name[128] = "zlib";
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_pick(void) {
    snprintf(crc_name, sizeof crc_name, "zlib %s (crc32_z)", zlibVersion());
#if ACX_HAVE_ISAL
    if (isal_agrees()) {
        crc_fn = update_isal;
        snprintf(crc_name, sizeof crc_name, "ISA-L %d.%d.%d (crc32_gzip_refl)", ISAL_MAJOR_VERSION,
                 ISAL_MINOR_VERSION, ISAL_PATCH_VERSION);
    } else {
        snprintf(crc_name, sizeof crc_name,
                 "zlib %s (crc32_z; ISA-L %d.%d.%d disagreed with zlib on the check vectors, "
                 "so it is not used)",
                 zlibVersion(), ISAL_MAJOR_VERSION, ISAL_MINOR_VERSION, ISAL_PATCH_VERSION);
    }
#endif
}

const char *acx_ckpt_crc_impl(void) {
    pthread_once(&crc_once, crc_pick);
    return crc_name;
}

uint32_t acx_ckpt_crc_update(uint32_t crc, const void *buf, uint64_t len) {
    pthread_once(&crc_once, crc_pick);
    return crc_fn(crc, buf, len);
}

uint32_t acx_ckpt_crc_combine_blocks(const acx_ckpt_crc_t *c) {
    if (c->nblocks == 0) return 0; /* crc32 of nothing */
    uLong whole = c->blocks[0];
    uint64_t last = c->bytes - (c->nblocks - 1) * c->block; /* the last block's length */
#if ZLIB_VERNUM >= 0x12c0
    uLong op = c->nblocks > 2 ? crc32_combine_gen((z_off_t)c->block) : 0;
    for (uint64_t k = 1; k + 1 < c->nblocks; k++)
        whole = crc32_combine_op(whole, c->blocks[k], op);
#else
    for (uint64_t k = 1; k + 1 < c->nblocks; k++)
        whole = crc32_combine(whole, c->blocks[k], (z_off_t)c->block);
#endif
    if (c->nblocks > 1) whole = crc32_combine(whole, c->blocks[c->nblocks - 1], (z_off_t)last);
    return (uint32_t)whole;
}

/* ---- attributes ---- */

/* One attribute of `count` elements (a scalar when count < 0). */
static herr_t write_attr(hid_t obj, const char *name, hid_t ftype, hid_t mtype, int64_t count,
                         const void *value) {
    hsize_t n = count < 0 ? 0 : (hsize_t)count;
    hid_t space = count < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, NULL), attr = -1;
    herr_t ret = -1;
    if (space < 0) return -1;
    attr = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr >= 0) ret = H5Awrite(attr, mtype, value);
    /* keep the failure's error stack past the closes */
    hid_t estack = ret < 0 ? H5Eget_current_stack() : -1;
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    if (estack >= 0) H5Eset_current_stack(estack);
    return ret;
}

herr_t acx_ckpt_crc_write_attrs(hid_t dset, const acx_ckpt_crc_t *c) {
    static const uint32_t none = 0; /* a valid pointer for an empty array */
    int64_t block = (int64_t)c->block;
    if (write_attr(dset, ACX_CKPT_CRC_ATTR, H5T_STD_U32LE, H5T_NATIVE_UINT32, -1, &c->whole) < 0)
        return -1;
    if (write_attr(dset, ACX_CKPT_CRC_BLOCK_BYTES_ATTR, H5T_STD_I64LE, H5T_NATIVE_INT64, -1,
                   &block) < 0)
        return -1;
    return write_attr(dset, ACX_CKPT_CRC_BLOCKS_ATTR, H5T_STD_U32LE, H5T_NATIVE_UINT32,
                      (int64_t)c->nblocks, c->nblocks > 0 ? (const void *)c->blocks : &none);
}

/* An integer attribute of `want` elements (-1: a scalar) into `mtype`.
 * ACX_ERR_FORMAT naming it when it is not that. Lock held. */
static acx_status_t read_int_attr(hid_t dset, const char *name, const char *what, int64_t want,
                                  hid_t mtype, void *out) {
    acx_status_t status = ACX_OK;
    char which[1400];
    hid_t attr = -1, type = -1, space = -1;
    snprintf(which, sizeof which, "attribute '%s' of %s", name, what);
    ACX_H5_CHECK_GOTO(attr = H5Aopen(dset, name, H5P_DEFAULT), which, status, out);
    ACX_H5_CHECK_GOTO(type = H5Aget_type(attr), which, status, out);
    ACX_H5_CHECK_GOTO(space = H5Aget_space(attr), which, status, out);
    int ndims = H5Sget_simple_extent_ndims(space);
    hssize_t npts = H5Sget_simple_extent_npoints(space);
    int shape_ok = want < 0 ? ndims == 0 : ndims == 1 && npts == (hssize_t)want;
    if (H5Tget_class(type) != H5T_INTEGER || !shape_ok) {
        if (want < 0)
            status = ACX_ERROR(ACX_ERR_FORMAT, "%s is not an integer scalar", which);
        else
            status = ACX_ERROR(
                ACX_ERR_FORMAT, "%s holds %lld values (%s), expected %lld integers (one per block)",
                which, (long long)npts,
                H5Tget_class(type) == H5T_INTEGER ? "integers" : "not integers", (long long)want);
        goto out;
    }
    ACX_H5_CHECK_GOTO(H5Aread(attr, mtype, out), which, status, out);
out:
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    return status;
}

acx_status_t acx_ckpt_crc_read_attrs(hid_t dset, uint64_t bytes, const char *what, int *present_p,
                                     acx_ckpt_crc_t *c) {
    static const char *const names[3] = {ACX_CKPT_CRC_ATTR, ACX_CKPT_CRC_BLOCK_BYTES_ATTR,
                                         ACX_CKPT_CRC_BLOCKS_ATTR};
    int has[3], count = 0;
    for (int i = 0; i < 3; i++) {
        htri_t e = H5Aexists(dset, names[i]);
        if (e < 0) return acx_error_h5("H5Aexists", what, __FILE__, __LINE__);
        has[i] = e > 0;
        count += has[i];
    }
    if (count == 0) {
        *present_p = 0;
        return ACX_OK;
    }
    if (count < 3) {
        for (int i = 0; i < 3; i++)
            if (!has[i])
                return ACX_ERROR(ACX_ERR_FORMAT,
                                 "%s has checksum attributes but not '%s' (damaged or edited)",
                                 what, names[i]);
    }
    acx_ckpt_crc_t r = {.bytes = bytes};
    int64_t block = 0;
    ACX_CHECK(read_int_attr(dset, ACX_CKPT_CRC_ATTR, what, -1, H5T_NATIVE_UINT32, &r.whole));
    ACX_CHECK(
        read_int_attr(dset, ACX_CKPT_CRC_BLOCK_BYTES_ATTR, what, -1, H5T_NATIVE_INT64, &block));
    if (block < 1)
        return ACX_ERROR(ACX_ERR_FORMAT, "attribute '%s' of %s is %lld; a block has >= 1 byte",
                         ACX_CKPT_CRC_BLOCK_BYTES_ATTR, what, (long long)block);
    r.block = (uint64_t)block;
    r.nblocks = acx_ckpt_crc_nblocks(bytes, r.block);
    r.blocks = acx_malloc((size_t)(r.nblocks > 0 ? r.nblocks : 1) * sizeof *r.blocks,
                          "checkpoint checksums");
    if (r.blocks == NULL) return ACX_ERR_NO_MEMORY;
    acx_status_t status = read_int_attr(dset, ACX_CKPT_CRC_BLOCKS_ATTR, what, (int64_t)r.nblocks,
                                        H5T_NATIVE_UINT32, r.blocks);
    if (status == ACX_OK && acx_ckpt_crc_combine_blocks(&r) != r.whole)
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "%s: its checksum attributes disagree: '%s' is 0x%08x but the %llu "
                           "block CRCs combine to 0x%08x (damaged or edited)",
                           what, ACX_CKPT_CRC_ATTR, r.whole, (unsigned long long)r.nblocks,
                           acx_ckpt_crc_combine_blocks(&r));
    if (status != ACX_OK) {
        free(r.blocks);
        return status;
    }
    *c = r;
    *present_p = 1;
    return ACX_OK;
}

void acx_ckpt_crc_free(acx_ckpt_crc_t *c) {
    free(c->blocks);
    c->blocks = NULL;
}

/* ---- summing a rank's share ---- */

void acx_ckpt_crc_sum_init(acx_ckpt_crc_sum_t *s, acx_ckpt_crc_t *crc, uint64_t from) {
    *s = (acx_ckpt_crc_sum_t){.crc = crc, .pos = from, .run = 0};
}

void acx_ckpt_crc_sum_feed(acx_ckpt_crc_sum_t *s, const void *buf, uint64_t n) {
    const acx_ckpt_crc_t *c = s->crc;
    const unsigned char *p = buf;
    while (n > 0) {
        uint64_t blk = s->pos / c->block, begin = blk * c->block;
        uint64_t end = begin + c->block < c->bytes ? begin + c->block : c->bytes;
        uint64_t take = end - s->pos < n ? end - s->pos : n;
        s->run = acx_ckpt_crc_update(s->run, p, take);
        s->pos += take;
        p += take;
        n -= take;
        if (s->pos == end) {
            /* the run ends with its block: no shift */
            c->blocks[blk] ^= s->run;
            s->run = 0;
        }
    }
}

void acx_ckpt_crc_sum_end(acx_ckpt_crc_sum_t *s) {
    const acx_ckpt_crc_t *c = s->crc;
    if (c->nblocks == 0 || s->pos >= c->bytes || s->pos % c->block == 0) return; /* nothing open */
    uint64_t blk = s->pos / c->block, begin = blk * c->block;
    uint64_t end = begin + c->block < c->bytes ? begin + c->block : c->bytes;
    c->blocks[blk] ^= acx_ckpt_crc_shift(s->run, end - s->pos);
    s->run = 0;
}

/* ---- checking ---- */

void acx_ckpt_crc_check_init(acx_ckpt_crc_check_t *k, const acx_ckpt_crc_t *crc, const char *what,
                             uint64_t from) {
    *k = (acx_ckpt_crc_check_t){.crc = crc, .what = what, .pos = from, .run = 0};
}

acx_status_t acx_ckpt_crc_check_feed(acx_ckpt_crc_check_t *k, const void *buf, uint64_t n) {
    const acx_ckpt_crc_t *c = k->crc;
    const unsigned char *p = buf;
    if (k->pos + n > c->bytes)
        return ACX_ERROR(
            ACX_ERR_INTERNAL, "%s: checksum check fed past the end (%llu + %llu > %llu)", k->what,
            (unsigned long long)k->pos, (unsigned long long)n, (unsigned long long)c->bytes);
    while (n > 0) {
        uint64_t blk = k->pos / c->block, begin = blk * c->block;
        uint64_t end = begin + c->block < c->bytes ? begin + c->block : c->bytes;
        uint64_t take = end - k->pos < n ? end - k->pos : n;
        k->run = acx_ckpt_crc_update(k->run, p, take);
        k->pos += take;
        p += take;
        n -= take;
        if (k->pos < end) break;
        if (k->run != c->blocks[blk])
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "%s: checksum mismatch (corrupted file?) in bytes [%llu, %llu) "
                             "(CRC-32 block %llu of %llu): computed 0x%08x, stored 0x%08x",
                             k->what, (unsigned long long)begin, (unsigned long long)end,
                             (unsigned long long)blk, (unsigned long long)c->nblocks, k->run,
                             c->blocks[blk]);
        k->run = 0;
    }
    return ACX_OK;
}

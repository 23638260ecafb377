/*
 * io/ckpt_write.c — the one writer of acx's HDF5 files (io/checkpoint.h
 * acx_ckpt_save): checkpoints, and weights files (acx_ckpt_save_opts
 * without checksums: io/weights.c). It owns the file's life (temporary
 * name, fsync, rename), its storage (groups, datasets, checksums,
 * attribute and string encodings) and who writes which bytes; what the
 * tensors and attributes mean is the caller's (the runtime's state:
 * io/ckpt_format.h's layout; the weights file: io/weights.c). The reader
 * is io/ckpt_read.c. Format description: docs/checkpoint-format.md.
 *
 * Writing. One shared file, created by every rank with the MPI-IO driver
 * and collective metadata (reads and writes: every rank creates every
 * group, dataset and attribute). Each rank writes its io rows of each
 * tensor — one contiguous run of the file, possibly empty — itself, with
 * independent transfers in pieces of about CKPT_IO_PIECE, so a save's
 * per-rank cost depends on the rows it owns, not on the world size.
 * Statuses are agreed (acx_coll_agree) after every collective phase, so a
 * failure on one rank is the same error on all and no rank is left inside a
 * collective HDF5 call the others abandoned.
 *
 * Crash safety. The file is written as "<path>.tmp" in the same directory
 * (same filesystem, so the rename is atomic), then: H5Fclose (collective:
 * the last metadata), every rank fsyncs the file (what its node cached
 * reaches storage), rank 0 rename(2)s it to <path> and fsyncs the
 * directory (the rename itself), a barrier (no rank returns before the
 * rename is visible). Nothing touches <path> before the rename, so a job
 * killed at any moment leaves the previous checkpoint intact; a failure
 * removes the temporary file (rank 0, after the collective close).
 *
 * Kill points: four named points of a save (ckpt_kill_point below) where
 * the test suite's own build of this file kills or stops ranks; the
 * library's build has none.
 *
 * Storage and checksums (format version 2). Datasets are contiguous and
 * unfiltered; each carries the CRC-32s of fixed-size blocks of its raw
 * bytes and of all of them as attributes (io/ckpt_crc.h). Why not HDF5's
 * Fletcher-32 filter, which version 1 used: parallel HDF5 1.10.8 allocates
 * and fills every chunk of a filtered dataset collectively at H5Dcreate2
 * (H5D__chunk_allocate writes zeros whatever the alloc and fill-time
 * settings) and then writes it again, so a save wrote every byte twice and
 * ran at 0.11-0.18 of dd's rate (loads 0.16-0.33); contiguous and unfiltered,
 * each byte is written once.
 *   Save: every rank computes the CRCs of the parts of blocks its rows
 * cover, piece by piece right before writing each piece (write_tensor),
 * and XORs each block's part, shifted past the rest of the block, into the
 * block's slot (acx_ckpt_crc_sum_*); once all tensors are written one
 * MPI_BXOR all-reduce over all blocks of all tensors joins the parts
 * (save_crcs_join) and every rank writes the same attributes. The ranks'
 * rows must tile each tensor, which one all-reduce of the row counts
 * checks before the file is created (save_rows_check).
 *   Cost, as first measured (with zlib's CRC, before the fsync changes and
 * the write-behind; today's numbers: docs/checkpoint-format.md,
 * "Throughput") on the 2-core build VM (shared with other jobs: medians
 * of 5, benchmarks/run-ckpt-io.sh, 1 GiB = 4 x [16384 x 4096] float32
 * under NO_SHARD, where every loading rank reads every row; MiB/s against
 * dd on the same bytes). Save, local disk: 1353 (np 1), 1863 (np 2), 389
 * (np 4); dd 1689 / 704 / 1546 — the disk's rate moves several-fold from
 * one run to the next. Save, tmpfs: 1662 / 2899 / 356 against dd 2725 /
 * 2802 / 2769. Load, disk: 724 / 705 / 478 against dd 1610 / 1741 /
 * 2147; tmpfs: 2680 / 2240 / 1216 against dd 7831 / 7179 / 6523. (np 4
 * puts 4 ranks on 2 cores; the same save alone ran in 0.65-1.3 s.)
 *   Where the time goes: zlib's crc32 runs at ~4 GB/s on one core, 0.26 s
 * per GiB and rank — on a load from the page cache (0.13 s of copying per
 * GiB) most of the time, so a load that checks every byte it reads stays
 * near 1/3 of tmpfs's dd rate, and under NO_SHARD every rank pays it for
 * every row. A CRC of each ~1 MiB piece right before it is written (or
 * right after it is read) instead of one pass over a tensor, then its write:
 * 1 GiB in 0.51-0.76 s against 0.95-1.66 s (a C loop of crc32 + pwrite to
 * this disk), as the write copies from cache what the CRC just read.
 * Independent raw-data writes: one collective H5Dwrite per tensor with
 * two-phase buffering took 0.68 s (np 2) and 0.82 s (np 4) per 256 MiB on
 * tmpfs, against 0.47 and 0.46 s when each rank wrote its own run
 * (H5FD_MPIO_INDIVIDUAL_IO; medians of 8); independent transfers keep that
 * and let each rank write its pieces without a collective call each.
 * Version 1 (Fletcher-32) ran at 0.11-0.18 of dd's
 * rate for saves and 0.16-0.33 for loads. Collective reads measured 2x
 * slower than independent ones (version 1, 2 and 4 ranks).
 *
 *
 * Dtypes: any acx dtype. The file type is the little-endian standard type
 * (float16/bfloat16: io/h5.c's derived 2-byte float types; h5py reads the
 * first as float16 and the second as float32, exactly; h5dump prints both).
 * There is no unsigned 64-bit acx dtype: random-stream rows are int64 (bit
 * patterns kept).
 *
 * Strings: a string attribute is a fixed-length NUL-terminated ASCII scalar
 * attribute (h5py: f.attrs['x'], h5dump shows it); one of CKPT_ATTR_MAX
 * bytes or more (HDF5 1.10 keeps attributes in a 64 KiB object header
 * message) becomes a dataset "<object>/<name>" of one fixed-length string,
 * stored and checksummed like the tensors (h5py: f['config'][0]).
 * acx_ckpt_get_str finds either.
 */
#define _GNU_SOURCE /* sync_file_range */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/ckpt_crc.h"
#include "io/ckpt_pkg.h"
#include "io/h5.h"
#include "base/error.h"
#include "base/log.h"
#include "base/settings.h"

/* Bytes a rank writes between two write-behinds (write_behind). */
#define CKPT_WRITE_BEHIND ((uint64_t)32 << 20)
/* Longest string kept as an attribute (HDF5 1.10 object header messages are
 * limited to 64 KiB, with some room for the attribute's own header). */
#define CKPT_ATTR_MAX 60000

/* ---- small helpers ---- */

/* Named points of a save where the test suite kills or stops ranks, to show
 * that a save interrupted anywhere leaves the previous checkpoint intact.
 * In the library they are nothing; test programs compile their own copy
 * of this file with -DACX_TEST_KILL_POINTS (tests/ckpt_kill_points.h). */
#ifdef ACX_TEST_KILL_POINTS
#include "tests/ckpt_kill_points.h"
#else
#define ckpt_kill_point(where, rank) ((void)0)
#endif

/* "a/b/c.h5" → "a/b"; "c.h5" → "."; "/c.h5" → "/". */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL) return acx_ckpt_str_concat(".", "");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = acx_malloc(n + 1, "checkpoint directory");
    if (d == NULL) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

/* Standard (little-endian) file type of an acx dtype; not to be closed. */
static hid_t file_type(acx_dtype_t dtype) {
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: return H5T_IEEE_F32LE;
    case ACX_DTYPE_FLOAT64: return H5T_IEEE_F64LE;
    case ACX_DTYPE_INT8: return H5T_STD_I8LE;
    case ACX_DTYPE_UINT8: return H5T_STD_U8LE;
    case ACX_DTYPE_UINT16: return H5T_STD_U16LE;
    case ACX_DTYPE_INT32: return H5T_STD_I32LE;
    case ACX_DTYPE_INT64: return H5T_STD_I64LE;
    default: return acx_h5_native((int)dtype); /* float16, bfloat16 (x86: LE) */
    }
}

/* Create the groups of `path` that are missing: all of its components, or
 * all but the last with parents_only. Groups track link creation order so
 * acx_ckpt_list can list in it. Lock held; collective when metadata writes
 * are (every rank makes the same calls). */
static acx_status_t make_groups(hid_t file, hid_t gcpl, const char *path, int parents_only,
                                const char *what) {
    acx_status_t status = ACX_OK;
    char buf[1024];
    size_t n = strlen(path);
    if (n >= sizeof buf)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint path '%s' is longer than %zu bytes", path,
                         sizeof buf - 1);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && !(buf[i] == '\0' && !parents_only)) continue;
        char c = buf[i];
        buf[i] = '\0';
        int e = buf[i - 1] != '/' ? acx_ckpt_path_exists(file, buf) : 1;
        if (e < 0) {
            status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
            goto out;
        }
        if (e == 0) {
            hid_t g;
            ACX_H5_CHECK_GOTO(g = H5Gcreate2(file, buf, H5P_DEFAULT, gcpl, H5P_DEFAULT), what,
                              status, out);
            H5Gclose(g);
        }
        buf[i] = c;
    }
out:
    return status;
}

/* ---- saving ---- */

/* The block CRCs of every tensor of a save, in one array so that one
 * all-reduce joins them: crcs[i].blocks points into `all`. */
typedef struct {
    acx_ckpt_crc_t *crcs;
    uint32_t *all;
    uint64_t total;
    int64_t *rows; /* [n]: this rank's io rows, then their sum over the ranks */
} save_crcs_t;

static void save_crcs_free(save_crcs_t *s) {
    free(s->crcs);
    free(s->all);
    free(s->rows);
}

/* Lay out every tensor's blocks, zeroed (no MPI): write_tensor adds this
 * rank's share as it writes. */
static acx_status_t save_crcs_layout(const acx_ckpt_tensor_t *tensors, int n, save_crcs_t *s) {
    s->crcs = acx_calloc((size_t)(n > 0 ? n : 1), sizeof *s->crcs, "checkpoint checksums");
    s->rows = acx_malloc((size_t)(n > 0 ? n : 1) * sizeof *s->rows, "checkpoint rows");
    if (s->crcs == NULL || s->rows == NULL) return ACX_ERR_NO_MEMORY;
    s->total = 0;
    for (int i = 0; i < n; i++) {
        acx_ckpt_crc_t *c = &s->crcs[i];
        c->bytes = tensor_bytes(&tensors[i]);
        c->block = acx_ckpt_crc_block_bytes(c->bytes);
        c->nblocks = acx_ckpt_crc_nblocks(c->bytes, c->block);
        s->total += c->nblocks;
        s->rows[i] = tensors[i].io_end - tensors[i].io_begin;
    }
    if (s->total > (uint64_t)INT_MAX)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint of %llu checksum blocks (at most %d)",
                         (unsigned long long)s->total, INT_MAX);
    s->all =
        acx_calloc((size_t)(s->total > 0 ? s->total : 1), sizeof *s->all, "checkpoint checksums");
    if (s->all == NULL) return ACX_ERR_NO_MEMORY;
    uint32_t *next = s->all;
    for (int i = 0; i < n; i++) {
        s->crcs[i].blocks = next;
        next += s->crcs[i].nblocks;
    }
    return ACX_OK;
}

/* The ranks' io rows must tile every tensor (collective; the statuses are
 * agreed before): the ranks' shares of a block join into its CRC only when
 * they tile it, which the sum of the rows checks (the dim-0 rule, one row
 * per rank, or one rank writing all rows pass; an overlap or a gap would
 * store a CRC no reader could match). The sums are the same everywhere. */
static acx_status_t save_rows_check(acx_comm_t *world, const acx_ckpt_tensor_t *tensors, int n,
                                    save_crcs_t *s) {
    acx_status_t status = ACX_OK;
    if (world != NULL)
        ACX_MPI_CHECK_GOTO(
            MPI_Allreduce(MPI_IN_PLACE, s->rows, n, MPI_INT64_T, MPI_SUM, world->mpi), status, out);
    for (int i = 0; i < n && status == ACX_OK; i++)
        if (s->rows[i] != tensors[i].shape[0])
            status =
                ACX_ERROR(ACX_ERR_INVALID_ARG,
                          "checkpoint tensor '%s': the ranks' io rows add up to %lld rows, "
                          "the tensor has %lld (each row must be written by exactly one "
                          "rank)",
                          tensors[i].path, (long long)s->rows[i], (long long)tensors[i].shape[0]);
out:
    return agree(world, status);
}

/* Join the ranks' shares (collective, once every tensor is written): one
 * MPI_BXOR all-reduce of every block slot of every tensor, then each
 * tensor's whole-dataset CRC from its blocks. Every rank ends with the same
 * values, as the collective attribute writes need. */
static acx_status_t save_crcs_join(acx_comm_t *world, int n, save_crcs_t *s) {
    acx_status_t status = ACX_OK;
    if (world != NULL)
        ACX_MPI_CHECK_GOTO(
            MPI_Allreduce(MPI_IN_PLACE, s->all, (int)s->total, MPI_UINT32_T, MPI_BXOR, world->mpi),
            status, out);
out:
    status = agree(world, status);
    for (int i = 0; i < n && status == ACX_OK; i++)
        s->crcs[i].whole = acx_ckpt_crc_combine_blocks(&s->crcs[i]);
    return status;
}

/* Property lists of a save, and the write-behind of this rank's data. */
typedef struct {
    hid_t gcpl, dcpl, dxpl;
    int wb_fd;         /* the temporary file, for sync_file_range; -1: none */
    uint64_t wb_bytes; /* this rank's bytes written since the last write-behind */
} save_plists_t;

/* Start the write-back of bytes [off, off + len) of the file this rank has
 * just written (Linux sync_file_range(SYNC_FILE_RANGE_WRITE): it returns
 * at once). The disk then writes a save's data while the ranks are still
 * checksumming and copying the rest, and the fsync after the close waits
 * only for the tail; without it the kernel starts writing when the dirty
 * data passes its background threshold (by default 10% of memory) and the
 * fsync wrote most of it. A hint: a failure changes nothing (the fsync
 * reports errors). Measured (1 GiB, page cache dropped, alternating with
 * and without it and dd conv=fdatasync in one run, load average 2-17 from
 * other jobs): acx/dd per run, median of 5, 1 rank 1.45 with against 1.03
 * without, 2 ranks 1.18 against 0.90 (with/without in the same run: 1.36
 * and 1.30); 4 ranks on the 2 cores, 8 runs, 0.70 against 0.78, with/
 * without 0.88 but from 0.22 to 1.65 (the load was 5-17 then): no gain
 * shown there, no loss beyond the noise. dd's own write also leaves its
 * writing to the fdatasync, hence ratios above 1. */
static void write_behind(save_plists_t *pl, uint64_t off, uint64_t len) {
#ifdef SYNC_FILE_RANGE_WRITE
    if (pl->wb_fd >= 0 && len > 0)
        (void)sync_file_range(pl->wb_fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE);
#else
    (void)pl;
    (void)off;
    (void)len;
#endif
}

/* Create dataset t->path (collective) and write this rank's io rows
 * (independent writes; none when it has no rows), adding their share of
 * the block CRCs to crc->blocks piece by piece, each piece right before it
 * is written: the write then copies from cache what the CRC just read
 * (measured: see the file comment). crc NULL: a file without checksums (a
 * weights file). Lock held. */
static acx_status_t write_tensor(hid_t file, save_plists_t *pl, const acx_ckpt_tensor_t *t,
                                 acx_ckpt_crc_t *crc, const char *tmp) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hsize_t dims[ACX_MAX_DIMS];
    hid_t fspace = -1, mspace = -1, dset = -1;
    uint64_t rb = row_bytes(t);
    char *scratch = NULL;

    snprintf(what, sizeof what, "dataset '%s' in '%s'", t->path, tmp);
    for (int k = 0; k < t->ndim; k++)
        dims[k] = (hsize_t)t->shape[k];
    ACX_CHECK_GOTO(make_groups(file, pl->gcpl, t->path, 1, what), status, done);
    ACX_H5_CHECK_GOTO(fspace = H5Screate_simple(t->ndim, dims, NULL), what, status, done);
    ACX_H5_CHECK_GOTO(dset = H5Dcreate2(file, t->path, file_type(t->dtype), fspace, H5P_DEFAULT,
                                        pl->dcpl, H5P_DEFAULT),
                      what, status, done);
    if (t->io_end > t->io_begin && rb > 0) {
        acx_ckpt_crc_sum_t sum;
        hsize_t step = piece_rows(rb), end = (hsize_t)t->io_end;
        /* a tensor with a row source: each piece is fetched into scratch
         * right before its CRC and write (memory: one piece) */
        if (t->fill != NULL) {
            scratch = acx_malloc((size_t)(step * rb), "checkpoint rows");
            if (scratch == NULL) {
                status = ACX_ERR_NO_MEMORY;
                goto done;
            }
        }
        /* the data's file offset (contiguous storage is allocated at
         * create in parallel HDF5), for the write-behind */
        haddr_t at = H5Dget_offset(dset);
        uint64_t wb_from = (uint64_t)t->io_begin * rb;
        if (crc != NULL) acx_ckpt_crc_sum_init(&sum, crc, (uint64_t)t->io_begin * rb);
        for (hsize_t r = (hsize_t)t->io_begin; r < end; r += step) {
            hsize_t n = end - r < step ? end - r : step;
            const char *p = (const char *)t->buf + (size_t)(r - (hsize_t)t->buf_row0) * rb;
            if (t->fill != NULL) {
                ACX_CHECK_GOTO(t->fill(t->fill_ctx, (int64_t)r, (int64_t)n, scratch), status, done);
                p = scratch;
            }
            if (crc != NULL) acx_ckpt_crc_sum_feed(&sum, p, n * rb);
            ACX_CHECK_GOTO(acx_ckpt_select_rows(fspace, t->ndim, dims, r, n, &mspace, what), status,
                           done);
            ACX_H5_CHECK_GOTO(
                H5Dwrite(dset, acx_h5_native((int)t->dtype), mspace, fspace, pl->dxpl, p), what,
                status, done);
            H5Sclose(mspace);
            mspace = -1;
            pl->wb_bytes += n * rb;
            uint64_t to = (uint64_t)(r + n) * rb;
            if (at != HADDR_UNDEF && (pl->wb_bytes >= CKPT_WRITE_BEHIND || r + n == end)) {
                write_behind(pl, (uint64_t)at + wb_from, to - wb_from);
                wb_from = to;
                pl->wb_bytes = 0;
            }
        }
        if (crc != NULL) acx_ckpt_crc_sum_end(&sum);
    }
done:
    free(scratch);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (dset >= 0 && H5Dclose(dset) < 0 && status == ACX_OK)
        status = acx_error_h5("H5Dclose", what, __FILE__, __LINE__);
    return status;
}

/* The checksum attributes of dataset `path`, once the ranks' shares are
 * joined (collective: every rank passes the same values). Lock held. */
static acx_status_t write_crc_attrs(hid_t file, const char *path, const acx_ckpt_crc_t *crc,
                                    const char *tmp) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t dset = -1;
    snprintf(what, sizeof what, "checksums of dataset '%s' in '%s'", path, tmp);
    ACX_H5_CHECK_GOTO(dset = H5Dopen2(file, path, H5P_DEFAULT), what, status, out);
    ACX_H5_CHECK_GOTO(acx_ckpt_crc_write_attrs(dset, crc), what, status, out);
out:
    if (dset >= 0 && H5Dclose(dset) < 0 && status == ACX_OK)
        status = acx_error_h5("H5Dclose", what, __FILE__, __LINE__);
    return status;
}

/* The checksums of bytes every rank holds in full (a long string). */
static acx_status_t crc_of_buffer(const void *buf, uint64_t bytes, acx_ckpt_crc_t *c) {
    acx_ckpt_crc_t r = {.bytes = bytes};
    r.block = acx_ckpt_crc_block_bytes(bytes);
    r.nblocks = acx_ckpt_crc_nblocks(bytes, r.block);
    r.blocks = acx_malloc((size_t)(r.nblocks > 0 ? r.nblocks : 1) * sizeof *r.blocks,
                          "checkpoint checksums");
    if (r.blocks == NULL) return ACX_ERR_NO_MEMORY;
    for (uint64_t k = 0; k < r.nblocks; k++) {
        uint64_t b = k * r.block, e = b + r.block < bytes ? b + r.block : bytes;
        r.blocks[k] = acx_ckpt_crc_update(0, (const unsigned char *)buf + b, e - b);
    }
    r.whole = acx_ckpt_crc_combine_blocks(&r);
    *c = r;
    return ACX_OK;
}

/* A string too long for an attribute: dataset "<object>/<name>" holding one
 * fixed-length string (its NUL included) with its checksum attributes;
 * rank 0 writes it, every rank computes the same checksums. */
static acx_status_t write_long_string(hid_t file, const save_plists_t *pl, int rank,
                                      const acx_ckpt_attr_t *a, const char *tmp) {
    acx_status_t status = ACX_OK;
    char what[1280], path[1024];
    hid_t type = -1, fspace = -1, mspace = -1, dset = -1;
    hsize_t one = 1;
    size_t len = strlen(a->str);
    acx_ckpt_crc_t crc = {0};

    int n = snprintf(path, sizeof path, "%s%s%s", a->object,
                     a->object[strlen(a->object) - 1] == '/' ? "" : "/", a->name);
    if (n < 0 || (size_t)n >= sizeof path)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint string '%s' on '%s': path too long",
                         a->name, a->object);
    snprintf(what, sizeof what, "string dataset '%s' in '%s'", path, tmp);
    ACX_CHECK_GOTO(make_groups(file, pl->gcpl, path, 1, what), status, done);
    ACX_H5_CHECK_GOTO(type = H5Tcopy(H5T_C_S1), what, status, done);
    ACX_H5_CHECK_GOTO(H5Tset_size(type, len + 1), what, status, done);
    ACX_H5_CHECK_GOTO(H5Tset_strpad(type, H5T_STR_NULLTERM), what, status, done);
    ACX_H5_CHECK_GOTO(fspace = H5Screate_simple(1, &one, NULL), what, status, done);
    ACX_H5_CHECK_GOTO(mspace = H5Screate_simple(1, &one, NULL), what, status, done);
    ACX_CHECK_GOTO(crc_of_buffer(a->str, len + 1, &crc), status, done);
    ACX_H5_CHECK_GOTO(dset =
                          H5Dcreate2(file, path, type, fspace, H5P_DEFAULT, pl->dcpl, H5P_DEFAULT),
                      what, status, done);
    ACX_H5_CHECK_GOTO(acx_ckpt_crc_write_attrs(dset, &crc), what, status, done);
    if (rank != 0) {
        ACX_H5_CHECK_GOTO(H5Sselect_none(fspace), what, status, done);
        ACX_H5_CHECK_GOTO(H5Sselect_none(mspace), what, status, done);
    }
    ACX_H5_CHECK_GOTO(H5Dwrite(dset, type, mspace, fspace, pl->dxpl, a->str), what, status, done);
done:
    if (dset >= 0 && H5Dclose(dset) < 0 && status == ACX_OK)
        status = acx_error_h5("H5Dclose", what, __FILE__, __LINE__);
    acx_ckpt_crc_free(&crc);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (type >= 0) H5Tclose(type);
    return status;
}

static herr_t write_attr_f64(hid_t obj, const char *name, double value) {
    hid_t space = H5Screate(H5S_SCALAR), attr = -1;
    herr_t ret = -1;
    if (space < 0) return -1;
    attr = H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr >= 0) ret = H5Awrite(attr, H5T_NATIVE_DOUBLE, &value);
    hid_t estack = ret < 0 ? H5Eget_current_stack() : -1;
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    if (estack >= 0) H5Eset_current_stack(estack);
    return ret;
}

/* One attribute; its object (a group, or a dataset written above) is
 * created as a group when missing. Collective. Lock held. */
static acx_status_t write_attr(hid_t file, const save_plists_t *pl, int rank,
                               const acx_ckpt_attr_t *a, const char *tmp) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t obj = -1;

    if (a->object == NULL || a->object[0] == '\0' || a->name == NULL || a->name[0] == '\0' ||
        (a->type == ACX_CKPT_STR && a->str == NULL) || (int)a->type < 0 || a->type > ACX_CKPT_STR)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "checkpoint attribute '%s' on '%s': missing object, name or string, or "
                         "bad type %d",
                         a->name ? a->name : "(null)", a->object ? a->object : "(null)",
                         (int)a->type);
    if (a->type == ACX_CKPT_STR && strlen(a->str) >= CKPT_ATTR_MAX)
        return write_long_string(file, pl, rank, a, tmp);

    snprintf(what, sizeof what, "attribute '%s' on '%s' in '%s'", a->name, a->object, tmp);
    if (acx_ckpt_path_exists(file, a->object) != 1)
        ACX_CHECK_GOTO(make_groups(file, pl->gcpl, a->object, 0, what), status, out);
    ACX_H5_CHECK_GOTO(obj = H5Oopen(file, a->object, H5P_DEFAULT), what, status, out);
    switch (a->type) {
    case ACX_CKPT_I64:
        ACX_H5_CHECK_GOTO(acx_h5_write_attr_i64(obj, a->name, a->i64), what, status, out);
        break;
    case ACX_CKPT_F64:
        ACX_H5_CHECK_GOTO(write_attr_f64(obj, a->name, a->f64), what, status, out);
        break;
    case ACX_CKPT_STR:
        ACX_H5_CHECK_GOTO(acx_h5_write_attr_str(obj, a->name, a->str), what, status, out);
        break;
    }
out:
    if (obj >= 0) H5Oclose(obj);
    return status;
}

/* A failed write, close or fsync because the file system is full reaches
 * us as HDF5's "file write failed (Write failed)" (MPI-IO keeps the
 * system's reason to itself) or as a bare errno text. Name it: when the
 * call left ENOSPC/EDQUOT in errno, or when the file system of the file
 * has less than CKPT_SPACE_SLACK bytes left (a piece of a write did not
 * fit), the message says so with the path and the free bytes, followed by
 * the original one. err: errno right after the failing call. */
#define CKPT_SPACE_SLACK (2 * CKPT_IO_PIECE)
static acx_status_t name_no_space(acx_status_t status, int err, const char *tmp, const char *dir) {
    if (status == ACX_OK || dir == NULL) return status;
    struct statvfs vs;
    unsigned long long avail = ~0ull;
    if (statvfs(dir, &vs) == 0) avail = (unsigned long long)vs.f_bavail * vs.f_frsize;
    if (err != ENOSPC && err != EDQUOT && avail >= CKPT_SPACE_SLACK) return status;
    char prev[ACX_ERRMSG_MAX];
    snprintf(prev, sizeof prev, "%s", acx_last_error());
    if (err == EDQUOT)
        return ACX_ERROR(ACX_ERR_IO, "disk quota exceeded (EDQUOT) writing '%s': %s", tmp, prev);
    return ACX_ERROR(ACX_ERR_IO,
                     "no space left on device (ENOSPC) writing '%s' (%llu bytes free on its file "
                     "system): %s",
                     tmp, avail == ~0ull ? 0ull : avail, prev);
}

/* Rank 0: can the temporary file be created? Turns a missing or unwritable
 * directory into ACX_ERR_IO with the system's reason, before HDF5 does it
 * with a less direct message. */
static acx_status_t probe_create(const char *tmp) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = errno;
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot create checkpoint file '%s': %s%s", tmp, strerror(err),
                         err == ENOSPC ? " (ENOSPC)" : "");
    close(fd);
    return ACX_OK;
}

/* Rank 0, before HDF5 touches the file: does the checkpoint fit in the
 * free space of its file system? The bytes are the tensors' data (full
 * logical shapes), the string attributes, and a margin for HDF5's metadata
 * and the CRC-32 attributes (64 KiB plus 4 KiB a tensor, far above what
 * they take). Refusing here keeps a full disk out of HDF5: a write that
 * fails in H5Fclose's metadata flush leaves the file half-closed in HDF5
 * 1.10, which then crashes at MPI_Finalize (H5F__close_cb). Quotas
 * (EDQUOT) and space taken by others while the save runs are still caught
 * by name_no_space. A file system that does not answer statvfs passes. */
static acx_status_t check_space(const char *tmp, const char *dir, const acx_ckpt_tensor_t *tensors,
                                int num_tensors, const acx_ckpt_attr_t *attrs, int num_attrs) {
    struct statvfs vs;
    if (statvfs(dir, &vs) != 0) return ACX_OK;
    unsigned long long avail = (unsigned long long)vs.f_bavail * vs.f_frsize;
    unsigned long long need = 64ull << 10;
    for (int i = 0; i < num_tensors; i++) {
        unsigned long long n = acx_dtype_size(tensors[i].dtype);
        for (int d = 0; d < tensors[i].ndim; d++)
            n *= (unsigned long long)tensors[i].shape[d];
        need += n + (4ull << 10);
    }
    for (int i = 0; i < num_attrs; i++)
        if (attrs[i].type == ACX_CKPT_STR && attrs[i].str != NULL) need += strlen(attrs[i].str);
    if (need <= avail) return ACX_OK;
    return ACX_ERROR(ACX_ERR_IO,
                     "no space left on device (ENOSPC) writing '%s': the checkpoint needs about "
                     "%llu bytes and its file system has %llu bytes free; nothing was written",
                     tmp, need, avail);
}

acx_status_t acx_ckpt_save(acx_comm_t *world, const char *path, const acx_ckpt_tensor_t *tensors,
                           int num_tensors, const acx_ckpt_attr_t *attrs, int num_attrs) {
    return acx_ckpt_save_opts(world, path, tensors, num_tensors, attrs, num_attrs, NULL);
}

acx_status_t acx_ckpt_save_opts(acx_comm_t *world, const char *path,
                                const acx_ckpt_tensor_t *tensors, int num_tensors,
                                const acx_ckpt_attr_t *attrs, int num_attrs,
                                const acx_ckpt_save_opts_t *opts) {
    /* checksums unless the caller's format has none (a weights file) */
    int sums = opts == NULL || !opts->no_checksums;
    if (path == NULL || path[0] == '\0' || num_tensors < 0 || num_attrs < 0 ||
        (num_tensors > 0 && tensors == NULL) || (num_attrs > 0 && attrs == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_ckpt_save: path, tensors and attrs must be given");

    acx_status_t status = ACX_OK;
    hid_t fapl = -1, fcpl = -1, file = -1;
    save_plists_t pl = {-1, -1, -1, -1, 0};
    save_crcs_t crcs = {0};
    char *tmp = acx_ckpt_str_concat(path, ".tmp");
    char *dir = dir_of(path);
    char what[1280];
    int rank = world != NULL ? world->rank : 0;
    double t_start = MPI_Wtime(), t_data = t_start, t_meta = t_start, t_close = t_start;

    snprintf(what, sizeof what, "checkpoint file '%s.tmp'", path);
    if (tmp == NULL || dir == NULL) status = ACX_ERR_NO_MEMORY; /* recorded by acx_malloc */
    for (int i = 0; i < num_tensors && status == ACX_OK; i++)
        status = acx_ckpt_check_tensor(&tensors[i], i);
    if (status == ACX_OK && rank == 0) status = probe_create(tmp);
    if (status == ACX_OK && rank == 0)
        status = check_space(tmp, dir, tensors, num_tensors, attrs, num_attrs);
    if (status == ACX_OK) status = save_crcs_layout(tensors, num_tensors, &crcs);

    /* Agreed before any HDF5 call: H5Pset_fapl_mpio duplicates the
     * communicator, which is collective. The lock is then held across the
     * collective calls below: a loader's prefetch thread on this rank waits,
     * but it makes no MPI calls, so no other rank can wait on it. */
    status = agree(world, status);
    if (status == ACX_OK) status = save_rows_check(world, tensors, num_tensors, &crcs);
    acx_h5_lock();
    acx_h5_quiet();
    if (status != ACX_OK) goto out;
    ACX_H5_CHECK_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), what, status, agreed_create);
    if (world != NULL) {
        ACX_H5_CHECK_GOTO(H5Pset_fapl_mpio(fapl, world->mpi, MPI_INFO_NULL), what, status,
                          agreed_create);
        /* every rank issues the same metadata operations: HDF5 does them
         * collectively (one rank reads and broadcasts, one writes) */
        ACX_H5_CHECK_GOTO(H5Pset_all_coll_metadata_ops(fapl, 1), what, status, agreed_create);
        ACX_H5_CHECK_GOTO(H5Pset_coll_metadata_write(fapl, 1), what, status, agreed_create);
    }
    /* 1.8+ object headers, heaps and B-trees: checksummed metadata.
     * ACX_TEST_CKPT_OLD_METADATA=1 (benchmarks only: docs/benchmarks.md)
     * leaves HDF5's default, the earliest formats (version-0 superblock,
     * version-1 dataset headers: no checksums), to measure their cost. */
    int old_meta;
    acx_env_flag(ACX_ENV_TEST_CKPT_OLD_METADATA, &old_meta);
    if (!old_meta)
        ACX_H5_CHECK_GOTO(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V110), what, status,
                          agreed_create);
    ACX_H5_CHECK_GOTO(fcpl = H5Pcreate(H5P_FILE_CREATE), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(
        H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), what,
        status, agreed_create);
    ACX_H5_CHECK_GOTO(pl.gcpl = H5Pcreate(H5P_GROUP_CREATE), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(
        H5Pset_link_creation_order(pl.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), what,
        status, agreed_create);
    /* and their attributes' order too: /optimizer holds more than the 8 a
     * compact object header lists in creation order once it records
     * parameter groups, and `acx ckpt info` shows type, step, lr first */
    ACX_H5_CHECK_GOTO(
        H5Pset_attr_creation_order(pl.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), what,
        status, agreed_create);
    /* contiguous storage, no filter: the checksums are attributes */
    ACX_H5_CHECK_GOTO(pl.dcpl = H5Pcreate(H5P_DATASET_CREATE), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(H5Pset_layout(pl.dcpl, H5D_CONTIGUOUS), what, status, agreed_create);
    /* every element is written: filling first would write it twice */
    ACX_H5_CHECK_GOTO(H5Pset_fill_time(pl.dcpl, H5D_FILL_TIME_NEVER), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(pl.dxpl = H5Pcreate(H5P_DATASET_XFER), what, status, agreed_create);
    /* independent raw-data writes: a rank's rows are one contiguous run of
     * the file, which it writes in pieces of its own count; collective
     * transfers would make every piece a collective call, and two-phase
     * buffering would only copy the bytes through other ranks (measured:
     * see the file comment). Metadata stays collective. */
    if (world != NULL)
        ACX_H5_CHECK_GOTO(H5Pset_dxpl_mpio(pl.dxpl, H5FD_MPIO_INDEPENDENT), what, status,
                          agreed_create);
    ACX_H5_CHECK_GOTO(file = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl), what, status,
                      agreed_create);
agreed_create:
    status = agree(world, status);
    if (status != ACX_OK) goto out;
    /* a descriptor of our own for the write-behind (HDF5's MPI-IO layer
     * does not show its own); a failure only skips the write-behind */
    pl.wb_fd = open(tmp, O_RDONLY | O_CLOEXEC);
    ckpt_kill_point("before_data", rank);
    t_data = MPI_Wtime();

    for (int i = 0; i < num_tensors; i++) {
        status = write_tensor(file, &pl, &tensors[i], sums ? &crcs.crcs[i] : NULL, tmp);
        status = name_no_space(status, errno, tmp, dir);
        /* agree per tensor: a rank that failed must not leave the others
         * inside the next collective create or write */
        status = agree(world, status);
        if (status != ACX_OK) goto out;
        if (i + 1 == (num_tensors > 1 ? num_tensors / 2 : 1)) ckpt_kill_point("mid_data", rank);
    }
    /* the checksums: the ranks' shares joined, then the attributes */
    t_meta = MPI_Wtime();
    if (sums) {
        status = save_crcs_join(world, num_tensors, &crcs);
        if (status != ACX_OK) goto out;
    }
    for (int i = 0; i < num_tensors && status == ACX_OK && sums; i++)
        status = write_crc_attrs(file, tensors[i].path, &crcs.crcs[i], tmp);
    for (int i = 0; i < num_attrs && status == ACX_OK; i++)
        status = write_attr(file, &pl, rank, &attrs[i], tmp);
    status = agree(world, name_no_space(status, errno, tmp, dir));
    if (status != ACX_OK) goto out;

    t_close = MPI_Wtime();
    {
        /* collective: HDF5 writes the rest of the metadata and hands every
         * byte to the file system */
        herr_t ret = H5Fclose(file);
        file = -1;
        int err = errno;
        if (ret < 0)
            status =
                name_no_space(acx_error_h5("H5Fclose", what, __FILE__, __LINE__), err, tmp, dir);
    }
    /* Every rank fsyncs the closed file: each makes what its node cached
     * durable (one rank's fsync covers only its own node's cache on a
     * parallel file system). One round after the close instead of an
     * MPI_File_sync before it and rank 0's fsync after: a device flush
     * less, 0.05-0.2 s of a 1 GiB save on the build machine (measured in
     * pairs: 0.43-0.50 s against 0.48-0.73 s for both steps). */
    status = agree(world, status);
    if (status != ACX_OK) goto out;
    status = acx_io_fsync_path(tmp, 0);
    status = agree(world, name_no_space(status, errno, tmp, dir));
    if (status != ACX_OK) goto out;

    ckpt_kill_point("before_rename", rank);
    if (rank == 0) {
        if (rename(tmp, path) != 0)
            status =
                ACX_ERROR(ACX_ERR_IO, "rename('%s', '%s') failed: %s", tmp, path, strerror(errno));
        else
            status = acx_io_fsync_path(dir, 1);
    }
    /* also the barrier: nobody returns (and reads) before the rename */
    status = agree(world, status);
    if (status == ACX_OK) ckpt_kill_point("after_rename", rank);

out:
    if (pl.wb_fd >= 0) close(pl.wb_fd);
    if (file >= 0) H5Fclose(file); /* collective; every rank reaches it after an agreed failure */
    if (pl.dxpl >= 0) H5Pclose(pl.dxpl);
    if (pl.dcpl >= 0) H5Pclose(pl.dcpl);
    if (pl.gcpl >= 0) H5Pclose(pl.gcpl);
    if (fcpl >= 0) H5Pclose(fcpl);
    if (fapl >= 0) H5Pclose(fapl);
    acx_h5_unlock();
    if (status != ACX_OK) {
        /* every path here has an agreed status, so all ranks wait: none
         * returns while the failed file still exists */
        if (tmp != NULL && rank == 0) unlink(tmp);
        if (world != NULL) MPI_Barrier(world->mpi);
    }
    if (status == ACX_OK)
        ACX_DEBUG(ACX_SUBSYS_IO,
                  "saved %d tensors and %d attributes to '%s' (CRC-32: %s): create %.3f s, data "
                  "%.3f s, checksums and attributes %.3f s, close, fsync and rename %.3f s",
                  num_tensors, num_attrs, path, acx_ckpt_crc_impl(), t_data - t_start,
                  t_meta - t_data, t_close - t_meta, MPI_Wtime() - t_close);
    save_crcs_free(&crcs);
    free(dir);
    free(tmp);
    return status;
}

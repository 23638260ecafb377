/*
 * io/checkpoint.c — the parallel HDF5 checkpoint file: io/checkpoint.h's
 * writer (acx_ckpt_save) and reader (acx_ckpt_open/read/...). It owns the
 * file's life (temporary name, fsync, rename), its HDF5 layout (groups,
 * storage, checksums, attribute and string encodings) and the row
 * selections; what the tensors and attributes mean — model, optimizer,
 * rng, config, the root attributes such as "format" — is the runtime's
 * (runtime/checkpoint.c). Format description: docs/checkpoint-format.md.
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
 * Test hook: ACX_TEST_CKPT_KILL_AT=before_data|mid_data|before_rename|
 * after_rename makes every rank SIGKILL itself at that point of a save
 * ("mid_data": once half of the tensors are written);
 * ACX_TEST_CKPT_STOP_AT=<point>:<rank> makes that rank SIGSTOP itself
 * there instead (a rank frozen mid-save: the stall detector must end the
 * job, naming it). Variables with the
 * ACX_TEST_ prefix are reserved for the test suite; never set them in a job.
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
 *   Load: each rank checks what it read by itself, widening its rows to the
 * blocks they touch (read_tensor): no exchange, any N -> M, and a mismatch
 * is ACX_ERR_FORMAT "checksum mismatch (corrupted file?)" naming the
 * dataset and the byte range, agreed on every rank at the end of
 * acx_ckpt_read. Version-1 files are still read: HDF5 checks their
 * Fletcher-32 chunks, and read_error names a failure the same way.
 *   Metadata is checksummed by HDF5: the format is pinned to HDF5
 * 1.8+/1.10 structures (libver bounds V18..V110), whose object headers,
 * B-trees and heaps carry checksums, so a flipped byte in an attribute (the
 * CRCs included), group or dataset header fails instead of reading garbage
 * (a truncated file fails at open: HDF5 checks the stored end of file).
 * Such a failure is damage, kept on the open file (note_damage): HDF5
 * 1.10.8 caches a header whose continuation chunk failed without that
 * chunk, so no question is asked again and no failure reads as "absent".
 * Datasets are checked (io/h5.h acx_h5_check_dataset) before they are
 * read or sized: no plugin filters, no virtual or external storage, and
 * storage that holds the whole shape; data without any checksum is read
 * only with acx_ckpt_allow_unverified.
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
 *
 * Reading: the MPI-IO driver on world, independent metadata reads (so the
 * attribute, shape and listing queries may be made by any subset of
 * ranks), and independent raw-data reads: every rank reads its rows (and
 * their blocks' edges) itself, so no rank can be left waiting in a
 * collective read for one that stopped at a checksum failure, and the
 * number of reads may differ between ranks; ranks agree after checking
 * the tensors' descriptions and once all tensors are read. Rows several
 * ranks hold (a tensor's `share` group: NO_SHARD's replicas) are read once
 * in all — each member reads and verifies its slice — and then
 * all-gathered in the group (share_rows), only after every rank's checks
 * passed: a replicated load costs each rank 1/N of the file's reads and
 * checksums instead of all of them.
 * acx_ckpt_open and acx_ckpt_close are collective (MPI_File_open /
 * MPI_File_close). With world == NULL the file is opened by this process
 * alone (sec2 driver, no MPI calls), for single-process tools.
 */
#define _GNU_SOURCE /* sync_file_range */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/ckpt_crc.h"
#include "io/h5.h"
#include "base/error.h"
#include "base/log.h"
#include "base/settings.h"

/* Bytes per H5Dwrite / H5Dread call of a tensor's rows (whole rows, at
 * least one): each piece's CRC is computed right before it is written or
 * right after it is read, while it is in the cache (1 MiB: a core's L2).
 * Reads of 4 MiB were measured too (1 GiB, page cache dropped, alternating
 * with dd bs=4M, load average 5-9 from other jobs): on 1 rank they kept
 * up with dd (acx/dd 1.02-1.10 in 4 runs, against 0.26-1.03 with 1 MiB),
 * on 4 ranks reading the same rows they fell behind 1 MiB (803, 756 and
 * 1144 MiB/s against 1244, 1662 and 1430 in the same runs; their reads
 * and their checks both took longer — 4 ranks x 4 MiB no longer fit the
 * shared cache between the copy and the check, we think). */
#define CKPT_IO_PIECE ((uint64_t)1 << 20)
/* Bytes a rank writes between two write-behinds (write_behind). */
#define CKPT_WRITE_BEHIND ((uint64_t)32 << 20)
/* Longest string kept as an attribute (HDF5 1.10 object header messages are
 * limited to 64 KiB, with some room for the attribute's own header). */
#define CKPT_ATTR_MAX 60000

struct acx_ckpt_file {
    acx_comm_t *world; /* NULL: opened by this process alone (sec2) */
    hid_t file;
    char *path;
    int64_t version;        /* format_version: >= 2 has CRC-32 attributes */
    double t_read, t_check; /* acx_ckpt_read's seconds in H5Dread and CRC checks (debug log) */
    /* The first damage found (sticky): every later call returns it. HDF5
     * 1.10.8 keeps an object header whose continuation chunk failed its
     * checksum in its metadata cache without that chunk, so asking again
     * "succeeds" with the chunk's attributes and links missing — a damaged
     * file would read as one that lacks them (a model mismatch). */
    acx_status_t damaged;
    char damage[ACX_ERRMSG_MAX];
    int allow_unverified;  /* acx_ckpt_allow_unverified */
    int warned_unverified; /* the loud warning was given */
};

/* ---- small helpers ---- */

static void kill_point(const char *where, int rank) {
    const char *at = getenv("ACX_TEST_CKPT_KILL_AT");
    if (at != NULL && strcmp(at, where) == 0) kill(getpid(), SIGKILL);
    /* ACX_TEST_CKPT_STOP_AT=<point>:<rank>: that rank stops (SIGSTOP) */
    const char *stop = getenv("ACX_TEST_CKPT_STOP_AT");
    size_t n = strlen(where);
    if (stop != NULL && strncmp(stop, where, n) == 0 && stop[n] == ':' &&
        atoi(stop + n + 1) == rank)
        kill(getpid(), SIGSTOP);
}

static acx_status_t agree(acx_comm_t *world, acx_status_t status) {
    return world != NULL ? acx_coll_agree(world, status) : status;
}

static char *str_concat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = acx_malloc(na + nb + 1, "checkpoint path");
    if (s == NULL) return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

/* "a/b/c.h5" → "a/b"; "c.h5" → "."; "/c.h5" → "/". */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL) return str_concat(".", "");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = acx_malloc(n + 1, "checkpoint directory");
    if (d == NULL) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

static int64_t row_numel(const acx_ckpt_tensor_t *t) {
    int64_t n = 1;
    for (int k = 1; k < t->ndim; k++)
        n *= t->shape[k];
    return n;
}

static void format_shape(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t used = 0;
    out[0] = '\0';
    used += (size_t)snprintf(out, cap, "[");
    for (int k = 0; k < ndim && used < cap; k++)
        used +=
            (size_t)snprintf(out + used, cap - used, k ? ", %lld" : "%lld", (long long)shape[k]);
    if (used < cap) snprintf(out + used, cap - used, "]");
}

/* The last error's text without its "file:line: " prefix, for wrapping
 * it into a more specific message. */
static void last_error_text(char *out, size_t cap) {
    const char *msg = acx_last_error(), *sep = strstr(msg, ": ");
    snprintf(out, cap, "%s", sep != NULL ? sep + 2 : msg);
}

/* ---- damage ---- */

static int path_exists(hid_t file, const char *path);

/* If the error just recorded says the file is damaged (acx_error_h5's and
 * acx_h5_check_dataset's "... is damaged: ..."), keep it on f: every later
 * call on f returns it (see acx_ckpt_file's `damaged`). `path` names the
 * object being read; in a single process, the address of its object
 * header is added when its link (in the parent group, already read) gives
 * one. */
static acx_status_t note_damage(acx_ckpt_file_t *f, acx_status_t status, const char *path) {
    if (status != ACX_ERR_FORMAT || f->damaged != ACX_OK) return status;
    if (strstr(acx_last_error(), " is damaged") == NULL) return status;
    char text[ACX_ERRMSG_MAX], at[1200] = "";
    last_error_text(text, sizeof text);
    /* One process only: under MPI-IO a lookup may be a collective metadata
     * read (an H5C_protect broadcast), and damage in data is found by the
     * ranks that read it, not by all (a hang, measured with a Fletcher-32
     * failure in one rank's rows). */
    if (path != NULL && path[0] == '/' && path[1] != '\0' &&
        (f->world == NULL || f->world->size == 1)) {
        H5L_info_t li;
        acx_h5_lock();
        if (path_exists(f->file, path) == 1 && H5Lget_info(f->file, path, &li, H5P_DEFAULT) >= 0 &&
            li.type == H5L_TYPE_HARD)
            snprintf(at, sizeof at, " [object header of '%s' at byte %llu]", path,
                     (unsigned long long)li.u.address);
        H5Eclear2(H5E_DEFAULT);
        acx_h5_unlock();
    }
    snprintf(f->damage, sizeof f->damage, "%s%s", text, at);
    f->damaged = status;
    return ACX_ERROR(status, "%s", f->damage);
}

/* The damage found earlier, recorded again as the last error. */
static acx_status_t damage_replay(acx_ckpt_file_t *f) {
    return ACX_ERROR(f->damaged, "%s", f->damage);
}

/* Standard (little-endian) file type of an acx dtype; not to be closed. */
static hid_t file_type(acx_dtype_t dtype) {
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: return H5T_IEEE_F32LE;
    case ACX_DTYPE_FLOAT64: return H5T_IEEE_F64LE;
    case ACX_DTYPE_INT8: return H5T_STD_I8LE;
    case ACX_DTYPE_UINT8: return H5T_STD_U8LE;
    case ACX_DTYPE_INT32: return H5T_STD_I32LE;
    case ACX_DTYPE_INT64: return H5T_STD_I64LE;
    default: return acx_h5_native((int)dtype); /* float16, bfloat16 (x86: LE) */
    }
}

/* Check one tensor's description; the same for save and read. */
static acx_status_t check_tensor(const acx_ckpt_tensor_t *t, int i) {
    if (t->path == NULL || t->path[0] == '\0')
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint tensor %d has no path", i);
    if ((int)t->dtype < 0 || t->dtype >= ACX_DTYPE_COUNT_)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint tensor '%s': bad dtype %d", t->path,
                         (int)t->dtype);
    if (t->ndim < 1 || t->ndim > ACX_MAX_DIMS)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint tensor '%s': ndim %d, expected 1..%d",
                         t->path, t->ndim, ACX_MAX_DIMS);
    for (int k = 0; k < t->ndim; k++)
        if (t->shape[k] < 0)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "checkpoint tensor '%s': negative dim %d",
                             t->path, k);
    if (t->io_begin < 0 || t->io_end < t->io_begin || t->io_end > t->shape[0])
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "checkpoint tensor '%s': io rows [%lld, %lld) outside [0, %lld)", t->path,
                         (long long)t->io_begin, (long long)t->io_end, (long long)t->shape[0]);
    if (t->io_end > t->io_begin &&
        (t->buf == NULL || t->io_begin < t->buf_row0 || t->io_end > t->buf_row0 + t->buf_rows))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "checkpoint tensor '%s': io rows [%lld, %lld) not inside the buffer's "
                         "rows [%lld, %lld)%s",
                         t->path, (long long)t->io_begin, (long long)t->io_end,
                         (long long)t->buf_row0, (long long)(t->buf_row0 + t->buf_rows),
                         t->buf == NULL ? " (buffer is NULL)" : "");
    return ACX_OK;
}

/* Whether every component of `path` exists: 1 yes, 0 no, -1 HDF5 failed
 * (a damaged group: the error stack is kept for acx_error_h5, and the
 * answer is not "absent"). Asked component by component because H5Lexists
 * fails, rather than saying no, when an intermediate group is missing.
 * Lock held. */
static int path_exists(hid_t file, const char *path) {
    char buf[1024];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, path, n + 1);
    if (strcmp(buf, "/") == 0) return 1;
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (i > 0 && buf[i - 1] != '/') {
            htri_t e = H5Lexists(file, buf, H5P_DEFAULT);
            if (e < 0) return -1;
            if (e == 0) return 0;
        }
        buf[i] = c;
    }
    return 1;
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
        int e = buf[i - 1] != '/' ? path_exists(file, buf) : 1;
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

/* Bytes of one row (all dims after the first) and of the whole tensor. */
static uint64_t row_bytes(const acx_ckpt_tensor_t *t) {
    return (uint64_t)row_numel(t) * acx_dtype_size(t->dtype);
}

static uint64_t tensor_bytes(const acx_ckpt_tensor_t *t) {
    return (uint64_t)t->shape[0] * row_bytes(t);
}

/* Rows per H5Dwrite / H5Dread call: about CKPT_IO_PIECE bytes, at least
 * one row. */
static hsize_t piece_rows(uint64_t rb) {
    uint64_t n = rb > 0 ? CKPT_IO_PIECE / rb : 1;
    return n > 0 ? (hsize_t)n : 1;
}

/* Select rows [r0, r0 + n) x all inner dims of `fspace` (a dataspace of
 * dims[ndim]) and create the memory space of the selection's shape: HDF5
 * then moves whole runs (a flat [n * row] memory space makes it map every
 * element). Lock held. */
static acx_status_t select_rows(hid_t fspace, int ndim, const hsize_t *dims, hsize_t r0, hsize_t n,
                                hid_t *mspace_p, const char *what) {
    acx_status_t status = ACX_OK;
    hsize_t start[ACX_MAX_DIMS] = {0}, count[ACX_MAX_DIMS];
    for (int k = 0; k < ndim; k++)
        count[k] = dims[k];
    start[0] = r0;
    count[0] = n;
    ACX_H5_CHECK_GOTO(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL), what,
                      status, out);
    hid_t m;
    ACX_H5_CHECK_GOTO(m = H5Screate_simple(ndim, count, NULL), what, status, out);
    *mspace_p = m;
out:
    return status;
}

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
    ACX_MPI_CHECK_GOTO(MPI_Allreduce(MPI_IN_PLACE, s->rows, n, MPI_INT64_T, MPI_SUM, world->mpi),
                       status, out);
    for (int i = 0; i < n && status == ACX_OK; i++)
        if (s->rows[i] != tensors[i].shape[0])
            status =
                ACX_ERROR(ACX_ERR_INVALID_ARG,
                          "checkpoint tensor '%s': the ranks' io rows add up to %lld rows, "
                          "the tensor has %lld (each row must be written by exactly one "
                          "rank)",
                          tensors[i].path, (long long)s->rows[i], (long long)tensors[i].shape[0]);
out:
    return acx_coll_agree(world, status);
}

/* Join the ranks' shares (collective, once every tensor is written): one
 * MPI_BXOR all-reduce of every block slot of every tensor, then each
 * tensor's whole-dataset CRC from its blocks. Every rank ends with the same
 * values, as the collective attribute writes need. */
static acx_status_t save_crcs_join(acx_comm_t *world, int n, save_crcs_t *s) {
    acx_status_t status = ACX_OK;
    ACX_MPI_CHECK_GOTO(
        MPI_Allreduce(MPI_IN_PLACE, s->all, (int)s->total, MPI_UINT32_T, MPI_BXOR, world->mpi),
        status, out);
out:
    status = acx_coll_agree(world, status);
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
 * (measured: see the file comment). Lock held. */
static acx_status_t write_tensor(hid_t file, save_plists_t *pl, const acx_ckpt_tensor_t *t,
                                 acx_ckpt_crc_t *crc, const char *tmp) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hsize_t dims[ACX_MAX_DIMS];
    hid_t fspace = -1, mspace = -1, dset = -1;
    uint64_t rb = row_bytes(t);

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
        /* the data's file offset (contiguous storage is allocated at
         * create in parallel HDF5), for the write-behind */
        haddr_t at = H5Dget_offset(dset);
        uint64_t wb_from = (uint64_t)t->io_begin * rb;
        acx_ckpt_crc_sum_init(&sum, crc, (uint64_t)t->io_begin * rb);
        for (hsize_t r = (hsize_t)t->io_begin; r < end; r += step) {
            hsize_t n = end - r < step ? end - r : step;
            const char *p = (const char *)t->buf + (size_t)(r - (hsize_t)t->buf_row0) * rb;
            acx_ckpt_crc_sum_feed(&sum, p, n * rb);
            ACX_CHECK_GOTO(select_rows(fspace, t->ndim, dims, r, n, &mspace, what), status, done);
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
        acx_ckpt_crc_sum_end(&sum);
    }
done:
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
    if (path_exists(file, a->object) != 1)
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

/* fsync a file or directory by name (rank 0 after the close / rename). */
static acx_status_t fsync_path(const char *path, int directory) {
    int fd = open(path, O_RDONLY | (directory ? O_DIRECTORY : 0));
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot open '%s' to fsync it: %s", path, strerror(errno));
    if (fsync(fd) != 0 && !(directory && (errno == EINVAL || errno == EROFS))) {
        /* some filesystems refuse fsync on directories (EINVAL): the rename
         * is then as durable as they make it */
        int e = errno;
        close(fd);
        return ACX_ERROR(ACX_ERR_IO, "fsync('%s') failed: %s", path, strerror(e));
    }
    close(fd);
    return ACX_OK;
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
    if (world == NULL || path == NULL || path[0] == '\0' || num_tensors < 0 || num_attrs < 0 ||
        (num_tensors > 0 && tensors == NULL) || (num_attrs > 0 && attrs == NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_ckpt_save: world, path, tensors and attrs must be given");

    acx_status_t status = ACX_OK;
    hid_t fapl = -1, fcpl = -1, file = -1;
    save_plists_t pl = {-1, -1, -1, -1, 0};
    save_crcs_t crcs = {0};
    char *tmp = str_concat(path, ".tmp");
    char *dir = dir_of(path);
    char what[1280];
    int rank = world->rank;
    double t_start = MPI_Wtime(), t_data = t_start, t_meta = t_start, t_close = t_start;

    snprintf(what, sizeof what, "checkpoint file '%s.tmp'", path);
    if (tmp == NULL || dir == NULL) status = ACX_ERR_NO_MEMORY; /* recorded by acx_malloc */
    for (int i = 0; i < num_tensors && status == ACX_OK; i++)
        status = check_tensor(&tensors[i], i);
    if (status == ACX_OK && rank == 0) status = probe_create(tmp);
    if (status == ACX_OK && rank == 0)
        status = check_space(tmp, dir, tensors, num_tensors, attrs, num_attrs);
    if (status == ACX_OK) status = save_crcs_layout(tensors, num_tensors, &crcs);

    /* Agreed before any HDF5 call: H5Pset_fapl_mpio duplicates the
     * communicator, which is collective. The lock is then held across the
     * collective calls below: a loader's prefetch thread on this rank waits,
     * but it makes no MPI calls, so no other rank can wait on it. */
    status = acx_coll_agree(world, status);
    if (status == ACX_OK) status = save_rows_check(world, tensors, num_tensors, &crcs);
    acx_h5_lock();
    acx_h5_quiet();
    if (status != ACX_OK) goto out;
    ACX_H5_CHECK_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(H5Pset_fapl_mpio(fapl, world->mpi, MPI_INFO_NULL), what, status,
                      agreed_create);
    /* every rank issues the same metadata operations: HDF5 does them
     * collectively (one rank reads and broadcasts, one writes) */
    ACX_H5_CHECK_GOTO(H5Pset_all_coll_metadata_ops(fapl, 1), what, status, agreed_create);
    ACX_H5_CHECK_GOTO(H5Pset_coll_metadata_write(fapl, 1), what, status, agreed_create);
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
    ACX_H5_CHECK_GOTO(H5Pset_dxpl_mpio(pl.dxpl, H5FD_MPIO_INDEPENDENT), what, status,
                      agreed_create);
    ACX_H5_CHECK_GOTO(file = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl), what, status,
                      agreed_create);
agreed_create:
    status = acx_coll_agree(world, status);
    if (status != ACX_OK) goto out;
    /* a descriptor of our own for the write-behind (HDF5's MPI-IO layer
     * does not show its own); a failure only skips the write-behind */
    pl.wb_fd = open(tmp, O_RDONLY | O_CLOEXEC);
    kill_point("before_data", rank);
    t_data = MPI_Wtime();

    for (int i = 0; i < num_tensors; i++) {
        status = write_tensor(file, &pl, &tensors[i], &crcs.crcs[i], tmp);
        status = name_no_space(status, errno, tmp, dir);
        /* agree per tensor: a rank that failed must not leave the others
         * inside the next collective create or write */
        status = acx_coll_agree(world, status);
        if (status != ACX_OK) goto out;
        if (i + 1 == (num_tensors > 1 ? num_tensors / 2 : 1)) kill_point("mid_data", rank);
    }
    /* the checksums: the ranks' shares joined, then the attributes */
    t_meta = MPI_Wtime();
    status = save_crcs_join(world, num_tensors, &crcs);
    if (status != ACX_OK) goto out;
    for (int i = 0; i < num_tensors && status == ACX_OK; i++)
        status = write_crc_attrs(file, tensors[i].path, &crcs.crcs[i], tmp);
    for (int i = 0; i < num_attrs && status == ACX_OK; i++)
        status = write_attr(file, &pl, rank, &attrs[i], tmp);
    status = acx_coll_agree(world, name_no_space(status, errno, tmp, dir));
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
    status = acx_coll_agree(world, status);
    if (status != ACX_OK) goto out;
    status = fsync_path(tmp, 0);
    status = acx_coll_agree(world, name_no_space(status, errno, tmp, dir));
    if (status != ACX_OK) goto out;

    kill_point("before_rename", rank);
    if (rank == 0) {
        if (rename(tmp, path) != 0)
            status =
                ACX_ERROR(ACX_ERR_IO, "rename('%s', '%s') failed: %s", tmp, path, strerror(errno));
        else
            status = fsync_path(dir, 1);
    }
    /* also the barrier: nobody returns (and reads) before the rename */
    status = acx_coll_agree(world, status);
    if (status == ACX_OK) kill_point("after_rename", rank);

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
        MPI_Barrier(world->mpi);
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

/* ---- opening ---- */

/* Rank 0 (or the lone process): does the file exist, and is it HDF5? */
static acx_status_t probe_open(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return ACX_ERROR(ACX_ERR_IO, "checkpoint '%s' is a directory, not a file", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    close(fd);
    acx_h5_lock();
    htri_t is = H5Fis_hdf5(path);
    H5Eclear2(H5E_DEFAULT);
    acx_h5_unlock();
    if (is <= 0)
        return ACX_ERROR(ACX_ERR_FORMAT, "'%s' is not an HDF5 file (so not an acx checkpoint)",
                         path);
    return ACX_OK;
}

/* Read a scalar attribute into a native type after checking its class.
 * Returns ACX_ERR_FORMAT naming attribute, object and file. Lock held. */
static acx_status_t read_attr_num(acx_ckpt_file_t *f, const char *object, const char *name,
                                  H5T_class_t want, hid_t mem_type, void *out) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t obj = -1, attr = -1, type = -1, space = -1;
    snprintf(what, sizeof what, "attribute '%s' on '%s' in '%s'", name, object, f->path);
    int e = path_exists(f->file, object);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "checkpoint '%s' has no object '%s' (looking for its "
                           "attribute '%s')",
                           f->path, object, name);
        goto out;
    }
    ACX_H5_CHECK_GOTO(obj = H5Oopen(f->file, object, H5P_DEFAULT), what, status, out);
    htri_t has;
    ACX_H5_CHECK_GOTO(has = H5Aexists(obj, name), what, status, out);
    if (has == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no attribute '%s' on '%s'", f->path,
                           name, object);
        goto out;
    }
    ACX_H5_CHECK_GOTO(attr = H5Aopen(obj, name, H5P_DEFAULT), what, status, out);
    ACX_H5_CHECK_GOTO(type = H5Aget_type(attr), what, status, out);
    ACX_H5_CHECK_GOTO(space = H5Aget_space(attr), what, status, out);
    if (H5Tget_class(type) != want || H5Sget_simple_extent_npoints(space) != 1) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "attribute '%s' on '%s' in '%s' is not a%s scalar", name,
                           object, f->path,
                           want == H5T_INTEGER ? "n integer"
                           : want == H5T_FLOAT ? " floating-point"
                                               : " string");
        goto out;
    }
    ACX_H5_CHECK_GOTO(H5Aread(attr, mem_type, out), what, status, out);
out:
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    if (obj >= 0) H5Oclose(obj);
    return status;
}

/* The format checks every open makes. Lock held. */
static acx_status_t check_format(acx_ckpt_file_t *f) {
    char fmt[64];
    int64_t version;
    htri_t has = H5Aexists(f->file, "format");
    if (has < 0) return acx_error_h5("H5Aexists", f->path, __FILE__, __LINE__);
    if (has == 0)
        return ACX_ERROR(ACX_ERR_FORMAT, "'%s' is not an acx checkpoint (no 'format' attribute)",
                         f->path);
    acx_status_t status = acx_ckpt_get_str(f, "/", "format", fmt, sizeof fmt);
    if (status == ACX_ERR_INVALID_ARG || (status == ACX_OK && strcmp(fmt, ACX_CKPT_FORMAT) != 0))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "'%s' is not an acx checkpoint (format '%.40s%s', "
                         "expected '%s')",
                         f->path, status == ACX_OK ? fmt : "", status == ACX_OK ? "" : "...",
                         ACX_CKPT_FORMAT);
    if (status != ACX_OK) return status;
    ACX_CHECK(acx_ckpt_get_i64(f, "/", "format_version", &version));
    if (version > ACX_CKPT_FORMAT_VERSION)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "checkpoint '%s': format version %lld is newer than this acx supports "
                         "(%d); use a newer acx to load it",
                         f->path, (long long)version, ACX_CKPT_FORMAT_VERSION);
    if (version < 1)
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s': invalid format version %lld", f->path,
                         (long long)version);
    f->version = version;
    return ACX_OK;
}

/* H5Fopen failed: say why in acx's terms (the HDF5 text is kept). */
static acx_status_t open_error(const char *path) {
    acx_status_t status = acx_error_h5("H5Fopen", path, __FILE__, __LINE__);
    char copy[ACX_ERRMSG_MAX];
    last_error_text(copy, sizeof copy);
    if (strstr(copy, "truncated") != NULL)
        return ACX_ERROR(ACX_ERR_IO, "checkpoint '%s' is truncated (an interrupted copy?): %s",
                         path, copy);
    if (acx_h5_last_damaged()) return status; /* "'path' is damaged: ..." already */
    if (strstr(copy, "signature") != NULL || strstr(copy, "checksum") != NULL)
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' is damaged: %s", path, copy);
    return status;
}

acx_status_t acx_ckpt_open(acx_comm_t *world, const char *path, acx_ckpt_file_t **file_p) {
    if (path == NULL || path[0] == '\0' || file_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_open: path and file_p must be given");
    acx_status_t status = ACX_OK;
    hid_t fapl = -1;
    acx_ckpt_file_t *f = acx_calloc(1, sizeof *f, "checkpoint file");
    if (f == NULL)
        status = ACX_ERR_NO_MEMORY;
    else {
        f->world = world;
        f->file = -1;
        f->path = str_concat(path, "");
        if (f->path == NULL) status = ACX_ERR_NO_MEMORY;
    }
    if (status == ACX_OK && (world == NULL || world->rank == 0)) status = probe_open(path);
    status = agree(world, status);
    if (status != ACX_OK) goto err_free;

    acx_h5_lock();
    acx_h5_quiet();
    ACX_H5_CHECK_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), path, status, agreed_open);
    if (world != NULL)
        ACX_H5_CHECK_GOTO(H5Pset_fapl_mpio(fapl, world->mpi, MPI_INFO_NULL), path, status,
                          agreed_open);
    /* collective over world (MPI_File_open) */
    f->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (f->file < 0) status = open_error(path);
agreed_open:
    if (fapl >= 0) H5Pclose(fapl);
    status = agree(world, status);
    if (status != ACX_OK) goto err_unlock;
    status = agree(world, check_format(f));
    if (status != ACX_OK) goto err_unlock;
    acx_h5_unlock();
    *file_p = f;
    return ACX_OK;

err_unlock:
    if (f->file >= 0) H5Fclose(f->file); /* collective: every rank reaches it */
    acx_h5_unlock();
err_free:
    if (f != NULL) free(f->path);
    free(f);
    return status;
}

void acx_ckpt_close(acx_ckpt_file_t *f) {
    if (f == NULL) return;
    acx_h5_lock();
    if (f->file >= 0) H5Fclose(f->file); /* collective when opened on a world */
    acx_h5_unlock();
    free(f->path);
    free(f);
}

/* ---- attributes and queries ---- */

acx_status_t acx_ckpt_get_i64(acx_ckpt_file_t *f, const char *object, const char *name,
                              int64_t *v_p) {
    if (f == NULL || object == NULL || name == NULL || v_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_get_i64: NULL argument");
    int64_t v;
    if (f->damaged != ACX_OK) return damage_replay(f);
    acx_h5_lock();
    acx_h5_quiet();
    acx_status_t status = read_attr_num(f, object, name, H5T_INTEGER, H5T_NATIVE_INT64, &v);
    acx_h5_unlock();
    status = note_damage(f, status, object);
    if (status == ACX_OK) *v_p = v;
    return status;
}

acx_status_t acx_ckpt_get_f64(acx_ckpt_file_t *f, const char *object, const char *name,
                              double *v_p) {
    if (f == NULL || object == NULL || name == NULL || v_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_get_f64: NULL argument");
    double v;
    if (f->damaged != ACX_OK) return damage_replay(f);
    acx_h5_lock();
    acx_h5_quiet();
    acx_status_t status = read_attr_num(f, object, name, H5T_FLOAT, H5T_NATIVE_DOUBLE, &v);
    acx_h5_unlock();
    status = note_damage(f, status, object);
    if (status == ACX_OK) *v_p = v;
    return status;
}

/* Whether HDF5 checks the dataset's chunks itself (the Fletcher-32
 * filter of format version 1). Lock held. */
static int has_fletcher32(hid_t dset) {
    hid_t dcpl = H5Dget_create_plist(dset);
    unsigned flags = 0;
    size_t nelem = 0;
    herr_t ret = dcpl >= 0 ? H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelem, NULL,
                                                  0, NULL, NULL)
                           : -1;
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    return ret >= 0;
}

/* The checksums of an open dataset of `bytes` bytes: *present_p 1 with
 * the CRC-32 attributes (version 2; read in any version that has them),
 * 0 when HDF5 checks the data itself (Fletcher-32 chunks, version 1).
 * Data with neither cannot be verified (the attributes deleted, or a file
 * not written by acx): refused unless the user allowed unverified files
 * (acx_ckpt_allow_unverified: checkpoint.allow_unverified), and then
 * loudly. Lock held. */
static acx_status_t dataset_crc(acx_ckpt_file_t *f, hid_t dset, uint64_t bytes, const char *what,
                                int *present_p, acx_ckpt_crc_t *crc) {
    *present_p = 0;
    ACX_CHECK(acx_ckpt_crc_read_attrs(dset, bytes, what, present_p, crc));
    if (*present_p || bytes == 0 || has_fletcher32(dset)) return ACX_OK;
    if (!f->allow_unverified)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "%s has no checksum (no CRC-32 attributes '%s', no Fletcher-32 "
                         "filter; format version %lld): its data cannot be verified, so acx "
                         "refuses to load it (damaged, edited, or not written by acx?). To load "
                         "it anyway, unverified, set checkpoint.allow_unverified: true",
                         what, ACX_CKPT_CRC_BLOCKS_ATTR, (long long)f->version);
    if (f->world == NULL || f->world->rank == 0)
        ACX_WARN(ACX_SUBSYS_IO,
                 "LOADING UNVERIFIED DATA: %s has no checksum (no CRC-32 attributes, no "
                 "Fletcher-32 filter); checkpoint.allow_unverified is true, so it is loaded "
                 "as it is: damage in it goes undetected",
                 what);
    f->warned_unverified = 1;
    return ACX_OK;
}

/* Read a string (fixed or variable length) from an attribute or a dataset
 * of one element into buf[n]. Lock held. */
static acx_status_t read_string(acx_ckpt_file_t *f, hid_t obj, int is_attr, const char *what,
                                char *buf, size_t n) {
    acx_status_t status = ACX_OK;
    hid_t type = -1, space = -1, mtype = -1;
    char *tmp = NULL;
    size_t len = 0;

    ACX_H5_CHECK_GOTO(type = is_attr ? H5Aget_type(obj) : H5Dget_type(obj), what, status, out);
    ACX_H5_CHECK_GOTO(space = is_attr ? H5Aget_space(obj) : H5Dget_space(obj), what, status, out);
    if (H5Tget_class(type) != H5T_STRING || H5Sget_simple_extent_npoints(space) != 1) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "%s is not a single string", what);
        goto out;
    }
    /* before allocating its size: the string is in the file, whole */
    ACX_CHECK_GOTO(is_attr ? acx_h5_check_attr(obj, what)
                           : acx_h5_check_dataset(obj, what, 1, NULL),
                   status, out);
    ACX_H5_CHECK_GOTO(mtype = H5Tcopy(type), what, status, out);
    if (H5Tis_variable_str(type) > 0) {
        char *vs = NULL;
        ACX_H5_CHECK_GOTO(is_attr ? H5Aread(obj, mtype, &vs)
                                  : H5Dread(obj, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, &vs),
                          what, status, out);
        len = vs != NULL ? strlen(vs) : 0;
        if (len < n) memcpy(buf, vs ? vs : "", len + 1);
        H5free_memory(vs);
    } else {
        size_t size = H5Tget_size(type);
        tmp = acx_malloc(size + 1, "checkpoint string");
        if (tmp == NULL) {
            status = ACX_ERR_NO_MEMORY;
            goto out;
        }
        ACX_H5_CHECK_GOTO(is_attr ? H5Aread(obj, mtype, tmp)
                                  : H5Dread(obj, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, tmp),
                          what, status, out);
        tmp[size] = '\0';
        if (!is_attr) {
            /* a long string's dataset: its raw bytes are `size` bytes */
            acx_ckpt_crc_t crc;
            acx_ckpt_crc_check_t k;
            int has_crc = 0;
            ACX_CHECK_GOTO(dataset_crc(f, obj, size, what, &has_crc, &crc), status, out);
            if (has_crc) {
                acx_ckpt_crc_check_init(&k, &crc, what, 0);
                status = acx_ckpt_crc_check_feed(&k, tmp, size);
                acx_ckpt_crc_free(&crc);
                if (status != ACX_OK) goto out;
            }
        }
        len = strlen(tmp);
        if (len < n) memcpy(buf, tmp, len + 1);
    }
    if (len >= n)
        status = ACX_ERROR(ACX_ERR_INVALID_ARG, "%s holds %zu bytes; the buffer has room for %zu",
                           what, len + 1, n);
out:
    free(tmp);
    if (mtype >= 0) H5Tclose(mtype);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    return status;
}

/* A dataset read failed: a checksum failure is a corrupted file
 * (ACX_ERR_FORMAT naming the dataset), anything else an HDF5 error. */
static acx_status_t read_error(const char *call, const char *dset, const char *path, int line) {
    char what[1280], copy[ACX_ERRMSG_MAX];
    snprintf(what, sizeof what, "dataset '%s' in '%s'", dset, path);
    acx_status_t status = acx_error_h5(call, what, __FILE__, line);
    last_error_text(copy, sizeof copy);
    if (strstr(copy, "Fletcher32") != NULL || strstr(copy, "checksum") != NULL)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "dataset '%s' in '%s': checksum mismatch (corrupted file?): %s", dset,
                         path, copy);
    return status;
}

acx_status_t acx_ckpt_get_str(acx_ckpt_file_t *f, const char *object, const char *name, char *buf,
                              size_t n) {
    if (f == NULL || object == NULL || name == NULL || buf == NULL || n == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_get_str: NULL argument or empty buffer");
    acx_status_t status = ACX_OK;
    char what[1280], dpath[1024];
    hid_t obj = -1, attr = -1, dset = -1;
    if (f->damaged != ACX_OK) return damage_replay(f);

    acx_h5_lock();
    acx_h5_quiet();
    snprintf(what, sizeof what, "attribute '%s' on '%s' in '%s'", name, object, f->path);
    /* a long string lives in dataset "<object>/<name>" */
    snprintf(dpath, sizeof dpath, "%s%s%s", object,
             object[0] != '\0' && object[strlen(object) - 1] == '/' ? "" : "/", name);
    int e = path_exists(f->file, object);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e > 0) {
        ACX_H5_CHECK_GOTO(obj = H5Oopen(f->file, object, H5P_DEFAULT), what, status, out);
        htri_t has;
        ACX_H5_CHECK_GOTO(has = H5Aexists(obj, name), what, status, out);
        if (has > 0) {
            ACX_H5_CHECK_GOTO(attr = H5Aopen(obj, name, H5P_DEFAULT), what, status, out);
            status = read_string(f, attr, 1, what, buf, n);
            goto out;
        }
    }
    e = path_exists(f->file, dpath);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no attribute '%s' on '%s'", f->path,
                           name, object);
        goto out;
    }
    snprintf(what, sizeof what, "string dataset '%s' in '%s'", dpath, f->path);
    dset = H5Dopen2(f->file, dpath, H5P_DEFAULT);
    if (dset < 0) {
        status = read_error("H5Dopen2", dpath, f->path, __LINE__);
        goto out;
    }
    status = read_string(f, dset, 0, what, buf, n);
    if (status == ACX_ERR_HDF5) status = read_error("H5Dread", dpath, f->path, __LINE__);
out:
    if (dset >= 0) H5Dclose(dset);
    if (attr >= 0) H5Aclose(attr);
    if (obj >= 0) H5Oclose(obj);
    acx_h5_unlock();
    return note_damage(f, status, dset >= 0 ? dpath : object);
}

int acx_ckpt_exists(acx_ckpt_file_t *f, const char *path) {
    if (f == NULL || path == NULL || f->damaged != ACX_OK) return 0;
    acx_h5_lock();
    acx_h5_quiet();
    int e = path_exists(f->file, path);
    if (e < 0) {
        char what[1280];
        snprintf(what, sizeof what, "group of '%s' in '%s'", path, f->path);
        (void)note_damage(f, acx_error_h5("H5Lexists", what, __FILE__, __LINE__), NULL);
        e = 0;
    }
    acx_h5_unlock();
    return e;
}

acx_status_t acx_ckpt_damage(const acx_ckpt_file_t *f) {
    if (f == NULL || f->damaged == ACX_OK) return ACX_OK;
    return ACX_ERROR(f->damaged, "%s", f->damage);
}

void acx_ckpt_allow_unverified(acx_ckpt_file_t *f, int allow) {
    if (f != NULL) f->allow_unverified = allow != 0;
}

/* Open dataset `path`, or ACX_ERR_FORMAT naming it when absent, and check
 * what a file could make acx do with it (acx_h5_check_dataset: no plugin,
 * no virtual or external storage, its storage holds its whole shape and
 * lies inside the file) before anything is read or allocated for it.
 * Lock held. */
static acx_status_t open_dataset(acx_ckpt_file_t *f, const char *path, hid_t *dset_p) {
    char what[1280];
    snprintf(what, sizeof what, "dataset '%s' in '%s'", path, f->path);
    int e = path_exists(f->file, path);
    if (e < 0) return acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
    if (e == 0)
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no dataset '%s'", f->path, path);
    hid_t d = H5Dopen2(f->file, path, H5P_DEFAULT);
    if (d < 0) return read_error("H5Dopen2", path, f->path, __LINE__);
    acx_status_t status = acx_h5_check_dataset(d, what, 1, NULL);
    if (status != ACX_OK) {
        H5Dclose(d);
        return status;
    }
    *dset_p = d;
    return ACX_OK;
}

/* Shape and dtype of an open dataset. Lock held. */
static acx_status_t dataset_shape(acx_ckpt_file_t *f, const char *path, hid_t dset, int *ndim_p,
                                  int64_t *shape, acx_dtype_t *dtype_p) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t space = -1, type = -1;
    hsize_t dims[ACX_MAX_DIMS];
    snprintf(what, sizeof what, "dataset '%s' in '%s'", path, f->path);
    ACX_H5_CHECK_GOTO(space = H5Dget_space(dset), what, status, out);
    ACX_H5_CHECK_GOTO(type = H5Dget_type(dset), what, status, out);
    int ndim = H5Sget_simple_extent_ndims(space);
    if (ndim < 0 || ndim > ACX_MAX_DIMS) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "dataset '%s' in '%s' has %d dimensions (at most %d)",
                           path, f->path, ndim, ACX_MAX_DIMS);
        goto out;
    }
    int dtype = acx_h5_to_dtype(type);
    if (dtype < 0) {
        status =
            ACX_ERROR(ACX_ERR_FORMAT, "dataset '%s' in '%s' has a datatype acx does not support",
                      path, f->path);
        goto out;
    }
    ACX_H5_CHECK_GOTO(H5Sget_simple_extent_dims(space, dims, NULL), what, status, out);
    *ndim_p = ndim;
    for (int k = 0; k < ndim; k++)
        shape[k] = (int64_t)dims[k];
    *dtype_p = (acx_dtype_t)dtype;
out:
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    return status;
}

acx_status_t acx_ckpt_shape(acx_ckpt_file_t *f, const char *path, int *ndim_p, int64_t *shape,
                            acx_dtype_t *dtype_p) {
    if (f == NULL || path == NULL || ndim_p == NULL || shape == NULL || dtype_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_shape: NULL argument");
    hid_t dset = -1;
    int ndim;
    int64_t s[ACX_MAX_DIMS];
    acx_dtype_t dtype;
    if (f->damaged != ACX_OK) return damage_replay(f);
    acx_h5_lock();
    acx_h5_quiet();
    acx_status_t status = open_dataset(f, path, &dset);
    if (status == ACX_OK) status = dataset_shape(f, path, dset, &ndim, s, &dtype);
    if (dset >= 0) H5Dclose(dset);
    acx_h5_unlock();
    status = note_damage(f, status, path);
    if (status != ACX_OK) return status;
    *ndim_p = ndim;
    memcpy(shape, s, (size_t)ndim * sizeof *s);
    *dtype_p = dtype;
    return ACX_OK;
}

acx_status_t acx_ckpt_storage(acx_ckpt_file_t *f, const char *path, acx_ckpt_storage_t *st_p) {
    if (f == NULL || path == NULL || st_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_storage: NULL argument");
    if (f->damaged != ACX_OK) return damage_replay(f);
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t dset = -1;
    hsize_t fsize = 0;
    acx_h5_storage_t hs = {0};
    snprintf(what, sizeof what, "dataset '%s' in '%s'", path, f->path);
    acx_h5_lock();
    acx_h5_quiet();
    int e = path_exists(f->file, path);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no dataset '%s'", f->path, path);
        goto out;
    }
    ACX_H5_CHECK_GOTO(dset = H5Dopen2(f->file, path, H5P_DEFAULT), what, status, out);
    ACX_CHECK_GOTO(acx_h5_check_dataset(dset, what, 0, &hs), status, out);
    ACX_H5_CHECK_GOTO(H5Fget_filesize(f->file, &fsize), what, status, out);
out:
    if (dset >= 0) H5Dclose(dset);
    acx_h5_unlock();
    status = note_damage(f, status, path);
    if (status != ACX_OK) return status;
    *st_p = (acx_ckpt_storage_t){
        .bytes = hs.bytes, .stored = hs.stored, .file_bytes = fsize, .written = hs.written};
    return ACX_OK;
}

/* ---- reading tensors ---- */

/* Select the elements [e0, e1) — row-major flat indices — of the dataspace
 * `space` of dims[ndim], where coordinates start[0..d) are fixed and the
 * range is within the sub-array dims[d..ndim): a partial first row, whole
 * rows, a partial last row, recursing into the partial ones (at most
 * 2*ndim - 1 blocks, OR-ed into the selection). */
static herr_t select_flat(hid_t space, int ndim, const hsize_t *dims, int d, hsize_t *start,
                          hsize_t e0, hsize_t e1) {
    if (e0 >= e1) return 0;
    hsize_t inner = 1, count[ACX_MAX_DIMS];
    for (int k = d + 1; k < ndim; k++)
        inner *= dims[k];
    hsize_t r0 = e0 / inner, o0 = e0 % inner, r1 = e1 / inner, o1 = e1 % inner;
    if (d == ndim - 1 || r0 == r1) {
        start[d] = r0;
        if (d == ndim - 1) {
            for (int k = 0; k < ndim; k++)
                count[k] = k < d ? 1 : e1 - e0;
            return H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL);
        }
        return select_flat(space, ndim, dims, d + 1, start, o0, o1);
    }
    if (o0 > 0) {
        start[d] = r0++;
        if (select_flat(space, ndim, dims, d + 1, start, o0, inner) < 0) return -1;
    }
    if (r1 > r0) {
        hsize_t st[ACX_MAX_DIMS];
        for (int k = 0; k < ndim; k++) {
            st[k] = k < d ? start[k] : k == d ? r0 : 0;
            count[k] = k < d ? 1 : k == d ? r1 - r0 : dims[k];
        }
        if (H5Sselect_hyperslab(space, H5S_SELECT_OR, st, NULL, count, NULL) < 0) return -1;
    }
    if (o1 > 0) {
        start[d] = r1;
        if (select_flat(space, ndim, dims, d + 1, start, 0, o1) < 0) return -1;
    }
    return 0;
}

/* Read elements [e0, e1) (e0 < e1) of dset — flat, row-major indices —
 * into buf as one flat run. Lock held. */
static acx_status_t read_flat(hid_t dset, hid_t mtype, int ndim, const hsize_t *dims, hsize_t e0,
                              hsize_t e1, void *buf, const char *what) {
    acx_status_t status = ACX_OK;
    hid_t fspace = -1, mspace = -1;
    hsize_t start[ACX_MAX_DIMS] = {0}, n = e1 - e0;
    ACX_H5_CHECK_GOTO(fspace = H5Dget_space(dset), what, status, out);
    ACX_H5_CHECK_GOTO(H5Sselect_none(fspace), what, status, out);
    ACX_H5_CHECK_GOTO(select_flat(fspace, ndim, dims, 0, start, e0, e1), what, status, out);
    ACX_H5_CHECK_GOTO(mspace = H5Screate_simple(1, &n, NULL), what, status, out);
    ACX_H5_CHECK_GOTO(H5Dread(dset, mtype, mspace, fspace, H5P_DEFAULT, buf), what, status, out);
out:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    return status;
}

/* Check that dataset matches t's shape and dtype, then read t's io rows
 * and verify them. Lock held.
 *
 * Verification (format version 2): the io rows are the dataset's bytes
 * [a, b); the CRC blocks they touch cover [wa, wb) ⊇ [a, b) — the first and
 * last block may hold bytes of rows this rank does not read. Those edges
 * ([wa, a) and [b, wb), each less than one block) are read too, into
 * `scratch`, and the blocks are checked as head + rows + tail. So a rank
 * verifies every byte it returns without any other rank's help, whatever
 * the world size at save and at load; the extra reading is at most two
 * blocks per tensor (a small fraction of a rank's rows: blocks are 64 KiB,
 * or 1/4096 of a tensor above 256 MiB). The rows are read in pieces of
 * about CKPT_IO_PIECE, each checked right after it is read, while it is in
 * the cache. Independent transfers: see the file comment. */
static acx_status_t read_tensor(acx_ckpt_file_t *f, const acx_ckpt_tensor_t *t) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t dset = -1, fspace = -1, mspace = -1;
    int ndim, has_crc = 0;
    int64_t shape[ACX_MAX_DIMS];
    acx_dtype_t dtype;
    acx_ckpt_crc_t crc = {0};
    unsigned char *scratch = NULL;

    snprintf(what, sizeof what, "dataset '%s' in '%s'", t->path, f->path);
    ACX_CHECK_GOTO(open_dataset(f, t->path, &dset), status, out);
    ACX_CHECK_GOTO(dataset_shape(f, t->path, dset, &ndim, shape, &dtype), status, out);
    int same = ndim == t->ndim && dtype == t->dtype;
    for (int k = 0; same && k < ndim; k++)
        same = shape[k] == t->shape[k];
    if (!same) {
        char fs[256], ts[256];
        format_shape(fs, sizeof fs, ndim, shape);
        format_shape(ts, sizeof ts, t->ndim, t->shape);
        status =
            ACX_ERROR(ACX_ERR_FORMAT, "dataset '%s' in '%s' has shape %s (%s), expected %s (%s)",
                      t->path, f->path, fs, acx_dtype_name(dtype), ts, acx_dtype_name(t->dtype));
        goto out;
    }
    uint64_t es = acx_dtype_size(t->dtype), rb = row_bytes(t);
    uint64_t a = (uint64_t)t->io_begin * rb, b = (uint64_t)t->io_end * rb;
    ACX_CHECK_GOTO(dataset_crc(f, dset, tensor_bytes(t), what, &has_crc, &crc), status, out);
    /* an empty dataset has no storage to read (the same on every rank) */
    if (tensor_bytes(t) == 0) goto out;

    hsize_t dims[ACX_MAX_DIMS];
    for (int k = 0; k < ndim; k++)
        dims[k] = (hsize_t)shape[k];
    /* the edges of the blocks [a, b) touches: elements [h0, a/es) and
     * [b/es, t1); the block edges need not fall on elements */
    uint64_t wa = a, wb = b;
    if (has_crc && a < b) {
        wa = a / crc.block * crc.block;
        wb = acx_ckpt_crc_nblocks(b, crc.block) * crc.block;
        if (wb > crc.bytes) wb = crc.bytes;
    }
    hsize_t h0 = wa / es, t1 = (wb + es - 1) / es;
    uint64_t head_bytes = (a / es - h0) * es, tail_bytes = (t1 - b / es) * es;
    if (head_bytes + tail_bytes > 0) {
        scratch = acx_malloc((size_t)(head_bytes + tail_bytes), "checkpoint block edges");
        if (scratch == NULL) {
            status = ACX_ERR_NO_MEMORY;
            goto out;
        }
    }
    hid_t mtype = acx_h5_native((int)t->dtype);
    int check = has_crc && a < b;
    acx_ckpt_crc_check_t k;
    if (check) acx_ckpt_crc_check_init(&k, &crc, what, wa);
    if (head_bytes > 0)
        ACX_CHECK_GOTO(read_flat(dset, mtype, ndim, dims, h0, a / es, scratch, what), status, out);
    if (check)
        ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&k, scratch + (wa - h0 * es), a - wa), status, out);

    /* the rows, piece by piece, each checked right after it is read (while
     * it is in the cache) */
    if (a < b) {
        hsize_t step = piece_rows(rb), end = (hsize_t)t->io_end;
        ACX_H5_CHECK_GOTO(fspace = H5Dget_space(dset), what, status, out);
        for (hsize_t r = (hsize_t)t->io_begin; r < end; r += step) {
            hsize_t n = end - r < step ? end - r : step;
            char *p = (char *)t->buf + (size_t)(r - (hsize_t)t->buf_row0) * (size_t)rb;
            double x0 = MPI_Wtime();
            ACX_CHECK_GOTO(select_rows(fspace, ndim, dims, r, n, &mspace, what), status, out);
            if (H5Dread(dset, mtype, mspace, fspace, H5P_DEFAULT, p) < 0) {
                status = read_error("H5Dread", t->path, f->path, __LINE__);
                goto out;
            }
            H5Sclose(mspace);
            mspace = -1;
            double x1 = MPI_Wtime();
            if (check) ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&k, p, n * rb), status, out);
            f->t_read += x1 - x0;
            f->t_check += MPI_Wtime() - x1;
        }
    }
    if (tail_bytes > 0)
        ACX_CHECK_GOTO(read_flat(dset, mtype, ndim, dims, b / es, t1, scratch + head_bytes, what),
                       status, out);
    if (check)
        ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&k, scratch + head_bytes, wb - b), status, out);
out:
    free(scratch);
    acx_ckpt_crc_free(&crc);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (dset >= 0) H5Dclose(dset);
    return status;
}

/* ---- sharing rows among replicas ---- */

/* All-gather t's io rows in t->share (size > 1), in place: each member's
 * rows land at the same rows of every member's buffer. The members' rows
 * are checked first (same buffer rows; disjoint, in rank order, one range
 * inside the buffer), the same way on every member from the same
 * exchanged values, so they all take the same path. Collective over
 * t->share; its members return the same status. Counts are in rows (a
 * contiguous datatype of one row), so a tensor of more than 2^31 elements
 * needs no special case. */
static acx_status_t share_rows(const acx_ckpt_tensor_t *t, const char *file) {
    acx_comm_t *g = t->share;
    acx_status_t status = ACX_OK;
    int n = g->size;
    int64_t mine[4] = {t->io_begin, t->io_end, t->buf_row0, t->buf_rows};
    int64_t *all = acx_malloc((size_t)n * sizeof mine, "checkpoint row exchange");
    int *counts = acx_malloc((size_t)n * 2 * sizeof *counts, "checkpoint row exchange");
    MPI_Datatype row = MPI_DATATYPE_NULL;
    uint64_t rb = row_bytes(t);
    status = acx_coll_agree(g, all != NULL && counts != NULL ? ACX_OK : ACX_ERR_NO_MEMORY);
    if (status != ACX_OK) goto out;
    ACX_MPI_CHECK_GOTO(MPI_Allgather(mine, 4, MPI_INT64_T, all, 4, MPI_INT64_T, g->mpi), status,
                       agreed);
    int *displs = counts + n;
    int64_t next = -1, first = -1;
    for (int r = 0; r < n && status == ACX_OK; r++) {
        const int64_t *a = all + 4 * r;
        int64_t rows = a[1] - a[0];
        if (a[2] != t->buf_row0 || a[3] != t->buf_rows)
            status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                               "checkpoint tensor '%s' in '%s': the ranks sharing it hold "
                               "different rows ([%lld, +%lld) on member %d, [%lld, +%lld) on "
                               "member 0)",
                               t->path, file, (long long)a[2], (long long)a[3], r,
                               (long long)all[2], (long long)all[3]);
        else if (rows > 0 && next >= 0 && a[0] != next)
            status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                               "checkpoint tensor '%s' in '%s': member %d of its share group "
                               "reads rows [%lld, %lld), not from row %lld (the members' io "
                               "rows must follow each other in rank order)",
                               t->path, file, r, (long long)a[0], (long long)a[1], (long long)next);
        else if (rows > (int64_t)INT_MAX || a[0] - t->buf_row0 > (int64_t)INT_MAX ||
                 rb > (uint64_t)INT_MAX)
            status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                               "checkpoint tensor '%s': %lld rows of %llu bytes are too many "
                               "to share in one MPI call",
                               t->path, (long long)rows, (unsigned long long)rb);
        if (status != ACX_OK) break;
        counts[r] = (int)rows;
        displs[r] = rows > 0 ? (int)(a[0] - t->buf_row0) : 0;
        if (rows > 0) {
            if (first < 0) first = a[0];
            next = a[1];
        }
    }
    /* every member computed the same status from the same values */
    if (status != ACX_OK || first < 0) goto out;
    ACX_MPI_CHECK_GOTO(MPI_Type_contiguous((int)rb, MPI_BYTE, &row), status, agreed);
    ACX_MPI_CHECK_GOTO(MPI_Type_commit(&row), status, agreed);
    ACX_MPI_CHECK_GOTO(
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t->buf, counts, displs, row, g->mpi),
        status, agreed);
agreed:
    status = acx_coll_agree(g, status);
out:
    if (row != MPI_DATATYPE_NULL) MPI_Type_free(&row);
    free(counts);
    free(all);
    return status;
}

acx_status_t acx_ckpt_read(acx_ckpt_file_t *f, const acx_ckpt_tensor_t *tensors, int num_tensors) {
    acx_status_t status = ACX_OK;
    if (f == NULL || num_tensors < 0 || (num_tensors > 0 && tensors == NULL))
        status = ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_read: NULL file or tensors");
    for (int i = 0; status == ACX_OK && i < num_tensors; i++) {
        status = check_tensor(&tensors[i], i);
        if (status == ACX_OK && tensors[i].share != NULL && f->world == NULL)
            status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                               "checkpoint tensor '%s': a share group needs a file opened on a "
                               "world",
                               tensors[i].path);
    }
    if (f == NULL) return status;
    if (status == ACX_OK && f->damaged != ACX_OK) status = damage_replay(f);
    status = agree(f->world, status);
    if (status != ACX_OK) return status;

    double t0 = MPI_Wtime();
    f->t_read = f->t_check = 0;
    acx_h5_lock();
    acx_h5_quiet();
    for (int i = 0; status == ACX_OK && i < num_tensors; i++)
        status = note_damage(f, read_tensor(f, &tensors[i]), tensors[i].path);
    acx_h5_unlock();
    double t1 = MPI_Wtime();
    /* nothing is shared before every rank has verified what it read */
    status = agree(f->world, status);
    double t2 = MPI_Wtime();
    for (int i = 0; status == ACX_OK && i < num_tensors; i++)
        if (tensors[i].share != NULL && tensors[i].share->size > 1)
            status = share_rows(&tensors[i], f->path);
    status = agree(f->world, status);
    if (status == ACX_OK && acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_IO)) {
        int shared = 0, group = 1;
        for (int i = 0; i < num_tensors; i++)
            if (tensors[i].share != NULL && tensors[i].share->size > 1) {
                shared++;
                group = tensors[i].share->size;
            }
        ACX_DEBUG(ACX_SUBSYS_IO,
                  "read %d tensors from '%s' (CRC-32: %s); %d of them read in parts by %d ranks "
                  "and all-gathered; reading and checking %.3f s (H5Dread of the rows %.3f s, "
                  "their CRC checks %.3f s), waiting for the others %.3f s, all-gathers %.3f s",
                  num_tensors, f->path, acx_ckpt_crc_impl(), shared, shared ? group : 1, t1 - t0,
                  f->t_read, f->t_check, t2 - t1, MPI_Wtime() - t2);
    }
    return status;
}

/* ---- listing ---- */

typedef struct {
    hid_t group;
    int count, cap;
    size_t bytes;
    char **names;
    int failed;
} list_state_t;

static herr_t list_cb(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    list_state_t *s = data;
    H5O_info_t oinfo;
    (void)info;
    if (H5Oget_info_by_name2(group, name, &oinfo, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return -1;
    if (oinfo.type != H5O_TYPE_DATASET) return 0;
    if (s->count == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        char **n = realloc(s->names, (size_t)cap * sizeof *n);
        if (n == NULL) {
            s->failed = 1;
            return -1;
        }
        s->names = n;
        s->cap = cap;
    }
    s->names[s->count] = strdup(name);
    if (s->names[s->count] == NULL) {
        s->failed = 1;
        return -1;
    }
    s->bytes += strlen(name) + 1;
    s->count++;
    return 0;
}

acx_status_t acx_ckpt_list(acx_ckpt_file_t *f, const char *group, int *count_p, char ***names_p) {
    if (f == NULL || group == NULL || count_p == NULL || names_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_list: NULL argument");
    acx_status_t status = ACX_OK;
    char what[1280];
    list_state_t s = {.group = -1};
    hid_t g = -1, gcpl = -1;
    char **block = NULL;

    snprintf(what, sizeof what, "group '%s' in '%s'", group, f->path);
    if (f->damaged != ACX_OK) return damage_replay(f);
    acx_h5_lock();
    acx_h5_quiet();
    int e = path_exists(f->file, group);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no group '%s'", f->path, group);
        goto out;
    }
    ACX_H5_CHECK_GOTO(g = H5Gopen2(f->file, group, H5P_DEFAULT), what, status, out);
    /* creation order when the group tracks it (acx's own files), else by
     * name (a group written by another tool) */
    unsigned flags = 0;
    ACX_H5_CHECK_GOTO(gcpl = H5Gget_create_plist(g), what, status, out);
    ACX_H5_CHECK_GOTO(H5Pget_link_creation_order(gcpl, &flags), what, status, out);
    H5_index_t index = (flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    if (H5Literate(g, index, H5_ITER_INC, NULL, list_cb, &s) < 0) {
        if (s.failed)
            status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory to list %s", what);
        else
            status = acx_error_h5("H5Literate", what, __FILE__, __LINE__);
        goto out;
    }
    /* one block: the pointer array, then the strings */
    block = acx_malloc((size_t)s.count * sizeof(char *) + s.bytes + 1, "checkpoint name list");
    if (block == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto out;
    }
    char *p = (char *)(block + s.count);
    for (int i = 0; i < s.count; i++) {
        size_t n = strlen(s.names[i]) + 1;
        memcpy(p, s.names[i], n);
        block[i] = p;
        p += n;
    }
out:
    if (gcpl >= 0) H5Pclose(gcpl);
    if (g >= 0) H5Gclose(g);
    acx_h5_unlock();
    for (int i = 0; i < s.count; i++)
        free(s.names[i]);
    free(s.names);
    status = note_damage(f, status, group);
    if (status != ACX_OK) return status;
    *count_p = s.count;
    *names_p = block;
    return ACX_OK;
}

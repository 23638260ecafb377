/*
 * io/ckpt_pkg.h — what the checkpoint file's writer (io/ckpt_write.c),
 * reader (io/ckpt_read.c) and one-process tools (io/ckpt_tools.c) share
 * and nobody outside io/ sees (the package-private tier, as HDF5's
 * H5Dpkg.h): the open file's state, the sizes of a tensor's rows, the
 * check of a tensor's description, the row selections and the existence
 * of a path. The names and the layout are io/ckpt_format.h's; the
 * interface the runtime uses is io/checkpoint.h.
 */
#ifndef ACX_IO_CKPT_PKG_H
#define ACX_IO_CKPT_PKG_H

#include <hdf5.h>
#include <stdint.h>
#include <string.h>

#include "io/checkpoint.h"
#include "io/ckpt_crc.h"
#include "base/error.h"
#include "base/memstat.h"

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
    unsigned flags;        /* acx_ckpt_open_flags */
    int allow_unverified;  /* acx_ckpt_allow_unverified */
    int warned_unverified; /* the loud warning was given */
};

/* The root attribute `format` of open file f, the one read of it: the
 * reader's open (a checkpoint) and acx_ckpt_param_shapes (a checkpoint or
 * a weights file) both take the name from here. *has_p 0 and ACX_OK when
 * f has no such attribute; else *has_p 1 and acx_ckpt_get_str's status
 * (fixed- or variable-length string, checked whole before its size is
 * trusted; ACX_ERR_INVALID_ARG when longer than n - 1 bytes, ACX_ERR_FORMAT
 * when not a single string). An HDF5 failure asking: ACX_ERR_HDF5. */
acx_status_t acx_ckpt_format_name(acx_ckpt_file_t *f, char *buf, size_t n, int *has_p);

/* The agreed status over world; a file of one process (world NULL) has
 * nothing to agree with. */
static inline acx_status_t agree(acx_comm_t *world, acx_status_t status) {
    return world != NULL ? acx_coll_agree(world, status) : status;
}

/* a followed by b, malloc'd (acx_malloc records a failure); NULL on failure. */
static inline char *acx_ckpt_str_concat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = acx_malloc(na + nb + 1, "checkpoint path");
    if (s == NULL) return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

/* Elements of one row (all dims after the first). */
static inline int64_t row_numel(const acx_ckpt_tensor_t *t) {
    int64_t n = 1;
    for (int k = 1; k < t->ndim; k++)
        n *= t->shape[k];
    return n;
}

/* Bytes of one row (all dims after the first) and of the whole tensor. */
static inline uint64_t row_bytes(const acx_ckpt_tensor_t *t) {
    return (uint64_t)row_numel(t) * acx_dtype_size(t->dtype);
}

static inline uint64_t tensor_bytes(const acx_ckpt_tensor_t *t) {
    return (uint64_t)t->shape[0] * row_bytes(t);
}

/* Rows per H5Dwrite / H5Dread call: about CKPT_IO_PIECE bytes, at least
 * one row. */
static inline hsize_t piece_rows(uint64_t rb) {
    uint64_t n = rb > 0 ? CKPT_IO_PIECE / rb : 1;
    return n > 0 ? (hsize_t)n : 1;
}

/* Check one tensor's description (tensor i of a list, for messages); the
 * same for save and read. ACX_ERR_INVALID_ARG naming what is wrong. */
acx_status_t acx_ckpt_check_tensor(const acx_ckpt_tensor_t *t, int i);

/* Whether every component of `path` exists: 1 yes, 0 no, -1 HDF5 failed
 * (a damaged group: the error stack is kept for acx_error_h5, and the
 * answer is not "absent"). Lock held. */
int acx_ckpt_path_exists(hid_t file, const char *path);

/* Select rows [r0, r0 + n) x all inner dims of `fspace` (a dataspace of
 * dims[ndim]) and create the memory space of the selection's shape in
 * *mspace_p (the caller closes it). Lock held. */
acx_status_t acx_ckpt_select_rows(hid_t fspace, int ndim, const hsize_t *dims, hsize_t r0,
                                  hsize_t n, hid_t *mspace_p, const char *what);

/* ---- the reader's shared parts (io/ckpt_read.c) ---- */

/* If the error just recorded says the file is damaged, keep it on f (every
 * later call returns it); `path` names the object being read. Returns
 * `status`, or the damage. */
acx_status_t acx_ckpt_note_damage(acx_ckpt_file_t *f, acx_status_t status, const char *path);

/* The damage found earlier, recorded again as the last error. */
acx_status_t acx_ckpt_damage_replay(acx_ckpt_file_t *f);

/* The checksums of an open dataset of `bytes` bytes: *present_p 1 with the
 * CRC-32 attributes (crc filled; free with acx_ckpt_crc_free), 0 when HDF5
 * checks the data itself (Fletcher-32) or it is empty. Data with neither
 * is ACX_ERR_FORMAT "<what> has no checksum ..." unless
 * acx_ckpt_allow_unverified, then read with a loud warning. Lock held. */
acx_status_t acx_ckpt_dataset_crc(acx_ckpt_file_t *f, hid_t dset, uint64_t bytes, const char *what,
                                  int *present_p, acx_ckpt_crc_t *crc);

/* ---- the whole-file passes (io/ckpt_scan.c) ---- */

/* Read every byte of metadata of an open file (every object header whole,
 * every attribute, every link; soft and external links refused) before
 * anything is interpreted: HDF5 checks its metadata checksums only when it
 * loads a structure, and 1.10.8 caches a header whose continuation chunk
 * failed without that chunk. The first failure, named, ends the walk.
 * `real` names the file. Lock held. */
acx_status_t acx_ckpt_walk_metadata(hid_t file, const char *real);

/* A dataset's shape (ndim sizes) and element count (0 for a null
 * dataspace). */
typedef struct acx_ckpt_shape {
    int ndim;
    hsize_t dims[H5S_MAX_RANK];
    hsize_t numel;
} acx_ckpt_shape_t;

/* The shape of `dset`. Returns 0, or -1 when HDF5 cannot tell it (the
 * caller names the dataset). Lock held. */
int acx_ckpt_dataset_shape(hid_t dset, acx_ckpt_shape_t *s);

#endif /* ACX_IO_CKPT_PKG_H */

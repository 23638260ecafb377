/*
 * io/checkpoint.h — the parallel HDF5 checkpoint file (library-private).
 *
 * The one writer (io/ckpt_write.c) and the one reader (io/ckpt_read.c) of
 * acx's HDF5 files; the names, versions and layout are io/ckpt_format.h's.
 * io knows files, HDF5 and row selections; it does not know what a model or
 * an optimizer is. The runtime (runtime/checkpoint.c) describes the state as
 * a list of tensors — each a global shape plus the rows this rank writes or
 * reads from a local buffer — and attributes; io writes them collectively
 * and reads them back under any world size. Format: docs/checkpoint-format.md.
 */
#ifndef ACX_IO_CHECKPOINT_H
#define ACX_IO_CHECKPOINT_H

#include <stdint.h>

#include "acx/model.h"
#include "acx/status.h"
#include "acx/types.h"
#include "collectives/coll.h"
#include "io/ckpt_format.h"

typedef enum acx_ckpt_attr_type {
    ACX_CKPT_I64 = 0,
    ACX_CKPT_F64 = 1,
    ACX_CKPT_STR = 2
} acx_ckpt_attr_type_t;

/* A scalar attribute on a group ("/" or "/optimizer", created if needed). */
typedef struct acx_ckpt_attr {
    const char *object;
    const char *name;
    acx_ckpt_attr_type_t type;
    int64_t i64;
    double f64;
    const char *str;
} acx_ckpt_attr_t;

/* One dataset, e.g. "/model/fc1.weight" (groups created as needed).
 * The local buffer holds rows [buf_row0, buf_row0 + buf_rows) of the global
 * tensor, row-major (a row = prod(shape[1..]) elements); this rank writes
 * (save) or reads (load) rows [io_begin, io_end), which must lie inside the
 * buffer's rows (an empty range is fine: the rank takes part with an empty
 * selection). Datasets are identical on every rank except for buf/io rows.
 * On save the ranks' io rows must tile [0, shape[0]): every row written by
 * exactly one rank (a tensor every rank holds is split, as under NO_SHARD,
 * or written by one); the checksums are joined from the ranks' pieces. On
 * load any ranks may read any rows, overlapping or not.
 *
 * `share` (load only; NULL: none) spreads the reading of rows that several
 * ranks hold (replicas: the whole world under NO_SHARD, the nodes under
 * HYBRID_SHARD): each rank of `share` reads and verifies only its io rows,
 * and once every tensor is read and verified on every rank the group
 * all-gathers them, so each member ends with the union of the group's io
 * rows in its buffer. The members must pass the same buffer rows and
 * disjoint io rows, in the group's rank order, whose union is one range
 * (the dim-0 rule over the replicas, acx_param_save_rows, gives that);
 * acx_ckpt_read checks it. */
typedef struct acx_ckpt_tensor {
    const char *path;
    acx_dtype_t dtype;
    int ndim;
    int64_t shape[ACX_MAX_DIMS];
    void *buf;
    int64_t buf_row0, buf_rows;
    int64_t io_begin, io_end;
    acx_comm_t *share;
    /* Save only: a row source instead of `buf` (NULL: none). When set, the
     * writer asks for this rank's io rows piece by piece (about 1 MiB of
     * whole rows each) into its own scratch, right before each piece's
     * CRC and write, so a tensor need not be in memory whole (acx ckpt
     * export writes a weights file from a checkpoint this way). fill
     * writes rows [row0, row0 + nrows) to dst, row-major in `dtype`, and
     * returns ACX_OK or the failure that ends the save. */
    acx_status_t (*fill)(void *ctx, int64_t row0, int64_t nrows, void *dst);
    void *fill_ctx;
} acx_ckpt_tensor_t;

/* Write a checkpoint to `path`: create path's temporary sibling with the
 * MPI-IO driver, collective metadata and transfers; write every attribute
 * (each rank passes the same list) and every tensor's io rows; checksum
 * every dataset (CRC-32 blocks: each rank its rows, joined by one
 * all-reduce); close, fsync, rename to `path`, fsync the directory.
 * Collective over world; every rank returns the same status. world NULL:
 * this process alone writes the file (sec2 driver, no communication). A
 * failure removes the temporary file and never touches an existing `path`.
 * ACX_ERR_INVALID_ARG when a tensor's io rows do not tile it (above). */
acx_status_t acx_ckpt_save(acx_comm_t *world, const char *path, const acx_ckpt_tensor_t *tensors,
                           int num_tensors, const acx_ckpt_attr_t *attrs, int num_attrs);

/* How acx_ckpt_save_opts writes a file other than a checkpoint. */
typedef struct acx_ckpt_save_opts {
    /* 1: no CRC-32 attributes (a weights file, io/ckpt_format.h, whose
     * layout has none); the rest — temporary file, collective metadata,
     * independent row writes, fsync, rename, agreed statuses — is the same */
    int no_checksums;
} acx_ckpt_save_opts_t;

/* acx_ckpt_save with options (NULL: a checkpoint's defaults). */
acx_status_t acx_ckpt_save_opts(acx_comm_t *world, const char *path,
                                const acx_ckpt_tensor_t *tensors, int num_tensors,
                                const acx_ckpt_attr_t *attrs, int num_attrs,
                                const acx_ckpt_save_opts_t *opts);

/* Write a weights-only file (io/ckpt_format.h's weights layout) to `path`:
 * the root attributes format "acx-weights", step and, when source is not
 * NULL, source (the checkpoint it was exported from), then the tensors
 * (their paths "/<param name>"), without checksums; the rest as
 * acx_ckpt_save (collective over world, or world NULL for this process
 * alone; every rank returns the same status). The one writer of a weights
 * file's attributes, for acx_model_save_weights (io/weights.c) and
 * `acx ckpt export --format hdf5` (io/ckpt_tools.c). */
acx_status_t acx_weights_write(acx_comm_t *world, const char *path,
                               const acx_ckpt_tensor_t *tensors, int num_tensors, int64_t step,
                               const char *source);

typedef struct acx_ckpt_file acx_ckpt_file_t;

/* Open a checkpoint for reading (collective over world; MPI-IO driver).
 * Checks the format name and that format_version <= ACX_CKPT_FORMAT_VERSION.
 * Errors: ACX_ERR_IO (missing), ACX_ERR_FORMAT (not HDF5, not an acx
 * checkpoint, newer version: the messages say which), ACX_ERR_HDF5. */
acx_status_t acx_ckpt_open(acx_comm_t *world, const char *path, acx_ckpt_file_t **file_p);

/* acx_ckpt_open_flags: a single process (world NULL) inspecting a file, as
 * `acx ckpt info | verify | export` do (io/ckpt_tools.c): every byte of
 * metadata is read at open, so damage anywhere in it is found before
 * anything is interpreted; a newer format_version is opened (the caller
 * decides what to do with it: acx_ckpt_version); data without a checksum
 * is refused or warned about in the tools' words (stderr). */
#define ACX_CKPT_OPEN_INSPECT 1u

/* acx_ckpt_open_flags: an acx weights file (root format "acx-weights",
 * io/ckpt_format.h) is opened too, as well as a checkpoint; acx_ckpt_version
 * then reads 0. A weights file's layout has no checksums, so its datasets
 * are read without them (no refusal, no warning). For
 * acx_model_load_weights (io/weights_load.c). */
#define ACX_CKPT_OPEN_WEIGHTS 2u

/* acx_ckpt_open with flags (0, or ACX_CKPT_OPEN_INSPECT, which needs world
 * NULL, and/or ACX_CKPT_OPEN_WEIGHTS). Errors as acx_ckpt_open. */
acx_status_t acx_ckpt_open_flags(acx_comm_t *world, const char *path, unsigned flags,
                                 acx_ckpt_file_t **file_p);
void acx_ckpt_close(acx_ckpt_file_t *f);

/* The open file's format_version (0: a weights file, opened with
 * ACX_CKPT_OPEN_WEIGHTS) and path (as given to the open). */
int64_t acx_ckpt_version(const acx_ckpt_file_t *f);
const char *acx_ckpt_path(const acx_ckpt_file_t *f);

/* Attribute `name` of `object`; ACX_ERR_FORMAT naming both if absent or of
 * another type. str: copied into buf[n]. */
acx_status_t acx_ckpt_get_i64(acx_ckpt_file_t *f, const char *object, const char *name,
                              int64_t *v_p);
acx_status_t acx_ckpt_get_f64(acx_ckpt_file_t *f, const char *object, const char *name,
                              double *v_p);
acx_status_t acx_ckpt_get_str(acx_ckpt_file_t *f, const char *object, const char *name, char *buf,
                              size_t n);
/* Whether a group or dataset exists. 0 also when HDF5 cannot tell because
 * the file is damaged: acx_ckpt_damage then says so. */
int acx_ckpt_exists(acx_ckpt_file_t *f, const char *path);

/* Damage. Any call that finds the file damaged (an HDF5 metadata checksum,
 * a structure that does not decode, a dataset whose storage cannot hold
 * its shape or that was never written, a CRC-32 mismatch) returns
 * ACX_ERR_FORMAT "... is damaged: ..." naming the object (and its object
 * header's byte offset when known), and so does every later call on f:
 * after a metadata checksum failure HDF5's cache shows the object without
 * the damaged part, so later answers would be wrong, not absent. A caller
 * that turns failed queries into "mismatch" or "absent" asks this first:
 * ACX_OK, or the damage (recorded again as the last error). */
acx_status_t acx_ckpt_damage(const acx_ckpt_file_t *f);

/* Allow datasets whose data carries no checksum (no CRC-32 attributes and
 * no Fletcher-32 filter) to be read: acx_ckpt_read and acx_ckpt_get_str
 * then read them with a loud warning instead of ACX_ERR_FORMAT. Off by
 * default (config checkpoint.allow_unverified). */
void acx_ckpt_allow_unverified(acx_ckpt_file_t *f, int allow);

/* Shape and dtype of a dataset; ACX_ERR_FORMAT naming it if absent. The
 * dataset is checked first (io/h5.h acx_h5_check_dataset): a dataset that
 * needs a filter plugin, is virtual or external, was never written, or
 * whose storage cannot hold its shape is refused here, so a caller may
 * size an allocation by the shape returned (it is at most the file's size
 * in bytes). */
acx_status_t acx_ckpt_shape(acx_ckpt_file_t *f, const char *path, int *ndim_p, int64_t *shape,
                            acx_dtype_t *dtype_p);

/* A dataset's storage as the file holds it, for callers that must bound
 * what they allocate by what the file really holds (e.g. one row per rank
 * of the saving world) without refusing yet: `bytes` its shape's size,
 * `stored` the bytes the file stores for it (H5Dget_storage_size; 0 when
 * never written), `written`, and `file_bytes` the whole file's size. Only
 * plugin, virtual and external datasets are refused (ACX_ERR_NOT_SUPPORTED
 * / ACX_ERR_FORMAT); absent: ACX_ERR_FORMAT. Not collective. */
typedef struct acx_ckpt_storage {
    uint64_t bytes, stored, file_bytes;
    int written;
} acx_ckpt_storage_t;
acx_status_t acx_ckpt_storage(acx_ckpt_file_t *f, const char *path, acx_ckpt_storage_t *st_p);

/* Read the io rows of each tensor (shape and dtype must match the file's:
 * ACX_ERR_FORMAT naming the dataset, the file's and the expected shape).
 * Every rank verifies the checksums of what it read (version 2: the CRC-32
 * blocks its rows touch, reading the blocks' edges beyond its rows;
 * version 1: HDF5's Fletcher-32). A mismatch is ACX_ERR_FORMAT naming the
 * dataset and the byte range, on every rank. Then the tensors with a
 * `share` group are all-gathered in it (see acx_ckpt_tensor_t): what a
 * rank receives was verified by the rank that read it. Collective over
 * world (every rank passes the same datasets in the same order, with the
 * same share groups); every rank returns the same status. */
acx_status_t acx_ckpt_read(acx_ckpt_file_t *f, const acx_ckpt_tensor_t *tensors, int num_tensors);

/* Names of the datasets under a group (e.g. "/model"), in creation order;
 * *names_p is one malloc'd block (free it with free()). */
acx_status_t acx_ckpt_list(acx_ckpt_file_t *f, const char *group, int *count_p, char ***names_p);

/* ---- whole-file passes for one process (io/ckpt_scan.c) ---- */

/* The paths of every dataset under `group`, recursively ("/model/fc1.weight"),
 * in creation order when every group below tracks it (acx's files: the
 * writer's order), else by name. *names_p is one malloc'd block (free it
 * with free()). Not collective. */
acx_status_t acx_ckpt_list_all(acx_ckpt_file_t *f, const char *group, int *count_p,
                               char ***names_p);

/* Read dataset `path` completely, in blocks of rows of at most 32 MiB, in
 * the file's own type, checking every CRC-32 block as it passes (version
 * 2) or letting HDF5 check its Fletcher-32 chunks (version 1); strings and
 * other variable-length data are read once. A mismatch or an unreadable
 * dataset is ACX_ERR_FORMAT "dataset <path> of '<file>' is damaged: ...".
 * Data without a checksum: see acx_ckpt_allow_unverified. Not collective. */
acx_status_t acx_ckpt_verify_dataset(acx_ckpt_file_t *f, const char *path);

/* Rows [row0, row0 + nrows) of a floating-point dataset as float32 into
 * buf (nrows x the row's elements). A float32 dataset is read as a load
 * reads it: every byte checked against the CRC-32 blocks the rows touch.
 * Another float type is converted by HDF5 and not checked here (the
 * checksums cover the stored bytes): verify it first
 * (acx_ckpt_verify_dataset). Not collective. */
acx_status_t acx_ckpt_read_rows_f32(acx_ckpt_file_t *f, const char *path, int64_t row0,
                                    int64_t nrows, float *buf);

/* One float dataset of a model file: its name below the parameters' group
 * ("fc1.weight"), its elements and its rows (dim 0; a scalar is one row of
 * one element). */
typedef struct acx_ckpt_param_shape {
    char *name;
    int64_t numel, rows;
} acx_ckpt_param_shape_t;

/* The float datasets of an acx checkpoint (under /model) or weights file
 * (the whole file), by name, recursively: *shapes_p (free with
 * acx_ckpt_param_shapes_free), *count_p >= 1, *kind_p "acx checkpoint" or
 * "acx weights file" (static). Only the shapes are read, not the data.
 * The root `format` is read as the reader's open reads it
 * (acx_ckpt_format_name); no format_version is asked for (a weights file,
 * or a model file written with h5py, has none).
 * Errors: ACX_ERR_IO (not an HDF5 file: "cannot open '<path>' as an HDF5
 * file"), ACX_ERR_FORMAT (no or another root `format`, no parameters
 * group, no float dataset), ACX_ERR_NO_MEMORY. One process; not
 * collective. */
acx_status_t acx_ckpt_param_shapes(const char *path, acx_ckpt_param_shape_t **shapes_p,
                                   int *count_p, const char **kind_p);
void acx_ckpt_param_shapes_free(acx_ckpt_param_shape_t *shapes, int count);

/* ---- the scalar state (io/ckpt_state.c) ---- */

/* The attributes of a save of state `s` (io/ckpt_format.h's layout, in the
 * order the writer creates them), for acx_ckpt_save. *attrs_p is one
 * malloc'd array (free it with free()) whose strings point into `s` (and
 * to s->config_yaml and s->hparam_names): keep `s` until the save returns.
 * Not collective; ACX_ERR_NO_MEMORY. */
acx_status_t acx_ckpt_state_attrs(const acx_ckpt_state_t *s, acx_ckpt_attr_t **attrs_p, int *num_p);

/* Read the scalar state of an open checkpoint into *s (zeroed first), each
 * value range-checked before it is stored: the checks a load makes and
 * `acx ckpt verify` repeats (io/ckpt_state.c lists them). Required: the
 * root's step and world_size; /optimizer's step and lr when it has a
 * type; /scheduler's base_lr, step, warmup_steps, total_steps when its
 * kind is not "none"; /scaler's scale and counters when its kind is
 * "dynamic"; /dataloader's epoch, seed, global_batch, num_batches and
 * position when the group exists; /optimizer's parameter groups when it
 * has their count (acx_ckpt_read_param_groups; free them with
 * acx_ckpt_state_free, also done here on failure). A missing required attribute is the
 * reader's ACX_ERR_FORMAT naming it; a value out of range is
 * ACX_ERR_FORMAT "checkpoint '<file>': <object>/<name> = <value> is out of
 * range: expected <range> (damaged or edited?)". Not collective (any rank
 * may ask; a load has every rank ask). */
acx_status_t acx_ckpt_state_read(acx_ckpt_file_t *f, acx_ckpt_state_t *s);

/* The parameter groups of /optimizer (io/ckpt_format.h), each value
 * checked: a count in 0..ACX_CKPT_MAX_PARAM_GROUPS, non-empty names
 * shorter than ACX_CKPT_GROUP_NAME_MAX, unique group names, weight_decay
 * finite >= 0, lr_scale in (0, ACX_OPTIM_LR_SCALE_MAX], num_params >= 1
 * (the members are read one by one: a count larger than the file's
 * attributes fails at the first missing one). *has_p 0 (and no groups)
 * when the file has no count. Refusals: ACX_ERR_FORMAT naming the file and
 * the attribute, "(damaged or edited?)". Not collective. */
acx_status_t acx_ckpt_read_param_groups(acx_ckpt_file_t *f, int *has_p, int *num_p,
                                        acx_ckpt_param_group_t **groups_p);
void acx_ckpt_free_param_groups(acx_ckpt_param_group_t *groups, int num);

/* Free what acx_ckpt_state_read allocated in s (its parameter groups). */
void acx_ckpt_state_free(acx_ckpt_state_t *s);

/* The /dataloader fields of s checked against each other for a data set of
 * `num_samples` samples: global_batch in 1..2^53/num_samples, num_batches
 * that of num_samples in global_batch (with or without drop_last),
 * position in 0..num_batches, samples_consumed (when present) = position x
 * global_batch. acx_ckpt_state_read runs it with the file's num_samples; a
 * load of a file without one runs it with the program's. `file` names the
 * checkpoint in messages. */
acx_status_t acx_ckpt_state_check_loader(const char *file, const acx_ckpt_state_t *s,
                                         int64_t num_samples);

#endif /* ACX_IO_CHECKPOINT_H */

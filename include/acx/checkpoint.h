/*
 * acx/checkpoint.h — saving and loading the whole training state, and the
 * per-rank random streams that are part of it.
 *
 * A checkpoint is one HDF5 file written collectively by all ranks (parallel
 * HDF5, MPI-IO), laid out as docs/checkpoint-format.md describes: the model's
 * parameters with their true shapes, optimizer state, schedule, data-loader
 * position, per-rank random streams, the resolved config, and the program's
 * registered state. Any world size can load what any other world size saved.
 * A save goes to a temporary file that is fsynced and renamed into place, so
 * a crash at any moment leaves the previous checkpoint intact.
 */
#ifndef ACX_CHECKPOINT_H
#define ACX_CHECKPOINT_H

#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Save the state of the prepared model, optimizer (and its schedule), loader,
 * random streams, config and registered objects to `path`; with path NULL, to
 * <project_dir>/checkpoints/step_<8-digit step>.h5, then point
 * <project_dir>/checkpoints/latest at it and delete the oldest checkpoints
 * beyond checkpoint.total_limit (only once the new one is complete).
 * Each rank writes only its own rows. Collective. Call between optimizer
 * steps (not inside a micro-step with gradients pending).
 * Errors: ACX_ERR_STATE (not prepared, or inside a micro-step), ACX_ERR_HDF5,
 * ACX_ERR_IO (directory missing or not writable; the previous checkpoint is
 * untouched), ACX_ERR_SYSTEM. Every rank returns the same status. */
ACX_API acx_status_t acx_save_state(acx_accelerator_t *acc, const char *path);

/* Load a checkpoint into the prepared objects. path: a file, a directory
 * holding a `latest` file, or NULL / "latest" for <project_dir>/checkpoints.
 * Each rank reads exactly the rows it needs. strict != 0: every parameter,
 * optimizer state and registered object must be present with the same shape
 * and dtype (the first mismatch is the error); strict == 0: loads what
 * matches and logs the rest (warning). Random streams of ranks that did not
 * exist at save time are derived from (seed, rank) and the log says so.
 * Collective. Errors: ACX_ERR_IO (missing file), ACX_ERR_FORMAT (not an acx
 * checkpoint, unsupported format version, shape/name/dtype mismatch, a
 * checksum failure — naming the dataset), ACX_ERR_HDF5, ACX_ERR_STATE. */
ACX_API acx_status_t acx_load_state(acx_accelerator_t *acc, const char *path, int strict);

/* Register program state to save and load with everything else: `count`
 * elements of `dtype` at `data` (a scalar is count 1), identical on every
 * rank (saved from rank 0, loaded on all). `data` must stay valid until
 * acx_finalize; it is read at save and overwritten at load. name: unique,
 * [A-Za-z0-9_.-], < 128 bytes. Not collective, but every rank registers the
 * same objects. Errors: ACX_ERR_INVALID_ARG (bad or duplicate name, count < 1). */
ACX_API acx_status_t acx_register_for_checkpointing(acx_accelerator_t *acc, const char *name,
                                                    acx_dtype_t dtype, void *data, int64_t count);

/* ---- per-rank random streams ---- */

/* Draw from this rank's random stream: Philox-4x32-10 addressed by (seed,
 * rank, counter); the counter is checkpoint state, so a resumed run draws the
 * same numbers as an uninterrupted one. Not collective; not thread-safe. */
ACX_API uint64_t acx_random_u64(acx_accelerator_t *acc);
/* Uniform double in (0, 1) from the same stream. */
ACX_API double acx_random_uniform(acx_accelerator_t *acc);

/* ---- inspection and export (single process; no MPI needed) ---- */

/* Human-readable summary of a checkpoint file: step, epoch, world size and
 * strategy at save, format version, parameter count, bytes, every dataset
 * with its shape and dtype. *text_p is malloc'd; free it with free().
 * Errors: ACX_ERR_IO, ACX_ERR_FORMAT, ACX_ERR_HDF5. */
ACX_API acx_status_t acx_checkpoint_info(const char *path, char **text_p);

/* Read every dataset, verifying its checksum. On failure the message names
 * the first bad dataset. Errors: ACX_ERR_FORMAT (checksum, structure),
 * ACX_ERR_IO, ACX_ERR_HDF5. */
ACX_API acx_status_t acx_checkpoint_verify(const char *path);

/* acx_checkpoint_verify with options. ACX_VERIFY_ALLOW_UNVERIFIED: a
 * dataset without any checksum (no CRC-32 attributes, no Fletcher-32
 * filter) is read with a warning on stderr instead of failing (its damage
 * cannot be detected). */
#define ACX_VERIFY_ALLOW_UNVERIFIED 1u
ACX_API acx_status_t acx_checkpoint_verify_flags(const char *path, unsigned flags);

typedef enum acx_export_format {
    ACX_EXPORT_SAFETENSORS = 0, /* consolidated fp32 weights, safetensors layout */
    ACX_EXPORT_HDF5 = 1         /* weights only, one dataset per parameter */
} acx_export_format_t;

/* Write the model's parameters from checkpoint `path` to `out_path`
 * (temporary name, then rename). Errors: as acx_checkpoint_verify, plus
 * ACX_ERR_IO for the output. */
ACX_API acx_status_t acx_checkpoint_export(const char *path, const char *out_path,
                                           acx_export_format_t format);

#ifdef __cplusplus
}
#endif
#endif /* ACX_CHECKPOINT_H */

/*
 * io/loader.h — the data loader's constructor (library-private); the rest
 * of its interface is public (acx/data.h). The runtime resolves the options
 * against the config and passes the world communicator, so io never needs
 * the accelerator.
 */
#ifndef ACX_IO_LOADER_H
#define ACX_IO_LOADER_H

#include "acx/data.h"
#include "collectives/coll.h"

/* opts: fully resolved (no ACX_UNSET fields). Collective over world (status
 * agreed with acx_coll_agree). */
acx_status_t acx_loader_open(acx_comm_t *world, uint64_t seed, const char *path, int num_datasets,
                             const char *const *dataset_names, const acx_dataloader_options_t *opts,
                             acx_dataloader_t **loader_p);

/* A token-stream loader over the 1-D uint16/int32 dataset `dataset`
 * (acx_token_loader_open in acx/data.h): windows of seq_len + 1 tokens are
 * its samples, sharded by the same sampler. opts resolved as above.
 * Collective over world. */
acx_status_t acx_loader_open_tokens(acx_comm_t *world, uint64_t seed, const char *path,
                                    const char *dataset, int64_t seq_len,
                                    const acx_dataloader_options_t *opts,
                                    acx_dataloader_t **loader_p);

/* Stop the prefetch thread and release the file and buffers; the object
 * itself stays valid (every call but free then fails with ACX_ERR_STATE).
 * Idempotent. The public acx_dataloader_close (runtime/) calls this. */
acx_status_t acx_loader_close(acx_dataloader_t *loader);

/* Close (if still open) and free the object. Called by acx_finalize for every
 * loader the accelerator owns. NULL is a no-op. */
void acx_loader_free(acx_dataloader_t *loader);

/* ---- checkpoint state (runtime/checkpoint.c) ---- */

/* Stand at batch `batch_index` of `epoch`, as if batch_index batches of that
 * epoch had been returned: the next acx_dataloader_next returns batch
 * batch_index, or the end of the epoch (a NULL batch) when batch_index == num_batches (the
 * position between the epoch's last batch and its end). Not collective.
 * Errors: ACX_ERR_INVALID_ARG (epoch < 0, batch_index outside
 * [0, num_batches]), ACX_ERR_STATE (closed). */
acx_status_t acx_loader_set_position(acx_dataloader_t *loader, int64_t epoch, int64_t batch_index);

/* Stand in `epoch` after `samples` stream positions of it were consumed
 * (by any global batch): the epoch's remaining batches serve exactly the
 * positions [samples, N), so a token loader resumes under a global batch
 * that does not divide the samples consumed without repeating or skipping
 * a window. num_batches counts the remaining batches until the epoch ends;
 * the next epoch is whole again. Not collective. Errors: ACX_ERR_INVALID_ARG,
 * ACX_ERR_STATE (closed). */
acx_status_t acx_loader_set_position_samples(acx_dataloader_t *loader, int64_t epoch,
                                             int64_t samples);

/* Stream positions of the current epoch consumed: start + position x global
 * batch; and start alone (0 unless set_position_samples made the epoch
 * begin inside a global batch). */
int64_t acx_loader_samples_consumed(const acx_dataloader_t *loader);
int64_t acx_loader_start(const acx_dataloader_t *loader);

/* Is it a token-stream loader (acx_loader_open_tokens)? NULL: 0. */
int acx_loader_is_tokens(const acx_dataloader_t *loader);

/* Samples per global batch (per-rank batch x world size) and the seed of
 * the shuffle: with the epoch and position, what fixes the data order. */
int64_t acx_loader_global_batch(const acx_dataloader_t *loader);
uint64_t acx_loader_seed(const acx_dataloader_t *loader);

/* The loader became the training loader (acx_prepare): with its cycle
 * option -1 it cycles epochs exactly when step_mode (max_steps > 0). */
void acx_loader_set_training(acx_dataloader_t *loader, int step_mode);

/* Does the loader cycle (the end of an epoch is no NULL batch and, for the
 * training loader, no synchronization boundary)? NULL: 0. */
int acx_loader_cycles(const acx_dataloader_t *loader);

#endif /* ACX_IO_LOADER_H */

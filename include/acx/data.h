/*
 * acx/data.h — the distributed data loader over HDF5 datasets, and dataset
 * import.
 *
 * A loader reads one or more HDF5 datasets in lockstep (e.g. /train/images
 * [N x 28 x 28] uint8 and /train/labels [N] uint8): dimension 0 is the sample
 * index and must be the same for all. Sampling follows PyTorch's
 * DistributedSampler and Accelerate's BatchSamplerShard:
 *
 *   - each epoch, every rank computes the same permutation of 0..N-1 from
 *     (seed, epoch) (identity when shuffle is off);
 *   - the permutation is cut into global batches of B = batch_size x world
 *     size (or B = batch_size with split_batches); rank r takes the r-th
 *     contiguous slice of each global batch, so shares are disjoint;
 *   - a last, incomplete global batch is dropped (drop_last), or — with
 *     even_batches — completed by wrapping around to the start of the
 *     permutation, so every rank runs the same number of full batches; the
 *     added samples are marked as padding (acx_batch_t.num_padding, always at
 *     the end of a rank's batch), which acx_gather_for_metrics removes;
 *     without even_batches ranks get what is left (possibly nothing).
 *
 * Reads are hyperslab selections of just the needed rows; with prefetch > 0
 * a background thread reads the next batches while the program computes.
 * The loader makes no MPI calls from that thread.
 */
#ifndef ACX_DATA_H
#define ACX_DATA_H

#include "acx/status.h"
#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACX_MAX_TENSORS 8

typedef struct acx_dataloader_options {
    int64_t batch_size; /* per rank; the global batch with split_batches. >= 1 */
    int shuffle;        /* 0/1 (default 1) */
    /* ACX_UNSET: take the accelerator's resolved dataloader.* config. */
    int drop_last, even_batches, split_batches, prefetch;
    /* 1: cycle epochs — at the end of an epoch acx_dataloader_next goes on
     * with the next epoch's first batch instead of a NULL batch (step-based
     * loops). 0: stop at each epoch's end. -1 (the default): the loader given
     * to acx_prepare cycles exactly when the config's max_steps > 0, any
     * other loader does not. */
    int cycle;
} acx_dataloader_options_t;

#define ACX_DATALOADER_OPTIONS_DEFAULT                                                             \
    ((acx_dataloader_options_t){.batch_size = 1,                                                   \
                                .shuffle = 1,                                                      \
                                .drop_last = -1,                                                   \
                                .even_batches = -1,                                                \
                                .split_batches = -1,                                               \
                                .prefetch = -1,                                                    \
                                .cycle = -1})

/* One rank's batch. Owned by the loader; valid until the next
 * acx_dataloader_next or acx_dataloader_close. */
typedef struct acx_batch {
    int64_t size;           /* samples in this batch on this rank (may be 0 without even_batches) */
    int64_t num_padding;    /* trailing samples that repeat earlier ones (even_batches) */
    const int64_t *indices; /* [size] dataset row of each sample */
    int num_tensors;
    /* tensors[i]: [size x sample_numel(i)] of dtype(i), row-major, sample-major */
    const void *tensors[ACX_MAX_TENSORS];
    acx_dtype_t dtypes[ACX_MAX_TENSORS];
    int64_t sample_numel[ACX_MAX_TENSORS]; /* elements per sample (product of dims 1..) */
    int64_t epoch;                         /* epoch this batch belongs to */
    int64_t index;                         /* batch index within the epoch, from 0 */
    int is_last;                           /* nonzero for the epoch's last batch on this rank */
} acx_batch_t;

/* Open `path` and the datasets dataset_names[0..num_datasets-1] (absolute
 * HDF5 paths) for distributed loading. Supported element types: the integer
 * and float types of acx_dtype_t (native byte order after reading).
 * Collective: every rank must call it with the same arguments; if any rank
 * fails, all return the same error, naming the failing rank, the file, the
 * dataset and what was expected. The loader is owned by acc.
 * Errors: ACX_ERR_IO (missing file/dataset), ACX_ERR_FORMAT (first
 * dimensions differ, unsupported dtype, batch larger than the data),
 * ACX_ERR_INVALID_ARG, ACX_ERR_HDF5, ACX_ERR_REMOTE (another rank failed). */
ACX_API acx_status_t acx_dataloader_open(acx_accelerator_t *acc, const char *path, int num_datasets,
                                         const char *const *dataset_names,
                                         const acx_dataloader_options_t *opts,
                                         acx_dataloader_t **loader_p);

/* A token-stream loader (language-model pre-training). `dataset` is a 1-D
 * uint16 or int32 array of N token ids (as `acx data import-text` writes:
 * /train/tokens, /val/tokens). With T = seq_len, window w is the T + 1
 * tokens tokens[w*T .. w*T+T]; there are (N - 1) / T windows (a trailing
 * remainder shorter than a window is not used), and they are the loader's
 * samples: shuffled per epoch from (seed, epoch) or in order (shuffle 0),
 * sharded over ranks, batched, padded or dropped exactly like the rows of
 * acx_dataloader_open. A batch of `size` windows holds
 *
 *     tensors[0] inputs  [size x T] int32 = tokens[w*T   .. w*T+T-1]
 *     tensors[1] targets [size x T] int32 = tokens[w*T+1 .. w*T+T]
 *
 * (targets are the inputs shifted by one inside the same window, so every
 * position's label is the token that follows it in the stream), and
 * indices[i] = window i's index w. Each window is one hyperslab read of its
 * T + 1 tokens. Every token id is checked once, at the open, all ranks
 * together (each reads its 1/world slice of the dataset, in chunks of
 * 1 Mi tokens): a negative id, or one >= the dataset's vocab_size
 * attribute when it has one, makes the open fail on every rank with the
 * same ACX_ERR_FORMAT naming the file, dataset, token position and value
 * (the lowest bad position), so no rank fails alone later in
 * acx_dataloader_next.
 * acx_dataloader_next/set_epoch/position/epoch/num_batches/close work as for
 * any loader, and checkpoints save and restore its position the same way;
 * resumed under another world size or batch size, the rest of the epoch is
 * exactly the windows not yet consumed, also when their count is not a
 * whole number of the new global batches (the epoch's remaining batches
 * then start inside a global batch, and num_batches counts them; the next
 * epoch is whole). Collective, like acx_dataloader_open.
 * Errors: ACX_ERR_IO (missing file/dataset), ACX_ERR_FORMAT (not 1-D
 * uint16/int32, seq_len >= the number of tokens (no window of T + 1), a bad
 * vocab_size attribute, a bad token id, batch larger than the windows),
 * ACX_ERR_INVALID_ARG (seq_len < 1, options), ACX_ERR_HDF5, ACX_ERR_REMOTE. */
ACX_API acx_status_t acx_token_loader_open(acx_accelerator_t *acc, const char *path,
                                           const char *dataset, int64_t seq_len,
                                           const acx_dataloader_options_t *opts,
                                           acx_dataloader_t **loader_p);

/* Next batch of the current epoch into *batch_p (valid until the next call
 * on this loader). Once the epoch is exhausted, *batch_p = NULL with ACX_OK
 * — the end of an epoch is not an error, so ACX_TRY may wrap the call:
 *
 *     for (;;) {
 *         const acx_batch_t *b;
 *         ACX_TRY(acx_dataloader_next(loader, &b));
 *         if (b == NULL) break;                       end of the epoch
 *         ...
 *     }
 *
 * The following call starts the next epoch (or set it with
 * acx_dataloader_set_epoch). A cycling loader (option cycle, or the training
 * loader with max_steps > 0) never gives NULL: after an epoch's last batch
 * (is_last) comes the next epoch's first, so a step-based loop is
 *
 *     while (acx_step(acc) < max_steps) {
 *         ACX_TRY(acx_dataloader_next(loader, &b));    never NULL here
 *         ACX_TRY(acx_accumulate_begin(acc)); ... ACX_TRY(acx_accumulate_end(acc));
 *     }
 *
 * Not collective.
 * Errors: ACX_ERR_HDF5/ACX_ERR_IO from the read; ACX_ERR_FORMAT "... is damaged: ..."
 * when HDF5 finds the file damaged (a Fletcher-32 or metadata checksum). */
ACX_API acx_status_t acx_dataloader_next(acx_dataloader_t *loader, const acx_batch_t **batch_p);

/* Restart at the beginning of `epoch` (its permutation depends on seed and
 * epoch only). */
ACX_API acx_status_t acx_dataloader_set_epoch(acx_dataloader_t *loader, int64_t epoch);

/* Samples in the dataset; batches per epoch on this rank; the current epoch;
 * batches consumed in the current epoch (the state a checkpoint saves). */
ACX_API int64_t acx_dataloader_num_samples(const acx_dataloader_t *loader);
ACX_API int64_t acx_dataloader_num_batches(const acx_dataloader_t *loader);
ACX_API int64_t acx_dataloader_epoch(const acx_dataloader_t *loader);
ACX_API int64_t acx_dataloader_position(const acx_dataloader_t *loader);

/* The vocabulary of a token loader's dataset, to check it against a model's
 * embedding table: its vocab_size attribute when it has one, else the
 * largest token id in the whole dataset + 1 (found by the open's id scan,
 * agreed over ranks with a MAX, so the same on every rank). Every id the
 * loader hands out is in [0, this). -1 for a sample loader
 * (acx_dataloader_open) or NULL. Not collective. */
ACX_API int64_t acx_dataloader_vocab_size(const acx_dataloader_t *loader);

/* Shape of dataset i (dims 1.. are a sample's shape): writes up to max_dims
 * dims into dims and returns the rank of the dataset, or -1 if i is invalid. */
ACX_API int acx_dataloader_dataset_shape(const acx_dataloader_t *loader, int i, int max_dims,
                                         int64_t *dims);

/* Element type (acx_dtype_t) of dataset i as it is read, or -1 if i is invalid. */
ACX_API int acx_dataloader_dataset_dtype(const acx_dataloader_t *loader, int i);

/* Close the loader (stops the prefetch thread). Not collective. NULL is a no-op. */
ACX_API acx_status_t acx_dataloader_close(acx_dataloader_t *loader);

/* ---- import ---- */

/* Convert IDX files (the MNIST family format: magic 0x0000 08 <ndim>, then
 * ndim big-endian uint32 dims, then uint8 data; gzipped or not, detected from
 * the content) into an HDF5 file with /train/images [N x rows x cols] uint8,
 * /train/labels [N] uint8 and /test/images, /test/labels. Any path may be
 * NULL to skip it. Validates magic, dtype, dims against the file size and
 * that images and labels agree in N. Written to out_path + ".tmp",
 * fsynced, renamed, the directory fsynced. Not collective (single process). Errors: ACX_ERR_IO
 * (missing or truncated file), ACX_ERR_FORMAT (bad magic, dims, N mismatch), ACX_ERR_ZLIB,
 * ACX_ERR_HDF5. */
ACX_API acx_status_t acx_import_idx(const char *train_images, const char *train_labels,
                                    const char *test_images, const char *test_labels,
                                    const char *out_path);

/* What acx_import_text reads and how it splits the stream. */
typedef struct acx_import_text_options {
    /* 0: the input is text, one token per byte (byte-level: vocab 256,
     * stored uint16), "-" = standard input. 1: the input is a token file
     * another tokenizer wrote: a raw little-endian array of `dtype`, or
     * llm.c's .bin format (a 256 x int32 header: magic 20240520, version 1 =
     * uint16 tokens, header[2] = token count), recognized by its magic. */
    int tokens;
    acx_dtype_t dtype;  /* tokens 1: ACX_DTYPE_UINT16 or ACX_DTYPE_INT32 (default uint16) */
    int64_t vocab_size; /* tokens 1: the tokenizer's vocabulary (0: the largest id + 1) */
    /* tokens 1: the file's layout: 0 auto (llm.c when the file starts with
     * its magic, else raw), 1 raw (never a header: a raw uint16 file may
     * start with the ids 54472, 308 = the magic's bytes), 2 llm.c (the
     * header must be there: a wrong magic is an error) */
    int format;
    double val_fraction; /* share of the stream held out, from its END (default 0.1) */
    int64_t val_tokens;  /* >= 0: hold out exactly this many tokens instead (default -1) */
} acx_import_text_options_t;

#define ACX_IMPORT_TEXT_OPTIONS_DEFAULT                                                            \
    ((acx_import_text_options_t){.tokens = 0,                                                      \
                                 .dtype = ACX_DTYPE_UINT16,                                        \
                                 .vocab_size = 0,                                                  \
                                 .format = 0,                                                      \
                                 .val_fraction = 0.1,                                              \
                                 .val_tokens = -1})

/* Write the token streams acx_token_loader_open reads: /train/tokens and,
 * unless the held-out share is 0, /val/tokens = the last V tokens of the
 * stream (V = round(N x val_fraction), or val_tokens), 1-D uint16 (bytes,
 * llm.c, raw uint16) or int32, each with attributes vocab_size (int64) and
 * tokenizer ("bytes" | "file"). Every id is checked against
 * [0, vocab_size). Written to out_path + ".tmp", fsynced, renamed, the
 * directory fsynced. Not collective. Errors: ACX_ERR_IO (missing or unreadable input),
 * ACX_ERR_FORMAT (a size that is not whole tokens, a bad llm.c header: magic
 * present but short, version not 1, a count past the end of the file or
 * short of it; an id out of range; fewer than 2 tokens in a set),
 * ACX_ERR_INVALID_ARG (options), ACX_ERR_HDF5; messages name the file. */
ACX_API acx_status_t acx_import_text(const char *in_path, const acx_import_text_options_t *opts,
                                     const char *out_path);

#ifdef __cplusplus
}
#endif
#endif /* ACX_DATA_H */

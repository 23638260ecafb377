/*
 * io/dataloader.c — the distributed data loader over HDF5 datasets: opening
 * and validating the file, reading a rank's batch as one hyperslab union per
 * dataset, and the prefetch thread. Defines struct acx_dataloader.
 *
 * Left to others: which rows a batch holds (io/sampler.c), resolving the
 * options against the config and owning the loader (runtime/accelerator.c:
 * acx_dataloader_open / acx_dataloader_close are thin wrappers around
 * acx_loader_open / acx_loader_close, and acx_finalize calls acx_loader_free).
 *
 * Opening. Every rank opens the file itself, read-only, with the default
 * (sec2) driver: reads need no MPI-IO, and a rank that reads only its own
 * rows never waits for the others. The whole open is agreed with
 * acx_coll_agree, so a missing file or dataset on any rank becomes the same
 * error on every rank and nobody is left waiting in a later collective.
 * A token loader's open also reads every token id once (scan_tokens: each
 * rank its 1/world slice, in chunks of 1 Mi tokens, under the HDF5 lock,
 * which a running loader's prefetch thread then waits for), so a bad id
 * fails the open on every rank instead of one rank's next() later.
 *
 * Batch sizes (the policy for "batch larger than the data"): with per-rank
 * batch b, world size W, global batch G = b*W and N samples,
 *   - b > N is always an error (ACX_ERR_FORMAT): one rank's batch would
 *     repeat samples of its own batch, which is never what a program means;
 *   - G > N with drop_last is an error: nothing would remain to train on;
 *   - G > N with even_batches is served: the one global batch is completed
 *     by wrapping around the permutation and marked as padding;
 *   - G > N with neither flag is served: the ranks whose slice lies past N
 *     get no batch at all this epoch (num_batches 0 for them).
 * With split_batches, batch_size is G and must be divisible by W
 * (ACX_ERR_INVALID_ARG); each rank then gets b = G / W.
 *
 * Reading a batch (one rank, one dataset of shape [N x d1 x ... ]):
 *   indices [size]  -> sort (row, batch position) by row
 *   unique rows     -> runs of consecutive rows, one hyperslab block each:
 *                      start {row0, 0, ..}, block {len, d1, ..}, SET then OR
 *   one H5Dread     -> staging [unique x row_bytes], in sorted row order
 *   scatter         -> tensors[i] [size x row_bytes] in batch order; a row
 *                      that appears twice (padding wrapping around) is read
 *                      once and copied twice.
 * When the batch is already sorted and free of duplicates (no shuffle), the
 * read goes straight into the batch buffer.
 *
 * Prefetch. With prefetch = P > 0 a background thread fills a ring of P + 1
 * batch slots: the program holds one (valid until its next call), the
 * thread fills up to P ahead. Slot states:
 *
 *     FREE --thread--> FILLING --thread--> READY --next()--> HELD --next()--> FREE
 *
 * Every restart (set_epoch, the end of an epoch, a read error) bumps a
 * generation number under the mutex; a slot the thread finishes for an old
 * generation is dropped, READY slots of old generations are freed, and the
 * HELD slot is left alone (the program may still read it). The thread makes
 * no MPI call; every HDF5 call it makes holds acx_h5_lock. A read error in
 * the thread travels in the slot (status + message) and next() returns it on
 * the main thread; the position does not advance, so the following next()
 * retries that batch. Without prefetch, next() reads synchronously into the
 * one slot.
 *
 * End of epoch: next() gives a NULL batch (ACX_OK) once, and the loader then
 * stands at (epoch + 1, position 0) with prefetch of that epoch already
 * running; the following next() returns its first batch.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acx/data.h"
#include "collectives/coll.h"
#include "io/h5.h"
#include "io/loader.h"
#include "io/sampler.h"
#include "base/error.h"
#include "base/log.h"

#define SIEVE_BYTES 4096      /* HDF5's data sieve window, bytes (see acx_dataloader_open) */
#define SCAN_TOKENS (1 << 20) /* tokens per read of the open-time id scan (4 MiB as int32) */

/* One dataset read in lockstep with the others. */
typedef struct {
    char *name;        /* HDF5 path, as given */
    hid_t dset, space; /* open dataset and its file dataspace */
    hid_t memtype;     /* native type for dtype (not closed) */
    acx_dtype_t dtype;
    int ndim;
    hsize_t dims[H5S_MAX_RANK]; /* dims[0] = N */
    int64_t sample_numel;       /* prod(dims[1..]) */
    size_t row_bytes;           /* sample_numel x dtype size */
} dataset_t;

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD } slot_state_t;

/* One batch buffer of the ring. */
typedef struct {
    slot_state_t state;
    uint64_t gen;         /* generation it was filled for */
    int64_t epoch, index; /* batch `index` of `epoch` */
    int64_t size, num_padding;
    int64_t *indices;               /* [batch_size] dataset rows */
    void *tensors[ACX_MAX_TENSORS]; /* [batch_size x row_bytes(i)] */
    acx_status_t status;            /* of the read */
    char message[ACX_ERRMSG_MAX];   /* the reader's last error when status != OK */
} slot_t;

/* A batch row: its dataset row and its position in the batch. */
typedef struct {
    int64_t row, pos;
} row_ref_t;

struct acx_dataloader {
    acx_comm_t *world; /* not owned */
    /* Token streams (acx_loader_open_tokens): ds[0] is the 1-D token array,
     * a "sample" is window w = tokens[w*T .. w*T+T], and the batch holds
     * two int32 tensors [size x T] (inputs, targets) cut from it. */
    int tokens;         /* 1: a token-stream loader */
    int64_t seq_len;    /* T */
    int64_t num_tokens; /* N, the length of the token array */
    int64_t vocab_size; /* the dataset's vocab_size attribute; 0 = none */
    /* the open-time id scan: the largest id in this rank's slice (-1: none),
     * then, agreed over ranks (MAX), the largest id in the whole dataset */
    int64_t max_id;
    int32_t *window_buf; /* reader scratch: [T + 1] */
    /* cycle: the end of an epoch goes on with the next epoch's first batch
     * instead of a NULL batch. cycle_opt is the option as given (-1: the
     * training loader follows max_steps, acx_loader_set_training). */
    int cycle_opt, cycle;
    char *path;
    hid_t file;
    int open; /* 0 after acx_loader_close */
    int num_datasets;
    dataset_t ds[ACX_MAX_TENSORS];
    int64_t num_samples;
    int64_t batch_size; /* per rank */
    int prefetch;

    /* The sampler's permutation is written by restarts and read when a
     * batch's rows are computed: both under `mu`. */
    acx_sampler_t sampler;
    int64_t num_batches;

    /* Reader scratch: used by exactly one thread (the prefetch thread if
     * there is one, else the caller of next()). */
    row_ref_t *refs; /* [batch_size] */
    hsize_t *runs;   /* [2 x batch_size]: start, length of each run of rows */
    void *staging;   /* [batch_size x max row_bytes] */

    int num_slots;
    slot_t *slots; /* [num_slots] */
    slot_t *held;  /* the slot the program's current batch lives in */

    /* Position. Written only by the main thread (next, set_epoch), under mu;
     * the thread reads gen/epoch/next_k under mu. */
    uint64_t gen;
    int64_t epoch;
    int64_t pos;    /* batches returned in this epoch */
    int64_t next_k; /* next batch the thread fills */
    int paused;     /* the thread stopped after a read error */
    int stop;       /* the thread must exit */

    pthread_mutex_t mu;
    pthread_cond_t cv_work;  /* thread waits: free slot, restart, stop */
    pthread_cond_t cv_ready; /* next() waits: a slot became READY */
    int sync_ready;          /* mu and condvars initialized */
    pthread_t thread;
    int thread_started;

    acx_batch_t batch; /* what next() hands out; points into the held slot */
};

/* ---- reading a batch ---- */

static int cmp_row_ref(const void *a, const void *b) {
    const row_ref_t *x = a, *y = b;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Read slot->indices[0..size) of every dataset into slot->tensors. Called
 * without mu; takes the HDF5 lock. */
static acx_status_t read_windows(acx_dataloader_t *l, slot_t *slot);

static acx_status_t read_batch(acx_dataloader_t *l, slot_t *slot) {
    acx_status_t status = ACX_OK;
    int64_t n = slot->size;
    if (n == 0) return ACX_OK;
    if (l->tokens) return read_windows(l, slot);

    /* sort by row, keep batch positions; find unique rows and their runs */
    int direct = 1;
    for (int64_t j = 0; j < n; j++) {
        l->refs[j] = (row_ref_t){slot->indices[j], j};
        if (j > 0 && slot->indices[j] <= slot->indices[j - 1]) direct = 0;
    }
    if (!direct) qsort(l->refs, (size_t)n, sizeof *l->refs, cmp_row_ref);
    int64_t unique = 0, nruns = 0;
    for (int64_t j = 0; j < n; j++) {
        int64_t row = l->refs[j].row;
        if (j > 0 && row == l->refs[j - 1].row) continue; /* duplicate: read once */
        unique++;
        if (nruns > 0 && (int64_t)(l->runs[2 * (nruns - 1)] + l->runs[2 * nruns - 1]) == row)
            l->runs[2 * nruns - 1]++;
        else {
            l->runs[2 * nruns] = (hsize_t)row;
            l->runs[2 * nruns + 1] = 1;
            nruns++;
        }
    }

    acx_h5_lock();
    for (int i = 0; i < l->num_datasets; i++) {
        dataset_t *d = &l->ds[i];
        hid_t fspace = -1, mspace = -1;
        char what[512];
        if (d->row_bytes == 0) continue; /* samples of zero elements */
        snprintf(what, sizeof what, "dataset '%s' of '%s' (batch %lld of epoch %lld)", d->name,
                 l->path, (long long)slot->index, (long long)slot->epoch);
        hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK], block[H5S_MAX_RANK];
        for (int k = 0; k < d->ndim; k++) {
            count[k] = 1;
            block[k] = d->dims[k];
        }
        ACX_H5_CHECK_GOTO(fspace = H5Scopy(d->space), what, status, err_read);
        for (int64_t r = 0; r < nruns; r++) {
            start[0] = l->runs[2 * r];
            block[0] = l->runs[2 * r + 1];
            ACX_H5_CHECK_GOTO(H5Sselect_hyperslab(fspace, r == 0 ? H5S_SELECT_SET : H5S_SELECT_OR,
                                                  start, NULL, count, block),
                              what, status, err_read);
        }
        hsize_t melems = (hsize_t)unique * (hsize_t)d->sample_numel;
        ACX_H5_CHECK_GOTO(mspace = H5Screate_simple(1, &melems, NULL), what, status, err_read);
        void *dst = direct ? slot->tensors[i] : l->staging;
        ACX_H5_CHECK_GOTO(H5Dread(d->dset, d->memtype, mspace, fspace, H5P_DEFAULT, dst), what,
                          status, err_read);
        H5Sclose(mspace);
        H5Sclose(fspace);
        if (!direct) {
            /* staging row u (sorted unique order) -> batch position(s) */
            const char *src = l->staging;
            char *out = slot->tensors[i];
            int64_t u = -1;
            for (int64_t j = 0; j < n; j++) {
                if (j == 0 || l->refs[j].row != l->refs[j - 1].row) u++;
                memcpy(out + (size_t)l->refs[j].pos * d->row_bytes, src + (size_t)u * d->row_bytes,
                       d->row_bytes);
            }
        }
        continue;
    err_read:
        if (mspace >= 0) H5Sclose(mspace);
        if (fspace >= 0) H5Sclose(fspace);
        break;
    }
    acx_h5_unlock();
    return status;
}

/* Token windows: one hyperslab read of the T + 1 contiguous tokens of each
 * window (windows of a shuffled batch are not contiguous to each other, and
 * neighbours share a token, so a union selection would not fit), read as
 * int32 (HDF5 converts uint16), checked against [0, vocab_size), then cut
 * into the input row (tokens 0..T-1) and the target row (tokens 1..T).
 * The open already checked every id of the dataset on all ranks together
 * (scan_tokens), so this check cannot fire on one rank alone for the file
 * the loader opened; it stays as a second line of defence against a file
 * rewritten under the loader since the open (an id that would index past
 * an embedding table), which, like a read error, is this rank's alone. It
 * checks the vocab_size attribute only: the prefetch thread may run before
 * the open agrees on the largest id (max_id).
 * Called without mu; takes the HDF5 lock. */
static acx_status_t read_windows(acx_dataloader_t *l, slot_t *slot) {
    acx_status_t status = ACX_OK;
    dataset_t *d = &l->ds[0];
    int64_t T = l->seq_len;
    hsize_t wlen = (hsize_t)T + 1;
    hid_t fspace = -1, mspace = -1;
    char what[512];
    snprintf(what, sizeof what, "token dataset '%s' of '%s' (batch %lld of epoch %lld)", d->name,
             l->path, (long long)slot->index, (long long)slot->epoch);
    acx_h5_lock();
    ACX_H5_CHECK_GOTO(fspace = H5Scopy(d->space), what, status, out);
    ACX_H5_CHECK_GOTO(mspace = H5Screate_simple(1, &wlen, NULL), what, status, out);
    for (int64_t j = 0; j < slot->size; j++) {
        int64_t w = slot->indices[j];
        int64_t first = acx_token_window_start(w, T);
        hsize_t start = (hsize_t)first;
        ACX_H5_CHECK_GOTO(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &wlen, NULL),
                          what, status, out);
        ACX_H5_CHECK_GOTO(
            H5Dread(d->dset, H5T_NATIVE_INT32, mspace, fspace, H5P_DEFAULT, l->window_buf), what,
            status, out);
        /* values from the file: checked before anyone indexes with them */
        for (int64_t k = 0; k <= T; k++) {
            int32_t v = l->window_buf[k];
            if (v < 0 || (l->vocab_size > 0 && v >= l->vocab_size)) {
                status = ACX_ERROR(ACX_ERR_FORMAT,
                                   "token file '%s', dataset '%s': token %lld has value %ld, "
                                   "which the open found valid: was the file changed since?",
                                   l->path, d->name, (long long)(first + k), (long)v);
                goto out;
            }
        }
        int32_t *in = (int32_t *)slot->tensors[0] + j * T;
        int32_t *tg = (int32_t *)slot->tensors[1] + j * T;
        memcpy(in, l->window_buf, (size_t)T * sizeof *in);
        memcpy(tg, l->window_buf + 1, (size_t)T * sizeof *tg);
    }
out:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    acx_h5_unlock();
    return status;
}

/* ---- the prefetch thread ---- */

static slot_t *find_slot(acx_dataloader_t *l, slot_state_t state) {
    for (int s = 0; s < l->num_slots; s++)
        if (l->slots[s].state == state) return &l->slots[s];
    return NULL;
}

static slot_t *find_ready(acx_dataloader_t *l, uint64_t gen, int64_t index) {
    for (int s = 0; s < l->num_slots; s++) {
        slot_t *slot = &l->slots[s];
        if (slot->state == SLOT_READY && slot->gen == gen && slot->index == index) return slot;
    }
    return NULL;
}

static void *prefetch_main(void *arg) {
    acx_dataloader_t *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        slot_t *slot = NULL;
        while (!l->stop && (l->paused || l->next_k >= l->num_batches ||
                            (slot = find_slot(l, SLOT_FREE)) == NULL))
            pthread_cond_wait(&l->cv_work, &l->mu);
        if (l->stop) break;
        uint64_t gen = l->gen;
        slot->state = SLOT_FILLING;
        slot->epoch = l->epoch;
        slot->index = l->next_k++;
        acx_sampler_batch(&l->sampler, slot->index, slot->indices, &slot->size, &slot->num_padding);
        pthread_mutex_unlock(&l->mu);

        acx_status_t st = read_batch(l, slot);

        pthread_mutex_lock(&l->mu);
        if (gen != l->gen) { /* restarted while reading: drop it */
            slot->state = SLOT_FREE;
            continue;
        }
        slot->gen = gen;
        slot->status = st;
        if (st != ACX_OK) {
            /* the message lives in this thread's last error: carry it */
            snprintf(slot->message, sizeof slot->message, "%s", acx_last_error());
            l->paused = 1;
        }
        slot->state = SLOT_READY;
        pthread_cond_broadcast(&l->cv_ready);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Start over at batch `start` of `epoch`. Main thread, mu held. */
static void restart_locked(acx_dataloader_t *l, int64_t epoch, int64_t start) {
    l->gen++;
    acx_sampler_set_epoch(&l->sampler, epoch);
    acx_sampler_set_start(&l->sampler, 0); /* a whole epoch (set_position_samples) */
    l->num_batches = acx_sampler_num_batches(&l->sampler);
    l->epoch = epoch;
    l->pos = start;
    l->next_k = start;
    l->paused = 0;
    for (int s = 0; s < l->num_slots; s++)
        if (l->slots[s].state == SLOT_READY) l->slots[s].state = SLOT_FREE;
    pthread_cond_broadcast(&l->cv_work);
}

static acx_status_t start_thread(acx_dataloader_t *l) {
    /* Signals (SIGUSR1/SIGTERM preemption, SIGALRM watchdogs) must reach the
     * program's threads, not this one: block them all here; the thread
     * inherits the mask. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int ret = pthread_create(&l->thread, NULL, prefetch_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ret != 0)
        return ACX_ERROR(ACX_ERR_SYSTEM,
                         "pthread_create of the prefetch thread for '%s' failed: %s", l->path,
                         strerror(ret));
    l->thread_started = 1;
    return ACX_OK;
}

static void stop_thread(acx_dataloader_t *l) {
    if (!l->thread_started) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    l->thread_started = 0;
}

/* ---- open ---- */

static const char *h5_class_name(H5T_class_t cls) {
    switch (cls) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    default: return "unknown";
    }
}

static acx_status_t check_options(const acx_dataloader_options_t *o, int world_size) {
    if (o->batch_size < 1)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "dataloader batch_size %lld: must be >= 1",
                         (long long)o->batch_size);
    const struct {
        const char *name;
        int value;
    } flags[] = {{"shuffle", o->shuffle},
                 {"drop_last", o->drop_last},
                 {"even_batches", o->even_batches},
                 {"split_batches", o->split_batches}};
    for (size_t f = 0; f < sizeof flags / sizeof *flags; f++)
        if (flags[f].value != 0 && flags[f].value != 1)
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "dataloader option %s = %d: expected 0 or 1",
                             flags[f].name, flags[f].value);
    if (o->prefetch < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "dataloader prefetch = %d: expected >= 0",
                         o->prefetch);
    if (o->cycle < -1 || o->cycle > 1)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "dataloader option cycle = %d: expected -1 (follow max_steps), 0 or 1",
                         o->cycle);
    if (o->split_batches && o->batch_size % world_size != 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "split_batches: batch_size %lld is not divisible by the world size %d",
                         (long long)o->batch_size, world_size);
    return ACX_OK;
}

/* Does every component of `name` exist as a link ("/a", "/a/b", ...)?
 * H5Lexists fails, rather than answering 0, when a parent is missing. */
static htri_t path_exists(hid_t file, const char *name) {
    size_t len = strlen(name);
    char *buf = malloc(len + 1);
    if (buf == NULL) return -1;
    memcpy(buf, name, len + 1);
    htri_t e = 1;
    for (size_t i = 1; i <= len && e > 0; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        e = H5Lexists(file, buf, H5P_DEFAULT);
        buf[i] = c;
    }
    free(buf);
    return e;
}

/* Open dataset `name` into d and learn its shape and type. HDF5 lock held. */
static acx_status_t open_dataset(acx_dataloader_t *l, const char *name, dataset_t *d) {
    acx_status_t status = ACX_OK;
    char what[512];
    hid_t type = -1;
    snprintf(what, sizeof what, "dataset '%s' in '%s'", name, l->path);

    d->name = strdup(name);
    if (d->name == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "strdup of a dataset name failed");
    htri_t e = path_exists(l->file, name);
    if (e < 0) return acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
    if (e == 0)
        return ACX_ERROR(ACX_ERR_IO, "dataset '%s' not found in data file '%s'", name, l->path);
    ACX_H5_CHECK_GOTO(d->dset = H5Oopen(l->file, name, H5P_DEFAULT), what, status, err);
    if (H5Iget_type(d->dset) != H5I_DATASET) {
        status =
            ACX_ERROR(ACX_ERR_FORMAT, "'%s' in data file '%s' is not a dataset", name, l->path);
        goto err;
    }
    /* no filter plugin, no virtual or external storage, storage inside the
     * file (unwritten chunks read as fill values: allowed) */
    ACX_CHECK_GOTO(acx_h5_check_dataset(d->dset, what, 0, NULL), status, err);
    ACX_H5_CHECK_GOTO(d->space = H5Dget_space(d->dset), what, status, err);
    int ndim = H5Sget_simple_extent_ndims(d->space);
    if (ndim < 0) return acx_error_h5("H5Sget_simple_extent_ndims", what, __FILE__, __LINE__);
    if (ndim < 1) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "dataset '%s' in '%s' is a scalar: a loader dataset "
                           "needs dimension 0 = samples",
                           name, l->path);
        goto err;
    }
    d->ndim = ndim;
    ACX_H5_CHECK_GOTO(H5Sget_simple_extent_dims(d->space, d->dims, NULL), what, status, err);
    ACX_H5_CHECK_GOTO(type = H5Dget_type(d->dset), what, status, err);
    int dtype = acx_h5_to_dtype(type);
    if (dtype < 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "dataset '%s' in '%s' has HDF5 type class %s, size %zu "
                           "bytes; supported: int8, uint8, uint16, int32, int64, float16, "
                           "bfloat16, float32, float64",
                           name, l->path, h5_class_name(H5Tget_class(type)), H5Tget_size(type));
        goto err;
    }
    H5Tclose(type);
    type = -1;
    d->dtype = (acx_dtype_t)dtype;
    d->memtype = acx_h5_native(dtype);
    if (d->memtype < 0) return acx_error_h5("acx_h5_native", what, __FILE__, __LINE__);
    d->sample_numel = 1;
    for (int k = 1; k < ndim; k++)
        d->sample_numel *= (int64_t)d->dims[k];
    d->row_bytes = (size_t)d->sample_numel * acx_dtype_size(d->dtype);
    return ACX_OK;
err:
    if (type >= 0) H5Tclose(type);
    return status;
}

/* A token loader's dataset: 1-D uint16 or int32, at least one window of
 * T + 1 tokens, and the vocab_size attribute (when present) a positive
 * integer. HDF5 lock held. */
static acx_status_t check_tokens(acx_dataloader_t *l) {
    dataset_t *d = &l->ds[0];
    if (d->ndim != 1 || (d->dtype != ACX_DTYPE_UINT16 && d->dtype != ACX_DTYPE_INT32))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "token dataset '%s' in '%s' is %d-D %s; expected a 1-D uint16 or int32 "
                         "array of token ids",
                         d->name, l->path, d->ndim, acx_dtype_name(d->dtype));
    l->num_tokens = (int64_t)d->dims[0];
    /* a window is seq_len + 1 tokens; compared without computing seq_len + 1,
     * which overflows for seq_len = INT64_MAX */
    if (l->seq_len >= l->num_tokens)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "token dataset '%s' in '%s' has %lld tokens: seq_len %lld leaves no "
                         "window (a window is seq_len + 1 tokens; expected seq_len <= %lld)",
                         d->name, l->path, (long long)l->num_tokens, (long long)l->seq_len,
                         (long long)l->num_tokens - 1);
    char what[512];
    snprintf(what, sizeof what, "attribute vocab_size of token dataset '%s' in '%s'", d->name,
             l->path);
    htri_t e = H5Aexists(d->dset, "vocab_size");
    if (e < 0) return acx_error_h5("H5Aexists", what, __FILE__, __LINE__);
    if (e == 0) return ACX_OK;
    acx_status_t status = ACX_OK;
    hid_t a = -1, sp = -1, t = -1;
    int64_t v = 0;
    ACX_H5_CHECK_GOTO(a = H5Aopen(d->dset, "vocab_size", H5P_DEFAULT), what, status, out);
    ACX_H5_CHECK_GOTO(sp = H5Aget_space(a), what, status, out);
    ACX_H5_CHECK_GOTO(t = H5Aget_type(a), what, status, out);
    if (H5Tget_class(t) != H5T_INTEGER || H5Sget_simple_extent_npoints(sp) != 1) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "%s: expected one integer", what);
        goto out;
    }
    ACX_H5_CHECK_GOTO(H5Aread(a, H5T_NATIVE_INT64, &v), what, status, out);
    if (v < 1 || v > INT32_MAX) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "%s is %lld; expected 1 to %d", what, (long long)v,
                           INT32_MAX);
        goto out;
    }
    l->vocab_size = v;
out:
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    if (a >= 0) H5Aclose(a);
    return status;
}

/* This rank's share of the open-time id scan: tokens [lo, hi) with
 * lo = r * (N / W) + min(r, N % W) (contiguous slices, ascending with the
 * rank), read as int32 in chunks of SCAN_TOKENS, every id checked against
 * [0, vocab_size) (only >= 0 without the attribute). The first bad id is
 * ACX_ERR_FORMAT naming file, dataset, position and value; as the slices
 * ascend with the rank, the lowest failing rank that acx_coll_agree picks
 * holds the lowest bad position of the whole dataset, and every rank
 * reports it. Sets l->max_id (this slice's largest id; -1 when empty).
 * Reading the dataset once at open costs N / W tokens per rank; in return
 * no bad id can surface later in one rank's acx_dataloader_next while the
 * others go on into collectives. HDF5 lock held. */
static acx_status_t scan_tokens(acx_dataloader_t *l) {
    dataset_t *d = &l->ds[0];
    int64_t n = l->num_tokens, w = l->world->size, r = l->world->rank;
    int64_t lo = r * (n / w) + (r < n % w ? r : n % w);
    int64_t hi = lo + n / w + (r < n % w ? 1 : 0);
    l->max_id = -1;
    if (hi <= lo) return ACX_OK;
    acx_status_t status = ACX_OK;
    char what[512];
    snprintf(what, sizeof what, "token dataset '%s' of '%s' (id scan at open)", d->name, l->path);
    hsize_t cap = (hsize_t)(hi - lo < SCAN_TOKENS ? hi - lo : SCAN_TOKENS);
    int32_t *buf = acx_malloc((size_t)cap * sizeof *buf, "token id scan buffer");
    if (buf == NULL) return ACX_ERR_NO_MEMORY;
    hid_t fspace = -1, mspace = -1;
    ACX_H5_CHECK_GOTO(fspace = H5Scopy(d->space), what, status, out);
    for (int64_t at = lo; at < hi; at += (int64_t)cap) {
        hsize_t start = (hsize_t)at, count = (hsize_t)(hi - at) < cap ? (hsize_t)(hi - at) : cap;
        ACX_H5_CHECK_GOTO(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &count, NULL),
                          what, status, out);
        if (mspace >= 0) H5Sclose(mspace);
        ACX_H5_CHECK_GOTO(mspace = H5Screate_simple(1, &count, NULL), what, status, out);
        ACX_H5_CHECK_GOTO(H5Dread(d->dset, H5T_NATIVE_INT32, mspace, fspace, H5P_DEFAULT, buf),
                          what, status, out);
        for (hsize_t k = 0; k < count; k++) {
            int32_t v = buf[k];
            if (v < 0 || (l->vocab_size > 0 && v >= l->vocab_size)) {
                char range[64];
                if (l->vocab_size > 0)
                    snprintf(range, sizeof range, " [0, %lld) (its vocab_size attribute)",
                             (long long)l->vocab_size);
                else
                    snprintf(range, sizeof range, " >= 0");
                status = ACX_ERROR(ACX_ERR_FORMAT,
                                   "token file '%s', dataset '%s': token %lld has value %ld; "
                                   "expected a token id in%s",
                                   l->path, d->name, (long long)(at + (int64_t)k), (long)v, range);
                goto out;
            }
            if (v > l->max_id) l->max_id = v;
        }
    }
out:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    free(buf);
    return status;
}

/* Release what the loader holds, keeping the object (acx_loader_close). */
static acx_status_t loader_release(acx_dataloader_t *l) {
    acx_status_t status = ACX_OK;
    stop_thread(l);
    acx_h5_lock();
    for (int i = 0; i < ACX_MAX_TENSORS; i++) {
        dataset_t *d = &l->ds[i];
        if (d->space >= 0) H5Sclose(d->space);
        if (d->dset >= 0) H5Oclose(d->dset);
        d->space = d->dset = -1;
    }
    if (l->file >= 0 && H5Fclose(l->file) < 0) {
        char what[512];
        snprintf(what, sizeof what, "data file '%s'", l->path);
        status = acx_error_h5("H5Fclose", what, __FILE__, __LINE__);
    }
    l->file = -1;
    acx_h5_unlock();
    if (l->slots != NULL)
        for (int s = 0; s < l->num_slots; s++) {
            free(l->slots[s].indices);
            for (int i = 0; i < ACX_MAX_TENSORS; i++)
                free(l->slots[s].tensors[i]);
        }
    free(l->slots);
    l->slots = NULL;
    l->held = NULL;
    free(l->refs);
    free(l->runs);
    free(l->staging);
    free(l->window_buf);
    l->window_buf = NULL;
    l->refs = NULL;
    l->runs = NULL;
    l->staging = NULL;
    acx_sampler_fini(&l->sampler);
    l->open = 0;
    return status;
}

static void loader_destroy(acx_dataloader_t *l) {
    loader_release(l);
    if (l->sync_ready) {
        pthread_cond_destroy(&l->cv_ready);
        pthread_cond_destroy(&l->cv_work);
        pthread_mutex_destroy(&l->mu);
    }
    for (int i = 0; i < ACX_MAX_TENSORS; i++)
        free(l->ds[i].name);
    free(l->path);
    free(l);
}

/* Everything but the agreement: open, validate, allocate, start the thread.
 * On failure *l_p is still set (for loader_destroy) when allocated. */
static acx_status_t loader_build(acx_comm_t *world, uint64_t seed, const char *path,
                                 int num_datasets, const char *const *names, int64_t seq_len,
                                 const acx_dataloader_options_t *opts, acx_dataloader_t **l_p) {
    acx_status_t status;
    int world_size = world->size;

    if (path == NULL || names == NULL || opts == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "dataloader: path, dataset names and options "
                                              "must not be NULL");
    if (num_datasets < 1 || num_datasets > ACX_MAX_TENSORS)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "dataloader: %d datasets for '%s'; expected 1 to %d",
                         num_datasets, path, ACX_MAX_TENSORS);
    for (int i = 0; i < num_datasets; i++)
        if (names[i] == NULL || names[i][0] == '\0')
            return ACX_ERROR(ACX_ERR_INVALID_ARG, "dataloader: dataset name %d for '%s' is empty",
                             i, path);
    ACX_CHECK(check_options(opts, world_size));

    acx_dataloader_t *l = acx_calloc(1, sizeof *l, "data loader");
    if (l == NULL) return ACX_ERR_NO_MEMORY;
    *l_p = l;
    l->world = world;
    l->file = -1;
    for (int i = 0; i < ACX_MAX_TENSORS; i++)
        l->ds[i].dset = l->ds[i].space = -1;
    l->num_datasets = num_datasets;
    l->prefetch = opts->prefetch;
    l->tokens = seq_len > 0;
    l->seq_len = seq_len;
    l->cycle_opt = opts->cycle;
    l->cycle = opts->cycle == 1;
    l->path = strdup(path);
    if (l->path == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "strdup of the data path failed");
    ACX_SYS_ERRNUM_CHECK(pthread_mutex_init(&l->mu, NULL));
    ACX_SYS_ERRNUM_CHECK(pthread_cond_init(&l->cv_work, NULL));
    ACX_SYS_ERRNUM_CHECK(pthread_cond_init(&l->cv_ready, NULL));
    l->sync_ready = 1;

    /* the file: errno's word for a missing or unreadable file, before HDF5's
     * longer one */
    struct stat st;
    if (stat(path, &st) != 0 || access(path, R_OK) != 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot open data file '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return ACX_ERROR(ACX_ERR_IO, "cannot open data file '%s': it is a directory", path);

    acx_h5_lock();
    acx_h5_quiet();
    char what[512];
    snprintf(what, sizeof what, "data file '%s'", path);
    hid_t fapl = -1;
    ACX_H5_CHECK_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), what, status, err_unlock);
    ACX_H5_CHECK_GOTO(H5Pset_fapl_sec2(fapl), what, status, err_unlock);
    /* A shuffled batch selects rows scattered over the file. HDF5's data
     * sieve (64 KiB by default) would read a whole sieve window around each
     * small row; a window no larger than a page reads little more than the
     * rows themselves, and a contiguous run of rows larger than the window
     * is read directly either way. */
    ACX_H5_CHECK_GOTO(H5Pset_sieve_buf_size(fapl, SIEVE_BYTES), what, status, err_unlock);
    ACX_H5_CHECK_GOTO(l->file = H5Fopen(path, H5F_ACC_RDONLY, fapl), what, status, err_unlock);
    H5Pclose(fapl);
    fapl = -1;
    for (int i = 0; i < num_datasets; i++) {
        ACX_CHECK_GOTO(open_dataset(l, names[i], &l->ds[i]), status, err_unlock);
        if (l->ds[i].dims[0] != l->ds[0].dims[0]) {
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "datasets '%s' (%llu samples) and '%s' (%llu "
                               "samples) in '%s' differ in their first dimension",
                               names[0], (unsigned long long)l->ds[0].dims[0], names[i],
                               (unsigned long long)l->ds[i].dims[0], path);
            goto err_unlock;
        }
    }
    if (l->tokens) {
        ACX_CHECK_GOTO(check_tokens(l), status, err_unlock);
        ACX_CHECK_GOTO(scan_tokens(l), status, err_unlock);
    }
    acx_h5_unlock();

    /* sizes (the policy in the file comment); a token loader's samples are
     * its windows */
    int64_t n =
        l->tokens ? acx_token_num_windows(l->num_tokens, seq_len) : (int64_t)l->ds[0].dims[0];
    int64_t b = opts->split_batches ? opts->batch_size / world_size : opts->batch_size;
    l->num_samples = n;
    l->batch_size = b;
    if (n == 0)
        return ACX_ERROR(ACX_ERR_FORMAT, "dataset '%s' in '%s' has no samples", names[0], path);
    if (b > n) {
        if (opts->split_batches)
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "batch_size %lld (split_batches: %lld per rank on "
                             "world size %d) exceeds the %lld samples of '%s'",
                             (long long)opts->batch_size, (long long)b, world_size, (long long)n,
                             path);
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "batch_size %lld x world size %d = %lld exceeds the %lld "
                         "samples of '%s' (already one rank's batch does)",
                         (long long)b, world_size, (long long)(b * world_size), (long long)n, path);
    }
    if (opts->drop_last && b * world_size > n)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "batch_size %lld x world size %d = %lld exceeds the %lld "
                         "samples of '%s' with drop_last: no batch would remain",
                         (long long)b, world_size, (long long)(b * world_size), (long long)n, path);
    ACX_CHECK(acx_sampler_init(&l->sampler, n, b, world_size, world->rank, opts->shuffle,
                               opts->drop_last, opts->even_batches, seed));
    l->num_batches = acx_sampler_num_batches(&l->sampler);
    l->open = 1; /* from here loader_release frees the sampler */

    /* buffers */
    size_t max_row = 1;
    for (int i = 0; i < num_datasets; i++)
        if (l->ds[i].row_bytes > max_row) max_row = l->ds[i].row_bytes;
    /* a token loader hands out two tensors of T int32 per window */
    int num_tensors = l->tokens ? 2 : num_datasets;
    size_t tensor_row[ACX_MAX_TENSORS];
    for (int i = 0; i < num_tensors; i++)
        tensor_row[i] = l->tokens ? (size_t)seq_len * sizeof(int32_t) : l->ds[i].row_bytes;
    if (l->tokens) {
        l->window_buf = acx_malloc(((size_t)seq_len + 1) * sizeof(int32_t), "token window");
        if (l->window_buf == NULL) return ACX_ERR_NO_MEMORY;
    }
    l->num_slots = l->prefetch > 0 ? l->prefetch + 1 : 1;
    l->slots = acx_calloc((size_t)l->num_slots, sizeof *l->slots, "loader slots");
    l->refs = acx_malloc((size_t)b * sizeof *l->refs, "loader row refs");
    l->runs = acx_malloc((size_t)b * 2 * sizeof *l->runs, "loader runs");
    l->staging = acx_aligned_alloc((size_t)b * max_row, "loader staging buffer");
    if (l->slots == NULL || l->refs == NULL || l->runs == NULL || l->staging == NULL)
        return ACX_ERR_NO_MEMORY;
    for (int s = 0; s < l->num_slots; s++) {
        slot_t *slot = &l->slots[s];
        slot->indices = acx_malloc((size_t)b * sizeof *slot->indices, "batch indices");
        if (slot->indices == NULL) return ACX_ERR_NO_MEMORY;
        for (int i = 0; i < num_tensors; i++) {
            size_t bytes = (size_t)b * tensor_row[i];
            slot->tensors[i] = acx_aligned_alloc(bytes > 0 ? bytes : 1, "batch tensor");
            if (slot->tensors[i] == NULL) return ACX_ERR_NO_MEMORY;
        }
    }

    /* the batch fields that never change */
    l->batch.num_tensors = num_tensors;
    for (int i = 0; i < num_tensors; i++) {
        l->batch.dtypes[i] = l->tokens ? ACX_DTYPE_INT32 : l->ds[i].dtype;
        l->batch.sample_numel[i] = l->tokens ? seq_len : l->ds[i].sample_numel;
    }

    l->epoch = 0;
    l->pos = l->next_k = 0;
    if (l->prefetch > 0) ACX_CHECK(start_thread(l));
    ACX_DEBUG(ACX_SUBSYS_DATA,
              "loader '%s': %d dataset(s), %lld samples, batch %lld per rank, %lld batches per "
              "epoch, shuffle %d drop_last %d even_batches %d split_batches %d prefetch %d, "
              "seq_len %lld (0: not a token stream)",
              path, num_datasets, (long long)n, (long long)b, (long long)l->num_batches,
              opts->shuffle, opts->drop_last, opts->even_batches, opts->split_batches,
              opts->prefetch, (long long)seq_len);
    return ACX_OK;

err_unlock:
    if (fapl >= 0) H5Pclose(fapl);
    acx_h5_unlock();
    return status;
}

acx_status_t acx_loader_open(acx_comm_t *world, uint64_t seed, const char *path, int num_datasets,
                             const char *const *dataset_names, const acx_dataloader_options_t *opts,
                             acx_dataloader_t **loader_p) {
    if (world == NULL || loader_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_loader_open: world and loader_p must not be NULL");
    acx_dataloader_t *l = NULL;
    acx_status_t status = loader_build(world, seed, path, num_datasets, dataset_names, 0, opts, &l);
    /* every rank learns the lowest failing rank's status and message */
    status = acx_coll_agree(world, status);
    if (status != ACX_OK) {
        if (l != NULL) loader_destroy(l);
        return status;
    }
    *loader_p = l;
    return ACX_OK;
}

acx_status_t acx_loader_open_tokens(acx_comm_t *world, uint64_t seed, const char *path,
                                    const char *dataset, int64_t seq_len,
                                    const acx_dataloader_options_t *opts,
                                    acx_dataloader_t **loader_p) {
    if (world == NULL || loader_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_loader_open_tokens: world and loader_p must not be NULL");
    acx_dataloader_t *l = NULL;
    acx_status_t status;
    if (seq_len < 1)
        status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                           "acx_token_loader_open: seq_len %lld for '%s': expected >= 1",
                           (long long)seq_len, path != NULL ? path : "(null)");
    else if (dataset == NULL)
        status = ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_token_loader_open: dataset name is NULL");
    else
        status =
            loader_build(world, seed, path, 1, (const char *const[]){dataset}, seq_len, opts, &l);
    /* a bad token id is this agreement's lowest failing rank: the lowest
     * bad position (scan_tokens), the same error on every rank */
    status = acx_coll_agree(world, status);
    /* the largest id of the whole dataset (acx_dataloader_vocab_size
     * without the attribute) */
    if (status == ACX_OK)
        ACX_MPI_CHECK_GOTO(
            MPI_Allreduce(MPI_IN_PLACE, &l->max_id, 1, MPI_INT64_T, MPI_MAX, world->mpi), status,
            out);
out:
    if (status != ACX_OK) {
        if (l != NULL) loader_destroy(l);
        return status;
    }
    *loader_p = l;
    return ACX_OK;
}

/* ---- iteration ---- */

static acx_status_t check_open(const acx_dataloader_t *l, const char *fn) {
    if (l == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "%s: loader is NULL", fn);
    if (!l->open) return ACX_ERROR(ACX_ERR_STATE, "%s: the loader of '%s' was closed", fn, l->path);
    return ACX_OK;
}

ACX_API acx_status_t acx_dataloader_next(acx_dataloader_t *l, const acx_batch_t **batch_p) {
    ACX_CHECK(check_open(l, "acx_dataloader_next"));
    if (batch_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_dataloader_next: batch_p is NULL");
    acx_status_t status = ACX_OK;
    slot_t *slot;

    pthread_mutex_lock(&l->mu);
    /* the previous batch is no longer the program's */
    if (l->held != NULL) {
        l->held->state = SLOT_FREE;
        l->held = NULL;
        pthread_cond_broadcast(&l->cv_work);
    }
    if (l->pos >= l->num_batches) {
        restart_locked(l, l->epoch + 1, 0);
        /* cycling (step mode): go on with the next epoch's first batch */
        if (!l->cycle || l->num_batches == 0) {
            pthread_mutex_unlock(&l->mu);
            *batch_p = NULL; /* the end of the epoch: not an error (acx/status.h) */
            return ACX_OK;
        }
    }
    if (l->thread_started) {
        while ((slot = find_ready(l, l->gen, l->pos)) == NULL)
            pthread_cond_wait(&l->cv_ready, &l->mu);
        if (slot->status != ACX_OK) {
            status = acx_error_set_raw(slot->status, slot->message);
            slot->state = SLOT_FREE;
            restart_locked(l, l->epoch, l->pos); /* retry this batch next time */
            pthread_mutex_unlock(&l->mu);
            return status;
        }
    } else {
        slot = &l->slots[0];
        slot->epoch = l->epoch;
        slot->index = l->pos;
        acx_sampler_batch(&l->sampler, l->pos, slot->indices, &slot->size, &slot->num_padding);
        status = read_batch(l, slot);
        if (status != ACX_OK) {
            pthread_mutex_unlock(&l->mu);
            return status;
        }
    }
    slot->state = SLOT_HELD;
    l->held = slot;
    l->pos++;

    acx_batch_t *b = &l->batch;
    b->size = slot->size;
    b->num_padding = slot->num_padding;
    b->indices = slot->indices;
    for (int i = 0; i < b->num_tensors; i++)
        b->tensors[i] = slot->tensors[i];
    b->epoch = slot->epoch;
    b->index = slot->index;
    b->is_last = slot->index == l->num_batches - 1;
    pthread_mutex_unlock(&l->mu);
    *batch_p = b;
    return ACX_OK;
}

ACX_API acx_status_t acx_dataloader_set_epoch(acx_dataloader_t *l, int64_t epoch) {
    ACX_CHECK(check_open(l, "acx_dataloader_set_epoch"));
    if (epoch < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_dataloader_set_epoch: epoch %lld < 0",
                         (long long)epoch);
    pthread_mutex_lock(&l->mu);
    restart_locked(l, epoch, 0);
    pthread_mutex_unlock(&l->mu);
    return ACX_OK;
}

/* ---- queries ---- */

ACX_API int64_t acx_dataloader_num_samples(const acx_dataloader_t *l) {
    return l ? l->num_samples : 0;
}

ACX_API int64_t acx_dataloader_num_batches(const acx_dataloader_t *l) {
    return l ? l->num_batches : 0;
}

ACX_API int64_t acx_dataloader_epoch(const acx_dataloader_t *l) { return l ? l->epoch : 0; }

ACX_API int64_t acx_dataloader_position(const acx_dataloader_t *l) { return l ? l->pos : 0; }

ACX_API int acx_dataloader_dataset_shape(const acx_dataloader_t *l, int i, int max_dims,
                                         int64_t *dims) {
    if (l != NULL && l->tokens) {
        /* inputs and targets: [windows x T] each */
        if (i < 0 || i > 1) return -1;
        int64_t shape[2] = {l->num_samples, l->seq_len};
        for (int k = 0; k < 2 && k < max_dims && dims != NULL; k++)
            dims[k] = shape[k];
        return 2;
    }
    if (l == NULL || i < 0 || i >= l->num_datasets) return -1;
    const dataset_t *d = &l->ds[i];
    for (int k = 0; k < d->ndim && k < max_dims && dims != NULL; k++)
        dims[k] = (int64_t)d->dims[k];
    return d->ndim;
}

ACX_API int64_t acx_dataloader_vocab_size(const acx_dataloader_t *l) {
    if (l == NULL || !l->tokens) return -1;
    return l->vocab_size > 0 ? l->vocab_size : l->max_id + 1;
}

ACX_API int acx_dataloader_dataset_dtype(const acx_dataloader_t *l, int i) {
    if (l != NULL && l->tokens) return i == 0 || i == 1 ? (int)ACX_DTYPE_INT32 : -1;
    if (l == NULL || i < 0 || i >= l->num_datasets) return -1;
    return (int)l->ds[i].dtype;
}

/* ---- checkpoint state (io/loader.h) ---- */

acx_status_t acx_loader_set_position(acx_dataloader_t *l, int64_t epoch, int64_t batch_index) {
    ACX_CHECK(check_open(l, "acx_loader_set_position"));
    if (epoch < 0 || batch_index < 0 || batch_index > l->num_batches)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_loader_set_position: epoch %lld, batch %lld of '%s': expected epoch "
                         ">= 0 and 0 <= batch <= %lld (batches per epoch)",
                         (long long)epoch, (long long)batch_index, l->path,
                         (long long)l->num_batches);
    pthread_mutex_lock(&l->mu);
    restart_locked(l, epoch, batch_index);
    pthread_mutex_unlock(&l->mu);
    return ACX_OK;
}

int64_t acx_loader_global_batch(const acx_dataloader_t *l) { return l->sampler.global_batch; }

uint64_t acx_loader_seed(const acx_dataloader_t *l) { return l->sampler.seed; }

acx_status_t acx_loader_set_position_samples(acx_dataloader_t *l, int64_t epoch, int64_t samples) {
    ACX_CHECK(check_open(l, "acx_loader_set_position_samples"));
    if (epoch < 0 || samples < 0 || samples > l->num_samples)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_loader_set_position_samples: epoch %lld, %lld samples consumed of "
                         "'%s': expected epoch >= 0 and 0 <= samples <= %lld",
                         (long long)epoch, (long long)samples, l->path, (long long)l->num_samples);
    pthread_mutex_lock(&l->mu);
    restart_locked(l, epoch, 0);
    acx_sampler_set_start(&l->sampler, samples);
    l->num_batches = acx_sampler_num_batches(&l->sampler);
    pthread_mutex_unlock(&l->mu);
    return ACX_OK;
}

int64_t acx_loader_samples_consumed(const acx_dataloader_t *l) {
    return l->sampler.start + l->pos * l->sampler.global_batch;
}

int64_t acx_loader_start(const acx_dataloader_t *l) { return l->sampler.start; }

int acx_loader_is_tokens(const acx_dataloader_t *l) { return l != NULL && l->tokens; }

void acx_loader_set_training(acx_dataloader_t *l, int step_mode) {
    if (l == NULL) return;
    pthread_mutex_lock(&l->mu);
    if (l->cycle_opt == -1) l->cycle = !!step_mode;
    pthread_mutex_unlock(&l->mu);
}

int acx_loader_cycles(const acx_dataloader_t *l) { return l != NULL && l->cycle; }

/* ---- close ---- */

acx_status_t acx_loader_close(acx_dataloader_t *l) {
    if (l == NULL) return ACX_OK;
    if (!l->open && l->file < 0 && !l->thread_started) return ACX_OK; /* closed already */
    return loader_release(l);
}

void acx_loader_free(acx_dataloader_t *l) {
    if (l == NULL) return;
    loader_destroy(l);
}

/*
 * tests/mpi/test_loader.c — the distributed data loader through the public
 * API, on 1..4 ranks. Rank 0 writes a small HDF5 file (103 samples:
 * /x [103 x 3] float32 with x[i][j] = 10 i + j, /y [103] int64 = i,
 * /g/z [103 x 2 x 2] uint8 = 4 i + k mod 256, plus deliberately bad
 * datasets); every rank then iterates loaders over two epochs and checks:
 *   - each batch's tensors hold exactly the rows its indices name;
 *   - gathered over ranks, the batches form the global stream of acx/data.h:
 *     concatenating rank slices of each global batch gives a permutation of
 *     0..N-1 (the identity without shuffle), padding repeats the stream's
 *     start (position q reads stream[q mod N]), drop_last keeps exactly
 *     floor(N/G)*G distinct rows, and ranks agree on the batch count where
 *     they must;
 *   - a NULL batch (ACX_OK) once per epoch, then the next epoch; prefetch 0 and 2
 *     give identical sequences; set_epoch in mid-epoch restarts cleanly;
 *   - a read error (a corrupted, checksummed chunk) reaches next() from the
 *     prefetch thread, and the loader recovers with set_epoch;
 *   - bad inputs give the documented status and message on every rank.
 * Ranks agree on pass/fail (MPI_LOR) so every rank exits with the same code.
 */
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/acx_test.h"

#define N     103
#define MAXB  128 /* batches per epoch recorded, at most */
#define MAXBS 16  /* per-rank batch size, at most */

static acx_accelerator_t *acc;
static int rank, world;
static char dir[256], data_path[300];

/* ---- the data file ---- */

static int write_dataset(hid_t f, const char *name, hid_t ftype, hid_t mtype, int ndim,
                         const hsize_t *dims, const void *buf) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t sp = ndim > 0 ? H5Screate_simple(ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(f, name, ftype, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    int rc = d < 0 || H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0;
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    H5Pclose(lcpl);
    return rc;
}

/* Rank 0 only. */
static int make_data_file(void) {
    static float x[N][3];
    static int64_t y[N];
    static uint8_t z[N][4];
    static float shorter[100];
    static char str[N][8];
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 3; j++)
            x[i][j] = (float)(i * 10 + j);
        y[i] = i;
        for (int k = 0; k < 4; k++)
            z[i][k] = (uint8_t)((i * 4 + k) % 256);
        snprintf(str[i], sizeof str[i], "s%d", i);
    }
    hid_t f = H5Fcreate(data_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return 1;
    int rc = 0;
    rc |= write_dataset(f, "/x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, (hsize_t[]){N, 3}, x);
    /* big-endian on disk: the loader must hand out native values */
    rc |= write_dataset(f, "/y", H5T_STD_I64BE, H5T_NATIVE_INT64, 1, (hsize_t[]){N}, y);
    rc |= write_dataset(f, "/g/z", H5T_STD_U8LE, H5T_NATIVE_UCHAR, 3, (hsize_t[]){N, 2, 2}, z);
    rc |=
        write_dataset(f, "/short", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, (hsize_t[]){100}, shorter);
    hid_t st = H5Tcopy(H5T_C_S1);
    H5Tset_size(st, 8);
    rc |= write_dataset(f, "/str", st, st, 1, (hsize_t[]){N}, str);
    H5Tclose(st);
    hid_t ct = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(ct, "a", 0, H5T_NATIVE_FLOAT);
    H5Tinsert(ct, "b", 4, H5T_NATIVE_FLOAT);
    rc |= write_dataset(f, "/cmpd", ct, ct, 1, (hsize_t[]){N}, x); /* any 8 bytes per row */
    H5Tclose(ct);
    float one = 1.0f;
    rc |= write_dataset(f, "/scalar", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 0, NULL, &one);

    /* /bad: like /x but chunked by 10 rows with a Fletcher32 checksum; the
     * chunk of rows 50..59 is corrupted below, so reading those rows fails */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, (hsize_t[]){10, 3});
    H5Pset_fletcher32(dcpl);
    hid_t sp = H5Screate_simple(2, (hsize_t[]){N, 3}, NULL);
    hid_t d = H5Dcreate2(f, "/bad", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    rc |= d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0;
    haddr_t addr = HADDR_UNDEF;
    unsigned mask = 0;
    hsize_t csize = 0;
    rc |= H5Dget_chunk_info_by_coord(d, (hsize_t[]){50, 0}, &mask, &addr, &csize) < 0;
    H5Dclose(d);
    H5Sclose(sp);
    H5Pclose(dcpl);
    rc |= H5Fclose(f) < 0;
    if (rc || addr == HADDR_UNDEF) return 1;
    FILE *raw = fopen(data_path, "r+b");
    if (raw == NULL || fseek(raw, (long)addr + 4, SEEK_SET) != 0 || fputc(0x5a, raw) == EOF ||
        fclose(raw) != 0)
        return 1;
    return 0;
}

/* ---- one epoch on one rank ---- */

/* An epoch as a flat int64 record, so ranks can all-gather it:
 * [0] = batches, then per batch g: [1 + g*(2+MAXBS)] = size, [+1] = padding,
 * [+2 ..] = rows (MAXBS, unused -1). */
#define REC_LEN            (1 + MAXB * (2 + MAXBS))
#define REC_SIZE(rec, g)   (rec)[1 + (g) * (2 + MAXBS)]
#define REC_PAD(rec, g)    (rec)[2 + (g) * (2 + MAXBS)]
#define REC_ROW(rec, g, j) (rec)[3 + (g) * (2 + MAXBS) + (j)]

static const char *const names3[] = {"/x", "/y", "/g/z"};

/* Check one batch against the file's formulas. */
static int check_batch(const acx_batch_t *bt, int64_t b, int64_t epoch, int64_t k, int64_t nb) {
    CHECK(bt->epoch == epoch);
    CHECK(bt->index == k);
    CHECK(!!bt->is_last == (k == nb - 1));
    CHECK(bt->size >= 1 && bt->size <= b);
    CHECK(bt->num_padding >= 0 && bt->num_padding <= bt->size);
    CHECK(bt->num_tensors == 3);
    CHECK(bt->dtypes[0] == ACX_DTYPE_FLOAT32 && bt->dtypes[1] == ACX_DTYPE_INT64 &&
          bt->dtypes[2] == ACX_DTYPE_UINT8);
    CHECK(bt->sample_numel[0] == 3 && bt->sample_numel[1] == 1 && bt->sample_numel[2] == 4);
    const float *x = bt->tensors[0];
    const int64_t *y = bt->tensors[1];
    const uint8_t *z = bt->tensors[2];
    for (int64_t s = 0; s < bt->size; s++) {
        int64_t i = bt->indices[s];
        CHECK(i >= 0 && i < N);
        for (int j = 0; j < 3; j++)
            CHECK(x[s * 3 + j] == (float)(i * 10 + j));
        CHECK(y[s] == i);
        for (int k2 = 0; k2 < 4; k2++)
            CHECK(z[s * 4 + k2] == (uint8_t)((i * 4 + k2) % 256));
    }
    return 0;
error:
    fprintf(stderr, "[r%d] batch %lld of epoch %lld is wrong\n", rank, (long long)k,
            (long long)epoch);
    return 1;
}

/* Iterate the rest of the loader's current epoch into rec. */
static int run_epoch(acx_dataloader_t *dl, int64_t b, int64_t *rec) {
    const acx_batch_t *bt = NULL;
    int64_t epoch = acx_dataloader_epoch(dl), nb = acx_dataloader_num_batches(dl);
    for (int i = 0; i < REC_LEN; i++)
        rec[i] = -1;
    CHECK(nb >= 0 && nb <= MAXB);
    int64_t k = 0;
    for (;;) {
        acx_status_t st = acx_dataloader_next(dl, &bt);
        CHECK_OK(st);
        if (bt == NULL) break; /* the end of the epoch */
        CHECK(k < nb);
        CHECK(!check_batch(bt, b, epoch, k, nb));
        CHECK(acx_dataloader_position(dl) == k + 1);
        REC_SIZE(rec, k) = bt->size;
        REC_PAD(rec, k) = bt->num_padding;
        for (int64_t s = 0; s < bt->size; s++)
            REC_ROW(rec, k, s) = bt->indices[s];
        k++;
    }
    CHECK(k == nb);
    rec[0] = k;
    /* after END_OF_DATA the loader stands at the start of the next epoch */
    CHECK(acx_dataloader_epoch(dl) == epoch + 1);
    CHECK(acx_dataloader_position(dl) == 0);
    return 0;
error:
    return 1;
}

/* ---- the global stream, from every rank's record ---- */

enum { MODE_EVEN, MODE_DROP, MODE_NEITHER };

static int check_stream(const int64_t *all, int64_t b, int mode, int shuffle) {
    int64_t g_size = b * world, full = N / g_size, m = N % g_size;
    int64_t nglobal = mode == MODE_DROP ? full : full + (m > 0);
    int64_t len = nglobal * g_size;
    int64_t *stream = malloc((size_t)len * sizeof *stream);
    int *pad = calloc((size_t)len, sizeof *pad), *seen = calloc(N, sizeof *seen);
    for (int64_t q = 0; q < len; q++)
        stream[q] = -1;
    int64_t padding_total = 0;
    for (int r = 0; r < world; r++) {
        const int64_t *rec = all + (size_t)r * REC_LEN;
        int64_t nb = rec[0];
        if (mode != MODE_NEITHER) CHECK(nb == nglobal); /* every rank runs the same count */
        CHECK(nb <= nglobal);
        for (int64_t g = 0; g < nb; g++) {
            int64_t size = REC_SIZE(rec, g), p = REC_PAD(rec, g);
            if (mode != MODE_NEITHER) CHECK(size == b);
            CHECK(p == 0 || g == nb - 1); /* padding only in the last batch */
            padding_total += p;
            for (int64_t j = 0; j < size; j++) {
                int64_t q = g * g_size + r * b + j;
                stream[q] = REC_ROW(rec, g, j);
                pad[q] = j >= size - p;
            }
        }
    }
    /* real positions: a permutation (drop_last: full*G distinct rows) */
    int64_t real = mode == MODE_DROP ? full * g_size : N;
    for (int64_t q = 0; q < real; q++) {
        CHECK(stream[q] >= 0 && !pad[q]);
        CHECK(++seen[stream[q]] == 1);
        if (!shuffle) CHECK(stream[q] == q);
    }
    /* beyond N: padding that wraps around (even) or nothing (neither) */
    for (int64_t q = real; q < len; q++) {
        if (mode == MODE_EVEN) {
            CHECK(pad[q]);
            CHECK(stream[q] == stream[q % N]);
        } else {
            CHECK(stream[q] == -1);
        }
    }
    CHECK(padding_total == (mode == MODE_EVEN ? len - N : 0));
    free(stream);
    free(pad);
    free(seen);
    return 0;
error:
    fprintf(stderr, "[r%d] stream check failed: b=%lld mode=%d shuffle=%d\n", rank, (long long)b,
            mode, shuffle);
    free(stream);
    free(pad);
    free(seen);
    return 1;
}

/* Agree on failure over all ranks (Aluminum style). */
static int any_failed(int local) {
    int global = 0;
    MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return global;
}

/* One configuration: open, two epochs, gather, check; returns the records of
 * both epochs in recs[2 x REC_LEN] for comparisons between prefetch depths. */
static int run_config(int64_t batch, int split, int mode, int shuffle, int prefetch,
                      int64_t *recs) {
    acx_dataloader_options_t o = ACX_DATALOADER_OPTIONS_DEFAULT;
    o.batch_size = batch;
    o.shuffle = shuffle;
    o.split_batches = split;
    o.drop_last = mode == MODE_DROP;
    o.even_batches = mode == MODE_EVEN;
    o.prefetch = prefetch;
    int64_t b = split ? batch / world : batch;
    int failed = 0;
    acx_dataloader_t *dl = NULL;
    int64_t *all = malloc((size_t)world * REC_LEN * sizeof *all);

    acx_status_t st = acx_dataloader_open(acc, data_path, 3, names3, &o, &dl);
    if (st != ACX_OK) {
        fprintf(stderr, "[r%d] open failed: %s\n", rank, acx_last_error());
        free(all);
        return 1; /* the status is agreed: every rank is here */
    }
    int64_t dims[4];
    failed |= acx_dataloader_num_samples(dl) != N;
    failed |= acx_dataloader_dataset_shape(dl, 2, 4, dims) != 3 || dims[0] != N || dims[1] != 2 ||
              dims[2] != 2;
    failed |= acx_dataloader_dataset_shape(dl, 3, 4, dims) != -1;
    for (int e = 0; e < 2; e++) {
        int64_t *rec = recs + (size_t)e * REC_LEN;
        failed |= acx_dataloader_epoch(dl) != e;
        failed |= run_epoch(dl, b, rec);
        MPI_Allgather(rec, REC_LEN, MPI_INT64_T, all, REC_LEN, MPI_INT64_T, MPI_COMM_WORLD);
        failed |= check_stream(all, b, mode, shuffle);
    }
    if (shuffle) {
        /* epochs reshuffle: the two epochs' first batches differ somewhere
         * in the gathered stream (N = 103 makes equality astronomically unlikely) */
        int differ = 0;
        for (int i = 1; i < REC_LEN; i++)
            differ |= recs[i] != recs[REC_LEN + i];
        failed |= !any_failed(differ) ? 1 : 0;
    }
    CHECK_OK(acx_dataloader_close(dl));
    CHECK_OK(acx_dataloader_close(dl)); /* idempotent */
    const acx_batch_t *bt;
    CHECK_STATUS(acx_dataloader_next(dl, &bt), ACX_ERR_STATE, "closed");
    free(all);
    return failed;
error:
    free(all);
    return 1;
}

static int test_iterate(const char *what, int64_t batch, int split, int mode) {
    int failed = 0;
    int64_t *r0 = malloc(2 * REC_LEN * sizeof *r0), *r2 = malloc(2 * REC_LEN * sizeof *r2);
    TESTING(what);
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        failed |= run_config(batch, split, mode, shuffle, 0, r0);
        failed |= run_config(batch, split, mode, shuffle, 2, r2);
        /* the prefetch thread changes when rows are read, never which */
        failed |= memcmp(r0, r2, 2 * REC_LEN * sizeof *r0) != 0;
    }
    free(r0);
    free(r2);
    if (any_failed(failed)) {
        FAILED();
        return 1;
    }
    PASSED();
    return 0;
}

/* set_epoch in mid-epoch (prefetch running) gives exactly the sequence of a
 * fresh loader set to that epoch. */
static int test_set_epoch(void) {
    int failed = 0;
    int64_t *a = malloc(REC_LEN * sizeof *a), *c = malloc(REC_LEN * sizeof *c);
    acx_dataloader_options_t o = ACX_DATALOADER_OPTIONS_DEFAULT;
    o.batch_size = 3;
    o.even_batches = 1;
    o.drop_last = 0;
    o.split_batches = 0;
    const acx_batch_t *bt;
    acx_dataloader_t *d1 = NULL, *d2 = NULL;
    TESTING("loader: set_epoch mid-epoch == fresh loader at that epoch");
    for (int prefetch = 0; prefetch <= 3; prefetch += 3) {
        o.prefetch = prefetch;
        if (acx_dataloader_open(acc, data_path, 3, names3, &o, &d1) != ACX_OK ||
            acx_dataloader_open(acc, data_path, 3, names3, &o, &d2) != ACX_OK) {
            failed = 1;
            break;
        }
        for (int i = 0; i < 3; i++)
            failed |= acx_dataloader_next(d1, &bt) != ACX_OK;
        failed |= acx_dataloader_set_epoch(d1, 5) != ACX_OK;
        failed |= acx_dataloader_epoch(d1) != 5 || acx_dataloader_position(d1) != 0;
        failed |= acx_dataloader_set_epoch(d2, 5) != ACX_OK;
        failed |= run_epoch(d1, 3, a) || run_epoch(d2, 3, c);
        failed |= memcmp(a, c, REC_LEN * sizeof *a) != 0;
        failed |= acx_dataloader_set_epoch(d1, -1) != ACX_ERR_INVALID_ARG;
        acx_dataloader_close(d1);
        acx_dataloader_close(d2);
    }
    free(a);
    free(c);
    if (any_failed(failed)) {
        FAILED();
        return 1;
    }
    PASSED();
    return 0;
}

/* A read error (here a checksum failure in rows 50..59 of /bad) reaches
 * next() — from the prefetch thread too — as ACX_ERR_FORMAT "... is
 * damaged: ..." with HDF5's text (io/h5.c classifies checksum failures);
 * the position stays, the next call retries (and fails again), and
 * set_epoch starts over cleanly. Without shuffle the failing batch is known:
 * rank r's batch g holds rows [g*G + 4r, g*G + 4r + 4). */
static int test_read_error(void) {
    int failed = 0;
    const char *const bad[] = {"/bad"};
    acx_dataloader_options_t o = ACX_DATALOADER_OPTIONS_DEFAULT;
    o.batch_size = 4;
    o.shuffle = 0;
    o.even_batches = 1;
    o.drop_last = 0;
    o.split_batches = 0;
    TESTING("loader: damaged data -> ACX_ERR_FORMAT, retry, set_epoch");
    int64_t g_size = 4 * world, expect_k = -1;
    for (int64_t g = 0; expect_k < 0 && g * g_size < N; g++) {
        int64_t lo = g * g_size + 4 * rank;
        if (lo < 60 && lo + 4 > 50) expect_k = g;
    }
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        acx_dataloader_t *dl = NULL;
        const acx_batch_t *bt;
        o.prefetch = prefetch;
        if (acx_dataloader_open(acc, data_path, 1, bad, &o, &dl) != ACX_OK) {
            failed = 1;
            break;
        }
        int64_t k = 0, err_k = -1;
        acx_status_t st;
        while ((st = acx_dataloader_next(dl, &bt)) == ACX_OK && bt != NULL)
            k++;
        if (st != ACX_OK) {
            err_k = k;
            failed |= st != ACX_ERR_FORMAT || strstr(acx_last_error(), "'/bad'") == NULL ||
                      strstr(acx_last_error(), "is damaged") == NULL ||
                      strstr(acx_last_error(), "Fletcher32") == NULL;
            failed |= acx_dataloader_position(dl) != k;
            failed |= acx_dataloader_next(dl, &bt) != ACX_ERR_FORMAT; /* retried, fails again */
            failed |= acx_dataloader_set_epoch(dl, 1) != ACX_OK;
            failed |= acx_dataloader_next(dl, &bt) != ACX_OK || bt->index != 0 || bt->epoch != 1 ||
                      bt->indices[0] != 4 * rank;
        }
        if (err_k != expect_k) {
            fprintf(stderr, "\n[r%d] prefetch %d: error at batch %lld, expected %lld (%s)\n", rank,
                    prefetch, (long long)err_k, (long long)expect_k, acx_last_error());
            failed = 1;
        }
        acx_dataloader_close(dl);
    }
    if (any_failed(failed)) {
        FAILED();
        return 1;
    }
    PASSED();
    return 0;
}

/* ---- bad inputs: the same status and message on every rank ---- */

static int expect_open_error(const char *what, const char *path, int nds, const char *const *names,
                             int64_t batch, int drop, int split, acx_status_t expected,
                             const char *needle) {
    acx_dataloader_options_t o = ACX_DATALOADER_OPTIONS_DEFAULT;
    o.batch_size = batch;
    o.drop_last = drop;
    o.even_batches = !drop;
    o.split_batches = split;
    o.prefetch = 1;
    acx_dataloader_t *dl = NULL;
    TESTING(what);
    acx_status_t st = acx_dataloader_open(acc, path, nds, names, &o, &dl);
    int failed = st != expected || strstr(acx_last_error(), needle) == NULL || dl != NULL;
    if (failed)
        fprintf(stderr, "\n[r%d] %s: got %d (%s), expected %d with '%s'\n", rank, what, (int)st,
                acx_last_error(), (int)expected, needle);
    if (any_failed(failed)) {
        FAILED();
        return 1;
    }
    PASSED();
    return 0;
}

static int test_bad_inputs(void) {
    int failed = 0;
    char missing[320], needle[400];
    snprintf(missing, sizeof missing, "%s/no-such.h5", dir);
    snprintf(needle, sizeof needle, "cannot open data file '%s': No such file or directory",
             missing);
    failed |= expect_open_error("loader: missing file -> ACX_ERR_IO on every rank", missing, 3,
                                names3, 4, 0, 0, ACX_ERR_IO, needle);
    failed |= expect_open_error("loader: missing dataset -> ACX_ERR_IO", data_path, 2,
                                (const char *const[]){"/x", "/nope/y"}, 4, 0, 0, ACX_ERR_IO,
                                "dataset '/nope/y' not found in data file");
    failed |= expect_open_error("loader: first dimensions differ -> ACX_ERR_FORMAT", data_path, 2,
                                (const char *const[]){"/x", "/short"}, 4, 0, 0, ACX_ERR_FORMAT,
                                "datasets '/x' (103 samples) and '/short' (100 samples)");
    failed |= expect_open_error("loader: string dataset -> ACX_ERR_FORMAT", data_path, 2,
                                (const char *const[]){"/x", "/str"}, 4, 0, 0, ACX_ERR_FORMAT,
                                "'/str' in");
    failed |= expect_open_error("loader: compound dataset -> ACX_ERR_FORMAT", data_path, 1,
                                (const char *const[]){"/cmpd"}, 4, 0, 0, ACX_ERR_FORMAT,
                                "HDF5 type class compound");
    failed |=
        expect_open_error("loader: scalar dataset -> ACX_ERR_FORMAT", data_path, 1,
                          (const char *const[]){"/scalar"}, 4, 0, 0, ACX_ERR_FORMAT, "scalar");
    failed |=
        expect_open_error("loader: a group, not a dataset -> ACX_ERR_FORMAT", data_path, 1,
                          (const char *const[]){"/g"}, 4, 0, 0, ACX_ERR_FORMAT, "is not a dataset");
    /* one global batch more than N: b*W > N with drop_last (b > N on 1 rank) */
    int64_t b = N / world + 1;
    failed |= expect_open_error("loader: batch > data with drop_last -> ACX_ERR_FORMAT", data_path,
                                3, names3, b, 1, 0, ACX_ERR_FORMAT, "exceeds the 103 samples");
    failed |= expect_open_error("loader: batch_size 0 -> ACX_ERR_INVALID_ARG", data_path, 3, names3,
                                0, 0, 0, ACX_ERR_INVALID_ARG, "batch_size 0");
    failed |= expect_open_error(
        "loader: 9 datasets -> ACX_ERR_INVALID_ARG", data_path, 9,
        (const char *const[]){"/x", "/x", "/x", "/x", "/x", "/x", "/x", "/x", "/x"}, 4, 0, 0,
        ACX_ERR_INVALID_ARG, "expected 1 to 8");
    if (world > 1) {
        failed |= expect_open_error("loader: split_batches not divisible -> INVALID_ARG", data_path,
                                    3, names3, world + 1, 0, 1, ACX_ERR_INVALID_ARG,
                                    "not divisible by the world size");
        /* the same global batch served by padding without drop_last */
        acx_dataloader_options_t o = ACX_DATALOADER_OPTIONS_DEFAULT;
        o.batch_size = b;
        o.drop_last = 0;
        o.even_batches = 1;
        o.split_batches = 0;
        o.prefetch = 0;
        acx_dataloader_t *dl = NULL;
        int bad = acx_dataloader_open(acc, data_path, 3, names3, &o, &dl) != ACX_OK;
        bad |= !bad && acx_dataloader_num_batches(dl) != 1;
        acx_dataloader_close(dl);
        TESTING("loader: batch x world > data with even_batches pads");
        if (any_failed(bad)) {
            FAILED();
            failed = 1;
        } else {
            PASSED();
        }
        /* only the last rank fails: everyone returns its error, naming it */
        char who[32];
        snprintf(who, sizeof who, "rank %d: ", world - 1);
        snprintf(needle, sizeof needle, "%s", who);
        failed |= expect_open_error("loader: one rank fails -> same error on all ranks",
                                    rank == world - 1 ? missing : data_path, 3, names3, 4, 0, 0,
                                    ACX_ERR_IO, needle);
    }
    return failed;
}

int main(int argc, char **argv) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    acx_test_watchdog(240);
    if (acx_init(&argc, &argv, &cfg, &acc) != ACX_OK) {
        fprintf(stderr, "acx_init failed: %s\n", acx_last_error());
        return 99;
    }
    rank = acx_rank(acc);
    world = acx_world_size(acc);
    acx_test_rank_ = rank;

    /* a directory every rank sees: made by rank 0, name broadcast */
    if (rank == 0) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/acx-test-loader-XXXXXX", base && *base ? base : "/tmp");
        if (mkdtemp(dir) == NULL) dir[0] = '\0';
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (dir[0] == '\0') return 99;
    snprintf(data_path, sizeof data_path, "%s/data.h5", dir);
    int bad = 0;
    if (rank == 0) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        bad = make_data_file();
    }
    if (any_failed(bad)) return 99;

    int failed = 0;
    char what[128];
    snprintf(what, sizeof what, "loader: batch 4, even_batches, prefetch 0 == 2 (W=%d)", world);
    failed |= test_iterate(what, 4, 0, MODE_EVEN);
    failed |= test_iterate("loader: batch 4, drop_last", 4, 0, MODE_DROP);
    failed |=
        test_iterate("loader: batch 4, neither drop_last nor even_batches", 4, 0, MODE_NEITHER);
    failed |= test_iterate("loader: split_batches, global batch 12, even", 12, 1, MODE_EVEN);
    failed |= test_iterate("loader: split_batches, global batch 12, drop_last", 12, 1, MODE_DROP);
    failed |= test_iterate("loader: batch 1, even_batches", 1, 0, MODE_EVEN);
    failed |= test_set_epoch();
    failed |= test_read_error();
    failed |= test_bad_inputs();

    acx_barrier(acc);
    if (rank == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    failed = any_failed(failed);
    acx_finalize(acc);
    return failed ? 1 : 0;
}

/*
 * tests/mpi/test_metrics.c — metrics across ranks: acx_reduce_scalar,
 * the public all-reduce/broadcast/all-gather, and gather_for_metrics, which
 * must return every sample of an evaluation epoch exactly once although
 * even_batches padded the last batches by wrapping around.
 *
 * Case 1 sizes: 10 samples, batch 2 per rank: with 3 ranks the global batch
 * is 6, so the second global batch holds 4 real samples and 2 repeats; with
 * 4 ranks the global batch is 8 (2 real + 6 repeats in the second).
 *
 * Case 2 is the matrix of loader settings (dataset lengths 10, 11 and 3 —
 * 3 is shorter than the global batch from 2 ranks on, so padding wraps
 * around the dataset more than once; even_batches, drop_last,
 * split_batches, no padding at all; gathered to all ranks and to rank 0
 * only). Every batch's gathered dataset rows are compared with a plain-MPI
 * reference (all-gather every rank's rows and padding count, drop each
 * rank's padding tail), and each epoch's total with the dataset length:
 * exactly N rows, each once, without drop_last; the full global batches'
 * floor(N / G) * G distinct rows with it (Accelerate's gather_for_metrics).
 */
#include "tests/acx_test_mpi.h"

#define N 10

static int rank, world;

static int run(const char *data) {
    acx_accelerator_t *acc = NULL;
    acx_dataloader_t *dl;
    double v;
    CHECK_OK(acx_init(NULL, NULL, NULL, &acc));

    /* mean of 0..W-1 is (W-1)/2; sum is W(W-1)/2; max W-1 */
    CHECK_OK(acx_reduce_scalar(acc, rank, ACX_OP_AVG, &v));
    CHECK_CLOSE(v, (world - 1) / 2.0, 0, 1e-12);
    CHECK_OK(acx_reduce_scalar(acc, rank, ACX_OP_SUM, &v));
    CHECK_CLOSE(v, world * (world - 1) / 2.0, 0, 1e-12);
    CHECK_OK(acx_reduce_scalar(acc, rank, ACX_OP_MAX, &v));
    CHECK_CLOSE(v, world - 1, 0, 0);

    float buf[3] = {rank + 1.0f, 2.0f * rank, 1.0f};
    CHECK_OK(acx_all_reduce(acc, buf, buf, 3, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK_CLOSE(buf[0], world * (world + 1) / 2.0, 0, 0);
    CHECK_CLOSE(buf[1], world * (world - 1), 0, 0);
    CHECK_CLOSE(buf[2], world, 0, 0);
    acx_request_t *req;
    float avg[2] = {(float)rank, 3.0f};
    CHECK_OK(acx_all_reduce_async(acc, NULL, avg, 2, ACX_DTYPE_FLOAT32, ACX_OP_AVG, &req));
    CHECK_OK(acx_request_wait(req));
    CHECK_CLOSE(avg[0], (world - 1) / 2.0, 1e-6, 0);
    CHECK_CLOSE(avg[1], 3.0, 1e-6, 0);
    int64_t root_val = rank == world - 1 ? 4242 : -1;
    CHECK_OK(acx_broadcast(acc, &root_val, 1, ACX_DTYPE_INT64, world - 1));
    CHECK(root_val == 4242);

    acx_dataloader_options_t o = ACX_DATALOADER_OPTIONS_DEFAULT;
    o.batch_size = 2;
    o.shuffle = 1;
    o.even_batches = 1;
    o.drop_last = 0;
    CHECK_OK(acx_dataloader_open(acc, data, 1, (const char *const[]){"/v"}, &o, &dl));
    int64_t seen[N] = {0}, total = 0, padded = 0;
    int64_t out[64];
    const acx_batch_t *b;
    acx_status_t st;
    int64_t nb = 0;
    while ((st = acx_dataloader_next(dl, &b)) == ACX_OK && b != NULL) {
        CHECK(b->size == 2);
        padded += b->num_padding;
        /* per-sample "prediction": the stored value v[i] = 100 + i */
        const int32_t *vals = b->tensors[0];
        int64_t got = -1;
        CHECK_OK(acx_gather_for_metrics(acc, b, vals, sizeof(int32_t), out, 64, 0, &got));
        const int32_t *o32 = (const int32_t *)out;
        for (int64_t i = 0; i < got; i++) {
            CHECK(o32[i] >= 100 && o32[i] < 100 + N);
            seen[o32[i] - 100]++;
        }
        total += got;
        nb++;
    }
    CHECK(st == ACX_OK && b == NULL); /* the end of the epoch */
    int64_t G = 2 * world, expect_batches = (N + G - 1) / G;
    CHECK(nb == expect_batches);
    CHECK(total == N);
    for (int i = 0; i < N; i++)
        CHECK(seen[i] == 1);
    /* the padding is exactly what makes the last global batch full */
    int64_t all_pad = 0;
    CHECK_OK(acx_all_reduce(acc, &padded, &all_pad, 1, ACX_DTYPE_INT64, ACX_OP_SUM));
    CHECK(all_pad == expect_batches * G - N);

    /* to_main_only: rank 0 gets everything, others nothing; a too-small output is an error on every
     * rank */
    CHECK_OK(acx_dataloader_set_epoch(dl, 1));
    CHECK_OK(acx_dataloader_next(dl, &b));
    int64_t got = -1;
    CHECK_OK(acx_gather_for_metrics(acc, b, b->tensors[0], 4, out, 64, 1, &got));
    CHECK(got == (rank == 0 ? G : 0)); /* the first global batch is all real (G <= 8 < N) */
    CHECK_STATUS(acx_gather_for_metrics(acc, b, b->tensors[0], 4, out, 1, 0, &got),
                 ACX_ERR_INVALID_ARG, "output holds 1 samples");
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

/* Plain-MPI reference for one batch: every rank's rows, in rank order,
 * without each rank's trailing num_padding rows, into ref [capacity];
 * returns their number, or -1 if they do not fit. */
static int64_t reference_rows(const acx_batch_t *b, int64_t *ref, int64_t capacity) {
    int64_t mine[2] = {b->size, b->num_padding}, all[2 * 8];
    int sizes[8], displs[8], total = 0;
    int64_t everything[256];
    if (world > 8) return -1;
    MPI_Allgather(mine, 2, MPI_INT64_T, all, 2, MPI_INT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < world; r++) {
        sizes[r] = (int)all[2 * r];
        displs[r] = total;
        total += sizes[r];
    }
    if (total > 256) return -1;
    MPI_Allgatherv(b->indices, (int)b->size, MPI_INT64_T, everything, sizes, displs, MPI_INT64_T,
                   MPI_COMM_WORLD);
    int64_t n = 0;
    for (int r = 0; r < world; r++)
        for (int64_t j = 0; j < all[2 * r] - all[2 * r + 1]; j++) {
            if (n >= capacity) return -1;
            ref[n++] = everything[displs[r] + j];
        }
    return n;
}

/* One epoch of a loader over `path` (n rows) with the given settings:
 * gather every batch's dataset rows with acx_gather_for_metrics and check
 * them against the reference, then the epoch's totals. Returns 0 ok, 1
 * failed, 2 not applicable here (the loader refuses the settings on this
 * world size, or ranks would run different numbers of batches). */
static int gather_epoch(acx_accelerator_t *acc, const char *path, int64_t n, int64_t batch,
                        int split, int drop_last, int even, int to_main_only) {
    acx_dataloader_t *dl = NULL;
    acx_dataloader_options_t o = ACX_DATALOADER_OPTIONS_DEFAULT;
    o.batch_size = split ? batch * world : batch;
    o.split_batches = split;
    o.drop_last = drop_last;
    o.even_batches = even;
    o.shuffle = 1;
    int64_t G = batch * world;        /* the global batch either way */
    if (drop_last && G > n) return 2; /* nothing to evaluate: open refuses it */
    CHECK_OK(acx_dataloader_open(acc, path, 1, (const char *const[]){"/v"}, &o, &dl));
    int64_t nb = acx_dataloader_num_batches(dl), nb_min = nb, nb_max = nb;
    MPI_Allreduce(MPI_IN_PLACE, &nb_min, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &nb_max, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (nb_min != nb_max) { /* without even_batches: gather_for_metrics is not for this */
        CHECK(!even && !drop_last);
        CHECK_OK(acx_dataloader_close(dl));
        return 2;
    }
    int64_t seen[16] = {0}, total = 0, out[256], ref[256];
    const acx_batch_t *b;
    acx_status_t st;
    while ((st = acx_dataloader_next(dl, &b)) == ACX_OK && b != NULL) {
        int64_t got = -1, want = reference_rows(b, ref, 256);
        CHECK(want >= 0);
        CHECK_OK(acx_gather_for_metrics(acc, b, b->indices, sizeof(int64_t), out, 256, to_main_only,
                                        &got));
        if (to_main_only && rank != 0) {
            CHECK(got == 0);
            continue;
        }
        CHECK(got == want);
        for (int64_t i = 0; i < got; i++) {
            CHECK(out[i] == ref[i]);
            CHECK(out[i] >= 0 && out[i] < n);
            seen[out[i]]++;
        }
        total += got;
    }
    CHECK(st == ACX_OK && b == NULL); /* the end of the epoch */
    if (!to_main_only || rank == 0) {
        int64_t expect = drop_last ? n / G * G : n;
        CHECK(total == expect);
        for (int64_t i = 0; i < n; i++)
            CHECK(seen[i] <= 1);
    }
    CHECK_OK(acx_dataloader_close(dl));
    return 0;
error:
    if (dl) acx_dataloader_close(dl);
    return 1;
}

static int run_matrix(char paths[][1100]) {
    static const int64_t lengths[3] = {10, 11, 3};
    static const struct {
        int split, drop_last, even, to_main_only;
    } settings[] = {
        {0, 0, 1, 0}, /* even_batches (the default) */
        {0, 0, 1, 1}, /* ... gathered to rank 0 only */
        {1, 0, 1, 0}, /* split_batches + even_batches */
        {0, 1, 0, 0}, /* drop_last: no padding, the remainder never seen */
        {1, 1, 0, 0}, /* split_batches + drop_last */
        {0, 0, 0, 0}, /* neither: a short last batch where every rank has one */
    };
    acx_accelerator_t *acc = NULL;
    int ran = 0;
    CHECK_OK(acx_init(NULL, NULL, NULL, &acc));
    for (int d = 0; d < 3; d++)
        for (size_t k = 0; k < sizeof settings / sizeof settings[0]; k++) {
            int r = gather_epoch(acc, paths[d], lengths[d], 2, settings[k].split,
                                 settings[k].drop_last, settings[k].even, settings[k].to_main_only);
            if (r == 1) {
                fprintf(stderr,
                        "[r%d] gather_for_metrics: N %lld split %d drop_last %d even %d to_main %d "
                        "failed\n",
                        rank, (long long)lengths[d], settings[k].split, settings[k].drop_last,
                        settings[k].even, settings[k].to_main_only);
                goto error;
            }
            ran += r == 0;
        }
    /* even_batches with every length always runs: 3 lengths x 3 settings */
    CHECK(ran >= 9);
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 120, &rank, &world);
    char data[1100], name[64];
    snprintf(name, sizeof name, "metrics_%d.h5", world);
    acx_test_tmp_path(data, sizeof data, name);
    int32_t v[16];
    for (int i = 0; i < 16; i++)
        v[i] = 100 + i;
    int failed = acx_test_write_i32(rank, data, "v", v, N);
    TESTING("reduce_scalar, all_reduce, broadcast, gather_for_metrics without padding");
    if (!failed) failed = run(data);
    failed = acx_test_report(failed);

    /* datasets of 10, 11 and 3 rows for the matrix */
    static char paths[3][1100];
    static const int lengths[3] = {10, 11, 3};
    for (int d = 0; d < 3 && !failed; d++) {
        snprintf(name, sizeof name, "metrics_%d_n%d.h5", world, lengths[d]);
        acx_test_tmp_path(paths[d], sizeof paths[d], name);
        failed = acx_test_write_i32(rank, paths[d], "v", v, (hsize_t)lengths[d]);
    }
    TESTING("gather_for_metrics: N 10/11/3 x even/drop_last/split/neither/to_main");
    if (!failed) failed = run_matrix(paths);
    failed = acx_test_report(failed) || failed;
    MPI_Finalize();
    return failed ? 1 : 0;
}

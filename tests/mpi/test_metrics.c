/*
 * tests/mpi/test_metrics.c — metrics across ranks: acx_reduce_scalar,
 * the public all-reduce/broadcast/all-gather, and gather_for_metrics, which
 * must return every sample of an evaluation epoch exactly once although
 * even_batches padded the last batches by wrapping around.
 *
 * Sizes: 10 samples, batch 2 per rank: with 3 ranks the global batch is 6, so
 * the second global batch holds 4 real samples and 2 repeats; with 4 ranks
 * the global batch is 8 (2 real + 6 repeats in the second).
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
    while ((st = acx_dataloader_next(dl, &b)) == ACX_OK) {
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
    CHECK(st == ACX_END_OF_DATA);
    int64_t G = 2 * world, expect_batches = (N + G - 1) / G;
    CHECK(nb == expect_batches);
    CHECK(total == N);
    for (int i = 0; i < N; i++) CHECK(seen[i] == 1);
    /* the padding is exactly what makes the last global batch full */
    int64_t all_pad = 0;
    CHECK_OK(acx_all_reduce(acc, &padded, &all_pad, 1, ACX_DTYPE_INT64, ACX_OP_SUM));
    CHECK(all_pad == expect_batches * G - N);

    /* to_main_only: rank 0 gets everything, others nothing; a too-small output is an error on every rank */
    CHECK_OK(acx_dataloader_set_epoch(dl, 1));
    CHECK_OK(acx_dataloader_next(dl, &b));
    int64_t got = -1;
    CHECK_OK(acx_gather_for_metrics(acc, b, b->tensors[0], 4, out, 64, 1, &got));
    CHECK(got == (rank == 0 ? G : 0)); /* the first global batch is all real (G <= 8 < N) */
    CHECK_STATUS(acx_gather_for_metrics(acc, b, b->tensors[0], 4, out, 1, 0, &got), ACX_ERR_INVALID_ARG,
                 "output holds 1 samples");
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
    int32_t v[N];
    for (int i = 0; i < N; i++) v[i] = 100 + i;
    int failed = acx_test_write_i32(rank, data, "v", v, N);
    TESTING("reduce_scalar, all_reduce, broadcast, gather_for_metrics without padding");
    if (!failed) failed = run(data);
    failed = acx_test_report(failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}

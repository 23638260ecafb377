/*
 * tests/mpi/test_eval.c — the evaluation helpers of acx/collectives.h:
 * acx_reduce (sum/mean/max/min over ranks), acx_pad_across_processes,
 * main_process_first (world and node forms) and the cross-rank trigger.
 *
 * Every expected value is computed here from the per-rank input formulas
 * (each rank knows every other rank's input), not with acx:
 *   - reduce: float32 inputs that are multiples of 1/4 (their sums are
 *     exact), so sum == the float64 sum and mean == (float)(sum / W);
 *     int32 max over values whose maximum moves between ranks; int64 sums
 *     beyond 2^32; float16 sums of small integers built bit by bit;
 *   - pad: rank r has r + 1 rows of 3 elements 100 r + j; after padding to W
 *     rows and an all-gather every rank's rows and padding are where they
 *     must be;
 *   - main_process_first: the main process sleeps, then writes a file in
 *     the block; every other rank must find it complete inside its block;
 *   - trigger: one rank sets it at iteration 3 only; every rank's check
 *     reports it at iteration 3 and at no other.
 * Run with mpirun -np 1..4.
 */
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/acx_test_mpi.h"

static int rank_, size_;
static acx_accelerator_t *acc;

/* float16 bits of a small positive integer k (1..2048), without half.h:
 * exponent floor(log2 k) + 15, the bits below the leading one as fraction. */
static uint16_t f16_of_int(unsigned k) {
    int e = 0;
    while ((k >> (e + 1)) != 0)
        e++;
    return (uint16_t)(((unsigned)(e + 15) << 10) | (((k << 10) >> e) & 0x3ffu));
}

/* ---- reduce ---- */

static float in_f32(int r, int i) { return (float)((r + 1) * (i + 1)) * 0.5f + (float)r * 0.25f; }
static int32_t in_i32(int r, int i) { return ((i * 7 + r * 3) % 5) - r; }

static int test_reduce(void) {
    enum { N = 37 };
    float x[N], y[N];
    int32_t a[N], m[N];
    for (int i = 0; i < N; i++) {
        x[i] = in_f32(rank_, i);
        a[i] = in_i32(rank_, i);
    }
    /* sum and mean of float32 */
    CHECK_OK(acx_reduce(acc, x, y, N, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int r = 0; r < size_; r++)
            s += in_f32(r, i);
        CHECK(y[i] == (float)s);
        CHECK(x[i] == in_f32(rank_, i)); /* the input is left alone */
    }
    CHECK_OK(acx_reduce(acc, x, y, N, ACX_DTYPE_FLOAT32, ACX_OP_AVG));
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int r = 0; r < size_; r++)
            s += in_f32(r, i);
        CHECK(y[i] == (float)(s / size_));
    }
    /* in place (sendbuf NULL), mean of float64 */
    double d[3] = {rank_, 1.0, -2.5 * rank_};
    CHECK_OK(acx_reduce(acc, NULL, d, 3, ACX_DTYPE_FLOAT64, ACX_OP_AVG));
    CHECK_CLOSE(d[0], (size_ - 1) / 2.0, 1e-15, 0);
    CHECK(d[1] == 1.0);
    CHECK_CLOSE(d[2], -2.5 * (size_ - 1) / 2.0, 1e-15, 0);
    /* max and min of int32, in place with sendbuf == recvbuf */
    memcpy(m, a, sizeof a);
    CHECK_OK(acx_reduce(acc, m, m, N, ACX_DTYPE_INT32, ACX_OP_MAX));
    for (int i = 0; i < N; i++) {
        int32_t want = in_i32(0, i);
        for (int r = 1; r < size_; r++)
            want = in_i32(r, i) > want ? in_i32(r, i) : want;
        CHECK(m[i] == want);
    }
    CHECK_OK(acx_reduce(acc, a, m, N, ACX_DTYPE_INT32, ACX_OP_MIN));
    for (int i = 0; i < N; i++) {
        int32_t want = in_i32(0, i);
        for (int r = 1; r < size_; r++)
            want = in_i32(r, i) < want ? in_i32(r, i) : want;
        CHECK(m[i] == want);
    }
    /* int64 sum past 32 bits */
    int64_t big = ((int64_t)1 << 40) + rank_, bigsum = 0;
    CHECK_OK(acx_reduce(acc, &big, &bigsum, 1, ACX_DTYPE_INT64, ACX_OP_SUM));
    CHECK(bigsum == ((int64_t)size_ << 40) + (int64_t)size_ * (size_ - 1) / 2);
    /* float16 sum of small integers: exact, bit for bit */
    uint16_t h[4], hs[4];
    for (int i = 0; i < 4; i++)
        h[i] = f16_of_int((unsigned)(rank_ + i + 1));
    CHECK_OK(acx_reduce(acc, h, hs, 4, ACX_DTYPE_FLOAT16, ACX_OP_SUM));
    for (int i = 0; i < 4; i++) {
        unsigned s = 0;
        for (int r = 0; r < size_; r++)
            s += (unsigned)(r + i + 1);
        CHECK(hs[i] == f16_of_int(s));
    }
    /* the scalar form agrees with the array form */
    double sv = 0, av = rank_ * 0.5;
    CHECK_OK(acx_reduce_scalar(acc, rank_ * 0.5, ACX_OP_AVG, &sv));
    CHECK_OK(acx_reduce(acc, NULL, &av, 1, ACX_DTYPE_FLOAT64, ACX_OP_AVG));
    CHECK(sv == av);
    CHECK_CLOSE(sv, (size_ - 1) * 0.25, 1e-15, 0);
    /* errors, the same on every rank: an integer mean, prod, a NULL output */
    CHECK_STATUS(acx_reduce(acc, a, m, N, ACX_DTYPE_INT32, ACX_OP_AVG), ACX_ERR_NOT_SUPPORTED,
                 "int32");
    CHECK_STATUS(acx_reduce(acc, &big, &bigsum, 1, ACX_DTYPE_INT64, ACX_OP_AVG),
                 ACX_ERR_NOT_SUPPORTED, "not an integer");
    CHECK_STATUS(acx_reduce(acc, x, y, N, ACX_DTYPE_FLOAT32, ACX_OP_PROD), ACX_ERR_INVALID_ARG,
                 "op 4");
    CHECK_STATUS(acx_reduce(acc, x, NULL, N, ACX_DTYPE_FLOAT32, ACX_OP_SUM), ACX_ERR_INVALID_ARG,
                 "recvbuf");
    CHECK_STATUS(acx_reduce_scalar(acc, 1.0, ACX_OP_SUM, NULL), ACX_ERR_INVALID_ARG, "out_p");
    CHECK_OK(acx_reduce(acc, NULL, NULL, 0, ACX_DTYPE_FLOAT32, ACX_OP_SUM)); /* empty is fine */
    return 0;
error:
    return 1;
}

/* ---- pad_across_processes ---- */

enum { COLS = 3 };

static float value_of(int r, int row, int col) { return (float)(100 * r + row * COLS + col); }

static int test_pad(void) {
    void *out = NULL;
    float *all = NULL;
    int64_t max_rows = -1;
    int rows = rank_ + 1;
    float mine[4 * COLS];
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < COLS; c++)
            mine[i * COLS + c] = value_of(rank_, i, c);

    /* pad at the end with -1, then all-gather the equal-sized buffers */
    CHECK_OK(acx_pad_across_processes(acc, mine, rows, COLS, ACX_DTYPE_FLOAT32, -1.0, 0, &out,
                                      &max_rows));
    CHECK(max_rows == size_);
    const float *p = out;
    for (int i = 0; i < size_; i++)
        for (int c = 0; c < COLS; c++)
            CHECK(p[i * COLS + c] == (i < rows ? value_of(rank_, i, c) : -1.0f));
    all = malloc((size_t)size_ * size_ * COLS * sizeof *all);
    CHECK(all != NULL);
    CHECK_OK(acx_all_gather(acc, out, all, (size_t)size_ * COLS, ACX_DTYPE_FLOAT32));
    for (int q = 0; q < size_; q++)
        for (int i = 0; i < size_; i++)
            for (int c = 0; c < COLS; c++)
                CHECK(all[(q * size_ + i) * COLS + c] == (i <= q ? value_of(q, i, c) : -1.0f));
    free(out);
    out = NULL;

    /* pad_first: the padding rows come first */
    CHECK_OK(acx_pad_across_processes(acc, mine, rows, COLS, ACX_DTYPE_FLOAT32, 0.5, 1, &out,
                                      &max_rows));
    CHECK(max_rows == size_);
    p = out;
    for (int i = 0; i < size_; i++) {
        int pad = size_ - rows;
        for (int c = 0; c < COLS; c++)
            CHECK(p[i * COLS + c] == (i < pad ? 0.5f : value_of(rank_, i - pad, c)));
    }
    free(out);
    out = NULL;

    /* integers: rank 0 has no rows at all (buf NULL); pad value 7 */
    int64_t iv[4] = {10 * rank_, 10 * rank_ + 1, 10 * rank_ + 2, 10 * rank_ + 3};
    int irows = rank_; /* 0 .. W-1 rows of 1 element */
    CHECK_OK(acx_pad_across_processes(acc, rank_ == 0 ? NULL : iv, irows, 1, ACX_DTYPE_INT64, 7, 0,
                                      &out, &max_rows));
    CHECK(out != NULL);
    CHECK(max_rows == size_ - 1);
    for (int i = 0; i < size_ - 1; i++)
        CHECK(((int64_t *)out)[i] == (i < irows ? iv[i] : 7));
    free(out);
    out = NULL;

    /* 16-bit pad values, rounded once: bfloat16 1.5 = 0x3fc0, float16 -2 = 0xc000,
     * float16 0.1 = 0x2e66 (0.0999755859375, the nearest) */
    uint16_t h[4] = {0x1111, 0x2222, 0x3333, 0x4444};
    CHECK_OK(
        acx_pad_across_processes(acc, h, rows, 1, ACX_DTYPE_BFLOAT16, 1.5, 0, &out, &max_rows));
    for (int i = 0; i < size_; i++)
        CHECK(((uint16_t *)out)[i] == (i < rows ? h[i] : 0x3fc0));
    free(out);
    CHECK_OK(acx_pad_across_processes(acc, h, rows, 1, ACX_DTYPE_FLOAT16, -2, 1, &out, &max_rows));
    CHECK(((uint16_t *)out)[size_ - 1] == h[rows - 1]);
    if (rows < size_) CHECK(((uint16_t *)out)[0] == 0xc000);
    free(out);
    CHECK_OK(acx_pad_across_processes(acc, h, rows, 1, ACX_DTYPE_FLOAT16, 0.1, 0, &out, &max_rows));
    if (rows < size_) CHECK(((uint16_t *)out)[size_ - 1] == 0x2e66);
    free(out);
    out = NULL;

    /* nothing anywhere: an empty but non-NULL result */
    CHECK_OK(acx_pad_across_processes(acc, NULL, 0, 5, ACX_DTYPE_INT8, -1, 0, &out, &max_rows));
    CHECK(out != NULL && max_rows == 0);
    free(out);
    out = NULL;

    /* a pad value the dtype cannot hold, the same on every rank */
    CHECK_STATUS(
        acx_pad_across_processes(acc, mine, rows, COLS, ACX_DTYPE_INT8, 300, 0, &out, &max_rows),
        ACX_ERR_INVALID_ARG, "300");
    CHECK_STATUS(
        acx_pad_across_processes(acc, mine, rows, COLS, ACX_DTYPE_INT32, 0.5, 0, &out, &max_rows),
        ACX_ERR_INVALID_ARG, "int32");
    CHECK_STATUS(
        acx_pad_across_processes(acc, mine, -1, COLS, ACX_DTYPE_FLOAT32, 0, 0, &out, &max_rows),
        ACX_ERR_INVALID_ARG, "rows -1");
    CHECK(out == NULL);
    free(all);
    return 0;
error:
    free(out);
    free(all);
    return 1;
}

/* ---- main_process_first ---- */

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* The "work" of the first process: write path after a delay, so that a
 * rank that did not wait would find it missing or empty. */
static int write_slowly(const char *path, const char *text) {
    sleep_ms(300);
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) return 1;
    fputs(text, f);
    return fclose(f) != 0 || rename(tmp, path) != 0;
}

static int file_says(const char *path, const char *text) {
    char got[64] = "";
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    int ok = fgets(got, sizeof got, f) != NULL && strcmp(got, text) == 0;
    fclose(f);
    return ok;
}

static int test_main_first(void) {
    char path[1100], name[64];
    snprintf(name, sizeof name, "main_first_%d.txt", size_);
    acx_test_tmp_path(path, sizeof path, name);
    if (rank_ == 0) unlink(path);
    CHECK_OK(acx_barrier(acc));

    /* misuse: local checks, no communication */
    CHECK_STATUS(acx_main_process_first_end(acc), ACX_ERR_STATE, "no block");

    CHECK_OK(acx_main_process_first_begin(acc));
    CHECK_STATUS(acx_main_process_first_begin(acc), ACX_ERR_STATE, "do not nest");
    CHECK_STATUS(acx_local_main_process_first_end(acc), ACX_ERR_STATE, "other kind");
    if (acx_is_main_process(acc))
        CHECK(write_slowly(path, "dataset ready") == 0);
    else
        CHECK(file_says(path, "dataset ready")); /* the main process has finished its block */
    CHECK_OK(acx_main_process_first_end(acc));

    /* the node form: each node's local main process writes its own file */
    snprintf(name, sizeof name, "local_first_%d_node%d.txt", size_, acx_node_rank(acc));
    acx_test_tmp_path(path, sizeof path, name);
    if (acx_is_local_main_process(acc)) unlink(path);
    CHECK_OK(acx_barrier(acc));
    CHECK_OK(acx_local_main_process_first_begin(acc));
    if (acx_is_local_main_process(acc))
        CHECK(write_slowly(path, "node cache ready") == 0);
    else
        CHECK(file_says(path, "node cache ready"));
    CHECK_OK(acx_local_main_process_first_end(acc));
    return 0;
error:
    return 1;
}

/* ---- the trigger ---- */

static int test_trigger(void) {
    int setter = size_ > 2 ? 2 : size_ - 1, t = -1;
    CHECK_OK(acx_check_trigger(acc, &t)); /* nothing set yet */
    CHECK(t == 0);
    for (int it = 0; it < 7; it++) {
        if (rank_ == setter && it == 3) CHECK_OK(acx_set_trigger(acc));
        /* iteration 5: every rank sets it, twice: still one report */
        if (it == 5) {
            CHECK_OK(acx_set_trigger(acc));
            CHECK_OK(acx_set_trigger(acc));
        }
        t = -1;
        CHECK_OK(acx_check_trigger(acc, &t));
        if (t != (it == 3 || it == 5)) {
            fprintf(stderr, "[r%d] iteration %d: check_trigger reported %d\n", rank_, it, t);
            goto error;
        }
    }
    CHECK_STATUS(acx_check_trigger(acc, NULL), ACX_ERR_INVALID_ARG, "triggered_p");
    CHECK_STATUS(acx_set_trigger(NULL), ACX_ERR_INVALID_ARG, "acc");
    return 0;
error:
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 120, &rank_, &size_);
    if (acx_init(NULL, NULL, NULL, &acc) != ACX_OK) {
        fprintf(stderr, "[r%d] acx_init: %s\n", rank_, acx_last_error());
        MPI_Abort(MPI_COMM_WORLD, 99);
    }
    int failed = 0;
    failed |=
        acx_test_run_case("reduce: sum/mean/max/min, f32 f64 i32 i64 f16, errors", test_reduce);
    failed |= acx_test_run_case("pad_across_processes: r+1 rows, pad_first, dtypes", test_pad);
    failed |=
        acx_test_run_case("main_process_first (world and node): others wait", test_main_first);
    failed |=
        acx_test_run_case("set_trigger/check_trigger: set at 3 -> seen at 3 only", test_trigger);
    acx_finalize(acc);
    MPI_Finalize();
    return failed ? 1 : 0;
}

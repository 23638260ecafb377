/*
 * tests/gpu/test_nccl.c — the NCCL backend (collectives/nccl/) on device
 * buffers, against values every rank computes itself; exit 77 (skip)
 * without a GPU, or when there are more ranks than devices (NCCL refuses
 * two ranks of one communicator on one device).
 *
 * Every rank's input is a small integer chosen by (rank, index, salt), so
 * sums, products, maxima and minima are exact in every dtype (int8 to
 * float64, float16 and bfloat16 included) and each rank knows every other
 * rank's input: the expected result is computed in double and must match
 * bit for bit; only avg (ncclAvg) is compared within a rounding of its
 * dtype. Covers all-reduce (every dtype and op; in and out of place;
 * blocking and non-blocking, several requests in flight), reduce-scatter,
 * all-gather, broadcast, gather (every root, in place), barrier, ordering
 * after the compute stream, a split communicator, and argument errors.
 *
 * `test_nccl --bench MiB` instead times a float32 sum all-reduce of MiB
 * mebibytes and prints nccl-tests' algbw and busbw (busbw = algbw * 2(n-1)/n).
 */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "base/half.h"
#include "collectives/nccl/coll_nccl.h"
#include "device/device.h"
#include "tests/acx_test_mpi.h"

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t cu_ret_ = (call);                                                              \
        if (cu_ret_ != cudaSuccess) {                                                              \
            fprintf(stderr, "\n[r%d] %s:%d: %s: %s\n", acx_test_rank_, __FILE__, __LINE__, #call,  \
                    cudaGetErrorString(cu_ret_));                                                  \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

static acx_comm_t *comm;
static int rank_, size_;

/* ---- values ---- */

/* Inputs repeat with this period (element i gets the values of i % PERIOD),
 * so expected results are computed once per period. */
#define PERIOD 4099
static double expected[PERIOD];

static const acx_dtype_t dtypes[] = {ACX_DTYPE_FLOAT32,  ACX_DTYPE_FLOAT64, ACX_DTYPE_FLOAT16,
                                     ACX_DTYPE_BFLOAT16, ACX_DTYPE_INT8,    ACX_DTYPE_UINT8,
                                     ACX_DTYPE_INT32,    ACX_DTYPE_INT64};
#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])

static int is_float(acx_dtype_t dt) {
    return dt == ACX_DTYPE_FLOAT32 || dt == ACX_DTYPE_FLOAT64 || dt == ACX_DTYPE_FLOAT16 ||
           dt == ACX_DTYPE_BFLOAT16;
}

/* A small integer: products over 4 ranks stay within int8, sums exact
 * everywhere. PROD draws from {1, 2} (and -1 for signed types). */
static double gen(acx_dtype_t dt, acx_red_op_t op, int rank, size_t i, int salt) {
    uint32_t h = acx_test_hash3(rank, i, salt);
    if (op == ACX_OP_PROD) {
        static const double signed_set[3] = {1, 2, -1}, unsigned_set[2] = {1, 2};
        return dt == ACX_DTYPE_UINT8 ? unsigned_set[h % 2] : signed_set[h % 3];
    }
    return dt == ACX_DTYPE_UINT8 ? (double)(h % 7) : (double)(h % 7) - 3;
}

static void store(void *buf, acx_dtype_t dt, size_t i, double x) {
    switch (dt) {
    case ACX_DTYPE_FLOAT32: ((float *)buf)[i] = (float)x; break;
    case ACX_DTYPE_FLOAT64: ((double *)buf)[i] = x; break;
    case ACX_DTYPE_FLOAT16: ((uint16_t *)buf)[i] = acx_f16_from_f64(x); break;
    case ACX_DTYPE_BFLOAT16: ((uint16_t *)buf)[i] = acx_bf16_from_f64(x); break;
    case ACX_DTYPE_INT8: ((int8_t *)buf)[i] = (int8_t)x; break;
    case ACX_DTYPE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)x; break;
    case ACX_DTYPE_INT32: ((int32_t *)buf)[i] = (int32_t)x; break;
    default: ((int64_t *)buf)[i] = (int64_t)x; break;
    }
}

static double load(const void *buf, acx_dtype_t dt, size_t i) {
    switch (dt) {
    case ACX_DTYPE_FLOAT32: return ((const float *)buf)[i];
    case ACX_DTYPE_FLOAT64: return ((const double *)buf)[i];
    case ACX_DTYPE_FLOAT16: return acx_f16_to_f32(((const uint16_t *)buf)[i]);
    case ACX_DTYPE_BFLOAT16: return acx_bf16_to_f32(((const uint16_t *)buf)[i]);
    case ACX_DTYPE_INT8: return ((const int8_t *)buf)[i];
    case ACX_DTYPE_UINT8: return ((const uint8_t *)buf)[i];
    case ACX_DTYPE_INT32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

/* op over every rank's gen(...) for element i */
static double reduce_all(acx_dtype_t dt, acx_red_op_t op, size_t i, int salt) {
    double r = gen(dt, op, 0, i, salt);
    for (int q = 1; q < size_; q++) {
        double x = gen(dt, op, q, i, salt);
        switch (op) {
        case ACX_OP_PROD: r *= x; break;
        case ACX_OP_MAX: r = x > r ? x : r; break;
        case ACX_OP_MIN: r = x < r ? x : r; break;
        default: r += x; break;
        }
    }
    return op == ACX_OP_AVG ? r / size_ : r;
}

/* got == want exactly, or for avg within a rounding of dtype */
static int close_enough(double got, double want, acx_dtype_t dt, acx_red_op_t op) {
    if (op != ACX_OP_AVG) return got == want;
    double u = dt == ACX_DTYPE_FLOAT64   ? 0x1p-50
               : dt == ACX_DTYPE_FLOAT32 ? 0x1p-21
               : dt == ACX_DTYPE_FLOAT16 ? 0x1p-9
                                         : 0x1p-6;
    return fabs(got - want) <= u * (fabs(want) > 1 ? fabs(want) : 1);
}

/* A host buffer [n] of dt filled with this rank's values for (op, salt). */
static void *host_fill(acx_dtype_t dt, acx_red_op_t op, size_t n, int salt) {
    void *h = malloc(n * acx_dtype_size(dt) + 1);
    if (h != NULL)
        for (size_t i = 0; i < n; i++)
            store(h, dt, i, gen(dt, op, rank_, i % PERIOD, salt));
    return h;
}

static void *dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes + 1) != cudaSuccess) return NULL;
    if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* ---- all-reduce ---- */

static const size_t sizes[] = {0, 1, 1000, 1u << 20};
#define NUM_SIZES (sizeof sizes / sizeof sizes[0])

/* One all-reduce of n elements; mode 0 blocking out of place, 1 blocking in
 * place, 2 non-blocking (test until done, then wait). */
static int check_all_reduce(acx_dtype_t dt, acx_red_op_t op, size_t n, int mode) {
    size_t es = acx_dtype_size(dt);
    int salt = (int)dt * 16 + (int)op;
    void *h = host_fill(dt, op, n, salt), *out = malloc(n * es + 1);
    void *d_in = NULL, *d_out = NULL;
    CHECK(h && out);
    d_in = dev_copy(h, n * es);
    CHECK(d_in != NULL);
    if (mode == 1) {
        d_out = d_in;
    } else {
        CU(cudaMalloc(&d_out, n * es + 1));
    }
    if (mode == 2) {
        acx_coll_req_t *req = NULL;
        int done = 0;
        CHECK_OK(comm->ops->all_reduce_start(comm, d_in, d_out, n, dt, op, &req));
        while (!done)
            CHECK_OK(comm->ops->test(req, &done));
        CHECK_OK(comm->ops->wait(req));
    } else {
        CHECK_OK(comm->ops->all_reduce(comm, d_in, d_out, n, dt, op));
    }
    if (n) CU(cudaMemcpy(out, d_out, n * es, cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < n && j < PERIOD; j++)
        expected[j] = reduce_all(dt, op, j, salt);
    for (size_t i = 0; i < n; i++) {
        double got = load(out, dt, i);
        if (!close_enough(got, expected[i % PERIOD], dt, op)) {
            fprintf(stderr, "\n[r%d] all-reduce %s op %d n %zu mode %d [%zu]: got %g, want %g\n",
                    rank_, acx_dtype_name(dt), (int)op, n, mode, i, got, expected[i % PERIOD]);
            TEST_ERROR;
        }
    }
    if (d_out != d_in) cudaFree(d_out);
    cudaFree(d_in);
    free(h);
    free(out);
    return 0;
error:
    if (d_out != d_in) cudaFree(d_out);
    cudaFree(d_in);
    free(h);
    free(out);
    return 1;
}

static int test_all_reduce(void) {
    for (size_t k = 0; k < NUM_DTYPES; k++)
        for (int op = 0; op < ACX_OP_COUNT_; op++) {
            if (op == ACX_OP_AVG && !is_float(dtypes[k])) continue;
            for (size_t s = 0; s < NUM_SIZES; s++)
                for (int mode = 0; mode < 3; mode++)
                    if (check_all_reduce(dtypes[k], (acx_red_op_t)op, sizes[s], mode)) return 1;
        }
    return 0;
}

/* Three all-reduces in flight, waited for in reverse order. */
static int test_in_flight(void) {
    const size_t n = 1 << 16;
    float *h = malloc(n * 4), *out = malloc(n * 4);
    float *d[3] = {NULL, NULL, NULL};
    acx_coll_req_t *req[3] = {NULL, NULL, NULL};
    CHECK(h && out);
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < n; i++)
            h[i] = (float)(rank_ + k + (int)(i % 5));
        d[k] = dev_copy(h, n * 4);
        CHECK(d[k] != NULL);
    }
    for (int k = 0; k < 3; k++)
        CHECK_OK(comm->ops->all_reduce_start(comm, d[k], d[k], n, ACX_DTYPE_FLOAT32, ACX_OP_SUM,
                                             &req[k]));
    for (int k = 2; k >= 0; k--) {
        CHECK_OK(comm->ops->wait(req[k]));
        req[k] = NULL;
    }
    for (int k = 0; k < 3; k++) {
        CU(cudaMemcpy(out, d[k], n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++)
            CHECK(out[i] == (float)(size_ * (size_ - 1) / 2 + size_ * (k + (int)(i % 5))));
    }
    for (int k = 0; k < 3; k++)
        cudaFree(d[k]);
    free(h);
    free(out);
    return 0;
error:
    for (int k = 0; k < 3; k++) {
        if (req[k]) comm->ops->wait(req[k]);
        cudaFree(d[k]);
    }
    free(h);
    free(out);
    return 1;
}

/* ---- reduce-scatter, all-gather, broadcast, gather ---- */

static int test_reduce_scatter(void) {
    const size_t n = 3001; /* per rank */
    size_t total = n * (size_t)size_;
    void *h = NULL, *out = NULL, *d_in = NULL, *d_out = NULL;
    for (int in_place = 0; in_place < 2; in_place++)
        for (int bf = 0; bf < 2; bf++) {
            acx_dtype_t dt = bf ? ACX_DTYPE_BFLOAT16 : ACX_DTYPE_FLOAT32;
            size_t es = acx_dtype_size(dt);
            h = host_fill(dt, ACX_OP_SUM, total, 77);
            out = malloc(n * es);
            CHECK(h && out);
            d_in = dev_copy(h, total * es);
            CHECK(d_in != NULL);
            if (in_place) {
                d_out = (char *)d_in + (size_t)rank_ * n * es;
            } else {
                CU(cudaMalloc(&d_out, n * es));
            }
            CHECK_OK(comm->ops->reduce_scatter(comm, d_in, d_out, n, dt, ACX_OP_SUM));
            CU(cudaMemcpy(out, d_out, n * es, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n; i++) {
                size_t gi = (size_t)rank_ * n + i;
                CHECK(load(out, dt, i) == reduce_all(dt, ACX_OP_SUM, gi % PERIOD, 77));
            }
            if (!in_place) cudaFree(d_out);
            cudaFree(d_in);
            free(h);
            free(out);
            h = out = d_in = d_out = NULL;
        }
    return 0;
error:
    free(h);
    free(out);
    return 1;
}

/* Rank r's block of a gather: element i is r * 1000 + i % 1000 (exact in float32). */
static int test_gathers(void) {
    const size_t n = 2049;
    size_t total = n * (size_t)size_;
    float *h = malloc(total * 4), *out = malloc(total * 4), *d_all = NULL, *d_mine = NULL;
    CHECK(h && out);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(rank_ * 1000 + (int)(i % 1000));
    d_mine = dev_copy(h, n * 4);
    CHECK(d_mine != NULL);
    CU(cudaMalloc((void **)&d_all, total * 4));
    /* all-gather, out of place then in place, then gather to every root */
    for (int mode = 0; mode < 2 + size_; mode++) {
        CU(cudaMemset(d_all, 0xff, total * 4));
        float *send = d_mine;
        if (mode == 1 || mode >= 2) { /* in place: my block of d_all */
            send = d_all + (size_t)rank_ * n;
            CU(cudaMemcpy(send, h, n * 4, cudaMemcpyHostToDevice));
        }
        int root = mode - 2;
        if (mode < 2) {
            CHECK_OK(comm->ops->all_gather(comm, send, d_all, n, ACX_DTYPE_FLOAT32));
        } else {
            /* in place only on the root; the others send from d_mine */
            if (rank_ != root) send = d_mine;
            acx_coll_req_t *req = NULL;
            CHECK_OK(comm->ops->gather_start(comm, send, d_all, n, ACX_DTYPE_FLOAT32, root, &req));
            CHECK_OK(comm->ops->wait(req));
        }
        if (mode < 2 || rank_ == root) {
            CU(cudaMemcpy(out, d_all, total * 4, cudaMemcpyDeviceToHost));
            for (int r = 0; r < size_; r++)
                for (size_t i = 0; i < n; i++)
                    CHECK(out[(size_t)r * n + i] == (float)(r * 1000 + (int)(i % 1000)));
        }
    }
    /* broadcast from the last rank */
    for (size_t i = 0; i < n; i++)
        h[i] = rank_ == size_ - 1 ? (float)i * 0.5f : -1.0f;
    CU(cudaMemcpy(d_mine, h, n * 4, cudaMemcpyHostToDevice));
    CHECK_OK(comm->ops->broadcast(comm, d_mine, n, ACX_DTYPE_FLOAT32, size_ - 1));
    CU(cudaMemcpy(out, d_mine, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        CHECK(out[i] == (float)i * 0.5f);
    cudaFree(d_all);
    cudaFree(d_mine);
    free(h);
    free(out);
    return 0;
error:
    cudaFree(d_all);
    cudaFree(d_mine);
    free(h);
    free(out);
    return 1;
}

/* ---- barrier, stream ordering, split ---- */

/* Runs on a CUDA host thread in stream order: holds the stream back. */
static void CUDART_CB stall_stream(void *ms) { usleep((useconds_t)(*(const int *)ms) * 1000u); }
static int stall_ms = 50;

static int test_barrier(void) {
    acx_coll_req_t *req = NULL;
    int done = 0;
    CHECK_OK(comm->ops->barrier(comm));
    CHECK_OK(comm->ops->barrier_start(comm, &req));
    while (!done)
        CHECK_OK(comm->ops->test(req, &done));
    CHECK_OK(comm->ops->wait(req));
    return 0;
error:
    return 1;
}

/* A 64 MiB memset enqueued on a non-blocking compute stream behind a host
 * function that sleeps 50 ms (so the stream is certainly late), then at
 * once an all-reduce of that buffer: with the compute stream set, the
 * collective must see the memset (every int 0x01010101). */
static int test_compute_stream(void) {
    const size_t n = (size_t)16 << 20;
    int32_t *d = NULL, *out = malloc(n * 4);
    cudaStream_t s = NULL;
    CHECK(out != NULL);
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&d, n * 4));
    CU(cudaMemset(d, 0, n * 4));
    CU(cudaDeviceSynchronize());
    CHECK_OK(acx_coll_nccl_set_compute_stream(comm, s));
    CU(cudaLaunchHostFunc(s, stall_stream, &stall_ms));
    CU(cudaMemsetAsync(d, 1, n * 4, s));
    CHECK_OK(comm->ops->all_reduce(comm, d, d, n, ACX_DTYPE_INT32, ACX_OP_SUM));
    CHECK_OK(acx_coll_nccl_set_compute_stream(comm, NULL));
    CU(cudaMemcpy(out, d, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i += 997)
        CHECK(out[i] == 0x01010101 * size_);
    CHECK(out[n - 1] == 0x01010101 * size_);
    cudaFree(d);
    cudaStreamDestroy(s);
    free(out);
    return 0;
error:
    acx_coll_nccl_set_compute_stream(comm, NULL);
    cudaFree(d);
    if (s) cudaStreamDestroy(s);
    free(out);
    return 1;
}

/* Split by parity: a new NCCL communicator over the ranks of my parity. */
static int test_split(void) {
    acx_comm_t *sub = NULL;
    double *d = NULL, x = (double)(rank_ + 1), got = 0, want = 0;
    CHECK_OK(acx_comm_split(comm, rank_ % 2, rank_, &sub));
    CHECK(sub != NULL && sub->ops == &acx_coll_nccl_ops &&
          sub->size == (size_ + 1 - rank_ % 2) / 2);
    for (int r = rank_ % 2; r < size_; r += 2)
        want += r + 1;
    d = dev_copy(&x, sizeof x);
    CHECK(d != NULL);
    CHECK_OK(sub->ops->all_reduce(sub, d, d, 1, ACX_DTYPE_FLOAT64, ACX_OP_SUM));
    CU(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost));
    CHECK(got == want);
    cudaFree(d);
    acx_comm_destroy(sub);
    return 0;
error:
    cudaFree(d);
    acx_comm_destroy(sub);
    return 1;
}

/* ---- argument errors (each rank alone: nothing is enqueued) ---- */

static int test_errors(void) {
    int32_t *d = NULL;
    CU(cudaMalloc((void **)&d, 64 * 4 * (size_t)size_));
    CHECK_STATUS(comm->ops->all_reduce(comm, d, d, 4, ACX_DTYPE_INT32, ACX_OP_AVG),
                 ACX_ERR_NOT_SUPPORTED, "needs a float dtype");
    CHECK_STATUS(comm->ops->all_reduce(comm, d, d, 4, (acx_dtype_t)42, ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "42");
    CHECK_STATUS(comm->ops->broadcast(comm, d, 4, ACX_DTYPE_INT32, size_), ACX_ERR_INVALID_ARG,
                 "root");
    CHECK_STATUS(comm->ops->all_reduce(comm, NULL, d, 4, ACX_DTYPE_INT32, ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "sendbuf is NULL");
    CHECK_STATUS(comm->ops->all_reduce_start(comm, d, d, 4, ACX_DTYPE_INT32, ACX_OP_SUM, NULL),
                 ACX_ERR_INVALID_ARG, "req_p");
    /* overlapping but not in place: recvbuf one element past my block */
    CHECK_STATUS(comm->ops->reduce_scatter(comm, d, d + (size_t)rank_ * 8 + 1, 8, ACX_DTYPE_INT32,
                                           ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "in place");
    CHECK_STATUS(acx_coll_nccl_set_compute_stream(NULL, NULL), ACX_ERR_INVALID_ARG, "NULL");
    cudaFree(d);
    return 0;
error:
    cudaFree(d);
    return 1;
}

/* ---- bandwidth (--bench) ---- */

static int bench(double mib) {
    size_t bytes = (size_t)(mib * 1048576.0), n = bytes / 4;
    float *d = NULL, *r = NULL;
    CU(cudaMalloc((void **)&d, bytes));
    CU(cudaMalloc((void **)&r, bytes));
    CU(cudaMemset(d, 0, bytes));
    const int warmup = 5, iters = 20;
    /* nccl-tests reports both; on one rank the out-of-place form is a
     * device-to-device copy and the in-place form does no work at all */
    for (int in_place = 0; in_place < 2; in_place++) {
        float *out = in_place ? d : r;
        double t0 = 0;
        for (int it = -warmup; it < iters; it++) {
            if (it == 0) {
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = MPI_Wtime();
            }
            CHECK_OK(comm->ops->all_reduce(comm, d, out, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
        }
        double t = (MPI_Wtime() - t0) / iters, tmax = 0;
        MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double algbw = (double)bytes / tmax / 1e9, busbw = algbw * 2.0 * (size_ - 1) / size_;
        if (rank_ == 0)
            printf("bench all_reduce nccl float32 sum %s %zu B, %d rank%s: %.1f us, algbw %.2f "
                   "GB/s, busbw %.2f GB/s\n",
                   in_place ? "in-place" : "out-of-place", bytes, size_, size_ == 1 ? "" : "s",
                   tmax * 1e6, algbw, busbw);
    }
    cudaFree(d);
    cudaFree(r);
    return 0;
error:
    cudaFree(d);
    cudaFree(r);
    return 1;
}

int main(int argc, char **argv) {
    int failed = 0;
    acx_test_mpi_begin(&argc, &argv, 300, &rank_, &size_);
    MPI_Comm node;
    int local_rank, local_size;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);

    char why[256];
    int count = acx_device_count(why, sizeof why);
    int fewest = count;
    MPI_Allreduce(MPI_IN_PLACE, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int most_local = local_size;
    MPI_Allreduce(MPI_IN_PLACE, &most_local, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (fewest == 0 || most_local > fewest) {
        if (rank_ == 0) {
            if (fewest == 0)
                printf("SKIP: test_nccl needs a CUDA device per rank: %s\n",
                       count == 0 ? why : "another rank has none");
            else
                printf("SKIP: test_nccl: %d ranks on a node with %d CUDA device%s (NCCL needs one "
                       "device per rank)\n",
                       most_local, fewest, fewest == 1 ? "" : "s");
        }
        MPI_Finalize();
        return 77;
    }
    if (acx_coll_device_setup(&acx_coll_nccl_ops, local_rank, local_size) != ACX_OK ||
        acx_comm_create(MPI_COMM_WORLD, &acx_coll_nccl_ops, &comm) != ACX_OK) {
        fprintf(stderr, "[r%d] NCCL communicator: %s\n", rank_, acx_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (argc > 2 && strcmp(argv[1], "--bench") == 0) {
        failed = acx_test_agree(bench(atof(argv[2])));
    } else {
        failed |=
            acx_test_run_case("nccl: all-reduce, every dtype and op, 3 modes", test_all_reduce);
        failed |= acx_test_run_case("nccl: three all-reduces in flight", test_in_flight);
        failed |=
            acx_test_run_case("nccl: reduce-scatter (f32, bf16; in place)", test_reduce_scatter);
        failed |=
            acx_test_run_case("nccl: all-gather, gather to every root, broadcast", test_gathers);
        failed |= acx_test_run_case("nccl: barrier, blocking and non-blocking", test_barrier);
        failed |= acx_test_run_case("nccl: ordered after the compute stream", test_compute_stream);
        failed |= acx_test_run_case("nccl: split communicator", test_split);
        failed |= acx_test_run_case("nccl: argument errors", test_errors);
    }
    acx_comm_destroy(comm);
    MPI_Finalize();
    return failed ? 1 : 0;
}

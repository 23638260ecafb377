/*
 * tests/gpu/test_mpi_device.c — the MPI backend on CUDA device buffers
 * (collectives/mpi/coll_mpi_stage.c: staged through pinned host memory),
 * with 2-4 ranks sharing one GPU; exit 77 (skip) without a GPU.
 *
 * Every collective runs twice, on device buffers and on host buffers with
 * the same inputs; the host run is the reference (coll_mpi.c on host memory,
 * itself checked against plain MPI by tests/mpi/test_coll*): the device
 * result, copied back, must equal it bit for bit. Where the result is exact
 * (every op but avg: inputs are small integers chosen by rank, index and
 * salt), it must also equal the value each rank computes itself. Covers
 * all-reduce (float32, float64, float16, bfloat16, int32, int8; sum, avg,
 * max, min, prod; out of place, in place, non-blocking, a host send buffer
 * with a device receive buffer), reduce-scatter (in and out of place),
 * all-gather, gather to every root, broadcast, more requests in flight than
 * the pinned pool has slots, ordering after work on the legacy default
 * stream, overlap errors, the pinned pool itself, the pool freed with the
 * last communicator, and acx_all_reduce (the public API) on device buffers.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/acx.h"
#include "collectives/coll.h"
#include "base/half.h"
#include "device/device.h"
#include "device/memory.h"
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

static const acx_dtype_t dtypes[] = {ACX_DTYPE_FLOAT32,  ACX_DTYPE_FLOAT64, ACX_DTYPE_FLOAT16,
                                     ACX_DTYPE_BFLOAT16, ACX_DTYPE_INT32,   ACX_DTYPE_INT8};
#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])

static int is_float(acx_dtype_t dt) {
    return dt == ACX_DTYPE_FLOAT32 || dt == ACX_DTYPE_FLOAT64 || acx_dtype_is_half(dt);
}

/* Small integers: sums over 4 ranks and products of {1, 2, -1} stay exact
 * in every dtype here (int8 included). */
static double gen(acx_red_op_t op, int rank, size_t i, int salt) {
    uint32_t h = acx_test_hash3(rank, i, salt);
    if (op == ACX_OP_PROD) {
        static const double set[3] = {1, 2, -1};
        return set[h % 3];
    }
    return (double)(h % 7) - 3;
}

static void store(void *buf, acx_dtype_t dt, size_t i, double x) {
    switch (dt) {
    case ACX_DTYPE_FLOAT32: ((float *)buf)[i] = (float)x; break;
    case ACX_DTYPE_FLOAT64: ((double *)buf)[i] = x; break;
    case ACX_DTYPE_FLOAT16: ((uint16_t *)buf)[i] = acx_f16_from_f64(x); break;
    case ACX_DTYPE_BFLOAT16: ((uint16_t *)buf)[i] = acx_bf16_from_f64(x); break;
    case ACX_DTYPE_INT32: ((int32_t *)buf)[i] = (int32_t)x; break;
    default: ((int8_t *)buf)[i] = (int8_t)x; break;
    }
}

static double load(const void *buf, acx_dtype_t dt, size_t i) {
    switch (dt) {
    case ACX_DTYPE_FLOAT32: return ((const float *)buf)[i];
    case ACX_DTYPE_FLOAT64: return ((const double *)buf)[i];
    case ACX_DTYPE_FLOAT16: return acx_f16_to_f32(((const uint16_t *)buf)[i]);
    case ACX_DTYPE_BFLOAT16: return acx_bf16_to_f32(((const uint16_t *)buf)[i]);
    case ACX_DTYPE_INT32: return ((const int32_t *)buf)[i];
    default: return ((const int8_t *)buf)[i];
    }
}

/* op over every rank's gen(...) for element i (avg: not exact, not used) */
static double reduce_all(acx_red_op_t op, size_t i, int salt) {
    double r = gen(op, 0, i, salt);
    for (int q = 1; q < size_; q++) {
        double x = gen(op, q, i, salt);
        if (op == ACX_OP_PROD)
            r *= x;
        else if (op == ACX_OP_MAX)
            r = x > r ? x : r;
        else if (op == ACX_OP_MIN)
            r = x < r ? x : r;
        else
            r += x;
    }
    return r;
}

/* host [n] of dt with this rank's values of (op, salt) from index base */
static void *host_fill(acx_dtype_t dt, acx_red_op_t op, size_t n, size_t base, int salt) {
    void *h = malloc(n * acx_dtype_size(dt) + 1);
    if (h != NULL)
        for (size_t i = 0; i < n; i++)
            store(h, dt, i, gen(op, rank_, base + i, salt));
    return h;
}

/* a device copy of h [bytes] (one spare byte so that 0 bytes is a real buffer) */
static void *dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes + 1) != cudaSuccess) return NULL;
    if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

static int same_bytes(const void *got, const void *want, size_t bytes, const char *what) {
    if (bytes == 0 || memcmp(got, want, bytes) == 0) return 1;
    size_t k = 0;
    while (((const unsigned char *)got)[k] == ((const unsigned char *)want)[k])
        k++;
    fprintf(stderr, "\n[r%d] %s: device result differs from the host reference at byte %zu\n",
            rank_, what, k);
    return 0;
}

/* ---- all-reduce ---- */

static const size_t sizes[] = {0, 1, 1000, (1u << 20) + 3};
#define NUM_SIZES (sizeof sizes / sizeof sizes[0])

/* mode 0 out of place, 1 in place, 2 non-blocking (test until done, then
 * wait), 3 host send buffer into a device receive buffer */
static int check_all_reduce(acx_dtype_t dt, acx_red_op_t op, size_t n, int mode) {
    size_t es = acx_dtype_size(dt), bytes = n * es;
    int salt = (int)dt * 16 + (int)op;
    char what[96];
    snprintf(what, sizeof what, "all-reduce %s op %d n %zu mode %d", acx_dtype_name(dt), (int)op, n,
             mode);
    void *h_in = host_fill(dt, op, n, 0, salt), *ref = malloc(bytes + 1), *got = malloc(bytes + 1);
    void *d_in = NULL, *d_out = NULL;
    CHECK(h_in && ref && got);
    /* the host reference, same call shape */
    if (mode == 1) {
        memcpy(ref, h_in, bytes);
        CHECK_OK(comm->ops->all_reduce(comm, ref, ref, n, dt, op));
    } else {
        CHECK_OK(comm->ops->all_reduce(comm, h_in, ref, n, dt, op));
    }
    d_in = dev_copy(h_in, bytes);
    CHECK(d_in != NULL);
    if (mode == 1) {
        d_out = d_in;
    } else {
        CU(cudaMalloc(&d_out, bytes + 1));
        CU(cudaMemset(d_out, 0xa5, bytes + 1)); /* no stale result */
    }
    if (mode == 2) {
        acx_coll_req_t *req = NULL;
        int done = 0;
        CHECK_OK(comm->ops->all_reduce_start(comm, d_in, d_out, n, dt, op, &req));
        while (!done)
            CHECK_OK(comm->ops->test(req, &done));
        CHECK_OK(comm->ops->wait(req));
    } else {
        CHECK_OK(comm->ops->all_reduce(comm, mode == 3 ? h_in : d_in, d_out, n, dt, op));
    }
    if (bytes) CU(cudaMemcpy(got, d_out, bytes, cudaMemcpyDeviceToHost));
    CHECK(same_bytes(got, ref, bytes, what));
    if (op != ACX_OP_AVG)
        for (size_t i = 0; i < n; i++)
            if (load(got, dt, i) != reduce_all(op, i, salt)) {
                fprintf(stderr, "\n[r%d] %s [%zu]: got %g, want %g\n", rank_, what, i,
                        load(got, dt, i), reduce_all(op, i, salt));
                TEST_ERROR;
            }
    if (d_out != d_in) cudaFree(d_out);
    cudaFree(d_in);
    free(h_in);
    free(ref);
    free(got);
    return 0;
error:
    if (d_out != d_in) cudaFree(d_out);
    cudaFree(d_in);
    free(h_in);
    free(ref);
    free(got);
    return 1;
}

static int test_all_reduce(void) {
    for (size_t k = 0; k < NUM_DTYPES; k++)
        for (int op = 0; op < ACX_OP_COUNT_; op++) {
            if (op == ACX_OP_AVG && !is_float(dtypes[k])) continue;
            for (size_t s = 0; s < NUM_SIZES; s++)
                for (int mode = 0; mode < 4; mode++)
                    if (check_all_reduce(dtypes[k], (acx_red_op_t)op, sizes[s], mode)) return 1;
        }
    return 0;
}

/* ---- reduce-scatter, all-gather, gather, broadcast ---- */

static int test_reduce_scatter(void) {
    const size_t n = 3001; /* per rank */
    size_t total = n * (size_t)size_;
    void *h = NULL, *ref = NULL, *got = NULL, *d_in = NULL, *d_out = NULL;
    for (int in_place = 0; in_place < 2; in_place++)
        for (int bf = 0; bf < 2; bf++) {
            acx_dtype_t dt = bf ? ACX_DTYPE_BFLOAT16 : ACX_DTYPE_FLOAT32;
            size_t es = acx_dtype_size(dt), mine = (size_t)rank_ * n * es;
            h = host_fill(dt, ACX_OP_SUM, total, 0, 77);
            ref = malloc(total * es);
            got = malloc(n * es);
            CHECK(h && ref && got);
            memcpy(ref, h, total * es);
            if (in_place)
                CHECK_OK(
                    comm->ops->reduce_scatter(comm, ref, (char *)ref + mine, n, dt, ACX_OP_SUM));
            else
                CHECK_OK(comm->ops->reduce_scatter(comm, h, ref, n, dt, ACX_OP_SUM));
            d_in = dev_copy(h, total * es);
            CHECK(d_in != NULL);
            if (in_place) {
                d_out = (char *)d_in + mine;
            } else {
                CU(cudaMalloc(&d_out, n * es));
            }
            CHECK_OK(comm->ops->reduce_scatter(comm, d_in, d_out, n, dt, ACX_OP_SUM));
            CU(cudaMemcpy(got, d_out, n * es, cudaMemcpyDeviceToHost));
            CHECK(same_bytes(got, in_place ? (char *)ref + mine : ref, n * es, "reduce-scatter"));
            for (size_t i = 0; i < n; i++)
                CHECK(load(got, dt, i) == reduce_all(ACX_OP_SUM, (size_t)rank_ * n + i, 77));
            if (in_place) { /* the other blocks of the send buffer are left alone */
                void *all = malloc(total * es);
                CHECK(all != NULL);
                CU(cudaMemcpy(all, d_in, total * es, cudaMemcpyDeviceToHost));
                int others_kept = memcmp(all, h, mine) == 0 &&
                                  memcmp((char *)all + mine + n * es, (char *)h + mine + n * es,
                                         total * es - mine - n * es) == 0;
                free(all);
                CHECK(others_kept);
            }
            if (!in_place) cudaFree(d_out);
            cudaFree(d_in);
            free(h);
            free(ref);
            free(got);
            h = ref = got = d_in = d_out = NULL;
        }
    return 0;
error:
    free(h);
    free(ref);
    free(got);
    return 1;
}

/* Rank r's block: element i is r * 1000 + i % 1000 (exact in float32). */
static int test_gathers(void) {
    const size_t n = 2049;
    size_t total = n * (size_t)size_;
    float *h = malloc(total * 4), *got = malloc(total * 4), *d_all = NULL, *d_mine = NULL;
    CHECK(h && got);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(rank_ * 1000 + (int)(i % 1000));
    d_mine = dev_copy(h, n * 4);
    CHECK(d_mine != NULL);
    CU(cudaMalloc((void **)&d_all, total * 4));
    /* all-gather out of place, in place, non-blocking; then gather to every root */
    for (int mode = 0; mode < 3 + size_; mode++) {
        CU(cudaMemset(d_all, 0xff, total * 4));
        int root = mode - 3;
        float *send = d_mine;
        if (mode == 1 || (mode >= 3 && rank_ == root)) { /* in place: my block of d_all */
            send = d_all + (size_t)rank_ * n;
            CU(cudaMemcpy(send, h, n * 4, cudaMemcpyHostToDevice));
        }
        if (mode < 2) {
            CHECK_OK(comm->ops->all_gather(comm, send, d_all, n, ACX_DTYPE_FLOAT32));
        } else {
            acx_coll_req_t *req = NULL;
            if (mode == 2)
                CHECK_OK(
                    comm->ops->all_gather_start(comm, send, d_all, n, ACX_DTYPE_FLOAT32, &req));
            else
                CHECK_OK(
                    comm->ops->gather_start(comm, send, d_all, n, ACX_DTYPE_FLOAT32, root, &req));
            CHECK_OK(comm->ops->wait(req));
        }
        if (mode < 3 || rank_ == root) {
            CU(cudaMemcpy(got, d_all, total * 4, cudaMemcpyDeviceToHost));
            for (int r = 0; r < size_; r++)
                for (size_t i = 0; i < n; i++)
                    CHECK(got[(size_t)r * n + i] == (float)(r * 1000 + (int)(i % 1000)));
        }
    }
    /* broadcast from the last rank, blocking and non-blocking */
    for (int nb = 0; nb < 2; nb++) {
        for (size_t i = 0; i < n; i++)
            h[i] = rank_ == size_ - 1 ? (float)i * 0.5f + (float)nb : -1.0f;
        CU(cudaMemcpy(d_mine, h, n * 4, cudaMemcpyHostToDevice));
        if (nb) {
            acx_coll_req_t *req = NULL;
            CHECK_OK(
                comm->ops->broadcast_start(comm, d_mine, n, ACX_DTYPE_FLOAT32, size_ - 1, &req));
            CHECK_OK(comm->ops->wait(req));
        } else {
            CHECK_OK(comm->ops->broadcast(comm, d_mine, n, ACX_DTYPE_FLOAT32, size_ - 1));
        }
        CU(cudaMemcpy(got, d_mine, n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++)
            CHECK(got[i] == (float)i * 0.5f + (float)nb);
    }
    cudaFree(d_all);
    cudaFree(d_mine);
    free(h);
    free(got);
    return 0;
error:
    cudaFree(d_all);
    cudaFree(d_mine);
    free(h);
    free(got);
    return 1;
}

/* ---- requests in flight, stream order, errors ---- */

/* Twelve staged buffers in flight (6 out-of-place all-reduces): more than
 * the pool's ACX_CUDA_PINNED_SLOTS, so some blocks are the uncached kind;
 * waited for in reverse order. */
#define IN_FLIGHT 6
static int test_in_flight(void) {
    const size_t n = 1 << 16;
    float *h = malloc(n * 4), *got = malloc(n * 4);
    float *d_in[IN_FLIGHT] = {NULL}, *d_out[IN_FLIGHT] = {NULL};
    acx_coll_req_t *req[IN_FLIGHT] = {NULL};
    CHECK(h && got);
    for (int k = 0; k < IN_FLIGHT; k++) {
        for (size_t i = 0; i < n; i++)
            h[i] = (float)(rank_ + k + (int)(i % 5));
        d_in[k] = dev_copy(h, n * 4);
        CHECK(d_in[k] != NULL);
        CU(cudaMalloc((void **)&d_out[k], n * 4));
    }
    for (int k = 0; k < IN_FLIGHT; k++)
        CHECK_OK(comm->ops->all_reduce_start(comm, d_in[k], d_out[k], n, ACX_DTYPE_FLOAT32,
                                             ACX_OP_SUM, &req[k]));
    for (int k = IN_FLIGHT - 1; k >= 0; k--) {
        acx_coll_req_t *r = req[k];
        req[k] = NULL;
        CHECK_OK(comm->ops->wait(r));
    }
    for (int k = 0; k < IN_FLIGHT; k++) {
        CU(cudaMemcpy(got, d_out[k], n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++)
            CHECK(got[i] == (float)(size_ * (size_ - 1) / 2 + size_ * (k + (int)(i % 5))));
    }
    for (int k = 0; k < IN_FLIGHT; k++) {
        cudaFree(d_in[k]);
        cudaFree(d_out[k]);
    }
    free(h);
    free(got);
    return 0;
error:
    for (int k = 0; k < IN_FLIGHT; k++) {
        if (req[k]) comm->ops->wait(req[k]);
        cudaFree(d_in[k]);
        cudaFree(d_out[k]);
    }
    free(h);
    free(got);
    return 1;
}

/* A 64 MiB memset enqueued on the legacy default stream, then at once an
 * all-reduce of that buffer: the staging copy follows it (device/memory.h),
 * so the collective sees every int 0x01010101. */
static int test_stream_order(void) {
    const size_t n = (size_t)16 << 20;
    int32_t *d = NULL, *got = malloc(n * 4);
    CHECK(got != NULL);
    CU(cudaMalloc((void **)&d, n * 4));
    CU(cudaMemset(d, 0, n * 4));
    CU(cudaDeviceSynchronize());
    CU(cudaMemsetAsync(d, 1, n * 4, 0));
    CHECK_OK(comm->ops->all_reduce(comm, d, d, n, ACX_DTYPE_INT32, ACX_OP_SUM));
    CU(cudaMemcpy(got, d, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i += 997)
        CHECK(got[i] == 0x01010101 * size_);
    CHECK(got[n - 1] == 0x01010101 * size_);
    cudaFree(d);
    free(got);
    return 0;
error:
    cudaFree(d);
    free(got);
    return 1;
}

/* Each rank alone (the errors come before any MPI call). */
static int test_errors(void) {
    int32_t *d = NULL;
    CU(cudaMalloc((void **)&d, 64 * 4 * (size_t)size_));
    /* recvbuf one element into this rank's block: inside the send buffer,
     * so the host layer sees the same overlap and refuses it */
    CHECK_STATUS(comm->ops->reduce_scatter(comm, d, d + (size_t)rank_ * 8 + 1, 8, ACX_DTYPE_INT32,
                                           ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "overlap");
    /* an all-reduce whose buffers overlap partly: refused by the staging */
    CHECK_STATUS(comm->ops->all_reduce(comm, d, d + 4, 8, ACX_DTYPE_INT32, ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "overlap");
    CHECK_STATUS(comm->ops->all_reduce(comm, d, d, 4, ACX_DTYPE_INT32, ACX_OP_AVG),
                 ACX_ERR_NOT_SUPPORTED, "needs a float dtype");
    cudaFree(d);
    return 0;
error:
    cudaFree(d);
    return 1;
}

/* ---- the pinned pool ---- */

static int test_pinned_pool(void) {
    void *a = NULL, *b = NULL, *c = NULL, *many[ACX_CUDA_PINNED_SLOTS + 1] = {NULL};
    acx_cuda_pinned_trim(); /* nothing in use now: start from an empty pool */
    CHECK_OK(acx_cuda_pinned_acquire(1000, &a));
    memset(a, 1, 1000); /* host memory */
    acx_cuda_pinned_release(a);
    CHECK_OK(acx_cuda_pinned_acquire(3 << 20, &b)); /* does not fit a's 2 MiB block */
    CHECK(b != a);
    memset(b, 2, 3 << 20);
    acx_cuda_pinned_release(b);
    CHECK_OK(acx_cuda_pinned_acquire(500, &c)); /* the smallest cached block that fits: a's */
    CHECK(c == a);
    acx_cuda_pinned_release(c);
    for (int k = 0; k <= ACX_CUDA_PINNED_SLOTS; k++) { /* one more than there are slots */
        CHECK_OK(acx_cuda_pinned_acquire(1000, &many[k]));
        memset(many[k], k, 1000);
        for (int j = 0; j < k; j++)
            CHECK(many[j] != many[k]);
    }
    for (int k = 0; k <= ACX_CUDA_PINNED_SLOTS; k++) {
        acx_cuda_pinned_release(many[k]);
        many[k] = NULL;
    }
    /* cached: a (2 MiB), b (4 MiB) and 6 new 2 MiB blocks; the 9th was freed */
    CHECK(acx_cuda_pinned_trim() == ((size_t)18 << 20));
    CHECK(acx_cuda_pinned_trim() == 0);
    return 0;
error:
    for (int k = 0; k <= ACX_CUDA_PINNED_SLOTS; k++)
        acx_cuda_pinned_release(many[k]);
    return 1;
}

/* ---- the public API ---- */

/* acx_all_reduce through an accelerator on the MPI backend, device buffers */
static int test_public_api(void) {
    acx_accelerator_t *acc = NULL;
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.backend = ACX_BACKEND_MPI;
    const size_t n = 100003;
    float *h = malloc(n * 4), *d = NULL;
    CHECK(h != NULL);
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(rank_ + 1) * (float)(i % 17);
    d = dev_copy(h, n * 4);
    CHECK(d != NULL);
    CHECK_OK(acx_all_reduce(acc, d, d, n, ACX_DTYPE_FLOAT32, ACX_OP_AVG));
    CU(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) /* mean of (r+1)*x over r < size = (size+1)/2 * x */
        CHECK(h[i] == (float)((double)(size_ + 1) / 2.0 * (double)(i % 17)));
    cudaFree(d);
    free(h);
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    cudaFree(d);
    free(h);
    if (acc) acx_finalize(acc);
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
    int count = acx_device_count(why, sizeof why), fewest = count;
    MPI_Allreduce(MPI_IN_PLACE, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (fewest == 0) {
        if (rank_ == 0)
            printf("SKIP: test_mpi_device needs a CUDA device: %s\n",
                   count == 0 ? why : "another rank has none");
        MPI_Finalize();
        return 77;
    }
    /* local rank modulo devices: with one GPU every rank shares device 0 */
    if (acx_device_use(local_rank, local_size) != ACX_OK ||
        acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &comm) != ACX_OK) {
        fprintf(stderr, "[r%d] setup: %s\n", rank_, acx_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank_ == 0)
        printf("%d rank(s) on %d device(s); rank 0 on cuda:%d\n", size_, count, acx_device_bound());
    failed |= acx_test_run_case("mpi on device buffers: all-reduce, dtypes x ops x 4 modes",
                                test_all_reduce);
    failed |= acx_test_run_case("mpi on device buffers: reduce-scatter (f32, bf16; in place)",
                                test_reduce_scatter);
    failed |=
        acx_test_run_case("mpi on device buffers: all-gather, gather, broadcast", test_gathers);
    failed |= acx_test_run_case("mpi on device buffers: 6 requests in flight", test_in_flight);
    failed |= acx_test_run_case("mpi on device buffers: after the legacy stream's work",
                                test_stream_order);
    failed |= acx_test_run_case("mpi on device buffers: overlap and dtype errors", test_errors);
    failed |= acx_test_run_case("pinned pool: reuse, best fit, overflow, trim", test_pinned_pool);
    failed |= acx_test_run_case("acx_all_reduce (public API) on device buffers", test_public_api);

    /* the last MPI-backend communicator going frees the cached pinned blocks */
    TESTING("pinned blocks freed with the last communicator");
    int bad = 0;
    float one = 1.0f, *d1 = dev_copy(&one, sizeof one);
    bad |= d1 == NULL ||
           comm->ops->all_reduce(comm, d1, d1, 1, ACX_DTYPE_FLOAT32, ACX_OP_SUM) != ACX_OK;
    acx_comm_destroy(comm);
    bad |= acx_cuda_pinned_trim() != 0; /* the all-reduce cached one; the destroy freed it */
    cudaFree(d1);
    failed |= acx_test_report(bad);
    MPI_Finalize();
    return failed ? 1 : 0;
}

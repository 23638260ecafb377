/*
 * tests/gpu/test_ddp_stream.c — device-resident NO_SHARD (device_state:
 * cuda) orders its gradient reduction after the program's backward work
 * on a NON-BLOCKING compute stream named with acx_set_compute_stream.
 *
 * The "backward" is a queue of cudaMemsetAsync calls on that stream: every
 * gradient buffer (4 parameters of 4 Mi floats, 4 buckets) is set to zero
 * 24 times, then the stream runs a host function that sleeps 20 ms
 * (cudaLaunchHostFunc), and finally the buffer is set to the bytes 0x3f
 * (the float 0x3f3f3f3f); right after enqueueing them — without any host
 * wait — the program reports the units ready and calls acx_backward_end.
 * The sleep makes the stream certainly late: without it the host could
 * enqueue about as fast as the GPU runs the memsets, and a missing wait
 * could go unnoticed. If acx's prescale, casts or the
 * collective read the buffers before the stream got there, the reduced
 * gradient holds zeros or a mix. Expected, per element: x = v * (1/world)
 * in float (the prescale), summed over identical ranks = (float)(world * x)
 * (exact doubling, one rounding for 3 ranks: the same in any order).
 *
 * Run by tests/gpu/ddp_stream.test on 1 and 2 ranks (the MPI backend staging device buffers: acx
 * synchronizes the stream before each collective) and with `nccl` on 1 rank (NCCL waits for an
 * event on the stream). SKIP (77) without a GPU. Only built with CUDA. Not yet run on a GPU.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <unistd.h>

#include "tests/acx_test_mpi.h"

#define NPAR  4
#define ROWS  1024
#define COLS  4096 /* 4 Mi floats per parameter */
#define ZEROS 24

static int rank, world;

/* Runs on a CUDA host thread in stream order: holds the stream back. */
static void CUDART_CB stall_stream(void *ms) { usleep((useconds_t)(*(const int *)ms) * 1000u); }
static int stall_ms = 20;

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t cu_ret_ = (call);                                                              \
        if (cu_ret_ != cudaSuccess) {                                                              \
            fprintf(stderr, "\n[r%d] %s:%d: %s: %s\n", rank, __FILE__, __LINE__, #call,            \
                    cudaGetErrorString(cu_ret_));                                                  \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

static int run(int nccl) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.device_state = ACX_DEVICE_STATE_CUDA;
    cfg.backend = nccl ? ACX_BACKEND_NCCL : ACX_BACKEND_MPI;
    cfg.bucket_size_mb = 16.0; /* one parameter per bucket */
    acx_accelerator_t *acc = NULL;
    acx_model_t *m = NULL;
    acx_unit_t *u[NPAR];
    acx_param_t *p[NPAR];
    acx_optimizer_t *opt = NULL;
    cudaStream_t stream = NULL;
    float *host = NULL;
    int rc = 1;
    const size_t n = (size_t)ROWS * COLS;
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    CHECK_OK(acx_model_create(acc, &m));
    for (int q = 0; q < NPAR; q++) {
        char name[16];
        snprintf(name, sizeof name, "u%d", q);
        CHECK_OK(acx_model_add_unit(m, name, &u[q]));
        snprintf(name, sizeof name, "w%d", q);
        CHECK_OK(
            acx_unit_add_param(u[q], name, 2, (int64_t[]){ROWS, COLS}, ACX_INIT_SPEC_ZEROS, &p[q]));
    }
    acx_sgd_hparams_t hp = {.lr = 0.0};
    CHECK_OK(acx_sgd_create(m, &hp, &opt));
    CHECK_OK(acx_prepare(acc, m, opt, NULL));
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK_OK(acx_set_compute_stream(acc, stream));

    CHECK_OK(acx_accumulate_begin(acc));
    for (int q = NPAR - 1; q >= 0; q--) { /* backward order */
        CHECK_OK(acx_unit_acquire(u[q]));
        float *g = acx_param_grad(p[q]);
        CHECK(g != NULL);
        for (int z = 0; z < ZEROS; z++)
            CU(cudaMemsetAsync(g, 0, n * sizeof(float), stream));
        CU(cudaLaunchHostFunc(stream, stall_stream, &stall_ms));
        CU(cudaMemsetAsync(g, 0x3f, n * sizeof(float), stream));
        CHECK_OK(acx_unit_grads_ready(u[q])); /* no host wait before this */
        CHECK_OK(acx_unit_release(u[q]));
    }
    CHECK_OK(acx_backward_end(acc));
    CU(cudaStreamSynchronize(stream));
    uint32_t vb = 0x3f3f3f3fu;
    float v, x;
    memcpy(&v, &vb, sizeof v);
    x = v * (1.0f / (float)world);
    const float want = (float)((double)x * world);
    host = malloc(n * sizeof(float));
    CHECK(host != NULL);
    for (int q = 0; q < NPAR; q++) {
        CU(cudaMemcpy(host, acx_param_grad(p[q]), n * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++)
            if (host[i] != want) {
                fprintf(stderr, "\n[r%d] w%d grad[%zu] = %.9g, expected %.9g\n", rank, q, i,
                        (double)host[i], (double)want);
                TEST_ERROR;
            }
    }
    CHECK_OK(acx_optimizer_step(opt));
    CHECK_OK(acx_accumulate_end(acc));
    rc = 0;
error:
    free(host);
    if (acc != NULL) {
        acx_set_compute_stream(acc, NULL);
        acx_finalize(acc);
    }
    if (stream != NULL) cudaStreamDestroy(stream);
    return rc;
}

static int run_mpi(void) { return run(0); }
static int run_nccl(void) { return run(1); }

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 300, &rank, &world);
    int nccl = argc > 1 && strcmp(argv[1], "nccl") == 0;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        if (rank == 0) printf("SKIP: test_ddp_stream needs a CUDA device\n");
        MPI_Finalize();
        return 77;
    }
    int failed = acx_test_run_case(nccl ? "backward on a non-blocking stream, NCCL"
                                        : "backward on a non-blocking stream, MPI staging",
                                   nccl ? run_nccl : run_mpi);
    MPI_Finalize();
    return failed;
}

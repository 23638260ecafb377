/*
 * benchmarks/train_gpu.c — acx-bench-train-gpu: how close a training step
 * through acx comes to the GPU's own bfloat16 matrix-multiply rate.
 *
 * Three measurements in one run, on this rank's GPU (acx_device):
 *
 *   1. bf16 GEMM rate: cublasGemmEx with bfloat16 A and B, float32
 *      accumulation (CUBLAS_COMPUTE_32F, reductions in float32), on a
 *      large square product (--square, default 8192^3, bfloat16 C) and on
 *      every product of the synthetic model below with its own types
 *      (forward and input gradient: bfloat16 C; weight gradient: float32 C
 *      accumulated with beta 1, acx's gradient buffer). Each is timed with
 *      CUDA events around single calls after 3 warm-up calls; the median
 *      of --gemm-iters calls. Rate = 2 m n k / time.
 *   2. The synthetic model's training step through acx: an MLP
 *      D0-D1-...-DL (--dims, default 4096-16384-16384-4096, no biases, ReLU
 *      between layers, mean squared error against fixed random targets),
 *      one acx unit per layer, batch --batch-size (default 8192) per rank,
 *      device-resident state (device_state: cuda), mixed_precision: bf16
 *      (fp32 master weights; acx hands out compute copies whose values are
 *      bfloat16 in float32 arrays), AdamW through acx_optimizer_step, the
 *      sharding strategy and backend asked for (default NO_SHARD, nccl).
 *      Per step, FSDP's pattern, one unit at a time: forward per layer
 *      acquire, cast the compute copy to bfloat16 (a kernel, counted in
 *      the step), forward GEMM, ReLU, release; the loss; backward per
 *      layer acquire again, weight gradient straight into acx_param_grad,
 *      cast again and input gradient, ReLU mask, acx_unit_grads_ready,
 *      release; acx_backward_end; the optimizer step and zero_grad;
 *      acx_accumulate_end; then cudaStreamSynchronize, so the host time of
 *      a step is the step. Under FULL_SHARD (and HYBRID_SHARD) every
 *      acquire all-gathers, so a unit is gathered twice per step and at
 *      most one (plus acx's prefetch) is held; the backward cast goes into
 *      one scratch bfloat16 buffer sized for the largest layer. Under
 *      NO_SHARD acquire and release do nothing and the forward casts go
 *      into one persistent bfloat16 copy per layer, which backward reuses
 *      (one cast per layer per step). --warmup untimed steps, --steps
 *      timed ones; the slowest rank's time per step.
 *   3. The same step's GEMMs alone: the forward, weight-gradient and
 *      input-gradient products of one step back to back on the same
 *      buffers (weight gradients into a scratch buffer), nothing else;
 *      CUDA events around the sequence, the median of --steps repetitions.
 *
 * Derived numbers:
 *   FLOPs per step = sum over layers l of 2 B D(l) D(l+1) x 3 (forward,
 *     weight gradient, input gradient), minus the first layer's input
 *     gradient, which is not computed: 6 B P - 2 B D0 D1 with P the
 *     parameter count. Only the matrix products count (ReLU, loss, cast
 *     and optimizer are overhead).
 *   achieved = FLOPs per step / median step time;
 *   MFU = achieved / the measured bf16 GEMM rate of the square product
 *     (a model-FLOPs utilization against what this GPU's GEMM really does,
 *     not against the data sheet);
 *   GEMM share = GEMMs-alone time / median step time: 1 - share is the
 *     step's overhead (elementwise kernels, acx's communication and
 *     optimizer, host waits).
 *
 * --check (tests/gpu/train_gpu.test): a tiny model (default 72-136-104-40,
 * batch 56) on 1 rank with SGD, checked against a CPU reference of the
 * same math: the first step's loss and every layer's update (p0 - p1)/lr
 * against the reference gradient; then the loss must decrease over the
 * following steps. Each step of the check is two micro-steps on the same
 * batch (gradient_accumulation_steps 2): acx divides the sum by 2, so the
 * update is still the reference gradient if the weight-gradient GEMM adds
 * into acx's buffer (beta 1), and half of it (a relative error of 0.5) if
 * it overwrote it (beta 0) or if acx failed to keep the first micro-step's
 * gradient. The reference rounds to bfloat16 where the GPU does
 * (compute copies, activations, output gradients) and sums in double, so
 * the only difference left is the GPU's float32 summation order: it can
 * move a rounded activation by one bfloat16 unit in the last place (2^-8
 * relative) in the rare element whose sum lies that close to a rounding
 * boundary (probability about k 2^-16 for a sum of k products). Hence the
 * bounds: relative error of the loss <= 1e-3, per layer
 * ||(p0 - p1)/lr - g_ref|| / ||g_ref|| <= 1e-2, orders of magnitude above
 * what rounding gives and far below the O(1) of a wrong transpose, leading
 * dimension, mask or scale.
 *
 * Exit status: 0 done (check passed), 1 failure (also a --json file that
 * cannot be written), 2 usage error (decided before the device is looked
 * at), 3 acx refused the configuration as not supported
 * (ACX_ERR_NOT_SUPPORTED, e.g. a sharding strategy the backend does not
 * support yet, or backend nccl in a build without NCCL: the message says
 * so), 77 no CUDA device, or one older than compute capability 8.0 (no
 * bfloat16 tensor cores; with the reason).
 * Output: human lines; the lines meant for a results summary start with
 * "result: " (tests/gpu/run-on-device.sh collects them); the last line is
 * one JSON object. Rank 0 prints.
 *
 * What this file leaves to others: the GEMM argument mapping
 * (train_gpu_gemm.h, tested on the CPU by tests/unit/test_train_gpu_gemm.c),
 * the kernels (train_gpu_kernels.cu), the option, statistics and JSON
 * helpers it shares with acx-bench-train (bench_common.c), everything
 * distributed (libacx, public API only).
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include <acx/acx.h>

#include "bench_common.h"
#include "train_gpu_gemm.h"
#include "train_gpu_kernels.h"

#define PROG               "acx-bench-train-gpu"
#define MAX_LAYERS         8
#define EXIT_USAGE         2
#define EXIT_REFUSED       3
#define EXIT_SKIP          77
#define WORKSPACE_BYTES    ((size_t)32 << 20) /* cuBLAS's recommended workspace on Hopper */
#define GEMM_WARMUP        3
#define CHECK_LOSS_TOL     1e-3
#define CHECK_GRAD_TOL     1e-2
#define CHECK_ACCUMULATION 2 /* micro-steps per step under --check (header) */

static const char *const backend_names[] = {"auto", "mpi", "nccl"};

static int world_rank, world_size;

/* ---- errors: the failing call's message, kept for the caller to print ---- */

static char err_msg[768];

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return -1;
}

#define CU(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t tg_cu_ret_ = (call);                                                           \
        if (tg_cu_ret_ != cudaSuccess) {                                                           \
            (void)cudaGetLastError();                                                              \
            return fail("%s (%s) failed: %s: %s", #call, (what), cudaGetErrorName(tg_cu_ret_),     \
                        cudaGetErrorString(tg_cu_ret_));                                           \
        }                                                                                          \
    } while (0)

#define CUBLAS(call, what)                                                                         \
    do {                                                                                           \
        cublasStatus_t tg_cb_ret_ = (call);                                                        \
        if (tg_cb_ret_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return fail("%s (%s) failed: %s: %s", #call, (what), cublasGetStatusName(tg_cb_ret_),  \
                        cublasGetStatusString(tg_cb_ret_));                                        \
    } while (0)

#define ACX(call)                                                                                  \
    do {                                                                                           \
        if ((call) != ACX_OK) return fail("%s: %s", #call, acx_last_error());                      \
    } while (0)

/* ---- options ---- */

typedef struct options {
    int dims[MAX_LAYERS + 1], nlayers; /* widths D0..DL, L = nlayers */
    int batch, steps, warmup, gemm_iters, square, check;
    int strategy, backend; /* taken from argv before acx_init */
    double lr;
    long long seed;
    const char *json;
} options_t;

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: mpirun -np N " PROG " [options]\n"
        "Measure the GPU's bf16 GEMM rate and an MLP training step through acx on it\n"
        "(device-resident state, mixed_precision bf16): step time, samples/s, MFU.\n\n"
        "  --dims D0,D1,...,DL  layer widths, 2 to %d layers (default 4096,16384,16384,4096;\n"
        "                       --check: 72,136,104,40)\n"
        "  --batch-size B       samples per rank per step (default 8192; --check: 56)\n"
        "  --steps S            timed steps (default 20; --check: steps in all, of 2 micro-steps\n"
        "                       each, default 6)\n"
        "  --warmup W           untimed steps first (default 3)\n"
        "  --sharding-strategy S  NO_SHARD | SHARD_GRAD_OP | FULL_SHARD | HYBRID_SHARD\n"
        "                       (any case; default NO_SHARD)\n"
        "  --backend B          nccl | mpi (default nccl; device_state is cuda either way)\n"
        "  --square N           the square bf16 GEMM N^3 MFU refers to (default 8192)\n"
        "  --gemm-iters N       timed calls per GEMM shape (default 20; 0: no GEMM rates, no MFU)\n"
        "  --lr X               learning rate (AdamW, default 1e-4; --check: SGD, default 0.05)\n"
        "  --seed N             acx's initialization seed and the data's (default 42)\n"
        "  --check              correctness check against a CPU reference (1 rank), no timing\n"
        "  --json FILE          also write the result object (rank 0)\n"
        "  --config FILE, --acx-KEY=VALUE   other acx configuration (docs/config.md)\n"
        "Exit: 0 done, 1 failed, 2 usage, 3 acx refused the configuration, 77 no CUDA device.\n",
        MAX_LAYERS);
}

/* The options that become acx configuration, taken out of argv before
 * acx_init. Returns 0 or EXIT_USAGE (printed). */
static int take_config_options(int *argc, char **argv, options_t *o) {
    int missing = 0;
    const char *s = bench_take_option(argc, argv, "--sharding-strategy", &missing);
    const char *b = bench_take_option(argc, argv, "--backend", &missing);
    const char *seed = bench_take_option(argc, argv, "--seed", &missing);
    o->strategy = ACX_NO_SHARD;
    o->backend = ACX_BACKEND_NCCL;
    o->seed = 42;
    if (missing) {
        if (world_rank == 0)
            fprintf(stderr, PROG ": --sharding-strategy, --backend and --seed need a value\n");
        return EXIT_USAGE;
    }
    if (s && bench_parse_strategy(PROG, s, &o->strategy) != 0) return EXIT_USAGE;
    if (b && ((o->backend = bench_lookup(b, backend_names, 3)) < 1)) {
        if (world_rank == 0)
            fprintf(stderr, PROG ": invalid value '%s' for --backend (expected nccl or mpi)\n", b);
        return EXIT_USAGE;
    }
    if (seed && bench_parse_seed(PROG, seed, &o->seed) != 0) return EXIT_USAGE;
    return 0;
}

/* argv without the options acx_init removes (include/acx/accelerator.h:
 * --config FILE, --config=FILE, --debug, --acx-KEY=VALUE, --acx-KEY VALUE;
 * all after "--" kept), in a new array of *argc_p + 1 pointers (NULL
 * terminated; the strings are argv's), or NULL out of memory. The
 * program's own options are parsed from it before the device is looked at
 * and before acx_init, so that a usage error exits 2 on any machine. */
static char **program_args(int argc, char **argv, int *argc_p) {
    char **v = calloc((size_t)argc + 1, sizeof *v);
    int n = 0;
    if (v == NULL) return NULL;
    v[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            while (i < argc)
                v[n++] = argv[i++];
            break;
        }
        if (strcmp(a, "--config") == 0) {
            i++; /* and its FILE (acx_init says when it is missing) */
            continue;
        }
        if (strncmp(a, "--config=", 9) == 0 || strcmp(a, "--debug") == 0) continue;
        if (strncmp(a, "--acx-", 6) == 0) {
            if (strchr(a, '=') == NULL && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                i++; /* --acx-KEY VALUE */
            continue;
        }
        v[n++] = argv[i];
    }
    v[n] = NULL;
    *argc_p = n;
    return v;
}

/* "D0,D1,...,DL", 3 to MAX_LAYERS + 1 widths, each 1..65536. */
static int parse_dims(const char *s, options_t *o) {
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > 65536 || n > MAX_LAYERS) return -1;
        o->dims[n++] = (int)x;
        if (*end == '\0') break;
        if (*end != ',') return -1;
        p = end + 1;
    }
    if (n < 3) return -1;
    o->nlayers = n - 1;
    return 0;
}

/* Returns 0 to run, or EXIT_USAGE (printed on rank 0). */
static int parse_options(int argc, char **argv, options_t *o) {
    int dims_set = 0, batch = -1, steps = -1;
    double lr = -1.0;
    o->warmup = 3;
    o->gemm_iters = 20;
    o->square = 8192;
    static const struct option longopts[] = {{"dims", required_argument, 0, 'D'},
                                             {"batch-size", required_argument, 0, 'b'},
                                             {"steps", required_argument, 0, 'k'},
                                             {"warmup", required_argument, 0, 'w'},
                                             {"square", required_argument, 0, 'q'},
                                             {"gemm-iters", required_argument, 0, 'g'},
                                             {"lr", required_argument, 0, 'l'},
                                             {"check", no_argument, 0, 'c'},
                                             {"json", required_argument, 0, 'j'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c, idx = 0;
    opterr = world_rank == 0;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        int bad = 0;
        char *end;
        switch (c) {
        case 'D':
            bad = parse_dims(optarg, o);
            dims_set = 1;
            break;
        case 'b': bad = bench_parse_int(optarg, 1, 1 << 20, &batch); break;
        case 'k': bad = bench_parse_int(optarg, 1, 1000000, &steps); break;
        case 'w': bad = bench_parse_int(optarg, 0, 1000000, &o->warmup); break;
        case 'q': bad = bench_parse_int(optarg, 0, 65536, &o->square); break;
        case 'g': bad = bench_parse_int(optarg, 0, 1000000, &o->gemm_iters); break;
        case 'l':
            lr = strtod(optarg, &end);
            bad = *optarg == '\0' || *end != '\0' || !(lr > 0.0 && lr <= 1e3); /* acx's bound */
            break;
        case 'c': o->check = 1; break;
        case 'j': o->json = optarg; break;
        case 'h':
            if (world_rank == 0) usage(stdout);
            return EXIT_USAGE;
        default:
            if (world_rank == 0) usage(stderr);
            return EXIT_USAGE;
        }
        if (bad) {
            if (world_rank == 0)
                fprintf(stderr, PROG ": invalid value '%s' for --%s%s\n", optarg,
                        longopts[idx].name,
                        c == 'D' ? " (expected D0,D1,...,DL: 3 to 9 widths in 1..65536)" : "");
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        if (world_rank == 0) fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
        return EXIT_USAGE;
    }
    if (o->check && world_size != 1) {
        if (world_rank == 0)
            fprintf(stderr,
                    PROG ": --check runs on 1 rank (its CPU reference is one rank's step); "
                         "the job has %d\n",
                    world_size);
        return EXIT_USAGE;
    }
    if (!dims_set) {
        static const int big[] = {4096, 16384, 16384, 4096}, tiny[] = {72, 136, 104, 40};
        memcpy(o->dims, o->check ? tiny : big, sizeof big);
        o->nlayers = 3;
    }
    o->batch = batch > 0 ? batch : o->check ? 56 : 8192;
    o->steps = steps > 0 ? steps : o->check ? 6 : 20;
    o->lr = lr > 0.0 ? lr : o->check ? 0.05 : 1e-4;
    if (o->check && o->steps < 2) {
        if (world_rank == 0) fprintf(stderr, PROG ": --check needs --steps >= 2\n");
        return EXIT_USAGE;
    }
    return 0;
}

/* ---- bfloat16 on the host (round to nearest even, as __float2bfloat16_rn) ---- */

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float bf16_round(float f) { return bf16_value(bf16_bits(f)); }

/* ---- the device: stream, cuBLAS handle, workspace ---- */

typedef struct gpu {
    int device;
    char name[256];
    cudaStream_t stream;
    cublasHandle_t blas;
    void *workspace;
    cudaEvent_t e0, e1;
} gpu_t;

/* On the device acx bound (cudaGetDevice). The stream is blocking
 * (ordered with the legacy default stream, as acx's staging copies
 * expect). Math: CUBLAS_COMPUTE_32F per call, and reductions (split-K) in
 * float32 too (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: by
 * default cuBLAS may reduce partial sums in the bfloat16 output type). */
static int gpu_init(gpu_t *g) {
    struct cudaDeviceProp prop;
    CU(cudaGetDevice(&g->device), "the device acx bound");
    CU(cudaGetDeviceProperties(&prop, g->device), "the device's name");
    snprintf(g->name, sizeof g->name, "%s", prop.name);
    CU(cudaStreamCreate(&g->stream), "the compute stream");
    CU(cudaEventCreate(&g->e0), "timing event");
    CU(cudaEventCreate(&g->e1), "timing event");
    CU(cudaMalloc(&g->workspace, WORKSPACE_BYTES), "cuBLAS workspace");
    CUBLAS(cublasCreate(&g->blas), "the cuBLAS handle");
    /* cublasSetStream resets the workspace to the default pool: set it after */
    CUBLAS(cublasSetStream(g->blas, g->stream), "binding the stream");
    CUBLAS(cublasSetWorkspace(g->blas, g->workspace, WORKSPACE_BYTES), "32 MiB workspace");
    CUBLAS(cublasSetMathMode(g->blas,
                             (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                            CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
           "math mode");
    CUBLAS(cublasSetPointerMode(g->blas, CUBLAS_POINTER_MODE_HOST), "pointer mode");
    return 0;
}

static void gpu_free(gpu_t *g) {
    if (g->stream) cudaStreamSynchronize(g->stream);
    if (g->blas) cublasDestroy(g->blas);
    cudaFree(g->workspace);
    if (g->e0) cudaEventDestroy(g->e0);
    if (g->e1) cudaEventDestroy(g->e1);
    if (g->stream) cudaStreamDestroy(g->stream);
    (void)cudaGetLastError();
    memset(g, 0, sizeof *g);
}

/* C = op(A) op(B) + beta C (a.beta: train_gpu_gemm.h): A and B bfloat16,
 * C bfloat16 or float32 (ctype), float32 accumulation. */
static int gemm(gpu_t *g, tg_gemm_t a, const uint16_t *A, const uint16_t *B, void *C,
                cudaDataType_t ctype, const char *what) {
    const float one = 1.0f, beta = a.beta;
    char desc[128];
    snprintf(desc, sizeof desc, "%s, m %d n %d k %d", what, a.m, a.n, a.k);
    CUBLAS(cublasGemmEx(g->blas, a.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                        a.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, a.m, a.n, a.k, &one, A, CUDA_R_16BF,
                        a.lda, B, CUDA_R_16BF, a.ldb, &beta, C, ctype, a.ldc, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT),
           desc);
    return 0;
}

/* Element counts of the stored operands (column-major, leading dimension
 * times the other extent). */
static size_t count_a(tg_gemm_t a) { return (size_t)a.lda * (size_t)(a.trans_a ? a.m : a.k); }
static size_t count_b(tg_gemm_t a) { return (size_t)a.ldb * (size_t)(a.trans_b ? a.k : a.n); }
static size_t count_c(tg_gemm_t a) { return (size_t)a.ldc * (size_t)a.n; }
static double gemm_flops(tg_gemm_t a) { return 2.0 * a.m * (double)a.n * (double)a.k; }

/* ---- 1. the bf16 GEMM rate ---- */

#define MAX_CASES (1 + 3 * MAX_LAYERS)

typedef struct gemm_case {
    char name[64];
    tg_gemm_t args;
    cudaDataType_t ctype;
    double ms, tflops;
} gemm_case_t;

/* The median of `iters` single calls, each between two events, after
 * GEMM_WARMUP untimed calls. C starts zeroed (the previous case may have
 * left bit patterns of the other type in it). */
static int time_gemm(gpu_t *g, gemm_case_t *c, const uint16_t *A, const uint16_t *B, void *C,
                     int iters, double *scratch) {
    size_t bytes_c = count_c(c->args) * (c->ctype == CUDA_R_32F ? 4 : 2);
    CU(cudaMemsetAsync(C, 0, bytes_c, g->stream), c->name);
    for (int i = 0; i < GEMM_WARMUP; i++)
        if (gemm(g, c->args, A, B, C, c->ctype, c->name)) return -1;
    for (int i = 0; i < iters; i++) {
        float ms;
        CU(cudaEventRecord(g->e0, g->stream), c->name);
        if (gemm(g, c->args, A, B, C, c->ctype, c->name)) return -1;
        CU(cudaEventRecord(g->e1, g->stream), c->name);
        CU(cudaEventSynchronize(g->e1), c->name);
        CU(cudaEventElapsedTime(&ms, g->e0, g->e1), c->name);
        scratch[i] = ms;
    }
    c->ms = bench_median(scratch, iters);
    c->tflops = gemm_flops(c->args) / (c->ms * 1e-3) / 1e12;
    return 0;
}

/* The cases: the square product (if --square), then each layer's forward,
 * weight gradient and input gradient (not for the first layer) with the
 * step's own types. */
static int gemm_cases(const options_t *o, gemm_case_t *cases) {
    int n = 0;
    if (o->square > 0) {
        gemm_case_t *c = &cases[n++];
        int s = o->square;
        snprintf(c->name, sizeof c->name, "%d^3", s);
        c->args = tg_gemm_args(TG_FORWARD, s, s, s);
        c->ctype = CUDA_R_16BF;
    }
    for (int l = 0; l < o->nlayers; l++) {
        int fi = o->dims[l], fo = o->dims[l + 1];
        static const char *const kinds[] = {"forward", "wgrad", "dgrad"};
        for (int k = TG_FORWARD; k <= TG_DGRAD; k++) {
            if (k == TG_DGRAD && l == 0) continue;
            gemm_case_t *c = &cases[n++];
            c->args = tg_gemm_args((tg_gemm_kind_t)k, fi, fo, o->batch);
            snprintf(c->name, sizeof c->name, "fc%d %s %dx%dx%d", l + 1, kinds[k], c->args.m,
                     c->args.n, c->args.k);
            c->ctype = k == TG_WGRAD ? CUDA_R_32F : CUDA_R_16BF;
        }
    }
    return n;
}

/* Time every case on scratch operands (pseudo-random bfloat16 in [-1, 1]).
 * The buffers are freed before the model is built. */
static int gemm_rates(const options_t *o, gpu_t *g, gemm_case_t *cases, int n) {
    size_t na = 0, nb = 0, bytes_c = 0;
    for (int i = 0; i < n; i++) {
        size_t a = count_a(cases[i].args), b = count_b(cases[i].args);
        size_t cb = count_c(cases[i].args) * (cases[i].ctype == CUDA_R_32F ? 4 : 2);
        na = a > na ? a : na;
        nb = b > nb ? b : nb;
        bytes_c = cb > bytes_c ? cb : bytes_c;
    }
    uint16_t *A = NULL, *B = NULL;
    void *C = NULL;
    double *scratch = malloc((size_t)o->gemm_iters * sizeof *scratch);
    int rc = -1;
    if (scratch == NULL) return fail("out of memory");
    cudaError_t r;
    if ((r = cudaMalloc((void **)&A, na * 2)) != cudaSuccess ||
        (r = cudaMalloc((void **)&B, nb * 2)) != cudaSuccess ||
        (r = cudaMalloc(&C, bytes_c)) != cudaSuccess) {
        (void)cudaGetLastError();
        fail("cudaMalloc (GEMM-rate operands, %zu + %zu + %zu bytes) failed: %s", na * 2, nb * 2,
             bytes_c, cudaGetErrorString(r));
        goto done;
    }
    if ((r = tgk_fill_bf16(A, na, 1, g->stream)) != cudaSuccess ||
        (r = tgk_fill_bf16(B, nb, 2, g->stream)) != cudaSuccess) {
        (void)cudaGetLastError();
        fail("filling the GEMM-rate operands failed: %s", cudaGetErrorString(r));
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (time_gemm(g, &cases[i], A, B, C, o->gemm_iters, scratch)) goto done;
    rc = 0;
done:
    if (A) cudaFree(A);
    if (B) cudaFree(B);
    if (C) cudaFree(C);
    free(scratch);
    return rc;
}

/* ---- 2. the synthetic model through acx ---- */

typedef struct model {
    int L, B, dims[MAX_LAYERS + 1];
    int sharded; /* not NO_SHARD: recast per acquire into wcast (header) */
    int synced;  /* the last micro-step was a synchronization boundary */
    acx_model_t *m;
    acx_optimizer_t *opt;
    acx_unit_t *unit[MAX_LAYERS];
    acx_param_t *w[MAX_LAYERS];    /* fc(l+1).weight [D(l+1) x D(l)] */
    uint16_t *wbf[MAX_LAYERS];     /* NO_SHARD: device bf16 [D(l+1) x D(l)], the cast compute
                                      copy, kept from forward to backward */
    uint16_t *wcast;               /* sharded: device bf16 [max D(l) D(l+1)], the cast of the
                                      unit acquired now */
    uint16_t *act[MAX_LAYERS + 1]; /* device bf16 [B x D(l)]: act[0] the input, act[l+1]
                                      layer l's output (post-ReLU but the last) */
    uint16_t *dact, *dtmp;         /* device bf16 [B x max width]: output / input gradients */
    float *target;                 /* device [B x DL] */
    double *row_loss, *loss;       /* device [B], [1] */
    double *loss_host;             /* pinned [1] */
    float *wgrad_scratch;          /* device [max D(l) D(l+1)]: the GEMMs-alone pass */
} model_t;

static size_t layer_numel(const model_t *md, int l) {
    return (size_t)md->dims[l] * (size_t)md->dims[l + 1];
}

/* Where layer l's bfloat16 weights are cast to and read from. */
static uint16_t *weights_bf16(const model_t *md, int l) {
    return md->sharded ? md->wcast : md->wbf[l];
}

static int max_width(const model_t *md) {
    int w = 0;
    for (int l = 0; l <= md->L; l++)
        w = md->dims[l] > w ? md->dims[l] : w;
    return w;
}

/* FLOPs of one step's GEMMs (the header's formula). */
static double step_flops(const model_t *md) {
    double f = 0.0;
    for (int l = 0; l < md->L; l++)
        f += 2.0 * md->B * (double)layer_numel(md, l) * (l ? 3 : 2);
    return f;
}

/* The fixed batch of this rank, on the host: inputs x [B x D0] and targets
 * t [B x DL], each k/128 for k in -128..127 (exact in bfloat16). */
static void make_data(const model_t *md, long long seed, int rank, uint16_t *x, float *t) {
    uint64_t s = 0xda7a000000000000ull ^ ((uint64_t)seed << 16) ^ (uint64_t)rank;
    size_t nx = (size_t)md->B * (size_t)md->dims[0], nt = (size_t)md->B * (size_t)md->dims[md->L];
    for (size_t i = 0; i < nx; i++)
        x[i] = bf16_bits((float)((int)(bench_splitmix64(&s) >> 56) - 128) / 128.0f);
    for (size_t i = 0; i < nt; i++)
        t[i] = (float)((int)(bench_splitmix64(&s) >> 56) - 128) / 128.0f;
}

static int model_register(acx_accelerator_t *acc, model_t *md, const options_t *o) {
    md->L = o->nlayers;
    md->B = o->batch;
    md->sharded = o->strategy != ACX_NO_SHARD;
    memcpy(md->dims, o->dims, sizeof md->dims);
    ACX(acx_model_create(acc, &md->m));
    for (int l = 0; l < md->L; l++) {
        char unit[16], param[32];
        snprintf(unit, sizeof unit, "fc%d", l + 1);
        snprintf(param, sizeof param, "fc%d.weight", l + 1);
        ACX(acx_model_add_unit(md->m, unit, &md->unit[l]));
        ACX(acx_unit_add_param(md->unit[l], param, 2, (int64_t[]){md->dims[l + 1], md->dims[l]},
                               ACX_INIT_SPEC_LINEAR_WEIGHT, &md->w[l]));
    }
    if (o->check) {
        acx_sgd_hparams_t hp = ACX_SGD_DEFAULT; /* p -= lr g: the update is the gradient */
        hp.lr = o->lr;
        ACX(acx_sgd_create(md->m, &hp, &md->opt));
    } else {
        acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
        hp.lr = o->lr;
        ACX(acx_adamw_create(md->m, &hp, &md->opt));
    }
    return 0;
}

static int device_alloc(void **p, size_t bytes, const char *what) {
    CU(cudaMalloc(p, bytes), what);
    return 0;
}

/* The model's own device buffers and the fixed batch (after acx_prepare). */
static int model_buffers(model_t *md, long long seed) {
    size_t B = (size_t)md->B, w = (size_t)max_width(md), largest = 0;
    for (int l = 0; l < md->L; l++) {
        size_t n = layer_numel(md, l);
        largest = n > largest ? n : largest;
        if (!md->sharded && device_alloc((void **)&md->wbf[l], n * 2, "bf16 weights")) return -1;
    }
    if (md->sharded && device_alloc((void **)&md->wcast, largest * 2, "bf16 weights (scratch)"))
        return -1;
    for (int l = 0; l <= md->L; l++)
        if (device_alloc((void **)&md->act[l], B * (size_t)md->dims[l] * 2, "activations"))
            return -1;
    if (device_alloc((void **)&md->dact, B * w * 2, "output gradients") ||
        device_alloc((void **)&md->dtmp, B * w * 2, "input gradients") ||
        device_alloc((void **)&md->target, B * (size_t)md->dims[md->L] * 4, "targets") ||
        device_alloc((void **)&md->row_loss, B * sizeof(double), "per-sample losses") ||
        device_alloc((void **)&md->loss, sizeof(double), "mean loss") ||
        device_alloc((void **)&md->wgrad_scratch, largest * 4, "weight-gradient scratch"))
        return -1;
    /* added into with beta 1 by the GEMMs-alone pass: start from zeros */
    CU(cudaMemset(md->wgrad_scratch, 0, largest * 4), "weight-gradient scratch");
    CU(cudaMallocHost((void **)&md->loss_host, sizeof(double)), "pinned loss");
    size_t nx = B * (size_t)md->dims[0], nt = B * (size_t)md->dims[md->L];
    uint16_t *x = malloc(nx * 2);
    float *t = malloc(nt * 4);
    if (!x || !t) {
        free(x);
        free(t);
        return fail("out of memory for the batch (%zu + %zu bytes)", nx * 2, nt * 4);
    }
    make_data(md, seed, world_rank, x, t);
    cudaError_t r1 = cudaMemcpy(md->act[0], x, nx * 2, cudaMemcpyHostToDevice);
    cudaError_t r2 = cudaMemcpy(md->target, t, nt * 4, cudaMemcpyHostToDevice);
    free(x);
    free(t);
    CU(r1, "the inputs to the device");
    CU(r2, "the targets to the device");
    return 0;
}

static void model_free(model_t *md) {
    for (int l = 0; l < MAX_LAYERS; l++)
        cudaFree(md->wbf[l]);
    cudaFree(md->wcast);
    for (int l = 0; l <= MAX_LAYERS; l++)
        cudaFree(md->act[l]);
    cudaFree(md->dact);
    cudaFree(md->dtmp);
    cudaFree(md->target);
    cudaFree(md->row_loss);
    cudaFree(md->loss);
    cudaFree(md->wgrad_scratch);
    if (md->loss_host) cudaFreeHost(md->loss_host);
    (void)cudaGetLastError();
}

/* Cast the compute copy of layer l (acquired) to bfloat16 where
 * weights_bf16 says. */
static int cast_weights(model_t *md, int l, cudaStream_t s) {
    const float *w = acx_param_data(md->w[l]);
    if (w == NULL) return fail("acx_param_data(fc%d.weight): %s", l + 1, acx_last_error());
    CU(tgk_f32_to_bf16(w, weights_bf16(md, l), layer_numel(md, l), s), "casting the weights");
    return 0;
}

/* One micro-step (the header's list): with gradient_accumulation_steps 1
 * a training step. *loss_p = this rank's mean loss of the micro-step
 * (before the update). Ends with the stream synchronized. */
static int model_step(acx_accelerator_t *acc, model_t *md, gpu_t *g, double *loss_p) {
    cudaStream_t s = g->stream;
    size_t B = (size_t)md->B;
    ACX(acx_accumulate_begin(acc));
    for (int l = 0; l < md->L; l++) {
        int fi = md->dims[l], fo = md->dims[l + 1];
        ACX(acx_unit_acquire(md->unit[l]));
        if (cast_weights(md, l, s)) return -1;
        tg_gemm_t a = tg_gemm_args(TG_FORWARD, fi, fo, md->B);
        if (gemm(g, a, weights_bf16(md, l), md->act[l], md->act[l + 1], CUDA_R_16BF, "forward"))
            return -1;
        if (l < md->L - 1) CU(tgk_relu_bf16(md->act[l + 1], B * (size_t)fo, s), "ReLU");
        ACX(acx_unit_release(md->unit[l])); /* sharded: the gathered unit is freed */
    }
    int out = md->dims[md->L];
    CU(tgk_mse_bf16(md->act[md->L], md->target, md->B, out, 1.0f / (float)md->B, md->dact,
                    md->row_loss, md->loss, s),
       "the loss");
    CU(cudaMemcpyAsync(md->loss_host, md->loss, sizeof(double), cudaMemcpyDeviceToHost, s),
       "the loss to the host");
    for (int l = md->L - 1; l >= 0; l--) {
        int fi = md->dims[l], fo = md->dims[l + 1];
        ACX(acx_unit_acquire(md->unit[l])); /* sharded: gathered again */
        float *gw = acx_param_grad(md->w[l]);
        if (gw == NULL) return fail("acx_param_grad(fc%d.weight): %s", l + 1, acx_last_error());
        /* beta 1 (train_gpu_gemm.h): added into acx's gradient buffer */
        if (gemm(g, tg_gemm_args(TG_WGRAD, fi, fo, md->B), md->act[l], md->dact, gw, CUDA_R_32F,
                 "weight gradient"))
            return -1;
        if (l > 0) {
            if (md->sharded && cast_weights(md, l, s)) return -1;
            if (gemm(g, tg_gemm_args(TG_DGRAD, fi, fo, md->B), weights_bf16(md, l), md->dact,
                     md->dtmp, CUDA_R_16BF, "input gradient"))
                return -1;
            CU(tgk_relu_mask_bf16(md->act[l], md->dtmp, B * (size_t)fi, s), "ReLU backward");
            uint16_t *t = md->dact;
            md->dact = md->dtmp;
            md->dtmp = t;
        }
        ACX(acx_unit_grads_ready(md->unit[l]));
        ACX(acx_unit_release(md->unit[l]));
    }
    ACX(acx_backward_end(acc));
    md->synced = acx_sync_gradients(acc);
    if (md->synced) {
        ACX(acx_optimizer_step(md->opt));
        ACX(acx_optimizer_zero_grad(md->opt));
    }
    ACX(acx_accumulate_end(acc));
    CU(cudaStreamSynchronize(s), "the end of the step");
    *loss_p = *md->loss_host;
    return 0;
}

/* ---- 3. the step's GEMMs alone ---- */

static int gemms_alone(model_t *md, gpu_t *g, double *ms_p) {
    CU(cudaEventRecord(g->e0, g->stream), "GEMMs alone");
    for (int l = 0; l < md->L; l++)
        if (gemm(g, tg_gemm_args(TG_FORWARD, md->dims[l], md->dims[l + 1], md->B),
                 weights_bf16(md, l), md->act[l], md->act[l + 1], CUDA_R_16BF, "forward (alone)"))
            return -1;
    for (int l = md->L - 1; l >= 0; l--) {
        int fi = md->dims[l], fo = md->dims[l + 1];
        if (gemm(g, tg_gemm_args(TG_WGRAD, fi, fo, md->B), md->act[l], md->dact, md->wgrad_scratch,
                 CUDA_R_32F, "weight gradient (alone)"))
            return -1;
        if (l > 0 && gemm(g, tg_gemm_args(TG_DGRAD, fi, fo, md->B), weights_bf16(md, l), md->dact,
                          md->dtmp, CUDA_R_16BF, "input gradient (alone)"))
            return -1;
    }
    CU(cudaEventRecord(g->e1, g->stream), "GEMMs alone");
    CU(cudaEventSynchronize(g->e1), "GEMMs alone");
    float ms;
    CU(cudaEventElapsedTime(&ms, g->e0, g->e1), "GEMMs alone");
    *ms_p = ms;
    return 0;
}

/* ---- --check: the CPU reference ---- */

/* One step of the model on the host: weights wc[l] (the bfloat16 compute
 * copies, as floats), inputs x, targets t; the GPU's rounding points
 * (activations and output gradients rounded to bfloat16 once from the
 * accumulated sum), sums in double. *loss_p = the loss; g[l] = d loss /
 * d W_l [D(l+1) x D(l)]. Returns 0, or -1 out of memory (err_msg). */
static int reference_step(const model_t *md, float *const *wc, const float *x, const float *t,
                          float **g, double *loss_p) {
    int L = md->L, B = md->B, rc = -1;
    float *a[MAX_LAYERS + 1] = {0}, *dy = NULL, *dx = NULL;
    double loss = 0.0;
    a[0] = (float *)x;
    for (int l = 0; l < L; l++) {
        int fi = md->dims[l], fo = md->dims[l + 1];
        a[l + 1] = malloc((size_t)B * (size_t)fo * sizeof(float));
        if (a[l + 1] == NULL) goto oom;
        for (int b = 0; b < B; b++)
            for (int o = 0; o < fo; o++) {
                double s = 0.0;
                for (int i = 0; i < fi; i++)
                    s += (double)a[l][(size_t)b * fi + i] * wc[l][(size_t)o * fi + i];
                float v = bf16_round((float)s);
                a[l + 1][(size_t)b * fo + o] = l < L - 1 && v < 0.0f ? 0.0f : v;
            }
    }
    int out = md->dims[L];
    float inv_b = 1.0f / (float)B;
    dy = malloc((size_t)B * (size_t)max_width(md) * sizeof(float));
    dx = malloc((size_t)B * (size_t)max_width(md) * sizeof(float));
    if (dy == NULL || dx == NULL) goto oom;
    for (size_t i = 0; i < (size_t)B * (size_t)out; i++) {
        float e = a[L][i] - t[i];
        dy[i] = bf16_round(e * inv_b);
        loss += (double)e * (double)e;
    }
    loss /= 2.0 * B;
    for (int l = L - 1; l >= 0; l--) {
        int fi = md->dims[l], fo = md->dims[l + 1];
        for (int o = 0; o < fo; o++)
            for (int i = 0; i < fi; i++) {
                double s = 0.0;
                for (int b = 0; b < B; b++)
                    s += (double)dy[(size_t)b * fo + o] * a[l][(size_t)b * fi + i];
                g[l][(size_t)o * fi + i] = (float)s;
            }
        if (l == 0) break;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < fi; i++) {
                double s = 0.0;
                for (int o = 0; o < fo; o++)
                    s += (double)dy[(size_t)b * fo + o] * wc[l][(size_t)o * fi + i];
                dx[(size_t)b * fi + i] =
                    a[l][(size_t)b * fi + i] <= 0.0f ? 0.0f : bf16_round((float)s);
            }
        float *tmp = dy;
        dy = dx;
        dx = tmp;
    }
    *loss_p = loss;
    rc = 0;
    goto done;
oom:
    fail("out of memory for the CPU reference");
done:
    for (int l = 1; l <= L; l++)
        free(a[l]);
    free(dy);
    free(dx);
    return rc;
}

/* One step of the check: gradient_accumulation_steps (2) micro-steps on
 * the same batch, the optimizer stepping after the last (header);
 * *loss_p = the first micro-step's loss. */
static int check_step(acx_accelerator_t *acc, model_t *md, gpu_t *g, double *loss_p) {
    double loss;
    for (int i = 0; i < CHECK_ACCUMULATION; i++) {
        if (model_step(acc, md, g, i == 0 ? loss_p : &loss)) return -1;
        if (md->synced != (i == CHECK_ACCUMULATION - 1))
            return fail("micro-step %d of %d of a check step %s a synchronization boundary "
                        "(acx_sync_gradients): gradient_accumulation_steps is not %d",
                        i + 1, CHECK_ACCUMULATION, md->synced ? "was" : "was not",
                        CHECK_ACCUMULATION);
    }
    return 0;
}

/* The check (header): returns 0 when it passed, 1 when it failed (said
 * why), -1 on an error (err_msg). */
static int run_check(acx_accelerator_t *acc, model_t *md, gpu_t *g, const options_t *o) {
    int L = md->L, failed = 0, rc = -1;
    float *p0[MAX_LAYERS] = {0}, *p1[MAX_LAYERS] = {0}, *gref[MAX_LAYERS] = {0};
    float *x = NULL, *t = NULL;
    uint16_t *xb = NULL;
    double *losses = calloc((size_t)o->steps, sizeof *losses);
    size_t nx = (size_t)md->B * (size_t)md->dims[0], nt = (size_t)md->B * (size_t)md->dims[L];
    x = malloc(nx * sizeof *x);
    t = malloc(nt * sizeof *t);
    xb = malloc(nx * sizeof *xb);
    if (!losses || !x || !t || !xb) goto oom;
    for (int l = 0; l < L; l++) {
        size_t n = layer_numel(md, l);
        p0[l] = malloc(n * sizeof(float));
        p1[l] = malloc(n * sizeof(float));
        gref[l] = malloc(n * sizeof(float));
        if (!p0[l] || !p1[l] || !gref[l]) goto oom;
        if (acx_param_gather(md->w[l], p0[l]) != ACX_OK) {
            fail("acx_param_gather(fc%d.weight): %s", l + 1, acx_last_error());
            goto done;
        }
    }
    if (check_step(acc, md, g, &losses[0])) goto done;
    for (int l = 0; l < L; l++)
        if (acx_param_gather(md->w[l], p1[l]) != ACX_OK) {
            fail("acx_param_gather(fc%d.weight): %s", l + 1, acx_last_error());
            goto done;
        }
    /* The reference from the same initial master weights, rounded as
     * mixed precision's compute copies are (docs/mixed-precision.md). */
    make_data(md, o->seed, world_rank, xb, t);
    for (size_t i = 0; i < nx; i++)
        x[i] = bf16_value(xb[i]);
    float *wc[MAX_LAYERS];
    for (int l = 0; l < L; l++) {
        size_t n = layer_numel(md, l);
        wc[l] = malloc(n * sizeof(float));
        if (wc[l] == NULL) {
            for (int k = 0; k < l; k++)
                free(wc[k]);
            goto oom;
        }
        for (size_t i = 0; i < n; i++)
            wc[l][i] = bf16_round(p0[l][i]);
    }
    double loss_ref = NAN;
    int ref = reference_step(md, wc, x, t, gref, &loss_ref);
    for (int l = 0; l < L; l++)
        free(wc[l]);
    if (ref) goto done;
    double loss_err = fabs(losses[0] - loss_ref) / fabs(loss_ref);
    int ok = loss_err <= CHECK_LOSS_TOL;
    failed |= !ok;
    bench_say("check: step 1 loss %.9g, CPU reference %.9g: relative error %.2e (bound %.0e) %s\n",
              losses[0], loss_ref, loss_err, CHECK_LOSS_TOL, ok ? "ok" : "FAILED");
    for (int l = 0; l < L; l++) {
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < layer_numel(md, l); i++) {
            double upd = ((double)p0[l][i] - (double)p1[l][i]) / o->lr;
            double e = upd - (double)gref[l][i];
            num += e * e;
            den += (double)gref[l][i] * (double)gref[l][i];
        }
        double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
        ok = rel <= CHECK_GRAD_TOL && den > 0.0;
        failed |= !ok;
        bench_say(
            "check: fc%d.weight [%d x %d]: ||(p0 - p1)/lr - g_ref|| / ||g_ref|| = %.2e (bound "
            "%.0e; ||g_ref|| = %.3e) %s\n",
            l + 1, md->dims[l + 1], md->dims[l], rel, CHECK_GRAD_TOL, sqrt(den),
            ok ? "ok" : "FAILED");
    }
    for (int i = 1; i < o->steps; i++)
        if (check_step(acc, md, g, &losses[i])) goto done;
    ok = isfinite(losses[o->steps - 1]) && losses[o->steps - 1] < losses[0];
    failed |= !ok;
    bench_say("check: loss over %d SGD steps (lr %g, %d micro-steps each):", o->steps, o->lr,
              CHECK_ACCUMULATION);
    for (int i = 0; i < o->steps; i++)
        bench_say(" %.6g", losses[i]);
    bench_say(" -> %s\n", ok ? "decreased ok" : "did NOT decrease: FAILED");
    bench_say("check: %s\n", failed ? "FAILED" : "PASSED");
    rc = failed;
    goto done;
oom:
    fail("out of memory for the check");
done:
    for (int l = 0; l < L; l++) {
        free(p0[l]);
        free(p1[l]);
        free(gref[l]);
    }
    free(x);
    free(t);
    free(xb);
    free(losses);
    return rc;
}

/* ---- the benchmark ---- */

typedef struct results {
    int ncases;
    gemm_case_t cases[MAX_CASES];
    double step_ms, p10, p90, min, max, samples_per_s, flops, achieved, peak, mfu;
    double gemm_ms, gemm_share, gemm_tflops, first_loss, last_loss;
} results_t;

static int run_timed(acx_accelerator_t *acc, model_t *md, gpu_t *g, const options_t *o,
                     results_t *r) {
    int S = o->steps, rc = -1;
    double *t = malloc((size_t)S * sizeof *t), loss;
    if (t == NULL) return fail("out of memory");
    for (int i = 0; i < o->warmup; i++)
        if (model_step(acc, md, g, i == 0 ? &r->first_loss : &loss)) goto done;
    for (int i = 0; i < S; i++) {
        double t0 = MPI_Wtime();
        if (model_step(acc, md, g, &loss)) goto done;
        t[i] = MPI_Wtime() - t0;
        if (o->warmup == 0 && i == 0) r->first_loss = loss;
    }
    r->last_loss = loss;
    MPI_Allreduce(MPI_IN_PLACE, t, S, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* slowest rank */
    r->step_ms = 1e3 * bench_median(t, S);
    r->p10 = 1e3 * bench_quantile(t, S, 0.1);
    r->p90 = 1e3 * bench_quantile(t, S, 0.9);
    r->min = 1e3 * bench_quantile(t, S, 0.0);
    r->max = 1e3 * bench_quantile(t, S, 1.0);
    r->samples_per_s = (double)md->B * world_size / (r->step_ms * 1e-3);
    r->flops = step_flops(md);
    r->achieved = r->flops / (r->step_ms * 1e-3) / 1e12;
    for (int i = 0; i < S; i++) /* the step's GEMMs alone, as many times */
        if (gemms_alone(md, g, &t[i])) goto done;
    r->gemm_ms = bench_median(t, S);
    r->gemm_share = r->gemm_ms / r->step_ms;
    r->gemm_tflops = r->flops / (r->gemm_ms * 1e-3) / 1e12;
    r->mfu = r->peak > 0.0 ? r->achieved / r->peak : NAN;
    rc = 0;
done:
    free(t);
    return rc;
}

/* s as the characters of a JSON string (RFC 8259: quote, backslash and
 * control characters escaped). */
static void json_chars(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
}

static void write_json(FILE *f, const options_t *o, const gpu_t *g, const model_t *md,
                       const results_t *r, int64_t params) {
    fprintf(f, "{\"benchmark\": \"" PROG "\", \"device\": \"");
    json_chars(f, g->name);
    fprintf(f, "\", \"ranks\": %d, \"dims\": [", world_size);
    for (int l = 0; l <= md->L; l++)
        fprintf(f, "%s%d", l ? ", " : "", md->dims[l]);
    fprintf(f,
            "], \"batch_size\": %d, \"strategy\": \"%s\", \"backend\": \"%s\", "
            "\"mixed_precision\": \"bf16\", \"steps\": %d, \"warmup\": %d, \"params\": %lld",
            md->B, bench_strategy_names[o->strategy & 3], backend_names[o->backend % 3], o->steps,
            o->warmup, (long long)params);
    bench_json_number(f, "flops_per_step", r->flops);
    bench_json_number(f, "step_ms", r->step_ms);
    bench_json_number(f, "step_ms_p10", r->p10);
    bench_json_number(f, "step_ms_p90", r->p90);
    bench_json_number(f, "step_ms_min", r->min);
    bench_json_number(f, "step_ms_max", r->max);
    bench_json_number(f, "samples_per_s", r->samples_per_s);
    bench_json_number(f, "achieved_tflops", r->achieved);
    bench_json_number(f, "peak_bf16_tflops", r->peak);
    bench_json_number(f, "mfu", r->mfu);
    bench_json_number(f, "gemm_only_ms", r->gemm_ms);
    bench_json_number(f, "gemm_share", r->gemm_share);
    bench_json_number(f, "gemm_only_tflops", r->gemm_tflops);
    bench_json_number(f, "first_loss", r->first_loss);
    bench_json_number(f, "last_loss", r->last_loss);
    fprintf(f, ", \"gemm\": [");
    for (int i = 0; i < r->ncases; i++) {
        const gemm_case_t *c = &r->cases[i];
        fprintf(f,
                "%s{\"name\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"c\": \"%s\", "
                "\"ms\": %.6g, \"tflops\": %.6g}",
                i ? ", " : "", c->name, c->args.m, c->args.n, c->args.k,
                c->ctype == CUDA_R_32F ? "fp32" : "bf16", c->ms, c->tflops);
    }
    fprintf(f, "]}\n");
}

/* The results on rank 0. Returns 0, or -1 when the --json file cannot be
 * written (err_msg). */
static int report(const options_t *o, const gpu_t *g, const model_t *md, const results_t *r,
                  int64_t params) {
    char shape[128];
    int n = 0;
    for (int l = 0; l <= md->L && n < (int)sizeof shape - 8; l++)
        n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%d", l ? "-" : "", md->dims[l]);
    for (int i = 0; i < r->ncases; i++) {
        const gemm_case_t *c = &r->cases[i];
        bench_say("result: bf16 GEMM %s: %.1f TFLOP/s (%.3f ms, median of %d; C %s, float32 "
                  "accumulate)\n",
                  c->name, c->tflops, c->ms, o->gemm_iters,
                  c->ctype == CUDA_R_32F ? "fp32" : "bf16");
    }
    char mfu[160] = "MFU n/a (no GEMM-rate measurement)";
    if (isfinite(r->mfu))
        snprintf(mfu, sizeof mfu, "MFU %.1f%% of the measured bf16 GEMM %d^3 rate (%.1f TFLOP/s)",
                 100.0 * r->mfu, o->square, r->peak);
    bench_say(
        "result: synthetic %s batch %d %s %s: step %.3f ms (median of %d; p10 %.3f, p90 %.3f, "
        "min %.3f, max %.3f), %.0f samples/s, %.3g TFLOP/step, %.1f TFLOP/s, %s; GEMMs alone "
        "%.3f ms (%.1f%% of the step, %.1f TFLOP/s)\n",
        shape, md->B, bench_strategy_names[o->strategy & 3], backend_names[o->backend % 3],
        r->step_ms, o->steps, r->p10, r->p90, r->min, r->max, r->samples_per_s, r->flops / 1e12,
        r->achieved, mfu, r->gemm_ms, 100.0 * r->gemm_share, r->gemm_tflops);
    bench_say(
        "synthetic model: %lld parameters, %d rank(s) x batch %d; FLOPs/step = 6 B P - 2 B D0 D1 "
        "= %.6g (GEMMs only); loss %.6g (first step) -> %.6g (last)\n",
        (long long)params, world_size, md->B, r->flops, r->first_loss, r->last_loss);
    if (world_rank != 0) return 0;
    write_json(stdout, o, g, md, r, params);
    fflush(stdout);
    if (o->json) {
        FILE *f = fopen(o->json, "w");
        if (f == NULL) return fail("cannot write --json '%s': %s", o->json, strerror(errno));
        write_json(f, o, g, md, r, params);
        int bad = ferror(f), saved = errno;
        if (fclose(f) != 0 || bad)
            return fail("writing --json '%s' failed: %s", o->json, strerror(bad ? saved : errno));
    }
    return 0;
}

/* 0 when this process sees a CUDA device, else the reason in why. */
static int no_device(char *why, size_t len) {
    int n = 0;
    cudaError_t r = cudaGetDeviceCount(&n);
    if (r != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, len, "cudaGetDeviceCount: %s: %s", cudaGetErrorName(r),
                 cudaGetErrorString(r));
        return 1;
    }
    if (n < 1) {
        snprintf(why, len, "cudaGetDeviceCount: no device visible");
        return 1;
    }
    return 0;
}

/* 1 when the device acx bound is older than compute capability 8.0 (the
 * reason in why), 0 when it is recent enough, -1 on an error (err_msg). */
static int old_device(char *why, size_t len) {
    struct cudaDeviceProp prop;
    int dev;
    CU(cudaGetDevice(&dev), "the device acx bound");
    CU(cudaGetDeviceProperties(&prop, dev), "the device's compute capability");
    if (prop.major >= 8) return 0;
    snprintf(why, len,
             "cuda:%d (%s) has compute capability %d.%d; bfloat16 GEMMs and this program's "
             "kernels (sm_80, sm_90) need 8.0 (Ampere) or later",
             dev, prop.name, prop.major, prop.minor);
    return 1;
}

static int run(int argc, char **argv) {
    int provided, rc = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    options_t o;
    memset(&o, 0, sizeof o);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (world_rank == 0) usage(stdout);
            MPI_Finalize();
            return 0;
        }
    if ((rc = take_config_options(&argc, argv, &o)) != 0) {
        MPI_Finalize();
        return rc;
    }
    int pargc = 0;
    char **pargv = program_args(argc, argv, &pargc);
    if (pargv == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        MPI_Finalize();
        return 1;
    }
    rc = parse_options(pargc, pargv, &o);
    free(pargv);
    if (rc != 0) {
        MPI_Finalize();
        return rc;
    }
    /* Without a device on every rank there is nothing to measure. */
    char why[512] = "";
    int none = no_device(why, sizeof why), any_none, rank0_none = none;
    MPI_Allreduce(&none, &any_none, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Bcast(&rank0_none, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (any_none) { /* rank 0 says why, or the ranks that lack one when it has one */
        if (none && (world_rank == 0 || !rank0_none))
            fprintf(stderr, PROG ": no CUDA device: %s (rank %d)\n", why, world_rank);
        MPI_Finalize();
        return EXIT_SKIP;
    }

    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.mixed_precision = ACX_MP_BF16;
    cfg.device_state = ACX_DEVICE_STATE_CUDA;
    cfg.sharding_strategy = o.strategy;
    cfg.backend = o.backend;
    cfg.gradient_accumulation_steps = o.check ? CHECK_ACCUMULATION : 1;
    cfg.seed = o.seed;
    acx_accelerator_t *acc = NULL;
    acx_status_t st = acx_init(&argc, &argv, &cfg, &acc);
    if (st != ACX_OK) {
        int refused = st == ACX_ERR_NOT_SUPPORTED;
        if (world_rank == 0)
            fprintf(stderr, PROG ": %s sharding_strategy %s with backend %s: %s\n",
                    refused ? "acx refused" : "acx_init failed for",
                    bench_strategy_names[o.strategy & 3], backend_names[o.backend % 3],
                    acx_last_error());
        MPI_Finalize();
        return refused ? EXIT_REFUSED : 1;
    }
    gpu_t g;
    model_t md;
    results_t *r = calloc(1, sizeof *r);
    memset(&g, 0, sizeof g);
    memset(&md, 0, sizeof md);
    if (r == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        rc = 1;
        goto finalize;
    }
    /* bfloat16 GEMMs and the sm_80/sm_90 kernels need compute capability
     * 8.0 (Ampere) or later on every rank's device (the one acx bound). */
    int old = old_device(why, sizeof why), any_old = 0;
    MPI_Allreduce(&old, &any_old, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (old < 0) goto fail;
    if (any_old) {
        if (old) fprintf(stderr, PROG ": no usable CUDA device: %s (rank %d)\n", why, world_rank);
        rc = EXIT_SKIP;
        goto finalize;
    }
    rc = 1;
    if (gpu_init(&g)) goto fail;
    bench_say(PROG ": %s (cuda:%d), %d rank(s); acx %s, sharding_strategy %s, backend %s, "
                   "device_state cuda, mixed_precision bf16\n",
              g.name, g.device, world_size, acx_version(), bench_strategy_names[o.strategy & 3],
              backend_names[o.backend % 3]);

    if (!o.check && o.gemm_iters > 0) {
        r->ncases = gemm_cases(&o, r->cases);
        if (gemm_rates(&o, &g, r->cases, r->ncases)) goto fail;
        if (o.square > 0) r->peak = r->cases[0].tflops;
    }

    if (model_register(acc, &md, &o)) goto fail;
    st = acx_prepare(acc, md.m, md.opt, NULL);
    if (st == ACX_ERR_NOT_SUPPORTED) {
        if (world_rank == 0)
            fprintf(stderr, PROG ": acx refused sharding_strategy %s with backend %s: %s\n",
                    bench_strategy_names[o.strategy & 3], backend_names[o.backend % 3],
                    acx_last_error());
        rc = EXIT_REFUSED;
        goto finalize;
    }
    if (st != ACX_OK) {
        fail("acx_prepare: %s", acx_last_error());
        goto fail;
    }
    if (acx_set_compute_stream(acc, g.stream) != ACX_OK) {
        fail("acx_set_compute_stream: %s", acx_last_error());
        goto fail;
    }
    if (acx_optimizer_zero_grad(md.opt) != ACX_OK) {
        fail("acx_optimizer_zero_grad: %s", acx_last_error());
        goto fail;
    }
    if (model_buffers(&md, o.seed)) goto fail;
    int64_t params = acx_model_numel(md.m);

    if (o.check) {
        int c = run_check(acc, &md, &g, &o);
        if (c < 0) goto fail;
        rc = c;
    } else {
        if (run_timed(acc, &md, &g, &o, r)) goto fail;
        /* only rank 0 writes: the others are at finalize already, no abort */
        rc = report(&o, &g, &md, r, params) ? 1 : 0;
        if (rc) fprintf(stderr, PROG ": %s\n", err_msg);
    }
    goto finalize;

fail:
    fprintf(stderr, PROG ": rank %d: %s\n", world_rank, err_msg);
    if (world_size > 1) acx_abort(acc, 1, PROG " failed");
    rc = 1;
finalize:
    /* acx stops using our stream before it is destroyed */
    if (g.stream && acx_set_compute_stream(acc, NULL) != ACX_OK && rc == 0) rc = 1;
    model_free(&md);
    gpu_free(&g);
    free(r);
    if (acx_finalize(acc) != ACX_OK && rc == 0) rc = 1;
    MPI_Finalize();
    return rc;
}

int main(int argc, char **argv) { return run(argc, argv); }

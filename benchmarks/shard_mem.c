/*
 * benchmarks/shard_mem.c — acx-bench-shard-mem: the peak resident memory of
 * every rank and the step time of one sharding strategy, training a
 * synthetic MLP for a few steps, next to what the ZeRO formulas say the
 * strategy should hold. benchmarks/run-shard-mem.sh runs it once per
 * strategy and prints the side-by-side table.
 *
 * The model: L layers h_{l+1} = relu(h_l W_l^T + b_l) (no relu after the
 * last), each layer one acx unit of W_l [H x H] + b_l [H], Kaiming-normal
 * weights (relu gain, so the activations keep their scale through any
 * depth), trained with AdamW (lr 1e-4) on an MSE loss against synthetic
 * targets: one fixed batch of B samples per rank (different on every rank),
 * so the loss goes down step by step; global gradient norm clipped to 1.
 * The step is the FSDP way:
 *
 *   forward   acquire(l), z_l = h_l W_l^T + b_l, release(l)        l = 0..L-1
 *   backward  acquire(l), dW_l += dZ_l^T h_l, db_l += colsum dZ_l,
 *             dh_l = dZ_l W_l, grads_ready(l), release(l)           l = L-1..0
 *   acx_backward_end, acx_clip_grad_norm, acx_optimizer_step, zero_grad
 *
 * Buffers of the program (not counted by acx): activations h_l and outputs
 * o_l, [L x B x H] each, and a few [B x H] scratch rows: 8 L B H bytes.
 *
 * What is measured, per rank:
 *   baseline   VmHWM (/proc/self/status) after acx_init, one small sgemm and
 *              one 8 MiB MPI_Allreduce — the process, MPI's shared-memory
 *              segments and BLAS's buffers — before any model state exists:
 *              the fixed overhead.
 *   peak RSS   VmHWM at the end (it only grows): the real peak, whatever
 *              allocated it (acx, MPI's internal buffers, malloc's caching).
 *   acx peak   acx_memory_stats' peak_total and its per-category peaks: what
 *              acx's allocator accounting saw.
 *   formula    the strategy's bytes by the ZeRO rules for fp32 AdamW with
 *              acx's layout (P elements, U = largest unit, S ranks, Sh =
 *              padded shard elements, G = limit_all_gathers):
 *                NO_SHARD       16 P
 *                SHARD_GRAD_OP  4 P + 4 U + 16 Sh + 2 x 4 S ceil(U/S)
 *                FULL_SHARD     16 Sh + 4 U + G (4 U + 4 S ceil(U/S)) + 2 x 4 S ceil(U/S)
 *              and, when the library has it, acx_memory_estimate's total for
 *              the same model (looked up as a weak symbol, so the benchmark
 *              builds against a libacx without it and prints "-").
 *   step time  from a barrier to a barrier (the slowest rank), median of the
 *              timed steps after the warm-up steps; and the CPU seconds (user,
 *              system) per timed step of the busiest rank, which other jobs on
 *              a shared machine disturb less than the wall time (both include
 *              MPI's polling while a rank waits — its sched_yield calls are
 *              system time, beside page faults and mmap/munmap).
 *
 * Before acx_prepare the main process of each node checks that the node's
 * ranks fit: local ranks x (1.3 x formula + baseline) + 512 MiB must be below
 * MemAvailable, else every rank stops with exit status 3 and says so — a
 * NO_SHARD run of a model too large for the machine is refused, not OOM-killed.
 *
 * Output (rank 0): the loss of every step, per-rank lines, then one summary
 * line the script parses, memory in bytes (maxima over ranks, rss_min the
 * smallest rank's peak; estimate -1 when the library has no estimate;
 * ideal = 16P/N):
 *   shard-mem strategy=S np=N P=.. U=.. Sh=.. baseline=.. rss=.. rss_min=..
 *     acx_peak=.. formula=.. estimate=.. ideal=.. step_s=.. user_s=.. sys_s=..
 *     loss_first=.. loss_last=.. finite=0|1
 * Exit status 0, 1 (an acx call failed or the loss is not finite), 2 (usage),
 * 3 (not enough memory).
 *
 * --mmap-threshold N fixes glibc's M_MMAP_THRESHOLD for the whole process.
 * By default glibc raises the threshold to the size of each mmapped chunk
 * freed (up to 32 MiB), so after the first transient unit buffer is freed
 * the next ones come from the heap, and freed heap chunks stay resident:
 * the difference between the two runs is the memory malloc keeps.
 *
 * Leaves to others: the strategies themselves (libacx, public API only),
 * the table and the runs of several strategies (run-shard-mem.sh).
 */
#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cblas.h>
#include <mpi.h>

#include <acx/acx.h>

#define PROG "acx-bench-shard-mem"
#define MIB  (1024.0 * 1024.0)

/* acx_memory_estimate may not be in the libacx this is linked with yet:
 * a weak reference resolves to NULL then. */
#pragma weak acx_memory_estimate

typedef struct options {
    int strategy;
    int64_t hidden, layers, batch;
    int steps, warmup;
    long mmap_threshold; /* 0: glibc's dynamic default */
} options_t;

/* ---- options ---- */

static const char *const strategy_names[] = {"no_shard", "shard_grad_op", "full_shard"};

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpirun -np N " PROG " [options]\n"
            "Train a synthetic MLP (L units of [H x H] + [H]) for a few steps under one sharding\n"
            "strategy; report each rank's peak RSS (VmHWM), acx's accounted peak, the ZeRO\n"
            "formula for the strategy and the median step time.\n\n"
            "  --strategy S          no_shard | shard_grad_op | full_shard (default full_shard)\n"
            "  --hidden H            layer width (default 2048)\n"
            "  --layers L            layers = units (default 24)\n"
            "  --batch B             samples per rank per step (default 4)\n"
            "  --steps K             timed steps (default 3)\n"
            "  --warmup W            untimed steps first (default 1)\n"
            "  --mmap-threshold N    mallopt(M_MMAP_THRESHOLD, N) before anything is allocated\n"
            "                        (bytes; default 0 = leave glibc's dynamic threshold)\n"
            "  --config FILE, --acx-KEY=VALUE   acx configuration (limit_all_gathers, ...)\n"
            "Normally run by benchmarks/run-shard-mem.sh.\n");
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* 0 to run, 1 after --help, -1 on a bad argument (message printed). */
static int parse_options(int argc, char **argv, int rank, options_t *o) {
    *o = (options_t){.strategy = ACX_FULL_SHARD,
                     .hidden = 2048,
                     .layers = 24,
                     .batch = 4,
                     .steps = 3,
                     .warmup = 1};
    static const struct option longopts[] = {{"strategy", required_argument, 0, 's'},
                                             {"hidden", required_argument, 0, 'H'},
                                             {"layers", required_argument, 0, 'L'},
                                             {"batch", required_argument, 0, 'b'},
                                             {"steps", required_argument, 0, 'k'},
                                             {"warmup", required_argument, 0, 'w'},
                                             {"mmap-threshold", required_argument, 0, 'm'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c, idx = 0;
    long v;
    opterr = rank == 0;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        switch (c) {
        case 's':
            v = -1;
            for (int i = 0; i < 3; i++)
                if (strcmp(optarg, strategy_names[i]) == 0) v = i;
            if (v < 0) goto bad;
            o->strategy = (int)v;
            break;
        case 'H':
            if (parse_long(optarg, 1, 65536, &v)) goto bad;
            o->hidden = v;
            break;
        case 'L':
            if (parse_long(optarg, 1, 100000, &v)) goto bad;
            o->layers = v;
            break;
        case 'b':
            if (parse_long(optarg, 1, 65536, &v)) goto bad;
            o->batch = v;
            break;
        case 'k':
            if (parse_long(optarg, 1, 100000, &v)) goto bad;
            o->steps = (int)v;
            break;
        case 'w':
            if (parse_long(optarg, 0, 100000, &v)) goto bad;
            o->warmup = (int)v;
            break;
        case 'm':
            if (parse_long(optarg, 0, 1L << 30, &v)) goto bad;
            o->mmap_threshold = v;
            break;
        case 'h':
            if (rank == 0) usage(stdout);
            return 1;
        default:
            if (rank == 0) usage(stderr);
            return -1;
        }
        continue;
    bad:
        if (rank == 0)
            fprintf(stderr, PROG ": invalid value '%s' for --%s\n", optarg, longopts[idx].name);
        return -1;
    }
    if (optind < argc) {
        if (rank == 0) fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* ---- memory of the process ---- */

/* A "Key:   N kB" field of /proc/self/status (or /proc/meminfo) in bytes;
 * -1 when absent. */
static int64_t proc_field(const char *file, const char *key) {
    FILE *f = fopen(file, "r");
    char line[256];
    size_t n = strlen(key);
    int64_t v = -1;
    if (f == NULL) return -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = strtoll(line + n + 1, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

static int64_t vm_hwm(void) { return proc_field("/proc/self/status", "VmHWM"); }

/* CPU seconds of this process so far, user and system (page faults, mmap,
 * munmap and the kernel's zeroing of fresh pages are system time). */
static void cpu_times(double *user, double *sys) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec;
    *sys = (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* ---- the formulas ---- */

typedef struct model_dims {
    int64_t P;  /* elements of all parameters */
    int64_t U;  /* elements of the largest unit */
    int64_t Sh; /* padded shard elements of one rank (acx's dim-0 rows, ceil(R/S) each) */
} model_dims_t;

static model_dims_t dims_of(const options_t *o, int S) {
    int64_t H = o->hidden, rows = (H + S - 1) / S;
    model_dims_t d;
    d.U = H * H + H;
    d.P = o->layers * d.U;
    /* weight: ceil(H/S) rows of H; bias: ceil(H/S) rows of 1 */
    d.Sh = o->strategy == ACX_NO_SHARD ? d.P : o->layers * (rows * H + rows);
    return d;
}

/* Bytes by the ZeRO rules (see the header comment); G = limit_all_gathers. */
static int64_t formula_bytes(int strategy, const model_dims_t *d, int S, int64_t G) {
    int64_t stage = 4 * S * ((d->U + S - 1) / S); /* one all-gather / reduce-scatter staging */
    switch (strategy) {
    case ACX_NO_SHARD: return 16 * d->P;
    case ACX_SHARD_GRAD_OP: return 4 * d->P + 4 * d->U + 16 * d->Sh + 2 * stage;
    default: return 16 * d->Sh + 4 * d->U + G * (4 * d->U + stage) + 2 * stage;
    }
}

/* ---- synthetic data ---- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n values U(-1, 1), a stream keyed by (rank, which): the same on every
 * run and under every strategy, different on every rank. */
static void fill_uniform(float *x, size_t n, int rank, int which) {
    uint64_t s = ((uint64_t)rank << 40) ^ (uint64_t)which;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(splitmix64(&s) >> 11) * 0x1p-52 - 1.0);
}

/* ---- the model ---- */

typedef struct mlp {
    int64_t H, L, B;
    acx_model_t *m;
    acx_unit_t **unit;
    acx_param_t **w, **b;
    float *h;     /* [L x B x H]: h[l] is the input of layer l */
    float *o;     /* [L x B x H]: o[l] is layer l's output (after relu, but the last) */
    float *dy;    /* [B x H]: d loss / d (output of the current layer) */
    float *dh;    /* [B x H]: d loss / d (input of the current layer) */
    float *x, *y; /* [B x H]: input and target of the step */
} mlp_t;

static acx_status_t mlp_register(acx_accelerator_t *acc, mlp_t *n) {
    ACX_TRY(acx_model_create(acc, &n->m));
    /* relu's gain, fan_in: std = sqrt(2 / H), so E[h^2] stays put layer to layer */
    acx_init_spec_t wi = {
        .kind = ACX_INIT_KAIMING_NORMAL, .nonlinearity = ACX_NONLIN_RELU, .mode = ACX_FAN_IN};
    for (int64_t l = 0; l < n->L; l++) {
        char name[64];
        snprintf(name, sizeof name, "layer%lld", (long long)l);
        ACX_TRY(acx_model_add_unit(n->m, name, &n->unit[l]));
        snprintf(name, sizeof name, "layer%lld.weight", (long long)l);
        ACX_TRY(acx_unit_add_param(n->unit[l], name, 2, (int64_t[]){n->H, n->H}, wi, &n->w[l]));
        snprintf(name, sizeof name, "layer%lld.bias", (long long)l);
        ACX_TRY(acx_unit_add_param(n->unit[l], name, 1, (int64_t[]){n->H},
                                   ACX_INIT_SPEC_LINEAR_BIAS(n->H), &n->b[l]));
    }
    return ACX_OK;
}

/* One training step; *loss_p = this rank's MSE. Collective. */
static acx_status_t mlp_step(acx_accelerator_t *acc, acx_optimizer_t *opt, mlp_t *n, double *loss_p,
                             double *norm_p) {
    const int H = (int)n->H, B = (int)n->B;
    const size_t BH = (size_t)B * (size_t)H;
    ACX_TRY(acx_accumulate_begin(acc));

    /* forward */
    for (int64_t l = 0; l < n->L; l++) {
        float *in = l == 0 ? n->x : n->o + (size_t)(l - 1) * BH, *out = n->o + (size_t)l * BH;
        memcpy(n->h + (size_t)l * BH, in, BH * sizeof(float));
        ACX_TRY(acx_unit_acquire(n->unit[l]));
        const float *W = acx_param_data(n->w[l]), *bias = acx_param_data(n->b[l]);
        if (W == NULL || bias == NULL) return ACX_ERR_STATE; /* acx_last_error() says why */
        for (int i = 0; i < B; i++)
            memcpy(out + (size_t)i * H, bias, (size_t)H * sizeof(float));
        /* out [B x H] += in [B x H] . W^T, W [H_out x H_in] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, H, H, 1.0f, in, H, W, H, 1.0f, out,
                    H);
        if (l + 1 < n->L)
            for (size_t k = 0; k < BH; k++)
                out[k] = out[k] > 0.0f ? out[k] : 0.0f;
        ACX_TRY(acx_unit_release(n->unit[l]));
    }

    /* loss = mean (out - y)^2; dy = 2 (out - y) / (B H) */
    const float *out = n->o + (size_t)(n->L - 1) * BH;
    double loss = 0.0;
    for (size_t k = 0; k < BH; k++) {
        double e = (double)out[k] - (double)n->y[k];
        loss += e * e;
        n->dy[k] = (float)(2.0 * e / (double)BH);
    }
    *loss_p = loss / (double)BH;

    /* backward */
    for (int64_t l = n->L - 1; l >= 0; l--) {
        const float *in = n->h + (size_t)l * BH, *o = n->o + (size_t)l * BH;
        if (l + 1 < n->L) /* through the relu: dZ = dY where the output was > 0 */
            for (size_t k = 0; k < BH; k++)
                n->dy[k] = o[k] > 0.0f ? n->dy[k] : 0.0f;
        ACX_TRY(acx_unit_acquire(n->unit[l]));
        const float *W = acx_param_data(n->w[l]);
        float *gW = acx_param_grad(n->w[l]), *gb = acx_param_grad(n->b[l]); /* fresh every step */
        if (W == NULL || gW == NULL || gb == NULL) return ACX_ERR_STATE;
        /* gW [H x H] += dZ^T [H x B] . in [B x H] */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, H, B, 1.0f, n->dy, H, in, H, 1.0f,
                    gW, H);
        for (int i = 0; i < B; i++)
            for (int j = 0; j < H; j++)
                gb[j] += n->dy[(size_t)i * H + j];
        if (l > 0) { /* dh [B x H] = dZ [B x H] . W [H x H] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, H, 1.0f, n->dy, H, W, H,
                        0.0f, n->dh, H);
            float *t = n->dy;
            n->dy = n->dh;
            n->dh = t;
        }
        ACX_TRY(acx_unit_grads_ready(n->unit[l]));
        ACX_TRY(acx_unit_release(n->unit[l]));
    }
    ACX_TRY(acx_backward_end(acc));
    ACX_TRY(acx_clip_grad_norm(acc, 1.0, 2.0, norm_p));
    ACX_TRY(acx_optimizer_step(opt));
    ACX_TRY(acx_optimizer_zero_grad(opt));
    return acx_accumulate_end(acc);
}

/* ---- main ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        acx_status_t st_ = (call);                                                                 \
        if (st_ != ACX_OK) {                                                                       \
            fprintf(stderr, PROG ": rank %d: %s failed: %s\n", rank, #call, acx_last_error());     \
            rc = 1;                                                                                \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static double mib(int64_t b) { return (double)b / MIB; }

int main(int argc, char **argv) {
    int rc = 0, rank = 0, np = 1;
    options_t o;
    acx_accelerator_t *acc = NULL;
    acx_optimizer_t *opt = NULL;
    mlp_t n = {0};
    double *times = NULL;
    float *scratch = NULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);

    /* acx's options first (it removes --config and --acx-*), then ours */
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = 1234;
    cfg.sharding_strategy = ACX_FULL_SHARD;
    /* it measures host memory, and its CPU MLP computes on acx's buffers */
    cfg.backend = ACX_BACKEND_MPI;
    cfg.device_state = ACX_DEVICE_STATE_HOST;
    for (int i = 1; i < argc; i++) /* the strategy is ours to set: acx_init validates it */
        if (strncmp(argv[i], "--strategy", 10) == 0 &&
            (argv[i][10] == '=' || argv[i][10] == '\0')) {
            const char *v = argv[i][10] == '=' ? argv[i] + 11 : i + 1 < argc ? argv[i + 1] : "";
            for (int s = 0; s < 3; s++)
                if (strcmp(v, strategy_names[s]) == 0) cfg.sharding_strategy = s;
        }
    acx_status_t ist = acx_init(&argc, &argv, &cfg, &acc);
    if (ist != ACX_OK) {
        if (rank == 0) fprintf(stderr, PROG ": acx_init: %s\n", acx_last_error());
        MPI_Finalize();
        return 2;
    }
    int pr = parse_options(argc, argv, rank, &o);
    if (pr != 0) {
        acx_finalize(acc);
        MPI_Finalize();
        return pr > 0 ? 0 : 2;
    }
    /* a fixed threshold also turns off glibc's raising it after each free */
    if (o.mmap_threshold > 0 && mallopt(M_MMAP_THRESHOLD, (int)o.mmap_threshold) != 1) {
        if (rank == 0)
            fprintf(stderr, PROG ": mallopt(M_MMAP_THRESHOLD, %ld) refused\n", o.mmap_threshold);
        acx_finalize(acc);
        MPI_Finalize();
        return 2;
    }
#if defined(OPENBLAS_VERSION)
    if (getenv("OPENBLAS_NUM_THREADS") == NULL)
        openblas_set_num_threads(1); /* ranks share the cores */
#endif
    const acx_config_t *rc_cfg = acx_get_config(acc);
    o.strategy = rc_cfg->sharding_strategy; /* --strategy, unless an --acx-* option overrode it */
    if (o.strategy > ACX_FULL_SHARD) {
        if (rank == 0) fprintf(stderr, PROG ": strategy %d not measured here\n", o.strategy);
        acx_finalize(acc);
        MPI_Finalize();
        return 2;
    }
    /* limit_all_gathers as acx resolves it: unset = 2, 0 = no cap (every unit) */
    int lag = rc_cfg->fsdp.limit_all_gathers < 0 ? 2 : rc_cfg->fsdp.limit_all_gathers;
    int64_t G = lag > 0 ? lag : o.layers;

    n.H = o.hidden;
    n.L = o.layers;
    n.B = o.batch;
    size_t BH = (size_t)n.B * (size_t)n.H, LBH = (size_t)n.L * BH;
    n.unit = calloc((size_t)n.L, sizeof *n.unit);
    n.w = calloc((size_t)n.L, sizeof *n.w);
    n.b = calloc((size_t)n.L, sizeof *n.b);
    n.h = malloc(LBH * sizeof(float));
    n.o = malloc(LBH * sizeof(float));
    scratch = malloc(4 * BH * sizeof(float));
    times = calloc((size_t)o.steps, sizeof *times);
    if (!n.unit || !n.w || !n.b || !n.h || !n.o || !scratch || !times) {
        fprintf(stderr, PROG ": rank %d: out of memory for the activations\n", rank);
        rc = 1;
        goto out;
    }
    n.dy = scratch;
    n.dh = scratch + BH;
    n.x = scratch + 2 * BH;
    n.y = scratch + 3 * BH;

    /* ---- the fixed overhead: BLAS and MPI warmed up, no model state ---- */
    {
        float a[64 * 64], c[64 * 64];
        fill_uniform(a, 64 * 64, rank, 2);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 64, 64, 64, 1.0f, a, 64, a, 64, 0.0f,
                    c, 64);
        size_t cnt = 2 << 20; /* 8 MiB: MPI's shared-memory segments and eager buffers in use */
        float *buf = calloc(cnt, sizeof(float));
        if (buf == NULL) {
            rc = 1;
            goto out;
        }
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        free(buf);
    }
    memset(n.h, 0, LBH * sizeof(float)); /* the program's own buffers count as overhead too */
    memset(n.o, 0, LBH * sizeof(float));
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t baseline = vm_hwm();

    TRY(mlp_register(acc, &n));
    model_dims_t d = dims_of(&o, np);
    if (acx_model_numel(n.m) != d.P) {
        fprintf(stderr, PROG ": model has %lld elements, expected %lld\n",
                (long long)acx_model_numel(n.m), (long long)d.P);
        rc = 1;
        goto out;
    }
    int64_t formula = formula_bytes(o.strategy, &d, np, G), estimate = -1;
    if (acx_memory_estimate != NULL) {
        acx_memory_model_t mm = {.numel = d.P,
                                 .largest_unit = d.U,
                                 .shard_numel = d.Sh,
                                 .world_size = np,
                                 .ranks_per_node = 0,
                                 .strategy = o.strategy,
                                 .mixed_precision = ACX_MP_NO,
                                 .optimizer_states = 2,
                                 .limit_all_gathers = lag,
                                 .num_units = (int)o.layers};
        acx_memory_estimate_t est;
        if (acx_memory_estimate(&mm, &est) == ACX_OK) estimate = est.total;
    }

    /* ---- does this node have the memory? (refuse rather than be OOM-killed) ---- */
    {
        /* 1.3: MPI's temporary buffers and malloc's cached chunks came to up to
         * 25% of the formula beyond it in the measured runs (NO_SHARD's
         * in-flight all-reduces); 512 MiB for everything else on the node */
        double need =
            (double)acx_local_size(acc) * (1.3 * (double)formula + (double)baseline) + 512 * MIB;
        double avail = 0, verdict = 0;
        if (acx_is_local_main_process(acc)) {
            avail = (double)proc_field("/proc/meminfo", "MemAvailable");
            verdict = avail > 0 && avail < need ? 1 : 0;
            if (verdict)
                fprintf(stderr,
                        PROG ": refusing to start %s of %lld parameters on %d local rank(s): needs "
                             "about %.0f MiB (%d x (1.3 x formula %.0f + baseline %.0f) + 512), "
                             "MemAvailable is %.0f MiB\n",
                        strategy_names[o.strategy], (long long)d.P, acx_local_size(acc), need / MIB,
                        acx_local_size(acc), mib(formula), mib(baseline), avail / MIB);
        }
        TRY(acx_reduce_scalar(acc, verdict, ACX_OP_MAX, &verdict));
        if (verdict != 0) {
            rc = 3;
            goto out;
        }
    }

    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
    hp.lr = 1e-4;
    TRY(acx_adamw_create(n.m, &hp, &opt));
    TRY(acx_prepare(acc, n.m, opt, NULL));
    int64_t after_prepare = vm_hwm();

    /* ---- training: the same batch every step (the loss must go down) ---- */
    fill_uniform(n.x, BH, rank, 0);
    fill_uniform(n.y, BH, rank, 1);
    double loss_first = NAN, loss_last = NAN, norm_last = NAN, cpu[2] = {0, 0};
    for (int s = 0; s < o.warmup + o.steps; s++) {
        double loss, norm, u0, s0, u1, s1;
        MPI_Barrier(MPI_COMM_WORLD);
        cpu_times(&u0, &s0);
        double t0 = MPI_Wtime();
        TRY(mlp_step(acc, opt, &n, &loss, &norm));
        MPI_Barrier(MPI_COMM_WORLD);
        double t1 = MPI_Wtime();
        cpu_times(&u1, &s1);
        if (s >= o.warmup) {
            cpu[0] += (u1 - u0) / o.steps;
            cpu[1] += (s1 - s0) / o.steps;
        }
        int64_t hwm = vm_hwm();
        MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &hwm, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        loss /= np;
        if (s == 0) loss_first = loss;
        loss_last = loss;
        norm_last = norm;
        if (s >= o.warmup) times[s - o.warmup] = t1 - t0;
        if (rank == 0) {
            printf(
                "  step %d%s: loss %.9g, grad norm %.6g, %.3f s, VmHWM %.1f MiB (max over ranks)\n",
                s, s < o.warmup ? " (warm-up)" : "", loss, norm, t1 - t0, mib(hwm));
            fflush(stdout);
        }
    }
    qsort(times, (size_t)o.steps, sizeof *times, cmp_double);
    double step_s =
        o.steps % 2 ? times[o.steps / 2] : 0.5 * (times[o.steps / 2 - 1] + times[o.steps / 2]);

    /* ---- report ---- */
    int64_t peak = vm_hwm();
    acx_memory_stats_t ms;
    TRY(acx_memory_stats(&ms));
    /* where unaccounted RSS sits at the end: malloc's heap (sbrk arena)
     * holds freed chunks resident until trimmed; mmapped chunks are
     * returned on free */
    struct mallinfo2 mi = mallinfo2();
    TRY(acx_print_ordered(
        acc,
        "VmHWM %.1f MiB = baseline %.1f + %.1f; after prepare %.1f; acx peak_total "
        "%.1f MiB (peaks: params %.1f, grads %.1f, master %.1f, optimizer %.1f, "
        "transient %.1f); VmHWM - baseline - acx peak = %.1f MiB; at the end: "
        "VmRSS %.1f MiB, acx current %.1f MiB, malloc heap %.1f MiB of which "
        "free %.1f, mmapped %.1f MiB\n",
        mib(peak), mib(baseline), mib(peak - baseline), mib(after_prepare), mib(ms.peak_total),
        mib(ms.peak[ACX_MEM_PARAMS]), mib(ms.peak[ACX_MEM_GRADS]), mib(ms.peak[ACX_MEM_MASTER]),
        mib(ms.peak[ACX_MEM_OPTIMIZER]), mib(ms.peak[ACX_MEM_TRANSIENT]),
        mib(peak - baseline - ms.peak_total), mib(proc_field("/proc/self/status", "VmRSS")),
        mib(ms.current_total), mib((int64_t)mi.arena), mib((int64_t)mi.fordblks),
        mib((int64_t)mi.hblkhd)));
    int64_t mx[3] = {peak, baseline, ms.peak_total}, mn = peak;
    MPI_Allreduce(MPI_IN_PLACE, mx, 3, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, cpu, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &mn, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    int finite = isfinite(loss_first) && isfinite(loss_last) && isfinite(norm_last);
    if (rank == 0) {
        printf("shard-mem strategy=%s np=%d P=%lld U=%lld Sh=%lld baseline=%lld rss=%lld "
               "rss_min=%lld acx_peak=%lld formula=%lld estimate=%lld ideal=%lld step_s=%.4f "
               "user_s=%.4f sys_s=%.4f loss_first=%.9g loss_last=%.9g finite=%d\n",
               strategy_names[o.strategy], np, (long long)d.P, (long long)d.U, (long long)d.Sh,
               (long long)mx[1], (long long)mx[0], (long long)mn, (long long)mx[2],
               (long long)formula, (long long)estimate, (long long)(16 * d.P / np), step_s, cpu[0],
               cpu[1], loss_first, loss_last, finite);
        fflush(stdout);
    }
    if (!finite) {
        if (rank == 0) fprintf(stderr, PROG ": the loss or the gradient norm is not finite\n");
        rc = 1;
    }
out:
    if (acc != NULL) acx_finalize(acc);
    free(n.unit);
    free(n.w);
    free(n.b);
    free(n.h);
    free(n.o);
    free(scratch);
    free(times);
    MPI_Finalize();
    return rc;
}

/*
 * benchmarks/train.c — acx-bench-train: training throughput of acx's
 * data-parallel and sharded training step against a hand-written MPI
 * data-parallel loop, in one MPI job, alternating, so all sides see the same
 * machine state. Two models, the same 3-layer MLP code (examples/
 * fashion_mnist/mlp.c, shared with acx-fmnist):
 *
 *   --model fmnist     784-256-128-10 on Fashion-MNIST batches read from the
 *                      HDF5 file `acx data import-idx` writes;
 *   --model synthetic  IN-H1-H2-OUT (default 1024-4096-4096-256, 22.0M
 *                      parameters: compute-bound on a CPU) on fixed-seed
 *                      synthetic uint8 pixels and labels (OUT <= 256: the
 *                      shared MLP code, like Fashion-MNIST, has uint8 labels).
 *
 * Three sides, each a full training step (forward, backward, gradient
 * averaging, AdamW):
 *
 *   acx           acx-fmnist's step: units fc1..fc3 registered with acx,
 *                 acquire, forward, backward layer by layer with
 *                 acx_unit_grads_ready after each, acx_backward_end, AdamW
 *                 through acx_optimizer_step, under the --sharding-strategy
 *                 and --mixed-precision asked for.
 *   mpi-loop      the same mlp.c arithmetic on the benchmark's own contiguous
 *                 buffers: ONE MPI_Allreduce(SUM) of all gradients per step,
 *                 a scale by 1/world, a plain AdamW loop (torch formulas)
 *                 under FTZ/DAZ as acx's optimizer kernel runs. It is the
 *                 baseline of every strategy.
 *   compute-only  the mpi-loop step with the all-reduce left out (its own
 *                 copy of the model): the local arithmetic of a replicated
 *                 data-parallel step. It gives the communication share:
 *                 comm share of a side = 1 - (median step time of
 *                 compute-only) / (median step time of the side) — the part
 *                 of the step that is not the local compute (exposed
 *                 communication plus, for acx, the runtime's bookkeeping;
 *                 under SHARD_GRAD_OP/FULL_SHARD acx's optimizer updates
 *                 only 1/N of the parameters, so its share is net of that
 *                 saving).
 *                 acx's blocking time is reported too: the share of its step
 *                 spent inside the calls that move data (acquire,
 *                 grads_ready, release, backward_end; the optimizer step,
 *                 which under SHARD_GRAD_OP holds the parameter all-gather,
 *                 is reported on its own).
 *
 * Correctness first: a cross-check runs the acx and mpi-loop sides S steps
 * from identical parameters on identical batches and compares the
 * parameters (||acx - loop|| / ||loop|| per tensor <= 1e-5). It applies to
 * every sharding strategy in fp32 (all strategies compute the same update,
 * DESIGN.md); it is skipped under mixed precision or a 16-bit reduce_dtype
 * (acx then computes with 16-bit-rounded values on purpose, the loop in
 * fp32) and with --only (one side). The two differ by rounding only (acx
 * pre-scales each bucket by 1/world before summing, uses torch's lerp for
 * the first moment); a long run drifts as any two float implementations do,
 * so the check is short and on fresh state.
 *
 * Timing: W warm-up steps per side, then R rounds; each round runs a block
 * of the rotating sides (one untimed step first so a block starts with its
 * own data in the caches, then a barrier, then the block; the slowest
 * rank's time), S timed steps per side in all. samples/s = ranks x batch x
 * S / the side's summed block times; step time = per step, the slowest
 * rank's time, median and spread over the S steps. acx/mpi-loop three
 * ways: the median of the per-round throughput ratios, the ratio of the
 * median step times (robust when other jobs preempt some steps), and the
 * ratio of CPU times per round. Batches are prepared
 * before timing. --only acx|mpi-loop runs one side (and compute-only unless
 * --no-compute-only) for process-level alternation with other
 * implementations (benchmarks/run-train.sh).
 *
 * Output: human lines on stdout (rank 0), then as the LAST line one flat
 * JSON object (the interface shared with benchmarks/peers/run-peer.sh):
 *   {"impl":"acx","ranks":N,"model":"fmnist","batch_size":B,"steps":S,
 *    "samples_per_s":X,"step_ms":Y,"final_loss":L, ...}
 * with the mpi-loop's and compute-only's numbers under "mpi_loop_*" and
 * "compute_only_*" keys when they ran beside it (impl is "mpi-loop" with
 * --only mpi-loop). docs/benchmarks.md lists every key.
 *
 * What this file leaves to others: the model arithmetic (mlp.c), the
 * option, statistics and JSON helpers it shares with acx-bench-train-gpu
 * (bench_common.c) and everything distributed on the acx side (libacx,
 * public API only).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <mpi.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include <acx/acx.h>

#include "bench_common.h"
#include "mlp.h"

#define PROG        "acx-bench-train"
#define CHECK_LIMIT 1e-5 /* max ||a-b||/||b|| per tensor after the cross-check */

enum { MODEL_FMNIST = 0, MODEL_SYNTHETIC = 1 };
static const char *const model_names[] = {"fmnist", "synthetic"};

typedef enum side { SIDE_ACX = 0, SIDE_MPI = 1, SIDE_COMPUTE = 2, NSIDES = 3 } side_t;
static const char *const side_names[NSIDES] = {"acx", "mpi-loop", "compute-only"};

static const char *const mp_names[] = {"no", "bf16", "fp16"};

typedef struct options {
    const char *data, *json;
    int model;
    mlp_dims_t dims;
    int dims_set;
    int64_t batch_size, seed;
    int batches, rounds, steps, warmup, block_warmup, check_steps, check_only, threads, np;
    int run[NSIDES]; /* which sides run */
    double lr, weight_decay;
    int strategy, mixed_precision; /* taken from argv before acx_init */
} options_t;

static int world_rank; /* for messages before and after acx */

/* ---- options ---- */

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: mpirun -np N " PROG " [options]\n"
        "Time an MLP training step through acx against a hand-written MPI data-parallel\n"
        "loop (one MPI_Allreduce per step) and a compute-only step, alternating in one run.\n\n"
        "  --model fmnist|synthetic  Fashion-MNIST MLP 784-256-128-10 on real data (default),\n"
        "                      or a larger MLP on fixed-seed synthetic data\n"
        "  --data FILE.h5      fmnist: /train/images, /train/labels (`acx data import-idx`)\n"
        "  --dims IN,H1,H2,OUT synthetic: layer widths, OUT <= 256 (default 1024,4096,4096,256)\n"
        "  --sharding-strategy S  acx side: NO_SHARD | SHARD_GRAD_OP | FULL_SHARD |\n"
        "                      HYBRID_SHARD (any case; default NO_SHARD)\n"
        "  --mixed-precision P acx side: no | bf16 | fp16 (default no)\n"
        "  --batch-size B      samples per rank per step (default 64)\n"
        "  --steps S           timed steps per side (default fmnist 200, synthetic 10)\n"
        "  --rounds R          alternation rounds the steps are split into (default fmnist 10,\n"
        "                      synthetic 5; at most S)\n"
        "  --warmup W          untimed steps per side before the rounds (default fmnist 10,\n"
        "                      synthetic 2)\n"
        "  --block-warmup N    untimed steps before each timed block (default 1)\n"
        "  --check-steps C     steps of the cross-check (default fmnist 20, synthetic 3;\n"
        "                      0 = no cross-check)\n"
        "  --check             run only the cross-check (no timing)\n"
        "  --only acx|mpi-loop run one side (and compute-only) instead of both\n"
        "  --no-compute-only   leave out the compute-only side (no communication share)\n"
        "  --batches N         distinct batches kept in memory per rank (default fmnist 200,\n"
        "                      synthetic 16)\n"
        "  --threads T         BLAS threads per rank (default 1: ranks fill the cores)\n"
        "  --lr X              AdamW learning rate (default 1e-3)\n"
        "  --weight-decay X    AdamW decoupled weight decay (default 0.01)\n"
        "  --seed N            acx's initialization seed and the synthetic data's (default 42)\n"
        "  --np N              expected number of ranks (an error if the job has another)\n"
        "  --json FILE         also write the result object, with per-round numbers (rank 0)\n"
        "  --config FILE, --acx-KEY=VALUE   acx configuration (see docs/config.md)\n"
        "The last line of stdout is one JSON object (docs/benchmarks.md).\n");
}

/* A whole-string number in [0, hi] (--lr: hi 1e3, the bound acx's
 * optimizers accept; --weight-decay: 1). */
static int parse_double(const char *s, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= 0.0 && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* "IN,H1,H2,OUT", each 1..1000000. */
static int parse_dims(const char *s, mlp_dims_t *d) {
    int v[4], n = 0;
    const char *p = s;
    while (n < 4) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > 1000000) return -1;
        v[n++] = (int)x;
        if (*end == '\0') break;
        if (*end != ',') return -1;
        p = end + 1;
    }
    if (n != 4 || strchr(p, ',') != NULL) return -1;
    *d = (mlp_dims_t){v[0], v[1], v[2], v[3]};
    return 0;
}

/* The options that become acx configuration (the program's choices beat
 * any config file): taken out of argv before acx_init. Returns 0, or -1
 * after printing the reason (rank 0). */
static int take_config_options(int *argc, char **argv, options_t *o) {
    int missing = 0;
    const char *s = bench_take_option(argc, argv, "--sharding-strategy", &missing);
    const char *mp = bench_take_option(argc, argv, "--mixed-precision", &missing);
    const char *seed = bench_take_option(argc, argv, "--seed", &missing);
    o->strategy = ACX_NO_SHARD;
    o->mixed_precision = ACX_MP_NO;
    o->seed = 42;
    if (missing) {
        if (world_rank == 0)
            fprintf(stderr,
                    PROG ": --sharding-strategy, --mixed-precision and --seed need a value\n");
        return -1;
    }
    if (s && bench_parse_strategy(PROG, s, &o->strategy) != 0) return -1;
    if (mp && (o->mixed_precision = bench_lookup(mp, mp_names, 3)) < 0) {
        if (world_rank == 0)
            fprintf(stderr,
                    PROG ": invalid value '%s' for --mixed-precision (expected no, bf16 or fp16)\n",
                    mp);
        return -1;
    }
    long long seed_v = o->seed;
    if (seed && bench_parse_seed(PROG, seed, &seed_v) != 0) return -1;
    o->seed = seed_v;
    return 0;
}

/* Returns 0 to run, 1 after --help, -1 on a bad argument (printed on rank 0). */
static int parse_options(int argc, char **argv, options_t *o) {
    o->model = MODEL_FMNIST;
    o->batch_size = 64;
    o->batches = o->rounds = o->steps = o->warmup = o->check_steps = -1; /* per model, below */
    o->block_warmup = 1;
    o->threads = 1;
    o->lr = 1e-3;
    o->weight_decay = 0.01;
    o->run[SIDE_ACX] = o->run[SIDE_MPI] = o->run[SIDE_COMPUTE] = 1;
    static const struct option longopts[] = {{"model", required_argument, 0, 'M'},
                                             {"data", required_argument, 0, 'd'},
                                             {"dims", required_argument, 0, 'D'},
                                             {"batch-size", required_argument, 0, 'b'},
                                             {"steps", required_argument, 0, 'k'},
                                             {"rounds", required_argument, 0, 'r'},
                                             {"warmup", required_argument, 0, 'w'},
                                             {"block-warmup", required_argument, 0, 'B'},
                                             {"check-steps", required_argument, 0, 's'},
                                             {"check", no_argument, 0, 'c'},
                                             {"only", required_argument, 0, 'o'},
                                             {"no-compute-only", no_argument, 0, 'C'},
                                             {"batches", required_argument, 0, 'n'},
                                             {"threads", required_argument, 0, 't'},
                                             {"lr", required_argument, 0, 'l'},
                                             {"weight-decay", required_argument, 0, 'W'},
                                             {"np", required_argument, 0, 'N'},
                                             {"json", required_argument, 0, 'j'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c, idx = 0;
    int v;
    opterr = world_rank == 0;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        switch (c) {
        case 'M':
            if ((o->model = bench_lookup(optarg, model_names, 2)) < 0) goto bad;
            break;
        case 'd': o->data = optarg; break;
        case 'D':
            if (parse_dims(optarg, &o->dims)) goto bad;
            o->dims_set = 1;
            break;
        case 'b':
            if (bench_parse_int(optarg, 1, 1000000, &v)) goto bad;
            o->batch_size = v;
            break;
        case 'k':
            if (bench_parse_int(optarg, 1, 100000000, &v)) goto bad;
            o->steps = v;
            break;
        case 'r':
            if (bench_parse_int(optarg, 1, 100000, &v)) goto bad;
            o->rounds = v;
            break;
        case 'w':
            if (bench_parse_int(optarg, 0, 100000000, &v)) goto bad;
            o->warmup = v;
            break;
        case 'B':
            if (bench_parse_int(optarg, 0, 1000, &v)) goto bad;
            o->block_warmup = v;
            break;
        case 's':
            if (bench_parse_int(optarg, 0, 100000000, &v)) goto bad;
            o->check_steps = v;
            break;
        case 'c': o->check_only = 1; break;
        case 'o':
            if (strcmp(optarg, "acx") == 0)
                o->run[SIDE_MPI] = 0;
            else if (strcmp(optarg, "mpi-loop") == 0)
                o->run[SIDE_ACX] = 0;
            else
                goto bad;
            break;
        case 'C': o->run[SIDE_COMPUTE] = 0; break;
        case 'n':
            if (bench_parse_int(optarg, 1, 1000000, &v)) goto bad;
            o->batches = v;
            break;
        case 't':
            if (bench_parse_int(optarg, 1, 1024, &v)) goto bad;
            o->threads = v;
            break;
        case 'l':
            if (parse_double(optarg, 1e3, &o->lr)) goto bad;
            break;
        case 'W':
            if (parse_double(optarg, 1.0, &o->weight_decay)) goto bad;
            break;
        case 'N':
            if (bench_parse_int(optarg, 1, 1000000, &v)) goto bad;
            o->np = v;
            break;
        case 'j': o->json = optarg; break;
        case 'h':
            if (world_rank == 0) usage(stdout);
            return 1;
        default:
            if (world_rank == 0) usage(stderr);
            return -1;
        }
        continue;
    bad:
        if (world_rank == 0)
            fprintf(stderr, PROG ": invalid value '%s' for --%s%s\n", optarg, longopts[idx].name,
                    c == 'M'   ? " (expected fmnist or synthetic)"
                    : c == 'o' ? " (expected acx or mpi-loop)"
                    : c == 'D' ? " (expected IN,H1,H2,OUT, four positive integers)"
                               : "");
        return -1;
    }
#define USAGE_ERROR(...)                                                                           \
    do {                                                                                           \
        if (world_rank == 0) fprintf(stderr, PROG ": " __VA_ARGS__);                               \
        return -1;                                                                                 \
    } while (0)
    if (optind < argc) USAGE_ERROR("unexpected argument '%s'\n", argv[optind]);
    int synth = o->model == MODEL_SYNTHETIC;
    if (synth && o->data)
        USAGE_ERROR("--data applies to --model fmnist (synthetic data is generated)\n");
    if (!synth && o->data == NULL)
        USAGE_ERROR("--model fmnist needs --data FILE.h5 (create it with `acx data import-idx "
                    "/usr/share/datasets/fashion-mnist -o FILE.h5`)\n");
    if (!synth && o->dims_set &&
        (o->dims.in != 784 || o->dims.h1 != 256 || o->dims.h2 != 128 || o->dims.out != 10))
        USAGE_ERROR(
            "--model fmnist is 784,256,128,10; --dims %d,%d,%d,%d needs --model synthetic\n",
            o->dims.in, o->dims.h1, o->dims.h2, o->dims.out);
    if (o->dims.out > 256)
        USAGE_ERROR("--dims: OUT=%d classes do not fit the uint8 labels of the MLP code (at most "
                    "256)\n",
                    o->dims.out);
    if (!o->dims_set)
        o->dims = synth ? (mlp_dims_t){1024, 4096, 4096, 256} : (mlp_dims_t){784, 256, 128, 10};
    if (o->steps < 0) o->steps = synth ? 10 : 200;
    if (o->rounds < 0) o->rounds = synth ? 5 : 10;
    if (o->rounds > o->steps) o->rounds = o->steps;
    if (o->warmup < 0) o->warmup = synth ? 2 : 10;
    if (o->check_steps < 0) o->check_steps = synth ? 3 : 20;
    if (o->batches < 0) o->batches = synth ? 16 : 200;
    if (o->check_only && !(o->run[SIDE_ACX] && o->run[SIDE_MPI]))
        USAGE_ERROR("--check compares the two sides: it cannot go with --only\n");
    if (o->check_only && o->check_steps == 0) USAGE_ERROR("--check needs --check-steps >= 1\n");
#undef USAGE_ERROR
    return 0;
}

/* ---- input batches (in memory, identical for every side) ---- */

/* nb batches of B samples on this rank: pixels [nb x B x in] uint8,
 * labels [nb x B] uint8. */
typedef struct batches {
    int nb, B;
    uint8_t *pixels, *labels;
} batches_t;

static int batches_alloc(batches_t *bs, int nb, int B, int in) {
    bs->nb = nb;
    bs->B = B;
    bs->pixels = malloc((size_t)nb * (size_t)B * (size_t)in);
    bs->labels = malloc((size_t)nb * (size_t)B);
    return bs->pixels && bs->labels ? 0 : -1;
}

static void batches_free(batches_t *bs) {
    free(bs->pixels);
    free(bs->labels);
    memset(bs, 0, sizeof *bs);
}

/* Synthetic data, different on every rank like a real shard (the stream is
 * seeded by seed and rank): about half the pixels black (as in
 * Fashion-MNIST, so dead inputs exist), the rest uniform in 0..255. */
static void batches_synthesize(batches_t *bs, const mlp_dims_t *d, int64_t seed, int rank) {
    uint64_t s = 0x5eed000000000000ull ^ ((uint64_t)seed << 16) ^ (uint64_t)rank;
    size_t npix = (size_t)bs->nb * (size_t)bs->B * (size_t)d->in;
    for (size_t i = 0; i < npix; i++) {
        uint64_t r = bench_splitmix64(&s);
        bs->pixels[i] = (r >> 63) ? (uint8_t)(r & 0xff) : 0;
    }
    for (size_t i = 0; i < (size_t)bs->nb * (size_t)bs->B; i++)
        bs->labels[i] = (uint8_t)(bench_splitmix64(&s) % (uint64_t)d->out);
}

/* Read up to nb full batches of this rank's shard (acx's distributed
 * sampler: disjoint samples per rank) and copy them out; *loaded_p =
 * batches read (fewer if the epoch is shorter). Prints what went wrong.
 * Collective (the loader's open is). */
static acx_status_t batches_load(acx_accelerator_t *acc, const char *path, batches_t *bs,
                                 const mlp_dims_t *d, int *loaded_p) {
    static const char *const sets[] = {"/train/images", "/train/labels"};
    acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
    acx_dataloader_t *dl = NULL;
    const acx_batch_t *b;
    acx_status_t st = ACX_OK;
    int got = 0, in = d->in;
    lo.batch_size = bs->B;
    lo.drop_last = 1; /* full batches only: every step has B samples */
    lo.prefetch = 0;  /* no reader thread left running during the timing */
    if ((st = acx_dataloader_open(acc, path, 2, sets, &lo, &dl)) != ACX_OK) goto err_acx;
    while (got < bs->nb && (st = acx_dataloader_next(dl, &b)) == ACX_OK && b != NULL) {
        if (b->dtypes[0] != ACX_DTYPE_UINT8 || b->dtypes[1] != ACX_DTYPE_UINT8 ||
            b->sample_numel[0] != in || b->sample_numel[1] != 1 || b->size != bs->B) {
            fprintf(
                stderr,
                PROG ": %s: expected uint8 images of %d pixels and uint8 labels in full batches "
                     "of %d, got %s[%lld] and %s[%lld], batch of %lld\n",
                path, in, bs->B, acx_dtype_name(b->dtypes[0]), (long long)b->sample_numel[0],
                acx_dtype_name(b->dtypes[1]), (long long)b->sample_numel[1], (long long)b->size);
            acx_dataloader_close(dl);
            return ACX_ERR_FORMAT;
        }
        const uint8_t *y = b->tensors[1];
        for (int i = 0; i < bs->B; i++)
            if (y[i] >= d->out) {
                fprintf(stderr, PROG ": %s: label %d of dataset row %lld is outside 0..%d\n", path,
                        y[i], (long long)b->indices[i], d->out - 1);
                acx_dataloader_close(dl);
                return ACX_ERR_FORMAT;
            }
        memcpy(bs->pixels + (size_t)got * (size_t)bs->B * (size_t)in, b->tensors[0],
               (size_t)bs->B * (size_t)in);
        memcpy(bs->labels + (size_t)got * (size_t)bs->B, y, (size_t)bs->B);
        got++;
    }
    if (got < bs->nb && st != ACX_OK) { /* a read error */
        acx_dataloader_close(dl);
        goto err_acx;
    }
    if ((st = acx_dataloader_close(dl)) != ACX_OK) goto err_acx;
    *loaded_p = got;
    return ACX_OK;

err_acx:
    fprintf(stderr, PROG ": %s\n", acx_last_error());
    return st;
}

static const uint8_t *batch_pixels(const batches_t *bs, int64_t step, int in) {
    return bs->pixels + (size_t)(step % bs->nb) * (size_t)bs->B * (size_t)in;
}

static const uint8_t *batch_labels(const batches_t *bs, int64_t step) {
    return bs->labels + (size_t)(step % bs->nb) * (size_t)bs->B;
}

/* ---- the acx side (as examples/fashion_mnist/fmnist.c) ---- */

typedef struct acx_side {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_optimizer_t *opt;
    acx_unit_t *unit[MLP_LAYERS];
    acx_param_t *w[MLP_LAYERS], *b[MLP_LAYERS];
    mlp_workspace_t ws;
    int64_t steps; /* steps taken: selects the next batch */
    double loss;   /* of the last step */
    double t_wait; /* seconds inside acquire, grads_ready, release, backward_end */
    double t_opt;  /* seconds inside optimizer_step and zero_grad */
} acx_side_t;

static acx_status_t acx_side_register(acx_side_t *s, const mlp_dims_t *d, double lr, double wd) {
    static const char *const names[MLP_LAYERS] = {"fc1", "fc2", "fc3"};
    ACX_TRY(acx_model_create(s->acc, &s->m));
    for (int l = 0; l < MLP_LAYERS; l++) {
        int64_t fi = mlp_fan_in(d, l), fo = mlp_fan_out(d, l);
        char wname[32], bname[32];
        snprintf(wname, sizeof wname, "%s.weight", names[l]);
        snprintf(bname, sizeof bname, "%s.bias", names[l]);
        ACX_TRY(acx_model_add_unit(s->m, names[l], &s->unit[l]));
        ACX_TRY(acx_unit_add_param(s->unit[l], wname, 2, (int64_t[]){fo, fi},
                                   ACX_INIT_SPEC_LINEAR_WEIGHT, &s->w[l]));
        ACX_TRY(acx_unit_add_param(s->unit[l], bname, 1, (int64_t[]){fo},
                                   ACX_INIT_SPEC_LINEAR_BIAS(fi), &s->b[l]));
    }
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT; /* betas 0.9/0.999, eps 1e-8 */
    hp.lr = lr;
    hp.weight_decay = wd;
    ACX_TRY(acx_adamw_create(s->m, &hp, &s->opt));
    return ACX_OK;
}

/* One training step, acx-fmnist's train_step plus its optimizer boundary:
 * one micro-step that is always a boundary (the benchmark sets
 * gradient_accumulation_steps = 1 and prepares no loader). The calls that
 * move data are bracketed by MPI_Wtime (~30 ns each, against steps of a
 * millisecond or more). */
static acx_status_t acx_side_step(acx_side_t *s, const mlp_dims_t *d, const batches_t *bs) {
    int n = bs->B;
    mlp_params_t p;
    mlp_tensors_t g;
    double t;
    ACX_TRY(acx_accumulate_begin(s->acc));
    t = MPI_Wtime();
    for (int l = 0; l < MLP_LAYERS; l++)
        ACX_TRY(acx_unit_acquire(s->unit[l]));
    s->t_wait += MPI_Wtime() - t;
    for (int l = 0; l < MLP_LAYERS; l++) {
        p.w[l] = acx_param_data(s->w[l]);
        p.b[l] = acx_param_data(s->b[l]);
        g.w[l] = acx_param_grad(s->w[l]);
        g.b[l] = acx_param_grad(s->b[l]);
    }
    mlp_load_input(&s->ws, d, batch_pixels(bs, s->steps, d->in), n);
    mlp_forward(d, &p, &s->ws, n);
    s->loss = mlp_loss(d, &s->ws, batch_labels(bs, s->steps), n);
    acx_record_loss(s->acc, s->loss);
    /* fp16: backward starts from the scaled loss (acx knows the scale) */
    ACX_TRY(acx_backward_begin(s->acc, s->ws.dact, (size_t)n * (size_t)d->out));
    for (int l = MLP_LAYERS - 1; l >= 0; l--) {
        mlp_backward_layer(d, &p, &g, &s->ws, l, n);
        t = MPI_Wtime();
        ACX_TRY(acx_unit_grads_ready(s->unit[l]));
        ACX_TRY(acx_unit_release(s->unit[l]));
        s->t_wait += MPI_Wtime() - t;
    }
    t = MPI_Wtime();
    ACX_TRY(acx_backward_end(s->acc));
    double t2 = MPI_Wtime();
    s->t_wait += t2 - t;
    if (acx_sync_gradients(s->acc)) {
        ACX_TRY(acx_optimizer_step(s->opt));
        ACX_TRY(acx_optimizer_zero_grad(s->opt));
    }
    s->t_opt += MPI_Wtime() - t2;
    ACX_TRY(acx_accumulate_end(s->acc));
    s->steps++;
    return ACX_OK;
}

/* ---- the hand-written side: plain MPI, one all-reduce per step ---- */

/* All 6 tensors in one contiguous buffer each for parameters, gradients and
 * the two AdamW moments, in registration order fc1.weight [h1 x in],
 * fc1.bias [h1], fc2.weight [h2 x h1], fc2.bias [h2], fc3.weight [out x h2],
 * fc3.bias [out]: [numel] floats each. The compute-only side is a second
 * instance with comm = 0. */
typedef struct raw_side {
    MPI_Comm comm; /* our own duplicate of MPI_COMM_WORLD */
    int world, allreduce;
    size_t numel;
    float *param, *grad, *m, *v;
    mlp_tensors_t p, g;                              /* views into param and grad */
    size_t off[2 * MLP_LAYERS], len[2 * MLP_LAYERS]; /* w0, b0, w1, b1, w2, b2 */
    double lr, beta1, beta2, eps, wd;
    mlp_workspace_t ws;
    int64_t steps;
    double loss;
} raw_side_t;

static int raw_side_init(raw_side_t *r, const mlp_dims_t *d, MPI_Comm comm, int allreduce,
                         double lr, double wd, int max_batch) {
    r->comm = comm;
    r->allreduce = allreduce;
    MPI_Comm_size(comm, &r->world);
    r->numel = 0;
    for (int l = 0; l < MLP_LAYERS; l++) {
        size_t fi = (size_t)mlp_fan_in(d, l), fo = (size_t)mlp_fan_out(d, l);
        r->off[2 * l] = r->numel;
        r->len[2 * l] = fo * fi;
        r->numel += fo * fi;
        r->off[2 * l + 1] = r->numel;
        r->len[2 * l + 1] = fo;
        r->numel += fo;
    }
    r->param = calloc(r->numel, sizeof(float));
    r->grad = calloc(r->numel, sizeof(float));
    r->m = calloc(r->numel, sizeof(float));
    r->v = calloc(r->numel, sizeof(float));
    if (!r->param || !r->grad || !r->m || !r->v) return -1;
    if (r->numel > (size_t)2147483647) return -1; /* one MPI_Allreduce count */
    for (int l = 0; l < MLP_LAYERS; l++) {
        r->p.w[l] = r->param + r->off[2 * l];
        r->p.b[l] = r->param + r->off[2 * l + 1];
        r->g.w[l] = r->grad + r->off[2 * l];
        r->g.b[l] = r->grad + r->off[2 * l + 1];
    }
    r->lr = lr;
    r->beta1 = 0.9;
    r->beta2 = 0.999;
    r->eps = 1e-8;
    r->wd = wd;
    return mlp_workspace_init(&r->ws, d, max_batch);
}

static void raw_side_free(raw_side_t *r) {
    free(r->param);
    free(r->grad);
    free(r->m);
    free(r->v);
    mlp_workspace_free(&r->ws);
}

/* torch.optim.AdamW on element i at step t (scalars already rounded to float):
 *   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps) */
typedef struct adamw_coef {
    float decay, b1, one_b1, b2, one_b2, step_size, bc2_sqrt, eps;
} adamw_coef_t;

static inline __attribute__((always_inline)) void adamw_elem(float *restrict p,
                                                             const float *restrict g,
                                                             float *restrict m, float *restrict v,
                                                             size_t i, adamw_coef_t c) {
    float gi = g[i];
    float pi = p[i] * c.decay;
    float mi = c.b1 * m[i] + c.one_b1 * gi;
    float vi = c.b2 * v[i] + c.one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - c.step_size * mi / (sqrtf(vi) / c.bc2_sqrt + c.eps);
}

/* The loop is written to be vectorized by the same -O2 build as libacx's
 * optimizer, so the comparison measures the runtime, not a slower baseline
 * (a plain scalar loop measured ~4x slower here: ~0.75 ms more per step):
 * - GCC's -O2 ("very cheap") vectorizer needs a trip count that is a known
 *   multiple of the vector width: blocks of RAW_BLOCK plus a scalar tail;
 * - under the default -fmath-errno, sqrtf stays a libm call (errno on a
 *   negative input) and blocks vectorization; v is never negative, so
 *   declare sqrtf const, and GCC emits sqrtps (correctly rounded, like the
 *   libm call). */
#define RAW_BLOCK 16
#if defined(__GNUC__) && !defined(__NO_MATH_ERRNO__)
float sqrtf(float x) __attribute__((const, nothrow));
#endif

/* Noinline: MXCSR is switched around the call, so no float arithmetic may
 * move across the switch. */
static __attribute__((noinline)) void adamw_loop(float *restrict p, const float *restrict g,
                                                 float *restrict m, float *restrict v, size_t n,
                                                 adamw_coef_t c) {
    size_t nb = n - n % RAW_BLOCK;
    for (size_t b = 0; b < nb; b += RAW_BLOCK)
        for (size_t j = 0; j < RAW_BLOCK; j++)
            adamw_elem(p, g, m, v, b + j, c);
    for (size_t i = nb; i < n; i++)
        adamw_elem(p, g, m, v, i, c);
}

/* One AdamW step over all numel elements at step t (from 1). Scalars in
 * double, rounded to float once; the loop runs with FTZ/DAZ set (and the
 * caller's MXCSR restored after), as acx's optimizer does, so a first moment
 * decaying into the subnormal range does not slow one side only. */
static void raw_adamw(raw_side_t *r, int64_t t) {
    adamw_coef_t c = {
        .decay = (float)(1.0 - r->lr * r->wd),
        .b1 = (float)r->beta1,
        .one_b1 = (float)(1.0 - r->beta1),
        .b2 = (float)r->beta2,
        .one_b2 = (float)(1.0 - r->beta2),
        .step_size = (float)(r->lr / (1.0 - pow(r->beta1, (double)t))),
        .bc2_sqrt = (float)sqrt(1.0 - pow(r->beta2, (double)t)),
        .eps = (float)r->eps,
    };
#if defined(__SSE2__)
    unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
#endif
    adamw_loop(r->param, r->grad, r->m, r->v, r->numel, c);
#if defined(__SSE2__)
    _mm_setcsr(saved);
#endif
}

static void raw_side_step(raw_side_t *r, const mlp_dims_t *d, const batches_t *bs) {
    int n = bs->B;
    memset(r->grad, 0, r->numel * sizeof(float)); /* mlp_backward_layer adds into g */
    mlp_load_input(&r->ws, d, batch_pixels(bs, r->steps, d->in), n);
    mlp_params_t p = mlp_params_of(&r->p);
    mlp_forward(d, &p, &r->ws, n);
    r->loss = mlp_loss(d, &r->ws, batch_labels(bs, r->steps), n);
    for (int l = MLP_LAYERS - 1; l >= 0; l--)
        mlp_backward_layer(d, &p, &r->g, &r->ws, l, n);
    /* The whole model's gradients in one all-reduce, then the mean. The
     * communicator's error handler is MPI's default (errors are fatal). */
    if (r->allreduce)
        MPI_Allreduce(MPI_IN_PLACE, r->grad, (int)r->numel, MPI_FLOAT, MPI_SUM, r->comm);
    float inv = 1.0f / (float)r->world;
    for (size_t i = 0; i < r->numel; i++)
        r->grad[i] *= inv;
    r->steps++;
    raw_adamw(r, r->steps);
}

/* ---- parameters across sides ---- */

static acx_param_t *acx_tensor(acx_side_t *s, int k) {
    return k % 2 == 0 ? s->w[k / 2] : s->b[k / 2];
}

static const char *tensor_name(int k) {
    static const char *const names[2 * MLP_LAYERS] = {"fc1.weight", "fc1.bias",   "fc2.weight",
                                                      "fc2.bias",   "fc3.weight", "fc3.bias"};
    return names[k];
}

/* Each raw side's parameters := acx's full fp32 master weights (any
 * strategy: acx_param_gather). Collective. */
static acx_status_t raw_copy_params(raw_side_t *const *rs, int n, acx_side_t *s) {
    for (int k = 0; k < 2 * MLP_LAYERS; k++) {
        ACX_TRY(acx_param_gather(acx_tensor(s, k), rs[0]->param + rs[0]->off[k]));
        for (int i = 1; i < n; i++)
            memcpy(rs[i]->param + rs[i]->off[k], rs[0]->param + rs[0]->off[k],
                   rs[0]->len[k] * sizeof(float));
    }
    return ACX_OK;
}

/* *diff_p = max over tensors (and ranks) of ||acx - raw|| / ||raw||;
 * *worst_p = the index (w0, b0, w1, ...) of the tensor where it is largest
 * on this rank. tmp: [largest tensor] floats. Collective. */
static acx_status_t params_max_rel_diff(acx_side_t *s, raw_side_t *r, float *tmp, double *diff_p,
                                        int *worst_p) {
    double worst = 0.0;
    *worst_p = 0;
    for (int k = 0; k < 2 * MLP_LAYERS; k++) {
        ACX_TRY(acx_param_gather(acx_tensor(s, k), tmp));
        const float *b = r->param + r->off[k];
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < r->len[k]; i++) {
            double e = (double)tmp[i] - (double)b[i];
            num += e * e;
            den += (double)b[i] * (double)b[i];
        }
        double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
        if (!(rel <= worst)) { /* NaN counts as worst */
            worst = rel;
            *worst_p = k;
        }
    }
    MPI_Allreduce(&worst, diff_p, 1, MPI_DOUBLE, MPI_MAX, r->comm);
    return ACX_OK;
}

/* ---- statistics ---- */

static double sum_of(const double *x, int n) {
    double v = 0.0;
    for (int i = 0; i < n; i++)
        v += x[i];
    return v;
}

/* What one side measured: block times and the per-step times of the
 * slowest rank, and the numbers made from them. */
typedef struct side_stats {
    double *block_s;    /* [R] slowest rank's time of each round's block, seconds */
    double *cpu_s;      /* [R] CPU time of each round's block, summed over ranks, seconds */
    double *step_s;     /* [S] per step: this rank's, then the slowest rank's time */
    double *own_step_s; /* [S] acx: this rank's time per step */
    double *wait_step_s, *opt_step_s; /* [S] acx: this rank's time per step in data-moving
                                          calls, in the optimizer (then shares of own_step_s) */
    int filled;                       /* steps recorded in step_s */
    double samples_per_s, step_ms, p10, p90, min, max, final_loss;
    double cpu_ms;     /* CPU time per step per rank (mean over ranks), milliseconds */
    double comm_share; /* 1 - step_ms(compute-only) / step_ms(side), or NAN */
} side_stats_t;

/* ---- the benchmark ---- */

#define FAIL_IF(cond, ...)                                                                         \
    do {                                                                                           \
        if (cond) {                                                                                \
            fprintf(stderr, PROG ": rank %d: ", world_rank);                                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#define ACX_OK_OR_FAIL(call)                                                                       \
    do {                                                                                           \
        if ((call) != ACX_OK) {                                                                    \
            fprintf(stderr, PROG ": rank %d: %s\n", world_rank, acx_last_error());                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

typedef struct bench {
    const mlp_dims_t *d;
    const batches_t *bs;
    acx_side_t *s;
    raw_side_t *raw[NSIDES]; /* [SIDE_MPI], [SIDE_COMPUTE]; NULL when not run */
    MPI_Comm comm;
} bench_t;

/* Past setup a failure may be local to this rank: the others would wait in
 * their next collective, so end the job. */
static void abort_job(bench_t *b, const char *msg) {
    if (b->s->acc != NULL) acx_abort(b->s->acc, 1, msg);
    fprintf(stderr, PROG ": rank %d: %s\n", world_rank, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void side_step(bench_t *b, side_t side) {
    if (side != SIDE_ACX) {
        raw_side_step(b->raw[side], b->d, b->bs);
    } else if (acx_side_step(b->s, b->d, b->bs) != ACX_OK) {
        fprintf(stderr, PROG ": rank %d: %s\n", world_rank, acx_last_error());
        abort_job(b, PROG ": acx training step failed");
    }
}

/* This process's CPU time (all its threads), seconds. */
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Time K steps of one side into st->step_s[filled..] (this rank's per-step
 * times) and return the slowest rank's time of the block; the block's CPU
 * time, summed over ranks, goes to st->cpu_s[round]. block_warmup
 * untimed steps first, so each timed block starts with its own side's data
 * in the caches (as in a real run, where a step follows a step of the same
 * program) rather than paying for what the other side left behind; then a
 * barrier. */
static double time_block(bench_t *b, side_t side, int K, int block_warmup, int round,
                         side_stats_t *st) {
    for (int i = 0; i < block_warmup; i++)
        side_step(b, side);
    MPI_Barrier(b->comm);
    double c0 = cpu_now(), t0 = MPI_Wtime(), t = t0;
    for (int i = 0; i < K; i++) {
        double wait0 = b->s->t_wait, opt0 = b->s->t_opt;
        side_step(b, side);
        double t1 = MPI_Wtime();
        if (side == SIDE_ACX) {
            st->own_step_s[st->filled] = t1 - t;
            st->wait_step_s[st->filled] = b->s->t_wait - wait0;
            st->opt_step_s[st->filled] = b->s->t_opt - opt0;
        }
        st->step_s[st->filled++] = t1 - t;
        t = t1;
    }
    double mine = t - t0, slowest, cpu = cpu_now() - c0;
    MPI_Allreduce(&cpu, &st->cpu_s[round], 1, MPI_DOUBLE, MPI_SUM, b->comm);
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, b->comm);
    return slowest;
}

/* ---- JSON ---- */

/* One side's numbers as "<prefix>key": value pairs; with arrays, the
 * samples/s of every round too. */
static void json_side(FILE *f, const char *prefix, const side_stats_t *st, int R,
                      double global_batch, int S, int arrays) {
    char key[64];
#define KEY(name) (snprintf(key, sizeof key, "%s%s", prefix, name), key)
    bench_json_number(f, KEY("samples_per_s"), st->samples_per_s);
    bench_json_number(f, KEY("step_ms"), st->step_ms);
    bench_json_number(f, KEY("step_ms_p10"), st->p10);
    bench_json_number(f, KEY("step_ms_p90"), st->p90);
    bench_json_number(f, KEY("step_ms_min"), st->min);
    bench_json_number(f, KEY("step_ms_max"), st->max);
    bench_json_number(f, KEY("final_loss"), st->final_loss);
    bench_json_number(f, KEY("cpu_ms"), st->cpu_ms);
    if (strcmp(prefix, "compute_only_") != 0)
        bench_json_number(f, KEY("comm_share"), st->comm_share);
    if (arrays) {
        fprintf(f, ", \"%s\": [", KEY("round_samples_per_s"));
        for (int i = 0; i < R; i++)
            fprintf(f, "%s%.6g", i ? ", " : "",
                    global_batch * (S / R + (i < S % R)) / st->block_s[i]);
        fputc(']', f);
    }
#undef KEY
}

static int run(int argc, char **argv) {
    int provided, world, rc = 1, in_loop = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm); /* before acx_init, so it keeps MPI's fatal errors */
    MPI_Comm_rank(comm, &world_rank);
    MPI_Comm_size(comm, &world);

    acx_side_t s;
    raw_side_t raw_mpi, raw_comp;
    batches_t bs;
    options_t o;
    side_stats_t st[NSIDES];
    double *ratio = NULL, *scratch = NULL;
    float *tmp = NULL;
    bench_t b = {.s = &s, .comm = comm};
    memset(&s, 0, sizeof s);
    memset(&raw_mpi, 0, sizeof raw_mpi);
    memset(&raw_comp, 0, sizeof raw_comp);
    memset(&bs, 0, sizeof bs);
    memset(&o, 0, sizeof o);
    memset(st, 0, sizeof st);

    if (take_config_options(&argc, argv, &o) != 0) {
        MPI_Comm_free(&comm);
        MPI_Finalize();
        return 2;
    }
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    /* Host memory (the CPU MLP computes on acx's buffers; the MPI loop it
     * is compared with is host MPI), one optimizer step per batch, the
     * strategy and precision asked for: the program's choices override any
     * config file, --acx-backend and --acx-device-state (said at start). */
    cfg.sharding_strategy = o.strategy;
    cfg.mixed_precision = o.mixed_precision;
    cfg.gradient_accumulation_steps = 1;
    cfg.backend = ACX_BACKEND_MPI;
    cfg.device_state = ACX_DEVICE_STATE_HOST;
    cfg.seed = o.seed;
    if (acx_init(&argc, &argv, &cfg, &s.acc) != ACX_OK) {
        fprintf(stderr, PROG ": %s\n", acx_last_error());
        MPI_Comm_free(&comm);
        MPI_Finalize();
        return 1;
    }
    int parsed = parse_options(argc, argv, &o);
    if (parsed == 0 && o.np > 0 && o.np != world) {
        if (world_rank == 0)
            fprintf(stderr,
                    PROG ": --np %d but the job has %d rank(s) (start it with mpirun -np %d)\n",
                    o.np, world, o.np);
        parsed = -1;
    }
    if (parsed != 0) { /* every rank parsed the same arguments */
        rc = parsed < 0 ? 2 : 0;
        goto done;
    }
#ifdef OPENBLAS_VERSION
    openblas_set_num_threads(o.threads);
#else
    if (o.threads != 1 && world_rank == 0)
        fprintf(stderr, PROG ": warning: --threads needs OpenBLAS; set the BLAS's own variable\n");
#endif
    const mlp_dims_t *d = &o.dims;
    b.d = d;
    b.bs = &bs;
    const acx_config_t *c = acx_get_config(s.acc);
    int check_applies = o.run[SIDE_ACX] && o.run[SIDE_MPI] && o.mixed_precision == ACX_MP_NO &&
                        c->reduce_dtype == ACX_REDUCE_FP32;
    const char *check_state = !(o.run[SIDE_ACX] && o.run[SIDE_MPI]) ? "not-applicable"
                              : !check_applies                      ? "skipped"
                              : o.check_steps == 0                  ? "off"
                                                                    : NULL;
    if (o.check_only && check_state != NULL) { /* parse_options made sure both sides run */
        if (world_rank == 0)
            fprintf(stderr, PROG ": --check: the cross-check does not apply under mixed precision "
                                 "or a 16-bit reduce_dtype\n");
        rc = 2;
        goto done;
    }

    /* Inputs, before anything is timed. */
    FAIL_IF(batches_alloc(&bs, o.batches, (int)o.batch_size, d->in) != 0,
            "out of memory for %d batches of %lld", o.batches, (long long)o.batch_size);
    if (o.model == MODEL_FMNIST) {
        int loaded = 0, fewest;
        if (batches_load(s.acc, o.data, &bs, d, &loaded) != ACX_OK) loaded = -1;
        MPI_Allreduce(&loaded, &fewest, 1, MPI_INT, MPI_MIN, comm);
        if (fewest < 0) goto fail; /* this rank or another printed why */
        FAIL_IF(fewest < 1, "%s has no full batch of %lld per rank", o.data,
                (long long)o.batch_size);
        bs.nb = fewest;
    } else {
        batches_synthesize(&bs, d, o.seed, world_rank);
    }

    /* The models, all from acx's initial parameters. */
    ACX_OK_OR_FAIL(acx_side_register(&s, d, o.lr, o.weight_decay));
    ACX_OK_OR_FAIL(acx_prepare(s.acc, s.m, s.opt, NULL));
    ACX_OK_OR_FAIL(acx_optimizer_zero_grad(s.opt));
    FAIL_IF(mlp_workspace_init(&s.ws, d, bs.B) != 0, "out of memory");
    raw_side_t *copies[2];
    int ncopies = 0;
    if (o.run[SIDE_MPI]) {
        FAIL_IF(raw_side_init(&raw_mpi, d, comm, 1, o.lr, o.weight_decay, bs.B) != 0,
                "out of memory for the mpi-loop model");
        b.raw[SIDE_MPI] = copies[ncopies++] = &raw_mpi;
    }
    if (o.run[SIDE_COMPUTE]) {
        FAIL_IF(raw_side_init(&raw_comp, d, comm, 0, o.lr, o.weight_decay, bs.B) != 0,
                "out of memory for the compute-only model");
        b.raw[SIDE_COMPUTE] = copies[ncopies++] = &raw_comp;
    }
    size_t numel = (size_t)acx_model_numel(s.m), largest = 0;
    for (int k = 0; k < 2 * MLP_LAYERS; k++) {
        size_t n = (size_t)acx_param_numel(acx_tensor(&s, k));
        largest = n > largest ? n : largest;
    }
    FAIL_IF((tmp = malloc(largest * sizeof *tmp)) == NULL, "out of memory");
    if (ncopies > 0) ACX_OK_OR_FAIL(raw_copy_params(copies, ncopies, &s));

    const char *coretype = getenv("OPENBLAS_CORETYPE");
    bench_say(
        PROG ": model %s, MLP %d-%d-%d-%d (%zu parameters), AdamW lr %g wd %g, acx %s\n"
             "  %d rank(s) x batch %d (global %d), %d batch(es) per rank in memory from %s\n"
             "  acx: sharding_strategy %s, mixed_precision %s, reduce_dtype %s, backend mpi and "
             "host state (fixed by the benchmark)\n"
             "  BLAS threads per rank %d, OPENBLAS_CORETYPE=%s\n",
        model_names[o.model], d->in, d->h1, d->h2, d->out, numel, o.lr, o.weight_decay,
        acx_version(), world, bs.B, bs.B * world, bs.nb,
        o.data ? o.data : "synthetic data (seeded)", bench_strategy_names[o.strategy & 3],
        mp_names[o.mixed_precision % 3], c->reduce_dtype == ACX_REDUCE_FP32 ? "fp32" : "16-bit",
        o.threads, coretype ? coretype : "(unset)");
    in_loop = 1; /* from here on a failure may be local to one rank */

    /* Cross-check on fresh state: C steps each on the same batches. */
    double diff = NAN;
    int check_ok = 1;
    if (check_state == NULL) {
        for (int i = 0; i < o.check_steps; i++) {
            side_step(&b, SIDE_ACX);
            side_step(&b, SIDE_MPI);
        }
        int worst;
        ACX_OK_OR_FAIL(params_max_rel_diff(&s, &raw_mpi, tmp, &diff, &worst));
        check_ok = diff <= CHECK_LIMIT;
        check_state = check_ok ? "ok" : "failed";
        bench_say("cross-check: %d steps from identical parameters, max relative difference %.3e "
                  "(%s; limit %.0e): %s\n",
                  o.check_steps, diff, tensor_name(worst), CHECK_LIMIT, check_ok ? "OK" : "FAILED");
        bench_say("  last loss: acx %.6f, mpi-loop %.6f\n", s.loss, raw_mpi.loss);
    } else if (strcmp(check_state, "skipped") == 0) {
        bench_say(
            "cross-check: skipped (mixed precision or a 16-bit reduce_dtype: acx computes with "
            "16-bit-rounded values on purpose, the MPI loop in fp32)\n");
    } else if (strcmp(check_state, "off") == 0) {
        bench_say("cross-check: off (--check-steps 0)\n");
    }
    if (!check_ok || o.check_only) {
        rc = check_ok ? 0 : 1;
        goto done;
    }

    /* The mpi-loop alone: no acx in the process while it is timed. */
    if (!o.run[SIDE_ACX]) {
        acx_status_t fst = acx_finalize(s.acc);
        s.acc = NULL;
        FAIL_IF(fst != ACX_OK, "acx_finalize failed: %s", acx_last_error());
    }

    /* Timing: warm-up, then rounds rotating which side goes first. */
    int R = o.rounds, S = o.steps, nsides = 0, both = o.run[SIDE_ACX] && o.run[SIDE_MPI];
    side_t order[NSIDES];
    for (int k = 0; k < NSIDES; k++)
        if (o.run[k]) order[nsides++] = (side_t)k;
    for (int k = 0; k < NSIDES; k++) {
        st[k].block_s = calloc((size_t)R, sizeof(double));
        st[k].cpu_s = calloc((size_t)R, sizeof(double));
        st[k].step_s = calloc((size_t)S, sizeof(double));
        FAIL_IF(!st[k].block_s || !st[k].cpu_s || !st[k].step_s, "out of memory");
    }
    if (o.run[SIDE_ACX]) {
        side_stats_t *x = &st[SIDE_ACX];
        x->own_step_s = calloc((size_t)S, sizeof(double));
        x->wait_step_s = calloc((size_t)S, sizeof(double));
        x->opt_step_s = calloc((size_t)S, sizeof(double));
        FAIL_IF(!x->own_step_s || !x->wait_step_s || !x->opt_step_s, "out of memory");
    }
    ratio = calloc((size_t)R, sizeof *ratio);
    scratch = calloc((size_t)R, sizeof *scratch);
    FAIL_IF(!ratio || !scratch, "out of memory");
    for (int j = 0; j < nsides; j++)
        for (int i = 0; i < o.warmup; i++)
            side_step(&b, order[j]);
    bench_say("\ntiming: %d round(s), %d timed step(s) per side in all, sides rotating; %d warm-up "
              "step(s) each; slowest rank per block, %d untimed step(s) before each block\n\n",
              R, S, o.warmup, o.block_warmup);
    bench_say("round  first       ");
    for (int j = 0; j < nsides; j++)
        bench_say("  %s samples/s", side_names[order[j]]);
    bench_say("%s\n", both ? "  acx/mpi-loop" : "");
    double global_batch = (double)bs.B * world;
    for (int i = 0; i < R; i++) {
        int K = S / R + (i < S % R);
        for (int j = 0; j < nsides; j++) {
            side_t side = order[(i + j) % nsides];
            st[side].block_s[i] = time_block(&b, side, K, o.block_warmup, i, &st[side]);
        }
        bench_say("%5d  %-12s", i + 1, side_names[order[i % nsides]]);
        for (int j = 0; j < nsides; j++)
            bench_say("  %*.1f", (int)strlen(side_names[order[j]]) + 10,
                      global_batch * K / st[order[j]].block_s[i]);
        if (both) {
            ratio[i] = st[SIDE_MPI].block_s[i] / st[SIDE_ACX].block_s[i];
            bench_say("  %12.3f", ratio[i]);
        }
        bench_say("\n");
    }

    /* Per side: samples/s over all timed steps, per-step times of the
     * slowest rank, the communication share per round, the last loss (mean
     * over ranks). */
    for (int k = 0; k < NSIDES; k++) {
        if (!o.run[k]) continue;
        side_stats_t *x = &st[k];
        MPI_Allreduce(MPI_IN_PLACE, x->step_s, S, MPI_DOUBLE, MPI_MAX, comm);
        x->samples_per_s = global_batch * S / sum_of(x->block_s, R);
        x->cpu_ms = 1e3 * sum_of(x->cpu_s, R) / ((double)S * world);
        x->step_ms = 1e3 * bench_median(x->step_s, S);
        x->p10 = 1e3 * bench_quantile(x->step_s, S, 0.1);
        x->p90 = 1e3 * bench_quantile(x->step_s, S, 0.9);
        x->min = 1e3 * bench_quantile(x->step_s, S, 0.0);
        x->max = 1e3 * bench_quantile(x->step_s, S, 1.0);
        double loss = k == SIDE_ACX ? s.loss : b.raw[k]->loss;
        MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, comm);
        x->final_loss = loss / world;
        x->comm_share = NAN;
    }
    /* Communication share from the median step times: a step that another
     * job preempted is an outlier the median ignores, where block times
     * would carry it. */
    for (int k = 0; k < NSIDES; k++)
        if (o.run[k] && o.run[SIDE_COMPUTE] && k != SIDE_COMPUTE)
            st[k].comm_share = 1.0 - st[SIDE_COMPUTE].step_ms / st[k].step_ms;
    /* acx's blocking share: per timed step, this rank's time inside the
     * data-moving calls (and in the optimizer) over its step time; the
     * median over steps, mean over ranks. */
    double shares[2] = {NAN, NAN};
    if (o.run[SIDE_ACX]) {
        side_stats_t *x = &st[SIDE_ACX];
        for (int i = 0; i < S; i++)
            x->wait_step_s[i] /= x->own_step_s[i];
        for (int i = 0; i < S; i++)
            x->opt_step_s[i] /= x->own_step_s[i];
        double mine[2] = {bench_median(x->wait_step_s, S), bench_median(x->opt_step_s, S)};
        MPI_Allreduce(mine, shares, 2, MPI_DOUBLE, MPI_SUM, comm);
        shares[0] /= world;
        shares[1] /= world;
    }
    double med_ratio = both ? bench_median(ratio, R) : NAN, cpu_ratio = NAN;
    double step_ratio = both ? st[SIDE_MPI].step_ms / st[SIDE_ACX].step_ms : NAN;
    if (both) { /* CPU time per round, loop over acx: > 1 when acx needs less */
        for (int i = 0; i < R; i++)
            scratch[i] = st[SIDE_MPI].cpu_s[i] / st[SIDE_ACX].cpu_s[i];
        cpu_ratio = bench_median(scratch, R);
    }
    double total_ratio = both ? st[SIDE_ACX].samples_per_s / st[SIDE_MPI].samples_per_s : NAN;

    bench_say("\nside          samples/s  step ms: median      p10      p90      min      max"
              "  comm share  final loss  CPU ms/step\n");
    for (int j = 0; j < nsides; j++) {
        const side_stats_t *x = &st[order[j]];
        char share[32] = "-";
        if (isfinite(x->comm_share)) snprintf(share, sizeof share, "%.3f", x->comm_share);
        bench_say("%-12s  %9.1f  %15.3f  %7.3f  %7.3f  %7.3f  %7.3f  %10s  %10.6f  %11.3f\n",
                  side_names[order[j]], x->samples_per_s, x->step_ms, x->p10, x->p90, x->min,
                  x->max, share, x->final_loss, x->cpu_ms);
    }
    if (o.run[SIDE_COMPUTE])
        bench_say("comm share = 1 - median step(compute-only) / median step(side)\n");
    if (o.run[SIDE_ACX])
        bench_say("acx time in acquire/grads_ready/release/backward_end: %.3f of its step; in "
                  "optimizer_step/zero_grad: %.3f (median over steps, mean over ranks)\n",
                  shares[0], shares[1]);

    /* The result object: the last line of stdout, and --json FILE. */
    rc = 0;
    side_t main_side = o.run[SIDE_ACX] ? SIDE_ACX : SIDE_MPI;
    for (int pass = 0; pass < 2; pass++) {
        FILE *f = stdout;
        if (world_rank != 0) break;
        if (pass == 1) {
            if (o.json == NULL) break;
            if ((f = fopen(o.json, "w")) == NULL) {
                fprintf(stderr, PROG ": cannot write '%s'\n", o.json);
                rc = 1;
                break;
            }
        }
        if (pass == 0 && both)
            printf(
                "\nmedian step time, mpi-loop/acx = %.3f (a step another job preempted is an "
                "outlier the median ignores)\n"
                "CPU time per step, mpi-loop/acx = %.3f (median of %d rounds; CPU time counts only "
                "while scheduled)\n"
                "ratio acx/mpi-loop = %.3f (median of %d per-round ratios; ratio of the totals "
                "%.3f)\n",
                step_ratio, cpu_ratio, R, med_ratio, R, total_ratio);
        fprintf(f,
                "{\"benchmark\": \"acx-bench-train\", \"impl\": \"%s\", \"ranks\": %d, "
                "\"model\": \"%s\", \"dims\": [%d, %d, %d, %d], \"strategy\": \"%s\", "
                "\"mixed_precision\": \"%s\", \"batch_size\": %d, \"steps\": %d, "
                "\"warmup\": %d, \"rounds\": %d, \"threads\": %d",
                side_names[main_side], world, model_names[o.model], d->in, d->h1, d->h2, d->out,
                bench_strategy_names[o.strategy & 3], mp_names[o.mixed_precision % 3], bs.B, S,
                o.warmup, R, o.threads);
        json_side(f, "", &st[main_side], R, global_batch, S, pass == 1);
        if (main_side == SIDE_ACX) {
            bench_json_number(f, "acx_wait_share", shares[0]);
            bench_json_number(f, "acx_optimizer_share", shares[1]);
        }
        if (both) {
            json_side(f, "mpi_loop_", &st[SIDE_MPI], R, global_batch, S, pass == 1);
            bench_json_number(f, "acx_over_mpi_loop", med_ratio);
            bench_json_number(f, "acx_over_mpi_loop_totals", total_ratio);
            bench_json_number(f, "acx_over_mpi_loop_step", step_ratio);
            bench_json_number(f, "acx_over_mpi_loop_cpu", cpu_ratio);
        }
        if (o.run[SIDE_COMPUTE])
            json_side(f, "compute_only_", &st[SIDE_COMPUTE], R, global_batch, S, pass == 1);
        fprintf(f, ", \"check\": \"%s\"", check_state);
        bench_json_number(f, "check_max_rel_diff", diff);
        fprintf(f, "}\n");
        if (pass == 1 && fclose(f) != 0) {
            fprintf(stderr, PROG ": cannot write '%s'\n", o.json);
            rc = 1;
        }
    }
    fflush(stdout);
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm); /* a failed --json write fails every rank */
    goto done;

fail:
    rc = 1;
    if (in_loop) abort_job(&b, PROG " failed");
done:
    free(ratio);
    free(scratch);
    free(tmp);
    for (int k = 0; k < NSIDES; k++) {
        free(st[k].block_s);
        free(st[k].cpu_s);
        free(st[k].own_step_s);
        free(st[k].wait_step_s);
        free(st[k].opt_step_s);
        free(st[k].step_s);
    }
    mlp_workspace_free(&s.ws);
    raw_side_free(&raw_mpi);
    raw_side_free(&raw_comp);
    batches_free(&bs);
    if (s.acc != NULL && acx_finalize(s.acc) != ACX_OK && rc == 0) rc = 1;
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return rc;
}

int main(int argc, char **argv) { return run(argc, argv); }

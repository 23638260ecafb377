/*
 * examples/fashion_mnist/fmnist.c — acx-fmnist, the main job: an MLP
 * 784-256-128-10 trained on Fashion-MNIST with AdamW, written the way a user
 * writes a single-process C trainer. Every distributed concern — ranks, data
 * sharding, gradient averaging, metrics across ranks, saving — goes through
 * acx; the model code (mlp.c) knows nothing about it.
 *
 *   acx data import-idx /usr/share/datasets/fashion-mnist -o fmnist.h5
 *   mpirun -np 2 acx-fmnist --data fmnist.h5 --metrics metrics.jsonl
 *
 * Checkpoints: --save-every N saves the whole training state every N
 * optimizer steps under PROJECT_DIR/checkpoints (acx's
 * checkpoint.save_every_steps); --resume latest (or a file or directory)
 * continues a run exactly where its checkpoint left it, mid-epoch included.
 *
 * Preemption: on SIGUSR1 or SIGTERM (acx's preemption.signals) every rank
 * stops at the next optimizer step, acx saves a checkpoint there, and the
 * program exits with ACX_EXIT_PREEMPTED (75). --resume latest, or the config
 * key resume: auto (--acx-resume=auto; what `acx slurm sbatch` scripts set
 * for requeued jobs), continues from it.
 *
 * --device cuda runs the same MLP on the rank's GPU (mlp_cuda.c: cuBLAS
 * sgemm in float32 and small kernels), on the device pointers that
 * acx_param_data/acx_param_grad return when acx keeps the training state on
 * the device: --device cuda puts device_state: cuda into the program's
 * config (so backend: auto picks NCCL when it is usable; --acx-backend=mpi
 * stages the device buffers through host memory instead).
 * Each batch is copied to the device; the kernels run on one stream that
 * acx is told about (acx_set_compute_stream), so each unit's all-reduce
 * starts after the backward kernels that wrote its gradients.
 * Built with CUDA and cuBLAS only (FMNIST_HAVE_CUDA, from Makefile.am), and
 * enabled once acx has device-resident state (ACX_HAVE_DEVICE_STATE).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <strings.h>
#include <sys/stat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <acx/acx.h>

#include "mlp.h"

#ifndef FMNIST_HAVE_CUDA
#define FMNIST_HAVE_CUDA 0
#endif
/* The --device cuda path: needs this build's cuBLAS MLP and acx's
 * device-resident parameters and gradients (acx_set_compute_stream). */
#if FMNIST_HAVE_CUDA && defined(ACX_HAVE_DEVICE_STATE)
#define FMNIST_DEVICE_PATH 1
#include "mlp_cuda.h"
#else
#define FMNIST_DEVICE_PATH 0
#endif
struct mlp_cuda; /* the device workspace (mlp_cuda.h); NULL on the CPU path */

typedef struct options {
    const char *data, *metrics, *save, *schedule, *optimizer, *resume;
    int epochs, log_every, quiet, progress;
    int cuda; /* --device cuda */
    int64_t batch_size, warmup;
    double lr, weight_decay, momentum;
    double max_grad_norm; /* 0 = no clipping */
    int64_t seed;
} options_t;

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: acx-fmnist --data FILE.h5 [options]\n"
        "Train an MLP (784-256-128-10) on Fashion-MNIST on every rank of the job.\n\n"
        "  --data FILE.h5        dataset from `acx data import-idx` (/train, /test)\n"
        "  --epochs N            epochs (default 10)\n"
        "  --batch-size N        samples per rank per step (default 64)\n"
        "  --lr X                peak learning rate, 0..1000 (default 1e-3)\n"
        "  --weight-decay X      weight decay, 0..1 (default 0.01; AdamW: decoupled)\n"
        "  --optimizer NAME      adamw | sgd (default adamw; sgd uses --momentum)\n"
        "  --momentum X          SGD momentum, 0..1 (default 0.9)\n"
        "  --schedule NAME       constant | linear | cosine (default constant)\n"
        "  --warmup N            warmup optimizer steps (default 0)\n"
        "  --seed N              seed for initialization and shuffling (default: config, 42)\n"
        "  --metrics FILE.jsonl  append one JSON object per logged step and per epoch\n"
        "  --log-every N         log the training loss every N steps (default 100)\n"
        "  --save FILE.h5        trained weights (default PROJECT_DIR/fmnist-weights.h5)\n"
        "  --project-dir DIR     where checkpoints (DIR/checkpoints) and default outputs go\n"
        "                        (default: config project_dir, \".\")\n"
        "  --save-every N        save a checkpoint every N optimizer steps (default: config\n"
        "                        checkpoint.save_every_steps, 0 = never)\n"
        "  --resume latest|PATH  continue from a checkpoint: the newest in\n"
        "                        PROJECT_DIR/checkpoints, a checkpoint directory or a file;\n"
        "                        --epochs still counts from the start of the run\n"
        "                        (--acx-resume=auto: the newest, if there is one)\n"
        "  --quiet               no progress output (final line only)\n"
        "  --progress, --no-progress  force the progress line on/off (default: on when rank\n"
        "                        0's output reaches a terminal, through mpirun or acx launch too)\n"
        "  --sharding-strategy S no_shard | shard_grad_op | full_shard | hybrid_shard\n"
        "                        (default: config sharding_strategy, no_shard)\n"
        "  --mixed-precision P   no | bf16 | fp16 (default: config mixed_precision, no)\n"
        "  --reduce-dtype D      fp32 | bf16 | fp16: gradients on the wire (default fp32)\n"
        "  --gradient-accumulation-steps K   micro-batches per optimizer step (default 1)\n"
        "  --max-grad-norm X     clip gradients to this global L2 norm (default: no clipping)\n"
        "  --device cpu|cuda     where the model computes (default cpu); cuda: cuBLAS on this\n"
        "                        rank's GPU, with acx's state in device memory (device_state:\n"
        "                        cuda; backend auto then picks NCCL when it is usable)\n"
        "  --config FILE, --acx-KEY=VALUE   acx configuration (see docs/config.md)\n");
}

/* ---- numbers on the command line ----
 *
 * Whole strings only, in a stated range. strtod/strtoll alone take "" for
 * 0 and clamp what overflows without a word: --lr= trained at lr 0 and
 * --seed 99999999999999999999 became 2^63-1, while acx refuses the same
 * value for --acx-seed (its config parser is not public API, so these
 * mirror its rules: non-empty, no trailing characters, no overflow, in
 * range, finite). Each returns 0, or prints what was wrong — the flag, the
 * value and the accepted range — and returns -1. */
static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *v_p) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr,
                "acx-fmnist: invalid value '%s' for --%s: expected an integer in %lld..%lld\n", s,
                flag, (long long)lo, (long long)hi);
        return -1;
    }
    *v_p = v;
    return 0;
}

/* lo_open: the range excludes lo. hi is included. NaN and infinities fail. */
static int parse_f64(const char *flag, const char *s, double lo, int lo_open, double hi,
                     double *v_p) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v) ||
        !(lo_open ? v > lo : v >= lo) || !(v <= hi)) {
        fprintf(stderr,
                "acx-fmnist: invalid value '%s' for --%s: expected a finite number in %s%g, %g]\n",
                s, flag, lo_open ? "(" : "[", lo, hi);
        return -1;
    }
    *v_p = v;
    return 0;
}

/* Accepted ranges. The lr bound is acx's own (its optimizers refuse more
 * than 1e3: steps that size overflow float32 weights); momentum and weight
 * decay are fractions (the buffer keeps momentum of itself per step; AdamW
 * multiplies p by 1 - lr*wd); counts are of steps a run can reach. */
#define FM_LR_MAX       1e3
#define FM_WD_MAX       1.0
#define FM_MOMENTUM_MAX 1.0
#define FM_STEPS_MAX    ((int64_t)1 << 40)
#define FM_BATCH_MAX    ((int64_t)1 << 24)

static int parse_options(int argc, char **argv, options_t *o) {
    *o = (options_t){.epochs = 10,
                     .batch_size = 64,
                     .lr = 1e-3,
                     .weight_decay = 0.01,
                     .momentum = 0.9,
                     .schedule = "constant",
                     .optimizer = "adamw",
                     .log_every = 100,
                     .seed = ACX_UNSET_I64,
                     .progress = -1};
    static const struct option longopts[] = {{"data", required_argument, 0, 'd'},
                                             {"epochs", required_argument, 0, 'e'},
                                             {"batch-size", required_argument, 0, 'b'},
                                             {"lr", required_argument, 0, 'l'},
                                             {"weight-decay", required_argument, 0, 'w'},
                                             {"optimizer", required_argument, 0, 'o'},
                                             {"momentum", required_argument, 0, 'm'},
                                             {"schedule", required_argument, 0, 's'},
                                             {"warmup", required_argument, 0, 'W'},
                                             {"seed", required_argument, 0, 'S'},
                                             {"metrics", required_argument, 0, 'M'},
                                             {"log-every", required_argument, 0, 'L'},
                                             {"save", required_argument, 0, 'O'},
                                             {"quiet", no_argument, 0, 'q'},
                                             {"progress", no_argument, 0, 'P'},
                                             {"no-progress", no_argument, 0, 'N'},
                                             {"project-dir", required_argument, 0, 'D'},
                                             {"save-every", required_argument, 0, 'E'},
                                             {"resume", required_argument, 0, 'R'},
                                             {"help", no_argument, 0, 'h'},
                                             {"max-grad-norm", required_argument, 0, 'G'},
                                             {"device", required_argument, 0, 'C'},
                                             {0, 0, 0, 0}};
    int c, idx = 0;
    int64_t v;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        switch (c) {
        case 'd': o->data = optarg; break;
        case 'e':
            if (parse_i64("epochs", optarg, 1, 1000000, &v)) return -1;
            o->epochs = (int)v;
            break;
        case 'b':
            if (parse_i64("batch-size", optarg, 1, FM_BATCH_MAX, &o->batch_size)) return -1;
            break;
        case 'l':
            if (parse_f64("lr", optarg, 0.0, 0, FM_LR_MAX, &o->lr)) return -1;
            break;
        case 'w':
            if (parse_f64("weight-decay", optarg, 0.0, 0, FM_WD_MAX, &o->weight_decay)) return -1;
            break;
        case 'o': o->optimizer = optarg; break;
        case 'm':
            if (parse_f64("momentum", optarg, 0.0, 0, FM_MOMENTUM_MAX, &o->momentum)) return -1;
            break;
        case 'G':
            if (parse_f64("max-grad-norm", optarg, 0.0, 1, 1e30, &o->max_grad_norm)) return -1;
            break;
        case 's': o->schedule = optarg; break;
        case 'W':
            if (parse_i64("warmup", optarg, 0, FM_STEPS_MAX, &o->warmup)) return -1;
            break;
        case 'S':
            if (parse_i64("seed", optarg, INT64_MIN, INT64_MAX, &o->seed)) return -1;
            break;
        case 'M': o->metrics = optarg; break;
        case 'L':
            if (parse_i64("log-every", optarg, 1, 1000000000, &v)) return -1;
            o->log_every = (int)v;
            break;
        case 'O': o->save = optarg; break;
        case 'q': o->quiet = 1; break;
        case 'P': o->progress = 1; break;
        case 'N': o->progress = 0; break;
        case 'D': /* taken before acx_init (see run); an empty one is refused here */
            if (optarg[0] == '\0') {
                fprintf(stderr,
                        "acx-fmnist: invalid value '' for --project-dir: expected a directory\n");
                return -1;
            }
            break;
        case 'E': /* likewise taken before acx_init; checked here */
            if (parse_i64("save-every", optarg, 0, FM_STEPS_MAX, &v)) return -1;
            break;
        case 'R': /* likewise taken before acx_init (resume_from); checked here */
            if (optarg[0] == '\0') {
                fprintf(stderr, "acx-fmnist: invalid value '' for --resume: expected latest, a "
                                "checkpoint file or a checkpoints directory\n");
                return -1;
            }
            o->resume = optarg;
            break;
        case 'C':
            if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0) {
                fprintf(stderr, "acx-fmnist: --device must be cpu or cuda, not '%s'\n", optarg);
                return -1;
            }
            o->cuda = strcmp(optarg, "cuda") == 0;
            break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "acx-fmnist: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->data == NULL) {
        fprintf(stderr,
                "acx-fmnist: --data FILE.h5 is required (create it with `acx data import-idx`)\n");
        return -1;
    }
    if (strcmp(o->optimizer, "adamw") != 0 && strcmp(o->optimizer, "sgd") != 0) {
        fprintf(stderr, "acx-fmnist: --optimizer must be adamw or sgd, not '%s'\n", o->optimizer);
        return -1;
    }
#if !FMNIST_HAVE_CUDA
    if (o->cuda) {
        fprintf(stderr, "acx-fmnist: --device cuda: this build has no CUDA and cuBLAS "
                        "(configure found none, or --without-cuda)\n");
        return -1;
    }
#elif !FMNIST_DEVICE_PATH
    if (o->cuda) {
        fprintf(stderr,
                "acx-fmnist: --device cuda needs device-resident state (not in this build)\n");
        return -1;
    }
#endif
    if (strcmp(o->schedule, "constant") != 0 && strcmp(o->schedule, "linear") != 0 &&
        strcmp(o->schedule, "cosine") != 0) {
        fprintf(stderr, "acx-fmnist: --schedule must be constant, linear or cosine, not '%s'\n",
                o->schedule);
        return -1;
    }
    return 0;
}

/* mkdir -p: create dir and its missing parents (errors surface in the
 * writability check that follows). */
/* mkdir -p; on failure prints which directory could not be created and
 * why (a project dir on a read-only file system must not be reported later
 * as a missing one) and returns -1. */
static int mkdir_p(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "acx-fmnist: cannot create project directory '%s': mkdir '%s': %s\n",
                    dir, p, strerror(errno));
            return -1;
        }
        *s = c;
        if (c == '\0') return 0;
    }
}

/* Whether the directory that will hold `path` exists and is writable (errno set if not). */
static int dir_writable(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (access(dir, W_OK | X_OK) != 0) return 0;
    /* the weights are written to a new file renamed over `path`: never over a device or directory
     */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        errno = EEXIST;
        return 0;
    }
    return 1;
}

/* A progress bar needs the user's terminal. Under Open MPI's mpirun (and
 * acx launch, which runs it) every rank's stdout is a pseudo-terminal of
 * mpirun's, even when mpirun's own output goes to a file or a pipe: there
 * the question is whether the launcher's stdout is a terminal. The launcher
 * is the nearest ancestor (mpirun, on its node; acx launch's rank
 * supervisor in between shares the rank's stdout) whose stdout is not the
 * rank's. srun gives a rank a terminal only with --pty, a plain process only
 * when it has one, so for them isatty(stdout) answers. Decided before
 * acx_init: Open MPI's singleton init sets PMIX_RANK in a process started
 * without a launcher. */
static long parent_pid(long pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    const char *end = strrchr(buf, ')'); /* the command name may hold spaces */
    long ppid = -1;
    if (end == NULL || sscanf(end + 1, " %*c %ld", &ppid) != 1) return -1;
    return ppid;
}

static int launcher_stdout_is_tty(void) {
    struct stat self;
    if (fstat(STDOUT_FILENO, &self) != 0) return 0;
    for (long pid = (long)getppid(), depth = 0; pid > 1 && depth < 8;
         pid = parent_pid(pid), depth++) {
        char path[64];
        struct stat st;
        snprintf(path, sizeof path, "/proc/%ld/fd/1", pid);
        if (stat(path, &st) != 0) return 0;
        if (st.st_dev == self.st_dev && st.st_ino == self.st_ino) continue; /* shares our stdout */
        if (!S_ISCHR(st.st_mode)) return 0;                                 /* a file or a pipe */
        /* O_NONBLOCK: opening a device must not wait */
        int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) return 0;
        int tty = isatty(fd);
        close(fd);
        return tty;
    }
    return 0;
}

static int want_progress(void) {
    if (!isatty(STDOUT_FILENO)) return 0;
    if (getenv("OMPI_COMM_WORLD_SIZE") != NULL) return launcher_stdout_is_tty();
    return 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The model as acx sees it: one unit per layer (the FSDP wrap unit), each
 * with nn.Linear's weight and bias and nn.Linear's default initialization. */
typedef struct model {
    mlp_dims_t dims;
    acx_model_t *m;
    acx_unit_t *unit[MLP_LAYERS];
    acx_param_t *w[MLP_LAYERS], *b[MLP_LAYERS];
} model_t;

static acx_status_t model_register(acx_accelerator_t *acc, model_t *md) {
    static const char *const names[MLP_LAYERS] = {"fc1", "fc2", "fc3"};
    md->dims = (mlp_dims_t){784, 256, 128, 10};
    ACX_TRY(acx_model_create(acc, &md->m));
    for (int l = 0; l < MLP_LAYERS; l++) {
        int64_t fi = mlp_fan_in(&md->dims, l), fo = mlp_fan_out(&md->dims, l);
        char wname[32], bname[32];
        snprintf(wname, sizeof wname, "%s.weight", names[l]);
        snprintf(bname, sizeof bname, "%s.bias", names[l]);
        ACX_TRY(acx_model_add_unit(md->m, names[l], &md->unit[l]));
        ACX_TRY(acx_unit_add_param(md->unit[l], wname, 2, (int64_t[]){fo, fi},
                                   ACX_INIT_SPEC_LINEAR_WEIGHT, &md->w[l]));
        ACX_TRY(acx_unit_add_param(md->unit[l], bname, 1, (int64_t[]){fo},
                                   ACX_INIT_SPEC_LINEAR_BIAS(fi), &md->b[l]));
    }
    return ACX_OK;
}

/* The model reads 28x28 uint8 images and uint8 labels: anything else in the
 * file would be misread, so check before training (same file on every rank:
 * every rank reaches the same verdict). Returns 0 if fine. */
static int check_datasets(const acx_dataloader_t *dl, const char *group) {
    int64_t dims[8];
    int nd = acx_dataloader_dataset_shape(dl, 0, 8, dims);
    if (nd != 3 || dims[1] != 28 || dims[2] != 28 ||
        acx_dataloader_dataset_dtype(dl, 0) != ACX_DTYPE_UINT8) {
        char shape[128] = "";
        for (int k = 0, n = 0; k < nd && n < (int)sizeof shape; k++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%lld", k ? " x " : "",
                          (long long)dims[k]);
        fprintf(stderr, "acx-fmnist: %s/images must be uint8 [N x 28 x 28]; the file has %s [%s]\n",
                group, acx_dtype_name((acx_dtype_t)acx_dataloader_dataset_dtype(dl, 0)), shape);
        return -1;
    }
    nd = acx_dataloader_dataset_shape(dl, 1, 8, dims);
    if (nd != 1 || acx_dataloader_dataset_dtype(dl, 1) != ACX_DTYPE_UINT8) {
        fprintf(stderr,
                "acx-fmnist: %s/labels must be uint8 [N]; the file has %s with %d dimension(s)\n",
                group, acx_dtype_name((acx_dtype_t)acx_dataloader_dataset_dtype(dl, 1)), nd);
        return -1;
    }
    return 0;
}

/* Set when the program itself printed the reason for a failure (acx's last
 * error then says nothing about it). */
static int reported;

/* Labels index the logits: one outside 0..9 would read out of bounds. */
static acx_status_t check_labels(const acx_batch_t *batch, int classes) {
    const uint8_t *y = batch->tensors[1];
    for (int64_t i = 0; i < batch->size; i++)
        if (y[i] >= classes) {
            fprintf(stderr, "acx-fmnist: label %d of dataset row %lld is outside 0..%d\n", y[i],
                    (long long)batch->indices[i], classes - 1);
            reported = 1;
            return ACX_ERR_FORMAT;
        }
    return ACX_OK;
}

/* Pointers for this step: valid between acquire and release (under
 * NO_SHARD, always). */
/* Layer l's parameter pointers (valid while its unit is acquired), and
 * with g its gradient pointers (fetched anew every micro-step: under the
 * sharded strategies a gradient buffer is handed over at each boundary). */
static void layer_tensors(model_t *md, int l, mlp_params_t *p, mlp_tensors_t *g) {
    p->w[l] = acx_param_data(md->w[l]);
    p->b[l] = acx_param_data(md->b[l]);
    if (g == NULL) return;
    g->w[l] = acx_param_grad(md->w[l]);
    g->b[l] = acx_param_grad(md->b[l]);
}

/* One micro-step: forward, loss, backward layer by layer, telling acx as
 * soon as each unit's gradients are complete so their all-reduce overlaps
 * the backward of the layers below. */
#if FMNIST_DEVICE_PATH
static acx_status_t train_step_cuda(acx_accelerator_t *acc, model_t *md, mlp_cuda_t *gpu,
                                    const acx_batch_t *batch, double *loss_p);
#endif

/* gpu: the device workspace under --device cuda (train_step_cuda), else NULL. */
static acx_status_t train_step(acx_accelerator_t *acc, model_t *md, mlp_workspace_t *ws,
                               struct mlp_cuda *gpu, const acx_batch_t *batch, double *loss_p) {
#if FMNIST_DEVICE_PATH
    if (gpu != NULL) return train_step_cuda(acc, md, gpu, batch, loss_p);
#endif
    int n = (int)batch->size;
    mlp_params_t p;
    mlp_tensors_t g;
    ACX_TRY(check_labels(batch, md->dims.out));
    /* docs/sharding.md's pattern: one unit gathered at a time (plus acx's
     * prefetch), so FULL_SHARD's peak is one layer, not the model */
    mlp_load_input(ws, &md->dims, batch->tensors[0], n);
    for (int l = 0; l < MLP_LAYERS; l++) {
        ACX_TRY(acx_unit_acquire(md->unit[l]));
        layer_tensors(md, l, &p, NULL);
        mlp_forward_layer(&md->dims, &p, ws, l, n);
        ACX_TRY(acx_unit_release(md->unit[l]));
    }
    *loss_p = mlp_loss(&md->dims, ws, batch->tensors[1], n);
    acx_record_loss(acc, *loss_p);
    /* fp16: backward starts from the scaled loss (acx knows the scale) */
    ACX_TRY(acx_backward_begin(acc, ws->dact, (size_t)n * (size_t)md->dims.out));
    for (int l = MLP_LAYERS - 1; l >= 0; l--) { /* gathered again, in reverse */
        ACX_TRY(acx_unit_acquire(md->unit[l]));
        layer_tensors(md, l, &p, &g);
        mlp_backward_layer(&md->dims, &p, &g, ws, l, n);
        ACX_TRY(acx_unit_grads_ready(md->unit[l]));
        ACX_TRY(acx_unit_release(md->unit[l]));
    }
    return acx_backward_end(acc);
}

#if FMNIST_DEVICE_PATH
/* An mlp_cuda call failed: say so (its message names the CUDA or cuBLAS
 * call and error) and fail the step. */
static acx_status_t cuda_failed(const mlp_cuda_t *gpu) {
    fprintf(stderr, "acx-fmnist: --device cuda: %s\n", gpu->err);
    reported = 1;
    return ACX_ERR_CUDA;
}

/* train_step on the device: the batch is copied in, the kernels run on the
 * stream acx was given, and acx_unit_grads_ready follows each layer's
 * backward launches (acx orders the unit's all-reduce after them on the
 * device; the host does not wait). The loss is read back last, so the only
 * host wait of the step is for the loss, not for the backward. */
static acx_status_t train_step_cuda(acx_accelerator_t *acc, model_t *md, mlp_cuda_t *gpu,
                                    const acx_batch_t *batch, double *loss_p) {
    int n = (int)batch->size;
    mlp_params_t p;
    mlp_tensors_t g;
    ACX_TRY(check_labels(batch, md->dims.out));
    if (mlp_cuda_load_batch(gpu, &md->dims, batch->tensors[0], batch->tensors[1], n) != 0)
        return cuda_failed(gpu);
    for (int l = 0; l < MLP_LAYERS; l++) { /* acquire, forward, release: as train_step */
        ACX_TRY(acx_unit_acquire(md->unit[l]));
        layer_tensors(md, l, &p, NULL);
        if (mlp_cuda_forward_layer(&md->dims, &p, gpu, l, n) != 0) return cuda_failed(gpu);
        ACX_TRY(acx_unit_release(md->unit[l]));
    }
    if (mlp_cuda_loss(&md->dims, gpu, n) != 0) return cuda_failed(gpu);
    /* fp16: backward starts from the scaled loss, scaled on acx's compute stream (gpu's) */
    ACX_TRY(acx_backward_begin(acc, gpu->dact, (size_t)n * (size_t)md->dims.out));
    for (int l = MLP_LAYERS - 1; l >= 0; l--) {
        ACX_TRY(acx_unit_acquire(md->unit[l]));
        layer_tensors(md, l, &p, &g);
        if (mlp_cuda_backward_layer(&md->dims, &p, &g, gpu, l, n) != 0) return cuda_failed(gpu);
        ACX_TRY(acx_unit_grads_ready(md->unit[l]));
        ACX_TRY(acx_unit_release(md->unit[l]));
    }
    if (mlp_cuda_loss_value(gpu, loss_p) != 0) return cuda_failed(gpu);
    acx_record_loss(acc, *loss_p);
    return acx_backward_end(acc);
}

/* --device cuda: the device workspace on acx's device, checked against
 * where acx keeps the parameters, and its stream handed to acx. Collective
 * (every rank learns whether all succeeded); on failure *ok_p = 0 and the
 * reason was printed. */
static acx_status_t cuda_setup(acx_accelerator_t *acc, model_t *md, mlp_cuda_t *gpu, int max_batch,
                               int *ok_p) {
    double bad = 0.0;
    *ok_p = 0;
    /* acx bound the device (-1: acx_device reports host memory, but a
     * device_state: cuda run has bound one; keep the current device) */
    if (mlp_cuda_init(gpu, &md->dims, max_batch, acx_device(acc), NULL, 0) != 0) {
        fprintf(stderr, "acx-fmnist (rank %d): --device cuda: %s\n", acx_rank(acc), gpu->err);
        bad = 1.0;
    } else {
        ACX_TRY(acx_unit_acquire(md->unit[0]));
        int on_device = mlp_cuda_is_device_pointer(gpu, acx_param_data(md->w[0]));
        if (on_device == 1) on_device = mlp_cuda_is_device_pointer(gpu, acx_param_grad(md->w[0]));
        ACX_TRY(acx_unit_release(md->unit[0]));
        if (on_device != 1) {
            fprintf(stderr, "acx-fmnist (rank %d): --device cuda: %s\n", acx_rank(acc),
                    on_device < 0
                        ? gpu->err
                        : "acx keeps the parameters and gradients in host memory; "
                          "device-resident state needs backend: nccl or device_state: cuda "
                          "(docs/gpu.md)");
            bad = 1.0;
        }
    }
    ACX_TRY(acx_reduce_scalar(acc, bad, ACX_OP_MAX, &bad));
    if (bad != 0.0) return ACX_OK;
    ACX_TRY(acx_set_compute_stream(acc, mlp_cuda_stream(gpu)));
    *ok_p = 1;
    return ACX_OK;
}
#endif

/* Accuracy over the whole test set: every rank evaluates its share, and
 * gather_for_metrics drops the samples even_batches repeated, so each test
 * image counts exactly once. */
static acx_status_t evaluate(acx_accelerator_t *acc, model_t *md, acx_dataloader_t *test,
                             mlp_workspace_t *ws, struct mlp_cuda *gpu, double *accuracy_p) {
    int64_t n_test = acx_dataloader_num_samples(test);
    uint8_t *all = acx_is_main_process(acc) ? malloc((size_t)n_test) : NULL;
    uint8_t *mine = malloc((size_t)ws->max_batch);
    int64_t hits = 0, seen = 0;
    acx_status_t st = ACX_OK;
    const acx_batch_t *batch;
    mlp_params_t p;
    if ((acx_is_main_process(acc) && all == NULL) || mine == NULL) {
        fprintf(stderr, "acx-fmnist: out of memory\n");
        st = ACX_ERR_NO_MEMORY;
        goto out;
    }
/* every failure below leaves through out, which frees the buffers */
#define EVAL_TRY(call)                                                                             \
    do {                                                                                           \
        if ((st = (call)) != ACX_OK) goto out;                                                     \
    } while (0)
    EVAL_TRY(acx_dataloader_set_epoch(test, 0));
    while ((st = acx_dataloader_next(test, &batch)) == ACX_OK && batch != NULL) {
        int n = (int)batch->size;
        EVAL_TRY(check_labels(batch, md->dims.out));
#if FMNIST_DEVICE_PATH
        if (gpu != NULL) {
            int hits_unused;
            if (mlp_cuda_load_batch(gpu, &md->dims, batch->tensors[0], batch->tensors[1], n) != 0) {
                st = cuda_failed(gpu);
                goto out;
            }
            for (int l = 0; l < MLP_LAYERS; l++) { /* acquire, forward, release */
                EVAL_TRY(acx_unit_acquire(md->unit[l]));
                layer_tensors(md, l, &p, NULL);
                if (mlp_cuda_forward_layer(&md->dims, &p, gpu, l, n) != 0) {
                    st = cuda_failed(gpu);
                    goto out;
                }
                EVAL_TRY(acx_unit_release(md->unit[l]));
            }
            if (mlp_cuda_count_correct(&md->dims, gpu, n, mine, &hits_unused) != 0) {
                st = cuda_failed(gpu);
                goto out;
            }
        } else
#endif
        {
            mlp_load_input(ws, &md->dims, batch->tensors[0], n);
            for (int l = 0; l < MLP_LAYERS; l++) { /* acquire, forward, release */
                EVAL_TRY(acx_unit_acquire(md->unit[l]));
                layer_tensors(md, l, &p, NULL);
                mlp_forward_layer(&md->dims, &p, ws, l, n);
                EVAL_TRY(acx_unit_release(md->unit[l]));
            }
            mlp_count_correct(&md->dims, ws, batch->tensors[1], n, mine);
        }
        int64_t got = 0;
        st = acx_gather_for_metrics(acc, batch, mine, 1, all ? all + seen : NULL, n_test - seen, 1,
                                    &got);
        if (st != ACX_OK) goto out;
        for (int64_t i = 0; i < got; i++)
            hits += all[seen + i];
        seen += got;
    }
    if (st != ACX_OK) goto out;
    st = ACX_OK;
    if (acx_is_main_process(acc) && seen != n_test)
        fprintf(stderr, "acx-fmnist: warning: evaluated %lld of %lld test samples\n",
                (long long)seen, (long long)n_test);
    double acc_local = seen > 0 ? (double)hits / (double)seen : 0.0;
    /* Only the main process gathered; share the value so every rank returns
     * it: a host-memory helper, whatever the backend (acx_broadcast of a
     * host double would hand NCCL a host address). x + 0.0 is x. */
    st = acx_reduce_scalar(acc, acx_is_main_process(acc) ? acc_local : 0.0, ACX_OP_SUM, &acc_local);
    *accuracy_p = acc_local;
out:
#undef EVAL_TRY
    free(all);
    free(mine);
    return st;
}

/* A terminal gets a line redrawn every 1/30 of the epoch: steps, samples/s
 * over the epoch so far and the time left for the whole run at that rate;
 * logs get the epoch lines only. i: step index in the epoch (0..n-1); t0:
 * the epoch's start (now_s()); global_batch: samples per step on all ranks. */
static void progress(const acx_accelerator_t *acc, const options_t *o, int tty, int epoch,
                     int64_t i, int64_t n, double loss, double t0, int64_t global_batch) {
    if (o->quiet || !tty || !acx_is_main_process(acc)) return;
    if ((i + 1) % (n / 30 > 0 ? n / 30 : 1) != 0 && i + 1 != n) return;
    int width = 20, fill = (int)(width * (i + 1) / (n > 0 ? n : 1));
    double dt = now_s() - t0, per_step = dt / (double)(i + 1);
    double left = per_step * (double)((int64_t)(o->epochs - epoch - 1) * n + (n - i - 1));
    long eta = (long)(left + 0.5);
    printf("\repoch %d/%d [%.*s%*s] %lld/%lld steps  %.0f samples/s  ETA %ld:%02ld  loss %.4f ",
           epoch + 1, o->epochs, fill, "====================", width - fill, "", (long long)(i + 1),
           (long long)n, dt > 0 ? (double)((i + 1) * global_batch) / dt : 0.0, eta / 60, eta % 60,
           loss);
    fflush(stdout);
}

/* --sharding-strategy S (and the other options below) are config keys:
 * rewrite them as --acx-KEY=S so acx_init validates them (naming the
 * accepted values) and records where they came from. The strings live
 * until exit. */
static void alias_acx_options(int *argc, char **argv) {
    static const char *const alias[][2] = {
        {"--sharding-strategy", "sharding_strategy"},
        {"--mixed-precision", "mixed_precision"},
        {"--gradient-accumulation-steps", "gradient_accumulation_steps"},
        {"--reduce-dtype", "reduce_dtype"}};
    static char storage[16][160];
    int used = 0;
    for (int i = 1; i < *argc && used < 16; i++) {
        int a = 0, na = (int)(sizeof alias / sizeof alias[0]);
        size_t len = 0;
        for (; a < na; a++) {
            len = strlen(alias[a][0]);
            if (strncmp(argv[i], alias[a][0], len) == 0 &&
                (argv[i][len] == '=' || argv[i][len] == '\0'))
                break;
        }
        if (a == na) continue;
        const char *v = argv[i][len] == '=' ? argv[i] + len + 1 : NULL;
        if (argv[i][len] == '\0' && i + 1 < *argc) { /* "--sharding-strategy S": drop S */
            v = argv[i + 1];
            memmove(&argv[i + 1], &argv[i + 2], (size_t)(*argc - i - 1) * sizeof *argv);
            (*argc)--;
        }
        if (v == NULL) continue;
        snprintf(storage[used], sizeof storage[used], "--acx-%s=%s", alias[a][1], v);
        argv[i] = storage[used++];
    }
}

static int run(int argc, char **argv) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    acx_accelerator_t *acc = NULL;
    options_t o;
    /* --seed, --project-dir, --save-every and --resume are the program's
     * own choices, so they go into the config struct (highest precedence)
     * before acx_init; acx_init then removes --config and --acx-* from argv,
     * and getopt parses what is left (and reports malformed values).
     * --resume is resume_from: acx_prepare loads it, before it would refuse
     * a project_dir that holds checkpoints. */
    for (int i = 1; i < argc; i++) {
        static const char *const keys[] = {"--seed", "--project-dir", "--save-every", "--resume"};
        for (int k = 0; k < 4; k++) {
            size_t len = strlen(keys[k]);
            const char *v = strncmp(argv[i], keys[k], len) != 0    ? NULL
                            : argv[i][len] == '='                  ? argv[i] + len + 1
                            : argv[i][len] == '\0' && i + 1 < argc ? argv[i + 1]
                                                                   : NULL;
            char *end;
            if (v == NULL) continue;
            if (k == 1 || k == 3) {
                /* "" is refused by parse_options */
                if (*v != '\0' && k == 1)
                    cfg.project_dir = v;
                else if (*v != '\0')
                    cfg.resume_from = v;
                continue;
            }
            /* a malformed value is left for parse_options to report
             * (after acx_init, so that every rank finalizes) */
            errno = 0;
            long long x = strtoll(v, &end, 10);
            if (*v == '\0' || *end != '\0' || errno == ERANGE) continue;
            if (k == 0)
                cfg.seed = x;
            else if (x >= 0 && x <= FM_STEPS_MAX)
                cfg.checkpoint.save_every_steps = x;
        }
    }
    /* --device cuda: the model computes on the device, so acx keeps its
     * state there (the program's choice, like --seed); a build without the
     * device path refuses --device cuda after parsing, with its reason */
    int on_device = 0;
    for (int i = 1; FMNIST_DEVICE_PATH && i < argc; i++)
        if (strcmp(argv[i], "--device=cuda") == 0 ||
            (strcmp(argv[i], "--device") == 0 && i + 1 < argc && strcmp(argv[i + 1], "cuda") == 0))
            on_device = 1;
    if (on_device) {
        /* the program's choice overrides a device_state given on the command
         * line or in the environment: refuse a contradicting one rather
         * than override it silently (every rank sees the same arguments) */
        const char *user = getenv("ACX_DEVICE_STATE");
        for (int i = 1; i < argc; i++) {
            static const char *const spell[] = {"--acx-device-state", "--acx-device_state"};
            for (int k = 0; k < 2; k++) {
                size_t len = strlen(spell[k]);
                if (strncmp(argv[i], spell[k], len) != 0) continue;
                if (argv[i][len] == '=')
                    user = argv[i] + len + 1;
                else if (argv[i][len] == '\0' && i + 1 < argc)
                    user = argv[i + 1];
            }
        }
        if (user != NULL && strcasecmp(user, "cuda") != 0 && strcasecmp(user, "auto") != 0) {
            fprintf(stderr,
                    "acx-fmnist: --device cuda computes on the GPU and needs device_state: cuda, "
                    "but device_state is '%s' (command line or ACX_DEVICE_STATE); leave it "
                    "unset, or use --device cpu\n",
                    user);
            return 2;
        }
        cfg.device_state = ACX_DEVICE_STATE_CUDA;
    }
    const int tty_auto = want_progress(); /* before acx_init: see want_progress */
    alias_acx_options(&argc, argv);
    acx_status_t st = acx_init(&argc, &argv, &cfg, &acc);
    if (st != ACX_OK) {
        fprintf(stderr, "acx-fmnist: %s%s\n", on_device ? "--device cuda: " : "", acx_last_error());
        return 1;
    }
    int parsed = parse_options(argc, argv, &o);
    if (parsed != 0) { /* every rank parsed the same arguments: finalize together */
        acx_finalize(acc);
        return parsed < 0 ? 2 : 0;
    }
    if (!o.cuda && acx_device_state(acc) != ACX_DEVICE_STATE_HOST) {
        /* the CPU MLP reads acx_param_data and writes acx_param_grad with
         * CBLAS: device pointers would fault (same answer on every rank) */
        if (acx_is_main_process(acc))
            fprintf(stderr,
                    "acx-fmnist: --device cpu computes on the host, but acx keeps the model "
                    "state in %s memory (the configuration's device_state and backend); use "
                    "--device cuda, or device_state: host with backend: mpi\n",
                    acx_device_state(acc) == ACX_DEVICE_STATE_EMULATED ? "emulated device"
                                                                       : "CUDA device");
        acx_finalize(acc);
        return 2;
    }
    int rc = 1, training = 0, agreed = 0, tty = o.progress >= 0 ? o.progress : tty_auto;
    FILE *metrics = NULL;
    model_t md;
    mlp_workspace_t ws = {0};
    struct mlp_cuda *gpu = NULL; /* --device cuda: &gpu_ws once set up */
#if FMNIST_DEVICE_PATH
    mlp_cuda_t gpu_ws = {0};
#endif
    acx_optimizer_t *opt = NULL;
    acx_scheduler_t *sched = NULL;
    acx_dataloader_t *train = NULL, *test = NULL;
    const char *const train_sets[] = {"/train/images", "/train/labels"};
    const char *const test_sets[] = {"/test/images", "/test/labels"};

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((st = (call)) != ACX_OK) goto fail;                                                    \
    } while (0)

    CHECK(model_register(acc, &md));
    if (strcmp(o.optimizer, "adamw") == 0) {
        acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
        hp.lr = o.lr;
        hp.weight_decay = o.weight_decay;
        CHECK(acx_adamw_create(md.m, &hp, &opt));
    } else {
        acx_sgd_hparams_t hp = ACX_SGD_DEFAULT;
        hp.lr = o.lr;
        hp.momentum = o.momentum;
        hp.weight_decay = o.weight_decay;
        CHECK(acx_sgd_create(md.m, &hp, &opt));
    }
    acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
    lo.batch_size = o.batch_size;
    CHECK(acx_dataloader_open(acc, o.data, 2, train_sets, &lo, &train));
    /* Evaluation always covers the whole test set once: its own loader, not
     * shuffled, per-rank batches of up to 500 samples (never more than the set
     * holds), padded so every rank runs the same number of batches. */
    acx_dataloader_options_t to = ACX_DATALOADER_OPTIONS_DEFAULT;
    to.batch_size = 1;
    to.shuffle = 0;
    to.drop_last = 0;
    to.even_batches = 1;
    to.split_batches = 0;
    CHECK(acx_dataloader_open(acc, o.data, 2, test_sets, &to, &test));
    int64_t n_test = acx_dataloader_num_samples(test);
    CHECK(acx_dataloader_close(test));
    to.batch_size = n_test < 500 ? n_test : 500;
    CHECK(acx_dataloader_open(acc, o.data, 2, test_sets, &to, &test));
    if (check_datasets(train, "/train") != 0 || check_datasets(test, "/test") != 0) goto fail_quiet;
    /* The schedule counts optimizer steps: one per gradient_accumulation_steps
     * batches, plus one for a shorter last window (the end of the epoch is a
     * synchronization boundary). */
    int64_t steps_per_epoch = acx_dataloader_num_batches(train);
    int64_t accum = acx_get_config(acc)->gradient_accumulation_steps;
    int64_t opt_steps_per_epoch = (steps_per_epoch + accum - 1) / accum;
    int64_t total_steps = opt_steps_per_epoch * o.epochs;
    if (strcmp(o.schedule, "constant") != 0)
        CHECK(acx_scheduler_create(
            opt, strcmp(o.schedule, "linear") == 0 ? ACX_SCHED_LINEAR : ACX_SCHED_COSINE, o.warmup,
            total_steps, 0.5, &sched));
    else if (o.warmup > 0)
        CHECK(acx_scheduler_create(opt, ACX_SCHED_CONSTANT_WITH_WARMUP, o.warmup, total_steps, 0.5,
                                   &sched));
    CHECK(acx_prepare(acc, md.m, opt, train));
    /* Resuming restores the parameters, the optimizer and its schedule, the
     * loader's epoch and position and the step counters: the loop below
     * then starts in the saved epoch, at the batch after the last one the
     * saved run consumed. acx_prepare has already loaded --resume
     * (resume_from), or with resume: auto the latest checkpoint if there
     * was one (the step count says so). */
    int first_epoch = 0, resumed = 0;
    if (o.resume != NULL || acx_step(acc) > 0) {
        first_epoch = (int)acx_dataloader_epoch(train);
        resumed = 1;
        acx_print(acc, "acx-fmnist: resumed from %s at step %lld (epoch %d, batch %lld)\n",
                  o.resume != NULL ? o.resume : "latest (resume: auto)", (long long)acx_step(acc),
                  first_epoch + 1, (long long)acx_dataloader_position(train));
        /* A checkpoint past --epochs leaves nothing to train: say so, rather
         * than report a final accuracy of a model never evaluated and
         * replace the weights file (every rank read the same checkpoint,
         * so all stop here). */
        if (first_epoch >= o.epochs) {
            if (acx_is_main_process(acc))
                fprintf(stderr,
                        "acx-fmnist: the checkpoint is in epoch %d (step %lld) but --epochs is "
                        "%d: nothing left to train (--epochs counts from the start of the run; "
                        "raise it to continue)\n",
                        first_epoch + 1, (long long)acx_step(acc), o.epochs);
            goto fail_quiet;
        }
    }

    /* split_batches: --batch-size is the global batch, divided among ranks */
    int split = acx_get_config(acc)->dataloader.split_batches;
    int64_t rank_batch = split ? o.batch_size / acx_world_size(acc) : o.batch_size;
    int64_t global_batch = split ? o.batch_size : o.batch_size * acx_world_size(acc);
    int max_batch = (int)(rank_batch > 500 ? rank_batch : 500);
    if (mlp_workspace_init(&ws, &md.dims, max_batch) != 0) {
        fprintf(stderr, "acx-fmnist: out of memory for a batch of %d\n", max_batch);
        goto fail_quiet;
    }
#if FMNIST_DEVICE_PATH
    if (o.cuda) {
        int ok;
        CHECK(cuda_setup(acc, &md, &gpu_ws, max_batch, &ok));
        if (!ok) goto fail_quiet;
        gpu = &gpu_ws;
    }
#endif
    const acx_config_t *c = acx_get_config(acc);
    char path[4096];
    if (o.save)
        snprintf(path, sizeof path, "%s", o.save);
    else
        snprintf(path, sizeof path, "%s/fmnist-weights.h5", c->project_dir);
    /* Find unusable output paths now, not after hours of training; every rank
     * learns the outcome, so all stop together. */
    /* The project directory is created on first use, as Accelerate does
     * (checkpoints go to its checkpoints/ subdirectory, made by acx). */
    double bad = 0.0;
    if (!o.save && acx_is_main_process(acc) && mkdir_p(c->project_dir) != 0) bad = 1.0;
    CHECK(acx_barrier(acc));
    if (o.metrics && acx_is_main_process(acc) && (metrics = fopen(o.metrics, "a")) == NULL) {
        fprintf(stderr, "acx-fmnist: cannot open metrics file '%s': %s\n", o.metrics,
                strerror(errno));
        bad = 1.0;
    }
    if (acx_is_main_process(acc) && bad == 0.0 && !dir_writable(path)) {
        fprintf(stderr, "acx-fmnist: cannot write weights to '%s': %s\n", path,
                errno == EEXIST ? "it exists and is not a regular file" : strerror(errno));
        bad = 1.0;
    }
    CHECK(acx_reduce_scalar(acc, bad, ACX_OP_MAX, &bad));
    if (bad != 0.0) goto fail_quiet;
    static const char *const strategy_names[] = {"no_shard", "shard_grad_op", "full_shard",
                                                 "hybrid_shard"};
    static const char *const mp_names[] = {"fp32", "bf16", "fp16"};
    acx_print(acc,
              "acx-fmnist: %d rank(s) on %d node(s), %lld train / %lld test samples, "
              "batch %lld per rank (global %lld), %lld batches and %lld optimizer steps per epoch, "
              "%s lr %g, seed %lld, %s, %s\n",
              acx_world_size(acc), acx_num_nodes(acc), (long long)acx_dataloader_num_samples(train),
              (long long)acx_dataloader_num_samples(test), (long long)rank_batch,
              (long long)global_batch, (long long)steps_per_epoch, (long long)opt_steps_per_epoch,
              o.optimizer, o.lr, (long long)c->seed, strategy_names[c->sharding_strategy & 3],
              mp_names[c->mixed_precision % 3]);

    training = 1; /* from here a failure may be local to one rank */
    double accuracy = 0.0, train_time = 0.0;
    int64_t samples = 0;
    for (int epoch = first_epoch; epoch < o.epochs; epoch++) {
        if (!resumed || epoch != first_epoch) CHECK(acx_dataloader_set_epoch(train, epoch));
        const acx_batch_t *batch;
        double loss_sum = 0.0, window_loss = 0.0, t0 = now_s(), tw = t0;
        int64_t nb = 0, window = 0, window_samples = 0;
        while ((st = acx_dataloader_next(train, &batch)) == ACX_OK && batch != NULL) {
            double loss;
            CHECK(acx_accumulate_begin(acc));
            CHECK(train_step(acc, &md, &ws, gpu, batch, &loss));
            if (acx_sync_gradients(acc)) {
                if (o.max_grad_norm > 0) CHECK(acx_clip_grad_norm(acc, o.max_grad_norm, 2.0, NULL));
                /* ACX_ERR_STATE here (a non-finite loss or gradient
                 * without fp16, or fp16 loss scaling gave up) is agreed by
                 * every rank: they stop together, without an abort */
                if ((st = acx_optimizer_step(opt)) != ACX_OK) {
                    agreed = st == ACX_ERR_STATE;
                    goto fail;
                }
                if (sched) CHECK(acx_scheduler_step(sched));
                CHECK(acx_optimizer_zero_grad(opt));
            }
            /* A preemption signal: every rank stops at this step, whose
             * checkpoint acx has just saved. */
            if ((st = acx_accumulate_end(acc)) != ACX_OK) goto fail;
            if (acx_preempted(acc)) goto preempted;
            loss_sum += loss;
            window_loss += loss;
            nb++;
            window++;
            window_samples += batch->size * acx_world_size(acc);
            progress(acc, &o, tty, epoch, nb - 1, steps_per_epoch, loss_sum / (double)nb, t0,
                     global_batch);
            /* Every rank reaches the same step counts, so all take part in this reduction. */
            if (acx_sync_gradients(acc) && acx_step(acc) % o.log_every == 0) {
                double mean;
                CHECK(acx_reduce_scalar(acc, window_loss / (double)window, ACX_OP_AVG, &mean));
                double t = now_s();
                if (metrics)
                    fprintf(metrics,
                            "{\"epoch\": %d, \"step\": %lld, \"train_loss\": %.6f, \"lr\": %.6g, "
                            "\"samples_per_s\": %.1f}\n",
                            epoch, (long long)acx_step(acc), mean, acx_optimizer_lr(opt),
                            (double)window_samples / (t - tw));
                window_loss = 0.0;
                window = 0;
                window_samples = 0;
                tw = t;
            }
        }
        if (st != ACX_OK) goto fail;
        double epoch_time = now_s() - t0;
        train_time += epoch_time;
        int64_t epoch_samples = acx_dataloader_num_batches(train) * global_batch;
        samples += epoch_samples;
        double mean_loss;
        CHECK(acx_reduce_scalar(acc, loss_sum / (double)(nb > 0 ? nb : 1), ACX_OP_AVG, &mean_loss));
        CHECK(evaluate(acc, &md, test, &ws, gpu, &accuracy));
        if (!o.quiet) {
            if (tty) acx_print(acc, "\n");
            acx_print(acc, "epoch %d: train_loss %.4f  test_accuracy %.4f  %.0f samples/s\n",
                      epoch + 1, mean_loss, accuracy, (double)epoch_samples / epoch_time);
        }
        if (metrics) {
            fprintf(metrics,
                    "{\"epoch\": %d, \"step\": %lld, \"train_loss\": %.6f, \"test_accuracy\": "
                    "%.6f, \"samples_per_s\": %.1f}\n",
                    epoch, (long long)acx_step(acc), mean_loss, accuracy,
                    (double)epoch_samples / epoch_time);
            fflush(metrics);
        }
    }

#if FMNIST_DEVICE_PATH
    if (gpu != NULL && mlp_cuda_sync(gpu) != 0) {
        st = cuda_failed(gpu);
        goto fail;
    }
#endif
    CHECK(acx_model_save_weights(md.m, path));
    acx_print(acc, "saved weights to %s; %.0f samples/s over %d epoch(s)\n", path,
              train_time > 0 ? (double)samples / train_time : 0.0, o.epochs - first_epoch);
    acx_print(acc, "final test_accuracy=%.4f\n", accuracy);
    rc = 0;
    goto done;

preempted:
    acx_print(acc,
              "acx-fmnist: preempted at step %lld (epoch %d, batch %lld of %lld): checkpoint "
              "saved; exit %d and resume from it\n",
              (long long)acx_step(acc), (int)acx_dataloader_epoch(train) + 1,
              (long long)acx_dataloader_position(train), (long long)steps_per_epoch,
              ACX_EXIT_PREEMPTED);
    rc = ACX_EXIT_PREEMPTED;
    goto done;

fail:
    if (!reported) fprintf(stderr, "acx-fmnist (rank %d): %s\n", acx_rank(acc), acx_last_error());
fail_quiet:
    rc = 1;
done:
    if (metrics) fclose(metrics);
    mlp_workspace_free(&ws);
#if FMNIST_DEVICE_PATH
    if (gpu != NULL) (void)acx_set_compute_stream(acc, NULL); /* before the stream goes */
    if (o.cuda) mlp_cuda_free(&gpu_ws);
#endif
    if (rc != 0 && rc != ACX_EXIT_PREEMPTED && training && !agreed) {
        /* A failure in the loop may be local to this rank (a read error):
         * the others would wait for it in their next collective, so end the
         * job. Setup failures are agreed by every rank and finalize cleanly. */
        acx_abort(acc, rc, "acx-fmnist failed");
    }
    st = acx_finalize(acc);
    return st == ACX_OK ? rc : 1;
#undef CHECK
}

int main(int argc, char **argv) { return run(argc, argv); }

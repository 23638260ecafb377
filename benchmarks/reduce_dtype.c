/*
 * benchmarks/reduce_dtype.c — acx-bench-reduce-dtype: bytes on the wire and
 * training-step time of gradient reduction with reduce_dtype fp32 against
 * bf16 (or fp16), in one MPI job, alternating, so both see the same machine.
 *
 * The step is a data-parallel step with nothing but communication around
 * it: the program writes every gradient (a cheap fill), reports each unit
 * ready (acx starts the bucket all-reduces / reduce-scatters), waits in
 * acx_backward_end, and takes an SGD step. Each round builds a fresh
 * accelerator per dtype (acx_init ... acx_finalize; MPI stays up, owned by
 * this program), runs W untimed steps, then K timed ones (a barrier before,
 * the slowest rank's time); rounds alternate which dtype goes first.
 *
 * Two byte counts per step and rank:
 *   wire bytes   what this rank sends to the other ranks for its gradient
 *                reductions, counted through the MPI profiling interface
 *                (the MPI_* functions below call PMPI_*), independently of
 *                acx's own bookkeeping, per collective acx calls on float
 *                data (MPI_FLOAT, or MPI_UINT16_T as 16-bit floats travel):
 *                  MPI_(I)allreduce of n            2 (p-1)/p n (a ring's, the
 *                                                   bandwidth-optimal amount)
 *                  MPI_(I)reduce_scatter_block of n (p-1) n
 *                  MPI_(I)alltoall(v)               the counts to other ranks
 *                  MPI_(I)allgatherv                own block x (p-1)
 *                all times the datatype's size. The 16-bit SUM of the MPI
 *                backend is an all-to-all plus an all-gatherv
 *                (collectives/mpi/coll_mpi.c); nothing else acx runs here
 *                uses those. Parameter all-gathers (MPI_(I)allgather, the
 *                sharded strategies' refresh after a step: param_dtype, not
 *                reduce_dtype) are counted apart, and so are reductions of
 *                other types (the per-step preemption agreement, item
 *                counts: control reductions).
 *   reduce_dtype the gradient elements reduced per step x the size of
 *                reduce_dtype (2 for bf16/fp16, 4 for fp32): the payload.
 *
 * Both byte counts are about the network between nodes, so this program
 * turns off the shared-memory all-reduce of one node (ACX_SHM_DISABLE=1,
 * collectives/mpi/coll_mpi_shm.h): on one machine, that path would carry
 * the gradients past MPI and the wire count would read 0.
 *
 * Leaves the arithmetic of acx to libacx (public API only). Launch with
 * mpirun; benchmarks/run-reduce-dtype.sh runs 2 and 4 ranks.
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include <acx/acx.h>

#define PROG       "acx-bench-reduce-dtype"
#define MAX_ROUNDS 1000
#define NUNITS     4

/* ---- counting what reaches MPI (profiling interface) ---- */

static int counting;
static long long red_calls, ctl_calls, gather_calls;
static double red_bytes, gather_bytes;

static int comm_size(MPI_Comm c) {
    int p = 1;
    PMPI_Comm_size(c, &p);
    return p;
}

/* A gradient collective sending `elems` elements of t to the other ranks. */
static void count_red(double elems, MPI_Datatype t) {
    if (!counting) return;
    if (t != MPI_FLOAT && t != MPI_UINT16_T) { /* not gradients: flags, counts */
        ctl_calls++;
        return;
    }
    int size = 0;
    PMPI_Type_size(t, &size);
    red_calls++;
    red_bytes += elems * size;
}

static double to_others(const int *n, MPI_Comm c) {
    int p = comm_size(c), me = 0;
    PMPI_Comm_rank(c, &me);
    double s = 0;
    for (int q = 0; q < p; q++)
        if (q != me) s += n[q];
    return s;
}

static double own_block(const void *s, int sn, const int *rn, MPI_Comm c) {
    int me = 0;
    PMPI_Comm_rank(c, &me);
    return (double)(s == MPI_IN_PLACE ? rn[me] : sn) * (comm_size(c) - 1);
}

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    int p = comm_size(c);
    count_red(2.0 * (p - 1) / p * n, t);
    return PMPI_Allreduce(s, r, n, t, op, c);
}
int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                   MPI_Request *q) {
    int p = comm_size(c);
    count_red(2.0 * (p - 1) / p * n, t);
    return PMPI_Iallreduce(s, r, n, t, op, c, q);
}
int MPI_Reduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    count_red((double)n * (comm_size(c) - 1), t);
    return PMPI_Reduce_scatter_block(s, r, n, t, op, c);
}
int MPI_Ireduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                              MPI_Request *q) {
    count_red((double)n * (comm_size(c) - 1), t);
    return PMPI_Ireduce_scatter_block(s, r, n, t, op, c, q);
}
int MPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                 MPI_Comm c) {
    count_red((double)sn * (comm_size(c) - 1), st);
    return PMPI_Alltoall(s, sn, st, r, rn, rt, c);
}
int MPI_Ialltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                  MPI_Comm c, MPI_Request *q) {
    count_red((double)sn * (comm_size(c) - 1), st);
    return PMPI_Ialltoall(s, sn, st, r, rn, rt, c, q);
}
int MPI_Alltoallv(const void *s, const int sn[], const int sd[], MPI_Datatype st, void *r,
                  const int rn[], const int rd[], MPI_Datatype rt, MPI_Comm c) {
    count_red(to_others(sn, c), st);
    return PMPI_Alltoallv(s, sn, sd, st, r, rn, rd, rt, c);
}
int MPI_Ialltoallv(const void *s, const int sn[], const int sd[], MPI_Datatype st, void *r,
                   const int rn[], const int rd[], MPI_Datatype rt, MPI_Comm c, MPI_Request *q) {
    count_red(to_others(sn, c), st);
    return PMPI_Ialltoallv(s, sn, sd, st, r, rn, rd, rt, c, q);
}
int MPI_Allgatherv(const void *s, int sn, MPI_Datatype st, void *r, const int rn[], const int d[],
                   MPI_Datatype rt, MPI_Comm c) {
    count_red(own_block(s, sn, rn, c), rt);
    return PMPI_Allgatherv(s, sn, st, r, rn, d, rt, c);
}
int MPI_Iallgatherv(const void *s, int sn, MPI_Datatype st, void *r, const int rn[], const int d[],
                    MPI_Datatype rt, MPI_Comm c, MPI_Request *q) {
    count_red(own_block(s, sn, rn, c), rt);
    return PMPI_Iallgatherv(s, sn, st, r, rn, d, rt, c, q);
}
/* parameter all-gathers: reported apart */
static void count_gather(const void *s, int sn, int rn, MPI_Datatype rt, MPI_Comm c) {
    if (!counting) return;
    int size = 0;
    PMPI_Type_size(rt, &size);
    gather_calls++;
    gather_bytes += (double)(s == MPI_IN_PLACE ? rn : sn) * (comm_size(c) - 1) * size;
}
int MPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                  MPI_Comm c) {
    count_gather(s, sn, rn, rt, c);
    return PMPI_Allgather(s, sn, st, r, rn, rt, c);
}
int MPI_Iallgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                   MPI_Comm c, MPI_Request *q) {
    count_gather(s, sn, rn, rt, c);
    return PMPI_Iallgather(s, sn, st, r, rn, rt, c, q);
}

/* ---- options ---- */

typedef struct options {
    long numel;
    int steps, warmup, rounds, strategy, half; /* half: ACX_REDUCE_BF16 or ACX_REDUCE_FP16 */
    const char *json;
} options_t;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpirun -np N " PROG " [options]\n"
            "Time a data-parallel step whose gradients are reduced in fp32 and in bf16\n"
            "(reduce_dtype), alternating in one run, and count the bytes sent to other ranks.\n\n"
            "  --numel N        gradient elements (default 4194304 = 16 MiB of fp32), in %d units\n"
            "  --steps K        timed steps per dtype per round (default 20)\n"
            "  --warmup W       untimed steps before them (default 3)\n"
            "  --rounds R       rounds (default 5)\n"
            "  --strategy S     no_shard | shard_grad_op | full_shard (default no_shard)\n"
            "  --half D         bf16 | fp16: the 16-bit reduce_dtype (default bf16)\n"
            "  --json FILE      write the numbers as JSON (rank 0)\n",
            NUNITS);
}

static int parse_long(const char *s, long lo, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > 2000000000L) return -1;
    *out = v;
    return 0;
}

/* Returns 0 to run, 1 after --help, -1 on a bad argument. */
static int parse_options(int argc, char **argv, options_t *o) {
    *o = (options_t){.numel = 4194304,
                     .steps = 20,
                     .warmup = 3,
                     .rounds = 5,
                     .strategy = ACX_NO_SHARD,
                     .half = ACX_REDUCE_BF16};
    static const struct option longopts[] = {{"numel", required_argument, 0, 'n'},
                                             {"steps", required_argument, 0, 'k'},
                                             {"warmup", required_argument, 0, 'w'},
                                             {"rounds", required_argument, 0, 'r'},
                                             {"strategy", required_argument, 0, 's'},
                                             {"half", required_argument, 0, 'H'},
                                             {"json", required_argument, 0, 'j'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c, idx = 0;
    long v;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        switch (c) {
        case 'n':
            if (parse_long(optarg, NUNITS, &v)) goto bad;
            o->numel = v;
            break;
        case 'k':
            if (parse_long(optarg, 1, &v)) goto bad;
            o->steps = (int)v;
            break;
        case 'w':
            if (parse_long(optarg, 0, &v)) goto bad;
            o->warmup = (int)v;
            break;
        case 'r':
            if (parse_long(optarg, 1, &v) || v > MAX_ROUNDS) goto bad;
            o->rounds = (int)v;
            break;
        case 's':
            if (strcmp(optarg, "no_shard") == 0)
                o->strategy = ACX_NO_SHARD;
            else if (strcmp(optarg, "shard_grad_op") == 0)
                o->strategy = ACX_SHARD_GRAD_OP;
            else if (strcmp(optarg, "full_shard") == 0)
                o->strategy = ACX_FULL_SHARD;
            else
                goto bad;
            break;
        case 'H':
            if (strcmp(optarg, "bf16") == 0)
                o->half = ACX_REDUCE_BF16;
            else if (strcmp(optarg, "fp16") == 0)
                o->half = ACX_REDUCE_FP16;
            else
                goto bad;
            break;
        case 'j': o->json = optarg; break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
        continue;
    bad:
        fprintf(stderr, PROG ": invalid value '%s' for --%s\n", optarg, longopts[idx].name);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* ---- one timed block ---- */

/* Each unit holds one [rows x cols] parameter, about numel / NUNITS elements
 * in rows of 256. */
static void unit_shape(long numel, int64_t *rows_p, int64_t *cols_p) {
    int64_t per = numel / NUNITS;
    int64_t rows = per / 256 > 0 ? per / 256 : 1;
    *rows_p = rows;
    *cols_p = per / rows;
}

typedef struct result {
    double ms_per_step;  /* slowest rank */
    double wire_bytes;   /* gradient bytes sent per step, mean over ranks */
    double calls;        /* gradient collectives per step (this rank) */
    double ctl_calls;    /* other reductions per step */
    double gather_bytes; /* parameter all-gather bytes sent per step, mean over ranks */
} result_t;

static const char *dtype_label(int d) {
    return d == ACX_REDUCE_FP32 ? "fp32" : d == ACX_REDUCE_BF16 ? "bf16" : "fp16";
}

/* Build an accelerator with reduce_dtype `dtype`, run warmup + timed steps,
 * tear it down. Prints acx's message and returns nonzero on failure (on
 * every rank: acx's errors here are collective). */
static int run_block(const options_t *o, int dtype, result_t *res) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.sharding_strategy = o->strategy;
    cfg.reduce_dtype = dtype;
    acx_accelerator_t *acc = NULL;
    acx_model_t *m;
    acx_unit_t *u[NUNITS];
    acx_param_t *p[NUNITS];
    acx_optimizer_t *opt;
    acx_status_t st;
    char name[32];
    int64_t rows, cols;
    unit_shape(o->numel, &rows, &cols);
#define TRYB(call)                                                                                 \
    do {                                                                                           \
        if ((st = (call)) != ACX_OK) goto err;                                                     \
    } while (0)
    TRYB(acx_init(NULL, NULL, &cfg, &acc));
    if (acx_get_config(acc)->reduce_dtype != dtype) {
        fprintf(stderr, PROG ": reduce_dtype %s did not take effect\n", dtype_label(dtype));
        goto err_quiet;
    }
    TRYB(acx_model_create(acc, &m));
    for (int i = 0; i < NUNITS; i++) {
        snprintf(name, sizeof name, "layer%d", i);
        TRYB(acx_model_add_unit(m, name, &u[i]));
        snprintf(name, sizeof name, "layer%d.weight", i);
        TRYB(acx_unit_add_param(u[i], name, 2, (int64_t[]){rows, cols},
                                ACX_INIT_SPEC_UNIFORM(-0.01, 0.01), &p[i]));
    }
    acx_sgd_hparams_t hp = {.lr = 1e-6};
    TRYB(acx_sgd_create(m, &hp, &opt));
    TRYB(acx_prepare(acc, m, opt, NULL));
    int rank = acx_rank(acc);
    double t0 = 0;
    for (int s = 0; s < o->warmup + o->steps; s++) {
        if (s == o->warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            red_calls = ctl_calls = gather_calls = 0;
            red_bytes = gather_bytes = 0;
            counting = 1;
            t0 = MPI_Wtime();
        }
        TRYB(acx_accumulate_begin(acc));
        for (int i = NUNITS - 1; i >= 0; i--) { /* backward order */
            TRYB(acx_unit_acquire(u[i]));
            float *g = acx_param_grad(p[i]);
            if (g == NULL) {
                st = ACX_ERR_INTERNAL;
                goto err;
            }
            /* a gradient that differs per rank, step and element */
            float v = 1e-3f * (float)(rank + 1) + 1e-5f * (float)s;
            for (int64_t e = 0; e < rows * cols; e++)
                g[e] += v * (float)(e & 15);
            TRYB(acx_unit_grads_ready(u[i]));
            TRYB(acx_unit_release(u[i]));
        }
        TRYB(acx_backward_end(acc));
        TRYB(acx_optimizer_step(opt));
        TRYB(acx_optimizer_zero_grad(opt));
        TRYB(acx_accumulate_end(acc));
    }
    double dt = MPI_Wtime() - t0;
    counting = 0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    res->ms_per_step = 1e3 * dt / o->steps;
    /* uneven block splits make ranks send a little more or less: the mean */
    double bytes[2] = {red_bytes, gather_bytes};
    MPI_Allreduce(MPI_IN_PLACE, bytes, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    res->wire_bytes = bytes[0] / world / o->steps;
    res->gather_bytes = bytes[1] / world / o->steps;
    res->calls = (double)red_calls / o->steps;
    res->ctl_calls = (double)ctl_calls / o->steps;
    acx_finalize(acc);
    return 0;
err:
    fprintf(stderr, PROG ": %s\n", acx_last_error());
err_quiet:
    counting = 0;
    if (acc) acx_finalize(acc);
    return 1;
#undef TRYB
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *x, int n) {
    double s[MAX_ROUNDS];
    memcpy(s, x, (size_t)n * sizeof *x);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

int main(int argc, char **argv) {
    setenv("ACX_SHM_DISABLE", "1", 1); /* the header comment says why */
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    options_t o;
    int pr = parse_options(argc, argv, &o);
    if (pr != 0) {
        MPI_Finalize();
        return pr > 0 ? 0 : 2;
    }
    const int dt[2] = {ACX_REDUCE_FP32, o.half};
    static double ms[2][MAX_ROUNDS];
    result_t last[2] = {{0}};
    int64_t rows, cols;
    unit_shape(o.numel, &rows, &cols);
    int64_t numel = rows * cols * NUNITS;
    if (rank == 0) {
        printf(PROG ": %d rank(s), %s, %lld gradient elements in %d units, %d timed steps x %d "
                    "rounds per dtype\n",
               world,
               o.strategy == ACX_NO_SHARD        ? "no_shard"
               : o.strategy == ACX_SHARD_GRAD_OP ? "shard_grad_op"
                                                 : "full_shard",
               (long long)numel, NUNITS, o.steps, o.rounds);
        printf("round  reduce_dtype  ms/step   wire MiB/step  grad collectives/step  "
               "control reductions/step  reduce_dtype MiB/step  param gather MiB/step\n");
    }
    for (int r = 0; r < o.rounds; r++)
        for (int j = 0; j < 2; j++) {
            int d = (r % 2 == 0) ? j : 1 - j; /* alternate which goes first */
            result_t res;
            if (run_block(&o, dt[d], &res) != 0) {
                MPI_Finalize();
                return 1;
            }
            ms[d][r] = res.ms_per_step;
            last[d] = res;
            if (rank == 0)
                printf("%5d  %-12s  %7.3f   %13.3f  %21.1f  %23.1f  %21.3f  %21.3f\n", r,
                       dtype_label(dt[d]), res.ms_per_step, res.wire_bytes / 1048576.0, res.calls,
                       res.ctl_calls,
                       (double)numel * (dt[d] == ACX_REDUCE_FP32 ? 4 : 2) / 1048576.0,
                       res.gather_bytes / 1048576.0);
        }
    double m32 = median(ms[0], o.rounds), m16 = median(ms[1], o.rounds);
    double b32 = last[0].wire_bytes, b16 = last[1].wire_bytes;
    if (rank == 0) {
        printf("\nmedian ms/step: fp32 %.3f, %s %.3f\n", m32, dtype_label(o.half), m16);
        printf("wire bytes per step and rank: fp32 %.0f, %s %.0f (ratio %.3f)\n", b32,
               dtype_label(o.half), b16, b32 > 0 ? b16 / b32 : 0.0);
        printf("reduce_dtype bytes per step: fp32 %lld, %s %lld (ratio 0.500)\n",
               (long long)numel * 4, dtype_label(o.half), (long long)numel * 2);
        printf("summary: np=%d fp32_ms=%.3f %s_ms=%.3f time_ratio=%.3f wire_bytes_ratio=%.3f "
               "dtype_bytes_ratio=0.500\n",
               world, m32, dtype_label(o.half), m16, m32 > 0 ? m16 / m32 : 0.0,
               b32 > 0 ? b16 / b32 : 0.0);
        if (o.json) {
            FILE *f = fopen(o.json, "w");
            if (f == NULL) {
                fprintf(stderr, PROG ": cannot write '%s'\n", o.json);
            } else {
                fprintf(f,
                        "{\"benchmark\": \"%s\", \"world_size\": %d, \"numel\": %lld, "
                        "\"steps\": %d, \"rounds\": %d,\n \"fp32\": {\"median_ms_per_step\": %.4f, "
                        "\"wire_bytes_per_step\": %.0f, \"dtype_bytes_per_step\": %lld},\n"
                        " \"%s\": {\"median_ms_per_step\": %.4f, \"wire_bytes_per_step\": %.0f, "
                        "\"dtype_bytes_per_step\": %lld},\n \"time_ratio\": %.4f}\n",
                        PROG, world, (long long)numel, o.steps, o.rounds, m32, b32,
                        (long long)numel * 4, dtype_label(o.half), m16, b16, (long long)numel * 2,
                        m32 > 0 ? m16 / m32 : 0.0);
                fclose(f);
            }
        }
    }
    MPI_Finalize();
    return 0;
}

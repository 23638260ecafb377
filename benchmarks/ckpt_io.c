/*
 * benchmarks/ckpt_io.c — acx-bench-ckpt: the time of one checkpoint save or
 * one checkpoint load (acx_save_state / acx_load_state) of a model whose
 * parameters total --size-mb MiB, on however many ranks it is started with.
 *
 * What is saved: parameters only — a model of --params float32 matrices
 * [rows x 4096], each its own unit, with no optimizer and no data loader, so
 * the file is the parameters plus a few KiB of attributes, /rng and
 * /config. The byte count printed is the file's size on disk. Under
 * NO_SHARD (the default) every rank holds all rows and writes the 1/N slice
 * the dim-0 rule gives it; on load the ranks of one node each read all rows
 * (the node's page cache fetches them from the disk once), ranks on
 * several nodes split the reading between the nodes and all-gather.
 * --strategy full_shard: each rank saves and loads only the rows it owns.
 *
 * One phase per run, because the disk caches must be dropped between a save
 * and the load that reads it back (benchmarks/run-ckpt-io.sh does that, runs
 * dd on the same bytes in the same directory for the physical limit, and
 * prints the ratios):
 *
 *   --phase save  seed 1: save DIR/bench.h5; record sample values of every
 *                 parameter in DIR/bench.h5.samples (hex floats)
 *   --phase load  seed 2 (different initial values): load DIR/bench.h5,
 *                 strict, under this run's world size (any; the N->M
 *                 reshard when it differs from the saver's), then check the
 *                 samples bit for bit
 *
 *   --drop-caches  right before the timed call (after the model exists):
 *                 sync and `echo 3 > /proc/sys/vm/drop_caches` (one rank
 *                 per node; needs root). The moment matters on a VM whose
 *                 balloon reports free memory to the host (virtio-balloon
 *                 free page reporting, as on this project's build machines):
 *                 memory freed by a drop and taken again within a moment is
 *                 cheap, memory the host has taken back costs a hypervisor
 *                 fault at its first touch (zeroing 1 GiB of fresh huge
 *                 pages: 1.2-1.5 s instead of ~0.1 s). Dropped before the
 *                 process started, the page cache of the load comes after
 *                 the model's 1 GiB of fresh memory and the kernel's copy
 *                 into the program runs several times slower (a plain pread
 *                 loop into a 1 GiB huge-page buffer: 1.1-2.5 s per GiB
 *                 against 0.48-0.56 s into small pages and dd's 0.48-0.54 s;
 *                 the same loop after a drop in its own process: 0.58-0.77 s
 *                 against a dd-like read in that process 0.50-1.17 s). dd
 *                 runs right after a drop of the previous step's file, so
 *                 the benchmark does the same.
 *
 * Output, one line on rank 0 (the script parses it):
 *   ckpt-io PHASE np=N bytes=B seconds=S MiB/s=X params=KxRxC check=ok
 * Exit status 0, 1 (an acx call failed or a sample differs), 2 (usage).
 * The time is rank 0's MPI_Wtime from a barrier before the call to a
 * barrier after it (the call is collective; it ends on every rank together).
 *
 * Leaves to others: the cache dropping and dd (the script), the file itself.
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <acx/acx.h>

#define COLS       4096
#define SAMPLES    16 /* per parameter: first, last and 14 spread between */
#define MAX_PARAMS 64

typedef struct options {
    const char *phase, *dir;
    double size_mb;
    int params;
    int strategy;
    int drop_caches;
} options_t;

static int usage_error(int rank, const char *fmt, const char *arg) {
    if (rank == 0) {
        fprintf(stderr, "acx-bench-ckpt: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\nusage: acx-bench-ckpt --phase save|load --dir DIR [--size-mb M] "
                        "[--params K] [--strategy no_shard|full_shard] [--drop-caches]\n");
    }
    return 2;
}

static int parse(int argc, char **argv, int rank, options_t *o) {
    *o = (options_t){.size_mb = 1024, .params = 4, .strategy = ACX_NO_SHARD};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (rank == 0)
                printf("usage: acx-bench-ckpt --phase save|load --dir DIR [--size-mb M] "
                       "[--params K] [--strategy no_shard|full_shard] [--drop-caches]\n"
                       "  --phase save   save DIR/bench.h5 (seed 1) and its sample values\n"
                       "  --phase load   load DIR/bench.h5 (seed 2, any world size), check them\n"
                       "  --size-mb M    parameter bytes in MiB (default 1024)\n"
                       "  --params K     number of parameters, [rows x %d] each (default 4)\n"
                       "  --strategy S   no_shard (default) or full_shard\n"
                       "  --drop-caches  drop the page cache right before the timed call (root)\n"
                       "Normally run by benchmarks/run-ckpt-io.sh.\n",
                       COLS);
            return -1;
        }
        if (strcmp(a, "--drop-caches") == 0) {
            o->drop_caches = 1;
            continue;
        }
        if (i + 1 >= argc) return usage_error(rank, "option '%s' needs a value", a);
        const char *v = argv[++i];
        char *end = NULL;
        if (strcmp(a, "--phase") == 0) {
            if (strcmp(v, "save") != 0 && strcmp(v, "load") != 0)
                return usage_error(rank, "invalid value '%s' for --phase (save or load)", v);
            o->phase = v;
        } else if (strcmp(a, "--dir") == 0) {
            o->dir = v;
        } else if (strcmp(a, "--size-mb") == 0) {
            o->size_mb = strtod(v, &end);
            if (*end != '\0' || !(o->size_mb > 0))
                return usage_error(rank, "invalid value '%s' for --size-mb", v);
        } else if (strcmp(a, "--params") == 0) {
            long k = strtol(v, &end, 10);
            if (*end != '\0' || k < 1 || k > MAX_PARAMS)
                return usage_error(rank, "invalid value '%s' for --params (1 to 64)", v);
            o->params = (int)k;
        } else if (strcmp(a, "--strategy") == 0) {
            if (strcmp(v, "full_shard") == 0)
                o->strategy = ACX_FULL_SHARD;
            else if (strcmp(v, "no_shard") == 0)
                o->strategy = ACX_NO_SHARD;
            else
                return usage_error(rank, "invalid value '%s' for --strategy", v);
        } else {
            return usage_error(rank, "unknown option '%s'", a);
        }
    }
    if (o->phase == NULL) return usage_error(rank, "%s", "missing --phase save|load");
    if (o->dir == NULL) return usage_error(rank, "%s", "missing --dir DIR");
    return 0;
}

/* A failed acx call: its message on stderr, and every rank stops (the
 * calls are collective, so they all failed alike). */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        acx_status_t st_ = (call);                                                                 \
        if (st_ != ACX_OK) {                                                                       \
            if (rank == 0) /* collective calls: every rank has the same error */                   \
                fprintf(stderr, "acx-bench-ckpt: %s failed: %s\n", #call, acx_last_error());       \
            rc = 1;                                                                                \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* sync, then drop the page cache, dentries and inodes (one rank per node,
 * the others wait). 0 on success; -1 with a message on stderr. Collective. */
static int drop_caches(int rank) {
    MPI_Comm node;
    int local = 0, ok = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    MPI_Barrier(MPI_COMM_WORLD); /* every rank's writes are in the cache */
    if (local == 0) {
        sync();
        FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
        int failed = f == NULL;
        if (f != NULL) {
            failed = fputs("3", f) == EOF;
            failed |= fclose(f) != 0;
        }
        if (failed) {
            fprintf(stderr,
                    "acx-bench-ckpt: cannot drop the page cache "
                    "(/proc/sys/vm/drop_caches: %s; root needed)\n",
                    strerror(errno));
            ok = 0;
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return ok ? 0 : -1;
}

/* Sample values of every parameter: SAMPLES elements at fixed indices,
 * [params x SAMPLES]. Collective (acquire gathers a unit's shards). */
static acx_status_t take_samples(acx_model_t *m, acx_unit_t **units, int k, float *out) {
    for (int i = 0; i < k; i++) {
        acx_param_t *p = acx_model_param(m, i);
        acx_status_t st = acx_unit_acquire(units[i]);
        if (st != ACX_OK) return st;
        const float *w = acx_param_data(p);
        int64_t n = acx_param_numel(p);
        for (int s = 0; s < SAMPLES; s++) {
            int64_t idx = s == SAMPLES - 1 ? n - 1 : (int64_t)s * (n / (SAMPLES - 1)) + s;
            out[i * SAMPLES + s] = w != NULL ? w[idx % n] : NAN;
        }
        if ((st = acx_unit_release(units[i])) != ACX_OK) return st;
    }
    return ACX_OK;
}

int main(int argc, char **argv) {
    int rc = 0, rank = 0, np = 1;
    options_t o;
    acx_accelerator_t *acc = NULL;
    acx_model_t *m = NULL;
    acx_unit_t *units[MAX_PARAMS];
    float samples[MAX_PARAMS * SAMPLES], before[MAX_PARAMS * SAMPLES];
    char file[4096], sfile[4200];

    /* the options decide the seed, so parse before acx_init (acx removes
     * only its own --acx-* options; ours are left alone) */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if ((rc = parse(argc, argv, rank, &o)) != 0) {
        MPI_Finalize();
        return rc < 0 ? 0 : rc;
    }
    int save = strcmp(o.phase, "save") == 0;
    snprintf(file, sizeof file, "%s/bench.h5", o.dir);
    snprintf(sfile, sizeof sfile, "%s.samples", file);

    int64_t rows = (int64_t)(o.size_mb * 1048576.0 / (4.0 * COLS * o.params));
    if (rows < 1) {
        char v[32];
        snprintf(v, sizeof v, "%g", o.size_mb);
        rc = usage_error(rank, "--size-mb %s is too small for one row per parameter", v);
        MPI_Finalize();
        return rc;
    }

    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.sharding_strategy = o.strategy;
    cfg.seed = save ? 1 : 2;
    cfg.project_dir = o.dir;
    TRY(acx_init(&argc, &argv, &cfg, &acc));
    TRY(acx_model_create(acc, &m));
    for (int i = 0; i < o.params; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer%d", i);
        TRY(acx_model_add_unit(m, name, &units[i]));
        snprintf(name, sizeof name, "layer%d.weight", i);
        acx_param_t *p;
        TRY(acx_unit_add_param(units[i], name, 2, (int64_t[]){rows, COLS},
                               ACX_INIT_SPEC_UNIFORM(-1.0, 1.0), &p));
    }
    TRY(acx_prepare(acc, m, NULL, NULL));

    double t0 = 0, t1 = 0;
    int ok = 1;
    if (save) {
        TRY(take_samples(m, units, o.params, samples));
        if (o.drop_caches && drop_caches(rank) != 0) {
            rc = 1;
            goto out;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        TRY(acx_save_state(acc, file));
        MPI_Barrier(MPI_COMM_WORLD);
        t1 = MPI_Wtime();
        if (rank == 0) {
            FILE *f = fopen(sfile, "w");
            if (f == NULL) {
                fprintf(stderr, "acx-bench-ckpt: cannot write '%s': %s\n", sfile, strerror(errno));
                ok = 0;
            } else {
                for (int i = 0; i < o.params * SAMPLES; i++)
                    fprintf(f, "%a\n", samples[i]);
                fclose(f);
            }
        }
    } else {
        TRY(take_samples(m, units, o.params, before));
        if (o.drop_caches && drop_caches(rank) != 0) {
            rc = 1;
            goto out;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        TRY(acx_load_state(acc, file, 1));
        MPI_Barrier(MPI_COMM_WORLD);
        t1 = MPI_Wtime();
        TRY(take_samples(m, units, o.params, samples));
        if (rank == 0) {
            /* bit-exact against the saver's values; and the load must have
             * changed them (this run's initial values come from seed 2) */
            FILE *f = fopen(sfile, "r");
            int changed = 0;
            for (int i = 0; i < o.params * SAMPLES && ok; i++) {
                float want;
                if (f == NULL || fscanf(f, "%a", &want) != 1) {
                    fprintf(stderr, "acx-bench-ckpt: cannot read sample %d from '%s'\n", i, sfile);
                    ok = 0;
                } else if (memcmp(&want, &samples[i], sizeof want) != 0) {
                    fprintf(stderr, "acx-bench-ckpt: parameter %d sample %d: loaded %a, saved %a\n",
                            i / SAMPLES, i % SAMPLES, samples[i], want);
                    ok = 0;
                }
                changed += memcmp(&before[i], &samples[i], sizeof want) != 0;
            }
            if (f != NULL) fclose(f);
            if (ok && changed == 0) {
                fprintf(stderr,
                        "acx-bench-ckpt: the load left every sample at its initial value\n");
                ok = 0;
            }
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        struct stat st;
        long long bytes = stat(file, &st) == 0 ? (long long)st.st_size : -1;
        double sec = t1 - t0;
        printf("ckpt-io %s np=%d bytes=%lld seconds=%.4f MiB/s=%.1f params=%dx%lldx%d check=%s\n",
               o.phase, np, bytes, sec, sec > 0 ? (double)bytes / 1048576.0 / sec : 0.0, o.params,
               (long long)rows, COLS, ok ? "ok" : "FAILED");
        fflush(stdout);
    }
    if (!ok) rc = 1;
out:
    if (acc != NULL) acx_finalize(acc);
    MPI_Finalize();
    return rc;
}

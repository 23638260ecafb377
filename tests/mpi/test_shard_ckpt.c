/*
 * tests/mpi/test_shard_ckpt.c — a checkpoint saved under any sharding
 * strategy on N ranks loads under any strategy on M ranks, with the
 * parameters and the optimizer state where they belong.
 *
 * The model is tests/mpi/shard_net.h's (row counts that leave ranks
 * empty), trained with AdamW. tests/mpi/shard_ckpt.test runs np = 1, 2, 3,
 * 4 in this order, all in one directory (DIR = tests/tmp/shard_ckpt, emptied
 * by the np = 1 run):
 *
 *   save  under every strategy (no_shard, shard_grad_op, full_shard,
 *         hybrid_shard with ranks_per_node 2 on 4 ranks, else 1): 2 steps,
 *         acx_save_state(DIR/np<N>_<strategy>.h5). Rank 0 then reads the
 *         file with HDF5 itself: /model/<param> must be the gathered
 *         parameters bitwise, /optimizer/exp_avg and exp_avg_sq the double
 *         reference's moments (relative 1e-5), the step attributes 2. The
 *         file's full values go to DIR/np<N>_<strategy>.bin: the expected
 *         state for every later load. acx_model_save_weights writes
 *         DIR/np<N>_<strategy>_weights.h5 too, whose /<param> datasets
 *         must also be the gathered parameters bitwise (every row written
 *         once, by the rank the sharding plan names, whatever the strategy).
 *   load  every checkpoint in DIR saved at this world size or a smaller one
 *         (before, in this order), under every strategy; then, in a second
 *         pass (np = 1, 2, 3 with --load-larger: no saving), every checkpoint
 *         of a larger world size, so every N -> M pair of 1..4 is loaded.
 *         The gathered parameters must
 *         be the saved ones bitwise; saved again from this layout, the file
 *         must hold the same parameters and moments bitwise; one more step
 *         must equal the double reference continued from the saved state
 *         (relative 1e-5), which fails if a moment, a row or the step count
 *         (bias correction) was restored wrong.
 *
 * Options (after --load-larger, if given): --dir NAME uses tests/tmp/NAME
 * instead (emptied by the caller); --nodes K runs on K real nodes
 * (tests/nodes/ckpt.test, across the namespace nodes of scripts/nodes-up):
 * every accelerator must see acx_num_nodes == K, and hybrid_shard takes
 * the real nodes (ranks_per_node unset) instead of simulated ones.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>

#include "tests/acx_test_mpi.h"
#include "tests/mpi/shard_net.h"

#define SAVE_STEPS 2
#define MAX_CKPTS  32
#define TOL        1e-5

static int rank, world;
static char dir[1024];
static int load_larger; /* --load-larger: only load checkpoints of larger world sizes */
static int real_nodes;  /* --nodes K: the job spans K real nodes (0: one machine, simulated) */

/* ---- strategies ---- */

static const char *const strat_name[4] = {"no_shard", "shard_grad_op", "full_shard",
                                          "hybrid_shard"};

static sn_run_cfg_t run_cfg(int strategy) {
    return (sn_run_cfg_t){.strategy = strategy,
                          .ranks_per_node = strategy == ACX_HYBRID_SHARD && real_nodes == 0
                                                ? (world == 4 ? 2 : 1)
                                                : 0,
                          .sgd = 0,
                          .accum = 1,
                          .fwd_prefetch = -1,
                          .bwd_prefetch = -1,
                          .limit_all_gathers = -1};
}

/* ---- the expected state, next to each checkpoint ---- */

typedef struct saved {
    char magic[8]; /* "shckpt1" */
    int32_t world, strategy;
    int64_t step;
    float p[SN_NP], exp_avg[SN_NP], exp_avg_sq[SN_NP];
} saved_t;

static int write_saved(const char *path, const saved_t *s) {
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL) return -1;
    int ok = fwrite(s, sizeof *s, 1, f) == 1;
    if (fclose(f) != 0 || !ok) return -1;
    return rename(tmp, path);
}

static int read_saved(const char *path, saved_t *s) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return -1;
    int ok = fread(s, sizeof *s, 1, f) == 1;
    fclose(f);
    return ok && memcmp(s->magic, "shckpt1", 8) == 0 ? 0 : -1;
}

/* ---- reading a checkpoint with HDF5 directly (rank 0) ---- */

static int read_floats(hid_t f, const char *path, float *out, int64_t n) {
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    if (d < 0) {
        fprintf(stderr, "\ncheckpoint has no dataset %s\n", path);
        return -1;
    }
    hid_t sp = H5Dget_space(d);
    int ok = H5Sget_simple_extent_npoints(sp) == n &&
             H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0;
    if (!ok) fprintf(stderr, "\ncannot read %s as %lld floats\n", path, (long long)n);
    H5Sclose(sp);
    H5Dclose(d);
    return ok ? 0 : -1;
}

static int read_i64_attr(hid_t f, const char *obj, const char *name, int64_t *v) {
    hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return -1;
    herr_t e = H5Aread(a, H5T_NATIVE_INT64, v);
    H5Aclose(a);
    return e < 0 ? -1 : 0;
}

static int read_str_attr(hid_t f, const char *obj, const char *name, char *buf, size_t n) {
    hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t t = H5Aget_type(a);
    int ok = H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) && H5Tget_size(t) < n;
    if (ok) {
        memset(buf, 0, n);
        ok = H5Aread(a, t, buf) >= 0;
    }
    H5Tclose(t);
    H5Aclose(a);
    return ok ? 0 : -1;
}

/* Read the parameters and AdamW moments a checkpoint holds into s (rank 0
 * only; MPI-IO not needed to read). Returns 0 on success. */
static int read_checkpoint(const char *path, saved_t *s, int64_t *step_p, int64_t *opt_step_p,
                           char *strategy, size_t strategy_len) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "\ncannot open %s\n", path);
        return -1;
    }
    int bad = 0;
    char name[256];
    for (int q = 0; q < SN_NPAR && !bad; q++) {
        int64_t n = sn_off[q + 1] - sn_off[q];
        snprintf(name, sizeof name, "/model/%s", sn_par[q].name);
        bad |= read_floats(f, name, s->p + sn_off[q], n);
        snprintf(name, sizeof name, "/optimizer/exp_avg/%s", sn_par[q].name);
        bad |= read_floats(f, name, s->exp_avg + sn_off[q], n);
        snprintf(name, sizeof name, "/optimizer/exp_avg_sq/%s", sn_par[q].name);
        bad |= read_floats(f, name, s->exp_avg_sq + sn_off[q], n);
    }
    if (!bad && (read_i64_attr(f, "/", "step", step_p) != 0 ||
                 read_i64_attr(f, "/optimizer", "step", opt_step_p) != 0 ||
                 read_str_attr(f, "/", "sharding_strategy", strategy, strategy_len) != 0)) {
        fprintf(stderr, "\n%s: cannot read the step attributes or sharding_strategy\n", path);
        bad = 1;
    }
    H5Fclose(f);
    return bad ? -1 : 0;
}

/* The weights file (acx_model_save_weights: /<param name> per parameter)
 * holds exactly the gathered parameters. Rank 0. Returns 0 when it does. */
static int check_weights(const char *path, const float *gathered) {
    float w[SN_NP];
    char name[256];
    int bad = 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "\ncannot open %s\n", path);
        return -1;
    }
    for (int q = 0; q < SN_NPAR && !bad; q++) {
        snprintf(name, sizeof name, "/%s", sn_par[q].name);
        bad |= read_floats(f, name, w + sn_off[q], sn_off[q + 1] - sn_off[q]);
    }
    H5Fclose(f);
    if (!bad && memcmp(w, gathered, sizeof w) != 0) {
        fprintf(stderr, "\n%s: the weights differ from the gathered parameters (relative %.3g)\n",
                path, sn_rel_ff(w, gathered, SN_NP));
        bad = 1;
    }
    return bad ? -1 : 0;
}

/* ---- training ---- */

static acx_status_t train_steps(sn_net_t *net, int64_t until) {
    acx_status_t st;
    while (acx_step(net->acc) < until) {
        int64_t s = acx_step(net->acc);
        if ((st = acx_accumulate_begin(net->acc)) != ACX_OK) return st;
        if ((st = sn_micro_step(net, s, 0, 1)) != ACX_OK) return st;
        if ((st = acx_backward_end(net->acc)) != ACX_OK) return st;
        if ((st = acx_optimizer_step(net->opt)) != ACX_OK) return st;
        if ((st = acx_optimizer_zero_grad(net->opt)) != ACX_OK) return st;
        if ((st = acx_accumulate_end(net->acc)) != ACX_OK) return st;
    }
    return ACX_OK;
}

/* ---- save ---- */

static int save_case(int strategy) {
    sn_net_t net = {0};
    sn_run_cfg_t rc = run_cfg(strategy);
    char h5[1200], bin[1200], weights[1200];
    float gathered[SN_NP];
    snprintf(h5, sizeof h5, "%s/np%d_%s.h5", dir, world, strat_name[strategy]);
    snprintf(weights, sizeof weights, "%s/np%d_%s_weights.h5", dir, world, strat_name[strategy]);
    snprintf(bin, sizeof bin, "%s/np%d_%s.bin", dir, world, strat_name[strategy]);
    CHECK_OK(sn_open(&net, &rc));
    CHECK(real_nodes == 0 || acx_num_nodes(net.acc) == real_nodes);
    CHECK_OK(train_steps(&net, SAVE_STEPS));
    CHECK_OK(sn_gather(&net, gathered));
    CHECK_OK(acx_save_state(net.acc, h5));
    CHECK_OK(acx_model_save_weights(net.m, weights));
    sn_close(&net);

    int bad = 0;
    if (rank == 0) {
        saved_t s = {.magic = "shckpt1", .world = world, .strategy = strategy, .step = SAVE_STEPS};
        int64_t step = -1, opt_step = -1;
        char sname[64];
        sn_ref_t ref = {0};
        float init[SN_NP];
        bad = read_checkpoint(h5, &s, &step, &opt_step, sname, sizeof sname) != 0;
        if (!bad && (step != SAVE_STEPS || opt_step != SAVE_STEPS ||
                     strcmp(sname, strat_name[strategy]) != 0)) {
            fprintf(stderr,
                    "\n%s: step %lld, optimizer step %lld, strategy '%s'; expected %d, %d, '%s'\n",
                    h5, (long long)step, (long long)opt_step, sname, SAVE_STEPS, SAVE_STEPS,
                    strat_name[strategy]);
            bad = 1;
        }
        if (!bad && memcmp(s.p, gathered, sizeof gathered) != 0) {
            fprintf(stderr, "\n%s: /model differs from the gathered parameters (relative %.3g)\n",
                    h5, sn_rel_ff(s.p, gathered, SN_NP));
            bad = 1;
        }
        if (!bad) bad = check_weights(weights, gathered) != 0;
        /* the double reference of the same 2 steps */
        sn_expected_init(init);
        for (int e = 0; e < SN_NP; e++)
            ref.p[e] = init[e];
        for (int64_t t = 0; t < SAVE_STEPS; t++) {
            double g[SN_NP];
            sn_ref_grad(ref.p, t, g);
            sn_ref_step(&ref, g, 0);
        }
        char what[1400];
        snprintf(what, sizeof what, "%s /model", h5);
        bad = bad || sn_compare_fd(what, s.p, ref.p, TOL, NULL);
        snprintf(what, sizeof what, "%s /optimizer/exp_avg", h5);
        bad = bad || sn_compare_fd(what, s.exp_avg, ref.m, TOL, NULL);
        snprintf(what, sizeof what, "%s /optimizer/exp_avg_sq", h5);
        bad = bad || sn_compare_fd(what, s.exp_avg_sq, ref.v, TOL, NULL);
        if (!bad && write_saved(bin, &s) != 0) {
            fprintf(stderr, "\ncannot write %s\n", bin);
            bad = 1;
        }
    }
    return bad;
error:
    sn_close(&net);
    return 1;
}

/* ---- load ---- */

static int load_case(const char *stem, int strategy) {
    sn_net_t net = {0};
    sn_run_cfg_t rc = run_cfg(strategy);
    char h5[1200], bin[1200], again[1200];
    saved_t want;
    float got[SN_NP];
    snprintf(h5, sizeof h5, "%s/%s.h5", dir, stem);
    snprintf(bin, sizeof bin, "%s/%s.bin", dir, stem);
    snprintf(again, sizeof again, "%s/reload_np%d.h5", dir, world);
    CHECK(read_saved(bin, &want) == 0);

    CHECK_OK(sn_open(&net, &rc));
    CHECK(real_nodes == 0 || acx_num_nodes(net.acc) == real_nodes);
    CHECK_OK(acx_load_state(net.acc, h5, 1));
    CHECK(acx_step(net.acc) == want.step);
    CHECK(acx_optimizer_num_steps(net.opt) == want.step);
    CHECK_OK(sn_gather(&net, got));
    if (memcmp(got, want.p, sizeof got) != 0) {
        for (int q = 0; q < SN_NPAR; q++)
            if (memcmp(got + sn_off[q], want.p + sn_off[q],
                       (size_t)(sn_off[q + 1] - sn_off[q]) * sizeof(float)) != 0) {
                fprintf(stderr,
                        "\n%s loaded as %s on %d ranks: %s differs from the saved values "
                        "(relative %.3g)\n",
                        stem, strat_name[strategy], world, sn_par[q].name,
                        sn_rel_ff(got + sn_off[q], want.p + sn_off[q], sn_off[q + 1] - sn_off[q]));
                break;
            }
        TEST_ERROR;
    }

    /* the restored state, saved from this layout, is the saved state */
    CHECK_OK(acx_save_state(net.acc, again));
    int bad = 0;
    if (rank == 0) {
        saved_t s;
        int64_t step = -1, opt_step = -1;
        char sname[64];
        bad = read_checkpoint(again, &s, &step, &opt_step, sname, sizeof sname) != 0;
        const char *what = NULL;
        if (!bad && memcmp(s.p, want.p, sizeof s.p) != 0) what = "/model";
        if (!bad && memcmp(s.exp_avg, want.exp_avg, sizeof s.p) != 0) what = "/optimizer/exp_avg";
        if (!bad && memcmp(s.exp_avg_sq, want.exp_avg_sq, sizeof s.p) != 0)
            what = "/optimizer/exp_avg_sq";
        if (!bad && (step != want.step || opt_step != want.step)) what = "step";
        if (what != NULL) {
            fprintf(stderr,
                    "\n%s loaded as %s on %d ranks and saved again: %s differs from the "
                    "first save\n",
                    stem, strat_name[strategy], world, what);
            bad = 1;
        }
    }
    CHECK(acx_test_agree(bad) == 0);

    /* one more step from the restored state == the reference continued */
    CHECK_OK(train_steps(&net, want.step + 1));
    CHECK_OK(sn_gather(&net, got));
    sn_close(&net);
    {
        sn_ref_t ref = {.t = want.step};
        double g[SN_NP];
        char what[300];
        for (int e = 0; e < SN_NP; e++) {
            ref.p[e] = want.p[e];
            ref.m[e] = want.exp_avg[e];
            ref.v[e] = want.exp_avg_sq[e];
        }
        sn_ref_grad(ref.p, want.step, g);
        sn_ref_step(&ref, g, 0);
        snprintf(what, sizeof what, "%s loaded as %s on %d ranks, one step later", stem,
                 strat_name[strategy], world);
        CHECK(sn_compare_fd(what, got, ref.p, TOL, NULL) == 0);
    }
    return 0;
error:
    sn_close(&net);
    return 1;
}

static int cmp_stem(const void *a, const void *b) { return strcmp(a, b); }

/* Checkpoint stems (np<N>_<strategy>) with an expected-state file in DIR,
 * N <= world (N > world with --load-larger), listed by rank 0 and
 * broadcast, sorted. Collective. */
static int list_checkpoints(char stems[][64]) {
    int n = 0;
    if (rank == 0) {
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL && n < MAX_CKPTS) {
            size_t len = strlen(e->d_name);
            int saved_world = atoi(e->d_name + 2);
            if (strncmp(e->d_name, "np", 2) != 0 || len < 5 || len >= 64 + 4 ||
                strcmp(e->d_name + len - 4, ".bin") != 0 ||
                (load_larger ? saved_world <= world : saved_world > world))
                continue;
            memcpy(stems[n], e->d_name, len - 4);
            stems[n][len - 4] = '\0';
            n++;
        }
        if (d != NULL) closedir(d);
        qsort(stems, (size_t)n, 64, cmp_stem);
    }
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(stems, n * 64, MPI_CHAR, 0, MPI_COMM_WORLD);
    return n;
}

/* np = 1 starts the sequence: remove what an earlier `make check` left. */
static void clean_dir(void) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1400];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    if (d != NULL) closedir(d);
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 280, &rank, &world);
    const char *dir_name = "shard_ckpt";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--load-larger") == 0) {
            load_larger = 1;
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            dir_name = argv[++i];
        } else if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            real_nodes = atoi(argv[++i]);
        } else {
            if (rank == 0)
                fprintf(stderr,
                        "usage: test_shard_ckpt [--load-larger] [--dir NAME] [--nodes K]\n");
            MPI_Finalize();
            return 2;
        }
    }
    acx_test_tmp_path(dir, sizeof dir, dir_name);
    if (rank == 0) {
        mkdir(dir, 0755);
        if (world == 1 && !load_larger && real_nodes == 0) clean_dir();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int failed = 0;
    char what[300];
    for (int s = ACX_NO_SHARD; s <= ACX_HYBRID_SHARD && !load_larger; s++) {
        snprintf(what, sizeof what, "save under %s on %d rank(s)", strat_name[s], world);
        TESTING(what);
        failed |= acx_test_report(save_case(s));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    static char stems[MAX_CKPTS][64];
    int n = list_checkpoints(stems);
    if (rank == 0) printf("loading %d checkpoint(s) found in %s\n", n, dir);
    for (int i = 0; i < n; i++)
        for (int s = ACX_NO_SHARD; s <= ACX_HYBRID_SHARD; s++) {
            snprintf(what, sizeof what, "%.63s -> %s on %d rank(s)", stems[i], strat_name[s],
                     world);
            TESTING(what);
            failed |= acx_test_report(load_case(stems[i], s));
        }
    MPI_Finalize();
    return failed ? 1 : 0;
}

/*
 * tests/mpi/test_ckpt.c — checkpoints of the whole training state, and
 * exact resume (driven by tests/ckpt_resume.test and tests/ckpt_faults.test).
 *
 * The model is tests/mpi/test_ddp_equiv.c's (y = W2 tanh(W1 x + b1) + b2,
 * MSE) on 120 synthetic samples, global batch 24 split over the ranks
 * (split_batches), shuffled, so an epoch is 5 steps; AdamW with a cosine
 * schedule after 3 warmup steps. Each rank also draws from its random
 * stream every step, and two registered objects evolve with the training
 * (a step count and an exponential average of the parameter sums), so every
 * piece of state a resume must restore changes what the run computes.
 *
 * Modes (DIR holds the data file, created on first use):
 *   straight DIR T --out REF        T steps from scratch; REF = the final state
 *   train DIR K --save FILE         K steps, then acx_save_state(FILE)
 *   resume DIR FILE N --compare REF --tol X
 *                                   load FILE (a file, a directory or
 *                                   "latest"), N more steps, compare with
 *                                   REF: X = 0 means bitwise equal (random
 *                                   streams too, for the same world size);
 *                                   else the relative difference
 *                                   ||a-b|| / ||b|| of every parameter and of
 *                                   the registered average must be <= X. The
 *                                   measured difference is printed.
 *   check DIR FILE --compare REF    load FILE and compare at once (tol 0; the
 *                                   random streams are not compared: REF's
 *                                   latest draw was made before the save)
 *   units DIR                       the API cases below, in one process
 *   skew DIR --save FILE            rank 0 at batch 4, the others at batch 2:
 *                                   the save must be refused (mode_skew)
 * Options: --accum A (gradient accumulation), --batch G (global batch), --sgd
 * (SGD with Nesterov momentum instead of AdamW), --every S --limit L --project P
 * (checkpoint.save_every_steps / total_limit / project_dir for train).
 *
 * units: registered state round trip (scalar, arrays, exact values) and the
 * random stream continuing after a load; argument errors; saving inside an
 * accumulation window; total_limit retention with automatic names and the
 * `latest` pointer (directory and "latest" loads); strict and non-strict
 * loads into a model with an extra parameter, a parameter of another shape
 * and a registered object of another size; loader positions under another
 * global batch (exact, and the non-divisible case); missing files.
 */
#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <sys/stat.h>

#include "tests/acx_test.h"
#include "runtime/accelerator.h" /* acc->step: a wrapped counter, set directly */

#define NS           120 /* samples: 5 global batches */
#define DIN          7
#define DH           5 /* 5 rows: uneven (or empty) slices on 2, 3, 4 ranks */
#define DOUT         3
#define GLOBAL_BATCH 24
#define NP           (DH * DIN + DH + DOUT * DH + DOUT)
#define NEMA         4
#define MAX_WORLD    16

static int rank, world;
static char data_path[1200];

/* ---- data ---- */
static double data_x(int i, int j) { return sin(0.37 * i + 1.3 * j) + 0.1 * j; }
static double data_y(int i, int k) { return cos(0.21 * i - 0.7 * k); }

static int write_dataset(const char *dir) {
    char tmp[1300];
    snprintf(data_path, sizeof data_path, "%s/ckpt_data.h5", dir);
    if (rank != 0) return 0;
    struct stat st;
    if (stat(data_path, &st) == 0) return 0;
    snprintf(tmp, sizeof tmp, "%s.tmp%d", data_path, (int)getpid());
    float x[NS][DIN], y[NS][DOUT];
    for (int i = 0; i < NS; i++) {
        for (int j = 0; j < DIN; j++)
            x[i][j] = (float)data_x(i, j);
        for (int k = 0; k < DOUT; k++)
            y[i][k] = (float)data_y(i, k);
    }
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return -1;
    hsize_t dx[2] = {NS, DIN}, dy[2] = {NS, DOUT};
    hid_t sx = H5Screate_simple(2, dx, NULL), sy = H5Screate_simple(2, dy, NULL);
    hid_t ax = H5Dcreate2(f, "x", H5T_NATIVE_FLOAT, sx, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t ay = H5Dcreate2(f, "y", H5T_NATIVE_FLOAT, sy, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e1 = H5Dwrite(ax, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
    herr_t e2 = H5Dwrite(ay, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y);
    H5Dclose(ax);
    H5Dclose(ay);
    H5Sclose(sx);
    H5Sclose(sy);
    H5Fclose(f);
    if (e1 < 0 || e2 < 0) return -1;
    return rename(tmp, data_path);
}

/* ---- one training setup ---- */

typedef struct options {
    int accum;
    int64_t every;
    int limit;
    const char *project;
    int64_t batch;           /* global batch */
    int extra_param;         /* register an extra parameter (mismatch cases) */
    int64_t w1_rows;         /* rows of enc.weight (mismatch cases) */
    int64_t ema_count;       /* size of the registered average (mismatch cases) */
    int sgd;                 /* SGD (momentum, Nesterov) instead of AdamW */
    const char *resume_from; /* resume_from: loaded by acx_prepare */
} options_t;

static options_t default_options(void) {
    return (options_t){.accum = 1, .batch = GLOBAL_BATCH, .w1_rows = DH, .ema_count = NEMA};
}

typedef struct run {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u1, *u2;
    acx_param_t *w1, *b1, *w2, *b2, *extra;
    acx_optimizer_t *opt;
    acx_scheduler_t *sched;
    acx_dataloader_t *dl;
    /* registered state */
    int64_t steps_seen;
    float ema[NEMA];
    uint64_t rng_last; /* this rank's latest draw (per rank, so not registered) */
} run_t;

static acx_status_t setup(run_t *r, const options_t *o) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = 1234;
    cfg.gradient_accumulation_steps = o->accum;
    if (o->every > 0) cfg.checkpoint.save_every_steps = o->every;
    if (o->limit > 0) cfg.checkpoint.total_limit = o->limit;
    if (o->project) cfg.project_dir = o->project;
    if (o->resume_from) cfg.resume_from = o->resume_from;
    memset(r, 0, sizeof *r);
    acx_status_t st;
#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((st = (call)) != ACX_OK) return st;                                                    \
    } while (0)
    TRY(acx_init(NULL, NULL, &cfg, &r->acc));
    TRY(acx_model_create(r->acc, &r->m));
    TRY(acx_model_add_unit(r->m, "enc", &r->u1));
    TRY(acx_unit_add_param(r->u1, "enc.weight", 2, (int64_t[]){o->w1_rows, DIN},
                           ACX_INIT_SPEC_LINEAR_WEIGHT, &r->w1));
    TRY(acx_unit_add_param(r->u1, "enc.bias", 1, (int64_t[]){DH}, ACX_INIT_SPEC_LINEAR_BIAS(DIN),
                           &r->b1));
    TRY(acx_model_add_unit(r->m, "head", &r->u2));
    TRY(acx_unit_add_param(r->u2, "head.weight", 2, (int64_t[]){DOUT, DH},
                           ACX_INIT_SPEC_LINEAR_WEIGHT, &r->w2));
    TRY(acx_unit_add_param(r->u2, "head.bias", 1, (int64_t[]){DOUT}, ACX_INIT_SPEC_LINEAR_BIAS(DH),
                           &r->b2));
    if (o->extra_param)
        TRY(acx_unit_add_param(r->u2, "extra.weight", 2, (int64_t[]){2, 3},
                               ACX_INIT_SPEC_CONSTANT(0.5), &r->extra));
    if (o->sgd) {
        acx_sgd_hparams_t hp = {.lr = 0.1, .momentum = 0.9, .nesterov = 1, .weight_decay = 0.01};
        TRY(acx_sgd_create(r->m, &hp, &r->opt));
    } else {
        acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
        hp.lr = 0.01;
        TRY(acx_adamw_create(r->m, &hp, &r->opt));
    }
    TRY(acx_scheduler_create(r->opt, ACX_SCHED_COSINE, 3, 20, 0.5, &r->sched));
    acx_dataloader_options_t lo = ACX_DATALOADER_OPTIONS_DEFAULT;
    lo.batch_size = o->batch / o->accum;
    lo.split_batches = 1;
    lo.prefetch = 2;
    TRY(acx_dataloader_open(r->acc, data_path, 2, (const char *const[]){"/x", "/y"}, &lo, &r->dl));
    /* registered before acx_prepare, which loads resume_from */
    TRY(acx_register_for_checkpointing(r->acc, "steps_seen", ACX_DTYPE_INT64, &r->steps_seen, 1));
    TRY(acx_register_for_checkpointing(r->acc, "ema", ACX_DTYPE_FLOAT32, r->ema, o->ema_count));
    TRY(acx_prepare(r->acc, r->m, r->opt, r->dl));
#undef TRY
    return ACX_OK;
}

/* Forward + backward of the per-rank mean loss, as in test_ddp_equiv. */
static acx_status_t micro_step(run_t *r, const float *x, const float *y, int n) {
    const float *W1 = acx_param_data(r->w1), *B1 = acx_param_data(r->b1);
    const float *W2 = acx_param_data(r->w2), *B2 = acx_param_data(r->b2);
    float *gW1 = acx_param_grad(r->w1), *gB1 = acx_param_grad(r->b1);
    float *gW2 = acx_param_grad(r->w2), *gB2 = acx_param_grad(r->b2);
    float h[GLOBAL_BATCH][DH], dout[GLOBAL_BATCH][DOUT], dh[GLOBAL_BATCH][DH];
    for (int s = 0; s < n; s++) {
        for (int a = 0; a < DH; a++) {
            float z = B1[a];
            for (int j = 0; j < DIN; j++)
                z += W1[a * DIN + j] * x[s * DIN + j];
            h[s][a] = tanhf(z);
        }
        for (int k = 0; k < DOUT; k++) {
            float o = B2[k];
            for (int a = 0; a < DH; a++)
                o += W2[k * DH + a] * h[s][a];
            dout[s][k] = (o - y[s * DOUT + k]) / (float)n;
        }
    }
    for (int s = 0; s < n; s++)
        for (int k = 0; k < DOUT; k++) {
            gB2[k] += dout[s][k];
            for (int a = 0; a < DH; a++)
                gW2[k * DH + a] += dout[s][k] * h[s][a];
        }
    acx_status_t st = acx_unit_grads_ready(r->u2);
    if (st != ACX_OK) return st;
    for (int s = 0; s < n; s++)
        for (int a = 0; a < DH; a++) {
            float d = 0;
            for (int k = 0; k < DOUT; k++)
                d += dout[s][k] * W2[k * DH + a];
            dh[s][a] = d * (1.0f - h[s][a] * h[s][a]);
        }
    for (int s = 0; s < n; s++)
        for (int a = 0; a < DH; a++) {
            gB1[a] += dh[s][a];
            for (int j = 0; j < DIN; j++)
                gW1[a * DIN + j] += dh[s][a] * x[s * DIN + j];
        }
    return acx_unit_grads_ready(r->u1);
}

static float param_sum(acx_param_t *p) {
    const float *d = acx_param_data(p);
    float s = 0;
    for (int64_t i = 0; i < acx_param_numel(p); i++)
        s += d[i];
    return s;
}

/* Train until acx_step reaches `target` (the loader runs on into the next
 * epochs by itself). At each boundary, before acx_accumulate_end (which may
 * save: checkpoint.save_every_steps), the registered state and the random
 * stream advance. */
static const char *probe_save; /* train_to tries to save here inside a micro-step */

static acx_status_t train_to(run_t *r, int64_t target) {
    acx_status_t st;
    const acx_batch_t *b;
    while (acx_step(r->acc) < target) {
        st = acx_dataloader_next(r->dl, &b);
        if (st != ACX_OK) return st;
        if (b == NULL) continue; /* the end of an epoch */
        if ((st = acx_accumulate_begin(r->acc)) != ACX_OK) return st;
        if (probe_save != NULL) {
            /* gradients are pending: the save must be refused */
            st = acx_save_state(r->acc, probe_save);
            probe_save = NULL;
            if (st != ACX_ERR_STATE ||
                strstr(acx_last_error(), "between optimizer steps") == NULL) {
                fprintf(stderr, "\nsave inside a micro-step returned %d: %s\n", (int)st,
                        acx_last_error());
                return ACX_ERR_INTERNAL;
            }
        }
        if ((st = micro_step(r, b->tensors[0], b->tensors[1], (int)b->size)) != ACX_OK) return st;
        if ((st = acx_backward_end(r->acc)) != ACX_OK) return st;
        if (acx_sync_gradients(r->acc)) {
            if ((st = acx_optimizer_step(r->opt)) != ACX_OK) return st;
            if ((st = acx_scheduler_step(r->sched)) != ACX_OK) return st;
            if ((st = acx_optimizer_zero_grad(r->opt)) != ACX_OK) return st;
            r->steps_seen++;
            acx_param_t *ps[4] = {r->w1, r->b1, r->w2, r->b2};
            for (int q = 0; q < NEMA; q++)
                r->ema[q] = 0.9f * r->ema[q] + 0.1f * param_sum(ps[q]);
            r->rng_last = acx_random_u64(r->acc);
        }
        if ((st = acx_accumulate_end(r->acc)) != ACX_OK) return st;
    }
    return ACX_OK;
}

/* ---- the state compared between runs ---- */

typedef struct state {
    int64_t step, steps_seen, opt_steps;
    double lr;
    int world;
    float p[NP];
    float ema[NEMA];
    uint64_t rng[MAX_WORLD]; /* every rank's latest draw */
} state_t;

static acx_status_t capture(run_t *r, state_t *s) {
    memset(s, 0, sizeof *s);
    s->step = acx_step(r->acc);
    s->steps_seen = r->steps_seen;
    s->opt_steps = acx_optimizer_num_steps(r->opt);
    s->lr = acx_optimizer_lr(r->opt);
    s->world = world;
    acx_param_t *ps[4] = {r->w1, r->b1, r->w2, r->b2};
    int off = 0;
    for (int q = 0; q < 4; q++) {
        memcpy(s->p + off, acx_param_data(ps[q]), (size_t)acx_param_numel(ps[q]) * sizeof(float));
        off += (int)acx_param_numel(ps[q]);
    }
    memcpy(s->ema, r->ema, sizeof s->ema);
    return acx_all_gather(r->acc, &r->rng_last, s->rng, 1, ACX_DTYPE_INT64);
}

static int write_state(const char *path, const state_t *s) {
    if (rank != 0) return 0;
    FILE *f = fopen(path, "wb");
    if (f == NULL) return -1;
    int ok = fwrite(s, sizeof *s, 1, f) == 1;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int read_state(const char *path, state_t *s) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return -1;
    int ok = fread(s, sizeof *s, 1, f) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

/* ||a-b|| / ||b|| over n floats (0 when both are 0). */
static double rel_diff(const float *a, const float *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Compare got with the reference; returns 0 if they agree under tol. */
static int compare(const state_t *got, const state_t *want, double tol, int check_rng) {
    static const int sizes[4] = {DH * DIN, DH, DOUT * DH, DOUT};
    static const char *const names[4] = {"enc.weight", "enc.bias", "head.weight", "head.bias"};
    int bad = 0;
    if (got->step != want->step || got->steps_seen != want->steps_seen ||
        got->opt_steps != want->opt_steps) {
        fprintf(stderr,
                "step %lld / steps_seen %lld / optimizer steps %lld, expected %lld / %lld / %lld\n",
                (long long)got->step, (long long)got->steps_seen, (long long)got->opt_steps,
                (long long)want->step, (long long)want->steps_seen, (long long)want->opt_steps);
        bad = 1;
    }
    if (got->lr != want->lr) {
        fprintf(stderr, "lr %.17g, expected %.17g\n", got->lr, want->lr);
        bad = 1;
    }
    double worst = 0;
    int off = 0;
    for (int q = 0; q < 4; q++) {
        double d = rel_diff(got->p + off, want->p + off, sizes[q]);
        if (d > worst) worst = d;
        if (tol == 0 ? memcmp(got->p + off, want->p + off, (size_t)sizes[q] * sizeof(float)) != 0
                     : !(d <= tol)) {
            fprintf(stderr, "parameter %s differs: relative %.3g (tolerance %g)\n", names[q], d,
                    tol);
            bad = 1;
        }
        off += sizes[q];
    }
    double de = rel_diff(got->ema, want->ema, NEMA);
    if (tol == 0 ? memcmp(got->ema, want->ema, sizeof got->ema) != 0 : !(de <= tol)) {
        fprintf(stderr, "registered 'ema' differs: relative %.3g (tolerance %g)\n", de, tol);
        bad = 1;
    }
    if (check_rng && tol == 0 && got->world == want->world &&
        memcmp(got->rng, want->rng, (size_t)got->world * sizeof got->rng[0]) != 0) {
        fprintf(stderr, "random streams differ from the uninterrupted run's\n");
        bad = 1;
    }
    if (rank == 0)
        printf("compare: world %d vs %d, parameters max relative difference %.3g, ema %.3g\n",
               got->world, want->world, worst, de);
    return bad;
}

/* ---- modes: straight / train / resume / check ---- */

static int mode_run(const char *mode, int64_t k, int64_t n, const char *file, const char *out,
                    const char *ref, double tol, const options_t *o) {
    run_t r = {0};
    state_t s, want;
    char what[256];
    snprintf(what, sizeof what, "%s on %d rank(s)", mode, world);
    TESTING(what);
    options_t with_file = *o;
    int loads = strcmp(mode, "resume") == 0 || strcmp(mode, "check") == 0;
    if (loads) with_file.resume_from = file; /* acx_prepare loads it */
    CHECK_OK(setup(&r, &with_file));
    if (loads) {
        /* the scalars were restored: steps continue from the saved step */
        CHECK(acx_step(r.acc) == r.steps_seen);
        CHECK_OK(train_to(&r, acx_step(r.acc) + n));
    } else {
        CHECK_OK(train_to(&r, k));
        if (strcmp(mode, "train") == 0 && file != NULL) CHECK_OK(acx_save_state(r.acc, file));
    }
    CHECK_OK(capture(&r, &s));
    if (out != NULL) CHECK(write_state(out, &s) == 0);
    if (ref != NULL) {
        CHECK(read_state(ref, &want) == 0);
        CHECK(compare(&s, &want, tol, strcmp(mode, "check") != 0) == 0);
    }
    if (rank == 0)
        printf(
            "\nRESULT step=%lld lr=%.9g enc.weight[0]=%.9g ema[0]=%.9g epoch=%lld position=%lld\n",
            (long long)s.step, s.lr, s.p[0], s.ema[0], (long long)acx_dataloader_epoch(r.dl),
            (long long)acx_dataloader_position(r.dl));
    CHECK_OK(acx_finalize(r.acc));
    return 0;
error:
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* ---- skew: ranks at different loader positions ---- */

/* Rank 0 takes 4 batches of epoch 0, the others 2 (a program whose ranks
 * disagree), then saves FILE: the save must be refused on every rank with
 * a message naming each rank's position, and write nothing. Then every
 * rank takes batches up to 4 and the save succeeds. */
static int mode_skew(const char *file) {
    run_t r = {0};
    options_t o = default_options();
    const acx_batch_t *b;
    char want[64];
    TESTING("save with the ranks' loaders at different positions");
    CHECK_OK(setup(&r, &o));
    for (int i = 0; i < (rank == 0 ? 4 : 2); i++)
        CHECK_OK(acx_dataloader_next(r.dl, &b));
    acx_status_t st = acx_save_state(r.acc, file);
    if (rank == 0) fprintf(stderr, "\nsave: %s: %s\n", acx_status_string(st), acx_last_error());
    CHECK(st == ACX_ERR_STATE);
    CHECK(strstr(acx_last_error(), "rank 0: epoch 0 batch 4") != NULL);
    snprintf(want, sizeof want, "rank %d: epoch 0 batch 2", world - 1);
    CHECK(world < 2 || strstr(acx_last_error(), want) != NULL);
    CHECK(access(file, F_OK) != 0);
    for (int64_t i = acx_dataloader_position(r.dl); i < 4; i++)
        CHECK_OK(acx_dataloader_next(r.dl, &b));
    CHECK_OK(acx_save_state(r.acc, file));
    CHECK_OK(acx_finalize(r.acc));
    return 0;
error:
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* ---- units ---- */

static char udir[1100];

/* Registered state and random streams come back exactly; argument errors. */
static int case_user_rng(void) {
    run_t r = {0};
    options_t o = default_options();
    char path[1300];
    snprintf(path, sizeof path, "%s/user.h5", udir);
    int64_t scalar = 42;
    double arr[5] = {1.5, -2.25, 3e100, 0.0, -0.0};
    int32_t iarr[3] = {7, -8, 2147483647};
    uint64_t draws[3], again[3];
    float w_saved[DH * DIN];
    TESTING("registered state and random streams round trip");
    CHECK_OK(setup(&r, &o));
    CHECK_OK(acx_register_for_checkpointing(r.acc, "answer", ACX_DTYPE_INT64, &scalar, 1));
    CHECK_OK(acx_register_for_checkpointing(r.acc, "table.v-1", ACX_DTYPE_FLOAT64, arr, 5));
    CHECK_OK(acx_register_for_checkpointing(r.acc, "ints", ACX_DTYPE_INT32, iarr, 3));
    CHECK_STATUS(acx_register_for_checkpointing(r.acc, "answer", ACX_DTYPE_INT64, &scalar, 1),
                 ACX_ERR_INVALID_ARG, "already registered");
    CHECK_STATUS(acx_register_for_checkpointing(r.acc, "a/b", ACX_DTYPE_INT64, &scalar, 1),
                 ACX_ERR_INVALID_ARG, "a/b");
    CHECK_STATUS(acx_register_for_checkpointing(r.acc, "", ACX_DTYPE_INT64, &scalar, 1),
                 ACX_ERR_INVALID_ARG, "");
    CHECK_STATUS(acx_register_for_checkpointing(r.acc, "zero", ACX_DTYPE_INT64, &scalar, 0),
                 ACX_ERR_INVALID_ARG, "count 0");
    CHECK_STATUS(acx_register_for_checkpointing(r.acc, "null", ACX_DTYPE_INT64, NULL, 1),
                 ACX_ERR_INVALID_ARG, "");
    CHECK_OK(train_to(&r, 2));
    probe_save = path; /* inside a micro-step: refused, nothing written */
    CHECK_OK(train_to(&r, 3));
    CHECK(access(path, F_OK) != 0);
    CHECK_OK(acx_save_state(r.acc, path));
    memcpy(w_saved, acx_param_data(r.w1), sizeof w_saved);
    for (int i = 0; i < 3; i++)
        draws[i] = acx_random_u64(r.acc);
    double u = acx_random_uniform(r.acc);
    CHECK(u > 0.0 && u < 1.0);
    /* scramble everything, then load */
    scalar = -1;
    arr[0] = arr[2] = 99;
    iarr[2] = 0;
    CHECK_OK(train_to(&r, 5)); /* the weights move on too */
    CHECK_OK(acx_load_state(r.acc, path, 1));
    CHECK(scalar == 42);
    CHECK(arr[0] == 1.5 && arr[1] == -2.25 && arr[2] == 3e100 && arr[3] == 0.0 && signbit(arr[4]));
    CHECK(iarr[0] == 7 && iarr[1] == -8 && iarr[2] == 2147483647);
    CHECK(memcmp(w_saved, acx_param_data(r.w1), sizeof w_saved) == 0);
    CHECK(acx_step(r.acc) == 3 && acx_optimizer_num_steps(r.opt) == 3 && r.steps_seen == 3);
    for (int i = 0; i < 3; i++)
        again[i] = acx_random_u64(r.acc);
    CHECK(memcmp(draws, again, sizeof draws) == 0);
    /* the streams of different ranks differ */
    uint64_t all[MAX_WORLD];
    CHECK_OK(acx_all_gather(r.acc, &again[0], all, 1, ACX_DTYPE_INT64));
    for (int q = 1; q < world; q++)
        CHECK(all[q] != all[0]);
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* checkpoint.total_limit with automatic names; the `latest` pointer. */
static int case_retention(void) {
    run_t r = {0};
    options_t o = default_options();
    char project[1200], dir[1300], path[1400], latest[64] = "";
    snprintf(project, sizeof project, "%s/proj", udir);
    snprintf(dir, sizeof dir, "%s/checkpoints", project);
    o.project = project;
    o.every = 2;
    o.limit = 2;
    TESTING("save_every_steps 2 + total_limit 2: 5 saves keep 2 and latest");
    /* nothing saved yet: loading "latest" is a missing-file error */
    CHECK_OK(setup(&r, &o));
    CHECK_STATUS(acx_load_state(r.acc, NULL, 1), ACX_ERR_IO, "latest");
    CHECK_STATUS(acx_load_state(r.acc, udir, 1), ACX_ERR_IO, "latest");
    snprintf(path, sizeof path, "%s/no-such.h5", udir);
    CHECK_STATUS(acx_load_state(r.acc, path, 1), ACX_ERR_IO, "");
    CHECK_OK(train_to(&r, 10)); /* saves at 2, 4, 6, 8, 10 */
    CHECK_OK(acx_barrier(r.acc));
    {
        DIR *d = opendir(dir);
        CHECK(d != NULL);
        int n = 0, got8 = 0, got10 = 0, gotl = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            n++;
            got8 |= strcmp(e->d_name, "step_00000008.h5") == 0;
            got10 |= strcmp(e->d_name, "step_00000010.h5") == 0;
            gotl |= strcmp(e->d_name, "latest") == 0;
            if (rank == 0 && strcmp(e->d_name, "latest") && strncmp(e->d_name, "step_", 5))
                fprintf(stderr, "\nunexpected file %s\n", e->d_name);
        }
        closedir(d);
        CHECK(n == 3 && got8 && got10 && gotl);
        snprintf(path, sizeof path, "%s/latest", dir);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        CHECK(fgets(latest, sizeof latest, f) != NULL);
        fclose(f);
        CHECK(strcmp(latest, "step_00000010.h5\n") == 0);
    }
    state_t at10, now;
    CHECK_OK(capture(&r, &at10));
    CHECK_OK(train_to(&r, 11)); /* no save at 11 */
    CHECK_OK(acx_load_state(r.acc, NULL, 1));
    CHECK_OK(capture(&r, &now));
    CHECK(now.step == 10 && memcmp(now.p, at10.p, sizeof now.p) == 0);
    CHECK_OK(acx_load_state(r.acc, "latest", 1));
    CHECK_OK(acx_load_state(r.acc, dir, 1));
    snprintf(path, sizeof path, "%s/step_00000008.h5", dir);
    CHECK_OK(acx_load_state(r.acc, path, 1));
    CHECK(acx_step(r.acc) == 8 && r.steps_seen == 8);
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* A wrapped step counter must not become a checkpoint name: the name of
 * step INT64_MIN + 28 would be step_-9223372036854775780.h5, which no
 * automatic name matches, so retention would never delete it. */
static int case_negative_step(void) {
    run_t r = {0};
    options_t o = default_options();
    char project[1200], dir[1300];
    snprintf(project, sizeof project, "%s/negproj", udir);
    snprintf(dir, sizeof dir, "%s/checkpoints", project);
    o.project = project;
    TESTING("a negative (wrapped) step is refused, not named");
    CHECK_OK(setup(&r, &o));
    CHECK_OK(train_to(&r, 1));
    r.acc->step = INT64_MIN + 28;
    CHECK_STATUS(acx_save_state(r.acc, NULL), ACX_ERR_STATE,
                 "step -9223372036854775780 is negative");
    DIR *d = opendir(dir); /* nothing named (the directory may not even exist) */
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        CHECK(strncmp(e->d_name, "step_", 5) != 0);
    if (d != NULL) closedir(d);
    r.acc->step = 1;
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* Strict and non-strict loads into programs that differ from the saved one. */
static int case_mismatch(void) {
    run_t r = {0};
    options_t o = default_options();
    char path[1300];
    state_t saved, init, now;
    snprintf(path, sizeof path, "%s/base.h5", udir);
    TESTING("strict / non-strict loads: extra param, other shape/size/optimizer");
    CHECK_OK(setup(&r, &o));
    CHECK_OK(train_to(&r, 3));
    CHECK_OK(acx_save_state(r.acc, path));
    CHECK_OK(capture(&r, &saved));
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;

    /* a model with an extra parameter */
    o.extra_param = 1;
    CHECK_OK(setup(&r, &o));
    CHECK_OK(capture(&r, &init));
    CHECK_STATUS(acx_load_state(r.acc, path, 1), ACX_ERR_FORMAT, "extra.weight");
    CHECK_OK(capture(&r, &now)); /* untouched */
    CHECK(now.step == 0 && memcmp(now.p, init.p, sizeof now.p) == 0 && r.steps_seen == 0);
    CHECK_OK(acx_load_state(r.acc, path, 0));
    CHECK_OK(capture(&r, &now));
    CHECK(now.step == 3 && now.opt_steps == 3 && now.lr == saved.lr && r.steps_seen == 3);
    CHECK(memcmp(now.p, saved.p, sizeof now.p) == 0);
    for (int i = 0; i < 6; i++)
        CHECK(acx_param_data(r.extra)[i] == 0.5f);
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;

    /* enc.weight with 6 rows instead of 5 */
    o = default_options();
    o.w1_rows = 6;
    CHECK_OK(setup(&r, &o));
    float w_init[6 * DIN];
    memcpy(w_init, acx_param_data(r.w1), sizeof w_init);
    CHECK_STATUS(acx_load_state(r.acc, path, 1), ACX_ERR_FORMAT, "enc.weight");
    CHECK(strstr(acx_last_error(), "[5 x 7]") != NULL &&
          strstr(acx_last_error(), "[6 x 7]") != NULL);
    CHECK_OK(acx_load_state(r.acc, path, 0));
    CHECK(memcmp(w_init, acx_param_data(r.w1), sizeof w_init) == 0); /* not loaded */
    CHECK(memcmp(acx_param_data(r.b1), saved.p + DH * DIN, DH * sizeof(float)) == 0);
    CHECK(acx_step(r.acc) == 3);
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;

    /* a registered object of another size */
    o = default_options();
    o.ema_count = 3;
    CHECK_OK(setup(&r, &o));
    CHECK_STATUS(acx_load_state(r.acc, path, 1), ACX_ERR_FORMAT, "'ema'");
    CHECK_OK(acx_load_state(r.acc, path, 0));
    CHECK(r.steps_seen == 3);
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;

    /* another optimizer */
    o = default_options();
    o.sgd = 1;
    CHECK_OK(setup(&r, &o));
    CHECK_STATUS(acx_load_state(r.acc, path, 1), ACX_ERR_FORMAT, "optimizer is AdamW");
    CHECK_OK(acx_load_state(r.acc, path, 0));
    CHECK_OK(capture(&r, &now));
    CHECK(memcmp(now.p, saved.p, sizeof now.p) == 0 && acx_optimizer_num_steps(r.opt) == 0);
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* A checkpoint saved mid-epoch (epoch 1 after 2 batches of 24 = 48
 * samples) under other global batches: 12 divides 48 (batch 4), 36 does not. */
static int case_loader_position(void) {
    run_t r = {0};
    options_t o = default_options();
    char path[1300];
    snprintf(path, sizeof path, "%s/mid.h5", udir);
    TESTING("loader position under another global batch");
    CHECK_OK(setup(&r, &o));
    CHECK_OK(train_to(&r, 7));
    CHECK(acx_dataloader_epoch(r.dl) == 1 && acx_dataloader_position(r.dl) == 2);
    CHECK_OK(acx_save_state(r.acc, path));
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;

    o.batch = 12;
    CHECK_OK(setup(&r, &o));
    CHECK_OK(acx_load_state(r.acc, path, 1));
    CHECK(acx_dataloader_epoch(r.dl) == 1 && acx_dataloader_position(r.dl) == 4);
    {
        /* the next batch is samples 48..59 of epoch 1's order: compare with
         * a fresh walk through epoch 1 */
        const acx_batch_t *b;
        int64_t got[12], want[12];
        CHECK_OK(acx_dataloader_next(r.dl, &b));
        CHECK(b->epoch == 1 && b->index == 4);
        CHECK_OK(acx_all_gather(r.acc, b->indices, got, (size_t)b->size, ACX_DTYPE_INT64));
        CHECK_OK(acx_dataloader_set_epoch(r.dl, 1));
        for (int i = 0; i < 5; i++)
            CHECK_OK(acx_dataloader_next(r.dl, &b));
        CHECK_OK(acx_all_gather(r.acc, b->indices, want, (size_t)b->size, ACX_DTYPE_INT64));
        CHECK(memcmp(got, want, sizeof got) == 0);
    }
    CHECK_OK(acx_finalize(r.acc));
    r.acc = NULL;

    o.batch = 36;
    CHECK_OK(setup(&r, &o));
    CHECK_STATUS(acx_load_state(r.acc, path, 1), ACX_ERR_FORMAT, "48 samples");
    CHECK(acx_step(r.acc) == 0);
    CHECK_OK(acx_load_state(r.acc, path, 0)); /* rounds down to batch 1 */
    CHECK(acx_dataloader_epoch(r.dl) == 1 && acx_dataloader_position(r.dl) == 1);
    CHECK_OK(acx_finalize(r.acc));
    PASSED();
    return 0;
error:
    FAILED();
    if (r.acc) acx_finalize(r.acc);
    return 1;
}

/* ---- main ---- */

static void usage(void) {
    if (rank == 0)
        fprintf(
            stderr,
            "usage: test_ckpt straight DIR T --out REF | train DIR K --save FILE | "
            "resume DIR FILE N --compare REF --tol X | check DIR FILE --compare REF | units DIR\n"
            "       [--accum A] [--every S] [--limit L] [--project P] [--batch G] [--sgd]\n");
}

int main(int argc, char **argv) {
    acx_test_watchdog(120);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    acx_test_rank_ = rank;
    if (argc < 3 || world > MAX_WORLD) {
        usage();
        MPI_Finalize();
        return argc < 3 ? 77 : 99;
    }
    const char *mode = argv[1], *dir = argv[2];
    const char *file = NULL, *out = NULL, *ref = NULL;
    int64_t k = 0, n = 0;
    double tol = 0;
    options_t o = default_options();
    int pos = 0;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--out") == 0 && v)
            out = argv[++i];
        else if (strcmp(a, "--save") == 0 && v)
            file = argv[++i];
        else if (strcmp(a, "--compare") == 0 && v)
            ref = argv[++i];
        else if (strcmp(a, "--tol") == 0 && v)
            tol = atof(argv[++i]);
        else if (strcmp(a, "--accum") == 0 && v)
            o.accum = atoi(argv[++i]);
        else if (strcmp(a, "--every") == 0 && v)
            o.every = atoll(argv[++i]);
        else if (strcmp(a, "--limit") == 0 && v)
            o.limit = atoi(argv[++i]);
        else if (strcmp(a, "--project") == 0 && v)
            o.project = argv[++i];
        else if (strcmp(a, "--sgd") == 0)
            o.sgd = 1;
        else if (strcmp(a, "--batch") == 0 && v)
            o.batch = atoll(argv[++i]);
        else if (strcmp(mode, "resume") == 0 && pos == 0) {
            file = a;
            pos++;
        } else if (strcmp(mode, "check") == 0 && pos == 0) {
            file = a;
            pos++;
        } else if (pos <= 1 && strcmp(mode, "resume") == 0) {
            n = atoll(a);
            pos++;
        } else if (pos == 0) {
            k = atoll(a);
            pos++;
        } else {
            usage();
            MPI_Finalize();
            return 99;
        }
    }
    int failed = 0;
    mkdir(dir, 0755);
    if (write_dataset(dir) != 0) {
        fprintf(stderr, "cannot write the data file in %s\n", dir);
        failed = 1;
    }
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    snprintf(data_path, sizeof data_path, "%s/ckpt_data.h5", dir);
    if (failed) {
        MPI_Finalize();
        return 99;
    }
    if (strcmp(mode, "units") == 0) {
        snprintf(udir, sizeof udir, "%s/units%d", dir, world);
        if (rank == 0) mkdir(udir, 0755);
        MPI_Barrier(MPI_COMM_WORLD);
        int (*cases[])(void) = {case_user_rng, case_retention, case_mismatch, case_loader_position,
                                case_negative_step};
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            int f = cases[c]();
            MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
            failed |= f;
        }
    } else if (strcmp(mode, "skew") == 0) {
        failed = file == NULL || mode_skew(file);
        MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        if (failed)
            FAILED();
        else
            PASSED();
    } else if (strcmp(mode, "straight") == 0 || strcmp(mode, "train") == 0 ||
               strcmp(mode, "resume") == 0 || strcmp(mode, "check") == 0) {
        failed = mode_run(mode, k, n, file, out, ref, tol, &o);
        MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        if (failed)
            FAILED();
        else
            PASSED();
    } else {
        usage();
        MPI_Finalize();
        return 99;
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}

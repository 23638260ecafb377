/*
 * tests/mpi/test_stall.c — a program the stall detector must end.
 *
 * Every rank runs a loop with collective_timeout set from argv[1] seconds;
 * the rank named by argv[2] sleeps argv[3] seconds in its 4th iteration (as
 * a rank stuck in its own code would), so the others wait in a collective.
 * argv[4] (default "all_reduce") says which one:
 *   all_reduce  acx_all_reduce in a loop: the others wait in all-reduce #N
 *               (with ACX_DEBUG_MODE=1 set, in the debug mode's check first);
 *   step_end    full_shard training steps (with the default
 *               preemption.signals); the stuck rank sleeps before
 *               acx_accumulate_end, so the others wait in the preemption
 *               agreement of the step boundary;
 *   clip        the same steps; the stuck rank sleeps before
 *               acx_clip_grad_norm, so the others wait in its norm
 *               all-reduce;
 *   prepare     a model and acx_prepare; the stuck rank sleeps before
 *               acx_prepare, so the others wait in its agreement on the
 *               models (the first collective of acx_prepare);
 *   inside      all-reduces of 4 MiB (two synchronizations each on the
 *               shared-memory path); the rank before the stuck one (rank
 *               0 for stuck rank 1) arrives 1.5 s late at the 4th,
 *               and 0.5 s into it the stuck rank stops itself (SIGSTOP)
 *               — frozen inside the same collective as the others, which
 *               then wait for its second half: its table row says
 *               "inside, same collective", and only its heartbeat tells;
 *   save        a model and acx_save_state; the script stops a rank
 *               inside the save (ACX_TEST_CKPT_STOP_AT, tests/ckpt_kill_points.h),
 *               so the others wait in the save's agreements or collective
 *               HDF5 calls (the stuck rank and sleep are unused);
 *   finalize    the stuck rank stops itself (SIGSTOP) right before
 *               acx_finalize, so the others wait in it;
 *   mismatch    one acx_all_reduce of float32, count 256 on rank 0 and 128
 *               elsewhere; prints "all_reduce: <status> <message>" and
 *               exits 3 when refused, 0 when it returned ACX_OK (the
 *               script decides which is right for the environment);
 *   loop        all-reduces of 1 MiB for up to SLEEP_S seconds (no stuck
 *               rank), rank 0 printing "looping" once 3 have completed —
 *               tests/nodes/fail.test kills a node or takes its link
 *               down then, so the others wait in an all-reduce that
 *               cannot complete; a job that ends by itself exits 0;
 *   cycles      no stuck rank: the program owns MPI and runs 5
 *               acx_init/acx_finalize cycles; each rank exits 1 when the
 *               median acx_finalize took 0.25 s or more (the detector's
 *               thread, which checks every 0.5 s with the limits used
 *               here, must stop at once, not at its next check), printing
 *               "finalize: median S s, max S s" (rank 0).
 * Run by tests/stall.test, which checks that the job ends long before the
 * sleep is over, with the diagnostic naming the rank that did not arrive.
 * Without the detector it would finish after the sleep and exit 0 — which
 * the script counts as a failure.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#include <time.h>

#include "acx/acx.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != ACX_OK) {                                                                    \
            fprintf(stderr, "test_stall: %s: %s\n", #call, acx_last_error());                      \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int all_reduce_loop(acx_accelerator_t *acc, int stuck, unsigned sleep_s) {
    float x = 1.0f;
    for (int i = 0; i < 8; i++) {
        if (i == 3 && acx_rank(acc) == stuck) sleep(sleep_s);
        TRY(acx_all_reduce(acc, &x, &x, 1, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    }
    return 0;
}

/* One unit "u" of 8 x 3 zeros ("u.w") and SGD, not yet prepared. */
static int small_model(acx_accelerator_t *acc, acx_model_t **m_p, acx_unit_t **u_p,
                       acx_param_t **p_p, acx_optimizer_t **opt_p) {
    TRY(acx_model_create(acc, m_p));
    TRY(acx_model_add_unit(*m_p, "u", u_p));
    TRY(acx_unit_add_param(*u_p, "u.w", 2, (int64_t[]){8, 3}, ACX_INIT_SPEC_ZEROS, p_p));
    acx_sgd_hparams_t hp = ACX_SGD_DEFAULT;
    TRY(acx_sgd_create(*m_p, &hp, opt_p));
    return 0;
}

/* The small model under full_shard; every rank adds 1 to every gradient.
 * clip: the stuck rank sleeps before clipping, else before
 * acx_accumulate_end. */
static int step_loop(acx_accelerator_t *acc, int stuck, unsigned sleep_s, int clip) {
    acx_model_t *m;
    acx_unit_t *u;
    acx_param_t *p;
    acx_optimizer_t *opt;
    if (small_model(acc, &m, &u, &p, &opt) != 0) return 1;
    TRY(acx_prepare(acc, m, opt, NULL));
    for (int i = 0; i < 8; i++) {
        int sleeps = i == 3 && acx_rank(acc) == stuck;
        TRY(acx_accumulate_begin(acc));
        TRY(acx_unit_acquire(u));
        float *g = acx_param_grad(p);
        if (g == NULL) TRY(ACX_ERR_INTERNAL);
        for (int e = 0; e < 24; e++)
            g[e] += 1.0f;
        TRY(acx_unit_grads_ready(u));
        TRY(acx_unit_release(u));
        TRY(acx_backward_end(acc));
        if (sleeps && clip) sleep(sleep_s);
        TRY(acx_clip_grad_norm(acc, 1.0, 2.0, NULL));
        TRY(acx_optimizer_step(opt));
        TRY(acx_optimizer_zero_grad(opt));
        if (sleeps && !clip) sleep(sleep_s);
        TRY(acx_accumulate_end(acc));
    }
    return 0;
}

/* The small model; the stuck rank sleeps before acx_prepare. */
static int prepare_once(acx_accelerator_t *acc, int stuck, unsigned sleep_s) {
    acx_model_t *m;
    acx_unit_t *u;
    acx_param_t *p;
    acx_optimizer_t *opt;
    if (small_model(acc, &m, &u, &p, &opt) != 0) return 1;
    if (acx_rank(acc) == stuck) sleep(sleep_s);
    TRY(acx_prepare(acc, m, opt, NULL));
    return 0;
}

/* SIGSTOP this process after delay_us, from a thread, while the main
 * thread is inside a collective. */
static void *stop_later(void *arg) {
    usleep((useconds_t)(uintptr_t)arg);
    kill(getpid(), SIGSTOP);
    return NULL;
}

static int inside_loop(acx_accelerator_t *acc, int stuck) {
    /* the rank before the stuck one arrives late: the others' lines come first */
    int late = (stuck + acx_world_size(acc) - 1) % acx_world_size(acc);
    const size_t n = (size_t)1 << 20;
    float *x = calloc(n, sizeof *x);
    if (x == NULL) TRY(ACX_ERR_NO_MEMORY);
    for (int i = 0; i < 8; i++) {
        pthread_t t;
        if (i == 3 && acx_rank(acc) == late) usleep(1500000);
        if (i == 3 && acx_rank(acc) == stuck)
            if (pthread_create(&t, NULL, stop_later, (void *)(uintptr_t)500000) != 0) return 1;
        TRY(acx_all_reduce(acc, x, x, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    }
    free(x);
    return 0;
}

static double now_s(void);

/* Rank 0's clock decides when to stop; the all-reduce carries its word
 * (element 0), so every rank runs the same number of all-reduces. */
static int loop_for(acx_accelerator_t *acc, unsigned seconds) {
    const size_t n = (size_t)1 << 18;
    float *x = calloc(n, sizeof *x);
    if (x == NULL) TRY(ACX_ERR_NO_MEMORY);
    double t0 = now_s();
    for (int i = 0; i < 3 || x[0] == 0.0f; i++) {
        x[0] = acx_rank(acc) == 0 && now_s() - t0 >= seconds ? 1.0f : 0.0f;
        TRY(acx_all_reduce(acc, x, x, n, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
        if (i == 2 && acx_rank(acc) == 0) {
            printf("looping\n");
            fflush(stdout);
        }
    }
    free(x);
    return 0;
}

static int save_once(acx_accelerator_t *acc) {
    acx_model_t *m;
    acx_unit_t *u;
    acx_param_t *p;
    acx_optimizer_t *opt;
    TRY(acx_model_create(acc, &m));
    TRY(acx_model_add_unit(m, "u", &u));
    TRY(acx_unit_add_param(u, "u.w", 2, (int64_t[]){64, 3}, ACX_INIT_SPEC_ZEROS, &p));
    acx_sgd_hparams_t hp = ACX_SGD_DEFAULT;
    TRY(acx_sgd_create(m, &hp, &opt));
    TRY(acx_prepare(acc, m, opt, NULL));
    TRY(acx_save_state(acc, NULL));
    return 0;
}

static int mismatch_once(acx_accelerator_t *acc) {
    float x[256] = {0};
    acx_status_t st =
        acx_all_reduce(acc, x, x, acx_rank(acc) == 0 ? 256 : 128, ACX_DTYPE_FLOAT32, ACX_OP_SUM);
    printf("all_reduce: %s %s\n", acx_status_string(st), st == ACX_OK ? "" : acx_last_error());
    fflush(stdout);
    return st == ACX_OK ? 0 : 3;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* cycles: acx adopts the program's MPI, so init and finalize can repeat. */
static int finalize_cycles(int argc, char **argv, const acx_config_t *cfg) {
    enum { CYCLES = 5 };
    double t[CYCLES];
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 0; i < CYCLES; i++) {
        acx_accelerator_t *acc = NULL;
        TRY(acx_init(&argc, &argv, cfg, &acc));
        double t0 = now_s();
        TRY(acx_finalize(acc));
        t[i] = now_s() - t0;
    }
    qsort(t, CYCLES, sizeof t[0], cmp_double);
    if (rank == 0) printf("finalize: median %.4f s, max %.4f s\n", t[CYCLES / 2], t[CYCLES - 1]);
    MPI_Finalize();
    return t[CYCLES / 2] < 0.25 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr,
                "usage: test_stall TIMEOUT_S STUCK_RANK SLEEP_S "
                "[all_reduce|step_end|clip|prepare|inside|save|finalize|mismatch|loop|cycles]\n");
        return 2;
    }
    const char *mode = argc > 4 ? argv[4] : "all_reduce";
    if (strcmp(mode, "cycles") == 0) {
        acx_config_t cfg = ACX_CONFIG_DEFAULT;
        cfg.collective_timeout = atof(argv[1]);
        return finalize_cycles(argc, argv, &cfg);
    }
    int steps = strcmp(mode, "step_end") == 0 || strcmp(mode, "clip") == 0;
    int inside = strcmp(mode, "inside") == 0, save = strcmp(mode, "save") == 0,
        fin = strcmp(mode, "finalize") == 0, mism = strcmp(mode, "mismatch") == 0,
        prep = strcmp(mode, "prepare") == 0, loop = strcmp(mode, "loop") == 0;
    if (!steps && !inside && !save && !fin && !mism && !prep && !loop &&
        strcmp(mode, "all_reduce") != 0) {
        fprintf(stderr, "test_stall: unknown mode '%s'\n", mode);
        return 2;
    }
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.collective_timeout = atof(argv[1]);
    if (steps) cfg.sharding_strategy = ACX_FULL_SHARD;
    int stuck = atoi(argv[2]);
    unsigned sleep_s = (unsigned)atoi(argv[3]);
    acx_accelerator_t *acc = NULL;
    if (acx_init(&argc, &argv, &cfg, &acc) != ACX_OK) {
        fprintf(stderr, "test_stall: %s\n", acx_last_error());
        return 1;
    }
    int failed = steps    ? step_loop(acc, stuck, sleep_s, strcmp(mode, "clip") == 0)
                 : prep   ? prepare_once(acc, stuck, sleep_s)
                 : inside ? inside_loop(acc, stuck)
                 : save   ? save_once(acc)
                 : fin    ? 0
                 : mism   ? mismatch_once(acc)
                 : loop   ? loop_for(acc, sleep_s)
                          : all_reduce_loop(acc, stuck, sleep_s);
    if (mism) {
        acx_finalize(acc);
        return failed;
    }
    if (failed) return 1; /* no acx_finalize: the other ranks may be inside a collective */
    if (fin && acx_rank(acc) == stuck) kill(getpid(), SIGSTOP);
    return acx_finalize(acc) == ACX_OK ? 0 : 1;
}

/*
 * tests/mpi/test_offload.c — offload_optimizer: cpu (device-resident
 * NO_SHARD with the fp32 master weights, a host copy of the reduced
 * gradients and the optimizer state in host memory, the step on the CPU)
 * against host NO_SHARD: the same model, data and steps run twice in one
 * process, and every observable must be BITWISE equal. With offload the
 * loss scaler, clipping and the optimizer run the host code on the host
 * copy, so there is no tolerance even with `test_offload cuda`
 * (device_state: cuda on the MPI backend, which stages device buffers;
 * exit 77 without a GPU: tests/gpu/offload.test). Default: the emulated
 * device (device_state: emulated), whose memory host code cannot touch: a
 * host read of a device buffer, or a device op on a host buffer, fails;
 * `test_offload nccl_emulated` runs the emulated device with backend: nccl,
 * i.e. on the NCCL test double, which also refuses a host buffer handed to
 * the backend (tests/mpi/offload.test, 2 ranks).
 *
 * The host run is the reference (host NO_SHARD is checked against
 * independent references in test_ddp_equiv, test_accumulate,
 * test_mixed_precision). The model, the gradients (multiples of 2^-10, so
 * every all-reduce sum is exact) and the cases follow
 * tests/mpi/test_ddp_device.c:
 *
 *   adamw        AdamW 4 steps: parameters (acx_param_gather: the host
 *                master), compute copies (device), exp_avg, exp_avg_sq;
 *                where each buffer lives (emulated: acx_param_data/grad are
 *                device memory, the master, the gradients' host copy and
 *                the state are not); memory stats from the shapes (P = 37
 *                elements, 4P bytes per fp32 array): host MASTER 4P (fp32
 *                training too), OPTIMIZER 8P, GRADS 4P (the host copy),
 *                PARAMS 0; device PARAMS 4P, GRADS 4P, MASTER 0, OPTIMIZER
 *                0, TRANSIENT 0 (every case checks these).
 *   sgd          SGD momentum 0.9 + weight decay, and Nesterov: 4 steps.
 *   accumulate   gradient_accumulation_steps 2: the device gradients after
 *                the first micro-step (this rank's own) and at each
 *                boundary (the mean); the parameters.
 *   clip         acx_clip_grad_norm(0.05, 2) and (0.01, inf) before each of
 *                3 SGD steps: norms and parameters bitwise; and
 *                acx_clip_grad_value(0.3), which offload allows (host code).
 *   bf16         mixed_precision bf16, reduce_dtype bf16, AdamW 3 steps:
 *                compute copies (rounded, on the device), master, moments;
 *                device GRADS 4P + 2P (the 16-bit wire).
 *   fp16 skip    mixed_precision fp16 (loss scale 1024), SGD: an inf on the
 *                last rank at step 2 skips that step everywhere, the scale
 *                halves; parameters after 4 steps.
 *   checkpoint   AdamW 2 steps saved by a host, a device-state and an
 *                offload run: every /model and /optimizer dataset of the
 *                offload file is byte-identical to the other two; the
 *                offload run loads the host and the device-state files, the
 *                host and device-state runs load the offload file (strict):
 *                parameters, compute copies and moments equal the saving
 *                run's, and one more step equals 3 uninterrupted steps.
 *                The acx_model_save_weights files are byte-identical too.
 *   zero first   acx_optimizer_zero_grad between acx_backward_end and the
 *                step: the host gradient copy the step reads is the reduced
 *                gradients, bitwise (the compute stream waits for the
 *                copy stream before zeroing what it reads).
 *   refusals     offload with device_state: host is accepted and changes
 *                nothing (the state is on the host already): 2 AdamW steps
 *                equal host NO_SHARD's bitwise, with the same host bytes per
 *                category and no device bytes; offload with full_shard and
 *                device state fails acx_prepare ("supports NO_SHARD only in
 *                this version").
 */
#include <hdf5.h>
#include <stdint.h>

#include "runtime/optim_state.h"
#include "sharding/model.h"
#include "tests/acx_test_mpi.h"
#include "tests/mpi/device_net.h"

static int dev_state = ACX_DEVICE_STATE_EMULATED; /* the device side (cuda: `test_offload cuda`) */
/* the emulated device's backend (`test_offload nccl_emulated`: the NCCL
 * test double, which refuses every host buffer NCCL would fault on) */
static int emul_backend = ACX_BACKEND_MPI;
static char dir[1024];

/* where model state lives in a run */
typedef enum { HOST = 0, DEVICE = 1, OFFLOAD = 2 } mode_t_;

typedef struct opts {
    mode_t_ mode;
    int device_state; /* 0: HOST -> host, else dev_state; > 0 overrides (refusals) */
    int strategy;     /* ACX_NO_SHARD unless a refusal is tested */
    opt_kind_t opt;
    int accum;      /* gradient_accumulation_steps (0: unset) */
    int mp, reduce; /* ACX_MP_*, ACX_REDUCE_* (reduce -1: unset) */
    double ls_init;
    double clip_norm, clip_type; /* clip_norm > 0: acx_clip_grad_norm before each step */
    double clip_value;           /* > 0: acx_clip_grad_value before each step */
    int poison_step;             /* step whose last-rank gradient gets an inf (-1: none) */
} opts_t;

static acx_status_t net_open(net_t *net, const opts_t *o) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.sharding_strategy = o->strategy;
    cfg.device_state = o->device_state > 0 ? o->device_state
                       : o->mode == HOST   ? ACX_DEVICE_STATE_HOST
                                           : dev_state;
    cfg.offload_optimizer = o->mode == OFFLOAD ? ACX_OFFLOAD_CPU : ACX_OFFLOAD_NONE;
    cfg.backend = cfg.device_state == ACX_DEVICE_STATE_EMULATED ? emul_backend : ACX_BACKEND_MPI;
    if (o->accum > 0) cfg.gradient_accumulation_steps = o->accum;
    cfg.mixed_precision = o->mp;
    if (o->reduce >= 0) cfg.reduce_dtype = o->reduce;
    if (o->ls_init > 0) cfg.loss_scale.init = o->ls_init;
    return net_build(net, cfg, o->opt);
}

/* ---- one run ---- */

#define MAXSTEP 6

typedef struct result {
    float params[NPV];   /* acx_param_gather after the last step */
    float copies[NPV];   /* acx_param_data (the compute copies) */
    float state[2][NPV]; /* optimizer state arrays (ready order, as stored) */
    int num_state;
    float grads_first[MAXSTEP][NPV];        /* this rank's gradients after the first micro-step */
    float grads_mean[MAXSTEP][NPV];         /* the reduced gradients at each boundary */
    int64_t mem[ACX_MEM_NUM_CATEGORIES];    /* acx_memory_stats: host bytes per category */
    int64_t devmem[ACX_MEM_NUM_CATEGORIES]; /* device bytes per category */
    double norms[MAXSTEP];
    int skipped[MAXSTEP];
    double scale;
} result_t;

static acx_status_t observe(net_t *net, result_t *r) {
    for (int q = 0; q < NPAR; q++) {
        TRY(acx_param_gather(net->p[q], r->params + par_off[q]));
        TRY(acx_unit_acquire(net->u[par_unit[q]]));
        const float *d = acx_param_data(net->p[q]);
        if (d == NULL) return ACX_ERR_INTERNAL;
        TRY(read_buf(net, r->copies + par_off[q], d, (size_t)(par_off[q + 1] - par_off[q])));
        TRY(acx_unit_release(net->u[par_unit[q]]));
    }
    r->num_state = acx_optimizer_num_state(net->opt);
    for (int s = 0; s < r->num_state; s++)
        TRY(read_on(net->m->shard_dev, net, r->state[s], acx_optimizer_state(net->opt, s), NPV));
    r->scale = acx_loss_scale(net->acc);
    acx_memory_stats_t ms;
    TRY(acx_memory_stats(&ms));
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++) {
        r->mem[c] = ms.current[c];
        r->devmem[c] = ms.device_current[c];
    }
    return ACX_OK;
}

/* `steps` optimizer steps (each o->accum micro-steps) on an open net. */
static acx_status_t train(net_t *net, const opts_t *o, int steps, int step0, result_t *r) {
    int k = o->accum > 0 ? o->accum : 1;
    for (int s = 0; s < steps; s++) {
        for (int j = 0; j < k; j++) {
            TRY(acx_accumulate_begin(net->acc));
            int ms = (step0 + s) * k + j;
            TRY(backward(net, ms, (step0 + s) == o->poison_step && j == k - 1 ? 3 : -1,
                         j == 0 ? r->grads_first[s] : NULL));
            if (acx_sync_gradients(net->acc)) {
                for (int q = 0; q < NPAR; q++)
                    TRY(read_buf(net, r->grads_mean[s] + par_off[q], acx_param_grad(net->p[q]),
                                 (size_t)(par_off[q + 1] - par_off[q])));
                if (o->clip_norm > 0)
                    TRY(acx_clip_grad_norm(net->acc, o->clip_norm, o->clip_type, &r->norms[s]));
                if (o->clip_value > 0) TRY(acx_clip_grad_value(net->acc, o->clip_value));
                TRY(acx_optimizer_step(net->opt));
                r->skipped[s] = acx_optimizer_step_was_skipped(net->opt);
                TRY(acx_optimizer_zero_grad(net->opt));
            }
            TRY(acx_accumulate_end(net->acc));
        }
    }
    return observe(net, r);
}

static acx_status_t run(const opts_t *o, int steps, result_t *r) {
    net_t net;
    memset(r, 0, sizeof *r);
    acx_status_t st = net_open(&net, o);
    if (st == ACX_OK) st = train(&net, o, steps, 0, r);
    net_close(&net);
    return st;
}

/* ---- comparisons ---- */

static int same_bits(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            fprintf(stderr, "\n[r%d] %s[%zu]: host %.9g, offload %.9g\n", rank, what, i,
                    (double)a[i], (double)b[i]);
            return 0;
        }
    return 1;
}

static int moved(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 1;
    return 0;
}

static int nonzero(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != 0.0f) return 1;
    return 0;
}

static result_t rh, rd, r0;

#define P ((int64_t)NPV * 4) /* bytes of one fp32 array of the model */

/* host vs offload for opts o (mode ignored), `steps` steps; the memory
 * stats of the offload run from the shapes */
static int compare_runs(opts_t o, int steps) {
    o.mode = HOST;
    CHECK_OK(run(&o, steps, &rh));
    o.mode = OFFLOAD;
    CHECK_OK(run(&o, steps, &rd));
    CHECK(rh.num_state == rd.num_state);
    CHECK(same_bits(rh.params, rd.params, NPV, "params"));
    CHECK(same_bits(rh.copies, rd.copies, NPV, "compute copies"));
    for (int s = 0; s < rh.num_state; s++)
        CHECK(same_bits(rh.state[s], rd.state[s], NPV, "state"));
    for (int s = 0; s < steps; s++) {
        CHECK(rh.skipped[s] == rd.skipped[s]);
        CHECK(memcmp(&rh.norms[s], &rd.norms[s], sizeof(double)) == 0);
    }
    CHECK(rh.scale == rd.scale);
    /* offload: params and gradients (and the 16-bit wire) on the device;
     * the fp32 master (always), the gradients' host copy and the optimizer
     * state on the host */
    int64_t wire = o.reduce == ACX_REDUCE_BF16 || o.reduce == ACX_REDUCE_FP16 ? P / 2 : 0;
    CHECK(rd.devmem[ACX_MEM_PARAMS] == P);
    CHECK(rd.devmem[ACX_MEM_GRADS] == P + wire);
    CHECK(rd.devmem[ACX_MEM_MASTER] == 0 && rd.devmem[ACX_MEM_OPTIMIZER] == 0);
    CHECK(rd.mem[ACX_MEM_PARAMS] == 0);
    CHECK(rd.mem[ACX_MEM_GRADS] == P);
    CHECK(rd.mem[ACX_MEM_MASTER] == P);
    CHECK(rd.mem[ACX_MEM_OPTIMIZER] == (int64_t)rd.num_state * P);
    /* no scalar scratch: the scaler and clipping are host code */
    CHECK(rd.devmem[ACX_MEM_TRANSIENT] == 0);
    /* not a comparison of two untouched states */
    o.mode = HOST;
    CHECK_OK(run(&o, 0, &r0));
    CHECK(moved(rh.params, r0.params, NPV));
    for (int s = 0; s < rh.num_state; s++)
        CHECK(nonzero(rh.state[s], NPV));
    return 0;
error:
    return 1;
}

/* ---- cases ---- */

static int test_adamw(void) {
    opts_t o = {.opt = OPT_ADAMW, .reduce = -1, .poison_step = -1};
    net_t net = {0};
    CHECK(compare_runs(o, 4) == 0);
    CHECK(rd.num_state == 2 && rd.mem[ACX_MEM_OPTIMIZER] == 2 * P);
    /* where each buffer lives */
    o.mode = OFFLOAD;
    CHECK_OK(net_open(&net, &o));
    CHECK(net.m->ctx.dev != NULL && net.m->shard_dev == NULL);
    CHECK(acx_unit_acquire(net.u[0]) == ACX_OK);
    if (dev_state == ACX_DEVICE_STATE_EMULATED) {
        CHECK(acx_devops_emulated_owns(acx_param_data(net.p[0]), 21 * sizeof(float)));
        CHECK(acx_devops_emulated_owns(acx_param_grad(net.p[1]), 5 * sizeof(float)));
        CHECK(!acx_devops_emulated_owns(net.m->master, NPV * sizeof(float)));
        CHECK(!acx_devops_emulated_owns(net.m->shard_grad, NPV * sizeof(float)));
        CHECK(!acx_devops_emulated_owns(acx_optimizer_state(net.opt, 0), NPV * sizeof(float)));
        CHECK(!acx_devops_emulated_owns(acx_optimizer_state(net.opt, 1), NPV * sizeof(float)));
    }
    CHECK(acx_unit_release(net.u[0]) == ACX_OK);
    net_close(&net);
    acx_memory_stats_t ms;
    CHECK_OK(acx_memory_stats(&ms));
    CHECK(ms.device_current_total == 0);
    for (int c = ACX_MEM_PARAMS; c <= ACX_MEM_OPTIMIZER; c++)
        CHECK(ms.current[c] == 0);
    return 0;
error:
    net_close(&net);
    return 1;
}

static int test_sgd(void) {
    opts_t o = {.opt = OPT_SGD_MOM, .reduce = -1, .poison_step = -1};
    CHECK(compare_runs(o, 4) == 0);
    CHECK(rd.num_state == 1);
    o.opt = OPT_SGD_NESTEROV;
    CHECK(compare_runs(o, 4) == 0);
    return 0;
error:
    return 1;
}

static int test_accumulate(void) {
    opts_t o = {.opt = OPT_ADAMW, .accum = 2, .reduce = -1, .poison_step = -1};
    CHECK(compare_runs(o, 3) == 0);
    for (int s = 0; s < 3; s++) {
        CHECK(same_bits(rh.grads_first[s], rd.grads_first[s], NPV, "grads after micro-step 1"));
        CHECK(same_bits(rh.grads_mean[s], rd.grads_mean[s], NPV, "reduced grads"));
        for (int e = 0; e < NPV; e++)
            CHECK(rd.grads_first[s][e] == grad_val(2 * s, rank, e));
    }
    return 0;
error:
    return 1;
}

static int test_clip(void) {
    double types[2] = {2.0, INFINITY}, maxn[2] = {0.05, 0.01};
    for (int t = 0; t < 2; t++) {
        opts_t o = {.opt = OPT_SGD_MOM,
                    .reduce = -1,
                    .poison_step = -1,
                    .clip_norm = maxn[t],
                    .clip_type = types[t]};
        CHECK(compare_runs(o, 3) == 0); /* norms compared bitwise there too */
        for (int s = 0; s < 3; s++)
            CHECK(rd.norms[s] > maxn[t]);
    }
    /* clipping by value is host code on the host copy with offload */
    opts_t o = {.opt = OPT_SGD_MOM, .reduce = -1, .poison_step = -1, .clip_value = 0.3};
    CHECK(compare_runs(o, 3) == 0);
    opts_t u = o;
    u.clip_value = 0;
    u.mode = HOST;
    static result_t unclipped;
    CHECK_OK(run(&u, 3, &unclipped));
    CHECK(moved(unclipped.params, rd.params, NPV)); /* the clip did something */
    return 0;
error:
    return 1;
}

static int test_bf16(void) {
    opts_t o = {.opt = OPT_ADAMW, .mp = ACX_MP_BF16, .reduce = ACX_REDUCE_BF16, .poison_step = -1};
    CHECK(compare_runs(o, 3) == 0);
    CHECK(moved(rd.params, rd.copies, NPV)); /* the copies are rounded, the master is not */
    return 0;
error:
    return 1;
}

static int test_fp16_skip(void) {
    opts_t o = {
        .opt = OPT_SGD_MOM, .mp = ACX_MP_FP16, .reduce = -1, .ls_init = 1024, .poison_step = 2};
    CHECK(compare_runs(o, 4) == 0);
    for (int s = 0; s < 4; s++)
        CHECK(rd.skipped[s] == (s == 2));
    CHECK(rd.scale == 512.0);
    return 0;
error:
    return 1;
}

/* ---- checkpoints ---- */

/* Rank 0: every float dataset `path` of files a and b holds the same bytes. */
static int same_dataset(hid_t fa, hid_t fb, const char *path) {
    float va[NPV], vb[NPV];
    hid_t da = H5Dopen2(fa, path, H5P_DEFAULT), db = H5Dopen2(fb, path, H5P_DEFAULT);
    int ok = da >= 0 && db >= 0 &&
             H5Dread(da, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, va) >= 0 &&
             H5Dread(db, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vb) >= 0;
    hssize_t n = 0;
    if (ok) {
        hid_t sp = H5Dget_space(da);
        n = H5Sget_simple_extent_npoints(sp);
        H5Sclose(sp);
        ok = n > 0 && n <= NPV && memcmp(va, vb, (size_t)n * sizeof(float)) == 0 &&
             nonzero(va, (size_t)n);
    }
    if (!ok) fprintf(stderr, "\ndataset %s differs between two checkpoints\n", path);
    if (da >= 0) H5Dclose(da);
    if (db >= 0) H5Dclose(db);
    return ok;
}

static int compare_files(const char *a, const char *b) {
    int failed = 0;
    if (rank == 0) {
        hid_t fa = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT),
              fb = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
        failed = fa < 0 || fb < 0;
        char path[128];
        for (int q = 0; q < NPAR && !failed; q++) {
            snprintf(path, sizeof path, "/model/%s", par_name[q]);
            failed |= !same_dataset(fa, fb, path);
            snprintf(path, sizeof path, "/optimizer/exp_avg/%s", par_name[q]);
            failed |= !same_dataset(fa, fb, path);
            snprintf(path, sizeof path, "/optimizer/exp_avg_sq/%s", par_name[q]);
            failed |= !same_dataset(fa, fb, path);
        }
        if (fa >= 0) H5Fclose(fa);
        if (fb >= 0) H5Fclose(fb);
    }
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return failed;
}

/* The weights files (acx_model_save_weights: one dataset per parameter,
 * named as the parameter) of two runs hold the same bytes. */
static int compare_weights(const char *a, const char *b) {
    int failed = 0;
    if (rank == 0) {
        hid_t fa = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT),
              fb = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
        failed = fa < 0 || fb < 0;
        for (int q = 0; q < NPAR && !failed; q++)
            failed |= !same_dataset(fa, fb, par_name[q]);
        if (fa >= 0) H5Fclose(fa);
        if (fb >= 0) H5Fclose(fb);
    }
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return failed;
}

/* Load `file` into a fresh net of `mode`, check it holds `want`, then one
 * more step must equal `after`. */
static int load_and_check(mode_t_ mode, const char *file, const result_t *want,
                          const result_t *after) {
    opts_t o = {.opt = OPT_ADAMW, .reduce = -1, .poison_step = -1, .mode = mode};
    net_t net = {0};
    static result_t got;
    memset(&got, 0, sizeof got);
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(acx_load_state(net.acc, file, 1));
    CHECK_OK(observe(&net, &got));
    CHECK(same_bits(want->params, got.params, NPV, "loaded params"));
    CHECK(same_bits(want->params, got.copies, NPV, "loaded compute copies"));
    for (int s = 0; s < 2; s++)
        CHECK(same_bits(want->state[s], got.state[s], NPV, "loaded state"));
    CHECK_OK(train(&net, &o, 1, 2, &got));
    CHECK(same_bits(after->params, got.params, NPV, "params one step after the load"));
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

static int test_checkpoint(void) {
    static const char *const tag[3] = {"host", "device", "offload"};
    char file[3][1200], wfile[3][1200];
    static result_t saved[3], h3;
    opts_t o = {.opt = OPT_ADAMW, .reduce = -1, .poison_step = -1};
    net_t net = {0};
    for (int m = HOST; m <= OFFLOAD; m++) {
        snprintf(file[m], sizeof file[m], "%s/offload_%s_%d.h5", dir, tag[m], world);
        snprintf(wfile[m], sizeof wfile[m], "%s/offload_%s_weights_%d.h5", dir, tag[m], world);
        o.mode = (mode_t_)m;
        memset(&saved[m], 0, sizeof saved[m]);
        CHECK_OK(net_open(&net, &o));
        CHECK_OK(train(&net, &o, 2, 0, &saved[m]));
        CHECK_OK(acx_save_state(net.acc, file[m]));
        CHECK_OK(acx_model_save_weights(net.m, wfile[m]));
        net_close(&net);
    }
    CHECK(compare_files(file[HOST], file[OFFLOAD]) == 0);
    CHECK(compare_files(file[DEVICE], file[OFFLOAD]) == 0);
    CHECK(compare_weights(wfile[HOST], wfile[OFFLOAD]) == 0);
    CHECK(compare_weights(wfile[DEVICE], wfile[OFFLOAD]) == 0);
    o.mode = HOST;
    CHECK_OK(run(&o, 3, &h3)); /* 3 uninterrupted host steps */
    CHECK(load_and_check(OFFLOAD, file[HOST], &saved[HOST], &h3) == 0);
    CHECK(load_and_check(OFFLOAD, file[DEVICE], &saved[DEVICE], &h3) == 0);
    CHECK(load_and_check(HOST, file[OFFLOAD], &saved[OFFLOAD], &h3) == 0);
    CHECK(load_and_check(DEVICE, file[OFFLOAD], &saved[OFFLOAD], &h3) == 0);
    return 0;
error:
    net_close(&net);
    return 1;
}

/* acx_optimizer_zero_grad between acx_backward_end and the step: the
 * device gradients it zeroes are what the gradient copies (copy stream)
 * read, so the compute stream must wait for them first (the emulated
 * device refuses the memset otherwise). The host copy the step reads
 * (after acx_model_grads_to_host, its first act) is then still the reduced
 * gradients, bitwise the device values read before the zeroing; the step
 * succeeds; the device gradients are zero. */
static int test_zero_before_step(void) {
    opts_t o = {.mode = OFFLOAD, .opt = OPT_SGD_MOM, .reduce = -1, .poison_step = -1};
    net_t net;
    float mean[NPV], after[NPV];
    int open = 0;
    CHECK_OK(net_open(&net, &o));
    open = 1;
    CHECK_OK(acx_accumulate_begin(net.acc));
    CHECK_OK(backward(&net, 0, -1, NULL));
    for (int q = 0; q < NPAR; q++)
        CHECK_OK(read_buf(&net, mean + par_off[q], acx_param_grad(net.p[q]),
                          (size_t)(par_off[q + 1] - par_off[q])));
    CHECK_OK(acx_optimizer_zero_grad(net.opt));
    CHECK_OK(acx_model_grads_to_host(net.m)); /* what the step does first */
    for (int q = 0; q < NPAR; q++)            /* the host copy is in the flat (ready) order */
        CHECK(same_bits(mean + par_off[q], net.m->shard_grad + net.p[q]->shard_offset,
                        (size_t)(par_off[q + 1] - par_off[q]), "host gradient copy"));
    CHECK_OK(acx_optimizer_step(net.opt));
    for (int q = 0; q < NPAR; q++)
        CHECK_OK(read_buf(&net, after + par_off[q], acx_param_grad(net.p[q]),
                          (size_t)(par_off[q + 1] - par_off[q])));
    for (int e = 0; e < NPV; e++)
        CHECK(after[e] == 0.0f);
    CHECK(nonzero(mean, NPV));
    CHECK_OK(acx_accumulate_end(net.acc));
    net_close(&net);
    return 0;
error:
    if (open) net_close(&net);
    return 1;
}

static int test_refusals(void) {
    net_t net = {0};
    opts_t o = {.mode = OFFLOAD,
                .device_state = ACX_DEVICE_STATE_HOST,
                .opt = OPT_ADAMW,
                .reduce = -1,
                .poison_step = -1};
    /* offload with host state: nothing to move, the run is host NO_SHARD */
    static result_t rhost, roff;
    opts_t h = o;
    h.mode = HOST;
    CHECK_OK(run(&h, 2, &rhost));
    CHECK_OK(run(&o, 2, &roff));
    CHECK(same_bits(rhost.params, roff.params, NPV, "params"));
    for (int s = 0; s < rhost.num_state; s++)
        CHECK(same_bits(rhost.state[s], roff.state[s], NPV, "state"));
    for (int c = 0; c < ACX_MEM_NUM_CATEGORIES; c++) {
        CHECK(roff.devmem[c] == 0);
        CHECK(roff.mem[c] == rhost.mem[c]);
    }
    o.device_state = 0;
    o.strategy = ACX_FULL_SHARD;
    CHECK_STATUS(net_open(&net, &o), ACX_ERR_NOT_SUPPORTED,
                 "offload_optimizer: cpu supports NO_SHARD only in this version");
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 300, &rank, &world);
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) dev_state = ACX_DEVICE_STATE_CUDA;
    if (argc > 1 && strcmp(argv[1], "nccl_emulated") == 0) emul_backend = ACX_BACKEND_NCCL;
    acx_test_tmp_path(dir, sizeof dir, "");
    if (dev_state == ACX_DEVICE_STATE_CUDA) {
        /* no GPU (or no CUDA build): SKIP, agreed */
        opts_t o = {.mode = OFFLOAD, .opt = OPT_ADAMW, .reduce = -1, .poison_step = -1};
        net_t net;
        acx_status_t st = net_open(&net, &o);
        int skip = st == ACX_ERR_NOT_SUPPORTED;
        if (rank == 0 && skip) printf("SKIP: device_state: cuda: %s\n", acx_last_error());
        net_close(&net);
        if (acx_test_agree(skip)) {
            MPI_Finalize();
            return 77;
        }
        if (st != ACX_OK) {
            fprintf(stderr, "[r%d] device_state: cuda: %s\n", rank, acx_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    int failed = 0;
    failed |=
        acx_test_run_case("AdamW: bitwise; where buffers live; memory by category", test_adamw);
    failed |= acx_test_run_case("SGD momentum, Nesterov: params, momentum bitwise", test_sgd);
    failed |= acx_test_run_case("accumulation 2: local grads, mean, params", test_accumulate);
    failed |= acx_test_run_case("clip_grad_norm 2 and inf, clip_grad_value: bitwise", test_clip);
    failed |= acx_test_run_case("bf16 + bf16 reduce: copies, master, moments", test_bf16);
    failed |= acx_test_run_case("fp16: an inf on one rank skips everywhere", test_fp16_skip);
    failed |= acx_test_run_case("checkpoint: same datasets; host/device/offload cross-loads",
                                test_checkpoint);
    failed |= acx_test_run_case("zero_grad before the step: the copies finish first",
                                test_zero_before_step);
    failed |= acx_test_run_case("host state (a no-op), sharded strategy refused", test_refusals);
    MPI_Finalize();
    return failed;
}

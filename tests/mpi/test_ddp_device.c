/*
 * tests/mpi/test_ddp_device.c — device-resident state against host state,
 * for NO_SHARD (default) or a sharded strategy named on the command line
 * (`shard_grad_op`, `full_shard`, `hybrid_shard`: ranks_per_node 2 on 4
 * ranks, else 1, as test_shard_equiv; tests/mpi/shard_device.test), the
 * same strategy on both sides: the same model, data and steps run twice in one process, once
 * with model state in host memory and once in device memory
 * (device_state: emulated on the MPI backend by default;
 * `test_ddp_device nccl_emulated` runs the device side with backend: nccl
 * on the emulated device, i.e. on the NCCL test double, which refuses every
 * host buffer the NCCL backend would fault on — tests/mpi/ddp_device.test,
 * shard_device.test; `test_ddp_device cuda` runs it with device_state: cuda
 * on the MPI backend, which stages device buffers, and `test_ddp_device
 * nccl` with the NCCL backend; both exit 77 without a GPU —
 * tests/gpu/ddp_device.test), and every observable must be BITWISE equal
 * (cuda's norms: see clip below).
 *
 * The host run is the reference: host NO_SHARD is itself checked against
 * independent double-precision references (test_ddp_equiv, test_accumulate,
 * test_mixed_precision). Equality here means the device path — the device
 * table's kernels, the buckets' device scaling and casts, the MPI backend's
 * staging of device buffers, the scalar copies of the scaler and clipping,
 * the checkpoint mirrors — computes exactly what the host path computes.
 * Every comparison also holds acx_memory_stats: the device run's device
 * bytes of parameters, gradients, master weights and optimizer state equal
 * the host run's host bytes per category (bf16: master and the 16-bit wire
 * included), with no host bytes in those categories.
 * Every case also checks that something changed (parameters moved, the
 * moments are non-zero), so equality of two untouched states cannot pass.
 *
 * Under a sharded strategy the optimizer state and the reduced gradients
 * are this rank's shard (shard_numel elements, the same layout on both
 * sides) and are compared as such; parameters are compared whole
 * (acx_param_gather) and as the gathered compute copies (acx_param_data of
 * an acquired unit: device memory on the device side); the memory-stats
 * identity per category holds as for NO_SHARD.
 *
 * The model: unit a = {a.w [7,3] (nn.Linear init), a.e [5] (0.5)}, unit b =
 * {b.w [2,5] (nn.Linear init), b.s [1] (0.75)}. The program writes
 * gradients through acx_param_grad (device pointers on the device side:
 * copied with the device table, as a program's kernels would write them),
 * in backward order (b, then a), each unit reporting ready. Gradients are
 * multiples of 2^-10 below 2, different on every rank and step, so every
 * all-reduce sum is exact whatever the backend's order.
 *
 *   adamw        AdamW (lr 1e-2, wd 0.01), 4 steps: parameters, exp_avg,
 *                exp_avg_sq; parameters and gradients are device memory
 *                (the emulated device owns acx_param_data/acx_param_grad);
 *                acx_memory_stats: the device counters hold params 4P,
 *                grads 4P, optimizer 8P bytes (P elements) and the host
 *                counters of those categories nothing.
 *   sgd          SGD momentum 0.9 + weight decay, and Nesterov: 4 steps,
 *                parameters and momentum_buffer.
 *   accumulate   gradient_accumulation_steps 2, AdamW, 3 optimizer steps:
 *                after each first micro-step the gradient buffers hold this
 *                rank's own (unreduced) gradients, the same as the host
 *                run's; after the second the mean; the parameters.
 *   clip         acx_clip_grad_norm(0.05, 2) and (0.01, inf) before each of
 *                3 SGD steps: the returned norms (bitwise: the emulated
 *                device reduces in the host loop's order; with cuda within
 *                1e-12 relative) and the parameters (cuda: 1e-6 relative).
 *   clip value   acx_clip_grad_value(0.5) before each of 3 SGD steps: the
 *                clipped reduced gradients (this rank's shard) bitwise the
 *                host run's and equal to the reduced ones clamped by hand
 *                (some clipped, some kept), and the parameters; bitwise
 *                with cuda too (a clamp is exact).
 *   bf16         mixed_precision bf16, reduce_dtype bf16, AdamW 3 steps: the
 *                compute copies (acx_param_data), the fp32 master weights
 *                and the moments.
 *   fp16 skip    mixed_precision fp16 (loss scale 1024), SGD: an inf in one
 *                element of the last rank's gradient at step 2 skips that
 *                step on every rank (acx_optimizer_step_was_skipped), the
 *                scale halves; parameters after 4 steps.
 *   checkpoint   AdamW 2 steps, acx_save_state from each run: every /model
 *                and /optimizer dataset is byte-identical between the two
 *                files, and so are the acx_model_save_weights files; a
 *                device run loads the host file and a host run the device
 *                file (strict): parameters and moments equal the saving
 *                run's, and one more step stays equal.
 *   refusals     (emulated device) backend nccl gives the NCCL test double
 *                under every strategy; a host buffer handed to acx_all_reduce
 *                there is refused ("is host memory"), while
 *                acx_reduce_scalar (host data, through MPI) sums 1..world;
 *                a compute stream with host state is refused, NULL
 *                accepted; with device state on the MPI backend (which
 *                could stage either kind) a host buffer given to
 *                acx_all_reduce is refused all the same ("is host
 *                memory"), and an acx_buffer_alloc buffer, filled and read
 *                back with acx_buffer_from_host/to_host, sums 1..world.
 */
#include <hdf5.h>
#include <stdint.h>

#include "runtime/optim_state.h"
#include "sharding/model.h"
#include "tests/acx_test_mpi.h"
#include "tests/mpi/device_net.h"

static int dev_state = ACX_DEVICE_STATE_EMULATED; /* the device side of each comparison */
static int dev_backend = ACX_BACKEND_MPI;         /* its backend (nccl: `test_ddp_device nccl`) */
static int strategy = ACX_NO_SHARD;               /* both sides (argv: a sharded strategy's name) */
static char dir[1024];

typedef struct opts {
    int device;   /* 0: host state; 1: dev_state */
    int strategy; /* 0: the run's `strategy`; else ACX_* + 1 (a refusal) */
    int backend;  /* 0: the run's default; else ACX_BACKEND_* + 1 */
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
    cfg.sharding_strategy = o->strategy ? o->strategy - 1 : strategy;
    if (cfg.sharding_strategy == ACX_HYBRID_SHARD) cfg.ranks_per_node = world == 4 ? 2 : 1;
    cfg.device_state = o->device ? dev_state : ACX_DEVICE_STATE_HOST;
    cfg.backend = o->backend ? o->backend - 1 : o->device ? dev_backend : ACX_BACKEND_MPI;
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
    float state[2][NPV]; /* optimizer state arrays (as stored: the local shard) */
    int num_state;
    float grads_first[MAXSTEP][NPV];        /* this rank's gradients after the first micro-step */
    float grads_mean[MAXSTEP][NPV];         /* the reduced gradients at each boundary (the shard's
                                               under a sharded strategy) */
    float grads_unclipped[MAXSTEP][NPV];    /* the shard's reduced gradients (m->shard_grad,
                                               in its layout) before acx_clip_grad_value */
    float grads_clipped[MAXSTEP][NPV];      /* the same after it */
    int64_t mem[ACX_MEM_NUM_CATEGORIES];    /* acx_memory_stats: host bytes per category */
    int64_t devmem[ACX_MEM_NUM_CATEGORIES]; /* device bytes per category */
    double norms[MAXSTEP];
    int skipped[MAXSTEP];
    double scale;
    size_t shard_numel; /* elements of this rank's shard */
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
        TRY(read_buf(net, r->state[s], acx_optimizer_state(net->opt, s), net->m->shard_numel));
    r->scale = acx_loss_scale(net->acc);
    r->shard_numel = net->m->shard_numel;
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
                if (strategy != ACX_NO_SHARD) /* the shard's (the full buffers are gone) */
                    TRY(read_buf(net, r->grads_mean[s], net->m->shard_grad, net->m->shard_numel));
                for (int q = 0; q < NPAR && strategy == ACX_NO_SHARD; q++)
                    TRY(read_buf(net, r->grads_mean[s] + par_off[q], acx_param_grad(net->p[q]),
                                 (size_t)(par_off[q + 1] - par_off[q])));
                if (o->clip_norm > 0)
                    TRY(acx_clip_grad_norm(net->acc, o->clip_norm, o->clip_type, &r->norms[s]));
                if (o->clip_value > 0) {
                    TRY(read_buf(net, r->grads_unclipped[s], net->m->shard_grad,
                                 net->m->shard_numel));
                    TRY(acx_clip_grad_value(net->acc, o->clip_value));
                    TRY(read_buf(net, r->grads_clipped[s], net->m->shard_grad,
                                 net->m->shard_numel));
                }
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
            fprintf(stderr, "\n[r%d] %s[%zu]: host %.9g, device %.9g\n", rank, what, i,
                    (double)a[i], (double)b[i]);
            return 0;
        }
    return 1;
}

/* relative closeness for the cuda norms/parameters (tree-order sums) */
static int close_rel(const float *a, const float *b, size_t n, double rtol, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - (double)b[i]) <= rtol * fabs((double)a[i]) + 1e-30)) {
            fprintf(stderr, "\n[r%d] %s[%zu]: host %.9g, device %.9g\n", rank, what, i,
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

/* host vs device for opts o (device flag ignored), `steps` steps */
static int compare_runs(opts_t o, int steps) {
    o.device = 0;
    CHECK_OK(run(&o, steps, &rh));
    o.device = 1;
    CHECK_OK(run(&o, steps, &rd));
    CHECK(rh.num_state == rd.num_state);
    CHECK(same_bits(rh.params, rd.params, NPV, "params"));
    CHECK(same_bits(rh.copies, rd.copies, NPV, "compute copies"));
    for (int s = 0; s < rh.num_state; s++)
        CHECK(same_bits(rh.state[s], rd.state[s], NPV, "state"));
    for (int s = 0; s < steps; s++)
        CHECK(rh.skipped[s] == rd.skipped[s]);
    CHECK(rh.scale == rd.scale);
    /* the same model-state bytes per category, on the device instead of the host */
    for (int c = ACX_MEM_PARAMS; c <= ACX_MEM_OPTIMIZER; c++) {
        CHECK(rh.devmem[c] == 0 && rd.mem[c] == 0);
        CHECK(rd.devmem[c] == rh.mem[c]);
    }
    CHECK(rh.mem[ACX_MEM_GRADS] > 0 && rh.mem[ACX_MEM_OPTIMIZER] > 0);
    /* not a comparison of two untouched states */
    o.device = 0;
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
    /* the program sees device memory; the accounting says where it is */
    o.device = 1;
    acx_memory_stats_t ms;
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(acx_memory_stats(&ms));
    /* NO_SHARD: P elements of each; sharded: the shard's (compare_runs
     * holds them equal to the host run's per category) */
    const size_t b = (strategy == ACX_NO_SHARD ? NPV : net.m->shard_numel) * sizeof(float);
    if (strategy == ACX_NO_SHARD) CHECK(ms.device_current[ACX_MEM_PARAMS] == (int64_t)b);
    if (strategy == ACX_SHARD_GRAD_OP) /* the resident full parameters: every element */
        CHECK(ms.device_current[ACX_MEM_PARAMS] == (int64_t)(NPV * sizeof(float)));
    if (strategy == ACX_FULL_SHARD || strategy == ACX_HYBRID_SHARD)
        CHECK(ms.device_current[ACX_MEM_PARAMS] == 0); /* gathered on acquire only */
    if (strategy == ACX_NO_SHARD) CHECK(ms.device_current[ACX_MEM_GRADS] == (int64_t)b);
    if (strategy != ACX_NO_SHARD) CHECK(ms.device_current[ACX_MEM_MASTER] == (int64_t)b);
    CHECK(ms.device_current[ACX_MEM_OPTIMIZER] == (int64_t)(2 * b));
    CHECK(ms.current[ACX_MEM_PARAMS] == 0 && ms.current[ACX_MEM_GRADS] == 0 &&
          ms.current[ACX_MEM_OPTIMIZER] == 0);
    CHECK(acx_unit_acquire(net.u[0]) == ACX_OK);
    if (dev_state == ACX_DEVICE_STATE_EMULATED) {
        CHECK(acx_devops_emulated_owns(acx_param_data(net.p[0]), 21 * sizeof(float)));
        CHECK(acx_devops_emulated_owns(acx_param_grad(net.p[1]), 5 * sizeof(float)));
    }
    CHECK(acx_unit_release(net.u[0]) == ACX_OK);
    net_close(&net);
    CHECK_OK(acx_memory_stats(&ms));
    CHECK(ms.device_current_total == 0);
    return 0;
error:
    net_close(&net);
    return 1;
}

static int test_sgd(void) {
    opts_t o = {.opt = OPT_SGD_MOM, .reduce = -1, .poison_step = -1};
    CHECK(compare_runs(o, 4) == 0);
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
        /* the first micro-step's gradients are this rank's own, unreduced */
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
        if (dev_state == ACX_DEVICE_STATE_EMULATED) {
            CHECK(compare_runs(o, 3) == 0);
            for (int s = 0; s < 3; s++)
                CHECK(rh.norms[s] == rd.norms[s] && rh.norms[s] > maxn[t]);
        } else { /* cuda: the norm is a tree-order sum */
            o.device = 0;
            CHECK_OK(run(&o, 3, &rh));
            o.device = 1;
            CHECK_OK(run(&o, 3, &rd));
            for (int s = 0; s < 3; s++)
                CHECK(fabs(rh.norms[s] - rd.norms[s]) <= 1e-12 * rh.norms[s] &&
                      rh.norms[s] > maxn[t]);
            CHECK(close_rel(rh.params, rd.params, NPV, 1e-6, "clipped params"));
        }
    }
    return 0;
error:
    return 1;
}

/* acx_clip_grad_value(0.5) before each of 3 SGD steps: the clipped
 * reduced gradients and the parameters bitwise the host run's (clamping is
 * exact on every device, cuda included), and the clipped gradients equal
 * the reduced ones clamped here by hand; some were clipped, some not. */
static int test_clip_value(void) {
    const float v = 0.5f;
    opts_t o = {.opt = OPT_SGD_MOM, .reduce = -1, .poison_step = -1, .clip_value = v};
    CHECK(compare_runs(o, 3) == 0);
    const size_t n = rd.shard_numel; /* this rank's shard (NPV under NO_SHARD) */
    CHECK(n == rh.shard_numel && n <= NPV);
    int clipped = 0, kept = 0;
    for (int s = 0; s < 3; s++) {
        CHECK(same_bits(rh.grads_unclipped[s], rd.grads_unclipped[s], n, "reduced grads"));
        CHECK(same_bits(rh.grads_clipped[s], rd.grads_clipped[s], n, "clipped grads"));
        for (size_t e = 0; e < n; e++) {
            float g = rd.grads_unclipped[s][e], want = g < -v ? -v : (g > v ? v : g);
            CHECK(memcmp(&rd.grads_clipped[s][e], &want, sizeof want) == 0);
            clipped += fabsf(g) > v;
            kept += g != 0.0f && fabsf(g) < v;
        }
    }
    /* every rank's shard has both kinds unless it owns (almost) nothing */
    CHECK(n < 4 || (clipped > 0 && kept > 0));
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
    if (!ok)
        fprintf(stderr, "\ndataset %s differs between the host and device checkpoints\n", path);
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
 * named as the parameter) of the host and the device run hold the same
 * bytes. */
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

/* Load `file` into a fresh net (device or host), check it holds `want`,
 * then one more step must equal `after`. */
static int load_and_check(int device, const char *file, const result_t *want,
                          const result_t *after) {
    opts_t o = {.opt = OPT_ADAMW, .reduce = -1, .poison_step = -1, .device = device};
    net_t net = {0};
    static result_t got;
    memset(&got, 0, sizeof got);
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(acx_load_state(net.acc, file, 1));
    CHECK_OK(observe(&net, &got));
    CHECK(same_bits(want->params, got.params, NPV, "loaded params"));
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
    char hfile[1200], dfile[1200], hwfile[1200], dwfile[1200];
    snprintf(hfile, sizeof hfile, "%s/ddp_device_host_%d_s%d.h5", dir, world, strategy);
    snprintf(dfile, sizeof dfile, "%s/ddp_device_dev_%d_s%d.h5", dir, world, strategy);
    snprintf(hwfile, sizeof hwfile, "%s/ddp_device_host_weights_%d_s%d.h5", dir, world, strategy);
    snprintf(dwfile, sizeof dwfile, "%s/ddp_device_dev_weights_%d_s%d.h5", dir, world, strategy);
    static result_t h2, d2, h3;
    opts_t o = {.opt = OPT_ADAMW, .reduce = -1, .poison_step = -1};
    net_t net = {0};
    for (int device = 0; device < 2; device++) {
        o.device = device;
        result_t *r = device ? &d2 : &h2;
        memset(r, 0, sizeof *r);
        CHECK_OK(net_open(&net, &o));
        CHECK_OK(train(&net, &o, 2, 0, r));
        CHECK_OK(acx_save_state(net.acc, device ? dfile : hfile));
        CHECK_OK(acx_model_save_weights(net.m, device ? dwfile : hwfile));
        net_close(&net);
    }
    CHECK(compare_files(hfile, dfile) == 0);
    CHECK(compare_weights(hwfile, dwfile) == 0);
    o.device = 0;
    CHECK_OK(run(&o, 3, &h3));                      /* 3 uninterrupted host steps */
    CHECK(load_and_check(1, hfile, &h2, &h3) == 0); /* host file -> device state */
    CHECK(load_and_check(0, dfile, &d2, &h3) == 0); /* device file -> host state */
    return 0;
error:
    net_close(&net);
    return 1;
}

/* The NCCL test double (backend nccl + device_state emulated): host
 * buffers given to the backend are refused as the NCCL backend would fault
 * on them, while the host-data helpers (acx_reduce_scalar) go through MPI
 * and work. */
static int check_double(net_t *net) {
    CHECK(strcmp(net->m->ctx.world->ops->name, "nccl-emulated") == 0);
    float host[4] = {1, 2, 3, 4};
    CHECK_STATUS(acx_all_reduce(net->acc, host, host, 4, ACX_DTYPE_FLOAT32, ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "sendbuf");
    CHECK(strstr(acx_last_error(), "is host memory: the NCCL backend would fault on it") != NULL);
    double sum = 0;
    CHECK_OK(acx_reduce_scalar(net->acc, rank + 1.0, ACX_OP_SUM, &sum));
    CHECK(sum == world * (world + 1) / 2.0);
    return 0;
error:
    return 1;
}

/* Device state on a host-memory backend: the collectives still take the
 * accelerator's memory only (acx/collectives.h), as they do on NCCL. */
static int check_space(net_t *net) {
    float host[4] = {1, 2, 3, 4}, got[4];
    void *buf = NULL;
    CHECK_STATUS(acx_all_reduce(net->acc, host, host, 4, ACX_DTYPE_FLOAT32, ACX_OP_SUM),
                 ACX_ERR_INVALID_ARG, "is host memory, but this accelerator's collectives move");
    CHECK_OK(acx_buffer_alloc(net->acc, sizeof host, &buf));
    for (int i = 0; i < 4; i++)
        host[i] = (float)(rank + 1);
    CHECK_OK(acx_buffer_from_host(net->acc, buf, host, sizeof host));
    CHECK_OK(acx_all_reduce(net->acc, NULL, buf, 4, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK_OK(acx_buffer_to_host(net->acc, got, buf, sizeof got));
    for (int i = 0; i < 4; i++)
        CHECK(got[i] == (float)(world * (world + 1) / 2));
    acx_buffer_free(net->acc, buf);
    return 0;
error:
    acx_buffer_free(net->acc, buf);
    return 1;
}

static int test_refusals(void) {
    net_t net = {0};
    opts_t o = {.device = 1, .opt = OPT_SGD_MOM, .reduce = -1, .poison_step = -1};
    if (dev_state == ACX_DEVICE_STATE_EMULATED) {
        /* the emulated device with backend nccl is the NCCL test double,
         * with every strategy; a program's host buffer is refused there */
        o.backend = ACX_BACKEND_NCCL + 1;
        CHECK_OK(net_open(&net, &o));
        CHECK(check_double(&net) == 0);
        net_close(&net);
        o.backend = 0;
    }
    CHECK_OK(net_open(&net, &o));
    if (strcmp(net.m->ctx.world->ops->name, "mpi") == 0) CHECK(check_space(&net) == 0);
    CHECK_OK(acx_set_compute_stream(net.acc, NULL));
    CHECK_OK(acx_accumulate_begin(net.acc));
    CHECK_OK(backward(&net, 0, -1, NULL));
    CHECK_OK(acx_optimizer_step(net.opt));
    CHECK_OK(acx_accumulate_end(net.acc));
    net_close(&net);
    o.device = 0;
    CHECK_OK(net_open(&net, &o));
    CHECK_OK(acx_set_compute_stream(net.acc, NULL));
    CHECK_STATUS(acx_set_compute_stream(net.acc, (void *)&net), ACX_ERR_STATE, "host memory");
    net_close(&net);
    return 0;
error:
    net_close(&net);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 300, &rank, &world);
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) dev_state = ACX_DEVICE_STATE_CUDA;
    if (argc > 1 && strcmp(argv[1], "nccl") == 0) {
        dev_state = ACX_DEVICE_STATE_CUDA;
        dev_backend = ACX_BACKEND_NCCL;
    }
    if (argc > 1 && strcmp(argv[1], "nccl_emulated") == 0) /* the NCCL test double */
        dev_backend = ACX_BACKEND_NCCL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "shard_grad_op") == 0) strategy = ACX_SHARD_GRAD_OP;
        if (strcmp(argv[i], "full_shard") == 0) strategy = ACX_FULL_SHARD;
        if (strcmp(argv[i], "hybrid_shard") == 0) strategy = ACX_HYBRID_SHARD;
    }
    acx_test_tmp_path(dir, sizeof dir, "");
    if (dev_state == ACX_DEVICE_STATE_CUDA) {
        /* no GPU (or no CUDA build): SKIP, agreed */
        opts_t o = {.device = 1, .opt = OPT_ADAMW, .reduce = -1, .poison_step = -1};
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
    failed |= acx_test_run_case("AdamW: params, moments bitwise; device memory, stats", test_adamw);
    failed |= acx_test_run_case("SGD momentum, Nesterov: params, momentum bitwise", test_sgd);
    failed |= acx_test_run_case("accumulation 2: local grads, mean, params", test_accumulate);
    failed |= acx_test_run_case("clip_grad_norm 2 and inf: norms, params", test_clip);
    failed |= acx_test_run_case("clip_grad_value 0.5: clipped grads, params", test_clip_value);
    failed |= acx_test_run_case("bf16 + bf16 reduce: copies, master, moments", test_bf16);
    failed |= acx_test_run_case("fp16: an inf on one rank skips everywhere", test_fp16_skip);
    failed |= acx_test_run_case("checkpoint: same datasets, cross-loading", test_checkpoint);
    failed |= acx_test_run_case("nccl double: host buffers refused; compute stream", test_refusals);
    MPI_Finalize();
    return failed;
}

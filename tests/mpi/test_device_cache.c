/*
 * tests/mpi/test_device_cache.c — the device caching allocator
 * (device/cache.h) under the sharded strategies, on the emulated
 * device (device_state: emulated; tests/mpi/device_cache.test at 1 and 2
 * ranks).
 *
 * For FULL_SHARD (fp32, and bf16 with a bf16 reduce: the 16-bit send
 * buffers) and SHARD_GRAD_OP, the same model, data and 5 AdamW steps run
 * twice in one process, with the cache and without it
 * (ACX_DEVICE_CACHE_DISABLE=1). The count of the emulated table's
 * underlying allocations (acx_devops_emulated_counters, kept by the table,
 * not by the cache) is read after every step:
 *   - with the cache it does not grow after step 1 (every buffer of a step
 *     is served from the blocks step 1 left); without it, it grows every
 *     step (so the count is one that can fail);
 *   - the parameters (acx_param_gather) and both moments are bitwise the
 *     same with and without the cache (the cache fills reused blocks that
 *     need no zeroing with NaN bytes on the emulated device, so a read of
 *     stale contents would show here);
 *   - acx_memory_stats: device_cached > 0 with the cache (0 without), and
 *     device_current_total the same in both runs (in-use bytes only);
 *     acx_memory_empty_cache makes device_cached 0 and unmaps exactly that
 *     many bytes of the emulated device; after acx_finalize no emulated
 *     allocation is left.
 */
#include <stdint.h>
#include <stdlib.h>

#include "device/cache.h"
#include "runtime/optim_state.h"
#include "sharding/model.h"
#include "tests/acx_test_mpi.h"

#define NPAR  4
#define NPV   (48 + 36 + 6 + 18)
#define STEPS 5

static int rank, world;

static const int par_off[NPAR + 1] = {0, 48, 84, 90, NPV};
static const int par_unit[NPAR] = {0, 1, 1, 2};

typedef struct net {
    acx_accelerator_t *acc;
    acx_model_t *m;
    acx_unit_t *u[3];
    acx_param_t *p[NPAR];
    acx_optimizer_t *opt;
} net_t;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        acx_status_t st_ = (call);                                                                 \
        if (st_ != ACX_OK) return st_;                                                             \
    } while (0)

static acx_status_t net_open(net_t *net, int strategy, int bf16) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.seed = 77;
    cfg.sharding_strategy = strategy;
    cfg.device_state = ACX_DEVICE_STATE_EMULATED;
    cfg.backend = ACX_BACKEND_MPI;
    if (bf16) {
        cfg.mixed_precision = ACX_MP_BF16;
        cfg.reduce_dtype = ACX_REDUCE_BF16;
    }
    memset(net, 0, sizeof *net);
    TRY(acx_init(NULL, NULL, &cfg, &net->acc));
    TRY(acx_model_create(net->acc, &net->m));
    for (int u = 0; u < 3; u++) {
        char name[8];
        snprintf(name, sizeof name, "u%d", u);
        TRY(acx_model_add_unit(net->m, name, &net->u[u]));
    }
    TRY(acx_unit_add_param(net->u[0], "w0", 2, (int64_t[]){8, 6}, ACX_INIT_SPEC_LINEAR_WEIGHT,
                           &net->p[0]));
    TRY(acx_unit_add_param(net->u[1], "w1", 2, (int64_t[]){6, 6}, ACX_INIT_SPEC_LINEAR_WEIGHT,
                           &net->p[1]));
    TRY(acx_unit_add_param(net->u[1], "b1", 1, (int64_t[]){6}, ACX_INIT_SPEC_CONSTANT(0.25),
                           &net->p[2]));
    TRY(acx_unit_add_param(net->u[2], "w2", 2, (int64_t[]){3, 6}, ACX_INIT_SPEC_LINEAR_WEIGHT,
                           &net->p[3]));
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
    hp.lr = 1e-2;
    TRY(acx_adamw_create(net->m, &hp, &net->opt));
    return acx_prepare(net->acc, net->m, net->opt, NULL);
}

static void net_close(net_t *net) {
    if (net->acc) acx_finalize(net->acc);
    net->acc = NULL;
}

/* gradient element e of rank r at step s: a multiple of 2^-10 in (-2, 2) */
static float grad_val(int s, int r, int e) {
    uint32_t h = acx_test_hash3(r, (size_t)e, 500 + s);
    return (float)((int)(h % 4001u) - 2000) / 1024.0f;
}

/* One step: forward (acquire/release every unit), backward in reverse unit
 * order writing gradients through the device table, the optimizer step. */
static acx_status_t step(net_t *net, int s) {
    const acx_devops_t *d = net->m->ctx.dev;
    float tmp[NPV];
    TRY(acx_accumulate_begin(net->acc));
    for (int u = 0; u < 3; u++) {
        TRY(acx_unit_acquire(net->u[u]));
        TRY(acx_unit_release(net->u[u]));
    }
    for (int u = 2; u >= 0; u--) {
        TRY(acx_unit_acquire(net->u[u]));
        for (int q = 0; q < NPAR; q++) {
            if (par_unit[q] != u) continue;
            size_t n = (size_t)(par_off[q + 1] - par_off[q]);
            for (size_t k = 0; k < n; k++)
                tmp[k] = grad_val(s, rank, par_off[q] + (int)k);
            TRY(d->to_device(acx_param_grad(net->p[q]), tmp, n * sizeof(float),
                             net->m->ctx.stream));
        }
        TRY(acx_unit_grads_ready(net->u[u]));
        TRY(acx_unit_release(net->u[u]));
    }
    TRY(acx_backward_end(net->acc));
    TRY(acx_optimizer_step(net->opt));
    TRY(acx_optimizer_zero_grad(net->opt));
    return acx_accumulate_end(net->acc);
}

typedef struct result {
    float params[NPV];
    float state[2][NPV];
    size_t calls[STEPS]; /* the emulated table's allocations after each step */
    acx_memory_stats_t stats;
    size_t live_before_empty, live_after_empty, live_after_finalize, live_start;
} result_t;

static acx_status_t run(int strategy, int bf16, int cache, result_t *r) {
    net_t net;
    memset(r, 0, sizeof *r);
    if (!cache) setenv("ACX_DEVICE_CACHE_DISABLE", "1", 1);
    acx_devops_emulated_counters(NULL, &r->live_start);
    acx_status_t st = net_open(&net, strategy, bf16);
    for (int s = 0; st == ACX_OK && s < STEPS; s++) {
        st = step(&net, s);
        acx_devops_emulated_counters(&r->calls[s], NULL);
    }
    for (int q = 0; st == ACX_OK && q < NPAR; q++)
        st = acx_param_gather(net.p[q], r->params + par_off[q]);
    for (int k = 0; st == ACX_OK && k < 2; k++)
        st = net.m->ctx.dev->to_host(r->state[k], acx_optimizer_state(net.opt, k),
                                     net.m->shard_numel * sizeof(float), net.m->ctx.stream);
    if (st == ACX_OK) st = acx_memory_stats(&r->stats);
    acx_devops_emulated_counters(NULL, &r->live_before_empty);
    acx_memory_empty_cache();
    acx_devops_emulated_counters(NULL, &r->live_after_empty);
    net_close(&net);
    acx_devops_emulated_counters(NULL, &r->live_after_finalize);
    unsetenv("ACX_DEVICE_CACHE_DISABLE");
    return st;
}

static int same_bits(const float *a, const float *b, size_t n, const char *what) {
    if (memcmp(a, b, n * sizeof(float)) == 0) return 1;
    fprintf(stderr, "\n[r%d] %s differ with and without the cache\n", rank, what);
    return 0;
}

static result_t on, off;

static int check_strategy(int strategy, int bf16) {
    CHECK_OK(run(strategy, bf16, 1, &on));
    CHECK_OK(run(strategy, bf16, 0, &off));
    /* the table is called in step 1 only with the cache, every step without */
    for (int s = 1; s < STEPS; s++) {
        CHECK(on.calls[s] == on.calls[0]);
        CHECK(off.calls[s] > off.calls[s - 1]);
    }
    CHECK(same_bits(on.params, off.params, NPV, "parameters"));
    for (int k = 0; k < 2; k++)
        CHECK(same_bits(on.state[k], off.state[k], NPV, "moments"));
    int moved = 0;
    for (int k = 0; k < NPV; k++)
        moved |= on.state[0][k] != 0.0f;
    CHECK(moved);
    /* in use: the same; cached: only with the cache, and empty_cache unmaps it */
    CHECK(on.stats.device_current_total == off.stats.device_current_total);
    CHECK(on.stats.device_cached > 0 && off.stats.device_cached == 0);
    CHECK(on.live_before_empty - on.live_after_empty == (size_t)on.stats.device_cached);
    CHECK(off.live_before_empty == off.live_after_empty);
    CHECK(acx_devcache_bytes() == 0);
    CHECK(on.live_after_finalize == on.live_start && off.live_after_finalize == off.live_start);
    return 0;
error:
    return 1;
}

static int test_full_shard(void) { return check_strategy(ACX_FULL_SHARD, 0); }
static int test_full_shard_bf16(void) { return check_strategy(ACX_FULL_SHARD, 1); }
static int test_grad_op(void) { return check_strategy(ACX_SHARD_GRAD_OP, 0); }

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 300, &rank, &world);
    int failed = 0;
    failed |= acx_test_run_case("device cache: FULL_SHARD fp32", test_full_shard);
    failed |=
        acx_test_run_case("device cache: FULL_SHARD bf16 (send buffers)", test_full_shard_bf16);
    failed |= acx_test_run_case("device cache: SHARD_GRAD_OP fp32", test_grad_op);
    MPI_Finalize();
    return failed;
}

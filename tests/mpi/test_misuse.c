/*
 * tests/mpi/test_misuse.c — programming mistakes get a clear status, on
 * every rank, instead of a crash or a hang:
 *   - ranks registering different models: acx_prepare fails everywhere;
 *   - ranks opening a loader with different batch sizes: the open fails everywhere;
 *   - a unit that never reports its gradients: acx_backward_end names it;
 *   - parameter names that cannot be HDF5 dataset names are refused;
 *   - NULL accelerators in the accessors return -1/0/NULL;
 *   - a non-blocking all-reduce never waited for is completed by acx_finalize;
 *   - acx_optimizer_step without this boundary's reduced gradients (on a
 *     non-boundary micro-step, before acx_backward_end, twice) is refused on
 *     every rank and leaves the weights alone, under no_shard and full_shard;
 *   - acx_accumulate_items in only some micro-steps of a window (not on the
 *     boundary; only on the boundary) is reported by acx_backward_end on
 *     every rank instead of silently falling back to another normalization.
 */
#include "tests/acx_test_mpi.h"

static int rank, world;

static int run(const char *data) {
    acx_accelerator_t *acc = NULL;
    acx_model_t *m;
    acx_unit_t *u1, *u2;
    acx_param_t *p;
    acx_dataloader_t *dl;
    CHECK_OK(acx_init(NULL, NULL, NULL, &acc));

    CHECK(acx_rank(NULL) == -1 && acx_world_size(NULL) == -1 && acx_is_main_process(NULL) == 0);
    CHECK(acx_get_config(NULL) == NULL && acx_step(NULL) == -1);

    CHECK_OK(acx_model_create(acc, &m));
    CHECK_OK(acx_model_add_unit(m, "a", &u1));
    CHECK_STATUS(acx_unit_add_param(u1, "a/b", 1, (int64_t[]){4}, ACX_INIT_SPEC_ZEROS, &p),
                 ACX_ERR_INVALID_ARG, "no '/'");
    CHECK_STATUS(acx_unit_add_param(u1, "..", 1, (int64_t[]){4}, ACX_INIT_SPEC_ZEROS, &p),
                 ACX_ERR_INVALID_ARG, "not '.' or '..'");
    /* a model whose last parameter's shape depends on the rank (when world > 1) */
    CHECK_OK(acx_unit_add_param(u1, "a.w", 1, (int64_t[]){10 + (world > 1 ? rank : 0)},
                                ACX_INIT_SPEC_ZEROS, &p));
    if (world > 1) {
        CHECK_STATUS(acx_prepare(acc, m, NULL, NULL), ACX_ERR_INVALID_ARG, "different models");
        CHECK_OK(acx_finalize(acc));
        acc = NULL;
        CHECK_OK(acx_init(NULL, NULL, NULL, &acc));
        CHECK_OK(acx_model_create(acc, &m));
        CHECK_OK(acx_model_add_unit(m, "a", &u1));
        CHECK_OK(acx_unit_add_param(u1, "a.w", 1, (int64_t[]){10}, ACX_INIT_SPEC_ZEROS, &p));
    }
    CHECK_OK(acx_model_add_unit(m, "b", &u2));
    CHECK_OK(acx_unit_add_param(u2, "b.w", 2, (int64_t[]){3, 2}, ACX_INIT_SPEC_ZEROS, &p));

    acx_dataloader_options_t o = ACX_DATALOADER_OPTIONS_DEFAULT;
    o.batch_size = 2 + (world > 1 ? rank % 2 : 0);
    if (world > 1)
        CHECK_STATUS(acx_dataloader_open(acc, data, 1, (const char *const[]){"/v"}, &o, &dl),
                     ACX_ERR_INVALID_ARG, "different arguments to acx_dataloader_open");
    o.batch_size = 2;
    CHECK_OK(acx_dataloader_open(acc, data, 1, (const char *const[]){"/v"}, &o, &dl));
    CHECK_OK(acx_prepare(acc, m, NULL, dl));

    /* unit "a" never reports: the message names it (every rank skips it, so nobody hangs) */
    CHECK_OK(acx_unit_grads_ready(u2));
    CHECK_STATUS(acx_backward_end(acc), ACX_ERR_STATE, "'a'");

    float x[4] = {1, 2, 3, 4};
    acx_request_t *req;
    CHECK_OK(acx_all_reduce_async(acc, NULL, x, 4, ACX_DTYPE_FLOAT32, ACX_OP_SUM, &req));
    /* deliberately never waited: acx_finalize must complete it */
    CHECK_OK(acx_finalize(acc));
    CHECK_CLOSE(x[3], 4.0 * world, 0, 0);
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

/* Gradient accumulation over 2 micro-steps, SGD lr 0.25 without momentum,
 * zero-initialized weights; every rank adds (rank + 1) to every gradient
 * element in each micro-step. The one legal step applies the mean over
 * ranks and micro-steps, (world + 1) / 2, so every weight ends at
 * -0.25 * (world + 1) / 2 exactly, on every rank. The misplaced steps must
 * fail with ACX_ERR_STATE: on the non-boundary micro-step each rank holds
 * only its own partial sums (NO_SHARD replicas would step apart), before
 * acx_backward_end the reductions are in flight, and a second step would
 * apply the same gradients again. */
static int add_grads(acx_unit_t *const *u, acx_param_t *const *p, int full) {
    for (int i = 1; i >= 0; i--) {
        if (full) CHECK_OK(acx_unit_acquire(u[i]));
        float *g = acx_param_grad(p[i]);
        CHECK(g != NULL);
        for (int64_t e = 0; e < acx_param_numel(p[i]); e++)
            g[e] += (float)(rank + 1);
        CHECK_OK(acx_unit_grads_ready(u[i]));
        if (full) CHECK_OK(acx_unit_release(u[i]));
    }
    return 0;
error:
    return 1;
}

static int weights_are(acx_param_t *const *p, float want) {
    float got[15];
    for (int i = 0; i < 2; i++) {
        CHECK_OK(acx_param_gather(p[i], got));
        for (int64_t e = 0; e < acx_param_numel(p[i]); e++)
            CHECK_CLOSE(got[e], want, 0, 0);
    }
    return 0;
error:
    return 1;
}

static int misplaced_steps(int strategy) {
    acx_accelerator_t *acc = NULL;
    acx_model_t *m;
    acx_unit_t *u[2];
    acx_param_t *p[2];
    acx_optimizer_t *opt;
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.sharding_strategy = strategy;
    cfg.gradient_accumulation_steps = 2;
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    CHECK(acx_get_config(acc)->sharding_strategy == strategy);
    CHECK_OK(acx_model_create(acc, &m));
    CHECK_OK(acx_model_add_unit(m, "a", &u[0]));
    CHECK_OK(acx_unit_add_param(u[0], "a.w", 2, (int64_t[]){5, 3}, ACX_INIT_SPEC_ZEROS, &p[0]));
    CHECK_OK(acx_model_add_unit(m, "b", &u[1]));
    CHECK_OK(acx_unit_add_param(u[1], "b.b", 1, (int64_t[]){2}, ACX_INIT_SPEC_ZEROS, &p[1]));
    acx_sgd_hparams_t hp = ACX_SGD_DEFAULT;
    hp.lr = 0.25;
    CHECK_OK(acx_sgd_create(m, &hp, &opt));
    CHECK_OK(acx_prepare(acc, m, opt, NULL));
    int full = strategy == ACX_FULL_SHARD;

    /* micro-step 1 of 2: no boundary */
    CHECK_OK(acx_accumulate_begin(acc));
    CHECK(!acx_sync_gradients(acc));
    CHECK(add_grads(u, p, full) == 0);
    CHECK_OK(acx_backward_end(acc));
    CHECK_STATUS(acx_optimizer_step(opt), ACX_ERR_STATE, "no reduced gradients");
    CHECK_OK(acx_accumulate_end(acc));
    CHECK(weights_are(p, 0.0f) == 0);

    /* micro-step 2: the boundary */
    CHECK_OK(acx_accumulate_begin(acc));
    CHECK(acx_sync_gradients(acc));
    CHECK(add_grads(u, p, full) == 0);
    CHECK_STATUS(acx_optimizer_step(opt), ACX_ERR_STATE, "after acx_backward_end");
    CHECK_OK(acx_backward_end(acc));
    CHECK_OK(acx_optimizer_step(opt));
    CHECK_STATUS(acx_optimizer_step(opt), ACX_ERR_STATE, "once per synchronization boundary");
    CHECK_STATUS(acx_clip_grad_norm(acc, 1.0, 2.0, NULL), ACX_ERR_STATE, "no reduced gradients");
    CHECK_OK(acx_optimizer_zero_grad(opt));
    CHECK_OK(acx_accumulate_end(acc));
    CHECK(acx_optimizer_num_steps(opt) == 1);
    CHECK(weights_are(p, -0.25f * (float)(world + 1) / 2.0f) == 0);
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

/* Accumulation over 2 micro-steps, 3 items per micro-batch and rank, every
 * rank adding (rank + 1) to every gradient element per micro-step. Windows
 * that report items in only one of their micro-steps fail at the boundary's
 * acx_backward_end (and nothing steps); the window that reports both steps
 * with the item mean: sum_r 2 (r + 1) / (2 x 3 x world) = (world + 1) / 6. */
static int partial_items(void) {
    acx_accelerator_t *acc = NULL;
    acx_model_t *m;
    acx_unit_t *u[2];
    acx_param_t *p[2];
    acx_optimizer_t *opt;
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.gradient_accumulation_steps = 2;
    CHECK_OK(acx_init(NULL, NULL, &cfg, &acc));
    CHECK_OK(acx_model_create(acc, &m));
    CHECK_OK(acx_model_add_unit(m, "a", &u[0]));
    CHECK_OK(acx_unit_add_param(u[0], "a.w", 2, (int64_t[]){5, 3}, ACX_INIT_SPEC_ZEROS, &p[0]));
    CHECK_OK(acx_model_add_unit(m, "b", &u[1]));
    CHECK_OK(acx_unit_add_param(u[1], "b.b", 1, (int64_t[]){2}, ACX_INIT_SPEC_ZEROS, &p[1]));
    acx_sgd_hparams_t hp = ACX_SGD_DEFAULT;
    hp.lr = 0.25;
    CHECK_OK(acx_sgd_create(m, &hp, &opt));
    CHECK_OK(acx_prepare(acc, m, opt, NULL));
    /* window w reports items in micro-step 1 (w = 0), 2 (w = 1), both (w = 2) */
    for (int w = 0; w < 3; w++) {
        for (int micro = 1; micro <= 2; micro++) {
            CHECK_OK(acx_accumulate_begin(acc));
            if (w == 2 || w + 1 == micro) CHECK_OK(acx_accumulate_items(acc, 3));
            CHECK(add_grads(u, p, 0) == 0);
            if (micro == 1 || w == 2) {
                CHECK_OK(acx_backward_end(acc));
            } else {
                CHECK_STATUS(acx_backward_end(acc), ACX_ERR_STATE, "called in 1 of the 2");
                CHECK_STATUS(acx_optimizer_step(opt), ACX_ERR_STATE, "no reduced gradients");
            }
            if (micro == 2 && w == 2) CHECK_OK(acx_optimizer_step(opt));
            if (micro == 2) CHECK_OK(acx_optimizer_zero_grad(opt));
            CHECK_OK(acx_accumulate_end(acc));
        }
    }
    CHECK(acx_optimizer_num_steps(opt) == 1 && acx_accumulated_items(acc) == 6 * world);
    {
        float got[15];
        for (int i = 0; i < 2; i++) {
            CHECK_OK(acx_param_gather(p[i], got));
            for (int64_t e = 0; e < acx_param_numel(p[i]); e++)
                CHECK_CLOSE(got[e], -0.25 * (world + 1) / 6.0, 1e-6, 0);
        }
    }
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

static int misplaced_steps_no_shard(void) { return misplaced_steps(ACX_NO_SHARD); }
static int misplaced_steps_full_shard(void) { return misplaced_steps(ACX_FULL_SHARD); }

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 60, &rank, &world);
    char data[1100], name[64];
    snprintf(name, sizeof name, "misuse_%d.h5", world);
    acx_test_tmp_path(data, sizeof data, name);
    int32_t v[12] = {0};
    int failed = acx_test_write_i32(rank, data, "v", v, 12);
    TESTING("misuse: mismatched models/loaders, missing report, bad names, NULL, unwaited request");
    if (!failed) failed = run(data);
    failed = acx_test_report(failed);
    failed |= acx_test_run_case("misuse: misplaced optimizer steps refused (no_shard)",
                                misplaced_steps_no_shard);
    failed |= acx_test_run_case("misuse: misplaced optimizer steps refused (full_shard)",
                                misplaced_steps_full_shard);
    failed |=
        acx_test_run_case("misuse: acx_accumulate_items in some micro-steps only", partial_items);
    MPI_Finalize();
    return failed ? 1 : 0;
}

/*
 * tests/mpi/test_misuse.c — programming mistakes get a clear status, on
 * every rank, instead of a crash or a hang:
 *   - ranks registering different models: acx_prepare fails everywhere;
 *   - ranks opening a loader with different batch sizes: the open fails everywhere;
 *   - a unit that never reports its gradients: acx_backward_end names it;
 *   - parameter names that cannot be HDF5 dataset names are refused;
 *   - NULL accelerators in the accessors return -1/0/NULL;
 *   - a non-blocking all-reduce never waited for is completed by acx_finalize.
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
    CHECK_OK(acx_unit_add_param(u1, "a.w", 1, (int64_t[]){10 + (world > 1 ? rank : 0)}, ACX_INIT_SPEC_ZEROS, &p));
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
    MPI_Finalize();
    return failed ? 1 : 0;
}

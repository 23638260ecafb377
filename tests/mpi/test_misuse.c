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
#include <hdf5.h>
#include <mpi.h>
#include <sys/stat.h>

#include "tests/acx_test.h"

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
    acx_test_watchdog(60);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    acx_test_rank_ = rank;
    char dir[1024], data[1100];
    const char *b = getenv("top_builddir");
    snprintf(dir, sizeof dir, "%s/tests/tmp", b ? b : ".");
    mkdir(dir, 0755);
    snprintf(data, sizeof data, "%s/misuse_%d.h5", dir, world);
    int failed = 0;
    if (rank == 0) {
        int32_t v[12] = {0};
        hsize_t dims[1] = {12};
        hid_t f = H5Fcreate(data, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hid_t s = H5Screate_simple(1, dims, NULL);
        hid_t d = H5Dcreate2(f, "v", H5T_NATIVE_INT32, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        failed = f < 0 || d < 0 || H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0;
        H5Dclose(d); H5Sclose(s); H5Fclose(f);
    }
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    TESTING("misuse: mismatched models/loaders, missing report, bad names, NULL, unwaited request");
    if (!failed) failed = run(data);
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (failed) FAILED(); else PASSED();
    MPI_Finalize();
    return failed ? 1 : 0;
}

/*
 * tests/gpu/test_device.c — the device choice and the backend selection
 * match what this machine has, in every build (with or without CUDA, with
 * or without a GPU):
 *   - no device visible (no CUDA in the build, no driver, none visible):
 *     acx_device_count is 0 with a reason; backend nccl is refused with
 *     ACX_ERR_NOT_SUPPORTED naming that reason; auto picks mpi; binding a
 *     device for a device backend is refused; acx_init runs on host memory
 *     (acx_device -1), and backend: nccl fails acx_init on every rank;
 *   - devices visible (a GPU machine): backend nccl is selected (when built
 *     with NCCL), and binding gives local rank modulo the device count,
 *     which is CUDA's current device afterwards.
 * Auto picks nccl only where NCCL is usable AND device_state is cuda
 * (collectives/coll.c, acx_coll_decide): mpi without a device, or with any
 * other device_state. The NCCL test double (nccl-emulated) binds no device.
 * Run on 1 and 2 ranks (tests/gpu/device.test).
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "device/device.h"
#include "tests/acx_test_mpi.h"

#if ACX_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if ACX_HAVE_NCCL
#include "collectives/nccl/coll_nccl.h"
#endif

static int rank, world, local_rank, local_size;

/* acx_init on host memory: acx_device is -1 whatever the machine has
 * (backend auto stays on mpi). Runs first, before this test binds a device. */
static int test_init_host(void) {
    acx_accelerator_t *acc = NULL;
    CHECK(acx_device(NULL) == -1);
    CHECK_OK(acx_init(NULL, NULL, NULL, &acc));
    CHECK(acx_device(acc) == -1);
    CHECK(acx_local_rank(acc) == local_rank);
    CHECK_OK(acx_finalize(acc));
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

/* backend: nccl without a device (or without NCCL) stops acx_init on every
 * rank with ACX_ERR_NOT_SUPPORTED. */
static int test_init_nccl_refused(void) {
    acx_accelerator_t *acc = NULL;
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.backend = ACX_BACKEND_NCCL;
    CHECK_STATUS(acx_init(NULL, NULL, &cfg, &acc), ACX_ERR_NOT_SUPPORTED, "nccl");
    CHECK(acc == NULL);
    return 0;
error:
    if (acc) acx_finalize(acc);
    return 1;
}

static int test_no_device(void) {
    char why[256] = "unset";
    const acx_coll_ops_t *ops = NULL;
    CHECK(acx_device_count(why, sizeof why) == 0);
    CHECK(why[0] != '\0' && strcmp(why, "unset") != 0);
#if !ACX_HAVE_CUDA
    CHECK(strstr(why, "no CUDA") != NULL);
#endif
    /* nccl: refused, naming why and what to use instead */
    CHECK_STATUS(acx_coll_select(ACX_BACKEND_NCCL, ACX_DEVICE_STATE_CUDA, &ops),
                 ACX_ERR_NOT_SUPPORTED, "backend: mpi");
#if ACX_HAVE_NCCL
    CHECK(strstr(acx_last_error(), "no CUDA device") != NULL);
    CHECK(strstr(acx_last_error(), why) != NULL);
#else
    CHECK(strstr(acx_last_error(), "this build has no NCCL") != NULL);
#endif
    CHECK(ops == NULL);
    CHECK_OK(acx_coll_select(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_CUDA, &ops));
    CHECK(ops == &acx_coll_mpi_ops);
    /* host backend, and the NCCL test double: nothing bound */
    CHECK_OK(acx_coll_device_setup(&acx_coll_mpi_ops, local_rank, local_size));
    CHECK(acx_device_bound() == -1);
    CHECK_OK(acx_coll_device_setup(&acx_coll_nccl_emul_ops, local_rank, local_size));
    CHECK(acx_device_bound() == -1);
#if ACX_HAVE_NCCL
    /* a device backend without a device */
    CHECK_STATUS(acx_coll_device_setup(&acx_coll_nccl_ops, local_rank, local_size),
                 ACX_ERR_NOT_SUPPORTED, "needs a CUDA device");
    CHECK(acx_device_bound() == -1);
#endif
    return 0;
error:
    return 1;
}

#if ACX_HAVE_CUDA
static int test_devices(int count) {
    const acx_coll_ops_t *ops = NULL;
    /* auto: MPI unless the model state is on the device (device_state: cuda) */
    CHECK_OK(acx_coll_select(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_AUTO, &ops));
    CHECK(ops == &acx_coll_mpi_ops);
    CHECK_OK(acx_coll_device_setup(&acx_coll_mpi_ops, local_rank, local_size));
    CHECK(acx_device_bound() == -1);
#if ACX_HAVE_NCCL
    ops = NULL;
    CHECK_OK(acx_coll_select(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_CUDA, &ops));
    CHECK(ops == &acx_coll_nccl_ops);
    ops = NULL;
    CHECK_OK(acx_coll_select(ACX_BACKEND_NCCL, ACX_DEVICE_STATE_CUDA, &ops));
    CHECK(ops == &acx_coll_nccl_ops && ops->device_memory && strcmp(ops->name, "nccl") == 0);
    CHECK_OK(acx_coll_device_setup(&acx_coll_nccl_ops, local_rank, local_size));
    CHECK(acx_device_bound() == local_rank % count);
    int current = -1;
    CHECK(cudaGetDevice(&current) == cudaSuccess && current == local_rank % count);
#endif
    return 0;
error:
    return 1;
}
#endif

int main(int argc, char **argv) {
    int failed = 0;
    acx_test_mpi_begin(&argc, &argv, 120, &rank, &world);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);

    int count = acx_device_count(NULL, 0);
    failed |= acx_test_run_case("device: acx_init on host memory, acx_device -1", test_init_host);
    if (count == 0) {
        failed |= acx_test_run_case("device: backend nccl refused at acx_init without a device",
                                    test_init_nccl_refused);
        failed |= acx_test_run_case("device: no device: nccl refused, auto = mpi, none bound",
                                    test_no_device);
    } else {
#if ACX_HAVE_CUDA
        if (rank == 0) printf("(%d CUDA device%s visible)\n", count, count == 1 ? "" : "s");
        TESTING("device: nccl selected, device = local rank % devices");
        failed |= acx_test_report(test_devices(count));
#endif
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}

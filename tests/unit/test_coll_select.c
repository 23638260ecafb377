/*
 * tests/unit/test_coll_select.c — the backend decision (collectives/coll.c,
 * acx_coll_decide) over every (backend, device_state, NCCL usable) triple,
 * against a table written out by hand from the rule in coll.h:
 *
 *   backend  device_state  NCCL usable   pick
 *   mpi      any           any           mpi
 *   nccl     emulated      any           nccl-emulated (the test double)
 *   nccl     other         yes           nccl
 *   nccl     other         no            ACX_ERR_NOT_SUPPORTED, naming why
 *   auto     cuda          yes           nccl
 *   auto     other / any   no / other    mpi, saying why
 *
 * plus the reasons auto gives (the info line) and the argument errors. Pure:
 * no MPI, no device.
 */
#include <string.h>

#include "collectives/coll.h"
#include "tests/acx_test.h"

/* The table above: -1 for the refusal. */
static int expected(int kind, int ds, int usable) {
    if (kind == ACX_BACKEND_MPI) return ACX_COLL_PICK_MPI;
    if (kind == ACX_BACKEND_NCCL) {
        if (ds == ACX_DEVICE_STATE_EMULATED) return ACX_COLL_PICK_NCCL_EMULATED;
        return usable ? ACX_COLL_PICK_NCCL : -1;
    }
    return usable && ds == ACX_DEVICE_STATE_CUDA ? ACX_COLL_PICK_NCCL : ACX_COLL_PICK_MPI;
}

static int test_table(void) {
    TESTING("backend decision: every (backend, device_state, usable)");
    char why[512];
    int n = 0;
    for (int kind = ACX_BACKEND_AUTO; kind <= ACX_BACKEND_NCCL; kind++)
        for (int ds = ACX_DEVICE_STATE_AUTO; ds <= ACX_DEVICE_STATE_EMULATED; ds++)
            for (int usable = 0; usable < 2; usable++) {
                acx_coll_pick_t pick = (acx_coll_pick_t)99;
                acx_status_t st =
                    acx_coll_decide((acx_backend_kind_t)kind, (acx_device_state_t)ds, usable,
                                    "no CUDA device: test", &pick, why, sizeof why);
                int want = expected(kind, ds, usable);
                if (want < 0) {
                    CHECK(st == ACX_ERR_NOT_SUPPORTED);
                    CHECK(strstr(acx_last_error(), "no CUDA device: test") != NULL);
                    CHECK(strstr(acx_last_error(), "backend: mpi") != NULL);
                    CHECK(pick == (acx_coll_pick_t)99); /* not written */
                } else {
                    if (st != ACX_OK)
                        fprintf(stderr, "\nbackend %d, device_state %d, usable %d: %s\n", kind, ds,
                                usable, acx_last_error());
                    CHECK(st == ACX_OK);
                    CHECK((int)pick == want);
                    CHECK(why[0] != '\0');
                }
                n++;
            }
    CHECK(n == 24);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* What auto's info line says. */
static int test_auto_reasons(void) {
    TESTING("backend decision: auto says why");
    char why[512];
    acx_coll_pick_t pick;
    CHECK_OK(acx_coll_decide(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_CUDA, 0, "this build has no NCCL",
                             &pick, why, sizeof why));
    CHECK(pick == ACX_COLL_PICK_MPI && strstr(why, "not available: this build has no NCCL"));
    CHECK_OK(
        acx_coll_decide(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_HOST, 1, "", &pick, why, sizeof why));
    CHECK(pick == ACX_COLL_PICK_MPI && strstr(why, "device_state: host"));
    CHECK_OK(
        acx_coll_decide(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_AUTO, 1, "", &pick, why, sizeof why));
    CHECK(pick == ACX_COLL_PICK_MPI && strstr(why, "device_state: auto") &&
          strstr(why, "device_state: cuda"));
    CHECK_OK(acx_coll_decide(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_EMULATED, 1, "", &pick, why,
                             sizeof why));
    CHECK(pick == ACX_COLL_PICK_MPI && strstr(why, "backend: nccl"));
    CHECK_OK(
        acx_coll_decide(ACX_BACKEND_AUTO, ACX_DEVICE_STATE_CUDA, 1, "", &pick, why, sizeof why));
    CHECK(pick == ACX_COLL_PICK_NCCL && strstr(why, "device_state: cuda"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_bad_args(void) {
    TESTING("backend decision: bad arguments");
    char why[64];
    acx_coll_pick_t pick;
    CHECK_STATUS(acx_coll_decide((acx_backend_kind_t)7, ACX_DEVICE_STATE_AUTO, 1, "", &pick, why,
                                 sizeof why),
                 ACX_ERR_INVALID_ARG, "backend kind 7");
    CHECK_STATUS(
        acx_coll_decide(ACX_BACKEND_MPI, (acx_device_state_t)9, 1, "", &pick, why, sizeof why),
        ACX_ERR_INVALID_ARG, "device_state 9");
    CHECK_STATUS(
        acx_coll_decide(ACX_BACKEND_MPI, ACX_DEVICE_STATE_AUTO, 1, "", NULL, why, sizeof why),
        ACX_ERR_INVALID_ARG, "pick_p");
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(30);
    int failed = 0;
    failed += test_table();
    failed += test_auto_reasons();
    failed += test_bad_args();
    return failed ? 1 : 0;
}

/*
 * tests/mpi/test_stall.c — a program the stall detector must end.
 *
 * Every rank runs all-reduces in a loop with collective_timeout set from
 * argv[1] seconds; the rank named by argv[2] sleeps argv[3] seconds before
 * its 4th all-reduce (as a rank stuck in its own code would), so the others
 * wait in all-reduce #N. Run by tests/stall.test, which checks that the job
 * ends long before the sleep is over, with the diagnostic naming the rank
 * that did not arrive. Without the detector it would finish after the sleep
 * and exit 0 — which the script counts as a failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "acx/acx.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_stall TIMEOUT_S STUCK_RANK SLEEP_S\n");
        return 2;
    }
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    cfg.collective_timeout = atof(argv[1]);
    int stuck = atoi(argv[2]);
    unsigned sleep_s = (unsigned)atoi(argv[3]);
    acx_accelerator_t *acc = NULL;
    if (acx_init(&argc, &argv, &cfg, &acc) != ACX_OK) {
        fprintf(stderr, "test_stall: %s\n", acx_last_error());
        return 1;
    }
    float x = 1.0f;
    for (int i = 0; i < 8; i++) {
        if (i == 3 && acx_rank(acc) == stuck) sleep(sleep_s);
        if (acx_all_reduce(acc, &x, &x, 1, ACX_DTYPE_FLOAT32, ACX_OP_SUM) != ACX_OK) {
            fprintf(stderr, "test_stall: %s\n", acx_last_error());
            return 1;
        }
    }
    acx_finalize(acc);
    return 0;
}

/*
 * tests/mpi/test_print.c — the printing helpers. Prints, in this order:
 *   acx_print:          "main only" from rank 0 alone
 *   acx_print_ordered:  two lines per rank, in rank order, each prefixed
 *                       "[rank R/N host] "
 * tests/print.test runs it on 3 ranks and checks stdout exactly.
 */
#include <mpi.h>

#include "tests/acx_test.h"

int main(int argc, char **argv) {
    acx_accelerator_t *acc;
    acx_test_watchdog(60);
    if (acx_init(&argc, &argv, NULL, &acc) != ACX_OK) {
        fprintf(stderr, "acx_init: %s\n", acx_last_error());
        return 99;
    }
    acx_print(acc, "main only\n");
    acx_barrier(acc);
    /* ranks reach the call at different times: rank order must not depend on it */
    usleep((unsigned)(acx_world_size(acc) - acx_rank(acc)) * 20000u);
    acx_status_t st =
        acx_print_ordered(acc, "hello from %d\nsecond line %d", acx_rank(acc), acx_rank(acc) * 10);
    if (st != ACX_OK) fprintf(stderr, "acx_print_ordered: %s\n", acx_last_error());
    acx_finalize(acc);
    return st == ACX_OK ? 0 : 1;
}

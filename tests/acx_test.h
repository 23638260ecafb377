/*
 * tests/acx_test.h — the test macros (after HDF5's TESTING/PASSED/SKIPPED/
 * TEST_ERROR) with the Aluminum rule for MPI tests: ranks agree on pass/fail
 * (MPI_LOR) so every rank exits with the same code, and a watchdog turns a
 * hang into a failure.
 *
 * Exit codes follow automake: 0 pass, 77 skip, 1 fail, 99 hard error.
 * A test file calls acx_test_watchdog(seconds) first (MPI tests also set
 * acx_test_rank_); each case is a function returning 0 (ok) or 1 (failed)
 * with an `error:` label that CHECK jumps to, announced with TESTING("what")
 * and closed with PASSED() or FAILED().
 */
#ifndef ACX_TEST_H
#define ACX_TEST_H

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/acx.h"

static int acx_test_rank_ __attribute__((unused)) = 0;

static void acx_test_alarm_(int sig) {
    (void)sig;
    static const char msg[] = "TEST TIMEOUT: watchdog fired (hang?)\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing to do */
    }
    _exit(99);
}

/* Install the watchdog: the process exits 99 after timeout_s seconds. */
static inline void acx_test_watchdog(unsigned timeout_s) {
    signal(SIGALRM, acx_test_alarm_);
    alarm(timeout_s);
}

#define TESTING(what)                                                                              \
    do {                                                                                           \
        if (acx_test_rank_ == 0) {                                                                 \
            printf("Testing %-62s", (what));                                                       \
            fflush(stdout);                                                                        \
        }                                                                                          \
    } while (0)
#define PASSED()                                                                                   \
    do {                                                                                           \
        if (acx_test_rank_ == 0) puts(" PASSED");                                                  \
    } while (0)
#define SKIPPED(why)                                                                               \
    do {                                                                                           \
        if (acx_test_rank_ == 0) printf(" -SKIP- (%s)\n", (why));                                  \
    } while (0)
#define FAILED()                                                                                   \
    do {                                                                                           \
        if (acx_test_rank_ == 0) puts("*FAILED*");                                                 \
    } while (0)
#define TEST_ERROR goto error

/* Print where and why, then jump to the case's `error:` label. */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "\n[r%d] %s:%d: check failed: %s\n", acx_test_rank_, __FILE__,         \
                    __LINE__, #cond);                                                              \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        acx_status_t acx_t_st_ = (call);                                                           \
        if (acx_t_st_ != ACX_OK) {                                                                 \
            fprintf(stderr, "\n[r%d] %s:%d: %s returned %d (%s): %s\n", acx_test_rank_, __FILE__,  \
                    __LINE__, #call, (int)acx_t_st_, acx_status_string(acx_t_st_),                 \
                    acx_last_error());                                                             \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

/* Expect a specific status and an error message containing `needle`. */
#define CHECK_STATUS(call, expected, needle)                                                       \
    do {                                                                                           \
        acx_status_t acx_t_st_ = (call);                                                           \
        if (acx_t_st_ != (expected) ||                                                             \
            ((needle) != NULL && strstr(acx_last_error(), (needle)) == NULL)) {                    \
            fprintf(stderr, "\n[r%d] %s:%d: %s returned %d (%s), expected %d; message: %s\n",      \
                    acx_test_rank_, __FILE__, __LINE__, #call, (int)acx_t_st_,                     \
                    acx_status_string(acx_t_st_), (int)(expected), acx_last_error());              \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

/* |a - b| <= atol + rtol * |b| */
#define CHECK_CLOSE(a, b, rtol, atol)                                                              \
    do {                                                                                           \
        double acx_t_a_ = (double)(a), acx_t_b_ = (double)(b);                                     \
        if (!(fabs(acx_t_a_ - acx_t_b_) <= (atol) + (rtol)*fabs(acx_t_b_))) {                      \
            fprintf(stderr, "\n[r%d] %s:%d: %s = %.9g, expected %s = %.9g\n", acx_test_rank_,      \
                    __FILE__, __LINE__, #a, acx_t_a_, #b, acx_t_b_);                               \
            TEST_ERROR;                                                                            \
        }                                                                                          \
    } while (0)

#endif /* ACX_TEST_H */

/*
 * tests/ckpt_kill_points.h — the fault injection of the checkpoint writer's
 * kill points, for the test suite only. io/ckpt_write.c names four points of
 * a save (before_data, mid_data: once half of the tensors are written,
 * before_rename, after_rename) with ckpt_kill_point(); the library builds
 * them as nothing. Test programs that need them (tests/mpi/test_ckpt,
 * test_ckpt_io, test_stall: Makefile.am) compile their own copy of
 * io/ckpt_write.c with -DACX_TEST_KILL_POINTS, which includes this file;
 * their copy's acx_ckpt_save takes the place of the library's.
 *
 *   ACX_TEST_CKPT_KILL_AT=<point>        every rank SIGKILLs itself there
 *   ACX_TEST_CKPT_STOP_AT=<point>:<rank> that rank SIGSTOPs itself there
 *                                        (a rank frozen mid-save: the stall
 *                                        detector must end the job, naming it)
 */
#ifndef ACX_TESTS_CKPT_KILL_POINTS_H
#define ACX_TESTS_CKPT_KILL_POINTS_H

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void ckpt_kill_point(const char *where, int rank) {
    const char *at = getenv("ACX_TEST_CKPT_KILL_AT");
    if (at != NULL && strcmp(at, where) == 0) kill(getpid(), SIGKILL);
    const char *stop = getenv("ACX_TEST_CKPT_STOP_AT");
    size_t n = strlen(where);
    if (stop != NULL && strncmp(stop, where, n) == 0 && stop[n] == ':' &&
        atoi(stop + n + 1) == rank)
        kill(getpid(), SIGSTOP);
}

#endif /* ACX_TESTS_CKPT_KILL_POINTS_H */

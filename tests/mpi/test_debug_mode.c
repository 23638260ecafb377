/*
 * tests/mpi/test_debug_mode.c — ACX_DEBUG_MODE=1 (set by debug_mode.test):
 * mismatched collectives become an error on every rank, naming each rank's
 * values and call site, instead of a hang.
 *
 *   - no false positives: every public collective and helper with agreeing
 *     arguments, including the ones whose per-rank sizes legitimately differ
 *     (gather_for_metrics' real samples, pad_across_processes' rows) and
 *     main_process_first, whose halves meet across ranks;
 *   - a count mismatch (rank 1 passes count + 1) -> ACX_ERR_INVALID_ARG on
 *     every rank within seconds, the message naming both counts, the ranks
 *     and the sequence number (counted here, independently);
 *   - an op mismatch (rank 0 barrier, the others all_reduce) -> both ops and
 *     both call sites (this file's lines, captured here with __LINE__);
 *   - dtype, root, blocking-vs-async mismatches; a NULL buffer on one rank
 *     only -> every rank fails with that rank's message;
 *   - after each refused call the ranks are still in step: a correct
 *     all-reduce gives the right sum;
 *   - acx_coll_debug_init (for acx_init): the setting must agree across ranks.
 * Without debug mode these programs would hang, so they are not run so.
 * With one rank there is nothing to mismatch: only the first part runs.
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/acx_test_mpi.h"
#include "runtime/coll_debug.h"

static int rank_, size_;
static acx_accelerator_t *acc;
static unsigned long long seq; /* public collectives called so far, counted by hand */

/* msg contains the printf-formatted needle. */
static int has(const char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int has(const char *msg, const char *fmt, ...) {
    char needle[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(needle, sizeof needle, fmt, ap);
    va_end(ap);
    if (strstr(msg, needle) != NULL) return 1;
    fprintf(stderr, "\n[r%d] message lacks \"%s\": %s\n", rank_, needle, msg);
    return 0;
}

/* "rank 1" / "ranks 1-3" for ranks lo..hi */
static const char *ranks_text(int lo, int hi) {
    static char buf[32];
    if (lo == hi)
        snprintf(buf, sizeof buf, "rank %d", lo);
    else
        snprintf(buf, sizeof buf, "ranks %d-%d", lo, hi);
    return buf;
}

/* A correct all-reduce after a refused call: the ranks are still in step. */
static int still_in_step(void) {
    int64_t v = rank_ + 1, s = 0;
    CHECK_OK(acx_all_reduce(acc, &v, &s, 1, ACX_DTYPE_INT64, ACX_OP_SUM));
    seq++;
    CHECK(s == (int64_t)size_ * (size_ + 1) / 2);
    return 0;
error:
    return 1;
}

/* ---- agreeing calls pass ---- */

static int test_no_false_positives(void) {
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8 * 4];
    acx_request_t *req;
    double d;
    int t;
    CHECK_OK(acx_all_reduce(acc, NULL, x, 8, ACX_DTYPE_FLOAT32, ACX_OP_SUM));
    CHECK(x[7] == 8.0f * size_);
    CHECK_OK(acx_all_reduce_async(acc, NULL, x, 8, ACX_DTYPE_FLOAT32, ACX_OP_MAX, &req));
    CHECK_OK(acx_request_wait(req));
    CHECK_OK(acx_broadcast(acc, x, 8, ACX_DTYPE_FLOAT32, size_ - 1));
    CHECK_OK(acx_all_gather(acc, x, y, 2, ACX_DTYPE_FLOAT32));
    CHECK_OK(acx_gather(acc, x, y, 2, ACX_DTYPE_FLOAT32, 0));
    CHECK_OK(acx_barrier(acc));
    CHECK_OK(acx_barrier_async(acc, &req));
    CHECK_OK(acx_request_wait(req));
    CHECK_OK(acx_reduce_scalar(acc, rank_, ACX_OP_MAX, &d));
    CHECK(d == size_ - 1);
    CHECK_OK(acx_reduce(acc, NULL, x, 8, ACX_DTYPE_FLOAT32, ACX_OP_AVG));
    seq += 9;
    /* per-rank sizes that legitimately differ */
    int64_t idx[4] = {0, 1, 2, 3}, out[16], got;
    acx_batch_t b = {.size = 1 + rank_ % 3, .num_padding = rank_ % 2 ? 1 : 0, .indices = idx};
    CHECK_OK(acx_gather_for_metrics(acc, &b, idx, sizeof idx[0], out, 16, 0, &got));
    void *padded;
    int64_t max_rows;
    CHECK_OK(acx_pad_across_processes(acc, idx, rank_ % 4, 1, ACX_DTYPE_INT64, -1, 0, &padded,
                                      &max_rows));
    free(padded);
    CHECK_OK(acx_check_trigger(acc, &t));
    seq += 3;
    /* main_process_first: each rank makes one check per block, at begin or end */
    CHECK_OK(acx_main_process_first_begin(acc));
    CHECK_OK(acx_main_process_first_end(acc));
    CHECK_OK(acx_local_main_process_first_begin(acc));
    CHECK_OK(acx_local_main_process_first_end(acc));
    seq += 2;
    /* the counter is the accelerator's, the same on every rank */
    CHECK(acc->coll_seq == seq);
    CHECK(acc->coll_debug == ACX_COLL_DEBUG_ON);
    return 0;
error:
    return 1;
}

/* ---- mismatches ---- */

static int test_count_mismatch(void) {
    enum { COUNT = 1024 };
    static float buf[COUNT + 1];
    size_t count = rank_ == 1 ? COUNT + 1 : COUNT;
    double t0 = MPI_Wtime();
    int line = __LINE__ + 1;
    acx_status_t st = acx_all_reduce(acc, buf, buf, count, ACX_DTYPE_FLOAT32, ACX_OP_SUM);
    double took = MPI_Wtime() - t0;
    seq++;
    const char *msg = acx_last_error();
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(took < 5.0);
    CHECK(has(msg, "collective mismatch at #%llu: ", seq));
    if (size_ == 2)
        CHECK(has(msg, "rank 0 all_reduce(count 1024, float32, sum) at test_debug_mode.c:%d; ",
                  line));
    else
        CHECK(has(msg, "ranks 0,2%s all_reduce(count 1024, float32, sum) at test_debug_mode.c:%d",
                  size_ > 3 ? "-3" : "", line));
    CHECK(has(msg, "rank 1 all_reduce(count 1025, float32, sum) at test_debug_mode.c:%d", line));
    return still_in_step();
error:
    return 1;
}

static int test_op_mismatch(void) {
    float v[4] = {0};
    acx_status_t st;
    int line0 = 0, line1 = 0;
    if (rank_ == 0) {
        line0 = __LINE__ + 1;
        st = acx_barrier(acc);
    } else {
        line1 = __LINE__ + 1;
        st = acx_all_reduce(acc, NULL, v, 4, ACX_DTYPE_FLOAT32, ACX_OP_SUM);
    }
    seq++;
    /* every rank needs both lines for the expected message */
    int lines[2] = {line0, line1};
    MPI_Allreduce(MPI_IN_PLACE, lines, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    const char *msg = acx_last_error();
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(msg,
              "collective mismatch at #%llu: rank 0 barrier at test_debug_mode.c:%d; %s "
              "all_reduce(count 4, float32, sum) at test_debug_mode.c:%d",
              seq, lines[0], ranks_text(1, size_ - 1), lines[1]));
    CHECK(still_in_step() == 0);

    /* blocking against non-blocking: MPI would never match them */
    acx_request_t *req = NULL;
    if (rank_ == size_ - 1)
        st = acx_all_reduce_async(acc, NULL, v, 4, ACX_DTYPE_FLOAT32, ACX_OP_SUM, &req);
    else
        st = acx_all_reduce(acc, NULL, v, 4, ACX_DTYPE_FLOAT32, ACX_OP_SUM);
    seq++;
    CHECK(st == ACX_ERR_INVALID_ARG && req == NULL);
    CHECK(has(acx_last_error(), "rank %d all_reduce_async(count 4, float32, sum)", size_ - 1));

    /* no call site (a binding's NULL, 0 to the exported _at form): reported,
     * still compared */
    if (rank_ == 0)
        st = acx_barrier_at(NULL, 0, acc);
    else
        st = acx_all_gather_at(NULL, 0, acc, v, v, 0, ACX_DTYPE_FLOAT32);
    seq++;
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(acx_last_error(), "rank 0 barrier at unknown call site"));
    CHECK(has(acx_last_error(), "all_gather(count 0, float32) at unknown call site"));
    return still_in_step();
error:
    return 1;
}

static int test_other_mismatches(void) {
    int64_t v[2] = {rank_, rank_};
    acx_status_t st;
    /* dtype differs on the last rank */
    st = acx_broadcast(acc, v, 2, rank_ == size_ - 1 ? ACX_DTYPE_FLOAT64 : ACX_DTYPE_INT64, 0);
    seq++;
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(acx_last_error(), "rank %d broadcast(count 2, float64, root 0)", size_ - 1));
    CHECK(has(acx_last_error(), "broadcast(count 2, int64, root 0)"));
    CHECK(still_in_step() == 0);
    /* root differs on rank 0 */
    st = acx_gather(acc, v, NULL, 1, ACX_DTYPE_INT64, rank_ == 0 ? 1 : 0);
    seq++;
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(acx_last_error(), "rank 0 gather(count 1, int64, root 1)"));
    CHECK(still_in_step() == 0);
    /* reduction op differs; the helpers are checked too */
    double d;
    st = acx_reduce_scalar(acc, 1.0, rank_ == 1 ? ACX_OP_MAX : ACX_OP_AVG, &d);
    seq++;
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(acx_last_error(), "rank 1 reduce_scalar(count 1, float64, max)"));
    CHECK(still_in_step() == 0);
    /* a helper against a plain collective */
    int t;
    if (rank_ == 1)
        st = acx_check_trigger(acc, &t);
    else
        st = acx_barrier(acc);
    seq++;
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(acx_last_error(), "rank 1 check_trigger at test_debug_mode.c:"));
    CHECK(still_in_step() == 0);
    return 0;
error:
    return 1;
}

/* A bad argument on one rank fails every rank (with that rank's message). */
static int test_local_error(void) {
    int64_t v[2] = {rank_, rank_};
    acx_status_t st = acx_all_reduce(acc, v, rank_ == size_ - 1 ? NULL : (void *)v, 2,
                                     ACX_DTYPE_INT64, ACX_OP_SUM);
    seq++;
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(acx_last_error(), "rank %d: ", size_ - 1));
    CHECK(has(acx_last_error(), "buffer is NULL"));
    acx_request_t *req = (acx_request_t *)&req;
    st = acx_broadcast_async(acc, v, 2, ACX_DTYPE_INT64, 0, rank_ == 0 ? NULL : &req);
    seq++;
    CHECK(st == ACX_ERR_INVALID_ARG);
    CHECK(has(acx_last_error(), "rank 0: "));
    CHECK(has(acx_last_error(), "req_p is NULL"));
    CHECK(req == (acx_request_t *)&req); /* nothing handed out on the other ranks */
    return still_in_step();
error:
    return 1;
}

/* acx_coll_debug_init: what acx_init can call to read the setting once and
 * check that it agrees. */
static int test_debug_init(void) {
    CHECK_OK(acx_coll_debug_init(acc));
    CHECK(acc->coll_debug == ACX_COLL_DEBUG_ON);
    if (rank_ == 1) setenv("ACX_DEBUG_MODE", "0", 1);
    CHECK_STATUS(acx_coll_debug_init(acc), ACX_ERR_INVALID_CONFIG, "differs across ranks");
    if (rank_ == 1) setenv("ACX_DEBUG_MODE", "maybe", 1);
    CHECK_STATUS(acx_coll_debug_init(acc), ACX_ERR_INVALID_CONFIG, "rank 1: ");
    CHECK(has(acx_last_error(), "ACX_DEBUG_MODE='maybe' is not a boolean"));
    if (rank_ == 1) setenv("ACX_DEBUG_MODE", "yes", 1);
    CHECK_OK(acx_coll_debug_init(acc));
    CHECK(acc->coll_debug == ACX_COLL_DEBUG_ON);
    return still_in_step();
error:
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 60, &rank_, &size_);
    const char *mode = getenv("ACX_DEBUG_MODE");
    if (mode == NULL || strcmp(mode, "1") != 0) {
        /* mismatched calls without debug mode hang: refuse to run them */
        if (rank_ == 0) fprintf(stderr, "test_debug_mode needs ACX_DEBUG_MODE=1\n");
        MPI_Finalize();
        return 99;
    }
    if (acx_init(NULL, NULL, NULL, &acc) != ACX_OK) {
        fprintf(stderr, "[r%d] acx_init: %s\n", rank_, acx_last_error());
        MPI_Abort(MPI_COMM_WORLD, 99);
    }
    int failed = 0;
    failed |=
        acx_test_run_case("debug mode: agreeing calls of every kind pass", test_no_false_positives);
    if (size_ >= 2) {
        failed |= acx_test_run_case("debug mode: count mismatch names each rank's count",
                                    test_count_mismatch);
        failed |= acx_test_run_case("debug mode: op mismatch names both ops and call sites",
                                    test_op_mismatch);
        failed |= acx_test_run_case("debug mode: dtype, root, op, helper mismatches",
                                    test_other_mismatches);
        failed |=
            acx_test_run_case("debug mode: a bad argument on one rank fails all", test_local_error);
        failed |= acx_test_run_case("debug mode: the setting agrees across ranks", test_debug_init);
    }
    acx_finalize(acc);
    MPI_Finalize();
    return failed ? 1 : 0;
}

/*
 * tests/mpi/test_bucket.c — gradient fusion buckets (collectives/bucket.h):
 * the plan against hand-derived ranges, and whole steps against a plain
 * per-parameter MPI_Allreduce of a copy of the same data.
 *
 * Gradients here are small integers, scaled by a power of two, so every sum
 * is exact in float whatever the reduction order or bucketing: results must
 * equal the reference bit for bit. Run with mpirun -np 1..4.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/acx_test_mpi.h"
#include "collectives/bucket.h"
#include "collectives/coll.h"

static acx_comm_t *world;
static int rank_, size_;

/* ---- the plan ---- */

/* Expect exactly `n` buckets with the given (offset, count) ranges. */
static int check_plan(const acx_buckets_t *b, int n, const size_t (*want)[2]) {
    if (acx_buckets_count(b) != n) {
        fprintf(stderr, "\n[r%d] %d buckets, expected %d\n", rank_, acx_buckets_count(b), n);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        size_t off = 999, cnt = 999;
        acx_buckets_range(b, i, &off, &cnt);
        if (off != want[i][0] || cnt != want[i][1]) {
            fprintf(stderr, "\n[r%d] bucket %d = [%zu, +%zu), expected [%zu, +%zu)\n", rank_, i,
                    off, cnt, want[i][0], want[i][1]);
            return 1;
        }
    }
    return 0;
}

/*
 * Segments (ready order) of 3, 5, 2, 20, 1, 1, 4 floats from offset 5 of a
 * 41-float buffer; 40-byte (10-float) buckets:
 *   3+5+2 = 10 fits exactly;          + 20 would exceed -> close [5, +10)
 *   20 alone (larger than a bucket);  + 1 would exceed  -> close [15, +20)
 *   1+1+4 = 6                                            -> [35, +6)
 * 4-byte buckets: every segment alone. 1 MiB: one bucket of all 36.
 */
static int test_plan(void) {
    float flat[41];
    acx_bucket_segment_t segs[7];
    static const size_t counts[7] = {3, 5, 2, 20, 1, 1, 4};
    static const int units[7] = {2, 2, 1, 1, 0, 0, 0};
    acx_buckets_t *b = NULL;
    size_t off = 5;
    for (int i = 0; i < 7; i++) {
        segs[i] = (acx_bucket_segment_t){.offset = off, .count = counts[i], .unit = units[i]};
        off += counts[i];
    }

    static const size_t want40[3][2] = {{5, 10}, {15, 20}, {35, 6}};
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 3, 7, segs, 40, &b));
    CHECK(check_plan(b, 3, want40) == 0);
    acx_buckets_destroy(b);
    b = NULL;

    static const size_t want4[7][2] = {{5, 3},  {8, 5},  {13, 2}, {15, 20},
                                       {35, 1}, {36, 1}, {37, 4}};
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 3, 7, segs, 4, &b));
    CHECK(check_plan(b, 7, want4) == 0);
    acx_buckets_destroy(b);
    b = NULL;

    static const size_t want_big[1][2] = {{5, 36}};
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 3, 7, segs, 1u << 20, &b));
    CHECK(check_plan(b, 1, want_big) == 0);
    acx_buckets_destroy(b);
    b = NULL;

    /* 44 bytes = 11 floats: 3+5+2 = 10, + 20 exceeds; 20 alone; 1+1+4 */
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 3, 7, segs, 44, &b));
    CHECK(check_plan(b, 3, want40) == 0);
    acx_buckets_destroy(b);
    b = NULL;

    /* 36 bytes = 9 floats: 3+5 = 8, + 2 exceeds -> [5, +8); 2 then +20 exceeds
     * -> [13, +2); 20 alone; 1+1+4 */
    static const size_t want36[4][2] = {{5, 8}, {13, 2}, {15, 20}, {35, 6}};
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 3, 7, segs, 36, &b));
    CHECK(check_plan(b, 4, want36) == 0);
    acx_buckets_destroy(b);
    b = NULL;

    /* no segments: no buckets, and a step is trivially complete */
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 1, 0, NULL, 40, &b));
    CHECK(acx_buckets_count(b) == 0);
    CHECK_OK(acx_buckets_unit_ready(b, 0, 1.0f));
    CHECK_OK(acx_buckets_wait_all(b));
    acx_buckets_destroy(b);
    b = NULL;
    return 0;
error:
    acx_buckets_destroy(b);
    return 1;
}

static int test_plan_invalid(void) {
    float flat[41];
    acx_bucket_segment_t segs[3] = {{0, 4, 0}, {4, 4, 1}, {8, 4, 1}};
    acx_buckets_t *b = (acx_buckets_t *)&flat; /* sentinel: must stay untouched */
    acx_buckets_t *const sentinel = b;

    segs[2].offset = 9; /* a gap */
    CHECK_STATUS(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 2, 3, segs, 40, &b),
                 ACX_ERR_INVALID_ARG, "segment 2 starts at element 9, expected 8");
    segs[2].offset = 7; /* an overlap */
    CHECK_STATUS(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 2, 3, segs, 40, &b),
                 ACX_ERR_INVALID_ARG, "segment 2");
    segs[2].offset = 8;
    segs[1].unit = 2; /* unit out of range */
    CHECK_STATUS(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 2, 3, segs, 40, &b),
                 ACX_ERR_INVALID_ARG, "unit 2 is not in 0..1");
    segs[1].unit = -1;
    CHECK_STATUS(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 2, 3, segs, 40, &b),
                 ACX_ERR_INVALID_ARG, "unit -1");
    segs[1].unit = 1;
    CHECK_STATUS(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 11, 2, 3, segs, 40, &b),
                 ACX_ERR_INVALID_ARG, "runs past");
    CHECK_STATUS(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 2, 3, segs, 0, &b),
                 ACX_ERR_INVALID_ARG, "bucket size");
    CHECK_STATUS(acx_buckets_create(NULL, flat, ACX_DTYPE_FLOAT32, 41, 2, 3, segs, 40, &b),
                 ACX_ERR_INVALID_ARG, "comm");
    CHECK(b == sentinel);

    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, 41, 2, 3, segs, 40, &b));
    CHECK_STATUS(acx_buckets_unit_ready(b, 2, 1.0f), ACX_ERR_INVALID_ARG, "unit 2");
    CHECK_STATUS(acx_buckets_unit_ready(b, -1, 1.0f), ACX_ERR_INVALID_ARG, "unit -1");
    acx_buckets_destroy(b);
    return 0;
error:
    if (b != sentinel) acx_buckets_destroy(b);
    return 1;
}

/* ---- whole steps ---- */

/*
 * A model of 11 parameters in 4 units (registration order):
 *   unit 0: p0 (1), p1 (3), p2 (1000)      unit 1: p3 (17), p4 (5000)
 *   unit 2: p5 (2), p6 (250), p7 (64), p8 (1)   unit 3: p9 (4096), p10 (7)
 * Backward makes gradients ready in reverse: the flat buffer holds p10, p9,
 * ..., p0, and units report 3, 2, 1, 0. With 4 KiB (1024-float) buckets:
 *   [p10 7] [p9 4096, alone] [p8..p5 317] [p4 5000, alone] [p3..p0 1021]
 * the last bucket spans units 1 and 0; p9 and p4 exceed the bucket size.
 */
#define NPARAM 11
#define NUNIT  4
static const size_t param_size[NPARAM] = {1, 3, 1000, 17, 5000, 2, 250, 64, 1, 4096, 7};
static const int param_unit[NPARAM] = {0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3};
static acx_bucket_segment_t model_segs[NPARAM];
static size_t model_total;
static float *flat, *ref;

static void build_layout(void) {
    size_t off = 0;
    for (int k = 0; k < NPARAM; k++) {
        int p = NPARAM - 1 - k; /* k-th ready is the k-th from the end */
        model_segs[k] =
            (acx_bucket_segment_t){.offset = off, .count = param_size[p], .unit = param_unit[p]};
        off += param_size[p];
    }
    model_total = off;
}

/* Integer-valued gradients in [-50, 50], different per rank, element and step. */
static void fill_grads(int step) {
    for (size_t i = 0; i < model_total; i++) {
        uint32_t h = (uint32_t)i * 2654435761u ^ ((uint32_t)rank_ * 40503u + (uint32_t)step * 977u);
        h ^= h >> 15;
        h *= 0x2c1b3c6du;
        h ^= h >> 12;
        flat[i] = (float)((int)(h % 101u) - 50);
    }
    memcpy(ref, flat, model_total * sizeof *ref);
}

/* ref <- per-parameter plain MPI all-reduce of ref, times prescale. */
static int reference(float prescale) {
    for (int k = 0; k < NPARAM; k++) {
        float *x = ref + model_segs[k].offset;
        if (MPI_Allreduce(MPI_IN_PLACE, x, (int)model_segs[k].count, MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD) != MPI_SUCCESS)
            return 1;
        for (size_t i = 0; i < model_segs[k].count; i++)
            x[i] *= prescale;
    }
    return 0;
}

static int compare_with_reference(const char *what) {
    for (size_t i = 0; i < model_total; i++)
        if (flat[i] != ref[i]) {
            fprintf(stderr, "\n[r%d] %s: element %zu = %g, expected %g\n", rank_, what, i,
                    (double)flat[i], (double)ref[i]);
            return 1;
        }
    return 0;
}

/* One full step: every unit reports in reverse registration order. */
static int full_step(acx_buckets_t *b, int step, float prescale) {
    fill_grads(step);
    for (int u = NUNIT - 1; u >= 0; u--)
        CHECK_OK(acx_buckets_unit_ready(b, u, prescale));
    CHECK_OK(acx_buckets_wait_all(b));
    CHECK(reference(prescale) == 0);
    CHECK(compare_with_reference("bucketed step") == 0);
    return 0;
error:
    return 1;
}

static int test_model_plan(void) {
    static const size_t want[5][2] = {{0, 7}, {7, 4096}, {4103, 317}, {4420, 5000}, {9420, 1021}};
    acx_buckets_t *b = NULL;
    CHECK(model_total == 10441);
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, model_total, NUNIT, NPARAM,
                                model_segs, 4096, &b));
    CHECK(check_plan(b, 5, want) == 0);
    acx_buckets_destroy(b);
    return 0;
error:
    acx_buckets_destroy(b);
    return 1;
}

/* Several steps in a row, with three bucket sizes: 4 bytes (every parameter
 * its own bucket), 4 KiB (the plan above), 1 GiB (one bucket, reduced
 * blocking as the last). */
static int test_steps(void) {
    static const size_t bucket_bytes[3] = {4, 4096, 1u << 30};
    static const float prescale[4] = {0.25f, 1.0f, 0.5f, 0.125f};
    acx_buckets_t *b = NULL;
    for (int k = 0; k < 3; k++) {
        CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, model_total, NUNIT, NPARAM,
                                    model_segs, bucket_bytes[k], &b));
        for (int step = 0; step < 4; step++)
            CHECK(full_step(b, 10 * k + step, prescale[step]) == 0);
        acx_buckets_destroy(b);
        b = NULL;
    }
    return 0;
error:
    acx_buckets_destroy(b);
    return 1;
}

/* The MPI backend with a count of non-blocking all-reduces in flight (a
 * request is in flight from all_reduce_start until its wait, which frees it). */
static int in_flight, max_seen_in_flight;

static acx_status_t counting_start(acx_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, acx_dtype_t dtype, acx_red_op_t op,
                                   acx_coll_req_t **req_p) {
    acx_status_t st =
        acx_coll_mpi_ops.all_reduce_start(comm, sendbuf, recvbuf, count, dtype, op, req_p);
    if (st == ACX_OK && ++in_flight > max_seen_in_flight) max_seen_in_flight = in_flight;
    return st;
}

static acx_status_t counting_wait(acx_coll_req_t *req) {
    in_flight--;
    return acx_coll_mpi_ops.wait(req);
}

/* 4-byte buckets make 11 buckets, 10 of them non-blocking, all complete
 * when unit 3's report arrives: at most 2 may be in flight (collectives/
 * bucket.c's bound on transient MPI memory), and the sums stay exact. */
static int test_in_flight_bound(void) {
    acx_coll_ops_t ops = acx_coll_mpi_ops;
    ops.all_reduce_start = counting_start;
    ops.wait = counting_wait;
    acx_comm_t *counted = NULL;
    acx_buckets_t *b = NULL;
    CHECK_OK(acx_comm_create(MPI_COMM_WORLD, &ops, &counted));
    CHECK_OK(acx_buckets_create(counted, flat, ACX_DTYPE_FLOAT32, model_total, NUNIT, NPARAM,
                                model_segs, 4, &b));
    CHECK(acx_buckets_count(b) == NPARAM);
    in_flight = max_seen_in_flight = 0;
    for (int step = 0; step < 3; step++)
        CHECK(full_step(b, 400 + step, 0.5f) == 0);
    CHECK(in_flight == 0);
    if (max_seen_in_flight != 2) {
        fprintf(stderr, "\n[r%d] %d bucket all-reduces were in flight at once, expected 2\n", rank_,
                max_seen_in_flight);
        goto error;
    }
    acx_buckets_destroy(b);
    acx_comm_destroy(counted);
    return 0;
error:
    acx_buckets_destroy(b);
    acx_comm_destroy(counted);
    return 1;
}

/* A second report of unit 2 fails without side effects; the step then
 * completes normally (prescale applied once). */
static int test_double_report(void) {
    acx_buckets_t *b = NULL;
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, model_total, NUNIT, NPARAM,
                                model_segs, 4096, &b));
    fill_grads(100);
    CHECK_OK(acx_buckets_unit_ready(b, 3, 0.25f));
    CHECK_OK(acx_buckets_unit_ready(b, 2, 0.25f));
    CHECK_STATUS(acx_buckets_unit_ready(b, 2, 0.25f), ACX_ERR_STATE, "unit 2 reported");
    CHECK_OK(acx_buckets_unit_ready(b, 1, 0.25f));
    CHECK_OK(acx_buckets_unit_ready(b, 0, 0.25f));
    CHECK_OK(acx_buckets_wait_all(b));
    CHECK(reference(0.25f) == 0);
    CHECK(compare_with_reference("after a rejected double report") == 0);
    CHECK(full_step(b, 101, 0.5f) == 0);
    acx_buckets_destroy(b);
    return 0;
error:
    acx_buckets_destroy(b);
    return 1;
}

/* Every rank skips the same units: wait_all names them (and does not hang:
 * the buckets that did start started everywhere), then the next step works. */
static int test_missing_unit(void) {
    acx_buckets_t *b = NULL;
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, model_total, NUNIT, NPARAM,
                                model_segs, 4096, &b));
    fill_grads(200);
    CHECK_OK(acx_buckets_unit_ready(b, 3, 1.0f));
    CHECK_OK(acx_buckets_unit_ready(b, 2, 1.0f));
    CHECK_OK(acx_buckets_unit_ready(b, 0, 1.0f)); /* unit 1 never reports */
    CHECK_STATUS(acx_buckets_wait_all(b), ACX_ERR_STATE, "units that did not report: 1");
    CHECK(strstr(acx_last_error(), "2 of 5 gradient buckets never started") != NULL);
    CHECK(full_step(b, 201, 0.25f) == 0);

    fill_grads(202);
    CHECK_OK(acx_buckets_unit_ready(b, 3, 1.0f)); /* units 1 and 0 never report */
    CHECK_STATUS(acx_buckets_wait_all(b), ACX_ERR_STATE, "units that did not report: 0, 1");
    CHECK(full_step(b, 203, 1.0f) == 0);
    acx_buckets_destroy(b);
    return 0;
error:
    acx_buckets_destroy(b);
    return 1;
}

/* reset forgets reports (completing buckets already in flight); the next
 * step starts from scratch. */
static int test_reset(void) {
    acx_buckets_t *b = NULL;
    CHECK_OK(acx_buckets_create(world, flat, ACX_DTYPE_FLOAT32, model_total, NUNIT, NPARAM,
                                model_segs, 4096, &b));
    acx_buckets_reset(b); /* nothing reported: a no-op */
    fill_grads(300);
    CHECK_OK(acx_buckets_unit_ready(b, 3, 1.0f)); /* buckets 0 and 1 start */
    CHECK_OK(acx_buckets_unit_ready(b, 2, 1.0f)); /* bucket 2 starts */
    acx_buckets_reset(b);
    CHECK(full_step(b, 301, 0.25f) == 0);
    /* a micro-step that reports nothing that completes a bucket */
    CHECK_OK(acx_buckets_unit_ready(b, 1, 1.0f));
    acx_buckets_reset(b);
    CHECK(full_step(b, 302, 0.5f) == 0);
    acx_buckets_destroy(b);
    return 0;
error:
    acx_buckets_destroy(b);
    return 1;
}

int main(int argc, char **argv) {
    acx_test_mpi_begin(&argc, &argv, 120, &rank_, &size_);
    build_layout();
    flat = malloc(model_total * sizeof *flat);
    ref = malloc(model_total * sizeof *ref);
    if (flat == NULL || ref == NULL ||
        acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &world) != ACX_OK) {
        fprintf(stderr, "[r%d] setup failed: %s\n", rank_, acx_last_error());
        MPI_Abort(MPI_COMM_WORLD, 99);
    }

    int failed = 0;
    failed |= acx_test_run_case("bucket plan: hand-derived ranges", test_plan);
    failed |= acx_test_run_case("bucket plan: invalid segments and units", test_plan_invalid);
    failed |= acx_test_run_case("bucket plan of the test model", test_model_plan);
    failed |= acx_test_run_case("bucketed steps equal per-parameter MPI_Allreduce", test_steps);
    failed |= acx_test_run_case("at most 2 bucket all-reduces in flight, sums exact",
                                test_in_flight_bound);
    failed |=
        acx_test_run_case("double report -> ACX_ERR_STATE, step still correct", test_double_report);
    failed |=
        acx_test_run_case("missing unit -> ACX_ERR_STATE naming it, no hang", test_missing_unit);
    failed |= acx_test_run_case("reset mid-step, then new steps", test_reset);

    acx_comm_destroy(world);
    free(flat);
    free(ref);
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}

/*
 * tests/acx_test_mpi.h — what every MPI test's main() needs: MPI up with the
 * watchdog armed, a scratch path under $top_builddir/tests/tmp, a small
 * HDF5 input written by rank 0, and the Aluminum rule that ranks agree on
 * pass/fail (MPI_LOR) before anyone reports.
 */
#ifndef ACX_TEST_MPI_H
#define ACX_TEST_MPI_H

#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <sys/stat.h>

#include "tests/acx_test.h"

/* MPI_Init (the program owns MPI; acx adopts it), rank/world, watchdog. */
static inline void acx_test_mpi_begin(int *argc, char ***argv, unsigned timeout_s, int *rank_p,
                                      int *world_p) {
    acx_test_watchdog(timeout_s);
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank_p);
    MPI_Comm_size(MPI_COMM_WORLD, world_p);
    acx_test_rank_ = *rank_p;
}

/* buf = $top_builddir/tests/tmp/<name> (the directory is created). */
static inline void acx_test_tmp_path(char *buf, size_t n, const char *name) {
    const char *b = getenv("top_builddir");
    snprintf(buf, n, "%s/tests/tmp", b ? b : ".");
    mkdir(buf, 0755);
    size_t len = strlen(buf);
    snprintf(buf + len, n - len, "/%s", name);
}

/* 1 if any rank passed failed != 0 (collective). */
static inline int acx_test_agree(int failed) {
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return failed;
}

/* Rank 0 writes int32 dataset `name` [n] = v into a new file `path`; every
 * rank returns the agreed outcome (0 ok). Collective. */
static inline int acx_test_write_i32(int rank, const char *path, const char *name, const int32_t *v,
                                     hsize_t n) {
    int failed = 0;
    if (rank == 0) {
        hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hid_t s = H5Screate_simple(1, &n, NULL);
        hid_t d = H5Dcreate2(f, name, H5T_NATIVE_INT32, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        failed =
            f < 0 || d < 0 || H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0;
        if (d >= 0) H5Dclose(d);
        H5Sclose(s);
        if (f >= 0) H5Fclose(f);
        if (failed) fprintf(stderr, "cannot write the test input %s\n", path);
    }
    return acx_test_agree(failed);
}

/* Run one case function (0 ok, 1 failed) under TESTING(name) and report the
 * verdict every rank agrees on; returns it. */
static inline int acx_test_run_case(const char *name, int (*fn)(void)) {
    TESTING(name);
    int failed = acx_test_agree(fn());
    if (failed)
        FAILED();
    else
        PASSED();
    return failed;
}

/* Deterministic per-rank test data: a well-mixed 32-bit value for element i
 * of rank `rank` in stream `salt`, so every rank can compute every other
 * rank's input (and hence the expected result) locally. */
static inline uint32_t acx_test_mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static inline uint32_t acx_test_hash3(int rank, size_t i, int salt) {
    return acx_test_mix32((uint32_t)i * 2654435761u ^
                          acx_test_mix32((uint32_t)rank * 1000003u + (uint32_t)salt));
}

/* Report one case's agreed outcome on rank 0; returns it. */
static inline int acx_test_report(int failed) {
    failed = acx_test_agree(failed);
    if (failed)
        FAILED();
    else
        PASSED();
    return failed;
}

#endif /* ACX_TEST_MPI_H */

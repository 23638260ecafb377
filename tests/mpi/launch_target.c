/*
 * tests/mpi/launch_target.c — a plain MPI program (no acx) for
 * tests/launch.test to launch, kill and inspect.
 *
 * Every rank: MPI_Init, write its pid to DIR/rank<R>.pid (--pid-dir DIR),
 * print the variables named by --print-env (one "rank R: NAME=VALUE" line
 * each, "NAME unset" when absent), then loop: one 8-byte MPI_Allreduce and
 * a 1 ms sleep per iteration, for --iters N iterations (default: forever,
 * until killed). --exit-rank R --exit-code C --exit-after K: rank R calls
 * exit(C) after K iterations, without MPI_Finalize, as a crashing rank
 * would. A clean run ends with MPI_Finalize and exit 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(void) {
    fprintf(stderr, "usage: launch_target [--pid-dir DIR] [--print-env NAME]... [--iters N]\n"
                    "                     [--exit-rank R --exit-code C --exit-after K]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *pid_dir = NULL;
    const char *print_env[16];
    int n_print = 0;
    long iters = -1, exit_after = 0;
    int exit_rank = -1, exit_code = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--pid-dir") == 0)
            pid_dir = argv[++i];
        else if (strcmp(argv[i], "--print-env") == 0 && n_print < 16)
            print_env[n_print++] = argv[++i];
        else if (strcmp(argv[i], "--iters") == 0)
            iters = atol(argv[++i]);
        else if (strcmp(argv[i], "--exit-rank") == 0)
            exit_rank = atoi(argv[++i]);
        else if (strcmp(argv[i], "--exit-code") == 0)
            exit_code = atoi(argv[++i]);
        else if (strcmp(argv[i], "--exit-after") == 0)
            exit_after = atol(argv[++i]);
        else
            usage();
    }

    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int k = 0; k < n_print; k++) {
        const char *v = getenv(print_env[k]);
        if (v != NULL)
            printf("rank %d: %s=%s\n", rank, print_env[k], v);
        else
            printf("rank %d: %s unset\n", rank, print_env[k]);
    }
    fflush(stdout);
    if (pid_dir != NULL) {
        /* Written after MPI_Init, so a pid file means the rank is in the job. */
        char path[4096], tmp[4200];
        snprintf(path, sizeof path, "%s/rank%d.pid", pid_dir, rank);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (f == NULL || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0 ||
            rename(tmp, path) != 0) {
            perror(path);
            MPI_Abort(MPI_COMM_WORLD, 99);
        }
    }

    const struct timespec ms = {0, 1000000};
    for (long it = 0; iters < 0 || it < iters; it++) {
        if (rank == exit_rank && it == exit_after) exit(exit_code);
        double x = rank, sum = 0;
        MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (sum != (double)size * (size - 1) / 2) {
            fprintf(stderr, "rank %d: all-reduce gave %g, expected %g\n", rank, sum,
                    (double)size * (size - 1) / 2);
            MPI_Abort(MPI_COMM_WORLD, 98);
        }
        nanosleep(&ms, NULL);
    }
    MPI_Finalize();
    return 0;
}

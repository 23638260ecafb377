/*
 * benchmarks/bench_common.c — the helpers acx-bench-train and
 * acx-bench-train-gpu share: rank-0 output, taking and parsing options,
 * step-time statistics, JSON numbers, the splitmix64 stream
 * (bench_common.h says what each does). Compiled into each of the two
 * programs; nothing here knows either program's options.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include <acx/acx.h>

#include "bench_common.h"

const char *const bench_strategy_names[BENCH_NSTRATEGIES] = {
    [ACX_NO_SHARD] = "NO_SHARD",
    [ACX_SHARD_GRAD_OP] = "SHARD_GRAD_OP",
    [ACX_FULL_SHARD] = "FULL_SHARD",
    [ACX_HYBRID_SHARD] = "HYBRID_SHARD",
};

/* 1 on rank 0 of MPI_COMM_WORLD: the rank that prints. */
static int is_rank0(void) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank == 0;
}

void bench_say(const char *fmt, ...) {
    if (!is_rank0()) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* ---- the command line ---- */

const char *bench_take_option(int *argc, char **argv, const char *name, int *missing_p) {
    const char *value = NULL;
    size_t len = strlen(name);
    for (int i = 1; i < *argc;) {
        int drop = 0;
        if (strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') {
            value = argv[i] + len + 1;
            drop = 1;
        } else if (strcmp(argv[i], name) == 0) {
            if (i + 1 < *argc) {
                value = argv[i + 1];
                drop = 2;
            } else {
                *missing_p = 1;
                drop = 1;
            }
        }
        if (drop == 0) {
            i++;
            continue;
        }
        memmove(&argv[i], &argv[i + drop], (size_t)(*argc - i - drop + 1) * sizeof *argv);
        *argc -= drop;
    }
    return value;
}

int bench_lookup(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        while (s[k] && names[i][k] &&
               tolower((unsigned char)s[k]) == tolower((unsigned char)names[i][k]))
            k++;
        if (s[k] == '\0' && names[i][k] == '\0') return i;
    }
    return -1;
}

int bench_parse_int(const char *s, long lo, long hi, int *out_p) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) return -1;
    *out_p = (int)v;
    return 0;
}

int bench_parse_strategy(const char *prog, const char *s, int *strategy_p) {
    int i = bench_lookup(s, bench_strategy_names, BENCH_NSTRATEGIES);
    if (i < 0) {
        if (is_rank0())
            fprintf(stderr,
                    "%s: invalid value '%s' for --sharding-strategy (expected NO_SHARD, "
                    "SHARD_GRAD_OP, FULL_SHARD or HYBRID_SHARD, any case)\n",
                    prog, s);
        return -1;
    }
    *strategy_p = i;
    return 0;
}

int bench_parse_seed(const char *prog, const char *s, long long *seed_p) {
    char *end;
    errno = 0; /* strtoll clamps what overflows: refuse it, as --acx-seed does */
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE) {
        if (is_rank0())
            fprintf(stderr, "%s: invalid value '%s' for --seed: expected a 64-bit integer\n", prog,
                    s);
        return -1;
    }
    *seed_p = v;
    return 0;
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_quantile(const double *x, int n, double q) {
    if (n <= 0) return NAN;
    double *t = malloc((size_t)n * sizeof *t);
    if (t == NULL) return NAN;
    memcpy(t, x, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double pos = q * (double)(n - 1);
    int lo = (int)floor(pos);
    int hi = lo + 1 < n ? lo + 1 : lo;
    double v = t[lo] + (pos - (double)lo) * (t[hi] - t[lo]);
    free(t);
    return v;
}

double bench_median(const double *x, int n) { return bench_quantile(x, n, 0.5); }

/* ---- the JSON result object ---- */

void bench_json_number(FILE *f, const char *key, double v) {
    if (isfinite(v))
        fprintf(f, ", \"%s\": %.6g", key, v);
    else
        fprintf(f, ", \"%s\": null", key);
}

/* ---- synthetic data ---- */

uint64_t bench_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

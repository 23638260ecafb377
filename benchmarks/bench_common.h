/*
 * benchmarks/bench_common.h — the helpers the two training benchmarks
 * (acx-bench-train, benchmarks/train.c, and acx-bench-train-gpu,
 * benchmarks/train_gpu.c) share, so that both read their command line,
 * summarize their step times and write their result object the same way:
 *
 *   - rank-0 output (bench_say);
 *   - the command line: taking an option out of argv before acx_init sees
 *     it (bench_take_option), a name from a table in any case
 *     (bench_lookup), whole-string integers in a range (bench_parse_int),
 *     the --sharding-strategy and --seed values both programs turn into acx
 *     configuration (bench_parse_strategy, bench_parse_seed);
 *   - statistics of per-step times (bench_quantile, bench_median);
 *   - the numbers of the flat JSON result object (bench_json_number);
 *   - the splitmix64 stream both seed their synthetic data with.
 *
 * What it leaves to the programs: their options, usage texts and defaults,
 * everything timed, and what their JSON objects hold. The functions that
 * print do so on rank 0 of MPI_COMM_WORLD only, and so must be called
 * between MPI_Init and MPI_Finalize; the others need no MPI.
 */
#ifndef ACX_BENCH_COMMON_H
#define ACX_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>

/* The sharding strategies' names as --sharding-strategy takes them and the
 * result objects print them, indexed by acx_sharding_strategy_t
 * (ACX_NO_SHARD .. ACX_HYBRID_SHARD). */
#define BENCH_NSTRATEGIES 4
extern const char *const bench_strategy_names[BENCH_NSTRATEGIES];

/* printf on rank 0 of MPI_COMM_WORLD, flushed at once (so the lines of a
 * long run show as they come; acx_print needs a live accelerator, and
 * acx-bench-train ends acx before its mpi-loop-only timing). */
void bench_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Removes every "NAME VALUE" and "NAME=VALUE" from argv[1..*argc) (name
 * with its dashes, e.g. "--seed"), shifting the rest down (argv[*argc]
 * moves along, so a NULL terminator stays) and lowering *argc, and returns
 * the last value (a pointer into argv's strings), or NULL when the option
 * is absent. A NAME that ends the command line without a value is removed
 * too and sets *missing_p = 1 (left alone otherwise). Meant for the options
 * a program turns into acx configuration before acx_init parses argv. */
const char *bench_take_option(int *argc, char **argv, const char *name, int *missing_p);

/* The index i of s in names[0..n), compared in any case (ASCII), or -1 when
 * it is none of them. */
int bench_lookup(const char *s, const char *const *names, int n);

/* Parses s as a whole decimal integer (strtol: optional sign, base 10,
 * nothing after it) in [lo, hi] into *out_p. Returns 0, or -1 (and leaves
 * *out_p alone) for an empty string, trailing characters or a value out of
 * range; prints nothing. Requires INT_MIN <= lo <= hi <= INT_MAX. */
int bench_parse_int(const char *s, long lo, long hi, int *out_p);

/* Parses a --sharding-strategy value: NO_SHARD, SHARD_GRAD_OP, FULL_SHARD
 * or HYBRID_SHARD in any case, into *strategy_p (an
 * acx_sharding_strategy_t). Returns 0, or -1 after printing
 * "PROG: invalid value 'S' for --sharding-strategy (expected ...)" on rank
 * 0 (*strategy_p left alone). */
int bench_parse_strategy(const char *prog, const char *s, int *strategy_p);

/* Parses a --seed value, a whole decimal integer (strtoll), into *seed_p.
 * Returns 0, or -1 after printing "PROG: invalid value 'S' for --seed" on
 * rank 0 (*seed_p left alone). */
int bench_parse_seed(const char *prog, const char *s, long long *seed_p);

/* The quantile q in [0, 1] of x[0..n) with linear interpolation between
 * the order statistics (numpy's default method): q = 0 the minimum, 1 the
 * maximum. x is not changed (a sorted copy is made). NAN for n <= 0 or
 * when the copy cannot be allocated. */
double bench_quantile(const double *x, int n, double q);

/* bench_quantile(x, n, 0.5). */
double bench_median(const double *x, int n);

/* Writes `, "KEY": V` to f, V with %.6g, or `, "KEY": null` when v is not
 * finite (JSON has no NaN or infinity); key is written as it is (it must
 * need no escaping). */
void bench_json_number(FILE *f, const char *key, double v);

/* The next value of the splitmix64 stream in *state (Steele, Lea and
 * Flood 2014, as in Vigna's splitmix64.c): advances *state by the golden
 * gamma and returns the mixed value. The same seed gives the same stream
 * on every machine. */
uint64_t bench_splitmix64(uint64_t *state);

#endif

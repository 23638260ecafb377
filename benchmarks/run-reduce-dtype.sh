#!/bin/sh
# benchmarks/run-reduce-dtype.sh — run acx-bench-reduce-dtype (gradient
# reduction with reduce_dtype fp32 against bf16: wire bytes, reduce_dtype
# bytes and step time) on 2 and then 4 ranks, print each run's table and one
# summary table of both.
#
#   benchmarks/run-reduce-dtype.sh [BUILD_DIR] [--nps "2 4"] [--out DIR] [--quick]
#                                  [-- BENCHMARK OPTIONS...]
#
# BUILD_DIR  a configured and built tree (default: build/ in the repository);
#            the benchmark is built there by `make check` or `make benchmarks`:
#            this script builds nothing.
# --nps L    the world sizes, run one after the other (default "2 4"; more
#            ranks than cores are oversubscribed, which slows every
#            collective: compare the two dtypes within a world size).
# --out DIR  also write DIR/reduce-dtype.md (a Markdown section for
#            benchmarks/run-all) and DIR/reduce-dtype.dat: one row per world
#            size, the columns the keys of the benchmark's summary line (np,
#            fp32_ms, the 16-bit dtype's ms, time_ratio, wire_bytes_ratio,
#            dtype_bytes_ratio), '#' header.
# --quick    2 ranks only, 4096 elements, 2 steps x 2 rounds: a second.
# Anything after -- goes to the benchmark (--numel, --steps, --rounds,
# --strategy, --half, --json ...).
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build=
nps="2 4"
out_dir=
quick=0
while [ $# -gt 0 ]; do
    case $1 in
    --nps) [ $# -ge 2 ] || { echo "run-reduce-dtype.sh: --nps needs a value" >&2; exit 2; }
        nps=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || { echo "run-reduce-dtype.sh: --out needs a value" >&2; exit 2; }
        out_dir=$2; shift 2 ;;
    --quick) quick=1; nps=2; shift ;;
    --) shift; break ;;
    -h | --help) sed -n '2,24s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "run-reduce-dtype.sh: unknown option '$1' (benchmark options go after --)" >&2; exit 2 ;;
    *)
        [ -z "$build" ] || { echo "run-reduce-dtype.sh: unexpected argument '$1'" >&2; exit 2; }
        build=$1; shift ;;
    esac
done
build=${build:-$top/build}
bench=$build/benchmarks/acx-bench-reduce-dtype
if [ ! -x "$bench" ]; then
    echo "run-reduce-dtype.sh: $bench not built; run 'make -C $build benchmarks' first" >&2
    exit 1
fi

if [ "$quick" = 1 ]; then set -- --numel 4096 --steps 2 --warmup 1 --rounds 2 "$@"; fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
out=$(mktemp)
trap 'rm -f "$out"' EXIT
summaries=
for np in $nps; do
    echo "== mpirun -np $np $bench $*"
    mpirun -np "$np" --oversubscribe "$bench" "$@" | tee "$out"
    line=$(grep '^summary: ' "$out") || { echo "run-reduce-dtype.sh: no summary line at np=$np" >&2; exit 1; }
    summaries="$summaries$line
"
    echo
done
echo "ranks  fp32 ms/step  16-bit ms/step  time 16-bit/fp32  wire bytes 16-bit/fp32  reduce_dtype bytes 16-bit/fp32"
printf '%s' "$summaries" | sed 's/^summary: //' | awk '{
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[i] = kv[2] }
    printf "%5s  %12s  %14s  %16s  %22s  %30s\n", v[1], v[2], v[3], v[4], v[5], v[6] }'

# ---- --out: the data file and the Markdown section ----

[ -n "$out_dir" ] || exit 0
mkdir -p "$out_dir"
printf '%s' "$summaries" | sed 's/^summary: //' | awk '
    NR == 1 { h = "#"; for (i = 1; i <= NF; i++) { split($i, kv, "="); h = h " " kv[1] }; print h }
    { l = ""; for (i = 1; i <= NF; i++) { split($i, kv, "="); l = l (i > 1 ? " " : "") kv[2] }; print l }' \
    >"$out_dir/reduce-dtype.dat"
{
    echo "## Gradient reduction in fp32 against a 16-bit reduce_dtype"
    echo
    echo "acx-bench-reduce-dtype (benchmarks/run-reduce-dtype.sh$([ $# -gt 0 ] && printf ' -- %s' "$*")): the data-parallel"
    echo "gradient all-reduce with \`reduce_dtype\` fp32 and 16-bit in alternating rounds (ms per step:"
    echo "medians); time_ratio = 16-bit / fp32 step time; wire_bytes_ratio = the bytes that crossed"
    echo "MPI (counted through the MPI profiling interface), 16-bit / fp32; dtype_bytes_ratio = the"
    echo "gradient bytes in reduce_dtype, 16-bit / fp32."
    echo
    awk 'NR == 1 { n = NF - 1; h = "|"; s = "|"; for (i = 2; i <= NF; i++) { h = h " " $i " |"; s = s " ---: |" }
                   print h; print s; next }
         { l = "|"; for (i = 1; i <= NF; i++) l = l " " $i " |"; print l }' "$out_dir/reduce-dtype.dat"
} >"$out_dir/reduce-dtype.md"

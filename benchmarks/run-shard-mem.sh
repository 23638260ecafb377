#!/bin/sh
# benchmarks/run-shard-mem.sh — peak resident memory per rank and step time
# of NO_SHARD, SHARD_GRAD_OP and FULL_SHARD side by side (acx-bench-shard-mem:
# a synthetic MLP, one [H x H] + [H] unit per layer, AdamW, fp32), against
# the ZeRO formulas; then a model too big for NO_SHARD on this machine,
# trained under FULL_SHARD only, against the target
#   FULL_SHARD peak RSS per rank <= 1.15 x 16P/N + the fixed overhead
# (the fixed overhead = each rank's VmHWM before acx_prepare: process, MPI,
# BLAS and the benchmark's own activation buffers).
#
#   benchmarks/run-shard-mem.sh [BUILD_DIR] [--np N] [--hidden H]
#       [--medium-layers L] [--big-layers L] [--steps K] [--big-steps K]
#       [--no-big] [--smoke] [--out DIR] [--quick] [-- BENCHMARK OPTIONS...]
#
# BUILD_DIR        a configured and built tree (default: build/ in the
#                  repository); `make check` or `make benchmarks` builds the
#                  benchmark there: this script builds nothing.
# --np N           ranks (default 4).
# --hidden H       layer width (default 2048: 4.2M elements per unit).
# --medium-layers  layers of the model run under all three strategies
#                  (default 24: P = 100.7M, 16P = 1.6 GB per NO_SHARD rank).
# --big-layers     layers of the FULL_SHARD-only model (default 96: P = 402.8M;
#                  N x 16P = 25.8 GB, more than a 24 GB machine holds).
# --steps K        timed steps of the medium runs after 1 warm-up (default 3);
#                  --big-steps for the big run (default 2).
# --no-big         skip the big run.
# --smoke          2 ranks, H 64, 4 layers, 2 steps, no big run: seconds
#                  (tests/bench_smoke.test). --quick is the same.
# --out DIR        also write DIR/shard-mem.md (a Markdown section for
#                  benchmarks/run-all) and DIR/shard-mem.dat, one row per
#                  run (whitespace columns, '#' header; memory in MiB):
#                  model strategy ranks P rss_mib baseline_mib acx_peak_mib
#                  zero_16p_n_mib formula_mib estimate_mib step_s user_s
#                  sys_s loss_last
#                  (rss = peak RSS per rank, max over ranks; zero_16p_n =
#                  16P/N; formula = the strategy's ZeRO bytes).
# Anything after -- goes to every benchmark run (e.g. --mmap-threshold
# 1048576, --acx-fsdp.limit_all_gathers=1). --mmap-threshold fixes glibc's
# mmap threshold, so freed transient buffers go back to the system instead
# of staying resident in the heap: run with and without it to see how much
# of the peak is malloc's caching rather than what acx holds.
#
# Each strategy is its own mpirun, so each rank's VmHWM is that strategy's
# alone. The benchmark itself refuses to start (exit 3) when the node's
# MemAvailable cannot hold its ranks by the formula, so the big model is
# never started under a strategy that cannot fit; the big run is FULL_SHARD
# only anyway. One BLAS thread per rank: the ranks already fill the cores.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build=
np=4
hidden=2048
medium=24
big=96
steps=3
big_steps=2
do_big=1
out=
need() { [ $# -ge 2 ] || { echo "run-shard-mem.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
    --np) need "$@"; np=$2; shift 2 ;;
    --hidden) need "$@"; hidden=$2; shift 2 ;;
    --medium-layers) need "$@"; medium=$2; shift 2 ;;
    --big-layers) need "$@"; big=$2; shift 2 ;;
    --steps) need "$@"; steps=$2; shift 2 ;;
    --big-steps) need "$@"; big_steps=$2; shift 2 ;;
    --no-big) do_big=0; shift ;;
    --smoke | --quick) np=2; hidden=64; medium=4; steps=2; do_big=0; shift ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,49s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "run-shard-mem.sh: unknown option '$1' (benchmark options go after --)" >&2; exit 2 ;;
    *)
        [ -z "$build" ] || { echo "run-shard-mem.sh: unexpected argument '$1'" >&2; exit 2; }
        build=$1; shift ;;
    esac
done
for v in "$np" "$hidden" "$medium" "$big" "$steps" "$big_steps"; do
    case $v in '' | *[!0-9]* | 0) echo "run-shard-mem.sh: invalid count '$v'" >&2; exit 2 ;; esac
done
build=${build:-$top/build}
bench=$build/benchmarks/acx-bench-shard-mem
[ -x "$bench" ] || { echo "run-shard-mem.sh: $bench not built (make benchmarks)" >&2; exit 1; }
command -v mpirun >/dev/null 2>&1 || { echo "run-shard-mem.sh: mpirun not found" >&2; exit 1; }
if [ -n "$out" ]; then mkdir -p "$out"; fi
results=$(mktemp)
log=$(mktemp)
trap 'rm -f "$results" "$log"' EXIT

# as tests/lib.sh's mpirun_np: root, oversubscription, shared memory only
mpirun_np() {
    n=$1
    shift
    set -- -np "$n" --oversubscribe "$@"
    if [ "$(id -u)" -eq 0 ]; then set -- --allow-run-as-root "$@"; fi
    OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
        OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 \
        OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" \
        timeout -k 10 1800 mpirun "$@"
}

# run LABEL STRATEGY LAYERS STEPS [BENCHMARK OPTIONS]: one benchmark run;
# its output is shown indented, its summary line appended to the results
# as "LABEL <summary>". Exit status 3 (not enough memory) is passed on.
run() {
    label=$1 strategy=$2 layers=$3 k=$4
    shift 4
    echo "== $label: $strategy, $np ranks, $layers x [$hidden x $hidden], $k timed step(s)"
    rc=0
    mpirun_np "$np" "$bench" --strategy "$strategy" --hidden "$hidden" --layers "$layers" \
        --steps "$k" --warmup 1 "$@" >"$log" 2>&1 || rc=$?
    sed 's/^/  /' "$log"
    if [ "$rc" -eq 3 ] || grep -q 'refusing to start' "$log"; then
        echo "run-shard-mem.sh: $label $strategy refused for lack of memory (see above)" >&2
        return 3
    fi
    [ "$rc" -eq 0 ] || { echo "run-shard-mem.sh: $label $strategy failed (exit $rc)" >&2; exit 1; }
    line=$(grep '^shard-mem ' "$log") || { echo "run-shard-mem.sh: no summary line" >&2; exit 1; }
    echo "$label $line" >>"$results"
}

# field LABEL STRATEGY KEY: a value of a recorded summary line
field() {
    awk -v l="$1" -v s="strategy=$2" -v k="$3" '$1 == l && $3 == s {
        for (i = 4; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$results"
}

mib() { awk -v b="$1" 'BEGIN { if (b < 0) print "-"; else printf "%.1f", b / 1048576 }'; }
mib3() { awk -v b="$1" 'BEGIN { if (b < 0) print "-"; else printf "%.3f", b / 1048576 }'; }

echo "shard memory benchmark: $(nproc) core(s), MemTotal $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), MemAvailable $(awk '/^MemAvailable/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
[ $# -eq 0 ] || echo "benchmark options: $*"

# ---- the medium model under every strategy ----

for s in no_shard shard_grad_op full_shard; do
    run medium "$s" "$medium" "$steps" "$@" || exit 3
done

# table LABEL STRATEGIES...: the side-by-side table of recorded runs
table() {
    label=$1
    shift
    ref=$(field "$label" no_shard step_s)
    echo
    echo "$label model, $np ranks; memory in MiB per rank (max over ranks); formula = the strategy's"
    echo "ZeRO bytes; ratio = (peak RSS - baseline) / formula; step s = median wall time of a step,"
    echo "x = / NO_SHARD; user s, sys s = CPU time per step of the busiest rank"
    printf '%-13s %11s %9s %8s %9s %9s %9s %9s %6s %6s %8s %6s %7s %7s\n' strategy P "peak RSS" baseline \
        "acx peak" 16P/N formula estimate ratio acx/f "step s" x "user s" "sys s"
    for s in "$@"; do
        rss=$(field "$label" "$s" rss) base=$(field "$label" "$s" baseline)
        f=$(field "$label" "$s" formula) t=$(field "$label" "$s" step_s)
        printf '%-13s %11s %9s %8s %9s %9s %9s %9s %6s %6s %8s %6s %7s %7s\n' "$s" "$(field "$label" "$s" P)" \
            "$(mib "$rss")" "$(mib "$base")" "$(mib "$(field "$label" "$s" acx_peak)")" \
            "$(mib "$(field "$label" "$s" ideal)")" "$(mib "$f")" \
            "$(mib "$(field "$label" "$s" estimate)")" \
            "$(awk -v r="$rss" -v b="$base" -v f="$f" 'BEGIN { printf "%.3f", (r - b) / f }')" \
            "$(awk -v a="$(field "$label" "$s" acx_peak)" -v f="$f" 'BEGIN { printf "%.3f", a / f }')" \
            "$t" "$(awk -v t="$t" -v r="$ref" 'BEGIN { if (r == "" || r + 0 <= 0) print "-"; else printf "%.2f", t / r }')" \
            "$(field "$label" "$s" user_s)" "$(field "$label" "$s" sys_s)"
    done
}

# target LABEL: FULL_SHARD's peak RSS against 1.15 x 16P/N + baseline
target() {
    rss=$(field "$1" full_shard rss) base=$(field "$1" full_shard baseline)
    ideal=$(field "$1" full_shard ideal) f=$(field "$1" full_shard formula)
    awk -v r="$rss" -v b="$base" -v i="$ideal" -v f="$f" -v l="$1" 'BEGIN {
        t = 1.15 * i + b
        printf "%s FULL_SHARD: peak RSS %.1f MiB vs target 1.15 x 16P/N + baseline = 1.15 x %.1f + %.1f = %.1f MiB: %s\n",
            l, r / 1048576, i / 1048576, b / 1048576, t / 1048576, r <= t ? "meets" : "MISSES"
        printf "  (RSS - baseline = %.3f x 16P/N; the formula itself, with its transient unit buffers, is %.3f x 16P/N)\n",
            (r - b) / i, f / i }'
}

table medium no_shard shard_grad_op full_shard
echo
target medium
l0=$(field medium no_shard loss_last)
for s in shard_grad_op full_shard; do
    l1=$(field medium "$s" loss_last)
    echo "final loss $s $l1 vs no_shard $l0: relative difference $(awk -v a="$l1" -v b="$l0" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.2e", d / b }')"
done

# ---- the big model, FULL_SHARD only ----

big_rc=0
if [ "$do_big" = 1 ]; then
    echo
    run big full_shard "$big" "$big_steps" "$@" || big_rc=$?
    if [ "$big_rc" -eq 0 ]; then
        table big full_shard
        echo
        target big
        echo "big FULL_SHARD loss: first $(field big full_shard loss_first), last $(field big full_shard loss_last) (finite=$(field big full_shard finite))"
    fi
fi

# ---- --out: the data file and the Markdown section ----

if [ -n "$out" ]; then
    dat=$out/shard-mem.dat
    echo "# model strategy ranks P rss_mib baseline_mib acx_peak_mib zero_16p_n_mib formula_mib estimate_mib step_s user_s sys_s loss_last" >"$dat"
    for label in medium big; do
        for s in no_shard shard_grad_op full_shard; do
            [ -n "$(field "$label" "$s" rss)" ] || continue
            echo "$label $s $np $(field "$label" "$s" P) $(mib3 "$(field "$label" "$s" rss)")" \
                "$(mib3 "$(field "$label" "$s" baseline)") $(mib3 "$(field "$label" "$s" acx_peak)")" \
                "$(mib3 "$(field "$label" "$s" ideal)") $(mib3 "$(field "$label" "$s" formula)")" \
                "$(mib3 "$(field "$label" "$s" estimate)") $(field "$label" "$s" step_s)" \
                "$(field "$label" "$s" user_s) $(field "$label" "$s" sys_s) $(field "$label" "$s" loss_last)" >>"$dat"
        done
    done
    {
        echo "## Memory: peak RSS per rank by sharding strategy against the ZeRO formulas"
        echo
        echo "acx-bench-shard-mem (benchmarks/run-shard-mem.sh): a synthetic MLP of [H x H] + [H] units,"
        echo "H = $hidden, AdamW, fp32, $np ranks on $(nproc) cores, one mpirun per strategy so each peak"
        echo "is that strategy's alone. Memory in MiB per rank (the maximum over ranks): peak RSS is"
        echo "VmHWM; baseline is VmHWM before \`acx_prepare\` (process, MPI, BLAS, activations); acx"
        echo "peak is acx's own accounting; 16P/N is the fully sharded ZeRO size; formula is the"
        echo "strategy's ZeRO bytes with its transient unit buffers; (RSS − baseline)/16P/N is what"
        echo "the sharding target bounds (FULL_SHARD ≤ 1.15). Step time: median wall time per step."
        for label in medium big; do
            grep -q "^$label " "$dat" || continue
            echo
            echo "**$label model** ($(awk -v l="$label" '$1 == l { print $4; exit }' "$dat") parameters):"
            echo
            echo "| strategy | peak RSS | baseline | acx peak | 16P/N | formula | (RSS − baseline)/16P/N | acx peak/formula | step (s) | final loss |"
            echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
            awk -v l="$label" '$1 == l {
                printf "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %s | %s |\n", $2, $5, $6, $7, $8, $9,
                    ($8 > 0 ? ($5 - $6) / $8 : 0), ($9 > 0 ? $7 / $9 : 0), $11, $14 }' "$dat"
        done
        if [ "$big_rc" -ne 0 ]; then
            echo
            echo "The big model ($big layers) did not run: the benchmark refused to start for lack of"
            echo "memory (exit $big_rc)."
        fi
    } >"$out/shard-mem.md"
fi
exit "$big_rc"

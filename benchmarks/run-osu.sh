#!/bin/sh
# benchmarks/run-osu.sh — the OSU-style collective benchmarks
# (acx-bench-allreduce, -allgather, -reduce-scatter, -bcast) with the raw MPI
# call timed in the same loop (--compare-raw) and nccl-tests' bandwidths
# (--busbw), on 2 and then 4 ranks; then acx's fusion buckets against 100
# separate MPI_Allreduce calls (--fused 100 at 4 KiB) on the same rank counts.
# Writes a Markdown section with a table per operation (acx and raw MPI
# latency, their ratio per size) and the data files run-all plots and checks
# the targets from:
#   acx all-reduce overhead vs raw MPI <= 3% at >= 64 KiB, <= 0.5 us at 8 B;
#   --fused 100 x 4 KiB >= 5x faster than 100 separate MPI_Allreduce calls.
#
#   benchmarks/run-osu.sh [BUILD_DIR] [--out DIR] [--quick] [--nps "2 4"] [--reps R]
#                         [--ops "allreduce allgather reduce-scatter bcast"]
#
# BUILD_DIR  a configured and built tree (default: build/ in the repository);
#            `make` builds the four benchmarks there: this script builds
#            nothing.
# --out DIR  write DIR/osu.md (the section), DIR/osu.dat, DIR/osu-fused.dat
#            (below) and each run's table and JSON under DIR/osu/. Without
#            it the files go to a temporary directory and osu.md is printed.
# --quick    8 B .. 64 KiB, 30 iterations per size, 10 fused steps: seconds
#            (run-all --quick, tests/run_all_quick.test). The default is
#            OSU's: 8 B .. 1 MiB, 1000 iterations up to 8 KiB and 100
#            above; --fused with 200 steps.
# --nps L    the world sizes (default "2 4"). More ranks than cores are
#            oversubscribed (mpirun then yields when idle): every call then
#            includes the OS scheduler's time slices; compare acx with MPI
#            within a world size, not across.
# --reps R   run all-reduce and --fused R times (default 3; 1 with --quick)
#            and keep, per size, the repetition with the median acx/MPI
#            ratio (median speedup): they carry the targets, and a shared
#            machine's state changes within a run. The other ops run once.
# --ops L    the operations (default all four; --fused runs whatever L is).
#
# osu.dat, one row per operation, world size and message size:
#   op ranks size dtype acx_avg_us raw_avg_us acx_median_us raw_median_us
#   ratio_avg ratio_median overhead_median_us algbw_gbps busbw_gbps reps
# (avg: OSU's mean over ranks of each rank's mean; median: each side's
# median single call, averaged over ranks, from the benchmark's --json;
# ratio = acx / raw; overhead = acx - raw; bandwidths of the acx mean;
# reps = repetitions the row is the median one of.)
# osu-fused.dat, one row per world size:
#   ranks size tensors acx_avg_us separate_avg_us raw1_avg_us acx_median_us
#   separate_median_us raw1_median_us speedup_avg speedup_median buckets reps
# (acx = one step through the buckets, separate = the K raw calls, raw1 =
# one raw MPI_Allreduce over all K tensors; speedup = separate / acx.)
# Each run's table and JSON: DIR/osu/OP-npN-rR.{txt,json}, fused-npN-rR.*
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build=
out=
quick=0
nps="2 4"
reps=
ops="allreduce allgather reduce-scatter bcast"
need() { [ $# -ge 2 ] || { echo "run-osu.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
    --out) need "$@"; out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --nps) need "$@"; nps=$2; shift 2 ;;
    --reps) need "$@"; reps=$2; shift 2 ;;
    --ops) need "$@"; ops=$2; shift 2 ;;
    -h | --help) sed -n '2,49s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "run-osu.sh: unknown option '$1'" >&2; exit 2 ;;
    *)
        [ -z "$build" ] || { echo "run-osu.sh: unexpected argument '$1'" >&2; exit 2; }
        build=$1; shift ;;
    esac
done
for np in $nps; do
    case $np in *[!0-9]* | 0) echo "run-osu.sh: invalid --nps value '$np'" >&2; exit 2 ;; esac
done
[ -n "$nps" ] || { echo "run-osu.sh: --nps is empty" >&2; exit 2; }
[ -n "$reps" ] || { [ "$quick" = 1 ] && reps=1 || reps=3; }
case $reps in *[!0-9]* | 0) echo "run-osu.sh: invalid --reps value '$reps'" >&2; exit 2 ;; esac
build=${build:-$top/build}
for op in $ops; do
    case $op in allreduce | allgather | reduce-scatter | bcast) ;; *)
        echo "run-osu.sh: invalid --ops value '$op' (expected allreduce, allgather, reduce-scatter, bcast)" >&2
        exit 2 ;;
    esac
done
for op in allreduce $ops; do
    [ -x "$build/benchmarks/acx-bench-$op" ] ||
        { echo "run-osu.sh: $build/benchmarks/acx-bench-$op not built (make)" >&2; exit 1; }
done
command -v mpirun >/dev/null 2>&1 || { echo "run-osu.sh: mpirun not found" >&2; exit 1; }

print_md=0
if [ -z "$out" ]; then
    out=$(mktemp -d)
    print_md=1
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out/osu"

if [ "$quick" = 1 ]; then
    sizes=8:64K
    iters="-i 30 -x 3"
    fused_iters="-i 10 -x 2"
else
    sizes=8:1M
    iters=
    fused_iters="-i 200 -x 20"
fi
fused_k=100
fused_size=4096

# as tests/lib.sh's mpirun_np: root, oversubscription, shared memory only
mpirun_np() {
    n=$1
    shift
    set -- -np "$n" --oversubscribe "$@"
    if [ "$(id -u)" -eq 0 ]; then set -- --allow-run-as-root "$@"; fi
    OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
        OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 \
        timeout -k 10 900 mpirun "$@"
}

# run NAME NP OP ARGS...: one benchmark run; its table goes to
# $out/osu/NAME.txt (and is shown), its JSON to $out/osu/NAME.json.
run() {
    name=$1 n=$2 op=$3
    shift 3
    echo "== mpirun -np $n acx-bench-$op $*"
    rc=0
    mpirun_np "$n" "$build/benchmarks/acx-bench-$op" "$@" --json "$out/osu/$name.json" \
        >"$out/osu/$name.txt" 2>"$out/osu/$name.err" || rc=$?
    cat "$out/osu/$name.txt"
    cat "$out/osu/$name.err" >&2
    [ "$rc" -eq 0 ] || { echo "run-osu.sh: acx-bench-$op on $n ranks exited $rc" >&2; exit 1; }
    [ -s "$out/osu/$name.err" ] || rm -f "$out/osu/$name.err"
}

# json_rows FILE KEY...: one line per result row of a benchmark's --json
# file (one object per line), the values of KEY... ('-' when absent).
json_rows() {
    f=$1
    shift
    awk -v keys="$*" '
        function get(k, s) {
            if (!match($0, "\"" k "\": (\"[^\"]*\"|[-+0-9.eE]+)")) return "-"
            s = substr($0, RSTART, RLENGTH)
            sub(/^"[^"]*": /, "", s)
            gsub(/"/, "", s)
            return s
        }
        BEGIN { n = split(keys, k, " ") }
        /^ *\{"dtype": / {
            line = get(k[1])
            for (i = 2; i <= n; i++) line = line " " get(k[i])
            print line
        }' "$f"
}

dat=$out/osu.dat
fdat=$out/osu-fused.dat
echo "# op ranks size dtype acx_avg_us raw_avg_us acx_median_us raw_median_us ratio_avg ratio_median overhead_median_us algbw_gbps busbw_gbps reps" >"$dat"
echo "# ranks size tensors acx_avg_us separate_avg_us raw1_avg_us acx_median_us separate_median_us raw1_median_us speedup_avg speedup_median buckets reps" >"$fdat"
ncores=$(nproc)

# median_rep COLUMN: from rows "REP <row>" of one op and world size, per
# size (fields 3 and 4 as key) the row whose COLUMN (of <row>) is the median
# over the repetitions (the lower middle one for an even count), with the
# number of repetitions appended.
median_rep() {
    awk -v c="$1" '{ k = $3 " " $4; $1 = ""; sub(/^ /, ""); n[k]++; row[k, n[k]] = $0
                     split($0, f, " "); key[k, n[k]] = f[c] + 0
                     if (!(k in seen)) { seen[k] = 1; order[++nk] = k } }
        END { for (j = 1; j <= nk; j++) { k = order[j]; m = n[k]
                  for (a = 1; a <= m; a++) idx[a] = a
                  for (a = 2; a <= m; a++) for (b = a; b > 1 && key[k, idx[b]] < key[k, idx[b - 1]]; b--) {
                      t = idx[b]; idx[b] = idx[b - 1]; idx[b - 1] = t }
                  print row[k, idx[int((m + 1) / 2)]], m } }'
}

for np in $nps; do
    for op in $ops; do
        # all-reduce carries the targets: repeated, the median repetition kept
        [ "$op" = allreduce ] && nrep=$reps || nrep=1
        r=1
        while [ "$r" -le "$nrep" ]; do
            # shellcheck disable=SC2086 # (the table to stderr: stdout is the pipe)
            run "$op-np$np-r$r" "$np" "$op" -f --compare-raw --busbw -m "$sizes" $iters >&2
            json_rows "$out/osu/$op-np$np-r$r.json" size dtype avg_us raw_avg_us median_us raw_median_us \
                acx_over_raw algbw_gbps busbw_gbps |
                awk -v op="$op" -v np="$np" -v r="$r" '{
                    rm = $6 > 0 ? $5 / $6 : 0
                    printf "%d %s %d %d %s %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.6g %.6g\n",
                        r, op, np, $1, $2, $3, $4, $5, $6, $7, rm, $5 - $6, $8, $9 }'
            r=$((r + 1))
        done | median_rep 10 >>"$dat"
    done
    r=1
    while [ "$r" -le "$reps" ]; do
        # shellcheck disable=SC2086
        run "fused-np$np-r$r" "$np" allreduce --fused "$fused_k" -m "$fused_size:$fused_size" $fused_iters >&2
        json_rows "$out/osu/fused-np$np-r$r.json" size fused_tensors avg_us separate_avg_us raw_one_call_avg_us \
            median_us separate_median_us raw_one_call_median_us speedup buckets |
            awk -v np="$np" -v r="$r" '{
                sm = $6 > 0 ? $7 / $6 : 0
                printf "%d %d %d %d %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %d\n",
                    r, np, $1, $2, $3, $4, $5, $6, $7, $8, $9, sm, $10 }'
        r=$((r + 1))
    done | median_rep 11 >>"$fdat"
done

# ---- the Markdown section ----

# human BYTES: 8 B, 4 KiB, 1 MiB
human() {
    awk -v b="$1" 'BEGIN {
        if (b >= 1048576 && b % 1048576 == 0) printf "%d MiB", b / 1048576
        else if (b >= 1024 && b % 1024 == 0) printf "%d KiB", b / 1024
        else printf "%d B", b }'
}

# op_table OP TITLE: one row per size, for each world size the medians of
# acx and raw MPI, their ratio, the ratio of the means and the bus bandwidth.
op_table() {
    awk -v op="$1" -v nps="$nps" '
        function human(b) {
            if (b >= 1048576 && b % 1048576 == 0) return sprintf("%d MiB", b / 1048576)
            if (b >= 1024 && b % 1024 == 0) return sprintf("%d KiB", b / 1024)
            return sprintf("%d B", b)
        }
        BEGIN { n = split(nps, np, " ") }
        /^#/ || $1 != op { next }
        {
            if (!($3 in seen)) { seen[$3] = 1; sizes[++ns] = $3 }
            dtype = $4
            v[$2, $3] = sprintf("%.2f | %.2f | %.3f | %.3f | %.3g", $7, $8, $10, $9, $13)
        }
        END {
            h = "| Size"; s = "| ---:"
            for (i = 1; i <= n; i++) {
                h = h sprintf(" | acx, %d ranks (µs) | MPI, %d ranks (µs) | acx/MPI | mean acx/MPI | busbw (GB/s)", np[i], np[i])
                s = s " | ---: | ---: | ---: | ---: | ---:"
            }
            print h " |"; print s " |"
            for (j = 1; j <= ns; j++) {
                line = "| " human(sizes[j])
                for (i = 1; i <= n; i++)
                    line = line " | " ((np[i], sizes[j]) in v ? v[np[i], sizes[j]] : "- | - | - | - | -")
                print line " |"
            }
            print ""
            print "(" dtype ")"
        }' "$dat"
}

md=$out/osu.md
{
    echo "## Collectives: acx against raw MPI (OSU-style)"
    echo
    echo "acx-bench-allreduce, -allgather, -reduce-scatter and -bcast with \`-f --compare-raw --busbw\`"
    echo "(docs/benchmarks.md): every iteration times one acx call and one raw MPI call"
    echo "(\`MPI_Allreduce\`, \`MPI_Allgather\`, \`MPI_Reduce_scatter_block\`, \`MPI_Bcast\`) on the same"
    if [ "$quick" = 1 ]; then
        echo "sizes, alternating their order. **Quick run** (\`--quick\`): $sizes bytes, 30 iterations"
        echo "per size: the numbers only show that everything runs."
    else
        echo "sizes, alternating their order; sizes $sizes bytes, OSU's iteration counts (1000 up to"
        echo "8 KiB, 100 above)."
    fi
    if [ "${ACX_SHM_DISABLE:-0}" = 1 ]; then
        echo "acx's collectives went through MPI (\`ACX_SHM_DISABLE=1\`)."
    else
        echo "acx's all-reduce, all-gather and reduce-scatter went through its shared-memory segment"
        echo "(all ranks on one node, [docs/collectives.md](../../../docs/collectives.md)), its"
        echo "broadcast through MPI: for those three, acx/MPI compares that path with MPI's."
    fi
    if [ "$reps" -gt 1 ]; then
        echo "All-reduce and the fused runs were repeated $reps times; each row is the repetition"
        echo "with the median acx/MPI ratio (median speedup) at that size."
    fi
    echo "Latencies are the **medians** of single calls (per rank, averaged over ranks): on a"
    echo "loaded machine a preempted call adds milliseconds to a mean of microseconds. \`mean"
    echo "acx/MPI\` is the ratio of OSU's means; busbw is nccl-tests' bus bandwidth of the acx mean."
    echo "Size is bytes per rank (for reduce-scatter: each rank's share of the result)."
    for np in $nps; do
        if [ "$np" -gt "$ncores" ]; then
            echo "**$np ranks oversubscribe the $ncores cores** (mpirun yields when idle): their"
            echo "latencies include the OS scheduler's time slices; compare acx with MPI within a"
            echo "world size only."
            break
        fi
    done
    echo
    for op in $ops; do
        case $op in
        allreduce) title="All-reduce" ;;
        allgather) title="All-gather" ;;
        reduce-scatter) title="Reduce-scatter" ;;
        bcast) title="Broadcast (root 0)" ;;
        esac
        echo "### $title"
        echo
        op_table "$op"
        echo
    done
    echo "### Fusion: $fused_k tensors of $(human "$fused_size") through acx's buckets"
    echo
    echo "acx-bench-allreduce \`--fused $fused_k -m $fused_size:$fused_size\`: one step of acx's gradient"
    echo "fusion buckets (25 MiB) over $fused_k tensors, against $fused_k separate \`MPI_Allreduce\` calls and"
    echo "one \`MPI_Allreduce\` over all of them (the best fusion through MPI can do), in the same loop."
    echo "On one node acx's buckets are reduced through its shared-memory segment, not MPI"
    echo "([docs/collectives.md](../../../docs/collectives.md)), so they can beat that single call."
    echo
    echo "| ranks | acx buckets (µs) | $fused_k × MPI_Allreduce (µs) | speedup | mean speedup | 1 MPI_Allreduce of all (µs) | buckets |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    awk '!/^#/ { printf "| %d | %.1f | %.1f | %.2f | %.2f | %.1f | %d |\n", $1, $7, $8, $11, $10, $9, $12 }' "$fdat"
    echo
    echo "(medians; \`mean speedup\` from OSU's means)"
} >"$md"

if [ "$print_md" = 1 ]; then
    echo
    cat "$md"
fi

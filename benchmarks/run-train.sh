#!/bin/sh
# benchmarks/run-train.sh — training throughput: acx-bench-train over a matrix
# of models x sharding strategies x world sizes (acx against the hand-written
# MPI data-parallel loop in the same run, alternating), scaling efficiency,
# and, when the peers are installed, acx against Hugging Face Accelerate and
# PyTorch DDP (gloo) in rounds of alternating processes.
#
#   benchmarks/run-train.sh [BUILD_DIR] [--out DIR] [--quick] [--np-list 1,2,4]
#       [--models fmnist,synthetic] [--strategies NO_SHARD,...] [--peers | --no-peers]
#       [--peer-rounds N] [--peer-np-list L] [--peer-models L] [--data FILE.h5] [--dims IN,H1,H2,OUT]
#       [--threads T] [--peer-runner PATH] [-- BENCHMARK OPTIONS...]
#
# BUILD_DIR      a configured and built tree (default: build/ in the repository);
#                `make check` or `make benchmarks` builds acx-bench-train there:
#                this script builds nothing.
# --out DIR      write DIR/train.md (a Markdown section, `## Training
#                throughput`) and DIR/train.dat (see below), and keep every
#                run's output in DIR/train-runs/. Without --out the Markdown
#                goes to stdout (progress to stderr).
# --quick        a smoke run of about 15 s: 1 and 2 ranks, fmnist (a small
#                synthetic MLP when the data is missing), NO_SHARD and
#                FULL_SHARD, few steps; peers only with --peers. Measures nothing.
# --np-list L    world sizes (default 1,2,4).
# --models L     fmnist and/or synthetic (default both). fmnist reads --data
#                FILE.h5 (default data/fashion-mnist.h5 in the repository,
#                imported from /usr/share/datasets/fashion-mnist with
#                BUILD_DIR/acx if missing; without either, fmnist is left out
#                and the report says so).
# --strategies L acx's sharding strategies (default NO_SHARD,SHARD_GRAD_OP,
#                FULL_SHARD,HYBRID_SHARD). HYBRID_SHARD runs with
#                ranks_per_node = ranks/2 (two simulated nodes) on an even
#                number of ranks, as FULL_SHARD on one node otherwise.
# --peers        require the peer rounds (benchmarks/peers/run-peer.sh):
#                without this flag they run when the runner exists and its
#                environment is installed (exit status 3 of the runner = not
#                installed: the report says so and the rest goes on);
#                --no-peers never runs them.
# --peer-rounds N  rounds of the process-level alternation (default 3, 1
#                with --quick). Per (model, ranks) pair the processes run
#                A P1 A P2 A P3 A P1 A ... A (A = acx, P = the MPI loop, then
#                Accelerate, then PyTorch DDP, each N times): every peer
#                process runs between two acx processes, and its round's
#                ratio is the mean of those two acx samples/s over the peer's
#                (a linear drift of the machine's load cancels). The report
#                gives the median of the N per-round ratios, with min and max.
# --peer-np-list L world sizes of the peer rounds (default: --np-list).
# --peer-models L  models of the peer rounds (default: --models; run-all's
#                report uses fmnist, the MLP the peers are written for).
# --dims D       the synthetic model (default 1024,4096,4096,256).
# --threads T    BLAS threads per rank, for acx, the MPI loop and the peers
#                (default 1: the ranks already fill the cores).
# --peer-runner P  the peer runner (default benchmarks/peers/run-peer.sh).
# Anything after -- goes to every acx-bench-train run (e.g. --mixed-precision bf16).
#
# Steps per run: fmnist 100 timed steps per side in 5 rounds after 10
# warm-up steps, a 20-step cross-check (peer rounds: 500 steps after 20);
# synthetic 6 timed steps per side in 3 rounds after 1 warm-up step, a
# 2-step cross-check; batch 64 samples per rank. The default matrix (2
# models x 4 strategies x 1, 2, 4 ranks) took 5 minutes on the 2-core VM
# under a load average of 4-7 from other jobs. The peer rounds run 6R + 1
# processes per (model, ranks) pair with R = --peer-rounds (19 with the
# default 3; 6 of them Python peers, which cost 10-25 s of start-up each
# there): fmnist alone on 1, 2, 4 ranks took 15 minutes at a load average
# of 10-35 (2026-11-29), so a report on a budget may pass --peer-rounds 1.
#
# train.dat: whitespace columns under one `#` header line,
#   impl model strategy ranks samples_per_s acx_ratio acx_ratio_min
#   acx_ratio_max ratio_rounds
# one row per acx and mpi-loop run of the matrix, then one per peer (model,
# ranks) with strategy NO_SHARD. samples_per_s: the row's throughput (all
# ranks, over every timed step; peers: the median over their rounds).
# acx_ratio: acx's throughput over this row's impl, the median of the
# per-round ratios measured side by side — mpi-loop rows: acx-bench-train's
# acx_over_mpi_loop (rounds alternating inside one job, same strategy; NOT
# the ratio of the samples_per_s columns, which a few preempted steps
# dominate on a loaded machine); peer rows: the process-level rounds above.
# acx_ratio_min/_max: the smallest and largest per-round ratio; ratio_rounds:
# how many rounds. acx's own rows have `-` there.
#
# Exit status: 0 every run succeeded (and every cross-check passed); 1 some
# run failed (the report is still written, the failure in it; a peer that
# died at exit after writing its result is noted, not failed); 2 bad usage.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
me=run-train.sh
build=
out=
quick=0
np_list=
models=
strategies=
peers=auto
peer_rounds=
peer_np_list=
peer_models=
data=
dims=
threads=1
runner=$top/benchmarks/peers/run-peer.sh
usage_error() { echo "$me: $*" >&2; exit 2; }
need() { [ $# -ge 2 ] || usage_error "$1 needs a value"; }
while [ $# -gt 0 ]; do
    case $1 in
    --out) need "$@"; out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --np-list) need "$@"; np_list=$2; shift 2 ;;
    --models) need "$@"; models=$2; shift 2 ;;
    --strategies) need "$@"; strategies=$2; shift 2 ;;
    --peers) peers=yes; shift ;;
    --no-peers) peers=no; shift ;;
    --peer-rounds) need "$@"; peer_rounds=$2; shift 2 ;;
    --peer-np-list) need "$@"; peer_np_list=$2; shift 2 ;;
    --peer-models) need "$@"; peer_models=$2; shift 2 ;;
    --data) need "$@"; data=$2; shift 2 ;;
    --dims) need "$@"; dims=$2; shift 2 ;;
    --threads) need "$@"; threads=$2; shift 2 ;;
    --peer-runner) need "$@"; runner=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) awk 'NR > 1 && /^set -eu/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) usage_error "unknown option '$1' (benchmark options go after --)" ;;
    *)
        [ -z "$build" ] || usage_error "unexpected argument '$1'"
        build=$1; shift ;;
    esac
done

# ---- settings ----
if [ "$quick" = 1 ]; then
    np_list=${np_list:-1,2}
    models=${models:-fmnist}
    strategies=${strategies:-NO_SHARD,FULL_SHARD}
    peer_rounds=${peer_rounds:-1}
    if [ "$peers" = auto ]; then peers=no-quick; fi
else
    np_list=${np_list:-1,2,4}
    models=${models:-fmnist,synthetic}
    strategies=${strategies:-NO_SHARD,SHARD_GRAD_OP,FULL_SHARD,HYBRID_SHARD}
    peer_rounds=${peer_rounds:-3}
fi
is_count() { case $1 in '' | *[!0-9]* | 0*) return 1 ;; esac; }
np_list=$(echo "$np_list" | tr ',' ' ')
peer_np_list=$(echo "${peer_np_list:-$np_list}" | tr ',' ' ')
for n in $peer_np_list; do is_count "$n" || usage_error "--peer-np-list: '$n' is not a positive integer"; done
for n in $np_list; do is_count "$n" || usage_error "--np-list: '$n' is not a positive integer"; done
[ -n "$np_list" ] || usage_error "--np-list is empty"
models=$(echo "$models" | tr ',' ' ')
for m in $models; do
    case $m in fmnist | synthetic) ;; *) usage_error "--models: '$m' (expected fmnist or synthetic)" ;; esac
done
for m in $(echo "$peer_models" | tr ',' ' '); do
    case $m in fmnist | synthetic) ;; *) usage_error "--peer-models: '$m' (expected fmnist or synthetic)" ;; esac
done
strategies=$(echo "$strategies" | tr ',' ' ' | tr '[:lower:]' '[:upper:]')
for s in $strategies; do
    case $s in NO_SHARD | SHARD_GRAD_OP | FULL_SHARD | HYBRID_SHARD) ;;
    *) usage_error "--strategies: '$s' (expected NO_SHARD, SHARD_GRAD_OP, FULL_SHARD or HYBRID_SHARD)" ;;
    esac
done
is_count "$peer_rounds" || usage_error "--peer-rounds must be a positive integer, not '$peer_rounds'"
is_count "$threads" || usage_error "--threads must be a positive integer, not '$threads'"
if [ -n "$dims" ]; then
    echo "$dims" | grep -Eq '^[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*$' ||
        usage_error "--dims must be IN,H1,H2,OUT (four positive integers), not '$dims'"
fi

build=${build:-$top/build}
bench=$build/benchmarks/acx-bench-train
[ -x "$bench" ] || { echo "$me: $bench not built; run 'make -C $build benchmarks' first" >&2; exit 1; }

if [ -n "$out" ]; then
    mkdir -p "$out/train-runs" || { echo "$me: cannot create '$out'" >&2; exit 1; }
    out=$(cd "$out" && pwd)
    work=$out/train-runs
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/acx-run-train.XXXXXX")
    trap 'rm -rf "$work"' EXIT
fi
trap 'exit 130' INT
trap 'exit 143' TERM
notes=$work/notes.txt
: >"$notes"
note() { echo "$*" >>"$notes"; echo "$me: $*" >&2; }

# ---- data ----
case " $models " in *" fmnist "*)
    if [ -z "$data" ]; then
        data=$top/data/fashion-mnist.h5
        src=/usr/share/datasets/fashion-mnist
        if [ ! -f "$data" ] && [ -f "$src/train-images-idx3-ubyte.gz" ]; then
            mkdir -p "$(dirname "$data")"
            echo "$me: importing $src into $data" >&2
            "$build/acx" data import-idx "$src" -o "$data" >&2 || rm -f "$data"
        fi
    fi
    if [ ! -f "$data" ]; then
        note "fmnist left out: no $data (apt-get install dataset-fashion-mnist, or --data FILE.h5)"
        models=$(echo " $models " | sed 's/ fmnist / /; s/^ *//; s/ *$//')
        if [ "$quick" = 1 ] && [ -z "$models" ]; then models=synthetic; fi
    fi
    ;;
esac
[ -n "$models" ] || { echo "$me: no model left to run" >&2; exit 1; }

# model_args MODEL: acx-bench-train's options for MODEL (without --only etc.)
model_args() {
    if [ "$1" = fmnist ]; then
        if [ "$quick" = 1 ]; then echo "--model fmnist --data $data --batch-size 64 --steps 20 --rounds 2 --warmup 2 --check-steps 5"
        else echo "--model fmnist --data $data --batch-size 64 --steps 100 --rounds 5 --warmup 10 --check-steps 20"; fi
    else
        if [ "$quick" = 1 ]; then echo "--model synthetic --dims ${dims:-128,256,256,64} --batch-size 64 --steps 6 --rounds 2 --warmup 1 --check-steps 2"
        else echo "--model synthetic --dims ${dims:-1024,4096,4096,256} --batch-size 64 --steps 6 --rounds 3 --warmup 1 --block-warmup 0 --check-steps 2"; fi
    fi
}
# the same as peer flags: --batch-size B --steps S --warmup W (and the data or dims)
arg_of() { # arg_of KEY ARGS...: the value after KEY in ARGS
    k=$1; shift
    while [ $# -gt 1 ]; do [ "$1" = "$k" ] && { echo "$2"; return; }; shift; done
}
# (model_args' output is split into words on purpose below: the data path
# must not contain blanks)
# shellcheck disable=SC2046,SC2086
data_arg() { # data_arg MODEL: --data FILE or --dims D
    if [ "$1" = fmnist ]; then echo "--data $data"; else echo "--dims $(arg_of --dims $(model_args synthetic))"; fi
}

cores=$(nproc 2>/dev/null || echo 1)
limit=${ACX_RUN_TRAIN_TIMEOUT:-600}
# run_mpi NP ARGS...: mpirun on localhost as tests/lib.sh does (root, more
# ranks than cores, shared memory only); ranks yield when idle only when
# there are more of them than cores, unless OMPI_MCA_mpi_yield_when_idle is
# set (=1 is kinder to a machine other jobs are loading: busy-polling ranks
# then steal the cores their peers need).
run_mpi() {
    n=$1
    shift
    yield=0
    if [ "$n" -gt "$cores" ]; then yield=1; fi
    root=
    if [ "$(id -u)" -eq 0 ]; then root=--allow-run-as-root; fi
    OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
        OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-$yield} \
        OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
        timeout -k 10 "$limit" mpirun $root -np "$n" --oversubscribe "$@"
}

# json_get FILE KEY: KEY's value in the last line of FILE (a flat JSON object)
json_get() {
    tail -n 1 "$1" | sed -n "s/.*[{,] *\"$2\": *\"\{0,1\}\([^,\"}]*\)\"\{0,1\} *[,}].*/\1/p"
}
# json_array FILE KEY: KEY's array of numbers in the last line of FILE (the
# --json file: acx-bench-train's stdout line has no arrays),
# blank-separated (empty when there is none)
json_array() {
    tail -n 1 "$1" | sed -n "s/.*[{,] *\"$2\": *\\[\([^]]*\)].*/\1/p" | tr -d ',' | tr -s ' '
}
# round_range A B: "min max n" of the per-round ratios a_i / b_i of two
# blank-separated lists of equal length, or "- - -"
round_range() {
    awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); m = split(b, y, " ")
        if (n == 0 || n != m) { print "- - -"; exit }
        for (i = 1; i <= n; i++) { if (!(y[i] > 0)) { print "- - -"; exit }
            r = x[i] / y[i]; if (i == 1 || r < lo) lo = r; if (i == 1 || r > hi) hi = r }
        printf "%.5g %.5g %d\n", lo, hi, n }'
}

failed=0
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
started=$(date -u '+%Y-%m-%d %H:%M UTC')
t0=$(date +%s)

# ---- the matrix: acx against the MPI loop in the same run ----
matrix=$work/matrix.txt
: >"$matrix"
for m in $models; do
    for s in $strategies; do
        for n in $np_list; do
            extra=
            if [ "$s" = HYBRID_SHARD ] && [ "$n" -ge 2 ]; then
                if [ $((n % 2)) -eq 0 ]; then extra=--acx-ranks_per_node=$((n / 2)); fi
            fi
            log=$work/$m-$s-$n.log
            jf=$work/$m-$s-$n.json # (the per-round arrays are only here)
            echo "$me: $m $s on $n rank(s)" >&2
            rc=0
            # shellcheck disable=SC2046 # model_args: words, split on purpose
            run_mpi "$n" "$bench" $(model_args "$m") --sharding-strategy "$s" --threads "$threads" \
                --json "$jf" $extra "$@" >"$log" 2>&1 || rc=$?
            if [ "$rc" -ne 0 ] || [ "$(json_get "$log" impl)" != acx ]; then
                failed=1
                note "$m $s on $n rank(s) failed (exit $rc): $(grep '^acx-bench-train' "$log" | tail -n 1)"
                echo "$m $s $n - - - - - - - - - - - - - failed - - -" >>"$matrix"
                continue
            fi
            v() { x=$(json_get "$log" "$1"); echo "${x:--}" | sed 's/^null$/-/'; }
            echo "$m $s $n $(v samples_per_s) $(v mpi_loop_samples_per_s) $(v acx_over_mpi_loop) $(v acx_over_mpi_loop_step) $(v acx_over_mpi_loop_cpu)" \
                "$(v step_ms) $(v step_ms_p10) $(v step_ms_p90) $(v mpi_loop_step_ms)" \
                "$(v comm_share) $(v mpi_loop_comm_share) $(v acx_wait_share) $(v check_max_rel_diff) $(v check)" \
                "$(round_range "$(json_array "$jf" round_samples_per_s)" "$(json_array "$jf" mpi_loop_round_samples_per_s)")" >>"$matrix"
            if [ "$(v check)" = failed ]; then failed=1; fi
        done
    done
done

# ---- the peers: processes alternating in rounds ----
# Per (model, ranks): A P A P ... A, where A is an acx process and P runs,
# R times over, the MPI loop (a control: the same loop as the matrix's
# baseline, measured like the peers), Accelerate and PyTorch DDP. Each P sits
# between two A: its round's ratio is mean(A before, A after) / P, so that a
# load that drifts linearly over the pair cancels. A peer whose runner exits
# 3 (its environment is not installed) is dropped with a note at its first
# attempt; when none is left, the section stops.
# peers.txt rows: model ranks round impl samples_per_s acx_before acx_after
# ratio step_ratio (acx's own processes: round = their index, then `- - -`
# and their median step in ms). step_ratio: the same by median step, the
# peer's median step ÷ the mean of the two acx processes' (`-` when the peer
# reports no step_ms_median).
peer_impls=
peer_state=
if [ "$peers" = no ]; then
    peer_state="not run (--no-peers)"
elif [ "$peers" = no-quick ]; then
    peer_state="not run (--quick without --peers)"
elif [ ! -f "$runner" ]; then
    peer_state="not run: $runner does not exist"
    if [ "$peers" = yes ]; then note "peers asked for, but $runner does not exist"; fi
else
    peer_impls="accelerate ddp"
fi
peerfile=$work/peers.txt
: >"$peerfile"
# peer_run IMPL LOG: one process of IMPL for the current $m, $n, $margs,
# $b, $st, $w; its exit status
peer_run() {
    pi=$1 pl=$2
    shift 2
    case $pi in
    acx | mpi-loop)
        # shellcheck disable=SC2046,SC2086
        run_mpi "$n" "$bench" $margs --steps "$st" --warmup "$w" --only "$pi" --no-compute-only \
            --check-steps 0 --rounds 1 --block-warmup 0 --threads "$threads" "$@" >"$pl" 2>&1 ;;
    *)
        # shellcheck disable=SC2046
        timeout -k 10 "$limit" sh "$runner" "$pi" --np "$n" --model "$m" $(data_arg "$m") \
            --batch-size "$b" --steps "$st" --warmup "$w" --threads "$threads" \
            --lr 0.001 --weight-decay 0.01 --seed 42 >"$pl" 2>&1 ;;
    esac
}
# acx_run: one acx process; sets acx_sps and acx_step (its median step in
# ms; both empty when it failed)
acx_run() {
    k=$((k + 1))
    alog=$work/peer-$m-$n-acx$k.log
    echo "$me: peers: $m on $n rank(s): acx ($k)" >&2
    rc=0
    peer_run acx "$alog" "$@" || rc=$?
    acx_sps=$(json_get "$alog" samples_per_s)
    acx_step=$(json_get "$alog" step_ms)
    if [ "$rc" -ne 0 ] || [ -z "$acx_sps" ]; then
        failed=1
        acx_sps='' acx_step=''
        note "peers: acx process $k, $m on $n rank(s) failed (exit $rc): $(tail -n 1 "$alog")"
    else
        echo "$m $n $k acx $acx_sps - - - ${acx_step:--}" >>"$peerfile"
    fi
}
for m in $models; do
    [ -n "$peer_impls" ] || break
    case ",${peer_models:-$m}," in *",$m,"*) ;; *) continue ;; esac
    margs=$(model_args "$m")
    # shellcheck disable=SC2086
    b=$(arg_of --batch-size $margs) st=$(arg_of --steps $margs) w=$(arg_of --warmup $margs)
    # fmnist steps take about a millisecond: a process's whole timed window
    # must outlast the preemptions of a shared machine (the start-up of a
    # peer process costs far more than these steps anyway)
    if [ "$m" = fmnist ] && [ "$quick" = 0 ]; then st=500 w=20; fi
    for n in $peer_np_list; do
        k=0
        acx_sps='' acx_step=''
        fresh=0 # 1: the last process was acx (acx_sps is the one before the next peer)
        r=1
        while [ -n "$peer_impls" ] && [ "$r" -le "$peer_rounds" ]; do
            for impl in $peer_impls mpi-loop; do
                # (mpi-loop only while a peer is left: it is their control)
                case " $peer_impls mpi-loop " in *" $impl "*) ;; *) continue ;; esac
                [ -n "$peer_impls" ] || break
                [ "$fresh" = 1 ] || acx_run "$@"
                before=$acx_sps before_step=$acx_step
                log=$work/peer-$m-$n-$r-$impl.log
                echo "$me: peers: $m on $n rank(s), round $r: $impl" >&2
                prc=0
                peer_run "$impl" "$log" "$@" || prc=$?
                sps=$(json_get "$log" samples_per_s)
                # the peer's median step (acx-bench-train --only mpi-loop: step_ms)
                if [ "$impl" = mpi-loop ]; then pstep=$(json_get "$log" step_ms); else pstep=$(json_get "$log" step_ms_median); fi
                if [ "$prc" -eq 3 ] && [ "$impl" != mpi-loop ]; then
                    note "peer $impl not installed: $(tail -n 1 "$log")"
                    peer_impls=$(echo " $peer_impls " | sed "s/ $impl / /; s/^ *//; s/ *\$//")
                    fresh=1
                    continue
                fi
                acx_run "$@"
                fresh=1
                if [ -z "$sps" ]; then
                    failed=1
                    note "peers: $impl, $m on $n rank(s), round $r failed (exit $prc): $(tail -n 1 "$log")"
                    continue
                fi
                # a peer that wrote its result and then died at exit (seen
                # with torch's gloo: "terminate called without an active
                # exception" in a process's shutdown) measured its steps:
                # the round counts, the report says what happened
                if [ "$prc" -ne 0 ]; then
                    note "peers: $impl, $m on $n rank(s), round $r: exit $prc after writing its result (kept): $(grep -m1 -e terminate -e Error "$log" || tail -n 1 "$log")"
                fi
                ratio=$(awk -v a="$before" -v c="$acx_sps" -v p="$sps" 'BEGIN {
                    s = 0; k = 0; if (a != "") { s += a; k++ } if (c != "") { s += c; k++ }
                    if (k == 0 || !(p > 0)) print "-"; else printf "%.7g\n", s / k / p }')
                sratio=$(awk -v a="$before_step" -v c="$acx_step" -v p="$pstep" 'BEGIN {
                    s = 0; k = 0; if (a > 0) { s += a; k++ } if (c > 0) { s += c; k++ }
                    if (k == 0 || !(p > 0)) print "-"; else printf "%.7g\n", p / (s / k) }')
                echo "$m $n $r $impl $sps ${before:--} ${acx_sps:--} $ratio $sratio" >>"$peerfile"
            done
            r=$((r + 1))
        done
    done
done
if [ -z "$peer_state" ]; then
    if awk '$4 != "acx" && $4 != "mpi-loop" { found = 1 } END { exit !found }' "$peerfile"; then
        peer_state=ran
    else
        peer_state="not run: no peer is installed or none ran (see the notes)"
    fi
fi
t1=$(date +%s)
load_end=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")

# ---- the report ----
cpu=$(sed -n 's/^model name[^:]*: *//p' /proc/cpuinfo 2>/dev/null | head -n 1)
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null)
over=
for n in $np_list; do if [ "$n" -gt "$cores" ]; then over="$over $n"; fi; done

report() {
    echo "## Training throughput"
    echo
    echo "acx-bench-train (benchmarks/train.c): the MLP training step (forward, backward, gradient"
    echo "averaging, AdamW; examples/fashion_mnist/mlp.c) through acx under each sharding strategy,"
    echo "against the hand-written MPI data-parallel loop (one \`MPI_Allreduce\` of all gradients,"
    echo "plain AdamW) and a compute-only step (the loop without the all-reduce), alternating in"
    echo "rounds inside one job. Models: fmnist = 784-256-128-10 on Fashion-MNIST, synthetic ="
    # shellcheck disable=SC2046
    echo "$(arg_of --dims $(model_args synthetic) | tr ',' '-') on fixed-seed synthetic data; batch 64 samples per rank; $threads"
    echo "BLAS thread(s) per rank; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}."
    echo
    echo "Machine: $cores core(s) ($cpu), $mem; $started; load average $load_start at the start,"
    echo "$load_end at the end ($((t1 - t0)) s in all). The machine is shared and noisy (±20–30% from run to run):"
    echo "compare the ratios measured side by side, not absolute numbers across runs."
    if [ -n "$over" ]; then
        echo "**Oversubscribed:**$(echo "$over" | sed 's/ \([0-9]*\)/ \1,/g; s/,$//') rank(s) on $cores core(s): ranks share cores"
        echo "(Open MPI yields when idle), so scaling efficiency there is bounded by $cores/N."
    fi
    if [ "$quick" = 1 ]; then echo; echo "*--quick: a smoke run with few steps; the numbers mean nothing.*"; fi
    echo
    echo "Definitions. samples/s: all ranks, over every timed step of the side (the slowest rank's"
    echo "time per block). step ms: per step, the slowest rank's time; median, 10th and 90th percentile."
    echo "acx/mpi-loop: the median over rounds of the per-round throughput ratio (same run, same"
    echo "batches; the figure train.dat's acx_ratio and run-all's target use, not the ratio of the"
    echo "samples/s columns, which a few preempted steps dominate), with the smallest and largest"
    echo "per-round ratio; by median step: mpi-loop's median step time ÷ acx's, which ignores the steps"
    echo "another job preempted (on a loaded machine the figure to trust); by CPU time: each side's"
    echo "CPU time per round, mpi-loop ÷ acx, median over rounds (counts only while a process runs,"
    echo "but includes MPI's busy waiting). comm share: 1 − median step(compute-only) ÷ median"
    echo "step(side) — the part of a step that is not local compute of a replicated step"
    echo "(exposed communication and, for acx, its"
    echo "bookkeeping; under SHARD_GRAD_OP/FULL_SHARD acx's optimizer updates only 1/N of the"
    echo "parameters, so its share is net of that saving; noise can make it slightly negative)."
    echo "acx wait: the share of acx's step inside the calls that move data (acquire, grads_ready,"
    echo "release, backward_end; median over steps, mean over ranks). cross-check: after C steps from identical parameters, max over"
    echo "tensors of ‖acx − loop‖/‖loop‖ (limit 1e-5; every strategy computes the same update in fp32)."
    echo "HYBRID_SHARD runs with ranks_per_node = ranks/2 (two simulated nodes: sharded in a node,"
    echo "replicated across); on 1 rank every strategy is the same computation."
    echo
    echo "### acx against the hand-written MPI loop (same run, alternating)"
    echo
    echo "| model | strategy | ranks | acx samples/s | mpi-loop samples/s | acx/mpi-loop | per-round min–max | acx/mpi-loop by median step | acx/mpi-loop by CPU time | acx step ms | acx p10 ms | acx p90 ms | mpi-loop step ms | acx comm share | mpi-loop comm share | acx wait share | cross-check max rel diff | cross-check |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    awk '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
           $1, $2, $3, f($4, 1), f($5, 1), f($6, 3), $18 == "-" ? "-" : f($18, 3) "–" f($19, 3), f($7, 3), f($8, 3), f($9, 3), f($10, 3), f($11, 3),
           f($12, 3), f($13, 3), f($14, 3), f($15, 3), e($16), $17 }
         function f(x, d) { return x == "-" ? "-" : sprintf("%.*f", d, x) }
         function e(x) { return x == "-" ? "-" : sprintf("%.2e", x) }' "$matrix"
    echo
    echo "### Scaling efficiency"
    echo
    echo "samples/s at N ranks ÷ (N × samples/s at 1 rank), per implementation, same model and strategy."
    echo
    echo "| model | strategy | ranks | acx samples/s | acx efficiency | mpi-loop samples/s | mpi-loop efficiency |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    awk '{ k = $1 " " $2; if ($3 == 1 && $4 != "-") { a1[k] = $4; m1[k] = $5 } row[NR] = $0 }
         END { for (i = 1; i <= NR; i++) { split(row[i], x, " "); k = x[1] " " x[2]
                 ea = (k in a1) && x[4] != "-" ? sprintf("%.3f", x[4] / (x[3] * a1[k])) : "-"
                 em = (k in m1) && x[5] != "-" ? sprintf("%.3f", x[5] / (x[3] * m1[k])) : "-"
                 printf "| %s | %s | %s | %s | %s | %s | %s |\n", x[1], x[2], x[3],
                        x[4] == "-" ? "-" : sprintf("%.1f", x[4]), ea,
                        x[5] == "-" ? "-" : sprintf("%.1f", x[5]), em } }' "$matrix"
    echo
    echo "### Peers: Accelerate and PyTorch DDP (processes alternating in rounds)"
    echo
    if [ "$peer_state" != ran ]; then
        echo "Peers $peer_state."
    else
        echo "Whole processes alternate: acx (\`acx-bench-train --only acx\`, NO_SHARD), then a peer"
        echo "(through benchmarks/peers/run-peer.sh; the MPI loop as \`--only mpi-loop\`, a control that"
        echo "shows how much process-level rounds move), then acx again: A P A P … A, each peer"
        echo "$peer_rounds time(s) per (model, ranks). Same model, data, batch per rank, AdamW, $threads"
        echo "thread(s) per rank, warm-up and steps (fmnist: $( [ "$quick" = 1 ] && echo "few" || echo 500) timed steps per process). A round's ratio"
        echo "is the mean of the two acx processes around the peer's ÷ the peer's samples/s (a load"
        echo "that drifts linearly cancels); ratio cells: the median of the per-round ratios (min–max,"
        echo "number of rounds). samples/s: medians over the processes. By median step: the same rounds"
        echo "compared by each process's median step time (the slowest rank's, per step; the peer's ÷ the"
        echo "mean of the two acx processes'), which leaves out the steps another job preempted: on a"
        echo "loaded machine it shows the implementations' own speed, the throughput ratio what a user"
        echo "got there."
        echo
        echo "| model | ranks | acx samples/s | mpi-loop samples/s | accelerate samples/s | ddp samples/s | acx/mpi-loop (control) | acx/accelerate | acx/ddp | by median step: acx/mpi-loop | acx/accelerate | acx/ddp |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        awk '{ k = $1 " " $2; if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }
               v[k, $4, ++n[k, $4]] = $5
               if ($4 != "acx" && $8 != "-") q[k, $4, 1, ++nq[k, $4, 1]] = $8
               if ($4 != "acx" && NF >= 9 && $9 != "-") q[k, $4, 2, ++nq[k, $4, 2]] = $9 }
             function med(a, m,   i, j, t, b) { for (i = 1; i <= m; i++) b[i] = a[i]
                 for (i = 2; i <= m; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j + 1] = b[j]; b[j + 1] = t }
                 return m == 0 ? "" : (m % 2 ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2) }
             function medimpl(k, p,   i, a) { for (i = 1; i <= n[k, p]; i++) a[i] = v[k, p, i]; return med(a, n[k, p]) }
             # ratio(k, p, w): w = 1 by throughput, 2 by median step
             function ratio(k, p, w,   i, a, m, lo, hi) { m = nq[k, p, w]; if (m == 0) return "-"
                 for (i = 1; i <= m; i++) { a[i] = q[k, p, w, i]; if (i == 1 || a[i] < lo) lo = a[i]; if (i == 1 || a[i] > hi) hi = a[i] }
                 return sprintf("%.3f (%.3f–%.3f, %d)", med(a, m), lo, hi, m) }
             function f(x, d) { return x == "" ? "-" : sprintf("%.*f", d, x) }
             END { for (i = 1; i <= nk; i++) { k = keys[i]; split(k, x, " ")
                     printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", x[1], x[2],
                        f(medimpl(k, "acx"), 1), f(medimpl(k, "mpi-loop"), 1), f(medimpl(k, "accelerate"), 1),
                        f(medimpl(k, "ddp"), 1), ratio(k, "mpi-loop", 1), ratio(k, "accelerate", 1),
                        ratio(k, "ddp", 1), ratio(k, "mpi-loop", 2), ratio(k, "accelerate", 2),
                        ratio(k, "ddp", 2) } }' "$peerfile"
    fi
    if [ -s "$notes" ]; then
        echo
        echo "Notes:"
        echo
        sed 's/^/* /' "$notes"
    fi
}

dat() {
    echo "# impl model strategy ranks samples_per_s acx_ratio acx_ratio_min acx_ratio_max ratio_rounds"
    # acx and the MPI loop of the matrix: acx_ratio = acx-bench-train's
    # acx_over_mpi_loop (median of its in-job rounds), min/max from the
    # rounds' samples/s
    awk '$4 != "-" { print "acx", $1, $2, $3, $4, "-", "-", "-", "-" }
         $5 != "-" { print "mpi-loop", $1, $2, $3, $5, $6, $18, $19, $20 }' "$matrix"
    # the peers: medians over their rounds (acx and the MPI loop are in the rows above)
    awk '$4 != "acx" && $4 != "mpi-loop" { k = $4 " " $1 " NO_SHARD " $2; v[k, ++n[k]] = $5
             if ($8 != "-") q[k, ++nq[k]] = $8; if (!(k in s)) { s[k] = 1; keys[++nk] = k } }
         function med(a, m,   i, j, t, b) { for (i = 1; i <= m; i++) b[i] = a[i]
             for (i = 2; i <= m; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j + 1] = b[j]; b[j + 1] = t }
             return m % 2 ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2 }
         END { for (i = 1; i <= nk; i++) { k = keys[i]; m = n[k]; split("", a); split("", c)
                 for (j = 1; j <= m; j++) a[j] = v[k, j]
                 r = "- - - -"
                 if (nq[k] > 0) { lo = hi = q[k, 1]
                     for (j = 1; j <= nq[k]; j++) { c[j] = q[k, j]; if (c[j] < lo) lo = c[j]; if (c[j] > hi) hi = c[j] }
                     r = sprintf("%.6g %.6g %.6g %d", med(c, nq[k]), lo, hi, nq[k]) }
                 print k, med(a, m), r } }' "$peerfile"
}

if [ -n "$out" ]; then
    report >"$out/train.md"
    dat >"$out/train.dat"
    echo "$me: wrote $out/train.md and $out/train.dat (runs in $work)" >&2
else
    report
fi
exit "$failed"

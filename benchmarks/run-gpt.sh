#!/bin/sh
# benchmarks/run-gpt.sh — GPT training throughput: acx-gpt against the same
# GPT in PyTorch under DDP and FSDP2 (benchmarks/peers/gpt_torch_bench.py,
# gloo, float32), side by side in one run, at 1, 2 and 4 ranks; and acx-gpt's
# model FLOP rate at 1 rank over this machine's sgemm rate (MFU), measured in
# the same run by acx-bench-sgemm.
#
#   benchmarks/run-gpt.sh [BUILD_DIR] [--out DIR] [--quick] [--rounds N]
#       [--np-list 1,2,4] [--steps S] [--warmup W] [--data FILE.h5]
#       [--batch-size B] [--seq-len T] [--d-model C] [--heads NH] [--layers L]
#       [--no-peers]
#
# BUILD_DIR      a built tree with acx-gpt and benchmarks/acx-bench-sgemm
#                (`make benchmarks` builds the latter); default build/.
# --out DIR      write DIR/gpt.md (Markdown) and keep every run's output in
#                DIR/gpt-runs/; without it the Markdown goes to stdout.
# --quick        a smoke run (3 min on the loaded 2-core VM, mostly Python
#                start-up): 1 and 2 ranks, 1 round,
#                4 timed steps after 2. Measures nothing.
# --rounds N     rounds per world size (default 3). The processes alternate
#                A D A F A D A F ... A (A acx-gpt, D PyTorch DDP, F PyTorch
#                FSDP2; N of each peer): every peer process runs between two
#                acx-gpt processes, and its round's ratio is the mean of
#                those two acx tokens/s over the peer's (a linear drift of
#                the machine's load cancels). The table gives the median of
#                the N per-round ratios with their min and max.
# --np-list L    world sizes (default 1,2,4; above the number of cores the
#                runs are oversubscribed: mpirun --oversubscribe).
# --steps S      timed steps per process (default 30), after --warmup W
#                untimed ones (default 5). The learning-rate warm-up of
#                both sides is W + S/10 steps, then cosine to 0 at W + S.
# --data F       an acx-gpt token file; default: the King James Bible made
#                into one in the work directory (Debian's bible-kjv:
#                `bible -f Gen1:1-Rev22:21`, then acx data import-text).
# model          acx-gpt's defaults: B 16 sequences per rank, T 64, C 128,
#                NH 4, L 4 (vocab 256, bytes).
# --no-peers     acx-gpt and the sgemm rate only.
#
# One thread per rank everywhere: OPENBLAS_NUM_THREADS=1 for acx-gpt and
# acx-bench-sgemm; OMP_NUM_THREADS=1 and torch.set_num_threads(1) for the
# peers. All three start under the same mpirun flags (torchrun does not
# work on this host; gpt_torch_bench.py reads Open MPI's rank variables).
# The peers run in the Python of $ACX_PEERS_VENV (default
# ~/.cache/acx/peers-venv, benchmarks/peers/setup-venv.sh installs it):
# torch >= 2.6 for torch.distributed.fsdp.fully_shard. Without it the
# report says so and has acx-gpt's numbers only.
#
# tokens/s: all ranks together (B x T x world per step) over the timed
# steps. acx-gpt: from its per-step lines (--log-every 1: each step's
# tokens over its wall time; the timed window is the sum of the steps after
# the first W, evaluation excluded as acx-gpt excludes it). The peers: the
# wall time of S steps between two barriers after W steps.
#
# MFU: model FLOPs per token, counted from the kernels of
# examples/gpt/gpt_model.c (a multiply-add = 2 FLOPs; forward + backward):
#   linear IC -> OC (gpt_matmul_fwd + _bwd): 2 IC OC forward, 2 IC OC for
#     dinp, 2 IC OC for dW = 6 IC OC per token. A block's four: qkv C x 3C,
#     attn proj C x C, fc C x 4C, fc proj 4C x C: 6 x 12 C^2 = 72 C^2;
#     the tied head C x V once: 6 C V.
#   attention (gpt_attention_fwd/_bwd, causal: position t reads t+1 keys):
#     forward q.k and a.v: 4 hs (t+1) per head = 4 C (t+1); backward
#     da, dv, dq, dk: 8 C (t+1); the mean of t+1 over t < T is (T+1)/2:
#     6 C (T+1) per token per block. (The kernels run these as sgemms
#     over blocks of 16 queries, which also multiply the masked part of
#     each diagonal block: T 64 computes 5/8 of the full T x T products
#     where the causal count is 65/128. The extra work is not counted.)
#   F = 72 L C^2 + 6 C V + 6 L C (T+1)   (5,114,880 for the defaults)
# Not counted (not matrix products): LayerNorm, GELU, softmax, biases,
# residuals, the embedding, AdamW. MFU = tokens/s x F over the sgemm rate:
# acx-bench-sgemm's gpt_mix (the FLOP-weighted rate of exactly the model's
# sgemm shapes) and its 1024^3 square product, both at 1 thread.
#
# Exit status: 0 every run succeeded; 1 some run failed (the report is
# still written, the failure noted in it); 2 bad usage.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
me=run-gpt.sh
build=
out=
quick=0
rounds=
np_list=
steps=
warmup=
data=
B=16
T=64
C=128
NH=4
L=4
peers=1
usage_error() { echo "$me: $*" >&2; exit 2; }
need() { [ $# -ge 2 ] || usage_error "$1 needs a value"; }
posint() { case $2 in '' | *[!0-9]* | 0*) usage_error "$1 must be a positive integer, not '$2'" ;; esac; }
while [ $# -gt 0 ]; do
    case $1 in
    --out) need "$@"; out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --rounds) need "$@"; posint "$1" "$2"; rounds=$2; shift 2 ;;
    --np-list) need "$@"; np_list=$2; shift 2 ;;
    --steps) need "$@"; posint "$1" "$2"; steps=$2; shift 2 ;;
    --warmup) need "$@"; posint "$1" "$2"; warmup=$2; shift 2 ;;
    --data) need "$@"; data=$2; shift 2 ;;
    --batch-size) need "$@"; posint "$1" "$2"; B=$2; shift 2 ;;
    --seq-len) need "$@"; posint "$1" "$2"; T=$2; shift 2 ;;
    --d-model) need "$@"; posint "$1" "$2"; C=$2; shift 2 ;;
    --heads) need "$@"; posint "$1" "$2"; NH=$2; shift 2 ;;
    --layers) need "$@"; posint "$1" "$2"; L=$2; shift 2 ;;
    --no-peers) peers=0; shift ;;
    -h | --help) awk 'NR > 1 && /^set -eu/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) usage_error "unknown option '$1'" ;;
    *)
        [ -z "$build" ] || usage_error "unexpected argument '$1'"
        build=$1; shift ;;
    esac
done
if [ "$quick" = 1 ]; then
    rounds=${rounds:-1}; np_list=${np_list:-1,2}; steps=${steps:-4}; warmup=${warmup:-2}
    sgemm_time=0.05
else
    rounds=${rounds:-3}; np_list=${np_list:-1,2,4}; steps=${steps:-30}; warmup=${warmup:-5}
    sgemm_time=0.5
fi
case $np_list in '' | *[!0-9,]* | ,* | *, | *,,*) usage_error "--np-list '$np_list': expected e.g. 1,2,4" ;; esac
[ $((C % NH)) -eq 0 ] || usage_error "--heads $NH does not divide --d-model $C"
build=${build:-$top/build}
gpt=$build/acx-gpt
sgemm=$build/benchmarks/acx-bench-sgemm
[ -x "$gpt" ] || usage_error "$gpt not built"
[ -x "$sgemm" ] || usage_error "$sgemm not built (make -C $build benchmarks)"
command -v mpirun >/dev/null 2>&1 || usage_error "mpirun not found"
VENV=${ACX_PEERS_VENV:-${HOME:-/nonexistent}/.cache/acx/peers-venv}
py=$VENV/bin/python
torch_bench=$top/benchmarks/peers/gpt_torch_bench.py

if [ -n "$out" ]; then
    mkdir -p "$out"
    work=$out/gpt-runs
    mkdir -p "$work"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/acx-gpt-bench.XXXXXX")
fi
notes=$work/notes
: >"$notes"
failed=0
note() { echo "$*" >>"$notes"; echo "$me: $*" >&2; }

export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}" PYTHONDONTWRITEBYTECODE=1
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
ncores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')

if [ "$peers" = 1 ]; then
    if ! [ -x "$py" ] || ! "$py" -c 'import h5py, numpy, torch; from torch.distributed.fsdp import fully_shard' 2>/dev/null; then
        note "the PyTorch peers did not run: $py lacks torch with FSDP2 (fully_shard), h5py or numpy; benchmarks/peers/setup-venv.sh installs them"
        peers=0
    fi
fi

# ---- the token file ----
if [ -z "$data" ]; then
    data=$work/kjv.h5
    if [ ! -s "$data" ]; then
        command -v bible >/dev/null 2>&1 ||
            usage_error "no --data and no 'bible' (Debian's bible-kjv) to make the King James Bible's tokens"
        bible -f Gen1:1-Rev22:21 | sed 's/^[^ ]* //' >"$work/kjv.txt"
        "$(dirname "$gpt")/acx" data import-text "$work/kjv.txt" -o "$data" >&2
    fi
fi
[ -f "$data" ] || usage_error "--data $data: no such file"

total=$((warmup + steps))
lrw=$((warmup + steps / 10))
model="--batch-size $B --seq-len $T --d-model $C --heads $NH --layers $L"

free_port() {
    if [ "$peers" = 1 ]; then
        "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    else
        echo 29517
    fi
}

# run_acx NP LOG: prints acx-gpt's tokens/s over the steps after the warm-up
run_acx() {
    over=
    [ "$1" -le "$ncores" ] || over=--oversubscribe
    # shellcheck disable=SC2086
    if ! mpirun -np "$1" $over "$gpt" --data "$data" $model --steps "$total" --warmup "$lrw" \
        --log-every 1 --eval-every 0 --eval-batches 1 --sample-len 0 >"$2" 2>&1; then
        note "acx-gpt at $1 ranks failed (see $2)"
        failed=1
        echo -
        return
    fi
    awk -v w="$warmup" -v tps=$((B * T * $1)) '
        $1 == "step" && $3 == "loss" && $7 == "tokens/s" && $2 > w && $8 > 0 { tok += tps; t += tps / $8 }
        END { if (t > 0) printf "%.1f\n", tok / t; else print "-" }' "$2"
}

# run_peer IMPL NP LOG: prints the peer's tokens/s
run_peer() {
    over=
    [ "$2" -le "$ncores" ] || over=--oversubscribe
    # shellcheck disable=SC2086
    if ! MASTER_PORT=$(free_port) mpirun -np "$2" $over -x MASTER_PORT -x OMP_NUM_THREADS \
        -x GLOO_SOCKET_IFNAME -x PYTHONDONTWRITEBYTECODE "$py" "$torch_bench" --impl "$1" \
        --data "$data" $model --steps "$steps" --warmup "$warmup" --lr-warmup "$lrw" \
        --threads 1 >"$3" 2>&1; then
        note "the $1 peer at $2 ranks failed (see $3)"
        failed=1
        echo -
        return
    fi
    sed -n 's/^gpt_torch_bench .* tokens_per_s=\([0-9.]*\) .*/\1/p' "$3" | tail -n 1 | grep . || echo -
}

# ---- the sgemm rate (before the runs; again after them: the best of both) ----
run_sgemm() {
    "$sgemm" --batch "$B" --seq-len "$T" --d-model "$C" --vocab 256 --layers "$L" \
        --min-time "$sgemm_time" >"$1" 2>&1 || { note "acx-bench-sgemm failed (see $1)"; failed=1; }
}
echo "$me: sgemm rates" >&2
run_sgemm "$work/sgemm-1.txt"

# ---- the rounds ----
# results: one line per process: np impl round tokens_per_s
res=$work/results
: >"$res"
for np in $(echo "$np_list" | tr ',' ' '); do
    echo "$me: $np rank(s)" >&2
    i=0
    a=$(run_acx "$np" "$work/acx-np$np-$i.log")
    echo "$np acx $i $a" >>"$res"
    if [ "$peers" = 1 ]; then
        r=0
        while [ "$r" -lt "$rounds" ]; do
            for impl in ddp fsdp2; do
                p=$(run_peer "$impl" "$np" "$work/$impl-np$np-$r.log")
                echo "$np $impl $r $p" >>"$res"
                i=$((i + 1))
                a=$(run_acx "$np" "$work/acx-np$np-$i.log")
                echo "$np acx $i $a" >>"$res"
            done
            r=$((r + 1))
        done
    else
        while [ "$i" -lt "$rounds" ]; do
            i=$((i + 1))
            a=$(run_acx "$np" "$work/acx-np$np-$i.log")
            echo "$np acx $i $a" >>"$res"
        done
    fi
done
run_sgemm "$work/sgemm-2.txt"
# run_acx and run_peer run in $(...): their failures show as '-' here
if awk '$4 == "-" { bad = 1 } END { exit !bad }' "$res"; then failed=1; fi
load_end=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')

# ---- the report ----
flops=$((72 * L * C * C + 6 * C * 256 + 6 * L * C * (T + 1)))
sg() { cat "$work/sgemm-1.txt" "$work/sgemm-2.txt" 2>/dev/null |
    awk -v k="$1" '$1 == "sgemm" && $2 == k && NF == 3 && $3 > m { m = $3 } END { print m + 0 }'; }
mix=$(sg gpt_mix)
square=$(sg square)

report() {
    echo "## GPT training throughput"
    echo
    echo "\`benchmarks/run-gpt.sh --rounds $rounds --np-list $np_list --steps $steps --warmup $warmup\`:"
    echo "acx-gpt against the same GPT in PyTorch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '(not run)')"
    echo "(DDP and FSDP2 over gloo), float32, one thread per rank, B $B x T $T per rank,"
    echo "C $C, $NH heads, $L blocks, $steps timed steps after $warmup; $(date -u '+%Y-%m-%d %H:%M UTC'),"
    echo "$ncores cores, load average $load_start at the start, $load_end at the end."
    echo
    echo "| ranks | acx-gpt tokens/s | DDP tokens/s | FSDP2 tokens/s | acx/DDP | acx/FSDP2 |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
    # per round ratio: the peer over the mean of the acx runs before and after it
    awk '{ np = $1; if (!(np in seen)) { seen[np] = 1; nps[++nn] = np }
           v[np, $2, ++n[np, $2]] = $4; seq[np, ++ns[np]] = $2 " " $4 }
         function med(a, m,   i, j, t, b) { for (i = 1; i <= m; i++) b[i] = a[i]
             for (i = 2; i <= m; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j + 1] = b[j]; b[j + 1] = t }
             return m % 2 ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2 }
         function medimpl(np, p,   i, a, m) { m = 0
             for (i = 1; i <= n[np, p]; i++) if (v[np, p, i] != "-") a[++m] = v[np, p, i]
             return m ? sprintf("%.0f", med(a, m)) : "-" }
         function ratio(np, p,   i, m, a, lo, hi, x, y, z) { m = 0
             for (i = 2; i < ns[np]; i += 2) { split(seq[np, i], y, " "); if (y[1] != p) continue
                 split(seq[np, i - 1], x, " "); split(seq[np, i + 1], z, " ")
                 if (x[2] == "-" || y[2] == "-" || z[2] == "-") continue
                 a[++m] = (x[2] + z[2]) / 2 / y[2]
                 if (m == 1 || a[m] < lo) lo = a[m]; if (m == 1 || a[m] > hi) hi = a[m] }
             return m ? sprintf("%.2f (%.2f–%.2f, %d)", med(a, m), lo, hi, m) : "-" }
         END { for (k = 1; k <= nn; k++) { np = nps[k]
                 printf "| %s | %s | %s | %s | %s | %s |\n", np, medimpl(np, "acx"), medimpl(np, "ddp"),
                     medimpl(np, "fsdp2"), ratio(np, "ddp"), ratio(np, "fsdp2") } }' "$res"
    echo
    echo "Tokens/s: medians over the processes (acx-gpt $((2 * rounds + 1)) per world size, each peer"
    echo "$rounds); ratios: median of the per-round ratios (min–max, rounds)."
    echo
    one=$(awk '$1 == 1 && $4 != "-" { a[$2, ++n[$2]] = $4 }
        function med(p,   i, j, t, b, m) { m = n[p]; for (i = 1; i <= m; i++) b[i] = a[p, i]
            for (i = 2; i <= m; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j + 1] = b[j]; b[j + 1] = t }
            return m == 0 ? 0 : (m % 2 ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2) }
        END { print med("acx"), med("ddp"), med("fsdp2") }' "$res")
    # shellcheck disable=SC2086
    set -- $one
    awk -v f="$flops" -v a="$1" -v d="$2" -v s="$3" -v mix="$mix" -v sq="$square" 'BEGIN {
        printf "MFU at 1 rank: model FLOPs per token F = 72 L C^2 + 6 C V + 6 L C (T+1) = %d (from the\n", f
        printf "kernels of examples/gpt/gpt_model.c; see the header of benchmarks/run-gpt.sh). This\n"
        printf "machine'\''s sgemm at 1 thread (acx-bench-sgemm, best of a run before and after the rounds):\n"
        printf "%.1f GFLOP/s on the GPT'\''s shapes (FLOP-weighted), %.1f GFLOP/s on 1024^3.\n\n", mix, sq
        printf "| 1 rank | tokens/s | model GFLOP/s | of the GPT-shape sgemm rate | of the 1024^3 rate |\n"
        printf "| --- | ---: | ---: | ---: | ---: |\n"
        n = split("acx-gpt DDP FSDP2", name, " "); r[1] = a; r[2] = d; r[3] = s
        for (i = 1; i <= n; i++) if (r[i] > 0) { g = r[i] * f / 1e9
            printf "| %s | %.0f | %.2f | %s | %s |\n", name[i], r[i], g,
                (mix > 0 ? sprintf("%.0f%%", 100 * g / mix) : "-"),
                (sq > 0 ? sprintf("%.0f%%", 100 * g / sq) : "-") } }'
    if [ -s "$notes" ]; then
        echo
        echo "Notes:"
        echo
        sed 's/^/* /' "$notes"
    fi
}

if [ -n "$out" ]; then
    report >"$out/gpt.md"
    echo "$me: wrote $out/gpt.md (runs in $work)" >&2
else
    report
fi
exit "$failed"

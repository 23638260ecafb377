#!/usr/bin/env bash
# benchmarks/peers/check-gpt-loss.sh — acx-gpt against its PyTorch reference
# (gpt_reference.py), loss by loss.
#
# Runs acx-gpt for STEPS steps in fp32 at 1 and 2 ranks (mpirun) under no_shard
# and full_shard, and with mixed_precision bf16 (no_shard at 1 rank, full_shard
# at 2), each time writing its initial weights (--save-init, safetensors)
# and its batches (--dump-batches); gpt_reference.py then trains the same
# model from the same weights on the same batches, and the maximum relative
# difference |acx - torch| / torch over the per-step losses is reported:
#   fp32          target <= 1e-4 (exit 1 above it)
#   bf16          against the reference with bf16-rounded parameter copies
#                 (what acx's mixed_precision bf16 computes on the CPU), and
#                 against the fp32 reference: the bound bf16 itself costs.
# Needs python3 with torch 1.13+, h5py and numpy (Debian's python3-torch).
#
#   benchmarks/peers/check-gpt-loss.sh [--acx-gpt PATH] [--text FILE] [--steps N]
#       [--python PY] [--out DIR]
# Text: the King James Bible of Debian's bible-kjv (`bible`), else a fortunes
# file, else --text.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
gpt=$root/build-host/acx-gpt
[ -x "$gpt" ] || gpt=$root/build/acx-gpt
text=
steps=50
py=/usr/bin/python3
out=
while [ $# -gt 0 ]; do
    case $1 in
    --acx-gpt) gpt=$2; shift 2 ;;
    --text) text=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "check-gpt-loss: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -x "$gpt" ] || { echo "check-gpt-loss: no acx-gpt at '$gpt' (build first, or --acx-gpt)" >&2; exit 2; }
[ -x "$(dirname "$gpt")/acx" ] ||
    { echo "check-gpt-loss: no acx next to '$gpt' (it writes the token file)" >&2; exit 2; }
"$py" -c 'import torch, h5py, numpy' 2>/dev/null ||
    { echo "check-gpt-loss: $py lacks torch, h5py or numpy" >&2; exit 2; }
out=${out:-$(mktemp -d /tmp/check-gpt-loss.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_rmaps_base_oversubscribe=1

if [ -z "$text" ]; then
    text=$out/text.txt
    if command -v bible >/dev/null; then
        # every verse, without its reference ("Ge1:1 ")
        bible -f Gen1:1-Rev22:21 2>/dev/null | sed 's/^[^ ]* //' >"$text"
    else
        f=
        for c in /usr/share/games/fortunes/*; do # a fortune file, not its .dat/.u8 index
            case $c in *.*) ;; *) [ -f "$c" ] && f=$c && break ;; esac
        done
        [ -n "$f" ] || { echo "check-gpt-loss: no text: install bible-kjv or fortunes, or --text" >&2; exit 2; }
        cp "$f" "$text"
    fi
fi
# the token file: acx's own importer, the acx next to acx-gpt
"$(dirname "$gpt")/acx" data import-text "$text" -o "$out/tokens.h5" >/dev/null

model=(--layers 4 --d-model 128 --heads 4 --seq-len 64)
# the reference takes the batches from --dump-batches, not a batch size
train=(--steps "$steps" --lr 1e-3 --warmup 10 --weight-decay 0.1 --max-grad-norm 1)

compare() { # acx-file torch-file -> max relative difference
    "$py" - "$1" "$2" <<'EOF'
import sys
def losses(p):
    return [float(l.split()[3]) for l in open(p) if l.startswith("step ") and l.split()[2] == "loss"]
a, t = losses(sys.argv[1]), losses(sys.argv[2])
if len(a) != len(t) or not a:
    sys.exit(f"check-gpt-loss: {len(a)} acx losses, {len(t)} reference losses")
print("%.3g" % max(abs(x - y) / abs(y) for x, y in zip(a, t)))
EOF
}

worst_fp32=0
# precision strategy ranks
runs="fp32 no_shard 1
fp32 no_shard 2
fp32 full_shard 1
fp32 full_shard 2
bf16 no_shard 1
bf16 full_shard 2"
while read -r mp strategy np; do
    tag=$mp-$strategy-np$np
    rm -rf "$out/proj-$tag" "$out/batches-$tag".r*
    mpirun -np "$np" "$gpt" --data "$out/tokens.h5" "${model[@]}" "${train[@]}" \
        --batch-size 8 --log-every 1 --eval-every 0 --sample-len 0 --mixed-precision "${mp/fp32/no}" \
        --sharding-strategy "$strategy" --save-init "$out/init-$tag.safetensors" \
        --dump-batches "$out/batches-$tag" --project-dir "$out/proj-$tag" </dev/null >"$out/acx-$tag.txt"
    refargs=(--data "$out/tokens.h5" --weights "$out/init-$tag.safetensors" --batches "$out/batches-$tag"
        --world "$np" "${model[@]}" "${train[@]}")
    "$py" "$here/gpt_reference.py" "${refargs[@]}" </dev/null >"$out/torch-fp32-$tag.txt"
    d=$(compare "$out/acx-$tag.txt" "$out/torch-fp32-$tag.txt")
    if [ "$mp" = fp32 ]; then
        echo "fp32, $strategy, $np rank(s), $steps steps: max relative loss difference $d (target <= 1e-4)"
        worst_fp32=$("$py" -c "print(max($worst_fp32, $d))")
    else
        "$py" "$here/gpt_reference.py" "${refargs[@]}" --bf16 </dev/null >"$out/torch-bf16-$tag.txt"
        b=$(compare "$out/acx-$tag.txt" "$out/torch-bf16-$tag.txt")
        echo "bf16, $strategy, $np rank(s), $steps steps: max relative loss difference $b against" \
            "the bf16-copy reference, $d against the fp32 reference"
    fi
done <<<"$runs"
echo "outputs in $out"
"$py" -c "import sys; sys.exit(0 if $worst_fp32 <= 1e-4 else 1)"

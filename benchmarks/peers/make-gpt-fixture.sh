#!/usr/bin/env bash
# benchmarks/peers/make-gpt-fixture.sh — write tests/data/gpt_tiny_losses.txt,
# the PyTorch losses tests/gpt.test compares acx-gpt with (so the test needs
# no PyTorch).
#
# For a tiny model on tests/data/gpt_tiny.txt (byte tokens), each case runs
# acx-gpt to get the initial weights (--save-init) and the batches
# (--dump-batches) it trains on, then benchmarks/peers/gpt_reference.py
# trains the same model on the same batches in PyTorch (float32; bf16 cases
# with bf16-rounded parameter copies, as acx's mixed_precision bf16), and its
# per-step losses go into the fixture. The fixture holds the cases and flags
# too: the test runs exactly what is written there.
#
#   benchmarks/peers/make-gpt-fixture.sh [--acx-gpt PATH] [--python PY]
# (the token file is written by the `acx` next to acx-gpt: acx data import-text)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
gpt=$root/build-host/acx-gpt
[ -x "$gpt" ] || gpt=$root/build/acx-gpt
py=/usr/bin/python3
while [ $# -gt 0 ]; do
    case $1 in
    --acx-gpt) gpt=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    *) echo "make-gpt-fixture: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
fixture=$root/tests/data/gpt_tiny_losses.txt
tmp=$(mktemp -d /tmp/gpt-fixture.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_rmaps_base_oversubscribe=1

model="--layers 2 --d-model 32 --heads 2 --seq-len 16"
train="--steps 20 --lr 3e-3 --warmup 4 --weight-decay 0.1 --max-grad-norm 1 --seed 42"
cases="fp32-np1 1 --mixed-precision no
fp32-np2 2 --mixed-precision no
accum2-np1 1 --gradient-accumulation-steps 2
bf16-np2 2 --mixed-precision bf16
fullshard-np2 2 --sharding-strategy full_shard --mixed-precision no
gradop-np2 2 --sharding-strategy shard_grad_op --mixed-precision no
fullshard-bf16-np2 2 --sharding-strategy full_shard --mixed-precision bf16"

"$(dirname "$gpt")/acx" data import-text "$root/tests/data/gpt_tiny.txt" -o "$tmp/tokens.h5" \
    --val-fraction 0.1 >/dev/null
{
    echo "# acx-gpt against PyTorch: per-step training losses of benchmarks/peers/gpt_reference.py"
    echo "# ($("$py" -c 'import torch; print("torch", torch.__version__)'), float32) on"
    echo "# tests/data/gpt_tiny.txt, made by benchmarks/peers/make-gpt-fixture.sh; read by"
    echo "# tests/gpt.test. Lines: model|train FLAGS; case NAME RANKS FLAGS; loss NAME STEP LOSS."
    echo "model $model"
    echo "train $train --batch-size 4"
    echo "$cases" | sed 's/^/case /'
} >"$tmp/fixture"
echo "$cases" | while read -r name np flags; do
    # shellcheck disable=SC2086 # the flags are words
    mpirun -np "$np" "$gpt" --data "$tmp/tokens.h5" $model $train --batch-size 4 $flags \
        --log-every 1 --eval-every 0 --sample-len 0 --quiet --project-dir "$tmp/p-$name" \
        --save-init "$tmp/init-$name.safetensors" --dump-batches "$tmp/b-$name" </dev/null >/dev/null
    extra=
    case $flags in *bf16*) extra=--bf16 ;; esac
    # shellcheck disable=SC2086
    "$py" "$here/gpt_reference.py" --data "$tmp/tokens.h5" --weights "$tmp/init-$name.safetensors" \
        --batches "$tmp/b-$name" --world "$np" $model $train $extra </dev/null |
        awk -v n="$name" '$1 == "step" && $3 == "loss" { print "loss", n, $2, $4 }' >>"$tmp/fixture"
done
mv "$tmp/fixture" "$fixture"
echo "wrote $fixture ($(grep -c '^loss' "$fixture") losses)"

#!/bin/sh
# benchmarks/peers/setup-venv.sh: create the Python virtual environment that the
# training-throughput peers (accelerate_fmnist.py, ddp_fmnist.py) run in.
#
# The peers are optional extras of acx-bench-train: nothing in `make check`
# needs them. This script installs pinned versions of PyTorch, Hugging Face
# Accelerate and h5py from PyPI (the CPU code paths are used; the PyPI torch
# wheel for Linux x86_64 also pulls NVIDIA runtime wheels, several GB) into
#
#     $ACX_PEERS_VENV   (default: $HOME/.cache/acx/peers-venv)
#
# which is outside the source tree, so nothing of it is ever committed.
#
# Usage: benchmarks/peers/setup-venv.sh [--force]
#   --force   remove an existing environment first
# Environment: ACX_PEERS_VENV (where), PYTHON (interpreter, default python3,
#   3.10 or newer).
# Exit status: 0 installed and importable, 1 anything failed (the reason is
# printed on stderr).
set -eu

# Pinned versions: the comparison in docs/benchmarks.md was measured with these.
TORCH_VERSION=2.15.0
ACCELERATE_VERSION=1.15.0
H5PY_VERSION=3.16.0
NUMPY_VERSION=2.4.6

VENV=${ACX_PEERS_VENV:-${HOME:?HOME is not set}/.cache/acx/peers-venv}
PY=${PYTHON:-python3}

die() {
    echo "setup-venv.sh: $*" >&2
    exit 1
}

force=0
for arg in "$@"; do
    case $arg in
    --force) force=1 ;;
    -h | --help)
        sed -n '2,19s/^# \{0,1\}//p' "$0"
        exit 0
        ;;
    *) die "unknown argument '$arg' (expected --force or --help)" ;;
    esac
done

command -v "$PY" >/dev/null 2>&1 ||
    die "no Python interpreter '$PY' (set PYTHON=/path/to/python3)"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' ||
    die "'$PY' is $("$PY" -V 2>&1); PyTorch $TORCH_VERSION needs Python 3.10 or newer (set PYTHON=)"

# Refuse a path inside the git work tree unless git ignores it: several GB
# must never end up in a commit.
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
case $VENV in /*) ;; *) VENV=$(pwd)/$VENV ;; esac
case $VENV/ in
"$srcdir"/*)
    rel=${VENV#"$srcdir"/}
    if ! git -C "$srcdir" check-ignore -q "$rel/" 2>/dev/null; then
        die "ACX_PEERS_VENV=$VENV is inside the source tree and not ignored by git; pick a path outside it"
    fi
    ;;
esac

if [ $force = 1 ] && [ -e "$VENV" ]; then
    echo "setup-venv.sh: removing $VENV" >&2
    rm -rf "$VENV"
fi

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup-venv.sh: creating virtual environment $VENV ($("$PY" -V 2>&1))" >&2
    mkdir -p "$(dirname "$VENV")" || die "cannot create $(dirname "$VENV")"
    "$PY" -m venv "$VENV" ||
        die "'$PY -m venv $VENV' failed (on Debian: apt-get install python3-venv)"
fi

echo "setup-venv.sh: installing torch==$TORCH_VERSION accelerate==$ACCELERATE_VERSION h5py==$H5PY_VERSION numpy==$NUMPY_VERSION from PyPI (several GB; this takes minutes)" >&2
"$VENV/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip ||
    die "upgrading pip in $VENV failed (is PyPI reachable?)"
"$VENV/bin/python" -m pip install --disable-pip-version-check \
    "torch==$TORCH_VERSION" "accelerate==$ACCELERATE_VERSION" \
    "h5py==$H5PY_VERSION" "numpy==$NUMPY_VERSION" ||
    die "pip install into $VENV failed (see pip's message above); the peers stay unavailable"

# Check what the peers import, so a broken install is reported here and not
# halfway through a benchmark run.
"$VENV/bin/python" - <<'PYEOF' || die "the installed packages do not import (see the traceback above)"
import accelerate, h5py, numpy, torch, torch.distributed as dist
assert dist.is_available() and dist.is_gloo_available(), "torch.distributed without gloo"
print("setup-venv.sh: torch %s, accelerate %s, h5py %s, numpy %s, gloo available"
      % (torch.__version__, accelerate.__version__, h5py.__version__, numpy.__version__))
PYEOF

echo "setup-venv.sh: done in $(($(date +%s) - start)) s: $VENV" >&2

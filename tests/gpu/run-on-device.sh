#!/usr/bin/env bash
# tests/gpu/run-on-device.sh — everything acx checks on a GPU machine, in one
# call of at most ~540 s: the GPU tests (kernels against the CPU references,
# the cuBLAS MLP against the CPU MLP, the NCCL backend, device selection,
# the MPI backend staging device buffers, device-resident state, the
# benchmarks on device buffers, acx-bench-train-gpu's check), the kernels'
# throughput and the all-reduce bus bandwidth at 256 MiB (the NCCL backend
# directly, and acx-bench-allreduce -d cuda with -b nccl and -b mpi), the
# bf16 GEMM rate and the synthetic model's training step with its MFU
# (acx-bench-train-gpu), and acx-fmnist --device cuda against the CPU run.
#
#   tests/gpu/run-on-device.sh [OUTDIR]
#
# The programs come from the bundle that tests/gpu/make-bundle.sh packed on
# the development machine (.gpu/acx-gpu-bundle.tar.xz, carried to the
# device; docs/gpu.md, "Running the GPU checks"): it is unpacked into the
# work directory and nothing is built. libnccl.so.2 and libcublas(Lt).so.13
# come from the device: CUDA's lib64 or ldconfig when there, else the pip
# wheels of its Python (site-packages/nvidia/*/lib). Without a bundle the
# script configures and builds from source instead (fallback: needs make,
# autotools when configure is missing, Open MPI, HDF5, libyaml, OpenBLAS).
#
# OUTDIR (default: $OUT, else ./gpu-results) receives three files, whatever
# happens (the device tool returns at most 8):
#   run-on-device.log   everything printed, with timings
#   results.txt         one line per check: "<name>: PASS|FAIL|SKIP ..." and
#                       the benchmark lines
#   logs.tar.gz         logs/: each step's output, each test's log, the
#                       benchmarks' JSON; re-created after every step, so a
#                       run stopped at the tool's limit still returns it
# Time: every step has a limit and is skipped, "SKIP (out of time)", when
# less than its minimum is left of ACX_GPU_BUDGET_S (default 540) counted
# from the start; nothing of a stopped step survives it (each step runs in a
# session of its own, killed at its end). Environment: ACX_GPU_WORK (work
# directory, default /tmp/acx-gpu), ACX_GPU_SITE_PACKAGES (where to look for
# the nvidia wheels first), ACX_GPU_FMNIST_DATA (the Fashion-MNIST IDX .gz
# folder; default the bundle's .gpu/fashion-mnist, else
# /usr/share/datasets/fashion-mnist), ACX_GPU_FMNIST_EPOCHS (default 3),
# ACX_GPU_FMNIST_CONFIGS (the acx options of each --device cuda run,
# separated by ';'; default "--acx-backend=nccl;--acx-backend=mpi"),
# ACX_GPU_TRAIN_DIMS, ACX_GPU_TRAIN_BATCH, ACX_GPU_TRAIN_STEPS and
# ACX_GPU_TRAIN_STRATEGIES (acx-bench-train-gpu; see its step),
# ACX_GPU_FULL_SUITE=1 (default 0) runs the other tests too, with what time
# is left, ACX_GPU_JOBS (make -j of the fallback build, default 16).
# Exit status: 0 when nothing failed, 1 when a check failed (on a machine
# where nvidia-smi shows a GPU, a GPU test that SKIPs counts as failed),
# 2 when the programs could not be set up.
set -u
# the ACX_GPU_* settings are this script's: not for the programs (acx warns
# about ACX_* variables that are not its settings)
for v in $(compgen -v ACX_GPU_); do export -n "${v?}"; done

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-${OUT:-$PWD/gpu-results}}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
work=${ACX_GPU_WORK:-/tmp/acx-gpu}
logs=$work/logs
rm -rf "$logs" && mkdir -p "$logs" || exit 2
log=$out/run-on-device.log
results=$out/results.txt
: >"$results"
: >"$log"
exec > >(tee -a "$log") 2>&1
tee_pid=$!

t_start=$(date +%s)
deadline=$((t_start + ${ACX_GPU_BUDGET_S:-540}))
failed=0
left() { echo $((deadline - $(date +%s))); }
step() {
    echo
    echo "==== [$(($(date +%s) - t_start)) s, $(left) s left] $*"
}
result() {
    echo "$*" >>"$results"
    echo "RESULT $*"
}
failure() { # failure LINE: a result that fails the run
    result "$*"
    failed=1
}
# pack_logs: logs/ (and results.txt) into $out/logs.tar.gz, replaced whole
pack_logs() {
    cp "$results" "$logs/" 2>/dev/null
    tar -C "$work" -czf "$out/logs.tar.gz.part" logs 2>/dev/null &&
        mv -f "$out/logs.tar.gz.part" "$out/logs.tar.gz"
}
# limit_for CAP: the seconds a step may take: CAP, or what is left less a
# margin of 15 s for packing and the summary
limit_for() {
    local l=$(($(left) - 15))
    [ "$l" -ge 1 ] || l=1
    if [ "$1" -lt "$l" ]; then echo "$1"; else echo "$l"; fi
}
# have_time MIN NAME: true when a step that needs MIN s still fits, else a
# "NAME: SKIP (out of time)" result
have_time() {
    [ "$(limit_for "$1")" -ge "$1" ] && return 0
    result "$2: SKIP (out of time: $(left) s left, $1 s needed)"
    return 1
}

# ---- running a step: a session of its own, killed whole at its end ----
session_of() { awk '{ sub(/^.*\) /, ""); print $4 }' "/proc/$1/stat" 2>/dev/null; }
my_sid=$(session_of $$)
# kill_session SID: SIGKILL every process of session SID (never our own)
kill_session() {
    [ -n "$1" ] && [ "$1" != "$my_sid" ] && [ "$1" != 0 ] || return 0
    awk -v s="$1" '{ f = FILENAME; sub(/^.*\) /, ""); split($0, a, " ");
        if (a[4] == s) { sub(/^\/proc\//, "", f); sub(/\/stat$/, "", f); print f } }' \
        /proc/[0-9]*/stat 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    return 0
}
have_setsid=0
command -v setsid >/dev/null 2>&1 && have_setsid=1
# run_limited LIMIT FILE CMD...: CMD with its output appended to FILE, in a
# session of its own, stopped after LIMIT s (status 124, or 137 when it
# needed SIGKILL); whatever CMD started and left running (mpirun's ranks,
# the inner timeouts of tests/run-mpi.sh) is killed when it returns.
run_limited() {
    local limit=$1 f=$2 rc sid=
    shift 2
    rm -f "$work/step.sid"
    if [ $have_setsid = 1 ]; then
        # shellcheck disable=SC2016 # $$ and $@ are the inner shell's
        timeout -k 5 "$limit" setsid bash -c 'echo $$ >"$0"; exec "$@"' "$work/step.sid" "$@" \
            >>"$f" 2>&1 </dev/null
        rc=$?
        sid=$(cat "$work/step.sid" 2>/dev/null)
    else
        timeout -k 5 "$limit" "$@" >>"$f" 2>&1 </dev/null
        rc=$?
    fi
    kill_session "$sid"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "(stopped after $limit s)" >>"$f"; fi
    return $rc
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export ACX_LOG_LEVEL=${ACX_LOG_LEVEL:-warn}

# ---- the machine ----
step "machine"
date -u
uname -a
echo "cores: $(nproc); $(getconf GNU_LIBC_VERSION 2>/dev/null)"
timeout 20 nvidia-smi -L || echo "nvidia-smi: not available"
timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv 2>/dev/null
ngpu=$(timeout 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if command -v "${NVCC:-/usr/local/cuda/bin/nvcc}" >/dev/null 2>&1; then
    "${NVCC:-/usr/local/cuda/bin/nvcc}" --version | tail -2
else
    echo "nvcc: not found"
fi
command -v python3 >/dev/null 2>&1 && echo "python3: $(command -v python3)"
[ "$ngpu" -ge 1 ] || result "machine: no GPU visible (nvidia-smi -L); GPU tests are expected to SKIP"

# ---- the device's NCCL and cuBLAS (before any LD_LIBRARY_PATH of ours) ----
# device_libs SONAME...: for each library not found by the loader's cache or
# in CUDA's lib64 (the programs' run path), the folder of the nvidia wheel
# that has it is appended to dev_path; unresolved names go to dev_missing.
dev_path=
dev_missing=
sites() {
    [ -n "${ACX_GPU_SITE_PACKAGES:-}" ] && echo "$ACX_GPU_SITE_PACKAGES"
    command -v python3 >/dev/null 2>&1 &&
        timeout 20 python3 -c 'import site, sysconfig
print("\n".join([sysconfig.get_paths()["purelib"]] + site.getsitepackages()))' 2>/dev/null
    ls -d /opt/torch/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages 2>/dev/null
}
device_libs() {
    local so d s f
    for so in "$@"; do
        f=$(ldconfig -p 2>/dev/null | awk -v s="$so" '$1 == s { print $NF; exit }')
        [ -n "$f" ] || f=/usr/local/cuda/lib64/$so
        if [ -s "$f" ]; then # (-s: not an empty file)
            echo "$so: $f (the system's)"
            continue
        fi
        d=
        while read -r s; do
            [ -d "$s/nvidia" ] || continue
            f=$(find "$s/nvidia" -maxdepth 3 -name "$so" 2>/dev/null | head -1)
            if [ -n "$f" ]; then
                d=$(dirname "$f")
                break
            fi
        done < <(sites | awk '!seen[$0]++')
        if [ -n "$d" ]; then
            echo "$so: $d"
            case ":$dev_path:" in *":$d:"*) ;; *) dev_path=${dev_path:+$dev_path:}$d ;; esac
        else
            echo "$so: NOT FOUND (ldconfig, /usr/local/cuda/lib64, site-packages/nvidia/*/lib)"
            dev_missing="$dev_missing $so"
        fi
    done
}
step "NCCL and cuBLAS on this machine"
device_libs libnccl.so.2 libcublas.so.13 libcublasLt.so.13
if command -v python3 >/dev/null 2>&1; then
    timeout 20 python3 -c 'import importlib.metadata as m
for p in ("nvidia-nccl-cu13", "nvidia-cublas", "nvidia-cuda-runtime", "torch"):
    try: print(p, m.version(p))
    except Exception: print(p, "not installed")' 2>/dev/null
fi

# ---- the programs: the bundle, else a build from source ----
bundle_tar=$src/.gpu/acx-gpu-bundle.tar.xz
builddir=
setup_bundle() {
    local b=$work/bundle need have
    step "unpack the bundle (.gpu/acx-gpu-bundle.tar.xz) into $b"
    rm -rf "$b" && mkdir -p "$b" || return 1
    # tar -J needs the xz program; without it, Python's tarfile (lzma)
    if command -v xz >/dev/null 2>&1; then
        timeout 120 tar -C "$b" -xJf "$bundle_tar"
    else
        timeout 120 python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
if hasattr(tarfile, "tar_filter"):
    t.extractall(sys.argv[2], filter="tar")
else:
    t.extractall(sys.argv[2])' "$bundle_tar" "$b"
    fi || {
        result "bundle: FAIL (cannot unpack $bundle_tar)"
        return 1
    }
    cat "$b/BUNDLE-INFO"
    cp "$b/BUNDLE-INFO" "$logs/"
    need=$(sed -n 's/^glibc needed: GLIBC_\([0-9.]*\).*/\1/p' "$b/BUNDLE-INFO")
    have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
    if [ -n "$need" ] && [ -n "$have" ] &&
        [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
        result "bundle: FAIL (it needs glibc $need; this machine has $have)"
        return 1
    fi
    # shellcheck source=/dev/null
    . "$b/env.sh"
    builddir=$b/build
    result "bundle: PASS (unpacked; $(sed -n 's/^source: //p' "$b/BUNDLE-INFO"))"
}
build_from_source() {
    local b=$work/build missing="" tool m t0 nccl_dir="" jobs=${ACX_GPU_JOBS:-16} werror=--enable-werror
    step "no bundle: configure and build from source in $b"
    for tool in make gcc mpicc mpirun pkg-config; do
        command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
    done
    [ -x "$src/configure" ] || command -v autoreconf >/dev/null 2>&1 || missing="$missing autoreconf"
    if command -v pkg-config >/dev/null 2>&1; then
        for m in ompi-c hdf5-openmpi yaml-0.1 zlib json-c openblas; do
            pkg-config --exists "$m" || missing="$missing pkg-config:$m"
        done
    fi
    [ -f /usr/local/cuda/include/cublas_v2.h ] || missing="$missing cublas_v2.h"
    if [ ! -f /usr/local/cuda/include/nccl.h ]; then
        # the pip wheel's NCCL: its include/ and lib/ (libnccl.so.2 only: -lnccl needs libnccl.so)
        local w
        w=$(find "$(dirname "${dev_path%%:*}")" -maxdepth 2 -name nccl.h 2>/dev/null | head -1)
        if [ -n "$w" ] && [ -n "$dev_path" ]; then
            nccl_dir=$work/nccl
            mkdir -p "$nccl_dir/lib"
            ln -sfn "$(dirname "$w")" "$nccl_dir/include"
            ln -sf "$(dirname "$(dirname "$w")")/lib/libnccl.so.2" "$nccl_dir/lib/libnccl.so"
        else
            missing="$missing nccl.h"
        fi
    fi
    if [ -n "$missing" ]; then
        result "build: FAIL (no bundle, and missing:$missing)"
        return 1
    fi
    cd "$src" || return 1
    if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
        timeout 120 autoreconf -fi >"$logs/autoreconf.log" 2>&1 || {
            tail -30 "$logs/autoreconf.log"
            result "autoreconf: FAIL"
            return 1
        }
    fi
    rm -rf "$b" && mkdir -p "$b" && cd "$b" || return 1
    t0=$(date +%s)
    for werror in --enable-werror ""; do
        # shellcheck disable=SC2086 # werror is one option or none
        run_limited "$(limit_for 120)" "$logs/configure.log" "$src/configure" -q $werror \
            ${nccl_dir:+--with-nccl=$nccl_dir}
        cp config.log "$logs/" 2>/dev/null
        grep -q "define ACX_HAVE_CUDA 1" acx_config.h 2>/dev/null || {
            result "configure: FAIL (no CUDA; see config.log)"
            return 1
        }
        if run_limited "$(limit_for 300)" "$logs/build.log" make -j"$jobs" all &&
            run_limited "$(limit_for 300)" "$logs/build.log" make -j"$jobs" check TESTS=; then
            if [ -n "$werror" ]; then
                result "build: PASS ($(($(date +%s) - t0)) s, with $werror)"
            else
                result "build: PASS ($(($(date +%s) - t0)) s, WITHOUT -Werror: the -Werror build failed, see build.log)"
            fi
            builddir=$b
            return 0
        fi
        tail -40 "$logs/build.log"
        [ -n "$werror" ] && echo "the build failed with --enable-werror: once more without it"
    done
    result "build: FAIL (see build.log)"
    return 1
}
if [ -f "$bundle_tar" ]; then
    setup_bundle
else
    build_from_source
fi
if [ -z "$builddir" ]; then
    pack_logs
    cat "$results"
    exit 2
fi
[ -n "$dev_path" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dev_path
cd "$builddir" || exit 2

step "libraries and mpirun"
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
echo "mpirun: $(command -v mpirun)"
bad=
for p in acx acx-fmnist acx-gpt tests/gpu/test_nccl tests/gpu/test_mlp_cuda tests/gpu/test_gpt_cuda \
    benchmarks/acx-bench-allreduce \
    benchmarks/acx-bench-train-gpu "$(command -v mpirun)"; do
    [ -e "$p" ] || continue
    bad="$bad"$'\n'"$(ldd -r "$p" 2>&1 | grep -E 'not found|undefined symbol|error' | sed "s|^|  $p: |")"
done
bad=$(echo "$bad" | grep .)
if [ -n "$bad$dev_missing" ]; then
    echo "$bad"
    failure "libraries: FAIL (not found on this machine:${dev_missing:- none}; $(echo "$bad" | grep -c .) ldd -r errors)"
else
    result "libraries: PASS (every program resolves; ldd -r)"
fi
ldd tests/gpu/test_nccl | sed 's/ (0x[0-9a-f]*)$//'
if run_limited 30 "$logs/mpirun-preflight.txt" mpirun -np 2 true; then
    result "mpirun -np 2: PASS"
else
    cat "$logs/mpirun-preflight.txt"
    failure "mpirun -np 2: FAIL (see mpirun-preflight.txt)"
fi
pack_logs

# ---- GPU tests (tests/gpu/*.test without make: tests/gpu/run-tests.sh) ----
# gpu_test NAME CAP: one test, at most CAP s. Inner mpirun timeouts
# (ACX_TEST_TIMEOUT) stay under the cap; on a machine with a GPU a SKIP is
# a failure: the test did not run what it is for.
gpu_test() {
    local t=$1 cap=$2 lim line v t0
    step "tests/gpu/$t.test"
    have_time 30 "tests/gpu/$t.test" || return 0
    lim=$(limit_for "$cap")
    t0=$(date +%s)
    export ACX_TEST_TIMEOUT=$((lim > 130 ? 120 : lim - 10))
    run_limited "$lim" "$logs/tests/run-$t.txt" \
        bash "$src/tests/gpu/run-tests.sh" "$builddir" -l "$logs/tests" "tests/gpu/$t.test"
    line=$(grep -m1 -E '^(PASS|SKIP|FAIL|ERROR): ' "$logs/tests/run-$t.txt")
    v=${line%%:*}
    [ -n "$v" ] || v="FAIL (stopped after $lim s)"
    if [ "$v" = PASS ]; then
        tail -3 "$logs/tests/$t.log"
    else
        cat "$logs/tests/$t.log" 2>/dev/null
    fi
    if [ "$v" = SKIP ] && [ "$ngpu" -ge 1 ]; then
        v="FAIL (SKIP although nvidia-smi shows $ngpu GPU(s): $(grep -m1 -i skip "$logs/tests/$t.log"))"
    fi
    case $v in
    PASS | SKIP) result "tests/gpu/$t.test: $v ($(($(date +%s) - t0)) s)" ;;
    *) failure "tests/gpu/$t.test: $v ($(($(date +%s) - t0)) s)" ;;
    esac
    pack_logs
}
mkdir -p "$logs/tests"
gpu_test kernels 150
gpu_test mlp_cuda 120
gpu_test gpt_cuda 240
gpu_test nccl 150
gpu_test device 60
gpu_test mpi_device 150
gpu_test ddp_stream 120
gpu_test train_gpu 120
gpu_test ddp_device 240
gpu_test offload 150
gpu_test bench 240

# ---- benchmarks ----
# bench_row FILE: latency, validation and bandwidths of the last table row
# (a row starts with the size in bytes; NCCL WARN lines and help text do not)
bench_row() {
    awk '$1 ~ /^[0-9]+$/ && NF >= 5 { r = sprintf("%s us, validation %s, algbw %s GB/s, busbw %s GB/s", $2, $3, $4, $5); v = $3 }
        END { printf "%s", r; exit (v == "Pass" ? 0 : 1) }' "$1"
}
bench_kernels() {
    step "kernel throughput (64 Mi elements)"
    have_time 30 "bench kernels" || return 0
    local f=$logs/bench-kernels.txt
    run_limited "$(limit_for 90)" "$f" tests/gpu/test_kernels --bench
    local rc=$?
    cat "$f"
    if [ $rc -eq 0 ]; then
        grep '^bench' "$f" | while read -r line; do result "$line"; done
    elif [ $rc -eq 77 ] && [ "$ngpu" -eq 0 ]; then
        result "bench kernels: SKIP (no GPU)"
    else
        failure "bench kernels: FAIL (test_kernels --bench exited $rc)"
    fi
}
bench_nccl() {
    step "all-reduce bus bandwidth at 256 MiB (NCCL backend, one rank per GPU)"
    local np rc f nps=1
    [ "$ngpu" -gt 1 ] && nps="1 $ngpu"
    for np in $nps; do
        have_time 30 "bench test_nccl $np rank(s)" || return 0
        f=$logs/bench-nccl-np$np.txt
        run_limited "$(limit_for 90)" "$f" mpirun -np "$np" tests/gpu/test_nccl --bench 256
        rc=$?
        cat "$f"
        if [ $rc -eq 0 ]; then
            grep '^bench' "$f" | while read -r line; do result "$line"; done
        elif [ $rc -eq 77 ] && [ "$ngpu" -eq 0 ]; then
            result "bench test_nccl --bench 256: SKIP (no GPU)"
        else
            failure "bench test_nccl --bench 256, $np rank(s): FAIL (exit $rc)"
        fi
    done
    echo "(busbw = algbw * 2(n-1)/n, as nccl-tests defines it: 0 on one rank)"
}
# The same 256 MiB float32 sum through the benchmark program, validated (-c:
# the result copied back from the device is checked element by element):
# -b nccl on 1 rank and on one rank per GPU; -b mpi with 2 ranks sharing GPU
# 0, staging through pinned host memory (the correctness path, for scale).
bench_osu() {
    step "acx-bench-allreduce -d cuda at 256 MiB (-b nccl; -b mpi staged)"
    local np f rc row what nps=1
    [ "$ngpu" -gt 1 ] && nps="1 $ngpu"
    for np in $nps mpi; do
        if [ "$np" = mpi ]; then
            what="acx-bench-allreduce -d cuda -b mpi (staged) float32 268435456 B, 2 ranks on GPU 0"
            f=$logs/bench-osu-mpi-staged-np2.txt
            have_time 40 "bench $what" || return 0
            run_limited "$(limit_for 120)" "$f" mpirun -np 2 benchmarks/acx-bench-allreduce -d cuda -b mpi \
                -c --busbw -m 256M:256M -i 5 -x 1 --json "$logs/bench-osu-mpi-staged-np2.json"
        else
            what="acx-bench-allreduce -d cuda -b nccl float32 268435456 B, $np rank(s)"
            f=$logs/bench-osu-nccl-np$np.txt
            have_time 30 "bench $what" || return 0
            run_limited "$(limit_for 90)" "$f" mpirun -np "$np" benchmarks/acx-bench-allreduce -d cuda -b nccl \
                -c --busbw -m 256M:256M -i 20 -x 5 --json "$logs/bench-osu-nccl-np$np.json"
        fi
        rc=$?
        cat "$f"
        row=$(bench_row "$f")
        if [ $rc -eq 0 ] && bench_row "$f" >/dev/null; then
            result "bench $what: $row"
        elif [ $rc -eq 77 ] && [ "$ngpu" -eq 0 ]; then
            result "bench $what: SKIP (no GPU)"
        else
            failure "bench $what: FAIL (exit $rc; ${row:-no table row})"
        fi
    done
}
bench_kernels
pack_logs
bench_nccl
pack_logs
bench_osu
pack_logs

# ---- training throughput on the GPU: bf16 GEMM rate, synthetic model, MFU ----
# (the GPU training benchmark's step; further benchmark steps go here, each
# a function called below, run_limited under limit_for, results collected
# with result/failure, then pack_logs)
# acx-bench-train-gpu (benchmarks/train_gpu.c; its correctness is
# tests/gpu/train_gpu.test above): the bf16 GEMM rate (cuBLAS, float32
# accumulate) on an N^3 product and on the model's own products, then the
# synthetic MLP's step through acx (device_state cuda, mixed_precision
# bf16, AdamW) under each strategy, its GEMMs alone, and MFU = achieved
# GEMM FLOP/s / the measured N^3 rate. ACX_GPU_TRAIN_STRATEGIES lists
# STRATEGY:BACKEND pairs (default "NO_SHARD:nccl FULL_SHARD:nccl
# FULL_SHARD:mpi"; backend nccl where ":BACKEND" is left out); a pair acx
# refuses (exit 3, ACX_ERR_NOT_SUPPORTED: e.g. a build without NCCL) is
# reported as refused, not failed; an exit 0 without a "result: synthetic"
# line is a failure. Backend mpi stages the device buffers through host
# memory: its lines say so, not to be compared with nccl. Sizes:
# ACX_GPU_TRAIN_DIMS (default 4096,16384,16384,4096), ACX_GPU_TRAIN_BATCH
# (8192), ACX_GPU_TRAIN_STEPS (20): about 10-20 s per pair on an H200 at
# the defaults (estimated, not yet measured).
bench_train_gpu() {
    step "acx-bench-train-gpu: bf16 GEMM rate; synthetic model through acx (MFU)"
    local tg_dims=${ACX_GPU_TRAIN_DIMS:-4096,16384,16384,4096}
    local tg_batch=${ACX_GPU_TRAIN_BATCH:-8192} tg_steps=${ACX_GPU_TRAIN_STEPS:-20}
    local tg_first=1 tg_cfg strategy backend label note f rc
    if [ ! -x benchmarks/acx-bench-train-gpu ]; then
        result "acx-bench-train-gpu: SKIP (not built: this build has no cuBLAS)"
        return 0
    fi
    for tg_cfg in ${ACX_GPU_TRAIN_STRATEGIES:-NO_SHARD:nccl FULL_SHARD:nccl FULL_SHARD:mpi}; do
        strategy=${tg_cfg%%:*}
        backend=nccl
        case $tg_cfg in *:*) backend=${tg_cfg#*:} ;; esac
        label=$strategy-$backend
        note=
        [ "$backend" = mpi ] && note=" (backend mpi: device buffers staged through host memory)"
        have_time 40 "acx-bench-train-gpu $strategy $backend" || return 0
        f=$logs/train-gpu-$label.txt
        run_limited "$(limit_for 150)" "$f" mpirun -np 1 benchmarks/acx-bench-train-gpu \
            --sharding-strategy "$strategy" --backend "$backend" --dims "$tg_dims" \
            --batch-size "$tg_batch" --steps "$tg_steps" --json "$logs/train-gpu-$label.json"
        rc=$?
        cat "$f"
        if [ "$rc" -eq 0 ] && ! grep -q '^result: synthetic' "$f"; then
            failure "acx-bench-train-gpu $strategy $backend: FAIL (exit 0 without a 'result: synthetic' line; logs/train-gpu-$label.txt)"
        elif [ "$rc" -eq 0 ]; then
            # the GEMM rates once (every run measures them, for its own MFU)
            if [ "$tg_first" = 1 ]; then
                sed -n 's/^result: \(bf16 GEMM .*\)/\1/p' "$f" | while read -r line; do result "$line"; done
                tg_first=0
            fi
            sed -n 's/^result: \(synthetic .*\)/\1/p' "$f" | while read -r line; do result "$line$note"; done
        elif [ "$rc" -eq 3 ]; then
            result "synthetic $tg_dims $strategy $backend: refused by acx ($(grep -m1 'acx refused' "$f"))"
        elif [ "$rc" -eq 77 ] && [ "$ngpu" -eq 0 ]; then
            result "acx-bench-train-gpu $strategy $backend: SKIP (no GPU)"
        else
            failure "acx-bench-train-gpu $strategy $backend: FAIL (exit $rc; logs/train-gpu-$label.txt)"
        fi
        pack_logs
    done
}
bench_train_gpu
pack_logs

# ---- acx-fmnist --device cuda against the CPU run ----
# The same job (seed, data order, epochs, one rank) with the MLP on the CPU
# and on the GPU (cuBLAS, device-resident acx state), once per entry of
# ACX_GPU_FMNIST_CONFIGS: float rounding differs (sgemm summation order),
# so the runs drift apart, but the test accuracy must agree within 0.5
# percentage points (the rule tests/fmnist.test applies between sharding
# strategies). ms/step is derived: acx-fmnist's default batch (64) on 1
# rank over its samples/s (the training loop only, evaluation excluded).
fmnist_compare() {
    step "acx-fmnist --device cuda vs the CPU run"
    local fm_src="" d fm_epochs=${ACX_GPU_FMNIST_EPOCHS:-3} h5=$work/fmnist.h5 cfg n=0 f a_cpu a_gpu what t0 rc line
    local cpu=$logs/fmnist-cpu.txt
    for d in "${ACX_GPU_FMNIST_DATA:-}" "$src/.gpu/fashion-mnist" /usr/share/datasets/fashion-mnist; do
        if [ -n "$d" ] && [ -f "$d/train-images-idx3-ubyte.gz" ]; then
            fm_src=$d
            break
        fi
    done
    fm_accuracy() { sed -n 's/^final test_accuracy=\([0-9.]*\)$/\1/p' "$1"; }
    fm_rate() { sed -n 's/.* \([0-9]*\) samples\/s over .*/\1/p' "$1"; }
    fm_step_ms() { awk -v r="$(fm_rate "$1")" 'BEGIN { if (r > 0) printf "%.3f", 1000 * 64 / r; else printf "?" }'; }
    have_time 30 "acx-fmnist --device cuda" || return 0
    run_limited "$(limit_for 30)" "$logs/fmnist-probe.txt" ./acx-fmnist --device cuda --data /nonexistent.h5
    if grep -q "not in this build\|has no CUDA" "$logs/fmnist-probe.txt"; then
        failure "acx-fmnist --device cuda: FAIL ($(grep -m1 'acx-fmnist' "$logs/fmnist-probe.txt"))"
        return 0
    fi
    if [ -z "$fm_src" ]; then
        result "acx-fmnist --device cuda: SKIP (no Fashion-MNIST: set ACX_GPU_FMNIST_DATA or carry .gpu/fashion-mnist)"
        return 0
    fi
    if ! run_limited "$(limit_for 60)" "$logs/fmnist-import.txt" ./acx data import-idx "$fm_src" -o "$h5"; then
        cat "$logs/fmnist-import.txt"
        failure "acx-fmnist --device cuda: FAIL (acx data import-idx $fm_src failed)"
        return 0
    fi
    have_time 60 "acx-fmnist cpu run" || return 0
    t0=$(date +%s)
    run_limited "$(limit_for 150)" "$cpu" mpirun -np 1 ./acx-fmnist --quiet --data "$h5" \
        --epochs "$fm_epochs" --save "$work/fmnist-cpu-weights.h5"
    cat "$cpu"
    a_cpu=$(fm_accuracy "$cpu")
    what="cpu ${a_cpu:-none} ($(fm_rate "$cpu") samples/s, $(fm_step_ms "$cpu") ms/step, $(($(date +%s) - t0)) s)"
    pack_logs
    IFS=';' read -r -a cfgs <<<"${ACX_GPU_FMNIST_CONFIGS:---acx-backend=nccl;--acx-backend=mpi}"
    for cfg in "${cfgs[@]}"; do
        n=$((n + 1))
        have_time 30 "acx-fmnist --device cuda $cfg" || return 0
        f=$logs/fmnist-cuda-$n.txt
        t0=$(date +%s)
        # shellcheck disable=SC2086 # cfg is a list of options
        run_limited "$(limit_for 120)" "$f" mpirun -np 1 ./acx-fmnist --quiet --data "$h5" \
            --epochs "$fm_epochs" --device cuda $cfg --save "$work/fmnist-cuda-weights-$n.h5"
        rc=$?
        cat "$f"
        a_gpu=$(fm_accuracy "$f")
        line="$fm_epochs epochs, 1 rank, batch 64: $what, cuda ${a_gpu:-none} ($(fm_rate "$f") samples/s,"
        line="$line $(fm_step_ms "$f") ms/step, $(($(date +%s) - t0)) s)"
        if [ -z "$a_gpu" ] && [ "$ngpu" -eq 0 ]; then
            result "acx-fmnist --device cuda $cfg: SKIP (no GPU; exit $rc)"
        elif [ -z "$a_cpu" ] || [ -z "$a_gpu" ]; then
            failure "acx-fmnist --device cuda $cfg: FAIL (exit $rc, a run gave no accuracy; $line)"
        elif awk -v a="$a_gpu" -v b="$a_cpu" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }'; then
            result "acx-fmnist --device cuda $cfg: PASS (within 0.005 of the CPU run; $line)"
        else
            failure "acx-fmnist --device cuda $cfg: FAIL (accuracy differs by more than 0.005; $line)"
        fi
        pack_logs
    done
}
fmnist_compare
pack_logs

# ---- optionally, the other tests (not counted; what time allows) ----
if [ "${ACX_GPU_FULL_SUITE:-0}" = 1 ]; then
    step "the other tests (unit programs, tests/mpi/*.test, tests/*.test)"
    if have_time 60 "suite"; then
        mkdir -p "$logs/suite"
        # shellcheck disable=SC2046 # one word per test
        run_limited "$(limit_for 600)" "$logs/suite/run.txt" bash "$src/tests/gpu/run-tests.sh" "$builddir" \
            -l "$logs/suite" $(cd "$builddir" && find tests/unit -name 'test_*' ! -name '*.o' -type f | sort) \
            $(cd "$src" && ls tests/mpi/*.test tests/*.test tests/slurm/*.test 2>/dev/null)
        grep -E '^(FAIL|ERROR):' "$logs/suite/run.txt" | while read -r line; do result "suite $line"; done
        f=$logs/suite/run.txt
        result "suite: $(grep -cE '^PASS:' "$f") pass, $(grep -cE '^SKIP:' "$f") skip, $(grep -cE '^(FAIL|ERROR):' "$f")" \
            "fail/error$(grep -q 'stopped after' "$f" && echo ', stopped at its limit') (not counted)"
    fi
fi

step "done in $(($(date +%s) - t_start)) s"
cat "$results"
pack_logs
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
exit $failed

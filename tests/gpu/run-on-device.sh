#!/usr/bin/env bash
# tests/gpu/run-on-device.sh — everything acx checks on a GPU machine, in one
# call: configure and build out of tree, run the GPU tests (kernels against
# the CPU references, the NCCL backend, device selection, the benchmarks on
# device buffers, the MPI backend staging device buffers), measure the
# kernels' throughput and the all-reduce bus bandwidth at 256 MiB (the NCCL
# backend directly, and acx-bench-allreduce -d cuda with -b nccl and -b mpi),
# then run the whole suite in the CUDA build. Writes a log and a results
# summary.
#
#   tests/gpu/run-on-device.sh [OUTDIR]
#
# OUTDIR (default: $OUT, else ./gpu-results) receives:
#   run-on-device.log   everything printed, with timings
#   results.txt         one line per check: "<name>: PASS|FAIL|SKIP|..." and
#                       the benchmark lines
#   logs/               the test logs, config.log, test-suite.log
# Environment: ACX_GPU_BUILD (build directory, default /tmp/acx-gpu-build),
# ACX_GPU_JOBS (make -j, default 16), ACX_GPU_FULL_SUITE=0 skips the last
# step. Each step runs under a timeout so that one call fits a short device
# session (about 6 minutes in all on 16 cores before bench.test,
# mpi_device.test and the acx-bench-allreduce runs were added — estimated
# 2-4 minutes more, not yet measured; most of it is the full suite, so
# ACX_GPU_FULL_SUITE=0 keeps one call well under 10 minutes).
# Exit status: 0 when no GPU test failed (the full suite is reported, not
# counted), 1 otherwise, 2 when the build itself failed.
set -u

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-${OUT:-$PWD/gpu-results}}
build=${ACX_GPU_BUILD:-/tmp/acx-gpu-build}
jobs=${ACX_GPU_JOBS:-16}
mkdir -p "$out/logs"
log=$out/run-on-device.log
results=$out/results.txt
: >"$results"
exec > >(tee -a "$log") 2>&1

t_start=$(date +%s)
step() { echo; echo "==== [$(($(date +%s) - t_start))s] $*"; }
result() { echo "$*" >>"$results"; echo "RESULT $*"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

# ---- the machine ----
step "machine"
date -u
uname -a
nproc
nvidia-smi -L || echo "nvidia-smi: not available"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null
${NVCC:-/usr/local/cuda/bin/nvcc} --version 2>/dev/null | tail -2 || echo "nvcc: not found"
grep -m1 NCCL_VERSION_CODE /usr/local/cuda/include/nccl.h 2>/dev/null
mpirun --version 2>/dev/null | head -1 || echo "mpirun: not found"
missing=""
for tool in autoreconf make gcc mpirun pkg-config; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    result "prerequisites: FAIL (missing:$missing)"
    exit 2
fi

# ---- build ----
step "autoreconf (if needed) and configure in $build"
cd "$src" || exit 2
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
    autoreconf -fi >/dev/null 2>&1 || { result "autoreconf: FAIL"; exit 2; }
fi
rm -rf "$build" && mkdir -p "$build" && cd "$build" || exit 2
t0=$(date +%s)
if ! timeout 300 "$src/configure" --enable-werror -q; then
    cp config.log "$out/logs/" 2>/dev/null
    result "configure: FAIL"
    exit 2
fi
cp config.log "$out/logs/"
grep -E "CUDA:|NCCL:|backends:" config.log | tail -3
grep -q "define ACX_HAVE_CUDA 1" acx_config.h || { result "configure: FAIL (CUDA not found)"; exit 2; }
step "make -j$jobs (library, programs, test programs)"
if ! timeout 600 make -j"$jobs" all >build.log 2>&1 ||
    ! timeout 600 make -j"$jobs" check TESTS= >>build.log 2>&1; then
    tail -50 build.log
    cp build.log "$out/logs/"
    result "build: FAIL"
    exit 2
fi
result "build: PASS ($(($(date +%s) - t0)) s for configure + make -j$jobs)"

# ---- GPU tests ----
gpu_failed=0
for t in device kernels nccl bench mpi_device; do
    step "tests/gpu/$t.test"
    t0=$(date +%s)
    timeout 600 make -j1 check TESTS="tests/gpu/$t.test" >/dev/null 2>&1
    verdict=$(sed -n 's/^:test-result: //p' "tests/gpu/$t.trs" 2>/dev/null | head -1)
    cat "tests/gpu/$t.log" 2>/dev/null
    cp "tests/gpu/$t.log" "$out/logs/gpu-$t.log" 2>/dev/null
    result "tests/gpu/$t.test: ${verdict:-ERROR (no result)} ($(($(date +%s) - t0)) s)"
    case $verdict in PASS | SKIP) ;; *) gpu_failed=1 ;; esac
done

# ---- benchmarks ----
step "kernel throughput (64 Mi elements)"
timeout 120 tests/gpu/test_kernels --bench | tee "$out/logs/bench-kernels.txt"
grep '^bench' "$out/logs/bench-kernels.txt" | while read -r line; do result "$line"; done

step "all-reduce bus bandwidth at 256 MiB (NCCL backend, one rank per GPU)"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 1 ] || ngpu=1
for np in 1 "$ngpu"; do
    timeout 120 mpirun -np "$np" tests/gpu/test_nccl --bench 256 | tee -a "$out/logs/bench-nccl.txt"
    [ "$np" = "$ngpu" ] && break
done
grep '^bench' "$out/logs/bench-nccl.txt" | sort -u | while read -r line; do result "$line"; done
echo "(busbw = algbw * 2(n-1)/n, as nccl-tests defines it: 0 on one rank)"

# The same 256 MiB float32 sum through the benchmark program, validated (-c:
# the result copied back from the device is checked element by element):
# -b nccl on 1 rank and on one rank per GPU; -b mpi with 2 ranks sharing GPU
# 0, staging through pinned host memory (the correctness path, for scale).
step "acx-bench-allreduce -d cuda at 256 MiB (-b nccl; -b mpi staged)"
bench_row() { # the table row of the last run: latency, validation, bandwidths
    awk '!/^#/ && NF >= 5 { printf "%s us, validation %s, algbw %s GB/s, busbw %s GB/s", $2, $3, $4, $5 }' "$1"
}
for np in 1 "$ngpu"; do
    f=$out/logs/bench-osu-nccl-np$np.txt
    timeout 120 mpirun -np "$np" benchmarks/acx-bench-allreduce -d cuda -b nccl -c --busbw \
        -m 256M:256M -i 20 -x 5 --json "$out/logs/bench-osu-nccl-np$np.json" 2>&1 | tee "$f"
    result "bench acx-bench-allreduce -d cuda -b nccl float32 268435456 B, $np rank(s): $(bench_row "$f")"
    [ "$np" = "$ngpu" ] && break
done
f=$out/logs/bench-osu-mpi-staged-np2.txt
timeout 180 mpirun -np 2 benchmarks/acx-bench-allreduce -d cuda -b mpi -c --busbw \
    -m 256M:256M -i 5 -x 1 2>&1 | tee "$f"
result "bench acx-bench-allreduce -d cuda -b mpi (staged) float32 268435456 B, 2 ranks on GPU 0: $(bench_row "$f")"

# ---- the whole suite in the CUDA build ----
if [ "${ACX_GPU_FULL_SUITE:-1}" = 1 ]; then
    step "make check (the whole suite, CUDA build, GPU visible)"
    t0=$(date +%s)
    timeout 420 make -k -j"$jobs" check >check.log 2>&1
    sed -n '/^# TOTAL/,/^# ERROR/p' test-suite.log
    grep -E '^(FAIL|ERROR):' check.log | while read -r line; do result "suite $line"; done
    cp test-suite.log "$out/logs/" 2>/dev/null
    find tests -name '*.trs' -exec grep -lE '^:test-result: (FAIL|ERROR)' {} + 2>/dev/null |
        while read -r f; do
            cp "${f%.trs}.log" "$out/logs/suite-$(echo "${f%.trs}" | tr / _).log" 2>/dev/null
        done
    result "suite: $(grep -E '^# (PASS|FAIL|SKIP|ERROR)' test-suite.log 2>/dev/null | tr -s ' ' | tr '\n' ' ')($(($(date +%s) - t0)) s)"
fi

step "done in $(($(date +%s) - t_start)) s"
cat "$results"
exit $gpu_failed

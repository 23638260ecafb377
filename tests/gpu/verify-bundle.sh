#!/usr/bin/env bash
# tests/gpu/verify-bundle.sh — checks, on the development machine, that the
# bundle from tests/gpu/make-bundle.sh is self-sufficient, as if on the bare
# device image: it unpacks .gpu/ into a fresh directory and, in a private
# mount namespace (unshare -m, as root), hides the system's Open MPI
# (programs, libraries, plugins, help and configuration files), PMIx, HDF5,
# libyaml, OpenBLAS, isa-l, hwloc and every other library the bundle carries
# (each file bind-mounted over by /dev/null or an empty folder) and CUDA's
# libcudart, libnccl and libcublas; libnccl and libcublas reappear only in
# a mock of the device's pip-wheel layout (site-packages/nvidia/...). Then:
#   ldd of the programs and of mpirun (every library from the bundle or the
#   mock wheels), ompi_info --path all (the relocated directories), mpirun
#   -np 2 of a bundled MPI test program, acx data import-idx of the bundled
#   Fashion-MNIST, 1 epoch of acx-fmnist on 2 ranks on the CPU, and finally
#   tests/gpu/run-on-device.sh itself with the mock wheels (without a GPU
#   its GPU tests must SKIP and it must not build anything).
#
#   tests/gpu/verify-bundle.sh [WORKDIR]      (default /tmp/acx-bundle-verify)
#
# Exit status: 0 when every check passed.
set -u
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${1:-/tmp/acx-bundle-verify}

if [ "${VERIFY_BUNDLE_INNER:-0}" != 1 ]; then
    [ "$(id -u)" -eq 0 ] || {
        echo "verify-bundle: needs root (unshare -m, bind mounts)" >&2
        exit 2
    }
    [ -f "$src/.gpu/acx-gpu-bundle.tar.xz" ] || {
        echo "verify-bundle: no .gpu/acx-gpu-bundle.tar.xz (run tests/gpu/make-bundle.sh)" >&2
        exit 2
    }
    rm -rf "$work" && mkdir -p "$work/repo" || exit 2
    # a copy of what travels: the tracked and untracked-not-ignored files and .gpu
    (cd "$src" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 cp --parents -t "$work/repo" 2>/dev/null; cp -r .gpu "$work/repo/")
    VERIFY_BUNDLE_INNER=1 exec unshare -m bash "$work/repo/tests/gpu/verify-bundle.sh" "$work"
fi

# ---- inside the private mount namespace ----
mount --make-rprivate /
bundle=$work/bundle
mkdir -p "$bundle" "$work/empty" "$work/out"
tar -C "$bundle" -xJf "$src/.gpu/acx-gpu-bundle.tar.xz" || exit 2

# the mock wheels: site-packages/nvidia/nccl/lib and nvidia/cu13/lib
site=$work/venv/lib/python3.12/site-packages
mkdir -p "$site/nvidia/nccl/lib" "$site/nvidia/cu13/lib"
cudalib=$(readlink -f /usr/local/cuda/lib64)
for f in libnccl.so.2:nccl libcublas.so.13:cu13 libcublasLt.so.13:cu13; do
    touch "$site/nvidia/${f#*:}/lib/${f%:*}"
    mount --bind "$(readlink -f "$cudalib/${f%:*}")" "$site/nvidia/${f#*:}/lib/${f%:*}"
done

hide_file() { [ -e "$1" ] && mount --bind /dev/null "$(readlink -f "$1")"; }
hide_dir() { [ -d "$1" ] && mount --bind "$work/empty" "$1"; }
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi \
    /etc/openmpi /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/x86_64-linux-gnu/hdf5 \
    /usr/lib/x86_64-linux-gnu/hwloc /usr/share/pmix; do
    hide_dir "$d"
done
for f in /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info \
    /usr/bin/mpicc; do
    hide_file "$f"
done
n_hidden=0
for f in "$bundle"/lib/*; do
    # libz and libzstd stay: this machine's own tools (git, tar) need them; the
    # bundle carries both, and the ldd check below shows they come from it
    case $(basename "$f") in libz.so.1 | libzstd.so.1) continue ;; esac
    for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/local/cuda/lib64; do
        if [ -e "$d/$(basename "$f")" ]; then
            hide_file "$d/$(basename "$f")" && n_hidden=$((n_hidden + 1))
        fi
    done
done
for f in libnccl.so.2 libcublas.so.13 libcublasLt.so.13 libcudart.so.13; do
    hide_file "$cudalib/$f"
done
# and, whatever the bundle holds, every shared library of the packages the
# device image lacks (Open MPI and its fabric libraries, PMIx, hwloc,
# libevent, munge, HDF5 and what it links, libyaml, json-c, OpenBLAS, gfortran, isa-l)
pkg_re='^(libopenmpi|openmpi-|libpmix|libhwloc|libevent|libmunge|libfabric|libucx|libibverbs|librdmacm'
pkg_re="$pkg_re|libpsm|libhdf5|libsz|libaec|libcurl|libnghttp|libssh|librtmp|libldap|libgnutls|libnettle"
pkg_re="$pkg_re|libhogweed|libp11|libtasn|libidn2|libunistring|libpsl|libbrotli|libkrb5|libk5crypto"
pkg_re="$pkg_re|libgssapi|libsasl2|libkeyutils|libcom-err|libgmp|libyaml|libopenblas|libgfortran"
pkg_re="$pkg_re|libquadmath|libisal|libjson-c)"
n_pkg=0
while read -r f; do
    [ -f "$f" ] && [ ! -L "$f" ] && [ -s "$f" ] && hide_file "$f" && n_pkg=$((n_pkg + 1))
done < <(dpkg-query -W -f '${Package}\n' 2>/dev/null | grep -E "$pkg_re" | xargs -r dpkg -L 2>/dev/null |
    grep -E '\.so(\.[0-9]+)*$' | sort -u)
echo "== hidden: Open MPI, PMIx, hwloc, OpenBLAS, HDF5 folders; mpirun/orterun/orted/ompi_info;"
echo "   $n_hidden system library files that the bundle carries; CUDA's libcudart, libnccl, libcublas(Lt);"
echo "   $n_pkg more shared-library files of the packages the device lacks (dpkg -L)"
echo "   (the system's libmpi.so.40 now has $(wc -c </usr/lib/x86_64-linux-gnu/libmpi.so.40) bytes)"

failed=0
check() { # check NAME COMMAND...: run, report PASS/FAIL
    local name=$1
    shift
    echo "== $name: \$ $*"
    if "$@"; then echo "CHECK PASS: $name"; else
        echo "CHECK FAIL: $name (exit $?)"
        failed=1
    fi
}

# shellcheck source=/dev/null
. "$bundle/env.sh"
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$site/nvidia/nccl/lib:$site/nvidia/cu13/lib
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1

# shellcheck disable=SC2317 # called through check
ldd_ok() { # every library resolves, and none from a system folder that the bundle replaces
    local bad
    for p in "$@"; do
        echo "-- ldd $p"
        ldd "$p" | sed 's/ (0x[0-9a-f]*)$//'
    done
    bad=$(for p in "$@"; do ldd "$p" 2>&1 || echo "$p: ldd failed"; done | awk '/not found|error|failed/ || ($3 ~ /^\// && $3 !~ "^('"$bundle|$work"')/" &&
        $1 !~ /^(libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so/)')
    [ -z "$bad" ] || {
        echo "unexpected: $bad"
        return 1
    }
}
check "ldd resolves to the bundle" ldd_ok "$bundle/build/acx-fmnist" "$bundle/build/tests/gpu/test_nccl" \
    "$bundle/build/tests/gpu/test_mlp_cuda" "$bundle/ompi/bin/orterun" \
    "$bundle/ompi/lib/openmpi3/mca_btl_vader.so" "$bundle/ompi/lib/openmpi3/mca_pmix_ext3x.so"
check "mpirun is the bundle's" test "$(command -v mpirun)" = "$bundle/ompi/bin/mpirun"
check "ompi_info --path all (relocated)" bash -c \
    "ompi_info --path all >'$work/ompi_info.txt'; cat '$work/ompi_info.txt';
     grep -q 'Pkglibdir: $bundle/ompi/lib/openmpi3' '$work/ompi_info.txt'"
check "mpirun -np 2 tests/mpi/test_coll" bash -c "set -o pipefail; timeout -k 5 120 mpirun -np 2 \
    '$bundle/build/tests/mpi/test_coll' 2>&1 | tee '$work/coll.txt'"
check "acx data import-idx" timeout -k 5 120 "$bundle/build/acx" data import-idx \
    "$src/.gpu/fashion-mnist" -o "$work/fmnist.h5"
check "acx-fmnist, 1 epoch, 2 ranks, CPU" bash -c "timeout -k 5 400 mpirun -np 2 '$bundle/build/acx-fmnist' \
    --data '$work/fmnist.h5' --epochs 1 --quiet --save '$work/w.h5' | tee '$work/fmnist.txt' &&
    grep -q '^final test_accuracy=0\.[6-9]' '$work/fmnist.txt'"
check "tests/gpu/*.test without make (device: PASS; others: SKIP without a GPU)" bash -c "
    '$src/tests/gpu/run-tests.sh' '$bundle/build' -l '$work/logs' tests/gpu/device.test \
        tests/gpu/kernels.test tests/gpu/nccl.test tests/gpu/bench.test tests/gpu/mpi_device.test \
        tests/gpu/ddp_device.test tests/gpu/offload.test tests/gpu/ddp_stream.test \
        tests/gpu/mlp_cuda.test | tee '$work/tests.txt'
    grep -q '^PASS: tests/gpu/device.test' '$work/tests.txt' &&
        [ \$(grep -c '^SKIP:' '$work/tests.txt') -eq 8 ]"

check "no warnings from Open MPI or PMIx (help text)" bash -c \
    "! grep -a -e '^------------' '$work/coll.txt'"
# run-on-device.sh as on the device: a fresh shell, only the mock wheels added
echo "== tests/gpu/run-on-device.sh (mock wheels in $site)"
env -u LD_LIBRARY_PATH -u top_builddir PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    ACX_GPU_SITE_PACKAGES="$site" ACX_GPU_WORK="$work/device" \
    bash "$src/tests/gpu/run-on-device.sh" "$work/out"
rc=$?
echo "run-on-device.sh exited $rc; \$OUT holds: $(cd "$work/out" && find . -type f | sort | tr '\n' ' ')"
if [ $rc -ne 0 ] || [ "$(find "$work/out" -type f | wc -l)" -gt 8 ]; then
    echo "CHECK FAIL: run-on-device.sh"
    failed=1
else
    echo "CHECK PASS: run-on-device.sh"
fi
echo "== verify-bundle: $([ $failed = 0 ] && echo 'all checks passed' || echo 'some checks FAILED')"
exit $failed

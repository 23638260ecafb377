#!/usr/bin/env bash
# tests/gpu/make-bundle.sh — builds, on this (development) machine, everything
# tests/gpu/run-on-device.sh needs on a bare GPU machine, and packs it into
# the ignored folder .gpu/ at the repository root, to be carried to the
# device (the device tool's `run` with carry [".gpu"]). The device image has
# nvcc, the CUDA runtime and PyTorch's NCCL and cuBLAS wheels, but no Open
# MPI, HDF5, libyaml, OpenBLAS, isa-l or autotools (docs/gpu.md, "Running
# the GPU checks"), so nothing is built there:
#   1. autoreconf (when configure is missing or stale), configure a CUDA +
#      NCCL build with --enable-werror --disable-shared in build-gpu/ (the
#      programs are then plain ELF files, no libtool wrapper scripts), make
#      the library, the tools, the benchmarks, the examples and every check
#      program (make check TESTS=, which runs nothing);
#   2. stage a relocatable tree: build/ (the ELF programs at their build-tree
#      paths, debug info stripped: the tests' top_builddir on the device),
#      lib/ (every shared library they, mpirun and the Open MPI plugins need,
#      except glibc's, the C++ runtime's, and libnccl/libcublas, which come
#      from the device's pip wheels; libcudart.so.13 is carried), ompi/ (Open
#      MPI's mpirun/orted, the MCA plugins that need no network fabric
#      library, the help files, the MCA parameter file, PMIx's plugins and
#      help files), env.sh (PATH, LD_LIBRARY_PATH and the OPAL_*/PMIX_*
#      installation directories that relocate Open MPI), BUNDLE-INFO;
#   3. pack it into .gpu/acx-gpu-bundle.tar.xz and copy the Fashion-MNIST IDX
#      .gz files (already compressed) into .gpu/fashion-mnist/;
#   4. print the size that would travel (tracked and untracked-not-ignored
#      files plus .gpu) against the device tool's 64 MiB limit.
#
#   tests/gpu/make-bundle.sh [--no-build]
#
# --no-build packs the existing build-gpu/ again. Environment: ACX_BUNDLE_JOBS
# (make -j, default 2), ACX_BUNDLE_CONFIGURE (extra configure arguments),
# ACX_BUNDLE_FMNIST (the IDX .gz directory, default
# /usr/share/datasets/fashion-mnist; "none" leaves the data out).
# Exit status: 0 when the bundle was written and fits, 1 otherwise.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$src/build-gpu
dest=$src/.gpu
stage=$build/bundle-stage
jobs=${ACX_BUNDLE_JOBS:-2}
fm_src=${ACX_BUNDLE_FMNIST:-/usr/share/datasets/fashion-mnist}
limit_mib=64
t_start=$(date +%s)
say() { echo "== [$(($(date +%s) - t_start))s] $*"; }
die() {
    echo "make-bundle: $*" >&2
    exit 1
}

# ---- 1. build ----
if [ "${1:-}" != --no-build ]; then
    cd "$src"
    if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
        say "autoreconf -fi"
        nice autoreconf -fi >/dev/null || die "autoreconf -fi failed"
    fi
    mkdir -p "$build"
    cd "$build"
    if [ ! -f Makefile ] || [ "$src/configure" -nt config.status ]; then
        say "configure --enable-werror --disable-shared ${ACX_BUNDLE_CONFIGURE:-}"
        # shellcheck disable=SC2086 # extra arguments are a list
        nice "$src/configure" -q --enable-werror --disable-shared ${ACX_BUNDLE_CONFIGURE:-} ||
            die "configure failed (see $build/config.log)"
    fi
    grep -q "define ACX_HAVE_CUDA 1" acx_config.h || die "configure found no CUDA (see $build/config.log)"
    grep -q "define ACX_HAVE_NCCL 1" acx_config.h || die "configure found no NCCL (see $build/config.log)"
    grep -q "^CUBLAS_LIBS = -lcublas" Makefile || die "configure found no cuBLAS (see $build/config.log)"
    say "make -j$jobs all; make -j$jobs check TESTS= (builds every check program, runs none)"
    nice make -s -j"$jobs" all >/dev/null || die "make all failed in $build"
    nice make -s -j"$jobs" check TESTS= >/dev/null || die "make check TESTS= failed in $build"
fi
cd "$build" || die "no build directory $build (run without --no-build)"

# ---- 2. stage ----
say "staging in $stage"
rm -rf "$stage"
mkdir -p "$stage/build" "$stage/lib" "$stage/ompi/bin" "$stage/ompi/lib/openmpi3" \
    "$stage/ompi/lib/pmix" "$stage/ompi/share/openmpi" "$stage/ompi/share/pmix" "$stage/ompi/etc"

# the programs: every ELF executable of the build tree outside .libs and the stage
n_prog=0
while IFS= read -r -d '' f; do
    head -c 4 "$f" | grep -q "ELF" || continue
    rel=${f#./}
    mkdir -p "$stage/build/$(dirname "$rel")"
    cp "$f" "$stage/build/$rel"
    strip -g "$stage/build/$rel"
    n_prog=$((n_prog + 1))
done < <(find . -path ./bundle-stage -prune -o -path '*/.libs' -prune -o \
    -type f -perm -u+x ! -name '*.o' -print0)
for t in acx tests/gpu/test_nccl tests/gpu/test_mlp_cuda tests/gpu/test_kernels tests/gpu/test_mpi_device tests/gpu/test_ddp_stream \
    tests/mpi/test_ddp_device tests/mpi/test_offload benchmarks/acx-bench-allreduce \
    benchmarks/acx-bench-train-gpu acx-fmnist acx-gpt tests/gpu/test_gpt_cuda; do
    [ -x "$stage/build/$t" ] || die "the build lacks $t"
done
say "$n_prog programs"

# Open MPI (Debian's layout: ompi_info --path all): orterun is mpirun/mpiexec
ompi_libdir=$(ompi_info --path libdir --parsable | sed -n 's/^path:libdir://p')
ompi_pkglibdir=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
ompi_pkgdatadir=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
ompi_sysconfdir=$(ompi_info --path sysconfdir --parsable | sed -n 's/^path:sysconfdir://p')
[ -d "$ompi_pkglibdir" ] || die "Open MPI's plugin directory '$ompi_pkglibdir' not found"
orterun=$(readlink -f "$(command -v mpirun)")
cp "$orterun" "$stage/ompi/bin/orterun"
ln -s orterun "$stage/ompi/bin/mpirun"
ln -s orterun "$stage/ompi/bin/mpiexec"
for p in orted ompi_info; do
    cp "$(command -v $p)" "$stage/ompi/bin/$p"
done
# plugins: all but those that need a network fabric library (UCX, libfabric,
# verbs, PSM, netlink); the MCA parameter file already excludes most of them
skip_re='^mca_(atomic_ucx|btl_ofi|btl_openib|mtl_ofi|mtl_psm|mtl_psm2|osc_ucx|pml_ucx|spml_ucx|sshmem_ucx|reachable_netlink)\.so$'
for f in "$ompi_pkglibdir"/*.so; do
    basename "$f" | grep -qE "$skip_re" && continue
    cp "$f" "$stage/ompi/lib/openmpi3/"
done
# libmca_common_*.so that the kept plugins link
for f in "$ompi_libdir"/libmca_common_{sm,ompio,monitoring}.so*; do
    cp -P "$f" "$stage/lib/"
done
cp -r "$ompi_pkgdatadir"/. "$stage/ompi/share/openmpi/"
cp "$ompi_sysconfdir"/openmpi-mca-params.conf "$ompi_sysconfdir"/openmpi-default-hostfile "$stage/ompi/etc/"
# PMIx (Open MPI's ext3x component uses the system's libpmix)
pmix_lib=$(ldd "$ompi_pkglibdir/mca_pmix_ext3x.so" | awk '$1 ~ /^libpmix/ {print $3}')
pmix_root=$(dirname "$(dirname "$(readlink -f "$pmix_lib")")") # .../pmix2 (lib/libpmix.so.2)
if [ -d "$pmix_root/lib/pmix" ]; then
    cp "$pmix_root"/lib/pmix/*.so "$stage/ompi/lib/pmix/"
    cp -r "$pmix_root"/share/pmix/. "$stage/ompi/share/pmix/" 2>/dev/null || true
fi # (not its pmix-mca-params.conf: it names the system's plugin folder; env.sh sets it)

# the shared-library closure of everything staged. Left out: glibc's own
# libraries and the C++/GCC runtime (every image has them; newer is fine),
# libnccl and libcublas (the device's pip wheels: run-on-device.sh finds them)
system_re='^(ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec|libstdc\+\+|libgcc_s)\.so'
device_re='^(libnccl|libcublas|libcublasLt|libcuda)\.so'
mapfile -t elfs < <(find "$stage/build" "$stage/ompi" -type f -print0 |
    xargs -0 file | awk -F: '/ELF/ {print $1}')
missing=$(for e in "${elfs[@]}"; do ldd "$e" 2>/dev/null; done | awk '/not found/ {print $1}' | sort -u)
[ -z "$missing" ] || die "libraries not found here: $missing"
for e in "${elfs[@]}"; do LD_LIBRARY_PATH=$stage/lib ldd "$e" 2>/dev/null; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r soname path; do
        echo "$soname" | grep -qE "$system_re|$device_re" && continue
        [ -e "$stage/lib/$soname" ] || cp -L "$path" "$stage/lib/$soname"
    done
find "$stage/lib" -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
# glibc symbol versions the bundle needs (the device's glibc must be as new)
glibc_need=$(for e in "${elfs[@]}" "$stage"/lib/*; do objdump -T "$e" 2>/dev/null; done |
    grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)

cat >"$stage/env.sh" <<'EOF'
# env.sh — source this (bash) to use the acx GPU bundle made by
# tests/gpu/make-bundle.sh: its programs (build/), libraries (lib/) and a
# relocated Open MPI (ompi/). Sets PATH, LD_LIBRARY_PATH and the
# installation directories Open MPI and PMIx read from the environment
# (acx_bundle, the bundle's folder, is not exported: acx warns about
# unknown ACX_* variables).
acx_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH=$acx_bundle/ompi/bin:$PATH
export LD_LIBRARY_PATH=$acx_bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPAL_PREFIX=$acx_bundle/ompi OPAL_EXEC_PREFIX=$acx_bundle/ompi
export OPAL_BINDIR=$acx_bundle/ompi/bin OPAL_SBINDIR=$acx_bundle/ompi/bin
export OPAL_LIBEXECDIR=$acx_bundle/ompi/bin OPAL_LIBDIR=$acx_bundle/lib
export OPAL_PKGLIBDIR=$acx_bundle/ompi/lib/openmpi3
export OPAL_DATAROOTDIR=$acx_bundle/ompi/share OPAL_DATADIR=$acx_bundle/ompi/share
export OPAL_PKGDATADIR=$acx_bundle/ompi/share/openmpi OPAL_SYSCONFDIR=$acx_bundle/ompi/etc
export OPAL_INCLUDEDIR=$acx_bundle/ompi/include OPAL_PKGINCLUDEDIR=$acx_bundle/ompi/include
export PMIX_PREFIX=$acx_bundle/ompi PMIX_EXEC_PREFIX=$acx_bundle/ompi
export PMIX_LIBDIR=$acx_bundle/lib PMIX_PKGLIBDIR=$acx_bundle/ompi/lib/pmix
export PMIX_DATAROOTDIR=$acx_bundle/ompi/share PMIX_DATADIR=$acx_bundle/ompi/share
export PMIX_PKGDATADIR=$acx_bundle/ompi/share/pmix PMIX_SYSCONFDIR=$acx_bundle/ompi/etc
export PMIX_MCA_mca_base_component_path=$acx_bundle/ompi/lib/pmix
EOF

{
    echo "acx GPU bundle (tests/gpu/make-bundle.sh)"
    echo "made: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -n) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
    echo "source: $(git -C "$src" rev-parse HEAD 2>/dev/null)$(git -C "$src" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
    echo "configure: $(sed -n 's/^  \$ .*configure /configure /p' config.log | head -1)"
    echo "nvcc: $(grep -o 'release [0-9.]*' <<<"$(${NVCC:-/usr/local/cuda/bin/nvcc} --version)")"
    echo "nccl.h: $(grep -hm1 'define NCCL_VERSION_CODE' /usr/local/cuda/include/nccl.h 2>/dev/null)"
    echo "open mpi: $(ompi_info --version | head -1)"
    echo "glibc needed: $glibc_need or newer"
    echo "needed from the device: libcuda.so.1 (driver), libnccl.so.2, libcublas.so.13, libcublasLt.so.13"
    echo "programs: $n_prog; libraries: $(find "$stage/lib" -type f | wc -l); Open MPI plugins: $(find "$stage/ompi/lib/openmpi3" -type f | wc -l)"
} >"$stage/BUNDLE-INFO"

# ---- 3. pack ----
say "packing .gpu/acx-gpu-bundle.tar.xz ($(du -sm "$stage" | cut -f1) MiB staged)"
rm -rf "$dest"
mkdir -p "$dest"
tar -C "$stage" -cf - . | nice xz -6 -T"$jobs" >"$dest/acx-gpu-bundle.tar.xz"
cp "$stage/BUNDLE-INFO" "$dest/"
if [ "$fm_src" != none ]; then
    for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
        [ -f "$fm_src/$f.gz" ] || die "$fm_src/$f.gz not found (ACX_BUNDLE_FMNIST=none leaves the data out)"
    done
    mkdir -p "$dest/fashion-mnist"
    cp "$fm_src"/*-ubyte.gz "$dest/fashion-mnist/"
fi

# ---- 4. size ----
cd "$src"
tree_b=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
gpu_b=$(du -sb "$dest" | cut -f1)
total_b=$((tree_b + gpu_b))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
cat "$dest/BUNDLE-INFO"
echo "size: working tree $(mib "$tree_b") + .gpu $(mib "$gpu_b") = $(mib "$total_b") (device limit $limit_mib MiB)"
say "done"
[ "$total_b" -lt $((limit_mib * 1048576)) ] || die "too large to travel: $(mib "$total_b")"

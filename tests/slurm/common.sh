# shellcheck shell=sh
# tests/slurm/common.sh — sourced by the tests in tests/slurm/ after
# tests/lib.sh: a small Fashion-MNIST subset for short runs of acx-fmnist,
# bitwise comparison of weight files, and finding a job's rank processes.

fmnist_src=/usr/share/datasets/fashion-mnist

# be32 N: N as 4 big-endian bytes (the IDX header's count).
be32() {
    # shellcheck disable=SC2059
    printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"
}

# idx_head SRC.gz OUT N HEADER_BYTES RECORD_BYTES: the first N records of an
# IDX file, with the count in its header rewritten to N.
idx_head() {
    {
        zcat "$1" | head -c 4
        be32 "$3"
        zcat "$1" | tail -c +9 | head -c $(($4 - 8 + $3 * $5))
    } >"$2"
}

# fmnist_subset OUT.h5 NTRAIN NTEST: the first NTRAIN training and NTEST
# test samples of the real data set, as `acx data import-idx` writes them.
# Skips the test when the data set is not installed.
fmnist_subset() {
    [ -f "$fmnist_src/train-images-idx3-ubyte.gz" ] ||
        skip "$fmnist_src not installed (apt-get install dataset-fashion-mnist)"
    d=$ACX_TMP/idx
    mkdir -p "$d"
    idx_head "$fmnist_src/train-images-idx3-ubyte.gz" "$d/train-images" "$2" 16 784
    idx_head "$fmnist_src/train-labels-idx1-ubyte.gz" "$d/train-labels" "$2" 8 1
    idx_head "$fmnist_src/t10k-images-idx3-ubyte.gz" "$d/test-images" "$3" 16 784
    idx_head "$fmnist_src/t10k-labels-idx1-ubyte.gz" "$d/test-labels" "$3" 8 1
    expect_rc 0 "$top_builddir/acx" data import-idx --train-images "$d/train-images" \
        --train-labels "$d/train-labels" --test-images "$d/test-images" \
        --test-labels "$d/test-labels" -o "$1"
}

# same_weights A.h5 B.h5: every parameter of acx-fmnist's weight files
# bitwise equal (h5dump's raw little-endian bytes, compared with cmp).
same_weights() {
    for w in fc1.weight fc1.bias fc2.weight fc2.bias fc3.weight fc3.bias; do
        h5dump -d "/$w" -b LE -o "$ACX_TMP/w_a.bin" "$1" >/dev/null 2>&1 || return 1
        h5dump -d "/$w" -b LE -o "$ACX_TMP/w_b.bin" "$2" >/dev/null 2>&1 || return 1
        [ -s "$ACX_TMP/w_a.bin" ] && cmp -s "$ACX_TMP/w_a.bin" "$ACX_TMP/w_b.bin" || return 1
    done
    return 0
}

# descendants PID: every process below PID (children first).
descendants() {
    for c in $(ps -o pid= --ppid "$1"); do
        echo "$c"
        descendants "$c"
    done
}

# wait_file FILE SECONDS: until FILE exists; 1 if it does not in time.
wait_file() {
    n=0
    while [ ! -f "$1" ]; do
        [ "$n" -lt $(($2 * 20)) ] || return 1
        n=$((n + 1))
        sleep 0.05
    done
    return 0
}

# shellcheck shell=sh
# tests/lib.sh — helpers sourced by the script tests (tests/*.test).
#
# The automake harness runs each .test with $(SHELL) and exports
# top_srcdir and top_builddir (absolute). Run by hand, they default to the
# repository the script lives in and to ./build (scripts/build's tree).
# Exit codes follow automake: 0 pass, 1 fail, 77 skip, 99 hard error.
#
# Provides: fail, skip, hard_error, note, run_cmd (captures rc/stdout/stderr),
# expect_rc, expect_grep, mpirun_np (Open MPI flags and a timeout), and
# $ACX_TMP, a fresh directory under $top_builddir/tests/tmp removed on exit
# (kept with ACX_KEEP_TMP=1, and always kept when the test failed).

test_name=$(basename "$0" .test)

if [ -z "${top_srcdir:-}" ]; then
    top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
fi
if [ -z "${top_builddir:-}" ]; then
    top_builddir=$top_srcdir/build
fi
export top_srcdir top_builddir

fail() {
    echo "FAIL: $test_name: $*" >&2
    exit 1
}

skip() {
    echo "SKIP: $test_name: $*"
    exit 77
}

hard_error() {
    echo "ERROR: $test_name: $*" >&2
    exit 99
}

note() {
    echo "== $*"
}

# ---- a per-test temporary directory ----

ACX_TMP=$top_builddir/tests/tmp/$test_name.$$
rm -rf "$ACX_TMP"
mkdir -p "$ACX_TMP" || hard_error "cannot create $ACX_TMP"

acx_lib_cleanup() {
    rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ]; then
        [ "${ACX_KEEP_TMP:-0}" = 1 ] || rm -rf "$ACX_TMP"
    else
        echo "(files of the failed test kept in $ACX_TMP)" >&2
    fi
    exit "$rc"
}
trap acx_lib_cleanup EXIT

# ---- running commands ----

# run_cmd CMD [ARGS...]: run CMD with stdout and stderr captured in
# $ACX_TMP/out and $ACX_TMP/err; its exit status is left in $rc (never
# aborts the test). Both outputs are echoed to the log for diagnosis.
run_cmd() {
    echo "\$ $*"
    rc=0
    "$@" >"$ACX_TMP/out" 2>"$ACX_TMP/err" || rc=$?
    sed 's/^/  out| /' "$ACX_TMP/out"
    sed 's/^/  err| /' "$ACX_TMP/err"
    echo "  (exit $rc)"
}

# expect_rc WANT CMD [ARGS...]: run_cmd, then fail unless it exited WANT.
expect_rc() {
    want=$1
    shift
    run_cmd "$@"
    [ "$rc" -eq "$want" ] || fail "'$*' exited $rc, expected $want"
}

# expect_grep out|err FIXED-STRING: the last run_cmd's stdout or stderr
# contains FIXED-STRING.
expect_grep() {
    grep -F -e "$2" "$ACX_TMP/$1" >/dev/null ||
        fail "std$1 of the last command lacks '$2'"
}

# expect_no_grep out|err FIXED-STRING
expect_no_grep() {
    if grep -F -e "$2" "$ACX_TMP/$1" >/dev/null; then
        fail "std$1 of the last command contains '$2'"
    fi
}

# ---- MPI ----

# mpirun_np N PROGRAM [ARGS...]: Open MPI's mpirun on localhost with the
# flags a CI machine needs (root, more ranks than cores, shared memory
# only), under a timeout (ACX_TEST_TIMEOUT seconds, default 300) so a hang
# fails the test instead of stalling the suite. Returns mpirun's status;
# 124/137 mean the timeout fired.
mpirun_np() {
    np=$1
    shift
    set -- -np "$np" --oversubscribe "$@"
    if [ "$(id -u)" -eq 0 ]; then
        set -- --allow-run-as-root "$@"
    fi
    OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
        OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 \
        timeout -k 10 "${ACX_TEST_TIMEOUT:-300}" mpirun "$@"
}

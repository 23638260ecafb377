#!/usr/bin/env bash
# tests/gpu/run-tests.sh — runs tests/*.test scripts without make, in the
# environment automake's harness gives them (Makefile.am: AM_TESTS_ENVIRONMENT,
# TEST_LOG_COMPILER): top_srcdir is this repository, top_builddir the build
# tree whose programs they run (a build directory, or the build/ folder of
# the bundle from tests/gpu/make-bundle.sh, where there is no make),
# ACX_LOG_LEVEL=warn, each script run by bash. Prints one automake-style line
# per test ("PASS: tests/gpu/nccl.test") and keeps each test's output in
# LOGDIR/NAME.log (default: TOP_BUILDDIR/tests/logs).
#
#   tests/gpu/run-tests.sh TOP_BUILDDIR [-l LOGDIR] TEST...
#
# TEST is a path relative to the repository (tests/gpu/nccl.test), or a
# test program's path relative to TOP_BUILDDIR (tests/unit/test_status). Exit
# statuses follow automake: 0 PASS, 77 SKIP, 99 ERROR, anything else FAIL.
# This script exits 1 when a test failed or errored, else 0.
set -u
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -ge 1 ] || {
    echo "usage: tests/gpu/run-tests.sh TOP_BUILDDIR [-l LOGDIR] TEST..." >&2
    exit 2
}
builddir=$(cd "$1" && pwd) || exit 2
shift
logdir=$builddir/tests/logs
if [ "${1:-}" = -l ]; then
    logdir=$2
    shift 2
fi
mkdir -p "$logdir" || exit 2
bad=0
for t in "$@"; do
    log=$logdir/$(basename "$t" .test).log
    (
        cd "$builddir" || exit 99
        export top_srcdir=$src top_builddir=$builddir ACX_LOG_LEVEL=warn
        case $t in
        *.test) exec bash "$src/$t" ;;
        *) exec "$builddir/$t" ;; # a test program (tests/unit/test_status)
        esac
    ) >"$log" 2>&1
    rc=$?
    case $rc in
    0) v=PASS ;;
    77) v=SKIP ;;
    99) v=ERROR ;;
    *) v=FAIL ;;
    esac
    echo "$v: $t (exit $rc; log $log)"
    case $v in FAIL | ERROR) bad=1 ;; esac
done
exit $bad

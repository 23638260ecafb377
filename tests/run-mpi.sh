#!/bin/sh
# tests/run-mpi.sh "NP-LIST" PROGRAM [ARGS...]
# Runs PROGRAM under mpirun once per world size in NP-LIST ("1 2 3 4"), each
# under a timeout so a hang fails instead of stalling the suite. Exits with
# the first non-zero status (77 = skip only if every run skipped).
nps=$1; shift
prog=$1; shift
: "${ACX_TEST_TIMEOUT:=300}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Loopback shared memory only; no network probing on CI machines.
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
skipped=0; ran=0
for np in $nps; do
    echo "== mpirun -np $np $prog $*"
    timeout -k 10 "$ACX_TEST_TIMEOUT" mpirun -np "$np" --oversubscribe "$prog" "$@"
    rc=$?
    ran=$((ran + 1))
    if [ $rc -eq 77 ]; then skipped=$((skipped + 1)); continue; fi
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "TIMEOUT after ${ACX_TEST_TIMEOUT}s at np=$np"; exit 1; fi
    [ $rc -eq 0 ] || { echo "FAILED at np=$np (exit $rc)"; exit $rc; }
done
[ $skipped -eq $ran ] && exit 77
exit 0

# shellcheck shell=sh
# tests/nodes/lib.sh — helpers for the multi-node tests (tests/nodes/*.test),
# sourced after tests/lib.sh. The bed itself is scripts/nodes-up (network +
# UTS namespaces joined by a bridge; docs/nodes.md).
#
#   nodes_setup N [--rate R]  make an N-node bed with this test's own prefix
#                    ($NODES_PREFIX: acx<pid>n, so two test runs never share
#                    a bed), export Open MPI's settings for it
#                    (scripts/nodes-env), and remove it on every way out
#                    (EXIT/INT/TERM/HUP trap, chained before tests/lib.sh's).
#                    Skips (77, with nodes-up's reason) where namespaces
#                    cannot be made; fails when they can but the bed breaks.
#   nodes_hosts "2 1"   -> "P1:2,P2:1": an mpirun host list, K-th count for node K
#   nodes_mpirun HOSTS ARGS...  mpirun --host HOSTS ARGS..., run inside node 1
#                    (the orted on the other nodes dial back to it) under
#                    timeout (ACX_TEST_TIMEOUT, default 300 s); mpirun's status
#   nodes_exec NODE CMD [ARGS...]  CMD in NODE (arguments kept as words)
#   nodes_quote ARGS... one string that `sh -c` splits back into ARGS
#   nodes_wait CMD [ARGS...]  CMD in the background, waited for: a signal
#                    the test traps ends it at once (see below);
#                    nodes_wait_kill ends it from a test's own trap
# A failed test whose bed could not be removed says so; a passed one fails.

NODES_PREFIX=acx$$n
nodes_scripts=$top_srcdir/scripts
export NODES_PREFIX

# nodes_quote ARGS...: each argument in single quotes (embedded ones as
# '\''), joined by spaces — nodes-exec, like ssh, hands one string to sh -c.
nodes_quote() {
    nodes_q=
    for nodes_a in "$@"; do
        nodes_a=$(printf '%s' "$nodes_a" | sed "s/'/'\\\\''/g")
        nodes_q="$nodes_q '$nodes_a'"
    done
    printf '%s\n' "${nodes_q# }"
}

nodes_lib_cleanup() {
    nodes_rc=$?
    nodes_wait_kill
    if [ "${nodes_made:-0}" = 1 ]; then
        if ! "$nodes_scripts/nodes-down" --name "$NODES_PREFIX"; then
            echo "FAIL: $test_name: scripts/nodes-down --name $NODES_PREFIX left things behind" >&2
            [ "$nodes_rc" -ne 0 ] && [ "$nodes_rc" -ne 77 ] || nodes_rc=1
        elif ip netns list 2>/dev/null | awk '{ print $1 }' | grep -Eq "^$NODES_PREFIX([1-9][0-9]*|-sw)\$"; then
            echo "FAIL: $test_name: namespaces of $NODES_PREFIX remain after nodes-down" >&2
            [ "$nodes_rc" -ne 0 ] && [ "$nodes_rc" -ne 77 ] || nodes_rc=1
        fi
        nodes_made=0
    fi
    (exit "$nodes_rc")
    acx_lib_cleanup
}

# nodes_setup N [--rate R]
nodes_setup() {
    command -v mpirun >/dev/null 2>&1 || skip "mpirun not found (scripts/install-deps installs Open MPI)"
    trap nodes_lib_cleanup EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    trap 'exit 129' HUP
    nodes_made=1 # from here on nodes-down runs on exit, also after a partial nodes-up
    nodes_up_rc=0
    nodes_n=$1
    shift
    "$nodes_scripts/nodes-up" "$nodes_n" --name "$NODES_PREFIX" "$@" 2>"$ACX_TMP/nodes-up.err" ||
        nodes_up_rc=$?
    if [ "$nodes_up_rc" -eq 77 ]; then
        # nodes-up exits 77 before it makes anything (and nodes-down, which
        # needs root, would fail the skipped test)
        nodes_made=0
        skip "$(cat "$ACX_TMP/nodes-up.err")"
    elif [ "$nodes_up_rc" -ne 0 ]; then
        cat "$ACX_TMP/nodes-up.err" >&2
        fail "scripts/nodes-up $nodes_n $* --name $NODES_PREFIX exited $nodes_up_rc"
    fi
    eval "$("$nodes_scripts/nodes-env" "$NODES_PREFIX")"
}

# nodes_hosts "C1 C2 ...": the host list placing Ck ranks on node k.
nodes_hosts() {
    nodes_h=
    nodes_k=0
    for nodes_c in $1; do
        nodes_k=$((nodes_k + 1))
        nodes_h="$nodes_h,$NODES_PREFIX$nodes_k:$nodes_c"
    done
    printf '%s\n' "${nodes_h#,}"
}

# nodes_exec NODE CMD [ARGS...]
nodes_exec() {
    nodes_node=$1
    shift
    "$nodes_scripts/nodes-exec" "$nodes_node" "$(nodes_quote "$@")"
}

# nodes_wait CMD [ARGS...]: CMD's status. The shell runs a trap only after
# its foreground child has ended, and `timeout` sits in a process group of
# its own, so a TERM for the test would wait for the whole job (and a
# harness escalating to SIGKILL would leave the bed behind). `wait` returns
# as soon as a trapped signal arrives; the cleanup then kills CMD. (CMD's
# standard input is /dev/null, as for every background command.)
nodes_wait() {
    "$@" &
    nodes_wait_pid=$!
    nodes_wait_rc=0
    wait "$nodes_wait_pid" || nodes_wait_rc=$?
    nodes_wait_pid=
    return "$nodes_wait_rc"
}

# nodes_wait_kill: SIGTERM for what nodes_wait was waiting for, if anything
# (nodes_lib_cleanup does it first; a test's own trap may do it earlier).
nodes_wait_kill() {
    [ -z "${nodes_wait_pid:-}" ] || kill -TERM "$nodes_wait_pid" 2>/dev/null
    nodes_wait_pid=
}

# nodes_mpirun HOSTS ARGS...
nodes_mpirun() {
    nodes_hl=$1
    shift
    nodes_wait timeout -k 10 "${ACX_TEST_TIMEOUT:-300}" \
        "$nodes_scripts/nodes-exec" "${NODES_PREFIX}1" \
        "$(nodes_quote mpirun --host "$nodes_hl" "$@")"
}

# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are for the scripts that source this
# scripts/nodes-common.sh — shared by scripts/nodes-{up,down,exec,env,link}:
# the naming rules of the multi-node test bed (docs/nodes.md).
#
# A bed with prefix P is: network namespaces P1..PN (the "nodes") and P-sw
# (the switch: a bridge br0 with one port pK per node), plus
# /etc/netns/PK/hosts for each node. Nothing of it lives in the root
# namespace. Node K's address is 10.213.0.K/24 whatever the prefix: two beds
# never see each other (each switch is its own namespace), so the same
# subnet is used by all of them and Open MPI's interface selection is the
# same everywhere.

nodes_subnet=10.213.0.0/24
nodes_addr_base=10.213.0.
nodes_max=200 # node K gets 10.213.0.K; .254 and above are left alone

# nodes_check_prefix P: a prefix must start with a letter, hold letters,
# digits and '-', end in a non-digit (so P1..PN of one prefix can never be
# node names of another: "a1" + "2" vs "a" + "12"), and leave room for the
# node number in a 63-byte host name.
nodes_check_prefix() {
    case $1 in
    '' | *[!a-zA-Z0-9-]* | [!a-zA-Z]* | *[0-9])
        echo "$(basename "$0"): bad prefix '$1': expected a letter, then letters, digits or '-', not ending in a digit" >&2
        return 2
        ;;
    esac
    if [ ${#1} -gt 40 ]; then
        echo "$(basename "$0"): prefix '$1' is longer than 40 characters" >&2
        return 2
    fi
}

# nodes_split NODE: sets node_prefix and node_index from a node name PK
# (K the trailing digits). Returns 2 when NODE is not of that form.
nodes_split() {
    node_index=$(printf '%s' "$1" | sed -n 's/^[a-zA-Z][a-zA-Z0-9-]*[^0-9]\([1-9][0-9]*\)$/\1/p')
    if [ -z "$node_index" ]; then
        echo "$(basename "$0"): '$1' is not a node name (expected PREFIX followed by a number, e.g. acxnode2)" >&2
        return 2
    fi
    node_prefix=${1%"$node_index"}
}

# nodes_list P: the node namespaces of prefix P that exist, in number order.
nodes_list() {
    ip netns list 2>/dev/null | awk '{ print $1 }' |
        { grep -E "^$1[1-9][0-9]*\$" || true; } | sed "s/^$1//" | sort -n | sed "s/^/$1/"
}

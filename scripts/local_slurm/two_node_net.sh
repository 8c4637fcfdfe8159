# Network of the two-node cluster, sourced by start.sh and stop.sh (not run on its own).
#
# Two network namespaces (the nodes) with a veth each to one bridge on the host; the bridge
# holds the controller's address. No default route, no NAT, no forwarding is set up: traffic
# stays between the bridge and the namespaces. Every name here is the project's own, so
# stop.sh removes exactly what start.sh made, and one two-node cluster at a time per machine.

NET_BRIDGE=hxslurm0                  # the host's side; its alias records the owning STATE_DIR
NET_PREFIX=10.213.35                 # /24, private (RFC 1918); nothing else on the machine uses it
NET_CTLD_ADDR="$NET_PREFIX.1"        # slurmctld, on the bridge
NET_NODES=(harness-n1 harness-n2)    # node name = hostname = netns name
NET_ADDRS=("$NET_PREFIX.11" "$NET_PREFIX.12")
NET_HOSTS_MARK="# harness-local-slurm-2node"   # ends each /etc/hosts line start.sh adds

net_veth() { echo "hxslurm-n$(( $1 + 1 ))"; }   # host side of node $1's link (index from 0)

# net_rate_bits RATE -> bits per second, or fails: RATE is tc's NUMBER{kbit,mbit,gbit}.
net_rate_bits() {
    [[ "${1,,}" =~ ^([0-9]+(\.[0-9]+)?)(kbit|mbit|gbit)$ ]] || return 1
    awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" \
        'BEGIN { m = (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : 1e9; printf "%.0f\n", n * m }'
}

# net_owner -> the STATE_DIR recorded on the bridge (empty when there is no bridge)
net_owner() {
    ip link show "$NET_BRIDGE" >/dev/null 2>&1 || return 0
    ip -o link show "$NET_BRIDGE" | sed -n 's/.* alias \(.*\)$/\1/p'
}

# net_up STATE_DIR: bridge, namespaces, veths, addresses (each made only if missing).
net_up() {
    local i ns veth route
    route="$(ip -o route show "$NET_PREFIX.0/24" 2>/dev/null)"
    if [ -n "$route" ] && [[ "$route" != *" dev $NET_BRIDGE "* ]]; then
        echo "$NET_PREFIX.0/24 is already routed on this machine ($route); the two-node cluster needs it" >&2
        return 1
    fi
    if ! ip link show "$NET_BRIDGE" >/dev/null 2>&1; then
        ip link add "$NET_BRIDGE" type bridge forward_delay 0 stp_state 0 || return 1
    fi
    ip link set "$NET_BRIDGE" alias "$1" || return 1
    ip addr replace "$NET_CTLD_ADDR/24" dev "$NET_BRIDGE" || return 1
    ip link set "$NET_BRIDGE" up || return 1
    for i in "${!NET_NODES[@]}"; do
        ns="${NET_NODES[$i]}"; veth="$(net_veth "$i")"
        [ -e "/run/netns/$ns" ] || ip netns add "$ns" || return 1
        if ! ip link show "$veth" >/dev/null 2>&1; then
            ip link add "$veth" type veth peer name eth0 netns "$ns" || return 1
        fi
        ip link set "$veth" master "$NET_BRIDGE" up || return 1
        ip -n "$ns" addr replace "${NET_ADDRS[$i]}/24" dev eth0 || return 1
        ip -n "$ns" link set lo up || return 1
        ip -n "$ns" link set eth0 up || return 1
    done
}

# net_shape RATE: a TBF qdisc at RATE on each end of every node's link (egress of the host's
# side: into the node; egress of the node's eth0: out of it), so both directions are shaped.
# Empty RATE: the links are left unshaped. The burst holds 10 ms at RATE (at least 128 KiB, two
# of the 64 KiB segments veth passes whole): one rate's worth of timer slack at any rate.
net_shape() {
    local i bits burst spec
    if [ -n "$1" ]; then
        bits="$(net_rate_bits "$1")" || return 1
        burst=$(( bits / 8 / 100 )); [ "$burst" -ge 131072 ] || burst=131072
        spec=(tbf rate "$1" burst "$burst" latency 50ms)
    fi
    for i in "${!NET_NODES[@]}"; do
        if [ -n "$1" ]; then
            tc qdisc replace dev "$(net_veth "$i")" root "${spec[@]}" || return 1
            tc -n "${NET_NODES[$i]}" qdisc replace dev eth0 root "${spec[@]}" || return 1
        else
            tc qdisc del dev "$(net_veth "$i")" root 2>/dev/null || true
            tc -n "${NET_NODES[$i]}" qdisc del dev eth0 root 2>/dev/null || true
        fi
    done
}

# hosts_remove: drop the lines start.sh added to /etc/hosts (written in place: it may be a mount).
hosts_remove() {
    local tmp
    grep -q -F "$NET_HOSTS_MARK" /etc/hosts 2>/dev/null || return 0
    tmp="$(mktemp)" || return 1
    grep -v -F "$NET_HOSTS_MARK" /etc/hosts >"$tmp" || true
    cat "$tmp" >/etc/hosts
    rm -f "$tmp"
}

# hosts_add: one line per node, so jobs (gloo, Lightning's MASTER_ADDR) resolve node names.
hosts_add() {
    local i
    hosts_remove || return 1
    for i in "${!NET_NODES[@]}"; do
        printf '%s\t%s\t%s\n' "${NET_ADDRS[$i]}" "${NET_NODES[$i]}" "$NET_HOSTS_MARK"
    done >>/etc/hosts
}

# net_down: everything net_up and hosts_add made, whatever exists of it.
net_down() {
    local i ns veth
    for i in "${!NET_NODES[@]}"; do
        ns="${NET_NODES[$i]}"; veth="$(net_veth "$i")"
        ip link del "$veth" 2>/dev/null || true         # deletes the pair, the node's eth0 too
        [ -e "/run/netns/$ns" ] && { ip netns del "$ns" || true; }
    done
    ip link del "$NET_BRIDGE" 2>/dev/null || true
    hosts_remove || true
}

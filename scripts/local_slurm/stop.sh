#!/usr/bin/env bash
# Stop the SLURM cluster started by start.sh.
#
# Usage: scripts/local_slurm/stop.sh [STATE_DIR]                (default: /tmp/harness-slurm)
#        scripts/local_slurm/stop.sh --nodes 2 [STATE_DIR]      (default: /tmp/harness-slurm-2node)
#
# Cancels all jobs first (killing slurmd does not kill running jobs), then stops
# slurmd, slurmctld and munged by the pids in their pid files and waits until
# they are really gone (a zombie counts as gone). STATE_DIR is kept, so job ids
# continue after the next start.sh. Exits 0 when nothing was running.
# A two-node cluster (STATE_DIR/nodes says 2, or --nodes 2): then also its network, whatever
# state it is in: processes left in the nodes' namespaces, the namespaces, veths, bridge
# and the /etc/hosts lines (two_node_net.sh). Safe to run twice.
set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PATH="$PATH:/usr/sbin:/sbin"
log() { echo "stop.sh: $*" >&2; }

NODES=""
STATE_ARG=""
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) NODES="${2:-}"; shift; [ $# -gt 0 ] && shift ;;
        --nodes=*) NODES="${1#*=}"; shift ;;
        -*) log "ERROR: unknown option $1 (usage: stop.sh [--nodes 1|2] [STATE_DIR])"; exit 2 ;;
        *) STATE_ARG="$1"; shift ;;
    esac
done
case "${NODES:-1}" in
    1) DEFAULT_DIR=/tmp/harness-slurm ;;
    2) DEFAULT_DIR=/tmp/harness-slurm-2node ;;
    *) log "ERROR: --nodes $NODES: 1 or 2 only"; exit 2 ;;
esac
STATE_DIR="${STATE_ARG:-$DEFAULT_DIR}"
if [ -s "$STATE_DIR/nodes" ]; then NODES="$(cat "$STATE_DIR/nodes")"; fi
if [ "${NODES:-1}" = 2 ]; then
    # shellcheck source=two_node_net.sh
    source "$SCRIPT_DIR/two_node_net.sh"
    NODE_NAMES=("${NET_NODES[@]}")
fi

# net_stop: the two-node network, once the daemons are gone (nothing without --nodes 2).
net_stop() {
    [ "${NODES:-1}" = 2 ] || return 0
    local ns pids
    for ns in "${NET_NODES[@]}"; do
        # what a job left in a node (its steps outlive slurmd) would keep the namespace alive
        [ -e "/run/netns/$ns" ] || continue
        pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
        [ -n "${pids// /}" ] || continue
        log "stopping what is left in node $ns: pids $pids"
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null
        for _ in $(seq 1 25); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.2; done
        pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
        # shellcheck disable=SC2086
        [ -z "${pids// /}" ] || kill -KILL $pids 2>/dev/null
    done
    net_down
    log "removed the two-node network ($NET_BRIDGE, namespaces ${NET_NODES[*]}, /etc/hosts lines)"
}

if [ ! -d "$STATE_DIR" ]; then
    log "no state dir $STATE_DIR; nothing to stop"
    net_stop
    exit 0
fi
STATE_DIR="$(cd "$STATE_DIR" && pwd -P)"
export SLURM_CONF="$STATE_DIR/slurm.conf"
CTLD_PID="$STATE_DIR/slurmctld.pid"
MUNGE_PID="$STATE_DIR/munge/munged.pid"
SLURMD_PIDS=()
if [ "${NODES:-1}" = 2 ]; then
    for node in "${NODE_NAMES[@]}"; do SLURMD_PIDS+=("$STATE_DIR/slurmd.$node.pid"); done
else
    SLURMD_PIDS=("$STATE_DIR/slurmd.pid")
fi

# pid_of PIDFILE COMM -> prints the pid if it is a live (non-zombie) process named COMM
pid_of() {
    local pid st comm
    [ -s "$1" ] || return 1
    pid="$(tr -dc '0-9' <"$1")"
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    st="$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$pid/stat" 2>/dev/null)" || return 1
    [ "$st" != Z ] && [ "$st" != X ] || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null)" || return 1
    [ "$comm" = "$2" ] || return 1
    echo "$pid"
}

# gone PID -> 0 if the process no longer exists or is a zombie
gone() {
    local st
    [ -r "/proc/$1/stat" ] || return 0
    st="$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$1/stat" 2>/dev/null)" || return 0
    [ "$st" = Z ] || [ "$st" = X ]
}

# stop_daemon PIDFILE COMM
stop_daemon() {
    local pid i
    if ! pid="$(pid_of "$1" "$2")"; then
        rm -f "$1"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 50); do gone "$pid" && break; sleep 0.2; done   # 10 s
    if ! gone "$pid"; then
        log "$2 (pid $pid) ignored SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null
        for i in $(seq 1 25); do gone "$pid" && break; sleep 0.2; done
    fi
    if gone "$pid"; then
        log "stopped $2 (pid $pid)"
        rm -f "$1"
    else
        log "WARNING: $2 (pid $pid) is still alive"
        return 1
    fi
}

rc=0
any=0
daemons=()
for pf in "${SLURMD_PIDS[@]}"; do daemons+=("$pf:slurmd"); done
daemons+=("$CTLD_PID:slurmctld" "$MUNGE_PID:munged")
for pf in "${daemons[@]}"; do
    pid_of "${pf%%:*}" "${pf##*:}" >/dev/null && any=1
done
if [ "$any" = 0 ]; then
    rm -f "${SLURMD_PIDS[@]}" "$CTLD_PID" "$MUNGE_PID"
    log "nothing running for $STATE_DIR"
    net_stop
    exit 0
fi
# 1. cancel every job while slurmctld + slurmd are still up, so job processes die.
if pid_of "$CTLD_PID" slurmctld >/dev/null && [ -f "$SLURM_CONF" ]; then
    jobs="$(timeout 10 squeue -h -o '%A' 2>/dev/null | tr '\n' ' ')"
    if [ -n "${jobs// /}" ]; then
        log "cancelling jobs: $jobs"
        # shellcheck disable=SC2086
        timeout 10 scancel $jobs 2>/dev/null || true
        for _ in $(seq 1 60); do        # up to 15 s for jobs to leave the queue
            [ -z "$(timeout 5 squeue -h -o '%A' 2>/dev/null)" ] && break
            sleep 0.25
        done
        left="$(timeout 5 squeue -h -o '%A %T' 2>/dev/null | tr '\n' ' ')"
        [ -z "$left" ] || log "WARNING: jobs still listed after scancel: $left"
    fi
fi

# 2. daemons, compute side first.
for pf in "${daemons[@]}"; do
    stop_daemon "${pf%%:*}" "${pf##*:}" || rc=1
done
net_stop
[ "$rc" = 0 ] && log "stopped (state kept in $STATE_DIR)"
exit "$rc"

#!/usr/bin/env bash
# Stop the single-node SLURM cluster started by start.sh.
#
# Usage: scripts/local_slurm/stop.sh [STATE_DIR]      (default: /tmp/harness-slurm)
#
# Cancels all jobs first (killing slurmd does not kill running jobs), then stops
# slurmd, slurmctld and munged by the pids in their pid files and waits until
# they are really gone (a zombie counts as gone). STATE_DIR is kept, so job ids
# continue after the next start.sh. Exits 0 when nothing was running.
set -uo pipefail

STATE_DIR="${1:-/tmp/harness-slurm}"
export PATH="$PATH:/usr/sbin:/sbin"
log() { echo "stop.sh: $*" >&2; }

if [ ! -d "$STATE_DIR" ]; then
    log "no state dir $STATE_DIR; nothing to stop"
    exit 0
fi
STATE_DIR="$(cd "$STATE_DIR" && pwd -P)"
export SLURM_CONF="$STATE_DIR/slurm.conf"
CTLD_PID="$STATE_DIR/slurmctld.pid"
SLURMD_PID="$STATE_DIR/slurmd.pid"
MUNGE_PID="$STATE_DIR/munge/munged.pid"

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
for pf in "$SLURMD_PID:slurmd" "$CTLD_PID:slurmctld" "$MUNGE_PID:munged"; do
    pid_of "${pf%%:*}" "${pf##*:}" >/dev/null && any=1
done
if [ "$any" = 0 ]; then
    rm -f "$SLURMD_PID" "$CTLD_PID" "$MUNGE_PID"
    log "nothing running for $STATE_DIR"
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
stop_daemon "$SLURMD_PID" slurmd || rc=1
stop_daemon "$CTLD_PID" slurmctld || rc=1
stop_daemon "$MUNGE_PID" munged || rc=1
[ "$rc" = 0 ] && log "stopped (state kept in $STATE_DIR)"
exit "$rc"

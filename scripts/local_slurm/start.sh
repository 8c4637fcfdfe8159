#!/usr/bin/env bash
# Start a local SLURM cluster: one node on localhost (munged + slurmctld + slurmd), or with
# --nodes 2 two nodes that are network namespaces joined by a bridge, each node's link shaped
# to RATE (a TBF qdisc; two_node_net.sh), so multi-node DDP moves its gradients over a real,
# slow network.
#
# Usage: scripts/local_slurm/start.sh [STATE_DIR]                  (default: /tmp/harness-slurm)
#        scripts/local_slurm/start.sh --nodes 2 [--link-rate RATE] [STATE_DIR]
#                                     (default: /tmp/harness-slurm-2node; RATE: 100mbit, 1gbit,
#                                      ...; without it the links are unshaped)
#
# Everything (config, munge key/socket, state, spool, logs, pid files) lives
# under STATE_DIR; nothing in /etc is changed (two nodes: the lines it adds to
# /etc/hosts, which stop.sh removes). Re-running is safe: daemons that are already
# alive are left alone (two nodes: the link rate is set again). Job ids keep
# increasing across restarts as long as STATE_DIR is kept.
# On success the last line printed is the line callers must eval:
#     export SLURM_CONF=STATE_DIR/slurm.conf
# (also written, with the optional sacct shim on PATH, to STATE_DIR/env.sh).
#
# Environment knobs: HARNESS_SLURM_CTLD_PORT (6817; two nodes: 6827),
#                    HARNESS_SLURM_SLURMD_PORT (6818; two nodes: 6828),
#                    HARNESS_SLURM_START_TIMEOUT (60 s).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "start.sh: ERROR: $*" >&2; exit 1; }
log() { echo "start.sh: $*" >&2; }

NODES=1
LINK_RATE=""
STATE_ARG=""
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes|--link-rate)
            [ $# -ge 2 ] || die "$1 needs a value"
            if [ "$1" = --nodes ]; then NODES="$2"; else LINK_RATE="$2"; fi
            shift 2 ;;
        --nodes=*) NODES="${1#*=}"; shift ;;
        --link-rate=*) LINK_RATE="${1#*=}"; shift ;;
        -*) die "unknown option $1 (usage: start.sh [--nodes 1|2] [--link-rate RATE] [STATE_DIR])" ;;
        *) [ -z "$STATE_ARG" ] || die "one STATE_DIR only (got $STATE_ARG and $1)"
           STATE_ARG="$1"; shift ;;
    esac
done
case "$NODES" in
    1) [ -z "$LINK_RATE" ] || die "--link-rate needs --nodes 2 (one node has no link to shape)"
       DEFAULT_DIR=/tmp/harness-slurm; DEFAULT_CTLD_PORT=6817; DEFAULT_SLURMD_PORT=6818 ;;
    2) DEFAULT_DIR=/tmp/harness-slurm-2node; DEFAULT_CTLD_PORT=6827; DEFAULT_SLURMD_PORT=6828
       # shellcheck source=two_node_net.sh
       source "$SCRIPT_DIR/two_node_net.sh"
       if [ -n "$LINK_RATE" ]; then
           net_rate_bits "$LINK_RATE" >/dev/null \
               || die "--link-rate $LINK_RATE: give a number and kbit, mbit or gbit, e.g. 100mbit"
       fi ;;
    *) die "--nodes $NODES: 1 (localhost) or 2 (two network namespaces) only" ;;
esac

STATE_DIR="${STATE_ARG:-$DEFAULT_DIR}"
CTLD_PORT="${HARNESS_SLURM_CTLD_PORT:-$DEFAULT_CTLD_PORT}"
SLURMD_PORT="${HARNESS_SLURM_SLURMD_PORT:-$DEFAULT_SLURMD_PORT}"
START_TIMEOUT="${HARNESS_SLURM_START_TIMEOUT:-60}"

[ "$(id -u)" = 0 ] || die "must run as root (slurmd and the daemons here run as root)"

mkdir -p "$STATE_DIR"
STATE_DIR="$(cd "$STATE_DIR" && pwd -P)"
# A state dir serves one kind of cluster (its slurm.conf, node names, ports differ).
MODE_FILE="$STATE_DIR/nodes"
if [ -s "$MODE_FILE" ]; then made_for="$(cat "$MODE_FILE")"
elif [ -f "$STATE_DIR/slurm.conf" ]; then made_for=1
else made_for="$NODES"; fi
[ "$made_for" = "$NODES" ] || die "$STATE_DIR holds a ${made_for}-node cluster; give --nodes $NODES another STATE_DIR (default: $DEFAULT_DIR)"

# ---------------------------------------------------------------- packages
need_bins=(munged mungekey slurmctld slurmd sbatch sinfo squeue scancel scontrol srun)
missing=()
for b in "${need_bins[@]}"; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "$b" >/dev/null 2>&1 || missing+=("$b")
done
if [ "${#missing[@]}" -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and apt-get is unavailable; install slurm-wlm and munge manually"
    log "installing slurm-wlm munge (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    pkgs=(slurm-wlm slurm-client munge)
    apt_log="$(mktemp /tmp/harness-slurm-apt.XXXXXX.log)"
    if ! apt-cache show "${pkgs[@]}" >/dev/null 2>&1; then
        apt-get update >>"$apt_log" 2>&1 || die "apt-get update failed (log: $apt_log)"
    fi
    if ! apt-get install -y --no-install-recommends "${pkgs[@]}" >>"$apt_log" 2>&1; then
        apt-get update >>"$apt_log" 2>&1 || die "apt-get update failed (log: $apt_log)"
        apt-get install -y --no-install-recommends "${pkgs[@]}" >>"$apt_log" 2>&1 \
            || die "apt-get install ${pkgs[*]} failed (log: $apt_log)"
    fi
    rm -f "$apt_log"
fi
export PATH="$PATH:/usr/sbin:/sbin"
if [ "$NODES" = 2 ]; then
    for b in ip tc nsenter unshare; do
        command -v "$b" >/dev/null 2>&1 || die "--nodes 2 needs $b (iproute2, util-linux)"
    done
fi

# ---------------------------------------------------------------- helpers
# alive PIDFILE COMM -> 0 if the pid in PIDFILE is a live (non-zombie) process named COMM
alive() {
    local pid st comm
    [ -s "$1" ] || return 1
    pid="$(tr -dc '0-9' <"$1")"
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    st="$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$pid/stat" 2>/dev/null)" || return 1
    [ "$st" != Z ] && [ "$st" != X ] || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null)" || return 1
    [ "$comm" = "$2" ]
}

# ---------------------------------------------------------------- layout
if [ "$NODES" = 2 ]; then
    owner="$(net_owner)"
    [ -z "$owner" ] || [ "$owner" = "$STATE_DIR" ] \
        || die "the two-node network ($NET_BRIDGE) belongs to the cluster of $owner; stop it first: $SCRIPT_DIR/stop.sh --nodes 2 $owner"
fi
echo "$NODES" >"$MODE_FILE"
mkdir -p "$STATE_DIR"/{ctld,spool,bin,munge}
chmod 0755 "$STATE_DIR" "$STATE_DIR/ctld" "$STATE_DIR/spool" "$STATE_DIR/bin"
chmod 0755 "$STATE_DIR/munge"
CONF="$STATE_DIR/slurm.conf"
MUNGE_DIR="$STATE_DIR/munge"
MUNGE_SOCKET="$MUNGE_DIR/munge.socket"
MUNGE_PID="$MUNGE_DIR/munged.pid"
CTLD_PID="$STATE_DIR/slurmctld.pid"

HOST="$(hostname -s)"
[ -n "$HOST" ] || die "hostname -s is empty"
CPUS="$(nproc)"
MEM_MB=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 ))
MARGIN_MB=$(( MEM_MB / 20 )); [ "$MARGIN_MB" -ge 512 ] || MARGIN_MB=512
REAL_MEM=$(( MEM_MB - MARGIN_MB )); [ "$REAL_MEM" -ge 256 ] || REAL_MEM=256
if [ "$NODES" = 1 ]; then
    NODE_NAMES=("$HOST")
    NODE_LINES="NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${CPUS} RealMemory=${REAL_MEM} State=UNKNOWN"
    CLUSTER=harness; CTLD_ADDR=127.0.0.1; PER_NODE=""
    WHAT="single node, localhost"
else
    # Both nodes run on this machine: each gets every CPU, and half the memory, so that two
    # full allocations still fit.
    REAL_MEM=$(( REAL_MEM / 2 )); [ "$REAL_MEM" -ge 256 ] || REAL_MEM=256
    NODE_NAMES=("${NET_NODES[@]}")
    NODE_LINES=""
    for i in "${!NET_NODES[@]}"; do
        NODE_LINES+="NodeName=${NET_NODES[$i]} NodeAddr=${NET_ADDRS[$i]} CPUs=${CPUS} RealMemory=${REAL_MEM} State=UNKNOWN"$'\n'
    done
    NODE_LINES="${NODE_LINES%$'\n'}"
    CLUSTER=harness2node; CTLD_ADDR="$NET_CTLD_ADDR"; PER_NODE=".%n"   # slurmd expands %n
    WHAT="two nodes in network namespaces ($NET_BRIDGE, see two_node_net.sh)"
fi
DEF_MEM_PER_CPU=$(( REAL_MEM / CPUS ))
PART_NODES="$(IFS=,; echo "${NODE_NAMES[*]}")"

# slurmd_file NODE EXT -> the node's pid/log/out file (slurm.conf's %n, expanded)
slurmd_file() { echo "$STATE_DIR/slurmd${PER_NODE:+.$1}.$2"; }

# ---------------------------------------------------------------- config
cat >"$CONF.new" <<EOF
# Generated by $SCRIPT_DIR/start.sh -- ${WHAT}, no cgroups, no accounting.
ClusterName=${CLUSTER}
SlurmctldHost=${HOST}(${CTLD_ADDR})
SlurmctldPort=${CTLD_PORT}
SlurmdPort=${SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${MUNGE_SOCKET},cred_expire=10
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=${DEF_MEM_PER_CPU}
EnforcePartLimits=ALL
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
ReturnToService=2
StateSaveLocation=${STATE_DIR}/ctld
SlurmdSpoolDir=${STATE_DIR}/spool${PER_NODE:+/%n}
SlurmctldPidFile=${CTLD_PID}
SlurmdPidFile=${STATE_DIR}/slurmd${PER_NODE}.pid
SlurmctldLogFile=${STATE_DIR}/slurmctld.log
SlurmdLogFile=${STATE_DIR}/slurmd${PER_NODE}.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=${STATE_DIR}/plugstack.conf
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=10
InactiveLimit=0
KillWait=5
Waittime=0
MinJobAge=3600
${NODE_LINES}
PartitionName=debug Nodes=${PART_NODES} Default=YES MaxTime=INFINITE State=UP
EOF
: >"$STATE_DIR/plugstack.conf"
if [ -f "$CONF" ] && ! cmp -s "$CONF" "$CONF.new"; then
    log "slurm.conf changed (restart with stop.sh/start.sh for running daemons to pick it up)"
fi
mv -f "$CONF.new" "$CONF"
export SLURM_CONF="$CONF"

# Optional sacct replacement (accounting is disabled, so the real sacct fails).
# Answers submitit's `sacct -o JobID,State,NodeList --parsable2 -j ID ...` from
# squeue, which still knows finished/cancelled jobs for MinJobAge (3600 s).
cat >"$STATE_DIR/bin/sacct" <<'EOF'
#!/usr/bin/env bash
# sacct shim for a cluster without accounting: JobID|State|NodeList from squeue.
fmt="" ; ids=()
while [ $# -gt 0 ]; do
    case "$1" in
        -o|--format) fmt="$2"; shift 2 ;;
        --format=*) fmt="${1#*=}"; shift ;;
        -j|--jobs) ids+=("$2"); shift 2 ;;
        --jobs=*) ids+=("${1#*=}"); shift ;;
        *) shift ;;
    esac
done
[ -z "$fmt" ] || [ "$fmt" = "JobID,State,NodeList" ] || { echo "sacct shim: only -o JobID,State,NodeList is supported" >&2; exit 1; }
echo "JobID|State|NodeList"
for id in "${ids[@]}"; do
    for j in ${id//,/ }; do
        squeue -h -t all -j "$j" -o '%i|%T|%N' 2>/dev/null || true
    done
done
exit 0
EOF
chmod 0755 "$STATE_DIR/bin/sacct"

cat >"$STATE_DIR/env.sh" <<EOF
export SLURM_CONF=${CONF}
# Optional: sacct shim so submitit notices cancelled/failed jobs (no accounting here).
export PATH=${STATE_DIR}/bin:\$PATH
EOF

# ---------------------------------------------------------------- network (two nodes)
if [ "$NODES" = 2 ]; then
    net_up "$STATE_DIR" \
        || die "could not make the two-node network (clean up with: $SCRIPT_DIR/stop.sh --nodes 2 $STATE_DIR)"
    net_shape "$LINK_RATE" || die "could not shape the links to $LINK_RATE (tc qdisc tbf)"
    hosts_add || die "could not add the node names to /etc/hosts"
    for node in "${NODE_NAMES[@]}"; do mkdir -p "$STATE_DIR/spool/$node"; done
fi

# ---------------------------------------------------------------- daemons
started=0
if alive "$MUNGE_PID" munged; then
    log "munged already running (pid $(cat "$MUNGE_PID"))"
else
    if [ ! -s "$MUNGE_DIR/munge.key" ]; then
        mungekey --create --keyfile="$MUNGE_DIR/munge.key" >/dev/null 2>&1 \
            || dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1024 count=1 status=none
    fi
    chmod 0400 "$MUNGE_DIR/munge.key"
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock" "$MUNGE_PID"
    setsid munged --force \
        --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" \
        --pid-file="$MUNGE_PID" --log-file="$MUNGE_DIR/munged.log" \
        --seed-file="$MUNGE_DIR/munged.seed" \
        </dev/null >>"$MUNGE_DIR/munged.out" 2>&1 || die "munged failed: $(tail -n 3 "$MUNGE_DIR/munged.log" 2>/dev/null | tr '\n' ' ')"
    started=1
fi
for _ in $(seq 1 50); do [ -S "$MUNGE_SOCKET" ] && break; sleep 0.2; done
[ -S "$MUNGE_SOCKET" ] || die "munge socket $MUNGE_SOCKET did not appear; see $MUNGE_DIR/munged.log"
munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 \
    || die "munge self-test failed; see $MUNGE_DIR/munged.log"

if alive "$CTLD_PID" slurmctld; then
    log "slurmctld already running (pid $(cat "$CTLD_PID"))"
else
    rm -f "$CTLD_PID"
    # Keeps StateSaveLocation (job id sequence, queued jobs) across restarts.
    setsid slurmctld -f "$CONF" </dev/null >>"$STATE_DIR/slurmctld.out" 2>&1 \
        || die "slurmctld failed to start; see $STATE_DIR/slurmctld.log"
    started=1
fi

slurmd_launch=()   # per node: when its slurmd was launched here, 0 if it was already running
for i in "${!NODE_NAMES[@]}"; do
    node="${NODE_NAMES[$i]}"
    pidf="$(slurmd_file "$node" pid)"
    slurmd_launch[i]=0
    if alive "$pidf" slurmd; then
        log "slurmd ${PER_NODE:+of $node }already running (pid $(cat "$pidf"))"
        continue
    fi
    rm -f "$pidf"
    slurmd_launch[i]=$(date +%s)
    if [ "$NODES" = 1 ]; then
        setsid slurmd -f "$CONF" -N "$node" </dev/null >>"$(slurmd_file "$node" out)" 2>&1 \
            || die "slurmd failed to start; see $(slurmd_file "$node" log)"
    else
        # nsenter, not `ip netns exec` (which remounts /sys and hides the cgroup mounts from
        # slurmd); unshare --uts: the node's own hostname, which jobs (gloo) resolve to its address.
        setsid nsenter --net="/run/netns/$node" unshare --uts \
            sh -c 'hostname "$1" && exec slurmd -f "$2" -N "$1"' sh "$node" "$CONF" \
            </dev/null >>"$(slurmd_file "$node" out)" 2>&1 \
            || die "slurmd of $node failed to start; see $(slurmd_file "$node" log)"
    fi
    started=1
done

# ---------------------------------------------------------------- wait for the nodes
t_start=$SECONDS
deadline=$(( SECONDS + START_TIMEOUT ))
declare -A resumed=()
states=()
while :; do
    ready=0
    states=()
    for i in "${!NODE_NAMES[@]}"; do
        node="${NODE_NAMES[$i]}"
        state="$(timeout 10 sinfo -h -n "$node" -o '%t' 2>/dev/null | head -n 1 || true)"
        states+=("$node: ${state:-none}")
        case "$state" in
            idle|mix|alloc|comp)
                # after a restart slurmctld reports the saved state at once; also
                # require that the slurmd we just launched has registered.
                if [ "${slurmd_launch[i]}" = 0 ]; then ready=$(( ready + 1 )); continue; fi
                reg="$(timeout 10 scontrol show node "$node" 2>/dev/null | sed -n 's/.*SlurmdStartTime=\([^ ]*\).*/\1/p')"
                reg_s="$(date -d "$reg" +%s 2>/dev/null || echo 0)"
                [ "$reg_s" -lt "${slurmd_launch[i]}" ] || ready=$(( ready + 1 )) ;;
            drain|drng|down|inval)
                if [ -z "${resumed[$node]:-}" ]; then
                    timeout 10 scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
                    resumed[$node]=1
                fi ;;
        esac
    done
    [ "$ready" = "${#NODE_NAMES[@]}" ] && break
    if [ "$SECONDS" -ge "$deadline" ]; then
        if [ "$NODES" = 1 ]; then
            echo "start.sh: ERROR: node $HOST not ready after ${START_TIMEOUT}s (sinfo state: '${state:-none}')" >&2
        else
            echo "start.sh: ERROR: nodes not ready after ${START_TIMEOUT}s (sinfo states: $(IFS=,; echo "${states[*]}"))" >&2
        fi
        logs=("$STATE_DIR/slurmctld.log")
        for node in "${NODE_NAMES[@]}"; do logs+=("$(slurmd_file "$node" log)"); done
        for f in "${logs[@]}"; do
            echo "--- tail $f" >&2; tail -n 15 "$f" >&2 2>/dev/null || true
        done
        exit 1
    fi
    if [ $(( SECONDS - t_start )) -ge 5 ]; then   # daemons write their pid file after forking
        alive "$CTLD_PID" slurmctld \
            || die "slurmctld is not running; see $STATE_DIR/slurmctld.log: $(tail -n 3 "$STATE_DIR/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
        for node in "${NODE_NAMES[@]}"; do
            f="$(slurmd_file "$node" log)"
            alive "$(slurmd_file "$node" pid)" slurmd \
                || die "slurmd ${PER_NODE:+of $node }is not running; see $f: $(tail -n 3 "$f" 2>/dev/null | tr '\n' ' ')"
        done
    fi
    sleep 0.5
done

if [ "$NODES" = 1 ]; then
    if [ "$started" = 0 ]; then
        log "already running (node $HOST: $state)"
    else
        log "cluster up (node $HOST: $state, CPUs=$CPUS RealMemory=${REAL_MEM}M, partition debug)"
    fi
else
    facts="nodes $(IFS=,; echo "${states[*]}" | sed 's/,/, /g'); links ${LINK_RATE:-unshaped}"
    if [ "$started" = 0 ]; then
        log "already running ($facts)"
    else
        log "cluster up ($facts; each node CPUs=$CPUS RealMemory=${REAL_MEM}M; partition debug)"
    fi
fi
echo "export SLURM_CONF=$CONF"

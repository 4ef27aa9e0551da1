#!/usr/bin/env bash
# A real multi-node SLURM cluster on this one machine, to try the suite's SLURM mode and to test it:
# one slurmctld plus one `slurmd -N NAME` per node, each node on its own port, all on loopback,
# authenticated by a private munged. Debian's slurm-wlm/munge packages; no systemd, no cgroups.
#
#   scripts/slurm_cluster.sh up       # install (root + apt) if missing, start, wait until nodes idle
#   scripts/slurm_cluster.sh status   # exit 0 when every node responds
#   scripts/slurm_cluster.sh down     # cancel jobs, stop every daemon and task, remove the state
#
# Settings (environment): BENCH_SLURM_DIR (state, default /tmp/bench-slurm), BENCH_SLURM_NODES
# (default "n1 n2"), BENCH_SLURM_PORT (slurmctld's port, default 16817; node i listens on PORT+i),
# BENCH_SLURM_CPUS (CPUs each node advertises, default this machine's count).
set -euo pipefail

DIR="${BENCH_SLURM_DIR:-/tmp/bench-slurm}"
read -r -a NODES <<< "${BENCH_SLURM_NODES:-n1 n2}"
PORT="${BENCH_SLURM_PORT:-16817}"
CPUS="${BENCH_SLURM_CPUS:-$(nproc)}"
CONF="$DIR/slurm.conf"
export SLURM_CONF="$CONF"

say() { echo "[slurm-cluster] $*" >&2; }
die() { say "$*"; exit 1; }

# PIDs of what this cluster runs: daemons and slurmstepds (a file or cwd under $DIR: their logs;
# slurmstepd rewrites its environment), job processes (SLURM_JOB_ID plus our SLURM_CONF, which
# slurmstepd puts in every task's environment), and their children. Never this script or its
# ancestors, which may carry SLURM_CONF too.
our_pids() {
    local keep=" " found=" " p=$$ pp
    while [ "$p" -gt 1 ]; do keep+="$p "; p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null || echo 1); done
    for p in $(find /proc/[0-9]*/fd /proc/[0-9]*/cwd -maxdepth 1 \( -lname "$DIR" -o -lname "$DIR/*" \) 2>/dev/null) \
             $(grep -lzxF "SLURM_CONF=$CONF" /proc/[0-9]*/environ 2>/dev/null \
               | xargs -r grep -lz '^SLURM_JOB_ID=' 2>/dev/null); do
        p=${p#/proc/}; found+="${p%%/*} "
    done
    [ "$found" != " " ] || return 0
    ps -eo pid=,ppid= | while read -r p pp; do
        [[ "$keep" != *" $p "* ]] && [[ "$found" == *" $p "* || "$found" == *" $pp "* ]] && echo "$p"
    done || true
}

# Slurm clients retry a dead slurmctld for ~10-20 s: look at its process before asking anything
# (not with kill -0: a killed daemon stays a zombie until init reaps it).
alive() {  # PIDFILE
    local p s; p=$(cat "$1" 2>/dev/null) && [[ "$p" =~ ^[0-9]+$ ]] \
        && s=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) && [ "$s" != Z ]
}
ctld_alive() { alive "$DIR/slurmctld.pid"; }

nodes_idle() {  # every configured node answers and is idle (or busy with jobs)
    local states
    ctld_alive && states=$(sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
    for n in "${NODES[@]}"; do grep -qE "^$n (idle|mix|alloc)$" <<< "$states" || return 1; done
}

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null \
        && command -v munged >/dev/null && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        die "slurmctld/slurmd/srun/munged missing and not root with apt-get: install slurm-wlm and munge"
    fi
    say "installing slurmctld slurmd slurm-client munge with apt-get"
    # --no-install-recommends: 8 packages instead of ~43 (HDF5, ROCm, IPMI plugins we do not use).
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null; } || die "apt-get install of slurm/munge failed"
}

write_config() {
    local addr=$1 mem i=0
    mem=$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo)
    mkdir -p "$DIR/log" "$DIR/ctld" "$DIR/munge"
    chmod 755 "$DIR" "$DIR/munge"   # munged insists that everyone can traverse to its socket
    [ -f "$DIR/munge.key" ] || { head -c 1024 /dev/urandom > "$DIR/munge.key"; chmod 400 "$DIR/munge.key"; }
    cat > "$CONF" <<EOF
# Written by scripts/slurm_cluster.sh; removed by its 'down'.
ClusterName=bench
SlurmctldHost=localhost($addr)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
# Daemons and srun bind the address the hostname resolves to (checked to be loopback), not 0.0.0.0.
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
StateSaveLocation=$DIR/ctld
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
# %n = node name: each slurmd of this host gets its own spool, pid file and log.
SlurmdSpoolDir=$DIR/%n
SlurmdPidFile=$DIR/%n/slurmd.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log
# Containers have no usable cgroups or systemd: track tasks through /proc, no binding, no accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Trust the CPUs/memory below instead of the hardware: all nodes share this machine's cores, so the
# cluster advertises (nodes x CPUS) CPUs on $(nproc) real ones.
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
KillWait=5
# sbatch --wait sleeps 2 s between polls and multiplies that by 4 (up to 32 s) while it is under MinJobAge/2 (SLURM
# 22.05; /3 in older releases): with the default (300 s) the batch test's job was seen ended 42.0 s after it was
# submitted in every run (2 + 8 + 32), and with MinJobAge=6 still 42.05 s (2 s, then every 8 s) on 2026-11-28 for a
# job that ended after about 37; with 4 the polls stay 2 s apart on either rule: 38.1 s. Completed jobs are
# forgotten after 4 s instead of 300 (nothing here reads a job's record after it ends; sbatch polls within 2 s).
MinJobAge=4
InactiveLimit=0
MailProg=/bin/true
EOF
    for n in "${NODES[@]}"; do
        i=$((i + 1))
        echo "NodeName=$n NodeHostname=$n NodeAddr=$addr Port=$((PORT + i)) CPUs=$CPUS RealMemory=$mem State=UNKNOWN" >> "$CONF"
        mkdir -p "$DIR/$n"
    done
    local list; list=$(IFS=,; echo "${NODES[*]}")
    echo "PartitionName=bench Nodes=$list Default=YES MaxTime=INFINITE State=UP" >> "$CONF"
}

up_failed() {  # MESSAGE LOG: stop what was started, say why with the log's last error line
    local why; why=$(grep -hiE 'error|fatal' "$DIR/log/$2.log" 2>/dev/null \
        | grep -viE 'pmix|state file|Trying backup' | tail -n 1 || true)  # not the usual start-up noise
    down >/dev/null 2>&1 || true
    die "$1${why:+: $why}"
}

up() {
    if [ -f "$CONF" ] && nodes_idle; then say "already up"; echo "export SLURM_CONF=$CONF"; return 0; fi
    [ -f "$CONF" ] && { say "clearing a half-started cluster"; down; }
    [ "$(id -u)" = 0 ] || die "needs root (slurmd launches tasks as their user; SlurmUser=root here)"
    install_packages
    # NoInAddrAny binds what `hostname` resolves to; that must be loopback or we would listen publicly.
    local addr; addr=$(getent ahostsv4 "$(hostname)" | awk 'NR == 1 {print $1}')
    [[ "$addr" == 127.* ]] \
        || die "hostname $(hostname) resolves to '${addr:-nothing}', not a loopback address; add it to /etc/hosts as 127.0.1.1"
    write_config "$addr"
    munged --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge.key" --pid-file="$DIR/munge/munged.pid" \
        --seed-file="$DIR/munge/munged.seed" --log-file="$DIR/log/munged.log" || up_failed "munged failed" munged
    slurmctld -f "$CONF" || up_failed "slurmctld failed" slurmctld
    for n in "${NODES[@]}"; do slurmd -f "$CONF" -N "$n" || up_failed "slurmd -N $n failed" "slurmd-$n"; done
    local t
    for t in $(seq 60); do
        nodes_idle && break
        sleep 1
        # A daemon that is gone after 5 s (port taken, bad config) will not come back: fail now.
        [ "$t" -lt 5 ] || { ctld_alive && for n in "${NODES[@]}"; do alive "$DIR/$n/slurmd.pid" || break 2; done; } || break
    done
    if ! nodes_idle; then
        tail -n 5 "$DIR"/log/*.log >&2 || true
        ctld_alive || up_failed "slurmctld died" slurmctld
        local states; states=$(sinfo -h -N -o '%N %t' 2>/dev/null || true)
        for n in "${NODES[@]}"; do
            grep -qE "^$n idle$" <<< "$states" || up_failed "node $n not idle (${states:+$(awk -v n="$n" '$1 == n {print $2}' <<< "$states")})" "slurmd-$n"
        done
    fi
    say "up: nodes ${NODES[*]} idle on $addr, slurmctld port $PORT (state in $DIR)"
    echo "export SLURM_CONF=$CONF"
}

down() {
    if ctld_alive; then
        # Cancel first so srun/sbatch clients hear about it and exit; then stop whatever is left.
        squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
        local t; for t in $(seq 20); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    fi
    local pids sig t
    for sig in TERM KILL; do
        pids=$(our_pids)
        [ -n "$pids" ] || break
        # shellcheck disable=SC2086  # one word per pid
        kill -s "$sig" $pids 2>/dev/null || true
        for t in $(seq 20); do [ -z "$(our_pids)" ] && break; sleep 0.25; done
    done
    [ -z "$(our_pids)" ] || die "could not stop: $(our_pids | tr '\n' ' ')"
    # Only what `up` wrote: BENCH_SLURM_DIR may name a folder that holds other things too.
    rm -rf "$DIR"/{log,ctld,munge,munge.key,slurm.conf,slurmctld.pid} "${NODES[@]/#/$DIR/}"
    rmdir "$DIR" 2>/dev/null || true
    say "down"
}

status() {
    [ -f "$CONF" ] || { say "not up (no $CONF)"; return 1; }
    local p; for p in $(our_pids); do echo "$p $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)"; done
    if ctld_alive; then sinfo -N -o '%N %t %c %O'; fi
    nodes_idle && echo "export SLURM_CONF=$CONF"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac

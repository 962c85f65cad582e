#!/usr/bin/env bash
# A throw-away single-node SLURM cluster on this machine (root, no systemd needed), for the SLURM
# test (tests/workflow/test_slurm.py) and for trying profiles/slurm by hand. docs/compute.md,
# "Running on SLURM".
#
#   tools/slurm_local.sh start DIR    # install the Debian packages if missing, write the
#                                     # configuration into DIR, start the daemons, wait until the
#                                     # node is idle; then: export SLURM_CONF=DIR/etc/slurm.conf
#                                     # (or: . DIR/env.sh)
#   tools/slurm_local.sh status DIR   # exit 0: all daemons up, 3: none, 1: some
#   tools/slurm_local.sh stop DIR     # cancel the cluster's jobs, stop every daemon by the pid in
#                                     # DIR/run, remove the database and state (logs stay in DIR/log)
#
# What runs (each a background process whose pid file is in DIR/run, each talking on 127.0.0.1
# only; `start` checks the listening sockets and stops everything if one is on another address):
#   munged     authentication (its own key and socket in DIR/munge)
#   mariadbd   the accounting database (DIR/db), for
#   slurmdbd   accounting, as on a real cluster: `sacct` (without slurmdbd it answers "Slurm
#              accounting storage is disabled", exit 1). snakemake-executor-plugin-slurm follows
#              its jobs with sacct whenever sacct is installed, and falls back to it from squeue
#              when MinJobAge is short; profiles/slurm uses squeue (docs/compute.md), which
#              needs MinJobAge >= 120 s (600 s here). The test reads every job's final state
#              from sacct, which keeps it after squeue forgets the job.
#   slurmctld  the controller; slurmd  the one compute node "localhost" (this host's CPUs),
#              in one partition "local".
# Nothing outside DIR is written except by the package installation (apt-get); while it runs, a
# temporary /usr/sbin/policy-rc.d (only if none exists) keeps the packages from starting their
# system-wide services. Every wait is bounded (WAIT_S, default 60 s).
set -Eeuo pipefail

PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)
NEEDED_CMDS=(munged mungekey munge unmunge slurmctld slurmd slurmdbd sbatch squeue sacct sacctmgr
             scontrol sinfo scancel mariadbd mariadb-install-db mariadb-admin)
DAEMONS_STOP_ORDER=(slurmd slurmctld slurmdbd mariadbd munged)
WAIT_S=${WAIT_S:-60}
PARTITION=local
NODE=localhost

die() { echo "slurm_local: error: $*" >&2; exit 1; }
say() { echo "slurm_local: $*"; }

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

# wait_for SECONDS WHAT CMD...: run CMD every 0.5 s until it succeeds; fail after SECONDS.
wait_for() {
    local limit=$1 what=$2
    shift 2
    local end=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < end)) || { echo "slurm_local: timed out after ${limit}s waiting for $what" >&2; return 1; }
        sleep 0.5
    done
}

alive() { # a process that runs (an exited one waiting to be reaped, a zombie, does not)
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

pid_of() { # pid_of NAME: the pid recorded for daemon NAME, if its process still runs that program
    local f="$RUN/$1.pid" pid
    [ -s "$f" ] || return 1
    pid=$(tr -dc '0-9' <"$f")
    alive "$pid" || return 1
    # a recycled pid is not ours: the process must still be the daemon
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] || return 1
    echo "$pid"
}

stop_pid() { # stop_pid PID NAME: SIGTERM, wait, SIGKILL
    local pid=$1 name=$2 end
    kill -TERM "$pid" 2>/dev/null || return 0
    end=$((SECONDS + 20))
    while alive "$pid" && ((SECONDS < end)); do sleep 0.2; done
    if alive "$pid"; then
        say "$name ($pid) ignored SIGTERM for 20 s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        end=$((SECONDS + 10))
        while alive "$pid" && ((SECONDS < end)); do sleep 0.2; done
    fi
    ! alive "$pid" || { echo "slurm_local: $name ($pid) still running" >&2; return 1; }
    # an exited daemon is reaped by init (its parent, the start command, is gone): wait for that
    # too, so that no <defunct> entry outlives `stop` (bounded; harmless if it does)
    end=$((SECONDS + 10))
    while [ -e "/proc/$pid" ] && ((SECONDS < end)); do sleep 0.2; done
}

descendants() { # descendants PID: every process below PID, deepest first
    local c
    for c in $(ps -o pid= --ppid "$1" 2>/dev/null || true); do
        descendants "$c"
        echo "$c"
    done
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

setup_paths() {
    [ -n "${1:-}" ] || usage
    mkdir -p "$1"
    DIR=$(cd "$1" && pwd)
    RUN=$DIR/run
    LOG=$DIR/log
    ETC=$DIR/etc
    CONF=$ETC/slurm.conf
    export SLURM_CONF=$CONF
}

install_packages() {
    local missing=() c
    for c in "${NEEDED_CMDS[@]}"; do command -v "$c" >/dev/null || missing+=("$c"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${PACKAGES[*]} (missing: ${missing[*]})"
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
    fi
    local rc=0
    { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 \
        apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"; } >"$DIR/apt.log" 2>&1 || rc=$?
    [ $made_policy = 1 ] && rm -f "$policy"
    [ $rc = 0 ] || { tail -5 "$DIR/apt.log" >&2; die "apt-get failed (exit $rc; $DIR/apt.log)"; }
    for c in "${NEEDED_CMDS[@]}"; do command -v "$c" >/dev/null || die "$c still missing after install"; done
}

write_config() {
    local ctld_port=$1 slurmd_port=$2 dbd_port=$3 db_port=$4
    local cpus mem_mb
    cpus=$(nproc)
    mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.75}' /proc/meminfo)
    local sock=$DIR/munge/munge.socket
    ((${#sock} < 100)) || die "DIR is too long for a unix socket path ($sock); use a shorter DIR"
    : >"$ETC/plugstack.conf"
    cat >"$CONF" <<EOF
# Written by tools/slurm_local.sh: a single-node cluster on 127.0.0.1 for tests.
ClusterName=lpdtlocal
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
# bind every daemon (and srun) to this node's address, 127.0.0.1, instead of all addresses
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
PlugStackConfig=$ETC/plugstack.conf
MailProg=/bin/true
# no cgroups needed: track job processes through /proc
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$NODE
AccountingStoragePort=$dbd_port
AccountingStoragePass=$sock
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
# finished jobs stay visible to squeue/scontrol for 10 min; time limits act within a minute
MinJobAge=600
# sacct shows the comment (the plugin writes the rule and wildcards into it)
AccountingStoreFlags=job_comment
KillWait=5
OverTimeLimit=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$sock
DbdHost=$NODE
DbdAddr=127.0.0.1
DbdPort=$dbd_port
CommunicationParameters=NoInAddrAny
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=root
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$ETC/slurmdbd.conf"
    echo "$db_port" >"$RUN/mariadb.port"
    cat >"$DIR/env.sh" <<EOF
export SLURM_CONF=$CONF
EOF
}

check_loopback_only() { # every listening TCP socket of our daemons is on 127.0.0.1
    local name pid bad=""
    for name in "${DAEMONS_STOP_ORDER[@]}"; do
        pid=$(pid_of "$name") || continue
        bad+=$(ss -Hltnp 2>/dev/null | grep "pid=$pid," | awk '{print $4}' | grep -v '^127\.' || true)
    done
    [ -z "$bad" ] || { echo "slurm_local: listening on a non-loopback address: $bad" >&2; return 1; }
}

cmd_start() {
    setup_paths "$1"
    [ "$(id -u)" = 0 ] || die "needs root (the daemons run as root; SlurmUser=root)"
    local n
    for n in "${DAEMONS_STOP_ORDER[@]}"; do
        ! pid_of "$n" >/dev/null || die "$n is already running for $DIR (stop it first)"
    done
    install_packages
    [ -d /etc/slurm ] || die "/etc/slurm is missing (the slurm packages create it)"
    rm -rf "$RUN" "$DIR/state" "$DIR/spool" "$DIR/db" "$DIR/munge"
    mkdir -p "$RUN" "$LOG" "$ETC" "$DIR/state" "$DIR/spool" "$DIR/munge"
    chmod 755 "$DIR/munge"
    STARTED=0
    trap 'if [ "$STARTED" != 1 ]; then echo "slurm_local: start failed; stopping what was started" >&2; trap - EXIT; cmd_stop "$DIR" >&2 || true; fi' EXIT
    write_config "$(free_port)" "$(free_port)" "$(free_port)" "$(free_port)"
    local db_port
    db_port=$(cat "$RUN/mariadb.port")

    # munge: its own key and socket; --force: DIR's parents need not be world-executable (the
    # socket is used by root only)
    mungekey --create --keyfile="$DIR/munge/munge.key"
    chmod 600 "$DIR/munge/munge.key"
    munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" --seed-file="$DIR/munge/munged.seed" \
        </dev/null >>"$LOG/daemons.out" 2>&1
    wait_for "$WAIT_S" munged bash -c "munge -n -S '$DIR/munge/munge.socket' | unmunge -S '$DIR/munge/munge.socket'"
    say "munged up ($(cat "$RUN/munged.pid"))"

    # the accounting database, on 127.0.0.1 only
    timeout "$WAIT_S" mariadb-install-db --no-defaults --datadir="$DIR/db" --user=root \
        --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve \
        >"$LOG/mariadb-install.log" 2>&1
    setsid mariadbd --no-defaults --datadir="$DIR/db" --user=root --bind-address=127.0.0.1 \
        --port="$db_port" --socket="$RUN/mysqld.sock" --pid-file="$RUN/mariadbd.pid" \
        --log-error="$LOG/mariadb.log" --skip-name-resolve --innodb-buffer-pool-size=64M \
        --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 &
    echo $! >"$RUN/mariadbd.pid"
    wait_for "$WAIT_S" mariadbd mariadb-admin --no-defaults -h 127.0.0.1 -P "$db_port" -u root ping
    say "mariadbd up ($(cat "$RUN/mariadbd.pid"), port $db_port)"

    slurmdbd </dev/null >>"$LOG/daemons.out" 2>&1
    wait_for "$WAIT_S" slurmdbd timeout 10 sacctmgr -n list cluster
    say "slurmdbd up ($(cat "$RUN/slurmdbd.pid"))"

    slurmctld </dev/null >>"$LOG/daemons.out" 2>&1
    wait_for "$WAIT_S" slurmctld bash -c "timeout 10 scontrol ping | grep -q UP"
    say "slurmctld up ($(cat "$RUN/slurmctld.pid"))"

    # The jobs are slurmd's descendants. Inside a job, snakemake-executor-plugin-slurm-jobstep
    # runs the rule with `srun` in an environment stripped of SLURM_* variables, SLURM_CONF
    # included, so that srun reads the default /etc/slurm/slurm.conf. slurmd therefore runs in a
    # private mount namespace where DIR/etc is bind-mounted on /etc/slurm: its jobs see this
    # cluster's configuration there, and nothing changes outside the namespace.
    unshare --mount --propagation private sh -c \
        'mount --bind "$1" /etc/slurm && exec slurmd -N "$2"' sh "$ETC" "$NODE" \
        </dev/null >>"$LOG/daemons.out" 2>&1
    wait_for "$WAIT_S" "node $NODE idle" bash -c "timeout 10 sinfo -h -n $NODE -o %T | grep -qx idle"
    say "slurmd up ($(cat "$RUN/slurmd.pid"))"
    wait_for "$WAIT_S" "cluster lpdtlocal in the accounting database" \
        bash -c "timeout 10 sacctmgr -n -P list cluster format=cluster | grep -qx lpdtlocal"
    check_loopback_only
    STARTED=1
    say "cluster up: partition '$PARTITION', node $NODE ($(nproc) CPUs); export SLURM_CONF=$CONF"
}

cmd_stop() {
    setup_paths "$1"
    local pid name rc=0
    # cancel the jobs while the controller still runs, and give them KillWait to go
    if pid_of slurmctld >/dev/null; then
        local jobs
        jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
        if [ -n "${jobs// /}" ]; then
            say "cancelling jobs: $jobs"
            # shellcheck disable=SC2086
            timeout 10 scancel $jobs 2>/dev/null || true
            wait_for 20 "cancelled jobs to end" bash -c '[ -z "$(timeout 10 squeue -h -t R,CG -o %i)" ]' || true
        fi
    fi
    # job processes left behind (slurmstepd and what it started), found by this cluster's
    # SLURM_CONF in their environment: stopped by pid, children first
    local steps=() p
    for p in $(pgrep -x slurmstepd || true); do
        { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$CONF" && steps+=("$p")
    done
    for p in "${steps[@]}"; do
        for k in $(descendants "$p"); do stop_pid "$k" "job process" || rc=1; done
        stop_pid "$p" slurmstepd || rc=1
    done
    for name in "${DAEMONS_STOP_ORDER[@]}"; do
        if pid=$(pid_of "$name"); then
            stop_pid "$pid" "$name" || rc=1
            say "$name ($pid) stopped"
        fi
    done
    # slurmctld's helper slurmscriptd ends with it; make sure
    for p in $(pgrep -x slurmscriptd || true); do
        { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$CONF" && { stop_pid "$p" slurmscriptd || rc=1; }
    done
    [ $rc = 0 ] || return 1
    rm -rf "$RUN" "$DIR/db" "$DIR/state" "$DIR/spool" "$DIR/munge"
    say "stopped (logs kept in $LOG)"
}

cmd_status() {
    setup_paths "$1"
    local name pid up=0 total=0
    for name in munged mariadbd slurmdbd slurmctld slurmd; do
        total=$((total + 1))
        if pid=$(pid_of "$name"); then
            up=$((up + 1))
            echo "$name: running (pid $pid)"
        else
            echo "$name: stopped"
        fi
    done
    if pid_of slurmctld >/dev/null; then
        timeout 10 sinfo || true
        timeout 10 squeue || true
    fi
    [ $up = "$total" ] && return 0
    [ $up = 0 ] && return 3
    return 1
}

case "${1:-}" in
start) cmd_start "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
status) cmd_status "${2:-}" ;;
*) usage ;;
esac

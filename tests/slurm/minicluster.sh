#!/bin/bash
# A one-node Slurm cluster on localhost from Debian's packages (munge, slurmctld, slurmd), for tests and for
# trying the batch scripts in jobs/ by hand. Runs as root without systemd; the config, munge key, state,
# spool, logs and pid files all live in DIR, and the daemons listen on free ports from 6917 up, so it touches
# nothing of a real installation and two clusters can coexist.
#
#   tests/slurm/minicluster.sh start DIR [--cpus N]   start munged, slurmctld, slurmd; wait for an idle node
#   source DIR/env                                    point sbatch, squeue, ... at it (sets SLURM_CONF)
#   tests/slurm/minicluster.sh stop DIR               cancel jobs, wait for an empty queue, stop the daemons
#
# `start` exits 77 when the cluster cannot run here (not root, a package missing); `stop` stops exactly the
# processes `start` launched (their PIDs are in DIR/pids; each is checked to carry this cluster's marker in its
# environment before it is signalled), plus any slurmstepd they left behind.
set -euo pipefail

SKIP=77
log() { echo "minicluster: $*"; }
die() {
  echo "minicluster: error: $*" >&2
  exit 1
}

# Alive = exists and is not a zombie.
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

# Does process PID carry this cluster's marker (it was started by `start` for DIR, or by such a process)?
ours() {
  grep -qzxF "CONDUCTOR_MINICLUSTER=$dir" "/proc/$1/environ" 2>/dev/null
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  local cpus=4
  while [[ $# -gt 0 ]]; do
    case $1 in
      --cpus) cpus=$2; shift 2 ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  if [[ $(id -u) -ne 0 ]]; then
    echo "minicluster: SKIPPED: needs root (munged, slurmctld and slurmd run as root here)"
    exit $SKIP
  fi
  local c
  for c in munged munge slurmctld slurmd sbatch squeue scontrol scancel sinfo; do
    if ! command -v "$c" >/dev/null; then
      echo "minicluster: SKIPPED: '$c' is missing (scripts/deps.sh installs munge, slurmctld, slurmd, slurm-client)"
      exit $SKIP
    fi
  done
  [[ ! -e $dir/pids ]] || die "$dir already holds a cluster (stop it first)"
  mkdir -p "$dir"/{etc,munge,run,state,spool,log,tmp}
  # munged insists: key folder private, socket folder and its parents traversable by all.
  chmod 755 "$dir" "$dir/run"
  local up=$dir
  while up=$(dirname "$up") && [[ $up != / ]]; do
    [[ $(( $(stat -c '0%a' "$up") & 1 )) -eq 1 ]] ||
      die "munged needs every folder above its socket traversable by all; '$up' is not (chmod o+x, or use another DIR)"
  done
  chmod 700 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"

  local ctld_port=6917 d_port
  while port_busy "$ctld_port" || port_busy $((ctld_port + 1)); do
    ctld_port=$((ctld_port + 2))
    [[ $ctld_port -lt 7017 ]] || die "no two free ports between 6917 and 7017"
  done
  d_port=$((ctld_port + 1))
  local host
  host=$(hostname -s)
  # linuxproc + task/none: no cgroups needed; config_overrides lets a small node advertise $cpus CPUs.
  cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=minicluster
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/run/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$dir/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=5
Waittime=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$dir/env" <<EOF
export SLURM_CONF=$dir/etc/slurm.conf
EOF
  : >"$dir/pids"
  export SLURM_CONF=$dir/etc/slurm.conf
  # The marker lets `stop` tell our processes from anyone else's; the daemons fork into the background and
  # write their pid files.
  env CONDUCTOR_MINICLUSTER="$dir" munged --key-file="$dir/munge/munge.key" --socket="$dir/run/munge.socket" \
    --log-file="$dir/log/munged.log" --pid-file="$dir/run/munged.pid" --seed-file="$dir/munge/munged.seed" ||
    die "munged did not start: $(tail -n 3 "$dir/log/munged.log" 2>/dev/null)"
  record munged
  munge -S "$dir/run/munge.socket" -n </dev/null | unmunge -S "$dir/run/munge.socket" >/dev/null ||
    die "munge credentials do not round-trip through $dir/run/munge.socket"
  env CONDUCTOR_MINICLUSTER="$dir" slurmctld -f "$SLURM_CONF" -i ||
    die "slurmctld did not start: $(tail -n 5 "$dir/log/slurmctld.log" 2>/dev/null)"
  record slurmctld
  env CONDUCTOR_MINICLUSTER="$dir" slurmd -f "$SLURM_CONF" ||
    die "slurmd did not start: $(tail -n 5 "$dir/log/slurmd.log" 2>/dev/null)"
  record slurmd

  local deadline=$((SECONDS + 30)) state=""
  while [[ $SECONDS -lt $deadline ]]; do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    sleep 0.5
  done
  [[ $state == idle ]] || die "node $host is '${state:-unreachable}' after 30 s, not idle; see $dir/log/"
  log "up: node $host with $cpus CPUs, slurmctld port $ctld_port, slurmd port $d_port, state in $dir"
}

# record NAME: waits for NAME's pid file and appends "NAME PID" to DIR/pids.
record() {
  local name=$1 pidfile=$dir/run/$1.pid pid="" deadline=$((SECONDS + 10))
  while [[ $SECONDS -lt $deadline ]]; do
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" && break
    sleep 0.1
  done
  [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" || die "$name wrote no pid file ($pidfile); see $dir/log/"
  ours "$pid" || die "pid $pid from $pidfile is not the $name this script started"
  echo "$name $pid" >>"$dir/pids"
}

# stop_pid NAME PID: SIGTERM, wait up to 15 s, then SIGKILL. Only for processes carrying our marker.
stop_pid() {
  local name=$1 pid=$2 deadline
  alive "$pid" || return 0
  if ! ours "$pid"; then
    log "warning: pid $pid is no longer our $name; not signalling it"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 15))
  while alive "$pid" && [[ $SECONDS -lt $deadline ]]; do sleep 0.1; done
  if alive "$pid"; then
    log "warning: $name ($pid) ignored SIGTERM for 15 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    status=1
  fi
  log "stopped $name ($pid)"
}

stop() {
  status=0
  [[ -f $dir/pids ]] || {
    log "nothing to stop in $dir"
    return 0
  }
  export SLURM_CONF=$dir/etc/slurm.conf
  local name pid ctld_alive=0
  while read -r name pid; do
    [[ $name == slurmctld ]] && alive "$pid" && ours "$pid" && ctld_alive=1
  done <"$dir/pids"
  if [[ $ctld_alive == 1 ]]; then
    local jobs deadline=$((SECONDS + 30))
    jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
    if [[ -n ${jobs// /} ]]; then
      log "cancelling leftover jobs: $jobs"
      # shellcheck disable=SC2086
      scancel $jobs || true
    fi
    while [[ $SECONDS -lt $deadline ]]; do
      jobs=$(squeue -h -o %i 2>/dev/null) || break
      [[ -z $jobs ]] && break
      sleep 0.5
    done
    if [[ -n $jobs ]]; then
      log "warning: jobs still queued after 30 s: $(echo $jobs)"
      status=1
    fi
  fi
  # slurmd first (it owns the job steps), then the controller, then munge which both use.
  for name in slurmd slurmctld munged; do
    pid=$(awk -v n="$name" '$1 == n {print $2}' "$dir/pids")
    [[ -n $pid ]] && stop_pid "$name" "$pid"
  done
  # Anything else carrying the marker (a slurmstepd that outlived slurmd) was started by us, too.
  local p f
  # One grep over every environ (NUL-separated entries) instead of a process per pid: the machine may be busy.
  for f in $(grep -lzxF "CONDUCTOR_MINICLUSTER=$dir" /proc/[0-9]*/environ 2>/dev/null); do
    p=${f#/proc/}
    p=${p%/environ}
    [[ $p == "$$" ]] && continue
    if alive "$p"; then
      log "warning: leftover process $p ($(cat "/proc/$p/comm" 2>/dev/null)); stopping it"
      stop_pid leftover "$p"
      status=1
    fi
  done
  mv "$dir/pids" "$dir/pids.stopped"
  return $status
}

[[ $# -ge 2 ]] || {
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "${BASH_SOURCE[0]}"
  exit 2
}
action=$1
dir=$(realpath -m "$2")
shift 2
case $action in
  start) start "$@" ;;
  stop) stop ;;
  *) die "unknown action '$action' (start or stop)" ;;
esac

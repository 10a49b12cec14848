#!/usr/bin/env bash
# A real Slurm (Debian's slurm-wlm: slurmctld + slurmd) on the namespaced hosts of scripts/cluster.sh.
#
#   scripts/slurm.sh up N [--tasks K] [--name horos] [--accounting]
#                                                      hosts h1..hN, slurmctld on h1, slurmd on every host
#                                                      with K CPUs (task slots) each (default 2); remakes it;
#                                                      --accounting: slurmdbd + MariaDB on h1, for sacct
#   scripts/slurm.sh down [--name horos]               stop the daemons and remove the hosts (safe to repeat)
#   scripts/slurm.sh exec HOST cmd...                  run cmd on HOST, e.g. `exec h1 sbatch job.sbatch`
#                                                      (cluster HORO_SLURM_NAME, default horos)
#   scripts/slurm.sh status [--name horos]             sinfo, as seen from h1
#
# Each host's private mount namespace gets its own /etc/slurm (the generated slurm.conf) and an /etc/hosts
# naming h1..hN, bind-mounted over the machine's, so sbatch/srun/salloc run on a host (`exec`) need no
# flags and nothing outside the namespaces changes. Authentication is auth/none + cred/none (no munge
# daemon to run: every host is this machine, as root); processes are tracked by process group, no cgroups.
# Installs slurm-wlm and libpmix-dev (Slurm's mpi/pmix plugin loads libpmix.so) with apt-get where missing
# (--accounting: slurmdbd and mariadb-server too; MariaDB listens on a socket in h1's namespace only).
# Needs root; state (config, spool, logs) lives in $HORO_CLUSTER_STATE/<name>/slurm.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state_root="${HORO_CLUSTER_STATE:-/run/horo-cluster}"

die() { echo "slurm.sh: $*" >&2; exit 1; }
usage() { sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

name=horos
tasks=2
accounting=0
args=()
parse() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name="${2:?--name needs a value}"; shift 2 ;;
      --name=*) name="${1#--name=}"; shift ;;
      --tasks) tasks="${2:?--tasks needs a count}"; shift 2 ;;
      --tasks=*) tasks="${1#--tasks=}"; shift ;;
      --accounting) accounting=1; shift ;;
      *) args+=("$1"); shift ;;
    esac
  done
  [[ "$tasks" =~ ^[0-9]+$ ]] && [ "$tasks" -ge 1 ] || die "--tasks must be a positive number"
  state="$state_root/$name"
  sstate="$state/slurm"
}

cluster() { bash "$here/cluster.sh" "$@" --name "$name"; }
on() { local host="$1"; shift; cluster exec "$host" "$@"; }

install_slurm() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  compgen -G "/usr/lib/*/libpmix.so" >/dev/null || compgen -G "/usr/lib/libpmix.so" >/dev/null || missing+=(libpmix-dev)
  if [ "$accounting" = 1 ]; then
    command -v slurmdbd >/dev/null || missing+=(slurmdbd)
    command -v mariadbd >/dev/null || missing+=(mariadb-server)
  fi
  [ "${#missing[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "Slurm is not installed (${missing[*]}) and there is no apt-get to install it"
  echo "slurm.sh: apt-get install ${missing[*]}" >&2
  local log; log="$(mktemp)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           "${missing[@]}"; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2; rm -f "$log"; die "apt-get install ${missing[*]} failed"
  fi
  rm -f "$log"
}

# Stop the daemons `up` started: only pids recorded in our state whose command line is a Slurm daemon
# reading our config (the other names' and the machine's own daemons are left alone).
stop_daemons() {
  [ -d "$sstate/run" ] || return 0
  local f pid
  for f in "$sstate"/run/*.pid; do
    [ -e "$f" ] || continue
    pid="$(cat "$f" 2>/dev/null || true)"
    if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] &&
       tr '\0' ' ' <"/proc/$pid/cmdline" | grep -Eq "(slurm(ctld|d) |mariadbd ).*$sstate|^slurmdbd"; then
      kill "$pid" 2>/dev/null || true
    fi
  done
  for f in "$sstate"/run/*.pid; do
    [ -e "$f" ] || continue
    pid="$(cat "$f" 2>/dev/null || true)"
    for _ in $(seq 50); do [ -n "$pid" ] && [ -d "/proc/$pid" ] || break; sleep 0.1; done
    [ -n "$pid" ] && [ -d "/proc/$pid" ] &&
      tr '\0' ' ' <"/proc/$pid/cmdline" | grep -Eq "(slurm(ctld|d) |mariadbd ).*$sstate|^slurmdbd" &&
      kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

# Job steps outlive a killed slurmd (slurmstepd is its own process), and ranks outlive a holder: end every
# process left in our hosts' network namespaces (only what ran on these hosts lives there), holders aside.
kill_leftovers() {
  local f hpid pid nss=() ns
  [ -d "$state" ] || return 0
  for f in "$state"/h*.pid; do
    [ -e "$f" ] || continue
    hpid="$(cat "$f")"
    ns="$(readlink "/proc/$hpid/ns/net" 2>/dev/null)" || continue
    [ "$ns" != "$(readlink /proc/self/ns/net)" ] && nss+=("$ns $hpid")
  done
  [ "${#nss[@]}" -gt 0 ] || return 0
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    ns="$(readlink "/proc/$pid/ns/net" 2>/dev/null)" || continue
    for f in "${nss[@]}"; do
      [ "$ns" = "${f% *}" ] && [ "$pid" != "${f#* }" ] && kill -9 "$pid" 2>/dev/null || true
    done
  done
}

cmd_down() {
  [ "$(id -u)" = 0 ] || die "needs root"
  stop_daemons
  kill_leftovers
  cluster down >/dev/null 2>&1 || true
  rm -rf "$sstate"
}

write_conf() {  # write_conf N NET
  local n="$1" net="$2" i
  mkdir -p "$sstate/etc" "$sstate/ctld" "$sstate/log" "$sstate/run" "$sstate/nodetmp"
  for i in $(seq "$n"); do mkdir -p "$sstate/spool/h$i" "$sstate/tmp/h$i"; done
  {
    echo "127.0.0.1 localhost"
    for i in $(seq "$n"); do echo "$net.$i h$i"; done
  } >"$sstate/hosts"
  cat >"$sstate/etc/slurm.conf" <<EOF
# written by scripts/slurm.sh for cluster '$name': $n hosts x $tasks task slots
ClusterName=$name
SlurmctldHost=h1($net.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(if [ "$accounting" = 1 ]; then
    echo "AccountingStorageType=accounting_storage/slurmdbd"
    echo "AccountingStorageHost=h1"
  else
    echo "AccountingStorageType=accounting_storage/none"
  fi)
JobCompType=jobcomp/filetxt
JobCompLoc=$sstate/log/jobcomp.txt
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
# A killed slurmd makes its node DOWN (and its jobs end) within seconds, not the default 5 minutes.
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=10
KillWait=10
InactiveLimit=0
MinJobAge=600
StateSaveLocation=$sstate/ctld
SlurmdSpoolDir=$sstate/spool/%n
# Each host's own node-local scratch (bind-mounted per host): PMIx keeps per-step directories named
# by job and step there, which the hosts of one machine must not share.
TmpFS=$sstate/nodetmp
SlurmctldPidFile=$sstate/run/slurmctld.pid
SlurmdPidFile=$sstate/run/slurmd-%n.pid
SlurmctldLogFile=$sstate/log/slurmctld.log
SlurmdLogFile=$sstate/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=h[1-$n] NodeAddr=$(for i in $(seq "$n"); do printf '%s.%s,' "$net" "$i"; done | sed 's/,$//') CPUs=$tasks State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cp /etc/slurm/plugstack.conf "$sstate/etc/" 2>/dev/null || : >"$sstate/etc/plugstack.conf"
}

# slurmdbd on h1 with its MariaDB (a socket in h1's own /run/mysqld, no TCP port), for sacct.
start_accounting() {
  local net="$1"
  mkdir -p "$sstate/db" "$sstate/mysqld" /run/mysqld
  on h1 mount --bind "$sstate/mysqld" /run/mysqld
  mariadb-install-db --user=root --datadir="$sstate/db" --skip-test-db >"$sstate/log/mariadb-install.log" 2>&1 ||
    die "mariadb-install-db failed: $(tail -n 5 "$sstate/log/mariadb-install.log")"
  on h1 sh -c "setsid mariadbd --user=root --datadir='$sstate/db' --skip-networking \
      --socket=/run/mysqld/mysqld.sock --pid-file='$sstate/run/mariadb.pid' \
      --log-error='$sstate/log/mariadb.log' </dev/null >/dev/null 2>&1 &"
  for _ in $(seq 120); do [ -S "$sstate/mysqld/mysqld.sock" ] && break; sleep 0.25; done
  [ -S "$sstate/mysqld/mysqld.sock" ] || die "MariaDB did not start: $(tail -n 5 "$sstate/log/mariadb.log")"
  cat >"$sstate/etc/slurmdbd.conf" <<DBD
AuthType=auth/none
DbdHost=h1
DbdAddr=$net.1
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
PidFile=$sstate/run/slurmdbd.pid
LogFile=$sstate/log/slurmdbd.log
DBD
  chmod 600 "$sstate/etc/slurmdbd.conf"
  on h1 slurmdbd || die "slurmdbd did not start: $(tail -n 5 "$sstate/log/slurmdbd.log" 2>/dev/null)"
  for _ in $(seq 120); do on h1 sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.25; done
  on h1 sacctmgr -i add cluster "$name" >/dev/null 2>&1 || true
  on h1 sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx "$name" ||
    die "slurmdbd does not answer (logs: $sstate/log/slurmdbd.log)"
}

cmd_up() {
  local n="${args[0]:-}"
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 32 ] || die "up needs a host count 1..32"
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces, the Slurm daemons)"
  install_slurm
  cmd_down
  local envtext net i
  envtext="$(cluster up "$n")" || die "scripts/cluster.sh up $n failed"
  net="$(printf '%s\n' "$envtext" | sed -n 's|.*oob_tcp_if_include=\(.*\)\.0/24|\1|p' | head -1)"
  [ -n "$net" ] || die "cannot tell the cluster's subnet from scripts/cluster.sh env"
  write_conf "$n" "$net"
  mkdir -p /etc/slurm  # the bind-mount target (Debian's slurm packages make it)
  for i in $(seq "$n"); do
    on "h$i" sh -c "mount --bind '$sstate/etc' /etc/slurm && mount --bind '$sstate/hosts' /etc/hosts && \
                       mount --bind '$sstate/tmp/h$i' '$sstate/nodetmp'"
  done
  if [ "$accounting" = 1 ]; then start_accounting "$net"; fi
  on h1 slurmctld -f "$sstate/etc/slurm.conf" || die "slurmctld did not start: $(tail -n 5 "$sstate/log/slurmctld.log" 2>/dev/null)"
  for i in $(seq "$n"); do
    on "h$i" slurmd -N "h$i" -f "$sstate/etc/slurm.conf" ||
      die "slurmd on h$i did not start: $(tail -n 5 "$sstate/log/slurmd-h$i.log" 2>/dev/null)"
  done
  # Ready when every node is idle (registered and accepting jobs).
  local idle=""
  for _ in $(seq 120); do
    idle="$(on h1 sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" || idle=0
    [ "$idle" -ge "$n" ] && break
    sleep 0.5
  done
  [ "$idle" -ge "$n" ] || { on h1 sinfo -N >&2 || true; die "only $idle of $n nodes came up idle (logs: $sstate/log)"; }
  echo "slurm '$name': slurmctld$([ "$accounting" = 1 ] && echo ' + slurmdbd') on h1, slurmd on h1..h$n ($tasks CPUs each); submit with" \
       "scripts/slurm.sh exec h1 sbatch ... (logs: $sstate/log)" >&2
}

[ $# -ge 1 ] || usage
verb="$1"; shift
case "$verb" in
  exec)
    # everything after HOST is the command (cluster.sh takes --name from the end)
    host="${1:?exec needs HOST}"; shift
    exec bash "$here/cluster.sh" exec "$host" "$@" --name "${HORO_SLURM_NAME:-$name}" ;;
esac
parse "$@"
case "$verb" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) on h1 sinfo -N ;;
  *) usage ;;
esac

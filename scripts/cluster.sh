#!/usr/bin/env bash
# A cluster of N "hosts" on this machine, for multi-host tests and benchmarks.
#
#   scripts/cluster.sh up N [--rate 1gbit] [--name horoc]   make hosts h1..hN (idempotent: remakes them)
#   scripts/cluster.sh down [--name horoc]                   remove everything `up` made (safe to repeat)
#   scripts/cluster.sh exec HOST cmd...                      run cmd inside host HOST (h1, h2, ...)
#   scripts/cluster.sh env [--name horoc]                    print the MPI settings that reach the hosts
#   scripts/cluster.sh link HOST up|down                     take a host's network link up or down
#   scripts/cluster.sh status [--name horoc]                 list the hosts and their pids
#
# Each host is one long-lived holder process (`unshare --net --uts --mount`) with its own network
# namespace, hostname (UTS) and /dev/shm (a private tmpfs in its mount namespace, so shared memory
# does not leak between hosts). Its veth pair joins a bridge on this machine (10.213.<k>.0/24, the
# bridge is .254 so mpirun here reaches every host); both ends are shaped with `tc tbf` to --rate.
# mpirun starts its daemons through scripts/cluster_rsh.sh (`--mca plm_rsh_agent`), which nsenters
# the host's namespaces: no sshd. Needs root, unshare/nsenter (util-linux), ip and tc (iproute2).
# Only the namespaces, veths and bridge made here ever see traffic.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state_root="${HORO_CLUSTER_STATE:-/run/horo-cluster}"

die() { echo "cluster.sh: $*" >&2; exit 1; }

usage() { sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

name=horoc
rate=""
args=()
parse() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate) rate="${2:?--rate needs a value such as 1gbit}"; shift 2 ;;
      --rate=*) rate="${1#--rate=}"; shift ;;
      --name) name="${2:?--name needs a value}"; shift 2 ;;
      --name=*) name="${1#--name=}"; shift ;;
      *) args+=("$1"); shift ;;
    esac
  done
  [[ "$name" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name must be 1-8 lower-case letters/digits starting with a letter"
  state="$state_root/$name"
  bridge="${name}br"
}

# A /24 per cluster name, so two named clusters never share addresses.
subnet() { echo "10.213.$(( $(printf '%s' "$name" | cksum | cut -d' ' -f1) % 200 + 10 ))"; }

holder_pid() {  # prints the pid of HOST's holder if it is alive
  local f="$state/$1.pid" pid
  [ -f "$f" ] || return 1
  pid="$(cat "$f")"
  [ -d "/proc/$pid" ] && [ "$(readlink "/proc/$pid/ns/net")" != "$(readlink /proc/self/ns/net)" ] || return 1
  echo "$pid"
}

need_tools() {
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces, veths, tc)"
  local t
  for t in unshare nsenter ip tc; do command -v "$t" >/dev/null || die "needs '$t' on PATH"; done
}

cmd_down() {
  local f pid
  if [ -d "$state" ]; then
    for f in "$state"/*.pid; do
      [ -e "$f" ] || continue
      pid="$(cat "$f")"
      # only the holder we started (its command line says so); its namespaces go with it
      if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "horo-cluster-holder $name"; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
      fi
      rm -f "$f"
    done
  fi
  # veths whose namespace end died vanish with it; remove any left on this side, then the bridge
  for f in /sys/class/net/"${name}"v*; do
    [ -e "$f" ] && ip link del "$(basename "$f")" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$state"
}

shape() {  # shape DEV [netns-pid]: tbf at $rate on DEV's egress
  [ -n "$rate" ] || return 0
  local dev="$1" pid="${2:-}" run=()
  [ -n "$pid" ] && run=(nsenter -t "$pid" --net)
  # burst: at least one 1 ms of traffic at the rate (and a few jumbo frames), or tbf caps below the rate
  "${run[@]}" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 256kb latency 50ms
}

cmd_up() {
  local n="${args[0]:-}"
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 32 ] || die "up needs a host count 1..32"
  need_tools
  cmd_down
  mkdir -p "$state"
  local net; net="$(subnet)"
  if ip -o -4 addr show | grep -q " $net\."; then
    rm -rf "$state"
    die "subnet $net.0/24 is in use here already; pick another --name"
  fi
  ip link add "$bridge" type bridge
  ip addr add "$net.254/24" dev "$bridge"
  ip link set "$bridge" up
  local i host pid
  for i in $(seq "$n"); do
    host="h$i"
    # The holder: new net/uts/mount namespaces, a hostname, a private /dev/shm, then sleep until killed.
    # `exec -a` tags its command line so `down` kills only what `up` started.
    unshare --net --uts --mount --propagation private \
      bash -c "hostname $host && mount -t tmpfs -o size=50% tmpfs /dev/shm && ip link set lo up && \
               exec -a 'horo-cluster-holder $name $host' sleep infinity" </dev/null >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do
      [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] &&
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q horo-cluster-holder && break
      sleep 0.05
    done
    echo "$pid" >"$state/$host.pid"
    ip link add "${name}v$i" type veth peer name "${name}p$i"
    ip link set "${name}p$i" netns "$pid"
    ip link set "${name}v$i" master "$bridge" up
    nsenter -t "$pid" --net ip link set "${name}p$i" name eth0
    nsenter -t "$pid" --net ip addr add "$net.$i/24" dev eth0
    nsenter -t "$pid" --net ip link set eth0 up
    shape "${name}v$i"
    shape eth0 "$pid"
    echo "$net.$i $host" >>"$state/hosts"
  done
  echo "$n" >"$state/size"
  echo "${rate:-unshaped}" >"$state/rate"
  for i in $(seq "$n"); do holder_pid "h$i" >/dev/null || die "host h$i did not start"; done
  echo "cluster '$name': $n hosts (h1..h$n) on $net.0/24, links ${rate:-unshaped}" >&2
  cmd_env
}

cmd_env() {
  [ -f "$state/size" ] || die "cluster '$name' is not up (scripts/cluster.sh up N)"
  local net; net="$(subnet)"
  # Open MPI 5 (PRRTE daemons + the TCP BTL) and 4 read these; only the cluster's subnet is used.
  cat <<EOF
export HORO_CLUSTER_NAME=$name
export OMPI_MCA_plm_rsh_agent=$here/cluster_rsh.sh
export PRTE_MCA_plm_ssh_agent=$here/cluster_rsh.sh
export PRTE_MCA_oob_tcp_if_include=$net.0/24
export OMPI_MCA_oob_tcp_if_include=$net.0/24
export OMPI_MCA_btl_tcp_if_include=$net.0/24
export OMPI_MCA_btl=self,sm,tcp
export HORO_CLUSTER_HOSTS=$(seq -s, -f 'h%g' "$(cat "$state/size")")
EOF
}

cmd_exec() {
  local host="${args[0]:-}"
  [ -n "$host" ] && [ "${#args[@]}" -ge 2 ] || die "exec needs HOST and a command"
  local pid; pid="$(holder_pid "$host")" || die "no host '$host' in cluster '$name'"
  exec nsenter -t "$pid" --net --uts --mount --wd="$PWD" -- "${args[@]:1}"
}

cmd_link() {
  local host="${args[0]:-}" updown="${args[1]:-}"
  [[ "$updown" == up || "$updown" == down ]] || die "link needs HOST up|down"
  local pid; pid="$(holder_pid "$host")" || die "no host '$host' in cluster '$name'"
  ip link set "${name}v${host#h}" "$updown"
}

cmd_status() {
  [ -f "$state/size" ] || { echo "cluster '$name' is down"; return 0; }
  local i pid
  for i in $(seq "$(cat "$state/size")"); do
    pid="$(holder_pid "h$i")" && echo "h$i pid $pid $(nsenter -t "$pid" --net ip -4 -o addr show eth0 | awk '{print $4}')" ||
      echo "h$i missing"
  done
}

[ $# -ge 1 ] || usage
verb="$1"; shift
parse "$@"
case "$verb" in
  up) cmd_up ;;
  down) need_tools; cmd_down ;;
  exec) cmd_exec ;;
  env) cmd_env ;;
  link) cmd_link ;;
  status) cmd_status ;;
  *) usage ;;
esac

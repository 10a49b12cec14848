#!/usr/bin/env bash
# mpirun's remote shell for the namespaced cluster (scripts/cluster.sh): called as
# `cluster_rsh.sh [ssh-style options] HOST COMMAND...`, it runs COMMAND through a shell inside
# HOST's network, UTS and mount namespaces, as ssh would on a real host. No sshd involved.
set -euo pipefail
while [ $# -gt 0 ] && [[ "$1" == -* ]]; do shift; done  # ssh options (-x, ...) mean nothing here
host="${1:?usage: cluster_rsh.sh HOST COMMAND...}"; shift
name="${HORO_CLUSTER_NAME:-horoc}"
pidfile="${HORO_CLUSTER_STATE:-/run/horo-cluster}/$name/$host.pid"
[ -f "$pidfile" ] || { echo "cluster_rsh.sh: no host '$host' in cluster '$name' (scripts/cluster.sh up N)" >&2; exit 255; }
exec nsenter -t "$(cat "$pidfile")" --net --uts --mount --wd="$PWD" -- /bin/sh -c "$*"

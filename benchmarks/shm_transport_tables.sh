#!/usr/bin/env bash
# horo (default transport: shared memory on one host) against MPI's own collective
# (mpi4py, same communicator size) in one run per table: allreduce 64 KiB-256 MiB,
# broadcast/allgather/alltoall/reducescatter, then gather/scatter/reduce (not with ROOTED=0),
# 64 KiB-64 MiB, at np=2 and np=4 (NPS="8 16" for others).
#   [NPS="2 4"] [ROOTED=0] bash benchmarks/shm_transport_tables.sh [iters] [outdir]
# The ratio column is MPI time / horo time (above 1: horo faster). Prints `uptime`
# first: on a shared machine the load says how far to trust the table.
set -euo pipefail
iters=${1:-10}
out=${2:-shm_tables}
mkdir -p "$out"
uptime
specs=("allreduce 256M" "broadcast 64M" "allgather 64M" "alltoall 64M" "reducescatter 64M")
[ "${ROOTED:-1}" = 0 ] || specs+=("gather 64M" "scatter 64M" "reduce 64M")
for np in ${NPS:-2 4}; do
  for spec in "${specs[@]}"; do
    set -- $spec
    echo "== np=$np $1 (uptime: $(uptime | sed 's/.*load/load/'))"
    mpirun -np "$np" --oversubscribe --bind-to none horo-bench "$1" -b 64K -e "$2" -f 4 -n "$iters" -w 3 \
      --baseline --no-progress --json "$out/np${np}_$1.json" 2>&1 | grep -v '^#.*out of bounds'
  done
done

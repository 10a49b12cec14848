#!/usr/bin/env bash
# horo's shared-memory path at more ranks than this project's 2-core machines can run well, for a
# machine with 16 or more cores (the device machine) where an MPI and mpi4py are already installed:
#   bash scripts/shm_many_ranks.sh [LOGDIR]        (NPS="8 16" by default)
# Builds the core in place, runs the rank suites of the shared-memory path, allreduce, the other
# collectives and process sets (tests/mpi/ranks_*.py, against NumPy) at each np, then the tables
# of benchmarks/shm_transport_tables.sh and a 4 KiB allreduce latency row at each np. Every stage has its own time limit and log in LOGDIR.
set -u
cd "$(dirname "$0")/.."
LOG=${1:-shm-logs}
mkdir -p "$LOG"
PY=${PYTHON:-python3}
NPS=${NPS:-8 16}
BIN="$(dirname "$(command -v "$PY")")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1 PATH="$BIN:$PATH"
MPIRUN=(mpirun --oversubscribe --bind-to none)

source scripts/stage.sh

stage machine 30 bash -c "nproc; lscpu | grep -E \"^(Model name|Thread|Core|Socket|L2|L3)\"; df -h /dev/shm; uptime; $PY --version; mpirun --version | head -1"
stage build 300 "$PY" -m pip install --no-build-isolation --no-deps -e .
pytest=("$PY" -m pytest -q -x -p no:cacheprovider -o timeout=150 -rfEs --color=no)
for np in $NPS; do
  # A 4 KiB chunk makes most cases take several rounds; the default chunk is what users get.
  TAIL=4 stage "suite_np$np" 300 bash -c "
    HORO_TRANSPORT=shm HORO_SHM_CHUNK_BYTES=4096 ${MPIRUN[*]} -np $np ${pytest[*]@Q} tests/mpi/ranks_shm.py -k 'not exits and not differ_between_ranks' &&
    HORO_TRANSPORT=shm ${MPIRUN[*]} -np $np ${pytest[*]@Q} tests/mpi/ranks_shm.py -k 'not exits and not differ_between_ranks' &&
    ${MPIRUN[*]} -np $np ${pytest[*]@Q} tests/mpi/ranks_allreduce.py &&
    ${MPIRUN[*]} -np $np ${pytest[*]@Q} tests/mpi/ranks_collectives.py &&
    ${MPIRUN[*]} -np $np ${pytest[*]@Q} tests/mpi/ranks_process_sets.py -k 'not unnamed'"
done
for np in $NPS; do
  # The rooted collectives' tables (ROOTED) would not fit a lent machine's 15 minutes.
  TAIL=200 stage "tables_np$np" 220 env NPS="$np" ROOTED=0 bash benchmarks/shm_transport_tables.sh "${ITERS:-10}" /tmp/shm_tables
  TAIL=3 stage "latency_np$np" 60 "${MPIRUN[@]}" -np "$np" horo-bench allreduce -b 4K -e 4K -n 300 -w 30 --baseline --no-progress
done

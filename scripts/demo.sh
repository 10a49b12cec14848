#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh: venv, MPI, build) and runs the main job: for now a 2-rank
# all-reduce demo that checks horo against NumPy and prints a horo-vs-mpi4py benchmark table.
#   bash scripts/demo.sh                     # 2 ranks
#   HORO_DEMO_NP=4 bash scripts/demo.sh --max-size 16M
# Extra arguments go to examples/allreduce_demo.py (--max-size, --budget, --no-bench).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

np_ranks="${HORO_DEMO_NP:-2}"
echo "[horo-demo] mpirun -np $np_ranks python examples/allreduce_demo.py $*" >&2
# --oversubscribe: allow more ranks than cores; timeout: a hang fails instead of blocking forever.
exec timeout --signal=TERM --kill-after=30 "${HORO_DEMO_TIMEOUT:-900}" \
  mpirun --oversubscribe -np "$np_ranks" python examples/allreduce_demo.py "$@"

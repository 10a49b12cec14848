#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh: venv, MPI, build) and runs the main job:
#   1. a small real data-parallel training run: examples/pytorch_digits.py on 2 ranks (a CNN on
#      scikit-learn's bundled digits, horo.torch.DistributedOptimizer), printing its accuracy;
#   2. a collective benchmark table: horo-bench allreduce against MPI's own (mpi4py) in the same run.
#   bash scripts/demo.sh
#   HORO_DEMO_NP=4 bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

np_ranks="${HORO_DEMO_NP:-2}"
# timeout: a hang fails instead of blocking forever; --oversubscribe: more ranks than cores is fine.
launch() {
  echo "[horo-demo] horo-run -np $np_ranks $*" >&2
  timeout --signal=TERM --kill-after=30 "${HORO_DEMO_TIMEOUT:-600}" horo-run -np "$np_ranks" --oversubscribe "$@"
}

launch python examples/pytorch_digits.py
launch horo-bench allreduce -b 64K -e 64M -f 4 --baseline

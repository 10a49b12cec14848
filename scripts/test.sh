#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh: venv, MPI, build) and runs the test suite.
#   bash scripts/test.sh                               # the whole suite: python -m pytest tests -q
#   bash scripts/test.sh --fast                        # the development loop (pytest -m fast, < 3 min on 2 cores)
#   bash scripts/test.sh -k allreduce -x               # extra arguments go to pytest
#   bash scripts/test.sh tests/test_errors.py          # given paths replace `tests`
#   HORO_TEST_WORKERS=1 bash scripts/test.sh          # one pytest process (default: one per core, at most 4)
# Exits with pytest's exit code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

args=()
for arg in "$@"; do
  # --fast is the `fast` marker (pyproject.toml): every collective at np=2 on both transports,
  # the Python API, torch and TensorFlow smoke tests, the docs build and the C++ unit tests.
  if [ "$arg" = --fast ]; then args+=(-m fast); else args+=("$arg"); fi
done
# Most of a test's time is spent waiting (launches, a peer's timeout, a host coming back), so
# the suite runs on one pytest-xdist worker per core; a file stays on one worker (its module
# fixtures, a cluster or a batched MPI job, are set up once).
cores="$(nproc)"
# A container's CPU quota (cgroup v2) can be smaller than the cores nproc sees.
if read -r quota period 2>/dev/null < /sys/fs/cgroup/cpu.max && [ "$quota" != max ]; then
  cores=$(( (quota + period - 1) / period < cores ? (quota + period - 1) / period : cores ))
fi
workers="${HORO_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}"
parallel=(-n "$workers" --dist loadfile)
[ "$workers" -gt 1 ] || parallel=(-p no:xdist)
for arg in "${args[@]+"${args[@]}"}"; do
  case "$arg" in -n|-n[0-9]*|-nauto|--numprocesses*|--dist*|no:xdist|-pno:xdist) parallel=() ;; esac
done
targets=(tests)
for arg in "${args[@]+"${args[@]}"}"; do
  if [ -e "${arg%%::*}" ]; then targets=(); break; fi
done
args=("${parallel[@]+"${parallel[@]}"}" "${args[@]+"${args[@]}"}")
echo "[horo-test] python -m pytest ${targets[*]} -q ${args[*]+"${args[*]}"}" >&2
set +e
python -m pytest "${targets[@]}" -q "${args[@]+"${args[@]}"}"
exit $?

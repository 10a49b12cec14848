#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh: venv, MPI, build) and runs the test suite.
#   bash scripts/test.sh                               # the whole suite: python -m pytest tests -q
#   bash scripts/test.sh --fast                        # the development loop (pytest -m fast, < 3 min on 2 cores)
#   bash scripts/test.sh -k allreduce -x               # extra arguments go to pytest
#   bash scripts/test.sh tests/test_errors.py          # given paths replace `tests`
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
targets=(tests)
for arg in "${args[@]+"${args[@]}"}"; do
  if [ -e "${arg%%::*}" ]; then targets=(); break; fi
done
echo "[horo-test] python -m pytest ${targets[*]} -q ${args[*]+"${args[*]}"}" >&2
set +e
python -m pytest "${targets[@]}" -q "${args[@]+"${args[@]}"}"
exit $?

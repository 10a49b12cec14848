#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh: venv, MPI, build) and runs the whole test suite.
#   bash scripts/test.sh                               # python -m pytest tests -q
#   bash scripts/test.sh -k allreduce -x               # extra arguments go to pytest
#   bash scripts/test.sh tests/test_errors.py          # given paths replace `tests`
# Exits with pytest's exit code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

targets=(tests)
for arg in "$@"; do
  if [ -e "${arg%%::*}" ]; then targets=(); break; fi
done
echo "[horo-test] python -m pytest ${targets[*]} -q $*" >&2
set +e
python -m pytest "${targets[@]}" -q "$@"
exit $?

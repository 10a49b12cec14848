"""Outer-suite fixtures.

The files in tests/mpi/ run INSIDE MPI ranks. Their names do not start with test_
(and the folder is in collect_ignore), so a plain `pytest` never collects them in
this non-MPI process; the drivers tests/test_*.py launch them through `ranks`
(tests/launcher.py: mpirun -np N --oversubscribe python -m pytest tests/mpi/<suite>).
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/launcher.py, whatever the import mode

from launcher import run_ranks  # noqa: E402

collect_ignore = ["mpi"]


@pytest.fixture(scope="session")
def ranks():
    """The launcher, as a fixture: ranks(np, 'ranks_allreduce.py', env={...})."""
    return run_ranks

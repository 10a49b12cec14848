"""Fixtures for the rank suites: code in tests/mpi/ runs INSIDE each MPI rank.

Run by hand, e.g. (from the repository root):
    mpirun -np 3 --oversubscribe python -m pytest -q -x -p no:cacheprovider tests/mpi/ranks_allreduce.py
or without mpirun (a world of size 1):
    python -m pytest -q tests/mpi/ranks_allreduce.py
The outer suite (tests/test_*.py) launches them through tests/conftest.py's run_ranks.

Every rank runs the same tests in the same order. A test that fails on one rank
stops that rank (-x); at exit the rank aborts the whole MPI job, so the other
ranks (which may be waiting in a collective for it) cannot hang.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # horo_reference, rank_helpers

# mpi4py initialises MPI (MPI_THREAD_MULTIPLE) before horo is imported: horo must
# respect an MPI that is already initialised, and the tests use mpi4py on a
# duplicate of COMM_WORLD to compare results between ranks.
from mpi4py import MPI

_WORLD = MPI.COMM_WORLD
_exitstatus = {"value": 0}


def pytest_configure(config):
    piddir = os.environ.get("HORO_TEST_PIDDIR")
    if piddir:  # lets the driver kill exactly our processes if the job hangs
        with open(os.path.join(piddir, f"rank{_WORLD.Get_rank()}.pid"), "w") as f:
            f.write(str(os.getpid()))


def pytest_sessionfinish(session, exitstatus):
    _exitstatus["value"] = int(exitstatus)


def pytest_unconfigure(config):
    # Runs after the terminal summary is printed. A failed rank must not wait in
    # MPI_Finalize for peers that are blocked in a collective it will never join.
    if _exitstatus["value"] not in (0, 5) and _WORLD.Get_size() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        _WORLD.Abort(1)


@pytest.fixture(scope="session")
def comm():
    """A private duplicate of COMM_WORLD for the tests' own cross-rank checks."""
    c = _WORLD.Dup()
    yield c
    c.Free()


@pytest.fixture(scope="session")
def hvd():
    """horo, initialised once per rank for the whole session (shut down at the end)."""
    import horo

    horo.init()
    yield horo
    if horo.is_initialized():
        horo.shutdown()


@pytest.fixture(scope="session")
def size(comm):
    return comm.Get_size()


@pytest.fixture(scope="session")
def rank(comm):
    return comm.Get_rank()


@pytest.fixture(scope="session")
def store(comm):
    """Collects results; rank 0 saves them to $HORO_TEST_RESULTS_DIR at the end."""
    from rank_helpers import ResultStore

    s = ResultStore()
    yield s
    directory = os.environ.get("HORO_TEST_RESULTS_DIR")
    if directory and comm.Get_rank() == 0:
        s.save(directory)

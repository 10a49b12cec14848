"""Outer-suite fixtures, and the fast tier.

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

# The fast tier (`bash scripts/test.sh --fast`, i.e. `-m fast`), the development loop: every
# collective at np=2 on shared memory and on MPI, the Python API in one process, torch and
# TensorFlow at np=2, the timeline; test_docs.py and test_cpp_units.py mark themselves.
# Listed here rather than in each file, since most are single cases of a parametrized matrix;
# a whole file is named by its path. An entry that no longer matches a test of a collected
# file fails the run (below), so a renamed case cannot drop out of the tier unnoticed.
FAST = [
    "tests/test_single_process.py",
    "tests/test_lazy_import.py",
    "tests/test_allreduce.py::test_allreduce_matches_numpy_and_is_identical_on_every_rank[2-default]",
    "tests/test_allreduce.py::test_allreduce_matches_numpy_and_is_identical_on_every_rank[2-mpi]",
    "tests/test_collectives.py::test_collectives_match_numpy_on_every_rank[2-default]",
    "tests/test_collectives.py::test_collectives_match_numpy_on_every_rank[2-mpi]",
    "tests/test_collectives.py::test_collective_errors_raise_on_every_rank_and_the_engine_recovers[2]",
    "tests/test_errors.py::test_errors_raise_on_every_rank_and_the_engine_recovers[2]",
    "tests/test_process_sets.py::test_process_sets_on_every_rank[np2-default]",
    "tests/test_join.py::test_join_on_every_rank[np2-default]",
    "tests/test_horovod_api.py::test_every_horovod_name_is_present_with_its_signature_or_says_not_implemented[horo]",
    "tests/test_horovod_api.py::test_every_horovod_name_is_present_with_its_signature_or_says_not_implemented[horo.torch]",
    "tests/test_horovod_api.py::test_names_not_implemented_raise_and_say_what_to_use[horo]",
    "tests/test_horovod_api.py::test_names_not_implemented_raise_and_say_what_to_use[horo.torch]",
    "tests/test_torch.py::test_torch_on_every_rank[np2-collectives]",
    "tests/test_torch.py::test_torch_on_every_rank[np2-optimizer]",
    "tests/test_tensorflow.py::test_tensorflow_plugin_on_every_rank[np2]",
    "tests/test_timeline.py::test_timeline_phases_in_order_and_runtime_start_stop",
]


def _in_fast_tier(nodeid):
    return any(nodeid == entry or (entry.endswith(".py") and nodeid.startswith(entry + "::")) for entry in FAST)


def pytest_collection_modifyitems(config, items):
    # Runs before `-m`/`-k` deselect anything (conftest hooks run ahead of pytest's own), so
    # `items` is every test of the collected files. Node ids are relative to the rootdir.
    files, ids = set(), set()
    for item in items:
        files.add(item.nodeid.split("::", 1)[0])
        ids.add(item.nodeid)
        if _in_fast_tier(item.nodeid):
            item.add_marker(pytest.mark.fast)
    # Checked only where whole files were collected (a single node id on the command line
    # collects part of a file).
    if any("::" in str(arg) for arg in config.args):
        return
    stale = [e for e in FAST if "::" in e and e.split("::", 1)[0] in files and e not in ids]
    if stale:
        raise pytest.UsageError("tests/conftest.py FAST lists tests that do not exist: " + ", ".join(stale))


@pytest.fixture(scope="session")
def ranks():
    """The launcher, as a fixture: ranks(np, 'ranks_allreduce.py', env={...})."""
    return run_ranks

"""Process sets across real MPI ranks (np = 1..4): every collective on sets of 1, 2 and 3
ranks against NumPy, sets and the global set in flight at once with the same tensor
names, sets given at init, removal (then ValueError; pending collectives fail), calls
from outside a set (ValueError), roots outside a set, mismatched or invalid rank lists
(HoroError on every rank).

Each launch runs `mpirun -np N ... pytest tests/mpi/ranks_process_sets.py` under a
wall-clock timeout: a hang fails the test with the ranks' output.
"""
import pytest
from launcher import batched_launcher

LAUNCH_TIMEOUT = 120
RING = {"HORO_ALLREDUCE_ALGO": "ring", "HORO_ALLGATHER_ALGO": "ring", "HORO_REDUCESCATTER_ALGO": "ring"}
CASES = [
    (1, "default", {}),
    (2, "default", {}),
    (3, "default", {}),
    (4, "default", {}),
    # each set's ring over its own communicator, many pipeline chunks, no fusion
    (3, "ring_fusion_off", dict(RING, HORO_FUSION_THRESHOLD="0", HORO_RING_CHUNK_BYTES="4096")),
    # every cycle negotiates over MPI's control plane (default: the sets' shared-memory segments)
    (4, "ring_cache_off_mpi_transport", dict(RING, HORO_CACHE_CAPACITY="0", HORO_TRANSPORT="mpi")),
]


@pytest.fixture(scope="module")
def launch(request):
    """The cases selected at one np run one after another in one MPI job (launcher.run_variants)."""
    cases = {variant: ("ranks_process_sets.py", env) for _, variant, env in CASES}

    def launches_of(item):
        if item.originalname != "test_process_sets_on_every_rank":
            return []
        return [(item.callspec.params["np_"], item.callspec.params["variant"])]

    return batched_launcher(request, cases, launches_of, LAUNCH_TIMEOUT, select="not unnamed")


# The first case at an np runs every selected case at that np: at most 2.
@pytest.mark.timeout(2 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,variant,env", CASES, ids=[f"np{n}-{v}" for n, v, _ in CASES])
def test_process_sets_on_every_rank(launch, np_, variant, env):
    launch(np_, variant)


# A stall on mismatched auto-generated names is turned into an error after 5 s instead of a hang.
STALL_AS_ERROR = {"HORO_STALL_CHECK_TIME_SECONDS": "2", "HORO_STALL_SHUTDOWN_TIME_SECONDS": "5"}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("np_", [3, 4])
def test_unnamed_collectives_on_a_set_keep_the_global_names_in_step(ranks, np_):
    """Unnamed collectives on a set (only its members call them), then unnamed ones on the
    global set and on overlapping sets: the generated names must match across ranks."""
    ranks(np_, "ranks_process_sets.py", env=STALL_AS_ERROR, timeout=60, select="unnamed")

"""join() across real MPI ranks (np = 1..4): ranks running out of data at different
steps (rank k after 3 + k steps, and the reverse) with Sum/Average/Min/Max/Product on
cached (fixed) and fresh tensor names, against NumPy with the op's identity standing
in for joined ranks; the returned last rank; other collectives failing while a rank
has joined; normal work afterwards.

Each launch runs `mpirun -np N ... pytest tests/mpi/ranks_join.py` under a wall-clock
timeout: a hang (e.g. a joined rank that stops standing in) fails the test.
"""
import pytest
from launcher import batched_launcher

LAUNCH_TIMEOUT = 90
CASES = [
    (1, "default", {}),
    (2, "default", {}),
    (3, "default", {}),
    (4, "default", {}),
    # every tensor negotiated (no response cache), and unfused ring all-reduces
    (3, "cache_off", {"HORO_CACHE_CAPACITY": "0"}),
    (4, "ring_fusion_off", {"HORO_ALLREDUCE_ALGO": "ring", "HORO_FUSION_THRESHOLD": "0", "HORO_RING_CHUNK_BYTES": "4096"}),
    # a tiny cache: the fixed names are evicted and renegotiated while ranks have joined
    (2, "small_cache", {"HORO_CACHE_CAPACITY": "4"}),
]


# The first case at an np runs every selected case at that np: at most 2.
@pytest.mark.timeout(2 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,variant,env", CASES, ids=[f"np{n}-{v}" for n, v, _ in CASES])
def test_join_on_every_rank(launch, np_, variant, env):
    launch(np_, variant)


@pytest.fixture(scope="module")
def launch(request):
    """The cases selected at one np run one after another in one MPI job (launcher.run_variants)."""
    cases = {variant: ("ranks_join.py", env) for _, variant, env in CASES}
    params = lambda item: item.callspec.params  # noqa: E731
    return batched_launcher(request, cases, lambda item: [(params(item)["np_"], params(item)["variant"])],
                            LAUNCH_TIMEOUT)

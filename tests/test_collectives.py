"""broadcast, allgather, alltoall, reducescatter, gather, scatter, reduce, barrier and
the object collectives across real MPI ranks (np = 1..4), against NumPy; the ring and
MPI algorithms, the shared-memory and MPI transports and fusion off giving the same results; bad input raising on every rank.

Each launch runs `mpirun -np N ... pytest tests/mpi/ranks_collectives.py` (or
ranks_collectives_errors.py) under a wall-clock timeout: a hang fails the test.
"""

import pytest
from launcher import batched_launcher, differences_from, load_saved_results, remembering_launcher, selected_launches

VARIANTS = {
    "default": {},  # auto: shared memory on one host (HORO_TRANSPORT=auto)
    "ring": {"HORO_ALLGATHER_ALGO": "ring", "HORO_REDUCESCATTER_ALGO": "ring"},
    # many pipeline chunks per ring step even for mid-sized tensors
    "ring_small_chunks": {
        "HORO_ALLGATHER_ALGO": "ring",
        "HORO_REDUCESCATTER_ALGO": "ring",
        "HORO_RING_CHUNK_BYTES": "4096",
    },
    # MPI's own collectives over the MPI transport ("default" is shared memory on one host)
    "mpi": {"HORO_ALLGATHER_ALGO": "mpi", "HORO_REDUCESCATTER_ALGO": "mpi", "HORO_TRANSPORT": "mpi"},
    "fusion_off": {"HORO_FUSION_THRESHOLD": "0"},
}
MATRIX = [(1, "default"), (2, "default"), (3, "default"), (4, "default")] + [
    (2, "ring"),
    (2, "mpi"),  # the MPI transport at np=2: the fast tier's (tests/conftest.py FAST)
    (3, "ring"),
    (3, "mpi"),
    (3, "fusion_off"),
    (4, "ring_small_chunks"),
    (4, "mpi"),
]
COMPARED = {3: ["ring", "mpi", "fusion_off"], 4: ["ring_small_chunks", "mpi"]}
LAUNCH_TIMEOUT = 150


def launches_of(item):
    """The (np, variant) launches a test of this module needs."""
    params = item.callspec.params
    if item.originalname == "test_collectives_match_numpy_on_every_rank":
        return [(params["np_"], params["variant"])]
    if item.originalname == "test_ring_mpi_and_fusion_off_give_the_same_results":
        return [(params["np_"], v) for v in ["default"] + COMPARED[params["np_"]]]
    return []


@pytest.fixture(scope="module")
def collectives_launch(ranks, tmp_path_factory, request):
    """Runs the rank suite once per (np, variant) and remembers where rank 0 put its results.
    The variants a session selects at one np run one after another in one MPI job."""
    return remembering_launcher(ranks, tmp_path_factory, "ranks_collectives.py", VARIANTS, LAUNCH_TIMEOUT,
                                together=selected_launches(request, launches_of))


# The first test at an np runs every variant selected at that np in its one job.
@pytest.mark.timeout(len(VARIANTS) * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,variant", MATRIX, ids=lambda p: str(p))
def test_collectives_match_numpy_on_every_rank(collectives_launch, np_, variant):
    collectives_launch(np_, variant)


@pytest.mark.timeout(4 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", sorted(COMPARED))
def test_ring_mpi_and_fusion_off_give_the_same_results(collectives_launch, np_):
    """Bit for bit wherever the spec pins results down (all data movement, integer
    reductions, Min/Max, exactly representable sums); elsewhere within the rounding tolerance."""
    baseline = load_saved_results(collectives_launch(np_, "default"))
    assert len(baseline) > 1000
    assert any(key.startswith("reducescatter.large.") for key in baseline)
    problems = []
    for variant in COMPARED[np_]:
        problems += differences_from(baseline, load_saved_results(collectives_launch(np_, variant)), variant)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:40])


ERROR_CASES = {
    "default": ("ranks_collectives_errors.py", {}),
    "fusion_off_ring": ("ranks_collectives_errors.py",
                        {"HORO_FUSION_THRESHOLD": "0", "HORO_ALLGATHER_ALGO": "ring", "HORO_REDUCESCATTER_ALGO": "ring"}),
}


def error_launches_of(item):
    if item.originalname == "test_collective_errors_raise_on_every_rank_and_the_engine_recovers":
        return [(item.callspec.params["np_"], "default")]
    if item.originalname == "test_collective_errors_with_fusion_off_and_ring_algorithms":
        return [(3, "fusion_off_ring")]
    return []


@pytest.fixture(scope="module")
def errors_launch(request):
    """The error cases selected at one np run one after another in one MPI job (launcher.run_variants)."""
    return batched_launcher(request, ERROR_CASES, error_launches_of, LAUNCH_TIMEOUT)


# At np=3 the first test runs both cases.
@pytest.mark.timeout(2 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", [1, 2, 3, 4])
def test_collective_errors_raise_on_every_rank_and_the_engine_recovers(errors_launch, np_):
    errors_launch(np_, "default")


@pytest.mark.timeout(2 * LAUNCH_TIMEOUT + 30)
def test_collective_errors_with_fusion_off_and_ring_algorithms(errors_launch):
    errors_launch(3, "fusion_off_ring")

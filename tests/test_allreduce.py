"""allreduce across real MPI ranks (np = 1..4): every op x dtype x in-place/out-of-place
against NumPy, prescale/postscale, grouped allreduce, 0-sized and odd-sized tensors;
and fusion on/off, ring vs mpi algorithm, shared-memory vs MPI transport all giving the same results.

Each parameter launches `mpirun -np N ... pytest tests/mpi/ranks_allreduce.py`.
"""

import pytest
from launcher import differences_from, load_saved_results, remembering_launcher, selected_launches

VARIANTS = {
    "default": {},
    "fusion_off": {"HORO_FUSION_THRESHOLD": "0"},
    "ring": {"HORO_ALLREDUCE_ALGO": "ring"},
    # MPI's own allreduce over the MPI transport ("default" is shared memory on one host)
    "mpi": {"HORO_ALLREDUCE_ALGO": "mpi", "HORO_TRANSPORT": "mpi"},
}
LAUNCH_TIMEOUT = 240


COMPARED = ("fusion_off", "ring", "mpi")


def launches_of(item):
    """The (np, variant) launches a test of this module needs."""
    params = item.callspec.params
    if item.originalname == "test_allreduce_matches_numpy_and_is_identical_on_every_rank":
        return [(params["np_"], params["variant"])]
    if item.originalname == "test_fusion_off_and_ring_and_mpi_algorithms_give_the_same_results":
        return [(params["np_"], v) for v in ("default",) + COMPARED]
    return []


@pytest.fixture(scope="module")
def matrix_launch(ranks, tmp_path_factory, request):
    """Runs the rank suite once per (np, variant) and remembers where rank 0 put its results.
    The variants a session selects at one np run one after another in one MPI job."""
    return remembering_launcher(ranks, tmp_path_factory, "ranks_allreduce.py", VARIANTS, LAUNCH_TIMEOUT,
                                together=selected_launches(request, launches_of))


# The first test at an np runs every variant selected at that np in its one job.
@pytest.mark.timeout(len(VARIANTS) * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize(
    "np_,variant",
    [(1, "default"), (2, "default"), (3, "default"), (4, "default")]
    + [(n, v) for n in (2, 3, 4) for v in ("fusion_off", "ring", "mpi")],
    ids=lambda p: str(p),
)
def test_allreduce_matches_numpy_and_is_identical_on_every_rank(matrix_launch, np_, variant):
    matrix_launch(np_, variant)


@pytest.mark.timeout(4 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_fusion_off_and_ring_and_mpi_algorithms_give_the_same_results(matrix_launch, np_):
    """Bit for bit wherever the spec pins results down (integers, Min/Max, exactly
    representable sums, np <= 2); elsewhere within the rounding tolerance."""
    baseline = load_saved_results(matrix_launch(np_, "default"))
    assert len(baseline) > 500
    problems = []
    for variant in COMPARED:
        problems += differences_from(baseline, load_saved_results(matrix_launch(np_, variant)), variant)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:40])

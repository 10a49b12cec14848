"""allreduce across real MPI ranks (np = 1..4): every op x dtype x in-place/out-of-place
against NumPy, prescale/postscale, grouped allreduce, 0-sized and odd-sized tensors;
and fusion on/off, ring vs mpi algorithm, shared-memory vs MPI transport all giving the same results.

Each parameter launches `mpirun -np N ... pytest tests/mpi/ranks_allreduce.py`.
"""

import pytest
from launcher import differences_from, load_saved_results, remembering_launcher

VARIANTS = {
    "default": {},
    "fusion_off": {"HORO_FUSION_THRESHOLD": "0"},
    "ring": {"HORO_ALLREDUCE_ALGO": "ring"},
    # MPI's own allreduce over the MPI transport ("default" is shared memory on one host)
    "mpi": {"HORO_ALLREDUCE_ALGO": "mpi", "HORO_TRANSPORT": "mpi"},
}
LAUNCH_TIMEOUT = 240


@pytest.fixture(scope="module")
def matrix_launch(ranks, tmp_path_factory):
    """Runs the rank suite once per (np, variant) and remembers where rank 0 put its results."""
    return remembering_launcher(ranks, tmp_path_factory, "ranks_allreduce.py", VARIANTS, LAUNCH_TIMEOUT)


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
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
    for variant in ("fusion_off", "ring", "mpi"):
        problems += differences_from(baseline, load_saved_results(matrix_launch(np_, variant)), variant)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:40])

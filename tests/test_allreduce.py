"""allreduce across real MPI ranks (np = 1..4): every op x dtype x in-place/out-of-place
against NumPy, prescale/postscale, grouped allreduce, 0-sized and odd-sized tensors;
and fusion on/off, ring vs mpi algorithm all giving the same results.

Each parameter launches `mpirun -np N ... pytest tests/mpi/ranks_allreduce.py`.
"""
import json

import numpy as np
import pytest
from launcher import remembering_launcher

VARIANTS = {
    "default": {},
    "fusion_off": {"HORO_FUSION_THRESHOLD": "0"},
    "ring": {"HORO_ALLREDUCE_ALGO": "ring"},
    "mpi": {"HORO_ALLREDUCE_ALGO": "mpi"},
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


def _load(directory):
    import ml_dtypes

    with open(directory / "results.json") as f:
        meta = json.load(f)
    arrays = np.load(directory / "results.npz")
    out = {}
    for key, m in meta.items():
        dt = np.dtype(ml_dtypes.bfloat16) if m["dtype"] == "bfloat16" else np.dtype(m["dtype"])
        res = np.frombuffer(arrays[f"r{m['index']}"].tobytes(), dtype=dt).reshape(m["shape"])
        tol = arrays[f"t{m['index']}"] if not m["exact"] else None
        out[key] = (res, m["exact"], tol)
    return out


@pytest.mark.timeout(4 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_fusion_off_and_ring_and_mpi_algorithms_give_the_same_results(matrix_launch, np_):
    """Bit for bit wherever the spec pins results down (integers, Min/Max, exactly
    representable sums, np <= 2); elsewhere within the rounding tolerance."""
    baseline = _load(matrix_launch(np_, "default"))
    assert len(baseline) > 500
    problems = []
    for variant in ("fusion_off", "ring", "mpi"):
        other = _load(matrix_launch(np_, variant))
        assert set(other) == set(baseline), f"{variant}: different set of cases"
        for key, (a, exact, tol) in baseline.items():
            b = other[key][0]
            if a.dtype != b.dtype or a.shape != b.shape:
                problems.append(f"{variant} {key}: {b.dtype}{b.shape} vs default {a.dtype}{a.shape}")
            elif exact:
                if a.tobytes() != b.tobytes():
                    problems.append(f"{variant} {key}: differs from default (must be bit-identical)")
            else:
                dev = np.abs(a.astype(np.float64) - b.astype(np.float64)).reshape(-1)
                if np.any(dev > 2 * tol):
                    i = int(np.argmax(dev - 2 * tol))
                    problems.append(f"{variant} {key}: [{i}] {b.reshape(-1)[i]} vs default {a.reshape(-1)[i]}")
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:40])

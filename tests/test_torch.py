"""horo.torch across real MPI ranks (np = 1, 2, 4), with real torch:

- ranks_torch_collectives.py: every collective and entry point (sync, in place, async,
  grouped) against the NumPy reference over every dtype; process sets; gradients
  through every differentiable collective against an analytic reference; bad input
  (unsupported dtype, non-tensor, non-CPU device, non-contiguous in place, shapes or
  dtypes that differ between ranks) raising a clear error naming the tensor on every rank.
- ranks_torch_optimizer.py: DistributedOptimizer training equals one process on the
  global batch (SGD, Adam, predivide, Sum, gradient accumulation, fp16 compression,
  skip_synchronize, unused and sparse parameters); broadcast_parameters and
  broadcast_optimizer_state (lazily created Adam state, lr changed on root).

Each launch runs `mpirun -np N ... pytest tests/mpi/<suite>` under a wall-clock
timeout: a hang (e.g. a rank waiting for a gradient another rank never sends) fails.
"""
import pytest
from launcher import batched_launcher

LAUNCH_TIMEOUT = 150
CASES = [
    (1, "ranks_torch_collectives.py"),
    (2, "ranks_torch_collectives.py"),
    (4, "ranks_torch_collectives.py"),
    (1, "ranks_torch_optimizer.py"),
    (2, "ranks_torch_optimizer.py"),
    (4, "ranks_torch_optimizer.py"),
]


IDS = [f"np{n}-{s[len('ranks_torch_'):-3]}" for n, s in CASES]


@pytest.fixture(scope="module")
def launch(request):
    """The suites selected at one np run one after another in one MPI job (launcher.run_variants),
    which imports torch once per rank instead of once per suite."""
    cases = {suite: (suite, {}) for _, suite in CASES}
    params = lambda item: item.callspec.params  # noqa: E731
    return batched_launcher(request, cases, lambda item: [(params(item)["np_"], params(item)["suite"])],
                            LAUNCH_TIMEOUT)


# The first case at an np runs both suites at that np.
@pytest.mark.timeout(2 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,suite", CASES, ids=IDS)
def test_torch_on_every_rank(launch, np_, suite):
    launch(np_, suite)

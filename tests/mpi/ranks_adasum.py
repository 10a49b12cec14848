"""Adasum on every rank: the core's allreduce (NumPy, torch, TensorFlow), grouped calls (each tensor
keeps its own coefficients), torch's DistributedOptimizer(op=Adasum) and the refusals (a rank count
that is not a power of two, integer dtypes, collectives other than allreduce), against the NumPy
reference of the pairwise combination in adasum_reference.py."""
import numpy as np
import pytest

from adasum_reference import adasum, combine, tolerance
from rank_helpers import gather_and_compare

FLOATS = [np.float16, np.float32, np.float64]
# 1 and 3 elements: halves of 0 and 1 element on the way down the tree.
SHAPES = [(1,), (3,), (17, 5), (4099,), (3, 1000)]


def power_of_two(n):
    return n & (n - 1) == 0


def inputs(dtype, shape, size, seed):
    # Correlated vectors (a shared part plus noise), where Adasum differs from a sum or an average.
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(shape)
    return [(common + 0.5 * rng.standard_normal(shape)).astype(dtype) for _ in range(size)]


def assert_close(result, expected, dtype, what):
    tol = tolerance(dtype)
    np.testing.assert_allclose(result.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol,
                               err_msg=what)


@pytest.fixture(autouse=True)
def _needs_power_of_two(request, size):
    if "refused" not in request.node.name and not power_of_two(size):
        pytest.skip("Adasum needs a power-of-two number of ranks")


def test_reference_pairs_ranks_as_horovods_tree():
    a, b, c, d = (np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([1.0, 0.0]), np.array([1.0, 0.0]))
    # Orthogonal vectors add; equal ones average.
    np.testing.assert_array_equal(combine(a, b), [1.0, 1.0])
    np.testing.assert_array_equal(combine(c, d), [1.0, 0.0])
    np.testing.assert_allclose(adasum([a, b, c, d]), combine(np.array([1.0, 1.0]), np.array([1.0, 0.0])))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_numpy_allreduce_matches_reference(hvd, comm, size, rank, dtype, shape):
    xs = inputs(dtype, shape, size, seed=len(shape) * 1000 + shape[0])
    out = hvd.allreduce(xs[rank], op=hvd.Adasum, name=f"adasum.{np.dtype(dtype).name}.{shape}")
    assert out.dtype == np.dtype(dtype) and out.shape == shape
    assert_close(out, adasum(xs), dtype, f"{np.dtype(dtype).name} {shape}")
    gather_and_compare(comm, out.tobytes(), "Adasum results on every rank")


def test_in_place_and_scaled(hvd, size, rank):
    xs = inputs(np.float64, (257,), size, seed=7)
    mine = xs[rank].copy()
    hvd.allreduce_(mine, op=hvd.Adasum, name="adasum.in_place", prescale_factor=0.5, postscale_factor=3.0)
    assert_close(mine, 3.0 * adasum([0.5 * x for x in xs]), np.float64, "in place, pre/postscaled")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_grouped_allreduce_keeps_each_tensors_coefficients(hvd, size, rank, dtype):
    # Fused in one buffer, each tensor must still be combined with its own dot products.
    shapes = [(5,), (300,), (2, 2), (1,)]
    per_tensor = [inputs(dtype, s, size, seed=100 + i) for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce([xs[rank] for xs in per_tensor], op=hvd.Adasum, name="adasum.grouped")
    for i, (out, xs) in enumerate(zip(outs, per_tensor)):
        assert_close(out, adasum(xs), dtype, f"tensor {i} of the group")


def test_zero_vectors_keep_coefficient_one(hvd, size, rank):
    xs = [np.zeros(8, np.float32) for _ in range(size)]
    xs[0] = np.arange(8, dtype=np.float32)
    out = hvd.allreduce(xs[rank], op=hvd.Adasum, name="adasum.zeros")
    np.testing.assert_array_equal(out, adasum(xs))


def test_torch_allreduce_matches_reference(hvd, size, rank):
    torch = pytest.importorskip("torch")
    import horo.torch as ht

    for dtype in FLOATS:
        xs = inputs(dtype, (33, 3), size, seed=11)
        out = ht.allreduce(torch.from_numpy(xs[rank].copy()), op=ht.Adasum, name=f"adasum.torch.{np.dtype(dtype)}")
        assert_close(out.numpy(), adasum(xs), dtype, f"torch {np.dtype(dtype).name}")


def test_torch_distributed_optimizer_combines_each_ranks_step(hvd, size, rank):
    """SGD(lr) under Adasum: parameter = before - lr * Adasum(each rank's gradient), per parameter."""
    torch = pytest.importorskip("torch")
    import horo.torch as ht

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    before = [p.detach().clone().numpy() for p in model.parameters()]
    opt = ht.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(), op=ht.Adasum)
    assert isinstance(opt, torch.optim.SGD)
    data = [torch.from_numpy(x) for x in inputs(np.float32, (6, 4), size, seed=21)]
    grads = []
    for r in range(size):  # every rank's gradient, computed here for the reference
        model.zero_grad()
        model(data[r]).pow(2).sum().backward()
        grads.append([p.grad.detach().clone().numpy() for p in model.parameters()])
    opt.zero_grad()
    model(data[rank]).pow(2).sum().backward()
    opt.step()
    for k, p in enumerate(model.parameters()):
        deltas = [(before[k] - np.float32(0.1) * g[k]) - before[k] for g in grads]
        assert_close(p.detach().numpy(), before[k] + adasum(deltas), np.float32, f"parameter {k}")


def test_tensorflow_allreduce_matches_reference(hvd, size, rank):
    tf = pytest.importorskip("tensorflow")
    import horo.tensorflow as htf

    for dtype in FLOATS:
        xs = inputs(dtype, (40,), size, seed=31)
        out = htf.allreduce(tf.constant(xs[rank]), op=htf.Adasum, name=f"adasum.tf.{np.dtype(dtype).name}")
        assert_close(out.numpy(), adasum(xs), dtype, f"tf {np.dtype(dtype).name}")

        @tf.function
        def graph(x):
            return htf.allreduce(x, op=htf.Adasum, name=f"adasum.tf.graph.{np.dtype(dtype).name}")

        assert_close(graph(tf.constant(xs[rank])).numpy(), adasum(xs), dtype, f"tf.function {np.dtype(dtype).name}")


def test_refused_on_every_rank_where_unsupported(hvd, size):
    from horo import HoroError

    if not power_of_two(size):
        with pytest.raises(HoroError, match="power-of-two number of ranks.*has 3"):
            hvd.allreduce(np.ones(4, np.float32), op=hvd.Adasum, name="adasum.refused.size")
    with pytest.raises(HoroError, match="float16, float32 and float64 tensors only, not int32"):
        hvd.allreduce(np.ones(4, np.int32), op=hvd.Adasum, name="adasum.refused.int")
    with pytest.raises(HoroError, match="Adasum is an allreduce op"):
        hvd.reducescatter(np.ones(4, np.float32), op=hvd.Adasum, name="adasum.refused.reducescatter")
    # The ranks are still in step.
    np.testing.assert_array_equal(hvd.allreduce(np.ones(3), op=hvd.Sum, name="adasum.after"), np.full(3, size))

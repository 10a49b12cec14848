"""horo.tensorflow's native AsyncOpKernels inside each MPI rank (np = 2, 3).

What a blocking op could not do: independent collectives that each rank builds in a
different order complete with ONE inter-op thread; a tf.function training step that
allreduces 50 gradients one by one, in rank-dependent order, matches the NumPy
reference; failures arrive as the tf.errors classes Horovod programs catch
(FailedPreconditionError across ranks, InvalidArgumentError for bad splits), eagerly
and in graphs; a model using the ops is saved with tf.saved_model (the fresh-process
load is tests/test_tensorflow_native.py's job).

HORO_TEST_INTER_OP_THREADS sets TensorFlow's inter-op pool before anything runs.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from rank_helpers import expect_raise_on_every_rank  # noqa: E402

INTER_OP_THREADS = int(os.environ.get("HORO_TEST_INTER_OP_THREADS", "1"))
tf.config.threading.set_inter_op_parallelism_threads(INTER_OP_THREADS)
tf.config.threading.set_intra_op_parallelism_threads(1)

MODES = ["eager", "function"]


@pytest.fixture(scope="module")
def hvd():
    import horo.tensorflow as hvd
    from horo.tensorflow import core_ops

    assert core_ops.uses_native_ops, "the native op library did not load: " + __import__(
        "horo.tensorflow.native", fromlist=["describe"]).describe()
    hvd.init()
    yield hvd


def in_mode(mode, fn):
    return fn if mode == "eager" else tf.function(fn)


def test_independent_collectives_in_rank_dependent_order_complete(hvd):
    """The issue's graph: rank r builds the collectives rotated by r; with one inter-op
    thread a blocking op would hold it in the first one while other ranks wait elsewhere."""
    size, rank = hvd.size(), hvd.rank()
    count = 4
    order = [(i + rank) % count for i in range(count)]

    @tf.function
    def step(values):
        out = [None] * count
        for i in order:
            out[i] = hvd.allreduce(values[i], op=hvd.Sum, name=f"independent.{i}")
        return out

    values = [tf.fill([3 + i], float(rank + 1) * (i + 1)) for i in range(count)]
    total = sum(range(1, size + 1))
    for _ in range(3):  # repeated executions reuse the response cache
        result = step(values)
        for i in range(count):
            np.testing.assert_array_equal(result[i].numpy(), np.full(3 + i, total * (i + 1), np.float32))


def test_training_loop_reducing_fifty_gradients_one_by_one(hvd):
    """A custom training step that allreduces each of 50 gradients with its own op, in an
    order that differs by rank, against the NumPy gradient of the summed loss."""
    size, rank = hvd.size(), hvd.rank()
    n = 50
    variables = [tf.Variable(np.full([2 + i % 3], 0.5 * (i + 1), np.float32)) for i in range(n)]
    order = list(range(n)) if rank % 2 == 0 else list(reversed(range(n)))

    @tf.function
    def step(scale):
        with tf.GradientTape() as tape:
            loss = tf.add_n([scale * tf.reduce_sum(v * v) for v in variables])
        grads = tape.gradient(loss, variables)
        reduced = [None] * n
        for i in order:
            reduced[i] = hvd.allreduce(grads[i], op=hvd.Average, name=f"loop.grad.{i}")
        return reduced

    scale = float(rank + 1)
    for _ in range(2):
        reduced = step(tf.constant(scale))
    mean_scale = sum(range(1, size + 1)) / size
    for i, (v, g) in enumerate(zip(variables, reduced)):
        np.testing.assert_allclose(g.numpy(), 2 * mean_scale * v.numpy(), rtol=1e-6, err_msg=f"gradient {i}")


@pytest.mark.parametrize("mode", MODES)
def test_mismatch_across_ranks_is_failed_precondition_on_every_rank(hvd, comm, mode):
    rank = hvd.rank()
    name = f"native.bad.shape.{mode}"
    fn = in_mode(mode, lambda x: hvd.allreduce(x, name=name))
    expect_raise_on_every_rank(comm, tf.errors.FailedPreconditionError, lambda: fn(tf.zeros([rank + 1, 2])),
                               must_contain=[name, "shape"], what=f"{mode} allreduce, shapes differ across ranks")
    after = in_mode(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, name=name + ".after"))(tf.ones([3]))
    np.testing.assert_array_equal(after.numpy(), np.full(3, hvd.size(), np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_bad_alltoall_splits_are_invalid_argument_on_every_rank(hvd, comm, mode):
    size = hvd.size()
    name = f"native.bad.splits.{mode}"
    bad = [1] * (size - 1) + [5]  # sums to more rows than the tensor has
    fn = in_mode(mode, lambda x, s: hvd.alltoall(x, splits=s, name=name))
    expect_raise_on_every_rank(comm, tf.errors.InvalidArgumentError,
                               lambda: fn(tf.zeros([size, 2]), tf.constant(bad, tf.int32)),
                               must_contain=[name, "splits"], what=f"{mode} alltoall with bad splits")


def test_allgather_and_alltoall_outputs_sized_at_completion(hvd):
    """Outputs whose first dimension only the agreed response knows, inside a graph."""
    size, rank = hvd.size(), hvd.rank()

    @tf.function
    def step(x):
        gathered = hvd.allgather(x, name="native.sized.gather")
        splits = tf.range(size, dtype=tf.int32) % 2 + 1
        exchanged, received = hvd.alltoall(tf.tile(x[:1], [tf.reduce_sum(splits), 1]), splits=splits,
                                           name="native.sized.alltoall")
        return gathered, exchanged, received

    gathered, exchanged, received = step(tf.fill([rank + 1, 2], float(rank)))
    expected = np.concatenate([np.full([r + 1, 2], float(r), np.float32) for r in range(size)])
    np.testing.assert_array_equal(gathered.numpy(), expected)
    mine = rank % 2 + 1
    np.testing.assert_array_equal(received.numpy(), np.full(size, mine, np.int32))
    np.testing.assert_array_equal(exchanged.numpy(), np.concatenate(
        [np.full([mine, 2], float(r), np.float32) for r in range(size)]))


def test_many_cached_exchanges_in_one_graph_each_get_their_own_rows(hvd):
    """Allgathers and alltoalls too large to preload, of different dtypes (so none fuse) and
    equal sizes, several per cycle once cached, each result checked inside the graph so that
    TensorFlow frees it at once. The first of a cycle may have its output located by the
    control step; freed while the cycle goes on, the next one's output could lie at the same
    address. (Once, that one took the first's located peers: rows landed in the wrong
    tensors, then a control message arrived corrupt.)"""
    size, rank = hvd.size(), hvd.rank()
    dtypes = [tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32, tf.int64, tf.float16, tf.float32, tf.float64]
    row_bytes, rows = 64 * size, 8192 // (64 * size)  # an even alltoall split needs rows divisible by size

    def expected(k, dtype, per):
        return np.concatenate([np.full([per, row_bytes // dtype.size], r * 10 + k) for r in range(size)])

    @tf.function
    def step(base):  # an argument, not a constant: grappler would fold the collectives of constants
        right = []
        for k, dtype in enumerate(dtypes):
            mine = tf.fill([rows, row_bytes // dtype.size], tf.cast(base + k, dtype))
            gathered = hvd.allgather(mine, name=f"native.many.allgather.{k}")
            exchanged = hvd.alltoall(mine, name=f"native.many.alltoall.{k}")
            right.append(tf.reduce_all(tf.equal(gathered, tf.constant(expected(k, dtype, rows), dtype))))
            right.append(tf.reduce_all(tf.equal(exchanged, tf.constant(expected(k, dtype, rows // size), dtype))))
        return tf.stack(right)

    for repeat in range(60):
        right = step(tf.constant(rank * 10)).numpy()
        wrong = [f"{'alltoall' if i % 2 else 'allgather'} of {dtypes[i // 2].name}" for i in np.flatnonzero(~right)]
        assert not wrong, f"call {repeat}: rows of other tensors in the output of {', '.join(wrong)}"


def test_saved_model_with_the_ops_is_written(hvd, comm):
    """Rank 0 saves a module whose function allreduces; the driver loads it in a fresh job."""
    path = os.environ.get("HORO_TEST_SAVED_MODEL")
    if not path:
        pytest.skip("HORO_TEST_SAVED_MODEL not set")

    class Averager(tf.Module):
        def __init__(self):
            self.weight = tf.Variable([1.0, 2.0, 3.0])

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            summed = hvd.allreduce(x * self.weight, op=hvd.Sum, name="saved.allreduce")
            return summed, hvd.size_op(), hvd.rank_op()

    module = Averager()
    summed, size, _ = module(tf.ones([2, 3]))
    np.testing.assert_array_equal(summed.numpy(), np.tile([1.0, 2.0, 3.0], (2, 1)) * hvd.size())
    assert int(size) == hvd.size()
    if hvd.rank() == 0:
        tf.saved_model.save(module, path)
    comm.Barrier()

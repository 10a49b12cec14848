"""The TensorFlow/Keras names horo used to answer with NotImplementedError, now as in Horovod 0.28:
SyncBatchNormalization, PartialDistributedGradientTape, LocalGradientAggregationHelper, Keras
PartialDistributedOptimizer and BestModelCheckpoint, broadcast_global_variables (TF1 graphs; a
RuntimeError eagerly), BroadcastGlobalVariablesHook and the callback's local_variables. Each against
a one-process computation of the same thing in the rank."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from rank_helpers import expect_raise_on_every_rank, gather_and_compare  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def hvd():
    import horo.tensorflow as hvd

    hvd.init()
    return hvd


def batch(rank, shape, seed=0):
    return np.random.default_rng(seed * 100 + rank).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape,axis", [((3, 4), -1), ((2, 4, 3), 1)], ids=["dense", "axis1"])
def test_sync_batch_norm_equals_batch_norm_on_the_whole_batch(hvd, comm, shape, axis):
    """Outputs, moving statistics and input gradients of each rank's share equal BatchNormalization's
    on the concatenation of every rank's batch."""
    rank, size = hvd.rank(), hvd.size()
    xs = [batch(r, shape, seed=1) + r for r in range(size)]
    ups = [batch(r, shape, seed=2) for r in range(size)]
    whole, upstream = tf.constant(np.concatenate(xs)), tf.constant(np.concatenate(ups))
    bn, sync_bn = keras.layers.BatchNormalization(axis=axis), hvd.SyncBatchNormalization(axis=axis)
    with tf.GradientTape() as tape:
        tape.watch(whole)
        expected = bn(whole, training=True)
        loss = tf.reduce_sum(expected * upstream)
    expected_grad = tape.gradient(loss, whole).numpy()
    mine = tf.constant(xs[rank])
    with tf.GradientTape() as tape:
        tape.watch(mine)
        out = sync_bn(mine, training=True)
        loss = tf.reduce_sum(out * ups[rank])
    grad = tape.gradient(loss, mine).numpy()
    rows = slice(rank * shape[0], (rank + 1) * shape[0])
    np.testing.assert_allclose(out.numpy(), expected.numpy()[rows], **TOL)
    np.testing.assert_allclose(sync_bn.moving_mean.numpy(), bn.moving_mean.numpy(), **TOL)
    np.testing.assert_allclose(sync_bn.moving_variance.numpy(), bn.moving_variance.numpy(), **TOL)
    np.testing.assert_allclose(grad, expected_grad[rows], rtol=1e-4, atol=1e-4)
    # Inference uses the moving statistics, with no collective.
    np.testing.assert_allclose(sync_bn(mine, training=False).numpy(), bn(mine, training=False).numpy(), **TOL)


def test_sync_batch_norm_refuses_fused(hvd):
    with pytest.raises(ValueError, match="fused"):
        hvd.SyncBatchNormalization(fused=True)


def _two_layer_model(seed):
    keras.utils.set_random_seed(seed)
    shared, local = keras.layers.Dense(3, name="shared"), keras.layers.Dense(2, name="local")
    model = keras.Sequential([keras.Input((4,)), shared, local])
    return model, shared, local


def _per_rank_grads(model, size, seed):
    grads = []
    for r in range(size):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(batch(r, (5, 4), seed)) ** 2)
        grads.append([g.numpy() for g in tape.gradient(loss, model.trainable_variables)])
    return grads


@pytest.mark.parametrize("scale", [True, False])
def test_partial_distributed_gradient_tape_keeps_local_layers_gradients(hvd, scale):
    rank, size = hvd.rank(), hvd.size()
    model, shared, local = _two_layer_model(3)
    every = _per_rank_grads(model, size, seed=4)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(batch(rank, (5, 4), 4)) ** 2)
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=local, scale_local_gradients=scale)
    grads = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    local_ids = {id(v) for v in local.trainable_weights}
    for k, v in enumerate(model.trainable_variables):
        if id(v) in local_ids:
            expected = every[rank][k] / (size if scale else 1)
        else:
            expected = sum(g[k] for g in every) / size
        np.testing.assert_allclose(grads[k], expected, rtol=1e-5, atol=1e-6, err_msg=v.path)


@pytest.mark.parametrize("average", [True, False])
def test_local_gradient_aggregation_helper_reduces_every_k_passes(hvd, average):
    rank, size = hvd.rank(), hvd.size()
    k = 3
    var = tf.Variable(np.zeros(2, np.float32))
    opt = keras.optimizers.SGD(1.0)
    opt.build([var])

    def allreduce(grads, variables):
        return hvd.grouped_allreduce(grads, op=hvd.Average)

    helper = hvd.LocalGradientAggregationHelper(k, allreduce, sparse_as_dense=False,
                                                average_aggregated_gradients=average, rank=rank, optimizer_type=None)
    applied = []
    for step in range(2 * k):
        grad = tf.constant([rank + 1.0, step + 1.0])
        grads = helper.compute_gradients([grad], [var])
        applied.append(bool(helper.apply_gradients(lambda: opt.apply_gradients(zip(grads, [var])), opt)))
        if step == k - 1:  # the first update: the mean over ranks of the sum (or mean) of k passes
            total = np.array([sum(r + 1.0 for r in range(size)) / size * k, 1.0 + 2.0 + 3.0])
            np.testing.assert_allclose(-var.numpy(), total / (k if average else 1), rtol=1e-6)
    assert applied == [False, False, True, False, False, True]
    assert int(opt.iterations.numpy()) == 2 * k


def test_broadcast_global_variables_in_a_tf1_graph_and_eagerly(hvd, comm):
    rank = hvd.rank()
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        v = tf.compat.v1.get_variable("gv", initializer=np.full(3, float(rank), np.float32))
        w = tf.compat.v1.get_variable("gw", initializer=np.full(2, rank, np.int64))
        op = hvd.broadcast_global_variables(0)
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(op)
        np.testing.assert_array_equal(session.run(v), np.zeros(3))
        np.testing.assert_array_equal(session.run(w), np.zeros(2))
    expect_raise_on_every_rank(comm, RuntimeError, lambda: hvd.broadcast_global_variables(0),
                               must_contain=["eager", "broadcast_variables"])
    import horo.tensorflow.keras as hk

    expect_raise_on_every_rank(comm, RuntimeError, lambda: hk.broadcast_global_variables(0),
                               must_contain=["BroadcastGlobalVariablesCallback"])


def test_broadcast_global_variables_hook_runs_after_the_session_is_created(hvd):
    rank, size = hvd.rank(), hvd.size()
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("hv", initializer=np.full(4, float(rank), np.float32))
        hook = hvd.BroadcastGlobalVariablesHook(size - 1)
        hook.begin()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            hook.after_create_session(session, None)
            np.testing.assert_array_equal(session.run(v), np.full(4, size - 1.0))


def test_keras_partial_distributed_optimizer_and_callback_local_variables(hvd, comm):
    import horo.tensorflow.keras as hk

    rank, size = hvd.rank(), hvd.size()
    model, shared, local = _two_layer_model(5 + rank)  # different starts: the callback makes the shared ones equal
    root_model, _, root_local = _two_layer_model(5)
    callback = hk.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=local.trainable_weights)
    opt = hk.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[local])
    model.compile(optimizer=opt, loss="mse")
    x, y = batch(rank, (5, 4), 6), batch(rank, (5, 2), 7)
    own_local = [w.numpy() for w in local.trainable_weights]
    model.fit(x, y, batch_size=5, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    # Shared weights: root's start, one step on the averaged gradient; equal on every rank.
    gather_and_compare(comm, [w.numpy().tobytes() for w in shared.trainable_weights], "shared weights")
    # Local weights: this rank's own start and its own gradient / size.
    ref = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    ref.set_weights([w.numpy() for w in root_model.layers[0].trainable_weights] + own_local)
    with tf.GradientTape() as tape:
        loss = keras.losses.MeanSquaredError()(y, ref(x))
    grads = tape.gradient(loss, ref.trainable_variables)
    np.testing.assert_allclose(local.kernel.numpy(), own_local[0] - 0.1 * grads[2].numpy() / size, **TOL)
    np.testing.assert_allclose(local.bias.numpy(), own_local[1] - 0.1 * grads[3].numpy() / size, **TOL)


def test_best_model_checkpoint_saves_the_best_epoch(hvd, tmp_path_factory):
    import horo.tensorflow.keras as hk

    rank = hvd.rank()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    x, y = batch(0, (16, 4), 8), batch(0, (16, 1), 9)
    unset = hk.callbacks.BestModelCheckpoint(monitor="loss")
    with pytest.raises(ValueError, match="filepath"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[unset])
    path = str(tmp_path_factory.mktemp(f"best{rank}") / "best.keras")
    best = hk.callbacks.BestModelCheckpoint(monitor="loss", mode="min")
    best.filepath = path
    history = model.fit(x, y, epochs=3, verbose=0, callbacks=[best])
    assert best.save_best_only and os.path.exists(path)
    assert best.best == pytest.approx(min(history.history["loss"]))

"""horo.tensorflow.keras (Keras 3, TensorFlow CPU) inside each MPI rank.

Runs inside each rank (see conftest.py in this folder). Every rank trains its shard
with `model.fit` and a DistributedOptimizer; the reference is computed inside the rank
too: the same model, one process, fit on the concatenation of all ranks' batches (for
an update with k backward passes: of all ranks' k batches), which is what synchronous
data-parallel SGD must equal (mean losses over equal batches: the mean of the ranks'
gradients is the gradient of the big batch).

Keras names layers from a per-process counter and horo.tensorflow's broadcast names
variables by their Keras path: every rank builds the same models in the same order.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

FEATURES, CLASSES, BATCH = 6, 3, 4
TOL = dict(rtol=1e-5, atol=2e-6)


@pytest.fixture(scope="module")
def hvd():
    import horo.tensorflow.keras as hvd

    hvd.init()
    yield hvd
    hvd.shutdown()


def make_model(seed, embedding=False):
    keras.utils.set_random_seed(seed)
    if embedding:
        layers = [keras.Input((3,), dtype="int32"), keras.layers.Embedding(20, 5), keras.layers.Flatten()]
    else:
        layers = [keras.Input((FEATURES,))]
    layers += [keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(CLASSES, activation="softmax")]
    return keras.Sequential(layers)


def dataset(updates, size, passes=1, seed=7, embedding=False):
    """Global data for `updates` optimizer steps of size * passes batches of BATCH rows,
    laid out in the order the single-process reference consumes them."""
    rng = np.random.default_rng(seed)
    rows = updates * size * passes * BATCH
    if embedding:
        x = rng.integers(0, 20, size=(rows, 3)).astype("int32")
    else:
        x = rng.normal(size=(rows, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=rows).astype("int32")
    return x, y


def shard(array, rank, size, passes=1):
    """Rank `rank`'s rows: in global update u, rank r owns the r-th block of passes * BATCH rows."""
    block = passes * BATCH
    per_update = array.reshape(-1, size, block, *array.shape[1:])
    return per_update[:, rank].reshape(-1, *array.shape[1:])


def weights(model):
    return np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])


def same_on_every_rank(comm, array):
    everyone = comm.allgather(np.asarray(array))
    for r, other in enumerate(everyone):
        np.testing.assert_array_equal(other, everyone[0], err_msg=f"rank {r} differs from rank 0")


def fit_distributed(hvd, opt, x, y, epochs=2, batch=BATCH, callbacks=(), seed=1, compile_kw=None, embedding=False):
    model = make_model(seed, embedding)
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", **(compile_kw or {}))
    history = model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0, callbacks=list(callbacks))
    return model, history


def fit_reference(opt, x, y, epochs=2, batch=BATCH, seed=1, embedding=False):
    model = make_model(seed, embedding)
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
    return model


# ----------------------------------------------------------------------------- the optimizer


VARIANTS = {
    "plain": dict(),
    "predivide_groups": dict(opt=dict(gradient_predivide_factor=2.0, groups=2)),
    "fp16": dict(opt="fp16", tol=dict(rtol=0, atol=2e-3)),
    "eager": dict(compile=dict(run_eagerly=True)),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_fit_matches_one_process_on_the_concatenated_batch(hvd, comm, variant):
    spec = VARIANTS[variant]
    size, rank = hvd.size(), hvd.rank()
    x, y = dataset(updates=3, size=size)
    kwargs = dict(compression=hvd.Compression.fp16) if spec.get("opt") == "fp16" else dict(spec.get("opt", {}))
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), **kwargs)
    model, _ = fit_distributed(hvd, opt, shard(x, rank, size), shard(y, rank, size), compile_kw=spec.get("compile"),
                               callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    same_on_every_rank(comm, weights(model))
    reference = fit_reference(keras.optimizers.SGD(0.1, momentum=0.9), x, y, batch=BATCH * size)
    np.testing.assert_allclose(weights(model), weights(reference), **spec.get("tol", TOL))
    assert int(model.optimizer.iterations) == 6  # 3 updates x 2 epochs


def test_groups_given_as_variables(hvd, comm):
    """Two grouped allreduces (first layer's kernel; second layer's kernel and bias) and one for the rest."""
    size, rank = hvd.size(), hvd.rank()
    x, y = dataset(updates=3, size=size)
    model = make_model(1)
    first, second = model.layers
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9),
                                   groups=[[first.kernel], [second.kernel, second.bias]])
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    model.fit(shard(x, rank, size), shard(y, rank, size), batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    same_on_every_rank(comm, weights(model))
    reference = fit_reference(keras.optimizers.SGD(0.1, momentum=0.9), x, y, batch=BATCH * size)
    np.testing.assert_allclose(weights(model), weights(reference), **TOL)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_embedding_gradients_sparse_or_dense(hvd, comm, sparse_as_dense):
    size, rank = hvd.size(), hvd.rank()
    x, y = dataset(updates=3, size=size, embedding=True)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), sparse_as_dense=sparse_as_dense)
    model, _ = fit_distributed(hvd, opt, shard(x, rank, size), shard(y, rank, size), embedding=True)
    same_on_every_rank(comm, weights(model))
    reference = fit_reference(keras.optimizers.SGD(0.1), x, y, batch=BATCH * size, embedding=True)
    np.testing.assert_allclose(weights(model), weights(reference), **TOL)


@pytest.mark.parametrize("average", [True, False])
def test_backward_passes_per_step_equals_the_larger_batch(hvd, comm, average):
    """k=2 local passes, one allreduce: the mean (average_aggregated_gradients=True) equals a batch
    k x larger; the sum (Horovod's default) equals it with k x the learning rate."""
    size, rank, k, lr = hvd.size(), hvd.rank(), 2, 0.05
    x, y = dataset(updates=3, size=size, passes=k)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.5), backward_passes_per_step=k,
                                   average_aggregated_gradients=average)
    assert opt.gradient_accumulation_steps == k
    model, _ = fit_distributed(hvd, opt, shard(x, rank, size, k), shard(y, rank, size, k))
    same_on_every_rank(comm, weights(model))
    reference = fit_reference(keras.optimizers.SGD(lr if average else lr * k, momentum=0.5), x, y,
                              batch=BATCH * size * k)
    np.testing.assert_allclose(weights(model), weights(reference), **TOL)
    assert int(model.optimizer.iterations) == 6  # updates, not passes


def test_wrapping_keeps_class_and_config_and_refuses_what_it_cannot_do(hvd):
    base = keras.optimizers.Adam(0.003, beta_1=0.8, clipnorm=1.0)
    opt = hvd.DistributedOptimizer(base)
    assert isinstance(opt, keras.optimizers.Adam) and type(opt).__name__ == "Adam"
    assert opt is not base and opt.get_config() == dict(base.get_config(), name=opt.name)
    with pytest.raises(ValueError, match="already"):
        hvd.DistributedOptimizer(opt)
    with pytest.raises(TypeError, match="keras.optimizers.Optimizer"):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    with pytest.raises(NotImplementedError, match="LossScaleOptimizer"):
        hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()))
    with pytest.raises(ValueError, match="disagrees"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(gradient_accumulation_steps=3), backward_passes_per_step=2)


# ----------------------------------------------------------------------------- callbacks


def test_broadcast_callback_makes_different_initial_weights_identical(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    root_initial = weights(make_model(seed=100))  # what rank 0's model starts from (same layer sequence everywhere)
    model = make_model(seed=100 + rank)
    if size > 1:
        assert not np.array_equal(comm.bcast(weights(model), root=0), weights(model)) or rank == 0
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.0, momentum=0.9))  # lr 0: weights stay rank 0's
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    x, y = dataset(updates=1, size=1, seed=rank)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    same_on_every_rank(comm, weights(model))
    np.testing.assert_array_equal(weights(model), root_initial)


class Capture(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(dict(logs))


def test_metric_average_callback_averages_the_logs_over_ranks(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    x, y = dataset(updates=2, size=1, seed=50 + rank)  # each rank its own data: its own loss
    raw, averaged = Capture(), Capture()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    model = make_model(3)
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, validation_data=(x, y),
                        callbacks=[raw, hvd.callbacks.MetricAverageCallback(), averaged])
    everyone = comm.allgather(raw.epochs)
    for epoch in range(2):
        assert set(averaged.epochs[epoch]) == {"loss", "accuracy", "val_loss", "val_accuracy"}
        for key, value in averaged.epochs[epoch].items():
            expected = np.mean([everyone[r][epoch][key] for r in range(size)])
            assert value == pytest.approx(expected, rel=1e-6), key
            assert history.history[key][epoch] == pytest.approx(expected, rel=1e-6), key
    assert all(e == averaged.epochs for e in comm.allgather(averaged.epochs)), "averaged logs differ between ranks"


class RecordLearningRate(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.rates = []

    def on_train_batch_begin(self, batch, logs=None):
        self.rates.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))


def test_learning_rate_warmup_follows_horovods_formula(hvd):
    size, initial, warmup, steps = hvd.size(), 0.08, 2, 3
    x, y = dataset(updates=steps, size=1)
    model = make_model(4)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(initial)),
                  loss="sparse_categorical_crossentropy")
    record = RecordLearningRate()
    history = model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0, shuffle=False,
                        callbacks=[hvd.callbacks.LearningRateWarmupCallback(initial, warmup_epochs=warmup), record])
    expected = [initial / size * ((e + (b + 1) / steps) * (size - 1) / warmup + 1)
                for e in range(warmup) for b in range(steps)]
    expected += [expected[-1]] * steps  # after the warmup the rate is left where it ended: initial_lr
    np.testing.assert_allclose(record.rates, expected, rtol=1e-6)
    assert expected[-1] == pytest.approx(initial)
    assert history.history["learning_rate"][-1] == pytest.approx(initial, rel=1e-6)


def test_schedule_callback_staircase_and_momentum_correction(hvd):
    model = make_model(5)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    opt.build(model.trainable_variables)
    for i, m in enumerate(opt.momentums):
        m.assign(np.full(m.shape, i + 1.0, dtype="float32"))
    cb = hvd.callbacks.LearningRateScheduleCallback(0.1, multiplier=lambda epoch: 0.5 ** epoch, start_epoch=1,
                                                    end_epoch=3)
    cb.set_model(model)
    cb.set_params({"steps": 4, "epochs": 4})
    cb.on_train_begin()
    seen = []
    for epoch in range(4):
        cb.on_epoch_begin(epoch)
        for batch in range(4):
            cb.on_train_batch_begin(batch)
            seen.append(float(keras.ops.convert_to_numpy(opt.learning_rate)))
    np.testing.assert_allclose(seen, [0.1] * 4 + [0.05] * 4 + [0.025] * 8, rtol=1e-6)
    for i, m in enumerate(opt.momentums):  # 0.1 -> 0.05 -> 0.025: the velocity follows the rate
        np.testing.assert_allclose(keras.ops.convert_to_numpy(m), (i + 1.0) * 0.25, rtol=1e-6)


# ----------------------------------------------------------------------------- saving


def test_load_model_rewraps_the_optimizer_with_its_state(hvd, comm, tmp_path):
    size, rank = hvd.size(), hvd.rank()
    x, y = dataset(updates=2, size=size)
    xs, ys = shard(x, rank, size), shard(y, rank, size)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), backward_passes_per_step=2,
                                   average_aggregated_gradients=True)
    model, _ = fit_distributed(hvd, opt, xs, ys, epochs=1)
    path = str(tmp_path / "model.keras")
    model.save(path)

    plain = keras.models.load_model(path)  # the file needs no horo
    assert type(plain.optimizer) is keras.optimizers.SGD

    loaded = hvd.load_model(path, compression=hvd.Compression.fp16, average_aggregated_gradients=True)
    opt2 = loaded.optimizer
    assert isinstance(opt2, keras.optimizers.SGD) and type(opt2) is type(opt) and type(opt2).__name__ == "SGD"
    assert opt2._horo.compression is hvd.Compression.fp16
    assert opt2.gradient_accumulation_steps == 2
    for a, b in zip(opt.variables, opt2.variables):  # iterations, momentum, accumulators
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    # Both continue the same way (the loaded one reduces in fp16: close, not equal).
    loaded.fit(xs, ys, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    model.fit(xs, ys, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    same_on_every_rank(comm, weights(loaded))
    np.testing.assert_allclose(weights(loaded), weights(model), rtol=0, atol=2e-3)

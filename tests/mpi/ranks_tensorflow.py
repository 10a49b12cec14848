"""horo.tensorflow inside each MPI rank (np = 1, 2): the collectives on tf tensors against
the NumPy reference, eagerly and inside tf.function; the gradient of each collective
against its analytic value; DistributedGradientTape training that ends with the weights of
one process trained on the concatenated batch; IndexedSlices (embedding) gradients;
bad input raising on every rank.

Every rank builds every rank's inputs from seeds (horo_reference), so it can compute
the expected result locally.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from horo_reference import (  # noqa: E402
    DTYPES,
    OPS,
    check_result,
    kinds_for,
    make_rank_inputs,
    must_be_exact,
    np_dtype,
    reference,
)
from rank_helpers import expect_raise_on_every_rank, gather_and_compare  # noqa: E402

MODES = ["eager", "function"]
needs_two_ranks = pytest.mark.skipif(
    __import__("mpi4py.MPI", fromlist=["MPI"]).COMM_WORLD.Get_size() < 2, reason="needs at least two ranks"
)


@pytest.fixture(scope="module")
def hvd():
    import horo.tensorflow as hvd

    hvd.init()
    yield hvd


def in_mode(mode, fn):
    """fn itself (eager) or fn traced into a tf.function (graph)."""
    return fn if mode == "eager" else tf.function(fn)


def tf_of(array):
    return tf.convert_to_tensor(array, dtype=tf.as_dtype(array.dtype))


# ------------------------------------------------------------------ collectives vs NumPy


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_every_dtype_and_op_matches_numpy(hvd, comm, mode):
    size, rank = hvd.size(), hvd.rank()
    cases = []  # one traced function for every (dtype, op)
    for dtype in DTYPES:
        for i, op in enumerate(OPS):
            kind = kinds_for(dtype)[i % 2]
            cases.append((dtype, op, kind, make_rank_inputs(("tf.ar", mode, dtype, op), dtype, (3, 5), op, kind, size)))

    def reduce_all(xs):
        return [hvd.allreduce(x, op=getattr(hvd, op), name=f"tf.ar.{mode}.{dtype}.{op}")
                for x, (dtype, op, _, _) in zip(xs, cases)]

    outs = in_mode(mode, reduce_all)([tf_of(inputs[rank]) for _, _, _, inputs in cases])
    for out, (dtype, op, kind, inputs) in zip(outs, cases):
        what = f"{mode} {dtype} {op}"
        if op == "Average":  # Horovod's TF Average: the Sum, then TensorFlow's true division by the size
            check_average(out, inputs, must_be_exact(dtype, "Sum", kind, size), what)
            continue
        assert out.dtype == tf.as_dtype(np_dtype(dtype)) and out.shape == (3, 5)
        check_result(out.numpy(), inputs, op, must_be_exact(dtype, op, kind, size), what=what)
    gather_and_compare(comm, True, "done")


def check_average(out, inputs, sum_exact, what):
    """`out` is TensorFlow's `sum / size` of the NumPy sum: bit for bit where the sum is exact
    (integers become floats, as `/` makes them in TensorFlow and Horovod)."""
    summed = tf_of(reference(inputs, "Sum"))
    expected = (summed / tf.cast(len(inputs), summed.dtype)).numpy()
    assert out.dtype == tf.as_dtype(expected.dtype) and out.shape == expected.shape, (
        f"{what}: {out.dtype} {out.shape}, expected {expected.dtype} {expected.shape}")
    if sum_exact:
        assert out.numpy().tobytes() == expected.tobytes(), f"{what}: {out.numpy()} != {expected}"
    else:
        check_result(out.numpy(), inputs, "Average", False, what=what)


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_defaults_scale_factors_compression_and_unnamed_tensors(hvd, mode):
    size, rank = hvd.size(), hvd.rank()
    x32 = make_rank_inputs(("tf.ar.scale", mode), "float32", (7,), "Sum", "exact", size)
    i64 = make_rank_inputs(("tf.ar.int", mode), "int64", (4,), "Sum", "wide", size)

    def body(a, b, v):
        return (
            hvd.allreduce(a),  # Average, unnamed
            hvd.allreduce(a, average=False),  # deprecated flag: Sum
            hvd.allreduce(a, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5),
            hvd.allreduce(a, compression=hvd.Compression.fp16, op=hvd.Sum),
            hvd.allreduce(b, op=hvd.Sum),
            hvd.allreduce(v, op=hvd.Max),  # a tf.Variable
        )

    var = tf.Variable(x32[rank] * 3)
    avg, summed, scaled, fp16, ints, vmax = in_mode(mode, body)(tf_of(x32[rank]), tf_of(i64[rank]), var)
    check_result(avg.numpy(), x32, "Average", must_be_exact("float32", "Average", "exact", size), what="default op")
    check_result(summed.numpy(), x32, "Sum", True, what="average=False")
    check_result(scaled.numpy(), x32, "Sum", True, 2.0, 0.5, what="scaled")
    assert fp16.dtype == tf.float32, "fp16 compression must restore the dtype"
    check_result(fp16.numpy(), x32, "Sum", True, what="fp16 compression (exact values)")
    check_result(ints.numpy(), i64, "Sum", True, what="int64")
    check_result(vmax.numpy(), [x * 3 for x in x32], "Max", True, what="variable")


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_of_mixed_dtypes_matches_numpy(hvd, mode):
    size, rank = hvd.size(), hvd.rank()
    members = [make_rank_inputs(("tf.grp", mode, i), d, (i + 1, 3), "Sum", kinds_for(d)[0], size)
               for i, d in enumerate(DTYPES)]
    outs = in_mode(mode, lambda xs: hvd.grouped_allreduce(xs, op=hvd.Sum))([tf_of(m[rank]) for m in members])
    assert len(outs) == len(members)
    for out, m, d in zip(outs, members, DTYPES):
        check_result(out.numpy(), m, "Sum", must_be_exact(d, "Sum", kinds_for(d)[0], size), what=f"grouped {d}")
    assert in_mode(mode, lambda: hvd.grouped_allreduce([]))() == []


@pytest.mark.parametrize("mode", MODES)
def test_allgather_ragged_first_dim_every_dtype(hvd, mode):
    size, rank = hvd.size(), hvd.rank()
    parts = {d: [make_rank_inputs(("tf.ag", mode, d, r), d, (r + 1, 2, 3), "Sum", kinds_for(d)[0], 1)[0]
                 for r in range(size)] for d in DTYPES}

    def gather_all(xs):
        outs = [hvd.allgather(x) for x in xs]
        if mode == "function":
            assert all(o.shape.as_list() == [None, 2, 3] for o in outs), [o.shape for o in outs]
        return outs

    outs = in_mode(mode, gather_all)([tf_of(parts[d][rank]) for d in DTYPES])
    for out, d in zip(outs, DTYPES):
        assert out.numpy().tobytes() == np.concatenate(parts[d]).tobytes(), f"allgather {d}"
    grouped = hvd.grouped_allgather([tf_of(parts["int32"][rank]), tf_of(parts["float64"][rank])])
    assert np.array_equal(grouped[1].numpy(), np.concatenate(parts["float64"]))


@pytest.mark.parametrize("mode", MODES)
def test_broadcast_from_every_root(hvd, mode):
    size, rank = hvd.size(), hvd.rank()
    for root in range(size):
        values = {d: make_rank_inputs(("tf.bc", mode, d, root), d, (4, 2), "Sum", kinds_for(d)[1], size)
                  for d in DTYPES}
        outs = in_mode(mode, lambda xs: [hvd.broadcast(x, root) for x in xs])([tf_of(values[d][rank]) for d in DTYPES])
        for out, d in zip(outs, DTYPES):
            assert out.numpy().tobytes() == values[d][root].tobytes(), f"broadcast {d} from {root}"


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_with_and_without_splits(hvd, mode):
    size, rank = hvd.size(), hvd.rank()
    # rank r sends (j + r) % 3 rows to rank j; each row is [r, j, row]
    def sent(r):
        rows = [[r, j, k] for j in range(size) for k in range((j + r) % 3)]
        return np.array(rows, dtype=np.int64).reshape(-1, 3)

    splits = [(j + rank) % 3 for j in range(size)]
    out, received = in_mode(mode, lambda x, s: hvd.alltoall(x, splits=s))(tf_of(sent(rank)), tf.constant(splits))
    expected = np.concatenate([sent(r)[sent(r)[:, 1] == rank] for r in range(size)]).reshape(-1, 3)
    assert np.array_equal(out.numpy(), expected)
    assert received.numpy().tolist() == [(rank + r) % 3 for r in range(size)]
    even = np.arange(2 * size, dtype=np.float32) + 100 * rank
    # Without splits, the received rows alone (Horovod 0.28)
    out = in_mode(mode, lambda x: hvd.alltoall(x))(tf_of(even))
    assert out.numpy().tolist() == [2 * rank + k + 100 * r for r in range(size) for k in range(2)]


@pytest.mark.parametrize("mode", MODES)
def test_reducescatter_sum_and_average(hvd, mode):
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1
    base, extra = divmod(rows, size)
    start, count = rank * base + min(rank, extra), base + (rank < extra)
    for dtype, op in [("int32", "Sum"), ("float64", "Sum"), ("float32", "Average"), ("bfloat16", "Sum")]:
        inputs = make_rank_inputs(("tf.rs", mode, dtype, op), dtype, (rows, 2), op, kinds_for(dtype)[0], size)
        out = in_mode(mode, lambda x: hvd.reducescatter(x, op=getattr(hvd, op)))(tf_of(inputs[rank]))
        check_result(out.numpy(), [x[start : start + count] for x in inputs], op,
                     must_be_exact(dtype, op, kinds_for(dtype)[0], size), what=f"reducescatter {dtype} {op}")


def test_join_barrier_objects_and_process_set_helpers(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    last = int(hvd.join())
    assert 0 <= last < size
    hvd.barrier()
    tf.function(lambda: hvd.barrier())()
    assert int(tf.function(hvd.join)()) in range(size)
    assert hvd.broadcast_object({"from": rank}, root_rank=size - 1) == {"from": size - 1}
    assert hvd.allgather_object(("r", rank)) == [("r", r) for r in range(size)]
    assert int(hvd.size_op()) == size and int(hvd.rank_op()) == rank
    assert hvd.global_process_set.size() == size
    gather_and_compare(comm, last, "join() result")


@pytest.mark.parametrize("mode", MODES)
def test_broadcast_variables_tf_and_keras(hvd, mode):
    import keras

    size, rank = hvd.size(), hvd.rank()
    tf_vars = [tf.Variable(np.full((3, 2), rank, np.float32)), tf.Variable(np.arange(4, dtype=np.int64) * (rank + 1))]
    # Keras numbers auto-named layers per process: one extra layer on rank 0 gives
    # the model's layers other paths there ("dense_5" vs "dense_4"), which must not matter.
    if rank == 0:
        keras.layers.Dense(1)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    for v in model.variables:
        v.assign(np.full(v.shape, float(rank), np.float32))
    root = size - 1

    def bcast():
        hvd.broadcast_variables(tf_vars + list(model.variables), root_rank=root)

    in_mode(mode, bcast)()
    assert np.array_equal(tf_vars[0].numpy(), np.full((3, 2), root, np.float32))
    assert np.array_equal(tf_vars[1].numpy(), np.arange(4) * (root + 1))
    for v in model.variables:
        assert np.all(np.asarray(v.numpy()) == root), v.path


# ------------------------------------------------------------------ gradients


def upstream(key, shape, rank):
    """This rank's weights c_r in loss_r = sum(c_r * y): d loss_r / d y."""
    return make_rank_inputs(key, "float64", shape, "Sum", "exact", rank + 1)[rank]


@pytest.mark.parametrize("mode", MODES)
def test_gradient_of_each_collective(hvd, comm, mode):
    size, rank = hvd.size(), hvd.rank()
    c = {r: {} for r in range(size)}
    for r in range(size):
        c[r]["ar"] = upstream(("g.ar", mode), (3, 2), r)
        c[r]["avg"] = upstream(("g.avg", mode), (3, 2), r)
        c[r]["ag"] = upstream(("g.ag", mode), (size * (size + 1) // 2, 2), r)
        c[r]["bc"] = upstream(("g.bc", mode), (4,), r)
        c[r]["rs"] = upstream(("g.rs", mode), (2 * size + 1,), r)
    recv_rows = [(rank + r) % 2 + 1 for r in range(size)]  # rank r sends (j + r) % 2 + 1 rows to j
    c_a2a = upstream(("g.a2a", mode, rank), (sum(recv_rows), 2), rank)
    rows = 2 * size + 1
    base, extra = divmod(rows, size)
    my_rows = base + (rank < extra)

    x_ar = tf.Variable(np.ones((3, 2)))
    x_ag = tf.Variable(np.ones((rank + 1, 2)))
    x_bc = tf.Variable(np.ones(4))
    x_a2a = tf.Variable(np.ones((sum((j + rank) % 2 + 1 for j in range(size)), 2)))
    x_rs = tf.Variable(np.ones(rows))
    splits = [(j + rank) % 2 + 1 for j in range(size)]

    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(c[rank]["ar"] * hvd.allreduce(x_ar, op=hvd.Sum, prescale_factor=2.0, postscale_factor=3.0))
            loss += tf.reduce_sum(c[rank]["avg"] * hvd.grouped_allreduce([x_ar])[0])
            loss += tf.reduce_sum(c[rank]["ag"] * hvd.allgather(x_ag))
            loss += tf.reduce_sum(c[rank]["bc"] * hvd.broadcast(x_bc, size - 1))
            loss += tf.reduce_sum(c_a2a * hvd.alltoall(x_a2a, splits=splits)[0])
            loss += tf.reduce_sum(c[rank]["rs"][:my_rows] * hvd.reducescatter(x_rs, op=hvd.Sum, postscale_factor=0.5))
        return tape.gradient(loss, [x_ar, x_ag, x_bc, x_a2a, x_rs])

    g_ar, g_ag, g_bc, g_a2a, g_rs = [g.numpy() for g in in_mode(mode, grads)()]
    total = lambda key: sum(c[r][key] for r in range(size))  # noqa: E731
    assert np.allclose(g_ar, 6.0 * total("ar") + total("avg") / size), "allreduce gradient"
    start = rank * (rank + 1) // 2
    # Averaged over the ranks, as Horovod 0.28's allgather and broadcast gradients
    assert np.allclose(g_ag, total("ag")[start : start + rank + 1] / size), "allgather gradient"
    assert np.allclose(g_bc, total("bc") / size if rank == size - 1 else 0.0), "broadcast gradient"
    # alltoall: the rows this rank sent to j come back weighted by rank j's c over what j received from us
    c_all = comm.allgather(c_a2a)
    expected = []
    for j in range(size):
        recv_j = [(j + r) % 2 + 1 for r in range(size)]
        offset = sum(recv_j[:rank])
        expected.append(c_all[j][offset : offset + recv_j[rank]])
    assert np.allclose(g_a2a, np.concatenate(expected)), "alltoall gradient"
    slices = np.concatenate([c[r]["rs"][: base + (r < extra)] for r in range(size)])
    assert np.allclose(g_rs, 0.5 * slices), "reducescatter gradient"


# ------------------------------------------------------------------ DistributedGradientTape


def mlp_weights(seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(6, 8)) * 0.5, np.zeros(8), rng.normal(size=(8, 3)) * 0.5, np.zeros(3)]


def mlp_loss(weights, x, y):
    w1, b1, w2, b2 = weights
    logits = tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) + b2
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", ["plain", "predivide", "groups", "fp16"])
def test_tape_training_matches_one_process_on_the_full_batch(hvd, comm, mode, variant):
    size, rank = hvd.size(), hvd.rank()
    rng = np.random.default_rng(7)
    per_rank, steps, lr = 8, 5, 0.5
    x_full = rng.normal(size=(steps, size * per_rank, 6))
    y_full = rng.integers(0, 3, size=(steps, size * per_rank))
    # ranks start from different weights: broadcast_variables at the first step makes them rank 0's
    mine = [tf.Variable(w) for w in mlp_weights(0 if rank == 0 else 100 + rank)]
    ref = [tf.Variable(w) for w in mlp_weights(0)]
    options = {
        "plain": {},
        "predivide": {"gradient_predivide_factor": 2.0},
        "groups": {"num_groups": 2},
        "fp16": {"compression": hvd.Compression.fp16},
    }[variant]

    def step(x, y, first):
        if first:
            hvd.broadcast_variables(mine, root_rank=0)
        with tf.GradientTape() as tape:
            loss = mlp_loss(mine, x, y)
        tape = hvd.DistributedGradientTape(tape, **options)
        grads = tape.gradient(loss, mine)
        for v, g in zip(mine, grads):
            v.assign_sub(lr * g)
        return loss

    def ref_step(x, y):
        with tf.GradientTape() as tape:
            loss = mlp_loss(ref, x, y)
        for v, g in zip(ref, tape.gradient(loss, ref)):
            v.assign_sub(lr * g)

    run = in_mode(mode, step)
    for s in range(steps):
        shard = slice(rank * per_rank, (rank + 1) * per_rank)
        run(tf.constant(x_full[s, shard]), tf.constant(y_full[s, shard]), s == 0)
        ref_step(tf.constant(x_full[s]), tf.constant(y_full[s]))
    tol = 2e-3 if variant == "fp16" else 1e-9
    for v, r in zip(mine, ref):
        assert np.allclose(v.numpy(), r.numpy(), atol=tol, rtol=tol), f"{variant}: {np.abs(v.numpy() - r.numpy()).max()}"
    gather_and_compare(comm, [v.numpy().tobytes() for v in mine], "weights")


def test_tape_with_keras_model_and_optimizer(hvd, comm):
    import keras

    size, rank = hvd.size(), hvd.rank()
    keras.utils.set_random_seed(1 + rank)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="relu"), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(0.1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = np.random.default_rng(rank).normal(size=(16, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    @tf.function
    def step(first):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    for s in range(4):
        step(s == 0)
    gather_and_compare(comm, [np.asarray(v.numpy()).tobytes() for v in model.variables], "keras weights")


@pytest.mark.parametrize("mode", MODES)
def test_indexed_slices_gradients_of_an_embedding(hvd, mode):
    size, rank = hvd.size(), hvd.rank()
    vocab, dim = 10, 4
    table = tf.Variable(np.arange(vocab * dim, dtype=np.float32).reshape(vocab, dim))
    ids = {r: np.array([(3 * r + k) % vocab for k in range(r + 2)] + [r % vocab]) for r in range(size)}
    c = {r: upstream(("emb", r), (len(ids[r]), dim), r).astype(np.float32) for r in range(size)}
    dense_ref = np.zeros((vocab, dim))
    for r in range(size):
        np.add.at(dense_ref, ids[r], c[r])

    def grads(sparse_as_dense):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(c[rank] * tf.gather(table, ids[rank]))
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
        return tape.gradient(loss, [table])[0]

    sparse = in_mode(mode, lambda: grads(False))()
    assert isinstance(sparse, tf.IndexedSlices), type(sparse)
    assert sparse.values.shape[0] == sum(len(i) for i in ids.values())
    assert np.allclose(tf.convert_to_tensor(sparse).numpy(), dense_ref / size)
    dense = in_mode(mode, lambda: grads(True))()
    assert isinstance(dense, tf.Tensor)
    assert np.allclose(dense.numpy(), dense_ref / size)
    summed = hvd.allreduce(tf.IndexedSlices(tf.constant(c[rank]), tf.constant(ids[rank])), op=hvd.Sum)
    assert np.allclose(tf.math.unsorted_segment_sum(summed.values, summed.indices, vocab).numpy(), dense_ref)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("mode", MODES)
def test_unsupported_dtypes_raise_type_error_naming_the_tensor(hvd, comm, mode):
    # (bool and int16 are supported: moved by every collective; bool is never reduced; uint16 is
    # moved but not reduced, as in Horovod)
    values = [tf.constant(["a", "b"]), tf.constant([1 + 2j], tf.complex64), tf.constant([1], tf.uint16)]
    for value in values if mode == "eager" else values[::2]:  # each traced case costs a trace
        calls = {
            "allreduce": lambda v: hvd.allreduce(v, name="tf.bad.dtype"),
            "allgather": lambda v: hvd.allgather(v, name="tf.bad.dtype"),
            "broadcast": lambda v: hvd.broadcast(v, 0, name="tf.bad.dtype"),
            "grouped": lambda v: hvd.grouped_allreduce([tf.zeros(2), v], name="tf.bad.dtype"),
        }
        if value.dtype == tf.uint16:
            calls = {k: calls[k] for k in ("allreduce", "grouped")}
        for label, call in calls.items():
            fn = in_mode(mode, lambda: call(value))
            expect_raise_on_every_rank(comm, TypeError, fn, must_contain=["tf.bad.dtype", value.dtype.name],
                                       what=f"{mode} {label} {value.dtype.name}")
    gather_and_compare(comm, True, "done")


@needs_two_ranks
@pytest.mark.parametrize("mode", MODES)
def test_mismatched_shapes_raise_on_every_rank_then_work_goes_on(hvd, comm, mode):
    rank = hvd.rank()
    errors = (hvd.HoroError, tf.errors.OpError)
    name = f"tf.bad.shape.{mode}"
    fn = in_mode(mode, lambda x: hvd.allreduce(x, name=name))
    expect_raise_on_every_rank(comm, errors, lambda: fn(tf.zeros([rank + 1, 2])), must_contain=[name, "shape"],
                               what=f"{mode} allreduce with shapes differing across ranks")
    gfn = in_mode(mode, lambda x: hvd.allgather(x, name=name + ".ag"))
    expect_raise_on_every_rank(comm, errors, lambda: gfn(tf.zeros([2, rank + 1])), must_contain=[name + ".ag"],
                               what=f"{mode} allgather with other dims differing across ranks")
    out = in_mode(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, name=name + ".after"))(tf.ones([3]))
    assert np.array_equal(out.numpy(), np.full(3, hvd.size(), np.float32))


"""Bad input to every public function of horo.tensorflow (issue #14, item 4), eagerly.

The same table machinery as ranks_bad_input.py (NumPy, torch), in a launch of its own so
that TensorFlow and torch never share a process. TensorFlow tensors are always dense and
contiguous and have no in-place collectives but broadcast_ of variables, so the
non-contiguous and read-only rows have no TensorFlow form; the native ops refuse bad
roots and splits as tf.errors.InvalidArgumentError, as Horovod's do.

Runs inside each MPI rank (np >= 2).
"""
import numpy as np
import pytest
from mpi4py import MPI

from bad_input_table import (
    Case,
    Context,
    Returns,
    check_good_collective,
    data,
    public_functions,
    raises,
    ref_concat,
    ref_reducescatter,
    ref_root,
    ref_sum,
    run_row,
    share,
    takes_no_required_argument,
)

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
COMM = WORLD.Dup()


class TfApi:
    name = "tensorflow"

    def module(self):
        import horo.tensorflow

        return horo.tensorflow

    def tensor(self, a):
        import tensorflow as tf

        return tf.constant(np.array(a, copy=True))

    def to_numpy(self, r):
        return np.asarray(r.numpy() if hasattr(r, "numpy") else r)

    def bad_dtype(self):
        import tensorflow as tf

        return tf.ones([2 * SIZE], dtype=tf.complex64)


API = TfApi()


def ref_alltoall_even(xs, root):
    return np.concatenate([share(x.reshape(-1) if x.ndim == 0 else x, RANK) for x in xs])


class Fn:
    """kinds: reduce (op, scale factors), average, rooted, splits, group (row's tensor second)."""

    def __init__(self, name, kinds, ref):
        self.name, self.kinds, self.ref = name, set(kinds), ref

    def call(self, ctx, x, name, root=0, raw=False, **kw):
        mod = ctx.mod
        if "reduce" in self.kinds:
            kw.setdefault("op", mod.Sum)
        if "group" in self.kinds and not raw:
            x = [API.tensor(data(RANK)), x]
        if "rooted" in self.kinds:
            kw["root_rank"] = root
        result = getattr(mod, self.name)(x, name=name, **kw)
        if self.name == "alltoall" and kw.get("splits") is not None:  # Horovod 0.28: rows alone without splits
            result = result[0]
        return result[1] if "group" in self.kinds else result

    def tensor_name(self, name):
        return f"{name}.1" if "group" in self.kinds else name

    def check(self, ctx, xs, root=0):
        expected = self.ref(xs, root)

        def check(result):
            got = API.to_numpy(result)
            assert got.shape == expected.shape and np.array_equal(got, expected), f"{got} != {expected}"

        return check


FNS = {f.name: f for f in [
    Fn("allreduce", {"reduce", "average"}, ref_sum),
    Fn("grouped_allreduce", {"reduce", "average", "group"}, ref_sum),
    Fn("allgather", set(), ref_concat),
    Fn("grouped_allgather", {"group"}, ref_concat),
    Fn("broadcast", {"rooted"}, ref_root),
    Fn("alltoall", {"splits"}, ref_alltoall_even),
    Fn("reducescatter", {"reduce"}, ref_reducescatter),
    Fn("grouped_reducescatter", {"reduce", "group"}, ref_reducescatter),
]}


def _kwargs(ctx, kw):
    ps = kw.pop("ps", None)
    if ps is not None:
        kw["process_set"] = {"other": ctx.member_of_other, "removed": ctx.removed}.get(ps, ps)
    if kw.get("op") == "adasum":
        kw["op"] = ctx.mod.Adasum
    return kw


def tensor_cases(fn):
    import tensorflow as tf

    from horo import HoroError, HoroValueError, HorovodInternalError

    tn = fn.tensor_name
    rows = []
    bad_argument = (tf.errors.InvalidArgumentError, HoroError)

    def row(label, x, expect, **kw):
        def build(ctx, name):
            def call(c):
                k = _kwargs(c, dict(kw))
                return fn.call(c, x(c), k.pop("name_override", name), **k)

            return Case(label, call, expect(name))

        rows.append((label, build))

    good = lambda c: API.tensor(data(RANK))  # noqa: E731
    row("none", lambda c: None, lambda n: raises(TypeError, fn.name, "nonetype"))
    row("wrong_type_str", lambda c: "not a tensor", lambda n: raises(TypeError, tn(n), "string"))
    row("wrong_type_dict", lambda c: {"a": 1}, lambda n: raises(TypeError, "dict"))
    row("unsupported_dtype", lambda c: API.bad_dtype(), lambda n: raises(TypeError, tn(n), "complex"))
    zero_d = [data(r, zero_d=True) for r in range(SIZE)]
    if fn.name == "alltoall" and SIZE > 1:  # one row does not split evenly (Horovod 0.28: an error)
        row("zero_d", lambda c: API.tensor(zero_d[RANK]), lambda n: raises(tf.errors.InvalidArgumentError, n, "rows"))
    else:
        row("zero_d", lambda c: API.tensor(zero_d[RANK]), lambda n: lambda ctx: Returns(fn.check(ctx, zero_d)))
    row("name_not_str", good, lambda n: raises(TypeError, "name", "int"), name_override=7)
    row("process_set_not_member", good, lambda n: raises(HoroValueError, n, "not in"), ps="other")
    row("process_set_removed", good, lambda n: raises(HoroValueError, n, "removed"), ps="removed")
    row("process_set_wrong_type", good, lambda n: raises(TypeError, "process_set", "int"), ps=1)
    if "reduce" in fn.kinds:
        row("op_unknown", good, lambda n: raises(HoroValueError, "op", "99"), op=99)
        if "average" not in fn.kinds:  # an allreduce takes Adasum (tests/mpi/ranks_adasum.py)
            row("op_adasum", good, lambda n: raises(HoroValueError, "op", "Adasum"), op="adasum")
        row("prescale_not_a_number", good, lambda n: raises(TypeError, "prescale_factor", "str"),
            prescale_factor="2")
    if "average" in fn.kinds:
        row("op_and_average", good, lambda n: raises(HoroValueError, "average"), average=True)
    if "rooted" in fn.kinds:
        row("root_negative", good, lambda n: raises(bad_argument, n, "root"), root=-1)
        row("root_out_of_range", good, lambda n: raises(bad_argument, n, "root"), root=SIZE)
        row("root_str", good, lambda n: raises(TypeError, "root_rank", "str"), root="0")
        row("root_none", good, lambda n: raises(TypeError, "root_rank", "none"), root=None)
    if "splits" in fn.kinds:
        row("splits_do_not_sum", good, lambda n: raises(bad_argument, n, "split"), splits=[1] * SIZE)
        row("splits_too_few", good, lambda n: raises(bad_argument, n, "split"), splits=[2 * SIZE])
        row("splits_float", good, lambda n: raises(TypeError, "splits"), splits=[1.5] * SIZE)
    if "group" in fn.kinds:
        row("tensors_none", lambda c: None, lambda n: raises(TypeError, "tensors", "none"), raw=True)
        row("tensors_bare_tensor", good, lambda n: raises(TypeError, "tensors"), raw=True)

    def asymmetric(ctx, name):
        x = API.bad_dtype() if RANK == 1 else API.tensor(data(RANK))
        expect = (lambda c: raises(TypeError, tn(name))(c)) if RANK == 1 else \
            (lambda c: raises((HorovodInternalError, tf.errors.OpError), "refused", "rank(s) 1")(c))
        return Case("bad_on_rank_1_only", lambda c: fn.call(c, x, name), expect)

    rows.append(("bad_on_rank_1_only", asymmetric))
    return rows


def other_cases():
    import tensorflow as tf

    from horo import HoroError, HoroValueError, HorovodInternalError

    def case(label, call, expect):
        return label, lambda ctx, name: Case(label, lambda c: call(c, name), expect)

    unpicklable = lambda: (lambda: None)  # noqa: E731
    v = tf.Variable(np.arange(3, dtype=np.float32))
    bad_argument = (tf.errors.InvalidArgumentError, HoroError)
    return {
        "barrier": [
            case("process_set_not_member", lambda c, n: c.mod.barrier(process_set=c.member_of_other),
                 raises(HoroValueError, "not in")),
            case("process_set_removed", lambda c, n: c.mod.barrier(process_set=c.removed),
                 raises(HoroValueError, "removed")),
            case("name_not_str", lambda c, n: c.mod.barrier(name=3), raises(TypeError, "name", "int")),
        ],
        "broadcast_variables": [
            case("variables_none", lambda c, n: c.mod.broadcast_variables(None, 0), raises(TypeError, "variables")),
            case("root_str", lambda c, n: c.mod.broadcast_variables([v], "0", name=n),
                 raises(TypeError, "root_rank", "str")),
            case("root_out_of_range", lambda c, n: c.mod.broadcast_variables([v], SIZE, name=n),
                 raises(bad_argument, "root")),
            case("unsupported_dtype", lambda c, n: c.mod.broadcast_variables([tf.Variable([1j])], 0, name=n),
                 raises(TypeError, "bad.tf.broadcast_variables.unsupported_dtype", "complex")),
        ],
        "broadcast_": [
            case("variables_none", lambda c, n: c.mod.broadcast_(None, 0), raises(TypeError, "variables")),
            case("root_negative", lambda c, n: c.mod.broadcast_([v], -1, name=n), raises(bad_argument, "root")),
        ],
        "broadcast_object": [
            case("unpicklable_on_root_only",
                 lambda c, n: c.mod.broadcast_object(unpicklable() if RANK == 0 else 1, root_rank=0, name=n),
                 lambda c: raises(HoroValueError, "obj", "pickled")(c) if RANK == 0
                 else raises(HorovodInternalError, "refused", "rank(s) 0")(c)),
            case("root_str", lambda c, n: c.mod.broadcast_object(1, root_rank="0", name=n),
                 raises(TypeError, "root_rank", "str")),
        ],
        "broadcast_object_fn": [
            case("root_none", lambda c, n: c.mod.broadcast_object_fn(root_rank=None, name=n)(1),
                 raises(TypeError, "root_rank", "none")),
        ],
        "allgather_object": [
            case("unpicklable_on_rank_1_only",
                 lambda c, n: c.mod.allgather_object(unpicklable() if RANK == 1 else 1, name=n),
                 lambda c: raises(HoroValueError, "obj", "pickled")(c) if RANK == 1
                 else raises(HorovodInternalError, "refused", "rank(s) 1")(c)),
            case("process_set_removed", lambda c, n: c.mod.allgather_object(1, name=n, process_set=c.removed),
                 raises(HoroValueError, "removed")),
        ],
        "add_process_set": [
            case("ranks_none", lambda c, n: c.mod.add_process_set(None), raises(TypeError, "ranks")),
        ],
        "remove_process_set": [
            case("none", lambda c, n: c.mod.remove_process_set(None), raises(TypeError, "process_set")),
        ],
        "ProcessSet": [
            case("ranks_float", lambda c, n: c.mod.ProcessSet([0.5]), raises(TypeError, "ranks")),
        ],
        "process_set_included_op": [
            case("unknown_id", lambda c, n: c.mod.process_set_included_op(99), raises(HoroValueError, "99")),
        ],
        "DistributedGradientTape": [
            case("gradtape_none", lambda c, n: c.mod.DistributedGradientTape(None),
                 raises(TypeError, "gradtape", "nonetype")),
            case("op_unknown", lambda c, n: c.mod.DistributedGradientTape(tf.GradientTape(), op=99),
                 raises(ValueError, "op")),
        ],
        "DistributedOptimizer": [
            case("tf1_optimizer", lambda c, n: c.mod.DistributedOptimizer(object()),
                 raises(NotImplementedError, "keras")),
        ],
        "init": [
            case("comm_wrong_type", lambda c, n: c.mod.init(comm=5), raises(TypeError, "comm", "int")),
        ],
        "start_timeline": [
            case("file_path_none", lambda c, n: c.mod.start_timeline(None), raises(TypeError, "file_path")),
        ],
    }


NO_ROW = {
    "Compression": "a namespace of compressor classes",
    "elastic": "every member raises NotImplementedError (tests/test_horovod_api.py)",
    "BroadcastGlobalVariablesHook": "raises NotImplementedError whatever it is given (TF1 hooks)",
    "LocalGradientAggregationHelper": "raises NotImplementedError whatever it is given",
    "PartialDistributedGradientTape": "raises NotImplementedError whatever it is given",
    "SyncBatchNormalization": "raises NotImplementedError whatever it is given",
    "broadcast_global_variables": "raises NotImplementedError whatever it is given (TF1)",
}


def _table():
    out = {name: [(label, (fn, build)) for label, build in tensor_cases(fn)] for name, fn in FNS.items()}
    for name, rows in other_cases().items():
        out[name] = [(label, (None, build)) for label, build in rows]
    return out


_TABLE = _table()
ROWS = [(fn, label) for fn, rows in _TABLE.items() for label, _ in rows]


def test_every_public_function_has_rows():
    mod = API.module()
    functions = public_functions(mod)
    without_args = {f for f in functions if takes_no_required_argument(getattr(mod, f))}
    covered = set(_TABLE) | set(NO_ROW) | without_args
    assert functions - covered == set(), f"public functions without a bad-input row: {functions - covered}"
    assert set(_TABLE) - functions == set()


def test_collectives_before_init_raise_value_error():
    mod = API.module()
    assert not mod.is_initialized()
    x = API.tensor(data(RANK))
    problems = []
    for fname, call in {"allreduce": lambda: mod.allreduce(x), "allgather": lambda: mod.allgather(x),
                        "broadcast": lambda: mod.broadcast(x, 0), "alltoall": lambda: mod.alltoall(x),
                        "reducescatter": lambda: mod.reducescatter(x), "barrier": lambda: mod.barrier(),
                        "size": mod.size, "rank": mod.rank, "size_op": mod.size_op,
                        "broadcast_object": lambda: mod.broadcast_object(1)}.items():
        try:
            call()
            problems.append(f"{fname}: returned")
        except Exception as e:  # noqa: BLE001 - TF wraps some errors in its own classes
            if "not been initialized" not in str(e) and "not initialized" not in str(e):
                problems.append(f"{fname}: {type(e).__name__}: {str(e)[:200]}")
    assert not problems, "before init:\n  " + "\n  ".join(problems)


@pytest.fixture(scope="module")
def ctx():
    if SIZE < 2:
        pytest.skip("the table needs two ranks")
    mod = API.module()
    mod.init()
    singletons = [mod.add_process_set([r]) for r in range(SIZE)]
    removed = mod.add_process_set(list(range(SIZE)))
    mod.remove_process_set(removed)
    yield Context(mod, API, RANK, SIZE, singletons[(RANK + 1) % SIZE], removed)
    mod.shutdown()


@pytest.mark.parametrize("fn,label", ROWS, ids=[f"tensorflow.{f}.{c}" for f, c in ROWS])
def test_row(ctx, fn, label):
    spec, build = dict(_TABLE[fn])[label]
    name = f"bad.tf.{fn}.{label}"
    what = f"tensorflow.{fn}({label})"
    run_row(COMM, ctx, build(ctx, name), what)
    if spec is not None:
        good = [data(r) for r in range(SIZE)]
        spec.check(ctx, good)(spec.call(ctx, API.tensor(data(RANK)), name))
    check_good_collective(COMM, ctx, what)

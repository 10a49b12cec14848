"""Bad input to every public function of horo (NumPy) and horo.torch (issue #14, item 4).

One launch runs the whole table (tests/test_bad_input.py, np=2): calls before init first,
then every row (a clear exception naming the argument, on every rank, or a right result),
each followed by the same function called well under the same name and a good allreduce,
then double init and init -> shutdown -> init cycles. A public function without a row
(or a reason it has none) fails test_every_public_function_has_rows.

Runs inside each MPI rank (np >= 2; the asymmetric rows need a second rank).
"""
import numpy as np
import pytest
from mpi4py import MPI

from bad_input_table import (
    Case,
    Context,
    Raises,
    Returns,
    check_good_collective,
    data,
    public_functions,
    raises,
    ref_alltoall,
    ref_concat,
    ref_gather,
    ref_reduce,
    ref_reducescatter,
    ref_root,
    ref_scatter,
    ref_sum,
    run_row,
    takes_no_required_argument,
)

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
COMM = WORLD.Dup()


# ------------------------------------------------------------------ the two APIs


class NumpyApi:
    name = "numpy"
    has_read_only = True
    copies_non_contiguous = False  # refused: a copy would hide a caller's mistake in a hot loop

    def module(self):
        import horo

        return horo

    def tensor(self, a):
        return np.array(a, copy=True)

    def to_numpy(self, r):
        return np.asarray(r)

    def non_contiguous(self, a):
        b = np.zeros((2 * a.shape[0],) + a.shape[1:], a.dtype)
        b[::2] = a
        return b[::2]

    def bad_dtype(self):
        return np.ones(2 * SIZE, np.complex64)

    def read_only(self, a):
        a = np.array(a, copy=True)
        a.flags.writeable = False
        return a

    def sync_group(self, mod, handles):
        return [mod.synchronize(h) for h in handles]


class TorchApi(NumpyApi):
    name = "torch"
    has_read_only = False  # torch tensors have no read-only flag
    copies_non_contiguous = True  # out-of-place torch collectives copy (Horovod's behaviour)

    def module(self):
        import horo.torch

        return horo.torch

    def tensor(self, a):
        import torch

        return torch.from_numpy(np.array(a, copy=True))

    def to_numpy(self, r):
        return r.detach().numpy() if hasattr(r, "detach") else np.asarray(r)

    def non_contiguous(self, a):
        import torch

        b = np.zeros((2 * a.shape[0],) + a.shape[1:], a.dtype)
        b[::2] = a
        return torch.from_numpy(b)[::2]

    def bad_dtype(self):
        import torch

        return torch.ones(2 * SIZE, dtype=torch.complex64)

    def sync_group(self, mod, handle):
        return mod.synchronize(handle)


APIS = {"numpy": NumpyApi(), "torch": TorchApi()}


# ------------------------------------------------------------------ the tensor functions

class Fn:
    """How to call one tensor-taking function, and what it returns for good input.

    kinds: "reduce" (op, scale factors), "average" (the deprecated average= flag), "in_place",
    "rooted", "splits", "group" (a list of tensors; the row's tensor goes second, after a good one),
    "async" (returns a handle); zero_d: whether a 0-d tensor is fine (True) or refused on every rank."""

    def __init__(self, name, kinds, ref, zero_d=True):
        self.name, self.kinds, self.ref, self.zero_d = name, set(kinds), ref, zero_d

    def call(self, ctx, x, name, root=0, **kw):
        mod, f = ctx.mod, getattr(ctx.mod, self.name)
        if "reduce" in self.kinds:
            kw.setdefault("op", mod.Sum)
        if "group" in self.kinds:
            good = ctx.api.tensor(data(RANK))
            x = [good, x] if not kw.pop("raw", False) else x
        else:
            kw.pop("raw", None)
        if "rooted" in self.kinds:
            kw["root_rank"] = root
        result = f(x, name=name, **kw)
        if "async" in self.kinds:
            result = ctx.api.sync_group(mod, result) if "group" in self.kinds else mod.synchronize(result)
        if self.name.startswith("alltoall") and isinstance(result, tuple):  # (rows, received splits)
            result = result[0]
        if "group" in self.kinds:
            result = result[1]
        return result

    def tensor_name(self, name):
        """The name a message about the row's tensor carries (a group's second tensor is <name>.1)."""
        return f"{name}.1" if "group" in self.kinds else name

    def check(self, ctx, xs, root=0):
        expected = self.ref(xs, root)

        def check(result):
            if expected is None:
                assert result is None, f"expected None on rank {RANK}, got {type(result).__name__}"
                return
            got = ctx.api.to_numpy(result)
            assert got.shape == expected.shape and np.array_equal(got, expected), f"{got} != {expected}"

        return check


def tensor_fns(api):
    fns = [
        Fn("allreduce", {"reduce", "average"}, ref_sum),
        Fn("allreduce_", {"reduce", "average", "in_place"}, ref_sum),
        Fn("allreduce_async", {"reduce", "average", "async"}, ref_sum),
        Fn("allreduce_async_", {"reduce", "average", "in_place", "async"}, ref_sum),
        Fn("grouped_allreduce", {"reduce", "average", "group"}, ref_sum),
        Fn("grouped_allreduce_", {"reduce", "average", "in_place", "group"}, ref_sum),
        Fn("grouped_allreduce_async", {"reduce", "average", "group", "async"}, ref_sum),
        Fn("grouped_allreduce_async_", {"reduce", "average", "in_place", "group", "async"}, ref_sum),
        Fn("allgather", set(), ref_concat),
        Fn("allgather_async", {"async"}, ref_concat),
        Fn("grouped_allgather", {"group"}, ref_concat),
        Fn("grouped_allgather_async", {"group", "async"}, ref_concat),
        Fn("broadcast", {"rooted"}, ref_root),
        Fn("broadcast_", {"rooted", "in_place"}, ref_root),
        Fn("broadcast_async", {"rooted", "async"}, ref_root),
        Fn("broadcast_async_", {"rooted", "in_place", "async"}, ref_root),
        Fn("alltoall", {"splits"}, ref_alltoall, zero_d=False),
        Fn("alltoall_async", {"splits", "async"}, ref_alltoall, zero_d=False),
        Fn("reducescatter", {"reduce"}, ref_reducescatter, zero_d=False),
        Fn("reducescatter_async", {"reduce", "async"}, ref_reducescatter, zero_d=False),
        Fn("grouped_reducescatter", {"reduce", "group"}, ref_reducescatter, zero_d=False),
        Fn("grouped_reducescatter_async", {"reduce", "group", "async"}, ref_reducescatter, zero_d=False),
    ]
    if api.name == "numpy":
        fns += [
            Fn("gather", {"rooted"}, ref_gather),
            Fn("gather_async", {"rooted", "async"}, ref_gather),
            Fn("scatter", {"rooted"}, ref_scatter),
            Fn("scatter_async", {"rooted", "async"}, ref_scatter),
            Fn("reduce", {"rooted", "reduce"}, ref_reduce),
            Fn("reduce_async", {"rooted", "reduce", "async"}, ref_reduce),
        ]
    return {f.name: f for f in fns}


def tensor_cases(api, fn):
    """The rows of one tensor function: (label, build(ctx, name) -> Case)."""
    from horo import HoroError, HorovodInternalError, HoroValueError

    tn = fn.tensor_name
    rows = []

    def row(label, x, expect, **kw):
        def build(ctx, name):
            def call(c):
                k = _resolve_kwargs(c, dict(kw))
                return fn.call(c, x(c), k.pop("name_override", name), **k)

            return Case(label, call, expect(name))

        rows.append((label, build))

    good = lambda c: api.tensor(data(RANK))  # noqa: E731
    row("none", lambda c: None, lambda n: raises(TypeError, tn(n)))
    row("wrong_type_str", lambda c: "not a tensor", lambda n: raises(TypeError, tn(n)))
    row("wrong_type_dict", lambda c: {"a": 1}, lambda n: raises(TypeError, tn(n)))
    row("unsupported_dtype", lambda c: api.bad_dtype(), lambda n: raises(TypeError, tn(n), "complex"))
    # 0-d: a scalar is one row; where rows must split over the ranks, refused on every rank
    zero_d_inputs = [data(r, zero_d=True) for r in range(SIZE)]
    if fn.zero_d:
        row("zero_d", lambda c: api.tensor(zero_d_inputs[RANK]),
            lambda n: lambda ctx: Returns(fn.check(ctx, zero_d_inputs)))
    else:
        row("zero_d", lambda c: api.tensor(zero_d_inputs[RANK]), lambda n: raises(HoroError, tn(n)))
    inputs = [data(r) for r in range(SIZE)]
    if "in_place" in fn.kinds or not api.copies_non_contiguous:
        row("non_contiguous", lambda c: api.non_contiguous(data(RANK)),
            lambda n: raises(ValueError, tn(n), "contiguous"))
    else:
        row("non_contiguous", lambda c: api.non_contiguous(data(RANK)),
            lambda n: lambda ctx: Returns(fn.check(ctx, inputs)))
    if "in_place" in fn.kinds and api.has_read_only:
        row("read_only", lambda c: api.read_only(data(RANK)), lambda n: raises(ValueError, tn(n), "read-only"))
    row("name_not_str", good, lambda n: raises(TypeError, "name", "int"), name_override=7)
    row("process_set_not_member", good, lambda n: raises(HoroValueError, n, "not in"), ps="other")
    row("process_set_removed", good, lambda n: raises(HoroValueError, n, "removed"), ps="removed")
    row("process_set_wrong_type", good, lambda n: raises(TypeError, "process_set", "int"), ps=1)
    if "reduce" in fn.kinds:
        row("op_unknown", good, lambda n: raises(HoroValueError, "op", "99"), op=99)
        if "average" not in fn.kinds:  # an allreduce takes Adasum (tests/mpi/ranks_adasum.py)
            # Refused at the call (HoroValueError), or where the core's fast path took it, by every rank's
            # executor before anything moves (HorovodInternalError): on every rank either way.
            row("op_adasum", good, lambda n: raises((HoroValueError, HorovodInternalError), n, "Adasum"),
                op="adasum")
        row("prescale_not_a_number", good, lambda n: raises(TypeError, "prescale_factor", "str"),
            prescale_factor="2")
        row("postscale_none", good, lambda n: raises(TypeError, "postscale_factor", "none"), postscale_factor=None)
    if "average" in fn.kinds:
        row("op_and_average", good, lambda n: raises(HoroValueError, "average"), average=True)
    if "rooted" in fn.kinds:
        row("root_negative", good, lambda n: raises(HoroError, tn(n), "root"), root=-1)
        row("root_out_of_range", good, lambda n: raises(HoroError, tn(n), "root"), root=SIZE)
        row("root_str", good, lambda n: raises(TypeError, "root_rank", "str"), root="0")
        row("root_none", good, lambda n: raises(TypeError, "root_rank", "none"), root=None)
        row("root_float", good, lambda n: raises(TypeError, "root_rank", "float"), root=1.0)
    if "splits" in fn.kinds:
        row("splits_do_not_sum", good, lambda n: raises(HoroError, tn(n), "split"), splits=[1] * SIZE)
        row("splits_too_few", good, lambda n: raises(HoroError, tn(n), "split"), splits=[2 * SIZE])
        row("splits_negative", good, lambda n: raises(HoroError, tn(n), "split"),
            splits=[-1, 2 * SIZE + 1] + [0] * (SIZE - 2))
        row("splits_float", good, lambda n: raises(ValueError, "splits"), splits=[1.5] * SIZE)
        row("splits_str", good, lambda n: raises(ValueError, "splits"), splits="ab")
    if "group" in fn.kinds:
        row("tensors_none", lambda c: None, lambda n: raises(TypeError, "tensors", "none"), raw=True)
        row("tensors_bare_tensor", good, lambda n: raises(TypeError, "tensors"), raw=True)

    # one rank's bad tensor: the others' namesakes fail too, nobody waits
    def asymmetric(ctx, name):
        x = api.bad_dtype() if RANK == 1 else api.tensor(data(RANK))
        expect = (lambda c: Raises((TypeError,), (tn(name),))) if RANK == 1 else \
            (lambda c: Raises((HorovodInternalError,), ("refused", "rank(s) 1")))
        return Case("bad_on_rank_1_only", lambda c: fn.call(c, x, name), expect)

    rows.append(("bad_on_rank_1_only", asymmetric))

    # a name still in flight on this rank: refused at once, the first call unharmed. A name is free
    # again once its collective completed, so the last rank submits its namesake only after the
    # others tried the reuse: their first calls cannot have completed then.
    def in_flight(ctx, name):
        late = RANK == SIZE - 1
        first = [None if late else ctx.mod.allreduce_async(api.tensor(data(RANK)), name=tn(name), op=ctx.mod.Sum)]
        expected = sum(inputs)

        def call(c):
            if late:
                COMM.Barrier()
                first[0] = c.mod.allreduce_async(api.tensor(data(RANK)), name=tn(name), op=c.mod.Sum)
                return first[0]
            try:
                return fn.call(c, api.tensor(data(RANK)), name)
            finally:
                COMM.Barrier()

        def after(c):
            got = api.to_numpy(c.mod.synchronize(first[0]))
            assert np.array_equal(got, expected), f"the in-flight allreduce was harmed: {got}"

        expect = (lambda c: Returns(lambda handle: None)) if late else \
            (lambda c: Raises((HoroValueError,), (tn(name), "in flight")))
        return Case("name_in_flight", call, expect, after=after)

    # Not for grouped calls: their good first member is enqueued before the refusal and needs the
    # late rank's namesake, which that rank cannot send without racing its own first call.
    if "group" not in fn.kinds:
        rows.append(("name_in_flight", in_flight))
    return rows


def _resolve_kwargs(ctx, kw):
    ps = kw.pop("ps", None)
    if ps == "other":
        kw["process_set"] = ctx.member_of_other
    elif ps == "removed":
        kw["process_set"] = ctx.removed
    elif ps is not None:
        kw["process_set"] = ps
    if kw.get("op") == "adasum":
        kw["op"] = ctx.mod.Adasum
    return kw


# ------------------------------------------------------------------ the other functions

def other_cases(api):
    """fn name -> [(label, build(ctx, name) -> Case)] for the functions that take no tensor."""
    from horo import HoroError, HorovodInternalError, HoroValueError

    def case(label, call, expect, after=None):
        return label, lambda ctx, name: Case(label, lambda c: call(c, name), expect, after)

    unpicklable = lambda: (lambda: None)  # noqa: E731 - a lambda does not pickle
    rows = {
        "barrier": [
            case("process_set_not_member", lambda c, n: c.mod.barrier(process_set=c.member_of_other),
                 raises(HoroValueError, "not in")),
            case("process_set_removed", lambda c, n: c.mod.barrier(process_set=c.removed),
                 raises(HoroValueError, "removed")),
            case("process_set_wrong_type", lambda c, n: c.mod.barrier(process_set="all"),
                 raises(TypeError, "process_set", "str")),
        ],
        "poll": [
            case("handle_none", lambda c, n: c.mod.poll(None), raises(TypeError, "handle", "nonetype")),
            case("handle_str", lambda c, n: c.mod.poll("1"), raises(TypeError, "handle", "str")),
            case("handle_unknown", lambda c, n: c.mod.poll(10 ** 6), raises(HoroError, "unknown handle")),
        ],
        "synchronize": [
            case("handle_none", lambda c, n: c.mod.synchronize(None), raises(TypeError, "handle", "nonetype")),
            case("handle_float", lambda c, n: c.mod.synchronize(1.0), raises(TypeError, "handle", "float")),
            case("handle_unknown", lambda c, n: c.mod.synchronize(10 ** 6), raises(HoroError, "unknown handle")),
            case("handle_already_synchronized", lambda c, n: c.mod.synchronize(c.state["done_handle"]),
                 raises(HoroError, "already synchronized")),
        ],
        "broadcast_object": [
            # the root alone fails to pickle: the others must raise too, not wait for its bytes
            case("unpicklable_on_root_only",
                 lambda c, n: c.mod.broadcast_object(unpicklable() if RANK == 0 else 1, root_rank=0, name=n),
                 lambda c: Raises((HoroValueError,), ("obj", "pickled")) if RANK == 0
                 else Raises((HorovodInternalError,), ("refused", "rank(s) 0"))),
            case("root_negative", lambda c, n: c.mod.broadcast_object(1, root_rank=-1, name=n),
                 raises(HoroError, "root")),
            case("root_out_of_range", lambda c, n: c.mod.broadcast_object(1, root_rank=SIZE, name=n),
                 raises(HoroError, "root")),
            case("root_str", lambda c, n: c.mod.broadcast_object(1, root_rank="0", name=n),
                 raises(TypeError, "root_rank", "str")),
            case("root_none", lambda c, n: c.mod.broadcast_object(1, root_rank=None, name=n),
                 raises(TypeError, "root_rank", "none")),
            case("name_not_str", lambda c, n: c.mod.broadcast_object(1, name=7), raises(TypeError, "name", "int")),
            case("process_set_not_member", lambda c, n: c.mod.broadcast_object(
                1, root_rank=RANK, name=n, process_set=c.member_of_other), raises(HoroValueError, "not in")),
            case("process_set_removed", lambda c, n: c.mod.broadcast_object(1, name=n, process_set=c.removed),
                 raises(HoroValueError, "removed")),
        ],
        "allgather_object": [
            case("unpicklable_on_rank_1_only",
                 lambda c, n: c.mod.allgather_object(unpicklable() if RANK == 1 else 1, name=n),
                 lambda c: Raises((HoroValueError,), ("obj", "pickled")) if RANK == 1
                 else Raises((HorovodInternalError,), ("refused", "rank(s) 1"))),
            case("name_not_str", lambda c, n: c.mod.allgather_object(1, name=7), raises(TypeError, "name", "int")),
            case("process_set_not_member", lambda c, n: c.mod.allgather_object(
                1, name=n, process_set=c.member_of_other), raises(HoroValueError, "not in")),
            case("process_set_removed", lambda c, n: c.mod.allgather_object(1, name=n, process_set=c.removed),
                 raises(HoroValueError, "removed")),
        ],
        "add_process_set": [
            case("ranks_none", lambda c, n: c.mod.add_process_set(None), raises(TypeError, "ranks")),
            case("ranks_str", lambda c, n: c.mod.add_process_set(["0"]), raises(TypeError, "ranks")),
            case("rank_twice", lambda c, n: c.mod.add_process_set([0, 0]), raises(HoroError, "add_process_set")),
            case("rank_out_of_range", lambda c, n: c.mod.add_process_set([0, SIZE]), raises(HoroError, str(SIZE))),
            case("already_added", lambda c, n: c.mod.add_process_set(c.member_of_other),
                 raises(HoroValueError, "already been added")),
        ],
        "remove_process_set": [
            case("none", lambda c, n: c.mod.remove_process_set(None), raises(TypeError, "process_set")),
            case("ranks_list", lambda c, n: c.mod.remove_process_set([0]), raises(TypeError, "process_set")),
            case("global_set", lambda c, n: c.mod.remove_process_set(c.mod.global_process_set),
                 raises(HoroValueError, "cannot be removed")),
            case("removed_twice", lambda c, n: c.mod.remove_process_set(c.removed),
                 raises(HoroValueError, "cannot be removed")),
        ],
        "ProcessSet": [
            case("ranks_none", lambda c, n: c.mod.ProcessSet(None), raises(TypeError, "ranks")),
            case("ranks_float", lambda c, n: c.mod.ProcessSet([0.5]), raises(TypeError, "ranks")),
        ],
        "init": [
            case("comm_wrong_type", lambda c, n: c.mod.init(comm="MPI_COMM_WORLD"), raises(TypeError, "comm", "str")),
            case("process_sets_already_added", lambda c, n: c.mod.init(process_sets=[c.member_of_other]),
                 raises(HoroValueError, "already been added")),
        ],
        "start_timeline": [
            case("file_path_none", lambda c, n: c.mod.start_timeline(None), raises(TypeError, "file_path", "none")),
        ],
    }
    # Point-to-point: a bad argument is this rank's own, refused at the call (nothing is posted).
    def p2p_rows(fn):
        t = lambda: api.tensor(data(RANK))  # noqa: E731
        call = (lambda c, n, peer=0, tag=0, **kw: getattr(c.mod, fn)(t(), peer, tag=tag, name=n, **kw))
        return [
            case("peer_outside_the_set", lambda c, n: call(c, n, peer=10 ** 6), raises(HoroValueError, "rank", "not in")),
            case("peer_float", lambda c, n: call(c, n, peer=0.0), raises(TypeError, "peer", "int")),
            case("tag_negative", lambda c, n: call(c, n, tag=-1), raises(HoroValueError, "tag -1")),
            case("process_set_not_member", lambda c, n: call(c, n, process_set=c.member_of_other),
                 raises(HoroValueError, "not in")),
        ]

    for fn in ("send", "isend", "recv", "irecv"):
        rows[fn] = p2p_rows(fn)
    rows["batch_isend_irecv"] = [
        case("op_unknown", lambda c, n: c.mod.batch_isend_irecv([c.mod.P2POp("put", api.tensor(data(RANK)), 0)], name=n),
             raises(HoroValueError, "'send' or 'recv'")),
        case("peer_outside_the_set", lambda c, n: c.mod.batch_isend_irecv(
            [c.mod.P2POp("send", api.tensor(data(RANK)), 10 ** 6)], name=n), raises(HoroValueError, "not in")),
    ]
    if api.name == "torch":
        import torch

        param = torch.nn.Parameter(torch.ones(3))
        rows["broadcast_parameters"] = [
            case("params_none", lambda c, n: c.mod.broadcast_parameters(None), raises(ValueError, "params")),
            case("root_str", lambda c, n: c.mod.broadcast_parameters({"w": torch.ones(2)}, root_rank="0"),
                 raises(TypeError, "root_rank", "str")),
            case("root_out_of_range", lambda c, n: c.mod.broadcast_parameters({"w": torch.ones(2)}, root_rank=SIZE),
                 raises(HoroError, "root")),
            case("not_a_tensor", lambda c, n: c.mod.broadcast_parameters({"w": [1, 2]}),
                 raises(TypeError, "broadcast_parameters.w", "list")),
        ]
        rows["broadcast_optimizer_state"] = [
            case("optimizer_none", lambda c, n: c.mod.broadcast_optimizer_state(None),
                 raises(TypeError, "optimizer", "nonetype")),
            case("root_str", lambda c, n: c.mod.broadcast_optimizer_state(torch.optim.SGD([param], lr=0.1),
                                                                           root_rank="0"),
                 raises(TypeError, "root_rank", "str")),
        ]
        rows["sparse_allreduce_async"] = [
            case("dense_tensor", lambda c, n: c.mod.sparse_allreduce_async(torch.ones(3), n, c.mod.Sum),
                 raises(ValueError, "sparse")),
            case("op_max", lambda c, n: c.mod.sparse_allreduce_async(torch.ones(3).to_sparse(), n, c.mod.Max),
                 raises(ValueError, "Sum and Average")),
        ]
        rows["DistributedOptimizer"] = [
            case("optimizer_none", lambda c, n: c.mod.DistributedOptimizer(None),
                 raises(TypeError, "optimizer", "nonetype")),
            case("named_parameters_not_pairs", lambda c, n: c.mod.DistributedOptimizer(
                torch.optim.SGD([param], lr=0.1), named_parameters=[param]), raises(ValueError, "named_parameters")),
            case("op_unknown", lambda c, n: c.mod.DistributedOptimizer(torch.optim.SGD([param], lr=0.1), op=99),
                 raises(ValueError, "op")),
        ]
    return rows


# Public names with no row, and why. Functions that take no argument (checked below) get
# only the lifecycle rows (before init, after shutdown).
NO_ROW = {
    "P2POp": "a named tuple; batch_isend_irecv checks its fields (rows above)",
    "Compression": "a namespace of compressor classes, no function of its own",
    "SyncBatchNorm": "a torch.nn module: its arguments are torch's BatchNorm's",
    "elastic": "every member raises NotImplementedError (tests/test_horovod_api.py)",
    "join": "takes nothing that can be wrong (torch's join(device) ignores device, as documented)",
}
WORKS_BEFORE_INIT = {"is_initialized", "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built",
                     "ddl_built", "ccl_built", "cuda_built", "rocm_built", "sycl_built", "gpu_available", "gpu_info",
                     "nccl_version", "tunables", "ProcessSet", "stop_timeline", "Compression", "SyncBatchNorm",
                     "elastic", "DistributedOptimizer", "P2POp"}


def table(api):
    """fn name -> [(label, build)] for one API."""
    out = {name: [(label, ("tensor", fn, build)) for label, build in tensor_cases(api, fn)]
           for name, fn in tensor_fns(api).items()}
    for name, rows in other_cases(api).items():
        out[name] = [(label, ("other", None, build)) for label, build in rows]
    return out


ROWS = [(api_name, fn, label) for api_name, api in APIS.items() for fn, rows in table(api).items()
        for label, _ in rows]
_TABLES = {name: table(api) for name, api in APIS.items()}


# ------------------------------------------------------------------ the tests, in order


def _good_call(api, mod, name):
    """Every function of `api`, called well: for the lifecycle rows."""
    calls = {fn.name: (lambda fn=fn: fn.call(Context(mod, api, RANK, SIZE), api.tensor(data(RANK)), "lifecycle"))
             for fn in tensor_fns(api).values()}
    calls.update({
        "barrier": lambda: mod.barrier(), "join": lambda: mod.join(), "poll": lambda: mod.poll(0),
        "synchronize": lambda: mod.synchronize(0), "broadcast_object": lambda: mod.broadcast_object(1),
        "allgather_object": lambda: mod.allgather_object(1), "add_process_set": lambda: mod.add_process_set([0]),
        "remove_process_set": lambda: mod.remove_process_set(mod.global_process_set),
        "init": None, "start_timeline": lambda: mod.start_timeline("/tmp/horo-bad-input-never.json"),
        "send": lambda: mod.send(api.tensor(data(RANK)), 0), "recv": lambda: mod.recv(api.tensor(data(RANK)), 0),
        "isend": lambda: mod.isend(api.tensor(data(RANK)), 0), "irecv": lambda: mod.irecv(api.tensor(data(RANK)), 0),
        "batch_isend_irecv": lambda: mod.batch_isend_irecv([mod.P2POp("send", api.tensor(data(RANK)), 0)]),
    })
    if api.name == "torch":
        import torch

        calls["broadcast_parameters"] = lambda: mod.broadcast_parameters({"w": torch.ones(2)})
        calls["broadcast_optimizer_state"] = lambda: mod.broadcast_optimizer_state(
            torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1))
        calls["sparse_allreduce_async"] = lambda: mod.sparse_allreduce_async(torch.ones(3).to_sparse(), "s", mod.Sum)
    return calls


def _expect_not_initialized(api, what):
    """Every public function raises ValueError 'not been initialized' (or is one that works without init)."""
    mod = api.module()
    calls = _good_call(api, mod, what)
    problems = []
    for fname in sorted(public_functions(mod)):
        if fname in WORKS_BEFORE_INIT or fname in ("init", "shutdown"):
            continue
        fn = calls.get(fname) or getattr(mod, fname)
        try:
            fn()
        except ValueError as e:
            if "not been initialized" not in str(e) and "cannot be removed" not in str(e):
                problems.append(f"{fname}: ValueError without 'not been initialized': {e}")
        except Exception as e:  # noqa: BLE001
            problems.append(f"{fname}: {type(e).__name__}: {e}")
        else:
            problems.append(f"{fname}: returned")
    assert not problems, f"{api.name} {what}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("api_name", list(APIS))
def test_every_public_function_raises_value_error_before_init(api_name):
    import horo

    assert not horo.is_initialized()
    _expect_not_initialized(APIS[api_name], "before init")


@pytest.mark.parametrize("api_name", list(APIS))
def test_every_public_function_has_rows(api_name):
    api = APIS[api_name]
    mod = api.module()
    functions = public_functions(mod)
    without_args = {f for f in functions if takes_no_required_argument(getattr(mod, f))}
    covered = set(_TABLES[api_name]) | set(NO_ROW) | without_args
    assert functions - covered == set(), f"{api_name}: public functions without a bad-input row: {functions - covered}"
    assert set(_TABLES[api_name]) - functions == set(), f"rows for functions {api_name} does not export"


@pytest.fixture(scope="module")
def contexts():
    if SIZE < 2:
        pytest.skip("the table needs two ranks (sets this rank is not in, one rank's bad input)")
    import horo

    horo.init()
    singletons = [horo.add_process_set([r]) for r in range(SIZE)]  # every rank adds them all, in one order
    member_of_other = singletons[(RANK + 1) % SIZE]
    removed = horo.add_process_set(list(range(SIZE)))
    horo.remove_process_set(removed)
    done = horo.allreduce_async(np.ones(1, np.float32), name="done.handle")
    horo.synchronize(done)
    out = {name: Context(api.module(), api, RANK, SIZE, member_of_other, removed, {"done_handle": done})
           for name, api in APIS.items()}
    yield out


@pytest.mark.parametrize("api_name,fn,label", ROWS, ids=[f"{a}.{f}.{c}" for a, f, c in ROWS])
def test_row(contexts, api_name, fn, label):
    ctx = contexts[api_name]
    kind, spec, build = dict(_TABLES[api_name][fn])[label]
    name = f"bad.{api_name}.{fn}.{label}"
    case = build(ctx, name)
    what = f"{api_name}.{fn}({label})"
    run_row(COMM, ctx, case, what)
    if kind == "tensor":
        # the same function, called well under the same name, works: nothing was left in flight
        good = [data(r) for r in range(SIZE)]
        result = spec.call(ctx, ctx.api.tensor(data(RANK)), name)
        spec.check(ctx, good)(result)
    check_good_collective(COMM, ctx, what)


def test_double_init_is_a_no_op(contexts):
    import horo

    ctx = contexts["numpy"]
    horo.init()
    assert horo.is_initialized() and horo.size() == SIZE
    check_good_collective(COMM, ctx, "double init")
    # a process set added before the second init is still there
    assert horo.allgather_object(RANK, process_set=None) == list(range(SIZE))


def test_init_shutdown_init_cycles_leave_a_working_library(contexts):
    import horo

    ps = contexts["numpy"].member_of_other
    for cycle in range(2):
        horo.shutdown()
        assert not horo.is_initialized()
        for api in APIS.values():
            _expect_not_initialized(api, f"after shutdown (cycle {cycle})")
        horo.init()
        assert horo.is_initialized() and horo.size() == SIZE
        for name, ctx in contexts.items():
            check_good_collective(COMM, ctx, f"{name} after init->shutdown->init cycle {cycle}")
        # a set added before shutdown is gone with the engine that knew it
        run_row(COMM, contexts["numpy"], Case(
            "stale_set", lambda c: horo.allreduce(np.ones(2, np.float32), name="stale", process_set=ps),
            raises(horo.HoroValueError, "stale", "removed")), f"process set from before shutdown (cycle {cycle})")
        fresh = horo.add_process_set(list(range(SIZE)))
        got = horo.allreduce(np.full(2, RANK, np.float32), op=horo.Sum, name=f"fresh.{cycle}", process_set=fresh)
        assert np.array_equal(got, np.full(2, sum(range(SIZE)), np.float32))
        horo.remove_process_set(fresh)

"""ProcessGroupHoro: a torch.distributed process group written in Python over horo.torch.

torch calls these methods with its own argument shapes (lists of tensors, *Options
objects, group ranks); each one turns the call into horo collectives on the group's
process set and returns a HoroWork. Ranks given by torch are group ranks; horo's roots
and peers are global ranks, so they are translated through `self.global_ranks`.

Names: every rank issues a group's operations in the same order (torch's contract, which
gloo relies on too), so the n-th operation of a group gets the same name on every rank.
Names cycle through NAME_WINDOW slots: a training step that repeats the same operations
then reuses names with the same shapes, which horo's response cache answers without a
full negotiation.
"""
import datetime
import itertools

import torch
import torch.distributed as dist

import horo.torch as hvd
from horo.enqueue import enqueue as enqueue_array
from horo.enqueue import plain_call, refusing
from horo.handles import blocking
from horo.process_sets import global_process_set
from horo.torch.enqueue import enqueue
from horo.torch.tensors import checked, from_core

from horo.torch.distributed import p2p
from horo.torch.distributed.all_to_all import AllToAll
from horo.torch.distributed.reduce_ops import fold_gathered, plain_reduction, reduction
from horo.torch.distributed.work import HoroWork

BACKEND_NAME = "horo"
# More operations than this in flight on one group, unsynchronized, would reuse a name still in use
# (horo refuses that with an error naming it); a step's worth of collectives is far fewer.
NAME_WINDOW = 512
_TOKEN = torch.zeros(0, dtype=torch.uint8)
# The core's lane for a blocking in-place allreduce of a plain array in the global set (bindings.cc run_plain).
_plain_allreduce_ = plain_call("allreduce", in_place=True)
# dtypes whose CPU tensors NumPy views without a copy (not bfloat16, not bool: those take the general path).
_NUMPY_VIEWABLE = frozenset((torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int16,
                             torch.int8, torch.uint8))


def _nothing(_result):
    return None


def _rows_of(tensor):
    return tensor.reshape(1) if tensor.dim() == 0 else tensor


class ProcessGroupHoro(AllToAll, dist.ProcessGroup):
    """The "horo" backend's process group: `global_ranks[i]` is the global rank of group rank i."""

    def __init__(self, store, rank, size, global_ranks, process_set, timeout=None, group_name=""):
        super().__init__(rank, size)
        self._store = store
        self.global_ranks = list(global_ranks)
        self._rank = self.global_ranks.index(hvd.rank())
        self.process_set = process_set
        self.timeout = timeout or datetime.timedelta(minutes=30)
        self._group_name = group_name
        self._group_desc = ""
        self._seq = itertools.count()
        self._barriers = itertools.count()
        self._coalesced = None  # between _start_coalescing and _end_coalescing: the Works issued

    # --- identity, as torch asks for it ----------------------------------------------------------

    def getBackendName(self):
        return BACKEND_NAME

    def getRank(self):
        return self._rank

    def getSize(self):
        return len(self.global_ranks)

    def setGroupName(self, name):
        self._group_name = name

    def getGroupName(self):
        return self._group_name

    def setGroupDesc(self, desc):
        self._group_desc = desc

    def getGroupDesc(self):
        return self._group_desc

    def get_group_store(self):
        return self._store

    def __repr__(self):
        return f"ProcessGroupHoro(name={self._group_name!r}, ranks={self.global_ranks})"

    # --- how every operation runs --------------------------------------------------------------------

    def _name(self, what):
        return f"c10d.{self._group_name}.{what}.{next(self._seq) % NAME_WINDOW}"

    def _run(self, what, opts, start):
        """start(name) -> (handles, finish, outputs). An operation torch will wait for at once
        (opts.asyncOp False) runs as a blocking horo call: the core runs it on this thread."""
        name = self._name(what)
        if opts is not None and not getattr(opts, "asyncOp", True):
            work = _run_now(what, name, start)
        else:
            handles, finish, outputs = start(name)
            work = HoroWork(handles, finish, outputs, what)
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def _global(self, group_rank, what):
        if not 0 <= group_rank < len(self.global_ranks):
            raise ValueError(f"horo backend: {what}: rank {group_rank} is not in this group of {len(self.global_ranks)}")
        return self.global_ranks[group_rank]

    def _refusing(self, collective, name):
        """Checks made here before enqueueing: a failure reaches the other ranks, whose namesake fails too."""
        return refusing(collective, name, self.process_set)

    # --- reductions ------------------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        if not opts.asyncOp and len(tensors) == 1:
            work = self._allreduce_now(tensors[0], opts)
            if work is not None:
                return work
        return self._allreduce(list(tensors), opts, "allreduce")

    def _allreduce_now(self, tensor, opts):
        """dist.all_reduce(t) of a plain CPU tensor: ONE call into the core, on this thread (horo's
        blocking NumPy path over a view of the tensor). None where the general path is needed."""
        if not (tensor.is_cpu and tensor.is_contiguous() and tensor.dtype in _NUMPY_VIEWABLE):
            return None
        # No bool here (not NumPy-viewable), so the plain ops need no look at the tensors.
        red = plain_reduction(opts.reduceOp) or reduction(opts.reduceOp, (tensor,), "allreduce")
        if red.fold is not None:
            return None
        name = f"{self._name('allreduce')}.0"
        array = tensor.detach().numpy()
        if self.process_set is not global_process_set or \
                _plain_allreduce_(array, name, None, 0, red.op, red.prescale) is NotImplemented:
            enqueue_array("allreduce", name, array, array, _nothing, red.op, red.prescale, 1.0,
                          process_set=self.process_set, waits=True)
        return HoroWork.finished([tensor], "allreduce")

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        return self._allreduce(list(tensors), opts, "allreduce_coalesced")

    def _allreduce(self, tensors, opts, what):
        def start(name):
            try:
                red = reduction(opts.reduceOp, tensors, what)
            except Exception as e:
                self._refusing("allreduce", [f"{name}.{i}" for i in range(len(tensors))]).announce(e)
                raise
            if red.fold is not None:
                return self._folded_allreduce(tensors, red, name)
            staged = [t if t.is_contiguous() else t.contiguous() for t in tensors]
            if len(staged) == 1:  # DDP's buckets and most calls: the single-tensor path, no group bookkeeping
                handle = hvd.allreduce_async_(staged[0], name=f"{name}.0", op=red.op, prescale_factor=red.prescale,
                                              process_set=self.process_set)
            else:
                handle = hvd.grouped_allreduce_async_(staged, name=name, op=red.op, prescale_factor=red.prescale,
                                                      process_set=self.process_set)

            def finish(_values):
                for t, s in zip(tensors, staged):
                    if s is not t:
                        t.copy_(s)
                return tensors

            return [handle], finish, tensors

        return self._run(what, opts, start)

    def _folded_allreduce(self, tensors, red, name):
        # Bitwise ops and bool: every rank's tensor is gathered and folded here, in rank order.
        size = self.getSize()
        flat = [_rows_of(t).reshape(1, -1) for t in tensors]
        handle = hvd.grouped_allgather_async(flat, name=name, process_set=self.process_set)

        def finish(values):
            for t, gathered in zip(tensors, values[0]):
                t.copy_(fold_gathered(gathered, red.fold, size).reshape(t.shape))
            return tensors

        return [handle], finish, tensors

    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceOptions()
        tensor = tensors[0]
        root = self._global(opts.rootRank, "reduce")

        def start(name):
            with self._refusing("reduce", name):
                red = reduction(opts.reduceOp, [tensor], "reduce")
                if red.fold is not None:
                    raise NotImplementedError(f"horo backend: reduce with ReduceOp.{red.kind.name} on {tensor.dtype} "
                                              f"(use all_reduce, which folds bitwise ops)")
                t = checked(tensor, name)
            output = torch.empty_like(t)
            handle = enqueue("reduce", name, t, output, lambda _result: output, red.op, red.prescale, 1.0,
                             root=root, process_set=self.process_set)

            def finish(_values):
                if hvd.rank() == root:
                    tensor.copy_(output)
                return [tensor]

            return [handle], finish, [tensor]

        return self._run("reduce", opts, start)

    # --- broadcast ---------------------------------------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        root = self._global(opts.rootRank, "broadcast")
        tensors = list(tensors)

        def start(name):
            staged = [t if t.is_contiguous() else t.contiguous() for t in tensors]
            handles = [hvd.broadcast_async_(s, root, name=f"{name}.{i}", process_set=self.process_set)
                       for i, s in enumerate(staged)]

            def finish(_values):
                for t, s in zip(tensors, staged):
                    if s is not t:
                        t.copy_(s)
                return tensors

            return handles, finish, tensors

        return self._run("broadcast", opts, start)

    # --- all-gathers -------------------------------------------------------------------------------------

    def allgather(self, output_tensors, input_tensors, opts=None):
        """output_tensors[i][r] <- rank r's input_tensors[i]; every rank's input has the same shape,
        which horo checks: each is gathered as one row of shape (1, *shape)."""
        inputs = list(input_tensors)
        outputs = [list(o) for o in output_tensors]

        def start(name):
            with self._refusing("allgather", [f"{name}.{i}" for i in range(len(inputs))]):
                for i, (out, t) in enumerate(zip(outputs, inputs)):
                    if len(out) != self.getSize():
                        raise ValueError(f"horo backend: all_gather: output list {i} holds {len(out)} tensors for a "
                                         f"group of {self.getSize()}")
            rows = [t.reshape(1, *t.shape) for t in inputs]
            handle = hvd.grouped_allgather_async(rows, name=name, process_set=self.process_set)

            def finish(values):
                for out, gathered in zip(outputs, values[0]):
                    for r, o in enumerate(out):
                        o.copy_(gathered[r].reshape(o.shape))
                return outputs

            return [handle], finish, outputs

        return self._run("allgather", opts, start)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self.allgather(output_lists, input_list, opts)

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_into(["all_gather_into_tensor"], [output], [input], opts)

    def _allgather_base(self, output, input, opts=None):
        return self.all_gather_single(output, input, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._allgather_into(["allgather_into_tensor_coalesced"], list(outputs), list(inputs), opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._allgather_into(["all_gather_single_coalesced"], list(outputs), list(inputs), opts)

    def _allgather_into(self, what, outputs, inputs, opts):
        size = self.getSize()

        def start(name):
            with self._refusing("allgather", [f"{name}.{i}" for i in range(len(inputs))]):
                for out, t in zip(outputs, inputs):
                    if out.numel() != size * t.numel():
                        raise ValueError(f"horo backend: {what[0]}: output has {out.numel()} elements, expected "
                                         f"{size} x {t.numel()} (group size x input)")
            rows = [t.reshape(1, *t.shape) for t in inputs]
            handle = hvd.grouped_allgather_async(rows, name=name, process_set=self.process_set)

            def finish(values):
                for out, gathered in zip(outputs, values[0]):
                    out.copy_(gathered.reshape(out.shape))
                return outputs

            return [handle], finish, outputs

        return self._run(what[0], opts, start)

    # --- gather and scatter --------------------------------------------------------------------------------

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.GatherOptions()
        root = self._global(opts.rootRank, "gather")
        tensor = input_tensors[0]
        outputs = list(output_tensors[0]) if output_tensors else []

        def start(name):
            with self._refusing("gather", name):
                if hvd.rank() == root and len(outputs) != self.getSize():
                    raise ValueError(f"horo backend: gather: gather_list holds {len(outputs)} tensors for a group of "
                                     f"{self.getSize()}")
                t = checked(tensor.reshape(1, *tensor.shape), name)
            dtype = t.dtype
            handle = enqueue("gather", name, t, None,
                             lambda result: None if result is None else from_core(result[0], result[1], dtype),
                             root=root, process_set=self.process_set)

            def finish(values):
                if hvd.rank() == root:
                    for r, o in enumerate(outputs):
                        o.copy_(values[0][r].reshape(o.shape))
                return [outputs] if outputs else []

            return [handle], finish, [outputs] if outputs else []

        return self._run("gather", opts, start)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.ScatterOptions()
        root = self._global(opts.rootRank, "scatter")
        output = output_tensors[0]
        size = self.getSize()

        def start(name):
            with self._refusing("scatter", name):
                if hvd.rank() == root:
                    parts = list(input_tensors[0])
                    if len(parts) != size:
                        raise ValueError(f"horo backend: scatter: scatter_list holds {len(parts)} tensors for a "
                                         f"group of {size}")
                    source = torch.stack([p.reshape(output.shape) for p in parts])
                else:
                    # Every rank passes the root's shape; only the root's values are read.
                    source = torch.empty((size, *output.shape), dtype=output.dtype, device=output.device)
                source = checked(source, name)
            received = torch.empty((1, *output.shape), dtype=output.dtype, device=output.device)
            handle = enqueue("scatter", name, source, received, lambda _result: received, root=root,
                             process_set=self.process_set)

            def finish(_values):
                output.copy_(received[0])
                return [output]

            return [handle], finish, [output]

        return self._run("scatter", opts, start)

    # --- reduce-scatters -------------------------------------------------------------------------------------

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        """output_tensors[i] <- the reduction over ranks of their input_tensors[i][this rank]."""
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        outputs = list(output_tensors)
        size = self.getSize()

        def start(name):
            with self._refusing("reducescatter", [f"{name}.{i}" for i in range(len(outputs))]):
                red = reduction(opts.reduceOp, outputs, "reduce_scatter")
                if red.fold is not None:
                    raise NotImplementedError(f"horo backend: reduce_scatter with ReduceOp.{red.kind.name}")
                stacked = []
                for i, (out, parts) in enumerate(zip(outputs, input_tensors)):
                    if len(parts) != size:
                        raise ValueError(f"horo backend: reduce_scatter: input list {i} holds {len(parts)} tensors "
                                         f"for a group of {size}")
                    stacked.append(torch.stack([p.reshape(out.shape) for p in parts]))
            handle = hvd.grouped_reducescatter_async(stacked, name=name, op=red.op, process_set=self.process_set,
                                                     prescale_factor=red.prescale)

            def finish(values):
                for out, share in zip(outputs, values[0]):
                    out.copy_(share.reshape(out.shape))
                return outputs

            return [handle], finish, outputs

        return self._run("reduce_scatter", opts, start)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_from(["reduce_scatter_tensor"], [output], [input], opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self.reduce_scatter_single(output, input, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._reduce_scatter_from(["reduce_scatter_tensor_coalesced"], list(outputs), list(inputs), opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._reduce_scatter_from(["reduce_scatter_single_coalesced"], list(outputs), list(inputs), opts)

    def _reduce_scatter_from(self, what, outputs, inputs, opts):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        size = self.getSize()

        def start(name):
            with self._refusing("reducescatter", [f"{name}.{i}" for i in range(len(inputs))]):
                red = reduction(opts.reduceOp, inputs, what[0])
                if red.fold is not None:
                    raise NotImplementedError(f"horo backend: {what[0]} with ReduceOp.{red.kind.name}")
                for out, t in zip(outputs, inputs):
                    if t.numel() != size * out.numel():
                        raise ValueError(f"horo backend: {what[0]}: input has {t.numel()} elements, expected "
                                         f"{size} x {out.numel()} (group size x output)")
            # One row per rank: rank r's share is row r, whatever the tensors' own shapes.
            rows = [t.reshape(size, -1) for t in inputs]
            handle = hvd.grouped_reducescatter_async(rows, name=name, op=red.op, process_set=self.process_set,
                                                     prescale_factor=red.prescale)

            def finish(values):
                for out, share in zip(outputs, values[0]):
                    out.copy_(share.reshape(out.shape))
                return outputs

            return [handle], finish, outputs

        return self._run(what[0], opts, start)

    # --- barriers ------------------------------------------------------------------------------------------------

    def barrier(self, opts=None):
        def start(name):
            handle = enqueue("barrier", name, _TOKEN, _TOKEN, lambda _result: None, process_set=self.process_set)
            return [handle], None, []

        return self._run("barrier", opts, start)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """gloo's monitored barrier through the store: group rank 0 waits for every rank's key and
        names those that did not arrive within `timeout`; then releases the others."""
        from horo.torch.distributed.monitored_barrier import monitored_barrier

        monitored_barrier(self, next(self._barriers), timeout or self.timeout, wait_all_ranks)

    # --- point-to-point --------------------------------------------------------------------------------------------

    def send(self, tensors, dstRank, tag=0):
        return p2p.send(self, tensors[0], self._global(dstRank, "send"), tag)

    def recv(self, tensors, srcRank, tag=0):
        return p2p.recv(self, tensors[0], self._global(srcRank, "recv"), tag)

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError("horo backend: recv from any source (src=None) is not supported; name the source rank")

    # --- coalescing (torch's _coalescing_manager asks every backend) ------------------------------------------------

    def _start_coalescing(self, device):
        self._coalesced = []

    def _end_coalescing(self, device):
        # torch keeps only this Work (it replaces the fast path's): it must cover every operation issued since.
        works, self._coalesced = self._coalesced or [], None
        return HoroWork(finish=lambda _values: [w.wait() for w in works] and [], what="coalesced")


@blocking
def _run_now(what, name, start):
    # Inside @blocking, horo's enqueue tells the core the caller waits: it runs the cycle on this thread.
    handles, finish, outputs = start(name)
    work = HoroWork(handles, finish, outputs, what)
    work._complete()
    return work

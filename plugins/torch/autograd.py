"""Gradients through the synchronous out-of-place collectives, as Horovod defines them.

Horovod's convention, kept so ported models train identically: each rank's loss is
a share of one global loss whose gradients the DistributedOptimizer averages. So
- allreduce:     backward allreduces the gradient with the same op and scale factors
                 (Sum and Average; Min/Max/Product have no gradient here and raise);
- allgather:     backward averages the gradient over ranks and keeps this rank's rows
                 (first dimensions may differ per rank: they are allgathered);
- broadcast:     backward averages the gradient over ranks onto the root; zero elsewhere;
- alltoall:      backward sends each gradient row back where its row came from
                 (an alltoall with the received splits);
- reducescatter: backward allgathers the gradient (times the scale factors, / size for Average).
"""
import torch

from horo import ops
from horo.process_sets import global_process_set
from horo.torch import collectives
from horo.torch.handles import GroupHandle, synchronize
from horo.torch.tensors import checked

_NO_GRADIENT = {ops.Min: "Min", ops.Max: "Max", ops.Product: "Product"}


def _require_linear(op, what):
    if op in _NO_GRADIENT:
        raise NotImplementedError(f"{what}: no gradient for op {_NO_GRADIENT[op]}, only for Sum and Average")


def _set(process_set):
    return global_process_set if process_set is None else process_set


def _average(grad, process_set):
    return synchronize(collectives.allreduce_async(grad, op=ops.Average, process_set=process_set))


def _allgather_rows(grad, process_set):
    return synchronize(collectives.allgather_async(grad, process_set=process_set))


def _precheck(tensors, names):
    # Every tensor of a group is checked before the first is enqueued: nothing is left half-submitted.
    for t, n in zip(tensors, names):
        checked(t, n)


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (name, op, prescale_factor, postscale_factor, process_set)
        return synchronize(collectives.allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                                       postscale_factor=postscale_factor, process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        name, op, pre, post, process_set = ctx.args
        _require_linear(op, f"allreduce '{name}'")
        reduced = synchronize(collectives.allreduce_async(grad, op=op, prescale_factor=pre, postscale_factor=post,
                                                          process_set=process_set))
        return reduced, None, None, None, None, None


class GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, names, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (names, op, prescale_factor, postscale_factor, process_set)
        _precheck(tensors, names)
        handles = [
            collectives.allreduce_async(t, name=n, op=op, prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor, process_set=process_set)
            for t, n in zip(tensors, names)
        ]
        return tuple(synchronize(GroupHandle(handles)))

    @staticmethod
    def backward(ctx, *grads):
        names, op, pre, post, process_set = ctx.args
        _require_linear(op, f"grouped_allreduce '{names[0]}'")
        handles = [
            collectives.allreduce_async(g, op=op, prescale_factor=pre, postscale_factor=post, process_set=process_set)
            for g in grads
        ]
        return (None, None, None, None, None, *synchronize(GroupHandle(handles)))


def _my_rows(grad, rows, process_set):
    """This rank's rows of the averaged gradient of an allgather whose input had `rows` rows."""
    reduced = _average(grad, process_set)
    counts = _allgather_rows(torch.tensor([rows], dtype=torch.int64), process_set)
    offset = int(counts[: _set(process_set).rank()].sum())
    return reduced.narrow(0, offset, rows)


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.shape, ctx.process_set = tensor.shape, process_set
        return synchronize(collectives.allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        rows = ctx.shape[0] if len(ctx.shape) else 1
        return _my_rows(grad, rows, ctx.process_set).reshape(ctx.shape), None, None


class GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, names, process_set, *tensors):
        ctx.shapes, ctx.process_set = [t.shape for t in tensors], process_set
        _precheck(tensors, names)
        handles = [collectives.allgather_async(t, name=n, process_set=process_set) for t, n in zip(tensors, names)]
        return tuple(synchronize(GroupHandle(handles)))

    @staticmethod
    def backward(ctx, *grads):
        out = []
        for grad, shape in zip(grads, ctx.shapes):
            rows = shape[0] if len(shape) else 1
            out.append(_my_rows(grad, rows, ctx.process_set).reshape(shape))
        return (None, None, *out)


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(collectives.broadcast_async(tensor, root_rank, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        from horo import basics

        reduced = _average(grad, ctx.process_set)
        if basics.rank() != ctx.root_rank:
            reduced.zero_()
        return reduced, None, None, None


class Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(collectives.alltoall_async(tensor, splits, name=name, process_set=process_set))
        ctx.shape, ctx.received, ctx.process_set = tensor.shape, received, process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, _received_grad):
        back, _ = synchronize(collectives.alltoall_async(grad, splits=ctx.received, process_set=ctx.process_set))
        return back.reshape(ctx.shape), None, None, None


def _reducescatter_backward(grad, shape, op, process_set, pre, post, what):
    _require_linear(op, what)
    full = _allgather_rows(grad, process_set)
    factor = pre * post / (_set(process_set).size() if op == ops.Average else 1)
    if factor != 1.0:
        full = full * factor
    return full.reshape(shape)


class Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (tensor.shape, name, op, process_set, prescale_factor, postscale_factor)
        return synchronize(collectives.reducescatter_async(tensor, name=name, op=op, process_set=process_set,
                                                           prescale_factor=prescale_factor,
                                                           postscale_factor=postscale_factor))

    @staticmethod
    def backward(ctx, grad):
        shape, name, op, process_set, pre, post = ctx.args
        back = _reducescatter_backward(grad, shape, op, process_set, pre, post, f"reducescatter '{name}'")
        return back, None, None, None, None, None


class GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, names, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.args = ([t.shape for t in tensors], names, op, process_set, prescale_factor, postscale_factor)
        _precheck(tensors, names)
        handles = [
            collectives.reducescatter_async(t, name=n, op=op, process_set=process_set,
                                            prescale_factor=prescale_factor, postscale_factor=postscale_factor)
            for t, n in zip(tensors, names)
        ]
        return tuple(synchronize(GroupHandle(handles)))

    @staticmethod
    def backward(ctx, *grads):
        shapes, names, op, process_set, pre, post = ctx.args
        # Each allgather is started before any is awaited, so they fuse.
        _require_linear(op, f"grouped_reducescatter '{names[0]}'")
        full = synchronize(GroupHandle(collectives.allgather_async(g, process_set=process_set) for g in grads))
        factor = pre * post / (_set(process_set).size() if op == ops.Average else 1)
        out = [(f * factor if factor != 1.0 else f).reshape(s) for f, s in zip(full, shapes)]
        return (None, None, None, None, None, *out)

"""Collectives on torch tensors, with horovod.torch's names and signatures.

- `*_async` functions return a handle for poll()/synchronize(), which returns torch tensors;
- trailing `_` means in place (the input must be contiguous);
- the synchronous out-of-place functions (allreduce, grouped_allreduce, allgather,
  grouped_allgather, broadcast, alltoall, reducescatter, grouped_reducescatter) are
  differentiable when their input requires grad (see autograd.py), as in Horovod.

Every tensor of a call is checked before anything is enqueued, so a bad input fails
with its name and leaves nothing in flight.
"""
import torch

from horo import ops, process_sets
from horo.alltoall import split_counts
from horo.allreduce import group_names, tensor_list
from horo.enqueue import checked_array, enqueue_group, refusing, returning
from horo.errors import HoroValueError
from horo.handles import blocking
from horo.process_sets import global_process_set
from horo.torch import autograd
from horo.torch.compression import Compression
from horo.torch.enqueue import enqueue, tensor_name
from horo.torch.handles import GroupHandle, SparseAllreduceHandle, synchronize
from horo.torch.tensors import checked, empty_like, from_core


def _differentiable(tensors):
    return torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors)


def _group_names(name, collective, tensors, process_set):
    return group_names(tensors, name, collective, process_set)


def _checked(tensor, name, collective, process_set, in_place=False):
    # A refusal here reaches the other ranks (their namesakes fail), so none waits for this one.
    return checked_array(tensor, collective, name, process_set, in_place, check=checked)


def _checked_group(tensors, names, collective, process_set, in_place=False):
    with refusing(collective, names, process_set):  # all checked before any is enqueued
        return [checked(t, n, in_place) for t, n in zip(tensors, names)]


# --- allreduce ----------------------------------------------------------------------------------


def _allreduce_checked(t, name, op, prescale_factor, postscale_factor, process_set, in_place, result=None):
    output = t if in_place else empty_like(t)
    return enqueue("allreduce", name, t, output, returning(output if result is None else result), op,
                   prescale_factor, postscale_factor, process_set=process_set)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an out-of-place allreduce (Average by default); returns a handle."""
    name = tensor_name(name, "allreduce", process_set)
    op = ops.resolve(op, average, name, adasum=True)
    t = _checked(tensor, name, "allreduce", process_set)
    return _allreduce_checked(t, name, op, prescale_factor, postscale_factor, process_set, False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce of `tensor`; returns a handle (synchronize() returns `tensor`)."""
    name = tensor_name(name, "allreduce", process_set)
    op = ops.resolve(op, average, name, adasum=True)
    t = _checked(tensor, name, "allreduce", process_set, in_place=True)
    return _allreduce_checked(t, name, op, prescale_factor, postscale_factor, process_set, True, tensor)


@blocking
def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` across ranks into a new tensor; differentiable."""
    name = tensor_name(name, "allreduce", process_set, waits=True)  # done before the next: see tensor_name
    compressed, ctx = compression.compress(tensor)
    if _differentiable((compressed,)):
        op = ops.resolve(op, average, name, adasum=True)
        reduced = autograd.Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    else:
        reduced = synchronize(allreduce_async(compressed, average, name, op, prescale_factor, postscale_factor,
                                              process_set))
    return compression.decompress(reduced, ctx)


@blocking
def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces `tensor` across ranks in place and returns it."""
    name = tensor_name(name, "allreduce", process_set, waits=True)
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set, in_place):
    names = _group_names(name, "grouped_allreduce", tensors, process_set)
    op = ops.resolve(op, average, names[0] if names else "grouped_allreduce", adasum=True)
    ts = _checked_group(tensors, names, "allreduce", process_set, in_place)
    return GroupHandle(enqueue_group(
        lambda t=t, n=n, tensor=tensor: _allreduce_checked(t, n, op, prescale_factor, postscale_factor, process_set,
                                                           in_place, tensor if in_place else None)
        for t, n, tensor in zip(ts, names, tensors)
    ))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts one allreduce per tensor, enqueued together (they fuse); returns ONE handle for them all."""
    return _grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set, False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    return _grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set, True)


@blocking
def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Allreduces each tensor (fused); returns the list of results; differentiable."""
    tensor_list(tensors, "grouped_allreduce")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    if _differentiable(compressed):
        names = _group_names(name, "grouped_allreduce", compressed, process_set)
        op = ops.resolve(op, average, names[0], adasum=True)
        reduced = autograd.GroupedAllreduce.apply(names, op, prescale_factor, postscale_factor, process_set,
                                                  *compressed)
    else:
        reduced = synchronize(grouped_allreduce_async(list(compressed), average, name, op, prescale_factor,
                                                      postscale_factor, process_set))
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]


@blocking
def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# --- allgather ----------------------------------------------------------------------------------


def _allgather_checked(t, name, process_set):
    if t.dim() == 0:
        t = t.reshape(1)
    dtype = t.dtype
    return enqueue("allgather", name, t, None, lambda result: from_core(result[0], result[1], dtype),
                   process_set=process_set)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather (first dimensions may differ per rank); returns a handle."""
    name = tensor_name(name, "allgather", process_set)
    return _allgather_checked(_checked(tensor, name, "allgather", process_set), name, process_set)


@blocking
def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension; differentiable."""
    name = tensor_name(name, "allgather", process_set, waits=True)
    if _differentiable((tensor,)):
        return autograd.Allgather.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    names = _group_names(name, "grouped_allgather", tensors, process_set)
    ts = _checked_group(tensors, names, "allgather", process_set)
    return GroupHandle(enqueue_group(lambda t=t, n=n: _allgather_checked(t, n, process_set)
                                     for t, n in zip(ts, names)))


@blocking
def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers each tensor (fused); returns the list of results; differentiable."""
    if _differentiable(tensor_list(tensors, "grouped_allgather")):
        names = _group_names(name, "grouped_allgather", tensors, process_set)
        return list(autograd.GroupedAllgather.apply(names, process_set, *tensors))
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# --- broadcast ----------------------------------------------------------------------------------


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an out-of-place broadcast from `root_rank` (a global rank); returns a handle."""
    name = tensor_name(name, "broadcast", process_set)
    t = _checked(tensor, name, "broadcast", process_set)
    output = empty_like(t)
    return enqueue("broadcast", name, t, output, returning(output), root=root_rank, process_set=process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast into `tensor`; returns a handle (synchronize() returns `tensor`)."""
    name = tensor_name(name, "broadcast", process_set)
    t = _checked(tensor, name, "broadcast", process_set, in_place=True)
    return enqueue("broadcast", name, t, t, returning(tensor), root=root_rank, process_set=process_set)


@blocking
def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A new tensor holding root_rank's `tensor`; differentiable."""
    name = tensor_name(name, "broadcast", process_set, waits=True)
    if _differentiable((tensor,)):
        return autograd.Broadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


@blocking
def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's, in place, and returns it."""
    name = tensor_name(name, "broadcast", process_set, waits=True)
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- alltoall -----------------------------------------------------------------------------------


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts the allreduce of a torch.sparse tensor, as Horovod does it: every rank's indices and
    values are allgathered; synchronize() returns the sparse sum (divided by the set size for
    Average), with rows that several ranks hold summed when coalesced."""
    op = ops.resolve(op, None, name)
    if op not in (ops.Sum, ops.Average):
        raise HoroValueError(f"'{name}': sparse allreduce supports Sum and Average, not op {op}")
    if not tensor.is_sparse:
        raise HoroValueError(f"'{name}': sparse_allreduce_async takes a torch.sparse tensor; use allreduce_async")
    sparse = tensor.coalesce()
    handles = []
    for part, t in (("indices", sparse.indices().t().contiguous()), ("values", sparse.values().contiguous())):
        part_name = f"{name}.{part}"
        handles.append(_allgather_checked(checked(t, part_name), part_name, process_set))
    divisor = process_sets.set_size(process_set, name) if op == ops.Average else 1
    return SparseAllreduceHandle(handles[0], handles[1], sparse.shape, divisor)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall; synchronize() returns (output, received_splits) as in Horovod."""
    name = tensor_name(name, "alltoall", process_set)
    t = _checked(tensor, name, "alltoall", process_set)
    if t.dim() == 0:
        t = t.reshape(1)
    n = process_sets.set_size(process_set, name)
    # A ValueError, as Horovod raises for bad splits or indivisible rows, on this rank; refusing()
    # fails the others' namesakes too, so no rank waits for this one.
    with refusing("alltoall", name, process_set):
        rows = t.shape[0]
        if splits is None:  # even parts, as Horovod
            if rows % n:
                raise HoroValueError(f"alltoall '{name}': the first dimension {rows} does not divide by the {n} "
                                     "ranks; pass splits= to send uneven parts")
            send = [rows // n] * n
        else:
            send = split_counts(splits, name)
            if len(send) != n or any(c < 0 for c in send) or sum(send) != rows:
                raise HoroValueError(f"'{name}': splits {send} must be {n} non-negative row counts (one per rank) "
                                     f"summing to the first dimension, {rows}")
    dtype = t.dtype

    def finish(result):
        return from_core(result[0], result[1], dtype), torch.tensor(result[2], dtype=torch.int32)

    return enqueue("alltoall", name, t, None, finish, splits=send, process_set=process_set)


@blocking
def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rank r sends splits[j] rows to rank j; returns the received rows, and with `splits`
    given also how many came from each rank (Horovod's return convention); differentiable."""
    name = tensor_name(name, "alltoall", process_set, waits=True)
    if _differentiable((tensor,)):
        output, received = autograd.Alltoall.apply(tensor, splits, name, process_set)
    else:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# --- reducescatter ------------------------------------------------------------------------------


def _reducescatter_checked(t, name, op, process_set, prescale_factor, postscale_factor):
    _, me, n = process_sets.resolve(process_set, name)
    if t.dim() == 0:
        output = torch.empty((0,), dtype=t.dtype, device=t.device)  # never written: the coordinator refuses 0-d
    else:
        rows = t.shape[0] // n + (1 if me < t.shape[0] % n else 0)
        output = torch.empty((rows, *t.shape[1:]), dtype=t.dtype, device=t.device)
    return enqueue("reducescatter", name, t, output, returning(output), op, prescale_factor, postscale_factor,
                   process_set=process_set)


def reducescatter_async(tensor, name=None, op=ops.Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reduce-scatter: rank r gets its share of the reduced first dimension; returns a handle."""
    name = tensor_name(name, "reducescatter", process_set)
    op = ops.resolve(op, None, name)
    t = _checked(tensor, name, "reducescatter", process_set)
    return _reducescatter_checked(t, name, op, process_set, prescale_factor, postscale_factor)


@blocking
def reducescatter(tensor, name=None, compression=Compression.none, op=ops.Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """This rank's share (first rows % size ranks get one row more) of the reduction; differentiable."""
    name = tensor_name(name, "reducescatter", process_set, waits=True)
    compressed, ctx = compression.compress(tensor)
    if _differentiable((compressed,)):
        op = ops.resolve(op, None, name)
        out = autograd.Reducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    else:
        out = synchronize(reducescatter_async(compressed, name, op, process_set, prescale_factor, postscale_factor))
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=ops.Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    names = _group_names(name, "grouped_reducescatter", tensors, process_set)
    op = ops.resolve(op, None, names[0] if names else "grouped_reducescatter")
    ts = _checked_group(tensors, names, "reducescatter", process_set)
    return GroupHandle(enqueue_group(
        lambda t=t, n=n: _reducescatter_checked(t, n, op, process_set, prescale_factor, postscale_factor)
        for t, n in zip(ts, names)
    ))


@blocking
def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=ops.Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatters each tensor (fused); returns the list of shares; differentiable."""
    tensor_list(tensors, "grouped_reducescatter")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    if _differentiable(compressed):
        names = _group_names(name, "grouped_reducescatter", compressed, process_set)
        op = ops.resolve(op, None, names[0])
        outs = autograd.GroupedReducescatter.apply(names, op, process_set, prescale_factor, postscale_factor,
                                                   *compressed)
    else:
        outs = synchronize(grouped_reducescatter_async(list(compressed), name, op, process_set, prescale_factor,
                                                       postscale_factor))
    return [compression.decompress(t, ctx) for t, ctx in zip(outs, ctxs)]

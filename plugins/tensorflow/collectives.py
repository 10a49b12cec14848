"""The collectives on tf.Tensor / tf.Variable / tf.IndexedSlices, with Horovod's TF signatures.

They work eagerly and inside tf.function, and are differentiable (gradients.py).
`device_dense` / `device_sparse` / `ignore_name_scope` are accepted for Horovod
compatibility: horo moves host memory, and names are never prefixed by scopes.
"""
import tensorflow as tf

import horo
from horo import ops as _ops
from horo.allreduce import tensor_list
from horo.enqueue import refusing
from horo.process_sets import global_process_set

from horo.tensorflow import core_ops, gradients
from horo.tensorflow.compression import Compression
from horo.tensorflow.tensors import as_tensor, check_dtype, collective_name


def _check(tensor, name, collective, process_set):
    # Refused here, on this rank only: the other ranks hear of it instead of waiting in their op.
    with refusing(collective, name, process_set):
        check_dtype(tensor, name)


def _resolve_op(op, average, name):
    op = _ops.resolve(op, average, name or "tensor")
    return op


def _allreduce_slices(slices, op, prescale_factor, postscale_factor, name, compression, process_set):
    """An IndexedSlices (e.g. an embedding's gradient) is allreduced as two allgathers,
    values and indices: duplicate indices add up when it is applied or densified."""
    if op not in (horo.Sum, horo.Average):
        raise ValueError(
            f"'{name}': allreduce of tf.IndexedSlices supports Sum and Average only; "
            "densify it (sparse_as_dense=True) for other ops"
        )
    _check(slices.values, name, "allgather", process_set)
    values, ctx = compression.compress(slices.values)
    values = compression.decompress(gradients.allgather(values, f"{name}.values", process_set), ctx)
    indices = core_ops.allgather_group([slices.indices], [f"{name}.indices"], process_set)[0]
    count = horo.process_sets.set_size(process_set, name)
    scale = prescale_factor * postscale_factor / (count if op == horo.Average else 1)
    if scale != 1:
        values = values * tf.cast(scale, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces `tensor` over the ranks of `process_set` (Average by default); same shape and dtype."""
    op = _resolve_op(op, average, name)
    if isinstance(tensor, tf.IndexedSlices):
        name = collective_name(name, "allreduce", tensor.values, process_set)
        return _allreduce_slices(tensor, op, prescale_factor, postscale_factor, name, compression, process_set)
    tensor = as_tensor(tensor, "allreduce")
    name = collective_name(name, "allreduce", tensor, process_set)
    _check(tensor, name, "allreduce", process_set)
    compressed, ctx = compression.compress(tensor)
    reduced = gradients.allreduce_group([compressed], [name], op, prescale_factor, postscale_factor, process_set)[0]
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Reduces a list of tensors as one fused collective; returns the list of results."""
    tensors = [t if isinstance(t, tf.IndexedSlices) else as_tensor(t, "grouped_allreduce")
               for t in tensor_list(tensors, "grouped_allreduce")]
    if not tensors:
        return []
    op = _resolve_op(op, average, name)
    first = tensors[0].values if isinstance(tensors[0], tf.IndexedSlices) else tensors[0]
    base = collective_name(name, "grouped_allreduce", first, process_set)
    return reduce_group(tensors, [f"{base}.{i}" for i in range(len(tensors))], op, prescale_factor, postscale_factor,
                        compression, process_set)


def reduce_group(tensors, names, op, prescale_factor, postscale_factor, compression, process_set):
    """grouped_allreduce with a name per tensor: dense tensors in one fused op, IndexedSlices each as allgathers."""
    results = [None] * len(tensors)
    dense_at = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    # The dense ones go as one op: one refused tensor refuses them all, on every rank.
    with refusing("allreduce", [names[i] for i in dense_at], process_set):
        for i in dense_at:
            check_dtype(tensors[i], names[i])
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            results[i] = _allreduce_slices(t, op, prescale_factor, postscale_factor, names[i], compression,
                                           process_set)
    if dense_at:
        packed = [compression.compress(tensors[i]) for i in dense_at]
        reduced = gradients.allreduce_group([p[0] for p in packed], [names[i] for i in dense_at], op,
                                            prescale_factor, postscale_factor, process_set)
        for i, (_, ctx), r in zip(dense_at, packed, reduced):
            results[i] = compression.decompress(r, ctx)
    return results


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Every rank's tensor concatenated along dimension 0 (whose size may differ per rank)."""
    tensor = as_tensor(tensor, "allgather")
    name = collective_name(name, "allgather", tensor, process_set)
    _check(tensor, name, "allgather", process_set)
    return gradients.allgather(tensor, name, process_set)


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    tensors = [as_tensor(t, "grouped_allgather") for t in tensor_list(tensors, "grouped_allgather")]
    if not tensors:
        return []
    base = collective_name(name, "grouped_allgather", tensors[0], process_set)
    names = [f"{base}.{i}" for i in range(len(tensors))]
    with refusing("allgather", names, process_set):
        for t, n in zip(tensors, names):
            check_dtype(t, n)
    if any(t.dtype.is_floating for t in tensors):  # differentiable: one op per tensor
        # Every op runs even after one fails (as synchronize_all): a name skipped here would
        # leave another rank's refusal of it pending, to fail this name's next use.
        results, error = [], None
        for t, n in zip(tensors, names):
            try:
                results.append(gradients.allgather(t, n, process_set))
            except Exception as e:  # noqa: BLE001 - the first is raised below
                error = error or e
        if error is not None:
            raise error
        return results
    return core_ops.allgather_group(tensors, names, process_set)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """root_rank's `tensor` on every rank (root_rank is a global rank)."""
    tensor = as_tensor(tensor, "broadcast")
    name = collective_name(name, "broadcast", tensor, process_set)
    _check(tensor, name, "broadcast", process_set)
    return gradients.broadcast_group([tensor], [name], root_rank, process_set)[0]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends splits[j] rows to rank j (even splits by default); returns (received rows, received splits)."""
    tensor = as_tensor(tensor, "alltoall")
    name = collective_name(name, "alltoall", tensor, process_set)
    with refusing("alltoall", name, process_set):
        check_dtype(tensor, name)
        if splits is not None:
            splits = as_tensor(splits, f"'{name}': splits")
            if splits.dtype not in (tf.int32, tf.int64):
                raise TypeError(f"'{name}': splits must be int32 or int64, not {splits.dtype.name}")
    return gradients.alltoall(tensor, splits, name, process_set)


def reducescatter(tensor, device_dense="", compression=Compression.none, op=horo.Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces, then this rank keeps its share of dimension 0 (the first rows % size ranks get one row more)."""
    tensor = as_tensor(tensor, "reducescatter")
    name = collective_name(name, "reducescatter", tensor, process_set)
    op = _resolve_op(op, None, name)
    _check(tensor, name, "reducescatter", process_set)
    compressed, ctx = compression.compress(tensor)
    out = gradients.reducescatter_group([compressed], [name], op, prescale_factor, postscale_factor, process_set)[0]
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=horo.Average,
                          process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                          postscale_factor=1.0, name=None):
    tensors = [as_tensor(t, "grouped_reducescatter") for t in tensor_list(tensors, "grouped_reducescatter")]
    if not tensors:
        return []
    base = collective_name(name, "grouped_reducescatter", tensors[0], process_set)
    names = [f"{base}.{i}" for i in range(len(tensors))]
    op = _resolve_op(op, None, base)
    with refusing("reducescatter", names, process_set):
        for t, n in zip(tensors, names):
            check_dtype(t, n)
    packed = [compression.compress(t) for t in tensors]
    outs = gradients.reducescatter_group([p[0] for p in packed], names, op, prescale_factor, postscale_factor,
                                         process_set)
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, packed)]


def join():
    """Blocks until every rank has joined (see horo.join); returns the last rank to join, as an int32 tensor."""
    return core_ops.join()


def barrier(process_set=global_process_set, name=None):
    """Returns once every rank of `process_set` has reached it."""
    return core_ops.barrier(collective_name(name, "barrier", None, process_set), process_set)

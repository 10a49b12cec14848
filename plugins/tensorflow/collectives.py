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
from horo.tensorflow.native_ops import _resolve
from horo.tensorflow.tensors import as_tensor, check_dtype, collective_name, from_wire, to_wire


def _check(tensor, name, collective, process_set):
    # A set this rank cannot use fails here on either op path (native or numpy_function), as Horovod's
    # InvalidArgumentError that is also a ValueError.
    _resolve(process_set, name)
    # Refused here, on this rank only: the other ranks hear of it instead of waiting in their op.
    with refusing(collective, name, process_set):
        check_dtype(tensor, name, moves=collective in ("allgather", "broadcast", "alltoall"))


def _resolve_op(op, average, name, adasum=False):
    return _ops.resolve(op, average, name or "tensor", adasum)


def _allreduce_slices(slices, op, prescale_factor, postscale_factor, name, compression, process_set):
    """An IndexedSlices (e.g. an embedding's gradient) is allreduced as two allgathers,
    values and indices: duplicate indices add up when it is applied or densified.
    Refused, as Horovod 0.28 refuses them (NotImplementedError), before anything is sent."""
    if op == horo.Adasum:
        raise NotImplementedError(f"'{name}': Adasum does not support tf.IndexedSlices; pass sparse_as_dense=True "
                                  "to the DistributedOptimizer or DistributedGradientTape")
    if op not in (horo.Sum, horo.Average):
        raise NotImplementedError(f"'{name}': only Sum and Average are supported with tf.IndexedSlices; densify "
                                  "it (sparse_as_dense=True) for other ops")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError(f"'{name}': prescale_factor and postscale_factor are not supported with "
                                  "tf.IndexedSlices")
    _check(slices.values, name, "allgather", process_set)
    values, ctx = compression.compress(slices.values)
    values = compression.decompress(gradients.allgather(values, f"{name}.values", process_set), ctx)
    indices = core_ops.allgather_group([slices.indices], [f"{name}.indices"], process_set)[0]
    if op == horo.Average:
        values = values / tf.cast(horo.process_sets.set_size(process_set, name), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces `tensor` over the ranks of `process_set` (Average by default); same shape, and same dtype
    except an integer Average, which is a float tensor (Horovod's `sum / size`)."""
    op = _resolve_op(op, average, name, adasum=True)
    if isinstance(tensor, tf.IndexedSlices):
        name = collective_name(name, "allreduce", tensor.values, process_set)
        return _allreduce_slices(tensor, op, prescale_factor, postscale_factor, name, compression, process_set)
    tensor = as_tensor(tensor, "allreduce")
    name = collective_name(name, "allreduce", tensor, process_set)
    _check(tensor, name, "allreduce", process_set)
    compressed, ctx = compression.compress(tensor)
    reduced = gradients.allreduce_group([compressed], [name], _core_op(op), prescale_factor, postscale_factor,
                                        process_set)[0]
    return _averaged(compression.decompress(reduced, ctx), op, process_set, name)


def _core_op(op):
    """Average is summed by the core and divided here, as Horovod's TF allreduce does: `sum / size`
    is correctly rounded where `sum * (1 / size)` is not (bit for bit with Horovod at np=3)."""
    return horo.Sum if op == horo.Average else op


def _averaged(summed, op, process_set, name):
    """Horovod's `summed / size`: TensorFlow's true division, so integers average to floats."""
    if op != horo.Average:
        return summed
    return summed / tf.cast(horo.process_sets.set_size(process_set, name), summed.dtype)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Reduces a list of tensors as one fused collective; returns the list of results."""
    tensors = [t if isinstance(t, tf.IndexedSlices) else as_tensor(t, "grouped_allreduce")
               for t in tensor_list(tensors, "grouped_allreduce")]
    if not tensors:
        return []
    op = _resolve_op(op, average, name, adasum=True)
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
        reduced = gradients.allreduce_group([p[0] for p in packed], [names[i] for i in dense_at], _core_op(op),
                                            prescale_factor, postscale_factor, process_set)
        for i, (_, ctx), r in zip(dense_at, packed, reduced):
            results[i] = _averaged(compression.decompress(r, ctx), op, process_set, names[i])
    return results


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Every rank's tensor concatenated along dimension 0 (whose size may differ per rank)."""
    tensor = as_tensor(tensor, "allgather")
    name = collective_name(name, "allgather", tensor, process_set)
    _check(tensor, name, "allgather", process_set)
    wire, dtype = to_wire(tensor)
    return from_wire(gradients.allgather(wire, name, process_set), dtype)


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    tensors = [as_tensor(t, "grouped_allgather") for t in tensor_list(tensors, "grouped_allgather")]
    if not tensors:
        return []
    base = collective_name(name, "grouped_allgather", tensors[0], process_set)
    names = [f"{base}.{i}" for i in range(len(tensors))]
    with refusing("allgather", names, process_set):
        for t, n in zip(tensors, names):
            check_dtype(t, n, moves=True)
    wired = [to_wire(t) for t in tensors]
    tensors = [w for w, _ in wired]
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
    return [from_wire(r, dtype) for r, (_, dtype) in zip(core_ops.allgather_group(tensors, names, process_set), wired)]


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """root_rank's `tensor` on every rank (root_rank is a global rank)."""
    tensor = as_tensor(tensor, "broadcast")
    name = collective_name(name, "broadcast", tensor, process_set)
    _check(tensor, name, "broadcast", process_set)
    wire, dtype = to_wire(tensor)
    return from_wire(gradients.broadcast_group([wire], [name], root_rank, process_set)[0], dtype)


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends splits[j] rows to rank j; returns (received rows, received splits) when `splits` is given,
    else the received rows alone, after an even split that must divide the rows (as Horovod 0.28)."""
    tensor = as_tensor(tensor, "alltoall")
    name = collective_name(name, "alltoall", tensor, process_set)
    given = splits is not None
    _resolve(process_set, name)
    with refusing("alltoall", name, process_set):
        check_dtype(tensor, name, moves=True)
        if given:
            # Horovod converts whatever it is given (a list, an array, an int64 tensor) with convert_to_tensor.
            splits = as_tensor(splits, f"'{name}': splits")
            if not splits.dtype.is_integer:
                raise TypeError(f"'{name}': splits must be integers, not {splits.dtype.name}")
            if splits.shape.rank not in (None, 1):
                raise tf.errors.InvalidArgumentError(None, None, f"'{name}': splits must be a vector, not of shape "
                                                                 f"{splits.shape}")
            splits = tf.cast(splits, tf.int32)
        else:
            count = horo.process_sets.set_size(process_set, name)
            rows = tensor.shape[0] if tensor.shape.rank else (1 if tensor.shape.rank == 0 else None)
            if rows is not None and rows % count:
                raise tf.errors.InvalidArgumentError(
                    None, None, f"'{name}': alltoall without splits divides the first dimension evenly, and {rows} "
                                f"rows do not split over {count} ranks; pass splits=")
    wire, dtype = to_wire(tensor)
    output, received = gradients.alltoall(wire, splits, name, process_set)
    output = from_wire(output, dtype)
    return (output, received) if given else output


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

"""The collectives with their gradients registered (tf.custom_gradient), as in Horovod.

Every rank computes its own loss, and the total is their sum; so a collective's
gradient routes each rank's upstream gradient back to the ranks whose inputs
produced it:
  allreduce       allreduce of the gradient with the same op and scale factors
  allgather       Average-allreduce of the gradient, then this rank's rows
  broadcast       Average-allreduce of the gradient on the root, zeros elsewhere
(Average, as Horovod 0.28's TF and torch gradients: each rank's loss is one replica's.)
  alltoall        alltoall of the gradient, sending back the rows received
  reducescatter   allgather of the gradient (times the scale factors, / size for Average)
Gradient collectives are named after the forward one (`<name>.grad`), so they too
match across ranks. Integer tensors get no gradient.
"""
import tensorflow as tf

import horo
from horo import process_sets as _process_sets

from horo.tensorflow import core_ops
from horo.tensorflow.tensors import derived_name, is_differentiable


def _differentiable_positions(tensors):
    return [i for i, t in enumerate(tensors) if is_differentiable(t.dtype)]


def allreduce_group(tensors, names, op, prescale_factor, postscale_factor, process_set):
    tensors = list(tensors)
    if not _differentiable_positions(tensors):
        return core_ops.allreduce_group(tensors, names, op, prescale_factor, postscale_factor, process_set)

    @tf.custom_gradient
    def forward(*xs):
        ys = core_ops.allreduce_group(xs, names, op, prescale_factor, postscale_factor, process_set)

        def grad(*dys):
            grads = [None] * len(xs)
            float_at = _differentiable_positions(xs)
            reduced = core_ops.allreduce_group(
                [dys[i] for i in float_at], [derived_name(names[i], "grad") for i in float_at],
                op, prescale_factor, postscale_factor, process_set,
            )
            for i, g in zip(float_at, reduced):
                grads[i] = g
            return grads

        return ys, grad

    return list(forward(*tensors))


def allgather(tensor, name, process_set):
    if not is_differentiable(tensor.dtype):
        return core_ops.allgather_group([tensor], [name], process_set)[0]

    @tf.custom_gradient
    def forward(x):
        y = core_ops.allgather_group([x], [name], process_set)[0]

        def grad(dy):
            _, me, _ = _process_sets.resolve(process_set, name)
            rows = tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1]) if x.shape.rank else tf.ones([1], tf.int64)
            sizes = core_ops.allgather_group([rows], [derived_name(name, "grad.sizes")], process_set)[0]
            summed = core_ops.allreduce_group([dy], [derived_name(name, "grad")], horo.Average, 1.0, 1.0,
                                              process_set)[0]
            start = tf.reduce_sum(sizes[:me])
            return tf.reshape(summed[start : start + sizes[me]], tf.shape(x))

        return y, grad

    return forward(tensor)


def broadcast_group(tensors, names, root_rank, process_set):
    tensors = list(tensors)
    if not _differentiable_positions(tensors):
        return core_ops.broadcast_group(tensors, names, root_rank, process_set)

    @tf.custom_gradient
    def forward(*xs):
        ys = core_ops.broadcast_group(xs, names, root_rank, process_set)

        def grad(*dys):
            grads = [None] * len(xs)
            float_at = _differentiable_positions(xs)
            summed = core_ops.allreduce_group(
                [dys[i] for i in float_at], [derived_name(names[i], "grad") for i in float_at], horo.Average, 1.0,
                1.0, process_set,
            )
            for i, g in zip(float_at, summed):
                if horo.rank() != root_rank:
                    # Zeros computed from the allreduce, as Horovod does: the native op is not
                    # stateful, so a graph would prune an unused one here while the root waits
                    # for this rank (control dependencies on a constant do not survive).
                    g = g * tf.zeros([], g.dtype)
                grads[i] = g
            return grads

        return ys, grad

    return list(forward(*tensors))


def alltoall(tensor, splits, name, process_set):
    if not is_differentiable(tensor.dtype):
        return core_ops.alltoall(tensor, splits, name, process_set)

    @tf.custom_gradient
    def forward(x):
        output, received = core_ops.alltoall(x, splits, name, process_set)

        def grad(d_output, _d_received=None):
            back, _ = core_ops.alltoall(d_output, received, derived_name(name, "grad"), process_set)
            return tf.reshape(back, tf.shape(x))

        return (output, received), grad

    output, received = forward(tensor)
    return output, received


def reducescatter_group(tensors, names, op, prescale_factor, postscale_factor, process_set):
    tensors = list(tensors)
    if not _differentiable_positions(tensors):
        return core_ops.reducescatter_group(tensors, names, op, prescale_factor, postscale_factor, process_set)

    @tf.custom_gradient
    def forward(*xs):
        ys = core_ops.reducescatter_group(xs, names, op, prescale_factor, postscale_factor, process_set)

        def grad(*dys):
            if op not in (horo.Sum, horo.Average):
                raise ValueError(f"'{names[0]}': the gradient of reducescatter is defined for Sum and Average only")
            count = _process_sets.set_size(process_set, names[0])
            scale = prescale_factor * postscale_factor / (count if op == horo.Average else 1)
            grads = [None] * len(xs)
            float_at = _differentiable_positions(xs)
            gathered = core_ops.allgather_group(
                [dys[i] for i in float_at], [derived_name(names[i], "grad") for i in float_at], process_set
            )
            for i, g in zip(float_at, gathered):
                g = g if scale == 1 else g * tf.cast(scale, g.dtype)
                grads[i] = tf.reshape(g, tf.shape(xs[i]))
            return grads

        return ys, grad

    return list(forward(*tensors))

"""LocalGradientAggregationHelper: Horovod's helper that accumulates k backward passes locally and
allreduces once every k (`backward_passes_per_step`), for custom training loops.

    helper = hvd.LocalGradientAggregationHelper(4, allreduce_func, sparse_as_dense=False,
                                                average_aggregated_gradients=True)
    grads = helper.compute_gradients(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
    helper.apply_gradients(lambda: opt.apply_gradients(zip(grads, model.trainable_variables)), opt)

compute_gradients adds this pass's gradients into per-variable accumulators and, on every k-th
pass, returns their allreduce (divided by k with `average_aggregated_gradients`) and clears them;
on the other passes it returns the running local sums. apply_gradients runs the closure on the
allreduce passes only; on the others it just counts the optimizer's iterations, as Horovod's does.
Eagerly and in tf.function alike (all ranks take the same branch: they count the same passes).
Keras's DistributedOptimizer(backward_passes_per_step=k) does the same inside Keras
(its gradient_accumulation_steps); this is the form for tapes.
"""
import tensorflow as tf

from horo.process_sets import global_process_set
from horo.tensorflow.gradient_tape import _key


class LocalGradientAggregationHelper:
    def __init__(self, backward_passes_per_step, allreduce_func, sparse_as_dense, average_aggregated_gradients,
                 rank=None, optimizer_type=None, process_set=global_process_set, scale_local_gradients=True):
        # rank and optimizer_type: Horovod's TF1 helper's arguments, not needed here.
        if backward_passes_per_step <= 0:
            raise ValueError(f"backward_passes_per_step must be > 0, got {backward_passes_per_step}")
        self.backward_passes_per_step = backward_passes_per_step
        self.allreduce_grads = allreduce_func
        self.sparse_as_dense = sparse_as_dense
        self.average_aggregated_gradients = average_aggregated_gradients
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.counter = tf.Variable(0, trainable=False, dtype=tf.int32)
        self.locally_aggregated_grads = {}
        self._local_vars = set()

    def register_local_var(self, var):
        """The gradient of `var` is kept on this rank (divided by the set size with scale_local_gradients)."""
        self._local_vars.add(_key(var))

    def compute_gradients(self, grads, vars):
        running = []
        for i, grad in enumerate(grads):
            if isinstance(grad, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    raise ValueError("IndexedSlices are not supported when backward_passes_per_step > 1 and "
                                     "sparse_as_dense is False")
                grad = tf.convert_to_tensor(grad)
            if grad is None:
                running.append(None)
                continue
            if i not in self.locally_aggregated_grads:
                self.locally_aggregated_grads[i] = tf.Variable(tf.zeros_like(grad), trainable=False, dtype=grad.dtype)
            self.locally_aggregated_grads[i].assign_add(grad)
            running.append(self.locally_aggregated_grads[i].read_value())
        self.counter.assign_add(1)
        return tf.cond(tf.equal(self.counter, self.backward_passes_per_step),
                       lambda: self._reduce_and_clear(running, list(vars)), lambda: running)

    def _reduce_and_clear(self, grads, vars):
        shared = [i for i, v in enumerate(vars) if _key(v) not in self._local_vars and grads[i] is not None]
        out = list(grads)
        for i, g in zip(shared, self.allreduce_grads([grads[i] for i in shared], [vars[i] for i in shared])):
            out[i] = g
        size = self.process_set.size()
        for i, v in enumerate(vars):
            if _key(v) in self._local_vars and out[i] is not None and self.scale_local_gradients:
                out[i] = out[i] / tf.cast(size, out[i].dtype)
        if self.average_aggregated_gradients:
            out = [g if g is None else g / tf.cast(self.backward_passes_per_step, g.dtype) for g in out]
        # The reduced values are computed before the accumulators are cleared.
        with tf.control_dependencies([g for g in out if g is not None]):
            self.counter.assign(0)
            for acc in self.locally_aggregated_grads.values():
                acc.assign(tf.zeros_like(acc))
        return out

    def apply_gradients(self, apply_grads_closure, optimizer, *args, **kwargs):
        def count_only():
            iterations = getattr(optimizer, "iterations", None)
            if iterations is not None:
                iterations.assign_add(1)
            return tf.constant(False)

        def apply():
            apply_grads_closure()
            return tf.constant(True)

        return tf.cond(tf.equal(self.counter, 0), apply, count_only)

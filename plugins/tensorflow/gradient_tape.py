"""DistributedGradientTape: tape.gradient() returns gradients allreduced over the ranks.

    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)   # averaged across ranks

The dense gradients of one call travel as one grouped allreduce (fused by the core);
IndexedSlices (embedding gradients) are allgathered unless sparse_as_dense=True.
Works eagerly and inside tf.function.
"""
import tensorflow as tf

import horo
from horo.process_sets import global_process_set

from horo.tensorflow.collectives import reduce_group
from horo.tensorflow.compression import Compression
from horo.tensorflow.tensors import unique_in_graph, variable_label


def _key(variable):
    # tf.Variable's hashable reference; Keras 3 variables have none, and are matched as objects.
    return variable.ref() if hasattr(variable, "ref") else id(variable)


class GradientReducer:
    """Allreduces a list of gradients the way DistributedGradientTape (and optimizers) want."""

    def __init__(self, compression=Compression.none, sparse_as_dense=False, op=horo.Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None, process_set=global_process_set,
                 name="DistributedGradientTape", scale_local_gradients=True):
        if op not in (horo.Average, horo.Sum, horo.Adasum, horo.Min, horo.Max, horo.Product):
            raise ValueError(f"DistributedGradientTape: unsupported op {op!r}")
        if gradient_predivide_factor != 1.0 and op != horo.Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if num_groups and groups is not None:
            raise ValueError("pass either num_groups or groups, not both")
        if isinstance(groups, int):
            num_groups, groups = groups, None
        if num_groups < 0:
            raise ValueError(f"num_groups must be >= 0, got {num_groups}")
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        # Average = Sum / size; a predivide factor f divides by f before the sum and by size / f after.
        self.prescale = 1.0 / gradient_predivide_factor
        self.postscale = gradient_predivide_factor
        self.num_groups = num_groups
        self.groups = groups
        self.process_set = process_set
        self.name = name
        self.scale_local_gradients = scale_local_gradients
        self.local = set()  # refs of variables whose gradients stay on this rank (PartialDistributedGradientTape)

    def register_local_source(self, source):
        """Keeps the gradients of `source` (a variable, or a list of them) on this rank."""
        for v in tf.nest.flatten(source):
            self.local.add(_key(v))

    def __call__(self, grads, sources):
        grads, sources = list(grads), list(sources)
        if self.local:
            return self._with_local(grads, sources)
        if self.sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return grads
        # Fixed names (not call-order numbers): every step reuses them, so the core's response cache hits.
        set_id = self.process_set.process_set_id
        base = self.name + (f".set{set_id}" if set_id else "")
        base = base if tf.executing_eagerly() else unique_in_graph(base)
        reduced = list(grads)
        for group in self._split(present, sources):
            names = [f"{base}.{variable_label(sources[i], i)}" for i in group]
            outs = reduce_group([grads[i] for i in group], names, self.op, self.prescale, self.postscale,
                                self.compression, self.process_set)
            for i, out in zip(group, outs):
                reduced[i] = out
        return reduced

    def _with_local(self, grads, sources):
        """Reduces the shared sources' gradients; a local source's own gradient is kept, divided by the
        set's size with scale_local_gradients (Horovod's scaling, so that averaged and local
        gradients keep the same scale)."""
        is_local = [_key(s) in self.local for s in sources]
        shared = [i for i, local in enumerate(is_local) if not local]
        saved, self.local = self.local, set()
        try:
            reduced = self([grads[i] for i in shared], [sources[i] for i in shared]) if shared else []
        finally:
            self.local = saved
        out = list(grads)
        for i, r in zip(shared, reduced):
            out[i] = r
        size = self.process_set.size()
        for i, local in enumerate(is_local):
            if local and out[i] is not None and self.scale_local_gradients and size > 1:
                g = out[i]
                out[i] = (tf.IndexedSlices(g.values / size, g.indices, g.dense_shape)
                          if isinstance(g, tf.IndexedSlices) else g / tf.cast(size, g.dtype))
        return out

    def _split(self, present, sources):
        """Indices of the gradients in each fused group, in the same order on every rank."""
        if self.groups is not None:
            ids = {id(v): k for k, group in enumerate(self.groups) for v in group}
            by_group = {}
            for i in present:
                by_group.setdefault(ids.get(id(sources[i]), len(self.groups) + i), []).append(i)
            return [by_group[k] for k in sorted(by_group)]
        if self.num_groups:
            count = min(self.num_groups, len(present))
            return [present[k * len(present) // count : (k + 1) * len(present) // count] for k in range(count)]
        return [present]


class _DistributedGradientTape(tf.GradientTape):
    """Holds the recorded tape of the GradientTape it wraps; gradient() adds the allreduce."""

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        flat_grads, flat_sources = tf.nest.flatten(grads), tf.nest.flatten(sources)
        return tf.nest.pack_sequence_as(grads, self._horo_reducer(flat_grads, flat_sources))

    def register_local_source(self, source):
        """Horovod's: gradients of `source` (variables) are not allreduced."""
        self._horo_reducer.register_local_source(source)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                            sparse_as_dense=False, op=horo.Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Wraps `gradtape` (a tf.GradientTape, recorded or not yet): its gradient() allreduces the
    gradients across the ranks of `process_set` (Average by default), in one fused group unless
    `num_groups` / `groups` (lists of variables) split them."""
    if not isinstance(gradtape, tf.GradientTape):
        raise TypeError(f"DistributedGradientTape: gradtape must be a tf.GradientTape, got {type(gradtape).__name__}")
    cls = type(gradtape.__class__.__name__, (_DistributedGradientTape, gradtape.__class__), {})
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)  # shares the recorded operations
    tape._horo_reducer = GradientReducer(compression, sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                         groups, process_set, scale_local_gradients=scale_local_gradients)
    return tape


def layer_list(local_layers):
    """`local_layers` (None, a Keras layer, or a list of them) as a list; raises on anything else."""
    import keras

    if local_layers is None:
        return []
    if isinstance(local_layers, keras.layers.Layer):
        return [local_layers]
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("local_layers must be a Keras layer or a list of Keras layers")
    return list(local_layers)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                                   sparse_as_dense=False, op=horo.Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """DistributedGradientTape whose `local_layers` (Keras layers: model-parallel parts each rank
    keeps to itself) keep their own gradients; every other gradient is allreduced as usual.
    With `scale_local_gradients` the local gradients are divided by the set's size, as Horovod does."""
    local_layers = layer_list(local_layers)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set, scale_local_gradients)
    for layer in local_layers:
        tape.register_local_source(layer.trainable_weights)
    return tape

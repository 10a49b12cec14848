"""DistributedOptimizer for Keras 3 (TensorFlow backend).

Horovod's trick, for Keras 3: the wrapped optimizer becomes an instance of a subclass,
created on the fly, of the optimizer's own class (`SGD` stays an `SGD`; its config, its
variables, `model.save` and `keras.models.load_model` work unchanged). The subclass puts
one method in front of Keras's update path:

    model.fit -> train_step -> optimizer.apply_gradients -> apply -> _backend_apply_gradients
        -> [accumulate k backward passes (Keras's gradient_accumulation_steps)]
        -> _clip_gradients(grads)   <- here: one grouped allreduce of every gradient
        -> weight decay, update_step

Keras calls `_clip_gradients` exactly once per update, with the unclipped gradients, inside
the compiled train function, after local accumulation: so clipping and the update see the
global gradient, and `backward_passes_per_step=k` communicates once every k passes.

`backward_passes_per_step=k` is Keras's own `gradient_accumulation_steps=k` (its accumulator
variables, its `iterations` counting updates rather than passes; checkpoints carry them).
Keras applies the *mean* of the k gradients; with Horovod's default
`average_aggregated_gradients=False` horo applies their *sum* (postscale k), as Horovod does.
An optimizer built with `gradient_accumulation_steps=k` and no `backward_passes_per_step`
keeps Keras's mean, and communicates once per k passes.
"""
import warnings

import keras
import tensorflow as tf

import horo.tensorflow as htf
from horo.tensorflow.gradient_tape import layer_list

_classes = {}  # optimizer class -> its distributed subclass (one per class: isinstance and repeated wraps agree)


class _Settings:
    """How one DistributedOptimizer reduces (plain attributes, out of Keras's tracking)."""

    def __init__(self, **kw):
        self.variables = None  # the variables of the gradients being reduced (set at trace time)
        self.local = set()  # keys of variables whose gradients are not reduced (register_local_var)
        self.scale_local = True
        self.__dict__.update(kw)


class _DistributedOptimizerMixin:
    """What the dynamic subclass adds in front of the wrapped optimizer's class."""

    _horo_distributed = True

    def _horo_configure(self, settings):
        # object.__setattr__: Keras's optimizer tracks every attribute it is given (a list of
        # variables would become optimizer variables); horo's settings must stay invisible to it.
        object.__setattr__(self, "_horo", settings)

    def _backend_apply_gradients(self, grads, trainable_variables):
        # Remembered (at trace time) so `groups=[[variables], ...]` can place each gradient.
        self._horo.variables = list(trainable_variables)
        return super()._backend_apply_gradients(grads, trainable_variables)

    def _clip_gradients(self, grads):
        return super()._clip_gradients(self._horo_allreduce(list(grads)))

    def register_local_var(self, var):
        """Horovod's: the gradient of `var` stays on this rank (PartialDistributedOptimizer's local layers)."""
        self._horo.local.add(self._var_key(var))

    # ------------------------------------------------------------------ the reduction

    def _horo_scales(self):
        """(op, prescale, postscale) for the dense gradients."""
        op, pre, post = self._horo.op, 1.0, 1.0
        if self._horo.predivide != 1.0:  # Horovod: split the averaging around the sum
            n = self._horo.process_set.size()
            op, pre, post = htf.Sum, 1.0 / self._horo.predivide, self._horo.predivide / n
        steps = self.gradient_accumulation_steps or 1
        if self._horo.sum_passes and steps > 1:
            post *= steps
        return op, pre, post

    def _horo_allreduce(self, grads):
        if self._horo.sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        out = list(grads)
        op, pre, post = self._horo_scales()
        local = self._horo_local_positions(len(grads))
        for i in local:  # kept on this rank; divided by the set size as Horovod does (scale_local_gradients)
            if out[i] is not None and self._horo.scale_local and self._horo.process_set.size() > 1:
                out[i] = out[i] / tf.cast(self._horo.process_set.size(), out[i].dtype)
        for gi, members in enumerate(self._horo_group_members(grads)):
            members = [i for i in members if i not in local]
            if not members:
                continue
            # IndexedSlices (an embedding's gradient) are allgathered by horo.tensorflow, scaled alike.
            reduced = htf.grouped_allreduce(
                [grads[i] for i in members], op=op, name=f"{self._horo.name}.grads.{gi}",
                compression=self._horo.compression, prescale_factor=pre, postscale_factor=post,
                process_set=self._horo.process_set)
            for i, r in zip(members, reduced):
                out[i] = r
        return out

    def _horo_local_positions(self, n):
        if not self._horo.local:
            return set()
        keys = [self._var_key(v) for v in (self._horo.variables or [])]
        if len(keys) != n:
            raise ValueError(f"{self._horo.name}: local variables were registered, but the gradients' variables "
                             "are unknown")
        return {i for i, key in enumerate(keys) if key in self._horo.local}

    def _horo_group_members(self, grads):
        """Lists of gradient indices, one grouped allreduce each."""
        n, groups = len(grads), self._horo.groups
        if groups is None:
            return [list(range(n))]
        if isinstance(groups, int):
            count = max(1, min(groups, n))
            bounds = [round(k * n / count) for k in range(count + 1)]
            return [list(range(bounds[k], bounds[k + 1])) for k in range(count)]
        keys = [self._var_key(v) for v in (self._horo.variables or [])]
        if len(keys) != n:
            raise ValueError(f"{self._horo.name}: groups given as variables, but the gradients' variables are unknown")
        where = {}
        for gi, group in enumerate(groups):
            for v in group:
                where[self._var_key(v)] = gi
        members = [[] for _ in groups]
        rest = []
        for i, key in enumerate(keys):
            (members[where[key]] if key in where else rest).append(i)
        return [m for m in members + [rest] if m]


def distributed_class(base):
    """The subclass of optimizer class `base` whose instances allreduce their gradients.

    It keeps `base`'s name and module, so `model.save` records `SGD` (etc.) and the file
    loads without horo, as a plain `SGD`."""
    if getattr(base, "_horo_distributed", False):
        return base
    if base not in _classes:
        _classes[base] = type(base.__name__, (_DistributedOptimizerMixin, base),
                              {"__module__": base.__module__, "__qualname__": base.__qualname__,
                               "__doc__": f"{base.__name__}, its gradients allreduced by horo before each update."})
    return _classes[base]


def is_distributed(optimizer):
    return getattr(optimizer, "_horo_distributed", False)


def _check_wrappable(optimizer):
    if keras.config.backend() != "tensorflow":
        raise RuntimeError(f"horo.tensorflow.keras needs Keras's TensorFlow backend, not {keras.config.backend()!r} "
                           "(set KERAS_BACKEND=tensorflow)")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"DistributedOptimizer wraps a keras.optimizers.Optimizer (Keras 3), "
                        f"got {type(optimizer).__module__}.{type(optimizer).__name__}")
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise NotImplementedError("DistributedOptimizer cannot wrap a LossScaleOptimizer: its skipped (non-finite) "
                                  "steps are decided per rank, and a rank that skips would leave the others "
                                  "waiting in the allreduce")
    if is_distributed(optimizer):
        raise ValueError(f"{optimizer.name} is already a DistributedOptimizer")


def _accumulation_steps(optimizer, backward_passes_per_step):
    """Keras's gradient_accumulation_steps for the wrapped optimizer (None: one pass per update)."""
    own = optimizer.gradient_accumulation_steps
    k = int(backward_passes_per_step or 1)
    if k < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
    if k > 1 and own and own != k:
        raise ValueError(f"backward_passes_per_step={k} disagrees with the optimizer's "
                         f"gradient_accumulation_steps={own}")
    steps = k if k > 1 else own
    return steps if steps and steps > 1 else None


def make_distributed(optimizer, name=None, compression=None, sparse_as_dense=False, gradient_predivide_factor=1.0,
                     op=None, backward_passes_per_step=None, average_aggregated_gradients=False, groups=None,
                     process_set=None, scale_local_gradients=True):
    """Turns `optimizer` itself (its state kept) into a distributed one. load_model uses it on a loaded optimizer."""
    _check_wrappable(optimizer)
    steps = _accumulation_steps(optimizer, backward_passes_per_step)
    if steps != optimizer.gradient_accumulation_steps:
        raise ValueError(f"{optimizer.name} was built with gradient_accumulation_steps="
                         f"{optimizer.gradient_accumulation_steps}; "
                         f"backward_passes_per_step={backward_passes_per_step} cannot change it after the fact")
    op = htf.Average if op is None else op
    if gradient_predivide_factor != 1.0 and op != htf.Average:
        raise ValueError("gradient_predivide_factor is only valid with op=Average")
    optimizer.__class__ = distributed_class(type(optimizer))
    optimizer._horo_configure(_Settings(
        name=name or f"Distributed{type(optimizer).__name__}",
        compression=compression or htf.Compression.none,
        sparse_as_dense=sparse_as_dense,
        predivide=float(gradient_predivide_factor),
        op=op,
        groups=groups,
        process_set=htf.global_process_set if process_set is None else process_set,
        # Keras hands over the mean of the accumulated passes; Horovod's default applies their sum.
        sum_passes=bool(backward_passes_per_step and backward_passes_per_step > 1 and not average_aggregated_gradients),
        scale_local=bool(scale_local_gradients),
    ))
    return optimizer


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=htf.Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=htf.Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=htf.global_process_set, scale_local_gradients=True):
    """A copy of the Keras 3 `optimizer` (same class, same config) whose gradients are allreduced
    across ranks before every update.

    Arguments follow Horovod's. `op` defaults to Average; `compression` to Compression.none;
    `backward_passes_per_step=k` accumulates k passes locally (Keras's gradient_accumulation_steps),
    then allreduces once and applies their sum, or their mean with `average_aggregated_gradients=True`;
    `groups` (an int, or lists of variables; `num_groups` is Horovod's older name for an int) splits the
    one grouped allreduce into several; `scale_local_gradients` divides the gradients of variables
    registered as local (register_local_var, PartialDistributedOptimizer) by the set size;
    `sparse_as_dense` densifies IndexedSlices gradients, which are otherwise allgathered;
    `device_dense`/`device_sparse` are accepted for compatibility (horo reduces in host memory).
    """
    _check_wrappable(optimizer)
    if optimizer.built:
        warnings.warn(f"DistributedOptimizer: {optimizer.name} is already built; the wrapped copy starts from its "
                      "config, without its variables (wrap the optimizer before training)", stacklevel=2)
    config = optimizer.get_config()
    config["gradient_accumulation_steps"] = _accumulation_steps(optimizer, backward_passes_per_step)
    fresh = type(optimizer).from_config(config)
    if groups is None and num_groups:
        groups = num_groups
    return make_distributed(fresh, name, compression, sparse_as_dense, gradient_predivide_factor, op,
                            backward_passes_per_step, average_aggregated_gradients, groups, process_set,
                            scale_local_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=htf.Compression.none, sparse_as_dense=False, gradient_predivide_factor=1.0,
                                op=htf.Average, backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=htf.global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose `local_layers` (a Keras layer or a list: model-parallel parts each
    rank keeps to itself) keep their own gradients, divided by the set size with
    `scale_local_gradients`, as in Horovod; every other gradient is allreduced."""
    local_layers = layer_list(local_layers)
    opt = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                               gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients,
                               groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt

"""DistributedOptimizer: wrap a torch optimizer so that step() applies gradients
averaged over every rank, with Horovod's semantics.

    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    loss.backward()   # each gradient's allreduce starts the moment autograd finishes it
    opt.step()        # waits for them all, then the wrapped optimizer's step

How: a post-accumulate-grad hook on every parameter enqueues an in-place allreduce
of `p.grad` as soon as that gradient is complete, so communication (on the core's
background thread, which fuses whatever is ready) overlaps the rest of backward.
step() = synchronize() + the wrapped step. Tensor names are stable across steps
("DistributedOptimizer.Allreduce.<parameter name>"), so the core's response cache
serves steady-state training without renegotiation.

A parameter that got no gradient on this rank (unused in this forward) still
takes part: synchronize() allreduces a zero gradient for it, as Horovod does, so
a rank whose graph skipped it cannot leave the others waiting.
"""
import contextlib
import itertools
import warnings

import torch

from horo import ops
from horo.enqueue import returning
from horo.handles import synchronize as _wait
from horo.process_sets import global_process_set
from horo.torch.compression import Compression
from horo.torch.enqueue import enqueue
from horo.torch.tensors import checked, from_core

_instances = itertools.count()
_classes = {}
# Instance attributes that would shadow the wrapper's methods, e.g. the `step`
# an LR scheduler patches onto the optimizer it was built with.
_NOT_SHARED = ("step", "zero_grad", "synchronize")


class _DistributedOptimizer:
    """Mixin placed before the wrapped optimizer's class (so isinstance(opt, SGD) still holds)."""

    def _horo_setup(self, named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                    groups, sparse_as_dense, process_set):
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._process_set = global_process_set if process_set is None else process_set
        self._op = op
        # Average splits its division around the sum: x / f summed, then * f / size (Horovod's predivide).
        self._prescale = 1.0 / gradient_predivide_factor
        self._postscale = gradient_predivide_factor
        self._groups = groups  # accepted for compatibility: the core fuses every gradient that is ready anyway
        self.backward_passes_per_step = backward_passes_per_step
        named_parameters = None if named_parameters is None else list(named_parameters)
        self._names = _allreduce_names(self.param_groups, named_parameters, next(_instances))
        # Horovod's attributes, which existing code reads: param -> its name ('allreduce.noname.<i>'
        # when unnamed), the pending-passes counters, and the settings.
        params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names = ({p: n for n, p in named_parameters} if named_parameters is not None
                                 else {p: f"allreduce.noname.{i}" for i, p in enumerate(params)})
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = self._process_set
        self._requires_update = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        self._delay = {p: backward_passes_per_step for p in self._requires_update}
        self._allreduce_delay = self._delay  # Horovod's name for the same counters
        self._handles = {}  # param -> (handle(s) or None while accumulating, buffer, compression ctx)
        self._synchronized = False
        self._should_synchronize = True
        self._active = self._process_set.included() and self._process_set.size() > 1
        self._hooks = [p.register_post_accumulate_grad_hook(self._make_hook(p)) for p in self._requires_update] \
            if self._active else []

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def _make_hook(self, p):
        def hook(_param):
            entry = self._handles.get(p)
            if entry is not None and entry[0] is not None:
                raise AssertionError(
                    f"'{self._names[p]}': gradients were computed more than backward_passes_per_step="
                    f"{self.backward_passes_per_step} times before step(); increase backward_passes_per_step "
                    "to accumulate gradients locally"
                )
            self._delay[p] -= 1
            self._handles[p] = self._allreduce_grad_async(p) if self._delay[p] == 0 else (None, None, None)

        return hook

    def _allreduce_grad_async(self, p):
        name = self._names[p]
        grad = p.grad
        if grad.is_sparse:
            if not self._sparse_as_dense:
                return self._sparse_allreduce_async(p, name)
            grad = grad.to_dense()  # reduced dense; p.grad turns sparse again in synchronize (SparseAdam)
        compressed, ctx = self._compression.compress(grad)
        buffer = checked(compressed, name)  # a contiguous copy only if the gradient is not contiguous
        handle = enqueue("allreduce", name, buffer, buffer, returning(buffer), self._op, self._prescale,
                         self._postscale, process_set=self._process_set)
        return handle, buffer, ctx

    def _sparse_allreduce_async(self, p, name):
        # Rows touched by each rank differ: gather every rank's (indices, values) and let the
        # sparse tensor's coalescing sum duplicates, as Horovod does.
        grad = p.grad.coalesce()
        indices = checked(grad.indices().t().contiguous(), f"{name}.indices")
        values = checked(grad.values(), f"{name}.values")
        gathered = []
        for t, n in ((indices, f"{name}.indices"), (values, f"{name}.values")):
            dtype = t.dtype
            gathered.append(enqueue("allgather", n, t, None,
                                    lambda r, dtype=dtype: from_core(r[0], r[1], dtype), process_set=self._process_set))
        return tuple(gathered), "sparse", None

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those still missing) and writes the results to p.grad."""
        if not self._active:
            self._synchronized = True
            return
        for p in self._requires_update:
            entry = self._handles.get(p)
            if entry is None or entry[0] is None:
                if p.grad is None:  # unused in this forward on this rank: the others still expect it
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
                self._handles[p] = self._allreduce_grad_async(p)
        error = None
        for p, (handle, buffer, ctx) in self._handles.items():
            try:
                if buffer == "sparse":
                    indices, values = _wait(handle[0]), _wait(handle[1])
                    if self._op == ops.Average:
                        values = values / self._process_set.size()
                    p.grad = torch.sparse_coo_tensor(indices.t(), values, p.grad.shape, check_invariants=False)
                else:
                    _wait(handle)
                    if p.grad.is_sparse:  # sparse_as_dense: back to sparse, as Horovod, for sparse optimizers
                        p.grad = self._compression.decompress(buffer, ctx).to_sparse()
                    elif buffer is not p.grad:  # compressed or made contiguous: write the result back
                        p.grad.copy_(self._compression.decompress(buffer, ctx))
            except Exception as e:  # noqa: BLE001 - wait for the rest, then raise the first
                error = error or e
            self._delay[p] = self.backward_passes_per_step
        self._handles.clear()
        self._synchronized = True
        if error is not None:
            raise error

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For `opt.synchronize(); clip gradients; with opt.skip_synchronize(): opt.step()`."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(
                    "optimizer.step() called without optimizer.skip_synchronize() after optimizer.synchronize(): "
                    "the gradients are allreduced again. Use `with optimizer.skip_synchronize(): optimizer.step()`.",
                    stacklevel=2,
                )
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, set_to_none=True):
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
                "optimizer.synchronize(): the gradients' allreduces are still writing into p.grad"
            )
        return super().zero_grad(set_to_none)


def _allreduce_names(param_groups, named_parameters, instance):
    prefix = "DistributedOptimizer.Allreduce." if instance == 0 else f"DistributedOptimizer{instance}.Allreduce."
    params = [p for group in param_groups for p in group["params"]]
    if named_parameters is None:
        return {p: f"{prefix}noname.{i}" for i, p in enumerate(params)}
    named = list(named_parameters)
    if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
        raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                         "usually model.named_parameters()")
    names = [n for n, _ in named]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"named_parameters has duplicate names: {', '.join(duplicates)}")
    by_param = {p: f"{prefix}{n}" for n, p in named}
    unnamed = [i for i, p in enumerate(params) if p not in by_param]
    if unnamed:
        raise ValueError(f"named_parameters was given, but the optimizer's parameters #{unnamed} (in param_groups "
                         "order) are not among them")
    return by_param


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=ops.Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set):
    """Wraps `optimizer` (any torch.optim.Optimizer); see the module docstring.

    The result is an instance of a subclass of optimizer's class that shares its
    param_groups, state and hooks, so isinstance checks, state_dict() and LR
    schedulers keep working. Every rank must wrap its optimizer the same way.
    """
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("the optimizer is already a DistributedOptimizer")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("DistributedOptimizer: optimizer must be a torch.optim.Optimizer, "
                        f"got {type(optimizer).__name__}")
    op = ops.resolve(op, None, "DistributedOptimizer", adasum=True)
    if op != ops.Average and gradient_predivide_factor != 1.0:
        raise ValueError("gradient_predivide_factor is only supported with op=Average")
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be at least 1, got {backward_passes_per_step}")
    if groups is None and num_groups:
        groups = num_groups
    if groups is not None and not (isinstance(groups, int) and groups > 0 or isinstance(groups, (list, tuple))):
        raise ValueError("groups must be a positive number of groups or a list of lists of parameters")
    if op == ops.Adasum:
        return _adasum_optimizer(optimizer, named_parameters, compression, backward_passes_per_step, process_set)
    base = optimizer.__class__
    cls = _classes.get(base)
    if cls is None:
        cls = _classes[base] = type(base.__name__, (_DistributedOptimizer, base), {"__module__": __name__})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update({k: v for k, v in optimizer.__dict__.items() if k not in _NOT_SHARED})
    wrapped._horo_setup(named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor, groups,
                        sparse_as_dense, process_set)
    return wrapped


def _adasum_optimizer(optimizer, named_parameters, compression, backward_passes_per_step, process_set):
    from horo.torch.adasum_optimizer import _DistributedAdasumOptimizer

    base = optimizer.__class__
    key = (base, "adasum")
    cls = _classes.get(key)
    if cls is None:
        cls = _classes[key] = type(base.__name__, (_DistributedAdasumOptimizer, base), {"__module__": __name__})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update({k: v for k, v in optimizer.__dict__.items() if k not in _NOT_SHARED})
    names = _allreduce_names(optimizer.param_groups, named_parameters, next(_instances))
    wrapped._horo_setup(named_parameters, compression, backward_passes_per_step,
                        global_process_set if process_set is None else process_set, names)
    return wrapped

"""DistributedOptimizer(op=hvd.Adasum): Horovod's delta optimizer.

Adasum combines what each rank's optimizer would do, not raw gradients: every rank
steps its wrapped optimizer on its own gradients, the change each parameter saw
(delta = after - before) is combined over the ranks with the Adasum allreduce, and
every rank sets parameter = before + combined delta. With plain SGD that is
-lr * Adasum(gradients); with Adam, Adasum of the Adam steps, as in Horovod.
All deltas travel as one grouped allreduce; the core fuses them and keeps each
parameter's own Adasum coefficients.
"""
import contextlib

import torch

from horo import ops
from horo.handles import synchronize_all
from horo.torch.enqueue import enqueue
from horo.enqueue import returning
from horo.torch.tensors import checked


class _DistributedAdasumOptimizer:
    """Mixin placed before the wrapped optimizer's class, as _DistributedOptimizer."""

    def _horo_setup(self, named_parameters, compression, backward_passes_per_step, process_set, names):
        self._compression = compression
        self._process_set = process_set
        self.process_set = process_set
        self.op = ops.Adasum
        self.backward_passes_per_step = backward_passes_per_step
        self._names = names
        self._synchronized = False
        self._should_synchronize = True

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes

    def synchronize(self):
        """Nothing to wait for: Adasum combines the optimizer's steps, in step()."""
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        active = self._process_set.included() and self._process_set.size() > 1
        if not active:
            return super().step(closure)
        for p in params:
            if p.grad is None:  # unused on this rank: no local step, but the ranks still combine its delta (zero)
                p.grad = torch.zeros_like(p)
        starts = [p.detach().clone() for p in params]
        loss = super().step(closure)
        deltas, handles, contexts = [], [], []
        with torch.no_grad():
            for p, start in zip(params, starts):
                delta, ctx = self._compression.compress(p.detach() - start)
                delta = checked(delta.contiguous(), self._names[p])
                deltas.append(delta)
                contexts.append(ctx)
                handles.append(enqueue("allreduce", self._names[p], delta, delta, returning(delta), ops.Adasum, 1.0,
                                       1.0, process_set=self._process_set))
            synchronize_all(handles)
            for p, start, delta, ctx in zip(params, starts, deltas, contexts):
                p.copy_(start + self._compression.decompress(delta, ctx).to(p.dtype))
        self._synchronized = False
        return loss

"""poll() and synchronize() for handles of torch collectives.

Single collectives use horo's handles directly (their finish() already returns
torch tensors). A grouped *_async call returns ONE handle, as in Horovod, whose
synchronize() returns the list of outputs.
"""
from horo import handles as _handles


class GroupHandle:
    """The handles of a grouped collective, enqueued together so the core fuses them."""

    __slots__ = ("handles",)

    def __init__(self, handles):
        self.handles = list(handles)

    def __repr__(self):
        return f"GroupHandle({self.handles})"


class SparseAllreduceHandle:
    """sparse_allreduce_async's handle: the allgathers of every rank's indices and values."""

    __slots__ = ("indices", "values", "shape", "divisor")

    def __init__(self, indices, values, shape, divisor):
        self.indices, self.values, self.shape, self.divisor = indices, values, shape, divisor

    def __call__(self):
        """Waits and returns the sparse result: Horovod's sparse_allreduce_async returns a callable."""
        return self.finish()

    def finish(self):
        import torch

        indices, values = _handles.synchronize_all([self.indices, self.values])
        if self.divisor != 1:
            values = values / self.divisor
        # Rows several ranks touched appear once per rank: the sparse tensor sums them when coalesced.
        return torch.sparse_coo_tensor(indices.t(), values, self.shape)


def poll(handle):
    """True once the collective behind `handle` has finished (successfully or not)."""
    if isinstance(handle, SparseAllreduceHandle):
        return _handles.poll(handle.indices) and _handles.poll(handle.values)
    if isinstance(handle, GroupHandle):
        return all(_handles.poll(h) for h in handle.handles)
    return _handles.poll(handle)


def synchronize(handle):
    """Waits for `handle` and returns its output (a list for a grouped handle); raises HoroError if it failed."""
    if type(handle) is int:  # the hot path (every gradient of a DistributedOptimizer): one test, not three
        return _handles.synchronize(handle)
    if isinstance(handle, SparseAllreduceHandle):
        return handle.finish()
    if isinstance(handle, GroupHandle):
        return _handles.synchronize_all(handle.handles)
    return _handles.synchronize(handle)

"""Elastic training for PyTorch, Horovod's API: `hvd.elastic.run`, TorchState, ObjectState, ElasticSampler.

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    state.register_reset_callbacks([lambda: scale_lr(hvd.size())])

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, start=state.batch): ...
                state.sampler.record_batch(state.batch, batch_size)
                if state.batch % 10 == 0:
                    state.commit()

Launch with `horo-run -np N --min-np A --max-np B --host-discovery-script S python train.py`;
see horo.elastic for how a lost rank or a new host is handled.
"""
import copy
import math
import pickle
import struct

import torch

from horo import basics
from horo.elastic import ObjectState as _ObjectState
from horo.elastic import State, driver_link, run, run_fn
from horo.elastic.commit_slots import ALIGNMENT
from horo.errors import HorovodInternalError, HostsUpdatedInterrupt
from horo.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters

_SKELETON_LENGTH = struct.Struct("!Q")
_PADDING = bytes(ALIGNMENT)
_LAST = object()  # _ModelHandler.save: into the last snapshot

__all__ = ["run", "run_fn", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HorovodInternalError", "HostsUpdatedInterrupt"]


class ObjectState(_ObjectState):
    """Picklable values kept, restored and synchronised with the job: ObjectState(epoch=0, batch=0)."""

    def __init__(self, bcast_object=broadcast_object, get_rank=basics.rank, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank, **kwargs)


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset over the current ranks and, after a reset, over the new ones, skipping the
    samples the job already processed this epoch: the epoch resumes where the last commit left it.

    Call `record_batch(batch_idx, batch_size)` after each batch, and `set_epoch(epoch)` when an
    epoch ends; keep the sampler in the state (TorchState(..., sampler=sampler)).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of `batch_size` samples on every rank as processed."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        self.processed_num += len(indices) * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Re-shards what is left of the epoch over the ranks there are now."""
        self.num_replicas = basics.size() if basics.is_initialized() else 1
        self.rank = basics.rank() if basics.is_initialized() else 0
        # The epoch's order is the same on every rank and in every launch (seeded by the epoch alone),
        # so "the first processed_num samples" names the same samples after a reset.
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=generator).tolist()
        else:
            order = list(range(len(self.dataset)))
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        # Pad (repeating the first samples) to an even share per rank, as DistributedSampler does.
        indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


def _clone_tree(obj):
    """A copy of a state_dict-like tree whose tensors share no memory with `obj`'s."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        out = type(obj)((k, _clone_tree(v)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):  # a module's state_dict carries its version here
            out._metadata = copy.deepcopy(obj._metadata)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone_tree(v) for v in obj)
    return copy.deepcopy(obj)


def _copy_into(saved, current):
    """`current` copied into the earlier snapshot `saved`, into its tensors where they still fit: a commit
    then writes into memory it already has, instead of allocating (and page-faulting) a model's worth."""
    if isinstance(current, torch.Tensor):
        if isinstance(saved, torch.Tensor) and saved is not current and saved.shape == current.shape \
                and saved.dtype == current.dtype and saved.device == current.device:
            return saved.copy_(current.detach())
        return current.detach().clone()
    if isinstance(current, dict) and type(saved) is type(current):
        out = type(current)((k, _copy_into(saved.get(k), v)) for k, v in current.items())
        if hasattr(current, "_metadata"):
            out._metadata = copy.deepcopy(current._metadata)
        return out
    if isinstance(current, list) and isinstance(saved, list) and len(saved) == len(current):
        return [_copy_into(s, c) for s, c in zip(saved, current)]
    return _clone_tree(current)


class _TensorRef:
    """Stands for a tensor in the pickled skeleton of a commit; its bytes lie at `offset` in the commit."""

    def __init__(self, offset, nbytes, dtype, shape):
        self.offset, self.nbytes, self.dtype, self.shape = offset, nbytes, dtype, tuple(shape)


class _Tensors(list):
    """The tensors _split takes out, and the bytes they take so far (each one's offset, kept as it goes:
    summing the list again per tensor is quadratic in a model's hundreds of tensors). Each starts on
    ALIGNMENT, so a view of a commit's bytes is a tensor of its dtype in place."""
    nbytes = 0


def _split(obj, tensors):
    """`obj` with each tensor replaced by a _TensorRef; the tensors (CPU, contiguous) appended to `tensors`
    (a _Tensors)."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        offset = -(-tensors.nbytes // ALIGNMENT) * ALIGNMENT
        nbytes = t.numel() * t.element_size()
        tensors.append((offset, t))
        tensors.nbytes = offset + nbytes
        return _TensorRef(offset, nbytes, t.dtype, t.shape)
    if isinstance(obj, dict):
        out = type(obj)((k, _split(v, tensors)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_split(v, tensors) for v in obj)
    return obj


def _join(obj, data, copy=True):
    """`obj` with each _TensorRef replaced by its tensor from the commit's bytes `data`: a copy, or
    (`copy=False`) a view of them."""
    if isinstance(obj, _TensorRef):
        if obj.nbytes == 0:
            return torch.empty(obj.shape, dtype=obj.dtype)
        raw = torch.frombuffer(data, dtype=torch.uint8, count=obj.nbytes, offset=obj.offset)
        tensor = raw.view(obj.dtype).reshape(obj.shape)
        return tensor.clone() if copy else tensor
    if isinstance(obj, dict):
        out = type(obj)((k, _join(v, data, copy)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_join(v, data, copy) for v in obj)
    return obj


class _ModelHandler:
    def __init__(self, value):
        self.value = value
        self.saved = None
        self.save()  # as in Horovod: restore() before any commit goes back to the start

    def save(self, into=_LAST):
        """Copies the state into the last snapshot's tensors, into `into`'s (views of a commit slot), or
        (None) into new memory."""
        self.saved = _copy_into(self.saved if into is _LAST else into, self.value.state_dict())

    def restore(self):
        # A copy: an optimizer's load_state_dict keeps the tensors it is given, which would tie the
        # live state to the snapshot.
        self.value.load_state_dict(_clone_tree(self.saved))

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_ModelHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_ModelHandler):
    def sync(self):
        # load_state_dict re-shards over the current ranks
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=0))


def _handler_for(value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return None


class TorchState(ObjectState):
    """A model, an optimizer and any other values (samplers, epoch, batch ...) as one elastic state.

    Modules, optimizers and ElasticSamplers are kept through their state_dicts and synchronised with
    broadcast_parameters / broadcast_optimizer_state; other values as in ObjectState."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers = {}
        for name, value in list(kwargs.items()):
            handler = _handler_for(value)
            if handler is not None:
                handlers[name] = handler
                del kwargs[name]
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, **kwargs)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].value = value
        super().__setattr__(name, value)

    def save(self):
        # The snapshot is overwritten in place: first let rank 0's hand-off of the last commit, which
        # sends from it, finish. On rank 0 of an elastic launch the tensors are saved into the slot the
        # commit goes to, so the commit is in place there (committed_into keeps the views).
        driver_link.handoff_done()
        handoff = driver_link.handoff() if driver_link.under_driver() and basics.rank() == 0 else None
        slot = handoff.next_slot() if handoff is not None else None
        views = slot.saved[1] if slot is not None and slot.saved is not None else {}
        for name, handler in self._handlers.items():
            # Where the slot has no views yet, new memory: the last snapshot may be the commit the driver holds.
            handler.save(views.get(name) if slot is not None else _LAST)
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()
        self.save()

    def serialize(self):
        # Every tensor's bytes straight from the snapshot (no copy), each on ALIGNMENT, then a small
        # pickled skeleton and its length: the tensors' offsets do not move when the skeleton does.
        tensors = _Tensors()
        self._handler_refs = {name: _split(h.saved, tensors) for name, h in self._handlers.items()}
        self._layout = [(offset, t.dtype, t.shape) for offset, t in tensors]
        skeleton = pickle.dumps({"handlers": self._handler_refs, "objects": self._saved_state},
                                protocol=pickle.HIGHEST_PROTOCOL)
        parts, at = [], 0
        for offset, t in tensors:
            if t.numel():
                parts += [_PADDING[:offset - at], t.reshape(-1).view(torch.uint8).numpy()]
                at = offset + t.numel() * t.element_size()
        return parts + [_PADDING[:tensors.nbytes - at], skeleton, _SKELETON_LENGTH.pack(len(skeleton))]

    def committed_into(self, slot):
        if slot is not None and (slot.saved is None or slot.saved[0] != self._layout):
            # The slot's bytes as tensors of this layout: the next commit into this slot saves into them.
            slot.saved = (self._layout, {name: _join(refs, slot.view(0, slot.capacity), copy=False)
                                         for name, refs in self._handler_refs.items()})

    def deserialize(self, data):
        data = bytearray(data) if isinstance(data, bytes) else data  # torch.frombuffer wants it writable
        (length,) = _SKELETON_LENGTH.unpack_from(data, len(data) - _SKELETON_LENGTH.size)
        skeleton_at = len(data) - _SKELETON_LENGTH.size - length
        skeleton = pickle.loads(memoryview(data)[skeleton_at:skeleton_at + length])
        for name, refs in skeleton["handlers"].items():
            if name in self._handlers:
                self._handlers[name].saved = _join(refs, data)
        self._saved_state = skeleton["objects"]

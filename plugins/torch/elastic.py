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
import io
import math

import torch

from horo import basics
from horo.elastic import ObjectState as _ObjectState
from horo.elastic import State, run, run_fn
from horo.errors import HorovodInternalError, HostsUpdatedInterrupt
from horo.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters

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


class _ModelHandler:
    def __init__(self, model):
        self.value = model
        self.saved = None

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

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
        for handler in self._handlers.values():
            handler.save()
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
        buffer = io.BytesIO()
        torch.save({"handlers": {name: h.saved for name, h in self._handlers.items()},
                    "objects": self._saved_state}, buffer)
        return buffer.getvalue()

    def deserialize(self, data):
        saved = torch.load(io.BytesIO(data), weights_only=False)
        for name, value in saved["handlers"].items():
            if name in self._handlers:
                self._handlers[name].saved = value
        self._saved_state = saved["objects"]

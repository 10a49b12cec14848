"""Elastic training for TensorFlow 2 / Keras 3, Horovod's API: `hvd.elastic.run`, TensorFlowKerasState,
TensorFlowState, ObjectState. See horo.elastic for how a lost rank or a new host is handled.

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ... one step ...
            state.commit()
"""
import pickle

import numpy as np
import tensorflow as tf

from horo import basics
from horo.elastic import ObjectState as _ObjectState
from horo.elastic import State, run, run_fn
from horo.errors import HorovodInternalError, HostsUpdatedInterrupt
from horo.tensorflow.functions import broadcast_object, broadcast_variables

__all__ = ["run", "run_fn", "State", "ObjectState", "TensorFlowKerasState", "TensorFlowState",
           "HorovodInternalError", "HostsUpdatedInterrupt"]


class ObjectState(_ObjectState):
    """Picklable values kept, restored and synchronised with the job: ObjectState(epoch=0, batch=0)."""

    def __init__(self, bcast_object=broadcast_object, get_rank=basics.rank, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank, **kwargs)


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


class _VariablesState(ObjectState):
    """Variables kept as NumPy copies at save(); the subclasses say which variables."""

    def _variables(self):
        raise NotImplementedError

    def _prepare(self):
        """Creates variables made lazily (a Keras optimizer's), so every rank has the same list."""

    def save(self):
        self._saved_values = [np.array(v.numpy(), copy=True) for v in self._variables()]
        super().save()

    def restore(self):
        self._prepare()
        variables = self._variables()
        if len(variables) != len(self._saved_values):
            raise ValueError(f"elastic state: {len(self._saved_values)} variables were committed, but the model and "
                             f"optimizer now have {len(variables)}")
        for variable, value in zip(variables, self._saved_values):
            variable.assign(value)
        super().restore()

    def sync(self):
        self._prepare()
        broadcast_variables(self._variables(), root_rank=0)
        super().sync()
        self.save()

    def serialize(self):
        return pickle.dumps({"variables": self._saved_values, "objects": self._saved_state},
                            protocol=pickle.HIGHEST_PROTOCOL)

    def deserialize(self, data):
        saved = pickle.loads(data)
        self._saved_values = saved["variables"]
        self._saved_state = saved["objects"]


class TensorFlowKerasState(_VariablesState):
    """A Keras model, its optimizer (default: model.optimizer) and other values as one elastic state."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend  # accepted for Horovod compatibility (Keras 3 has no session to pass)
        self._saved_values = []
        super().__init__(**kwargs)
        self._prepare()
        self.save()

    def _prepare(self):
        optimizer = self.optimizer
        if optimizer is not None and hasattr(optimizer, "built") and not optimizer.built:
            optimizer.build(self.model.trainable_variables)

    def _variables(self):
        return list(self.model.variables) + _optimizer_variables(self.optimizer)


class TensorFlowState(_VariablesState):
    """A list of tf.Variables and other values as one elastic state (TF2, eager)."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise ValueError("TensorFlowState: TF1 sessions are not supported by horo; use eager TF2 variables")
        self.variables = list(variables or [])
        self._saved_values = []
        super().__init__(**kwargs)
        self.save()

    def _variables(self):
        return self.variables

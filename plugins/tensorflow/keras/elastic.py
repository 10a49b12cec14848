"""Elastic training for Keras 3, Horovod's API: KerasState and the callbacks that keep it current
inside `model.fit`. See horo.elastic for how a lost rank or a new host is handled.

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=10)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(x, y, steps_per_epoch=..., epochs=epochs - state.epoch, callbacks=callbacks)
"""
import keras

from horo.errors import HorovodInternalError, HostsUpdatedInterrupt
from horo.tensorflow.elastic import ObjectState, State, TensorFlowKerasState, run, run_fn

__all__ = ["run", "run_fn", "State", "ObjectState", "KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "HorovodInternalError", "HostsUpdatedInterrupt"]


class KerasState(TensorFlowKerasState):
    """A Keras model, its optimizer and other values as one elastic state."""


class CommitStateCallback(keras.callbacks.Callback):
    """Commits the state every `batches_per_commit` batches (put it after the Update*StateCallbacks)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps `state.batch` at the batches done this epoch; at an epoch's last batch it marks the epoch done
    (batch 0 of the next), so a commit there resumes with the next epoch.

    Keras 3's `fit` cannot start an epoch part-way: after a reset from a commit inside an epoch, that epoch
    runs again from its first batch (with the committed weights). Commit at epoch ends, or size the epochs
    to the commit interval, where no step may run twice."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None
        self.initial_epoch = state.epoch
        self.epoch = 0

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        steps = self.params.get("steps") if self.params else None
        if steps and self.steps_per_epoch is None:
            self.steps_per_epoch = steps

    def on_train_batch_end(self, batch, logs=None):
        if self.steps_per_epoch and batch + 1 >= self.steps_per_epoch:
            self.state.batch = 0
            self.state.epoch = self.initial_epoch + self.epoch + 1
        else:
            self.state.batch = batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps `state.epoch` at the epochs done, counting those of earlier launches."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1

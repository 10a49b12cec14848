"""Keras 3 callbacks for data-parallel training, with Horovod's names and arguments.

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),   # same start on every rank
        hvd.callbacks.MetricAverageCallback(),                # epoch logs averaged over ranks
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.01 * hvd.size(), warmup_epochs=3),
    ]

Put MetricAverageCallback before callbacks that read the logs (checkpointing, early
stopping): they then see the same, averaged, figures on every rank.
"""
import keras
import numpy as np

import horo.tensorflow as htf


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """At the start of training, every rank takes root_rank's model and optimizer variables.

    Keras 3 creates optimizer variables lazily; `fit` builds the optimizer before
    `on_train_begin`, and this callback builds it on the model's trainable variables
    if nothing has, so momentum (etc.) is broadcast too and not left per rank."""

    def __init__(self, root_rank=0, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device  # accepted for Horovod compatibility; horo broadcasts from host memory
        # Horovod's: variables each rank keeps (e.g. a PartialDistributedOptimizer's local layers).
        self.local_variables = [] if local_variables is None else list(local_variables)
        self.broadcast_done = False

    def on_train_begin(self, logs=None):
        if self.broadcast_done:
            return
        model, optimizer = self.model, self.model.optimizer
        variables = list(model.variables)
        if optimizer is not None:
            if not optimizer.built:
                optimizer.build(model.trainable_variables)
            variables += list(optimizer.variables)
        seen, unique = {id(v) for v in self.local_variables}, []
        for v in variables:  # a variable shared by two layers is broadcast once
            if id(v) not in seen:
                seen.add(id(v))
                unique.append(v)
        htf.broadcast_variables(unique, self.root_rank)
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """At the end of every epoch, each numeric entry of the logs becomes its average over ranks.

    Keras computes metrics on each rank's own shard; without this, rank 0 prints (and
    checkpoints on) figures from one shard only. Every rank must have the same keys, which
    holds when every rank runs the same fit()."""

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if _is_number(v))
        if not keys:
            return
        local = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        averaged = htf.allreduce(local, op=htf.Average, name=f"MetricAverageCallback.logs.{len(keys)}")
        for k, v in zip(keys, np.asarray(averaged)):
            logs[k] = float(v)


def _is_number(value):
    try:
        return np.ndim(value) == 0 and np.issubdtype(np.asarray(value).dtype, np.number)
    except Exception:
        return False


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets `optimizer.learning_rate = initial_lr * multiplier(epoch)` for start_epoch <= epoch < end_epoch.

    `multiplier`: a constant or a function of the epoch. With `staircase=True` the rate
    changes at the first batch of each epoch (integer epochs); with `staircase=False` at
    every batch, with a fractional epoch (epoch + batch / steps_per_epoch; steps_per_epoch
    defaults to what fit() reports).

    `momentum_correction` (Goyal et al., 2017): when the rate changes from lr to lr', the
    momentum buffers of an optimizer with momentum (SGD, RMSprop) are scaled by lr'/lr, so
    the velocity accumulated at the old rate is not applied at the new one. (Horovod scales
    the momentum coefficient for one step; Keras 3 compiles that coefficient into the train
    function, and scaling the buffer once is the same update.)
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("LearningRateScheduleCallback needs initial_lr")
        self.initial_lr = float(initial_lr)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            self.staircase = True  # a constant changes nothing within an epoch
            self.multiplier = lambda epoch: multiplier

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            steps = (self.params or {}).get("steps")
            if not steps:
                raise ValueError(f"{type(self).__name__}: pass steps_per_epoch (fit() did not report "
                                 "a number of steps per epoch)")
            self.steps_per_epoch = steps

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        epoch = self.current_epoch
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._set_learning_rate(self.initial_lr * self.multiplier(epoch))
        else:
            self._set_learning_rate(self.initial_lr * self.multiplier(epoch + batch / self.steps_per_epoch))

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = self._learning_rate()

    def _learning_rate(self):
        return float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))

    def _set_learning_rate(self, new_lr):
        optimizer = self.model.optimizer
        old_lr = self._learning_rate()
        optimizer.learning_rate = new_lr
        if self.momentum_correction and old_lr > 0 and new_lr != old_lr:
            for buffer in _momentum_buffers(optimizer):
                buffer.assign(buffer * (new_lr / old_lr))


def _momentum_buffers(optimizer):
    """The velocity variables of an optimizer with a momentum coefficient (SGD, RMSprop), else []."""
    if not optimizer.built or not float(getattr(optimizer, "momentum", 0) or 0) > 0:
        return []
    for attr in ("momentums", "_momentums"):
        buffers = getattr(optimizer, attr, None)
        if buffers:
            return [b for b in buffers if b is not None]
    return []


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size to initial_lr over warmup_epochs (Goyal et al.).

    Large-batch recipe: scale the rate with the number of ranks (initial_lr = lr * size),
    but start from the single-rank rate and grow linearly, batch by batch, so the first
    noisy steps do not diverge. Horovod's formula: at fractional epoch e (counted at the
    end of the batch), lr = initial_lr / size * (e * (size - 1) / warmup_epochs + 1)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            epoch += 1.0 / self.steps_per_epoch  # round numbers at the end of each epoch
            n = htf.size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {self._learning_rate():g}.")


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Horovod's: a ModelCheckpoint that keeps only the best model by `monitor`. Horovod's
    estimators set `filepath` after building it; set `callback.filepath = "best.keras"` (or pass
    filepath=) before training. Pair it with MetricAverageCallback so every rank judges "best" on
    the same averaged figure, and give it to rank 0 only, so one process writes the file."""

    def __init__(self, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch", filepath=None):
        # Keras checks the path's suffix at construction: a placeholder stands in until one is set.
        super().__init__(filepath=filepath or "unset.keras", monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=False, mode=mode, save_freq=save_freq)
        if filepath is None:
            self.filepath = None

    def _save_model(self, epoch, batch, logs):
        if self.filepath is None:
            raise ValueError("BestModelCheckpoint has no filepath: set callback.filepath (e.g. 'best.keras') "
                             "before model.fit")
        return super()._save_model(epoch, batch, logs)

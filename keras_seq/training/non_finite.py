"""A guard against a loss that turns NaN or infinite: roll back, go on, give up after a few."""

import math
import time

import keras
import numpy as np


class NonFiniteGuard(keras.callbacks.Callback):
    """Rolls the model back to its last finite weights and optimizer state when a batch's loss is not finite.

    The weights and optimizer variables (not its learning rate, which a schedule or a
    callback owns) are copied at the start of training, once the optimizer has made its
    variables, after each epoch and every `copy_every` seconds, when all are finite. A batch whose running loss is
    NaN or infinite restores that copy, resets the running metrics and training goes on with
    the next batch (the steps since the copy are lost, the data is not replayed).
    The `max_events`-th non-finite loss ends training with `ValueError` instead. Put it before any
    callback that saves the model, so that no checkpoint holds non-finite weights.

    Args:
        max_events: the number of non-finite losses that ends training.
        name: how its messages begin (e.g. the recipe's name).
        copy_every: seconds between copies within an epoch.
    """

    def __init__(self, max_events=3, name="training", copy_every=60.0):
        super().__init__()
        self.max_events, self.name, self.copy_every = int(max_events), name, float(copy_every)
        self.events = 0
        self._good, self._copied = None, 0.0

    def on_train_begin(self, logs=None):
        self._keep_if_finite()

    def on_epoch_end(self, epoch, logs=None):
        self._keep_if_finite()

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)):
            # The optimizer makes its variables (Adam's moments) at the first step: copy them once they exist.
            stale = time.monotonic() - self._copied >= self.copy_every
            if stale or self._good is None or len(self._good[1]) != len(self._state_variables(self._model)):
                self._keep_if_finite()
            return
        self.events += 1
        if self.events >= self.max_events:
            raise ValueError(
                f"{self.name}: expected fewer than {self.max_events} non-finite losses (NonFiniteGuard max_events, "
                f"the recipes' --max-nan), got {self.events}; a lower learning rate may help"
            )
        if self._good is None:
            raise ValueError("NonFiniteGuard: the loss was not finite before any weights were finite to roll back to")
        weights, optimizer_values = self._good
        model = self.model  # on JAX, reading it syncs the training state, so the next step reads what is set here
        model.set_weights(weights)
        for variable, value in zip(self._state_variables(model), optimizer_values):
            variable.assign(value)
        model.reset_metrics()
        print(
            f"{self.name}: the loss was {float(loss)} at batch {batch}; rolled back to the last finite weights "
            f"({self.events}; the run ends at {self.max_events})",
            flush=True,
        )

    @staticmethod
    def _state_variables(model):
        return [v for v in model.optimizer.variables if v.name != "learning_rate"]

    def _keep_if_finite(self):
        self._copied = time.monotonic()
        weights = self.model.get_weights()
        optimizer_values = [keras.ops.convert_to_numpy(v) for v in self._state_variables(self.model)]
        if all(np.all(np.isfinite(w)) for w in weights + optimizer_values if np.issubdtype(w.dtype, np.floating)):
            self._good = (weights, optimizer_values)

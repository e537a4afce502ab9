"""Training to a budget of wall time or steps, with a learning rate sized to that budget."""

import time

import keras

from keras_seq import _validation as v


class TrainingBudget(keras.callbacks.Callback):
    """Stops `fit` once `seconds` of wall time or `steps` training steps are spent.

    Either limit may be None; with both, whichever comes first ends training.
    `spent_seconds` and `spent_steps` carry a resumed run's past. `fraction()` is the
    share of the budget spent so far, which `WarmupLinearDecay` reads to size the
    learning rate to the budget rather than to a guessed number of epochs.
    """

    def __init__(self, seconds=None, steps=None, spent_seconds=0.0, spent_steps=0):
        super().__init__()
        if seconds is not None:
            v.check_positive_number("TrainingBudget", "seconds", seconds)
        if steps is not None:
            v.check_positive_int("TrainingBudget", "steps", steps)
        self.seconds, self.steps = seconds, steps
        self.spent_seconds, self.spent_steps = float(spent_seconds), int(spent_steps)
        self.start = None

    def on_train_begin(self, logs=None):
        self.start = time.monotonic() - self.spent_seconds

    def elapsed(self):
        """Wall-clock seconds of training so far, a resumed run's earlier ones included."""
        return self.spent_seconds if self.start is None else time.monotonic() - self.start

    def fraction(self):
        """The share of the budget spent: the larger of the time and step shares (0 with no limit)."""
        shares = [0.0]
        if self.seconds is not None:
            shares.append(self.elapsed() / self.seconds)
        if self.steps is not None:
            shares.append(self.spent_steps / self.steps)
        return min(1.0, max(shares))

    def on_train_batch_end(self, batch, logs=None):
        self.spent_steps += 1
        if self.fraction() >= 1.0:
            self.model.stop_training = True


class WarmupLinearDecay(keras.callbacks.Callback):
    """Sets the optimizer's learning rate from the share of the budget spent.

    `lr(f) = peak * f / warmup` while `f < warmup`, then decays linearly from `peak`
    to `peak * final` at `f = 1`, where `f = budget.fraction()`. A linear decay to
    the end of a known budget trains best among common schedules when the budget is
    fixed (Li et al., 2020, "Budgeted training: rethinking deep neural network
    training under resource constraints", ICLR, section 4); linear warm-up keeps Adam's
    first Transformer steps stable (Vaswani et al., 2017, section 5.3).

    The optimizer must hold a plain number as its learning rate (not a schedule):
    the rate is assigned to its `learning_rate` variable, which every backend
    reads inside its compiled step. `f` is taken on a grid of `1 / resolution`, and
    the rate assigned when `f` reaches the next grid point: a few hundred
    assignments a run, and with a step budget the rate of every step is a function
    of the step alone, so a resumed run applies the same rates as an uninterrupted one.
    """

    resolution = 1000

    def __init__(self, budget, peak, warmup=0.05, final=0.0):
        super().__init__()
        v.check_positive_number("WarmupLinearDecay", "peak", peak)
        if not 0.0 <= warmup < 1.0:
            v.fail("WarmupLinearDecay", "warmup", "a share of the budget in [0, 1)", warmup)
        if not 0.0 <= final <= 1.0:
            v.fail("WarmupLinearDecay", "final", "a share of the peak in [0, 1]", final)
        if budget.seconds is None and budget.steps is None:
            v.fail("WarmupLinearDecay", "budget", "a TrainingBudget with seconds or steps", "one with neither")
        self.budget, self.peak, self.warmup, self.final = budget, float(peak), float(warmup), float(final)
        self._grid_point = None

    def rate(self, fraction):
        """The learning rate after `fraction` of the budget."""
        if fraction < self.warmup:
            return self.peak * max(fraction / self.warmup, 1e-3)
        decay = (fraction - self.warmup) / (1.0 - self.warmup)
        return self.peak * (1.0 - (1.0 - self.final) * min(decay, 1.0))

    def on_train_batch_begin(self, batch, logs=None):
        grid_point = int(self.budget.fraction() * self.resolution)
        if grid_point != self._grid_point:
            self.model.optimizer.learning_rate = self.rate(grid_point / self.resolution)
            self._grid_point = grid_point

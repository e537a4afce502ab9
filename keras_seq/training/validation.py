"""Validation by a score of the model's outputs (BLEU of decoded translations, ...) during `fit`."""

import time

import keras
import numpy as np

from keras_seq import _atomic as atomic
from keras_seq import _validation as v


class BestByValidation(keras.callbacks.Callback):
    """Scores the model during `fit`, keeps the best weights, stops early, averages the last.

    `score(model) -> {name: value}` runs after every epoch, and within an epoch once
    `every_seconds` have passed since the last one (when given); each value is
    logged as `val_<name>` (epoch-end scores go into the history, TensorBoard and
    the recipes' curves). `mode="max"` takes higher as better (BLEU, chrF,
    accuracy), `mode="min"` lower (perplexity, loss), as in Keras' `ModelCheckpoint`:
    the weights with the best `monitor` are kept (in memory, and in `path` when
    given), and training stops after `patience` scores without a gain (None: never).
    At the end of training the best weights are restored; with `average_last=K > 1`
    the element-wise mean of the last K scored weights is scored too and kept when
    it is at least as good (checkpoint averaging: Vaswani et al., 2017, section 6.1;
    Junczys-Dowmunt et al., 2016).

    `history` lists every score as `(elapsed seconds, {name: value})`;
    `best` is the best monitored value, `best_weights` its weights, and `chosen`
    says what was restored at the end (`"best"`, `"average of K"` or `"last"`).
    """

    def __init__(
        self, score, monitor, mode="max", patience=None, average_last=1, every_seconds=None, path=None, verbose=True
    ):
        super().__init__()
        if mode not in ("max", "min"):
            v.fail("BestByValidation", "mode", "'max' or 'min'", repr(mode))
        if patience is not None:
            v.check_positive_int("BestByValidation", "patience", patience)
        v.check_positive_int("BestByValidation", "average_last", average_last)
        if every_seconds is not None:
            v.check_positive_number("BestByValidation", "every_seconds", every_seconds)
        self.score, self.monitor, self.mode, self.patience = score, monitor, mode, patience
        self.average_last, self.every_seconds, self.path, self.verbose = average_last, every_seconds, path, verbose
        self.history, self.best, self.best_weights, self.chosen = [], None, None, "last"
        self.evaluations_without_gain = 0
        self._recent = []

    def on_train_begin(self, logs=None):
        self._start = self._last = time.monotonic()

    def _evaluate(self):
        scores = {name: float(value) for name, value in self.score(self.model).items()}
        if self.monitor not in scores:
            v.fail("BestByValidation", "score", f"a dict holding the monitored {self.monitor!r}", sorted(scores))
        if not all(np.isfinite(list(scores.values()))):
            v.fail("BestByValidation", "score", "finite values", scores)
        self._last = time.monotonic()
        self.history.append((self._last - self._start, scores))
        weights = self.model.get_weights()
        self._recent = (self._recent + [weights])[-self.average_last :]
        value = scores[self.monitor]
        if self.best is None or self._better(value, self.best):
            self.best, self.best_weights, self.evaluations_without_gain = value, weights, 0
            if self.path:
                self._save_best()
        else:
            self.evaluations_without_gain += 1
        if self.patience is not None and self.evaluations_without_gain >= self.patience:
            self.model.stop_training = True
        if self.verbose:
            shown = ", ".join(f"{name} {value:.4g}" for name, value in scores.items())
            print(
                f"validation: {shown} (best {self.monitor} {self.best:.4g}, "
                f"{self.evaluations_without_gain} without gain)",
                flush=True,
            )
        return scores

    def _save_best(self):
        with atomic.replaced_atomically(self.path) as path:  # a kill mid-write leaves the previous best
            self.model.save_weights(path)

    def _better(self, value, than):
        return value > than if self.mode == "max" else value < than

    def on_train_batch_end(self, batch, logs=None):
        if self.every_seconds is not None and time.monotonic() - self._last >= self.every_seconds:
            self._evaluate()

    def on_epoch_end(self, epoch, logs=None):
        scores = self._evaluate()
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in scores.items()})

    def on_train_end(self, logs=None):
        if self.best_weights is None:
            return
        self.model.set_weights(self.best_weights)
        self.chosen = "best"
        if len(self._recent) > 1:
            average = [np.mean(arrays, axis=0).astype(arrays[0].dtype) for arrays in zip(*self._recent)]
            self.model.set_weights(average)
            value = float(self.score(self.model)[self.monitor])
            if not self._better(self.best, value):
                self.best, self.best_weights, self.chosen = value, average, f"average of {len(self._recent)}"
                if self.path:
                    self._save_best()
            else:
                self.model.set_weights(self.best_weights)
            if self.verbose:
                print(
                    f"validation: the average of the last {len(self._recent)} gives {self.monitor} {value:.4g}; "
                    f"kept the {self.chosen}",
                    flush=True,
                )

"""A run's checkpoint, saved as one unit that a kill at any moment cannot tear.

`--output-dir/checkpoint/` holds the model with its optimizer state (`model.keras`),
the run's state (`state.json`: epoch, history, budget spent, validation) and the
best validated weights. A new checkpoint is written whole under a temporary name,
flushed, and only then published: the one it replaces becomes `checkpoint.previous/`
and stays until the next is complete. `load` takes the newest complete one and says
so when it has to fall back.
"""

import json
import os
import shutil
import signal
import sys
import threading
import time

import keras
import numpy as np

from keras_seq import _atomic as atomic

CHECKPOINT = "checkpoint"
PREVIOUS = "checkpoint.previous"
MODEL, STATE = "model.keras", "state.json"
BEST_WEIGHTS = "best.weights.h5"  # in the output folder while training; a copy goes into each checkpoint


class Unreadable(Exception):
    """A checkpoint folder that is missing, partial or torn."""


def save(directory, model, state):
    """Write `model` and `state` as `directory/checkpoint/`, keeping the one before as `checkpoint.previous/`."""
    current, previous = os.path.join(directory, CHECKPOINT), os.path.join(directory, PREVIOUS)
    staged = os.path.join(directory, f".partial-{os.getpid()}-{CHECKPOINT}")
    shutil.rmtree(staged, ignore_errors=True)
    os.makedirs(staged)
    try:
        model.save(os.path.join(staged, MODEL))
        best = os.path.join(directory, BEST_WEIGHTS)
        if os.path.exists(best):
            shutil.copyfile(best, os.path.join(staged, BEST_WEIGHTS))
        # Written last, with the model's digest: a state.json names a complete model.
        state = {**state, "model_sha256": atomic.sha256(os.path.join(staged, MODEL))}
        with open(os.path.join(staged, STATE), "w", encoding="utf-8") as f:
            json.dump(state, f)
        atomic.flush_to_disk(staged)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    # Each step leaves one complete checkpoint in place: `current`, then `previous`, then both.
    if os.path.isdir(current):
        shutil.rmtree(previous, ignore_errors=True)
        os.replace(current, previous)
    os.replace(staged, current)
    atomic.flush_to_disk(directory, files=False)


def exists(directory):
    return any(os.path.isdir(os.path.join(directory, name)) for name in (CHECKPOINT, PREVIOUS))


def load(directory, name):
    """`(model, state, best weights path or None)` of the newest complete checkpoint; one line when it
    falls back to the previous one; `Unreadable` when neither is complete."""
    problems = []
    for folder in (CHECKPOINT, PREVIOUS):
        path = os.path.join(directory, folder)
        try:
            model, state = _read(path)
        except Unreadable as problem:
            problems.append(f"{folder}/: {problem}")
            continue
        if problems:
            print(f"{name}: {problems[0]}; resuming from {folder}/ ({_position(state)})")
        best = os.path.join(path, BEST_WEIGHTS)
        return model, state, best if os.path.exists(best) else None
    raise Unreadable("; ".join(problems))


def recorded_state(directory):
    """The `state.json` of the newest checkpoint in `directory` that has one (`{}` if none), without its model."""
    for folder in (CHECKPOINT, PREVIOUS):
        try:
            with open(os.path.join(directory, folder, STATE), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            continue
    return {}


def _read(path):
    state_path, model_path = os.path.join(path, STATE), os.path.join(path, MODEL)
    if not os.path.isdir(path):
        raise Unreadable("missing")
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
        digest = atomic.sha256(model_path)
    except (OSError, ValueError) as error:
        raise Unreadable(f"incomplete ({type(error).__name__})") from None
    if digest != state.get("model_sha256"):
        raise Unreadable("torn (its model.keras is not the one its state.json names)")
    try:
        return keras.saving.load_model(model_path), state
    except Exception as error:  # noqa: BLE001 - any failure to read the model makes the checkpoint unusable
        raise Unreadable(f"model.keras unreadable ({type(error).__name__})") from None


def _position(state):
    return (
        f"epoch {state['epoch'] + 1}, after batch {state['batch']}"
        if "batch" in state
        else f"after epoch {state['epoch']}"
    )


class RunCheckpoint(keras.callbacks.Callback):
    """Saves the run as one checkpoint (model, optimizer state, data position, history) after
    each epoch, every `--checkpoint-every` seconds within one, and on SIGINT or SIGTERM, so
    `--resume` continues at the next batch with nothing lost or repeated.

    The state records the data position of the next batch (`position()`: the data's epoch and
    batch, whose order the seed fixes), the steps taken and the data's digest (`digest`, None
    for data held in memory), so `--resume` starts there and refuses other data. A signal
    saves at the next batch or epoch end, prints one line and exits with 128 + its number
    (130, 143); a second one exits at once (every write is atomic, nothing is left torn).
    Weights that are not all finite are never saved (`NonFiniteGuard` rolls them back).
    """

    def __init__(self, args, history, budget, position, digest=None, validation=None):
        super().__init__()
        self.args, self.history, self.budget, self.validation = args, history, budget, validation
        self.position, self.digest = position, digest
        self._signal, self._handlers = None, {}

    def on_train_begin(self, logs=None):
        self._last = time.monotonic()
        if threading.current_thread() is threading.main_thread():  # Python takes handlers there only
            for number in (signal.SIGINT, signal.SIGTERM):
                self._handlers[number] = signal.signal(number, self._on_signal)

    def restore_signal_handlers(self):
        for number, handler in self._handlers.items():
            signal.signal(number, handler)
        self._handlers = {}

    def _on_signal(self, number, frame):
        if self._signal is not None:
            os._exit(128 + number)
        self._signal = number

    def on_train_batch_end(self, batch, logs=None):
        if self._signal is not None:
            self._save_and_exit()
        if time.monotonic() - self._last >= self.args.checkpoint_every:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(value))
        if self._signal is not None:  # e.g. one that came during the validation
            self._save_and_exit()
        self.save()

    def on_train_end(self, logs=None):
        if self._signal is not None:
            self._save_and_exit()

    def _save_and_exit(self):
        state = self.save()
        print(
            f"{self.args.recipe}: {signal.Signals(self._signal).name}: saved {self.args.output_dir}/checkpoint/ at "
            f"{_position(state)}; the same command with --resume continues there",
            flush=True,
        )
        sys.exit(128 + self._signal)

    def save(self):
        """Write the checkpoint (unless a weight is not finite); returns its state."""
        epoch, batch = self.position()
        state = {
            "epoch": int(epoch),
            "batch": int(batch),
            "steps": self.budget.spent_steps,
            "history": self.history,
            "seconds": self.budget.elapsed(),
            "data_digest": self.digest,
        }
        if self.validation is not None and self.validation.best is not None:
            state["validation"] = {
                "best": self.validation.best,
                "without_gain": self.validation.evaluations_without_gain,
            }
        weights = self.model.get_weights()
        if all(np.all(np.isfinite(w)) for w in weights if np.issubdtype(w.dtype, np.floating)):
            save(self.args.output_dir, self.model, state)
        else:
            print(
                f"{self.args.recipe}: a weight is not finite; the checkpoint of {_position(state)} is not saved",
                flush=True,
            )
        self._last = time.monotonic()
        return state

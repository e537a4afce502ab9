"""Checkpoints and outputs that a kill cannot tear: atomic writes, the previous checkpoint kept, fault injection."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import types

import keras
import numpy as np
import pytest

from keras_seq import _atomic as atomic
from recipes import checkpoints, common

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_model(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    model.optimizer.build(model.trainable_variables)  # saved with its state, as after a step
    return model


def test_replaced_atomically_publishes_whole_files_and_folders_or_nothing(tmp_path):
    path = tmp_path / "metrics.json"
    atomic.write_text(path, "old")
    with pytest.raises(OSError):
        with atomic.replaced_atomically(path) as temporary:
            with open(temporary, "w") as f:
                f.write("half of the new")
            raise OSError(28, "No space left on device")  # a full disk mid-write
    assert path.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["metrics.json"]
    folder = tmp_path / "export"
    for version in ("first", "second"):
        with atomic.replaced_atomically(folder) as temporary:
            os.makedirs(os.path.join(temporary, "variables"))
            with open(os.path.join(temporary, "variables", "data"), "w") as f:
                f.write(version)
    assert (folder / "variables" / "data").read_text() == "second"
    assert sorted(os.listdir(tmp_path)) == ["export", "metrics.json"]  # no temporary or old copy left


def test_a_torn_or_partial_checkpoint_falls_back_to_the_previous_one(tmp_path, capsys):
    model = tiny_model()
    for epoch in (1, 2):
        checkpoints.save(tmp_path, model, {"epoch": epoch, "history": {}})
    loaded, state, best = checkpoints.load(tmp_path, "test")
    assert state["epoch"] == 2 and best is None
    np.testing.assert_array_equal(loaded.get_weights()[0], model.get_weights()[0])
    assert capsys.readouterr().out == ""

    with open(tmp_path / "checkpoint" / "model.keras", "r+b") as f:  # a torn model file
        f.seek(100)
        f.write(b"\0" * 64)
    _, state, _ = checkpoints.load(tmp_path, "test")
    assert state["epoch"] == 1
    assert capsys.readouterr().out == (
        "test: checkpoint/: torn (its model.keras is not the one its state.json names); "
        "resuming from checkpoint.previous/ (after epoch 1)\n"
    )
    os.remove(tmp_path / "checkpoint" / "state.json")  # a partial folder
    _, state, _ = checkpoints.load(tmp_path, "test")
    assert state["epoch"] == 1
    os.remove(tmp_path / "checkpoint.previous" / "model.keras")
    with pytest.raises(checkpoints.Unreadable, match="checkpoint/: incomplete.*checkpoint.previous/: incomplete"):
        checkpoints.load(tmp_path, "test")


def test_the_fallback_says_so_in_one_line(tmp_path, capsys):
    model = tiny_model()
    for epoch in (1, 2):
        checkpoints.save(tmp_path, model, {"epoch": epoch, "history": {}})
    os.remove(tmp_path / "checkpoint" / "state.json")
    checkpoints.load(tmp_path, "translate")
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "translate: checkpoint/: incomplete (FileNotFoundError); resuming from checkpoint.previous/ (after epoch 1)"
    ]


def test_reading_the_best_weights_on_resume_leaves_the_optimizer_at_the_checkpoints_step(tmp_path):
    """The best weights file also holds the optimizer state of its step; reading it must not roll the run back to it."""
    model = tiny_model()
    x, y = np.ones((4, 3), "float32"), np.zeros((4, 2), "float32")
    model.train_on_batch(x, y)
    model.save_weights(tmp_path / "best.weights.h5")  # as BestByValidation keeps them, after step 1
    best = model.get_weights()
    model.train_on_batch(x, y)
    model.train_on_batch(x, y)
    current = model.get_weights()
    moments = [keras.ops.convert_to_numpy(v) for v in model.optimizer.variables]
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 3

    read = common._weights_from_file(model, tmp_path / "best.weights.h5")
    for got, expected in zip(read, best, strict=True):
        np.testing.assert_array_equal(got, expected)
    for got, expected in zip(model.get_weights(), current, strict=True):
        np.testing.assert_array_equal(got, expected)
    for variable, expected in zip(model.optimizer.variables, moments, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), expected)  # step count 3 and its moments


def test_non_finite_weights_are_never_saved(tmp_path, capsys):
    model = tiny_model()
    args = types.SimpleNamespace(recipe="test", output_dir=str(tmp_path), checkpoint_every=300.0)
    budget = types.SimpleNamespace(spent_steps=5, elapsed=lambda: 1.0)
    checkpoint = checkpoints.RunCheckpoint(args, {}, budget, lambda: divmod(budget.spent_steps, 4))
    checkpoint.set_model(model)
    checkpoint.save()
    model.layers[0].kernel.assign(np.full((3, 2), np.nan, "float32"))
    budget.spent_steps = 6
    checkpoint.save()
    assert (
        "test: a weight is not finite; the checkpoint of epoch 2, after batch 2 is not saved" in capsys.readouterr().out
    )
    _, state, _ = checkpoints.load(tmp_path, "test")
    assert (state["epoch"], state["batch"], state["steps"]) == (1, 1, 5)  # the finite one stays
    assert not (tmp_path / "checkpoint.previous").exists()


SAVER = textwrap.dedent(
    """
    import sys
    import keras
    from recipes import checkpoints

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(64), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    model.optimizer.build(model.trainable_variables)
    epoch = 0
    while True:
        epoch += 1
        model.layers[0].kernel.assign(model.layers[0].kernel + 1.0)  # each checkpoint's weights differ
        checkpoints.save(sys.argv[1], model, {"epoch": epoch, "history": {}})
        print(epoch, flush=True)
    """
)


def test_sigkill_at_random_moments_always_leaves_a_resumable_checkpoint(tmp_path):
    """Fault injection: a process saving checkpoints in a loop is killed 4 times at seeded random moments,
    often mid-write; each time the newest complete checkpoint loads, at most one behind the last announced."""
    draw = random.Random(20)
    environment = dict(os.environ, PYTHONPATH=REPO)
    for attempt in range(4):
        process = subprocess.Popen(
            [sys.executable, "-c", SAVER, str(tmp_path)], env=environment, cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        announced = int(process.stdout.readline())  # keras imported, a first checkpoint saved
        time.sleep(draw.uniform(0.0, 0.5))
        process.send_signal(signal.SIGKILL)
        announced = max([announced] + [int(line) for line in process.stdout.read().split()])
        process.wait()
        model, state, _ = checkpoints.load(tmp_path, "test")
        assert state["epoch"] in (announced, announced + 1), (attempt, state["epoch"], announced)
        # The weights are those that epoch saved: the first kernel was raised by 1.0 per save.
        keras.utils.set_random_seed(0)
        initial = keras.Sequential([keras.Input((3,)), keras.layers.Dense(64), keras.layers.Dense(2)]).get_weights()[0]
        np.testing.assert_allclose(model.get_weights()[0], initial + state["epoch"], rtol=1e-6, atol=1e-4)
        leftovers = [name for name in os.listdir(tmp_path) if name not in ("checkpoint", "checkpoint.previous")]
        assert all(name.startswith(".partial-") for name in leftovers), (
            leftovers
        )  # a killed write leaves its own temporary
        atomic.remove_leftovers(tmp_path)  # what a recipe does before it starts
        # A kill between `save`'s two renames leaves the previous checkpoint alone, which `load` resumes from.
        assert sorted(os.listdir(tmp_path)) in (
            ["checkpoint"],
            ["checkpoint", "checkpoint.previous"],
            ["checkpoint.previous"],
        )

"""Training control shared by the recipes: --resume, --max-seconds and --seed."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
from recipe_runs import (
    RNN_TRAIN,
    TRANSLATE_BATCH,
    classify_argv,
    read_json,
    read_tsv,
    recipe_main,
    run_recipe,
    translate_argv,
)

from recipes import checkpoints

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = RNN_TRAIN // TRANSLATE_BATCH  # ceil(examples / batch): batches per epoch of the rnn-attention runs
TIMING = ("train_seconds", "export_seconds", "translate_seconds", "total_seconds")
# One xdist worker runs this module: its tests share the module's recipe runs (interrupted, uninterrupted, ...).
pytestmark = pytest.mark.xdist_group("recipe_training")


def weights(path):
    return [keras.ops.convert_to_numpy(w) for w in keras.saving.load_model(path, compile=False).weights]


def iterations(path):
    """The optimizer's step count saved in a checkpoint."""
    return int(keras.ops.convert_to_numpy(keras.saving.load_model(path).optimizer.iterations))


def without_timing(metrics):
    return {k: v for k, v in metrics.items() if k not in TIMING}


def assert_same_metrics(got, expected, rel):
    got, expected = without_timing(got), without_timing(expected)
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=rel, abs=1e-9), key
        else:
            assert got[key] == value, key


@pytest.fixture(scope="module")
def interrupted(data_dir, tmp_path_factory):
    """A two-epoch rnn-attention run stopped right after its first checkpoint (as a kill would stop it)."""
    output = tmp_path_factory.mktemp("interrupted")
    save = checkpoints.RunCheckpoint.on_epoch_end

    def save_then_stop(self, epoch, logs=None):
        save(self, epoch, logs)
        self.model.stop_training = True

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoints.RunCheckpoint, "on_epoch_end", save_then_stop)
        return run_recipe("translate", output, translate_argv(data_dir, output, "rnn-attention", 2))


@pytest.fixture(scope="module")
def resumed(interrupted, data_dir, tmp_path_factory):
    """The interrupted run, copied and resumed for its second epoch."""
    output = tmp_path_factory.mktemp("resumed")
    shutil.copytree(interrupted.dir, output, dirs_exist_ok=True)
    return run_recipe("translate", output, translate_argv(data_dir, output, "rnn-attention", 2, "--resume"))


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory):
    """The same two epochs in one go (rnn-attention has no dropout: nothing random is left unseeded)."""
    output = tmp_path_factory.mktemp("uninterrupted")
    return run_recipe("translate", output, translate_argv(data_dir, output, "rnn-attention", 2))


def test_resume_continues_epochs_history_and_optimizer(interrupted, resumed):
    first, state = (
        read_json(interrupted.path("checkpoint/state.json")),
        read_json(resumed.path("checkpoint/state.json")),
    )
    assert first["epoch"] == 1 and state["epoch"] == 2
    assert (
        sorted(state["history"])
        == sorted(first["history"])
        == ["loss", "masked_accuracy", "val_bleu", "val_chrf", "val_loss", "val_masked_accuracy"]
    )
    for key, values in state["history"].items():
        assert len(values) == 2, key
        assert values[0] == first["history"][key][0], key  # the first epoch's figures carried over
    assert read_json(resumed.path("metrics.json"))["epochs"] == resumed.metrics["epochs"] == 2
    assert iterations(interrupted.path("checkpoint/model.keras")) == STEPS
    assert iterations(resumed.path("checkpoint/model.keras")) == 2 * STEPS


def test_resume_ends_where_an_uninterrupted_run_ends(resumed, uninterrupted):
    for got, expected in zip(
        weights(resumed.path("model.keras")), weights(uninterrupted.path("model.keras")), strict=True
    ):
        np.testing.assert_allclose(got, expected, atol=1e-5)
    history, expected = (
        read_json(resumed.path("checkpoint/state.json"))["history"],
        read_json(uninterrupted.path("checkpoint/state.json"))["history"],
    )
    assert history == {k: pytest.approx(v, rel=1e-5) for k, v in expected.items()}
    # So are the translations of the two runs.
    assert read_tsv(resumed.path("predictions.tsv")) == read_tsv(uninterrupted.path("predictions.tsv"))
    assert_same_metrics(resumed.metrics, uninterrupted.metrics, rel=1e-5)


@pytest.fixture(scope="module")
def signalled(data_dir, tmp_path_factory):
    """A two-epoch rnn-attention run sent SIGTERM after its second batch (mid-epoch), then resumed."""
    output = tmp_path_factory.mktemp("signalled")
    argv = translate_argv(data_dir, output, "rnn-attention", 2)
    after_batch = checkpoints.RunCheckpoint.on_train_batch_end

    def signal_after_two_batches(self, batch, logs=None):
        if self.budget.spent_steps == 2 and self._signal is None:
            os.kill(os.getpid(), signal.SIGTERM)  # handled here, before the next line runs
        after_batch(self, batch, logs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoints.RunCheckpoint, "on_train_batch_end", signal_after_two_batches)
        with pytest.raises(SystemExit) as stopped:
            recipe_main("translate", argv)
    state = read_json(os.path.join(output, "checkpoint", "state.json"))
    return stopped.value.code, state, run_recipe("translate", output, argv + ["--resume"])


def test_sigterm_saves_mid_epoch_and_resume_takes_the_same_steps(signalled, uninterrupted):
    code, state, resumed = signalled
    assert code == 143
    assert (state["epoch"], state["batch"], state["steps"]) == (0, 2, 2)
    # The resumed run saw the rest of epoch 0 and all of epoch 1: as many steps as the run that never stopped,
    # on the same batches in the same order, so its last weights are the same.
    assert (
        iterations(resumed.path("checkpoint/model.keras"))
        == iterations(uninterrupted.path("checkpoint/model.keras"))
        == 2 * STEPS
    )
    for got, expected in zip(
        weights(resumed.path("checkpoint/model.keras")),
        weights(uninterrupted.path("checkpoint/model.keras")),
        strict=True,
    ):
        np.testing.assert_allclose(got, expected, atol=1e-5)


def steps_saved(output):
    """The steps of the newest complete checkpoint in `output` (0 before the first)."""
    try:
        with open(os.path.join(output, "checkpoint", "state.json")) as f:
            return json.load(f)["steps"]
    except (OSError, ValueError, KeyError):
        return 0


@pytest.fixture(scope="module")
def killed(data_dir, tmp_path_factory):
    """The two-epoch rnn-attention run, checkpointing after every batch, SIGKILLed at 4 seeded random moments
    (each a random delay after a random step was saved, so some land inside a checkpoint write), resumed each time.

    Returns the steps saved at each kill and the last, uninterrupted resume.
    """
    output = tmp_path_factory.mktemp("killed")
    argv = [str(a) for a in translate_argv(data_dir, output, "rnn-attention", 2, "--checkpoint-every", "0.001")]
    command = [sys.executable, "-m", "recipes.translate", *argv]
    draw = random.Random(23)
    targets = sorted(draw.sample(range(1, 2 * STEPS - 4), 4))
    saved_at_kills = []
    for kill, target in enumerate(targets):
        with open(output / f"stderr-{kill}.txt", "w+") as stderr:
            process = subprocess.Popen(
                command + (["--resume"] if kill else []),
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=dict(os.environ, PYTHONPATH=REPO),
            )
            started = time.monotonic()
            while steps_saved(output) < target and process.poll() is None and time.monotonic() - started < 600:
                time.sleep(0.005)
            time.sleep(draw.uniform(0.0, 0.1))
            process.kill()
            process.wait()
            stderr.seek(0)
            assert process.returncode == -signal.SIGKILL, (kill, process.returncode, stderr.read()[-2000:])
        saved_at_kills.append(steps_saved(output))
    return saved_at_kills, run_recipe("translate", output, argv + ["--resume"])


@pytest.mark.nightly  # five recipe starts: 1 to 2 minutes per backend (test_checkpoints.py kills the writer in CI)
def test_a_run_killed_four_times_ends_as_one_never_killed(killed, uninterrupted):
    saved_at_kills, resumed = killed
    assert saved_at_kills == sorted(saved_at_kills) and 0 < saved_at_kills[0] and saved_at_kills[-1] < 2 * STEPS
    state, expected = (
        read_json(resumed.path("checkpoint/state.json")),
        read_json(uninterrupted.path("checkpoint/state.json")),
    )
    assert (state["epoch"], state["steps"]) == (expected["epoch"], expected["steps"]) == (2, 2 * STEPS)
    assert iterations(resumed.path("checkpoint/model.keras")) == 2 * STEPS
    # The same batches in the same order: the same last weights, so the same validation loss at the last step, to
    # float noise. (A resumed process's Keras epochs start where the kill left the data, so the other per-epoch
    # figures are means over other windows of batches and are not compared.)
    for got, want in zip(
        weights(resumed.path("checkpoint/model.keras")),
        weights(uninterrupted.path("checkpoint/model.keras")),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert state["history"]["val_loss"][-1] == pytest.approx(expected["history"]["val_loss"][-1], rel=1e-5)


def test_max_seconds_stops_after_the_first_batch(tfds_classify_stopped):
    run = tfds_classify_stopped  # --epochs 2 of 16 examples in batches of 4, --max-seconds 0.001
    assert read_json(run.path("metrics.json"))["epochs"] == run.metrics["epochs"] == 1
    state = read_json(run.path("checkpoint/state.json"))
    # The data position: epoch 0 (counting from 0), after its first batch; the partial epoch's figures are in the
    # history.
    assert (state["epoch"], state["batch"], state["steps"]) == (0, 1, 1) and all(
        len(values) == 1 for values in state["history"].values()
    )
    assert iterations(run.path("checkpoint/model.keras")) == 1  # of the 4 batches of the epoch, only the first ran
    _, rows = read_tsv(run.path("predictions.tsv"))  # the run still ends with its outputs
    assert len(rows) == run.metrics["valid_examples"] == 16
    assert os.path.getsize(run.path("model.keras")) > 0 and os.path.isdir(run.path("export"))


def test_same_seed_same_results(classify_run, data_dir, tmp_path):
    metrics = recipe_main("classify", classify_argv(data_dir, tmp_path))
    assert without_timing(metrics) == without_timing(classify_run.metrics)
    assert read_tsv(tmp_path / "predictions.tsv") == read_tsv(classify_run.path("predictions.tsv"))
    for got, expected in zip(weights(tmp_path / "model.keras"), weights(classify_run.path("model.keras")), strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-6)


LONG_EPOCH_LINES, LONG_EPOCH_BATCH, STOP_STEP, LONG_EPOCH_STEPS = 100_000, 64, 30, 40


@pytest.fixture(scope="module")
def long_epoch(tmp_path_factory):
    """A generated 100,000-line training file (an epoch of 1,563 batches of 64) and the flags of 40 steps of it."""
    directory = tmp_path_factory.mktemp("long_epoch")
    draw = random.Random(11)
    for name, lines in (("train", LONG_EPOCH_LINES), ("valid", 40)):
        with open(directory / f"{name}.tsv", "w", encoding="utf-8") as f:
            for _ in range(lines):
                words = [f"w{draw.randrange(300)}" for _ in range(draw.randint(2, 8))]
                f.write(" ".join(words) + "\t" + " ".join(f"m{w[1:]}" for w in reversed(words)) + "\n")
    return lambda output: [
        "--train",
        directory / "train.tsv",
        "--valid",
        directory / "valid.tsv",
        "--model",
        "rnn-attention",
        "--vocabulary",
        "word",
        "--hidden-dim",
        16,
        "--batch-size",
        LONG_EPOCH_BATCH,
        "--max-steps",
        LONG_EPOCH_STEPS,
        "--learning-rate",
        0.02,
        "--warmup",
        0,
        "--num-beams",
        1,
        "--seed",
        3,
        "--output-dir",
        output,
    ]


def read_positions_and_rows(patch):
    """Record where each training dataset starts and the rows a run read of the prepared data."""
    from recipes import training_data

    seen = {"positions": [], "rows": None}
    dataset, read = training_data.PreparedBatches.dataset, training_data.PreparedBatches.read

    def recorded_dataset(self, position):
        seen["positions"].append(tuple(position))
        seen["plan"] = self.plan
        return dataset(self, position)

    def recorded_read(self):
        seen["rows"] = read(self)["rows"]
        return read(self)

    patch.setattr(training_data.PreparedBatches, "dataset", recorded_dataset)
    patch.setattr(training_data.PreparedBatches, "read", recorded_read)
    return seen


@pytest.mark.nightly  # three recipe runs that each prepare 100,000 lines: about 2 minutes per backend
def test_a_stop_deep_in_a_long_epoch_resumes_at_the_next_batch_without_reading_the_ones_before(long_epoch, tmp_path):
    never_stopped = tmp_path / "never_stopped"
    run_recipe("translate", never_stopped, long_epoch(never_stopped))
    output = tmp_path / "stopped"
    after_batch = checkpoints.RunCheckpoint.on_train_batch_end

    def signal_at_the_stop_step(self, batch, logs=None):
        if self.budget.spent_steps == STOP_STEP and self._signal is None:
            os.kill(os.getpid(), signal.SIGTERM)
        after_batch(self, batch, logs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoints.RunCheckpoint, "on_train_batch_end", signal_at_the_stop_step)
        with pytest.raises(SystemExit) as stopped:
            recipe_main("translate", long_epoch(output))
    assert stopped.value.code == 143
    state = read_json(output / "checkpoint" / "state.json")
    assert (state["epoch"], state["batch"], state["steps"]) == (0, STOP_STEP, STOP_STEP)
    with pytest.MonkeyPatch.context() as patch:
        seen = read_positions_and_rows(patch)
        run_recipe("translate", output, long_epoch(output) + ["--resume"])
    # It starts at the next batch and reads only the batches from there (a few more are prefetched), never the
    # 30 before: the first batch it reads is batch 30 of the epoch, not the first of a replay.
    assert seen["positions"] == [(0, STOP_STEP)]
    plan = seen["plan"]
    rows_from = lambda first, last: sum(len(plan.batch(0, i)[0]) for i in range(first, last))
    assert rows_from(STOP_STEP, LONG_EPOCH_STEPS) <= seen["rows"] <= rows_from(STOP_STEP, LONG_EPOCH_STEPS + 4)
    # The same batches in the same order as the run never stopped: the same weights after the 40 steps.
    assert iterations(output / "checkpoint" / "model.keras") == LONG_EPOCH_STEPS
    for got, want in zip(
        weights(output / "checkpoint" / "model.keras"),
        weights(never_stopped / "checkpoint" / "model.keras"),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, atol=1e-5)

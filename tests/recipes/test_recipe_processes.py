"""Several processes on 127.0.0.1 train the model one process does.

Both JAX's (`--num-processes`) and TensorFlow's (`TF_CONFIG`).
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from recipe_runs import BACKEND, REPO, recipe_main, short_pairs, translate_argv

from recipes import devices

TRAIN, VALID, BATCH = 240, 60, 6
several_processes = pytest.mark.skipif(
    BACKEND == "torch", reason="several processes train on JAX and TensorFlow (the last tests)"
)
# JAX computes a global batch's loss at once, but each process's products over its share of the rows sum in
# another order on some CPUs, and Adam magnifies the last bits of near-zero gradients: two processes' losses
# differed from one's by 4.4e-4 after two epochs on an Intel Xeon (none on an AMD EPYC), and some greedy tokens
# of this tiny model with them. tf.distribute (Keras' own scaling) averages each replica's mean over its target
# tokens, and the parts of a batch hold different numbers of them: the losses of two or four TensorFlow workers
# differ from one process's by up to a few 1e-3 (1.5e-3 seen), as on several local GPUs.
LOSS_TOLERANCE = 1e-3 if BACKEND == "jax" else 1e-2
# One xdist worker makes the single-process run the others are compared with.
pytestmark = pytest.mark.xdist_group("processes")


@pytest.fixture(scope="session")  # session: kept while its xdist worker runs other modules
def pairs_dir(tmp_path_factory):
    pairs = short_pairs(TRAIN + VALID)
    data = tmp_path_factory.mktemp("pairs")
    (data / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs[:TRAIN]), encoding="utf-8")
    (data / "valid.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs[TRAIN:]), encoding="utf-8")
    return data


def start(data, output_dir, count, *flags, epochs=2):
    """`count` translate processes on 127.0.0.1 (one when `count` is 1), as `subprocess.Popen`s."""
    env = {**os.environ, "KERAS_BACKEND": BACKEND, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": REPO}
    argv = [
        "--train",
        data / "train.tsv",
        "--valid",
        data / "valid.tsv",
        "--model",
        "transformer",
        "--epochs",
        epochs,
        "--batch-size",
        BATCH,
        "--learning-rate",
        0.005,
        "--warmup",
        0,
        "--hidden-dim",
        32,
        "--layers",
        1,
        "--max-length",
        6,
        "--num-beams",
        2,
        "--seed",
        3,
        "--vocabulary",
        "word",
        "--output-dir",
        output_dir,
        "--dropout",
        0,  # Keras does not checkpoint the dropout generator's state: a resumed run would draw other masks
        *flags,
    ]
    processes = []
    for flags, variables in devices.processes_on_this_host(count, BACKEND):
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "recipes.translate", *map(str, argv + flags)],
                env={**env, **variables},
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return processes


def finished(processes, timeout=900):
    outputs = [process.communicate(timeout=timeout) for process in processes]
    for process, (_, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-3000:]
    return outputs


def history(output_dir):
    with open(output_dir / "checkpoint" / "state.json", encoding="utf-8") as f:
        return json.load(f)["history"]


@pytest.fixture(scope="session")  # session: kept while its xdist worker runs other modules
def one_process(pairs_dir, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("one") / "out"
    finished(start(pairs_dir, output_dir, 1))
    return output_dir


@several_processes
def test_two_processes_train_as_one(pairs_dir, one_process, tmp_path):
    output_dir = tmp_path / "out"
    outputs = finished(start(pairs_dir, output_dir, 2))
    assert "process 1 of 2 done; process 0 writes the outputs" in outputs[1][0]
    for name in ("loss", "val_loss"):
        assert history(output_dir)[name] == pytest.approx(history(one_process)[name], rel=LOSS_TOLERANCE)
    assert sorted(os.listdir(tmp_path)) == ["out"]  # process 1 wrote nothing beside process 0's folder


@several_processes
@pytest.mark.nightly
def test_four_processes_train_as_one(pairs_dir, one_process, tmp_path):
    output_dir = tmp_path / "out"
    finished(start(pairs_dir, output_dir, 4))  # batches of 6: on JAX padded to 8 rows, 2 per process; TF splits 2/2/1/1
    assert history(output_dir)["loss"] == pytest.approx(history(one_process)["loss"], rel=LOSS_TOLERANCE)
    assert history(output_dir)["val_loss"][-1] == pytest.approx(
        history(one_process)["val_loss"][-1], rel=LOSS_TOLERANCE
    )


@several_processes
@pytest.mark.nightly
def test_killed_processes_resume_together(pairs_dir, one_process, tmp_path):
    output_dir = tmp_path / "out"
    processes = start(pairs_dir, output_dir, 2, "--checkpoint-every", 0.001)
    deadline = time.monotonic() + 600
    while not (output_dir / "checkpoint" / "state.json").exists() or _steps(output_dir) < 15:
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
        time.sleep(0.2)
    for process in processes:
        process.send_signal(signal.SIGKILL)
        process.communicate()
    finished(start(pairs_dir, output_dir, 2, "--resume"))
    # The last validation comes after the same 80 steps (epoch means of the training loss differ: Keras
    # averages a resumed epoch over the batches after the stop).
    assert _steps(output_dir) == _steps(one_process) == 2 * TRAIN // BATCH
    assert history(output_dir)["val_loss"][-1] == pytest.approx(
        history(one_process)["val_loss"][-1], rel=LOSS_TOLERANCE
    )


def _steps(output_dir):
    try:
        with open(output_dir / "checkpoint" / "state.json", encoding="utf-8") as f:
            return json.load(f)["steps"]
    except (OSError, ValueError, KeyError):
        return 0


@several_processes
def test_a_killed_process_ends_the_others_with_an_error(pairs_dir, tmp_path):
    output_dir = tmp_path / "out"
    processes = start(pairs_dir, output_dir, 2, "--checkpoint-every", 0.001, epochs=50)
    deadline = time.monotonic() + 600
    while _steps(output_dir) < 5:
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
        time.sleep(0.2)
    processes[1].send_signal(signal.SIGKILL)
    _, err = processes[0].communicate(timeout=300)  # never a hang
    assert processes[0].returncode == 2, err[-3000:]
    assert "translate: error:" in err


@pytest.mark.skipif(BACKEND != "torch", reason="torch's error")
def test_several_processes_on_torch_are_a_one_line_error(capsys, data_dir, tmp_path):
    argv = translate_argv(
        data_dir,
        tmp_path / "out",
        "transformer",
        1,
        "--num-processes",
        2,
        "--process-id",
        0,
        "--coordinator",
        "127.0.0.1:1",
    )
    with pytest.raises(SystemExit) as exit_info:
        recipe_main("translate", argv)
    assert exit_info.value.code == 2
    assert (
        "--num-processes 2: expected the jax backend (keras.distribution.initialize) or tensorflow with TF_CONFIG, "
        "got torch"
    ) in capsys.readouterr().err


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's workers come from TF_CONFIG")
@pytest.mark.parametrize(
    "tf_config, flags, expected",
    [
        (None, ["--num-processes", 2], "--num-processes 2: expected 1, what TF_CONFIG names"),
        (
            '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 1}}',
            ["--process-id", 0],
            "--process-id 0: expected 1, what TF_CONFIG names",
        ),
        (
            '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}',
            [],
            "TF_CONFIG: expected a worker task with an index in [0, 1)",
        ),
        ("{not json", [], "TF_CONFIG: expected JSON with cluster.worker"),
        (
            '{"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "chief", "index": 0}}',
            [],
            "TF_CONFIG: expected a cluster of workers alone",
        ),
        (None, ["--coordinator", "127.0.0.1:1"], "--coordinator 127.0.0.1:1: expected TF_CONFIG on tensorflow"),
    ],
)
def test_tensorflow_workers_disagreeing_with_tf_config_are_a_one_line_error(
    capsys, monkeypatch, data_dir, tmp_path, tf_config, flags, expected
):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(SystemExit) as exit_info:
        recipe_main("translate", translate_argv(data_dir, tmp_path / "out", "transformer", 1, *flags))
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's workers come from TF_CONFIG")
def test_torchrun_variables_without_tf_config_on_tensorflow_are_a_one_line_error(
    capsys, monkeypatch, data_dir, tmp_path
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit) as exit_info:
        recipe_main("translate", translate_argv(data_dir, tmp_path / "out", "transformer", 1))
    assert exit_info.value.code == 2
    assert "WORLD_SIZE 2: expected 1, what TF_CONFIG names" in capsys.readouterr().err


@pytest.mark.skipif(BACKEND == "torch", reason="several processes train on JAX and TensorFlow")
@pytest.mark.parametrize("budget", [["--max-seconds", 60], ["--validate-every", 30]])
def test_several_processes_take_a_budget_in_epochs_only(capsys, monkeypatch, data_dir, tmp_path, budget):
    # Checked before the processes join: each one's own clock would stop or validate it at another step.
    flags, variables = devices.processes_on_this_host(2, BACKEND)[0]
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    argv = [*translate_argv(data_dir, tmp_path / "out", "transformer", 1), *flags, *budget]
    with pytest.raises(SystemExit) as exit_info:
        recipe_main("translate", argv)
    assert exit_info.value.code == 2
    assert (
        f"{budget[-2]} {budget[-1]:g} with 2 processes: expected a budget in steps or epochs" in capsys.readouterr().err
    )

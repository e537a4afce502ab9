"""`--distribute` on two simulated CPU devices gives the losses of one device, and the rows that pad a
batch into equal parts for the devices change no loss."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from recipe_runs import BACKEND, recipe_main, translate_argv

import keras_seq as ks
from recipes import devices
from recipes.errors import UsageError

HERE = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(os.path.dirname(HERE))


def first_steps(device_count, distribute):
    env = {**os.environ, "KERAS_BACKEND": BACKEND, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": REPOSITORY}
    if BACKEND == "jax":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={device_count}"
    command = [
        sys.executable,
        os.path.join(HERE, "distributed_first_steps.py"),
        str(device_count),
        str(int(distribute)),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(BACKEND == "torch", reason="Keras has no data-parallel fit on torch (see the next test)")
def test_two_devices_match_one():
    single, parallel = first_steps(1, False), first_steps(2, True)
    assert single["replicas"] == 1 and parallel["replicas"] == 2
    assert parallel["losses"] == pytest.approx(single["losses"], rel=1e-5)
    assert parallel["losses"][1] < parallel["losses"][0]  # the step was taken, on both devices alike


@pytest.mark.skipif(BACKEND != "torch", reason="torch only")
def test_distribute_on_torch_is_a_one_line_error(capsys, data_dir, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        recipe_main("translate", translate_argv(data_dir, tmp_path / "out", "transformer", 1, "--distribute"))
    assert exit_info.value.code == 2
    assert "--distribute: expected the tensorflow or jax backend" in capsys.readouterr().err


@pytest.mark.parametrize(
    "loss, ignored",
    [
        (ks.losses.LabelSmoothingCrossEntropy(0.1, ignore_index=0), 0),  # translate, tag
        (keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1), -1),  # classify
    ],
)
def test_rows_that_pad_a_batch_for_the_devices_change_no_loss(loss, ignored):
    rng = np.random.default_rng(0)
    sequence = ignored == 0
    targets = rng.integers(1, 7, (5, 4) if sequence else (5,)).astype("int32")
    inputs = {"ids": rng.integers(1, 7, (5, 4)).astype("int32")}
    batches = tf.data.Dataset.from_tensors((inputs, targets))
    ((padded_inputs, padded_targets),) = list(devices.rows_padded_to_multiple(batches, 4, ignored).as_numpy_iterator())
    assert padded_inputs["ids"].shape == (8, 4) and padded_targets.shape[0] == 8
    np.testing.assert_array_equal(padded_inputs["ids"][:5], inputs["ids"])
    assert (padded_inputs["ids"][5:] == 0).all() and (padded_targets[5:] == ignored).all()
    logits = rng.normal(size=(8, 4, 7) if sequence else (8, 7)).astype("float32")
    unpadded = float(keras.ops.convert_to_numpy(loss(targets, logits[:5])))
    assert float(keras.ops.convert_to_numpy(loss(padded_targets, logits))) == pytest.approx(unpadded, rel=1e-6)
    accuracy = ks.metrics.MaskedAccuracy(ignore_index=ignored)
    accuracy.update_state(padded_targets, logits)
    expected = (logits[:5].argmax(-1) == targets).mean()
    assert float(keras.ops.convert_to_numpy(accuracy.result())) == pytest.approx(expected, rel=1e-6)
    assert list(devices.rows_padded_to_multiple(batches, 1, ignored).as_numpy_iterator())[0][0]["ids"].shape == (5, 4)


@pytest.mark.parametrize(
    "error, lost",
    [
        (
            ValueError(
                "UNKNOWN: Gloo AllGather failed: [gloo/transport/tcp/pair.cc:538] Read error: Connection reset by peer"
            ),
            True,
        ),
        (RuntimeError("UNAVAILABLE: Task 1 heartbeat timeout"), True),
        (ValueError("NonFiniteLossGuard: expected a finite loss, got nan at 3 steps"), False),
        (UsageError("--batch-size: expected a positive integer, got 0"), False),
    ],
)
def test_a_failed_collective_is_a_lost_process_and_bad_input_is_not(error, lost):
    # JAX raises a collective with a killed process as a ValueError from device_put's check of its input.
    assert devices.lost_process(error) is lost

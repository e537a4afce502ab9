"""`--model-parallel 2` on 8 simulated CPU devices (a (4, 2) mesh) trains and exports the model one device does."""

import json
import os
import subprocess
import sys

import pytest
from recipe_runs import BACKEND, REPO, read_tsv, recipe_main, short_pairs, translate_argv

# 240 training pairs in batches of 6: every batch is padded to 8 rows for the mesh's 4 data-parallel parts.
TRAIN, VALID, BATCH = 240, 100, 6


def translate_run(data, output_dir, *flags, devices=1):
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": REPO,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    }
    argv = [
        "--train",
        data / "train.tsv",
        "--valid",
        data / "valid.tsv",
        "--model",
        "transformer",
        "--epochs",
        4,
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
        *flags,
    ]
    result = subprocess.run(
        [sys.executable, "-m", "recipes.translate", *map(str, argv)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(output_dir / "checkpoint" / "state.json", encoding="utf-8") as f:
        history = json.load(f)["history"]
    return history, [row[2] for row in read_tsv(output_dir / "predictions.tsv")[1]]


@pytest.mark.skipif(BACKEND != "jax", reason="Keras splits models over devices on JAX only (the next test)")
@pytest.mark.nightly
def test_a_model_split_over_two_of_eight_devices_translates_as_one_device(tmp_path):
    pairs = short_pairs(TRAIN + VALID)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs[:TRAIN]), encoding="utf-8")
    (data / "valid.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs[TRAIN:]), encoding="utf-8")
    whole_history, whole = translate_run(data, tmp_path / "whole")
    split_history, split = translate_run(data, tmp_path / "split", "--model-parallel", 2, devices=8)
    assert len(set(whole)) >= 5  # a model that says different things, so that agreeing means something
    agree = sum(a == b for a, b in zip(whole, split)) / len(whole)
    assert agree >= 0.99, agree
    # Every step is the same computation; an epoch's mean training loss weights padded batches by their
    # 8 rows rather than 6 (docs/design_choices.md), equal here since every batch has 6 rows.
    assert split_history["loss"] == pytest.approx(whole_history["loss"], rel=1e-4)
    assert split_history["val_masked_accuracy"] == pytest.approx(whole_history["val_masked_accuracy"], rel=1e-4)
    assert split_history["val_bleu"] == pytest.approx(whole_history["val_bleu"], rel=1e-4)


@pytest.mark.skipif(BACKEND == "jax", reason="the error of the other backends")
def test_model_parallel_off_jax_is_a_one_line_error(capsys, data_dir, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        recipe_main("translate", translate_argv(data_dir, tmp_path / "out", "transformer", 1, "--model-parallel", 2))
    assert exit_info.value.code == 2
    assert (
        f"--model-parallel: expected the jax backend (Keras splits models over devices on JAX only), got {BACKEND}"
        in (capsys.readouterr().err)
    )


@pytest.mark.skipif(BACKEND != "jax", reason="off JAX the backend's error comes first (the test above)")
def test_model_parallel_of_a_recurrent_model_is_a_one_line_error(capsys, data_dir, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        recipe_main("translate", translate_argv(data_dir, tmp_path / "out", "rnn-attention", 1, "--model-parallel", 2))
    assert exit_info.value.code == 2
    assert "--model-parallel: expected a Transformer model, got --model rnn-attention" in capsys.readouterr().err

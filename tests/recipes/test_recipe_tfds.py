"""The --tfds data path, end to end and offline, on TensorFlow Datasets' mock data."""

import math
import os
import sys

import pytest
from recipe_runs import BATCH, normalized, read_json, read_tsv, recipe_main

from keras_seq.data import loaders

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data"))
from tfds_mock import mocked_tfds  # noqa: E402  (tests/data/tfds_mock.py)

EXAMPLES = 16


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tfds")


def run_tfds(name, task, tfds_dir, output, argv):
    """Run a recipe on `--tfds name`; returns its metrics and the (train, valid) examples the mock serves."""
    with mocked_tfds(tfds_dir, name, EXAMPLES):
        expected = loaders.tfds_splits(name, task, data_dir=str(tfds_dir))[:2]
        metrics = recipe_main(task, ["--tfds", name, "--tfds-data-dir", tfds_dir, "--output-dir", output, "--epochs", 1, *argv])
    assert read_json(output / "metrics.json") == pytest.approx(metrics)
    assert metrics["epochs"] == 1
    return metrics, expected


def test_translate_ted_hrlr(tfds_dir, tmp_path):
    argv = ["--model", "rnn", "--batch-size", BATCH, "--hidden-dim", 16, "--max-length", 8, "--num-beams", 2]
    metrics, (train, valid) = run_tfds("ted_hrlr_translate/pt_to_en", "translate", tfds_dir, tmp_path, argv)
    assert len(train) == len(valid) == metrics["valid_examples"] == EXAMPLES
    header, rows = read_tsv(tmp_path / "predictions.tsv")
    assert [(r[0], r[1]) for r in rows] == [(normalized(s), normalized(t)) for s, t in valid]  # Portuguese -> English
    assert type(metrics["bleu"]) is float and type(metrics["chrf"]) is float


def test_classify_imdb_reviews(tfds_dir, tmp_path):
    argv = ["--batch-size", BATCH, "--hidden-dim", 8, "--max-length", 8]
    metrics, (train, valid) = run_tfds("imdb_reviews", "classify", tfds_dir, tmp_path, argv)
    assert len(valid) == metrics["valid_examples"] == EXAMPLES  # imdb_reviews has no validation split: test serves
    header, rows = read_tsv(tmp_path / "predictions.tsv")
    assert [(r[1], r[0]) for r in rows] == [(label, normalized(t)) for label, t in valid]
    assert {label for label, _ in valid} <= {"neg", "pos"} and {r[2] for r in rows} <= {"neg", "pos"}
    assert read_json(tmp_path / "export_config.json")["labels"] == ["neg", "pos"]


def test_lm_tiny_shakespeare(tfds_dir, tmp_path):
    argv = ["--batch-size", BATCH, "--hidden-dim", 16, "--window", 15, "--prompt", "ab", "--generate-length", 4]
    metrics, (train, valid) = run_tfds("tiny_shakespeare", "lm", tfds_dir, tmp_path, argv)
    assert isinstance(valid, str) and valid.count("\n") == EXAMPLES - 1
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["valid_loss"]))
    _, rows = read_tsv(tmp_path / "predictions.tsv")
    assert len(rows) == metrics["valid_examples"] == (len(valid) - 1) // 15

"""The --tfds data path, end to end and offline, on TensorFlow Datasets' mock data."""

import pytest
from recipe_runs import TFDS_EXAMPLES, normalized, read_json, read_tsv


def test_translate_ted_hrlr(tfds_translate):
    metrics, (train, valid) = tfds_translate.metrics, tfds_translate.examples
    assert read_json(tfds_translate.path("metrics.json")) == pytest.approx(metrics)
    assert metrics["epochs"] == 1 and metrics["model"] == "rnn"
    assert len(train) == len(valid) == metrics["valid_examples"] == TFDS_EXAMPLES
    header, rows = read_tsv(tfds_translate.path("predictions.tsv"))
    assert header == ["source", "reference", "prediction"]
    assert [(r[0], r[1]) for r in rows] == [(normalized(s), normalized(t)) for s, t in valid]  # Portuguese -> English
    assert type(metrics["bleu"]) is float and type(metrics["chrf"]) is float
    assert read_json(tfds_translate.path("export_config.json"))["kind"] == "translate"


def test_classify_imdb_reviews(tfds_classify_stopped):
    run = tfds_classify_stopped
    metrics, (train, valid) = run.metrics, run.examples
    assert read_json(run.path("metrics.json")) == pytest.approx(metrics)
    assert len(valid) == metrics["valid_examples"] == TFDS_EXAMPLES  # imdb_reviews has no validation split: test serves
    header, rows = read_tsv(run.path("predictions.tsv"))
    assert [(r[1], r[0]) for r in rows] == [(label, normalized(t)) for label, t in valid]
    assert {label for label, _ in train} == {"neg", "pos"} and {r[2] for r in rows} <= {"neg", "pos"}
    assert read_json(run.path("export_config.json"))["labels"] == ["neg", "pos"]
    assert metrics["accuracy"] == pytest.approx(sum(r[1] == r[2] for r in rows) / len(rows))

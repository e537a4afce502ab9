"""classify, tag and lm on tiny user files: metrics recomputed from predictions.tsv, rows in the valid order.

Also what the recipes take when a flag is not given: the shipped real corpora, 180 s, and the
defaults of the chosen model family."""

import math
import os

import numpy as np
import pytest
from recipe_runs import BACKEND, normalized, read_json, read_tsv

from keras_seq.data import corpora, loaders, phrasebook
from recipes import classify, common, lm, tag, translate


def check_common_outputs(run, epochs=1):
    metrics = read_json(run.path("metrics.json"))
    assert metrics == pytest.approx(run.metrics)
    assert metrics["epochs"] == epochs and metrics["backend"] == BACKEND
    for name in ("model.keras", "checkpoint/model.keras", "training_curves.png"):
        assert os.path.getsize(run.path(name)) > 0, name
    return metrics


def test_classify(classify_run, data_dir):
    metrics = check_common_outputs(classify_run)
    valid = loaders.read_labelled_tsv(data_dir / "classify_valid.tsv")
    header, rows = read_tsv(classify_run.path("predictions.tsv"))
    assert header == ["text", "label", "prediction"]
    assert [(r[1], r[0]) for r in rows] == valid and len(rows) == metrics["valid_examples"] == 12
    assert {r[2] for r in rows} <= {"negative", "positive"}
    assert type(metrics["accuracy"]) is float
    assert metrics["accuracy"] == pytest.approx(np.mean([r[1] == r[2] for r in rows]))
    labels = [label for label, _ in valid]
    assert metrics["majority_baseline"] == pytest.approx(max(labels.count("negative"), labels.count("positive")) / 12)
    # The export's accuracy is that of the weights kept by validation (one epoch: its own).
    history = read_json(classify_run.path("checkpoint/state.json"))["history"]
    assert metrics["best_validation_accuracy"] == pytest.approx(history["val_accuracy"][-1])
    assert metrics["accuracy"] == pytest.approx(metrics["best_validation_accuracy"]) and metrics["weights"] == "best"
    config = read_json(classify_run.path("export_config.json"))
    assert config["kind"] == "classify" and config["labels"] == ["negative", "positive"]


def test_tag(tag_run, data_dir):
    metrics = check_common_outputs(tag_run)
    valid = loaders.read_tagged(data_dir / "tag_valid.txt")
    header, rows = read_tsv(tag_run.path("predictions.tsv"))
    assert header == ["sentence", "tags", "prediction"]
    assert len(rows) == metrics["valid_examples"] == len(valid) == 8
    for row, sentence in zip(rows, valid):
        assert row[0] == " ".join(token for token, _ in sentence)
        assert row[1] == " ".join(tag for _, tag in sentence[:8])  # --max-length 8 cuts the references too
        assert len(row[2].split()) == min(len(sentence), 8)
    pairs = [(p, r) for row in rows for p, r in zip(row[2].split(), row[1].split())]
    assert type(metrics["accuracy"]) is float
    assert metrics["accuracy"] == pytest.approx(np.mean([p == r for p, r in pairs]))
    assert metrics["sentence_accuracy"] == pytest.approx(np.mean([r[1] == r[2] for r in rows]))
    history = read_json(tag_run.path("checkpoint/state.json"))["history"]
    assert (
        metrics["best_validation_accuracy"] == pytest.approx(history["val_accuracy"][-1])
        and metrics["weights"] == "best"
    )
    # The export never gives the padding tag, which validation's argmax may count against a token.
    assert metrics["accuracy"] >= metrics["best_validation_accuracy"] - 1e-6
    tags = read_json(tag_run.path("export_config.json"))["tags"]
    assert tags[0] == "<pad>" and {t for row in rows for t in row[2].split()} <= set(tags[1:])


def test_lm(lm_run, data_dir):
    metrics = check_common_outputs(lm_run)
    assert type(metrics["perplexity"]) is float
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["valid_loss"]))
    history = read_json(lm_run.path("checkpoint/state.json"))["history"]
    # Validation's perplexity (the kept weights', one epoch: its own) is the reported one.
    assert (
        history["val_perplexity"][-1] == pytest.approx(metrics["perplexity"], rel=1e-6) and metrics["weights"] == "best"
    )
    # ... and it is exp of the mean loss over the real (unpadded) valid tokens.
    import keras

    from keras_seq.data import text

    model = keras.saving.load_model(lm_run.path("model.keras"))
    vocab = text.Vocabulary.build([loaders.read_text(data_dir / "lm_train.txt")], level="char")
    rows = np.array(
        lm.windows(vocab.encode([loaders.read_text(data_dir / "lm_valid.txt")]).flat_values.numpy().tolist(), 15)
    )
    logits = keras.ops.convert_to_numpy(model(rows[:, :-1]))
    logits = logits - logits.max(-1, keepdims=True)
    log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probabilities, rows[:, 1:, None], -1).mean()
    assert metrics["perplexity"] == pytest.approx(math.exp(nll), rel=1e-4)
    assert metrics["level"] == "char" and metrics["sample"].startswith("Alice")
    # Valid windows of 15 characters (+1 target), in the text's order: each row's prompt is
    # the first 7 characters of one, its reference the other 9.
    valid = loaders.read_text(data_dir / "lm_valid.txt")
    header, rows = read_tsv(lm_run.path("predictions.tsv"))
    assert header == ["prompt", "reference", "prediction"]
    assert len(rows) == metrics["valid_examples"] == (len(valid) - 1) // 15
    for i, row in enumerate(rows):
        assert row[0] == normalized(valid[15 * i : 15 * i + 7])
        assert row[1] == normalized(valid[15 * i + 7 : 15 * i + 16])


def defaults(recipe, *argv):
    return common.resolve_settings(recipe.parse(list(argv)))


def test_with_no_flag_classify_tag_and_lm_train_180_seconds_on_the_shipped_real_corpora():
    for recipe in (classify, tag, lm):
        args = defaults(recipe)
        assert (args.max_seconds, args.epochs) == (180, None), recipe.__name__
    assert classify.load_examples(defaults(classify)) == (
        corpora.sotu_party_passages("train"),
        corpora.sotu_party_passages("valid"),
    )
    assert tag.load_sentences(defaults(tag)) == (corpora.sotu_punctuation("train"), corpora.sotu_punctuation("valid"))
    assert lm.load_text(defaults(lm)) == (corpora.loc_workshop_en("train"), corpora.loc_workshop_en("valid"))
    # The built demonstrations stay one flag away.
    assert classify.load_examples(defaults(classify, "--data", "reviews")) == tuple(
        map(list, phrasebook.sentiment_reviews())
    )
    assert tag.load_sentences(defaults(tag, "--data", "phrasebook"))[1] == phrasebook.tagged_sentences()[1]


def test_a_flag_left_out_takes_the_chosen_models_default():
    for recipe in (classify, tag, lm, translate):
        for model, values in recipe.MODELS.items():
            args = defaults(recipe, "--model", model)
            assert {flag: getattr(args, flag) for flag in values} == values, (recipe.__name__, model)
    args = defaults(
        translate, "--model", "transformer", "--dropout", "0.3", "--learning-rate", "1e-4", "--hidden-dim", "64"
    )
    assert (args.dropout, args.learning_rate, args.hidden_dim) == (0.3, 1e-4, 64)
    assert defaults(translate, "--model", "rnn", "--dropout", "0").dropout == 0.0  # zero is a value, not "not given"


def test_lm_continuation_strips_the_prompt_even_where_spacing_differs():
    assert lm._continuation("Alice was here", "Alice was") == " here"
    assert lm._continuation('"<unk> ll went on', '" <unk> ll') == " went on"  # word-level detokenizing
    assert lm._continuation("something else", "Alice") == "something else"
    assert lm._continuation("Alice", "Alice was") == "Alice"


@pytest.mark.parametrize("recipe", ["classify", "lm"])
def test_subword_vocabulary(recipe, data_dir, tmp_path):
    """classify `--vocabulary subword` and lm `--level subword`: a SentencePiece model trained on the
    training text, saved with the run, sizing the model's embedding, and served by the export."""
    import keras
    import sentencepiece
    from recipe_runs import classify_argv, lm_argv, run_recipe

    flags = ["--vocabulary", "subword"] if recipe == "classify" else ["--level", "subword"]
    argv = (classify_argv if recipe == "classify" else lm_argv)(data_dir, tmp_path, *flags, "--vocab-size", 300)
    run = run_recipe(recipe, tmp_path, argv)
    vocabularies = read_json(run.path("vocabularies.json"))
    assert vocabularies["text"]["level"] == "subword"
    pieces = sentencepiece.SentencePieceProcessor(model_file=run.path("text.model"))
    assert 260 < pieces.GetPieceSize() <= 300  # the 4 reserved ids, the 256 bytes, some learned pieces
    model = keras.saving.load_model(run.path("model.keras"), compile=False)
    embedding = next(layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Embedding))
    assert embedding.input_dim == pieces.GetPieceSize()
    header, rows = read_tsv(run.path("predictions.tsv"))
    assert len(rows) == run.metrics["valid_examples"] > 0
    if recipe == "classify":
        assert run.metrics["vocabulary"] == "subword" and run.metrics["vocabulary_size"] == pieces.GetPieceSize()
        assert {r[2] for r in rows} <= {"negative", "positive"}
    else:
        assert run.metrics["level"] == "subword"
        assert run.metrics["perplexity"] == pytest.approx(math.exp(run.metrics["valid_loss"]))
        # A prompt is the text of the first half of a valid window, as the pieces decode it.
        valid = loaders.read_text(data_dir / "lm_valid.txt")
        assert normalized(rows[0][0]) and normalized(valid).startswith(normalized(rows[0][0]))

"""translate on tiny user files: every output of a run, with figures recomputed from its files."""

import glob
import os

import keras
import numpy as np
import pytest
from recipe_runs import BACKEND, read_json, read_tsv, run_recipe, translate_argv

import keras_seq as ks
from keras_seq.data import loaders, placeholders

MODELS = {"transformer": "translate_transformer", "rnn-attention": "translate_rnn_attention"}


@pytest.fixture(params=sorted(MODELS))
def run(request):
    return request.getfixturevalue(MODELS[request.param])


def is_png(path):
    with open(path, "rb") as f:
        header = f.read(8)
    return header == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 1000


def test_metrics_are_recomputed_from_predictions(run, data_dir):
    metrics = read_json(run.path("metrics.json"))
    assert metrics == pytest.approx(run.metrics)  # what run() returned is what it wrote
    assert type(metrics["bleu"]) is float and type(metrics["chrf"]) is float
    assert 0.0 <= metrics["bleu"] <= 100.0 and 0.0 < metrics["chrf"] <= 100.0
    header, rows = read_tsv(run.path("predictions.tsv"))
    assert header == ["source", "reference", "prediction"]
    predictions, references = [r[2] for r in rows], [r[1] for r in rows]
    assert metrics["bleu"] == pytest.approx(ks.metrics.corpus_bleu(predictions, references), abs=1e-9)
    assert metrics["chrf"] == pytest.approx(ks.metrics.corpus_chrf(predictions, references), abs=1e-9)
    assert metrics["exact_match"] == pytest.approx(np.mean([p == r for p, r in zip(predictions, references)]))
    assert metrics["epochs"] == 1
    assert metrics["backend"] == BACKEND
    assert metrics["model"] == run.argv[run.argv.index("--model") + 1]
    assert metrics["valid_examples"] == 12
    state = read_json(run.path("checkpoint/state.json"))
    assert metrics["valid_loss"] == pytest.approx(state["history"]["val_loss"][-1])
    assert metrics["valid_token_accuracy"] == pytest.approx(state["history"]["val_masked_accuracy"][-1])


def test_no_warning_that_the_data_ran_out(run):
    assert not [w for w in run.warnings if "ran out of data" in w]


def test_predictions_follow_the_valid_file(run, data_dir):
    valid = loaders.read_parallel_tsv(data_dir / "translate_valid.tsv")
    header, rows = read_tsv(run.path("predictions.tsv"))
    assert len(rows) == len(valid) == 12
    assert [(r[0], r[1]) for r in rows] == valid
    assert all(len(r) == 3 for r in rows)


def test_output_files(run):
    for name in ("model.keras", "checkpoint/model.keras", "vocabularies.json", "export_config.json"):
        assert os.path.getsize(run.path(name)) > 0, name
    assert os.path.isfile(run.path("export", "saved_model.pb"))
    assert glob.glob(run.path("export", "variables", "variables.data-*"))
    for name in ("training_curves.png", "sinusoidal_encoding.png"):
        assert is_png(run.path(name)), name
    assert is_png(run.path("attention.png"))  # Bahdanau weights, or the Transformer's cross-attention
    state = read_json(run.path("checkpoint/state.json"))
    assert state["epoch"] == 1
    assert sorted(state["history"]) == [
        "loss",
        "masked_accuracy",
        "val_bleu",
        "val_chrf",
        "val_loss",
        "val_masked_accuracy",
    ]
    assert all(len(values) == 1 for values in state["history"].values())
    for phase in ("train", "validation"):  # TensorBoard logs
        events = glob.glob(run.path("logs", phase, "events.out.tfevents.*"))
        assert events and all(os.path.getsize(e) > 0 for e in events), phase
    config = read_json(run.path("export_config.json"))
    assert config["kind"] == "translate" and config["num_beams"] == 2
    assert config["source_length"] == config["max_length"] == 8  # the smallest bucket edge: these pairs are shorter


def test_model_keras_matches_the_vocabularies(run):
    vocabularies = read_json(run.path("vocabularies.json"))
    model = keras.saving.load_model(run.path("model.keras"), compile=False)
    source = np.array([[4, 5, 6, 0, 0, 0, 0, 0]], "int32")
    target = np.array([[1, 7, 8, 9, 0, 0, 0, 0]], "int32")
    logits = keras.ops.convert_to_numpy(model({"encoder_inputs": source, "decoder_inputs": target}))
    assert logits.shape == (1, 8, len(vocabularies["target"]["tokens"]) + 4)
    assert np.all(np.isfinite(logits))


def test_input_feeding_decoder_trains_and_exports(data_dir, tmp_path):
    """`--input-feeding` (Bahdanau et al., 2015, sec. 3.1): trains, and its SavedModel writes the predictions."""
    run = run_recipe("translate", tmp_path, translate_argv(data_dir, tmp_path, "rnn-attention", 1, "--input-feeding"))
    metrics = read_json(run.path("metrics.json"))
    assert metrics["input_feeding"] is True and np.isfinite(metrics["valid_loss"])
    model = keras.saving.load_model(run.path("model.keras"), compile=False)
    assert model.get_config()["input_feeding"] is True
    _, rows = read_tsv(run.path("predictions.tsv"))
    assert len(rows) == len(loaders.read_parallel_tsv(data_dir / "translate_valid.tsv"))
    assert any(row[2] for row in rows)  # the translator emits words


def test_subword_run_ships_its_sentencepiece_model_and_ties_three_ways(translate_subword):
    import sentencepiece

    from keras_seq.data.subword import SubwordVocabulary

    vocabularies = read_json(translate_subword.path("vocabularies.json"))
    assert vocabularies["source"] == vocabularies["target"] and vocabularies["source"]["level"] == "subword"
    joint = SubwordVocabulary(vocabularies["source"]["model"])
    processor = sentencepiece.SentencePieceProcessor(model_file=translate_subword.path("sentencepiece.model"))
    assert processor.GetPieceSize() == len(joint) <= 400
    model = keras.saving.load_model(translate_subword.path("model.keras"), compile=False)
    config = model.get_config()
    assert config["share_embeddings"] and config["tie_embeddings"]
    assert model.source_embedding is model.target_embedding
    metrics = read_json(translate_subword.path("metrics.json"))
    assert metrics["vocabulary"] == "subword (unigram, joint)" and metrics["vocabulary_size"] == len(joint)
    assert metrics["subword_sampling"] == 0.0
    header, rows = read_tsv(translate_subword.path("predictions.tsv"))
    predictions, sources = [r[2] for r in rows], [r[0] for r in rows]
    assert metrics["copy_rate"] == ks.metrics.copy_rate(sources, predictions)[0]
    # Placeholders by default with a subword vocabulary: the tokens are pieces, none is left in a translation.
    assert set(placeholders.TOKENS) <= set(joint.tokens)
    assert read_json(translate_subword.path("export_config.json"))["placeholders"] is True
    assert not any(placeholders.OPEN in p or placeholders.CLOSE in p for p in predictions)
    assert metrics["bleu_lowercase"] == pytest.approx(
        ks.metrics.corpus_bleu(predictions, [r[1] for r in rows], lowercase=True)
    )
    state = read_json(translate_subword.path("checkpoint/state.json"))
    assert metrics["best_validation_bleu"] == pytest.approx(max(state["history"]["val_bleu"]))
    assert all(metrics[k] >= 0 for k in ("train_seconds", "export_seconds", "translate_seconds"))


@pytest.mark.parametrize(
    "recipe, argv, budget",
    [
        ("translate", [], (None, 600.0)),  # neither flag: the recipe's default budget
        ("translate", ["--max-seconds", "30"], (None, 30.0)),  # seconds alone: no epoch limit
        ("translate", ["--epochs", "2"], (2, None)),  # epochs alone: no time limit
        ("translate", ["--epochs", "2", "--max-seconds", "30"], (2, 30.0)),
        ("classify", [], (None, 180.0)),
        ("classify", ["--epochs", "4"], (4, None)),
    ],
)
def test_the_budget_flags(recipe, argv, budget, tmp_path):
    from recipe_runs import RECIPES

    from recipes import common

    settings = common.resolve_settings(RECIPES[recipe].parse(argv + ["--output-dir", str(tmp_path)]))
    assert (settings.epochs, settings.max_seconds) == budget


def test_sampled_splits_stay_within_the_model_length_and_are_drawn_anew_for_each_variant():
    import types

    import numpy as np

    from keras_seq.data import phrasebook, pipeline
    from keras_seq.data.subword import SubwordVocabulary
    from recipes.translate import encoded_chunk

    pairs, _ = phrasebook.english_french_pairs(size=300, valid_size=10)
    joint = SubwordVocabulary.train([s for p in pairs for s in p], 300)
    vocab = {"source": joint, "target": joint}
    args = types.SimpleNamespace(max_length=64, subword_sampling=0.1, seed=1)
    best, keep = encoded_chunk(types.SimpleNamespace(max_length=64, subword_sampling=0.0, seed=1), pairs, vocab, 0)
    drawn = [encoded_chunk(args, pairs, vocab, variant)[0] for variant in range(3)]
    assert keep.all()
    longest = pipeline.bucket_edges(64 + 2)[-1]
    for columns in drawn:
        assert all(len(lengths) == len(pairs) and lengths.max() <= longest for _, lengths in columns.values())
    rows = lambda flat, lengths: np.split(flat, np.cumsum(lengths)[:-1])
    best_rows, drawn_rows = rows(*best["target"]), [rows(*columns["target"]) for columns in drawn]
    assert sum((a.shape != b.shape) or (a != b).any() for a, b in zip(drawn_rows[0], best_rows)) > len(pairs) // 4
    assert sum((a.shape != b.shape) or (a != b).any() for a, b in zip(drawn_rows[0], drawn_rows[1])) > len(pairs) // 4
    decoded = joint.decode(np.stack([np.pad(r, (0, longest - len(r))) for r in drawn_rows[0][:20]])).numpy()
    assert [t.decode() for t in decoded] == [t for _, t in pairs[:20]]

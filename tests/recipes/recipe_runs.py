"""Tiny recipe runs shared by the tests in this folder, and helpers to read their outputs.

Every run is as small as the recipe allows (a few dozen short examples of at most
8 ids, width 8-32) and is made once per session (conftest.py makes these fixtures
available): the tests only read its output folder. Runs are in-process, through
`common.main` as on the command line.
"""

import json
import os
import subprocess
import sys
import warnings

import keras
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# `recipes` lives at the repository root, which is on sys.path under `python -m pytest`
# but not under a plain `pytest`; there `recipes` would even resolve to this folder.
if REPO not in sys.path:
    sys.path.insert(0, REPO)

sys.path.insert(0, os.path.join(REPO, "tests", "data"))
from tfds_mock import mocked_tfds  # noqa: E402  (tests/data/tfds_mock.py)

from keras_seq.data import alice_text, loaders, phrasebook, text  # noqa: E402
from recipes import classify, common, lm, tag, translate  # noqa: E402

BACKEND = keras.backend.backend()
RECIPES = {"translate": translate, "classify": classify, "tag": tag, "lm": lm}

# Training batch size of every run below but translate's.
BATCH = 16
# translate trains 60 small steps per epoch (the attentional RNN 30: Keras runs a masked
# GRU step by step in Python on torch): enough for the tiny models to emit words rather
# than only the end token, so the exported translators have something to reproduce.
TRANSLATE_TRAIN, TRANSLATE_BATCH, RNN_TRAIN = 240, 4, 120
# translate: sentences of at most this many tokens, so every training pair is kept
# and batches have one shape (source and target with start/end fit in 8 ids).
SHORT = 6


def recipe_main(name, argv):
    """Run a recipe as `python -m recipes.NAME ARGV` does (exit status 2 on bad input); returns its metrics."""
    module = RECIPES[name]
    return common.main(name, module.run, module.parse, [str(a) for a in argv])


def read_tsv(path):
    """`(header, rows)` of a recipe's predictions.tsv."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    assert lines[-1] == "", "predictions.tsv ends with a newline"
    rows = [line.split("\t") for line in lines[:-1]]
    return rows[0], rows[1:]


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def normalized(field):
    """What `common.write_predictions` makes of a field (runs of whitespace -> one space)."""
    return " ".join(str(field).split())


def subprocess_env(**overrides):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO, **overrides)
    return env


def run_python(code, *args, **env):
    """Run `python -c code args...` in a fresh process; returns its stdout (fails the test with stderr on error)."""
    command = [sys.executable, "-c", code, *map(str, args)]
    result = subprocess.run(command, env=subprocess_env(**env), capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def _write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def short_pairs(count, seed=0):
    """`count` English-French pairs whose sides both have at most SHORT word tokens."""
    train, valid = phrasebook.english_french_pairs(size=4 * count, valid_size=10, seed=seed)
    pairs = train + valid
    lengths = [text.tokenize([p[side] for p in pairs]).row_lengths().numpy() for side in (0, 1)]
    short = [p for p, s, t in zip(pairs, *lengths) if s <= SHORT and t <= SHORT]
    assert len(short) >= count
    return short[:count]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """Tiny data files for every recipe, in their documented formats."""
    directory = tmp_path_factory.mktemp("data")
    pairs = short_pairs(TRANSLATE_TRAIN + 12)
    _write_lines(directory / "translate_train.tsv", [f"{s}\t{t}" for s, t in pairs[:TRANSLATE_TRAIN]])
    _write_lines(directory / "translate_valid.tsv", [f"{s}\t{t}" for s, t in pairs[TRANSLATE_TRAIN:]])
    train, valid = phrasebook.sentiment_reviews(size=60, valid_size=12)
    _write_lines(directory / "classify_train.tsv", [f"{label}\t{review}" for label, review in train])
    _write_lines(directory / "classify_valid.tsv", [f"{label}\t{review}" for label, review in valid])
    train, valid = phrasebook.tagged_sentences(size=40, valid_size=8)
    for name, sentences in (("tag_train.txt", train), ("tag_valid.txt", valid)):
        # Sequences separated by a blank line; no trailing blank line after the last one.
        (directory / name).write_text(
            "\n\n".join("\n".join(f"{w}\t{t}" for w, t in s) for s in sentences) + "\n", encoding="utf-8"
        )
    book = alice_text()
    (directory / "lm_train.txt").write_text(book[:700], encoding="utf-8")
    # Only characters seen in training, so that every valid character has an id.
    valid = "".join(c for c in book[700:920] if c in set(book[:700]))
    (directory / "lm_valid.txt").write_text(valid[:200], encoding="utf-8")
    return directory


def translate_argv(data_dir, output_dir, model="transformer", epochs=1, *extra):
    examples = RNN_TRAIN if model == "rnn-attention" else TRANSLATE_TRAIN
    # Width 32 for the Transformer: at 16, its 60 steps left it emitting only end tokens for some seeds.
    width = 16 if model == "rnn-attention" else 32
    # No warm-up and, for the RNN's 30 steps, a peak of 0.02: the rate decays linearly to 0 over the run,
    # and at a peak of 0.01 the RNN still emitted only end tokens.
    rate = 0.02 if model == "rnn-attention" else 0.01
    return [
        "--train",
        data_dir / "translate_train.tsv",
        "--valid",
        data_dir / "translate_valid.tsv",
        "--model",
        model,
        "--max-examples",
        examples,
        "--epochs",
        epochs,
        "--batch-size",
        TRANSLATE_BATCH,
        "--learning-rate",
        rate,
        "--warmup",
        0,
        "--hidden-dim",
        width,
        "--layers",
        1,
        "--max-length",
        SHORT,
        "--num-beams",
        2,
        "--seed",
        3,
        "--output-dir",
        output_dir,
        "--vocabulary",
        "word",
        *extra,
    ]


def translate_subword_argv(data_dir, output_dir, *extra):
    """The recipe's default vocabulary (a joint SentencePiece model, three-way tied embeddings) on the tiny files."""
    # Six epochs: after four or five of these 60 steps each, the torch run (seed 3) emitted only end tokens.
    argv = translate_argv(data_dir, output_dir, "transformer", 6, *extra)
    argv[argv.index("--vocabulary") + 1] = "subword"
    argv[argv.index("--max-length") + 1] = 14
    return argv + ["--vocab-size", 400]


def classify_argv(data_dir, output_dir, *extra):
    return [
        "--train",
        data_dir / "classify_train.tsv",
        "--valid",
        data_dir / "classify_valid.tsv",
        "--epochs",
        1,
        "--batch-size",
        BATCH,
        "--hidden-dim",
        8,
        "--max-length",
        8,
        "--output-dir",
        output_dir,
        *extra,
    ]


def tag_argv(data_dir, output_dir, *extra):
    return [
        "--train",
        data_dir / "tag_train.txt",
        "--valid",
        data_dir / "tag_valid.txt",
        "--epochs",
        1,
        "--batch-size",
        BATCH,
        "--hidden-dim",
        8,
        "--max-length",
        8,
        "--output-dir",
        output_dir,
        *extra,
    ]


def lm_argv(data_dir, output_dir, *extra):
    return [
        "--train",
        data_dir / "lm_train.txt",
        "--valid",
        data_dir / "lm_valid.txt",
        "--epochs",
        1,
        "--batch-size",
        BATCH,
        "--hidden-dim",
        16,
        "--window",
        15,
        "--max-examples",
        32,
        "--prompt",
        "Alice",
        "--generate-length",
        8,
        "--output-dir",
        output_dir,
        *extra,
    ]


class Run:
    """A finished recipe run: its folder, the metrics it returned, how it was called and what it warned."""

    def __init__(self, directory, metrics, argv, warnings=(), examples=None):
        self.dir, self.metrics, self.argv = str(directory), metrics, argv
        self.warnings, self.examples = [str(w.message) for w in warnings], examples

    def path(self, *names):
        return os.path.join(self.dir, *names)


def run_recipe(name, output_dir, argv, examples=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = recipe_main(name, argv)
    return Run(output_dir, metrics, argv, caught, examples)


@pytest.fixture(scope="session")
def translate_transformer(data_dir, tmp_path_factory):
    output = tmp_path_factory.mktemp("translate_transformer")
    return run_recipe("translate", output, translate_argv(data_dir, output, "transformer"))


@pytest.fixture(scope="session")
def translate_rnn_attention(data_dir, tmp_path_factory):
    output = tmp_path_factory.mktemp("translate_rnn_attention")
    return run_recipe("translate", output, translate_argv(data_dir, output, "rnn-attention"))


@pytest.fixture(scope="session")
def translate_subword(data_dir, tmp_path_factory):
    output = tmp_path_factory.mktemp("translate_subword")
    return run_recipe("translate", output, translate_subword_argv(data_dir, output))


@pytest.fixture(scope="session")
def classify_run(data_dir, tmp_path_factory):
    output = tmp_path_factory.mktemp("classify")
    return run_recipe("classify", output, classify_argv(data_dir, output))


@pytest.fixture(scope="session")
def tag_run(data_dir, tmp_path_factory):
    output = tmp_path_factory.mktemp("tag")
    return run_recipe("tag", output, tag_argv(data_dir, output))


@pytest.fixture(scope="session")
def lm_run(data_dir, tmp_path_factory):
    output = tmp_path_factory.mktemp("lm")
    return run_recipe("lm", output, lm_argv(data_dir, output))


# --tfds: TensorFlow Datasets' mock data (tests/data/tfds_mock.py), nothing downloaded.
TFDS_EXAMPLES = 16


def run_tfds(name, task, output_dir, argv):
    """Run `task` on `--tfds name`; the Run's `examples` are the (train, valid) examples the mock served."""
    data_dir = output_dir / "tfds_data"
    with mocked_tfds(data_dir, name, TFDS_EXAMPLES):
        examples = loaders.tfds_splits(name, task, data_dir=str(data_dir))[:2]
        argv = ["--tfds", name, "--tfds-data-dir", data_dir, "--output-dir", output_dir / "run", *argv]
        return run_recipe(task, output_dir / "run", argv, examples)


@pytest.fixture(scope="session")
def tfds_translate(tmp_path_factory):
    """ted_hrlr_translate/pt_to_en with the plain RNN encoder-decoder (the one model family the file runs leave out)."""
    argv = [
        "--model",
        "rnn",
        "--epochs",
        1,
        "--batch-size",
        BATCH,
        "--hidden-dim",
        16,
        "--max-length",
        8,
        "--num-beams",
        2,
    ]
    return run_tfds("ted_hrlr_translate/pt_to_en", "translate", tmp_path_factory.mktemp("tfds_translate"), argv)


@pytest.fixture(scope="session")
def tfds_classify_stopped(tmp_path_factory):
    """imdb_reviews, two epochs of four batches asked for, but a 1 ms time budget: training stops after one batch."""
    argv = ["--epochs", 2, "--max-seconds", 0.001, "--batch-size", 4, "--hidden-dim", 8, "--max-length", 8]
    return run_tfds("imdb_reviews", "classify", tmp_path_factory.mktemp("tfds_classify"), argv)

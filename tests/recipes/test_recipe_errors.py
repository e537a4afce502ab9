"""Bad input ends a recipe with exit status 2 and one `NAME: error: ...` line on stderr, before any training."""

import pytest
from recipe_runs import classify_argv, lm_argv, recipe_main, tag_argv, translate_argv


def error_line(capsys, name, argv):
    with pytest.raises(SystemExit) as exit_info:
        recipe_main(name, argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.split("\n") if line]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"{name}: error: "), lines[0]
    return lines[0]


def replaced(argv, flag, value):
    argv = list(argv)
    argv[argv.index(flag) + 1] = value
    return argv


@pytest.fixture
def bad_file(tmp_path):
    def write(content, name="bad.tsv"):
        path = tmp_path / name
        path.write_text(content, encoding="utf-8")
        return path

    return write


def test_missing_valid_file(capsys, data_dir, tmp_path):
    missing = tmp_path / "nowhere.tsv"
    line = error_line(capsys, "translate", replaced(translate_argv(data_dir, tmp_path / "out"), "--valid", missing))
    assert str(missing) in line and "expected an existing file" in line


def test_tsv_line_without_a_tab(capsys, data_dir, tmp_path, bad_file):
    path = bad_file("I see.\tJe vois.\n\nA line without a tab\nWe go.\tNous allons.\n")
    line = error_line(capsys, "translate", replaced(translate_argv(data_dir, tmp_path / "out"), "--train", path))
    assert "line 3" in line and "source<TAB>target" in line and "A line without a tab" in line


def test_traceback_flag_lets_the_error_propagate(data_dir, tmp_path):
    missing = tmp_path / "nowhere.tsv"
    argv = replaced(translate_argv(data_dir, tmp_path / "out"), "--valid", missing) + ["--traceback"]
    with pytest.raises(ValueError, match="expected an existing file"):
        recipe_main("translate", argv)


def test_tsv_line_with_an_empty_side(capsys, data_dir, tmp_path, bad_file):
    path = bad_file("positive\tGood.\nnegative\t \n")
    line = error_line(capsys, "classify", replaced(classify_argv(data_dir, tmp_path / "out"), "--valid", path))
    assert "line 2" in line and "label<TAB>text" in line


def test_training_pairs_that_are_all_unusable(capsys, data_dir, tmp_path, bad_file):
    path = bad_file("I see.\t \n\tNous allons.\n")
    line = error_line(capsys, "translate", replaced(translate_argv(data_dir, tmp_path / "out"), "--train", path))
    assert "expected some usable examples, got none after cleaning" in line


@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["empty", "blank-lines"])
def test_empty_file(capsys, data_dir, tmp_path, bad_file, content):
    path = bad_file(content)
    line = error_line(capsys, "translate", replaced(translate_argv(data_dir, tmp_path / "out"), "--train", path))
    assert str(path) in line and "no example" in line


def test_empty_text_file(capsys, data_dir, tmp_path, bad_file):
    path = bad_file("", "empty.txt")
    line = error_line(capsys, "lm", replaced(lm_argv(data_dir, tmp_path / "out"), "--valid", path))
    assert "empty file" in line


def test_tagged_line_without_a_tab(capsys, data_dir, tmp_path, bad_file):
    path = bad_file("The\tDET\ncat\tNOUN\n\nA\tDET\ndog NOUN\n", "bad.txt")
    line = error_line(capsys, "tag", replaced(tag_argv(data_dir, tmp_path / "out"), "--train", path))
    assert "line 5" in line and "token<TAB>tag" in line


def test_undecodable_file(capsys, data_dir, tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("Je suis allé.\tI went.\n".encode("latin-1"))
    line = error_line(capsys, "translate", replaced(translate_argv(data_dir, tmp_path / "out"), "--train", path))
    assert "UTF-8" in line


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--epochs", 0, "--epochs: expected a positive integer, got 0"),
        ("--batch-size", -4, "--batch-size: expected a positive integer, got -4"),
        ("--max-seconds", 0, "--max-seconds: expected a number > 0, got 0.0"),
        ("--learning-rate", -1, "--learning-rate: expected a number > 0, got -1.0"),
    ],
)
def test_out_of_range_numbers(capsys, data_dir, tmp_path, flag, value, message):
    line = error_line(capsys, "translate", translate_argv(data_dir, tmp_path / "out") + [flag, value])
    assert line == f"translate: error: {message}"


def test_train_without_valid(capsys, data_dir, tmp_path):
    argv = translate_argv(data_dir, tmp_path / "out")
    index = argv.index("--valid")
    line = error_line(capsys, "translate", argv[:index] + argv[index + 2 :])
    assert "--train and --valid" in line


def test_tfds_and_train(capsys, data_dir, tmp_path):
    line = error_line(capsys, "classify", classify_argv(data_dir, tmp_path / "out") + ["--tfds", "imdb_reviews"])
    assert "--tfds and --train" in line


def test_resume_without_a_checkpoint(capsys, data_dir, tmp_path):
    line = error_line(capsys, "translate", translate_argv(data_dir, tmp_path / "empty", "transformer", 1, "--resume"))
    assert "--resume: expected a checkpoint" in line and str(tmp_path / "empty") in line


def test_resume_when_no_checkpoint_is_complete(capsys, data_dir, tmp_path):
    (tmp_path / "run" / "checkpoint").mkdir(parents=True)  # a folder that never got its state.json
    line = error_line(capsys, "translate", translate_argv(data_dir, tmp_path / "run", "transformer", 1, "--resume"))
    assert "--resume: expected a complete checkpoint in" in line and "checkpoint/: incomplete" in line


def test_an_output_dir_that_cannot_be_written_ends_before_training(capsys, data_dir, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    line = error_line(capsys, "translate", translate_argv(data_dir, tmp_path / "file" / "out", "transformer", 1))
    assert f"--output-dir: expected a folder this process can write, got {tmp_path / 'file' / 'out'}" in line


def test_unseen_valid_label(capsys, data_dir, tmp_path, bad_file):
    path = bad_file("positive\tGood.\nneutral\tIt was a film.\n")
    line = error_line(capsys, "classify", replaced(classify_argv(data_dir, tmp_path / "out"), "--valid", path))
    assert "neutral" in line and "unseen" in line


def test_lm_window_longer_than_the_text(capsys, data_dir, tmp_path, bad_file):
    path = bad_file("Too short.", "short.txt")
    line = error_line(capsys, "lm", replaced(lm_argv(data_dir, tmp_path / "out"), "--valid", path))
    assert "--window" in line


def test_unknown_model(capsys, data_dir, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        recipe_main("translate", replaced(translate_argv(data_dir, tmp_path / "out"), "--model", "lstm-crf"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --model: invalid choice: 'lstm-crf'" in err.strip().split("\n")[-1]


def test_input_feeding_without_attention(capsys, data_dir, tmp_path):
    line = error_line(capsys, "translate", translate_argv(data_dir, tmp_path / "out", "rnn", 1, "--input-feeding"))
    assert "--input-feeding: expected --model rnn-attention, got --model rnn" in line


def test_placeholders_with_a_word_vocabulary(capsys, data_dir, tmp_path):
    line = error_line(capsys, "translate", translate_argv(data_dir, tmp_path / "out", "rnn", 1, "--placeholders"))
    assert "--placeholders: expected --vocabulary subword (its pieces keep each placeholder whole), got" in line
    assert not (tmp_path / "out" / "model.keras").exists()


def test_ctranslate2_export_of_an_rnn(capsys, data_dir, tmp_path):
    line = error_line(capsys, "translate", translate_argv(data_dir, tmp_path / "out", "rnn", 1, "--export-ctranslate2"))
    assert (
        "--export-ctranslate2: expected --model transformer (CTranslate2 serves Transformers), got --model rnn" in line
    )
    assert not (tmp_path / "out" / "model.keras").exists()


def test_unknown_tfds_name(capsys, tmp_path):
    line = error_line(capsys, "classify", ["--tfds", "no_such_set_anywhere", "--output-dir", tmp_path / "out"])
    assert "--tfds no_such_set_anywhere: no TensorFlow Datasets set of that name" in line
    assert not (tmp_path / "out" / "checkpoint/model.keras").exists()


def test_tfds_set_that_cannot_be_downloaded(capsys, tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    def offline(self, *args, **kwargs):
        raise ConnectionError("Failed to resolve 'storage.googleapis.com'\nretrying...")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", offline)
    argv = ["--tfds", "imdb_reviews", "--tfds-data-dir", tmp_path / "tfds", "--output-dir", tmp_path / "out"]
    line = error_line(capsys, "classify", argv)
    assert "--tfds imdb_reviews: could not download and prepare it (ConnectionError: Failed to resolve" in line
    assert "--tfds-data-dir" in line and "--train/--valid" in line
    assert not (tmp_path / "out" / "checkpoint/model.keras").exists()


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--vocab-size", 0, "--vocab-size: expected a positive integer"),
        ("--patience", 0, "--patience: expected a positive integer"),
        ("--average-last", -1, "--average-last: expected a positive integer"),
        ("--validate-every", 0, "--validate-every: expected"),
        ("--max-nan", 0, "--max-nan: expected a positive integer"),
        ("--checkpoint-every", 0, "--checkpoint-every: expected a number > 0"),
        (
            "--subword-sampling",
            1.5,
            "--subword-sampling: expected a number in (0, 1] with --vocabulary subword, got 1.5",
        ),
    ],
)
def test_bad_translate_values(capsys, data_dir, tmp_path, flag, value, message):
    line = error_line(capsys, "translate", translate_argv(data_dir, tmp_path / "out", "transformer", 1, flag, value))
    assert message in line


@pytest.mark.parametrize("recipe, flag", [("classify", "--vocabulary-size"), ("lm", "--vocab-size")])
def test_bad_vocabulary_size(capsys, data_dir, tmp_path, recipe, flag):
    from recipe_runs import classify_argv, lm_argv

    argv = (classify_argv if recipe == "classify" else lm_argv)(data_dir, tmp_path / "out", flag, 0)
    assert f"{flag}: expected a positive integer, got 0" in error_line(capsys, recipe, argv)


def test_unreadable_sentencepiece_model_on_resume(capsys, data_dir, tmp_path, translate_subword):
    import shutil

    shutil.copytree(translate_subword.dir, tmp_path / "run")
    vocabularies = tmp_path / "run" / "vocabularies.json"
    vocabularies.write_text(vocabularies.read_text().replace('"model": "', '"model": "AAAA'), encoding="utf-8")
    argv = replaced(translate_subword.argv, "--output-dir", tmp_path / "run") + ["--resume"]
    line = error_line(capsys, "translate", argv)
    assert "SubwordVocabulary: `model` expected a serialized SentencePiece model" in line

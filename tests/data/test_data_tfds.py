"""keras_seq.data.loaders.tfds_splits on TensorFlow Datasets' mock data (nothing is downloaded)."""

import pytest
import tensorflow_datasets as tfds
from tfds_mock import mocked_tfds

from keras_seq.data import loaders


def splits(tmp_path, name, task, splits=None, count=4):
    with mocked_tfds(tmp_path, name, count, splits):
        return loaders.tfds_splits(name, task, data_dir=str(tmp_path))


def test_translate(tmp_path):
    train, valid, info = splits(tmp_path, "ted_hrlr_translate/pt_to_en", "translate")
    assert info.supervised_keys == ("pt", "en")
    assert len(train) == len(valid) == 4
    assert all(isinstance(s, str) and isinstance(t, str) and s and t for s, t in train + valid)


def test_classify_maps_label_ids_to_names_and_falls_back_to_test(tmp_path):
    train, valid, info = splits(tmp_path, "imdb_reviews", "classify", count=12)
    assert "validation" not in info.splits and "test" in info.splits
    assert len(train) == len(valid) == 12
    assert {label for label, _ in train} == {"neg", "pos"}  # ClassLabel ids become their names
    assert all(isinstance(text, str) for _, text in train)


def test_lm_joins_the_texts(tmp_path):
    train, valid, _ = splits(tmp_path, "tiny_shakespeare", "lm", count=3)
    assert isinstance(train, str) and train.count("\n") == 2 and isinstance(valid, str)


@pytest.mark.parametrize("name, valid_split", [("conll2003", "dev"), ("universal_dependencies/en_ewt", "dev")])
def test_tag_reads_tokens_and_tag_names(tmp_path, name, valid_split):
    train, valid, info = splits(tmp_path, name, "tag", splits=("train", valid_split, "test"))
    tag_key = "upos" if "upos" in info.features else "pos"
    names = set(info.features[tag_key].feature.names)
    assert len(train) == len(valid) == 4
    for sentence in train + valid:
        assert sentence and all(isinstance(token, str) and tag in names for token, tag in sentence)


def test_missing_valid_split(tmp_path):
    with pytest.raises(ValueError, match=r"expected a train split and one of .*got \['train', 'unsupervised'\]"):
        splits(tmp_path, "imdb_reviews", "classify", splits=("train", "unsupervised"))


def test_unknown_splits_are_an_error(tmp_path):
    # Mock data without metadata files: TensorFlow Datasets knows no split names.
    with tfds.testing.mock_data(num_examples=2, policy=tfds.testing.MockPolicy.USE_CODE):
        with pytest.raises(ValueError, match=r"--tfds imdb_reviews: expected a train split .*got \[\]"):
            loaders.tfds_splits("imdb_reviews", "classify")


def test_task_needs_the_right_features(tmp_path):
    with pytest.raises(ValueError, match="expected supervised keys for the translate recipe"):
        splits(tmp_path, "tiny_shakespeare", "translate", splits=("train", "validation"))
    with pytest.raises(ValueError, match="expected a text feature for the lm recipe"):
        splits(tmp_path, "mnist", "lm", splits=("train", "test"))
    with pytest.raises(ValueError, match="expected token and tag sequence features"):
        splits(tmp_path, "imdb_reviews", "tag", splits=("train", "test"))

"""TensorFlow Datasets' mock data, with the split names a real prepared dataset has.

`tfds.testing.mock_data` serves random examples built from a dataset's feature spec
without downloading anything, but knows a dataset's splits only from metadata files
(without them `info.splits` is empty). `mocked_tfds` writes those files, from the
dataset's own code, into a temporary data dir first.
"""

import contextlib
import os

import tensorflow_datasets as tfds

SPLITS = {
    "ted_hrlr_translate/pt_to_en": ("train", "validation", "test"),
    "imdb_reviews": ("train", "test", "unsupervised"),
    "tiny_shakespeare": ("train", "validation", "test"),
}


def write_metadata(data_dir, name, splits, num_examples):
    """Write `dataset_info.json` (and feature files) for `name` with `splits` under `data_dir`."""
    builder = tfds.builder(name, data_dir=str(data_dir))
    infos = [
        tfds.core.SplitInfo(
            name=split,
            shard_lengths=[num_examples],
            num_bytes=0,
            filename_template=tfds.core.ShardedFileTemplate(
                data_dir=builder.data_dir, dataset_name=builder.name, split=split, filetype_suffix="tfrecord"
            ),
        )
        for split in splits
    ]
    builder.info.set_splits(tfds.core.SplitDict(infos))
    os.makedirs(builder.data_dir, exist_ok=True)
    builder.info.write_to_directory(builder.data_dir)


@contextlib.contextmanager
def mocked_tfds(data_dir, name, num_examples, splits=None):
    """`tfds.testing.mock_data(num_examples)` for `name`, whose metadata (splits) is read from `data_dir`."""
    write_metadata(data_dir, name, splits or SPLITS[name], num_examples)
    with tfds.testing.mock_data(num_examples=num_examples, data_dir=str(data_dir)):
        yield

"""Readers for the recipes' three data paths: the user's files, TensorFlow Datasets, and
the embedded defaults. The `read_*` functions return plain Python lists, which
`keras_seq.data.pipeline` turns into one `tf.data` pipeline whatever their origin; the
`streamed_*` and `tfds_pairs` ones yield a record at a time, for `keras_seq.data.preparation`.

File formats (UTF-8): translate `source<TAB>target`, classify `label<TAB>text`, lm plain
text, tag `token<TAB>tag` lines with a blank line between sequences.
"""

import os


def _lines(path):
    return list(_streamed_lines(path))


def _streamed_lines(path):
    """The file's lines one at a time (without their line ends), never the whole file in memory."""
    if not os.path.isfile(path):
        raise ValueError(f"data file {path!r}: expected an existing file, got no such file.")
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if number == 1:
                line = line.removeprefix(b"\xef\xbb\xbf")  # a byte order mark (Windows editors) is not text
            try:
                yield line.rstrip(b"\r\n").decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"data file {path!r}: expected UTF-8 text, got undecodable bytes at {error.start} of line {number}."
                ) from None


def _two_columns(path, names, allow_empty=False):
    rows = list(_streamed_two_columns(path, names, allow_empty))
    if not rows:
        raise ValueError(f"data file {path!r}: expected `{names[0]}<TAB>{names[1]}` lines, got no example.")
    return rows


def _streamed_two_columns(path, names, allow_empty=False):
    for number, line in enumerate(_streamed_lines(path), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not (allow_empty or (fields[0].strip() and fields[1].strip())):
            raise ValueError(
                f"data file {path!r} line {number}: expected `{names[0]}<TAB>{names[1]}`"
                f"{'' if allow_empty else ' with both non-empty'}, got {line[:80]!r}."
            )
        yield fields[0].strip(), fields[1].strip()


def read_parallel_tsv(path):
    """`[(source, target), ...]` from `source<TAB>target` lines (blank lines skipped).

    A side may be empty (parallel corpora have such lines): `clean_parallel` drops
    and counts those pairs with the other kinds of unusable ones.
    """
    return _two_columns(path, ("source", "target"), allow_empty=True)


def streamed_parallel_tsv(path):
    """The `(source, target)` pairs of `read_parallel_tsv`, one at a time (for data too large to hold)."""
    return _streamed_two_columns(path, ("source", "target"), allow_empty=True)


def clean_parallel(pairs, max_characters=None):
    """`(kept pairs, counts of dropped pairs by reason)`: what a training split can use.

    Dropped, in this order: pairs with an empty side (`empty`), repeats of an earlier
    pair (`duplicates`; the first is kept), and pairs with a side longer than
    `max_characters` (`too_long`). By default the limit is the larger of 400 and 8
    times the 99th-percentile side length, so a few stray lines (a whole file
    pasted into one field, say) cannot blow up batch shapes or memory. The rules are
    those of the recipes' streamed preparation (`keras_seq.data.preparation.scan`).
    """
    from keras_seq.data import preparation

    pairs = [(source.strip(), target.strip()) for source, target in pairs]
    kept, counts = preparation.scan(lambda: iter(pairs), max_characters=max_characters)
    return [pair for pair, keep in zip(pairs, kept) if keep], {
        reason: counts[reason] for reason in ("empty", "duplicates", "too_long")
    }


def read_labelled_tsv(path):
    """`[(label, text), ...]` from `label<TAB>text` lines (blank lines skipped)."""
    return _two_columns(path, ("label", "text"))


def read_text(path):
    """The whole file as one string; an empty file is an error."""
    text = "\n".join(_lines(path))
    if not text.strip():
        raise ValueError(f"data file {path!r}: expected text, got an empty file.")
    return text


def read_tagged(path):
    """`[[(token, tag), ...], ...]` from `token<TAB>tag` lines, sequences separated by blank lines."""
    sequences, current = [], []
    for number, line in enumerate(_lines(path) + [""], 1):
        if not line.strip():
            if current:
                sequences.append(current)
            current = []
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0] or not fields[1].strip():
            raise ValueError(f"data file {path!r} line {number}: expected `token<TAB>tag`, got {line[:80]!r}.")
        current.append((fields[0], fields[1].strip()))
    if not sequences:
        raise ValueError(f"data file {path!r}: expected `token<TAB>tag` lines, got no sequence.")
    return sequences


TFDS_VALID_SPLITS = ("validation", "valid", "dev", "test")
_TAG_FEATURES = ("upos", "pos", "pos_tags", "tags", "ner_tags", "ner")
_TOKEN_FEATURES = ("tokens", "words", "token")


def _decode(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def tfds_splits(name, task, data_dir=None, download=True):
    """`(train, valid, info)` examples of a TensorFlow Datasets set, in the shape of the file readers.

    `task` picks the fields: `translate` the supervised (source, target) pair,
    `classify` (label name, text), `lm` the text, `tag` a token sequence and its tags
    (`upos`, `pos_tags`, `ner_tags`, ...). The valid split is the first of
    validation, valid, dev, test that the set has.
    """
    builder, valid_split = tfds_builder(name, task, data_dir, download)
    return _tfds_examples(builder, "train", task), _tfds_examples(builder, valid_split, task), builder.info


def tfds_builder(name, task, data_dir=None, download=True):
    """`(builder, name of its valid split)` of a TensorFlow Datasets set, prepared (downloaded) when `download`."""
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:  # its own message lists every dataset, hundreds of lines
        raise ValueError(
            f"--tfds {name}: no TensorFlow Datasets set of that name; pick one of tfds.list_builders() "
            "(e.g. imdb_reviews, ted_hrlr_translate/pt_to_en, tiny_shakespeare)."
        ) from None
    if download:
        try:
            builder.download_and_prepare()
        except Exception as error:  # offline, a source that moved, a set that needs a manual download, ...
            reason = str(error).strip().split("\n")[0][:200]
            raise ValueError(
                f"--tfds {name}: could not download and prepare it ({type(error).__name__}: {reason}); prepare it "
                "once where the network is reachable (into --tfds-data-dir), or pass --train/--valid files."
            ) from None
    splits = builder.info.splits
    valid_split = next((s for s in TFDS_VALID_SPLITS if s in splits), None)
    if "train" not in splits or valid_split is None:
        raise ValueError(f"--tfds {name}: expected a train split and one of {TFDS_VALID_SPLITS}, got {sorted(splits)}.")
    if task in ("translate", "classify") and builder.info.supervised_keys is None:
        raise ValueError(f"--tfds {builder.info.name}: expected supervised keys for the {task} recipe, got none.")
    return builder, valid_split


def tfds_pairs(builder, split):
    """The `(source, target)` pairs of a split, one at a time, read from the prepared TFDS files."""
    import tensorflow_datasets as tfds

    for source, target in tfds.as_numpy(builder.as_dataset(split=split, as_supervised=True)):
        yield _decode(source), _decode(target)


def _tfds_examples(builder, split, task):
    import tensorflow_datasets as tfds

    info = builder.info
    if task == "translate":
        return list(tfds_pairs(builder, split))
    dataset = tfds.as_numpy(builder.as_dataset(split=split, as_supervised=task == "classify"))
    if task == "classify":
        label_feature = info.features[info.supervised_keys[1]]
        names = getattr(label_feature, "names", None)
        return [((names[int(label)] if names else _decode(label)), _decode(text)) for text, label in dataset]
    if task == "lm":
        key = next((k for k, f in info.features.items() if "Text" in type(f).__name__), None)
        if key is None:
            raise ValueError(
                f"--tfds {info.name}: expected a text feature for the lm recipe, got {list(info.features)}."
            )
        return "\n".join(_decode(example[key]) for example in dataset)
    token_key = next((k for k in _TOKEN_FEATURES if k in info.features), None)
    tag_key = next((k for k in _TAG_FEATURES if k in info.features), None)
    if token_key is None or tag_key is None:
        raise ValueError(
            f"--tfds {info.name}: expected token and tag sequence features ({_TOKEN_FEATURES} and {_TAG_FEATURES}) "
            f"for the tag recipe, got {list(info.features)}."
        )
    names = getattr(getattr(info.features[tag_key], "feature", None), "names", None)
    return [
        [
            (_decode(token), names[int(tag)] if names else _decode(tag))
            for token, tag in zip(example[token_key], example[tag_key])
        ]
        for example in dataset
    ]

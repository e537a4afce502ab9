"""Readers for the recipes' three data paths: the user's files, TensorFlow Datasets, and
the embedded defaults. Each returns plain Python lists, which `keras_seq.data.pipeline`
turns into one `tf.data` pipeline whatever their origin.

File formats (UTF-8): translate `source<TAB>target`, classify `label<TAB>text`, lm plain
text, tag `token<TAB>tag` lines with a blank line between sequences.
"""

import os


def _lines(path):
    if not os.path.isfile(path):
        raise ValueError(f"data file {path!r}: expected an existing file, got no such file.")
    try:
        with open(path, encoding="utf-8-sig") as f:  # -sig: a byte order mark (Windows editors) is not text
            return f.read().splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"data file {path!r}: expected UTF-8 text, got undecodable bytes at {error.start}.") from None


def _two_columns(path, names, allow_empty=False):
    rows = []
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not (allow_empty or (fields[0].strip() and fields[1].strip())):
            raise ValueError(
                f"data file {path!r} line {number}: expected `{names[0]}<TAB>{names[1]}`"
                f"{'' if allow_empty else ' with both non-empty'}, got {line[:80]!r}."
            )
        rows.append((fields[0].strip(), fields[1].strip()))
    if not rows:
        raise ValueError(f"data file {path!r}: expected `{names[0]}<TAB>{names[1]}` lines, got no example.")
    return rows


def read_parallel_tsv(path):
    """`[(source, target), ...]` from `source<TAB>target` lines (blank lines skipped).

    A side may be empty (parallel corpora have such lines): `clean_parallel` drops
    and counts those pairs with the other kinds of unusable ones.
    """
    return _two_columns(path, ("source", "target"), allow_empty=True)


def clean_parallel(pairs, max_characters=None):
    """`(kept pairs, counts of dropped pairs by reason)`: what a training split can use.

    Dropped, in this order: pairs with an empty side (`empty`), repeats of an earlier
    pair (`duplicates`; the first is kept), and pairs with a side longer than
    `max_characters` (`too_long`). By default the limit is the larger of 400 and 8
    times the 99th-percentile side length, so a few stray lines (a whole file
    pasted into one field, say) cannot blow up batch shapes or memory.
    """
    counts = {"empty": 0, "duplicates": 0, "too_long": 0}
    seen, usable = set(), []
    for source, target in pairs:
        pair = (source.strip(), target.strip())
        if not pair[0] or not pair[1]:
            counts["empty"] += 1
        elif pair in seen:
            counts["duplicates"] += 1
        else:
            seen.add(pair)
            usable.append(pair)
    if max_characters is None and usable:
        lengths = sorted(max(len(s), len(t)) for s, t in usable)
        max_characters = max(400, 8 * lengths[int(0.99 * (len(lengths) - 1))])
    kept = [pair for pair in usable if max_characters is None or max(map(len, pair)) <= max_characters]
    counts["too_long"] = len(usable) - len(kept)
    return kept, counts


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
    return _tfds_examples(builder, "train", task), _tfds_examples(builder, valid_split, task), builder.info


def _tfds_examples(builder, split, task):
    import tensorflow_datasets as tfds

    info = builder.info
    supervised = task in ("translate", "classify")
    if supervised and info.supervised_keys is None:
        raise ValueError(f"--tfds {info.name}: expected supervised keys for the {task} recipe, got none.")
    dataset = tfds.as_numpy(builder.as_dataset(split=split, as_supervised=supervised))
    if task == "translate":
        return [(_decode(source), _decode(target)) for source, target in dataset]
    if task == "classify":
        label_feature = info.features[info.supervised_keys[1]]
        names = getattr(label_feature, "names", None)
        return [((names[int(label)] if names else _decode(label)), _decode(text)) for text, label in dataset]
    if task == "lm":
        key = next((k for k, f in info.features.items() if "Text" in type(f).__name__), None)
        if key is None:
            raise ValueError(f"--tfds {info.name}: expected a text feature for the lm recipe, got {list(info.features)}.")
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
        [(_decode(token), names[int(tag)] if names else _decode(tag)) for token, tag in zip(example[token_key], example[tag_key])]
        for example in dataset
    ]

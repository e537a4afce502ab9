"""Tokenization and vocabularies written in TensorFlow string ops.

The same ops run in the recipes' `tf.data` pipelines and inside exported
SavedModels (`keras_seq.export`), so a sentence is split and looked up the same
way in training and in serving. Ids 0-3 are reserved: padding, start, end, unknown.
"""

import collections

import tensorflow as tf

PAD, START, END, UNKNOWN = 0, 1, 2, 3
RESERVED = ("", "<s>", "</s>", "<unk>")
LEVELS = ("word", "char", "whitespace")
# Punctuation becomes a token of its own; an apostrophe stays on the word before it (l'|école).
_PUNCTUATION = r"""([.,!?;:"()\[\]¿¡«»…—–])"""


def tokenize(strings, level="word", lowercase=False):
    """Split a string tensor into a ragged tensor of tokens.

    `word`: punctuation marks become tokens and an apostrophe ends a token
    (`l'école` -> `l'`, `école`); `char`: Unicode characters; `whitespace`: the
    text between spaces, as it is (for data that comes tokenized, e.g. tagging).
    """
    if level not in LEVELS:
        raise ValueError(f"tokenize: `level` expected one of {LEVELS}, got {level!r}.")
    strings = tf.convert_to_tensor(strings, tf.string)
    if lowercase:
        strings = tf.strings.lower(strings, encoding="utf-8")
    if level == "char":
        return tf.strings.unicode_split(strings, "UTF-8")
    if level == "whitespace":
        return tf.strings.split(strings)
    strings = tf.strings.regex_replace(strings, _PUNCTUATION, r" \1 ")
    strings = tf.strings.regex_replace(strings, "'", "' ")
    return tf.strings.split(strings)


def detokenize(tokens, level="word"):
    """Join a ragged/dense token tensor (empty tokens skipped) back into strings: the inverse of `tokenize`."""
    if isinstance(tokens, tf.Tensor):
        tokens = tf.RaggedTensor.from_tensor(tokens, padding="")
    tokens = tf.ragged.boolean_mask(tokens, tf.strings.length(tokens) > 0)
    if level == "char":
        return tf.strings.reduce_join(tokens, axis=-1)
    if level == "whitespace":
        return tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    text = tf.strings.regex_replace(text, r" ([.,!?;:)\]»…])", r"\1")  # closing marks join the word before
    text = tf.strings.regex_replace(text, r"([(\[«¿¡]) ", r"\1")
    text = tf.strings.regex_replace(text, r'" ([^"]*?) "', r'"\1"')  # straight quotes: pair them up in order
    return tf.strings.regex_replace(text, "' ", "'")


class Vocabulary:
    """Tokens and their ids: the reserved four, then the training tokens by frequency.

    Args:
        tokens: the non-reserved tokens, most frequent first.
        level: `word` or `char`, how `encode` splits strings.
        lowercase: whether `encode` lowercases first.
    """

    def __init__(self, tokens, level="word", lowercase=False):
        if level not in LEVELS:
            raise ValueError(f"Vocabulary: `level` expected one of {LEVELS}, got {level!r}.")
        self.tokens = list(RESERVED) + [t for t in tokens if t not in RESERVED]
        self.level = level
        self.lowercase = lowercase
        self._table = None

    @classmethod
    def build(cls, texts, level="word", lowercase=False, max_size=None, min_count=1):
        """Count the tokens of `texts` (an iterable of strings or a string `tf.data.Dataset`)."""
        counts = collections.Counter()
        batches = texts.batch(1024) if isinstance(texts, tf.data.Dataset) else _chunks(list(texts), 1024)
        for batch in batches:
            for row in tokenize(batch, level, lowercase).to_list():
                counts.update(token.decode("utf-8") for token in row)
        ranked = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max(0, max_size - len(RESERVED))]
        if not ranked:
            raise ValueError("Vocabulary.build: `texts` expected at least one token, got none (empty data?).")
        return cls(ranked, level, lowercase)

    def __len__(self):
        return len(self.tokens)

    def get_config(self):
        return {"tokens": self.tokens[len(RESERVED) :], "level": self.level, "lowercase": self.lowercase}

    def lookup_table(self):
        """A `tf.lookup.StaticHashTable` from token to id (unknown tokens -> 3)."""
        keys = tf.constant(self.tokens[1:])
        values = tf.range(1, len(self.tokens), dtype=tf.int64)
        return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), default_value=UNKNOWN)

    def encode(self, strings, table=None, add_start=False, add_end=False):
        """Ragged int32 ids of a string tensor; `table` defaults to one built once per vocabulary."""
        if table is None:
            if self._table is None:
                self._table = self.lookup_table()
            table = self._table
        ids = tf.cast(table.lookup(tokenize(strings, self.level, self.lowercase)), tf.int32)
        column = tf.fill(tf.stack([ids.nrows(out_type=tf.int32), 1]), 0)
        if add_start:
            ids = tf.concat([column + START, ids], axis=1)
        if add_end:
            ids = tf.concat([ids, column + END], axis=1)
        return ids

    def decode(self, ids):
        """Strings from a batch of ids `(B, L)`: stops at the end id, skips padding and the start id."""
        ids = tf.convert_to_tensor(ids, tf.int32)
        before_end = tf.math.cumsum(tf.cast(tf.equal(ids, END), tf.int32), axis=-1, exclusive=True) == 0
        keep = tf.logical_and(before_end, ids > END)
        tokens = tf.where(keep, tf.gather(tf.constant(self.tokens), ids), "")
        return detokenize(tokens, self.level)


def _chunks(items, size):
    for start in range(0, len(items), size):
        yield tf.constant(items[start : start + size], tf.string)

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
# Marks that are tokens wherever they stand (paired by `detokenize`).
_ALWAYS_SPLIT = r"""(")"""
# The run of closing marks that ends a word and the run of opening ones that starts it are
# tokens, one per mark; inside a word marks belong to it (`config.ini`, `2.0`, `%(name)s`,
# `.elseif`, `[4..40]`), so such spans stay one token.
_CLOSING = r".,!?;:)\]»…”"
_OPENING = r"(\[«¿¡“‘"
# French puts a space before these four; `tokenize` records it as this narrow no-break space
# glued to the mark (` :` -> `\u202f:`), the character French typography writes there.
_SPACED = "\u202f"
_SPACED_MARKS = ":;!?"
_APOSTROPHES = "'’"
# `detokenize`'s table. A token of closing marks or a lone apostrophe sticks to the token before
# (`word.`, `(x)`, `users'`); an opening bracket or quote or an elision (`l'`, `qu’`) sticks to
# the token after. Guillemets stick to nothing: French spaces their inside (`« Bonjour »`).
_STICKS_LEFT = rf"[.,!?;:)\]…”]+|[{_APOSTROPHES}]"
_STICKS_RIGHT = rf"[(\[¿¡“‘]|.*\pL[{_APOSTROPHES}]"


def tokenize(strings, level="word", lowercase=False):
    """Split a string tensor into a ragged tensor of tokens.

    `word`: punctuation marks at a word's edges become tokens (inside a word they
    stay: `config.ini`, `2.0`, `%(name)s`, `--force`), an apostrophe between two
    letters ends a token (`l'école` -> `l'`, `école`; `’` too) and one that ends a
    word is a token (`users'` -> `users`, `'`). A space written before `: ; ! ?`
    (French: `Attention : fichier`) makes the mark's token `\\u202f:` instead of
    `:`: French and English space these marks differently and the tokens are all
    `detokenize` sees. No-break and other Unicode spaces (U+00A0, U+202F, ...)
    count as plain spaces. `char`: Unicode characters; `whitespace`: the text
    between spaces, as it is (for data that comes tokenized, e.g. tagging).
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
    strings = tf.strings.regex_replace(strings, r"\p{Zs}", " ")  # U+00A0, U+202F, U+2009, ... are spaces
    closing, opening = f"[{_CLOSING}]", f"[{_OPENING}]"
    for _ in range(2):  # in `a ? !` the match of `?` takes the space before `!`: a second pass records it
        strings = tf.strings.regex_replace(
            strings, f'(\\S)\\s+([{_SPACED_MARKS}])([{_CLOSING}"\\s]|$)', f"\\1 {_SPACED}\\2\\3"
        )
    strings = tf.strings.regex_replace(strings, _ALWAYS_SPLIT, r" \1 ")
    strings = tf.strings.regex_replace(strings, f"({_SPACED}?{closing}+)(\\s|$)", r" \1 \2")  # a word's last marks
    strings = tf.strings.regex_replace(strings, f"(^|\\s)({opening}+)", r"\1 \2 ")  # a word's first marks
    for _ in range(5):  # then one token per mark, peeled one per pass: runs of up to 6 (`, ...).`)
        strings = tf.strings.regex_replace(strings, f"(\\s)({_SPACED}?{closing})({closing}+)(\\s|$)", r"\1\2 \3\4")
    for _ in range(2):  # opening runs are short (`(«`, `[(`)
        strings = tf.strings.regex_replace(strings, f"(^|\\s)({opening})({opening}+)(\\s)", r"\1\2 \3\4")
    strings = tf.strings.regex_replace(strings, f"(\\pL)([{_APOSTROPHES}])(\\s|$)", r"\1 \2\3")  # users' -> users '
    for _ in range(2):  # rock'n'roll: the letter after one apostrophe is the letter before the next
        strings = tf.strings.regex_replace(strings, f"(\\pL[{_APOSTROPHES}])(\\pL)", r"\1 \2")
    return tf.strings.split(strings)


def detokenize(tokens, level="word"):
    """Join a ragged/dense token tensor (empty tokens skipped) back into strings: the inverse of `tokenize`.

    Word level: whether a space goes between two neighbouring tokens depends on
    those two tokens only, and nothing else is changed, so tokens keep their order
    and no mark ever moves across a quote or bracket (`« .elseif »` stays so). No
    space after an opening bracket or quote (`( [ ¿ ¡ “ ‘`) or an elision (`l'`,
    `qu’`); none before closing marks (`. , ! ? ; : … ) ] ”`) or a lone apostrophe;
    a space everywhere else, so inside guillemets too (`« Bonjour »`). A mark that
    `tokenize` recorded with a space before it (`\\u202f?`) gets a plain space back
    (`Attention : fichier introuvable !`). Straight double quotes are paired in
    order: the first of a pair opens, the second closes (`"yes", then "no"`).
    Round trips are exact for text spaced this way with plain spaces; other Unicode
    spaces come back as plain ones, `«Oui»` as `« Oui »`.
    """
    if isinstance(tokens, tf.Tensor):
        if tokens.shape.rank == 1:  # the tokens of one string (tf.data maps one example at a time)
            return detokenize(tokens[tf.newaxis], level)[0]
        tokens = tf.RaggedTensor.from_tensor(tokens, padding="")
    tokens = tf.ragged.boolean_mask(tokens, tf.strings.length(tokens) > 0)
    if level == "char":
        return tf.strings.reduce_join(tokens, axis=-1)
    if level == "whitespace":
        return tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    rows = tf.RaggedTensor.from_row_splits(tokens.flat_values, tokens.nested_row_splits[-1], validate=False)
    words = rows.values
    quotes = tf.cast(tf.equal(words, '"'), tf.int32)
    quote_number = tf.math.cumsum(rows.with_values(quotes), axis=1, exclusive=True).values
    opening_quote = tf.logical_and(quotes > 0, quote_number % 2 == 0)
    closing_quote = tf.logical_and(quotes > 0, quote_number % 2 == 1)
    spaced = tf.strings.regex_full_match(words, f"{_SPACED}[{_SPACED_MARKS}]")
    sticks_left = tf.logical_or(tf.strings.regex_full_match(words, _STICKS_LEFT), closing_quote)
    sticks_right = tf.logical_or(tf.strings.regex_full_match(words, _STICKS_RIGHT), opening_quote)
    after_sticky = tf.concat([[False], sticks_right], axis=0)[:-1]  # the token before sticks to this one
    after_guillemet = tf.concat([[False], tf.equal(words, "«")], axis=0)[:-1]
    first = tf.equal(tf.ragged.range(rows.row_lengths()).values, 0)
    space = ~first & (spaced | after_guillemet | ~(sticks_left | after_sticky))
    words = tf.where(spaced, tf.strings.substr(words, 1, 1, unit="UTF8_CHAR"), words)
    pieces = tf.strings.join([tf.where(space, " ", ""), words])
    return tf.strings.reduce_join(tokens.with_flat_values(pieces), axis=-1)


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

    def split(self, string):
        """The tokens `encode` makes of one string, as text (for plots and inspection)."""
        return [token.decode("utf-8") for token in tokenize([string], self.level, self.lowercase).to_list()[0]]

    def token_texts(self, ids, table=None):
        """The token of each id, a string tensor of `ids`' shape (padding: ""); `table` as for `decode`."""
        return tf.gather(tf.constant([""] + self.tokens[1:]), tf.convert_to_tensor(ids, tf.int32))

    def decode(self, ids, table=None):
        """Strings from a batch of ids `(B, L)`: stops at the end id, skips padding and the start id.

        `table` is unused (the tokens are a constant); it keeps the signature of `SubwordVocabulary.decode`.
        """
        ids = tf.convert_to_tensor(ids, tf.int32)
        before_end = tf.math.cumsum(tf.cast(tf.equal(ids, END), tf.int32), axis=-1, exclusive=True) == 0
        keep = tf.logical_and(before_end, ids > END)
        tokens = tf.where(keep, tf.gather(tf.constant(self.tokens), ids), "")
        return detokenize(tokens, self.level)


def _chunks(items, size):
    for start in range(0, len(items), size):
        yield tf.constant(items[start : start + size], tf.string)

"""Subword vocabularies: SentencePiece models trained on the training split.

A `SubwordVocabulary` is used like `keras_seq.data.text.Vocabulary` (`encode`,
`decode`, `lookup_table`, `get_config`, `len`), so the recipes, the `tf.data`
pipeline and the exported SavedModels take either. Strings become ids through
`tensorflow_text.SentencepieceTokenizer`, a TensorFlow op, in training and inside the
export alike: an exported model serves raw strings with TensorFlow and
tensorflow-text, and splits a sentence exactly as training did.

Ids 0-3 are the same reserved ids as the word vocabularies' (padding, start, end,
unknown). With byte fallback, a character outside the learned pieces is spelled as
its UTF-8 bytes (`<0xE2>` ...) instead of becoming unknown, so anything a source
holds (placeholders, paths, rare letters) can be reproduced.

References:
    Kudo & Richardson, 2018, "SentencePiece: a simple and language independent subword
    tokenizer and detokenizer for neural text processing" (EMNLP demo).
    Kudo, 2018, "Subword regularization" (the unigram model); Sennrich et al., 2016,
    "Neural machine translation of rare words with subword units" (BPE).
"""

import base64
import io
import os
import re

import tensorflow as tf

from keras_seq import _validation as v
from keras_seq.data import text

MODEL_TYPES = ("unigram", "bpe")
# The reserved ids 0-3 of keras_seq.data.text, as SentencePiece piece names.
_RESERVED = dict(
    pad_id=text.PAD,
    bos_id=text.START,
    eos_id=text.END,
    unk_id=text.UNKNOWN,
    pad_piece="<pad>",
    bos_piece="<s>",
    eos_piece="</s>",
    unk_piece="<unk>",
)
# The fewest pieces a byte-fallback model can have: the 4 reserved ids and the 256 bytes.
_BYTE_PIECES = 256


class SubwordVocabulary:
    """A SentencePiece model (unigram or BPE) with the reserved ids 0-3 of the word vocabularies.

    Args:
        model: the serialized SentencePiece model (the bytes of a `.model` file).
        lowercase: whether `encode` lowercases strings before splitting them.

    Build one with `SubwordVocabulary.train(texts, vocabulary_size)` or read a
    `.model` file with `SubwordVocabulary.load(path)`.
    """

    level = "subword"

    def __init__(self, model, lowercase=False):
        import sentencepiece

        if isinstance(model, str):  # the base64 text of get_config
            model = base64.b64decode(model)
        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model)
        except Exception:
            raise ValueError(
                "SubwordVocabulary: `model` expected a serialized SentencePiece model, got bytes it cannot read."
            ) from None
        expected = {"pad_id": text.PAD, "bos_id": text.START, "eos_id": text.END, "unk_id": text.UNKNOWN}
        found = {
            "pad_id": processor.pad_id(),
            "bos_id": processor.bos_id(),
            "eos_id": processor.eos_id(),
            "unk_id": processor.unk_id(),
        }
        if found != expected:
            v.fail("SubwordVocabulary", "model", f"reserved ids {expected}", found)
        self.model = bytes(model)
        self.lowercase = bool(lowercase)
        self._processor = processor

    @classmethod
    def train(
        cls,
        texts,
        vocabulary_size=8000,
        model_type="unigram",
        lowercase=False,
        byte_fallback=True,
        character_coverage=0.9995,
        max_sentence_length=4192,
        user_symbols=(),
    ):
        """Train a SentencePiece model on `texts` (an iterable of strings), in memory.

        `vocabulary_size` counts every id (the 4 reserved ones included); it is an
        upper bound: data too small for that many pieces gets fewer, and a size
        below what the data's characters need is raised to it (`len()` says how many). Numbers are split into
        digits, so any number can be spelled and copied; text is not normalised (`identity`), so what a source
        holds comes back byte for byte. Each of `user_symbols` (e.g. `keras_seq.data.placeholders.TOKENS`) is
        one piece wherever it occurs.
        """
        import sentencepiece

        owner = "SubwordVocabulary.train"
        v.check_choice(owner, "model_type", model_type, MODEL_TYPES)
        vocabulary_size = v.check_positive_int(owner, "vocabulary_size", vocabulary_size)
        smallest = len(text.RESERVED) + (_BYTE_PIECES if byte_fallback else 1)
        if vocabulary_size <= smallest:
            v.fail(
                owner,
                "vocabulary_size",
                f"more than {smallest} (the reserved ids{' and the 256 bytes' if byte_fallback else ''})",
                vocabulary_size,
            )
        sentences = [s.lower() if lowercase else s for s in texts]
        sentences = [s for s in sentences if s.strip()]
        if not sentences:
            raise ValueError(f"{owner}: `texts` expected at least one non-empty string, got none (empty data?).")
        options = dict(
            model_type=model_type,
            vocab_size=vocabulary_size,
            byte_fallback=byte_fallback,
            character_coverage=character_coverage,
            split_digits=True,
            normalization_rule_name="identity",
            max_sentence_length=max_sentence_length,
            hard_vocab_limit=False,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
            user_defined_symbols=list(user_symbols),
            **_RESERVED,
        )
        model = io.BytesIO()
        try:
            sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, **options)
        except RuntimeError as error:
            # "Vocabulary size is smaller than required_chars. N vs M.": the data's characters need M ids.
            needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(error))
            if needed is None:
                raise ValueError(
                    f"{owner}: SentencePiece could not train on these texts ({str(error).strip()[:200]})."
                ) from None
            model = io.BytesIO()
            options["vocab_size"] = int(needed.group(1)) + 1
            sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, **options)
        return cls(model.getvalue(), lowercase=lowercase)

    @classmethod
    def load(cls, path, lowercase=False):
        """Read a SentencePiece `.model` file (its reserved ids must be 0-3 as above)."""
        try:
            with open(path, "rb") as f:
                model = f.read()
        except OSError as error:
            raise ValueError(
                f"SubwordVocabulary.load: `path` expected a readable .model file, got {path!r} ({error.strerror})."
            ) from None
        return cls(model, lowercase=lowercase)

    def save(self, path):
        """Write the SentencePiece model as a `.model` file (readable by `sentencepiece` itself), atomically."""
        from keras_seq import _atomic as atomic

        with atomic.replaced_atomically(path) as temporary:
            with open(temporary, "wb") as f:
                f.write(self.model)

    def __len__(self):
        return self._processor.GetPieceSize()

    @property
    def tokens(self):
        """The pieces by id: `tokens[i]` is the text of id `i`."""
        return [self._processor.IdToPiece(i) for i in range(len(self))]

    def get_config(self):
        return {"level": self.level, "model": base64.b64encode(self.model).decode("ascii"), "lowercase": self.lowercase}

    def lookup_table(self):
        """The `tensorflow_text.SentencepieceTokenizer` that `encode` and `decode` run (a trackable resource)."""
        import tensorflow_text  # registers the SentencePiece ops (a process loading an export imports it too)

        return tensorflow_text.SentencepieceTokenizer(model=self.model, out_type=tf.int32)

    def _table(self, table):
        # A new tokenizer per call, not one kept: its model lives in an op kernel that
        # TensorFlow's eager kernel cache owns, and `tf.random.set_seed` clears that cache.
        return self.lookup_table() if table is None else table

    def encode(self, strings, table=None, add_start=False, add_end=False):
        """Ragged int32 ids of a string tensor; `table` is a `lookup_table()` (default: a new one)."""
        strings = tf.convert_to_tensor(strings, tf.string)
        if self.lowercase:
            strings = tf.strings.lower(strings, encoding="utf-8")
        ids = self._table(table).tokenize(strings)
        column = tf.fill(tf.stack([ids.nrows(out_type=tf.int32), 1]), 0)
        if add_start:
            ids = tf.concat([column + text.START, ids], axis=1)
        if add_end:
            ids = tf.concat([ids, column + text.END], axis=1)
        return ids

    def sample(self, strings, alpha, seed, add_start=False, add_end=False):
        """Ragged int32 ids of `strings`, each split drawn at random rather than the best one.

        Subword regularization, so that a model does not learn one split of each word
        by heart: a unigram model draws the split `x` of a sentence `X` with probability
        `P(x | X) ~ P(x)^alpha` over all its splits (Kudo, 2018, sec. 3; a smaller alpha
        draws further from the best split); a BPE model skips each merge with probability
        `alpha` (BPE-dropout, Provilkov et al., 2020, sec. 2). `alpha` is in (0, 1];
        `seed` fixes the draws.
        """
        import sentencepiece

        if not 0.0 < alpha <= 1.0:
            v.fail("SubwordVocabulary.sample", "alpha", "a number in (0, 1]", alpha)
        sentencepiece.set_random_generator_seed(int(seed))
        strings = [s.lower() if self.lowercase else s for s in strings]
        rows = self._processor.encode(
            strings, out_type=int, enable_sampling=True, alpha=float(alpha), nbest_size=-1, num_threads=1
        )  # one thread: the seed fixes the draws
        rows = [[text.START] * add_start + row + [text.END] * add_end for row in rows]
        return (
            tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1) if rows else tf.ragged.constant([[]], tf.int32)[:0]
        )

    def decode(self, ids, table=None):
        """Strings from a batch of ids `(B, L)`: stops at the end id, skips padding and the start id."""
        ids = tf.convert_to_tensor(ids, tf.int32)
        before_end = tf.math.cumsum(tf.cast(tf.equal(ids, text.END), tf.int32), axis=-1, exclusive=True) == 0
        kept = tf.ragged.boolean_mask(ids, tf.logical_and(before_end, ids > text.END))
        return self._table(table).detokenize(kept)

    def token_texts(self, ids, table=None):
        """The piece of each id, a string tensor of `ids`' shape (padding: ""); `table` as for `decode`."""
        ids = tf.convert_to_tensor(ids, tf.int32)
        return tf.where(ids == text.PAD, "", self._table(table).id_to_string(ids))

    def split(self, string):
        """The pieces `encode` makes of one string, as text (for plots and inspection)."""
        return [self._processor.IdToPiece(int(i)) for i in self.encode([string]).to_list()[0]]


def vocabulary_from_config(config):
    """A `SubwordVocabulary` or a word/char `Vocabulary` from its `get_config()`."""
    if config.get("level") == SubwordVocabulary.level:
        return SubwordVocabulary(config["model"], lowercase=config.get("lowercase", False))
    return text.Vocabulary(**config)

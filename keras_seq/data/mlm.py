"""BERT's masked-language-model corruption of token ids, for the input pipeline (Devlin et al., 2019).

BERT learns to recover the original ids at randomly masked positions, with the loss
computed at those positions only (Devlin et al., 2019, sec. 3.1, task #1). `TokenMasker`
makes the modified ids and the targets. It is written with TensorFlow ops rather than `keras.ops`:
`tf.data` runs `.map` functions as TensorFlow graphs whatever the Keras backend, and
TensorFlow is a dependency of the package. NumPy arrays go through the same ops, so
both uses draw the same masks from the same seed.
"""

import numpy as np
import tensorflow as tf

from keras_seq import _validation as v


def _check_rate(argument, value):
    if not v.is_number(value) or not 0 <= value <= 1:
        v.fail("TokenMasker", argument, "a number in [0, 1]", repr(value))
    return float(value)


def _check_ids(argument, ids, low, high):
    if not all(v.is_integer(i) and low <= i < high for i in ids):
        v.fail("TokenMasker", argument, f"ids in [{low}, {high})", repr(ids))
    return tuple(int(i) for i in ids)


class TokenMasker:
    """Selects and corrupts tokens as BERT does: `(token_ids) -> (inputs, labels)`.

    Of the positions that are neither padding (id 0), `mask_id` nor one of
    `special_ids`, each is selected with probability `selection_rate` (0.15 in BERT).
    A selected position becomes `mask_id` with probability `mask_rate` (0.8), a
    uniformly drawn ordinary id (never 0, `mask_id` or a special id) with probability
    `random_rate` (0.1), and stays unchanged otherwise (0.1). `labels` hold the
    original id at the selected positions and `ignore_index` (0, the padding id,
    which no selected position holds) everywhere else, so that the loss and the
    accuracy count the selected positions only:

        model.compile(loss=ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=0),
                      metrics=[ks.metrics.MaskedAccuracy(ignore_index=0)])

    The draws come from a `tf.random.Generator` seeded with `seed`: a masker makes
    the same sequence of masks on every run, and each call (each batch of a
    `dataset.map(masker)`) a fresh one, so the masks change from epoch to epoch
    (RoBERTa's dynamic masking). Call it on a NumPy array (returns NumPy arrays) or
    inside `tf.data` (`dataset.map(masker)`, returns tensors); ids of any shape. A
    parallel `map` draws in a nondeterministic order: keep the default sequential one
    for repeatable masks.

    Args:
        vocabulary_size: number of token ids V; random replacements lie in `[1, V)`.
        mask_id: the `[MASK]` id, in `[1, V)`.
        special_ids: ids never selected nor drawn (e.g. `[CLS]`, `[SEP]`).
        selection_rate: share of candidate positions selected.
        mask_rate: share of the selected positions replaced by `mask_id`.
        random_rate: share of the selected positions replaced by a random id.
        seed: integer seed, or None for a non-repeatable one.

    References:
        Devlin et al., 2019, "BERT: pre-training of deep bidirectional transformers
        for language understanding", section 3.1 (task #1, masked LM).
    """

    ignore_index = 0

    def __init__(
        self, vocabulary_size, mask_id, special_ids=(), selection_rate=0.15, mask_rate=0.8, random_rate=0.1, seed=None
    ):
        owner = "TokenMasker"
        self.vocabulary_size = v.check_positive_int(owner, "vocabulary_size", vocabulary_size)
        (self.mask_id,) = _check_ids("mask_id", [mask_id], 1, self.vocabulary_size)
        self.special_ids = _check_ids("special_ids", list(special_ids), 0, self.vocabulary_size)
        self.selection_rate = _check_rate("selection_rate", selection_rate)
        self.mask_rate = _check_rate("mask_rate", mask_rate)
        self.random_rate = _check_rate("random_rate", random_rate)
        if self.mask_rate + self.random_rate > 1:
            v.fail(owner, "mask_rate + random_rate", "at most 1", self.mask_rate + self.random_rate)
        if seed is not None and not v.is_integer(seed):
            v.fail(owner, "seed", "an integer or None", repr(seed))
        self.seed = seed

        excluded = {0, self.mask_id, *self.special_ids}
        replacements = [i for i in range(self.vocabulary_size) if i not in excluded]
        if not replacements:
            v.fail(owner, "vocabulary_size", "ids besides padding, mask_id and special_ids", vocabulary_size)
        self._excluded_ids = tf.constant(sorted(excluded), tf.int64)
        self._replacement_ids = tf.constant(replacements, tf.int64)
        self._generator = (
            tf.random.Generator.from_non_deterministic_state() if seed is None else tf.random.Generator.from_seed(seed)
        )

    def __call__(self, token_ids):
        """`(inputs, labels)` of the same shape and dtype as `token_ids`; see the class docstring."""
        from_numpy = not tf.is_tensor(token_ids)
        ids = tf.convert_to_tensor(np.asarray(token_ids) if from_numpy else token_ids)
        v.check_integer_ids("TokenMasker", "token_ids", ids)
        if tf.executing_eagerly():  # inside a tf.data map the values are not known yet
            v.check_ids_below("TokenMasker", "token_ids", ids.numpy(), self.vocabulary_size)
        wide_ids = tf.cast(ids, tf.int64)
        shape = tf.shape(ids)

        is_excluded = tf.reduce_any(tf.equal(wide_ids[..., None], self._excluded_ids), axis=-1)
        selected = tf.logical_and(~is_excluded, self._generator.uniform(shape) < self.selection_rate)
        # One uniform draw splits the selected positions: [0, mask_rate) -> mask id,
        # [mask_rate, mask_rate + random_rate) -> random id, the rest keep their id.
        split = self._generator.uniform(shape)
        random_ids = tf.gather(
            self._replacement_ids, self._generator.uniform(shape, maxval=self._replacement_ids.shape[0], dtype=tf.int64)
        )
        corrupted = tf.where(
            split < self.mask_rate,
            tf.constant(self.mask_id, tf.int64),
            tf.where(split < self.mask_rate + self.random_rate, random_ids, wide_ids),
        )
        inputs = tf.cast(tf.where(selected, corrupted, wide_ids), ids.dtype)
        labels = tf.where(selected, ids, tf.constant(self.ignore_index, ids.dtype))
        if from_numpy:
            return inputs.numpy(), labels.numpy()
        return inputs, labels

"""Attention in `rnn_seq2seq` pays off on a real vocabulary.

Reversal is an alignment problem: the i-th output word is the (n+1-i)-th input word, so
an attentional decoder can read it off the annotations while a plain encoder-decoder has
to squeeze the whole sequence into its initial state. The words are real: windows of
the French side of the shipped `software_en_fr` corpus, over its 3,000 most frequent
words. Synthetic vocabularies of a few dozen ids never showed that attention could stay
stuck at the target's word frequencies (a saturated readout, see `RNNSeq2Seq`).
"""

import collections

import keras
import numpy as np
import pytest

import keras_seq as ks
from keras_seq.data import corpora

VOCABULARY_SIZE = 3000
TRAIN, HELD_OUT = 4000, 500
START, END = 1, 2


def reversal_of_real_words(count, seed=0):
    """`count` windows of 8 to 12 consecutive in-vocabulary French words and their reversal."""
    stream = [word for _, french in corpora.software_en_fr("train") for word in french.lower().split()]
    kept = [word for word, _ in collections.Counter(stream).most_common(VOCABULARY_SIZE - 3)]
    ids = {word: i + 3 for i, word in enumerate(kept)}
    stream = np.array([ids[word] for word in stream if word in ids], "int32")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 13, count)
    starts = rng.integers(0, len(stream) - 12, count)
    source = np.zeros((count, 12), "int32")
    target = np.zeros((count, 14), "int32")
    target[:, 0] = START
    for row, (start, length) in enumerate(zip(starts, lengths)):
        source[row, :length] = stream[start : start + length]
        target[row, 1 : length + 1] = source[row, :length][::-1]
        target[row, length + 1] = END
    return {"encoder_inputs": source, "decoder_inputs": target[:, :-1]}, target[:, 1:]


@pytest.fixture(scope="module")
def reversal():
    return reversal_of_real_words(TRAIN + HELD_OUT)


def held_out_token_accuracy(reversal, attention):
    """Teacher-forced token accuracy on the held-out windows after two epochs of Adam."""
    inputs, target = reversal
    keras.utils.set_random_seed(0)
    model = ks.models.rnn_seq2seq(
        VOCABULARY_SIZE,
        VOCABULARY_SIZE,
        embedding_dim=64,
        units=128,
        cell="gru",
        attention=attention,
        bidirectional_encoder=attention != "luong_dot",
    )
    model.compile(keras.optimizers.Adam(), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=0))
    model.fit({k: x[:TRAIN] for k, x in inputs.items()}, target[:TRAIN], batch_size=64, epochs=2, verbose=0)
    logits = model.predict({k: x[TRAIN:] for k, x in inputs.items()}, batch_size=HELD_OUT, verbose=0)
    predicted = np.argmax(keras.ops.convert_to_numpy(logits), -1)
    real = target[TRAIN:] > 0
    return float(np.mean(predicted[real] == target[TRAIN:][real]))


@pytest.fixture(scope="module")
def without_attention(reversal):
    return held_out_token_accuracy(reversal, None)


@pytest.mark.nightly  # two epochs of five models on 4,000 windows: about 4 minutes of CPU per backend
@pytest.mark.parametrize("attention", ["bahdanau", "luong", "luong_dot", "luong_concat"])
def test_attention_beats_no_attention_on_real_words(reversal, without_attention, attention):
    accuracy = held_out_token_accuracy(reversal, attention)
    assert accuracy >= without_attention + 0.10, (attention, accuracy, without_attention)

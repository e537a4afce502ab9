"""Recurrent task models (seed 004): seq2vec classifier and aligned seq2seq tagger.

Each builder returns a functional `keras.Model` on integer ids `(B, T)` with 0 as
padding; the mask from `Embedding(mask_zero=True)` flows through every recurrent
layer, so right-padded batches give the states of unpadded runs.
"""

import keras

from keras_seq import _validation as v
from keras_seq.layers.pooling import SequencePooling
from keras_seq.layers.recurrent import CoupledLSTMCell, PeepholeLSTMCell

CELLS = ("rnn", "gru", "lstm", "peephole_lstm", "coupled_lstm")


def recurrent_layer(cell, units, return_sequences=False, return_state=False, name=None):
    """The Keras recurrent layer for a `cell` name.

    * `rnn`: `keras.layers.SimpleRNN`, the Elman RNN of seed 000 eq. 3.1;
    * `gru`: `keras.layers.GRU(reset_after=True)`, exactly seed 000 eq. 3.3-3.6 (the
      reset gate multiplies `W_hn h + b_hn`), and the cuDNN-compatible form;
    * `lstm`: `keras.layers.LSTM` (seed 001/002 LSTM), cuDNN-compatible;
    * `peephole_lstm`, `coupled_lstm`: `keras.layers.RNN` over this package's cells.
    """
    v.check_choice("recurrent_layer", "cell", cell, CELLS)
    options = dict(return_sequences=return_sequences, return_state=return_state, name=name)
    if cell == "rnn":
        return keras.layers.SimpleRNN(units, **options)
    if cell == "gru":
        return keras.layers.GRU(units, reset_after=True, **options)
    if cell == "lstm":
        return keras.layers.LSTM(units, **options)
    cell_class = PeepholeLSTMCell if cell == "peephole_lstm" else CoupledLSTMCell
    return keras.layers.RNN(cell_class(units), **options)


def _check_common(builder, vocabulary_size, embedding_dim, units, cell, num_layers):
    v.check_positive_int(builder, "vocabulary_size", vocabulary_size)
    v.check_positive_int(builder, "embedding_dim", embedding_dim)
    v.check_positive_int(builder, "units", units)
    v.check_positive_int(builder, "num_layers", num_layers)
    v.check_choice(builder, "cell", cell, CELLS)


def _encode(token_ids, vocabulary_size, embedding_dim, units, cell, bidirectional, num_layers, last_sequences):
    """Embedding, then `num_layers` (bi)directional recurrent layers (a deep RNN, seed 004)."""
    h = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True, name="embedding")(token_ids)
    for index in range(num_layers):
        sequences = last_sequences or index < num_layers - 1
        layer = recurrent_layer(cell, units, return_sequences=sequences, name=f"{cell}_{index}")
        if bidirectional:
            layer = keras.layers.Bidirectional(layer, name=f"bidirectional_{index}")
        h = layer(h)
    return h


def rnn_classifier(
    vocabulary_size,
    num_classes,
    embedding_dim=128,
    units=128,
    cell="lstm",
    bidirectional=True,
    pooling="mean",
    num_layers=1,
):
    """Seq2vec: ids `(B, T)` -> class logits `(B, num_classes)` (seed 004).

    `h_t = [h_t->, h_t<-]` from a bidirectional RNN, `h_bar = mean_t h_t` over the
    real tokens (`pooling="mean"`) or the final states (`pooling="last"`: the
    forward state at the last real token and the backward state at the first), then
    `y_hat = softmax(W h_bar)` (the model returns the logits `W h_bar`).

    Args:
        vocabulary_size: ids in `[0, vocabulary_size)`, 0 = padding.
        num_classes: number of classes C.
        embedding_dim, units: embedding and recurrent widths.
        cell: one of `rnn`, `gru`, `lstm`, `peephole_lstm`, `coupled_lstm`.
        bidirectional: read the sequence both ways.
        pooling: `"mean"` or `"last"`.
        num_layers: stacked recurrent layers.
    """
    builder = "rnn_classifier"
    _check_common(builder, vocabulary_size, embedding_dim, units, cell, num_layers)
    v.check_positive_int(builder, "num_classes", num_classes)
    v.check_choice(builder, "pooling", pooling, ("mean", "last"))
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    h = _encode(token_ids, vocabulary_size, embedding_dim, units, cell, bidirectional, num_layers, pooling == "mean")
    if pooling == "mean":
        h = SequencePooling("mean", name="mean_pooling")(h)
    logits = keras.layers.Dense(num_classes, name="logits")(h)
    return keras.Model(token_ids, logits, name=builder)


def rnn_tagger(vocabulary_size, num_tags, embedding_dim=128, units=128, cell="lstm", bidirectional=True, num_layers=1):
    """Aligned seq2seq: ids `(B, T)` -> one tag's logits per token `(B, T, num_tags)` (seed 004).

    `p(y_t | x_{1:T})` from the (bidirectional) state at t. Arguments as
    `rnn_classifier`; the output keeps the padding mask, so Keras losses and
    metrics skip padded positions.
    """
    builder = "rnn_tagger"
    _check_common(builder, vocabulary_size, embedding_dim, units, cell, num_layers)
    v.check_positive_int(builder, "num_tags", num_tags)
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    h = _encode(token_ids, vocabulary_size, embedding_dim, units, cell, bidirectional, num_layers, True)
    logits = keras.layers.Dense(num_tags, name="logits")(h)
    return keras.Model(token_ids, logits, name=builder)

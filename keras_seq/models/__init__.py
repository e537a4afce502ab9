"""Builders of functional `keras.Model`s for the sequence task shapes."""

from keras_seq.models.recurrent import RNNLM, rnn_classifier, rnn_lm, rnn_tagger
from keras_seq.models.transformer import (
    TransformerLM,
    TransformerSeq2Seq,
    transformer_classifier,
    transformer_lm,
    transformer_seq2seq,
)

__all__ = [
    "RNNLM",
    "TransformerLM",
    "TransformerSeq2Seq",
    "rnn_classifier",
    "rnn_lm",
    "rnn_tagger",
    "transformer_classifier",
    "transformer_lm",
    "transformer_seq2seq",
]

"""Builders of functional `keras.Model`s for the sequence task shapes."""

from keras_seq.decoding_contract import Decodable
from keras_seq.models.keras_workarounds import ArrayFeedModel
from keras_seq.models.recurrent import RNNLM, RNNSeq2Seq, rnn_classifier, rnn_lm, rnn_seq2seq, rnn_tagger
from keras_seq.models.transformer import (
    TransformerLM,
    TransformerMLM,
    TransformerSeq2Seq,
    transformer_classifier,
    transformer_lm,
    transformer_mlm,
    transformer_seq2seq,
)

__all__ = [
    "ArrayFeedModel",
    "Decodable",
    "RNNLM",
    "RNNSeq2Seq",
    "TransformerLM",
    "TransformerMLM",
    "TransformerSeq2Seq",
    "rnn_classifier",
    "rnn_lm",
    "rnn_seq2seq",
    "rnn_tagger",
    "transformer_classifier",
    "transformer_lm",
    "transformer_mlm",
    "transformer_seq2seq",
]

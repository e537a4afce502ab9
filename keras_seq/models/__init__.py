"""Builders of functional `keras.Model`s for the sequence task shapes."""

from keras_seq.models.recurrent import rnn_classifier, rnn_tagger
from keras_seq.models.transformer import TransformerLM, transformer_lm

__all__ = ["TransformerLM", "rnn_classifier", "rnn_tagger", "transformer_lm"]

"""Builders of functional `keras.Model`s for the sequence task shapes."""

from keras_seq.models.recurrent import rnn_classifier, rnn_tagger

__all__ = ["rnn_classifier", "rnn_tagger"]

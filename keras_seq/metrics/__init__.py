"""Metrics: streaming Keras token metrics, corpus BLEU and corpus chrF."""

from keras_seq.metrics.bleu import corpus_bleu
from keras_seq.metrics.chrf import corpus_chrf
from keras_seq.metrics.token_metrics import MaskedAccuracy, Perplexity

__all__ = ["MaskedAccuracy", "Perplexity", "corpus_bleu", "corpus_chrf"]

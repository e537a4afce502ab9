"""Metrics: streaming Keras token metrics and corpus BLEU."""

from keras_seq.metrics.bleu import corpus_bleu
from keras_seq.metrics.token_metrics import MaskedAccuracy, Perplexity

__all__ = ["MaskedAccuracy", "Perplexity", "corpus_bleu"]

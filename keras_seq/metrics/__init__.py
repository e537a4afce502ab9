"""Metrics: streaming Keras token metrics, corpus BLEU, corpus chrF and the copy rate."""

from keras_seq.metrics.bleu import corpus_bleu
from keras_seq.metrics.chrf import corpus_chrf
from keras_seq.metrics.copy_rate import copy_rate, protected_tokens
from keras_seq.metrics.token_metrics import MaskedAccuracy, Perplexity

__all__ = ["MaskedAccuracy", "Perplexity", "copy_rate", "corpus_bleu", "corpus_chrf", "protected_tokens"]

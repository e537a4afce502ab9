"""Keras callbacks for any `fit`: train to a budget, validate by decoding, roll back a non-finite loss."""

from keras_seq.training.budget import TrainingBudget, WarmupLinearDecay
from keras_seq.training.non_finite import NonFiniteGuard
from keras_seq.training.validation import BestByValidation

__all__ = ["TrainingBudget", "WarmupLinearDecay", "BestByValidation", "NonFiniteGuard"]

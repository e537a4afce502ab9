"""Keras callbacks for training to a budget and validating by decoding, usable in any `fit`."""

from keras_seq.training.budget import TrainingBudget, WarmupLinearDecay
from keras_seq.training.validation import BestByValidation

__all__ = ["TrainingBudget", "WarmupLinearDecay", "BestByValidation"]

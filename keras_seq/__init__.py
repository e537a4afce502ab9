"""keras_seq: sequence-model layers, losses, metrics and models for Keras 3.

Runs unchanged on the TensorFlow, JAX and PyTorch backends (`KERAS_BACKEND`).

    import keras_seq as ks
    ks.layers.MultiHeadAttention(num_heads=4, key_dim=32)
"""

import importlib

from keras_seq import decoding, distribution, layers, losses, metrics, models, optimizers, schedules, training

__version__ = "0.1.0"
__all__ = [
    "decoding",
    "distribution",
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "schedules",
    "training",
]  # not `data`: see below


def __getattr__(name):
    # `keras_seq.data` builds tf.data pipelines and so imports TensorFlow: it loads on
    # first use (`ks.data`), sparing JAX and torch programs that never touch it (and
    # `from keras_seq import *`, which leaves it out).
    if name == "data":
        return importlib.import_module("keras_seq.data")
    raise AttributeError(f"module 'keras_seq' has no attribute {name!r}")

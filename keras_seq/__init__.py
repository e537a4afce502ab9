"""keras_seq: sequence-model layers, losses, metrics and models for Keras 3.

Runs unchanged on the TensorFlow, JAX and PyTorch backends (`KERAS_BACKEND`).

    import keras_seq as ks
    ks.layers.MultiHeadAttention(num_heads=4, key_dim=32)
"""

from keras_seq import layers, losses, metrics, models

__version__ = "0.1.0"
__all__ = ["layers", "losses", "metrics", "models"]

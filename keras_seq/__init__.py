"""keras_seq: sequence-model layers, losses, metrics and models for Keras 3.

Runs unchanged on the TensorFlow, JAX and PyTorch backends (`KERAS_BACKEND`).

    import keras_seq as ks
    ks.layers.MultiHeadAttention(num_heads=4, key_dim=32)
"""

from keras_seq import decoding, layers, losses, metrics, models, schedules

__version__ = "0.1.0"
__all__ = ["decoding", "layers", "losses", "metrics", "models", "schedules"]

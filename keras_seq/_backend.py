"""The one place where keras_seq reaches past `keras.ops` into backend specifics.

Everything else in the package is written with `keras.ops`; what lives here has no
backend-agnostic public equivalent in Keras 3:

* the Keras mask carried on a tensor (`_keras_mask`), which Keras' own layers and
  losses read and write through `keras.src.backend`;
* telling a concrete (eager) value from a traced one, so that range checks on ids
  and positions can raise a clear `ValueError` eagerly and stay out of compiled
  graphs, where no Python exception can be raised.
"""

import numpy as np
import keras
from keras.src.backend.common import masking as _masking


def get_keras_mask(x):
    """The mask Keras attached to `x`, or None."""
    return _masking.get_keras_mask(x)


def set_keras_mask(x, mask):
    """Attach `mask` to `x` the way Keras layers and losses expect it."""
    _masking.set_keras_mask(x, mask)


def concrete_value(x):
    """`x` as a NumPy array if its value is known now, else None (traced/symbolic)."""
    if x is None:
        return None
    if isinstance(x, (int, float, np.integer, np.floating, np.ndarray)):
        return np.asarray(x)
    if isinstance(x, keras.KerasTensor):
        return None
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly() or not hasattr(x, "numpy"):
            return None
        return x.numpy()
    if backend == "jax":
        import jax

        if isinstance(x, jax.core.Tracer):
            return None
        return np.asarray(x)
    if backend == "torch":
        import torch

        if torch.compiler.is_compiling():
            return None
        return x.detach().cpu().numpy()
    return None

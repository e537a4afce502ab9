"""Position-wise products `(..., D) -> (..., U)` computed as one 2-D matrix product over all positions.

XLA on the CPU under JAX lays out the gradient of a `(B, T, D) x (D, U)` product
badly: for the kernel's gradient it copies the whole `(B, T, U)` output gradient
transposed before a slower 3-D contraction. Folding `B` and `T` into one axis first
gives it a plain `(B*T, D) x (D, U)` product and its two plain gradients.
TensorFlow and eager torch fold the axes themselves; `torch.compile` gains too
(the step times are in benchmarks/RESULTS.md).
"""

import keras
from keras import ops

from keras_seq import backend


def over_positions(product, x):
    """`product` of the 2-D `(N, D)` rows of `x` `(..., D)`, reshaped back to `(..., U)`."""
    if len(x.shape) <= 2:
        return product(x)
    leading = ops.shape(x)[:-1]
    features = x.shape[-1] if x.shape[-1] is not None else ops.shape(x)[-1]  # unknown in some TF graphs
    y = product(ops.reshape(x, (-1, features)))
    return ops.reshape(y, (*leading, y.shape[-1]))


@keras.saving.register_keras_serializable(package="keras_seq")
class PositionwiseDense(keras.layers.Dense):
    """`keras.layers.Dense` whose inputs' leading axes are folded into one before the product.

    Same weights, configuration and outputs as `keras.layers.Dense`; only the shape
    of the product differs (see the module docstring for why and by how much).
    """

    def call(self, inputs, training=None):
        return backend.dense(
            self,
            inputs,
            lambda: over_positions(lambda rows: super(PositionwiseDense, self).call(rows, training=training), inputs),
        )


@keras.saving.register_keras_serializable(package="keras_seq")
class ConcatenateCondition(keras.layers.Layer):
    """`[x_t; c]` at every step: a fixed vector `c (B, C)` joined to `x (B, T, E)`; keeps x's mask."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, x, condition):
        repeated = ops.repeat(ops.expand_dims(ops.cast(condition, x.dtype), 1), ops.shape(x)[1], axis=1)
        return ops.concatenate([x, repeated], axis=-1)

    def compute_mask(self, x, mask=None):
        return mask

    def compute_output_shape(self, x_shape, condition_shape):
        return (*x_shape[:-1], x_shape[-1] + condition_shape[-1])

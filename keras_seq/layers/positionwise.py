"""Position-wise products `(..., D) -> (..., U)` computed as one 2-D matrix product over all positions.

XLA on the CPU under JAX lays out the gradient of a `(B, T, D) x (D, U)` product
badly: for the kernel's gradient it copies the `(B, T, U)` output gradient
transposed (131 MB a step for an 8000-word head at B=32, T=128) before a slower
3-D contraction. Folding `B` and `T` into one axis first gives it a plain
`(B*T, D) x (D, U)` product and its two plain gradients. Measured on a
`transformer_lm` training step (V=8000, 4 blocks, D=256, B=32, T=128; JAX, CPU):
1064 ms with `keras.layers.Dense` heads and feed-forward layers, 835 ms with the
head folded, 784 ms with the feed-forward layers folded too. TensorFlow and eager
torch fold the axes themselves (no change there); under `torch.compile` the step
went from 752 to 632 ms (benchmarks/RESULTS.md, reading of 2026-11-23 23:26).
"""

import keras
from keras import ops


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
        return over_positions(lambda rows: super(PositionwiseDense, self).call(rows, training=training), inputs)

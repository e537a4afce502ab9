"""The id-0 padding mask of a language model, attached to its logits rather than its inputs."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_seq")
class PaddingMaskFromIds(keras.layers.Layer):
    """Returns `x` unchanged, carrying the Keras mask `token_ids != 0` (losses and metrics skip padding).

    For models whose padding is trailing and whose positions only look back (a
    recurrent or causal language model): the logits of real tokens do not depend on
    the padding after them, so the network itself runs unmasked and keeps its fast
    kernels (cuDNN recurrences; causal-only flash attention), and the mask is
    attached here, at the output, where losses and metrics read it.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, token_ids, x):
        return x

    def compute_mask(self, token_ids, mask=None):
        return ops.not_equal(token_ids, 0)

    def compute_output_shape(self, token_ids_shape, x_shape):
        return x_shape

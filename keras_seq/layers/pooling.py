"""Mask-aware pooling of a sequence into one vector (seq2vec heads)."""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq import backend

POOLING_MODES = ("mean", "first", "last")


@keras.saving.register_keras_serializable(package="keras_seq")
class SequencePooling(keras.layers.Layer):
    """Pools `(B, T, D)` into `(B, D)` over the unmasked steps.

    * `mean`: `h_bar = (1/T) sum_t h_t` over real steps (Murphy, 2022, eq. 15.10, the bidirectional
      sentiment classifier); an all-padding sequence pools to zeros, where
      `keras.layers.GlobalAveragePooling1D` divides 0 by 0 and returns NaN.
    * `first`: the first step (a BERT-style `[CLS]` token).
    * `last`: the last real step of each sequence (right padding assumed).

    Args:
        mode: `"mean"`, `"first"` or `"last"`.

    Call arguments:
        inputs: `(B, T, D)`.
        mask: `(B, T)`, True at real steps; defaults to the inputs' Keras mask.
    """

    def __init__(self, mode="mean", **kwargs):
        super().__init__(**kwargs)
        self.mode = v.check_choice(v.owner_name(self), "mode", mode, POOLING_MODES)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        owner = v.owner_name(self)
        batch, length, _ = v.check_rank(owner, "inputs", inputs, 3)
        mask = backend.get_keras_mask(inputs) if mask is None else mask
        v.check_shape(owner, "mask", mask, (batch, length))
        if self.mode == "first":
            return inputs[:, 0]
        if mask is None:
            mask = ops.ones(ops.shape(inputs)[:2], "bool")
        weights = ops.cast(mask, inputs.dtype)
        if self.mode == "mean":
            total = ops.sum(inputs * weights[..., None], axis=1)
            count = ops.sum(weights, axis=1, keepdims=True)
            return total / ops.maximum(count, ops.cast(1, count.dtype))
        last = ops.maximum(ops.sum(ops.cast(mask, "int32"), axis=1) - 1, 0)
        return ops.take_along_axis(inputs, last[:, None, None], axis=1)[:, 0]

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}

"""Attention masks and the masked softmax shared by every attention layer.

Masks are boolean, True where attending is allowed. A query row with no allowed key
gets all-zero weights (and so a zero context) rather than the NaN of a softmax over
nothing or the uniform average that a large-negative additive mask produces.
"""

import keras
from keras import ops

# Finite, so a fully masked row stays NaN-free in float16 and bfloat16 too.
MASKED_SCORE = -1e9


def causal_mask(query_length, key_length, query_offset=0):
    """`(Tq, Tk)` mask letting query i (at position offset+i) see keys 0..offset+i."""
    query_positions = ops.arange(query_length) + ops.cast(query_offset, "int32")
    key_positions = ops.arange(key_length)
    return ops.expand_dims(query_positions, 1) >= ops.expand_dims(key_positions, 0)


def merge_masks(key_padding_mask=None, attention_mask=None, causal=None):
    """AND of the masks given, as a boolean `(B or 1, H or 1, Tq, Tk)` tensor, or None.

    Args:
        key_padding_mask: `(B, Tk)`, True at real (non-padding) keys.
        attention_mask: `(Tq, Tk)`, `(B, Tq, Tk)` or `(B, H, Tq, Tk)` (one per head).
        causal: `(Tq, Tk)` from `causal_mask`.
    """
    merged = None
    for mask in (
        None if key_padding_mask is None else key_padding_mask[:, None, None, :],
        None if attention_mask is None else _with_head_axis(attention_mask),
        None if causal is None else causal[None, None],
    ):
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def _with_head_axis(attention_mask):
    """`(Tq, Tk)` -> `(1, 1, Tq, Tk)`, `(B, Tq, Tk)` -> `(B, 1, Tq, Tk)`; `(B, H, Tq, Tk)` as it is."""
    rank = len(attention_mask.shape)
    if rank == 2:
        return attention_mask[None, None]
    return ops.expand_dims(attention_mask, 1) if rank == 3 else attention_mask


def rows_with_keys(mask):
    """`(..., Tq, 1)` True where a query row may attend to at least one key."""
    return ops.any(mask, axis=-1, keepdims=True)


def masked_softmax(scores, mask=None, rows_may_be_empty=True, axis=-1):
    """Softmax over the keys' `axis` (the last by default) restricted to `mask`, in float32.

    Rows whose mask is all False come out as zeros, never NaN; pass
    `rows_may_be_empty=False` when every row has a key (e.g. a causal mask alone)
    to skip zeroing them.
    """
    scores = ops.cast(scores, "float32")
    if mask is not None:
        mask = ops.cast(mask, "bool")
        scores = ops.where(mask, scores, MASKED_SCORE)
    weights = _softmax(scores, axis)
    return ops.where(mask, weights, 0.0) if mask is not None and rows_may_be_empty else weights


def _softmax(scores, axis):
    """`ops.softmax`, without Keras' warning when the axis holds a single key (one token, one source id)."""
    if scores.shape[axis] == 1:
        return ops.exp(scores - scores)  # softmax of one score: 1, NaN for a NaN or infinite score
    return ops.softmax(scores, axis=axis)


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

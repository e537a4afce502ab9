"""A layer's own sublayers, called from inside its `call`, and layers called by a decoding step."""

import keras

from keras_seq import _backend


def call_sublayer(sublayer, *args, **kwargs):
    """`sublayer.call(*args, **kwargs)`: the sublayer's computation without `Layer.__call__`'s bookkeeping.

    For a sublayer that its owner built and calls from inside its own `call`. There, the work
    `Layer.__call__` does on every call (converting and casting inputs, resolving `training`
    and masks, checking the build, opening name and autocast scopes) is already done by the
    owner's own `__call__`, or not needed; on eager torch it costs as much as a small matrix
    product. The caller passes `training` itself, and masks as arguments. A quantized
    sublayer, or one built under rematerialization, goes through `__call__`, which
    dispatches those.
    """
    if sublayer.dtype_policy.quantization_mode is not None or getattr(sublayer, "_remat_mode", None) is not None:
        return sublayer(*args, **kwargs)
    return sublayer.call(*args, **kwargs)


def call_in_step(layer, inputs, **kwargs):
    """`layer(inputs, **kwargs)` for a built layer that a decoding step calls, outside any `__call__`.

    On eager torch, where a decoding step pays `Layer.__call__`'s bookkeeping for every layer
    and every token, `call_sublayer` when nothing of that bookkeeping is needed: the layer
    computes in the dtype it keeps its variables in (no autocast scope to open) and `inputs`
    is an integer tensor or already in that dtype (no cast). Masks are not attached: a step's
    keys come from the cache, whose own positions mask them. Elsewhere the call is traced
    once per decoder, and goes through `__call__`.
    """
    policy = layer.dtype_policy
    dtype = keras.backend.standardize_dtype(inputs.dtype)
    if (
        _backend.eager_ops()
        and policy.compute_dtype == policy.variable_dtype
        and (dtype == policy.compute_dtype or "int" in dtype)
    ):
        return call_sublayer(layer, inputs, **kwargs)
    return layer(inputs, **kwargs)

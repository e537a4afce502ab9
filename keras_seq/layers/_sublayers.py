"""A layer's own sublayers, called from inside its `call`, and layers called by a decoding step."""

from keras_seq import backend
from keras_seq.backend import keras_internals


def call_sublayer(sublayer, *args, **kwargs):
    """`sublayer.call(*args, **kwargs)`: the sublayer's computation without `Layer.__call__`'s bookkeeping.

    For a sublayer that its owner built and calls from inside its own `call`. There, the work
    `Layer.__call__` does on every call (converting and casting inputs, resolving `training`
    and masks, checking the build, opening name and autocast scopes) is already done by the
    owner's own `__call__`, or not needed; on eager torch it costs as much as a small matrix
    product. The caller passes `training` itself, and masks as arguments.
    """
    return keras_internals.call_without_bookkeeping(sublayer, *args, **kwargs)


def call_in_step(layer, inputs, **kwargs):
    """`layer(inputs, **kwargs)` for a built layer that a decoding step calls, outside any `__call__`
    (`keras_seq.backend.call_in_step`: on eager torch without the bookkeeping it does not need)."""
    return backend.call_in_step(layer, inputs, **kwargs)

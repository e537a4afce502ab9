"""A layer's own sublayers, called from inside its `call`."""


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

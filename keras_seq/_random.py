"""Counter-based uniform noise in `keras.ops`: the same draws on every backend.

Sampling in `generate` needs noise fixed by `(seed, step)` inside a compiled loop.
Keras' random ops take an int or a `SeedGenerator`, neither of which advances there,
and each backend's own stateless generator draws different numbers for one seed. So
every element hashes its own index with a key made from the seed and the step: the
"lowbias32" integer mixer (Wellons, 2020; xor-shift-multiply rounds on 32 bits),
written on int32 with wrapping products and logical shifts, which every backend
computes alike, compiled or not.
"""

from keras import ops


def _as_int32(constant):
    """A 32-bit pattern as the int32 with the same bits."""
    return constant - (1 << 32) if constant >= 1 << 31 else constant


_ROUND_1, _ROUND_2, _STEP_OFFSET = _as_int32(0x7FEB352D), _as_int32(0x846CA68B), _as_int32(0x9E3779B9)


def _logical_right_shift(x, bits):
    return ops.bitwise_and(ops.right_shift(x, bits), (1 << (32 - bits)) - 1)


def _mix(x):
    """lowbias32 on int32 bit patterns: each output bit depends on every input bit."""
    x = ops.bitwise_xor(x, _logical_right_shift(x, 16))
    x = ops.multiply(x, _ROUND_1)
    x = ops.bitwise_xor(x, _logical_right_shift(x, 15))
    x = ops.multiply(x, _ROUND_2)
    return ops.bitwise_xor(x, _logical_right_shift(x, 16))


def uniform(shape, seed, step):
    """float32 noise of `shape` in (0, 1), fixed by the int32 `seed` and `step`.

    `seed` and `step` may be Python ints or traced int32 scalars. Values are
    `(k + 0.5) / 2**23` for the top 23 bits `k` of each element's hash, exact in
    float32, so neither 0 nor 1 comes out (the Gumbel trick takes `log(-log(u))`).
    """
    key = _key(seed, step)
    index = 0  # each element's row-major position; sizes may be traced (an unknown batch)
    for axis, size in enumerate(shape):
        positions = ops.reshape(ops.arange(size, dtype="int32"), [-1 if a == axis else 1 for a in range(len(shape))])
        index = index * ops.cast(size, "int32") + positions
    bits = _mix(ops.bitwise_xor(_mix(index + key), key))
    return (ops.cast(_logical_right_shift(bits, 9), "float32") + 0.5) / float(1 << 23)


def _key(seed, step):
    return _mix(ops.bitwise_xor(_mix(ops.cast(step, "int32") + _STEP_OFFSET), ops.cast(seed, "int32")))


def row_keys(ids, copies):
    """int32 `(B * copies,)`: a key per row of a decoding, from its input ids `(B, L)` and its copy (`copies` rows
    per input row, one after another): each id hashed with its position, padding (id 0) left out, so a row's key
    is the same whatever its padded width and whatever rows lie beside it."""
    ids = ops.cast(ids, "int32")
    positions = ops.arange(ops.shape(ids)[1], dtype="int32")[None]
    hashed = ops.where(ids != 0, _mix(ops.bitwise_xor(_mix(positions + _STEP_OFFSET), ids)), 0)
    per_input = _mix(ops.cast(ops.sum(hashed, axis=1), "int32"))  # int32 sums wrap alike on every backend
    copy = _mix(ops.arange(copies, dtype="int32") + _ROUND_2)
    return ops.reshape(ops.bitwise_xor(per_input[:, None], copy[None]), (-1,))


def uniform_by_row(shape, seed, step, keys):
    """float32 noise `(R, V)` in (0, 1) as `uniform` draws it, fixed by `seed`, `step` and each row's int32 key
    (`keys` `(R,)`, from `row_keys`) instead of the row's place: a sentence samples alike alone or in any batch."""
    row = _mix(ops.bitwise_xor(ops.cast(keys, "int32"), _key(seed, step)))[:, None]
    index = ops.arange(shape[1], dtype="int32")[None]
    bits = _mix(ops.bitwise_xor(_mix(index + row), row))
    return (ops.cast(_logical_right_shift(bits, 9), "float32") + 0.5) / float(1 << 23)

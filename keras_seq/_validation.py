"""Early, explicit input checks shared by every layer.

Each check raises a `ValueError` that names the layer, the argument, what came and
what was expected, so that bad input fails at the call site rather than deep inside
a backend kernel (or, worse, as a silent NaN).
"""

import keras
import numpy as np

from keras_seq import backend


def fail(owner, argument, expected, got):
    raise ValueError(f"{owner}: `{argument}` expected {expected}, got {got}.")


def owner_name(layer):
    return f"{type(layer).__name__} '{layer.name}'"


def is_integer(value):
    """A Python or NumPy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value):
    """A Python or NumPy real number, not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def is_known_zero(value):
    """Whether `value` is a number known to be 0 while tracing: a Python or NumPy 0 (a tensor, a setting given at
    run time, never is), so the work it would switch off can be left out of the program."""
    return is_number(value) and value == 0


def check_positive_int(owner, argument, value):
    if not is_integer(value) or value < 1:
        fail(owner, argument, "a positive integer", repr(value))
    return int(value)


def check_positive_number(owner, argument, value):
    if not is_number(value) or value <= 0:
        fail(owner, argument, "a positive number", repr(value))
    return float(value)


def check_probability(owner, argument, value):
    if not is_number(value) or not 0 <= value < 1:
        fail(owner, argument, "a number in [0, 1)", repr(value))
    return float(value)


def check_optional_id(owner, argument, value):
    if value is not None and not is_integer(value):
        fail(owner, argument, "an integer id or None", repr(value))
    return None if value is None else int(value)


def check_choice(owner, argument, value, choices):
    if value not in choices:
        fail(owner, argument, f"one of {list(choices)}", repr(value))
    return value


def shape_of(x):
    return tuple(x.shape)


def check_rank(owner, argument, x, ranks):
    ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    shape = shape_of(x)
    if len(shape) not in ranks:
        wanted = " or ".join(f"rank {r}" for r in ranks)
        fail(owner, argument, f"a tensor of {wanted}", f"shape {shape}")
    return shape


def check_floating(owner, argument, x):
    dtype = keras.backend.standardize_dtype(x.dtype)
    if "float" not in dtype:
        fail(owner, argument, "a floating-point tensor", f"dtype {dtype}")


def check_integer_ids(owner, argument, x):
    dtype = keras.backend.standardize_dtype(x.dtype)
    if "int" not in dtype:
        fail(owner, argument, "integer token ids", f"dtype {dtype}")


def check_same_size(owner, argument, size, expected_size, what):
    if size is not None and expected_size is not None and size != expected_size:
        fail(owner, argument, f"{what} {expected_size}", size)


def check_shape(owner, argument, tensor, expected_shape):
    """`tensor` (a mask, a cache, targets; None passes) must match `expected_shape` wherever both sizes are known."""
    if tensor is None:
        return
    shape = shape_of(tensor)
    if len(shape) != len(expected_shape) or any(
        a is not None and b is not None and a != b for a, b in zip(shape, expected_shape)
    ):
        any_size = " (None: any size)" if None in expected_shape else ""
        fail(owner, argument, f"shape {tuple(expected_shape)}{any_size}", f"shape {shape}")


def check_ids_below(owner, argument, ids, limit):
    """Ids must lie in [0, limit); checked whenever their values are known (eagerly)."""
    values = backend.concrete_value(ids)
    if values is None or values.size == 0:
        return
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= limit:
        fail(owner, argument, f"ids in [0, {limit})", f"ids in [{low}, {high}]")


def check_positions(owner, start_index, length, limit):
    """Positions `start_index .. start_index + length - 1` must lie below `limit`."""
    # A Python int is taken as is: through NumPy, torch.compile would break its graph here.
    start = start_index if isinstance(start_index, int) else backend.concrete_value(start_index)
    if start is None or length is None:
        return
    start = int(start)
    if start < 0 or start + length > limit:
        fail(
            owner,
            "start_index",
            f"positions within sequence_length={limit}",
            f"positions {start}..{start + length - 1}",
        )

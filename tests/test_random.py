import numpy as np
import pytest
from layer_checks import to_numpy

from keras_seq import _random


def lowbias32(x):
    """The mixer on uint32 in NumPy (wrapping products), as Wellons (2020) writes it."""
    x = np.asarray(x, np.uint32)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x7FEB352D)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(0x846CA68B)
        return x ^ (x >> np.uint32(16))


def numpy_uniform(shape, seed, step):
    with np.errstate(over="ignore"):
        key = lowbias32(lowbias32(np.uint32(step) + np.uint32(0x9E3779B9)) ^ np.uint32(seed & 0xFFFFFFFF))
        index = np.arange(np.prod(shape), dtype=np.uint32).reshape(shape)
        bits = lowbias32(lowbias32(index + key) ^ key)
    return ((bits >> np.uint32(9)).astype(np.float64) + 0.5) / 2**23


@pytest.mark.parametrize("seed, step", [(0, 0), (123, 5), (-(2**31), 7), (2**31 - 1, 2**20)])
def test_uniform_is_the_uint32_hash_written_out_in_numpy(seed, step):
    """int32 wrapping products and masked shifts give the unsigned hash, bit for bit, on every backend."""
    np.testing.assert_array_equal(
        to_numpy(_random.uniform((3, 1000), seed, step)), numpy_uniform((3, 1000), seed, step)
    )


def test_uniform_draws_look_uniform_and_independent():
    u = to_numpy(_random.uniform((64, 4096), 7, 3)).ravel()
    assert 0 < u.min() and u.max() < 1
    assert to_numpy(_random.uniform((1,), 0, 0)).dtype == np.float32
    assert abs(u.mean() - 0.5) < 0.003 and abs(u.var() - 1 / 12) < 0.002
    counts = np.bincount((u * 20).astype(int), minlength=20)
    expected = u.size / 20
    assert np.sum((counts - expected) ** 2 / expected) < 45  # chi-square, 19 degrees of freedom: p < 0.001
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01  # neighbouring elements
    for other in (_random.uniform((64, 4096), 7, 4), _random.uniform((64, 4096), 8, 3)):  # next step, next seed
        assert abs(np.corrcoef(u, to_numpy(other).ravel())[0, 1]) < 0.01


def numpy_row_keys(ids, copies):
    """`_random.row_keys` written out on uint32: each nonzero id hashed with its position, summed (wrapping), mixed,
    then one key per copy."""
    ids = np.asarray(ids, np.int64).astype(np.uint32)
    with np.errstate(over="ignore"):
        positions = np.arange(ids.shape[1], dtype=np.uint32)[None] + np.uint32(0x9E3779B9)
        hashed = np.where(ids != 0, lowbias32(lowbias32(positions) ^ ids), np.uint32(0)).astype(np.uint32)
        per_input = lowbias32(hashed.sum(axis=1, dtype=np.uint32))
        copy = lowbias32(np.arange(copies, dtype=np.uint32) + np.uint32(0x846CA68B))
    return (per_input[:, None] ^ copy[None]).reshape(-1)


def numpy_uniform_by_row(shape, seed, step, keys):
    with np.errstate(over="ignore"):
        key = lowbias32(lowbias32(np.uint32(step) + np.uint32(0x9E3779B9)) ^ np.uint32(seed & 0xFFFFFFFF))
        row = lowbias32(np.asarray(keys, np.uint32) ^ key)[:, None]
        index = np.arange(shape[1], dtype=np.uint32)[None]
        bits = lowbias32(lowbias32(index + row) ^ row)
    return ((bits >> np.uint32(9)).astype(np.float64) + 0.5) / 2**23


def test_row_keys_and_their_noise_are_the_uint32_hash_written_out_in_numpy():
    ids = np.array([[5, 9, 0, 0], [5, 9, 0, 0], [9, 5, 0, 0], [7, 0, 0, 0]], "int32")
    keys = to_numpy(_random.row_keys(ids, 3))
    np.testing.assert_array_equal(keys.astype(np.uint32), numpy_row_keys(ids, 3))
    np.testing.assert_array_equal(keys[:3], keys[3:6])  # the same ids: the same keys
    assert len(set(keys[:3])) == 3 and keys[0] != keys[6]  # each copy, and the order of the ids, counts
    np.testing.assert_array_equal(to_numpy(_random.row_keys(ids[:, :2], 3)), keys)  # padding counts for nothing
    noise = to_numpy(_random.uniform_by_row((12, 50), 11, 4, keys))
    np.testing.assert_array_equal(noise, numpy_uniform_by_row((12, 50), 11, 4, keys.astype(np.uint32)))

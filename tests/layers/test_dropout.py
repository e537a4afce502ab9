import keras
import numpy as np
import pytest
from layer_checks import BACKEND, assert_config_round_trip, to_numpy

import keras_seq as ks

jax_only = pytest.mark.skipif(BACKEND != "jax", reason="the fused Threefry replaces jax.random's draws only")


@pytest.mark.parametrize("rate", [0.1, 0.5])
@pytest.mark.parametrize("noise_shape", [None, (None, 1, None)])
def test_equals_keras_dropout_for_the_same_seed(rng, rate, noise_shape):
    """Call after call, the same outputs as `keras.layers.Dropout` seeded alike, on every backend."""
    x = rng.normal(size=(3, 5, 64)).astype("float32")
    ours = ks.layers.Dropout(rate, noise_shape=noise_shape, seed=7)
    theirs = keras.layers.Dropout(rate, noise_shape=noise_shape, seed=7)
    kept = []
    for _ in range(3):
        out = to_numpy(ours(x, training=True))
        np.testing.assert_array_equal(out, to_numpy(theirs(x, training=True)))
        np.testing.assert_allclose(out[out != 0], (x / (1 - rate))[out != 0], rtol=1e-6)
        kept.append(out != 0)
    assert not np.array_equal(kept[0], kept[1])  # each call draws a new mask
    if noise_shape is not None:
        assert np.all(kept[0] == kept[0][:, :1])  # one mask for every position
    np.testing.assert_array_equal(to_numpy(ours(x, training=False)), x)
    assert_config_round_trip(ours)


@pytest.mark.parametrize("noise_shape", [None, (None, 1, None)])
def test_a_training_step_equals_keras_dropout_seeded_alike(rng, noise_shape):
    """One SGD step through `Dense -> Dropout -> Dense`: the loss and every weight as with `keras.layers.Dropout`
    seeded alike, so the gradient passes the kept units, scaled, and no others (under JAX through the fused
    Threefry; a seeded layer elsewhere is Keras' own)."""
    x, y = rng.normal(size=(4, 5, 8)).astype("float32"), rng.normal(size=(4, 5, 1)).astype("float32")

    def regression(dropout):
        inputs = keras.Input((5, 8))
        hidden = dropout(0.3, noise_shape=noise_shape, seed=7)(keras.layers.Dense(32, name="first")(inputs))
        model = keras.Model(inputs, keras.layers.Dense(1, name="second")(hidden))
        model.compile(keras.optimizers.SGD(0.1), "mse")
        return model

    ours, theirs = regression(ks.layers.Dropout), regression(keras.layers.Dropout)
    theirs.set_weights(ours.get_weights())
    before = [to_numpy(w) for w in ours.trainable_weights]
    assert float(ours.train_on_batch(x, y)) == pytest.approx(float(theirs.train_on_batch(x, y)), rel=1e-6)
    for start, mine, keras_weight in zip(before, ours.trainable_weights, theirs.trainable_weights):
        np.testing.assert_allclose(to_numpy(mine), to_numpy(keras_weight), rtol=1e-5, atol=1e-7)
        assert not np.allclose(to_numpy(mine), start)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_and_non_finite_inputs_equal_keras_dropout(rng, dtype):
    """In 16-bit floats, and with NaN and inf among the inputs, the outputs are Keras' own: a dropped unit is 0."""
    x = rng.normal(size=(3, 5, 64)).astype("float32")
    x[0, 0] = np.resize([np.nan, np.inf, -np.inf], 64)
    x = keras.ops.cast(x, dtype)
    ours = ks.layers.Dropout(0.2, seed=5, dtype=dtype)(x, training=True)
    theirs = keras.layers.Dropout(0.2, seed=5, dtype=dtype)(x, training=True)
    assert keras.backend.standardize_dtype(ours.dtype) == dtype
    ours = to_numpy(keras.ops.cast(ours, "float32"))
    np.testing.assert_array_equal(ours, to_numpy(keras.ops.cast(theirs, "float32")))
    assert (ours[0, 0] == 0).any() and not np.isfinite(ours[0, 0]).all()  # non-finite units both dropped and kept


def test_rate_zero_and_one(rng):
    x = rng.normal(size=(2, 8)).astype("float32")
    np.testing.assert_array_equal(to_numpy(ks.layers.Dropout(0.0)(x, training=True)), x)
    np.testing.assert_array_equal(to_numpy(ks.layers.Dropout(1.0)(x, training=True)), np.zeros_like(x))


def test_rate_is_the_share_dropped(rng):
    """Over 200,000 units the share dropped is the rate within 4 standard deviations."""
    out = to_numpy(ks.layers.Dropout(0.1, seed=3)(np.ones((200, 1000), "float32"), training=True))
    assert abs(np.mean(out == 0) - 0.1) < 4 * np.sqrt(0.1 * 0.9 / out.size)


def numpy_threefry_2x32(key, counter):
    """Threefry-2x32 with 20 rounds (Salmon et al., 2011), one counter pair at a time, in Python integers."""
    mask = 0xFFFFFFFF
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    schedule = (key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA)
    x0, x1 = (counter[0] + schedule[0]) & mask, (counter[1] + schedule[1]) & mask
    for injection in range(1, 6):
        for distance in rotations[(injection - 1) % 2]:
            x0 = (x0 + x1) & mask
            x1 = (((x1 << distance) | (x1 >> (32 - distance))) & mask) ^ x0
        x0 = (x0 + schedule[injection % 3]) & mask
        x1 = (x1 + schedule[(injection + 1) % 3] + injection) & mask
    return x0, x1


@pytest.mark.parametrize(
    "key, counter, expected",
    [  # the known-answer vectors of Salmon et al.'s Random123 library for threefry2x32_20
        ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ],
)
def test_numpy_threefry_gives_the_published_answers(key, counter, expected):
    assert numpy_threefry_2x32(key, counter) == expected


@jax_only
@pytest.mark.parametrize("key", [(0, 0), (12345, 678), (0xFFFFFFFF, 0x80000000)])
@pytest.mark.parametrize("shape", [(7,), (3, 5, 11)])
def test_threefry_bits_equal_jax_random_bits(key, shape):
    import jax

    from keras_seq.backend import threefry

    key = np.array(key, np.uint32)
    bits = np.asarray(threefry.bits(key, shape))
    np.testing.assert_array_equal(bits, np.asarray(jax.random.bits(key, shape)))
    first = numpy_threefry_2x32(tuple(int(k) for k in key), (0, 0))
    assert int(bits.flat[0]) == first[0] ^ first[1]
    high, low = divmod(int(np.prod(shape)) - 1, 1 << 32)
    last = numpy_threefry_2x32(tuple(int(k) for k in key), (high, low))
    assert int(bits.flat[-1]) == last[0] ^ last[1]
    np.testing.assert_array_equal(
        np.asarray(threefry.bernoulli(key, 0.9, shape)), np.asarray(jax.random.bernoulli(key, 0.9, shape))
    )


@jax_only
def test_compiled_dropout_has_no_loop():
    """Under `jax.jit` the mask is straight-line code, where `jax.random` on a CPU runs a `while` over whole arrays."""
    import jax

    def compiled_text(layer):
        layer.build((4, 16))
        state = [v.value for v in layer.non_trainable_variables]

        def step(state, x):
            return layer.stateless_call([], state, x, training=True)[0]

        return jax.jit(step).lower(state, np.ones((4, 16), "float32")).compile().as_text()

    assert " while(" not in compiled_text(ks.layers.Dropout(0.1, seed=1))
    if jax.default_backend() == "cpu":
        assert " while(" in compiled_text(keras.layers.Dropout(0.1, seed=1))


@pytest.mark.skipif(BACKEND != "torch", reason="the uniform draw replaces torch's unseeded dropout only")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_unseeded_torch_dropout_keeps_where_a_uniform_draw_reaches_the_rate(rng, dtype):
    """Without a seed, on a CPU: kept where `torch.rand >= rate` (float32 draws from the global generator), scaled
    by `1 / (1 - rate)`; the gradient is that mask, scaled alike."""
    import torch

    rate, x = 0.2, torch.tensor(rng.normal(size=(4, 6, 32)).astype("float32")).to(getattr(torch, dtype))
    layer = ks.layers.Dropout(rate, dtype=dtype)
    torch.manual_seed(11)
    uniforms = torch.rand(x.shape, dtype=torch.float32)
    torch.manual_seed(11)
    inputs = x.clone().requires_grad_()
    out = layer(inputs, training=True)
    mask = (uniforms.numpy() >= rate).astype("float32")
    assert out.dtype == x.dtype
    np.testing.assert_allclose(
        out.detach().float().numpy(),
        (x.float().numpy() * mask / (1 - rate)),
        rtol=1e-2 if dtype == "bfloat16" else 1e-6,
    )
    out.float().sum().backward()
    np.testing.assert_allclose(
        inputs.grad.float().numpy(), mask / (1 - rate), rtol=1e-2 if dtype == "bfloat16" else 1e-6
    )
    torch.manual_seed(11)
    np.testing.assert_array_equal(layer(x, training=True).float().numpy(), out.detach().float().numpy())  # reproducible

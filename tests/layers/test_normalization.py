import keras
import numpy as np
import pytest
from layer_checks import BACKEND, assert_close, assert_config_round_trip, check_functional_model, to_numpy

import keras_seq as ks


def numpy_layer_norm(x, gamma, beta, epsilon):
    """Ba et al. (2016), sec. 3, over the last axis, with the epsilon inside the square root."""
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(variance + epsilon) + beta


def pair(rng, width, **kwargs):
    """Our layer and Keras' with the same random gamma and beta."""
    ours, theirs = ks.layers.LayerNormalization(**kwargs), keras.layers.LayerNormalization(**kwargs)
    for layer in (ours, theirs):
        layer.build((None, width))
    weights = [rng.normal(size=w.shape).astype("float32") for w in theirs.get_weights()]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    return ours, theirs


@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 6)])
def test_equals_keras_layer_normalization_and_the_formula(rng, shape):
    x = (rng.normal(size=shape) * 3 + 1).astype("float32")
    ours, theirs = pair(rng, shape[-1], epsilon=1e-5)
    assert_close(ours(x), theirs(x), atol=1e-6)
    gamma, beta = (to_numpy(w) for w in (ours.gamma, ours.beta))
    assert_close(ours(x), numpy_layer_norm(x.astype("float64"), gamma, beta, 1e-5), atol=1e-5)


def gradients_of_one_step(layer, x, projection):
    """`(dL/dx, dL/dgamma, dL/dbeta)` of `L = mean((LayerNorm(x) @ projection)^2)`, as one `fit` step computes them.

    `x`'s rows sit in a Dense kernel that the identity's rows pick, so one SGD step at rate 1
    subtracts dL/dx from it, as it does dL/dgamma and dL/dbeta from the layer's weights.
    """
    rows, width = x.shape[0] * x.shape[1], x.shape[2]
    holder = keras.layers.Dense(
        width, use_bias=False, kernel_initializer=keras.initializers.Constant(x.reshape(rows, width))
    )
    head = keras.layers.Dense(
        projection.shape[1], use_bias=False, kernel_initializer=keras.initializers.Constant(projection), trainable=False
    )
    inputs = keras.Input((x.shape[1], rows))
    model = keras.Model(inputs, head(layer(holder(inputs))))
    model.compile(keras.optimizers.SGD(1.0), "mse")
    before = [to_numpy(w) for w in (holder.kernel, layer.gamma, layer.beta)]
    identity = np.eye(rows, dtype="float32").reshape(x.shape[0], x.shape[1], rows)
    model.train_on_batch(identity, np.zeros((x.shape[0], x.shape[1], projection.shape[1]), "float32"))
    return [b - to_numpy(w) for b, w in zip(before, (holder.kernel, layer.gamma, layer.beta))]


def test_gradients_equal_keras_layer_normalization(rng):
    """dx, dgamma and dbeta: the closed form (on TensorFlow) against Keras' layer differentiated by the backend;
    elsewhere both are Keras' layer."""
    x = (rng.normal(size=(2, 3, 8)) * 2 + 0.5).astype("float32")
    projection = rng.normal(size=(8, 5)).astype("float32")
    ours, theirs = pair(rng, 8, epsilon=1e-3)
    for got, expected in zip(gradients_of_one_step(ours, x, projection), gradients_of_one_step(theirs, x, projection)):
        assert np.abs(expected).max() > 1e-3  # every gradient is exercised
        assert_close(got, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="the closed-form gradient is TensorFlow's path only")
@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`:UserWarning")  # Keras' deprecation, the case tested
@pytest.mark.parametrize(
    "kwargs, closed_form",
    [
        (dict(), True),
        (dict(axis=2), True),
        (dict(axis=[-1]), True),
        (dict(center=False), False),
        (dict(axis=1), False),
        (dict(rms_scaling=True), False),
        (dict(dtype="float64"), False),
    ],
)
def test_tensorflow_takes_the_closed_form_where_it_applies(rng, monkeypatch, kwargs, closed_form):
    calls = []
    from keras_seq.backend import tensorflow as tensorflow_backend

    original = tensorflow_backend.closed_form_layer_normalization
    monkeypatch.setattr(
        tensorflow_backend, "closed_form_layer_normalization", lambda *args: calls.append(args) or original(*args)
    )
    layer = ks.layers.LayerNormalization(**kwargs)
    layer(rng.normal(size=(2, 3, 4)).astype(kwargs.get("dtype", "float32")))
    assert len(calls) == int(closed_form)


@pytest.mark.parametrize("kwargs", [dict(center=False), dict(scale=False), dict(axis=1), dict(dtype="float64")])
def test_other_configurations_are_keras_layer_unchanged(rng, kwargs):
    x = rng.normal(size=(2, 4, 4)).astype(kwargs.get("dtype", "float32"))
    ours, theirs = ks.layers.LayerNormalization(**kwargs), keras.layers.LayerNormalization(**kwargs)
    ours.build(x.shape)
    theirs.build(x.shape)
    weights = [rng.normal(size=w.shape).astype(x.dtype) for w in theirs.get_weights()]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    assert_close(ours(x), theirs(x), atol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_outputs_the_compute_dtype_like_keras(rng, policy):
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    ours, theirs = pair(rng, 8)
    ours_mixed, theirs_mixed = ks.layers.LayerNormalization(dtype=policy), keras.layers.LayerNormalization(dtype=policy)
    for layer, source in ((ours_mixed, ours), (theirs_mixed, theirs)):
        layer.build((None, 8))
        layer.set_weights(source.get_weights())
    out = ours_mixed(keras.ops.cast(x, ours_mixed.compute_dtype))
    assert keras.backend.standardize_dtype(out.dtype) == ours_mixed.compute_dtype
    expected = theirs_mixed(keras.ops.cast(x, theirs_mixed.compute_dtype))
    assert_close(keras.ops.cast(out, "float32"), keras.ops.cast(expected, "float32"), atol=0)


def test_model_contract(tmp_path, rng):
    layer = check_functional_model(
        lambda dtype=None: ks.layers.LayerNormalization(epsilon=1e-5, dtype=dtype),
        [((3, 8), "float32")],
        [rng.normal(size=(2, 3, 8)).astype("float32")],
        tmp_path,
    )
    assert type(assert_config_round_trip(layer.layers[-1])) is ks.layers.LayerNormalization

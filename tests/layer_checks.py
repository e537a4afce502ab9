"""Checks every keras_seq layer must pass, on whichever backend the run uses.

`check_functional_model` covers the contract shared by all layers: config round
trip, `.keras` save/load with identical outputs, compiled execution equal to eager,
and mixed precision close to float32.
"""

import keras
import numpy as np

BACKEND = keras.backend.backend()


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def assert_close(actual, expected, atol=1e-5, rtol=1e-5):
    np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), atol=atol, rtol=rtol)


def assert_config_round_trip(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    return clone


def build_model(make_layer, input_specs, dtype=None):
    """A functional model `inputs -> make_layer(...)(*inputs)`; specs are (shape, dtype) pairs."""
    inputs = [keras.Input(shape=shape, dtype=input_dtype) for shape, input_dtype in input_specs]
    layer = make_layer() if dtype is None else make_layer(dtype=dtype)
    return keras.Model(inputs, layer(*inputs)), layer


def compiled_predict(model, data):
    """The model's outputs from a compiled step: XLA on TensorFlow, jax.jit on JAX.

    On torch, Keras' predict step runs eagerly (its torch.compile path is exercised
    by the dedicated torch.compile test).
    """
    model.compile(jit_compile=BACKEND != "torch")
    return model.predict_on_batch(data)


def check_functional_model(make_layer, input_specs, data, tmp_path, atol=1e-5, mixed_atol=None):
    """Save/load, compiled-vs-eager and mixed precision checks for one layer factory.

    `make_layer(dtype=None)` must build the layer; `data` is a list of arrays.
    """
    model, layer = build_model(make_layer, input_specs)
    assert_config_round_trip(layer)
    eager = to_numpy(model(data, training=False))

    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert_close(loaded(data, training=False), eager, atol=atol)

    assert_close(compiled_predict(model, data), eager, atol=max(atol, 1e-4), rtol=1e-4)

    for policy, tolerance in (("mixed_float16", 2e-2), ("mixed_bfloat16", 8e-2)):
        mixed, _ = build_model(make_layer, input_specs, dtype=policy)
        mixed.set_weights(model.get_weights())
        out = to_numpy(keras.ops.cast(mixed(data, training=False), "float32"))
        assert np.all(np.isfinite(out)), policy
        scale = max(1.0, float(np.abs(eager).max()))
        np.testing.assert_allclose(out, eager, atol=(mixed_atol or tolerance) * scale, err_msg=policy)
    return model


def fit_reduces_loss(model, x, y, loss, epochs=30, factor=0.5, learning_rate=1e-2, batch_size=None):
    """Train with model.fit and assert the final loss is below `factor` times the first."""
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=loss)
    history = model.fit(x, y, epochs=epochs, batch_size=batch_size or len(y), verbose=0, shuffle=False)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < factor * losses[0], losses
    return losses


def assert_random_weights_drawn_apart(layer):
    """No two randomly initialised weights of `layer` start from the same draw.

    Compares the leading values of every pair (a shared unseeded Keras initializer
    repeats its draw for each weight, reshaped to the weight's shape).
    """
    drawn = [(w.path, to_numpy(w).ravel()) for w in layer.weights if np.std(to_numpy(w)) > 0]
    assert len(drawn) >= 2, "the layer should have several random weights"
    for i, (name_a, a) in enumerate(drawn):
        for name_b, b in drawn[i + 1 :]:
            n = min(a.size, b.size)
            assert not np.allclose(a[:n], b[:n]), f"{name_a} and {name_b} start from the same draw"

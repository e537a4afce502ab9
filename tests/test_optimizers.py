import keras
import numpy as np
import pytest
from layer_checks import BACKEND, to_numpy

import keras_seq as ks


def numpy_adam(weights, gradients, learning_rate, beta_1, beta_2, epsilon):
    """Adam (Kingma and Ba, 2015, algorithm 1) with Keras' epsilon outside the bias correction, in float64."""
    m, v, w = np.zeros_like(weights), np.zeros_like(weights), weights.astype(np.float64)
    for t, g in enumerate(gradients, start=1):
        m = m + (g - m) * (1 - beta_1)
        v = v + (g * g - v) * (1 - beta_2)
        alpha = learning_rate * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        w = w - alpha * m / (np.sqrt(v) + epsilon)
    return w


@pytest.mark.parametrize("amsgrad", [False, True])
def test_updates_follow_algorithm_1(rng, amsgrad):
    """`apply` outside `fit` (no gradient tape to turn off); with `amsgrad`, its v never falls in this sequence."""
    weights = rng.normal(size=(5, 3)).astype("float32")
    base = rng.normal(size=(5, 3)).astype("float32")
    gradients = [base * (t + 1) for t in range(4)]  # |g| grows, so v never falls and amsgrad's max of v is v
    variable = keras.Variable(weights)
    optimizer = ks.optimizers.Adam(0.01, beta_2=0.98, epsilon=1e-7, amsgrad=amsgrad)
    for g in gradients:
        optimizer.apply([keras.ops.convert_to_tensor(g)], [variable])
    expected = numpy_adam(weights, gradients, 0.01, 0.9, 0.98, 1e-7)
    np.testing.assert_allclose(to_numpy(variable), expected, rtol=1e-5, atol=1e-6)


def small_model(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((6,), dtype="int32")
    h = keras.layers.Embedding(20, 8)(inputs)
    outputs = keras.layers.Dense(20)(keras.layers.Dense(16, activation="relu")(h))
    return keras.Model(inputs, outputs)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"amsgrad": True},
        {"weight_decay": 0.01, "clipnorm": 1.0},
        {"learning_rate": keras.optimizers.schedules.ExponentialDecay(0.01, 2, 0.5)},
        {"gradient_accumulation_steps": 2},
        {"use_ema": True},
    ],
    ids=["plain", "amsgrad", "decay_and_clipping", "schedule", "accumulation", "ema"],
)
def test_fit_equals_keras_adam(rng, options):
    """The same weights after `fit` as `keras.optimizers.Adam` with the same arguments and start."""
    assert_fit_equals_keras_adam(rng, options)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="XLA around TensorFlow's fused kernel")
def test_fit_under_xla_equals_keras_adam(rng):
    assert_fit_equals_keras_adam(rng, {}, jit_compile=True)


def assert_fit_equals_keras_adam(rng, options, **compile_options):
    ids = rng.integers(1, 20, size=(32, 6)).astype("int32")
    trained = []
    for optimizer_class in (ks.optimizers.Adam, keras.optimizers.Adam):
        model = small_model(3)
        model.compile(
            optimizer_class(**{"learning_rate": 0.01, **options}),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            **compile_options,
        )
        model.fit(ids, ids, batch_size=8, epochs=2, verbose=0, shuffle=False)
        trained.append(model.get_weights())
    for ours, theirs in zip(*trained):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_config_and_saved_model_round_trip(tmp_path, rng):
    optimizer = ks.optimizers.Adam(2e-3, beta_2=0.98, epsilon=1e-9)
    clone = ks.optimizers.Adam.from_config(optimizer.get_config())
    assert clone.get_config() == optimizer.get_config()
    ids = rng.integers(1, 20, size=(16, 6)).astype("int32")
    model = small_model(1)
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ids, ids, batch_size=8, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(loaded.optimizer) is ks.optimizers.Adam
    for a, b in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


@pytest.mark.skipif(BACKEND != "torch", reason="the fused kernel is PyTorch's")
def test_pytorch_fused_kernel_on_the_cpu():
    import torch
    from torch.profiler import profile

    variables = [keras.Variable(np.ones((4, 3), "float32")), keras.Variable(np.ones((3,), "float32"))]
    if variables[0].value.device.type != "cpu":
        pytest.skip("Keras keeps its variables on an accelerator, where Keras' own update runs")
    optimizer = ks.optimizers.Adam(0.01)
    optimizer.build(variables)
    with profile() as trace:
        optimizer.apply([torch.ones((4, 3)), torch.ones((3,))], variables)
    assert any(event.name == "aten::_fused_adam_" for event in trace.events())


@pytest.mark.skipif(BACKEND != "tensorflow", reason="the fused kernel is TensorFlow's")
@pytest.mark.parametrize("amsgrad", [False, True])
def test_tensorflow_fused_kernel_in_a_traced_step(amsgrad):
    """One `ResourceApplyAdam` per variable in the traced update, and none for `amsgrad` (Keras' own update)."""
    import tensorflow as tf

    variables = [keras.Variable(np.ones((4, 3), "float32")), keras.Variable(np.ones((3,), "float32"))]
    optimizer = ks.optimizers.Adam(0.01, amsgrad=amsgrad)
    optimizer.build(variables)
    step = tf.function(lambda gradients: optimizer.apply(gradients, variables))
    graph = step.get_concrete_function([tf.TensorSpec((4, 3)), tf.TensorSpec((3,))]).graph
    kernels = [op for op in graph.get_operations() if op.type == "ResourceApplyAdam"]
    assert len(kernels) == (0 if amsgrad else 2)


def test_each_step_updates_the_variables_it_is_given(rng):
    """Steps over changing subsets of the built variables (a None gradient leaves its variable out): each moves
    its own variables, slots and step count as algorithm 1 does, the others not at all."""
    initial = [rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=(3,)).astype("float32")]
    given = [(0, 1), (1,), (0, 1), (0,), (0, 1)]
    gradients = [[rng.normal(size=w.shape).astype("float32") for w in initial] for _ in given]
    variables = [keras.Variable(w) for w in initial]
    optimizer = ks.optimizers.Adam(0.01, beta_2=0.98, epsilon=1e-7)
    optimizer.build(variables)
    for which, step_gradients in zip(given, gradients):
        present = [
            (keras.ops.convert_to_tensor(g), v) for i, (g, v) in enumerate(zip(step_gradients, variables)) if i in which
        ]
        optimizer.apply(*map(list, zip(*present)))
    for i, (weights, variable) in enumerate(zip(initial, variables)):
        # Keras' bias correction counts every step of the optimizer: replay variable i's steps at their counts
        expected = weights.astype(np.float64)
        m, v = np.zeros_like(expected), np.zeros_like(expected)
        for t, (which, step_gradients) in enumerate(zip(given, gradients), start=1):
            if i not in which:
                continue
            g = step_gradients[i]
            m, v = m + (g - m) * 0.1, v + (g * g - v) * 0.02
            expected = expected - 0.01 * np.sqrt(1 - 0.98**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-7)
        np.testing.assert_allclose(to_numpy(variable), expected, rtol=1e-5, atol=1e-6)

import keras
import numpy as np
import pytest
from layer_checks import assert_close, check_functional_model, to_numpy

from keras_seq import backend
from keras_seq.layers.positionwise import PositionwiseDense, over_positions


@pytest.mark.parametrize("shape", [(5, 8), (3, 4, 8), (2, 3, 4, 8)])
def test_outputs_and_gradients_equal_keras_dense_with_copied_weights(rng, shape):
    x = rng.normal(size=shape).astype("float32")
    ours, reference = PositionwiseDense(6, activation="relu"), keras.layers.Dense(6, activation="relu")
    ours.build(shape)
    reference.build(shape)
    ours.set_weights([w + rng.normal(size=w.shape).astype("float32") for w in reference.get_weights()])
    reference.set_weights(ours.get_weights())
    kernel, bias = (to_numpy(w) for w in ours.weights)
    expected = np.maximum(x @ kernel + bias, 0.0)  # Dense written out in NumPy
    assert_close(ours(x), expected, atol=1e-5)
    assert_close(reference(x), expected, atol=1e-5)

    upstream = rng.normal(size=(*shape[:-1], 6)).astype("float32")
    relu_grad = upstream * (expected > 0)
    rows = x.reshape(-1, shape[-1])
    expected_kernel_grad = rows.T @ relu_grad.reshape(-1, 6)
    gradient_of = {
        "tensorflow": _tensorflow_gradient,
        "jax": _jax_gradient,
        "torch": _torch_gradient,
    }[keras.backend.backend()]
    kernel_grad, input_grad = gradient_of(ours, x, upstream)
    np.testing.assert_allclose(kernel_grad, expected_kernel_grad, atol=1e-4, rtol=1e-5)
    np.testing.assert_allclose(input_grad, relu_grad @ kernel.T, atol=1e-4, rtol=1e-5)


def _tensorflow_gradient(layer, x, upstream):
    import tensorflow as tf

    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(layer(x) * upstream)
    kernel_grad, input_grad = tape.gradient(y, [layer.kernel.value, x])
    return kernel_grad.numpy(), input_grad.numpy()


def _jax_gradient(layer, x, upstream):
    import jax

    def objective(kernel, inputs):
        y, _ = layer.stateless_call([kernel, layer.bias.value], [], inputs)
        return (y * upstream).sum()

    kernel_grad, input_grad = jax.grad(objective, argnums=(0, 1))(layer.kernel.value, x)
    return np.asarray(kernel_grad), np.asarray(input_grad)


def _torch_gradient(layer, x, upstream):
    x = keras.ops.convert_to_tensor(x).requires_grad_(True)  # on Keras' device (the GPU when there is one)
    (layer(x) * keras.ops.convert_to_tensor(upstream)).sum().backward()
    return layer.kernel.value.grad.cpu().numpy(), x.grad.cpu().numpy()


def test_functional_model_with_unknown_batch_and_length(rng, tmp_path):
    data = [rng.normal(size=(3, 5, 8)).astype("float32")]

    def make_layer(dtype=None):
        return PositionwiseDense(4, dtype=dtype)

    model = check_functional_model(make_layer, [((None, 8), "float32")], data, tmp_path)
    assert model.outputs[0].shape == (None, None, 4)
    assert to_numpy(model([rng.normal(size=(2, 7, 8)).astype("float32")])).shape == (2, 7, 4)


def test_keeps_the_input_mask_and_dense_configuration():
    layer = PositionwiseDense(3, activation="tanh", use_bias=False, name="head")
    assert isinstance(layer, keras.layers.Dense)
    assert {k: v for k, v in layer.get_config().items() if k != "name"} == {
        k: v for k, v in keras.layers.Dense(3, activation="tanh", use_bias=False).get_config().items() if k != "name"
    }
    hidden = keras.layers.Embedding(10, 4, mask_zero=True)(np.array([[3, 0]]))
    np.testing.assert_array_equal(to_numpy(backend.get_keras_mask(layer(hidden))), [[True, False]])


def test_over_positions_folds_leading_axes_only(rng):
    x = rng.normal(size=(2, 3, 4)).astype("float32")
    seen = []

    def product(rows):
        seen.append(tuple(rows.shape))
        return keras.ops.matmul(rows, keras.ops.ones((4, 5)))

    assert_close(over_positions(product, x), np.repeat(x.sum(-1, keepdims=True), 5, -1))
    assert seen == [(6, 4)]
    assert_close(over_positions(product, x[0]), np.repeat(x[0].sum(-1, keepdims=True), 5, -1))
    assert seen[-1] == (3, 4)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="shapes unknown at trace time are TensorFlow's")
def test_inputs_of_unknown_feature_size_in_a_tensorflow_graph(rng):
    """E.g. a concatenation inside a `tf.while_loop` (the input-feeding decoder) loses its static width."""
    import tensorflow as tf

    layer = PositionwiseDense(3)
    layer.build((None, None, 4))
    traced = tf.function(layer, input_signature=[tf.TensorSpec((None, None, None), tf.float32)])
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    kernel, bias = (to_numpy(w) for w in layer.weights)
    assert_close(traced(x), x @ kernel + bias)


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize(
    "x_shape, kernel_shape, contracted_axes",
    [((3, 4, 8), (8, 6), 1), ((3, 4, 8), (8, 2, 3), 1), ((3, 4, 2, 3), (2, 3, 5), 2), ((5, 8), (8, 6), 1)],
)
def test_affine_contracts_the_kernels_leading_axes(rng, x_shape, kernel_shape, contracted_axes, use_bias):
    """`backend.affine` against `np.tensordot` plus the bias, with the kernel a variable as layers hold it."""
    x = rng.normal(size=x_shape).astype("float32")
    kernel = rng.normal(size=kernel_shape).astype("float32")
    bias = rng.normal(size=kernel_shape[contracted_axes:]).astype("float32") if use_bias else None
    expected = np.tensordot(x, kernel, axes=contracted_axes) + (0 if bias is None else bias)
    actual = backend.affine(
        keras.ops.convert_to_tensor(x),
        keras.Variable(kernel),
        None if bias is None else keras.Variable(bias),
        contracted_axes=contracted_axes,
    )
    assert tuple(actual.shape) == expected.shape
    assert_close(actual, expected, atol=1e-5)


def test_affine_of_mixed_dtypes_promotes_as_keras_ops(rng):
    """A float16 input against a float32 kernel gives what `keras.ops.matmul` gives: float32."""
    x = rng.normal(size=(2, 3, 4)).astype("float16")
    kernel = rng.normal(size=(4, 5)).astype("float32")
    actual = backend.affine(keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(kernel))
    assert keras.backend.standardize_dtype(actual.dtype) == "float32"
    assert_close(actual, x.astype("float32") @ kernel, atol=1e-3)


def test_lora_adapted_layer_equals_keras_dense(rng):
    """With LoRA on, the product uses the adapted kernel, as `keras.layers.Dense` does."""
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    ours, reference = PositionwiseDense(5), keras.layers.Dense(5)
    for layer in (ours, reference):
        layer.build(x.shape)
    reference.set_weights(ours.get_weights())
    for layer in (ours, reference):
        layer.enable_lora(2)
    lora = [rng.normal(size=w.shape).astype("float32") for w in (ours.lora_kernel_a, ours.lora_kernel_b)]
    for layer in (ours, reference):
        layer.lora_kernel_a.assign(lora[0])
        layer.lora_kernel_b.assign(lora[1])
    kernel, bias = to_numpy(ours.kernel), to_numpy(ours.bias)
    assert_close(ours(x), x @ kernel + bias, atol=1e-4)
    assert_close(ours(x), reference(x), atol=1e-5)

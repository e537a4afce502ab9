"""`ks.layers.MultiHeadAttention` held to the contract Keras holds its own `MultiHeadAttention` to.

Keras checks its layer with `run_layer_test` (config round trip, symbolic and eager calls of
the same shapes and dtypes, masking support, seed generators, saving, mixed precision) and
with tests of `compute_output_shape`, of the query's mask carried to the output, of Keras
masks against the same mask given explicitly, and of attention masks of every documented
shape. The same checks run here, written for keras_seq's layer. What Keras' layer has and
this one leaves out (listed in its docstring) is not tested: attention over other axes than
time, the gate, sliding windows, regularizers and constraints, LoRA and int8 quantization.
"""

import keras
import numpy as np
import pytest
from keras.src import testing
from layer_checks import assert_close, to_numpy
from test_multi_head_attention import numpy_multi_head

import keras_seq as ks
from keras_seq import backend

MultiHeadAttention = ks.layers.MultiHeadAttention


class TestKerasLayerContract(testing.TestCase):
    def test_layer_test(self):
        """Keras' own `run_layer_test`, with and without dropout, value_dim and biases (its training
        check is off, as in Keras' test of its layer: `fit` feeds one input, the layer needs two)."""
        cases = [
            ({"num_heads": 2, "key_dim": 2}, 8, 0),
            ({"num_heads": 2, "key_dim": 2, "value_dim": 4, "use_bias": False, "dropout": 0.5}, 4, 1),
        ]
        for init_kwargs, weights, seed_generators in cases:
            self.run_layer_test(
                MultiHeadAttention,
                init_kwargs=init_kwargs,
                input_shape={"query_shape": (2, 8, 16), "value_shape": (2, 4, 16)},
                expected_output_shape=(2, 8, 16),
                expected_num_trainable_weights=weights,
                expected_num_non_trainable_weights=0,
                expected_num_seed_generators=seed_generators,
                expected_num_losses=0,
                supports_masking=True,
                run_training_check=False,
            )


@pytest.mark.parametrize(
    "query_dims, value_dims, key_dims, output_shape",
    [
        ((4, 8), (2, 8), None, None),
        ((4, 8), (2, 8), (2, 3), None),
        ((4, 8), (2, 8), None, 5),
        ((4, 8), (2, 7), (2, 3), (6,)),  # query, value and key of different widths
    ],
)
def test_compute_output_shape_is_the_output_shape(query_dims, value_dims, key_dims, output_shape):
    layer = MultiHeadAttention(num_heads=2, key_dim=2, value_dim=2, output_shape=output_shape)
    query_shape, value_shape = (7, *query_dims), (7, *value_dims)
    key_shape = None if key_dims is None else (7, *key_dims)
    key = None if key_shape is None else np.ones(key_shape, "float32")
    output = layer(np.ones(query_shape, "float32"), np.ones(value_shape, "float32"), key=key)
    for as_given in (tuple, list):
        shapes = [None if s is None else as_given(s) for s in (query_shape, value_shape, key_shape)]
        assert tuple(layer.compute_output_shape(*shapes)) == tuple(output.shape)


@pytest.mark.parametrize(
    "query_dims, value_dims, key_dims, output_shape",
    [  # Keras' own cases of time-axis attention, plus output widths given as an int and a 1-tuple
        ((4, 8), (2, 8), None, None),
        ((4, 8), (2, 8), (2, 3), None),
        ((4, 8), (2, 8), None, 5),
        ((4, 8), (2, 7), (2, 3), (6,)),
        ((None, 8), (None, 8), (None, 3), None),
    ],
)
def test_compute_output_shape_is_keras_output_shape(query_dims, value_dims, key_dims, output_shape):
    kwargs = {"num_heads": 2, "key_dim": 2, "value_dim": 2, "output_shape": output_shape}
    shapes = [None if dims is None else (7, *dims) for dims in (query_dims, value_dims, key_dims)]
    expected = tuple(keras.layers.MultiHeadAttention(**kwargs).compute_output_shape(*shapes))
    assert tuple(MultiHeadAttention(**kwargs).compute_output_shape(*shapes)) == expected


@pytest.mark.parametrize(
    "query_shape, value_shape, key_shape",
    [  # Keras' `test_shape_mismatch_error` cases: the key and the value differ between the batch and the last axis
        ((2, 4, 8), (2, 2, 7), (2,)),
        ((2, 4, 8), (2, 2, 8), (2, 1, 7)),
        ((2, 4, 2, 3, 8), (2, 1, 1, 5, 8), (2, 1, 15, 5, 2)),
    ],
)
def test_compute_output_shape_rejects_keys_and_values_of_other_positions(query_shape, value_shape, key_shape):
    with pytest.raises(ValueError, match=r"must be equal"):
        keras.layers.MultiHeadAttention(num_heads=4, key_dim=2, value_dim=2).compute_output_shape(
            query_shape, value_shape, key_shape
        )
    layer = MultiHeadAttention(num_heads=4, key_dim=2, value_dim=2, name="mha")
    for as_given in (tuple, list):
        with pytest.raises(ValueError, match=r"MultiHeadAttention 'mha': `key_shape` expected .*value_shape=") as info:
            layer.compute_output_shape(as_given(query_shape), as_given(value_shape), as_given(key_shape))
        assert f"key_shape={tuple(key_shape)}" in str(info.value)
    with pytest.raises(ValueError, match=r"'mha': `(key|query)`"):  # rank 3 only: the rank-5 query fails first
        layer(*(np.ones(shape, "float32") for shape in (query_shape, value_shape, key_shape)))


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("scores", [False, True])
def test_symbolic_outputs_have_the_eager_shapes_and_dtypes(policy, scores):
    layer = MultiHeadAttention(num_heads=4, key_dim=2, dtype=policy)
    query, value = keras.Input(batch_shape=(2, 3, 5)), keras.Input(batch_shape=(2, 6, 5))
    symbolic = layer(query, value, return_attention_scores=scores)
    rng = np.random.default_rng(0)
    eager = layer(rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 6, 5)), return_attention_scores=scores)
    symbolic, eager = (list(x) if scores else [x] for x in (symbolic, eager))
    assert len(symbolic) == len(eager) == (2 if scores else 1)
    for s, e in zip(symbolic, eager):
        assert tuple(s.shape) == tuple(e.shape)
        assert s.dtype == keras.backend.standardize_dtype(e.dtype) == layer.compute_dtype


def test_the_query_mask_is_the_output_mask():
    layer = MultiHeadAttention(num_heads=2, key_dim=2)
    query_ids = np.array([[1, 2, 3, 0, 0], [3, 3, 1, 1, 2], [1, 0, 0, 0, 0]])
    query = keras.layers.Embedding(4, 8, mask_zero=True)(query_ids)
    output = layer(query, np.random.default_rng(0).normal(size=(3, 3, 8)).astype("float32"))
    np.testing.assert_array_equal(to_numpy(backend.get_keras_mask(output)), query_ids != 0)


@pytest.mark.parametrize("causal", [False, True])
def test_keras_masks_equal_the_same_mask_given_explicitly(causal):
    query_ids = np.array([[1, 2, 3, 0, 0], [3, 3, 1, 1, 2], [1, 0, 0, 0, 0]])
    value_ids = np.array([[5, 4, 0], [3, 0, 0], [2, 1, 1]])
    query = keras.layers.Embedding(4, 8, mask_zero=True)(query_ids)
    value = keras.layers.Embedding(6, 8, mask_zero=True)(value_ids)
    layer = MultiHeadAttention(num_heads=2, key_dim=2)
    with_keras_masks = layer(query, value, use_causal_mask=causal)
    # Keras' layer masks by the keys' padding (and causally); a padded query's row attends normally.
    mask = np.broadcast_to((value_ids != 0)[:, None, :], (3, 5, 3))
    if causal:
        mask = mask & np.tril(np.ones((5, 3), bool))
    plain = [keras.ops.convert_to_tensor(to_numpy(x)) for x in (query, value)]
    assert_close(with_keras_masks, layer(*plain, attention_mask=mask), atol=1e-6)


@pytest.mark.parametrize("scores", [False, True])
def test_attention_masks_of_every_documented_shape(scores):
    """`(T, S)`, `(B, T, S)`, `(B, H, T, S)` (and heads or batch of 1) mean the same mask; one mask per
    head is applied per head, as eq. 1 written out in NumPy says."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    causal = np.tril(np.ones((5, 5), bool))
    shapes = [
        causal,
        causal[None],
        np.tile(causal[None], (2, 1, 1)),
        causal[None, None],
        np.tile(causal[None, None], (2, 2, 1, 1)),
    ]
    outputs = [
        to_numpy(
            layer(x, x, attention_mask=m, return_attention_scores=scores)[0]
            if scores
            else layer(x, x, attention_mask=m)
        )
        for m in shapes
    ]
    for output in outputs[1:]:
        assert_close(output, outputs[0], atol=1e-5)
    per_head = rng.random((2, 2, 5, 5)) < 0.6
    per_head[..., 0] = True
    expected, weights = numpy_multi_head(x, x, [to_numpy(w) for w in layer.weights], 2, 4, per_head)
    if scores:
        output, got = layer(x, x, attention_mask=per_head, return_attention_scores=True)
        assert_close(got, weights, atol=1e-5)
    else:
        output = layer(x, x, attention_mask=per_head)
    assert_close(output, expected, atol=1e-5)


def test_a_causal_mask_and_an_explicit_mask_are_both_applied():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    extra = np.ones((2, 5, 5), bool)
    extra[:, 2, 1] = False
    merged = extra & np.tril(np.ones((5, 5), bool))
    assert_close(layer(x, x, attention_mask=extra, use_causal_mask=True), layer(x, x, attention_mask=merged), atol=1e-5)


@pytest.mark.parametrize("shape", [(3, 5, 5), (2, 3, 5, 5), (5, 4), (5,)])
def test_attention_masks_of_other_shapes_are_value_errors(shape):
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.zeros((2, 5, 8), "float32")
    with pytest.raises(ValueError, match=r"attention_mask"):
        layer(x, x, attention_mask=np.ones(shape, bool))

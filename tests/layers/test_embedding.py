import math

import keras
import numpy as np
import pytest
from layer_checks import assert_close, check_functional_model, fit_reduces_loss, to_numpy

import keras_seq as ks


def numpy_sinusoidal(length, depth, max_wavelength=10000.0, start=0):
    """The sinusoidal encoding of Vaswani et al. (2017, sec. 3.5) written out element by element."""
    pe = np.zeros((length, depth))
    for pos in range(start, start + length):
        for dim in range(depth):
            i = dim // 2
            angle = pos / max_wavelength ** (2 * i / depth)
            pe[pos - start, dim] = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    return pe


@pytest.mark.parametrize("depth", [8, 7])
@pytest.mark.parametrize("start", [0, 5])
def test_sinusoidal_matches_eq_5_1_5_2(rng, depth, start):
    x = rng.normal(size=(2, 6, depth)).astype("float32")
    out = ks.layers.SinusoidalPositionalEncoding(max_wavelength=100.0)(x, start_index=start)
    assert_close(out, x + numpy_sinusoidal(6, depth, 100.0, start)[None], atol=1e-5)


def test_sinusoidal_incremental_equals_full_pass(rng):
    x = rng.normal(size=(1, 9, 16)).astype("float32")
    layer = ks.layers.SinusoidalPositionalEncoding()
    full = to_numpy(layer(x))
    steps = [to_numpy(layer(x[:, t : t + 1], start_index=keras.ops.convert_to_tensor(t))) for t in range(9)]
    assert_close(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_sinusoidal_keeps_mask(rng):
    ids = np.array([[3, 4, 0, 0], [5, 0, 0, 0]])
    inputs = keras.Input((4,), dtype="int32")
    embedded = keras.layers.Embedding(10, 6, mask_zero=True)(inputs)
    encoded = ks.layers.SinusoidalPositionalEncoding()(embedded)
    assert encoded._keras_mask is not None
    layer = ks.layers.SinusoidalPositionalEncoding()
    mask = layer.compute_mask(None, keras.ops.convert_to_tensor(ids != 0))
    np.testing.assert_array_equal(to_numpy(mask), ids != 0)


def test_position_embedding_adds_the_learned_rows(rng):
    x = rng.normal(size=(2, 4, 6)).astype("float32")
    layer = ks.layers.PositionEmbedding(sequence_length=10)
    layer(x)
    table = to_numpy(layer.position_embeddings)
    assert_close(layer(x, start_index=3), x + table[3:7][None])


def test_token_and_position_embedding_formula(rng):
    ids = np.array([[1, 5, 2, 0], [7, 3, 0, 0]], dtype="int32")
    for positional in ("sinusoidal", "learned"):
        layer = ks.layers.TokenAndPositionEmbedding(10, 8, 6, positional=positional)
        out = layer(ids, start_index=2)
        table = to_numpy(layer.token_embedding.embeddings)
        if positional == "learned":
            positions = to_numpy(layer.position_encoding.position_embeddings)[2:6]
        else:
            positions = numpy_sinusoidal(4, 6, start=2)
        assert_close(out, table[ids] * math.sqrt(6) + positions[None], atol=1e-5)
        np.testing.assert_array_equal(to_numpy(layer.compute_mask(ids)), ids != 0)
    unscaled = ks.layers.TokenAndPositionEmbedding(10, 8, 6, scale_embeddings=False, mask_zero=False)
    out = unscaled(ids)
    assert unscaled.compute_mask(ids) is None
    assert_close(out, to_numpy(unscaled.token_embedding.embeddings)[ids] + numpy_sinusoidal(4, 6)[None], atol=1e-5)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_token_and_position_embedding_model_contract(tmp_path, positional):
    ids = np.array([[1, 5, 2, 0], [7, 3, 0, 0]], dtype="int32")
    check_functional_model(
        lambda dtype=None: ks.layers.TokenAndPositionEmbedding(10, 8, 6, positional=positional, dtype=dtype),
        [((4,), "int32")],
        [ids],
        tmp_path,
    )


def test_sinusoidal_and_position_embedding_model_contract(tmp_path, rng):
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    for make in (
        lambda dtype=None: ks.layers.SinusoidalPositionalEncoding(dtype=dtype),
        lambda dtype=None: ks.layers.PositionEmbedding(8, dtype=dtype),
    ):
        check_functional_model(make, [((5, 4), "float32")], [x], tmp_path)


@pytest.mark.parametrize(
    "encode",
    [
        lambda: ks.layers.SinusoidalPositionalEncoding(),
        lambda: ks.layers.PositionEmbedding(8),
        lambda: ks.layers.TokenAndPositionEmbedding(5, 8, 16, positional="sinusoidal"),
        lambda: ks.layers.TokenAndPositionEmbedding(5, 8, 16, positional="learned"),
    ],
    ids=["sinusoidal", "learned", "token-sinusoidal", "token-learned"],
)
def test_positions_make_order_learnable(encode):
    """Predicting a token's position from its (constant) embedding needs the position signal."""
    ids = np.full((64, 8), 3, dtype="int32")
    targets = np.tile(np.arange(8), (64, 1))
    inputs = keras.Input((8,), dtype="int32")
    layer = encode()
    if isinstance(layer, ks.layers.TokenAndPositionEmbedding):
        h = layer(inputs)
    else:
        h = layer(keras.layers.Embedding(5, 16)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(8)(keras.layers.Dense(32, activation="relu")(h)))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    fit_reduces_loss(model, ids, targets, loss, epochs=60, factor=0.2)


def test_bad_inputs_raise_value_errors(rng):
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    cases = [
        (lambda: ks.layers.SinusoidalPositionalEncoding()(x[0]), r"SinusoidalPositionalEncoding.*inputs.*rank 3"),
        (lambda: ks.layers.SinusoidalPositionalEncoding(max_wavelength=-1.0), r"max_wavelength.*positive"),
        (lambda: ks.layers.PositionEmbedding(4)(x), r"PositionEmbedding.*start_index.*sequence_length=4"),
        (lambda: ks.layers.PositionEmbedding(8)(x, start_index=6), r"positions 6\.\.10"),
        (lambda: ks.layers.PositionEmbedding(0), r"sequence_length.*positive integer"),
        (lambda: ks.layers.TokenAndPositionEmbedding(10, 8, 4)(x[..., 0]), r"token_ids.*integer token ids"),
        (lambda: ks.layers.TokenAndPositionEmbedding(10, 8, 4)(np.array([[1, 12]])), r"ids in \[0, 10\)"),
        (lambda: ks.layers.TokenAndPositionEmbedding(10, 8, 4)(np.array([[1, -1]])), r"ids in \[0, 10\)"),
        (lambda: ks.layers.TokenAndPositionEmbedding(10, 3, 4)(np.ones((2, 5), "int32")), r"sequence_length=3"),
        (lambda: ks.layers.TokenAndPositionEmbedding(10, 8, 4)(np.ones((2, 5, 1), "int32")), r"token_ids.*rank 2"),
        (lambda: ks.layers.TokenAndPositionEmbedding(10, 8, 4, positional="rotary"), r"positional.*sinusoidal"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_tied_logits_and_their_training_step_match_the_formula_in_numpy(rng):
    """`logits = h E^T + b` over `h = E[ids]` (Press and Wolf, 2017). One SGD step at rate 1 on `mean(logits^2)`,
    written out in NumPy: `E` moves by `g^T h` from the output side plus, at each id's row, `g E` from the
    input side (`g = dL/dlogits`), `b` by the sum of `g`."""
    table = rng.normal(size=(7, 4)).astype("float32")
    ids = np.array([[1, 5, 5], [0, 6, 2]])
    embedding = keras.layers.Embedding(7, 4, embeddings_initializer=keras.initializers.Constant(table))
    head = ks.layers.TiedLogits(embedding)
    inputs = keras.Input((3,), dtype="int32")
    model = keras.Model(inputs, head(embedding(inputs)))
    head.bias.assign(rng.normal(size=7).astype("float32"))
    bias = to_numpy(head.bias)
    h = table[ids].reshape(-1, 4)
    logits = h @ table.T + bias
    assert_close(model(ids), logits.reshape(2, 3, 7), atol=1e-5)
    model.compile(keras.optimizers.SGD(1.0), "mse")
    model.train_on_batch(ids, np.zeros((2, 3, 7), "float32"))
    upstream = 2 * logits / logits.size
    gradient = upstream.T @ h
    np.add.at(gradient, ids.reshape(-1), upstream @ table)
    assert_close(embedding.embeddings, table - gradient, atol=1e-6)
    assert_close(head.bias, bias - upstream.sum(0), atol=1e-6)

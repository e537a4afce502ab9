import keras
import numpy as np
import pytest
from layer_checks import (
    assert_close,
    assert_random_weights_drawn_apart,
    check_functional_model,
    fit_reduces_loss,
    to_numpy,
)
from test_multi_head_attention import numpy_multi_head

import keras_seq as ks


def numpy_layer_norm(x, norm, std_plus_epsilon=False):
    """LayerNorm with eps added to the std, `a (x - mean) / (s + eps) + b`; Keras puts eps inside the root instead."""
    gamma, beta, eps = to_numpy(norm.gamma), to_numpy(norm.beta), norm.epsilon
    centred = x - x.mean(-1, keepdims=True)
    spread = x.std(-1, keepdims=True) + eps if std_plus_epsilon else np.sqrt(x.var(-1, keepdims=True) + eps)
    return gamma * centred / spread + beta


def numpy_attention_sublayer(attention, query, value, mask):
    weights = [to_numpy(w) for w in attention.get_weights()]
    return numpy_multi_head(query, value, weights, attention.num_heads, attention.key_dim, mask)[0]


def numpy_feed_forward(block, x):
    w1, b1 = (to_numpy(w) for w in block.feed_forward_inner.weights)
    w2, b2 = (to_numpy(w) for w in block.feed_forward_output.weights)
    return np.maximum(x @ w1 + b1, 0.0) @ w2 + b2


def residual(block, x, norm, sublayer):
    """Pre-norm (Xiong et al., 2020) or the original post-norm wiring, without dropout (inference)."""
    if block.norm_first:
        return x + sublayer(numpy_layer_norm(x, norm))
    return numpy_layer_norm(x + sublayer(x), norm)


def numpy_encoder_block(block, x, mask):
    x = residual(
        block, x, block.self_attention_norm, lambda h: numpy_attention_sublayer(block.self_attention, h, h, mask)
    )
    return residual(block, x, block.feed_forward_norm, lambda h: numpy_feed_forward(block, h))


def numpy_decoder_block(block, x, encoder_outputs, encoder_mask):
    length = x.shape[1]
    causal = np.tril(np.ones((length, length), bool))[None]
    x = residual(
        block, x, block.self_attention_norm, lambda h: numpy_attention_sublayer(block.self_attention, h, h, causal)
    )
    cross_mask = np.broadcast_to(encoder_mask[:, None, :], (x.shape[0], length, encoder_mask.shape[1]))
    x = residual(
        block,
        x,
        block.cross_attention_norm,
        lambda h: numpy_attention_sublayer(block.cross_attention, h, encoder_outputs, cross_mask),
    )
    return residual(block, x, block.feed_forward_norm, lambda h: numpy_feed_forward(block, h))


def randomize(layer, rng):
    for variable in layer.weights:
        variable.assign(rng.normal(scale=0.3, size=variable.shape).astype("float32"))


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_block_matches_eq_5_5_in_numpy(rng, norm_first):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    padding = np.ones((2, 6), bool)
    padding[1, 4:] = False
    block = ks.layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=16, norm_first=norm_first)
    block(x)
    randomize(block, rng)
    expected = numpy_encoder_block(block, x, np.broadcast_to(padding[:, None], (2, 6, 6)))
    assert_close(block(x, padding_mask=padding), expected, atol=1e-4)
    attention_mask = np.tril(np.ones((6, 6), bool))[None].repeat(2, 0)
    assert_close(block(x, attention_mask=attention_mask), numpy_encoder_block(block, x, attention_mask), atol=1e-4)


def test_layer_norm_is_ba_et_al_up_to_where_epsilon_sits(rng):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    block = ks.layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=16)
    block(x)
    norm = block.self_attention_norm
    assert_close(norm(x), numpy_layer_norm(x, norm, std_plus_epsilon=True), atol=1e-4)


def test_decoder_block_matches_numpy_and_cache_equals_full_pass(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    encoder_outputs = rng.normal(size=(2, 7, 8)).astype("float32")
    encoder_mask = np.ones((2, 7), bool)
    encoder_mask[0, 5:] = False
    block = ks.layers.TransformerDecoderBlock(num_heads=2, intermediate_dim=16)
    block(x, encoder_outputs)
    randomize(block, rng)
    full = to_numpy(block(x, encoder_outputs, encoder_padding_mask=encoder_mask))
    assert_close(full, numpy_decoder_block(block, x, encoder_outputs, encoder_mask), atol=1e-4)
    cache = keras.ops.zeros((2, 2, 5, 2, 4))
    steps = []
    for t in range(5):
        out, cache = block(
            x[:, t : t + 1], encoder_outputs, encoder_padding_mask=encoder_mask, cache=cache, cache_update_index=t
        )
        steps.append(to_numpy(out))
    assert_close(np.concatenate(steps, 1), full, atol=1e-4)
    # The encoder outputs' keys and values projected once give the same steps.
    cross_cache = block.cross_attention.key_value_cache(encoder_outputs)
    cache = keras.ops.zeros((2, 2, 5, 2, 4))
    for t in range(5):
        out, cache = block(
            x[:, t : t + 1],
            encoder_outputs,
            encoder_padding_mask=encoder_mask,
            cache=cache,
            cache_update_index=t,
            cross_attention_cache=cross_cache,
        )
        assert_close(out, steps[t], atol=1e-5)


def test_rows_of_a_source_read_its_cross_attention_cache_together_as_if_repeated(rng):
    """`rows_per_source`: beams reading their source's encoder outputs once equal each beam reading a copy."""
    sources, beams = 2, 3
    x = rng.normal(size=(sources * beams, 4, 8)).astype("float32")
    encoder_outputs = rng.normal(size=(sources, 5, 8)).astype("float32")
    encoder_mask = np.array([[True] * 5, [True] * 2 + [False] * 3])
    block = ks.layers.TransformerDecoderBlock(num_heads=2, intermediate_dim=16)
    block(x, encoder_outputs.repeat(beams, axis=0))
    randomize(block, rng)
    repeated = encoder_outputs.repeat(beams, axis=0), encoder_mask.repeat(beams, axis=0)
    for length in (1, 4):  # one step, then a prefix read at once
        steps = x[:, :length]
        cache = keras.ops.zeros((sources * beams, 2, 4, 2, 4))
        expected, _ = block(
            steps,
            repeated[0],
            encoder_padding_mask=repeated[1],
            cache=cache,
            cache_update_index=0,
            cross_attention_cache=block.cross_attention.key_value_cache(repeated[0]),
        )
        grouped, _ = block(
            steps,
            encoder_outputs,
            encoder_padding_mask=encoder_mask,
            cache=cache,
            cache_update_index=0,
            cross_attention_cache=block.cross_attention.key_value_cache(encoder_outputs),
            rows_per_source=beams,
        )
        assert_close(grouped, expected, atol=1e-5)
        assert_close(expected, numpy_decoder_block(block, steps, *repeated)[:, :length], atol=1e-4)
    # Rows 0-2 read source 0: the sources reversed change the output.
    shuffled = encoder_outputs[::-1]
    wrong, _ = block(
        x[:, :1],
        shuffled,
        encoder_padding_mask=encoder_mask[::-1],
        cache=cache,
        cache_update_index=0,
        cross_attention_cache=block.cross_attention.key_value_cache(shuffled),
        rows_per_source=beams,
    )
    assert not np.allclose(to_numpy(wrong), to_numpy(grouped[:, :1]), atol=1e-3)


def test_sublayers_start_from_their_own_draws(rng):
    """Self- and cross-attention and both feed-forward kernels: one shared initializer, separate draws."""
    block = ks.layers.TransformerDecoderBlock(num_heads=2, intermediate_dim=8)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    block(x, encoder_outputs=x)
    assert_random_weights_drawn_apart(block)


def test_decoder_only_block_is_causal(rng):
    x = rng.normal(size=(1, 6, 8)).astype("float32")
    block = ks.layers.TransformerDecoderBlock(num_heads=2, intermediate_dim=16)
    base = to_numpy(block(x))
    changed = x.copy()
    changed[:, 4:] += 1.0
    assert_close(block(changed)[:, :4], base[:, :4], atol=1e-5)
    assert not np.allclose(to_numpy(block(changed))[:, 4:], base[:, 4:])


def test_encoder_padding_from_keras_mask(rng):
    ids = np.array([[3, 4, 5, 0, 0], [6, 0, 0, 0, 0]], dtype="int32")
    inputs = keras.Input((5,), dtype="int32")
    embedding = ks.layers.TokenAndPositionEmbedding(10, 5, 8)
    block = ks.layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=16, dropout=0.0)
    model = keras.Model(inputs, block(embedding(inputs)))
    embedded = embedding(ids)
    assert_close(model(ids), block(embedded, padding_mask=ids != 0), atol=1e-5)
    assert not np.allclose(to_numpy(model(ids)), to_numpy(block(embedded, padding_mask=np.ones((2, 5), bool))))


def test_all_padding_sequence_gives_finite_outputs(rng):
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    padding = np.array([[1, 1, 0, 0], [0, 0, 0, 0]], bool)
    encoded = ks.layers.TransformerEncoderBlock(2, 16)(x, padding_mask=padding)
    decoded = ks.layers.TransformerDecoderBlock(2, 16)(x, decoder_padding_mask=padding)
    assert np.all(np.isfinite(to_numpy(encoded))) and np.all(np.isfinite(to_numpy(decoded)))


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_model_contract(tmp_path, rng, norm_first):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    check_functional_model(
        lambda dtype=None: ks.layers.TransformerEncoderBlock(2, 16, norm_first=norm_first, dtype=dtype),
        [((6, 8), "float32")],
        [x],
        tmp_path,
        atol=1e-4,
    )


def test_decoder_model_contract(tmp_path, rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    encoder_outputs = rng.normal(size=(2, 7, 8)).astype("float32")
    check_functional_model(
        lambda dtype=None: ks.layers.TransformerDecoderBlock(2, 16, dtype=dtype),
        [((5, 8), "float32"), ((7, 8), "float32")],
        [x, encoder_outputs],
        tmp_path,
        atol=1e-4,
    )


def test_blocks_train_to_reverse_a_sequence(rng):
    """Output position t must predict input token T-1-t: needs positions and attention."""
    n, length, vocab = 512, 6, 8
    ids = rng.integers(1, vocab, size=(n, length)).astype("int32")
    inputs = keras.Input((length,), dtype="int32")
    h = ks.layers.TokenAndPositionEmbedding(vocab, length, 32, positional="learned")(inputs)
    for _ in range(2):
        h = ks.layers.TransformerEncoderBlock(num_heads=4, intermediate_dim=64, dropout=0.0)(h)
    model = keras.Model(inputs, keras.layers.Dense(vocab)(keras.layers.LayerNormalization()(h)))
    loss = ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0)
    fit_reduces_loss(model, ids, ids[:, ::-1], loss, epochs=25, factor=0.2, learning_rate=3e-3, batch_size=64)


def test_decoder_block_trains_to_repeat_the_first_token(rng):
    """Every position must output the first token: only causal attention back to it can tell."""
    n, length, vocab = 512, 6, 8
    ids = rng.integers(1, vocab, size=(n, length)).astype("int32")
    inputs = keras.Input((length,), dtype="int32")
    h = ks.layers.TokenAndPositionEmbedding(vocab, length, 32)(inputs)
    h = ks.layers.TransformerDecoderBlock(num_heads=4, intermediate_dim=64, dropout=0.0)(h)
    model = keras.Model(inputs, keras.layers.Dense(vocab)(keras.layers.LayerNormalization()(h)))
    targets = np.repeat(ids[:, :1], length, axis=1)
    loss = ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0)
    fit_reduces_loss(model, ids, targets, loss, epochs=20, factor=0.2, learning_rate=3e-3, batch_size=64)


def test_bad_inputs_raise_value_errors(rng):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    encoder_only = ks.layers.TransformerDecoderBlock(2, 16)
    encoder_only(x)
    with_cross_attention = ks.layers.TransformerDecoderBlock(2, 16)
    with_cross_attention(x, x)
    cases = [
        (lambda: ks.layers.TransformerEncoderBlock(3, 16)(x), r"TransformerEncoderBlock.*divisible by num_heads=3"),
        (lambda: ks.layers.TransformerEncoderBlock(2, 16)(x[0]), r"x.*rank 3"),
        (
            lambda: ks.layers.TransformerEncoderBlock(2, 16)(x, padding_mask=np.ones((2, 5), bool)),
            r"padding_mask.*\(2, 6\)",
        ),
        (
            lambda: ks.layers.TransformerEncoderBlock(2, 16)(x, attention_mask=np.ones((2, 6, 5), bool)),
            r"attention_mask.*\(2, 6, 6\)",
        ),
        (lambda: ks.layers.TransformerEncoderBlock(2, 0), r"intermediate_dim.*positive integer"),
        (lambda: ks.layers.TransformerEncoderBlock(2, 16, activation="no-such"), r"activation"),
        (lambda: ks.layers.TransformerEncoderBlock(2, 16, layer_norm_epsilon=0), r"layer_norm_epsilon.*positive"),
        (
            lambda: encoder_only(x, x),
            r"TransformerDecoderBlock.*encoder_outputs.*without cross-attention; use a new block",
        ),
        (lambda: with_cross_attention(x), r"encoder_outputs.*expected encoder outputs.*got NoneType"),
        (
            lambda: ks.layers.TransformerDecoderBlock(2, 16)(x, x, encoder_padding_mask=np.ones((2, 3), bool)),
            r"encoder_padding_mask.*\(2, 6\)",
        ),
        (
            lambda: with_cross_attention(x, x, rows_per_source=2),
            r"rows_per_source.*1 without a `cross_attention_cache`",
        ),
        (
            lambda: with_cross_attention(
                x[:, :1], x[:1], cache=np.zeros((2, 2, 6, 2, 4), "float32"), cache_update_index=0, rows_per_source=2
            ),
            r"rows_per_source.*1 without a `cross_attention_cache`",
        ),
        (
            lambda: with_cross_attention(
                x,
                x[:1],
                cross_attention_cache=with_cross_attention.cross_attention.key_value_cache(x[:1]),
                rows_per_source=3,
            ),
            r"x.*3 rows per row of the encoder outputs \(1\).*2 rows",
        ),
        (
            lambda: with_cross_attention(
                x, x, cross_attention_cache=with_cross_attention.cross_attention.key_value_cache(x), rows_per_source=0
            ),
            r"rows_per_source.*positive integer",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_a_quantized_sublayer_runs_its_quantized_product(rng):
    """A sublayer quantized to int8, called from inside its owner, still runs Keras' quantized call."""
    from keras_seq.layers._sublayers import call_sublayer

    x = rng.normal(size=(2, 3, 8)).astype("float32")
    dense = keras.layers.Dense(6)
    dense.build(x.shape)
    in_float = to_numpy(call_sublayer(dense, x))
    dense.quantize("int8")
    quantized = to_numpy(call_sublayer(dense, x))
    assert_close(quantized, dense(x), atol=1e-6)
    assert not np.allclose(quantized, in_float, atol=1e-6, rtol=0)  # int8 weights: not the float product
    np.testing.assert_allclose(quantized, in_float, atol=0.1)

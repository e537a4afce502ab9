import keras
import numpy as np
import pytest
from layer_checks import (
    BACKEND,
    assert_close,
    assert_random_weights_drawn_apart,
    check_functional_model,
    fit_reduces_loss,
    to_numpy,
)

import keras_seq as ks
from keras_seq import backend


def numpy_multi_head(query, value, weights, num_heads, key_dim, mask=None):
    """Vaswani et al. (2017), eq. 1 and sec. 3.2.2, with Keras' weight layout; rows with no allowed key -> 0."""
    Wq, bq, Wk, bk, Wv, bv, Wo, bo = weights
    q = np.einsum("btd,dhk->bhtk", query, Wq) + bq[None, :, None, :]
    k = np.einsum("btd,dhk->bhtk", value, Wk) + bk[None, :, None, :]
    v = np.einsum("btd,dhk->bhtk", value, Wv) + bv[None, :, None, :]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(key_dim)  # eq. 1
    if mask is None:
        mask = np.ones(scores.shape[-2:], bool)[None]
    mask = np.asarray(mask, bool)  # (T, S), (B, T, S) or (B, H, T, S)
    allowed = np.broadcast_to(
        mask[:, None] if mask.ndim == 3 else mask.reshape((1,) * (4 - mask.ndim) + mask.shape), scores.shape
    )
    scores = np.where(allowed, scores, -np.inf)
    row_max = np.max(np.where(allowed, scores, -1e30), axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(scores - row_max), 0.0)
    totals = e.sum(-1, keepdims=True)
    probs = np.divide(e, totals, out=np.zeros_like(e), where=totals > 0)
    heads = probs @ v  # head_i, sec. 3.2.2
    concat = heads.transpose(0, 2, 1, 3)  # (B, T, H, d_v)
    return np.einsum("bthv,hvo->bto", concat, Wo) + bo, probs  # MultiHead, sec. 3.2.2


@pytest.fixture(params=["heads_first", "time_first"])
def layout(request, monkeypatch):
    """Runs a test through both attention layouts, whichever this device would pick."""
    monkeypatch.setattr(backend, "heads_first_attention", lambda: request.param == "heads_first")
    return request.param


@pytest.fixture(params=["whole_cache", "keys_and_values"])
def cache_read(request, monkeypatch):
    """Runs a test through both ways one decoding query reads its cache."""
    monkeypatch.setattr(backend, "single_query_reads_whole_cache", lambda: request.param == "whole_cache")
    return request.param


@pytest.fixture
def qv(rng):
    return rng.normal(size=(2, 5, 8)).astype("float32"), rng.normal(size=(2, 7, 6)).astype("float32")


def keras_pair(query, value, **kwargs):
    """A keras_seq layer holding a copy of a keras.layers.MultiHeadAttention's weights."""
    reference = keras.layers.MultiHeadAttention(**kwargs)
    reference(query, value, return_attention_scores=True)  # builds without the fused path (see below)
    layer = ks.layers.MultiHeadAttention(**kwargs)
    layer(query, value)
    layer.set_weights(reference.get_weights())
    return layer, reference


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_heads=2, key_dim=4),
        dict(num_heads=3, key_dim=4, value_dim=5, output_shape=9),
        dict(num_heads=2, key_dim=3, use_bias=False),
        dict(num_heads=2, key_dim=4, dropout=0.3),
    ],
)
@pytest.mark.usefixtures("layout")
def test_equals_keras_multi_head_attention_with_copied_weights(qv, rng, kwargs):
    query, value = qv
    layer, reference = keras_pair(query, value, **kwargs)
    assert [w.shape for w in layer.get_weights()] == [w.shape for w in reference.get_weights()]

    def keras_output(*args, **call_kwargs):
        # Keras' explicit path: its fused path fails when value_dim != key_dim on JAX.
        return reference(*args, return_attention_scores=True, **call_kwargs)[0]

    mask = rng.random((2, 5, 7)) > 0.3
    mask[:, :, 0] = True  # Keras averages fully masked rows; keep every row attendable
    key = rng.normal(size=(2, 7, 6)).astype("float32")
    assert_close(layer(query, value), keras_output(query, value), atol=1e-5)
    assert_close(layer(query, value, key), keras_output(query, value, key), atol=1e-5)
    assert_close(layer(query, value, attention_mask=mask), keras_output(query, value, attention_mask=mask), atol=1e-5)
    out, scores = layer(query, value, attention_mask=mask, return_attention_scores=True)
    ref_out, ref_scores = reference(query, value, attention_mask=mask, return_attention_scores=True)
    assert_close(out, ref_out, atol=1e-5)
    assert_close(scores, ref_scores, atol=1e-6)
    layer, reference = keras_pair(query, query, **kwargs)
    assert_close(layer(query, query, use_causal_mask=True), keras_output(query, query, use_causal_mask=True), atol=1e-5)


@pytest.mark.usefixtures("layout")
def test_training_step_equals_keras_multi_head_attention_with_copied_weights(qv, rng):
    """One SGD step at rate 1 through the explicit attention (scores returned): every weight moves as Keras' layer's."""
    query, value = qv
    layer, reference = keras_pair(query, value, num_heads=2, key_dim=3, value_dim=4)
    for variable in reference.weights:  # non-zero biases, so each gradient term is checked
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    layer.set_weights(reference.get_weights())
    before = reference.get_weights()
    stepped = []
    for attention in (layer, reference):
        inputs = keras.Input((5, 8)), keras.Input((7, 6))
        model = keras.Model(inputs, attention(*inputs, return_attention_scores=True)[0])
        model.compile(keras.optimizers.SGD(1.0), "mse")
        model.train_on_batch([query, value], np.zeros((2, 5, 8), "float32"))
        stepped.append([to_numpy(w) for w in attention.weights])
    # Every weight has a gradient but the key bias: it adds `q . b_k` to all of a query's scores alike.
    moved = [np.abs(theirs - start).max() > 1e-4 for theirs, start in zip(stepped[1], before)]
    assert moved == [True, True, True, False, True, True, True, True]
    for ours, theirs in zip(*stepped):
        assert_close(ours, theirs, atol=1e-6)


@pytest.mark.usefixtures("layout")
def test_matches_eq_4_6_5_3_5_4_in_numpy(qv, rng):
    query, value = qv
    layer = ks.layers.MultiHeadAttention(num_heads=2, key_dim=3, value_dim=4)
    layer(query, value)
    for layer_var in layer.weights:  # non-zero biases, so each term is checked
        layer_var.assign(rng.normal(size=layer_var.shape).astype("float32"))
    weights = [to_numpy(w) for w in layer.get_weights()]
    mask = rng.random((2, 5, 7)) > 0.4
    mask[1, 3] = False
    out, scores = layer(query, value, attention_mask=mask, return_attention_scores=True)
    expected, expected_scores = numpy_multi_head(query, value, weights, 2, 3, mask)
    assert_close(scores, expected_scores, atol=1e-5)
    assert_close(out, expected, atol=1e-4)
    fused = layer(query, value, attention_mask=mask)
    assert_close(fused, expected, atol=1e-4)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("scores", [False, True])
@pytest.mark.usefixtures("layout")
def test_fully_masked_queries_get_zeros_not_nan(qv, policy, scores):
    query, value = qv
    layer = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4, dtype=policy)
    mask = np.ones((2, 5, 7), bool)
    mask[0, 1] = False
    mask[1] = False
    result = layer(query, value, attention_mask=mask, return_attention_scores=scores)
    out = to_numpy(keras.ops.cast(result[0] if scores else result, "float32"))
    assert np.all(np.isfinite(out))
    bias = to_numpy(layer.output_bias)
    np.testing.assert_array_equal(out[0, 1], bias)
    np.testing.assert_array_equal(out[1], np.broadcast_to(bias, out[1].shape))
    if scores:
        assert np.all(to_numpy(keras.ops.cast(result[1], "float32"))[1] == 0)


@pytest.mark.usefixtures("layout")
def test_gradients_stay_finite_with_an_all_padding_sequence(qv):
    query, _ = qv
    inputs = keras.Input((5, 8))
    padding = keras.Input((5,), dtype="bool")
    out = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)(inputs, inputs, value_mask=padding)
    model = keras.Model([inputs, padding], out)
    model.compile(optimizer="sgd", loss="mse")
    mask = np.ones((2, 5), bool)
    mask[1] = False
    model.fit([query, mask], np.zeros((2, 5, 8)), epochs=2, verbose=0)
    assert all(np.all(np.isfinite(to_numpy(w))) for w in model.weights)


def test_dropout_only_in_training_and_fused_kernel_at_inference(qv, monkeypatch):
    query, value = qv
    plain = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    dropping = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.5)
    plain(query, value)
    dropping(query, value)
    dropping.set_weights(plain.get_weights())
    calls = []
    original = keras.ops.dot_product_attention
    monkeypatch.setattr(keras.ops, "dot_product_attention", lambda *a, **k: calls.append(1) or original(*a, **k))
    assert_close(dropping(query, value, training=False), plain(query, value), atol=1e-6)
    fused_calls = 0 if backend.heads_first_attention() else 2  # JAX on the CPU writes attention out
    assert len(calls) == fused_calls, "the fused kernel must serve inference even when dropout > 0"
    trained = to_numpy(dropping(query, value, training=True))
    assert len(calls) == fused_calls, "training-time dropout needs the explicit weights"
    assert not np.allclose(trained, to_numpy(plain(query, value)), atol=1e-3)


@pytest.mark.usefixtures("layout", "cache_read")
def test_cached_incremental_decoding_equals_full_causal_pass(rng):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    cache = keras.ops.zeros((2, 2, 6, 2, 4))
    steps = []
    for t in range(6):
        out, cache = layer(x[:, t : t + 1], x[:, t : t + 1], use_causal_mask=True, cache=cache, cache_update_index=t)
        steps.append(to_numpy(out))
    assert_close(np.concatenate(steps, axis=1), full, atol=1e-5)
    # Prefill the first 4 positions at once, then one step.
    cache = keras.ops.zeros((2, 2, 6, 2, 4))
    prefix, cache = layer(x[:, :4], x[:, :4], use_causal_mask=True, cache=cache, cache_update_index=0)
    assert_close(prefix, full[:, :4], atol=1e-5)
    step, _ = layer(x[:, 4:5], x[:, 4:5], use_causal_mask=True, cache=cache, cache_update_index=4)
    assert_close(step, full[:, 4:5], atol=1e-5)
    # A precomputed cache (no update index) is attended to as it is.
    reused, same_cache = layer(x[:, 5:6], x[:, :4], cache=cache[:, :, :4])
    assert_close(reused, layer(x[:, 5:6], x[:, :4]), atol=1e-5)
    # key_value_cache projects a whole memory once (cross-attention); its padding mask still applies.
    assert_close(layer.key_value_cache(x)[:, :, :4], cache[:, :, :4], atol=1e-5)  # the prefix wrote positions 0-3
    memory, memory_mask = x[:, ::-1], np.array([[True] * 6, [True] * 3 + [False] * 3])
    projected = layer.key_value_cache(memory)
    for t in range(6):
        step, _ = layer(x[:, t : t + 1], memory, value_mask=memory_mask, cache=projected)
        assert_close(step, layer(x[:, t : t + 1], memory, value_mask=memory_mask), atol=1e-5)
    # A step whose every cached key is masked gets a zero context (the output bias), not NaN.
    blocked = np.zeros((2, 1, 6), bool)
    blocked[1, 0, :3] = True
    out, _ = layer(x[:, 5:6], x[:, 5:6], attention_mask=blocked, cache=cache, cache_update_index=5)
    assert np.all(np.isfinite(to_numpy(out)))
    assert_close(out[0, 0], to_numpy(layer.output_bias), atol=1e-6)
    assert not np.allclose(to_numpy(out[1, 0]), to_numpy(layer.output_bias), atol=1e-3)


@pytest.mark.usefixtures("cache_read")
@pytest.mark.parametrize("queries", [1, 3])  # one summed over the cache in place, several by a product
def test_queries_over_a_fixed_cache_match_eq_1_in_numpy(rng, queries):
    """Queries over precomputed keys and values (a source's beams over its encoder outputs), with padded keys and a
    row with no key at all, against the formula."""
    layer = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    memory, query = rng.normal(size=(3, 6, 8)).astype("float32"), rng.normal(size=(3, queries, 8)).astype("float32")
    layer(memory, memory)
    layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    padding = np.array([[True] * 6, [True] * 2 + [False] * 4, [False] * 6])
    out, cache = layer(query, memory, value_mask=padding, cache=layer.key_value_cache(memory))
    expected, _ = numpy_multi_head(
        query, memory, layer.get_weights(), 2, 4, mask=np.broadcast_to(padding[:, None], (3, queries, 6))
    )
    assert_close(out, expected, atol=1e-5)
    assert_close(cache, layer.key_value_cache(memory), atol=0)


def test_key_value_cache_rejects_what_it_cannot_project(rng):
    layer = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="cross")
    memory = rng.normal(size=(2, 3, 8)).astype("float32")
    with pytest.raises(ValueError, match=r"cross.*key_value_cache.*a built layer"):
        layer.key_value_cache(memory)
    layer(memory, memory)
    with pytest.raises(ValueError, match=r"cross.*value.*feature size"):
        layer.key_value_cache(memory[..., :6])
    with pytest.raises(ValueError, match=r"cross.*value.*rank 3"):
        layer.key_value_cache(memory[0])


def test_cache_rows_read_each_position_from_its_row_as_a_gathered_cache(rng):
    """Reading row `cache_rows[b, s]` at position s equals attending over that gathered cache."""
    layer = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    x = rng.normal(size=(3, 2, 8)).astype("float32")
    layer(x, x)
    layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    cache = rng.normal(size=(3, 2, 6, 2, 4)).astype("float32")
    rows = rng.integers(0, 3, size=(3, 6)).astype("int32")
    rows[:, 3:] = np.arange(3)[:, None]  # new entries go to each row's own slot
    for new, index in ((x[:, :1], 3), (x, 3)):  # one query, then two at once
        out, written = layer(new, new, use_causal_mask=True, cache=cache, cache_update_index=index, cache_rows=rows)
        written = to_numpy(written)
        gathered = written[rows, :, np.arange(6)[None]].transpose(0, 2, 1, 3, 4)  # (B, 2, S, H, d)
        expected, _ = layer(new, new, use_causal_mask=True, cache=gathered, cache_update_index=index)
        assert_close(out, expected, atol=1e-5)
        assert not np.allclose(
            to_numpy(out),
            to_numpy(layer(new, new, use_causal_mask=True, cache=cache, cache_update_index=index)[0]),
            atol=1e-3,
        )
    # A query with no allowed key in the cache gets a zero context: the output bias.
    blocked = np.zeros((3, 1, 6), bool)
    blocked[1, 0, :2] = True
    out, _ = layer(x[:, :1], x[:, :1], attention_mask=blocked, cache=cache, cache_update_index=3, cache_rows=rows)
    out = to_numpy(out)
    assert np.all(np.isfinite(out))
    assert_close(out[[0, 2], 0], np.broadcast_to(to_numpy(layer.output_bias), (2, 8)), atol=1e-6)
    with pytest.raises(ValueError, match="cache_rows"):
        layer(x, x, cache_rows=rows)
    with pytest.raises(ValueError, match="cache_rows"):
        layer(x[:, :1], x[:, :1], cache=cache, cache_update_index=3, cache_rows=rows[:, :5])


def test_query_key_value_and_output_kernels_start_apart(qv):
    query, value = qv
    layer = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    layer(query, query)
    assert_random_weights_drawn_apart(layer)


def test_model_contract(tmp_path, qv):
    query, value = qv
    check_functional_model(
        lambda dtype=None: ks.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.1, dtype=dtype),
        [((5, 8), "float32"), ((7, 6), "float32")],
        [query, value],
        tmp_path,
    )


@pytest.mark.usefixtures("layout")
def test_keras_masks_from_inputs_are_applied(rng):
    ids = np.array([[1, 2, 3, 0, 0], [4, 5, 0, 0, 0]], dtype="int32")
    inputs = keras.Input((5,), dtype="int32")
    embedded = keras.layers.Embedding(8, 8, mask_zero=True)(inputs)
    attention = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    model = keras.Model(inputs, attention(embedded, embedded))
    embedded_values = to_numpy(model.layers[1](ids))
    expected = attention(
        embedded_values, embedded_values, attention_mask=np.broadcast_to((ids != 0)[:, None], (2, 5, 5))
    )
    assert_close(model(ids), expected, atol=1e-5)


def test_learns_to_copy_the_marked_position(rng):
    """The output at every position must be the value at the marked one: needs attention."""
    n, length = 256, 6
    x = rng.normal(size=(n, length, 8)).astype("float32")
    marked = rng.integers(0, length, n)
    x[:, :, 0] = 0.0
    x[np.arange(n), marked, 0] = 5.0
    target = np.repeat(x[np.arange(n), marked][:, None, 1:2], length, axis=1)
    inputs = keras.Input((length, 8))
    h = ks.layers.MultiHeadAttention(num_heads=2, key_dim=8)(inputs, inputs)
    model = keras.Model(inputs, keras.layers.Dense(1)(h))
    fit_reduces_loss(model, x, target, "mse", epochs=60, factor=0.3)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile is the torch backend's compiler")
def test_torch_compile_matches_eager(qv):
    import torch

    query, value = qv
    layer = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    eager = to_numpy(layer(query, value))
    compiled = torch.compile(lambda q, v: layer(q, v), dynamic=False)
    assert_close(compiled(keras.ops.convert_to_tensor(query), keras.ops.convert_to_tensor(value)), eager, atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile is the torch backend's compiler")
@pytest.mark.parametrize("flash", ["enabled", "disabled"])
def test_attention_and_block_trace_whole_under_torch_compile(rng, flash):
    """No graph break in the layers' own computation (Keras' flash pre-check used to make one per layer)."""
    import torch

    if flash == "enabled":
        keras.config.enable_flash_attention()
    else:
        keras.config.disable_flash_attention()
    try:
        x = keras.ops.convert_to_tensor(rng.normal(size=(2, 5, 8)).astype("float32"))
        attention = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
        block = ks.layers.TransformerDecoderBlock(num_heads=2, intermediate_dim=16, dropout=0.0)
        attention(x, x, use_causal_mask=True)
        block(x)
        for call in (lambda h: attention.call(h, h, use_causal_mask=True), block.call):
            explanation = torch._dynamo.explain(call)(x)
            assert explanation.graph_break_count == 0, explanation.break_reasons
    finally:
        keras.config.enable_flash_attention()  # Keras' default


def test_bad_inputs_raise_value_errors(qv):
    query, value = qv
    built = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    built(query, value)
    cache = np.zeros((2, 2, 7, 2, 4), "float32")
    cases = [
        (lambda: ks.layers.MultiHeadAttention(2, 4)(query[0], value), r"MultiHeadAttention.*query.*rank 3"),
        (lambda: ks.layers.MultiHeadAttention(2, 4)(query, value[:1]), r"value.*batch size 2"),
        (lambda: ks.layers.MultiHeadAttention(2, 4)(query, value, value[:, :3]), r"key.*length 7"),
        (lambda: ks.layers.MultiHeadAttention(2, 4)(query.astype("int32"), value), r"query.*floating-point"),
        (lambda: built(query[..., :6], value), r"query.*feature size 8"),
        (lambda: built(query, value, attention_mask=np.ones((2, 5, 6), bool)), r"attention_mask.*\(2, 5, 7\)"),
        (lambda: built(query, value, cache=cache[:, :1]), r"cache.*\(2, 2, None, 2, 4\)"),
        (lambda: built(query, value, cache_update_index=0), r"cache_update_index.*cache"),
        (
            lambda: ks.layers.MultiHeadAttention(2, 4, value_dim=3)(query, value, cache=cache, cache_update_index=0),
            r"value_dim == key_dim",
        ),
        (lambda: ks.layers.MultiHeadAttention(0, 4), r"num_heads.*positive integer"),
        (lambda: ks.layers.MultiHeadAttention(2, 4, dropout=1.5), r"dropout.*\[0, 1\)"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.skipif(BACKEND != "torch", reason="eager torch's own calls")
def test_one_query_over_a_cache_in_torch_calls_equals_the_keras_ops_graph(rng, monkeypatch):
    """A decoding step's attention written as torch calls (eager torch) against the same step through `keras.ops`:
    padded keys, a row with no key at all (zero context), and a causal step writing its cache."""
    layer = ks.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    memory, query = rng.normal(size=(3, 6, 8)).astype("float32"), rng.normal(size=(3, 1, 8)).astype("float32")
    layer(memory, memory)
    layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    padding = np.array([[True] * 6, [True] * 2 + [False] * 4, [False] * 6])
    projected = layer.key_value_cache(memory)

    def steps():
        cross, _ = layer(query, memory, value_mask=padding, cache=projected)
        causal, written = layer(query, query, use_causal_mask=True, cache=projected, cache_update_index=3)
        return [to_numpy(x) for x in (cross, causal, written)]

    in_torch = steps()
    from keras_seq.backend import common

    monkeypatch.setattr(backend, "single_query_attention", common.single_query_attention)
    through_keras_ops = steps()
    for a, b in zip(in_torch, through_keras_ops):
        assert_close(a, b, atol=1e-6)
    assert_close(in_torch[0][2], np.broadcast_to(to_numpy(layer.output_bias), (1, 8)), atol=1e-6)

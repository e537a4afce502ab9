import keras
import numpy as np
import pytest
from layer_checks import assert_close, check_functional_model, fit_reduces_loss, to_numpy

import keras_seq as ks


def numpy_attention(scores, values, mask):
    """Bahdanau et al. (2015) eq. 6 (softmax over unmasked keys) and 5 (weighted sum); empty rows -> 0."""
    scores = np.where(mask[:, None, :], scores, -np.inf)
    shifted = np.exp(scores - np.max(np.where(np.isfinite(scores), scores, -1e30), axis=-1, keepdims=True))
    shifted = np.where(mask[:, None, :], shifted, 0.0)
    totals = shifted.sum(-1, keepdims=True)
    weights = np.divide(shifted, totals, out=np.zeros_like(shifted), where=totals > 0)
    return weights @ values, weights


def numpy_bahdanau(query, keys, W, U, v, b=None):
    """Bahdanau et al. (2015), appendix A.1.2: e_ij = v^T tanh(W s_i + U h_j (+ b)), looped over i and j."""
    scores = np.zeros((query.shape[0], query.shape[1], keys.shape[1]))
    for n in range(query.shape[0]):
        for i in range(query.shape[1]):
            for j in range(keys.shape[1]):
                hidden = W.T @ query[n, i] + U.T @ keys[n, j] + (0 if b is None else b)
                scores[n, i, j] = v @ np.tanh(hidden)
    return scores


@pytest.fixture
def batch(rng):
    query = rng.normal(size=(3, 4, 5)).astype("float32")
    keys = rng.normal(size=(3, 6, 7)).astype("float32")
    values = rng.normal(size=(3, 6, 2)).astype("float32")
    mask = np.ones((3, 6), bool)
    mask[0, 4:] = False
    mask[2, :] = False  # a fully masked row
    return query, keys, values, mask


@pytest.mark.parametrize("normalize", [False, True])
def test_bahdanau_matches_eq_4_3_to_4_5(batch, normalize):
    query, keys, values, mask = batch
    layer = ks.layers.BahdanauAttention(units=8, normalize=normalize)
    context, weights = layer(query, keys, values, mask=mask, return_attention_scores=True)
    W, U, v = (to_numpy(w) for w in (layer.query_kernel, layer.key_kernel, layer.attention_v))
    b = None
    if normalize:
        v = to_numpy(layer.attention_g) * v / np.linalg.norm(v)
        b = to_numpy(layer.attention_b)
    expected_context, expected_weights = numpy_attention(numpy_bahdanau(query, keys, W, U, v, b), values, mask)
    assert_close(weights, expected_weights, atol=1e-5)
    assert_close(context, expected_context, atol=1e-5)
    assert np.all(to_numpy(context)[2] == 0) and np.all(to_numpy(weights)[2] == 0)


def test_single_step_query_equals_sequence_query(batch):
    query, keys, values, mask = batch
    layer = ks.layers.BahdanauAttention(units=8)
    context, weights = layer(query, keys, values, mask=mask, return_attention_scores=True)
    step_context, step_weights = layer(query[:, 1], keys, values, mask=mask, return_attention_scores=True)
    assert tuple(step_context.shape) == (3, 2) and tuple(step_weights.shape) == (3, 6)
    assert_close(step_context, to_numpy(context)[:, 1])
    assert_close(step_weights, to_numpy(weights)[:, 1])


def test_values_default_to_keys_and_keras_mask_is_used(batch):
    query, keys, _, mask = batch
    layer = ks.layers.BahdanauAttention(units=4)
    explicit = to_numpy(layer(query, keys, keys, mask=mask))
    ids = np.where(mask, 1, 0)
    ids_in = keras.Input((6,), dtype="int32")
    keys_in = keras.Input((6, 7))
    query_in = keras.Input((4, 5))
    masked_keys = keras.layers.Masking(mask_value=0.0)(
        keras.layers.Multiply()([keys_in, keras.ops.expand_dims(keras.ops.cast(ids_in, "float32"), -1)])
    )
    model = keras.Model([query_in, keys_in, ids_in], layer(query_in, masked_keys))
    assert_close(model([query, keys, ids]), explicit, atol=1e-5)


@pytest.mark.parametrize("score", ["dot", "general", "concat"])
@pytest.mark.parametrize("scale", [False, True])
def test_luong_scores(rng, batch, score, scale):
    query, _, values, mask = batch
    keys = rng.normal(size=(3, 6, 5)).astype("float32")  # dot needs Dq == Dk
    layer = ks.layers.LuongAttention(score=score, scale=scale)
    context, weights = layer(query, keys, values, mask=mask, return_attention_scores=True)
    if score == "dot":
        scores = np.einsum("bqd,bkd->bqk", query, keys)
    elif score == "general":
        Wa = to_numpy(layer.score_kernel)
        scores = np.einsum("bqd,de,bke->bqk", query, Wa, keys)
    else:
        Wq, Wk, v = (to_numpy(w) for w in (layer.query_kernel, layer.key_kernel, layer.attention_v))
        # v^T tanh(W_a [q; k]) with W_a = [Wq; Wk] stacked on the input axis.
        Wa = np.concatenate([Wq, Wk], axis=0)
        scores = np.zeros((3, 4, 6))
        for n in range(3):
            for i in range(4):
                for j in range(6):
                    scores[n, i, j] = v @ np.tanh(Wa.T @ np.concatenate([query[n, i], keys[n, j]]))
    if scale:
        layer.score_scale.assign(0.5)
        context, weights = layer(query, keys, values, mask=mask, return_attention_scores=True)
        scores = 0.5 * scores
    expected_context, expected_weights = numpy_attention(scores, values, mask)
    assert_close(weights, expected_weights, atol=1e-5)
    assert_close(context, expected_context, atol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda dtype=None: ks.layers.BahdanauAttention(6, normalize=True, dtype=dtype),
        lambda dtype=None: ks.layers.LuongAttention("concat", scale=True, dtype=dtype),
        lambda dtype=None: ks.layers.LuongAttention("general", dtype=dtype),
    ],
    ids=["bahdanau", "luong-concat", "luong-general"],
)
def test_model_contract(tmp_path, batch, make):
    query, keys, values, _ = batch
    check_functional_model(
        make, [((4, 5), "float32"), ((6, 7), "float32"), ((6, 2), "float32")], [query, keys, values], tmp_path
    )


@pytest.mark.parametrize("attention", [lambda: ks.layers.BahdanauAttention(16), lambda: ks.layers.LuongAttention()])
def test_attention_learns_to_look_up_a_key(rng, attention):
    """Return the value stored under the key equal to the query: solvable only by attending."""
    n, length, width = 256, 6, 8
    keys = rng.normal(size=(n, length, width)).astype("float32")
    values = rng.normal(size=(n, length, 1)).astype("float32")
    target = rng.integers(0, length, n)
    query = keys[np.arange(n), target]
    q_in, k_in, v_in = keras.Input((width,)), keras.Input((length, width)), keras.Input((length, 1))
    model = keras.Model([q_in, k_in, v_in], attention()(q_in, k_in, v_in))
    fit_reduces_loss(
        model, [query, keys, values], values[np.arange(n), target], "mse", epochs=60, factor=0.3, learning_rate=3e-2
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: ks.layers.BahdanauAttention(8),
        lambda: ks.layers.BahdanauAttention(8, normalize=True),
        lambda: ks.layers.LuongAttention("concat", units=8),
        lambda: ks.layers.LuongAttention("general"),
    ],
)
def test_keys_projected_once_serve_every_query(batch, make):
    """`project_keys` is the keys' term of the scores (`U_a h_j`, NumPy; the keys themselves for `general`), and a
    step-by-step caller that passes it as `projected_keys` gets the context and weights of a plain call."""
    query, keys, values, mask = batch
    layer = make()
    context, weights = layer(query, keys, values, mask=mask, return_attention_scores=True)
    projected = layer.project_keys(keys)
    expected = keys @ to_numpy(layer.key_kernel) if hasattr(layer, "key_kernel") else keys
    assert_close(projected, expected, atol=1e-5)
    for step in range(query.shape[1]):
        step_context, step_weights = layer(
            query[:, step], keys, values, mask=mask, return_attention_scores=True, projected_keys=projected
        )
        assert_close(step_context, to_numpy(context)[:, step], atol=1e-5)
        assert_close(step_weights, to_numpy(weights)[:, step], atol=1e-5)
    with pytest.raises(ValueError, match=r"projected_keys.*shape \(3, 6, None\).*got shape \(3, 5, 8\)"):
        layer(query, keys, values, mask=mask, projected_keys=np.zeros((3, 5, 8), "float32"))


def dot_model(query_dim, keys_dim):
    """A functional model whose `dot` score cannot compare its query and keys."""
    query, keys = keras.Input((4, query_dim)), keras.Input((6, keys_dim))
    return keras.Model([query, keys], ks.layers.LuongAttention("dot")(query, keys))


def test_bad_inputs_raise_value_errors(batch):
    query, keys, values, mask = batch
    built = ks.layers.BahdanauAttention(4)
    built(query, keys)
    cases = [
        (lambda: ks.layers.BahdanauAttention(4)(query[0, 0], keys), r"BahdanauAttention.*query.*rank 2 or rank 3"),
        (lambda: ks.layers.BahdanauAttention(4)(query, keys[0]), r"keys.*rank 3"),
        (lambda: ks.layers.BahdanauAttention(4)(query, keys, values[:2]), r"values.*batch size 3"),
        (lambda: ks.layers.BahdanauAttention(4)(query, keys, values[:, :5]), r"values.*the keys' length 6"),
        (lambda: ks.layers.BahdanauAttention(4)(query, keys, mask=mask[:, :5]), r"mask.*shape \(3, 6\)"),
        (lambda: ks.layers.BahdanauAttention(4)(query.astype("int32"), keys), r"query.*floating-point"),
        (lambda: built(query[..., :4], keys), r"query.*feature size 5"),
        (lambda: ks.layers.BahdanauAttention(0), r"units.*positive integer"),
        (lambda: ks.layers.LuongAttention(score="cosine"), r"score.*dot"),
        (lambda: ks.layers.LuongAttention(score="dot")(query, keys), r"keys.*feature size 5.*score='dot'.*got 7"),
        (lambda: dot_model(5, 7), r"LuongAttention.*keys.*feature size 5.*score='dot'.*got 7"),
        (lambda: built(query, keys[..., :6]), r"BahdanauAttention.*keys.*feature size 7, got 6"),
        (lambda: ks.layers.BahdanauAttention(4)(query, keys[:2]), r"keys.*batch size 3, got 2"),
        (lambda: built(query, keys, mask=mask[:2]), r"mask.*shape \(3, 6\), got shape \(2, 6\)"),
        (lambda: built(query, keys, mask=np.ones((3, 4, 6), bool)), r"mask.*shape \(3, 6\), got shape \(3, 4, 6\)"),
        (lambda: built(query[:, 0], keys, mask=mask[:, :4]), r"mask.*shape \(3, 6\), got shape \(3, 4\)"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()

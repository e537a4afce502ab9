import keras
import numpy as np
import pytest
from layer_checks import to_numpy
from test_transformer_models import END, START, reversal_data

import keras_seq as ks
from keras_seq.layers.input_feeding import InputFeedingDecoder


def uncached_greedy(model, source, steps):
    ids = np.full((len(source), 1), START, "int32")
    for _ in range(steps):
        logits = to_numpy(model({"encoder_inputs": source, "decoder_inputs": ids}))
        ids = np.concatenate([ids, logits[:, -1, 1:].argmax(-1)[:, None].astype("int32") + 1], axis=1)
    return ids


@pytest.mark.nightly  # trains three models to convergence
@pytest.mark.parametrize("attention, input_feeding", [("bahdanau", False), ("luong", False), ("bahdanau", True)])
def test_attention_seq2seq_learns_reversal_and_aligns(rng, tmp_path, attention, input_feeding):
    inputs, target = reversal_data(rng, 640)
    model = ks.models.rnn_seq2seq(12, 12, embedding_dim=16, units=32, attention=attention, input_feeding=input_feeding)
    model.compile(keras.optimizers.Adam(1e-2), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=0))
    model.fit({k: x[:512] for k, x in inputs.items()}, target[:512], epochs=25, batch_size=32, verbose=0)
    source = inputs["encoder_inputs"][512:]
    generated = to_numpy(model.generate(source, 9, end_id=END))
    exact = np.mean([np.array_equal(g[1:], t) for g, t in zip(generated, target[512:])])
    assert exact > 0.8, exact  # whole sequences right; chance is about 1e-6
    # Reversal: the first target token is the last real source token, so attention
    # (e.g. for plotting a generated translation) must point there.
    weights = to_numpy(model.attention_weights({"encoder_inputs": source, "decoder_inputs": generated[:, :-1]}))
    assert weights.shape == (128, 8, 6)
    last_real = (source != 0).sum(1) - 1
    assert np.mean(weights[:, 0].argmax(-1) == last_real) > 0.9
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(weights[source[:, None, :].repeat(8, 1) == 0] == 0)  # padding gets no weight
    path = tmp_path / "rnn_seq2seq.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_numpy(loaded.generate(source, 9, end_id=END)), generated)


@pytest.mark.parametrize(
    "cell, attention, input_feeding",
    [("gru", "bahdanau", False), ("lstm", "luong", False), ("coupled_lstm", None, False), ("lstm", "bahdanau", True)],
)
def test_cached_generation_equals_uncached(rng, cell, attention, input_feeding):
    model = ks.models.rnn_seq2seq(
        12, 10, embedding_dim=8, units=16, cell=cell, attention=attention, input_feeding=input_feeding
    )
    source = rng.integers(3, 12, size=(3, 5)).astype("int32")
    source[1, 3:] = 0
    source[2] = 0  # an all-padding source stays finite
    np.testing.assert_array_equal(to_numpy(model.generate(source, 6)), uncached_greedy(model, source, 5))
    assert to_numpy(model.generate(source, 6, strategy="beam", num_beams=3)).shape == (3, 6)


@pytest.mark.parametrize(
    "cell, attention, input_feeding", [("gru", "bahdanau", False), ("lstm", "luong", False), ("gru", "luong", True)]
)
def test_all_padding_sequences_stay_finite_in_training(rng, cell, attention, input_feeding):
    inputs, target = reversal_data(rng, 8)
    inputs["encoder_inputs"][0] = 0  # a source of padding only
    inputs["decoder_inputs"][1], target[1] = 0, 0  # a target of padding only
    model = ks.models.rnn_seq2seq(
        12, 12, embedding_dim=8, units=8, cell=cell, attention=attention, input_feeding=input_feeding
    )
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(inputs, target, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert all(np.all(np.isfinite(to_numpy(w))) for w in model.weights)
    assert np.all(np.isfinite(to_numpy(model(inputs))))
    weights = to_numpy(model.attention_weights(inputs))
    assert np.all(weights[0] == 0)  # nothing to attend to: zero weights, not NaN
    np.testing.assert_allclose(weights[2:].sum(-1), 1.0, atol=1e-5)


def test_unidirectional_encoder_and_bad_arguments(rng):
    model = ks.models.rnn_seq2seq(12, 10, embedding_dim=8, units=16, bidirectional_encoder=False, attention=None)
    source = rng.integers(3, 12, size=(2, 5)).astype("int32")
    np.testing.assert_array_equal(to_numpy(model.generate(source, 6)), uncached_greedy(model, source, 5))
    cases = [
        (
            lambda: model.attention_weights({"encoder_inputs": source, "decoder_inputs": source}),
            r"attention_weights.*bahdanau",
        ),
        (
            lambda: ks.models.rnn_seq2seq(10, 10, attention="additive"),
            r"rnn_seq2seq.*attention.*'bahdanau'.*got 'additive'",
        ),
        (lambda: ks.models.rnn_seq2seq(10, 10, cell="transformer"), r"rnn_seq2seq.*cell.*'gru'.*got 'transformer'"),
        (lambda: ks.models.rnn_seq2seq(10, 0), r"rnn_seq2seq.*target_vocabulary_size"),
        (
            lambda: ks.models.rnn_seq2seq(10, 10, attention=None, input_feeding=True),
            r"rnn_seq2seq.*attention.*input_feeding=True.*None",
        ),
        (
            lambda: ks.models.rnn_seq2seq(10, 10, attention="luong_dot"),
            r"rnn_seq2seq.*bidirectional_encoder.*False.*luong_dot.*got True",
        ),
        (lambda: ks.models.rnn_seq2seq(10, 10, dropout=1.0), r"rnn_seq2seq.*dropout.*\[0, 1\).*got 1.0"),
        (lambda: model.generate(np.full((1, 4), 12, "int32"), 6), r"RNNSeq2Seq.generate.*inputs.*ids in \[0, 12\)"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.parametrize("input_feeding", [False, True])
def test_three_way_tied_embeddings_are_one_table(rng, input_feeding):
    """Press & Wolf (2017): logits = s E^T + b with E the (shared) embedding; cached decoding agrees."""
    build = lambda **tying: ks.models.rnn_seq2seq(
        12, 12, embedding_dim=16, units=16, input_feeding=input_feeding, **tying
    )
    tied, untied = build(tie_embeddings=True, share_embeddings=True), build()
    assert tied.source_embedding is tied.target_embedding
    assert tied.count_params() == untied.count_params() - 2 * 12 * 16  # no target table, no output kernel
    inputs = {
        "encoder_inputs": rng.integers(3, 12, (3, 5)).astype("int32"),
        "decoder_inputs": rng.integers(3, 12, (3, 6)).astype("int32"),
    }
    inputs["encoder_inputs"][1, 3:] = 0
    attentional = keras.Model(tied.inputs, tied.get_layer("attentional_state").output)
    table = to_numpy(tied.source_embedding.embeddings)
    expected = to_numpy(attentional(inputs)) @ table.T + to_numpy(tied.head.bias)
    np.testing.assert_allclose(to_numpy(tied(inputs)), expected, rtol=1e-4, atol=1e-4)
    source = inputs["encoder_inputs"]
    np.testing.assert_array_equal(to_numpy(tied.generate(source, 6)), uncached_greedy(tied, source, 5))
    loaded = type(tied).from_config(tied.get_config())
    loaded.set_weights(tied.get_weights())
    np.testing.assert_allclose(to_numpy(loaded(inputs)), to_numpy(tied(inputs)), rtol=1e-5, atol=1e-5)


def test_tying_needs_matching_sizes():
    with pytest.raises(ValueError, match=r"rnn_seq2seq.*tie_embeddings.*units == embedding_dim.*units=32"):
        ks.models.rnn_seq2seq(12, 12, embedding_dim=16, units=32, tie_embeddings=True)
    with pytest.raises(ValueError, match=r"rnn_seq2seq.*share_embeddings.*equal source and target.*12 and 10"):
        ks.models.rnn_seq2seq(12, 10, embedding_dim=16, units=16, share_embeddings=True)


@pytest.mark.parametrize("input_feeding", [False, True])
def test_dropout_acts_in_training_only(rng, input_feeding):
    """With `dropout`, training outputs change; evaluation and `generate` equal the same weights without it."""
    build = lambda rate: ks.models.rnn_seq2seq(
        12, 10, embedding_dim=8, units=16, input_feeding=input_feeding, dropout=rate
    )
    dropped, plain = build(0.5), build(0.0)
    plain.set_weights(dropped.get_weights())
    inputs = {
        "encoder_inputs": rng.integers(3, 12, (4, 5)).astype("int32"),
        "decoder_inputs": rng.integers(3, 10, (4, 6)).astype("int32"),
    }
    evaluated = to_numpy(plain(inputs, training=False))
    np.testing.assert_allclose(to_numpy(dropped(inputs, training=False)), evaluated, rtol=1e-5, atol=1e-6)
    trained = to_numpy(dropped(inputs, training=True))
    assert np.isfinite(trained).all() and np.abs(trained - evaluated).max() > 1e-3
    source = inputs["encoder_inputs"]
    np.testing.assert_array_equal(to_numpy(dropped.generate(source, 6)), to_numpy(plain.generate(source, 6)))
    assert type(dropped).from_config(dropped.get_config()).get_config()["dropout"] == 0.5


def test_input_feeding_decoder_computes_bahdanau_sec_3_1_and_appendix_a(rng):
    """Bahdanau et al. (2015): e_ij = v^T tanh(W s_{i-1} + U h_j), alpha = softmax_j e, c_i = sum_j alpha_ij h_j,
    s_i = f(s_{i-1}, y_{i-1}, c_i) with f the Elman cell tanh([y; c] W_x + s U_s + b), in NumPy."""
    batch, steps, source_length, embedding_dim, annotation_dim, units = 2, 4, 5, 3, 6, 7
    y = rng.normal(size=(batch, steps, embedding_dim)).astype("float32")
    h = rng.normal(size=(batch, source_length, annotation_dim)).astype("float32")
    s0 = rng.normal(size=(batch, units)).astype("float32")
    source_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    decoder = InputFeedingDecoder("rnn", units, "bahdanau")
    states, contexts, weights = (to_numpy(x) for x in decoder(y, h, [s0], source_mask))

    W_a, U_a, v_a = (to_numpy(w) for w in decoder.attention.weights)
    W_x, U_s, b = (to_numpy(w) for w in decoder.cell.weights)
    s = s0.astype("float64")
    for i in range(steps):
        e = np.tanh((s @ W_a)[:, None] + h @ U_a) @ v_a  # appendix A.1.2, (B, S)
        e = np.where(source_mask, e, -np.inf)
        alpha = np.exp(e - e.max(-1, keepdims=True))
        alpha /= alpha.sum(-1, keepdims=True)  # eq. 6
        c = np.einsum("bs,bsd->bd", alpha, h)  # eq. 5
        s = np.tanh(np.concatenate([y[:, i], c], -1) @ W_x + s @ U_s + b)  # sec. 3.1
        np.testing.assert_allclose(weights[:, i], alpha, atol=1e-5)
        np.testing.assert_allclose(contexts[:, i], c, atol=1e-5)
        np.testing.assert_allclose(states[:, i], s, atol=1e-5)

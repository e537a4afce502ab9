import keras
import numpy as np
import pytest
from layer_checks import to_numpy
from test_transformer_models import END, START, reversal_data

import keras_seq as ks


def uncached_greedy(model, source, steps):
    ids = np.full((len(source), 1), START, "int32")
    for _ in range(steps):
        logits = to_numpy(model({"encoder_inputs": source, "decoder_inputs": ids}))
        ids = np.concatenate([ids, logits[:, -1, 1:].argmax(-1)[:, None].astype("int32") + 1], axis=1)
    return ids


@pytest.mark.parametrize("attention", ["bahdanau", "luong"])
def test_attention_seq2seq_learns_reversal_and_aligns(rng, tmp_path, attention):
    inputs, target = reversal_data(rng, 640)
    model = ks.models.rnn_seq2seq(12, 12, embedding_dim=16, units=32, attention=attention)
    model.compile(keras.optimizers.Adam(1e-2), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=0))
    model.fit({k: x[:512] for k, x in inputs.items()}, target[:512], epochs=15, batch_size=32, verbose=0)
    source = inputs["encoder_inputs"][512:]
    generated = to_numpy(model.generate(source, 9, end_id=END))
    exact = np.mean([np.array_equal(g[1:], t) for g, t in zip(generated, target[512:])])
    assert exact > 0.9, exact
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
    "cell, attention", [("gru", "bahdanau"), ("lstm", "luong"), ("coupled_lstm", None)]
)
def test_cached_generation_equals_uncached(rng, cell, attention):
    model = ks.models.rnn_seq2seq(12, 10, embedding_dim=8, units=16, cell=cell, attention=attention)
    source = rng.integers(3, 12, size=(3, 5)).astype("int32")
    source[1, 3:] = 0
    source[2] = 0  # an all-padding source stays finite
    np.testing.assert_array_equal(to_numpy(model.generate(source, 6)), uncached_greedy(model, source, 5))
    assert to_numpy(model.generate(source, 6, strategy="beam", num_beams=3)).shape == (3, 6)


@pytest.mark.parametrize("cell, attention", [("gru", "bahdanau"), ("lstm", "luong")])
def test_all_padding_sequences_stay_finite_in_training(rng, cell, attention):
    inputs, target = reversal_data(rng, 8)
    inputs["encoder_inputs"][0] = 0  # a source of padding only
    inputs["decoder_inputs"][1], target[1] = 0, 0  # a target of padding only
    model = ks.models.rnn_seq2seq(12, 12, embedding_dim=8, units=8, cell=cell, attention=attention)
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
        (lambda: model.attention_weights({"encoder_inputs": source, "decoder_inputs": source}), r"attention_weights.*bahdanau"),
        (lambda: ks.models.rnn_seq2seq(10, 10, attention="additive"), r"rnn_seq2seq.*attention.*'bahdanau'.*got 'additive'"),
        (lambda: ks.models.rnn_seq2seq(10, 10, cell="transformer"), r"rnn_seq2seq.*cell.*'gru'.*got 'transformer'"),
        (lambda: ks.models.rnn_seq2seq(10, 0), r"rnn_seq2seq.*target_vocabulary_size"),
        (lambda: model.generate(np.full((1, 4), 12, "int32"), 6), r"RNNSeq2Seq.generate.*inputs.*ids in \[0, 12\)"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()

import keras
import numpy as np
import pytest
from layer_checks import to_numpy

import keras_seq as ks
from keras_seq.data import alice_text, tbptt_windows
from keras_seq.layers.recurrent import CELLS


def uncached_greedy(model, inputs, steps):
    """Rerun the whole prefix for every new token (id 0, padding, excluded)."""
    ids = inputs["token_ids"] if isinstance(inputs, dict) else inputs
    for _ in range(steps):
        feed = {**inputs, "token_ids": ids} if isinstance(inputs, dict) else ids
        next_ids = to_numpy(model(feed))[:, -1, 1:].argmax(-1).astype("int32") + 1
        ids = np.concatenate([ids, next_ids[:, None]], axis=1)
    return ids


@pytest.mark.parametrize("cell", CELLS)
def test_cached_generation_equals_uncached(cell):
    model = ks.models.rnn_lm(20, embedding_dim=8, units=16, cell=cell, num_layers=2)
    prompt = np.array([[3, 4, 5], [6, 7, 8]], "int32")
    generated = to_numpy(model.generate(prompt, 8))
    np.testing.assert_array_equal(generated, uncached_greedy(model, prompt, 5))
    np.testing.assert_array_equal(to_numpy(model.generate(prompt, 8, strategy="beam", num_beams=1)), generated)


def test_conditioned_model_uses_its_vector(rng):
    """Murphy (2022), eq. 15.5: h_t = phi(W_xh [x; y_{t-1}] + W_hh h_{t-1}) with x a fixed vector."""
    model = ks.models.rnn_lm(20, embedding_dim=8, units=16, condition_dim=3)
    prompt = np.array([[3, 4], [5, 6]], "int32")
    for scale in (1.0, 30.0):
        inputs = {"token_ids": prompt, "condition": (rng.normal(size=(2, 3)) * scale).astype("float32")}
        np.testing.assert_array_equal(to_numpy(model.generate(inputs, 7)), uncached_greedy(model, inputs, 5))
    with pytest.raises(ValueError, match=r"RNNLM.generate.*inputs.*token_ids"):
        model.generate(prompt, 7)


def test_character_model_continues_a_phrase_from_the_embedded_text():
    """vec2seq (Murphy, 2022, sec. 15.2.1): characters continued from a prefix, after training on real text."""
    phrase = "the white rabbit. "
    text = alice_text().lower()[:600] + phrase * 20
    alphabet = sorted(set(text))
    ids = np.array([alphabet.index(c) + 1 for c in text])
    x, y = tbptt_windows(ids, batch_size=4, window=24)
    model = ks.models.rnn_lm(len(alphabet) + 1, embedding_dim=16, units=64)
    model.compile(keras.optimizers.Adam(1e-2), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0))
    model.fit(x, y, epochs=30, batch_size=4, verbose=0)
    prompt = np.array([[alphabet.index(c) + 1 for c in "the white r"]], "int32")
    generated = to_numpy(model.generate(prompt, 11 + 6))[0]
    assert "".join(alphabet[i - 1] for i in generated) == "the white rabbit."


def test_stateful_windows_continue_the_full_sequence(rng):
    """Truncated BPTT (Williams and Peng, 1990): the state carried across windows is the true continuation."""
    stream = rng.integers(1, 12, size=97)
    x, y = tbptt_windows(stream, batch_size=2, window=8)
    assert x.shape == (12, 8) and np.array_equal(x[2, 0], x[0, -1] * 0 + stream[8])  # row 0 of window 1
    np.testing.assert_array_equal(y[0], stream[1:9])
    full = ks.models.rnn_lm(12, embedding_dim=8, units=16, cell="gru")
    stateful = ks.models.rnn_lm(12, embedding_dim=8, units=16, cell="gru", stateful=True, batch_size=2)
    stateful.set_weights(full.get_weights())
    first, second = to_numpy(stateful(x[0:2])), to_numpy(stateful(x[2:4]))
    whole = to_numpy(full(np.concatenate([x[0:2], x[2:4]], axis=1)))
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), whole, atol=1e-5)
    for layer in stateful.recurrent_layers:
        layer.reset_state()
    np.testing.assert_allclose(to_numpy(stateful(x[2:4])), to_numpy(full(x[2:4])), atol=1e-5)
    stateful.compile(keras.optimizers.Adam(1e-2), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0))
    losses = stateful.fit(x, y, epochs=3, batch_size=2, shuffle=False, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses))


def test_save_load_and_bad_arguments(tmp_path):
    model = ks.models.rnn_lm(15, embedding_dim=4, units=8, cell="peephole_lstm")
    prompt = np.array([[3, 4]], "int32")
    path = tmp_path / "rnn_lm.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_numpy(loaded.generate(prompt, 6)), to_numpy(model.generate(prompt, 6)))
    cases = [
        (lambda: ks.models.rnn_lm(15, cell="elman"), r"rnn_lm.*cell"),
        (lambda: ks.models.rnn_lm(15, stateful=True), r"rnn_lm.*batch_size"),
        (lambda: ks.models.rnn_lm(15, condition_dim=0), r"rnn_lm.*condition_dim"),
        (lambda: model.generate(np.ones((1, 7), "int32"), 6), r"RNNLM.generate.*inputs.*max_length=6"),
        (lambda: tbptt_windows([1, 2, 3], 2, 4), r"tbptt_windows.*more than"),
        (lambda: tbptt_windows(np.ones((3, 3)), 2, 4), r"tbptt_windows.*1-D"),
        (lambda: tbptt_windows(np.arange(50), 0, 4), r"tbptt_windows: `batch_size` expected a positive integer, got 0"),
        (
            lambda: tbptt_windows(np.arange(50), 2, True),
            r"tbptt_windows: `window` expected a positive integer, got True",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()

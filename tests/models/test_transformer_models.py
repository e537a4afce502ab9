import keras
import numpy as np
import pytest
from layer_checks import to_numpy

import keras_seq as ks

START, END = 1, 2


def reversal_data(rng, n, length=6, vocabulary_size=12):
    """Source ids 3.. (right-padded); target: the source reversed, then END."""
    source = rng.integers(3, vocabulary_size, size=(n, length)).astype("int32")
    source[::3, length - 2 :] = 0
    target = np.zeros((n, length + 2), "int32")
    for row in range(n):
        reversed_ids = source[row][source[row] != 0][::-1]
        target[row, : len(reversed_ids) + 1] = [*reversed_ids, END]
    decoder_inputs = np.concatenate([np.full((n, 1), START, "int32"), target[:, :-1]], axis=1)
    return {"encoder_inputs": source, "decoder_inputs": decoder_inputs}, target


def small_seq2seq(**kwargs):
    options = dict(num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64, dropout=0.0)
    return ks.models.transformer_seq2seq(12, 12, 8, 10, **{**options, **kwargs})


def test_seq2seq_learns_reversal_and_generates_it(rng, tmp_path):
    inputs, target = reversal_data(rng, 640)
    model = small_seq2seq()
    model.compile(keras.optimizers.Adam(3e-3), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=0))
    model.fit({k: x[:512] for k, x in inputs.items()}, target[:512], epochs=20, batch_size=32, verbose=0)
    source = inputs["encoder_inputs"][512:]
    generated = to_numpy(model.generate(source, 9, end_id=END))
    assert np.all(generated[:, 0] == START)
    exact = np.mean([np.array_equal(g[1:], t) for g, t in zip(generated, target[512:])])
    assert exact > 0.9, exact  # a model that ignores the source gets ~0
    beam = to_numpy(model.generate(source, 9, end_id=END, strategy="beam", num_beams=3))
    assert np.mean([np.array_equal(b[1:], t) for b, t in zip(beam, target[512:])]) >= exact - 0.02
    path = tmp_path / "seq2seq.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ks.models.TransformerSeq2Seq)
    np.testing.assert_array_equal(to_numpy(loaded.generate(source, 9, end_id=END)), generated)


@pytest.mark.parametrize("norm_first", [True, False])
def test_seq2seq_cached_generation_equals_uncached(rng, norm_first):
    model = small_seq2seq(norm_first=norm_first, num_layers=2)
    source = rng.integers(3, 12, size=(3, 7)).astype("int32")
    source[1, 5:] = 0
    cached = to_numpy(model.generate(source, 8))
    ids = np.full((3, 1), START, "int32")
    for _ in range(7):
        logits = to_numpy(model({"encoder_inputs": source, "decoder_inputs": ids}))
        ids = np.concatenate([ids, logits[:, -1, 1:].argmax(-1)[:, None].astype("int32") + 1], axis=1)
    np.testing.assert_array_equal(cached, ids)


def test_source_padding_does_not_change_the_output(rng):
    model = small_seq2seq()
    source = np.array([[5, 6, 7, 0, 0]], "int32")
    decoder_inputs = np.array([[START, 4, 9]], "int32")
    padded = to_numpy(model({"encoder_inputs": source, "decoder_inputs": decoder_inputs}))
    unpadded = to_numpy(model({"encoder_inputs": source[:, :3], "decoder_inputs": decoder_inputs}))
    np.testing.assert_allclose(padded, unpadded, atol=1e-5)


def test_bad_arguments_raise_value_errors():
    cases = [
        (lambda: ks.models.transformer_seq2seq(10, 10, 8, 8, hidden_dim=30, num_heads=4), r"transformer_seq2seq.*hidden_dim.*multiple of num_heads=4"),
        (lambda: ks.models.transformer_seq2seq(10, 0, 8, 8), r"target_vocabulary_size.*positive integer"),
        (lambda: ks.models.transformer_seq2seq(10, 10, 8, 8, positional="rotary"), r"positional"),
        (lambda: ks.models.transformer_lm(10, 8, num_layers=0), r"transformer_lm.*num_layers"),
        (lambda: small_seq2seq().generate(np.ones((1, 4), "int32"), 11), r"TransformerSeq2Seq.generate.*max_length.*10"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_classifier_learns_which_token_is_more_frequent(rng, pooling):
    """Label: are there more 3s than 4s? The first position carries a [CLS]-style id 5."""
    ids = rng.integers(3, 5, size=(800, 9)).astype("int32")
    ids[:, 0] = 5
    ids[::4, 7:] = 0
    labels = ((ids == 3).sum(1) > (ids == 4).sum(1)).astype("int32")
    model = ks.models.transformer_classifier(6, 2, 9, num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64, dropout=0.0, pooling=pooling)
    model.compile(keras.optimizers.Adam(3e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ids[:640], labels[:640], epochs=15, batch_size=32, verbose=0)
    accuracy = np.mean(to_numpy(model.predict(ids[640:], verbose=0)).argmax(-1) == labels[640:])
    assert accuracy > 0.9, accuracy


def test_warmup_schedule_matches_vaswani_formula():
    schedule = ks.schedules.InverseSquareRootWarmup(hidden_dim=512, warmup_steps=4000)
    for step in (0, 99, 3999, 4000, 20000):
        n = step + 1
        expected = 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5)
    clone = ks.schedules.InverseSquareRootWarmup.from_config(schedule.get_config())
    assert clone.get_config() == schedule.get_config()
    optimizer = keras.optimizers.Adam(schedule)
    restored = keras.optimizers.Adam.from_config(optimizer.get_config())
    assert float(restored.learning_rate) == pytest.approx(float(schedule(0)), rel=1e-5)
    with pytest.raises(ValueError, match=r"InverseSquareRootWarmup.*warmup_steps"):
        ks.schedules.InverseSquareRootWarmup(256, warmup_steps=0)

import keras
import numpy as np
import pytest
import tensorflow as tf
from layer_checks import assert_close, compiled_predict, to_numpy

import keras_seq as ks
from keras_seq.data import TokenMasker

CLS, SEP, MASK = 1, 2, 3


def small_mlm(vocabulary_size=13, **kwargs):
    options = dict(num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64, dropout=0.0)
    return ks.models.transformer_mlm(vocabulary_size, 16, **{**options, **kwargs})


def bert_like_ids(rng, n, length, vocabulary_size):
    """[CLS] ordinary ids ... [SEP], then padding on every third row."""
    ids = rng.integers(MASK + 1, vocabulary_size, size=(n, length)).astype("int32")
    ids[:, 0], ids[:, length // 2] = CLS, SEP
    ids[::3, -length // 4 :] = 0
    return ids


def test_masking_follows_bert_proportions_and_never_touches_padding_or_special_ids(rng):
    vocabulary_size = 30
    ids = bert_like_ids(rng, 2000, 64, vocabulary_size)
    inputs, labels = TokenMasker(vocabulary_size, MASK, special_ids=(CLS, SEP), seed=0)(ids)
    assert inputs.dtype == labels.dtype == np.int32 and inputs.shape == labels.shape == ids.shape

    selected = labels != TokenMasker.ignore_index
    candidates = ids > MASK
    assert not np.any(selected & ~candidates)  # padding, [CLS], [SEP] never selected
    np.testing.assert_array_equal(labels[selected], ids[selected])
    np.testing.assert_array_equal(inputs[~selected], ids[~selected])
    assert selected[candidates].mean() == pytest.approx(0.15, abs=0.005)  # ~110k candidates

    masked = inputs[selected] == MASK
    changed = ~masked & (inputs[selected] != ids[selected])
    replacements = vocabulary_size - 4  # no padding, [CLS], [SEP], [MASK]
    assert masked.mean() == pytest.approx(0.8, abs=0.015)  # ~17k selected
    # A random id equals the original one with probability 1 / replacements.
    assert changed.mean() == pytest.approx(0.1 * (1 - 1 / replacements), abs=0.01)
    assert (1 - masked.mean() - changed.mean()) == pytest.approx(0.1 + 0.1 / replacements, abs=0.01)
    assert set(np.unique(inputs[selected][changed])) == set(range(MASK + 1, vocabulary_size))


def test_masker_is_seeded_and_gives_the_same_masks_in_numpy_and_tf_data(rng):
    ids = bert_like_ids(rng, 8, 12, 20)
    masker = TokenMasker(20, MASK, special_ids=(CLS, SEP), seed=5)
    first, second = masker(ids), masker(ids)
    assert not np.array_equal(first[0], second[0])  # a fresh mask on every call

    dataset = tf.data.Dataset.from_tensor_slices(ids).batch(8).repeat(2)
    from_tf_data = list(dataset.map(TokenMasker(20, MASK, special_ids=(CLS, SEP), seed=5)).as_numpy_iterator())
    for (inputs, labels), (expected_inputs, expected_labels) in zip(from_tf_data, (first, second)):
        np.testing.assert_array_equal(inputs, expected_inputs)
        np.testing.assert_array_equal(labels, expected_labels)


def test_mlm_loss_counts_only_the_selected_positions(rng):
    ids = bert_like_ids(rng, 6, 12, 13)
    inputs, labels = TokenMasker(13, MASK, special_ids=(CLS, SEP), selection_rate=0.3, seed=1)(ids)
    model = small_mlm()
    logits = to_numpy(model(inputs)).astype("float64")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    selected = labels != 0
    expected = -np.mean(np.take_along_axis(log_probs, labels[..., None], -1)[..., 0][selected])

    loss = ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=TokenMasker.ignore_index)
    np.testing.assert_allclose(to_numpy(loss(labels, model(inputs))), expected, rtol=1e-5)
    model.compile(loss=loss, metrics=[ks.metrics.MaskedAccuracy(ignore_index=0)])
    evaluated = model.evaluate(inputs, labels, batch_size=len(ids), verbose=0, return_dict=True)
    np.testing.assert_allclose(evaluated["loss"], expected, rtol=1e-5)
    accuracy = np.mean(logits.argmax(-1)[selected] == labels[selected])
    np.testing.assert_allclose(evaluated["masked_accuracy"], accuracy, rtol=1e-6)


def test_mlm_learns_to_fill_in_a_counting_pattern():
    """Rows count upward modulo 9 (ids 4..12) from a random start: every masked id follows from its neighbours."""
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 9, 640)
    ids = ((starts[:, None] + np.arange(12)[None]) % 9 + MASK + 1).astype("int32")
    ids[::4, 9:] = 0
    masker = TokenMasker(13, MASK, selection_rate=0.25, seed=0)
    train = [masker(ids[:512]) for _ in range(4)]  # four maskings of each row
    inputs, labels = (np.concatenate(arrays) for arrays in zip(*train))

    model = small_mlm(tie_embeddings=True)
    model.compile(
        keras.optimizers.Adam(1e-2),
        ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=0),
        metrics=[ks.metrics.MaskedAccuracy(ignore_index=0)],
    )
    model.fit(inputs, labels, epochs=8, batch_size=128, verbose=0)
    test_inputs, test_labels = TokenMasker(13, MASK, selection_rate=0.25, seed=1)(ids[512:])
    accuracy = model.evaluate(test_inputs, test_labels, verbose=0, return_dict=True)["masked_accuracy"]
    assert accuracy > 0.9, accuracy  # chance is 1/9; reading only the input id gives at most ~0.2


@pytest.mark.parametrize("tie_embeddings", [False, True])
def test_mlm_saves_loads_and_compiles_to_the_same_logits(rng, tmp_path, tie_embeddings):
    model = small_mlm(tie_embeddings=tie_embeddings, num_layers=2)
    ids = bert_like_ids(rng, 4, 10, 13)
    eager = to_numpy(model(ids))
    assert eager.shape == (4, 10, 13) and eager.dtype == np.float32

    config = model.get_config()
    assert config["tie_embeddings"] is tie_embeddings
    assert ks.models.TransformerMLM.from_config(config).get_config() == config
    path = tmp_path / "mlm.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ks.models.TransformerMLM)
    assert loaded.count_params() == model.count_params()
    assert_close(loaded(ids), eager)
    assert_close(compiled_predict(model, ids), eager, atol=1e-4, rtol=1e-4)


def test_padding_does_not_change_the_logits_of_real_tokens():
    model = small_mlm()
    ids = np.array([[CLS, 5, MASK, 7, SEP]], "int32")
    padded = to_numpy(model(np.pad(ids, ((0, 0), (0, 4)))))
    assert_close(padded[:, :5], model(ids))


def test_bad_arguments_raise_value_errors():
    cases = [
        (
            lambda: ks.models.transformer_mlm(10, 8, hidden_dim=30, num_heads=4),
            r"transformer_mlm.*hidden_dim.*multiple of num_heads=4.*got 30",
        ),
        (lambda: ks.models.transformer_mlm(0, 8), r"transformer_mlm.*vocabulary_size.*positive integer.*got 0"),
        (lambda: ks.models.transformer_mlm(10, 8, dropout=1.5), r"transformer_mlm.*dropout.*\[0, 1\).*got 1.5"),
        (lambda: ks.models.transformer_mlm(10, 8, positional="rotary"), r"transformer_mlm.*positional.*got 'rotary'"),
        (lambda: TokenMasker(10, 0), r"TokenMasker.*mask_id.*ids in \[1, 10\).*got \[0\]"),
        (lambda: TokenMasker(10, 10), r"TokenMasker.*mask_id.*ids in \[1, 10\)"),
        (lambda: TokenMasker(10, 3, special_ids=(1, 12)), r"TokenMasker.*special_ids.*ids in \[0, 10\).*got \[1, 12\]"),
        (lambda: TokenMasker(10, 3, selection_rate=1.5), r"TokenMasker.*selection_rate.*\[0, 1\].*got 1.5"),
        (
            lambda: TokenMasker(10, 3, mask_rate=0.8, random_rate=0.3),
            r"TokenMasker.*mask_rate \+ random_rate.*at most 1",
        ),
        (lambda: TokenMasker(4, 3, special_ids=(1, 2)), r"TokenMasker.*vocabulary_size.*ids besides padding"),
        (lambda: TokenMasker(10, 3, seed=1.5), r"TokenMasker.*seed.*integer or None.*got 1.5"),
        (lambda: TokenMasker(10, 3)(np.ones((2, 3), "float32")), r"TokenMasker.*token_ids.*integer token ids.*float32"),
        (
            lambda: TokenMasker(10, 3)(np.array([[1, 10]])),
            r"TokenMasker.*token_ids.*ids in \[0, 10\).*got ids in \[1, 10\]",
        ),
        (
            lambda: TokenMasker(10, 3)(tf.constant([[-1, 4]])),
            r"TokenMasker.*token_ids.*ids in \[0, 10\).*got ids in \[-1, 4\]",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()

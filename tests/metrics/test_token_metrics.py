import keras
import numpy as np
import pytest
from layer_checks import to_numpy

import keras_seq as ks


@pytest.fixture
def batches(rng):
    logits = [rng.normal(size=(2, 5, 6)).astype("float32") for _ in range(2)]
    targets = [rng.integers(0, 6, size=(2, 5)) for _ in range(2)]
    targets[0][1, 2:] = 0
    return logits, targets


def numpy_log_softmax(x):
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_masked_accuracy_streams_over_batches(batches):
    logits, targets = batches
    metric = ks.metrics.MaskedAccuracy(ignore_index=0)
    for batch_logits, t in zip(logits, targets):
        metric.update_state(t, batch_logits)
    logits, targets = np.concatenate(logits), np.concatenate(targets)
    valid = targets != 0
    expected = (logits.argmax(-1) == targets)[valid].mean()
    assert float(metric.result()) == pytest.approx(expected)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_masked_accuracy_counts_the_first_of_tied_maxima(rng):
    """As `argmax`: among equal largest scores only the first index is the prediction (untrained, all-zero logits)."""
    logits = rng.normal(size=(4, 6, 9)).astype("float32")
    logits[0] = 0.0
    logits[1, :, 2] = logits[1, :, 7] = 5.0
    targets = rng.integers(0, 9, size=(4, 6))
    targets[0, :3], targets[1, :3], targets[1, 3:] = 0, 2, 7
    targets[2] = logits[2].argmax(-1)
    targets[3, :2] = -100, 9  # outside [0, V): never the arg-max
    metric = ks.metrics.MaskedAccuracy()
    metric.update_state(targets, logits)
    expected = (logits.argmax(-1) == targets).mean()
    assert 0 < expected < 1
    assert float(metric.result()) == pytest.approx(expected)
    inputs = keras.Input((6, 9))
    compiled = keras.Model(inputs, keras.layers.Identity()(inputs))  # XLA on TensorFlow, jax.jit on JAX
    compiled.compile(
        loss=ks.losses.LabelSmoothingCrossEntropy(),
        metrics=[ks.metrics.MaskedAccuracy()],
        jit_compile=keras.backend.backend() != "torch",
    )
    assert compiled.evaluate(logits, targets, return_dict=True, verbose=0)["masked_accuracy"] == pytest.approx(expected)


def test_perplexity_is_exp_of_mean_nll(batches):
    logits, targets = batches
    metric = ks.metrics.Perplexity(ignore_index=0)
    for batch_logits, t in zip(logits, targets):
        metric.update_state(t, batch_logits)
    logits, targets = np.concatenate(logits), np.concatenate(targets)
    nll = -np.take_along_axis(numpy_log_softmax(logits), targets[..., None], -1)[..., 0]
    expected = np.exp(nll[targets != 0].mean())
    assert float(metric.result()) == pytest.approx(expected, rel=1e-5)
    probs = np.exp(numpy_log_softmax(logits))
    from_probs = ks.metrics.Perplexity(ignore_index=0, from_logits=False)
    from_probs.update_state(targets, probs)
    assert float(from_probs.result()) == pytest.approx(expected, rel=1e-4)


def test_uniform_model_has_perplexity_of_vocabulary_size():
    metric = ks.metrics.Perplexity()
    metric.update_state(np.array([[1, 2, 3]]), np.zeros((1, 3, 11), "float32"))
    assert float(metric.result()) == pytest.approx(11.0, rel=1e-5)


def test_sample_weight_and_fit_and_config(rng):
    metric = ks.metrics.MaskedAccuracy()
    metric.update_state(
        np.array([1, 2]), np.array([[0, 1, 0], [1, 0, 0]], "float32"), sample_weight=np.array([3.0, 1.0])
    )
    assert float(metric.result()) == pytest.approx(0.75)
    clone = ks.metrics.Perplexity.from_config(ks.metrics.Perplexity(ignore_index=0, from_logits=False).get_config())
    assert clone.ignore_index == 0 and clone.from_logits is False
    ids = rng.integers(1, 5, size=(32, 4)).astype("int32")
    inputs = keras.Input((4,), dtype="int32")
    model = keras.Model(inputs, keras.layers.Dense(5)(keras.layers.Embedding(5, 8)(inputs)))
    model.compile(
        "adam",
        ks.losses.LabelSmoothingCrossEntropy(ignore_index=0),
        metrics=[ks.metrics.MaskedAccuracy(ignore_index=0), ks.metrics.Perplexity(ignore_index=0)],
    )
    history = model.fit(ids, ids, epochs=30, verbose=0, batch_size=32)
    assert history.history["masked_accuracy"][-1] > 0.9
    assert history.history["perplexity"][-1] < history.history["perplexity"][0]


def test_metrics_skip_the_keras_mask_of_the_predictions(batches):
    logits, targets = batches
    logits, targets = logits[0], targets[0]
    mask = np.ones(targets.shape, bool)
    mask[0, 3:] = False
    masked_logits = keras.ops.convert_to_tensor(logits)
    ks.backend.set_keras_mask(masked_logits, keras.ops.convert_to_tensor(mask))
    perplexity, accuracy = ks.metrics.Perplexity(), ks.metrics.MaskedAccuracy(ignore_index=0)
    perplexity.update_state(targets, masked_logits)
    accuracy.update_state(targets, masked_logits)
    nll = -np.take_along_axis(numpy_log_softmax(logits), targets[..., None], -1)[..., 0]
    assert float(perplexity.result()) == pytest.approx(np.exp(nll[mask].mean()), rel=1e-5)
    counted = mask & (targets != 0)  # the mask and ignore_index both apply
    expected_accuracy = (logits.argmax(-1) == targets)[counted].mean()
    assert float(accuracy.result()) == pytest.approx(expected_accuracy)


def test_evaluate_counts_only_real_tokens_of_a_padded_language_model(rng):
    """A language model's id-0 mask rides on its logits: `evaluate` skips padding without `ignore_index`."""
    vocabulary, length = 30, 10
    model = ks.models.transformer_lm(vocabulary, length, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    ids = rng.integers(1, vocabulary, size=(8, length))
    for row, real in enumerate(rng.integers(3, length, size=8)):
        ids[row, real:] = 0
    targets = np.concatenate([ids[:, 1:], np.zeros((8, 1), ids.dtype)], axis=1)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=[ks.metrics.Perplexity()])
    figures = model.evaluate(
        ids, targets, batch_size=8, verbose=0, return_dict=True
    )  # one batch: the loss is its token mean
    logits = to_numpy(model.predict(ids, verbose=0)).astype("float64")
    nll = -np.take_along_axis(numpy_log_softmax(logits), targets[..., None], -1)[..., 0]
    real = ids != 0
    assert figures["perplexity"] == pytest.approx(np.exp(nll[real].mean()), rel=1e-4)
    assert figures["perplexity"] == pytest.approx(np.exp(figures["loss"]), rel=1e-4)


def test_bad_inputs_raise_value_errors():
    with pytest.raises(ValueError, match=r"MaskedAccuracy.*ignore_index.*integer"):
        ks.metrics.MaskedAccuracy(ignore_index="pad")
    with pytest.raises(ValueError, match=r"Perplexity.*y_true.*\(2, 5\)"):
        ks.metrics.Perplexity().update_state(np.zeros((2, 4), "int32"), np.zeros((2, 5, 3), "float32"))

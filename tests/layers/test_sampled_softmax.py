import keras
import numpy as np
import pytest
from layer_checks import assert_close, assert_config_round_trip, check_functional_model, to_numpy

import keras_seq as ks
from keras_seq.layers.sampled_softmax import candidate_log_probability, sample_candidates


def numpy_q(ids, vocabulary_size, sampler):
    if sampler == "uniform":
        return np.full(len(ids), 1.0 / vocabulary_size)
    return np.log((ids + 2.0) / (ids + 1.0)) / np.log(vocabulary_size + 1.0)


def numpy_sampled_loss(hidden, targets, kernel, bias, sampled, sampler):
    """The class docstring's formula, one position at a time."""
    vocabulary_size, m = kernel.shape[1], len(sampled)
    losses = np.zeros(targets.shape)
    for index in np.ndindex(targets.shape):
        z = hidden[index] @ kernel + bias
        y = targets[index]
        total = np.exp(z[y])
        for s, q in zip(sampled, numpy_q(sampled, vocabulary_size, sampler)):
            if s != y:
                total += np.exp(z[s] - np.log(m * q))
        losses[index] = np.log(total) - z[y]
    return losses


def numpy_cross_entropy(hidden, targets, kernel, bias):
    z = hidden @ kernel + bias
    log_probs = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]


def built_layer(vocabulary_size, dimension, **kwargs):
    layer = ks.layers.SampledSoftmax(vocabulary_size, kwargs.pop("num_sampled", 8), **kwargs)
    layer.build((None, None, dimension))
    layer.bias.assign(np.random.default_rng(1).normal(size=vocabulary_size).astype("float32"))
    return layer, to_numpy(layer.kernel), to_numpy(layer.bias)


@pytest.mark.parametrize("sampler", ["log_uniform", "uniform"])
def test_sampled_loss_matches_the_formula_for_fixed_samples(rng, sampler):
    layer, kernel, bias = built_layer(12, 5, sampler=sampler)
    hidden = rng.normal(size=(2, 3, 5)).astype("float32")
    targets = np.array([[0, 3, 7], [11, 3, 0]], "int32")
    sampled = np.array([0, 1, 3, 3, 9, 5], "int32")  # a duplicate and accidental hits
    losses = layer.sampled_losses(hidden, targets, sampled)
    assert_close(losses, numpy_sampled_loss(hidden, targets, kernel, bias, sampled, sampler), atol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_sampled_loss_is_float32_under_mixed_precision(rng, policy):
    exact, _, _ = built_layer(12, 5)
    mixed = ks.layers.SampledSoftmax(12, 8, dtype=policy)
    mixed.build((None, None, 5))
    mixed.set_weights(exact.get_weights())
    hidden = rng.normal(size=(2, 3, 5)).astype("float32")
    targets = rng.integers(0, 12, (2, 3)).astype("int32")
    sampled = np.array([0, 1, 3, 9], "int32")
    losses = mixed.sampled_losses(hidden, targets, sampled)
    assert keras.backend.standardize_dtype(losses.dtype) == "float32"
    assert_close(losses, exact.sampled_losses(hidden, targets, sampled), atol=5e-2, rtol=5e-2)


def test_proposal_probabilities_and_draws(rng):
    ids = np.arange(10)
    for sampler in ("log_uniform", "uniform"):
        q = np.exp(to_numpy(candidate_log_probability(ids, 10, sampler)))
        assert_close(q, numpy_q(ids, 10, sampler), atol=1e-6)
        assert abs(q.sum() - 1.0) < 1e-5
        draws = to_numpy(sample_candidates(200_000, 10, sampler, keras.random.SeedGenerator(0)))
        assert draws.dtype == np.int32 and draws.min() >= 0 and draws.max() <= 9
        np.testing.assert_allclose(np.bincount(draws, minlength=10) / len(draws), q, atol=4e-3)


def test_whole_vocabulary_once_gives_the_exact_cross_entropy(rng):
    layer, kernel, bias = built_layer(9, 4, sampler="uniform")
    hidden = rng.normal(size=(3, 4, 4)).astype("float32")
    targets = rng.integers(0, 9, (3, 4)).astype("int32")
    losses = layer.sampled_losses(hidden, targets, np.arange(9, dtype="int32"))
    assert_close(losses, numpy_cross_entropy(hidden, targets, kernel, bias), atol=1e-5)


def test_loss_approaches_the_cross_entropy_as_samples_grow(rng):
    layer, kernel, bias = built_layer(30, 6)
    hidden = 2 * rng.normal(size=(16, 6)).astype("float32")
    targets = rng.integers(0, 30, 16).astype("int32")
    exact = numpy_cross_entropy(hidden, targets, kernel, bias)
    errors = []
    for m in (10, 20_000):
        sampled = sample_candidates(m, 30, "log_uniform", keras.random.SeedGenerator(0))
        errors.append(np.abs(to_numpy(layer.sampled_losses(hidden, targets, sampled)) - exact).mean())
    assert errors[1] < 0.01 * exact.mean() and errors[1] < 0.2 * errors[0], errors


def test_call_counts_unmasked_positions_and_is_exact_at_inference(rng):
    layer, kernel, bias = built_layer(20, 5, num_sampled=6, ignore_index=0)
    hidden = rng.normal(size=(2, 4, 5)).astype("float32")
    targets = np.array([[4, 0, 9, 2], [0, 0, 0, 0]], "int32")  # the second row is all padding
    mask = np.array([[True, True, True, False], [True, True, True, True]])
    counted = (targets != 0) & mask

    logits = layer(hidden, targets, mask=mask)
    assert_close(logits, hidden @ kernel + bias, atol=1e-5)
    expected = numpy_cross_entropy(hidden, targets, kernel, bias)[counted].mean()
    assert_close(layer.losses[0], expected, atol=1e-5)

    losses = to_numpy(layer(hidden, targets, mask=mask, training=True))
    assert losses.shape == (2, 4) and np.all(np.isfinite(losses))
    assert np.all(losses[~counted] == 0) and np.all(losses[counted] > 0)
    assert_close(layer.losses[0], losses[counted].mean(), atol=1e-6)

    assert to_numpy(layer(hidden, training=True)).shape == (2, 4, 20)  # no targets: logits


def test_gradients_are_finite_and_touch_only_true_and_sampled_words(rng):
    vocabulary_size, num_sampled = 500, 8
    hidden_in, targets_in = keras.Input((5, 6)), keras.Input((5,), dtype="int32")
    layer = ks.layers.SampledSoftmax(vocabulary_size, num_sampled, ignore_index=0, seed=3)
    model = keras.Model([hidden_in, targets_in], layer(hidden_in, targets_in))
    model.compile(optimizer=keras.optimizers.SGD(1.0))
    hidden = rng.normal(size=(2, 5, 6)).astype("float32")
    targets = np.array([[0, 0, 0, 0, 0], [1, 2, 40, 40, 499]], "int32")  # an all-padding row
    before = to_numpy(layer.kernel)
    model.train_on_batch([hidden, targets])
    gradient = before - to_numpy(layer.kernel)  # SGD with learning rate 1
    assert np.all(np.isfinite(gradient))
    touched = np.flatnonzero(np.abs(gradient).sum(0))
    assert set(targets[1]) <= set(touched)
    assert len(touched) <= 4 + num_sampled


def test_fit_with_sampled_loss_reduces_the_full_softmax_loss(rng):
    vocabulary_size = 200
    ids = rng.integers(1, vocabulary_size, (256, 8)).astype("int32")
    targets = (ids * 7 + 3) % vocabulary_size  # a next word determined by the current one
    ids_in = keras.Input((8,), dtype="int32", name="ids")
    targets_in = keras.Input((8,), dtype="int32", name="targets")
    hidden = keras.layers.Embedding(vocabulary_size, 16)(ids_in)
    outputs = ks.layers.SampledSoftmax(vocabulary_size, 16, seed=0)(hidden, targets_in)
    model = keras.Model({"ids": ids_in, "targets": targets_in}, outputs)
    model.compile(optimizer=keras.optimizers.Adam(3e-2))
    data = {"ids": ids, "targets": targets}
    initial = model.evaluate(data, verbose=0)
    np.testing.assert_allclose(initial, np.log(vocabulary_size), rtol=0.02)  # exact softmax, untrained
    history = model.fit(data, epochs=15, batch_size=64, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    final = model.evaluate(data, verbose=0)
    assert final < 0.3 * initial, (initial, final)
    logits = to_numpy(model.predict(data, verbose=0))
    assert logits.shape == (256, 8, vocabulary_size)
    assert np.mean(logits.argmax(-1) == targets) > 0.9


def test_model_contract_and_dense_weights(tmp_path, rng):
    hidden = rng.normal(size=(3, 4, 5)).astype("float32")
    targets = rng.integers(0, 11, (3, 4)).astype("int32")
    make = lambda dtype=None: ks.layers.SampledSoftmax(11, 4, sampler="uniform", ignore_index=0, seed=5, dtype=dtype)
    model = check_functional_model(make, [((4, 5), "float32"), ((4,), "int32")], [hidden, targets], tmp_path)
    layer = model.layers[-1]
    clone = assert_config_round_trip(layer)
    assert (clone.num_sampled, clone.sampler, clone.ignore_index, clone.seed) == (4, "uniform", 0, 5)
    dense = keras.layers.Dense(11)
    dense(hidden)
    dense.set_weights(layer.get_weights())
    assert_close(layer(hidden), dense(hidden), atol=1e-6)


def test_bad_arguments_and_inputs_raise_value_errors(rng):
    hidden = rng.normal(size=(2, 3, 4)).astype("float32")
    targets = np.ones((2, 3), "int32")
    built = ks.layers.SampledSoftmax(10, 4, name="head")
    built(hidden, targets)
    cases = [
        (lambda: ks.layers.SampledSoftmax(0, 4), r"SampledSoftmax.*vocabulary_size.*positive integer.*got 0"),
        (lambda: ks.layers.SampledSoftmax(10, 2.5), r"num_sampled.*positive integer.*got 2.5"),
        (lambda: ks.layers.SampledSoftmax(10, 4, sampler="zipf"), r"sampler.*'log_uniform', 'uniform'.*got 'zipf'"),
        (lambda: ks.layers.SampledSoftmax(10, 4, ignore_index="pad"), r"ignore_index.*integer id or None"),
        (lambda: built(hidden[..., :3], targets), r"SampledSoftmax 'head'.*hidden.*feature size 4.*got 3"),
        (lambda: built(hidden[None], targets), r"hidden.*rank 2 or rank 3.*\(1, 2, 3, 4\)"),
        (lambda: built(hidden.astype("int32"), targets), r"hidden.*floating-point"),
        (lambda: built(hidden, targets.astype("float32")), r"targets.*integer token ids.*float32"),
        (lambda: built(hidden, targets[:, :2]), r"targets.*shape \(2, 3\).*got shape \(2, 2\)"),
        (lambda: built(hidden, targets + 9), r"targets.*ids in \[0, 10\).*\[10, 10\]"),
        (lambda: built(hidden, targets, mask=np.ones((2, 4), bool)), r"mask.*shape \(2, 3\).*\(2, 4\)"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()

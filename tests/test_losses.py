import keras
import numpy as np
import pytest
from layer_checks import assert_close, fit_reduces_loss, to_numpy

import keras_seq as ks


def numpy_label_smoothing(targets, logits, epsilon, ignore_index=None):
    """Cross-entropy with the smoothed targets of Szegedy et al. (2016, sec. 7), built as an explicit one-hot in
    NumPy."""
    vocab = logits.shape[-1]
    log_q = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    smoothed = (1 - epsilon) * np.eye(vocab)[targets] + epsilon / vocab
    per_position = -(smoothed * log_q).sum(-1)
    valid = np.ones_like(targets, bool) if ignore_index is None else targets != ignore_index
    return per_position[valid].mean() if valid.any() else 0.0


@pytest.mark.parametrize("shape", [(6,), (3, 5)])
@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_matches_eq_6_3(rng, shape, epsilon):
    logits = rng.normal(size=(*shape, 7)).astype("float32") * 3
    targets = rng.integers(0, 7, size=shape)
    loss = ks.losses.LabelSmoothingCrossEntropy(epsilon=epsilon)
    assert float(loss(targets, logits)) == pytest.approx(numpy_label_smoothing(targets, logits, epsilon), rel=1e-5)
    keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=epsilon)
    assert float(loss(targets, logits)) == pytest.approx(float(keras_loss(np.eye(7)[targets], logits)), rel=1e-5)


def test_ignore_index_leaves_positions_out_of_the_mean(rng):
    logits = rng.normal(size=(3, 5, 7)).astype("float32")
    targets = rng.integers(1, 7, size=(3, 5))
    targets[0, 3:] = 0
    targets[2, :] = 0
    loss = ks.losses.LabelSmoothingCrossEntropy(epsilon=0.1, ignore_index=0)
    expected = numpy_label_smoothing(targets, logits, 0.1, ignore_index=0)
    assert float(loss(targets, logits)) == pytest.approx(expected, rel=1e-5)
    weights = np.array([1.0, 2.0, 1.0])
    per_sequence = [numpy_label_smoothing(targets[i : i + 1], logits[i : i + 1], 0.1, 0) for i in range(3)]
    counts = (targets != 0).sum(-1)
    expected = sum(w * seq_loss * c for w, seq_loss, c in zip(weights, per_sequence, counts)) / counts.sum()
    assert float(loss(targets, logits, sample_weight=weights)) == pytest.approx(expected, rel=1e-5)
    all_ignored = np.zeros((2, 4), "int32")
    assert float(loss(all_ignored, logits[:2, :4])) == 0.0


def test_probabilities_input(rng):
    logits = rng.normal(size=(4, 6)).astype("float32")
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    targets = rng.integers(0, 6, size=4)
    loss = ks.losses.LabelSmoothingCrossEntropy(epsilon=0.2, from_logits=False)
    assert float(loss(targets, probs)) == pytest.approx(numpy_label_smoothing(targets, logits, 0.2), rel=1e-4)


def test_float16_logits_computed_in_float32(rng):
    logits = (rng.normal(size=(2, 3, 50)) * 20).astype("float16")
    targets = rng.integers(0, 50, size=(2, 3))
    value = float(ks.losses.LabelSmoothingCrossEntropy()(targets, logits))
    assert value == pytest.approx(numpy_label_smoothing(targets, logits.astype("float64"), 0.1), rel=1e-3)


def test_config_round_trip_and_fit():
    loss = ks.losses.LabelSmoothingCrossEntropy(epsilon=0.2, ignore_index=0)
    clone = ks.losses.LabelSmoothingCrossEntropy.from_config(loss.get_config())
    assert clone.get_config() == loss.get_config()
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 6, size=(64, 4)).astype("int32")
    ids[:, 3] = 0
    inputs = keras.Input((4,), dtype="int32")
    model = keras.Model(inputs, keras.layers.Dense(6)(keras.layers.Embedding(6, 8)(inputs)))
    fit_reduces_loss(model, ids, ids, loss, epochs=40, factor=0.5, learning_rate=5e-2)


def test_bad_inputs_raise_value_errors(rng):
    logits = rng.normal(size=(3, 5, 7)).astype("float32")
    cases = [
        (lambda: ks.losses.LabelSmoothingCrossEntropy(epsilon=1.0), r"LabelSmoothingCrossEntropy.*epsilon.*\[0, 1\)"),
        (lambda: ks.losses.LabelSmoothingCrossEntropy(ignore_index=0.5), r"ignore_index.*integer"),
        (lambda: ks.losses.LabelSmoothingCrossEntropy()(np.zeros((3, 4), "int32"), logits), r"y_true.*\(3, 5\)"),
        (
            lambda: ks.losses.LabelSmoothingCrossEntropy()(np.zeros((3,), "int32"), logits[0, 0]),
            r"y_pred.*rank 2 or rank 3",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_large_logits_stay_finite_and_exact(rng, epsilon):
    """Logits of size 1e4 (exp overflows float32): each backend's form of `target_nll` stays exact."""
    logits = (rng.normal(size=(4, 6, 9)) * 1e4).astype("float32")
    targets = rng.integers(0, 9, size=(4, 6))
    loss = float(ks.losses.LabelSmoothingCrossEntropy(epsilon=epsilon)(targets, logits))
    expected = numpy_label_smoothing(targets, logits.astype("float64"), epsilon)
    assert np.isfinite(loss) and loss == pytest.approx(expected, rel=1e-5)


def test_target_nll_per_position_matches_numpy(rng):
    from keras_seq.losses import target_nll

    logits = rng.normal(size=(2, 5, 11)).astype("float32") * 4
    targets = rng.integers(0, 11, size=(2, 5))
    log_q = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_q, targets[..., None], -1)[..., 0]
    assert_close(target_nll(logits, targets), expected, atol=1e-5)
    probabilities = np.exp(log_q)
    assert_close(target_nll(probabilities, targets, from_logits=False), expected, atol=1e-5)


def numpy_sparse_cross_entropy(targets, logits, ignore_class=None):
    """Per-position `-log softmax(z)_y`, 0 where the target is `ignore_class`."""
    shifted = logits - logits.max(-1, keepdims=True)
    log_q = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    safe = targets if ignore_class is None else np.where(targets == ignore_class, 0, targets)
    losses = -np.take_along_axis(log_q, safe[..., None], -1)[..., 0]
    return losses if ignore_class is None else np.where(targets == ignore_class, 0.0, losses)


@pytest.mark.parametrize("shape", [(6,), (3, 5)])
@pytest.mark.parametrize("ignore_class", [None, 0])
@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", None])
def test_sparse_cross_entropy_matches_keras_and_numpy(rng, shape, ignore_class, reduction):
    logits = rng.normal(size=(*shape, 9)).astype("float32") * 3
    targets = rng.integers(0, 9, size=shape)
    targets.flat[0] = 0
    weights = rng.uniform(0.5, 2.0, size=shape).astype("float32")
    options = dict(from_logits=True, ignore_class=ignore_class, reduction=reduction)
    ours, theirs = (
        ks.losses.SparseCategoricalCrossentropy(**options),
        keras.losses.SparseCategoricalCrossentropy(**options),
    )
    for sample_weight in (None, weights):
        assert_close(ours(targets, logits, sample_weight), theirs(targets, logits, sample_weight), atol=1e-5)
    per_position = numpy_sparse_cross_entropy(targets, logits, ignore_class)
    if reduction is None:
        assert_close(ours(targets, logits), per_position, atol=1e-5)
    elif reduction == "sum":
        assert float(ours(targets, logits)) == pytest.approx(per_position.sum(), rel=1e-5)
    else:
        counted = np.ones(shape, bool) if ignore_class is None else targets != ignore_class
        assert float(ours(targets, logits)) == pytest.approx(per_position[counted].mean(), rel=1e-5)


@pytest.mark.parametrize("positions", [(4,), (2, 2)], ids=["rows", "sequences"])
def test_sparse_cross_entropy_gradient_is_softmax_minus_one_hot(rng, positions):
    logits = rng.normal(size=(4, 7)).astype("float32")
    targets = np.array([0, 3, 6, 3])
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = (softmax - np.eye(7)[targets]) / 4  # d mean_i(-log q_i(y_i)) / d z
    loss = ks.losses.SparseCategoricalCrossentropy(from_logits=True)
    assert_close(gradient_of_logits(logits, targets.reshape(positions), loss), expected, atol=1e-6)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "int64"])
def test_target_nll_takes_any_integer_targets(rng, dtype):
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    targets = rng.integers(0, 5, size=(2, 3))
    assert_close(
        ks.losses.target_nll(logits, targets.astype(dtype)), numpy_sparse_cross_entropy(targets, logits), atol=1e-5
    )


def gradient_of_logits(logits, targets, loss):
    """The gradient of `loss` with respect to the `(N, V)` logits, as one `fit` step computes it.

    Row i of the identity picks row i of a Dense kernel that holds the logits, and one SGD
    step at rate 1 subtracts the loss's gradient from it. With `targets` of shape `(B, T)`
    (`B * T = N`) the identity's rows, and so the logits, come as `(B, T, ...)`.
    """
    rows, classes = logits.shape
    layer = keras.layers.Dense(classes, use_bias=False, kernel_initializer=keras.initializers.Constant(logits))
    model = keras.Sequential([keras.Input((*targets.shape[1:], rows)), layer])
    model.compile(keras.optimizers.SGD(1.0), loss)
    model.train_on_batch(np.eye(rows, dtype="float32").reshape(*targets.shape, rows), targets)
    return logits - to_numpy(layer.kernel)


@pytest.mark.parametrize("epsilon, positions", [(0.1, (4,)), (0.3, (4,)), (0.1, (2, 2))])
def test_label_smoothing_gradient_is_softmax_minus_smoothed_targets(rng, epsilon, positions):
    """d H(q', softmax(z)) / dz = softmax(z) - q' (Szegedy et al., 2016, sec. 7), averaged over the counted rows."""
    logits = rng.normal(size=(4, 7)).astype("float32") * 2
    targets = np.array([1, 3, 0, 6])  # the row with target 0 is ignored
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    smoothed = (1 - epsilon) * np.eye(7)[targets] + epsilon / 7
    expected = np.where((targets != 0)[:, None], softmax - smoothed, 0.0) / 3
    loss = ks.losses.LabelSmoothingCrossEntropy(epsilon, ignore_index=0)
    assert_close(gradient_of_logits(logits, targets.reshape(positions), loss), expected, atol=1e-6)


def test_sparse_cross_entropy_edge_cases(rng):
    loss = ks.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    logits = (rng.normal(size=(2, 3, 5)) * 1e4).astype("float32")
    targets = rng.integers(1, 5, size=(2, 3))
    value = float(loss(targets, logits))  # exp overflows float32: still exact
    assert np.isfinite(value) and value == pytest.approx(
        numpy_sparse_cross_entropy(targets, logits.astype("float64")).mean(), rel=1e-5
    )
    assert float(loss(np.zeros((2, 3), "int32"), logits)) == 0.0  # every position ignored: 0, not NaN
    assert_close(loss(targets[..., None], logits), loss(targets, logits))  # targets (B, T, 1) as in Keras
    probabilities = ks.losses.SparseCategoricalCrossentropy(from_logits=False)  # Keras' own function
    softmax = to_numpy(keras.ops.softmax(logits[:1, :1] / 1e4))
    expected = -np.log(np.clip(softmax[0, 0, targets[0, 0]], 1e-7, 1.0))
    assert float(probabilities(targets[:1, :1], softmax)) == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("compiled", [False, True])
def test_unknown_targets_add_zero_not_nan(rng, compiled):
    """A target outside [0, V) (say an unset -100 padding) adds 0, as Keras' one-hot on JAX, eagerly or in `fit`."""
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    targets = rng.integers(0, 5, size=(2, 3))
    targets[0, 1], targets[1, 2] = -100, 5
    known = (targets >= 0) & (targets < 5)
    per_position = numpy_sparse_cross_entropy(np.where(known, targets, 0), logits)
    expected_sparse = np.where(known, per_position, 0.0).mean()
    smoothing = np.array(
        [
            numpy_label_smoothing(targets[i : i + 1, j : j + 1], logits[i : i + 1, j : j + 1], 0.1)
            if known[i, j]
            else 0.0
            for i in range(2)
            for j in range(3)
        ]
    ).mean()
    ignoring = np.where(known, per_position, 0.0)[targets != -100].mean()  # -100 left out of the mean, 5 counted
    for loss, expected in (
        (ks.losses.SparseCategoricalCrossentropy(from_logits=True), expected_sparse),
        (ks.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-100), ignoring),
        (ks.losses.LabelSmoothingCrossEntropy(0.1), smoothing),
    ):
        if compiled:  # values are traced: no eager look at the ids
            inputs = keras.Input((3, 5))
            model = keras.Model(inputs, keras.layers.Identity()(inputs))
            model.compile(loss=loss, jit_compile=keras.backend.backend() != "torch")
            value = model.evaluate(logits, targets, batch_size=2, verbose=0)
        else:
            value = float(loss(targets, logits))
        assert np.isfinite(value) and value == pytest.approx(expected, rel=1e-5)


def test_sparse_cross_entropy_config_is_keras_config():
    theirs = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0, reduction="sum", name="xent")
    ours = ks.losses.SparseCategoricalCrossentropy.like(theirs)
    assert isinstance(ours, keras.losses.SparseCategoricalCrossentropy)
    assert ours.get_config() == theirs.get_config() and ours.dtype == theirs.dtype
    restored = keras.losses.deserialize(keras.losses.serialize(ours))
    assert type(restored) is ks.losses.SparseCategoricalCrossentropy and restored.get_config() == ours.get_config()

"""`masked_softmax`, the softmax every attention layer uses (e.g. Bahdanau et al., 2015, eq. 6), against NumPy."""

import warnings

import numpy as np
import pytest
from layer_checks import assert_close, to_numpy

import keras_seq as ks
from keras_seq.layers.masking import masked_softmax


def numpy_softmax(scores, axis=-1):
    shifted = np.exp(scores - scores.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


def test_softmax_over_the_unmasked_keys_and_zeros_for_a_row_without_keys(rng):
    scores = rng.normal(size=(2, 3, 4)).astype("float32")
    mask = rng.random((2, 3, 4)) < 0.6
    mask[0, 0] = True
    mask[1, 2] = False
    expected = np.where(mask, np.exp(scores - scores.max(-1, keepdims=True)), 0.0)
    expected = np.divide(
        expected, expected.sum(-1, keepdims=True), out=np.zeros_like(expected), where=mask.any(-1, keepdims=True)
    )
    assert_close(masked_softmax(scores, mask), expected)
    assert_close(masked_softmax(scores), numpy_softmax(scores))
    assert_close(
        masked_softmax(np.swapaxes(scores, 1, 2), np.swapaxes(mask, 1, 2), axis=1), np.swapaxes(expected, 1, 2)
    )


def test_a_single_key_gets_weight_one_without_keras_warning():
    scores = np.array([[[0.3], [-2.0]], [[np.nan], [5.0]]], "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # Keras warns of a softmax over an axis of size 1
        weights = masked_softmax(scores)
        masked = masked_softmax(scores, np.array([[[True], [False]], [[True], [True]]]))
    weights, masked = to_numpy(weights), to_numpy(masked)
    np.testing.assert_array_equal(weights, [[[1.0], [1.0]], [[np.nan], [1.0]]])  # NaN stays NaN, as in softmax
    np.testing.assert_array_equal(masked, [[[1.0], [0.0]], [[np.nan], [1.0]]])


@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_models_on_one_token_emit_no_warning(kind):
    """One token (a first decoding step, a one-id source) attends to one key."""
    ids = np.array([[5], [7]], "int32")
    if kind == "lm":
        model = ks.models.transformer_lm(20, 8, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
        inputs = ids
    else:
        model = ks.models.transformer_seq2seq(20, 20, 8, 8, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
        inputs = {"encoder_inputs": ids, "decoder_inputs": ids}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        logits = model(inputs)
    logits = to_numpy(logits)
    assert logits.shape == (2, 1, 20) and np.isfinite(logits).all()

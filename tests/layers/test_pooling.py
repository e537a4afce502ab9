import keras
import numpy as np
import pytest
from layer_checks import assert_close, check_functional_model, to_numpy

import keras_seq as ks


@pytest.fixture
def padded(rng):
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    mask = np.arange(5)[None] < np.array([5, 2, 0])[:, None]
    return x, mask


def test_mean_is_murphy_h_bar_over_real_steps(padded):
    x, mask = padded
    out = to_numpy(ks.layers.SequencePooling("mean")(x, mask=mask))
    assert_close(out[0], x[0].mean(0))
    assert_close(out[1], x[1, :2].mean(0))
    np.testing.assert_array_equal(out[2], 0.0)  # all padding: zeros, not NaN


def test_first_and_last(padded):
    x, mask = padded
    assert_close(ks.layers.SequencePooling("first")(x, mask=mask), x[:, 0])
    last = to_numpy(ks.layers.SequencePooling("last")(x, mask=mask))
    assert_close(last[:2], np.stack([x[0, 4], x[1, 1]]))
    assert_close(ks.layers.SequencePooling("last")(x), x[:, -1])


def test_keras_mask_is_used_and_model_contract(tmp_path, padded):
    ids = np.array([[1, 2, 3], [4, 0, 0]], dtype="int32")
    inputs = keras.Input((3,), dtype="int32")
    embedding = keras.layers.Embedding(5, 4, mask_zero=True)
    model = keras.Model(inputs, ks.layers.SequencePooling()(embedding(inputs)))
    table = to_numpy(embedding.embeddings)
    assert_close(model(ids), np.stack([table[[1, 2, 3]].mean(0), table[4]]))
    x, _ = padded
    check_functional_model(
        lambda dtype=None: ks.layers.SequencePooling("mean", dtype=dtype), [((5, 4), "float32")], [x], tmp_path
    )


def test_bad_inputs_raise_value_errors(padded):
    x, mask = padded
    with pytest.raises(ValueError, match=r"SequencePooling.*mode.*mean"):
        ks.layers.SequencePooling("max")
    with pytest.raises(ValueError, match=r"SequencePooling.*inputs.*rank 3"):
        ks.layers.SequencePooling()(x[0])
    with pytest.raises(ValueError, match=r"SequencePooling.*mask.*\(3, 5\)"):
        ks.layers.SequencePooling()(x, mask=mask[:, :4])

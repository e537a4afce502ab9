"""`.keras` files saved by an earlier keras_seq load, and compute what they computed, on every backend."""

import glob
import os

import keras
import numpy as np
import pytest

import keras_seq  # noqa: F401  (registers the layers and models the files name)

SAVED = os.path.join(os.path.dirname(__file__), os.pardir, "data", "saved_models")
FILES = sorted(glob.glob(os.path.join(SAVED, "*.keras")))


def test_the_saved_models_are_there():
    assert len(FILES) == 5, FILES


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(path)[: -len(".keras")] for path in FILES])
def test_saved_model_loads_and_computes_the_same(path):
    stored = np.load(path[: -len(".keras")] + ".npz")
    inputs = {key.split(":", 1)[1]: stored[key] for key in stored.files if key.startswith("input:")}
    model = keras.saving.load_model(path, compile=False)
    got = model(inputs if len(inputs) > 1 else next(iter(inputs.values())), training=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got), stored["outputs"], rtol=1e-4, atol=1e-5)

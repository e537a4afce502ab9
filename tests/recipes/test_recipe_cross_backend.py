"""A recipe's model.keras, saved on this backend, loads and computes the same on another one."""

import keras
import numpy as np
from recipe_runs import BACKEND, run_python

# TensorFlow is installed with every backend; tox gives the tensorflow environment jax for this test.
OTHER = "jax" if BACKEND == "tensorflow" else "tensorflow"

# Runs in a fresh interpreter on the other backend: loads each model and saves its outputs.
LOAD_AND_RUN = """
import sys
import keras, numpy as np
import keras_seq  # noqa: F401  (registers the layers and models model.keras names)

assert keras.backend.backend() == sys.argv[1], keras.backend.backend()
directory = sys.argv[2]
for argument in sys.argv[3:]:
    name, path = argument.split("=", 1)
    model = keras.saving.load_model(path, compile=False)
    inputs = dict(np.load(f"{directory}/{name}_inputs.npz"))
    outputs = model(inputs if len(inputs) > 1 else inputs["ids"], training=False)
    np.save(f"{directory}/{name}_outputs.npy", keras.ops.convert_to_numpy(outputs))
"""


def fixed_ids(model, rng):
    """Two rows of ids for each of the model's inputs, the second padded at the end."""
    arrays = {}
    for tensor in model.inputs:
        length = tensor.shape[1] or 8
        ids = rng.integers(4, 12, size=(2, length)).astype("int32")
        ids[1, length // 2 :] = 0
        name = tensor.name if len(model.inputs) > 1 else "ids"
        if name == "decoder_inputs":
            ids[:, 0] = 1
        arrays[name] = ids
    return arrays


def test_model_keras_loads_on_another_backend(
    translate_transformer, translate_rnn_attention, classify_run, tag_run, lm_run, tmp_path
):
    runs = {
        "transformer": translate_transformer,
        "rnn_attention": translate_rnn_attention,
        "classify": classify_run,
        "tag": tag_run,
        "lm": lm_run,
    }
    rng = np.random.default_rng(0)
    expected = {}
    for name, run in runs.items():
        model = keras.saving.load_model(run.path("model.keras"), compile=False)
        inputs = fixed_ids(model, rng)
        np.savez(tmp_path / f"{name}_inputs.npz", **inputs)
        expected[name] = keras.ops.convert_to_numpy(model(inputs if len(inputs) > 1 else inputs["ids"], training=False))
        assert np.all(np.isfinite(expected[name])), name
    run_python(
        LOAD_AND_RUN,
        OTHER,
        tmp_path,
        *(f"{name}={run.path('model.keras')}" for name, run in runs.items()),
        KERAS_BACKEND=OTHER,
    )
    for name in runs:
        got = np.load(tmp_path / f"{name}_outputs.npy")
        assert got.shape == expected[name].shape, name
        np.testing.assert_allclose(got, expected[name], atol=1e-4, rtol=1e-4, err_msg=name)

"""Writes small keras_seq models as `.keras` files, with fixed inputs and their outputs, for the load test.

`python tests/data/saved_models/build.py DIR` saves one model per registered keras_seq
layer family with the keras_seq it imports; the files beside this script were written by
an earlier version (see README.md here), so `tests/models/test_saved_models_load.py`
checks that a newer keras_seq still loads them and computes the same outputs.
"""

import os
import sys

import keras
import numpy as np

import keras_seq as ks

MODELS = {
    "rnn_seq2seq_input_feeding": lambda: ks.models.rnn_seq2seq(20, 22, embedding_dim=8, units=8, input_feeding=True),
    "rnn_seq2seq_luong": lambda: ks.models.rnn_seq2seq(
        20, 22, embedding_dim=8, units=8, cell="lstm", attention="luong"
    ),
    "rnn_lm_conditioned": lambda: ks.models.rnn_lm(20, embedding_dim=8, units=8, cell="coupled_lstm", condition_dim=3),
    "transformer_seq2seq_tied": lambda: ks.models.transformer_seq2seq(
        20,
        20,
        6,
        6,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=16,
        tie_embeddings=True,
        share_embeddings=True,
    ),
    "transformer_lm_tied": lambda: ks.models.transformer_lm(
        20, 6, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16, tie_embeddings=True
    ),
}


def fixed_inputs(model, rng, length=6):
    """Two rows per model input: token ids (the second row padded at the end), or floats for a condition."""
    inputs = {}
    for tensor in model.inputs:
        if "int" in str(tensor.dtype):
            ids = rng.integers(3, 20, size=(2, length)).astype("int32")
            ids[1, length // 2 :] = 0
            inputs[tensor.name] = ids
        else:
            inputs[tensor.name] = rng.normal(size=(2, *tensor.shape[1:])).astype("float32")
    return inputs


def call(model, inputs):
    arguments = inputs if len(inputs) > 1 else next(iter(inputs.values()))
    return keras.ops.convert_to_numpy(model(arguments, training=False))


def main(directory):
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(0)
    keras.utils.set_random_seed(0)
    print("keras_seq from", os.path.dirname(ks.__file__))
    for name, build in MODELS.items():
        model = build()
        inputs = fixed_inputs(model, rng)
        outputs = call(model, inputs)
        model.save(os.path.join(directory, f"{name}.keras"))
        np.savez(
            os.path.join(directory, f"{name}.npz"), outputs=outputs, **{f"input:{k}": v for k, v in inputs.items()}
        )
        print(name, outputs.shape)


if __name__ == "__main__":
    main(sys.argv[1])

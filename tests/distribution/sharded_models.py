"""Run as `python sharded_models.py` with `XLA_FLAGS=--xla_force_host_platform_device_count=8` on JAX:
each Transformer model built unsharded and under `model_parallel(2)`, as JSON lines.

For each model: the largest output difference, the two fit losses of each side, and every
variable's partition spec under the sharded build (a list of mesh axes, None for a whole axis).
"""

import json

import keras
import numpy as np

import keras_seq as ks
from keras_seq.distribution import model_parallel

VOCABULARY, LENGTH, ROWS = 64, 8, 16
WIDTH = dict(hidden_dim=16, num_heads=4, intermediate_dim=32, num_layers=1, dropout=0.0)
rng = np.random.default_rng(0)
ids = rng.integers(1, VOCABULARY, (ROWS, LENGTH)).astype("int32")
ids[:, -2:] = 0  # padding at the end of every row
labels = rng.integers(1, VOCABULARY, (ROWS, LENGTH)).astype("int32")
MODELS = {
    "transformer_seq2seq": (
        lambda: ks.models.transformer_seq2seq(VOCABULARY, VOCABULARY, LENGTH, LENGTH, **WIDTH),
        {"encoder_inputs": ids, "decoder_inputs": ids[::-1].copy()},
        labels,
    ),
    "transformer_seq2seq_tied": (
        lambda: ks.models.transformer_seq2seq(
            VOCABULARY, VOCABULARY, LENGTH, LENGTH, tie_embeddings=True, share_embeddings=True, **WIDTH
        ),
        {"encoder_inputs": ids, "decoder_inputs": ids[::-1].copy()},
        labels,
    ),
    "transformer_lm": (lambda: ks.models.transformer_lm(VOCABULARY, LENGTH, **WIDTH), ids, labels),
    "transformer_mlm": (
        lambda: ks.models.transformer_mlm(VOCABULARY, LENGTH, tie_embeddings=True, **WIDTH),
        ids,
        labels,
    ),
    "transformer_classifier": (
        lambda: ks.models.transformer_classifier(VOCABULARY, 4, LENGTH, **WIDTH),
        ids,
        labels[:, 0] % 4,
    ),
}


def trained(build, x, y, distribution):
    keras.utils.set_random_seed(0)
    keras.distribution.set_distribution(distribution)
    try:
        model = build()
        model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        outputs = keras.ops.convert_to_numpy(model(x))
        losses = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
        specs = {w.path: list(getattr(w.value.sharding, "spec", ())) for w in model.weights}
        return outputs, losses, specs
    finally:
        keras.distribution.set_distribution(None)


for name, (build, x, y) in MODELS.items():
    whole, whole_losses, _ = trained(build, x, y, None)
    vocabularies = [VOCABULARY, 4] if name == "transformer_classifier" else [VOCABULARY]
    split, split_losses, specs = trained(build, x, y, model_parallel(2, 4, 32, vocabularies))
    print(
        json.dumps(
            {
                "model": name,
                "output_difference": float(np.abs(whole - split).max()),
                "losses": whole_losses,
                "sharded_losses": split_losses,
                "specs": specs,
            }
        )
    )

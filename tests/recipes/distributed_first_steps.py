"""Run as `python distributed_first_steps.py DEVICES DISTRIBUTE`: the first two training losses, as JSON.

`DEVICES` CPU devices are simulated (JAX: set `XLA_FLAGS` before starting this
process; TensorFlow: logical devices, set here), and the model is built and compiled
inside `recipes.devices.distribution_scope` exactly as the recipes do.
"""

import argparse
import json
import os
import sys

import numpy as np

devices, distribute = int(sys.argv[1]), sys.argv[2] == "1"
if os.environ["KERAS_BACKEND"] == "tensorflow":
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)

import keras  # noqa: E402

import keras_seq as ks  # noqa: E402
from recipes import devices  # noqa: E402

keras.utils.set_random_seed(0)
with devices.distribution_scope(argparse.Namespace(distribute=distribute)):
    model = ks.models.transformer_seq2seq(
        20, 20, 8, 8, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0
    )
    model.compile(keras.optimizers.Adam(1e-2), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.1, ignore_index=0))
    if os.environ["KERAS_BACKEND"] == "tensorflow":
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
    else:
        distribution = keras.distribution.distribution()
        replicas = 1 if distribution is None else int(np.prod(distribution.device_mesh.shape))
rng = np.random.default_rng(0)
x = {name: rng.integers(1, 20, (8, 8)).astype("int32") for name in ("encoder_inputs", "decoder_inputs")}
y = rng.integers(1, 20, (8, 8)).astype("int32")
history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
print(json.dumps({"replicas": replicas, "losses": history.history["loss"]}))

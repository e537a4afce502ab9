"""Dropout (Srivastava et al., 2014) with Keras' masks, drawn by a fused generator under JAX."""

import keras

from keras_seq import _backend


@keras.saving.register_keras_serializable(package="keras_seq")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout`, giving the same outputs for the same seed, faster under JAX.

    Keras' JAX backend draws the mask with `jax.random.bernoulli`, whose Threefry
    rounds JAX lowers on a CPU as a loop that writes whole arrays out at every turn.
    Here the same bits come from the rounds written out (`keras_seq._threefry`), which
    XLA fuses into one kernel. On TensorFlow and torch, and where JAX would draw
    otherwise (another default generator, 64-bit floats), this is Keras' layer
    unchanged. Arguments and call as `keras.layers.Dropout`.
    """

    def call(self, inputs, training=False):
        if training and 0 < self.rate < 1 and _backend.fused_threefry_available():
            return _backend.threefry_dropout(inputs, self.rate, self.noise_shape, self.seed_generator.next())
        return super().call(inputs, training=training)

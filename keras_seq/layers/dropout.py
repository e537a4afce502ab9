"""Dropout (Srivastava et al., 2014) with Keras' masks, drawn faster under JAX and on torch's CPU."""

import keras

from keras_seq import backend


@keras.saving.register_keras_serializable(package="keras_seq")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout`, giving the same outputs for the same seed, faster under JAX and on torch's CPU.

    Keras' JAX backend draws the mask with `jax.random.bernoulli`, whose Threefry
    rounds JAX lowers on a CPU as a loop that writes whole arrays out at every turn.
    Here the same bits come from the rounds written out (`keras_seq.backend.jax.dropout`), which
    XLA fuses into one kernel. Without a seed, Keras' torch backend drops out with
    `torch.nn.functional.dropout` from PyTorch's global generator; on a CPU this draws
    from the same generator a uniform per unit, kept where it is at least the rate
    (`keras_seq.backend.torch.dropout`), which is faster. Elsewhere (TensorFlow, a seeded
    layer on torch, another default generator or 64-bit floats under JAX) this is
    Keras' layer unchanged. Arguments and call as `keras.layers.Dropout`.
    """

    def call(self, inputs, training=False):
        if training and 0 < self.rate < 1:
            return backend.dropout(self, inputs, lambda: super(Dropout, self).call(inputs, training=training))
        return super().call(inputs, training=training)

"""Layer normalisation (Ba et al., 2016, "Layer Normalization", sec. 3).

Differentiated in fewer operations on TensorFlow.
"""

import keras

from keras_seq import backend


@keras.saving.register_keras_serializable(package="keras_seq")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization`, the same outputs and gradients, its gradient written out on TensorFlow.

    `y = gamma * (x - mean) / sqrt(var + epsilon) + beta` over the features (Ba et al., 2016,
    sec. 3). On TensorFlow, over the last axis with both `gamma` and `beta`, the gradient is
    `keras_seq.backend.tensorflow.layer_normalization`'s closed form, since TensorFlow differentiates Keras'
    moments operation by operation; every other case, and every other backend, is Keras' layer
    unchanged. Arguments and call as `keras.layers.LayerNormalization`.
    """

    def call(self, inputs):
        return backend.layer_normalization(self, inputs, lambda: super(LayerNormalization, self).call(inputs))

"""Layer normalisation (Ba et al., 2016, "Layer Normalization", sec. 3), differentiated in fewer operations on TensorFlow."""

import keras
from keras import ops

from keras_seq import _backend


@keras.saving.register_keras_serializable(package="keras_seq")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization`, the same outputs and gradients, its gradient written out on TensorFlow.

    `y = gamma * (x - mean) / sqrt(var + epsilon) + beta` over the features (Ba et al., 2016,
    sec. 3). On TensorFlow, over the last axis with both `gamma` and `beta`, the gradient is
    `keras_seq._backend.tf_layer_normalization`'s closed form, since TensorFlow differentiates Keras'
    moments operation by operation; every other case, and every other backend, is Keras' layer
    unchanged. Arguments and call as `keras.layers.LayerNormalization`.
    """

    def call(self, inputs):
        if not self._uses_closed_form_gradient(inputs):
            return super().call(inputs)
        outputs = _backend.tf_layer_normalization(ops.cast(inputs, "float32"), self.gamma, self.beta, self.epsilon)
        return ops.cast(outputs, self.compute_dtype)

    def _uses_closed_form_gradient(self, inputs):
        """Whether this call normalises by `_backend.tf_layer_normalization`: TensorFlow, the last axis, a scale and
        an offset, and float32 arithmetic (which Keras' layer also uses for float32, float16 and bfloat16 inputs)."""
        if keras.backend.backend() != "tensorflow" or self.rms_scaling or not (self.center and self.scale):
            return False
        axes = self.axis if isinstance(self.axis, list) else [self.axis]
        last_axis = [axis % len(inputs.shape) for axis in axes] == [len(inputs.shape) - 1]
        float32 = keras.backend.result_type(inputs.dtype, "float32") == "float32"
        return last_axis and float32 and self.gamma.dtype == "float32" and self.beta.dtype == "float32"

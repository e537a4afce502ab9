"""Keras' Adam (Kingma and Ba, 2015, algorithm 1), updated by PyTorch's fused kernel on a CPU."""

import keras

from keras_seq import _backend


@keras.saving.register_keras_serializable(package="keras_seq")
class Adam(keras.optimizers.Adam):
    """`keras.optimizers.Adam`, the same update, applied by PyTorch's fused Adam kernel on torch on a CPU.

    Keras' torch Adam calls PyTorch's multi-tensor functions, which on a CPU loop over
    the tensors one small operation at a time; one fused kernel does the whole step
    (`_backend.torch_adam_update`). Elsewhere, and for `amsgrad`, this is Keras' Adam.
    Arguments as `keras.optimizers.Adam`.
    """

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if keras.backend.backend() == "torch":
            return _backend.torch_adam_update(self, grads, trainable_variables, learning_rate)
        return super()._backend_update_step(grads, trainable_variables, learning_rate)

"""Keras' Adam (Kingma and Ba, 2015, algorithm 1), updated by one fused kernel per step or variable."""

import keras

from keras_seq import backend


@keras.saving.register_keras_serializable(package="keras_seq")
class Adam(keras.optimizers.Adam):
    """`keras.optimizers.Adam`, the same update, applied by fused kernels on torch (on a CPU) and TensorFlow.

    Keras' torch Adam calls PyTorch's multi-tensor functions, which on a CPU loop over
    the tensors one small operation at a time; one fused kernel does the whole step
    (`keras_seq.backend.torch.adam_update`). Keras' TensorFlow Adam runs a chain of small operations
    per variable; TensorFlow's `ResourceApplyAdam` does a variable's update in one
    (`keras_seq.backend.tensorflow.adam_update`). Keras' own update runs on JAX, on torch off the
    CPU (Keras' multi-tensor update), and on TensorFlow for `amsgrad`, for variables other than
    float32, for sparse gradients and under a `tf.distribute` strategy; a subclass's `update_step`
    runs on JAX and in those TensorFlow cases. Arguments as `keras.optimizers.Adam`.
    """

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        return backend.adam_update(
            self,
            grads,
            trainable_variables,
            learning_rate,
            lambda: super(Adam, self)._backend_update_step(grads, trainable_variables, learning_rate),
        )

import keras
import numpy as np
import pytest


def _full_float32_matmuls():
    """Tests compare against float64 NumPy at 1e-5: keep GPU matmuls and cuDNN RNNs in true float32.

    On an NVIDIA GPU, JAX and TensorFlow (by default) and torch (in cuDNN) use TF32 inputs, off by ~1e-3.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)
    elif backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
    elif backend == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


_full_float32_matmuls()


@pytest.fixture(autouse=True)
def _seeded_float32():
    """Every test starts seeded, in float32, and leaves the global policy as it found it."""
    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(0)

"""The plain path of every backend-specific operation: `keras.ops`, or Keras' own layer or optimizer.

Each function here is what an override in `tensorflow.py`, `jax.py` or `torch.py` replaces and
must equal (the tests compare them); a backend without an override of its own runs this path.
Functions that take `keras_call` (or `keras_update`) are given Keras' own computation as a
callable, so that the plain path is Keras' code itself rather than a copy of it.
"""

import keras
import numpy as np
from keras import ops


def concrete_value(x):
    """`x` as a NumPy array if its value is known now, else None (traced, symbolic or a backend's tensor)."""
    if x is None or isinstance(x, keras.KerasTensor):
        return None
    if isinstance(x, (int, float, np.integer, np.floating, np.ndarray)):
        return np.asarray(x)
    return None


def compile_for_inference(model, function):
    """`function(*tensors)` ready for repeated inference calls: the function itself, run eagerly."""
    return function


def take_target(values, targets):
    """`values[..., targets]`: `(..., V), (...) -> (...)`."""
    return ops.squeeze(ops.take_along_axis(values, ops.expand_dims(targets, -1), axis=-1), -1)


def target_nll_from_logits(logits, targets):
    """`-log softmax(logits)[target]` per position from float32 logits, as `logsumexp(z) - z_target`:
    no log-softmax tensor is written and read back."""
    return ops.logsumexp(logits, axis=-1) - take_target(logits, targets)


def smoothed_nll_from_logits(logits, targets, epsilon):
    """`(1 - epsilon) * -log p(target) + epsilon * mean_k(-log p(k))` per position, from float32 logits.

    Written as `logsumexp(z) - (1 - epsilon) * z_target - epsilon * mean(z)` (label smoothing,
    Szegedy et al., 2016, sec. 7): one pass for the normaliser, none for a log-softmax tensor.
    """
    return (
        ops.logsumexp(logits, axis=-1)
        - (1.0 - epsilon) * take_target(logits, targets)
        - epsilon * ops.mean(logits, axis=-1)
    )


def is_first_argmax(scores, targets):
    """Whether each target (in `[0, V)`) is `argmax(scores, -1)`, the first index of the largest score:
    `(..., V), (...) -> (...)` bool."""
    return ops.equal(ops.cast(ops.argmax(scores, axis=-1), "int32"), targets)


def layer_normalization(layer, inputs, keras_call):
    """`keras.layers.LayerNormalization`'s output for `layer` and `inputs`: `keras_call()`, Keras' own."""
    return keras_call()


def dropout(layer, inputs, keras_call):
    """`keras.layers.Dropout`'s training output for `layer` and `inputs`: `keras_call()`, Keras' own."""
    return keras_call()


def dense(layer, inputs, keras_call):
    """A `keras.layers.Dense` subclass's output for `inputs`: `keras_call()`, Keras' own product."""
    return keras_call()


def call_in_step(layer, inputs, **kwargs):
    """`layer(inputs, **kwargs)` for a built layer that a decoding step calls, outside any `__call__`."""
    return layer(inputs, **kwargs)


def single_query_attention(q, k, v, mask, rows_may_be_empty, scale, masked_score, keras_call):
    """The context of one query per row over cached keys and values: `keras_call()`, the layer's
    `keras.ops` path (see `keras_seq.layers.MultiHeadAttention._single_query_attention`)."""
    return keras_call()


def affine(x, kernel, bias=None, contracted_axes=1):
    """`x`'s last `contracted_axes` axes contracted with `kernel`'s first as many, plus `bias`.

    `(..., *C), (*C, *O), (*O) -> (..., *O)`: a projection's `x @ W + b` with the kernel kept in
    its layer's shape (e.g. `(D, H, d)` for attention heads).
    """
    features = int(np.prod(kernel.shape[:contracted_axes]))
    outputs = tuple(kernel.shape[contracted_axes:])
    leading = ops.shape(x)[: len(x.shape) - contracted_axes]
    if contracted_axes > 1:
        x = ops.reshape(x, (*leading, features))
    y = ops.matmul(x, ops.reshape(kernel, (features, -1)) if len(kernel.shape) > 2 or contracted_axes > 1 else kernel)
    if bias is not None:
        y = y + (ops.reshape(bias, (-1,)) if len(outputs) > 1 else bias)
    return ops.reshape(y, (*leading, *outputs)) if len(outputs) > 1 else y


def transpose(x, axes):
    """`keras.ops.transpose(x, axes)`."""
    return ops.transpose(x, axes)


def matmul_transposed(a, b):
    """`a @ swapaxes(b, -1, -2)`."""
    return ops.matmul(a, ops.swapaxes(b, -1, -2))


def slice_update(x, start_indices, updates):
    """`keras.ops.slice_update(x, start_indices, updates)`: a copy of `x`, `updates` written from `start_indices`."""
    return ops.slice_update(x, start_indices, updates)


def adam_update(optimizer, gradients, variables, learning_rate, keras_update):
    """Keras' Adam step of `optimizer` over `variables`: `keras_update()`, Keras' own update."""
    return keras_update()


def decoding_seed(seed):
    """The seed as `compile_for_inference`'s decoder takes it: an int32 tensor (a traced argument, so a new
    seed does not retrace)."""
    return ops.convert_to_tensor(seed, "int32")


def flash_attention_flag():
    """The `flash_attention` argument for `keras.ops.dot_product_attention`: Keras' setting."""
    return keras.config.is_flash_attention_enabled()


def heads_first_attention():
    """Whether attention should project straight to `(B, H, T, d)` and write out its softmax, rather than
    hand `(B, T, H, d)` projections to the fused `keras.ops.dot_product_attention`: no, the fused kernel."""
    return False


def single_query_reads_whole_cache():
    """Whether a decoding step's query should read its block's `(B, 2, S, H, d)` cache whole, keys and
    values together, rather than the keys and the values as slices: no, slices."""
    return False


def top_k_in_blocks_pays():
    """Whether beam search should take its top candidates block by block over a large vocabulary
    (`keras_seq.decoding`) rather than by one `top_k` over every candidate: yes, where programs are traced."""
    return True


def model_method_with_arrays_fed(model, name, args, kwargs, keras_method):
    """Keras' `fit`, `evaluate` or `predict` (`name`) of `model` on its arguments: `keras_method(*args, **kwargs)`."""
    return keras_method(*args, **kwargs)


def traces_saved_models():
    """Whether a model can be traced into a TensorFlow SavedModel in this process: no, that takes TensorFlow's
    own tensors (`keras_seq.export` runs a TensorFlow-backend process for it)."""
    return False


def compiles_each_input_shape():
    """Whether `model.fit`'s step is compiled once per input shape by default: no."""
    return False


def run_programs_on_calling_thread():
    """Have the backend run compiled programs on the thread that calls them, where it has another:
    nothing to change."""


# Several devices and processes (the recipes' --distribute, --model-parallel and multi-process runs).


def data_parallel_scope():
    """A context in which a model is built to train data-parallel over this process's devices; None where
    Keras has no data-parallel `fit` (torch)."""
    return None


def model_parallel_scope(make_distribution):
    """A context in which a model is built split over the devices by the `keras.distribution` that
    `make_distribution()` returns; None, and nothing made, where Keras splits no model (every backend but JAX)."""
    return None


def batch_split_ways():
    """Into how many equal parts the current `keras.distribution` splits each batch: 1, none is set."""
    return 1


def batch_parts(processes):
    """Into how many equal parts a global batch is split across `processes` processes and their devices:
    one replica a process."""
    return processes


def configured_processes():
    """`(count, index)` of the processes a cluster configuration names for this backend; None, where the
    processes are named by flags or Keras' variables (`keras_seq.distribution.process_settings`)."""
    return None


def join_processes(coordinator, count, index):
    """Join `count` processes as process `index` (`count` > 1) and return the strategy to build under, or
    None; raises ValueError where Keras has no multi-process `fit`."""
    raise ValueError(
        f"expected the jax backend (keras.distribution.initialize) or tensorflow with TF_CONFIG, "
        f"got {keras.backend.backend()}"
    )


def leave_processes():
    """End this process's part in a multi-process run after training: nothing to stop."""


def process_batches(batches, pad_rows, take_rows):
    """The part of `batches` (a `tf.data.Dataset`) this process feeds `fit`: the batches as they are.

    `pad_rows(batches, multiple)` pads each batch's rows to a multiple of `multiple`, and
    `take_rows(batches, count, index)` keeps each batch's `index`-th of `count` row blocks, for the
    backends that place equal parts of each batch on their devices and processes.
    """
    return batches


def tf_data_without_autotuning():
    """`tf.data.Options` with autotuning off, for input pipelines whose work is too small to tune (on every backend).

    While training keeps the CPU busy, deleting a `tf.data` iterator with autotuning on waits for the
    autotuning thread's next scheduled wake-up (a period that doubles after every wake-up, so seconds into
    training), and Keras deletes one at the end of every epoch of array inputs, of every validation pass and
    of `fit`. With autotuning off, `num_parallel_calls=AUTOTUNE` means one call per CPU core.
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return options

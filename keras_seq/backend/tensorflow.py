"""TensorFlow's overrides of `keras_seq.backend.common`: each says what it replaces, why, and when it can go.

Most of them serve TensorFlow's eager-graph (non-XLA) training step, which is how Keras trains on a
CPU (`jit_compile="auto"` turns XLA on only where an accelerator is visible); under XLA they are
neither faster nor slower, so each can go once the recipes compile their CPU steps with XLA.
"""

import inspect
import json
import os

import keras
import tensorflow as tf

from keras_seq.backend import common, keras_internals


def concrete_value(x):
    """`x` as a NumPy array if its value is known now (eager), else None (inside a `tf.function`)."""
    known = common.concrete_value(x)
    if known is not None or x is None or isinstance(x, keras.KerasTensor):
        return known
    if not tf.executing_eagerly() or not hasattr(x, "numpy"):
        return None
    return x.numpy()


def compile_for_inference(model, function):
    """`function(*tensors)` compiled once by XLA (`tf.function(jit_compile=True)`) for repeated inference calls."""
    return tf.function(function, jit_compile=True, reduce_retracing=True, autograph=False)  # keras.ops loops


def target_nll_from_logits(logits, targets):
    """`common.target_nll_from_logits` with its gradient written out (`_cross_entropy`).

    Replaces: TensorFlow's gradient of the target's gather, which scatters it into a zeroed copy of the
    `(B, T, V)` logits. Remove when TensorFlow's graph differentiates a gather without the scatter.
    """
    return _cross_entropy(logits, targets, 0.0)


def smoothed_nll_from_logits(logits, targets, epsilon):
    """`common.smoothed_nll_from_logits` with its gradient written out (`_cross_entropy`); removable as above."""
    return _cross_entropy(logits, targets, epsilon)


def _cross_entropy(logits, targets, epsilon):
    """`logsumexp(z) - (1 - epsilon) z_target - epsilon mean(z)`, its gradient `softmax(z) - q'`
    (Szegedy et al., 2016, sec. 7) from the normaliser's exponentials, `q'` being
    `(1 - epsilon) [k = target] + epsilon / V`.

    One pass for the exponentials serves the value and the gradient, which builds `q'` once rather
    than scattering the gather's gradient into zeros; `epsilon` is a Python float.
    """
    vocabulary_size = tf.shape(logits)[-1]
    targets = tf.cast(targets, tf.int32)  # the integer types `tf.gather` and `tf.one_hot` take

    @tf.custom_gradient
    def cross_entropy(logits):
        largest = tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))
        exponentials = tf.exp(logits - largest)
        total = tf.reduce_sum(exponentials, axis=-1)
        target_logit = tf.gather(logits, targets[..., None], batch_dims=len(targets.shape))[..., 0]
        losses = largest[..., 0] + tf.math.log(total) - (1.0 - epsilon) * target_logit
        if epsilon:
            losses -= epsilon * tf.reduce_mean(logits, axis=-1)

        def gradient(upstream):
            off_target = epsilon / tf.cast(vocabulary_size, tf.float32)
            targets_smoothed = tf.one_hot(
                targets, vocabulary_size, on_value=1.0 - epsilon + off_target, off_value=off_target
            )
            return (exponentials * (1.0 / total)[..., None] - targets_smoothed) * upstream[..., None]

        return losses, gradient

    return cross_entropy(logits)


def is_first_argmax(scores, targets):
    """`tf.argmax` compared with the targets.

    Replaces: Keras' `argmax`, which first rewrites every -0.0 of the scores in extra passes. Remove when
    Keras' TensorFlow `argmax` calls `tf.argmax` directly.
    """
    return tf.equal(tf.argmax(scores, axis=-1, output_type=tf.int32), tf.cast(targets, tf.int32))


def layer_normalization(layer, inputs, keras_call):
    """Keras' layer normalisation with its gradient in closed form (`closed_form_layer_normalization`) over the
    last axis with a scale and an offset in float32 arithmetic; Keras' layer for every other configuration.

    Replaces: TensorFlow's differentiation of Keras' moments operation by operation, each broadcast tiled
    back. Remove when the recipes compile TensorFlow's CPU step with XLA, which fuses the same.
    """
    if not uses_closed_form_layer_normalization(layer, inputs):
        return keras_call()
    outputs = closed_form_layer_normalization(tf.cast(inputs, tf.float32), layer.gamma, layer.beta, layer.epsilon)
    return tf.cast(outputs, layer.compute_dtype)


def uses_closed_form_layer_normalization(layer, inputs):
    """Whether `layer_normalization` takes the closed form: the last axis, a scale and an offset, and float32
    arithmetic (which Keras' layer also uses for float32, float16 and bfloat16 inputs)."""
    if layer.rms_scaling or not (layer.center and layer.scale):
        return False
    axes = layer.axis if isinstance(layer.axis, list) else [layer.axis]
    last_axis = [axis % len(inputs.shape) for axis in axes] == [len(inputs.shape) - 1]
    float32 = keras.backend.result_type(inputs.dtype, "float32") == "float32"
    return last_axis and float32 and layer.gamma.dtype == "float32" and layer.beta.dtype == "float32"


def closed_form_layer_normalization(x, gamma, beta, epsilon):
    """Keras' layer normalisation over the last axis (float32), its gradient written out.

    The output is Keras' `x * inv + (beta - mean * inv)`, `inv = gamma / sqrt(var + epsilon)`. The
    gradient, with `x_hat = (x - mean) / sqrt(var + epsilon)` and `g = dy * gamma`:
    `dx = (g - mean(g) - x_hat mean(g x_hat)) / sqrt(var + epsilon)`, `dgamma = sum(dy x_hat)`,
    `dbeta = sum(dy)` over the leading axes (Ba et al., 2016, sec. 3, differentiated).
    """

    @tf.custom_gradient
    def normalized(x, gamma, beta):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        centred = x - mean
        reciprocal_deviation = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True) + epsilon)
        inv = reciprocal_deviation * gamma

        def gradient(upstream):
            x_hat = centred * reciprocal_deviation
            scaled = upstream * gamma
            dx = reciprocal_deviation * (
                scaled
                - tf.reduce_mean(scaled, axis=-1, keepdims=True)
                - x_hat * tf.reduce_mean(scaled * x_hat, axis=-1, keepdims=True)
            )
            leading = list(range(len(x.shape) - 1))
            return dx, tf.reduce_sum(upstream * x_hat, axis=leading), tf.reduce_sum(upstream, axis=leading)

        return x * inv + (beta - mean * inv), gradient

    # Tensors, not variables, go in: the gradient then reaches the variables through their reads.
    return normalized(x, tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta))


def transpose(x, axes):
    """A one-operand `tf.einsum` that permutes the axes.

    Replaces: `tf.transpose`, which with oneDNN on (TensorFlow's default on x86) runs as oneDNN's
    reorder, set up anew at each call, where the einsum kernel permutes with Eigen's own transpose.
    Remove when TensorFlow's oneDNN transpose is as fast as Eigen's, or oneDNN is off by default.
    """
    letters = "abcdefghijklmnopqrstuvwxyz"[: len(x.shape)]
    return tf.einsum(f"{letters}->{''.join(letters[axis] for axis in axes)}", x)


def matmul_transposed(a, b):
    """One `tf.linalg.matmul(..., transpose_b=True)` where both are of one dtype and rank 2 or more.

    Replaces: `matmul(a, swapaxes(b))`, whose gradient transposes `b`'s gradient as an operation of its own
    (oneDNN's reorder, see `transpose`); TensorFlow folds a transpose into the forward product only.
    Remove with `transpose`'s override.
    """
    if a.dtype != b.dtype or min(len(a.shape), len(b.shape)) < 2:
        return common.matmul_transposed(a, b)
    return tf.linalg.matmul(a, b, transpose_b=True)


def adam_update(optimizer, gradients, variables, learning_rate, keras_update):
    """Keras' Adam step by TensorFlow's `ResourceApplyAdam` kernel, one per variable, where it applies.

    The kernel computes Keras' update (`alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)`,
    `var -= alpha m / (sqrt(v) + epsilon)`, Kingma and Ba, 2015, algorithm 1) in one operation where
    Keras' own runs a chain of small ones per variable. A sparse (`tf.IndexedSlices`) gradient gets
    Keras' own update; `keras_update()` runs for `amsgrad`, a variable other than float32, or under a
    `tf.distribute` strategy (in scope, or holding the variables), whose replicas Keras' update merges.
    Remove when Keras' TensorFlow Adam calls the fused kernel itself.
    """
    distributed = tf.distribute.has_strategy() or any(
        isinstance(variable.value, tf.distribute.DistributedValues) for variable in variables
    )
    if optimizer.amsgrad or distributed or any(variable.dtype != "float32" for variable in variables):
        return keras_update()
    step = tf.cast(optimizer.iterations + 1, tf.float32)
    beta_1, beta_2 = tf.cast(optimizer.beta_1, tf.float32), tf.cast(optimizer.beta_2, tf.float32)
    hyperparameters = {
        "beta1_power": tf.pow(beta_1, step),
        "beta2_power": tf.pow(beta_2, step),
        "lr": tf.cast(learning_rate, tf.float32),
        "beta1": beta_1,
        "beta2": beta_2,
        "epsilon": tf.cast(optimizer.epsilon, tf.float32),
    }
    for gradient, variable in zip(gradients, variables):
        if isinstance(gradient, tf.IndexedSlices):  # Keras squares each slice before summing repeated rows
            optimizer.update_step(gradient, variable, learning_rate)
            continue
        momentum, velocity = keras_internals.adam_slots(optimizer, variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=momentum.handle,
            v=velocity.handle,
            grad=tf.cast(gradient, tf.float32),
            **hyperparameters,
        )
    return None


def traces_saved_models():
    """Yes: the model's calls are TensorFlow ops, which `tf.function` traces into the SavedModel."""
    return True


def compiles_each_input_shape():
    """Whether `model.fit`'s step is compiled once per input shape: where an accelerator is visible, since
    Keras' `jit_compile="auto"` turns XLA on there (a `tf.distribute` strategy in scope, which this does not
    see, turns it off: there it only costs padding)."""
    return any(device.device_type != "CPU" for device in tf.config.list_physical_devices())


# Several devices and processes.


def data_parallel_scope():
    """A `tf.distribute.MirroredStrategy`'s scope over every GPU, or without one every logical CPU device
    (the strategy's own default is CPU:0 alone)."""
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return tf.distribute.MirroredStrategy([device.name for device in devices]).scope()


def configured_processes():
    """`(number of workers, this worker's index)` that `TF_CONFIG` names; `(1, 0)` without it.

    `TF_CONFIG` is TensorFlow's cluster description: `{"cluster": {"worker": ["host:port", ...]},
    "task": {"type": "worker", "index": i}}`, the same list on every worker.
    """
    text = os.environ.get("TF_CONFIG")
    if not text:
        return 1, 0
    try:
        config = json.loads(text)
        workers, task = config["cluster"]["worker"], config["task"]
        index = int(task["index"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"TF_CONFIG: expected JSON with cluster.worker (a list of host:port) and task.index, "
            f"got {text[:200]!r} ({type(error).__name__}: {error})"
        ) from None
    others = sorted(set(config["cluster"]) - {"worker"})
    if others:
        raise ValueError(
            f"TF_CONFIG: expected a cluster of workers alone (the recipes' processes are its cluster.worker, "
            f"worker 0 writing the outputs), got also {others}"
        )
    if task.get("type", "worker") != "worker" or not 0 <= index < len(workers):
        raise ValueError(f"TF_CONFIG: expected a worker task with an index in [0, {len(workers)}), got {task}")
    return len(workers), index


def join_processes(coordinator, count, index):
    """A `tf.distribute.MultiWorkerMirroredStrategy` over `TF_CONFIG`'s workers (made before any other
    TensorFlow op, as TensorFlow asks), with Keras' `fit` made to run under it
    (`keras_internals.prepare_fit_for_several_workers`, once the model is built)."""
    return tf.distribute.MultiWorkerMirroredStrategy()


def process_batches(batches, pad_rows, take_rows):
    """The batches with tf.data's `DATA` sharding, which under a `MultiWorkerMirroredStrategy` gives each
    worker its rows of every global batch (and does nothing otherwise)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return batches.with_options(options)


# Arrays into `fit`, `evaluate` and `predict` (keras_seq.models.ArrayFeedModel).
_ArrayDataAdapter, _can_convert_arrays, _train_validation_split = keras_internals.array_data_adapter()


def model_method_with_arrays_fed(model, name, args, kwargs, keras_method):
    """`keras_method(*args, **kwargs)`, Keras' `fit`, `evaluate` or `predict` (`name`) of `model`, with array
    inputs (and validation arrays) wrapped in Keras' own array adapter with tf.data's autotuning off.

    Replaces: Keras' array adapter, which feeds arrays through a `tf.data` pipeline with autotuning on and
    deletes its iterator at the end of every epoch; while training keeps the CPU busy, that waits for the
    autotuning thread's next wake-up (`common.tf_data_without_autotuning`). Same batches, shuffling, weights
    and validation split. Remove when Keras' array adapter turns autotuning off.
    """
    arguments, extra = _arguments(getattr(keras.Model, name), model, args, kwargs)
    if name == "fit":
        _feed_validation_arrays(arguments)
        _feed_arrays(arguments, "steps_per_epoch", shuffle=arguments["shuffle"])
    else:
        _feed_arrays(arguments, "steps")
    return keras_method(**arguments, **extra)


class _ArraysWithoutAutotune(_ArrayDataAdapter):
    """Keras' array adapter whose TensorFlow dataset has tf.data's autotuning off."""

    def get_tf_dataset(self):
        return super().get_tf_dataset().with_options(common.tf_data_without_autotuning())


def _is_array_data(x, y=None, sample_weight=None):
    return x is not None and _can_convert_arrays((x, y, sample_weight))


def _arguments(method, model, args, kwargs):
    """All arguments of a call to `method` by name, defaults filled in, `**kwargs` kept apart."""
    bound = inspect.signature(method).bind(model, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    del arguments["self"]
    return arguments, arguments.pop("kwargs", {})


def _feed_arrays(arguments, steps_argument, shuffle=False):
    """Replace array `x` (with `y`, `sample_weight`, `class_weight`) in `arguments` by one adapter."""
    data = {name: arguments.get(name) for name in ("x", "y", "sample_weight", "class_weight")}
    if not _is_array_data(data["x"], data["y"], data["sample_weight"]):
        return
    arguments.update((name, None) for name in data if name in arguments)
    arguments["x"] = _ArraysWithoutAutotune(
        **data, batch_size=arguments["batch_size"], steps=arguments[steps_argument], shuffle=shuffle
    )
    arguments["batch_size"] = None


def _feed_validation_arrays(arguments):
    """`fit`'s validation arrays (given, or split off as Keras does) as one adapter."""
    if arguments["validation_split"] and arguments["validation_data"] is None and _is_array_data(arguments["x"]):
        data = (arguments["x"], arguments["y"], arguments["sample_weight"])
        (arguments["x"], arguments["y"], arguments["sample_weight"]), arguments["validation_data"] = (
            _train_validation_split(data, validation_split=arguments["validation_split"])
        )
        arguments["validation_split"] = 0.0
    if arguments["validation_data"] is None:
        return
    x, y, weights = keras.utils.unpack_x_y_sample_weight(arguments["validation_data"])
    validation = {
        "x": x,
        "y": y,
        "sample_weight": weights,
        "steps": arguments["validation_steps"],
        "batch_size": arguments["validation_batch_size"] or arguments["batch_size"],
    }
    _feed_arrays(validation, "steps")
    if validation["x"] is not x:
        arguments["validation_data"] = validation["x"]

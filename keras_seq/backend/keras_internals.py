"""Every use keras_seq makes of Keras' private API, in one place, with the Keras version it was checked against.

Keras' public API has no equivalent for these; each function says what it reaches and why.
`PRIVATE_USES` names them, and `check_private_uses` (run by tests/backend/test_keras_internals.py)
fails with the use's name when a Keras upgrade removes or moves what it reaches.
"""

import keras

CHECKED_WITH_KERAS = "3.15.1"

# (use, what it reaches); `check_private_uses` resolves each.
PRIVATE_USES = (
    ("Keras masks on tensors", "keras.src.backend.common.masking.get_keras_mask, set_keras_mask"),
    ("a layer's call without Layer.__call__", "Layer._remat_mode"),
    ("Adam's slots", "Optimizer._get_variable_index, Adam._momentums, Adam._velocities"),
    (
        "an optimizer's whole update step",
        "BaseOptimizer._backend_update_step (overridden by keras_seq.optimizers.Adam)",
    ),
    ("Keras' torch Adam", "keras.src.backend.torch.optimizers.torch_adam.Adam._parallel_update_step"),
    (
        "array inputs without tf.data autotuning",
        "keras.src.trainers.data_adapters: ArrayDataAdapter, can_convert_arrays, train_validation_split",
    ),
    (
        "fit under MultiWorkerMirroredStrategy",
        "Trainer._symbolic_build, _maybe_symbolic_build, keras.src.backend.tensorflow.trainer.reduce_per_replica",
    ),
)


def get_keras_mask(x):
    """The mask Keras attached to `x`, or None (the mask Keras' own layers and losses read)."""
    from keras.src.backend.common import masking

    return masking.get_keras_mask(x)


def set_keras_mask(x, mask):
    """Attach `mask` to `x` the way Keras' layers and losses expect it."""
    from keras.src.backend.common import masking

    masking.set_keras_mask(x, mask)


def call_without_bookkeeping(layer, *args, **kwargs):
    """`layer.call(*args, **kwargs)`, the layer's computation without `Layer.__call__`'s bookkeeping
    (input conversion and casts, `training` and mask resolution, name and autocast scopes).

    For a layer called where that bookkeeping is done already or not needed; on eager torch it costs as
    much as a small product. A quantized layer, or one built under rematerialization, goes through
    `__call__`, which dispatches those.
    """
    if layer.dtype_policy.quantization_mode is not None or getattr(layer, "_remat_mode", None) is not None:
        return layer(*args, **kwargs)
    return layer.call(*args, **kwargs)


def adam_slots(optimizer, variable):
    """`(momentum, velocity)`: the Keras variables in which `optimizer`, a `keras.optimizers.Adam`, keeps
    `variable`'s first and second moments (for a fused kernel that updates them in place)."""
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


def adam_slot_lists(optimizer):
    """`(momentums, velocities)`: Adam's lists of slots, new objects whenever the optimizer builds new slots."""
    return optimizer._momentums, optimizer._velocities


def torch_adam_multi_tensor_update(optimizer, gradients, variables, learning_rate):
    """Keras' multi-tensor Adam update on torch, the one `keras.optimizers.Adam` runs (a subclass of Adam
    otherwise gets the per-variable loop of Keras' base optimizer)."""
    from keras.src.backend.torch.optimizers.torch_adam import Adam as KerasTorchAdam

    return KerasTorchAdam._parallel_update_step(optimizer, gradients, variables, learning_rate)


def array_data_adapter():
    """`(ArrayDataAdapter, can_convert_arrays, train_validation_split)`: Keras' adapter of in-memory arrays for
    `fit`, its test of what it takes, and the split it makes for `validation_split`."""
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter, can_convert_arrays
    from keras.src.trainers.data_adapters.array_slicing import train_validation_split

    return ArrayDataAdapter, can_convert_arrays, train_validation_split


def prepare_fit_for_several_workers(model, batch):
    """Make `model` (built and compiled in a `MultiWorkerMirroredStrategy`'s scope) trainable by `fit`.

    Keras' TensorFlow trainer fails under this strategy in two places (keras-team/keras#20585): before
    the first step it averages a distributed input batch with `strategy.reduce`, which takes no nested
    structure on several workers; and it averages each step's scalar logs with
    `strategy.reduce(..., axis=0)`, which a scalar has no axis for. Here the loss, metrics and optimizer
    are built from one local `batch`, and a step's scalar logs are averaged over replicas with axis None.
    """
    import tensorflow as tf
    from keras.src.backend.tensorflow import trainer

    with model.distribute_strategy.scope():
        model._symbolic_build(data_batch=batch)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    if getattr(trainer.reduce_per_replica, "averages_scalars", False):
        return
    reduce_per_replica = trainer.reduce_per_replica

    def reduced(values, strategy, reduction="auto"):
        if reduction in ("auto", "mean") and isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return keras.tree.map_structure(lambda value: strategy.reduce("MEAN", value, axis=None), values)
        return reduce_per_replica(values, strategy, reduction)

    reduced.averages_scalars = True
    trainer.reduce_per_replica = reduced


def check_private_uses():
    """`{use: None or the error}` for each of `PRIVATE_USES`, resolved against the installed Keras."""
    import importlib

    def reach(module, *names):
        target = importlib.import_module(module)
        for name in names:
            target = getattr(target, name)
        return target

    adam = keras.optimizers.Adam(learning_rate=0.1)
    variable = keras.Variable([1.0])
    adam.build([variable])
    probes = {
        "Keras masks on tensors": lambda: [
            reach("keras.src.backend.common.masking", name) for name in ("get_keras_mask", "set_keras_mask")
        ],
        "a layer's call without Layer.__call__": lambda: _require_attribute(keras.layers.Dense(1), "_remat_mode"),
        "Adam's slots": lambda: adam_slots(adam, variable),
        "an optimizer's whole update step": lambda: reach(
            "keras.src.optimizers.base_optimizer", "BaseOptimizer", "_backend_update_step"
        ),
        "Keras' torch Adam": lambda: _torch_adam_probe(reach),
        "array inputs without tf.data autotuning": array_data_adapter,
        "fit under MultiWorkerMirroredStrategy": lambda: _trainer_probe(reach),
    }
    results = {}
    for use, _ in PRIVATE_USES:
        try:
            probes[use]()
            results[use] = None
        except (ImportError, AttributeError, IndexError, KeyError) as error:
            results[use] = f"{type(error).__name__}: {error}"
    return results


def _require_attribute(obj, name):
    if not hasattr(obj, name):
        raise AttributeError(f"{type(obj).__name__} has no {name}")


def _torch_adam_probe(reach):
    if keras.backend.backend() == "torch":
        reach("keras.src.backend.torch.optimizers.torch_adam", "Adam", "_parallel_update_step")


def _trainer_probe(reach):
    if keras.backend.backend() == "tensorflow":  # the strategy is TensorFlow's
        for name in ("_symbolic_build", "_maybe_symbolic_build"):
            _require_attribute(keras.Model, name)
        reach("keras.src.backend.tensorflow.trainer", "reduce_per_replica")

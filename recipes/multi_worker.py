"""Several TensorFlow processes: `tf.distribute.MultiWorkerMirroredStrategy` over the workers that
`TF_CONFIG` names, and what Keras 3's `fit` needs to run under it.

Keras 3's TensorFlow trainer fails under this strategy in two places (keras-team/keras#20585):
before the first step it averages a distributed input batch with `strategy.reduce`, which takes
no nested structure on several workers; and it averages each step's scalar logs with
`strategy.reduce(..., axis=0)`, which a scalar has no axis for. `prepare_fit` works around both.
"""

import json
import os

import keras

from recipes.devices import UsageError


def tf_config_workers():
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
        raise UsageError(f"TF_CONFIG: expected JSON with cluster.worker (a list of host:port) and task.index, "
                         f"got {text[:200]!r} ({type(error).__name__}: {error})") from None
    others = sorted(set(config["cluster"]) - {"worker"})
    if others:
        raise UsageError(f"TF_CONFIG: expected a cluster of workers alone (the recipes' processes are its cluster.worker, "
                         f"worker 0 writing the outputs), got also {others}")
    if task.get("type", "worker") != "worker" or not 0 <= index < len(workers):
        raise UsageError(f"TF_CONFIG: expected a worker task with an index in [0, {len(workers)}), got {task}")
    return len(workers), index


def strategy():
    """The strategy of every worker of `TF_CONFIG`; made before any other TensorFlow op, as TensorFlow asks."""
    import tensorflow as tf

    return tf.distribute.MultiWorkerMirroredStrategy()


def prepare_fit(model, batches):
    """Make `model` (built and compiled in the strategy's scope) trainable by `fit` on several workers:
    build its loss, metrics and optimizer from one batch of `batches` instead of a distributed one,
    and average a step's scalar logs over the replicas (axis None)."""
    from keras.src.backend.tensorflow import trainer

    with model.distribute_strategy.scope():
        model._symbolic_build(data_batch=next(iter(batches)))
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    if not getattr(trainer.reduce_per_replica, "averages_scalars", False):
        trainer.reduce_per_replica = _scalar_averaging(trainer.reduce_per_replica)


def _scalar_averaging(reduce_per_replica):
    import tensorflow as tf

    def reduced(values, strategy, reduction="auto"):
        if reduction in ("auto", "mean") and isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return keras.tree.map_structure(lambda value: strategy.reduce("MEAN", value, axis=None), values)
        return reduce_per_replica(values, strategy, reduction)

    reduced.averages_scalars = True
    return reduced

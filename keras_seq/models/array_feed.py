"""Array inputs to `fit`, `evaluate` and `predict` on TensorFlow without tf.data's teardown wait.

Keras feeds arrays to a TensorFlow model through a `tf.data` pipeline with autotuning on,
and deletes its iterator at the end of every epoch; while training keeps the CPU busy,
that waits for the autotuning thread's next wake-up (`_backend.tf_data_without_autotuning`):
a `transformer_lm` epoch whose last batch ended at 7.0 s returned at 10.26 s
(benchmarks/RESULTS.md). The pipeline only slices arrays in memory, so there is nothing to
tune: keras_seq's models build Keras' own pipeline for the same batches with autotuning
off. Other backends and other inputs (datasets, generators, `PyDataset`) go to Keras as given.
"""

import inspect

import keras
from keras.src.trainers.data_adapters import array_slicing
from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter, can_convert_arrays

from keras_seq import _backend


class _ArraysWithoutAutotune(ArrayDataAdapter):
    """Keras' array adapter whose TensorFlow dataset has tf.data's autotuning off."""

    def get_tf_dataset(self):
        return super().get_tf_dataset().with_options(_backend.tf_data_without_autotuning())


def _is_array_data(x, y=None, sample_weight=None):
    return x is not None and can_convert_arrays((x, y, sample_weight))


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
            array_slicing.train_validation_split(data, validation_split=arguments["validation_split"])
        )
        arguments["validation_split"] = 0.0
    if arguments["validation_data"] is None:
        return
    x, y, weights = keras.utils.unpack_x_y_sample_weight(arguments["validation_data"])
    validation = {"x": x, "y": y, "sample_weight": weights, "steps": arguments["validation_steps"],
                  "batch_size": arguments["validation_batch_size"] or arguments["batch_size"]}
    _feed_arrays(validation, "steps")
    if validation["x"] is not x:
        arguments["validation_data"] = validation["x"]


@keras.saving.register_keras_serializable(package="keras_seq")
class ArrayFeedModel(keras.Model):
    """`keras.Model` whose `fit`, `evaluate` and `predict` take arrays without tf.data's wait (module doc).

    Same arguments, batches, shuffling, weights and validation split as Keras'; on
    TensorFlow, array inputs are wrapped in Keras' own array adapter with tf.data's
    autotuning off. Every keras_seq model is one.
    """

    def fit(self, *args, **kwargs):
        """`keras.Model.fit` (same arguments); arrays are fed as the class says."""
        return self._with_arrays_fed("fit", args, kwargs)

    def evaluate(self, *args, **kwargs):
        """`keras.Model.evaluate` (same arguments); arrays are fed as the class says."""
        return self._with_arrays_fed("evaluate", args, kwargs)

    def predict(self, *args, **kwargs):
        """`keras.Model.predict` (same arguments); arrays are fed as the class says."""
        return self._with_arrays_fed("predict", args, kwargs)

    def _with_arrays_fed(self, name, args, kwargs):
        keras_method = getattr(super(), name)
        if keras.backend.backend() != "tensorflow":
            return keras_method(*args, **kwargs)
        arguments, extra = _arguments(getattr(keras.Model, name), self, args, kwargs)
        if name == "fit":
            _feed_validation_arrays(arguments)
            _feed_arrays(arguments, "steps_per_epoch", shuffle=arguments["shuffle"])
        else:
            _feed_arrays(arguments, "steps")
        return keras_method(**arguments, **extra)

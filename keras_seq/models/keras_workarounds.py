"""What keras_seq's models do differently from `keras.Model`, and why: the Keras behaviour each works around.

Checked against Keras 3.15.1; each piece is kept only while Keras behaves as its
docstring says. Their tests: tests/models/test_array_feed.py (the array feed),
tests/metrics/test_token_metrics.py (`evaluate` counts only real tokens) and
tests/models/test_transformer_models.py (the compiled loss, compiling on load).

* `ArrayFeedModel`: arrays into `fit`, `evaluate` and `predict` on TensorFlow without
  tf.data's teardown wait. Keras (keras/src/trainers/data_adapters/array_data_adapter.py)
  feeds arrays through a `tf.data` pipeline with autotuning on, and deletes its iterator
  at the end of every epoch; while training keeps the CPU busy, that waits for the
  autotuning thread's next wake-up. The pipeline only slices arrays in memory, so
  there is nothing to tune: these models build Keras' own pipeline for the same batches
  with autotuning off (`keras_seq.backend.tensorflow.model_method_with_arrays_fed`).
  Other backends and other inputs (datasets, generators, `PyDataset`) go to Keras as given.
* `MaskedLogitsModel`: models whose output is logits over a vocabulary that carry a
  padding mask (every language and seq2seq model). Keras' JAX trainer
  (keras/src/backend/jax/trainer.py) hands `compute_metrics` a `y_pred` without its
  mask, and Keras compiles a loaded model only when `compile` is not overridden
  (`Trainer.compile_from_config`); see each method.
"""

import keras
from keras import ops

from keras_seq import backend, losses


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
        return backend.model_method_with_arrays_fed(self, name, args, kwargs, getattr(super(), name))


class MaskedLogitsModel(ArrayFeedModel):
    """An `ArrayFeedModel` whose output is padding-masked logits: the loss computed faster, the mask kept."""

    _inputs_are_prompts = True  # the mask comes from `token_ids`; seq2seq models (False) take `decoder_inputs`

    def compile(self, optimizer="rmsprop", loss=None, *args, **kwargs):
        """`keras.Model.compile`, with Keras' `SparseCategoricalCrossentropy` computed faster.

        An instance of exactly that class, given as the single loss, becomes
        `ks.losses.SparseCategoricalCrossentropy` with the same configuration: the
        same loss and gradients, without the `(B, T, V)` one-hot of Keras' JAX op or
        the logits copy of its torch op (a faster `transformer_lm` training step on
        JAX and eager torch; benchmarks/RESULTS.md). Losses in a dict
        or list, subclasses and functions are used as given.
        """
        if type(loss) is keras.losses.SparseCategoricalCrossentropy:
            loss = losses.SparseCategoricalCrossentropy.like(loss)
        super().compile(optimizer, loss, *args, **kwargs)

    def compile_from_config(self, config):
        """Compile a loaded model as saved (Keras does it only for models that keep its own `compile`)."""
        if type(self).compile is not MaskedLogitsModel.compile:  # a user's override: Keras' warning, no compile
            return super().compile_from_config(config)
        self.compile(**keras.saving.deserialize_keras_object(config))
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(self.trainable_variables)  # so the saved optimizer state can load

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """`keras.Model.compute_metrics`, with the logits' padding mask put back where Keras lost it.

        The logits carry the Keras mask `ids != 0` of the model's target-side ids
        (`token_ids` of a language model, `decoder_inputs` of a seq2seq model).
        Keras' JAX trainer hands the metrics a new `y_pred` without it (the loss,
        computed inside the traced step, still sees it), so metrics counted padding
        on JAX alone; here the mask is rebuilt from those ids.
        """
        if backend.get_keras_mask(y_pred) is None:
            ids = self._input_named(x, "token_ids" if self._inputs_are_prompts else "decoder_inputs")
            if ids is not None:
                backend.set_keras_mask(y_pred, ops.not_equal(ids, 0))
        return super().compute_metrics(x, y, y_pred, sample_weight)

    def _input_named(self, x, name):
        """The input `name` of `x` as given to `fit`: a dict of inputs, or the one input array."""
        if isinstance(x, dict):
            return x.get(name)
        return x if [tensor.name for tensor in self.inputs] == [name] else None

"""Streaming Keras metrics over token predictions that skip an ignored (padding) id."""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq import backend
from keras_seq.losses import in_vocabulary, target_nll


class _MaskedTokenMetric(keras.metrics.Metric):
    """Accumulates `sum(value * weight)` and `sum(weight)` over counted positions.

    A position counts unless its target is `ignore_index` or the predictions' Keras
    mask (e.g. the id-0 padding mask a `ks.models` language model attaches to its
    logits) is False there. Keras' JAX trainer drops that mask between the forward
    pass and the metrics during `fit` (for its own metrics too); the `ks.models`
    language and seq2seq models put it back, other models need `ignore_index`.
    """

    def __init__(self, ignore_index=None, name=None, dtype="float32", **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        self.ignore_index = v.check_optional_id(f"{type(self).__name__} '{self.name}'", "ignore_index", ignore_index)
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="count")

    def _per_position(self, y_true, y_pred):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        owner = f"{type(self).__name__} '{self.name}'"
        pred_shape = v.check_rank(owner, "y_pred", y_pred, (2, 3))
        v.check_shape(owner, "y_true", y_true, pred_shape[:-1])
        y_true = ops.cast(y_true, "int32")
        # The Keras mask of the predictions (e.g. a model's id-0 padding), read as Keras' own metrics do.
        keras_mask = backend.get_keras_mask(y_pred)
        weights = ops.ones(ops.shape(y_true), "float32") if keras_mask is None else ops.cast(keras_mask, "float32")
        if self.ignore_index is not None:
            weights = weights * ops.cast(ops.not_equal(y_true, self.ignore_index), "float32")
            y_true = ops.where(ops.not_equal(y_true, self.ignore_index), y_true, 0)
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            while len(sample_weight.shape) < len(weights.shape):
                sample_weight = ops.expand_dims(sample_weight, -1)
            weights = weights * sample_weight
        values = self._per_position(y_true, ops.cast(y_pred, "float32"))
        self.total.assign_add(ops.sum(values * weights))
        self.count.assign_add(ops.sum(weights))

    def get_config(self):
        return {**super().get_config(), "ignore_index": self.ignore_index}


@keras.saving.register_keras_serializable(package="keras_seq")
class MaskedAccuracy(_MaskedTokenMetric):
    """Share of counted positions whose arg-max prediction equals the target.

    Args:
        ignore_index: target id (e.g. padding 0) left out of the count, or None.

    Call arguments:
        y_true: integer targets `(B,)` or `(B, T)`; y_pred: scores `(B, V)` or `(B, T, V)`.
    """

    def __init__(self, ignore_index=None, name="masked_accuracy", **kwargs):
        super().__init__(ignore_index=ignore_index, name=name, **kwargs)

    def _per_position(self, y_true, y_pred):
        known = in_vocabulary(y_true, y_pred.shape[-1])  # an id outside [0, V) is never the arg-max
        return ops.cast(ops.logical_and(known, backend.is_first_argmax(y_pred, ops.where(known, y_true, 0))), "float32")

    def result(self):
        return ops.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="keras_seq")
class Perplexity(_MaskedTokenMetric):
    """`exp(mean negative log-likelihood)` of the targets over counted positions.

    The exponential of the cross-entropy with one-hot targets (Murphy, 2022, sec. 6.1.5):
    the effective number of equally likely choices the model hesitates between.

    Args:
        ignore_index: target id (e.g. padding 0) left out, or None.
        from_logits: predictions are logits (True) or probabilities (False).
    """

    def __init__(self, ignore_index=None, from_logits=True, name="perplexity", **kwargs):
        super().__init__(ignore_index=ignore_index, name=name, **kwargs)
        self.from_logits = bool(from_logits)

    def _per_position(self, y_true, y_pred):
        return target_nll(y_pred, y_true, self.from_logits)

    def result(self):
        return ops.exp(ops.divide_no_nan(self.total, self.count))

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}

"""Label-smoothed cross-entropy (Szegedy et al., 2016, sec. 7) and Keras' sparse cross-entropy.

Both are computed without a one-hot.
"""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq import backend


def _log_of_probabilities(y_pred):
    return ops.log(ops.clip(y_pred, 1e-7, 1.0))


def target_nll(y_pred, targets, from_logits=True):
    """`-log q(target)` per position, in float32: `(..., V), (...) -> (...)`.

    From logits by the fastest exact form of the backend (`backend.target_nll_from_logits`),
    none of which builds a `(..., V)` one-hot in the forward pass; from probabilities by a
    gather of their log.
    """
    y_pred = ops.cast(y_pred, "float32")
    if not from_logits:
        return -backend.take_target(_log_of_probabilities(y_pred), targets)
    return backend.target_nll_from_logits(y_pred, targets)


def in_vocabulary(targets, vocabulary_size):
    """Whether each target id lies in `[0, vocabulary_size)`."""
    return ops.logical_and(ops.greater_equal(targets, 0), ops.less(targets, vocabulary_size))


def _where_known(per_position, targets, vocabulary_size):
    """`(per_position(ids), known)`: `ids` are `targets` with 0 where a target lies outside `[0, V)`, and the
    result is 0 there rather than a gather's NaN or error."""
    known = in_vocabulary(targets, vocabulary_size)
    return ops.where(known, per_position(ops.where(known, targets, 0)), 0.0), known


def known_target_nll(y_pred, targets, from_logits=True):
    """`target_nll`, and 0 where a target lies outside `[0, V)`: `(losses, known)`."""
    return _where_known(lambda ids: target_nll(y_pred, ids, from_logits), targets, y_pred.shape[-1])


def known_smoothed_nll(logits, targets, epsilon):
    """`(1 - epsilon) * -log q(target) + epsilon * mean_k(-log q(k))` per position from logits, in one pass
    over them (`backend.smoothed_nll_from_logits`), and 0 where a target lies outside `[0, V)`."""
    logits = ops.cast(logits, "float32")
    return _where_known(lambda ids: backend.smoothed_nll_from_logits(logits, ids, epsilon), targets, logits.shape[-1])


def uniform_nll(probabilities):
    """`mean_k(-log q(k))` per position of probabilities, in float32 (the uniform prior's term of the smoothed
    targets; from logits, `known_smoothed_nll` computes it with the target's term)."""
    return -ops.mean(_log_of_probabilities(ops.cast(probabilities, "float32")), axis=-1)


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, ignore_class=None, axis=-1):
    """`keras.losses.sparse_categorical_crossentropy`, from logits by `target_nll` (in float32).

    As Keras' op: positions whose target is `ignore_class` are 0 and masked out of
    the mean; other targets outside `[0, V)` (e.g. an unset `-100` padding) count as
    0, the value of Keras' one-hot on JAX, rather than the NaN of a gather.
    Probabilities, or a class axis other than the last, go to Keras' own function.
    """
    if not from_logits or axis not in (-1, len(y_pred.shape) - 1):
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits, ignore_class, axis)
    y_true = ops.cast(y_true, "int32")
    if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
        y_true = ops.squeeze(y_true, -1)
    losses, _ = known_target_nll(y_pred, y_true)
    if ignore_class is not None:
        valid = ops.not_equal(y_true, ignore_class)
        losses = ops.where(valid, losses, 0.0)
        backend.set_keras_mask(losses, valid)
    return losses


@keras.saving.register_keras_serializable(package="keras_seq")
class SparseCategoricalCrossentropy(keras.losses.SparseCategoricalCrossentropy):
    """`keras.losses.SparseCategoricalCrossentropy` (same arguments, same loss) computed faster.

    The cross-entropy (Murphy, 2022, sec. 6.1.2) with the one-hot target `p(k) = delta(k, y)`: per position
    `-log softmax(z)_y`, whose gradient with respect to the logits is
    `softmax(z) - onehot(y)`. From logits it goes through `target_nll`: no `(..., V)`
    one-hot (Keras' JAX op builds one) and no move of the class axis (Keras' torch op
    copies the logits); on TensorFlow its gradient is written out as `softmax(z) - onehot(y)`
    rather than scattered into zeros. The loss is computed in float32, and
    the logits of ignored positions must be finite (Keras zeroes them first, which
    costs a pass over the logits). keras_seq's language and seq2seq models compile
    Keras' own class as this one (`MaskedLogitsModel.compile`).
    """

    def __init__(
        self,
        from_logits=False,
        ignore_class=None,
        reduction="sum_over_batch_size",
        axis=-1,
        name="sparse_categorical_crossentropy",
        dtype=None,
    ):
        super().__init__(
            from_logits=from_logits, ignore_class=ignore_class, reduction=reduction, axis=axis, name=name, dtype=dtype
        )
        self.fn = sparse_categorical_crossentropy

    @classmethod
    def like(cls, loss):
        """This class with the configuration of a Keras `SparseCategoricalCrossentropy` `loss`."""
        return cls(**{**loss.get_config(), "axis": loss._fn_kwargs["axis"], "dtype": loss.dtype})


@keras.saving.register_keras_serializable(package="keras_seq")
class LabelSmoothingCrossEntropy(keras.losses.Loss):
    """Cross-entropy `H(q', p)` against the smoothed targets `q'` of Szegedy et al. (2016, sec. 7).

    `q'(k) = (1 - epsilon) * onehot(y)(k) + epsilon / V` (the uniform prior u(k) =
    1/V), so per position

        loss = (1 - epsilon) * (-log p_y) + epsilon * mean_k(-log p_k),

    which is computed from the logits directly (`known_smoothed_nll`; from
    probabilities `target_nll` and `uniform_nll`): the forward pass builds no
    `(B, T, V)` one-hot target. Positions whose target equals
    `ignore_index` add nothing and are left out of the mean (a mean over the
    counted positions, not over B*T); a target outside `[0, V)` adds 0 (never
    NaN) but is counted. Computed in float32 whatever the logits' dtype.

    Args:
        epsilon: smoothing mass in [0, 1); 0 gives plain cross-entropy.
        from_logits: predictions are logits (True) or probabilities (False).
        ignore_index: a target id (e.g. the padding id 0) to leave out, or None.

    Call arguments:
        y_true: integer targets `(B,)` or `(B, T)`.
        y_pred: `(B, V)` or `(B, T, V)`.

    References:
        Szegedy et al., 2016, "Rethinking the inception architecture for computer
        vision", section 7.
    """

    def __init__(
        self,
        epsilon=0.1,
        from_logits=True,
        ignore_index=None,
        reduction="sum_over_batch_size",
        name="label_smoothing_cross_entropy",
        **kwargs,
    ):
        super().__init__(reduction=reduction, name=name, **kwargs)
        owner = f"LabelSmoothingCrossEntropy '{name}'"
        self.epsilon = v.check_probability(owner, "epsilon", epsilon)
        self.from_logits = bool(from_logits)
        self.ignore_index = v.check_optional_id(owner, "ignore_index", ignore_index)

    def __call__(self, y_true, y_pred, sample_weight=None):
        owner = f"LabelSmoothingCrossEntropy '{self.name}'"
        pred_shape = v.check_rank(owner, "y_pred", y_pred, (2, 3))
        true_shape = tuple(y_true.shape)
        if len(true_shape) != len(pred_shape) - 1 or any(
            a is not None and b is not None and a != b for a, b in zip(true_shape, pred_shape[:-1])
        ):
            v.fail(owner, "y_true", f"integer targets of shape {pred_shape[:-1]}", f"shape {true_shape}")
        if sample_weight is not None:  # per-sequence weights (B,) apply to every position
            sample_weight = ops.convert_to_tensor(sample_weight, "float32")
            while len(sample_weight.shape) < len(true_shape):
                sample_weight = ops.expand_dims(sample_weight, -1)
            sample_weight = sample_weight * ops.ones(ops.shape(y_true), "float32")
        return super().__call__(y_true, y_pred, sample_weight)

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        valid = None
        targets = y_true
        if self.ignore_index is not None:
            valid = ops.not_equal(y_true, self.ignore_index)
            targets = ops.where(valid, y_true, 0)  # any in-range id; its loss is masked out
        if self.epsilon > 0 and self.from_logits:
            losses, known = known_smoothed_nll(y_pred, targets, self.epsilon)
        else:
            losses, known = known_target_nll(y_pred, targets, self.from_logits)
            if self.epsilon > 0:  # at 0 the uniform term is a (B, T, V) pass that adds nothing
                uniform = ops.where(known, uniform_nll(y_pred), 0.0)
                losses = (1.0 - self.epsilon) * losses + self.epsilon * uniform
        if valid is not None:
            losses = ops.where(valid, losses, 0.0)
            backend.set_keras_mask(losses, valid)  # Loss.__call__ then averages over valid positions
        return losses

    def get_config(self):
        own = {"epsilon": self.epsilon, "from_logits": self.from_logits, "ignore_index": self.ignore_index}
        return {**super().get_config(), **own}

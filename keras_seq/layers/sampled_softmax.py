"""Sampled softmax: a cheap training loss for large vocabularies (Jean et al., 2015).

The problem (Bengio and Senecal, 2008; Jean et al., 2015): the output layer of
a language model costs O(V) per token, and with tens of thousands of words it
dominates training. Sampled softmax scores the true word against a few sampled
negatives during training and keeps the exact softmax for evaluation.
"""

import math

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq import backend
from keras_seq.layers.positionwise import over_positions
from keras_seq.losses import target_nll

SAMPLERS = ("log_uniform", "uniform")


def candidate_log_probability(ids, vocabulary_size, sampler):
    """`log Q(k)` of the proposal distribution, in float32.

    * `log_uniform` (Zipfian): `Q(k) = log((k + 2) / (k + 1)) / log(V + 1)`, the
      distribution of TensorFlow's `log_uniform_candidate_sampler`; it suits ids
      sorted by decreasing frequency.
    * `uniform`: `Q(k) = 1 / V`.
    """
    if sampler == "uniform":
        return ops.full(ops.shape(ids), -math.log(vocabulary_size), "float32")
    ids = ops.cast(ids, "float32")
    return ops.log(ops.log1p(1.0 / (ids + 1.0))) - math.log(math.log(vocabulary_size + 1.0))


def sample_candidates(num_sampled, vocabulary_size, sampler, seed):
    """`num_sampled` ids drawn i.i.d. from `Q`, by inverting its CDF (O(m), not O(V)).

    The log-uniform CDF is `F(k) = log(k + 2) / log(V + 1)`, so `k = floor(exp(u log(V + 1))) - 1`
    for `u ~ U[0, 1)`.
    """
    uniform = keras.random.uniform((num_sampled,), seed=seed)
    if sampler == "uniform":
        ids = ops.floor(uniform * vocabulary_size)
    else:
        ids = ops.floor(ops.exp(uniform * math.log(vocabulary_size + 1.0))) - 1.0
    return ops.clip(ops.cast(ids, "int32"), 0, vocabulary_size - 1)


@keras.saving.register_keras_serializable(package="keras_seq")
class SampledSoftmax(keras.layers.Layer):
    """Output projection to V words trained with sampled softmax (Jean et al., 2015), exact at inference.

    Logits `z_k = h . w_k + b_k` (kernel `W (D, V)`, bias `b (V,)`, the layout of
    `keras.layers.Dense(V)`, so weights copy across). In training, with `m` ids
    `s_1..s_m` drawn i.i.d. from a proposal `Q` once per call (shared by the
    batch), each position with target `y` costs

        loss = -z_y + log(exp(z_y) + sum_{j: s_j != y} exp(z_{s_j} - log(m Q(s_j))))

    The sum is an importance-sampling estimate of `sum_{k != y} exp(z_k)` (Bengio
    and Senecal, 2008); the `- log(m Q)` term is the log-Q correction, and samples
    equal to `y` ("accidental hits") are dropped because `exp(z_y)` is already
    counted exactly. So the loss tends to the full cross-entropy
    `-log softmax(z)_y` as `m` grows, and equals it for the uniform proposal with
    each id sampled once. The true logit is left uncorrected: TensorFlow's
    `sampled_softmax_loss` also subtracts `log(m Q(y))` from it, which makes its
    loss grow with `m` instead of approaching the cross-entropy. Each step costs
    O(N D m) instead of O(N D V).

    Use it as the last layer of a functional model that takes the targets as an
    input, and compile without a loss (nor metrics, which would read the outputs):

        ids = keras.Input((None,), dtype="int32", name="ids")
        targets = keras.Input((None,), dtype="int32", name="targets")
        hidden = ...(ids)                                   # (B, T, D)
        outputs = SampledSoftmax(V, num_sampled=512)(hidden, targets)
        model = keras.Model({"ids": ids, "targets": targets}, outputs)
        model.compile(optimizer="adam")
        model.fit({"ids": x, "targets": y})                 # sampled loss
        model.evaluate({"ids": x, "targets": y})            # exact cross-entropy

    With targets, the layer adds the mean loss over the counted positions with
    `add_loss`: the sampled loss when `training=True`, the exact cross-entropy
    otherwise. Positions masked in `hidden` (e.g. by `Embedding(mask_zero=True)`)
    or whose target is `ignore_index` are not counted.

    Args:
        vocabulary_size: V, the number of output words.
        num_sampled: m, negatives drawn per training step.
        sampler: proposal `Q`, `"log_uniform"` (Zipfian: ids sorted by decreasing
            frequency) or `"uniform"`.
        ignore_index: a target id (e.g. padding 0) to leave out, or None.
        seed: seed of the sampler.
        kernel_initializer, bias_initializer: initialisers of `W` and `b`.

    Call arguments:
        hidden: `(B, D)` or `(B, T, D)` floating point.
        targets: integer ids `(...)` (the shape of `hidden` without D), or None.
        training: sampled loss (True) or full softmax (False).
        mask: `(...)` boolean, True where counted; defaults to `hidden`'s Keras mask.

    Returns:
        Logits `(..., V)` in float32, except in training with targets, where the
        full logits are never computed and the per-position sampled losses `(...)`
        (zero where not counted) are returned instead.

    References:
        Jean, Cho, Memisevic and Bengio, 2015, "On using very large target
        vocabulary for neural machine translation"; Bengio and Senecal, 2008,
        "Adaptive importance sampling to accelerate training of a neural
        probabilistic language model".
    """

    def __init__(
        self,
        vocabulary_size,
        num_sampled,
        sampler="log_uniform",
        ignore_index=None,
        seed=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = v.owner_name(self)
        self.vocabulary_size = v.check_positive_int(owner, "vocabulary_size", vocabulary_size)
        self.num_sampled = v.check_positive_int(owner, "num_sampled", num_sampled)
        self.sampler = v.check_choice(owner, "sampler", sampler, SAMPLERS)
        self.ignore_index = v.check_optional_id(owner, "ignore_index", ignore_index)
        self.seed = seed
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True

    def build(self, hidden_shape, targets_shape=None):
        self.kernel = self.add_weight(
            name="kernel", shape=(hidden_shape[-1], self.vocabulary_size), initializer=self.kernel_initializer
        )
        self.bias = self.add_weight(name="bias", shape=(self.vocabulary_size,), initializer=self.bias_initializer)

    def _check_inputs(self, hidden, targets, mask):
        owner = v.owner_name(self)
        shape = v.check_rank(owner, "hidden", hidden, (2, 3))
        v.check_floating(owner, "hidden", hidden)
        v.check_same_size(owner, "hidden", shape[-1], self.kernel.shape[0], "feature size")
        v.check_shape(owner, "mask", mask, shape[:-1])
        if targets is None:
            return
        v.check_integer_ids(owner, "targets", targets)
        targets_shape = v.shape_of(targets)
        if len(targets_shape) != len(shape) - 1 or any(
            a is not None and b is not None and a != b for a, b in zip(targets_shape, shape[:-1])
        ):
            v.fail(
                owner, "targets", f"integer ids of shape {shape[:-1]} (hidden's without D)", f"shape {targets_shape}"
            )
        v.check_ids_below(owner, "targets", targets, self.vocabulary_size)

    def call(self, hidden, targets=None, training=None, mask=None):
        if mask is None:
            mask = backend.get_keras_mask(hidden)
        self._check_inputs(hidden, targets, mask)
        if targets is None:
            return self.full_logits(hidden)
        counted = ops.ones(ops.shape(targets), "bool") if mask is None else ops.cast(mask, "bool")
        if self.ignore_index is not None:
            counted = ops.logical_and(counted, ops.not_equal(targets, self.ignore_index))
            # Any id in range; the loss at ignored positions is zeroed.
            targets = ops.where(counted, targets, 0)
        if training:
            losses = self.sampled_losses(hidden, targets)
        else:
            logits = self.full_logits(hidden)
            losses = target_nll(logits, targets)
        losses = ops.where(counted, losses, 0.0)
        count = ops.sum(ops.cast(counted, "float32"))
        self.add_loss(ops.sum(losses) / ops.maximum(count, 1.0))
        return losses if training else logits

    def _compute_weights(self):
        # Casts also outside `__call__` (no autocast scope there), e.g. in `sampled_losses`.
        return ops.cast(self.kernel, self.compute_dtype), ops.cast(self.bias, self.compute_dtype)

    def full_logits(self, hidden):
        """`z = h W + b` for every word, `(..., V)` in float32."""
        kernel, bias = self._compute_weights()
        logits = over_positions(lambda rows: ops.matmul(rows, kernel), ops.cast(hidden, self.compute_dtype))
        return ops.cast(logits + bias, "float32")

    def sampled_losses(self, hidden, targets, sampled_ids=None):
        """Per-position sampled loss `(...)` in float32 (formula in the class docstring).

        `sampled_ids (m,)` are drawn from the sampler when not given; given ids are
        taken as such a draw (their correction is `log(m Q)` with m their count).
        """
        if sampled_ids is None:
            sampled_ids = sample_candidates(self.num_sampled, self.vocabulary_size, self.sampler, self.seed_generator)
        kernel, bias = self._compute_weights()
        hidden = ops.cast(hidden, self.compute_dtype)
        sampled_ids = ops.cast(sampled_ids, "int32")
        targets = ops.cast(targets, "int32")
        log_expected_count = math.log(sampled_ids.shape[0]) + candidate_log_probability(
            sampled_ids, self.vocabulary_size, self.sampler
        )
        true_weights = ops.moveaxis(ops.take(kernel, targets, axis=1), 0, -1)  # (..., D)
        true_logits = ops.sum(hidden * true_weights, axis=-1) + ops.take(bias, targets)
        sampled_logits = ops.matmul(hidden, ops.take(kernel, sampled_ids, axis=1)) + ops.take(bias, sampled_ids)
        true_logits = ops.cast(true_logits, "float32")
        sampled_logits = ops.cast(sampled_logits, "float32") - log_expected_count
        accidental_hits = ops.equal(ops.expand_dims(targets, -1), sampled_ids)
        sampled_logits = ops.where(accidental_hits, float("-inf"), sampled_logits)
        all_logits = ops.concatenate([ops.expand_dims(true_logits, -1), sampled_logits], axis=-1)
        return ops.logsumexp(all_logits, axis=-1) - true_logits

    def compute_output_spec(self, hidden, targets=None, training=None, mask=None):
        # Symbolic calls (functional construction) take the inference path: logits.
        return keras.KerasTensor((*hidden.shape[:-1], self.vocabulary_size), dtype="float32")

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "num_sampled": self.num_sampled,
            "sampler": self.sampler,
            "ignore_index": self.ignore_index,
            "seed": self.seed,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }

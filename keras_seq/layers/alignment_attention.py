"""Bahdanau (additive) and Luong (multiplicative) attention for encoder-decoders.

Bahdanau et al. (2015, sec. 3.1) and Luong et al. (2015, sec. 3.1): a decoder
query scores every encoder key, the scores are normalised with a softmax over the
unmasked keys (Bahdanau et al.'s eq. 6), and the context is the weighted sum of the values
(eq. 5). Keras' `AdditiveAttention` has no `units`, no projection of query and keys and
no single-step query, and `Attention` has no `general`/`concat` scores, so both are
written here on one shared base.
"""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq import backend
from keras_seq.layers.masking import masked_softmax

LUONG_SCORES = ("dot", "general", "concat")


def _additive_scores(query, projected_keys, query_kernel, attention_v, bias=None):
    """`v^T tanh(W q + U k [+ b])` for every query/key pair, `U k` given: `(B, Tq, Tk)`."""
    hidden = ops.expand_dims(ops.matmul(query, query_kernel), 2) + ops.expand_dims(projected_keys, 1)
    if bias is not None:
        hidden = hidden + bias
    return ops.matmul(ops.tanh(hidden), attention_v)


class _AlignmentAttention(keras.layers.Layer):
    """Shared call: shape checks, masking, softmax (Bahdanau et al.'s eq. 6) and context (eq. 5).

    Subclasses define `_scores(query (B,Tq,Dq), projected_keys) -> (B,Tq,Tk)`, `projected_keys` being
    `project_keys(keys)`.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def _check_inputs(self, query, keys, values, mask):
        owner = v.owner_name(self)
        query_shape = v.check_rank(owner, "query", query, (2, 3))
        keys_shape = v.check_rank(owner, "keys", keys, 3)
        values_shape = v.check_rank(owner, "values", values, 3)
        for name, tensor in (("query", query), ("keys", keys), ("values", values)):
            v.check_floating(owner, name, tensor)
        v.check_same_size(owner, "keys", keys_shape[0], query_shape[0], "batch size")
        v.check_same_size(owner, "values", values_shape[0], keys_shape[0], "batch size")
        v.check_same_size(owner, "values", values_shape[1], keys_shape[1], "the keys' length")
        v.check_shape(owner, "mask", mask, keys_shape[:2])
        if self.built:
            v.check_same_size(owner, "query", query_shape[-1], self._query_dim, "feature size")
            v.check_same_size(owner, "keys", keys_shape[-1], self._keys_dim, "feature size")

    def build(self, query_shape, keys_shape, values_shape=None):
        self._query_dim, self._keys_dim = query_shape[-1], keys_shape[-1]

    def project_keys(self, keys):
        """What the scores read of `keys` `(B, Tk, Dk)` alone: `U_a h_j` `(B, Tk, units)` for additive scores
        (Bahdanau's, Luong's `concat`: the layers with a `key_kernel`), the keys themselves for the others
        (Luong's `general` projects the query instead, `(q^T W_a) k`).

        A decoder that attends over the same keys at every step computes this once and
        passes it to each call as `projected_keys`, instead of projecting every key again
        for every query.
        """
        keys = ops.cast(keys, self.compute_dtype)
        key_kernel = getattr(self, "key_kernel", None)  # built by the additive scores only
        return keys if key_kernel is None else ops.matmul(keys, ops.cast(key_kernel, self.compute_dtype))

    def call(self, query, keys, values=None, mask=None, return_attention_scores=False, projected_keys=None):
        values = keys if values is None else values
        if mask is None:  # e.g. keys from an RNN over an Embedding(mask_zero=True)
            mask = backend.get_keras_mask(keys)
        self._check_inputs(query, keys, values, mask)
        if projected_keys is None:
            projected_keys = self.project_keys(keys)
        else:
            v.check_shape(v.owner_name(self), "projected_keys", projected_keys, (*v.shape_of(keys)[:2], None))
        single_step = len(query.shape) == 2
        query = ops.cast(query, self.compute_dtype)
        if single_step:
            query = ops.expand_dims(query, 1)
        scores = self._scores(query, ops.cast(projected_keys, self.compute_dtype))
        if mask is not None:
            mask = ops.expand_dims(ops.cast(mask, "bool"), 1)
        weights = ops.cast(masked_softmax(scores, mask), self.compute_dtype)
        context = ops.matmul(weights, ops.cast(values, self.compute_dtype))
        if single_step:
            context, weights = ops.squeeze(context, 1), ops.squeeze(weights, 1)
        return (context, weights) if return_attention_scores else context


@keras.saving.register_keras_serializable(package="keras_seq")
class BahdanauAttention(_AlignmentAttention):
    """Additive attention of Bahdanau, Cho and Bengio (2015, sec. 3.1 and appendix A.1.2).

    `e_ij = v_a^T tanh(W_a s_i + U_a h_j)` (appendix A.1.2),
    `alpha_ij = softmax_j(e_ij)` over the unmasked keys (eq. 6),
    `c_i = sum_j alpha_ij h_j` over the values (eq. 5).

    With `normalize=True`, `v_a` is weight-normalised (Salimans and Kingma, 2016):
    `v_a = g * v / ||v||` with a learned scalar `g`, and a bias `b` is added inside
    the tanh, as in TensorFlow Addons' normalised Bahdanau attention.

    Args:
        units: width n of the alignment model (rows of W_a and U_a).
        normalize: weight-normalise `v_a` and add the bias `b`.

    Call arguments:
        query: decoder state `(B, Dq)` for one step or `(B, Tq, Dq)` for many.
        keys: encoder annotations `(B, Tk, Dk)`.
        values: `(B, Tk, Dv)`; defaults to `keys`.
        mask: `(B, Tk)` boolean, True at real keys; defaults to the keys' Keras
            mask. A query with no unmasked key gets zero weights and context.
        return_attention_scores: also return the weights alpha.
        projected_keys: `project_keys(keys)` `(B, Tk, units)`, the keys' term `U_a h_j`,
            when a decoder computed it once for all its steps; computed here if None.

    Returns:
        The context `(B, Dv)` or `(B, Tq, Dv)`, and with `return_attention_scores`
        the weights `(B, Tk)` or `(B, Tq, Tk)`.

    References:
        Bahdanau, Cho and Bengio, 2014, "Neural machine translation by jointly
        learning to align and translate".
    """

    def __init__(self, units, normalize=False, **kwargs):
        super().__init__(**kwargs)
        self.units = v.check_positive_int(f"BahdanauAttention '{self.name}'", "units", units)
        self.normalize = bool(normalize)

    def build(self, query_shape, keys_shape, values_shape=None):
        super().build(query_shape, keys_shape, values_shape)
        self.query_kernel = self.add_weight(name="query_kernel", shape=(query_shape[-1], self.units))  # W_a
        self.key_kernel = self.add_weight(name="key_kernel", shape=(keys_shape[-1], self.units))  # U_a
        self.attention_v = self.add_weight(name="attention_v", shape=(self.units,))  # v_a
        if self.normalize:
            self.attention_g = self.add_weight(
                name="attention_g", shape=(), initializer=keras.initializers.Constant((1.0 / self.units) ** 0.5)
            )
            self.attention_b = self.add_weight(name="attention_b", shape=(self.units,), initializer="zeros")

    def _scores(self, query, projected_keys):
        if not self.normalize:
            return _additive_scores(query, projected_keys, self.query_kernel, self.attention_v)
        attention_v = self.attention_g * self.attention_v / ops.sqrt(ops.sum(ops.square(self.attention_v)))
        return _additive_scores(query, projected_keys, self.query_kernel, attention_v, self.attention_b)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "normalize": self.normalize}


@keras.saving.register_keras_serializable(package="keras_seq")
class LuongAttention(_AlignmentAttention):
    """Multiplicative attention of Luong, Pham and Manning (2015, sec. 3.1).

    Scores between a query `q` and a key `k`:

    * `dot`: `q . k` (e.g. `e_tj = h_{t-1} . a_j`; Luong et al.'s `dot` score; needs Dq == Dk);
    * `general`: `q^T W_a k`;
    * `concat`: `v_a^T tanh(W_a [q; k])`, with `units` rows (default Dq).

    then `alpha = softmax(e)` over the unmasked keys and `c = sum alpha v` (Luong
    et al., eq. 7 and sec. 3.1). With `scale=True` the scores are multiplied by a learned scalar
    `g` (initialised to 1), as in TensorFlow Addons.

    Args:
        score: `"dot"`, `"general"` or `"concat"`.
        scale: learn a scalar multiplier of the scores.
        units: width of the `concat` alignment model (default: the query width).

    Call arguments and returns: as `BahdanauAttention`.

    References:
        Luong, Pham and Manning, 2015, "Effective approaches to attention-based
        neural machine translation".
    """

    def __init__(self, score="general", scale=False, units=None, **kwargs):
        super().__init__(**kwargs)
        owner = f"LuongAttention '{self.name}'"
        self.score = v.check_choice(owner, "score", score, LUONG_SCORES)
        self.scale = bool(scale)
        self.units = None if units is None else v.check_positive_int(owner, "units", units)

    def build(self, query_shape, keys_shape, values_shape=None):
        super().build(query_shape, keys_shape, values_shape)
        query_dim, keys_dim = query_shape[-1], keys_shape[-1]
        if self.score == "dot" and query_dim != keys_dim:
            v.fail(v.owner_name(self), "keys", f"feature size {query_dim} (the query's) for score='dot'", keys_dim)
        if self.score == "general":
            self.score_kernel = self.add_weight(name="score_kernel", shape=(query_dim, keys_dim))
        if self.score == "concat":
            units = self.units or query_dim
            self.query_kernel = self.add_weight(name="query_kernel", shape=(query_dim, units))
            self.key_kernel = self.add_weight(name="key_kernel", shape=(keys_dim, units))
            self.attention_v = self.add_weight(name="attention_v", shape=(units,))
        if self.scale:
            self.score_scale = self.add_weight(name="score_scale", shape=(), initializer="ones")

    def _scores(self, query, keys):
        if self.score == "concat":
            # W_a [q; k] = W_q q + W_k k, computed without materialising [q; k]; `keys` holds W_k k.
            scores = _additive_scores(query, keys, self.query_kernel, self.attention_v)
        else:
            if self.score == "general":
                query = ops.matmul(query, self.score_kernel)
            scores = ops.matmul(query, ops.transpose(keys, (0, 2, 1)))
        return scores * self.score_scale if self.scale else scores

    def get_config(self):
        return {**super().get_config(), "score": self.score, "scale": self.scale, "units": self.units}


# The score of each Luong attention name (Luong et al., 2015, sec. 3.1).
LUONG_ATTENTION_SCORES = {"luong": "general", "luong_dot": "dot", "luong_concat": "concat"}
ATTENTIONS = ("bahdanau", *LUONG_ATTENTION_SCORES)


def make_attention(attention, units, **kwargs):
    """The attention layer of a name, called `attention`: `bahdanau` (additive, Bahdanau et al.) or `luong` (the
    `general` score), `luong_dot`, `luong_concat` (Luong et al.'s three scores)."""
    v.check_choice("attention", "attention", attention, ATTENTIONS)
    if attention == "bahdanau":
        return BahdanauAttention(units, name="attention", **kwargs)
    score = LUONG_ATTENTION_SCORES[attention]
    return LuongAttention(score, units=units if score == "concat" else None, name="attention", **kwargs)

"""Multi-head scaled dot-product attention with a key/value cache (Vaswani et al., 2017, sec. 3.2).

Written here rather than by subclassing `keras.layers.MultiHeadAttention`, because that
layer, as of Keras 3.15.1:

* computes attention written out, not by the fused `keras.ops.dot_product_attention`
  kernel, whenever it was built with `dropout > 0`, at inference too: its
  `_compute_attention` tests the rate, not `training` (and it rejects
  `flash_attention=True` with `dropout > 0`);
* gives a query whose keys are all masked the uniform average of the values on its
  fused path, but zero weights and a zero context on its written-out path (dropout or
  scores requested), so such a query's output depends on which path ran;
* has no key/value cache for incremental decoding.

The variables keep Keras' order and shapes, so weights copy across in both directions.
"""

import math

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq import backend
from keras_seq.layers._initializers import own_draw
from keras_seq.layers._sublayers import call_sublayer
from keras_seq.layers.dropout import Dropout
from keras_seq.layers.masking import MASKED_SCORE, causal_mask, masked_softmax, merge_masks, rows_with_keys

# The exact ways `MultiHeadAttention` computes eq. 1; `_choose_path` picks one per call.
FUSED = "fused"  # `keras.ops.dot_product_attention`
SINGLE_QUERY = "single_query"  # one query per row over a cache, read in the cache's own layout
EXPLICIT = "explicit"  # the softmax written out, with its weights at hand


def _project(x, kernel, bias, heads_first=False):
    """`x @ W + b` with a `(D, H, d)` kernel: `(B, T, D) -> (B, T, H, d)`, or `(B, H, T, d)` if `heads_first`."""
    if heads_first:
        y = ops.einsum("btd,dhk->bhtk", x, kernel)
        return y if bias is None else y + ops.expand_dims(bias, 1)
    return backend.affine(x, kernel, bias)


def _read_rows(x, rows):
    """`x[rows[b, s], s]`: `(B, S, ...)` entries taken position by position from the batch rows `rows` `(B, S)`."""
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    flat = ops.reshape(x, (batch * length, *x.shape[2:]))
    return ops.take(flat, ops.cast(rows, "int32") * length + ops.arange(length, dtype="int32"), axis=0)


def _swap_time_and_heads(x):
    """`(B, T, H, d) <-> (B, H, T, d)`."""
    return backend.transpose(x, (0, 2, 1, 3))


@keras.saving.register_keras_serializable(package="keras_seq")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention (Vaswani et al., 2017, sec. 3.2.1, eq. 1, and sec. 3.2.2).

    `head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V` (eq. 1, sec. 3.2.2) and
    `MultiHead(Q, K, V) = Concat(head_1..head_h) W^O` (sec. 3.2.2), with a bias after
    each projection when `use_bias`.

    * Computes eq. 1 along one of three paths, picked in `_choose_path`: a decoding
      step (one query against a cache) reads the cache in place, with no heads-first
      copy; a call that returns the scores or applies dropout writes the softmax out;
      any other call, so every call at inference, uses the fused
      `keras.ops.dot_product_attention` (flash/cuDNN kernels where the backend has them,
      unless `keras.config.disable_flash_attention()` was called), except when
      `value_dim != key_dim`, where the softmax is written out, and on JAX on the CPU,
      where it is written out heads first, which XLA runs faster there
      (`keras_seq.backend.heads_first_attention`).
    * The softmax runs in float32 under mixed precision; a query whose keys are all
      masked gets zero weights and a zero context (the output is then the output
      bias), never NaN, in float32, float16 and bfloat16.
    * Variables have the order and shapes of `keras.layers.MultiHeadAttention`, so
      `layer.set_weights(keras_mha.get_weights())` reproduces its outputs, and the layer
      meets Keras' layer contract (`compute_output_shape`, outputs of the compute dtype
      under every policy, attention masks of shape `(T, S)`, `(B, T, S)`, `(B, H, T, S)`).
      Out of scope, which Keras' layer has: attention over other axes than time
      (`attention_axes`), `use_gate`, `sliding_window`, regularizers and constraints, LoRA
      and int8 quantization. A query's own padding mask is not applied: a padded query
      attends like any other (Keras' layer masks its whole row, see above), and
      masking downstream ignores it either way.
    * With `cache` (shape `(B, 2, S, H, key_dim)`: keys then values of S positions)
      and `cache_update_index`, the projected keys/values of the new positions are
      written at `cache_update_index` and the query attends over the whole cache,
      so decoding costs one step per token. Without `cache_update_index` the cache
      is used as it is (e.g. precomputed cross-attention keys/values).

    Args:
        num_heads: number of heads h.
        key_dim: size d_k of each query/key head.
        value_dim: size d_v of each value head (default `key_dim`).
        dropout: dropout rate on the attention weights.
        use_bias: add biases to the four projections.
        output_shape: width of the output (default: the query's width).
        kernel_initializer, bias_initializer: as in Keras.

    Call arguments:
        query: `(B, Tq, Dq)`.
        value: `(B, Tv, Dv)`.
        key: `(B, Tv, Dk)`; defaults to `value`.
        attention_mask: boolean `(Tq, Tv)`, `(B, Tq, Tv)` or `(B, H, Tq, Tv)` (B and H
            may be 1), True where attending is allowed.
        use_causal_mask: forbid attending to later positions (offset by
            `cache_update_index` when decoding with a cache).
        return_attention_scores: also return the weights `(B, H, Tq, Tv)`.
        training: apply dropout.
        cache: `(B, 2, S, H, key_dim)` key/value cache.
        cache_update_index: where the new keys/values go in the cache.
        cache_rows: `(B, S)` int, the row of `cache` that holds each position's
            key/value for this row (beam search reorders its rows this way instead
            of copying the cache; new entries go to the row's own slot, so
            `cache_rows[b, cache_update_index:]` should be `b`).
        value_mask, key_mask: `(B, Tv)` padding masks, filled in by Keras from the
            inputs' masks.

    Returns:
        `output`, then the scores if `return_attention_scores`, then the new cache
        if `cache` was given.

    References:
        Vaswani et al., 2017, "Attention is all you need", section 3.2.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_shape=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = v.owner_name(self)
        self.num_heads = v.check_positive_int(owner, "num_heads", num_heads)
        self.key_dim = v.check_positive_int(owner, "key_dim", key_dim)
        self.value_dim = self.key_dim if value_dim is None else v.check_positive_int(owner, "value_dim", value_dim)
        self.dropout = v.check_probability(owner, "dropout", dropout)
        self.use_bias = bool(use_bias)
        if isinstance(output_shape, (tuple, list)) and len(output_shape) == 1:
            output_shape = output_shape[0]
        self._output_shape = None if output_shape is None else v.check_positive_int(owner, "output_shape", output_shape)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self.attention_dropout = Dropout(self.dropout, dtype=self.dtype_policy)

    def _add_projection(self, name, shape, bias_shape):
        kernel = self.add_weight(name=f"{name}_kernel", shape=shape, initializer=own_draw(self.kernel_initializer))
        bias = None
        if self.use_bias:
            bias = self.add_weight(name=f"{name}_bias", shape=bias_shape, initializer=self.bias_initializer)
        return kernel, bias

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        owner = v.owner_name(self)
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if shape[-1] is None:
                v.fail(owner, name, "a known feature size", f"shape {tuple(shape)}")
        # Same creation order as keras.layers.MultiHeadAttention, so get/set_weights line up.
        heads, key_dim, value_dim = self.num_heads, self.key_dim, self.value_dim
        output_dim = self._output_shape or query_shape[-1]
        self.query_kernel, self.query_bias = self._add_projection(
            "query", (query_shape[-1], heads, key_dim), (heads, key_dim)
        )
        self.key_kernel, self.key_bias = self._add_projection("key", (key_shape[-1], heads, key_dim), (heads, key_dim))
        self.value_kernel, self.value_bias = self._add_projection(
            "value", (value_shape[-1], heads, value_dim), (heads, value_dim)
        )
        self.output_kernel, self.output_bias = self._add_projection(
            "output", (heads, value_dim, output_dim), (output_dim,)
        )

    def _check_inputs(self, query, value, key, attention_mask, cache, cache_update_index, cache_rows):
        owner = v.owner_name(self)
        batch, query_length, query_dim = v.check_rank(owner, "query", query, 3)
        _, value_length, value_dim = v.check_rank(owner, "value", value, 3)
        _, key_length, key_dim = v.check_rank(owner, "key", key, 3)
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            v.check_floating(owner, name, tensor)
        v.check_same_size(owner, "value", value.shape[0], batch, "batch size")
        v.check_same_size(owner, "key", key_length, value_length, "the value's length")
        if self.built:
            v.check_same_size(owner, "query", query_dim, self.query_kernel.shape[0], "feature size")
            v.check_same_size(owner, "value", value_dim, self.value_kernel.shape[0], "feature size")
            v.check_same_size(owner, "key", key_dim, self.key_kernel.shape[0], "feature size")
        if cache is None:
            for name, given in (("cache_update_index", cache_update_index), ("cache_rows", cache_rows)):
                if given is not None:
                    v.fail(owner, name, "to come with a `cache`", "no cache")
            self._check_attention_mask(attention_mask, batch, query_length, value_length)
            return
        if self.value_dim != self.key_dim:
            v.fail(owner, "cache", "value_dim == key_dim (keys and values share one cache)", self.value_dim)
        expected = (batch, 2, None, self.num_heads, self.key_dim)
        v.check_shape(owner, "cache", cache, expected)
        self._check_attention_mask(attention_mask, batch, query_length, cache.shape[2])
        v.check_shape(owner, "cache_rows", cache_rows, (batch, cache.shape[2]))

    def _check_attention_mask(self, mask, batch, query_length, key_length):
        """`(Tq, Tk)`, `(B, Tq, Tk)` or `(B, H, Tq, Tk)`, where B and H may be 1 (broadcast)."""
        if mask is None:
            return
        shapes = {
            2: (query_length, key_length),
            3: (batch, query_length, key_length),
            4: (batch, self.num_heads, query_length, key_length),
        }
        shape = v.shape_of(mask)
        expected = shapes.get(len(shape))
        broadcast = {0, 1} if len(shape) == 4 else {0}
        if expected is None or any(
            got is not None and want is not None and got != want and not (axis in broadcast and got == 1)
            for axis, (got, want) in enumerate(zip(shape, expected))
        ):
            options = " or ".join(str(tuple(e)) for e in shapes.values())
            v.fail(
                v.owner_name(self), "attention_mask", f"shape {options} (batch and heads may be 1)", f"shape {shape}"
            )

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_update_index=None,
        cache_rows=None,
        value_mask=None,
        key_mask=None,
    ):
        key = value if key is None else key
        self._check_inputs(query, value, key, attention_mask, cache, cache_update_index, cache_rows)
        path = self._choose_path(query.shape[1], cache is not None, return_attention_scores, training)
        query, value, key = (ops.cast(x, self.compute_dtype) for x in (query, value, key))
        heads_first = cache is None and backend.heads_first_attention()
        q, k, v_, cache = self._project_inputs(query, key, value, cache, cache_update_index, cache_rows, heads_first)
        time_axis = 2 if heads_first else 1
        key_padding = key_mask if key_mask is not None else value_mask
        if key_padding is not None and key_padding.shape[-1] != k.shape[time_axis]:
            key_padding = None  # a mask of the new tokens only: the cache has its own positions
        causal = None
        if use_causal_mask:
            offset = 0 if cache_update_index is None else cache_update_index
            causal = causal_mask(ops.shape(q)[time_axis], ops.shape(k)[time_axis], offset)
        output, scores = self._attend(
            path, q, k, v_, key_padding, attention_mask, causal, cache, cache_rows, heads_first, training
        )
        results = (self._project_output(output, heads_first),)
        if return_attention_scores:
            results += (scores,)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def key_value_cache(self, value):
        """The keys and values projected from `value` `(B, S, D)` (the key defaults to the value), as a cache
        `(B, 2, S, H, key_dim)`.

        Passed as `cache` without `cache_update_index`, it is attended to as it is: a decoder
        projects the encoder outputs for cross-attention once per source, not at every step.
        """
        owner = v.owner_name(self)
        if not self.built:
            v.fail(owner, "key_value_cache", "a built layer (called once)", "an unbuilt one")
        if self.value_dim != self.key_dim:
            v.fail(owner, "value", "value_dim == key_dim (keys and values share one cache)", self.value_dim)
        v.check_rank(owner, "value", value, 3)
        v.check_floating(owner, "value", value)
        for kernel in (self.key_kernel, self.value_kernel):
            v.check_same_size(owner, "value", value.shape[-1], kernel.shape[0], "feature size")
        value = ops.cast(value, self.compute_dtype)
        keys = _project(value, self.key_kernel, self.key_bias)
        return ops.stack((keys, _project(value, self.value_kernel, self.value_bias)), axis=1)

    def _project_inputs(self, query, key, value, cache, cache_update_index, cache_rows, heads_first):
        """Queries, keys and values per head (`(B, T, H, d)`, or `(B, H, T, d)` if `heads_first`), and the cache
        with the new keys and values written in (keys and values read from it when it is given)."""
        # Three products even for self-attention: one product by the three kernels joined
        # at call time made a training step of the layer slower on the CPU.
        q = _project(query, self.query_kernel, self.query_bias, heads_first)
        if cache is not None and cache_update_index is None:
            k, v_ = cache[:, 0], cache[:, 1]
        else:
            k = _project(key, self.key_kernel, self.key_bias, heads_first)
            v_ = _project(value, self.value_kernel, self.value_bias, heads_first)
        if cache is not None and cache_update_index is not None:
            # One in-place-able write of the new keys and values (XLA updates a loop-carried buffer in place).
            new_entries = ops.stack((k, v_), axis=1)
            cache = backend.slice_update(ops.cast(cache, k.dtype), (0, 0, cache_update_index, 0, 0), new_entries)
            k, v_ = cache[:, 0], cache[:, 1]
        if cache_rows is not None:
            k, v_ = _read_rows(k, cache_rows), _read_rows(v_, cache_rows)
        return q, k, v_, cache

    def _choose_path(self, query_length, over_cache, return_attention_scores, training):
        """Which exact way of computing eq. 1 serves the call: `FUSED`, `SINGLE_QUERY` or `EXPLICIT`.

        The three give the same weights up to rounding; they differ in speed and in what they can return.
        """
        if return_attention_scores or (self.dropout > 0 and bool(training)):
            return EXPLICIT  # only the written-out softmax has weights to return or to drop
        if over_cache and query_length == 1:
            return SINGLE_QUERY  # a decoding step: no heads-first copy of the cache per block and token
        if backend.heads_first_attention():
            # JAX on the CPU, even over a cache: `jax.nn.dot_product_attention` is slower there,
            # and under `jit` it fails to compile for float16 inputs.
            return EXPLICIT
        if self.key_dim != self.value_dim:
            return EXPLICIT  # the fused kernel takes keys and values of one width
        return FUSED  # flash/cuDNN kernels where the backend has them

    def _attend(self, path, q, k, v_, key_padding, attention_mask, causal, cache, cache_rows, heads_first, training):
        """Eq. 1 along `path` (from `_choose_path`): `(output per head, weights or None)`."""
        # A causal mask alone leaves every query at least its own key: no empty rows to guard.
        causal_alone = causal is not None and key_padding is None and attention_mask is None
        if path == FUSED:
            kernel_causal = causal_alone and cache is None  # the kernel masks causally itself
            mask = None if kernel_causal else merge_masks(key_padding, attention_mask, causal)
            return self._fused_attention(q, k, v_, mask, kernel_causal, causal_alone), None
        mask = merge_masks(key_padding, attention_mask, causal)
        if path == SINGLE_QUERY:
            whole_cache = cache if cache_rows is None and backend.single_query_reads_whole_cache() else None
            return self._single_query_attention(q, k, v_, mask, causal_alone, whole_cache), None
        if heads_first:
            return self._explicit_attention(q, k, v_, mask, causal_alone, training)
        output, scores = self._explicit_attention(*map(_swap_time_and_heads, (q, k, v_)), mask, causal_alone, training)
        return _swap_time_and_heads(output), scores

    def _project_output(self, output, heads_first):
        """`Concat(head_1..head_h) W^O (+ b)`: `(B, T, H, d_v)` (or heads first) -> `(B, T, D_out)`."""
        if heads_first:
            output = ops.einsum("bhtk,hkd->btd", output, self.output_kernel)
            return output + self.output_bias if self.use_bias else output
        return backend.affine(
            output, self.output_kernel, self.output_bias if self.use_bias else None, contracted_axes=2
        )

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        """`query_shape` with the last axis `output_shape` (default: the query's width).

        Raises ValueError, as Keras' layer does, when the key's shape differs from the value's
        on an axis other than the first (batch) and the last (features): keys and values pair
        up position by position. A size of None matches any size, as in `call`.
        """
        query_shape, value_shape = tuple(query_shape), tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        positions = value_shape[1:-1]
        if len(key_shape) != len(value_shape) or any(
            got is not None and want is not None and got != want for got, want in zip(key_shape[1:-1], positions)
        ):
            v.fail(
                v.owner_name(self),
                "key_shape",
                f"the sizes {positions} of value_shape={value_shape} (the shapes of `key` and `value` must be equal"
                " on every axis but the first and the last)",
                f"key_shape={key_shape}",
            )
        return (*query_shape[:-1], self._output_shape or query_shape[-1])

    def compute_output_spec(self, query, value, key=None, attention_mask=None, **call_arguments):
        """The output, scores and cache as `call` returns them, in the layer's compute dtype."""
        key = value if key is None else key
        cache = call_arguments.get("cache")
        cache_update_index, cache_rows = call_arguments.get("cache_update_index"), call_arguments.get("cache_rows")
        self._check_inputs(query, value, key, attention_mask, cache, cache_update_index, cache_rows)
        dtype = self.compute_dtype
        results = (keras.KerasTensor(self.compute_output_shape(query.shape, value.shape, key.shape), dtype=dtype),)
        if call_arguments.get("return_attention_scores"):
            key_length = value.shape[1] if cache is None else cache.shape[2]
            results += (keras.KerasTensor((query.shape[0], self.num_heads, query.shape[1], key_length), dtype=dtype),)
        if cache is not None:
            results += (keras.KerasTensor(cache.shape, dtype=dtype),)
        return results[0] if len(results) == 1 else results

    @property
    def _scale(self):
        """The `1 / sqrt(d_k)` of eq. 1."""
        return 1.0 / math.sqrt(self.key_dim)

    def _fused_attention(self, q, k, v_, mask, is_causal, rows_never_empty):
        """Eq. 1 by `keras.ops.dot_product_attention`: `(B,Tq,H,d), (B,Tk,H,d), (B,Tk,H,d) -> (B,Tq,H,d)`.

        With `is_causal` (and no `mask`) the kernel builds the causal mask itself.
        """
        # None (Keras' default): the backend uses a flash kernel where it takes the inputs;
        # False after `keras.config.disable_flash_attention()`, as for keras.layers.MultiHeadAttention.
        flash = backend.flash_attention_flag()
        if mask is None:
            return ops.dot_product_attention(q, k, v_, scale=self._scale, is_causal=is_causal, flash_attention=flash)
        if rows_never_empty:
            return ops.dot_product_attention(q, k, v_, mask=mask, scale=self._scale, flash_attention=flash)
        has_keys = rows_with_keys(mask)  # (B, H or 1, Tq, 1)
        # Open fully masked rows to every key so the kernel (and its gradient)
        # stays finite, then zero those rows.
        kernel_mask = ops.logical_or(mask, ops.logical_not(has_keys))
        output = ops.dot_product_attention(q, k, v_, mask=kernel_mask, scale=self._scale, flash_attention=flash)
        return ops.where(ops.swapaxes(has_keys, 1, 2), output, ops.zeros_like(output))  # (B, Tq, H or 1, 1)

    def _single_query_attention(self, q, k, v_, mask, rows_never_empty, whole_cache=None):
        """Eq. 1 for one query per row: `(B,1,H,dk), (B,S,H,dk), (B,S,H,dv) -> (B,1,H,dv)`.

        Each cached key and value is read once, in the cache's own `(B, S, H, d)` layout,
        by elementwise products summed in float32; a batched matmul would first copy the
        cache heads-first, once per block and generated token. With `whole_cache`, the
        `(B, 2, S, H, d)` cache that `k` and `v_` were sliced from, the cache is read
        whole instead (`backend.single_query_reads_whole_cache`): the query multiplies
        its keys and zeros its values, so the sum over both is the keys' dot product.
        """
        mask = None if mask is None else ops.swapaxes(mask[:, :, 0], 1, 2)  # (B, S, H or 1), as the scores
        context = backend.single_query_attention(
            q,
            k,
            v_,
            mask,
            not rows_never_empty,
            self._scale,
            MASKED_SCORE,
            lambda: self._single_query_context(q, k, v_, mask, rows_never_empty, whole_cache),
        )
        return ops.cast(context, self.compute_dtype)

    def _single_query_context(self, q, k, v_, mask, rows_never_empty, whole_cache):
        """`_single_query_attention`'s float32 context in `keras.ops`."""
        q = ops.cast(q, "float32")
        if whole_cache is None:
            scores = ops.sum(q * ops.cast(k, "float32"), axis=-1)  # (B, S, H)
        else:
            whole_cache = ops.cast(whole_cache, "float32")
            query_for_keys = ops.stack((q, ops.zeros_like(q)), axis=1)  # (B, 2, 1, H, d)
            scores = ops.sum(query_for_keys * whole_cache, axis=(1, 4))
        weights = masked_softmax(scores * self._scale, mask, rows_may_be_empty=not rows_never_empty, axis=1)
        if whole_cache is None:
            context = ops.sum(ops.expand_dims(weights, -1) * ops.cast(v_, "float32"), axis=1, keepdims=True)
        else:  # (B, 2, H, d): the weighted keys, then the weighted values
            context = ops.sum(weights[:, None, :, :, None] * whole_cache, axis=2)[:, 1:]
        return context

    def _explicit_attention(self, q, k, v_, mask, rows_never_empty, training):
        """Eq. 1 written out, heads first: `(B,H,Tq,dk), (B,H,Tk,dk), (B,H,Tk,dv) -> (B,H,Tq,dv)`, weights.

        Returns the output and the attention weights `(B, H, Tq, Tk)` (dropout applies
        to the weights that multiply the values, not to those returned).
        """
        scores = backend.matmul_transposed(q * ops.cast(self._scale, q.dtype), k)
        weights = ops.cast(masked_softmax(scores, mask, rows_may_be_empty=not rows_never_empty), self.compute_dtype)
        return ops.matmul(call_sublayer(self.attention_dropout, weights, training=training), v_), weights

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "output_shape": self._output_shape,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }

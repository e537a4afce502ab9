"""Pre-norm (Xiong et al., 2020) or post-norm (Vaswani et al., 2017) Transformer encoder and decoder blocks.

`x + Dropout(Sublayer(LayerNorm(x)))` (pre-norm) around multi-head attention and a
position-wise feed-forward network. Keras has no Transformer blocks; keras-hub's are
post-norm by default and their decoder cache is split in two arguments. LayerNorm
is `keras_seq.layers.LayerNormalization` (Keras' layer, differentiated in closed form on
TensorFlow): the layer normalisation of Ba et al. (2016, sec. 3) with an epsilon inside the
square root, `(x - mean) / sqrt(var + eps)`.
"""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq import backend
from keras_seq.layers._initializers import own_draw
from keras_seq.layers._sublayers import call_sublayer
from keras_seq.layers.dropout import Dropout
from keras_seq.layers.multi_head_attention import MultiHeadAttention
from keras_seq.layers.normalization import LayerNormalization
from keras_seq.layers.positionwise import PositionwiseDense


class _TransformerBlock(keras.layers.Layer):
    """Shared configuration, sublayer construction and the residual wiring (pre- or post-norm)."""

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        activation="relu",
        norm_first=True,
        layer_norm_epsilon=1e-5,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = v.owner_name(self)
        self.num_heads = v.check_positive_int(owner, "num_heads", num_heads)
        self.intermediate_dim = v.check_positive_int(owner, "intermediate_dim", intermediate_dim)
        self.dropout = v.check_probability(owner, "dropout", dropout)
        try:
            self.activation = keras.activations.get(activation)
        except ValueError:
            v.fail(owner, "activation", "a Keras activation name or callable", repr(activation))
        self.norm_first = bool(norm_first)
        self.layer_norm_epsilon = v.check_positive_number(owner, "layer_norm_epsilon", layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def _hidden_dim(self, x_shape):
        hidden_dim = x_shape[-1]
        if hidden_dim is None or hidden_dim % self.num_heads:
            v.fail(v.owner_name(self), "x", f"a feature size divisible by num_heads={self.num_heads}", hidden_dim)
        return hidden_dim

    def _sublayer(self, cls, name, *args, **kwargs):
        return cls(*args, dtype=self.dtype_policy, name=name, **kwargs)

    def _build_attention(self, prefix, hidden_dim, query_shape, value_shape):
        attention = self._sublayer(
            MultiHeadAttention,
            f"{prefix}_attention",
            num_heads=self.num_heads,
            key_dim=hidden_dim // self.num_heads,
            dropout=self.dropout,
            kernel_initializer=own_draw(self.kernel_initializer),
        )
        attention.build(query_shape, value_shape)
        norm = self._sublayer(LayerNormalization, f"{prefix}_norm", epsilon=self.layer_norm_epsilon)
        norm.build(query_shape)
        dropout = self._sublayer(Dropout, f"{prefix}_dropout", self.dropout)
        return attention, norm, dropout

    def _build_feed_forward(self, x_shape):
        hidden_dim = x_shape[-1]
        self.feed_forward_norm = self._sublayer(
            LayerNormalization, "feed_forward_norm", epsilon=self.layer_norm_epsilon
        )
        self.feed_forward_norm.build(x_shape)
        self.feed_forward_inner = self._sublayer(
            PositionwiseDense,
            "feed_forward_inner",
            self.intermediate_dim,
            activation=self.activation,
            kernel_initializer=own_draw(self.kernel_initializer),
        )
        self.feed_forward_inner.build(x_shape)
        self.feed_forward_output = self._sublayer(
            PositionwiseDense, "feed_forward_output", hidden_dim, kernel_initializer=own_draw(self.kernel_initializer)
        )
        self.feed_forward_output.build((*x_shape[:-1], self.intermediate_dim))
        self.feed_forward_dropout = self._sublayer(Dropout, "feed_forward_dropout", self.dropout)

    def _residual(self, x, norm, sublayer, dropout, training):
        """Pre-norm `x + Dropout(Sublayer(LayerNorm(x)))`, or post-norm `LayerNorm(x + Dropout(Sublayer(x)))`.

        `sublayer` returns `(y, extra)` so a cache can ride along.
        """
        y, extra = sublayer(call_sublayer(norm, x) if self.norm_first else x)
        if self.dropout > 0:  # at rate 0 the identity
            y = call_sublayer(dropout, y, training=training)
        x = x + y
        return (x if self.norm_first else call_sublayer(norm, x)), extra

    def _feed_forward(self, x, training):
        x, _ = self._residual(
            x,
            self.feed_forward_norm,
            lambda h: (call_sublayer(self.feed_forward_output, call_sublayer(self.feed_forward_inner, h)), None),
            self.feed_forward_dropout,
            training,
        )
        return x

    def _padding_mask(self, argument, mask, x):
        mask = backend.get_keras_mask(x) if mask is None else mask
        if mask is not None:
            batch, length, _ = x.shape
            v.check_shape(v.owner_name(self), argument, mask, (batch, length))
        return mask

    def compute_output_shape(self, x_shape, *args, **kwargs):
        return x_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "activation": keras.activations.serialize(self.activation),
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerEncoderBlock(_TransformerBlock):
    """Self-attention then feed-forward, each in a residual sublayer (pre-norm by default).

    `x = x + Dropout(MultiHead(LN(x)))`, `x = x + Dropout(FFN(LN(x)))` with
    `FFN(x) = W_2 activation(W_1 x + b_1) + b_2`; `norm_first=False` gives the
    original post-norm `LN(x + Dropout(Sublayer(x)))`. A pre-norm stack needs a final
    LayerNorm after its last block (the model builders add it).

    Args:
        num_heads: attention heads; the input width must be divisible by it.
        intermediate_dim: hidden width of the feed-forward network.
        dropout: rate for attention weights and both residual branches.
        activation: feed-forward activation.
        norm_first: pre-norm (True) or post-norm (False).
        layer_norm_epsilon: epsilon of both LayerNorms.
        kernel_initializer: initializer of every kernel.

    Call arguments:
        x: `(B, T, D)`.
        padding_mask: `(B, T)`, True at real tokens; defaults to `x`'s Keras mask.
        attention_mask: `(B, T, T)`, True where attending is allowed.
        training: apply dropout.

    References:
        Vaswani et al., 2017; Xiong et al., 2020, "On layer normalization in the
        Transformer architecture" (pre-norm).
    """

    def build(self, x_shape):
        hidden_dim = self._hidden_dim(x_shape)
        self.self_attention, self.self_attention_norm, self.self_attention_dropout = self._build_attention(
            "self", hidden_dim, x_shape, x_shape
        )
        self._build_feed_forward(x_shape)

    def call(self, x, padding_mask=None, attention_mask=None, training=None):
        v.check_rank(v.owner_name(self), "x", x, 3)
        padding_mask = self._padding_mask("padding_mask", padding_mask, x)
        x, _ = self._residual(
            x,
            self.self_attention_norm,
            lambda h: (
                call_sublayer(
                    self.self_attention, h, h, attention_mask=attention_mask, value_mask=padding_mask, training=training
                ),
                None,
            ),
            self.self_attention_dropout,
            training,
        )
        return self._feed_forward(x, training)


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerDecoderBlock(_TransformerBlock):
    """Causal self-attention, cross-attention over the encoder, feed-forward (Vaswani et al., 2017, sec. 3.1).

    Same residual wiring as `TransformerEncoderBlock`. Cross-attention sublayers
    exist when the block is first called with `encoder_outputs`; without them it is
    a GPT-style decoder-only block. The first call fixes which of the two it is
    (its weights are built then): later calls must match it.

    Call arguments:
        x: `(B, T, D)` decoder inputs.
        encoder_outputs: `(B, S, D_enc)` or None.
        decoder_padding_mask: `(B, T)`; defaults to `x`'s Keras mask.
        encoder_padding_mask: `(B, S)`; defaults to `encoder_outputs`' Keras mask.
        cache: self-attention key/value cache `(B, 2, max_length, H, D/H)`.
        cache_update_index: position of `x`'s first step in the cache.
        cache_rows: `(B, max_length)` int, the cache row holding each position of
            this row (see `MultiHeadAttention`; beam search).
        cross_attention_cache: the encoder outputs' keys and values projected once,
            `block.cross_attention.key_value_cache(encoder_outputs)`, for decoding
            (each step then projects only its queries).
        rows_per_source: with `cross_attention_cache`, how many consecutive rows of
            `x` share each row of the encoder outputs and of that cache (`B / G`
            rows): a source's beams, whose queries attend to its keys together, so
            its keys and values are kept and read once, not once per beam.
        training: apply dropout.
        return_attention_scores: also return the cross-attention weights
            `(B, H, T, S)` (for plots; not with `cache`).

    Returns:
        `(B, T, D)`, or `(output, new_cache)` when `cache` is given, or
        `(output, cross-attention weights)` when asked for.
    """

    def build(self, x_shape, encoder_outputs_shape=None):
        hidden_dim = self._hidden_dim(x_shape)
        self.self_attention, self.self_attention_norm, self.self_attention_dropout = self._build_attention(
            "self", hidden_dim, x_shape, x_shape
        )
        self.has_cross_attention = encoder_outputs_shape is not None
        if self.has_cross_attention:
            self.cross_attention, self.cross_attention_norm, self.cross_attention_dropout = self._build_attention(
                "cross", hidden_dim, x_shape, encoder_outputs_shape
            )
        self._build_feed_forward(x_shape)

    def call(
        self,
        x,
        encoder_outputs=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        cache=None,
        cache_update_index=None,
        cache_rows=None,
        training=None,
        return_attention_scores=False,
        cross_attention_cache=None,
        rows_per_source=1,
    ):
        cached = cache is not None or cross_attention_cache is not None
        self._check_call(x, encoder_outputs, cached, return_attention_scores, cross_attention_cache, rows_per_source)
        decoder_padding_mask = self._padding_mask("decoder_padding_mask", decoder_padding_mask, x)
        self_attend = lambda h: self._self_attend(
            h, decoder_padding_mask, cache, cache_update_index, cache_rows, training
        )
        x, new_cache = self._residual(x, self.self_attention_norm, self_attend, self.self_attention_dropout, training)
        if self.has_cross_attention:
            encoder_padding_mask = self._padding_mask("encoder_padding_mask", encoder_padding_mask, encoder_outputs)
            cross_attend = lambda h: self._cross_attend(
                h,
                encoder_outputs,
                encoder_padding_mask,
                cross_attention_cache,
                rows_per_source,
                training,
                return_attention_scores,
            )
            x, scores = self._residual(
                x, self.cross_attention_norm, cross_attend, self.cross_attention_dropout, training
            )
        x = self._feed_forward(x, training)
        if return_attention_scores:
            return x, scores
        return x if cache is None else (x, new_cache)

    def _check_call(self, x, encoder_outputs, cached, return_attention_scores, cross_attention_cache, rows_per_source):
        owner = v.owner_name(self)
        v.check_rank(owner, "x", x, 3)
        v.check_positive_int(owner, "rows_per_source", rows_per_source)
        if rows_per_source > 1 and cross_attention_cache is None:
            v.fail(owner, "rows_per_source", "1 without a `cross_attention_cache`", rows_per_source)
        rows, sources = x.shape[0], None if encoder_outputs is None else encoder_outputs.shape[0]
        if rows_per_source > 1 and rows is not None and sources is not None and rows != rows_per_source * sources:
            v.fail(owner, "x", f"{rows_per_source} rows per row of the encoder outputs ({sources})", f"{rows} rows")
        if return_attention_scores and (cached or not self.has_cross_attention):
            v.fail(owner, "return_attention_scores", "a block with cross-attention called without caches", "True")
        if (encoder_outputs is not None) != self.has_cross_attention:
            expected = (
                "encoder outputs (the block's first call built its cross-attention)"
                if self.has_cross_attention
                else "None (the block's first call built it without cross-attention; use a new block)"
            )
            v.fail(owner, "encoder_outputs", expected, type(encoder_outputs).__name__)
        if self.has_cross_attention:
            v.check_rank(owner, "encoder_outputs", encoder_outputs, 3)

    def _self_attend(self, h, padding_mask, cache, cache_update_index, cache_rows, training):
        """Causal self-attention of `h`, through the cache when given: `(output, new cache or None)`."""
        result = call_sublayer(
            self.self_attention,
            h,
            h,
            use_causal_mask=True,
            value_mask=padding_mask,
            cache=cache,
            cache_update_index=cache_update_index,
            cache_rows=cache_rows,
            training=training,
        )
        return result if cache is not None else (result, None)

    def _cross_attend(
        self,
        h,
        encoder_outputs,
        encoder_padding_mask,
        key_value_cache,
        rows_per_source,
        training,
        return_attention_scores,
    ):
        """Attention of `h` over the encoder outputs (their keys and values from `key_value_cache` when given,
        each row of it attended to by `rows_per_source` rows of `h`): `(output, weights or None)`."""
        if key_value_cache is None:
            result = call_sublayer(
                self.cross_attention,
                h,
                encoder_outputs,
                value_mask=encoder_padding_mask,
                training=training,
                return_attention_scores=return_attention_scores,
            )
            return result if return_attention_scores else (result, None)
        rows, length, width = ops.shape(h)
        queries = ops.reshape(h, (-1, rows_per_source * length, width))  # a source's rows side by side
        output, _ = call_sublayer(
            self.cross_attention,
            queries,
            encoder_outputs,
            value_mask=encoder_padding_mask,
            training=training,
            cache=key_value_cache,
        )
        return ops.reshape(output, (rows, length, width)), None

"""Positional encodings and the token-plus-position embedding.

Vaswani et al. (2017, sections 3.4-3.5): token embeddings of width
d_model, to which a position signal is *added*. Keras has no sinusoidal encoding and
no position embedding with a `start_index` for incremental decoding, so both are
written here.
"""

import math
import weakref

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq import backend
from keras_seq.layers._sublayers import call_sublayer
from keras_seq.layers.positionwise import over_positions

POSITIONAL_KINDS = ("sinusoidal", "learned")


def sinusoidal_position_encoding(length, depth, max_wavelength=10000.0, start_index=0, dtype="float32"):
    """The matrix `PE[start_index : start_index + length]` of Vaswani et al. (2017), sec. 3.5.

    `PE[pos, 2i] = sin(pos / max_wavelength**(2i/depth))` and
    `PE[pos, 2i+1] = cos(pos / max_wavelength**(2i/depth))`: sines on even
    dimensions and cosines on odd ones, interleaved, with wavelengths in a geometric
    progression from 2*pi to max_wavelength*2*pi.

    Args:
        length: number of positions (int).
        depth: width d_model of the encoding (int).
        max_wavelength: the base, 10000 in the paper.
        start_index: first position (int or scalar tensor), for incremental decoding.
        dtype: dtype of the result; the angles are always computed in float32.

    Returns:
        A `(length, depth)` tensor.
    """
    positions = ops.cast(ops.arange(length), "float32") + ops.cast(start_index, "float32")
    dims = ops.arange(depth)
    even_dims = ops.cast(dims - dims % 2, "float32")  # 2i for both 2i and 2i+1
    inverse_frequency = ops.exp(-math.log(max_wavelength) * even_dims / depth)
    angles = positions[:, None] * inverse_frequency[None, :]
    encoding = ops.where(dims % 2 == 0, ops.sin(angles), ops.cos(angles))
    return ops.cast(encoding, dtype)


def _check_sequence(layer, inputs):
    owner = v.owner_name(layer)
    shape = v.check_rank(owner, "inputs", inputs, 3)
    v.check_floating(owner, "inputs", inputs)
    return shape


@keras.saving.register_keras_serializable(package="keras_seq")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal position signal of Vaswani et al. (2017, sec. 3.5) to its input.

    `outputs = inputs + PE[start_index : start_index + T]` with
    `PE[pos, 2i] = sin(pos / max_wavelength**(2i/D))` and
    `PE[pos, 2i+1] = cos(pos / max_wavelength**(2i/D))` (interleaved, exactly as the
    Vaswani formula; keras-hub's `SinusoidalPositionEncoding` concatenates instead).
    The layer has no weights and keeps the input's mask.

    Args:
        max_wavelength: the base of the geometric progression of wavelengths.

    Call arguments:
        inputs: `(B, T, D)` floating tensor.
        start_index: position of the first time step (int or scalar tensor), so a
            decoder fed one token at a time gets the same encoding as a full pass.

    Example:
        >>> x = keras.ops.zeros((2, 5, 8))
        >>> SinusoidalPositionalEncoding()(x).shape
        (2, 5, 8)

    References:
        Vaswani et al., 2017, "Attention is all you need", section 3.5.
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = v.check_positive_number(
            f"SinusoidalPositionalEncoding '{self.name}'", "max_wavelength", max_wavelength
        )
        self.supports_masking = True
        self.built = True

    def call(self, inputs, start_index=0):
        _, length, depth = _check_sequence(self, inputs)
        encoding = sinusoidal_position_encoding(
            length or ops.shape(inputs)[1], depth, self.max_wavelength, start_index, self.compute_dtype
        )
        return ops.cast(inputs, self.compute_dtype) + encoding[None]

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_wavelength": self.max_wavelength}


@keras.saving.register_keras_serializable(package="keras_seq")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding of each position to its input.

    `outputs = inputs + P[start_index : start_index + T]` with `P` a trained
    `(sequence_length, D)` matrix (the learned alternative to the sinusoids, Gehring et al., 2017, sec. 3.1, used
    by BERT and GPT). Positions past `sequence_length` raise a `ValueError` instead
    of reading out of bounds. Keeps the input's mask.

    Args:
        sequence_length: the number of positions that can be embedded.
        initializer: initializer of `P`.

    Call arguments:
        inputs: `(B, T, D)` floating tensor.
        start_index: position of the first time step (int or scalar tensor).
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = v.check_positive_int(
            f"PositionEmbedding '{self.name}'", "sequence_length", sequence_length
        )
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, input_shape):
        depth = input_shape[-1]
        if depth is None:
            v.fail(v.owner_name(self), "inputs", "a known feature size D", f"shape {tuple(input_shape)}")
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.sequence_length, depth),
            initializer=self.initializer,
        )

    def call(self, inputs, start_index=0):
        _, length, depth = _check_sequence(self, inputs)
        v.check_same_size(v.owner_name(self), "inputs", depth, self.position_embeddings.shape[1], "feature size")
        v.check_positions(v.owner_name(self), start_index, length, self.sequence_length)
        length = length or ops.shape(inputs)[1]
        positions = ops.slice(ops.convert_to_tensor(self.position_embeddings), (start_index, 0), (length, depth))
        return ops.cast(inputs, self.compute_dtype) + ops.cast(positions, self.compute_dtype)[None]

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "sequence_length": self.sequence_length,
            "initializer": keras.initializers.serialize(self.initializer),
        }


@keras.saving.register_keras_serializable(package="keras_seq")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Token embedding (scaled by sqrt(D)) plus a position signal (Vaswani et al., 2017, sec. 3.4-3.5).

    `outputs = E[token_ids] * sqrt(D) + PE[start_index : start_index + T]`, where
    `PE` is the sinusoidal encoding or a learned `PositionEmbedding`. The sqrt(D)
    scale (Vaswani et al., section 3.4) keeps the token signal from being drowned by
    the unit-amplitude sinusoids. With `mask_zero`, id 0 is padding and the output
    carries the mask `token_ids != 0`.

    Args:
        vocabulary_size: number of token ids V.
        sequence_length: the longest sequence (positions past it raise ValueError).
        embedding_dim: width D.
        positional: `"sinusoidal"` or `"learned"`.
        mask_zero: treat id 0 as padding and propagate a mask.
        scale_embeddings: multiply token embeddings by sqrt(D).
        embeddings_initializer: initializer of the token embedding matrix.

    Call arguments:
        token_ids: `(B, T)` integer ids in `[0, vocabulary_size)`.
        start_index: position of the first id (int or scalar tensor).
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        embedding_dim,
        positional="sinusoidal",
        mask_zero=True,
        scale_embeddings=True,
        embeddings_initializer="uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = v.owner_name(self)
        self.vocabulary_size = v.check_positive_int(owner, "vocabulary_size", vocabulary_size)
        self.sequence_length = v.check_positive_int(owner, "sequence_length", sequence_length)
        self.embedding_dim = v.check_positive_int(owner, "embedding_dim", embedding_dim)
        self.positional = v.check_choice(owner, "positional", positional, POSITIONAL_KINDS)
        self.mask_zero = bool(mask_zero)
        self.scale_embeddings = bool(scale_embeddings)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = self.mask_zero
        self.token_embedding = keras.layers.Embedding(
            self.vocabulary_size,
            self.embedding_dim,
            embeddings_initializer=self.embeddings_initializer,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        if self.positional == "learned":
            self.position_encoding = PositionEmbedding(
                self.sequence_length, dtype=self.dtype_policy, name="position_embedding"
            )
        else:
            self.position_encoding = SinusoidalPositionalEncoding(dtype=self.dtype_policy, name="position_encoding")

    def build(self, input_shape):
        self.token_embedding.build(input_shape)
        self.position_encoding.build((*input_shape, self.embedding_dim))

    def call(self, token_ids, start_index=0):
        owner = v.owner_name(self)
        _, length = v.check_rank(owner, "token_ids", token_ids, 2)
        v.check_integer_ids(owner, "token_ids", token_ids)
        v.check_ids_below(owner, "token_ids", token_ids, self.vocabulary_size)
        v.check_positions(owner, start_index, length, self.sequence_length)
        embedded = call_sublayer(self.token_embedding, token_ids)
        if self.scale_embeddings:
            embedded = embedded * ops.cast(math.sqrt(self.embedding_dim), embedded.dtype)
        return call_sublayer(self.position_encoding, embedded, start_index=start_index)

    def compute_mask(self, token_ids, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(token_ids, 0)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.embedding_dim)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "sequence_length": self.sequence_length,
            "embedding_dim": self.embedding_dim,
            "positional": self.positional,
            "mask_zero": self.mask_zero,
            "scale_embeddings": self.scale_embeddings,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }


@keras.saving.register_keras_serializable(package="keras_seq")
class ScaledEmbedding(keras.layers.Embedding):
    """`E[token_ids] * sqrt(D)`, the table `E` `(V, D)` drawn from N(0, 1/D) (Vaswani et al., 2017, sec. 3.4).

    The rows enter the network at unit variance, while the table stays small enough to
    serve as a tied output layer too (`TiedLogits`: `h E^T` keeps the scale of `h`).
    Otherwise a `keras.layers.Embedding` (same arguments, same weights).
    """

    def __init__(self, input_dim, output_dim, **kwargs):
        kwargs.setdefault("embeddings_initializer", keras.initializers.RandomNormal(stddev=output_dim**-0.5))
        super().__init__(input_dim, output_dim, **kwargs)

    def call(self, inputs):
        embedded = super().call(inputs)
        return embedded * ops.cast(math.sqrt(self.output_dim), embedded.dtype)


class TiedLogits(keras.layers.Layer):
    """Output projection sharing the token embedding matrix: `logits = h @ E^T + b`.

    `E` `(V, D)` is `embedding`'s table: a `keras.layers.Embedding`, or the `token_embedding`
    of a `TokenAndPositionEmbedding`. Only the bias `b` `(V,)` is this layer's own, so
    tying saves the `V * D` kernel of a separate output layer (Press & Wolf, 2017;
    Vaswani et al., 2017, section 3.4).
    Computed in float32 and mask-preserving, like the untied `Dense` head. The models
    below rebuild it from their own config, so it needs no config of its own.
    """

    def __init__(self, embedding, **kwargs):
        super().__init__(dtype="float32", **kwargs)
        # A weak reference is invisible to Keras' and torch's attribute tracking: the
        # model owns the embedding, so its weights are listed and saved once, not
        # again under this layer (whose own weight is the bias alone).
        table = getattr(embedding, "token_embedding", embedding)
        self._table = weakref.ref(table)
        self.vocabulary_size = table.input_dim
        self.supports_masking = True

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(self.vocabulary_size,), initializer="zeros")

    def call(self, h, kernel=None):
        """`h @ kernel + b`, `kernel` being `E^T` unless given (a decoding loop passes `transposed_table()` in)."""
        if kernel is None:  # `h E^T` as one product whose gradient needs no transpose of its own
            table = ops.cast(self._table().embeddings, "float32")
            product = lambda rows: backend.matmul_transposed(rows, table)  # noqa: E731
        else:
            product = lambda rows: ops.matmul(rows, kernel)  # noqa: E731
        return over_positions(product, ops.cast(h, "float32")) + self.bias

    def transposed_table(self):
        """`E^T` `(D, V)`, float32. Made once before a decoding loop and passed to each step's `call`, it is an
        array laid out for the product: XLA otherwise folds the transpose into every step's product, which on a
        CPU then reads `E` across its rows, slowly at a few rows."""
        return ops.transpose(ops.cast(self._table().embeddings, "float32"))

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.vocabulary_size)

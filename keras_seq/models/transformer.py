"""Transformer task models built from the pre-norm blocks (seed 000 section 5, seed 003)."""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq.layers.embedding import POSITIONAL_KINDS, TokenAndPositionEmbedding
from keras_seq.layers.transformer import TransformerDecoderBlock
from keras_seq.models.generative import GenerativeModel


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerLM(GenerativeModel):
    """Decoder-only (GPT-style) language model: ids `(B, T)` -> next-token logits `(B, T, V)`.

    Token + position embedding, `num_layers` causal `TransformerDecoderBlock`s, a
    final LayerNorm (pre-norm stacks need it), and a float32 output projection.
    Id 0 is padding. `generate` continues a prompt with a key/value cache of
    `(B, num_layers, 2, max_length, heads, hidden_dim / heads)`.

    Build it with `keras_seq.models.transformer_lm`.
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        num_layers=4,
        hidden_dim=256,
        num_heads=4,
        intermediate_dim=1024,
        dropout=0.0,
        norm_first=True,
        positional="learned",
        **kwargs,
    ):
        owner = "transformer_lm"
        for name, value in (
            ("vocabulary_size", vocabulary_size),
            ("sequence_length", sequence_length),
            ("num_layers", num_layers),
            ("hidden_dim", hidden_dim),
            ("num_heads", num_heads),
            ("intermediate_dim", intermediate_dim),
        ):
            v.check_positive_int(owner, name, value)
        v.check_choice(owner, "positional", positional, POSITIONAL_KINDS)
        if hidden_dim % num_heads:
            v.fail(owner, "hidden_dim", f"a multiple of num_heads={num_heads}", hidden_dim)
        embedding = TokenAndPositionEmbedding(
            vocabulary_size, sequence_length, hidden_dim, positional=positional, name="token_embedding"
        )
        embedding_dropout = keras.layers.Dropout(dropout, name="embedding_dropout")
        blocks = [
            TransformerDecoderBlock(
                num_heads, intermediate_dim, dropout=dropout, norm_first=norm_first, name=f"decoder_block_{index}"
            )
            for index in range(num_layers)
        ]
        final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm") if norm_first else None
        head = keras.layers.Dense(vocabulary_size, dtype="float32", name="logits")

        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        h = embedding_dropout(embedding(token_ids))
        for block in blocks:
            h = block(h)
        if final_norm is not None:
            h = final_norm(h)
        super().__init__(token_ids, head(h), **kwargs)

        self.token_embedding, self.blocks, self.final_norm, self.head = embedding, blocks, final_norm, head
        self._config = dict(
            vocabulary_size=vocabulary_size,
            sequence_length=sequence_length,
            num_layers=num_layers,
            hidden_dim=hidden_dim,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            norm_first=norm_first,
            positional=positional,
        )

    @property
    def decoding_vocabulary_size(self):
        return self._config["vocabulary_size"]

    def _decoding_start(self, prompt, max_length, start_id):
        config = self._config
        batch, prompt_length = prompt.shape
        owner = "TransformerLM.generate"
        if prompt_length > max_length:
            v.fail(owner, "inputs", f"a prompt of at most max_length={max_length} ids", f"{prompt_length} ids")
        if max_length > config["sequence_length"]:
            v.fail(owner, "max_length", f"at most sequence_length={config['sequence_length']}", max_length)
        ids = ops.pad(prompt, ((0, 0), (0, max_length - prompt_length)))
        heads = config["num_heads"]
        cache_shape = (batch, config["num_layers"], 2, max_length, heads, config["hidden_dim"] // heads)
        cache = ops.zeros(cache_shape, self.token_embedding.compute_dtype)
        return ids, prompt_length, cache, None

    def _decoding_step(self, ids, cache, index, context):
        h = self.token_embedding(ids, start_index=index)
        layer_caches = []
        for layer, block in enumerate(self.blocks):
            h, layer_cache = block(h, cache=cache[:, layer], cache_update_index=index)
            layer_caches.append(layer_cache)
        if self.final_norm is not None:
            h = self.final_norm(h)
        return self.head(h), ops.stack(layer_caches, axis=1)


def transformer_lm(
    vocabulary_size,
    sequence_length,
    num_layers=4,
    hidden_dim=256,
    num_heads=4,
    intermediate_dim=1024,
    dropout=0.0,
    norm_first=True,
    positional="learned",
):
    """A GPT-style decoder-only language model; see `TransformerLM`."""
    return TransformerLM(
        vocabulary_size,
        sequence_length,
        num_layers=num_layers,
        hidden_dim=hidden_dim,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        dropout=dropout,
        norm_first=norm_first,
        positional=positional,
        name="transformer_lm",
    )

"""Transformer task models from the pre-norm blocks.

Vaswani et al., 2017; Radford et al., 2018; Devlin et al., 2019."""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq.layers._sublayers import call_in_step
from keras_seq.layers.dropout import Dropout
from keras_seq.layers.embedding import POSITIONAL_KINDS, TiedLogits, TokenAndPositionEmbedding
from keras_seq.layers.masking import PaddingMaskFromIds
from keras_seq.layers.normalization import LayerNormalization
from keras_seq.layers.pooling import SequencePooling
from keras_seq.layers.positionwise import PositionwiseDense
from keras_seq.layers.transformer import TransformerDecoderBlock, TransformerEncoderBlock
from keras_seq.models.config import ConfigFromArguments, constructor_arguments, keep_parts
from keras_seq.models.generative import GenerativeModel
from keras_seq.models.keras_workarounds import ArrayFeedModel


def _check_sizes(owner, num_heads, hidden_dim, **sizes):
    for name, value in {**sizes, "num_heads": num_heads, "hidden_dim": hidden_dim}.items():
        v.check_positive_int(owner, name, value)
    if hidden_dim % num_heads:
        v.fail(owner, "hidden_dim", f"a multiple of num_heads={num_heads}", hidden_dim)


def _one_stack(
    model_name,
    block_class,
    prefix,
    mask_zero,
    vocabulary_size,
    sequence_length,
    num_layers,
    hidden_dim,
    num_heads,
    intermediate_dim,
    dropout,
    norm_first,
    positional,
    tie_embeddings,
):
    """A one-stack model's (the LM's, the MLM's) checked parts and graph: `(token_ids, logits, parts)`.

    `parts` holds the layers the model keeps as attributes (`keep_parts`): the token
    embedding, the blocks, the final norm and the logits head.
    """
    _check_sizes(
        model_name,
        num_heads,
        hidden_dim,
        vocabulary_size=vocabulary_size,
        sequence_length=sequence_length,
        num_layers=num_layers,
        intermediate_dim=intermediate_dim,
    )
    v.check_probability(model_name, "dropout", dropout)
    v.check_choice(model_name, "positional", positional, POSITIONAL_KINDS)
    embedding = TokenAndPositionEmbedding(
        vocabulary_size, sequence_length, hidden_dim, positional=positional, mask_zero=mask_zero, name="token_embedding"
    )
    blocks, final_norm = _stack(block_class, prefix, num_layers, num_heads, intermediate_dim, dropout, norm_first)
    head = _logits_head(embedding, tie_embeddings)
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    logits = head(_stack_features(token_ids, embedding, blocks, final_norm, dropout))
    parts = {"token_embedding": embedding, "blocks": blocks, "final_norm": final_norm, "head": head}
    return token_ids, logits, parts


def _stack(block_class, prefix, num_layers, num_heads, intermediate_dim, dropout, norm_first):
    """`num_layers` blocks, and the final LayerNorm a pre-norm stack needs (None for post-norm)."""
    blocks = [
        block_class(num_heads, intermediate_dim, dropout=dropout, norm_first=norm_first, name=f"{prefix}_block_{index}")
        for index in range(num_layers)
    ]
    final_norm = LayerNormalization(epsilon=1e-5, name=f"{prefix}_final_norm") if norm_first else None
    return blocks, final_norm


def _normalized(final_norm, h):
    return h if final_norm is None else final_norm(h)


def _stack_features(
    token_ids, embedding, blocks, final_norm, dropout=None, dropout_name="embedding_dropout", **block_inputs
):
    """Features `(B, T, D)` of a stack: embedding, dropout (None: none), the blocks (each given `block_inputs`), the
    final norm.

    The one forward pass of every stack: the functional graphs train with it, and
    `TransformerSeq2Seq.encode` and `attention_weights` call it again on their own inputs.
    """
    h = embedding(token_ids)
    if dropout is not None:
        h = Dropout(dropout, name=dropout_name)(h)
    for block in blocks:
        h = block(h, **block_inputs)
    return _normalized(final_norm, h)


def _empty_cache(batch, num_layers, max_length, num_heads, hidden_dim, dtype):
    """Self-attention keys/values of every decoder block: a tuple of `(B, 2, max_length, H, D/H)`.

    One tensor per block rather than one stacked tensor: a step then writes only
    its new positions into each block's cache, with no copy of the whole stack.
    """
    shape = (batch, 2, max_length, num_heads, hidden_dim // num_heads)
    return tuple(ops.zeros(shape, dtype) for _ in range(num_layers))


def _cached_decoder_step(
    embedding,
    blocks,
    final_norm,
    head,
    ids,
    cache,
    index,
    cache_rows,
    weights=None,
    cross_caches=None,
    **encoder_inputs,
):
    """Logits of `ids` placed at `index`, adding their keys/values to each block's cache (`weights`: the model's
    `decoding_step_weights`; `cross_caches`: each block's precomputed cross-attention keys and values; `encoder_inputs`:
    the blocks' encoder arguments)."""
    h = call_in_step(embedding, ids, start_index=index)
    layer_caches = []
    for block, layer_cache, cross_cache in zip(blocks, cache, cross_caches or (None,) * len(blocks)):
        h, layer_cache = call_in_step(
            block,
            h,
            cache=layer_cache,
            cache_update_index=index,
            cache_rows=cache_rows,
            cross_attention_cache=cross_cache,
            **encoder_inputs,
        )
        layer_caches.append(layer_cache)
    if final_norm is not None:
        h = call_in_step(final_norm, h)
    return call_in_step(head, h, **(weights or {})), tuple(layer_caches)


def _logits_head(embedding, tie_embeddings):
    """The float32 output projection to the vocabulary of `embedding`, tied to it or not."""
    if tie_embeddings:
        return TiedLogits(embedding, name="logits")
    return PositionwiseDense(embedding.vocabulary_size, dtype="float32", name="logits")


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerLM(GenerativeModel):
    """Decoder-only (GPT-style) language model: ids `(B, T)` -> next-token logits `(B, T, V)`.

    Token + position embedding, `num_layers` causal `TransformerDecoderBlock`s, a
    final LayerNorm (pre-norm stacks need it), and a float32 output projection
    (`h @ E^T + b` with the token embedding `E` when `tie_embeddings`, see
    `TiedLogits`). Id 0 is padding, and goes at the end of a sequence: causal
    self-attention never looks ahead, so the logits of real tokens are those of the
    unpadded sequence and the blocks run unmasked (on torch that keeps the causal
    flash-attention kernel); the padding mask rides on the logits, so Keras losses
    and metrics skip padded positions. `generate` continues a prompt with a
    key/value cache per block of `(B, 2, max_length, heads, hidden_dim / heads)`.

    `keras_seq.models.transformer_lm` is this class.
    """

    decoding_reads_cache_rows = True
    decoding_cache_time_axis = 2

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
        tie_embeddings=False,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        kwargs.setdefault("name", "transformer_lm")
        # Unmasked self-attention (the padding mask rides on the logits, see the class docstring).
        token_ids, logits, parts = _one_stack("transformer_lm", TransformerDecoderBlock, "decoder", False, **config)
        logits = PaddingMaskFromIds(dtype="float32", name="padding_mask")(token_ids, logits)
        super().__init__(token_ids, logits, **kwargs)
        keep_parts(self, config, **parts)

    @property
    def decoding_vocabulary_size(self):
        return self._config["vocabulary_size"]

    @property
    def decoding_length_limits(self):
        return None, self._config["sequence_length"]

    def start_decoding(self, prompt, max_length, copies):
        """Each block's empty key/value cache for the `copies` rows of each prompt; no context."""
        config = self._config
        cache = _empty_cache(
            ops.shape(prompt)[0] * copies,
            config["num_layers"],
            max_length,
            config["num_heads"],
            config["hidden_dim"],
            self.token_embedding.compute_dtype,
        )
        return cache, None

    def decoding_step(self, ids, cache, index, context, cache_rows=None, copies=1, weights=None):
        return _cached_decoder_step(
            self.token_embedding, self.blocks, self.final_norm, self.head, ids, cache, index, cache_rows, weights
        )


transformer_lm = TransformerLM  # the builder is the class: `transformer_lm(...)` returns a `TransformerLM`


def _seq2seq_embeddings(
    source_vocabulary_size,
    target_vocabulary_size,
    source_length,
    target_length,
    hidden_dim,
    positional,
    share_embeddings,
):
    """The source and target `TokenAndPositionEmbedding`s: one shared layer when `share_embeddings`."""
    if not share_embeddings:
        return (
            TokenAndPositionEmbedding(
                source_vocabulary_size, source_length, hidden_dim, positional=positional, name="source_embedding"
            ),
            TokenAndPositionEmbedding(
                target_vocabulary_size, target_length, hidden_dim, positional=positional, name="target_embedding"
            ),
        )
    if source_vocabulary_size != target_vocabulary_size:
        v.fail(
            "transformer_seq2seq",
            "share_embeddings",
            f"one vocabulary (source_vocabulary_size == target_vocabulary_size, got "
            f"{source_vocabulary_size} and {target_vocabulary_size})",
            share_embeddings,
        )
    shared = TokenAndPositionEmbedding(
        source_vocabulary_size,
        max(source_length, target_length),
        hidden_dim,
        positional=positional,
        name="shared_embedding",
    )
    return shared, shared


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerSeq2Seq(GenerativeModel):
    """Encoder-decoder Transformer (Vaswani et al., 2017, section 3): unaligned seq2seq.

    Inputs `{"encoder_inputs": (B, S), "decoder_inputs": (B, T)}` -> logits
    `(B, T, V_target)`. The encoder stack reads the source with padding masks; each
    decoder block attends causally to the target prefix and across to the encoder
    outputs (teacher forcing: `decoder_inputs` are the targets shifted right, starting
    with the start id). `generate(encoder_ids, max_length, start_id=1, ...)` encodes
    once and decodes with a self-attention cache. With `tie_embeddings`, the output
    projection is `h @ E^T + b` with the target embedding `E` (see `TiedLogits`).
    With `share_embeddings`, source and target (one vocabulary, e.g. a joint subword
    model) share one embedding layer; with both, encoder, decoder and output use one
    matrix: three-way tying (Press & Wolf, 2017, section 4; Vaswani et al., 2017,
    section 3.4).

    `keras_seq.models.transformer_seq2seq` is this class.
    """

    decoding_reads_cache_rows = True
    decoding_cache_time_axis = 2
    decoding_shares_context = True
    _inputs_are_prompts = False

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        source_length,
        target_length,
        num_layers=2,
        hidden_dim=256,
        num_heads=4,
        intermediate_dim=1024,
        dropout=0.1,
        norm_first=True,
        positional="sinusoidal",
        tie_embeddings=False,
        share_embeddings=False,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        kwargs.setdefault("name", "transformer_seq2seq")
        owner = "transformer_seq2seq"
        _check_sizes(
            owner,
            num_heads,
            hidden_dim,
            source_vocabulary_size=source_vocabulary_size,
            target_vocabulary_size=target_vocabulary_size,
            source_length=source_length,
            target_length=target_length,
            num_layers=num_layers,
            intermediate_dim=intermediate_dim,
        )
        v.check_choice(owner, "positional", positional, POSITIONAL_KINDS)
        source_embedding, target_embedding = _seq2seq_embeddings(
            source_vocabulary_size,
            target_vocabulary_size,
            source_length,
            target_length,
            hidden_dim,
            positional,
            share_embeddings,
        )
        stack = (num_layers, num_heads, intermediate_dim, dropout, norm_first)
        encoder_blocks, encoder_norm = _stack(TransformerEncoderBlock, "encoder", *stack)
        decoder_blocks, decoder_norm = _stack(TransformerDecoderBlock, "decoder", *stack)
        head = _logits_head(target_embedding, tie_embeddings)

        encoder_ids = keras.Input((None,), dtype="int32", name="encoder_inputs")
        decoder_ids = keras.Input((None,), dtype="int32", name="decoder_inputs")
        encoder_outputs = _stack_features(
            encoder_ids, source_embedding, encoder_blocks, encoder_norm, dropout, "source_dropout"
        )
        logits = head(
            _stack_features(
                decoder_ids,
                target_embedding,
                decoder_blocks,
                decoder_norm,
                dropout,
                "target_dropout",
                encoder_outputs=encoder_outputs,
            )
        )
        super().__init__({"encoder_inputs": encoder_ids, "decoder_inputs": decoder_ids}, logits, **kwargs)

        keep_parts(
            self,
            config,
            source_embedding=source_embedding,
            encoder_blocks=encoder_blocks,
            encoder_norm=encoder_norm,
            target_embedding=target_embedding,
            decoder_blocks=decoder_blocks,
            decoder_norm=decoder_norm,
            head=head,
        )

    @property
    def decoding_vocabulary_size(self):
        return self._config["target_vocabulary_size"]

    @property
    def decoding_length_limits(self):
        return self._config["source_length"], self._config["target_length"]

    @property
    def input_vocabulary_size(self):
        return self._config["source_vocabulary_size"]

    def encode(self, encoder_ids):
        """Encoder outputs `(B, S, D)` and the source padding mask `(B, S)`."""
        mask = ops.not_equal(encoder_ids, 0)
        return _stack_features(
            encoder_ids, self.source_embedding, self.encoder_blocks, self.encoder_norm, padding_mask=mask
        ), mask

    def attention_weights(self, inputs):
        """Cross-attention weights `(B, T, S)` of the last decoder block, averaged over heads.

        `inputs` as for the model (`encoder_inputs`, `decoder_inputs`, teacher forcing):
        row t says where target position t looked in the source, for plots.
        """
        encoder_outputs, encoder_mask = self.encode(inputs["encoder_inputs"])
        decoder_ids = inputs["decoder_inputs"]
        masks = dict(decoder_padding_mask=ops.not_equal(decoder_ids, 0), encoder_padding_mask=encoder_mask)
        *below, last = self.decoder_blocks
        h = _stack_features(decoder_ids, self.target_embedding, below, None, encoder_outputs=encoder_outputs, **masks)
        _, scores = last(h, encoder_outputs, return_attention_scores=True, **masks)
        return ops.mean(ops.cast(scores, "float32"), axis=1)

    def decoding_alignment(self, encoder_ids, decoder_ids):
        """The last decoder block's cross-attention averaged over heads (`attention_weights`)."""
        return self.attention_weights({"encoder_inputs": encoder_ids, "decoder_inputs": decoder_ids})

    def start_decoding(self, encoder_ids, max_length, copies):
        """Encodes each source once and projects its cross-attention keys and values once per block: the
        `copies` rows (beams) of a source read them together (`decoding_shares_context`)."""
        config = self._config
        cache = _empty_cache(
            ops.shape(encoder_ids)[0] * copies,
            config["num_layers"],
            max_length,
            config["num_heads"],
            config["hidden_dim"],
            self.target_embedding.compute_dtype,
        )
        encoder_outputs, encoder_mask = self.encode(encoder_ids)
        cross_caches = tuple(block.cross_attention.key_value_cache(encoder_outputs) for block in self.decoder_blocks)
        return cache, (encoder_outputs, encoder_mask, cross_caches)

    def decoding_step(self, ids, cache, index, context, cache_rows=None, copies=1, weights=None):
        encoder_outputs, encoder_mask, cross_caches = context
        return _cached_decoder_step(
            self.target_embedding,
            self.decoder_blocks,
            self.decoder_norm,
            self.head,
            ids,
            cache,
            index,
            cache_rows,
            weights,
            cross_caches,
            encoder_outputs=encoder_outputs,
            encoder_padding_mask=encoder_mask,
            rows_per_source=copies,
        )


transformer_seq2seq = (
    TransformerSeq2Seq  # the builder is the class: `transformer_seq2seq(...)` returns a `TransformerSeq2Seq`
)


def transformer_classifier(
    vocabulary_size,
    num_classes,
    sequence_length,
    num_layers=2,
    hidden_dim=256,
    num_heads=4,
    intermediate_dim=1024,
    dropout=0.1,
    pooling="mean",
    norm_first=True,
    positional="learned",
):
    """Encoder-only seq2vec: ids `(B, T)` -> class logits `(B, num_classes)`.

    Token + position embedding, `num_layers` `TransformerEncoderBlock`s with padding
    masks from id 0, then `pooling="mean"` over the real tokens or `"first"` (put a
    `[CLS]`-style id first), and a linear layer. The logits are float32.
    """
    owner = "transformer_classifier"
    _check_sizes(
        owner,
        num_heads,
        hidden_dim,
        vocabulary_size=vocabulary_size,
        num_classes=num_classes,
        sequence_length=sequence_length,
        num_layers=num_layers,
        intermediate_dim=intermediate_dim,
    )
    v.check_choice(owner, "pooling", pooling, ("mean", "first"))
    v.check_choice(owner, "positional", positional, POSITIONAL_KINDS)
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    embedding = TokenAndPositionEmbedding(
        vocabulary_size, sequence_length, hidden_dim, positional=positional, name="token_embedding"
    )
    blocks, final_norm = _stack(
        TransformerEncoderBlock, "encoder", num_layers, num_heads, intermediate_dim, dropout, norm_first
    )
    h = _stack_features(token_ids, embedding, blocks, final_norm, dropout)
    h = SequencePooling(pooling, name=f"{pooling}_pooling")(h)
    h = Dropout(dropout, name="pooled_dropout")(h)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(h)
    return ArrayFeedModel(token_ids, logits, name=owner)


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerMLM(ConfigFromArguments, ArrayFeedModel):
    """BERT-style encoder-only masked language model (Devlin et al., 2019): ids `(B, T)` -> logits `(B, T, V)`.

    Token + position embedding, `num_layers` bidirectional `TransformerEncoderBlock`s
    (id 0 is padding, masked out of attention), a final LayerNorm (pre-norm stacks
    need it) and a float32 projection to the vocabulary, tied to the token embedding
    (`h @ E^T + b`, see `TiedLogits`) when `tie_embeddings`. It is trained on BERT's
    masked-LM (fill-in-the-blank) task: the inputs are sequences with some ids replaced
    (by `keras_seq.data.TokenMasker`, whose labels are 0 except at the replaced
    positions) and the loss counts only those positions, e.g.
    `LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=0)`. The mask id is an
    ordinary id of the vocabulary.

    `keras_seq.models.transformer_mlm` is this class.

    References:
        Devlin et al., 2019, "BERT: pre-training of deep bidirectional transformers
        for language understanding", section 3.1.
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        num_layers=4,
        hidden_dim=256,
        num_heads=4,
        intermediate_dim=1024,
        dropout=0.1,
        norm_first=True,
        positional="learned",
        tie_embeddings=False,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        kwargs.setdefault("name", "transformer_mlm")
        token_ids, logits, parts = _one_stack("transformer_mlm", TransformerEncoderBlock, "encoder", True, **config)
        super().__init__(token_ids, logits, **kwargs)
        keep_parts(self, config, **parts)


transformer_mlm = TransformerMLM  # the builder is the class: `transformer_mlm(...)` returns a `TransformerMLM`

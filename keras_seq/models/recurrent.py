"""Recurrent task models (Murphy, 2022, sec. 15.2): seq2vec classifier, aligned tagger, vec2seq LM.

Each builder returns a functional `keras.Model` on integer ids `(B, T)` with 0 as
padding. The classifier, the tagger and the encoders embed with `mask_zero=True`, so
the mask flows through their recurrent layers and right-padded batches give the states
of unpadded runs; the causal parts (`rnn_lm`, the `rnn_seq2seq` decoder) run unmasked
and carry the mask on their logits (`keras_seq.layers.masking.PaddingMaskFromIds`).
"""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq.layers.alignment_attention import ATTENTIONS, make_attention
from keras_seq.layers.dropout import Dropout
from keras_seq.layers.embedding import ScaledEmbedding, TiedLogits
from keras_seq.layers.input_feeding import InputFeedingDecoder
from keras_seq.layers.masking import PaddingMaskFromIds
from keras_seq.layers.pooling import SequencePooling
from keras_seq.layers.positionwise import ConcatenateCondition, PositionwiseDense
from keras_seq.layers.recurrent import CELLS, recurrent_layer, state_count
from keras_seq.models.config import constructor_arguments, keep_parts
from keras_seq.models.generative import GenerativeModel
from keras_seq.models.keras_workarounds import ArrayFeedModel


def _check_common(builder, vocabulary_size, embedding_dim, units, cell, num_layers):
    v.check_positive_int(builder, "vocabulary_size", vocabulary_size)
    v.check_positive_int(builder, "embedding_dim", embedding_dim)
    v.check_positive_int(builder, "units", units)
    v.check_positive_int(builder, "num_layers", num_layers)
    v.check_choice(builder, "cell", cell, CELLS)


def _encode(token_ids, vocabulary_size, embedding_dim, units, cell, bidirectional, num_layers, last_sequences):
    """Embedding, then `num_layers` (bi)directional recurrent layers (a deep RNN, Murphy, 2022, eq. 15.12)."""
    h = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True, name="embedding")(token_ids)
    for index in range(num_layers):
        sequences = last_sequences or index < num_layers - 1
        layer = recurrent_layer(cell, units, return_sequences=sequences, name=f"{cell}_{index}")
        if bidirectional:
            layer = keras.layers.Bidirectional(layer, name=f"bidirectional_{index}")
        h = layer(h)
    return h


def rnn_classifier(
    vocabulary_size,
    num_classes,
    embedding_dim=128,
    units=128,
    cell="lstm",
    bidirectional=True,
    pooling="mean",
    num_layers=1,
):
    """Seq2vec: ids `(B, T)` -> class logits `(B, num_classes)` (Murphy, 2022, sec. 15.2.2).

    `h_t = [h_t->, h_t<-]` from a bidirectional RNN, `h_bar = mean_t h_t` over the
    real tokens (`pooling="mean"`) or the final states (`pooling="last"`: the
    forward state at the last real token and the backward state at the first), then
    `y_hat = softmax(W h_bar)` (the model returns the logits `W h_bar`).

    Args:
        vocabulary_size: ids in `[0, vocabulary_size)`, 0 = padding.
        num_classes: number of classes C.
        embedding_dim, units: embedding and recurrent widths.
        cell: one of `rnn`, `gru`, `lstm`, `peephole_lstm`, `coupled_lstm`.
        bidirectional: read the sequence both ways.
        pooling: `"mean"` or `"last"`.
        num_layers: stacked recurrent layers.
    """
    builder = "rnn_classifier"
    _check_common(builder, vocabulary_size, embedding_dim, units, cell, num_layers)
    v.check_positive_int(builder, "num_classes", num_classes)
    v.check_choice(builder, "pooling", pooling, ("mean", "last"))
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    h = _encode(token_ids, vocabulary_size, embedding_dim, units, cell, bidirectional, num_layers, pooling == "mean")
    if pooling == "mean":
        h = SequencePooling("mean", name="mean_pooling")(h)
    logits = keras.layers.Dense(num_classes, name="logits")(h)
    return ArrayFeedModel(token_ids, logits, name=builder)


def rnn_tagger(vocabulary_size, num_tags, embedding_dim=128, units=128, cell="lstm", bidirectional=True, num_layers=1):
    """Aligned seq2seq: ids `(B, T)` -> one tag's logits per token `(B, T, num_tags)` (Murphy, 2022, sec. 15.2.3.1).

    `p(y_t | x_{1:T})` from the (bidirectional) state at t. Arguments as
    `rnn_classifier`; the output keeps the padding mask, so Keras losses and
    metrics skip padded positions.
    """
    builder = "rnn_tagger"
    _check_common(builder, vocabulary_size, embedding_dim, units, cell, num_layers)
    v.check_positive_int(builder, "num_tags", num_tags)
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    h = _encode(token_ids, vocabulary_size, embedding_dim, units, cell, bidirectional, num_layers, True)
    logits = PositionwiseDense(num_tags, name="logits")(h)
    return ArrayFeedModel(token_ids, logits, name=builder)


def _step_loop(step, x, states):
    """`step(x_t, states) -> (output, states)` over the `n` steps of `x (B, n, D)`.

    Decoding calls it with the prompt once, then with one token per step.
    """
    outputs = []
    for t in range(x.shape[1]):
        output, states = step(x[:, t], states)
        outputs.append(output)
    return ops.stack(outputs, axis=1), list(states)


@keras.saving.register_keras_serializable(package="keras_seq")
class RNNLM(GenerativeModel):
    """Recurrent next-token language model (vec2seq, Murphy, 2022, sec. 15.2.1; Mikolov et al., 2010).

    `x_t = E y_{t-1}`, `h_t = f(h_{t-1}, x_t)` through `num_layers` stacked
    recurrent layers, `o_t = W_ho h_t + b_o` (the logits). With `condition_dim`,
    every step also sees a fixed vector x (e.g. image features for a caption model):
    `h_t = phi(W_xh [x; y_{t-1}] + W_hh h_{t-1})` (Murphy, 2022, eq. 15.5), and the inputs are
    `{"token_ids": (B, T), "condition": (B, condition_dim)}`.

    `generate` carries the recurrent states as its cache `(B, layers, states, units)`:
    each new token costs one cell step. With `stateful=True` (and a fixed
    `batch_size`) the states carry over between batches, for truncated
    backpropagation through time over consecutive windows (see
    `keras_seq.data.tbptt_windows`).

    Padding (id 0) goes at the end of a sequence. The recurrence then needs no mask:
    a position only sees the positions before it, all real, so the logits of real
    tokens are those of the unpadded sequence; the padding mask rides on the logits
    instead, so Keras losses and metrics skip padded positions. Without a mask the
    recurrent layers keep their fused kernels (cuDNN on a GPU; Keras' torch backend
    drops to a per-step Python loop for any masked LSTM or GRU). With `stateful=True`
    the mask still reaches the recurrence, so a carried state stops at the last
    real token.

    `keras_seq.models.rnn_lm` is this class.
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_dim=64,
        units=256,
        cell="lstm",
        num_layers=1,
        condition_dim=None,
        stateful=False,
        batch_size=None,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        kwargs.setdefault("name", "rnn_lm")
        owner = "rnn_lm"
        _check_common(owner, vocabulary_size, embedding_dim, units, cell, num_layers)
        if condition_dim is not None:
            v.check_positive_int(owner, "condition_dim", condition_dim)
        if stateful:
            v.check_positive_int(owner, "batch_size (needed when stateful)", batch_size)
        # Unmasked recurrence unless stateful (see the class docstring): the fused kernels stay usable.
        embedding = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=stateful, name="embedding")
        layers = [
            recurrent_layer(cell, units, return_sequences=True, stateful=stateful, name=f"{cell}_{index}")
            for index in range(num_layers)
        ]
        head = PositionwiseDense(vocabulary_size, dtype="float32", name="logits")
        token_ids = keras.Input((None,), batch_size=batch_size, dtype="int32", name="token_ids")
        inputs, h = token_ids, embedding(token_ids)
        condition_layer = None
        if condition_dim is not None:
            condition = keras.Input((condition_dim,), batch_size=batch_size, name="condition")
            condition_layer = ConcatenateCondition(name="concatenate_condition")
            inputs, h = {"token_ids": token_ids, "condition": condition}, condition_layer(h, condition)
        for layer in layers:
            h = layer(h)
        logits = head(h)
        if not stateful:
            logits = PaddingMaskFromIds(dtype="float32", name="padding_mask")(token_ids, logits)
        super().__init__(inputs, logits, **kwargs)
        keep_parts(
            self, config, embedding=embedding, recurrent_layers=layers, head=head, condition_layer=condition_layer
        )

    @property
    def decoding_vocabulary_size(self):
        return self._config["vocabulary_size"]

    def decoding_input_ids(self, inputs):
        if self.condition_layer is None:
            return inputs
        if not isinstance(inputs, dict) or set(inputs) != {"token_ids", "condition"}:
            v.fail("RNNLM.generate", "inputs", 'a dict with "token_ids" and "condition"', type(inputs).__name__)
        return inputs["token_ids"]

    def start_decoding(self, inputs, max_length, copies):
        """Zero recurrent states `(B * copies, layers, states, units)`; the context is the condition, repeated for
        the `copies` rows of each input row (None without one)."""
        config = self._config
        rows = ops.shape(self.decoding_input_ids(inputs))[0] * copies
        states = (rows, config["num_layers"], state_count(config["cell"]), config["units"])
        condition = None if self.condition_layer is None else self._repeated(inputs["condition"], copies)
        return ops.zeros(states, self.embedding.compute_dtype), condition

    def decoding_step(self, ids, cache, index, condition, cache_rows=None, copies=1, weights=None):
        x = self.embedding(ids)
        if condition is not None:
            x = self.condition_layer(x, condition)
        layer_states = []
        for layer_index, layer in enumerate(self.recurrent_layers):
            x, states = _step_loop(layer.cell, x, list(ops.unstack(cache[:, layer_index], axis=1)))
            layer_states.append(ops.stack(states, axis=1))
        return self.head(x), ops.stack(layer_states, axis=1)


rnn_lm = RNNLM  # the builder is the class: `rnn_lm(...)` returns a `RNNLM`


def _check_seq2seq_arguments(
    source_vocabulary_size,
    target_vocabulary_size,
    embedding_dim,
    units,
    cell,
    attention,
    bidirectional_encoder,
    input_feeding,
    dropout,
    tie_embeddings,
    share_embeddings,
):
    owner = "rnn_seq2seq"
    _check_common(owner, source_vocabulary_size, embedding_dim, units, cell, 1)
    v.check_positive_int(owner, "target_vocabulary_size", target_vocabulary_size)
    v.check_probability(owner, "dropout", dropout)
    if tie_embeddings and units != embedding_dim:
        v.fail(
            owner,
            "tie_embeddings",
            f"units == embedding_dim (the output layer reuses the {embedding_dim}-wide embeddings)",
            f"True with units={units}",
        )
    if share_embeddings and source_vocabulary_size != target_vocabulary_size:
        v.fail(
            owner,
            "share_embeddings",
            "equal source and target vocabulary sizes (one joint vocabulary)",
            f"True with {source_vocabulary_size} and {target_vocabulary_size}",
        )
    v.check_choice(owner, "attention", attention, (*ATTENTIONS, None))
    if input_feeding and attention is None:
        v.fail(owner, "attention", f"one of {ATTENTIONS} when input_feeding=True", "None")
    if attention == "luong_dot" and bidirectional_encoder:
        v.fail(
            owner,
            "bidirectional_encoder",
            "False with attention='luong_dot' (the dot score needs keys as wide as the decoder state)",
            True,
        )


@keras.saving.register_keras_serializable(package="keras_seq")
class RNNSeq2Seq(GenerativeModel):
    """Attentional RNN encoder-decoder (Bahdanau et al., 2015, sec. 3; Luong et al., 2015, sec. 3): unaligned seq2seq.

    Inputs `{"encoder_inputs": (B, S), "decoder_inputs": (B, T)}` -> logits `(B, T, V)`.

    * Encoder: embedding and a (bidirectional, Bahdanau et al., sec. 3.2) recurrent layer giving the
      annotations `h_j = [h_j->; h_j<-]`; its final states, joined and passed through
      `tanh(W [fwd; bwd])`, start the decoder.
    * Decoder: a recurrent layer over the target embeddings (teacher forcing), so
      training runs the fused Keras RNN kernels. Each decoder state `s_i` queries the
      annotations with `BahdanauAttention` (`e_ij = v^T tanh(W s_i + U h_j)`, Bahdanau
      et al., app. A.1.2) or `LuongAttention("general")`; the context `c_i = sum_j alpha_ij h_j`
      (Bahdanau et al.'s eq. 5) and `s_i` give the attentional vector `W_c [c_i; s_i]`, then the
      logits (Luong et al., 2015). The score thus uses the current state s_i where
      Bahdanau et al. use s_{i-1}: the "attention after recurrence" arrangement that keeps
      the decoder a plain, fused RNN. `luong_dot` and `luong_concat` score with Luong et al.'s `dot` and
      `concat` forms (`dot` needs keys as wide as the state: `bidirectional_encoder=False`).
      With `attention=None` the decoder sees the source only through its initial state
      (the plain encoder-decoder of Sutskever et al., 2014).
    * Two departures from the papers keep the attention trainable with Adam on real
      vocabularies. The attentional vector is linear, `W_c [c_i; s_i]`, where Luong et
      al. (eq. 5) apply tanh: under Adam's first steps that layer saturates (every unit
      at +-1 for every input) while it fits the target's word frequencies, no gradient
      passes it, and the model stays a unigram model whatever attention it has. The
      embeddings start at unit variance (`N(0, 1)`, as PyTorch's `nn.Embedding`) rather
      than Keras' uniform +-0.05, so the annotations carry the words from the start.
    * `input_feeding=True` gives Bahdanau et al.'s own decoder (sec. 3.1, eq. 5-6, app. A.1.2)
      exactly (`InputFeedingDecoder`): the score uses the previous state s_{i-1}
      and the context enters the recurrence, `s_i = f(s_{i-1}, y_{i-1}, c_i)`; the
      readout is the same `W_c [c_i; s_i]`. It runs step by step (no fused
      kernel can compute it) and needs an `attention`.
    * `dropout` drops units of the embeddings, the annotations and the decoder states
      while training: the non-recurrent connections only (Zaremba et al., 2014, sec. 3),
      so the recurrent layers keep their fused kernels.
    * `tie_embeddings` makes the output layer `s E^T + b` reuse the target embedding `E`
      (Press & Wolf, 2017; needs `units == embedding_dim`); `share_embeddings` gives
      source and target one table (a joint vocabulary). Both: three-way tying, `2 V D`
      fewer parameters; a tied table is a `ScaledEmbedding` (see `_embeddings_and_head`).
    * Padding is id 0. The source mask reaches the encoder and the attention (no
      weight on padded source positions). Target padding goes at the end, where no
      real position can see it, so the decoder runs unmasked and keeps the fused
      kernels (cuDNN; torch's masked LSTM/GRU is a per-step Python loop); the target
      mask rides on the logits, so losses and metrics skip padded positions.

    `generate(encoder_ids, max_length, start_id=1)` encodes once and steps the
    decoder cell with its states as the cache. `attention_weights(inputs)` returns
    the `(B, T, S)` weights for plotting (e.g. of a generated translation fed back).

    `keras_seq.models.rnn_seq2seq` is this class.
    """

    _inputs_are_prompts = False

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        embedding_dim=256,
        units=256,
        cell="gru",
        attention="bahdanau",
        bidirectional_encoder=True,
        input_feeding=False,
        dropout=0.0,
        tie_embeddings=False,
        share_embeddings=False,
        **kwargs,
    ):
        config = constructor_arguments(locals())
        kwargs.setdefault("name", "rnn_seq2seq")
        _check_seq2seq_arguments(**config)
        source_embedding, target_embedding, head = self._embeddings_and_head(**config)
        encoder = recurrent_layer(cell, units, return_sequences=True, return_state=True, name="encoder")
        if bidirectional_encoder:
            encoder = keras.layers.Bidirectional(encoder, name="bidirectional_encoder")
        count = state_count(cell)
        bridges = (
            [keras.layers.Dense(units, activation="tanh", name=f"bridge_{i}") for i in range(count)]
            if bidirectional_encoder
            else []
        )
        if input_feeding:
            decoder = InputFeedingDecoder(cell, units, attention, name="decoder")
            attention_layer = decoder.attention
        else:
            decoder = recurrent_layer(cell, units, return_sequences=True, name="decoder")
            attention_layer = make_attention(attention, units) if attention else None
        combine = PositionwiseDense(units, name="attentional_state") if attention else None

        drop = Dropout(dropout, name="dropout")

        encoder_ids = keras.Input((None,), dtype="int32", name="encoder_inputs")
        decoder_ids = keras.Input((None,), dtype="int32", name="decoder_inputs")
        source_mask = ops.not_equal(encoder_ids, 0)
        annotations, *final_states = encoder(drop(source_embedding(encoder_ids)), mask=source_mask)
        annotations = drop(annotations)
        initial_states = self._bridge(bridges, final_states)
        if input_feeding:
            decoder_states, contexts, weights = decoder(
                drop(target_embedding(decoder_ids)), annotations, initial_states, source_mask
            )
            logits = self._attentional_logits(combine, head, contexts, drop(decoder_states))
        else:
            decoder_states = decoder(drop(target_embedding(decoder_ids)), initial_state=initial_states)
            logits, weights = self._readout(
                attention_layer, combine, head, drop(decoder_states), annotations, source_mask
            )
        logits = PaddingMaskFromIds(dtype="float32", name="padding_mask")(decoder_ids, logits)
        inputs = {"encoder_inputs": encoder_ids, "decoder_inputs": decoder_ids}
        super().__init__(inputs, logits, **kwargs)

        keep_parts(
            self,
            config,
            source_embedding=source_embedding,
            target_embedding=target_embedding,
            encoder=encoder,
            bridges=bridges,
            decoder=decoder,
            attention_layer=attention_layer,
            combine=combine,
            head=head,
        )
        self._weights_model = None if weights is None else keras.Model(inputs, weights)

    @staticmethod
    def _embeddings_and_head(
        source_vocabulary_size, target_vocabulary_size, embedding_dim, tie_embeddings, share_embeddings, **config
    ):
        """Source and target embeddings (one table when shared) and the logits layer (tied: their table).

        No `mask_zero`: the encoder gets the source mask explicitly and the decoder runs
        unmasked (its padding is trailing, see the class docstring), so one table can
        serve both. Untied tables start at unit variance; a tied one is a `ScaledEmbedding`
        (N(0, 1/D) times sqrt(D)), which enters at unit variance as well and gives
        logits `s E^T` at the scale of `s`.
        """
        if tie_embeddings:
            table = lambda size, name: ScaledEmbedding(size, embedding_dim, name=name)
        else:
            unit_variance = keras.initializers.RandomNormal(stddev=1.0)
            table = lambda size, name: keras.layers.Embedding(
                size, embedding_dim, embeddings_initializer=unit_variance, name=name
            )
        source = table(source_vocabulary_size, "source_embedding")
        target = source if share_embeddings else table(target_vocabulary_size, "target_embedding")
        head = (
            TiedLogits(target, name="logits")
            if tie_embeddings
            else PositionwiseDense(target_vocabulary_size, dtype="float32", name="logits")
        )
        return source, target, head

    @staticmethod
    def _bridge(bridges, final_states):
        """Decoder initial states: `tanh(W [fwd; bwd])` per state for a bidirectional encoder."""
        if not bridges:
            return final_states
        half = len(final_states) // 2
        return [
            bridge(ops.concatenate([f, b], axis=-1))
            for bridge, f, b in zip(bridges, final_states[:half], final_states[half:])
        ]

    @staticmethod
    def _readout(attention_layer, combine, head, states, annotations, mask, head_weights=None, projected_keys=None):
        """Logits from decoder states, through attention when there is one (weights or None). A decoding passes
        its step weights (`decoding_step_weights`) and the attention's `project_keys(annotations)`, made once."""
        if attention_layer is None:
            return head(states, **(head_weights or {})), None
        context, weights = attention_layer(
            states, annotations, mask=mask, return_attention_scores=True, projected_keys=projected_keys
        )
        return RNNSeq2Seq._attentional_logits(combine, head, context, states, head_weights), weights

    @staticmethod
    def _attentional_logits(combine, head, context, states, head_weights=None):
        """Logits of the attentional vector `W_c [c; s]` (Luong et al., 2015, eq. 5, without its tanh)."""
        return head(combine(ops.concatenate([context, states], axis=-1)), **(head_weights or {}))

    @property
    def decoding_vocabulary_size(self):
        return self._config["target_vocabulary_size"]

    @property
    def input_vocabulary_size(self):
        return self._config["source_vocabulary_size"]

    def attention_weights(self, inputs):
        """Attention weights `(B, T, S)` of the decoder inputs over the source (teacher forcing)."""
        if self._weights_model is None:
            v.fail("RNNSeq2Seq.attention_weights", "model", "attention='bahdanau' or 'luong'", "attention=None")
        return self._weights_model(inputs)

    def decoding_alignment(self, encoder_ids, decoder_ids):
        """The attention's weights (`attention_weights`), or None without attention."""
        if self._weights_model is None:
            return None
        return self.attention_weights({"encoder_inputs": encoder_ids, "decoder_inputs": decoder_ids})

    def start_decoding(self, encoder_ids, max_length, copies):
        """Encodes each source once, and projects its annotations for the attention's scores once (`U_a h_j`),
        then repeats them and its first states (the cache) for its `copies` rows (beams)."""
        mask = ops.not_equal(encoder_ids, 0)
        annotations, *final_states = self.encoder(self.source_embedding(encoder_ids), mask=mask)
        cache = ops.stack(self._bridge(self.bridges, final_states), axis=1)
        keys = () if self.attention_layer is None else (self.attention_layer.project_keys(annotations),)
        cache, annotations, mask, keys = self._repeated((cache, annotations, mask, keys), copies)
        return cache, (annotations, mask, *keys)

    def decoding_step(self, ids, cache, index, context, cache_rows=None, copies=1, weights=None):
        annotations, mask, *projected = context
        keys = projected[0] if projected else None  # the attention's projected keys, when it has an attention
        states = list(ops.unstack(cache, axis=1))
        if self._config["input_feeding"]:

            def feed(y_previous, states):
                output, states, step_context, _ = self.decoder.step(y_previous, states, annotations, mask, keys)
                return self._attentional_logits(self.combine, self.head, step_context, output, weights), states

            logits, states = _step_loop(feed, self.target_embedding(ids), states)
            return logits, ops.stack(states, axis=1)
        states, new_states = _step_loop(self.decoder.cell, self.target_embedding(ids), states)
        logits, _ = self._readout(
            self.attention_layer, self.combine, self.head, states, annotations, mask, weights, keys
        )
        return logits, ops.stack(new_states, axis=1)


rnn_seq2seq = RNNSeq2Seq  # the builder is the class: `rnn_seq2seq(...)` returns a `RNNSeq2Seq`

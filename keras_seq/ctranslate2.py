"""Convert a trained `TransformerSeq2Seq` into a CTranslate2 model, to serve the same weights there.

CTranslate2 (https://opennmt.net/CTranslate2/) is a C++ inference engine for Transformer
translation models: batch reordering, no padding computation, int8 weights. It loads a
folder holding its own weights file and vocabularies; a converter fills its Python
model specification, `ctranslate2.specs.TransformerSpec`, with the trained weights and
saves it ("Add a new converter", https://opennmt.net/CTranslate2/conversion.html).
`export_ctranslate2` is that converter for keras_seq's encoder-decoder Transformer:

    from keras_seq.ctranslate2 import export_ctranslate2
    export_ctranslate2(model, vocab["source"], vocab["target"], "run/ctranslate2")

    import ctranslate2, sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file="run/ctranslate2/sentencepiece.model")
    translator = ctranslate2.Translator("run/ctranslate2")
    result = translator.translate_batch(
        [sp.encode("Open the file.", out_type=str)], beam_size=1, min_decoding_length=0,
        suppress_sequences=[["<pad>"]], max_input_length=source_length, max_decoding_length=target_length - 1)
    sp.decode(result[0].hypotheses[0])

With those options CTranslate2's greedy search gives the ids of
`model.generate(sources, target_length, strategy="greedy", end_id=2)`: keras_seq never
generates id 0 (padding), lets a translation end at its first step, and counts the
start id in `max_length`. The two lengths are the model's `source_length` and
`target_length`, its number of positions: CTranslate2 raises an error rather than
read past them. Its beam search ranks hypotheses by `log P / length ** length_penalty`,
not by GNMT's penalty (`keras_seq.decoding.gnmt_length_penalty`), so beam outputs can
differ.

Where the two Transformers differ, the converter writes keras_seq's computation out:
keras_seq's sinusoids interleave sin and cos from position 0 (Vaswani et al., 2017,
sec. 3.5) while CTranslate2's built-in ones are concatenated halves from position 1
with another frequency step, so the position table always goes in explicitly; the
layer-norm epsilon is written into the model's config (CTranslate2's default is 1e-5
for a norm with a bias, 1e-6 otherwise). Token embeddings scaled by sqrt(D), pre- or
post-norm blocks, the ReLU (or GELU, SiLU, tanh, sigmoid) feed-forward, shared source
and target embeddings and an output layer tied to them are all CTranslate2's own
options; shared or tied matrices are stored once.
"""

import collections
import json
import math
import os

import keras
import numpy as np

from keras_seq import _atomic as atomic
from keras_seq import _validation as v

OWNER = "export_ctranslate2"
# keras_seq.data.text's reserved ids of start, end and unknown, written out: importing it loads TensorFlow.
START, END, UNKNOWN = 1, 2, 3
# Keras activations the feed-forward may use -> the name of CTranslate2's `Activation` member.
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH", "swish": "SWISH", "tanh": "Tanh", "sigmoid": "Sigmoid"}


def _import_ctranslate2():
    try:
        import ctranslate2
    except ImportError as error:
        raise ImportError(
            f"{OWNER}: needs the ctranslate2 package (pip install 'keras-seq[ctranslate2]'), "
            f"which is not installed ({error})."
        ) from None
    return ctranslate2


# The file of a converted folder telling a server how to tokenize and decode (`keras_seq.serving.ctranslate2_engine`).
SERVING_FILE = "keras_seq_serving.json"


def export_ctranslate2(
    model,
    source_vocabulary,
    target_vocabulary,
    path,
    quantization=None,
    num_beams=4,
    length_penalty=1.0,
    placeholders=False,
):
    """Write `model` (a `TransformerSeq2Seq`) as a CTranslate2 model folder at `path`, its weights unchanged.

    Every weight goes into a `ctranslate2.specs.TransformerSpec`, so the folder serves
    the model's own translations with CTranslate2's `Translator` (see the module
    docstring for the options that match `model.generate`). The vocabularies are
    written as token lists in id order, padding, start, end and unknown included:
    SentencePiece pieces for a subword vocabulary (whose `.model` file is written
    beside them: `sentencepiece.model` when source and target share one, else
    `source.model` and `target.model`), the tokens of a word or character vocabulary.
    `Translator` then takes tokens: split sentences as keras_seq does (lowercased
    first for a `lowercase` vocabulary). The folder appears complete or not at all,
    replacing what was at `path`.

    Args:
        model: the `keras_seq.models.TransformerSeq2Seq` to convert.
        source_vocabulary, target_vocabulary: the model's vocabularies: keras_seq
            vocabularies (`SubwordVocabulary`, `data.text.Vocabulary`) or lists of
            token strings by id; ids 1, 2 and 3 are start, end and unknown.
        path: the folder to write.
        quantization: None (float32), or a CTranslate2 weight type: `int8`,
            `int8_float32`, `int8_float16`, `int8_bfloat16`, `int16`, `float16`,
            `bfloat16`, `float32` (https://opennmt.net/CTranslate2/quantization.html).
        num_beams, length_penalty: the beam size and CTranslate2 length penalty
            (`log P / length ** length_penalty`) a server of the folder decodes
            with by default, written with the model's lengths and each side's lowercasing to
            `SERVING_FILE` (`python -m recipes.serve PATH --engine ctranslate2`).
        placeholders: whether the model was trained on `keras_seq.data.placeholders`'
            protected pairs (also written to `SERVING_FILE`: the server then protects and
            restores each sentence's spans as the SavedModel export does).

    Returns:
        `path`.

    Raises:
        ValueError: for a model that is not a `TransformerSeq2Seq` or has a part
            CTranslate2 cannot express (attention or layer-norm variants, other
            activations), vocabularies that do not fit it, or an unknown
            quantization.
        ImportError: when ctranslate2 is not installed.
    """
    from keras_seq.models.transformer import TransformerSeq2Seq

    if not isinstance(model, TransformerSeq2Seq):
        v.fail(OWNER, "model", "a keras_seq TransformerSeq2Seq", type(model).__name__)
    ctranslate2 = _import_ctranslate2()
    accepted = ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES
    if quantization is not None and quantization not in accepted:
        v.fail(OWNER, "quantization", f"None or one of {list(accepted)}", repr(quantization))
    # The vocabularies the model's decoding reads (`keras_seq.decoding_contract.Decodable`): its source's, its output's.
    source_tokens = _tokens("source_vocabulary", source_vocabulary, model.input_vocabulary_size)
    target_tokens = _tokens("target_vocabulary", target_vocabulary, model.decoding_vocabulary_size)
    if source_tokens[UNKNOWN] != target_tokens[UNKNOWN]:
        v.fail(
            OWNER,
            "target_vocabulary",
            f"the unknown token of source_vocabulary ({source_tokens[UNKNOWN]!r}) at id "
            f"{UNKNOWN} (CTranslate2 has one unknown token)",
            repr(target_tokens[UNKNOWN]),
        )

    v.check_positive_int(OWNER, "num_beams", num_beams)
    if not v.is_number(length_penalty) or not 0 <= length_penalty < math.inf:
        v.fail(OWNER, "length_penalty", "a finite number >= 0", repr(length_penalty))
    spec = _spec(ctranslate2.specs, model)
    spec.config.unk_token = target_tokens[UNKNOWN]
    spec.config.bos_token = spec.config.decoder_start_token = target_tokens[START]
    spec.config.eos_token = target_tokens[END]
    spec.register_source_vocabulary(source_tokens)
    spec.register_target_vocabulary(target_tokens)
    spec.validate()
    spec.optimize(quantization=quantization)
    with atomic.replaced_atomically(path) as temporary:  # complete or absent
        os.makedirs(temporary)
        spec.save(temporary)
        _write_sentencepiece_models(temporary, source_vocabulary, target_vocabulary)
        source_length, max_length = model.decoding_length_limits
        serving = dict(
            source_length=source_length,
            max_length=max_length,
            source_lowercase=bool(getattr(source_vocabulary, "lowercase", False)),
            target_lowercase=bool(getattr(target_vocabulary, "lowercase", False)),
            num_beams=num_beams,
            length_penalty=float(length_penalty),
            placeholders=bool(placeholders),
        )
        with open(os.path.join(temporary, SERVING_FILE), "w", encoding="utf-8") as f:
            json.dump(serving, f, indent=1)
    return path


def _tokens(argument, vocabulary, size):
    """The token strings of `vocabulary` by id, checked against the model's vocabulary size."""
    tokens = getattr(vocabulary, "tokens", vocabulary)
    if isinstance(tokens, str) or not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
        v.fail(OWNER, argument, "a keras_seq vocabulary or a list of token strings", type(vocabulary).__name__)
    if len(tokens) != size:
        v.fail(OWNER, argument, f"{size} tokens (the model's vocabulary size)", f"{len(tokens)} tokens")
    repeated = sorted(token for token, count in collections.Counter(tokens).items() if count > 1)
    if repeated:
        v.fail(
            OWNER, argument, "distinct tokens (CTranslate2 looks tokens up by their text)", f"repeated {repeated[:5]}"
        )
    return list(tokens)


def _write_sentencepiece_models(directory, source_vocabulary, target_vocabulary):
    """The SentencePiece `.model` files of subword vocabularies, so the folder holds its tokenizer."""
    models = {
        name: vocabulary.model
        for name, vocabulary in (("source", source_vocabulary), ("target", target_vocabulary))
        if isinstance(getattr(vocabulary, "model", None), bytes)
    }
    if len(models) == 2 and models["source"] == models["target"]:
        models = {"sentencepiece": models["source"]}
    for name, model in models.items():
        with open(os.path.join(directory, f"{name}.model"), "wb") as f:
            f.write(model)


def _numpy(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), dtype="float32")


def _spec(specs, model):
    """A `TransformerSpec` holding every weight of `model`, after checking CTranslate2 can compute it."""
    config = model.get_config()
    blocks = [*model.encoder_blocks, *model.decoder_blocks]
    block = blocks[0]
    for other in blocks[1:]:
        for attribute in ("norm_first", "layer_norm_epsilon"):
            if getattr(other, attribute) != getattr(block, attribute):
                v.fail(
                    OWNER,
                    "model",
                    f"one {attribute} in every block (CTranslate2 has one per model)",
                    f"{getattr(block, attribute)!r} in '{block.name}' and "
                    f"{getattr(other, attribute)!r} in '{other.name}'",
                )
    activation = _activation(specs, blocks)
    spec = specs.TransformerSpec.from_config(
        config["num_layers"],
        config["num_heads"],
        pre_norm=block.norm_first,
        activation=activation,
        alignment_heads=config["num_heads"],  # return_attention: the last block's heads averaged, as keras_seq's
    )
    epsilon = float(block.layer_norm_epsilon)
    spec.config.layer_norm_epsilon = epsilon

    def norm(norm_spec, layer):
        _set_norm(norm_spec, layer, epsilon, config["hidden_dim"])

    for stack_spec, embedding in ((spec.encoder, model.source_embedding), (spec.decoder, model.target_embedding)):
        stack_spec.scale_embeddings = bool(embedding.scale_embeddings)
        stack_spec_embeddings = (
            stack_spec.embeddings[0] if isinstance(stack_spec.embeddings, list) else stack_spec.embeddings
        )
        stack_spec_embeddings.weight = _numpy(embedding.token_embedding.embeddings)
        stack_spec.position_encodings.encodings = _position_table(embedding)
    if block.norm_first:  # post-norm stacks have no final norm
        norm(spec.encoder.layer_norm, model.encoder_norm)
        norm(spec.decoder.layer_norm, model.decoder_norm)
    for layer_spec, encoder_block in zip(spec.encoder.layer, model.encoder_blocks):
        _set_attention(layer_spec.self_attention, encoder_block.self_attention, encoder_block.self_attention_norm, norm)
        _set_feed_forward(layer_spec.ffn, encoder_block, norm)
    for layer_spec, decoder_block in zip(spec.decoder.layer, model.decoder_blocks):
        _set_attention(layer_spec.self_attention, decoder_block.self_attention, decoder_block.self_attention_norm, norm)
        _set_attention(
            layer_spec.attention,
            decoder_block.cross_attention,
            decoder_block.cross_attention_norm,
            norm,
            self_attention=False,
        )
        _set_feed_forward(layer_spec.ffn, decoder_block, norm)
    _set_output_layer(spec.decoder.projection, model)
    return spec


def _activation_name(function):
    name = keras.activations.serialize(function)
    return name if isinstance(name, str) else getattr(function, "__name__", repr(function))


def _activation(specs, blocks):
    """CTranslate2's `Activation` of the blocks' feed-forward activation (one for all)."""
    names = sorted({_activation_name(block.activation) for block in blocks})
    if len(names) != 1 or names[0] not in _ACTIVATIONS:
        v.fail(OWNER, "model", f"one feed-forward activation in every block, one of {sorted(_ACTIVATIONS)}", names)
    return getattr(specs.common_spec.Activation, _ACTIVATIONS[names[0]])


def _position_table(embedding):
    """The `(sequence_length, D)` table keras_seq adds at positions 0, 1, ... (learned or its sinusoids)."""
    from keras_seq.layers.embedding import sinusoidal_position_encoding

    encoding = embedding.position_encoding
    if embedding.positional == "learned":
        return _numpy(encoding.position_embeddings)
    table = sinusoidal_position_encoding(embedding.sequence_length, embedding.embedding_dim, encoding.max_wavelength)
    return _numpy(table)


def _set_norm(norm_spec, norm, epsilon, width):
    """gamma and beta of a `keras.layers.LayerNormalization` (ones and zeros where it has none), for
    CTranslate2's LayerNorm."""
    axis = [norm.axis] if isinstance(norm.axis, int) else list(norm.axis)
    if norm.epsilon != epsilon:
        v.fail(
            OWNER,
            "model",
            f"one layer-norm epsilon ({epsilon:g}, CTranslate2 has one per model)",
            f"epsilon={norm.epsilon:g} in '{norm.name}'",
        )
    if getattr(norm, "rms_scaling", False) or axis not in ([-1], [2]):
        v.fail(
            OWNER,
            "model",
            "layer norms over the feature axis without rms_scaling (CTranslate2's LayerNorm)",
            f"axis={norm.axis!r}, rms_scaling={getattr(norm, 'rms_scaling', False)!r} in '{norm.name}'",
        )
    norm_spec.gamma = _numpy(norm.gamma) if norm.scale else np.ones(width, "float32")
    norm_spec.beta = _numpy(norm.beta) if norm.center else np.zeros(width, "float32")


def _set_linear(linear_spec, kernel, bias):
    """A CTranslate2 `LinearSpec` (weight `(out, in)`) from a Keras kernel `(in, out)` and bias (or None)."""
    linear_spec.weight = np.ascontiguousarray(kernel.T)
    if bias is not None:
        linear_spec.bias = bias


def _set_attention(attention_spec, attention, norm_layer, norm, self_attention=True):
    """The projections of a keras_seq `MultiHeadAttention` and the norm before (pre-norm) or after (post-norm) it.

    Keras kernels `(D, H, d)` become `(D, H*d)` with heads in order, the layout
    CTranslate2 splits into heads; self-attention fuses query, key and value into one
    `(3*H*d, D)` matrix, cross-attention fuses key and value (CTranslate2's layout).
    """
    query_shape = tuple(attention.query_kernel.shape)
    width = query_shape[0]
    same_width = (
        attention.key_kernel.shape[0],
        attention.value_kernel.shape[0],
        attention.output_kernel.shape[-1],
    ) == (width,) * 3
    if attention.num_heads * attention.key_dim != width or attention.value_dim != attention.key_dim or not same_width:
        v.fail(
            OWNER,
            "model",
            "attention with key_dim == value_dim == width / num_heads and width-sized inputs and outputs "
            "(CTranslate2's multi-head attention)",
            f"num_heads={attention.num_heads}, key_dim={attention.key_dim}, "
            f"value_dim={attention.value_dim}, width {width} in '{attention.name}'",
        )
    projections = []
    for name in ("query", "key", "value"):
        kernel = _numpy(getattr(attention, f"{name}_kernel")).reshape(width, -1)
        bias = _numpy(getattr(attention, f"{name}_bias")).reshape(-1) if attention.use_bias else None
        projections.append((kernel, bias))
    fused = projections if self_attention else projections[1:]
    kernel = np.concatenate([k for k, _ in fused], axis=1)
    bias = np.concatenate([b for _, b in fused]) if attention.use_bias else None
    linear = attention_spec.linear
    if self_attention:
        _set_linear(linear[0], kernel, bias)
    else:
        _set_linear(linear[0], *projections[0])
        _set_linear(linear[1], kernel, bias)
    output_bias = _numpy(attention.output_bias) if attention.use_bias else None
    _set_linear(linear[-1], _numpy(attention.output_kernel).reshape(-1, width), output_bias)
    norm(attention_spec.layer_norm, norm_layer)


def _set_feed_forward(ffn_spec, block, norm):
    for linear_spec, dense in (
        (ffn_spec.linear_0, block.feed_forward_inner),
        (ffn_spec.linear_1, block.feed_forward_output),
    ):
        _set_linear(linear_spec, _numpy(dense.kernel), _numpy(dense.bias) if dense.use_bias else None)
    if _activation_name(block.feed_forward_output.activation) != "linear":
        v.fail(
            OWNER,
            "model",
            "a linear second feed-forward layer",
            f"activation {_activation_name(block.feed_forward_output.activation)!r} in '{block.name}'",
        )
    norm(ffn_spec.layer_norm, block.feed_forward_norm)


def _set_output_layer(projection_spec, model):
    """The decoder's projection to the vocabulary: the target embedding (tied, `TiedLogits`) or its own kernel."""
    from keras_seq.layers.embedding import TiedLogits

    head = model.head
    if isinstance(head, TiedLogits):
        projection_spec.weight = _numpy(model.target_embedding.token_embedding.embeddings)
        projection_spec.bias = _numpy(head.bias)
        return
    if _activation_name(head.activation) != "linear":
        v.fail(OWNER, "model", "a linear output layer", f"activation {_activation_name(head.activation)!r}")
    _set_linear(projection_spec, _numpy(head.kernel), _numpy(head.bias) if head.use_bias else None)

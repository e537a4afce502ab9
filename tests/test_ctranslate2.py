"""`keras_seq.ctranslate2.export_ctranslate2`: CTranslate2 serves a converted TransformerSeq2Seq's own outputs.

The greedy translations of the converted model are `model.generate`'s ids, row for row,
and CTranslate2's per-token log-probabilities (`score_batch`) are the model's log-softmax.
The weights are drawn in NumPy from one seed, the same on every backend, at scales where
greedy decoding wanders over several ids and some rows end (random small Transformers
otherwise repeat one id), with no near-tie on the decoded paths.
"""

import json
import os
import sys

import keras
import numpy as np
import pytest
from layer_checks import to_numpy

import keras_seq as ks
from keras_seq import ctranslate2 as converter
from keras_seq.data import text

START, END = text.START, text.END
LENGTHS = [10, 7, 3, 9, 1, 5, 8, 2]  # source lengths of the test batch


@pytest.fixture
def ctranslate2():
    return pytest.importorskip(
        "ctranslate2", reason="ctranslate2 is not installed (pip install 'keras-seq[ctranslate2]')"
    )


def drawn_weights(model, seed=0, kernel_scale=3.0, embedding_scale=0.5, end_bias=0.0):
    """Weights from NumPy (the same on every backend): kernels `kernel_scale / sqrt(fan_in)`, embeddings
    `embedding_scale / sqrt(D)` (unit size once scaled by sqrt(D)) and learned positions `embedding_scale`,
    gains near 1, small biases, `end_bias` more on the end id's logit."""
    rng = np.random.default_rng(seed)
    weights = []
    for weight in model.weights:
        shape = tuple(weight.shape)
        if weight.path.endswith("gamma"):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif weight.path.endswith("position_embeddings"):  # unit size, as the sinusoids
            value = embedding_scale * rng.standard_normal(shape)
        elif "embeddings" in weight.path:
            value = embedding_scale * rng.standard_normal(shape) / np.sqrt(shape[-1])
        elif len(shape) == 1 or weight.path.endswith("_bias"):
            value = 0.1 * rng.standard_normal(shape)
        else:
            value = kernel_scale * rng.standard_normal(shape) / np.sqrt(shape[0])
        if weight.path == "logits/bias":
            value[END] += end_bias
        weights.append(value.astype("float32"))
    model.set_weights(weights)
    return model


def word_tokens(size, pad=""):
    """A word vocabulary's tokens (keras_seq's reserved four, padding as `pad`) then `w4`, `w5`, ..."""
    return [pad, "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(4, size)]


def source_ids(vocabulary_size, seed=1, width=10):
    ids = np.random.default_rng(seed).integers(4, vocabulary_size, size=(len(LENGTHS), width)).astype("int32")
    for row, length in enumerate(LENGTHS):
        ids[row, length:] = 0
    return ids


def as_tokens(ids, tokens):
    return [[tokens[i] for i in row if i] for row in ids]


def subword_vocabulary():
    """A small SentencePiece vocabulary (no byte fallback, so it can be small)."""
    from keras_seq.data.subword import SubwordVocabulary

    texts = [
        "the file cannot be opened",
        "open the settings",
        "le fichier ne peut pas être ouvert",
        "ouvrir les paramètres",
        "save the file as",
        "enregistrer le fichier sous",
    ] * 4
    return SubwordVocabulary.train(texts, 60, byte_fallback=False)


# name -> (model arguments, `drawn_weights` settings, vocabularies): the recipe's model (pre-norm, sinusoids,
# one SentencePiece vocabulary, three-way tying), then the other setting of each option the converter maps. The
# weight settings are ones where greedy decoding is varied and has no near-tie (the least margin between the two
# best logits on the decoded paths is 0.008 to 0.02; float32 rounding moves logits by ~1e-6).
VARIANTS = {
    "prenorm_sinusoidal_shared_tied_subword": (
        dict(share_embeddings=True, tie_embeddings=True),
        dict(seed=2, kernel_scale=3.0, embedding_scale=1.0, end_bias=1.0),
        lambda: [subword_vocabulary()] * 2,
    ),
    "postnorm_sinusoidal_tied_word": (
        dict(norm_first=False, tie_embeddings=True, source_length=12),
        dict(seed=1, kernel_scale=0.7, embedding_scale=1.0, end_bias=1.0),
        lambda: (text.Vocabulary(word_tokens(44)[4:]), word_tokens(52, pad="<blank>")),
    ),
    "prenorm_learned_untied_word": (
        dict(positional="learned"),
        dict(seed=0, kernel_scale=2.0, embedding_scale=1.0),
        lambda: (word_tokens(48), word_tokens(40)),
    ),
}


def built(variant):
    """`(model, source vocabulary, target vocabulary)` of a variant, the model's weights drawn."""
    arguments, weights, vocabularies = VARIANTS[variant]
    source_vocabulary, target_vocabulary = vocabularies()
    options = dict(
        source_length=16,
        target_length=16,
        num_layers=2,
        hidden_dim=32,
        num_heads=4,
        intermediate_dim=48,
        dropout=0.1,
        positional="sinusoidal",
    )
    model = ks.models.transformer_seq2seq(
        len(tokens_of(source_vocabulary)), len(tokens_of(target_vocabulary)), **{**options, **arguments}
    )
    return drawn_weights(model, **weights), source_vocabulary, target_vocabulary


def tokens_of(vocabulary):
    return list(getattr(vocabulary, "tokens", vocabulary))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_converted_model_translates_and_scores_as_the_model(ctranslate2, tmp_path, variant):
    model, source_vocabulary, target_vocabulary = built(variant)
    path = converter.export_ctranslate2(model, source_vocabulary, target_vocabulary, str(tmp_path / "ct2"))
    source_tokens, target_tokens = tokens_of(source_vocabulary), tokens_of(target_vocabulary)
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    assert config["layer_norm_epsilon"] == pytest.approx(1e-5)
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    if variant.endswith("subword"):
        assert os.path.exists(os.path.join(path, "sentencepiece.model"))
    source = source_ids(len(source_tokens))
    max_length = 16
    expected = to_numpy(model.generate(source, max_length, strategy="greedy", end_id=END))
    assert len({tuple(row) for row in expected}) == len(LENGTHS) and (expected == END).any(), expected  # some rows end
    assert np.mean([len(set(row[1:]) - {0, END}) for row in expected]) > 1.5, expected  # not one id repeated

    translator = ctranslate2.Translator(path, intra_threads=1)
    results = translator.translate_batch(
        as_tokens(source, source_tokens),
        beam_size=1,
        max_decoding_length=max_length - 1,
        min_decoding_length=0,
        return_end_token=True,
        suppress_sequences=[[target_tokens[0]]],
    )
    for row, result in zip(expected, results):
        ids = [target_tokens.index(token) for token in result.hypotheses[0]]
        np.testing.assert_array_equal(ids, [i for i in row[1:] if i])

    # Per-token log-probabilities of given targets (each followed by the end token, as score_batch adds it).
    targets = np.random.default_rng(2).integers(4, len(target_tokens), size=(len(LENGTHS), 9)).astype("int32")
    target_lengths = [9, 3, 6, 1, 8, 4, 2, 7]
    decoder_inputs = np.zeros((len(LENGTHS), 10), "int32")
    decoder_inputs[:, 0] = START
    for row, length in enumerate(target_lengths):
        targets[row, length:] = 0
        decoder_inputs[row, 1 : length + 1] = targets[row, :length]
    logits = to_numpy(model({"encoder_inputs": source, "decoder_inputs": decoder_inputs}))
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    scored = translator.score_batch(as_tokens(source, source_tokens), as_tokens(targets, target_tokens))
    for row, (length, result) in enumerate(zip(target_lengths, scored)):
        followed = [*targets[row, :length], END]
        assert result.tokens == [target_tokens[i] for i in followed]
        np.testing.assert_allclose(result.log_probs, log_probs[row, np.arange(length + 1), followed], atol=1e-4)


def test_int8_quantization_writes_a_smaller_model_that_translates(ctranslate2, tmp_path):
    model, source_vocabulary, target_vocabulary = built("prenorm_learned_untied_word")
    float_path = converter.export_ctranslate2(model, source_vocabulary, target_vocabulary, str(tmp_path / "float32"))
    int8_path = converter.export_ctranslate2(
        model, source_vocabulary, target_vocabulary, str(tmp_path / "int8"), quantization="int8"
    )
    size = lambda path: os.path.getsize(os.path.join(path, "model.bin"))
    assert size(int8_path) < 0.6 * size(float_path)
    results = ctranslate2.Translator(int8_path, intra_threads=1).translate_batch(
        as_tokens(source_ids(48), word_tokens(48)), beam_size=1, max_decoding_length=15
    )
    assert all(set(r.hypotheses[0]) <= set(word_tokens(40)) for r in results)


def test_a_new_conversion_replaces_the_folder(ctranslate2, tmp_path):
    model, source_vocabulary, target_vocabulary = built("prenorm_learned_untied_word")
    path = str(tmp_path / "ct2")
    os.makedirs(path)
    with open(os.path.join(path, "stale.txt"), "w") as f:
        f.write("from before")
    converter.export_ctranslate2(model, source_vocabulary, target_vocabulary, path)
    written = ["config.json", converter.SERVING_FILE, "model.bin", "source_vocabulary.json", "target_vocabulary.json"]
    assert sorted(os.listdir(path)) == written


def bad_cases():
    """(name, change(model, source tokens, target tokens) -> export arguments, what the message names)."""

    def block_attribute(name, value):
        def change(model, source, target):
            setattr(model.decoder_blocks[1], name, value)
            return model, source, target

        return change

    def norm_epsilon(model, source, target):
        model.encoder_blocks[0].feed_forward_norm.epsilon = 1e-6
        return model, source, target

    def rms_norm(model, source, target):
        model.decoder_norm.rms_scaling = True
        return model, source, target

    return {
        "not_seq2seq": (
            lambda m, s, t: (ks.models.transformer_lm(20, 8, num_layers=1, hidden_dim=16, num_heads=2), s, t),
            "`model` expected a keras_seq TransformerSeq2Seq, got TransformerLM",
        ),
        "activation": (
            block_attribute("activation", keras.activations.elu),
            "one feed-forward activation in every block",
        ),
        "mixed_norms": (block_attribute("norm_first", False), "one norm_first in every block"),
        "epsilon": (norm_epsilon, "one layer-norm epsilon (1e-05"),
        "rms_norm": (rms_norm, "without rms_scaling"),
        "source_size": (
            lambda m, s, t: (m, s[:-1], t),
            "`source_vocabulary` expected 48 tokens (the model's vocabulary size), got 47",
        ),
        "repeated": (lambda m, s, t: (m, s, t[:-1] + ["w4"]), "distinct tokens"),
        "unknown": (lambda m, s, t: (m, s, t[:3] + ["<oov>"] + t[4:]), "the unknown token of source_vocabulary"),
        "not_tokens": (
            lambda m, s, t: (m, 48, t),
            "`source_vocabulary` expected a keras_seq vocabulary or a list of token strings",
        ),
        "quantization": (lambda m, s, t: (m, s, t), "`quantization` expected None or one of"),
    }


@pytest.mark.parametrize("case", sorted(bad_cases()))
def test_inputs_ctranslate2_cannot_take_raise_value_error(ctranslate2, tmp_path, case):
    change, message = bad_cases()[case]
    model, _, _ = built("prenorm_learned_untied_word")
    arguments = change(model, word_tokens(48), word_tokens(40))
    with pytest.raises(ValueError, match="^export_ctranslate2: ") as raised:
        converter.export_ctranslate2(
            *arguments, str(tmp_path / "ct2"), quantization="int4" if case == "quantization" else None
        )
    assert message in str(raised.value)
    assert not os.path.exists(tmp_path / "ct2")


def test_missing_ctranslate2_says_how_to_install(monkeypatch, tmp_path):
    model, source_vocabulary, target_vocabulary = built("prenorm_learned_untied_word")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` then raises ImportError
    with pytest.raises(
        ImportError,
        match=r"export_ctranslate2: needs the ctranslate2 package \(pip install 'keras-seq\[ctranslate2\]'\)",
    ):
        converter.export_ctranslate2(model, source_vocabulary, target_vocabulary, str(tmp_path / "ct2"))


def test_reserved_ids_are_keras_seqs():
    assert (converter.START, converter.END, converter.UNKNOWN) == (text.START, text.END, text.UNKNOWN)


SERVED = ["the file cannot be opened", "open the settings", "save the file as", "ouvrir les paramètres"]


@pytest.fixture
def served_conversion(ctranslate2, tmp_path):
    """`(model, vocabulary, engine)`: the recipe-like variant converted and loaded by the server's engine."""
    from keras_seq.serving import ctranslate2_engine

    model, vocabulary, _ = built("prenorm_sinusoidal_shared_tied_subword")
    path = converter.export_ctranslate2(
        model, vocabulary, vocabulary, str(tmp_path / "ct2"), num_beams=3, length_penalty=0.6
    )
    return model, vocabulary, ctranslate2_engine.CTranslate2Translator(path, threads=1)


def source_of(vocabulary, sentences, width=16):
    """The sentences' ids as CTranslate2 sees them (SentencePiece pieces looked up in the converted tokens)."""
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(model_proto=vocabulary.model)
    tokens = tokens_of(vocabulary)
    ids = np.zeros((len(sentences), width), "int32")
    for row, sentence in enumerate(sentences):
        found = [tokens.index(piece) for piece in pieces.encode(sentence, out_type=str)][:width]
        ids[row, : len(found)] = found
    return ids, pieces


def numpy_log_prob(model, source_row, written, ended):
    """log P of `written` ids (and the end id when `ended`) given the source, teacher-forced, over ids 1..V-1 (the
    decoding never writes padding, so its probabilities are renormalised without it)."""
    decoder_inputs = np.array([[START, *written]], "int32")
    logits = to_numpy(model({"encoder_inputs": source_row[None], "decoder_inputs": decoder_inputs}))[0]
    logits[:, 0] = -np.inf
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    targets = [*written, END] if ended else list(written)
    return float(sum(log_probs[position, target] for position, target in enumerate(targets)))


def recorded(engine):
    """The `(options, results)` of each `translate_batch` call the engine makes from now on."""
    calls, translate = [], engine.translator.translate_batch

    def translate_batch(source, **options):
        calls.append((options, translate(source, **options)))
        return calls[-1][1]

    engine.translator = type("Recording", (), {"translate_batch": staticmethod(translate_batch)})()
    return calls


def test_the_ctranslate2_engine_answers_generates_translations_with_the_models_log_probabilities(served_conversion):
    """Greedy: `generate`'s translations; beam n-best: each hypothesis' log P teacher-forced in NumPy, its score
    log P over CTranslate2's length normalisation (tokens and end token) ** length_penalty, best first."""
    model, vocabulary, engine = served_conversion
    source, pieces = source_of(vocabulary, SERVED)
    tokens = tokens_of(vocabulary)
    expected = to_numpy(model.generate(source, 16, strategy="greedy", end_id=END))
    answers = engine.run(SERVED, engine.parse_options({"beam_size": 1}))  # the conversion's penalty, 0.6
    for row, ids, answer in zip(source, expected, answers):
        written = [i for i in ids[1:] if i not in (0, END)]
        (best,) = answer["translations"]
        assert best["text"] == pieces.decode([tokens[i] for i in written])
        log_prob, ended = numpy_log_prob(model, row, written, END in ids), int(END in ids)
        np.testing.assert_allclose(best["log_prob"], log_prob, atol=1e-3)
        np.testing.assert_allclose(best["score"], log_prob / (len(written) + ended) ** 0.6, atol=1e-3)
    assert any(END in ids for ids in expected) and not all(END in ids for ids in expected)  # both lengths met

    options = engine.parse_options({"n_best": 3})  # the conversion's own beam size (3) and penalty (0.6)
    assert options.beam_size == 3 and options.length_penalty == pytest.approx(0.6)
    calls = recorded(engine)
    for row, answer, result in zip(source, engine.run(SERVED, options), calls[0][1]):
        hypotheses = answer["translations"]
        assert len(hypotheses) == 3 and [h["score"] for h in hypotheses] == sorted(
            [h["score"] for h in hypotheses], reverse=True
        )
        for hypothesis, pieces_written in zip(hypotheses, result.hypotheses):
            assert hypothesis["text"] == pieces.decode(pieces_written)
            written = [tokens.index(piece) for piece in pieces_written]
            ended = len(written) < 15
            log_prob = numpy_log_prob(model, row, written, ended)
            np.testing.assert_allclose(hypothesis["log_prob"], log_prob, atol=1e-3)
            np.testing.assert_allclose(hypothesis["score"], log_prob / (len(written) + ended) ** 0.6, atol=1e-3)


def test_the_ctranslate2_engine_hands_each_option_to_translate_batch(served_conversion):
    """Each request field reaches `translate_batch` under CTranslate2's name; prefixes are continued."""
    from keras_seq.serving import engines

    _, _, engine = served_conversion
    calls = recorded(engine)
    fields = dict(
        beam_size=1,
        min_length=2,
        max_length=9,
        no_repeat_ngram_size=2,
        repetition_penalty=1.3,
        disable_unk=True,
        sampling_topk=5,
        sampling_topp=0.8,
        sampling_temperature=1.5,
    )
    sentences = [engines.Sentence(s, prefix) for s, prefix in zip(SERVED, ["le fichier", "", "enregistrer", ""])]
    first = engine.run(sentences, engine.parse_options(fields))
    given = calls[0][0]
    # keras_seq's lengths count the start id, CTranslate2's do not
    assert (given["min_decoding_length"], given["max_decoding_length"], given["max_input_length"]) == (1, 8, 16)
    for name in ("no_repeat_ngram_size", "disable_unk", "sampling_topk", "beam_size"):
        assert given[name] == fields[name], name
    for name in ("repetition_penalty", "sampling_topp", "sampling_temperature"):  # as float32 holds them
        assert given[name] == pytest.approx(fields[name], rel=1e-6), name
    assert given["target_prefix"][1] is None and given["target_prefix"][0]
    assert first[0]["translations"][0]["text"].startswith("le fichier")
    assert first[2]["translations"][0]["text"].startswith("enregistrer")


def test_the_ctranslate2_engine_refuses_what_it_cannot_serve(served_conversion, tmp_path):
    from keras_seq.serving import ctranslate2_engine, engines

    _, _, engine = served_conversion
    with pytest.raises(engines.RequestError, match=r"beam_size: expected an integer in \[1, 16\], got 17"):
        engine.parse_options({"beam_size": 17})
    with pytest.raises(engines.RequestError, match=r"max_length: expected an integer in \[2, 16\], got 1"):
        engine.parse_options({"max_length": 1})  # CTranslate2 writes at least one token
    sampled = engine.run(SERVED, engine.parse_options({"sampling_topk": 10**6, "max_length": 2, "min_length": 2}))
    assert all(len(result["translations"]) == 1 for result in sampled)  # a k past the vocabulary: every id
    assert {"max_length_ratio", "seed"} & set(engine.option_fields) == set()  # the server answers them with a 400
    model, source_vocabulary, target_vocabulary = built("prenorm_learned_untied_word")
    words = converter.export_ctranslate2(model, source_vocabulary, target_vocabulary, str(tmp_path / "words"))
    with pytest.raises(ValueError, match="expected a SentencePiece model"):
        ctranslate2_engine.CTranslate2Translator(words)
    os.remove(os.path.join(words, converter.SERVING_FILE))
    with pytest.raises(ValueError, match=f"expected {converter.SERVING_FILE}"):
        ctranslate2_engine.check_folder(words)


def test_a_served_conversions_alignment_is_the_models_cross_attention(ctranslate2, tmp_path):
    """The CTranslate2 engine's `return_alignment`: the last block's cross-attention averaged over heads, as the
    model's `attention_weights` gives it for the same source and translation."""
    from keras_seq.data import text
    from keras_seq.serving import ctranslate2_engine, engines

    model, vocabulary, _ = built("prenorm_sinusoidal_shared_tied_subword")
    path = converter.export_ctranslate2(model, vocabulary, vocabulary, str(tmp_path / "ct2"), num_beams=2)
    engine = ctranslate2_engine.CTranslate2Translator(path, threads=1)
    options = engine.parse_options({"beam_size": 2, "n_best": 2, "return_alignment": True})
    results = engine.run([engines.Sentence(s, "") for s in SERVED], options)
    for sentence, result in zip(SERVED, results):
        assert result["source_tokens"] == vocabulary.split(sentence)[:16]  # cut to the model's 16 positions
        sources = vocabulary.encode([sentence]).to_tensor().numpy()[:, :16]
        for translation in result["translations"]:
            written = [vocabulary.tokens.index(token) for token in translation["target_tokens"]]
            inputs = np.array([[text.START] + written])
            expected = keras.ops.convert_to_numpy(
                model.attention_weights({"encoder_inputs": sources, "decoder_inputs": inputs})
            )[0, : len(written)]
            np.testing.assert_allclose(translation["alignment"], expected, atol=1e-3)

"""`export_translator`: its two signatures decode as `generate` does, whatever the batch around a sentence."""

import keras
import numpy as np
import pytest

import keras_seq as ks
from keras_seq import export
from keras_seq.data import text

pytestmark = [
    pytest.mark.skipif(
        keras.backend.backend() != "tensorflow",
        reason="export_translator writes a TensorFlow SavedModel; other backends export through export_run's "
        "TensorFlow process (tests/recipes/test_recipe_export.py)",
    ),
    pytest.mark.xdist_group("export"),  # one xdist worker: each `translator` fixture is exported once
]
# Sources are padded to 16 ids, short of the models' 20: the padding width must not matter.
SOURCE_LENGTH, MAX_LENGTH = 20, 10
SENTENCES = ["w1 w2 w3", "w4", " ".join(f"w{i % 19 + 1}" for i in range(25)), "w2 w2 w15", "w16 w17 w3 w9 w1"]
MODELS = {
    "transformer": lambda size: ks.models.transformer_seq2seq(
        size,
        size,
        SOURCE_LENGTH,
        MAX_LENGTH,
        num_layers=1,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        dropout=0.0,
    ),
    "rnn_attention": lambda size: ks.models.rnn_seq2seq(size, size, embedding_dim=16, units=16, attention="bahdanau"),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def translator(request, tmp_path_factory):
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    vocabulary = text.Vocabulary([f"w{i}" for i in range(1, 20)])
    model = MODELS[request.param](len(vocabulary))
    exported = {}
    for early_stopping in (False, True):
        path = str(tmp_path_factory.mktemp("export"))
        export.export_translator(
            model,
            vocabulary,
            vocabulary,
            path,
            SOURCE_LENGTH,
            MAX_LENGTH,
            num_beams=3,
            length_penalty=0.6,
            early_stopping=early_stopping,
        )
        exported[early_stopping] = tf.saved_model.load(path)
    return model, vocabulary, exported


def generated(model, vocabulary, sentences, max_length=MAX_LENGTH, **settings):
    ids = vocabulary.encode(sentences)[:, :SOURCE_LENGTH].to_tensor(shape=[None, SOURCE_LENGTH]).numpy()
    best = model.generate(ids, max_length, end_id=text.END, start_id=text.START, **settings)
    return [s.decode() for s in vocabulary.decode(keras.ops.convert_to_numpy(best)).numpy()]


def served(function, sentences):
    import tensorflow as tf

    return [s.decode() for s in function(tf.constant(sentences, tf.string)).numpy()]


@pytest.mark.parametrize("early_stopping", [False, True])
def test_translate_is_generates_beam_search_and_translate_greedy_its_greedy(translator, early_stopping):
    model, vocabulary, exported = translator
    beam = generated(
        model, vocabulary, SENTENCES, strategy="beam", num_beams=3, length_penalty=0.6, early_stopping=early_stopping
    )
    assert served(exported[early_stopping].translate, SENTENCES) == beam
    assert served(exported[early_stopping].translate_greedy, SENTENCES) == generated(model, vocabulary, SENTENCES)
    assert any(beam)


@pytest.mark.parametrize("kind", ["transformer", "rnn-attention"])
def test_a_tied_translator_stores_its_step_weights_once_and_decodes_as_generate(tmp_path, kind):
    """A three-way tied Transformer or attentional GRU (the translate recipe's models) keeps its output layer's
    `E^T`, laid out for the steps, as a variable of the SavedModel, which every call reads: its translations are
    `generate`'s, alone or together."""
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    vocabulary = text.Vocabulary([f"w{i}" for i in range(1, 20)])
    tied = dict(tie_embeddings=True, share_embeddings=True)
    if kind == "transformer":
        model = ks.models.transformer_seq2seq(
            len(vocabulary),
            len(vocabulary),
            SOURCE_LENGTH,
            MAX_LENGTH,
            num_layers=1,
            hidden_dim=32,
            num_heads=2,
            intermediate_dim=64,
            dropout=0.0,
            **tied,
        )
        table = model.target_embedding.token_embedding.embeddings
    else:
        model = ks.models.rnn_seq2seq(len(vocabulary), len(vocabulary), embedding_dim=32, units=32, **tied)
        table = model.target_embedding.embeddings
    export.export_translator(
        model, vocabulary, vocabulary, str(tmp_path), SOURCE_LENGTH, MAX_LENGTH, num_beams=3, length_penalty=0.6
    )
    exported = tf.saved_model.load(str(tmp_path))
    np.testing.assert_array_equal(exported.step_weights["kernel"].numpy(), keras.ops.convert_to_numpy(table).T)
    beam = generated(model, vocabulary, SENTENCES, strategy="beam", num_beams=3, length_penalty=0.6)
    for function, expected in (
        (exported.translate, beam),
        (exported.translate_greedy, generated(model, vocabulary, SENTENCES)),
    ):
        assert served(function, SENTENCES) == expected
        assert [served(function, [s])[0] for s in SENTENCES] == expected


def test_a_sentence_translates_the_same_alone_and_in_any_batch(translator):
    _, _, exported = translator
    for function in (exported[False].translate, exported[False].translate_greedy):
        together = served(function, SENTENCES)
        assert [served(function, [s])[0] for s in SENTENCES] == together
        assert served(function, SENTENCES[:3]) == together[:3]
        assert served(function, SENTENCES * 7) == together * 7  # 35 rows, decoded as 64
        assert served(function, []) == []


def test_a_large_batch_decoded_in_parts_by_length_gives_generate(translator):
    model, vocabulary, exported = translator
    sentences = [" ".join(f"w{(i * k + i) % 19 + 1}" for k in range(1 + i % 6)) for i in range(18)]
    assert len(set(sentences)) == 18 and len(sentences) >= export.SPLIT_FROM  # parts of 5, 5, 5 and 3 sentences
    beam = generated(model, vocabulary, sentences, strategy="beam", num_beams=3, length_penalty=0.6)
    assert served(exported[False].translate, sentences) == beam
    assert served(exported[False].translate_greedy, sentences) == generated(model, vocabulary, sentences)
    assert len(set(beam)) > 3  # parts in the wrong order or place would show


@pytest.mark.parametrize("strategy, least_rows", [("beam", 1), ("greedy", 1), ("greedy", 2)])
def test_decoding_in_pieces_over_a_growing_cache_gives_decode(strategy, least_rows):
    """The export's loop (4 steps a call, ended sentences dropped down to `least_rows`, the cache cut to 16
    positions, then grown to 40) and its lone-sentence program give `decoding.decode`'s ids and scores."""
    import tensorflow as tf

    from keras_seq import decoding

    keras.utils.set_random_seed(6)
    model = ks.models.transformer_seq2seq(9, 9, 8, 40, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=16)
    end_bias = {"beam": -0.3, "greedy": -0.05}[strategy]  # the end id ends these sentences at different steps
    model.head.variables[-1].assign(np.where(np.arange(9) == 2, end_bias, 0.0))
    assert decoding.cache_windows(model, 1, 40) == [16, 40]
    sources = tf.constant(np.random.default_rng(2).integers(1, 9, size=(5, 8)), tf.int32)
    settings = dict(strategy=strategy, num_beams=3, length_penalty=0.6, end_id=2, start_id=1)
    lengths = []
    decoder = export._DroppingDecoder(model, 40, settings, least_rows)
    for rows, decoded in ((sources, tf.function(decoder)), (sources[3:4], decoder.whole)):
        expected_ids, expected_scores = decoding.decode(model, rows, 0, 40, **settings)
        ids, scores = decoded(rows)
        np.testing.assert_array_equal(ids.numpy(), expected_ids.numpy())
        np.testing.assert_allclose(scores.numpy(), expected_scores.numpy(), atol=1e-5)
        lengths.append((expected_ids.numpy()[:, 0] != 0).sum(-1))
    assert lengths[1][0] > 32  # the lone sentence's cache grew past its first window
    assert lengths[0].max() > 32 and lengths[0].min() < 16  # sentences dropped while others decode on


def test_few_shapes_pads_rows_to_a_size_of_the_ladder_and_width_to_a_multiple_of_16():
    import tensorflow as tf

    ids = tf.constant(np.arange(1, 22).reshape(7, 3), tf.int32)
    padded = export._few_shapes(ids, 40).numpy()
    assert padded.shape == (8, 16)
    np.testing.assert_array_equal(export._few_shapes(tf.pad(ids, [[0, 0], [0, 20]]), 40).numpy(), padded)  # cut first
    np.testing.assert_array_equal(padded[:7, :3], ids.numpy())
    np.testing.assert_array_equal(padded[7:, :3], ids.numpy()[:1])  # repeated rows
    assert not padded[:, 3:].any()
    assert export._few_shapes(ids[:5], 10).numpy().shape == (6, 10)  # 6 = 1.5 * 4; never wider than the source length
    assert not export._few_shapes(tf.zeros((0, 0), tf.int32), 10).numpy().any()  # one row of padding
    assert export._few_shapes(tf.zeros((0, 0), tf.int32), 10).numpy().shape == (1, 10)
    assert export._few_shapes(ids[:1, :0], 10).numpy().shape == (1, 10)
    np.testing.assert_array_equal(export._few_shapes(ids[:1], 10, least_rows=2).numpy()[:, :3], ids.numpy()[[0, 0]])
    sizes = [int(export._size_at_least(tf.constant(n))) for n in (1, 2, 3, 5, 7, 9, 13, 17, 25, 33, 49, 65)]
    assert sizes == [1, 2, 3, 6, 8, 12, 16, 24, 32, 48, 64, 96]


def test_rows_for_is_the_graphs_row_ladder_in_python():
    import tensorflow as tf

    counts = [*range(1, 200), 1000, 5000, 2**29, 2**29 + 1, 805306368, 805306369]
    graph = [int(export._size_at_least(tf.constant(n))) for n in counts]
    assert [export.rows_for(n) for n in counts] == graph
    assert graph[:9] == [1, 2, 3, 4, 6, 6, 8, 8, 12] and graph[-1] == 805306368  # the last entry past the ladder


def test_row_counts_of_call_follow_the_split_into_parts():
    assert export.row_counts_of_call(1) == {0} and export.row_counts_of_call(5) == {6}
    assert export.row_counts_of_call(export.SPLIT_FROM - 1) == {16}
    assert export.row_counts_of_call(16) == {4}  # 4 parts of 4
    assert export.row_counts_of_call(17) == {6, 2}  # parts of 5, 5, 5 and 2 rows
    assert export.row_counts_of_call(64) == {16}


@pytest.mark.parametrize("least_rows", [1, 2])
@pytest.mark.parametrize("width", [0, 3, 16, 17, 40])  # the caller cuts sources to the source length, 40
def test_a_lone_sentence_gets_the_shape_few_shapes_gives_it(least_rows, width):
    import tensorflow as tf

    one = tf.constant(np.arange(1, width + 1).reshape(1, width), tf.int32)
    for ids in (one, tf.zeros((0, 0), tf.int32)):  # a sentence, or none
        np.testing.assert_array_equal(
            export._alone(ids, 40, least_rows).numpy(), export._few_shapes(ids, 40, least_rows).numpy()
        )


def test_a_model_without_the_decoding_contract_is_not_exported(tmp_path):
    """The exports of a decoding check the model's contract first, naming what it lacks, and write nothing."""
    vocabulary = text.Vocabulary(["w1", "w2"])
    classifier = ks.models.rnn_classifier(len(vocabulary), 2, embedding_dim=4, units=4)
    with pytest.raises(ValueError, match=r"export_translator: .*does not inherit it and lacks .*decoding_step"):
        export.export_translator(classifier, vocabulary, vocabulary, str(tmp_path / "t"), SOURCE_LENGTH, MAX_LENGTH)
    with pytest.raises(ValueError, match=r"export_language_model: .*does not inherit it and lacks .*start_decoding"):
        export.export_language_model(classifier, vocabulary, str(tmp_path / "lm"), MAX_LENGTH)
    assert not list(tmp_path.iterdir())


OPTION_SETS = [
    dict(beam_size=3, n_best=3, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH),
    dict(beam_size=3, n_best=2, length_penalty=1.0, min_length=5, max_length=8),
    dict(beam_size=3, n_best=1, length_penalty=0.0, min_length=0, max_length=4),
    dict(beam_size=1, n_best=1, length_penalty=0.6, min_length=3, max_length=7),
    dict(beam_size=3, n_best=2, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH, no_repeat_ngram_size=2),
    dict(beam_size=1, n_best=1, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH, no_repeat_ngram_size=1),
    dict(beam_size=3, n_best=3, length_penalty=0.6, min_length=2, max_length=MAX_LENGTH, repetition_penalty=2.5),
    dict(beam_size=1, n_best=1, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH, disable_unk=True),
    dict(beam_size=3, n_best=2, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH, max_length_ratio=0.7),
    dict(beam_size=1, n_best=1, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH, max_length_ratio=0.5),
]


def with_options(exported, sentences, **options):
    """`translate_options` on `sentences` with `options` (export.RUNTIME_OPTIONS' names; the controls and
    sampling off unless given)."""
    import tensorflow as tf

    options = {**export.NEUTRAL_OPTIONS, **options}
    prefixes = options.pop("target_prefix", [""] * len(sentences))
    result = exported.translate_options(
        tf.constant(sentences, tf.string),
        *(tf.constant(options[name], dtype) for name, dtype in export.RUNTIME_OPTIONS),
        tf.constant(prefixes, tf.string),
    )
    texts = [[s.decode() for s in row] for row in result["translations"].numpy()]
    return texts, result["scores"].numpy(), result["log_probs"].numpy()


def gnmt_penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_translate_options_gives_generates_n_best_with_its_scores(translator, options):
    """Each runtime option of `translate_options` changes the SavedModel's output as it changes `generate`'s: the
    same n-best translations, and scores equal to `generate`'s (the raw ones to the GNMT formula in NumPy)."""
    model, vocabulary, exported = translator
    beam, n = options["beam_size"] > 1, options["n_best"]
    texts, got_scores, got_log_probs = with_options(exported[False], SENTENCES, **options)
    settings = dict(
        strategy="beam" if beam else "greedy",
        num_beams=3,
        length_penalty=options["length_penalty"],
        min_length=options["min_length"],
        max_length=options["max_length"],
        no_repeat_ngram_size=options.get("no_repeat_ngram_size", 0),
        repetition_penalty=options.get("repetition_penalty", 1.0),
        suppress_ids=[text.UNKNOWN] if options.get("disable_unk") else [],
        max_length_ratio=options.get("max_length_ratio", 0.0),
    )
    if beam and n == 1:  # generate gives no scores for one sequence, and its stopping rule depends on n
        assert [row[0] for row in texts] == generated(model, vocabulary, SENTENCES, **settings)
    else:
        # Greedy decoding gives its summed log-probabilities for two sequences or more (each copy the same).
        ids = vocabulary.encode(SENTENCES)[:, :SOURCE_LENGTH].to_tensor(shape=[None, SOURCE_LENGTH]).numpy()
        settings["num_return_sequences"] = n if beam else 2
        best, scores = model.generate(ids, end_id=text.END, start_id=text.START, **settings)
        best, scores = keras.ops.convert_to_numpy(best)[:, :n], keras.ops.convert_to_numpy(scores)[:, :n]
        assert texts == [[s.decode() for s in vocabulary.decode(row).numpy()] for row in best]
        penalty = gnmt_penalty((best[..., 1:] != 0).sum(axis=-1), options["length_penalty"])
        raw = scores * penalty if beam else scores
        np.testing.assert_allclose(got_log_probs, raw, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got_scores, raw / penalty, rtol=1e-4, atol=1e-4)
    assert all(len(row) == n for row in texts)
    minimum = options["min_length"] - 1  # the start id counts in the lengths
    assert all(len(t.split()) >= minimum for row in texts for t in row)
    assert all(len(t.split()) <= options["max_length"] - 1 for row in texts for t in row)
    # A sentence's result does not depend on the rest of its batch (a lone one, a batch decoded in parts).
    alone = [with_options(exported[False], [s], **options)[0][0] for s in SENTENCES]
    assert alone == texts
    assert with_options(exported[False], SENTENCES * 4, **options)[0] == texts * 4


def test_translate_options_turn_down_options_outside_the_export(translator):
    import tensorflow as tf

    _, _, exported = translator
    good = OPTION_SETS[0]
    for changed, message in [
        ({"beam_size": 2, "n_best": 1}, "beam_size: expected 1 or 3"),
        ({"n_best": 4}, "n_best: expected 1 to beam_size"),
        ({"max_length": MAX_LENGTH + 1}, "max_length: expected 1 to"),
        ({"min_length": 11}, "min_length: expected 0 to max_length"),
        ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size: expected 0 to max_length"),
        ({"repetition_penalty": 0.0}, "repetition_penalty: expected a number in"),
        ({"max_length_ratio": -0.5}, "max_length_ratio: expected a finite number >= 0"),
        ({"sampling_topk": 2}, "sampling_topk: expected 1 with beam search"),
        ({"beam_size": 1, "n_best": 1, "sampling_topp": 0.0}, "sampling_topp: expected a number in"),
        ({"beam_size": 1, "n_best": 1, "sampling_temperature": 0.0}, "sampling_temperature: expected a finite"),
    ]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            with_options(exported[False], SENTENCES, **{**good, **changed})
    assert int(exported[False].num_beams.numpy()) == 3 and int(exported[False].max_length.numpy()) == MAX_LENGTH


@pytest.mark.parametrize(
    "topk, topp, strategy", [(3, 1.0, "top_k"), (0, 0.8, "top_p"), (0, 1.0, "sample"), (4, 0.7, "top_k_top_p")]
)
def test_translate_options_sample_as_generate_whatever_the_batch(translator, topk, topp, strategy):
    """`sampling_topk` k (0: every id), `sampling_topp` p (1: every id), the temperature and the seed draw what
    `generate`'s `top_k`, `top_p` and `sample` draw; a sentence's sample is the same alone and in any batch."""
    model, vocabulary, exported = translator
    options = dict(beam_size=1, n_best=1, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH)
    sampling = dict(sampling_topk=topk, sampling_topp=topp, sampling_temperature=1.5, seed=5)
    texts = with_options(exported[False], SENTENCES, **options, **sampling)[0]
    expected = generated(
        model, vocabulary, SENTENCES, strategy=strategy, k=max(topk, 1), p=topp, temperature=1.5, seed=5
    )
    assert [row[0] for row in texts] == expected
    alone = [with_options(exported[False], [s], **options, **sampling)[0][0] for s in SENTENCES]
    assert alone == texts
    assert with_options(exported[False], SENTENCES * 4, **options, **sampling)[0] == texts * 4
    other_seed = with_options(exported[False], SENTENCES, **options, **{**sampling, "seed": 6})[0]
    assert other_seed != texts


PREFIXES = ["w5 w6", "", "w7", "", "w1 w1 w1"]


@pytest.mark.parametrize("beam_size, n_best", [(3, 2), (1, 1)])
def test_translate_options_continue_each_sentences_target_prefix_as_generate(translator, beam_size, n_best):
    """Sentences with and without a prefix in one call: each gets `generate`'s continuation of its prefix, alone or
    in any batch."""
    model, vocabulary, exported = translator
    options = dict(beam_size=beam_size, n_best=n_best, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH)
    texts = with_options(exported[False], SENTENCES, target_prefix=PREFIXES, **options)[0]
    ids = vocabulary.encode(SENTENCES)[:, :SOURCE_LENGTH].to_tensor(shape=[None, SOURCE_LENGTH]).numpy()
    prefix_ids = vocabulary.encode(PREFIXES).to_tensor().numpy()
    settings = dict(end_id=text.END, start_id=text.START, target_prefix=prefix_ids)
    if beam_size > 1:
        best, _ = model.generate(ids, MAX_LENGTH, strategy="beam", num_beams=3, num_return_sequences=n_best, **settings)
    else:
        best = model.generate(ids, MAX_LENGTH, **settings)[:, None]
    expected = [[s.decode() for s in vocabulary.decode(row).numpy()] for row in keras.ops.convert_to_numpy(best)]
    assert texts == expected
    assert all(t.startswith(prefix) for row, prefix in zip(texts, PREFIXES) for t in row)
    alone = [
        with_options(exported[False], [s], target_prefix=[p], **options)[0][0] for s, p in zip(SENTENCES, PREFIXES)
    ]
    assert alone == texts
    assert with_options(exported[False], SENTENCES * 4, target_prefix=PREFIXES * 4, **options)[0] == texts * 4


def test_translate_options_want_one_target_prefix_per_sentence(translator):
    import tensorflow as tf

    with pytest.raises(tf.errors.InvalidArgumentError, match="target_prefix: expected one per sentence"):
        with_options(translator[2][False], SENTENCES, target_prefix=["w1"], **OPTION_SETS[0])


def test_a_translator_with_placeholders_protects_and_restores_each_sentences_spans_in_the_graph(tmp_path):
    """With `placeholders`, the export's translations are the Python pipeline's: `protect`, `generate`, `restore`
    (greedy and n-best beams, each hypothesis restored with its own sentence's spans), whatever the batch. The
    model is pushed to write the token of the second span at every step, so restoring is seen at work."""
    import tensorflow as tf

    from keras_seq.data import corpora, placeholders
    from keras_seq.data.subword import SubwordVocabulary

    pairs = [placeholders.protect_pair(*pair) for pair in corpora.software_en_fr("valid")]
    vocabulary = SubwordVocabulary.train([t for pair in pairs for t in pair], 600, user_symbols=placeholders.TOKENS)
    keras.utils.set_random_seed(5)
    model = MODELS["rnn_attention"](len(vocabulary))
    bias = model.get_layer("logits").bias
    token_ids = [vocabulary.tokens.index(token) for token in placeholders.TOKENS[:2]]
    bias.assign(keras.ops.convert_to_numpy(bias) + np.isin(np.arange(len(vocabulary)), token_ids[1]) * 30.0)
    export.export_translator(
        model, vocabulary, vocabulary, str(tmp_path), SOURCE_LENGTH, MAX_LENGTH, num_beams=3, placeholders=True
    )
    exported = tf.saved_model.load(str(tmp_path))
    sources = ["Delete %s and %d files.", "Open {path} now", "No spans here", "Copy --force to /etc/hosts, 3 times"]
    protected = [placeholders.protect(source) for source in sources]
    restored = lambda rows: [[placeholders.restore(t, spans) for t in row] for row, (_, spans) in zip(rows, protected)]
    # No translation ends before it holds the token of each of its spans.
    required = np.zeros((len(sources), placeholders.MAX_SPANS), "int32")
    for row, (_, spans) in enumerate(protected):
        required[row, : len(spans)] = placeholders.token_ids(vocabulary)[: len(spans)]
    greedy = restored([[t] for t in generated(model, vocabulary, [p for p, _ in protected], required_ids=required)])
    assert [[t] for t in served(exported.translate_greedy, sources)] == greedy
    assert greedy[0][0] == "%d" * (MAX_LENGTH - 1) and greedy[1][0] == greedy[2][0] == ""
    ids = vocabulary.encode([p for p, _ in protected])[:, :SOURCE_LENGTH].to_tensor(shape=[None, SOURCE_LENGTH])
    settings = dict(strategy="beam", num_beams=3, num_return_sequences=2, length_penalty=0.6, required_ids=required)
    best, _ = model.generate(ids.numpy(), MAX_LENGTH, end_id=text.END, start_id=text.START, **settings)
    beams = restored([[s.decode() for s in vocabulary.decode(row).numpy()] for row in keras.ops.convert_to_numpy(best)])
    options = dict(beam_size=3, n_best=2, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH)
    assert with_options(exported, sources, **options)[0] == beams
    assert [with_options(exported, [s], **options)[0][0] for s in sources] == beams
    # Odd input passes through the protection: invalid UTF-8, an empty string, another script.
    odd = served(exported.translate_greedy, [b"\xff\xfe bad \xc3\x28 7", b"", "日本語 3 <b>".encode()])
    assert len(odd) == 3


@pytest.mark.parametrize("beam_size, n_best", [(3, 2), (1, 1)])
def test_translate_options_return_each_translations_alignment_as_the_models_attention(translator, beam_size, n_best):
    """With `return_alignment`, each hypothesis' weights are the model's attention over its source when fed that
    hypothesis (`attention_weights`: Bahdanau's, or the last block's cross-attention averaged over heads), with the
    token texts of the source and of what it wrote; without, no weights."""
    import tensorflow as tf

    model, vocabulary, exported = translator
    options = {
        **export.NEUTRAL_OPTIONS,
        **dict(beam_size=beam_size, n_best=n_best, length_penalty=0.6, min_length=0, max_length=MAX_LENGTH),
    }
    call = lambda wanted: exported[False].translate_options(
        tf.constant(SENTENCES),
        *(tf.constant({**options, "return_alignment": wanted}[name], dtype) for name, dtype in export.RUNTIME_OPTIONS),
        tf.constant([""] * len(SENTENCES)),
    )
    outputs = call(True)
    ids = vocabulary.encode(SENTENCES)[:, :SOURCE_LENGTH].to_tensor().numpy()
    settings = dict(end_id=text.END, start_id=text.START)
    if beam_size > 1:
        best, _ = model.generate(ids, MAX_LENGTH, strategy="beam", num_beams=3, num_return_sequences=n_best, **settings)
    else:
        best = model.generate(ids, MAX_LENGTH, **settings)[:, None]
    best = keras.ops.convert_to_numpy(best)
    expected = keras.ops.convert_to_numpy(
        model.attention_weights(
            {"encoder_inputs": np.repeat(ids, n_best, axis=0), "decoder_inputs": best.reshape(-1, MAX_LENGTH)[:, :-1]}
        )
    ).reshape(len(SENTENCES), n_best, MAX_LENGTH - 1, ids.shape[1])
    np.testing.assert_allclose(outputs["alignments"].numpy(), expected, atol=1e-5)
    tokens = np.array([""] + vocabulary.tokens[1:])
    assert (outputs["source_tokens"].numpy().astype(str) == tokens[ids]).all()
    written = best[..., 1:]
    ended = np.cumsum(written == text.END, axis=-1) > 0
    expected_targets = np.where(ended | (written <= text.END), "", tokens[written])
    assert (outputs["target_tokens"].numpy().astype(str) == expected_targets).all()
    # Rows over a real source sum to 1 and put nothing on padding.
    padding = ids == 0
    assert (
        np.allclose(expected.sum(-1), 1.0, atol=1e-5)
        and not expected[np.broadcast_to(padding[:, None, None], expected.shape)].any()
    )
    assert call(False)["alignments"].shape == (len(SENTENCES), n_best, 0, ids.shape[1])

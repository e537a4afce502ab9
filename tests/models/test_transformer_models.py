import keras
import numpy as np
import pytest
from layer_checks import to_numpy

import keras_seq as ks

START, END = 1, 2


def reversal_data(rng, n, length=6, vocabulary_size=12):
    """Source ids 3.. (right-padded); target: the source reversed, then END."""
    source = rng.integers(3, vocabulary_size, size=(n, length)).astype("int32")
    source[::3, length - 2 :] = 0
    target = np.zeros((n, length + 2), "int32")
    for row in range(n):
        reversed_ids = source[row][source[row] != 0][::-1]
        target[row, : len(reversed_ids) + 1] = [*reversed_ids, END]
    decoder_inputs = np.concatenate([np.full((n, 1), START, "int32"), target[:, :-1]], axis=1)
    return {"encoder_inputs": source, "decoder_inputs": decoder_inputs}, target


def small_seq2seq(**kwargs):
    options = dict(num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64, dropout=0.0)
    return ks.models.transformer_seq2seq(12, 12, 8, 10, **{**options, **kwargs})


def test_seq2seq_learns_reversal_and_generates_it(rng, tmp_path):
    inputs, target = reversal_data(rng, 640)
    model = small_seq2seq()
    model.compile(keras.optimizers.Adam(3e-3), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=0))
    model.fit({k: x[:512] for k, x in inputs.items()}, target[:512], epochs=20, batch_size=32, verbose=0)
    source = inputs["encoder_inputs"][512:]
    generated = to_numpy(model.generate(source, 9, end_id=END))
    assert np.all(generated[:, 0] == START)
    exact = np.mean([np.array_equal(g[1:], t) for g, t in zip(generated, target[512:])])
    assert exact > 0.9, exact  # a model that ignores the source gets ~0
    beam = to_numpy(model.generate(source, 9, end_id=END, strategy="beam", num_beams=3))
    assert np.mean([np.array_equal(b[1:], t) for b, t in zip(beam, target[512:])]) >= exact - 0.02
    path = tmp_path / "seq2seq.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ks.models.TransformerSeq2Seq)
    np.testing.assert_array_equal(to_numpy(loaded.generate(source, 9, end_id=END)), generated)


@pytest.mark.parametrize("norm_first", [True, False])
def test_seq2seq_cached_generation_equals_uncached(rng, norm_first):
    model = small_seq2seq(norm_first=norm_first, num_layers=2)
    source = rng.integers(3, 12, size=(3, 7)).astype("int32")
    source[1, 5:] = 0
    cached = to_numpy(model.generate(source, 8))
    ids = np.full((3, 1), START, "int32")
    for _ in range(7):
        logits = to_numpy(model({"encoder_inputs": source, "decoder_inputs": ids}))
        ids = np.concatenate([ids, logits[:, -1, 1:].argmax(-1)[:, None].astype("int32") + 1], axis=1)
    np.testing.assert_array_equal(cached, ids)


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_beam_search_encodes_each_source_once(rng, kind, monkeypatch):
    model = small_seq2seq() if kind == "transformer" else ks.models.rnn_seq2seq(20, 20, embedding_dim=8, units=8)
    source = rng.integers(3, 12, size=(3, 7)).astype("int32")
    expected = to_numpy(model.generate(source, 8, strategy="beam", num_beams=4))
    encoded_rows = []
    owner, name = (model, "encode") if kind == "transformer" else (model.encoder, "call")  # the RNN encoder: a layer
    encode = getattr(owner, name)
    monkeypatch.setattr(
        owner, name, lambda x, *args, **kwargs: encoded_rows.append(x.shape[0]) or encode(x, *args, **kwargs)
    )
    model._compiled_decoders.clear()
    again = to_numpy(model.generate(source, 8, strategy="beam", num_beams=4))
    assert encoded_rows and set(encoded_rows) == {3}  # the 3 sources, not their 12 beams
    np.testing.assert_array_equal(again, expected)


def test_decoding_projects_the_cross_attention_keys_once_per_source(rng, monkeypatch):
    from keras_seq.layers import multi_head_attention

    model = small_seq2seq(num_layers=2)
    source = rng.integers(3, 12, size=(2, 7)).astype("int32")
    expected = to_numpy(model.generate(source, 8, strategy="beam", num_beams=2))
    cross_keys = [block.cross_attention.key_kernel for block in model.decoder_blocks]
    projected = []
    project = multi_head_attention._project
    monkeypatch.setattr(
        multi_head_attention,
        "_project",
        lambda x, kernel, *args, **kwargs: (
            projected.append(any(kernel is key for key in cross_keys)) or project(x, kernel, *args, **kwargs)
        ),
    )
    model._compiled_decoders.clear()
    np.testing.assert_array_equal(to_numpy(model.generate(source, 8, strategy="beam", num_beams=2)), expected)
    assert sum(projected) == 2  # once per block (key_value_cache), however many steps are traced or run


def test_source_padding_does_not_change_the_output(rng):
    model = small_seq2seq()
    source = np.array([[5, 6, 7, 0, 0]], "int32")
    decoder_inputs = np.array([[START, 4, 9]], "int32")
    padded = to_numpy(model({"encoder_inputs": source, "decoder_inputs": decoder_inputs}))
    unpadded = to_numpy(model({"encoder_inputs": source[:, :3], "decoder_inputs": decoder_inputs}))
    np.testing.assert_allclose(padded, unpadded, atol=1e-5)


def test_bad_arguments_raise_value_errors():
    cases = [
        (
            lambda: ks.models.transformer_seq2seq(10, 10, 8, 8, hidden_dim=30, num_heads=4),
            r"transformer_seq2seq.*hidden_dim.*multiple of num_heads=4",
        ),
        (lambda: ks.models.transformer_seq2seq(10, 0, 8, 8), r"target_vocabulary_size.*positive integer"),
        (lambda: ks.models.transformer_seq2seq(10, 10, 8, 8, positional="rotary"), r"positional"),
        (lambda: ks.models.transformer_lm(10, 8, num_layers=0), r"transformer_lm.*num_layers"),
        (
            lambda: small_seq2seq().generate(np.ones((1, 4), "int32"), 11),
            r"TransformerSeq2Seq.generate.*max_length.*10",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_classifier_learns_which_token_is_more_frequent(rng, pooling):
    """Label: are there more 3s than 4s? The first position carries a [CLS]-style id 5."""
    ids = rng.integers(3, 5, size=(800, 9)).astype("int32")
    ids[:, 0] = 5
    ids[::4, 7:] = 0
    labels = ((ids == 3).sum(1) > (ids == 4).sum(1)).astype("int32")
    model = ks.models.transformer_classifier(
        6, 2, 9, num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64, dropout=0.0, pooling=pooling
    )
    model.compile(keras.optimizers.Adam(3e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ids[:640], labels[:640], epochs=15, batch_size=32, verbose=0)
    accuracy = np.mean(to_numpy(model.predict(ids[640:], verbose=0)).argmax(-1) == labels[640:])
    assert accuracy > 0.9, accuracy


def test_warmup_schedule_matches_vaswani_formula():
    schedule = ks.schedules.InverseSquareRootWarmup(hidden_dim=512, warmup_steps=4000)
    for step in (0, 99, 3999, 4000, 20000):
        n = step + 1
        expected = 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5)
    clone = ks.schedules.InverseSquareRootWarmup.from_config(schedule.get_config())
    assert clone.get_config() == schedule.get_config()
    optimizer = keras.optimizers.Adam(schedule)
    restored = keras.optimizers.Adam.from_config(optimizer.get_config())
    assert float(restored.learning_rate) == pytest.approx(float(schedule(0)), rel=1e-5)
    with pytest.raises(ValueError, match=r"InverseSquareRootWarmup.*warmup_steps"):
        ks.schedules.InverseSquareRootWarmup(256, warmup_steps=0)


def tiny_transformer(kind, tie_embeddings):
    """A one-block `lm`, `seq2seq` or `mlm` whose logits cover 17 ids."""
    options = dict(
        num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0, tie_embeddings=tie_embeddings
    )
    if kind == "lm":
        return ks.models.transformer_lm(17, 10, **options)
    if kind == "seq2seq":
        return ks.models.transformer_seq2seq(11, 17, 8, 10, **options)
    return ks.models.transformer_mlm(17, 10, **options)


def tiny_inputs(rng, kind):
    ids = rng.integers(3, 17, size=(2, 6)).astype("int32")
    ids[1, 4:] = 0
    if kind == "seq2seq":
        return {"encoder_inputs": rng.integers(3, 11, size=(2, 5)).astype("int32"), "decoder_inputs": ids}
    return ids


def output_embedding(model):
    return model.target_embedding if isinstance(model, ks.models.TransformerSeq2Seq) else model.token_embedding


@pytest.mark.parametrize("kind", ["lm", "seq2seq", "mlm"])
def test_tied_logits_are_features_times_the_embedding_transposed(rng, kind):
    tied, untied = tiny_transformer(kind, True), tiny_transformer(kind, False)
    assert untied.count_params() - tied.count_params() == 17 * 16  # the V x D output kernel
    assert [w.path for w in tied.head.weights] == ["logits/bias"]

    tied.head.bias.assign(rng.normal(size=17).astype("float32"))
    inputs = tiny_inputs(rng, kind)
    features = to_numpy(keras.Model(tied.input, tied.head.input)(inputs)).astype("float64")
    embeddings = to_numpy(output_embedding(tied).token_embedding.embeddings).astype("float64")
    expected = features @ embeddings.T + to_numpy(tied.head.bias)
    np.testing.assert_allclose(to_numpy(tied(inputs)), expected, atol=1e-5)

    keras.config.set_dtype_policy("mixed_float16")
    mixed = tiny_transformer(kind, True)
    mixed.set_weights(tied.get_weights())
    mixed_logits = mixed(inputs)
    assert keras.backend.standardize_dtype(mixed_logits.dtype) == "float32"
    np.testing.assert_allclose(to_numpy(mixed_logits), expected, atol=2e-2 * max(1.0, np.abs(expected).max()))


def uncached_greedy(model, inputs, max_length):
    """Greedy decoding to `max_length` ids by re-running the whole model on the growing prefix (no cache)."""
    if isinstance(model, ks.models.TransformerSeq2Seq):
        ids = np.full((len(inputs), 1), START, "int32")
        step = lambda ids: model({"encoder_inputs": inputs, "decoder_inputs": ids})
    else:
        ids, step = inputs, model
    while ids.shape[1] < max_length:
        next_ids = to_numpy(step(ids))[:, -1, 1:].argmax(-1).astype("int32") + 1  # id 0 is padding
        ids = np.concatenate([ids, next_ids[:, None]], axis=1)
    return ids


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_generation_under_mixed_precision(rng, kind, policy):
    """A prompt of several ids fills the cache in one step, in the policy's compute dtype."""
    reference = tiny_transformer(kind, False)
    keras.config.set_dtype_policy(policy)
    model = tiny_transformer(kind, False)
    model.set_weights(reference.get_weights())
    prompt = rng.integers(3, 11, size=(2, 4)).astype("int32")
    greedy = to_numpy(model.generate(prompt, 8))
    ids, scores = (to_numpy(x) for x in model.generate(prompt, 8, strategy="beam", num_beams=3, num_return_sequences=2))
    assert greedy.shape == (2, 8) and ids.shape == (2, 2, 8)
    generated = greedy if kind == "seq2seq" else greedy[:, 4:]
    assert np.all((generated >= 1) & (generated < 17))
    assert scores.dtype == np.float32 and np.all(np.isfinite(scores)) and np.all(scores[:, 0] >= scores[:, 1])


@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_tied_models_generate_with_the_cache_and_save_load(rng, tmp_path, kind):
    model = tiny_transformer(kind, True)
    prompt = rng.integers(3, 11, size=(2, 4)).astype("int32")
    np.testing.assert_array_equal(to_numpy(model.generate(prompt, 8)), uncached_greedy(model, prompt, 8))

    config = model.get_config()
    assert config["tie_embeddings"] is True
    assert type(model).from_config(config).get_config() == config
    path = tmp_path / f"tied_{kind}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, type(model)) and loaded.count_params() == model.count_params()
    inputs = tiny_inputs(rng, kind)
    np.testing.assert_allclose(to_numpy(loaded(inputs)), to_numpy(model(inputs)), atol=1e-6)


def test_seq2seq_cross_attention_weights_are_distributions_over_real_source_tokens():
    model = ks.models.transformer_seq2seq(20, 20, 6, 5, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=16)
    source = np.array([[4, 5, 6, 0, 0, 0], [7, 8, 9, 10, 11, 12]], "int32")
    target = np.array([[1, 3, 4, 0, 0], [1, 5, 6, 7, 8]], "int32")
    weights = to_numpy(model.attention_weights({"encoder_inputs": source, "decoder_inputs": target}))
    assert weights.shape == (2, 5, 6)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(weights[0, :, 3:], 0.0)
    with pytest.raises(ValueError, match="return_attention_scores"):
        model.decoder_blocks[0](
            np.zeros((1, 2, 16), "float32"),
            np.zeros((1, 3, 16), "float32"),
            cache=np.zeros((1, 2, 4, 2, 8), "float32"),
            cache_update_index=0,
            return_attention_scores=True,
        )


@pytest.mark.parametrize(
    "build",
    [
        lambda: ks.models.transformer_lm(12, 6, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32),
        lambda: ks.models.rnn_lm(12, embedding_dim=8, units=16),
    ],
    ids=["transformer_lm", "rnn_lm"],
)
def test_compile_computes_keras_sparse_cross_entropy_with_ks_losses(rng, tmp_path, build):
    """Keras' `SparseCategoricalCrossentropy` trains exactly as Keras' own op does; the user's loss is left as is."""
    ids = rng.integers(1, 12, size=(4, 6)).astype("int32")
    ids[0, 4:] = 0
    targets = np.concatenate([ids[:, 1:], np.zeros((4, 1), "int32")], axis=1)

    def compiled(loss):
        keras.utils.set_random_seed(3)
        model = build()
        model.compile(keras.optimizers.SGD(0.5), loss)
        return model

    user_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0, name="xent")
    swapped = compiled(user_loss)

    def keras_function(y_true, y_pred):
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True, ignore_class=0)

    keras_op = compiled(keras_function)
    assert type(swapped.loss) is ks.losses.SparseCategoricalCrossentropy
    assert swapped.loss.get_config() == user_loss.get_config()
    assert (
        type(user_loss) is keras.losses.SparseCategoricalCrossentropy
        and user_loss.fn is keras.losses.sparse_categorical_crossentropy
    )
    assert keras_op.loss is keras_function  # anything but Keras' class itself is kept
    for _ in range(3):
        assert swapped.train_on_batch(ids, targets) == pytest.approx(keras_op.train_on_batch(ids, targets), rel=1e-5)
    for ours, theirs in zip(swapped.weights, keras_op.weights):
        np.testing.assert_allclose(to_numpy(ours), to_numpy(theirs), atol=1e-5)
    path = tmp_path / "lm.keras"
    swapped.save(path)
    loaded = keras.saving.load_model(path)
    assert (
        type(loaded.loss) is ks.losses.SparseCategoricalCrossentropy
        and loaded.loss.get_config() == user_loss.get_config()
    )
    assert int(to_numpy(loaded.optimizer.iterations)) == 3  # compiled on load, optimizer state restored
    assert loaded.evaluate(ids, targets, verbose=0) == pytest.approx(
        keras_op.evaluate(ids, targets, verbose=0), rel=1e-5
    )


def test_a_users_own_compile_is_not_called_on_load():
    """As Keras does for any model whose `compile` is overridden: a warning, not a call with Keras' arguments."""

    class OwnCompile(ks.models.TransformerLM):
        def compile(self, learning_rate=1e-2):
            super().compile(
                keras.optimizers.SGD(learning_rate), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            )

    model = OwnCompile(12, 6, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    model.compile()
    assert type(model.loss) is ks.losses.SparseCategoricalCrossentropy
    with pytest.warns(UserWarning, match="compile"):
        model.compile_from_config(model.get_compile_config())


@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_beam_search_through_cache_rows_equals_gathering_the_cache(rng, kind):
    """Transformers' beam search reads each row's history through `cache_rows`; the same as reordering the cache.

    Rows are reordered from the first step on: all beams start as copies of the first.
    """
    keras.utils.set_random_seed(3)
    if kind == "lm":
        model = ks.models.transformer_lm(40, 12, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32)
        inputs = rng.integers(1, 40, size=(3, 4)).astype("int32")
    else:
        model = ks.models.transformer_seq2seq(
            40, 40, 8, 12, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0
        )
        inputs = rng.integers(1, 40, size=(3, 8)).astype("int32")
    options = dict(strategy="beam", num_beams=4, num_return_sequences=4, end_id=5)
    ids, scores = (to_numpy(x) for x in model.generate(inputs, 12, **options))
    model.decoding_reads_cache_rows = False  # the contract's default: reorder the whole cache every step
    model._compiled_decoders.clear()
    gathered_ids, gathered_scores = (to_numpy(x) for x in model.generate(inputs, 12, **options))
    np.testing.assert_array_equal(ids, gathered_ids)
    np.testing.assert_allclose(scores, gathered_scores, atol=1e-5)


def test_three_way_tying_shares_one_matrix_between_encoder_decoder_and_output(rng, tmp_path):
    options = dict(num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0)
    separate = ks.models.transformer_seq2seq(17, 17, 6, 8, tie_embeddings=True, **options)
    shared = ks.models.transformer_seq2seq(17, 17, 6, 8, tie_embeddings=True, share_embeddings=True, **options)
    assert shared.source_embedding is shared.target_embedding
    assert separate.count_params() - shared.count_params() == 17 * 16  # the second V x D embedding
    matrices = [w for w in shared.weights if tuple(w.shape) == (17, 16)]
    assert len(matrices) == 1  # encoder input, decoder input and output projection read one matrix

    inputs = tiny_inputs(rng, "seq2seq")
    features = to_numpy(keras.Model(shared.input, shared.head.input)(inputs)).astype("float64")
    expected = features @ to_numpy(matrices[0]).astype("float64").T + to_numpy(shared.head.bias)
    np.testing.assert_allclose(to_numpy(shared(inputs)), expected, atol=1e-5)
    assert shared.source_embedding.token_embedding.embeddings is matrices[0]
    prompt = inputs["encoder_inputs"]
    np.testing.assert_array_equal(to_numpy(shared.generate(prompt, 8)), uncached_greedy(shared, prompt, 8))

    path = tmp_path / "shared.keras"
    shared.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config()["share_embeddings"] is True and loaded.source_embedding is loaded.target_embedding
    np.testing.assert_allclose(to_numpy(loaded(inputs)), to_numpy(shared(inputs)), atol=1e-6)
    with pytest.raises(ValueError, match="transformer_seq2seq: `share_embeddings` expected one vocabulary"):
        ks.models.transformer_seq2seq(17, 18, 6, 8, share_embeddings=True, **options)

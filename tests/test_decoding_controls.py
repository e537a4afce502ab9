"""The decoding controls: the repetition penalty, the no-repeat n-gram ban and suppressed ids against their
definitions in NumPy, and in `generate` against a step-by-step NumPy decoding of the model's own logits; the
length limit by source length (`max_length_ratio`)."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_seq as ks
from keras_seq import repetition_controls

VOCABULARY = 12


def numpy_penalised(logits, ids, step, penalty):
    """CTRL's penalty (Keskar et al., 2019, section 4.1): a seen id's logit divided by `penalty` if positive,
    multiplied by it if not."""
    out = logits.copy()
    for row in range(len(ids)):
        for token in set(ids[row, :step].tolist()):
            value = logits[row, token]
            out[row, token] = value / penalty if value > 0 else value * penalty
    return out


def numpy_banned(ids, step, size):
    """The ids that would end an n-gram of `size` already in `ids[row, :step]`, by listing every n-gram."""
    banned = np.zeros((len(ids), VOCABULARY), bool)
    for row in range(len(ids)):
        history = ids[row, :step].tolist()
        latest = tuple(history[len(history) - size + 1 :]) if size > 1 else ()
        for start in range(len(history) - size + 1):
            if tuple(history[start : start + size - 1]) == latest:
                banned[row, history[start + size - 1]] = True
    return banned


def histories(seed=0, rows=6, length=14):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 4, (rows, length)).astype("int32")  # 3 ids: many repeated n-grams


@pytest.mark.parametrize("penalty", [1.0, 1.3, 3.0, 0.5])
@pytest.mark.parametrize("step", [1, 5, 14])
def test_penalise_repetitions_is_ctrls_penalty(penalty, step):
    ids = histories()
    logits = np.random.default_rng(1).normal(size=(len(ids), VOCABULARY)).astype("float32")
    expected = numpy_penalised(logits, ids, step, penalty)
    got = repetition_controls.penalise_repetitions(ops.convert_to_tensor(logits), ids, step, penalty)
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, rtol=1e-6)
    as_tensor = repetition_controls.penalise_repetitions(
        ops.convert_to_tensor(logits), ids, ops.convert_to_tensor(step, "int32"), ops.convert_to_tensor(penalty)
    )
    np.testing.assert_allclose(ops.convert_to_numpy(as_tensor), expected, rtol=1e-6)


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("step", [1, 2, 4, 9, 14])
def test_repeated_ngram_ends_are_every_earlier_ngrams_last_id(size, step):
    ids = histories(seed=size + step)
    expected = numpy_banned(ids, step, size) if size else np.zeros((len(ids), VOCABULARY), bool)
    logits = np.zeros((len(ids), VOCABULARY), "float32")
    for given_size in (size, ops.convert_to_tensor(size, "int32")):  # a Python int, or set at run time
        got = repetition_controls.ban_repeated_ngrams(
            ops.convert_to_tensor(logits), ids, ops.convert_to_tensor(step, "int32"), given_size, -1.0
        )
        np.testing.assert_array_equal(ops.convert_to_numpy(got) == -1.0, expected)


@pytest.mark.parametrize("size, banned", [(1, [1, 2, 3]), (2, [3]), (3, [3]), (4, [])])
def test_the_ban_of_a_written_out_history(size, banned):
    ids = np.array([[1, 2, 3, 1, 2, 0, 0]], "int32")  # ... 1 2 | next: 3 would repeat "1 2 3" and "2 3"
    logits = ops.zeros((1, VOCABULARY))
    got = ops.convert_to_numpy(repetition_controls.ban_repeated_ngrams(logits, ids, 5, size, -1.0))[0]
    assert np.flatnonzero(got == -1.0).tolist() == banned


def tiny_lm():
    keras.utils.set_random_seed(4)
    return ks.models.transformer_lm(
        vocabulary_size=VOCABULARY, sequence_length=16, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=16
    )


def numpy_greedy(model, prompt, max_length, penalty=1.0, size=0, suppress=()):
    """Greedy decoding by calling the whole model on each prefix, the controls applied in NumPy."""
    ids = np.array(prompt, "int32")
    while ids.shape[1] < max_length:
        step = ids.shape[1]
        logits = ops.convert_to_numpy(model(ids))[:, -1].astype("float32")
        logits = numpy_penalised(logits, ids, step, penalty)
        forbidden = numpy_banned(ids, step, size) if size else np.zeros_like(logits, bool)
        forbidden[:, [0, *suppress]] = True
        logits[forbidden] = -1e9
        ids = np.concatenate([ids, logits.argmax(-1)[:, None].astype("int32")], axis=1)
    return ids


@pytest.mark.parametrize(
    "controls", [dict(penalty=2.0), dict(size=2), dict(size=1), dict(suppress=(4, 5, 7)), dict(penalty=1.5, size=3)]
)
def test_generate_applies_the_controls_to_the_models_logits(controls):
    model = tiny_lm()
    prompt = [[1, 2, 3], [4, 4, 5]]
    expected = numpy_greedy(model, prompt, 14, **controls)
    got = model.generate(
        np.array(prompt, "int32"),
        14,
        repetition_penalty=controls.get("penalty", 1.0),
        no_repeat_ngram_size=controls.get("size", 0),
        suppress_ids=list(controls.get("suppress", ())),
    )
    np.testing.assert_array_equal(ops.convert_to_numpy(got), expected)
    assert not np.array_equal(expected, numpy_greedy(model, prompt, 14))  # the controls change this decoding


@pytest.mark.parametrize("strategy", ["beam", "sample", "top_k"])
def test_no_ngram_comes_twice_whatever_the_strategy(strategy):
    model = tiny_lm()
    prompt = np.array([[1, 2], [4, 4], [5, 6]], "int32")
    size = 2
    ids, _ = model.generate(
        prompt, 16, strategy=strategy, num_beams=3, num_return_sequences=2, seed=5, no_repeat_ngram_size=size
    )
    for row in ops.convert_to_numpy(ids).reshape(-1, 16):
        ngrams = [tuple(row[i : i + size]) for i in range(len(row) - size + 1)]
        assert len(ngrams) == len(set(ngrams)), row


@pytest.mark.parametrize(
    "argument, value, expected",
    [
        ("no_repeat_ngram_size", -1, "no_repeat_ngram_size"),
        ("no_repeat_ngram_size", 2.5, "no_repeat_ngram_size"),
        ("repetition_penalty", 0.0, "repetition_penalty"),
        ("repetition_penalty", float("nan"), "repetition_penalty"),
        ("suppress_ids", [VOCABULARY], "suppress_ids"),
        ("suppress_ids", "ab", "suppress_ids"),
    ],
)
def test_bad_controls_fail_early_naming_the_argument(argument, value, expected):
    with pytest.raises(ValueError, match=expected):
        tiny_lm().generate(np.array([[1, 2]], "int32"), 6, **{argument: value})


def tiny_translator():
    keras.utils.set_random_seed(6)
    return ks.models.transformer_seq2seq(
        VOCABULARY, VOCABULARY, 12, 16, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=16, dropout=0.0
    )


SOURCES = np.array([[5, 6, 0, 0, 0, 0], [4, 5, 6, 7, 8, 9], [9, 0, 0, 0, 0, 0]], "int32")


@pytest.mark.parametrize("ratio", [0.5, 1.0, 1.7])
def test_max_length_ratio_ends_each_row_at_its_own_limit(ratio):
    """Greedy with the ratio equals greedy without it, cut at each row's limit with the end id written there."""
    model, end = tiny_translator(), 2
    free = ops.convert_to_numpy(model.generate(SOURCES, 16, end_id=end, start_id=1, suppress_ids=[end]))
    limited = ops.convert_to_numpy(
        model.generate(SOURCES, 16, end_id=end, start_id=1, suppress_ids=[end], max_length_ratio=ratio)
    )
    for row, source in enumerate(SOURCES):
        limit = 1 + max(int(np.ceil(ratio * (source != 0).sum())), 1)
        expected = np.concatenate([free[row, :limit], [end], np.zeros(16 - limit - 1, "int32")])
        np.testing.assert_array_equal(limited[row], expected)
    beams = model.generate(SOURCES, 16, strategy="beam", num_beams=3, end_id=end, max_length_ratio=ratio)
    lengths = (ops.convert_to_numpy(beams) != 0).sum(axis=1)  # start id, ids, end id
    assert (lengths <= 2 + np.maximum(np.ceil(ratio * (SOURCES != 0).sum(axis=1)), 1)).all()


def test_max_length_ratio_needs_a_seq2seq_model_and_an_end_id():
    with pytest.raises(ValueError, match="max_length_ratio"):
        tiny_translator().generate(SOURCES, 8, max_length_ratio=1.0)  # no end_id
    with pytest.raises(ValueError, match="max_length_ratio"):
        tiny_lm().generate(np.array([[1, 2]], "int32"), 8, end_id=2, max_length_ratio=1.0)
    with pytest.raises(ValueError, match="max_length_ratio"):
        tiny_translator().generate(SOURCES, 8, end_id=2, max_length_ratio=-1.0)


def numpy_forced_greedy(model, sources, prefixes, max_length, end):
    """Greedy decoding by calling the whole model on each prefix of the target: a row takes its target prefix's
    ids first, then the most likely id (never 0), padding after its end id."""
    ids = np.ones((len(sources), 1), "int32")
    for step in range(1, max_length):
        logits = ops.convert_to_numpy(model({"encoder_inputs": sources, "decoder_inputs": ids}))[:, -1]
        logits[:, 0] = -np.inf
        chosen = logits.argmax(-1)
        given = np.array([row[step - 1] if step - 1 < len(row) else 0 for row in prefixes])
        chosen = np.where(given > 0, given, chosen)
        ended = (ids == end).any(axis=1)
        ids = np.concatenate([ids, np.where(ended, 0, chosen)[:, None].astype("int32")], axis=1)
    return ids


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_a_target_prefix_is_continued_as_the_model_would_continue_it(kind):
    model = tiny_translator() if kind == "transformer" else ks.models.rnn_seq2seq(VOCABULARY, VOCABULARY, 8, 8)
    prefixes = [[7, 3, 3], [], [4]]  # a row without a prefix decodes beside the others
    padded = np.zeros((3, 3), "int32")
    for row, prefix in enumerate(prefixes):
        padded[row, : len(prefix)] = prefix
    got = ops.convert_to_numpy(model.generate(SOURCES, 10, end_id=2, target_prefix=padded))
    np.testing.assert_array_equal(got, numpy_forced_greedy(model, SOURCES, prefixes, 10, end=2))
    np.testing.assert_array_equal(
        got[1], ops.convert_to_numpy(model.generate(SOURCES[1:2], 10, end_id=2))[0]
    )  # no prefix: as without one
    ids, _ = model.generate(
        SOURCES, 10, strategy="beam", num_beams=3, num_return_sequences=3, end_id=2, target_prefix=padded
    )
    for row, prefix in enumerate(prefixes):  # every beam starts with its row's prefix
        assert (ops.convert_to_numpy(ids)[row, :, 1 : 1 + len(prefix)] == prefix).all()


def test_a_bad_target_prefix_fails_early():
    model = tiny_translator()
    with pytest.raises(ValueError, match="target_prefix"):
        model.generate(SOURCES, 4, target_prefix=np.ones((3, 4), "int32"))  # longer than max_length - 1
    with pytest.raises(ValueError, match="target_prefix"):
        model.generate(SOURCES, 8, target_prefix=np.ones((2, 2), "int32"))  # not one per source
    with pytest.raises(ValueError, match="target_prefix"):
        model.generate(SOURCES, 8, target_prefix=np.full((3, 2), VOCABULARY, "int32"))
    with pytest.raises(ValueError, match="target_prefix"):
        tiny_lm().generate(np.array([[1, 2]], "int32"), 8, target_prefix=np.ones((1, 2), "int32"))


def numpy_held_greedy(model, sources, required, max_length, end):
    """Greedy decoding by calling the whole model on each prefix of the target: the end id may not come while a
    row lacks one of its required ids (0: none), padding after its end id."""
    ids = np.ones((len(sources), 1), "int32")
    for _ in range(1, max_length):
        logits = ops.convert_to_numpy(model({"encoder_inputs": sources, "decoder_inputs": ids}))[:, -1]
        logits[:, 0] = -np.inf
        missing = [any(r > 0 and r not in row for r in wanted) for row, wanted in zip(ids, required)]
        logits[missing, end] = -np.inf
        ended = (ids == end).any(axis=1)
        ids = np.concatenate([ids, np.where(ended, 0, logits.argmax(-1))[:, None].astype("int32")], axis=1)
    return ids


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_required_ids_hold_back_the_end_until_each_is_written(kind):
    """`required_ids`: greedy decoding as the model decodes with the end id barred while a required id is missing;
    a row without any decodes as without the option, and every beam that ends holds its row's ids."""
    model = tiny_translator() if kind == "transformer" else ks.models.rnn_seq2seq(VOCABULARY, VOCABULARY, 8, 8)
    end = 2
    bias = [layer for layer in model.layers if layer.name == "logits"]
    if bias:  # the rnn: an end id the model writes at once, so that holding it back changes the decoding
        bias[0].bias.assign(ops.convert_to_numpy(bias[0].bias) + 3.0 * (np.arange(VOCABULARY) == end))
    free = ops.convert_to_numpy(model.generate(SOURCES, 12, end_id=end))
    missing_id = next(i for i in range(4, VOCABULARY) if not (free == i).any())  # in no free translation
    required = np.array([[missing_id, 0], [0, 0], [missing_id, free[2, 1] if free[2, 1] > 3 else 5]], "int32")
    got = ops.convert_to_numpy(model.generate(SOURCES, 12, end_id=end, required_ids=required))
    np.testing.assert_array_equal(got, numpy_held_greedy(model, SOURCES, required, 12, end))
    np.testing.assert_array_equal(got[1], free[1])  # nothing required: as without the option
    assert not np.array_equal(got[0], free[0])  # the held-back end changed the decoding
    ids, _ = model.generate(
        SOURCES, 12, strategy="beam", num_beams=3, num_return_sequences=3, end_id=end, required_ids=required
    )
    ids = ops.convert_to_numpy(ids)
    for row, wanted in enumerate(required):
        for beam in ids[row]:
            if (beam == end).any():
                assert all(w in beam for w in wanted if w > 0)
    with pytest.raises(ValueError, match="required_ids"):
        model.generate(SOURCES, 8, required_ids=required)  # no end_id
    with pytest.raises(ValueError, match="required_ids"):
        model.generate(SOURCES, 8, end_id=end, required_ids=required[:2])  # not one row per source
    with pytest.raises(ValueError, match="required_ids"):
        model.generate(SOURCES, 8, end_id=end, required_ids=np.full((3, 1), VOCABULARY, "int32"))

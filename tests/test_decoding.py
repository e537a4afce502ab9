import math
import sys

import keras
import numpy as np
import pytest
from keras import ops
from layer_checks import to_numpy
from test_random import numpy_row_keys, numpy_uniform_by_row

import keras_seq as ks
from keras_seq import decoding
from keras_seq.decoding_contract import Decodable

START, END, A, B = 1, 2, 3, 4


class MarkovChain(Decodable):
    """A hand-built decoder, not a Keras model: the next-token distribution depends only on the last token.

    It implements the contract's required members alone (the defaults do the rest).
    """

    def __init__(self, transitions):
        transitions = np.asarray(transitions, "float64")
        transitions[:, 0] = 0.0  # id 0 is padding, never generated
        transitions /= transitions.sum(1, keepdims=True)
        self.log_table = np.log(transitions + 1e-12).astype("float32")
        self._compiled_decoders = {}
        self.variables = []

    @property
    def decoding_vocabulary_size(self):
        return self.log_table.shape[0]

    def start_decoding(self, prompt, max_length, copies):
        return ops.zeros((prompt.shape[0] * copies, 1)), None

    def decoding_step(self, ids, cache, index, context, cache_rows=None, copies=1, weights=None):
        return ops.take(ops.convert_to_tensor(self.log_table), ids, axis=0), cache


def chain(rows, vocabulary_size=6):
    """Transition matrix from {token: {next: probability}}, the rest spread evenly."""
    table = np.zeros((vocabulary_size, vocabulary_size))
    for token in range(vocabulary_size):
        given = rows.get(token, {END: 1.0})
        rest = 1.0 - sum(given.values())
        others = [t for t in range(1, vocabulary_size) if t not in given]
        for t in others:
            table[token, t] = rest / len(others)
        for t, prob in given.items():
            table[token, t] = prob
    return MarkovChain(table)


def run(model, prompt, max_length, **kwargs):
    result = decoding.generate(model, np.asarray(prompt, "int32"), max_length, **kwargs)
    return tuple(to_numpy(r) for r in result) if isinstance(result, tuple) else to_numpy(result)


def test_beam_search_finds_the_best_sequence_where_greedy_fails():
    # Greedy takes A (0.6) and then can only reach 0.6 * 0.3; B (0.4) leads to 0.4 * 0.9.
    model = chain({START: {A: 0.6, B: 0.4}, A: {END: 0.3}, B: {END: 0.9}})
    greedy = run(model, [[START]], 4, end_id=END)
    beam = run(model, [[START]], 4, strategy="beam", num_beams=2, end_id=END, length_penalty=0.0)
    assert greedy[0, 1] == A
    np.testing.assert_array_equal(beam, [[START, B, END, 0]])


def test_beam_with_one_beam_equals_greedy_and_top_k_1_equals_greedy():
    rng = np.random.default_rng(0)
    model = MarkovChain(rng.dirichlet(np.ones(7) * 0.5, size=7))
    prompt = [[1, 4], [3, 5], [6, 2]]
    greedy = run(model, prompt, 9)
    np.testing.assert_array_equal(run(model, prompt, 9, strategy="beam", num_beams=1), greedy)
    np.testing.assert_array_equal(run(model, prompt, 9, strategy="top_k", k=1, seed=5), greedy)
    np.testing.assert_array_equal(run(model, prompt, 9, strategy="top_p", p=1e-6, seed=5), greedy)
    table = model.log_table
    for row in greedy:
        for t in range(2, 9):
            assert row[t] == table[row[t - 1]].argmax()


def test_length_penalty_changes_the_choice_as_the_gnmt_formula_says():
    # Short: START END, log-prob -1.0, 1 token. Long: START A B END, log-prob -1.2, 3 tokens.
    step = math.exp(-(1.2 + math.log(0.6)) / 2)
    model = chain({START: {END: math.exp(-1.0), A: 0.6}, A: {B: step}, B: {END: step}}, vocabulary_size=6)
    short = run(
        model, [[START]], 5, strategy="beam", num_beams=3, end_id=END, length_penalty=0.0, num_return_sequences=2
    )
    assert list(short[0][0, 0]) == [START, END, 0, 0, 0]
    np.testing.assert_allclose(short[1][0, 0], -1.0, atol=1e-4)
    ids, scores = run(
        model, [[START]], 5, strategy="beam", num_beams=3, end_id=END, length_penalty=1.0, num_return_sequences=2
    )
    assert list(ids[0, 0]) == [START, A, B, END, 0]
    np.testing.assert_allclose(scores[0], [-1.2 / ((5 + 3) / 6), -1.0 / ((5 + 1) / 6)], atol=1e-4)


def test_early_stopping_ends_a_row_once_its_best_beams_have_ended():
    # The short START END (-1.0) is the likeliest once B's branch passes below it; with the GNMT
    # penalty at alpha 1 the long START A B END (-1.2 over 3 tokens) wins only if search goes on.
    step = math.exp(-(1.2 + math.log(0.6)) / 2)
    model = chain({START: {END: math.exp(-1.0), A: 0.6}, A: {B: step}, B: {END: step}}, vocabulary_size=6)
    settings = dict(strategy="beam", num_beams=2, end_id=END, length_penalty=1.0, num_return_sequences=2)
    full_ids, full_scores = run(model, [[START]], 5, **settings)
    early_ids, early_scores = run(model, [[START]], 5, early_stopping=True, **settings)
    assert list(full_ids[0, 0]) == [START, A, B, END, 0]
    # A B END falls below START END at its third token: both ended, so the row stops with the same two.
    np.testing.assert_array_equal(early_ids, full_ids)
    np.testing.assert_allclose(early_scores, full_scores, atol=1e-5)
    # Under a strong penalty (alpha 2) START END ends at -0.598 and the unfinished START A scores
    # -0.916 / (7/6)^2 = -0.673 at its next length: the row stops. The full search goes on and ranks
    # START A B END first: -0.936 / (8/6)^2 = -0.526.
    model = chain({START: {END: 0.55, A: 0.40}, A: {B: 0.99}, B: {END: 0.99}}, vocabulary_size=6)
    settings = dict(strategy="beam", num_beams=2, end_id=END, length_penalty=2.0)
    assert list(run(model, [[START]], 5, **settings)[0]) == [START, A, B, END, 0]
    assert list(run(model, [[START]], 5, early_stopping=True, **settings)[0]) == [START, END, 0, 0, 0]


@pytest.mark.parametrize("count", [1, 2])
def test_early_stopping_keeps_the_full_search_ranking_by_log_probability(count):
    """Without a length penalty no unfinished beam can pass an ended one: the same ids and scores."""
    rng = np.random.default_rng(count)
    table = rng.dirichlet(np.ones(9) * 0.3, size=9)
    table[:, END] += 0.15
    model = MarkovChain(table)
    prompt = [[1], [3], [5], [7], [8]]
    settings = dict(strategy="beam", num_beams=4, end_id=END, length_penalty=0.0, num_return_sequences=count)
    full = run(model, prompt, 12, **settings)
    early = run(model, prompt, 12, early_stopping=True, **settings)
    if count == 1:
        np.testing.assert_array_equal(early, full)
    else:
        np.testing.assert_array_equal(early[0], full[0])
        np.testing.assert_allclose(early[1], full[1], atol=1e-5)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="counts the steps of torch's eager loop")
def test_beam_search_stops_once_no_unfinished_beam_can_overtake_and_early_stopping_sooner():
    # START END (log 0.7 = -0.36, length 1) is out of reach: an unfinished beam is at most
    # log 0.2 = -1.61, over the largest penalty (15/6)^0.6 = 1.73: -0.93. The search stops there.
    model = chain({START: {END: 0.7, A: 0.2, B: 0.1}, A: {A: 0.5, B: 0.5}, B: {A: 0.5, B: 0.5}})
    steps = []
    step = model.decoding_step
    model.decoding_step = lambda *args, **kwargs: (steps.append(1), step(*args, **kwargs))[1]
    settings = dict(strategy="beam", num_beams=3, end_id=END, max_length=10)
    ids = decoding.generate(model, np.asarray([[START]], "int32"), **settings)
    assert list(to_numpy(ids)[0]) == [START, END] + [0] * 8
    assert len(steps) == 2  # the prompt, then the step that ended the best beam
    # At alpha 3 the largest penalty is (15/6)^3 = 15.6: the best A/B beam, log 0.2 + (k - 1) log 0.5
    # after k tokens, is out of reach once below -0.36 * 15.6 = -5.57, at k = 7 (8 steps, not 10).
    # Early stopping (each unfinished beam at its next length only) stops at once.
    steps[:] = []
    decoding.generate(model, np.asarray([[START]], "int32"), length_penalty=3.0, **settings)
    assert len(steps) == 8
    steps[:] = []
    decoding.generate(model, np.asarray([[START]], "int32"), length_penalty=3.0, early_stopping=True, **settings)
    assert len(steps) == 2


def numpy_beam_search(log_table, prompt, max_length, num_beams, end, alpha):
    """Beam search run to `max_length` (no early stop): ended beams extend by padding at no cost, the best K
    candidates by log-probability go on, and `log p / ((5 + length) / 6) ** alpha` ranks the last K."""
    log_probs = np.array(log_table, "float64")
    log_probs[:, 0] = -np.inf  # padding is never generated
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    beams = [(list(prompt), 0.0, 0, False)]
    for _ in range(len(prompt), max_length):
        candidates = []
        for ids, score, length, ended in beams:
            if ended:
                candidates.append((ids + [0], score, length, True))
                continue
            for token in range(1, len(log_probs)):
                candidates.append((ids + [token], score + log_probs[ids[-1], token], length + 1, token == end))
        beams = sorted(candidates, key=lambda beam: -beam[1])[:num_beams]
    return max(beams, key=lambda beam: beam[1] / ((5 + beam[2]) / 6) ** alpha)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.4, 3.0])
def test_beam_search_stopping_early_keeps_the_full_search_result(alpha):
    """A row stops once no unfinished beam can overtake its best ended one: the full search's ids and score."""
    rng = np.random.default_rng(int(alpha * 10))
    table = rng.dirichlet(np.ones(7) * 0.4, size=7)
    table[:, END] += rng.uniform(0.0, 0.3, size=7)
    model = MarkovChain(table)
    prompts = [[1], [3], [4], [5], [6]]
    settings = dict(strategy="beam", num_beams=3, end_id=END, length_penalty=alpha)
    ids, scores = (
        to_numpy(x)
        for x in decoding.decode(model, ops.convert_to_tensor(np.asarray(prompts, "int32")), 0, 9, **settings)
    )
    for prompt, row, score in zip(prompts, ids[:, 0], scores[:, 0]):
        best, log_prob, length, _ = numpy_beam_search(model.log_table, prompt, 9, 3, END, alpha)
        assert list(row) == best
        np.testing.assert_allclose(score, log_prob / ((5 + length) / 6) ** alpha, atol=1e-4)


def markov_chain_ending_at_different_steps():
    rng = np.random.default_rng(3)
    table = rng.dirichlet(np.ones(8) * 0.4, size=8)
    table[:, END] += np.linspace(0.0, 0.6, 8)  # some rows end early, some late
    return MarkovChain(table)


def small_transformer_seq2seq(tied=False):
    """Random weights over 8 ids, the end id favoured so that its beams end at different steps; it reads its cache
    through `cache_rows` (and with `tied`, shares one table between its embeddings and output layer)."""
    keras.utils.set_random_seed(4)
    model = ks.models.transformer_seq2seq(
        8,
        8,
        6,
        12,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=8,
        tie_embeddings=tied,
        share_embeddings=tied,
    )
    model({"encoder_inputs": np.ones((1, 6), "int32"), "decoder_inputs": np.ones((1, 12), "int32")})
    model.head.variables[-1].assign(np.where(np.arange(8) == END, 0.3, 0.0))
    return model


def transformer_seq2seq_ending_at_different_steps(tied=False):
    """`small_transformer_seq2seq` with the end id held back: its sentences end from the third step on, some never,
    so that dropping the ended ones moves the rows and their sources."""
    model = small_transformer_seq2seq(tied)
    model.head.variables[-1].assign(np.where(np.arange(8) == END, -1.0, 0.0))
    return model


def tied_transformer_seq2seq_ending_at_different_steps():
    """`transformer_seq2seq_ending_at_different_steps` with a tied output layer: its state carries step weights."""
    return transformer_seq2seq_ending_at_different_steps(tied=True)


@pytest.mark.parametrize("strategy", ["beam", "greedy"])
@pytest.mark.parametrize(
    "build",
    [
        markov_chain_ending_at_different_steps,
        transformer_seq2seq_ending_at_different_steps,
        tied_transformer_seq2seq_ending_at_different_steps,
    ],
)
def test_dropping_the_ended_rows_between_steps_gives_the_decoding(strategy, build):
    """search_steps a few positions at a time, over a cache cut to the positions reached, keeping only the unfinished
    groups (as the export does) in reversed order (their cache rows move), writes the ids and scores of one decode
    call."""
    model = build()
    prompt = ops.convert_to_tensor(np.random.default_rng(0).integers(1, 8, size=(6, 1)).astype("int32"))
    settings = dict(strategy=strategy, num_beams=3, end_id=END, length_penalty=0.6, start_id=START)
    expected_ids, expected_scores = (to_numpy(x) for x in decoding.decode(model, prompt, 0, 12, **settings))
    state = decoding.search_start(model, prompt, 0, 12, **settings)
    origin = np.arange(6)
    ids, scores, lengths = {}, {}, {}
    while int(to_numpy(state["step"])) < 12 and not to_numpy(state["groups"]["done"]).all():
        stop = min(int(to_numpy(state["step"])) + 2, 12)
        state = decoding.search_steps(model, decoding.resize_cache(model, state, stop), stop, **settings)  # cache grows
        order, unfinished = (to_numpy(x) for x in decoding.unfinished_groups(state))
        copies = to_numpy(state["groups"]["done"]).shape[1]
        rows = to_numpy(state["rows"]["ids"]).reshape(len(origin), copies, -1)
        for group, source in enumerate(origin):
            ids[source], scores[source] = rows[group], to_numpy(state["groups"]["scores"])[group]
            lengths[source] = to_numpy(state["groups"].get("lengths", state["groups"]["scores"]))[group]
        assert np.all(to_numpy(state["groups"]["done"]).all(1)[order[unfinished:]])
        kept = order[: max(int(unfinished), 1)][::-1]
        state, origin = decoding.take_groups(state, ops.convert_to_tensor(kept)), origin[kept]
    ended = {
        "rows": {"ids": ops.convert_to_tensor(np.concatenate([ids[s] for s in range(6)]))},
        "groups": {
            "scores": ops.convert_to_tensor(np.stack([scores[s] for s in range(6)])),
            "lengths": ops.convert_to_tensor(np.stack([lengths[s] for s in range(6)]).astype("int32")),
        },
    }
    result_ids, result_scores = (to_numpy(x) for x in decoding.search_result(ended, **settings))
    np.testing.assert_array_equal(result_ids, expected_ids)
    np.testing.assert_allclose(result_scores, expected_scores, atol=1e-5)


@pytest.mark.parametrize("tied", [True, False])
def test_a_tied_output_layer_reads_its_table_transposed_once_per_decoding(tied, monkeypatch):
    """A tied head's `E^T` is made once, at the start, as the state's step weights, kept aside with the context
    (`split_context`); each step's logits are `h @ weights + b`, and the decoding equals one whose head transposes
    `E` at every step. An untied head's kernel needs no weights."""
    model = small_transformer_seq2seq(tied)
    inputs = ops.convert_to_tensor(np.random.default_rng(2).integers(1, 8, size=(3, 6)).astype("int32"))
    settings = dict(strategy="beam", num_beams=3, end_id=END, length_penalty=0.6, start_id=START)
    state = decoding.search_start(model, inputs, 0, 12, **settings)
    rest, fixed = decoding.split_context(state)
    assert "weights" not in rest and "context" not in rest["sources"]
    assert decoding.join_context(rest, fixed).keys() == state.keys()
    if not tied:
        assert "weights" not in state and fixed[1] is None
        return
    table = to_numpy(model.target_embedding.token_embedding.embeddings)
    np.testing.assert_array_equal(to_numpy(state["weights"]["kernel"]), table.T)
    zero_kernel = {"kernel": ops.zeros_like(state["weights"]["kernel"])}  # the step reads the kernel it is given
    ids = ops.convert_to_tensor(np.full((9, 1), START, "int32"))
    rows = state["rows"]
    logits, _ = model.decoding_step(ids, rows["cache"], 0, fixed[0], rows["cache_rows"], 3, zero_kernel)
    np.testing.assert_allclose(to_numpy(logits)[:, 0], np.broadcast_to(to_numpy(model.head.bias), (9, 8)), atol=1e-6)
    decoded_as_when_transposing_at_every_step(model, inputs, 12, settings, monkeypatch)


def decoded_as_when_transposing_at_every_step(model, inputs, max_length, settings, monkeypatch):
    """`decode`'s ids (checked equal, scores close, to those of the model without step weights), as NumPy."""
    decoded = [to_numpy(x) for x in decoding.decode(model, inputs, 0, max_length, **settings)]
    monkeypatch.setattr(type(model), "decoding_step_weights", lambda self: None)
    assert "weights" not in decoding.search_start(model, inputs, 0, max_length, **settings)
    transposing = [to_numpy(x) for x in decoding.decode(model, inputs, 0, max_length, **settings)]
    np.testing.assert_array_equal(decoded[0], transposing[0])
    np.testing.assert_allclose(decoded[1], transposing[1], atol=1e-5)
    return decoded[0]


@pytest.mark.parametrize("attention, input_feeding", [("bahdanau", False), ("luong", True), (None, False)])
def test_a_tied_rnn_seq2seq_reads_its_table_transposed_once_per_decoding(attention, input_feeding, monkeypatch):
    """The attentional GRU's tied head (the translate recipe's default model) takes the state's `E^T` as its kernel
    too: a zero kernel gives the bias, and the decoding equals one whose head transposes `E` at every step."""
    keras.utils.set_random_seed(6)
    model = ks.models.rnn_seq2seq(
        9,
        9,
        embedding_dim=8,
        units=8,
        cell="gru",
        attention=attention,
        input_feeding=input_feeding,
        tie_embeddings=True,
        share_embeddings=True,
    )
    model({"encoder_inputs": np.ones((1, 5), "int32"), "decoder_inputs": np.ones((1, 10), "int32")})
    rng = np.random.default_rng(4)  # the same weights on every backend, the end id held back
    model.set_weights([rng.normal(0.0, 0.5, np.shape(w)) for w in model.get_weights()])
    model.head.bias.assign(rng.normal(0.0, 0.3, 9) - 2.0 * (np.arange(9) == END))
    inputs = ops.convert_to_tensor(np.random.default_rng(3).integers(1, 9, size=(3, 5)).astype("int32"))
    settings = dict(strategy="beam", num_beams=2, end_id=END, length_penalty=0.6, start_id=START)
    state = decoding.search_start(model, inputs, 0, 10, **settings)
    np.testing.assert_array_equal(to_numpy(state["weights"]["kernel"]), to_numpy(model.source_embedding.embeddings).T)
    context = decoding.split_context(state)[1][0]
    ids = ops.convert_to_tensor(np.full((6, 1), START, "int32"))
    zero_kernel = {"kernel": ops.zeros_like(state["weights"]["kernel"])}
    logits, _ = model.decoding_step(ids, state["rows"]["cache"], 0, context, weights=zero_kernel)
    np.testing.assert_allclose(to_numpy(logits)[:, 0], np.broadcast_to(to_numpy(model.head.bias), (6, 9)), atol=1e-6)
    ids = decoded_as_when_transposing_at_every_step(model, inputs, 10, settings, monkeypatch)
    if attention:  # the sources decode differently (without attention these weights forget them)
        assert len({tuple(row) for row in ids[:, 0]}) > 1


class StepOnly(Decodable):
    """Inherits the decoding contract but defines its step alone."""

    def decoding_step(self, ids, cache, index, context, cache_rows=None, copies=1, weights=None):
        return ids, cache


class DuckTyped:
    """The members of a decoder without the contract's class: it does not inherit `Decodable`."""

    decoding_vocabulary_size = 6

    def decoding_step(self, ids, cache, index, context, cache_rows=None, copies=1, weights=None):
        return ids, cache


def test_a_model_without_the_decoding_contract_fails_naming_what_it_lacks():
    prompt = np.asarray([[START]], "int32")
    lacking = r"StepOnly, which does not define decoding_vocabulary_size, start_decoding\."
    with pytest.raises(ValueError, match=r"StepOnly.generate: .*" + lacking):
        decoding.generate(StepOnly(), prompt, 4)
    with pytest.raises(ValueError, match=r"decode: .*" + lacking):
        decoding.decode(StepOnly(), ops.convert_to_tensor(prompt), 0, 4)
    with pytest.raises(ValueError, match=r"greedy_ragged_prompts: .*does not define decoding_vocabulary_size"):
        decoding.greedy_ragged_prompts(StepOnly(), ops.convert_to_tensor(prompt), ops.convert_to_tensor([1]))
    with pytest.raises(
        ValueError,
        match=r"DuckTyped.generate: .*inherits keras_seq.models.Decodable.*does not inherit "
        r"it and lacks .*start_decoding",
    ):
        decoding.generate(DuckTyped(), prompt, 4)
    with pytest.raises(ValueError, match=r"step_weights: .*does not inherit it and lacks"):
        decoding.step_weights(object())
    assert isinstance(ks.models.rnn_lm(9, embedding_dim=8, units=8), ks.models.Decodable)


def test_the_contract_defaults_fit_a_language_model_whose_whole_cache_follows_its_rows():
    model = chain({})
    assert model.input_vocabulary_size == model.decoding_vocabulary_size == 6
    assert model.decoding_length_limits == (None, None) and model._inputs_are_prompts
    assert model.decoding_step_weights() is None and model.decoding_input_ids("ids") == "ids"
    assert not model.decoding_shares_context and not model.decoding_reads_cache_rows
    assert model.decoding_cache_time_axis is None
    cache = {"a": ops.convert_to_tensor(np.arange(6).reshape(3, 2)), "b": (ops.convert_to_tensor([5, 6, 7]),)}
    reordered = model.reorder_cache(cache, ops.convert_to_tensor([2, 2, 0], "int32"))
    np.testing.assert_array_equal(to_numpy(reordered["a"]), [[4, 5], [4, 5], [0, 1]])
    np.testing.assert_array_equal(to_numpy(reordered["b"][0]), [7, 7, 5])


def test_an_untied_or_headless_model_has_no_step_weights():
    untied = ks.models.rnn_seq2seq(9, 9, embedding_dim=8, units=8, cell="gru")
    assert decoding.step_weights(untied) is None
    assert decoding.step_weights(ks.models.rnn_lm(9, embedding_dim=8, units=8)) is None
    assert decoding.step_weights(markov_chain_ending_at_different_steps()) is None  # the contract's default


def test_cache_windows_double_from_16_and_end_at_max_length():
    model = small_transformer_seq2seq()
    assert decoding.cache_windows(model, 1, 12) == [12]
    assert decoding.cache_windows(model, 1, 24) == [16, 24]
    assert decoding.cache_windows(model, 1, 66) == [16, 32, 66]  # not 64: within 1.5x of 66
    assert decoding.cache_windows(model, 1, 200) == [16, 32, 64, 128, 200]
    assert decoding.cache_windows(model, 20, 200) == [32, 64, 128, 200]  # a prompt of 20 ids fills the first window
    assert decoding.cache_windows(model, 1, np.int64(24)) == [16, 24]
    assert decoding.cache_windows(markov_chain_ending_at_different_steps(), 1, 200) == [200]  # no cache to cut


@pytest.mark.parametrize("strategy", ["beam", "greedy"])
@pytest.mark.parametrize("prompt", [None, 4, 20])
def test_decoding_through_growing_cache_windows_equals_one_full_cache(strategy, prompt):
    """`decode`, eager and compiled by `generate`, grows its cache through windows (16, 32, then 50; a language
    model's prompt of 20 starts at 32), reading the prompt over the first: the ids and scores of one loop over the
    whole cache (a window cut short of the positions written would change them)."""
    keras.utils.set_random_seed(5)
    if prompt:
        model = ks.models.transformer_lm(8, 50, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
        inputs = np.random.default_rng(1).integers(1, 8, size=(3, prompt)).astype("int32")
    else:
        model = ks.models.transformer_seq2seq(8, 8, 6, 50, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
        inputs = np.random.default_rng(1).integers(1, 8, size=(3, 6)).astype("int32")
    first_step = prompt or 1
    assert decoding.cache_windows(model, first_step, 50) == ([32, 50] if first_step > 16 else [16, 32, 50])
    inputs = ops.convert_to_tensor(inputs)
    settings = dict(strategy=strategy, num_beams=2, num_return_sequences=2, end_id=None, start_id=START)
    start = decoding.search_start(model, inputs, 0, 50, **settings)
    full = decoding.search_steps(model, start, 50, **settings)
    expected_ids, expected_scores = (to_numpy(x) for x in decoding.search_result(full, **settings))
    windowed = decoding.search_start(model, inputs, 0, 50, first_window=True, **settings)
    first = decoding.cache_windows(model, first_step, 50)[0]
    assert {x.shape[2] for x in keras.tree.flatten(windowed["rows"]["cache"])} == {first}
    assert {x.shape[2] for x in keras.tree.flatten(start["rows"]["cache"])} == {50}
    np.testing.assert_allclose(to_numpy(windowed["rows"]["logits"]), to_numpy(start["rows"]["logits"]), atol=1e-5)
    for ids, scores in (decoding.decode(model, inputs, 0, 50, **settings), model.generate(inputs, 50, **settings)):
        np.testing.assert_array_equal(to_numpy(ids), expected_ids)
        np.testing.assert_allclose(to_numpy(scores), expected_scores, atol=1e-5)
    assert (expected_ids[..., 16:] != 0).all()  # no end id: every window was decoded


def test_finished_sequences_are_padded_and_keep_their_score():
    model = chain({START: {END: 0.9}})
    ids, scores = run(model, [[START], [START]], 5, end_id=END, num_return_sequences=2, strategy="sample", seed=0)
    for row, score in zip(ids.reshape(-1, 5), scores.reshape(-1)):
        end = list(row).index(END) if END in row else None
        if end is not None:
            assert np.all(row[end + 1 :] == 0)


def test_min_length_holds_back_the_end_id_until_that_position():
    # END is by far the likeliest next token everywhere; min_length pushes it to position 4.
    model = chain({START: {END: 0.9, A: 0.1}, A: {END: 0.9, B: 0.1}, B: {END: 0.9, A: 0.1}})
    for strategy in ("greedy", "beam"):
        free = run(model, [[START]], 7, end_id=END, strategy=strategy, num_beams=2)
        held = run(model, [[START]], 7, end_id=END, strategy=strategy, num_beams=2, min_length=4)
        np.testing.assert_array_equal(free, [[START, END, 0, 0, 0, 0, 0]])
        np.testing.assert_array_equal(held, [[START, A, B, A, END, 0, 0]])


PROBS = np.array([0.0, 0.05, 0.1, 0.15, 0.2, 0.5])  # id 0 (padding) is never drawn
WIDTH = 4  # of `distinct_prompts`


def distinct_prompts(count):
    """`count` different prompts of `WIDTH` ids in 1..5: a row's draws follow its ids (`_random.row_keys`), so
    a test of a distribution draws from different prompts (or copies), not one prompt repeated."""
    return ((np.arange(count)[:, None] // 5 ** np.arange(WIDTH)[None]) % 5 + 1).astype("int32")


def test_sampling_is_repeatable_with_a_seed_and_follows_the_distribution():
    model = MarkovChain(np.tile(PROBS, (6, 1)))
    prompt, length = distinct_prompts(400), WIDTH + 5
    first = run(model, prompt, length, strategy="sample", seed=11)
    np.testing.assert_array_equal(first, run(model, prompt, length, strategy="sample", seed=11))
    assert not np.array_equal(first, run(model, prompt, length, strategy="sample", seed=12))
    lowest = run(model, prompt, length, strategy="sample", seed=-(2**31))  # any int32 seed
    np.testing.assert_array_equal(lowest, run(model, prompt, length, strategy="sample", seed=-(2**31)))
    frequencies = np.bincount(first[:, WIDTH:].ravel(), minlength=6) / first[:, WIDTH:].size
    np.testing.assert_allclose(frequencies, PROBS, atol=0.03)
    cold = run(model, prompt, length, strategy="sample", seed=11, temperature=0.25)
    sharpened = PROBS**4 / np.sum(PROBS**4)  # softmax(log p / 0.25)
    np.testing.assert_allclose(np.mean(cold[:, WIDTH:] == 5), sharpened[5], atol=0.03)


def test_a_rows_draws_do_not_depend_on_the_rows_beside_it():
    model = MarkovChain(np.tile(PROBS, (6, 1)))
    prompt = distinct_prompts(40)
    together = run(model, prompt, WIDTH + 5, strategy="sample", seed=3)
    alone = [run(model, prompt[row : row + 1], WIDTH + 5, strategy="sample", seed=3)[0] for row in (0, 17, 39)]
    np.testing.assert_array_equal(np.stack(alone), together[[0, 17, 39]])
    np.testing.assert_array_equal(run(model, prompt[::-1], WIDTH + 5, strategy="sample", seed=3), together[::-1])


def test_sampling_draws_the_same_ids_on_every_backend():
    """Gumbel-max over the seed's counter-based noise, keyed by each row's ids, written out in NumPy: no backend's
    own generator."""
    model = MarkovChain(np.tile(PROBS, (6, 1)))
    prompt = distinct_prompts(50)
    ids = run(model, prompt, WIDTH + 5, strategy="sample", seed=7, temperature=0.7)
    expected, keys = prompt, numpy_row_keys(prompt, 1)
    for step in range(WIDTH, WIDTH + 5):
        logits = model.log_table[expected[:, -1]].copy()
        logits[:, 0] = -1e9  # padding is never drawn
        noise = numpy_uniform_by_row(logits.shape, 7, step, keys).astype("float32")
        chosen = np.argmax(logits / np.float32(0.7) - np.log(-np.log(noise)), axis=-1)
        expected = np.concatenate([expected, chosen[:, None].astype("int32")], axis=1)
    np.testing.assert_array_equal(ids, expected)


@pytest.mark.parametrize("strategy", ["sample", "top_k", "top_p"])
def test_a_large_temperature_keeps_padding_and_early_ends_out(strategy):
    """Forbidden ids stay forbidden however flat the temperature makes the rest."""
    model = MarkovChain(np.tile(PROBS, (6, 1)))
    prompt = distinct_prompts(200)
    ids = run(
        model,
        prompt,
        WIDTH + 7,
        strategy=strategy,
        temperature=1e10,
        seed=0,
        end_id=5,
        min_length=WIDTH + 5,
        k=6,
        p=1.0,
    )[:, WIDTH:]
    first_end = np.argmax(np.concatenate([ids, np.full((200, 1), 5)], axis=1) == 5, axis=1)
    assert first_end.min() >= 5  # end_id not before min_length
    for row, end in zip(ids, first_end):
        assert np.all(row[:end] != 0)  # no padding id generated before the end
    assert set(np.unique(ids[:, :5])) == {1, 2, 3, 4}  # flat over the allowed ids


def test_top_k_and_top_p_sample_only_inside_their_sets():
    model = MarkovChain(np.tile(PROBS, (6, 1)))
    prompt = distinct_prompts(300)
    top_2 = run(model, prompt, WIDTH + 4, strategy="top_k", k=2, seed=1)[:, WIDTH:]
    assert set(np.unique(top_2)) == {4, 5}
    nucleus = run(model, prompt, WIDTH + 4, strategy="top_p", p=0.6, seed=1)[:, WIDTH:]  # 0.5 + 0.2 reaches 0.6
    assert set(np.unique(nucleus)) == {4, 5}
    np.testing.assert_allclose(np.mean(nucleus == 5), 0.5 / 0.7, atol=0.05)
    # k=4 keeps {2, 3, 4, 5} (mass 0.95); p=0.88 of those keeps {3, 4, 5} (0.85 / 0.95 reaches 0.88), where p=0.88
    # of every id would keep 2 as well (0.85 before it): the top-p set is taken within the top-k one.
    both = run(model, prompt, WIDTH + 4, strategy="top_k_top_p", k=4, p=0.88, seed=1)[:, WIDTH:]
    assert set(np.unique(both)) == {3, 4, 5}
    np.testing.assert_allclose(np.mean(both == 5), 0.5 / 0.85, atol=0.05)


def numpy_top_k_then_top_p(logits, k, p):
    """The ids kept by top-k (0: every id) then top-p within them (1: every one), written out on each row."""
    kept = np.zeros(logits.shape, bool)
    for row, values in enumerate(logits):
        order = np.argsort(-values, kind="stable")[: k or len(values)]
        probs = np.exp(values[order] - values[order].max())
        probs /= probs.sum()
        inside = np.cumsum(probs) - probs < p if p < 1 else np.ones(len(order), bool)
        kept[row, order[inside]] = True
    return kept


@pytest.mark.parametrize("k, p", [(0, 1.0), (3, 1.0), (0, 0.8), (4, 0.7), (1000, 0.5), (1, 0.3)])
def test_top_k_then_top_p_set_at_run_time_keeps_the_ids_numpy_keeps(k, p):
    """The export's one-sort filter with tensor k and p keeps what top-k then top-p keep, and leaves the rest at
    the decoding's minus infinity."""
    logits = np.random.default_rng(5).normal(0.0, 2.0, (6, 40)).astype("float32")
    filtered = to_numpy(
        decoding._keep_top_k_then_top_p(ops.convert_to_tensor(logits), ops.array(k, "int32"), ops.array(p, "float32"))
    )
    kept = numpy_top_k_then_top_p(logits, k, p)
    np.testing.assert_array_equal(filtered > decoding._NEG_INF, kept)
    np.testing.assert_array_equal(filtered[kept], logits[kept])


def test_top_k_past_the_vocabulary_keeps_every_id_and_numpy_scalars_are_accepted():
    model = MarkovChain(np.tile(PROBS, (6, 1)))
    prompt = np.ones((50, 1), "int32")
    sampled = run(model, prompt, 5, strategy="sample", seed=4)
    np.testing.assert_array_equal(run(model, prompt, 5, strategy="top_k", seed=4), sampled)  # default k=50 > V=6
    np.testing.assert_array_equal(run(model, prompt, 5, strategy="top_k", k=6, seed=4), sampled)
    traced_use = [
        decoding.decode(model, ops.convert_to_tensor(prompt), 4, 5, **kw)[0]
        for kw in (dict(strategy="top_k", k=50), dict(strategy="sample"))
    ]  # `decode` unchecked, as inside an export
    np.testing.assert_array_equal(*map(to_numpy, traced_use))
    numpy_scalars = dict(
        strategy="top_p",
        p=np.float32(0.6),
        temperature=np.float64(1.0),
        k=np.int64(3),
        seed=np.int32(4),
        end_id=np.int64(5),
        min_length=np.int64(2),
        num_return_sequences=np.int64(2),
    )
    python_scalars = dict(
        strategy="top_p",
        p=float(np.float32(0.6)),
        temperature=1.0,
        k=3,
        seed=4,
        end_id=5,
        min_length=2,
        num_return_sequences=2,
    )
    for expected, got in zip(run(model, prompt, 5, **python_scalars), run(model, prompt, 5, **numpy_scalars)):
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match=r"end_id.*\[0, 6\)"):
        run(model, prompt, 5, end_id=np.int64(6))
    with pytest.raises(ValueError, match=r"end_id"):
        run(model, prompt, 5, end_id=True)
    with pytest.raises(ValueError, match=r"early_stopping.*True or False.*'yes'"):
        run(model, prompt, 5, strategy="beam", early_stopping="yes")


def test_num_return_sequences_shapes_and_scores():
    rng = np.random.default_rng(1)
    model = MarkovChain(rng.dirichlet(np.ones(6), size=6))
    ids, scores = run(model, [[1], [2]], 4, strategy="beam", num_beams=3, num_return_sequences=3)
    assert ids.shape == (2, 3, 4) and scores.shape == (2, 3)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
    for row, score in zip(ids[0], scores[0]):
        log_prob = sum(model.log_table[a, b] for a, b in zip(row[:-1], row[1:]))
        np.testing.assert_allclose(score, log_prob / ((5 + 3) / 6) ** 0.6, rtol=1e-4)
    ids, scores = run(model, [[1], [2]], 4, strategy="sample", num_return_sequences=5, seed=3)
    assert ids.shape == (2, 5, 4) and scores.shape == (2, 5)


def test_transformer_lm_cached_generation_equals_uncached():
    model = ks.models.transformer_lm(40, 24, num_layers=2, hidden_dim=32, num_heads=4, intermediate_dim=64)
    prompt = np.array([[5, 6, 7, 8], [9, 10, 11, 12]], "int32")
    cached = to_numpy(model.generate(prompt, 12))
    ids = prompt
    for _ in range(8):
        next_ids = to_numpy(model(ids))[:, -1, 1:].argmax(-1).astype("int32") + 1  # id 0 is padding
        ids = np.concatenate([ids, next_ids[:, None]], axis=1)
    np.testing.assert_array_equal(cached, ids)


def test_transformer_lm_learns_a_sequence_and_generates_it_after_save_load(tmp_path):
    """Counting upward modulo 9 (ids 1..9): a trained model must continue any prompt."""
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 9, 256)
    data = ((starts[:, None] + np.arange(13)[None]) % 9 + 1).astype("int32")
    model = ks.models.transformer_lm(10, 16, num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64)
    model.compile(keras.optimizers.Adam(3e-3), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0))
    model.fit(data[:, :-1], data[:, 1:], epochs=15, batch_size=32, verbose=0)
    prompt = np.array([[3, 4], [8, 9]], "int32")
    generated = to_numpy(model.generate(prompt, 10))
    np.testing.assert_array_equal(generated[0], [3, 4, 5, 6, 7, 8, 9, 1, 2, 3])
    path = tmp_path / "lm.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ks.models.TransformerLM)
    np.testing.assert_array_equal(to_numpy(loaded.generate(prompt, 10)), generated)
    np.testing.assert_array_equal(to_numpy(loaded.generate(prompt, 10, strategy="beam")), generated)


def test_bad_arguments_raise_value_errors():
    model = ks.models.transformer_lm(20, 8, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
    prompt = np.ones((2, 3), "int32")
    cases = [
        (dict(max_length=2), r"TransformerLM.generate.*inputs.*at most max_length=2"),
        (dict(max_length=9), r"max_length.*at most the model.s target length 8"),
        (dict(max_length=6, strategy="beam", num_beams=0), r"num_beams.*positive integer"),
        (dict(max_length=6, strategy="top_p", p=0.0), r"p.*\(0, 1\]"),
        (dict(max_length=6, strategy="top_p", p=1.5), r"p.*\(0, 1\]"),
        (dict(max_length=6, strategy="top_k", k=0), r"k.*positive integer"),
        (dict(max_length=6, strategy="sample", temperature=-1.0), r"temperature.*> 0"),
        (dict(max_length=6, end_id=20), r"end_id.*\[0, 20\)"),
        (dict(max_length=6, min_length=7), r"min_length.*\[0, max_length=6\]"),
        (dict(max_length=6, strategy="nucleus"), r"strategy.*'greedy'"),
        (
            dict(max_length=6, strategy="beam", num_beams=2, num_return_sequences=3),
            r"num_return_sequences.*num_beams=2",
        ),
        (dict(max_length=6, start_id=0), r"start_id.*\[1, 20\)"),
        (dict(max_length=6, start_id=20), r"start_id.*\[1, 20\)"),
        (dict(max_length=6, strategy="sample", seed=2**31), r"seed.*int32.*\[-2\*\*31, 2\*\*31\)"),
        (dict(max_length=6, strategy="sample", seed=-(2**31) - 1), r"seed.*int32"),
        (dict(max_length=6, strategy="sample", seed=1.5), r"seed.*int32"),
        (dict(max_length=6, strategy="beam", length_penalty="long"), r"length_penalty.*number"),
        (dict(max_length=6, strategy="sample", temperature=0.0), r"temperature.*> 0"),
        (dict(max_length=6, strategy="sample", temperature=float("nan")), r"temperature.*finite number > 0"),
        (dict(max_length=6, strategy="beam", length_penalty=float("inf")), r"length_penalty.*finite"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            model.generate(prompt, **kwargs)
    with pytest.raises(ValueError, match=r"inputs.*integer token ids"):
        model.generate(np.ones((2, 3), "float32"), 6)
    with pytest.raises(ValueError, match=r"inputs.*ids in \[0, 20\)"):
        model.generate(np.full((2, 3), 25, "int32"), 6)
    with pytest.raises(ValueError, match=r"inputs.*rectangular.*nested lists of different lengths"):
        model.generate([[3, 4, 5], [6]], 6)


def test_input_lengths_the_model_cannot_decode_raise_value_errors():
    lm = ks.models.transformer_lm(20, 8, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
    seq2seq = ks.models.transformer_seq2seq(20, 20, 6, 8, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
    rnn = ks.models.rnn_seq2seq(20, 20, embedding_dim=8, units=8)
    for model in (lm, seq2seq, rnn):
        name = type(model).__name__
        with pytest.raises(ValueError, match=rf"{name}.generate.*inputs.*at least one id per row.*\(2, 0\)"):
            model.generate(np.zeros((2, 0), "int32"), 6)
    with pytest.raises(ValueError, match=r"TransformerSeq2Seq.generate.*inputs.*source length 6 ids.*7 ids"):
        seq2seq.generate(np.ones((1, 7), "int32"), 6)
    with pytest.raises(ValueError, match=r"TransformerSeq2Seq.generate.*max_length.*target length 8"):
        seq2seq.generate(np.ones((1, 3), "int32"), 9)
    assert to_numpy(seq2seq.generate(np.ones((1, 6), "int32"), 8)).shape == (1, 8)
    assert to_numpy(rnn.generate(np.ones((1, 30), "int32"), 4)).shape == (1, 4)  # a source longer than max_length


def test_nested_list_prompts_equal_arrays():
    model = ks.models.transformer_lm(20, 8, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
    prompt = [[3, 4, 5], [6, 7, 8]]
    np.testing.assert_array_equal(
        to_numpy(model.generate(prompt, 6)), to_numpy(model.generate(np.asarray(prompt, "int32"), 6))
    )


def test_argmax_helper_takes_the_first_of_tied_maxima(rng):
    logits = rng.normal(size=(4, 9)).astype("float32")
    logits[1, [2, 6]] = 5.0
    logits[3, :] = 0.0
    chosen = to_numpy(decoding._argmax(keras.ops.convert_to_tensor(logits)))
    np.testing.assert_array_equal(chosen, np.argmax(logits, axis=-1))
    assert chosen[1] == 2 and chosen[3] == 0


@pytest.mark.parametrize("vocabulary,beams", [(4000, 4), (100, 4), (37, 3), (4001, 1), (2, 4)])
def test_best_continuations_equal_numpy_over_every_candidate(vocabulary, beams):
    """`_best_continuations` against the whole `(B, K * V)` candidate matrix in NumPy: scores plus log-softmax,
    an ended beam continuing by padding (id 0) alone at no cost, the best K by value with ties to the lower index."""
    rng = np.random.default_rng(vocabulary + beams)
    batch = 5
    logits = rng.integers(-6, 6, size=(batch * beams, vocabulary)).astype("float32")  # ties inside a beam
    logits[1] = 0.0  # a beam of one value
    logits[:, 0] = decoding._NEG_INF  # masked as `_mask_forbidden` masks padding
    scores = -rng.random((batch, beams)).astype("float32") * 5
    done = rng.random((batch, beams)) < 0.3
    done[2] = True  # a group whose beams all ended
    done[3] = False
    if vocabulary >= 100:  # a tie between a block with a larger maximum and an earlier block: the earlier id first
        logits[4 * beams, 1:] = -5.0
        logits[4 * beams, [90, 10, 95]] = [5.0, 4.0, 4.0]
        scores[4], done[4] = [0.0] + [-100.0] * (beams - 1), False
    log_probs = logits.astype("float64") - np.log(np.exp(logits.astype("float64")).sum(axis=1, keepdims=True))
    log_probs = log_probs.reshape(batch, beams, vocabulary)
    pad_only = np.where(np.arange(vocabulary) == 0, 0.0, decoding._NEG_INF)
    candidates = (scores[..., None] + np.where(done[..., None], pad_only, log_probs)).reshape(batch, -1)
    expected_index = np.argsort(-candidates, axis=1, kind="stable")[:, :beams]

    values, index = (
        to_numpy(t) for t in decoding._best_continuations(*map(ops.convert_to_tensor, (logits, scores, done)), beams)
    )
    np.testing.assert_allclose(values, np.take_along_axis(candidates, expected_index, axis=1), rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(np.take_along_axis(candidates, index, axis=1), values, rtol=1e-6, atol=1e-4)
    if keras.backend.backend() != "torch":  # torch.topk orders ties as it likes
        np.testing.assert_array_equal(index, expected_index)
    assert (index[2] % vocabulary == 0).all()  # ended beams continue by padding only


@pytest.mark.parametrize("index_kind", ["int", "tensor"])
def test_slice_update_writes_a_copy_as_keras_ops_does(rng, index_kind):
    """`backend.slice_update` against NumPy, its input left as it was (torch writes through slices, not Keras' op)."""
    from keras_seq import backend

    x = rng.normal(size=(2, 2, 6, 3)).astype("float32")
    updates = rng.normal(size=(2, 2, 1, 3)).astype("float32")
    index = 4 if index_kind == "int" else ops.convert_to_tensor(4, "int32")
    given = ops.convert_to_tensor(x)
    written = to_numpy(backend.slice_update(given, (0, 0, index, 0), ops.convert_to_tensor(updates)))
    expected = x.copy()
    expected[:, :, 4:5] = updates
    np.testing.assert_array_equal(written, expected)
    np.testing.assert_array_equal(to_numpy(given), x)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_decoding_steps_without_layer_calls_equal_those_through_them(monkeypatch, policy, strategy):
    """On eager torch a decoding step calls its layers' `call` where no cast is needed (`call_in_step`): the
    ids and scores equal those of steps through `Layer.__call__` (elsewhere both run `__call__`)."""
    keras.config.set_dtype_policy(policy)
    try:
        model = ks.models.transformer_seq2seq(
            30, 30, 8, 8, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32
        )
        source = np.random.default_rng(0).integers(1, 30, (3, 8)).astype("int32")
        settings = dict(strategy=strategy, num_beams=3, num_return_sequences=2 if strategy == "beam" else 1, end_id=2)
        direct = run(model, source, 8, **settings)
        calls = []
        through_call = lambda layer, inputs, **kwargs: calls.append(layer) or layer(inputs, **kwargs)
        monkeypatch.setattr(sys.modules["keras_seq.models.transformer"], "call_in_step", through_call)
        model._compiled_decoders.clear()
        called = run(model, source, 8, **settings)
    finally:
        keras.config.set_dtype_policy("float32")
    assert calls, "the decoding steps did not go through call_in_step"
    np.testing.assert_equal(direct, called)

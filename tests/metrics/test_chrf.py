"""Tests for keras_seq.metrics.chrf: every score is checked against sacreBLEU."""

import doctest
import importlib
import pathlib
import random

import pytest
import sacrebleu

# Shared sentence data (tests/metrics is on sys.path while these tests run).
from test_bleu import CHINESE_PAIRS, EDGE_REFS, MULTI_REF_CASES, REAL_PAIRS, assert_runs_on_the_standard_library

from keras_seq.metrics.chrf import corpus_chrf

CHRF_PATH = pathlib.Path(__file__).resolve().parents[2] / "keras_seq" / "metrics" / "chrf.py"

REAL_HYPS = [hyp for hyp, _ in REAL_PAIRS]
REAL_REFS = [ref for _, ref in REAL_PAIRS]
CHINESE_HYPS = [hyp for hyp, _ in CHINESE_PAIRS]
CHINESE_REFS = [ref for _, ref in CHINESE_PAIRS]

# chrF2 (sacreBLEU's default) and chrF++ (Popović 2017).
VARIANTS = {"chrF": dict(word_order=0), "chrF++": dict(word_order=2)}


def _sacrechrf(hypotheses, ref_streams, **kwargs):
    """sacreBLEU's chrF; `ref_streams` uses sacreBLEU's list-of-streams."""
    metric = sacrebleu.CHRF(**kwargs)
    return metric.corpus_score(list(hypotheses), [list(s) for s in ref_streams])


def _assert_matches(hypotheses, ref_streams, **kwargs):
    expected = _sacrechrf(hypotheses, ref_streams, **kwargs).score
    got = corpus_chrf(hypotheses, ref_streams, **kwargs)
    assert got == pytest.approx(expected, abs=1e-9), (got, expected)
    return expected


# --------------------------------------------------------------------------
# Real sentences.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_real_corpus_matches_sacrebleu(variant, lowercase):
    expected = _assert_matches(REAL_HYPS, [REAL_REFS], lowercase=lowercase, **VARIANTS[variant])
    assert 0.0 < expected < 100.0
    # The flat reference layout means the same single stream.
    assert corpus_chrf(REAL_HYPS, REAL_REFS, lowercase=lowercase, **VARIANTS[variant]) == pytest.approx(
        expected, abs=1e-9
    )


def test_sacrebleu_defaults_and_compat_function():
    # No keyword at all: sacreBLEU's CHRF() and its corpus_chrf() are chrF2.
    expected = sacrebleu.corpus_chrf(REAL_HYPS, [REAL_REFS]).score
    assert sacrebleu.CHRF().corpus_score(REAL_HYPS, [REAL_REFS]).score == expected
    assert corpus_chrf(REAL_HYPS, REAL_REFS) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("hyp, ref", REAL_PAIRS, ids=range(len(REAL_PAIRS)))
def test_real_single_segment_matches_sacrebleu(hyp, ref, variant):
    _assert_matches([hyp], [[ref]], **VARIANTS[variant])


@pytest.mark.parametrize("whitespace", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_chinese_matches_sacrebleu(variant, whitespace):
    expected = _assert_matches(CHINESE_HYPS, [CHINESE_REFS], whitespace=whitespace, **VARIANTS[variant])
    # Character n-grams give partial credit without any word segmentation.
    assert 0.0 < expected < 100.0


@pytest.mark.parametrize("eps_smoothing", [False, True])
@pytest.mark.parametrize("whitespace", [False, True])
@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_option_grid_matches_sacrebleu(variant, lowercase, whitespace, eps_smoothing):
    _assert_matches(
        REAL_HYPS,
        [REAL_REFS],
        lowercase=lowercase,
        whitespace=whitespace,
        eps_smoothing=eps_smoothing,
        **VARIANTS[variant],
    )


@pytest.mark.parametrize("beta", [0, 0.5, 1, 2, 3])
@pytest.mark.parametrize(
    "char_order, word_order",
    [
        # Both 0 leaves nothing to score; that is rejected (see bad input).
        (c, w)
        for c in (0, 1, 3, 6, 8)
        for w in (0, 1, 2, 3)
        if c + w > 0
    ],
)
def test_orders_and_beta_match_sacrebleu(char_order, word_order, beta):
    _assert_matches(REAL_HYPS, [REAL_REFS], char_order=char_order, word_order=word_order, beta=beta)


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lowercase_matches_sacrebleu(variant, lowercase):
    hyps = ["THE SUMMIT WILL BE HELD IN GENEVA NEXT WEEK.", "The Naïve Tourist Ordered A Café Au Lait."]
    refs = ["The summit will be held in Geneva next week.", "The naïve tourist ordered a café au lait."]
    _assert_matches(hyps, [refs], lowercase=lowercase, **VARIANTS[variant])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lowercase_changes_score(variant):
    hyps = ["THE SUMMIT WILL BE HELD IN GENEVA NEXT WEEK."]
    refs = ["The summit will be held in Geneva next week."]
    kwargs = VARIANTS[variant]
    assert corpus_chrf(hyps, refs, lowercase=True, **kwargs) == pytest.approx(100.0, abs=1e-9)
    assert corpus_chrf(hyps, refs, lowercase=False, **kwargs) < 100.0


def test_corpus_statistics_are_pooled_not_averaged():
    sentence_mean = sum(corpus_chrf([h], [r]) for h, r in REAL_PAIRS) / len(REAL_PAIRS)
    corpus = corpus_chrf(REAL_HYPS, REAL_REFS)
    assert abs(corpus - sentence_mean) > 1e-6


# --------------------------------------------------------------------------
# Edge cases: BLEU's (shared) and chrF-specific ones, as reference streams.
# --------------------------------------------------------------------------

CHRF_EDGE_CASES = {
    "empty_hypothesis_only": ([""], [["The cat sat on the mat."]]),
    "empty_reference_only": (["The cat sat on the mat."], [[""]]),
    "hypothesis_and_reference_empty": ([""], [[""]]),
    "whitespace_only_both": ([" \t "], [["\n  "]]),
    "empty_reference_among_others": ([REAL_HYPS[0], REAL_HYPS[1]], [["", REAL_REFS[1]]]),
    "no_character_matches": (["xyz qvw"], [["abc def"]]),
    "shorter_than_char_order": (["ab"], [["abc"]]),
    "single_characters": (["a"], [["a"]]),
    "word_matches_without_bigrams": (["mat the on sat cat"], [["the cat sat on the mat"]]),
    "punctuation_splitting": (
        ['(hi) "quoted," -dash end. x ! ... ?!'],
        [['(hi) " quoted " , - dash end . x! ... ?!']],
    ),
    "non_ascii_punctuation_kept": (["« Bonjour », dit-il…"], [["«Bonjour», dit-il..."]]),
    "unicode_whitespace": (["a\u00a0b\u2003c\u3000d"], [["a b c d"]]),
    "repeated_ngrams_are_clipped": (["the the the the the"], [["the cat the mat"]]),
    "leading_and_trailing_whitespace": (["  The cat sat.  \n"], [["The cat sat."]]),
}
ALL_EDGE_CASES = {**{f"bleu_{name}": case for name, case in EDGE_REFS.items()}, **CHRF_EDGE_CASES}


@pytest.mark.parametrize("eps_smoothing", [False, True])
@pytest.mark.parametrize("whitespace", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("case", sorted(ALL_EDGE_CASES))
def test_edge_cases_match_sacrebleu(case, variant, whitespace, eps_smoothing):
    hyps, streams = ALL_EDGE_CASES[case]
    _assert_matches(hyps, streams, whitespace=whitespace, eps_smoothing=eps_smoothing, **VARIANTS[variant])


@pytest.mark.parametrize(
    "case",
    [
        "empty_hypothesis_only",
        "empty_reference_only",
        "hypothesis_and_reference_empty",
        "no_character_matches",
        "bleu_all_hypotheses_empty",
    ],
)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_zero_score_paths(case, variant):
    hyps, streams = ALL_EDGE_CASES[case]
    assert _sacrechrf(hyps, streams, **VARIANTS[variant]).score == 0.0
    assert corpus_chrf(hyps, streams, **VARIANTS[variant]) == 0.0


def test_effective_order_skips_orders_without_ngrams():
    # "ab" has no 3..6-grams: those orders are left out of the averages, so
    # the score is computed from orders 1 and 2 only.
    got = corpus_chrf(["ab"], ["abc"])
    assert got == pytest.approx(_sacrechrf(["ab"], [["abc"]]).score, abs=1e-9)
    precision, recall = 1.0, (2 / 3 + 1 / 2) / 2
    assert got == pytest.approx(100 * 5 * precision * recall / (4 * precision + recall), abs=1e-9)
    # With epsilon smoothing the missing orders count against the score.
    assert corpus_chrf(["ab"], ["abc"], eps_smoothing=True) < got


def test_whitespace_option_changes_score():
    hyps, refs = ["the cat sat"], ["thecat sat"]
    assert corpus_chrf(hyps, refs) == pytest.approx(100.0, abs=1e-9)
    assert corpus_chrf(hyps, refs, whitespace=True) < 100.0


# --------------------------------------------------------------------------
# Multiple references.
# --------------------------------------------------------------------------

CHRF_MULTI_REF_CASES = {
    # The second reference is the better match and must be the one used.
    "best_reference_is_second": (
        ["The cat is sitting on the mat."],
        [["A dog barked loudly."], ["The cat is sitting on the mat!"]],
    ),
    # Segment-wise selection: each segment picks its own best stream.
    "best_reference_differs_per_segment": (
        ["The cat sat on the mat.", "It is raining today."],
        [["The cat sat on the mat.", "Nothing alike here."], ["Unrelated words entirely.", "It is raining today!"]],
    ),
    # Identical references: the tie keeps the first, scores are the same.
    "duplicate_references": (REAL_HYPS[:4], [REAL_REFS[:4], REAL_REFS[:4]]),
    "empty_reference_stream_entry": (["The cat sat.", ""], [["", "A dog."], ["The cat sat!", ""]]),
    "three_streams_real": (
        REAL_HYPS[:3],
        [
            REAL_REFS[:3],
            [
                "The company's revenue increased by 3.5% to $1,000 million in 2023.",
                "The author, who is well known, would arrive at 10:30 a.m., he said.",
                '"We are happy," said the coach.',
            ],
            REAL_HYPS[1:4],
        ],
    ),
}
ALL_MULTI_REF_CASES = {
    **{f"bleu_{name}": (hyps, streams) for name, (hyps, streams, _) in MULTI_REF_CASES.items()},
    **CHRF_MULTI_REF_CASES,
}


@pytest.mark.parametrize("eps_smoothing", [False, True])
@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("case", sorted(ALL_MULTI_REF_CASES))
def test_multiple_references_match_sacrebleu(case, variant, lowercase, eps_smoothing):
    hyps, streams = ALL_MULTI_REF_CASES[case]
    _assert_matches(hyps, streams, lowercase=lowercase, eps_smoothing=eps_smoothing, **VARIANTS[variant])


def test_several_references_use_the_best_one():
    hyps, streams = CHRF_MULTI_REF_CASES["best_reference_is_second"]
    best = corpus_chrf(hyps, streams)
    assert best == pytest.approx(corpus_chrf(hyps, [streams[1]]), abs=1e-9)
    assert best > corpus_chrf(hyps, [streams[0]])
    # The order of the streams does not matter.
    assert corpus_chrf(hyps, streams[::-1]) == pytest.approx(best, abs=1e-9)


# --------------------------------------------------------------------------
# Randomized comparison: short noisy strings hit n-gram clipping, empty and
# one-character segments, punctuation splitting and reference selection.
# --------------------------------------------------------------------------


def _random_segment(rng):
    alphabet = "aabbcAB .,!()'\"-é\t"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 16)))


@pytest.mark.parametrize("seed", range(12))
def test_random_corpora_match_sacrebleu(seed):
    rng = random.Random(seed)
    num_segments = rng.randrange(1, 6)
    num_streams = rng.randrange(1, 4)
    hyps = [_random_segment(rng) for _ in range(num_segments)]
    streams = [[_random_segment(rng) for _ in range(num_segments)] for _ in range(num_streams)]
    for _ in range(8):
        char_order = rng.randrange(0, 7)
        kwargs = dict(
            char_order=char_order,
            word_order=rng.randrange(0 if char_order else 1, 4),
            beta=rng.choice([0, 1, 2, 3]),
            lowercase=rng.random() < 0.5,
            whitespace=rng.random() < 0.5,
            eps_smoothing=rng.random() < 0.5,
        )
        _assert_matches(hyps, streams, **kwargs)


# --------------------------------------------------------------------------
# Input containers.
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_input",
    [
        lambda: (tuple(REAL_HYPS), tuple(REAL_REFS)),
        lambda: (tuple(REAL_HYPS), (tuple(REAL_REFS),)),
        lambda: (REAL_HYPS, [tuple(REAL_REFS)]),
        lambda: (iter(REAL_HYPS), (ref for ref in REAL_REFS)),
    ],
    ids=["flat_tuple", "tuple_of_tuples", "list_of_tuples", "iterators"],
)
def test_tuple_and_iterable_inputs(make_input):
    expected = _sacrechrf(REAL_HYPS, [REAL_REFS]).score
    hyps, refs = make_input()
    assert corpus_chrf(hyps, refs) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("references", [[], [[]], (), ([], [])], ids=["flat", "one_stream", "tuple", "two_streams"])
def test_empty_corpus_returns_zero(references):
    # sacreBLEU itself raises IndexError on an empty corpus; 0.0 is ours.
    assert corpus_chrf([], references) == 0.0
    assert corpus_chrf([], references, word_order=2) == 0.0


def test_returns_builtin_float():
    assert type(corpus_chrf(REAL_HYPS, REAL_REFS)) is float
    assert type(corpus_chrf([""], [""])) is float
    assert type(corpus_chrf([""], [""], eps_smoothing=True)) is float


def test_does_not_modify_inputs():
    hyps, refs = list(REAL_HYPS), [list(REAL_REFS), list(REAL_HYPS)]
    corpus_chrf(hyps, refs, word_order=2, lowercase=True)
    assert hyps == REAL_HYPS and refs == [REAL_REFS, REAL_HYPS]


# --------------------------------------------------------------------------
# Bad input.
# --------------------------------------------------------------------------


BAD_INPUTS = [
    # (id, kwargs, argument name the message must mention)
    ("hyps_bare_str", dict(hypotheses="The cat sat.", references=["The cat sat."]), "hypotheses"),
    ("hyps_none", dict(hypotheses=None, references=["The cat sat."]), "hypotheses"),
    ("hyps_int", dict(hypotheses=42, references=["The cat sat."]), "hypotheses"),
    ("hyps_none_entry", dict(hypotheses=["The cat sat.", None], references=["a", "b"]), r"hypotheses\[1\]"),
    ("hyps_bytes_entry", dict(hypotheses=[b"The cat sat."], references=["The cat sat."]), r"hypotheses\[0\]"),
    ("refs_bare_str", dict(hypotheses=["The cat sat."], references="The cat sat."), "references"),
    ("refs_none", dict(hypotheses=["The cat sat."], references=None), "references"),
    ("refs_flat_too_short", dict(hypotheses=["a", "b"], references=["a"]), "references"),
    ("refs_flat_too_long", dict(hypotheses=["a"], references=["a", "b"]), "references"),
    ("refs_empty", dict(hypotheses=["a", "b"], references=[]), "references"),
    ("refs_stream_too_short", dict(hypotheses=["a", "b"], references=[["a", "b"], ["a"]]), r"references\[1\]"),
    ("refs_mixed_str_and_stream", dict(hypotheses=["a"], references=[["a"], "a"]), r"references\[1\]"),
    ("refs_flat_none_entry", dict(hypotheses=["a", "b"], references=["a", None]), r"references\[1\]"),
    ("refs_stream_none_entry", dict(hypotheses=["a"], references=[[None]]), r"references\[0\]\[0\]"),
    ("char_order_negative", dict(hypotheses=["a"], references=["a"], char_order=-1), "char_order"),
    ("char_order_float", dict(hypotheses=["a"], references=["a"], char_order=6.0), "char_order"),
    ("char_order_none", dict(hypotheses=["a"], references=["a"], char_order=None), "char_order"),
    ("word_order_bool", dict(hypotheses=["a"], references=["a"], word_order=True), "word_order"),
    ("word_order_str", dict(hypotheses=["a"], references=["a"], word_order="2"), "word_order"),
    ("no_orders", dict(hypotheses=["a"], references=["a"], char_order=0, word_order=0), "char_order and word_order"),
    ("beta_negative", dict(hypotheses=["a"], references=["a"], beta=-1), "beta"),
    ("beta_nan", dict(hypotheses=["a"], references=["a"], beta=float("nan")), "beta"),
    ("beta_inf", dict(hypotheses=["a"], references=["a"], beta=float("inf")), "beta"),
    ("beta_str", dict(hypotheses=["a"], references=["a"], beta="2"), "beta"),
]


@pytest.mark.parametrize(
    "kwargs, argument",
    [pytest.param(kwargs, argument, id=id_) for id_, kwargs, argument in BAD_INPUTS],
)
def test_bad_input_raises_value_error(kwargs, argument):
    with pytest.raises(ValueError, match=rf"^corpus_chrf: .*{argument}"):
        corpus_chrf(**kwargs)


def test_length_mismatch_message_reports_both_lengths():
    with pytest.raises(ValueError) as info:
        corpus_chrf(["a", "b", "c"], [["a", "b", "c"], ["a", "b"]])
    message = str(info.value)
    assert "references[1]" in message and "2" in message and "3" in message
    assert "hypotheses" in message


def test_bad_order_message_shows_value():
    with pytest.raises(ValueError) as info:
        corpus_chrf(["a"], ["a"], word_order=-2)
    assert "-2" in str(info.value) and "non-negative int" in str(info.value)


# --------------------------------------------------------------------------
# Module hygiene.
# --------------------------------------------------------------------------


def test_import_does_not_pull_in_tensorflow_or_keras():
    assert_runs_on_the_standard_library(CHRF_PATH, 'module.corpus_chrf(["a b c d"], ["a b c d"], word_order=2)')


def test_public_surface():
    module = importlib.import_module("keras_seq.metrics.chrf")
    assert module.__all__ == ["corpus_chrf"]
    metrics = importlib.import_module("keras_seq.metrics")
    assert metrics.corpus_chrf is corpus_chrf
    assert "corpus_chrf" in metrics.__all__
    assert {"corpus_bleu", "MaskedAccuracy", "Perplexity"} <= set(metrics.__all__)


def test_docstring_example():
    module = importlib.import_module("keras_seq.metrics.chrf")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0

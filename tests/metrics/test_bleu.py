"""Tests for keras_seq.metrics.bleu: every score is checked against sacreBLEU."""

import doctest
import importlib
import pathlib
import subprocess
import sys
import textwrap

import pytest
import sacrebleu
from sacrebleu.tokenizers.tokenizer_zh import TokenizerZh

from keras_seq.metrics.bleu import _tokenize_zh, corpus_bleu

TOKENIZERS = ["13a", "none", "char", "intl", "zh"]

METRICS_DIR = pathlib.Path(__file__).resolve().parents[2] / "keras_seq" / "metrics"
BLEU_PATH = METRICS_DIR / "bleu.py"
SEGMENTS_PATH = METRICS_DIR / "segments.py"

# (hypothesis, reference): typical MT output against a human translation.
# They cover decimals, thousands separators, hyphens, quotes, HTML entities,
# mixed case, accents and French/German quotation marks.
REAL_PAIRS = [
    (
        "The company's revenue grew by 3.5% to $1,000 million last year.",
        "The company's revenues rose 3.5% to $1,000 million last year.",
    ),
    (
        "He said the well-known author would arrive at 10:30 a.m.",
        "He said that the well-known writer would arrive at 10:30 a.m.",
    ),
    ('"We are very happy with the result," said the coach.', '"We are very pleased with the result," the coach said.'),
    ("Tom &amp; Jerry is a cartoon from 1940.", "Tom & Jerry is a cartoon created in 1940."),
    (
        "The naïve tourist ordered a café au lait and a croissant.",
        "The naive tourist ordered a café au lait and a croissant.",
    ),
    ("Die Regierung hat am Montag neue Maßnahmen angekündigt.", "Die Regierung kündigte am Montag neue Maßnahmen an."),
    (
        "« C'est une décision historique », a déclaré le ministre.",
        "« C'est une décision historique », a affirmé le ministre.",
    ),
    (
        "Temperatures will reach 25-30 degrees on the weekend.",
        "Temperatures will reach 25 to 30 degrees over the weekend.",
    ),
    (
        "The EU-wide survey involved more than 12,500 people.",
        "More than 12,500 people took part in the EU-wide survey.",
    ),
    (
        "Please send your questions to info@example.com before Friday.",
        "Please send your questions to info@example.com by Friday.",
    ),
    ("The match ended 2-1 after extra time.", "The game ended 2-1 after extra time."),
    ("In 2019, the population was about 8.4 million.", "In 2019 the population was approximately 8.4 million."),
    ("She doesn't know whether (or when) the train will come.", "She does not know if (or when) the train is coming."),
    ("The price is 4,99 € per kilogram.", "It costs €4.99 per kilo."),
    ("Der Präsident sagte: „Wir müssen jetzt handeln.“", "Der Präsident erklärte: „Wir müssen jetzt handeln.“"),
    (
        "Le président a dit : « Nous devons agir maintenant ! »",
        "Le président a déclaré : « Nous devons agir dès maintenant ! »",
    ),
    ("THE SUMMIT WILL BE HELD IN GENEVA NEXT WEEK.", "The summit will be held in Geneva next week."),
    ("Rain is expected tomorrow &mdash; bring an umbrella!", "Rain is expected tomorrow, so bring an umbrella!"),
    (
        "Scientists have discovered a new species of frog in the Amazon rainforest.",
        "Scientists discovered a new frog species in the Amazon rain forest.",
    ),
    (
        "The app costs 0.99 USD; it's available on iOS & Android.",
        "The app costs $0.99 and it is available for iOS and Android.",
    ),
    (
        "Over 1,000 people attended the concert on Saturday night.",
        "More than 1,000 people attended Saturday night's concert.",
    ),
    ('She asked: "Is this the right way to the station?"', 'She asked, "Is this the way to the station?"'),
]
REAL_HYPS = [hyp for hyp, _ in REAL_PAIRS]
REAL_REFS = [ref for _, ref in REAL_PAIRS]

CHINESE_PAIRS = [
    ("今天天气很好，我们去公园散步吧。", "今天天气不错，我们去公园散散步吧。"),
    ("他在北京大学学习计算机科学。", "他在北京大学读计算机科学。"),
    ("这家咖啡馆的拿铁非常好喝。", "这家咖啡店的拿铁很好喝。"),
]
# Characters where sacreBLEU's "zh" rules are easy to get wrong: curly quotes, a
# dash, an arrow and "≈" (split: sacreBLEU's U+2001-U+2A6D), "×" (U+00D7, not
# split), an Extension B ideograph (not split), an entity (not unescaped), a final
# "2019." (no padding), Latin words and full-width digits between ideographs.
CHINESE_EDGE_PAIRS = [
    ("他说：“明天见”——再见→好", "他说：“明天见”—再见→好的"),
    ("面积约3×4≈12米，2019.", "面积约 3 × 4 ≈ 12 米 , 2019 ."),
    ("𠀀字很少见 &quot;OK&quot; ok", '𠀀 字很少见 "OK" ok'),
    ("用ＧＰＵ训练了１２个小时。", "用 GPU 训练了 12 个小时 。"),
]


def _sacrebleu(hypotheses, ref_streams, **kwargs):
    """Full sacreBLEU result; `ref_streams` uses sacreBLEU's list-of-streams."""
    return sacrebleu.corpus_bleu(list(hypotheses), [list(s) for s in ref_streams], **kwargs)


# --------------------------------------------------------------------------
# Real sentences.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("tokenize", TOKENIZERS)
def test_real_corpus_matches_sacrebleu(tokenize, lowercase):
    expected = _sacrebleu(REAL_HYPS, [REAL_REFS], tokenize=tokenize, lowercase=lowercase).score
    got = corpus_bleu(REAL_HYPS, REAL_REFS, tokenize=tokenize, lowercase=lowercase)
    assert 0.0 < expected < 100.0
    assert got == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("tokenize", TOKENIZERS)
@pytest.mark.parametrize("hyp, ref", REAL_PAIRS, ids=range(len(REAL_PAIRS)))
def test_real_single_segment_matches_sacrebleu(hyp, ref, tokenize):
    expected = _sacrebleu([hyp], [[ref]], tokenize=tokenize).score
    assert corpus_bleu([hyp], [ref], tokenize=tokenize) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("tokenize", TOKENIZERS)
def test_chinese_matches_sacrebleu(tokenize):
    hyps = [hyp for hyp, _ in CHINESE_PAIRS]
    refs = [ref for _, ref in CHINESE_PAIRS]
    expected = _sacrebleu(hyps, [refs], tokenize=tokenize).score
    assert corpus_bleu(hyps, refs, tokenize=tokenize) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("hyp, ref", CHINESE_EDGE_PAIRS)
def test_chinese_edge_characters_match_sacrebleu(hyp, ref):
    for tokenize in ("zh", "13a", "intl"):
        expected = _sacrebleu([hyp], [[ref]], tokenize=tokenize).score
        assert corpus_bleu([hyp], [ref], tokenize=tokenize) == pytest.approx(expected, abs=1e-9), tokenize


def test_zh_tokenizer_equals_sacrebleus_on_the_basic_plane_and_two_cjk_supplement_blocks():
    reference_tokenizer = TokenizerZh()
    planes = [*range(0x00, 0xD800), *range(0xE000, 0x10000), *range(0x20000, 0x20100), *range(0x2F800, 0x2F900)]
    characters = [chr(code) for code in planes]
    for start in range(0, len(characters), 50):
        line = "x" + "a".join(characters[start : start + 50]) + " 9."
        assert _tokenize_zh(line) == reference_tokenizer(line).split(), line


def test_char_tokenization_scores_chinese_above_zero():
    # Without spaces, word-level tokenizers see one token per sentence, so
    # only "char" gives partial credit here.
    hyps = [hyp for hyp, _ in CHINESE_PAIRS]
    refs = [ref for _, ref in CHINESE_PAIRS]
    expected = _sacrebleu(hyps, [refs], tokenize="char").score
    assert expected > 0.0
    assert corpus_bleu(hyps, refs, tokenize="char") == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("lowercase", [False, True])
def test_lowercase_matches_sacrebleu(lowercase):
    hyps = ["THE SUMMIT WILL BE HELD IN GENEVA NEXT WEEK.", "The Naïve Tourist Ordered A Café Au Lait."]
    refs = ["The summit will be held in Geneva next week.", "The naïve tourist ordered a café au lait."]
    expected = _sacrebleu(hyps, [refs], lowercase=lowercase).score
    assert corpus_bleu(hyps, refs, lowercase=lowercase) == pytest.approx(expected, abs=1e-9)


def test_lowercase_changes_score():
    hyps = ["THE SUMMIT WILL BE HELD IN GENEVA NEXT WEEK."]
    refs = ["The summit will be held in Geneva next week."]
    assert corpus_bleu(hyps, refs, lowercase=True) == pytest.approx(100.0, abs=1e-9)
    assert corpus_bleu(hyps, refs, lowercase=False) < 100.0


# --------------------------------------------------------------------------
# Edge cases. Each entry: (hypotheses, reference streams).
# --------------------------------------------------------------------------

EDGE_CASES = {
    "empty_hypothesis_among_others": (
        [REAL_HYPS[0], "", REAL_HYPS[2]],
        [[REAL_REFS[0], REAL_REFS[1], REAL_REFS[2]]],
    ),
    "all_hypotheses_empty": (["", ""], [[REAL_REFS[0], REAL_REFS[1]]]),
    "whitespace_only_hypothesis": (["   \t ", REAL_HYPS[3]], [[REAL_REFS[0], REAL_REFS[3]]]),
    "no_ngram_matches": (["Completely unrelated output here"], ["The cat sat on the mat."]),
    "only_unigram_matches": (["mat the on sat cat"], ["the cat sat on the mat"]),
    "no_4grams_in_corpus": (["the cat", "a dog"], [["the cat", "a dog"]]),
    "hypothesis_longer_than_reference": (
        ["The cat sat quietly on the old mat in the kitchen all day long."],
        [["The cat sat on the mat."]],
    ),
    "hypothesis_shorter_than_reference": (
        ["The cat sat on the mat."],
        [["The black cat sat quietly on the old mat in the kitchen."]],
    ),
    "identical": ([REAL_REFS[1], REAL_REFS[4]], [[REAL_REFS[1], REAL_REFS[4]]]),
    "entities_newlines_and_skipped": (
        ["He said &quot;yes&quot; &lt;3 &amp;amp; left.\n", "A well-\nknown <skipped> fact"],
        [['He said "yes" <3 & left.', "A wellknown fact"]],
    ),
    "trailing_whitespace": (["The cat sat on the mat .  \n"], [["The cat sat on the mat.\t"]]),
}
EDGE_REFS = {
    # Flat-string references are only for a single stream; wrap them.
    name: (hyps, refs if isinstance(refs[0], list) else [refs])
    for name, (hyps, refs) in EDGE_CASES.items()
}


@pytest.mark.parametrize("tokenize", TOKENIZERS)
@pytest.mark.parametrize("case", sorted(EDGE_REFS))
def test_edge_cases_match_sacrebleu(case, tokenize):
    hyps, streams = EDGE_REFS[case]
    expected = _sacrebleu(hyps, streams, tokenize=tokenize).score
    assert corpus_bleu(hyps, streams, tokenize=tokenize) == pytest.approx(expected, abs=1e-9)


def test_zero_score_paths():
    for case in ("all_hypotheses_empty", "no_ngram_matches", "no_4grams_in_corpus"):
        hyps, streams = EDGE_REFS[case]
        expected = _sacrebleu(hyps, streams).score
        assert expected == 0.0, case
        assert corpus_bleu(hyps, streams) == pytest.approx(expected, abs=1e-9)


def test_exp_smoothing_path():
    hyps, streams = EDGE_REFS["only_unigram_matches"]
    result = _sacrebleu(hyps, streams)
    # Unigrams match but no higher order does, so only smoothing keeps the
    # score above zero.
    assert result.counts[0] > 0 and result.counts[1:] == [0, 0, 0]
    assert result.score > 0.0
    assert corpus_bleu(hyps, streams) == pytest.approx(result.score, abs=1e-9)


@pytest.mark.parametrize(
    "case, penalized",
    [
        ("hypothesis_longer_than_reference", False),
        ("hypothesis_shorter_than_reference", True),
    ],
)
def test_brevity_penalty(case, penalized):
    hyps, streams = EDGE_REFS[case]
    result = _sacrebleu(hyps, streams)
    assert (result.bp < 1.0) == penalized
    assert corpus_bleu(hyps, streams) == pytest.approx(result.score, abs=1e-9)


# --------------------------------------------------------------------------
# Multiple references.
# --------------------------------------------------------------------------

MULTI_REF_CASES = {
    # Hypothesis has 8 tokens (13a splits off the period); references have
    # 5, 9 and 15: the 9-token one is closest, so a brevity penalty applies
    # even though a shorter reference exists.
    "closest_length": (
        ["The cat is sitting on the mat."],
        [
            ["The cat sat down."],
            ["The black cat is sitting on the mat."],
            ["A small black cat is quietly sitting on the old mat in the hall."],
        ],
        9,
    ),
    # Hypothesis has 5 tokens; references have 6 and 4: a tie, the shorter
    # one (4) is used, so no brevity penalty applies.
    "tie_goes_to_shorter": (
        ["The cat sat on mats"],
        [["The cat is on the mat"], ["The cat sat on"]],
        4,
    ),
    "tie_goes_to_shorter_order_swapped": (
        ["The cat sat on mats"],
        [["The cat sat on"], ["The cat is on the mat"]],
        4,
    ),
    "corpus_of_three_with_two_streams": (
        REAL_HYPS[:3],
        [
            REAL_REFS[:3],
            [
                "The company's revenue increased by 3.5% to $1,000 million in 2023.",
                "The author, who is well known, would arrive at 10:30 a.m., he said.",
                '"We are happy," said the coach.',
            ],
        ],
        None,
    ),
}


@pytest.mark.parametrize("tokenize", TOKENIZERS)
@pytest.mark.parametrize("case", sorted(MULTI_REF_CASES))
def test_multiple_references_match_sacrebleu(case, tokenize):
    hyps, streams, _ = MULTI_REF_CASES[case]
    expected = _sacrebleu(hyps, streams, tokenize=tokenize).score
    assert corpus_bleu(hyps, streams, tokenize=tokenize) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("case", ["closest_length", "tie_goes_to_shorter", "tie_goes_to_shorter_order_swapped"])
def test_reference_length_selection(case):
    hyps, streams, expected_ref_len = MULTI_REF_CASES[case]
    result = _sacrebleu(hyps, streams)
    assert result.ref_len == expected_ref_len
    assert corpus_bleu(hyps, streams) == pytest.approx(result.score, abs=1e-9)


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
    expected = _sacrebleu(REAL_HYPS, [REAL_REFS]).score
    hyps, refs = make_input()
    assert corpus_bleu(hyps, refs) == pytest.approx(expected, abs=1e-9)


def test_flat_references_equal_single_stream():
    assert corpus_bleu(REAL_HYPS, REAL_REFS) == pytest.approx(corpus_bleu(REAL_HYPS, [REAL_REFS]), abs=1e-9)


@pytest.mark.parametrize("references", [[], [[]], (), ([], [])], ids=["flat", "one_stream", "tuple", "two_streams"])
def test_empty_corpus_returns_zero(references):
    # sacreBLEU itself raises IndexError on an empty corpus; 0.0 is ours.
    assert corpus_bleu([], references) == 0.0


def test_returns_builtin_float():
    assert type(corpus_bleu(REAL_HYPS, REAL_REFS)) is float


# --------------------------------------------------------------------------
# Bad input.
# --------------------------------------------------------------------------


BAD_INPUTS = [
    # (id, kwargs, argument name the message must mention)
    ("hyps_bare_str", dict(hypotheses="The cat sat.", references=["The cat sat."]), "hypotheses"),
    ("hyps_none", dict(hypotheses=None, references=["The cat sat."]), "hypotheses"),
    ("hyps_int", dict(hypotheses=42, references=["The cat sat."]), "hypotheses"),
    ("hyps_int_entry", dict(hypotheses=["The cat sat.", 3], references=["a", "b"]), r"hypotheses\[1\]"),
    ("hyps_none_entry", dict(hypotheses=["The cat sat.", None], references=["a", "b"]), r"hypotheses\[1\]"),
    ("hyps_bytes_entry", dict(hypotheses=[b"The cat sat."], references=["The cat sat."]), r"hypotheses\[0\]"),
    ("refs_bare_str", dict(hypotheses=["The cat sat."], references="The cat sat."), "references"),
    ("refs_none", dict(hypotheses=["The cat sat."], references=None), "references"),
    ("refs_flat_too_short", dict(hypotheses=["a", "b"], references=["a"]), "references"),
    ("refs_empty", dict(hypotheses=["a", "b"], references=[]), "references"),
    ("refs_stream_too_short", dict(hypotheses=["a", "b"], references=[["a", "b"], ["a"]]), r"references\[1\]"),
    ("refs_mixed_str_and_stream", dict(hypotheses=["a"], references=[["a"], "a"]), r"references\[1\]"),
    ("refs_flat_none_entry", dict(hypotheses=["a", "b"], references=["a", None]), r"references\[1\]"),
    ("refs_stream_none_entry", dict(hypotheses=["a"], references=[[None]]), r"references\[0\]\[0\]"),
    ("refs_stream_int_entry", dict(hypotheses=["a"], references=[["a"], [7]]), r"references\[1\]\[0\]"),
    ("tokenize_ja_mecab", dict(hypotheses=["a"], references=["a"], tokenize="ja-mecab"), "tokenize"),
    ("tokenize_wrong_case", dict(hypotheses=["a"], references=["a"], tokenize="13A"), "tokenize"),
    ("tokenize_none", dict(hypotheses=["a"], references=["a"], tokenize=None), "tokenize"),
]


@pytest.mark.parametrize(
    "kwargs, argument",
    [pytest.param(kwargs, argument, id=id_) for id_, kwargs, argument in BAD_INPUTS],
)
def test_bad_input_raises_value_error(kwargs, argument):
    with pytest.raises(ValueError, match=rf"^corpus_bleu: .*{argument}"):
        corpus_bleu(**kwargs)


def test_length_mismatch_message_reports_both_lengths():
    with pytest.raises(ValueError) as info:
        corpus_bleu(["a", "b", "c"], [["a", "b", "c"], ["a", "b"]])
    message = str(info.value)
    assert "references[1]" in message and "2" in message and "3" in message


def test_unknown_tokenizer_lists_valid_names():
    with pytest.raises(ValueError) as info:
        corpus_bleu(["a"], ["a"], tokenize="moses")
    message = str(info.value)
    assert "'moses'" in message
    for name in TOKENIZERS:
        assert repr(name) in message


# --------------------------------------------------------------------------
# Module hygiene.
# --------------------------------------------------------------------------


def assert_runs_on_the_standard_library(module_path, call):
    """Load `module_path` (and the shared `segments` module it imports) from their files, so the
    keras_seq package __init__ (which imports Keras) is not executed, evaluate `call` with the
    module as `module` (it must give 100.0), and check that no heavy package was pulled in."""
    code = textwrap.dedent(f"""
        import importlib.util, sys
        def load(name, path):
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module
        load("keras_seq.metrics.segments", {str(SEGMENTS_PATH)!r})
        module = load("keras_seq_metric_isolated", {str(module_path)!r})
        score = {call}
        assert abs(score - 100.0) < 1e-9, score
        heavy = [name for name in ("tensorflow", "keras", "numpy", "jax", "torch", "sacrebleu")
                 if name in sys.modules]
        assert not heavy, heavy
    """)
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr


def test_import_does_not_pull_in_tensorflow_or_keras():
    assert_runs_on_the_standard_library(BLEU_PATH, 'module.corpus_bleu(["a b c d"], ["a b c d"])')


def test_public_surface_is_corpus_bleu_only():
    module = importlib.import_module("keras_seq.metrics.bleu")
    assert module.__all__ == ["corpus_bleu"]


def test_docstring_example():
    module = importlib.import_module("keras_seq.metrics.bleu")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0

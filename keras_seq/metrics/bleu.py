"""Corpus-level BLEU, numerically identical to sacreBLEU's default settings.

BLEU (Papineni et al., 2002) is the geometric mean of the modified n-gram
precisions for n = 1..4, multiplied by a brevity penalty. Reported BLEU
numbers are only comparable when the tokenization and smoothing are the same
(Post, 2018), so this module reproduces sacreBLEU's defaults exactly: the
mteval-v13a tokenizer, "exp" smoothing, no effective order, and the
"closest" reference length.

The implementation uses only the Python standard library, so it can be
imported (e.g. by an evaluation callback or a data-loading worker) without
pulling in TensorFlow, Keras or NumPy.
"""

import collections
import math
import re
import unicodedata

from keras_seq.metrics.segments import describe, hypotheses_and_streams

__all__ = ["corpus_bleu"]

_MAX_ORDER = 4

# sacreBLEU floors log(0) at this value rather than returning -inf, so a
# zero precision drives the score to exactly 0.0 instead of raising.
_LOG_ZERO = -9999999999

# ---------------------------------------------------------------------------
# Tokenizers. Each takes a (lowercased, right-stripped) segment and returns a
# list of tokens; splitting on whitespace at the end is what sacreBLEU does.
# ---------------------------------------------------------------------------

# mteval-v13a isolates these ASCII characters unconditionally. Apostrophe,
# comma, hyphen and period are deliberately absent: they get context rules.
_13A_ALWAYS_SPLIT = ' !"#$%&()*+/:;<=>?@[\\]^_`{|}~'
_13A_ISOLATE = str.maketrans({c: f" {c} " for c in _13A_ALWAYS_SPLIT})
# Keep "3.5" and "1,000" whole: split a period/comma only next to a
# non-digit. The two passes must run in this order, as separate
# non-overlapping substitutions, to match mteval-v13a on strings like "a.,b".
_13A_PUNCT_AFTER_NON_DIGIT = re.compile(r"([^0-9])([.,])")
_13A_PUNCT_BEFORE_NON_DIGIT = re.compile(r"([.,])([^0-9])")
# "2-3" becomes "2 - 3", but "well-known" stays one token.
_13A_DASH_AFTER_DIGIT = re.compile(r"([0-9])(-)")


def _tokenize_13a(line):
    line = line.replace("<skipped>", "")
    line = line.replace("-\n", "")
    line = line.replace("\n", " ")
    if "&" in line:
        # Unescape in this order: "&amp;lt;" therefore ends up as "<".
        line = line.replace("&quot;", '"')
        line = line.replace("&amp;", "&")
        line = line.replace("&lt;", "<")
        line = line.replace("&gt;", ">")
    # Padding with spaces lets a leading or final "." be split off even
    # when it touches a digit (e.g. "in 2019.").
    return _split_13a(f" {line} ")


def _split_13a(line):
    """mteval-v13a's character rules, shared by "13a" and "zh"."""
    line = line.translate(_13A_ISOLATE)
    line = _13A_PUNCT_AFTER_NON_DIGIT.sub(r"\1 \2 ", line)
    line = _13A_PUNCT_BEFORE_NON_DIGIT.sub(r" \1 \2", line)
    line = _13A_DASH_AFTER_DIGIT.sub(r"\1 \2 ", line)
    return line.split()


# Code points that sacreBLEU's "zh" tokenizer makes tokens of their own: CJK
# ideographs, radicals, strokes, phonetic symbols, CJK and full-width
# punctuation, and two blocks of symbols (U+2600-U+27BF, inside the first range
# below). sacreBLEU writes its two
# supplementary-plane ranges (CJK Extension B, U+20000-U+2A6D6, and the
# Compatibility Supplement, U+2F800-U+2FA1D) with four-digit escapes, so it
# compares against U+2001-U+2A6D (general punctuation, arrows, mathematical
# symbols...) and U+2F81-U+2FA1 (inside the Kangxi radicals) instead. The
# ranges here are the ones it applies, for the same scores.
_ZH_RANGES = (
    (0x2001, 0x2A6D),
    (0x2E80, 0x2EFF),
    (0x2F00, 0x2FDF),
    (0x2FF0, 0x2FFF),
    (0x3000, 0x303F),
    (0x3100, 0x312F),
    (0x31A0, 0x31BF),
    (0x31C0, 0x31EF),
    (0x3200, 0x33FF),
    (0x3400, 0x4DB5),
    (0x4E00, 0x9FBB),
    (0xF900, 0xFA2D),
    (0xFA30, 0xFA6A),
    (0xFA70, 0xFAD9),
    (0xFE10, 0xFE1F),
    (0xFE30, 0xFE4F),
    (0xFF00, 0xFFEF),
)


def _is_zh_token_char(char):
    code = ord(char)
    return any(low <= code <= high for low, high in _ZH_RANGES)


def _tokenize_zh(line):
    # Each Chinese character (and CJK punctuation) is a token; the rest goes
    # through 13a's rules, without 13a's unescaping and padding.
    return _split_13a("".join(f" {c} " if _is_zh_token_char(c) else c for c in line.strip()))


def _is_number(char):
    return unicodedata.category(char)[0] == "N"


def _is_punctuation(char):
    return unicodedata.category(char)[0] == "P"


def _is_symbol(char):
    return unicodedata.category(char)[0] == "S"


def _split_pairs(line, matches, replace):
    """Left-to-right, non-overlapping rewrite of two-character matches.

    Mirrors what a regex substitution of a two-group pattern does: once a
    pair matches, both characters are consumed and scanning resumes after
    them, so a character never takes part in two matches.
    """
    out = []
    i = 0
    last = len(line) - 1
    while i < last:
        first, second = line[i], line[i + 1]
        if matches(first, second):
            out.append(replace(first, second))
            i += 2
        else:
            out.append(first)
            i += 1
    out.append(line[i:])
    return "".join(out)


def _tokenize_intl(line):
    # mteval-v14 "international" rules on Unicode general categories:
    # punctuation is split off unless it sits between digits (decimal and
    # thousands separators), and every symbol is isolated. Unlike 13a the
    # line is not padded, so a final "2019." stays one token, as in mteval-v14.
    line = _split_pairs(
        line,
        lambda a, b: not _is_number(a) and _is_punctuation(b),
        lambda a, b: f"{a} {b} ",
    )
    line = _split_pairs(
        line,
        lambda a, b: _is_punctuation(a) and not _is_number(b),
        lambda a, b: f" {a} {b}",
    )
    line = "".join(f" {c} " if _is_symbol(c) else c for c in line)
    return line.split()


def _tokenize_char(line):
    # Every non-whitespace character is a token; whitespace only separates.
    return [c for c in line if not c.isspace()]


def _tokenize_none(line):
    return line.split()


_TOKENIZERS = {
    "13a": _tokenize_13a,
    "none": _tokenize_none,
    "char": _tokenize_char,
    "intl": _tokenize_intl,
    "zh": _tokenize_zh,
}

# ---------------------------------------------------------------------------
# Statistics and score.
# ---------------------------------------------------------------------------


def _count_ngrams(tokens):
    counts = collections.Counter()
    for n in range(1, _MAX_ORDER + 1):
        for start in range(len(tokens) - n + 1):
            counts[tuple(tokens[start : start + n])] += 1
    return counts


def _closest_reference_length(hyp_len, ref_lens):
    # Ties go to the shorter reference, which makes the brevity penalty
    # (if any) the milder of the two candidates.
    return min(ref_lens, key=lambda ref_len: (abs(hyp_len - ref_len), ref_len))


def _segment_statistics(hyp_tokens, refs_tokens):
    """Returns (hyp_len, ref_len, matches per order, totals per order)."""
    max_ref_counts = collections.Counter()
    for ref_tokens in refs_tokens:
        # Clipping uses the largest count of an n-gram in any one reference.
        max_ref_counts |= _count_ngrams(ref_tokens)

    matches = [0] * _MAX_ORDER
    totals = [0] * _MAX_ORDER
    for ngram, count in _count_ngrams(hyp_tokens).items():
        order = len(ngram) - 1
        totals[order] += count
        matches[order] += min(count, max_ref_counts[ngram])

    ref_len = _closest_reference_length(len(hyp_tokens), [len(ref_tokens) for ref_tokens in refs_tokens])
    return len(hyp_tokens), ref_len, matches, totals


def _log(value):
    return _LOG_ZERO if value == 0.0 else math.log(value)


def _score(hyp_len, ref_len, matches, totals):
    if not any(matches):
        return 0.0

    brevity_penalty = 1.0
    if hyp_len < ref_len:
        brevity_penalty = math.exp(1 - ref_len / hyp_len) if hyp_len > 0 else 0.0

    precisions = [0.0] * _MAX_ORDER
    zero_match_factor = 1.0
    for order in range(_MAX_ORDER):
        if totals[order] == 0:
            # The corpus is too short for this order; the remaining
            # precisions stay 0 and the floored log zeroes the score.
            break
        if matches[order] == 0:
            # "exp" smoothing (NIST mteval): the k-th order without any
            # match gets precision 1 / (2^k * total) instead of 0.
            zero_match_factor *= 2
            precisions[order] = 100.0 / (zero_match_factor * totals[order])
        else:
            precisions[order] = 100.0 * matches[order] / totals[order]

    return brevity_penalty * math.exp(sum([_log(p) for p in precisions]) / _MAX_ORDER)


def corpus_bleu(hypotheses, references, lowercase=False, tokenize="13a"):
    """Computes corpus-level BLEU exactly as sacreBLEU does by default.

    Matches `sacrebleu.corpus_bleu(hypotheses, refs, lowercase=lowercase,
    tokenize=tokenize).score` (smooth_method="exp", use_effective_order=False,
    n-gram orders 1 to 4, "closest" reference length with ties going to the
    shorter reference). Each segment is lowercased (optionally), stripped of
    trailing whitespace and then tokenized; statistics are summed over the
    corpus before the score is computed, so this is not an average of
    sentence scores.

    Args:
        hypotheses: Sequence of detokenized system outputs, one str per
            segment (a list, tuple or other iterable; not a bare str).
            Empty strings are allowed.
        references: Either a flat sequence with one reference str per
            hypothesis, or a sequence of reference streams, each of which
            holds one str per hypothesis (sacreBLEU's `refs` layout), for
            multiple references.
        lowercase: If True, hypotheses and references are lowercased before
            tokenization (case-insensitive BLEU).
        tokenize: Tokenizer name: "13a" (mteval-v13a, the WMT default),
            "intl" (mteval-v14 international, Unicode punctuation and
            symbols), "zh" (each Chinese character is a token, the rest as
            13a), "char" (every non-space character is a token) or "none"
            (split on whitespace only). sacreBLEU's "ja-mecab", "ko-mecab"
            and "flores*" need MeCab or downloaded SentencePiece models and
            are not offered.

    Returns:
        The BLEU score as a float in [0, 100]. An empty corpus (no
        hypotheses) scores 0.0.

    Raises:
        ValueError: If `hypotheses` or a reference stream is not a sequence
            of str (e.g. a bare str or contains None), a reference stream's
            length differs from the number of hypotheses, or `tokenize` is
            not a known tokenizer name. Messages start with "corpus_bleu:".

    Example:
        >>> hyps = ["The cat sat on the mat.", "It is raining today."]
        >>> refs = ["The cat sat on the mat.", "It rains today."]
        >>> round(corpus_bleu(hyps, refs), 2)
        70.21

    Note:
        "intl" uses the Unicode database of the running Python
        (`unicodedata`); characters assigned only in newer Unicode versions
        than that database may be categorized differently from sacreBLEU,
        which relies on the `regex` package's tables.

    References:
        Papineni, Roukos, Ward and Zhu (2002). "BLEU: a Method for Automatic
        Evaluation of Machine Translation". ACL.
        Post (2018). "A Call for Clarity in Reporting BLEU Scores". WMT.
    """
    if not isinstance(tokenize, str) or tokenize not in _TOKENIZERS:
        raise ValueError(
            f"corpus_bleu: tokenize must be one of "
            f"{', '.join(repr(name) for name in _TOKENIZERS)}, got "
            f"{describe(tokenize)}."
        )
    tokenizer = _TOKENIZERS[tokenize]

    hypotheses, streams = hypotheses_and_streams(hypotheses, references, "corpus_bleu", lowercase)
    if not hypotheses:
        return 0.0

    def preprocess(segment):
        return tokenizer(segment.rstrip())

    hyp_len = ref_len = 0
    matches = [0] * _MAX_ORDER
    totals = [0] * _MAX_ORDER
    for hypothesis, references_for_segment in zip(hypotheses, zip(*streams)):
        seg_hyp_len, seg_ref_len, seg_matches, seg_totals = _segment_statistics(
            preprocess(hypothesis),
            [preprocess(reference) for reference in references_for_segment],
        )
        hyp_len += seg_hyp_len
        ref_len += seg_ref_len
        for order in range(_MAX_ORDER):
            matches[order] += seg_matches[order]
            totals[order] += seg_totals[order]

    return _score(hyp_len, ref_len, matches, totals)

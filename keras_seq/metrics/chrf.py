"""Corpus-level chrF and chrF++, numerically identical to sacreBLEU.

chrF (Popović, 2015) is the character n-gram F-score of a translation: for
every order n = 1..N it counts the character n-grams that the hypothesis
shares with the reference (clipped counts, as in BLEU), and it combines the
averaged precision and recall with an F-beta mean that weighs recall beta
times as much as precision. chrF++ (Popović, 2017) adds word unigrams and
bigrams to the same average. Being character based, it needs no tokenizer
and gives partial credit to inflected or compounded words.

This module reproduces sacreBLEU's `CHRF` metric (the reference
implementation used in WMT reports): whitespace is removed before the
character n-grams are extracted, orders that have no n-grams on either side
are left out of the averages ("effective order"), and with several
references each segment uses the reference that gives it the best F-score.

The implementation uses only the Python standard library, so it can be
imported (e.g. by an evaluation callback or a data-loading worker) without
pulling in TensorFlow, Keras or NumPy.
"""

import collections
import numbers

from keras_seq.metrics.segments import describe, hypotheses_and_streams

__all__ = ["corpus_chrf"]

# sacreBLEU's chrF++ word splitter peels one ASCII punctuation character
# (Python's string.punctuation) off the end, or else the start, of a word.
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")

# Stand-in for zero in the epsilon-smoothed variant, as in chrF++.py, Moses
# and NLTK (and sacreBLEU with eps_smoothing=True).
_EPS = 1e-16

# ---------------------------------------------------------------------------
# Input validation.
# ---------------------------------------------------------------------------


def _check_order(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"corpus_chrf: {name} must be a non-negative int, got {describe(value)}.")
    return int(value)


def _check_beta(beta):
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not beta >= 0 or beta == float("inf"):
        raise ValueError(
            "corpus_chrf: beta must be a finite non-negative number (recall "
            f"weighs beta times as much as precision), got {describe(beta)}."
        )
    return beta


# ---------------------------------------------------------------------------
# N-gram extraction.
# ---------------------------------------------------------------------------


def _split_words(segment):
    """chrF++'s word splitter: whitespace, then one punctuation mark off.

    A word longer than one character loses a final punctuation mark, or else
    an initial one, as a separate token: "said," -> "said", ","; "(hi)" ->
    "(hi", ")" (only one mark is split off, as in sacreBLEU and chrF++.py).
    """
    words = []
    for word in segment.split():
        if len(word) == 1:
            words.append(word)
        elif word[-1] in _PUNCTUATION:
            words += [word[:-1], word[-1]]
        elif word[0] in _PUNCTUATION:
            words += [word[0], word[1:]]
        else:
            words.append(word)
    return words


def _ngram_counters(segment, char_order, word_order, whitespace):
    """One Counter per order: char orders 1..char_order, then word orders."""
    chars = segment if whitespace else "".join(segment.split())
    counters = [
        collections.Counter(chars[i : i + n] for i in range(len(chars) - n + 1)) for n in range(1, char_order + 1)
    ]
    if word_order > 0:
        words = _split_words(segment)
        counters += [
            collections.Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
            for n in range(1, word_order + 1)
        ]
    return counters


# ---------------------------------------------------------------------------
# Statistics and score.
# ---------------------------------------------------------------------------


def _match_statistics(hyp_counts, ref_counts):
    """Returns [hypothesis n-grams, reference n-grams, matched n-grams]."""
    hyp_total = matches = 0
    for ngram, count in hyp_counts.items():
        hyp_total += count
        if ngram in ref_counts:
            matches += min(count, ref_counts[ngram])
    # As in sacreBLEU, hypothesis n-grams are not counted for an order in
    # which the reference has none, so that order drops out of the averages.
    return [hyp_total if ref_counts else 0, sum(ref_counts.values()), matches]


def _f_score(stats, beta, eps_smoothing):
    """chrF in [0, 100] from flat [hyp, ref, match] triples, one per order."""
    order = len(stats) // 3
    factor = beta**2
    eps_score = 0.0
    avg_precision = avg_recall = 0.0
    effective_order = 0
    for i in range(order):
        n_hyp, n_ref, n_match = stats[3 * i : 3 * i + 3]
        precision = n_match / n_hyp if n_hyp > 0 else _EPS
        recall = n_match / n_ref if n_ref > 0 else _EPS
        if eps_smoothing:
            denom = factor * precision + recall
            eps_score += (1 + factor) * precision * recall / denom if denom > 0 else _EPS
        elif n_hyp > 0 and n_ref > 0:
            avg_precision += precision
            avg_recall += recall
            effective_order += 1

    if eps_smoothing:
        return 100 * eps_score / order
    if effective_order == 0:
        return 0.0
    avg_precision /= effective_order
    avg_recall /= effective_order
    if not avg_precision + avg_recall:
        return 0.0
    score = (1 + factor) * avg_precision * avg_recall
    score /= factor * avg_precision + avg_recall
    return 100 * score


def corpus_chrf(
    hypotheses, references, char_order=6, word_order=0, beta=2, lowercase=False, whitespace=False, eps_smoothing=False
):
    """Computes corpus-level chrF (or chrF++) exactly as sacreBLEU does.

    Matches `sacrebleu.CHRF(char_order, word_order, beta, lowercase,
    whitespace, eps_smoothing).corpus_score(hypotheses, refs).score`; the
    defaults are chrF2 (sacreBLEU's default), and `word_order=2` gives
    chrF++.

    For each order n (character n-grams for n = 1..char_order, then word
    n-grams for n = 1..word_order), the hypothesis, reference and clipped
    matching n-gram counts are summed over the corpus and give

        P_n = matches_n / hypothesis_n,    R_n = matches_n / reference_n.

    P and R are the means of P_n and R_n over the orders in which both the
    hypothesis and the reference have n-grams (the "effective order"), and

        chrF = 100 * (1 + beta^2) * P * R / (beta^2 * P + R),

    so recall counts beta times as much as precision. Statistics are summed
    before the score is computed, so this is not an average of sentence
    scores. With several references, each segment contributes the
    statistics of the reference that gives it the highest sentence-level
    chrF (the first one on ties).

    Character n-grams are taken from the segment with all whitespace removed
    (unless `whitespace=True`); they may span word boundaries. For word
    n-grams the segment is split on whitespace and one ASCII punctuation mark
    is split off the end (or else the start) of each word.

    Args:
        hypotheses, references: as in `corpus_bleu` (one reference per
            hypothesis, or sacreBLEU's list of reference streams).
        char_order: Largest character n-gram order (default 6).
        word_order: Largest word n-gram order; 0 (default) gives chrF, 2
            gives chrF++.
        beta: Weight of recall relative to precision (default 2).
        lowercase: If True, hypotheses and references are lowercased first
            (case-insensitive chrF).
        whitespace: If True, whitespace is kept inside character n-grams
            instead of being removed.
        eps_smoothing: If True, average the per-order F-scores instead, with
            zero statistics replaced by 1e-16, as chrF++.py, Moses and NLTK
            do (sacreBLEU's `eps_smoothing=True`); orders without n-grams then
            count as zero instead of being left out.

    Returns:
        chrF in [0, 100] (0.0 for an empty corpus).

    Raises:
        ValueError: Messages start with "corpus_chrf:". Raised for
            hypotheses or a reference stream that is not a sequence of str
            (a bare str, or one holding None), a reference stream whose
            length differs from the number of hypotheses, a `char_order` or
            `word_order` that is not a non-negative int (or both 0), and a
            `beta` that is not a finite non-negative number.

    Example:
        >>> hypotheses = ["Le chat est assis sur le tapis.", "Il pleut aujourd'hui."]
        >>> references = ["Le chat s'est assis sur le tapis.", "Il pleut beaucoup aujourd'hui."]
        >>> round(corpus_chrf(hypotheses, references), 2)
        71.66
        >>> round(corpus_chrf(hypotheses, references, word_order=2), 2)  # chrF++
        72.63

    References:
        Popović (2015). "chrF: character n-gram F-score for automatic MT
        evaluation". WMT.
        Popović (2017). "chrF++: words helping character n-grams". WMT.
        Post (2018). "A Call for Clarity in Reporting BLEU Scores". WMT.
    """
    char_order = _check_order(char_order, "char_order")
    word_order = _check_order(word_order, "word_order")
    if char_order + word_order == 0:
        raise ValueError(
            "corpus_chrf: char_order and word_order are both 0; expected at least one n-gram order to score."
        )
    beta = _check_beta(beta)

    hypotheses, streams = hypotheses_and_streams(hypotheses, references, "corpus_chrf", lowercase)
    if not hypotheses:
        return 0.0

    def counters(segment):
        return _ngram_counters(segment, char_order, word_order, whitespace)

    totals = [0] * (3 * (char_order + word_order))
    for hypothesis, references_for_segment in zip(hypotheses, zip(*streams)):
        hyp_counters = counters(hypothesis)
        best_stats, best_score = None, -1.0
        for reference in references_for_segment:
            stats = []
            for hyp_counts, ref_counts in zip(hyp_counters, counters(reference)):
                stats += _match_statistics(hyp_counts, ref_counts)
            score = _f_score(stats, beta, eps_smoothing)
            if score > best_score:
                best_stats, best_score = stats, score
        for i, value in enumerate(best_stats):
            totals[i] += value

    return float(_f_score(totals, beta, eps_smoothing))

"""Real-language example data built deterministically from a small bilingual grammar.

Nothing is downloaded: the recipes' default data comes from here. The sentences are
ordinary English and French, generated from a lexicon of about 150 words with the
grammar a translator must learn: verb conjugation by person, gender and number
agreement of articles, possessives and adjectives, adjectives placed after the noun
(`the black cat` -> `le chat noir`), elision (`je aime` -> `j'aime`), negation around
the verb (`ne ... pas`) with `un/une/des` turning into `de` under it. The English side
carries its universal part-of-speech tags, and a second generator writes short
reviews whose sentiment hinges on negation and `but`.
"""

import json
from importlib import resources

import numpy as np


def _tuples(value):
    """JSON lists as the nested tuples the generators index and compare."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


# The lexicon, one table per word class (phrasebook_lexicon.json; each row's fields):
# pronouns (English, French, person 0-5 for je, tu, il/elle, nous, vous, ils/elles);
# people (English, French, gender, English plural, French plural); things (the same and the
# kinds of verbs that take it); adjectives (English, French m.sg f.sg m.pl f.pl, placed before the
# noun in French); verbs (English base, third person singular, French forms by person, kinds of
# objects); adverbials ((English word, tag) pairs, French); determiners (English, English plural,
# French m.sg f.sg plural; "a" has the bare plural "").
_LEXICON = json.loads(resources.files(__package__).joinpath("phrasebook_lexicon.json").read_text(encoding="utf-8"))
_PRONOUNS, _PEOPLE, _THINGS, _ADJECTIVES, _VERBS, _ADVERBIALS, _DETERMINERS = (
    _tuples(_LEXICON[name])
    for name in ("pronouns", "people", "things", "adjectives", "verbs", "adverbials", "determiners")
)

_VOWELS = tuple("aeiouhéèêâîôû")


def _french_elisions(words):
    """Apply French elision and the possessive before a vowel: je aime -> j'aime, ma amie -> mon amie."""
    out = []
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        before_vowel = following.startswith(_VOWELS)
        if before_vowel and word in ("je", "le", "la", "ne", "de"):
            out.append(word[0] + "'")
        elif before_vowel and word in ("ma", "ta", "sa"):
            out.append({"ma": "mon", "ta": "ton", "sa": "son"}[word])
        else:
            out.append(word)
    return " ".join(out).replace("' ", "'").replace("à le ", "au ")


def _noun_phrase(rng, nouns, adjectives, negated_object=False):
    """An English (words, tags) and French word list for a determiner, optional adjective and noun."""
    english, french, gender, english_plural, french_plural = nouns[rng.integers(len(nouns))][:5]
    determiner, plural_determiner, french_determiners = _DETERMINERS[rng.integers(len(_DETERMINERS))]
    plural = bool(rng.integers(2))
    index = 2 if plural else (0 if gender == "m" else 1)
    french_determiner = french_determiners[index]
    if negated_object and french_determiner in ("un", "une", "des"):
        french_determiner = "de"  # je ne vois pas de chat
    english_determiner = plural_determiner if plural else determiner
    words = [(english_determiner, "DET")] if english_determiner else []
    noun = english_plural if plural else english
    french_noun = french_plural if plural else french
    french_words = [french_determiner]
    if rng.random() < 0.5:
        adjective, forms, before = adjectives[rng.integers(len(adjectives))]
        form = forms[(0 if gender == "m" else 1) + (2 if plural else 0)]
        words.append((adjective, "ADJ"))
        french_words += [form, french_noun] if before else [french_noun, form]
    else:
        french_words.append(french_noun)
    words.append((noun, "NOUN"))
    if words[0][0] == "a" and words[1][0].startswith(tuple("aeiou")):
        words[0] = ("an", "DET")
    return words, french_words, plural


def _sentence(rng):
    """One English sentence as (word, tag) pairs and its French translation."""
    if rng.random() < 0.5:
        english, french, person = _PRONOUNS[rng.integers(len(_PRONOUNS))]
        subject, french_subject = [(english, "PRON")], [french]
    else:
        subject, french_subject, plural = _noun_phrase(rng, _PEOPLE, _ADJECTIVES[:3])  # no blue sisters
        person = 5 if plural else 2
    verb, verb_third, french_forms, kinds = _VERBS[rng.integers(len(_VERBS))]
    objects = tuple(thing for thing in _THINGS if set(thing[5].split()) & set(kinds.split()))
    negated = rng.random() < 0.3
    obj, french_obj, _ = _noun_phrase(rng, objects, _ADJECTIVES, negated_object=negated)
    third_singular = person == 2
    if negated:
        predicate = [("does" if third_singular else "do", "AUX"), ("not", "PART"), (verb, "VERB")]
        french_predicate = ["ne", french_forms[person], "pas"]
    else:
        predicate = [(verb_third if third_singular else verb, "VERB")]
        french_predicate = [french_forms[person]]
    words = subject + predicate + obj
    french_words = french_subject + french_predicate + french_obj
    if rng.random() < 0.3:
        adverbial, french_adverbial = _ADVERBIALS[rng.integers(len(_ADVERBIALS))]
        words += list(adverbial)
        french_words += french_adverbial.split()
    return words + [(".", "PUNCT")], _french_elisions(french_words) + "."


def _capitalized(text):
    return text[:1].upper() + text[1:]


def _unique(generate, size, seed):
    """`size` distinct outputs of `generate(rng)`, deterministic for a seed."""
    rng = np.random.default_rng(seed)
    seen, rows = set(), []
    for _ in range(size * 50):
        row = generate(rng)
        key = repr(row)
        if key not in seen:
            seen.add(key)
            rows.append(row)
            if len(rows) == size:
                return rows
    raise ValueError(f"phrasebook: could not make {size} distinct examples; the grammar is smaller than that.")


def _split(rows, valid_size):
    if not 0 < valid_size < len(rows):
        raise ValueError(f"phrasebook: `valid_size` expected an integer in (0, {len(rows)}), got {valid_size!r}.")
    return rows[:-valid_size], rows[-valid_size:]


def _english_text(words):
    return _capitalized(" ".join(word for word, _ in words[:-1]) + words[-1][0])


def english_french_pairs(size=12000, valid_size=500, seed=0):
    """`(train, valid)` lists of distinct `(english, french)` sentence pairs.

    Example: `("My sister does not see a black cat in the garden.",
    "Ma sœur ne voit pas de chat noir dans le jardin.")`.
    """
    rows = _unique(_sentence, size, seed)
    pairs = [(_english_text(words), _capitalized(french)) for words, french in rows]
    return _split(pairs, valid_size)


def tagged_sentences(size=6000, valid_size=500, seed=1):
    """`(train, valid)` lists of English sentences as `[(word, universal POS tag), ...]`."""
    rows = _unique(lambda rng: _sentence(rng)[0], size, seed)
    tagged = [[(_capitalized(words[0][0]), words[0][1])] + list(words[1:]) for words in rows]
    return _split(tagged, valid_size)


_ASPECTS = ("film", "food", "service", "music", "story", "hotel", "room", "staff", "book", "acting", "ending", "price")
_POSITIVE = ("good", "great", "wonderful", "excellent", "lovely", "pleasant", "fantastic", "superb", "fine", "friendly")
_NEGATIVE = ("bad", "terrible", "awful", "boring", "poor", "dull", "horrible", "disappointing", "rude", "slow")
_INTENSIFIERS = ("", "", "really", "very", "quite", "truly", "rather")
_VERDICTS = (("loved", True), ("liked", True), ("enjoyed", True), ("hated", False), ("disliked", False))


def _clause(rng):
    """One opinion clause and whether it is positive (negation flips the adjective's polarity)."""
    aspect = _ASPECTS[rng.integers(len(_ASPECTS))]
    if rng.random() < 0.25:
        verdict, positive = _VERDICTS[rng.integers(len(_VERDICTS))]
        if rng.random() < 0.3:
            verdict = (
                "did not "
                + {"loved": "love", "liked": "like", "enjoyed": "enjoy", "hated": "hate", "disliked": "dislike"}[
                    verdict
                ]
            )
            positive = not positive
        return f"I {verdict} the {aspect}", positive
    positive = bool(rng.integers(2))
    adjective = (_POSITIVE if positive else _NEGATIVE)[rng.integers(10)]
    intensifier = _INTENSIFIERS[rng.integers(len(_INTENSIFIERS))]
    negated = rng.random() < 0.3
    words = ["the", aspect, "was"] + (["not"] if negated else []) + ([intensifier] if intensifier else []) + [adjective]
    return " ".join(words), positive != negated


def _review(rng):
    """A review of one or two clauses; after `but` the second clause decides the label."""
    text, positive = _clause(rng)
    if rng.random() < 0.4:
        second, second_positive = _clause(rng)
        text, positive = f"{text} but {second}", second_positive
    return "positive" if positive else "negative", _capitalized(text) + "."


def sentiment_reviews(size=8000, valid_size=500, seed=2):
    """`(train, valid)` lists of `(label, review)` with label `positive` or `negative`.

    The label follows the last clause, with `not` flipping it, so a bag of words
    cannot get them all right: `The food was not bad but the service was slow.`
    is negative.
    """
    return _split(_unique(_review, size, seed), valid_size)

"""keras_seq.data.phrasebook and the embedded text: deterministic, split cleanly, and grammatical."""

import re

import pytest

from keras_seq.data import alice_text, phrasebook

VOWELS = tuple("aeiouhéèêâîôû")


@pytest.fixture(scope="module")
def pairs():
    return phrasebook.english_french_pairs()


def words(sentence):
    return re.findall(r"[\w'’]+|[^\w\s]", sentence.lower())


def test_pairs_are_deterministic_and_seeded():
    assert phrasebook.english_french_pairs(200, 20, seed=4) == phrasebook.english_french_pairs(200, 20, seed=4)
    assert phrasebook.english_french_pairs(200, 20, seed=4) != phrasebook.english_french_pairs(200, 20, seed=5)
    assert phrasebook.tagged_sentences(100, 10, seed=4) == phrasebook.tagged_sentences(100, 10, seed=4)
    assert phrasebook.sentiment_reviews(100, 10, seed=4) == phrasebook.sentiment_reviews(100, 10, seed=4)
    assert phrasebook.sentiment_reviews(100, 10, seed=4) != phrasebook.sentiment_reviews(100, 10, seed=5)


def test_sizes_and_disjoint_valid(pairs):
    train, valid = pairs
    assert len(train) == 11500 and len(valid) == 500
    assert len(set(train + valid)) == 12000  # all distinct
    assert not {s for s, _ in valid} & {s for s, _ in train}  # no valid English sentence is seen in training
    reviews_train, reviews_valid = phrasebook.sentiment_reviews()
    assert len(reviews_valid) == 500 and not set(reviews_valid) & set(reviews_train)
    tagged_train, tagged_valid = phrasebook.tagged_sentences()
    assert len(tagged_valid) == 500 and not {tuple(s) for s in tagged_valid} & {tuple(s) for s in tagged_train}


def test_sentences_are_capitalized_and_end_with_a_period(pairs):
    for english, french in pairs[0][:2000]:
        assert english[0].isupper() and french[0].isupper(), (english, french)
        assert english.endswith(".") and french.endswith(".") and not french.endswith(" .")


def test_negation_wraps_the_french_verb(pairs):
    negated = [(e, f) for e, f in pairs[0] if " not " in e]
    assert len(negated) > 1000
    for english, french in negated:
        assert re.search(r"\b(do|does) not\b", english), english
        tokens = words(french)
        assert ("ne" in tokens or any(t.startswith("n'") for t in tokens)) and "pas" in tokens, (english, french)
        after = tokens[tokens.index("pas") + 1]
        assert after not in ("un", "une", "des"), (english, french)  # un/une/des become de under negation
    for english, french in pairs[0]:
        if " not " not in english:
            assert "pas" not in words(french), (english, french)


def test_elision_and_contraction(pairs):
    for _, french in pairs[0]:
        tokens = french.lower().rstrip(".").split()
        for word, following in zip(tokens, tokens[1:]):
            if following.startswith(VOWELS):
                assert word not in ("je", "le", "la", "ne", "de", "ma", "ta", "sa"), french
        assert " à le " not in f" {french.lower()}", french
    assert any(f.startswith("J'aime ") for e, f in pairs[0] if e.startswith("I like "))


@pytest.mark.parametrize(
    "english, french",
    [
        ("black cats", "chats noirs"),
        ("white houses", "maisons blanches"),
        ("white house", "maison blanche"),
        ("green apples", "pommes vertes"),
        ("small cars", "petites voitures"),
        ("pretty birds", "jolis oiseaux"),
        ("big horses", "grands chevaux"),
    ],
)
def test_adjectives_agree_and_take_their_place(pairs, english, french):
    found = [(e, f) for e, f in pairs[0] + pairs[1] if f" {english} " in f" {e.rstrip('.')} "]
    assert found
    for e, f in found:
        assert french in f, (e, f)


@pytest.mark.parametrize(
    "subject, verb, expected",
    [
        ("We", "see", "Nous voyons"),
        ("They", "have", "Ils ont"),
        ("You", "want", "Tu veux"),
        ("She", "eats", "Elle mange"),
    ],
)
def test_verbs_agree_with_the_subject(pairs, subject, verb, expected):
    found = [(e, f) for e, f in pairs[0] if e.startswith(f"{subject} {verb} ")]
    assert found
    assert all(f.startswith(expected + " ") for _, f in found)


def test_tagged_sentences():
    train, valid = phrasebook.tagged_sentences(size=600, valid_size=100)
    assert len(train) == 500 and len(valid) == 100
    universal = {"ADJ", "ADP", "ADV", "AUX", "DET", "NOUN", "PART", "PRON", "PUNCT", "VERB"}
    for sentence in train + valid:
        assert sentence[-1] == (".", "PUNCT") and sentence[0][0][0].isupper()
        assert {tag for _, tag in sentence} <= universal
        for word, tag in sentence:
            if word == "not":
                assert tag == "PART"
            if word in ("do", "does"):
                assert tag == "AUX"
            if word.lower() in ("the", "a", "an", "my"):
                assert tag == "DET"


def test_sentiment_labels_follow_negation_and_but():
    train, valid = phrasebook.sentiment_reviews(size=2000, valid_size=100)
    assert {label for label, _ in train} == {"positive", "negative"}
    polarity = {
        **dict.fromkeys(
            (
                "good",
                "great",
                "wonderful",
                "excellent",
                "lovely",
                "pleasant",
                "fantastic",
                "superb",
                "fine",
                "friendly",
            ),
            True,
        ),
        **dict.fromkeys(
            ("bad", "terrible", "awful", "boring", "poor", "dull", "horrible", "disappointing", "rude", "slow"), False
        ),
    }
    checked = 0
    for label, review in train + valid:
        last = review.rstrip(".").split(" but ")[-1]
        match = re.fullmatch(r"(?i)the \w+ was (not )?(?:\w+ )?(\w+)", last)
        if match:
            positive = polarity[match.group(2)] != bool(match.group(1))
            assert label == ("positive" if positive else "negative"), review
            checked += 1
    assert checked > 1000


def test_valid_size_out_of_range():
    with pytest.raises(ValueError, match="valid_size"):
        phrasebook.english_french_pairs(size=10, valid_size=10)
    with pytest.raises(ValueError, match="valid_size"):
        phrasebook.sentiment_reviews(size=10, valid_size=0)


def test_alice_text():
    book = alice_text()
    assert isinstance(book, str) and len(book) > 4000
    assert book.startswith("Alice was beginning to get very tired") and "White Rabbit" in book

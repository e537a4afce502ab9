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

import numpy as np

# Persons are indexed 0-5: je, tu, il/elle, nous, vous, ils/elles.
_PRONOUNS = (("I", "je", 0), ("you", "tu", 1), ("he", "il", 2), ("she", "elle", 2), ("we", "nous", 3), ("they", "ils", 5))

# (English, French, gender, English plural, French plural)
_PEOPLE = (
    ("boy", "garçon", "m", "boys", "garçons"),
    ("girl", "fille", "f", "girls", "filles"),
    ("teacher", "professeur", "m", "teachers", "professeurs"),
    ("woman", "femme", "f", "women", "femmes"),
    ("man", "homme", "m", "men", "hommes"),
    ("child", "enfant", "m", "children", "enfants"),
    ("friend", "ami", "m", "friends", "amis"),
    ("sister", "sœur", "f", "sisters", "sœurs"),
    ("brother", "frère", "m", "brothers", "frères"),
    ("mother", "mère", "f", "mothers", "mères"),
    ("father", "père", "m", "fathers", "pères"),
    ("neighbour", "voisin", "m", "neighbours", "voisins"),
)

# (English, French, gender, English plural, French plural, kinds of verbs that take it)
_THINGS = (
    ("cat", "chat", "m", "cats", "chats", "animal"),
    ("dog", "chien", "m", "dogs", "chiens", "animal"),
    ("bird", "oiseau", "m", "birds", "oiseaux", "animal"),
    ("horse", "cheval", "m", "horses", "chevaux", "animal"),
    ("fish", "poisson", "m", "fish", "poissons", "animal food"),
    ("house", "maison", "f", "houses", "maisons", "place"),
    ("car", "voiture", "f", "cars", "voitures", "object"),
    ("book", "livre", "m", "books", "livres", "object read open"),
    ("letter", "lettre", "f", "letters", "lettres", "object read open"),
    ("newspaper", "journal", "m", "newspapers", "journaux", "object read"),
    ("apple", "pomme", "f", "apples", "pommes", "food"),
    ("cake", "gâteau", "m", "cakes", "gâteaux", "food"),
    ("orange", "orange", "f", "oranges", "oranges", "food"),
    ("door", "porte", "f", "doors", "portes", "object open"),
    ("window", "fenêtre", "f", "windows", "fenêtres", "object open"),
    ("table", "table", "f", "tables", "tables", "object"),
    ("chair", "chaise", "f", "chairs", "chaises", "object"),
    ("box", "boîte", "f", "boxes", "boîtes", "object open"),
    ("key", "clé", "f", "keys", "clés", "object"),
    ("hat", "chapeau", "m", "hats", "chapeaux", "object"),
    ("shoe", "chaussure", "f", "shoes", "chaussures", "object"),
    ("toy", "jouet", "m", "toys", "jouets", "object"),
    ("flower", "fleur", "f", "flowers", "fleurs", "object"),
    ("tree", "arbre", "m", "trees", "arbres", "place"),
    ("cup", "tasse", "f", "cups", "tasses", "object"),
    ("bike", "vélo", "m", "bikes", "vélos", "object"),
)

# (English, French forms m.sg f.sg m.pl f.pl, placed before the noun in French)
_ADJECTIVES = (
    ("small", ("petit", "petite", "petits", "petites"), True),
    ("big", ("grand", "grande", "grands", "grandes"), True),
    ("pretty", ("joli", "jolie", "jolis", "jolies"), True),
    ("red", ("rouge", "rouge", "rouges", "rouges"), False),
    ("black", ("noir", "noire", "noirs", "noires"), False),
    ("white", ("blanc", "blanche", "blancs", "blanches"), False),
    ("green", ("vert", "verte", "verts", "vertes"), False),
    ("blue", ("bleu", "bleue", "bleus", "bleues"), False),
)

# (English base, English third person singular, French forms by person, kinds of objects)
_VERBS = (
    ("see", "sees", ("vois", "vois", "voit", "voyons", "voyez", "voient"), "animal place object food"),
    ("like", "likes", ("aime", "aimes", "aime", "aimons", "aimez", "aiment"), "animal place object food"),
    ("want", "wants", ("veux", "veux", "veut", "voulons", "voulez", "veulent"), "animal place object food"),
    ("have", "has", ("ai", "as", "a", "avons", "avez", "ont"), "animal place object food"),
    ("find", "finds", ("trouve", "trouves", "trouve", "trouvons", "trouvez", "trouvent"), "animal object"),
    ("take", "takes", ("prends", "prends", "prend", "prenons", "prenez", "prennent"), "object food"),
    ("eat", "eats", ("mange", "manges", "mange", "mangeons", "mangez", "mangent"), "food"),
    ("read", "reads", ("lis", "lis", "lit", "lisons", "lisez", "lisent"), "read"),
    ("buy", "buys", ("achète", "achètes", "achète", "achetons", "achetez", "achètent"), "animal place object food"),
    ("open", "opens", ("ouvre", "ouvres", "ouvre", "ouvrons", "ouvrez", "ouvrent"), "open"),
    ("wash", "washes", ("lave", "laves", "lave", "lavons", "lavez", "lavent"), "animal object"),
    ("draw", "draws", ("dessine", "dessines", "dessine", "dessinons", "dessinez", "dessinent"), "animal place object food"),
)

# (English words and tags, French) of an optional adverbial at the end of the sentence.
_ADVERBIALS = (
    ((("in", "ADP"), ("the", "DET"), ("garden", "NOUN")), "dans le jardin"),
    ((("in", "ADP"), ("the", "DET"), ("kitchen", "NOUN")), "dans la cuisine"),
    ((("in", "ADP"), ("the", "DET"), ("park", "NOUN")), "dans le parc"),
    ((("in", "ADP"), ("the", "DET"), ("street", "NOUN")), "dans la rue"),
    ((("near", "ADP"), ("the", "DET"), ("river", "NOUN")), "près de la rivière"),
    ((("at", "ADP"), ("school", "NOUN")), "à le école"),
    ((("at", "ADP"), ("home", "NOUN")), "à la maison"),
    ((("today", "ADV"),), "aujourd'hui"),
    ((("every", "DET"), ("day", "NOUN")), "tous les jours"),
    ((("this", "DET"), ("evening", "NOUN")), "ce soir"),
)

# English determiner -> French (m.sg, f.sg, plural); "a" has the English plural "" (bare plural).
_DETERMINERS = (
    ("the", "the", ("le", "la", "les")),
    ("my", "my", ("mon", "ma", "mes")),
    ("your", "your", ("ton", "ta", "tes")),
    ("his", "his", ("son", "sa", "ses")),
    ("her", "her", ("son", "sa", "ses")),
    ("a", "", ("un", "une", "des")),
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
            verdict = "did not " + {"loved": "love", "liked": "like", "enjoyed": "enjoy", "hated": "hate", "disliked": "dislike"}[verdict]
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

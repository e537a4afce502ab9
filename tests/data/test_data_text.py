"""keras_seq.data.text: tokenization, its inverse, and vocabularies."""

import numpy as np
import pytest
import tensorflow as tf

from keras_seq.data import text
from keras_seq.data.text import END, PAD, START, UNKNOWN, Vocabulary


def tokens(strings, level="word", lowercase=False):
    return [[t.decode("utf-8") for t in row] for row in text.tokenize(strings, level, lowercase).to_list()]


def strings(tensor):
    return [s.decode("utf-8") for s in tensor.numpy()]


def test_word_tokens_split_punctuation_and_keep_apostrophes_on_the_left():
    # The French space before `?` is recorded in the mark's token (it used to be a bare "?").
    assert tokens(["L'école est fermée, n'est-ce pas ?"]) == [
        ["L'", "école", "est", "fermée", ",", "n'", "est-ce", "pas", "\u202f?"]
    ]
    assert tokens(["Don't stop! (Really.)"]) == [["Don'", "t", "stop", "!", "(", "Really", ".", ")"]]
    assert tokens(["«Bonjour», dit-il… ¿Qué? ¡Sí!"]) == [
        ["«", "Bonjour", "»", ",", "dit-il", "…", "¿", "Qué", "?", "¡", "Sí", "!"]
    ]
    assert tokens(["  spaced   out  ", ""]) == [["spaced", "out"], []]
    # Marks inside a word belong to it: file names, versions, placeholders stay one token.
    assert tokens(["Use --force on config.ini (v2.0): %(name)s."]) == [
        ["Use", "--force", "on", "config.ini", "(", "v2.0", ")", ":", "%(name)s", "."]
    ]
    assert tokens(["Range [4..40] of %(amount).2f, ...or :param x"]) == [
        ["Range", "[", "4..40", "]", "of", "%(amount).2f", ",", "...or", ":param", "x"]
    ]
    # Curly apostrophes elide too; a word's last apostrophe is a token of its own.
    assert tokens(["L’aide d’un ami. The users' files, 'rm' and ‘Save’."]) == [
        [
            "L’",
            "aide",
            "d’",
            "un",
            "ami",
            ".",
            "The",
            "users",
            "'",
            "files",
            ",",
            "'rm",
            "'",
            "and",
            "‘",
            "Save",
            "’",
            ".",
        ]
    ]


def test_a_space_before_a_high_mark_is_recorded_only_where_written():
    assert tokens(["Attention : fichier introuvable ! Vraiment ?! Oui; non: ok?"]) == [
        [
            "Attention",
            "\u202f:",
            "fichier",
            "introuvable",
            "\u202f!",
            "Vraiment",
            "\u202f?",
            "!",
            "Oui",
            ";",
            "non",
            ":",
            "ok",
            "?",
        ]
    ]
    assert tokens(["x :param", ": début", "« Oui » ?"]) == [
        ["x", ":param"],
        [":", "début"],
        ["«", "Oui", "»", "\u202f?"],
    ]


def test_unicode_spaces_are_plain_spaces():
    """U+00A0 and U+202F (French typography's no-break spaces) split like a space and come back as one."""
    sentences = ["«\u00a0Bonjour\u00a0»", "«\u202fOui\u202f» ?", "Attention\u00a0: 1\u202f000\u2009fichiers\u202f!"]
    assert tokens(sentences) == [
        ["«", "Bonjour", "»"],
        ["«", "Oui", "»", "\u202f?"],
        ["Attention", "\u202f:", "1", "000", "fichiers", "\u202f!"],
    ]
    assert strings(text.detokenize(text.tokenize(sentences))) == [
        "« Bonjour »",
        "« Oui » ?",
        "Attention : 1 000 fichiers !",
    ]


ROUND_TRIPS = [
    # English
    "Where is it? Here: (in the box) [maybe]!",
    "Use --force to overwrite config.ini (version 2.0)!",
    "Delete %(name)s? Are you sure?!",
    "Don't, won't, can't.",
    'She said "yes", then "no" (and "maybe").',
    'Unknown option "%s"; see --help.',
    "Could not open /etc/hosts: permission denied.",
    "Saved to C:\\Users\\Public\\report.pdf.",
    "Visit https://example.com/docs?page=2 for details.",
    "Loading... please wait (about 1.5 s).",
    "%d of %d items selected; {count} left.",
    "Click ‘Save’ or press Ctrl+S.",
    "The users' settings were reset.",
    "He said “hello” and left…",
    "Range [4..40], step 0.5.",
    "Type '?' or 'help' for help.",
    "rock'n'roll isn't dead",
    # French
    "J'aime l'école, mais pas le lundi.",
    "Je ne vois pas d'oiseau aujourd'hui.",
    "« Bonjour », dit-elle; elle sourit…",
    "Le mot-clé « .elseif » ferme le bloc.",
    "Les caractères « @ », « . » et « _ » sont autorisés.",
    "See [the docs] (or « l'aide »)...",
    "Attention : fichier introuvable !",
    "Voulez-vous vraiment supprimer « %(name)s » ?",
    "Erreur : impossible d’écrire dans config.ini ; réessayez.",
    "L’adresse e-mail est déjà utilisée.",
    "Qu’il est tard ! Il est 3,14 h.",
    "Mot de passe oublié ?",
    "Utilisez --force pour écraser %s (version 2.0).",
    "Chargement… Veuillez patienter.",
    "Vraiment ?! Oui !",
    "¿Dónde está? ¡Aquí!",
    "Ma sœur ne voit pas de chat noir dans le jardin.",
]


@pytest.mark.parametrize("sentence", ROUND_TRIPS)
def test_word_level_round_trip(sentence):
    assert strings(text.detokenize(text.tokenize([sentence]))) == [sentence]


# Spacing the table cannot know (a space after "(" or before "."): these come back respaced.
RESPACED = {
    "« .elseif »": "« .elseif »",
    "«Oui», dit-il.": "« Oui », dit-il.",
    "( . )": "(.)",
    "[ ,x ]": "[,x]",
    "x ( : ) y": "x ( :) y",
    "Voir le fichier .": "Voir le fichier.",
    "Loading ...": "Loading...",
    'key="value"': 'key= "value"',
    "l’école « d'été »": "l’école « d'été »",
    'Say "hi"!': 'Say "hi"!',
}


@pytest.mark.parametrize("sentence", ROUND_TRIPS + sorted(RESPACED))
def test_no_mark_moves_across_a_quote_or_bracket(sentence):
    """Only spaces between tokens change: the non-space characters keep their order, and the text tokenizes the same."""
    again = strings(text.detokenize(text.tokenize([sentence])))[0]
    assert again.replace(" ", "") == sentence.replace(" ", "")
    assert tokens([again]) == tokens([sentence])
    assert again == RESPACED.get(sentence, sentence)


def test_detokenize_spacing_table():
    rows = [
        ["(", "x", ")", ",", "l'", "école", "«", ".", "oui", "»", "\u202f!"],
        ['"', "a", '"', "b", '"', "c", '"', ".", "users", "'", "¿", "qué", "?"],
        ["\u202f:", "début", "“", "fin", "”", "—", "ok", "…"],
    ]
    assert strings(text.detokenize(tf.ragged.constant(rows))) == [
        "(x), l'école « . oui » !",
        '"a" b "c". users\' ¿qué?',
        ": début “fin” — ok…",
    ]


def test_round_trip_of_real_interface_messages():
    """The shipped English-French catalog strings: no mark moves, and all but a few (their own odd spacing) come back
    exactly."""
    from keras_seq.data.corpora import software_en_fr

    sentences = [s for split in ("valid", "test") for pair in software_en_fr(split) for s in pair]
    again = strings(text.detokenize(text.tokenize(sentences)))
    assert [a.replace(" ", "") for a in again] == [s.replace(" ", "") for s in sentences]
    respaced = [s for s, a in zip(sentences, again) if s != a]
    assert len(sentences) > 2000 and len(respaced) <= len(sentences) // 100, respaced


def test_round_trip_of_the_phrasebook():
    from keras_seq.data import phrasebook

    train, _ = phrasebook.english_french_pairs(size=300, valid_size=10)
    sentences = [s for pair in train for s in pair]
    assert strings(text.detokenize(text.tokenize(sentences))) == sentences


def test_char_level_round_trip():
    sentences = ["Hé, l'œil !", "naïve café  ", "日本語 ok", ""]
    assert tokens(sentences[:1], "char") == [list("Hé, l'œil !")]
    assert strings(text.detokenize(text.tokenize(sentences, "char"), "char")) == sentences


def test_whitespace_level_round_trip():
    assert tokens(["The  cat\tsat ."], "whitespace") == [["The", "cat", "sat", "."]]
    sentence = "New_York is n't (here) ."
    assert strings(text.detokenize(text.tokenize([sentence], "whitespace"), "whitespace")) == [sentence]


def test_lowercase_is_unicode_aware():
    assert tokens(["ÉCOLE Œuvre"], lowercase=True) == [["école", "œuvre"]]


def test_detokenize_takes_dense_padded_tokens():
    dense = tf.constant([["Le", "chat", ".", ""], ["Oui", "!", "", ""]])
    assert strings(text.detokenize(dense)) == ["Le chat.", "Oui!"]


def test_unknown_level():
    with pytest.raises(ValueError, match="level"):
        text.tokenize(["a"], "byte")
    with pytest.raises(ValueError, match="level"):
        Vocabulary(["a"], level="byte")


def test_build_orders_by_frequency_then_alphabetically():
    vocabulary = Vocabulary.build(["b a c b", "c b d", "a"])
    # b: 3, then a and c: 2 each (alphabetical), then d: 1, after the four reserved ids.
    assert vocabulary.tokens == ["", "<s>", "</s>", "<unk>", "b", "a", "c", "d"]
    assert len(vocabulary) == 8
    assert Vocabulary.build(["b a c b", "c b d", "a"], max_size=6).tokens[4:] == ["b", "a"]
    assert Vocabulary.build(["b a c b", "c b d", "a"], min_count=2).tokens[4:] == ["b", "a", "c"]


def test_build_from_a_dataset_and_lowercase():
    dataset = tf.data.Dataset.from_tensor_slices(["The cat.", "the dog."])
    vocabulary = Vocabulary.build(dataset, lowercase=True)
    assert vocabulary.tokens[4:] == [".", "the", "cat", "dog"]


def test_reserved_ids_and_unknown_tokens():
    assert (PAD, START, END, UNKNOWN) == (0, 1, 2, 3)
    vocabulary = Vocabulary.build(["le chat voit le chien ."])
    ids = vocabulary.encode(["le chien voit un oiseau ."], add_start=True, add_end=True)
    assert ids.dtype == tf.int32
    le, chien, voit, dot = (vocabulary.tokens.index(t) for t in ("le", "chien", "voit", "."))
    assert ids.to_list() == [[START, le, chien, voit, UNKNOWN, UNKNOWN, dot, END]]
    assert min(le, chien, voit, dot) >= 4
    table = vocabulary.lookup_table()
    assert table.lookup(tf.constant(["chat", "zèbre", ""])).numpy().tolist() == [
        vocabulary.tokens.index("chat"),
        UNKNOWN,
        UNKNOWN,
    ]


def test_encode_ragged_rows():
    vocabulary = Vocabulary.build(["a b c"])
    ids = vocabulary.encode(["a", "", "c b a"], add_end=True)
    assert ids.row_lengths().numpy().tolist() == [2, 1, 4]
    assert ids.to_list()[1] == [END]


def test_decode_stops_at_end_and_skips_padding_and_start():
    vocabulary = Vocabulary.build(["Le chat dort ."])
    ids = vocabulary.encode(["Le chat dort ."], add_start=True, add_end=True).to_tensor().numpy()
    assert strings(vocabulary.decode(ids)) == ["Le chat dort."]
    le, chat = vocabulary.tokens.index("Le"), vocabulary.tokens.index("chat")
    batch = np.array([[START, le, END, chat, chat], [START, chat, PAD, PAD, PAD], [END, le, le, le, le]], "int32")
    assert strings(vocabulary.decode(batch)) == ["Le", "chat", ""]


def test_config_round_trip():
    vocabulary = Vocabulary.build(["l'été à Paris"], level="word", lowercase=True)
    again = Vocabulary(**vocabulary.get_config())
    assert again.tokens == vocabulary.tokens and again.level == "word" and again.lowercase
    assert again.encode(["L'ÉTÉ"]).to_list() == vocabulary.encode(["l'été"]).to_list()


def test_char_vocabulary():
    vocabulary = Vocabulary.build(["aab", "b c"], level="char")
    assert vocabulary.tokens[4:] == ["a", "b", " ", "c"]  # a: 2, b: 2, then " " before "c" in code point order
    assert strings(vocabulary.decode(vocabulary.encode(["cab a"]).to_tensor())) == ["cab a"]


@pytest.mark.parametrize("texts", [[], [""], ["   ", "\n"]], ids=["none", "empty", "blank"])
def test_empty_texts_raise(texts):
    with pytest.raises(ValueError, match="at least one token"):
        Vocabulary.build(texts)

"""Placeholders: the spans found, protected and restored, alike in Python and in TensorFlow's ops (the export's)."""

import pytest
import tensorflow as tf

from keras_seq.data import corpora, placeholders
from keras_seq.data.subword import SubwordVocabulary

T = placeholders.TOKENS

SPANS = {
    "Delete <b>%(name)s</b>?": ["<b>", "%(name)s", "</b>"],
    'Open <a href="https://example.com/x">the docs</a> &amp; more': [
        '<a href="https://example.com/x">',
        "</a>",
        "&amp;",
    ],
    "Copy %1$s to {0} with --force -r": ["%1$s", "{0}", "--force", "-r"],
    "Install numpy 2.0.1 or setup.py, e.g. pip.": ["2.0.1", "setup.py"],
    "E.g. 3rd place, well-known, pré-visualiser": [],
    f"A literal {T[3]} stays": [T[3]],
    "50% done in C:\\Temp\\x.txt": ["50", "C:\\Temp\\x.txt"],
}


@pytest.mark.parametrize("text", sorted(SPANS))
def test_spans_are_each_kind_to_keep_verbatim(text):
    assert placeholders.spans(text) == SPANS[text]


def test_protect_numbers_the_spans_in_order_up_to_max_spans():
    assert placeholders.protect("Copy %s to %s (%d files)") == (
        f"Copy {T[0]} to {T[1]} ({T[2]} files)",
        ["%s"] * 2 + ["%d"],
    )
    many = " ".join(str(number) for number in range(placeholders.MAX_SPANS + 2))
    protected, found = placeholders.protect(many)
    assert found == [str(number) for number in range(placeholders.MAX_SPANS)]
    assert protected == " ".join(T) + f" {placeholders.MAX_SPANS} {placeholders.MAX_SPANS + 1}"
    assert placeholders.protect("No span here.") == ("No span here.", [])


def test_protect_pair_gives_each_target_span_its_source_spans_token():
    source, target = placeholders.protect_pair("Move %s to %s in {dir}", "Déplacer %s vers %s dans {dir} ou 7")
    assert source == f"Move {T[0]} to {T[1]} in {T[2]}"
    # The repeated span takes the next token not yet taken; a span the source lacks stays text.
    assert target == f"Déplacer {T[0]} vers {T[1]} dans {T[2]} ou 7"
    assert placeholders.protect_pair("{b} then {a}", "{a} puis {b}") == (f"{T[0]} then {T[1]}", f"{T[1]} puis {T[0]}")


def test_restore_puts_each_span_back_and_drops_a_token_past_them():
    assert placeholders.restore(f"{T[1]} puis {T[0]}{T[0]} {T[5]}!", ["{b}", "{a}"]) == "{a} puis {b}{b} !"
    assert placeholders.restore("plain", []) == "plain"


def test_tensorflow_ops_protect_and_restore_as_python_on_the_shipped_corpus():
    """Every sentence of every split of software_en_fr, both languages: the ops' protected text and spans are
    Python's, and restoring gives the sentence back."""
    texts = [text for split in ("train", "valid", "test") for pair in corpora.software_en_fr(split) for text in pair]
    protected, found = placeholders.protect_strings(texts)
    expected = [placeholders.protect(text) for text in texts]
    assert [p.decode() for p in protected.numpy()] == [p for p, _ in expected]
    assert [[s.decode() for s in row] for row in found.to_list()] == [f for _, f in expected]
    assert sum(bool(f) for _, f in expected) > 0.15 * len(texts)  # the spans are there to find
    restored = placeholders.restore_strings(protected, found).numpy()
    assert [r.decode() for r in restored] == texts


def test_restore_strings_takes_each_strings_row_of_spans_in_a_graph():
    found = tf.ragged.constant([["%s", "{n}"], []])
    restore = tf.function(lambda strings, rows: placeholders.restore_strings(strings, found, rows))
    outputs = [f"{T[1]} et {T[0]}", f"{T[0]}", f"x {T[1]} {T[2]}", "\x01y"]
    restored = restore(tf.constant(outputs), tf.constant([0, 0, 1, 1]))
    assert [r.decode() for r in restored.numpy()] == ["{n} et %s", "%s", "x  ", "y"]
    assert [placeholders.restore(o, f) for o, f in zip(outputs, [["%s", "{n}"]] * 2 + [[]] * 2)] == [
        r.decode() for r in restored.numpy()
    ]


def test_a_vocabulary_trained_with_the_tokens_keeps_each_one_piece():
    pairs = [placeholders.protect_pair(*pair) for pair in corpora.software_en_fr("valid")]
    vocabulary = SubwordVocabulary.train([t for pair in pairs for t in pair], 600, user_symbols=T)
    assert placeholders.token_ids(vocabulary) == [vocabulary.tokens.index(token) for token in T]
    assert placeholders.token_ids(SubwordVocabulary.train(["no tokens here"] * 50, 300)) is None
    pieces = vocabulary.split(f"Delete {T[0]} in {T[12]}/{T[3]}.")
    assert {T[0], T[12], T[3]} <= set(pieces)
    ids = vocabulary.encode([f"Delete {T[0]} in {T[12]}/{T[3]}."]).to_tensor()
    assert vocabulary.decode(ids).numpy()[0].decode() == f"Delete {T[0]} in {T[12]}/{T[3]}."


def test_required_ids_hold_the_token_ids_of_each_rows_spans():
    token_ids = list(range(100, 100 + placeholders.MAX_SPANS))
    got = placeholders.required_ids([0, 2, placeholders.MAX_SPANS + 3], token_ids).numpy()
    expected = [[0] * placeholders.MAX_SPANS, [100, 101] + [0] * (placeholders.MAX_SPANS - 2), token_ids]
    assert got.dtype == "int32" and got.tolist() == expected

"""Placeholders: spans a translation must keep verbatim, swapped for numbered tokens around the model.

Software messages hold spans that must come out of a translation unchanged: printf and
Python format fields (`%s`, `%(name)s`, `{0}`), XML/HTML tags, URLs, e-mail addresses,
paths, file names, command-line options, versions and numbers. `protect` replaces each
by a placeholder token (`⟦0⟧`, `⟦1⟧`, ... in the order they appear) that the vocabulary
keeps as one piece, so the model only has to copy one token; `restore` puts each span
back where the translation has its token. The same replacement runs in Python (training
data, `protect_pair`) and as TensorFlow string ops (`protect_strings`, `restore_strings`:
inside an exported SavedModel, so a server or a plain TensorFlow process gets it), from one
RE2 pattern that both engines read alike (ASCII classes, no look-around).

Placeholder tokens for terminology and span protection: Crego et al., 2016, "SYSTRAN's
pure neural machine translation systems", sec. 4.5 (placeholders for named entities and
numbers); Dinu et al., 2019, "Training neural machine translation to apply terminology
constraints", sec. 2 (spans replaced in source and target alike at training time).
"""

import re

import tensorflow as tf

# Spans past this many in a sentence stay text (tokens ⟦0⟧ to ⟦MAX_SPANS - 1⟧ exist).
MAX_SPANS = 16
OPEN, CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧: never in software messages, one character each
TOKENS = tuple(f"{OPEN}{number}{CLOSE}" for number in range(MAX_SPANS))
# A placeholder token as the model may write it (any number: one past the source's spans is dropped).
TOKEN_PATTERN = f"{OPEN}[0-9]{{1,4}}{CLOSE}"

# Latin letters past ASCII (the é of pré-visualiser) are word characters too: a range of literal characters,
# which both engines read alike.
_LATIN_LETTERS = "\u00c0-\u024f"
# Kinds that need no left boundary, then options and file names or numbers, each after its own boundary (what
# look-behind would say). Longest alternatives first: a URL is not read as a path, `%(name)s` not as `%(`; printf
# flags leave out the space one ("50% done" is prose). Groups: 1 a kind without boundary; 2 and 3 an option's
# boundary and option; 4 and 5 a file name's or number's boundary and span. A match is rewritten as
# boundary + MARK + span + MARK.
_WITHOUT_BOUNDARY = "|".join(
    (
        TOKEN_PATTERN,  # a token already in the text is a span too, so it comes back as it was
        r"(?:https?|ftp)://[^\s<>\"'»]+[^\s<>\"'».,;:!?)\]]",  # URLs
        r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+",  # e-mail addresses
        r"</?[A-Za-z][\w:.-]*(?:\s[^<>]*)?/?>",  # XML/HTML tags
        r"&(?:[A-Za-z]+|#[0-9]+);",  # character entities
        r"%\([A-Za-z_]\w*\)[-+#0]*\d*(?:\.\d+)?[a-zA-Z]",  # %(name)s
        r"%\d+\$[-+#0]*\d*(?:\.\d+)?[a-zA-Z]",  # %1$s
        r"%[-+#0]*\d*(?:\.\d+)?[sdifuxXeEgGcr]",  # %s %d %.2f
        r"\{\{?[^{}\s]*\}\}?",  # {count} {0} {} {{name}}
        r"(?:[A-Za-z]:)?(?:[\\/][\w.$~-]+){2,}[\\/]?",  # /etc/hosts C:\Temp\x
    )
)
_OPTION = rf"(^|[^\w{_LATIN_LETTERS}-])(--?[A-Za-z][\w-]*)"  # --force -v, not the -known of well-known
_FILE_OR_NUMBER = (
    rf"(^|[^\w{_LATIN_LETTERS}.])([\w-]+(?:\.[\w-]+)*\.[a-z]{{1,4}}\d?\b|\d+(?:[.,:]\d+)*\b)"  # config.ini 2.0 1,000
)
PATTERN = f"({_WITHOUT_BOUNDARY})|{_OPTION}|{_FILE_OR_NUMBER}"
# What the pattern takes for a file name but is prose.
NOT_SPANS = r"(?:[Ee]\.g|[Ii]\.e)\.?"
_MARK = "\x01"  # splits a marked text into text, span, text, span, ..., text (removed from the input first)
_REWRITE = rf"\2\4{_MARK}\1\3\5{_MARK}"

_SPAN = re.compile(PATTERN, re.ASCII)
_NOT_SPAN = re.compile(NOT_SPANS, re.ASCII)
_TOKEN = re.compile(f"({TOKEN_PATTERN})")


def _pieces(text):
    """text, span, text, ..., span, text: the odd pieces are the pattern's matches (some may be prose)."""
    rewrite = lambda match: _groups(match, 2, 4) + _MARK + _groups(match, 1, 3, 5) + _MARK
    return _SPAN.sub(rewrite, text.replace(_MARK, "")).split(_MARK)


def _groups(match, *groups):
    return "".join(match.group(group) or "" for group in groups)


def _is_span(piece):
    return piece != "" and _NOT_SPAN.fullmatch(piece) is None


def spans(text):
    """The spans of `text` a translation must keep verbatim, in order (every one, also past `MAX_SPANS`)."""
    return [piece for index, piece in enumerate(_pieces(text)) if index % 2 and _is_span(piece)]


def protect(text):
    """`(protected text, spans)`: the first `MAX_SPANS` spans of `text` replaced by `TOKENS[i]` in order."""
    kept, found = [], []
    for index, piece in enumerate(_pieces(text)):
        if index % 2 and _is_span(piece) and len(found) < MAX_SPANS:
            kept.append(TOKENS[len(found)])
            found.append(piece)
        else:
            kept.append(piece)
    return "".join(kept), found


def protect_pair(source, target):
    """`(protected source, protected target)` of a training pair: each target span equal to a source span
    gets that span's token (its first occurrence not yet taken, else its first), other target spans stay text,
    so the model learns to copy the tokens the source has."""
    protected, found = protect(source)
    taken = set()
    kept = []
    for index, piece in enumerate(_pieces(target)):
        numbers = [number for number, span in enumerate(found) if span == piece] if index % 2 else []
        if numbers:
            number = next((n for n in numbers if n not in taken), numbers[0])
            taken.add(number)
            piece = TOKENS[number]
        kept.append(piece)
    return protected, "".join(kept)


def restore(text, found):
    """`text` with each placeholder token replaced by its span of `found` (a token past them is dropped)."""
    restore_one = lambda match: _span_of(match.group(0), found)
    return _TOKEN.sub(restore_one, text.replace(_MARK, ""))


def _span_of(token, found):
    number = int(token[1:-1])
    return found[number] if number < len(found) else ""


def token_ids(vocabulary):
    """The id of each of `TOKENS` in `vocabulary` (its `tokens` by id), or None where it lacks one."""
    ids = {token: index for index, token in enumerate(vocabulary.tokens)}
    return [ids[token] for token in TOKENS] if all(token in ids for token in TOKENS) else None


@tf.autograph.experimental.do_not_convert  # plain ops: traced as written, in any tf.function
def required_ids(counts, token_ids):
    """`(B, MAX_SPANS)` int32: row b holds the ids of the first `counts[b]` of `TOKENS` (`token_ids`, from
    `token_ids(vocabulary)`), 0 after them: `generate`'s `required_ids` that keep each sentence's placeholders."""
    counts = tf.minimum(tf.cast(counts, tf.int64), MAX_SPANS)[:, None]
    taken = tf.range(MAX_SPANS, dtype=tf.int64)[None] < counts
    return tf.cast(tf.where(taken, tf.constant(token_ids, tf.int64)[None], 0), tf.int32)


def _marked_pieces(strings, pattern, rewrite):
    """Ragged `(B, (pieces))` of `strings` split around `pattern`'s matches (odd pieces), as `_pieces` does."""
    strings = tf.strings.regex_replace(strings, _MARK, "")
    return tf.strings.split(tf.strings.regex_replace(strings, pattern, rewrite), _MARK)


def _odd_pieces(pieces):
    """A ragged bool of `pieces`' shape: True at each row's odd positions."""
    positions = tf.ragged.range(pieces.row_lengths())
    return tf.equal(positions % 2, 1)


@tf.autograph.experimental.do_not_convert  # plain ops: traced as written, in any tf.function
def protect_strings(strings):
    """`(protected strings (B,), spans ragged (B, (n)))`: `protect` of each of `strings` as TensorFlow ops."""
    strings = tf.convert_to_tensor(strings, tf.string)
    pieces = _marked_pieces(strings, PATTERN, _REWRITE)
    values = pieces.flat_values
    is_span = (
        _odd_pieces(pieces).flat_values
        & tf.not_equal(values, "")
        & tf.logical_not(tf.strings.regex_full_match(values, NOT_SPANS))
    )
    counted = tf.cast(is_span, tf.int64)
    before = tf.cumsum(counted, exclusive=True)  # spans before each piece, in the whole batch
    number = before - tf.gather(tf.gather(before, pieces.row_starts()), pieces.value_rowids())
    replaced = is_span & (number < MAX_SPANS)
    tokens = tf.strings.join([OPEN, tf.strings.as_string(number), CLOSE])
    protected = tf.strings.reduce_join(pieces.with_flat_values(tf.where(replaced, tokens, values)), axis=1)
    return protected, tf.ragged.boolean_mask(pieces, pieces.with_flat_values(replaced))


@tf.autograph.experimental.do_not_convert  # plain ops: traced as written, in any tf.function
def restore_strings(strings, found, rows=None):
    """`restore` of each of `strings` with its spans `found` (ragged `(B, (n))`, from `protect_strings`);
    `rows` (int, one per string, default `0..len-1`) says which row of `found` each string takes."""
    strings = tf.convert_to_tensor(strings, tf.string)
    if rows is None:
        rows = tf.range(tf.shape(strings, out_type=tf.int64)[0])
    pieces = _marked_pieces(strings, f"({TOKEN_PATTERN})", rf"{_MARK}\1{_MARK}")
    values = pieces.flat_values
    is_token = _odd_pieces(pieces).flat_values
    digits = tf.strings.regex_replace(values, "[^0-9]", "")
    number = tf.strings.to_number(tf.where(is_token, digits, "0"), tf.int64)
    row = tf.gather(tf.cast(rows, tf.int64), pieces.value_rowids())
    known = number < tf.gather(found.row_lengths(), row)
    flat = tf.concat([found.flat_values, [""]], 0)  # the last: a token past its row's spans
    span = tf.gather(flat, tf.where(known, tf.gather(found.row_starts(), row) + number, tf.size(flat, tf.int64) - 1))
    return tf.strings.reduce_join(pieces.with_flat_values(tf.where(is_token, span, values)), axis=1)

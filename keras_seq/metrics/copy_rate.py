"""Copy rate: how often a translation keeps what must never be translated.

Software messages hold spans that a translation must carry over unchanged:
placeholders a program fills in (`%s`, `%(name)s`, `{count}`), command-line options,
file names and paths, URLs and e-mail addresses, versions and numbers.
"""

import collections

from keras_seq.data import placeholders


def protected_tokens(text):
    """The spans of `text` that a translation must reproduce unchanged, in order
    (`keras_seq.data.placeholders.spans`: the spans its placeholders protect).

    Kinds: URLs, e-mail addresses, XML/HTML tags and character entities, printf
    placeholders (`%s`, `%d`, `%.2f`, `%(name)s`, `%1$s`), brace placeholders (`{count}`,
    `{0}`, `{}`), command-line options (`--force`, `-v`), paths of two or more parts
    (`/etc/hosts`), file names with an extension (`config.ini`), and numbers or versions
    (`3`, `2.0`, `1,000`). A file name must have a letter in its extension and a name
    before the dot, so sentence ends and abbreviations ("e.g.") are not taken for one.
    """
    return placeholders.spans(text)


def copy_rate(sources, predictions):
    """`(rate, count)`: of the `count` sources that hold protected tokens, the share of
    predictions that contain every one of them (as often as the source does).

    `rate` is None when no source holds any.
    """
    sources, predictions = list(sources), list(predictions)
    if len(sources) != len(predictions):
        raise ValueError(f"copy_rate: `predictions` expected one per source ({len(sources)}), got {len(predictions)}.")
    with_tokens = copied = 0
    for source, prediction in zip(sources, predictions):
        needed = collections.Counter(protected_tokens(source))
        if not needed:
            continue
        with_tokens += 1
        copied += all(prediction.count(token) >= count for token, count in needed.items())
    return (copied / with_tokens if with_tokens else None), with_tokens

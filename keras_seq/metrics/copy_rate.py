"""Copy rate: how often a translation keeps what must never be translated.

Software messages hold spans that a translation must carry over unchanged:
placeholders a program fills in (`%s`, `%(name)s`, `{count}`), command-line options,
file names and paths, URLs and e-mail addresses, versions and numbers. Pure Python,
so it runs anywhere (no Keras, no TensorFlow).
"""

import collections
import re

# Longest alternatives first: a URL is not read as a path, `%(name)s` not as `%(`.
_PROTECTED = re.compile(
    r"""
      (?:https?|ftp)://[^\s<>"'»]+[^\s<>"'».,;:!?)\]]    # URLs
    | [\w.+-]+@[\w-]+(?:\.[\w-]+)+                      # e-mail addresses
    | %\([A-Za-z_]\w*\)[-+ #0]*\d*(?:\.\d+)?[a-zA-Z]    # %(name)s
    | %\d+\$[-+ #0]*\d*(?:\.\d+)?[a-zA-Z]               # %1$s
    | %[-+ #0]*\d*(?:\.\d+)?[sdifuxXeEgGcr]             # %s %d %.2f
    | \{\{?[^{}\s]*\}\}?                                 # {count} {0} {} {{name}}
    | (?<![\w-])--?[A-Za-z][\w-]*                        # --force -v
    | (?:[A-Za-z]:)?(?:[\\/][\w.$~-]+){2,}[\\/]?         # /etc/hosts C:\Temp\x
    | (?<![\w.])[\w-]+(?:\.[\w-]+)*\.(?:[a-z]{1,4}\d?)(?![\w])(?<![.](?:e\.g|i\.e))  # config.ini setup.py
    | (?<![\w.])\d+(?:[.,:]\d+)*(?![\w])                 # 2.0 3 1,000 10:30
    """,
    re.VERBOSE,
)
# Words that end like a file name but are prose ("etc.", "e.g.", "vs.").
_NOT_FILES = {"e.g", "i.e", "etc", "vs"}


def protected_tokens(text):
    """The spans of `text` that a translation must reproduce unchanged, in order.

    Kinds: URLs, e-mail addresses, printf placeholders (`%s`, `%d`, `%.2f`,
    `%(name)s`, `%1$s`), brace placeholders (`{count}`, `{0}`, `{}`), command-line
    options (`--force`, `-v`), paths of two or more parts (`/etc/hosts`), file names
    with an extension (`config.ini`), and numbers or versions (`3`, `2.0`, `1,000`).
    A file name must have a letter in its extension and a name before the dot, so
    sentence ends and abbreviations ("etc.") are not taken for one.
    """
    spans = []
    for match in _PROTECTED.finditer(text):
        span = match.group(0)
        if span.rstrip(".") in _NOT_FILES:
            continue
        spans.append(span)
    return spans


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

"""Checks shared by the corpus metrics: hypotheses and references as lists of segments.

Both `corpus_bleu` and `corpus_chrf` take sacreBLEU's layout (a list of hypothesis
strings; references as one flat list or as a list of reference streams), so the
validation and its error messages live here once, named after the calling metric.
Standard library only, like the metrics themselves.
"""


def describe(value):
    """The type and a short repr of `value`, for error messages."""
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


def as_string_list(value, name, metric):
    """`value` as a list of str; a bare string, a non-iterable or a non-str item is a ValueError."""
    if isinstance(value, (str, bytes)):
        # A bare string is iterable, but scoring its characters as separate
        # segments is never what the caller meant.
        raise ValueError(
            f"{metric}: {name} must be a sequence of strings, got a bare "
            f"{describe(value)}; wrap a single segment in a list."
        )
    try:
        items = list(value)
    except TypeError:
        raise ValueError(f"{metric}: {name} must be a sequence of strings, got {describe(value)}.") from None
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise ValueError(f"{metric}: {name}[{index}] must be a str, got {describe(item)}.")
    return items


def reference_streams(references, num_hypotheses, metric):
    """`references` as a list of streams, each one str per hypothesis."""
    expected = "a list of strings (one per hypothesis) or a list of reference streams"
    if isinstance(references, (str, bytes)):
        raise ValueError(f"{metric}: references must be {expected}, got a bare {describe(references)}.")
    try:
        entries = list(references)
    except TypeError:
        raise ValueError(f"{metric}: references must be {expected}, got {describe(references)}.") from None

    # The first entry decides the layout: a str means a flat list (a single
    # reference stream), anything else a list of reference streams.
    if not entries or isinstance(entries[0], str):
        for index, entry in enumerate(entries):
            if not isinstance(entry, str):
                raise ValueError(
                    f"{metric}: references[{index}] must be a str like "
                    f"references[0] in a flat reference list, got {describe(entry)}."
                )
        named_streams = [("references", entries)]
    else:
        named_streams = [
            (f"references[{index}]", as_string_list(stream, f"references[{index}]", metric))
            for index, stream in enumerate(entries)
        ]

    for name, stream in named_streams:
        if len(stream) != num_hypotheses:
            raise ValueError(
                f"{metric}: {name} has {len(stream)} "
                f"segment{'' if len(stream) == 1 else 's'} but hypotheses "
                f"has {num_hypotheses}; expected exactly one "
                "reference segment per hypothesis."
            )
    return [stream for _, stream in named_streams]


def hypotheses_and_streams(hypotheses, references, metric, lowercase=False):
    """`(hypotheses, reference streams)` checked as `as_string_list` and `reference_streams` do.

    With `lowercase`, every segment comes back lowercased: both metrics' case-insensitive
    variants lowercase before anything else.
    """
    hypotheses = as_string_list(hypotheses, "hypotheses", metric)
    streams = reference_streams(references, len(hypotheses), metric)
    if lowercase:
        hypotheses = [segment.lower() for segment in hypotheses]
        streams = [[segment.lower() for segment in stream] for stream in streams]
    return hypotheses, streams

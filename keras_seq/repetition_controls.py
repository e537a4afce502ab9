"""Decoding controls against repetition: the repetition penalty and the no-repeat n-gram ban.

Both read a row's history, the ids it holds before the position being decoded, and change
that row's next-token logits `(R, V)`. The settings are Python numbers (`generate`
compiles per setting, and a value that changes nothing adds no operation) or scalar
tensors set at run time (a SavedModel's options; the work is then skipped by a
conditional when the setting is off).
"""

from keras import ops

from keras_seq import _validation as v


def _row_bits(ids, keep, vocabulary_size):
    """`(R, V)` bool: for each row r, the ids `ids[r, j]` at the positions j where `keep[r, j]`."""
    rows = ops.shape(ids)[0]
    flat = ops.reshape(ops.arange(rows, dtype="int32")[:, None] * vocabulary_size + ops.cast(ids, "int32"), (-1, 1))
    counts = ops.scatter_update(
        ops.zeros((rows * vocabulary_size,), "float32"),
        flat,
        ops.reshape(ops.cast(keep, "float32"), (-1,)),
        reduction="add",
    )
    return ops.reshape(counts, (rows, vocabulary_size)) > 0


def _history(ids, step):
    """`(R, L)` bool: the positions of `ids` `(R, L)` before `step`."""
    return ops.broadcast_to(ops.arange(ops.shape(ids)[1], dtype="int32")[None] < step, ops.shape(ids))


def _when(setting, off, change, logits):
    """`change(logits)` unless `setting` equals `off`: decided in Python for a Python setting, by a conditional
    for a tensor."""
    if v.is_number(setting):
        return logits if setting == off else change(logits)
    return ops.cond(ops.equal(setting, off), lambda: logits, lambda: change(logits))


def penalise_repetitions(logits, ids, step, penalty):
    """float32 `logits` `(R, V)` with those of the ids already in each row's history divided by `penalty` where
    positive and multiplied by it where negative (Keskar et al., 2019, "CTRL", section 4.1, as the NMT toolkits
    apply it): `penalty > 1` makes a token less likely to come again, 1 changes nothing.

    `ids` `(R, L)`: each row's ids, its history at positions `[0, step)` (the start id or prompt included)."""

    def change(logits):
        seen = _row_bits(ids, _history(ids, step), ops.shape(logits)[-1])
        penalised = ops.where(logits > 0, logits / penalty, logits * penalty)
        return ops.where(seen, penalised, logits)

    return _when(penalty, 1, change, logits)


def repeated_ngram_ends(ids, step, size, vocabulary_size):
    """`(R, V)` bool: the ids that, coming at position `step`, would repeat an n-gram of `size` ids already in the
    row's history `ids[:, :step]` (the no-repeat n-gram ban of Paulus et al., 2018, section 2.5); `size` 1 bans
    every id already there.

    An earlier n-gram starting at position j is repeated when its first `size - 1` ids equal the history's
    last `size - 1`: its last id, at `j + size - 1 < step`, is then banned."""
    length = ops.shape(ids)[1]
    starts = ops.arange(length, dtype="int32")
    matches = ops.broadcast_to(starts[None] + size - 1 < step, ops.shape(ids))

    def compare(offset, matches):
        earlier = ops.take(ids, ops.minimum(starts + offset, length - 1), axis=1)
        latest = ops.take(
            ids, ops.clip(ops.convert_to_tensor(step - size + 1 + offset, "int32"), 0, length - 1)[None], axis=1
        )
        return ops.logical_and(matches, earlier == latest)

    if v.is_number(size):
        for offset in range(size - 1):
            matches = compare(offset, matches)
    else:
        matches = ops.fori_loop(0, size - 1, compare, matches)
    following = ops.take(ids, ops.minimum(starts + size - 1, length - 1), axis=1)
    return _row_bits(following, matches, vocabulary_size)


def ban_repeated_ngrams(logits, ids, step, size, forbidden_value):
    """`logits` `(R, V)` with `forbidden_value` at the ids `repeated_ngram_ends` bans (none when `size` is 0)."""

    def change(logits):
        banned = repeated_ngram_ends(ids, step, size, ops.shape(logits)[-1])
        return ops.where(banned, forbidden_value, logits)

    return _when(size, 0, change, logits)

"""Preparing a training corpus once, in bounded memory: streamed, cleaned, deduplicated, a vocabulary
trained on a sample, encoded in chunks into a `keras_seq.data.prepared` folder.

Three passes over the data, none holding it whole: the first reads every record and keeps 12
bytes of each (a 64-bit hash for exact duplicates, its longest field in characters) and the
reason a record is left out (empty field, a length ratio past `max_ratio`); the second reads
a seeded sample of the kept records, which the vocabularies are trained on (the way Eole's
`n_sample`, Marian's `--sentencepiece-max-lines` and SentencePiece's own `input_sentence_size`
bound that step); the third encodes the kept records in chunks and appends their ids to the
folder's files. A corpus of a few thousand records goes through the same passes as one of
millions.
"""

import hashlib
import os
import sys
import time

import numpy as np

from keras_seq.data import prepared

CHUNK = 20_000  # records encoded at once: large enough for fast encoding, small enough to keep memory flat
REASONS = ("empty", "length_ratio", "duplicates", "too_long", "longer_than_max_length")


def file_digest(path):
    """Hex BLAKE2b digest of a file's bytes (what names its prepared folder)."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def records_digest(records):
    """Hex BLAKE2b digest of records (tuples of strings), for data that is not a file."""
    digest = hashlib.blake2b(digest_size=16)
    for record in records:
        digest.update("\t".join(record).encode("utf-8") + b"\n")
    return digest.hexdigest()


class Progress:
    """One line of progress on stdout: redrawn on a terminal, a line every `every` seconds in a log."""

    def __init__(self, label, total=None, unit="records", every=30.0):
        self.label, self.total, self.unit, self.every = label, total, unit, every
        self.count, self.start, self.shown = 0, time.monotonic(), time.monotonic()
        self.terminal = sys.stdout.isatty()

    def update(self, count):
        self.count += count
        now = time.monotonic()
        if now - self.shown >= (0.2 if self.terminal else self.every):
            self.shown = now
            self._show(end="\r" if self.terminal else "\n")

    def _show(self, end, note=""):
        done = f"{self.count:,}" + (f" / {self.total:,}" if self.total else "")
        rate = self.count / max(time.monotonic() - self.start, 1e-9)
        print(
            f"{self.label}: {done} {self.unit} ({rate:,.0f}/s, {time.monotonic() - self.start:.0f} s){note}",
            end=end,
            flush=True,
        )

    def close(self, note=""):
        self._show("\n", note)


def _hash64(record):
    return int.from_bytes(hashlib.blake2b("\t".join(record).encode("utf-8"), digest_size=8).digest(), "little")


def scan(records, label=None, max_ratio=None, max_records=None, max_characters=None):
    """Pass one: `(kept mask, counts by reason)` of every record of `records()` (progress shown with a `label`).

    Left out: a record with an empty field (`empty`), one whose longest field has more than
    `max_ratio` times the characters of its shortest (`length_ratio`; None: no limit), a
    repeat of an earlier record (`duplicates`, by 64-bit hash; the first is kept), and one
    whose longest field is past `max_characters`, by default the larger of 400 and 8 times the
    99th percentile of the kept ones (`too_long`: a stray line holding a whole file cannot blow
    up memory).
    """
    hashes, longest, reasons = [], [], []
    progress = Progress(f"{label}: reading") if label else None
    for number, record in enumerate(records()):
        if max_records is not None and number >= max_records:
            break
        fields = [field.strip() for field in record]
        sizes = [len(field) for field in fields]
        reason = 0
        if min(sizes) == 0:
            reason = 1
        elif max_ratio is not None and max(sizes) > max_ratio * min(sizes):
            reason = 2
        hashes.append(_hash64(fields))
        longest.append(max(sizes))
        reasons.append(reason)
        if progress and number % 10_000 == 9_999:
            progress.update(10_000)
    hashes, longest, reasons = (
        np.asarray(hashes, np.uint64),
        np.asarray(longest, np.int64),
        np.asarray(reasons, np.int8),
    )
    usable = np.flatnonzero(reasons == 0)
    _, first = np.unique(hashes[usable], return_index=True)
    repeats = np.ones(len(usable), bool)
    repeats[first] = False
    reasons[usable[repeats]] = 3
    kept = reasons == 0
    if max_characters is None and kept.any():
        max_characters = max(400, 8 * int(np.sort(longest[kept])[int(0.99 * (kept.sum() - 1))]))
    if max_characters is not None:
        reasons[kept & (longest > max_characters)] = 4
        kept = reasons == 0
    counts = {reason: int((reasons == code).sum()) for code, reason in enumerate(REASONS[:4], 1)}
    if progress:
        progress.count = len(reasons)
        progress.close(_left_out(counts, int(kept.sum())))
    return kept, counts


def _left_out(counts, kept):
    dropped = ", ".join(f"{count:,} {reason.replace('_', ' ')}" for reason, count in counts.items() if count)
    return f"; {kept:,} kept" + (f", left out: {dropped}" if dropped else "")


def sample(records, kept, size, seed):
    """Pass two: up to `size` kept records, drawn by `seed`, in the data's order (all of them when fewer)."""
    chosen = np.flatnonzero(kept)
    if len(chosen) > size:
        chosen = np.sort(np.random.default_rng(seed).choice(chosen, size, replace=False))
    wanted, result = iter(chosen), []
    following = next(wanted, None)
    for number, record in enumerate(records()):
        if following is None:
            break
        if number == following:
            result.append(tuple(field.strip() for field in record))
            following = next(wanted, None)
    return result


def encode_all(records, kept, encode, writer, label, variants=1):
    """Pass three: the kept records encoded `CHUNK` at a time and appended to `writer` (a `prepared.Writer`).

    `encode(chunk, variant)` returns `({column: (flat ids, lengths)}, mask of the rows kept)` (a row
    past the model's longest sequence is dropped). Returns how many rows it dropped.
    """
    progress = Progress(f"{label}: encoding", total=int(kept.sum()))
    dropped, chunk = 0, []

    def flush():
        nonlocal dropped
        masks = []
        for variant in range(variants):
            columns, mask = encode(chunk, variant)
            masks.append(mask)
            writer.append(
                variant, {name: _masked(flat, lengths, masks[0]) for name, (flat, lengths) in columns.items()}
            )
        dropped += int((~masks[0]).sum())
        progress.update(len(chunk))
        chunk.clear()

    for number, record in enumerate(records()):
        if number >= len(kept):
            break
        if kept[number]:
            chunk.append(tuple(field.strip() for field in record))
            if len(chunk) == CHUNK:
                flush()
    if chunk:
        flush()
    progress.close(f"; {dropped:,} longer than the longest sequence left out" if dropped else "")
    return dropped


def _masked(flat, lengths, mask):
    """The rows of `(flat, lengths)` where `mask` holds."""
    lengths = np.asarray(lengths, np.int64)
    row_of = np.repeat(mask, lengths)
    return np.asarray(flat)[row_of], lengths[mask]


def prepare(
    directory,
    records,
    label,
    build,
    encode,
    columns,
    vocabulary_size,
    vocab_sample,
    seed,
    max_ratio=None,
    max_records=None,
    variants=1,
    metadata=None,
):
    """Prepare `records()` (a function returning a fresh iterator of tuples of strings) into `directory`.

    `build(sample)` makes the vocabularies from the sampled records (returns their configs'
    JSON-able dict, stored in the manifest, and the objects); `encode(chunk, vocabularies,
    variant)` as in `encode_all`. Returns the `prepared.Prepared` folder.
    """
    started = time.monotonic()
    kept, counts = scan(records, label, max_ratio, max_records)
    if not kept.any():
        raise ValueError(
            f"training data: expected some usable examples, got none after cleaning "
            f"({_left_out(counts, 0).split(', ', 1)[-1]})"
        )
    chosen = sample(records, kept, vocab_sample, seed)
    print(f"{label}: training the vocabulary on {len(chosen):,} sampled examples", flush=True)
    configs, vocabularies = build(chosen)
    del chosen
    writer = prepared.Writer(directory, columns, variants, prepared.id_dtype(vocabulary_size(vocabularies)))
    try:
        dropped = encode_all(
            records, kept, lambda chunk, variant: encode(chunk, vocabularies, variant), writer, label, variants
        )
        if writer.rows == 0:
            raise ValueError("--max-length: expected some training examples within it, got none")
        writer.close(
            {
                **(metadata or {}),
                "vocabularies": configs,
                "left_out": {**counts, REASONS[4]: dropped},
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    except BaseException:
        writer.abandon()
        raise
    return prepared.Prepared(directory)


def wait_for(directory, label, poll=1.0, timeout=24 * 3600):
    """The prepared folder another process is writing, once it is complete (processes other than 0)."""
    shown, start = False, time.monotonic()
    while prepared.read_manifest(directory) is None:
        if not shown:
            print(f"{label}: waiting for process 0 to prepare {directory}", flush=True)
            shown = True
        if time.monotonic() - start > timeout:
            raise ValueError(
                f"{label}: prepared data {directory!r}: expected process 0 to finish it, waited {timeout:.0f} s"
            )
        time.sleep(poll)
    return prepared.Prepared(directory)


def prepared_folder(root, key):
    """Where the data prepared under `key` (a digest of the data and the flags that shape it) lives."""
    return os.path.join(root, key[:24])

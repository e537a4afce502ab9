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
import tempfile
import time

import numpy as np

from keras_seq import _atomic as atomic
from keras_seq.data import prepared

FINGERPRINT_BLOCKS = 64  # blocks a file's fingerprint reads: 4 MiB, a few milliseconds from any disk
SCAN_BUCKETS = 64  # files the scan spreads the kept records' hashes over, by their top bits: one is sorted at a time
CHUNK = 20_000  # records encoded at once: large enough for fast encoding, small enough to keep memory flat
REASONS = ("empty", "length_ratio", "duplicates", "too_long", "longer_than_max_length")


def file_digest(path):
    """Hex BLAKE2b digest of a file's bytes (what names its prepared folder)."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def file_fingerprint(path, blocks=FINGERPRINT_BLOCKS, block_size=1 << 16):
    """Hex BLAKE2b of a file's size, modification time and `blocks` evenly spaced blocks of its bytes
    (the whole file when it is smaller): what finds a file's `file_digest` again without reading it all."""
    status = os.stat(path)
    digest = hashlib.blake2b(f"{status.st_size} {status.st_mtime_ns}".encode(), digest_size=16)
    with open(path, "rb") as f:
        if status.st_size <= blocks * block_size:
            digest.update(f.read())
        else:
            for offset in np.linspace(0, status.st_size - block_size, blocks).astype(np.int64):
                f.seek(int(offset))
                digest.update(f.read(block_size))
    return digest.hexdigest()


def known_file_digest(path, cache, verify=False):
    """`file_digest(path)`, remembered in the folder `cache` by the file's `file_fingerprint`: a rerun or a
    `--resume` reads a few MiB of the file, not all of it. `verify` reads it all and corrects the cache."""
    remembered = os.path.join(cache, "digests", file_fingerprint(path) + ".txt")
    if not verify and os.path.isfile(remembered):
        with open(remembered, encoding="utf-8") as f:
            return f.read().strip()
    digest = file_digest(path)
    os.makedirs(os.path.dirname(remembered), exist_ok=True)
    if verify and os.path.isfile(remembered):
        with open(remembered, encoding="utf-8") as f:
            if f.read().strip() != digest:
                print(f"{path}: its content changed with its size and time unchanged; its digest is corrected")
    atomic.write_text(remembered, digest + "\n")
    return digest


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


_HASHED = np.dtype([("hash", "<u8"), ("number", "<i8")])
_WIDEST = np.iinfo(np.int32).max


def scan(records, label=None, max_ratio=None, max_records=None, max_characters=None, staging=None):
    """Pass one: `(kept mask, counts by reason)` of every record of `records()` (progress shown with a `label`).

    Left out: a record with an empty field (`empty`), one whose longest field has more than
    `max_ratio` times the characters of its shortest (`length_ratio`; None: no limit), a
    repeat of an earlier record (`duplicates`, by 64-bit hash; the first is kept), and one
    whose longest field is past `max_characters`, by default the larger of 400 and 8 times the
    99th percentile of the kept ones (`too_long`: a stray line holding a whole file cannot blow
    up memory).

    Memory: one byte a record (its reason). Each record's longest field and the usable ones'
    hashes go, `CHUNK` records at a time, to files in a temporary folder under `staging` (None:
    the system's), the hashes spread over `SCAN_BUCKETS` files by their top bits, and the
    duplicates are found one bucket at a time.
    """
    progress = Progress(f"{label}: reading") if label else None
    with tempfile.TemporaryDirectory(prefix=".scan-", dir=staging) as folder:
        longest_path = os.path.join(folder, "longest")
        buckets = [os.path.join(folder, f"hashes.{bucket}") for bucket in range(SCAN_BUCKETS)]
        reasons = _scanned_reasons(records, max_ratio, max_records, longest_path, buckets, progress)
        for bucket in buckets:
            hashed = np.fromfile(bucket, _HASHED)
            repeats = np.ones(len(hashed), bool)
            repeats[np.unique(hashed["hash"], return_index=True)[1]] = False  # the first of each hash stays
            reasons[hashed["number"][repeats]] = 3
        if max_characters is None and (reasons == 0).any():
            max_characters = max(400, 8 * _kept_percentile(longest_path, reasons, 0.99))
        if max_characters is not None:
            for start, longest in _chunks_of(longest_path):
                part = reasons[start : start + len(longest)]
                part[(part == 0) & (longest > max_characters)] = 4
    kept = reasons == 0
    counts = {reason: int((reasons == code).sum()) for code, reason in enumerate(REASONS[:4], 1)}
    if progress:
        progress.count = len(reasons)
        progress.close(_left_out(counts, int(kept.sum())))
    return kept, counts


def _scanned_reasons(records, max_ratio, max_records, longest_path, buckets, progress):
    """Each record's reason code (0: usable so far), with its longest field written to `longest_path`
    (int32) and the usable ones' `(hash, number)` appended to `buckets`, chunk by chunk."""
    reasons, chunk = [], ([], [], [])

    def flush(first):
        hashes, longest, codes = chunk
        codes = np.asarray(codes, np.int8)
        with open(longest_path, "ab") as f:
            f.write(np.minimum(np.asarray(longest, np.int64), _WIDEST).astype("<i4").tobytes())
        usable = np.flatnonzero(codes == 0)
        hashed = np.empty(len(usable), _HASHED)
        hashed["hash"], hashed["number"] = np.asarray(hashes, np.uint64)[usable], first + usable
        bucket_of = (hashed["hash"] >> np.uint64(64 - SCAN_BUCKETS.bit_length() + 1)).astype(np.int64)
        for bucket in np.unique(bucket_of):
            with open(buckets[bucket], "ab") as f:
                f.write(hashed[bucket_of == bucket].tobytes())
        reasons.append(codes)
        for values in chunk:
            values.clear()

    count = 0
    for record in records():
        if max_records is not None and count >= max_records:
            break
        fields = [field.strip() for field in record]
        sizes = [len(field) for field in fields]
        code = 0
        if min(sizes) == 0:
            code = 1
        elif max_ratio is not None and max(sizes) > max_ratio * min(sizes):
            code = 2
        chunk[0].append(_hash64(fields))
        chunk[1].append(max(sizes))
        chunk[2].append(code)
        count += 1
        if len(chunk[2]) == CHUNK:
            flush(count - CHUNK)
        if progress and count % 10_000 == 0:
            progress.update(10_000)
    if chunk[2]:
        flush(count - len(chunk[2]))
    for bucket in buckets:
        open(bucket, "ab").close()
    open(longest_path, "ab").close()
    return np.concatenate(reasons) if reasons else np.zeros(0, np.int8)


def _chunks_of(path, dtype="<i4"):
    """`(first index, values)` of the file of `dtype` values at `path`, `CHUNK` values at a time."""
    with open(path, "rb") as f:
        start = 0
        while len(values := np.fromfile(f, dtype, CHUNK)):
            yield start, values
            start += len(values)


def _kept_percentile(longest_path, reasons, fraction, bins=1 << 16):
    """The `fraction` quantile (the sorted value at `int(fraction * (n - 1))`) of the longest fields of the
    records whose reason is 0, by a histogram of `bins` values and the rare values past it kept aside."""
    counts, beyond = np.zeros(bins, np.int64), []
    for start, longest in _chunks_of(longest_path):
        values = longest[reasons[start : start + len(longest)] == 0]
        counts += np.bincount(values[values < bins], minlength=bins)
        beyond.append(values[values >= bins])
    rank = int(fraction * (counts.sum() + sum(map(len, beyond)) - 1))
    below = np.cumsum(counts)
    if rank < below[-1]:
        return int(np.searchsorted(below, rank, side="right"))
    return int(np.sort(np.concatenate(beyond))[rank - below[-1]])


def _left_out(counts, kept):
    dropped = ", ".join(f"{count:,} {reason.replace('_', ' ')}" for reason, count in counts.items() if count)
    return f"; {kept:,} kept" + (f", left out: {dropped}" if dropped else "")


def sample(records, kept, size, seed):
    """Pass two: up to `size` kept records, drawn by `seed`, in the data's order (all of them when fewer)."""
    total = int(kept.sum())
    ranks = (
        np.arange(total) if total <= size else np.sort(np.random.default_rng(seed).choice(total, size, replace=False))
    )
    wanted, result = iter(_numbers_of_kept(kept, ranks)), []
    following = next(wanted, None)
    for number, record in enumerate(records()):
        if following is None:
            break
        if number == following:
            result.append(tuple(field.strip() for field in record))
            following = next(wanted, None)
    return result


def _numbers_of_kept(kept, ranks):
    """The record numbers of the kept records of sorted `ranks` (0: the first kept), `CHUNK` records at a time."""
    numbers, seen = [], 0
    for start in range(0, len(kept), CHUNK):
        positions = np.flatnonzero(kept[start : start + CHUNK])
        inside = ranks[np.searchsorted(ranks, seen) : np.searchsorted(ranks, seen + len(positions))]
        numbers.append(start + positions[inside - seen])
        seen += len(positions)
    return np.concatenate(numbers) if numbers else np.zeros(0, np.int64)


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
    kept, counts = scan(records, label, max_ratio, max_records, staging=_parent(directory))
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


def _parent(directory):
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    return parent


def prepared_folder(root, key):
    """Where the data prepared under `key` (a digest of the data and the flags that shape it) lives."""
    return os.path.join(root, key[:24])

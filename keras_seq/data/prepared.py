"""Prepared data on disk: id sequences in flat files, each row read at its offset.

A prepared folder holds, for each column (e.g. `source`, `target`) and each encoding of the
rows (`variants`: subword splits drawn anew, read in turn by epoch), two raw little-endian
arrays: the ids of every row one after the other (`COLUMN.VARIANT.ids`, uint16 when the
vocabulary fits, else int32) and where each row starts (`COLUMN.VARIANT.offsets`, int64, one
more than the rows); beside them the longest column of each row (`VARIANT.lengths`, uint16),
which batching sorts and cuts by. `manifest.json`, written last, names them.

Raw arrays, as fairseq's binarized data: opening a folder reads only the manifest, and a batch
reads only its own rows, by positioned reads (`os.pread`) of their offsets and ids. The pages
read stay the operating system's cache, never the process's: a memory map would count every
page it touched (and those faulted in around it) as the process's resident memory, which then
grows with the rows a run has read. The row lengths, read whole once an epoch to plan its
batches, are memory-mapped. Any tool that reads numpy (or a byte offset) reads the files, with
no format library to keep in step.
"""

import json
import os
import threading

import numpy as np

from keras_seq import _atomic as atomic

MANIFEST = "manifest.json"
FORMAT = 1  # bumped when the files' layout changes: an older folder is then prepared anew


def id_dtype(vocabulary_size):
    """The narrowest id type that holds every id of a vocabulary of `vocabulary_size`."""
    return np.dtype("<u2") if vocabulary_size <= np.iinfo(np.uint16).max + 1 else np.dtype("<i4")


class Writer:
    """Appends encoded rows to the files of one prepared folder (under a temporary name until `close`)."""

    def __init__(self, directory, columns, variants, dtype):
        self.directory, self.columns, self.variants, self.dtype = (
            directory,
            tuple(columns),
            int(variants),
            np.dtype(dtype),
        )
        self.staged = os.path.join(
            os.path.dirname(os.path.abspath(directory)), f".partial-{os.getpid()}-{os.path.basename(directory)}"
        )
        atomic.remove(self.staged)
        os.makedirs(self.staged)
        self._files, self._offsets, self._ends = {}, {}, {}
        for column in self.columns:
            for variant in range(self.variants):
                path = os.path.join(self.staged, f"{column}.{variant}")
                self._files[column, variant] = open(path + ".ids", "wb")
                self._offsets[column, variant] = open(path + ".offsets", "wb")
                self._offsets[column, variant].write(np.zeros(1, "<i8").tobytes())
                self._ends[column, variant] = 0
        self._lengths = {
            variant: open(os.path.join(self.staged, f"{variant}.lengths"), "wb") for variant in range(self.variants)
        }
        self.rows = self.longest = 0

    def append(self, variant, encoded):
        """Append one chunk of rows of `variant`: `encoded` maps each column to `(flat ids, row lengths)`."""
        longest = None
        for column in self.columns:
            flat, lengths = encoded[column]
            self._files[column, variant].write(np.asarray(flat, self.dtype).tobytes())
            ends = self._ends[column, variant] + np.cumsum(lengths, dtype=np.int64)
            self._offsets[column, variant].write(ends.astype("<i8").tobytes())
            if len(ends):
                self._ends[column, variant] = int(ends[-1])
            longest = lengths if longest is None else np.maximum(longest, lengths)
        self._lengths[variant].write(np.minimum(longest, np.iinfo(np.uint16).max).astype("<u2").tobytes())
        if variant == 0:
            self.rows += len(longest)
        if len(longest):
            self.longest = max(self.longest, int(longest.max()))

    def close(self, metadata):
        """Write the manifest (`metadata` goes into it), then publish the folder whole."""
        self._close_files()
        manifest = {
            "format": FORMAT,
            "columns": list(self.columns),
            "variants": self.variants,
            "rows": self.rows,
            "longest": self.longest,
            "dtype": self.dtype.str,
            **metadata,
        }
        with open(os.path.join(self.staged, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, ensure_ascii=False)
        atomic.flush_to_disk(self.staged)
        atomic.remove(self.directory)
        os.replace(self.staged, self.directory)
        atomic.flush_to_disk(os.path.dirname(os.path.abspath(self.directory)), files=False)

    def _close_files(self):
        for handle in (*self._files.values(), *self._offsets.values(), *self._lengths.values()):
            handle.close()

    def abandon(self):
        self._close_files()
        atomic.remove(self.staged)


def read_manifest(directory):
    """The manifest of a complete prepared folder, or None (missing, partial or of an older format)."""
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return manifest if manifest.get("format") == FORMAT else None


class Prepared:
    """The rows of a prepared folder, read row by row at their offsets.

    `rows` rows of `columns`, each stored in `variants` encodings; `lengths(variant)` is
    every row's longest column; `gather(variant, indices)` the rows at `indices` of each
    column as flat ids and row lengths. `rows_read`, `bytes_read` and `ids_read` (by column)
    count what `gather` has read (what one process of a multi-process run takes of the data).
    """

    def __init__(self, directory):
        manifest = read_manifest(directory)
        if manifest is None:
            raise ValueError(
                f"prepared data {directory!r}: expected a complete prepared folder (its {MANIFEST}), got none"
            )
        self.directory, self.manifest = directory, manifest
        self.columns, self.variants, self.rows = tuple(manifest["columns"]), manifest["variants"], manifest["rows"]
        self.longest = manifest["longest"]  # the longest row of any column and variant
        self.dtype = np.dtype(manifest["dtype"])
        self._files, self._lengths = {}, {}
        self.rows_read = self.bytes_read = 0
        self.ids_read = dict.fromkeys(self.columns, 0)

    def _files_of(self, column, variant):
        """The open `(ids, offsets)` files of `column` in `variant`."""
        key = (column, variant)
        if key not in self._files:
            path = os.path.join(self.directory, f"{column}.{variant}")
            self._files[key] = tuple(open(path + suffix, "rb", buffering=0) for suffix in (".ids", ".offsets"))
        return self._files[key]

    def _bounds(self, column, variant, indices):
        """`(ids file, starts, ends)`: where the rows at `indices` of `column` in `variant` start and end."""
        ids, offsets = self._files_of(column, variant)
        bounds = np.frombuffer(b"".join(_read(offsets, 8 * int(row), 16) for row in indices), "<i8").reshape(-1, 2)
        return ids, bounds[:, 0], bounds[:, 1]

    def lengths(self, variant=0):
        """Every row's longest column in ids (uint16, memory-mapped: read as it is indexed)."""
        if variant not in self._lengths:
            self._lengths[variant] = np.memmap(os.path.join(self.directory, f"{variant}.lengths"), "<u2", mode="r")
        return self._lengths[variant]

    def ids_in_rows(self, column, variant, indices):
        """How many ids `column` holds in the rows at `indices` of `variant` (from the offsets alone)."""
        _, starts, ends = self._bounds(column, variant, indices)
        return int((ends - starts).sum())

    def gather(self, variant, indices):
        """`{column: (flat int32 ids, row lengths)}` of the rows at `indices` of `variant`."""
        size, result = self.dtype.itemsize, {}
        for column in self.columns:
            ids, starts, ends = self._bounds(column, variant, indices)
            raw = b"".join(_read(ids, int(start) * size, int(end - start) * size) for start, end in zip(starts, ends))
            flat = np.frombuffer(raw, self.dtype).astype(np.int32)
            self.bytes_read += len(raw)
            self.ids_read[column] += flat.size
            result[column] = (flat, ends - starts)
        self.rows_read += len(indices)
        return result


_seek_lock = threading.Lock()


def _read(handle, offset, size):
    """`size` bytes of the open file `handle` from `offset`, from any thread (no shared file position where
    the system has `os.pread`)."""
    if hasattr(os, "pread"):
        return os.pread(handle.fileno(), size, offset)
    with _seek_lock:
        handle.seek(offset)
        return handle.read(size)


def padded(flat, lengths, rows, width):
    """`(rows, width)` int32 ids: row i holds `lengths[i]` ids of `flat` then zeros (rows past the data: all zeros)."""
    out = np.zeros((rows, width), np.int32)
    row = np.repeat(np.arange(len(lengths)), lengths)
    column = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[row, column] = flat
    return out

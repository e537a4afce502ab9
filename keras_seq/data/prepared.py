"""Prepared data on disk: id sequences in flat files read through memory maps.

A prepared folder holds, for each column (e.g. `source`, `target`) and each encoding of the
rows (`variants`: subword splits drawn anew, read in turn by epoch), two raw little-endian
arrays: the ids of every row one after the other (`COLUMN.VARIANT.ids`, uint16 when the
vocabulary fits, else int32) and where each row starts (`COLUMN.VARIANT.offsets`, int64, one
more than the rows); beside them the longest column of each row (`VARIANT.lengths`, uint16),
which batching sorts and cuts by. `manifest.json`, written last, names them.

Raw arrays behind `numpy.memmap`, as fairseq's binarized data: opening a folder reads only the
manifest, a batch reads only its own rows' pages, and the operating system keeps or evicts
those pages, so a process's resident memory does not grow with the corpus; any tool that
reads numpy (or a byte offset) reads them, with no format library to keep in step.
"""

import json
import os

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
        self._files = {}
        self._ends = {}
        for column in self.columns:
            for variant in range(self.variants):
                self._files[column, variant] = open(os.path.join(self.staged, f"{column}.{variant}.ids"), "wb")
                self._ends[column, variant] = [np.zeros(1, np.int64)]
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
            ends = self._ends[column, variant]
            ends.append(ends[-1][-1:] + np.cumsum(lengths, dtype=np.int64))
            longest = lengths if longest is None else np.maximum(longest, lengths)
        self._lengths[variant].write(np.minimum(longest, np.iinfo(np.uint16).max).astype("<u2").tobytes())
        if variant == 0:
            self.rows += len(longest)
        if len(longest):
            self.longest = max(self.longest, int(longest.max()))

    def close(self, metadata):
        """Write the offsets and the manifest (`metadata` goes into it), then publish the folder whole."""
        for handle in (*self._files.values(), *self._lengths.values()):
            handle.close()
        for (column, variant), ends in self._ends.items():
            np.concatenate(ends).astype("<i8").tofile(os.path.join(self.staged, f"{column}.{variant}.offsets"))
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

    def abandon(self):
        for handle in (*self._files.values(), *self._lengths.values()):
            handle.close()
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
    """The rows of a prepared folder, read through memory maps.

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
        self._ids, self._offsets, self._lengths = {}, {}, {}
        self.rows_read = self.bytes_read = 0
        self.ids_read = dict.fromkeys(self.columns, 0)

    def _maps(self, column, variant):
        key = (column, variant)
        if key not in self._ids:
            path = os.path.join(self.directory, f"{column}.{variant}")
            offsets = np.memmap(path + ".offsets", "<i8", mode="r")
            self._offsets[key] = offsets
            # An empty file cannot be mapped: a column of no ids (every row empty) reads as an empty array.
            self._ids[key] = np.memmap(path + ".ids", self.dtype, mode="r") if offsets[-1] else np.zeros(0, self.dtype)
        return self._ids[key], self._offsets[key]

    def lengths(self, variant=0):
        """Every row's longest column in ids (int32, in memory: 4 bytes a row)."""
        if variant not in self._lengths:
            path = os.path.join(self.directory, f"{variant}.lengths")
            self._lengths[variant] = np.fromfile(path, "<u2").astype(np.int32)
        return self._lengths[variant]

    def ids_in_rows(self, column, variant, indices):
        """How many ids `column` holds in the rows at `indices` of `variant` (from the offsets alone)."""
        _, offsets = self._maps(column, variant)
        indices = np.asarray(indices, np.int64)
        return int((offsets[indices + 1] - offsets[indices]).sum())

    def gather(self, variant, indices):
        """`{column: (flat int32 ids, row lengths)}` of the rows at `indices` of `variant`."""
        indices = np.asarray(indices, np.int64)
        result = {}
        for column in self.columns:
            ids, offsets = self._maps(column, variant)
            starts, ends = offsets[indices], offsets[indices + 1]
            lengths = ends - starts
            # Each row's positions in the flat ids: its start, plus 0 .. length-1.
            within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            flat = ids[np.repeat(starts, lengths) + within].astype(np.int32)
            self.bytes_read += flat.size * self.dtype.itemsize
            self.ids_read[column] += flat.size
            result[column] = (flat, lengths)
        self.rows_read += len(indices)
        return result


def padded(flat, lengths, rows, width):
    """`(rows, width)` int32 ids: row i holds `lengths[i]` ids of `flat` then zeros (rows past the data: all zeros)."""
    out = np.zeros((rows, width), np.int32)
    row = np.repeat(np.arange(len(lengths)), lengths)
    column = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[row, column] = flat
    return out

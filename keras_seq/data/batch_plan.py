"""Batches of prepared rows: which rows make each batch of each epoch, and the batches themselves.

Each epoch is drawn by a generator keyed by `(seed, epoch)`, cut into pools, each pool sorted by
length and cut into batches of about one length (Ott et al., 2018, "Scaling Neural Machine
Translation", sec. 4), by a count of examples (`batch_size`) or by a budget of padded tokens
(`batch_tokens`: rows x width at most that, the way fairseq's `--max-tokens` and Eole's token
batches count); the batches are then shuffled by the same generator. An epoch's plan depends on
the row lengths and the seed alone, so batch `b` of epoch `e` is found without reading the ones
before: a run resumes at any batch in the time one epoch's plan takes (about a second for two
million rows).

Widths are padded to `pipeline.bucket_edges` where each input shape is compiled (JAX; XLA), and
a token batch's rows to what its width allows, so such a step sees one shape per edge.
"""

import concurrent.futures
import threading

import numpy as np

from keras_seq import _validation as v
from keras_seq.data import pipeline, prepared

POOL_BATCHES = pipeline.POOL_BATCHES


class BatchPlan:
    """The batches of every epoch of `rows` examples whose lengths `lengths(variant)` gives.

    Args:
        lengths: `lengths(variant)` -> int array of each row's longest column.
        rows: examples of each variant.
        seed: keys each epoch's draw; None keeps the data's order (pools in turn) and the batches'.
        batch_size / batch_tokens: one of them: examples a batch, or padded tokens a batch
            (rows times width; a row longer than the budget makes a batch of its own).
        max_length: the longest row (the largest bucket edge).
        pad_to_edges: widths to bucket edges, and token batches' rows to `batch_tokens // width`.
        variants: encodings of the rows; epoch e reads variant `e % variants`.
        parts: a batch's rows are padded to a multiple of this (the devices or processes that
            split it into equal parts).
    """

    def __init__(
        self,
        lengths,
        rows,
        seed,
        max_length,
        batch_size=None,
        batch_tokens=None,
        pad_to_edges=False,
        variants=1,
        parts=1,
        pool_batches=POOL_BATCHES,
    ):
        if (batch_size is None) == (batch_tokens is None):
            v.fail("BatchPlan", "batch_size/batch_tokens", "exactly one of them", f"{batch_size} and {batch_tokens}")
        for name, value in (("batch_size", batch_size), ("batch_tokens", batch_tokens)):
            if value is not None:
                v.check_positive_int("BatchPlan", name, value)
        v.check_positive_int("BatchPlan", "rows", rows)
        self.lengths, self.rows, self.seed, self.variants = lengths, int(rows), seed, int(variants)
        self.batch_size, self.batch_tokens, self.parts = batch_size, batch_tokens, int(parts)
        self.edges = np.asarray(pipeline.bucket_edges(max_length) if pad_to_edges else [], np.int64)
        self.largest = pipeline.bucket_edges(max_length)[-1]
        if batch_size is not None:
            self.pool_rows = pool_batches * batch_size
        else:  # about `pool_batches` batches of rows of the mean width
            self.pool_rows = max(1, pool_batches * batch_tokens // max(1, int(np.mean(lengths(0)))))
        self._plans, self._counts, self._lock = {}, {}, threading.Lock()
        self._planner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="batch-plan")

    def widths(self, longest):
        """The padded width of batches whose longest row is `longest` (an array)."""
        longest = np.maximum(longest, 1)
        if not self.edges.size:
            return longest
        return self.edges[np.minimum(np.searchsorted(self.edges, longest), len(self.edges) - 1)]

    def epoch(self, epoch):
        """`(order, starts, ends, widths, padded rows)` of an epoch: batch i holds rows `order[starts[i]:ends[i]]`.

        Asking for an epoch starts the next one's plan on a background thread, so training does
        not stall at the boundary while it is drawn; the two plans kept cost 4 bytes a row each.
        """
        with self._lock:
            for wanted in (epoch, epoch + 1):
                if wanted not in self._plans:
                    self._plans[wanted] = self._planner.submit(self._plan, wanted)
            for old in [key for key in self._plans if key not in (epoch, epoch + 1)]:
                self._plans.pop(old)
            planned = self._plans[epoch]
        plan = planned.result()
        self._counts[epoch] = len(plan[1])
        return plan

    def batch_count(self, epoch):
        if epoch not in self._counts:
            self.epoch(epoch)
        return self._counts[epoch]

    def position_after(self, position, steps):
        """The `(epoch, batch)` `steps` batches after `position`."""
        epoch, batch = position
        batch += steps
        while batch >= self.batch_count(epoch):
            batch -= self.batch_count(epoch)
            epoch += 1
        return epoch, batch

    def _plan(self, epoch):
        lengths = self.lengths(epoch % self.variants)
        order = np.arange(self.rows, dtype=np.int32 if self.rows < 2**31 else np.int64)
        generator = None if self.seed is None else np.random.default_rng([int(self.seed), int(epoch)])
        if generator is not None:
            generator.shuffle(order)
        sorted_lengths = np.empty(self.rows, np.int32)
        for start in range(0, self.rows, self.pool_rows):  # each pool sorted by length, stable
            pool = slice(start, start + self.pool_rows)
            pool_lengths = np.asarray(lengths[order[pool]], np.int32)
            by_length = np.argsort(pool_lengths, kind="stable")
            order[pool], sorted_lengths[pool] = order[pool][by_length], pool_lengths[by_length]
        if self.batch_size is not None:
            starts = np.arange(0, self.rows, self.batch_size, dtype=np.int64)
        else:
            starts = self._token_cuts(
                self.widths(sorted_lengths), np.append(np.arange(0, self.rows, self.pool_rows), self.rows)
            )
        ends = np.append(starts[1:], self.rows)
        widths = self.widths(np.maximum.reduceat(sorted_lengths, starts))
        if self.batch_size is not None:
            rows = ends - starts
            if self.edges.size:  # the short last batch: the largest edge, one shape whatever it holds
                widths = np.where(rows < self.batch_size, self.edges[-1], widths)
        else:
            rows = np.maximum(self.batch_tokens // widths, 1) if self.edges.size else ends - starts
        rows = -(-np.maximum(rows, ends - starts) // self.parts) * self.parts
        batch_order = np.arange(len(starts)) if generator is None else generator.permutation(len(starts))
        return order, starts[batch_order], ends[batch_order], widths[batch_order], rows[batch_order]

    def _token_cuts(self, widths, pool_bounds):
        """Batch starts: each pool (rows sorted by width) cut greedily into batches of at most
        `batch_tokens` padded tokens (rows times the width of the batch's last, widest row)."""
        starts = []
        for pool_start, pool_end in zip(pool_bounds[:-1], pool_bounds[1:]):
            start = pool_start
            while start < pool_end:
                end = min(pool_end, start + max(1, self.batch_tokens // int(widths[start])))
                while end - start > 1 and (end - start) * int(widths[end - 1]) > self.batch_tokens:
                    end = start + max(1, self.batch_tokens // int(widths[end - 1]))
                starts.append(start)
                start = end
        return np.asarray(starts, np.int64)

    def batch(self, epoch, index):
        """`(row indices in the data's order, width, padded rows)` of batch `index` of `epoch`."""
        order, starts, ends, widths, rows = self.epoch(epoch)
        return np.sort(order[starts[index] : ends[index]]), int(widths[index]), int(rows[index])


def batches_from(data, plan, position, process_index=0, process_count=1):
    """Batches `{column: (rows, width) int32}` of `data` (a `prepared.Prepared`) from `position`
    = `(epoch, batch)` on, without end: this process's equal part of each batch's rows (the
    rows past the data are zeros), reading from `data` only the rows of that part."""
    epoch, index = position
    while True:
        while index < plan.batch_count(epoch):
            indices, width, rows = plan.batch(epoch, index)
            part = rows // process_count
            mine = indices[process_index * part : (process_index + 1) * part]
            columns = data.gather(epoch % plan.variants, mine)
            yield {name: prepared.padded(flat, lengths, part, width) for name, (flat, lengths) in columns.items()}
            index += 1
        epoch, index = epoch + 1, 0

"""Peak resident memory of preparing ROWS generated records and reading batches across an epoch boundary.

One process, one size: `prepare` (the three streamed passes) writes a prepared folder of ROWS
generated pairs (numbered, so all unique; encoded by their lengths, with no vocabulary), then a
`BatchPlan` of batches of 32 reads the last 50 batches of epoch 0 and the first 50 of epoch 1.
Printed as one JSON line: the peak resident memory (`ru_maxrss`, KiB) after preparation and after
the batches, and the seconds taken. Two sizes side by side give what each extra row costs:

    python benchmarks/prepared_memory.py 300000
    python benchmarks/prepared_memory.py 3000000

(`tests/data/test_preparation.py` runs it in its nightly set and bounds that cost.)
"""

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from keras_seq.data import batch_plan, preparation  # noqa: E402

WORDS = np.array("the a cat dog sat on mat house red blue green small large river tree".split())


def records(rows):
    """ROWS pairs `("N words", "words N")`, 3 to 29 seeded words each."""
    rng = np.random.default_rng(0)
    for start in range(0, rows, 10_000):
        count = min(10_000, rows - start)
        lengths, picks = rng.integers(3, 30, count), rng.integers(0, len(WORDS), (count, 30))
        for row in range(count):
            words = " ".join(WORDS[picks[row, : lengths[row]]])
            yield f"{start + row} {words}", f"{words} {start + row}"


def by_length(chunk, vocabularies, variant):
    """Rows of ones as long as a quarter of each side's characters: sizes like subword ids, no vocabulary."""
    columns = {}
    for index, name in enumerate(("source", "target")):
        lengths = np.array([len(pair[index]) // 4 + 1 for pair in chunk])
        columns[name] = (np.ones(int(lengths.sum()), np.int32), lengths)
    return columns, np.ones(len(chunk), bool)


def peak_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(rows):
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        data = preparation.prepare(
            os.path.join(folder, "prepared"),
            lambda: records(rows),
            "generated",
            lambda sample: ({}, None),
            by_length,
            ("source", "target"),
            lambda vocabularies: 1000,
            vocab_sample=1000,
            seed=0,
        )
        prepared_peak = peak_kib()
        plan = batch_plan.BatchPlan(data.lengths, data.rows, seed=1, max_length=128, batch_size=32)
        position = (0, plan.batch_count(0) - 50)
        for _, _batch in zip(range(100), batch_plan.batches_from(data, plan, position)):
            pass
        print(
            json.dumps(
                {
                    "rows": rows,
                    "preparation_peak_kib": prepared_peak,
                    "training_peak_kib": peak_kib(),
                    "seconds": round(time.monotonic() - started, 1),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main(int(sys.argv[1]))

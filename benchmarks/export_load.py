"""Load test of an exported translator: many sentences through `translate` in batches, as a server would.

Runs in a process with TensorFlow (and tensorflow-text, for subword vocabularies)
but without keras_seq or Keras, on the export a translate run wrote:

    python benchmarks/export_load.py runs/translate/export --sentences 20000 --batch-size 64

The sources are the English side of the shipped corpus (all its splits, cycled to
`--sentences`). Prints sentences/s and output words/s over the whole run, and the
process's resident memory (`VmRSS`) after the first batch and at each tenth of the run,
with its peak (`VmHWM`): memory that keeps rising from one tenth to the next would be a
leak; steady memory is flat after the first batches.
"""

import argparse
import gzip
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

CORPUS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "keras_seq",
    "data",
    "corpora",
    "software_en_fr",
    "pairs.tsv.gz",
)


def memory_mib():
    """`(resident, peak resident)` MiB of this process, from /proc/self/status."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def corpus_sources(count):
    """The first `count` English sentences of the shipped corpus, cycled."""
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        sources = [line.rstrip("\n").split("\t")[2] for line in f if line.strip()]
    return [sources[i % len(sources)] for i in range(count)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", help="a translate run's export/ folder (SavedModel)")
    parser.add_argument("--sentences", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, help="TensorFlow intra- and inter-op threads (default: TensorFlow's)")
    args = parser.parse_args()
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    try:
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops a subword export uses)
    except ImportError:
        pass

    sources = corpus_sources(args.sentences)
    translator = tf.saved_model.load(args.export)
    batches = [sources[i : i + args.batch_size] for i in range(0, len(sources), args.batch_size)]
    tenths = {max(1, round(len(batches) * k / 10)): k for k in range(1, 11)}
    samples, words = [], 0
    started = time.monotonic()
    for number, batch in enumerate(batches, 1):
        outputs = translator.translate(tf.constant(batch)).numpy()
        words += sum(len(o.split()) for o in outputs)
        if number == 1 or number in tenths:
            resident, peak = memory_mib()
            samples.append(
                {
                    "batches": number,
                    "sentences": min(number * args.batch_size, len(sources)),
                    "seconds": round(time.monotonic() - started, 1),
                    "rss_mib": round(resident),
                    "peak_mib": round(peak),
                }
            )
            print(json.dumps(samples[-1]), flush=True)
    seconds = time.monotonic() - started
    resident = [s["rss_mib"] for s in samples]
    summary = {
        "sentences": len(sources),
        "batch_size": args.batch_size,
        "seconds": round(seconds, 1),
        "sentences_per_second": round(len(sources) / seconds, 1),
        "output_words_per_second": round(words / seconds),
        "rss_first_batch_mib": resident[0],
        "rss_last_mib": resident[-1],
        "peak_mib": samples[-1]["peak_mib"],
        "rss_growth_second_to_last_tenth_mib": resident[-1] - resident[2] if len(resident) > 2 else None,
        "keras_or_keras_seq_imported": any(name in sys.modules for name in ("keras", "keras_seq")),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

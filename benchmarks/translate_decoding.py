"""Beam width and length penalty of a trained translate run, scored on a valid file.

The run's `model.keras` is exported once per setting (the export the recipe ships),
and the valid sources go through it; decoding settings change nothing in training,
so one trained model serves the whole table.

    python benchmarks/translate_decoding.py RUN_DIR VALID.tsv --beams 1 4 8 --length-penalties 0.6 1.4

Prints one line per setting and a Markdown table (BLEU, lowercased BLEU, chrF, seconds).
"""

import argparse
import itertools
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_seq import export  # noqa: E402
from keras_seq.data import loaders  # noqa: E402
from keras_seq.data.subword import vocabulary_from_config  # noqa: E402
from recipes.translate import scores, translate_all  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a translate run's --output-dir (model.keras, export_config.json)")
    parser.add_argument("valid", help="UTF-8 TSV source<TAB>target")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--length-penalties", type=float, nargs="+", default=[0.6, 1.0, 1.4, 2.0])
    parser.add_argument("--sentences", type=int, default=300, help="the first N valid pairs")
    args = parser.parse_args()

    with open(os.path.join(args.run_dir, export.RUN_CONFIG), encoding="utf-8") as f:
        config = json.load(f)
    vocab = {name: vocabulary_from_config(c) for name, c in config["vocabularies"].items()}
    model = keras.saving.load_model(os.path.join(args.run_dir, "model.keras"), compile=False)
    pairs = loaders.read_parallel_tsv(args.valid)[: args.sentences]
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    rows = []
    for beams, penalty in itertools.product(args.beams, args.length_penalties):
        if beams == 1 and penalty != args.length_penalties[0]:
            continue  # one beam: the penalty ranks nothing
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "export")
            export.export_translator(
                model,
                vocab["source"],
                vocab["target"],
                path,
                config["source_length"],
                config["max_length"],
                num_beams=beams,
                length_penalty=penalty,
            )
            started = time.monotonic()
            predictions = translate_all(tf.saved_model.load(path), sources)
            seconds = time.monotonic() - started
        row = {
            "beams": beams,
            "length_penalty": penalty if beams > 1 else None,
            **scores(predictions, references),
            "seconds": round(seconds, 1),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("\n| beams | length penalty | BLEU | lowercased | chrF | seconds |\n|---|---|---|---|---|---|")
    for r in rows:
        penalty = "" if r["length_penalty"] is None else f"{r['length_penalty']:g}"
        print(
            f"| {r['beams']} | {penalty} | {r['bleu']:.1f} | {r['bleu_lowercase']:.1f} | {r['chrf']:.1f} "
            f"| {r['seconds']} |"
        )


if __name__ == "__main__":
    main()

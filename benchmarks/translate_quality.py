"""Translation quality against the time budget: keras_seq's recipe beside a keras-hub Transformer.

Each side trains on the same English->French training pairs for the same wall-clock
budget, one run after the other on this machine, and is scored on the same held-out
pairs (BLEU cased and lowercased, chrF, copy rate: the share of sentences whose spans to keep verbatim all come
out unchanged), which no side saw or selected on:

* `transformer`, `rnn-attention`: `python -m recipes.translate --max-seconds S` (the
  recipe as a user runs it: data and budget only), its export then translates the
  evaluation pairs in a process that loads the SavedModel with TensorFlow and
  tensorflow-text;
* `transformer:no-placeholders`, `rnn-attention:no-placeholders`: the same with `--no-placeholders`;
* `keras-hub`: `benchmarks/keras_hub_translate.py` (needs keras-hub).

The data is the shipped `software_en_fr` corpus: train and valid splits for training
and model selection, the test split for the figures. `--exclude ORIGIN` leaves one
package's catalogs out of training and scores on that package alone: a corpus the
defaults were not tuned on.

    python benchmarks/translate_quality.py --budgets 60 180 600 1800 --sides transformer rnn-attention keras-hub
    python benchmarks/translate_quality.py --budgets 600 --exclude indico
    python benchmarks/translate_quality.py --budgets 600 --sides rnn-attention rnn-attention:no-placeholders
    python benchmarks/translate_quality.py --budgets 600 --files train.tsv valid.tsv test.tsv   # another corpus

Prints a Markdown table (one row per side and budget) and writes every run under --output-dir.
"""

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A recipe side's name may end in `:no-placeholders`: the recipe with --no-placeholders (the spans to keep verbatim
# left to the model to copy), its anchor for what placeholders bring.
SIDES = (
    "transformer",
    "rnn-attention",
    "keras-hub",
    "transformer:no-placeholders",
    "rnn-attention:no-placeholders",
)

# Translates the evaluation file with an exported SavedModel in a process without keras_seq.
SERVE = """
import json, sys
import tensorflow as tf
import tensorflow_text
translator = tf.saved_model.load(sys.argv[1])
sources = [line.split("\\t")[0] for line in open(sys.argv[2], encoding="utf-8").read().splitlines()]
out = []
for start in range(0, len(sources), 64):
    out += [s.decode("utf-8") for s in translator.translate(tf.constant(sources[start:start + 64])).numpy()]
print(json.dumps(out))
"""


def write_tsv(path, pairs):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{s}\t{t}\n" for s, t in pairs)


def data_files(directory, exclude, valid_limit=None):
    """train/valid/evaluation TSV files from software_en_fr (evaluation: the test split, or the excluded origin;
    valid: its first `valid_limit` pairs when given)."""
    from keras_seq.data import corpora

    excluded = [exclude] if exclude else []
    files = {
        "train": corpora.software_en_fr("train", exclude=excluded),
        "valid": corpora.software_en_fr("valid", exclude=excluded)[:valid_limit],
        "evaluation": (
            [p for split in corpora.SPLITS for p in corpora.software_en_fr(split, origins=excluded)]
            if exclude
            else corpora.software_en_fr("test")
        ),
    }
    paths = {}
    for name, pairs in files.items():
        paths[name] = os.path.join(directory, f"{name}.tsv")
        write_tsv(paths[name], pairs)
    return paths, {name: len(pairs) for name, pairs in files.items()}


def scores(predictions, pairs):
    from keras_seq.metrics import copy_rate, corpus_bleu, corpus_chrf

    references = [t for _, t in pairs]
    return {
        "bleu": corpus_bleu(predictions, references),
        "bleu_lowercase": corpus_bleu(predictions, references, lowercase=True),
        "chrf": corpus_chrf(predictions, references),
        "copy_rate": copy_rate([s for s, _ in pairs], predictions)[0],
    }


def run_side(side, seconds, paths, directory, backend):
    environment = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    output = os.path.join(directory, f"{side.replace(':', '_')}_{int(seconds)}s")
    started = time.monotonic()
    if side == "keras-hub":
        command = [
            sys.executable,
            os.path.join(REPO, "benchmarks", "keras_hub_translate.py"),
            "--train",
            paths["train"],
            "--valid",
            paths["valid"],
            "--test",
            paths["evaluation"],
            "--max-seconds",
            str(seconds),
            "--output-dir",
            output,
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "recipes.translate",
            "--train",
            paths["train"],
            "--valid",
            paths["valid"],
            "--model",
            side.split(":")[0],
            *(["--no-placeholders"] if side.endswith(":no-placeholders") else []),
            "--max-seconds",
            str(seconds),
            "--output-dir",
            output,
        ]
    result = subprocess.run(command, env=environment, cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{side} at {seconds} s failed:\n{result.stderr[-3000:]}")
    with open(os.path.join(output, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    if side == "keras-hub":
        with open(os.path.join(output, "test_predictions.json"), encoding="utf-8") as f:
            predictions = json.load(f)
    else:
        served = subprocess.run(
            [sys.executable, "-c", SERVE, os.path.join(output, "export"), paths["evaluation"]],
            env=dict(environment, PYTHONPATH=""),
            capture_output=True,
            text=True,
            cwd="/",
        )
        if served.returncode != 0:
            raise RuntimeError(f"serving {side} failed:\n{served.stderr[-3000:]}")
        predictions = json.loads(served.stdout.strip().splitlines()[-1])
    return {
        "side": side,
        "budget_seconds": seconds,
        "train_seconds": metrics.get("train_seconds"),
        "epochs": metrics.get("epochs"),
        "wall_seconds": round(time.monotonic() - started, 1),
        "backend": backend,
    }, predictions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[600.0], help="training budgets in seconds")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--exclude", metavar="ORIGIN", help="train without this package's catalogs and score on them")
    parser.add_argument(
        "--files",
        nargs=3,
        metavar=("TRAIN", "VALID", "TEST"),
        help="another corpus instead of software_en_fr: train, valid and test TSV files (`source<TAB>target`)",
    )
    parser.add_argument("--backend", default="tensorflow")
    parser.add_argument("--output-dir", default="runs/translate_quality")
    args = parser.parse_args(argv)
    args.output_dir = os.path.abspath(args.output_dir)  # the runs start in the repository's root
    os.makedirs(args.output_dir, exist_ok=True)
    if args.files:
        paths = dict(zip(("train", "valid", "evaluation"), map(os.path.abspath, args.files)))
        sizes = {name: sum(1 for _ in open(path, encoding="utf-8")) for name, path in paths.items()}
    else:
        paths, sizes = data_files(args.output_dir, args.exclude)
    with open(paths["evaluation"], encoding="utf-8") as f:
        evaluation = [tuple(line.split("\t")) for line in f.read().splitlines()]
    print(f"data: {sizes}; evaluation on {'origin ' + args.exclude if args.exclude else 'the test split'}", flush=True)
    rows = []
    for seconds in args.budgets:
        for side in args.sides:
            row, predictions = run_side(side, seconds, paths, args.output_dir, args.backend)
            row.update(scores(predictions, evaluation))
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| side | budget (s) | epochs | BLEU | BLEU lowercased | chrF | copy rate |\n|---|---|---|---|---|---|---|")
    for r in rows:
        copy = "-" if r["copy_rate"] is None else f"{r['copy_rate']:.2f}"
        print(
            f"| {r['side']} | {r['budget_seconds']:g} | {r['epochs']} | {r['bleu']:.1f} "
            f"| {r['bleu_lowercase']:.1f} | {r['chrf']:.1f} | {copy} |"
        )


if __name__ == "__main__":
    main()

"""The lm, classify and tag recipes beside the plain Keras models of `plain_keras.py`, on real data.

For each task and backend, the recipe as a user runs it (`--train`, `--valid` and
`--max-seconds` only) and then the plain Keras baseline train on the same files for
the same wall-clock budget, one after the other, and report the same validation
figure. The data are the shipped corpora, written to files first:

* lm: `loc_workshop_en` (English prose, 0.38 MB of training text), valid perplexity
  per character (lower is better);
* classify: `sotu_party_passages` (State of the Union passages -> the president's
  party), valid accuracy;
* tag: `sotu_punctuation` (words -> the punctuation after them), valid token accuracy.

    python benchmarks/recipes_vs_plain_keras.py --tasks lm classify tag --max-seconds 180
    python benchmarks/recipes_vs_plain_keras.py --tasks lm --backends tensorflow jax torch

Prints a Markdown table and writes every run under --output-dir.
"""

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# task -> (the figure's name in the recipe's metrics.json, in the baseline's JSON line, lower is better)
FIGURES = {
    "lm": ("perplexity", "perplexity", True),
    "classify": ("accuracy", "accuracy", False),
    "tag": ("accuracy", "token_accuracy", False),
}


def write_data(task, directory):
    """`(train path, valid path)` of the task's real data, written from the shipped corpora."""
    from keras_seq.data import corpora

    os.makedirs(directory, exist_ok=True)
    paths = {}
    for split in ("train", "valid"):
        path = paths[split] = os.path.join(directory, f"{task}_{split}.{'txt' if task == 'lm' else 'tsv'}")
        with open(path, "w", encoding="utf-8") as f:
            if task == "lm":
                f.write(corpora.loc_workshop_en(split))
            elif task == "classify":
                f.writelines(f"{label}\t{text}\n" for label, text in corpora.sotu_party_passages(split))
            else:
                for sequence in corpora.sotu_punctuation(split):
                    f.writelines(f"{word}\t{tag}\n" for word, tag in sequence)
                    f.write("\n")
    return paths["train"], paths["valid"]


def run(command, backend, log):
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    with open(log, "w", encoding="utf-8") as f:
        subprocess.run(command, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, check=True)
    with open(log, encoding="utf-8") as f:
        return f.read()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", choices=sorted(FIGURES), default=sorted(FIGURES))
    p.add_argument("--backends", nargs="+", default=["tensorflow"])
    p.add_argument("--max-seconds", type=float, default=180)
    p.add_argument("--output-dir", default="runs/recipes_vs_plain_keras")
    args = p.parse_args(argv)
    out = os.path.abspath(args.output_dir)
    rows = ["| task | backend | recipe | plain Keras | recipe epochs | better |", "|---|---|---|---|---|---|"]
    for task in args.tasks:
        train, valid = write_data(task, os.path.join(out, "data"))
        recipe_name, baseline_name, lower = FIGURES[task]
        for backend in args.backends:
            run_dir = os.path.join(out, f"{task}_{backend}")
            os.makedirs(run_dir, exist_ok=True)
            run(
                [
                    sys.executable,
                    "-m",
                    f"recipes.{task}",
                    "--train",
                    train,
                    "--valid",
                    valid,
                    "--max-seconds",
                    str(args.max_seconds),
                    "--output-dir",
                    run_dir,
                ],
                backend,
                os.path.join(run_dir, "recipe.log"),
            )
            with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
                recipe = json.load(f)
            log = run(
                [
                    sys.executable,
                    "benchmarks/plain_keras.py",
                    task,
                    "--train",
                    train,
                    "--valid",
                    valid,
                    "--max-seconds",
                    str(args.max_seconds),
                ],
                backend,
                os.path.join(run_dir, "plain_keras.log"),
            )
            baseline = json.loads(log.strip().splitlines()[-1])
            ours, theirs = recipe[recipe_name], baseline[baseline_name]
            better = "recipe" if (ours < theirs if lower else ours > theirs) else "plain Keras"
            rows.append(
                f"| {task} ({recipe_name}) | {backend} | {ours:.4g} | {theirs:.4g} | {recipe['epochs']} | {better} |"
            )
            print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()

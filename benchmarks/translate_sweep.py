"""A sweep of the translate recipe's settings on real data, to choose its defaults.

Every variant is `python -m recipes.translate` with the same data and time budget and
some flags changed. The data is the shipped `software_en_fr` corpus without one
package (`--exclude`, default trac), so that package stays unseen by the choice and
can measure the chosen defaults afterwards (`translate_quality.py --exclude`). The
figures are on the valid split (at most `--valid-sentences`): the greedy validation
BLEU the recipe selects on, and BLEU/chrF/copy rate of its beam-search export.

`--parallel P` runs P variants at a time, each pinned to its own share of the CPU
cores (`taskset`): the variants of one round compete for nothing, and a round of P
takes the time of one, at 1/P of the compute each. Compare variants within a sweep.

    python benchmarks/translate_sweep.py --max-seconds 600 --parallel 2 \\
        --variant "default=" --variant "vocabulary 4000=--vocab-size 4000"

Prints one JSON line per variant as it ends, then a Markdown table.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import translate_quality  # noqa: E402


def variant(text):
    """`NAME=FLAGS` -> (name, [flags])."""
    name, separator, flags = text.partition("=")
    if not separator or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=FLAGS, got {text!r}")
    return name, flags.split()


def run_round(chosen, paths, args, cores):
    """Start each (name, flags) of `chosen` on its own cores; wait for all; return their metrics."""
    share = max(1, len(cores) // len(chosen))
    running = []
    for index, (name, flags) in enumerate(chosen):
        output = os.path.join(args.output_dir, name.replace(" ", "_"))
        own = cores[index * share : (index + 1) * share]
        command = ["taskset", "-c", ",".join(map(str, own))] if len(chosen) > 1 else []
        command += [
            sys.executable,
            "-m",
            "recipes.translate",
            "--train",
            paths["train"],
            "--valid",
            paths["valid"],
            "--max-seconds",
            str(args.max_seconds),
            "--output-dir",
            output,
            *flags,
        ]
        environment = dict(
            os.environ,
            KERAS_BACKEND=args.backend,
            TF_CPP_MIN_LOG_LEVEL="3",
            PYTHONPATH=translate_quality.REPO,
            OMP_NUM_THREADS=str(len(own)),
        )
        log = open(os.path.join(args.output_dir, f"{name.replace(' ', '_')}.log"), "w")
        running.append(
            (
                name,
                flags,
                output,
                log,
                subprocess.Popen(
                    command, env=environment, cwd=translate_quality.REPO, stdout=log, stderr=subprocess.STDOUT
                ),
            )
        )
    rows = []
    for name, flags, output, log, process in running:
        process.wait()
        log.close()
        if process.returncode != 0:
            print(f"{name}: exit {process.returncode}, see {log.name}", flush=True)
            continue
        with open(os.path.join(output, "metrics.json"), encoding="utf-8") as f:
            metrics = json.load(f)
        row = {"variant": name, "flags": " ".join(flags), "cores": share}
        row.update(
            {
                key: metrics.get(key)
                for key in (
                    "best_validation_bleu",
                    "bleu",
                    "bleu_lowercase",
                    "chrf",
                    "copy_rate",
                    "epochs",
                    "train_seconds",
                )
            }
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--variant",
        type=variant,
        action="append",
        required=True,
        metavar="NAME=FLAGS",
        help="a name and the recipe flags that differ from its defaults (repeatable)",
    )
    parser.add_argument("--max-seconds", type=float, default=600.0, help="training budget of every variant")
    parser.add_argument("--parallel", type=int, default=1, help="variants run at a time, each on its own cores")
    parser.add_argument("--exclude", default="trac", help="package left out of the sweep's data")
    parser.add_argument("--valid-sentences", type=int, default=300, help="valid pairs used (the first N)")
    parser.add_argument("--backend", default="tensorflow")
    parser.add_argument("--output-dir", default="runs/translate_sweep")
    args = parser.parse_args(argv)
    args.output_dir = os.path.abspath(args.output_dir)  # the runs start in the repository's root
    os.makedirs(args.output_dir, exist_ok=True)
    paths, sizes = translate_quality.data_files(args.output_dir, args.exclude, valid_limit=args.valid_sentences)
    print(f"data: {sizes}; {args.exclude} left out", flush=True)
    cores = sorted(os.sched_getaffinity(0))
    rows = []
    for start in range(0, len(args.variant), args.parallel):
        rows += run_round(args.variant[start : start + args.parallel], paths, args, cores)
    print(
        "\n| variant | flags | greedy valid BLEU (selection) | beam BLEU | BLEU lowercased | chrF | copy rate "
        "| epochs |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        copy = "-" if r["copy_rate"] is None else f"{r['copy_rate']:.2f}"
        print(
            f"| {r['variant']} | `{r['flags']}` | {r['best_validation_bleu']:.1f} | {r['bleu']:.1f} | "
            f"{r['bleu_lowercase']:.1f} | {r['chrf']:.1f} | {copy} | {r['epochs']} |"
        )


if __name__ == "__main__":
    main()

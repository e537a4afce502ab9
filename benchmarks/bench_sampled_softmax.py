"""Training-step speed of an LM head: full softmax against `ks.layers.SampledSoftmax`.

What is measured, on the current `KERAS_BACKEND`: the wall time of one training step
(forward, loss, backward, SGD update) of the output layer of a language model alone,
hidden states `(B, T, D)` -> V words, in float32:

* full softmax: `keras.layers.Dense(V)` with `SparseCategoricalCrossentropy(from_logits=True)`,
  what a user would write without sampling;
* sampled softmax: `ks.layers.SampledSoftmax(V, m)` (log-uniform proposal) for each `m` in
  `--samples`, whose loss the layer adds itself.

Both are compiled with `SGD(1e-3)` at the default `jit_compile` (XLA on TensorFlow,
`jax.jit` on JAX, eager on torch) and timed with `model.train_on_batch`, whose loss is
turned into a Python float every step so asynchronous backends finish. After
`--warmup` steps (compilation), `--steps` steps are timed with `time.perf_counter`; a
row gives the median and minimum ms/step, B*T / median tokens/s, and the full
softmax's median over the row's median (the speed-up).

Run from the repository root with the test virtualenv, once per backend:

    KERAS_BACKEND=jax python benchmarks/bench_sampled_softmax.py
    KERAS_BACKEND=torch python benchmarks/bench_sampled_softmax.py --write benchmarks/RESULTS.md
    python benchmarks/bench_sampled_softmax.py --quick     # smoke test: V=1000, B=2, 2 timed steps
"""

import argparse
import datetime
import importlib.metadata
import os
import statistics
import sys
import time
from pathlib import Path

from bench_layers import _git_commit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def time_steps(train_step, warmup, steps):
    """Per-step seconds of `steps` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        train_step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        train_step()
        times.append(time.perf_counter() - start)
    return times


def make_steps(args):
    """`(name, train_step)` for the full-softmax head and each sampled head."""
    import keras
    import numpy as np

    import keras_seq as ks

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((args.batch_size, args.length, args.hidden), dtype=np.float32)
    targets = rng.integers(0, args.vocabulary, (args.batch_size, args.length)).astype("int32")
    hidden_in = keras.Input((args.length, args.hidden))
    targets_in = keras.Input((args.length,), dtype="int32")

    full = keras.Model(hidden_in, keras.layers.Dense(args.vocabulary)(hidden_in))
    full.compile(keras.optimizers.SGD(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = [("full softmax (Dense + cross-entropy)", lambda: float(full.train_on_batch(hidden, targets)))]
    for num_sampled in args.samples:
        head = ks.layers.SampledSoftmax(args.vocabulary, num_sampled, seed=0)
        sampled = keras.Model([hidden_in, targets_in], head(hidden_in, targets_in))
        sampled.compile(keras.optimizers.SGD(1e-3))
        steps.append((f"SampledSoftmax, {num_sampled} samples",
                      lambda model=sampled: float(model.train_on_batch([hidden, targets]))))
    return steps


def header(args, backend):
    versions = ", ".join(f"{package} {importlib.metadata.version(package)}"
                         for package in ("keras", backend))  # backend names are package names
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
               "unknown CPU")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"## LM head training step, sampled vs full softmax, {backend}, {date}",
        "",
        f"- Commit: {_git_commit()}",
        f"- Versions: {versions}",
        f"- CPU: {cpu}, {os.cpu_count()} cores",
        f"- Configuration: B={args.batch_size}, T={args.length}, D={args.hidden}, V={args.vocabulary:,}; "
        f"float32; SGD; {args.warmup} warm-up + {args.steps} timed steps"
        + (" (`--quick` smoke test, not a measurement)" if args.quick else ""),
        "",
        "| LM head | backend | median ms/step | min ms/step | tokens/s | speed-up vs full |",
        "|---|---|--:|--:|--:|--:|",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[512, 1024], help="num_sampled values")
    parser.add_argument("--vocabulary", type=int, default=50_000, help="V (default 50000)")
    parser.add_argument("--hidden", type=int, default=256, help="D (default 256)")
    parser.add_argument("--batch-size", type=int, default=32, help="B (default 32)")
    parser.add_argument("--length", type=int, default=64, help="sequence length T (default 64)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps (default 3)")
    parser.add_argument("--quick", action="store_true", help="smoke test: V=1000, B=2, 2 timed steps")
    parser.add_argument("--write", metavar="PATH", help="also append the Markdown section to PATH")
    args = parser.parse_args()
    if args.quick:
        args.vocabulary, args.batch_size, args.steps, args.samples = 1000, 2, 2, [64]
    if min(args.steps, args.batch_size, args.length, args.hidden, *args.samples) < 1 or args.warmup < 0:
        parser.error("sizes, --samples and --steps must be positive and --warmup not negative")

    import keras

    backend = keras.backend.backend()
    lines = header(args, backend)
    full_median = None
    for name, train_step in make_steps(args):
        times = time_steps(train_step, args.warmup, args.steps)
        median = statistics.median(times)
        full_median = full_median or median  # the full softmax is measured first
        lines.append(f"| {name} | {backend} | {median * 1e3:.2f} | {min(times) * 1e3:.2f} "
                     f"| {args.batch_size * args.length / median:,.0f} | {full_median / median:.2f}x |")
        print(lines[-1], file=sys.stderr, flush=True)  # progress; the table follows on stdout
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        path = Path(args.write)
        existing = path.read_text() if path.exists() else "# Benchmarks\n"
        path.write_text(f"{existing.rstrip()}\n\n{section}")


if __name__ == "__main__":
    main()

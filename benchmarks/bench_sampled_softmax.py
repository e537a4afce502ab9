"""Training-step speed of an LM head: full softmax against `ks.layers.SampledSoftmax` (issue #4).

What is measured, on the current `KERAS_BACKEND` and the device it picks: the wall
time of one training step (forward, loss, backward, SGD update) of the output layer
of a language model alone, hidden states `(B, T, D)` -> V words, in float32:

* full softmax: `keras.layers.Dense(V)` with `SparseCategoricalCrossentropy(from_logits=True)`,
  what a user would write without sampling;
* sampled softmax: `ks.layers.SampledSoftmax(V, m)` (log-uniform proposal) for each `m` in
  `--samples`, whose loss the layer adds itself.

All are compiled with `SGD(1e-3)` at the default `jit_compile` (XLA on TensorFlow,
`jax.jit` on JAX, eager on torch) and timed with `model.train_on_batch`, whose loss
is turned into a Python float every step so asynchronous backends finish. After
`--warmup` steps (compilation), `--steps` steps of each head are timed round-robin
(`_timing.time_interleaved`), so a change of load on a shared CPU hits all alike; a
row gives the median and minimum ms/step, B*T / median tokens/s, and the full
softmax's median over the row's (the speed-up). The sampled step still updates the
whole `(D, V)` kernel (Keras variables are dense), a cost that does not shrink with m.

Run from the repository root, once per backend:

    KERAS_BACKEND=jax python benchmarks/bench_sampled_softmax.py
    KERAS_BACKEND=torch python benchmarks/bench_sampled_softmax.py --write benchmarks/RESULTS.md
    python benchmarks/bench_sampled_softmax.py --quick     # smoke test: V=1000, B=2, 2 timed steps

`--write` appends the section to the file and keeps every other section.
"""

import argparse

import _timing

TITLE = "## LM head training step, sampled vs full softmax (issue #4)"
FULL = "full softmax (Dense + cross-entropy)"


def make_cases(args):
    """`{name: make_step}` for the full-softmax head and each sampled head."""
    import keras
    import numpy as np

    import keras_seq as ks

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((args.batch_size, args.length, args.hidden), dtype=np.float32)
    targets = rng.integers(0, args.vocabulary, (args.batch_size, args.length)).astype("int32")

    def full():
        hidden_in = keras.Input((args.length, args.hidden))
        model = keras.Model(hidden_in, keras.layers.Dense(args.vocabulary)(hidden_in))
        model.compile(keras.optimizers.SGD(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return lambda: float(model.train_on_batch(hidden, targets))

    def sampled(num_sampled):
        hidden_in, targets_in = keras.Input((args.length, args.hidden)), keras.Input((args.length,), dtype="int32")
        head = ks.layers.SampledSoftmax(args.vocabulary, num_sampled, seed=0)
        model = keras.Model([hidden_in, targets_in], head(hidden_in, targets_in))
        model.compile(keras.optimizers.SGD(1e-3))
        return lambda: float(model.train_on_batch([hidden, targets]))

    cases = {FULL: full}
    for num_sampled in args.samples:
        cases[f"SampledSoftmax, {num_sampled} samples"] = lambda m=num_sampled: sampled(m)
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[512, 1024], help="num_sampled values")
    parser.add_argument("--vocabulary", type=int, default=50_000, help="V (default 50000)")
    parser.add_argument("--hidden", type=int, default=256, help="D (default 256)")
    parser.add_argument("--batch-size", type=int, default=32, help="B (default 32)")
    parser.add_argument("--length", type=int, default=64, help="sequence length T (default 64)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per head (default 10)")
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
    times = _timing.time_interleaved(make_cases(args), rounds=args.steps, warmup=args.warmup)
    full_median = _timing.summary(times[FULL])[0]
    rows = []
    for name, seconds in times.items():
        median, low = _timing.summary(seconds)
        rows.append(
            [
                name,
                backend,
                f"{median * 1e3:.2f}",
                f"{low * 1e3:.2f}",
                f"{args.batch_size * args.length / median:,.0f}",
                f"{full_median / median:.2f}x",
            ]
        )
    device = _timing.device()
    lines = [
        f"{TITLE}, {backend}, {_timing.device_label(device)}, {_timing.utc_now()}",
        "",
        f"- Commit: {_timing.git_commit()}",
        f"- Versions: {_timing.versions(('keras', backend))}",  # backend names are package names
        f"- Device: {device['name']}",
        f"- Configuration: B={args.batch_size}, T={args.length}, D={args.hidden}, V={args.vocabulary:,}; "
        f"float32; SGD; {args.warmup} warm-up + {args.steps} timed steps per head, interleaved"
        + (" (`--quick` smoke test, not a measurement)" if args.quick else ""),
        "",
        *_timing.markdown_table(
            ["LM head", "backend", "median ms/step", "min ms/step", "tokens/s", "speed-up vs full"],
            rows,
            right_aligned=(2, 3, 4, 5),
        ),
    ]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        _timing.write_section(args.write, TITLE, section, replace=False)


if __name__ == "__main__":
    main()

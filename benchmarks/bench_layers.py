"""Training-step speed of keras_seq's attention layers next to Keras, keras-hub and PyTorch.

What is measured: the wall time of one training step (forward, MSE loss, backward,
SGD update) in float32 on the CPU, for the same configuration in the same run:

* self-attention, B=32, T=128, D=256, 4 heads of 64: `ks.layers.MultiHeadAttention`
  vs `keras.layers.MultiHeadAttention` (each in `Input -> attention(x, x) -> output`)
  vs `torch.nn.MultiheadAttention(256, 4, batch_first=True)` (called with
  `need_weights=False`, as the Keras layers return no scores);
* 4 pre-norm encoder blocks (D=256, 4 heads, feed-forward 1024, relu, dropout 0,
  epsilon 1e-5): `ks.layers.TransformerEncoderBlock` vs
  `keras_hub.layers.TransformerEncoder(normalize_first=True)` vs
  `torch.nn.TransformerEncoder` of `TransformerEncoderLayer(norm_first=True)`;
* cross-entropy over an 8000-word output layer (`Dense(8000)` on `(B, T, 256)`
  features, random target ids): `ks.losses.LabelSmoothingCrossEntropy(0)` vs
  `keras.losses.SparseCategoricalCrossentropy(from_logits=True)` (the same loss)
  vs `nn.Linear` + `F.cross_entropy` over `(B*T, V)`. The head's matrix products
  are the same in every row; what differs is how the loss and its gradient pass
  over the `(B, T, V)` logits.

Keras models are compiled with `SGD(1e-3)` and `loss="mse"` (the head: its loss) at the default
`jit_compile` (XLA on TensorFlow, `jax.jit` on JAX, eager on torch) and timed with
`model.train_on_batch`, whose loss is turned into a Python float every step so
asynchronous backends finish. After `--warmup` steps (compilation), `--steps` steps
of each implementation are timed with `time.perf_counter`, interleaved within each
benchmark (one step of each in turn, `_timing.time_interleaved`) so a change of load
on the shared CPU hits all alike; a row gives the median and the minimum ms/step and
B*T / median tokens/s. Native PyTorch (default thread count) runs in the torch
backend's process only.

Run from the repository root with the test virtualenv:

    python benchmarks/bench_layers.py                  # all three backends, Markdown table
    python benchmarks/bench_layers.py --write benchmarks/RESULTS.md   # ... and append it there
    python benchmarks/bench_layers.py --quick          # smoke test: B=4, T=32, 2 timed steps
    KERAS_BACKEND=jax python benchmarks/bench_layers.py --backend-run   # one backend, JSON lines

The driver starts one subprocess per backend (`KERAS_BACKEND`); rows of a layer that
fails, or of keras-hub when it is not installed, become notes under the table.
"""

import argparse
import os
from pathlib import Path

import _timing
from _timing import BACKENDS

HIDDEN, HEADS, KEY_DIM, FEED_FORWARD, BLOCKS, VOCABULARY = 256, 4, 64, 1024, 4, 8000
ATTENTION = "self-attention"
ENCODER = f"{BLOCKS} pre-norm encoder blocks"
CROSS_ENTROPY = f"{VOCABULARY}-word head + cross-entropy"
_emit = _timing.emit


def _keras_cases(batch, length):
    """`(benchmark, implementation, make_step)` for the Keras models of this backend."""
    import keras
    import numpy as np

    import keras_seq as ks

    try:
        import keras_hub
    except ImportError as error:
        keras_hub = None
        _emit(note=f"keras_hub is not importable ({error}); its rows are skipped")

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((batch, length, HIDDEN), dtype=np.float32) for _ in range(2))
    ids = rng.integers(0, VOCABULARY, (batch, length)).astype("int32")

    def model(layers, self_attention=False):
        inputs = keras.Input((length, HIDDEN))
        outputs = inputs
        for layer in layers:
            outputs = layer(outputs, outputs) if self_attention else layer(outputs)
        return keras.Model(inputs, outputs)

    def step(build, loss="mse", targets=y):
        def make_step():
            trained = build()
            trained.compile(optimizer=keras.optimizers.SGD(1e-3), loss=loss)
            return lambda: float(trained.train_on_batch(x, targets))

        return make_step

    def head():
        return model([keras.layers.Dense(VOCABULARY)])

    encoder = dict(dropout=0.0, activation="relu", layer_norm_epsilon=1e-5)
    cases = [
        (
            ATTENTION,
            "keras_seq MultiHeadAttention",
            step(lambda: model([ks.layers.MultiHeadAttention(HEADS, KEY_DIM)], self_attention=True)),
        ),
        (
            ATTENTION,
            "keras MultiHeadAttention",
            step(lambda: model([keras.layers.MultiHeadAttention(HEADS, KEY_DIM)], self_attention=True)),
        ),
        (
            ENCODER,
            "keras_seq TransformerEncoderBlock",
            step(
                lambda: model(
                    [
                        ks.layers.TransformerEncoderBlock(HEADS, FEED_FORWARD, norm_first=True, **encoder)
                        for _ in range(BLOCKS)
                    ]
                )
            ),
        ),
        (
            CROSS_ENTROPY,
            "keras_seq LabelSmoothingCrossEntropy(0)",
            step(head, ks.losses.LabelSmoothingCrossEntropy(0.0), ids),
        ),
        (
            CROSS_ENTROPY,
            "keras SparseCategoricalCrossentropy",
            step(head, keras.losses.SparseCategoricalCrossentropy(from_logits=True), ids),
        ),
    ]
    if keras_hub is not None:
        cases.append(
            (
                ENCODER,
                "keras-hub TransformerEncoder",
                step(
                    lambda: model(
                        [
                            keras_hub.layers.TransformerEncoder(FEED_FORWARD, HEADS, normalize_first=True, **encoder)
                            for _ in range(BLOCKS)
                        ]
                    )
                ),
            )
        )
    return cases


def _torch_cases(batch, length):
    """`(benchmark, implementation, make_step)` for the native PyTorch modules."""
    import torch

    torch.manual_seed(0)
    x, y = torch.randn(batch, length, HIDDEN), torch.randn(batch, length, HIDDEN)
    ids = torch.randint(0, VOCABULARY, (batch * length,))

    def step(module, forward, loss_fn=lambda output: torch.nn.functional.mse_loss(output, y)):
        def make_step():
            optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)

            def train_step():
                optimizer.zero_grad()
                loss = loss_fn(forward())
                loss.backward()
                optimizer.step()
                return loss.item()

            return train_step

        return make_step

    attention = torch.nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
    layer = torch.nn.TransformerEncoderLayer(
        HIDDEN, HEADS, FEED_FORWARD, dropout=0.0, batch_first=True, norm_first=True
    )
    encoder = torch.nn.TransformerEncoder(layer, BLOCKS, enable_nested_tensor=False)
    linear = torch.nn.Linear(HIDDEN, VOCABULARY)
    return [
        (
            ATTENTION,
            "native PyTorch nn.MultiheadAttention",
            step(attention, lambda: attention(x, x, x, need_weights=False)[0]),
        ),
        (ENCODER, "native PyTorch nn.TransformerEncoder", step(encoder, lambda: encoder(x))),
        (
            CROSS_ENTROPY,
            "native PyTorch nn.Linear + F.cross_entropy",
            step(
                linear,
                lambda: linear(x).reshape(-1, VOCABULARY),
                lambda logits: torch.nn.functional.cross_entropy(logits, ids),
            ),
        ),
    ]


def backend_run(args):
    """Measure this backend's rows (and native PyTorch on torch), one JSON line each."""
    import keras

    keras.utils.set_random_seed(0)
    backend = keras.backend.backend()
    cases = _keras_cases(args.batch_size, args.length)
    if backend == "torch":
        cases += _torch_cases(args.batch_size, args.length)

    def failed(implementation, error):  # one failing layer must not hide the other rows
        _emit(note=f"{implementation} failed on {backend}: {_timing.first_line(error)}")

    # Interleaved within each benchmark: one timed step of each implementation per round (see
    # _timing.time_interleaved). Rounds across all benchmarks put the small attention layer just
    # after the 8000-word head, where it read 0.7x Keras' layer on JAX against 1.05x on its own.
    for benchmark in dict.fromkeys(benchmark for benchmark, _, _ in cases):
        times = _timing.time_interleaved(
            {implementation: make_step for name, implementation, make_step in cases if name == benchmark},
            rounds=args.steps,
            warmup=args.warmup,
            on_error=failed,
        )
        for implementation, seconds in times.items():
            median, low = _timing.summary(seconds)
            _emit(
                benchmark=benchmark,
                implementation=implementation,
                backend=backend,
                median_ms=median * 1e3,
                min_ms=low * 1e3,
                tokens_per_s=args.batch_size * args.length / median,
            )


def _header(args):
    return [
        f"## Layer training step, {_timing.utc_now()}",
        "",
        f"- Commit: {_timing.git_commit()}",
        f"- Versions: {_timing.versions()}",
        f"- CPU: {_timing.cpu_name()}, {os.cpu_count()} cores",
        f"- Configuration: B={args.batch_size}, T={args.length}, D={HIDDEN}, {HEADS} heads of {KEY_DIM}, "
        f"feed-forward {FEED_FORWARD}; float32; {args.warmup} warm-up + {args.steps} timed steps, interleaved"
        + (" (`--quick` smoke test, not a measurement)" if args.quick else ""),
        "",
    ]


def _table(rows):
    order = {name: index for index, name in enumerate((ATTENTION, ENCODER, CROSS_ENTROPY))}
    rows = sorted(rows, key=lambda row: (order[row["benchmark"]], BACKENDS.index(row["backend"])))
    baseline = {
        (row["benchmark"], row["backend"]): row["median_ms"]
        for row in rows
        if row["implementation"].startswith("keras_seq")
    }
    lines = [
        "| benchmark | implementation | backend | median ms/step | min ms/step | tokens/s | vs keras_seq |",
        "|---|---|---|--:|--:|--:|--:|",
    ]
    for row in rows:
        base = baseline.get((row["benchmark"], row["backend"]))
        ratio = f"{row['median_ms'] / base:.2f}x" if base else "n/a"
        lines.append(
            f"| {row['benchmark']} | {row['implementation']} | {row['backend']} | {row['median_ms']:.2f} "
            f"| {row['min_ms']:.2f} | {row['tokens_per_s']:,.0f} | {ratio} |"
        )
    lines += [
        "",
        "`vs keras_seq`: median time over keras_seq's median on the same benchmark and backend "
        "(above 1 is slower); native PyTorch is compared with keras_seq on the torch backend.",
    ]
    return lines


def drive(args):
    """Run every backend in its own process and print (and optionally append) the Markdown section."""
    forwarded = [
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--batch-size",
        str(args.batch_size),
        "--length",
        str(args.length),
    ]
    rows, notes = _timing.run_backends(Path(__file__).resolve(), forwarded)
    lines = _header(args) + _table(rows)
    if notes:
        lines += ["", "Notes:", *(f"- {note}" for note in notes)]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:  # appended: earlier layer sections stay, with the readings written under them
        _timing.write_section(args.write, "## Layer training step", section, replace=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend-run", action="store_true", help="measure the current KERAS_BACKEND only and print JSON lines"
    )
    parser.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps (default 3)")
    parser.add_argument("--batch-size", type=int, default=32, help="B (default 32)")
    parser.add_argument("--length", type=int, default=128, help="sequence length T (default 128)")
    parser.add_argument("--quick", action="store_true", help="smoke test: B=4, T=32, 2 timed steps")
    parser.add_argument("--write", metavar="PATH", help="also append the Markdown section to PATH")
    args = parser.parse_args()
    if args.quick:
        args.batch_size, args.length, args.steps = 4, 32, 2
    if min(args.steps, args.batch_size, args.length) < 1 or args.warmup < 0:
        parser.error("--steps, --batch-size and --length must be positive and --warmup not negative")
    if args.backend_run:
        backend_run(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()

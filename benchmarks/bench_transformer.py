"""Speed of `ks.models.transformer_lm` next to keras-hub and native PyTorch (issue #4).

Configuration of issue #4: vocabulary 8000, 4 pre-norm blocks, width 256, 4 heads,
feed-forward 1024 (relu), length 128. What is measured, per backend, in one process
with the implementations timed round-robin (see `_timing.py`):

* Training, batch 32, Adam(1e-3), sparse cross-entropy from logits, `train_on_batch`
  compiled with `jit_compile=True` as in the anchors (XLA on TensorFlow, `jax.jit`,
  `torch.compile` of Keras' step on torch; `--jit-compile auto` for Keras' default,
  which is no XLA on a CPU-only TensorFlow and eager torch); tokens/s
  = B*T / median step time. Every model is compiled with Keras'
  `SparseCategoricalCrossentropy(from_logits=True)`, which keras_seq's models compute
  as `ks.losses.SparseCategoricalCrossentropy` (the same loss without Keras' one-hot
  on JAX or class-axis move on torch); one more row trains `transformer_lm` with
  Keras' own op (`keras.losses.sparse_categorical_crossentropy` passed as a function,
  which `compile` keeps) to show what that gains. Against: keras-hub's pre-norm decoder-only LM
  (`TokenAndPositionEmbedding`, `TransformerDecoder(normalize_first=True)`, final
  LayerNorm, Dense; the model of `anchors/keras_hub_lm_train.py`) and, in the torch
  backend's process, the native PyTorch LM of `anchors/torch_lm_train.py`
  (`nn.TransformerEncoder`, norm_first, causal). Token ids are drawn from
  `[1, V)`, so no position is padding on any side.
* One `fit` (the anchors' measurement, `anchors/keras_hub_lm_train.py`): the wall time
  of a whole `model.fit(x, y, batch_size=32, epochs=1)` over `--fit-batches` NumPy
  batches (12), after a warm-up `fit` of 2, rounds interleaved; native PyTorch runs
  the same number of steps in a loop. This counts what a user waits for, the input
  pipeline and `fit`'s teardown included: on TensorFlow, Keras' `tf.data` feed of
  arrays waits for tf.data's autotuning thread when its iterator is deleted while the
  CPU is busy (keras_seq's models feed arrays with autotuning off,
  `keras_seq/models/keras_workarounds.py`).
* Generation, cached greedy, batch 8, prompt 16, 112 new tokens (`max_length=128`):
  new tokens/s of `model.generate` against keras-hub's `GPT2CausalLM.generate` (the
  same sizes, `anchors/keras_hub_generate.py`), and beam search with 4 beams against
  greedy: time ratio for the same number of new tokens (keras-hub's ratio beside it,
  `anchors/keras_hub_beam_vs_greedy.py`). Hugging Face's GPT-2 (torch process) when
  `transformers` is installed.
* Model FLOPs utilisation: model FLOPs per token over the measured peak of a large
  float32 matmul done with `keras.ops` on the same backend and device (bfloat16 too
  with `--mixed-precision`). Training: `6 N + 12 L D T` (N: the parameters of
  matrix products, L layers, width D, length T: the PaLM appendix B count, causal
  attention counted in full); generation: `2 N + 4 L D c` per new token, c the mean
  context length; embedding lookups count nothing.

Run from the repository root:

    python benchmarks/bench_transformer.py                  # tensorflow, jax, torch; Markdown tables
    python benchmarks/bench_transformer.py --write benchmarks/RESULTS.md   # ... and put them there
    python benchmarks/bench_transformer.py --quick          # smoke test, not a measurement
    python benchmarks/bench_transformer.py --backends jax,torch --mixed-precision   # e.g. on a GPU
    KERAS_BACKEND=jax python benchmarks/bench_transformer.py --backend-run   # one backend, JSON lines

The device is whatever the backend picks (a GPU when one is visible). On a GPU,
flash attention is switched on through `keras.config.enable_flash_attention()` (it
is used where the backend's kernel accepts the inputs: typically float16/bfloat16,
no explicit mask); `--mixed-precision` sets Keras' `mixed_bfloat16` policy and runs
native PyTorch under `torch.autocast(bfloat16)`. `--write` replaces this script's
own section for the same device kind (CPU, or the GPU's name) in the file and keeps
every other section.
"""

import argparse
import os
import sys
from pathlib import Path

import _timing

VOCABULARY, LAYERS, HIDDEN, HEADS, FEED_FORWARD, LENGTH, BATCH = 8000, 4, 256, 4, 1024, 128, 32
GEN_BATCH, PROMPT, NEW_TOKENS, BEAMS = 8, 16, 112, 4
TITLE = "## Transformer LM (issue #4)"

KS, HUB, TORCH, HF = "keras_seq transformer_lm", "keras-hub", "native PyTorch", "HF transformers GPT-2"
KS_KERAS_OP = f"{KS}, Keras' loss op"


def matmul_parameters(vocabulary, layers, hidden, feed_forward):
    """Weights that take part in matrix products: attention (4 D^2), feed-forward (2 D F) per block, the head."""
    return layers * (4 * hidden * hidden + 2 * hidden * feed_forward) + hidden * vocabulary


def training_flops_per_token(args):
    n = matmul_parameters(args.vocabulary, args.layers, args.hidden, args.feed_forward)
    return 6 * n + 12 * args.layers * args.hidden * args.length


def generation_flops_per_token(args):
    n = matmul_parameters(args.vocabulary, args.layers, args.hidden, args.feed_forward)
    mean_context = args.prompt + (args.new_tokens + 1) / 2
    return 2 * n + 4 * args.layers * args.hidden * mean_context


# ----------------------------------------------------------------------------- models


def keras_seq_lm(args, length):
    import keras_seq as ks

    return ks.models.transformer_lm(
        args.vocabulary,
        length,
        num_layers=args.layers,
        hidden_dim=args.hidden,
        num_heads=args.heads,
        intermediate_dim=args.feed_forward,
        dropout=0.0,
    )


def keras_hub_lm(args):
    """The model of anchors/keras_hub_lm_train.py."""
    import keras
    import keras_hub

    inputs = keras.Input((args.length,), dtype="int32")
    x = keras_hub.layers.TokenAndPositionEmbedding(args.vocabulary, args.length, args.hidden)(inputs)
    for _ in range(args.layers):
        x = keras_hub.layers.TransformerDecoder(args.feed_forward, args.heads, normalize_first=True, dropout=0.0)(x)
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(inputs, keras.layers.Dense(args.vocabulary)(x))


def torch_lm(args, device):
    """The model of anchors/torch_lm_train.py."""
    import torch
    from torch import nn

    length, vocabulary = args.length, args.vocabulary

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(vocabulary, args.hidden), nn.Embedding(length, args.hidden)
            layer = nn.TransformerEncoderLayer(
                args.hidden,
                args.heads,
                args.feed_forward,
                dropout=0.0,
                batch_first=True,
                norm_first=True,
                activation="relu",
            )
            self.enc = nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)
            self.norm, self.out = nn.LayerNorm(args.hidden), nn.Linear(args.hidden, vocabulary)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(length))
            self.register_buffer("positions", torch.arange(length))

        def forward(self, x):
            h = self.emb(x) + self.pos(self.positions)
            return self.out(self.norm(self.enc(h, mask=self.mask, is_causal=True)))

    return LM().to(device)


# ----------------------------------------------------------------------------- backend run


def _setup(args):
    """Precision and flash attention for this process; returns the device record."""
    import keras

    info = _timing.device()
    if args.flash_attention == "on":
        keras.config.enable_flash_attention()  # Keras' default: used where the backend's kernel takes the inputs
    else:
        keras.config.disable_flash_attention()
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    return {
        **info,
        "flash_attention": args.flash_attention,
        "precision": "mixed_bfloat16" if args.mixed_precision else "float32",
    }


def _training_cases(args, on_error):
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.integers(1, args.vocabulary, (args.batch_size, args.length)).astype("int32")
    y = rng.integers(1, args.vocabulary, (args.batch_size, args.length)).astype("int32")

    def keras_step(build, loss=None):
        def make():
            model = build()
            model.compile(
                optimizer=keras.optimizers.Adam(1e-3),
                jit_compile=True if args.jit_compile == "on" else "auto",
                loss=loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
            return lambda: float(model.train_on_batch(x, y))

        return make

    cases = {
        KS: keras_step(lambda: keras_seq_lm(args, args.length)),
        KS_KERAS_OP: keras_step(lambda: keras_seq_lm(args, args.length), keras_sparse_cross_entropy),
    }
    try:
        import keras_hub  # noqa: F401

        cases[HUB] = keras_step(lambda: keras_hub_lm(args))
    except ImportError as error:
        on_error(HUB, error)
    if keras.backend.backend() == "torch":
        cases[TORCH] = lambda: _torch_training_step(args, x, y)
    return cases


def _fit_cases(args, on_error):
    """One whole `fit` over `args.fit_batches` batches of NumPy arrays per call, as the anchors time it."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    count = args.fit_batches * args.batch_size
    x = rng.integers(1, args.vocabulary, (count, args.length)).astype("int32")
    y = rng.integers(1, args.vocabulary, (count, args.length)).astype("int32")

    def keras_fit(build):
        def make():
            model = build()
            model.compile(
                optimizer=keras.optimizers.Adam(1e-3),
                jit_compile=True if args.jit_compile == "on" else "auto",
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
            model.fit(x[: 2 * args.batch_size], y[: 2 * args.batch_size], batch_size=args.batch_size, verbose=0)
            return lambda: model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=0)

        return make

    cases = {KS: keras_fit(lambda: keras_seq_lm(args, args.length))}
    try:
        import keras_hub  # noqa: F401

        cases[HUB] = keras_fit(lambda: keras_hub_lm(args))
    except ImportError as error:
        on_error(HUB, error)
    if keras.backend.backend() == "torch":

        def torch_loop():
            step = _torch_training_step(args, x[: args.batch_size], y[: args.batch_size])
            return lambda: [step() for _ in range(args.fit_batches)]

        cases[TORCH] = torch_loop
    return cases


def keras_sparse_cross_entropy(y_true, y_pred):
    """Keras' own op, as a function: keras_seq's `compile` swaps only Keras' loss class."""
    import keras

    return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)


def _torch_training_step(args, x, y):
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch_lm(args, device)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.as_tensor(x, device=device), torch.as_tensor(y, device=device).long()

    def step():
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.mixed_precision):
            logits = model(x)
        loss = loss_fn(logits.float().reshape(-1, args.vocabulary), y.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def _generation_cases(args, on_error):
    import keras
    import numpy as np

    max_length = args.prompt + args.new_tokens
    rng = np.random.default_rng(0)
    prompt = rng.integers(1, args.vocabulary, (args.gen_batch, args.prompt)).astype("int32")
    model_holder = {}

    def ks_model():
        if "model" not in model_holder:
            model_holder["model"] = keras_seq_lm(args, max_length)
        return model_holder["model"]

    def ks_generate(**options):
        def make():
            model = ks_model()
            return lambda: keras.ops.convert_to_numpy(model.generate(prompt, max_length, **options))

        return make

    cases = {
        f"{KS} greedy": ks_generate(),
        f"{KS} beam{BEAMS}": ks_generate(strategy="beam", num_beams=BEAMS),
    }
    try:
        import keras_hub

        hub_inputs = {
            "token_ids": np.pad(prompt, ((0, 0), (0, args.new_tokens))),
            "padding_mask": np.arange(max_length)[None, :].repeat(args.gen_batch, 0) < args.prompt,
        }
        backbone_holder = {}

        def hub_generate(sampler):
            def make():
                if "backbone" not in backbone_holder:
                    backbone_holder["backbone"] = keras_hub.models.GPT2Backbone(
                        vocabulary_size=args.vocabulary,
                        num_layers=args.layers,
                        num_heads=args.heads,
                        hidden_dim=args.hidden,
                        intermediate_dim=args.feed_forward,
                        max_sequence_length=max_length,
                    )
                lm = keras_hub.models.GPT2CausalLM(backbone=backbone_holder["backbone"], preprocessor=None)
                lm.compile(sampler=sampler() if callable(sampler) else sampler)
                return lambda: lm.generate(hub_inputs, stop_token_ids=None)

            return make

        cases[f"{HUB} greedy"] = hub_generate("greedy")
        if args.hub_beam:
            cases[f"{HUB} beam{BEAMS}"] = hub_generate(lambda: keras_hub.samplers.BeamSampler(num_beams=BEAMS))
    except ImportError as error:
        on_error(HUB, error)
    if keras.backend.backend() == "torch":
        try:
            import transformers  # noqa: F401

            cases[f"{HF} greedy"] = lambda: _hf_generate(args, prompt)
        except ImportError:
            _timing.emit(note=f"{HF}: `transformers` is not installed, its column is skipped")
    return cases


def _hf_generate(args, prompt):
    """The model of anchors/hf_gpt2_generate.py (cached greedy, no early stop)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = GPT2Config(
        vocab_size=args.vocabulary,
        n_positions=args.prompt + args.new_tokens,
        n_embd=args.hidden,
        n_layer=args.layers,
        n_head=args.heads,
        n_inner=args.feed_forward,
    )
    model = GPT2LMHeadModel(config).eval().to(device)
    if args.mixed_precision:
        model = model.to(torch.bfloat16)
    ids = torch.as_tensor(prompt, device=device).long()

    def step():
        with torch.no_grad():
            out = model.generate(
                ids, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0
            )
        return out.cpu()

    return step


def backend_run(args):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX and PyTorch share one GPU here
    import keras

    keras.utils.set_random_seed(0)
    backend = keras.backend.backend()
    info = _setup(args)
    _timing.emit(record="device", **info)

    def on_error(name, error):
        _timing.emit(note=f"{name} skipped or failed on {backend}: {_timing.first_line(error)}")

    size = 2048 if info["kind"] == "cpu" else 8192
    peaks = {"float32": _timing.matmul_peak(size, "float32")}
    if args.mixed_precision:
        peaks["bfloat16"] = _timing.matmul_peak(size, "bfloat16")
    _timing.emit(record="peak", size=size, **{f"{k}_flops": v for k, v in peaks.items()})

    if "train" in args.parts:
        times = _timing.time_interleaved(
            _training_cases(args, on_error), args.rounds, steps=args.steps, warmup=args.warmup, on_error=on_error
        )
        for name, seconds in times.items():
            median, low = _timing.summary(seconds)
            _timing.emit(
                record="train",
                implementation=name,
                median_ms=median * 1e3,
                min_ms=low * 1e3,
                tokens_per_s=args.batch_size * args.length / median,
            )
    if "fit" in args.parts:
        times = _timing.time_interleaved(_fit_cases(args, on_error), args.fit_rounds, warmup=0, on_error=on_error)
        for name, seconds in times.items():
            median, low = _timing.summary(seconds)
            _timing.emit(
                record="fit",
                implementation=name,
                median_s=median,
                min_s=low,
                tokens_per_s=args.fit_batches * args.batch_size * args.length / median,
            )
    if "generate" in args.parts:
        times = _timing.time_interleaved(
            _generation_cases(args, on_error), args.gen_rounds, warmup=1, on_error=on_error
        )
        for name, seconds in times.items():
            median, low = _timing.summary(seconds)
            _timing.emit(
                record="generate",
                implementation=name,
                median_s=median,
                min_s=low,
                new_tokens_per_s=args.gen_batch * args.new_tokens / median,
            )
    # The peak again at the end: under a shared CPU's changing load, keep the higher of the two.
    later = _timing.matmul_peak(size, "float32")
    _timing.emit(record="peak", size=size, float32_flops=later)


# ----------------------------------------------------------------------------- driver


def _ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"


def _tables(args, records):
    by, peaks, devices, sizes = {}, {}, {}, set()
    for record in records:
        backend = record["backend"]
        if record["record"] == "device":
            devices[backend] = record
        elif record["record"] == "peak":
            sizes.add(record["size"])
            for key, value in record.items():
                if key.endswith("_flops"):
                    peaks[(backend, key)] = max(value, peaks.get((backend, key), 0.0))
        else:
            by[(record["record"], backend, record["implementation"])] = record
    backends = [b for b in _timing.BACKENDS if b in devices]
    train_flops, gen_flops = training_flops_per_token(args), generation_flops_per_token(args)
    precision = "bfloat16" if args.mixed_precision else "float32"

    def peak(backend):
        return peaks.get((backend, f"{precision}_flops")) or peaks.get((backend, "float32_flops"))

    def mfu(tokens_per_s, flops, backend):
        return f"{100 * tokens_per_s * flops / peak(backend):.1f}%" if tokens_per_s and peak(backend) else "n/a"

    lines = ["### Training (tokens/s, higher is better)", ""]
    rows = []
    for backend in backends:
        ks = by.get(("train", backend, KS))
        ks_rate = ks["tokens_per_s"] if ks else None
        for name in (KS, KS_KERAS_OP, HUB, TORCH):
            row = by.get(("train", backend, name))
            if row is None:
                continue
            rows.append(
                [
                    backend,
                    name,
                    f"{row['median_ms']:.1f}",
                    f"{row['min_ms']:.1f}",
                    f"{row['tokens_per_s']:,.0f}",
                    _ratio(ks_rate, row["tokens_per_s"]),
                    mfu(row["tokens_per_s"], train_flops, backend),
                ]
            )
    lines += _timing.markdown_table(
        ["backend", "implementation", "median ms/step", "min ms/step", "tokens/s", "keras_seq speed-up", "MFU"],
        rows,
        right_aligned=(2, 3, 4, 5, 6),
    )
    lines += [
        "",
        "`keras_seq speed-up`: keras_seq's tokens/s over the row's (targets: at least 1.10x keras-hub on "
        "every backend, at least 0.90x native PyTorch on torch, i.e. a speed-up of 0.90x or more). Every Keras "
        "model is compiled with `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`, which keras_seq's "
        f"models compute as `ks.losses.SparseCategoricalCrossentropy`; `{KS_KERAS_OP}`: the same model trained "
        "with Keras' own op (a one-hot on JAX, a class-axis move on torch).",
    ]

    lines += ["", f"### One `fit` call over {args.fit_batches} batches (tokens/s, higher is better)", ""]
    rows = []
    for backend in backends:
        ks = by.get(("fit", backend, KS))
        for name in (KS, HUB, TORCH):
            row = by.get(("fit", backend, name))
            if row is not None:
                rows.append(
                    [
                        backend,
                        name,
                        f"{row['median_s']:.2f}",
                        f"{row['min_s']:.2f}",
                        f"{row['tokens_per_s']:,.0f}",
                        _ratio(ks and ks["tokens_per_s"], row["tokens_per_s"]),
                    ]
                )
    lines += _timing.markdown_table(
        ["backend", "implementation", "median s/fit", "min s/fit", "tokens/s", "keras_seq speed-up"],
        rows,
        right_aligned=(2, 3, 4, 5),
    )
    lines += [
        "",
        "The wall time of `model.fit(x, y, batch_size, epochs=1)` on NumPy arrays, as "
        "`anchors/keras_hub_lm_train.py` times it (native PyTorch: the same steps in a loop): the training "
        "steps plus Keras' input pipeline and `fit`'s set-up and teardown.",
    ]

    lines += [
        "",
        f"### Cached generation (batch {args.gen_batch}, prompt {args.prompt}, {args.new_tokens} new tokens)",
        "",
    ]
    rows = []
    for backend in backends:
        ks_greedy = by.get(("generate", backend, f"{KS} greedy"))
        ks_rate = ks_greedy["new_tokens_per_s"] if ks_greedy else None
        for name in (f"{KS} greedy", f"{HUB} greedy", f"{HF} greedy", f"{KS} beam{BEAMS}", f"{HUB} beam{BEAMS}"):
            row = by.get(("generate", backend, name))
            if row is None:
                continue
            greedy = by.get(("generate", backend, name.replace(f"beam{BEAMS}", "greedy")))
            beam_ratio = f"{row['median_s'] / greedy['median_s']:.2f}x" if "beam" in name and greedy else ""
            speed_up = _ratio(ks_rate, row["new_tokens_per_s"]) if "greedy" in name else ""
            rows.append(
                [
                    backend,
                    name,
                    f"{row['median_s']:.2f}",
                    f"{row['min_s']:.2f}",
                    f"{row['new_tokens_per_s']:,.0f}",
                    speed_up,
                    beam_ratio,
                    mfu(row["new_tokens_per_s"], gen_flops, backend) if "greedy" in name else "",
                ]
            )
    lines += _timing.markdown_table(
        [
            "backend",
            "implementation",
            "median s/call",
            "min s/call",
            "new tokens/s",
            "keras_seq speed-up",
            "beam / greedy time",
            "MFU",
        ],
        rows,
        right_aligned=(2, 3, 4, 5, 6, 7),
    )
    lines += [
        "",
        f"Targets: keras_seq greedy at least 1.20x keras-hub's; beam search ({BEAMS} beams) at most 5x "
        "greedy's time for the same new tokens (keras-hub's own ratio shown for reference).",
    ]

    lines += ["", "### Model FLOPs utilisation", ""]
    rows = []
    for backend in backends:
        cells = [backend, f"{peaks.get((backend, 'float32_flops'), 0) / 1e9:,.0f}"]
        if args.mixed_precision:
            cells.append(f"{peaks.get((backend, 'bfloat16_flops'), 0) / 1e9:,.0f}")
        rows.append(cells)
    header = ["backend", "measured float32 matmul peak, GFLOP/s"] + (
        ["measured bfloat16 matmul peak, GFLOP/s"] if args.mixed_precision else []
    )
    lines += _timing.markdown_table(header, rows, right_aligned=tuple(range(1, len(header))))
    n = matmul_parameters(args.vocabulary, args.layers, args.hidden, args.feed_forward)
    lines += [
        "",
        f"FLOPs per token: training `6N + 12LDT` = {train_flops / 1e6:.1f} MFLOP (N = {n:,} matmul "
        f"parameters), generation `2N + 4LDc` = {gen_flops / 1e6:.1f} MFLOP per new token (prompt prefill not "
        f"counted). Peak: the faster of two medians of a {'/'.join(map(str, sorted(sizes)))}"
        f"-square `keras.ops.matmul` measured at the start and end of each backend's run; MFU = tokens/s x "
        f"FLOPs per token / peak ({precision} peak).",
    ]
    return lines, devices


def drive(args):
    forwarded = (
        [
            "--rounds",
            str(args.rounds),
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
            "--gen-rounds",
            str(args.gen_rounds),
            "--batch-size",
            str(args.batch_size),
            "--length",
            str(args.length),
            "--parts",
            ",".join(args.parts),
            "--flash-attention",
            args.flash_attention,
            "--fit-rounds",
            str(args.fit_rounds),
            "--fit-batches",
            str(args.fit_batches),
            "--vocabulary",
            str(args.vocabulary),
            "--layers",
            str(args.layers),
            "--hidden",
            str(args.hidden),
            "--feed-forward",
            str(args.feed_forward),
            "--gen-batch",
            str(args.gen_batch),
            "--prompt",
            str(args.prompt),
            "--new-tokens",
            str(args.new_tokens),
            "--jit-compile",
            args.jit_compile,
        ]
        + (["--mixed-precision"] if args.mixed_precision else [])
        + ([] if args.hub_beam else ["--no-hub-beam"])
    )
    if args.from_records:
        records, notes = _timing.load_records(args.from_records)
    else:
        records, notes = _timing.run_backends(Path(__file__).resolve(), forwarded, args.backends, args.records)
    tables, devices = _tables(args, records)
    labels = sorted({_timing.device_label(d) for d in devices.values()}) or ["CPU"]
    label = " / ".join(labels)
    precision = "mixed_bfloat16" if args.mixed_precision else "float32"
    header = [
        f"{TITLE}, {label}, {precision}, {_timing.utc_now()}",
        "",
        f"- Commit: {_timing.git_commit()}",
        f"- Versions: {_timing.versions()}",
        f"- Machine: {_timing.cpu_name()}, {os.cpu_count()} cores; device: {label}",
        f"- Configuration: V={args.vocabulary}, {args.layers} pre-norm blocks, D={args.hidden}, {args.heads} heads, "
        f"FF={args.feed_forward}, T={args.length}, B={args.batch_size}; "
        f"{precision}; keras.config flash attention: {args.flash_attention}; Keras training jit_compile: "
        f"{'True' if args.jit_compile == 'on' else 'auto'}; "
        f"training: {args.warmup} warm-up steps, then {args.rounds} interleaved rounds of {args.steps} step(s); "
        f"one fit: {args.fit_rounds} interleaved rounds of {args.fit_batches} batches; "
        f"generation: {args.gen_rounds} interleaved rounds"
        + (" (`--quick` smoke test, not a measurement)" if args.quick else ""),
        f"- Command: `python benchmarks/bench_transformer.py {' '.join(sys.argv[1:])}`",
        "",
    ]
    lines = header + tables
    if notes:
        lines += ["", "Notes:", *(f"- {note}" for note in notes)]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        _timing.write_section(args.write, f"{TITLE}, {label}, {precision},", section)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend-run", action="store_true", help="measure the current KERAS_BACKEND only (JSON lines)"
    )
    parser.add_argument("--backends", default=",".join(_timing.BACKENDS), help="comma-separated (driver mode)")
    parser.add_argument("--parts", default="train,fit,generate", help="comma-separated: train, fit, generate")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved training rounds (default 6)")
    parser.add_argument("--steps", type=int, default=2, help="training steps per case per round (default 2)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed training steps per case (default 3)")
    parser.add_argument("--fit-rounds", type=int, default=3, help="interleaved one-fit rounds (default 3)")
    parser.add_argument("--fit-batches", type=int, default=12, help="batches in each timed fit (default 12)")
    parser.add_argument("--gen-rounds", type=int, default=4, help="interleaved generate() rounds (default 4)")
    parser.add_argument("--batch-size", type=int, default=BATCH)
    parser.add_argument("--length", type=int, default=LENGTH)
    parser.add_argument("--vocabulary", type=int, default=VOCABULARY)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--hidden", type=int, default=HIDDEN)
    parser.add_argument("--heads", type=int, default=HEADS)
    parser.add_argument("--feed-forward", type=int, default=FEED_FORWARD)
    parser.add_argument("--gen-batch", type=int, default=GEN_BATCH)
    parser.add_argument("--prompt", type=int, default=PROMPT)
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    parser.add_argument(
        "--jit-compile",
        choices=("on", "auto"),
        default="on",
        help="Keras models' training jit_compile: True as in the anchors (default), or Keras' 'auto'",
    )
    parser.add_argument("--mixed-precision", action="store_true", help="mixed_bfloat16 (meant for GPUs)")
    parser.add_argument(
        "--flash-attention",
        choices=("on", "off"),
        default="on",
        help="keras.config.enable_flash_attention() (default; Keras' own default) or disable it",
    )
    parser.add_argument(
        "--no-hub-beam", dest="hub_beam", action="store_false", help="skip keras-hub's beam search (slow on TensorFlow)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny rounds, B=4, T=32, 8 new tokens")
    parser.add_argument("--write", metavar="PATH", help="also put the Markdown section into PATH")
    parser.add_argument("--records", metavar="PATH", help="also append every measurement to PATH (JSON lines)")
    parser.add_argument(
        "--from-records",
        metavar="PATH",
        help="make the tables from a --records file instead of measuring (same other flags)",
    )
    args = parser.parse_args()
    args.backends = [b for b in args.backends.split(",") if b]
    args.parts = [p for p in args.parts.split(",") if p]
    if args.quick:
        args.rounds, args.steps, args.warmup, args.gen_rounds, args.fit_rounds, args.fit_batches = 2, 1, 1, 1, 1, 2
        args.batch_size, args.length, args.prompt, args.new_tokens = 4, 32, 8, 8
    if set(args.backends) - set(_timing.BACKENDS) or set(args.parts) - {"train", "fit", "generate"}:
        parser.error(f"--backends from {_timing.BACKENDS}, --parts from train, fit, generate")
    if args.backend_run:
        backend_run(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()

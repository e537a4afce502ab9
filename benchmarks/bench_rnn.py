"""Training speed of keras_seq's recurrent models next to plain Keras and PyTorch (issue #3).

What is measured, per backend, in one process with the implementations timed
round-robin (see `_timing.py`); every step is `train_on_batch` (Adam, sparse
cross-entropy from logits) at the default `jit_compile`, or the same step written in
PyTorch; token ids are drawn from `[1, V)`, so nothing is padding:

* `lm`: `ks.models.rnn_lm(cell="lstm")` against the plain Keras model of
  `anchors/keras_lstm_lm_train.py` (`Embedding -> LSTM -> Dense`, V=128, E=64,
  H=256, T=64, B=64) and the PyTorch twin of `anchors/torch_lstm_lm_train.py`
  (`nn.LSTM`). Target: within 5% of plain Keras.
* `seq2seq`: `ks.models.rnn_seq2seq(attention="bahdanau", cell="gru")` (V=8000 both
  sides, E=256, units 256, S=T=32, B=64) against PyTorch written here: the same model
  (embeddings, bidirectional `nn.GRU` encoder, `tanh(W [fwd; bwd])` bridge, `nn.GRU`
  decoder run over the whole target (teacher forcing), Bahdanau scores
  `v^T tanh(W s_i + U h_j)` over the unpadded source, `tanh(W_c [c_i; s_i])`, logits);
  and, for reference, the textbook PyTorch Bahdanau decoder that feeds the context
  into a `nn.GRUCell` step by step (scores from `s_{i-1}`), the twin of
  `rnn_seq2seq(..., input_feeding=True)` (Bahdanau et al., 2015, sec. 3.1), measured too. Tokens/s
  counts target tokens (B*T). Goal: the fastest keras_seq backend at least matches PyTorch.
  On a GPU the PyTorch twins run in every backend's process, so each keras_seq row
  has a PyTorch reference timed in the same rounds; on a CPU only in the torch
  backend's (`--native-torch`): beside TensorFlow's or JAX's thread pools on a busy
  CPU, PyTorch slowed down tenfold. Across processes, compare with care.
* `paths`: which recurrent paths are fused on this backend and device, probed by
  calling Keras' backend kernels (`keras.src.backend.lstm`/`gru`) with and without a
  mask, and what the unfused ones cost: the LM of `lm` with its recurrent layer
  swapped (Keras `LSTM` without/with a mask, `RNN(LSTMCell)`, `GRU` without/with a
  mask, keras_seq's `PeepholeLSTMCell` and `CoupledLSTMCell` in `keras.layers.RNN`).

Run from the repository root:

    python benchmarks/bench_rnn.py                  # tensorflow, jax, torch; Markdown tables
    python benchmarks/bench_rnn.py --write benchmarks/RESULTS.md   # ... and put them there
    python benchmarks/bench_rnn.py --quick          # smoke test, not a measurement
    python benchmarks/bench_rnn.py --backends jax,torch --mixed-precision   # e.g. on a GPU
    KERAS_BACKEND=torch python benchmarks/bench_rnn.py --backend-run --parts lm   # one backend, JSON lines

The device is whatever the backend picks (a GPU when one is visible);
`--mixed-precision` sets Keras' `mixed_bfloat16` policy and runs PyTorch under
`torch.autocast(bfloat16)`. `--write` replaces this script's own section for the
same device kind in the file and keeps every other section.
"""

import argparse
import os
import sys
from pathlib import Path

import _timing

TITLE = "## Recurrent models (issue #3)"
LM_SIZES = dict(vocabulary=128, embedding=64, units=256, length=64, batch=64)
S2S_SIZES = dict(vocabulary=8000, embedding=256, units=256, length=32, batch=64)

KS_LM, KERAS_LM, TORCH_LM = "keras_seq rnn_lm(lstm)", "plain Keras LSTM LM", "native PyTorch nn.LSTM LM"
KS_S2S, KS_S2S_FEED, TORCH_S2S, TORCH_S2S_LOOP = (
    "keras_seq rnn_seq2seq(bahdanau, gru)",
    "keras_seq rnn_seq2seq(bahdanau, gru, input_feeding=True)",
    "native PyTorch, same model",
    "native PyTorch, step-wise Bahdanau decoder (GRUCell loop)",
)
PATH_CASES = (
    ("keras LSTM", "lstm", False),
    ("keras LSTM, masked input", "lstm", True),
    ("keras RNN(LSTMCell)", "lstm_cell", False),
    ("keras GRU", "gru", False),
    ("keras GRU, masked input", "gru", True),
    ("keras_seq PeepholeLSTMCell", "peephole_lstm", False),
    ("keras_seq CoupledLSTMCell", "coupled_lstm", False),
)


def _torch_device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _keras_step(build, x, y):
    import keras

    def make():
        model = build()
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        return lambda: float(model.train_on_batch(x, y))

    return make


def _torch_step(module, forward, y, vocabulary, mixed_precision):
    import torch

    device = _torch_device()
    optimizer = torch.optim.Adam(module.parameters(), 1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    y = torch.as_tensor(y, device=device).long().reshape(-1)

    def step():
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=mixed_precision):
            logits = forward()
        loss = loss_fn(logits.float().reshape(-1, vocabulary), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


# ----------------------------------------------------------------------------- (a) LSTM LM


def plain_keras_lm(recurrent="lstm", mask_zero=False, sizes=LM_SIZES):
    """The model of anchors/keras_lstm_lm_train.py, with its recurrent layer swappable (for `paths`)."""
    import keras

    import keras_seq as ks

    units = sizes["units"]
    layer = {
        "lstm": lambda: keras.layers.LSTM(units, return_sequences=True),
        "gru": lambda: keras.layers.GRU(units, return_sequences=True),
        "lstm_cell": lambda: keras.layers.RNN(keras.layers.LSTMCell(units), return_sequences=True),
        "peephole_lstm": lambda: keras.layers.RNN(ks.layers.PeepholeLSTMCell(units), return_sequences=True),
        "coupled_lstm": lambda: keras.layers.RNN(ks.layers.CoupledLSTMCell(units), return_sequences=True),
    }[recurrent]()
    inputs = keras.Input((sizes["length"],), dtype="int32")
    x = keras.layers.Embedding(sizes["vocabulary"], sizes["embedding"], mask_zero=mask_zero)(inputs)
    return keras.Model(inputs, keras.layers.Dense(sizes["vocabulary"])(layer(x)))


def torch_lstm_lm(sizes, device):
    """The model of anchors/torch_lstm_lm_train.py."""
    from torch import nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.e = nn.Embedding(sizes["vocabulary"], sizes["embedding"])
            self.l = nn.LSTM(sizes["embedding"], sizes["units"], batch_first=True)
            self.o = nn.Linear(sizes["units"], sizes["vocabulary"])

        def forward(self, x):
            return self.o(self.l(self.e(x))[0])

    return LM().to(device)


def _lm_data(sizes):
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (sizes["batch"], sizes["length"])
    return (
        rng.integers(1, sizes["vocabulary"], shape).astype("int32"),
        rng.integers(1, sizes["vocabulary"], shape).astype("int32"),
    )


def lm_cases(args, sizes):

    import keras_seq as ks

    x, y = _lm_data(sizes)
    cases = {
        KS_LM: _keras_step(
            lambda: ks.models.rnn_lm(sizes["vocabulary"], sizes["embedding"], sizes["units"], "lstm"), x, y
        ),
        KERAS_LM: _keras_step(lambda: plain_keras_lm(sizes=sizes), x, y),
    }
    if args.native_torch:

        def make_torch():
            import torch

            torch.manual_seed(0)
            model = torch_lstm_lm(sizes, _torch_device())
            tx = torch.as_tensor(x, device=_torch_device()).long()
            return _torch_step(model, lambda: model(tx), y, sizes["vocabulary"], args.mixed_precision)

        cases[TORCH_LM] = make_torch
    return cases


# ----------------------------------------------------------------------------- (b) seq2seq


def torch_seq2seq(sizes, device, stepwise=False):
    """PyTorch twin of `ks.models.rnn_seq2seq(attention="bahdanau", cell="gru")`.

    `stepwise=False`: the same arrangement as keras_seq (decoder GRU over the whole
    target, then attention from each state s_i). `stepwise=True`: the textbook
    Bahdanau decoder, scores from s_{i-1} and the context fed into a GRUCell, one
    Python step per target position.
    """
    import torch
    from torch import nn

    vocabulary, embedding, units = sizes["vocabulary"], sizes["embedding"], sizes["units"]

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.source_embedding = nn.Embedding(vocabulary, embedding)
            self.target_embedding = nn.Embedding(vocabulary, embedding)
            self.encoder = nn.GRU(embedding, units, batch_first=True, bidirectional=True)
            self.bridge = nn.Linear(2 * units, units)
            if stepwise:
                self.decoder_cell = nn.GRUCell(embedding + 2 * units, units)
            else:
                self.decoder = nn.GRU(embedding, units, batch_first=True)
            self.query_kernel = nn.Linear(units, units, bias=False)  # W_a
            self.key_kernel = nn.Linear(2 * units, units, bias=False)  # U_a
            self.attention_v = nn.Linear(units, 1, bias=False)  # v_a
            self.combine = nn.Linear(3 * units, units)
            self.head = nn.Linear(units, vocabulary)

        def attend(self, states, keys, annotations, source_mask):
            # states (B, Tq, U), keys = U_a h (B, S, U) -> context (B, Tq, 2U)
            scores = self.attention_v(torch.tanh(self.query_kernel(states)[:, :, None] + keys[:, None])).squeeze(-1)
            scores = scores.masked_fill(~source_mask[:, None], -1e9)
            return torch.softmax(scores.float(), dim=-1).to(annotations.dtype) @ annotations

        def forward(self, source, target):
            source_mask = source != 0
            annotations, final = self.encoder(self.source_embedding(source))
            state = torch.tanh(self.bridge(torch.cat([final[0], final[1]], dim=-1)))
            keys = self.key_kernel(annotations)
            targets = self.target_embedding(target)
            if not stepwise:
                states, _ = self.decoder(targets, state[None])
                context = self.attend(states, keys, annotations, source_mask)
            else:
                contexts, outputs = [], []
                for t in range(targets.shape[1]):
                    context_t = self.attend(state[:, None], keys, annotations, source_mask)[:, 0]
                    state = self.decoder_cell(torch.cat([targets[:, t], context_t], dim=-1), state)
                    contexts.append(context_t)
                    outputs.append(state)
                states, context = torch.stack(outputs, 1), torch.stack(contexts, 1)
            return self.head(torch.tanh(self.combine(torch.cat([context, states], dim=-1))))

    return Seq2Seq().to(device)


def seq2seq_cases(args, sizes):
    import numpy as np

    import keras_seq as ks

    rng = np.random.default_rng(0)
    shape = (sizes["batch"], sizes["length"])
    source, decoder_inputs, targets = (rng.integers(1, sizes["vocabulary"], shape).astype("int32") for _ in range(3))
    inputs = {"encoder_inputs": source, "decoder_inputs": decoder_inputs}

    def keras_seq_model(input_feeding):
        return lambda: ks.models.rnn_seq2seq(
            sizes["vocabulary"],
            sizes["vocabulary"],
            sizes["embedding"],
            sizes["units"],
            "gru",
            "bahdanau",
            input_feeding=input_feeding,
        )

    cases = {
        KS_S2S: _keras_step(keras_seq_model(False), inputs, targets),
        KS_S2S_FEED: _keras_step(keras_seq_model(True), inputs, targets),
    }
    if args.native_torch:

        def make_torch(stepwise):
            def make():
                import torch

                torch.manual_seed(0)
                device = _torch_device()
                model = torch_seq2seq(sizes, device, stepwise)
                s, t = (torch.as_tensor(a, device=device).long() for a in (source, decoder_inputs))
                return _torch_step(model, lambda: model(s, t), targets, sizes["vocabulary"], args.mixed_precision)

            return make

        cases[TORCH_S2S] = make_torch(False)
        cases[TORCH_S2S_LOOP] = make_torch(True)
    return cases


# ----------------------------------------------------------------------------- (c) fused paths


def probe_paths(info):
    """Which kernel Keras runs for LSTM and GRU, without and with a (right-padded) mask.

    Calls the backend hooks that `keras.layers.LSTM`/`GRU` try first
    (`keras.src.backend.lstm`/`gru`): a `NotImplementedError` sends the layer to the
    generic `keras.layers.RNN` loop over the cell.
    """
    import keras
    import numpy as np
    from keras.src import backend as keras_backend

    name = keras.backend.backend()
    gpu = info["kind"] == "gpu"
    generic = {
        "tensorflow": "generic: tf.while_loop over the cell (XLA under jit_compile)",
        "jax": "generic: lax.scan over the cell (inside jax.jit)",
        "torch": "generic: Python loop calling the cell per step",
    }[name]

    def fused(layer):
        if name == "tensorflow":
            return "cuDNN (the model then trains without XLA)"
        if name == "jax":
            if layer == "LSTM":
                return "cuDNN (jax.experimental.rnn)"
            return "backend GRU: input projection hoisted into one matmul, lax.scan (JAX has no cuDNN GRU)"
        if gpu:
            return "cuDNN (torch._VF)"
        return "backend loop: input projection hoisted into one matmul, Python loop over steps"

    rng = np.random.default_rng(0)
    batch, length, features, units = 2, 5, 3, 4
    x = keras.ops.convert_to_tensor(rng.standard_normal((batch, length, features)).astype("float32"))
    h = keras.ops.zeros((batch, units))
    mask = keras.ops.convert_to_tensor(np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool))
    results = []
    for layer, gates in (("LSTM", 4), ("GRU", 3)):
        kernel = keras.ops.convert_to_tensor(rng.standard_normal((features, gates * units)).astype("float32"))
        recurrent = keras.ops.convert_to_tensor(rng.standard_normal((units, gates * units)).astype("float32"))
        for masked in (False, True):
            options = dict(
                kernel=kernel,
                recurrent_kernel=recurrent,
                activation=keras.activations.tanh,
                recurrent_activation=keras.activations.sigmoid,
                return_sequences=True,
            )
            try:
                if layer == "LSTM":
                    bias = keras.ops.zeros((gates * units,))
                    keras_backend.lstm(x, h, h, mask if masked else None, bias=bias, **options)
                else:
                    bias = keras.ops.zeros((2, gates * units))
                    keras_backend.gru(x, h, mask if masked else None, bias=bias, reset_after=True, **options)
                path = fused(layer)
            except NotImplementedError:
                path = generic
            except Exception as error:  # a failing kernel: report it, Keras would fall back or fail the same way
                path = f"error: {_timing.first_line(error, 120)}"
            results.append({"layer": layer, "masked": masked, "path": path})
    return results


def path_cases(args, sizes):
    x, y = _lm_data(sizes)
    return {
        name: _keras_step(lambda r=recurrent, m=masked: plain_keras_lm(r, m, sizes), x, y)
        for name, recurrent, masked in PATH_CASES
    }


# ----------------------------------------------------------------------------- backend run


def backend_run(args):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX and PyTorch share one GPU here
    import keras

    keras.utils.set_random_seed(0)
    backend = keras.backend.backend()
    info = _timing.device()
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    _timing.emit(record="device", precision="mixed_bfloat16" if args.mixed_precision else "float32", **info)

    def on_error(name, error):
        _timing.emit(note=f"{name} failed on {backend}: {_timing.first_line(error)}")

    lm_sizes, s2s_sizes = dict(LM_SIZES), dict(S2S_SIZES)
    if args.quick:
        lm_sizes.update(length=16, batch=8)
        s2s_sizes.update(vocabulary=500, length=8, batch=8)
    _timing.emit(record="sizes", lm=lm_sizes, seq2seq=s2s_sizes)
    wanted = (
        args.native_torch == "all"
        or (args.native_torch == "torch" and backend == "torch")
        or (args.native_torch == "auto" and (backend == "torch" or info["kind"] != "cpu"))
    )
    if wanted:
        try:
            import torch  # noqa: F401
        except ImportError as error:
            on_error("native PyTorch", error)
            wanted = False
    args.native_torch = wanted  # from here on: build the PyTorch twins in this process or not
    parts = {"lm": (lm_cases, lm_sizes), "seq2seq": (seq2seq_cases, s2s_sizes), "paths": (path_cases, lm_sizes)}
    for part in args.parts:
        if part == "paths":
            for row in probe_paths(info):
                _timing.emit(record="probe", **row)
        build, sizes = parts[part]
        times = _timing.time_interleaved(
            build(args, sizes), args.rounds, steps=args.steps, warmup=args.warmup, on_error=on_error
        )
        tokens = sizes["batch"] * sizes["length"]
        for name, seconds in times.items():
            median, low = _timing.summary(seconds)
            _timing.emit(
                record=part, implementation=name, median_ms=median * 1e3, min_ms=low * 1e3, tokens_per_s=tokens / median
            )


# ----------------------------------------------------------------------------- driver


def _tables(args, records):
    by, probes, devices, sizes = {}, {}, {}, {"lm": LM_SIZES, "seq2seq": S2S_SIZES}
    for record in records:
        backend = record["backend"]
        if record["record"] == "device":
            devices[backend] = record
        elif record["record"] == "sizes":
            sizes = {"lm": record["lm"], "seq2seq": record["seq2seq"]}
        elif record["record"] == "probe":
            probes[(backend, record["layer"], record["masked"])] = record["path"]
        else:
            by[(record["record"], backend, record["implementation"])] = record
    backends = [b for b in _timing.BACKENDS if b in devices]
    lines = []

    def ratio(part, backend, name, reference):
        row, base = by.get((part, backend, name)), by.get((part, backend, reference))
        return row["tokens_per_s"] / base["tokens_per_s"] if row and base else None

    def timing_rows(part, names, references, skip=()):
        """Rows of `names` with their ratio to each reference; `(name, reference)` pairs in `skip` give n/a."""
        rows = []
        for backend in backends:
            for name in names:
                row = by.get((part, backend, name))
                if row is None:
                    continue
                ratios = [
                    None if (name, reference) in skip else ratio(part, backend, name, reference)
                    for reference in references
                ]
                rows.append(
                    [
                        backend,
                        name,
                        f"{row['median_ms']:.1f}",
                        f"{row['min_ms']:.1f}",
                        f"{row['tokens_per_s']:,.0f}",
                        *(f"{r:.2f}x" if r else "n/a" for r in ratios),
                    ]
                )
        return rows

    def described(s, lengths):
        return f"V={s['vocabulary']}, E={s['embedding']}, units {s['units']}, {lengths}={s['length']}, B={s['batch']}"

    header = ["backend", "implementation", "median ms/step", "min ms/step", "tokens/s"]
    if "lm" in args.parts:
        lines += [f"### (a) LSTM language model, training ({described(sizes['lm'], 'T')})", ""]
        lines += _timing.markdown_table(
            header + ["vs plain Keras", "vs PyTorch"],
            timing_rows("lm", (KS_LM, KERAS_LM, TORCH_LM), (KERAS_LM, TORCH_LM)),
            right_aligned=(2, 3, 4, 5, 6),
        )
        lines += [
            "",
            "Ratios are tokens/s over the reference's, measured in the same process (n/a: no PyTorch "
            "twin in that process, see `--native-torch`). Target for keras_seq: 0.95x plain Keras or more.",
        ]
        met = [b for b in backends if (ratio("lm", b, KS_LM, KERAS_LM) or 0) >= 0.95]
        lines += [f"Within 5% of plain Keras (or faster) on: {', '.join(met) or 'none'}.", ""]
    if "seq2seq" in args.parts:
        lines += [
            f"### (b) Attentional GRU encoder-decoder, training ({described(sizes['seq2seq'], 'S=T')}; "
            "target tokens/s)",
            "",
        ]
        lines += _timing.markdown_table(
            header + ["vs PyTorch (same model)", "vs PyTorch step-wise (input feeding's twin)"],
            timing_rows(
                "seq2seq",
                (KS_S2S, KS_S2S_FEED, TORCH_S2S, TORCH_S2S_LOOP),
                (TORCH_S2S, TORCH_S2S_LOOP),
                skip={(KS_S2S, TORCH_S2S_LOOP), (KS_S2S_FEED, TORCH_S2S)},
            ),
            right_aligned=(2, 3, 4, 5, 6),
        )
        lines += [""]
        for name, twin in ((KS_S2S, TORCH_S2S), (KS_S2S_FEED, TORCH_S2S_LOOP)):
            best = max(
                ((by[("seq2seq", b, name)]["tokens_per_s"], b) for b in backends if ("seq2seq", b, name) in by),
                default=None,
            )
            if best:
                r = ratio("seq2seq", best[1], name, twin)
                torch_rows = [by[k]["tokens_per_s"] for k in by if k[0] == "seq2seq" and k[2] == twin]
                across = f"; {best[0] / max(torch_rows):.2f}x that twin in any process" if torch_rows else ""
                lines += [
                    f"`{name}`: fastest on {best[1]} ({best[0]:,.0f} tokens/s), "
                    + (
                        f"{r:.2f}x its PyTorch twin ({twin}) in the same process"
                        if r
                        else "no PyTorch twin in its process"
                    )
                    + f"{across} (goal: 1.00x or more)."
                ]
        lines += [""]
    if "paths" in args.parts:
        lines += ["### (c) Which recurrent paths are fused, and what the generic loop costs", ""]
        rows = []
        for backend in backends:
            for layer in ("LSTM", "GRU"):
                rows.append(
                    [
                        backend,
                        layer,
                        probes.get((backend, layer, False), "n/a"),
                        probes.get((backend, layer, True), "n/a"),
                    ]
                )
        lines += _timing.markdown_table(["backend", "Keras layer", "no mask", "with a mask"], rows)
        lines += [
            "",
            "Probed on this device by calling the kernels `keras.layers.LSTM`/`GRU` try first "
            "(`keras.src.backend.lstm`/`gru`; a NotImplementedError sends the layer to the generic loop). "
            "`keras.layers.RNN` over any other cell (keras_seq's PeepholeLSTMCell and CoupledLSTMCell "
            "included) always takes the generic loop. `Bidirectional` has fused two-direction kernels on a "
            "GPU (torch: LSTM and GRU; JAX: LSTM), also only without a mask.",
            "",
        ]
        names = [name for name, _, _ in PATH_CASES]
        lines += _timing.markdown_table(
            header + ["vs keras LSTM"], timing_rows("paths", names, ("keras LSTM",)), right_aligned=(2, 3, 4, 5)
        )
        lines += [
            "",
            "The plain LM of (a) with its recurrent layer swapped; `masked input`: "
            "`Embedding(mask_zero=True)` (no id is 0, so the mask is all True but still handed to the layer).",
        ]
    return lines, devices


def drive(args):
    forwarded = [
        "--rounds",
        str(args.rounds),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--parts",
        ",".join(args.parts),
    ]
    forwarded += ["--native-torch", args.native_torch]
    forwarded += (["--mixed-precision"] if args.mixed_precision else []) + (["--quick"] if args.quick else [])
    if args.from_records:
        records, notes = _timing.load_records(args.from_records)
    else:
        records, notes = _timing.run_backends(Path(__file__).resolve(), forwarded, args.backends, args.records)
    tables, devices = _tables(args, records)
    label = " / ".join(sorted({_timing.device_label(d) for d in devices.values()})) or "CPU"
    precision = "mixed_bfloat16" if args.mixed_precision else "float32"
    lines = [
        f"{TITLE}, {label}, {precision}, {_timing.utc_now()}",
        "",
        f"- Commit: {_timing.git_commit()}",
        f"- Versions: {_timing.versions()}",
        f"- Machine: {_timing.cpu_name()}, {os.cpu_count()} cores; device: {label}",
        f"- Timing: {'mixed_bfloat16' if args.mixed_precision else 'float32'}; {args.warmup} warm-up steps, then "
        f"{args.rounds} interleaved rounds of {args.steps} step(s) per implementation"
        + (" (`--quick` smoke test with tiny sizes, not a measurement)" if args.quick else ""),
        f"- Command: `python benchmarks/bench_rnn.py {' '.join(sys.argv[1:])}`",
        "",
    ] + tables
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
    parser.add_argument("--parts", default="lm,seq2seq,paths", help="comma-separated: lm, seq2seq, paths")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    parser.add_argument("--steps", type=int, default=2, help="steps per implementation per round (default 2)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per implementation (default 3)")
    parser.add_argument("--mixed-precision", action="store_true", help="mixed_bfloat16 (meant for GPUs)")
    parser.add_argument(
        "--native-torch",
        choices=("auto", "all", "torch", "none"),
        default="auto",
        help="where the PyTorch twins run: every backend's process (all), the torch backend's (torch), "
        "none; auto (default): all on a GPU, torch on a CPU",
    )
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny sizes, 2 rounds of 1 step")
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
        args.rounds, args.steps, args.warmup = 2, 1, 1
    if set(args.backends) - set(_timing.BACKENDS) or set(args.parts) - {"lm", "seq2seq", "paths"}:
        parser.error(f"--backends from {_timing.BACKENDS}, --parts from lm, seq2seq, paths")
    if args.backend_run:
        backend_run(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()

"""Training speed of the translate recipe's Transformer next to Eole (OpenNMT's PyTorch successor), CPU.

Issue #26, point 3. Target tokens per second (the non-padding target tokens a training step learns
from, end ids included, start ids not) of `recipes.translate --model transformer` on every Keras
backend, and of Eole trained on the same sentence pairs, split into the same pieces, with a model
of the same shape, in one run of this script on one machine:

* the model (1,179,040 parameters on both sides): 2 encoder and 2 decoder blocks, width 128, 4
  heads, feed-forward 256 (ReLU), pre-norm with a final LayerNorm (epsilon 1e-5), biases in every
  projection, sinusoidal positions (interleaved sines and cosines) added to embeddings scaled by
  sqrt(128), dropout 0.1 (residual branches, embeddings, attention weights), one 4,000-piece joint
  vocabulary with three-way tied embeddings (encoder, decoder, output), output bias;
* training: Adam (beta_2 0.98, epsilon 1e-9), label-smoothed cross-entropy (epsilon 0.1) averaged
  over target tokens, no gradient clipping, float32, batches of about the same number of target
  tokens (below).

Data: the shipped corpus `software_en_fr` (train split), cleaned and cut at 64 tokens as the recipe
does, split by the joint SentencePiece model the recipe trains (trained once here, by the recipe's
own `build_vocabularies`, and given to every side). Eole reads the pieces as text (one sentence a
line, pieces separated by spaces) with a vocabulary file of the 4,000 pieces in SentencePiece's id
order, whose first four are Eole's pad, start, end and unknown tokens (`<pad> <s> </s> <unk>`):
Eole adds no tokens of its own, so both sides train on the same id sequences (source: the pieces;
target: start, the pieces, end).

keras_seq side: one process per backend (`.tox/tensorflow`, `.tox/jax`, `.tox/torch`), the recipe's
own pieces (`recipes.translate`: `training_records`, `encoded`, `build_model`, `compile_model`,
`teacher_forcing`; `keras_seq.data.pipeline.padded_batches`: 32 pairs a batch from pools sorted
by length, each batch padded to its longest pair (on JAX, to the next bucket edge), shuffled per
epoch) and `model.fit` with the recipe's step callbacks
(`TrainingBudget`, `WarmupLinearDecay`) and a timing callback. A step's time runs from the end of
the step before to the end of this one (data, callbacks and all, as a user's `fit` runs). Not
timed: the first `--warmup-steps`, the first step of each epoch (its interval holds the epoch's
end and start) and every step whose batch shape (rows, padded length) is new, since JAX compiles
one XLA program and TensorFlow may trace anew per shape (the recipe pays those compilations once per
shape, this figure does not; `wall_seconds` holds them). The
recipe's epoch-end work (validation BLEU, checkpoints, TensorBoard) is left out: it is not the
training step.

Eole side: `eole train --config` (generated YAML), one process (`--eole-workers 0`: its data
loader runs in the training process; Eole's default is 2 DataLoader processes), its own data
loader (length-sorted buckets of one pass over the data each, batches by tokens) and its own
logging: every `--report-every` steps Eole logs `SRC/TGT tok/s`, the source and non-padding target
tokens of those steps over their wall time (data loading, optimizer and all). The figure taken is
TGT over the reports after `--warmup-steps`: their target tokens (`bsz` TGT times the steps) over
their seconds (each report's tokens over its TGT rate); torch runs eagerly, nothing to compile. A
report in which Eole loaded a new pass of the data is not timed, as keras_seq's first step of an
epoch is not (a pass costs Eole about 0.5 s, 1-2% of it).
Eole's batch size (`batch_type: tokens` counts a batch's rows times its longest sequence) is set
by simulating Eole's batching on these pairs so that its batches hold on average as many target
tokens as the recipe's batches of 32 pairs; the table shows the average each side actually trained
on. Eole runs until its timed reports reach `--seconds`, then its process group is ended.

What differs and could not be made equal: padding (Eole sorts a whole pass by length and pads to
each batch's longest; the recipe sorts pools of batches, and on JAX pads to bucket edges, which keep
the compiled shapes few; the table gives each side's padded positions); Eole has a second dropout
inside the feed-forward block (after the ReLU) that keras_seq has not; Eole's attention on a CPU is
its own matmul-softmax-matmul; Eole skips a repeated source within a batch; the learning-rate
schedules differ (the recipe's warm-up and linear decay, Eole's noam peaking at the same 2e-3):
neither costs time. TensorFlow runs the recipe's `compile` default, which is not XLA for this model.

Memory: each keras_seq process keeps the memory a step frees for the next step
(`recipes.memory.keep_freed_memory`, as every recipe's process does; on JAX it also runs the step on the calling
thread); Eole runs with glibc's defaults, as its users run it. `MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=1073741824` in this script's environment gives Eole the same setting.

Threads: 2 on every side (`--threads`): OMP_NUM_THREADS for every process, TensorFlow's intra- and
inter-op pools (also tf.data's runtime on JAX and torch), `torch.set_num_threads`, and Eole's torch
through OMP_NUM_THREADS; XLA on JAX sizes its CPU pool by the cores it may use (run under
`taskset -c 0,1` on a larger machine).

    python3 benchmarks/bench_translate_train.py                      # 60 s timed per side, every backend
    python3 benchmarks/bench_translate_train.py --quick              # smoke test
    python3 benchmarks/bench_translate_train.py --seconds 120 --rounds 2 --backends tensorflow,jax

Eole needs its own virtualenv (`--eole-venv`, default /work/venvs/eole):
`python3 -m venv /work/venvs/eole && /work/venvs/eole/bin/pip install torch==2.13.0` (the CPU wheel
this machine keeps, as tox.ini does), then `/work/venvs/eole/bin/pip install eole==0.6.4 aiohttp
torch==2.13.0` (eole 0.6.4's command line imports aiohttp, which it does not declare).
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _timing

REPO = _timing.REPO
DEFAULT_EOLE_VENV = "/work/venvs/eole"
# Eole's report line: "Step 50/100000; acc: ...; bsz:   20/  24/ 1; 1234/ 1567 tok/s;   12 sec;"
EOLE_REPORT = re.compile(
    r"Step\s+(\d+)(?:/\s*\d+)?;.*?bsz:\s*([\d.]+)/\s*([\d.]+)/\s*([\d.]+);\s*([\d.]+)/\s*([\d.]+) tok/s;"
)
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # keras_seq's reserved ids 0-3, as SentencePiece names them


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, help="timed seconds per side, after warm-up (default 60; --quick: 8)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="runs of every side, in turn (Eole, tensorflow, jax, torch, Eole, ...); figures are medians over rounds",
    )
    p.add_argument("--backends", default=",".join(_timing.BACKENDS), help="Keras backends, comma-separated")
    p.add_argument("--no-eole", action="store_true", help="leave Eole out")
    p.add_argument("--threads", type=int, default=2, help="compute threads on every side")
    p.add_argument("--batch-size", type=int, default=32, help="the recipe's --batch-size (pairs per batch)")
    p.add_argument(
        "--warmup-steps", type=int, help="steps left untimed at the start of every side (default 50; --quick: 20)"
    )
    p.add_argument("--report-every", type=int, default=10, help="Eole's report_every (steps per logged figure)")
    p.add_argument(
        "--eole-workers",
        type=int,
        default=0,
        help="Eole's num_workers: 0 loads data in the training process, as keras_seq's tf.data does "
        "(Eole's default, 2, adds two DataLoader processes)",
    )
    p.add_argument("--eole-venv", default=DEFAULT_EOLE_VENV, help="virtualenv with eole (bin/eole, bin/python)")
    p.add_argument("--tox-dir", default=str(REPO / ".tox"), help="folder of the tox environments, one per backend")
    p.add_argument(
        "--work-dir", help="keep the prepared data, Eole's config and logs here (default: a temporary folder)"
    )
    p.add_argument("--records", metavar="FILE", help="also append every record to FILE (JSON lines)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: 8 s timed per side, 20 warm-up steps, Eole reporting every 5 steps",
    )
    # Internal: the per-process runs.
    p.add_argument("--prepare-run", metavar="DIR", help=argparse.SUPPRESS)
    p.add_argument("--backend-run", metavar="DIR", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.seconds is None:
        args.seconds = 8.0 if args.quick else 60.0
    if args.warmup_steps is None:
        args.warmup_steps = 20 if args.quick else 50
    if args.quick:
        args.report_every = min(args.report_every, 5)
    return args


# ---------------------------------------------------------------------------------------------------------------------
# The recipe's settings and data (run inside a backend's tox environment).


def recipe_args(batch_size):
    """`recipes.translate`'s parsed flags for `--model transformer --batch-size N`, with the model's defaults filled
    in."""
    from recipes import translate

    args = translate.parse(["--model", "transformer", "--batch-size", str(batch_size)])
    for flag, value in args.model_defaults[args.model].items():  # as common.check_arguments does
        if getattr(args, flag) is None:
            setattr(args, flag, value)
    args.vocab_size = translate.SUBWORD_SIZE
    return args


def recipe_pairs(recipe):
    """The recipe's training pairs, cleaned as its preparation cleans them."""
    from keras_seq.data import loaders
    from recipes import translate

    records, _, _ = translate.training_records(recipe)
    return loaders.clean_parallel(list(records()))[0]


def training_data(recipe, vocab):
    """The recipe's training ids: `(source, target, kept pairs, dropped count, longest)`."""
    import tensorflow as tf

    from recipes import translate

    train_pairs = recipe_pairs(recipe)
    source, target = translate.encoded(train_pairs, vocab)
    keep = tf.logical_and(source.row_lengths() <= recipe.max_length, target.row_lengths() <= recipe.max_length + 2)
    dropped = int(tf.reduce_sum(1 - tf.cast(keep, tf.int32)))
    source, target = tf.ragged.boolean_mask(source, keep), tf.ragged.boolean_mask(target, keep)
    kept = [pair for pair, k in zip(train_pairs, keep.numpy()) if k]
    longest = int(tf.maximum(tf.reduce_max(source.row_lengths()), tf.reduce_max(target.row_lengths())))
    return source, target, kept, dropped, longest


def epoch_batches(source, target, batch_size, longest, seed, epoch):
    """`((rows, padded width), target tokens, target positions)` of each batch of data epoch `epoch`, in order."""
    import numpy as np

    from keras_seq.data import pipeline
    from recipes import translate

    rows = []
    for _, labels in pipeline.padded_batches(
        {"source": source, "target": target}, batch_size, longest, translate.teacher_forcing, seed, epoch, epoch + 1
    ):
        labels = labels.numpy()
        rows.append((labels.shape, int(np.count_nonzero(labels)), int(labels.size)))
    return rows


def prepare_run(directory, batch_size, workers):
    """Train the recipe's joint SentencePiece model once; write it, the pairs as pieces and Eole's vocabulary."""
    directory = Path(directory)
    from recipes import translate

    recipe = recipe_args(batch_size)
    vocab = translate.build_vocabularies(recipe, recipe_pairs(recipe))
    subword = vocab["source"]
    subword.save(str(directory / "sentencepiece.model"))
    source, target, kept, dropped, longest = training_data(recipe, vocab)
    pieces = subword.tokens
    if tuple(pieces[:4]) != SPECIALS:
        raise SystemExit(f"bench_translate_train: expected the reserved pieces {SPECIALS} first, got {pieces[:4]}")
    if len(set(pieces)) != len(pieces) or any(any(c in p for c in " \t\n\r\x0b\x0c") or not p for p in pieces):
        raise SystemExit(
            "bench_translate_train: a SentencePiece piece is repeated, empty or holds ASCII white space: "
            "Eole could not read the pieces back as the same tokens"
        )
    (directory / "vocab.txt").write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
    source_rows = [[pieces[i] for i in row] for row in source.to_list()]
    target_rows = [[pieces[i] for i in row[1:-1]] for row in target.to_list()]  # Eole adds start and end itself
    for name, rows in (("train.src", source_rows), ("train.tgt", target_rows)):
        (directory / name).write_text("".join(" ".join(row) + "\n" for row in rows), encoding="utf-8")
    keras_rows = epoch_batches(source, target, batch_size, longest, recipe.seed, 0)
    keras_tokens = sum(r[1] for r in keras_rows) / len(keras_rows)
    eole_size, eole_stats = eole_batch_size(source_rows, target_rows, keras_tokens, workers)
    workers = max(1, workers)
    eole_stats["eole_bucket_size"] = max(
        sum(1 for i in range(len(source_rows)) if (i // workers) % workers == w) for w in range(workers)
    )
    _timing.emit(
        pairs=len(kept),
        dropped_long=dropped,
        vocabulary=len(subword),
        longest=longest,
        keras_batches_per_epoch=len(keras_rows),
        keras_target_tokens_per_batch=round(keras_tokens, 1),
        keras_target_positions_per_batch=round(sum(r[2] for r in keras_rows) / len(keras_rows), 1),
        eole_batch_size=eole_size,
        **eole_stats,
        source_tokens=sum(map(len, source_rows)),
        target_tokens=sum(len(r) + 1 for r in target_rows),
    )


# ---------------------------------------------------------------------------------------------------------------------
# Eole's batching, simulated (eole/inputters/dynamic_iterator.py, 0.6.4) to size its token batches.


def eole_batches(source_rows, target_rows, batch_tokens, workers):
    """Eole's training batches of one pass: `(rows, target labels, padded target positions)` per batch.

    Each DataLoader worker reads lines i with `(i // W) % W == worker` (W workers), sorts its bucket
    (one pass, `bucket_size` set so) by (source length, target length with start and end), and packs
    rows while rows * longest (source or target with start and end) stays within `batch_tokens`;
    a source already in the batch is skipped.
    """
    workers = max(1, workers)
    batches = []
    for worker in range(workers):
        lines = [i for i in range(len(source_rows)) if (i // workers) % workers == worker]
        examples = sorted(
            ((len(source_rows[i]), len(target_rows[i]) + 2, " ".join(source_rows[i])) for i in lines),
            key=lambda e: (e[0], e[1]),
        )
        batch, longest, seen = [], 0, set()

        def close(rows):
            width = max(e[1] for e in rows)
            batches.append((len(rows), sum(e[1] - 1 for e in rows), len(rows) * (width - 1)))

        for example in examples:
            if example[2] in seen:
                continue
            seen.add(example[2])
            batch.append(example)
            longest = max(longest, example[0], example[1])
            if len(batch) * longest >= batch_tokens:
                if len(batch) * longest == batch_tokens:
                    close(batch)
                    batch, longest, seen = [], 0, set()
                elif len(batch) > 1:
                    close(batch[:-1])
                    batch = batch[-1:]
                    longest = max(batch[0][0], batch[0][1])
                    seen = set()
        if batch:
            close(batch)
    return batches


def eole_batch_size(source_rows, target_rows, target_tokens, workers):
    """The token `batch_size` whose Eole batches hold on average closest to `target_tokens` target tokens."""

    def mean_tokens(size):
        batches = eole_batches(source_rows, target_rows, size, workers)
        return sum(b[1] for b in batches) / len(batches)

    low, high = int(target_tokens), int(target_tokens * 4)
    while high - low > 1:  # the mean grows with the size (up to the steps of whole rows)
        middle = (low + high) // 2
        low, high = (middle, high) if mean_tokens(middle) < target_tokens else (low, middle)
    best = min(range(max(1, low - 8), high + 9), key=lambda size: abs(mean_tokens(size) - target_tokens))
    batches = eole_batches(source_rows, target_rows, best, workers)
    return best, {
        "eole_batches_per_pass": len(batches),
        "eole_target_tokens_per_batch_simulated": round(sum(b[1] for b in batches) / len(batches), 1),
        "eole_target_positions_per_batch_simulated": round(sum(b[2] for b in batches) / len(batches), 1),
        "eole_rows_per_batch_simulated": round(sum(b[0] for b in batches) / len(batches), 1),
    }


# ---------------------------------------------------------------------------------------------------------------------
# keras_seq: one backend, inside its tox environment.


def backend_run(directory, args):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras

    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        torch.set_num_threads(args.threads)
    import keras_seq as ks
    from keras_seq.data import pipeline
    from keras_seq.data.subword import SubwordVocabulary
    from recipes import devices, memory, translate

    memory.keep_freed_memory()  # as every recipe's process does (recipes.common)

    recipe = recipe_args(args.batch_size)
    keras.utils.set_random_seed(recipe.seed)
    subword = SubwordVocabulary.load(os.path.join(directory, "sentencepiece.model"))
    vocab = {"source": subword, "target": subword}
    source, target, kept, _, longest = training_data(recipe, vocab)
    length = pipeline.bucket_edges(longest)[-1]
    model = translate.build_model(recipe, vocab, length, length)
    translate.compile_model(model, recipe)

    def batches(first_epoch, epochs, seed=recipe.seed):
        return pipeline.padded_batches(
            {"source": source, "target": target},
            recipe.batch_size,
            longest,
            translate.teacher_forcing,
            seed,
            first_epoch,
            epochs,
        )

    steps_per_epoch = pipeline.count_batches(batches(0, 1, seed=None))
    epochs = 1000  # stopped by the timer long before
    timer = _step_timer_class()(
        lambda epoch: epoch_batches(source, target, recipe.batch_size, longest, recipe.seed, epoch),
        args.seconds,
        args.warmup_steps,
    )
    budget = ks.training.TrainingBudget(seconds=10 * args.seconds + 3600)  # the rate schedule's clock only
    started = time.perf_counter()
    model.fit(
        devices.fed_batches(batches(0, epochs).repeat(), 0),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=[budget, ks.training.WarmupLinearDecay(budget, recipe.learning_rate, recipe.warmup), timer],
        shuffle=False,
        verbose=0,
    )
    if not timer.timed:
        raise SystemExit(f"bench_translate_train: no step timed in {timer.steps} steps (warm-up {args.warmup_steps})")
    seconds = sum(t for t, _, _ in timer.timed)
    tokens = sum(n for _, n, _ in timer.timed)
    _timing.emit(
        side="keras_seq",
        target_tokens_per_second=round(tokens / seconds, 1),
        timed_seconds=round(seconds, 2),
        timed_steps=len(timer.timed),
        untimed_steps=timer.steps - len(timer.timed),
        new_shape_steps=timer.compiled,
        ms_per_step=round(1000 * seconds / len(timer.timed), 2),
        median_ms_per_step=round(1000 * statistics.median(t for t, _, _ in timer.timed), 2),
        target_tokens_per_batch=round(tokens / len(timer.timed), 1),
        target_positions_per_batch=round(sum(p for _, _, p in timer.timed) / len(timer.timed), 1),
        pairs=len(kept),
        steps_per_epoch=steps_per_epoch,
        wall_seconds=round(time.perf_counter() - started, 1),
        jit_compile=bool(getattr(model, "jit_compile", False)),
        parameters=int(model.count_params()),
        median_ms_by_width={
            str(w): round(
                1000 * statistics.median(t for (t, _, _), (x, _) in zip(timer.timed, timer.widths) if x == w), 2
            )
            for w in sorted({w for w, _ in timer.widths})
        },
        slowest_steps=[
            [round(1000 * t, 1), w, step]
            for (t, _, _), (w, step) in sorted(zip(timer.timed, timer.widths), key=lambda pair: -pair[0][0])[:3]
        ],
        versions=_timing.versions(("keras", "tensorflow", "jax", "torch")),
    )


def _step_timer_class():
    """The timing callback (a function, so that the driver never imports Keras)."""
    import keras

    class StepTimer(keras.callbacks.Callback):
        """Times `fit`'s steps from one step's end to the next; stops `fit` once `seconds` are timed."""

        def __init__(self, epoch_batches, seconds, warmup_steps):
            super().__init__()
            self.epoch_batches, self.seconds, self.warmup_steps = epoch_batches, seconds, warmup_steps
            self.timed, self.seen, self.steps, self.last, self.epoch, self.rows = [], set(), 0, None, 0, []
            self.widths = []  # (padded target width, step number) of each timed step
            self.compiled = 0  # untimed steps of a shape not seen before

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            self.rows = self.epoch_batches(epoch)
            self.last = None  # the first step's interval would hold the epoch's end and start

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()  # the logs are Python numbers here: the step has finished
            self.steps += 1
            shape, tokens, positions = self.rows[batch]
            if shape not in self.seen:  # compiled in this step (XLA on JAX; a new trace on TensorFlow)
                self.seen.add(shape)
                self.compiled += 1
            elif self.last is not None and self.steps > self.warmup_steps:
                self.timed.append((now - self.last, tokens, positions))
                self.widths.append((shape[1], self.steps))
                if sum(t for t, _, _ in self.timed) >= self.seconds:
                    self.model.stop_training = True
            self.last = now

    return StepTimer


# ---------------------------------------------------------------------------------------------------------------------
# The driver.


def environment(threads):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("KERAS_BACKEND", None)
    return env


def run_json(command, env, label):
    """Run `command`; its JSON lines on stdout, or a note with its last stderr line."""
    process = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    records = [json.loads(line) for line in process.stdout.splitlines() if line.startswith("{")]
    if process.returncode or not records:
        sys.stderr.write(process.stderr[-4000:])
        last = (process.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"{label}: failed (exit {process.returncode}): {last[:300]}"
    return records[-1], None


def tox_python(args, backend):
    return str(Path(args.tox_dir) / backend / "bin" / "python")


def prepare(args, directory):
    print("preparing the data and the SentencePiece model (tensorflow environment) ...", file=sys.stderr, flush=True)
    command = [
        tox_python(args, "tensorflow"),
        __file__,
        "--prepare-run",
        str(directory),
        "--batch-size",
        str(args.batch_size),
        "--eole-workers",
        str(args.eole_workers),
    ]
    env = {**environment(args.threads), "KERAS_BACKEND": "tensorflow"}
    record, note = run_json(command, env, "prepare")
    if record is None:
        raise SystemExit(f"bench_translate_train: {note}")
    return record


def keras_side(args, directory, backend):
    print(f"keras_seq, {backend} backend ...", file=sys.stderr, flush=True)
    command = [
        tox_python(args, backend),
        __file__,
        "--backend-run",
        str(directory),
        "--seconds",
        str(args.seconds),
        "--threads",
        str(args.threads),
        "--batch-size",
        str(args.batch_size),
        "--warmup-steps",
        str(args.warmup_steps),
    ]
    record, note = run_json(command, {**environment(args.threads), "KERAS_BACKEND": backend}, f"keras_seq {backend}")
    return ({"backend": backend, **record} if record else None), note


def eole_config(args, directory, prepared, round_index):
    """Eole's YAML (JSON is YAML) for the same model, data and batch, as a dict."""
    warmup = 200
    peak = 2e-3  # the recipe's peak rate, reached by the noam schedule at `warmup` steps
    return {
        "save_data": str(directory / "eole"),
        "overwrite": True,
        "seed": round_index,
        "src_vocab": str(directory / "vocab.txt"),
        "tgt_vocab": str(directory / "vocab.txt"),
        "share_vocab": True,
        "src_vocab_size": prepared["vocabulary"],
        "tgt_vocab_size": prepared["vocabulary"],
        "vocab_size_multiple": 1,
        "src_words_min_frequency": 0,
        "tgt_words_min_frequency": 0,
        "pad_token": "<pad>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "decoder_start_token": "<s>",
        "data": {"corpus_1": {"path_src": str(directory / "train.src"), "path_tgt": str(directory / "train.tgt")}},
        "skip_empty_level": "silent",
        "report_every": args.report_every,
        "tensorboard": False,
        "model": {
            "architecture": "transformer",
            "hidden_size": 128,
            "layers": 2,
            "heads": 4,
            "transformer_ff": 256,
            "mlp_activation_fn": "relu",
            "layer_norm": "standard",
            "norm_eps": 1e-5,
            "add_qkvbias": True,
            "add_final_linear_bias": True,
            "add_ffnbias": True,
            "generator_bias": True,
            "share_embeddings": True,
            "share_decoder_embeddings": True,
            "embeddings": {"word_vec_size": 128, "position_encoding_type": "SinusoidalInterleaved"},
        },
        "training": {
            "model_path": str(directory / "eole_model"),
            "train_steps": 1_000_000,
            "save_checkpoint_steps": 1_000_000,
            "valid_steps": 1_000_000,
            "world_size": 1,
            "gpu_ranks": [],
            "num_workers": args.eole_workers,
            "batch_type": "tokens",
            "batch_size": prepared["eole_batch_size"],
            "batch_size_multiple": 1,
            "bucket_size": prepared["eole_bucket_size"],  # one pass over a worker's lines per bucket
            "normalization": "tokens",
            "accum_count": [1],
            "accum_steps": [0],
            "optim": "adam",
            "adam_beta1": 0.9,
            "adam_beta2": 0.98,
            "adam_eps": 1e-9,
            "max_grad_norm": 0.0,
            "learning_rate": peak / (128**-0.5 * warmup**-0.5),
            "decay_method": "noam",
            "warmup_steps": warmup,
            "label_smoothing": 0.1,
            "dropout": [0.1],
            "attention_dropout": [0.1],
            "dropout_steps": [0],
            "param_init_method": "xavier_uniform",
            "param_init": 0.0,
            "compute_dtype": "fp32",
            "self_attn_backend": "pytorch",
            "log_attention_entropy": False,
        },
    }


def eole_side(args, directory, prepared, round_index):
    print("Eole ...", file=sys.stderr, flush=True)
    venv = Path(args.eole_venv)
    config_path = directory / f"eole_config_{round_index}.yaml"
    config_path.write_text(json.dumps(eole_config(args, directory, prepared, round_index), indent=1))
    log_path = directory / f"eole_{round_index}.log"
    env = environment(args.threads)
    env.pop("PYTHONPATH", None)
    env["PYTHONWARNINGS"] = "ignore"
    command = [str(venv / "bin" / "eole"), "train", "--config", str(config_path)]
    reports, timed, started, new_pass = [], [], time.monotonic(), False
    deadline = started + 600 + 20 * args.seconds  # a run whose reports never come is ended
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            env=env,
            cwd=directory,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )  # its own process group: it and its loaders
        try:
            for line in process.stdout:
                log.write(line)
                if "Weighted corpora loaded" in line:  # a new pass: Eole reads, splits and sorts it (~0.5 s)
                    new_pass = True
                match = EOLE_REPORT.search(line)
                if match:
                    step, src_bsz, tgt_bsz, rows, src_rate, tgt_rate = map(float, match.groups())
                    reports.append(
                        dict(
                            step=int(step),
                            source_per_batch=src_bsz,
                            target_per_batch=tgt_bsz,
                            rows_per_batch=rows,
                            source_per_second=src_rate,
                            target_per_second=tgt_rate,
                        )
                    )
                    loaded, new_pass = new_pass, False
                    if step > args.warmup_steps and tgt_rate > 0 and not loaded:
                        timed.append(reports[-1])
                        if (
                            sum(r["target_per_batch"] * args.report_every / r["target_per_second"] for r in timed)
                            >= args.seconds
                        ):
                            break
                if time.monotonic() > deadline:
                    break
        finally:
            _end_group(process)
    versions = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in ('eole', 'torch')))",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not timed:
        tail = log_path.read_text().strip().splitlines()[-3:] if log_path.exists() else []
        return None, f"Eole: no timed report (log {log_path}): {' | '.join(tail)[:400]}"
    tokens = sum(r["target_per_batch"] * args.report_every for r in timed)
    seconds = sum(r["target_per_batch"] * args.report_every / r["target_per_second"] for r in timed)
    steps = len(timed) * args.report_every
    return {
        "side": "Eole",
        "backend": "torch (Eole)",
        "target_tokens_per_second": round(tokens / seconds, 1),
        "timed_seconds": round(seconds, 2),
        "timed_steps": steps,
        "untimed_steps": reports[-1]["step"] - steps,
        "ms_per_step": round(1000 * seconds / steps, 2),
        "median_ms_per_step": round(
            1000 * statistics.median(r["target_per_batch"] / r["target_per_second"] for r in timed), 2
        ),
        "target_tokens_per_batch": round(tokens / steps, 1),
        "rows_per_batch": round(sum(r["rows_per_batch"] for r in timed) / len(timed), 1),
        "source_tokens_per_batch": round(sum(r["source_per_batch"] for r in timed) / len(timed), 1),
        "eole_batch_size_tokens": prepared["eole_batch_size"],
        "wall_seconds": round(time.monotonic() - started, 1),
        "versions": versions,
    }, None


def _end_group(process):
    """End the process group this script started for Eole (its trainer and DataLoader workers)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
    if process.stdout:
        process.stdout.close()


def main():
    args = parse()
    if args.prepare_run:
        return prepare_run(args.prepare_run, args.batch_size, args.eole_workers)
    if args.backend_run:
        return backend_run(args.backend_run, args)
    backends = [b for b in args.backends.split(",") if b]
    with tempfile.TemporaryDirectory(prefix="bench_translate_train-") as scratch:
        directory = Path(args.work_dir or scratch).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        prepared = prepare(args, directory)
        _timing.emit(kind="prepared", **prepared)
        records, notes = [], []
        for round_index in range(args.rounds):
            sides = [] if args.no_eole else [("eole", None)]
            sides += [("keras", backend) for backend in backends]
            for kind, backend in sides:
                if kind == "eole":
                    record, note = eole_side(args, directory, prepared, round_index)
                else:
                    record, note = keras_side(args, directory, backend)
                if note:
                    notes.append(note)
                    print(note, file=sys.stderr, flush=True)
                if record:
                    record["round"] = round_index
                    records.append(record)
                    _timing.emit(**record)
                    if args.records:
                        with open(args.records, "a") as file:
                            file.write(json.dumps(record) + "\n")
    report(args, prepared, records, notes)


def report(args, prepared, records, notes):
    """The settings, then one Markdown row per side: medians over the rounds."""
    by_side = {}
    for record in records:
        by_side.setdefault((record["side"], record["backend"]), []).append(record)

    def median(key, rows):
        values = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(values) if values else None

    def positions(rows):  # Eole logs no padded positions: the simulated pass's figure
        value = median("target_positions_per_batch", rows)
        return f"{value:.0f}" if value else f"{prepared['eole_target_positions_per_batch_simulated']:.0f} (simulated)"

    eole = next((rows for (side, _), rows in by_side.items() if side == "Eole"), None)
    eole_rate = median("target_tokens_per_second", eole) if eole else None
    table = []
    for (side, backend), rows in by_side.items():
        rate = median("target_tokens_per_second", rows)
        ratio = f"{rate / eole_rate:.2f}" if rate and eole_rate else "-"
        table.append(
            [
                side,
                backend,
                f"{rate:,.0f}",
                ratio,
                f"{median('ms_per_step', rows):.1f}",
                f"{median('target_tokens_per_batch', rows):.0f}",
                positions(rows),
                f"{median('timed_steps', rows):.0f}",
            ]
        )
    keras_versions = sorted(
        {
            item
            for r in records
            if r["side"] == "keras_seq"
            for item in r["versions"].split(", ")
            if "not installed" not in item
        }
    )
    eole_versions = sorted({r["versions"] for r in records if r["side"] == "Eole"})
    jit = sorted({f"{r['backend']} {'on' if r['jit_compile'] else 'off'}" for r in records if r["side"] == "keras_seq"})
    print()
    print(
        f"{_timing.utc_now()}, commit {_timing.git_commit()}, {_timing.cpu_name()}, {os.cpu_count()} cores; CPU, "
        f"float32; {args.threads} threads a side; {args.seconds:g} s timed per side after {args.warmup_steps} warm-up "
        f"steps; {args.rounds} round(s), medians over rounds."
    )
    print(
        f"Versions: keras_seq side {', '.join(keras_versions) or '-'} (the tox environments); Eole side "
        f"{'; '.join(eole_versions) or '-'}. jit_compile (the recipe's `compile` default): {', '.join(jit) or '-'}."
    )
    print(
        f"Data: software_en_fr train, {prepared['pairs']} pairs ({prepared['dropped_long']} over 64 tokens left out), "
        f"one joint SentencePiece model of {prepared['vocabulary']} pieces, the same pieces on both sides; "
        f"{prepared['target_tokens']} target tokens a pass (end ids included)."
    )
    print(
        "Model: 2+2 pre-norm blocks, width 128, 4 heads, FFN 256 (ReLU), sinusoidal positions, dropout 0.1, "
        "three-way tied embeddings; Adam (beta_2 0.98, eps 1e-9), label smoothing 0.1."
    )
    print(
        f"Batches: keras_seq, the recipe's {args.batch_size} pairs from pools sorted by length "
        f"({prepared['keras_target_tokens_per_batch']:.0f} target tokens in "
        f"{prepared['keras_target_positions_per_batch']:.0f} padded positions a batch over an epoch, padded to "
        f"each batch's longest; on JAX to bucket edges); Eole, "
        f"batch_type tokens, batch_size {prepared['eole_batch_size']} "
        f"({prepared['eole_target_tokens_per_batch_simulated']:.0f} target tokens in "
        f"{prepared['eole_target_positions_per_batch_simulated']:.0f} padded positions a batch over a pass, "
        f"simulated), "
        f"{args.eole_workers} DataLoader workers; its figure: the TGT tok/s of its reports every "
        f"{args.report_every} steps."
    )
    print()
    header = [
        "side",
        "backend",
        "target tokens/s",
        "ratio to Eole",
        "ms/step",
        "target tokens/batch",
        "padded target positions/batch",
        "timed steps",
    ]
    print("\n".join(_timing.markdown_table(header, table, right_aligned=range(2, 8))))
    for note in notes:
        print(f"\nNote: {note}")


if __name__ == "__main__":
    main()

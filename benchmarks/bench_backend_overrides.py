"""What each override of the running backend (`keras_seq.backend`) buys on the translate recipe's step and decoding.

For the Keras backend this process runs (KERAS_BACKEND), every override that the backend's module
(`keras_seq/backend/{tensorflow,jax,torch}.py`) defines itself is timed in one process under three kinds of
setting: all overrides on (as keras_seq runs), that one override replaced by its plain path
(`keras_seq.backend.common`, by `setattr(keras_seq.backend, name, getattr(common, name))`; callers read
`backend.<name>` at call time), and all overrides off. Timed:

* the training step of `recipes.translate`'s default model (`rnn-attention`) and of `--model transformer`, as
  `model.fit` runs it: the recipe's own model, compile and batches (`build_model`, `compile_model`,
  `teacher_forcing`, `keras_seq.data.pipeline.padded_batches`, `recipes.devices.fed_batches`, the recipe's
  `TrainingBudget` and `WarmupLinearDecay` callbacks), built as benchmarks/bench_translate_train.py builds them
  (its helpers: the recipe's flags, data and joint SentencePiece model, and its step timer: a step runs from the
  end of the step before to the end of this one). `compile` is the recipe's: `jit_compile="auto"`, i.e. XLA by
  `jax.jit` on JAX, a `tf.function` graph without XLA on a CPU for TensorFlow, eager torch;
* the recipe's decoding for the default model (`--decode-model`: another): greedy (`translate.greedy_translations`,
  its validation decoding) and beam search (`model.generate` with the recipe's `--num-beams`, `--length-penalty`,
  `--early-stopping`), on the first `translate.DECODE_BATCH` sentences that the recipe validates on (its valid
  split), padded as the recipe pads them. Figures are ms per call (one batch of sentences). Decoding overrides of
  the Transformer's attention are called only with `--decode-model transformer`.

Each setting gets its own models, built, compiled and warmed up (every batch shape, the decoders) while the
setting holds, so that programs traced by `jax.jit` or `tf.function` hold that setting's code; every model of a
kind starts from the same weights (so the decoders run the same steps). The decoding model is not trained: its
sentences mostly run to the length limit, which times the decoding loop per token rather than typical lengths.

Batches: epoch 0 of the recipe's shuffled order; the timed ones are the first `--steps` + 1 batches whose shape
is among the `--shapes` that hold most of the epoch's padded target positions (each shape is compiled once per
setting on JAX, which is where a benchmark's minutes go; the first batch of each `fit` is not timed). They are
read once per setting (a setting may pad them otherwise: `compiles_each_input_shape`) and fed from memory
through `tf.data`. The warm-up (tracing, compilation) is not timed; its seconds are in the JSON.

Timing: rounds; in each, every setting runs its `fit` over the timed batches and its decoding once, in one order,
reversed every other round (A B .. B A) so that a drift in the machine's load falls alike on every setting.
A round's figure is its mean ms per step; the table gives the median over rounds, and the change is the median
over rounds of (setting / all on) - 1: positive means the step is slower without the override (what it buys).
Verdict: keep where the change is >= 3% on a timed path, else drop candidate; "not called" where the
recipe's step and decoding never call the override (counted while the all-on setting is built and warmed up:
trace-time calls for traced programs), so those settings are not timed. A verdict speaks for speed on this
recipe only, not for other recipes or for what an override is needed for (`run_programs_on_calling_thread` is
applied once at process start, by `recipes.memory.keep_freed_memory`, and cannot be switched here).

    KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=3 .tox/tensorflow/bin/python benchmarks/bench_backend_overrides.py
    KERAS_BACKEND=jax .tox/jax/bin/python benchmarks/bench_backend_overrides.py --json overrides_jax.json
    KERAS_BACKEND=torch .tox/torch/bin/python benchmarks/bench_backend_overrides.py --steps 5 --rounds 1  # trial

The command, by a tox environment's Python with KERAS_BACKEND set:
`.tox/tensorflow/bin/python benchmarks/bench_backend_overrides.py`.
"""

import argparse
import functools
import json
import math
import os
import statistics
import sys
import time

import _timing
import bench_translate_train as translate_bench

KEEP_PERCENT = 3.0  # a change of at least this share of the step (or of the decoding) keeps an override
DEFAULT_MODELS = "rnn-attention,transformer"  # the recipe's default model, then the Transformer


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="timed training steps per setting and round (default 20)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of every setting in turn; figures are medians")
    p.add_argument("--batch-size", type=int, default=32, help="the recipe's --batch-size (pairs per batch)")
    p.add_argument(
        "--shapes",
        type=int,
        default=2,
        help="the timed batches have the epoch's N most common shapes (each is compiled per setting)",
    )
    p.add_argument(
        "--models",
        default=DEFAULT_MODELS,
        help=f"the recipe's models whose training step is timed, comma-separated (default {DEFAULT_MODELS})",
    )
    p.add_argument("--skip-decoding", action="store_true", help="time the training steps only")
    p.add_argument("--decode-model", help="the recipe's model that decodes (default: its default model, rnn-attention)")
    p.add_argument("--overrides", help="only these overrides, comma-separated (default: every one the backend defines)")
    p.add_argument("--json", metavar="PATH", help="write the settings, figures and call counts as JSON")
    args = p.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    if args.steps < 1 or args.rounds < 1 or args.shapes < 1:
        p.error("--steps, --rounds and --shapes expected >= 1")
    return args


# ---------------------------------------------------------------------------------------------------------------------
# The overrides and the settings.


def backend_overrides():
    """Names in `backend.OPERATIONS` that the running backend's module defines itself, in that order."""
    from keras_seq import backend

    module = backend.OVERRIDES
    if module is backend.common:
        return []
    own = vars(module)
    return [
        name for name in backend.OPERATIONS if name in own and getattr(own[name], "__module__", None) == module.__name__
    ]


class Switch:
    """Sets `keras_seq.backend`'s names to the overrides or to the plain path; counts calls while asked."""

    def __init__(self, names):
        from keras_seq import backend

        self.backend, self.names = backend, list(names)
        self.overrides = {name: getattr(backend, name) for name in self.names}  # bound at import: the overrides
        self.plain = {name: getattr(backend.common, name) for name in self.names}

    def apply(self, off=(), counts=None):
        """Overrides on but those in `off`; with `counts` (a dict), each call of an override adds 1 to its name."""
        for name in self.names:
            function = self.plain[name] if name in off else self.overrides[name]
            if counts is not None and name not in off:
                function = _counted(function, name, counts)
            setattr(self.backend, name, function)

    def all_on(self):
        self.apply(())


def _counted(function, name, counts):
    @functools.wraps(function)
    def counted(*args, **kwargs):
        counts[name] = counts.get(name, 0) + 1
        return function(*args, **kwargs)

    return counted


def settings_of(names):
    """`[(label, names off)]`: all on, each override off alone, all off."""
    return (
        [("all on", frozenset())] + [(f"without {n}", frozenset([n])) for n in names] + [("all off", frozenset(names))]
    )


# ---------------------------------------------------------------------------------------------------------------------
# The recipe's pieces.


def recipe_for(model, batch_size):
    """`recipes.translate`'s flags for `--model model`: bench_translate_train's, with that model's defaults."""
    recipe = translate_bench.recipe_args(batch_size)  # --model transformer, its defaults filled in
    recipe.model = model
    recipe.__dict__.update(recipe.model_defaults[model])  # every flag that depends on the model (none given)
    return recipe


def chosen_batches(rows, shapes, count):
    """Indices (in epoch order) of the first `count` batches of the epoch whose shape is among the `shapes` that
    hold most of its padded target positions (where its training time goes)."""
    positions = {}
    for shape, _, size in rows:
        positions[shape] = positions.get(shape, 0) + size
    common_shapes = set(sorted(positions, key=lambda s: (-positions[s], s))[:shapes])
    return [i for i, (shape, _, _) in enumerate(rows) if shape in common_shapes][:count]


def read_batches(source, target, recipe, longest, indices):
    """The recipe's batches at `indices` of epoch 0, padded as the current setting pads them, as NumPy."""
    import keras
    import numpy as np

    from keras_seq.data import pipeline
    from recipes import translate

    wanted, kept = set(indices), {}
    data = pipeline.padded_batches(
        {"source": source, "target": target}, recipe.batch_size, longest, translate.teacher_forcing, recipe.seed, 0, 1
    )
    for index, batch in enumerate(data):
        if index in wanted:
            kept[index] = keras.tree.map_structure(lambda t: np.asarray(t), batch)
        if len(kept) == len(wanted):
            break
    return [kept[i] for i in indices]


def fed_dataset(batches):
    """`batches` (in memory) as a `tf.data` pipeline fed to `fit` as the recipe feeds its own."""
    import tensorflow as tf

    from keras_seq import backend
    from recipes import devices

    signature = tf.nest.map_structure(lambda a: tf.TensorSpec((None,) * a.ndim, a.dtype), batches[0])
    data = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)
    return devices.fed_batches(data.prefetch(2).with_options(backend.tf_data_without_autotuning()), 0)


class Trainer:
    """One model of one setting: `fit` over the timed batches, each call's mean seconds per timed step."""

    def __init__(self, recipe, vocab, length, batches, reference=None):
        import numpy as np

        import keras_seq as ks
        from recipes import translate

        self.model = translate.build_model(recipe, vocab, length, length)
        translate.compile_model(self.model, recipe)
        if reference is not None:
            self.model.set_weights(reference.get_weights())
        self.batches, self.data = batches, fed_dataset(batches)
        rows = [(b[1].shape, int(np.count_nonzero(b[1])), int(b[1].size)) for b in batches]
        self.timer = translate_bench._step_timer_class()(lambda epoch: rows, math.inf, 0)
        self.budget = ks.training.TrainingBudget(seconds=1e9)  # the rate schedule's clock only
        self.callbacks = [
            self.budget,
            ks.training.WarmupLinearDecay(self.budget, recipe.learning_rate, recipe.warmup),
            self.timer,
        ]

    def fit(self):
        """One `fit` over the batches; the mean seconds of its timed steps (all but the first)."""
        before = len(self.timer.timed)
        self.model.fit(
            self.data, epochs=1, steps_per_epoch=len(self.batches), callbacks=self.callbacks, shuffle=False, verbose=0
        )
        timed = [t for t, _, _ in self.timer.timed[before:]]
        if not timed:
            raise SystemExit("bench_backend_overrides: no step timed (need at least 2 batches)")
        return sum(timed) / len(timed), timed


class Decoder:
    """The default model of one setting decoding the recipe's valid sentences: greedy and beam search."""

    def __init__(self, recipe, vocab, length, sources, reference=None):
        from recipes import translate

        self.recipe, self.vocab, self.length, self.sources = recipe, vocab, length, sources
        self.model = translate.build_model(recipe, vocab, length, length)
        if reference is not None:
            self.model.set_weights(reference.get_weights())
        ids = vocab["source"].encode(sources)[:, :length].to_tensor(shape=[None, length]).numpy()
        self.ids = ids

    def greedy(self):
        from recipes import translate

        started = time.perf_counter()
        translate.greedy_translations(self.model, self.vocab, self.sources, self.length)
        return time.perf_counter() - started

    def beam(self):
        import keras

        from keras_seq.data import text

        started = time.perf_counter()
        ids = self.model.generate(
            self.ids,
            max_length=self.length,
            strategy="beam",
            num_beams=self.recipe.num_beams,
            length_penalty=self.recipe.length_penalty,
            early_stopping=self.recipe.early_stopping,
            end_id=text.END,
            start_id=text.START,
        )
        keras.ops.convert_to_numpy(ids)
        return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------------------------------
# The run.


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main():
    args = parse()
    import keras

    from keras_seq import backend
    from keras_seq.data import pipeline
    from recipes import memory, translate

    memory.keep_freed_memory()  # as every recipe's process does (recipes.common)
    started = time.perf_counter()
    names = backend_overrides()
    if args.overrides:
        asked = [n for n in args.overrides.split(",") if n]
        unknown = sorted(set(asked) - set(names))
        if unknown:
            raise SystemExit(f"bench_backend_overrides: {backend.NAME} defines no override {unknown}; it has {names}")
        names = [n for n in names if n in asked]
    switch = Switch(names)
    settings = settings_of(names) if names else [("all on", frozenset())]
    log(f"{backend.NAME}: {len(names)} overrides: {', '.join(names) or 'none'}")

    recipes = {model: recipe_for(model, args.batch_size) for model in args.models}
    default_model = translate.parse([]).model
    decode_recipe = recipe_for(args.decode_model or default_model, args.batch_size)
    keras.utils.set_random_seed(decode_recipe.seed)
    vocab = translate.build_vocabularies(decode_recipe, translate_bench.recipe_pairs(decode_recipe))
    source, target, kept, _, longest = translate_bench.training_data(decode_recipe, vocab)
    length = pipeline.bucket_edges(longest)[-1]
    rows = translate_bench.epoch_batches(source, target, args.batch_size, longest, decode_recipe.seed, 0)
    indices = chosen_batches(rows, args.shapes, args.steps + 1)
    valid_pairs = translate.training_records(decode_recipe)[2]
    chosen = valid_pairs[:: max(1, len(valid_pairs) // decode_recipe.validate_sentences)]
    sources = [s for s, _ in chosen[: decode_recipe.validate_sentences]][: translate.DECODE_BATCH]
    log(
        f"data: {len(kept)} pairs, model length {length}, timed batches {indices} "
        f"(shapes {sorted({rows[i][0] for i in indices})}), {len(sources)} valid sentences to decode"
    )

    paths = [f"train {m}" for m in args.models] + ([] if args.skip_decoding else ["decode greedy", "decode beam"])
    counts = {path: {} for path in paths}
    jobs = {}  # (setting label, path) -> zero-argument callable timing one run: (seconds, per-step seconds or None)
    warmup_seconds, references, errors = {}, {}, {}
    for label, off in settings:
        if label == "all on":
            called = None
        else:  # only the paths that call an override switched off differ from all on
            called = [p for p in paths if off & set(counts[p])]
            if not called:
                continue
        log(f"setting up '{label}'")
        data_counts = {}
        switch.apply(off, data_counts if called is None else None)
        batches = None
        if any(called is None or f"train {m}" in called for m in args.models):
            batches = read_batches(source, target, recipes[args.models[0]], longest, indices)
        for model in args.models:
            path = f"train {model}"
            if called is not None and path not in called:
                continue
            switch.apply(off, counts[path] if called is None else None)

            def set_up_training(model=model):
                trainer = Trainer(recipes[model], vocab, length, batches, references.get(model))
                references.setdefault(model, trainer.model)
                trainer.fit()  # every shape traced or compiled
                return _fit_job(trainer)

            set_up(jobs, warmup_seconds, errors, label, path, set_up_training)
            for name, count in data_counts.items():
                counts[path][name] = counts[path].get(name, 0) + count
        decode_paths = [p for p in paths if p.startswith("decode") and (called is None or p in called)]
        decoder = None
        for path in decode_paths:
            switch.apply(off, counts[path] if called is None else None)

            def set_up_decoding(path=path):
                nonlocal decoder
                if decoder is None:
                    decoder = Decoder(decode_recipe, vocab, length, sources, references.get("decoder"))
                    references.setdefault("decoder", decoder.model)
                run = decoder.greedy if path == "decode greedy" else decoder.beam
                run()  # traced or compiled
                return _decode_job(run)

            set_up(jobs, warmup_seconds, errors, label, path, set_up_decoding)
        switch.all_on()

    order = [label for label, _ in settings]
    offs = dict(settings)
    times = {key: [] for key in jobs}  # per round: seconds per step (training) or per call (decoding)
    step_times = {key: [] for key in jobs}
    for round_index in range(args.rounds):
        log(f"round {round_index + 1} of {args.rounds}")
        for label in order if round_index % 2 == 0 else order[::-1]:
            for path in paths:
                if (label, path) not in jobs:
                    continue
                switch.apply(offs[label])
                try:
                    seconds, steps = jobs[(label, path)]()
                except Exception as error:  # one setting that fails must not hide the others
                    if label == "all on":
                        raise
                    errors[(label, path)] = _timing.first_line(error)
                    log(f"'{label}', {path}: failed: {errors[(label, path)]}")
                    del jobs[(label, path)], times[(label, path)]
                    continue
                times[(label, path)].append(seconds)
                step_times[(label, path)] += steps or []
            switch.all_on()

    results = summarize(names, paths, counts, times, errors)
    record = {
        "backend": backend.NAME,
        "utc": _timing.utc_now(),
        "commit": _timing.git_commit(),
        "cpu": f"{_timing.cpu_name()}, {os.cpu_count()} cores",
        "device": _timing.device(),
        "versions": _timing.versions(("keras", "tensorflow", "jax", "torch")),
        "steps": args.steps,
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "shapes": args.shapes,
        "models": args.models,
        "default_model": default_model,
        "decode_model": decode_recipe.model,
        "overrides": names,
        "timed_batches": indices,
        "batch_shapes": [list(rows[i][0]) for i in indices],
        "decoded_sentences": 0 if args.skip_decoding else len(sources),
        "model_length": length,
        "jit_compile": {m: _jit_compile(jobs, m) for m in args.models},
        "calls_while_built_and_warmed_up": counts,
        "ms": {f"{label} | {path}": [round(1000 * s, 3) for s in seconds] for (label, path), seconds in times.items()},
        "median_ms_per_step_pooled": {
            f"{label} | {path}": round(1000 * statistics.median(s), 3) for (label, path), s in step_times.items() if s
        },
        "warmup_seconds": {f"{label} | {path}": round(s, 2) for (label, path), s in warmup_seconds.items()},
        "errors": {f"{label} | {path}": error for (label, path), error in errors.items()},
        "results": results,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    report(args, record, paths)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(record, file, indent=1)
        log(f"wrote {args.json}")


def set_up(jobs, warmup_seconds, errors, label, path, make):
    """`jobs[(label, path)] = make()` (which builds and warms up), timed; a failure other than all on's is noted."""
    begun = time.perf_counter()
    try:
        jobs[(label, path)] = make()
    except Exception as error:
        if label == "all on":
            raise
        errors[(label, path)] = _timing.first_line(error)
        log(f"'{label}', {path}: failed: {errors[(label, path)]}")
        return
    warmup_seconds[(label, path)] = time.perf_counter() - begun
    log(f"'{label}', {path}: set up and warmed up in {warmup_seconds[(label, path)]:.0f} s")


def _fit_job(trainer):
    def job():
        return trainer.fit()

    job.trainer = trainer
    return job


def _decode_job(run):
    return lambda: (run(), None)


def _jit_compile(jobs, model):
    job = jobs.get(("all on", f"train {model}"))
    return None if job is None else str(getattr(job.trainer.model, "jit_compile", None))


def summarize(names, paths, counts, times, errors):
    """Per setting and path: median ms over rounds and the change against all on (median of paired ratios)."""
    base = {path: times.get(("all on", path)) for path in paths}
    results = []
    for label, off in settings_of(names) if names else [("all on", frozenset())]:
        row = {"setting": label, "off": sorted(off), "paths": {}}
        for path in paths:
            seconds = times.get((label, path))
            if (label, path) in errors:
                row["paths"][path] = {"called": True, "error": errors[(label, path)]}
                continue
            if seconds is None:
                row["paths"][path] = {"called": False}
                continue
            cell = {"called": True, "median_ms": round(1000 * statistics.median(seconds), 3)}
            if label != "all on" and base[path]:
                ratios = [s / b for s, b in zip(seconds, base[path])]
                cell["change_percent"] = round(100 * (statistics.median(ratios) - 1), 2)
            row["paths"][path] = cell
        changes = [c["change_percent"] for c in row["paths"].values() if "change_percent" in c]
        if label in ("all on", "all off"):
            row["verdict"] = "-"
        elif not any(c["called"] for c in row["paths"].values()):
            row["verdict"] = "not called"
        elif not changes:
            row["verdict"] = "failed"
        else:
            row["verdict"] = "keep" if max(changes) >= KEEP_PERCENT else "drop candidate"
        results.append(row)
    return results


def report(args, record, paths):
    def cell(result, path):
        value = result["paths"].get(path)
        if value is None:
            return "-"
        if not value["called"]:
            return "not called"
        if "error" in value:
            return "failed"
        change = value.get("change_percent")
        return f"{value['median_ms']:.1f} ms" + ("" if change is None else f" ({change:+.1f}%)")

    train_paths = [p for p in paths if p.startswith("train")]
    header = ["override"] + [
        f"training step, {p[6:]}" + (" (default model)" if p[6:] == record["default_model"] else "")
        for p in train_paths
    ]
    if not args.skip_decoding:
        header.append(f"decoding, {record['decode_model']} (greedy; beam)")
    header.append("verdict")
    table = []
    for result in record["results"]:
        name = result["setting"].removeprefix("without ")
        row = [f"`{name}`" if result["setting"].startswith("without ") else f"({result['setting']})"]
        row += [cell(result, p) for p in train_paths]
        if not args.skip_decoding:
            row.append(f"{cell(result, 'decode greedy')}; {cell(result, 'decode beam')}")
        row.append(result["verdict"])
        table.append(row)
    print()
    print(
        f"{record['utc']}, commit {record['commit']}, {record['cpu']}; backend {record['backend']} "
        f"(jit_compile: {', '.join(f'{m} {v}' for m, v in record['jit_compile'].items()) or '-'}); "
        f"{record['steps']} timed steps of batch {record['batch_size']} (shapes "
        f"{sorted(set(map(tuple, record['batch_shapes'])))}) per setting and round, {record['rounds']} round(s); "
        f"{record['wall_seconds']:.0f} s in all."
    )
    print(
        f"Cells: median over rounds of ms per training step / per decoding of {record['decoded_sentences']} "
        f"sentences, and (change) how much slower the path is without the override than with all on. "
        f"Verdict: keep at >= {KEEP_PERCENT:g}% on some path."
    )
    print()
    print("\n".join(_timing.markdown_table(header, table, right_aligned=range(1, len(header) - 1))))
    for key, error in record["errors"].items():
        print(f"\nFailed: {key}: {error}")


if __name__ == "__main__":
    main()

"""What every recipe shares: command-line flags, training with checkpoints and a time
budget, the output files (metrics.json, predictions.tsv, plots) and one-line errors."""

import argparse
import json
import os
import sys
import time

import keras
import numpy as np

CHECKPOINT = "checkpoint.keras"
CHECKPOINT_STATE = "checkpoint.json"


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit status 2."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default, except None (the help text says what no flag means)."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


def parser(name, description, data_help, models, default_model, epochs, batch_size):
    """An `ArgumentParser` with the flags every recipe has (API.md, section recipes)."""
    p = argparse.ArgumentParser(prog=f"python -m recipes.{name}", description=description, formatter_class=_HelpFormatter)
    data = p.add_argument_group("data (no flag: the embedded default data)")
    data.add_argument("--train", metavar="FILE", help=f"training file: {data_help}")
    data.add_argument("--valid", metavar="FILE", help="validation file, same format as --train")
    data.add_argument("--tfds", metavar="NAME", help="a TensorFlow Datasets name (downloaded on first use)")
    data.add_argument("--tfds-data-dir", metavar="DIR", help="where TensorFlow Datasets keeps its data")
    data.add_argument("--max-examples", type=int, metavar="N", help="use at most N training examples")
    training = p.add_argument_group("training")
    training.add_argument("--model", choices=models, default=default_model, help="model family")
    training.add_argument("--epochs", type=int, default=epochs, help="passes over the training data")
    training.add_argument("--max-seconds", type=float, metavar="S", help="stop training after S seconds of wall time")
    training.add_argument("--batch-size", type=int, default=batch_size, help="examples per training batch")
    training.add_argument("--learning-rate", type=float, help="peak learning rate (default: the model family's)")
    training.add_argument("--seed", type=int, default=0, help="seeds weights, dropout and shuffling: a run repeats on a backend")
    training.add_argument("--resume", action="store_true", help="continue from the checkpoint in --output-dir")
    training.add_argument(
        "--distribute", action="store_true",
        help="data-parallel training on every local device (TensorFlow MirroredStrategy, JAX DataParallel)",
    )
    p.add_argument("--output-dir", default=f"runs/{name}", metavar="DIR", help="where outputs, checkpoints and logs go")
    p.add_argument("--traceback", action="store_true", help="on an error, show the full traceback instead of one line")
    return p


def check_arguments(args):
    """Reject values argparse lets through (type is right, value is not)."""
    for flag in ("epochs", "batch_size", "max_examples"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')}: expected a positive integer, got {value}")
    for flag in ("max_seconds", "learning_rate"):
        value = getattr(args, flag, None)
        if value is not None and not value > 0:
            raise UsageError(f"--{flag.replace('_', '-')}: expected a number > 0, got {value}")
    if (args.train is None) != (args.valid is None):
        raise UsageError("--train and --valid: expected both files or neither")
    if args.tfds and args.train:
        raise UsageError("--tfds and --train: expected one data source, got both")
    if args.resume and not os.path.exists(os.path.join(args.output_dir, CHECKPOINT)):
        raise UsageError(f"--resume: expected a checkpoint in {args.output_dir}, found none")


def main(name, run, parse, argv=None):
    """Run a recipe: bad input ends with one `error:` line and exit status 2.

    Any `ValueError` is reported that way (keras_seq raises it for inputs it cannot
    take, naming the argument); `--traceback` lets it propagate with its traceback.
    """
    args = parse(argv)
    try:
        check_arguments(args)
        os.makedirs(args.output_dir, exist_ok=True)
        keras.utils.set_random_seed(args.seed)
        return run(args)
    except (UsageError, ValueError) as error:
        if args.traceback:
            raise
        print(f"{name}: error: {error}", file=sys.stderr)
        sys.exit(2)


class WallClockBudget(keras.callbacks.Callback):
    """Stops training once `seconds` of wall time have passed (checked after each batch)."""

    def __init__(self, seconds, spent=0.0):
        super().__init__()
        self.seconds, self.spent = seconds, spent

    def on_train_begin(self, logs=None):
        self.start = time.monotonic() - self.spent

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds is not None and time.monotonic() - self.start > self.seconds:
            self.model.stop_training = True


class EpochCheckpoint(keras.callbacks.Callback):
    """Saves the model with its optimizer state, the epoch and the history after each epoch,
    so `--resume` continues from the next epoch with nothing lost."""

    def __init__(self, directory, history, budget):
        super().__init__()
        self.directory, self.history, self.budget = directory, history, budget

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(value))
        self.model.save(os.path.join(self.directory, CHECKPOINT))
        state = {"epoch": epoch + 1, "history": self.history, "seconds": time.monotonic() - self.budget.start}
        with open(os.path.join(self.directory, CHECKPOINT_STATE), "w") as f:
            json.dump(state, f)


def resume_state(args):
    """`(model or None, first epoch, history, seconds spent)` from --output-dir's checkpoint when --resume."""
    if not args.resume:
        return None, 0, {}, 0.0
    with open(os.path.join(args.output_dir, CHECKPOINT_STATE)) as f:
        state = json.load(f)
    model = keras.saving.load_model(os.path.join(args.output_dir, CHECKPOINT))
    return model, state["epoch"], state["history"], state["seconds"]


def distribution_scope(args):
    """A context for building and compiling the model: data parallel with --distribute."""
    import contextlib

    if not args.distribute:
        return contextlib.nullcontext()
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        # Every GPU; without one, every logical CPU device (MirroredStrategy's own default is CPU:0 alone).
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices]).scope()
    if backend == "jax":
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        return contextlib.nullcontext()
    raise UsageError("--distribute: expected the tensorflow or jax backend (Keras has no data-parallel fit on torch), got torch")


def vocabularies(args, builders):
    """`{name: Vocabulary}` built by `builders[name]()` and saved, or read back on --resume."""
    from keras_seq.data.text import Vocabulary

    path = os.path.join(args.output_dir, "vocabularies.json")
    if args.resume and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return {name: Vocabulary(**config) for name, config in json.load(f).items()}
    result = {name: build() for name, build in builders.items()}
    with open(path, "w", encoding="utf-8") as f:
        json.dump({name: vocabulary.get_config() for name, vocabulary in result.items()}, f, ensure_ascii=False)
    return result


def train(args, build_and_compile, batches, valid):
    """Build (or resume) and fit a model; returns `(model, history, training seconds)`.

    `build_and_compile(steps_per_epoch)` returns a compiled model; `batches(seed,
    first_epoch, epochs)` the training batches (one epoch when `seed` is None);
    `valid` the validation batches.
    """
    import tensorflow as tf

    from keras_seq.data import pipeline

    steps_per_epoch = pipeline.count_batches(batches(None, 0, 1))
    # A known length: Keras then ends each validation pass without warning that the input "ran out of data".
    valid = valid.apply(tf.data.experimental.assert_cardinality(pipeline.count_batches(valid)))
    model, first_epoch, history, spent = resume_state(args)
    with distribution_scope(args):
        if model is None:
            model = build_and_compile(steps_per_epoch)
    # repeat(): Keras may look one batch past the last epoch; it is never trained on.
    history, seconds = fit(model, batches(args.seed, first_epoch, args.epochs).repeat(), valid, args, steps_per_epoch, first_epoch, history, spent)
    model.save(os.path.join(args.output_dir, "model.keras"))
    if history:
        plot_history(history, os.path.join(args.output_dir, "training_curves.png"))
    return model, history, seconds


def export_and_load(args, kind, vocabularies, **settings):
    """Export the run's model.keras as a string-in SavedModel (see keras_seq.export) and load it back."""
    import tensorflow as tf

    from keras_seq import export

    export.write_run_config(args.output_dir, kind, vocabularies, **settings)
    export.export_run(args.output_dir)
    return tf.saved_model.load(os.path.join(args.output_dir, "export"))


def fit(model, train, valid, args, steps_per_epoch, first_epoch, history, spent):
    """`model.fit` with progress bars, the time budget, epoch checkpoints and TensorBoard logs."""
    budget = WallClockBudget(args.max_seconds, spent)
    callbacks = [
        budget,
        EpochCheckpoint(args.output_dir, history, budget),
        keras.callbacks.TensorBoard(os.path.join(args.output_dir, "logs"), write_graph=False),
    ]
    if first_epoch < args.epochs:
        model.fit(
            train, validation_data=valid, epochs=args.epochs, initial_epoch=first_epoch,
            steps_per_epoch=steps_per_epoch, callbacks=callbacks, shuffle=False,
            verbose=1 if sys.stdout.isatty() else 2,  # a progress bar on a terminal, a line per epoch in a log
        )
    return history, time.monotonic() - budget.start if first_epoch < args.epochs else spent


def write_metrics(directory, metrics):
    with open(os.path.join(directory, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2, ensure_ascii=False)
    print(json.dumps(metrics, indent=2, ensure_ascii=False))


def write_predictions(directory, rows, header=("input", "reference", "prediction")):
    """One row per valid example, tab-separated (tabs and newlines inside fields become spaces)."""
    with open(os.path.join(directory, "predictions.tsv"), "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        for row in rows:
            f.write("\t".join(" ".join(str(field).split()) for field in row) + "\n")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_history(history, path):
    """Training curves: each metric against epochs, training and validation together."""
    plt = _pyplot()
    names = sorted({key.removeprefix("val_") for key in history})
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.5), squeeze=False)
    for axis, name in zip(axes[0], names):
        axis.xaxis.get_major_locator().set_params(integer=True)
        for key, label in ((name, "train"), (f"val_{name}", "valid")):
            if key in history:
                axis.plot(np.arange(1, len(history[key]) + 1), history[key], marker="o", label=label)
        axis.set_xlabel("epoch")
        axis.set_title(name)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_attention(examples, path, title):
    """Attention heatmaps: `examples` is a list of (weights (T, S), source tokens, target tokens)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(examples), figsize=(5 * len(examples), 4.5), squeeze=False)
    for axis, (weights, source, target) in zip(axes[0], examples):
        axis.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axis.set_xticks(range(len(source)), source, rotation=90)
        axis.set_yticks(range(len(target)), target)
        axis.set_xlabel("source")
        axis.set_ylabel("target")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_sinusoidal_encoding(path, length=100, depth=128):
    """Seed 000, figure 5: the sinusoidal position encoding PE[pos, i] as an image, and four of its dimensions."""
    from keras_seq.layers.embedding import sinusoidal_position_encoding

    plt = _pyplot()
    table = keras.ops.convert_to_numpy(sinusoidal_position_encoding(length, depth))
    fig, (image, curves) = plt.subplots(1, 2, figsize=(11, 3.8))
    shown = image.imshow(table, cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
    image.set_xlabel("dimension i")
    image.set_ylabel("position")
    fig.colorbar(shown, ax=image)
    for i in (4, 5, 20, 40):
        curves.plot(table[:, i], label=f"dim {i}")
    curves.set_xlabel("position")
    curves.legend()
    fig.suptitle("Sinusoidal positional encoding (Vaswani et al. 2017)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

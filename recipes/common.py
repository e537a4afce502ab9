"""What every recipe shares: command-line flags, training with checkpoints and a time
budget, the output files (metrics.json, predictions.tsv, plots) and one-line errors."""

import argparse
import json
import os
import shutil
import sys
import time

import keras
import numpy as np

from keras_seq import _atomic as atomic
from keras_seq import training
from recipes import checkpoints, devices, memory
from recipes.errors import UsageError


def load_splits(settings, task, read, embedded):
    """`(train, valid)` of the chosen data: `--train`/`--valid` (each file through `read`), `--tfds`, or
    the embedded data set `settings.data` (`embedded` maps its name to a function returning both)."""
    from keras_seq.data import loaders

    if settings.train:
        return read(settings.train), read(settings.valid)
    if settings.tfds:
        train, valid, _ = loaders.tfds_splits(settings.tfds, task, data_dir=settings.tfds_data_dir)
        return train, valid
    return embedded[settings.data]()


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default, except None (the help text says what no flag means)."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


# The limit of Keras epochs (validation periods) of a run that trains to a time budget alone.
MAX_EPOCHS = 1000
# Steps between validations (and epoch-end checkpoints) when the data's epoch is longer.
LONGEST_PERIOD = 1000


def parser(
    name,
    description,
    data_help,
    model_defaults,
    default_model,
    epochs,
    batch_size,
    max_seconds=None,
    derived_defaults=None,
):
    """An `ArgumentParser` with the flags every recipe has (API.md, section recipes).

    `model_defaults` maps each model family (the `--model` choices) to the defaults
    that depend on it, `{flag: value}` with at least `learning_rate` (the peak); a
    flag left out on the command line takes its model's value (`resolve_settings`).
    `derived_defaults(values)`, given the flags' values as a dict, returns `{flag: value}`
    for the recipe's flags whose default depends on other flags.

    `epochs` and `max_seconds` are the recipe's budget when neither flag is given;
    one flag alone is the whole budget (`--max-seconds S` alone trains for S seconds
    whatever the number of epochs, `--epochs N` alone for N epochs however long).
    """
    p = argparse.ArgumentParser(
        prog=f"python -m recipes.{name}", description=description, formatter_class=_HelpFormatter
    )
    data = p.add_argument_group("data (no flag: the embedded default data)")
    data.add_argument("--train", metavar="FILE", help=f"training file: {data_help}")
    data.add_argument("--valid", metavar="FILE", help="validation file, same format as --train")
    data.add_argument("--tfds", metavar="NAME", help="a TensorFlow Datasets name (downloaded on first use)")
    data.add_argument("--tfds-data-dir", metavar="DIR", help="where TensorFlow Datasets keeps its data")
    data.add_argument("--max-examples", type=int, metavar="N", help="use at most N training examples")
    training = p.add_argument_group("training")
    training.add_argument("--model", choices=model_defaults, default=default_model, help="model family")
    default_budget = " and ".join(
        f for f in (epochs and f"{epochs} epochs", max_seconds and f"{max_seconds:g} seconds") if f
    )
    training.add_argument(
        "--epochs",
        type=int,
        help=f"passes over the training data (alone: no time limit; with neither flag: {default_budget})",
    )
    training.add_argument(
        "--max-seconds",
        type=float,
        metavar="S",
        help=f"train for S seconds of wall time (alone: no epoch limit; with none of --epochs, --max-seconds and "
        f"--max-steps: {default_budget})",
    )
    training.add_argument(
        "--max-steps",
        type=int,
        metavar="N",
        help="train for N steps (batches); with several processes the budget they agree on (their clocks differ)",
    )
    p.set_defaults(default_epochs=epochs, default_seconds=max_seconds, recipe=name)
    training.add_argument("--batch-size", type=int, default=batch_size, help="examples per training batch")
    training.add_argument(
        "--learning-rate",
        type=float,
        help="peak learning rate (default: "
        + ", ".join(f"{m} {d['learning_rate']:g}" for m, d in model_defaults.items())
        + ")",
    )
    p.set_defaults(model_defaults=model_defaults, derived_defaults=derived_defaults)
    training.add_argument(
        "--seed", type=int, default=0, help="seeds weights, dropout and shuffling: a run repeats on a backend"
    )
    training.add_argument("--resume", action="store_true", help="continue from the checkpoint in --output-dir")
    training.add_argument(
        "--max-nan",
        type=int,
        default=3,
        metavar="N",
        help="a non-finite loss rolls back to the last finite weights; the N-th ends the run",
    )
    training.add_argument(
        "--checkpoint-every",
        type=float,
        default=300.0,
        metavar="S",
        help="also save a checkpoint within an epoch once S seconds have passed since the last one",
    )
    training.add_argument(
        "--distribute",
        action="store_true",
        help="data-parallel training on every local device (TensorFlow MirroredStrategy, JAX DataParallel)",
    )
    training.add_argument(
        "--model-parallel",
        type=int,
        default=1,
        metavar="N",
        help="JAX, Transformer models: split each model over N devices (Megatron layout, keras_seq.distribution) "
        "and the batch over the rest",
    )
    processes = p.add_argument_group(
        "several processes (JAX; default: the KERAS_DISTRIBUTION_* variables, else one process; "
        "on TensorFlow, TF_CONFIG)"
    )
    processes.add_argument(
        "--num-processes", type=int, metavar="N", help="processes taking part, one per host or per accelerator"
    )
    processes.add_argument(
        "--process-id", type=int, metavar="I", help="this process's id in [0, N); 0 coordinates and writes the outputs"
    )
    processes.add_argument("--coordinator", metavar="HOST:PORT", help="address where process 0 listens")
    p.add_argument("--output-dir", default=f"runs/{name}", metavar="DIR", help="where outputs, checkpoints and logs go")
    p.add_argument("--traceback", action="store_true", help="on an error, show the full traceback instead of one line")
    return p


def add_validation_flags(p, score, warmup):
    """The flags of training to a budget with validation: warm-up share, patience, averaging, validation period.

    `score` names what validation measures (e.g. "BLEU", "perplexity").
    """
    p.add_argument(
        "--warmup", type=float, default=warmup, help="share of the budget over which the learning rate warms up"
    )
    p.add_argument(
        "--patience", type=int, help=f"stop after this many validations without a {score} gain (default: never)"
    )
    p.add_argument(
        "--average-last",
        type=int,
        default=1,
        metavar="K",
        help=f"at the end, average the weights of the last K validations and keep them if their {score} is as good",
    )
    p.add_argument(
        "--validate-every",
        type=float,
        metavar="S",
        help="also validate once S seconds have passed since the last validation",
    )
    p.add_argument(
        "--validate-every-steps",
        type=int,
        metavar="N",
        help=f"validate (and checkpoint) every N steps (default: after each pass over the data, at most every "
        f"{LONGEST_PERIOD} steps)",
    )


def check_arguments(args):
    """Reject values argparse lets through (type is right, value is not)."""
    for flag in (
        "epochs",
        "batch_size",
        "max_examples",
        "vocab_size",
        "vocabulary_size",
        "validate_sentences",
        "average_last",
        "patience",
        "max_nan",
        "model_parallel",
        "max_steps",
        "validate_every_steps",
        "batch_tokens",
        "vocab_sample",
    ):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')}: expected a positive integer, got {value}")
    for flag in ("max_seconds", "learning_rate", "validate_every", "checkpoint_every"):
        value = getattr(args, flag, None)
        if value is not None and not value > 0:
            raise UsageError(f"--{flag.replace('_', '-')}: expected a number > 0, got {value}")
    if (args.train is None) != (args.valid is None):
        raise UsageError("--train and --valid: expected both files or neither")
    if args.tfds and args.train:
        raise UsageError("--tfds and --train: expected one data source, got both")
    if args.resume and not checkpoints.exists(args.output_dir):
        raise UsageError(f"--resume: expected a checkpoint in {args.output_dir}, found none")


class Settings(argparse.Namespace):
    """A recipe's flags with every default resolved, read-only: each step of a run reads the same values,
    so none can change them for the steps after it."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __setattr__(self, name, value):
        raise AttributeError(f"settings are read-only ({name}): resolve_settings sets them once")

    def __delattr__(self, name):
        raise AttributeError(f"settings are read-only ({name}): resolve_settings sets them once")


def resolve_settings(args, started=None):
    """The checked `Settings` of parsed `args` (left unchanged): each flag left out takes its model's
    default, then the defaults `derived_defaults` computes from the other flags (a recipe's `parser` option);
    with none of --epochs, --max-seconds and --max-steps, the recipe's budget. `started`: the run's start
    (`time.monotonic()`, now when None), which the first step's message counts from."""
    check_arguments(args)
    values = dict(vars(args), started=time.monotonic() if started is None else started)
    values.update({flag: value for flag, value in args.model_defaults[args.model].items() if values[flag] is None})
    if values.get("derived_defaults") is not None:
        values.update(values["derived_defaults"](values))
    if args.epochs is None and args.max_seconds is None and args.max_steps is None:
        values["epochs"], values["max_seconds"] = args.default_epochs, args.default_seconds
    return Settings(**values)


def main(name, run, parse, argv=None):
    """Run a recipe: bad input ends with one `error:` line and exit status 2.

    Any `ValueError` is reported that way (keras_seq raises it for inputs it cannot
    take, naming the argument); `--traceback` lets it propagate with its traceback.
    A process of a multi-process run leaves through `_leave_joined_run` instead.
    """
    started = time.monotonic()
    args = parse(argv)
    processes = argparse.Namespace(joined=False)  # what joining the other processes sets (join_processes)
    try:
        return _checked_run(name, run, args, started, processes)
    except BaseException as error:
        if not processes.joined:
            raise
        _leave_joined_run(name, processes, error)


def _checked_run(name, run, args, started, processes):
    try:
        settings = resolve_settings(args, started)
        memory.keep_freed_memory()  # before any step allocates: see there
        settings = join_processes(settings, processes)  # first: TensorFlow's strategy must come before its other ops
        keras.utils.set_random_seed(settings.seed)
        check_writable(settings.output_dir)
        atomic.remove_leftovers(settings.output_dir)
        return run(settings)
    except devices.OtherProcessDone:
        shutil.rmtree(processes.output_dir, ignore_errors=True)  # the scratch folder (join_processes)
        print(f"{name}: process {processes.process_id} of {processes.num_processes} done; process 0 writes the outputs")
        return None
    except (devices.ProcessLost, ValueError, OSError) as error:  # UsageError is a ValueError
        if args.traceback:
            raise
        print(f"{name}: error: {_error_line(error)}", file=sys.stderr, flush=True)
        sys.exit(2)


def join_processes(settings, processes):
    """`settings` with what starting a multi-process run resolves (`devices.join_processes`: the process
    count and id, the output and shared folders, TensorFlow's strategy) and `processes`, the namespace
    `devices.join_processes` and `devices.leave_processes` keep the run's state in (`joined`): the one
    object a run changes after its start, so `main` knows how a joined process must end."""
    vars(processes).update(vars(settings))
    devices.join_processes(processes)
    return Settings(**{name: value for name, value in vars(processes).items() if name != "joined"}, processes=processes)


def _leave_joined_run(name, processes, error):
    """End a process of a multi-process run at once, whatever ended it: `os._exit`, since a normal exit
    would wait for a lost process at JAX's shutdown barrier. A `SystemExit` keeps its status (2 after an
    `error:` line, 130/143 after a signal); any other error prints its line (its traceback with
    `--traceback`) and exits with 2. A process other than 0 first deletes its scratch folder."""
    import traceback

    status = 2
    if isinstance(error, SystemExit):
        status = error.code if isinstance(error.code, int) else 2
    elif processes.traceback:
        traceback.print_exception(error)
    else:
        print(f"{name}: error: {type(error).__name__}: {_error_line(error)}", file=sys.stderr)
    if processes.process_id:
        shutil.rmtree(processes.output_dir, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _error_line(error):
    """The one line an error ends a recipe with; an `OSError` (e.g. a full disk) names its file, and the
    outputs written before it are complete (atomic writes)."""
    if isinstance(error, OSError):
        return f"{error.filename or 'writing an output'}: {error.strerror or error}"
    return str(error)


def check_writable(directory):
    """Create --output-dir and write a probe there, so an unwritable folder ends the run before training."""
    import tempfile

    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-"):
            pass
    except OSError as error:
        raise UsageError(
            f"--output-dir: expected a folder this process can write, got {directory} ({error.strerror})"
        ) from None


def resume_state(settings):
    """`(model or None, checkpoint state, best weights path or None)` from --output-dir's checkpoint when --resume."""
    if not settings.resume:
        return None, {"epoch": 0, "history": {}, "seconds": 0.0, "steps": 0}, None
    try:
        return checkpoints.load(settings.shared_dir, settings.recipe)
    except checkpoints.Unreadable as problem:
        raise UsageError(
            f"--resume: expected a complete checkpoint in {settings.shared_dir}, got none ({problem})"
        ) from None


def add_subword_flags(p):
    """`--subword-model`, the SentencePiece model type of a `subword` vocabulary."""
    from keras_seq.data.subword import MODEL_TYPES

    p.add_argument(
        "--subword-model",
        choices=MODEL_TYPES,
        default="unigram",
        help="SentencePiece model type of a subword vocabulary",
    )


def subword_vocabulary(settings, texts, size, lowercase=False, user_symbols=()):
    """A SentencePiece vocabulary of at most `size` ids trained on `texts` (type from --subword-model), each of
    `user_symbols` one piece."""
    from keras_seq.data.subword import SubwordVocabulary

    return SubwordVocabulary.train(texts, size, settings.subword_model, lowercase=lowercase, user_symbols=user_symbols)


def vocabularies(settings, build):
    """`{name: vocabulary}` made by `build()` and saved in --output-dir, or read back on --resume.

    All go into `vocabularies.json`; a SentencePiece model is also written as
    `NAME.model` (one `sentencepiece.model` when every name shares it), which the
    `sentencepiece` package reads as it is.
    """
    from keras_seq.data.subword import SubwordVocabulary, vocabulary_from_config

    path = os.path.join(settings.output_dir, "vocabularies.json")
    shared = os.path.join(settings.shared_dir, "vocabularies.json")  # process 0's (join_processes)
    if settings.resume and os.path.exists(shared):
        with open(shared, encoding="utf-8") as f:
            configs = json.load(f)
        by_config = {}  # equal configs (a joint vocabulary) give one object
        return {
            name: by_config.setdefault(json.dumps(config, sort_keys=True), vocabulary_from_config(config))
            for name, config in configs.items()
        }
    result = build()
    atomic.write_text(
        path, json.dumps({name: vocabulary.get_config() for name, vocabulary in result.items()}, ensure_ascii=False)
    )
    subword = {name: vocabulary for name, vocabulary in result.items() if isinstance(vocabulary, SubwordVocabulary)}
    if len({id(vocabulary) for vocabulary in subword.values()}) == 1 and len(subword) > 1:
        next(iter(subword.values())).save(os.path.join(settings.output_dir, "sentencepiece.model"))
    else:
        for name, vocabulary in subword.items():
            vocabulary.save(os.path.join(settings.output_dir, f"{name}.model"))
    return result


def train(
    settings,
    build_and_compile,
    data,
    valid,
    learning_rate=None,
    score=None,
    monitor=None,
    mode="max",
    ignored_label=0,
    model_sizes=None,
):
    """Build (or resume) and fit a model; returns `(model, history, training seconds, validation)`.

    `build_and_compile(steps_per_epoch)` returns a compiled model; `data` the training batches
    (`training_data.PreparedBatches` or `InMemoryBatches`); `valid` the validation batches (None:
    none for `fit`, e.g. when `score` evaluates them itself). `learning_rate=(peak, warmup share)`
    sets the optimizer's rate from the budget spent (`WarmupLinearDecay`); `score(model) ->
    {name: value}` validates after each period (`validation_period`), keeping the best weights by
    `monitor` (`mode` "max" or "min": which way is better; `BestByValidation`, returned as
    `validation`; None without `score`). `ignored_label` is a target the loss leaves out (the
    targets of the rows that pad a batch into equal parts for the devices); `model_sizes`
    allows `--model-parallel` (`distribution_scope`).

    Keras' epochs are validation periods, not passes over the data: a checkpoint records the
    data position (epoch and batch of the data) and the steps taken, and `--resume` starts
    the data there without reading the batches before.
    """
    valid = _with_known_length(valid)
    model, state, best_weights = _built_or_resumed(settings, build_and_compile, data, model_sizes)
    if valid is not None:
        valid = devices.fed_batches(valid, ignored_label)
    period = validation_period(settings, data.steps_per_epoch)
    total_steps = settings.max_steps or (settings.epochs and settings.epochs * data.steps_per_epoch)
    budget = training.TrainingBudget(settings.max_seconds, total_steps, state["seconds"], state.get("steps", 0))
    callbacks = _budget_callbacks(settings, budget, learning_rate)  # before anything saves the model
    validation = _best_by_validation(settings, score, monitor, mode, model, state, best_weights)
    start = (state.get("epoch", 0), state.get("batch", 0))
    checkpoint = checkpoints.RunCheckpoint(
        settings, state["history"], budget, _data_position(data, start, budget), data.digest, validation
    )
    callbacks += [validation] if validation is not None else []
    callbacks += [checkpoint, *_progress_callbacks(settings, data, start)]
    batches = _training_batches(settings, data, start, ignored_label)
    if settings.workers_strategy is not None:
        from keras_seq.backend import keras_internals

        local_batch = devices.fed_batches(data.one_batch(), ignored_label, local=data.local)
        keras_internals.prepare_fit_for_several_workers(model, next(iter(local_batch)))
    _fit(settings, model, batches, valid, budget, period, total_steps, callbacks, checkpoint)
    model = _saved_by_every_process(settings, model, data, validation, monitor)
    history = state["history"]
    if history:
        plot_history(history, os.path.join(settings.output_dir, "training_curves.png"))
    return model, history, budget.elapsed(), validation


def _with_known_length(valid):
    """`valid` (None stays None) with its batch count asserted: Keras then ends each validation pass without
    warning that the input "ran out of data"."""
    import tensorflow as tf

    from keras_seq.data import pipeline

    if valid is None:
        return None
    return valid.apply(tf.data.experimental.assert_cardinality(pipeline.count_batches(valid)))


def _built_or_resumed(settings, build_and_compile, data, model_sizes):
    """`(model, checkpoint state, best weights path or None)`: the checkpoint's on --resume, else a new model,
    in the distribution scope either way (a resumed model's variables are placed as a new one's)."""
    with devices.distribution_scope(settings, model_sizes):
        model, state, best_weights = resume_state(settings)
        if model is None:
            model = build_and_compile(data.steps_per_epoch)
    return model, state, best_weights


def _best_by_validation(settings, score, monitor, mode, model, state, best_weights):
    """The `BestByValidation` callback of `score` (None without one), on --resume with the checkpoint's best
    score and weights, whose file is copied back into --output-dir (the checkpoint's, not a later one)."""
    if score is None:
        return None
    validation = training.BestByValidation(
        score,
        monitor,
        mode=mode,
        patience=settings.patience,
        average_last=settings.average_last,
        every_seconds=settings.validate_every,
        path=os.path.join(settings.output_dir, checkpoints.BEST_WEIGHTS),
    )
    if "validation" in state and best_weights is not None:
        validation.best = state["validation"]["best"]
        validation.evaluations_without_gain = state["validation"]["without_gain"]
        validation.best_weights = _weights_from_file(model, best_weights)
        shutil.copyfile(best_weights, os.path.join(settings.output_dir, checkpoints.BEST_WEIGHTS))
    return validation


def _data_position(data, start, budget):
    """A function giving the data position of the next batch: `start` moved by the steps taken since."""
    start_steps = budget.spent_steps
    return lambda: data.position_after(start, budget.spent_steps - start_steps)


def _budget_callbacks(settings, budget, learning_rate):
    """The callbacks that stop training and keep its weights finite (the budget, `NonFiniteGuard`) and, given
    `learning_rate=(peak, warmup share)`, the rate that follows the budget spent."""
    callbacks = [budget, training.NonFiniteGuard(settings.max_nan, settings.recipe)]
    if learning_rate is not None:
        callbacks.append(training.WarmupLinearDecay(budget, *learning_rate))
    return callbacks


def _progress_callbacks(settings, data, start):
    """The callbacks that report progress: the first step's time, process 0's target tokens a second (prepared
    data only) and TensorBoard's logs."""
    callbacks = [FirstStepClock(settings.recipe, settings.started)]
    if data.target_tokens is not None and not settings.process_id:
        callbacks.append(TrainingSpeed(settings.recipe, data, start))
    callbacks.append(keras.callbacks.TensorBoard(os.path.join(settings.output_dir, "logs"), write_graph=False))
    return callbacks


def _fit(settings, model, batches, valid, budget, period, total_steps, callbacks, checkpoint):
    """`model.fit` for the periods of the budget not yet spent; a failed collective of a multi-process run
    becomes `ProcessLost` (another process is gone), and the checkpoint's signal handlers are put back."""
    periods = MAX_EPOCHS if total_steps is None else -(-total_steps // period)
    first_period = budget.spent_steps // period
    if first_period >= periods or budget.fraction() >= 1.0:
        return
    try:
        model.fit(
            batches,
            validation_data=valid,
            epochs=periods,
            initial_epoch=first_period,
            steps_per_epoch=period,
            callbacks=callbacks,
            shuffle=False,
            verbose=1 if sys.stdout.isatty() else 2,  # a progress bar on a terminal, a line per period in a log
        )
    except Exception as error:
        if settings.num_processes == 1 or not devices.lost_process(error):  # bad input: reported as it is
            raise
        # A collective with a process that is gone fails here, on every process left.
        first_line = (str(error).strip().splitlines() or [""])[0][:300]
        raise devices.ProcessLost(
            f"process {settings.process_id} of {settings.num_processes}: training stopped, another process is gone or "
            f"failed ({type(error).__name__}: {first_line})"
        ) from error
    finally:
        checkpoint.restore_signal_handlers()  # also when fit ends by an exception or a signal's exit


def _saved_by_every_process(settings, model, data, validation, monitor):
    """Save the trained model as --output-dir's model.keras, on every process (reading the weights takes them
    all), saying what each process read and which weights are kept; then process 0 goes on alone with the
    model back on its devices, and the others stop (`devices.leave_processes`)."""
    data_read = data.read()
    if data_read is not None and settings.num_processes > 1:
        print(
            f"{settings.recipe}: process {settings.process_id} of {settings.num_processes} read "
            f"{data_read['rows']:,} rows ({data_read['bytes']:,} bytes) of the prepared data",
            flush=True,
        )
    if validation is not None and validation.chosen != "last" and not settings.process_id:
        print(f"{settings.output_dir}: keeping the {validation.chosen} weights ({monitor} {validation.best:.4g})")
    model_path = os.path.join(settings.output_dir, "model.keras")
    with atomic.replaced_atomically(model_path) as path:
        model.save(path)
    if settings.num_processes > 1:
        model = devices.leave_processes(settings.processes, model_path)
    return model


class FirstStepClock(keras.callbacks.Callback):
    """Prints once how long the run took from its start to its first training step (data preparation,
    model build and compilation included): what a user waits before training, and again on --resume."""

    def __init__(self, recipe, started):
        super().__init__()
        self.recipe, self.started, self.shown = recipe, started, False

    def on_train_batch_end(self, batch, logs=None):
        if not self.shown:
            self.shown = True
            print(
                f"{self.recipe}: first training step done {time.monotonic() - self.started:.1f} s after the start",
                flush=True,
            )


class TrainingSpeed(keras.callbacks.Callback):
    """Prints at the end of training its target tokens a second: the tokens of the steps after the
    first over the time from one step's end to the next, validation and checkpoints left out (the
    step's own rate, what NMT toolkits report as target tokens/s)."""

    def __init__(self, recipe, data, start):
        super().__init__()
        self.recipe, self.data, self.start = recipe, data, start
        self.steps, self.timed, self.seconds, self.last_end = 0, [], 0.0, None

    def on_train_batch_end(self, batch, logs=None):
        now = time.monotonic()
        if self.last_end is not None:
            self.timed.append(self.steps)
            self.seconds += now - self.last_end
        self.steps += 1
        self.last_end = now

    def on_epoch_end(self, epoch, logs=None):
        self.last_end = None  # the next step's interval would hold this period's validation

    def on_train_end(self, logs=None):
        if self.timed and self.seconds > 0:
            tokens = sum(self.data.target_tokens(self.data.position_after(self.start, step)) for step in self.timed)
            print(
                f"{self.recipe}: {len(self.timed) + 1} training steps; after the first, {tokens / self.seconds:,.0f} "
                f"target tokens/s",
                flush=True,
            )


def validation_period(settings, steps_per_epoch):
    """Steps of one Keras epoch: `--validate-every-steps`, else a pass over the data up to `LONGEST_PERIOD`
    (an epoch of millions of pairs takes hours: validation, best weights and checkpoints don't wait for it)."""
    return settings.validate_every_steps or min(steps_per_epoch, LONGEST_PERIOD)


def check_resumed_data(settings, digest):
    """On --resume, refuse data other than the checkpoint's (by the prepared data's `digest`), before preparing any."""
    if not settings.resume:
        return
    recorded = checkpoints.recorded_state(settings.shared_dir).get("data_digest")
    if recorded is not None and recorded != digest:
        raise UsageError(
            f"--resume: expected the data and flags the checkpoint in {settings.shared_dir} was trained on "
            f"(prepared digest {recorded[:12]}), got others (digest {digest[:12]}); give the same files and "
            "flags, or a new --output-dir"
        )


def _training_batches(settings, data, position, ignored_label):
    """What `fit` reads: this process's batches from `position` (a `DistributedDataset` on TensorFlow's workers)."""
    batches = data.dataset(position)
    if settings.workers_strategy is not None and data.local:
        # Each worker's batches are already its own rows: one replica a worker takes them whole.
        return settings.workers_strategy.distribute_datasets_from_function(lambda context: batches)
    return devices.fed_batches(batches, ignored_label, local=data.local)


def evaluated(valid, name, of_logs, ignored_label=0):
    """A `score` for `train`: `{name: of_logs(logs)}` from one `model.evaluate` pass over `valid` (logs as a dict;
    `ignored_label` as in `train`)."""

    def score(model):
        return {
            name: float(of_logs(model.evaluate(devices.fed_batches(valid, ignored_label), verbose=0, return_dict=True)))
        }

    return score


def _weights_from_file(model, path):
    """The weights saved at `path` as `get_weights()` arrays, leaving `model`'s weights and optimizer state unchanged.

    `load_weights` also loads the optimizer state saved with the weights (its step count and
    moments at the best validation), so that state is put back too: a resumed run goes on
    from the checkpoint's step, not the best validation's.
    """
    current = model.get_weights()
    optimizer_variables = list(model.optimizer.variables) if model.optimizer is not None else []
    optimizer_state = [keras.ops.convert_to_numpy(variable) for variable in optimizer_variables]
    model.load_weights(path)
    weights = model.get_weights()
    model.set_weights(current)
    for variable, value in zip(optimizer_variables, optimizer_state, strict=True):
        variable.assign(value)
    return weights


def export_and_load(settings, kind, vocabularies, **config):
    """Export the run's model.keras as a string-in SavedModel (see keras_seq.export) and load it back."""
    import tensorflow as tf

    from keras_seq import export

    export.write_run_config(settings.output_dir, kind, vocabularies, **config)
    export.export_run(settings.output_dir)
    return tf.saved_model.load(os.path.join(settings.output_dir, "export"))


def write_metrics(directory, metrics):
    text = json.dumps(metrics, indent=2, ensure_ascii=False)
    atomic.write_text(os.path.join(directory, "metrics.json"), text)
    print(text)


def write_predictions(directory, rows, header=("input", "reference", "prediction")):
    """One row per valid example, tab-separated (tabs and newlines inside fields become spaces)."""
    lines = ["\t".join(header)] + ["\t".join(" ".join(str(field).split()) for field in row) for row in rows]
    atomic.write_text(os.path.join(directory, "predictions.tsv"), "\n".join(lines) + "\n")


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
    """The sinusoidal encoding PE[pos, i] of Vaswani et al. (2017, sec. 3.5) as an image, and four of its dimensions."""
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

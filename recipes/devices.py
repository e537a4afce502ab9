"""Recipes on more than one device or process: data and model parallel scopes, the start-up of a
multi-process run, and the batches each process feeds (padded into equal parts for the devices)."""

import contextlib
import re
import tempfile

import keras

from keras_seq import backend
from recipes.errors import UsageError


class ProcessLost(Exception):
    """A multi-process run cannot go on: another process is gone (reported as one line, exit status 2)."""


# The status codes of XLA's runtime errors: JAX raises a collective that failed with another process
# as a `JaxRuntimeError`, or as a `ValueError` when it fails in a check of `device_put`'s input.
_RUNTIME_STATUS = re.compile(
    r"(UNKNOWN|INTERNAL|UNAVAILABLE|ABORTED|CANCELLED|DEADLINE_EXCEEDED|DATA_LOSS|FAILED_PRECONDITION): "
)


def lost_process(error):
    """Whether `error`, raised in a multi-process `fit`, says the run cannot go on (a process is gone or
    failed) rather than that an input is bad (a `ValueError` of Keras or keras_seq)."""
    return not isinstance(error, ValueError) or bool(_RUNTIME_STATUS.match(str(error)))


class OtherProcessDone(Exception):
    """A process other than 0 has trained its part: process 0 alone writes the outputs."""


def join_processes(args):
    """Start a multi-process run and train data-parallel over every process's devices: on JAX,
    `--num-processes` > 1 (or Keras' or torchrun's variables) joins the others through
    `keras.distribution.initialize`; on TensorFlow, `TF_CONFIG` naming several workers makes a
    `MultiWorkerMirroredStrategy` (`keras_seq.backend.join_processes`).

    Processes other than 0 write into a private scratch folder (their checkpoints, logs and
    model are never read) and read `--resume`'s checkpoint and vocabularies from
    `--output-dir`, which process 0 alone writes; a shared file system is assumed for
    `--resume`. Sets `args.num_processes`, `args.process_id`, `args.shared_dir`, `args.workers_strategy`
    (TensorFlow's, else None) and `args.joined` (True until `leave_processes`).
    """
    from keras_seq.distribution import process_settings

    args.shared_dir, args.workers_strategy, args.joined = args.output_dir, None, False
    configured = backend.configured_processes()
    if configured is not None:
        coordinator, (count, index) = None, _configured_processes(args, configured)
    else:
        coordinator, count, index = process_settings(args.coordinator, args.num_processes, args.process_id)
    args.num_processes, args.process_id = count, index
    if count == 1:
        return
    _check_step_budget(args)
    try:
        args.workers_strategy = backend.join_processes(coordinator, count, index)
    except ValueError as error:
        raise UsageError(f"--num-processes {count}: {error}") from None
    args.joined = True
    args.distribute = True
    if index > 0:
        args.output_dir = tempfile.mkdtemp(prefix=f"keras_seq-{args.recipe}-process-{index}-")


def _check_step_budget(args):
    """Several processes must stop and validate at the same steps: a budget in seconds or validations every
    S seconds would follow each process's own clock, and a process left alone in a collective waits forever."""
    for flag, value in (("--max-seconds", args.max_seconds), ("--validate-every", args.validate_every)):
        if value is not None:
            raise UsageError(
                f"{flag} {value:g} with {args.num_processes} processes: expected a budget in steps or "
                "epochs (--max-steps N or --epochs N, and --validate-every-steps), which every process "
                "ends at the same step"
            )


def data_parallel_parts(args):
    """Into how many equal parts a batch is split across processes and their devices (1 for one process)."""
    return backend.batch_parts(args.num_processes)


def _configured_processes(args, configured):
    """`(count, index)` of the cluster configuration (TensorFlow's `TF_CONFIG`); the flags, or Keras' or torchrun's
    variables, must agree with it."""
    import os

    from keras_seq.distribution import PROCESS_ENVIRONMENT

    count, index = configured
    named = {"num_processes": count, "process_id": index}
    for name, flag in (("num_processes", "--num-processes"), ("process_id", "--process-id")):
        given = getattr(args, name)
        if given is None:  # else the variables JAX's runs read
            flag, given = next(
                ((key, os.environ[key]) for key in PROCESS_ENVIRONMENT[name] if os.environ.get(key)), (flag, None)
            )
        if given is not None and str(given) != str(named[name]):
            unset = "" if os.environ.get("TF_CONFIG") else "; TF_CONFIG is not set"
            raise UsageError(
                f"{flag} {given}: expected {named[name]}, what TF_CONFIG names (on tensorflow the processes "
                f"are TF_CONFIG's cluster.worker and task.index{unset})"
            )
    if args.coordinator and count == 1:
        raise UsageError(
            f"--coordinator {args.coordinator}: expected TF_CONFIG on tensorflow (its cluster.worker lists "
            "every worker's address), got none"
        )
    return count, index


def leave_processes(args, model_path):
    """End the multi-process part of a run, on every process at once after training: stop JAX's
    distributed service, so no process waits at exit for process 0's export and translations.
    Process 0 gets its saved model (`model_path`) back on its own devices; the others raise
    `OtherProcessDone`."""
    backend.leave_processes()
    args.joined = False
    if args.process_id > 0:
        raise OtherProcessDone()
    return keras.saving.load_model(model_path)


def fed_batches(batches, ignored_label, local=False):
    """What this process feeds `fit` or `evaluate` of `batches`. On JAX: each batch padded into equal parts
    for the devices (`rows_padded_to_multiple`), then this process's rows of it when there are several
    processes (`keras_seq.backend.process_batches`). On TensorFlow: the batches with tf.data's `DATA` sharding,
    which under a `MultiWorkerMirroredStrategy` gives each worker its rows of every global batch (and does nothing
    otherwise). `local`: the batches are already this process's own equal part (read so), fed as they are."""
    if local:
        return batches
    return backend.process_batches(
        batches, lambda padded, multiple: rows_padded_to_multiple(padded, multiple, ignored_label), process_rows
    )


def process_rows(batches, count, index):
    """Each batch's `index`-th of `count` equal row blocks: the part of the global batch one process feeds."""
    import tensorflow as tf

    if count == 1:
        return batches

    def rows(*batch):
        size = tf.shape(tf.nest.flatten(batch)[0])[0] // count
        return tf.nest.map_structure(lambda tensor: tensor[index * size : (index + 1) * size], batch)

    return batches.map(rows)


def distribution_scope(args, model_sizes=None):
    """A context for building and compiling the model: data parallel with --distribute, model
    parallel with --model-parallel (`model_sizes`: the sizes `keras_seq.distribution.model_parallel`
    checks, None for a model it cannot split)."""
    if getattr(args, "model_parallel", 1) > 1:
        return _model_parallel_scope(args, model_sizes)
    if getattr(args, "workers_strategy", None) is not None:
        return args.workers_strategy.scope()
    if not args.distribute:
        return contextlib.nullcontext()
    scope = backend.data_parallel_scope()
    if scope is None:
        raise UsageError(
            "--distribute: expected the tensorflow or jax backend (Keras has no data-parallel fit on "
            f"{backend.NAME}), got {backend.NAME}"
        )
    return scope


def _model_parallel_scope(args, model_sizes):
    from keras_seq.distribution import model_parallel

    def distribution():
        if model_sizes is None:
            raise UsageError(f"--model-parallel: expected a Transformer model, got --model {args.model}")
        return model_parallel(args.model_parallel, **model_sizes)

    scope = backend.model_parallel_scope(distribution)
    if scope is None:
        raise UsageError(
            "--model-parallel: expected the jax backend (Keras splits models over devices on JAX only), "
            f"got {backend.NAME}"
        )
    return scope


def rows_padded_to_multiple(batches, multiple, ignored_label):
    """`(inputs, targets)` batches with rows added up to a multiple of `multiple`: inputs of padding id 0
    and targets of `ignored_label`, which the loss and metrics leave out, so losses stay those of the
    unpadded batches."""
    import tensorflow as tf

    if multiple == 1:
        return batches

    def pad(inputs, targets):
        rows = tf.shape(targets)[0]
        extra = (multiple - rows % multiple) % multiple

        def padded(tensor, value):
            return tf.pad(tensor, [[0, extra]] + [[0, 0]] * (len(tensor.shape) - 1), constant_values=value)

        return tf.nest.map_structure(lambda tensor: padded(tensor, 0), inputs), padded(targets, ignored_label)

    return batches.map(pad)


def processes_on_this_host(count, backend_name):
    """`[(flags, environment variables)]` that make `count` recipe processes on 127.0.0.1 one run: JAX's
    `--num-processes`/`--process-id`/`--coordinator`, TensorFlow's `TF_CONFIG` (each on free ports), for tests
    and benchmarks; `[([], {})]` for one process."""
    import json
    import socket

    if count == 1:
        return [([], {})]
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    if backend_name == "tensorflow":
        workers = [f"127.0.0.1:{port}" for port in ports]
        return [
            (
                [],
                {"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})},
            )
            for index in range(count)
        ]
    return [
        (["--num-processes", str(count), "--process-id", str(index), "--coordinator", f"127.0.0.1:{ports[0]}"], {})
        for index in range(count)
    ]

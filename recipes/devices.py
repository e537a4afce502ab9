"""Recipes on more than one device or process: data and model parallel scopes, the start-up of a
multi-process run, and the batches each process feeds (padded into equal parts for the devices)."""

import contextlib
import re
import tempfile

import keras


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit status 2 (`recipes.common` raises it too)."""


class ProcessLost(Exception):
    """A multi-process run cannot go on: another process is gone (reported as one line, exit status 2)."""


# The status codes of XLA's runtime errors: JAX raises a collective that failed with another process
# as a `JaxRuntimeError`, or as a `ValueError` when it fails in a check of `device_put`'s input.
_RUNTIME_STATUS = re.compile(r"(UNKNOWN|INTERNAL|UNAVAILABLE|ABORTED|CANCELLED|DEADLINE_EXCEEDED|DATA_LOSS|FAILED_PRECONDITION): ")


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
    `MultiWorkerMirroredStrategy` (`recipes.multi_worker`).

    Processes other than 0 write into a private scratch folder (their checkpoints, logs and
    model are never read) and read `--resume`'s checkpoint and vocabularies from
    `--output-dir`, which process 0 alone writes; a shared file system is assumed for
    `--resume`. Sets `args.num_processes`, `args.process_id`, `args.shared_dir`, `args.workers_strategy`
    (TensorFlow's, else None) and `args.joined` (True until `leave_processes`).
    """
    from keras_seq.distribution import process_settings

    args.shared_dir, args.workers_strategy, args.joined = args.output_dir, None, False
    backend = keras.backend.backend()
    if backend == "tensorflow":
        count, index = _tensorflow_workers(args)
    else:
        coordinator, count, index = process_settings(args.coordinator, args.num_processes, args.process_id)
        if count > 1 and backend != "jax":
            raise UsageError(f"--num-processes {count}: expected the jax backend (keras.distribution.initialize) or "
                             f"tensorflow with TF_CONFIG, got {backend}")
    args.num_processes, args.process_id = count, index
    if count == 1:
        return
    _check_step_budget(args)
    if backend == "tensorflow":
        from recipes import multi_worker

        args.workers_strategy = multi_worker.strategy()
    else:
        keras.distribution.initialize(coordinator, count, index)
    args.joined = True
    args.distribute = True
    if index > 0:
        args.output_dir = tempfile.mkdtemp(prefix=f"keras_seq-{args.recipe}-process-{index}-")


def _check_step_budget(args):
    """Several processes must stop and validate at the same steps: a budget in seconds or validations every
    S seconds would follow each process's own clock, and a process left alone in a collective waits forever."""
    for flag, value in (("--max-seconds", args.max_seconds), ("--validate-every", args.validate_every)):
        if value is not None:
            raise UsageError(f"{flag} {value:g} with {args.num_processes} processes: expected a budget in steps or "
                             "epochs (--max-steps N or --epochs N, and --validate-every-steps), which every process "
                             "ends at the same step")


def data_parallel_parts(args):
    """Into how many equal parts a batch is split across processes and their devices (1 for one process)."""
    if args.num_processes == 1:
        return 1
    if keras.backend.backend() == "jax":
        import jax

        return jax.device_count()
    return args.num_processes  # TensorFlow's workers: one replica each


def _tensorflow_workers(args):
    """`(count, index)` of TF_CONFIG's workers; the flags, or Keras' or torchrun's variables, must agree with it."""
    import os

    from keras_seq.distribution import PROCESS_ENVIRONMENT
    from recipes.multi_worker import tf_config_workers

    count, index = tf_config_workers()
    named = {"num_processes": count, "process_id": index}
    for name, flag in (("num_processes", "--num-processes"), ("process_id", "--process-id")):
        given = getattr(args, name)
        if given is None:  # else the variables JAX's runs read
            flag, given = next(((key, os.environ[key]) for key in PROCESS_ENVIRONMENT[name] if os.environ.get(key)), (flag, None))
        if given is not None and str(given) != str(named[name]):
            unset = "" if os.environ.get("TF_CONFIG") else "; TF_CONFIG is not set"
            raise UsageError(f"{flag} {given}: expected {named[name]}, what TF_CONFIG names (on tensorflow the processes "
                             f"are TF_CONFIG's cluster.worker and task.index{unset})")
    if args.coordinator and count == 1:
        raise UsageError(f"--coordinator {args.coordinator}: expected TF_CONFIG on tensorflow (its cluster.worker lists "
                         "every worker's address), got none")
    return count, index


def leave_processes(args, model_path):
    """End the multi-process part of a run, on every process at once after training: stop JAX's
    distributed service, so no process waits at exit for process 0's export and translations.
    Process 0 gets its saved model (`model_path`) back on its own devices; the others raise
    `OtherProcessDone`."""
    if keras.backend.backend() == "jax":
        import jax

        jax.distributed.shutdown()
        keras.distribution.set_distribution(None)
    args.joined = False
    if args.process_id > 0:
        raise OtherProcessDone()
    return keras.saving.load_model(model_path)


def fed_batches(batches, ignored_label, local=False):
    """What this process feeds `fit` or `evaluate` of `batches`. On JAX: each batch padded into equal parts
    for the devices (`rows_padded_to_multiple`), then this process's rows of it when there are several
    processes. On TensorFlow: the batches with tf.data's `DATA` sharding, which under a
    `MultiWorkerMirroredStrategy` gives each worker its rows of every global batch (and does nothing
    otherwise). `local`: the batches are already this process's own equal part (read so), fed as they are."""
    count, index = 1, 0
    if local:
        return batches
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        return batches.with_options(options)
    if keras.backend.backend() == "jax":
        import jax

        count, index = jax.process_count(), jax.process_index()
    return process_rows(rows_padded_to_multiple(batches, batch_split_ways(), ignored_label), count, index)


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
    backend = keras.backend.backend()
    if getattr(args, "model_parallel", 1) > 1:
        return _model_parallel_scope(args, backend, model_sizes)
    if getattr(args, "workers_strategy", None) is not None:
        return args.workers_strategy.scope()
    if not args.distribute:
        return contextlib.nullcontext()
    if backend == "tensorflow":
        import tensorflow as tf

        # Every GPU; without one, every logical CPU device (MirroredStrategy's own default is CPU:0 alone).
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices]).scope()
    if backend == "jax":
        # Several processes: each feeds its own rows of every batch (fed_batches), so Keras must not shard the data again.
        keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
        return contextlib.nullcontext()
    raise UsageError("--distribute: expected the tensorflow or jax backend (Keras has no data-parallel fit on torch), got torch")


def _model_parallel_scope(args, backend, model_sizes):
    from keras_seq.distribution import model_parallel

    if backend != "jax":
        raise UsageError(f"--model-parallel: expected the jax backend (Keras splits models over devices on JAX only), got {backend}")
    if model_sizes is None:
        raise UsageError(f"--model-parallel: expected a Transformer model, got --model {args.model}")
    distribution = model_parallel(args.model_parallel, **model_sizes)
    distribution.auto_shard_dataset = False  # as for DataParallel in distribution_scope
    keras.distribution.set_distribution(distribution)
    return contextlib.nullcontext()


def batch_split_ways():
    """Into how many equal parts the current `keras.distribution` splits each batch (1 when it splits none).

    JAX places a batch on the devices only in equal parts; TensorFlow's strategies split
    uneven batches themselves.
    """
    distribution = keras.distribution.distribution() if keras.backend.backend() == "jax" else None
    if distribution is None or distribution.batch_dim_name is None:
        return 1
    mesh = distribution.device_mesh
    return int(mesh.shape[list(mesh.axis_names).index(distribution.batch_dim_name)])


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


def processes_on_this_host(count, backend):
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
    if backend == "tensorflow":
        workers = [f"127.0.0.1:{port}" for port in ports]
        return [([], {"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})})
                for index in range(count)]
    return [(["--num-processes", str(count), "--process-id", str(index), "--coordinator", f"127.0.0.1:{ports[0]}"], {})
            for index in range(count)]

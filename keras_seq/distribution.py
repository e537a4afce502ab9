"""Training past one device on `keras.distribution`: Megatron-style layout maps for the
Transformer models, and the multi-process start-up.

Model parallelism splits each Transformer block the way Megatron-LM does (Shoeybi et al.,
2019, section 3, figure 3): the query, key and value projections and the feed-forward's
first layer are split by columns (each device holds some heads, some hidden units), the
attention output projection and the feed-forward's second layer by rows, so a block needs
one all-reduce after attention and one after the feed-forward; the token embeddings and the
output projection are split along the vocabulary (section 3, "vocabulary parallel"). XLA's
SPMD partitioner (GSPMD) inserts the communication from these layouts. Keras' model-parallel
distribution runs on the JAX backend only.

    distribution = keras_seq.distribution.model_parallel(2, num_heads=4, intermediate_dim=512, vocabulary_sizes=[4000])
    keras.distribution.set_distribution(distribution)
    model = keras_seq.models.transformer_seq2seq(...)   # its variables are created sharded
"""

import os

import keras

from keras_seq import _validation as v

# Variable paths (regular expressions matching the whole `variable.path`) -> the axes they are split
# along: "model" is the model axis, None an axis kept whole. The names are those of
# `keras_seq.layers.MultiHeadAttention`, `TransformerEncoderBlock`/`TransformerDecoderBlock` and
# `TokenAndPositionEmbedding`, in every Transformer model of `keras_seq.models`.
_BLOCK_LAYOUTS = {
    r".*_attention/(query|key|value)_kernel": (None, "model", None),  # (D, H, D/H): column parallel, by heads
    r".*_attention/(query|key|value)_bias": ("model", None),
    r".*_attention/output_kernel": ("model", None, None),  # (H, D/H, D): row parallel
    r".*feed_forward_inner/kernel": (None, "model"),  # (D, F): column parallel
    r".*feed_forward_inner/bias": ("model",),
    r".*feed_forward_output/kernel": ("model", None),  # (F, D): row parallel
}
_VOCABULARY_LAYOUTS = {
    r".*token_embedding/embeddings": ("model", None),  # (V, D): vocabulary parallel
    r"logits/kernel": (None, "model"),  # (D, V) of an untied output projection
    r"logits/bias": ("model",),  # (V,), also of the tied projection
}


def transformer_layout_map(device_mesh, shard_vocabulary=True, model_axis="model", batch_axis="batch"):
    """A `keras.distribution.LayoutMap` splitting a keras_seq Transformer over `device_mesh`'s model axis.

    Every model of `keras_seq.models` built from Transformer blocks takes it:
    `transformer_seq2seq`, `transformer_lm`, `transformer_mlm`, `transformer_classifier`.
    Attention projections and feed-forward kernels are split as in Megatron-LM (the
    module docstring); with `shard_vocabulary`, the token embeddings and the output
    projection are split along the vocabulary too (every vocabulary size must then be a
    multiple of the model axis's size). Layer norms, biases of row-parallel layers and
    position embeddings are replicated. Data is split along `batch_axis`.

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` with axes `batch_axis` and `model_axis`.
        shard_vocabulary: also split the vocabulary tables (False: replicate them).
        model_axis, batch_axis: the mesh's axis names.
    """
    owner = "transformer_layout_map"
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        v.fail(owner, "device_mesh", "a keras.distribution.DeviceMesh", type(device_mesh).__name__)
    for name, axis in (("model_axis", model_axis), ("batch_axis", batch_axis)):
        if axis not in device_mesh.axis_names:
            v.fail(owner, name, f"one of the mesh's axis names {list(device_mesh.axis_names)}", axis)
    layout_map = keras.distribution.LayoutMap(device_mesh)
    layouts = {**_BLOCK_LAYOUTS, **(_VOCABULARY_LAYOUTS if shard_vocabulary else {})}
    for path, axes in layouts.items():
        layout_map[path] = tuple(model_axis if axis == "model" else None for axis in axes)
    return layout_map


def model_parallel(model_parallel_size, num_heads, intermediate_dim, vocabulary_sizes=(), devices=None):
    """A `keras.distribution.ModelParallel` over a (batch, model) mesh of `devices` (default: every device).

    Each model replica spans `model_parallel_size` devices (the "model" axis); the
    replicas split the batch (the "batch" axis, `len(devices) / model_parallel_size`
    of them). `num_heads` and `intermediate_dim` must be multiples of
    `model_parallel_size` (each device holds whole heads and a slice of the
    feed-forward); the vocabulary tables are split only when every size in
    `vocabulary_sizes` is a multiple too, and replicated otherwise (a SentencePiece
    model may come out a few pieces short of its requested size).
    Set it with `keras.distribution.set_distribution` before building the model.
    """
    owner = "model_parallel"
    v.check_positive_int(owner, "model_parallel_size", model_parallel_size)
    devices = list(devices if devices is not None else keras.distribution.list_devices())
    if len(devices) % model_parallel_size:
        v.fail(owner, "model_parallel_size", f"a divisor of the {len(devices)} devices", model_parallel_size)
    for name, size in (("num_heads", num_heads), ("intermediate_dim", intermediate_dim)):
        if size % model_parallel_size:
            v.fail(owner, name, f"a multiple of model_parallel_size={model_parallel_size}", size)
    mesh = keras.distribution.DeviceMesh(
        (len(devices) // model_parallel_size, model_parallel_size), ["batch", "model"], devices
    )
    shard_vocabulary = all(size % model_parallel_size == 0 for size in vocabulary_sizes)
    layout_map = transformer_layout_map(mesh, shard_vocabulary=shard_vocabulary)
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


# The environment variables a launcher sets, in the order they are read: Keras' own, then torchrun's
# and most cluster launchers' (the coordinator from MASTER_ADDR and MASTER_PORT together).
PROCESS_ENVIRONMENT = {
    "coordinator": ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "MASTER_ADDR"),
    "num_processes": ("KERAS_DISTRIBUTION_NUM_PROCESSES", "WORLD_SIZE"),
    "process_id": ("KERAS_DISTRIBUTION_PROCESS_ID", "RANK"),
}


def process_settings(coordinator=None, num_processes=None, process_id=None, environ=None):
    """`(coordinator address, number of processes, this process's id)` from the arguments, else the
    environment (`PROCESS_ENVIRONMENT`); `(None, 1, 0)` when neither names more than one process.

    What `keras.distribution.initialize` takes on every process of a multi-process run.
    """
    environ = os.environ if environ is None else environ
    found = {
        name: next((environ[key] for key in keys if environ.get(key)), None)
        for name, keys in PROCESS_ENVIRONMENT.items()
    }
    if found["coordinator"] == environ.get("MASTER_ADDR") and environ.get("MASTER_PORT"):
        found["coordinator"] = f"{environ['MASTER_ADDR']}:{environ['MASTER_PORT']}"
    owner = "process_settings"
    coordinator = found["coordinator"] if coordinator is None else coordinator
    count = _integer(owner, "num_processes", found["num_processes"] if num_processes is None else num_processes, 1)
    index = _integer(owner, "process_id", found["process_id"] if process_id is None else process_id, 0)
    if count < 1:
        v.fail(owner, "num_processes", "a positive integer", count)
    if not 0 <= index < count:
        v.fail(owner, "process_id", f"an id in [0, {count}) with num_processes={count}", index)
    if count > 1 and not coordinator:
        v.fail(owner, "coordinator", "the address host:port of process 0 when num_processes > 1", coordinator)
    return (coordinator if count > 1 else None), count, index


def _integer(owner, name, value, default):
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        v.fail(owner, name, "an integer", repr(value))

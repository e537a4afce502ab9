"""One `tf.data` pipeline for every recipe: id sequences batched with others of about their length, padded.

Each epoch is cut into pools of `pool_batches` batches; a pool is sorted by length and cut into
batches, so a batch holds sequences of about one length and little compute goes to padding
(the pooled sorting of Ott et al., 2018, "Scaling Neural Machine Translation", sec. 4, without
its token budget). A batch is padded to its longest sequence where the train step takes any
shape (TensorFlow on a CPU, torch), and to the next bucket edge where each new shape is compiled
(JAX; TensorFlow with an accelerator), so that a compiled step sees a handful of shapes. Each
epoch is shuffled by a draw keyed by `(seed, epoch)`: epoch e has the same order whether a run goes
straight through or resumes at e after a stop.
"""

import tensorflow as tf

from keras_seq import backend

POOL_BATCHES = 100  # batches sorted together: within a pool, lengths vary little from batch to batch
PAD_TO = ("auto", "longest", "edges")


def bucket_edges(max_length, smallest=8):
    """Padded lengths from `smallest` up to `max_length`, four per doubling, then `max_length` itself.

    From 8: 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, ... (steps of the largest power of two that is at
    most a quarter of the edge, and at least 2): from 8 on, a sequence is padded by at most a quarter
    of its length. The last edge is the longest sequence itself (a window of 65 tokens is padded to
    65), or `smallest` when that is longer.
    """
    edges = [smallest]
    while edges[-1] < max_length:
        step = max(2, 1 << max(0, (edges[-1] // 4).bit_length() - 1))
        edges.append(min(edges[-1] + step, max_length))
    return edges


def pads_to_edges(pad_to="auto"):
    """Whether batches are padded to bucket edges: "edges", or "auto" where each input shape is compiled."""
    if pad_to == "auto":
        return backend.compiles_each_input_shape()
    return pad_to == "edges"


def _flat_columns(features, largest):
    """`(row count, {name: (flat ids, row splits)}, longest of each row)` of the feature columns."""
    if not features:
        raise ValueError("padded_batches: `features` expected at least one column, got none")
    columns = {}
    for name, rows in features.items():
        rows = rows if isinstance(rows, tf.RaggedTensor) else tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1)
        columns[name] = (rows.flat_values, tf.cast(rows.row_splits, tf.int64))
    counts = {name: int(splits.shape[0]) - 1 for name, (_, splits) in columns.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"padded_batches: `features` expected columns of equal row counts, got {counts}")
    count = next(iter(counts.values()))
    lengths = tf.reduce_max(tf.stack([splits[1:] - splits[:-1] for _, splits in columns.values()]), axis=0)
    if count and int(tf.reduce_max(lengths)) > largest:
        raise ValueError(
            f"padded_batches: `max_length` expected to hold every sequence, got {largest} for a "
            f"sequence of {int(tf.reduce_max(lengths))} ids (drop longer ones first)"
        )
    return count, columns, lengths


def padded_batches(
    features,
    batch_size,
    max_length,
    to_model_inputs,
    seed=None,
    first_epoch=0,
    epochs=1,
    variants=1,
    pad_to="auto",
    pool_batches=POOL_BATCHES,
):
    """Batches of `to_model_inputs(padded features)` for epochs `first_epoch .. epochs-1`.

    Every epoch has `ceil(examples / batch_size)` batches, all full but the last of the last pool.

    Args:
        features: dict of name -> id sequences (a ragged tensor or lists of lists),
            one row per example, none longer than `max_length`.
        batch_size: examples per batch.
        max_length: the longest sequence; sets the largest bucket edge.
        to_model_inputs: maps the dict of padded `(B, L)` int32 tensors (every column
            padded to one width) to what `model.fit` takes, e.g. `(inputs, targets)`.
        seed: shuffles each epoch (the examples before pooling, then the batches) by a stateless
            draw keyed by `(seed, epoch)`; None keeps the order: pools in turn, each sorted by length.
            Either way a batch's rows come in the data's order.
        variants: the rows hold this many encodings of the same examples, one block
            after the other (e.g. subword splits drawn anew); epoch e reads block `e % variants`.
        pad_to: "longest" pads a batch to its longest sequence; "edges" to the smallest
            `bucket_edges(max_length)` edge that holds it (the short batch to the largest,
            one shape every epoch); "auto" picks "edges" where the backend compiles each
            input shape (`backend.compiles_each_input_shape`), else "longest".
        pool_batches: batches per pool sorted by length (larger pools: less padding, batches
            less varied in what they hold).
    """
    if pad_to not in PAD_TO:
        raise ValueError(f"padded_batches: `pad_to` expected one of {PAD_TO}, got {pad_to!r}")
    if batch_size < 1 or pool_batches < 1:
        raise ValueError(
            f"padded_batches: `batch_size` and `pool_batches` expected >= 1, got {batch_size} and {pool_batches}"
        )
    largest = bucket_edges(max_length)[-1]  # max_length, or the smallest edge if it is shorter
    row_count, columns, lengths = _flat_columns(features, largest)
    count = row_count // variants
    if count * variants != row_count:
        raise ValueError(
            f"padded_batches: `variants` expected to divide the {row_count} rows into equal blocks, got {variants}"
        )
    edges = tf.constant(bucket_edges(max_length) if pads_to_edges(pad_to) else [], tf.int32)
    ordering = dict(count=count, variants=variants, batch_size=batch_size, pool_batches=pool_batches, largest=largest)

    def one_epoch(epoch):
        order, batch_order = _epoch_order(lengths, seed, epoch, **ordering)
        return tf.data.Dataset.from_tensor_slices(batch_order).map(
            # A batch's rows in the data's order, not by length: the parts of a batch split across
            # processes then hold alike rows, not the shortest in one and the longest in the other.
            lambda index: _padded_batch(
                columns, tf.sort(order[index * batch_size : (index + 1) * batch_size]), batch_size, edges
            )
        )

    # One dataset per epoch, made as it is reached: `epochs` may be very large (training to a time budget).
    batches = tf.data.Dataset.range(first_epoch, epochs).flat_map(one_epoch)
    batches = batches.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    return batches.prefetch(2).with_options(backend.tf_data_without_autotuning())  # see there: why


def _epoch_order(lengths, seed, epoch, count, variants, batch_size, pool_batches, largest):
    """`(rows of the epoch in batch order, order of the batches)`: rows drawn, sorted by length within pools."""
    batch_count = -(-count // batch_size)
    order, batch_order = tf.range(count, dtype=tf.int64), tf.range(batch_count, dtype=tf.int64)
    if seed is not None:
        # A stateless draw keyed by (seed, epoch): epoch e's order is the same whether a run
        # goes straight through or resumes at e, and however often Keras iterates the data.
        keys = tf.random.stateless_uniform([count + batch_count], seed=tf.stack([tf.constant(seed, tf.int64), epoch]))
        order, batch_order = tf.argsort(keys[:count], stable=True), tf.argsort(keys[count:], stable=True)
    order = tf.cast(order, tf.int64) + (epoch % variants) * count  # this epoch's block of rows
    pool = tf.range(count, dtype=tf.int64) // (pool_batches * batch_size)
    key = pool * (largest + 1) + tf.gather(lengths, order)
    return tf.gather(order, tf.argsort(key, stable=True)), tf.cast(batch_order, tf.int64)


def _padded_batch(columns, indices, batch_size, edges):
    """The examples at row `indices`, every column padded to one width: the longest (at least 1), or an edge.

    With edges: the smallest edge that holds the longest; a short batch (fewer than `batch_size`
    rows) the largest edge, so that it has one shape whatever it holds.
    """
    batch = {
        name: tf.gather(tf.RaggedTensor.from_row_splits(ids, splits, validate=False), indices).to_tensor()
        for name, (ids, splits) in columns.items()
    }
    width = tf.maximum(tf.reduce_max(tf.stack([tf.shape(column)[1] for column in batch.values()])), 1)
    if edges.shape[0]:
        fitting = tf.gather(edges, tf.argmax(tf.cast(edges >= width, tf.int32)))
        width = tf.where(tf.shape(indices)[0] < batch_size, edges[-1], fitting)
    return {name: tf.pad(column, [[0, 0], [0, width - tf.shape(column)[1]]]) for name, column in batch.items()}


def count_batches(dataset):
    """Number of batches in one pass (a run's `steps_per_epoch`)."""
    return int(dataset.reduce(0, lambda count, _: count + 1))

"""One `tf.data` pipeline for every recipe: id sequences bucketed by length and padded.

Batches are padded to the upper edge of their length bucket (8, 16, 32, ... ids), so
a compiled train step sees a handful of shapes instead of one per batch, and little
compute goes to padding. Each epoch is shuffled by a draw keyed by `(seed, epoch)`: epoch e has the
same order whether a run goes straight through or resumes at e after a stop.
"""

import tensorflow as tf

from keras_seq import _backend


def bucket_edges(max_length, smallest=8):
    """Padded lengths 8, 16, 32, ... below `max_length`, then `max_length` itself.

    The last edge is the longest sequence rather than the next power of two: a
    window of 65 tokens is padded to 65, not 128 (twice the recurrent steps).
    """
    edges = [smallest]
    while edges[-1] * 2 < max_length:
        edges.append(edges[-1] * 2)
    if max_length > smallest:
        edges.append(max_length)
    return edges


def _example_reader(features):
    """`(count, example(i))`: the number of examples and a function giving example i as a dict of 1-D id tensors."""
    columns = {}
    for name, rows in features.items():
        columns[name] = rows if isinstance(rows, tf.RaggedTensor) else tf.ragged.constant(rows, dtype=tf.int32)
    ids = {name: rows.flat_values for name, rows in columns.items()}
    spans = {name: (rows.row_starts(), rows.row_lengths()) for name, rows in columns.items()}

    def example(i):
        return {name: ids[name][start[i] : start[i] + length[i]] for name, (start, length) in spans.items()}

    return int(next(iter(columns.values())).nrows()), example


def padded_batches(features, batch_size, max_length, to_model_inputs, seed=None, first_epoch=0, epochs=1, variants=1):
    """Batches of `to_model_inputs(padded features)` for epochs `first_epoch .. epochs-1`.

    Args:
        features: dict of name -> id sequences (a ragged tensor or lists of lists),
            one row per example; sequences past `max_length` must be dropped first.
        batch_size: examples per batch.
        max_length: the longest sequence; sets the largest bucket.
        to_model_inputs: maps the dict of padded `(B, L)` int32 tensors to what
            `model.fit` takes, e.g. `(inputs, targets)`.
        seed: shuffles each epoch by a stateless draw keyed by `(seed, epoch)`; None keeps the order.
        variants: the rows hold this many encodings of the same examples, one block
            after the other (e.g. subword splits drawn anew); epoch e reads block `e % variants`.
    """
    rows, example = _example_reader(features)
    count = rows // variants
    if count * variants != rows:
        raise ValueError(f"padded_batches: `variants` expected to divide the {rows} rows into equal blocks, got {variants}")
    edges = bucket_edges(max_length)
    names = list(features)

    def length(example):
        return tf.reduce_max(tf.stack([tf.shape(example[name])[0] for name in names]))

    def one_epoch(epoch):
        order = tf.range(count, dtype=tf.int64)
        if seed is not None:
            # A stateless draw keyed by (seed, epoch): epoch e's order is the same whether a run
            # goes straight through or resumes at e, and however often Keras iterates the data.
            keys = tf.random.stateless_uniform([count], seed=tf.stack([tf.constant(seed, tf.int64), epoch]))
            order = tf.argsort(keys, stable=True)
        order = tf.cast(order, tf.int64) + (epoch % variants) * count
        return tf.data.Dataset.from_tensor_slices(order).map(example).bucket_by_sequence_length(
            length,
            bucket_boundaries=[edge + 1 for edge in edges[:-1]],
            bucket_batch_sizes=[batch_size] * len(edges),
            pad_to_bucket_boundary=False,
        )

    # One dataset per epoch, made as it is reached: `epochs` may be very large (training to a time budget).
    batches = tf.data.Dataset.range(first_epoch, epochs).flat_map(one_epoch)
    batches = batches.map(lambda example: to_model_inputs(_padded_to_edge(example, edges)), num_parallel_calls=tf.data.AUTOTUNE)
    return batches.prefetch(2).with_options(_backend.tf_data_without_autotuning())  # see there: why


def _padded_to_edge(batch, edges):
    """Pad every `(B, L)` column to the smallest edge >= the longest column (one shape per bucket)."""
    longest = tf.reduce_max(tf.stack([tf.shape(column)[1] for column in batch.values()]))
    edges = tf.constant(edges)
    width = tf.gather(edges, tf.argmax(tf.cast(edges >= longest, tf.int32)))
    return {name: tf.pad(column, [[0, 0], [0, width - tf.shape(column)[1]]]) for name, column in batch.items()}


def count_batches(dataset):
    """Number of batches in one pass (a run's `steps_per_epoch`)."""
    return int(dataset.reduce(0, lambda count, _: count + 1))

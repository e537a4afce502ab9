"""One `tf.data` pipeline for every recipe: id sequences bucketed by length and padded.

Batches are padded to the upper edge of their length bucket (8, 16, 32, ... ids), so
a compiled train step sees a handful of shapes instead of one per batch, and little
compute goes to padding. Each epoch is shuffled with `seed + epoch`: epoch e has the
same order whether a run goes straight through or resumes at e after a stop.
"""

import tensorflow as tf

from keras_seq import _backend


def bucket_edges(max_length, smallest=8):
    """Padded lengths 8, 16, 32, ... up to the first that holds `max_length` ids."""
    edges = [smallest]
    while edges[-1] < max_length:
        edges.append(edges[-1] * 2)
    return edges


def _examples(features):
    """A dataset of per-example dicts of 1-D id tensors from equal-length lists of id sequences."""
    columns = {}
    for name, rows in features.items():
        columns[name] = rows if isinstance(rows, tf.RaggedTensor) else tf.ragged.constant(rows, dtype=tf.int32)
    ids = {name: rows.flat_values for name, rows in columns.items()}
    spans = {name: (rows.row_starts(), rows.row_lengths()) for name, rows in columns.items()}
    return tf.data.Dataset.from_tensor_slices(spans).map(
        lambda spans: {name: ids[name][start : start + length] for name, (start, length) in spans.items()}
    )


def padded_batches(features, batch_size, max_length, to_model_inputs, seed=None, first_epoch=0, epochs=1):
    """Batches of `to_model_inputs(padded features)` for epochs `first_epoch .. epochs-1`.

    Args:
        features: dict of name -> id sequences (a ragged tensor or lists of lists),
            one row per example; sequences past `max_length` must be dropped first.
        batch_size: examples per batch.
        max_length: the longest sequence; sets the largest bucket.
        to_model_inputs: maps the dict of padded `(B, L)` int32 tensors to what
            `model.fit` takes, e.g. `(inputs, targets)`.
        seed: shuffles each epoch with `seed + epoch`; None keeps the order.
    """
    examples = _examples(features)
    edges = bucket_edges(max_length)
    names = list(features)

    def length(example):
        return tf.reduce_max(tf.stack([tf.shape(example[name])[0] for name in names]))

    def one_epoch(epoch):
        data = examples
        if seed is not None:
            # Not reshuffled per iteration: Keras iterates a dataset once to build an unbuilt
            # model, then again to train, so only a fixed order keeps epoch e's order a
            # function of `seed + e` alone (and a resumed run equal to an uninterrupted one).
            data = data.shuffle(int(data.cardinality()), seed=seed + epoch, reshuffle_each_iteration=False)
        return data.bucket_by_sequence_length(
            length,
            bucket_boundaries=[edge + 1 for edge in edges[:-1]],
            bucket_batch_sizes=[batch_size] * len(edges),
            pad_to_bucket_boundary=False,
        )

    batches = one_epoch(first_epoch)
    for epoch in range(first_epoch + 1, epochs):
        batches = batches.concatenate(one_epoch(epoch))
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

"""What `common.train` reads: training batches from a data position on, and where n steps lead.

A data position is `(epoch, batch)`. `PreparedBatches` reads a prepared folder (memory-mapped
ids, `keras_seq.data.prepared`) by a `BatchPlan`: it starts at any position at once, each
process reads only its own rows of each batch, and it carries the prepared data's digest,
which a checkpoint records so that `--resume` on other data is refused. `InMemoryBatches`
wraps a recipe's in-memory `tf.data` epochs (`pipeline.padded_batches`): it reaches a
position by skipping the batches before it, which costs little on data held in memory.
"""

from keras_seq.data import batch_plan


def _signature(columns):
    import tensorflow as tf

    return {name: tf.TensorSpec([None, None], tf.int32) for name in columns}


class PreparedBatches:
    """Batches of a `prepared.Prepared` folder by a `batch_plan.BatchPlan`, mapped by `to_model_inputs`.

    `steps_per_epoch` is the first epoch's batch count (every epoch's with `batch_size`; with
    `batch_tokens` later epochs differ by a few batches).
    """

    def __init__(self, data, plan, to_model_inputs, digest, process_index=0, process_count=1):
        self.data, self.plan, self.to_model_inputs, self.digest = data, plan, to_model_inputs, digest
        self.process_index, self.process_count = process_index, process_count
        self.steps_per_epoch = plan.batch_count(0)
        self.local = process_count > 1  # each process yields its own rows of every batch

    def dataset(self, position):
        """The batches from `position` on, without end, as a `tf.data.Dataset` of model inputs."""
        import tensorflow as tf

        from keras_seq import backend

        position = tuple(int(p) for p in position)
        batches = tf.data.Dataset.from_generator(
            lambda: batch_plan.batches_from(self.data, self.plan, position, self.process_index, self.process_count),
            output_signature=_signature(self.data.columns),
        )
        return batches.map(self.to_model_inputs).prefetch(2).with_options(backend.tf_data_without_autotuning())

    def one_batch(self):
        return self.dataset((0, 0)).take(1)

    def position_after(self, position, steps):
        return self.plan.position_after(tuple(position), steps)

    def target_tokens(self, position):
        """Tokens the model predicts in the batch at `position`, over all processes: the last
        column's ids less one a row (its start mark is fed, never predicted; its end mark is)."""
        epoch, index = position
        indices = self.plan.batch(epoch, index)[0]
        return self.data.ids_in_rows(self.data.columns[-1], epoch % self.plan.variants, indices) - len(indices)

    def read(self):
        """What this process has read of the data: rows, bytes, and ids of each column."""
        return {"rows": self.data.rows_read, "bytes": self.data.bytes_read, "ids": dict(self.data.ids_read)}


class InMemoryBatches:
    """A recipe's in-memory batches: `batches(seed, first_epoch, epochs)`, `epochs` as many as a run may read."""

    digest = None
    local = False

    def __init__(self, batches, seed, epochs=10**6):
        from keras_seq.data import pipeline

        self.batches, self.seed, self.epochs = batches, seed, epochs
        self.steps_per_epoch = pipeline.count_batches(batches(None, 0, 1))

    def dataset(self, position):
        epoch, batch = position
        # repeat(): Keras may look one batch past the last epoch; it is never trained on.
        return self.batches(self.seed, epoch, self.epochs).skip(batch).repeat()

    def one_batch(self):
        return self.batches(None, 0, 1).take(1)

    def position_after(self, position, steps):
        return tuple(
            int(p) for p in divmod(position[0] * self.steps_per_epoch + position[1] + steps, self.steps_per_epoch)
        )

    def read(self):
        return None

    target_tokens = None  # not counted: the batches are a recipe's own tf.data

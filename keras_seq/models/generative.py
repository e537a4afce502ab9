"""The `generate` method shared by every keras_seq language model and seq2seq model."""

import keras
from keras import ops

from keras_seq import decoding
from keras_seq.layers.embedding import TiedLogits
from keras_seq.models.config import ConfigFromArguments
from keras_seq.models.keras_workarounds import MaskedLogitsModel


class GenerativeModel(ConfigFromArguments, MaskedLogitsModel):
    """A functional `keras.Model` that can also decode autoregressively.

    Subclasses build their graph in `__init__`, pass it to `keras.Model`, keep their
    constructor arguments in `self._config` (`constructor_arguments`: `.keras` files
    rebuild them) and implement `_decoding_start`, `_decoding_step` and
    `decoding_vocabulary_size` (see `keras_seq.decoding`); `_decoding_reads_cache_rows = True` if their
    `_decoding_step` takes `cache_rows` (beam search then reorders no cache);
    `_decoding_cache_time_axis`, the axis of every cache tensor that holds its positions, where
    there is one (`decoding.resize_cache`);
    `_inputs_are_prompts = False` for seq2seq models, and `_length_limits` where
    positions are bounded. A model whose logits layer is `self.head` gets its step weights
    (`_decoding_weights`); its `_decoding_step` takes `weights=` when that head is tied.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled_decoders = {}

    # `model.generate(inputs, max_length, ...)`: the one decoding entry point, documented there.
    generate = decoding.generate

    def _decoding_weights(self):
        """`keras_seq.decoding`'s step weights: a tied head's transposed table, as `TiedLogits`'s `kernel`; None
        for any other head, whose kernel is laid out for the product already."""
        head = getattr(self, "head", None)  # every keras_seq model names its logits layer `head`
        return {"kernel": head.transposed_table()} if isinstance(head, TiedLogits) else None

    @property
    def input_vocabulary_size(self):
        """Bound of the ids `generate` takes: the prompt's (the target) vocabulary by default."""
        return self.decoding_vocabulary_size

    def _input_ids(self, inputs):
        """The id tensor inside `generate`'s inputs (the inputs themselves by default)."""
        return inputs

    @property
    def _length_limits(self):
        """`(most input ids, largest max_length)` that `generate` can decode; None: unbounded."""
        return None, None

    @staticmethod
    def _repeated(rows, copies):
        """Each row of every tensor in `rows` (a nest) `copies` times in a row: the rows of a decoding batch."""
        return rows if copies == 1 else keras.tree.map_structure(lambda x: ops.repeat(x, copies, axis=0), rows)

    def _id_buffer(self, prefix, max_length):
        """`(B, max_length)` ids starting with `prefix` (a prompt, or the start id), zeros after."""
        prefix_length = prefix.shape[1]
        return ops.pad(prefix, ((0, 0), (0, max_length - prefix_length))), prefix_length

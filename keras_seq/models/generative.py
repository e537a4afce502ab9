"""The `generate` method shared by every keras_seq language model and seq2seq model."""

import keras
from keras import ops

from keras_seq import decoding
from keras_seq.decoding_contract import Decodable
from keras_seq.layers.embedding import TiedLogits
from keras_seq.models.config import ConfigFromArguments
from keras_seq.models.keras_workarounds import MaskedLogitsModel


class GenerativeModel(ConfigFromArguments, MaskedLogitsModel, Decodable):
    """A functional `keras.Model` that can also decode autoregressively: `model.generate(...)`.

    Subclasses build their graph in `__init__`, pass it to `keras.Model`, keep their
    constructor arguments in `self._config` (`constructor_arguments`: `.keras` files
    rebuild them) and implement the decoding contract they inherit
    (`keras_seq.decoding_contract.Decodable`, where each method is documented). A model
    whose logits layer is `self.head` gets its step weights: a tied head's table.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled_decoders = {}

    # `model.generate(inputs, max_length, ...)`: the one decoding entry point, documented there.
    generate = decoding.generate

    def decoding_step_weights(self):
        """A tied head's transposed table, as `TiedLogits`'s `kernel`; None for any other head, whose kernel is
        laid out for the product already (see `Decodable.decoding_step_weights`)."""
        head = getattr(self, "head", None)  # every keras_seq model names its logits layer `head`
        return {"kernel": head.transposed_table()} if isinstance(head, TiedLogits) else None

    @staticmethod
    def _repeated(rows, copies):
        """Each row of every tensor in `rows` (a nest) `copies` times in a row: the rows of a decoding batch."""
        return rows if copies == 1 else keras.tree.map_structure(lambda x: ops.repeat(x, copies, axis=0), rows)

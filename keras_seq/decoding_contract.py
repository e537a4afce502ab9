"""The decoding contract: the methods a model implements for `keras_seq.decoding` to decode it.

`Decodable` declares the methods and attributes that `generate`, `decode` and the
SavedModel export (`keras_seq.export`) read of a model (a Keras model, whose variables
they read too), each documented once, there; the CTranslate2 converter reads the
vocabulary sizes from it, and the rest from the Transformer it converts. keras_seq's
language and seq2seq models inherit it through `keras_seq.models.generative.GenerativeModel`;
another model inherits it and implements its required methods (`REQUIRED`). `require` turns a model that lacks
the contract away with a ValueError naming what is missing, before anything is traced.

Shapes: `B` input rows; `copies` consecutive rows per input row (the beams, or the
sequences sampled per input row); `R = B * copies` decoding rows; `n` positions
read by one step; `V` the vocabulary of the decoded ids (`decoding_vocabulary_size`).
The cache is a nest of tensors (any structure `keras.tree` maps over) whose rows lie
on axis 0; the context is a nest of tensors that stays fixed while decoding.
"""

import keras
from keras import ops

from keras_seq import _validation as v

# The members a model must define itself: `Decodable`'s own raise NotImplementedError.
REQUIRED = ("decoding_vocabulary_size", "start_decoding", "decoding_step")


class Decodable:
    """The methods and attributes a model implements to be decoded by `keras_seq.decoding`.

    A mixin: it holds no state and defines no `__init__`. `decoding_vocabulary_size`,
    `start_decoding` and `decoding_step` are required; every other member has a
    default that fits a language model whose whole cache follows its rows.

    The decoding writes each row's prefix (the prompt, or the start id of a seq2seq
    model) into an id buffer of `max_length` ids, asks `start_decoding` for the
    empty cache and the context, reads the prefix with one `decoding_step`, then
    calls `decoding_step` once per new token, with the token just chosen. Beam
    search reorders the rows between steps (`reorder_cache`, or `cache_rows`).
    """

    # True: `generate`'s inputs are prompts that the output ids continue (language models); False: they are a
    # source, and the output starts from the start id (seq2seq models). The training-side padding mask reads it
    # too (`MaskedLogitsModel`), hence its name.
    _inputs_are_prompts = True

    # True: `start_decoding` returns its context once per input row (`B` rows), not repeated `copies` times, and
    # `decoding_step` reads it for the `copies` consecutive rows of each (its `copies` argument): a source's beams
    # then share their encoder outputs, computed and stored once.
    decoding_shares_context = False

    # True: beam search reorders no cache; `decoding_step` takes `cache_rows` `(R, cache length)`, the row whose
    # cache holds each position of a row's history, and reads its cache through it (no step copies the cache).
    # False: every step's surviving beams take their parents' cache (`reorder_cache`).
    decoding_reads_cache_rows = False

    # The axis of every cache tensor that holds its positions (2 for the Transformers' `(R, 2, positions, H, d)`),
    # or None (a recurrent state has none). With an axis the decoding holds the cache to the positions written so
    # far and grows it as it goes (`keras_seq.decoding.cache_windows`): attention then costs what is written.
    decoding_cache_time_axis = None

    @property
    def decoding_vocabulary_size(self):
        """`V`, the size of the vocabulary of the decoded ids (the last axis of `decoding_step`'s logits).

        Required: it bounds `end_id`, `start_id` and the beams, and sizes the logits.
        """
        raise NotImplementedError(f"{type(self).__name__} must define `decoding_vocabulary_size`.")

    @property
    def input_vocabulary_size(self):
        """The bound of the ids `generate` takes (the source vocabulary of a seq2seq model; `V` by default).

        Inputs are checked against it before they reach an embedding lookup.
        """
        return self.decoding_vocabulary_size

    @property
    def decoding_length_limits(self):
        """`(most input ids, largest max_length)` the model can decode, None where unbounded (the default).

        Learned positions bound both; `generate` checks them before tracing.
        """
        return None, None

    def decoding_input_ids(self, inputs):
        """The `(B, L)` id tensor inside `generate`'s `inputs` (the inputs themselves by default).

        The checks and the prefix read it; a model with more inputs (e.g. a condition
        vector) picks its ids out and raises a ValueError for inputs of the wrong structure.
        """
        return inputs

    def start_decoding(self, inputs, max_length, copies):
        """`(cache, context)` for `copies` consecutive decoding rows per row of `inputs`, before any id is read.

        The cache is empty (or holds a seq2seq model's first decoder states), sized
        up front for `R` rows and `max_length` positions; it only changes through
        `decoding_step`. The context is what every step reads but never changes,
        computed once per input row (e.g. the encoder outputs of a source, the
        condition vector of a language model; None if there is none), repeated for
        its `copies` rows unless `decoding_shares_context`. Required: the one place a
        model prepares its decoding, so no step recomputes the source.
        """
        raise NotImplementedError(f"{type(self).__name__} must define `start_decoding`.")

    def decoding_step_weights(self):
        """A nest of tensors laid out from the weights once per decoding for the steps to read, or None (default).

        E.g. a tied output layer's `E^T` as an array of its own, so that no step
        transposes the embedding table again; `decoding_step` receives it as `weights`.
        """
        return None

    def decoding_step(self, ids, cache, index, context, cache_rows=None, copies=1, weights=None):
        """`(logits (R, n, V), cache)`: the float logits of the `n` positions of `ids` `(R, n)` placed from
        `index` on, each given every position before it, and the cache with those positions added.

        `index` is an int32 scalar (a tensor while tracing); `context` is
        `start_decoding`'s; `cache_rows` `(R, cache length)` is given to a model
        that `decoding_reads_cache_rows` during beam search (None otherwise);
        `copies` is the number of rows per input row; `weights` is
        `decoding_step_weights()` (None when that is None). The decoding reads the
        prefix with one call (`n` its length) and then one token per call (`n = 1`);
        what it does with the logits (greedy, sampling, beam search with its
        penalties, n-best, a forced prefix) is its own, so the step only scores the
        next ids. Required: the cached step that makes a token cost one position.
        """
        raise NotImplementedError(f"{type(self).__name__} must define `decoding_step`.")

    def decoding_alignment(self, encoder_ids, decoder_ids):
        """Weights `(B, T, S)` of each decoder position over the source ids `encoder_ids` `(B, S)` (teacher forcing
        on `decoder_ids` `(B, T)`, the ids fed in: row t is where the model looked to write id t + 1), or None
        (the default) for a model without attention.

        The export returns them beside each translation (`return_alignment`): what the model read to write it.
        """
        return None

    def compiled_decoder(self, key, compile_decoder):
        """The decoder `compile_decoder()` compiles for `key` (the settings and input shapes of a `generate` call),
        compiled once per model and key: a new call with the same key runs the same program."""
        decoders = vars(self).setdefault("_compiled_decoders", {})
        if key not in decoders:
            decoders[key] = compile_decoder()
        return decoders[key]

    def reorder_cache(self, cache, rows):
        """The cache of the rows `rows` `(R,)` int32, in that order: each surviving beam takes its parent's cache.

        Beam search calls it between steps unless `decoding_reads_cache_rows`. The
        default gathers axis 0 of every tensor of the cache.
        """
        return keras.tree.map_structure(lambda x: ops.take(x, rows, axis=0), cache)


def require(model, owner):
    """Raise a ValueError naming what `model` lacks of the decoding contract (`Decodable`), if anything.

    `owner` names the caller in the message. A model that inherits `Decodable` must
    define the `REQUIRED` members; any other object fails, the contract's members it
    has no attribute for named, so a wrong object is told apart from an unfinished model.
    """
    if isinstance(model, Decodable):
        missing = [name for name in REQUIRED if getattr(type(model), name) is getattr(Decodable, name)]
        if missing:
            v.fail(
                owner,
                "model",
                f"a keras_seq Decodable that defines {', '.join(REQUIRED)}",
                f"{type(model).__name__}, which does not define {', '.join(missing)}",
            )
        return
    members = [name for name in dir(Decodable) if not name.startswith("__")]
    missing = [name for name in members if not hasattr(type(model), name)]
    lacks = f" and lacks {', '.join(missing)}" if missing else ""
    v.fail(
        owner,
        "model",
        "a model that inherits keras_seq.models.Decodable (the decoding contract)",
        f"{type(model).__name__}, which does not inherit it{lacks}",
    )

"""String-in, string-out TensorFlow SavedModels of trained keras_seq models.

A SavedModel written here holds the model's weights, the vocabularies as lookup
tables or SentencePiece models, the tokenization (`keras_seq.data.text`, TensorFlow
string ops, or `keras_seq.data.subword`, tensorflow-text's SentencePiece op) and, for
a translator, beam search (`keras_seq.decoding.decode`) inside the graph, so it
serves raw strings with TensorFlow alone (and tensorflow-text for a subword
vocabulary: `import tensorflow_text` registers its ops before loading), without
keras_seq or Keras installed:

    import tensorflow_text  # only for subword vocabularies
    translator = tf.saved_model.load("run/export")
    translator.translate(tf.constant(["I see the cat."]))  # -> [b"Je vois le chat."]

Writing one needs the TensorFlow backend; `export_run` starts a TensorFlow-backend
process when the model was trained on JAX or PyTorch (`.keras` files load on any
backend), so export works whatever backend trained the model.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np

from keras_seq import _atomic as atomic
from keras_seq import _validation as v
from keras_seq import backend

RUN_CONFIG = "export_config.json"


def _serving_module(owner, model, **vocabularies):
    """A `tf.Module` holding `model` and each vocabulary's lookup table under the given name."""
    if not backend.traces_saved_models():
        v.fail(owner, "backend", "the TensorFlow backend (or use export_run, which starts one)", backend.NAME)
    import tensorflow as tf

    module = tf.Module()
    module.model = model
    for name, vocabulary in vocabularies.items():
        setattr(module, name, vocabulary.lookup_table())
    return module


def _save(module, path, function, *more):
    """Save `module` with each function as its named signature, the first also as the serving default."""
    import tensorflow as tf

    signatures = {"serving_default": function}
    for each in (function, *more):
        setattr(module, each.__name__, each)
        signatures[each.__name__] = each
    tf.saved_model.save(module, path, signatures=signatures)


def _least_at_least(ladder, count):
    """The least entry of the int32 tensor `ladder` >= `count` (an int32 scalar tensor), else its last entry."""
    import tensorflow as tf

    return tf.reduce_min(tf.where(ladder >= count, ladder, ladder[-1]))


# The row counts a decoding compiles for: powers of two and 1.5 times them, a few per octave, none
# over 1.5 times what a call needs.
ROW_LADDER = tuple(sorted({2**power for power in range(30)} | {3 * 2**power // 2 for power in range(30)}))


def rows_for(count):
    """The least entry of `ROW_LADDER` >= `count` (a Python int): the rows a call of `count` sentences decodes."""
    return next((rows for rows in ROW_LADDER if rows >= count), ROW_LADDER[-1])


def row_counts_of_call(sentences):
    """The row counts a call of `sentences` sentences decodes with (0: a lone sentence's program), `PARTS` parts
    from `SPLIT_FROM` sentences on (as `export_translator`'s graph routes them)."""
    if sentences <= 1:
        return {0}
    if sentences < SPLIT_FROM:
        return {rows_for(sentences)}
    size = -(-sentences // PARTS)
    return {rows_for(min(size, sentences - part * size)) for part in range(PARTS) if part * size < sentences}


def _size_at_least(count):
    """`rows_for` in the graph: the least entry of `ROW_LADDER` >= `count` (an int32 scalar tensor)."""
    import tensorflow as tf

    return _least_at_least(tf.constant(ROW_LADDER, tf.int32), count)


def _lengths(ids):
    """The ids in each row of `ids` `(..., S)`, whose padding (id 0) comes last: `(...,)` int32."""
    import tensorflow as tf

    return tf.reduce_sum(tf.cast(ids != 0, tf.int32), axis=-1)


def _few_shapes(ids, source_length, least_rows=1):
    """`ids` `(B, S)` (id 0 pads) cut to its longest row, then padded to a row count of `_size_at_least` (repeating
    its rows), `least_rows` or more, and to a multiple of 16 ids.

    XLA compiles the decoding once per input shape (seconds each): this bounds the
    shapes a server meets to a few per octave. Padded ids are masked and
    repeated rows are decoded like the originals, then dropped; an empty batch
    becomes one row of padding.
    """
    import tensorflow as tf

    width = tf.maximum(tf.reduce_max(_lengths(ids)), 0)  # an empty batch's maximum is int32's least
    ids = tf.pad(ids[:, :width], [[0, 0], [0, _padded_width(width, source_length) - width]])
    return _few_rows(ids, least_rows)


def _few_rows(x, least_rows=1):
    """`x` `(B, W)` with its rows repeated to a row count of `_size_at_least(max(B, least_rows))` (an empty `x`:
    rows of zeros): `_few_shapes`' rows, for a tensor with one row per sentence."""
    import tensorflow as tf

    batch = tf.shape(x)[0]
    x = tf.concat([x, tf.zeros([1 - tf.minimum(batch, 1), tf.shape(x)[1]], x.dtype)], axis=0)
    return tf.gather(x, tf.range(_size_at_least(tf.maximum(batch, least_rows))) % tf.shape(x)[0])


def _padded_width(width, source_length):
    """`width` ids (an int32 scalar tensor) padded to a multiple of 16, at least 16 and at most `source_length`."""
    import tensorflow as tf

    return tf.minimum((tf.maximum(width, 1) + 15) // 16 * 16, source_length)


def _alone(ids, source_length, least_rows):
    """`_few_shapes` for a batch of one sentence or none (`(B, S)`, B <= 1, S its length): one row (padding for
    none) `least_rows` times, padded to `_padded_width`, in fewer operations (a server runs them one by one)."""
    import tensorflow as tf

    width = tf.shape(ids)[1]
    return _alone_rows(tf.pad(ids, [[0, 0], [0, _padded_width(width, source_length) - width]]), least_rows)


def _alone_rows(x, least_rows):
    """`_alone`'s rows of `x` `(B, W)`, B <= 1: its row (zeros for none) `least_rows` times."""
    import tensorflow as tf

    return tf.tile(tf.pad(x, [[0, 1 - tf.shape(x)[0]], [0, 0]]), [least_rows, 1])


DROP_EVERY = 4  # decoding steps per XLA call, between two drops of the ended sentences
# Greedy decoding runs at least two rows (a lone sentence twice, a last one beside an ended one): XLA on the CPU
# makes the products of one row matrix-vector loops that transpose the output embedding at every step.
GREEDY_LEAST_ROWS = 2
# A batch of SPLIT_FROM sentences or more is decoded as PARTS parts at once (see export_translator).
SPLIT_FROM, PARTS = 16, 4
# The options given per sentence, one row each (`decoding.decode`'s names): they follow the sentences' rows.
PER_SENTENCE_OPTIONS = ("target_prefix", "required_ids")


def _per_sentence(options, rows_of):
    """`options` with `rows_of(x)` in place of each per-sentence option `x` (`PER_SENTENCE_OPTIONS`)."""
    return {name: rows_of(x) if name in PER_SENTENCE_OPTIONS else x for name, x in options.items()}


def _window_at_least(model, count, max_length):
    """The least of `decoding.cache_windows` >= `count`: the cache length a call that steps to position `count`
    attends over (the ladder from position 1 holds every window, whatever position the decoding started at)."""
    import tensorflow as tf

    from keras_seq import decoding

    return _least_at_least(tf.constant(decoding.cache_windows(model, 1, max_length)), count)  # ends at max_length


class _DroppingDecoder:
    """`decoding.decode` of sources `(B, S)` (ids `(B, n, max_length)` and scores `(B, n)`), dropping the ended
    sentences as it goes.

    Runs `DROP_EVERY` steps at a time as one XLA program, then goes on with the
    sentences still decoding, padded with ended ones to a size of `_size_at_least`: a
    batch whose last sentence runs to `max_length` (a weak model's beams wander
    there) costs that sentence's rows, not the batch's. The cache grows with the
    steps (`_window_at_least`, `decoding.resize_cache`); the rows never drop below
    `least_rows` (`GREEDY_LEAST_ROWS`). Each count of rows and
    cache length is compiled once, at its first use, and shared by every call of
    one decoder (the parts of a batch decoded at once compile nothing twice); a
    lone sentence is decoded by one XLA program, start to end. `model`: a
    `keras_seq.decoding_contract.Decodable`. `weights`: its `decoding.step_weights`,
    as variables kept by the SavedModel, or None.
    """

    def __init__(self, model, max_length, settings, least_rows=1, weights=None):
        import tensorflow as tf

        from keras_seq import decoding

        self.model, self.max_length, self.settings, self.least_rows = model, max_length, settings, least_rows

        def start(ids, options=None):
            seed, settings = self._seed_and_settings(options)
            return decoding.search_start(model, ids, seed, max_length, True, weights, **settings)

        def steps(state, stop, options=None):  # the state less its context (`decoding.split_context`)
            state = decoding.search_steps(model, state, stop, **self._with(options))
            return (decoding.split_context(state)[0], *decoding.unfinished_groups(state))

        def whole(ids, options=None):
            seed, settings = self._seed_and_settings(options)
            return decoding.decode(model, ids, seed, max_length, weights, **settings)

        self.start, self.steps, self.whole = (
            tf.function(f, jit_compile=True, autograph=False) for f in (start, steps, whole)
        )

    def _with(self, options):
        """The decoder's settings with `options` (those given at run time, or None) in place of its own."""
        return {**self.settings, **(options or {})}

    def _seed_and_settings(self, options):
        """`(seed, settings)`: the sampling seed given at run time (0 if none), apart from the other settings."""
        import tensorflow as tf

        settings = self._with(options)
        return settings.pop("seed", tf.constant(0)), settings

    def __call__(self, ids, options=None):
        """Decode `ids` by the loop over the compiled `start` and `steps` (a lone sentence: `whole`); `options`:
        the settings given at run time (`decoding.decode`'s names, scalar tensors), beside the decoder's own."""
        import tensorflow as tf

        from keras_seq import decoding

        model, max_length = self.model, self.max_length
        options = options or {}
        limit = options.get("length_limit", max_length)
        state = self.start(ids, options)
        copies = state["groups"]["done"].shape[1]
        # The per-sentence options and the seed are read at the start (the state keeps the seed).
        stepping = {name: x for name, x in options.items() if name not in (*PER_SENTENCE_OPTIONS, "seed")}

        def results(state):  # what `search_result` reads
            groups = {name: x for name, x in state["groups"].items() if name != "done"}
            return {"ids": tf.reshape(state["rows"]["ids"], (-1, copies, max_length)), **groups}

        def condition(state, origin, outputs):
            return tf.logical_and(state["step"] < limit, tf.logical_not(tf.reduce_all(state["groups"]["done"])))

        def body(state, origin, outputs):
            sentences = tf.shape(origin)[0]
            # One sentence left: on to the end of its cache window, then the next window.
            to_window_end = _window_at_least(model, state["step"] + 1, max_length)
            stop = tf.where(sentences > 1, tf.minimum(state["step"] + DROP_EVERY, max_length), to_window_end)
            state = decoding.resize_cache(model, state, _window_at_least(model, stop, max_length))
            stepped, order, unfinished = self.steps(state, stop, stepping)
            state = decoding.join_context(stepped, decoding.split_context(state)[1])
            news = results(state)
            outputs = {name: tf.tensor_scatter_nd_update(x, origin[:, None], news[name]) for name, x in outputs.items()}
            kept = order[: tf.maximum(_size_at_least(unfinished), self.least_rows)]
            return tf.cond(
                tf.shape(kept)[0] < sentences,
                lambda: (decoding.take_groups(state, kept), tf.gather(origin, kept)),
                lambda: (state, origin),
            ) + (outputs,)

        loop_vars = (state, tf.range(tf.shape(ids)[0]), results(state))
        time_axes = decoding.cache_time_axes(model) or {}
        rows_shapes = {  # the row count changes between calls, and the cache length
            name: tf.nest.map_structure(lambda x: _free_axes(x.shape, 0, time_axes.get(name)), value)
            for name, value in state["rows"].items()
        }
        by_group = lambda part: tf.nest.map_structure(lambda x: _free_axes(x.shape, 0), part)  # noqa: E731
        invariants = (
            {
                **tf.nest.map_structure(lambda x: x.shape, state),
                "rows": rows_shapes,
                "groups": by_group(state["groups"]),
                **({"sources": by_group(state["sources"])} if "sources" in state else {}),
            },
            tf.TensorShape([None]),
            tf.nest.map_structure(lambda x: x.shape, loop_vars[2]),
        )
        _, _, outputs = tf.while_loop(condition, body, loop_vars, shape_invariants=invariants)
        ended = {"rows": {"ids": tf.reshape(outputs.pop("ids"), (-1, max_length))}, "groups": outputs}
        return decoding.search_result(ended, **self._with(stepping))


def _free_axes(shape, *axes):
    """`shape` with the sizes of `axes` (None ones skipped) left open."""
    import tensorflow as tf

    return tf.TensorShape([None if axis in axes else size for axis, size in enumerate(shape)])


def _best_by_route(decoder, source_length, least_rows):
    """`best(ids (B, S), options) -> (ids (B, n, max_length), scores (B, n))`: `decoder` (a `_DroppingDecoder`)
    on `ids` cut to `_few_shapes`, or as `PARTS` parts by length for `SPLIT_FROM` sentences or more (`_alone` for
    one sentence, or none); `options` as for the decoder."""
    import tensorflow as tf

    def decode(ids, options):  # two sentences or more
        rows = _per_sentence(options, lambda x: _few_rows(x, least_rows))
        best, scores = decoder(_few_shapes(ids, source_length, least_rows), rows)
        return best[: tf.shape(ids)[0]], scores[: tf.shape(ids)[0]]

    def in_parts(ids, options):
        order = tf.argsort(_lengths(ids), direction="DESCENDING", stable=True)
        ids, options = tf.gather(ids, order), _per_sentence(options, lambda x: tf.gather(x, order))
        size = (tf.shape(ids)[0] + PARTS - 1) // PARTS
        parts = [
            decode_once(
                ids[start : start + size], _per_sentence(options, lambda x, start=start: x[start : start + size])
            )
            for start in (part * size for part in range(PARTS))
        ]
        back = tf.math.invert_permutation(order)
        return tuple(tf.gather(tf.concat(outputs, axis=0), back) for outputs in zip(*parts))

    def alone(ids, options):
        rows = _per_sentence(options, lambda x: _alone_rows(x, least_rows))
        best, scores = decoder.whole(_alone(ids, source_length, least_rows), rows)
        return best[: tf.shape(ids)[0]], scores[: tf.shape(ids)[0]]

    traced = {}  # per set of options: traced once, called by the batch's path and by each part

    def spec(name, x):  # a per-sentence option's rows and width vary between calls
        x = tf.convert_to_tensor(x)
        return (
            tf.TensorSpec([None] * x.shape.rank, x.dtype)
            if name in PER_SENTENCE_OPTIONS
            else tf.TensorSpec.from_tensor(x)
        )

    def decode_once(ids, options):
        key = tuple(sorted(options))
        if key not in traced:
            specs = {name: spec(name, x) for name, x in options.items()}
            signature = [tf.TensorSpec([None, None], tf.int32), specs]
            traced[key] = tf.function(decode, autograph=False, input_signature=signature)
        return traced[key](ids, options)

    def best(ids, options):
        route = tf.cast(tf.shape(ids)[0] > 1, tf.int32) + tf.cast(tf.shape(ids)[0] >= SPLIT_FROM, tf.int32)
        return tf.switch_case(route, [lambda f=f: f(ids, options) for f in (alone, decode_once, in_parts)])

    return best


# `translate_options`' arguments after the sentences, in their order, and their dtypes (scalars).
RUNTIME_OPTIONS = (
    ("beam_size", "int32"),
    ("n_best", "int32"),
    ("length_penalty", "float32"),
    ("min_length", "int32"),
    ("max_length", "int32"),
    ("no_repeat_ngram_size", "int32"),
    ("repetition_penalty", "float32"),
    ("disable_unk", "bool"),
    ("max_length_ratio", "float32"),
    ("sampling_topk", "int32"),
    ("sampling_topp", "float32"),
    ("sampling_temperature", "float32"),
    ("seed", "int32"),
    ("return_alignment", "bool"),
)
# The values at which the options after the first five change nothing.
NEUTRAL_OPTIONS = {
    "no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "disable_unk": False,
    "max_length_ratio": 0.0,
    "sampling_topk": 1,
    "sampling_topp": 1.0,
    "sampling_temperature": 1.0,
    "seed": 0,
    "return_alignment": False,
}
# The largest repetition penalty a call may set: past it every repeat is already all but ruled out.
MAX_REPETITION_PENALTY = 100.0


def _placeholder_ids(vocabulary):
    """The id of each placeholder token (`keras_seq.data.placeholders.TOKENS`) in `vocabulary`."""
    from keras_seq.data import placeholders

    ids = placeholders.token_ids(vocabulary)
    if ids is None:
        v.fail(
            "export_translator",
            "target_vocabulary",
            "a vocabulary that holds each placeholder token (SubwordVocabulary.train(..., "
            "user_symbols=placeholders.TOKENS)) with placeholders=True",
            "one without them",
        )
    return ids


def translate_options_defaults(loaded):
    """`{name: value}` of `RUNTIME_OPTIONS` that decode as a loaded translator's `translate` does: its beam size,
    one best, its length penalty, no minimum length, its `max_length` and `NEUTRAL_OPTIONS`."""
    return {
        "beam_size": int(loaded.num_beams.numpy()),
        "n_best": 1,
        "length_penalty": float(loaded.length_penalty.numpy()),
        "min_length": 0,
        "max_length": int(loaded.max_length.numpy()),
        **NEUTRAL_OPTIONS,
    }


def export_translator(
    model,
    source_vocabulary,
    target_vocabulary,
    path,
    source_length,
    max_length,
    num_beams=4,
    length_penalty=0.6,
    early_stopping=False,
    placeholders=False,
):
    """Write a SavedModel that translates strings `(B,)`, by beam search or greedily, with options per call.

    Three signatures:

    * `translate(sentences) -> (B,)` strings: beam search with `num_beams` beams, the
      GNMT length penalty and `early_stopping` (see `keras_seq.decoding.generate`);
    * `translate_greedy(sentences)`: the most likely id at each step;
    * `translate_options(sentences, *RUNTIME_OPTIONS, target_prefix)` (the options scalars of their
      `RUNTIME_OPTIONS` dtypes; sampling as `generate`'s `top_k_top_p`): `beam_size` 1 (greedy) or `num_beams`, `n_best`
      in `[1, beam_size]`, `0 <= min_length <= max_length <= ` the exported
      `max_length`, the lengths counting the start id as `generate`'s do;
      `no_repeat_ngram_size` in `[0, max_length]` and `repetition_penalty` in
      `(0, MAX_REPETITION_PENALTY]` as `generate`'s, `disable_unk` as `generate`'s
      `suppress_ids=[text.UNKNOWN]`, `max_length_ratio` >= 0 as `generate`'s (its source
      ids counted after the cut to `source_length`); and `target_prefix` `(B,)` strings, each
      sentence's translation prefix ("" for none), continued as `generate`'s `target_prefix`
      continues its ids (the translation begins with it). Returns `{"translations": (B, n_best)
      strings, "scores": (B, n_best), "log_probs": (B, n_best)}`, best first (with, for a model with
      attention (`decoding_alignment`), "source_tokens" `(B, S)` and "target_tokens" `(B, n_best, max_length - 1)`,
      each id's token text ("" for padding, the end id and after; a placeholder's token shown as its span), and
      "alignments" `(B, n_best, max_length - 1, S)`: with `return_alignment`, each written token's attention
      over the source tokens, else `(B, n_best, 0, S)`):
      `log_probs` is a hypothesis' summed log-probability, `scores` that over the GNMT
      length penalty of its length (the ids it generated, its end id included). The
      translations are `generate`'s with the same settings (`num_return_sequences=n_best`,
      `max_length`), and so are its scores: `scores` for beam search, `log_probs` for
      greedy decoding. The options are runtime values: changing them compiles nothing
      new (the batch's row count and source width still do). Out-of-range options
      fail the call with `InvalidArgumentError`. The SavedModel also holds `num_beams`
      and `max_length` as int32 variables and `length_penalty` as a float32 one, for a server's checks and
      defaults.

    Sources are tokenized with `source_vocabulary` and cut to `source_length` ids;
    translations of at most `max_length` ids (start id included) are joined back into
    text. With `placeholders` (a model trained on `keras_seq.data.placeholders.protect_pair`'s
    pairs), each source's spans to keep verbatim become placeholder tokens before tokenizing and
    come back in every translation where it has their token, as TensorFlow ops in the graph (a
    target prefix is taken as it is); no translation ends before it holds the token of each of
    its source's spans (`generate`'s `required_ids`), so a span is dropped only at `max_length`.
    The decoding runs as XLA programs compiled at their first call for each shape (graph mode
    would run each step's operations one by one), dropping the ended
    sentences every few steps (`_DroppingDecoder`); `_few_shapes` keeps the shapes few
    (`_alone`, with fewer operations, for a lone sentence, whose latency they would add
    to). A batch of `SPLIT_FROM` sentences or more is decoded as `PARTS` parts at once,
    one XLA program running its operations one after another: parts keep more cores
    busy. The parts take the sources by length, longest first: a part's sources pad to
    a length near their own, its sentences tend to end together, and the longest part
    starts first.
    """
    import tensorflow as tf

    from keras_seq import decoding, decoding_contract
    from keras_seq.data import placeholders as placeholder_spans
    from keras_seq.data import text

    decoding_contract.require(model, "export_translator")
    placeholder_ids = _placeholder_ids(target_vocabulary) if placeholders else None
    module = _serving_module("export_translator", model, source_table=source_vocabulary, target_table=target_vocabulary)
    module.num_beams = tf.Variable(num_beams, dtype=tf.int32, trainable=False)
    module.max_length = tf.Variable(max_length, dtype=tf.int32, trainable=False)
    module.length_penalty = tf.Variable(length_penalty, dtype=tf.float32, trainable=False)
    weights = decoding.step_weights(model)
    if weights is not None:  # stored once, not laid out again at every call
        module.step_weights = weights = tf.nest.map_structure(lambda x: tf.Variable(x, trainable=False), weights)
    beam = dict(strategy="beam", num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping)

    def best_of(settings):
        least_rows = 1 if settings["strategy"] == "beam" else GREEDY_LEAST_ROWS
        settings = dict(end_id=text.END, start_id=text.START, **settings)
        return _best_by_route(
            _DroppingDecoder(module.model, max_length, settings, least_rows, weights), source_length, least_rows
        )

    def source_ids(sentences):  # -> (ids, each sentence's spans (ragged), or None without placeholders)
        spans = None
        if placeholders:
            sentences, spans = placeholder_spans.protect_strings(sentences)
        return source_vocabulary.encode(sentences, table=module.source_table)[:, :source_length].to_tensor(), spans

    def required(spans):  # the decoding options that keep each sentence's placeholders: their tokens' ids
        if spans is None:
            return {}
        return {"required_ids": placeholder_spans.required_ids(spans.row_lengths(), placeholder_ids)}

    def target_ids(prefixes):  # (B,) strings -> (B, max_length - 1) ids, 0 after each: one shape for every call
        ids = target_vocabulary.encode(prefixes, table=module.target_table)[:, : max_length - 1]
        return ids.to_tensor(shape=[None, max_length - 1])

    def strings(ids, spans):  # (B, n, L) -> (B, n)
        decoded = target_vocabulary.decode(tf.reshape(ids, (-1, max_length)), table=module.target_table)
        if spans is not None:
            decoded = placeholder_spans.restore_strings(decoded, spans, tf.range(tf.size(decoded)) // tf.shape(ids)[1])
        return tf.reshape(decoded, tf.shape(ids)[:2])

    beam_best, greedy_best = best_of(beam), best_of(dict(strategy="greedy"))
    sample_best = best_of(dict(strategy="top_k_top_p"))  # `decoding._FILTERS`: k and p set at run time
    dummy = np.ones((1, 2), "int32")  # whether the model has attention to align with (None: it has none)
    aligns = model.decoding_alignment(dummy, dummy) is not None

    def token_labels(texts, spans, sentence_of):  # the token texts, each span's token shown as its span
        if spans is None:
            return texts
        flat = placeholder_spans.restore_strings(tf.reshape(texts, [-1]), spans, sentence_of(tf.size(texts)))
        return tf.reshape(flat, tf.shape(texts))

    def alignment(ids, spans, best, wanted):  # ids (B, S), best (B, n, max_length)
        rows, n, width = tf.shape(best)[0], tf.shape(best)[1], tf.shape(ids)[1]

        def weights():  # teacher forcing on each hypothesis: row t is where it looked to write id t + 1
            inputs = tf.reshape(best, (-1, max_length))[:, :-1]
            found = module.model.decoding_alignment(tf.repeat(ids, n, axis=0), inputs)
            return tf.reshape(tf.cast(found, tf.float32), [rows, n, max_length - 1, width])

        written = best[..., 1:]  # the ids each row of the weights wrote; the end id and what follows: ""
        before_end = tf.math.cumsum(tf.cast(tf.equal(written, text.END), tf.int32), axis=-1, exclusive=True) == 0
        shown = before_end & (written > text.END)
        targets = tf.where(shown, target_vocabulary.token_texts(written, table=module.target_table), "")
        sources = source_vocabulary.token_texts(ids, table=module.source_table)
        return {
            "alignments": tf.cond(wanted & (width > 0), weights, lambda: tf.zeros([rows, n, 0, width])),
            "source_tokens": token_labels(sources, spans, lambda size: tf.range(size) // width),
            "target_tokens": token_labels(targets, spans, lambda size: tf.range(size) // (n * (max_length - 1))),
        }

    def fixed(name, best):
        def translate(sentences):
            ids, spans = source_ids(sentences)
            return strings(best(ids, required(spans))[0], spans)[:, 0]

        translate.__name__ = name
        return tf.function(translate, input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])

    def translate_options(
        sentences,
        beam_size,
        n_best,
        length_penalty,
        min_length,
        max_length,
        no_repeat_ngram_size,
        repetition_penalty,
        disable_unk,
        max_length_ratio,
        sampling_topk,
        sampling_topp,
        sampling_temperature,
        seed,
        return_alignment,
        target_prefix,
    ):
        def within(value, low, high, message):  # fails the call with `message` unless low <= value <= high
            return tf.debugging.assert_equal(tf.logical_and(value >= low, value <= high), True, message)

        checks = [
            tf.debugging.assert_equal(
                tf.logical_or(beam_size == 1, beam_size == num_beams), True, f"beam_size: expected 1 or {num_beams}"
            ),
            within(n_best, 1, beam_size, "n_best: expected 1 to beam_size"),
            within(max_length, 1, module.max_length, "max_length: expected 1 to the exported max_length"),
            within(min_length, 0, max_length, "min_length: expected 0 to max_length"),
            within(no_repeat_ngram_size, 0, max_length, "no_repeat_ngram_size: expected 0 to max_length"),
            tf.debugging.assert_equal(
                tf.logical_and(repetition_penalty > 0, repetition_penalty <= MAX_REPETITION_PENALTY),
                True,
                f"repetition_penalty: expected a number in (0, {MAX_REPETITION_PENALTY}]",
            ),
            tf.debugging.assert_equal(
                tf.logical_and(max_length_ratio >= 0, max_length_ratio < float("inf")),
                True,
                "max_length_ratio: expected a finite number >= 0",
            ),
            tf.debugging.assert_equal(
                tf.shape(target_prefix)[0], tf.shape(sentences)[0], "target_prefix: expected one per sentence"
            ),
            tf.debugging.assert_equal(
                tf.logical_or(sampling_topk == 1, beam_size == 1), True, "sampling_topk: expected 1 with beam search"
            ),
            tf.debugging.assert_greater_equal(sampling_topk, 0, "sampling_topk: expected an integer >= 0"),
            within(sampling_topp, 0.0, 1.0, "sampling_topp: expected a number in (0, 1]"),
            tf.debugging.assert_greater(sampling_topp, 0.0, "sampling_topp: expected a number in (0, 1]"),
            tf.debugging.assert_equal(
                tf.logical_and(sampling_temperature > 0, sampling_temperature < float("inf")),
                True,
                "sampling_temperature: expected a finite number > 0",
            ),
            tf.debugging.assert_equal(
                tf.logical_or(aligns, tf.logical_not(return_alignment)),
                True,
                "return_alignment: expected false (the model has no attention to align with)",
            ),
        ]
        with tf.control_dependencies(checks):
            ids, spans = source_ids(sentences)
        options = dict(
            length_penalty=length_penalty,
            min_length=min_length,
            length_limit=max_length,
            no_repeat_ngram_size=no_repeat_ngram_size,
            repetition_penalty=repetition_penalty,
            suppress_ids=tf.where(disable_unk, [text.UNKNOWN], [0]),  # id 0, padding, is never generated anyway
            max_length_ratio=max_length_ratio,
            target_prefix=target_ids(target_prefix),
            **required(spans),
        )
        sampling = dict(k=sampling_topk, p=sampling_topp, temperature=sampling_temperature, seed=seed)
        route = tf.where(beam_size > 1, 2, tf.where(sampling_topk == 1, 0, 1))  # greedy, sampling, beam search
        best, scores = tf.switch_case(
            route,
            [
                lambda: greedy_best(ids, options),
                lambda: sample_best(ids, {**options, **sampling}),
                lambda: beam_best(ids, {**options, "num_return_sequences": n_best}),
            ],
        )
        best, scores = best[:, :n_best], scores[:, :n_best]  # every beam, ranked: sliced here, not in XLA
        penalty = decoding.gnmt_length_penalty(_lengths(best[..., 1:]), length_penalty)  # the start id not counted
        log_probs = tf.where(beam_size == 1, scores, scores * penalty)
        outputs = {"translations": strings(best, spans), "scores": log_probs / penalty, "log_probs": log_probs}
        return {**outputs, **(alignment(ids, spans, best, return_alignment) if aligns else {})}

    options_signature = tf.function(
        translate_options,
        input_signature=[
            tf.TensorSpec([None], tf.string, name="sentences"),
            *(tf.TensorSpec([], dtype, name=name) for name, dtype in RUNTIME_OPTIONS),
            tf.TensorSpec([None], tf.string, name="target_prefix"),
        ],
    )
    _save(module, path, fixed("translate", beam_best), fixed("translate_greedy", greedy_best), options_signature)


def export_classifier(model, vocabulary, labels, path, sequence_length):
    """Write a SavedModel whose `classify(strings (B,))` returns `{"label": (B,) strings, "probabilities": (B, C)}`."""
    import tensorflow as tf

    module = _serving_module("export_classifier", model, table=vocabulary)
    label_names = tf.constant(list(labels))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def classify(texts):
        ids = vocabulary.encode(texts, table=module.table)[:, :sequence_length].to_tensor(shape=[None, sequence_length])
        probabilities = tf.nn.softmax(tf.cast(module.model(ids, training=False), tf.float32), axis=-1)
        return {"label": tf.gather(label_names, tf.argmax(probabilities, axis=-1)), "probabilities": probabilities}

    _save(module, path, classify)


def export_tagger(model, vocabulary, tags, path, sequence_length):
    """Write a SavedModel whose `tag(strings (B,)) -> strings (B,)` gives one tag per whitespace token, space-separated.

    `tags[0]` names the padding class (id 0, never a real token's tag), so the
    most likely of the other tags is given.
    """
    import tensorflow as tf

    module = _serving_module("export_tagger", model, table=vocabulary)
    tag_names = tf.constant(list(tags))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def tag(sentences):
        ids = vocabulary.encode(sentences, table=module.table)[:, :sequence_length].to_tensor(
            shape=[None, sequence_length]
        )
        predicted = tf.gather(tag_names, tf.argmax(module.model(ids, training=False)[..., 1:], axis=-1) + 1)
        return tf.strings.reduce_join(tf.ragged.boolean_mask(predicted, ids > 0), axis=-1, separator=" ")

    _save(module, path, tag)


def export_language_model(model, vocabulary, path, max_length):
    """Write a SavedModel whose `generate(strings (B,)) -> strings (B,)` continues each prompt greedily.

    Each prompt (of any length, cut to `max_length - 1` tokens; an empty one starts
    from the unknown token) is continued to `max_length` tokens; the result is the
    prompt and its continuation as one string.
    """
    import tensorflow as tf

    from keras_seq import decoding, decoding_contract
    from keras_seq.data import text

    decoding_contract.require(model, "export_language_model")
    module = _serving_module("export_language_model", model, table=vocabulary)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="prompts")])
    def generate(prompts):
        prompt_ids = vocabulary.encode(prompts, table=module.table)[:, : max_length - 1]
        lengths = tf.cast(prompt_ids.row_lengths(), tf.int32)
        ids = prompt_ids.to_tensor(shape=[None, max_length])
        first = tf.where(lengths == 0, text.UNKNOWN, ids[:, 0])
        ids = tf.concat([first[:, None], ids[:, 1:]], axis=1)
        return vocabulary.decode(decoding.greedy_ragged_prompts(module.model, ids, tf.maximum(lengths, 1)))

    _save(module, path, generate)


KINDS = ("translate", "classify", "tag", "lm")


def write_run_config(directory, kind, vocabularies, **settings):
    """Record what `export_run` needs next to a run's `model.keras` (kind: one of `KINDS`)."""
    v.check_choice("write_run_config", "kind", kind, KINDS)
    config = {
        "kind": kind,
        "vocabularies": {name: vocab.get_config() for name, vocab in vocabularies.items()},
        **settings,
    }
    atomic.write_text(os.path.join(directory, RUN_CONFIG), json.dumps(config, ensure_ascii=False))


def export_run(directory):
    """Export `directory/model.keras` to `directory/export` as `write_run_config` describes.

    Runs here on the TensorFlow backend, else in a TensorFlow-backend subprocess.
    """
    if not backend.traces_saved_models():
        environment = dict(os.environ, KERAS_BACKEND="tensorflow")
        result = subprocess.run(
            [sys.executable, "-m", "keras_seq.export", directory], env=environment, capture_output=True, text=True
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"export_run: the TensorFlow-backend export of {directory} failed:\n{result.stderr[-3000:]}"
            )
        return
    from keras_seq.data.subword import vocabulary_from_config

    with open(os.path.join(directory, RUN_CONFIG), encoding="utf-8") as f:
        config = json.load(f)
    vocabularies = {name: vocabulary_from_config(vocab) for name, vocab in config.pop("vocabularies").items()}
    model = keras.saving.load_model(os.path.join(directory, "model.keras"), compile=False)
    kind = config.pop("kind")
    with atomic.replaced_atomically(os.path.join(directory, "export")) as path:  # complete or absent
        if kind == "translate":
            export_translator(model, vocabularies["source"], vocabularies["target"], path, **config)
        elif kind == "lm":
            export_language_model(model, vocabularies["text"], path=path, **config)
        elif kind == "classify":
            export_classifier(model, vocabularies["text"], path=path, **config)
        else:
            export_tagger(model, vocabularies["text"], path=path, **config)


if __name__ == "__main__":
    import keras_seq  # noqa: F401  (registers the layers and models that model.keras names)

    export_run(sys.argv[1])

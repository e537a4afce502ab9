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


def _size_at_least(count):
    """The least of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (powers of two and 1.5 times them) >= `count` (an int32
    scalar tensor): the row counts compiled for, a few per octave, none over 1.5 times what is needed."""
    import tensorflow as tf

    powers = 2 ** tf.range(30)
    return _least_at_least(tf.concat([powers, powers * 3 // 2], axis=0), count)


def _lengths(ids):
    """The ids in each row of `ids` `(B, S)`, whose padding (id 0) comes last: `(B,)` int32."""
    import tensorflow as tf

    return tf.reduce_sum(tf.cast(ids != 0, tf.int32), axis=1)


def _few_shapes(ids, source_length, least_rows=1):
    """`ids` `(B, S)` (id 0 pads) cut to its longest row, then padded to a row count of `_size_at_least` (repeating
    its rows), `least_rows` or more, and to a multiple of 16 ids.

    XLA compiles the decoding once per input shape (seconds each): this bounds the
    shapes a server meets to a few per octave. Padded ids are masked and
    repeated rows are decoded like the originals, then dropped; an empty batch
    becomes one row of padding.
    """
    import tensorflow as tf

    batch = tf.shape(ids)[0]
    width = tf.maximum(tf.reduce_max(_lengths(ids)), 0)  # an empty batch's maximum is int32's least
    ids = tf.concat([ids[:, :width], tf.zeros([1 - tf.minimum(batch, 1), width], ids.dtype)], axis=0)
    rows = _size_at_least(tf.maximum(batch, least_rows))
    ids = tf.pad(ids, [[0, 0], [0, _padded_width(width, source_length) - width]])
    return tf.gather(ids, tf.range(rows) % tf.shape(ids)[0])


def _padded_width(width, source_length):
    """`width` ids (an int32 scalar tensor) padded to a multiple of 16, at least 16 and at most `source_length`."""
    import tensorflow as tf

    return tf.minimum((tf.maximum(width, 1) + 15) // 16 * 16, source_length)


def _alone(ids, source_length, least_rows):
    """`_few_shapes` for a batch of one sentence or none (`(B, S)`, B <= 1, S its length): one row (padding for
    none) `least_rows` times, padded to `_padded_width`, in fewer operations (a server runs them one by one)."""
    import tensorflow as tf

    width = tf.shape(ids)[1]
    row = tf.pad(ids, [[0, 1 - tf.shape(ids)[0]], [0, _padded_width(width, source_length) - width]])
    return tf.tile(row, [least_rows, 1])


DROP_EVERY = 4  # decoding steps per XLA call, between two drops of the ended sentences
# Greedy decoding runs at least two rows (a lone sentence twice, a last one beside an ended one): XLA on the CPU
# makes the products of one row matrix-vector loops that transpose the output embedding at every step.
GREEDY_LEAST_ROWS = 2
# A batch of SPLIT_FROM sentences or more is decoded as PARTS parts at once (see export_translator).
SPLIT_FROM, PARTS = 16, 4


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

        def start(ids):
            return decoding.search_start(model, ids, tf.constant(0), max_length, True, weights, **settings)

        def steps(state, stop):  # the state less its context (`decoding.split_context`)
            state = decoding.search_steps(model, state, stop, **settings)
            return (decoding.split_context(state)[0], *decoding.unfinished_groups(state))

        def whole(ids):
            return decoding.decode(model, ids, tf.constant(0), max_length, weights, **settings)

        self.start, self.steps, self.whole = (
            tf.function(f, jit_compile=True, autograph=False) for f in (start, steps, whole)
        )

    def __call__(self, ids):
        """Decode `ids` by the loop over the compiled `start` and `steps` (a lone sentence: `whole`)."""
        import tensorflow as tf

        from keras_seq import decoding

        model, max_length = self.model, self.max_length
        state = self.start(ids)
        copies = state["groups"]["done"].shape[1]

        def results(state):  # what `search_result` reads
            groups = {name: x for name, x in state["groups"].items() if name != "done"}
            return {"ids": tf.reshape(state["rows"]["ids"], (-1, copies, max_length)), **groups}

        def condition(state, origin, outputs):
            return tf.logical_and(state["step"] < max_length, tf.logical_not(tf.reduce_all(state["groups"]["done"])))

        def body(state, origin, outputs):
            sentences = tf.shape(origin)[0]
            # One sentence left: on to the end of its cache window, then the next window.
            to_window_end = _window_at_least(model, state["step"] + 1, max_length)
            stop = tf.where(sentences > 1, tf.minimum(state["step"] + DROP_EVERY, max_length), to_window_end)
            state = decoding.resize_cache(model, state, _window_at_least(model, stop, max_length))
            stepped, order, unfinished = self.steps(state, stop)
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
        return decoding.search_result(ended, **self.settings)


def _free_axes(shape, *axes):
    """`shape` with the sizes of `axes` (None ones skipped) left open."""
    import tensorflow as tf

    return tf.TensorShape([None if axis in axes else size for axis, size in enumerate(shape)])


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
):
    """Write a SavedModel that translates strings `(B,)` to strings `(B,)`, by beam search or greedily.

    Two signatures: `translate` runs beam search with `num_beams` beams, the GNMT
    length penalty and `early_stopping` (see `keras_seq.decoding.generate`);
    `translate_greedy` takes the most likely id at each step. Sources are tokenized
    with `source_vocabulary` and cut to `source_length` ids; translations of at most
    `max_length` ids (start id included) are joined back into text. The decoding runs
    as XLA programs compiled at their first call for each shape (graph mode would run
    each step's operations one by one), dropping the ended sentences every few steps
    (`_DroppingDecoder`); `_few_shapes` keeps the shapes few (`_alone`, with fewer
    operations, for a lone sentence, whose latency they would add to). A batch of `SPLIT_FROM`
    sentences or more is decoded as `PARTS` parts at once, one XLA program running
    its operations one after another: parts keep more cores busy. The parts take the
    sources by length, longest first: a part's sources pad to a length near their
    own, its sentences tend to end together, and the longest part starts first.
    """
    import tensorflow as tf

    from keras_seq import decoding, decoding_contract
    from keras_seq.data import text

    decoding_contract.require(model, "export_translator")
    module = _serving_module("export_translator", model, source_table=source_vocabulary, target_table=target_vocabulary)
    weights = decoding.step_weights(model)
    if weights is not None:  # stored once, not laid out again at every call
        module.step_weights = weights = tf.nest.map_structure(lambda x: tf.Variable(x, trainable=False), weights)
    strategies = {
        "translate": dict(
            strategy="beam", num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping
        ),
        "translate_greedy": dict(strategy="greedy"),
    }

    def signature(name, settings):
        least_rows = GREEDY_LEAST_ROWS if settings["strategy"] == "greedy" else 1
        settings = dict(end_id=text.END, start_id=text.START, **settings)
        decoder = _DroppingDecoder(module.model, max_length, settings, least_rows, weights)

        # Traced once, called by the batch's path and by each part: the loop's graph is built once, not five times.
        @tf.function(autograph=False, input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def decode(ids):  # two sentences or more
            best, _ = decoder(_few_shapes(ids, source_length, least_rows))
            return best[: tf.shape(ids)[0], 0]

        def in_parts(ids):
            order = tf.argsort(_lengths(ids), direction="DESCENDING", stable=True)
            ids = tf.gather(ids, order)
            size = (tf.shape(ids)[0] + PARTS - 1) // PARTS
            best = tf.concat([decode(ids[part * size : (part + 1) * size]) for part in range(PARTS)], axis=0)
            return tf.gather(best, tf.math.invert_permutation(order))

        def alone(ids):
            best, _ = decoder.whole(_alone(ids, source_length, least_rows))
            return best[: tf.shape(ids)[0], 0]

        def translate(sentences):
            ids = source_vocabulary.encode(sentences, table=module.source_table)[:, :source_length].to_tensor()
            batch = tf.shape(ids)[0]
            path = tf.cast(batch > 1, tf.int32) + tf.cast(batch >= SPLIT_FROM, tf.int32)
            best = tf.switch_case(path, [lambda: alone(ids), lambda: decode(ids), lambda: in_parts(ids)])
            return target_vocabulary.decode(best, table=module.target_table)

        translate.__name__ = name
        return tf.function(translate, input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])

    _save(module, path, *(signature(name, settings) for name, settings in strategies.items()))


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

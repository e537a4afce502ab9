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

from keras_seq import _validation as v
from keras_seq import _atomic as atomic

RUN_CONFIG = "export_config.json"


def _serving_module(owner, model, **vocabularies):
    """A `tf.Module` holding `model` and each vocabulary's lookup table under the given name."""
    if keras.backend.backend() != "tensorflow":
        v.fail(owner, "backend", "the TensorFlow backend (or use export_run, which starts one)", keras.backend.backend())
    import tensorflow as tf

    module = tf.Module()
    module.model = model
    for name, vocabulary in vocabularies.items():
        setattr(module, name, vocabulary.lookup_table())
    return module


def _save(module, path, function):
    """Save `module` with `function` as its named signature and the serving default."""
    import tensorflow as tf

    name = function.__name__
    setattr(module, name, function)
    tf.saved_model.save(module, path, signatures={name: function, "serving_default": function})


def export_translator(model, source_vocabulary, target_vocabulary, path, source_length, max_length, num_beams=4, length_penalty=0.6):
    """Write a SavedModel whose `translate(strings (B,)) -> strings (B,)` runs beam search.

    Sources are tokenized with `source_vocabulary`, cut to `source_length` ids and
    right-padded to it (a fixed width, so results do not depend on the batch);
    translations of at most `max_length` ids (start id included) are decoded with
    `num_beams` beams and the GNMT length penalty, and joined back into text.
    """
    import tensorflow as tf

    from keras_seq import decoding
    from keras_seq.data import text

    module = _serving_module("export_translator", model, source_table=source_vocabulary, target_table=target_vocabulary)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def translate(sentences):
        ids = source_vocabulary.encode(sentences, table=module.source_table)[:, :source_length]
        ids = ids.to_tensor(shape=[None, source_length])
        best, _ = decoding.decode(
            module.model, ids, tf.constant(0), max_length, strategy="beam", num_beams=num_beams,
            length_penalty=length_penalty, end_id=text.END, start_id=text.START,
        )
        return target_vocabulary.decode(best[:, 0], table=module.target_table)

    _save(module, path, translate)


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
        ids = vocabulary.encode(sentences, table=module.table)[:, :sequence_length].to_tensor(shape=[None, sequence_length])
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

    from keras_seq import decoding
    from keras_seq.data import text

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
    config = {"kind": kind, "vocabularies": {name: vocab.get_config() for name, vocab in vocabularies.items()}, **settings}
    atomic.write_text(os.path.join(directory, RUN_CONFIG), json.dumps(config, ensure_ascii=False))


def export_run(directory):
    """Export `directory/model.keras` to `directory/export` as `write_run_config` describes.

    Runs here on the TensorFlow backend, else in a TensorFlow-backend subprocess.
    """
    if keras.backend.backend() != "tensorflow":
        environment = dict(os.environ, KERAS_BACKEND="tensorflow")
        result = subprocess.run(
            [sys.executable, "-m", "keras_seq.export", directory], env=environment, capture_output=True, text=True
        )
        if result.returncode != 0:
            raise RuntimeError(f"export_run: the TensorFlow-backend export of {directory} failed:\n{result.stderr[-3000:]}")
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

"""Tag: the aligned seq2seq recipe (one tag per token, e.g. parts of speech).

Trains a bidirectional LSTM tagger with `model.fit`, reports token accuracy on the
valid set, and exports a SavedModel whose `tag` signature takes whitespace-tokenized
sentences and returns their tags, space-separated.

    python -m recipes.tag                            # State of the Union words -> the punctuation after them, 180 s
    python -m recipes.tag --data phrasebook --epochs 3   # built English sentences, universal POS tags
    python -m recipes.tag --train train.tsv --valid valid.tsv
    python -m recipes.tag --tfds universal_dependencies/en_ewt
"""

import time

import keras
import numpy as np
import tensorflow as tf

import keras_seq as ks
from keras_seq.data import corpora, loaders, phrasebook, pipeline, text
from recipes import common, training_data
from recipes.errors import UsageError

# Model family -> its defaults of the flags that depend on it.
MODELS = {"bilstm": {"learning_rate": 3e-3}}
# Embedded data, used when no --train/--tfds: name -> (train, valid) lists of sentences of (token, tag).
DATA = {
    "sotu-punctuation": lambda: (corpora.sotu_punctuation("train"), corpora.sotu_punctuation("valid")),
    "phrasebook": phrasebook.tagged_sentences,
}


def parse(argv=None):
    p = common.parser(
        "tag",
        __doc__.split("\n\n")[0],
        "`token<TAB>tag` lines, a blank line between sequences",
        MODELS,
        "bilstm",
        epochs=None,
        batch_size=32,
        max_seconds=180,
    )
    p.add_argument(
        "--data",
        choices=DATA,
        default="sotu-punctuation",
        help="embedded data when no --train/--tfds: State of the Union words tagged with the punctuation "
        "after them (real, keras_seq/data/corpora/sotu_en) or the built phrasebook with POS tags",
    )
    p.add_argument("--max-length", type=int, default=128, help="sentences are cut to this many tokens")
    p.add_argument("--vocabulary-size", type=int, default=30000, help="most frequent tokens kept")
    p.add_argument("--hidden-dim", type=int, default=64, help="LSTM units per direction")
    common.add_validation_flags(p, "token accuracy", warmup=0.02)
    return p.parse_args(argv)


def load_sentences(settings):
    """`(train, valid)` lists of sentences, each a list of (token, tag)."""
    train, valid = common.load_splits(settings, "tag", loaders.read_tagged, DATA)
    # Tokens are joined by spaces and split again in the graph: a token holding a space cannot survive that.
    clean = lambda sentences: [[(token.replace(" ", "_"), tag) for token, tag in s] for s in sentences if s]
    return clean(train)[: settings.max_examples], clean(valid)


def run(settings):
    started = time.monotonic()
    train_sentences, valid_sentences = load_sentences(settings)
    tags = ["<pad>"] + sorted({tag for s in train_sentences for _, tag in s})
    unseen = sorted({tag for s in valid_sentences for _, tag in s} - set(tags))
    if unseen:
        raise UsageError(f"--valid: expected tags seen in training, got unseen {unseen[:10]}")
    joined = lambda sentences: [" ".join(token for token, _ in s) for s in sentences]
    vocab = common.vocabularies(
        settings,
        lambda: {
            "text": text.Vocabulary.build(
                joined(train_sentences), level="whitespace", max_size=settings.vocabulary_size
            )
        },
    )
    tag_ids = {tag: i for i, tag in enumerate(tags)}

    def features(sentences):
        return {
            "tokens": vocab["text"].encode(joined(sentences))[:, : settings.max_length],
            "tags": tf.ragged.constant(
                [[tag_ids[tag] for _, tag in s][: settings.max_length] for s in sentences], dtype=tf.int32
            ),
        }

    train, valid = features(train_sentences), features(valid_sentences)
    longest = int(tf.reduce_max(train["tokens"].row_lengths()))
    length = pipeline.bucket_edges(max(longest, int(tf.reduce_max(valid["tokens"].row_lengths()))))[-1]
    print(
        f"tag: {len(train_sentences)} training sentences, {len(valid_sentences)} valid, {len(tags) - 1} tags, "
        f"vocabulary {len(vocab['text'])}; backend {keras.backend.backend()}"
    )

    def batches(seed, first_epoch, epochs, examples=train):
        return pipeline.padded_batches(
            examples, settings.batch_size, length, lambda b: (b["tokens"], b["tags"]), seed, first_epoch, epochs
        )

    def build_and_compile(steps_per_epoch):
        model = ks.models.rnn_tagger(
            len(vocab["text"]), len(tags), embedding_dim=settings.hidden_dim, units=settings.hidden_dim
        )
        model.compile(
            optimizer=ks.optimizers.Adam(settings.learning_rate, clipnorm=1.0),
            loss=ks.losses.LabelSmoothingCrossEntropy(0.0, ignore_index=0),
            metrics=[ks.metrics.MaskedAccuracy(ignore_index=0)],
        )
        return model

    score = common.evaluated(batches(None, 0, 1, valid), "accuracy", lambda logs: logs["masked_accuracy"])
    model, history, train_seconds, validation = common.train(
        settings,
        build_and_compile,
        training_data.InMemoryBatches(batches, settings.seed),
        None,
        learning_rate=(settings.learning_rate, settings.warmup),
        score=score,
        monitor="accuracy",
    )
    tagger = common.export_and_load(settings, "tag", vocab, tags=tags, sequence_length=length)
    sentences = joined(valid_sentences)
    predictions = []
    for start in range(0, len(sentences), 256):
        predictions += [p.decode("utf-8") for p in tagger.tag(tf.constant(sentences[start : start + 256])).numpy()]
    references = [" ".join(tag for _, tag in s[: settings.max_length]) for s in valid_sentences]
    common.write_predictions(
        settings.output_dir, zip(sentences, references, predictions), ("sentence", "tags", "prediction")
    )
    pairs = [
        (p, r)
        for prediction, reference in zip(predictions, references)
        for p, r in zip(prediction.split(), reference.split())
    ]
    metrics = {
        "accuracy": float(np.mean([p == r for p, r in pairs])),
        "sentence_accuracy": float(np.mean([p == r for p, r in zip(predictions, references)])),
        "best_validation_accuracy": validation.best,
        "weights": validation.chosen,
        "epochs": len(history.get("loss", [])),
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.monotonic() - started, 1),
        "model": settings.model,
        "backend": keras.backend.backend(),
        "valid_examples": len(valid_sentences),
    }
    common.write_metrics(settings.output_dir, metrics)
    print(f"tag: valid token accuracy {metrics['accuracy']:.3f}; outputs in {settings.output_dir}")
    return metrics


if __name__ == "__main__":
    common.main("tag", run, parse)

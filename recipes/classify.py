"""Classify: the seq2vec recipe (a text in, a label out).

Trains a bidirectional LSTM (default) or an encoder-only Transformer with `model.fit`,
reports valid accuracy, and exports a SavedModel whose `classify` signature takes raw
strings and returns the label and the class probabilities.

    python -m recipes.classify                       # State of the Union passages -> party, 180 s
    python -m recipes.classify --data reviews --epochs 4   # the built reviews (negation, "but")
    python -m recipes.classify --train train.tsv --valid valid.tsv --model transformer
    python -m recipes.classify --tfds imdb_reviews --max-length 256
"""

import os
import time

import keras
import numpy as np
import tensorflow as tf

import keras_seq as ks
from keras_seq.data import corpora, loaders, phrasebook, pipeline, text
from recipes import common, training_data
from recipes.errors import UsageError

# The label of the rows that pad a batch into equal parts for the devices (recipes/devices.py: rows_padded_to_multiple).
NO_LABEL = -1
# Model family -> its defaults of the flags that depend on it.
MODELS = {"bilstm": {"learning_rate": 2e-3}, "transformer": {"learning_rate": 2e-3}}
# Embedded data, used when no --train/--tfds: name -> (train, valid) lists of (label, text).
DATA = {
    "sotu-party": lambda: (corpora.sotu_party_passages("train"), corpora.sotu_party_passages("valid")),
    "reviews": phrasebook.sentiment_reviews,
}


def parse(argv=None):
    p = common.parser(
        "classify",
        __doc__.split("\n\n")[0],
        "UTF-8 TSV `label<TAB>text`",
        MODELS,
        "bilstm",
        epochs=None,
        batch_size=64,
        max_seconds=180,
    )
    p.add_argument(
        "--data",
        choices=DATA,
        default="sotu-party",
        help="embedded data when no --train/--tfds: State of the Union passages labelled with the president's "
        "party (real, keras_seq/data/corpora/sotu_en) or the built reviews",
    )
    p.add_argument("--max-length", type=int, default=256, help="texts are cut to this many tokens")
    p.add_argument(
        "--vocabulary",
        choices=("word", "subword"),
        default="word",
        help="word: the most frequent lowercased words; "
        "subword: SentencePiece pieces with byte fallback (no unknown characters)",
    )
    p.add_argument(
        "--vocabulary-size",
        "--vocab-size",
        dest="vocabulary_size",
        type=int,
        default=20000,
        help="most frequent words kept (subword: an upper bound on the pieces)",
    )
    common.add_subword_flags(p)
    p.add_argument("--hidden-dim", type=int, default=64, help="LSTM units per direction / Transformer width")
    common.add_validation_flags(p, "accuracy", warmup=0.02)
    return p.parse_args(argv)


def load_examples(settings):
    """`(train, valid)` lists of (label, text)."""
    train, valid = common.load_splits(settings, "classify", loaders.read_labelled_tsv, DATA)
    return train[: settings.max_examples], valid


def run(settings):
    started = time.monotonic()
    train_examples, valid_examples = load_examples(settings)
    labels = sorted({label for label, _ in train_examples})
    unknown = sorted({label for label, _ in valid_examples} - set(labels))
    if unknown:
        raise UsageError(f"--valid: expected labels seen in training {labels[:10]}, got unseen {unknown[:10]}")
    if len(labels) < 2:
        raise UsageError(f"--train: expected at least two labels, got {labels}")
    texts = [t for _, t in train_examples]
    if settings.vocabulary == "subword":
        build = lambda: {"text": common.subword_vocabulary(settings, texts, settings.vocabulary_size, lowercase=True)}
    else:
        build = lambda: {"text": text.Vocabulary.build(texts, lowercase=True, max_size=settings.vocabulary_size)}
    vocab = common.vocabularies(settings, build)
    label_ids = {label: i for i, label in enumerate(labels)}

    def features(examples):
        ids = vocab["text"].encode([t for _, t in examples])[:, : settings.max_length]
        return {"text": ids, "label": [[label_ids[label]] for label, _ in examples]}

    train, valid = features(train_examples), features(valid_examples)
    longest = int(tf.reduce_max(train["text"].row_lengths()))
    length = pipeline.bucket_edges(longest)[-1]
    valid["text"] = valid["text"][:, :length]
    print(
        f"classify: {len(train_examples)} training texts, {len(valid_examples)} valid, {len(labels)} labels, "
        f"{settings.vocabulary} vocabulary {len(vocab['text'])}; backend {keras.backend.backend()}"
    )

    def to_model_inputs(batch):
        return batch["text"], batch["label"][:, 0]

    def batches(seed, first_epoch, epochs, examples=train):
        return pipeline.padded_batches(
            examples, settings.batch_size, longest, to_model_inputs, seed, first_epoch, epochs
        )

    def build_and_compile(steps_per_epoch):
        if settings.model == "bilstm":
            model = ks.models.rnn_classifier(
                len(vocab["text"]), len(labels), embedding_dim=settings.hidden_dim, units=settings.hidden_dim
            )
        else:
            model = ks.models.transformer_classifier(
                len(vocab["text"]),
                len(labels),
                length,
                hidden_dim=settings.hidden_dim,
                num_heads=4,
                intermediate_dim=2 * settings.hidden_dim,
            )
        model.compile(
            optimizer=ks.optimizers.Adam(settings.learning_rate, clipnorm=1.0),
            # Label -1 marks the rows that pad a batch into equal parts for the devices: left out of both.
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=NO_LABEL),
            metrics=[ks.metrics.MaskedAccuracy(ignore_index=NO_LABEL, name="accuracy")],
        )
        return model

    score = common.evaluated(
        batches(None, 0, 1, valid), "accuracy", lambda logs: logs["accuracy"], ignored_label=NO_LABEL
    )
    model, history, train_seconds, validation = common.train(
        settings,
        build_and_compile,
        training_data.InMemoryBatches(batches, settings.seed),
        None,
        learning_rate=(settings.learning_rate, settings.warmup),
        score=score,
        monitor="accuracy",
        ignored_label=NO_LABEL,
    )
    classifier = common.export_and_load(settings, "classify", vocab, labels=labels, sequence_length=length)
    texts = [t for _, t in valid_examples]
    predictions = []
    for start in range(0, len(texts), 256):
        predictions += [
            p.decode("utf-8") for p in classifier.classify(tf.constant(texts[start : start + 256]))["label"].numpy()
        ]
    references = [label for label, _ in valid_examples]
    common.write_predictions(settings.output_dir, zip(texts, references, predictions), ("text", "label", "prediction"))
    metrics = {
        "accuracy": float(np.mean([p == r for p, r in zip(predictions, references)])),
        "majority_baseline": max(references.count(label) for label in labels) / len(references),
        "best_validation_accuracy": validation.best,
        "weights": validation.chosen,
        "epochs": len(history.get("loss", [])),
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.monotonic() - started, 1),
        "model": settings.model,
        "vocabulary": settings.vocabulary,
        "vocabulary_size": len(vocab["text"]),
        "backend": keras.backend.backend(),
        "valid_examples": len(valid_examples),
    }
    if settings.model == "transformer":
        common.plot_sinusoidal_encoding(os.path.join(settings.output_dir, "sinusoidal_encoding.png"))
    common.write_metrics(settings.output_dir, metrics)
    print(
        f"classify: valid accuracy {metrics['accuracy']:.3f} (majority {metrics['majority_baseline']:.3f}); "
        f"outputs in {settings.output_dir}"
    )
    return metrics


if __name__ == "__main__":
    common.main("classify", run, parse)

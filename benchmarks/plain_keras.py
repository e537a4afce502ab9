"""The plain Keras models a user would write instead of a keras_seq recipe (issue #21's baselines).

Each trains with Keras' defaults (Adam at 1e-3, batches of 64) on the same files a
recipe reads, stops once `--max-seconds` of training have passed (or after
`--epochs`), and prints one JSON line with its validation figure. Nothing from
keras_seq is imported: this is what the recipes are measured against.

    python benchmarks/plain_keras.py lm --train T.txt --valid V.txt --max-seconds 180
    python benchmarks/plain_keras.py classify --train T.tsv --valid V.tsv --max-seconds 180
    python benchmarks/plain_keras.py tag --train T.tsv --valid V.tsv --max-seconds 180

* lm: characters -> Embedding(64) -> LSTM(256) -> Dense, non-overlapping windows of 64
  characters; valid perplexity per character (exp of the mean cross-entropy).
* classify (`label<TAB>text`): lowercased words (20,000 most frequent) -> Embedding(64)
  -> Bidirectional(LSTM(64)) -> Dense; valid accuracy.
* tag (`token<TAB>tag` lines, a blank line between sentences): words (30,000 most
  frequent) -> Embedding(64) -> Bidirectional(LSTM(64), every step) -> Dense; valid
  token accuracy.
"""

import argparse
import collections
import json
import math
import re
import time

import keras
import numpy as np


class StopAfter(keras.callbacks.Callback):
    """Stops `fit` once `seconds` have passed since training began."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds and time.monotonic() - self.start >= self.seconds:
            self.model.stop_training = True


def fit(model, x, y, args, **compile_args):
    """Adam (1e-3), batches of 64, shuffled, until the budget is spent; returns training seconds."""
    model.compile(optimizer=keras.optimizers.Adam(1e-3), **compile_args)
    stop = StopAfter(args.max_seconds)
    started = time.monotonic()
    model.fit(x, y, batch_size=64, epochs=args.epochs or 10_000, shuffle=True, callbacks=[stop], verbose=2)
    return time.monotonic() - started


def language_model(args):
    train, valid = (open(path, encoding="utf-8").read() for path in (args.train, args.valid))
    chars = sorted(set(train))
    index = {c: i + 2 for i, c in enumerate(chars)}  # 0: padding, 1: a character unseen in training

    def windows(text, length=64):
        ids = np.array([index.get(c, 1) for c in text], "int32")
        count = (len(ids) - 1) // length
        rows = np.stack([ids[i * length : i * length + length + 1] for i in range(count)])
        return rows[:, :-1], rows[:, 1:]

    x, y = windows(train)
    inputs = keras.Input((None,), dtype="int32")
    hidden = keras.layers.LSTM(256, return_sequences=True)(keras.layers.Embedding(len(chars) + 2, 64)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(len(chars) + 2)(hidden))
    seconds = fit(model, x, y, args, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    loss = model.evaluate(*windows(valid), batch_size=64, verbose=0)
    return {"perplexity": math.exp(loss), "valid_loss": loss, "train_seconds": round(seconds, 1)}


def _word_ids(texts, size):
    """Token ids by frequency in `texts` (lists of tokens): 0 padding, 1 unknown."""
    counts = collections.Counter(token for tokens in texts for token in tokens)
    return {token: i + 2 for i, (token, _) in enumerate(counts.most_common(size - 2))}


def _padded(rows, length):
    out = np.zeros((len(rows), length), "int32")
    for i, row in enumerate(rows):
        row = row[:length]
        out[i, : len(row)] = row
    return out


def classifier(args):
    def read(path):
        rows = [line.split("\t", 1) for line in open(path, encoding="utf-8").read().splitlines() if line.strip()]
        return [label for label, _ in rows], [re.findall(r"\w+|[^\w\s]", text.lower()) for _, text in rows]

    (train_labels, train_texts), (valid_labels, valid_texts) = read(args.train), read(args.valid)
    labels = sorted(set(train_labels))
    words = _word_ids(train_texts, 20_000)
    encode = lambda texts: _padded([[words.get(t, 1) for t in text] for text in texts], 256)
    inputs = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(len(words) + 2, 64, mask_zero=True)(inputs)
    model = keras.Model(
        inputs, keras.layers.Dense(len(labels))(keras.layers.Bidirectional(keras.layers.LSTM(64))(embedded))
    )
    y = np.array([labels.index(label) for label in train_labels])
    seconds = fit(
        model,
        encode(train_texts),
        y,
        args,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    predicted = np.argmax(model.predict(encode(valid_texts), batch_size=64, verbose=0), axis=-1)
    accuracy = float(np.mean([labels[p] == label for p, label in zip(predicted, valid_labels)]))
    return {"accuracy": accuracy, "train_seconds": round(seconds, 1)}


def tagger(args):
    def read(path):
        sentences, current = [], []
        for line in open(path, encoding="utf-8").read().splitlines() + [""]:
            if line.strip():
                token, tag = line.rsplit("\t", 1)
                current.append((token, tag))
            elif current:
                sentences.append(current)
                current = []
        return sentences

    train, valid = read(args.train), read(args.valid)
    tags = sorted({tag for sentence in train for _, tag in sentence})
    tag_ids = {tag: i + 1 for i, tag in enumerate(tags)}  # 0: padding
    words = _word_ids([[token for token, _ in s] for s in train], 30_000)
    length = 128
    tokens = lambda sentences: _padded([[words.get(t, 1) for t, _ in s] for s in sentences], length)
    targets = lambda sentences: _padded([[tag_ids.get(tag, 0) for _, tag in s] for s in sentences], length)
    inputs = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(len(words) + 2, 64, mask_zero=True)(inputs)
    hidden = keras.layers.Bidirectional(keras.layers.LSTM(64, return_sequences=True))(embedded)
    model = keras.Model(inputs, keras.layers.Dense(len(tags) + 1)(hidden))
    seconds = fit(
        model, tokens(train), targets(train), args, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    predicted = np.argmax(model.predict(tokens(valid), batch_size=64, verbose=0), axis=-1)
    gold = targets(valid)
    real = _padded([[1] * len(s) for s in valid], length) > 0
    return {"token_accuracy": float(np.mean(predicted[real] == gold[real])), "train_seconds": round(seconds, 1)}


TASKS = {"lm": language_model, "classify": classifier, "tag": tagger}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=sorted(TASKS))
    p.add_argument("--train", required=True)
    p.add_argument("--valid", required=True)
    p.add_argument("--max-seconds", type=float, help="training budget in seconds")
    p.add_argument("--epochs", type=int, help="training budget in epochs")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    result = {"side": f"plain Keras ({args.task})", "backend": keras.backend.backend(), **TASKS[args.task](args)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

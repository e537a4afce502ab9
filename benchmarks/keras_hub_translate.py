"""Translation anchor: keras-hub's Transformer trained on recipes.translate's pairs and time budget, to compare BLEU."""

import argparse
import collections
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import ops  # noqa: E402

from keras_seq.metrics import corpus_bleu, corpus_chrf  # noqa: E402

# keras-hub's translation example reserves these four, in this order, so [PAD] is id 0.
RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]
PAD, UNK, START, END = range(len(RESERVED))
SPLITS = ("train", "valid", "test")
# Batches are padded to their longest sequence rounded up to this, which bounds the shapes compiled.
PAD_MULTIPLE = 8
DECODE_BATCH = 128


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--train", help="training pairs, UTF-8 TSV `source<TAB>target`")
    p.add_argument("--valid", help="valid pairs (validation loss each epoch; scored when no --test)")
    p.add_argument(
        "--data", choices=("software",), help="the embedded English-French software messages instead of files"
    )
    p.add_argument("--test", help="pairs to score instead of --valid: a TSV file, or a split name with --data")
    p.add_argument("--max-seconds", type=float, default=600.0, help="training budget in wall-clock seconds")
    p.add_argument("--output-dir", default="runs/keras_hub_translate")
    p.add_argument("--vocab-size", type=int, default=8000, help="WordPiece vocabulary size, per language")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-length", type=int, default=64, help="longest sequence in tokens (source, and target with [START])"
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden-dim", type=int, default=128)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--intermediate-dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=2, help="encoder layers, and decoder layers")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument(
        "--learning-rate", type=float, default=1e-3, help="peak of the warm-up then inverse-square-root schedule"
    )
    p.add_argument("--warmup-steps", type=int, default=500)
    p.add_argument(
        "--padding",
        choices=("batch", "fixed"),
        help=f"batch: each batch to its longest sequence (rounded up to {PAD_MULTIPLE}); fixed: every "
        "batch to --max-length, as keras-hub's example does (default: batch on TensorFlow, fixed on "
        "other backends, where every new shape is compiled anew)",
    )
    args = p.parse_args(argv)
    if args.data and (args.train or args.valid):
        p.error("--data: expected no --train/--valid with it")
    if not args.data and not (args.train and args.valid):
        p.error("expected --train and --valid, or --data software")
    if args.padding is None:
        args.padding = "batch" if keras.backend.backend() == "tensorflow" else "fixed"
    if args.max_seconds <= 0 or args.vocab_size <= len(RESERVED):
        p.error("--max-seconds: expected > 0; --vocab-size: expected more than the 4 reserved tokens")
    return args


# ---------------------------------------------------------------- data


def read_tsv(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                sys.exit(f"{path} line {number}: expected `source<TAB>target`, got {line[:80]!r}")
            pairs.append((fields[0].strip(), fields[1].strip()))
    if not pairs:
        sys.exit(f"{path}: expected some `source<TAB>target` lines, got none")
    return pairs


def software_split(split):
    """One split of the embedded English-French software messages (`keras_seq.data.corpora.software_en_fr`)."""
    from keras_seq.data import corpora

    return list(corpora.software_en_fr(split))


def load(args):
    """(train, valid, test or None) lists of (source, target); training pairs without empty sides or repeats."""
    if args.data:
        train, valid = software_split("train"), software_split("valid")
    else:
        train, valid = read_tsv(args.train), read_tsv(args.valid)
    test = None
    if args.test:
        test = software_split(args.test) if args.data and args.test in SPLITS else read_tsv(args.test)
    train = list(dict.fromkeys((s, t) for s, t in train if s and t))
    return train, valid, test


def word_piece(texts, size):
    """A keras-hub WordPiece tokenizer trained on `texts`, case and accents kept."""
    data = tf.data.Dataset.from_tensor_slices(texts).batch(1000)
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        data, vocabulary_size=size, reserved_tokens=RESERVED, lowercase=False, strip_accents=False
    )
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary, lowercase=False, strip_accents=False)
    assert [tokenizer.token_to_id(t) for t in RESERVED] == list(range(len(RESERVED)))
    return tokenizer


def tokenize(tokenizer, texts):
    return [list(map(int, ids)) for ids in tokenizer(tf.constant(texts))]


def round_up(length, limit):
    return min(limit, max(PAD_MULTIPLE, -(-length // PAD_MULTIPLE) * PAD_MULTIPLE))


def batches(sources, targets, args, shuffle):
    """((encoder ids, decoder ids), next ids) batches; targets already hold [START] ... [END]."""
    data = tf.data.Dataset.from_tensor_slices(
        (tf.ragged.constant(sources, tf.int32), tf.ragged.constant(targets, tf.int32))
    )
    if shuffle:
        data = data.shuffle(len(sources), seed=args.seed, reshuffle_each_iteration=True)
    data = data.ragged_batch(args.batch_size)

    def pad(ids):
        dense = ids.to_tensor(PAD)
        length = tf.shape(dense)[1]
        if args.padding == "fixed":
            width = args.max_length
        else:
            width = tf.minimum(args.max_length, tf.maximum(PAD_MULTIPLE, -(-length // PAD_MULTIPLE) * PAD_MULTIPLE))
        return tf.pad(dense, [[0, 0], [0, width - length]])

    def split(source, target):
        return (pad(source), pad(target[:, :-1])), pad(target[:, 1:])

    options = tf.data.Options()
    # Without this, TensorFlow's fit can wait seconds at each epoch's end for tf.data's autotuning
    # thread while the CPU is busy (docs/design_choices.md, "Feeding arrays to `fit`"); the pipeline only pads
    # arrays already in memory.
    options.autotune.enabled = False
    return data.map(split).prefetch(2).with_options(options)


# ---------------------------------------------------------------- model


def build(args, source_vocabulary, target_vocabulary):
    """(training model, encoder, decoder body, output head): keras-hub layers, padding masks passed explicitly."""
    width, length = args.hidden_dim, args.max_length
    layer = dict(intermediate_dim=args.intermediate_dim, num_heads=args.num_heads, dropout=args.dropout)

    source_ids = keras.Input((None,), dtype="int32", name="encoder_inputs")
    embed = keras_hub.layers.TokenAndPositionEmbedding
    x = embed(source_vocabulary, length, width, name="source_embedding")(source_ids)
    x = keras.layers.Dropout(args.dropout)(x)
    source_mask = ops.not_equal(source_ids, PAD)
    for i in range(args.layers):
        x = keras_hub.layers.TransformerEncoder(**layer, name=f"encoder_{i}")(x, padding_mask=source_mask)
    encoder = keras.Model(source_ids, x, name="encoder")

    encoded = keras.Input((None, width), name="encoder_outputs")
    encoded_ids = keras.Input((None,), dtype="int32", name="encoder_ids")
    target_ids = keras.Input((None,), dtype="int32", name="decoder_inputs")
    y = embed(target_vocabulary, length, width, name="target_embedding")(target_ids)
    y = keras.layers.Dropout(args.dropout)(y)
    for i in range(args.layers):
        y = keras_hub.layers.TransformerDecoder(**layer, name=f"decoder_{i}")(
            y,
            encoded,
            decoder_padding_mask=ops.not_equal(target_ids, PAD),
            encoder_padding_mask=ops.not_equal(encoded_ids, PAD),
        )
    decoder = keras.Model([encoded, encoded_ids, target_ids], y, name="decoder")
    head = keras.layers.Dense(target_vocabulary, name="logits")

    inputs = [keras.Input((None,), dtype="int32", name="source"), keras.Input((None,), dtype="int32", name="target_in")]
    logits = head(decoder([encoder(inputs[0]), inputs[0], inputs[1]]))
    return keras.Model(inputs, logits, name="keras_hub_transformer"), encoder, decoder, head


class WarmupInverseSqrt(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak` over `warmup_steps`, then `peak * sqrt(warmup_steps / step)` (Vaswani et al., 2017)."""

    def __init__(self, peak, warmup_steps):
        self.peak, self.warmup_steps = float(peak), float(warmup_steps)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        return self.peak * ops.minimum(step / self.warmup_steps, ops.sqrt(self.warmup_steps / step))

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps}


class WallClockBudget(keras.callbacks.Callback):
    """Stops `fit` after the batch during which `seconds` of training (from `fit`'s start) ran out."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds, self.steps, self.started = seconds, 0, None

    def on_train_begin(self, logs=None):
        self.started = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if time.monotonic() - self.started >= self.seconds:
            self.model.stop_training = True


# ---------------------------------------------------------------- decoding and text


def compiled(function):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return tf.function(function, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    if backend == "jax":
        import jax

        return jax.jit(function)
    return function


def greedy_decoder(encoder, decoder, head, max_length):
    """`generate(source ids) -> ids` with keras-hub's GreedySampler: [START] then at most max_length - 1 tokens.

    Without a key/value cache: each step runs the decoder over the whole prompt (causal, so the
    positions after `index` do not change the one read) and the head at position `index - 1` only.
    """
    sampler = keras_hub.samplers.GreedySampler()

    def generate(source):
        encoded = encoder(source, training=False)
        rows = ops.shape(source)[0]
        prompt = ops.concatenate(
            [ops.full((rows, 1), START, dtype="int32"), ops.zeros((rows, max_length - 1), dtype="int32")], axis=1
        )

        def next_logits(prompt, cache, index):
            hidden = decoder([encoded, source, prompt], training=False)
            return head(hidden[:, index - 1, :]), None, cache

        return sampler(next_logits, prompt, stop_token_ids=[END], index=1)

    return compiled(generate)


def translate(generate, source_tokenizer, target_tokenizer, sources, max_length):
    """The translations of `sources` as the target tokenizer detokenizes them (pieces joined by spaces)."""
    outputs = []
    for start in range(0, len(sources), DECODE_BATCH):
        ids = [row[:max_length] or [UNK] for row in tokenize(source_tokenizer, sources[start : start + DECODE_BATCH])]
        width = round_up(max(map(len, ids)), max_length)
        batch = np.array([row + [PAD] * (width - len(row)) for row in ids], dtype="int32")
        for row in ops.convert_to_numpy(generate(batch)).tolist():
            row = row[1:]
            row = row[: row.index(END)] if END in row else row
            outputs.append([i for i in row if i != PAD])
    lengths = [len(row) for row in outputs]
    flat = tf.constant([i for row in outputs for i in row], tf.int32)
    texts = target_tokenizer.detokenize(tf.RaggedTensor.from_row_lengths(flat, tf.constant(lengths, tf.int64)))
    texts = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in texts]
    return [" ".join(t.split()) for t in texts]


def is_punctuation(piece):
    return not any(c.isalnum() for c in piece)


class Spacing:
    """Puts back the spaces WordPiece's detokenization loses, from how the training targets were written.

    The tokenizer splits text at spaces and around every punctuation mark, and its
    detokenization joins all pieces with one space ("n ’ ont", "% ( name ) s"). Two
    adjacent pieces are written without a space when, in the training targets, they
    stood side by side without one more often than with one; a pair never seen there is
    joined when its punctuation piece (either side) is usually written attached that way.
    """

    def __init__(self, tokenizer, texts):
        words = [text.split() for text in texts]
        chunks = [w for text in words for w in text]
        pieces = iter(tokenizer.detokenize(tokenizer(tf.constant(chunks))) if chunks else [])
        self.pairs = collections.defaultdict(lambda: [0, 0])
        self.left = collections.defaultdict(lambda: [0, 0])  # a punctuation piece: [attached to what precedes, not]
        self.right = collections.defaultdict(lambda: [0, 0])  # [attached to what follows, not]
        for text in words:
            sequence = []  # (piece, joined to the previous piece)
            for _ in text:
                chunk = next(pieces)
                chunk = (chunk.decode("utf-8") if isinstance(chunk, bytes) else str(chunk)).split()
                sequence += [(piece, i > 0) for i, piece in enumerate(chunk)]
            for (a, _), (b, joined) in zip(sequence, sequence[1:]):
                if "[UNK]" in (a, b):
                    continue
                self.pairs[a, b][0 if joined else 1] += 1
                if is_punctuation(b):
                    self.left[b][0 if joined else 1] += 1
                if is_punctuation(a):
                    self.right[a][0 if joined else 1] += 1

    def joined(self, a, b):
        if (a, b) in self.pairs:
            attached, spaced = self.pairs[a, b]
            return attached > spaced
        usually = lambda counts: counts[0] > counts[1]
        return (is_punctuation(b) and usually(self.left.get(b, (0, 0)))) or (
            is_punctuation(a) and usually(self.right.get(a, (0, 0)))
        )

    def __call__(self, text):
        pieces = [p for p in text.split() if p != "[UNK]"]
        out = pieces[:1]
        for a, b in zip(pieces, pieces[1:]):
            out.append(b if self.joined(a, b) else " " + b)
        return "".join(out)


# ---------------------------------------------------------------- run


def main(argv=None):
    args = parse(argv)
    keras.utils.set_random_seed(args.seed)
    os.makedirs(args.output_dir, exist_ok=True)
    train, valid, test = load(args)
    evaluation = test if test is not None else valid

    started = time.monotonic()
    source_tokenizer = word_piece([s for s, _ in train], args.vocab_size)
    target_tokenizer = word_piece([t for _, t in train], args.vocab_size)
    vocabulary_seconds = time.monotonic() - started
    sizes = {"source": source_tokenizer.vocabulary_size(), "target": target_tokenizer.vocabulary_size()}

    def encode(pairs, keep_long):
        sources = tokenize(source_tokenizer, [s for s, _ in pairs])
        targets = [[START] + ids + [END] for ids in tokenize(target_tokenizer, [t for _, t in pairs])]
        if keep_long:  # valid: cut to the model's lengths rather than left out
            sources = [s[: args.max_length] or [UNK] for s in sources]
            return sources, [t[:-1][: args.max_length] + [END] for t in targets]
        kept = [
            (s, t) for s, t in zip(sources, targets) if 0 < len(s) <= args.max_length and len(t) <= args.max_length + 1
        ]
        return [s for s, _ in kept], [t for _, t in kept]

    train_sources, train_targets = encode(train, keep_long=False)
    if not train_sources:
        sys.exit(f"expected some training pairs of at most {args.max_length} tokens, got none")
    valid_sources, valid_targets = encode(valid, keep_long=True)
    train_data = batches(train_sources, train_targets, args, shuffle=True)
    valid_data = batches(valid_sources, valid_targets, args, shuffle=False)
    steps_per_epoch = -(-len(train_sources) // args.batch_size)
    print(
        f"keras-hub translate: {len(train_sources)} training pairs ({len(train) - len(train_sources)} longer than "
        f"{args.max_length} tokens left out), {len(valid)} valid, {len(evaluation)} scored; WordPiece vocabularies "
        f"{sizes['source']} / {sizes['target']}; {args.max_seconds:g} s; backend {keras.backend.backend()}",
        flush=True,
    )

    model, encoder, decoder, head = build(args, sizes["source"], sizes["target"])
    schedule = WarmupInverseSqrt(args.learning_rate, args.warmup_steps)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD),
    )
    budget = WallClockBudget(args.max_seconds)
    history = model.fit(
        train_data, validation_data=valid_data, epochs=10**6, callbacks=[budget], shuffle=False, verbose=2
    )
    train_seconds = time.monotonic() - budget.started

    spacing = Spacing(target_tokenizer, [t for _, t in train])
    decoding = time.monotonic()
    generate = greedy_decoder(encoder, decoder, head, args.max_length)
    sources, references = [s for s, _ in evaluation], [t for _, t in evaluation]
    raw = translate(generate, source_tokenizer, target_tokenizer, sources, args.max_length)
    predictions = [spacing(text) for text in raw]
    decode_seconds = time.monotonic() - decoding

    metrics = {
        "side": "keras-hub",
        "bleu": corpus_bleu(predictions, references),
        "bleu_lowercase": corpus_bleu(predictions, references, lowercase=True),
        "chrf": corpus_chrf(predictions, references),
        "bleu_raw": corpus_bleu(raw, references),
        "bleu_raw_lowercase": corpus_bleu(raw, references, lowercase=True),
        "chrf_raw": corpus_chrf(raw, references),
        "train_seconds": round(train_seconds, 1),
        "epochs": len(history.epoch),
        "steps": budget.steps,
        "epochs_fraction": round(budget.steps / steps_per_epoch, 2),
        "decode_seconds": round(decode_seconds, 1),
        "vocabulary_seconds": round(vocabulary_seconds, 1),
        "valid_examples": len(valid),
        "evaluated_on": "test" if test is not None else "valid",
        "evaluation_examples": len(evaluation),
        "training_pairs": len(train_sources),
        "valid_loss": round(float(history.history["val_loss"][-1]), 4) if history.history.get("val_loss") else None,
        "backend": keras.backend.backend(),
        "vocabulary": "WordPiece, one per language (keras_hub.tokenizers.compute_word_piece_vocabulary), cased",
        "vocabulary_sizes": sizes,
        "parameters": model.count_params(),
        "learning_rate": {
            "schedule": "linear warm-up, then inverse square root",
            "peak": args.learning_rate,
            "warmup_steps": args.warmup_steps,
        },
        "decoding": f"greedy, keras_hub.samplers.GreedySampler, at most {args.max_length - 1} tokens",
        "padding": args.padding,
        "max_seconds": args.max_seconds,
        "seed": args.seed,
        "keras_hub": keras_hub.__version__,
    }
    with open(os.path.join(args.output_dir, "predictions.tsv"), "w", encoding="utf-8") as f:
        f.write("source\treference\tprediction\traw_prediction\n")
        f.writelines(f"{s}\t{r}\t{p}\t{w}\n" for s, r, p, w in zip(sources, references, predictions, raw))
    if test is not None:  # what benchmarks/translate_quality.py scores
        with open(os.path.join(args.output_dir, "test_predictions.json"), "w", encoding="utf-8") as f:
            json.dump(predictions, f, ensure_ascii=False)
    with open(os.path.join(args.output_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2, ensure_ascii=False)
    print(json.dumps(metrics, ensure_ascii=False), flush=True)
    return metrics


if __name__ == "__main__":
    main()

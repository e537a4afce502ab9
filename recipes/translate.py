"""Translate: the unaligned seq2seq recipe (the main job).

Trains an attentional RNN (`rnn-attention`, the default: bidirectional GRU encoder,
Bahdanau attention), a Transformer or a plain RNN encoder-decoder with `model.fit` to a
time budget: a joint SentencePiece vocabulary (three-way tied embeddings for the
Transformer), label-smoothed cross-entropy, a learning rate that warms up and decays
to the end of the budget, batches sorted by length, greedy BLEU on the valid set after every
epoch (the best weights are kept); then translates the valid set with beam search
through the exported SavedModel and reports BLEU, chrF and the share of placeholders,
options, paths and numbers copied unchanged. The default model is the one that
translated best on real data within the budget (benchmarks/RESULTS.md).

    python -m recipes.translate                       # embedded English->French software messages, 600 s
    python -m recipes.translate --train train.tsv --valid valid.tsv --max-seconds 1800
    python -m recipes.translate --data phrasebook --epochs 3   # the built English-French phrasebook
    python -m recipes.translate --tfds ted_hrlr_translate/pt_to_en --max-seconds 3600
"""

import importlib.util
import os
import time

import keras
import numpy as np
import tensorflow as tf

import keras_seq as ks
from keras_seq.data import corpora, loaders, phrasebook, pipeline, text
from keras_seq.metrics.copy_rate import copy_rate
from recipes import common

# Model family -> its defaults of the flags that depend on it. The GRU's width and dropout and the
# Transformer's peak rate were chosen by sweeps on real data (benchmarks/RESULTS.md).
RNN_DEFAULTS = {"hidden_dim": 192, "dropout": 0.0, "learning_rate": 3e-3}
MODELS = {
    "transformer": {"hidden_dim": 128, "dropout": 0.1, "learning_rate": 2e-3},
    "rnn-attention": RNN_DEFAULTS,
    "rnn": RNN_DEFAULTS,
}
VOCABULARIES = ("subword", "word", "char")
NUM_HEADS = 4  # of the Transformer's attention layers
# Embedded data, used when no --train/--tfds: name -> (train, valid) lists of (source, target).
DATA = {
    "software": lambda: (corpora.software_en_fr("train"), corpora.software_en_fr("valid")),
    "phrasebook": phrasebook.english_french_pairs,
}
# Default vocabulary sizes. Subword: the best of 2,000 / 4,000 / 8,000 pieces in the sweep on real
# data (benchmarks/RESULTS.md): the output layer and its softmax are most of a small Transformer's
# step, so fewer pieces buy more steps within a budget than they cost in longer sequences.
SUBWORD_SIZE, WORD_SIZE = 4000, 8000
# Subword regularization: training pairs are encoded this many times with drawn splits, read in turn by epoch.
SAMPLED_SPLITS = 8
# Sources and predictions are decoded in chunks of this many sentences (one compiled shape).
DECODE_BATCH = 100


def parse(argv=None):
    p = common.parser(
        "translate", __doc__.split("\n\n")[0], "UTF-8 TSV `source<TAB>target`", MODELS, "rnn-attention",
        epochs=None, batch_size=32, max_seconds=600,
    )
    p.add_argument("--data", choices=DATA, default="software",
                   help="embedded data when no --train/--tfds: English-French software messages (real, "
                        "keras_seq/data/corpora/software_en_fr) or the built phrasebook")
    p.add_argument("--vocabulary", choices=VOCABULARIES, default="subword",
                   help="subword: SentencePiece with byte fallback (no unknown characters); word or char: the tokens as split")
    common.add_subword_flags(p)
    p.add_argument("--vocab-size", "--vocabulary-size", dest="vocab_size", type=int,
                   help=f"ids per vocabulary (subword: an upper bound, default {SUBWORD_SIZE}; word/char: the most "
                        f"frequent tokens kept, default {WORD_SIZE})")
    p.add_argument("--subword-sampling", type=float, default=0.0, metavar="ALPHA",
                   help="subword regularization: each epoch reads training pairs split anew, drawn by SentencePiece "
                        "(unigram: smoothing alpha, e.g. 0.3; bpe: BPE-dropout rate, e.g. 0.1); 0 always takes the best split")
    p.add_argument("--separate-vocabularies", action="store_true",
                   help="subword: one SentencePiece model per language (default: one joint model and three-way tied embeddings)")
    p.add_argument("--max-length", type=int, default=64, help="longest sentence in tokens; longer training pairs are left out")
    p.add_argument("--hidden-dim", type=int, help="model width (Transformer d_model, RNN units and embeddings; default: "
                   + ", ".join(f"{m} {d['hidden_dim']}" for m, d in MODELS.items()) + ")")
    p.add_argument("--layers", type=int, default=2, help="Transformer blocks in the encoder and in the decoder")
    p.add_argument("--dropout", type=float,
                   help="dropout rate (transformer: every sublayer; rnn models: embeddings, annotations and decoder "
                        "states; default: " + ", ".join(f"{m} {d['dropout']:g}" for m, d in MODELS.items()) + ")")
    p.add_argument("--label-smoothing", type=float, default=0.1, help="epsilon of the label-smoothed cross-entropy")
    common.add_validation_flags(p, "BLEU", warmup=0.05)
    p.add_argument("--num-beams", type=int, default=4, help="beam width for the valid translations")
    p.add_argument("--length-penalty", type=float, default=1.4, help="GNMT length penalty alpha of the beam search")
    p.add_argument("--early-stopping", action="store_true",
                   help="beam search ends a sentence once its best ended beam outranks the unfinished ones (faster for a "
                        "weak model; with a length penalty it can give up a longer translation that would have won)")
    p.add_argument("--validate-sentences", type=int, default=300, metavar="N",
                   help="valid sentences translated greedily after each epoch for the validation BLEU")
    p.add_argument("--lowercase", action="store_true", help="lowercase both languages before tokenizing")
    p.add_argument("--input-feeding", action="store_true",
                   help="rnn-attention only: Bahdanau's own decoder (scores from the previous state, the context fed "
                        "into the GRU; Bahdanau et al., 2015, appendix A), run step by step")
    p.add_argument("--export-ctranslate2", action="store_true",
                   help="transformer only: also write the trained model as a CTranslate2 model, OUTPUT_DIR/ctranslate2 "
                        "(keras_seq.ctranslate2; needs the ctranslate2 package)")
    return p.parse_args(argv)


def load_pairs(args):
    """`(train, valid)` lists of (source, target) strings from the chosen data path; training pairs cleaned."""
    train, valid = common.load_splits(args, "translate", loaders.read_parallel_tsv, DATA)
    train, dropped = loaders.clean_parallel(train[: args.max_examples])
    if not train:
        raise common.UsageError("training data: expected some usable pairs, got none after cleaning")
    dropped = ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in dropped.items() if count)
    if dropped:
        print(f"translate: training pairs left out: {dropped}")
    return train, valid


def build_vocabularies(args, train_pairs):
    """`{"source": ..., "target": ...}` vocabularies built from the training pairs (one object twice when joint)."""
    sources, targets = [s for s, _ in train_pairs], [t for _, t in train_pairs]
    if args.vocabulary != "subword":
        build = dict(level=args.vocabulary, lowercase=args.lowercase, max_size=args.vocab_size)
        return {"source": text.Vocabulary.build(sources, **build), "target": text.Vocabulary.build(targets, **build)}
    train = lambda texts: common.subword_vocabulary(args, texts, args.vocab_size, args.lowercase)
    if args.separate_vocabularies:
        return {"source": train(sources), "target": train(targets)}
    joint = train(sources + targets)
    return {"source": joint, "target": joint}


def joint_vocabulary(args):
    return args.vocabulary == "subword" and not args.separate_vocabularies


def encoded(pairs, vocab):
    """Source ids and target ids with start and end, as ragged tensors."""
    source = vocab["source"].encode([s for s, _ in pairs])
    target = vocab["target"].encode([t for _, t in pairs], add_start=True, add_end=True)
    return source, target


def build_model(args, vocab, source_length, target_length):
    sizes = dict(source_vocabulary_size=len(vocab["source"]), target_vocabulary_size=len(vocab["target"]))
    tied = joint_vocabulary(args)  # one joint vocabulary: three-way tied embeddings
    if args.model == "transformer":
        return ks.models.transformer_seq2seq(
            source_length=source_length, target_length=target_length, num_layers=args.layers,
            hidden_dim=args.hidden_dim, num_heads=NUM_HEADS, intermediate_dim=2 * args.hidden_dim,
            dropout=args.dropout,
            tie_embeddings=tied, share_embeddings=tied, **sizes,
        )
    attention = "bahdanau" if args.model == "rnn-attention" else None
    return ks.models.rnn_seq2seq(
        embedding_dim=args.hidden_dim, units=args.hidden_dim, cell="gru", attention=attention,
        input_feeding=args.input_feeding, dropout=args.dropout, tie_embeddings=tied, share_embeddings=tied, **sizes,
    )


def compile_model(model, args):
    if args.model == "transformer":
        optimizer = ks.optimizers.Adam(args.learning_rate, beta_2=0.98, epsilon=1e-9)
    else:
        optimizer = ks.optimizers.Adam(args.learning_rate, clipnorm=1.0)
    model.compile(
        optimizer=optimizer,
        loss=ks.losses.LabelSmoothingCrossEntropy(args.label_smoothing, ignore_index=0),
        metrics=[ks.metrics.MaskedAccuracy(ignore_index=0)],
    )


def teacher_forcing(batch):
    target = batch["target"]
    return {"encoder_inputs": batch["source"], "decoder_inputs": target[:, :-1]}, target[:, 1:]


def greedy_translations(model, vocab, sources, length):
    """Greedy translations of `sources` by the Keras model (the validation during training)."""
    ids = vocab["source"].encode(sources)[:, :length].to_tensor(shape=[None, length]).numpy()
    translations = []
    for start in range(0, len(ids), DECODE_BATCH):
        chunk = ids[start : start + DECODE_BATCH]
        padded = np.pad(chunk, [(0, DECODE_BATCH - len(chunk)), (0, 0)])  # one shape: one compiled decoder
        best = model.generate(padded, max_length=length, strategy="greedy", end_id=text.END, start_id=text.START)
        decoded = vocab["target"].decode(keras.ops.convert_to_numpy(best)[: len(chunk)])
        translations += [t.decode("utf-8") for t in decoded.numpy()]
    return translations


def scores(predictions, references):
    """BLEU (cased and lowercased) and chrF of `predictions` against `references`."""
    return {
        "bleu": ks.metrics.corpus_bleu(predictions, references),
        "bleu_lowercase": ks.metrics.corpus_bleu(predictions, references, lowercase=True),
        "chrf": ks.metrics.corpus_chrf(predictions, references),
    }


def validation_score(vocab, valid_pairs, count, length):
    """`score(model)` for `BestByValidation`: greedy BLEU and chrF on `count` valid pairs spread over the set."""
    chosen = valid_pairs[:: max(1, len(valid_pairs) // count)][:count]
    sources, references = [s for s, _ in chosen], [t for _, t in chosen]

    def score(model):
        result = scores(greedy_translations(model, vocab, sources, length), references)
        return {"bleu": result["bleu"], "chrf": result["chrf"]}

    return score


def attention_examples(model, vocab, sources, translations, count=3):
    """(weights (T, S), source tokens, target tokens) for a few translations: Bahdanau weights, or the
    Transformer's last cross-attention averaged over heads."""
    examples = []
    for source, translation in list(zip(sources, translations))[:count]:
        source_ids = vocab["source"].encode([source]).to_tensor()
        target_ids = vocab["target"].encode([translation], add_start=True).to_tensor()
        weights = model.attention_weights({"encoder_inputs": source_ids, "decoder_inputs": target_ids})
        examples.append(
            (keras.ops.convert_to_numpy(weights)[0], vocab["source"].split(source), ["<s>"] + vocab["target"].split(translation))
        )
    return examples


def run(args):
    started = time.monotonic()
    if args.input_feeding and args.model != "rnn-attention":
        raise common.UsageError(f"--input-feeding: expected --model rnn-attention, got --model {args.model}")
    if args.export_ctranslate2 and args.model != "transformer":
        raise common.UsageError(f"--export-ctranslate2: expected --model transformer (CTranslate2 serves Transformers), "
                                f"got --model {args.model}")
    if args.export_ctranslate2 and importlib.util.find_spec("ctranslate2") is None:
        raise common.UsageError("--export-ctranslate2: expected the ctranslate2 package (pip install "
                                "'keras-seq[ctranslate2]'), found none installed")
    if args.subword_sampling and (args.vocabulary != "subword" or not 0 < args.subword_sampling <= 1):
        raise common.UsageError(f"--subword-sampling: expected a number in (0, 1] with --vocabulary subword, "
                                f"got {args.subword_sampling:g} with --vocabulary {args.vocabulary}")
    if args.vocab_size is None:
        args.vocab_size = SUBWORD_SIZE if args.vocabulary == "subword" else WORD_SIZE
    train_pairs, valid_pairs = load_pairs(args)
    vocab = common.vocabularies(args, lambda: build_vocabularies(args, train_pairs))
    source, target, kept, dropped = training_ids(train_pairs, vocab, args.max_length)
    longest = int(tf.maximum(tf.reduce_max(source.row_lengths()), tf.reduce_max(target.row_lengths())))
    variants = 1
    if args.subword_sampling:
        source, target = sampled_splits((source, target), kept, vocab, args.subword_sampling, args.seed)
        variants = SAMPLED_SPLITS
    # Batches are padded at most to the largest bucket edge: the model's lengths.
    length = pipeline.bucket_edges(longest)[-1]
    sizes = f"one joint {args.vocabulary} vocabulary of {len(vocab['source'])}" if vocab["source"] is vocab["target"] else (
        f"{args.vocabulary} vocabularies {len(vocab['source'])} / {len(vocab['target'])}")
    budget = " and ".join(f for f in (args.epochs and f"{args.epochs} epochs", args.max_seconds and f"{args.max_seconds:g} s") if f)
    print(
        f"translate: {len(train_pairs) - dropped} training pairs ({dropped} longer than {args.max_length} tokens left out), "
        f"{len(valid_pairs)} valid; {sizes}; training for {budget}; backend {keras.backend.backend()}"
    )
    valid_source, valid_target = encoded(valid_pairs, vocab)
    valid = {"source": valid_source[:, :length], "target": valid_target[:, :length]}

    def batches(seed, first_epoch, epochs, features=None):
        if features is None:  # the training pairs
            return pipeline.padded_batches({"source": source, "target": target}, args.batch_size, longest, teacher_forcing,
                                           seed, first_epoch, epochs, variants)
        return pipeline.padded_batches(features, args.batch_size, longest, teacher_forcing, seed, first_epoch, epochs)

    def build_and_compile(steps_per_epoch):
        model = build_model(args, vocab, length, length)
        compile_model(model, args)
        return model

    model_sizes = None  # what --model-parallel splits: only the Transformer
    if args.model == "transformer":
        model_sizes = dict(num_heads=NUM_HEADS, intermediate_dim=2 * args.hidden_dim,
                           vocabulary_sizes=sorted({len(vocab["source"]), len(vocab["target"])}))
    model, history, train_seconds, validation = common.train(
        args, build_and_compile, batches, batches(None, 0, 1, valid),
        learning_rate=(args.learning_rate, args.warmup),
        score=validation_score(vocab, valid_pairs, args.validate_sentences, length), monitor="bleu", model_sizes=model_sizes,
    )
    exported = time.monotonic()
    translator = common.export_and_load(
        args, "translate", vocab, source_length=length, max_length=length, num_beams=args.num_beams,
        length_penalty=args.length_penalty, early_stopping=args.early_stopping,
    )
    if args.export_ctranslate2:
        from keras_seq.ctranslate2 import export_ctranslate2

        export_ctranslate2(model, vocab["source"], vocab["target"], os.path.join(args.output_dir, "ctranslate2"))
    export_seconds = time.monotonic() - exported
    sources = [s for s, _ in valid_pairs]
    references = [t for _, t in valid_pairs]
    translated = time.monotonic()
    predictions = translate_all(translator, sources)
    translate_seconds = time.monotonic() - translated
    common.write_predictions(args.output_dir, zip(sources, references, predictions), ("source", "reference", "prediction"))

    rate, with_tokens = copy_rate(sources, predictions)
    metrics = {
        **scores(predictions, references),
        "exact_match": float(np.mean([p == r for p, r in zip(predictions, references)])),
        "copy_rate": rate,
        "copy_rate_sentences": with_tokens,
        "valid_loss": history["val_loss"][-1] if history.get("val_loss") else None,
        "valid_token_accuracy": history["val_masked_accuracy"][-1] if history.get("val_masked_accuracy") else None,
        "best_validation_bleu": validation.best,
        "weights": validation.chosen,
        "epochs": len(history.get("loss", [])),
        "train_seconds": round(train_seconds, 1),
        "export_seconds": round(export_seconds, 1),
        "translate_seconds": round(translate_seconds, 1),
        "total_seconds": round(time.monotonic() - started, 1),
        "model": args.model,
        "vocabulary": args.vocabulary if args.vocabulary != "subword" else f"subword ({args.subword_model}, "
                      f"{'separate' if args.separate_vocabularies else 'joint'})",
        "subword_sampling": args.subword_sampling,
        "vocabulary_size": len(vocab["target"]),
        "input_feeding": bool(model.get_config().get("input_feeding", False)),  # the checkpoint's, on --resume
        "backend": keras.backend.backend(),
        "valid_examples": len(valid_pairs),
    }
    if args.model != "rnn":  # the plain encoder-decoder has no attention to show
        title = "Bahdanau attention" if args.model == "rnn-attention" else "last decoder block's cross-attention, mean over heads"
        examples = attention_examples(model, vocab, sources, predictions)
        common.plot_attention(examples, os.path.join(args.output_dir, "attention.png"), f"{args.model}: {title}")
    common.plot_sinusoidal_encoding(os.path.join(args.output_dir, "sinusoidal_encoding.png"))
    common.write_metrics(args.output_dir, metrics)
    print_summary(metrics, list(zip(sources, references, predictions))[:3], args.output_dir)
    return metrics


def training_ids(train_pairs, vocab, max_length):
    """Source and target ids (ragged) of the pairs within `max_length` tokens, the pairs kept, and how many were left out."""
    source, target = encoded(train_pairs, vocab)
    keep = tf.logical_and(source.row_lengths() <= max_length, target.row_lengths() <= max_length + 2)
    dropped = int(tf.reduce_sum(1 - tf.cast(keep, tf.int32)))
    source, target = tf.ragged.boolean_mask(source, keep), tf.ragged.boolean_mask(target, keep)
    if source.nrows() == 0:
        raise common.UsageError(f"--max-length: expected some training pairs of at most {max_length} tokens, got none")
    kept = [pair for pair, k in zip(train_pairs, keep.numpy()) if k]
    return source, target, kept, dropped


def sampled_splits(best, pairs, vocab, alpha, seed, splits=SAMPLED_SPLITS):
    """`splits` encodings of `pairs`, one block after the other, each pair's subwords drawn anew
    (`SubwordVocabulary.sample`). A pair whose draw is longer than the longest best split (`best`:
    the `(source, target)` of `training_ids`, which set the model's lengths) keeps its best split.
    Every block has as many batches per epoch (`padded_batches` counts examples, not lengths), so
    a step count is a data position on `--resume`."""
    longest = tf.reduce_max(tf.concat([ids.row_lengths() for ids in best], 0))
    texts = [[pair[index] for pair in pairs] for index in (0, 1)]
    rows = tf.range(len(pairs), dtype=tf.int64)
    blocks = []
    for split in range(splits):
        drawn = [vocab[side].sample(texts[index], alpha, seed=seed * 1000 + 2 * split + index, add_start=index == 1,
                                    add_end=index == 1) for index, side in enumerate(("source", "target"))]
        too_long = tf.reduce_max(tf.stack([ids.row_lengths() for ids in drawn]), axis=0) > longest
        chosen = tf.where(too_long, rows + len(pairs), rows)
        blocks.append([tf.gather(tf.concat([d, b], 0), chosen) for d, b in zip(drawn, best)])
    return tf.concat([block[0] for block in blocks], 0), tf.concat([block[1] for block in blocks], 0)


def translate_all(translator, sources, batch_size=256):
    """The exported translator's outputs for `sources`, in batches."""
    predictions = []
    for start in range(0, len(sources), batch_size):
        predictions += [p.decode("utf-8") for p in translator.translate(tf.constant(sources[start : start + batch_size])).numpy()]
    return predictions


def print_summary(metrics, examples, output_dir):
    """A few (source, reference, prediction) examples, then the run's figures in one line."""
    for source, reference, prediction in examples:
        print(f"  {source}\n    reference:  {reference}\n    prediction: {prediction}")
    rate = metrics["copy_rate"]
    copied = "no placeholders to copy" if rate is None else f"copy rate {rate:.2f} of {metrics['copy_rate_sentences']}"
    print(
        f"translate: valid BLEU {metrics['bleu']:.1f} (lowercased {metrics['bleu_lowercase']:.1f}), chrF {metrics['chrf']:.1f}, "
        f"exact match {metrics['exact_match']:.3f}, {copied}; trained {metrics['train_seconds']:.0f} s, "
        f"exported {metrics['export_seconds']:.0f} s, translated {metrics['translate_seconds']:.0f} s; outputs in {output_dir}"
    )


if __name__ == "__main__":
    common.main("translate", run, parse)

"""Translate: the unaligned seq2seq recipe (the main job).

Trains a Transformer (default), an attentional RNN (`rnn-attention`, Bahdanau) or a
plain RNN encoder-decoder with `model.fit`: label-smoothed cross-entropy, the warm-up
schedule, bucketed batches; then translates the valid set with beam search through
the exported SavedModel and reports BLEU and chrF.

    python -m recipes.translate                       # embedded English->French phrasebook
    python -m recipes.translate --train train.tsv --valid valid.tsv --model rnn-attention
    python -m recipes.translate --tfds ted_hrlr_translate/pt_to_en --max-seconds 3600
"""

import os
import time

import keras
import numpy as np
import tensorflow as tf

import keras_seq as ks
from keras_seq.data import loaders, phrasebook, pipeline, text
from recipes import common

MODELS = ("transformer", "rnn-attention", "rnn")


def parse(argv=None):
    p = common.parser(
        "translate", __doc__.split("\n\n")[0], "UTF-8 TSV `source<TAB>target`", MODELS, "transformer", epochs=3, batch_size=64
    )
    p.add_argument("--max-length", type=int, default=64, help="longest sentence in tokens; longer training pairs are left out")
    p.add_argument("--vocabulary-size", type=int, default=16000, help="most frequent tokens kept per language")
    p.add_argument("--hidden-dim", type=int, default=128, help="model width (Transformer d_model, RNN units)")
    p.add_argument("--layers", type=int, default=2, help="Transformer blocks in the encoder and in the decoder")
    p.add_argument("--dropout", type=float, default=0.1, help="Transformer dropout rate")
    p.add_argument("--label-smoothing", type=float, default=0.1, help="epsilon of the label-smoothed cross-entropy")
    p.add_argument("--num-beams", type=int, default=4, help="beam width for the valid translations")
    p.add_argument("--lowercase", action="store_true", help="lowercase both languages before tokenizing")
    p.add_argument("--input-feeding", action="store_true",
                   help="rnn-attention only: Bahdanau's own decoder (scores from the previous state, the context fed "
                        "into the GRU; seed 000 eq. 4.2-4.5), run step by step")
    return p.parse_args(argv)


def load_pairs(args):
    """`(train, valid)` lists of (source, target) strings from the chosen data path."""
    if args.train:
        train, valid = loaders.read_parallel_tsv(args.train), loaders.read_parallel_tsv(args.valid)
    elif args.tfds:
        train, valid, _ = loaders.tfds_splits(args.tfds, "translate", data_dir=args.tfds_data_dir)
    else:
        train, valid = phrasebook.english_french_pairs()
    return train[: args.max_examples], valid


def encoded(pairs, vocab):
    """Source ids and target ids with start and end, as ragged tensors."""
    source = vocab["source"].encode([s for s, _ in pairs])
    target = vocab["target"].encode([t for _, t in pairs], add_start=True, add_end=True)
    return source, target


def build_model(args, vocab, source_length, target_length):
    sizes = dict(source_vocabulary_size=len(vocab["source"]), target_vocabulary_size=len(vocab["target"]))
    if args.model == "transformer":
        return ks.models.transformer_seq2seq(
            source_length=source_length, target_length=target_length, num_layers=args.layers,
            hidden_dim=args.hidden_dim, num_heads=4, intermediate_dim=2 * args.hidden_dim, dropout=args.dropout, **sizes,
        )
    attention = "bahdanau" if args.model == "rnn-attention" else None
    return ks.models.rnn_seq2seq(
        embedding_dim=args.hidden_dim, units=args.hidden_dim, cell="gru", attention=attention,
        input_feeding=args.input_feeding, **sizes,
    )


def compile_model(model, args, steps_per_epoch):
    if args.model == "transformer":
        warmup = max(1, min(4000, steps_per_epoch * 2))
        # Scale the schedule so that its peak (at the end of warm-up) is the learning rate asked for.
        peak = args.learning_rate or 2e-3
        rate = ks.schedules.InverseSquareRootWarmup(args.hidden_dim, warmup, scale=peak * (args.hidden_dim * warmup) ** 0.5)
        optimizer = keras.optimizers.Adam(rate, beta_2=0.98, epsilon=1e-9)
    else:
        optimizer = keras.optimizers.Adam(args.learning_rate or 3e-3, clipnorm=1.0)
    model.compile(
        optimizer=optimizer,
        loss=ks.losses.LabelSmoothingCrossEntropy(args.label_smoothing, ignore_index=0),
        metrics=[ks.metrics.MaskedAccuracy(ignore_index=0)],
    )


def teacher_forcing(batch):
    target = batch["target"]
    return {"encoder_inputs": batch["source"], "decoder_inputs": target[:, :-1]}, target[:, 1:]


def attention_examples(model, vocab, sources, translations, count=3):
    """(weights (T, S), source tokens, target tokens) for a few translations: Bahdanau weights, or the
    Transformer's last cross-attention averaged over heads."""
    examples = []
    for source, translation in list(zip(sources, translations))[:count]:
        source_ids = vocab["source"].encode([source]).to_tensor()
        target_ids = vocab["target"].encode([translation], add_start=True).to_tensor()
        weights = model.attention_weights({"encoder_inputs": source_ids, "decoder_inputs": target_ids})
        tokens = lambda v, s: [t.decode() for t in text.tokenize([s], v.level, v.lowercase).to_list()[0]]
        examples.append((keras.ops.convert_to_numpy(weights)[0], tokens(vocab["source"], source), ["<s>"] + tokens(vocab["target"], translation)))
    return examples


def run(args):
    started = time.monotonic()
    if args.input_feeding and args.model != "rnn-attention":
        raise common.UsageError(f"--input-feeding: expected --model rnn-attention, got --model {args.model}")
    train_pairs, valid_pairs = load_pairs(args)
    build = dict(lowercase=args.lowercase, max_size=args.vocabulary_size)
    vocab = common.vocabularies(args, {
        "source": lambda: text.Vocabulary.build([s for s, _ in train_pairs], **build),
        "target": lambda: text.Vocabulary.build([t for _, t in train_pairs], **build),
    })
    source, target = encoded(train_pairs, vocab)
    keep = tf.logical_and(source.row_lengths() <= args.max_length, target.row_lengths() <= args.max_length + 2)
    dropped = int(tf.reduce_sum(1 - tf.cast(keep, tf.int32)))
    source, target = tf.ragged.boolean_mask(source, keep), tf.ragged.boolean_mask(target, keep)
    if source.nrows() == 0:
        raise common.UsageError(f"--max-length: expected some training pairs of at most {args.max_length} tokens, got none")
    longest = int(tf.maximum(tf.reduce_max(source.row_lengths()), tf.reduce_max(target.row_lengths())))
    # Batches are padded up to a bucket edge, so the model's lengths are the largest edge.
    length = pipeline.bucket_edges(longest)[-1]
    print(
        f"translate: {len(train_pairs) - dropped} training pairs ({dropped} longer than {args.max_length} tokens left out), "
        f"{len(valid_pairs)} valid; vocabularies {len(vocab['source'])} / {len(vocab['target'])}; backend {keras.backend.backend()}"
    )
    valid_source, valid_target = encoded(valid_pairs, vocab)
    valid = {"source": valid_source[:, :length], "target": valid_target[:, :length]}

    def batches(seed, first_epoch, epochs, features={"source": source, "target": target}):
        return pipeline.padded_batches(features, args.batch_size, longest, teacher_forcing, seed, first_epoch, epochs)

    def build_and_compile(steps_per_epoch):
        model = build_model(args, vocab, length, length)
        compile_model(model, args, steps_per_epoch)
        return model

    model, history, train_seconds = common.train(args, build_and_compile, batches, batches(None, 0, 1, valid))
    translator = common.export_and_load(
        args, "translate", vocab, source_length=length, max_length=length, num_beams=args.num_beams, length_penalty=0.6
    )
    sources = [s for s, _ in valid_pairs]
    references = [t for _, t in valid_pairs]
    predictions = []
    for start in range(0, len(sources), 256):
        predictions += [p.decode("utf-8") for p in translator.translate(tf.constant(sources[start : start + 256])).numpy()]
    common.write_predictions(args.output_dir, zip(sources, references, predictions), ("source", "reference", "prediction"))

    metrics = {
        "bleu": ks.metrics.corpus_bleu(predictions, references),
        "chrf": ks.metrics.corpus_chrf(predictions, references),
        "exact_match": float(np.mean([p == r for p, r in zip(predictions, references)])),
        "valid_loss": history["val_loss"][-1] if history.get("val_loss") else None,
        "valid_token_accuracy": history["val_masked_accuracy"][-1] if history.get("val_masked_accuracy") else None,
        "epochs": len(history.get("loss", [])),
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.monotonic() - started, 1),
        "model": args.model,
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
    for source, reference, prediction in list(zip(sources, references, predictions))[:3]:
        print(f"  {source}\n    reference:  {reference}\n    prediction: {prediction}")
    print(f"translate: valid BLEU {metrics['bleu']:.1f}, chrF {metrics['chrf']:.1f}, exact match {metrics['exact_match']:.3f}; outputs in {args.output_dir}")
    return metrics


if __name__ == "__main__":
    common.main("translate", run, parse)

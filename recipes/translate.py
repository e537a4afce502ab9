"""Translate: the unaligned seq2seq recipe (the main job).

Trains an attentional RNN (`rnn-attention`, the default: bidirectional GRU encoder,
Bahdanau attention), a Transformer or a plain RNN encoder-decoder with `model.fit` to a
time budget: a joint SentencePiece vocabulary (three-way tied embeddings for the
Transformer), label-smoothed cross-entropy, a learning rate that warms up and decays
to the end of the budget, batches sorted by length (by examples or by tokens) read from the
training data prepared once into memory-mapped ids, greedy BLEU on the valid set after every
validation period (the best weights are kept); then translates the valid set with beam search
through the exported SavedModel and reports BLEU, chrF and the share of placeholders,
options, paths and numbers copied unchanged. The default model is the one that
translated best on real data within the budget (benchmarks/RESULTS.md).

    python -m recipes.translate                       # embedded English->French software messages, 600 s
    python -m recipes.translate --train train.tsv --valid valid.tsv --max-seconds 1800
    python -m recipes.translate --data phrasebook --epochs 3   # the built English-French phrasebook
    python -m recipes.translate --tfds ted_hrlr_translate/pt_to_en --max-seconds 3600
"""

import argparse
import hashlib
import importlib.util
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

import keras_seq as ks
from keras_seq.data import (
    batch_plan,
    corpora,
    loaders,
    phrasebook,
    pipeline,
    placeholders,
    preparation,
    prepared,
    text,
)
from keras_seq.data.subword import vocabulary_from_config
from keras_seq.metrics.copy_rate import copy_rate
from recipes import common, devices, training_data
from recipes.errors import UsageError

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
# Pairs whose longer side has more than this many times the characters of the shorter are left out (misaligned
# lines); the ratio of Moses' clean-corpus-n.perl, which counts words.
MAX_RATIO = 9.0
# Sentences the vocabulary is trained on at most (a seeded sample of the pairs, both sides).
VOCAB_SAMPLE = 1_000_000
# Sources and predictions are decoded in chunks of this many sentences (one compiled shape).
DECODE_BATCH = 100


def parse(argv=None):
    p = common.parser(
        "translate",
        __doc__.split("\n\n")[0],
        "UTF-8 TSV `source<TAB>target`",
        MODELS,
        "rnn-attention",
        epochs=None,
        batch_size=32,
        max_seconds=600,
        derived_defaults=_derived_defaults,
    )
    p.add_argument(
        "--data",
        choices=DATA,
        default="software",
        help="embedded data when no --train/--tfds: English-French software messages (real, "
        "keras_seq/data/corpora/software_en_fr) or the built phrasebook",
    )
    p.add_argument(
        "--vocabulary",
        choices=VOCABULARIES,
        default="subword",
        help="subword: SentencePiece with byte fallback (no unknown characters); word or char: the tokens as split",
    )
    common.add_subword_flags(p)
    p.add_argument(
        "--vocab-size",
        "--vocabulary-size",
        dest="vocab_size",
        type=int,
        help=f"ids per vocabulary (subword: an upper bound, default {SUBWORD_SIZE}; word/char: the most "
        f"frequent tokens kept, default {WORD_SIZE})",
    )
    p.add_argument(
        "--subword-sampling",
        type=float,
        default=0.0,
        metavar="ALPHA",
        help="subword regularization: each epoch reads training pairs split anew, drawn by SentencePiece "
        "(unigram: smoothing alpha, e.g. 0.3; bpe: BPE-dropout rate, e.g. 0.1); 0 always takes the best split",
    )
    p.add_argument(
        "--separate-vocabularies",
        action="store_true",
        help="subword: one SentencePiece model per language (default: one joint model and three-way tied embeddings)",
    )
    p.add_argument(
        "--max-length", type=int, default=64, help="longest sentence in tokens; longer training pairs are left out"
    )
    p.add_argument(
        "--batch-tokens",
        type=int,
        metavar="N",
        help="batches of at most N padded tokens (rows x width) instead of --batch-size examples",
    )
    p.add_argument(
        "--vocab-sample",
        type=int,
        default=VOCAB_SAMPLE,
        metavar="N",
        help="sentences (of a seeded sample of the training pairs, both sides) the vocabulary is trained on",
    )
    p.add_argument(
        "--prepared-dir",
        metavar="DIR",
        help="where the prepared training data is kept, by a digest of the data and the flags that shape it "
        "(default: OUTPUT_DIR/prepared); a rerun, --resume and every process reuse it",
    )
    p.add_argument(
        "--verify-data",
        action="store_true",
        help="read the whole --train file to check its digest; by default a rerun or --resume finds its "
        "prepared data by the file's size, modification time and 64 sampled blocks",
    )
    p.add_argument(
        "--hidden-dim",
        type=int,
        help="model width (Transformer d_model, RNN units and embeddings; default: "
        + ", ".join(f"{m} {d['hidden_dim']}" for m, d in MODELS.items())
        + ")",
    )
    p.add_argument("--layers", type=int, default=2, help="Transformer blocks in the encoder and in the decoder")
    p.add_argument(
        "--dropout",
        type=float,
        help="dropout rate (transformer: every sublayer; rnn models: embeddings, annotations and decoder "
        "states; default: " + ", ".join(f"{m} {d['dropout']:g}" for m, d in MODELS.items()) + ")",
    )
    p.add_argument("--label-smoothing", type=float, default=0.1, help="epsilon of the label-smoothed cross-entropy")
    common.add_validation_flags(p, "BLEU", warmup=0.05)
    p.add_argument("--num-beams", type=int, default=4, help="beam width for the valid translations")
    p.add_argument("--length-penalty", type=float, default=1.4, help="GNMT length penalty alpha of the beam search")
    p.add_argument(
        "--early-stopping",
        action="store_true",
        help="beam search ends a sentence once its best ended beam outranks the unfinished ones (faster for a "
        "weak model; with a length penalty it can give up a longer translation that would have won)",
    )
    p.add_argument(
        "--validate-sentences",
        type=int,
        default=300,
        metavar="N",
        help="valid sentences translated greedily after each epoch for the validation BLEU",
    )
    p.add_argument("--lowercase", action="store_true", help="lowercase both languages before tokenizing")
    p.add_argument(
        "--placeholders",
        action=argparse.BooleanOptionalAction,
        help="subword only (and its default): spans to keep verbatim (format fields, tags, URLs, paths, options, "
        "numbers) become placeholder tokens in the training pairs and, in the export, before the model, and come "
        "back after it (keras_seq.data.placeholders)",
    )
    p.add_argument(
        "--input-feeding",
        action="store_true",
        help="rnn-attention only: Bahdanau's own decoder (scores from the previous state, the context fed "
        "into the GRU; Bahdanau et al., 2015, appendix A), run step by step",
    )
    p.add_argument(
        "--export-ctranslate2",
        action="store_true",
        help="transformer only: also write the trained model as a CTranslate2 model, OUTPUT_DIR/ctranslate2 "
        "(keras_seq.ctranslate2; needs the ctranslate2 package)",
    )
    return p.parse_args(argv)


def _derived_defaults(values):
    """`--vocab-size`'s and `--placeholders`' defaults, which depend on `--vocabulary` (`common.resolve_settings`
    applies them)."""
    subword = values["vocabulary"] == "subword"
    derived = {}
    if values["vocab_size"] is None:
        derived["vocab_size"] = SUBWORD_SIZE if subword else WORD_SIZE
    if values["placeholders"] is None:
        derived["placeholders"] = subword
    return derived


def training_records(settings):
    """`(records, digest, valid pairs)`: `records()` yields the training pairs one at a time (the --train
    file or the --tfds split streamed, or the embedded set; with --placeholders, protected), `digest` names
    their content."""
    records, digest, valid = _raw_records(settings)
    if settings.placeholders:
        return (lambda: (placeholders.protect_pair(*pair) for pair in records())), digest, valid
    return records, digest, valid


def _raw_records(settings):
    if settings.train:
        records = lambda: loaders.streamed_parallel_tsv(settings.train)
        if next(records(), None) is None:  # a missing or unreadable file fails here too, before any work
            raise UsageError(f"data file {settings.train!r}: expected `source<TAB>target` lines, got no example.")
        digest = preparation.known_file_digest(settings.train, prepared_root(settings), settings.verify_data)
        return records, digest, loaders.read_parallel_tsv(settings.valid)
    if settings.tfds:
        builder, valid_split = loaders.tfds_builder(settings.tfds, "translate", data_dir=settings.tfds_data_dir)
        return (
            (lambda: loaders.tfds_pairs(builder, "train")),
            f"tfds {builder.info.full_name}",
            list(loaders.tfds_pairs(builder, valid_split)),
        )
    train, valid = DATA[settings.data]()
    return (lambda: iter(train)), preparation.records_digest(train), valid


def prepared_root(settings):
    """The folder of the prepared data and of the training files' remembered digests."""
    return settings.prepared_dir or os.path.join(settings.shared_dir, "prepared")


def preparation_key(settings, digest):
    """A digest of the training data and of every flag that shapes its prepared form."""
    shaping = {
        name: getattr(settings, name)
        for name in (
            "vocabulary",
            "vocab_size",
            "subword_model",
            "separate_vocabularies",
            "lowercase",
            "placeholders",
            "max_length",
            "vocab_sample",
            "max_examples",
            "subword_sampling",
        )
    }
    if settings.subword_sampling:
        shaping["seed"] = settings.seed  # seeds the drawn splits
    text = json.dumps({"data": digest, "format": prepared.FORMAT, "settings": shaping}, sort_keys=True)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def prepared_pairs(settings):
    """`(prepared training pairs, vocabularies, valid pairs, key)`: the training data prepared once
    (`keras_seq.data.preparation`) and reused by a rerun, `--resume` and every process."""
    records, digest, valid = training_records(settings)
    key = preparation_key(settings, digest)
    common.check_resumed_data(settings, key)
    folder = preparation.prepared_folder(prepared_root(settings), key)
    if prepared.read_manifest(folder) is not None:
        print(f"translate: reusing the training data prepared in {folder}")
        data = prepared.Prepared(folder)
    elif settings.process_id:
        data = preparation.wait_for(folder, "translate")
    else:
        data = preparation.prepare(
            folder,
            records,
            "translate",
            lambda sample: _vocabularies_of(settings, sample),
            lambda chunk, vocab, variant: encoded_chunk(settings, chunk, vocab, variant),
            ("source", "target"),
            lambda vocab: max(len(vocab["source"]), len(vocab["target"])),
            settings.vocab_sample // 2,
            seed=0,
            max_ratio=MAX_RATIO,
            max_records=settings.max_examples,
            variants=SAMPLED_SPLITS if settings.subword_sampling else 1,
        )
    configs = data.manifest["vocabularies"]
    by_config = {}  # equal configs (a joint vocabulary) give one object
    vocab = common.vocabularies(
        settings,
        lambda: {
            name: by_config.setdefault(json.dumps(config, sort_keys=True), vocabulary_from_config(config))
            for name, config in configs.items()
        },
    )
    return data, vocab, valid, key


def _vocabularies_of(settings, sample):
    vocab = build_vocabularies(settings, sample)
    return {name: vocabulary.get_config() for name, vocabulary in vocab.items()}, vocab


def encoded_chunk(settings, chunk, vocab, variant):
    """`({column: (flat ids, lengths)}, rows kept)` of a chunk of pairs: the best split, or with
    --subword-sampling a split drawn anew for each `variant` (a drawn row past the model's
    longest keeps its best split); rows past --max-length are left out."""
    source, target = encoded(chunk, vocab)
    keep = (source.row_lengths() <= settings.max_length).numpy() & (
        target.row_lengths() <= settings.max_length + 2
    ).numpy()
    columns = [source, target]
    if settings.subword_sampling:
        texts = [[pair[index] for pair in chunk] for index in (0, 1)]
        longest = pipeline.bucket_edges(settings.max_length + 2)[-1]
        for index, side in enumerate(("source", "target")):
            drawn = vocab[side].sample(
                texts[index],
                settings.subword_sampling,
                seed=settings.seed * 1000 + 2 * variant + index,
                add_start=index == 1,
                add_end=index == 1,
            )
            columns[index] = _rows_where(drawn.row_lengths() <= longest, drawn, columns[index])
    return {
        name: (ids.flat_values.numpy(), ids.row_lengths().numpy()) for name, ids in zip(("source", "target"), columns)
    }, keep


def _rows_where(condition, when_true, when_false):
    """The rows of ragged `when_true` where `condition` holds, else those of `when_false`."""
    rows = tf.range(tf.shape(condition)[0], dtype=tf.int64)
    chosen = tf.where(condition, rows, rows + tf.shape(condition, out_type=tf.int64)[0])
    return tf.gather(tf.concat([when_true, when_false], 0), chosen)


def build_vocabularies(settings, train_pairs):
    """`{"source": ..., "target": ...}` vocabularies built from the training pairs (one object twice when joint)."""
    sources, targets = [s for s, _ in train_pairs], [t for _, t in train_pairs]
    if settings.vocabulary != "subword":
        build = dict(level=settings.vocabulary, lowercase=settings.lowercase, max_size=settings.vocab_size)
        return {"source": text.Vocabulary.build(sources, **build), "target": text.Vocabulary.build(targets, **build)}
    symbols = placeholders.TOKENS if settings.placeholders else ()
    train = lambda texts: common.subword_vocabulary(settings, texts, settings.vocab_size, settings.lowercase, symbols)
    if settings.separate_vocabularies:
        return {"source": train(sources), "target": train(targets)}
    joint = train(sources + targets)
    return {"source": joint, "target": joint}


def joint_vocabulary(settings):
    return settings.vocabulary == "subword" and not settings.separate_vocabularies


def encoded(pairs, vocab):
    """Source ids and target ids with start and end, as ragged tensors."""
    source = vocab["source"].encode([s for s, _ in pairs])
    target = vocab["target"].encode([t for _, t in pairs], add_start=True, add_end=True)
    return source, target


def build_model(settings, vocab, source_length, target_length):
    sizes = dict(source_vocabulary_size=len(vocab["source"]), target_vocabulary_size=len(vocab["target"]))
    tied = joint_vocabulary(settings)  # one joint vocabulary: three-way tied embeddings
    if settings.model == "transformer":
        return ks.models.transformer_seq2seq(
            source_length=source_length,
            target_length=target_length,
            num_layers=settings.layers,
            hidden_dim=settings.hidden_dim,
            num_heads=NUM_HEADS,
            intermediate_dim=2 * settings.hidden_dim,
            dropout=settings.dropout,
            tie_embeddings=tied,
            share_embeddings=tied,
            **sizes,
        )
    attention = "bahdanau" if settings.model == "rnn-attention" else None
    return ks.models.rnn_seq2seq(
        embedding_dim=settings.hidden_dim,
        units=settings.hidden_dim,
        cell="gru",
        attention=attention,
        input_feeding=settings.input_feeding,
        dropout=settings.dropout,
        tie_embeddings=tied,
        share_embeddings=tied,
        **sizes,
    )


def compile_model(model, settings):
    if settings.model == "transformer":
        optimizer = ks.optimizers.Adam(settings.learning_rate, beta_2=0.98, epsilon=1e-9)
    else:
        optimizer = ks.optimizers.Adam(settings.learning_rate, clipnorm=1.0)
    model.compile(
        optimizer=optimizer,
        loss=ks.losses.LabelSmoothingCrossEntropy(settings.label_smoothing, ignore_index=0),
        metrics=[ks.metrics.MaskedAccuracy(ignore_index=0)],
    )


def teacher_forcing(batch):
    target = batch["target"]
    return {"encoder_inputs": batch["source"], "decoder_inputs": target[:, :-1]}, target[:, 1:]


def greedy_translations(model, vocab, sources, length, protect=False):
    """Greedy translations of `sources` by the Keras model (the validation during training); with `protect`,
    through placeholders as the export translates (no translation ends before it holds each placeholder)."""
    protected = [placeholders.protect(source) if protect else (source, []) for source in sources]
    ids = vocab["source"].encode([p for p, _ in protected])[:, :length].to_tensor(shape=[None, length]).numpy()
    counts = [len(spans) for _, spans in protected]
    required_ids = (
        placeholders.required_ids(counts, placeholders.token_ids(vocab["target"])).numpy() if protect else None
    )
    translations = []
    for start in range(0, len(ids), DECODE_BATCH):
        count = min(DECODE_BATCH, len(ids) - start)
        padded = lambda x: np.pad(x[start : start + count], [(0, DECODE_BATCH - count), (0, 0)])  # one shape
        required = {"required_ids": padded(required_ids)} if protect else {}
        best = model.generate(
            padded(ids), max_length=length, strategy="greedy", end_id=text.END, start_id=text.START, **required
        )
        decoded = vocab["target"].decode(keras.ops.convert_to_numpy(best)[:count])
        translations += [t.decode("utf-8") for t in decoded.numpy()]
    return [placeholders.restore(t, spans) for t, (_, spans) in zip(translations, protected)]


def scores(predictions, references):
    """BLEU (cased and lowercased) and chrF of `predictions` against `references`."""
    return {
        "bleu": ks.metrics.corpus_bleu(predictions, references),
        "bleu_lowercase": ks.metrics.corpus_bleu(predictions, references, lowercase=True),
        "chrf": ks.metrics.corpus_chrf(predictions, references),
    }


def validation_score(vocab, valid_pairs, count, length, protect):
    """`score(model)` for `BestByValidation`: greedy BLEU and chrF on `count` valid pairs spread over the set."""
    chosen = valid_pairs[:: max(1, len(valid_pairs) // count)][:count]
    sources, references = [s for s, _ in chosen], [t for _, t in chosen]

    def score(model):
        result = scores(greedy_translations(model, vocab, sources, length, protect), references)
        return {"bleu": result["bleu"], "chrf": result["chrf"]}

    return score


def attention_examples(model, vocab, sources, translations, count=3, protect=False):
    """(weights (T, S), source tokens, target tokens) for a few translations: Bahdanau weights, or the
    Transformer's last cross-attention averaged over heads; with `protect`, of the texts the model read and
    wrote (placeholder tokens in place of the spans)."""
    examples = []
    for source, translation in list(zip(sources, translations))[:count]:
        if protect:
            source, translation = placeholders.protect_pair(source, translation)
        source_ids = vocab["source"].encode([source]).to_tensor()
        target_ids = vocab["target"].encode([translation], add_start=True).to_tensor()
        weights = model.attention_weights({"encoder_inputs": source_ids, "decoder_inputs": target_ids})
        examples.append(
            (
                keras.ops.convert_to_numpy(weights)[0],
                vocab["source"].split(source),
                ["<s>"] + vocab["target"].split(translation),
            )
        )
    return examples


def run(settings):
    """Train, export and evaluate a translation model (the module's docstring); returns the metrics written."""
    started = time.monotonic()
    check_translation_flags(settings)
    data, vocab, valid_pairs, key = prepared_pairs(settings)
    # Batches are padded at most to the largest bucket edge: the model's lengths.
    length = pipeline.bucket_edges(data.longest)[-1]
    print(
        f"translate: {data.rows:,} training pairs{_left_out_note(data.manifest['left_out'])}, "
        f"{len(valid_pairs)} valid; {_vocabulary_sizes(settings, vocab)}; training for {_budget_text(settings)}; "
        f"backend {keras.backend.backend()}"
    )
    model, history, train_seconds, validation = train_model(settings, data, vocab, valid_pairs, key, length)
    translator, export_seconds = _timed(export_model, settings, model, vocab, length)
    sources, references = [s for s, _ in valid_pairs], [t for _, t in valid_pairs]
    predictions, translate_seconds = _timed(translate_all, translator, sources)
    common.write_predictions(
        settings.output_dir, zip(sources, references, predictions), ("source", "reference", "prediction")
    )
    seconds = {"train_seconds": train_seconds, "export_seconds": export_seconds, "translate_seconds": translate_seconds}
    metrics = run_metrics(
        settings, model, vocab, sources, references, predictions, history, validation, seconds, started
    )
    plot_model(settings, model, vocab, sources, predictions)
    common.write_metrics(settings.output_dir, metrics)
    print_summary(metrics, list(zip(sources, references, predictions))[:3], settings.output_dir)
    return metrics


def check_translation_flags(settings):
    """Reject flags that do not go together (an option of another model, a missing package), before any work."""
    if settings.input_feeding and settings.model != "rnn-attention":
        raise UsageError(f"--input-feeding: expected --model rnn-attention, got --model {settings.model}")
    if settings.export_ctranslate2 and settings.model != "transformer":
        raise UsageError(
            f"--export-ctranslate2: expected --model transformer (CTranslate2 serves Transformers), "
            f"got --model {settings.model}"
        )
    if settings.export_ctranslate2 and importlib.util.find_spec("ctranslate2") is None:
        raise UsageError(
            "--export-ctranslate2: expected the ctranslate2 package (pip install "
            "'keras-seq[ctranslate2]'), found none installed"
        )
    if settings.placeholders and settings.vocabulary != "subword":
        raise UsageError(
            f"--placeholders: expected --vocabulary subword (its pieces keep each placeholder whole), "
            f"got --vocabulary {settings.vocabulary}"
        )
    if settings.subword_sampling and (settings.vocabulary != "subword" or not 0 < settings.subword_sampling <= 1):
        raise UsageError(
            f"--subword-sampling: expected a number in (0, 1] with --vocabulary subword, "
            f"got {settings.subword_sampling:g} with --vocabulary {settings.vocabulary}"
        )


def train_model(settings, data, vocab, valid_pairs, key, length):
    """`common.train` on the prepared pairs `data` (batched by a `BatchPlan`, each process reading its own rows),
    validated by greedy BLEU on `valid_pairs`; `length`: the model's source and target length."""
    loss_pairs = [placeholders.protect_pair(*pair) for pair in valid_pairs] if settings.placeholders else valid_pairs
    valid_source, valid_target = encoded(loss_pairs, vocab)
    valid = {"source": valid_source[:, :length], "target": valid_target[:, :length]}
    plan = batch_plan.BatchPlan(
        data.lengths,
        data.rows,
        settings.seed,
        data.longest,
        batch_size=None if settings.batch_tokens else settings.batch_size,
        batch_tokens=settings.batch_tokens,
        pad_to_edges=pipeline.pads_to_edges(),
        variants=data.variants,
        parts=devices.data_parallel_parts(settings),
    )
    batches = training_data.PreparedBatches(
        data, plan, teacher_forcing, key, settings.process_id, settings.num_processes
    )
    valid_batches = pipeline.padded_batches(valid, settings.batch_size, data.longest, teacher_forcing)

    def build_and_compile(steps_per_epoch):
        model = build_model(settings, vocab, length, length)
        compile_model(model, settings)
        return model

    model_sizes = None  # what --model-parallel splits: only the Transformer
    if settings.model == "transformer":
        model_sizes = dict(
            num_heads=NUM_HEADS,
            intermediate_dim=2 * settings.hidden_dim,
            vocabulary_sizes=sorted({len(vocab["source"]), len(vocab["target"])}),
        )
    return common.train(
        settings,
        build_and_compile,
        batches,
        valid_batches,
        learning_rate=(settings.learning_rate, settings.warmup),
        score=validation_score(vocab, valid_pairs, settings.validate_sentences, length, settings.placeholders),
        monitor="bleu",
        model_sizes=model_sizes,
    )


def export_model(settings, model, vocab, length):
    """The run's model exported as a string-in SavedModel with beam search (loaded back: the translator),
    and with --export-ctranslate2 also as a CTranslate2 model."""
    translator = common.export_and_load(
        settings,
        "translate",
        vocab,
        source_length=length,
        max_length=length,
        num_beams=settings.num_beams,
        length_penalty=settings.length_penalty,
        early_stopping=settings.early_stopping,
        placeholders=settings.placeholders,
    )
    if settings.export_ctranslate2:
        from keras_seq.ctranslate2 import export_ctranslate2

        export_ctranslate2(
            model,
            vocab["source"],
            vocab["target"],
            os.path.join(settings.output_dir, "ctranslate2"),
            num_beams=settings.num_beams,
            length_penalty=settings.length_penalty,
            placeholders=settings.placeholders,
        )
    return translator


def _timed(function, *arguments):
    """`(function(*arguments), seconds it took)`."""
    begun = time.monotonic()
    result = function(*arguments)
    return result, time.monotonic() - begun


def run_metrics(settings, model, vocab, sources, references, predictions, history, validation, seconds, started):
    """metrics.json's figures: the valid translations' scores, the training's last validation, the time
    of each stage (`seconds`, rounded here) and since the run `started`, and the run's settings."""
    rate, with_tokens = copy_rate(sources, predictions)
    return {
        **scores(predictions, references),
        "exact_match": float(np.mean([p == r for p, r in zip(predictions, references)])),
        "copy_rate": rate,
        "copy_rate_sentences": with_tokens,
        "valid_loss": history["val_loss"][-1] if history.get("val_loss") else None,
        "valid_token_accuracy": history["val_masked_accuracy"][-1] if history.get("val_masked_accuracy") else None,
        "best_validation_bleu": validation.best,
        "weights": validation.chosen,
        "epochs": len(history.get("loss", [])),
        **{name: round(value, 1) for name, value in seconds.items()},
        "total_seconds": round(time.monotonic() - started, 1),
        "model": settings.model,
        "vocabulary": settings.vocabulary
        if settings.vocabulary != "subword"
        else f"subword ({settings.subword_model}, {'separate' if settings.separate_vocabularies else 'joint'})",
        "subword_sampling": settings.subword_sampling,
        "vocabulary_size": len(vocab["target"]),
        "input_feeding": bool(model.get_config().get("input_feeding", False)),  # the checkpoint's, on --resume
        "backend": keras.backend.backend(),
        "valid_examples": len(sources),
    }


def plot_model(settings, model, vocab, sources, predictions):
    """attention.png (a few translations' attention; the plain RNN has none) and sinusoidal_encoding.png."""
    if settings.model != "rnn":
        title = (
            "Bahdanau attention"
            if settings.model == "rnn-attention"
            else "last decoder block's cross-attention, mean over heads"
        )
        examples = attention_examples(model, vocab, sources, predictions, protect=settings.placeholders)
        common.plot_attention(
            examples, os.path.join(settings.output_dir, "attention.png"), f"{settings.model}: {title}"
        )
    common.plot_sinusoidal_encoding(os.path.join(settings.output_dir, "sinusoidal_encoding.png"))


def _left_out_note(counts):
    """` (N reason, ... left out)` of the preparation's counts of pairs left out, or "" when none was."""
    reasons = ", ".join(f"{count:,} {reason.replace('_', ' ')}" for reason, count in counts.items() if count)
    return f" ({reasons} left out)" if reasons else ""


def _vocabulary_sizes(settings, vocab):
    if vocab["source"] is vocab["target"]:
        return f"one joint {settings.vocabulary} vocabulary of {len(vocab['source'])}"
    return f"{settings.vocabulary} vocabularies {len(vocab['source'])} / {len(vocab['target'])}"


def _budget_text(settings):
    return " and ".join(
        f
        for f in (
            settings.epochs and f"{settings.epochs} epochs",
            settings.max_steps and f"{settings.max_steps} steps",
            settings.max_seconds and f"{settings.max_seconds:g} s",
        )
        if f
    )


def translate_all(translator, sources, batch_size=256):
    """The exported translator's outputs for `sources`, in batches."""
    predictions = []
    for start in range(0, len(sources), batch_size):
        predictions += [
            p.decode("utf-8") for p in translator.translate(tf.constant(sources[start : start + batch_size])).numpy()
        ]
    return predictions


def print_summary(metrics, examples, output_dir):
    """A few (source, reference, prediction) examples, then the run's figures in one line."""
    for source, reference, prediction in examples:
        print(f"  {source}\n    reference:  {reference}\n    prediction: {prediction}")
    rate = metrics["copy_rate"]
    copied = "no placeholders to copy" if rate is None else f"copy rate {rate:.2f} of {metrics['copy_rate_sentences']}"
    print(
        f"translate: valid BLEU {metrics['bleu']:.1f} (lowercased {metrics['bleu_lowercase']:.1f}), "
        f"chrF {metrics['chrf']:.1f}, "
        f"exact match {metrics['exact_match']:.3f}, {copied}; trained {metrics['train_seconds']:.0f} s, "
        f"exported {metrics['export_seconds']:.0f} s, translated {metrics['translate_seconds']:.0f} s; "
        f"outputs in {output_dir}"
    )


if __name__ == "__main__":
    common.main("translate", run, parse)

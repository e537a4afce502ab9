"""LM: the vec2seq recipe (a language model that continues a prefix).

Trains a character-level (or `--level word`) LSTM language model (default) or a
GPT-style Transformer with `model.fit` on consecutive windows of the text, reports
valid perplexity, and continues `--prompt` with cached decoding.

    python -m recipes.lm                              # LOC workshop prose (characters), 180 s
    python -m recipes.lm --data alice --epochs 60      # Alice in Wonderland, chapter 1
    python -m recipes.lm --prompt "The catalog" --model transformer
    python -m recipes.lm --train book.txt --valid book_valid.txt --level word
    python -m recipes.lm --tfds tiny_shakespeare
"""

import math
import time

import keras
import numpy as np
import tensorflow as tf

import keras_seq as ks
from keras_seq.data import alice_text, corpora, loaders, pipeline, text
from recipes import common, training_data
from recipes.errors import UsageError

# Model family -> its defaults of the flags that depend on it.
MODELS = {"lstm": {"learning_rate": 3e-3}, "transformer": {"learning_rate": 2e-3}}
NUM_HEADS = 4  # of the Transformer's attention layers (built, and checked by --model-parallel)


def _alice_chapter_split():
    """Alice chapter 1 with its last tenth (from a line end) held out."""
    book = alice_text()
    cut = book.rindex("\n", 0, int(len(book) * 0.9))
    return book[:cut], book[cut:]


# Embedded data, used when no --train/--tfds: name -> (train, valid) texts, and the prompt each continues.
DATA = {
    "workshop": lambda: (corpora.loc_workshop_en("train"), corpora.loc_workshop_en("valid")),
    "alice": _alice_chapter_split,
}
PROMPTS = {"workshop": "Electronic texts", "alice": "Alice was"}


def parse(argv=None):
    p = common.parser(
        "lm",
        __doc__.split("\n\n")[0],
        "plain UTF-8 text",
        MODELS,
        "lstm",
        epochs=None,
        batch_size=32,
        max_seconds=180,
        derived_defaults=_derived_defaults,
    )
    p.add_argument(
        "--data",
        choices=DATA,
        default="workshop",
        help="embedded data when no --train/--tfds: the 1992 Library of Congress workshop on electronic texts "
        "(real English prose, keras_seq/data/corpora/loc_workshop_en) or Alice in Wonderland, chapter 1",
    )
    p.add_argument(
        "--level",
        choices=("char", "word", "subword"),
        default="char",
        help="what a token is (subword: SentencePiece pieces with byte fallback, trained on the training text's lines)",
    )
    p.add_argument("--vocab-size", type=int, default=4000, help="subword: an upper bound on the pieces")
    common.add_subword_flags(p)
    p.add_argument(
        "--window", type=int, default=64, help="tokens per training window (truncated backpropagation length)"
    )
    p.add_argument("--hidden-dim", type=int, default=256, help="LSTM units / Transformer width")
    common.add_validation_flags(p, "perplexity", warmup=0.02)
    p.add_argument("--prompt", help='text to continue after training (default: the embedded data\'s, else "The")')
    p.add_argument("--generate-length", type=int, default=120, help="tokens to add to --prompt")
    p.add_argument(
        "--strategy",
        choices=("greedy", "top_k", "top_p", "sample"),
        default="top_k",
        help="decoding strategy for --prompt",
    )
    return p.parse_args(argv)


def _derived_defaults(values):
    """`--prompt`'s default, which depends on the data: the embedded data set's prompt, else "The"."""
    if values["prompt"] is not None:
        return {}
    return {"prompt": "The" if values["train"] or values["tfds"] else PROMPTS[values["data"]]}


def load_text(settings):
    """`(train, valid)` texts: the files, the tfds splits or the embedded data."""
    return common.load_splits(settings, "lm", loaders.read_text, DATA)


def windows(stream, window, limit=None):
    """Consecutive non-overlapping windows of `window + 1` ids (inputs and next-token targets)."""
    count = (len(stream) - 1) // window
    rows = [stream[i * window : i * window + window + 1] for i in range(count)]
    return rows[:limit]


def _continuation(output, prompt):
    """What the exported model wrote after `prompt`: `output` less its start, matched
    ignoring spaces where the two differ there (word-level detokenizing spaces
    punctuation its own way), or all of `output` if it does not start with the prompt."""
    if output.startswith(prompt):
        return output[len(prompt) :]
    wanted = "".join(prompt.split())
    matched = 0
    for position, char in enumerate(output):
        if matched == len(wanted):
            return output[position:]
        if char.isspace():
            continue
        if char != wanted[matched]:
            return output
        matched += 1
    return "" if matched == len(wanted) else output


def run(settings):
    started = time.monotonic()
    if settings.window < 2:
        raise UsageError(f"--window: expected at least 2 tokens, got {settings.window}")
    train_text, valid_text = load_text(settings)
    if settings.level == "subword":
        # SentencePiece trains on sentences of bounded length: the text's lines.
        build = lambda: {"text": common.subword_vocabulary(settings, train_text.splitlines(), settings.vocab_size)}
    else:
        build = lambda: {"text": text.Vocabulary.build([train_text], level=settings.level)}
    vocab = common.vocabularies(settings, build)

    def stream(document):
        return vocab["text"].encode([document]).flat_values.numpy().tolist()

    train_rows = windows(stream(train_text), settings.window, settings.max_examples)
    valid_rows = windows(stream(valid_text), settings.window)
    if not train_rows or not valid_rows:
        raise UsageError(
            f"--window: expected texts longer than {settings.window + 1} tokens, got a shorter train or valid text"
        )
    print(
        f"lm: {len(train_rows)} training windows of {settings.window} {settings.level} tokens, "
        f"{len(valid_rows)} valid; "
        f"vocabulary {len(vocab['text'])}; backend {keras.backend.backend()}"
    )

    def batches(seed, first_epoch, epochs, rows=train_rows):
        return pipeline.padded_batches(
            {"ids": rows},
            settings.batch_size,
            settings.window + 1,
            lambda b: (b["ids"][:, :-1], b["ids"][:, 1:]),
            seed,
            first_epoch,
            epochs,
        )

    length = pipeline.bucket_edges(settings.window + 1)[-1]

    def build_and_compile(steps_per_epoch):
        if settings.model == "lstm":
            model = ks.models.rnn_lm(len(vocab["text"]), embedding_dim=64, units=settings.hidden_dim)
        else:
            model = ks.models.transformer_lm(
                len(vocab["text"]),
                max(length, settings.generate_length + len(settings.prompt)),
                num_layers=2,
                hidden_dim=settings.hidden_dim,
                num_heads=NUM_HEADS,
                intermediate_dim=2 * settings.hidden_dim,
                dropout=0.1,
            )
        model.compile(
            optimizer=ks.optimizers.Adam(settings.learning_rate, clipnorm=1.0),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[ks.metrics.Perplexity(ignore_index=0)],
        )
        return model

    score = common.evaluated(batches(None, 0, 1, valid_rows), "perplexity", lambda logs: math.exp(logs["loss"]))
    model, history, train_seconds, validation = common.train(
        settings,
        build_and_compile,
        training_data.InMemoryBatches(batches, settings.seed),
        None,
        learning_rate=(settings.learning_rate, settings.warmup),
        score=score,
        monitor="perplexity",
        mode="min",
        model_sizes=dict(
            num_heads=NUM_HEADS, intermediate_dim=2 * settings.hidden_dim, vocabulary_sizes=[len(vocab["text"])]
        )
        if settings.model == "transformer"
        else None,
    )
    # Valid windows split in half: the first half is the prompt, the exported model continues it.
    half = settings.window // 2
    rows = np.asarray(valid_rows, "int32")
    decode = lambda ids: [s.decode("utf-8") for s in vocab["text"].decode(ids).numpy()]
    prompts, references = decode(rows[:, :half]), decode(rows[:, half:])
    continuer = common.export_and_load(settings, "lm", vocab, max_length=settings.window + 1)
    outputs = [s.decode("utf-8") for s in continuer.generate(tf.constant(prompts)).numpy()]
    continuations = [_continuation(output, prompt) for prompt, output in zip(prompts, outputs)]
    common.write_predictions(
        settings.output_dir, zip(prompts, references, continuations), ("prompt", "reference", "prediction")
    )
    prompt = vocab["text"].encode([settings.prompt]).to_tensor()
    longest = (
        model.get_config().get("sequence_length") or prompt.shape[1] + settings.generate_length
    )  # a Transformer's limit
    generated = model.generate(
        prompt,
        min(prompt.shape[1] + settings.generate_length, longest),
        strategy=settings.strategy,
        k=5,
        seed=settings.seed,
    )
    sample = decode(np.asarray(generated))[0]  # the prompt as the model read it, then its continuation
    perplexity = validation.best if validation.best is not None else score(model)["perplexity"]
    metrics = {
        "perplexity": perplexity,
        "valid_loss": math.log(perplexity),
        "weights": validation.chosen,
        "epochs": len(history.get("loss", [])),
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.monotonic() - started, 1),
        "model": settings.model,
        "level": settings.level,
        "backend": keras.backend.backend(),
        "valid_examples": len(valid_rows),
        "sample": sample,
    }
    common.write_metrics(settings.output_dir, metrics)
    print(f"lm: valid perplexity {metrics['perplexity']:.2f} per {settings.level}; outputs in {settings.output_dir}")
    return metrics


if __name__ == "__main__":
    common.main("lm", run, parse)

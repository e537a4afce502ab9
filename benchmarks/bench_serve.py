"""Serving one trained translate model two ways: its TensorFlow SavedModel against CTranslate2.

Given a translate run's output folder (`model.keras`, `export/`, `export_config.json`, a
subword vocabulary), converts the model to CTranslate2 (`keras_seq.ctranslate2`, float32
and int8 weights), checks that CTranslate2's greedy translations are the SavedModel's
(`translate_greedy`) on at least 95% of the sentences, then measures, over the valid
split of the shipped corpus (`keras_seq.data.corpora.software_en_fr`):

* sentences/s and output tokens/s at batch 64, with beam 4 and greedily;
* batch-1 latency with beam 4 (median and p90 ms);
* BLEU (sacrebleu) of each side's translations.

    python benchmarks/bench_serve.py runs/translate --rounds 3

By default both sides get 2 threads (TensorFlow's intra- and inter-op pools; CTranslate2's
`intra_threads=2, inter_threads=1`; `--threads 1,2` runs every side at each count, for a host on
which one count suits a runtime better than the other) and strings in, strings out: the SavedModel tokenizes
inside its graph, the CTranslate2 side runs SentencePiece (`sentencepiece`) before and
after `translate_batch`, inside the timed region. Each side runs in its own process,
without keras_seq or Keras imported (the CTranslate2 ones without TensorFlow either), as a
server would; this process converts the model and drives them over pipes, timing one
side after the other in turn (A, B, C, A, B, C, ...) as `_timing.py` does, so a change in
machine load hits every side alike, with a pause between turns so that one runtime's
spinning OpenMP threads have gone idle before the next starts. An untimed pass of every
measurement comes first (the SavedModel compiles its XLA programs then). Figures are
medians over the rounds (latency: over every sentence of every round).

The two beam searches are not the same algorithm: the SavedModel ranks beams with GNMT's
length penalty `((5 + len) / 6) ** alpha` and runs a sentence's beams until none still unfinished
can overtake its best ended one (or, exported with early stopping, until that one outranks each
unfinished beam at its next length);
CTranslate2 divides by `len ** alpha` and stops once `beam * patience` hypotheses have ended
(`--patience`). Both get the run's alpha (`--length-penalty` to change CTranslate2's).
Greedy decoding is the same computation on both sides.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import _timing

SIDES_PAUSE = 0.3  # seconds between two sides' turns (OpenMP's spin-wait after a parallel region is 200 ms)


# ---------------------------------------------------------------------------------------------------------------------
# Workers: one process per side, reading JSON requests on stdin and answering one JSON line each.


def savedmodel_worker(settings):
    """The SavedModel side: TensorFlow and tensorflow-text only."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(settings["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(settings["threads"])
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of a subword export)

    translator = tf.saved_model.load(settings["path"])  # referenced below: its functions need it alive
    signatures = {"beam": "translate", "greedy": "translate_greedy"}

    def translate(sentences, strategy):
        function = getattr(translator, signatures[strategy])
        return [t.decode("utf-8") for t in function(tf.constant(sentences)).numpy()]

    return translate, {"greedy": hasattr(translator, "translate_greedy")}


def ctranslate2_worker(settings):
    """The CTranslate2 side: ctranslate2 and sentencepiece only."""
    import ctranslate2
    import sentencepiece

    path = settings["path"]
    models = {name: os.path.join(path, f"{name}.model") for name in ("sentencepiece", "source", "target")}
    source = sentencepiece.SentencePieceProcessor(
        model_file=models["source" if os.path.exists(models["source"]) else "sentencepiece"]
    )
    target = sentencepiece.SentencePieceProcessor(
        model_file=models["target" if os.path.exists(models["target"]) else "sentencepiece"]
    )
    translator = ctranslate2.Translator(path, device="cpu", intra_threads=settings["threads"], inter_threads=1)
    options = dict(
        max_input_length=settings["source_length"],  # the SavedModel cuts sources to this many ids
        max_decoding_length=settings["max_length"] - 1,  # its max_length counts the start id
        min_decoding_length=0,
        suppress_sequences=[["<pad>"]],  # keras_seq's decoding (see keras_seq.ctranslate2)
    )
    beam = dict(
        beam_size=settings["num_beams"], length_penalty=settings["length_penalty"], patience=settings["patience"]
    )

    def translate(sentences, strategy):
        if settings["lowercase"]:
            sentences = [s.lower() for s in sentences]
        results = translator.translate_batch(
            source.encode(sentences, out_type=str), **(beam if strategy == "beam" else dict(beam_size=1)), **options
        )
        return target.decode([result.hypotheses[0] for result in results])

    return translate, {"greedy": True}


def worker(kind, settings):
    translate, info = (savedmodel_worker if kind == "savedmodel" else ctranslate2_worker)(settings)

    def reply(**answer):
        sys.stdout.write(json.dumps({"reply": answer}) + "\n")
        sys.stdout.flush()

    reply(ready=True, **info)
    for line in sys.stdin:
        request = json.loads(line)
        sentences, batch_size = request.get("sentences", []), request.get("batch_size", 1)
        if request["op"] == "translate":  # one pass over the sentences in batches, timed as a whole
            started = time.perf_counter()
            outputs = []
            for start in range(0, len(sentences), batch_size):
                outputs += translate(sentences[start : start + batch_size], request["strategy"])
            reply(seconds=time.perf_counter() - started, outputs=outputs)
        elif request["op"] == "latency":  # each sentence alone, timed one by one
            seconds = []
            for sentence in sentences:
                started = time.perf_counter()
                translate([sentence], request["strategy"])
                seconds.append(time.perf_counter() - started)
            reply(seconds=seconds)
        elif request["op"] == "info":
            with open("/proc/self/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            reply(
                keras_seq_imported="keras_seq" in sys.modules,
                tensorflow_imported="tensorflow" in sys.modules,
                peak_rss_mib=round(int(status["VmHWM"].split()[0]) / 1024),
            )
        else:
            reply(bye=True)
            return


class Side:
    """A worker process serving one side; `ask(op, ...)` sends a request and returns its answer."""

    def __init__(self, name, kind, settings):
        self.name, self.kind = name, kind
        command = [sys.executable, os.path.abspath(__file__), "--worker", kind, json.dumps(settings)]
        environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
        self.info = self._answer()

    def _answer(self):
        for line in self.process.stdout:
            if line.startswith('{"reply"'):
                return json.loads(line)["reply"]
        raise RuntimeError(f"{self.name}: the worker process ended (exit {self.process.wait()}); its error is above")

    def ask(self, op, **request):
        self.process.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self):
        if self.process.poll() is None:
            self.ask("quit")
            self.process.wait()


# ---------------------------------------------------------------------------------------------------------------------
# The driver.


def parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a translate run's --output-dir (model.keras, export/, export_config.json)")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes per side and measurement")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--num-beams", type=int, default=4, help="CTranslate2's beam (the SavedModel's is its export's)"
    )
    parser.add_argument(
        "--threads",
        type=thread_counts,
        default=[2],
        help="threads per side, or a comma list to run every side at each count (e.g. 1,2)",
    )
    parser.add_argument("--limit", type=int, help="use the first N valid sentences (default: all)")
    parser.add_argument(
        "--latency-sentences", type=int, help="sentences timed at batch 1 per round (default: all used)"
    )
    parser.add_argument(
        "--length-penalty", type=float, help="CTranslate2's length_penalty (default: the export's alpha)"
    )
    parser.add_argument("--patience", type=float, default=1.0, help="CTranslate2's beam search patience")
    parser.add_argument("--quantizations", default="float32,int8", help="CTranslate2 weight types to convert to")
    parser.add_argument(
        "--min-agreement",
        type=float,
        default=0.95,
        help="least share of greedy translations the float32 CTranslate2 model must share with the SavedModel",
    )
    return parser.parse_args()


def thread_counts(text):
    counts = [int(part) for part in text.split(",") if part.strip().isdigit()]
    if not counts or len(counts) != len(text.split(",")) or min(counts) < 1 or len(set(counts)) < len(counts):
        raise argparse.ArgumentTypeError(f"expected distinct positive thread counts separated by commas, got {text!r}")
    return counts


def side_name(name, threads, counts):
    """The side's name, with its thread count where several are run."""
    return name if len(counts) == 1 else f"{name}, {threads} thread{'s' if threads > 1 else ''}"


def fail(message):
    print(f"bench_serve: error: {message}", file=sys.stderr)
    sys.exit(2)


def run_settings(args):
    """The export's settings (export_config.json) and the vocabularies they name, checked for this benchmark."""
    path = os.path.join(args.run, "export_config.json")
    if not os.path.exists(os.path.join(args.run, "model.keras")) or not os.path.isdir(os.path.join(args.run, "export")):
        fail(f"{args.run}: expected a translate run's folder with model.keras and export/, got none")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    if config.get("kind") != "translate":
        fail(f"{path}: expected the export of a translate run, got kind {config.get('kind')!r}")
    levels = {name: vocabulary.get("level") for name, vocabulary in config["vocabularies"].items()}
    if set(levels.values()) != {"subword"}:
        fail(
            f"{path}: expected subword (SentencePiece) vocabularies, which sentencepiece splits without keras_seq, "
            f"got {levels}"
        )
    return config


def convert(args, config, directory):
    """`{quantization: CTranslate2 model folder}` converted from the run's model.keras."""
    import keras

    import keras_seq  # noqa: F401  (registers the classes model.keras names)
    from keras_seq.ctranslate2 import export_ctranslate2
    from keras_seq.data.subword import vocabulary_from_config

    model = keras.saving.load_model(os.path.join(args.run, "model.keras"), compile=False)
    vocabularies = {name: vocabulary_from_config(c) for name, c in config["vocabularies"].items()}
    paths = {}
    for quantization in args.quantizations.split(","):
        try:
            paths[quantization] = export_ctranslate2(
                model,
                vocabularies["source"],
                vocabularies["target"],
                os.path.join(directory, quantization),
                quantization=None if quantization == "float32" else quantization,
            )
        except ValueError as error:  # e.g. a run of another model than the Transformer
            fail(f"{args.run}: {error}")
    return paths, vocabularies["target"]


def measure(sides, rounds, op, sentences, **request):
    """`{side: [answer per round]}`, the sides taking turns within each round."""
    answers = {side.name: [] for side in sides}
    for _ in range(rounds):
        for side in sides:
            answers[side.name].append(side.ask(op, sentences=sentences, **request))
            time.sleep(SIDES_PAUSE)
    return answers


def warm_up(sides, sentences, latency_sentences, batch_size, strategies):
    """One untimed pass of every measurement on every side: the SavedModel compiles its XLA programs on first use,
    and at batch 1 some sentences set off a compilation of several seconds the first time they come."""
    for side in sides:
        for strategy in strategies:
            side.ask("translate", sentences=sentences, batch_size=batch_size, strategy=strategy)
        side.ask("latency", sentences=latency_sentences, strategy="beam")


def bleu(outputs, references):
    import sacrebleu

    return round(sacrebleu.corpus_bleu(outputs, [references]).score, 2)


def main():
    args = parse()
    config = run_settings(args)
    from keras_seq.data import corpora

    pairs = list(corpora.software_en_fr("valid"))[: args.limit]
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    latency_sources = sources[: args.latency_sentences]
    length_penalty = config.get("length_penalty", 0.6) if args.length_penalty is None else args.length_penalty
    with tempfile.TemporaryDirectory(prefix="bench_serve-") as directory:
        paths, target_vocabulary = convert(args, config, directory)
        common = dict(source_length=config["source_length"], max_length=config["max_length"])
        ct2 = dict(
            num_beams=args.num_beams,
            length_penalty=length_penalty,
            patience=args.patience,
            lowercase=bool(config["vocabularies"]["source"].get("lowercase")),
        )
        sides = []
        for threads in args.threads:
            sides.append(
                Side(
                    side_name("SavedModel (TensorFlow)", threads, args.threads),
                    "savedmodel",
                    dict(path=os.path.join(args.run, "export"), threads=threads, **common),
                )
            )
            sides += [
                Side(
                    side_name(f"CTranslate2 {q}", threads, args.threads),
                    "ctranslate2",
                    dict(path=p, threads=threads, **common, **ct2),
                )
                for q, p in paths.items()
            ]
        try:
            results = benchmark(args, sides, sources, references, latency_sources, target_vocabulary)
        finally:
            for side in sides:
                side.close()
    report(args, config, length_penalty, results, len(sources), len(latency_sources))
    for checked in results:
        agreement = checked["greedy_agreement"]
        if (
            checked["side"].startswith("CTranslate2 float32")
            and agreement is not None
            and agreement < args.min_agreement
        ):
            print(
                f"bench_serve: error: {checked['side']} shares {agreement:.1%} of its greedy translations "
                f"with the SavedModel, expected at least {args.min_agreement:.0%}",
                file=sys.stderr,
            )
            sys.exit(1)


def benchmark(args, sides, sources, references, latency_sources, target_vocabulary):
    """One result dict per side: throughput, latency, BLEU, greedy agreement with the SavedModel, the worker's state."""
    greedy_everywhere = all(side.info["greedy"] for side in sides)
    if not greedy_everywhere:
        print(
            "bench_serve: the SavedModel has no translate_greedy signature (an export from before it was added): "
            "greedy agreement and greedy timing are left out; re-export the run to get them",
            file=sys.stderr,
        )
    strategies = ["beam", "greedy"] if greedy_everywhere else ["beam"]
    warm_up(sides, sources, latency_sources, args.batch_size, strategies)
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(model_proto=target_vocabulary.model)

    def count_tokens(outputs):
        return sum(len(ids) for ids in pieces.encode(outputs))

    results = [{"side": side.name} for side in sides]
    for strategy in strategies:
        answers = measure(sides, args.rounds, "translate", sources, batch_size=args.batch_size, strategy=strategy)
        for result, side in zip(results, sides):
            seconds = statistics.median(answer["seconds"] for answer in answers[side.name])
            outputs = answers[side.name][0]["outputs"]
            result[f"{strategy}_outputs"] = outputs
            result.update(
                {
                    f"{strategy}_sentences_per_second": round(len(sources) / seconds, 2),
                    f"{strategy}_tokens_per_second": round(count_tokens(outputs) / seconds, 1),
                    f"{strategy}_bleu": bleu(outputs, references),
                }
            )
    answers = measure(sides, args.rounds, "latency", latency_sources, strategy="beam")
    for result, side in zip(results, sides):
        milliseconds = sorted(1000 * s for answer in answers[side.name] for s in answer["seconds"])
        result["latency_median_ms"] = round(statistics.median(milliseconds), 2)
        p90 = (
            statistics.quantiles(milliseconds, n=10, method="inclusive")[-1]
            if len(milliseconds) > 1
            else milliseconds[0]
        )
        result["latency_p90_ms"] = round(p90, 2)
    for result, side in zip(results, sides):
        result["greedy_agreement"] = None  # for the SavedModel itself, or without its greedy signature
        if greedy_everywhere and side.kind == "ctranslate2":
            same = [a == b for a, b in zip(result["greedy_outputs"], results[0]["greedy_outputs"])]
            result["greedy_agreement"] = round(sum(same) / len(same), 4)
        result.update(side.ask("info"))
    for result in results:
        for strategy in strategies:
            del result[f"{strategy}_outputs"]
    return results


def report(args, config, length_penalty, results, sentences, latency_sentences):
    """A Markdown table, then one JSON line per side and one with the settings."""
    cell = lambda value, digits=1: "n/a" if value is None else f"{value:.{digits}f}"
    header = [
        "side",
        f"beam {args.num_beams}, batch {args.batch_size}: sent/s",
        "tok/s",
        "greedy: sent/s",
        "tok/s",
        f"batch 1, beam {args.num_beams}: median ms",
        "p90 ms",
        "BLEU beam",
        "BLEU greedy",
        "greedy = SavedModel",
        "peak RSS MiB",
    ]
    rows = [
        [
            r["side"],
            cell(r.get("beam_sentences_per_second")),
            cell(r.get("beam_tokens_per_second"), 0),
            cell(r.get("greedy_sentences_per_second")),
            cell(r.get("greedy_tokens_per_second"), 0),
            cell(r["latency_median_ms"]),
            cell(r["latency_p90_ms"]),
            cell(r.get("beam_bleu")),
            cell(r.get("greedy_bleu")),
            "-" if r["greedy_agreement"] is None else f"{r['greedy_agreement']:.1%}",
            str(r["peak_rss_mib"]),
        ]
        for r in results
    ]
    settings = {
        "run": os.path.abspath(args.run),
        "sentences": sentences,
        "latency_sentences": latency_sentences,
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "threads": args.threads[0] if len(args.threads) == 1 else args.threads,
        "savedmodel_beams": config.get("num_beams"),
        "savedmodel_length_penalty_gnmt": config.get("length_penalty"),
        "ctranslate2_beams": args.num_beams,
        "ctranslate2_length_penalty": length_penalty,
        "ctranslate2_patience": args.patience,
        "cpu": f"{_timing.cpu_name()}, {os.cpu_count()} cores",
        "commit": _timing.git_commit(),
        "date": _timing.utc_now(),
        "versions": _timing.versions(("tensorflow", "tensorflow-text", "ctranslate2", "sentencepiece", "sacrebleu")),
    }
    threads = f"{' or '.join(map(str, args.threads))} thread{'s' if args.threads != [1] else ''} per side"
    print(
        f"\nServing {sentences} valid sentences of software_en_fr ({settings['cpu']}, {threads}, "
        f"median of {args.rounds} rounds; tokenization included; output tokens are SentencePiece pieces)\n"
    )
    print("\n".join(_timing.markdown_table(header, rows, right_aligned=range(1, len(header)))))
    print()
    print(json.dumps({"settings": settings}))
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], json.loads(sys.argv[3]))
    else:
        main()

"""What each runtime option of an exported translator costs a call, beside the signatures without options.

    python benchmarks/bench_translate_options.py RUN/export --batches 4 --rounds 5

Times, interleaved in one process (`_timing.time_interleaved`), batches of `--batch-size`
sentences of the English side of the shipped corpus `software_en_fr`'s test split through:
the fixed signatures `translate` (beam search with the export's settings) and
`translate_greedy`; `translate_options` with the export's own settings (what the options
themselves cost: the per-call values, the target prefix and length rows every call carries,
the repetition controls' skipped branches); and `translate_options` with each option set
in turn (a target prefix on every other sentence, a length ratio, the no-repeat ban, the
repetition penalty, sampling). A second untimed call of each case comes first, so no XLA
compilation is timed. Prints one table: ms per batch (median over rounds) and the ratio to
the fixed signature of the same search.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import _timing  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402, F401  (the ops a subword vocabulary's export calls)


def parse():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export", help="a translate run's export/ folder (SavedModel)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per call (default 64)")
    parser.add_argument("--batches", type=int, default=4, help="batches per timed step, in turn (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    return parser.parse_args()


def test_batches(batch_size, count):
    from keras_seq.data import corpora

    sources = [source for source, _ in corpora.software_en_fr("test")]
    needed = batch_size * count
    sources = (sources * (needed // len(sources) + 1))[:needed]
    return [sources[i : i + batch_size] for i in range(0, needed, batch_size)]


def option_cases(loaded, batches):
    """`{name: (search, make)}`: each case's search (the fixed signature it compares with) and its `make`."""
    from keras_seq import export

    options_signature = loaded.signatures["translate_options"]  # keyword arguments only, each a tensor of its dtype
    names = [name for name in options_signature.structured_input_signature[1] if name != "sentences"]
    dtypes = dict(export.RUNTIME_OPTIONS)
    defaults = export.translate_options_defaults(loaded)

    def with_options(**changed):
        def make():
            def step():
                for batch in batches:
                    values = {**defaults, **changed}
                    prefixes = values.pop("target_prefix", [""] * len(batch))
                    given = {name: tf.constant(values[name], dtypes[name]) for name in names if name in dtypes}
                    prefix = {"target_prefix": tf.constant(prefixes)} if "target_prefix" in names else {}
                    options_signature(sentences=tf.constant(batch), **given, **prefix)["scores"].numpy()

            return step

        return make

    def fixed(signature):
        def make():
            def step():
                for batch in batches:
                    getattr(loaded, signature)(tf.constant(batch)).numpy()

            return step

        return make

    half_prefixed = ["" if i % 2 else "Le" for i in range(len(batches[0]))]
    cases = {
        "translate (fixed beam search)": ("beam", fixed("translate")),
        "translate_options, the export's settings": ("beam", with_options()),
        "  + target prefix on every other sentence": ("beam", with_options(target_prefix=half_prefixed)),
        "  + max_length_ratio 1.5": ("beam", with_options(max_length_ratio=1.5)),
        "  + no_repeat_ngram_size 3": ("beam", with_options(no_repeat_ngram_size=3)),
        "  + repetition_penalty 1.2": ("beam", with_options(repetition_penalty=1.2)),
        "translate_greedy (fixed greedy search)": ("greedy", fixed("translate_greedy")),
        "translate_options, beam_size 1": ("greedy", with_options(beam_size=1)),
        "  + sampling top-k 10, top-p 0.9": ("greedy", with_options(beam_size=1, sampling_topk=10, sampling_topp=0.9)),
    }
    return {name: case for name, case in cases.items() if "sampling" not in name or "sampling_topk" in names}


def main():
    args = parse()
    if not os.path.isdir(args.export):
        print(f"error: --export: expected a SavedModel folder, got {args.export!r}", file=sys.stderr)
        sys.exit(2)
    loaded = tf.saved_model.load(args.export)
    batches = test_batches(args.batch_size, args.batches)
    cases = option_cases(loaded, batches)
    times = _timing.time_interleaved({name: make for name, (_, make) in cases.items()}, args.rounds)
    base = {"beam": times["translate (fixed beam search)"], "greedy": times["translate_greedy (fixed greedy search)"]}
    print(f"{args.batches} batches of {args.batch_size} sentences a step, median of {args.rounds} rounds")
    rows = []
    for name, seconds in times.items():
        median = _timing.summary(seconds)[0] / args.batches
        ratio = median / (_timing.summary(base[cases[name][0]])[0] / args.batches)
        rows.append((name, f"{median * 1000:.1f}", f"{ratio:.3f}"))
    print("\n".join(_timing.markdown_table(("call", "ms a batch", "to the fixed signature"), rows, (1, 2))))


if __name__ == "__main__":
    main()

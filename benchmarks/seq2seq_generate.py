"""`generate` of a translate-sized `transformer_seq2seq` (2+2 blocks, width 128, 4 heads, FFN 256, a joint
vocabulary of 4,000): median milliseconds for a batch of 64 sources of 10 tokens, 24 steps, greedy and beam 4.

Random weights and no end id, so every run decodes all 24 steps. For a before/after comparison of the
decoding code, run it from two checkouts in turn on one quiet host (`PYTHONPATH=CHECKOUT`), on each backend:

    KERAS_BACKEND=torch PYTHONPATH=. python benchmarks/seq2seq_generate.py --label after
"""

import argparse
import statistics
import time

import _timing
import keras
import numpy as np

import keras_seq as ks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="", help="printed before the figures")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    vocabulary = 4000
    model = ks.models.transformer_seq2seq(
        vocabulary,
        vocabulary,
        64,
        64,
        num_layers=2,
        hidden_dim=128,
        num_heads=4,
        intermediate_dim=256,
        dropout=0.0,
        tie_embeddings=True,
        share_embeddings=True,
    )
    source = np.random.default_rng(0).integers(3, vocabulary, size=(64, 16)).astype("int32")
    source[:, 10:] = 0
    figures = {}
    for name, settings in (("greedy", dict(strategy="greedy")), ("beam 4", dict(strategy="beam", num_beams=4))):
        decode = lambda: keras.ops.convert_to_numpy(model.generate(source, 24, end_id=None, **settings))
        decode(), decode()  # compiled and warm
        seconds = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            decode()
            seconds.append(time.perf_counter() - start)
        figures[name] = f"{statistics.median(seconds) * 1000:.1f} ms"
    print(
        args.label,
        keras.backend.backend(),
        figures,
        f"({_timing.utc_now()}, commit {_timing.git_commit()}, {_timing.cpu_name()})",
        flush=True,
    )


if __name__ == "__main__":
    main()

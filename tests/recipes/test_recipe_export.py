"""The exported SavedModels serve raw strings with TensorFlow alone, exactly as the recipes predicted."""

import json

from recipe_runs import normalized, read_tsv, run_python

from keras_seq.data import loaders

# Runs in a fresh interpreter that imports nothing but TensorFlow (and tensorflow-text, whose
# SentencePiece ops a subword vocabulary's export holds).
SERVE = """
import json, sys
import tensorflow as tf
import tensorflow_text

answers = {}
for name, (path, signature, inputs) in json.loads(sys.argv[1]).items():
    served = tf.saved_model.load(path)
    outputs = getattr(served, signature)(tf.constant(inputs))
    by_signature = served.signatures[signature](tf.constant(inputs))
    if signature == "classify":
        probabilities = outputs["probabilities"].numpy()
        answers[name + ":probability_sums"] = probabilities.sum(-1).tolist()
        outputs, by_signature = outputs["label"], by_signature["label"]
    else:
        (by_signature,) = by_signature.values()
    answers[name] = [s.decode("utf-8") for s in outputs.numpy()]
    answers[name + ":signature"] = [s.decode("utf-8") for s in by_signature.numpy()]
answers["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("keras_seq", "recipes"))
print(json.dumps(answers))
"""


def test_exports_reproduce_the_predictions_without_keras_seq(
    translate_transformer, translate_rnn_attention, translate_subword, classify_run, tag_run, lm_run, data_dir
):
    runs = {
        "transformer": (translate_transformer, "translate"),
        "subword": (translate_subword, "translate"),
        "rnn-attention": (translate_rnn_attention, "translate"),
        "classify": (classify_run, "classify"),
        "tag": (tag_run, "tag"),
        "lm": (lm_run, "generate"),
    }
    jobs, expected = {}, {}
    for name, (run, signature) in runs.items():
        _, rows = read_tsv(run.path("predictions.tsv"))
        jobs[name] = (run.path("export"), signature, [r[0] for r in rows])
        expected[name] = [r[2] for r in rows]
    # The lm's prompts are the first 7 characters of each 16-character valid window, newlines included.
    valid = loaders.read_text(data_dir / "lm_valid.txt")
    prompts = [valid[15 * i : 15 * i + 7] for i in range(len(expected["lm"]))]
    jobs["lm"] = (lm_run.path("export"), "generate", prompts)
    answers = json.loads(run_python(SERVE, json.dumps(jobs)).strip().splitlines()[-1])
    assert answers["modules"] == []
    # A continuer returns prompt and continuation in one string; predictions.tsv has the continuation.
    assert all(a.startswith(p) for a, p in zip(answers["lm"], prompts))
    answers["lm"] = [a[len(p) :] for a, p in zip(answers["lm"], prompts)]
    answers["lm:signature"] = [a[len(p) :] for a, p in zip(answers["lm:signature"], prompts)]
    for name in runs:
        assert [normalized(a) for a in answers[name]] == expected[name], name
        assert answers[name + ":signature"] == answers[name], name
    assert any(expected["transformer"]) and any(expected["rnn-attention"])  # the translators do emit words
    assert any(expected["subword"])
    assert set(answers["classify"]) <= {"negative", "positive"}
    assert all(abs(s - 1.0) < 1e-5 for s in answers["classify:probability_sums"])
    _, tag_rows = read_tsv(tag_run.path("predictions.tsv"))
    # One tag per token, of the first 8 (--max-length) tokens.
    assert [len(a.split()) for a in answers["tag"]] == [min(len(r[0].split()), 8) for r in tag_rows]


# Odd inputs through each translator export, in a process with TensorFlow alone: one string out per
# string in, at most the export's length, for every batch size from empty to 1,000.
ODD = """
import json, sys, time
import tensorflow as tf
import tensorflow_text

odd = [
    b"", b"    ", " ".join(["word"] * 2000).encode(), "日本語のテキストです".encode(), "Save 💾 now 🎉".encode(),
    b"a\\x00b\\x07c\\x1bd", "שלום עולם مرحبا".encode(), b"line one\\nline\\ttwo", b"\\xff\\xfe bad \\xc3\\x28",
]
answers = {}
for name, path in json.loads(sys.argv[1]).items():
    translate = tf.saved_model.load(path).signatures["translate"]
    one = lambda batch: list(translate(sentences=tf.constant(batch, tf.string)).values())[0].numpy()
    singles = [one([s]) for s in odd]
    batches = {size: len(one([b"Open the file."] * size)) for size in (0, 1, 7, 1000)}
    answers[name] = {"singles": [[len(out), len(out[0].split())] for out in singles], "batches": batches,
                     "together": len(one(odd))}
print(json.dumps(answers))
"""


def test_translator_exports_answer_any_string(translate_transformer, translate_rnn_attention, translate_subword):
    runs = {"word": translate_transformer, "rnn-attention": translate_rnn_attention, "subword": translate_subword}
    answers = json.loads(
        run_python(ODD, json.dumps({n: r.path("export") for n, r in runs.items()})).strip().splitlines()[-1]
    )
    for name, run in runs.items():
        limit = json.loads(open(run.path("export_config.json"), encoding="utf-8").read())["max_length"]
        assert answers[name]["batches"] == {"0": 0, "1": 1, "7": 7, "1000": 1000}, name
        assert answers[name]["together"] == 9, name
        for rows, words in answers[name]["singles"]:
            assert rows == 1 and words <= limit, name  # one output each, never longer than the decoder's length

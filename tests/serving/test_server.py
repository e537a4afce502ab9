"""The translation server: batching, bad input, engine failures, a real export through it, and SIGTERM."""

import asyncio
import concurrent.futures
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import keras
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from keras_seq import export
from keras_seq.serving import batching, engines, server

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
on_tensorflow = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="export_translator writes a TensorFlow SavedModel on the TensorFlow backend only",
)


def with_export(test):
    """A test of the tiny export: on TensorFlow, on one xdist worker, which builds the export once."""
    return on_tensorflow(pytest.mark.xdist_group("serving_export")(test))


class OptionsExport:
    """A stand-in for an export with `translate_options`: each translation names its sentence and the options that
    reached it, so a test sees what the engine was called with, and `calls` records every call."""

    def __init__(self, num_beams=4, max_length=10, fail_on=None, gate=None):
        import tensorflow as tf

        self.num_beams = tf.Variable(num_beams, dtype=tf.int32)
        self.max_length = tf.Variable(max_length, dtype=tf.int32)
        self.length_penalty = tf.Variable(0.6, dtype=tf.float32)
        self.fail_on, self.gate, self.calls = fail_on, gate, []

    def translate(self, sentences):
        raise AssertionError("an export with translate_options is served through it")

    translate_greedy = translate

    def translate_options(self, sentences, beam_size, n_best, length_penalty, min_length, max_length):
        import tensorflow as tf

        options = (beam_size, n_best, length_penalty, min_length, max_length)
        assert [x.dtype for x in options] == [tf.int32, tf.int32, tf.float32, tf.int32, tf.int32]
        assert all(x.shape == () for x in options) and sentences.dtype == tf.string and sentences.shape.rank == 1
        texts = [s.decode() for s in sentences.numpy()]
        beams, n, penalty, least, most = (x.numpy().item() for x in options)
        self.calls.append((texts, (beams, n, penalty, least, most)))
        if self.gate is not None:
            assert self.gate.wait(30)
        if self.fail_on in texts:
            raise tf.errors.InvalidArgumentError(None, None, f"cannot decode {self.fail_on!r}")
        rows = range(len(texts))
        return {
            "translations": tf.constant([[f"{t} b{beams} #{k}" for k in range(n)] for t in texts], tf.string),
            "scores": tf.constant([[-(k + 1) * penalty for k in range(n)] for _ in rows], tf.float32),
            "log_probs": tf.constant([[-(k + 1) * 2.0 for k in range(n)] for _ in rows], tf.float32),
        }


def served(engine, scenario, **settings):
    """`scenario(client)` run against a test server of `engine` on this thread's own event loop."""

    async def run():
        async with TestClient(TestServer(server.make_app(engine, **settings))) as client:
            return await scenario(client)

    return asyncio.run(run())


async def post(client, body, path="/v1/translate"):
    """The status and JSON body of a POST of `body` (a value sent as JSON, or bytes sent as they are)."""
    data = body if isinstance(body, bytes) else json.dumps(body)
    async with client.post(path, data=data, headers={"Content-Type": "application/json"}) as response:
        return response.status, json.loads(await response.text())


def texts(result):
    return [[t["text"] for t in sentence["translations"]] for sentence in result["results"]]


def test_requests_within_the_wait_share_one_engine_call_in_their_order():
    export = OptionsExport()

    async def scenario(client):
        return await asyncio.gather(
            post(client, {"sentences": ["a long one", "b"]}), post(client, {"sentences": ["cc", "ddd"]})
        )

    (status1, first), (status2, second) = served(engines.engine_for(export), scenario, batch_wait_ms=300)
    assert (status1, status2) == (200, 200)
    assert texts(first) == [["a long one b4 #0"], ["b b4 #0"]]
    assert texts(second) == [["cc b4 #0"], ["ddd b4 #0"]]
    assert export.calls == [(["b", "cc", "ddd", "a long one"], (4, 1, 0.6000000238418579, 0, 10))]  # by length


def test_requests_with_other_options_go_to_calls_of_their_own():
    export = OptionsExport()

    async def scenario(client):
        return await asyncio.gather(
            post(client, {"sentences": ["x"], "beam_size": 1}),
            post(client, {"sentences": ["y"], "n_best": 2}),
            post(client, {"sentences": ["z"], "beam_size": 4, "n_best": 1, "length_penalty": 0.6}),  # the defaults
            post(client, {"sentences": ["w"]}),
        )

    results = served(engines.engine_for(export), scenario, batch_wait_ms=300)
    assert [texts(result) for _, result in results] == [
        [["x b1 #0"]],
        [["y b4 #0", "y b4 #1"]],
        [["z b4 #0"]],
        [["w b4 #0"]],
    ]
    calls = sorted((sorted(texts), options[:2]) for texts, options in export.calls)
    assert calls == [(["w", "z"], (4, 1)), (["x"], (1, 1)), (["y"], (4, 2))]


def test_a_batch_is_cut_at_max_batch_sentences_sorted_by_length_and_answered_in_request_order():
    export = OptionsExport()
    first, second = ["aaaaaaa", "b", "cccc"], ["dd", "eeeeee", "fff"]

    async def scenario(client):
        return await asyncio.gather(post(client, {"sentences": first}), post(client, {"sentences": second}))

    answers = served(engines.engine_for(export), scenario, batch_wait_ms=300, max_batch_sentences=4)
    assert [texts(result) for _, result in answers] == [[[f"{s} b4 #0"] for s in each] for each in (first, second)]
    assert [texts for texts, _ in export.calls] == [["b", "dd", "fff", "cccc"], ["eeeeee", "aaaaaaa"]]


def test_a_requests_options_reach_translate_options_and_its_n_best_come_back_with_scores():
    export = OptionsExport(num_beams=5, max_length=12)
    request = {"sentences": ["s"], "beam_size": 5, "n_best": 3, "length_penalty": 1, "min_length": 2, "max_length": 7}

    status, result = served(engines.engine_for(export), lambda client: post(client, request))
    assert status == 200
    assert export.calls == [(["s"], (5, 3, 1.0, 2, 7))]
    assert result == {
        "results": [
            {
                "translations": [
                    {"text": "s b5 #0", "score": -1.0, "log_prob": -2.0},
                    {"text": "s b5 #1", "score": -2.0, "log_prob": -4.0},
                    {"text": "s b5 #2", "score": -3.0, "log_prob": -6.0},
                ]
            }
        ]
    }


class OneSignatureExport:
    """A stand-in for a classifier, tagger or language-model export: its one signature, computed from its input."""

    def classify(self, texts):
        import tensorflow as tf

        lengths = tf.cast(tf.strings.length(texts), tf.float32)[:, None]
        probabilities = tf.concat([1 / (1 + lengths), lengths / (1 + lengths)], axis=1)
        return {"label": tf.where(lengths[:, 0] > 1, "long", "short"), "probabilities": probabilities}

    def tag(self, sentences):
        import tensorflow as tf

        return tf.strings.regex_replace(sentences, r"\S+", "X")

    def generate(self, prompts):
        import tensorflow as tf

        return tf.strings.join([prompts, "and so on"], separator=" ")


LONG_AND_SHORT = [{"label": "long", "probabilities": [0.25, 0.75]}, {"label": "short", "probabilities": [0.5, 0.5]}]


@pytest.mark.parametrize(
    "signature, field, expected",
    [
        ("classify", "texts", LONG_AND_SHORT),
        ("tag", "sentences", [{"tags": "X X X"}, {"tags": "X"}]),
        ("generate", "prompts", [{"text": "one two three and so on"}, {"text": "x and so on"}]),
    ],
)
def test_a_classifier_tagger_or_language_model_export_answers_its_own_route_only(signature, field, expected):
    export = type("Export", (), {signature: getattr(OneSignatureExport, signature)})()  # that signature alone
    engine = engines.engine_for(export)
    inputs = ["one two three", "x"] if signature != "classify" else ["abc", "x"]

    async def scenario(client):
        answer = await post(client, {field: inputs}, path=f"/v1/{engine.route}")
        wrong = await post(client, {field: inputs})
        unknown = await post(client, {field: inputs, "beam_size": 4}, path=f"/v1/{engine.route}")
        async with client.get("/health") as response:
            return answer, wrong, unknown, await response.json()

    answer, wrong, unknown, health = served(engine, scenario)
    kind = {"classify": "classify", "tag": "tag", "generate": "lm"}[signature]
    assert health == {
        "status": "ok",
        "kind": kind,
        "signatures": [signature],
        "fields": [field],
        "warm_up": {"calls": 0, "done": 0},
    }
    assert answer == (200, {"results": expected})
    assert wrong[0] == 404 and f"which answers POST /v1/{engine.route}, not POST /v1/translate" in wrong[1]["error"]
    assert unknown == (400, {"error": f"unknown fields: beam_size; expected some of {field}"})


# Each bad request, what must name the field at fault in its error, and its status.
TOO_LARGE = 8000
BAD_REQUESTS = [
    (b"{not json", 400, "body: expected a JSON object, got invalid JSON"),
    (b'{"sentences": ["caf\xe9"]}', 400, "not UTF-8"),
    (b"", 400, "got an empty body"),
    (b'{"sentences": [NaN]}', 400, "got NaN"),
    (["a"], 400, "body: expected a JSON object, got an array"),
    ({"sentences": ["a"], "beams": 4, "temperature": 1}, 400, "unknown fields: beams, temperature"),
    ({"text": "a"}, 400, "unknown fields: text"),
    ({}, 400, "sentences: expected a list of 1 to 5 strings, got none"),
    ({"sentences": "a"}, 400, "sentences: expected a list of 1 to 5 strings, got a string"),
    ({"sentences": []}, 400, "got an empty list"),
    ({"sentences": ["a"] * 6}, 400, "sentences: expected a list of 1 to 5 strings, got 6 strings"),
    ({"sentences": ["a", 3]}, 400, "sentences[1]: expected a string, got a number"),
    ({"sentences": ["a", None]}, 400, "sentences[1]: expected a string, got null"),
    ({"sentences": ["a" * 21]}, 400, "sentences[0]: expected at most 20 characters, got 21"),
    (b'{"sentences": ["a\\ud800"]}', 400, "sentences[0]: expected Unicode text, got a lone surrogate at character 1"),
    ({"sentences": ["a"], "beam_size": 2}, 400, "beam_size: expected 1 or 4"),
    ({"sentences": ["a"], "beam_size": "4"}, 400, 'beam_size: expected 1 or 4 (this export\'s beam searches), got "4"'),
    ({"sentences": ["a"], "n_best": True}, 400, "n_best: expected an integer in [1, 4], got true"),
    ({"sentences": ["a"], "n_best": 5}, 400, "n_best: expected an integer in [1, 4], got 5"),
    ({"sentences": ["a"], "beam_size": 1, "n_best": 2}, 400, "n_best: expected an integer in [1, 1], got 2"),
    ({"sentences": ["a"], "length_penalty": -0.5}, 400, "length_penalty: expected a number in [0.0, 10.0]"),
    ({"sentences": ["a"], "length_penalty": "high"}, 400, "length_penalty: expected a number"),
    ({"sentences": ["a"], "max_length": 0}, 400, "max_length: expected an integer in [1, 10], got 0"),
    ({"sentences": ["a"], "max_length": 11}, 400, "max_length: expected an integer in [1, 10], got 11"),
    ({"sentences": ["a"], "max_length": 2.5}, 400, "max_length: expected an integer in [1, 10], got 2.5"),
    ({"sentences": ["a"], "min_length": 6, "max_length": 5}, 400, "min_length: expected an integer in [0, 5], got 6"),
    (b'{"sentences": ["' + b"a" * TOO_LARGE + b'"]}', 413, f"body: got more than {TOO_LARGE} bytes"),
]


def test_each_bad_request_gets_a_4xx_json_error_naming_its_field_and_the_next_request_is_answered():
    export = OptionsExport()
    limits = dict(max_request_sentences=5, max_sentence_chars=20, max_body_bytes=TOO_LARGE)

    async def scenario(client):
        answers = []
        for body, _, _ in BAD_REQUESTS:
            answers.append(await post(client, body))
            answers.append(await post(client, {"sentences": ["ok"]}))
        for method, path in (("POST", "/v1/classify"), ("POST", "/v1/nothing"), ("GET", "/v1/translate")):
            async with client.request(method, path, json={"sentences": ["a"]}) as response:
                answers.append((response.status, await response.json()))
            answers.append(await post(client, {"sentences": ["ok"]}))
        return answers

    answers = served(engines.engine_for(export), scenario, **limits)
    routes = [
        (404, "this server serves a translate export, which answers POST /v1/translate, not POST /v1/classify"),
        (404, "path: got POST /v1/nothing, expected one of GET /, GET /health, POST /v1/translate"),
        (405, "method: got GET for /v1/translate, expected POST"),
    ]
    for (status, error), (expected_status, expected_error) in zip(
        answers[::2], [(status, error) for _, status, error in BAD_REQUESTS] + routes
    ):
        assert (status, list(error)) == (expected_status, ["error"])
        assert expected_error in error["error"] and "\n" not in error["error"]
    assert all(answer == (200, {"results": [{"translations": [{"text": "ok b4 #0", "score": -0.6000000238418579,
                                                                "log_prob": -2.0}]}]})
               for answer in answers[1::2])  # fmt: skip
    assert [texts for texts, _ in export.calls] == [["ok"]] * (len(BAD_REQUESTS) + len(routes))


def test_an_engine_failure_fails_only_the_requests_of_its_call_and_the_server_goes_on(caplog):
    export = OptionsExport(fail_on="bad")

    async def scenario(client):
        together = await asyncio.gather(
            post(client, {"sentences": ["good", "bad"]}),
            post(client, {"sentences": ["other"]}),  # the same call
            post(client, {"sentences": ["greedy"], "beam_size": 1}),  # another call
        )
        return together, await post(client, {"sentences": ["again"]})

    with caplog.at_level(logging.ERROR, logger="keras_seq.serving"):
        together, after = served(engines.engine_for(export), scenario, batch_wait_ms=300)
    (status1, failed1), (status2, failed2), (status3, greedy) = together
    assert (status1, status2, status3) == (500, 500, 200)
    for failed in (failed1, failed2):
        assert list(failed) == ["error"] and "InvalidArgumentError: cannot decode 'bad'" in failed["error"]
    assert texts(greedy) == [["greedy b1 #0"]]
    assert after[0] == 200 and texts(after[1]) == [["again b4 #0"]]
    assert "the engine failed on a call of 3 items" in caplog.text


def test_the_event_loop_answers_while_the_engine_decodes_and_closing_lets_the_call_finish():
    gate = threading.Event()
    export = OptionsExport(gate=gate)

    async def scenario(client):
        decoding = asyncio.ensure_future(post(client, {"sentences": ["slow"]}))
        while not export.calls:
            await asyncio.sleep(0.01)
        async with client.get("/health") as response:  # the engine is busy on its worker thread
            health = response.status, await response.json()
        assert not decoding.done()
        gate.set()
        return health, await decoding

    health, (status, result) = served(engines.engine_for(export), scenario)
    signatures = ["translate", "translate_greedy", "translate_options"]
    warm_up = {"calls": 0, "done": 0}
    fields = ["sentences", "beam_size", "n_best", "length_penalty", "min_length", "max_length"]
    assert health == (
        200,
        {"status": "ok", "kind": "translate", "signatures": signatures, "fields": fields, "warm_up": warm_up},
    )
    assert status == 200 and texts(result) == [["slow b4 #0"]]


def test_close_finishes_what_was_submitted_and_refuses_what_comes_after():
    calls = []

    def run_batch(items, key):
        time.sleep(0.2)
        calls.append(list(items))
        return [item.upper() for item in items]

    async def scenario():
        batcher = batching.RequestBatcher(run_batch, wait_seconds=0.05, max_batch_items=8)
        batcher.start()
        submitted = asyncio.ensure_future(batcher.submit(["a", "bb"], key=None))
        await asyncio.sleep(0)
        await batcher.close()
        with pytest.raises(batching.BatcherClosed):
            await batcher.submit(["c"])
        return await submitted

    assert asyncio.run(scenario()) == ["A", "BB"] and calls == [["a", "bb"]]


def test_a_second_close_waits_for_the_first_and_a_stopped_batcher_refuses_requests():
    def run_batch(items, key):
        time.sleep(0.2)
        return list(items)

    async def scenario():
        batcher = batching.RequestBatcher(run_batch, wait_seconds=0.0, max_batch_items=8)
        batcher.start()
        submitted = asyncio.ensure_future(batcher.submit(["a"]))
        await asyncio.sleep(0)
        first = asyncio.ensure_future(batcher.close())
        await asyncio.sleep(0)
        await batcher.close()  # returns once the first close has drained, not before
        drained = submitted.done() and first.done()
        stopped = batching.RequestBatcher(run_batch, wait_seconds=0.0, max_batch_items=8)
        stopped.start()
        stopped._collector.cancel()  # as a fault its loop cannot catch would end it
        await asyncio.sleep(0)
        with pytest.raises(batching.BatcherClosed, match="the batcher has stopped"):
            await stopped.submit(["b"])
        return drained, await submitted

    assert asyncio.run(scenario()) == (True, ["a"])


def test_each_request_writes_one_access_log_line(caplog):
    async def scenario(client):
        await post(client, {"sentences": ["a", "b"]})
        await post(client, {"sentences": []})
        await client.get("/health")

    with caplog.at_level(logging.INFO, logger="keras_seq.serving.access"):
        served(engines.engine_for(OptionsExport()), scenario)
    lines = [record.getMessage() for record in caplog.records if record.name == "keras_seq.serving.access"]
    assert len(lines) == 3
    assert lines[0].startswith("POST /v1/translate 200 sentences=2 ") and lines[0].endswith("ms")
    assert lines[1].startswith("POST /v1/translate 400 sentences=- ")
    assert lines[2].startswith("GET /health 200 sentences=- ")


def test_bad_command_lines_end_with_one_error_line_and_status_2(tmp_path, capsys):
    for argv, message in (
        ([str(tmp_path / "missing")], "EXPORT_DIR: expected a folder holding a keras_seq export"),
        ([str(tmp_path)], "EXPORT_DIR: expected a TensorFlow SavedModel (saved_model.pb)"),
        ([str(tmp_path), "--engine", "ctranslate2"], "EXPORT_DIR: expected a CTranslate2 model folder (model.bin)"),
    ):
        assert server.main(argv) == 2
        error = capsys.readouterr().err
        assert error.startswith("serve: error: ") and message in error and error.count("\n") == 1
    with pytest.raises(SystemExit) as exit:
        server.main([str(tmp_path), "--max-batch-sentences", "0"])
    assert exit.value.code == 2
    assert (
        capsys.readouterr().err
        == "serve: error: argument --max-batch-sentences: expected a positive integer, got '0'\n"
    )


SENTENCES = ["w1 w2 w3", "w4", "w2 w2 w15 w7 w9 w11", "w16 w17 w3 w9 w1", ""]


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    """A tiny GRU translator exported by `export_translator` (2 beams), loaded, and its own translations."""
    import tensorflow as tf

    import keras_seq as ks
    from keras_seq import export
    from keras_seq.data import text

    keras.utils.set_random_seed(3)
    vocabulary = text.Vocabulary([f"w{i}" for i in range(1, 20)])
    model = ks.models.rnn_seq2seq(len(vocabulary), len(vocabulary), embedding_dim=8, units=8)
    path = str(tmp_path_factory.mktemp("serving_export"))
    export.export_translator(model, vocabulary, vocabulary, path, source_length=12, max_length=8, num_beams=2)
    loaded = tf.saved_model.load(path)
    own = {
        name: [s.decode() for s in getattr(loaded, name)(tf.constant(SENTENCES)).numpy()]
        for name in ("translate", "translate_greedy")
    }
    return path, loaded, own


CONTROLS = {"no_repeat_ngram_size": 1, "repetition_penalty": 1.5, "disable_unk": True, "max_length_ratio": 0.5}


PREFIXES = ["w5", "", "w7 w7", "", "w2"]
SAMPLING = {"sampling_topk": 0, "sampling_topp": 0.9, "sampling_temperature": 1.3, "seed": 7}


@with_export
@pytest.mark.parametrize(
    "beam_size, n_best, controls, prefixes",
    [
        (None, 1, {}, None),
        (2, 2, {}, None),
        (1, 1, {}, None),
        (2, 2, CONTROLS, None),
        (2, 2, {}, PREFIXES),
        (1, 1, SAMPLING, None),
    ],
)
def test_a_real_export_serves_what_its_translate_options_gives(tiny_export, beam_size, n_best, controls, prefixes):
    """Served in two requests batched together, the sentences get what one direct call of the export's
    `translate_options` gives them, with the export's own settings where the request leaves them out."""
    import tensorflow as tf

    path, loaded, own = tiny_export
    engine = engines.engine_for(loaded)  # the module's one load: its compiled programs serve every case
    assert engine.kind == "translate" and engine.num_beams == 2 and engine.max_length == 8
    request = {"n_best": n_best, **controls, **({} if beam_size is None else {"beam_size": beam_size})}

    async def scenario(client):
        halves = [{**request, "sentences": SENTENCES[:2]}, {**request, "sentences": SENTENCES[2:]}]
        if prefixes is not None:  # one string per sentence, in each request
            halves[0]["target_prefix"], halves[1]["target_prefix"] = prefixes[:2], prefixes[2:]
        halves = await asyncio.gather(*(post(client, half) for half in halves))
        async with client.get("/health") as response:
            return halves, await response.json()

    halves, health = served(engine, scenario, batch_wait_ms=200)
    assert [status for status, _ in halves] == [200, 200]
    given = {**export.NEUTRAL_OPTIONS, **controls}
    direct = loaded.translate_options(
        tf.constant(SENTENCES),
        tf.constant(beam_size or 2),
        tf.constant(n_best),
        tf.constant(0.6),
        0,
        8,
        *(tf.constant(given[name], dtype) for name, dtype in export.RUNTIME_OPTIONS[5:]),
        tf.constant(prefixes or [""] * len(SENTENCES)),
    )
    expected = [[t.decode() for t in row] for row in direct["translations"].numpy()]
    results = halves[0][1]["results"] + halves[1][1]["results"]
    assert [[t["text"] for t in r["translations"]] for r in results] == expected
    scores = [[t["score"] for t in r["translations"]] for r in results]
    log_probs = [[t["log_prob"] for t in r["translations"]] for r in results]
    np.testing.assert_allclose(scores, direct["scores"].numpy(), rtol=1e-5)
    np.testing.assert_allclose(log_probs, direct["log_probs"].numpy(), rtol=1e-5)
    if prefixes is not None:
        assert all(t.startswith(prefix) for row, prefix in zip(expected, prefixes) for t in row)
    if "no_repeat_ngram_size" in controls:  # a 1-gram ban: no word twice in a translation
        assert all(len(set(t.split())) == len(t.split()) for row in expected for t in row)
    if beam_size is None:
        assert [row[0] for row in expected] == own["translate"]
    if beam_size == 1 and not controls:
        assert [row[0] for row in expected] == own["translate_greedy"]
    if "seed" in controls:  # the sample differs from the greedy translation somewhere
        assert [row[0] for row in expected] != own["translate_greedy"]
    assert health["kind"] == "translate" and {"translate", "translate_options"} <= set(health["signatures"])


@with_export
@pytest.mark.parametrize(
    "options, field, expected",
    [
        ({"beam_size": 3}, "beam_size", "expected 1 or 2"),
        ({"beam_size": 1, "n_best": 2}, "n_best", "expected an integer in [1, 1]"),
        ({"max_length": 9}, "max_length", "expected an integer in [1, 8]"),
        ({"max_length": 5, "min_length": 6}, "min_length", "expected an integer in [0, 5]"),
        ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size", "expected an integer in [0, 8]"),
        ({"repetition_penalty": 0}, "repetition_penalty", "expected a number > 0"),
        ({"repetition_penalty": 1e9}, "repetition_penalty", "expected a number in [0.0, 100.0]"),
        ({"disable_unk": "yes"}, "disable_unk", "expected true or false"),
        ({"target_prefix": ["w1", "w2"]}, "target_prefix", "expected one string per sentence (1), got 2"),
        ({"target_prefix": "w1"}, "target_prefix", "expected a list of 1 to"),
        ({"max_length_ratio": -1}, "max_length_ratio", "expected a number in [0.0, 100.0]"),
        ({"beam_size": 2, "sampling_topk": 3}, "sampling_topk", "expected 1 with beam_size 2"),
        ({"beam_size": 1, "sampling_topk": -1}, "sampling_topk", "expected an integer in [0, "),
        ({"beam_size": 1, "sampling_topp": 0}, "sampling_topp", "expected a number in (0, 1]"),
        ({"beam_size": 1, "sampling_temperature": 0}, "sampling_temperature", "expected a number > 0"),
        ({"beam_size": 1, "seed": 2**31}, "seed", "expected an integer in ["),
        ({"beam_size": 1, "sampling_topp": 10**400}, "sampling_topp", "expected a number in [0.0, 1.0]"),
    ],
)
def test_a_real_export_refuses_options_outside_what_it_was_compiled_for(tiny_export, options, field, expected):
    engine = engines.engine_for(tiny_export[1])
    assert engine.parse_options({"sampling_topk": 5}).beam_size == 1  # sampling asked for: one beam by default
    status, error = served(engine, lambda client: post(client, {"sentences": ["w1"], **options}))
    assert status == 400
    assert error["error"].startswith(f"{field}: {expected}")


def test_the_warm_up_runs_first_its_outputs_reach_no_one_and_health_answers_503_until_it_ends():
    """One call per row count (sentences 1, 2, 3, 4, 5, 7, 9, 13 give 1 to 16 rows), width (16 words: the one width
    of a max_length of 10) and beam size, decoded to max_length; a request that came meanwhile waits, then gets
    its own translation from a call of its own."""
    gate = threading.Event()
    export = OptionsExport(gate=gate)

    async def scenario(client):
        async def health():
            async with client.get("/health") as response:
                return response.status, (await response.json())["warm_up"]

        while not export.calls:
            await asyncio.sleep(0.01)
        during = await health()
        request = asyncio.ensure_future(post(client, {"sentences": ["mine"]}))
        await asyncio.sleep(0.2)
        assert not request.done()
        gate.set()
        return during, await request, await health()

    during, (status, result), after = served(engines.engine_for(export), scenario, warm_up="full")
    assert during == (503, {"calls": 16, "done": 0}) and after == (200, {"calls": 16, "done": 16})
    assert status == 200 and texts(result) == [["mine b4 #0"]]
    sizes = [1, 2, 3, 4, 5, 7, 9, 13]
    assert engines.warm_up_batch_sizes(64) == sizes and engines.warm_up_batch_sizes(8) == sizes[:6]
    warm = " ".join(["the"] * 16)
    expected = [([warm] * n, (beam, 1, 0.6000000238418579, 10, 10)) for beam in (4, 1) for n in sizes]
    assert export.calls == expected + [(["mine"], (4, 1, 0.6000000238418579, 0, 10))]


# Loads the tiny export, warms it up, then translates batches of every size up to argv[3] by each search
# (decoded to max_length, so no sentence ends before the others): XLA writes one dump folder entry per program it
# compiles, counted after each phase.
_COMPILES_SCRIPT = """
import glob, json, sys
from keras_seq.serving import engines
engine = engines.load_savedmodel(sys.argv[1])
dump, most = sys.argv[2], int(sys.argv[3])
def compiled():
    return len({name.split(".")[0] for name in glob.glob(dump + "/module_*.before_optimizations.txt")})
counts = [compiled()]
for strings, options in engine.warm_up_calls(most, "full"):
    engine.run(strings, options)
counts.append(compiled())
words = [f"w{i % 19 + 1}" for i in range(30)]
searches = [dict(beam_size=2), dict(beam_size=1), dict(beam_size=1, sampling_topk=0)]
longest = dict(n_best=1, length_penalty=0.6, min_length=8, max_length=8)
for search in searches:
    for size in range(1, most + 1):
        sentences = [" ".join(words[row : row + 1 + (row * 7) % 12]) for row in range(size)]
        engine.run(sentences, engines.TranslateOptions(**search, **longest))
counts.append(compiled())
print(json.dumps(counts))
"""


@with_export
def test_after_the_warm_up_no_batch_of_a_warmed_shape_compiles_an_xla_program(tiny_export, tmp_path):
    """Counted by XLA's dumps: the warm-up compiles, per search (beam, greedy, sampling), the lone sentence's
    program and each of the 7 row counts' start and steps programs (one source width, one cache window: 3 * 15);
    the 3 * 16 batches after it, of 1 to 16 sentences, compile none."""
    environment = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    environment["XLA_FLAGS"] = f"{environment.get('XLA_FLAGS', '')} --xla_dump_to={tmp_path}"
    result = subprocess.run(
        [sys.executable, "-c", _COMPILES_SCRIPT, tiny_export[0], str(tmp_path), "16"],
        cwd=REPOSITORY,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [0, 45, 45]


def test_an_export_without_translate_options_is_refused_at_start_up():
    class OlderExport:
        def translate(self, sentences):
            return sentences

    with pytest.raises(ValueError, match="no translate_options signature"):
        engines.engine_for(OlderExport())


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(url, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.loads(response.read())


@with_export
def test_sigterm_lets_the_request_in_flight_finish_and_exits_with_0(tiny_export):
    path, _, own = tiny_export
    port = _free_port()
    environment = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.Popen(
        [sys.executable, "-m", "recipes.serve", path, "--port", str(port), "--batch-wait-ms", "50"],
        cwd=REPOSITORY,
        env=environment,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = time.monotonic()
        while True:
            assert process.poll() is None, process.stderr.read()
            try:
                assert _http(f"http://127.0.0.1:{port}/health", timeout=5)[0] == 200
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() - started < 180, "the server did not answer /health in 180 s"
                time.sleep(0.2)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(_http, f"http://127.0.0.1:{port}/v1/translate", {"sentences": SENTENCES})
            time.sleep(0.5)  # received; its first call compiles the decoding for seconds
            process.send_signal(signal.SIGTERM)
            status, result = answer.result(timeout=180)
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = process.stderr.read()
    assert status == 200 and texts(result) == [[text] for text in own["translate"]], log
    assert f"POST /v1/translate 200 sentences={len(SENTENCES)} " in log


def test_a_ctranslate2_conversion_is_served_through_the_translate_route(tmp_path):
    """The same request fields and answers as an export (options, n-best, per-sentence prefixes, batching across
    requests) for what CTranslate2 takes; a field it lacks gets a 400 naming it."""
    pytest.importorskip("ctranslate2")
    from test_ctranslate2 import SERVED, built

    from keras_seq import ctranslate2 as converter
    from keras_seq.serving import ctranslate2_engine

    model, vocabulary, _ = built("prenorm_sinusoidal_shared_tied_subword")
    path = converter.export_ctranslate2(model, vocabulary, vocabulary, str(tmp_path / "ct2"), num_beams=2)
    engine = ctranslate2_engine.CTranslate2Translator(path, threads=1)
    prefixes = ["le", "", "enregistrer", ""]
    request = {"n_best": 2, "no_repeat_ngram_size": 2, "length_penalty": 0.6}

    async def scenario(client):
        answers = await asyncio.gather(
            post(client, {**request, "sentences": SERVED[:2], "target_prefix": prefixes[:2]}),
            post(client, {**request, "sentences": SERVED[2:], "target_prefix": prefixes[2:]}),
            post(client, {"sentences": ["x"], "max_length_ratio": 1.5}),
        )
        async with client.get("/health") as response:
            return answers, await response.json()

    (first, second, refused), health = served(engine, scenario, batch_wait_ms=200)
    direct = engine.run([engines.Sentence(s, p) for s, p in zip(SERVED, prefixes)], engine.parse_options(request))
    assert (first[0], second[0]) == (200, 200)
    results = first[1]["results"] + second[1]["results"]
    assert [[t["text"] for t in r["translations"]] for r in results] == [
        [t["text"] for t in r["translations"]] for r in direct
    ]
    for name in ("score", "log_prob"):
        np.testing.assert_allclose(
            [[t[name] for t in r["translations"]] for r in results],
            [[t[name] for t in r["translations"]] for r in direct],
            atol=1e-4,
        )
    assert all(t["text"].startswith("le") for t in results[0]["translations"])
    assert refused[0] == 400 and refused[1]["error"].startswith("unknown fields: max_length_ratio")
    assert health["kind"] == "translate" and health["signatures"] == ["ctranslate2"]


@with_export
def test_a_real_export_returns_each_translations_alignment_over_the_source_tokens(tiny_export):
    """`return_alignment`: each sentence's source tokens, each translation's tokens and one row of weights per
    token over the source tokens: the export's own, trimmed to the tokens."""
    import tensorflow as tf

    engine = engines.engine_for(tiny_export[1])
    assert "return_alignment" in engine.option_fields
    sentences = SENTENCES[:4]
    request = {"sentences": sentences, "beam_size": 2, "n_best": 2, "return_alignment": True}
    (status, answer), (_, plain) = served(
        engine,
        lambda client: asyncio.gather(post(client, request), post(client, {**request, "return_alignment": False})),
    )
    assert status == 200
    options = {**export.NEUTRAL_OPTIONS, "beam_size": 2, "n_best": 2, "length_penalty": 0.6, "min_length": 0}
    options.update(max_length=8, return_alignment=True)
    direct = tiny_export[1].translate_options(
        tf.constant(sentences),
        *(tf.constant(options[name], dtype) for name, dtype in export.RUNTIME_OPTIONS),
        tf.constant([""] * len(sentences)),
    )
    weights = direct["alignments"].numpy()
    for row, (sentence, result) in enumerate(zip(sentences, answer["results"])):
        assert result["source_tokens"] == sentence.split()
        for rank, translation in enumerate(result["translations"]):
            assert translation["target_tokens"] == translation["text"].split()
            rows, columns = len(translation["target_tokens"]), len(result["source_tokens"])
            np.testing.assert_allclose(translation["alignment"], weights[row, rank, :rows, :columns], atol=1e-4)
            assert np.allclose(np.sum(translation["alignment"], axis=-1), 1.0, atol=1e-3)
    assert not any("alignment" in t or "source_tokens" in r for r in plain["results"] for t in r["translations"])


class EveryOptionExport(OptionsExport):
    """`OptionsExport` whose `translate_options` takes every option of `export.RUNTIME_OPTIONS` and a target prefix,
    in that order, as a SavedModel signature lists them, and returns no alignments (a model without attention)."""

    def __init__(self):
        super().__init__(num_beams=2)
        names = ["sentences", *(name for name, _ in export.RUNTIME_OPTIONS), "target_prefix"]
        outputs = {"translations": None, "scores": None, "log_probs": None}
        self.signatures = {"translate_options": SimpleNamespace(structured_input_signature=((), dict.fromkeys(names)),
                                                                structured_outputs=outputs)}  # fmt: skip

    def translate_options(self, sentences, *options):
        given = dict(zip([name for name, _ in export.RUNTIME_OPTIONS], options))
        assert len(options) == len(export.RUNTIME_OPTIONS) + 1 and not given["return_alignment"].numpy()
        return super().translate_options(sentences, *options[:5])


def test_an_export_without_alignments_takes_return_alignment_but_does_not_offer_it():
    """Its signature still takes the option (false), in its place among the others; a request cannot set it."""
    engine = engines.engine_for(EveryOptionExport())
    assert not engine.aligns and "return_alignment" in engine.arguments
    assert "return_alignment" not in engine.option_fields
    (status, answer), (refused, error) = served(
        engine,
        lambda client: asyncio.gather(
            post(client, {"sentences": ["w1 w2"], "n_best": 2}),
            post(client, {"sentences": ["w1 w2"], "return_alignment": True}),
        ),
    )
    assert status == 200 and [t["text"] for t in answer["results"][0]["translations"]] == ["w1 w2 b2 #0", "w1 w2 b2 #1"]
    assert refused == 400 and error["error"].startswith("unknown fields: return_alignment")

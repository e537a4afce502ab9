"""The translation server (`python -m recipes.serve`) under load, against its export called directly.

Given a translate run's export (`--export OUTPUT_DIR/export`), or after training the translate
recipe's default model for `--train-seconds S` (`python -m recipes.translate --max-seconds S
--output-dir DIR`, then DIR/export), measures in one run on the same sentences: the English
(source) side of the test split of the shipped corpus `software_en_fr` (the recipe's default
data, which trains on its train split and validates on its valid split), the first
`--sentences N` of it, cycled:

1. offline: the export's `translate` signature, loaded with `tf.saved_model.load` in this
   process, on batches of 64 sentences in the corpus order (sentences/s over timed passes of
   at least `--offline-seconds`), and on one sentence at a time (median and p99 latency over
   `--latency-requests` calls);
2. the server, started as a subprocess on a free port (`--batch-wait-ms`,
   `--max-batch-sentences` and `--warm-up` passed on) once GET /health answers 200 (the seconds
   to its first answer, to 200, and its own warm-up's from its log line): `--clients` concurrent aiohttp
   clients, each sending one sentence per request (`POST /v1/translate {"sentences": [s]}`) in
   a loop for `--seconds`: requests, failed requests (a status other than 200, a body without
   one result, or an exception), p50/p99/max latency, sentences/s (the answered sentences over the
   time from the first request to the last answer); then one client alone, one request at a
   time (`--latency-requests` requests, the same sentences as the direct calls): p50/p99;
3. bad requests while the server runs (not JSON, wrong types, an empty list, 10,000
   sentences, a 100 KB sentence, bytes that are not UTF-8, beam_size 0 and 1000): each must
   get a 4xx with a JSON `{"error": "..."}` body; GET /health must still answer after them;
   the server's resident memory (VmRSS of /proc/PID/status) is read when it has started,
   after the warm-up, after the load, after the lone client and after the bad requests;
4. SIGTERM to the server and its exit status (0 expected).

An untimed pass comes before each timed measurement, so that the XLA programs the export
compiles at the first call of each shape are built: every sentence once in batches of 64 and
the lone sentences once (offline); every sentence once through the clients, then
`--warmup-seconds` of the same load (a server started with `--warm-up none` meets shapes the
first pass did not) and the lone requests once (server); the slowest of these untimed requests
shows what the server's own warm-up left to compile. The table gives each
latency's maximum too: a maximum of seconds is a compilation in the timed load. The offline
measurements run before the server starts; the clients run in this process, on the same CPU
as the server (their cost is in the server's figures).

Printed: a header line (date, commit, CPU, cores, TensorFlow version), a Markdown table with
the two ratios the acceptance needs, server sentences/s over the offline batch-64 sentences/s
(target >= 0.8) and the lone request's p50 over the direct call's p50 (target <= 1.2), and a
table of the bad requests; `--json PATH` writes every figure. Exit status 1 when a request
of the load failed, a bad request got no 4xx JSON error, /health did not answer after them or
the server did not exit with 0 on SIGTERM (the two targets are reported, not enforced).
With `--ctranslate2 DIR` (the model's CTranslate2 conversion, `translate --export-ctranslate2`),
the same untimed pass, timed load and lone client then run against a second server with
`--engine ctranslate2`, reported beside the first.

    KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=3 .tox/tensorflow/bin/python benchmarks/bench_http_server.py \\
        --export runs/translate/export --clients 64 --seconds 60 --json bench_http_server.json
    KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=3 .tox/tensorflow/bin/python benchmarks/bench_http_server.py \\
        --train-seconds 600 --output-dir runs/bench_http_server
"""

import argparse
import asyncio
import importlib.metadata
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import _timing

REPO = _timing.REPO
OFFLINE_BATCH = 64
STARTUP_TIMEOUT = 900  # seconds for GET /health to answer 200 (TensorFlow's import, the export's load, the warm-up)
REQUEST_TIMEOUT = 300  # seconds per request (a first call may compile its XLA program for many seconds)
SLOW_SECONDS = 1.0  # a request slower than this in a timed measurement most likely waited for a compilation


def parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--export", metavar="DIR", help="a translate run's OUTPUT_DIR/export (a SavedModel)")
    source.add_argument(
        "--train-seconds",
        type=float,
        metavar="S",
        help="first train the translate recipe's default model for S seconds and use its export",
    )
    parser.add_argument(
        "--output-dir", metavar="DIR", help="with --train-seconds: the recipe's --output-dir (default: a temporary one)"
    )
    parser.add_argument("--clients", type=positive_int, default=64, help="concurrent clients of the load (default 64)")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument(
        "--batch-wait-ms", type=float, default=0.0, help="the server's --batch-wait-ms (default 0, the server's own)"
    )
    parser.add_argument(
        "--max-batch-sentences", type=positive_int, default=64, help="the server's --max-batch-sentences (default 64)"
    )
    parser.add_argument(
        "--sentences",
        type=positive_int,
        metavar="N",
        help="test sentences used, cycled (default: all of the split; more than the split repeats it)",
    )
    parser.add_argument(
        "--latency-requests",
        type=positive_int,
        default=50,
        help="lone calls and lone requests timed one at a time (default 50)",
    )
    parser.add_argument(
        "--offline-seconds",
        type=float,
        default=10.0,
        help="the offline batch-64 passes are repeated until they have taken this long (default 10)",
    )
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=20.0,
        help="untimed load before the timed one, after a pass over the sentences (default 20): the server's "
        "batches take shapes the export has not compiled yet for a while",
    )
    parser.add_argument(
        "--warm-up",
        choices=("full", "beam", "none"),
        help="the server's --warm-up (default: the server's own): the shapes it compiles before its first request",
    )
    parser.add_argument(
        "--ctranslate2",
        metavar="DIR",
        help="also serve this CTranslate2 conversion of the export's model (translate --export-ctranslate2) "
        "behind the same server (--engine ctranslate2) and load it alike",
    )
    parser.add_argument("--json", metavar="PATH", help="write every figure to this JSON file")
    args = parser.parse_args()
    if args.output_dir and args.train_seconds is None:
        parser.error("--output-dir: expected with --train-seconds only")
    if args.seconds <= 0 or min(args.offline_seconds, args.warmup_seconds, args.batch_wait_ms) < 0:
        parser.error("--seconds: expected > 0; --offline-seconds, --warmup-seconds, --batch-wait-ms: expected >= 0")
    return args


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def fail(message):
    print(f"bench_http_server: error: {message}", file=sys.stderr)
    sys.exit(2)


def environment():
    return {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}


def milliseconds(seconds):
    """`{"p50", "p99", "mean", "max"}` in milliseconds of a list of seconds (p99: inclusive quantile)."""
    values = sorted(1000 * s for s in seconds)
    if not values:
        return {"p50": None, "p99": None, "mean": None, "max": None}
    p99 = statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]
    return {
        "p50": round(statistics.median(values), 2),
        "p99": round(p99, 2),
        "mean": round(statistics.fmean(values), 2),
        "max": round(values[-1], 2),
    }


# ---------------------------------------------------------------------------------------------------------------------
# The export: given, or trained by the recipe.


def train(args, directory):
    """Train the translate recipe's default model for `--train-seconds` into `directory`; its export's path."""
    command = [
        sys.executable,
        "-m",
        "recipes.translate",
        "--max-seconds",
        f"{args.train_seconds:g}",
        "--output-dir",
        str(directory),
    ]
    print(f"training: {' '.join(command)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    result = subprocess.run(command, cwd=REPO, env=environment())
    if result.returncode:
        fail(f"the translate recipe failed (exit {result.returncode}); its error is above")
    print(f"trained and exported in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return directory / "export"


def test_sentences(count):
    """The source side of software_en_fr's test split, the first `count` (cycled past its end; None: all)."""
    from keras_seq.data import corpora

    sources = [source for source, _ in corpora.software_en_fr("test")]
    count = count or len(sources)
    return [sources[i % len(sources)] for i in range(count)]


# ---------------------------------------------------------------------------------------------------------------------
# 1. Offline: the export called directly in this process.


def offline(export, sentences, lone, minimum_seconds):
    import tensorflow as tf

    try:
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of a subword export)
    except ImportError:
        pass
    started = time.monotonic()
    translator = tf.saved_model.load(str(export))  # kept alive: its functions need it
    load_seconds = time.monotonic() - started
    batches = [sentences[i : i + OFFLINE_BATCH] for i in range(0, len(sentences), OFFLINE_BATCH)]

    def translate(batch):
        return translator.translate(tf.constant(batch, tf.string)).numpy()

    print(f"offline: warm-up pass ({len(sentences)} sentences, batches of {OFFLINE_BATCH}) ...", file=sys.stderr)
    started = time.monotonic()
    for batch in batches:
        translate(batch)
    for sentence in lone:
        translate([sentence])
    warmup_seconds = time.monotonic() - started
    print("offline: timed passes ...", file=sys.stderr, flush=True)
    passes, seconds = 0, 0.0
    while passes == 0 or seconds < minimum_seconds:
        started = time.perf_counter()
        for batch in batches:
            translate(batch)
        seconds += time.perf_counter() - started
        passes += 1
    latencies = []
    for sentence in lone:
        started = time.perf_counter()
        translate([sentence])
        latencies.append(time.perf_counter() - started)
    return {
        "load_seconds": round(load_seconds, 2),
        "warmup_seconds": round(warmup_seconds, 2),
        "batch_size": OFFLINE_BATCH,
        "passes": passes,
        "timed_seconds": round(seconds, 3),
        "sentences_per_second": round(passes * len(sentences) / seconds, 2),
        "lone_calls": len(lone),
        "lone_latency_ms": milliseconds(latencies),
        "signatures": sorted(translator.signatures.keys()),
    }


# ---------------------------------------------------------------------------------------------------------------------
# 2-4. The server.


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def resident_mib(pid):
    """VmRSS of process `pid` in MiB (None once it has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((line for line in status.splitlines() if line.startswith("VmRSS:")), None)
    return round(int(line.split()[1]) / 1024, 1) if line else None


def get_health(url, timeout=10):
    """`(status, JSON body or text)` of GET /health; `(None, error)` when it does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")[:300]
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
        return None, _timing.first_line(error)


class Server:
    """`python -m recipes.serve EXPORT` on a free port, its stderr (the access log) in a temporary file."""

    def __init__(self, export, batch_wait_ms, max_batch_sentences, warm_up=None, engine="savedmodel"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [
            sys.executable,
            "-m",
            "recipes.serve",
            str(export),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--batch-wait-ms",
            f"{batch_wait_ms:g}",
            "--max-batch-sentences",
            str(max_batch_sentences),
            *(["--warm-up", warm_up] if warm_up else []),
            "--engine",
            engine,
        ]
        self.log = tempfile.TemporaryFile("w+", prefix="bench_http_server-log-")
        started, self.listening_seconds = time.monotonic(), None
        self.process = subprocess.Popen(
            self.command, cwd=REPO, env=environment(), stdout=self.log, stderr=subprocess.STDOUT, text=True
        )
        while True:
            if self.process.poll() is not None:
                self.stop()
                fail(f"the server exited with {self.process.returncode} before answering /health:\n{self.tail()}")
            status, self.health = get_health(self.url, timeout=5)
            if status is not None and self.listening_seconds is None:
                self.listening_seconds = round(time.monotonic() - started, 2)
            if status == 200:
                break
            if time.monotonic() - started > STARTUP_TIMEOUT:
                self.stop()
                fail(f"the server did not answer GET /health in {STARTUP_TIMEOUT} s:\n{self.tail()}")
            time.sleep(0.2)
        self.startup_seconds = round(time.monotonic() - started, 2)
        self.warm_up_seconds = self.warm_up_seconds_logged()

    def warm_up_seconds_logged(self):
        """The seconds of the server's warm-up, read from its "warmed up: ... in S s" log line (None: none)."""
        self.log.flush()
        self.log.seek(0)
        line = next((line for line in self.log.read().splitlines() if "warmed up: " in line), None)
        return float(line.rsplit(" in ", 1)[1].split()[0]) if line else None

    def rss(self):
        return resident_mib(self.process.pid)

    def tail(self, lines=20):
        self.log.flush()
        self.log.seek(0)
        return "\n".join(self.log.read().strip().splitlines()[-lines:])

    def terminate(self, timeout=120):
        """SIGTERM; the exit status (None if it had not ended after `timeout` s and was killed)."""
        if self.process.poll() is not None:
            return self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            return None

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


async def post(session, url, sentences):
    """One translation request of `sentences`: `(seconds, error or None)`."""
    started = time.perf_counter()
    try:
        async with session.post(f"{url}/v1/translate", json={"sentences": sentences}) as response:
            body = await response.read()
            seconds = time.perf_counter() - started
            if response.status != 200:
                return seconds, f"status {response.status}: {body[:200].decode('utf-8', 'replace')}"
            results = json.loads(body).get("results")
            if not isinstance(results, list) or len(results) != len(sentences):
                return seconds, f"status 200 with {body[:200].decode('utf-8', 'replace')}"
            return seconds, None
    except Exception as error:  # a failed request, counted
        return time.perf_counter() - started, _timing.first_line(error)


async def load(url, sentences, clients, seconds=None):
    """`clients` clients sending one sentence per request, taken in turn from `sentences` (cycled), until `seconds`
    have passed; without `seconds`, until every sentence was sent once. Returns the run's figures."""
    import aiohttp

    queue = itertools.cycle(sentences) if seconds is not None else iter(sentences)
    latencies, errors = [], []
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        started = time.perf_counter()
        deadline = None if seconds is None else started + seconds

        async def client():
            for sentence in queue:
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                took, error = await post(session, url, [sentence])
                if error:
                    errors.append(error)
                else:
                    latencies.append(took)

        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return {
        "clients": clients,
        "seconds": round(elapsed, 3),
        "requests": len(latencies) + len(errors),
        "failed_requests": len(errors),
        "failures": sorted(set(errors))[:10],
        "latency_ms": milliseconds(latencies),
        "slow_requests": sum(took > SLOW_SECONDS for took in latencies),
        "sentences_per_second": round(len(latencies) / elapsed, 2),
    }


async def lone_client(url, sentences):
    """One client, one request at a time, one sentence each: the latencies and failures."""
    import aiohttp

    latencies, errors = [], []
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for sentence in sentences:
            took, error = await post(session, url, [sentence])
            if error:
                errors.append(error)
            else:
                latencies.append(took)
    return {
        "requests": len(sentences),
        "failed_requests": len(errors),
        "failures": sorted(set(errors))[:10],
        "latency_ms": milliseconds(latencies),
        "slow_requests": sum(took > SLOW_SECONDS for took in latencies),
    }


def bad_requests():
    """`[(name, body bytes)]`: requests a server must answer with a 4xx and a JSON error."""

    def dump(value):
        return json.dumps(value).encode("utf-8")

    return [
        ("not JSON", b"translate this, please"),
        ("a JSON array, not an object", dump(["Hello world"])),
        ("sentences: a string", dump({"sentences": "Hello world"})),
        ("sentences: numbers", dump({"sentences": [1, 2]})),
        ("sentences: null", dump({"sentences": None})),
        ("beam_size: a string", dump({"sentences": ["Hello world"], "beam_size": "4"})),
        ("an unknown field", dump({"sentences": ["Hello world"], "beam": 4})),
        ("sentences: an empty list", dump({"sentences": []})),
        ("10,000 sentences", dump({"sentences": ["Hello world"] * 10_000})),
        ("a 100 KB sentence", dump({"sentences": ["word " * 20_000]})),
        ("bytes that are not UTF-8", b'{"sentences": ["caf\xe9 \xff\xfe"]}'),
        ("beam_size 0", dump({"sentences": ["Hello world"], "beam_size": 0})),
        ("beam_size 1000", dump({"sentences": ["Hello world"], "beam_size": 1000})),
    ]


async def send_bad_requests(url):
    import aiohttp

    answers = []
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for name, body in bad_requests():
            answer = {"request": name, "bytes": len(body)}
            try:
                async with session.post(
                    f"{url}/v1/translate", data=body, headers={"Content-Type": "application/json"}
                ) as response:
                    answer["status"] = response.status
                    text = (await response.read()).decode("utf-8", "replace")
                try:
                    value = json.loads(text)
                except ValueError:
                    value = None
                error = value.get("error") if isinstance(value, dict) else None
                answer["error"] = error[:160] if isinstance(error, str) else None
                answer["ok"] = 400 <= response.status < 500 and isinstance(error, str) and set(value) == {"error"}
                if not answer["ok"]:
                    answer["body"] = text[:200]
            except Exception as error:  # no answer at all: counted as not handled
                answer.update(status=None, error=None, ok=False, body=_timing.first_line(error))
            answers.append(answer)
    return answers


def serve_and_measure(args, export, sentences, lone):
    server = Server(export, args.batch_wait_ms, args.max_batch_sentences, args.warm_up)
    result = {
        "command": " ".join(server.command[1:]),
        "listening_seconds": server.listening_seconds,
        "startup_seconds": server.startup_seconds,
        "server_warm_up_seconds": server.warm_up_seconds,
    }
    rss = {"started": server.rss()}
    try:
        print(f"server: up in {server.startup_seconds} s; warm-up ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        warmups = [asyncio.run(load(server.url, sentences, args.clients))]
        if args.warmup_seconds > 0:
            warmups.append(asyncio.run(load(server.url, sentences, args.clients, args.warmup_seconds)))
        warmups.append(asyncio.run(lone_client(server.url, lone)))
        result["warmup"] = {
            "seconds": round(time.monotonic() - started, 2),
            "requests": sum(w["requests"] for w in warmups),
            "failed_requests": sum(w["failed_requests"] for w in warmups),
            "failures": [failure for w in warmups for failure in w["failures"]],
            "slowest_ms": max(w["latency_ms"]["max"] or 0 for w in warmups),
        }
        rss["after_warmup"] = server.rss()
        print(f"server: {args.clients} clients for {args.seconds:g} s ...", file=sys.stderr, flush=True)
        result["load"] = asyncio.run(load(server.url, sentences, args.clients, args.seconds))
        rss["after_load"] = server.rss()
        print(f"server: one client, {len(lone)} requests ...", file=sys.stderr, flush=True)
        result["lone"] = asyncio.run(lone_client(server.url, lone))
        rss["after_lone"] = server.rss()
        print("server: bad requests ...", file=sys.stderr, flush=True)
        result["bad_requests"] = asyncio.run(send_bad_requests(server.url))
        rss["after_bad_requests"] = server.rss()
        status, body = get_health(server.url)
        result["health_after"] = {"status": status, "body": body}
        result["rss_mib"] = rss
        print("server: SIGTERM ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        result["exit_code"] = server.terminate()
        result["stop_seconds"] = round(time.monotonic() - started, 2)
        result["log_tail"] = server.tail(5)
    finally:
        server.stop()
        server.log.close()
    return result


def serve_ctranslate2_and_measure(args, sentences, lone):
    """The same untimed pass, timed load and lone client against the server's CTranslate2 engine."""
    server = Server(args.ctranslate2, args.batch_wait_ms, args.max_batch_sentences, engine="ctranslate2")
    try:
        print(f"server (ctranslate2): up in {server.startup_seconds} s; load ...", file=sys.stderr, flush=True)
        asyncio.run(load(server.url, sentences, args.clients))
        result = {"startup_seconds": server.startup_seconds, "rss_mib": {"started": server.rss()}}
        result["load"] = asyncio.run(load(server.url, sentences, args.clients, args.seconds))
        result["lone"] = asyncio.run(lone_client(server.url, lone))
        result["rss_mib"]["after_load"] = server.rss()
        result["exit_code"] = server.terminate()
    finally:
        server.stop()
        server.log.close()
    return result


# ---------------------------------------------------------------------------------------------------------------------
# The report.


def tensorflow_version():
    try:
        return importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def report(args, settings, offline_result, served, ctranslate2=None):
    load, lone = served["load"], served["lone"]
    direct = offline_result["lone_latency_ms"]
    throughput_ratio = load["sentences_per_second"] / offline_result["sentences_per_second"]
    latency_ratio = lone["latency_ms"]["p50"] / direct["p50"] if lone["latency_ms"]["p50"] and direct["p50"] else None
    bad = served["bad_requests"]
    checks = {
        "no_failed_requests": load["failed_requests"] == 0 and lone["failed_requests"] == 0,
        "bad_requests_answered_4xx_json": all(answer["ok"] for answer in bad),
        "health_after_bad_requests": served["health_after"]["status"] == 200,
        "exit_code_0": served["exit_code"] == 0,
    }
    ratios = {
        "throughput_server_over_offline": round(throughput_ratio, 3),
        "throughput_target": ">= 0.8",
        "throughput_met": throughput_ratio >= 0.8,
        "latency_lone_over_direct": None if latency_ratio is None else round(latency_ratio, 3),
        "latency_target": "<= 1.2",
        "latency_met": latency_ratio is not None and latency_ratio <= 1.2,
    }
    rss = served["rss_mib"]

    def met(ok):
        return "met" if ok else "NOT met"

    def passed(ok):
        return "ok" if ok else "FAILED"

    def ms(figures):
        return f"{figures['p50']} / {figures['p99']} / {figures['max']}"

    rows = [
        [
            f"offline `translate`, batches of {OFFLINE_BATCH}",
            f"{offline_result['sentences_per_second']:.1f} sentences/s",
            f"{offline_result['passes']} pass(es) of {settings['sentences']} sentences, "
            f"{offline_result['timed_seconds']:.1f} s",
        ],
        [
            "offline `translate`, 1 sentence: p50 / p99 / max ms",
            ms(direct),
            f"{offline_result['lone_calls']} calls",
        ],
        [
            f"server, {load['clients']} clients, 1 sentence a request",
            f"{load['sentences_per_second']:.1f} sentences/s",
            f"{load['requests']} requests in {load['seconds']:.1f} s, {load['failed_requests']} failed "
            f"({passed(load['failed_requests'] == 0)})",
        ],
        [
            f"server, {load['clients']} clients: p50 / p99 / max ms",
            ms(load["latency_ms"]),
            f"{load['slow_requests']} over {SLOW_SECONDS:g} s (most likely compiling a new shape)",
        ],
        [
            "server, 1 client: p50 / p99 / max ms",
            ms(lone["latency_ms"]),
            f"{lone['requests']} requests, {lone['failed_requests']} failed, {lone['slow_requests']} over "
            f"{SLOW_SECONDS:g} s",
        ],
        [
            "server / offline batch-64 throughput",
            f"{throughput_ratio:.2f}",
            f"target >= 0.8: {met(ratios['throughput_met'])}",
        ],
        [
            "lone request / direct call, p50 latency",
            "-" if latency_ratio is None else f"{latency_ratio:.2f}",
            f"target <= 1.2: {met(ratios['latency_met'])}",
        ],
        [
            "bad requests answered 4xx + JSON error",
            f"{sum(answer['ok'] for answer in bad)}/{len(bad)}",
            passed(checks["bad_requests_answered_4xx_json"]),
        ],
        [
            "GET /health after them",
            str(served["health_after"]["status"]),
            passed(checks["health_after_bad_requests"]),
        ],
        [
            "server VmRSS MiB",
            f"{rss['started']} → {rss['after_warmup']} → {rss['after_load']} → {rss['after_bad_requests']}",
            "started → after warm-up → after load → after bad requests",
        ],
        ["exit status on SIGTERM", str(served["exit_code"]), passed(checks["exit_code_0"])],
    ]
    if ctranslate2 is not None:
        checks["ctranslate2_no_failed_requests"] = ctranslate2["load"]["failed_requests"] == 0
        checks["ctranslate2_exit_code_0"] = ctranslate2["exit_code"] == 0
        rows += [
            [
                f"server, CTranslate2 engine, {ctranslate2['load']['clients']} clients",
                f"{ctranslate2['load']['sentences_per_second']:.1f} sentences/s",
                f"{ctranslate2['load']['requests']} requests, {ctranslate2['load']['failed_requests']} failed; "
                f"p50 / p99 / max {ms(ctranslate2['load']['latency_ms'])} ms",
            ],
            [
                "server, CTranslate2 engine, 1 client: p50 / p99 / max ms",
                ms(ctranslate2["lone"]["latency_ms"]),
                f"ready in {ctranslate2['startup_seconds']:.1f} s; VmRSS {ctranslate2['rss_mib']['started']} → "
                f"{ctranslate2['rss_mib']['after_load']} MiB; exit status {ctranslate2['exit_code']}",
            ],
        ]
    print()
    print(
        f"{settings['date']}, commit {settings['commit']}, {settings['cpu']}, TensorFlow {settings['tensorflow']}; "
        f"export {settings['export']}; {settings['sentences']} test sentences of software_en_fr (source side); "
        f"server --batch-wait-ms {args.batch_wait_ms:g} --max-batch-sentences {args.max_batch_sentences}"
        f"{f' --warm-up {args.warm_up}' if args.warm_up else ''}, listening in {served['listening_seconds']} s, "
        f"ready (GET /health 200) in {served['startup_seconds']:.1f} s (its warm-up: "
        f"{served['server_warm_up_seconds']} s), then {served['warmup']['seconds']:.1f} s of untimed load "
        f"({served['warmup']['requests']} requests, slowest {served['warmup']['slowest_ms']:.0f} ms)."
    )
    print()
    print("\n".join(_timing.markdown_table(["measurement", "value", "detail"], rows)))
    print()
    bad_rows = [
        [answer["request"], str(answer["status"]), (answer["error"] or answer.get("body") or "")[:90]] for answer in bad
    ]
    print("\n".join(_timing.markdown_table(["bad request", "status", "error"], bad_rows)))
    for name, ok in checks.items():
        if not ok:
            print(f"\nbench_http_server: check failed: {name}", file=sys.stderr)
    for failure in load["failures"] + lone["failures"]:
        print(f"bench_http_server: a failed request: {failure}", file=sys.stderr)
    return {"checks": checks, "ratios": ratios}


def main():
    args = parse()
    with tempfile.TemporaryDirectory(prefix="bench_http_server-") as scratch:
        if args.train_seconds is not None:
            export = train(args, Path(args.output_dir or scratch).resolve())
        else:
            export = Path(args.export).resolve()
        if not (export / "saved_model.pb").is_file():
            fail(f"{export}: expected a SavedModel (saved_model.pb) written by the translate recipe, found none")
        sentences = test_sentences(args.sentences)
        lone = [sentences[i % len(sentences)] for i in range(args.latency_requests)]
        settings = {
            "date": _timing.utc_now(),
            "commit": _timing.git_commit(),
            "cpu": f"{_timing.cpu_name()}, {os.cpu_count()} cores",
            "tensorflow": tensorflow_version(),
            "versions": _timing.versions(("tensorflow", "tensorflow-text", "aiohttp")),
            "export": str(export),
            "train_seconds": args.train_seconds,
            "corpus": "software_en_fr test, source side",
            "sentences": len(sentences),
            "clients": args.clients,
            "seconds": args.seconds,
            "batch_wait_ms": args.batch_wait_ms,
            "max_batch_sentences": args.max_batch_sentences,
            "latency_requests": args.latency_requests,
            "warmup_seconds": args.warmup_seconds,
            "server_warm_up": args.warm_up,
            "offline_seconds": args.offline_seconds,
        }
        offline_result = offline(export, sentences, lone, args.offline_seconds)
        served = serve_and_measure(args, export, sentences, lone)
        ctranslate2 = serve_ctranslate2_and_measure(args, sentences, lone) if args.ctranslate2 else None
    outcome = report(args, settings, offline_result, served, ctranslate2)
    record = {"settings": settings, "offline": offline_result, "server": served, "ctranslate2": ctranslate2, **outcome}
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    if not all(outcome["checks"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()

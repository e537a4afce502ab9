"""An HTTP server (aiohttp) for a keras_seq export, batching concurrent requests into few decoding calls.

    python -m recipes.serve EXPORT_DIR [--host 127.0.0.1] [--port 8080] [--batch-wait-ms 0]
        [--max-batch-sentences 64] [--max-request-sentences 256] [--max-sentence-chars 2000]
        [--engine {savedmodel,ctranslate2}] [--warm-up {full,beam,none}]

`--engine ctranslate2` serves a Transformer's CTranslate2 conversion (EXPORT_DIR: the folder
`translate --export-ctranslate2` writes) through the same translation route (`ctranslate2_engine`).

Routes, by the export's kind (a route of another kind answers 404):

- `POST /v1/translate` `{"sentences": [...], "beam_size", "n_best", "length_penalty", "min_length",
  "max_length", "no_repeat_ngram_size", "repetition_penalty", "disable_unk", "max_length_ratio",
  "sampling_topk", "sampling_topp", "sampling_temperature", "seed", "target_prefix": [one string per
  sentence]}` (options optional; see
  `engines.SavedModelTranslator` for what an export takes) ->
  `{"results": [{"translations": [{"text", "score", "log_prob"}, ...n_best]}, ...one per sentence]}`;
- `POST /v1/classify` `{"texts": [...]}` -> `{"results": [{"label", "probabilities"}, ...]}`;
- `POST /v1/tag` `{"sentences": [...]}` -> `{"results": [{"tags"}, ...]}`;
- `POST /v1/generate` `{"prompts": [...]}` -> `{"results": [{"text"}, ...]}`;
- `GET /health` -> `{"status": "ok", "kind", "signatures", "fields" (a request's), "warm_up": {"calls", "done"}}`;
  a 503 with `"status": "warming up"` until the warm-up has ended;
- `GET /` -> a web page (`page.html`) that sends the lines typed in it to the export's route and shows the results.

Every error is a JSON object `{"error": "..."}` of one line naming the field, what came
and what was expected: a 4xx for any bad request, a 500 only when the engine fails, and
then only for the requests of that engine call. Each request writes one access-log
line (method, path, status, sentences, milliseconds) to stderr. SIGTERM stops accepting
connections, lets the requests in flight finish (the batcher drains before the engine
goes), then the process exits with 0.

The server listens at once and warms up first (`--warm-up`, see
`engines.SavedModelTranslator.warm_up_calls`): one engine call per shape the export
compiles for, before any request's, so that no request waits for a compilation.
Requests that come meanwhile wait for it; `/health` answers 503 until it ends, so a
load balancer sends none.
"""

import argparse
import importlib.resources
import json
import logging
import sys
import time

from aiohttp import web

from keras_seq.serving import engines
from keras_seq.serving.batching import BatcherClosed, BatchFailed, RequestBatcher

PROGRAM = "serve"
ROUTES = ("translate", "classify", "tag", "generate")
access_logger = logging.getLogger("keras_seq.serving.access")
logger = logging.getLogger("keras_seq.serving")

ENGINE = web.AppKey("engine", object)
BATCHER = web.AppKey("batcher", RequestBatcher)
LIMITS = web.AppKey("limits", dict)
# The command line's warm-up scope: a request without beam_size (the page's, most clients') compiles nothing.
WARM_UP = "beam"
# The request's sentence count, for the access log (aiohttp before 3.14 has no RequestKey: a string key there).
SENTENCES = web.RequestKey("sentences", int) if hasattr(web, "RequestKey") else "sentences"


def body_size_cap(max_request_sentences, max_sentence_chars):
    """The most bytes a valid request can take: each character written as a JSON escape of a surrogate pair
    (12 bytes), plus the quotes and commas, plus room for the options."""
    return max_request_sentences * (max_sentence_chars * 12 + 4) + 4096


def make_app(
    engine,
    batch_wait_ms=0.0,
    max_batch_sentences=64,
    max_request_sentences=256,
    max_sentence_chars=2000,
    max_body_bytes=None,
    warm_up="none",
):
    """The aiohttp application serving `engine` (see `engines`), its batcher started with the app and drained at
    its cleanup. `max_body_bytes`: the body size cap, by default `body_size_cap` of the two limits. `warm_up`:
    the scope of `engine.warm_up_calls` (asked for unless "none") that the batcher runs first: "full", "beam"
    or "none"."""
    if max_body_bytes is None:
        max_body_bytes = body_size_cap(max_request_sentences, max_sentence_chars)
    app = web.Application(client_max_size=max_body_bytes, middlewares=[_errors_as_json_and_access_log])
    app[ENGINE] = engine
    app[LIMITS] = dict(
        max_request_sentences=max_request_sentences,
        max_sentence_chars=max_sentence_chars,
        max_body_bytes=max_body_bytes,
    )

    async def batcher_context(app):
        calls = [] if warm_up == "none" else engine.warm_up_calls(max_batch_sentences, warm_up)
        batcher = RequestBatcher(engine.run, batch_wait_ms / 1000.0, max_batch_sentences, warm_up=calls)
        batcher.start()
        app[BATCHER] = batcher
        yield
        await batcher.close()  # after aiohttp has let the handlers in flight finish

    app.cleanup_ctx.append(batcher_context)
    app.router.add_get("/", _page_handler())
    app.router.add_get("/health", _health)
    for route in ROUTES:
        app.router.add_post(f"/v1/{route}", _decode_handler(route))
    return app


def _error(status, message):
    return web.Response(
        status=status,
        text=json.dumps({"error": " ".join(str(message).split())}, ensure_ascii=False),
        content_type="application/json",
    )


def _json(value):
    return web.Response(text=json.dumps(value, ensure_ascii=False), content_type="application/json")


@web.middleware
async def _errors_as_json_and_access_log(request, handler):
    """Answer every error as a one-line JSON object and log one line per request."""
    started = time.perf_counter()
    try:
        response = await handler(request)
    except engines.RequestError as error:
        response = _error(error.status, error)
    except web.HTTPRequestEntityTooLarge:
        cap = request.app[LIMITS]["max_body_bytes"]
        response = _error(413, f"body: got more than {cap} bytes, expected at most {cap}")
    except web.HTTPMethodNotAllowed as error:
        allowed = ", ".join(sorted(error.allowed_methods))
        response = _error(405, f"method: got {request.method} for {request.path}, expected {allowed}")
    except web.HTTPNotFound:
        expected = ", ".join(["GET /", "GET /health", *(f"POST /v1/{route}" for route in ROUTES)])
        response = _error(404, f"path: got {request.method} {request.path}, expected one of {expected}")
    except web.HTTPException as error:
        if error.status < 400:
            raise
        response = _error(error.status, error.reason)
    except Exception as error:  # a fault of the server, not of the request
        logger.exception("%s %s failed", request.method, request.path)
        response = _error(500, f"internal error: {type(error).__name__}: {error}")
    access_logger.info(
        "%s %s %d sentences=%s %.1fms",
        request.method,
        request.path,
        response.status,
        request.get(SENTENCES, "-"),
        (time.perf_counter() - started) * 1000,
    )
    return response


# The page may run its own inline script and style and talk to this server only: nothing from elsewhere loads.
PAGE_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _page_handler():
    """The handler of `GET /`: the page, read from the package once, when the app is made."""
    page = importlib.resources.files("keras_seq.serving").joinpath("page.html").read_text(encoding="utf-8")

    async def get_page(request):
        return web.Response(
            text=page, content_type="text/html", charset="utf-8", headers={"Content-Security-Policy": PAGE_POLICY}
        )

    return get_page


async def _health(request):
    """The export's kind, signatures and request fields, and the warm-up's progress: a 503 until it has ended."""
    engine, batcher = request.app[ENGINE], request.app[BATCHER]
    response = _json(
        {
            "status": "warming up" if batcher.warming else "ok",
            "kind": engine.kind,
            "signatures": list(engine.signatures),
            "fields": [engine.input_field, *engine.option_fields, *engine.per_sentence_fields],
            "warm_up": {"calls": len(batcher.warm_up), "done": batcher.warmed},
        }
    )
    response.set_status(503 if batcher.warming else 200)
    return response


def _decode_handler(route):
    async def handle(request):
        engine = request.app[ENGINE]
        if route != engine.route:
            raise engines.RequestError(
                f"path: this server serves a {engine.kind} export, which answers POST /v1/{engine.route}, "
                f"not POST /v1/{route}",
                status=404,
            )
        fields = await _json_object(request)
        known = [engine.input_field, *engine.option_fields, *engine.per_sentence_fields]
        unknown = sorted(set(fields) - set(known))
        if unknown:
            raise engines.RequestError(f"unknown fields: {', '.join(unknown)}; expected some of {', '.join(known)}")
        strings = _strings(engine.input_field, fields.get(engine.input_field), request.app[LIMITS])
        if fields.get("target_prefix") is not None:
            strings = _with_prefixes(strings, fields["target_prefix"], request.app[LIMITS])
        request[SENTENCES] = len(strings)
        options = engine.parse_options({name: fields[name] for name in engine.option_fields if name in fields})
        try:
            results = await request.app[BATCHER].submit(strings, options)
        except BatchFailed as error:
            return _error(500, f"engine: the decoding call holding this request failed: {error}")
        except BatcherClosed as error:
            return _error(503, f"server: {error}")
        return _json({"results": results})

    handle.__name__ = f"post_{route}"
    return handle


def _reject_constant(name):
    raise engines.RequestError(f"body: expected JSON, got {name}, which JSON does not have")


async def _json_object(request):
    """The request's body as a JSON object, else a `RequestError` saying what came."""
    body = await request.read()  # over client_max_size: HTTPRequestEntityTooLarge
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise engines.RequestError(
            f"body: expected UTF-8 JSON, got byte 0x{body[error.start]:02x} at byte {error.start}, which is not UTF-8"
        ) from None
    if not text.strip():
        raise engines.RequestError("body: expected a JSON object, got an empty body")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise engines.RequestError(f"body: expected a JSON object, got invalid JSON ({error.msg} at {where})") from None
    except RecursionError:
        raise engines.RequestError("body: expected a JSON object, got one nested too deeply to read") from None
    if not isinstance(value, dict):
        raise engines.RequestError(f"body: expected a JSON object, got {_json_type(value)}")
    return value


def _json_type(value):
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _with_prefixes(sentences, prefixes, limits):
    """`sentences` as `engines.Sentence`s with their `target_prefix` field: one string per sentence."""
    prefixes = _strings("target_prefix", prefixes, limits)
    if len(prefixes) != len(sentences):
        raise engines.RequestError(
            f"target_prefix: expected one string per sentence ({len(sentences)}), got {len(prefixes)}"
        )
    return [engines.Sentence(sentence, prefix) for sentence, prefix in zip(sentences, prefixes)]


def _strings(field, value, limits):
    """The request's list of strings `value`, checked against the server's limits."""
    most, longest = limits["max_request_sentences"], limits["max_sentence_chars"]
    expected = f"a list of 1 to {most} strings"
    if value is None:
        raise engines.RequestError(f"{field}: expected {expected}, got none")
    if not isinstance(value, list):
        raise engines.RequestError(f"{field}: expected {expected}, got {_json_type(value)}")
    if not value or len(value) > most:
        got = "an empty list" if not value else f"{len(value)} strings"
        raise engines.RequestError(f"{field}: expected {expected}, got {got}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise engines.RequestError(f"{field}[{index}]: expected a string, got {_json_type(item)}")
        if len(item) > longest:
            raise engines.RequestError(f"{field}[{index}]: expected at most {longest} characters, got {len(item)}")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError as error:  # JSON's \ud800 escapes decode to lone surrogates
            raise engines.RequestError(
                f"{field}[{index}]: expected Unicode text, got a lone surrogate at character {error.start}"
            ) from None
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """Bad command-line input: one `error:` line, exit status 2."""
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def _bounded(kind, low, high, expected):
    """An argparse type: the command-line text as `kind` in [low, high], else an error saying `expected`."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_positive_int = _bounded(int, 1, float("inf"), "a positive integer")
_milliseconds = _bounded(float, 0.0, 1e9, "a number of milliseconds >= 0")
_port = _bounded(int, 0, 65535, "a port in [0, 65535]")


def parser():
    p = _Parser(prog=PROGRAM, description="Serve a keras_seq export over HTTP, batching concurrent requests.")
    p.add_argument("export_dir", metavar="EXPORT_DIR", help="a SavedModel written by keras_seq.export")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, default=8080)
    p.add_argument(
        "--batch-wait-ms",
        type=_milliseconds,
        default=0.0,
        help="how long a request waits for others to join its batch (default 0: the requests that came while "
        "the engine was busy form the next batch, and a lone request goes at once)",
    )
    p.add_argument("--max-batch-sentences", type=_positive_int, default=64, help="sentences per engine call")
    p.add_argument("--max-request-sentences", type=_positive_int, default=256, help="sentences per request")
    p.add_argument("--max-sentence-chars", type=_positive_int, default=2000, help="characters per sentence")
    p.add_argument("--engine", choices=("savedmodel", "ctranslate2"), default="savedmodel")
    p.add_argument(
        "--warm-up",
        choices=("full", "beam", "none"),
        default=WARM_UP,
        help=f"compile before the first request the shapes translation requests meet, for beam sizes 1 and the "
        f"export's (full) or the export's only (beam), or none (default {WARM_UP}); /health answers 503 meanwhile",
    )
    return p


def main(argv=None):
    """Serve until SIGTERM or Ctrl-C (exit status 0); bad command-line input: one `error:` line, status 2."""
    args = parser().parse_args(argv)
    try:
        if args.engine == "ctranslate2":
            from keras_seq.serving import ctranslate2_engine

            ctranslate2_engine.check_folder(args.export_dir)
        else:
            engines.check_savedmodel_dir(args.export_dir)
    except ValueError as error:
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    try:
        if args.engine == "ctranslate2":
            engine = ctranslate2_engine.CTranslate2Translator(args.export_dir)
        else:
            engine = engines.load_savedmodel(args.export_dir)
    except Exception as error:  # a folder that looked like a SavedModel but does not load as an export
        first_line = (str(error).strip().splitlines() or [""])[0]
        print(
            f"{PROGRAM}: error: EXPORT_DIR {args.export_dir!r}: {type(error).__name__}: {first_line}", file=sys.stderr
        )
        return 2
    app = make_app(
        engine,
        batch_wait_ms=args.batch_wait_ms,
        max_batch_sentences=args.max_batch_sentences,
        max_request_sentences=args.max_request_sentences,
        max_sentence_chars=args.max_sentence_chars,
        warm_up=args.warm_up,
    )
    logger.info("serving the %s export %s on http://%s:%d", engine.kind, args.export_dir, args.host, args.port)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)
    logger.info("stopped")
    return 0

"""The engines a server runs: a keras_seq export (a TensorFlow SavedModel) or a CTranslate2 conversion.

An engine turns a request's options into a hashable key (`parse_options`,
raising `RequestError` for values it cannot take) and decodes a list of strings
with one key (`run`, blocking, called on the batcher's worker thread). Only
TensorFlow (and tensorflow-text, for subword vocabularies) is needed to serve an
export, as `keras_seq.export` promises.
"""

import dataclasses
import inspect
import json
import math
import os

import numpy as np

from keras_seq import _validation as v
from keras_seq import export

# The signature each export kind is found by -> (kind, route, the request's field holding its strings).
KINDS = {
    "translate": ("translate", "translate", "sentences"),
    "classify": ("classify", "classify", "texts"),
    "tag": ("tag", "tag", "sentences"),
    "generate": ("lm", "generate", "prompts"),
}
# The largest length penalty taken: beyond it the length term swamps the log probabilities it ranks.
MAX_LENGTH_PENALTY = 10.0
# The largest max_length_ratio taken: a translation 100 times its source's length is no limit at all.
MAX_LENGTH_RATIO = 100.0
# The largest sampling temperature taken: past it every id is all but equally likely.
MAX_TEMPERATURE = 100.0
# Decimals of the alignment weights in a response: a picture's shade needs no more, and the JSON stays short.
ALIGNMENT_DECIMALS = 4


class RequestError(ValueError):
    """A request the engine cannot take: answered with `status` and the message, never a 500."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


def _integer(name, value, low, high):
    """`value`, an integer in [low, high], else a `RequestError` naming `name`, what came and what was expected."""
    if not v.is_integer(value) or not low <= value <= high:
        raise RequestError(f"{name}: expected an integer in [{low}, {high}], got {_shown(value)}")
    return value


def _boolean(name, value):
    """`value`, a JSON boolean, else a `RequestError` naming `name`."""
    if not isinstance(value, bool):
        raise RequestError(f"{name}: expected true or false, got {_shown(value)}")
    return value


def _number(name, value, low, high):
    """`value`, a finite number in [low, high] as a float, else a `RequestError` naming `name`."""
    try:
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:  # an integer past float's range
        finite = False
    if not finite:
        raise RequestError(f"{name}: expected a number in [{low}, {high}], got {_shown(value)}")
    if not low <= value <= high:
        raise RequestError(f"{name}: expected a number in [{low}, {high}], got {_shown(value)}")
    return float(value)


def _shown(value, limit=60):
    """`value` as JSON would show it, cut to `limit` characters (an error message is one short line)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(value):
    """A string tensor's element as text (bytes that are not UTF-8 shown as U+FFFD)."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


# Below it a score is the decoding's stand-in for minus infinity (`decoding._NEG_INF`, -1e9): no hypothesis.
_NO_HYPOTHESIS = -1e8


def _score_or_none(value):
    """A score as JSON gives it: null for none (a beam that never lived, or not a finite number)."""
    value = float(value)
    return value if math.isfinite(value) and value > _NO_HYPOTHESIS else None


def _argument_names(loaded, signature):
    """The argument names of a loaded export's `signature` (of its method, for an object that is no SavedModel)."""
    signatures = getattr(loaded, "signatures", None)
    if signatures is not None:
        return set(signatures[signature].structured_input_signature[1])
    return set(inspect.signature(getattr(loaded, signature)).parameters)


class Sentence(str):
    """A sentence to translate, whose translation must begin with `target_prefix` ("" for none): a request's
    per-sentence field rides on its sentence through the batcher."""

    def __new__(cls, sentence, target_prefix=""):
        made = super().__new__(cls, sentence)
        made.target_prefix = target_prefix
        return made


@dataclasses.dataclass(frozen=True)
class TranslateOptions:
    """The decoding options of a translation request, as the engine takes them (None: the export's own)."""

    beam_size: int = None
    n_best: int = 1
    length_penalty: float = None
    min_length: int = None
    max_length: int = None
    no_repeat_ngram_size: int = export.NEUTRAL_OPTIONS["no_repeat_ngram_size"]
    repetition_penalty: float = export.NEUTRAL_OPTIONS["repetition_penalty"]
    disable_unk: bool = export.NEUTRAL_OPTIONS["disable_unk"]
    max_length_ratio: float = export.NEUTRAL_OPTIONS["max_length_ratio"]
    sampling_topk: int = export.NEUTRAL_OPTIONS["sampling_topk"]
    sampling_topp: float = export.NEUTRAL_OPTIONS["sampling_topp"]
    sampling_temperature: float = export.NEUTRAL_OPTIONS["sampling_temperature"]
    seed: int = export.NEUTRAL_OPTIONS["seed"]
    return_alignment: bool = export.NEUTRAL_OPTIONS["return_alignment"]


class SavedModelEngine:
    """A loaded export with one signature: `kind`, the `route` it answers and its request's `input_field`."""

    option_fields = ()
    per_sentence_fields = ()  # request fields with one entry per sentence

    def __init__(self, loaded, signature):
        self.loaded = loaded
        self.kind, self.route, self.input_field = KINDS[signature]
        self.function = getattr(loaded, signature)

    @property
    def signatures(self):
        """The export's signature names (its functions, for an object without SavedModel signatures)."""
        signatures = getattr(self.loaded, "signatures", None)
        if signatures is not None:
            return sorted(signatures.keys())
        return sorted(name for name in (*KINDS, "translate_greedy", "translate_options") if hasattr(self.loaded, name))

    def parse_options(self, fields):
        """The key of requests decoded together: these kinds take no options."""
        return None

    def warm_up_calls(self, max_batch_sentences, scope="full"):
        """The `(strings, key)` calls a server makes before its first request: none for these kinds."""
        return []

    def _call(self, function, strings, *arguments):
        import tensorflow as tf

        return function(tf.constant(strings, tf.string), *arguments)

    def run(self, strings, options):
        outputs = self._call(self.function, strings)
        if self.kind == "classify":
            labels, probabilities = outputs["label"].numpy(), outputs["probabilities"].numpy()
            return [
                {"label": _text(label), "probabilities": [float(p) for p in row]}
                for label, row in zip(labels, probabilities)
            ]
        field = {"tag": "tags", "lm": "text"}[self.kind]
        return [{field: _text(value)} for value in outputs.numpy()]


class TranslationEngineMixin:
    """What a translation engine reads from a request: its options checked against the engine's `beam_sizes`,
    `max_length` and `num_beams` / `length_penalty` (the defaults), as `TranslateOptions`; and its results."""

    kind, route, input_field = KINDS["translate"]
    per_sentence_fields = ("target_prefix",)
    shortest_max_length = 1  # the start id alone
    aligns = True  # whether the model has attention to return alignments from

    def parse_options(self, fields):
        """`fields` (the request's option fields, absent ones left out; null: the default) as `TranslateOptions`."""
        fields = {**export.NEUTRAL_OPTIONS, **{name: value for name, value in fields.items() if value is not None}}
        sampling = fields["sampling_topk"] != 1  # a sample is drawn by a search of one beam
        beam_size = fields.get("beam_size", 1 if sampling else self.num_beams)
        if not v.is_integer(beam_size) or beam_size not in self.beam_sizes:
            raise RequestError(f"beam_size: expected {self.beam_sizes_expected}, got {_shown(beam_size)}")
        n_best = _integer("n_best", fields.get("n_best", 1), 1, beam_size)
        length_penalty = _number(
            "length_penalty", fields.get("length_penalty", self.length_penalty), 0.0, MAX_LENGTH_PENALTY
        )
        length_penalty = float(np.float32(length_penalty))  # the value decoded with: one key for 0.6 and the export's
        max_length = _integer(
            "max_length", fields.get("max_length", self.max_length), self.shortest_max_length, self.max_length
        )
        min_length = _integer("min_length", fields.get("min_length", 0), 0, max_length)
        no_repeat = _integer("no_repeat_ngram_size", fields["no_repeat_ngram_size"], 0, max_length)
        penalty = _number("repetition_penalty", fields["repetition_penalty"], 0.0, export.MAX_REPETITION_PENALTY)
        if penalty <= 0:
            raise RequestError(f"repetition_penalty: expected a number > 0, got {_shown(penalty)}")
        disable_unk, return_alignment = (_boolean(name, fields[name]) for name in ("disable_unk", "return_alignment"))
        if return_alignment and not self.aligns:
            raise RequestError("return_alignment: expected false (this export's model has no attention to align with)")
        penalty = float(np.float32(penalty))
        ratio = _number("max_length_ratio", fields["max_length_ratio"], 0.0, MAX_LENGTH_RATIO)
        # (an engine without a field never sees it: the server answers a field it lacks with a 400)
        ratio = float(np.float32(ratio))
        return TranslateOptions(
            beam_size,
            n_best,
            length_penalty,
            min_length,
            max_length,
            no_repeat,
            penalty,
            disable_unk,
            ratio,
            **self._parse_sampling(fields, beam_size),
            return_alignment=return_alignment,
        )

    def _parse_sampling(self, fields, beam_size):
        """The sampling fields of a request: `sampling_topk` 1 (no sampling), 0 (every id) or k; `sampling_topp` in
        (0, 1]; `sampling_temperature` > 0; `seed` an int32 (the same sentence and seed draw the same sample)."""
        topk = _integer("sampling_topk", fields["sampling_topk"], 0, 2**31 - 1)
        if topk != 1 and beam_size != 1:
            raise RequestError(f"sampling_topk: expected 1 with beam_size {beam_size} (sampling takes beam_size 1)")
        topp = _number("sampling_topp", fields["sampling_topp"], 0.0, 1.0)
        if topp <= 0:
            raise RequestError(f"sampling_topp: expected a number in (0, 1], got {_shown(topp)}")
        temperature = _number("sampling_temperature", fields["sampling_temperature"], 0.0, MAX_TEMPERATURE)
        if temperature <= 0:
            raise RequestError(f"sampling_temperature: expected a number > 0, got {_shown(temperature)}")
        seed = _integer("seed", fields["seed"], -(2**31), 2**31 - 1)
        return dict(
            sampling_topk=topk,
            sampling_topp=float(np.float32(topp)),
            sampling_temperature=float(np.float32(temperature)),
            seed=seed,
        )

    @staticmethod
    def results(texts, scores, log_probs, n_best, alignments=None):
        """The response's results: per sentence, its `n_best` translations with their scores (None: no hypothesis);
        with `alignments` (per sentence `(source tokens, [(target tokens, weights (T, S)), ...])`, as `aligned`
        gives them), each sentence's "source_tokens" and each translation's "target_tokens" and "alignment", one
        list per target token of its weights over the source tokens."""
        results = [
            {
                "translations": [
                    {"text": _text(text), "score": _score_or_none(score), "log_prob": _score_or_none(log_prob)}
                    for text, score, log_prob in zip(texts[row], scores[row], log_probs[row])
                ][:n_best]
            }
            for row in range(len(texts))
        ]
        for result, (source_tokens, hypotheses) in zip(results, alignments or ()):
            result["source_tokens"] = source_tokens
            for translation, (target_tokens, weights) in zip(result["translations"], hypotheses):
                translation["target_tokens"] = target_tokens
                translation["alignment"] = np.round(np.asarray(weights, np.float64), ALIGNMENT_DECIMALS).tolist()
        return results

    @staticmethod
    def aligned(source_tokens, target_tokens, weights):
        """Per sentence `(source tokens, [(target tokens, weights (T, S)), ...])` of token texts (padding: empty)
        and weights `(n, T or more, S or more)`, each trimmed to its tokens."""
        sentences = []
        for sources, targets, sentence_weights in zip(source_tokens, target_tokens, weights):
            sources = [_text(token) for token in sources if len(token)]
            hypotheses = []
            for tokens, hypothesis_weights in zip(targets, sentence_weights):
                tokens = [_text(token) for token in tokens if len(token)]
                hypotheses.append((tokens, np.asarray(hypothesis_weights)[: len(tokens), : len(sources)]))
            sentences.append((sources, hypotheses))
        return sentences


class SavedModelTranslator(TranslationEngineMixin, SavedModelEngine):
    """A translator export, decoded with each request's options by its `translate_options` signature.

    `translate_options(sentences, *export.RUNTIME_OPTIONS)` returns `{"translations", "scores", "log_probs"}`,
    each `(B, n_best)` (`keras_seq.export.export_translator`); the export also holds
    `num_beams`, `max_length` and `length_penalty`, the beam count and longest
    translation it was compiled for and its own penalty, which the requests are
    checked against and default to. An export written before an option existed
    lacks it: `arguments` are the options its signature takes, `option_fields` those a request may set (less
    `return_alignment` for a model without attention).
    """

    def __init__(self, loaded):
        if not hasattr(loaded, "translate_options"):
            raise ValueError(
                "the translator export has no translate_options signature (an older keras_seq wrote it): "
                "export its run again (python -m keras_seq.export RUN_DIR)"
            )
        super().__init__(loaded, "translate")
        taken = _argument_names(loaded, "translate_options")
        signatures = getattr(loaded, "signatures", None)  # (None: a stand-in object, which aligns nothing)
        self.aligns = signatures is not None and "alignments" in signatures["translate_options"].structured_outputs
        self.arguments = tuple(name for name, _ in export.RUNTIME_OPTIONS if name in taken)  # in the call's order
        # A model without attention is not offered return_alignment (the page asks for it where it is offered).
        self.option_fields = tuple(name for name in self.arguments if self.aligns or name != "return_alignment")
        self.per_sentence_fields = ("target_prefix",) if "target_prefix" in taken else ()
        self.num_beams = int(loaded.num_beams.numpy())
        self.beam_sizes = sorted({1, self.num_beams})
        self.beam_sizes_expected = f"{' or '.join(map(str, self.beam_sizes))} (this export's beam searches)"
        self.max_length = int(loaded.max_length.numpy())
        self.length_penalty = float(loaded.length_penalty.numpy())

    def warm_up_calls(self, max_batch_sentences, scope="full"):
        """The `(sentences, options)` calls that compile, before any request, each XLA program a request of at most
        `max_batch_sentences` sentences meets: one call per row count (`warm_up_batch_sizes`), padded source width
        and search (`scope` "full": the export's beam size, greedy search and, where the export takes it,
        sampling; "beam": the export's beam size, what a request without `beam_size` gets; "none": no call), each
        decoding to `max_length` so that every cache window compiles.

        Why: the export compiles each shape at its first call, seconds that would fall on a request. The widths
        come from sentences of 16, 32, ... times the word "the" (one id in a word vocabulary or an English
        SentencePiece one) up to `max_length`, which the recipes also cut sources to (the export keeps no source
        length). Still compiled at first use: the beam search's program for one sentence left beside ended
        ones (each width and cache window), and the widths of an export whose sources exceed `max_length`.
        """
        searches = {"full": sorted({self.num_beams, 1}, reverse=True), "beam": [self.num_beams], "none": []}[scope]
        searches = [{"beam_size": beam} for beam in searches]
        if scope == "full" and "sampling_topk" in self.option_fields:
            searches.append({"beam_size": 1, "sampling_topk": 0})
        words = range(16, self.max_length + 16, 16)
        longest = dict(
            n_best=1, length_penalty=self.length_penalty, min_length=self.max_length, max_length=self.max_length
        )
        return [
            ([" ".join(["the"] * count)] * size, TranslateOptions(**search, **longest))
            for search in searches
            for count in words
            for size in warm_up_batch_sizes(max_batch_sentences)
        ]

    def run(self, sentences, options):
        import tensorflow as tf

        arguments = (
            tf.constant(getattr(options, name), dtype)
            for name, dtype in export.RUNTIME_OPTIONS
            if name in self.arguments
        )
        if self.per_sentence_fields:
            arguments = (*arguments, tf.constant([getattr(s, "target_prefix", "") for s in sentences], tf.string))
        outputs = self._call(self.loaded.translate_options, sentences, *arguments)
        texts, scores, log_probs = (outputs[name].numpy() for name in ("translations", "scores", "log_probs"))
        alignments = None
        if options.return_alignment:
            alignments = self.aligned(
                *(outputs[name].numpy() for name in ("source_tokens", "target_tokens", "alignments"))
            )
        return self.results(texts, scores, log_probs, options.n_best, alignments)


def warm_up_batch_sizes(max_batch_sentences):
    """The fewest call sizes (sentences) that meet every row count a call of 1 to `max_batch_sentences` meets, the
    smallest for each (the export's row ladder and its parts, see `export._few_shapes` and `export.PARTS`)."""
    sizes, met = [], set()
    for sentences in range(1, max_batch_sentences + 1):
        if not export.row_counts_of_call(sentences) <= met:
            sizes.append(sentences)
            met |= export.row_counts_of_call(sentences)
    return sizes


def engine_for(loaded):
    """The engine of a loaded export, by the signature it has: translate, classify, tag or generate."""
    if hasattr(loaded, "translate"):
        return SavedModelTranslator(loaded)
    for signature in ("classify", "tag", "generate"):
        if hasattr(loaded, signature):
            return SavedModelEngine(loaded, signature)
    raise ValueError(f"the SavedModel has none of the signatures {', '.join(KINDS)}: not a keras_seq export")


def load_savedmodel(path):
    """The engine of the keras_seq export at `path` (tensorflow-text imported first, if installed, for its ops)."""
    import tensorflow as tf

    try:
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops a subword export uses)
    except ImportError:
        pass
    return engine_for(tf.saved_model.load(path))


def check_savedmodel_dir(path):
    """A `ValueError` (one line) unless `path` is a folder holding a SavedModel."""
    if not os.path.isdir(path):
        raise ValueError(f"EXPORT_DIR: expected a folder holding a keras_seq export, got {path!r}, which is not one")
    if not any(os.path.isfile(os.path.join(path, name)) for name in ("saved_model.pb", "saved_model.pbtxt")):
        raise ValueError(f"EXPORT_DIR: expected a TensorFlow SavedModel (saved_model.pb) in {path!r}, found none")

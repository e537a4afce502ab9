"""The CTranslate2 engine: a Transformer's CTranslate2 conversion served through the translation API.

`python -m recipes.serve RUN/ctranslate2 --engine ctranslate2` serves the folder that
`translate --model transformer --export-ctranslate2` writes (`keras_seq.ctranslate2.export_ctranslate2`,
a SentencePiece vocabulary): the requests and answers of a SavedModel export's translator
(`engines.TranslationEngineMixin`), decoded by CTranslate2's `Translator.translate_batch`, whose
options bear the same names. Why: CTranslate2 has no server of its own, and one API lets a
user move between the two engines with no change on the client side.

Where the engines differ, each answer says what CTranslate2 computes:
- `score` is CTranslate2's, `log P / length ** length_penalty` (Wu et al., 2016 normalise by
  GNMT's `((5 + length) / 6) ** alpha` instead), `log_prob` its `log P`: the log probability of the
  tokens it decoded and of its end token (none at `max_length`), a target prefix's given tokens
  counting 0 (but counted in the length), under the decoding's logits;
- `max_length` is at least 2 (CTranslate2 decodes at least one token);
- any beam size from 1 to `MAX_BEAM_SIZE` (CTranslate2 compiles no program per size);
- `max_length_ratio` is not taken (CTranslate2 bounds lengths in tokens only), nor `seed`: a sample
  is drawn by CTranslate2's own generator, which a call cannot seed (its worker threads keep theirs).
"""

import json
import os

from keras_seq.ctranslate2 import SERVING_FILE
from keras_seq.data import placeholders
from keras_seq.serving import engines

# The largest beam asked for: past it a beam search costs more than any gain it brings a translation.
MAX_BEAM_SIZE = 16
# The request fields CTranslate2 takes (`engines.TranslateOptions` less those it has no counterpart of).
OPTION_FIELDS = tuple(
    name for name in engines.TranslateOptions.__dataclass_fields__ if name not in ("max_length_ratio", "seed")
)


def check_folder(path):
    """A one-line `ValueError` unless `path` holds a CTranslate2 conversion keras_seq wrote, with its tokenizer."""
    if not os.path.isfile(os.path.join(path, "model.bin")):
        raise ValueError(
            f"EXPORT_DIR: expected a CTranslate2 model folder (model.bin) for --engine ctranslate2, got {path!r}"
        )
    if not os.path.isfile(os.path.join(path, SERVING_FILE)):
        raise ValueError(
            f"EXPORT_DIR: expected {SERVING_FILE} in {path!r} (written by keras_seq's export_ctranslate2: "
            "convert the run again with translate --export-ctranslate2)"
        )
    if not any(os.path.isfile(os.path.join(path, f"{name}.model")) for name in ("sentencepiece", "source")):
        raise ValueError(
            f"EXPORT_DIR: expected a SentencePiece model (sentencepiece.model, or source.model and target.model) in "
            f"{path!r}: this engine tokenizes with SentencePiece, and the conversion has a word vocabulary"
        )


class CTranslate2Translator(engines.TranslationEngineMixin):
    """A CTranslate2 conversion decoding translation requests (see the module docstring)."""

    option_fields = OPTION_FIELDS
    beam_sizes = range(1, MAX_BEAM_SIZE + 1)
    beam_sizes_expected = f"an integer in [1, {MAX_BEAM_SIZE}]"
    signatures = ("ctranslate2",)
    shortest_max_length = 2  # the start id and one token

    def __init__(self, path, threads=0):
        import ctranslate2
        import sentencepiece

        check_folder(path)
        with open(os.path.join(path, SERVING_FILE), encoding="utf-8") as f:
            settings = json.load(f)
        self.num_beams = min(settings["num_beams"], MAX_BEAM_SIZE)
        self.length_penalty = min(settings["length_penalty"], engines.MAX_LENGTH_PENALTY)
        self.source_length, self.max_length = settings["source_length"], settings["max_length"]
        self.lowercase = {"source": settings["source_lowercase"], "target": settings["target_lowercase"]}
        self.placeholders = settings.get("placeholders", False)
        shared = os.path.join(path, "sentencepiece.model")
        self.source, self.target = (
            sentencepiece.SentencePieceProcessor(
                model_file=shared if os.path.isfile(shared) else os.path.join(path, f"{side}.model")
            )
            for side in ("source", "target")
        )
        self.translator = ctranslate2.Translator(path, device="cpu", intra_threads=threads)

    def warm_up_calls(self, max_batch_sentences, scope="full"):
        """None: CTranslate2 compiles nothing at a first call."""
        return []

    def _tokens(self, texts, side):
        """The SentencePiece pieces of `texts` on `side` ("source" or "target"), lowercased where it is."""
        texts = [t.lower() for t in texts] if self.lowercase[side] else list(texts)
        return getattr(self, side).encode(texts, out_type=str)

    @staticmethod
    def _scored_length(tokens, options):
        """The length CTranslate2 normalises a hypothesis' score by: its tokens, and its end token unless the
        decoding stopped at `max_length` without one."""
        return len(tokens) + (len(tokens) < options.max_length - 1)

    def run(self, sentences, options):
        prefixes = [getattr(s, "target_prefix", "") for s in sentences]
        arguments = dict(
            target_prefix=[tokens or None for tokens in self._tokens(prefixes, "target")] if any(prefixes) else None,
            beam_size=options.beam_size,
            num_hypotheses=options.n_best,
            length_penalty=options.length_penalty,
            min_decoding_length=max(options.min_length - 1, 0),  # keras_seq's min_length counts the start id
            max_decoding_length=options.max_length - 1,  # keras_seq's max_length counts the start id
            max_input_length=self.source_length,  # the model's positions
            no_repeat_ngram_size=options.no_repeat_ngram_size,
            repetition_penalty=options.repetition_penalty,
            disable_unk=options.disable_unk,
            # CTranslate2 refuses a k past the vocabulary, which keeps every id as 0 does
            sampling_topk=0 if options.sampling_topk >= self.target.get_piece_size() else options.sampling_topk,
            sampling_topp=options.sampling_topp,
            sampling_temperature=options.sampling_temperature,
            suppress_sequences=[[self.target.id_to_piece(0)]],  # keras_seq never writes padding (id 0)
            return_scores=True,
            return_attention=options.return_alignment,
        )
        protected = [placeholders.protect(s) if self.placeholders else (s, []) for s in sentences]
        source = self._tokens([text for text, _ in protected], "source")
        if options.return_alignment and options.beam_size > 1:
            # CTranslate2 4.8.5's batched beam search hands each sentence after the first another one's attention
            # (its hypotheses are right): one sentence a call. Remove when `test_ctranslate2`'s alignment test
            # passes with the batch in one call.
            prefixes = arguments.pop("target_prefix") or [None] * len(source)
            results = [
                self.translator.translate_batch([tokens], target_prefix=[prefix], **arguments)[0]
                for tokens, prefix in zip(source, prefixes)
            ]
        else:
            results = self.translator.translate_batch(source, **arguments)
        hypotheses = [result.hypotheses for result in results]
        texts = [
            [placeholders.restore(text, spans) for text in self.target.decode(row)]
            for row, (_, spans) in zip(hypotheses, protected)
        ]
        scores = [result.scores for result in results]
        log_probs = [
            [score * self._scored_length(tokens, options) ** options.length_penalty for score, tokens in zip(*pair)]
            for pair in zip(scores, hypotheses)
        ]
        alignments = None
        if options.return_alignment:
            label = lambda tokens, spans: [placeholders.restore(token, spans) for token in tokens]
            alignments = self.aligned(
                [label(tokens, spans)[: self.source_length] for tokens, (_, spans) in zip(source, protected)],
                [[label(tokens, spans) for tokens in row] for row, (_, spans) in zip(hypotheses, protected)],
                [result.attention for result in results],
            )
        return self.results(texts, scores, log_probs, options.n_best, alignments)

"""The `generate` method shared by every keras_seq language model and seq2seq model."""

from keras import ops

from keras_seq import decoding
from keras_seq.models.config import ConfigFromArguments
from keras_seq.models.keras_workarounds import MaskedLogitsModel


class GenerativeModel(ConfigFromArguments, MaskedLogitsModel):
    """A functional `keras.Model` that can also decode autoregressively.

    Subclasses build their graph in `__init__`, pass it to `keras.Model`, keep their
    constructor arguments in `self._config` (`constructor_arguments`: `.keras` files rebuild them) and
    implement `_decoding_start`, `_decoding_step` and `decoding_vocabulary_size`
    (see `keras_seq.decoding`); `_decoding_reads_cache_rows = True` if their
    `_decoding_step` takes `cache_rows` (beam search then reorders no cache);
    `_inputs_are_prompts = False` for seq2seq models, and `_length_limits` where
    positions are bounded.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled_decoders = {}

    def generate(
        self,
        inputs,
        max_length,
        strategy="greedy",
        temperature=1.0,
        k=50,
        p=0.9,
        num_beams=4,
        length_penalty=0.6,
        end_id=None,
        start_id=1,
        num_return_sequences=1,
        seed=None,
        min_length=0,
    ):
        """Decode up to `max_length` ids per row of `inputs`, one cached step per token.

        Args:
            inputs: a language model's prompt `(B, P)`, or a seq2seq model's encoder
                ids `(B, S)` (decoding then starts from `start_id`): a tensor, a NumPy
                array or nested lists of ids. A conditioned `rnn_lm` takes the dict
                `{"token_ids": (B, P), "condition": (B, condition_dim)}` it was built for.
            max_length: length of the returned ids, prompt (or start id) included.
            strategy: `greedy`, `sample` (softmax with `temperature`), `top_k` (the
                k most likely), `top_p` (the smallest set with probability >= p), or
                `beam` (beam search with `num_beams` beams and the GNMT length
                penalty `((5 + len) / 6) ** length_penalty` at the final ranking).
                Id 0 (padding) is never generated: every strategy chooses among ids
                `1..V-1`, with probabilities renormalised over them.
            temperature: divides the logits before sampling (> 0).
            k: ids kept by `top_k`; a k past the vocabulary keeps every id.
            p: probability mass kept by `top_p`, in (0, 1].
            num_beams: beams of `beam`, at most the vocabulary size.
            length_penalty: the GNMT alpha (0 ranks beams by log-probability alone).
            end_id: an id that ends a sequence; later positions are 0 (padding).
            start_id: the first decoder id of a seq2seq model, in `[1, V)`.
            num_return_sequences: samples (or best beams, at most `num_beams`) per
                input row.
            seed: an int32 integer that makes sampling repeatable. The noise is
                a hash of the seed, the step and the position in `keras.ops`
                (`keras_seq._random`), the same on every call, in every process
                and on every backend: the same weights sample the same ids on
                TensorFlow, JAX and torch (barring a near-tie that their floating
                point rounds apart).
            min_length: `end_id` is not generated before this position (the
                prompt or start id counts), so no sequence ends shorter.

        Returns:
            int ids `(B, max_length)`; with `num_return_sequences > 1`, ids
            `(B, n, max_length)` and their float32 scores `(B, n)`, as a tuple
            (the summed log-probabilities of the generated ids, divided by the
            length penalty for beam search).

        Raises:
            ValueError: on a bad strategy or parameter, a prompt longer than
                `max_length`, an `end_id` or `start_id` outside the vocabulary, or a
                seed outside int32.
        """
        return decoding.generate(
            self,
            inputs,
            max_length,
            strategy=strategy,
            temperature=temperature,
            k=k,
            p=p,
            num_beams=num_beams,
            length_penalty=length_penalty,
            end_id=end_id,
            start_id=start_id,
            num_return_sequences=num_return_sequences,
            seed=seed,
            min_length=min_length,
        )

    @property
    def input_vocabulary_size(self):
        """Bound of the ids `generate` takes: the prompt's (the target) vocabulary by default."""
        return self.decoding_vocabulary_size

    def _input_ids(self, inputs):
        """The id tensor inside `generate`'s inputs (the inputs themselves by default)."""
        return inputs

    @property
    def _length_limits(self):
        """`(most input ids, largest max_length)` that `generate` can decode; None: unbounded."""
        return None, None

    def _id_buffer(self, prefix, max_length):
        """`(B, max_length)` ids starting with `prefix` (a prompt, or the start id), zeros after."""
        prefix_length = prefix.shape[1]
        return ops.pad(prefix, ((0, 0), (0, max_length - prefix_length))), prefix_length

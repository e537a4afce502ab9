"""Cached, static-shaped autoregressive decoding shared by every keras_seq generator.

One implementation serves language models and seq2seq models, Transformer and RNN
alike. What it needs of a model is the decoding contract, `keras_seq.decoding_contract.Decodable`,
whose methods are documented there: `start_decoding` (the empty cache and the
context, e.g. the encoded source), `decoding_step` (the logits of the next positions
from the cache) and `reorder_cache` (beam search's reordering), and the attributes
that tune how the state is laid out. A model that lacks it is turned away with a
ValueError naming what is missing (`decoding_contract.require`).

The decoding writes each row's prefix (the prompt, or the start id) into an id
buffer, reads it with one step, then calls one step per new token. Beam search
reorders its rows every step: by default through `reorder_cache`; a model that
`decoding_reads_cache_rows` (the Transformers) instead reads its cache through the
row that holds each position of a row's history, so no step copies the cache. A
model with a `decoding_cache_time_axis` gets a cache held to the positions written
so far (`resize_cache`, `cache_windows`), whose steps attend over those alone.

Each new token then costs one step, not a rerun of the prefix. The loop has a fixed
trip bound and fixed shapes, so it compiles with XLA (TensorFlow, TPU), `jax.jit`,
and runs under `torch.no_grad`. Scores are float32 log-probabilities whatever the
model's dtype policy.
"""

import inspect
import math

import keras
import numpy as np
from keras import ops

from keras_seq import _random, backend, repetition_controls
from keras_seq import _validation as v
from keras_seq import decoding_contract as contract

STRATEGIES = ("greedy", "sample", "top_k", "top_p", "top_k_top_p", "beam")
_NEG_INF = -1e9
_LOWEST = -3.0e38  # below any penalised score, _NEG_INF ones included


def gnmt_length_penalty(length, alpha):
    """`((5 + length) / 6) ** alpha` of Wu et al. (2016), the divisor of a beam's log-probability."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def _mask_forbidden(logits, step, end_id, min_length, suppress_ids=()):
    """float32 logits without the ids that may not come at position `step`.

    Id 0 is padding for every keras_seq model: never generate it (a model fed its own
    output would then mask that position out, and cached and uncached decoding would
    part). `end_id` may not come before position `min_length`; `suppress_ids` (Python
    ints, or an int32 vector set at run time) never come.
    """
    ids = ops.arange(ops.shape(logits)[-1])
    forbidden = ids == 0
    if end_id is not None and not v.is_known_zero(min_length):
        forbidden = ops.logical_or(forbidden, ops.logical_and(ids == end_id, step < min_length))
    if not isinstance(suppress_ids, tuple) or suppress_ids:
        suppressed = ops.convert_to_tensor(suppress_ids, "int32")
        forbidden = ops.logical_or(forbidden, ops.any(ids[:, None] == suppressed[None, :], axis=1))
    return ops.where(forbidden, _NEG_INF, ops.cast(logits, "float32"))


def _next_logits(rows, step, settings):
    """float32 logits of each row's next id, at position `step`, under the settings' controls: the repetition
    penalty on the raw logits, then the ids that may not come (`_mask_forbidden`) and those that would repeat
    an n-gram (`no_repeat_ngram_size`) at `_NEG_INF`. Scores are log-probabilities under these logits."""
    ids = rows["ids"]
    penalty, ngram_size = settings["repetition_penalty"], settings["no_repeat_ngram_size"]
    logits = repetition_controls.penalise_repetitions(ops.cast(rows["logits"], "float32"), ids, step, penalty)
    logits = _mask_forbidden(logits, step, settings["end_id"], settings["min_length"], settings["suppress_ids"])
    logits = repetition_controls.ban_repeated_ngrams(logits, ids, step, ngram_size, _NEG_INF)
    vocabulary = ops.arange(ops.shape(logits)[-1], dtype="int32")
    if "required" in rows:  # a row may not end before it has written each of its required ids
        required = rows["required"]
        written = ops.any(required[:, :, None] == ids[:, None, :], axis=2)
        missing = ops.any(ops.logical_and(required > 0, ops.logical_not(written)), axis=1)
        logits = ops.where(
            ops.logical_and(missing[:, None], (vocabulary == settings["end_id"])[None]), _NEG_INF, logits
        )
    if "limit" in rows:  # a row at its length limit (`max_length_ratio`) ends there
        end_only = ops.where(vocabulary == settings["end_id"], 0.0, _NEG_INF)
        logits = ops.where((step >= rows["limit"])[:, None], end_only[None], logits)
    if "prefix" in rows:  # a row within its target prefix takes the prefix's id, at no cost to its score
        given = ops.take(rows["prefix"], ops.reshape(step, (1,)), axis=1)  # (R, 1), 0 past the prefix
        logits = ops.where(given > 0, ops.where(vocabulary[None] == given, 0.0, _NEG_INF), logits)
    return logits


def _prefix_rows(target_prefix, copies, max_length):
    """`(B * copies, max_length)` int32: each row's target prefix at the positions it takes (after the start id),
    0 elsewhere."""
    prefix = ops.cast(target_prefix, "int32")
    width = ops.shape(prefix)[1]
    prefix = ops.pad(prefix, ((0, 0), (1, max_length - 1 - width)))
    return ops.repeat(prefix, copies, axis=0)


def _row_limits(model, inputs, ratio, copies, max_length):
    """`(B * copies,)` int32: the position at which each row must write its end id under `max_length_ratio`:
    after the start id and at most `ceil(ratio * source ids)` ids (at least one). `max_length` (never reached:
    no limit) where `ratio` is 0, a runtime setting."""
    sources = ops.sum(ops.cast(model.decoding_input_ids(inputs) != 0, "float32"), axis=1)
    allowed = ops.maximum(ops.cast(ops.ceil(ratio * sources), "int32"), 1)
    limits = ops.where(ops.greater(ratio, 0.0), 1 + allowed, max_length)
    return ops.repeat(ops.cast(limits, "int32"), copies, axis=0)


def _argmax(logits):
    """The first id of the largest logit, `(B, V) -> (B,)` int32, by a max and a min.

    Equal to `ops.argmax` on rows without NaN (a row of NaN gives V-1; the backends'
    `argmax` disagree there too). XLA on the CPU runs `ops.argmax` as one paired
    (value, index) reduction, slower than these two plain ones (benchmarks/RESULTS.md).
    """
    vocabulary_size = ops.shape(logits)[-1]
    best = ops.max(logits, axis=-1, keepdims=True)
    ids = ops.arange(vocabulary_size, dtype="int32")
    return ops.min(ops.where(logits == best, ids, vocabulary_size - 1), axis=-1)


def _gumbel_argmax(logits, seed, step, keys):
    """A draw from softmax(logits) by the Gumbel-max trick, fixed by (seed, step) and each row's key (`keys` from
    `_random.row_keys`: a sentence draws alike alone or in any batch), the same on every backend."""
    noise = _random.uniform_by_row(ops.shape(logits), seed, step, keys)
    return _argmax(logits - ops.log(-ops.log(noise)))


def _keep_top_k(logits, k):
    """`logits` with all but the `k` largest of each row at `_NEG_INF` (a `k` past V keeps every id)."""
    kth = ops.top_k(logits, int(min(k, logits.shape[-1])), sorted=True)[0][:, -1:]
    return ops.where(logits < kth, _NEG_INF, logits)


def _nucleus_threshold(sorted_logits, p):
    """`(R, 1)`: the least likely logit of the smallest set of most likely ids whose probability reaches `p`, from
    each row's logits sorted in descending order."""
    probs = ops.softmax(sorted_logits, axis=-1)
    mass_before = ops.cumsum(probs, axis=-1) - probs
    kept = ops.where(mass_before < p, sorted_logits, ops.full_like(sorted_logits, 1e30))
    return ops.min(kept, axis=-1, keepdims=True)


def _keep_top_p(logits, p):
    """Keep the smallest set of most likely tokens whose probability reaches p (nucleus)."""
    sorted_logits = ops.top_k(logits, ops.shape(logits)[-1], sorted=True)[0]
    return ops.where(logits < _nucleus_threshold(sorted_logits, p), _NEG_INF, logits)


def _keep_top_k_then_top_p(logits, k, p):
    """`_keep_top_p(_keep_top_k(logits, k), p)` for an int32 `k` and a float32 `p` set at run time (0 and 1 keep
    every id), by one sort of each row, and none when both keep every id: the export's sampling."""

    def keep(logits):
        vocabulary_size = ops.shape(logits)[-1]
        ranked = ops.top_k(logits, vocabulary_size, sorted=True)[0]
        place = ops.reshape(ops.clip(k - 1, 0, vocabulary_size - 1), (1,))
        kth = ops.where(k > 0, ops.take(ranked, place, axis=1), _LOWEST)
        nucleus = _nucleus_threshold(ops.where(ranked < kth, _NEG_INF, ranked), p)  # the top-k set, still sorted
        threshold = ops.where(p < 1.0, ops.maximum(nucleus, kth), kth)
        return ops.where(logits < threshold, _NEG_INF, logits)

    return ops.cond(ops.logical_or(k > 0, p < 1.0), lambda: keep(logits), lambda: logits)


# The filters each sampling strategy applies before its draw, in order. The export samples by `top_k_top_p` with
# k and p set at run time (`_keep_top_k_then_top_p`).
_FILTERS = {"sample": (), "top_k": ("k",), "top_p": ("p",), "top_k_top_p": ("k", "p")}


def _token_chooser(strategy, temperature, k, p, seed):
    """`choose(logits (B, V) float32, step, keys) -> ids (B,)` for a non-beam strategy (`keys`: the rows' noise
    keys, `_random.row_keys`; None for greedy decoding).

    `logits` come from `_next_logits`; its forbidden ids stay at `_NEG_INF` after
    the temperature divides the others (a large temperature would lift them to near 0).
    """
    if strategy == "greedy":
        return lambda logits, step, keys: _argmax(logits)

    def choose(logits, step, keys):
        logits = ops.where(logits == _NEG_INF, _NEG_INF, logits / temperature)
        if strategy == "top_k_top_p" and not (v.is_number(k) and v.is_number(p)):
            logits = _keep_top_k_then_top_p(logits, k, p)
        else:
            if "k" in _FILTERS[strategy]:
                logits = _keep_top_k(logits, k)
            if "p" in _FILTERS[strategy]:
                logits = _keep_top_p(logits, p)
        return _gumbel_argmax(logits, seed, step, keys)

    return choose


def _sampling_step(advance, step, rows, groups, choose, settings):
    """One token per row for greedy decoding and sampling (`advance`: the model's step, `_advancing`; `groups`:
    `(B, copies)` scores and ended flags; `choose` from `_token_chooser`)."""
    end_id = settings["end_id"]
    logits = _next_logits(rows, step, settings)
    done, score = ops.reshape(groups["done"], (-1,)), ops.reshape(groups["scores"], (-1,))
    token = ops.cast(choose(logits, step, rows.get("noise_key")), "int32")
    token = ops.where(done, 0, token)  # padding after a sequence ended
    # log_softmax(logits)[token], without writing the log-probabilities of every id
    token_log_prob = ops.take_along_axis(logits, token[:, None], axis=-1)[:, 0] - ops.logsumexp(logits, axis=-1)
    score = score + ops.where(done, 0.0, token_log_prob)
    ids = backend.slice_update(rows["ids"], (0, step), token[:, None])
    if end_id is not None:
        done = ops.logical_or(done, ops.equal(token, end_id))
    logits, cache = advance(token[:, None], rows["cache"], step)
    shape = ops.shape(groups["done"])
    groups = {"scores": ops.reshape(score, shape), "done": ops.reshape(done, shape)}
    return {**_row_constants(rows), "ids": ids, "cache": cache, "logits": logits[:, -1]}, groups


def _row_constants(rows):
    """The rows' entries that stay as they are while decoding: `limit`, `prefix` and `required` (the same for every
    row of a group) and `noise_key` (one per row)."""
    return {name: rows[name] for name in ("limit", "prefix", "required", "noise_key") if name in rows}


def _beam_step(advance, reorder, step, rows, groups, settings):
    """One step of beam search over the `(B, K)` beam groups (the rows come in beam groups; `advance`: the
    model's step, `_advancing`; `reorder`: its `reorder_cache`).

    A finished beam (its last token was `end_id`) can only be extended by padding at
    no cost, so it stops growing and keeps its score while competing with the rest.
    A sequence whose best ended beams no unfinished one can overtake stops (`_decided`).
    With `early_stopping`, a sequence stops once it has `num_return_sequences` ended
    beams that each rank above every unfinished one (`_settle`): its unfinished beams
    are dropped (score `_NEG_INF`), and the search can end before every beam has.
    """
    end_id = settings["end_id"]
    scores, done, lengths = groups["scores"], groups["done"], groups["lengths"]
    batch, num_beams = ops.shape(scores)
    vocabulary_size = ops.shape(rows["logits"])[-1]
    logits = _next_logits(rows, step, settings)
    scores, flat = _best_continuations(logits, scores, done, num_beams)
    beam, token = flat // vocabulary_size, flat % vocabulary_size
    rows_kept = ops.reshape(ops.arange(batch, dtype="int32")[:, None] * num_beams + beam, (-1,))
    done = ops.take_along_axis(done, beam, axis=1)
    lengths = ops.take_along_axis(lengths, beam, axis=1) + ops.cast(ops.logical_not(done), "int32")
    if end_id is not None:
        done = ops.logical_or(done, ops.equal(token, end_id))
        count, alpha = settings["num_return_sequences"], settings["length_penalty"]
        decided = _decided(done, scores, lengths, count, alpha, _length_limit(rows, settings))
        done = ops.logical_or(done, decided[:, None])
        if settings["early_stopping"]:
            done, scores = _settle(done, scores, lengths, count, alpha)
    token = ops.reshape(token, (-1, 1))
    new_rows = {
        **_row_constants(rows),
        "ids": backend.slice_update(ops.take(rows["ids"], rows_kept, axis=0), (0, step), token),
    }
    if "cache_rows" in rows:
        # Each row's history now lies in its parent's rows; its new entry goes in its own.
        own_rows = ops.arange(batch * num_beams, dtype="int32")[:, None]
        cache_rows = backend.slice_update(ops.take(rows["cache_rows"], rows_kept, axis=0), (0, step), own_rows)
        logits, new_rows["cache"] = advance(token, rows["cache"], step, cache_rows=cache_rows)
        new_rows["cache_rows"] = cache_rows
    else:
        logits, new_rows["cache"] = advance(token, reorder(rows["cache"], rows_kept), step)
    new_rows["logits"] = logits[:, -1]
    return new_rows, {"scores": scores, "done": done, "lengths": lengths}


_TOP_K_BLOCK = 32  # ids per block of `_best_continuations`


def _best_continuations(logits, scores, done, k):
    """The `k` best continuations of each group of beams, `(B, k)` values and flat indices `beam * V + id`
    (ties to the lower index): `scores` `(B, K)` plus the log-softmax of each beam's `logits` `(B * K, V)`, an
    ended beam (`done`) continuing with padding (id 0) alone, at no cost.

    A continuation is its logit plus its beam's `score - logsumexp(logits)`, so the
    best `k` of a group lie in the `k` blocks of `_TOP_K_BLOCK` ids whose largest
    logits, so shifted, are largest (ties to the lower block): one pass of block
    maxima, one of exponentials, then a top-k of the blocks and one of their `k * 32`
    ids. On a CPU, XLA's top-k over a whole group (beams * vocabulary) costs more than
    the output product that makes it, and so does writing out its log-probabilities.
    """
    batch, num_beams = ops.shape(scores)
    vocabulary_size = logits.shape[-1]
    blocks = None if vocabulary_size is None else -(-vocabulary_size // _TOP_K_BLOCK)
    pad_only = ops.where(ops.arange(ops.shape(logits)[-1]) == 0, 0.0, _NEG_INF)
    if blocks is None or blocks * num_beams <= k or not backend.top_k_in_blocks_pays():
        log_probs = ops.reshape(ops.log_softmax(logits, axis=-1), (batch, num_beams, -1))
        log_probs = ops.where(done[..., None], pad_only, log_probs)
        values, index = ops.top_k(ops.reshape(scores[..., None] + log_probs, (batch, -1)), k, sorted=True)
        return values, ops.cast(index, "int32")
    rows = batch * num_beams
    padded = ops.pad(logits, ((0, 0), (0, blocks * _TOP_K_BLOCK - vocabulary_size)), constant_values=_LOWEST)
    entries = ops.reshape(padded, (rows * blocks, _TOP_K_BLOCK))
    block_max = ops.reshape(ops.max(entries, axis=1), (rows, blocks))
    row_max = ops.max(block_max, axis=1, keepdims=True)
    log_normaliser = row_max + ops.log(ops.sum(ops.exp(logits - row_max), axis=1, keepdims=True))
    ended = ops.reshape(done, (rows, 1))
    shift = ops.reshape(scores, (rows, 1)) - ops.where(ended, 0.0, log_normaliser)  # an ended beam adds 0 for id 0
    pad_block_max = ops.where(ops.arange(blocks) == 0, 0.0, _NEG_INF)
    block_best = ops.reshape(ops.where(ended, pad_block_max, block_max) + shift, (batch, num_beams * blocks))
    best_blocks = ops.sort(ops.cast(ops.top_k(block_best, k, sorted=True)[1], "int32"), axis=1)  # ties keep order
    chosen = ops.reshape(ops.arange(batch, dtype="int32")[:, None] * num_beams + best_blocks // blocks, (-1,))
    block = ops.reshape(best_blocks % blocks, (-1,))
    pad_entries = ops.reshape(
        ops.pad(pad_only, ((0, blocks * _TOP_K_BLOCK - vocabulary_size),), constant_values=_LOWEST),
        (blocks, _TOP_K_BLOCK),
    )
    taken = ops.where(
        ops.take(ended, chosen, axis=0),
        ops.take(pad_entries, block, axis=0),
        ops.take(entries, chosen * blocks + block, axis=0),
    )
    taken = ops.reshape(taken + ops.take(shift, chosen, axis=0), (batch, k * _TOP_K_BLOCK))
    values, position = ops.top_k(taken, k, sorted=True)
    position = ops.cast(position, "int32")
    best = ops.take_along_axis(best_blocks, position // _TOP_K_BLOCK, axis=1)
    return values, best // blocks * vocabulary_size + best % blocks * _TOP_K_BLOCK + position % _TOP_K_BLOCK


def _ranked_ended(done, scores, lengths, count, alpha):
    """`(B, 1)`: the penalised score of each sequence's `count`-th best ended beam (-3e38 if fewer ended);
    `count` a Python int or, set at run time, an int32 scalar tensor."""
    ended = ops.where(done, scores / gnmt_length_penalty(lengths, alpha), _LOWEST)
    if isinstance(count, int):
        return ops.top_k(ended, count, sorted=True)[0][:, -1:]
    batch, beams = ops.shape(ended)
    place = ops.full((batch, 1), beams - ops.cast(count, "int32"), "int32")
    return ops.take_along_axis(ops.sort(ended, axis=1), place, axis=1)


def _length_limit(rows, settings):
    """The length the decoding stops at: `settings["length_limit"]` (an int32 scalar set at run time, at most
    the id buffer's width), else the buffer's width."""
    limit = settings["length_limit"]
    return ops.shape(rows["ids"])[1] if limit is None else limit


def _decided(done, scores, lengths, count, alpha, max_length):
    """`(B,)`: the sequences whose `count` best ended beams outrank all that an unfinished beam can still become.

    An unfinished beam's log-probability `s` only falls as it grows, and it ends at a
    length in `(length, max_length]`: its penalised score stays at most `s` over the
    largest penalty it can reach. Once no unfinished beam can overtake them, going on
    cannot give a better result (the optimal stopping of Huang, Zhao and Ma, 2017,
    "When to Finish?", bounded by the GNMT penalty): the search stops there and keeps
    its `count` best, where going on might only have pushed an ended beam out of the
    `K` kept ones.
    """
    largest_penalty = ops.maximum(gnmt_length_penalty(lengths + 1, alpha), gnmt_length_penalty(max_length, alpha))
    reachable = ops.where(done, _LOWEST, ops.minimum(scores, 0.0) / largest_penalty)
    return ops.all(_ranked_ended(done, scores, lengths, count, alpha) >= reachable, axis=1)


def _settle(done, scores, lengths, count, alpha):
    """Stop the sequences `(B, K)` whose `count` best ended beams outrank every unfinished one.

    Ended beams are ranked by their final score (log-probability over the GNMT
    penalty), an unfinished beam by its score at its next length, the shortest it can
    end with. Without a penalty that is the last score it can reach (log-probabilities
    only fall), so the search keeps its result; with one, a longer ending can still
    win and is given up, as in the beam search of the NMT toolkits (OpenNMT,
    CTranslate2, Hugging Face's `early_stopping=False`).
    """
    count_best_ended = _ranked_ended(done, scores, lengths, count, alpha)
    unfinished = ops.where(done, _LOWEST, scores / gnmt_length_penalty(lengths + 1, alpha))
    settled = count_best_ended >= ops.max(unfinished, axis=1, keepdims=True)
    scores = ops.where(ops.logical_and(settled, ops.logical_not(done)), _NEG_INF, scores)
    return ops.logical_or(done, settled), scores


def greedy_ragged_prompts(model, ids, prompt_lengths):
    """Greedy continuation of language-model prompts of different lengths, as tensor operations.

    `ids` `(B, L)` holds each row's prompt right-padded with zeros, `prompt_lengths`
    `(B,)` their lengths (at least 1). The model reads one position per step: while a
    row is inside its prompt the prompt's next id is kept (teacher forcing), after it
    the most likely id is written. Returns the filled `(B, L)` ids. Used where one
    batch mixes prompt lengths, e.g. a SavedModel serving raw strings (`generate`
    needs one prompt length per call).
    """
    contract.require(model, "greedy_ragged_prompts")
    ids = ops.cast(ids, "int32")
    prompt_lengths = ops.cast(prompt_lengths, "int32")
    max_length = ops.shape(ids)[1]
    cache, context = model.start_decoding(ids, max_length, 1)

    def body(step, ids, cache):
        logits, cache = model.decoding_step(ids[:, step][:, None], cache, step, context)
        chosen = _argmax(_mask_forbidden(logits[:, -1], step, None, 0))
        following = ids[:, step + 1]
        token = ops.where(step + 1 < prompt_lengths, following, chosen)
        return step + 1, backend.slice_update(ids, (0, step + 1), token[:, None]), cache

    _, ids, _ = ops.while_loop(
        lambda step, ids, cache: step < max_length - 1, body, (ops.convert_to_tensor(0, "int32"), ids, cache)
    )
    return ids


def _owner(model):
    return f"{type(model).__name__}.generate"


def _id_array(model, nested):
    """Nested lists of ids as one array, or a `ValueError` when they are not rectangular."""
    try:
        return np.asarray(nested)
    except ValueError:
        pass
    v.fail(_owner(model), "inputs", "a rectangular (batch, length) array of ids", "nested lists of different lengths")


def check_lengths(model, ids, max_length):
    """ValueErrors for input ids `(B, L)` or a `max_length` the model cannot decode.

    Called by `generate` before anything is traced (TensorFlow wraps an error raised
    while tracing in its own message) and by `decode`; a length unknown while tracing
    is not checked.
    """
    owner = _owner(model)
    most_input_ids, largest_max_length = model.decoding_length_limits
    if largest_max_length is not None and max_length > largest_max_length:
        v.fail(owner, "max_length", f"at most the model's target length {largest_max_length}", max_length)
    length = ids.shape[1]
    if length is None:
        return
    if length == 0:
        v.fail(owner, "inputs", "at least one id per row", f"shape {tuple(ids.shape)}")
    if model._inputs_are_prompts and length > max_length:
        v.fail(owner, "inputs", f"a prompt of at most max_length={max_length} ids", f"{length} ids")
    if most_input_ids is not None and length > most_input_ids:
        v.fail(owner, "inputs", f"at most the model's source length {most_input_ids} ids", f"{length} ids")


def check_generate_arguments(
    model,
    inputs,
    max_length,
    strategy,
    temperature,
    k,
    p,
    num_beams,
    end_id,
    num_return_sequences,
    min_length=0,
    start_id=1,
    seed=None,
    length_penalty=0.6,
    early_stopping=False,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    suppress_ids=(),
    max_length_ratio=0.0,
    target_prefix=None,
    required_ids=None,
):
    owner = _owner(model)
    if not isinstance(early_stopping, (bool, np.bool_)):
        v.fail(owner, "early_stopping", "True or False", repr(early_stopping))
    v.check_choice(owner, "strategy", strategy, STRATEGIES)
    v.check_positive_int(owner, "max_length", max_length)
    if not v.is_integer(min_length) or not 0 <= min_length <= max_length:
        v.fail(owner, "min_length", f"an integer in [0, max_length={max_length}]", repr(min_length))
    if not v.is_number(temperature) or not 0 < temperature < math.inf:
        v.fail(owner, "temperature", "a finite number > 0", repr(temperature))
    v.check_positive_int(owner, "k", k)
    if not v.is_number(p) or not 0 < p <= 1:
        v.fail(owner, "p", "a number in (0, 1]", repr(p))
    if not v.is_number(length_penalty) or not math.isfinite(length_penalty):
        v.fail(owner, "length_penalty", "a finite number (the GNMT alpha)", repr(length_penalty))
    v.check_positive_int(owner, "num_beams", num_beams)
    v.check_positive_int(owner, "num_return_sequences", num_return_sequences)
    if not v.is_integer(no_repeat_ngram_size) or no_repeat_ngram_size < 0:
        v.fail(owner, "no_repeat_ngram_size", "an integer >= 0 (0: off)", repr(no_repeat_ngram_size))
    if not v.is_number(repetition_penalty) or not 0 < repetition_penalty < math.inf:
        v.fail(owner, "repetition_penalty", "a finite number > 0 (1: off)", repr(repetition_penalty))
    if not v.is_number(max_length_ratio) or not 0 <= max_length_ratio < math.inf:
        v.fail(owner, "max_length_ratio", "a finite number >= 0 (0: off)", repr(max_length_ratio))
    if max_length_ratio and (end_id is None or model._inputs_are_prompts):
        v.fail(owner, "max_length_ratio", "0 for a language model or without an end_id", repr(max_length_ratio))
    if target_prefix is not None:
        _check_target_prefix(model, owner, target_prefix, inputs, max_length)
    if required_ids is not None:
        _check_required_ids(model, owner, required_ids, inputs, end_id)
    if strategy == "beam" and num_return_sequences > num_beams:
        v.fail(owner, "num_return_sequences", f"at most num_beams={num_beams}", num_return_sequences)
    vocabulary_size = model.decoding_vocabulary_size
    if end_id is not None and not (v.is_integer(end_id) and 0 <= end_id < vocabulary_size):
        v.fail(owner, "end_id", f"an id in [0, {vocabulary_size}) or None", repr(end_id))
    if not v.is_integer(start_id) or not 0 < start_id < vocabulary_size:
        v.fail(owner, "start_id", f"an id in [1, {vocabulary_size}) (0 is padding)", repr(start_id))
    if isinstance(suppress_ids, (str, bytes)) or not all(
        v.is_integer(i) and 0 <= i < vocabulary_size for i in np.ravel(np.asarray(suppress_ids, dtype=object))
    ):
        v.fail(owner, "suppress_ids", f"a list of ids in [0, {vocabulary_size})", repr(suppress_ids))
    if seed is not None and (not v.is_integer(seed) or not -(2**31) <= seed < 2**31):
        v.fail(owner, "seed", "an int32 integer, in [-2**31, 2**31), or None", repr(seed))
    if strategy == "beam" and num_beams > vocabulary_size:
        v.fail(owner, "num_beams", f"at most the vocabulary size {vocabulary_size}", num_beams)
    v.check_rank(owner, "inputs", inputs, 2)
    v.check_integer_ids(owner, "inputs", inputs)
    v.check_ids_below(owner, "inputs", inputs, model.input_vocabulary_size)
    check_lengths(model, inputs, max_length)


def _check_target_prefix(model, owner, target_prefix, inputs, max_length):
    if model._inputs_are_prompts:
        v.fail(owner, "target_prefix", "None for a language model (its prompt is the prefix)", "a prefix")
    v.check_rank(owner, "target_prefix", target_prefix, 2)
    v.check_integer_ids(owner, "target_prefix", target_prefix)
    v.check_ids_below(owner, "target_prefix", target_prefix, model.decoding_vocabulary_size)
    rows, width = target_prefix.shape
    if rows != inputs.shape[0] or width > max_length - 1:
        v.fail(
            owner,
            "target_prefix",
            f"(B={inputs.shape[0]}, at most max_length - 1 = {max_length - 1}) ids",
            f"shape {tuple(target_prefix.shape)}",
        )


def _check_required_ids(model, owner, required_ids, inputs, end_id):
    if end_id is None:
        v.fail(owner, "required_ids", "None without an end_id (they hold back the end id)", "required ids")
    v.check_rank(owner, "required_ids", required_ids, 2)
    v.check_integer_ids(owner, "required_ids", required_ids)
    v.check_ids_below(owner, "required_ids", required_ids, model.decoding_vocabulary_size)
    if required_ids.shape[0] != inputs.shape[0]:
        v.fail(owner, "required_ids", f"(B={inputs.shape[0]}, M) ids", f"shape {tuple(required_ids.shape)}")


def _full_settings(settings):
    """`generate`'s keyword arguments with its defaults for those left out (an unknown name raises `TypeError`)."""
    unknown = set(settings) - set(_GENERATE_DEFAULTS)
    if unknown:
        raise TypeError(f"decode: unexpected keyword arguments {sorted(unknown)}")
    return {**_GENERATE_DEFAULTS, **settings}


def search_start(model, inputs, seed, max_length, first_window=False, weights=None, **settings):
    """The decoding state once the prompt (or the start id) is read: a dict of tensors.

    `"step"` is the next position; `"rows"` hold one row per hypothesis (`B * G`:
    the ids, cache, next logits, context, and for beam search the cache rows);
    `"groups"` hold `(B, G)` scores and ended flags (and lengths for beam search),
    `G` being the beams or the sequences returned per input row. A model that shares
    its context between a row's copies keeps it in `"sources"`, one row per input
    row, instead of `"rows"` (`split_context` finds it); a model's step weights, if it
    has them (`decoding_step_weights`), are in `"weights"`. `search_steps`
    advances a state, `search_result` reads the decoding out of it, and
    `unfinished_groups` and `take_groups` let a caller drop the ended sequences.

    The cache holds `max_length` positions, or with `first_window` the first of
    `cache_windows` (the prompt is read over that many, not all of them): the caller
    then grows it (`resize_cache`) before stepping past them. `weights`: the model's
    `step_weights`, made here unless a caller keeps them (a SavedModel stores them).
    """
    return _search_start(model, inputs, seed, max_length, first_window, weights, **settings)[0]


def _search_start(model, inputs, seed, max_length, first_window, weights=None, **settings):
    """`search_start`'s state, and the position its `"step"` holds as a Python int (the prompt's width, or 1
    after a start id)."""
    contract.require(model, "decode")
    settings = _full_settings(settings)
    check_lengths(model, model.decoding_input_ids(inputs), max_length)
    beam = settings["strategy"] == "beam"
    copies = settings["num_beams"] if beam else settings["num_return_sequences"]
    ids, prompt_length = _prefix_buffer(model, inputs, max_length, settings["start_id"], copies)
    cache, context = model.start_decoding(inputs, max_length, copies)
    cache_length = cache_windows(model, prompt_length, max_length)[0] if first_window else max_length
    if cache_length < max_length:
        cache = keras.tree.map_structure(
            lambda x: _fit_time_axis(x, cache_time_axes(model)["cache"], cache_length), cache
        )
    weights = step_weights(model) if weights is None else keras.tree.map_structure(ops.convert_to_tensor, weights)
    logits, cache = _advancing(model, context, copies, weights)(ids[:, :prompt_length], cache, 0)
    rows = ops.shape(ids)[0]
    batch = rows // copies
    state_rows = {"ids": ids, "cache": cache, "logits": logits[:, -1]}
    if not v.is_known_zero(settings["max_length_ratio"]):
        state_rows["limit"] = _row_limits(model, inputs, settings["max_length_ratio"], copies, max_length)
    if settings["target_prefix"] is not None:
        state_rows["prefix"] = _prefix_rows(settings["target_prefix"], copies, max_length)
    if settings["required_ids"] is not None:
        state_rows["required"] = ops.repeat(ops.cast(settings["required_ids"], "int32"), copies, axis=0)
    if settings["strategy"] in _FILTERS:  # sampling: each row's noise by its input ids and copy
        state_rows["noise_key"] = _random.row_keys(model.decoding_input_ids(inputs), copies)
    if beam:
        if model.decoding_reads_cache_rows:
            state_rows["cache_rows"] = ops.tile(ops.arange(rows, dtype="int32")[:, None], (1, cache_length))
        # All beams start identical: only the first may expand at the first step.
        first_only = ops.where(ops.arange(copies) == 0, 0.0, _NEG_INF)
        groups = {
            "scores": ops.tile(first_only[None], (batch, 1)),
            "done": ops.zeros((batch, copies), "bool"),
            "lengths": ops.zeros((batch, copies), "int32"),
        }
    else:
        groups = {"scores": ops.zeros((batch, copies), "float32"), "done": ops.zeros((batch, copies), "bool")}
    step = ops.convert_to_tensor(prompt_length, "int32")
    state = {"step": step, "seed": seed, "rows": state_rows, "groups": groups}
    if model.decoding_shares_context:
        state["sources"] = {}
    return join_context(state, (context, weights)), prompt_length


def _prefix_buffer(model, inputs, max_length, start_id, copies):
    """`(ids (B * copies, max_length), prefix width)`: each input row's prefix, `copies` times in a row, zeros after.

    The prefix is the prompt of a model whose inputs are prompts, else the start id.
    """
    input_ids = model.decoding_input_ids(inputs)
    if model._inputs_are_prompts:
        prefix = input_ids if copies == 1 else ops.repeat(input_ids, copies, axis=0)
    else:
        prefix = ops.full((ops.shape(input_ids)[0] * copies, 1), start_id, "int32")
    width = prefix.shape[1]
    return ops.pad(prefix, ((0, 0), (0, max_length - width))), width


def step_weights(model):
    """`model.decoding_step_weights()`: the weights its decoding steps read, laid out for them once (see
    `Decodable`); None for a model without them."""
    contract.require(model, "step_weights")
    return model.decoding_step_weights()


def _advancing(model, context, copies, weights):
    """`model.decoding_step` with the decoding's `context`, `copies` and step `weights` bound: `(ids, cache, index,
    cache_rows=None) -> (logits, cache)`, for rows that come `copies` to an input row."""
    return lambda ids, cache, index, cache_rows=None: model.decoding_step(
        ids, cache, index, context, cache_rows=cache_rows, copies=copies, weights=weights
    )


def split_context(state):
    """`(state less what never changes while decoding, that part)`: the context and the step weights
    (`decoding_step_weights`). A compiled program that returns a state copies every tensor it returns, so a caller
    keeps them aside (`join_context`)."""
    place = "sources" if "sources" in state else "rows"
    rest = {name: x for name, x in state[place].items() if name != "context"}
    fixed = (state[place]["context"], state.get("weights"))
    return {**{name: x for name, x in state.items() if name != "weights"}, place: rest}, fixed


def join_context(state, fixed):
    """`state` (less its context and step weights, from `split_context`) with `fixed` back in their places: the
    context in `"sources"`, one row per input row, for a model that shares its context between a row's copies,
    else in `"rows"`; the weights, if any, in `"weights"`."""
    context, weights = fixed
    place = "sources" if "sources" in state else "rows"
    state = {**state, place: {**state[place], "context": context}}
    return state if weights is None else {**state, "weights": weights}


def search_steps(model, state, stop, **settings):
    """`state` advanced one token per step until position `stop` (or `max_length`, if less) or until every
    sequence has ended."""
    settings = _full_settings(settings)
    state, fixed = split_context(state)
    context, weights = fixed
    rows, seed = state["rows"], state["seed"]
    choose = _token_chooser(settings["strategy"], settings["temperature"], settings["k"], settings["p"], seed)
    advance = _advancing(model, context, state["groups"]["done"].shape[1], weights)

    def body(step, rows, groups):
        if settings["strategy"] == "beam":
            rows, groups = _beam_step(advance, model.reorder_cache, step, rows, groups, settings)
        else:
            rows, groups = _sampling_step(advance, step, rows, groups, choose, settings)
        return step + 1, rows, groups

    max_length = ops.shape(rows["ids"])[1]
    limit = _length_limit(rows, settings)

    def condition(step, rows, groups):
        return ops.logical_and(step < ops.minimum(stop, limit), ops.logical_not(ops.all(groups["done"])))

    step, rows, groups = ops.while_loop(
        condition, body, (state["step"], rows, state["groups"]), maximum_iterations=max_length
    )
    return join_context({**state, "step": step, "rows": rows, "groups": groups}, fixed)


def search_result(state, **settings):
    """The decoded ids `(B, n, max_length)` and scores `(B, n)` of a state: the best `n` beams of each group by
    their length-penalised score (every beam, ranked, where `n` is a tensor), or every sampled sequence."""
    settings = _full_settings(settings)
    groups = state["groups"]
    batch, copies = ops.shape(groups["scores"])
    ids = ops.reshape(state["rows"]["ids"], (batch, copies, -1))
    if settings["strategy"] != "beam":
        return ids, groups["scores"]
    scores = groups["scores"] / gnmt_length_penalty(groups["lengths"], settings["length_penalty"])
    order = ops.argsort(-scores, axis=-1)
    if isinstance(settings["num_return_sequences"], int):  # set at run time: every beam, ranked, for the caller to cut
        order = order[:, : settings["num_return_sequences"]]
    return ops.take_along_axis(ids, order[..., None], axis=1), ops.take_along_axis(scores, order, axis=1)


def unfinished_groups(state):
    """`(order, count)`: the groups of `state` with the `count` unfinished ones (some sequence still decoding)
    first, as indices `(B,)` for `take_groups`."""
    finished = ops.all(state["groups"]["done"], axis=1)
    order = ops.cast(ops.argsort(ops.cast(finished, "int32")), "int32")
    return order, ops.sum(ops.cast(ops.logical_not(finished), "int32"))


def take_groups(state, index):
    """The state of the groups `index` `(b,)` alone, in that order: a caller drops the ended sequences
    (`unfinished_groups`) and decodes on with fewer rows, instead of computing every row until the last ends."""
    copies = ops.shape(state["groups"]["done"])[1]
    index = ops.cast(index, "int32")
    row_index = ops.reshape(index[:, None] * copies + ops.arange(copies, dtype="int32")[None], (-1,))
    rows = dict(
        keras.tree.map_structure(lambda x: None if x is None else ops.take(x, row_index, axis=0), state["rows"])
    )
    if "cache_rows" in rows:  # a row's history stays in its group: the same place among the group's new rows
        group_start = ops.arange(ops.shape(row_index)[0], dtype="int32") // copies * copies
        rows["cache_rows"] = rows["cache_rows"] % copies + group_start[:, None]
    groups = {name: ops.take(x, index, axis=0) for name, x in state["groups"].items()}
    state = {**state, "rows": rows, "groups": groups}
    if "sources" in state:  # one row per group
        state["sources"] = keras.tree.map_structure(
            lambda x: None if x is None else ops.take(x, index, axis=0), state["sources"]
        )
    return state


_FIRST_CACHE_WINDOW = 16  # the least cache length decoding attends over; it doubles as the decoding goes on


def cache_windows(model, first_step, max_length):
    """The cache lengths a decoding from position `first_step` grows through: 16, 32, 64, ... above `first_step`
    and at most 2/3 of `max_length`, then `max_length` (just `[max_length]` for a model whose cache has no
    `decoding_cache_time_axis`).

    Attention over the cache costs its length: steps that hold their cache to the
    positions written so far read a fraction of `max_length`. Each length is a shape
    that XLA compiles for, hence few of them.
    """
    max_length = int(max_length)
    if cache_time_axes(model) is None:
        return [max_length]
    sizes = [_FIRST_CACHE_WINDOW * 2**k for k in range(max(1, max_length).bit_length())]
    return [size for size in sizes if first_step < size and 3 * size <= 2 * max_length] + [max_length]


def cache_time_axes(model):
    """`{"cache": axis, "cache_rows": 1}`: where the positions lie in every tensor of a decoding state's cache and
    in its cache rows; None for a model whose cache has no `decoding_cache_time_axis` (a recurrent state)."""
    axis = model.decoding_cache_time_axis
    return None if axis is None else {"cache": axis, "cache_rows": 1}


def resize_cache(model, state, length):
    """`state` with its cache (and cache rows) cut or padded with zeros to `length` positions (see `cache_windows`;
    a model whose cache has no `decoding_cache_time_axis` gets its state back as it is).

    `length` must exceed every position written so far (`state["step"]` and before);
    padded positions are masked until a step writes them.
    """
    axes = cache_time_axes(model)
    if axes is None:
        return state
    rows = dict(state["rows"])
    rows["cache"] = keras.tree.map_structure(lambda x: _fit_time_axis(x, axes["cache"], length), rows["cache"])
    if "cache_rows" in rows:  # row 0 for the new positions: in range, and masked until their step writes them
        rows["cache_rows"] = _fit_time_axis(rows["cache_rows"], axes["cache_rows"], length)
    return {**state, "rows": rows}


def _fit_time_axis(x, axis, length):
    """`x` cut or padded with zeros to `length` along `axis`."""
    x = x[(slice(None),) * axis + (slice(None, length),)]
    padding = [[0, 0]] * len(x.shape)
    padding[axis] = [0, length - ops.shape(x)[axis]]
    return ops.pad(x, padding)


def decode(model, inputs, seed, max_length, weights=None, **settings):
    """The decoding itself, as tensor operations: ids `(B, n, max_length)` and scores `(B, n)`.

    `generate` checks the arguments, compiles this once per setting and calls it; it
    is public for use inside another traced function, e.g. a SavedModel signature
    (`keras_seq.export`). `seed` is an int32 scalar (a Python int on torch); `inputs`
    must hold int32 ids. `settings` are `generate`'s keyword arguments (`strategy`,
    `num_beams`, ...), its defaults for those left out; their values are not checked (an
    unknown name raises `TypeError`). The cache grows through `cache_windows`. `weights`:
    as for `search_start`.
    """
    state, first_step = _search_start(model, inputs, seed, max_length, True, weights, **settings)
    for window in cache_windows(model, first_step, max_length):
        state = search_steps(model, resize_cache(model, state, window), window, **settings)
    return search_result(state, **settings)


def generate(
    model,
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
    early_stopping=False,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    suppress_ids=(),
    max_length_ratio=0.0,
    target_prefix=None,
    required_ids=None,
):
    """Decode up to `max_length` ids per row of `inputs`, one cached step per token.

    Every keras_seq language and seq2seq model has it as its method:
    `model.generate(inputs, max_length, ...)`.

    Args:
        model: the model that decodes (`self` of `model.generate`): a
            `keras_seq.decoding_contract.Decodable`.
        inputs: a language model's prompt `(B, P)`, or a seq2seq model's encoder
            ids `(B, S)` (decoding then starts from `start_id`): a tensor, a NumPy
            array or nested lists of ids. A conditioned `rnn_lm` takes the dict
            `{"token_ids": (B, P), "condition": (B, condition_dim)}` it was built for.
        max_length: length of the returned ids, prompt (or start id) included.
        strategy: `greedy`, `sample` (softmax with `temperature`), `top_k` (the
            k most likely), `top_p` (the smallest set with probability >= p),
            `top_k_top_p` (the k most likely, then the smallest set of those
            with probability >= p: the export's sampling), or `beam` (beam
            search with `num_beams` beams and the GNMT length penalty
            `((5 + len) / 6) ** length_penalty` at the final ranking).
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
            a hash of the seed, the step, the row's input ids and its copy
            (of `num_return_sequences`) in `keras.ops` (`keras_seq._random`),
            the same on every call, in every process and on every backend:
            the same weights sample the same ids on TensorFlow, JAX and torch
            (barring a near-tie that their floating point rounds apart), and a
            row samples alike alone or in any batch (two equal inputs draw
            alike: ask `num_return_sequences` for different samples).
        min_length: `end_id` is not generated before this position (the
            prompt or start id counts), so no sequence ends shorter.
        early_stopping: beam search only (with an `end_id`). False: a row's
            beams run until they end or reach `max_length`, or until no
            unfinished beam can still overtake its best ended ones (going on
            would not change the result), and the length penalty ranks them
            all. True: a row stops once `num_return_sequences` of its beams
            have ended and rank above every unfinished beam (scored at its
            next length), as the NMT toolkits do; only ended beams are returned.
            Faster, above all for a weak model whose beams wander to
            `max_length`. Without a length penalty the result is the same; with
            one, a longer beam that would have ended later and won is lost.
        no_repeat_ngram_size: n > 0: no n-gram of n ids comes twice in a row's
            ids (the start id or prompt included); 0 allows every repeat.
        repetition_penalty: an id already in the row has its logit divided by
            this where positive, multiplied where negative (> 0; 1 changes
            nothing, above 1 discourages repeats).
        suppress_ids: ids never generated (e.g. the unknown token's).
        max_length_ratio: r > 0 (a seq2seq model, with an `end_id`): a row
            writes at most `ceil(r * its source ids)` ids (at least one)
            before its `end_id`, which comes there at the latest; `max_length`
            still holds. 0: no limit but `max_length`.
        target_prefix: a seq2seq model's translation prefixes `(B, P)`, ids
            right-padded with 0 (a row of zeros: none): each row's decoding
            continues its prefix, which follows the start id in the result.
            Its ids are given, not chosen: they add nothing to the score.
        required_ids: ids `(B, M)` (0: none) each row must write before its
            `end_id`, e.g. the placeholder tokens of its source
            (`keras_seq.data.placeholders`): `end_id` is held back until the
            row holds every one (a row that reaches `max_length` or its
            `max_length_ratio` limit ends there all the same). The weakest
            lexical constraint: the ids may come anywhere, each at the place
            the model finds likeliest, and no score changes.

    Returns:
        int ids `(B, max_length)`; with `num_return_sequences > 1`, ids
        `(B, n, max_length)` and their float32 scores `(B, n)`, as a tuple
        (the summed log-probabilities of the generated ids, divided by the
        length penalty for beam search).

    Raises:
        ValueError: for a model that lacks the decoding contract (naming what
            it lacks), on a bad strategy or parameter, a prompt longer than
            `max_length`, an `end_id` or `start_id` outside the vocabulary, or a
            seed outside int32.
    """
    contract.require(model, _owner(model))
    if isinstance(inputs, (list, tuple)):  # nested lists of ids, not a structure of tensors
        inputs = _id_array(model, inputs)
    inputs = keras.tree.map_structure(ops.convert_to_tensor, inputs)
    ids = model.decoding_input_ids(inputs)
    given = {"target_prefix": target_prefix, "required_ids": required_ids}  # per-row ids: inputs, not settings
    given = {
        name: ops.convert_to_tensor(_id_array(model, x) if isinstance(x, (list, tuple)) else x)
        for name, x in given.items()
        if x is not None
    }
    target_prefix, required_ids = given.get("target_prefix"), given.get("required_ids")
    check_generate_arguments(
        model,
        ids,
        max_length,
        strategy,
        temperature,
        k,
        p,
        num_beams,
        end_id,
        num_return_sequences,
        min_length,
        start_id,
        seed,
        length_penalty,
        early_stopping,
        no_repeat_ngram_size,
        repetition_penalty,
        suppress_ids,
        max_length_ratio,
        target_prefix,
        required_ids,
    )
    inputs = keras.tree.map_structure(lambda x: ops.cast(x, "int32") if x is ids else x, inputs)
    seed = int(seed) if seed is not None else int(keras.random.randint((), 0, 2**30, seed=None))
    settings = dict(
        max_length=int(max_length),
        strategy=strategy,
        temperature=float(temperature),
        k=min(int(k), model.decoding_vocabulary_size),  # one compiled decoder for every k past V
        p=float(p),
        num_beams=int(num_beams),
        length_penalty=float(length_penalty),
        end_id=None if end_id is None else int(end_id),
        start_id=int(start_id),
        num_return_sequences=int(num_return_sequences),
        min_length=int(min_length),
        early_stopping=bool(early_stopping),
        no_repeat_ngram_size=int(no_repeat_ngram_size),
        repetition_penalty=float(repetition_penalty),
        suppress_ids=tuple(sorted({int(i) for i in np.ravel(np.asarray(suppress_ids, dtype=object))})),
        max_length_ratio=float(max_length_ratio),
    )
    names = tuple(given)
    extra = tuple(ops.cast(x, "int32") for x in given.values())
    shapes = tuple(tuple(x.shape) for x in keras.tree.flatten((inputs, extra)))
    key = (tuple(sorted(settings.items())), names, shapes)

    def decoding(inputs, seed, *extra):
        return decode(model, inputs, seed, **dict(zip(names, extra)), **settings)

    compiled = model.compiled_decoder(key, lambda: backend.compile_for_inference(model, decoding))
    ids, scores = compiled(inputs, backend.decoding_seed(seed), *extra)
    if num_return_sequences == 1:
        return ids[:, 0]
    return ids, scores


# `decode`'s settings left out take `generate`'s defaults (the seed is `decode`'s own argument). One more is
# `decode`'s alone: `length_limit`, an int32 scalar at most `max_length` where the decoding stops, set at run time
# (a SavedModel's `max_length` option) without a new id buffer shape; None stops at `max_length`.
_GENERATE_DEFAULTS = {
    **{
        name: parameter.default
        for name, parameter in inspect.signature(generate).parameters.items()
        if parameter.default is not inspect.Parameter.empty and name != "seed"
    },
    "length_limit": None,
}

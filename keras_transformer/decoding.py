"""Greedy and beam search, §6.1, run in the TensorFlow graph with the incremental cache.

The encoder runs once; the decoder runs one position per step, reading and writing the
preallocated cache of every self-attention layer. The loop compiles with XLA
(`jit_compile=True`); an int `max_length` makes every shape static. Outputs stop at eos; a
sentence also stops at its own bound, source length + `extra_length` (the paper's +50), and at
`max_length`.
"""

import typing
import weakref

import tensorflow as tf

from keras_transformer.ids import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.layers.attention import MASK_VALUE

NEG_INF = MASK_VALUE  # the log-probability of an impossible hypothesis
_COMPILED = weakref.WeakKeyDictionary()  # model -> {settings: tf.function}


def length_penalty(length, alpha):
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha, |Y| counting the generated tokens with eos."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def encode(model, source_ids):
    """The encoder output [B, S, d_model] and the source padding mask [B, S], computed once."""
    source_mask = tf.not_equal(source_ids, PAD_ID)
    memory = model.encoder(
        model.embedding(source_ids, mode="source"), padding_mask=source_mask, training=False
    )
    return memory, source_mask


def encoder_decoder_attention(model, source_ids, target_ids):
    """The encoder-decoder attention weights (§3.2.3) while the decoder reads `target_ids`
    (bos, then a translation): one float32 [B, H, T, S] per decoder layer."""
    memory, source_mask = encode(model, tf.convert_to_tensor(source_ids, tf.int32))
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    _, weights = model.decoder(
        model.embedding(target_ids, mode="target"),
        memory,
        target_padding_mask=tf.not_equal(target_ids, PAD_ID),
        source_padding_mask=source_mask,
        return_attention_scores=True,
        training=False,
    )
    return weights


def alignment(model, source_ids, tokens):
    """Where the decoder looked while producing `tokens` [B, L] (a translation of source_ids
    [B, S], 0 after eos): the last decoder layer's encoder-decoder attention averaged over its
    heads while it reads bos + tokens, float32 [B, T, S] with T the longest translation (eos
    included); rows of real tokens sum to 1, rows after eos and padding columns are 0."""
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(tokens, PAD_ID), tf.int32), axis=1)
    tokens = tokens[:, : tf.reduce_max(tf.concat([lengths, [0]], 0))]
    target_in = tf.concat([tf.fill([tf.shape(tokens)[0], 1], BOS_ID), tokens[:, :-1]], 1)
    weights = encoder_decoder_attention(model, source_ids, target_in)[-1]
    real = tf.cast(tf.not_equal(tokens, PAD_ID), tf.float32)[:, :, None]
    return tf.reduce_mean(weights, axis=1) * real


class StepState(typing.NamedTuple):
    """A step function's state: `history`, what each step writes (the self-attention caches),
    one row per hypothesis, reordered with the beams every step; and `context`, what the steps
    only read (the source's projected keys and values, its mask), one row per sentence,
    gathered only when ended sentences leave the batch."""

    history: typing.Any
    context: typing.Any


def model_step_function(model, memory, source_mask, max_length=None, beam_size=1):
    """A step function over the model's decoder cache, and its initial StepState.

    step(tokens [N], state, t) -> (float32 log-probabilities [N, V], state): the decoder reads
    the token at position t and predicts position t + 1, for N = `beam_size` hypotheses (rows)
    of each sentence of the memory [B, S, d_model]. With an int `max_length` the
    self-attention caches are preallocated for it (static shapes, for XLA); with None they grow
    one position a step, so that each step reads and copies only the positions written.
    """
    full_cache = model.decoder.build_cache(memory, max_length, beam_size)
    history = [layer["self"] for layer in full_cache]
    context = {"cross": [layer["cross"] for layer in full_cache], "source_mask": source_mask}
    projection = model.embedding.output_projection()  # once, outside the loop

    def step(tokens, state, t):
        x = model.embedding(tokens[:, None], mode="target")
        cache = [{"self": s, "cross": c} for s, c in zip(state.history, state.context["cross"])]
        out, cache = model.decoder(
            x,
            None,
            source_padding_mask=state.context["source_mask"],
            cache=cache,
            cache_index=None if max_length is None else t,
            training=False,
        )
        logits = model.embedding(out[:, 0], mode="logits", projection=projection)
        history = [layer["self"] for layer in cache]
        return tf.nn.log_softmax(logits), StepState(history, state.context)

    return step, StepState(history, context)


def _prepare(model, source_ids, max_length, extra_length, min_length=0, target_prefix=None):
    """int32 source ids, the batch size, the loop length L, each sentence's own bound
    min(source length + extra_length, L), and each sentence's least length before eos:
    `min_length`, or 0 for an empty source (eos alone). A sentence's target prefix, when
    longer than its source, sets its bound instead (prefix length + extra_length): the prefix
    is the user's, and the output holds it whole up to the model's max_length."""
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    source_lengths = lengths = _lengths(source_ids)
    width = tf.shape(source_ids)[1]
    if target_prefix is not None:
        prefix = tf.convert_to_tensor(target_prefix, tf.int32)
        prefix = tf.reshape(prefix, [tf.shape(source_ids)[0], -1])
        lengths = tf.maximum(lengths, _lengths(prefix))
        width = tf.maximum(width, tf.shape(prefix)[1])
    if max_length is None:
        max_length = tf.minimum(width + extra_length, model.config.max_length)
    else:  # a Python int keeps the buffers' shapes static
        max_length = min(max_length, model.config.max_length)
    limits = tf.minimum(lengths + extra_length, max_length)
    min_lengths = tf.where(source_lengths > 1, min_length, 0)
    return source_ids, _batch_size(source_ids), max_length, limits, min_lengths


def _lengths(ids):
    """The non-padding ids of each row of ids [B, T], int32 [B]."""
    return tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), axis=1)


def _allowed(log_probs, t, min_lengths=None):
    """log_probs [N, V] with pad and bos, never valid outputs, made impossible, and eos too in
    the rows whose output may not end at step t (t < min_lengths [N])."""
    vocab_size = log_probs.shape[-1] or tf.shape(log_probs)[-1]  # static: the masks fold away
    never = tf.one_hot([PAD_ID, BOS_ID], vocab_size, on_value=NEG_INF, off_value=0.0)
    log_probs = log_probs + tf.reduce_sum(never, axis=0)
    if min_lengths is None:
        return log_probs

    def forbid_eos():
        too_early = tf.cast(t < min_lengths, log_probs.dtype)[:, None]
        eos = tf.one_hot(EOS_ID, vocab_size, on_value=NEG_INF, off_value=0.0)
        return log_probs + too_early * eos

    # Only the first steps need it (one, by default): the others skip two passes over [N, V].
    return tf.cond(t < tf.reduce_max(min_lengths), forbid_eos, lambda: log_probs)


def _padded_prefix(target_prefix, batch_size):
    """int32 target prefix ids [B, P + 1] (0-padded, so that column t is 0 once a prefix has
    ended; a last 0 column so that P + 1 >= 1), or None without a prefix."""
    if target_prefix is None:
        return None
    prefix = tf.reshape(tf.convert_to_tensor(target_prefix, tf.int32), [batch_size, -1])
    return tf.pad(prefix, [[0, 0], [0, 1]])


def _forced(log_probs, t, prefix):
    """log_probs [N, V] with every token but prefix[:, t] made impossible in the rows whose
    prefix [N, P + 1] (`_padded_prefix`) has a token at t: the output starts with the prefix,
    whose own log-probabilities count in the score."""
    column = tf.gather(prefix, tf.minimum(t, tf.shape(prefix)[1] - 1), axis=1)
    vocab_size = log_probs.shape[-1] or tf.shape(log_probs)[-1]
    only_column = tf.one_hot(column, vocab_size, on_value=0.0, off_value=NEG_INF)
    return log_probs + tf.where(tf.not_equal(column, PAD_ID)[:, None], only_column, 0.0)


def _batch_size(source_ids):
    """The static batch size when known (shapes then stay equal through the loop), else a tensor."""
    return source_ids.shape[0] if source_ids.shape[0] is not None else tf.shape(source_ids)[0]


def _write_column(buffer, values, t):
    """buffer [..., L] with column t replaced by values [...] (static shape)."""
    column = tf.range(tf.shape(buffer)[-1]) == t
    return tf.where(column, values[..., None], buffer)


class GreedyState(typing.NamedTuple):
    """The loop state of greedy search over the sentences still in the batch: `step` t (the
    decoder reads position t), `last` [A] the tokens at t, `finished` [A] whether each has
    ended, `tokens` [A, L] the output so far, `scores` [A] its summed log-probabilities, `cache`
    the step function's StepState, `sentences` what each sentence keeps (`_sentences`), and
    `results` the outputs (tokens [B, L], scores [B]) of the sentences that left."""

    step: tf.Tensor
    last: tf.Tensor
    finished: tf.Tensor
    tokens: tf.Tensor
    scores: tf.Tensor
    cache: StepState
    sentences: dict
    results: tuple


def _sentences(batch_size, limits, min_lengths, prefix):
    """What each sentence keeps through a search, one row per sentence, so that a sentence's
    rows leave the batch together: its `index` in the batch, its length bound `limit`, and its
    `min_length` and `prefix` (`_padded_prefix`) where given."""
    sentences = {"index": tf.range(batch_size), "limit": limits}
    if min_lengths is not None:
        sentences["min_length"] = min_lengths
    if prefix is not None:
        sentences["prefix"] = prefix
    return sentences


def _rows(sentences, beam_size):
    """The rows [A * K] of the hypotheses of sentences [A] (the beams of a sentence adjacent)."""
    return tf.reshape(sentences[:, None] * beam_size + tf.range(beam_size), [-1])


def _record(results, index, ended, values):
    """`results` (tensors [B, ...]) with the rows of the `ended` sentences, whose indices in the
    batch are `index` [A], set to their `values` (tensors [A, ...])."""
    where = tf.boolean_mask(index, ended)[:, None]
    return tf.nest.map_structure(
        lambda r, v: tf.tensor_scatter_nd_update(r, where, tf.boolean_mask(v, ended)),
        results,
        values,
    )


def _staying(ended):
    """The positions [A'] of the sentences that have not ended."""
    return tf.cast(tf.where(~ended)[:, 0], tf.int32)


def _gather_if(any_ended, structure, rows):
    """`structure`'s rows, gathered only when a sentence has ended (else left as they are)."""
    return tf.cond(
        any_ended,
        lambda: tf.nest.map_structure(lambda x: tf.gather(x, rows), structure),
        lambda: structure,
    )


def _search(cond, body, start, outputs, static_shapes):
    """Runs a search's loop from `start`: `outputs` (a function of a state) of its end state
    with static shapes; else the `results` in which each sentence recorded its outputs as it
    left the batch (starting as `outputs(start)`)."""
    if static_shapes:
        return outputs(tf.while_loop(cond, lambda s: (body(s),), (start,))[0])
    start = type(start)(*start[:-1], outputs(start))  # `results` comes last
    return tf.while_loop(cond, lambda s: (body(s),), (start,), (_free_rows(start),))[0].results


def _free_rows(state):
    """Shape invariants of a loop state whose batch shrinks: the first axis (the rows) of every
    tensor is free but in `results`, and the step function's history (growing caches) keeps
    only its last axis (the depth)."""

    def free(x, kept):  # x's shape with all but its last `kept` axes free
        dims = x.shape.as_list()
        return tf.TensorShape([None] * (len(dims) - kept) + dims[len(dims) - kept :])

    invariants = tf.nest.map_structure(lambda x: free(x, max(x.shape.rank - 1, 0)), state)
    history = tf.nest.map_structure(lambda x: free(x, 1), state.cache.history)
    results = tf.nest.map_structure(lambda x: x.shape, state.results)
    cache = StepState(
        history, invariants.cache.context
    )  # the states end: cache, sentences, results
    return type(state)(*invariants[:-3], cache, invariants.sentences, results)


def most_likely(log_probs, t):
    """Greedy search's choice: the most likely token of each row of log_probs [N, V]."""
    del t
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


class Sampling(typing.NamedTuple):
    """Settings of sampling: `temperature` divides the log-probabilities (0: greedy search),
    `top_k` keeps the k most likely tokens, `top_p` the nucleus of probability p, and `seed`
    (an int, or [2] ints) makes the draws reproducible."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def check(self):
        """The settings, refused with a message naming them when out of range."""
        if (
            self.temperature < 0
            or (self.top_k is not None and self.top_k < 1)
            or (self.top_p is not None and not 0 < self.top_p <= 1)
        ):
            raise ValueError(
                f"sampling needs temperature >= 0, top_k >= 1 and 0 < top_p <= 1; got "
                f"temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}"
            )
        return self


def sampled(temperature, top_k, top_p, seed):
    """Sampling's choice at step t: a token drawn from each row of log_probs [N, V] divided by
    `temperature`, restricted to the `top_k` most likely tokens and to the nucleus, the fewest
    most likely tokens whose probability reaches `top_p` (Holtzman et al., 2020). The draw is a
    function of (seed [2], t) and of the rows still in the batch (ended sentences leave it
    without XLA), so a seed reproduces the translations of a batch."""

    def choose(log_probs, t):
        logits = log_probs / temperature
        if top_k is not None:
            kth_best = tf.math.top_k(logits, top_k).values[:, -1:]
            logits = tf.where(logits < kth_best, NEG_INF, logits)
        if top_p is not None:
            descending = tf.sort(logits, direction="DESCENDING")
            before = tf.cumsum(tf.nn.softmax(descending), axis=-1, exclusive=True)
            least_kept = tf.reduce_min(
                tf.where(before < top_p, descending, -NEG_INF), axis=-1, keepdims=True
            )
            logits = tf.where(logits < least_kept, NEG_INF, logits)
        draw = tf.random.stateless_categorical(logits, 1, seed=seed + tf.stack([0, t]))
        return tf.cast(draw[:, 0], tf.int32)

    return choose


def greedy_decode(
    step,
    state,
    batch_size,
    limits,
    max_length,
    min_lengths=None,
    choose=None,
    prefix=None,
    static_shapes=False,
):
    """Greedy search over `step`: ids [B, L] (0 after eos) and summed log-probabilities [B].
    Sentence b ends at eos, which is not chosen before step min_lengths[b], or at limits[b].
    `choose(log_probs, t)` picks each step's tokens (default `most_likely`; `sampled` samples).
    The output of sentence b starts with `prefix`[b] (`_padded_prefix`), if given.
    `state` is the step function's StepState, one row per sentence. Without `static_shapes`
    (for graphs run without XLA) an ended sentence leaves the batch, so that the steps compute
    only the sentences still going; with them (XLA) every step computes the whole batch.
    """
    choose = choose or most_likely

    def body(s):
        log_probs, cache = step(s.last, s.cache, s.step)
        log_probs = _allowed(log_probs, s.step, s.sentences.get("min_length"))
        if prefix is not None:
            log_probs = _forced(log_probs, s.step, s.sentences["prefix"])
        next_token = choose(log_probs, s.step)
        gained = tf.gather(log_probs, next_token, batch_dims=1)
        next_token = tf.where(s.finished, PAD_ID, next_token)
        s = GreedyState(
            step=s.step + 1,
            last=next_token,
            finished=s.finished | (next_token == EOS_ID) | (s.step + 1 >= s.sentences["limit"]),
            tokens=_write_column(s.tokens, next_token, s.step),
            scores=s.scores + tf.where(s.finished, 0.0, gained),
            cache=cache,
            sentences=s.sentences,
            results=s.results,
        )
        return s if static_shapes else _leave_greedy(s)

    def cond(s):
        return (s.step < max_length) & ~tf.reduce_all(s.finished)

    start = GreedyState(
        step=tf.constant(0),
        last=tf.fill([batch_size], BOS_ID),
        finished=tf.zeros([batch_size], tf.bool),
        tokens=tf.zeros([batch_size, max_length], tf.int32),
        scores=tf.zeros([batch_size], tf.float32),
        cache=state,
        sentences=_sentences(batch_size, limits, min_lengths, prefix),
        results=(),
    )
    return _search(cond, body, start, lambda s: (s.tokens, s.scores), static_shapes)


def _leave_greedy(s):
    """The state without its ended sentences, their outputs recorded in `results`."""
    results = _record(s.results, s.sentences["index"], s.finished, (s.tokens, s.scores))
    staying = _staying(s.finished)
    kept = tf.nest.map_structure(
        lambda x: tf.gather(x, staying), (s.last, s.finished, s.tokens, s.scores, s.sentences)
    )
    cache = _gather_if(tf.reduce_any(s.finished), s.cache, staying)
    return GreedyState(s.step, *kept[:4], cache, kept[4], results)


class BeamState(typing.NamedTuple):
    """The loop state of beam search (K beams per sentence) over the sentences still in the
    batch: `step` t; `last` [A, K] the alive hypotheses' tokens at t; `alive_tokens` [A, K, L]
    and `alive_log_probs` [A, K] the hypotheses still growing; `finished_tokens` [A, K, L] and
    `finished_scores` [A, K] the best ended ones (log P / lp), best first; `done` [A] sentences
    whose search has ended; `cache` the step function's StepState, one row per alive
    hypothesis; `sentences` what each sentence keeps (`_sentences`); `results` the n-best
    (ids [B, K, L], scores [B, K]) of the sentences that left."""

    step: tf.Tensor
    last: tf.Tensor
    alive_tokens: tf.Tensor
    alive_log_probs: tf.Tensor
    finished_tokens: tf.Tensor
    finished_scores: tf.Tensor
    done: tf.Tensor
    cache: StepState
    sentences: dict
    results: tuple


class Extensions(typing.NamedTuple):
    """The 2K best one-token extensions of a sentence's alive hypotheses: their log P [B, 2K],
    the alive hypothesis each extends (`parents`), the token added, the sequences [B, 2K, L],
    and whether each ends (eos, or the sentence's length bound)."""

    log_probs: tf.Tensor
    parents: tf.Tensor
    tokens: tf.Tensor
    sequences: tf.Tensor
    ending: tf.Tensor


def _extend(state, log_probs, limits, beam_size):
    """The 2K best extensions of the alive hypotheses, given the next-token log-probabilities
    [B, K, V]. Two K: even if K of them end, K remain to stay alive."""
    vocab_size = log_probs.shape[-1] or tf.shape(log_probs)[-1]  # static: top_k sees it
    candidates = tf.reshape(
        state.alive_log_probs[:, :, None] + log_probs, [-1, beam_size * vocab_size]
    )
    top_log_probs, top_indices = top_k(candidates, 2 * beam_size)
    parents, tokens = top_indices // vocab_size, top_indices % vocab_size
    sequences = _write_column(
        tf.gather(state.alive_tokens, parents, batch_dims=1), tokens, state.step
    )
    reachable = top_log_probs > NEG_INF / 2  # not an extension of an empty beam
    ending = reachable & ((tokens == EOS_ID) | (state.step + 1 >= limits)[:, None])
    return Extensions(top_log_probs, parents, tokens, sequences, ending)


def top_k(x, k, block=32):
    """tf.math.top_k of the rows of x [R, C]: the same values and indices (equal values: the
    lower index first), found in the k blocks of `block` columns with the largest maxima, which
    hold the k largest entries. Beam search's 2K best of K x V candidates take one pass over
    them this way: 2.50 -> 0.18 ms a step at batch 64 (benchmarks/README.md, the profile)."""
    columns = x.shape[-1]
    if columns is None or columns < 4 * k * block:  # too few blocks to gain anything
        return tf.math.top_k(x, k)
    padding = -columns % block
    x = tf.pad(x, [[0, 0], [0, padding]], constant_values=float("-inf")) if padding else x
    rows = tf.shape(x)[0]
    blocks = tf.reshape(x, [rows, -1, block])
    _, chosen = tf.math.top_k(tf.reduce_max(blocks, axis=-1), k)
    chosen = tf.sort(chosen, axis=-1)  # in column order, so that equal values keep theirs
    candidates = tf.reshape(tf.gather(blocks, chosen, batch_dims=1), [rows, k * block])
    values, positions = tf.math.top_k(candidates, k)
    return values, tf.gather(chosen, positions // block, batch_dims=1) * block + positions % block


def _keep_finished(state, extensions, alpha, beam_size):
    """The K best of the finished hypotheses and the extensions that end now, scored
    log P(Y) / lp(Y). With beam size 1 only the best extension may finish (greedy search)."""
    may_finish = tf.range(2 * beam_size)[None, :] < (1 if beam_size == 1 else 2 * beam_size)
    finishing = extensions.ending & may_finish & ~state.done[:, None]
    ended_scores = tf.where(
        finishing, extensions.log_probs / length_penalty(state.step + 1, alpha), NEG_INF
    )
    scores, chosen = tf.math.top_k(tf.concat([state.finished_scores, ended_scores], 1), beam_size)
    tokens = tf.gather(
        tf.concat([state.finished_tokens, extensions.sequences], 1), chosen, batch_dims=1
    )
    return tokens, scores


def _keep_alive(extensions, beam_size):
    """The K best extensions that do not end: (tokens [B, K, L], log P [B, K], last tokens
    [B, K], and the beam [B, K] each extends)."""
    log_probs, survivors = tf.math.top_k(
        tf.where(extensions.ending, NEG_INF, extensions.log_probs), beam_size
    )
    tokens = tf.gather(extensions.sequences, survivors, batch_dims=1)
    last = tf.gather(extensions.tokens, survivors, batch_dims=1)
    return tokens, log_probs, last, tf.gather(extensions.parents, survivors, batch_dims=1)


def _search_ended(done, alive_log_probs, finished_scores, limits, alpha, beam_size):
    """Early termination: a sentence ends once it has K finished hypotheses and no alive one
    can beat the K-th (log-probabilities only fall and lp only grows, so the best an alive
    hypothesis can reach is its log P over lp(bound)), or once no hypothesis is alive. With beam
    size 1 the first finished hypothesis ends it."""
    full = finished_scores[:, -1] > NEG_INF / 2
    can_improve = alive_log_probs[:, 0] / length_penalty(limits, alpha) > finished_scores[:, -1]
    return (
        done
        | (full & ~can_improve if beam_size > 1 else full)
        | (alive_log_probs[:, 0] <= NEG_INF / 2)
    )


def beam_decode(
    step,
    state,
    batch_size,
    limits,
    max_length,
    beam_size,
    alpha,
    min_lengths=None,
    prefix=None,
    static_shapes=False,
):
    """Beam search over `step` (§6.1): GNMT length penalty, early termination.

    `state` is the step function's StepState: its history has one row per hypothesis
    (batch_size * beam_size rows, the beams of one sentence adjacent), its context one row per
    sentence. Each step ranks the 2K best extensions of the K
    alive hypotheses (`_extend`); those ending in eos (or at the sentence's bound) join the
    finished ones (`_keep_finished`), the K best others stay alive (`_keep_alive`) and the
    state's history follows them, and a sentence's search ends early when nothing alive can win
    (`_search_ended`). No hypothesis of sentence b ends in eos before step min_lengths[b]. Beam
    size 1 is greedy search. With `prefix` (`_padded_prefix`) every hypothesis of sentence b
    starts with prefix[b]. Without `static_shapes` (graphs run without XLA) a sentence whose
    search has ended leaves the batch; with them (XLA) every step computes the whole batch.
    Returns the n-best ids [B, K, L] (0 after eos) and their scores [B, K], best first.
    """
    k = beam_size

    def body(s):
        first_rows = tf.range(tf.shape(s.last)[0])[:, None] * k  # each sentence's first beam
        log_probs, cache = step(tf.reshape(s.last, [-1]), s.cache, s.step)
        min_length = s.sentences.get("min_length")
        log_probs = _allowed(
            log_probs, s.step, None if min_length is None else tf.repeat(min_length, k)
        )
        if prefix is not None:
            log_probs = _forced(log_probs, s.step, tf.repeat(s.sentences["prefix"], k, axis=0))
        log_probs = tf.reshape(log_probs, [-1, k, log_probs.shape[-1] or tf.shape(log_probs)[-1]])
        limit = s.sentences["limit"]
        extensions = _extend(s, log_probs, limit, k)
        finished_tokens, finished_scores = _keep_finished(s, extensions, alpha, k)
        alive_tokens, alive_log_probs, last, parents = _keep_alive(extensions, k)
        done = _search_ended(s.done, alive_log_probs, finished_scores, limit, alpha, k)
        rows = tf.reshape(parents + first_rows, [-1])  # the row each alive hypothesis extends
        if static_shapes:
            history = tf.nest.map_structure(lambda c: tf.gather(c, rows), cache.history)
            cache = StepState(history, cache.context)
        s = BeamState(
            s.step + 1,
            last,
            alive_tokens,
            alive_log_probs,
            finished_tokens,
            finished_scores,
            done,
            cache,
            s.sentences,
            s.results,
        )
        return s if static_shapes else _leave_beam(s, rows, k)

    def cond(s):
        return (s.step < max_length) & ~tf.reduce_all(s.done)

    start = BeamState(
        step=tf.constant(0),
        last=tf.fill([batch_size, k], BOS_ID),
        alive_tokens=tf.zeros([batch_size, k, max_length], tf.int32),
        alive_log_probs=tf.tile(
            [[0.0] + [NEG_INF] * (k - 1)], [batch_size, 1]
        ),  # the first step extends beam 0
        finished_tokens=tf.zeros([batch_size, k, max_length], tf.int32),
        finished_scores=tf.fill([batch_size, k], NEG_INF),
        done=tf.zeros([batch_size], tf.bool),
        cache=state,
        sentences=_sentences(batch_size, limits, min_lengths, prefix),
        results=(),
    )
    return _search(
        cond, body, start, lambda s: (s.finished_tokens, s.finished_scores), static_shapes
    )


def _leave_beam(s, rows, k):
    """The state without the sentences whose search has ended, their n-best recorded in
    `results`; the history follows the alive hypotheses (`rows`), in one gather."""
    results = _record(
        s.results, s.sentences["index"], s.done, (s.finished_tokens, s.finished_scores)
    )
    staying = _staying(s.done)
    kept = tf.nest.map_structure(
        lambda x: tf.gather(x, staying),
        (s.last, s.alive_tokens, s.alive_log_probs, s.finished_tokens, s.finished_scores, s.done),
    )
    history = tf.nest.map_structure(
        lambda c: tf.gather(c, tf.gather(rows, _rows(staying, k))), s.cache.history
    )
    context = _gather_if(tf.reduce_any(s.done), s.cache.context, staying)
    sentences = tf.nest.map_structure(lambda x: tf.gather(x, staying), s.sentences)
    return BeamState(s.step, *kept, StepState(history, context), sentences, results)


def _greedy(
    model,
    source_ids,
    max_length,
    extra_length,
    use_cache,
    min_length,
    choose=None,
    target_prefix=None,
    static_shapes=False,
):
    source_ids, batch_size, max_length, limits, min_lengths = _prepare(
        model, source_ids, max_length, extra_length, min_length, target_prefix
    )
    if use_cache:
        memory, source_mask = encode(model, source_ids)
        step, state = model_step_function(
            model, memory, source_mask, max_length if static_shapes else None
        )
    else:
        step, state = _recomputing_step(model, source_ids, batch_size, max_length)
    prefix = _padded_prefix(target_prefix, batch_size)
    return greedy_decode(
        step, state, batch_size, limits, max_length, min_lengths, choose, prefix, static_shapes
    )


def sample_ids(
    model,
    source_ids,
    seed,
    sampling,
    max_length,
    extra_length,
    min_length=1,
    target_prefix=None,
    static_shapes=False,
):
    """sample without its own tf.function, for use inside another (the Translator); with
    `static_shapes` for XLA."""
    choose = None
    if sampling.temperature > 0:
        seed = tf.broadcast_to(tf.cast(seed, tf.int32), [2])
        choose = sampled(sampling.temperature, sampling.top_k, sampling.top_p, seed)
    return _greedy(
        model,
        source_ids,
        max_length,
        extra_length,
        True,
        min_length,
        choose,
        target_prefix,
        static_shapes,
    )


def _recomputing_step(model, source_ids, batch_size, max_length):
    """The way the official tutorial decodes: the whole model on the whole prefix, every step."""

    def step(tokens, state, t):
        prefix = _write_column(state.history, tokens, t)
        target = prefix[:, : t + 1]
        logits = model({"source": state.context, "target": target}, training=False)[:, -1]
        return tf.nn.log_softmax(logits), StepState(prefix, state.context)

    return step, StepState(tf.zeros([batch_size, max_length], tf.int32), source_ids)


def beam_ids(
    model,
    source_ids,
    beam_size,
    alpha,
    max_length,
    extra_length,
    min_length=1,
    target_prefix=None,
    static_shapes=False,
):
    """beam_search without its own tf.function, for use inside another (the Translator); with
    `static_shapes` for XLA."""
    source_ids, batch_size, max_length, limits, min_lengths = _prepare(
        model, source_ids, max_length, extra_length, min_length, target_prefix
    )
    memory, source_mask = encode(model, source_ids)
    step, state = model_step_function(
        model, memory, source_mask, max_length if static_shapes else None, beam_size
    )
    prefix = _padded_prefix(target_prefix, batch_size)
    return beam_decode(
        step,
        state,
        batch_size,
        limits,
        max_length,
        beam_size,
        alpha,
        min_lengths,
        prefix,
        static_shapes,
    )


def _compiled(model, function, jit_compile, tensors, **settings):
    """One tf.function per model, settings and names of the tensor arguments it takes beside
    the source (`tensors`: one function per set, which tracing needs), traced once and reused.
    It holds the model weakly, so the cache never keeps a model alive."""
    per_model = _COMPILED.setdefault(model, {})
    key = (function.__name__, jit_compile, tuple(tensors), tuple(sorted(settings.items())))
    if key not in per_model:
        model_ref = weakref.ref(model)

        def decode(source_ids, max_length, **tensors):
            return function(
                model_ref(),
                source_ids,
                max_length=max_length,
                static_shapes=jit_compile,
                **tensors,
                **settings,
            )

        per_model[key] = tf.function(decode, jit_compile=jit_compile, reduce_retracing=True)
    return per_model[key]


def greedy_search(
    model,
    source_ids,
    max_length=None,
    extra_length=50,
    use_cache=True,
    jit_compile=False,
    min_length=1,
    target_prefix=None,
):
    """Greedy decoding of int32 source ids [B, S] (ending with eos, 0 = padding).

    Returns ids [B, L] int32 (no bos; eos then 0 after it). Each sentence is bounded by its
    source length + `extra_length` and by `max_length` (default: S + extra_length; pass a
    Python int for a static, XLA-compilable loop), never beyond `config.max_length`. A
    non-empty source gets at least `min_length` tokens before eos (default 1: never an empty
    translation; 0 allows one). `use_cache=False` recomputes the whole prefix each step (the
    official tutorial's method). `target_prefix`, int32 ids [B, P] (0-padded; no bos, no eos),
    makes each output start with its row (cut at the sentence's bound) and go on from there; a
    row of zeros changes nothing. The prefix's log-probabilities count in the score.
    """
    tensors = _prefix_argument(target_prefix)
    decode = _compiled(
        model,
        _greedy,
        jit_compile,
        tensors,
        extra_length=extra_length,
        use_cache=use_cache,
        min_length=min_length,
    )
    return decode(source_ids, max_length=max_length, **tensors)[0]


def beam_search(
    model,
    source_ids,
    beam_size=4,
    alpha=0.6,
    max_length=None,
    extra_length=50,
    jit_compile=False,
    min_length=1,
    target_prefix=None,
):
    """Beam search of §6.1 (beam 4, alpha 0.6) on int32 source ids [B, S].

    Returns ids [B, beam_size, L] int32 and scores [B, beam_size] float32 (log-probability
    over the GNMT length penalty), best first. Bounds, `min_length` and `target_prefix` (every
    hypothesis starts with its sentence's prefix) as for `greedy_search`.
    """
    tensors = _prefix_argument(target_prefix)
    decode = _compiled(
        model,
        beam_ids,
        jit_compile,
        tensors,
        beam_size=beam_size,
        alpha=alpha,
        extra_length=extra_length,
        min_length=min_length,
    )
    return decode(source_ids, max_length=max_length, **tensors)


def _prefix_argument(target_prefix):
    """The keyword argument that passes a target prefix to a `_compiled` search, if any."""
    if target_prefix is None:
        return {}
    return {"target_prefix": tf.convert_to_tensor(target_prefix, tf.int32)}


def sample(
    model,
    source_ids,
    temperature=1.0,
    top_k=None,
    top_p=None,
    seed=None,
    max_length=None,
    extra_length=50,
    jit_compile=False,
    min_length=1,
    target_prefix=None,
):
    """Translations of int32 source ids [B, S] drawn token by token from the model's
    distribution (as for back-translation, Edunov et al., 2018), with the cache, in the graph.

    `temperature` divides the log-probabilities (0: greedy search), `top_k` keeps the k most
    likely tokens, `top_p` the nucleus of probability p (both None: no filter). A given int
    `seed` (or [2] ints) gives the same translations of the same batch every call; None draws
    one. Returns ids [B, L] int32 and their summed log-probabilities under the model [B].
    Bounds, `min_length` and `target_prefix` as for `greedy_search`.
    """
    sampling = Sampling(float(temperature), top_k, top_p).check()
    if seed is None:
        seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
    tensors = {"seed": tf.convert_to_tensor(seed, tf.int32)} | _prefix_argument(target_prefix)
    decode = _compiled(
        model,
        sample_ids,
        jit_compile,
        tensors,
        sampling=sampling,
        extra_length=extra_length,
        min_length=min_length,
    )
    return decode(source_ids, max_length=max_length, **tensors)

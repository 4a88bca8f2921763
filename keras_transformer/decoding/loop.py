"""The one loop that runs any `Search` in the TensorFlow graph, and the shrinking batch.

The encoder runs once; the decoder runs one position per step through the step function
(`model_step`), the constraints apply to its logits (`constraints`), and the search chooses the
next tokens from them and each row's log normaliser (`search.NextTokenLogits`). Outputs stop at
eos; a sentence also stops at its own bound, source length + `extra_length` (the paper's +50),
and at `max_length`. Without static shapes (graphs run without XLA, as TensorFlow Serving runs
them) the caches grow one position a step and a sentence whose search has ended leaves the
batch, its outputs recorded at its place; with them (XLA, an int `max_length`) the caches are
preallocated and every step computes the whole batch.
"""

import typing

import tensorflow as tf

from keras_transformer.decoding import constraints
from keras_transformer.decoding.model_step import (
    StepState,
    cached_step_function,
    encode,
    recomputing_step_function,
)
from keras_transformer.decoding.search import NextTokenLogits
from keras_transformer.ids import BOS_ID


class LoopState(typing.NamedTuple):
    """The loop's state over the sentences still in the batch: `step` t (the decoder reads
    position t), `last` [N] the tokens at t (N = sentences x beam_size rows), the search's
    `hypotheses`, `cache` the step function's StepState, `sentences` what each sentence keeps
    (`constraints.sentences`), and `results` the outputs (ids [B, K, L], scores [B, K]) of the
    sentences that left."""

    step: tf.Tensor
    last: tf.Tensor
    hypotheses: typing.Any
    cache: StepState
    sentences: dict
    results: tuple


def search_model(
    model,
    source_ids,
    search,
    max_length=None,
    extra_length=50,
    min_length=1,
    target_prefix=None,
    static_shapes=False,
    use_cache=True,
    encoded=None,
):
    """The n-best ids [B, K, L] and scores [B, K] of `search` on int32 source ids [B, S]
    (K = search.beam_size), in the caller's graph (the Translator's, or `decoding.run_search`'s
    tf.function). `static_shapes` for XLA; `use_cache=False` recomputes the whole prefix each
    step (the official tutorial's method). Bounds, `min_length` and `target_prefix` as
    `greedy_search` documents them. `encoded`: `model_step.encode`'s (memory, source mask) of
    source_ids, where the caller computed them (the Translator, which reuses them for the
    alignment)."""
    batch = constraints.prepare(
        model, source_ids, max_length, extra_length, min_length, target_prefix
    )
    k = search.beam_size
    if use_cache:
        memory, source_mask = encoded or encode(model, batch.source_ids)
        fixed = batch.max_length if static_shapes else None
        step, state = cached_step_function(model, memory, source_mask, fixed, k)
    else:
        step, state = recomputing_step_function(
            model, batch.source_ids, batch.batch_size, batch.max_length, k
        )
    return search_over_steps(
        search,
        step,
        state,
        batch.batch_size,
        batch.limits,
        batch.max_length,
        batch.min_lengths,
        batch.prefix,
        static_shapes,
    )


def search_over_steps(
    search,
    step,
    state,
    batch_size,
    limits,
    max_length,
    min_lengths=None,
    prefix=None,
    static_shapes=False,
):
    """Runs `search` over the step function `step` (`model_step.cached_step_function`: each
    row's next-token logits, or log-probabilities) from its StepState `state` (history: one row
    per hypothesis; context: one per sentence) for `batch_size` sentences. Sentence b ends
    when the search says so, at the latest at limits[b] tokens or `max_length`; eos is not
    allowed before step min_lengths[b], and its output starts with `prefix`[b] (int32 [B, P +
    1], 0-padded, a last 0 column) if given.
    Returns the n-best ids [B, K, L] (0 after eos) and scores [B, K], best first."""
    k = search.beam_size

    def body(s):
        logits, cache = step(s.last, s.cache, s.step)
        scores = NextTokenLogits(
            constraints.constrain(logits, s.step, s.sentences, k),
            tf.reduce_logsumexp(logits, axis=-1),  # before the constraints: the whole vocabulary
        )
        hypotheses, last, parents = search.advance_logits(
            s.hypotheses, scores, s.step, s.sentences["limit"]
        )
        rows = None  # the row each hypothesis extends, when hypotheses move between rows
        if parents is not None:
            rows = tf.reshape(parents + tf.range(tf.shape(parents)[0])[:, None] * k, [-1])
        if static_shapes and rows is not None:
            cache = cache._replace(
                history=tf.nest.map_structure(lambda c: tf.gather(c, rows), cache.history)
            )
        s = s._replace(step=s.step + 1, last=last, hypotheses=hypotheses, cache=cache)
        return s if static_shapes else _leave(search, s, rows)

    def cond(s):
        return (s.step < max_length) & ~tf.reduce_all(search.ended(s.hypotheses))

    start = LoopState(
        step=tf.constant(0),
        last=tf.fill([batch_size * k], BOS_ID),
        hypotheses=search.start(batch_size, max_length),
        cache=state,
        sentences=constraints.sentences(batch_size, limits, min_lengths, prefix),
        results=(),
    )
    if static_shapes:
        end = tf.while_loop(cond, lambda s: (body(s),), (start,))[0]
        return search.outputs(end.hypotheses)
    start = start._replace(results=search.outputs(start.hypotheses))
    end = tf.while_loop(cond, lambda s: (body(s),), (start,), (_free_rows(start),))[0]
    return end.results  # each sentence recorded its outputs as it left the batch


def _leave(search, s, rows):
    """The state without the sentences whose search has ended, their outputs recorded in
    `results`. The history follows the hypotheses (`rows`, if they moved) and the staying
    sentences in one gather; without `rows` it, and the context, are gathered only on the
    steps where a sentence leaves."""
    ended = search.ended(s.hypotheses)
    results = _record(s.results, s.sentences["index"], ended, search.outputs(s.hypotheses))
    staying = tf.cast(tf.where(~ended)[:, 0], tf.int32)
    k = search.beam_size
    staying_rows = staying if k == 1 else _rows(staying, k)
    any_ended = tf.reduce_any(ended)
    if rows is None:
        cache = _gather_if(any_ended, s.cache, staying)
    else:
        history_rows = tf.gather(rows, staying_rows)
        history = tf.nest.map_structure(lambda c: tf.gather(c, history_rows), s.cache.history)
        cache = StepState(history, _gather_if(any_ended, s.cache.context, staying))
    hypotheses, sentences = tf.nest.map_structure(
        lambda x: tf.gather(x, staying), (s.hypotheses, s.sentences)
    )
    return s._replace(
        last=tf.gather(s.last, staying_rows),
        hypotheses=hypotheses,
        cache=cache,
        sentences=sentences,
        results=results,
    )


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


def _gather_if(any_ended, structure, rows):
    """`structure`'s rows, gathered only when a sentence has ended (else left as they are)."""
    return tf.cond(
        any_ended,
        lambda: tf.nest.map_structure(lambda x: tf.gather(x, rows), structure),
        lambda: structure,
    )


def _free_rows(state):
    """Shape invariants of a loop state whose batch shrinks: the first axis (the rows) of every
    tensor is free but in `results`, and the step function's history (growing caches) keeps
    only its last axis (the depth)."""

    def free(x, kept):  # x's shape with all but its last `kept` axes free
        dims = x.shape.as_list()
        return tf.TensorShape([None] * (len(dims) - kept) + dims[len(dims) - kept :])

    invariants = tf.nest.map_structure(
        lambda x: free(x, max(x.shape.rank - 1, 0)), state._replace(results=())
    )
    history = tf.nest.map_structure(lambda x: free(x, 1), state.cache.history)
    return invariants._replace(
        cache=invariants.cache._replace(history=history),
        results=tf.nest.map_structure(lambda x: x.shape, state.results),
    )

"""Greedy and beam search, §6.1, run in the TensorFlow graph with the incremental cache.

The encoder runs once; the decoder runs one position per step, reading and writing the
preallocated cache of every self-attention layer. The loop compiles with XLA
(`jit_compile=True`); an int `max_length` makes every shape static. Outputs stop at eos; a sentence also stops at its own bound,
source length + `extra_length` (the paper's +50), and at `max_length`.
"""

import weakref

import tensorflow as tf

from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID

NEG_INF = -1e9
_COMPILED = weakref.WeakKeyDictionary()  # model -> {settings: tf.function}


def length_penalty(length, alpha):
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha, |Y| counting the generated tokens with eos."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def encode(model, source_ids):
    """The encoder output [B, S, d_model] and the source padding mask [B, S], computed once."""
    source_mask = tf.not_equal(source_ids, PAD_ID)
    memory = model.encoder(model.embedding(source_ids, mode="source"), padding_mask=source_mask, training=False)
    return memory, source_mask


def encoder_decoder_attention(model, source_ids, target_ids):
    """The encoder-decoder attention weights (§3.2.3) while the decoder reads `target_ids`
    (bos, then a translation): one float32 [B, H, T, S] per decoder layer."""
    memory, source_mask = encode(model, tf.convert_to_tensor(source_ids, tf.int32))
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    _, weights = model.decoder(
        model.embedding(target_ids, mode="target"), memory, target_padding_mask=tf.not_equal(target_ids, PAD_ID),
        source_padding_mask=source_mask, return_attention_scores=True, training=False,
    )
    return weights


def model_step_function(model, memory, source_mask, max_length):
    """A step function over the model's decoder cache, and its initial state.

    step(tokens [N], state, t) -> (float32 log-probabilities [N, V], state): the decoder reads
    the token at position t and predicts position t + 1.
    """
    full_cache = model.decoder.build_cache(memory, max_length)
    cross = [layer["cross"] for layer in full_cache]
    state = [layer["self"] for layer in full_cache]

    def step(tokens, self_caches, t):
        x = model.embedding(tokens[:, None], mode="target")
        cache = [{"self": s, "cross": c} for s, c in zip(self_caches, cross)]
        out, cache = model.decoder(
            x, None, source_padding_mask=source_mask, cache=cache, cache_index=t, training=False
        )
        logits = model.embedding(out, mode="logits")[:, 0]
        return tf.nn.log_softmax(logits), [layer["self"] for layer in cache]

    return step, state


def _prepare(model, source_ids, max_length, extra_length):
    """int32 source ids, the batch size, the loop length L and each sentence's own bound
    min(source length + extra_length, L)."""
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
    if max_length is None:
        max_length = tf.minimum(tf.shape(source_ids)[1] + extra_length, model.config.max_length)
    else:  # a Python int keeps the buffers' shapes static
        max_length = min(max_length, model.config.max_length)
    limits = tf.minimum(source_lengths + extra_length, max_length)
    return source_ids, _batch_size(source_ids), max_length, limits


def _without_pad_and_bos(log_probs):
    """log_probs [..., V] with pad and bos, never valid outputs, made impossible."""
    never = tf.one_hot([PAD_ID, BOS_ID], tf.shape(log_probs)[-1], on_value=NEG_INF, off_value=0.0)
    return log_probs + tf.reduce_sum(never, axis=0)


def _batch_size(source_ids):
    """The static batch size when known (shapes then stay equal through the loop), else a tensor."""
    return source_ids.shape[0] if source_ids.shape[0] is not None else tf.shape(source_ids)[0]


def _write_column(buffer, values, t):
    """buffer [..., L] with column t replaced by values [...] (static shape)."""
    column = tf.range(tf.shape(buffer)[-1]) == t
    return tf.where(column, values[..., None], buffer)


def greedy_decode(step, state, batch_size, limits, max_length):
    """Greedy search over `step`: ids [B, L] (0 after eos) and summed log-probabilities [B]."""

    def body(t, last, finished, tokens, scores, state):
        log_probs, state = step(last, state, t)
        log_probs = _without_pad_and_bos(log_probs)
        next_token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        gained = tf.gather(log_probs, next_token, batch_dims=1)
        next_token = tf.where(finished, PAD_ID, next_token)
        scores += tf.where(finished, 0.0, gained)
        tokens = _write_column(tokens, next_token, t)
        finished |= (next_token == EOS_ID) | (t + 1 >= limits)
        return t + 1, next_token, finished, tokens, scores, state

    def cond(t, last, finished, *_):
        return (t < max_length) & ~tf.reduce_all(finished)

    start = (
        tf.constant(0),
        tf.fill([batch_size], BOS_ID),
        tf.zeros([batch_size], tf.bool),
        tf.zeros([batch_size, max_length], tf.int32),
        tf.zeros([batch_size], tf.float32),
        state,
    )
    _, _, _, tokens, scores, _ = tf.while_loop(cond, body, start)
    return tokens, scores


def beam_decode(step, state, batch_size, limits, max_length, beam_size, alpha):
    """Beam search over `step` (§6.1): GNMT length penalty, early termination.

    `state` holds tensors whose leading dimension is batch_size * beam_size (the beams of one
    sentence adjacent). Each step ranks the 2K best extensions of the K alive hypotheses; those
    ending in eos (or at the sentence's bound) join the finished ones, scored log P(Y) / lp(Y),
    and the K best others stay alive. A sentence ends (early termination) once it has K finished
    hypotheses and no alive one can beat the K-th: log-probabilities only fall and lp only
    grows, so the best an alive hypothesis can reach is its log P over lp(bound).
    Beam size 1 is greedy search: only the best extension can finish, and the first finished
    hypothesis ends the sentence. Returns the n-best ids [B, K, L] (0 after eos) and their
    scores [B, K], best first.
    """
    k = beam_size
    first_rows = tf.range(batch_size)[:, None] * k  # state row of each sentence's first beam
    may_finish = tf.range(2 * k)[None, :] < (1 if k == 1 else 2 * k)

    def body(t, last, alive_tokens, alive_log_probs, finished_tokens, finished_scores, done, state):
        log_probs, state = step(tf.reshape(last, [-1]), state, t)
        vocab_size = tf.shape(log_probs)[-1]
        log_probs = tf.reshape(_without_pad_and_bos(log_probs), [batch_size, k, vocab_size])
        candidates = alive_log_probs[:, :, None] + log_probs
        top_scores, top_indices = tf.math.top_k(tf.reshape(candidates, [batch_size, -1]), 2 * k)
        parents, tokens = top_indices // vocab_size, top_indices % vocab_size
        sequences = _write_column(tf.gather(alive_tokens, parents, batch_dims=1), tokens, t)

        reachable = top_scores > NEG_INF / 2  # not an extension of an empty beam
        ending = reachable & ((tokens == EOS_ID) | (t + 1 >= limits)[:, None])
        finishing = ending & may_finish & ~done[:, None]
        ended_scores = tf.where(finishing, top_scores / length_penalty(t + 1, alpha), NEG_INF)
        finished_scores, chosen = tf.math.top_k(tf.concat([finished_scores, ended_scores], 1), k)
        finished_tokens = tf.gather(tf.concat([finished_tokens, sequences], 1), chosen, batch_dims=1)

        alive_log_probs, survivors = tf.math.top_k(tf.where(ending, NEG_INF, top_scores), k)
        alive_tokens = tf.gather(sequences, survivors, batch_dims=1)
        last = tf.gather(tokens, survivors, batch_dims=1)
        rows = tf.reshape(tf.gather(parents, survivors, batch_dims=1) + first_rows, [-1])
        state = tf.nest.map_structure(lambda s: tf.gather(s, rows), state)
        full = finished_scores[:, -1] > NEG_INF / 2
        can_improve = alive_log_probs[:, 0] / length_penalty(limits, alpha) > finished_scores[:, -1]
        done |= (full & ~can_improve if k > 1 else full) | (alive_log_probs[:, 0] <= NEG_INF / 2)
        return t + 1, last, alive_tokens, alive_log_probs, finished_tokens, finished_scores, done, state

    def cond(t, *loop_state):
        done = loop_state[-2]
        return (t < max_length) & ~tf.reduce_all(done)

    start = (
        tf.constant(0),
        tf.fill([batch_size, k], BOS_ID),
        tf.zeros([batch_size, k, max_length], tf.int32),
        tf.tile([[0.0] + [NEG_INF] * (k - 1)], [batch_size, 1]),  # the first step extends beam 0
        tf.zeros([batch_size, k, max_length], tf.int32),
        tf.fill([batch_size, k], NEG_INF),
        tf.zeros([batch_size], tf.bool),
        state,
    )
    finished_tokens, finished_scores = tf.while_loop(cond, body, start)[4:6]
    return finished_tokens, finished_scores


def _greedy(model, source_ids, max_length, extra_length, use_cache):
    source_ids, batch_size, max_length, limits = _prepare(model, source_ids, max_length, extra_length)
    if use_cache:
        memory, source_mask = encode(model, source_ids)
        step, state = model_step_function(model, memory, source_mask, max_length)
    else:
        step, state = _recomputing_step(model, source_ids, batch_size, max_length)
    return greedy_decode(step, state, batch_size, limits, max_length)


def _recomputing_step(model, source_ids, batch_size, max_length):
    """The way the official tutorial decodes: the whole model on the whole prefix, every step."""

    def step(tokens, prefix, t):
        prefix = _write_column(prefix, tokens, t)
        target = prefix[:, : t + 1]
        logits = model({"source": source_ids, "target": target}, training=False)[:, -1]
        return tf.nn.log_softmax(logits), prefix

    return step, tf.zeros([batch_size, max_length], tf.int32)


def beam_ids(model, source_ids, beam_size, alpha, max_length, extra_length):
    """beam_search without its own tf.function, for use inside another (the Translator)."""
    source_ids, batch_size, max_length, limits = _prepare(model, source_ids, max_length, extra_length)
    memory, source_mask = encode(model, source_ids)
    tiled = [tf.repeat(x, beam_size, axis=0) for x in (memory, source_mask)]
    step, state = model_step_function(model, *tiled, max_length)
    return beam_decode(step, state, batch_size, limits, max_length, beam_size, alpha)


def _compiled(model, function, jit_compile, **settings):
    """One tf.function per model and settings, traced once and reused. It holds the model
    weakly, so the cache never keeps a model alive."""
    per_model = _COMPILED.setdefault(model, {})
    key = (function.__name__, jit_compile, tuple(sorted(settings.items())))
    if key not in per_model:
        model_ref = weakref.ref(model)

        def decode(source_ids, max_length):
            return function(model_ref(), source_ids, max_length=max_length, **settings)

        per_model[key] = tf.function(decode, jit_compile=jit_compile, reduce_retracing=True)
    return per_model[key]


def greedy_search(model, source_ids, max_length=None, extra_length=50, use_cache=True, jit_compile=False):
    """Greedy decoding of int32 source ids [B, S] (ending with eos, 0 = padding).

    Returns ids [B, L] int32 (no bos; eos then 0 after it). Each sentence is bounded by its
    source length + `extra_length` and by `max_length` (default: S + extra_length; pass a
    Python int for a static, XLA-compilable loop), never beyond `config.max_length`.
    `use_cache=False` recomputes the whole prefix each step (the official tutorial's method).
    """
    decode = _compiled(model, _greedy, jit_compile, extra_length=extra_length, use_cache=use_cache)
    return decode(source_ids, max_length=max_length)[0]


def beam_search(model, source_ids, beam_size=4, alpha=0.6, max_length=None, extra_length=50, jit_compile=False):
    """Beam search of §6.1 (beam 4, alpha 0.6) on int32 source ids [B, S].

    Returns ids [B, beam_size, L] int32 and scores [B, beam_size] float32 (log-probability
    over the GNMT length penalty), best first. Bounds as for `greedy_search`.
    """
    decode = _compiled(model, beam_ids, jit_compile, beam_size=beam_size, alpha=alpha, extra_length=extra_length)
    return decode(source_ids, max_length=max_length)

"""The model as the searches see it: the encoder run once, and a step function that runs the
decoder on one position with the incremental cache (§3.2.3's three attentions); the
encoder-decoder attention of a translation (its alignment)."""

import typing

import tensorflow as tf

from keras_transformer.decoding.search import write_column
from keras_transformer.ids import BOS_ID, PAD_ID


def encode(model, source_ids):
    """The encoder output [B, S, d_model] and the source padding mask [B, S], computed once."""
    source_mask = tf.not_equal(source_ids, PAD_ID)
    memory = model.encoder(
        model.embedding(source_ids, mode="source"), padding_mask=source_mask, training=False
    )
    return memory, source_mask


def encoder_decoder_attention(model, source_ids, target_ids, encoded=None):
    """The encoder-decoder attention weights (§3.2.3) while the decoder reads `target_ids`
    (bos, then a translation): one float32 [B, H, T, S] per decoder layer. `encoded`:
    `encode`'s (memory, source mask) of source_ids where a search already computed them."""
    memory, source_mask = encoded or encode(model, tf.convert_to_tensor(source_ids, tf.int32))
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


def alignment(model, source_ids, tokens, encoded=None):
    """Where the decoder looked while producing `tokens` [B, L] (a translation of source_ids
    [B, S], 0 after eos): the last decoder layer's encoder-decoder attention averaged over its
    heads while it reads bos + tokens, float32 [B, T, S] with T the longest translation (eos
    included); rows of real tokens sum to 1, rows after eos and padding columns are 0.
    `encoded` as `encoder_decoder_attention` takes it."""
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(tokens, PAD_ID), tf.int32), axis=1)
    tokens = tokens[:, : tf.reduce_max(tf.concat([lengths, [0]], 0))]
    target_in = tf.concat([tf.fill([tf.shape(tokens)[0], 1], BOS_ID), tokens[:, :-1]], 1)
    weights = encoder_decoder_attention(model, source_ids, target_in, encoded)[-1]
    real = tf.cast(tf.not_equal(tokens, PAD_ID), tf.float32)[:, :, None]
    return tf.reduce_mean(weights, axis=1) * real


class StepState(typing.NamedTuple):
    """A step function's state: `history`, what each step writes (the self-attention caches),
    one row per hypothesis, reordered with the beams every step; and `context`, what the steps
    only read (the source's projected keys and values, its mask), one row per sentence,
    gathered only when ended sentences leave the batch."""

    history: typing.Any
    context: typing.Any


def cached_step_function(model, memory, source_mask, max_length=None, beam_size=1):
    """A step function over the model's decoder cache, and its initial StepState.

    step(tokens [N], state, t) -> (logits [N, V], state): the decoder reads the token at
    position t and predicts position t + 1, for N = `beam_size` hypotheses (rows) of each
    sentence of the memory [B, S, d_model]; the searches normalise what they read of the logits
    (`search.NextTokenLogits`), so the step computes no softmax. With an int `max_length` the
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
        return logits, StepState(history, state.context)

    return step, StepState(history, context)


def recomputing_step_function(model, source_ids, batch_size, max_length, beam_size=1):
    """The way the official tutorial decodes: the whole model on the whole prefix, every step
    (the same interface as `cached_step_function`; its history is the prefix of each row)."""

    def step(tokens, state, t):
        prefix = write_column(state.history, tokens, t)
        source = state.context if beam_size == 1 else tf.repeat(state.context, beam_size, 0)
        logits = model({"source": source, "target": prefix[:, : t + 1]}, training=False)[:, -1]
        return logits, StepState(prefix, state.context)

    return step, StepState(tf.zeros([batch_size * beam_size, max_length], tf.int32), source_ids)

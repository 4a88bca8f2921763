"""What every search obeys, in one place: each sentence's length bound (§6.1: source length +
50), its least length before eos, its target prefix (forced tokens), and the tokens that are
never outputs (pad, bos). They are applied to the logits before a search sees them, by lowering
an impossible token's logit by NEG_INF: what a search ranks and what it normalises later
(`search.NextTokenLogits`) agree, and a forced token keeps its log-probability over the whole
vocabulary."""

import typing

import tensorflow as tf

from keras_transformer.decoding.search import NEG_INF
from keras_transformer.ids import BOS_ID, EOS_ID, PAD_ID


class Prepared(typing.NamedTuple):
    """A batch ready for a search: int32 `source_ids` [B, S], the `batch_size` (static when
    known), the loop length `max_length` L, each sentence's bound `limits` [B], its least
    length before eos `min_lengths` [B], and its target `prefix` [B, P + 1] (0-padded, a last
    0 column, so that column t is 0 once a prefix has ended) or None."""

    source_ids: tf.Tensor
    batch_size: typing.Any
    max_length: typing.Any
    limits: tf.Tensor
    min_lengths: tf.Tensor
    prefix: typing.Any


def prepare(model, source_ids, max_length, extra_length, min_length=0, target_prefix=None):
    """The source, its bounds and its prefix (`Prepared`). A sentence's bound is min(source
    length + extra_length, L) and its least length before eos `min_length`, or 0 for an empty
    source (eos alone). A sentence's target prefix, when longer than its source, sets its
    bound instead (prefix length + extra_length): the prefix is the user's, and the output
    holds it whole up to the model's max_length."""
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    source_lengths = lengths = _lengths(source_ids)
    width = tf.shape(source_ids)[1]
    batch_size = _batch_size(source_ids)
    prefix = None
    if target_prefix is not None:
        prefix = tf.reshape(tf.convert_to_tensor(target_prefix, tf.int32), [batch_size, -1])
        lengths = tf.maximum(lengths, _lengths(prefix))
        width = tf.maximum(width, tf.shape(prefix)[1])
        prefix = tf.pad(prefix, [[0, 0], [0, 1]])
    if max_length is None:
        max_length = tf.minimum(width + extra_length, model.config.max_length)
    else:  # a Python int keeps the buffers' shapes static
        max_length = min(max_length, model.config.max_length)
    limits = tf.minimum(lengths + extra_length, max_length)
    min_lengths = tf.where(source_lengths > 1, min_length, 0)
    return Prepared(source_ids, batch_size, max_length, limits, min_lengths, prefix)


def sentences(batch_size, limits, min_lengths=None, prefix=None):
    """What each sentence keeps through a search, one row per sentence, so that a sentence's
    rows leave the batch together: its `index` in the batch, its length bound `limit`, and its
    `min_length` and `prefix` (int32 [B, P + 1], 0-padded, a last 0 column) where given."""
    kept = {"index": tf.range(batch_size), "limit": limits}
    if min_lengths is not None:
        kept["min_length"] = min_lengths
    if prefix is not None:
        kept["prefix"] = prefix
    return kept


def constrain(logits, t, kept, beam_size):
    """logits [N, V] of step t (N = sentences x beam_size rows) with pad and bos made
    impossible, eos too in the rows whose output may not end yet, and every token but the
    prefix's in the rows whose prefix has a token at t."""
    per_row = (lambda x: x) if beam_size == 1 else (lambda x: tf.repeat(x, beam_size, axis=0))
    min_length = kept.get("min_length")
    logits = _allowed(logits, t, None if min_length is None else per_row(min_length))
    if "prefix" in kept:
        logits = _forced(logits, t, per_row(kept["prefix"]))
    return logits


def _allowed(logits, t, min_lengths=None):
    """logits [N, V] with pad and bos, never valid outputs, made impossible, and eos too in
    the rows whose output may not end at step t (t < min_lengths [N])."""
    vocab_size = logits.shape[-1] or tf.shape(logits)[-1]  # static: the masks fold away
    never = tf.one_hot([PAD_ID, BOS_ID], vocab_size, on_value=NEG_INF, off_value=0.0)
    logits = logits + tf.reduce_sum(never, axis=0)
    if min_lengths is None:
        return logits

    def forbid_eos():
        too_early = tf.cast(t < min_lengths, logits.dtype)[:, None]
        eos = tf.one_hot(EOS_ID, vocab_size, on_value=NEG_INF, off_value=0.0)
        return logits + too_early * eos

    # Only the first steps need it (one, by default): the others skip two passes over [N, V].
    return tf.cond(t < tf.reduce_max(min_lengths), forbid_eos, lambda: logits)


def _forced(logits, t, prefix):
    """logits [N, V] with every token but prefix[:, t] made impossible in the rows whose
    prefix [N, P + 1] has a token at t: the output starts with the prefix, whose own
    log-probabilities count in the score."""
    column = tf.gather(prefix, tf.minimum(t, tf.shape(prefix)[1] - 1), axis=1)
    vocab_size = logits.shape[-1] or tf.shape(logits)[-1]
    only_column = tf.one_hot(column, vocab_size, on_value=0.0, off_value=NEG_INF)
    return logits + tf.where(tf.not_equal(column, PAD_ID)[:, None], only_column, 0.0)


def _lengths(ids):
    """The non-padding ids of each row of ids [B, T], int32 [B]."""
    return tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), axis=1)


def _batch_size(source_ids):
    """The static batch size when known (shapes then stay equal through the loop), else a tensor."""
    return source_ids.shape[0] if source_ids.shape[0] is not None else tf.shape(source_ids)[0]

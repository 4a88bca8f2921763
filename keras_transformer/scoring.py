"""Forced decoding: the model's log-probability of given translations (the decoder's softmax
output, §3.4, read at each target token), and the length-normalised score beam search ranks by
(§6.1, GNMT's penalty).

    token_log_probs, sums = kt.score(model, source_ids, target_ids)
    token_log_probs, sums, normalized = kt.score(model, source_ids, target_ids, alpha=0.6)
"""

import tensorflow as tf

from keras_transformer.ids import BOS_ID, PAD_ID
from keras_transformer.penalty import length_penalty


def token_log_probs(model, source_ids, target_ids):
    """log P(y_t | y_<t, x) of each token of target_ids [B, T] (the translation without bos,
    eos last, 0 = padding) given source_ids [B, S]: float32 [B, T], 0 at padding. The decoder
    reads bos + the target shifted right, as in training (teacher forcing)."""
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    bos = tf.fill([tf.shape(target_ids)[0], 1], BOS_ID)
    target_in = tf.concat([bos, target_ids[:, :-1]], axis=1)
    logits = model({"source": source_ids, "target": target_in}, training=False)
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
    gathered = tf.gather(log_probs, target_ids, batch_dims=2)
    return tf.where(tf.not_equal(target_ids, PAD_ID), gathered, 0.0)


def score(model, source_ids, target_ids, alpha=None):
    """Forced decoding of int32 target_ids [B, T] (without bos, eos last, 0 = padding) given
    source_ids [B, S] (eos last, 0 = padding).

    Returns each target token's log-probability [B, T] (0 at padding) and the sentences' sums
    log P(Y | X) [B]; with `alpha`, also log P(Y | X) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^alpha
    with |Y| counting eos: the score `beam_search` reports for a hypothesis and ranks by.
    """
    tokens = token_log_probs(model, source_ids, target_ids)
    sums = tf.reduce_sum(tokens, axis=1)
    if alpha is None:
        return tokens, sums
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(target_ids, PAD_ID), tf.int32), axis=1)
    return tokens, sums, sums / length_penalty(tf.cast(lengths, tf.float32), alpha)

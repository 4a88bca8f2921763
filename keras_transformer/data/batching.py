"""Training batches as in §5.1: sentence pairs batched together by approximate length, each
batch holding about `tokens_per_batch` source tokens and as many target tokens (the paper:
25000 of each), padding included. Counting per side is also how fairseq, tensor2tensor and
OpenNMT count their token budgets.

Elements are ({"source": [B, S], "target": [B, T]}, target_out [B, T]), int32, 0 = padding,
ready for `model.fit` (also under a tf.distribute strategy, which splits each batch across
replicas). Teacher forcing: the source ends with eos, the decoder input `target` starts with
bos, and `target_out` is the same sentence ending with eos.
"""

import numpy as np
import tensorflow as tf

from keras_transformer.data.buckets import (
    EMPTY,
    KEPT,
    TOO_LONG,
    PipelineReport,
    bucket_batch_sizes,
    bucket_boundaries,
    check_budget,
    dropped_counts,
    static_boundaries,
)
from keras_transformer.ids import BOS_ID, EOS_ID, PAD_ID

AUTOTUNE = tf.data.AUTOTUNE


def tokenize_pairs(pairs, tokenizer, chunk_size=1024):
    """(source, target) strings -> (source_ids, target_ids) int32 vectors, tokenized in chunks."""
    return (
        pairs.batch(chunk_size)
        .map(
            lambda s, t: (tokenizer.tokenize(s), tokenizer.tokenize(t)), num_parallel_calls=AUTOTUNE
        )
        .unbatch()
    )


def drop_reason(source_ids, target_ids, max_length):
    """KEPT, EMPTY (a side has no tokens) or TOO_LONG (a side with its bos/eos exceeds
    max_length)."""
    source_length, target_length = tf.size(source_ids), tf.size(target_ids)
    empty = (source_length == 0) | (target_length == 0)
    too_long = tf.maximum(source_length, target_length) + 1 > max_length
    return tf.where(empty, EMPTY, tf.where(too_long, TOO_LONG, KEPT))


def teacher_forcing(source_ids, target_ids):
    """({"source": source + eos, "target": bos + target}, target + eos)."""
    eos, bos = tf.constant([EOS_ID], tf.int32), tf.constant([BOS_ID], tf.int32)
    inputs = {"source": tf.concat([source_ids, eos], 0), "target": tf.concat([bos, target_ids], 0)}
    return inputs, tf.concat([target_ids, eos], 0)


def make_batches(
    pairs,
    tokenizer,
    tokens_per_batch,
    max_length,
    bucketing=True,
    shuffle_buffer=10000,
    seed=None,
    repeat=False,
    batch_size_multiple=1,
    static_shapes=False,
):
    """Batches of at most `tokens_per_batch` source and `tokens_per_batch` target tokens (§5.1).

    Args:
        pairs: tf.data.Dataset of (source, target) strings.
        tokenizer: a SubwordTokenizer.
        tokens_per_batch: budget per side: source tokens [B x S] and target tokens [B x T],
            padding included, each stay within it (`TransformerConfig.tokens_per_batch`).
        max_length: longest sequence in tokens, with eos or bos; longer pairs are dropped
            (and counted by `pipeline_report`).
        bucketing: group pairs of similar length (§5.1); False gives fixed-size batches of
            tokens_per_batch // max_length pairs, for comparison.
        shuffle_buffer: pairs shuffled before batching (0: keep the order).
        repeat: repeat the pairs forever, before batching, so that every batch is full. Every
            iterator of a repeated dataset yields the same batches (the same shuffle order).
        batch_size_multiple: every full batch holds a multiple of this many pairs. Under
            tf.distribute pass the number of replicas: each replica then gets an equal share
            (Keras builds the model on the first batch averaged across replicas, which fails
            when their shares differ in size).
        static_shapes: pad every batch of a bucket to the bucket's bound, with the buckets of
            `static_boundaries`: a handful of batch shapes in all, for a compiler that compiles
            one program per shape (JAX's XLA), at the cost of more padding.
    """
    check_budget(tokens_per_batch, max_length, batch_size_multiple)
    dataset = tokenize_pairs(pairs, tokenizer).filter(
        lambda s, t: drop_reason(s, t, max_length) == KEPT
    )
    if repeat:
        dataset = dataset.repeat()
    if shuffle_buffer:
        # A repeated stream is iterated once by fit, so every iterator may see the same order;
        # Keras under tf.distribute peeks at a first batch with an iterator of its own, and
        # must see the batch that training then gets.
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=not repeat)
    dataset = dataset.map(teacher_forcing, num_parallel_calls=AUTOTUNE)
    if bucketing:
        bounds = (static_boundaries if static_shapes else bucket_boundaries)(max_length)
        sizes = bucket_batch_sizes(bounds, tokens_per_batch, batch_size_multiple)
        dataset = dataset.bucket_by_sequence_length(
            lambda inputs, _: tf.maximum(tf.size(inputs["source"]), tf.size(inputs["target"])),
            bucket_boundaries=bounds,
            bucket_batch_sizes=sizes,
            pad_to_bucket_boundary=static_shapes,
        )
    else:
        dataset = dataset.padded_batch(bucket_batch_sizes([max_length + 1], tokens_per_batch)[0])
    return dataset.prefetch(AUTOTUNE)


def weigh_tokens(batches):
    """(inputs, target_out) batches -> (inputs, target_out, weights): the loss weights of exact
    token normalisation, for `LabelSmoothedCrossEntropy(token_weights=True)`.

    weights [B, T] float32 are 1 / n on real target tokens and 0 on padding, n counting the
    batch's real target tokens. The loss sums w * loss, and gradients are summed over the
    replicas that tf.distribute splits a batch across and over the micro-batches of gradient
    accumulation (`compile(accumulate_steps=...)`): each update then follows the mean loss over
    all the real tokens of its batch, however unequally they fall on replicas and
    micro-batches. Weigh the global batch, before any split across replicas (not inside
    `distribute_datasets_from_function`, where n would count one replica's tokens).
    """

    def weigh(inputs, labels):
        real = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
        return inputs, labels, tf.math.divide_no_nan(real, tf.reduce_sum(real))

    return batches.map(weigh, num_parallel_calls=AUTOTUNE)


def pipeline_report(pairs, tokenizer, tokens_per_batch, max_length, bucketing=True, skipped=None):
    """Reads the corpus once to count, and batches it once (unshuffled) to measure padding.

    `skipped` adds the counts of pairs a reader skipped (a Corpus's `skipped`).
    """
    reasons = tokenize_pairs(pairs, tokenizer).map(lambda s, t: drop_reason(s, t, max_length))
    codes = np.concatenate([np.zeros(0, np.int32), *reasons.batch(8192).as_numpy_iterator()])
    dropped = dropped_counts(codes, max_length, skipped)

    batched = make_batches(
        pairs, tokenizer, tokens_per_batch, max_length, bucketing, shuffle_buffer=0
    )
    return PipelineReport.of_batches(
        (inputs for inputs, _ in batched.as_numpy_iterator()),
        read=len(codes) + sum((skipped or {}).values()),
        kept=int(np.sum(codes == KEPT)),
        dropped=dropped,
        tokens_per_batch=tokens_per_batch,
    )

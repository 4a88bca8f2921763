"""A top-k over long rows that reads each row once in blocks: beam search's 2K best of K x V
candidates a step."""

import tensorflow as tf


def top_k(x, k, block=32):
    """tf.math.top_k of the rows of x [R, C]: the same values and indices (equal values: the
    lower index first), found in the k blocks of `block` columns with the largest maxima, which
    hold the k largest entries. Without XLA, TensorFlow's top-k kernel is slow on rows this long;
    the blocks' maxima take one fast pass over the row, and the top-k then runs on k x `block`
    columns only (the gain is measured in benchmarks/, not here)."""
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

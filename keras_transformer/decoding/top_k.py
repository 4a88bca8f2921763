"""A top-k over long rows that reads each row once in blocks: beam search's 2K best of K x V
candidates a step, each a hypothesis's score plus a token's logit, without forming the K x V
sums."""

import tensorflow as tf


def top_k(x, k, block=32, offsets=None):
    """tf.math.top_k of the rows of x [B, C]: the same values and indices (equal values: the
    lower index first), found in the k blocks of `block` columns with the largest maxima, which
    hold the k largest entries. Without XLA, TensorFlow's top-k kernel is slow on rows this long;
    the blocks' maxima take one fast pass over the row, and the top-k then runs on k x `block`
    columns only (the gain is measured in benchmarks/, not here).

    With `offsets` [B, R], x is [B, R, C] and each b ranks the sums offsets[b, r] + x[b, r, c]
    as tf.math.top_k ranks them flattened to [B, R * C] (index r * C + c): a block's largest sum
    is its row's offset plus its largest entry (float rounding keeps the order), so only the
    chosen blocks' sums are formed."""
    x = x[:, None] if offsets is None else x
    batch, rows, columns = tf.shape(x)[0], x.shape[1], x.shape[2]
    if columns is None or rows * columns < 4 * k * block:  # too few blocks to gain anything
        sums = x if offsets is None else offsets[:, :, None] + x
        return tf.math.top_k(tf.reshape(sums, [batch, -1]), k)
    padding = -columns % block
    if padding:
        x = tf.pad(x, [[0, 0], [0, 0], [0, padding]], constant_values=float("-inf"))
    per_row = (columns + padding) // block
    blocks = tf.reshape(x, [batch, rows * per_row, block])  # row r's block j at r * per_row + j
    maxima = tf.reduce_max(blocks, axis=-1)
    if offsets is not None:
        maxima += tf.repeat(offsets, per_row, axis=1)
    _, chosen = tf.math.top_k(maxima, k)
    chosen = tf.sort(chosen, axis=-1)  # in index order, so that equal values keep theirs
    candidates = tf.gather(blocks, chosen, batch_dims=1)
    if offsets is not None:
        candidates += tf.gather(offsets, chosen // per_row, batch_dims=1)[:, :, None]
    values, positions = tf.math.top_k(tf.reshape(candidates, [batch, k * block]), k)
    found = tf.gather(chosen, positions // block, batch_dims=1)
    column = found % per_row * block + positions % block
    return values, found // per_row * columns + column

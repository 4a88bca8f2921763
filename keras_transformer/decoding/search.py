"""The extension point of decoding: a `Search` turns each step's log-probabilities into the next
tokens of its hypotheses, and the one loop (`loop.decode`) runs any of them. A new search is a
small subclass (as KerasHub's samplers, fairseq's `Search` and OpenNMT-tf's `DecodingStrategy`);
the loop keeps the model's cache, the constraints and the shrinking batch for every search."""

import tensorflow as tf

from keras_transformer.layers.attention import MASK_VALUE

NEG_INF = MASK_VALUE  # the log-probability of an impossible hypothesis


class Search:
    """How the next tokens are chosen. The loop holds `beam_size` hypotheses (rows of the step
    function, a sentence's rows adjacent) for each sentence still in the batch, and the search's
    own state, `hypotheses`: a nest of tensors whose first axis is the sentences, so that the
    rows of a sentence that ended leave the batch together. Subclasses are frozen dataclasses:
    a search's settings key the compile cache. A field that holds a tensor (a seed) is passed
    to the compiled function as a tensor, not as a setting (`decoding.run_search`)."""

    beam_size = 1

    def start(self, batch_size, max_length):
        """The hypotheses before the first step: every sentence's output empty."""
        raise NotImplementedError

    def advance(self, hypotheses, log_probs, t, limits):
        """One step: given log_probs [N, V] (N = sentences x beam_size rows, each row's next
        token's log-probabilities, the constraints applied) at step t and each sentence's length
        bound `limits`, returns (hypotheses, the next tokens [N], and `parents` [A, beam_size],
        the row of its sentence each hypothesis extends, or None when rows never move)."""
        raise NotImplementedError

    def ended(self, hypotheses):
        """bool [A]: the sentences whose search has ended (they may leave the batch)."""
        raise NotImplementedError

    def outputs(self, hypotheses):
        """The n-best of each sentence: ids [A, beam_size, L] (0 after eos) and scores [A,
        beam_size], best first."""
        raise NotImplementedError


def write_column(buffer, values, t):
    """buffer [..., L] with column t replaced by values [...] (static shape)."""
    column = tf.range(tf.shape(buffer)[-1]) == t
    return tf.where(column, values[..., None], buffer)

"""Greedy search: one hypothesis per sentence, extended by its most likely token each step."""

import dataclasses
import typing

import tensorflow as tf

from keras_transformer.decoding.search import Search, write_column
from keras_transformer.ids import EOS_ID, PAD_ID


class GreedyHypotheses(typing.NamedTuple):
    """A sentence's one hypothesis: whether it has `finished` [A], its `tokens` [A, L] (0
    after eos) and `scores` [A], its summed log-probabilities."""

    finished: tf.Tensor
    tokens: tf.Tensor
    scores: tf.Tensor


@dataclasses.dataclass(frozen=True)
class Greedy(Search):
    """The most likely token each step (the largest logit: no softmax); a sentence ends at eos
    or at its length bound. Its score is the summed log-probability (no length penalty).
    Subclasses choose otherwise (`choose`): `Sampler` draws."""

    def choose(self, scores, t):
        """The next token [N] of each row of the step's `NextTokenLogits` at step t."""
        del t
        return tf.argmax(scores.logits, axis=-1, output_type=tf.int32)

    def start(self, batch_size, max_length):
        return GreedyHypotheses(
            finished=tf.zeros([batch_size], tf.bool),
            tokens=tf.zeros([batch_size, max_length], tf.int32),
            scores=tf.zeros([batch_size], tf.float32),
        )

    def advance_logits(self, hypotheses, scores, t, limits):
        next_token = self.choose(scores, t)
        gained = scores.log_probs_of(next_token)
        finished = hypotheses.finished
        next_token = tf.where(finished, PAD_ID, next_token)
        hypotheses = GreedyHypotheses(
            finished=finished | (next_token == EOS_ID) | (t + 1 >= limits),
            tokens=write_column(hypotheses.tokens, next_token, t),
            scores=hypotheses.scores + tf.where(finished, 0.0, gained),
        )
        return hypotheses, next_token, None

    def ended(self, hypotheses):
        return hypotheses.finished

    def outputs(self, hypotheses):
        return hypotheses.tokens[:, None], hypotheses.scores[:, None]

"""Diverse beam search (Vijayakumar et al., 2016, "Diverse Beam Search"): the K beams split
into G groups of K / G, each a beam search of its own; at each step group g chooses its
extensions by log P plus a Hamming diversity penalty, -lambda times the number of beams of the
groups before it that chose each token at this step. The penalty steers the choice only:
hypotheses keep their log P, scored log P / lp as `Beam` scores them."""

import dataclasses
import math

import tensorflow as tf

from keras_transformer.decoding.beam import Beam
from keras_transformer.decoding.search import NEG_INF, Search


@dataclasses.dataclass(frozen=True)
class DiverseBeam(Search):
    """`beam_size` hypotheses per sentence in `groups` groups, penalty strength `diversity`
    (lambda), length penalty `alpha`. One group is beam search, whatever lambda; the n-best
    lists every group's finished hypotheses, best first."""

    beam_size: int = 4
    groups: int = 2
    diversity: float = 0.5
    alpha: float = 0.6

    def __post_init__(self):
        if self.groups < 1 or self.beam_size % self.groups or not 0 <= self.diversity < math.inf:
            raise ValueError(
                "diverse beam search needs groups >= 1 dividing beam_size and a finite "
                f"diversity >= 0; got beam_size={self.beam_size}, groups={self.groups}, "
                f"diversity={self.diversity}"
            )

    @property
    def group(self):
        """The beam search each group runs."""
        return Beam(self.beam_size // self.groups, self.alpha)

    def start(self, batch_size, max_length):
        return tuple(self.group.start(batch_size, max_length) for _ in range(self.groups))

    def advance_logits(self, hypotheses, scores, t, limits):
        beam, (logits, log_normalizers) = self.group, scores.per_sentence(self.beam_size)
        vocab_size = logits.shape[-1] or tf.shape(logits)[-1]
        chosen = 0.0  # [A, V]: how many beams of the groups so far chose each token at t
        kept, last, parents = [], [], []
        for g, group in enumerate(hypotheses):
            penalty = None if g == 0 else -self.diversity * chosen[:, None, :]
            rows = slice(g * beam.beam_size, (g + 1) * beam.beam_size)
            extensions = beam.extend(
                group, logits[:, rows], log_normalizers[:, rows], t, limits, penalty
            )
            group, group_last, group_parents = beam.keep(group, extensions, t, limits)
            if g + 1 < self.groups:  # the group's K / G best extensions: its beams at t
                beams = extensions.tokens[:, : beam.beam_size]
                real = extensions.log_probs[:, : beam.beam_size] > NEG_INF / 2
                votes = tf.one_hot(beams, vocab_size) * tf.cast(real, tf.float32)[:, :, None]
                chosen += tf.reduce_sum(votes, axis=1)
            kept.append(group)
            last.append(group_last)
            parents.append(group_parents + rows.start)  # rows of the sentence
        return tuple(kept), tf.reshape(tf.concat(last, 1), [-1]), tf.concat(parents, 1)

    def ended(self, hypotheses):
        return tf.reduce_all(tf.stack([group.done for group in hypotheses]), axis=0)

    def outputs(self, hypotheses):
        tokens = tf.concat([group.finished_tokens for group in hypotheses], 1)
        scores = tf.concat([group.finished_scores for group in hypotheses], 1)
        if self.groups == 1:
            return tokens, scores
        scores, order = tf.math.top_k(scores, self.beam_size)
        return tf.gather(tokens, order, batch_dims=1), scores

"""Beam search of §6.1: K hypotheses per sentence, GNMT's length penalty, early termination.
The state is named and the step split into grow-alive / grow-finished helpers, as Model
Garden's beam_search.py does."""

import dataclasses
import typing

import tensorflow as tf

from keras_transformer.decoding.search import NEG_INF, Search, write_column
from keras_transformer.decoding.top_k import top_k
from keras_transformer.ids import EOS_ID
from keras_transformer.penalty import length_penalty


class BeamHypotheses(typing.NamedTuple):
    """K hypotheses per sentence: `alive_tokens` [A, K, L] and `alive_log_probs` [A, K] those
    still growing; `finished_tokens` [A, K, L] and `finished_scores` [A, K] the best ended ones
    (log P / lp), best first; `done` [A] the sentences whose search has ended."""

    alive_tokens: tf.Tensor
    alive_log_probs: tf.Tensor
    finished_tokens: tf.Tensor
    finished_scores: tf.Tensor
    done: tf.Tensor


class Extensions(typing.NamedTuple):
    """The 2K best one-token extensions of a sentence's alive hypotheses: their log P [B, 2K],
    what they were chosen by when it differs from log P (`ranks`, with a penalty; else None),
    the alive hypothesis each extends (`parents`), the token added, the sequences [B, 2K, L],
    and whether each ends (eos, or the sentence's length bound)."""

    log_probs: tf.Tensor
    ranks: typing.Any
    parents: tf.Tensor
    tokens: tf.Tensor
    sequences: tf.Tensor
    ending: tf.Tensor


@dataclasses.dataclass(frozen=True)
class Beam(Search):
    """Each step ranks the 2K best extensions of the K alive hypotheses; those ending in eos
    (or at the sentence's bound) join the finished ones, scored log P(Y) / lp(Y) with GNMT's
    lp(Y) = ((5 + |Y|) / 6)^alpha, the K best others stay alive, and a sentence's search ends
    early when nothing alive can win. Beam size 1 is greedy search."""

    beam_size: int = 4
    alpha: float = 0.6

    def start(self, batch_size, max_length):
        k = self.beam_size
        return BeamHypotheses(
            alive_tokens=tf.zeros([batch_size, k, max_length], tf.int32),
            alive_log_probs=tf.tile([[0.0] + [NEG_INF] * (k - 1)], [batch_size, 1]),  # beam 0
            finished_tokens=tf.zeros([batch_size, k, max_length], tf.int32),
            finished_scores=tf.fill([batch_size, k], NEG_INF),
            done=tf.zeros([batch_size], tf.bool),
        )

    def advance_logits(self, hypotheses, scores, t, limits):
        extensions = self.extend(hypotheses, *scores.per_sentence(self.beam_size), t, limits)
        hypotheses, last, parents = self.keep(hypotheses, extensions, t, limits)
        return hypotheses, tf.reshape(last, [-1]), parents

    def extend(self, hypotheses, logits, log_normalizers, t, limits, penalty=None):
        """The 2K best extensions (`Extensions`) of the alive hypotheses given their next
        tokens' logits [A, K, V] and log normalisers [A, K] (`NextTokenLogits`), ranked by log P,
        or by log P + `penalty` [A, 1 or K, V] if given (a diverse search's: it steers the
        choice, the scores keep log P)."""
        return _extend(hypotheses, logits, log_normalizers, t, limits, self.beam_size, penalty)

    def keep(self, hypotheses, extensions, t, limits):
        """The hypotheses after the step (the finished ones with those that end now, the K
        best others alive), the alive ones' last tokens [A, K] and parents [A, K]."""
        k, alpha = self.beam_size, self.alpha
        finished_tokens, finished_scores = _keep_finished(hypotheses, extensions, t, alpha, k)
        alive_tokens, alive_log_probs, last, parents = _keep_alive(extensions, k)
        done = _search_ended(hypotheses.done, alive_log_probs, finished_scores, limits, alpha, k)
        kept = BeamHypotheses(alive_tokens, alive_log_probs, finished_tokens, finished_scores, done)
        return kept, last, parents

    def ended(self, hypotheses):
        return hypotheses.done

    def outputs(self, hypotheses):
        return hypotheses.finished_tokens, hypotheses.finished_scores


def _extend(hypotheses, logits, log_normalizers, t, limits, beam_size, penalty=None):
    """The 2K best extensions of the alive hypotheses, given their next tokens' logits [B, K, V]
    and log normalisers [B, K] (plus `penalty` to rank them). An extension's log P is its
    hypothesis's less the normaliser, plus the token's logit: without a penalty only the 2K
    chosen are formed, not the K x V candidates. Two K: even if K of them end, K remain alive."""
    vocab_size = logits.shape[-1] or tf.shape(logits)[-1]
    offsets = hypotheses.alive_log_probs - log_normalizers
    if penalty is None:
        ranks = None
        top_log_probs, top_indices = top_k(logits, 2 * beam_size, offsets=offsets)
    else:
        candidates = offsets[:, :, None] + logits
        ranked = tf.reshape(candidates + penalty, [-1, beam_size * vocab_size])
        ranks, top_indices = top_k(ranked, 2 * beam_size)
        flat = tf.reshape(candidates, [-1, beam_size * vocab_size])
        top_log_probs = tf.gather(flat, top_indices, batch_dims=1)
    parents, tokens = top_indices // vocab_size, top_indices % vocab_size
    sequences = write_column(tf.gather(hypotheses.alive_tokens, parents, batch_dims=1), tokens, t)
    reachable = top_log_probs > NEG_INF / 2  # not an extension of an empty beam
    ending = reachable & ((tokens == EOS_ID) | (t + 1 >= limits)[:, None])
    return Extensions(top_log_probs, ranks, parents, tokens, sequences, ending)


def _keep_finished(hypotheses, extensions, t, alpha, beam_size):
    """The K best of the finished hypotheses and the extensions that end now, scored
    log P(Y) / lp(Y). With beam size 1 only the best extension may finish (greedy search)."""
    may_finish = tf.range(2 * beam_size)[None, :] < (1 if beam_size == 1 else 2 * beam_size)
    finishing = extensions.ending & may_finish & ~hypotheses.done[:, None]
    penalty = length_penalty(tf.cast(t + 1, tf.float32), alpha)
    ended_scores = tf.where(finishing, extensions.log_probs / penalty, NEG_INF)
    scores, chosen = tf.math.top_k(
        tf.concat([hypotheses.finished_scores, ended_scores], 1), beam_size
    )
    tokens = tf.gather(
        tf.concat([hypotheses.finished_tokens, extensions.sequences], 1), chosen, batch_dims=1
    )
    return tokens, scores


def _keep_alive(extensions, beam_size):
    """The K best extensions that do not end: (tokens [B, K, L], log P [B, K], last tokens
    [B, K], and the beam [B, K] each extends)."""
    log_probs = tf.where(extensions.ending, NEG_INF, extensions.log_probs)
    if extensions.ranks is None:
        log_probs, survivors = tf.math.top_k(log_probs, beam_size)
    else:
        _, survivors = tf.math.top_k(
            tf.where(extensions.ending, NEG_INF, extensions.ranks), beam_size
        )
        log_probs = tf.gather(log_probs, survivors, batch_dims=1)
    tokens = tf.gather(extensions.sequences, survivors, batch_dims=1)
    last = tf.gather(extensions.tokens, survivors, batch_dims=1)
    return tokens, log_probs, last, tf.gather(extensions.parents, survivors, batch_dims=1)


def _search_ended(done, alive_log_probs, finished_scores, limits, alpha, beam_size):
    """Early termination: a sentence ends once it has K finished hypotheses and no alive one
    can beat the K-th (log-probabilities only fall and lp only grows, so the best an alive
    hypothesis can reach is its log P over lp(bound)), or once no hypothesis is alive. With beam
    size 1 the first finished hypothesis ends it."""
    full = finished_scores[:, -1] > NEG_INF / 2
    best_alive = tf.reduce_max(alive_log_probs, axis=1)
    bound = length_penalty(tf.cast(limits, tf.float32), alpha)
    can_improve = best_alive / bound > finished_scores[:, -1]
    return done | (full & ~can_improve if beam_size > 1 else full) | (best_alive <= NEG_INF / 2)

"""The extension point of decoding: a `Search` turns each step's next-token scores into the next
tokens of its hypotheses, and the one loop (`loop.search_over_steps`) runs any of them. A new
search is a small subclass (as KerasHub's samplers, fairseq's `Search` and OpenNMT-tf's
`DecodingStrategy`); the loop keeps the model's cache, the constraints and the shrinking batch
for every search."""

import typing

import tensorflow as tf

# The log-probability of an impossible hypothesis or token: finite, so that sums and
# differences of it stay finite, and far below any real log-probability in float32.
NEG_INF = -1e9


class NextTokenLogits(typing.NamedTuple):
    """A step's next-token scores as the loop hands them to a search, before normalisation:
    `logits` [N, V] with the constraints applied (an impossible token's logit lowered by
    NEG_INF), and `log_normalizer` [N], the logsumexp of each row's logits before the
    constraints. A token's log-probability is its logit minus its row's normaliser, the
    log-softmax over the whole vocabulary: a token a target prefix forces keeps its own
    log-probability. A search that reads a few tokens of each row (greedy search's choice, beam
    search's 2K best) never forms the [N, V] log-probabilities."""

    logits: tf.Tensor
    log_normalizer: tf.Tensor

    def log_probs(self):
        """The log-probabilities [N, V] of every token (one more pass over the vocabulary)."""
        return self.logits - self.log_normalizer[:, None]

    def per_sentence(self, beam_size):
        """The logits [A, K, V] and log normalisers [A, K] of the sentences' K rows each."""
        vocab_size = self.logits.shape[-1] or tf.shape(self.logits)[-1]  # static: top_k sees it
        logits = tf.reshape(self.logits, [-1, beam_size, vocab_size])
        return logits, tf.reshape(self.log_normalizer, [-1, beam_size])

    def log_probs_of(self, tokens):
        """The log-probability [N] of one token [N] of each row."""
        return tf.gather(self.logits, tokens, batch_dims=1) - self.log_normalizer


class Search:
    """How the next tokens are chosen. The loop holds `beam_size` hypotheses (rows of the step
    function, a sentence's rows adjacent) for each sentence still in the batch, and the search's
    own state, `hypotheses`: a nest of tensors whose first axis is the sentences, so that the
    rows of a sentence that ended leave the batch together.

    A subclass is a frozen dataclass (`@dataclasses.dataclass(frozen=True)`), or making one
    raises TypeError: a search's settings key the compile cache (`decoding.compiled`), so they
    must be its fields and must not change. A field that holds a tensor (a seed) is passed to
    the compiled function as a tensor, not as a setting. It gives `advance` (the
    log-probabilities [N, V]) or `advance_logits` (the logits and their normalisers, for a
    search that needs no log-softmax over [N, V]), or making one raises TypeError. Its methods
    are traced without AutoGraph: control flow on tensors is written with TensorFlow ops."""

    beam_size = 1

    def __new__(cls, *args, **kwargs):
        params = getattr(cls, "__dataclass_params__", None)
        if "__dataclass_fields__" not in cls.__dict__ or params is None or not params.frozen:
            raise TypeError(
                f"{cls.__qualname__} must be a frozen dataclass: decorate it with "
                "@dataclasses.dataclass(frozen=True) (a search's fields are the settings that "
                "key its compiled function)"
            )
        if cls.advance is Search.advance and cls.advance_logits is Search.advance_logits:
            raise TypeError(f"{cls.__qualname__} must give `advance` or `advance_logits`")
        return super().__new__(cls)

    def start(self, batch_size, max_length):
        """The hypotheses before the first step: every sentence's output empty."""
        raise NotImplementedError

    def advance(self, hypotheses, log_probs, t, limits):
        """One step: given log_probs [N, V] (N = sentences x beam_size rows, each row's next
        token's log-probabilities, the constraints applied) at step t and each sentence's length
        bound `limits`, returns (hypotheses, the next tokens [N], and `parents` [A, beam_size],
        the row of its sentence each hypothesis extends, or None when rows never move). By
        default `advance_logits` with the log-probabilities as logits."""
        zeros = tf.zeros(tf.shape(log_probs)[:1], log_probs.dtype)
        return self.advance_logits(hypotheses, NextTokenLogits(log_probs, zeros), t, limits)

    def advance_logits(self, hypotheses, scores, t, limits):
        """`advance` given the step's `NextTokenLogits` (what the loop calls). By default it
        forms the log-probabilities [N, V] and calls `advance`; a search that needs no
        log-softmax over [N, V] (`Greedy`, `Beam`, `DiverseBeam`) gives this instead and saves
        passes over the vocabulary."""
        return self.advance(hypotheses, scores.log_probs(), t, limits)

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

"""The extension point of decoding: a `Search` turns each step's log-probabilities into the next
tokens of its hypotheses, and the one loop (`loop.search_over_steps`) runs any of them. A new
search is a small subclass (as KerasHub's samplers, fairseq's `Search` and OpenNMT-tf's
`DecodingStrategy`); the loop keeps the model's cache, the constraints and the shrinking batch
for every search."""

import tensorflow as tf

# The log-probability of an impossible hypothesis or token: finite, so that sums and
# differences of it stay finite, and far below any real log-probability in float32.
NEG_INF = -1e9


class Search:
    """How the next tokens are chosen. The loop holds `beam_size` hypotheses (rows of the step
    function, a sentence's rows adjacent) for each sentence still in the batch, and the search's
    own state, `hypotheses`: a nest of tensors whose first axis is the sentences, so that the
    rows of a sentence that ended leave the batch together.

    A subclass is a frozen dataclass (`@dataclasses.dataclass(frozen=True)`), or making one
    raises TypeError: a search's settings key the compile cache (`decoding.compiled`), so they
    must be its fields and must not change. A field that holds a tensor (a seed) is passed to
    the compiled function as a tensor, not as a setting."""

    beam_size = 1

    def __new__(cls, *args, **kwargs):
        params = getattr(cls, "__dataclass_params__", None)
        if "__dataclass_fields__" not in cls.__dict__ or params is None or not params.frozen:
            raise TypeError(
                f"{cls.__qualname__} must be a frozen dataclass: decorate it with "
                "@dataclasses.dataclass(frozen=True) (a search's fields are the settings that "
                "key its compiled function)"
            )
        return super().__new__(cls)

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

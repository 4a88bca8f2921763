"""Sampling: greedy search whose tokens are drawn from the model's distribution (as for
back-translation, Edunov et al., 2018), optionally filtered by top-k and the nucleus (Holtzman
et al., 2020)."""

import dataclasses
import typing

import tensorflow as tf

from keras_transformer.decoding.greedy import Greedy
from keras_transformer.decoding.search import NEG_INF


class SamplingSettings(typing.NamedTuple):
    """Settings of sampling: `temperature` divides the log-probabilities (0: greedy search),
    `top_k` keeps the k most likely tokens, `top_p` the nucleus of probability p, and `seed`
    (an int, or [2] ints) makes the draws reproducible."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def check(self):
        """The settings, refused with a message naming them when out of range."""
        if (
            self.temperature < 0
            or (self.top_k is not None and self.top_k < 1)
            or (self.top_p is not None and not 0 < self.top_p <= 1)
        ):
            raise ValueError(
                f"sampling needs temperature >= 0, top_k >= 1 and 0 < top_p <= 1; got "
                f"temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}"
            )
        return self


@dataclasses.dataclass(frozen=True)
class Sampler(Greedy):
    """A token drawn from each row's log-probabilities divided by the temperature, restricted
    to the `top_k` most likely tokens and to the nucleus, the fewest most likely tokens whose
    probability reaches `top_p`; temperature 0 is greedy search. The draw at step t is a
    function of (seed [2], t) and of the rows still in the batch (ended sentences leave it
    without XLA), so a seed reproduces the translations of a batch. `seed`: an int tensor (or
    [2]) overriding `sampling.seed`."""

    sampling: SamplingSettings = SamplingSettings()
    seed: typing.Any = None

    def choose(self, scores, t):
        temperature, top_k, top_p = self.sampling[:3]
        if temperature == 0:
            return super().choose(scores, t)
        seed = self.sampling.seed if self.seed is None else self.seed
        seed = tf.broadcast_to(tf.cast(seed, tf.int32), [2])
        # The log-probabilities, not the logits: the same draws in exact arithmetic, and in
        # float32 a seed draws from the model's log-softmax itself.
        logits = scores.log_probs() / temperature
        if top_k is not None:
            kth_best = tf.math.top_k(logits, top_k).values[:, -1:]
            logits = tf.where(logits < kth_best, NEG_INF, logits)
        if top_p is not None:
            descending = tf.sort(logits, direction="DESCENDING")
            before = tf.cumsum(tf.nn.softmax(descending), axis=-1, exclusive=True)
            least_kept = tf.reduce_min(
                tf.where(before < top_p, descending, -NEG_INF), axis=-1, keepdims=True
            )
            logits = tf.where(logits < least_kept, NEG_INF, logits)
        draw = tf.random.stateless_categorical(logits, 1, seed=seed + tf.stack([0, t]))
        return tf.cast(draw[:, 0], tf.int32)

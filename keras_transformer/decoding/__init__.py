"""Decoding (§6.1): searches that run in the TensorFlow graph with the incremental cache.

    ids = kt.greedy_search(model, source_ids)                        # [B, L]
    ids, scores = kt.beam_search(model, source_ids, beam_size=4, alpha=0.6)     # [B, K, L], [B, K]
    ids, scores = kt.sample(model, source_ids, temperature=1.0, seed=1)         # [B, L], [B]
    ids, scores = kt.run_search(model, source_ids, kt.DiverseBeam(4, groups=2))  # any Search

Each search is a small `Search` class (`search.py`): `Greedy`, `Sampler` (with its
`SamplingSettings`), `Beam`, `DiverseBeam`; one loop runs them all (`loop.search_over_steps`
over a step function, `loop.search_model` on a model, in the caller's graph), with the model's
step function (`model_step`), the constraints (`constraints`) and the shrinking batch. A search
reads each step's constrained logits and log normalisers (`NextTokenLogits`): greedy and beam
search normalise only the few tokens they rank.
`run_search` (`compiled`) compiles a search once per model and settings (`jit_compile=True`:
with XLA)."""

import tensorflow as tf

from keras_transformer.decoding.beam import Beam
from keras_transformer.decoding.compiled import run_search
from keras_transformer.decoding.diverse import DiverseBeam
from keras_transformer.decoding.greedy import Greedy
from keras_transformer.decoding.loop import search_model, search_over_steps
from keras_transformer.decoding.model_step import (
    StepState,
    alignment,
    cached_step_function,
    encode,
    encoder_decoder_attention,
)
from keras_transformer.decoding.sampling import Sampler, SamplingSettings
from keras_transformer.decoding.search import NEG_INF, NextTokenLogits, Search
from keras_transformer.decoding.top_k import top_k


def greedy_search(
    model,
    source_ids,
    max_length=None,
    extra_length=50,
    use_cache=True,
    jit_compile=False,
    min_length=1,
    target_prefix=None,
):
    """Greedy decoding of int32 source ids [B, S] (ending with eos, 0 = padding).

    Returns ids [B, L] int32 (no bos; eos then 0 after it). Each sentence is bounded by its
    source length + `extra_length` and by `max_length` (default: S + extra_length; pass a
    Python int for a static, XLA-compilable loop), never beyond `config.max_length`. A
    non-empty source gets at least `min_length` tokens before eos (default 1: never an empty
    translation; 0 allows one). `use_cache=False` recomputes the whole prefix each step (the
    official tutorial's method). `target_prefix`, int32 ids [B, P] (0-padded; no bos, no eos),
    makes each output start with its row (cut at the sentence's bound) and go on from there; a
    row of zeros changes nothing. The prefix's log-probabilities count in the score.
    """
    settings = dict(extra_length=extra_length, min_length=min_length, use_cache=use_cache)
    ids, _ = run_search(
        model, source_ids, Greedy(), max_length, jit_compile, target_prefix, **settings
    )
    return ids[:, 0]


def beam_search(
    model,
    source_ids,
    beam_size=4,
    alpha=0.6,
    max_length=None,
    extra_length=50,
    jit_compile=False,
    min_length=1,
    target_prefix=None,
):
    """Beam search of §6.1 (beam 4, alpha 0.6) on int32 source ids [B, S].

    Returns ids [B, beam_size, L] int32 and scores [B, beam_size] float32 (log-probability
    over the GNMT length penalty), best first. Bounds, `min_length` and `target_prefix` (every
    hypothesis starts with its sentence's prefix) as for `greedy_search`.
    """
    settings = dict(extra_length=extra_length, min_length=min_length)
    search = Beam(beam_size, alpha)
    return run_search(model, source_ids, search, max_length, jit_compile, target_prefix, **settings)


def sample(
    model,
    source_ids,
    temperature=1.0,
    top_k=None,
    top_p=None,
    seed=None,
    max_length=None,
    extra_length=50,
    jit_compile=False,
    min_length=1,
    target_prefix=None,
):
    """Translations of int32 source ids [B, S] drawn token by token from the model's
    distribution (as for back-translation, Edunov et al., 2018), with the cache, in the graph.

    `temperature` divides the log-probabilities (0: greedy search), `top_k` keeps the k most
    likely tokens, `top_p` the nucleus of probability p (both None: no filter). A given int
    `seed` (or [2] ints) gives the same translations of the same batch every call; None draws
    one. Returns ids [B, L] int32 and their summed log-probabilities under the model [B].
    Bounds, `min_length` and `target_prefix` as for `greedy_search`.
    """
    sampling = SamplingSettings(float(temperature), top_k, top_p).check()
    if seed is None:
        seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
    search = Sampler(sampling, tf.convert_to_tensor(seed, tf.int32))
    settings = dict(extra_length=extra_length, min_length=min_length)
    ids, scores = run_search(
        model, source_ids, search, max_length, jit_compile, target_prefix, **settings
    )
    return ids[:, 0], scores[:, 0]


__all__ = [
    "NEG_INF",
    "Beam",
    "DiverseBeam",
    "Greedy",
    "NextTokenLogits",
    "Sampler",
    "SamplingSettings",
    "Search",
    "StepState",
    "alignment",
    "beam_search",
    "search_over_steps",
    "encode",
    "encoder_decoder_attention",
    "greedy_search",
    "cached_step_function",
    "run_search",
    "sample",
    "search_model",
    "top_k",
]

"""Sampling (`kt.sample`): greedy search at temperature 0 and with top_k=1, reproducible for a
seed, and the first token drawn with the model's (filtered) softmax probabilities."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import random_ids
from test_decoding import source_batch

import keras_transformer as kt
from keras_transformer.decoding import Sampler, SamplingSettings, StepState, search_over_steps

# A step whose every row predicts these log-probabilities (pad and bos impossible).
LOGITS = np.array([-1e9, 0.3, -1e9, 0.5, 2.0, 1.5, 0.0, -1.0], "float32")


def stub_step(tokens, cache, t):
    log_probs = tf.nn.log_softmax(tf.constant(LOGITS))
    return tf.tile(log_probs[None], [tf.shape(tokens)[0], 1]), cache


def expected_distribution(temperature=1.0, top_k=None, top_p=None):
    """The first token's probabilities as the sampling formulas define them, in numpy."""
    logits = (LOGITS - np.log(np.exp(LOGITS - LOGITS.max()).sum()) - LOGITS.max()) / temperature
    order = np.argsort(-logits)
    keep = np.zeros_like(logits, bool)
    keep[order[: top_k or len(logits)]] = True
    if top_p is not None:  # the nucleus of what top_k kept
        probabilities = np.where(keep[order], np.exp(logits[order] - logits.max()), 0.0)
        probabilities /= probabilities.sum()
        before = np.cumsum(probabilities) - probabilities
        keep[order[before >= top_p]] = False
    keep[[0, 2]] = False
    weights = np.where(keep, np.exp(logits - logits.max()), 0.0)
    return weights / weights.sum()


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(1.0, None, None), (0.5, None, None), (1.0, 3, None), (1.0, None, 0.8), (2.0, 4, 0.9)],
)
def test_the_first_token_follows_the_filtered_softmax(temperature, top_k, top_p):
    rows, seeds = 50, 120

    @tf.function
    def first_tokens(seed):
        search = Sampler(SamplingSettings(temperature, top_k, top_p), seed)
        ids, _ = search_over_steps(
            search, stub_step, StepState((), ()), rows, tf.fill([rows], 1), 1
        )
        return ids[:, 0, 0]

    drawn = np.concatenate([first_tokens(tf.constant([seed, 7])).numpy() for seed in range(seeds)])
    frequencies = np.bincount(drawn, minlength=len(LOGITS)) / len(drawn)
    expected = expected_distribution(temperature, top_k, top_p)
    assert (frequencies[expected == 0] == 0).all()  # nothing outside the filters, ever
    # Within 5 standard errors of a proportion over 6000 draws.
    bound = 5 * np.sqrt(expected * (1 - expected) / len(drawn)) + 1e-9
    assert (np.abs(frequencies - expected) <= bound).all(), (frequencies, expected)


@pytest.mark.slow
def test_temperature_zero_and_top_k_one_are_greedy_search(number_translator):
    model, tokenizer, pairs = number_translator
    source = source_batch(tokenizer, [de for de, _ in pairs[:8]])
    greedy = kt.greedy_search(model, source).numpy()
    for settings in (dict(temperature=0), dict(top_k=1, seed=5), dict(temperature=1e-3, seed=1)):
        ids, scores = kt.sample(model, source, **settings)
        np.testing.assert_array_equal(ids.numpy(), greedy, err_msg=str(settings))
    # Scores are the summed log-probabilities of the drawn tokens under the model.
    _, greedy_scores = kt.sample(model, source, temperature=0)
    np.testing.assert_allclose(scores.numpy(), greedy_scores.numpy(), atol=1e-4)


def test_a_seed_reproduces_its_samples_and_other_seeds_differ():
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=60))
    source = random_ids(np.random.default_rng(0), 6, 7, 60)
    first = kt.sample(model, source, seed=11, max_length=20)[0].numpy()
    np.testing.assert_array_equal(kt.sample(model, source, seed=11, max_length=20)[0], first)
    other = kt.sample(model, source, seed=12, max_length=20)[0].numpy()
    assert (first != other).any()
    assert (first[:, 0] != 3).all()  # min_length 1 holds for samples too


def test_bad_sampling_settings_are_refused():
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=60))
    for settings in (dict(temperature=-1), dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(ValueError, match="sampling needs temperature >= 0"):
            kt.sample(model, [[5, 6, 3]], **settings)

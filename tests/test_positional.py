"""§3.5: sinusoidal positional encoding and the learned alternative (Table 3, row E)."""

import math

import numpy as np
import pytest

from keras_transformer.layers import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
)


@pytest.mark.parametrize("d_model", [16, 7])
def test_sinusoids_equal_the_papers_formula(d_model):
    length = 60
    got = np.asarray(sinusoidal_encoding(np.arange(length), d_model))
    expected = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(0, d_model, 2):
            expected[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            if i + 1 < d_model:
                expected[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    np.testing.assert_allclose(got, expected, atol=2e-5)


def test_layer_adds_encoding_at_any_length_and_offset():
    layer = SinusoidalPositionalEncoding()
    x = np.random.default_rng(0).normal(size=(2, 1000, 8)).astype("float32")
    full = np.asarray(layer(x))
    np.testing.assert_allclose(
        full - x, np.broadcast_to(sinusoidal_encoding(np.arange(1000), 8), x.shape), atol=1e-5
    )
    np.testing.assert_allclose(layer(x[:, 37:38], start_index=37), full[:, 37:38], atol=1e-5)


def test_learned_positions_offset_and_limit():
    layer = LearnedPositionalEmbedding(max_length=10)
    x = np.zeros((1, 10, 4), "float32")
    full = np.asarray(layer(x))
    np.testing.assert_allclose(full[0], np.asarray(layer.position_embeddings))
    np.testing.assert_allclose(layer(x[:, :2], start_index=8), full[:, 8:], atol=0)
    with pytest.raises(ValueError, match=r"max_length=10 was requested \(position 10\)"):
        layer(np.zeros((1, 11, 4), "float32"))
    assert LearnedPositionalEmbedding.from_config(layer.get_config()).max_length == 10


def test_learned_positions_past_max_length_fail_clearly_inside_a_graph():
    import tensorflow as tf

    layer = LearnedPositionalEmbedding(max_length=4)
    x = np.zeros((1, 2, 4), "float32")
    layer(x)
    step = tf.function(lambda x, start: layer(x, start_index=start))
    np.testing.assert_allclose(step(x, tf.constant(2)), layer(x, start_index=2))
    for _ in range(
        200
    ):  # the assertion must come before the gather every time, not by luck of scheduling
        with pytest.raises(tf.errors.InvalidArgumentError, match="max_length=4 was requested"):
            step(x, tf.constant(3))

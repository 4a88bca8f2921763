"""Every public layer through one harness (tests/layer_harness.py): config and .keras round trips,
eager and compiled calls, float32 / mixed_bfloat16 / mixed_float16, and a training step."""

import numpy as np
import pytest
from layer_harness import run_layer_test

from keras_transformer import layers as kl

rng = np.random.default_rng(0)
X = rng.normal(size=(2, 5, 8)).astype("float32")
MEMORY = rng.normal(size=(2, 4, 8)).astype("float32")
MASK = np.array([[True] * 5, [True] * 3 + [False] * 2])
IDS = np.array([[4, 5, 6, 7, 0], [8, 9, 10, 0, 0]], "int32")


def both_embeddings_and_logits(layer, ids):
    """Source and target embeddings (two matrices here), then the pre-softmax projection."""
    return layer(layer(ids, mode="source") + layer(ids, mode="target"), mode="logits")


CASES = {
    "MultiHeadAttention": (
        lambda **kw: kl.MultiHeadAttention(2, key_dim=3, value_dim=5, dropout=0.1, **kw),
        (X, MEMORY),
        None,
    ),
    "SinusoidalPositionalEncoding": (
        lambda **kw: kl.SinusoidalPositionalEncoding(**kw),
        (X,),
        None,
    ),
    "LearnedPositionalEmbedding": (lambda **kw: kl.LearnedPositionalEmbedding(9, **kw), (X,), None),
    "SharedEmbedding": (
        lambda **kw: kl.SharedEmbedding(13, 8, share_embeddings=False, **kw),
        (IDS,),
        both_embeddings_and_logits,
    ),
    "PositionwiseFeedForward": (lambda **kw: kl.PositionwiseFeedForward(12, **kw), (X,), None),
    "EncoderLayer": (
        lambda **kw: kl.EncoderLayer(
            2, 12, key_dim=3, value_dim=5, dropout=0.2, attention_dropout=0.1, norm_first=True, **kw
        ),
        (X, MASK),
        lambda layer, x, mask: layer(x, padding_mask=mask),
    ),
    "DecoderLayer": (lambda **kw: kl.DecoderLayer(2, 12, **kw), (X, MEMORY), None),
    "Encoder": (
        lambda **kw: kl.Encoder(2, 2, 12, positional="learned", max_length=9, **kw),
        (X, MASK),
        lambda layer, x, mask: layer(x, padding_mask=mask),
    ),
    "Decoder": (lambda **kw: kl.Decoder(2, 2, 12, norm_first=True, **kw), (X, MEMORY), None),
}


def test_the_harness_covers_every_public_layer():
    public = {name for name in kl.__all__ if name[0].isupper()}
    assert public == set(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_layer(name, tmp_path):
    make_layer, inputs, call = CASES[name]
    run_layer_test(make_layer, inputs, tmp_path, call)


def test_every_public_layer_has_a_runnable_example():
    """The `Example:` in each public layer's docstring runs and prints what it shows."""
    import doctest

    for name in sorted(CASES):
        layer_class = getattr(kl, name)
        tests = doctest.DocTestFinder(recurse=False).find(
            layer_class, name, globs={name: layer_class}
        )
        assert tests and tests[0].examples, f"{name} has no example"
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        runner.run(tests[0])
        assert runner.failures == 0, f"{name}'s example fails"
        assert "Args:" in layer_class.__doc__, f"{name} does not list its arguments"

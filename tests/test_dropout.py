"""Dropout where §5.4 puts it: on each sub-layer's output before it is added to the residual and
normalized, and on the sums of the scaled embeddings and the positional encodings; only when
training. And the two the paper does not use, off by default: on the attention weights and on
the feed-forward network's hidden ReLU."""

import math

import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer import layers as kl


class Recorder:
    """Stands in for a Dropout layer's `call`: records what it is given and returns
    `keep * inputs` (keep=0: everything dropped; keep=1: nothing)."""

    def __init__(self, keep):
        self.keep, self.seen = keep, []

    def __call__(self, inputs, training=None):
        self.seen.append((np.asarray(inputs), training))
        return inputs * self.keep


def layer_norm(x, eps=1e-6):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_residual_dropout_acts_on_each_sublayer_output_before_the_add(
    kind, norm_first, monkeypatch
):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    memory = rng.normal(size=(2, 3, 8)).astype("float32")
    if kind == "encoder":
        layer, args, sublayers = kl.EncoderLayer(2, 16, dropout=0.3, norm_first=norm_first), (x,), 2
    else:
        layer, args, sublayers = (
            kl.DecoderLayer(2, 16, dropout=0.3, norm_first=norm_first),
            (x, memory),
            3,
        )
    layer(*args)
    recorder = Recorder(keep=0.0)
    monkeypatch.setattr(layer.residual_dropout, "call", recorder)
    out = np.asarray(layer(*args, training=True))
    assert [training for _, training in recorder.seen] == [True] * sublayers
    # The first sub-layer's output (self-attention of x, or of LayerNorm(x) in pre-norm) is
    # what the dropout receives, not the residual sum.
    first_input = layer_norm(x) if norm_first else x
    np.testing.assert_allclose(
        recorder.seen[0][0],
        layer.self_attention(first_input, use_causal_mask=kind == "decoder"),
        atol=1e-5,
    )
    # With every sub-layer output dropped only the residual path is left: x itself in pre-norm,
    # x normalized once per sub-layer in post-norm (the paper).
    expected = x
    for _ in range(sublayers):
        expected = expected if norm_first else layer_norm(expected)
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_dropout_acts_only_when_training():
    x = np.random.default_rng(1).normal(size=(2, 6, 8)).astype("float32")
    layer = kl.EncoderLayer(2, 16, dropout=0.5)
    without = kl.EncoderLayer(2, 16, dropout=0.0)
    layer(x), without(x)
    without.set_weights(layer.get_weights())
    for training in (None, False):
        np.testing.assert_allclose(layer(x, training=training), without(x), atol=1e-6)
    first, second = np.asarray(layer(x, training=True)), np.asarray(layer(x, training=True))
    assert not np.allclose(first, np.asarray(without(x)), atol=1e-3)
    assert not np.allclose(first, second, atol=1e-3)  # a new mask each call


@pytest.mark.parametrize("training", [True, False])
def test_embedding_dropout_follows_scaling_and_positions(training, monkeypatch):
    """Model level, §3.4 then §3.5 then §5.4: ids -> embedding * sqrt(d_model) -> + PE ->
    dropout."""
    config = kt.TransformerConfig.preset("tiny", vocab_size=30, dropout=0.3)
    model = kt.build_transformer(config)
    source = np.array([[4, 5, 6, 0]], "int32")
    target = np.array([[2, 7, 8]], "int32")
    recorders = {}
    for stack in (model.encoder, model.decoder):
        recorders[stack.name] = Recorder(keep=1.0)
        monkeypatch.setattr(stack.embedding_dropout, "call", recorders[stack.name])
    model({"source": source, "target": target}, training=training)
    matrix = np.asarray(model.embedding.target_embeddings)
    for name, ids in (("encoder", source), ("decoder", target)):
        ((seen, seen_training),) = recorders[name].seen
        positions = np.asarray(kl.sinusoidal_encoding(np.arange(ids.shape[1]), config.d_model))
        np.testing.assert_allclose(
            seen, matrix[ids] * math.sqrt(config.d_model) + positions[None], atol=1e-5
        )
        assert bool(seen_training) is training


def test_decoder_layer_without_memory_or_cache_is_refused():
    layer = kl.DecoderLayer(2, 16)
    with pytest.raises(
        ValueError, match="memory \\(the encoder output\\) is required without a cache"
    ):
        layer(np.zeros((1, 3, 8), "float32"))


def test_relu_dropout_acts_on_the_hidden_layer_only_in_training():
    """Dropout(max(0, x W1 + b1)) W2 + b2 while training: each hidden unit dropped (0) or kept
    and scaled by 1/(1-p); outside training, Eq. 2 exactly. W2 = I, b2 = 0 shows the hidden
    layer itself."""
    ffn = kl.PositionwiseFeedForward(d_ff=6, dropout=0.5)
    x = np.random.default_rng(2).normal(size=(4, 5, 6)).astype("float32")
    ffn(x)
    ffn.outer.set_weights([np.eye(6, dtype="float32"), np.zeros(6, "float32")])
    w1, b1 = (np.asarray(w) for w in ffn.inner.weights)
    hidden = np.maximum(0, x @ w1 + b1)
    np.testing.assert_allclose(ffn(x, training=False), hidden, atol=1e-5)
    trained = np.asarray(ffn(x, training=True))
    kept = np.isclose(trained, 2 * hidden, atol=1e-5)
    assert np.all(kept | (trained == 0))
    assert kept[hidden > 0].mean() < 0.8 and kept[hidden > 0].mean() > 0.2


def test_the_config_dropouts_reach_every_layer():
    """A config's relu_dropout and attention_dropout act in every layer of both stacks."""
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=20, relu_dropout=0.25, attention_dropout=0.125
    )
    layers = list(kt.build_transformer(config)._flatten_layers())
    ffns = [layer for layer in layers if isinstance(layer, kl.PositionwiseFeedForward)]
    attentions = [layer for layer in layers if isinstance(layer, kl.MultiHeadAttention)]
    assert len(ffns) == 2 * config.num_layers and {f.dropout for f in ffns} == {0.25}
    assert len(attentions) == 3 * config.num_layers and {a.dropout for a in attentions} == {0.125}

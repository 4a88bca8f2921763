"""§3.1, §3.3, §3.4: embeddings, the feed-forward network, and the encoder/decoder layers."""

import math

import keras
import numpy as np
import pytest

from keras_transformer import layers as kl


def test_one_matrix_for_both_embeddings_and_the_softmax_projection():
    emb = kl.SharedEmbedding(vocab_size=11, d_model=4)
    ids = np.array([[1, 5, 0]], "int32")
    source, target = emb(ids, mode="source"), emb(ids, mode="target")
    assert len(emb.weights) == 1
    matrix = np.asarray(emb.weights[0])
    np.testing.assert_allclose(source, matrix[ids] * math.sqrt(4), rtol=1e-6)
    np.testing.assert_allclose(target, source)
    x = np.random.default_rng(0).normal(size=(1, 2, 4)).astype("float32")
    logits = emb(x, mode="logits")
    assert logits.dtype == "float32"
    np.testing.assert_allclose(logits, x @ matrix.T, rtol=1e-5)


def test_unshared_embeddings_keep_target_tied_to_projection():
    emb = kl.SharedEmbedding(vocab_size=11, d_model=4, share_embeddings=False)
    ids = np.array([[3, 7]], "int32")
    assert not np.allclose(emb(ids, mode="source"), emb(ids, mode="target"))
    target_matrix = np.asarray(emb.target_embeddings)
    x = np.ones((1, 1, 4), "float32")
    np.testing.assert_allclose(emb(x, mode="logits"), x @ target_matrix.T, rtol=1e-5)
    with pytest.raises(ValueError, match="mode must be one of"):
        emb(ids, mode="decoder")


def test_feed_forward_is_eq2():
    ffn = kl.PositionwiseFeedForward(d_ff=16)
    x = np.random.default_rng(1).normal(size=(2, 3, 6)).astype("float32")
    out = ffn(x)
    w1, b1, w2, b2 = (np.asarray(w) for w in ffn.weights)
    np.testing.assert_allclose(out, np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)


def _layer_norm(x, eps=1e-6):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_residual_arrangement(norm_first):
    layer = kl.EncoderLayer(num_heads=2, d_ff=16, dropout=0.0, norm_first=norm_first)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")
    out = np.asarray(layer(x))

    def attend(h):
        return np.asarray(layer.self_attention(h))

    def ffn(h):
        return np.asarray(layer.feed_forward(h))

    # LayerNorm parameters start at gamma = 1, beta = 0.
    if norm_first:  # x + Sublayer(LayerNorm(x))
        h = x + attend(_layer_norm(x))
        expected = h + ffn(_layer_norm(h))
    else:  # LayerNorm(x + Sublayer(x)), the paper
        h = _layer_norm(x + attend(x))
        expected = _layer_norm(h + ffn(h))
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_decoder_layer_is_causal_and_reads_memory():
    rng = np.random.default_rng(3)
    layer = kl.DecoderLayer(num_heads=2, d_ff=16, dropout=0.0)
    x = rng.normal(size=(1, 4, 8)).astype("float32")
    memory = rng.normal(size=(1, 6, 8)).astype("float32")
    out = np.asarray(layer(x, memory))
    changed = x.copy()
    changed[:, 2] += 1.0
    out_changed = np.asarray(layer(changed, memory))
    np.testing.assert_allclose(out_changed[:, :2], out[:, :2], atol=1e-6)
    assert not np.allclose(out_changed[:, 2:], out[:, 2:])
    assert not np.allclose(layer(x, memory + 1.0), out)


@pytest.mark.parametrize(
    "layer",
    [
        kl.SharedEmbedding(13, 8, share_embeddings=False),
        kl.PositionwiseFeedForward(12, dropout=0.3),
        kl.EncoderLayer(
            2,
            12,
            key_dim=3,
            value_dim=5,
            dropout=0.2,
            attention_dropout=0.1,
            relu_dropout=0.3,
            norm_first=True,
        ),
        kl.Encoder(2, 2, 12, positional="learned", max_length=9),
        kl.Decoder(3, 2, 12, norm_first=True),
        kl.SinusoidalPositionalEncoding(),
    ],
    ids=lambda layer: type(layer).__name__,
)
def test_layers_serialize(layer):
    """A layer rebuilt from its config, given the same weights, computes the same outputs."""
    rng = np.random.default_rng(5)
    if isinstance(layer, kl.SharedEmbedding):
        inputs = (rng.integers(0, 13, (2, 5)).astype("int32"),)
    elif isinstance(layer, kl.Decoder):
        inputs = (
            rng.normal(size=(2, 5, 8)).astype("float32"),
            rng.normal(size=(2, 4, 8)).astype("float32"),
        )
    else:
        inputs = (rng.normal(size=(2, 5, 8)).astype("float32"),)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer)
    expected = layer(*inputs)
    restored(*inputs)
    restored.set_weights(layer.get_weights())
    np.testing.assert_allclose(restored(*inputs), expected, atol=1e-6)
    assert restored.get_config() == layer.get_config()


def test_dtype_policy_reaches_every_sublayer():
    encoder = kl.Encoder(1, 2, 16, dtype="mixed_bfloat16")
    out = encoder(np.zeros((1, 3, 8), "float32"))
    assert out.dtype == "bfloat16"
    policies = {layer.dtype_policy.name for layer in encoder._flatten_layers()}
    assert policies == {"mixed_bfloat16"}


def test_layers_compose_in_a_functional_model_and_reload(tmp_path):
    ids = keras.Input((None,), dtype="int32")
    embedding = kl.SharedEmbedding(20, 8)
    memory = kl.Encoder(1, 2, 16)(embedding(ids, mode="source"))
    out = kl.Decoder(1, 2, 16)(embedding(ids, mode="target"), memory)
    model = keras.Model(ids, embedding(out, mode="logits"))
    x = np.array([[4, 5, 6, 0]], "int32")
    model.save(tmp_path / "m.keras")
    restored = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(restored(x), model(x))


def test_decoder_layer_declares_what_it_returns_with_caches_and_weights():
    """compute_output_spec agrees with the eager outputs in every mode of the call (the
    functional model and Keras's own checks rely on it), under mixed_float16."""
    import keras

    from keras_transformer.layers import DecoderLayer

    def symbolic(structure):
        return keras.tree.map_structure(
            lambda t: keras.KerasTensor(t.shape, keras.backend.standardize_dtype(t.dtype)),
            structure,
        )

    layer = DecoderLayer(2, 16, dtype="mixed_float16")
    x, memory = np.ones((2, 3, 8), "float32"), np.ones((2, 5, 8), "float32")
    layer(x, memory)
    cache = {
        "self": layer.self_attention.empty_cache(2),
        "cross": layer.cross_attention.memory_cache(memory),
    }
    for kwargs in ({"return_attention_scores": True}, {"cache": cache}):
        eager = keras.tree.flatten(layer(x, memory, **kwargs))
        spec_kwargs = {name: symbolic(v) if name == "cache" else v for name, v in kwargs.items()}
        spec = layer.compute_output_spec(symbolic(x), symbolic(memory), **spec_kwargs)
        spec = keras.tree.flatten(spec)
        assert [keras.backend.standardize_dtype(t.dtype) for t in eager] == [t.dtype for t in spec]
        for e, s in zip(eager, spec):
            assert all(b is None or a == b for a, b in zip(e.shape, s.shape)), (e.shape, s.shape)

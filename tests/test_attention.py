"""§3.2: scaled dot-product attention (Eq. 1) and multi-head attention."""

import keras
import numpy as np
import pytest
from conftest import random_ids
from keras import ops

import keras_transformer as kt
from keras_transformer.layers import MultiHeadAttention, attention, scaled_dot_product_attention
from keras_transformer.layers.attention import appended_positions


def numpy_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_eq1_matches_formula_with_mask():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 3, 5, 8)).astype("float32") for _ in range(3))
    v = v[..., :6]
    mask = rng.random((2, 1, 5, 5)) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    logits = q @ k.swapaxes(-1, -2) / np.sqrt(8)
    expected_weights = numpy_softmax(np.where(mask, logits, -np.inf))
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    np.testing.assert_allclose(out, expected_weights @ v, atol=1e-5)


@pytest.mark.parametrize("queries, mask_queries", [(1, 1), (4, 1), (3, 3)])
def test_cached_attention_is_eq1_in_the_step_layout(queries, mask_queries):
    # A decoding step's form of Eq. 1 (products and sums, queries [B, Tq, H, d]) computes what the
    # batched matmuls do: one query per row, a sentence's beams, or a causal [Tq, Tk] mask.
    rng = np.random.default_rng(2)
    q = rng.normal(size=(2, 3, queries, 8)).astype("float32")  # [B, H, Tq, d_k]
    k, v = rng.normal(size=(2, 3, 7, 8)).astype("float32"), rng.normal(size=(2, 3, 7, 5))
    mask = rng.random((2, 1, mask_queries, 7)) > 0.4
    mask[..., 0] = True
    mask[1, ..., :] = False  # a query that sees no key averages the values, as Eq. 1 does
    out, weights = attention.cached_attention(q.swapaxes(1, 2), k, v.astype("float32"), mask)
    expected_out, expected_weights = scaled_dot_product_attention(q, k, v.astype("float32"), mask)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    np.testing.assert_allclose(np.swapaxes(out, 1, 2), expected_out, atol=1e-5)


def reference_multi_head(layer, query, memory, mask=None):
    """Concat(head_1..head_h) W^O with head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i), in numpy."""
    wq, wk, wv, wo = (np.asarray(w) for w in layer.weights)
    h, dk, dv = layer.num_heads, layer.depth_k, layer.depth_v
    heads = []
    for i in range(h):
        qi = query @ wq[:, i * dk : (i + 1) * dk]
        ki = memory @ wk[:, i * dk : (i + 1) * dk]
        vi = memory @ wv[:, i * dv : (i + 1) * dv]
        logits = qi @ ki.swapaxes(-1, -2) / np.sqrt(dk)
        if mask is not None:
            logits = np.where(mask[:, None, :], logits, -np.inf)
        heads.append(numpy_softmax(logits) @ vi)
    return np.concatenate(heads, -1) @ wo


def test_multi_head_matches_paper_form_with_separate_key_and_value_dims():
    # Table 3 row B: d_k and d_v chosen apart from d_model / h (32 is not divisible by 3).
    rng = np.random.default_rng(1)
    layer = MultiHeadAttention(num_heads=3, key_dim=16, value_dim=24)
    query = rng.normal(size=(2, 4, 32)).astype("float32")
    memory = rng.normal(size=(2, 6, 20)).astype("float32")
    padding = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    out = layer(query, memory, attention_mask=padding)
    assert [tuple(w.shape) for w in layer.weights] == [(32, 48), (20, 48), (20, 72), (72, 32)]
    assert all("bias" not in w.path for w in layer.weights)  # plain matrices, as in §3.2.2
    np.testing.assert_allclose(out, reference_multi_head(layer, query, memory, padding), atol=1e-5)


def test_padding_keys_get_zero_weight_and_do_not_matter():
    rng = np.random.default_rng(2)
    layer = MultiHeadAttention(num_heads=2)
    memory = rng.normal(size=(1, 5, 8)).astype("float32")
    query = rng.normal(size=(1, 3, 8)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0]], bool)
    out, weights = layer(query, memory, attention_mask=mask, return_attention_scores=True)
    assert np.all(np.asarray(weights)[..., 3:] == 0.0)
    changed = memory.copy()
    changed[:, 3:] = 100.0
    np.testing.assert_allclose(layer(query, changed, attention_mask=mask), out, atol=1e-6)
    np.testing.assert_allclose(layer(query, memory[:, :3]), out, atol=1e-5)


def test_causal_and_padding_masks_combine():
    rng = np.random.default_rng(3)
    layer = MultiHeadAttention(num_heads=2)
    x = rng.normal(size=(1, 4, 8)).astype("float32")
    padding = np.array([[1, 1, 0, 1]], bool)
    _, weights = layer(
        x, attention_mask=padding, use_causal_mask=True, return_attention_scores=True
    )
    allowed = np.tril(np.ones((4, 4), bool)) & padding[:, None, :]
    weights = np.asarray(weights)[0]
    assert np.all(weights[:, ~allowed[0]] == 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert np.all(weights[:, allowed[0]] > 0)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_masking_is_safe_under_mixed_precision(policy):
    keras.config.set_dtype_policy(policy)
    layer = MultiHeadAttention(num_heads=2)
    x = np.random.default_rng(4).normal(size=(2, 6, 8)).astype("float32") * 30
    mask = np.array([[1, 1, 0, 0, 0, 0], [1] * 6], bool)
    out, weights = layer(x, attention_mask=mask, use_causal_mask=True, return_attention_scores=True)
    assert out.dtype == policy.split("_")[1]
    assert weights.dtype == "float32"
    assert np.all(np.isfinite(np.asarray(ops.cast(out, "float32"))))
    assert np.all(np.asarray(weights)[0, :, :, 2:] == 0.0)


def test_self_attention_cache_equals_full_causal_pass():
    rng = np.random.default_rng(5)
    layer = MultiHeadAttention(num_heads=4)
    x = rng.normal(size=(2, 7, 16)).astype("float32")
    full = layer(x, use_causal_mask=True)
    cache = layer.empty_cache(2, 7)
    steps = []
    for t in range(7):
        out, cache = layer(x[:, t : t + 1], cache=cache, cache_index=t)
        steps.append(out)
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
    # A chunk of several positions at once writes them all.
    cache = layer.empty_cache(2, 7)
    first, cache = layer(x[:, :3], cache=cache, cache_index=0)
    rest, cache = layer(x[:, 3:], cache=cache, cache_index=3)
    np.testing.assert_allclose(np.concatenate([first, rest], 1), full, atol=1e-5)
    # A growing cache, appended to: chunks of several positions see each other causally.
    cache = layer.empty_cache(2)
    positions = [appended_positions(0, 3), appended_positions(3, 1), appended_positions(4, 3)]
    outputs = []
    for (start, stop), where in zip([(0, 3), (3, 4), (4, 7)], positions):
        out, cache = layer(x[:, start:stop], cache=cache, cache_index=where)
        outputs.append(out)
    assert tuple(cache["key"].shape) == (2, 4, 7, 4)
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, atol=1e-5)


def test_cross_attention_cache_computes_memory_once():
    rng = np.random.default_rng(6)
    layer = MultiHeadAttention(num_heads=2)
    query = rng.normal(size=(2, 3, 8)).astype("float32")
    memory = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    full = layer(query, memory, attention_mask=mask)
    cache = layer.memory_cache(memory)
    assert tuple(cache["key"].shape) == (2, 2, 5, 4)
    np.testing.assert_allclose(layer(query, cache=cache, attention_mask=mask), full, atol=1e-6)


def test_attention_dropout_only_in_training():
    x = np.random.default_rng(7).normal(size=(2, 6, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, dropout=0.5)
    no_dropout = MultiHeadAttention(num_heads=2)
    no_dropout(x)
    layer(x)
    no_dropout.set_weights(layer.get_weights())
    np.testing.assert_allclose(layer(x, training=False), no_dropout(x), atol=1e-6)
    _, weights = layer(x, training=True, return_attention_scores=True)
    assert not np.allclose(layer(x, training=True), no_dropout(x), atol=1e-3)
    np.testing.assert_allclose(
        np.asarray(weights).sum(-1), 1.0, atol=1e-5
    )  # returned before dropout


@pytest.mark.parametrize(
    "mask_shape, message",
    [
        ((2, 1, 3, 5), "rank 4"),
        ((2, 4), "key length 4 but the inputs have key length 5"),
        ((2, 2, 5), "query length 2 but the inputs have query length 3"),
        ((1, 5), "batch size 1 but the inputs have batch size 2"),
    ],
)
def test_mask_of_wrong_shape_says_what_was_expected(mask_shape, message):
    layer = MultiHeadAttention(num_heads=2)
    query = np.zeros((2, 3, 8), "float32")
    memory = np.zeros((2, 5, 8), "float32")
    with pytest.raises(ValueError, match=message) as info:
        layer(query, memory, attention_mask=np.ones(mask_shape, bool))
    assert "[batch, key_length]" in str(info.value)


def test_additive_float_mask_is_refused_not_inverted():
    layer = MultiHeadAttention(num_heads=2)
    x = np.zeros((1, 3, 8), "float32")
    additive = np.array([[0.0, 0.0, -1e9]], "float32")
    with pytest.raises(ValueError, match="must be boolean .* got dtype float32"):
        layer(x, attention_mask=additive)
    _, weights = layer(
        x, attention_mask=np.array([[1, 1, 0]], "int32"), return_attention_scores=True
    )
    assert np.all(np.asarray(weights)[..., 2] == 0.0)


def test_indivisible_d_model_needs_explicit_key_dim():
    with pytest.raises(
        ValueError, match="key_dim is not given and d_model=10 is not divisible by num_heads=3"
    ):
        MultiHeadAttention(num_heads=3)(np.zeros((1, 2, 10), "float32"))


@pytest.fixture
def kernel_calls(monkeypatch):
    """The query shapes keras.ops.dot_product_attention is called with."""
    calls, kernel = [], ops.dot_product_attention

    def spy(query, *args, **kwargs):
        calls.append(tuple(query.shape))
        return kernel(query, *args, **kwargs)

    monkeypatch.setattr(ops, "dot_product_attention", spy)
    return calls


@pytest.fixture
def fused(monkeypatch, kernel_calls):
    """Full-sequence passes through keras.ops.dot_product_attention in this process, as under
    JAX (TensorFlow's own kernel computes them); returns the query shapes it was called with."""
    monkeypatch.setattr(attention, "FUSED_BACKENDS", (keras.backend.backend(),))
    return kernel_calls


def attention_case(name, rng):
    """(layer, query, memory or None, call arguments) of each use of attention."""
    x = rng.normal(size=(2, 5, 12)).astype("float32")
    memory = rng.normal(size=(2, 7, 10)).astype("float32")
    padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    source_padding = np.array([[1, 1, 1, 1, 0, 0, 0], [1] * 7], bool)
    mask_3d = rng.random((2, 5, 7)) > 0.4
    mask_3d[0, 1] = False  # a query that sees no key
    return {
        "self-padding": (MultiHeadAttention(3), x, None, {"attention_mask": padding}),
        "causal-padding": (
            MultiHeadAttention(3),
            x,
            None,
            {"attention_mask": padding, "use_causal_mask": True},
        ),
        "cross-padding": (MultiHeadAttention(2), x, memory, {"attention_mask": source_padding}),
        # Table 3 row B: d_k (= d_v here) set apart from d_model / h.
        "key-value-dims": (
            MultiHeadAttention(3, key_dim=8, value_dim=8),
            x,
            memory,
            {"attention_mask": source_padding},
        ),
        "mask-3d": (MultiHeadAttention(2), x, memory, {"attention_mask": mask_3d}),
    }[name]


@pytest.mark.parametrize(
    "case", ["self-padding", "causal-padding", "cross-padding", "key-value-dims", "mask-3d"]
)
def test_fused_kernel_equals_eq1_written_out(case, fused):
    layer, x, memory, arguments = attention_case(case, np.random.default_rng(10))
    out = layer(x, memory, **arguments)
    assert fused == [(2, 5, layer.num_heads, layer.depth_k)]
    explicit, _ = layer(x, memory, return_attention_scores=True, **arguments)
    assert len(fused) == 1  # the weights need Eq. 1 written out
    np.testing.assert_allclose(out, explicit, atol=1e-5)
    assert np.all(np.isfinite(np.asarray(out)))


def test_fused_kernel_only_where_nothing_needs_the_weights(fused):
    rng = np.random.default_rng(11)
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, dropout=0.5)
    for training, calls in ((False, 1), (True, 0)):  # dropout on the weights when training
        fused.clear()
        layer(x, training=training)
        assert len(fused) == calls, training
    fused.clear()
    cache = layer.empty_cache(2, 4)
    layer(x[:, :1], cache=cache, cache_index=0)
    layer(x, cache=layer.memory_cache(x))
    MultiHeadAttention(num_heads=2, key_dim=4, value_dim=6)(x)  # a kernel takes d_k = d_v
    assert fused == []


def test_tensorflow_keeps_eq1_written_out(kernel_calls):
    """TensorFlow's keras.ops.dot_product_attention has no fused kernel: nothing reaches it
    (the exported graph's encoder stays as it was)."""
    assert keras.backend.backend() == "tensorflow"
    x = np.random.default_rng(12).normal(size=(1, 3, 8)).astype("float32")
    MultiHeadAttention(num_heads=2)(x, attention_mask=np.array([[1, 1, 0]], bool))
    assert kernel_calls == []


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_fused_kernel_is_safe_under_mixed_precision(policy, fused):
    keras.config.set_dtype_policy(policy)
    layer = MultiHeadAttention(num_heads=2)
    x = np.random.default_rng(12).normal(size=(2, 6, 8)).astype("float32") * 30
    mask = np.array([[0] * 6, [1] * 6], bool)  # the first sentence is all padding
    out = layer(x, attention_mask=mask, use_causal_mask=True)
    assert fused and out.dtype == policy.split("_")[1]
    explicit, _ = layer(x, attention_mask=mask, use_causal_mask=True, return_attention_scores=True)
    out, explicit = (np.asarray(ops.cast(o, "float32")) for o in (out, explicit))
    assert np.all(np.isfinite(out))
    # Within a bfloat16 step of the largest output: a kernel may round differently.
    np.testing.assert_allclose(out, explicit, rtol=0, atol=np.abs(explicit).max() / 128)


def test_model_logits_through_the_fused_kernel_equal_eq1_written_out(fused, monkeypatch):
    config = kt.TransformerConfig.preset("tiny", vocab_size=37)
    model = kt.build_transformer(config)
    fused.clear()  # building traced each layer once
    rng = np.random.default_rng(13)
    source, target = random_ids(rng, 3, 6, 37), random_ids(rng, 3, 5, 37)
    source[0, 3:] = 0
    target[1, 2:] = 0
    inputs = {"source": source, "target": target}
    logits = np.asarray(model(inputs, training=False))
    assert len(fused) == 3 * config.num_layers  # encoder, decoder and encoder-decoder attention
    monkeypatch.setattr(attention, "FUSED_BACKENDS", ())
    np.testing.assert_allclose(logits, model(inputs, training=False), atol=1e-5)
    assert len(fused) == 3 * config.num_layers

"""Scaled dot-product attention (§3.2.1, Eq. 1) and multi-head attention (§3.2.2).

Eq. 1 written out (`scaled_dot_product_attention`) and the decoding cache use the layout
[batch, heads, time, depth], so Eq. 1 is a plain batched matmul and the cache is updated along
axis 2; the fused kernel (`keras.ops.dot_product_attention`) takes [batch, time, heads, depth].
"""

import math
import typing

import keras
from keras import ops

# Backends whose keras.ops.dot_product_attention full-sequence passes use: JAX's, cuDNN's fused
# attention on a GPU. TensorFlow's has no fused kernel (it refuses flash_attention=True): it is
# Eq. 1 as einsums, slower on a CPU than Eq. 1 written out here (docs/design-choices.md).
# PyTorch's is not checked here (not installed), so it keeps Eq. 1 written out.
FUSED_BACKENDS = ("jax",)

# Masked logits are set to this value. Masking happens on float32 logits (softmax runs in
# float32 under every dtype policy), so the constant is finite and safe for float16 and
# bfloat16 models alike, and exp(MASK_VALUE - max) is exactly 0.
MASK_VALUE = -1e9


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None, training=None):
    """Eq. 1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    Args:
        query: [B, H, Tq, d_k]. key: [B, H, Tk, d_k]. value: [B, H, Tk, d_v].
        mask: boolean, broadcastable to [B, H, Tq, Tk]; True where attention is allowed.
        dropout: optional layer applied to the attention weights.

    Returns:
        outputs [B, H, Tq, d_v] in the dtype of `value`, and the float32 weights [B, H, Tq, Tk].
    """
    depth = query.shape[-1]
    query = query * ops.cast(1.0 / math.sqrt(depth), query.dtype)
    logits = ops.cast(ops.matmul(query, ops.swapaxes(key, -1, -2)), "float32")
    if mask is not None:
        logits = ops.where(mask, logits, MASK_VALUE)
    weights = ops.softmax(logits, axis=-1)
    applied = weights if dropout is None else dropout(weights, training=training)
    outputs = ops.matmul(ops.cast(applied, value.dtype), value)
    return outputs, weights


def cached_attention(query, key, value, mask=None, dropout=None, training=None):
    """Eq. 1 for the few queries of a decoding step, in float32, as broadcast products and sums.

    A step has one query per row against the self-attention cache, or a sentence's beams
    against its memory: too little work for a batched matmul and a softmax kernel, which on a
    CPU without XLA (TensorFlow Serving) cost oneDNN more per call than the arithmetic
    (docs/design-choices.md). The queries stay in the projections' layout: no transposes.

    Args:
        query: [B, Tq, H, d_k]. key: [B, H, Tk, d_k] and value: [B, H, Tk, d_v], the cache.
        mask: boolean [B or 1, 1, Tq or 1, Tk] (`combined_mask`'s); True where allowed.
        dropout: optional layer applied to the attention weights.

    Returns:
        outputs [B, Tq, H, d_v] in the dtype of `value`, and the float32 weights [B, H, Tq, Tk].
    """
    depth = query.shape[-1]
    query = ops.cast(query, "float32") * (1.0 / math.sqrt(depth))
    key, values = ops.cast(key, "float32"), ops.cast(value, "float32")
    logits = ops.sum(query[:, :, :, None, :] * key[:, None], axis=-1)  # [B, Tq, H, Tk]
    if mask is not None:
        logits = ops.where(mask[:, 0, :, None, :], logits, MASK_VALUE)
    exponentials = ops.exp(logits - ops.max(logits, axis=-1, keepdims=True))
    weights = exponentials / ops.sum(exponentials, axis=-1, keepdims=True)
    applied = weights
    if dropout is not None:  # the layer computes in its policy's dtype: back to float32
        applied = ops.cast(dropout(weights, training=training), "float32")
    outputs = ops.sum(applied[..., None] * values[:, None], axis=-2)
    return ops.cast(outputs, value.dtype), ops.transpose(weights, (0, 2, 1, 3))


def causal_mask(query_length, key_length, start_index=0):
    """[Tq, Tk] boolean mask: query i (at absolute position start_index + i) sees keys <= it
    (§3.2.3)."""
    query_positions = ops.arange(query_length) + ops.cast(start_index, "int32")
    key_positions = ops.arange(key_length)
    return ops.greater_equal(query_positions[:, None], key_positions[None, :])


class CachePositions(typing.NamedTuple):
    """Where a decoding call writes T new positions into self-attention caches [B, H, L, d],
    and what its queries see: `indices` [B * H * T, 3], the (batch, head, position) of every
    row written into a preallocated cache, or None for a growing cache, to which the new
    positions are appended; `visible` boolean [T, L] (§3.2.3's causal mask), or None where a
    single new position sees the whole cache. A decoder builds them once per step
    (`cache_positions`, `appended_positions`) for all its layers."""

    indices: typing.Any
    visible: typing.Any


def cache_positions(start_index, new_length, cache_shape):
    """CachePositions for `new_length` positions written at `start_index` into caches of shape
    `cache_shape` [B, H, L, d]."""
    batch, heads, length = cache_shape[0], cache_shape[1], cache_shape[2]
    start = ops.cast(start_index, "int32")
    grid = (batch, heads, new_length)
    indices = ops.stack(
        [
            ops.broadcast_to(ops.arange(batch)[:, None, None], grid),
            ops.broadcast_to(ops.arange(heads)[None, :, None], grid),
            ops.broadcast_to(start + ops.arange(new_length)[None, None, :], grid),
        ],
        axis=-1,
    )
    return CachePositions(ops.reshape(indices, (-1, 3)), causal_mask(new_length, length, start))


def appended_positions(start_index, new_length):
    """CachePositions for `new_length` positions appended to growing caches that hold
    `start_index` positions. The cache then holds exactly the past: one new position (a
    static 1, as in a decoding step) sees all of it, and needs no mask."""
    if isinstance(new_length, int) and new_length == 1:
        return CachePositions(None, None)
    start = ops.cast(start_index, "int32")
    return CachePositions(None, causal_mask(new_length, start + new_length, start))


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, §3.2.2.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).
    The projections are plain matrices without bias, as in the paper's equations.

    Eq. 1 (§3.2.1) runs one of two ways. Where nothing needs its weights softmax(Q K^T / sqrt(d_k))
    (none returned, no dropout on them), no cache is read (the full-sequence passes of training,
    evaluation and the encoder) and d_k = d_v, under JAX (`FUSED_BACKENDS`),
    `keras.ops.dot_product_attention` computes it: on a GPU in bfloat16 or float16 that is cuDNN's
    fused attention, which never writes the [B, H, Tq, Tk] weights to memory
    (`keras.config.disable_flash_attention()` turns it off). Otherwise Eq. 1 is written out
    (`scaled_dot_product_attention`): it returns the weights, drops some of them out, and runs
    under TensorFlow, whose kernel is no faster. Over a decoding cache (incremental decoding,
    which TensorFlow Serving runs without XLA) it is written as products and sums
    (`cached_attention`): a step's few queries are too little work for batched matmuls. All
    mask alike and take the softmax in float32 under every dtype policy (cuDNN accumulates in
    float32); a query that sees no key averages the values.

    Args:
        num_heads: h, the number of heads.
        key_dim: d_k, the depth of each head's queries and keys (default None: d_model / h;
            set apart from it in Table 3, row B).
        value_dim: d_v, the depth of each head's values (default None: d_model / h).
        dropout: dropout on the attention weights, when training (default 0.0; not in the paper).
        **kwargs: Keras layer arguments (name, dtype).

    Call arguments:
        query: [B, Tq, d_model].
        value: [B, Tk, d_memory], the sequence attended to (keys and values both come from it,
            §3.2.3); None means self-attention.
        attention_mask: boolean [B, Tk] (key padding) or [B, Tq, Tk]; True where allowed.
        use_causal_mask: each query position sees only keys at positions <= its own.
        cache: incremental decoding state, a dict {"key": [B, H, L, d_k], "value": [B, H, L, d_v]}.
            With `cache_index` (causal self-attention) the new positions' keys and values are
            written into the preallocated cache at `cache_index` (an int, a scalar tensor, or
            the `CachePositions` of `cache_positions`), or appended to a growing cache
            (`appended_positions`), and queries attend to cache positions <= their own; start
            from `empty_cache`. Without `cache_index`
            (encoder-decoder attention) the cache holds the memory's projected keys and values,
            computed once by `memory_cache`, and `value` is not needed.
        return_attention_scores: also return the float32 weights [B, H, Tq, Tk].

    Returns:
        outputs [B, Tq, d_model]; then the updated cache when `cache_index` was given; then the
        weights if asked for.

    Example:
        >>> import numpy as np
        >>> attention = MultiHeadAttention(num_heads=2)
        >>> target, memory = np.ones((1, 3, 8), "float32"), np.ones((1, 5, 8), "float32")
        >>> tuple(attention(target, memory, attention_mask=np.array([[1, 1, 1, 0, 0]], bool)).shape)
        (1, 3, 8)
    """

    def __init__(self, num_heads, key_dim=None, value_dim=None, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if num_heads < 1:
            raise ValueError(f"num_heads must be >= 1, got {num_heads}")
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.weights_dropout = keras.layers.Dropout(
            dropout, dtype=self.dtype_policy, name="weights_dropout"
        )

    def build(self, query_shape, value_shape=None):
        d_model = query_shape[-1]
        d_memory = d_model if value_shape is None else value_shape[-1]
        self.d_model = d_model
        self.depth_k = head_depth(self.key_dim, d_model, self.num_heads, "key_dim")
        self.depth_v = head_depth(self.value_dim, d_model, self.num_heads, "value_dim")
        heads = self.num_heads

        def kernel(name, shape):
            return self.add_weight(name=name, shape=shape, initializer="glorot_uniform")

        self.query_kernel = kernel("query_kernel", (d_model, heads * self.depth_k))
        self.key_kernel = kernel("key_kernel", (d_memory, heads * self.depth_k))
        self.value_kernel = kernel("value_kernel", (d_memory, heads * self.depth_v))
        self.output_kernel = kernel("output_kernel", (heads * self.depth_v, d_model))

    def project(self, x, kernel, depth):
        """x W as [B, T, H, depth] for x [B, T, d]: one 2-D matmul over all positions."""
        rows = ops.reshape(ops.cast(x, self.compute_dtype), (-1, x.shape[-1]))
        projected = ops.matmul(rows, ops.cast(kernel, self.compute_dtype))
        return ops.reshape(projected, (*batch_and_length(x, 1), self.num_heads, depth))

    def project_heads(self, x, kernel, depth):
        """x W as [B, H, T, depth], the layout of Eq. 1's batched matmuls and of the cache."""
        return heads_first(self.project(x, kernel, depth))

    def memory_cache(self, memory):
        """The projected keys and values of `memory` [B, S, d_memory], computed once per source."""
        require_built(self)
        return {
            "key": self.project_heads(memory, self.key_kernel, self.depth_k),
            "value": self.project_heads(memory, self.value_kernel, self.depth_v),
        }

    def empty_cache(self, batch_size, max_length=None):
        """A zero cache for causal self-attention over up to `max_length` positions, or with
        None an empty one that grows by the positions written (shapes change each step: for
        graphs without XLA)."""
        require_built(self)
        dtype, length = self.compute_dtype, 0 if max_length is None else max_length
        return {
            "key": ops.zeros((batch_size, self.num_heads, length, self.depth_k), dtype),
            "value": ops.zeros((batch_size, self.num_heads, length, self.depth_v), dtype),
        }

    def call(
        self,
        query,
        value=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
    ):
        if self.fuses(cache, return_attention_scores, training):
            context = self.fused_context(query, value, attention_mask, use_causal_mask)
        else:
            context, cache, weights = self.explicit_context(
                query, value, attention_mask, use_causal_mask, cache, cache_index, training
            )
        # Concat(head_1, ..., head_h) W^O: the heads side by side, one 2-D matmul.
        heads = ops.reshape(context, (-1, self.num_heads * self.depth_v))
        outputs = ops.matmul(heads, ops.cast(self.output_kernel, self.compute_dtype))
        outputs = ops.reshape(outputs, (*batch_and_length(context, 1), self.d_model))

        results = (outputs,)
        if cache_index is not None:
            results += (cache,)
        if return_attention_scores:
            results += (weights,)
        return results[0] if len(results) == 1 else results

    def fuses(self, cache, return_attention_scores, training):
        """Whether Eq. 1 runs as one kernel: nothing needs its weights, it reads no cache, the
        backend has a fused kernel, and d_k = d_v (the kernel, as cuDNN's, takes keys and values
        of one depth; under JAX it fails otherwise)."""
        return (
            cache is None
            and not return_attention_scores
            and not (training and self.dropout)
            and self.depth_k == self.depth_v
            and keras.backend.backend() in FUSED_BACKENDS
        )

    def projected(self, query, value, attention_mask, use_causal_mask, project, time_axis):
        """Q, K, V by `project` (positions on `time_axis`) from the queries and the memory
        (`value`, or the queries for self-attention), and the mask combining `attention_mask`
        with the causal one (§3.2.3)."""
        memory = query if value is None else value
        q = project(query, self.query_kernel, self.depth_k)
        k = project(memory, self.key_kernel, self.depth_k)
        v = project(memory, self.value_kernel, self.depth_v)
        query_length, key_length = ops.shape(q)[time_axis], ops.shape(k)[time_axis]
        causal = causal_mask(query_length, key_length) if use_causal_mask else None
        mask = combined_mask(
            attention_mask, causal, ops.shape(q)[0], query_length, key_length, self.name
        )
        return q, k, v, mask

    def fused_context(self, query, value, attention_mask, use_causal_mask):
        """The heads [B, Tq, H, d_v] of a full-sequence pass, by `keras.ops.dot_product_attention`
        (projected straight into its [B, T, H, d] layout: no transposes)."""
        q, k, v, mask = self.projected(
            query, value, attention_mask, use_causal_mask, self.project, time_axis=1
        )
        query_length, key_length = ops.shape(q)[1], ops.shape(k)[1]
        if mask is not None:  # a row per query: cuDNN takes the mask as a [., ., Tq, Tk] bias
            mask = ops.broadcast_to(mask, (ops.shape(mask)[0], 1, query_length, key_length))
        # 1/sqrt(d_k) on the queries, as written out: TensorFlow's kernel forms Q K^T in the
        # compute dtype before it scales, where float16 could overflow.
        q = q * ops.cast(1.0 / math.sqrt(self.depth_k), q.dtype)
        return ops.dot_product_attention(
            q, k, v, mask=mask, scale=1.0, flash_attention=keras.config.is_flash_attention_enabled()
        )

    def explicit_context(
        self, query, value, attention_mask, use_causal_mask, cache, cache_index, training
    ):
        """Eq. 1 written out: the heads [B, Tq, H, d_v], the updated cache and the weights."""
        if cache is not None:
            return self.cached_context(
                query, attention_mask, use_causal_mask, cache, cache_index, training
            )
        q, k, v, mask = self.projected(
            query, value, attention_mask, use_causal_mask, self.project_heads, time_axis=2
        )
        context, weights = scaled_dot_product_attention(
            q, k, v, mask=mask, dropout=self.weights_dropout, training=training
        )
        return ops.transpose(context, (0, 2, 1, 3)), None, weights

    def cached_context(self, query, attention_mask, use_causal_mask, cache, cache_index, training):
        """Eq. 1 over a decoding cache (`cached_attention`): with `cache_index`, causal
        self-attention whose new keys and values are first written into the cache; without,
        attention over the memory's keys and values (causal from position 0 if asked).
        Returns what `explicit_context` does."""
        q = self.project(query, self.query_kernel, self.depth_k)
        causal = None
        if cache_index is not None:
            if not isinstance(cache_index, CachePositions):
                cache_index = cache_positions(
                    cache_index, ops.shape(query)[1], ops.shape(cache["key"])
                )
            new_k = self.project_heads(query, self.key_kernel, self.depth_k)
            new_v = self.project_heads(query, self.value_kernel, self.depth_v)
            cache = {
                "key": write_positions(cache["key"], new_k, cache_index),
                "value": write_positions(cache["value"], new_v, cache_index),
            }
            causal = cache_index.visible  # None: one new position sees the whole cache
        elif use_causal_mask:
            causal = causal_mask(ops.shape(q)[1], ops.shape(cache["key"])[2])
        mask = combined_mask(
            attention_mask,
            causal,
            ops.shape(q)[0],
            ops.shape(q)[1],
            ops.shape(cache["key"])[2],
            self.name,
        )
        context, weights = cached_attention(
            q, cache["key"], cache["value"], mask, self.weights_dropout, training
        )
        return context, cache, weights

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            dropout=self.dropout,
        )
        return config


def head_depth(explicit, d_model, num_heads, name):
    """d_k or d_v: `explicit` when given, else d_model / h (§3.2.2)."""
    if explicit is not None:
        return explicit
    if d_model % num_heads:
        raise ValueError(
            f"{name} is not given and d_model={d_model} is not divisible by "
            f"num_heads={num_heads}; set {name} explicitly"
        )
    return d_model // num_heads


def batch_and_length(x, length_axis):
    """The batch size and length of x as a reshape wants them: static sizes as ints, a dynamic
    length as a tensor, and a dynamic batch as -1 (no shape op for it)."""
    batch = x.shape[0] if x.shape[0] is not None else -1
    return batch, ops.shape(x)[length_axis]


def heads_first(x):
    """[B, T, H, d] as [B, H, T, d]: for one position (T = 1, a decoding step) a reshape,
    which copies nothing, else a transpose."""
    if x.shape[1] == 1:
        return ops.reshape(x, (batch_and_length(x, 0)[0], x.shape[2], 1, x.shape[3]))
    return ops.transpose(x, (0, 2, 1, 3))


def require_built(layer):
    if not layer.built:
        raise ValueError(
            f"Layer '{layer.name}' is not built yet: call it once (or build the model) "
            "before creating a decoding cache"
        )


def write_positions(cache, update, positions):
    """cache [B, H, L, d] with the rows of `positions` (CachePositions) replaced by update
    [B, H, T, d], or, for a growing cache, update appended: [B, H, L + T, d].

    A scatter into a preallocated cache keeps the shapes static, as XLA needs; XLA writes in
    place. Without XLA (TensorFlow Serving) the scatter copies the whole cache, so a graph
    there appends to a growing cache, copying only the positions written so far.
    """
    if positions.indices is None:
        return ops.concatenate([cache, ops.cast(update, cache.dtype)], axis=2)
    rows = ops.reshape(update, (-1, update.shape[-1]))
    return ops.scatter_update(cache, positions.indices, ops.cast(rows, cache.dtype))


def combined_mask(attention_mask, causal, batch_size, query_length, key_length, layer_name):
    """The boolean mask [B or 1, 1, Tq or 1, Tk] of a call: `attention_mask` (checked by
    `attention_mask_4d`) and the causal mask [Tq, Tk] (or None) together; None if neither."""
    mask = attention_mask_4d(attention_mask, batch_size, query_length, key_length, layer_name)
    if causal is None:
        return mask
    return causal[None, None] if mask is None else ops.logical_and(mask, causal)


def attention_mask_4d(mask, batch_size, query_length, key_length, layer_name):
    """Checks a [B, Tk] or [B, Tq, Tk] boolean mask and returns it as [B, 1, Tq or 1, Tk].

    Sizes known statically are compared; a float mask is refused, since an additive 0 / -inf
    mask would read inverted as a boolean one.
    """
    if mask is None:
        return None
    shape = tuple(mask.shape)
    expected = "[batch, key_length] (padding) or [batch, query_length, key_length]"
    dtype = keras.backend.standardize_dtype(mask.dtype)
    if dtype != "bool" and "int" not in dtype:
        raise ValueError(
            f"{layer_name}: attention_mask must be boolean (True = may attend) or 0/1 integers; "
            f"got dtype {dtype} (additive float masks are not accepted)"
        )
    if len(shape) not in (2, 3):
        raise ValueError(
            f"{layer_name}: attention_mask must have shape {expected}; got rank {len(shape)} "
            f"shape {shape}"
        )
    expected_dims = [(0, batch_size, "batch size"), (-1, key_length, "key length")]
    if len(shape) == 3:
        expected_dims.append((1, query_length, "query length"))
    for axis, size, what in expected_dims:
        if isinstance(size, int) and shape[axis] is not None and shape[axis] != size:
            raise ValueError(
                f"{layer_name}: attention_mask has {what} {shape[axis]} but the inputs have "
                f"{what} {size}; expected {expected}, got shape {shape}"
            )
    mask = ops.cast(mask, "bool")
    return mask[:, None, None, :] if len(shape) == 2 else mask[:, None, :, :]

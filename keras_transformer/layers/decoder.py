"""The decoder, §3.1 (right half of Figure 1), with the incremental-decoding cache."""

import keras

from keras_transformer.layers.attention import appended_positions, cache_positions
from keras_transformer.layers.positional import like_inputs
from keras_transformer.layers.stack import Stack, SublayerConnections, layer_norm


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(SublayerConnections):
    """One decoder layer (§3.1): masked (causal) multi-head self-attention, multi-head attention
    over the encoder output, then the position-wise FFN, each with its residual connection and
    layer normalization.

    Args: as `EncoderLayer`'s (num_heads, d_ff, key_dim, value_dim, dropout, attention_dropout,
        relu_dropout, norm_first, **kwargs).

    Call arguments:
        inputs: [B, T, d_model]. memory: the encoder output [B, S, d_model].
        target_padding_mask: boolean [B, T]; source_padding_mask: boolean [B, S].
        cache: {"self": ..., "cross": ...} attention caches (see `Decoder.build_cache`), with
            `cache_index` the position of the first input in a preallocated cache, or None for
            a growing cache (the inputs are appended); the memory is then not read.
        return_attention_scores: also return the encoder-decoder weights [B, H, T, S].

    Returns [B, T, d_model]; then the updated cache if one was given; then the weights if asked.

    Example:
        >>> import numpy as np
        >>> layer = DecoderLayer(num_heads=2, d_ff=32)
        >>> tuple(layer(np.ones((1, 3, 8), "float32"), np.ones((1, 5, 8), "float32")).shape)
        (1, 3, 8)
    """

    def __init__(self, num_heads, d_ff, *args, **kwargs):
        super().__init__(num_heads, d_ff, *args, **kwargs)
        self.cross_attention = self.attention_sublayer("cross_attention")
        self.cross_attention_norm = layer_norm(self, "cross_attention_norm")

    def build(self, inputs_shape, memory_shape=None):
        super().build(inputs_shape)
        self.cross_attention.build(inputs_shape, memory_shape or inputs_shape)
        self.cross_attention_norm.build(inputs_shape)

    def call(
        self,
        inputs,
        memory=None,
        target_padding_mask=None,
        source_padding_mask=None,
        cache=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
    ):
        if cache is not None and cache_index is None:  # a growing cache: append to it
            cache_index = appended_positions(
                keras.ops.shape(cache["self"]["key"])[2], keras.ops.shape(inputs)[1]
            )
        # Without a memory the cross-attention would attend to the target itself.
        if cache is None and memory is None:
            raise ValueError(
                f"{self.name}: memory (the encoder output) is required without a cache"
            )
        x = inputs
        h = self.sublayer_input(x, self.self_attention_norm)
        h = self.self_attention(
            h,
            attention_mask=target_padding_mask,
            use_causal_mask=True,
            cache=None if cache is None else cache["self"],
            cache_index=cache_index,
            training=training,
        )
        if cache is not None:
            h, self_cache = h
        x = self.sublayer_output(x, h, self.self_attention_norm, training)

        h = self.sublayer_input(x, self.cross_attention_norm)
        if cache is None:
            h = self.cross_attention(
                h,
                memory,
                attention_mask=source_padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )
        else:
            h = self.cached_cross_attention(
                h, cache["cross"], source_padding_mask, return_attention_scores, training
            )
        if return_attention_scores:
            h, weights = h
        x = self.sublayer_output(x, h, self.cross_attention_norm, training)

        h = self.feed_forward(self.sublayer_input(x, self.feed_forward_norm), training=training)
        x = self.sublayer_output(x, h, self.feed_forward_norm, training)

        results = (x,)
        if cache is not None:
            results += ({"self": self_cache, "cross": cache["cross"]},)
        if return_attention_scores:
            results += (weights,)
        return results[0] if len(results) == 1 else results

    def compute_output_spec(
        self,
        inputs,
        memory=None,
        target_padding_mask=None,
        source_padding_mask=None,
        cache=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
    ):
        """What `call` returns, without running it: [B, T, d_model] in the compute dtype; then
        the cache, whose self-attention part holds this call's positions too; then the float32
        encoder-decoder weights [B, H, T, S]."""
        results = (like_inputs(self, inputs),)
        if cache is not None:  # a preallocated cache keeps its length; a growing one grows
            self_cache = {
                name: keras.KerasTensor(
                    (*t.shape[:2], t.shape[2] if cache_index is not None else None, t.shape[3]),
                    t.dtype,
                )
                for name, t in cache["self"].items()
            }
            results += ({"self": self_cache, "cross": cache["cross"]},)
        if return_attention_scores:
            keys = (memory if cache is None else cache["cross"]["key"]).shape
            source = keys[1] if cache is None else keys[2]
            heads = self.num_heads
            results += (keras.KerasTensor((inputs.shape[0], heads, inputs.shape[1], source)),)
        return results[0] if len(results) == 1 else results

    def cached_cross_attention(self, h, cross_cache, mask, return_attention_scores, training):
        """Attention over the memory cache of A sentences (keys and values [A, H, S, d], mask
        [A, S]) for queries h [N, T, d_model] of N = A x R rows, the R rows of a sentence
        adjacent (its beams): they read the sentence's memory as R x T queries of one row, so
        that beams share one copy of it. R = 1 is plain cached attention."""
        sentences = keras.ops.shape(cross_cache["key"])[0]
        rows, length = keras.ops.shape(h)[0], keras.ops.shape(h)[1]
        h = keras.ops.reshape(h, (sentences, -1, h.shape[-1]))
        outputs = self.cross_attention(
            h,
            attention_mask=mask,
            cache=cross_cache,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        if not return_attention_scores:
            return keras.ops.reshape(outputs, (rows, length, h.shape[-1]))
        outputs, weights = outputs  # weights [A, H, R x T, S] -> [N, H, T, S]
        heads, keys = keras.ops.shape(weights)[1], keras.ops.shape(weights)[3]
        weights = keras.ops.reshape(weights, (sentences, heads, -1, length, keys))
        weights = keras.ops.transpose(weights, (0, 2, 1, 3, 4))
        return (
            keras.ops.reshape(outputs, (rows, length, h.shape[-1])),
            keras.ops.reshape(weights, (rows, heads, length, keys)),
        )


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(Stack):
    """The decoder stack (§3.1): Dropout(embedded target + positional encoding), then
    `num_layers` DecoderLayers, each attending causally to the target and to the memory.

    Args: as `Encoder`'s (num_layers, num_heads, d_ff, positional, max_length, key_dim,
        value_dim, dropout, attention_dropout, relu_dropout, norm_first, **kwargs).

    Call arguments:
        inputs: the embedded target [B, T, d_model] (shifted right: it starts with bos).
        memory: the encoder output [B, S, d_model].
        target_padding_mask: boolean [B, T]; source_padding_mask: boolean [B, S].
        cache, cache_index: incremental decoding. `build_cache(memory, max_length)` gives the
            initial cache; each call writes positions cache_index ... cache_index + T - 1 and
            returns the new cache. With `build_cache(memory)` the cache grows instead: pass
            no cache_index, and each call appends its T positions. The memory is read from the
            cache, so pass None; with `build_cache(memory, beam_size=K)` the inputs hold K
            adjacent rows (hypotheses) per sentence of the memory.
        return_attention_scores: also return the encoder-decoder weights, one [B, H, T, S]
            tensor per layer.

    Returns [B, T, d_model]; then the updated cache if one was given; then the weights if asked.

    Example:
        >>> import numpy as np
        >>> decoder = Decoder(num_layers=2, num_heads=2, d_ff=32)
        >>> target, memory = np.ones((1, 3, 8), "float32"), np.ones((1, 5, 8), "float32")
        >>> tuple(decoder(target, memory).shape)
        (1, 3, 8)
    """

    layer_class = DecoderLayer

    def build(self, inputs_shape, memory_shape=None):
        self.build_stack(inputs_shape, memory_shape=memory_shape)

    def build_cache(self, memory, max_length=None, beam_size=1):
        """The initial decoding cache: per layer, an empty self-attention cache for
        `max_length` positions (None: a growing one) and `beam_size` hypotheses (rows) per
        sentence, and the memory's keys and values, projected once and shared by a sentence's
        hypotheses."""
        batch_size = keras.ops.shape(memory)[0] * beam_size
        return [
            {
                "self": layer.self_attention.empty_cache(batch_size, max_length),
                "cross": layer.cross_attention.memory_cache(memory),
            }
            for layer in self.layers
        ]

    def call(
        self,
        inputs,
        memory=None,
        target_padding_mask=None,
        source_padding_mask=None,
        cache=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
    ):
        if cache is None and cache_index is not None:
            raise ValueError(f"{self.name}: a cache_index needs a cache")
        if cache is None and memory is None:
            raise ValueError(
                f"{self.name}: memory (the encoder output) is required without a cache"
            )
        start_index = 0
        if cache is not None:  # where every layer writes and looks, computed once
            cache_shape = keras.ops.shape(cache[0]["self"]["key"])
            new_length = keras.ops.shape(inputs)[1]
            if cache_index is None:  # a growing cache: the inputs follow what it holds
                start_index = cache_shape[2]
                cache_index = appended_positions(start_index, new_length)
            else:
                start_index = cache_index
                cache_index = cache_positions(cache_index, new_length, cache_shape)
        x = self.embed_positions(inputs, start_index=start_index, training=training)
        new_cache, all_weights = [], []
        for i, layer in enumerate(self.layers):
            outputs = layer(
                x,
                memory,
                target_padding_mask,
                source_padding_mask,
                cache=None if cache is None else cache[i],
                cache_index=cache_index,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            x, *extras = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
            if cache is not None:
                new_cache.append(extras.pop(0))
            if return_attention_scores:
                all_weights.append(extras[0])
        results = (self.finish(x),)
        if cache is not None:
            results += (new_cache,)
        if return_attention_scores:
            results += (all_weights,)
        return results[0] if len(results) == 1 else results

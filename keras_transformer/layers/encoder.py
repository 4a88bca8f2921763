"""The encoder, §3.1 (left half of Figure 1)."""

import keras

from keras_transformer.layers.positional import like_inputs
from keras_transformer.layers.stack import Stack, SublayerConnections


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(SublayerConnections):
    """One encoder layer (§3.1): multi-head self-attention, then the position-wise FFN, each
    with its residual connection and layer normalization.

    Args:
        num_heads: h. d_ff: the feed-forward network's inner size.
        key_dim, value_dim: d_k and d_v (default None: d_model / h).
        dropout: P_drop on each sub-layer's output (default 0.1, §5.4).
        attention_dropout: dropout on the attention weights (default 0.0; not in the paper).
        relu_dropout: dropout on the FFN's hidden ReLU (default 0.0; not in the paper).
        norm_first: pre-norm instead of the paper's post-norm (default False).
        **kwargs: Keras layer arguments (name, dtype).

    Call with inputs [B, S, d_model] and an optional boolean `padding_mask` [B, S]
    (True = real token); returns [B, S, d_model].

    Example:
        >>> import numpy as np
        >>> layer = EncoderLayer(num_heads=2, d_ff=32)
        >>> mask = np.array([[1, 1, 1, 0]], bool)
        >>> tuple(layer(np.ones((1, 4, 8), "float32"), padding_mask=mask).shape)
        (1, 4, 8)
    """

    def call(self, inputs, padding_mask=None, training=None):
        x = inputs
        h = self.sublayer_input(x, self.self_attention_norm)
        h = self.self_attention(h, attention_mask=padding_mask, training=training)
        x = self.sublayer_output(x, h, self.self_attention_norm, training)
        h = self.feed_forward(self.sublayer_input(x, self.feed_forward_norm), training=training)
        return self.sublayer_output(x, h, self.feed_forward_norm, training)

    def compute_output_spec(self, inputs, padding_mask=None, training=None):
        return like_inputs(self, inputs)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(Stack):
    """The encoder stack (§3.1): Dropout(embedded source + positional encoding), then
    `num_layers` EncoderLayers.

    Args:
        num_layers: N. num_heads, d_ff: as for each layer.
        positional: "sinusoidal" (default, §3.5) or "learned" (Table 3, row E).
        max_length: the longest sequence of learned positions (default 512).
        key_dim, value_dim, dropout, attention_dropout, relu_dropout, norm_first: passed to each
            layer (their defaults: None, None, 0.1, 0.0, 0.0, False); dropout also acts on the
            embedding sums.
        **kwargs: Keras layer arguments (name, dtype).

    Call with the embedded source [B, S, d_model] and an optional boolean `padding_mask` [B, S];
    returns the memory [B, S, d_model] that the decoder attends to.

    Example:
        >>> import numpy as np
        >>> encoder = Encoder(num_layers=2, num_heads=2, d_ff=32)
        >>> tuple(encoder(np.ones((1, 4, 8), "float32")).shape)
        (1, 4, 8)
    """

    layer_class = EncoderLayer

    def build(self, inputs_shape):
        self.build_stack(inputs_shape)

    def call(self, inputs, padding_mask=None, training=None):
        x = self.embed_positions(inputs, training=training)
        for layer in self.layers:
            x = layer(x, padding_mask=padding_mask, training=training)
        return self.finish(x)

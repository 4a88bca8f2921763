"""What the encoder and decoder stacks of §3.1 have in common.

Every sub-layer is wrapped in a residual connection with layer normalization:
post-norm (the paper) LayerNorm(x + Dropout(Sublayer(x))), or pre-norm (`norm_first=True`)
x + Dropout(Sublayer(LayerNorm(x))) with a final LayerNorm after the stack. Dropout is also
applied to the sums of embeddings and positional encodings (§5.4).
"""

import inspect

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.positional import positional_layer

LAYER_NORM_EPSILON = 1e-6
# The optional hyper-parameters of EncoderLayer and DecoderLayer, which Encoder and Decoder pass on.
OPTIONS = ("key_dim", "value_dim", "dropout", "attention_dropout", "relu_dropout", "norm_first")


def layer_norm(parent, name):
    """A LayerNorm sub-layer of `parent`, in its dtype policy (statistics stay float32)."""
    return keras.layers.LayerNormalization(
        epsilon=LAYER_NORM_EPSILON, dtype=parent.dtype_policy, name=name
    )


class SublayerConnections(keras.layers.Layer):
    """Base of EncoderLayer and DecoderLayer: their hyper-parameters, the sub-layers both have
    (self-attention and the feed-forward network, each with its LayerNorm), and the residual
    connection around every sub-layer."""

    def __init__(
        self,
        num_heads,
        d_ff,
        key_dim=None,
        value_dim=None,
        dropout=0.1,
        attention_dropout=0.0,
        relu_dropout=0.0,
        norm_first=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.norm_first = norm_first
        self.residual_dropout = keras.layers.Dropout(
            dropout, dtype=self.dtype_policy, name="residual_dropout"
        )
        self.self_attention = self.attention_sublayer("self_attention")
        self.self_attention_norm = layer_norm(self, "self_attention_norm")
        self.feed_forward = PositionwiseFeedForward(
            d_ff, relu_dropout, dtype=self.dtype_policy, name="feed_forward"
        )
        self.feed_forward_norm = layer_norm(self, "feed_forward_norm")

    def attention_sublayer(self, name):
        """A MultiHeadAttention with this layer's heads, sizes, dropout and dtype policy."""
        return MultiHeadAttention(
            self.num_heads,
            self.key_dim,
            self.value_dim,
            self.attention_dropout,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, inputs_shape):
        for layer in (
            self.self_attention,
            self.self_attention_norm,
            self.feed_forward,
            self.feed_forward_norm,
        ):
            layer.build(inputs_shape)

    def sublayer_input(self, x, norm):
        """What a sub-layer reads: x (post-norm) or LayerNorm(x) (pre-norm)."""
        return norm(x) if self.norm_first else x

    def sublayer_output(self, x, sublayer_out, norm, training):
        """x + Dropout(Sublayer(...)), normalized afterwards in the post-norm arrangement."""
        x = x + self.residual_dropout(sublayer_out, training=training)
        return x if self.norm_first else norm(x)

    def get_config(self):
        return {
            **super().get_config(),
            **{name: getattr(self, name) for name in ("num_heads", "d_ff", *OPTIONS)},
        }


class Stack(keras.layers.Layer):
    """Base of Encoder and Decoder: positional encoding plus dropout on the embedded input,
    `num_layers` copies of `layer_class`, and the final LayerNorm of the pre-norm variant."""

    layer_class = None  # set by subclasses

    def __init__(
        self, num_layers, num_heads, d_ff, positional="sinusoidal", max_length=512, **kwargs
    ):
        options = {name: kwargs.pop(name) for name in OPTIONS if name in kwargs}
        super().__init__(**kwargs)
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.num_layers = num_layers
        self.positional = positional
        self.max_length = max_length
        defaults = inspect.signature(SublayerConnections).parameters
        self.layer_arguments = {
            "num_heads": num_heads,
            "d_ff": d_ff,
            **{n: defaults[n].default for n in OPTIONS},
            **options,
        }
        dropout = self.layer_arguments["dropout"]
        policy = self.dtype_policy
        self.position = positional_layer(positional, max_length, dtype=policy, name="position")
        self.embedding_dropout = keras.layers.Dropout(
            dropout, dtype=policy, name="embedding_dropout"
        )
        self.layers = [
            self.layer_class(**self.layer_arguments, dtype=policy, name=f"layer_{i}")
            for i in range(num_layers)
        ]
        self.final_norm = (
            layer_norm(self, "final_norm") if self.layer_arguments["norm_first"] else None
        )

    def embed_positions(self, inputs, start_index=0, training=None):
        """Dropout(inputs + PE) for embedded inputs [B, T, d_model] (§3.5, §5.4)."""
        return self.embedding_dropout(
            self.position(inputs, start_index=start_index), training=training
        )

    def finish(self, x):
        return x if self.final_norm is None else self.final_norm(x)

    def build_stack(self, inputs_shape, **layer_shapes):
        self.position.build(inputs_shape)
        for layer in self.layers:
            layer.build(inputs_shape, **layer_shapes)
        if self.final_norm is not None:
            self.final_norm.build(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            **self.layer_arguments,
            "num_layers": self.num_layers,
            "positional": self.positional,
            "max_length": self.max_length,
        }

"""The encoder, §3.1 (left half of Figure 1)."""

import keras

from keras_transformer.layers.stack import Stack, SublayerConnections


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(SublayerConnections):
    """One encoder layer (§3.1): multi-head self-attention, then the position-wise FFN, each
    with its residual connection and layer normalization.

    Call with inputs [B, S, d_model] and an optional boolean `padding_mask` [B, S]
    (True = real token); returns [B, S, d_model].
    """

    def call(self, inputs, padding_mask=None, training=None):
        x = inputs
        h = self.sublayer_input(x, self.self_attention_norm)
        h = self.self_attention(h, attention_mask=padding_mask, training=training)
        x = self.sublayer_output(x, h, self.self_attention_norm, training)
        h = self.feed_forward(self.sublayer_input(x, self.feed_forward_norm))
        return self.sublayer_output(x, h, self.feed_forward_norm, training)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(Stack):
    """The encoder stack (§3.1): Dropout(embedded source + positional encoding), then
    `num_layers` EncoderLayers.

    Call with the embedded source [B, S, d_model] and an optional boolean `padding_mask` [B, S];
    returns the memory [B, S, d_model] that the decoder attends to.
    """

    layer_class = EncoderLayer

    def build(self, inputs_shape):
        self.build_stack(inputs_shape)

    def call(self, inputs, padding_mask=None, training=None):
        x = self.embed_positions(inputs, training=training)
        for layer in self.layers:
            x = layer(x, padding_mask=padding_mask, training=training)
        return self.finish(x)

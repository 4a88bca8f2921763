"""One Keras layer per box of Figure 1."""

from keras_transformer.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.embedding import SharedEmbedding
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
)

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "SharedEmbedding",
    "SinusoidalPositionalEncoding",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]

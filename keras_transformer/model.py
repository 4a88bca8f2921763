"""The whole model of Figure 1, assembled with the functional API."""

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers import Decoder, Encoder, SharedEmbedding

PAD_ID = 0


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The encoder-decoder Transformer (Figure 1) as a functional Keras model.

    Inputs {"source": int [B, S], "target": int [B, T]} (0 = padding; the target is shifted
    right, starting with bos); output float32 logits [B, T, vocab_size]. The sub-layers are
    reachable as `embedding`, `encoder` and `decoder` for incremental decoding.
    """

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        embedding = SharedEmbedding(
            config.vocab_size, config.d_model, config.share_embeddings, name="embedding"
        )
        stack_arguments = dict(
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            d_ff=config.d_ff,
            key_dim=config.key_dim,
            value_dim=config.value_dim,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            norm_first=config.norm_first,
            positional=config.positional,
            max_length=config.max_length,
        )
        encoder = Encoder(**stack_arguments, name="encoder")
        decoder = Decoder(**stack_arguments, name="decoder")

        source = keras.Input(shape=(None,), dtype="int32", name="source")
        target = keras.Input(shape=(None,), dtype="int32", name="target")
        source_mask = ops.not_equal(source, PAD_ID)
        target_mask = ops.not_equal(target, PAD_ID)
        memory = encoder(embedding(source, mode="source"), padding_mask=source_mask)
        decoded = decoder(
            embedding(target, mode="target"), memory,
            target_padding_mask=target_mask, source_padding_mask=source_mask,
        )
        logits = embedding(decoded, mode="logits")
        super().__init__(inputs={"source": source, "target": target}, outputs=logits, **kwargs)
        self.config = config
        self.embedding = embedding
        self.encoder = encoder
        self.decoder = decoder

    def call(self, inputs, training=None, mask=None):
        _check_inputs(inputs)
        return super().call(inputs, training=training, mask=mask)

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _check_inputs(inputs):
    """Names what was expected when "source" or "target" is not int [batch, length].

    Keras has already checked the dict keys; it would cast float ids and reshape some ranks
    silently, so dtype and rank are checked here.
    """
    for name, tensor in inputs.items():
        shape = tuple(ops.shape(tensor))
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        if len(shape) != 2:
            raise ValueError(
                f"Transformer input '{name}' must have rank 2 [batch, length]; got shape {shape}"
            )
        if "int" not in dtype:
            raise ValueError(
                f"Transformer input '{name}' must hold integer token ids (0 = padding); got dtype {dtype}"
            )


def build_transformer(config):
    """The functional model of Figure 1 for a `TransformerConfig`."""
    return Transformer(config, name="transformer")

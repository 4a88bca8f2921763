"""The whole model of Figure 1, assembled with the functional API."""

import keras
from keras import ops

from keras_transformer import compat
from keras_transformer.accumulation import ACCUMULATION
from keras_transformer.config import TransformerConfig
from keras_transformer.ids import PAD_ID
from keras_transformer.layers import Decoder, Encoder, SharedEmbedding
from keras_transformer.layers.stack import OPTIONS

# The config fields that Encoder and Decoder take under the same names.
STACK_FIELDS = ("num_layers", "num_heads", "d_ff", *OPTIONS, "positional", "max_length")


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(*compat.TRAINER_FIXES, ACCUMULATION, keras.Model):
    """The encoder-decoder Transformer (Figure 1) as a functional Keras model.

    Inputs {"source": int [B, S], "target": int [B, T]} (0 = padding; the target is shifted
    right, starting with bos); output float32 logits [B, T, vocab_size]. The sub-layers are
    reachable as `embedding`, `encoder` and `decoder` for incremental decoding. `compile` takes
    `accumulate_steps` (gradient accumulation, `accumulation.GradientAccumulation`). Under the
    TensorFlow backend it carries `compat.TRAINER_FIXES` (tf.distribute workarounds).
    """

    def __init__(self, config, dtype=None, **kwargs):
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        embedding = SharedEmbedding(
            config.vocab_size,
            config.d_model,
            config.share_embeddings,
            dtype=dtype,
            name="embedding",
        )
        stack_arguments = {name: getattr(config, name) for name in STACK_FIELDS}
        encoder = Encoder(**stack_arguments, dtype=dtype, name="encoder")
        decoder = Decoder(**stack_arguments, dtype=dtype, name="decoder")

        source = keras.Input(shape=(None,), dtype="int32", name="source")
        target = keras.Input(shape=(None,), dtype="int32", name="target")
        source_mask = ops.not_equal(source, PAD_ID)
        target_mask = ops.not_equal(target, PAD_ID)
        memory = encoder(embedding(source, mode="source"), padding_mask=source_mask)
        decoded = decoder(
            embedding(target, mode="target"),
            memory,
            target_padding_mask=target_mask,
            source_padding_mask=source_mask,
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
        return {
            "config": self.config.to_dict(),
            "dtype": keras.dtype_policies.serialize(self.embedding.dtype_policy),
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _check_inputs(inputs):
    """Names what was expected when the inputs are not {"source": int [B, S], "target": int [B, T]}.

    Keras checks dict keys, but it would cast float ids and reshape some ranks silently.
    """
    if not isinstance(inputs, dict):
        raise ValueError(
            'Transformer inputs must be a dict {"source": ids [batch, source_length], '
            f'"target": ids [batch, target_length]}}; got {type(inputs).__name__}'
        )
    for name, tensor in inputs.items():
        shape = tuple(ops.shape(tensor))
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        if len(shape) != 2:
            raise ValueError(
                f"Transformer input '{name}' must have rank 2 [batch, length]; got shape {shape}"
            )
        if "int" not in dtype:
            raise ValueError(
                f"Transformer input '{name}' must hold integer token ids (0 = padding); got dtype "
                f"{dtype}"
            )


def build_transformer(config):
    """The functional model of Figure 1 for a `TransformerConfig`."""
    return Transformer(config, name="transformer")

"""The peer of the benchmarks: a Transformer of the same size built from KerasHub's
`TransformerEncoder` / `TransformerDecoder`, and greedy decoding with their key/value caches
(TensorFlow; the model itself trains under any backend, as `benchmarks.gpu` runs it)."""

import keras
import keras_hub


class KerasHubTransformer:
    """Encoder-decoder from KerasHub layers with the sizes of a TransformerConfig: learned
    positions (TokenAndPositionEmbedding), post-norm, an untied output projection."""

    def __init__(self, config):
        self.config = config
        self._compiled = {}  # jit_compile -> tf.function
        layer_args = dict(
            intermediate_dim=config.d_ff,
            num_heads=config.num_heads,
            dropout=config.dropout,
            layer_norm_epsilon=1e-6,
        )
        embedding = dict(
            vocabulary_size=config.vocab_size,
            sequence_length=config.max_length,
            embedding_dim=config.d_model,
        )
        self.source_embedding = keras_hub.layers.TokenAndPositionEmbedding(**embedding)
        self.target_embedding = keras_hub.layers.TokenAndPositionEmbedding(**embedding)
        self.encoder = [
            keras_hub.layers.TransformerEncoder(**layer_args) for _ in range(config.num_layers)
        ]
        self.decoder = [
            keras_hub.layers.TransformerDecoder(**layer_args) for _ in range(config.num_layers)
        ]
        self.projection = keras.layers.Dense(config.vocab_size)

        source = keras.Input((None,), dtype="int32", name="source")
        target = keras.Input((None,), dtype="int32", name="target")
        memory = self.encode(source)
        x = self.target_embedding(target)
        for layer in self.decoder:
            x = layer(x, memory, decoder_padding_mask=target != 0, encoder_padding_mask=source != 0)
        self.model = keras.Model({"source": source, "target": target}, self.projection(x))

    def encode(self, source):
        x = self.source_embedding(source)
        for layer in self.encoder:
            x = layer(x, padding_mask=source != 0)
        return x

    def greedy(self, source, length, bos_id=2, jit_compile=False):
        """Greedy decoding of `length` tokens [B, length] with the decoders' caches (the way
        KerasHub's seq2seq models decode), as one tf.function, compiled with XLA if asked."""
        import tensorflow as tf

        if jit_compile not in self._compiled:
            self._compiled[jit_compile] = tf.function(
                self._greedy, jit_compile=jit_compile, reduce_retracing=True
            )
        return self._compiled[jit_compile](tf.convert_to_tensor(source, tf.int32), length, bos_id)

    def _greedy(self, source, length, bos_id):
        import tensorflow as tf

        memory = self.encode(source)
        batch = tf.shape(source)[0]
        head_dim = self.config.d_model // self.config.num_heads
        empty = tf.zeros([batch, 2, length, self.config.num_heads, head_dim], memory.dtype)
        cross_empty = tf.zeros(
            [batch, 2, tf.shape(source)[1], self.config.num_heads, head_dim], memory.dtype
        )
        token = tf.fill([batch, 1], bos_id)

        def step(index, token, self_caches, cross_caches, first):
            x = self.target_embedding(token, start_index=index)
            new_self, new_cross = [], []
            for layer, self_cache, cross_cache in zip(self.decoder, self_caches, cross_caches):
                x, self_cache, cross_cache = layer(
                    x,
                    memory,
                    encoder_padding_mask=source != 0,
                    self_attention_cache=self_cache,
                    self_attention_cache_update_index=index,
                    cross_attention_cache=cross_cache,
                    cross_attention_cache_update_index=0 if first else None,
                )
                new_self.append(self_cache)
                new_cross.append(cross_cache)
            next_token = tf.argmax(self.projection(x)[:, -1], axis=-1, output_type=tf.int32)[
                :, None
            ]
            return next_token, new_self, new_cross

        # The first step fills the cross-attention caches; the loop reuses them.
        token, self_caches, cross_caches = step(
            0, token, [empty] * len(self.decoder), [cross_empty] * len(self.decoder), first=True
        )
        output = tf.TensorArray(tf.int32, size=length)
        output = output.write(0, token[:, 0])

        def body(index, token, self_caches, output):
            token, self_caches, _ = step(index, token, self_caches, cross_caches, first=False)
            return index + 1, token, self_caches, output.write(index, token[:, 0])

        _, _, _, output = tf.while_loop(
            lambda i, *_: i < length, body, (1, token, self_caches, output)
        )
        return tf.transpose(output.stack())

"""Positional encodings, §3.5: the sinusoids of the paper and the learned alternative (Table 3,
row E)."""

import keras
from keras import ops


def sinusoidal_encoding(positions, depth):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Args:
        positions: float or int tensor [T] of absolute positions.
        depth: d_model.

    Returns:
        float32 [T, depth], sines in the even dimensions and cosines in the odd ones.
    """
    dims = ops.arange(depth)
    even_dims = ops.cast(dims - dims % 2, "float32")  # 2i for both dimension 2i and 2i+1
    inverse_frequency = ops.power(10000.0, -even_dims / float(depth))
    angles = ops.cast(positions, "float32")[:, None] * inverse_frequency[None, :]
    return ops.where(dims % 2 == 0, ops.sin(angles), ops.cos(angles))


def _positions(inputs, start_index):
    return ops.arange(ops.shape(inputs)[1]) + ops.cast(start_index, "int32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding of §3.5 to [B, T, d_model] inputs; any length.

    Args:
        **kwargs: Keras layer arguments (name, dtype); the layer has no weights.

    Call arguments:
        inputs: [B, T, d_model].
        start_index: the position of the first input (default 0; an int or a scalar tensor),
            for decoding one step at a time.

    Example:
        >>> import numpy as np
        >>> encoded = SinusoidalPositionalEncoding()(np.zeros((1, 2, 4), "float32"))
        >>> np.round(np.asarray(encoded, "float64")[0], 3).tolist()  # sin p, cos p, sin p/100, ...
        [[0.0, 1.0, 0.0, 1.0], [0.841, 0.54, 0.01, 1.0]]
    """

    def call(self, inputs, start_index=0):
        encoding = sinusoidal_encoding(_positions(inputs, start_index), inputs.shape[-1])
        return inputs + ops.cast(encoding, inputs.dtype)[None]

    def compute_output_spec(self, inputs, start_index=0):
        return like_inputs(self, inputs)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Adds a learned embedding of each position (Table 3, row E) to [B, T, d_model] inputs.

    Args:
        max_length: the number of positions learned; positions must stay below it.
        **kwargs: Keras layer arguments (name, dtype).

    Call arguments:
        inputs: [B, T, d_model].
        start_index: the position of the first input (default 0), as for the sinusoids.

    Example:
        >>> import numpy as np
        >>> positions = LearnedPositionalEmbedding(max_length=16)
        >>> tuple(positions(np.zeros((2, 5, 8), "float32"), start_index=3).shape)
        (2, 5, 8)
    """

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        self.max_length = max_length

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_length, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=input_shape[-1] ** -0.5),
        )

    def call(self, inputs, start_index=0):
        length = inputs.shape[1]
        message = (
            f"{self.name}: a position past the learned positional embedding's "
            f"max_length={self.max_length} was requested"
        )
        static = length is not None and isinstance(start_index, int)
        if static and start_index + length > self.max_length:
            raise ValueError(f"{message} (position {start_index + length - 1})")
        positions = _positions(inputs, start_index)
        if not static and keras.backend.backend() == "tensorflow":
            # Lengths known only at run time (tf.function, fit): a gather past the table would
            # fail obscurely on CPU and return zeros on GPU, so assert in the graph, before the
            # gather (without the dependency the gather's own error could come first).
            import tensorflow as tf

            with tf.control_dependencies(
                [tf.debugging.assert_less(positions[-1:], self.max_length, message=message)]
            ):
                positions = tf.identity(positions)
        embedding = ops.take(self.position_embeddings, positions, axis=0)
        return inputs + ops.cast(embedding, inputs.dtype)[None]

    def compute_output_spec(self, inputs, start_index=0):
        return like_inputs(self, inputs)

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}


def like_inputs(layer, inputs):
    """The output spec of a layer whose output has its inputs' shape, in its compute dtype (as
    `__call__` casts the inputs): Keras's own inference runs `call` outside that cast."""
    return keras.KerasTensor(inputs.shape, layer.compute_dtype)


POSITIONAL_KINDS = ("sinusoidal", "learned")


def positional_layer(kind, max_length, **kwargs):
    """The positional layer for `kind`: "sinusoidal" (§3.5) or "learned" (Table 3, row E)."""
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(**kwargs)
    if kind == "learned":
        return LearnedPositionalEmbedding(max_length, **kwargs)
    raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {kind!r}")

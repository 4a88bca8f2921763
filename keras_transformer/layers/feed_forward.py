"""Position-wise feed-forward network, §3.3, Eq. 2."""

import keras


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately (Eq. 2).

    Args:
        d_ff: the inner size (2048 in the base model); the output size is the input's d_model.
        dropout: dropout on max(0, x W1 + b1) while training (default 0.0, as the paper; the
            "ReLU dropout" of the Transformer's tensor2tensor code, a low-resource lever).
        **kwargs: Keras layer arguments (name, dtype).

    Example:
        >>> import numpy as np
        >>> tuple(PositionwiseFeedForward(d_ff=32)(np.ones((2, 5, 8), "float32")).shape)
        (2, 5, 8)
    """

    def __init__(self, d_ff, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_ff = d_ff
        self.dropout = dropout
        self.inner = keras.layers.Dense(
            d_ff, activation="relu", dtype=self.dtype_policy, name="inner"
        )
        self.relu_dropout = keras.layers.Dropout(
            dropout, dtype=self.dtype_policy, name="relu_dropout"
        )

    def build(self, input_shape):
        self.outer = keras.layers.Dense(input_shape[-1], dtype=self.dtype_policy, name="outer")
        self.inner.build(input_shape)
        self.outer.build((*input_shape[:-1], self.d_ff))

    def call(self, inputs, training=None):
        # Position-wise: every position of the batch is a row of one 2-D matmul per layer.
        rows = keras.ops.reshape(inputs, (-1, inputs.shape[-1]))
        hidden = self.relu_dropout(self.inner(rows), training=training)
        return keras.ops.reshape(self.outer(hidden), keras.ops.shape(inputs))

    def get_config(self):
        return {**super().get_config(), "d_ff": self.d_ff, "dropout": self.dropout}

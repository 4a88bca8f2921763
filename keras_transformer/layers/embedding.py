"""Embeddings and softmax, §3.4."""

import math

import keras
from keras import ops

MODES = ("source", "target", "logits")


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """One weight matrix for the source embedding, the target embedding and the pre-softmax
    linear transformation (§3.4); embeddings are multiplied by sqrt(d_model).

    Args:
        vocab_size: the size of the shared subword vocabulary.
        d_model: the embedding size.
        share_embeddings: one matrix for both languages (default True, the paper); False gives
            the source a matrix of its own, while the target embedding stays tied to the
            pre-softmax projection.
        **kwargs: Keras layer arguments (name, dtype).

    Call arguments:
        inputs: int ids [B, T] for `mode="source"` or `"target"` (embeddings [B, T, d_model]),
            or decoder outputs [..., d_model] for `mode="logits"` (float32 logits [..., vocab]).
        mode: "source", "target" (default) or "logits".
        projection: for `mode="logits"`, the result of `output_projection()` computed earlier
            (default None: computed now). Decoding computes it once, before its loop.

    Example:
        >>> import numpy as np
        >>> embedding = SharedEmbedding(vocab_size=100, d_model=8)
        >>> embedded = embedding(np.array([[5, 6, 0]]), mode="source")
        >>> tuple(embedded.shape), tuple(embedding(embedded, mode="logits").shape)
        ((1, 3, 8), (1, 3, 100))
    """

    def __init__(self, vocab_size, d_model, share_embeddings=True, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.share_embeddings = share_embeddings

    def build(self, inputs_shape=None):
        def matrix(name):
            # Unit-variance embeddings after the sqrt(d_model) scaling. A fresh initializer per
            # matrix: an unseeded Keras initializer repeats its values when called twice.
            initializer = keras.initializers.RandomNormal(stddev=self.d_model**-0.5)
            return self.add_weight(
                name=name, shape=(self.vocab_size, self.d_model), initializer=initializer
            )

        self.target_embeddings = matrix("embeddings")
        self.source_embeddings = self.target_embeddings
        if not self.share_embeddings:
            self.source_embeddings = matrix("source_embeddings")

    def output_projection(self):
        """The pre-softmax linear transformation [d_model, vocab]: the target embedding matrix
        transposed (§3.4) and laid out anew: on a CPU, a matmul of a few rows against a
        transposed matrix runs several times slower than against this copy (the figures:
        docs/design-choices.md)."""
        return ops.transpose(ops.cast(self.target_embeddings, self.compute_dtype))

    def call(self, inputs, mode="target", projection=None):
        if mode not in MODES:
            raise ValueError(f"{self.name}: mode must be one of {MODES}, got {mode!r}")
        if mode == "logits":
            projection = self.output_projection() if projection is None else projection
            return ops.cast(ops.matmul(inputs, ops.cast(projection, inputs.dtype)), "float32")
        matrix = self.source_embeddings if mode == "source" else self.target_embeddings
        embedded = ops.take(matrix, inputs, axis=0)
        return embedded * ops.cast(math.sqrt(self.d_model), embedded.dtype)

    def compute_output_spec(self, inputs, mode="target", projection=None):
        """What `call` returns, without running it: embeddings [..., d_model] in the compute
        dtype, logits [..., vocab] in float32 (Keras's own inference, outside `__call__`'s
        autocast, would read the float32 matrix and say float32 for both)."""
        if mode == "logits":
            return keras.KerasTensor((*inputs.shape[:-1], self.vocab_size), "float32")
        return keras.KerasTensor((*inputs.shape, self.d_model), self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, d_model=self.d_model, share_embeddings=self.share_embeddings
        )
        return config

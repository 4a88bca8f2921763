"""Label-smoothed cross-entropy (§5.4) and accuracy, both ignoring padding."""

import keras
from keras import ops

from keras_transformer.ids import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy against the smoothed target q = (1 - eps) * onehot(y) + eps / V (§5.4,
    label smoothing of Szegedy et al.), normalised by the number of real (non-padding) target
    tokens.

    y_true: int [B, T] (0 = padding); y_pred: logits [B, T, V]. The loss is the mean over the
    batch's real tokens (a `sample_weight` scales each token's share of it, as Keras weighs
    losses); under tf.distribute each replica takes the mean over its own tokens and Keras
    averages the replicas.

    token_weights=True: `sample_weight` [B, T] holds per-token weights that already divide by
    the update's token count (`kt.data.weigh_tokens`), and the loss is sum_t w_t * loss_t
    (padding excluded): summed over replicas and accumulated micro-batches, exactly the mean
    over every real token of the update. Without a sample_weight it is the mean as above.
    """

    def __init__(
        self, label_smoothing=0.1, token_weights=False, name="label_smoothed_cross_entropy"
    ):
        super().__init__(name=name, reduction="sum_over_batch_size")
        if not 0 <= label_smoothing < 1:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.label_smoothing = label_smoothing
        self.token_weights = bool(token_weights)

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is None or not self.token_weights:
            return super().__call__(y_true, y_pred, sample_weight)
        if len(sample_weight.shape) != 2:
            raise ValueError(
                "LabelSmoothedCrossEntropy takes token weights [batch, target_length] "
                f"(kt.data.weigh_tokens); got sample_weight of shape {tuple(sample_weight.shape)}"
            )
        with keras.name_scope(self.name):
            losses, real = self.token_losses(y_true, y_pred)
            weights = ops.where(real, ops.cast(sample_weight, "float32"), 0.0)
            return ops.sum(losses * weights)

    def call(self, y_true, y_pred):
        # Keras divides the sum by B*T; weight real tokens by B*T / count so the result is
        # the mean over real tokens (the reduction Keras itself applies to masked losses).
        losses, real = self.token_losses(y_true, y_pred)
        count = ops.sum(ops.cast(real, "float32"))
        total = ops.cast(ops.size(real), "float32")
        return ops.where(real, losses * ops.divide_no_nan(total, count), 0.0)

    def token_losses(self, y_true, y_pred):
        """(-sum_k q_k log p_k for every position [B, T], real-token mask [B, T]), in float32.

        Since q sums to 1 and log p = z - logsumexp(z) for logits z, the loss is
        logsumexp(z) - sum_k q_k z_k: reductions over the vocabulary alone (gradient
        softmax(z) - q). Under XLA q and q * z fuse into the reduction, so no [B, T, V] tensor but
        the logits' gradient is written. Without XLA (TensorFlow's default) it runs as fast as
        log_softmax against q, while taking z_y by take_along_axis (faster under XLA) is slower
        there, its gradient a scatter into [B, T, V] (the figures: docs/design-choices.md).
        """
        labels = ops.cast(y_true, "int32")
        logits = ops.cast(y_pred, "float32")
        vocab_size = y_pred.shape[-1]
        smoothed = (
            ops.one_hot(labels, vocab_size) * (1.0 - self.label_smoothing)
            + self.label_smoothing / vocab_size
        )
        losses = ops.logsumexp(logits, axis=-1) - ops.sum(smoothed * logits, axis=-1)
        return losses, ops.not_equal(labels, PAD_ID)

    def get_config(self):
        return {
            "name": self.name,
            "label_smoothing": self.label_smoothing,
            "token_weights": self.token_weights,
        }


def _correct_and_real(y_true, y_pred):
    """Counts of correctly predicted non-padding tokens and of non-padding tokens."""
    labels = ops.cast(y_true, "int32")
    real = ops.not_equal(labels, PAD_ID)
    predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
    correct = ops.logical_and(real, ops.equal(predicted, labels))
    return ops.sum(ops.cast(correct, "float32")), ops.sum(ops.cast(real, "float32"))


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_accuracy(y_true, y_pred):
    """Fraction of non-padding target tokens whose argmax prediction is right, in one batch.

    Passed to `compile`, Keras averages it per batch; `MaskedAccuracy` counts tokens instead.
    """
    correct, real = _correct_and_real(y_true, y_pred)
    return ops.divide_no_nan(correct, real)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """Token accuracy over non-padding tokens, accumulated over all batches seen."""

    def __init__(self, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.correct = self.add_variable((), initializer="zeros", name="correct")
        self.total = self.add_variable((), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise ValueError(
                "MaskedAccuracy weighs tokens by the padding mask; sample_weight is not supported"
            )
        correct, real = _correct_and_real(y_true, y_pred)
        self.correct.assign_add(correct)
        self.total.assign_add(real)

    def result(self):
        return ops.divide_no_nan(self.correct, self.total)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

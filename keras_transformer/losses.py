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

        Its gradient is softmax(z) - q. Other backends than TensorFlow differentiate
        logsumexp(z) - sum_k q_k z_k: reductions over the vocabulary alone, which XLA (JAX's)
        fuses with q and q * z, so that no [B, T, V] tensor but the logits' gradient is written.
        TensorFlow without XLA, its default, runs each op over [B, T, V] on its own, so under
        TensorFlow `_tensorflow_token_losses` writes the gradient out instead (the figures:
        docs/design-choices.md).
        """
        labels = ops.cast(y_true, "int32")
        logits = ops.cast(y_pred, "float32")
        if keras.backend.backend() == "tensorflow":
            losses = _tensorflow_token_losses(labels, logits, self.label_smoothing)
        else:
            losses = _reduced_token_losses(labels, logits, self.label_smoothing)
        return losses, ops.not_equal(labels, PAD_ID)

    def get_config(self):
        return {
            "name": self.name,
            "label_smoothing": self.label_smoothing,
            "token_weights": self.token_weights,
        }


def _reduced_token_losses(labels, logits, label_smoothing):
    """-sum_k q_k log p_k = logsumexp(z) - sum_k q_k z_k per position, for autodiff."""
    vocab_size = logits.shape[-1]
    smoothed = (
        ops.one_hot(labels, vocab_size) * (1.0 - label_smoothing) + label_smoothing / vocab_size
    )
    return ops.logsumexp(logits, axis=-1) - ops.sum(smoothed * logits, axis=-1)


def _tensorflow_token_losses(labels, logits, label_smoothing):
    """-sum_k q_k log p_k = -(1 - eps) log p_y - eps * mean_k log p_k per position, with the
    gradient softmax(z) - q written out from the saved log p: one log-softmax forward, and
    backward exp, q, a difference and the upstream scaling, fewer ops over [B, T, V] than
    TensorFlow's autodiff of `_reduced_token_losses` runs."""
    import tensorflow as tf

    vocab_size, eps = logits.shape[-1], label_smoothing

    @tf.custom_gradient
    def losses(logits):
        log_probs = tf.nn.log_softmax(logits)
        label_log_probs = tf.gather(log_probs, labels, batch_dims=len(logits.shape) - 1)
        mean_log_probs = tf.reduce_mean(log_probs, axis=-1)

        def gradient(upstream):
            smoothed = tf.one_hot(
                labels,
                vocab_size,
                on_value=1.0 - eps + eps / vocab_size,
                off_value=eps / vocab_size,
            )
            return (tf.exp(log_probs) - smoothed) * upstream[..., None]

        return -(1.0 - eps) * label_log_probs - eps * mean_log_probs, gradient

    return losses(logits)


def _correct_and_real(y_true, y_pred):
    """Counts of correctly predicted non-padding tokens and of non-padding tokens.

    A token is right when its label's logit is the largest; a tie for the largest counts as
    right, which an argmax would settle by the first index (in float32 logits ties are rare; in
    logits computed in bfloat16 less so, which raises the accuracy a little). A max over the
    vocabulary, where an argmax is five element-wise passes over [B, T, V] in Keras's
    TensorFlow backend (its -0.0 fix) before TensorFlow's own slower reduction."""
    labels = ops.cast(y_true, "int32")
    real = ops.not_equal(labels, PAD_ID)
    label_logits = ops.take_along_axis(y_pred, labels[..., None], axis=-1)[..., 0]
    correct = ops.logical_and(real, label_logits >= ops.max(y_pred, axis=-1))
    return ops.sum(ops.cast(correct, "float32")), ops.sum(ops.cast(real, "float32"))


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_accuracy(y_true, y_pred):
    """Fraction of non-padding target tokens whose label's logit is the largest (ties count as
    right), in one batch.

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

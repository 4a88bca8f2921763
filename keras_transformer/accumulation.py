"""Gradient accumulation: one optimizer update from a batch run as several micro-batches, so that
the paper's batches (§5.1: about 25000 source and 25000 target tokens per update, on 8 GPUs)
fit on fewer or smaller devices."""

import numbers
import warnings

import keras
from keras import ops

BACKENDS = ("tensorflow", "jax")


class GradientAccumulation:
    """`compile(..., accumulate_steps=N)` for a keras.Model: every batch of `fit` is cut by rows
    into N micro-batches (micro-batch i takes rows i, i + N, i + 2N, ..., so that each spans a
    data-parallel batch's devices), run forward and backward one after the other, and their
    summed gradients make one update. `optimizer.iterations`, the schedule of Eq. 3, `fit`'s
    steps and every callback count updates, as without accumulation; only the memory a step
    needs shrinks (one micro-batch's activations at a time). Batches should hold a multiple of N
    pairs per replica (`make_batches(batch_size_multiple=N * replicas)`); others are padded
    with empty rows.

    With token weights (`kt.data.weigh_tokens` and `LabelSmoothedCrossEntropy(token_weights=
    True)`) the update is exactly the one of the whole batch in one step: the weighted loss sums
    over micro-batches. Without them each micro-batch's loss is its own token mean, and the
    update follows the mean of the means of the micro-batches that hold pairs.

    The training steps are the TensorFlow and JAX trainers' (`ACCUMULATION` picks one); under
    PyTorch N must be 1.
    """

    accumulate_steps = 1

    def compile(self, *args, accumulate_steps=1, **kwargs):
        if (
            isinstance(accumulate_steps, bool)
            or not isinstance(accumulate_steps, numbers.Integral)
            or accumulate_steps < 1
        ):
            raise ValueError(
                f"accumulate_steps must be a positive integer, got {accumulate_steps!r}"
            )
        if accumulate_steps > 1 and keras.backend.backend() not in BACKENDS:
            raise ValueError(
                "accumulate_steps > 1 (gradient accumulation) needs the TensorFlow or JAX "
                f"backend; Keras runs on {keras.backend.backend()}"
            )
        self.accumulate_steps = int(accumulate_steps)
        super().compile(*args, **kwargs)

    def get_compile_config(self):
        config = super().get_compile_config()
        if config and self.accumulate_steps > 1:
            config["accumulate_steps"] = self.accumulate_steps
        return config

    def compile_from_config(self, config):
        """Compiles a loaded model as it was saved (Keras's own would skip a custom compile);
        under a backend without accumulation, with accumulate_steps=1 and a warning."""
        config = keras.saving.deserialize_keras_object(config)
        if config.get("accumulate_steps", 1) > 1 and keras.backend.backend() not in BACKENDS:
            warnings.warn(
                f"the model was compiled with accumulate_steps={config.pop('accumulate_steps')}; "
                f"{keras.backend.backend()} has no gradient accumulation, so it is compiled "
                "without it",
                stacklevel=2,
            )
        self.compile(**config)
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def micro_batches(self, data):
        """(x, y, sample_weight) with every tensor [B, ...] -> [N, ceil(B / N), ...], micro-batch i
        holding rows i, i + N, ... (padded with empty rows); also B, and how many micro-batches
        hold rows: min(B, N)."""
        steps = self.accumulate_steps

        def split(tensor):
            if tensor is None:  # no sample weights
                return None
            shape = ops.shape(tensor)
            size = (shape[0] + steps - 1) // steps
            padding = [[0, size * steps - shape[0]]] + [[0, 0]] * (len(shape) - 1)
            rows = ops.reshape(ops.pad(tensor, padding), (size, steps, *shape[1:]))
            return ops.swapaxes(rows, 0, 1)

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        rows = ops.shape(y)[0]
        filled = ops.minimum(rows, steps) if sample_weight is None else steps
        return keras.tree.map_structure(split, (x, y, sample_weight)), rows, filled

    def loss_tracker(self):
        """The metric `fit` logs as "loss"."""
        return next(metric for metric in self.metrics if metric.name == "loss")


class TensorFlowGradientAccumulation(GradientAccumulation):
    """The training step of Keras's TensorFlow trainer with `accumulate_steps` micro-batches."""

    def train_step(self, data):
        if self.accumulate_steps == 1:
            return super().train_step(data)
        import tensorflow as tf

        steps = self.accumulate_steps
        (x, y, sample_weight), rows, filled = self.micro_batches(data)
        variables = self.trainable_variables

        def accumulate(i, total_loss, gradients):
            x_i = tf.nest.map_structure(lambda tensor: tensor[i], x)
            weight_i = None if sample_weight is None else sample_weight[i]
            with tf.GradientTape() as tape:
                y_pred = self(x_i, training=True)
                loss = self.compute_loss(
                    x=x_i, y=y[i], y_pred=y_pred, sample_weight=weight_i, training=True
                )
                if sample_weight is None:  # the mean of the micro-batches' means
                    loss = loss / tf.cast(filled, loss.dtype)
                scaled_loss = self.optimizer.scale_loss(loss)
            new = tape.gradient(scaled_loss, variables)
            self.compute_metrics(x_i, y[i], y_pred, sample_weight=weight_i)
            return (
                i + 1,
                total_loss + loss,
                [
                    old if g is None else old + tf.convert_to_tensor(g)
                    for old, g in zip(gradients, new)
                ],
            )

        _, loss, gradients = tf.while_loop(
            lambda i, *_: i < steps,
            accumulate,
            (tf.constant(0), tf.constant(0.0), [tf.zeros(v.shape, v.dtype) for v in variables]),
            parallel_iterations=1,  # one micro-batch's activations in memory at a time
        )
        self.optimizer.apply_gradients(zip(gradients, variables))
        # Logged as Keras logs it: the replica's loss times the replica count.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        self.loss_tracker().update_state(loss * replicas, sample_weight=rows)
        return self.get_metrics_result()


class JaxGradientAccumulation(GradientAccumulation):
    """The training step of Keras's JAX trainer with `accumulate_steps` micro-batches (a
    `lax.scan`, so one micro-batch's activations are live at a time)."""

    def train_step(self, state, data):
        if self.accumulate_steps == 1:
            return super().train_step(state, data)
        import jax

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        (x, y, sample_weight), rows, filled = self.micro_batches(data)
        loss_and_gradients = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)

        def accumulate(carry, micro_batch):
            gradients, non_trainable, metrics_variables, total_loss = carry
            x_i, y_i, weight_i = micro_batch
            (_, (loss, y_pred, non_trainable, metrics_variables)), new = loss_and_gradients(
                trainable,
                non_trainable,
                metrics_variables,
                x_i,
                y_i,
                weight_i,
                training=True,
                optimizer_variables=optimizer_variables,
            )
            _, metrics_variables = self.stateless_metrics(
                metrics_variables, lambda: self.compute_metrics(x_i, y_i, y_pred, weight_i)
            )
            gradients = [old + g for old, g in zip(gradients, new)]
            return (gradients, non_trainable, metrics_variables, total_loss + loss), None

        zeros = [ops.zeros_like(v) for v in trainable]
        (gradients, non_trainable, metrics_variables, loss), _ = jax.lax.scan(
            accumulate,
            (zeros, non_trainable, metrics_variables, ops.zeros(())),
            (x, y, sample_weight),
        )
        if sample_weight is None:  # the mean of the micro-batches' means
            gradients, loss = [g / filled for g in gradients], loss / filled
        trainable, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, gradients, trainable
        )

        def log_loss():
            self.loss_tracker().update_state(loss, sample_weight=rows)
            return self.get_metrics_result()

        logs, metrics_variables = self.stateless_metrics(metrics_variables, log_loss)
        return logs, (trainable, non_trainable, optimizer_variables, metrics_variables)

    def stateless_metrics(self, metrics_variables, update):
        """Runs `update` on the metrics held in `metrics_variables`; returns its result and the
        metrics' new values."""
        mapping = list(zip(self.metrics_variables, metrics_variables))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            result = update()
        values = [scope.get_current_value(v) for v in self.metrics_variables]
        return result, [old if new is None else new for old, new in zip(metrics_variables, values)]


ACCUMULATION = {
    "tensorflow": TensorFlowGradientAccumulation,
    "jax": JaxGradientAccumulation,
}.get(keras.backend.backend(), GradientAccumulation)

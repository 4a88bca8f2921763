"""The optimizer of §5.3: Adam with the warm-up learning-rate schedule of Eq. 3."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Eq. 3: lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    The rate rises linearly for `warmup_steps` steps, then decays with the inverse square root
    of the step. `scale` multiplies the whole curve (1 is the paper's; tensor2tensor calls it
    the learning-rate constant). Keras calls the schedule with `optimizer.iterations`, the number
    of updates already applied, so the update it drives is the paper's step_num = iterations + 1.
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        if d_model < 1 or warmup_steps < 1:
            raise ValueError(
                f"d_model and warmup_steps must be >= 1, got {d_model}, {warmup_steps}"
            )
        if not scale > 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, iterations):
        step = ops.cast(iterations, "float32") + 1.0
        return (
            float(self.scale)
            * float(self.d_model) ** -0.5
            * ops.minimum(ops.rsqrt(step), step * float(self.warmup_steps) ** -1.5)
        )

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


def create_optimizer(config):
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) with the schedule of Eq. 3 (§5.3), times
    `config.learning_rate_scale`."""
    return keras.optimizers.Adam(
        learning_rate=TransformerSchedule(
            config.d_model, config.warmup_steps, config.learning_rate_scale
        ),
        beta_1=0.9,
        beta_2=0.98,
        epsilon=1e-9,
    )

"""One training run from its plan to its export, around `model.fit`:

    train(TrainingPlan.from_flags(args))

The plan is resolved once into the run's context (`training.context`: everything that can fail
is checked before anything is written), the model is fitted from the backup's step to the plan's
(`training.fit`), and the run is finished (`training.finish`: the last checkpoints averaged,
§6.1, or the best one; scored on the test split and exported). The chief holds the run
directory's lock for the whole run.
"""

from . import context as run_context
from . import finish, fit


def train(plan):
    """Runs `plan` (a TrainingPlan); returns what the run's end recorded ({"step", "model",
    "exported", "validation", "bleu", "chrf", "export"}; {} on workers other than the chief).
    A finished run says so and returns its record."""
    with run_context.opened(plan) as context:
        if context.state.complete(context.steps):
            return finish.report_finished(context)
        trains = context.state.step < context.steps and not context.state.stopped_early
        model = fit.fit(context) if trains else None
        return finish.finish(context, model) if context.chief else {}

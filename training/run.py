"""One training run from its plan to its export, around `model.fit`:

    train(TrainingPlan.from_flags(args))

The plan is resolved once into the run's context (`training.context`: everything that can fail
is checked before anything is written), the model is fitted from the backup's step to the plan's
(`training.fit`), and the run is finished (`training.finish`: the last checkpoints averaged,
§6.1, or the best one; scored on the test split and exported). The chief holds the run
directory's lock for the whole run; under several workers the others wait for its end, and a
collective that fails because a worker is gone ends the run with `runtime.WorkerLost`, which
names it.
"""

from keras_transformer_cli.checkpoints import process_local
from keras_transformer_cli.run_dir import RunDirectory

from . import context as run_context
from . import finish, fit, runtime


def train(plan):
    """Runs `plan` (a TrainingPlan); returns what the run's end recorded ({"step", "model",
    "exported", "validation", "bleu", "chrf", "export"}; {} on workers other than the chief).
    A finished run says so and returns its record."""
    with runtime.naming_lost_workers(RunDirectory(plan.run_dir).backup):
        with run_context.opened(plan) as context:
            if context.state.complete(context.steps):
                return finish.report_finished(context)
            trains = context.state.step < context.steps and not context.state.stopped_early
            model = fit.fit(context) if trains else None
            record = {}
            if context.chief:
                with process_local():  # the chief alone, while the other workers wait
                    record = finish.finish(context, model)
            runtime.workers_agree(context.strategy, True)  # they end together
            return record

"""Train a Transformer with model.fit, from one CPU to a TPU or several machines. Writes
checkpoints, TensorBoard logs, the averaged model, its test BLEU and a SavedModel into
--run-dir.

    python -m training.train --preset small --run-dir runs/demo
    python -m training.train --help

The same command run again continues a stopped or killed run from its backup, a larger --steps
trains it on, and a finished run says so and changes nothing. At the end the last K step
checkpoints are averaged (§6.1), the average is scored on the test split with sacrebleu and
exported as a SavedModel for TensorFlow Serving. The work is `training.run.train`'s; this
module holds the command line, generated from the plan's fields (`training.plan`, where each
flag is defined). See `keras_transformer_cli/run_dir.py` for what the run directory holds.
"""

import signal
import sys

from keras_transformer_cli import console, flags

from .plan import TrainingPlan


def build_parser():
    """The parser of the plan's flags, one argument group per section (`training.plan`)."""
    parser = flags.parser(__doc__, "training.train")
    flags.add_dataclass(parser, TrainingPlan)
    return parser


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)
    # imported once the console is set up (`flags.parse`): they import Keras and TensorFlow
    from keras_transformer_cli.checkpoints import TrainingDiverged

    from .fit import Interrupted
    from .run import train
    from .runtime import WorkerLost, end_at_exit

    try:
        train(TrainingPlan.from_flags(args))
    except (ValueError, TrainingDiverged, FileExistsError) as error:
        console.fail(error)  # CorpusError and RunError are ValueErrors too
    except WorkerLost as error:
        end_at_exit(1)  # without waiting for the lost worker at JAX's shutdown
        console.fail(error)
    except Interrupted as interruption:
        print(interruption, file=sys.stderr)
        sys.exit(128 + signal.SIGTERM)


if __name__ == "__main__":
    main()

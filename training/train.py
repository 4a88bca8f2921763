"""Train a Transformer with model.fit, from one CPU to a TPU or several machines. Writes
checkpoints, TensorBoard logs, the averaged model, its test BLEU and a SavedModel into
--run-dir.

    python -m training.train --preset small --run-dir runs/demo
    python -m training.train --help

The same command run again continues a stopped or killed run from its backup, a larger --steps
trains it on, and a finished run says so and changes nothing. At the end the last K step
checkpoints are averaged (§6.1), the average is scored on the test split with sacrebleu and
exported as a SavedModel for TensorFlow Serving. The work is `training.trainer.Trainer`'s; this
module holds the command line. See `programs/run_dir.py` for what the run directory holds.
"""

import pathlib
import signal
import sys

from programs import console, flags
from training.plan import DEFAULT_VOCAB_SIZE

# Numeric flags: (flag, type, default, help).
DATA_NUMBERS = (
    (
        "--tokens-per-batch",
        flags.COUNT,
        None,
        "global budget of source tokens and of target tokens per "
        "batch, i.e. per update, split across replicas and --accumulate-steps micro-batches (§5.1; "
        "default: the preset's, 25000 for base and big)",
    ),
)
SCHEDULE_NUMBERS = (
    (
        "--steps-per-epoch",
        flags.COUNT,
        1000,
        "steps per Keras epoch: the interval of the backup, BLEU and epoch summaries",
    ),
    (
        "--accumulate-steps",
        flags.COUNT,
        1,
        "run each batch as this many micro-batches whose summed "
        "gradients make one update (gradient accumulation): the paper's batch in a fraction of the "
        "memory; the same updates as without it",
    ),
    (
        "--steps-per-execution",
        flags.COUNT,
        None,
        "training steps run per call into the compiled step (Keras compile(steps_per_execution)):"
        " the host syncs with the device and runs the callbacks only every N steps, so backups, "
        "checkpoints, the NaN check, a SIGTERM and --max-minutes act at multiples of N "
        "(default: 1 on TensorFlow; under JAX the largest of 16, 8, 4, 2, 1 that divides "
        "--steps-per-epoch, --checkpoint-every, --steps and the backup's step)",
    ),
    (
        "--checkpoint-every",
        flags.COUNT,
        None,
        "steps between checkpoints (default: the paper's 10 "
        "minutes at its speed, §6.1: 1500 for base, 600 for big; --steps-per-epoch for other "
        "presets; none when only --checkpoint-minutes is given)",
    ),
    (
        "--checkpoint-minutes",
        flags.positive,
        None,
        "also write a checkpoint whenever this many minutes of "
        "training passed since the last one (the paper: 10, §6.1)",
    ),
    (
        "--keep-checkpoints",
        flags.COUNT,
        None,
        "checkpoints kept and averaged at the end (default: the "
        "paper's, 5 for base, 20 for big, §6.1; 5 for other presets)",
    ),
    (
        "--max-minutes",
        flags.positive,
        None,
        "stop training after this long; the same command continues the run",
    ),
)
EVALUATION_NUMBERS = (
    (
        "--bleu-sentences",
        flags.AMOUNT,
        500,
        "validation sentences translated (greedy) for BLEU after each epoch; 0: none",
    ),
    ("--samples", flags.AMOUNT, 3, "sample translations and attention maps shown"),
)
CPU_DEVICES = (
    "--cpu-devices",
    flags.COUNT,
    1,
    "split the CPU into this many devices to mirror across (tries tf.distribute on one machine)",
)


def build_parser():
    parser = flags.parser(__doc__, "training.train")
    model = parser.add_argument_group("model")
    flags.add_preset(model, default=None)
    model.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help=(
            "override a TransformerConfig field, e.g. --set num_layers=4 --set dropout=0.3 "
            "(repeatable)"
        ),
    )
    data = parser.add_argument_group("data")
    flags.add_dataset(data)
    flags.add_phrases(data)
    data.add_argument(
        "--validation-split", default="validation", help="split for BLEU during training"
    )
    data.add_argument("--test-split", default="test", help="split scored at the end")
    flags.add_tokenizer(data)
    flags.add_corpus_shaping(data, DEFAULT_VOCAB_SIZE)
    flags.add_table(data, *DATA_NUMBERS)
    schedule = parser.add_argument_group("schedule")
    length = schedule.add_mutually_exclusive_group()
    length.add_argument(
        "--steps",
        type=flags.COUNT,
        default=None,
        help="training steps, i.e. updates (default: the paper's, 100000 for base, 300000 for "
        "big, §5.2; 100000 for other presets)",
    )
    length.add_argument(
        "--epochs",
        type=flags.COUNT,
        default=None,
        help="passes over the training data, instead of --steps",
    )
    flags.add_table(schedule, *SCHEDULE_NUMBERS)
    flags.add_seed(schedule)
    schedule.add_argument(
        "--deterministic",
        action="store_true",
        help="make TensorFlow's ops deterministic (tf.config.experimental."
        "enable_op_determinism): the same command gives bitwise the same run, somewhat slower",
    )
    evaluation = parser.add_argument_group("evaluation and export")
    flags.add_table(evaluation, *EVALUATION_NUMBERS)
    flags.add_search(evaluation)
    flags.add_export_dir(evaluation, required=False)
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument(
        "--strategy",
        default="auto",
        help="auto, default, mirrored, multi_worker (TF_CONFIG) or tpu",
    )
    hardware.add_argument("--tpu", default=None, help="TPU name or address for --strategy tpu")
    flags.add_table(hardware, CPU_DEVICES)
    flags.add_mixed_precision(hardware)
    flags.add_jit_compile(hardware)
    add_selection(parser.add_argument_group("fine-tuning and the best checkpoint"))
    flags.add_run_dir(parser)
    return parser


def add_selection(group):
    """--init-from, --keep-best, --early-stopping, --final-model."""
    group.add_argument(
        "--init-from",
        type=pathlib.Path,
        default=None,
        metavar="MODEL.keras",
        help="start this new run from a trained model's weights (fine-tuning): its config "
        "(--set may change only the training fields dropout, attention_dropout, "
        "label_smoothing, warmup_steps, learning_rate_scale, tokens_per_batch; a --preset must "
        "have its architecture), its tokenizer unless --tokenizer or --vocab-size gives a new "
        "vocabulary (the rows of the pieces both hold are kept), and a fresh Adam and schedule "
        "that warms up over the model's warmup_steps again (--set warmup_steps=N): a fresh "
        "Adam has no moments yet, so its first updates move every weight by the full learning "
        "rate, which the warm-up keeps small",
    )
    group.add_argument(
        "--keep-best",
        choices=("bleu", "chrf", "loss"),
        default=None,
        help="at every validation keep the checkpoint with the best validation BLEU, chrF "
        "(greedy translations of --bleu-sentences pairs) or loss (the references' "
        "cross-entropy, on the same pairs) in RUN_DIR/best/, apart from the rolling ones",
    )
    group.add_argument(
        "--early-stopping",
        type=flags.COUNT,
        default=None,
        metavar="N",
        help="end the run after N validations without a better --keep-best figure; it then "
        "ends as at --steps (the same command again says it is finished)",
    )
    group.add_argument(
        "--final-model",
        choices=("average", "best"),
        default="average",
        help="what the run ends with (model.keras, scored on test and exported): the average "
        "of the last --keep-checkpoints checkpoints (§6.1: an average usually scores a little "
        "above each of them) or the --keep-best checkpoint (which stays in RUN_DIR/best/ "
        "either way)",
    )


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)
    from training.checkpointing import TrainingDiverged
    from training.plan import TrainingPlan
    from training.trainer import Interrupted, Trainer

    try:
        Trainer(TrainingPlan.from_flags(args)).run()
    except (ValueError, TrainingDiverged, FileExistsError) as error:
        console.fail(error)  # CorpusError and RunError are ValueErrors too
    except Interrupted as interruption:
        print(interruption, file=sys.stderr)
        sys.exit(128 + signal.SIGTERM)


if __name__ == "__main__":
    main()

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

from programs import console, flags
from training.plan import DEFAULT_VOCAB_SIZE


def build_parser():
    parser = flags.parser(__doc__, "training.train")
    model = parser.add_argument_group("model")
    flags.add_preset(model)
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
    data.add_argument(
        "--no-download",
        dest="download",
        action="store_false",
        help="never download a tfds dataset (it must be prepared in --data-dir)",
    )
    flags.add_phrases(data)
    data.add_argument(
        "--sentence-repeats",
        type=int,
        default=1,
        help="with --phrases: each sentence pair appears this many times per pass over the phrases",
    )
    data.add_argument(
        "--validation-split", default="validation", help="split for BLEU during training"
    )
    data.add_argument("--test-split", default="test", help="split scored at the end")
    data.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help=f"subword vocabulary trained on the training split (default {DEFAULT_VOCAB_SIZE})",
    )
    flags.add_tokenizer(data)
    data.add_argument(
        "--tokens-per-batch",
        type=int,
        default=None,
        help="global budget of source tokens and of target tokens per batch, i.e. per update, "
        "split across replicas and --accumulate-steps micro-batches (§5.1; default: the "
        "preset's, 25000 for base and big)",
    )
    data.add_argument(
        "--max-length",
        type=int,
        default=128,
        help="pairs longer than this many subword tokens are skipped (and counted)",
    )
    schedule = parser.add_argument_group("schedule")
    length = schedule.add_mutually_exclusive_group()
    length.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps, i.e. updates (default: the paper's, 100000 for base, 300000 for "
        "big, §5.2; 100000 for other presets)",
    )
    length.add_argument(
        "--epochs", type=int, default=None, help="passes over the training data, instead of --steps"
    )
    schedule.add_argument(
        "--steps-per-epoch",
        type=int,
        default=1000,
        help="steps per Keras epoch: the interval of the backup, BLEU and epoch summaries",
    )
    schedule.add_argument(
        "--accumulate-steps",
        type=int,
        default=1,
        help="run each batch as this many micro-batches whose summed gradients make one update "
        "(gradient accumulation): the paper's batch in a fraction of the memory; the same "
        "updates as without it",
    )
    schedule.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="steps between checkpoints (default: the paper's 10 minutes at its speed, §6.1: 1500 "
        "for base, 600 for big; --steps-per-epoch for other presets; none when only "
        "--checkpoint-minutes is given)",
    )
    schedule.add_argument(
        "--checkpoint-minutes",
        type=float,
        default=None,
        help="also write a checkpoint whenever this many minutes of training passed since the "
        "last one (the paper: 10, §6.1)",
    )
    schedule.add_argument(
        "--keep-checkpoints",
        type=int,
        default=None,
        help="checkpoints kept and averaged at the end (default: the paper's, 5 for base, 20 "
        "for big, §6.1; 5 for other presets)",
    )
    schedule.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="stop training after this long; the same command continues the run",
    )
    flags.add_seed(schedule)
    schedule.add_argument(
        "--deterministic",
        action="store_true",
        help="make TensorFlow's ops deterministic (tf.config.experimental."
        "enable_op_determinism): the same command gives bitwise the same run, somewhat slower",
    )
    evaluation = parser.add_argument_group("evaluation and export")
    evaluation.add_argument(
        "--bleu-sentences",
        type=int,
        default=500,
        help="validation sentences translated (greedy) for BLEU after each epoch; 0: none",
    )
    evaluation.add_argument(
        "--samples", type=int, default=3, help="sample translations and attention maps shown"
    )
    flags.add_search(evaluation)
    flags.add_export_dir(evaluation, required=False)
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument(
        "--strategy",
        default="auto",
        help="auto, default, mirrored, multi_worker (TF_CONFIG) or tpu",
    )
    hardware.add_argument("--tpu", default=None, help="TPU name or address for --strategy tpu")
    hardware.add_argument(
        "--cpu-devices",
        type=int,
        default=1,
        help=(
            "split the CPU into this many devices to mirror across (tries tf.distribute on one "
            "machine)"
        ),
    )
    hardware.add_argument(
        "--mixed-precision",
        default="auto",
        help="auto (bf16 on TPUs and Ampere+ GPUs), off, bf16 or fp16 (with loss scaling)",
    )
    flags.add_jit_compile(hardware)
    flags.add_run_dir(parser)
    return parser


def main(argv=None):
    args = flags.parse(build_parser(), argv)
    from training.callbacks import TrainingDiverged
    from training.plan import TrainingPlan
    from training.trainer import Trainer

    try:
        Trainer(TrainingPlan.from_flags(args)).run()
    except (ValueError, TrainingDiverged, FileExistsError) as error:
        console.fail(error)  # CorpusError and RunError are ValueErrors too


if __name__ == "__main__":
    main()

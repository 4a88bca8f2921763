"""Train a Transformer with model.fit, from one CPU to a TPU or several machines.

    python -m training.train --preset small --output-dir runs/demo
    python -m training.train --help

The same command run again continues a killed run from its backup. At the end the last K
step checkpoints are averaged (§6.1), the average is scored on the test split with sacrebleu
and exported as a SavedModel for TensorFlow Serving. See `training/run_dir.py` for what the output
directory holds.
"""

import argparse
import dataclasses
import json
import math
import pathlib
import sys

from training.console import add_verbose_flag
from training.datasets import SPEC_HELP

DEFAULT_VOCAB_SIZE = 8000
# The paper's schedule: base models trained 100k steps at 0.4 s a step, big ones 300k at 1.0 s
# (§5.2), and averaged their last 5 and 20 checkpoints, written 10 minutes apart (§6.1): every
# 1500 and 600 steps. Other presets train 100k steps and average 5 checkpoints, one per epoch.
PAPER_TRAINING = {
    "base": {"steps": 100000, "keep_checkpoints": 5, "checkpoint_every": 1500},
    "big": {"steps": 300000, "keep_checkpoints": 20, "checkpoint_every": 600},
}
OTHER_TRAINING = {"steps": 100000, "keep_checkpoints": 5, "checkpoint_every": None}


class HelpFormatter(argparse.HelpFormatter):
    """Appends an option's default to its help, unless the help already states it."""

    def _get_help_string(self, action):
        if action.default in (None, False, True, [], argparse.SUPPRESS) or "default" in action.help:
            return action.help
        return action.help + " (default: %(default)s)"


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m training.train",
        description=__doc__.split("\n\n")[0]
        + " Writes checkpoints, TensorBoard logs, the averaged "
        "model, its test BLEU and a SavedModel into --output-dir.",
        formatter_class=HelpFormatter,
    )
    model = parser.add_argument_group("model")
    model.add_argument(
        "--preset",
        default="small",
        help="tiny, small, base or big (Table 3; small: a CPU model, narrowed by make demo)",
    )
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
    data.add_argument("--dataset", default="ding", help=SPEC_HELP)
    data.add_argument(
        "--source-language", default=None, help="source side (Ding: de or en; folder:DIR needs it)"
    )
    data.add_argument("--target-language", default=None, help="target side (folder:DIR needs it)")
    data.add_argument(
        "--data-dir", default=None, help="tfds data directory, or the Ding cache directory"
    )
    data.add_argument(
        "--no-download",
        dest="download",
        action="store_false",
        help="never download a tfds dataset (it must be prepared in --data-dir)",
    )
    data.add_argument(
        "--phrases",
        action="store_true",
        help=(
            "Ding only: train on the dictionary's word and phrase pairs too, mixed with the "
            "sentence pairs"
        ),
    )
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
    data.add_argument(
        "--tokenizer",
        type=pathlib.Path,
        default=None,
        help="use this sentencepiece model instead of training one",
    )
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
    schedule.add_argument(
        "--seed", type=int, default=0, help="seed of weights, dropout and data order"
    )
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
    evaluation.add_argument(
        "--beam-size", type=int, default=4, help="beam of the test evaluation and the export (§6.1)"
    )
    evaluation.add_argument("--alpha", type=float, default=0.6, help="length penalty (§6.1)")
    evaluation.add_argument(
        "--export-dir",
        type=pathlib.Path,
        default=None,
        help="SavedModel base directory (default: OUTPUT_DIR/export)",
    )
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
    hardware.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile the training step with XLA (always, under KERAS_BACKEND=jax)",
    )
    parser.add_argument(
        "--output-dir", type=pathlib.Path, required=True, help="the run directory, e.g. runs/demo"
    )
    add_verbose_flag(parser)
    return parser


def parse_overrides(items):
    """{"field": value} from FIELD=VALUE strings; values are read as JSON when they parse."""
    overrides = {}
    for item in items:
        field, sep, text = item.partition("=")
        if not sep or not field:
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE")
        try:
            overrides[field] = json.loads(text)
        except json.JSONDecodeError:
            overrides[field] = text
    return overrides


def vocab_size_of(args, out_dir):
    """The vocabulary size of the run's tokenizer file, of --tokenizer, or the one asked for; read
    with sentencepiece alone, since TensorFlow must not start before --cpu-devices splits the
    CPU."""
    from keras_transformer.tokenizer import checked_processor
    from training.run_dir import TOKENIZER_FILE

    if args.tokenizer and not args.tokenizer.is_file():
        raise ValueError(f"--tokenizer {args.tokenizer}: no such file")
    own = out_dir / TOKENIZER_FILE
    path = own if own.is_file() else args.tokenizer
    if not path:
        return args.vocab_size or DEFAULT_VOCAB_SIZE
    try:
        return checked_processor(path.read_bytes()).get_piece_size()
    except RuntimeError as error:
        raise ValueError(f"{path}: not a sentencepiece model ({error})") from None
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def prepare_tokenizer(args, dataset, out_dir, vocab_size, chief, strategy):
    """The run's tokenizer: its own file, else --tokenizer or one trained now on the training
    split, written there by the chief; other workers wait for it at a barrier."""
    import keras_transformer as kt
    from training import runtime
    from training.files import write_atomically
    from training.run_dir import TOKENIZER_FILE, RunError

    own = out_dir / TOKENIZER_FILE
    failure = None
    if not own.is_file():
        if not chief:
            print(f"waiting for the chief to write {own}", file=sys.stderr)
        else:
            try:
                if args.tokenizer:
                    write_atomically(own, kt.SubwordTokenizer.load(args.tokenizer).save)
                else:
                    print(
                        f"training a {vocab_size}-piece vocabulary on the training split of "
                        f"{dataset.spec}",
                        file=sys.stderr,
                    )
                    texts = [side for pair in dataset.pairs("train") for side in pair]
                    write_atomically(
                        own, lambda partial: kt.SubwordTokenizer.train(texts, vocab_size, partial)
                    )
            except Exception as error:  # raised after the barrier, so that no worker waits in vain
                failure = error
    if not runtime.workers_agree(strategy, failure is None):
        raise failure or RunError(f"the chief could not write {own}; its output says why")
    if not own.is_file():
        raise RunError(
            f"no {own} after the chief wrote it: is --output-dir on a file system that every "
            "worker shares?"
        )
    return kt.SubwordTokenizer.load(own)


def setup(args):
    """Everything that can fail on bad input, checked before anything is written: the preset
    and its overrides, the strategy, the dataset, and whether the output directory's run is
    this one. Returns the run's pieces."""
    import keras

    import keras_transformer as kt
    from keras_transformer.compat import in_multi_worker_mode
    from training import runtime
    from training.datasets import Dataset
    from training.run_dir import check_settings, save_settings

    overrides = parse_overrides(args.overrides)
    check_schedule(args)
    if args.tokens_per_batch:
        overrides["tokens_per_batch"] = args.tokens_per_batch
    out_dir = args.output_dir
    config = kt.TransformerConfig.preset(
        args.preset, vocab_size=vocab_size_of(args, out_dir), **overrides
    )
    if args.max_length > config.max_length:
        raise ValueError(
            f"--max-length {args.max_length} exceeds the model's max_length={config.max_length}"
        )
    strategy = runtime.create_strategy(args.strategy, args.tpu, args.cpu_devices)
    rows = strategy.num_replicas_in_sync * args.accumulate_steps
    if config.tokens_per_batch < args.max_length * rows:
        raise ValueError(
            f"--tokens-per-batch {config.tokens_per_batch} cannot hold one pair of --max-length "
            f"{args.max_length} tokens for each of {strategy.num_replicas_in_sync} replica(s) x "
            f"--accumulate-steps {args.accumulate_steps}: give at least "
            f"{args.max_length * rows}"
        )
    policy = runtime.set_mixed_precision(args.mixed_precision, strategy)
    chief = runtime.is_chief()
    if args.max_minutes and in_multi_worker_mode(strategy):
        raise ValueError(
            "--max-minutes cannot be used with several workers: they must stop at the same step"
        )
    if args.sentence_repeats < 1:
        raise ValueError("--sentence-repeats must be at least 1")
    if args.sentence_repeats != 1 and not args.phrases:
        raise ValueError(
            "--sentence-repeats up-samples the sentences among the phrases: it needs --phrases"
        )
    dataset = Dataset(
        args.dataset,
        args.source_language,
        args.target_language,
        args.data_dir,
        args.download,
        args.phrases,
        args.sentence_repeats,
    )
    settings = {
        "config": config.to_dict(),
        "vocabulary": {"tokenizer": str(args.tokenizer)}
        if args.tokenizer
        else {"vocab_size": args.vocab_size or DEFAULT_VOCAB_SIZE},
        "dataset": args.dataset,
        "languages": list(dataset.languages),
        "max_length": args.max_length,
    }
    if args.phrases:
        settings["phrases"] = {"sentence_repeats": args.sentence_repeats}
    check_settings(out_dir, settings)
    keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    tokenizer = prepare_tokenizer(args, dataset, out_dir, config.vocab_size, chief, strategy)
    if (
        tokenizer.vocab_size != config.vocab_size
    ):  # a new run whose corpus gave fewer pieces than asked for
        print(
            f"the vocabulary has {tokenizer.vocab_size} pieces "
            f"({config.vocab_size} were asked for)",
            file=sys.stderr,
        )
        config = dataclasses.replace(config, vocab_size=tokenizer.vocab_size)
        settings["config"] = config.to_dict()
    if chief:
        save_settings(out_dir, settings)
    return config, strategy, policy, dataset, tokenizer, chief


def check_schedule(args):
    """Fills in the paper's --steps, --keep-checkpoints and --checkpoint-every for the preset
    (PAPER_TRAINING); refuses values that cannot work, naming the flag."""
    import keras

    from keras_transformer.accumulation import BACKENDS as ACCUMULATING_BACKENDS

    paper = PAPER_TRAINING.get(args.preset, OTHER_TRAINING)
    if args.steps is None and args.epochs is None:
        args.steps = paper["steps"]
    if args.keep_checkpoints is None:
        args.keep_checkpoints = paper["keep_checkpoints"]
    if args.checkpoint_every is None and args.checkpoint_minutes is None:
        args.checkpoint_every = paper["checkpoint_every"]
    for flag in ("steps", "epochs", "checkpoint_every", "steps_per_epoch"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1")
    if args.keep_checkpoints < 1:
        raise ValueError(
            "--keep-checkpoints must be at least 1 (the last checkpoints are averaged)"
        )
    if args.accumulate_steps < 1:
        raise ValueError("--accumulate-steps must be at least 1 (1: no accumulation)")
    if args.checkpoint_minutes is not None and not args.checkpoint_minutes > 0:
        raise ValueError("--checkpoint-minutes must be positive")
    backend = keras.backend.backend()
    if args.accumulate_steps > 1 and backend not in ACCUMULATING_BACKENDS:
        raise ValueError(
            f"--accumulate-steps: gradient accumulation runs on TensorFlow and JAX, not on "
            f"{backend}; use --accumulate-steps 1 with a smaller --tokens-per-batch"
        )
    if args.deterministic and backend != "tensorflow":
        raise ValueError(
            f"--deterministic sets TensorFlow's op determinism; under {backend} leave it out "
            "(XLA on CPUs is deterministic; on GPUs set "
            "XLA_FLAGS=--xla_gpu_deterministic_ops=true)"
        )


def make_training_batches(args, config, dataset, tokenizer, strategy, seed):
    """Repeated, shuffled, bucketed batches of the global token budget, in multiples of the
    replica count times --accumulate-steps (each replica gets an equal share, cut into equal
    micro-batches), weighted for exact token normalisation; sharded by data across workers."""
    import tensorflow as tf

    from keras_transformer.data import make_batches, weigh_tokens

    batches = make_batches(
        dataset.read("train", shuffle_files=True, seed=seed),
        tokenizer,
        config.tokens_per_batch,
        args.max_length,
        seed=seed,
        repeat=True,
        batch_size_multiple=strategy.num_replicas_in_sync * args.accumulate_steps,
        static_shapes=not on_tensorflow(),  # JAX compiles one XLA program per batch shape
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return weigh_tokens(batches).with_options(options)


def plan_epochs(args, config, dataset, tokenizer):
    """(Keras epochs, steps per epoch). With --epochs an epoch is one pass over the data."""
    from keras_transformer.data import pipeline_report

    if dataset.kind != "tfds" or args.epochs:
        report = pipeline_report(
            dataset.read("train"), tokenizer, config.tokens_per_batch, args.max_length
        )
        print(f"training data ({dataset.spec}, train split): {report}", file=sys.stderr)
        if args.epochs:
            return args.epochs, report.batches
    steps = args.steps
    steps_per_epoch = min(args.steps_per_epoch, steps)
    epochs = math.ceil(steps / steps_per_epoch)
    if epochs * steps_per_epoch != steps:
        print(
            f"training {epochs * steps_per_epoch} steps: {epochs} epochs of {steps_per_epoch}",
            file=sys.stderr,
        )
    return epochs, steps_per_epoch


def on_tensorflow():
    """Whether Keras runs on TensorFlow, which decoding (validation BLEU, the test
    translations) and the export need; other backends train and write model.keras."""
    import keras

    return keras.backend.backend() == "tensorflow"


def build_callbacks(args, out_dir, tokenizer, dataset, chief, steps_per_epoch):
    import keras

    from training import callbacks

    checkpoint_dir, backup_dir = out_dir / "checkpoints", out_dir / "backup"
    listed = [
        callbacks.StopOnNaN(
            checkpoint_dir, backup_dir
        ),  # first: nothing after it saves a NaN state
        callbacks.Backup(backup_dir, chief),
        callbacks.StepCheckpoints(
            checkpoint_dir,
            args.checkpoint_every or (None if args.checkpoint_minutes else steps_per_epoch),
            args.keep_checkpoints,
            chief,
            minutes=args.checkpoint_minutes,
        ),
    ]
    if chief:
        if args.bleu_sentences and not on_tensorflow():
            print(
                f"--bleu-sentences: translating needs the TensorFlow backend; under "
                f"{keras.backend.backend()} training is followed by the validation loss only",
                file=sys.stderr,
            )
        elif args.bleu_sentences:
            pairs = dataset.pairs(args.validation_split)[: args.bleu_sentences]
            listed.append(
                callbacks.TranslationMonitor(
                    tokenizer, pairs, out_dir / "logs" / "validation", samples=args.samples
                )
            )
        listed.append(
            callbacks.StepSummaries(out_dir / "logs", every=max(1, min(100, steps_per_epoch // 10)))
        )
        listed.append(keras.callbacks.TensorBoard(str(out_dir / "logs")))  # the epoch summaries
    if args.max_minutes:
        listed.append(callbacks.TimeLimit(args.max_minutes))
    return listed


def finish(args, out_dir, config, tokenizer, dataset):
    """Averages the last checkpoints into model.keras, scores it on the test split, exports it."""
    import keras_transformer as kt
    from serving.packaging import export_for_serving
    from training import checkpoints, scoring
    from training.files import write_atomically

    paths = checkpoints.list_checkpoints(out_dir / "checkpoints")[-args.keep_checkpoints :]
    model = kt.build_transformer(config)
    checkpoints.assign(
        model,
        checkpoints.average_checkpoints(paths),
        source=f"the average of {len(paths)} checkpoints",
    )
    steps = ", ".join(str(checkpoints.step_of(p)) for p in paths)
    model_path = write_atomically(out_dir / "model.keras", model.save)
    print(f"averaged the checkpoints of steps {steps} into {model_path}")
    if not on_tensorflow():  # decoding and export run on TensorFlow, from the .keras file
        print(
            "translating and exporting need the TensorFlow backend: next,\n"
            f"  python -m training.evaluate --model {model_path} --split {args.test_split}\n"
            f"  python -m serving.export --model {model_path} --export-dir "
            f"{args.export_dir or out_dir / 'export'}"
        )
        return {"model": str(model_path)}
    translator = kt.Translator(model, tokenizer, args.beam_size, args.alpha)
    pairs = dataset.pairs(args.test_split)
    print(
        f"translating the {len(pairs)} sentences of the {args.test_split} split (beam "
        f"{args.beam_size}, alpha {args.alpha})"
    )
    hypotheses = scoring.translate_all(
        translator.translate, [s for s, _ in pairs], verbose=scoring.progress_verbosity()
    )
    output = out_dir / f"translations.{args.test_split}.txt"
    scores = scoring.score_report(hypotheses, [t for _, t in pairs], output)
    print(f"{args.test_split} scores:")
    scoring.print_scores(scores)
    print(f"translations written to {output}, scores to {output}.scores.json")
    version_dir = export_for_serving(translator, args.export_dir or out_dir / "export")
    print(f"SavedModel exported to {version_dir}")
    return {
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "model": str(model_path),
        "export": str(version_dir),
    }


def train_model(args, config, strategy, policy, dataset, tokenizer, chief):
    """Trains with model.fit until --steps/--epochs or --max-minutes; the run's checkpoints,
    backup and logs go into --output-dir. Returns the step reached."""
    import keras

    import keras_transformer as kt
    from training.callbacks import Backup, current_step
    from training.scoring import progress_verbosity

    out_dir = args.output_dir
    jit_compile = args.jit_compile or keras.backend.backend() == "jax"  # else eager under JAX
    print(
        f"Keras backend {keras.backend.backend()}, {type(strategy).__name__} with "
        f"{strategy.num_replicas_in_sync} replica(s), "
        + (
            f"{args.accumulate_steps} micro-batches per update, "
            if args.accumulate_steps > 1
            else ""
        )
        + f"dtype policy {policy}, XLA {'on' if jit_compile else 'off'}"
        + (", deterministic ops" if args.deterministic else "")
        + f"; run directory {out_dir}",
        file=sys.stderr,
    )
    epochs, steps_per_epoch = plan_epochs(args, config, dataset, tokenizer)
    # A resumed run shuffles with another seed, so as not to repeat the batches it already saw.
    seed = args.seed + Backup.saved_epoch(out_dir / "backup")
    batches = make_training_batches(args, config, dataset, tokenizer, strategy, seed)
    with strategy.scope():
        model = kt.build_transformer(config)
        model.compile(
            optimizer=kt.create_optimizer(config),
            loss=kt.LabelSmoothedCrossEntropy(config.label_smoothing, token_weights=True),
            metrics=[kt.MaskedAccuracy(name="accuracy")],
            jit_compile=jit_compile,
            accumulate_steps=args.accumulate_steps,
        )
        initial_epoch = Backup.restore(model, out_dir / "backup")
    if initial_epoch:
        print(
            f"resumed from the backup in {out_dir / 'backup'}: step {current_step(model)}, epoch "
            f"{initial_epoch}"
        )
    model.summary(print_fn=lambda line, **_: print(line, file=sys.stderr))
    callbacks = build_callbacks(args, out_dir, tokenizer, dataset, chief, steps_per_epoch)
    model.fit(
        batches,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=callbacks,
        shuffle=False,
        initial_epoch=initial_epoch,
        verbose=progress_verbosity(),
    )
    step = current_step(model)
    print(f"training stopped at step {step}", file=sys.stderr)
    return step


def run(args, config, strategy, policy, dataset, tokenizer, chief):
    """Trains, then (the chief) averages, scores and exports; returns {"bleu", "chrf", "model",
    "export"}, or {} on other workers."""
    train_model(args, config, strategy, policy, dataset, tokenizer, chief)
    if not chief:
        return {}
    return finish(args, args.output_dir, config, tokenizer, dataset)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    from training.callbacks import TrainingDiverged

    try:
        pieces = setup(
            args
        )  # bad input: unknown preset/strategy/dataset, a run that does not match
    except ValueError as error:  # CorpusError and RunError are ValueErrors too
        parser.exit(1, f"error: {error}\n")
    try:
        run(args, *pieces)
    except (TrainingDiverged, FileExistsError) as error:
        parser.exit(1, f"error: {error}\n")


if __name__ == "__main__":
    main()

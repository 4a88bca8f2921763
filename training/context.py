"""A run's context: its plan resolved once into a frozen `RunContext` that fitting
(`training.fit`) and finishing (`training.finish`) read.

`resolve` checks everything that can fail before anything is written: the model's config, the
strategy, the batch budget and the backend, the data (every split the run reads is opened and
counted) and the run directory's state, which a resume must agree with. Then the chief writes
the tokenizer and run.json, and the workers meet at a barrier (`runtime.workers_agree`), so that
all stop together when the chief fails. `opened(plan)` holds the run directory's lock (the
chief) and a scratch directory around it.
"""

import contextlib
import dataclasses
import pathlib
import shutil
import sys
import tempfile

import keras

import keras_transformer as kt
from keras_transformer.accumulation import BACKENDS as ACCUMULATING_BACKENDS
from keras_transformer.data.binarized import Binarized
from keras_transformer.digests import sha256_of
from keras_transformer_cli.checkpoints import saved_step
from keras_transformer_cli.files import write_atomically
from keras_transformer_cli.flags import DEFAULT_VOCAB_SIZE
from keras_transformer_cli.run_dir import RunDirectory, RunError, RunState

from . import finetune, runtime
from .datasets import Dataset, train_tokenizer
from .plan import TrainingPlan

TFDS_COUNTED = 10000  # pairs of a tfds training split counted before training (all with --epochs)
# Steps per execution under JAX (without --steps-per-execution), largest first: see
# `choose_steps_per_execution` and benchmarks/GPU.md, "The host's share of a small model's step".
AUTO_STEPS_PER_EXECUTION = (16, 8, 4, 2, 1)


def log(message):
    print(message, file=sys.stderr)


def on_tensorflow():
    """Whether Keras runs on TensorFlow, which decoding (validation BLEU, the test
    translations) and the export need; other backends train and write model.keras."""
    return keras.backend.backend() == "tensorflow"


@dataclasses.dataclass(frozen=True)
class RunContext:
    """One run's plan resolved: what fitting and finishing read. A finished run's context
    stops at its state (no tokenizer, no data counted)."""

    plan: TrainingPlan
    directory: RunDirectory
    config: kt.TransformerConfig  # sized to the run's vocabulary, which it names by SHA-256
    strategy: object  # a tf.distribute strategy, or `runtime.Devices` under other backends
    precision: str  # the Keras dtype policy
    chief: bool
    dataset: Dataset
    binarized: Binarized | None  # the run's binarized data, None for other datasets
    state: RunState  # where the run directory stands (`RunState.save` records in run.json)
    steps: int | None  # the step the run trains to
    steps_per_epoch: int
    steps_per_execution: int = 1
    tokenizer: object = None  # SubwordTokenizer; None for binarized data off TensorFlow
    tokenizer_file: pathlib.Path | None = None
    validation_pairs: list = dataclasses.field(default_factory=list)  # read on TensorFlow
    test_pairs: list = dataclasses.field(default_factory=list)  # the chief's, on TensorFlow
    validation_batches: list = dataclasses.field(default_factory=list)  # binarized data's
    initial_weights: dict | None = None  # {path: array} of --init-from, for a new run

    @property
    def batch_multiple(self):
        """Pairs in every full batch are a multiple of this: one share per replica, cut into
        --accumulate-steps micro-batches."""
        return self.strategy.num_replicas_in_sync * self.plan.schedule.accumulate_steps

    def settings(self):
        """What a resume must agree with (run.json's settings)."""
        settings = self.plan.settings(self.config, self.dataset.languages, self.precision)
        if self.binarized:  # the ids' tokenizer, whatever the flags
            settings["vocabulary"] = {"binarized": self.binarized.index["tokenizer"]["sha256"]}
        return settings | {"steps_per_epoch": self.steps_per_epoch}


@contextlib.contextmanager
def opened(plan):
    """The context of `plan`'s run (`resolve`), holding the run directory's lock (the chief)
    and a scratch directory until the block ends."""
    directory = RunDirectory(plan.run_dir)
    lock = directory.lock() if runtime.is_chief() else None
    with lock or contextlib.nullcontext(), tempfile.TemporaryDirectory() as scratch:
        yield resolve(plan, directory, pathlib.Path(scratch))


def resolve(plan, directory, scratch):
    """The RunContext of `plan` in `directory` (a RunDirectory), checked against the machine,
    the data and the run's state; a tokenizer trained for the run goes to `scratch` first."""
    data, hardware, schedule = plan.data, plan.hardware, plan.schedule
    base = fine_tuning_base(plan, directory)
    binarized = open_binarized(data.dataset)
    tokenizer_file = known_tokenizer_file(plan, directory, binarized)
    config = build_config(plan, base, vocabulary_size(data, binarized, tokenizer_file))
    check_max_length(data.max_length, config, binarized)
    digest = tokenizer_digest(binarized, tokenizer_file)
    config = dataclasses.replace(config, tokenizer_sha256=digest)
    strategy = runtime.create_strategy(hardware.strategy, hardware.tpu, hardware.cpu_devices)
    check_batch_budget(plan, config, strategy)
    check_backend(plan)
    check_several_processes(plan, strategy, binarized)
    precision = runtime.set_mixed_precision(hardware.mixed_precision, strategy)
    context = RunContext(
        plan=plan,
        directory=directory,
        config=config,
        strategy=strategy,
        precision=precision,
        chief=runtime.is_chief(),
        dataset=open_dataset(data),
        binarized=binarized,
        state=directory.state(),
        steps=schedule.steps,
        steps_per_epoch=schedule.steps_per_epoch,
        tokenizer_file=tokenizer_file,
    )
    check_binarized_tokenizer(plan, directory, binarized)
    steps = schedule.steps or context.state.step
    context.state.check(early_settings(context), steps, f"--steps {schedule.steps}", plan.flag_of)
    if context.state.complete(schedule.steps):
        return context
    seed_everything(schedule)
    return resolve_data(context, scratch)


def open_binarized(dataset):
    """The binarized data that --dataset binarized:DIR names (checked as it opens), else
    None."""
    kind, _, directory = dataset.partition(":")
    return Binarized(directory) if kind == "binarized" else None


def open_dataset(data):
    """The run's Dataset (`data`: the plan's Data section)."""
    return Dataset(
        data.dataset,
        data.source_language,
        data.target_language,
        data.data_dir,
        data.download,
        data.phrases,
        data.sentence_repeats,
        data.tag_phrases,
        data.sentence_alternatives,
    )


# -- the model's config ---------------------------------------------------------------------


def fine_tuning_base(plan, directory):
    """With --init-from, (the config dict fine-tuning starts from, whether it is the run's
    own): the run's recorded config, else the model's (its file checked); None without."""
    if not plan.selection.init_from:
        return None
    recorded = directory.read_settings().get("config")
    return recorded or finetune.model_config(plan.selection.init_from), bool(recorded)


def model_tokenizer(plan):
    """The --init-from model's tokenizer when the run uses it (no new vocabulary), else
    None."""
    if finetune.with_model_tokenizer(plan):
        return finetune.model_tokenizer(plan.selection.init_from)
    return None


def known_tokenizer_file(plan, directory, binarized):
    """The run's tokenizer file where it exists before training: binarized data's, the run's
    own, --tokenizer or the --init-from model's; None when the run trains one."""
    if binarized:
        return binarized.tokenizer_path
    own = directory.tokenizer
    return own if own.is_file() else plan.data.tokenizer or model_tokenizer(plan)


def vocabulary_size(data, binarized, tokenizer_file):
    """The vocabulary size of binarized data (its index says), of `tokenizer_file`, or the one
    asked for; read by sentencepiece before the strategy is made, which no TensorFlow operation
    may precede (--cpu-devices splits the CPU there)."""
    if binarized:
        return binarized.vocab_size
    if not tokenizer_file:
        return data.vocab_size or DEFAULT_VOCAB_SIZE
    from keras_transformer.tokenizer import checked_processor

    try:
        return checked_processor(tokenizer_file.read_bytes()).get_piece_size()
    except RuntimeError as error:
        raise ValueError(f"{tokenizer_file}: not a sentencepiece model ({error})") from None
    except ValueError as error:
        raise ValueError(f"{tokenizer_file}: {error}") from None


def tokenizer_digest(binarized, tokenizer_file):
    """The SHA-256 of the run's tokenizer (binarized data's index records it), None while the
    run has none yet (it trains one)."""
    if binarized:
        return binarized.index["tokenizer"]["sha256"]
    return sha256_of(tokenizer_file) if tokenizer_file else None


def build_config(plan, base, vocab_size):
    """The preset with its overrides, sized to `vocab_size`; when fine-tuning, `base`
    (`fine_tuning_base`) with them."""
    if base:
        config, recorded = base
        return finetune.fine_tuning_config(plan, config, vocab_size, recorded)
    return kt.TransformerConfig.preset(
        plan.model.preset, vocab_size=vocab_size, **plan.config_overrides
    )


def check_max_length(max_length, config, binarized):
    if max_length > config.max_length:
        raise ValueError(
            f"--max-length {max_length} exceeds the model's max_length={config.max_length}"
        )
    if binarized and max_length > binarized.max_length:
        raise ValueError(
            f"--max-length {max_length}: {binarized.directory} was binarized with "
            f"--max-length {binarized.max_length}, which dropped the longer pairs; give at "
            f"most {binarized.max_length}, or binarize again"
        )


# -- the machine --------------------------------------------------------------------------


def check_batch_budget(plan, config, strategy):
    """Refuses a batch that cannot hold one pair per replica and micro-batch, and a time or
    early-stopping bound under several workers (they must stop at the same step)."""
    replicas = strategy.num_replicas_in_sync
    rows = replicas * plan.schedule.accumulate_steps
    if config.tokens_per_batch < plan.data.max_length * rows:
        raise ValueError(
            f"--tokens-per-batch {config.tokens_per_batch} cannot hold one pair of "
            f"--max-length {plan.data.max_length} tokens for each of {replicas} replica(s) x "
            f"--accumulate-steps {plan.schedule.accumulate_steps}: give at least "
            f"{plan.data.max_length * rows}"
        )
    for flag, given in (
        ("--max-minutes", plan.schedule.max_minutes),
        ("--early-stopping", plan.selection.early_stopping),
    ):
        if given and runtime.in_multi_worker_mode(strategy):
            raise ValueError(
                f"{flag} cannot be used with several workers: they must stop at the same step"
            )


def check_several_processes(plan, strategy, binarized):
    """Refuses other data than binarized under several JAX processes: each reads its own rows
    of every global batch (`runtime.Devices.part`), which binarized data gives."""
    jax_processes = isinstance(strategy, runtime.Devices) and runtime.in_multi_worker_mode(strategy)
    if jax_processes and not binarized:
        dataset = plan.data.dataset
        raise ValueError(
            f"--dataset {dataset}: several JAX processes train from binarized data, each "
            f"reading its own rows of every batch: binarize it once (python -m "
            f"training.binarize --dataset {dataset} --output DIR) and give --dataset "
            "binarized:DIR"
        )


def check_backend(plan):
    """Refuses the flags that Keras's backend cannot honour."""
    backend = keras.backend.backend()
    if plan.schedule.accumulate_steps > 1 and backend not in ACCUMULATING_BACKENDS:
        raise ValueError(
            f"--accumulate-steps: gradient accumulation runs on TensorFlow and JAX, not on "
            f"{backend}; use --accumulate-steps 1 with a smaller --tokens-per-batch"
        )
    if plan.selection.keep_best and backend != "tensorflow":
        raise ValueError(f"--keep-best: validation runs on TensorFlow, not on {backend}")
    if plan.schedule.deterministic and backend != "tensorflow":
        raise ValueError(
            f"--deterministic sets TensorFlow's op determinism; under {backend} leave it out "
            "(XLA on CPUs is deterministic; on GPUs set "
            "XLA_FLAGS=--xla_gpu_deterministic_ops=true)"
        )


def seed_everything(schedule):
    keras.utils.set_random_seed(schedule.seed)
    if schedule.deterministic:
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()


# -- the run directory's state ----------------------------------------------------------------


def check_binarized_tokenizer(plan, directory, binarized):
    """Refuses binarized data whose ids come from another tokenizer than the run's: its own
    tokenizer.model, --tokenizer, the --init-from model's, or --vocab-size's size."""
    if not binarized:
        return
    own, data = directory.tokenizer, plan.data
    for path, what in (
        (own if own.is_file() else None, f"the run's {own}"),
        (data.tokenizer, f"--tokenizer {data.tokenizer}"),
        (model_tokenizer(plan), f"the --init-from model's {model_tokenizer(plan)}"),
    ):
        if path and sha256_of(path) != binarized.index["tokenizer"]["sha256"]:
            raise RunError(
                f"--dataset {data.dataset} was binarized with another tokenizer than "
                f"{what}: binarize it with that tokenizer (python -m training.binarize "
                f"--tokenizer {path} ...), or start a new --run-dir"
            )
    if data.vocab_size and data.vocab_size != binarized.vocab_size:
        raise RunError(
            f"--vocab-size {data.vocab_size}: --dataset {data.dataset} holds ids of a "
            f"vocabulary of {binarized.vocab_size} pieces; leave --vocab-size out, or "
            "binarize again with it"
        )


def early_settings(context):
    """The settings a resume is checked against before the data is counted: without the steps
    per epoch that --epochs counts (and workers read from the chief), and, where the run's
    tokenizer is still to be trained, with the recorded SHA-256 (checked once it is trained)."""
    settings = context.settings()
    if context.plan.schedule.epochs or not context.chief:
        settings.pop("steps_per_epoch")
    if context.config.tokenizer_sha256 is None:
        recorded = context.state.recorded.get("config") or {}
        settings["config"]["tokenizer_sha256"] = recorded.get("tokenizer_sha256")
    return settings


def steps_flag(context):
    """The flag that set the steps to train to."""
    epochs = context.plan.schedule.epochs
    if epochs:
        return f"--epochs {epochs} ({context.steps_per_epoch} steps each)"
    return f"--steps {context.steps}"


# -- the tokenizer, the data and the run's files ------------------------------------------------


def resolve_data(context, scratch):
    """The context with the tokenizer, the counted splits and the run's files (the chief), or
    the chief's tokenizer and steps (other workers). Workers meet at a barrier after the
    chief's part, so that all stop together when it fails."""
    failure, resolved = None, None
    try:
        if context.chief:
            resolved = resolve_as_chief(context, scratch)
    except Exception as error:  # raised after the barrier, so that no worker waits
        failure = error
    own = context.directory.tokenizer
    if not runtime.workers_agree(context.strategy, failure is None):
        raise failure or RunError(f"the chief could not write {own}; its output says why")
    return resolved or follow_chief(context)


def resolve_as_chief(context, scratch):
    """The chief's part of `resolve_data`: it writes the tokenizer and run.json of a new run
    once every check passed."""
    tokenizer, tokenizer_file, config = load_tokenizer(context, scratch)
    context = dataclasses.replace(
        context, tokenizer=tokenizer, tokenizer_file=tokenizer_file, config=config
    )
    context = count_data(context)
    steps_per_execution = choose_steps_per_execution(
        context.plan, context.directory.backup, context.steps, context.steps_per_epoch
    )
    context = dataclasses.replace(context, steps_per_execution=steps_per_execution)
    context.state.check(
        context.settings(), context.steps, steps_flag(context), context.plan.flag_of
    )
    weights = read_initial_weights(context.plan, context.state, context.tokenizer)
    context = dataclasses.replace(context, initial_weights=weights)
    write_run_files(context)
    return context


def load_tokenizer(context, scratch):
    """(the tokenizer, its file, the config sized to it): the file `known_tokenizer_file`
    found, else one trained now on the training split into `scratch` (the run gets it once
    every check has passed). Binarized data's is loaded on TensorFlow only (text needs it)."""
    path = context.tokenizer_file
    if context.binarized:
        return (kt.SubwordTokenizer.load(path) if on_tensorflow() else None), path, context.config
    if path:
        return kt.SubwordTokenizer.load(path), path, context.config
    config, model_type = context.config, context.plan.data.subword_model
    log(
        f"training a vocabulary of {config.vocab_size} pieces ({model_type}) on the "
        f"training split of {context.dataset.spec}"
    )
    path = scratch / context.directory.tokenizer.name
    try:
        tokenizer = train_tokenizer(context.dataset, config.vocab_size, path, model_type)
    except ValueError as error:
        raise RunError(str(error)) from None
    if tokenizer.vocab_size != config.vocab_size:  # the corpus gave fewer pieces
        log(
            f"the vocabulary has {tokenizer.vocab_size} pieces ({config.vocab_size} were asked for)"
        )
    config = dataclasses.replace(
        config, vocab_size=tokenizer.vocab_size, tokenizer_sha256=sha256_of(path)
    )
    return tokenizer, path, config


def count_data(context):
    """The context with every split the run reads opened and counted, and the steps to train
    to. No training pair left after filtering is an error naming the counts."""
    plan, spec = context.plan, context.dataset.spec
    report = training_report(context)
    log(f"training data ({spec}, train split): {report}")
    if not report.kept:
        raise RunError(
            f"the train split of {spec} leaves no pair to train on: "
            + str(report).replace("\n", "; ")
            + ". Raise --max-length or check the data."
        )
    steps_per_epoch = report.batches if plan.schedule.epochs else context.steps_per_epoch
    data, validation_pairs, test_pairs = plan.data, [], []
    if plan.evaluation.bleu_sentences and on_tensorflow():
        validation_pairs = read_split(context.dataset, data.validation_split, "--validation-split")
    if on_tensorflow():
        test_pairs = read_split(context.dataset, data.test_split, "--test-split")
    return dataclasses.replace(
        context,
        steps_per_epoch=steps_per_epoch,
        steps=plan.schedule.total_steps(steps_per_epoch),
        validation_pairs=validation_pairs,
        test_pairs=test_pairs,
        validation_batches=validation_batches(context, data.validation_split),
    )


def training_report(context):
    """The PipelineReport of the training split, as `fit.training_batches` reads it. A tfds
    training split is counted on its first TFDS_COUNTED pairs unless --epochs needs the whole
    pass."""
    config, max_length = context.config, context.plan.data.max_length
    if context.binarized:
        return context.binarized.report(
            "train", config.tokens_per_batch, max_length, context.batch_multiple
        )
    from keras_transformer.data import pipeline_report  # TensorFlow's

    pairs = context.dataset.read("train")
    if context.dataset.kind == "tfds" and not context.plan.schedule.epochs:
        pairs = pairs.take(TFDS_COUNTED)
    return pipeline_report(pairs, context.tokenizer, config.tokens_per_batch, max_length)


def read_split(dataset, split, flag):
    """The split's pairs; RunError naming `flag` when it cannot be read or is empty."""
    try:
        pairs = dataset.pairs(split)
    except Exception as error:  # a missing file, an unknown tfds split: named, not traced
        raise RunError(f"{flag} {split}: {dataset.spec} has no such split ({error})") from None
    if not pairs:
        raise RunError(f"{flag} {split}: the split of {dataset.spec} is empty")
    return pairs


def validation_batches(context, split):
    """Binarized data's batches of the validation split, for the validation loss ([] for
    other data, or without that split)."""
    binarized = context.binarized
    if not (binarized and binarized.has_split(split)):
        return []
    return list(
        binarized.batches(
            split,
            context.config.tokens_per_batch,
            context.plan.data.max_length,
            repeat=False,
            shuffle=False,
        )
    )


def choose_steps_per_execution(plan, backup, steps, steps_per_epoch):
    """--steps-per-execution, checked against the step in `backup` and the steps per epoch
    counted for --epochs; else 1 on TensorFlow and under JAX the largest of
    AUTO_STEPS_PER_EXECUTION that divides every step the callbacks act at."""
    start = saved_step(backup)
    if plan.schedule.steps_per_execution:
        n = plan.schedule.steps_per_execution
        for what, value in (
            (f"the backup in {backup} holds step", start),
            ("--epochs: an epoch of the training data is", steps_per_epoch),
        ):
            if value % n:
                raise RunError(
                    f"--steps-per-execution {n}: {what} {value}, not a multiple of {n}; give "
                    "a --steps-per-execution that divides it"
                )
        return n
    if on_tensorflow():
        return 1
    acted_at = (start, steps, steps_per_epoch, plan.checkpoints.every or 0)
    return next(n for n in AUTO_STEPS_PER_EXECUTION if all(v % n == 0 for v in acted_at))


def read_initial_weights(plan, state, tokenizer):
    """The --init-from model's weights for a run without a backup (new), else None."""
    if plan.selection.init_from and not state.backed_up:
        return finetune.initial_weights(plan.selection.init_from, tokenizer)
    return None


def write_run_files(context):
    """For a new run, the tokenizer and run.json, once every check passed. A resume records
    its steps only once its backup is restored (`fit.fit`): a resume refused until then
    changes nothing in the run directory."""
    own = context.directory.tokenizer
    if not own.is_file():
        write_atomically(own, lambda path: shutil.copyfile(context.tokenizer_file, path))
    if not context.state.recorded:
        context.state.save(context.settings(), context.steps)


def follow_chief(context):
    """A worker other than the chief: the context with the chief's tokenizer, vocabulary size,
    steps and steps per epoch, read after the barrier."""
    own, plan = context.directory.tokenizer, context.plan
    if not own.is_file():
        raise RunError(
            f"no {own} after the chief wrote it: is --run-dir on a file system that every "
            "worker shares?"
        )
    config, tokenizer = context.config, None
    if not context.binarized:  # binarized data sized the config by its index
        tokenizer = kt.SubwordTokenizer.load(own)
        config = dataclasses.replace(
            config, vocab_size=tokenizer.vocab_size, tokenizer_sha256=sha256_of(own)
        )
    weights = read_initial_weights(plan, context.state, tokenizer)
    steps_per_epoch = context.directory.read_settings()["steps_per_epoch"]
    steps = plan.schedule.total_steps(steps_per_epoch)  # as the chief's
    return dataclasses.replace(
        context,
        config=config,
        tokenizer=tokenizer,
        tokenizer_file=own,
        initial_weights=weights,
        steps_per_epoch=steps_per_epoch,
        steps=steps,
        steps_per_execution=choose_steps_per_execution(
            plan, context.directory.backup, steps, steps_per_epoch
        ),
    )

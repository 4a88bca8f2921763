"""A training run's plan: every setting of `python -m training.train`, with the paper's defaults
filled in and the values that cannot work refused, naming the flag. Frozen:
`training.context.resolve` reads it and never changes it.

Each setting is a field of one of the plan's sections, declared with its flag (`flags.Option`:
type, default, help); `training.train`'s parser is generated from them (`flags.add_dataclass`),
one argument group per section, and `TrainingPlan.from_flags` reads the parsed flags back."""

import dataclasses
import json
import pathlib

from keras_transformer_cli import flags
from keras_transformer_cli.flags import COUNT, Option

from .datasets import check_phrase_flags, phrase_mixture

# The paper's schedule: base models trained 100k steps at 0.4 s a step, big ones 300k at 1.0 s
# (§5.2), and averaged their last 5 and 20 checkpoints, written 10 minutes apart (§6.1): every
# 1500 and 600 steps. Other presets train 100k steps and average 5 checkpoints, one per epoch.
PAPER_TRAINING = {
    "base": {"steps": 100000, "keep": 5, "every": 1500},
    "big": {"steps": 300000, "keep": 20, "every": 600},
}
OTHER_TRAINING = {"steps": 100000, "keep": 5, "every": None}


@dataclasses.dataclass(frozen=True)
class Model:
    """The model: a Table 3 preset, or with --init-from the model's config, and the
    TransformerConfig fields --set changes."""

    preset: str | None = flags.PRESET.field(
        help=flags.PRESET.help + " (default: small; with --init-from, the model's)"
    )
    # the --set items as given, FIELD=VALUE: `TrainingPlan.config_overrides` reads them
    overrides: list = Option(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a TransformerConfig field, e.g. --set num_layers=4 --set dropout=0.3 "
        "(repeatable)",
    ).field()


@dataclasses.dataclass(frozen=True)
class Data:
    """The corpus, its vocabulary and how it becomes batches (§5.1)."""

    dataset: str = flags.DATASET.field()
    download: bool = flags.NO_DOWNLOAD.field()
    source_language: str | None = flags.SOURCE_LANGUAGE.field()
    target_language: str | None = flags.TARGET_LANGUAGE.field()
    data_dir: pathlib.Path | None = flags.DATA_DIR.field()
    phrases: bool = flags.PHRASES.field()
    validation_split: str = Option(
        "--validation-split", default="validation", help="split for BLEU during training"
    ).field()
    test_split: str = Option("--test-split", default="test", help="split scored at the end").field()
    tokenizer: pathlib.Path | None = flags.TOKENIZER.field()
    sentence_repeats: int = flags.SENTENCE_REPEATS.field()
    tag_phrases: bool = flags.TAG_PHRASES.field()
    sentence_alternatives: bool = flags.SENTENCE_ALTERNATIVES.field()
    vocab_size: int | None = flags.VOCAB_SIZE.field()
    max_length: int = flags.MAX_LENGTH.field()
    subword_sampling: float = Option(
        "--subword-sampling",
        type=flags.fraction,
        default=0.0,
        metavar="ALPHA",
        help="subword regularisation of the training pairs: each time a pair is batched, its "
        "segmentation is drawn anew; a BPE vocabulary by BPE-dropout (Provilkov et al., 2020), "
        "every merge skipped with this probability (0.1 in their study), a unigram one among all "
        "its segmentations with probabilities raised to this power (Kudo, 2018); 0: none, as "
        "the paper. Validation, evaluation, the export and serving segment as without it",
    ).field()
    subword_model: str = Option(
        "--subword-model",
        default="bpe",
        choices=("bpe", "unigram"),
        help="the vocabulary the run trains: byte-pair encoding (bpe, §5.1) or a unigram "
        "language model (unigram, Kudo 2018)",
    ).field()
    tokens_per_batch: int | None = Option(
        "--tokens-per-batch",
        type=COUNT,
        help="global budget of source tokens and of target tokens per "
        "batch, i.e. per update, split across replicas and --accumulate-steps micro-batches "
        "(§5.1; default: the preset's, 25000 for base and big)",
    ).field()


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How long the run trains (without --steps or --epochs the paper's steps, §5.2:
    `PAPER_TRAINING`) and how its steps run."""

    steps: int | None = Option(
        "--steps",
        type=COUNT,
        help="training steps, i.e. updates (default: the paper's, 100000 for base, 300000 for "
        "big, §5.2; 100000 for other presets)",
    ).field(exclusive=True)
    epochs: int | None = Option(
        "--epochs", type=COUNT, help="passes over the training data, instead of --steps"
    ).field(exclusive=True)
    steps_per_epoch: int = Option(
        "--steps-per-epoch",
        type=COUNT,
        default=1000,
        help="steps per Keras epoch: the interval of the backup, BLEU and epoch summaries",
    ).field()
    accumulate_steps: int = Option(
        "--accumulate-steps",
        type=COUNT,
        default=1,
        help="run each batch as this many micro-batches whose summed "
        "gradients make one update (gradient accumulation): the paper's batch in a fraction of "
        "the memory; the same updates as without it",
    ).field()
    steps_per_execution: int | None = Option(
        "--steps-per-execution",
        type=COUNT,
        help="training steps run per call into the compiled step (Keras "
        "compile(steps_per_execution)): the host syncs with the device and runs the callbacks "
        "only every N steps, so backups, checkpoints, the NaN check, a SIGTERM and --max-minutes "
        "act at multiples of N (default: 1 on TensorFlow; under JAX the largest of 16, 8, 4, 2, "
        "1 that divides --steps-per-epoch, --checkpoint-every, --steps and the backup's step)",
    ).field()
    max_minutes: float | None = Option(
        "--max-minutes",
        type=flags.positive,
        help="stop training after this long; the same command continues the run",
    ).field()
    seed: int = flags.SEED.field()
    deterministic: bool = Option(
        "--deterministic",
        action="store_true",
        default=False,
        help="make TensorFlow's ops deterministic (tf.config.experimental."
        "enable_op_determinism): the same command gives bitwise the same run, somewhat slower",
    ).field()

    def total_steps(self, steps_per_epoch):
        """The run's steps: --steps, else --epochs of `steps_per_epoch` steps."""
        return self.steps or self.epochs * steps_per_epoch

    def with_defaults(self, paper):
        """The steps of `paper` (a row of PAPER_TRAINING, §5.2) unless --steps or --epochs is
        given."""
        if self.steps is None and self.epochs is None:
            return dataclasses.replace(self, steps=paper["steps"])
        return self


@dataclasses.dataclass(frozen=True)
class Checkpoints:
    """The step checkpoints: how often they are written and how many are kept and averaged at
    the end (the paper's, §6.1: `PAPER_TRAINING`)."""

    every: int | None = Option(
        "--checkpoint-every",
        type=COUNT,
        help="steps between checkpoints (default: the paper's 10 minutes at its speed, §6.1: "
        "1500 for base, 600 for big; --steps-per-epoch for other presets; none when only "
        "--checkpoint-minutes is given)",
    ).field()
    minutes: float | None = Option(
        "--checkpoint-minutes",
        type=flags.positive,
        help="also write a checkpoint whenever this many minutes of "
        "training passed since the last one (the paper: 10, §6.1)",
    ).field()
    keep: int | None = Option(
        "--keep-checkpoints",
        type=COUNT,
        help="checkpoints kept and averaged at the end (default: the "
        "paper's, 5 for base, 20 for big, §6.1; 5 for other presets)",
    ).field()

    def with_defaults(self, paper):
        """--keep-checkpoints and --checkpoint-every of `paper` (a row of PAPER_TRAINING,
        §6.1) where they are not given (--checkpoint-minutes alone decides when it is)."""
        filled = {}
        if self.keep is None:
            filled["keep"] = paper["keep"]
        if self.every is None and self.minutes is None:
            filled["every"] = paper["every"]
        return dataclasses.replace(self, **filled)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Validation during training, and at the end the test translations with §6.1's search and
    the export."""

    bleu_sentences: int = Option(
        "--bleu-sentences",
        type=flags.AMOUNT,
        default=500,
        help="validation sentences translated (greedy) for BLEU after each epoch; 0: none",
    ).field()
    samples: int = Option(
        "--samples",
        type=flags.AMOUNT,
        default=3,
        help="sample translations and attention maps shown",
    ).field()
    beam_size: int = flags.BEAM_SIZE.field()
    alpha: float = flags.ALPHA.field()
    extra_length: int = flags.EXTRA_LENGTH.field()
    export_dir: pathlib.Path | None = flags.EXPORT_DIR.field(required=False)


@dataclasses.dataclass(frozen=True)
class Hardware:
    """Where the run trains: the tf.distribute strategy, the precision and XLA."""

    strategy: str = Option(
        "--strategy",
        default="auto",
        help="auto, default, mirrored, multi_worker (TF_CONFIG) or tpu",
    ).field()
    tpu: str | None = Option("--tpu", help="TPU name or address for --strategy tpu").field()
    cpu_devices: int = Option(
        "--cpu-devices",
        type=COUNT,
        default=1,
        help="split the CPU into this many devices to mirror across (tries tf.distribute on one "
        "machine)",
    ).field()
    mixed_precision: str = flags.MIXED_PRECISION.field()
    jit_compile: bool = flags.JIT_COMPILE.field()


@dataclasses.dataclass(frozen=True)
class Selection:
    """Fine-tuning from a trained model, and the best checkpoint kept, stopped at and ended
    with."""

    init_from: pathlib.Path | None = Option(
        "--init-from",
        type=pathlib.Path,
        metavar="MODEL.keras",
        help="start this new run from a trained model's weights (fine-tuning): its config "
        "(--set may change only the training fields dropout, attention_dropout, relu_dropout, "
        "label_smoothing, warmup_steps, learning_rate_scale, tokens_per_batch; a --preset must "
        "have its architecture), its tokenizer unless --tokenizer or --vocab-size gives a new "
        "vocabulary (the rows of the pieces both hold are kept), and a fresh Adam and schedule "
        "that warms up over the model's warmup_steps again (--set warmup_steps=N): a fresh Adam"
        " has no moments yet, so its first updates move every weight by the full learning rate,"
        " which the warm-up keeps small",
    ).field()
    keep_best: str | None = Option(
        "--keep-best",
        choices=("bleu", "chrf", "loss"),  # the epoch logs' val_bleu, val_chrf, val_loss
        help="at every validation keep the checkpoint with the best validation BLEU, chrF "
        "(greedy translations of --bleu-sentences pairs) or loss (the references' "
        "cross-entropy, on the same pairs) in RUN_DIR/best/, apart from the rolling ones",
    ).field()
    early_stopping: int | None = Option(
        "--early-stopping",
        type=COUNT,
        metavar="N",
        help="end the run after N validations without a better --keep-best figure; it then "
        "ends as at --steps (the same command again says it is finished)",
    ).field()
    final_model: str = Option(
        "--final-model",
        choices=("average", "best"),
        default="average",
        help="what the run ends with (model.keras, scored on test and exported): the average "
        "of the last --keep-checkpoints checkpoints (§6.1: an average usually scores a little "
        "above each of them) or the --keep-best checkpoint (which stays in RUN_DIR/best/ "
        "either way)",
    ).field()


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingPlan:
    """The settings of one run, by section; `from_flags` builds it from the parsed command
    line (`flags.add_dataclass(parser, TrainingPlan)` makes the parser)."""

    model: Model = flags.section(Model, "model")
    data: Data = flags.section(Data, "data")
    schedule: Schedule = flags.section(Schedule, "schedule")
    checkpoints: Checkpoints = flags.section(Checkpoints, "checkpoints")
    evaluation: Evaluation = flags.section(Evaluation, "evaluation and export")
    hardware: Hardware = flags.section(Hardware, "hardware")
    selection: Selection = flags.section(Selection, "fine-tuning and the best checkpoint")
    run_dir: pathlib.Path = flags.RUN_DIR.field()

    @classmethod
    def from_flags(cls, args):
        """The plan of an argparse Namespace from `training.train`'s parser, checked."""
        return flags.from_namespace(cls, args).with_defaults().checked()

    def with_defaults(self):
        """The paper's --steps, --keep-checkpoints and --checkpoint-every for the preset
        (PAPER_TRAINING) where they are not given, RUN_DIR/export, and the small preset unless
        --init-from gives the config."""
        paper = PAPER_TRAINING.get(self.model.preset, OTHER_TRAINING)
        from keras_transformer_cli.run_dir import RunDirectory

        export_dir = self.evaluation.export_dir or RunDirectory(self.run_dir).export
        preset = self.model.preset
        if preset is None and not self.selection.init_from:
            preset = "small"
        return dataclasses.replace(
            self,
            model=dataclasses.replace(self.model, preset=preset),
            schedule=self.schedule.with_defaults(paper),
            checkpoints=self.checkpoints.with_defaults(paper),
            evaluation=dataclasses.replace(self.evaluation, export_dir=export_dir),
        )

    def checked(self):
        """Refuses values that cannot work together, naming the flags (each number alone is
        checked where it is parsed: `keras_transformer_cli.flags`); returns the plan."""
        overrides = parse_overrides(self.model.overrides)  # refuses an item not FIELD=VALUE
        data = self.data
        if "vocab_size" in overrides:
            raise ValueError(
                f"--set vocab_size={overrides['vocab_size']}: the model's vocab_size is its "
                f"vocabulary's size; give --vocab-size {overrides['vocab_size']}"
            )
        set_batch = overrides.get("tokens_per_batch", data.tokens_per_batch)
        if data.tokens_per_batch and set_batch != data.tokens_per_batch:
            raise ValueError(
                f"--set tokens_per_batch={set_batch} and --tokens-per-batch "
                f"{data.tokens_per_batch} disagree: give --tokens-per-batch alone"
            )
        check_phrase_flags(
            data.phrases, data.sentence_repeats, data.tag_phrases, data.sentence_alternatives
        )
        if data.tokenizer and not data.tokenizer.is_file():
            raise ValueError(f"--tokenizer {data.tokenizer}: no such file")
        brought = data.tokenizer or data.dataset.startswith("binarized:")
        if data.subword_model != "bpe" and (
            brought or self.selection.init_from and not data.vocab_size
        ):
            raise ValueError(
                "--subword-model chooses the vocabulary the run trains; --tokenizer, binarized "
                "data and --init-from's model bring their own: leave --subword-model (with "
                "--init-from, --vocab-size trains a new one)"
            )
        if data.subword_sampling and data.dataset.startswith("binarized:"):
            raise ValueError(
                "--subword-sampling segments the text anew each time; binarized data holds "
                "one segmentation: train from the dataset itself, or leave --subword-sampling"
            )
        if data.subword_sampling and self.schedule.deterministic:
            raise ValueError(
                "--subword-sampling draws from sentencepiece's unseeded generator, which "
                "--deterministic cannot repeat: leave one of the two"
            )
        self.check_execution(self.schedule.steps_per_execution)
        return self.checked_selection()

    def check_execution(self, steps_per_execution):
        """Refuses a --steps-per-execution whose boundaries miss a step the run must act at:
        callbacks see only every N-th step, so the epoch's end (backup, validation), the
        checkpoint spacing and the last step must be multiples of N."""
        if not steps_per_execution or steps_per_execution == 1:
            return
        for flag, value in (
            ("--steps-per-epoch", self.schedule.steps_per_epoch),
            ("--checkpoint-every", self.checkpoints.every),
            ("--steps", self.schedule.steps),
        ):
            if value and value % steps_per_execution:
                raise ValueError(
                    f"{flag} {value} is not a multiple of --steps-per-execution "
                    f"{steps_per_execution}: training stops for the callbacks (backups, "
                    "checkpoints, validation, the end) only every N steps; give a multiple, or a "
                    "--steps-per-execution that divides it"
                )

    def checked_selection(self):
        """Refuses --keep-best, --early-stopping and --final-model values that cannot work."""
        selection = self.selection
        for flag, needs in (
            ("--early-stopping", selection.early_stopping),
            ("--final-model best", selection.final_model == "best"),
        ):
            if needs and not selection.keep_best:
                raise ValueError(
                    f"{flag} needs a validation figure to watch: give --keep-best bleu, chrf or "
                    "loss"
                )
        if selection.keep_best and not self.evaluation.bleu_sentences:
            raise ValueError(
                "--keep-best validates on --bleu-sentences pairs; --bleu-sentences 0 leaves none"
            )
        return self

    def settings(self, config, languages, precision):
        """What a resume of this run must agree with (run.json's settings)."""
        from keras_transformer_cli.run_dir import tokenizer_beside

        from .finetune import with_model_tokenizer

        data, selection = self.data, self.selection
        if data.tokenizer:
            vocabulary = {"tokenizer": str(data.tokenizer)}
        elif with_model_tokenizer(self):
            vocabulary = {"tokenizer": str(tokenizer_beside(selection.init_from))}
        else:
            vocabulary = {"vocab_size": data.vocab_size or flags.DEFAULT_VOCAB_SIZE}
            if data.subword_model != "bpe":  # BPE, the default, is recorded by omission
                vocabulary["model"] = data.subword_model
        return {
            "preset": self.model.preset,
            "config": config.to_dict(),
            "vocabulary": vocabulary,
            "dataset": data.dataset,
            "languages": list(languages),
            "max_length": data.max_length,
            "phrases": phrase_mixture(
                data.phrases, data.sentence_repeats, data.tag_phrases, data.sentence_alternatives
            ),
            "subword_sampling": data.subword_sampling,
            "precision": precision,
            "seed": self.schedule.seed,
            "steps_per_epoch": self.schedule.steps_per_epoch,
            "init_from": str(selection.init_from) if selection.init_from else None,
            "keep_best": selection.keep_best,
            "early_stopping": selection.early_stopping,
        }

    @classmethod
    def flag_of(cls, setting):
        """The flag (or flags, joined by "/") that set `setting`, a dotted path in run.json's
        settings, from the fields' declarations: a setting of a field's name is that field's
        flag, one of `SETTING_FIELDS` its fields', a config field otherwise --preset or --set."""
        options = declared_options(cls)
        top = setting.split(".")[0]
        fields = SETTING_FIELDS.get(setting) or SETTING_FIELDS.get(top * (top != "config"))
        if fields or top in options:
            return "/".join(options[name].flag for name in fields or (top,))
        return f"--set {setting.removeprefix('config.')}" if top == "config" else setting

    @property
    def config_overrides(self):
        """The TransformerConfig fields set by --set and --tokens-per-batch."""
        overrides = parse_overrides(self.model.overrides)
        if self.data.tokens_per_batch:
            overrides["tokens_per_batch"] = self.data.tokens_per_batch
        return overrides

    @property
    def checkpoint_interval(self):
        """Steps between checkpoints: --checkpoint-every, else one per epoch unless
        --checkpoint-minutes alone decides."""
        if self.checkpoints.every:
            return self.checkpoints.every
        return None if self.checkpoints.minutes else self.schedule.steps_per_epoch


# The plan's fields that a run.json setting of another name comes from.
SETTING_FIELDS = {
    "config.vocab_size": ("vocab_size", "tokenizer"),
    "config.tokens_per_batch": ("tokens_per_batch",),
    "config.tokenizer_sha256": ("vocab_size", "tokenizer"),
    "vocabulary": ("vocab_size", "tokenizer", "subword_model"),
    "languages": ("source_language", "target_language"),
    "phrases": ("phrases", "sentence_repeats", "tag_phrases", "sentence_alternatives"),
    "precision": ("mixed_precision",),
}


def declared_options(cls):
    """{field name: its `flags.Option`} of the dataclass `cls` and its sections."""
    options = {}
    for field in dataclasses.fields(cls):
        if "title" in field.metadata:
            options |= declared_options(field.default_factory)
        else:
            options[field.name] = field.metadata["option"]
    return options


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

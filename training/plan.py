"""A training run's plan: every setting of `python -m training.train`, with the paper's defaults
filled in and the values that cannot work refused, naming the flag. Frozen: the Trainer reads it
and never changes it."""

import dataclasses
import json
import pathlib

DEFAULT_VOCAB_SIZE = 8000
# The paper's schedule: base models trained 100k steps at 0.4 s a step, big ones 300k at 1.0 s
# (§5.2), and averaged their last 5 and 20 checkpoints, written 10 minutes apart (§6.1): every
# 1500 and 600 steps. Other presets train 100k steps and average 5 checkpoints, one per epoch.
PAPER_TRAINING = {
    "base": {"steps": 100000, "keep_checkpoints": 5, "checkpoint_every": 1500},
    "big": {"steps": 300000, "keep_checkpoints": 20, "checkpoint_every": 600},
}
OTHER_TRAINING = {"steps": 100000, "keep_checkpoints": 5, "checkpoint_every": None}


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """The settings of one run; `from_flags` builds it from the parsed command line."""

    run_dir: pathlib.Path
    preset: str | None = None  # "small", or with --init-from the model's config
    overrides: tuple = ()  # ((field, value), ...) for TransformerConfig
    dataset: str = "ding"
    source_language: str | None = None
    target_language: str | None = None
    data_dir: pathlib.Path | None = None
    download: bool = True
    phrases: bool = False
    sentence_repeats: int = 1
    validation_split: str = "validation"
    test_split: str = "test"
    vocab_size: int | None = None
    tokenizer: pathlib.Path | None = None
    tokens_per_batch: int | None = None
    max_length: int = 128
    steps: int | None = None
    epochs: int | None = None
    steps_per_epoch: int = 1000
    accumulate_steps: int = 1
    steps_per_execution: int | None = None
    checkpoint_every: int | None = None
    checkpoint_minutes: float | None = None
    keep_checkpoints: int | None = None
    max_minutes: float | None = None
    seed: int = 0
    deterministic: bool = False
    bleu_sentences: int = 500
    samples: int = 3
    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50
    export_dir: pathlib.Path | None = None
    strategy: str = "auto"
    tpu: str | None = None
    cpu_devices: int = 1
    mixed_precision: str = "auto"
    jit_compile: bool = False
    init_from: pathlib.Path | None = None
    keep_best: str | None = None
    early_stopping: int | None = None
    final_model: str = "average"

    @classmethod
    def from_flags(cls, args):
        """The plan of an argparse Namespace from `training.train`'s parser, checked."""
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
        values["overrides"] = tuple(parse_overrides(args.overrides).items())
        return cls(**values).with_defaults().checked()

    def with_defaults(self):
        """The paper's --steps, --keep-checkpoints and --checkpoint-every for the preset
        (PAPER_TRAINING) where they are not given, RUN_DIR/export, and the small preset unless
        --init-from gives the config."""
        paper = PAPER_TRAINING.get(self.preset, OTHER_TRAINING)
        from programs.run_dir import RunDirectory

        filled = {"export_dir": self.export_dir or RunDirectory(self.run_dir).export}
        if self.preset is None and not self.init_from:
            filled["preset"] = "small"
        if self.steps is None and self.epochs is None:
            filled["steps"] = paper["steps"]
        if self.keep_checkpoints is None:
            filled["keep_checkpoints"] = paper["keep_checkpoints"]
        if self.checkpoint_every is None and self.checkpoint_minutes is None:
            filled["checkpoint_every"] = paper["checkpoint_every"]
        return dataclasses.replace(self, **filled)

    def checked(self):
        """Refuses values that cannot work together, naming the flags (each number alone is
        checked where it is parsed: `programs.flags`); returns the plan."""
        if self.sentence_repeats != 1 and not self.phrases:
            raise ValueError(
                "--sentence-repeats up-samples the sentences among the phrases: it needs --phrases"
            )
        if self.tokenizer and not self.tokenizer.is_file():
            raise ValueError(f"--tokenizer {self.tokenizer}: no such file")
        self.check_execution(self.steps_per_execution)
        return self.checked_selection()

    def check_execution(self, steps_per_execution):
        """Refuses a --steps-per-execution whose boundaries miss a step the run must act at:
        callbacks see only every N-th step, so the epoch's end (backup, validation), the
        checkpoint spacing and the last step must be multiples of N."""
        if not steps_per_execution or steps_per_execution == 1:
            return
        for flag, value in (
            ("--steps-per-epoch", self.steps_per_epoch),
            ("--checkpoint-every", self.checkpoint_every),
            ("--steps", self.steps),
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
        for flag, needs in (
            ("--early-stopping", self.early_stopping),
            ("--final-model best", self.final_model == "best"),
        ):
            if needs and not self.keep_best:
                raise ValueError(
                    f"{flag} needs a validation figure to watch: give --keep-best bleu, chrf or "
                    "loss"
                )
        if self.keep_best and not self.bleu_sentences:
            raise ValueError(
                "--keep-best validates on --bleu-sentences pairs; --bleu-sentences 0 leaves none"
            )
        return self

    def settings(self, config, languages, precision):
        """What a resume of this run must agree with (run.json's settings)."""
        from programs.run_dir import tokenizer_beside
        from training.finetune import with_model_tokenizer

        if self.tokenizer:
            vocabulary = {"tokenizer": str(self.tokenizer)}
        elif with_model_tokenizer(self):
            vocabulary = {"tokenizer": str(tokenizer_beside(self.init_from))}
        else:
            vocabulary = {"vocab_size": self.vocab_size or DEFAULT_VOCAB_SIZE}
        return {
            "preset": self.preset,
            "config": config.to_dict(),
            "vocabulary": vocabulary,
            "dataset": self.dataset,
            "languages": list(languages),
            "max_length": self.max_length,
            "phrases": {"sentence_repeats": self.sentence_repeats} if self.phrases else None,
            "precision": precision,
            "seed": self.seed,
            "steps_per_epoch": self.steps_per_epoch,
            "init_from": str(self.init_from) if self.init_from else None,
            "keep_best": self.keep_best,
            "early_stopping": self.early_stopping,
        }

    @property
    def config_overrides(self):
        """The TransformerConfig fields set by --set and --tokens-per-batch."""
        overrides = dict(self.overrides)
        if self.tokens_per_batch:
            overrides["tokens_per_batch"] = self.tokens_per_batch
        return overrides

    @property
    def checkpoint_interval(self):
        """Steps between checkpoints: --checkpoint-every, else one per epoch unless
        --checkpoint-minutes alone decides."""
        if self.checkpoint_every:
            return self.checkpoint_every
        return None if self.checkpoint_minutes else self.steps_per_epoch


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

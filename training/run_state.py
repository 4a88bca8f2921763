"""A run's state, kept honestly: what run.json records, what a resume must agree with, and where
an earlier run of the same directory stopped.

run.json holds the settings a resume must agree with (the model config, the vocabulary, the data,
the precision, the seed, the steps per epoch), the steps asked for last (`steps`, which a later
command may raise), and once the run's end was scored and exported, `finished`: the step, the
model, the export, what it is (the average or the best checkpoint, with its validation figure)
and the test scores. The backup (backup/backup.json) names the step it holds and the state of
--keep-best and --early-stopping.
"""

import dataclasses

from programs import checkpoints
from programs.run_dir import RunError, differences, read_settings, save_settings, tokenizer_beside
from training.finetune import with_model_tokenizer
from training.plan import DEFAULT_VOCAB_SIZE

# The flag that sets each recorded field (config fields not listed: --preset or --set FIELD).
FLAGS = {
    "config.vocab_size": "--vocab-size/--tokenizer",
    "config.tokens_per_batch": "--tokens-per-batch",
    "vocabulary": "--vocab-size/--tokenizer",
    "preset": "--preset",
    "dataset": "--dataset",
    "languages": "--source-language/--target-language",
    "max_length": "--max-length",
    "phrases": "--phrases/--sentence-repeats",
    "precision": "--mixed-precision",
    "seed": "--seed",
    "steps_per_epoch": "--steps-per-epoch",
    "init_from": "--init-from",
    "keep_best": "--keep-best",
    "early_stopping": "--early-stopping",
}


def flag_of(field):
    top = field.split(".")[0]
    if field in FLAGS or top != "config" and top in FLAGS:
        return FLAGS.get(field, FLAGS[top])
    if field.startswith("config."):
        return f"--set {field.removeprefix('config.')}"
    return field


def settings_of(plan, config, languages, precision):
    """What a resume of this run must agree with."""
    if plan.tokenizer:
        vocabulary = {"tokenizer": str(plan.tokenizer)}
    elif with_model_tokenizer(plan):
        vocabulary = {"tokenizer": str(tokenizer_beside(plan.init_from))}
    else:
        vocabulary = {"vocab_size": plan.vocab_size or DEFAULT_VOCAB_SIZE}
    return {
        "preset": plan.preset,
        "config": config.to_dict(),
        "vocabulary": vocabulary,
        "dataset": plan.dataset,
        "languages": list(languages),
        "max_length": plan.max_length,
        "phrases": {"sentence_repeats": plan.sentence_repeats} if plan.phrases else None,
        "precision": precision,
        "seed": plan.seed,
        "steps_per_epoch": plan.steps_per_epoch,
        "init_from": str(plan.init_from) if plan.init_from else None,
        "keep_best": plan.keep_best,
        "early_stopping": plan.early_stopping,
    }


@dataclasses.dataclass
class RunState:
    """Where the run in `run_dir` stands: its recorded settings ({} for a new run), the step its
    backup holds, the step its end was exported at (None if never), and the --keep-best state
    its backup holds (None without one)."""

    run_dir: object
    recorded: dict
    step: int
    finished_step: int | None
    best: dict | None = None
    backed_up: bool = False

    @classmethod
    def read(cls, run_dir):
        """Reads run.json and the backup; refuses a directory whose checkpoints have no
        run.json, or no backup to resume from (never a silent restart)."""
        from training.callbacks import Backup

        recorded = read_settings(run_dir)
        found = checkpoints.list_checkpoints(run_dir / "checkpoints")
        written = [
            p
            for p in (run_dir / "checkpoints", run_dir / "backup")
            if p.is_dir() and any(p.iterdir())
        ]
        if written and not recorded:
            raise RunError(
                f"{run_dir} holds {written[0].name}/ but no run.json: it is not a run of this "
                "program, or its settings are lost; choose another --run-dir"
            )
        backup = Backup.read_index(run_dir / "backup")
        step = backup.get("step", 0)
        if found and not (run_dir / "backup" / Backup.INDEX).is_file():
            raise RunError(
                f"{run_dir / 'checkpoints'} holds checkpoints up to step "
                f"{checkpoints.step_of(found[-1])} but {run_dir / 'backup' / Backup.INDEX} is "
                "missing, so the run cannot resume where it stopped; restore the backup, or "
                "choose another --run-dir"
            )
        finished = (recorded.get("finished") or {}).get("step")
        return cls(run_dir, recorded, step, finished, backup.get("best"), bool(backup))

    def check(self, settings, steps, steps_flag):
        """Refuses a command that this run cannot honour, naming each flag: other settings, or
        fewer `steps` (set by `steps_flag`) than the run has trained."""
        found = [
            f"{flag_of(field)}: {old!r} in the run, {new!r} now"
            for field, old, new in differences(self.recorded, settings)
        ]
        if found:
            vocabulary = any(line.startswith("--vocab-size") for line in found)
            raise RunError(
                ("vocabulary mismatch: " if vocabulary else "")
                + f"{self.run_dir} holds a run with other settings ({self.run_dir / 'run.json'}); "
                + "; ".join(found)
                + ". Repeat the run's own settings to continue it, or choose another --run-dir."
            )
        if self.step > steps:
            raise RunError(
                f"{steps_flag}: the run in {self.run_dir} has trained {self.step} steps "
                f"already; give --steps {self.step} or more"
            )

    @property
    def finished(self):
        """Whether the run's end at the backup's step was already averaged and exported."""
        return self.step > 0 and self.finished_step == self.step

    @property
    def stopped_early(self):
        """Whether --early-stopping ended the training (it does not train on)."""
        return bool(self.best and self.best.get("stopped"))

    def complete(self, steps):
        """Whether nothing is left to do for `steps`: the end is exported, at those steps or
        after an early stop."""
        return self.finished and (steps == self.step or self.stopped_early)

    def save(self, settings, steps, finished=None):
        """Writes run.json: the settings, the steps asked for, and the finished record (kept
        from before unless a new one is given)."""
        record = {**settings, "steps": steps}
        record["finished"] = finished or self.recorded.get("finished")
        self.recorded = record
        self.finished_step = (record["finished"] or {}).get("step")
        return save_settings(self.run_dir, record)

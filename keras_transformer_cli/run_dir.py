"""A training run's directory, one object (`RunDirectory`): where each thing it holds lives, its
lock, its run.json and where the run stands (`RunState`); and reading models and their
tokenizers wherever they lie.

run.json              what a resume must agree with (config, vocabulary, data, its subword
                      sampling, precision, seed, steps per epoch, --init-from, --keep-best,
                      --early-stopping), the steps asked for, and what the finished run wrote
                      (paths inside the run relative to it)
tokenizer.model       the shared subword vocabulary
backup/               the exact training state (weights, optimizer, step, --keep-best's) for
                      resuming
checkpoints/          step-NNNNNNN.weights.npz, the last K
best/                 with --keep-best: the best validation's step-NNNNNNN.weights.npz and
                      best.json {step, metric, value}
logs/                 TensorBoard: train/ (loss, accuracy, learning rate),
                      validation/ (BLEU, chrF, text, attention)
model.keras           the average of the last K checkpoints (or the best: --final-model)
translations.test.txt and .scores.json (BLEU, chrF, chrF++), export/<version>/ (the SavedModel)

Its checkpoints (the files, their average, the callbacks that write them) are
`keras_transformer_cli.checkpoints`'.
"""

import dataclasses
import errno
import fcntl
import json
import os
import pathlib
import zipfile

from keras_transformer_cli.files import write_text_atomically

SETTINGS_FILE = "run.json"
TOKENIZER_FILE = "tokenizer.model"
MODEL_FILE = "model.keras"


class RunError(ValueError):
    """A run directory that cannot be used for this command; nothing in it was changed."""


def read_settings(run_dir):
    """The run's run.json, {} when there is none; RunError naming the file when it is not
    JSON."""
    path = pathlib.Path(run_dir) / SETTINGS_FILE
    if not path.is_file():
        return {}
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as error:
        raise RunError(f"{path} cannot be read ({error}); restore it from a copy") from None
    if not isinstance(settings, dict):
        raise RunError(f"{path} is not a run's settings (a JSON object)")
    return settings


def scores_beside(translations):
    """Where the scores of a file of translations are written: beside it, .scores.json added."""
    translations = pathlib.Path(translations)
    return translations.with_name(translations.name + ".scores.json")


def differences(previous, current, prefix=""):
    """(field, previous value, current value) for each field of `current` whose value differs,
    nested dicts by dotted path (and the fields of those that only `previous` has)."""
    keys = set(current) | (set(previous) if prefix else set())
    for key in sorted(keys):
        old, new = previous.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            yield from differences(old, new, f"{prefix}{key}.")
        elif old != new:
            yield f"{prefix}{key}", old, new


class RunDirectory:
    """A training run's directory: the path of each thing it holds (the module's table), its
    lock, its run.json (`read_settings`, `save_settings`) and where the run stands (`state`).
    Paths the run records are relative to it when inside it (`relative`, `resolve`): a copied
    run directory names its own files."""

    def __init__(self, path):
        self.path = pathlib.Path(path)

    def __str__(self):
        return str(self.path)

    settings_file = property(lambda self: self.path / SETTINGS_FILE)
    tokenizer = property(lambda self: self.path / TOKENIZER_FILE)
    model = property(lambda self: self.path / MODEL_FILE)
    backup = property(lambda self: self.path / "backup")
    checkpoints = property(lambda self: self.path / "checkpoints")
    best = property(lambda self: self.path / "best")
    logs = property(lambda self: self.path / "logs")
    export = property(lambda self: self.path / "export")  # the default --export-dir

    def translations(self, split):
        """Where the finished run's translations of `split` go (its scores beside)."""
        return self.path / f"translations.{split}.txt"

    def scores(self, split):
        """The BLEU, chrF and chrF++ of the finished run's translations of `split`."""
        return scores_beside(self.translations(split))

    def lock(self):
        return RunLock(self.path)

    def read_settings(self):
        return read_settings(self.path)

    def save_settings(self, settings):
        return write_text_atomically(self.settings_file, json.dumps(settings, indent=2))

    def state(self):
        return RunState.read(self)

    def relative(self, path):
        """`path` as run.json records it: relative to the run when inside it, else absolute."""
        path, run = pathlib.Path(path).resolve(), self.path.resolve()
        return str(path.relative_to(run) if path.is_relative_to(run) else path)

    def resolve(self, recorded):
        """A path run.json records (`relative`'s, or an absolute one), as a path to open."""
        return None if recorded is None else self.path / recorded

    def build_model(self):
        """The model that the run trains, freshly initialized (its run.json's config)."""
        import keras_transformer as kt

        settings = self.read_settings()
        if "config" not in settings:
            raise RunError(f"{self} holds no {SETTINGS_FILE} with a model config")
        return kt.build_transformer(kt.TransformerConfig.from_dict(settings["config"]))


class RunLock:
    """An exclusive lock on a run directory for the life of a process (flock(2) on the
    directory itself: nothing is written, and the OS releases it when the process dies). The
    directories made for the lock are removed again when the run writes nothing into them."""

    def __init__(self, run_dir):
        self.run_dir = pathlib.Path(run_dir)
        self.made = [p for p in (self.run_dir, *self.run_dir.parents) if not p.exists()]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.descriptor = os.open(self.run_dir, os.O_RDONLY)
        try:
            fcntl.flock(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            self.release()
            if error.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise RunError(
                f"another process is training in {self.run_dir} (it holds the run's lock); "
                "wait for it to end, or choose another --run-dir"
            ) from None

    def release(self):
        if self.descriptor is not None:
            os.close(self.descriptor)  # closing the descriptor releases the lock
            self.descriptor = None
        for made in self.made:  # the run directory first, then the parents made for it
            if not made.is_dir() or any(made.iterdir()):
                break
            made.rmdir()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.release()


def run_dir_of(path):
    """The run directory a file of it lies in (the directory holding run.json), or None."""
    for directory in pathlib.Path(path).resolve().parents[:2]:
        if (directory / SETTINGS_FILE).is_file():
            return directory
    return None


def tokenizer_beside(model_path):
    """The tokenizer of a model file: tokenizer.model beside it or in its run directory."""
    model_path = pathlib.Path(model_path)
    beside = model_path.with_name(TOKENIZER_FILE)
    run_dir = run_dir_of(model_path)
    return beside if beside.is_file() or run_dir is None else run_dir / TOKENIZER_FILE


def load_with_tokenizer(model_path, tokenizer_path=None):
    """(the model, the path of its tokenizer): `tokenizer_path`, else the one
    `tokenizer_beside` finds; ValueError naming whichever file is missing."""
    tokenizer_path = pathlib.Path(tokenizer_path or tokenizer_beside(model_path))
    for path, flag in ((pathlib.Path(model_path), "--model"), (tokenizer_path, "--tokenizer")):
        if path.is_dir():
            what = "a .keras model or a step checkpoint" if flag == "--model" else "a file"
            raise ValueError(f"{flag} {path} is a directory; give {what} (e.g. a file in it)")
        if not path.is_file():
            raise ValueError(f"{flag} {path}: no such file")
    return load_model(model_path), tokenizer_path


def load_model(path):
    """A .keras model, or a run's step checkpoint (.weights.npz) in the model its run.json
    describes."""
    path = pathlib.Path(path)
    if path.name.endswith(".weights.npz"):
        run_dir = run_dir_of(path)
        if run_dir is None:
            raise ValueError(
                f"{path} is a step checkpoint, but no {SETTINGS_FILE} was found above it to build "
                "its model"
            )
        from keras_transformer_cli.checkpoints import load_checkpoint

        model = RunDirectory(run_dir).build_model()
        load_checkpoint(model, path)
        return model
    if path.suffix != ".keras":
        raise ValueError(
            f"{path}: expected a .keras model, a step checkpoint (.weights.npz) or a SavedModel "
            "directory"
        )
    import keras

    import keras_transformer as kt  # registers the model and layers for loading

    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
    if not zipfile.is_zipfile(path):  # Keras would call a cut archive "File not found"
        raise ValueError(
            f"{path}: not a readable .keras model (not a whole zip archive: cut, or another "
            "kind of file)"
        )
    try:
        model = keras.models.load_model(path)
    except Exception as error:  # a cut, corrupt or foreign file: Keras's errors vary
        raise ValueError(
            f"{path}: not a readable .keras model ({type(error).__name__}: "
            f"{' '.join(str(error).split())[:200]})"
        ) from None
    if not isinstance(model, kt.Transformer):
        raise ValueError(f"{path}: a Keras model, but not a keras-transformer Transformer")
    return model


def same_tokenizer(field, recorded, given):
    """Whether a resume's --tokenizer names the recorded tokenizer's file by another path (an
    absolute path for a relative one, or from another working directory)."""
    if field != "vocabulary.tokenizer" or not (recorded and given):
        return False
    try:
        return os.path.samefile(recorded, given)
    except OSError:  # either is missing: they differ
        return False


@dataclasses.dataclass
class RunState:
    """Where the run in `run_dir` stands: its recorded settings ({} for a new run), the step its
    backup holds, the step its end was exported at (None if never), and the --keep-best state
    its backup holds (None without one)."""

    run: object  # the RunDirectory
    recorded: dict
    step: int
    finished_step: int | None
    best: dict | None = None
    backed_up: bool = False

    @classmethod
    def read(cls, run):
        """Reads run.json and the backup of `run` (a RunDirectory); refuses a directory whose
        checkpoints have no run.json, or no backup to resume from (never a silent restart)."""
        from keras_transformer_cli import checkpoints

        recorded = run.read_settings()
        found = checkpoints.list_checkpoints(run.checkpoints)
        written = [p for p in (run.checkpoints, run.backup) if p.is_dir() and any(p.iterdir())]
        if written and not recorded:
            raise RunError(
                f"{run} holds {written[0].name}/ but no {SETTINGS_FILE}: it is not a run of this "
                "program, or its settings are lost; choose another --run-dir"
            )
        backup = checkpoints.read_backup_index(run.backup)
        index = run.backup / checkpoints.BACKUP_INDEX
        if found and not index.is_file():
            raise RunError(
                f"{run.checkpoints} holds checkpoints up to step "
                f"{checkpoints.step_of(found[-1])} but {index} is missing, so the run cannot "
                "resume where it stopped; restore the backup, or choose another --run-dir"
            )
        finished = (recorded.get("finished") or {}).get("step")
        step = backup.get("step", 0)
        return cls(run, recorded, step, finished, backup.get("best"), bool(backup))

    def check(self, settings, steps, steps_flag, flag_of):
        """Refuses a command that this run cannot honour, naming each flag (`flag_of(setting)`,
        the flag of a setting's dotted path): other settings, or fewer `steps` (set by
        `steps_flag`) than the run has trained."""
        found = [
            f"{flag_of(field)}: {old!r} in the run, {new!r} now"
            for field, old, new in (differences(self.recorded, settings) if self.recorded else ())
            if not same_tokenizer(field, old, new)
        ]
        if found:
            vocabulary = any(line.startswith("--vocab-size") for line in found)
            raise RunError(
                ("vocabulary mismatch: " if vocabulary else "")
                + f"{self.run} holds a run with other settings ({self.run.settings_file}); "
                + "; ".join(found)
                + ". Repeat the run's own settings to continue it, or choose another --run-dir."
            )
        if self.step > steps:
            raise RunError(
                f"{steps_flag}: the run in {self.run} has trained {self.step} steps "
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
        return self.run.save_settings(record)

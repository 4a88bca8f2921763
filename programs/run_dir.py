"""A run directory and what it holds:

run.json              what a resume must agree with (config, vocabulary, data, precision, seed,
                      steps per epoch, --init-from, --keep-best, --early-stopping), the steps
                      asked for, and what the finished run wrote
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
"""

import errno
import fcntl
import json
import os
import pathlib
import zipfile

from programs import checkpoints
from programs.files import write_text_atomically

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
    import keras_transformer as kt

    try:  # config fields added since the run was written take their defaults
        settings["config"] = kt.TransformerConfig.from_dict(settings["config"]).to_dict()
    except (KeyError, TypeError, ValueError):
        pass  # compared as written, and reported field by field
    return settings


def differences(previous, current, prefix=""):
    """(field, previous value, current value) for each field whose value differs, nested dicts
    by dotted path. Top-level fields that `previous` lacks are not compared (a run written
    before they were recorded)."""
    keys = set(current) | (set(previous) if prefix else set())
    for key in sorted(keys):
        if key not in previous and not prefix:
            continue
        old, new = previous.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            yield from differences(old, new, f"{prefix}{key}.")
        elif old != new:
            yield f"{prefix}{key}", old, new


def save_settings(run_dir, settings):
    return write_text_atomically(
        pathlib.Path(run_dir) / SETTINGS_FILE, json.dumps(settings, indent=2)
    )


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


def build_model(run_dir):
    """The model that the run in `run_dir` trains, freshly initialized."""
    import keras_transformer as kt

    settings = read_settings(run_dir)
    if "config" not in settings:
        raise RunError(f"{run_dir} holds no {SETTINGS_FILE} with a model config")
    return kt.build_transformer(kt.TransformerConfig.from_dict(settings["config"]))


def averaged_model(run_dir, paths):
    """The run's model holding the element-wise mean of the step checkpoints at `paths`
    (§6.1: the paper averages the last 5 or 20)."""
    model = build_model(run_dir)
    checkpoints.assign(
        model,
        checkpoints.average_checkpoints(paths),
        source=f"the average of {len(paths)} checkpoints",
    )
    return model


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
        model = build_model(run_dir)
        checkpoints.load_checkpoint(model, path)
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

"""Checkpoints on disk: the step checkpoints of the model's weights and their average (§6.1: the
base models average the last 5 checkpoints, the big ones the last 20), the index of the exact
backup a stopped run resumes from, and the record of the best checkpoint by a validation figure
(--keep-best, --early-stopping). The Keras callbacks that write them during `fit` are
`training.checkpointing`'s: this module imports no Keras, so that a program reading checkpoints
loads no TensorFlow before its console is set up.

A step checkpoint is `step-NNNNNNN.weights.npz`: the trainable variables by their path inside
the model (`encoder/layer_0/self_attention/query_kernel`, ...), without the optimizer state,
which the backup holds (`Backup`). Loading checks that every variable is there with the
model's shape. Nothing non-finite is ever written (`check_finite`).

The best checkpoint: at every validation (each epoch's end) the figure (the validation BLEU or
chrF of the translation monitor, or the validation loss) is compared with the best so far; a
better one is written to RUN_DIR/best/step-NNNNNNN.weights.npz, apart from the rolling step
checkpoints. Its state (the best step and value, the validations since, whether the run stopped
early) is kept in the backup's index, written after the validation (`Backup` calls
`KeepBest.commit`): best.json is rewritten and older best checkpoints removed only then, so a
run killed in between resumes with the state and the best checkpoint of its backup, and
validates that epoch again.
"""

import dataclasses
import json
import math
import pathlib
import re
import zipfile

import numpy as np

from keras_transformer_cli.files import write_atomically


class RunError(ValueError):
    """A run directory that cannot be used for this command; nothing in it was changed."""


PATTERN = re.compile(r"^step-(\d+)\.weights\.npz$")


def checkpoint_path(directory, step):
    return pathlib.Path(directory) / f"step-{step:07d}.weights.npz"


def list_checkpoints(directory):
    """The checkpoints in `directory`, oldest step first."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := PATTERN.match(p.name))]
    return [path for _, path in sorted(found)]


def step_of(path):
    return int(PATTERN.match(pathlib.Path(path).name).group(1))


def weights_of(model):
    """{path: numpy array} of the model's trainable variables."""
    return {variable.path: np.asarray(variable.numpy()) for variable in model.trainable_variables}


def save_checkpoint(model, path, check=None):
    """Writes the weights to `path` atomically (a killed writer leaves no partial file), after
    `check(weights)` (which may refuse them by raising)."""
    weights = weights_of(model)
    if check is not None:
        check(weights)
    return write_atomically(path, lambda partial: np.savez(partial, **weights))


def read_checkpoint(path):
    """{name: array} of the checkpoint at `path`; ValueError naming the file when it is cut,
    corrupt or not a checkpoint (never skipped)."""
    try:
        with np.load(path) as arrays:
            return {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, AttributeError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise ValueError(
            f"{path}: not a readable checkpoint ({type(error).__name__}: {error}); it is cut or "
            "corrupt: remove it to use the ones before it"
        ) from None


def assign(model, weights, source="the checkpoint"):
    """Sets the model's trainable variables from {path: array}, naming any mismatch."""
    variables = {variable.path: variable for variable in model.trainable_variables}
    missing, unexpected = (
        sorted(set(variables) - set(weights)),
        sorted(set(weights) - set(variables)),
    )
    if missing or unexpected:
        raise ValueError(
            f"{source} does not fit this model: missing "
            f"{missing[:3]}{'...' if len(missing) > 3 else ''}, "
            f"unexpected {unexpected[:3]}{'...' if len(unexpected) > 3 else ''}"
        )
    for name, variable in variables.items():
        if tuple(variable.shape) != weights[name].shape:
            raise ValueError(
                f"{source} holds {name} with shape {weights[name].shape} but the model's is "
                f"{tuple(variable.shape)} (another vocab_size or model size?)"
            )
    for name, variable in variables.items():
        variable.assign(weights[name])


def load_checkpoint(model, path):
    assign(model, read_checkpoint(path), source=str(path))


def average_checkpoints(paths):
    """The element-wise mean of the checkpoints' weights, accumulated in float64."""
    if not paths:
        raise ValueError("no checkpoints to average")
    reference, *others = paths
    weights = read_checkpoint(reference)
    dtypes = {name: value.dtype for name, value in weights.items()}
    total = {name: value.astype(np.float64) for name, value in weights.items()}
    for path in others:
        weights = read_checkpoint(path)
        if weights.keys() != total.keys() or any(weights[n].shape != total[n].shape for n in total):
            raise ValueError(
                f"{path} and {reference} hold different variables; they are not checkpoints of one "
                "model"
            )
        for name, value in weights.items():
            total[name] += value
    return {name: (value / len(paths)).astype(dtypes[name]) for name, value in total.items()}


BACKUP_INDEX = "backup.json"  # the backup's index: {"step", "weights", "best"}


def read_backup_index(backup_dir):
    """backup.json's {"step", "weights", "best"} ({} without one; "best": the state of
    --keep-best, or None); RunError naming the file when it cannot be read (or was written
    by a version that recorded epochs, not steps)."""
    index = pathlib.Path(backup_dir) / BACKUP_INDEX
    if not index.is_file():
        return {}
    try:
        record = json.loads(index.read_text())
        if isinstance(record, dict) and "epoch" in record and "step" not in record:
            raise RunError(
                f"{index} was written by an earlier keras-transformer, which backed up "
                "epochs, not steps: finish that run with the version that started it, or "
                "start a new --run-dir"
            )
        best = record.get("best")
        if best is not None and not isinstance(best, dict):
            raise TypeError(f"'best' is {best!r}")
        return {"step": int(record["step"]), "weights": str(record["weights"]), "best": best}
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as error:
        raise RunError(
            f"{index} cannot be read ({type(error).__name__}: {error}); restore it, or "
            "choose another --run-dir"
        ) from None


def saved_step(backup_dir):
    """The step of the backup in `backup_dir` (0 without one)."""
    return read_backup_index(backup_dir).get("step", 0)


METRICS = ("bleu", "chrf", "loss")  # the figure's key in the epoch logs is "val_" + metric
RECORD = "best.json"


@dataclasses.dataclass
class BestState:
    """Where the watched figure stands: the best checkpoint's step and value (None before the
    first validation), the validations since it, and whether the run stopped early."""

    metric: str
    step: int | None = None
    value: float | None = None
    since: int = 0
    stopped: bool = False

    @classmethod
    def from_dict(cls, record, metric):
        """The state a backup recorded (`record`, None when it holds none) for `metric`."""
        return cls(**record) if record else cls(metric)

    def better(self, value):
        """Whether `value` improves on the best (higher BLEU and chrF, lower loss)."""
        if not math.isfinite(value):
            return False
        if self.value is None:
            return True
        return value < self.value if self.metric == "loss" else value > self.value

    def describe(self, value=None):
        """'validation loss 1.234' or 'validation BLEU 12.34' (of `value`, else the best)."""
        name = {"bleu": "BLEU", "chrf": "chrF"}.get(self.metric, self.metric)
        return f"validation {name} {self.value if value is None else value:.4g}"

    def to_dict(self):
        return dataclasses.asdict(self)


def read_record(directory):
    """RUN_DIR/best/best.json as a dict, {} when there is none."""
    path = pathlib.Path(directory) / RECORD
    return json.loads(path.read_text()) if path.is_file() else {}

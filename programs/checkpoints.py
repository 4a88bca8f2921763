"""Step checkpoints of the model's weights, and their average (§6.1: the base models average
the last 5 checkpoints, the big ones the last 20).

A checkpoint is `step-NNNNNNN.weights.npz`: the trainable variables by their path inside the
model (`encoder/layer_0/self_attention/query_kernel`, ...), without the optimizer state, which
the run's backup holds. Loading checks that every variable is there with the model's shape.
"""

import pathlib
import re
import zipfile

import numpy as np

from programs.files import write_atomically

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

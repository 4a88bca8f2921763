"""Checkpoints, on disk and during `fit`: the step checkpoints of the model's weights and their
average (§6.1: the base models average the last 5 checkpoints, the big ones the last 20), the
exact backup a stopped run resumes from, the best checkpoint by a validation figure
(--keep-best, --early-stopping), and the Keras callbacks that write them. Nothing non-finite is
ever written (`check_finite`). Importing it imports Keras: a program imports it once its console
is set up (`keras_transformer_cli.console.start`).

A step checkpoint is `step-NNNNNNN.weights.npz`: the trainable variables by their path inside
the model (`encoder/layer_0/self_attention/query_kernel`, ...), without the optimizer state,
which the backup holds (`Backup`). Loading checks that every variable is there with the
model's shape.

The best checkpoint: at every validation (each epoch's end) the figure (the validation BLEU or
chrF of the translation monitor, or the validation loss) is compared with the best so far; a
better one is written to RUN_DIR/best/step-NNNNNNN.weights.npz, apart from the rolling step
checkpoints. Its state (the best step and value, the validations since, whether the run stopped
early) is kept in the backup's index, written after the validation (`Backup` calls
`KeepBest.commit`): best.json is rewritten and older best checkpoints removed only then, so a
run killed in between resumes with the state and the best checkpoint of its backup, and
validates that epoch again.

The callbacks count steps from the batches `fit` reports (`StepCounter`) instead of reading the
optimizer's counter: under JAX, reading the model in the middle of an epoch copies the whole
training state back from the device (`jax_state_sync`), which stalls the step.
"""

import contextlib
import dataclasses
import json
import math
import pathlib
import re
import time
import zipfile

import keras
import numpy as np

from keras_transformer_cli.files import (
    ensure_room,
    write_atomically,
    write_text_atomically,
)
from keras_transformer_cli.run_dir import RunDirectory, RunError

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


def averaged_model(run, paths):
    """The model of `run` (a RunDirectory: its run.json's config) holding the element-wise mean
    of the step checkpoints at `paths` (§6.1: the paper averages the last 5 or 20)."""
    model = run.build_model()
    assign(model, average_checkpoints(paths), source=f"the average of {len(paths)} checkpoints")
    return model


BACKUP_INDEX = "backup.json"  # the backup's index: {"step", "weights", "best"}


def read_backup_index(backup_dir):
    """backup.json's {"step", "weights", "best"} ({} without one; "best": the state of
    --keep-best, or None); RunError naming the file when it cannot be read."""
    index = pathlib.Path(backup_dir) / BACKUP_INDEX
    if not index.is_file():
        return {}
    try:
        record = json.loads(index.read_text())
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


def current_step(model):
    """Updates applied so far (the optimizer's iteration counter)."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


class StepCounter(keras.callbacks.Callback):
    """A callback that knows the training step without reading the model: the optimizer's
    counter once when training begins, then the batches of each epoch `fit` reports (`batch`
    counts from 0 in every epoch; under steps_per_execution it is the execution's last)."""

    def __init__(self):
        super().__init__()
        self.step = self.epoch_start = 0

    def on_train_begin(self, logs=None):
        self.step = self.epoch_start = current_step(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = self.step

    def on_train_batch_end(self, batch, logs=None):
        self.step = self.epoch_start + batch + 1


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


def check_finite(model, weights, path):
    """Raises TrainingDiverged, naming the last finite checkpoint, when `weights` ({name:
    array}) hold a NaN or an infinity: `path` is then not written."""
    bad = [name for name, value in weights.items() if not np.isfinite(value).all()]
    if bad:
        run = RunDirectory(pathlib.Path(path).parents[1])  # path: RUN/{checkpoints,backup,best}/x
        latest = list_checkpoints(run.checkpoints)
        raise TrainingDiverged(
            f"the weights hold NaN or infinite values at step {current_step(model)} ({bad[0]}"
            f"{f' and {len(bad) - 1} more' if len(bad) > 1 else ''}), though the loss logged "
            f"was finite; {path} was not written. The last finite checkpoint is "
            f"{latest[-1] if latest else '(none yet)'}. Try a lower learning rate (more --set "
            "warmup_steps=...) or --mixed-precision bf16 or off instead of fp16."
        )


@contextlib.contextmanager
def process_local():
    """Keras's distribution unset for the block: what one process does alone (the chief's
    writes). Keras's saving creates variables (reference objects, to learn which attributes to
    skip); under a distribution over several processes (JAX) placing a variable is a collective
    (`jax.device_put` checks that every process passes the same value), which the processes
    that do not save never join."""
    distribution = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)


class Backup(keras.callbacks.Callback):
    """The exact training state (the model's and the optimizer's variables) for resuming a
    stopped or killed run: at the start of a new run (step 0), at the end of every epoch, and
    at the end of training, a partial epoch included (--max-minutes, --steps): written as
    `BACKUP_DIR/step-N.weights.h5`, then `BACKUP_DIR/backup.json` naming it and its step, each
    atomically and by the chief only, so that the file named is always whole. `restore` loads
    it before `fit`; the run goes on from its step. With `keep_best` (a `KeepBest`, listed
    before the backup) the index also holds its state, which is then committed."""

    def __init__(self, backup_dir, chief=True, keep_best=None):
        super().__init__()
        self.backup_dir, self.chief = pathlib.Path(backup_dir), chief
        self.keep_best = keep_best

    @classmethod
    def restore(cls, model, backup_dir):
        """Loads the backup into a compiled `model` (its optimizer is built first) and returns
        its step (0 without a backup)."""
        index = read_backup_index(backup_dir)
        if index:
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
            weights = pathlib.Path(backup_dir) / index["weights"]
            try:
                model.load_weights(weights)
            except Exception as error:  # h5py's and Keras's errors vary
                raise RunError(
                    f"{weights} cannot be read ({type(error).__name__}: "
                    f"{' '.join(str(error).split())[:200]}); the backup is cut or corrupt: "
                    "restore it, or choose another --run-dir"
                ) from None
        return index.get("step", 0)

    def save(self):
        if not self.chief:
            return
        step = current_step(self.model)
        name = f"step-{step:07d}.weights.h5"
        check_finite(self.model, weights_of(self.model), self.backup_dir / name)
        variables = [*self.model.weights, *self.model.optimizer.variables]
        size = sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in variables)
        ensure_room(self.backup_dir / name, int(size * 1.1) + 2**20)  # with h5's overhead
        with process_local():
            write_atomically(self.backup_dir / name, self.model.save_weights)
        index = {"step": step, "weights": name}
        if self.keep_best:
            index["best"] = self.keep_best.state.to_dict()
        write_text_atomically(self.backup_dir / BACKUP_INDEX, json.dumps(index))
        if self.keep_best:
            self.keep_best.commit()
        for old in self.backup_dir.glob("*.weights.h5"):
            if old.name != name:
                old.unlink()

    def on_train_begin(self, logs=None):
        if not (self.backup_dir / BACKUP_INDEX).is_file():
            self.save()  # a run killed before its first epoch ends resumes from here

    def on_epoch_end(self, epoch, logs=None):
        self.save()


class StepCheckpoints(StepCounter):
    """Writes the weights every `every` steps, whenever `minutes` of training passed since the
    last checkpoint (§6.1: the paper wrote one every 10 minutes), and at the end, keeping the
    last `keep`. `every` or `minutes` may be None."""

    def __init__(self, directory, every, keep, chief=True, minutes=None):
        super().__init__()
        self.directory, self.every, self.keep, self.chief = (
            pathlib.Path(directory),
            every,
            keep,
            chief,
        )
        self.seconds = minutes * 60 if minutes else None
        self.last_time = None  # of the last checkpoint, by time.monotonic(), with `minutes`

    def on_train_begin(self, logs=None):
        """A resumed run drops the checkpoints its killed predecessor wrote after the backup:
        they belong to steps it will train again."""
        super().on_train_begin(logs)
        if self.seconds:
            self.last_time = time.monotonic()
        if self.chief:
            for path in list_checkpoints(self.directory):
                if step_of(path) > self.step:
                    path.unlink()

    def save(self):
        if not self.chief:
            return
        path = checkpoint_path(self.directory, current_step(self.model))
        if not path.exists():
            save_checkpoint(
                self.model, path, check=lambda weights: check_finite(self.model, weights, path)
            )
        for old in list_checkpoints(self.directory)[: -self.keep]:
            old.unlink()

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        due = bool(self.every) and self.step % self.every == 0
        if self.seconds:
            now = time.monotonic()
            if due or now - self.last_time >= self.seconds:
                due, self.last_time = True, now
        if due:
            self.save()

    def on_train_end(self, logs=None):
        """The end of training (the plan's step, the time limit, a signal, early stopping all
        stop it), not the end of the first of two fits of a resume in mid-epoch."""
        if self.model.stop_training:
            self.save()


class KeepBest(keras.callbacks.Callback):
    """After each validation: keeps a better checkpoint in `directory`, counts the validations
    without improvement, and stops training after `patience` of them (None: never). `measure`
    (model -> value) gives a figure that no earlier callback put in the logs (the loss)."""

    def __init__(self, directory, state, patience=None, measure=None):
        super().__init__()
        self.directory, self.state = pathlib.Path(directory), state
        self.patience, self.measure = patience, measure

    def on_train_begin(self, logs=None):
        self.commit()  # drops what a killed predecessor wrote after its backup

    def on_epoch_end(self, epoch, logs=None):
        logs = {} if logs is None else logs
        key, state = f"val_{self.state.metric}", self.state
        if key not in logs:
            logs[key] = self.measure(self.model)
        value, step = float(logs[key]), current_step(self.model)
        if state.better(value):
            path = checkpoint_path(self.directory, step)
            save_checkpoint(
                self.model, path, check=lambda weights: check_finite(self.model, weights, path)
            )
            state.step, state.value, state.since = step, value, 0
            return
        state.since += 1
        if self.patience and state.since >= self.patience:
            state.stopped = True
            self.model.stop_training = True
            print(
                f"\nstopping early at step {step}: {state.since} validations without a better "
                f"one than the {state.describe()} of step {state.step}"
            )

    def commit(self):
        """Once the state is backed up: best.json for it, and the other best checkpoints gone."""
        state = self.state
        keep = checkpoint_path(self.directory, state.step or 0)
        for path in list_checkpoints(self.directory):
            if path != keep:
                path.unlink()
        if state.step is not None:
            record = {"step": state.step, "metric": state.metric, "value": state.value}
            write_text_atomically(
                self.directory / RECORD, json.dumps({**record, "weights": keep.name})
            )

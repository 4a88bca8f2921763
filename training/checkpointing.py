"""The Keras callbacks that checkpoint a run during `fit` (the files are
`keras_transformer_cli.checkpoints`'): the step checkpoints, the exact backup a stopped run resumes
from, and the best checkpoint by a validation figure (--keep-best, --early-stopping). Nothing
non-finite is ever written (`check_finite`).

They count steps from the batches `fit` reports (`StepCounter`) instead of reading the
optimizer's counter: under JAX, reading the model in the middle of an epoch copies the whole
training state back from the device (`jax_state_sync`), which stalls the step.
"""

import json
import math
import pathlib
import time

import keras
import numpy as np

from keras_transformer_cli.checkpoints import (
    BACKUP_INDEX,
    RECORD,
    RunError,
    checkpoint_path,
    list_checkpoints,
    read_backup_index,
    save_checkpoint,
    step_of,
    weights_of,
)
from keras_transformer_cli.files import ensure_room, write_atomically, write_text_atomically
from keras_transformer_cli.run_dir import RunDirectory


def current_step(model):
    """Updates applied so far (the optimizer's iteration counter)."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


class StepCounter(keras.callbacks.Callback):
    """A callback that knows the training step without reading the model: the optimizer's
    counter once when training begins, then the batches of each epoch `fit` reports (`batch`
    counts from 0 in every epoch; under steps_per_execution it is the execution's last)."""

    step = 0

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

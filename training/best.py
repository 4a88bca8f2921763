"""The best checkpoint by a validation figure (--keep-best), and the stop when it stops improving
(--early-stopping).

At every validation (each epoch's end) the figure (the validation BLEU or chrF of
`TranslationMonitor`, or the validation loss) is compared with the best so far; a better one is
written to RUN_DIR/best/step-NNNNNNN.weights.npz (a step checkpoint: `training.evaluate` and
`serving.export` read it), apart from the rolling step checkpoints, and never a non-finite one.
The record {step, metric, value, weights} is RUN_DIR/best/best.json.

The state (the best step and value, the validations since, whether the run stopped early) is
kept in the backup's index, written after the validation (`Backup` calls `commit`): best.json is
rewritten and older best checkpoints removed only then, so a run killed in between resumes with
the state and the best checkpoint of its backup, and validates that epoch again.
"""

import dataclasses
import json
import math
import pathlib

import keras

from programs import checkpoints
from programs.files import write_text_atomically
from training.callbacks import check_finite, current_step

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
            path = checkpoints.checkpoint_path(self.directory, step)
            checkpoints.save_checkpoint(
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
        keep = checkpoints.checkpoint_path(self.directory, state.step or 0)
        for path in checkpoints.list_checkpoints(self.directory):
            if path != keep:
                path.unlink()
        if state.step is not None:
            record = {"step": state.step, "metric": state.metric, "value": state.value}
            write_text_atomically(
                self.directory / RECORD, json.dumps({**record, "weights": keep.name})
            )


def read_record(directory):
    """RUN_DIR/best/best.json as a dict, {} when there is none."""
    path = pathlib.Path(directory) / RECORD
    return json.loads(path.read_text()) if path.is_file() else {}

"""The callbacks of a training run: step checkpoints, an exact backup, TensorBoard with the
training step as its axis, BLEU and sample translations on the validation split, a stop on NaN
that keeps the last good state, and an optional wall-clock bound."""

import json
import math
import os
import pathlib
import shutil
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from training import checkpoints
from training.evaluate import corpus_scores, translate_all


def current_step(model):
    """Updates applied so far (the optimizer's iteration counter)."""
    return int(model.optimizer.iterations.numpy())


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


class StopOnNaN(keras.callbacks.Callback):
    """TerminateOnNaN that raises with a message naming the last good state. Listed first, it
    stops the run before any later callback can save the diverged weights."""

    def __init__(self, checkpoint_dir, backup_dir):
        super().__init__()
        self.checkpoint_dir, self.backup_dir = checkpoint_dir, backup_dir

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            latest = checkpoints.list_checkpoints(self.checkpoint_dir)
            raise TrainingDiverged(
                f"the loss became {float(loss)} at step {current_step(self.model)}; training stopped "
                f"without saving this state. The last good checkpoint is "
                f"{latest[-1] if latest else '(none yet)'} and the backup in {self.backup_dir} holds "
                "the last completed epoch. Try a lower learning rate (more --set warmup_steps=...), "
                "--mixed-precision bf16 or off instead of fp16, or a smaller --tokens-per-batch."
            )


class Backup(keras.callbacks.BackupAndRestore):
    """BackupAndRestore, saved at the end of every completed epoch, written atomically and by
    the chief only. Kept after training, so the same command run again finds the run finished.
    An epoch cut short (--max-minutes) is not recorded: a resumed run redoes its steps."""

    def __init__(self, backup_dir, chief=True):
        super().__init__(
            backup_dir, save_freq="epoch", double_checkpoint=True, delete_checkpoint=False
        )
        self.chief = chief

    @staticmethod
    def saved_epoch(backup_dir):
        """The number of epochs the backup in `backup_dir` has completed (0 without one)."""
        metadata = pathlib.Path(backup_dir) / "training_metadata.json"
        return json.loads(metadata.read_text())["epoch"] if metadata.is_file() else 0

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self.model._initial_epoch:
            print(
                f"resumed from the backup in {self.backup_dir}: step {current_step(self.model)}, epoch {self.model._initial_epoch}"
            )

    def on_epoch_end(self, epoch, logs=None):
        steps = self.params.get("steps")
        if steps and current_step(self.model) % steps:
            return  # stopped within the epoch
        super().on_epoch_end(epoch, logs)

    def _save_model(self):
        if not self.chief:
            return
        os.makedirs(self.backup_dir, exist_ok=True)
        weights = pathlib.Path(self._weights_path)
        partial = weights.with_name(".partial." + weights.name)
        self.model.save_weights(str(partial), overwrite=True)
        if weights.exists():  # copied, not moved: the latest weights exist at every moment
            shutil.copyfile(weights, self._prev_weights_path)
        os.replace(partial, weights)
        metadata = pathlib.Path(self._training_metadata_path)
        partial = metadata.with_name(".partial." + metadata.name)
        partial.write_text(
            json.dumps({"epoch": self._current_epoch, "batch": self._last_batch_seen})
        )
        os.replace(partial, metadata)


class StepCheckpoints(keras.callbacks.Callback):
    """Writes the weights every `every` steps and at the end, keeping the last `keep`."""

    def __init__(self, directory, every, keep, chief=True):
        super().__init__()
        self.directory, self.every, self.keep, self.chief = (
            pathlib.Path(directory),
            every,
            keep,
            chief,
        )

    def on_train_begin(self, logs=None):
        """A resumed run drops the checkpoints its killed predecessor wrote after the backup:
        they belong to steps it will train again."""
        if self.chief:
            for path in checkpoints.list_checkpoints(self.directory):
                if checkpoints.step_of(path) > current_step(self.model):
                    path.unlink()

    def save(self):
        if not self.chief:
            return
        path = checkpoints.checkpoint_path(self.directory, current_step(self.model))
        if not path.exists():
            checkpoints.save_checkpoint(self.model, path)
        for old in checkpoints.list_checkpoints(self.directory)[: -self.keep]:
            old.unlink()

    def on_train_batch_end(self, batch, logs=None):
        if current_step(self.model) % self.every == 0:
            self.save()

    def on_train_end(self, logs=None):
        self.save()


class StepTensorBoard(keras.callbacks.TensorBoard):
    """Keras's TensorBoard, its batch-level axis continued from the restored step after a
    resume (Keras restarts it at 0 on every `fit`)."""

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self._global_train_batch = current_step(self.model)


class TimeLimit(keras.callbacks.Callback):
    """Stops training after `minutes` of wall-clock time (the run can be continued)."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = minutes * 60

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() - self.start > self.seconds:
            print(f"\nstopping: the time limit of {self.seconds / 60:g} minutes is reached")
            self.model.stop_training = True


class TranslationMonitor(keras.callbacks.Callback):
    """After every epoch: greedy translations of the validation pairs, their BLEU and chrF
    (sacrebleu, as `val_bleu` and `val_chrf` in the logs, `bleu` and `chrf` in TensorBoard), a table of the first
    `samples` as a text summary, and their encoder-decoder attention (last decoder layer,
    heads averaged) as images; TensorBoard's axis is the training step."""

    def __init__(self, tokenizer, pairs, log_dir, samples=3):
        super().__init__()
        self.tokenizer, self.pairs, self.samples = tokenizer, pairs, samples
        self.writer = tf.summary.create_file_writer(str(log_dir))

    def on_train_begin(self, logs=None):
        self.translator = kt.Translator(self.model, self.tokenizer, beam_size=1)

    def on_epoch_end(self, epoch, logs=None):
        if not self.pairs:
            return
        sources = [source for source, _ in self.pairs]
        hypotheses = translate_all(self.translator.translate, sources)
        scores = corpus_scores(hypotheses, [target for _, target in self.pairs])
        if logs is not None:
            logs["val_bleu"], logs["val_chrf"] = scores["bleu"], scores["chrf"]
        step = current_step(self.model)
        with self.writer.as_default(step=step):
            tf.summary.scalar("bleu", scores["bleu"], description=scores["bleu_text"])
            tf.summary.scalar("chrf", scores["chrf"], description=scores["chrf_text"])
            rows = [("source", "reference", "translation"), ("---",) * 3]
            rows += [(s, t, h) for (s, t), h in zip(self.pairs[: self.samples], hypotheses)]
            tf.summary.text(
                "translations",
                "\n".join("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows),
            )
            for i, (source, _) in enumerate(self.pairs[: self.samples]):
                image, legend = self.attention_image(source)
                tf.summary.image(f"attention/{i}", image, description=legend)
                tf.summary.text(f"attention_pieces/{i}", legend)
        self.writer.flush()

    def attention_image(self, sentence):
        """The last decoder layer's encoder-decoder attention for the greedy translation of
        `sentence`: rows are output pieces, columns source pieces (8x8 pixels per weight)."""
        source, translation, weights = self.translator.attention(sentence)
        grid = np.mean(weights[-1], axis=0)
        grid = np.kron(grid / max(grid.max(), 1e-9), np.ones((8, 8), "float32"))
        legend = (
            f"columns (source): {' '.join(source)}\n\nrows (translation): {' '.join(translation)}"
        )
        return grid[None, :, :, None], legend


def _cell(text):
    return text.replace("|", "\\|").replace("\n", " ")

"""The callbacks of a training run besides checkpointing (`keras_transformer_cli.checkpoints`):
TensorBoard with the training step as its axis, BLEU and sample translations on the validation
split (TensorFlow), the validation loss, a stop on NaN that keeps the last good state, a stop on
SIGTERM, at the plan's step and after a wall-clock bound.

The callbacks that act during an epoch count the steps from the batches `fit` reports
(`StepCounter`) instead of reading the optimizer's counter: under JAX, reading the model in the
middle of an epoch copies the whole training state back from the device (`jax_state_sync`), which
stalls the step. They read the model only at their own boundaries (a checkpoint, the NaN check,
the stop). With `compile(steps_per_execution=N)`, `fit` reports every N steps, so they act at
steps that are multiples of N; the training program refuses settings that need any other step.
"""

import math
import pathlib
import signal
import threading
import time

import keras
import numpy as np
from tensorboard.summary import Writer

import keras_transformer as kt
from keras_transformer.inference import signature_translator
from keras_transformer_cli import checkpoints
from keras_transformer_cli.attention_plot import attention_figure, figure_pixels
from keras_transformer_cli.checkpoints import StepCounter, TrainingDiverged, current_step

from .metrics import corpus_scores, translate_all, validation_loss


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
                f"the loss became {float(loss)} at step {current_step(self.model)}; training "
                "stopped without saving this state. The last good checkpoint is "
                f"{latest[-1] if latest else '(none yet)'} and the backup in {self.backup_dir} "
                "holds the step it names. Try a lower learning rate (more --set "
                "warmup_steps=...), --mixed-precision bf16 or off instead of fp16, or a smaller "
                "--tokens-per-batch."
            )


class StopOnSignal(keras.callbacks.Callback):
    """On SIGTERM (what clusters and preemptible machines send before they kill), training
    finishes its step and stops; the epoch's end then backs that step up (`Backup`). Installed
    for the length of `fit`, in the main thread; `received` says whether it came."""

    def __init__(self, signal_number=signal.SIGTERM):
        super().__init__()
        self.signal_number, self.received, self.previous = signal_number, False, None

    def on_train_begin(self, logs=None):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(self.signal_number, self.receive)

    def receive(self, number, frame):
        self.received = True

    def on_train_batch_end(self, batch, logs=None):
        if self.received:
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.previous is not None:
            signal.signal(self.signal_number, self.previous)


class StopAtStep(StepCounter):
    """Ends training when the optimizer has made `steps` updates, wherever an epoch stands."""

    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        if self.step >= self.steps:
            self.model.stop_training = True


class StepSummaries(StepCounter):
    """The step logs (loss, accuracy) and the learning rate every `every` steps, as `batch_loss`,
    `batch_accuracy` and `batch_learning_rate` in TensorBoard's LOG_DIR/train, on the axis of
    the training step, which a resumed run continues (Keras's TensorBoard restarts its own at 0
    on every `fit`). With `epochs` (where Keras's TensorBoard, which needs TensorFlow, is not
    used) also the epoch logs, `epoch_NAME` in LOG_DIR/train and, for `val_NAME`, in
    LOG_DIR/validation. Written with TensorBoard's own writer, which needs no TensorFlow."""

    def __init__(self, log_dir, every, epochs=False):
        super().__init__()
        self.writers = {
            name: Writer(str(pathlib.Path(log_dir) / name)) for name in ("train", "validation")
        }
        self.every, self.epochs = every, epochs

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        if self.step % self.every:
            return
        writer = self.writers["train"]
        for name, value in (logs or {}).items():
            writer.add_scalar(f"batch_{name}", float(value), self.step)
        learning_rate = self.model.optimizer.learning_rate
        writer.add_scalar("batch_learning_rate", float(learning_rate), self.step)

    def on_epoch_end(self, epoch, logs=None):
        if not self.epochs:
            return
        for name, value in (logs or {}).items():
            kind = "validation" if name.startswith("val_") else "train"
            tag = f"epoch_{name.removeprefix('val_')}"
            self.writers[kind].add_scalar(tag, float(value), self.step)

    def on_train_end(self, logs=None):
        for writer in self.writers.values():
            writer.flush()


class TimeLimit(keras.callbacks.Callback):
    """Stops training after `minutes` of wall-clock time (the run can be continued)."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = minutes * 60
        self.start = None

    def on_train_begin(self, logs=None):
        if self.start is None:  # a resume in mid-epoch fits twice: one clock for both
            self.start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() - self.start > self.seconds:
            print(f"\nstopping: the time limit of {self.seconds / 60:g} minutes is reached")
            self.model.stop_training = True


class ValidationLoss(keras.callbacks.Callback):
    """After every epoch, the references' cross-entropy per token on validation `batches` (a
    list, e.g. of binarized data), as `val_loss` in the epoch logs; any backend."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["val_loss"] = validation_loss(self.model, self.batches)


class TranslationMonitor(keras.callbacks.Callback):
    """After every epoch: greedy translations of the validation pairs, their BLEU and chrF
    (sacrebleu, as `val_bleu` and `val_chrf` in the logs, `bleu` and `chrf` in TensorBoard), a
    table of the first `samples` as a text summary, and their encoder-decoder attention (last
    decoder layer, heads averaged) as images `attention/N`, the source pieces along the x axis
    and the translation's along the y axis (`keras_transformer_cli.attention_plot`), with the
    pieces as text, `attention_pieces/N`; TensorBoard's axis is the training step."""

    def __init__(self, tokenizer, pairs, log_dir, samples=3):
        super().__init__()
        import tensorflow as tf

        self.tokenizer, self.pairs, self.samples = tokenizer, pairs, samples
        self.writer = tf.summary.create_file_writer(str(log_dir))
        self.translator = self.translate = None  # the model's, once training begins

    def on_train_begin(self, logs=None):
        translator = kt.Translator(self.model, self.tokenizer, beam_size=1)
        self.translator = translator
        self.translate = signature_translator(translator, "the model in training").translate

    def on_epoch_end(self, epoch, logs=None):
        import tensorflow as tf

        if not self.pairs:
            return
        sources = [source for source, _ in self.pairs]
        hypotheses = translate_all(self.translate, sources)
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
        `sentence`, heads averaged, drawn by `keras_transformer_cli.attention_plot`: the source
        pieces along the x axis, the translation's (eos included) along the y axis, as uint8 RGBA
        [1, H, W, 4]; and the pieces as text."""
        source, translation, weights = self.translator.attention(sentence)
        figure = attention_figure(np.mean(weights[-1], axis=0), source, translation)
        legend = (
            f"columns (source): {' '.join(source)}\n\nrows (translation): {' '.join(translation)}"
        )
        return figure_pixels(figure)[None], legend


def _cell(text):
    return text.replace("|", "\\|").replace("\n", " ")

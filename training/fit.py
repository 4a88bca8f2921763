"""Fitting a run: its model compiled in the strategy's scope, its callbacks, and `model.fit` from
the backup's step to the run's (`fit`), in whole epochs of --steps-per-epoch steps
(`epoch_spans`); a SIGTERM stops it after a backup (`Interrupted`)."""

import functools
import math

import keras

import keras_transformer as kt
from keras_transformer.data.binarized import ahead
from keras_transformer_cli import checkpoints
from keras_transformer_cli.checkpoints import (
    Backup,
    BestState,
    KeepBest,
    StepCheckpoints,
    current_step,
)

from . import callbacks, validation
from .context import log, on_tensorflow
from .metrics import progress_verbosity
from .runtime import Devices


class Interrupted(Exception):
    """Training was stopped by a signal after its state was backed up."""


def fit(context):
    """`model.fit` from the backup's step to the run's (a RunContext's); returns the trained
    model. Raises Interrupted after a SIGTERM, once the backup holds the step it stopped at."""
    model = compiled_model(context)
    with context.strategy.scope():
        step = Backup.restore(model, context.directory.backup)
        if context.initial_weights is not None:  # a new fine-tuning run
            init_from = context.plan.selection.init_from
            checkpoints.assign(model, context.initial_weights, source=f"--init-from {init_from}")
            log(f"fine-tuning from {init_from}, with a fresh optimizer and schedule")
    if step:
        log(f"resumed from the backup in {context.directory.backup} at step {step}")
    if context.chief and context.state.recorded.get("steps") != context.steps:
        context.state.save(context.settings(), context.steps)  # the resume is accepted
    model.summary(print_fn=lambda line, **_: log(line))
    stop_on_signal = callbacks.StopOnSignal()
    listed = [*run_callbacks(context), stop_on_signal]
    for epoch, epochs, steps_per_epoch in epoch_spans(step, context.steps, context.steps_per_epoch):
        if epochs is None:  # the first of two: a resume in mid-epoch
            log(
                f"epoch {epoch + 1} resumes at step {step}: {steps_per_epoch} steps to its "
                "end, then whole epochs"
            )
        model.fit(
            training_batches(context, seed=context.plan.schedule.seed + current_step(model)),
            epochs=epochs or epoch + 1,
            steps_per_epoch=steps_per_epoch,
            callbacks=listed,
            shuffle=False,
            initial_epoch=epoch,
            verbose=progress_verbosity(),
        )
        if model.stop_training:  # the time limit, a signal, the run's step, ...
            break
    log(f"training stopped at step {current_step(model)} ({keras.backend.backend()})")
    if stop_on_signal.received:
        raise Interrupted(
            f"stopped by SIGTERM after step {current_step(model)}, which the backup in "
            f"{context.directory.backup} holds; the same command continues the run"
        )
    return model


def epoch_spans(step, steps, steps_per_epoch):
    """(first epoch, epochs or None, steps per epoch) of each `fit` from `step` to `steps`:
    one, but a resume in mid-epoch first trains to that epoch's end on its own (epochs None),
    so that epoch ends (backups, validations) stay at multiples of `steps_per_epoch`."""
    epoch = step // steps_per_epoch
    spans = []
    if step % steps_per_epoch and step < steps:
        spans.append((epoch, None, min(steps_per_epoch * (epoch + 1), steps) - step))
        epoch += 1
    if epoch * steps_per_epoch < steps:
        spans.append((epoch, math.ceil(steps / steps_per_epoch), steps_per_epoch))
    return spans


def compiled_model(context):
    """The model, compiled, its optimizer built (so that a backup can be saved at step 0 and
    restored), in the strategy's scope."""
    plan, config = context.plan, context.config
    # always under JAX, which else runs the step eagerly
    jit_compile = plan.hardware.jit_compile or keras.backend.backend() == "jax"
    log(describe_setup(context, jit_compile))
    with context.strategy.scope():
        model = kt.build_transformer(config)
        model.compile(
            optimizer=kt.create_optimizer(config),
            loss=kt.LabelSmoothedCrossEntropy(config.label_smoothing, token_weights=True),
            metrics=[kt.MaskedAccuracy(name="accuracy")],
            jit_compile=jit_compile,
            accumulate_steps=plan.schedule.accumulate_steps,
            steps_per_execution=context.steps_per_execution,
        )
        model.optimizer.build(model.trainable_variables)
    return model


def describe_setup(context, jit_compile):
    """One line: the backend, the devices, how the steps run, the precision, the run directory."""
    strategy, schedule = context.strategy, context.plan.schedule
    devices = (
        str(strategy)
        if isinstance(strategy, Devices)  # Keras's distribution API (JAX), not tf.distribute
        else f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s)"
    )
    return (
        f"Keras backend {keras.backend.backend()}, {devices}, "
        + (
            f"{context.steps_per_execution} steps per execution, "
            if context.steps_per_execution > 1
            else ""
        )
        + (
            f"{schedule.accumulate_steps} micro-batches per update, "
            if schedule.accumulate_steps > 1
            else ""
        )
        + f"dtype policy {context.precision}, XLA {'on' if jit_compile else 'off'}"
        + (", deterministic ops" if schedule.deterministic else "")
        + f"; run directory {context.plan.run_dir}"
    )


def training_batches(context, seed):
    """Repeated, shuffled, bucketed batches of the global token budget, in multiples of the
    replica count times --accumulate-steps (each replica gets an equal share, cut into equal
    micro-batches), weighted for exact token normalisation; sharded by data across workers.
    A resumed run shuffles with another seed, so as not to repeat the batches it saw.
    Binarized data is batched by numpy in a background thread, ahead of the device, each
    host taking its rows of the global batch; on TensorFlow as a dataset whose batches may have
    any length (given a generator, Keras fixes the length of the first two batches if they
    agree)."""
    config, data = context.config, context.plan.data
    if context.binarized:
        batches = ahead(
            context.binarized.batches(
                "train",
                config.tokens_per_batch,
                data.max_length,
                seed=seed,
                batch_size_multiple=context.batch_multiple,
                part=getattr(context.strategy, "part", (0, 1)),
            )
        )
        if not on_tensorflow():
            return batches
        import tensorflow as tf

        ids = tf.TensorSpec([None, None], tf.int32)
        signature = ({"source": ids, "target": ids}, ids, tf.TensorSpec([None, None], tf.float32))
        return tf.data.Dataset.from_generator(lambda: batches, output_signature=signature)
    import tensorflow as tf

    from keras_transformer.data import make_batches, weigh_tokens  # TensorFlow's

    tokenizer = context.tokenizer
    batches = make_batches(
        context.dataset.read("train", shuffle_files=True, seed=seed),
        tokenizer.sampling(data.subword_sampling) if data.subword_sampling else tokenizer,
        config.tokens_per_batch,
        data.max_length,
        seed=seed,
        repeat=True,
        batch_size_multiple=context.batch_multiple,
        static_shapes=not on_tensorflow(),  # JAX compiles one XLA program per batch shape
    )
    options = tf.data.Options()
    policy = tf.data.experimental.AutoShardPolicy.DATA
    options.experimental_distribute.auto_shard_policy = policy
    return weigh_tokens(batches).with_options(options)


def run_callbacks(context):
    """StopOnNaN first (nothing after it saves a NaN state), the step checkpoints, the stop
    at the run's step; on the chief the validation (BLEU, the best checkpoint) and the step
    summaries; the backup, after the validation whose outcome it records; TensorBoard (the
    validation figures too; where TensorFlow runs Keras's, else `StepSummaries` writes the
    epochs); the time limit."""
    plan, run = context.plan, context.directory
    listed = [
        callbacks.StopOnNaN(run.checkpoints, run.backup),
        StepCheckpoints(
            run.checkpoints,
            plan.checkpoint_interval,
            plan.checkpoints.keep,
            context.chief,
            minutes=plan.checkpoints.minutes,
        ),
        callbacks.StopAtStep(context.steps),
    ]
    listed += chief_callbacks(context) if context.chief else []
    keep_best = next((c for c in listed if isinstance(c, KeepBest)), None)
    listed.append(Backup(run.backup, context.chief, keep_best))
    if context.chief and on_tensorflow():
        listed.append(keras.callbacks.TensorBoard(str(run.logs)))  # epoch summaries
    if plan.schedule.max_minutes:
        listed.append(callbacks.TimeLimit(plan.schedule.max_minutes))
    return listed


def chief_callbacks(context):
    """The chief's: the validation loss, BLEU and samples, the best checkpoint, the step
    summaries (every tenth of an epoch, at most 100 steps apart)."""
    plan, run = context.plan, context.directory
    listed = []
    if context.validation_batches:
        listed.append(callbacks.ValidationLoss(context.validation_batches))
    if plan.evaluation.bleu_sentences and not on_tensorflow():
        log(
            f"--bleu-sentences: translating needs the TensorFlow backend; under "
            f"{keras.backend.backend()} training is followed "
            + (
                "by the validation loss only"
                if context.validation_batches
                else "by no validation (binarized data gives it the validation loss)"
            )
        )
    elif context.validation_pairs:
        listed.append(
            callbacks.TranslationMonitor(
                context.tokenizer,
                context.validation_pairs[: plan.evaluation.bleu_sentences],
                run.logs / "validation",
                samples=plan.evaluation.samples,
            )
        )
    if plan.selection.keep_best:
        state = BestState.from_dict(context.state.best, plan.selection.keep_best)
        measure = None
        if plan.selection.keep_best == "loss":
            measure = functools.partial(validation.figure, context)
        listed.append(KeepBest(run.best, state, plan.selection.early_stopping, measure))
    every = max(1, min(100, context.steps_per_epoch // 10))
    every = math.ceil(every / context.steps_per_execution) * context.steps_per_execution
    listed.append(callbacks.StepSummaries(run.logs, every=every, epochs=not on_tensorflow()))
    return listed

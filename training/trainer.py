"""The Trainer: one training run from its plan to its export, around `model.fit`.

    Trainer(TrainingPlan.from_flags(args)).run()

`prepare` checks everything that can fail before anything is written (the preset, the strategy,
the data: every split the run reads is opened and counted; the run directory's state, which a
resume must agree with), `train` runs `model.fit` with the run's callbacks from the backup's
step to the plan's, and `finish` averages the last checkpoints (§6.1), scores the average on
the test split and exports it for TensorFlow Serving. The chief holds the run directory's lock
for the whole run.
"""

import contextlib
import dataclasses
import math
import pathlib
import shlex
import shutil
import sys
import tempfile

from keras_transformer_cli import console
from keras_transformer_cli.flags import DEFAULT_VOCAB_SIZE
from keras_transformer_cli.run_dir import RunDirectory, RunError

from . import finetune
from .datasets import train_tokenizer

TFDS_COUNTED = 10000  # pairs of a tfds training split counted before training (all with --epochs)
# Steps per execution under JAX (without --steps-per-execution), largest first: see
# `choose_steps_per_execution` and benchmarks/GPU.md, "The host's share of a small model's step".
AUTO_STEPS_PER_EXECUTION = (16, 8, 4, 2, 1)


class Interrupted(Exception):
    """Training was stopped by a signal after its state was backed up."""


def log(message):
    print(message, file=sys.stderr)


def on_keras_distribution(strategy):
    """Whether the run's devices are Keras's distribution API's (JAX), not tf.distribute's."""
    from .runtime import Devices

    return isinstance(strategy, Devices)


def on_tensorflow():
    """Whether Keras runs on TensorFlow, which decoding (validation BLEU, the test
    translations) and the export need; other backends train and write model.keras."""
    import keras

    return keras.backend.backend() == "tensorflow"


def average_description(steps):
    """What an average of the checkpoints of `steps` is, for run.json and the summary: the steps
    themselves while they are few, their count and range when many are averaged."""
    if len(steps) <= 5:
        return f"the average of the checkpoints of steps {', '.join(map(str, steps))}"
    return f"the average of the {len(steps)} checkpoints of steps {steps[0]} to {steps[-1]}"


class Trainer:
    """Owns one run of `plan` (a `TrainingPlan`): `run()` prepares, trains and finishes."""

    def __init__(self, plan):
        self.plan = plan
        self.directory = RunDirectory(plan.run_dir)
        self.scratch = None  # a temporary directory for a tokenizer trained before the checks
        self.initial_weights = None  # {path: array} of --init-from, for a new run

    def run(self):
        """Returns what the run's end recorded ({"step", "model", "export", "bleu", "chrf"};
        {} on workers other than the chief)."""
        with self.prepared():
            if self.state.complete(self.steps):
                return self.report_finished()
            trains = self.state.step < self.steps and not self.state.stopped_early
            model = self.train() if trains else None
            return self.finish(model) if self.chief else {}

    @contextlib.contextmanager
    def prepared(self):
        """`prepare`d, holding the run directory's lock (the chief) and a scratch directory
        until the block ends."""
        from . import runtime

        lock = self.directory.lock() if runtime.is_chief() else None
        with lock or contextlib.nullcontext(), tempfile.TemporaryDirectory() as scratch:
            self.scratch = pathlib.Path(scratch)
            self.prepare()
            yield self

    # -- before anything is written -------------------------------------------------------

    def prepare(self):
        """Checks the plan against the machine, the data and the run directory, then writes
        the tokenizer and run.json (the chief)."""
        from . import runtime
        from .datasets import Dataset

        data, hardware, schedule = self.plan.data, self.plan.hardware, self.plan.schedule
        self.config = self.build_config()
        self.strategy = runtime.create_strategy(
            hardware.strategy, hardware.tpu, hardware.cpu_devices
        )
        self.check_batch_budget()
        self.precision = runtime.set_mixed_precision(hardware.mixed_precision, self.strategy)
        self.chief = runtime.is_chief()
        self.dataset = Dataset(
            data.dataset,
            data.source_language,
            data.target_language,
            data.data_dir,
            data.download,
            data.phrases,
            data.sentence_repeats,
            data.tag_phrases,
            data.sentence_alternatives,
        )
        self.state = self.directory.state()
        self.check_binarized_tokenizer()
        self.steps_per_epoch = schedule.steps_per_epoch
        early = self.settings()
        if schedule.epochs or not self.chief:  # the steps per epoch of a pass are counted below
            early.pop("steps_per_epoch")
        self.state.check(early, schedule.steps or self.state.step, f"--steps {schedule.steps}")
        if self.state.complete(schedule.steps):
            self.steps = schedule.steps
            return
        self.seed_everything()
        self.prepare_data()

    def prepare_data(self):
        """The tokenizer, the counted splits and the run's files (the chief), or the chief's
        tokenizer (other workers). Workers meet at a barrier after the chief's part, so that
        all stop together when it fails."""
        from . import runtime

        own = self.directory.tokenizer
        failure = None
        try:
            if self.chief:
                self.tokenizer = self.load_tokenizer()
                self.count_data()
                self.steps_per_execution = self.choose_steps_per_execution()
                self.state.check(self.settings(), self.steps, self.steps_flag())
                self.initial_weights = self.read_initial_weights()
                self.write_run_files()
        except Exception as error:  # raised after the barrier, so that no worker waits
            failure = error
        if not runtime.workers_agree(self.strategy, failure is None):
            raise failure or RunError(f"the chief could not write {own}; its output says why")
        if not self.chief:
            self.follow_chief(own)
            self.steps_per_execution = self.choose_steps_per_execution()

    def build_config(self):
        """The preset with its overrides, sized to the run's vocabulary; when fine-tuning, the
        model's config (or the run's own, once recorded) with them."""
        import keras_transformer as kt

        plan, max_length = self.plan, self.plan.data.max_length
        if plan.selection.init_from:
            recorded = self.directory.read_settings().get("config")
            # the file, checked first
            base = recorded or finetune.model_config(plan.selection.init_from)
            config = finetune.fine_tuning_config(plan, base, self.vocab_size(), bool(recorded))
        else:
            config = kt.TransformerConfig.preset(
                plan.model.preset, vocab_size=self.vocab_size(), **plan.config_overrides
            )
        if max_length > config.max_length:
            raise ValueError(
                f"--max-length {max_length} exceeds the model's max_length={config.max_length}"
            )
        binarized = self.binarized()
        if binarized and max_length > binarized.max_length:
            raise ValueError(
                f"--max-length {max_length}: {binarized.directory} was binarized with "
                f"--max-length {binarized.max_length}, which dropped the longer pairs; give at "
                f"most {binarized.max_length}, or binarize again"
            )
        return config

    def binarized(self):
        """The run's binarized data (`Binarized`, opened once), or None for other datasets."""
        from keras_transformer.data.binarized import Binarized

        kind, _, directory = self.plan.data.dataset.partition(":")
        if kind != "binarized":
            return None
        if getattr(self, "_binarized", None) is None:
            self._binarized = Binarized(directory)
        return self._binarized

    def check_binarized_tokenizer(self):
        """Refuses binarized data whose ids come from another tokenizer than the run's: its own
        tokenizer.model, --tokenizer, the --init-from model's, or --vocab-size's size."""
        from keras_transformer.data.binarized import sha256_of

        binarized = self.binarized()
        if not binarized:
            return
        own, data = self.directory.tokenizer, self.plan.data
        for path, what in (
            (own if own.is_file() else None, f"the run's {own}"),
            (data.tokenizer, f"--tokenizer {data.tokenizer}"),
            (self.model_tokenizer(), f"the --init-from model's {self.model_tokenizer()}"),
        ):
            if path and sha256_of(path) != binarized.index["tokenizer"]["sha256"]:
                raise RunError(
                    f"--dataset {data.dataset} was binarized with another tokenizer than "
                    f"{what}: binarize it with that tokenizer (python -m training.binarize "
                    f"--tokenizer {path} ...), or start a new --run-dir"
                )
        if data.vocab_size and data.vocab_size != binarized.vocab_size:
            raise RunError(
                f"--vocab-size {data.vocab_size}: --dataset {data.dataset} holds ids of a "
                f"vocabulary of {binarized.vocab_size} pieces; leave --vocab-size out, or "
                "binarize again with it"
            )

    def vocab_size(self):
        """The vocabulary size of the run's tokenizer file, of --tokenizer, of the --init-from
        model's tokenizer, or the one asked for; read with sentencepiece alone, since TensorFlow
        must not start before --cpu-devices splits the CPU."""
        binarized = self.binarized()
        if binarized:  # its index says, without sentencepiece (the tokenizers are checked)
            return binarized.vocab_size
        from keras_transformer.tokenizer import checked_processor

        own = self.directory.tokenizer
        path = own if own.is_file() else self.plan.data.tokenizer or self.model_tokenizer()
        if not path:
            return self.plan.data.vocab_size or DEFAULT_VOCAB_SIZE
        try:
            return checked_processor(path.read_bytes()).get_piece_size()
        except RuntimeError as error:
            raise ValueError(f"{path}: not a sentencepiece model ({error})") from None
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    def check_batch_budget(self):
        from .runtime import in_multi_worker_mode

        plan, replicas = self.plan, self.strategy.num_replicas_in_sync
        rows = replicas * plan.schedule.accumulate_steps
        if self.config.tokens_per_batch < plan.data.max_length * rows:
            raise ValueError(
                f"--tokens-per-batch {self.config.tokens_per_batch} cannot hold one pair of "
                f"--max-length {plan.data.max_length} tokens for each of {replicas} replica(s) x "
                f"--accumulate-steps {plan.schedule.accumulate_steps}: give at least "
                f"{plan.data.max_length * rows}"
            )
        for flag, given in (
            ("--max-minutes", plan.schedule.max_minutes),
            ("--early-stopping", plan.selection.early_stopping),
        ):
            if given and in_multi_worker_mode(self.strategy):
                raise ValueError(
                    f"{flag} cannot be used with several workers: they must stop at the same step"
                )
        self.check_backend()

    def check_backend(self):
        import keras

        from keras_transformer.accumulation import BACKENDS as ACCUMULATING_BACKENDS

        backend = keras.backend.backend()
        if self.plan.schedule.accumulate_steps > 1 and backend not in ACCUMULATING_BACKENDS:
            raise ValueError(
                f"--accumulate-steps: gradient accumulation runs on TensorFlow and JAX, not on "
                f"{backend}; use --accumulate-steps 1 with a smaller --tokens-per-batch"
            )
        if self.plan.selection.keep_best and backend != "tensorflow":
            raise ValueError(f"--keep-best: validation runs on TensorFlow, not on {backend}")
        if self.plan.schedule.deterministic and backend != "tensorflow":
            raise ValueError(
                f"--deterministic sets TensorFlow's op determinism; under {backend} leave it out "
                "(XLA on CPUs is deterministic; on GPUs set "
                "XLA_FLAGS=--xla_gpu_deterministic_ops=true)"
            )

    def settings(self):
        settings = self.plan.settings(self.config, self.dataset.languages, self.precision)
        binarized = self.binarized()
        if binarized:  # the ids' tokenizer, whatever the flags
            settings["vocabulary"] = {"binarized": binarized.index["tokenizer"]["sha256"]}
        return settings | {"steps_per_epoch": self.steps_per_epoch}

    def seed_everything(self):
        import keras

        keras.utils.set_random_seed(self.plan.schedule.seed)
        if self.plan.schedule.deterministic:
            import tensorflow as tf

            tf.config.experimental.enable_op_determinism()

    def load_tokenizer(self):
        """The run's own tokenizer, else --tokenizer, else one trained now on the training split
        into a temporary directory (the run gets it once every check has passed)."""
        own = self.directory.tokenizer
        binarized = self.binarized()
        if binarized:  # its ids' tokenizer, checked against the run's; text needs TensorFlow
            self.tokenizer_file = binarized.tokenizer_path
            return self.load_tokenizer_file(binarized.tokenizer_path) if on_tensorflow() else None
        if own.is_file():
            return self.load_tokenizer_file(own)
        if self.plan.data.tokenizer or self.model_tokenizer():
            return self.load_tokenizer_file(self.plan.data.tokenizer or self.model_tokenizer())
        model_type = self.plan.data.subword_model
        log(
            f"training a vocabulary of {self.config.vocab_size} pieces ({model_type}) on the "
            f"training split of {self.dataset.spec}"
        )
        self.tokenizer_file = self.scratch / self.directory.tokenizer.name
        try:
            tokenizer = train_tokenizer(
                self.dataset, self.config.vocab_size, self.tokenizer_file, model_type
            )
        except ValueError as error:
            raise RunError(str(error)) from None
        if tokenizer.vocab_size != self.config.vocab_size:  # the corpus gave fewer pieces
            log(
                f"the vocabulary has {tokenizer.vocab_size} pieces ({self.config.vocab_size} "
                "were asked for)"
            )
            self.config = dataclasses.replace(self.config, vocab_size=tokenizer.vocab_size)
        return tokenizer

    def load_tokenizer_file(self, path):
        import keras_transformer as kt

        self.tokenizer_file = path
        return kt.SubwordTokenizer.load(path)

    def model_tokenizer(self):
        """The --init-from model's tokenizer when the run uses it (no new vocabulary), else
        None."""
        if finetune.with_model_tokenizer(self.plan):
            return finetune.model_tokenizer(self.plan.selection.init_from)
        return None

    def read_initial_weights(self):
        """The --init-from model's weights for a run without a backup (new), else None."""
        if self.plan.selection.init_from and not self.state.backed_up:
            return finetune.initial_weights(self.plan.selection.init_from, self.tokenizer)
        return None

    def count_data(self):
        """Opens and counts every split the run reads; sets the steps to train to. No training
        pair left after filtering is an error naming the counts. A tfds training split is
        counted on its first TFDS_COUNTED pairs unless --epochs needs the whole pass."""
        data, spec = self.plan.data, self.dataset.spec
        report = self.training_report()
        log(f"training data ({spec}, train split): {report}")
        if not report.kept:
            raise RunError(
                f"the train split of {spec} leaves no pair to train on: "
                + str(report).replace("\n", "; ")
                + ". Raise --max-length or check the data."
            )
        if self.plan.schedule.epochs:
            self.steps_per_epoch = report.batches
        self.validation_pairs, self.test_pairs, self.validation_batches = [], [], []
        if self.validates():
            self.validation_pairs = self.read_split(data.validation_split, "--validation-split")
        if on_tensorflow():
            self.test_pairs = self.read_split(data.test_split, "--test-split")
        binarized = self.binarized()
        if binarized and binarized.has_split(data.validation_split):
            self.validation_batches = list(
                binarized.batches(
                    data.validation_split,
                    self.config.tokens_per_batch,
                    data.max_length,
                    repeat=False,
                    shuffle=False,
                )
            )
        self.steps = self.plan.schedule.total_steps(self.steps_per_epoch)

    def training_report(self):
        """The PipelineReport of the training split, as `training_batches` reads it."""
        binarized = self.binarized()
        if binarized:
            return binarized.report(
                "train",
                self.config.tokens_per_batch,
                self.plan.data.max_length,
                self.batch_multiple,
            )
        from keras_transformer.data import pipeline_report

        pairs = self.dataset.read("train")
        if self.dataset.kind == "tfds" and not self.plan.schedule.epochs:
            pairs = pairs.take(TFDS_COUNTED)
        return pipeline_report(
            pairs, self.tokenizer, self.config.tokens_per_batch, self.plan.data.max_length
        )

    @property
    def batch_multiple(self):
        """Pairs in every full batch are a multiple of this: one share per replica, cut into
        --accumulate-steps micro-batches."""
        return self.strategy.num_replicas_in_sync * self.plan.schedule.accumulate_steps

    def steps_flag(self):
        """The flag that set the steps to train to."""
        if self.plan.schedule.epochs:
            return f"--epochs {self.plan.schedule.epochs} ({self.steps_per_epoch} steps each)"
        return f"--steps {self.steps}"

    def validates(self):
        return bool(self.plan.evaluation.bleu_sentences) and on_tensorflow()

    def read_split(self, split, flag):
        """The split's pairs; RunError naming `flag` when it cannot be read or is empty."""
        try:
            pairs = self.dataset.pairs(split)
        except Exception as error:  # a missing file, an unknown tfds split: named, not traced
            raise RunError(
                f"{flag} {split}: {self.dataset.spec} has no such split ({error})"
            ) from None
        if not pairs:
            raise RunError(f"{flag} {split}: the split of {self.dataset.spec} is empty")
        return pairs

    def write_run_files(self):
        """For a new run, the tokenizer and run.json, once every check passed. A resume
        records its steps only once its backup is restored (`train`): a resume refused until
        then changes nothing in the run directory."""
        from keras_transformer_cli.files import write_atomically

        own = self.directory.tokenizer
        if not own.is_file():
            write_atomically(own, lambda path: shutil.copyfile(self.tokenizer_file, path))
        if not self.state.recorded:
            self.state.save(self.settings(), self.steps)

    def follow_chief(self, own):
        """A worker other than the chief: the chief's tokenizer, vocabulary size, steps and
        steps per epoch, read after the barrier."""
        import keras_transformer as kt

        if not own.is_file():
            raise RunError(
                f"no {own} after the chief wrote it: is --run-dir on a file system that every "
                "worker shares?"
            )
        if not self.binarized():  # binarized data sized the config by its index
            self.tokenizer = kt.SubwordTokenizer.load(own)
            self.config = dataclasses.replace(self.config, vocab_size=self.tokenizer.vocab_size)
        self.initial_weights = self.read_initial_weights()
        recorded = self.directory.read_settings()
        self.steps_per_epoch = recorded["steps_per_epoch"]
        self.steps = self.plan.schedule.total_steps(self.steps_per_epoch)  # as the chief
        self.validation_pairs, self.test_pairs, self.validation_batches = [], [], []

    # -- training ---------------------------------------------------------------------------

    def train(self):
        """`model.fit` from the backup's step to the plan's; returns the trained model."""
        import keras

        from keras_transformer_cli import checkpoints

        from .callbacks import StopOnSignal
        from .checkpointing import Backup, current_step
        from .metrics import progress_verbosity

        model = self.compiled_model()
        with self.strategy.scope():
            step = Backup.restore(model, self.directory.backup)
            if self.initial_weights is not None:  # a new fine-tuning run
                init_from = self.plan.selection.init_from
                checkpoints.assign(model, self.initial_weights, source=f"--init-from {init_from}")
                log(f"fine-tuning from {init_from}, with a fresh optimizer and schedule")
        if step:
            log(f"resumed from the backup in {self.directory.backup} at step {step}")
        if self.chief and self.state.recorded.get("steps") != self.steps:
            self.state.save(self.settings(), self.steps)  # the resume is accepted
        model.summary(print_fn=lambda line, **_: log(line))
        stop_on_signal = StopOnSignal()
        callbacks = [*self.callbacks(), stop_on_signal]
        for epoch, epochs, steps_per_epoch in self.fits(step):
            if epochs is None:  # the first of two: a resume in mid-epoch
                log(
                    f"epoch {epoch + 1} resumes at step {step}: {steps_per_epoch} steps to its "
                    "end, then whole epochs"
                )
            model.fit(
                self.training_batches(seed=self.plan.schedule.seed + current_step(model)),
                epochs=epochs or epoch + 1,
                steps_per_epoch=steps_per_epoch,
                callbacks=callbacks,
                shuffle=False,
                initial_epoch=epoch,
                verbose=progress_verbosity(),
            )
            if model.stop_training:  # the time limit, a signal, the plan's step, ...
                break
        log(f"training stopped at step {current_step(model)} ({keras.backend.backend()})")
        if stop_on_signal.received:
            raise Interrupted(
                f"stopped by SIGTERM after step {current_step(model)}, which the backup in "
                f"{self.directory.backup} holds; the same command continues the run"
            )
        return model

    def fits(self, step):
        """(first epoch, epochs or None, steps per epoch) of each `fit` from `step` on: one,
        but a resume in mid-epoch first trains to that epoch's end on its own (epochs None),
        so that epoch ends (backups, validations) stay at multiples of --steps-per-epoch."""
        per_epoch, epoch = self.steps_per_epoch, step // self.steps_per_epoch
        fits = []
        if step % per_epoch and step < self.steps:
            fits.append((epoch, None, min(per_epoch * (epoch + 1), self.steps) - step))
            epoch += 1
        if epoch * per_epoch < self.steps:
            fits.append((epoch, math.ceil(self.steps / per_epoch), per_epoch))
        return fits

    def compiled_model(self):
        """The model, compiled, its optimizer built (so that a backup can be saved at step 0
        and restored), in the strategy's scope."""
        import keras

        import keras_transformer as kt

        plan = self.plan
        # always under JAX, which else runs the step eagerly
        jit_compile = plan.hardware.jit_compile or keras.backend.backend() == "jax"
        devices = (
            str(self.strategy)
            if on_keras_distribution(self.strategy)
            else f"{type(self.strategy).__name__} with "
            f"{self.strategy.num_replicas_in_sync} replica(s)"
        )
        log(
            f"Keras backend {keras.backend.backend()}, {devices}, "
            + (
                f"{self.steps_per_execution} steps per execution, "
                if self.steps_per_execution > 1
                else ""
            )
            + (
                f"{plan.schedule.accumulate_steps} micro-batches per update, "
                if plan.schedule.accumulate_steps > 1
                else ""
            )
            + f"dtype policy {self.precision}, XLA {'on' if jit_compile else 'off'}"
            + (", deterministic ops" if plan.schedule.deterministic else "")
            + f"; run directory {plan.run_dir}"
        )
        with self.strategy.scope():
            model = kt.build_transformer(self.config)
            model.compile(
                optimizer=kt.create_optimizer(self.config),
                loss=kt.LabelSmoothedCrossEntropy(self.config.label_smoothing, token_weights=True),
                metrics=[kt.MaskedAccuracy(name="accuracy")],
                jit_compile=jit_compile,
                accumulate_steps=plan.schedule.accumulate_steps,
                steps_per_execution=self.steps_per_execution,
            )
            model.optimizer.build(model.trainable_variables)
        return model

    def choose_steps_per_execution(self):
        """--steps-per-execution, checked against the backup's step and the steps per epoch
        counted for --epochs; else 1 on TensorFlow and under JAX the largest of
        AUTO_STEPS_PER_EXECUTION that divides every step the callbacks act at."""
        import keras

        from keras_transformer_cli.checkpoints import saved_step

        plan = self.plan
        start = saved_step(self.directory.backup)
        if plan.schedule.steps_per_execution:
            n = plan.schedule.steps_per_execution
            for what, value in (
                (f"the backup in {self.directory.backup} holds step", start),
                ("--epochs: an epoch of the training data is", self.steps_per_epoch),
            ):
                if value % n:
                    raise RunError(
                        f"--steps-per-execution {n}: {what} {value}, not a multiple of {n}; give "
                        "a --steps-per-execution that divides it"
                    )
            return n
        if keras.backend.backend() == "tensorflow":
            return 1
        acted_at = (start, self.steps, self.steps_per_epoch, plan.checkpoints.every or 0)
        return next(n for n in AUTO_STEPS_PER_EXECUTION if all(v % n == 0 for v in acted_at))

    def training_batches(self, seed):
        """Repeated, shuffled, bucketed batches of the global token budget, in multiples of the
        replica count times --accumulate-steps (each replica gets an equal share, cut into equal
        micro-batches), weighted for exact token normalisation; sharded by data across workers.
        A resumed run shuffles with another seed, so as not to repeat the batches it saw.
        Binarized data is batched by numpy in a background thread, ahead of the device, each
        host taking its rows of the global batch."""
        binarized = self.binarized()
        if binarized:
            from keras_transformer.data.binarized import ahead

            return ahead(
                binarized.batches(
                    "train",
                    self.config.tokens_per_batch,
                    self.plan.data.max_length,
                    seed=seed,
                    batch_size_multiple=self.batch_multiple,
                    part=getattr(self.strategy, "part", (0, 1)),
                )
            )
        import tensorflow as tf

        from keras_transformer.data import make_batches, weigh_tokens

        sampling = self.plan.data.subword_sampling
        batches = make_batches(
            self.dataset.read("train", shuffle_files=True, seed=seed),
            self.tokenizer.sampling(sampling) if sampling else self.tokenizer,
            self.config.tokens_per_batch,
            self.plan.data.max_length,
            seed=seed,
            repeat=True,
            batch_size_multiple=self.batch_multiple,
            static_shapes=not on_tensorflow(),  # JAX compiles one XLA program per batch shape
        )
        options = tf.data.Options()
        policy = tf.data.experimental.AutoShardPolicy.DATA
        options.experimental_distribute.auto_shard_policy = policy
        return weigh_tokens(batches).with_options(options)

    def callbacks(self):
        """StopOnNaN first (nothing after it saves a NaN state), the step checkpoints, the stop
        at the plan's step; on the chief the validation (BLEU, the best checkpoint) and the step
        summaries; the backup, after the validation whose outcome it records; TensorBoard (the
        validation figures too; where TensorFlow runs Keras's, else `StepSummaries` writes the
        epochs); the time limit."""
        import keras

        from . import callbacks, checkpointing
        from .checkpointing import KeepBest

        plan, run = self.plan, self.directory
        listed = [
            callbacks.StopOnNaN(run.checkpoints, run.backup),
            checkpointing.StepCheckpoints(
                run.checkpoints,
                plan.checkpoint_interval,
                plan.checkpoints.keep,
                self.chief,
                minutes=plan.checkpoints.minutes,
            ),
            callbacks.StopAtStep(self.steps),
        ]
        listed += self.chief_callbacks() if self.chief else []
        keep_best = next((c for c in listed if isinstance(c, KeepBest)), None)
        listed.append(checkpointing.Backup(run.backup, self.chief, keep_best))
        if self.chief and on_tensorflow():
            listed.append(keras.callbacks.TensorBoard(str(run.logs)))  # epoch summaries
        if plan.schedule.max_minutes:
            listed.append(callbacks.TimeLimit(plan.schedule.max_minutes))
        return listed

    def chief_callbacks(self):
        import keras

        from keras_transformer_cli.checkpoints import BestState

        from . import callbacks
        from .checkpointing import KeepBest

        plan, run = self.plan, self.directory
        listed = []
        if self.validation_batches:
            listed.append(callbacks.ValidationLoss(self.validation_batches))
        if plan.evaluation.bleu_sentences and not on_tensorflow():
            log(
                f"--bleu-sentences: translating needs the TensorFlow backend; under "
                f"{keras.backend.backend()} training is followed "
                + (
                    "by the validation loss only"
                    if self.validation_batches
                    else "by no validation (binarized data gives it the validation loss)"
                )
            )
        elif self.validation_pairs:
            listed.append(
                callbacks.TranslationMonitor(
                    self.tokenizer,
                    self.validation_pairs[: plan.evaluation.bleu_sentences],
                    run.logs / "validation",
                    samples=plan.evaluation.samples,
                )
            )
        if plan.selection.keep_best:
            state = BestState.from_dict(self.state.best, plan.selection.keep_best)
            measure = self.validation_figure if plan.selection.keep_best == "loss" else None
            listed.append(KeepBest(run.best, state, plan.selection.early_stopping, measure))
        every = max(1, min(100, self.steps_per_epoch // 10))
        every = math.ceil(every / self.steps_per_execution) * self.steps_per_execution
        listed.append(callbacks.StepSummaries(run.logs, every=every, epochs=not on_tensorflow()))
        return listed

    # -- the end ----------------------------------------------------------------------------

    def finish(self, model=None):
        """Writes the final model (the average of the last checkpoints, or the best) into
        model.keras; on TensorFlow scores it on the test split, exports it and records the
        finished run in run.json. Returns the record."""
        from keras_transformer_cli.files import write_atomically

        from .checkpointing import current_step

        step = current_step(model) if model is not None else self.state.step
        final, exported, validation = self.final_model()
        model_path = write_atomically(self.directory.model, final.save)
        print(f"{model_path}: {exported}")
        record = {"step": step, "model": self.directory.relative(model_path), "exported": exported}
        record["validation"] = validation
        if not on_tensorflow():  # decoding and export run on TensorFlow, from the .keras file
            print("translating and exporting need the TensorFlow backend: next,")
            for command in self.next_commands(model_path):
                print(f"  {command}")
            return record
        record |= self.score_and_export(final)
        self.state.save(self.settings(), self.steps, finished=record)
        return record

    def final_model(self):
        """(the model the run ends with, what it is, {"metric", "value"} of its validation
        figure or None): the average of the last --keep-checkpoints checkpoints (§6.1), or with
        --final-model best the --keep-best checkpoint."""
        from keras_transformer_cli import checkpoints
        from keras_transformer_cli.checkpoints import BestState, read_record
        from keras_transformer_cli.run_dir import load_model

        plan = self.plan
        if plan.selection.final_model == "best":
            record = read_record(self.directory.best)
            if not record:
                raise RunError(f"--final-model best: {self.directory.best} holds no checkpoint")
            model = load_model(self.directory.best / record["weights"])
            state = BestState(record["metric"], record["step"], record["value"])
            exported = f"the best checkpoint, step {state.step} ({state.describe()})"
            return model, exported, {"metric": state.metric, "value": state.value}
        paths = checkpoints.list_checkpoints(self.directory.checkpoints)[-plan.checkpoints.keep :]
        model = self.directory.averaged_model(paths)
        exported = average_description([checkpoints.step_of(p) for p in paths])
        if not plan.selection.keep_best:
            return model, exported, None
        value = self.validation_figure(model)
        exported += f" ({BestState(plan.selection.keep_best).describe(value)})"
        return model, exported, {"metric": plan.selection.keep_best, "value": value}

    def validation_figure(self, model):
        """The --keep-best figure of `model` on the validation pairs: greedy BLEU or chrF, or
        the references' cross-entropy."""
        import keras_transformer as kt
        from keras_transformer.data import Corpus, make_batches
        from keras_transformer.inference import signature_translator

        from .metrics import corpus_scores, translate_all, validation_loss

        pairs = self.validation_pairs[: self.plan.evaluation.bleu_sentences]
        tokenizer, keep_best = self.tokenizer, self.plan.selection.keep_best
        if keep_best == "loss":
            batches = make_batches(
                Corpus(pairs).dataset(),
                tokenizer,
                self.config.tokens_per_batch,
                self.plan.data.max_length,
            )
            return validation_loss(model, batches)
        translator = signature_translator(kt.Translator(model, tokenizer, beam_size=1), "model")
        hypotheses = translate_all(translator.translate, [s for s, _ in pairs])
        return corpus_scores(hypotheses, [t for _, t in pairs])[keep_best]

    def score_and_export(self, model):
        import keras_transformer as kt
        from keras_transformer.exports import search_name
        from keras_transformer.inference import signature_translator
        from keras_transformer_cli.versions import export_for_serving

        from . import metrics

        evaluation, split = self.plan.evaluation, self.plan.data.test_split
        translator = kt.Translator(
            model, self.tokenizer, evaluation.beam_size, evaluation.alpha, evaluation.extra_length
        )
        search = search_name(evaluation.beam_size, evaluation.alpha)
        print(f"translating the {len(self.test_pairs)} sentences of the {split} split ({search})")
        output = self.directory.translations(split)
        scores = metrics.evaluate(
            signature_translator(translator, "model").translate, self.test_pairs, output
        )
        version_dir = export_for_serving(translator, evaluation.export_dir)
        print(f"SavedModel exported to {version_dir}")
        return {
            "bleu": scores["bleu"],
            "chrf": scores["chrf"],
            "export": self.directory.relative(version_dir),
        }

    def next_commands(self, model_path):
        """The commands that score and export the model under TensorFlow."""
        corpus, evaluation = self.plan.data, self.plan.evaluation
        data = ["--dataset", corpus.dataset]
        for flag, value in (
            ("--source-language", corpus.source_language),
            ("--target-language", corpus.target_language),
            ("--data-dir", corpus.data_dir),
        ):
            data += [flag, str(value)] if value else []
        installed = console.installed_command() is not None  # kt-train: print kt-* commands
        evaluate = ["kt-evaluate"] if installed else ["python", "-m", "training.evaluate"]
        evaluate += ["--model", str(model_path), *data]
        search = ["--beam-size", str(evaluation.beam_size), "--alpha", str(evaluation.alpha)]
        search += ["--extra-length", str(evaluation.extra_length)]
        evaluate += search
        export = ["kt-export"] if installed else ["python", "-m", "serving.export"]
        export += ["--model", str(model_path), *search]
        return [
            shlex.join([*evaluate, "--split", corpus.test_split]),
            shlex.join([*export, "--export-dir", str(evaluation.export_dir)]),
        ]

    def report_finished(self):
        finished = self.state.recorded["finished"]
        early = self.state.stopped_early
        print(
            f"the run in {self.plan.run_dir} is finished at step {finished['step']}"
            + (" (stopped early)" if early else "")
            + f": model {self.directory.resolve(finished['model'])} "
            f"({finished.get('exported', 'the average')}), export "
            f"{self.directory.resolve(finished.get('export'))}; nothing to do. "
            + (
                "--early-stopping ended it: to train on, start a new run with --init-from its "
                "model."
                if early
                else "Give a larger --steps to train on."
            )
        )
        return finished

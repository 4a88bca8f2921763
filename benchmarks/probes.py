"""What the benchmark measures in fresh processes: `python -m benchmarks.probes KIND ARGS...`
prints one JSON line. A fresh process starts with nothing allocated and nothing compiled.

    peak-memory CONFIG_JSON BATCH LENGTH training|decoding POLICY
        [peak KiB before, peak KiB after 3 training steps or 3 beam searches,
         GPU:0 peak KiB or null]
    saved-model REPEATS INTRA_OP_THREADS DIRECTORY...
        {DIRECTORY: {"1": [seconds per call at batch 1], "32": [...]}} of each SavedModel's
        `serving_default`, in turn, loaded with tensorflow and tensorflow_text only (REPEATS
        calls at batch 1, a quarter as many at batch 32), TensorFlow's threads within an op set
        to INTRA_OP_THREADS (0: its default, one per core; TensorFlow Serving's
        --tensorflow_intra_op_parallelism), on PROBE_SENTENCE
    served-path DIRECTORY SENTENCES_FILE SPLIT_FILE ROUNDS profile|no-profile BATCH...
        {engine: {search: {batch: {"seconds": [per round], "translations": [...]}}}}: the
        searches of DIRECTORY/searches.json ({name: {"beam_size", "alpha"}}) exported as
        SavedModels in DIRECTORY/saved ("SavedModel", as TensorFlow Serving runs it), xla
        ("SavedModel XLA", `serving.export --jit-compile`) and before if there ("SavedModel
        before": the same model exported by another version of the library), each
        DIRECTORY/ENGINE/SLUG (`search_slug`, its `serving_default` called with tensorflow and
        tensorflow_text), and the CTranslate2 models DIRECTORY/ct2-float32 and ct2-int8
        (CTranslate2Translator with each search's beam size and alpha), each translating the
        file's sentences at each BATCH, in turn within each of ROUNDS rounds; where
        SPLIT_FILE (the whole test split) has more sentences, under "split" {engine: {search:
        translations}} of all of them at the first BATCH, once; under "overhead", the
        CTranslate2 engine's ms per sentence at batch 1 beside its translate_batch call
        alone; with `profile`, under "profile" and "profile_batch1" the step profile (below)
        of the last search's SavedModel at batch 64 and 1, and under "steps" the decoder steps
        (`decoder_steps`) of the timed sentences and of the split, in the same process
    saved-models SENTENCES_FILE ROUNDS BATCH SAVED_MODEL...
        {SAVED_MODEL: {"ms_per_sentence": the best round, "same_as_first": translations equal
        to the first SavedModel's, "sentences": n}}: SavedModels (`serving_default`)
        translating the file at BATCH in turn in one process, as two exports of one model
        (before and after a change) are best compared on a machine whose speed moves
    step-profile SAVED_MODEL SENTENCES_FILE BATCH
        {"seconds": wall time, "sentences": n, "batch": BATCH, "steps": decoding steps, "ops":
        {op type: seconds}, "outside_loop": op seconds outside the search's loop}:
        TensorFlow's profiler over the SavedModel translating the file at BATCH (after a
        warm-up call)
    export CONFIG_JSON WEIGHTS TOKENIZER SEARCHES_JSON OUTPUT_DIR
        {"exported": [directories], "library": where keras_transformer was imported from}: the
        model of CONFIG_JSON ({"config": ..., "defaults": ...}: its fields, and each field's
        default, so that a field the library does not know is dropped only at its default) with
        the weights file WEIGHTS, exported with each search of SEARCHES_JSON as
        OUTPUT_DIR/SLUG by the keras_transformer first on the path: run from a directory
        holding another version of it (bench's --before-code), it is that version's export
    export-caches MODEL_KERAS TOKENIZER OUTPUT_DIR
        {"exported": [directories]}: the model (rebuilt in float32) exported with beam 4 three
        ways, OUTPUT_DIR/growing (the Translator's cache, growing a position a step),
        preallocated-bound (preallocated to each batch's bound, source length + 50) and
        preallocated-max (to the model's max_length), for saved-models to compare
    training-step CONFIG_JSON BATCH LENGTH REPEATS
        [seconds of each training step after 2 warm-up steps] under the Keras backend of
        KERAS_BACKEND (compiled: XLA under JAX, a tf.function without XLA under TensorFlow)
    model-throughput CONFIG_JSON BATCH LENGTH STEPS REPEATS ours|ours-explicit|kerashub POLICY
        {"seconds_per_step": [per repeat], "first_seconds": the first step (compilation),
        "peak_bytes": the device allocator's peak or null, "params": n}: our model (with
        ours-explicit, attention never through keras.ops.dot_product_attention) or the
        KerasHub-layers peer trained by `fit` on one random batch under the dtype POLICY,
        STEPS steps per execution (one host sync per repeat: the device's own pace); needs
        no TensorFlow under JAX
    loss-step CONFIG_JSON BATCH LENGTH REPEATS
        {"ms": {way: median ms}, "speedup": differentiated / library, "first_loss",
        "last_loss", "first_accuracy", "last_accuracy": {way: that step's}}: a training step
        (train_on_batch, TensorFlow without XLA, the training program's host allocator) of two
        models of CONFIG_JSON with the same initial weights on one batch (every other pair
        padded after two thirds of its length), in turn, REPEATS times after 3 warm-up steps:
        "library" (kt.LabelSmoothedCrossEntropy, whose gradient under TensorFlow is written
        out, and kt.MaskedAccuracy) and "differentiated" (the code before: the loss's formula
        differentiated by TensorFlow, and MaskedAccuracy by Keras's argmax)
    several PROBES_JSON
        [the answer of each probe of PROBES_JSON ([[KIND, ARGUMENT...], ...])]: the probes in
        turn in one process (benchmarks.gpu's --quick: its models, one process start)
    loss-share CONFIG_JSON BATCH LENGTH REPEATS POLICY
        {"device": ..., "ms": {loss: median ms}, "share": {loss: its share of the step}} of a
        jitted jax.value_and_grad training step (KERAS_BACKEND=jax; forward and backward, no
        update) under the dtype policy POLICY with each loss in turn, REPEATS times after a
        warm-up: "dense" (log_softmax against a [B, T, V] smoothed target, the loss before it
        became reductions), "library" (kt.LabelSmoothedCrossEntropy) and "mean of logits" (no
        loss: the rest of the step); a loss's share is 1 - ms["mean of logits"] / its ms
"""

import collections
import json
import pathlib
import re
import sys
import time

PROBE_SENTENCE = "Das ist ein kleiner Test, nicht mehr."  # what the SavedModel translates


def peak_kib():
    """This process's peak resident memory; VmHWM starts afresh at exec (ru_maxrss would
    include the parent's pages)."""
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\s+(\d+) kB", status.read()).group(1))


def training_batch(config, batch, length):
    """Random (inputs, labels) of one training step: `batch` pairs of `length` tokens a side."""
    import numpy as np

    rng = np.random.default_rng(0)
    source = rng.integers(4, config.vocab_size, (batch, length)).astype("int32")
    target = rng.integers(4, config.vocab_size, (batch, length + 1)).astype("int32")
    return {"source": source, "target": target[:, :-1]}, target[:, 1:]


def training_step(config_json, batch, length, repeats):
    import keras

    import keras_transformer as kt

    config = kt.TransformerConfig.from_dict(json.loads(config_json))
    inputs, labels = training_batch(config, int(batch), int(length))
    model = kt.build_transformer(config)
    model.compile(
        optimizer=kt.create_optimizer(config),
        loss=kt.LabelSmoothedCrossEntropy(),
        jit_compile=keras.backend.backend() == "jax",
    )
    times = []
    for step in range(2 + int(repeats)):
        start = time.perf_counter()
        model.train_on_batch(inputs, labels)
        if step >= 2:
            times.append(time.perf_counter() - start)
    return times


def loss_share(config_json, batch, length, repeats, policy):
    import jax
    import keras
    import numpy as np
    from keras import ops

    import keras_transformer as kt
    from keras_transformer.ids import PAD_ID

    if keras.backend.backend() != "jax":
        raise SystemExit(f"loss-share runs under KERAS_BACKEND=jax, not {keras.backend.backend()}")
    keras.config.set_dtype_policy(policy)
    config = kt.TransformerConfig.from_dict(json.loads(config_json))
    inputs, labels = training_batch(config, int(batch), int(length))
    model = kt.build_transformer(config)

    class DenseTarget(kt.LabelSmoothedCrossEntropy):
        def token_losses(self, y_true, y_pred):
            labels = ops.cast(y_true, "int32")
            log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
            vocab_size, eps = y_pred.shape[-1], self.label_smoothing
            smoothed = ops.one_hot(labels, vocab_size) * (1.0 - eps) + eps / vocab_size
            return -ops.sum(smoothed * log_probs, axis=-1), ops.not_equal(labels, PAD_ID)

    losses = {
        "dense": DenseTarget(config.label_smoothing),
        "library": kt.LabelSmoothedCrossEntropy(config.label_smoothing),
        "mean of logits": lambda y_true, y_pred: ops.mean(y_pred),
    }

    def step(loss):
        def value(trainable, non_trainable, inputs, labels):
            logits, _ = model.stateless_call(trainable, non_trainable, inputs, training=True)
            return loss(labels, logits)

        return jax.jit(jax.value_and_grad(value))

    steps = {name: step(loss) for name, loss in losses.items()}
    variables = [
        [v.value for v in vs] for vs in (model.trainable_variables, model.non_trainable_variables)
    ]
    inputs, labels = jax.device_put((inputs, labels))
    times = {name: [] for name in steps}
    for repeat in range(1 + int(repeats)):  # the first: compiling and warming up
        for name, function in steps.items():
            start = time.perf_counter()
            jax.block_until_ready(function(*variables, inputs, labels))
            if repeat:
                times[name].append(1000 * (time.perf_counter() - start))
    ms = {name: float(np.median(values)) for name, values in times.items()}
    return {
        "device": jax.devices()[0].device_kind,
        "ms": ms,
        "share": {name: 1 - ms["mean of logits"] / ms[name] for name in ("dense", "library")},
    }


def the_loss_and_accuracy_before():
    """The loss's formula differentiated by TensorFlow, and MaskedAccuracy by Keras's argmax."""
    from keras import ops

    import keras_transformer as kt
    from keras_transformer import losses
    from keras_transformer.ids import PAD_ID

    class Differentiated(kt.LabelSmoothedCrossEntropy):
        def token_losses(self, y_true, y_pred):
            labels = ops.cast(y_true, "int32")
            logits = ops.cast(y_pred, "float32")
            token_losses = losses._reduced_token_losses(labels, logits, self.label_smoothing)
            return token_losses, ops.not_equal(labels, PAD_ID)

    class ArgmaxAccuracy(kt.MaskedAccuracy):
        def update_state(self, y_true, y_pred, sample_weight=None):
            labels = ops.cast(y_true, "int32")
            real = ops.not_equal(labels, PAD_ID)
            predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
            right = ops.logical_and(real, ops.equal(predicted, labels))
            self.correct.assign_add(ops.sum(ops.cast(right, "float32")))
            self.total.assign_add(ops.sum(ops.cast(real, "float32")))

    return Differentiated, ArgmaxAccuracy


def loss_step(config_json, batch, length, repeats):
    import os

    # the training program's host allocator (keras_transformer_cli.console.start), set before
    # TensorFlow starts
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    import keras
    import numpy as np

    import keras_transformer as kt
    from keras_transformer.ids import PAD_ID

    if keras.backend.backend() != "tensorflow":
        raise SystemExit(f"loss-step runs under TensorFlow, not {keras.backend.backend()}")
    config = kt.TransformerConfig.from_dict(json.loads(config_json))
    inputs, labels = training_batch(config, int(batch), int(length))
    shorter = np.arange(len(labels)) % 2 == 1  # every other pair padded after 2/3 of its length
    for ids in (inputs["source"], inputs["target"], labels):
        ids[shorter, 2 * ids.shape[1] // 3 :] = PAD_ID

    Differentiated, ArgmaxAccuracy = the_loss_and_accuracy_before()
    ways = {
        "library": (kt.LabelSmoothedCrossEntropy, kt.MaskedAccuracy),
        "differentiated": (Differentiated, ArgmaxAccuracy),
    }
    models = {}
    for name, (loss, accuracy) in ways.items():
        models[name] = kt.build_transformer(config)
        models[name].compile(
            optimizer=kt.create_optimizer(config),
            loss=loss(config.label_smoothing),
            metrics=[accuracy(name="accuracy")],
            jit_compile=False,
        )
    models["differentiated"].set_weights(models["library"].get_weights())
    times, logs = {name: [] for name in models}, {name: [] for name in models}
    for repeat in range(3 + int(repeats)):
        for name, model in models.items():
            start = time.perf_counter()
            logs[name].append(model.train_on_batch(inputs, labels, return_dict=True))
            if repeat >= 3:
                times[name].append(1000 * (time.perf_counter() - start))
    ms = {name: float(np.median(values)) for name, values in times.items()}
    return {
        "ms": ms,
        "speedup": ms["differentiated"] / ms["library"],
        **{
            f"{end}_{what}": {name: float(logs[name][at][what]) for name in models}
            for end, at in (("first", 0), ("last", -1))
            for what in ("loss", "accuracy")
        },
    }


def model_throughput(config_json, batch, length, steps, repeats, which, policy):
    import keras

    import keras_transformer as kt
    from benchmarks.peer import KerasHubTransformer

    keras.config.set_dtype_policy(policy)
    config = kt.TransformerConfig.from_dict(json.loads(config_json))
    inputs, labels = training_batch(config, int(batch), int(length))
    steps, jit = int(steps), keras.backend.backend() != "tensorflow"
    if which == "ours-explicit":  # Eq. 1 written out everywhere: the fused kernel's A/B
        from keras_transformer.layers import attention

        attention.FUSED_BACKENDS = ()
    if which.startswith("ours"):
        model = kt.build_transformer(config)
        loss = kt.LabelSmoothedCrossEntropy(config.label_smoothing)
    else:
        model = KerasHubTransformer(config).model
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    model.compile(
        optimizer=kt.create_optimizer(config), loss=loss, jit_compile=jit, steps_per_execution=steps
    )
    batch_on_device = keras.tree.map_structure(keras.ops.convert_to_tensor, (inputs, labels))

    def repeated():
        while True:
            yield batch_on_device

    start = time.perf_counter()
    model.fit(repeated(), steps_per_epoch=steps, epochs=1, verbose=0)  # compiles, then steps
    first = time.perf_counter() - start
    seconds = []
    for _ in range(int(repeats)):
        start = time.perf_counter()
        model.fit(repeated(), steps_per_epoch=steps, epochs=1, verbose=0)
        seconds.append((time.perf_counter() - start) / steps)
    return {
        "seconds_per_step": seconds,
        "first_seconds": first - min(seconds) * (steps - 1),
        "peak_bytes": device_peak_bytes(),
        "params": model.count_params(),
    }


def device_peak_bytes():
    """The peak of the first device's allocator under JAX (None on a CPU, which keeps no such
    count, and under other backends)."""
    import keras

    if keras.backend.backend() != "jax":
        return None
    import jax

    stats = jax.local_devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def peak_memory(config_json, batch, length, what, policy):
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt

    config = kt.TransformerConfig.from_dict(json.loads(config_json))
    batch, length = int(batch), int(length)
    keras.config.set_dtype_policy(policy)
    model = kt.build_transformer(config)
    source = (
        np.random.default_rng(0).integers(4, config.vocab_size, (batch, length)).astype("int32")
    )
    before = peak_kib()
    if what == "training":
        model.compile(
            optimizer=kt.create_optimizer(config),
            loss=kt.LabelSmoothedCrossEntropy(),
            jit_compile=False,
        )
        for _ in range(3):
            model.train_on_batch({"source": source, "target": source}, source)
    else:
        for _ in range(3):
            kt.beam_search(model, source, beam_size=4, max_length=64)
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    return [
        before,
        peak_kib(),
        tf.config.experimental.get_memory_info("GPU:0")["peak"] // 1024 if on_gpu else None,
    ]


def saved_model(repeats, intra_op_threads, *directories):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    tf.config.threading.set_intra_op_parallelism_threads(int(intra_op_threads))
    sentences = [PROBE_SENTENCE] * 32
    answers = {}
    for directory in directories:
        translate = tf.saved_model.load(directory).signatures["serving_default"]
        answers[directory] = {}
        for batch in (1, 32):
            batch_sentences = tf.constant(sentences[:batch])
            for _ in range(2):
                translate(sentences=batch_sentences)
            times = []
            for _ in range(int(repeats) if batch == 1 else max(1, int(repeats) // 4)):
                start = time.perf_counter()
                translate(sentences=batch_sentences)["translation"].numpy()
                times.append(time.perf_counter() - start)
            answers[directory][batch] = times
    return answers


# The SavedModels of the served path: DIRECTORY/ENGINE_DIRECTORY/SLUG.
SAVED_ENGINES = {"SavedModel": "saved", "SavedModel XLA": "xla", "SavedModel before": "before"}


def search_slug(name):
    """A search's directory name: "beam 4, alpha 1.2" -> "beam4-alpha1.2"."""
    return "-".join(part.replace(" ", "") for part in name.split(", "))


def read_searches(path):
    """{name: {"beam_size", "alpha"}}: the searches.json the bench wrote."""
    return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))


def read_sentences(path):
    from keras_transformer.data.corpus import read_lines

    return read_lines(path)


def saved_translator(directory):
    """A function of a list of sentences: the SavedModel's `serving_default` translations."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    signature = tf.saved_model.load(str(directory)).signatures["serving_default"]
    return lambda batch: [
        t.decode() for t in signature(sentences=tf.constant(batch))["translation"].numpy()
    ]


def served_engines(directory):
    """{engine: {search: translate(list of sentences) -> list of translations}}."""
    from keras_transformer.ctranslate2_translator import CTranslate2Translator

    searches = read_searches(f"{directory}/searches.json")

    def ctranslate2(kind, search):
        engine = CTranslate2Translator(f"{directory}/ct2-{kind}", **search)
        return lambda batch: [translation.text for translation in engine.translate(batch)]

    engines = {
        engine: {
            name: saved_translator(f"{directory}/{within}/{search_slug(name)}") for name in searches
        }
        for engine, within in SAVED_ENGINES.items()
        if pathlib.Path(directory, within).is_dir()  # before: bench's --before-code
    }
    for kind in ("float32", "int8"):
        engines[f"CTranslate2 {kind}"] = {
            name: ctranslate2(kind, search) for name, search in searches.items()
        }
    return engines


def engine_overhead(directory, sentences, rounds):
    """ms per sentence at batch 1 (beam 4) of our CTranslate2 engine (float32) and of its
    `translate_batch` call alone on pieces tokenized beforehand (the best of `rounds`): the
    difference is the engine's own work (tokenizing, GNMT's rescoring, detokenizing)."""
    from keras_transformer.ctranslate2_translator import CTranslate2Translator

    engine = CTranslate2Translator(f"{directory}/ct2-float32", beam_size=4)
    pieces, _ = engine.tokenize(sentences)
    calls = {
        "engine": lambda i: engine.translate(sentences[i : i + 1]),
        "translate_batch": lambda i: engine.translator.translate_batch(
            pieces[i : i + 1],
            beam_size=4,
            num_hypotheses=4,
            length_penalty=0.0,
            return_scores=True,
            max_input_length=0,
            max_decoding_length=min(len(pieces[i]) + 1 + engine.extra_length, engine.max_length),
        ),
    }
    best = {}
    for _ in range(int(rounds)):
        for name, call in calls.items():
            start = time.perf_counter()
            for i in range(len(sentences)):
                call(i)
            seconds = 1000 * (time.perf_counter() - start) / len(sentences)
            best[name] = min(best.get(name, seconds), seconds)
    return best


def served_path(directory, sentences_file, split_file, rounds, profile, *batches):
    sentences, split = read_sentences(sentences_file), read_sentences(split_file)
    engines = served_engines(directory)
    searches = read_searches(f"{directory}/searches.json")
    answers = {engine: {search: {} for search in searches} for engine in engines}
    for batch in map(int, batches):
        for search in searches:
            translators = {engine: translate[search] for engine, translate in engines.items()}
            for engine, figures in in_turn(translators, sentences, batch, rounds).items():
                answers[engine][search][str(batch)] = figures
    if split != sentences:
        answers["split"] = split_translations(engines, split, int(batches[0]))
    answers["overhead"] = engine_overhead(directory, sentences, rounds)
    if profile == "profile":
        name = list(searches)[-1]
        profiled = f"{directory}/saved/{search_slug(name)}"
        answers["profile"] = dict(step_profile(profiled, sentences_file, 64), search=name)
        answers["profile_batch1"] = dict(step_profile(profiled, sentences_file, 1), search=name)
        answers["steps"] = decoder_steps(directory, split, searches, timed=len(sentences))
    return answers


def split_translations(engines, sentences, batch):
    """{engine: {search: translations}} of every engine translating all `sentences` at
    `batch` once (not timed): what the timed sentences alone would not show."""
    return {
        engine: {
            search: [
                t
                for i in range(0, len(sentences), batch)
                for t in translate(sentences[i : i + batch])
            ]
            for search, translate in searches.items()
        }
        for engine, searches in engines.items()
    }


def decoder_steps(directory, sentences, searches, batch=64, timed=None):
    """{"batch": batch, "searches": {search: {rule: {"per_sentence": decoder steps a sentence,
    "per_batch_row": the loop's steps times the sentences of each call (what a search
    computing every sentence until its batch ends, as under XLA, runs), "same": translations
    equal to the exact stop's}}}} of the served model (DIRECTORY/served.keras) translating the
    first `timed` of `sentences` (default: all) at `batch` in this process with each beam
    search of `searches` stopped by our rule ("exact") and by CTranslate2's ("top beam",
    `TopBeamStop`); greedy search has the exact rule only (both stop at eos). Where `timed`
    leaves sentences out, "split" and "split_sentences" give the same figures over all of
    them, the rest translated after the timed ones."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt

    model = keras.saving.load_model(f"{directory}/served.keras")
    tokenizer = kt.SubwordTokenizer.load(f"{directory}/tokenizer.model")
    sentence_steps, loop_steps = tf.Variable(0, dtype=tf.int64), tf.Variable(0, dtype=tf.int64)
    rules = dict(zip(("exact", "top beam"), beam_classes()))
    timed = len(sentences) if timed is None else int(timed)
    starts = [*range(0, timed, batch), *range(timed, len(sentences), batch)]
    ends = [min(start + batch, timed if start < timed else len(sentences)) for start in starts]
    first = len(range(0, timed, batch))  # the calls of the timed sentences

    def counted_call(translator, chosen):
        sentence_steps.assign(0)
        loop_steps.assign(0)
        translations = translator.translate(tf.constant(chosen))["translation"].numpy()
        steps = int(sentence_steps.numpy()), int(loop_steps.numpy())
        return (*steps, [t.decode() for t in translations])

    answers = {}
    for name, search in searches.items():
        calls = {}  # rule: [(sentence steps, loop steps, translations) of each call]
        for rule, kind in list(rules.items())[: 1 if search["beam_size"] == 1 else None]:
            counted = kind(**search, sentence_steps=sentence_steps, loop_steps=loop_steps)
            translator = kt.Translator(model, tokenizer, search=counted)
            calls[rule] = [counted_call(translator, sentences[s:e]) for s, e in zip(starts, ends)]
        answers[name] = {}
        for rule, made in calls.items():
            answers[name][rule] = step_figures(made[:first], calls["exact"][:first])
            if timed < len(sentences):
                answers[name][rule]["split"] = step_figures(made, calls["exact"])
    split = {"split_sentences": len(sentences)} if timed < len(sentences) else {}
    return {"batch": batch, "searches": answers, **split}


def step_figures(calls, exact):
    """{"per_sentence", "per_batch_row", "same"} (`decoder_steps`) of a stopping rule's calls,
    [(sentence steps, loop steps, translations)], beside the exact rule's."""
    made = [t for *_, translations in calls for t in translations]
    reference = [t for *_, translations in exact for t in translations]
    return {
        "per_sentence": sum(steps for steps, *_ in calls) / len(made),
        "per_batch_row": sum(loop * len(ts) for _, loop, ts in calls) / len(made),
        "same": same(made, reference),
    }


def same(translations, reference):
    """How many of `translations` equal `reference`'s, in order."""
    return sum(a == b for a, b in zip(translations, reference, strict=True))


def beam_classes():
    """The classes CountedBeam and TopBeamStop, defined on first use (the library imports
    TensorFlow, which the probes run on a GPU machine without it do not need)."""
    import dataclasses
    import typing

    import tensorflow as tf

    from keras_transformer.decoding import Beam
    from keras_transformer.decoding.search import NEG_INF

    @dataclasses.dataclass(frozen=True, eq=False)
    class CountedBeam(Beam):
        """Beam search that adds the sentences of each step to `sentence_steps` and each step
        to `loop_steps` (tf.Variables)."""

        sentence_steps: typing.Any = None
        loop_steps: typing.Any = None

        def advance_logits(self, hypotheses, scores, t, limits):
            counted = [
                self.sentence_steps.assign_add(tf.size(limits, tf.int64)),
                self.loop_steps.assign_add(1),
            ]
            with tf.control_dependencies(counted):
                return self.advance(hypotheses, scores, t, limits)

        def advance(self, hypotheses, scores, t, limits):
            return super().advance_logits(hypotheses, scores, t, limits)

    @dataclasses.dataclass(frozen=True, eq=False)
    class TopBeamStop(CountedBeam):
        """Beam search stopped by CTranslate2's rule (its decoding.cc with length penalty 0, as
        our CTranslate2 engine calls it): a sentence ends once the best of its candidates has
        ended at some step and K hypotheses have finished, whether or not an alive one could
        still win under GNMT's penalty."""

        def start(self, batch_size, max_length):
            return super().start(batch_size, max_length), tf.zeros([batch_size], tf.bool)

        def advance(self, state, scores, t, limits):
            hypotheses, top_ended = state
            extensions = self.extend(hypotheses, *scores.per_sentence(self.beam_size), t, limits)
            kept, last, parents = self.keep(hypotheses, extensions, t, limits)
            top_ended = top_ended | extensions.ending[:, 0]  # the candidates are best first
            full = kept.finished_scores[:, -1] > NEG_INF / 2
            none_alive = tf.reduce_max(kept.alive_log_probs, axis=1) <= NEG_INF / 2
            done = hypotheses.done | (top_ended & full) | none_alive
            return (kept._replace(done=done), top_ended), tf.reshape(last, [-1]), parents

        def ended(self, state):
            return state[0].done

        def outputs(self, state):
            return super().outputs(state[0])

    return CountedBeam, TopBeamStop


def in_turn(translators, sentences, batch, rounds):
    """{name: {"seconds": [per round], "translations": [...]}} of `translators` (name: a
    function of a list of sentences) translating `sentences` at `batch`, in turn within each of
    `rounds` rounds, after a warm-up call each."""
    for translate in translators.values():
        translate(sentences[:batch])
    answers = {name: {"seconds": []} for name in translators}
    for _ in range(int(rounds)):
        for name, translate in translators.items():
            start, translations = time.perf_counter(), []
            for i in range(0, len(sentences), batch):
                translations += translate(sentences[i : i + batch])
            answers[name]["seconds"].append(time.perf_counter() - start)
            answers[name]["translations"] = translations
    return answers


def saved_models(sentences_file, rounds, batch, *directories):
    sentences = read_sentences(sentences_file)
    translators = {d: saved_translator(d) for d in directories}
    answers = in_turn(translators, sentences, int(batch), rounds)
    reference = answers[directories[0]]["translations"]
    return {
        directory: {
            "ms_per_sentence": 1000 * min(figures["seconds"]) / len(sentences),
            "same_as_first": same(figures["translations"], reference),
            "sentences": len(sentences),
        }
        for directory, figures in answers.items()
    }


def step_profile(saved_model, sentences_file, batch):
    import tempfile

    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    sentences, batch = read_sentences(sentences_file), int(batch)
    signature = tf.saved_model.load(saved_model).signatures["serving_default"]
    signature(sentences=tf.constant(sentences[:batch]))  # warm-up
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        for i in range(0, len(sentences), batch):
            signature(sentences=tf.constant(sentences[i : i + batch]))["translation"].numpy()
        seconds = time.perf_counter() - start
        tf.profiler.experimental.stop()
        (trace,) = pathlib.Path(logdir).glob("**/*.xplane.pb")
        space = xplane_pb2.XSpace.FromString(trace.read_bytes())
    ops, steps, outside = collections.Counter(), 0, 0.0
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                match = OP_EVENT.fullmatch(plane.event_metadata[event.metadata_id].name)
                if match:  # "scope/name:OpType" (not the executor's own events)
                    ops[match.group(2)] += event.duration_ps * 1e-12
                    in_loop = "/while/" in match.group(1)
                    # one log normaliser (tf.reduce_logsumexp) a step: its Log op
                    steps += in_loop and match.group(2) == "Log" and NORMALISER in match.group(1)
                    outside += 0 if in_loop else event.duration_ps * 1e-12
    return {
        "seconds": seconds,
        "sentences": len(sentences),
        "batch": batch,
        "steps": steps,
        "ops": ops,
        "outside_loop": outside,  # op seconds outside the search's loop (encoder, alignment...)
    }


def export_searches(model, tokenizer, searches, directory, jit_compile=False):
    """The Translator of each of `searches` ({name: {"beam_size", "alpha"}}) saved as
    `directory`/SLUG (`search_slug`), its search compiled by XLA with `jit_compile`."""
    import keras_transformer as kt

    compiled = {"jit_compile": True} if jit_compile else {}  # an earlier library lacks the flag
    return [
        str(
            kt.Translator(model, tokenizer, **search, **compiled).save(
                f"{directory}/{search_slug(name)}"
            )
        )
        for name, search in searches.items()
    ]


def export(config_json, weights, tokenizer_path, searches_json, output_dir):
    import dataclasses

    import numpy as np

    import keras_transformer as kt

    given = json.loads(pathlib.Path(config_json).read_text(encoding="utf-8"))
    known = {field.name for field in dataclasses.fields(kt.TransformerConfig)}
    unknown = {
        name: value
        for name, value in given["config"].items()
        if name not in known and value != given["defaults"].get(name, not value)
    }
    if unknown:
        raise ValueError(f"{kt.__file__} has no config field for {unknown}")
    config = kt.TransformerConfig(**{k: v for k, v in given["config"].items() if k in known})
    model = kt.build_transformer(config)
    model({"source": np.ones((1, 3), "int32"), "target": np.ones((1, 3), "int32")})
    model.load_weights(weights)
    tokenizer = kt.SubwordTokenizer.load(tokenizer_path)
    return {
        "exported": export_searches(model, tokenizer, read_searches(searches_json), output_dir),
        "library": str(pathlib.Path(kt.__file__).parent),
    }


def export_caches(model_path, tokenizer_path, output_dir):
    import keras
    import numpy as np

    import keras_transformer as kt
    from keras_transformer.decoding import search_model

    saved = keras.saving.load_model(model_path)
    model = kt.build_transformer(saved.config)  # float32, whatever the saved policy
    model({"source": np.ones((1, 3), "int32"), "target": np.ones((1, 3), "int32")})
    model.set_weights([np.asarray(w, "float32") for w in saved.get_weights()])
    tokenizer = kt.SubwordTokenizer.load(tokenizer_path)

    class Preallocated(kt.Translator):
        def __init__(self, bound):
            super().__init__(model, tokenizer)
            self.bound = bound

        def search_ids(self, source, prefix=None, encoded=None):
            return search_model(
                self.model,
                source,
                self.search,
                max_length=self.bound,
                extra_length=self.extra_length,
                min_length=self.min_length,
                target_prefix=prefix,
                static_shapes=True,
                encoded=encoded,
            )

    translators = {
        "growing": kt.Translator(model, tokenizer),
        "preallocated-bound": Preallocated(None),
        "preallocated-max": Preallocated(model.config.max_length),
    }
    exported = [str(t.save(f"{output_dir}/{name}")) for name, t in translators.items()]
    return {"exported": exported}


def several(probes_json):
    """The answers of the probes [[KIND, ARGUMENT...], ...], in turn in this process."""
    return [PROBES[kind](*arguments) for kind, *arguments in json.loads(probes_json)]


OP_EVENT = re.compile(r"([\w./-]+):(\w+)")
NORMALISER = "ReduceLogSumExp/"
PROBES = {
    "export": export,
    "export-caches": export_caches,
    "loss-share": loss_share,
    "loss-step": loss_step,
    "model-throughput": model_throughput,
    "peak-memory": peak_memory,
    "saved-model": saved_model,
    "saved-models": saved_models,
    "served-path": served_path,
    "several": several,
    "step-profile": step_profile,
    "training-step": training_step,
}

if __name__ == "__main__":
    print(json.dumps(PROBES[sys.argv[1]](*sys.argv[2:])))

"""Speed and memory of keras-transformer, each against a peer measured in the same run.

    python -m benchmarks.bench          # CPU, a few minutes; rewrites benchmarks/README.md
    python -m benchmarks.bench --quick --output -   # a tiny setting, for the tests

A GPU machine, with JAX and without TensorFlow, runs `python -m benchmarks.gpu` instead.

It measures; benchmarks/report.py writes the Markdown report (and re-renders one from a
results.json: `python -m benchmarks.report`).

Every figure is the median of `--repeats` timed repetitions after warm-up runs, the things
compared timed in turn within each repetition; training speed against the peer is also given as
the quartiles of the per-repetition ratios, to show how steady the machine was.
"""

import datetime
import importlib.util
import io
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import types

import numpy as np

from benchmarks import demo_settings, report
from benchmarks.probes import PROBE_SENTENCE, same
from keras_transformer_cli import console, flags

RESULTS = "benchmarks/README.md"
ROOT = pathlib.Path(__file__).resolve().parents[1]  # where `python -m benchmarks.probes` runs
# TensorFlow takes nearly all of a GPU's memory at its first operation: the benchmark's own
# process and the fresh processes it starts take only what they use, so that they fit beside it.
GPU_MEMORY_GROWTH = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}


def run_probe(kind, *arguments, env=None, cwd=ROOT):
    """The JSON answer of `python -m benchmarks.probes KIND ARGUMENTS...`, a fresh process run
    in `cwd` (first on its path: a directory holding another keras_transformer imports it)."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.probes", kind, *map(str, arguments)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GPU_MEMORY_GROWTH, **(env or {})},  # as the environment is now
        cwd=cwd,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def interleaved_seconds(functions, repeats, warmup=2):
    """Seconds of each call of a dict of `functions`, taken in turn within every repetition so
    that the machine's drift (other load, clock changes) falls on all of them alike."""
    for _ in range(warmup):
        for function in functions.values():
            function()
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return times


def median_seconds(function, repeats):
    return float(np.median(interleaved_seconds({"": function}, repeats)[""]))


def matmul_rate(repeats, sizes=(512, 1024, 2048, 4096), dtype="float32"):
    """This machine's matmul rate through TensorFlow, FLOP/s: the best over square sizes of the
    median of `repeats` products."""
    import tensorflow as tf

    product = tf.function(
        lambda a: tf.reduce_sum(tf.matmul(a, a))
    )  # a scalar back, not the product
    rates = []
    for size in sizes:
        a = tf.cast(tf.random.normal([size, size]), dtype)
        rates.append(2 * size**3 / median_seconds(lambda a=a: product(a).numpy(), repeats))
    return max(rates)


def training_flops(config, batch, source_length, target_length):
    """Matmul FLOPs of one training step (forward and backward = 3 x forward), from the layer
    sizes of §3: projections, feed-forward, attention scores and values, and the logits."""
    d, ff, v = config.d_model, config.d_ff, config.vocab_size
    s, t = batch * source_length, batch * target_length
    encoder = 2 * s * (4 * d * d + 2 * d * ff) + 4 * s * source_length * d
    decoder = (
        2 * t * (6 * d * d + 2 * d * ff)
        + 4 * t * target_length * d
        + 2 * s * 2 * d * d
        + 4 * t * source_length * d
    )
    return 3 * (config.num_layers * (encoder + decoder) + 2 * t * d * v)


def training_throughput(config, batch, length, repeats, rate, jit_compile):
    """Target tokens per second of a compiled training step, ours against the KerasHub peer."""
    import keras

    import keras_transformer as kt
    from benchmarks.peer import KerasHubTransformer
    from benchmarks.probes import training_batch

    inputs, labels = training_batch(config, batch, length)

    ours = kt.build_transformer(config)
    ours.compile(
        optimizer=kt.create_optimizer(config),
        loss=kt.LabelSmoothedCrossEntropy(),
        jit_compile=jit_compile,
    )
    peer = KerasHubTransformer(config).model
    peer.compile(
        optimizer=kt.create_optimizer(config),
        jit_compile=jit_compile,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
    )
    tokens = batch * length
    models = {"keras-transformer": ours, "KerasHub layers": peer}
    times = interleaved_seconds(
        {
            name: lambda model=model: model.train_on_batch(inputs, labels)
            for name, model in models.items()
        },
        repeats,
    )
    ratios = np.array(times["KerasHub layers"]) / np.array(times["keras-transformer"])
    rows = {}
    for name, model in models.items():
        seconds = float(np.median(times[name]))
        rows[name] = dict(
            params=model.count_params(),
            tokens_per_second=tokens / seconds,
            mfu=training_flops(config, batch, length, length) / seconds / rate,
        )
    rows["keras-transformer"]["speed_over_peer"] = np.percentile(ratios, [25, 50, 75]).tolist()
    return rows


def backend_throughput(config, batch, length, repeats, rounds):
    """Target tokens per second of our training step under the JAX backend (XLA) and the
    TensorFlow backend (no XLA, as above), each in `rounds` fresh processes taken in turn; None
    without JAX."""
    if importlib.util.find_spec("jax") is None:
        return None
    times = {"tensorflow": [], "jax": []}
    arguments = [json.dumps(config.to_dict()), str(batch), str(length), str(repeats)]
    for _ in range(rounds):
        for backend, seconds in times.items():
            seconds += run_probe("training-step", *arguments, env={"KERAS_BACKEND": backend})
    medians = {backend: float(np.median(seconds)) for backend, seconds in times.items()}
    return {
        backend: dict(
            tokens_per_second=batch * length / median,
            speed_over_tensorflow=medians["tensorflow"] / median,
        )
        for backend, median in medians.items()
    }


def decoding_speed(config, batch, length, repeats):
    """Sentences per second: greedy with and without the cache, beam 4, and the KerasHub peer's
    cached greedy decoding, each compiled as a plain tf.function (XLA off) and, where the method
    compiles, with XLA. Ours stops once every sentence has produced eos (random weights produce
    it at random), so the peer is run for as many decoder steps as our greedy search took on the
    same batch: the same work per sentence."""
    import tensorflow as tf

    import keras_transformer as kt
    from benchmarks.peer import KerasHubTransformer

    rng = np.random.default_rng(1)
    source = tf.constant(rng.integers(4, config.vocab_size, (batch, 20)).astype("int32"))
    model = kt.build_transformer(config)
    peer = KerasHubTransformer(config)
    greedy_ids = kt.greedy_search(model, source, max_length=length).numpy()
    steps = int(np.max(np.count_nonzero(greedy_ids, axis=1)))
    runs = {}
    for xla in (False, True):
        runs[("greedy, cached", xla)] = lambda xla=xla: kt.greedy_search(
            model, source, max_length=length, jit_compile=xla
        )
        runs[("beam 4, cached", xla)] = lambda xla=xla: kt.beam_search(
            model, source, beam_size=4, max_length=length, jit_compile=xla
        )
        runs[("KerasHub greedy, cached", xla)] = lambda xla=xla: peer.greedy(
            source, steps, jit_compile=xla
        )
    # The prefix grows each step: its shapes are dynamic, so XLA cannot compile this one.
    runs[("greedy, full recomputation", False)] = lambda: kt.greedy_search(
        model, source, max_length=length, use_cache=False
    )
    times = interleaved_seconds(
        {
            key: lambda run=run: tf.nest.map_structure(lambda t: t.numpy(), run())
            for key, run in runs.items()
        },
        repeats,
        warmup=1,
    )
    rows = []
    for (method, xla), seconds in times.items():
        seconds = float(np.median(seconds))
        rows.append(
            dict(
                method=method,
                xla=xla,
                sentences_per_second=batch / seconds,
                ms_per_sentence=1000 * seconds / batch,
            )
        )
    return dict(steps=steps, rows=rows)


def padding_efficiency(quick):
    """Real tokens over all tokens in batches: length-bucketed batches against fixed-size batches
    of the same token budget, on synthetic sentences of 3 to 60 words."""
    from keras_transformer.data import Corpus, pipeline_report
    from keras_transformer.tokenizer import SubwordTokenizer

    rng = np.random.default_rng(2)
    words = [f"w{i}" for i in range(300)]
    pairs = [
        (" ".join(rng.choice(words, n)), " ".join(rng.choice(words, n + rng.integers(-2, 3))))
        for n in rng.integers(3, 60, 400 if quick else 4000)
    ]
    with tempfile.TemporaryDirectory() as directory:
        tokenizer = SubwordTokenizer.train(
            [side for pair in pairs for side in pair], 400, f"{directory}/t.model"
        )
        return {
            bucketing: pipeline_report(
                Corpus(pairs).dataset(), tokenizer, 2000, 128, bucketing=bucketing
            ).padding_efficiency
            for bucketing in (True, False)
        }


def peak_memory(config, batch, length, policy, quick=False):
    """Peak resident host memory (MiB) of a fresh process under the Keras dtype `policy` after 3
    training steps or 3 beam searches (`quick`: the training steps only), how much of it the
    work added over the built model, and on a GPU the peak of TensorFlow's allocator on GPU:0."""
    rows = {}
    for what in ("training",) if quick else ("training", "decoding"):
        arguments = [json.dumps(config.to_dict()), str(batch), str(length), what, policy]
        before, after, gpu_peak = run_probe("peak-memory", *arguments)
        rows[what] = dict(peak_mib=after / 1024, added_mib=(after - before) / 1024)
        if gpu_peak is not None:
            rows[what]["gpu_peak_mib"] = gpu_peak / 1024
    return rows


def saved_model_latency(config, repeats, directory, thread_settings=(0, 1), one_process=False):
    """The exported translator (greedy and beam 4, random weights) loaded in a fresh process with
    tensorflow and tensorflow_text only (each search and thread setting its own process; with
    `one_process`, both searches in one process, a setting at a time): p50/p99 latency at batch
    1 and sentences per second at batch 32; beside it, the same model's decoding of the same
    source ids in this process with XLA (batch 1, median), which TensorFlow Serving cannot count
    on."""
    import tensorflow as tf

    import keras_transformer as kt

    texts = ["Das ist ein kleiner Test, nicht mehr.", "this is a small test, nothing more."] * 50
    tokenizer = kt.SubwordTokenizer.train(texts, 300, f"{directory}/tokenizer.model")
    model = kt.build_transformer(
        config.__class__.from_dict({**config.to_dict(), "vocab_size": tokenizer.vocab_size})
    )
    source, _ = kt.Translator(model, tokenizer).source_ids(tf.constant([PROBE_SENTENCE]))
    searches = {
        "greedy": lambda: kt.greedy_search(model, source, jit_compile=True),
        "beam 4": lambda: kt.beam_search(model, source, beam_size=4, jit_compile=True)[0],
    }
    exported, xla_seconds, times = {}, {}, {}
    for name, beam_size in (("greedy", 1), ("beam 4", 4)):
        saved = kt.Translator(model, tokenizer, beam_size=beam_size).save(f"{directory}/{name}")
        exported[name] = str(saved)
        xla_seconds[name] = median_seconds(lambda name=name: searches[name]().numpy(), repeats)
        if not one_process:
            for threads in thread_settings:  # 0: TensorFlow's default, a thread per core
                answer = run_probe("saved-model", repeats, threads, exported[name])
                times[name, threads] = answer[exported[name]]
    if one_process:
        for threads in thread_settings:
            answer = run_probe("saved-model", repeats, threads, *exported.values())
            times.update({(name, threads): answer[saved] for name, saved in exported.items()})
    rows = []
    for name in exported:
        for threads in thread_settings:
            measured = times[name, threads]
            p50 = float(np.percentile(measured["1"], 50))
            rows.append(
                dict(
                    search=name,
                    intra_op_threads=threads,
                    steps=best_length(searches[name]().numpy()),
                    p50_ms=1000 * p50,
                    p99_ms=1000 * float(np.percentile(measured["1"], 99)),
                    batch32_sentences_per_second=32 / float(np.median(measured["32"])),
                    xla_ms=1000 * xla_seconds[name],
                    over_xla=p50 / xla_seconds[name],
                )
            )
    return rows


# The served model's fields that the demo's settings (demo.flags) give it: its shape. Not its ReLU
# dropout, which decoding never applies (and which a library of --before-code may not know).
SERVED_FIELDS = ("d_model", "d_ff", "num_layers", "dropout")
# A size: (preset, config overrides, vocabulary size). --quick's served model has one layer:
# its exports and processes take the same steps at a smaller cost.
QUICK_SIZE = ("tiny", dict(num_layers=1, dropout=0.0, max_length=32), 300)


def demo_size():
    """The size of the demo's model (demo.flags): its preset, shape and vocabulary. The served
    path's ratios depend on them: CTranslate2's step grows with the vocabulary and the width
    more than the SavedModel's, whose step is mostly the dispatch of small ops."""
    plan = demo_settings.demo_plan()
    overrides = plan.config_overrides
    shape = {name: overrides[name] for name in SERVED_FIELDS if name in overrides}
    vocabulary = plan.data.vocab_size or flags.DEFAULT_VOCAB_SIZE
    return plan.model.preset, {**shape, "max_length": 128}, vocabulary


# --quick's served path: how many sentences to copy it translates, and their most words. A batch
# of 8 at most, of short sentences: its batches of 64, 8 and 1 are then two shapes, which the XLA
# export compiles once each (it pads a source to a multiple of 16 tokens).
QUICK_SENTENCES, QUICK_WORDS = 8, 3
COPY_WORDS = "der die das ein kleiner Test ist nicht mehr und heute Haus sehr alt".split()


def copy_pairs(count, seed, words=6):
    """A task a model learns in a few hundred steps: copying sentences of 2 to `words` words."""
    rng = np.random.default_rng(seed)
    lengths = (rng.integers(2, words + 1) for _ in range(count))
    sentences = [" ".join(rng.choice(COPY_WORDS, n)) for n in lengths]
    return [(sentence, sentence) for sentence in sentences]


def served_sentences(quick):
    """The sentences the served path translates: the Ding corpus's test split (prepared as
    `make demo` prepares it; its directory is returned too, or None); with `quick`, sentences
    to copy."""
    from keras_transformer.data import ding

    if quick:
        pairs = copy_pairs(QUICK_SENTENCES, seed=1, words=QUICK_WORDS)
        return [source for source, _ in pairs], None
    dataset_dir = ding.prepare(include_phrases=True, verbose=0)
    tests = ding.load("test", dataset_dir).as_numpy_iterator()
    return [source.decode() for source, _ in tests], dataset_dir


def served_data(quick):
    """Training pairs (a tf.data.Dataset of strings), the texts of the tokenizer, the sentences
    translated (`served_sentences`), and what they are: the Ding corpus as `make demo` trains
    on it (the training mixture, 10 repeats of the sentences); with `quick`, copying."""
    from keras_transformer.data import Corpus, ding

    tests, dataset_dir = served_sentences(quick)
    if quick:
        train = copy_pairs(4000, seed=0)
        return Corpus(train).dataset(), [s for pair in train for s in pair], tests, "copying"
    pairs = ding.training_mixture(dataset_dir, sentence_repeats=10, seed=0)
    texts = [
        text.decode()
        for batch in pairs.batch(8192).as_numpy_iterator()
        for side in batch
        for text in side
    ]
    return pairs, texts, tests, "the Ding corpus"


def train_served_model(directory, steps, size, quick):
    """A model of `size` (a preset, its overrides and its vocabulary size) trained `steps`
    steps (`served_data`), with its tokenizer in `directory`: the model, the tokenizer's path,
    the sentences to translate and the data's name."""
    import keras_transformer as kt
    from keras_transformer.data import make_batches

    pairs, texts, sentences, data = served_data(quick)
    tokenizer_path = f"{directory}/tokenizer.model"
    preset, overrides, vocabulary = size
    tokenizer = kt.SubwordTokenizer.train(texts, vocabulary, tokenizer_path)
    config = kt.TransformerConfig.preset(preset, vocab_size=tokenizer.vocab_size, **overrides)
    model = kt.build_transformer(config)
    model.compile(optimizer=kt.create_optimizer(config), loss=kt.LabelSmoothedCrossEntropy())
    tokens = 1024 if quick else config.tokens_per_batch
    batches = make_batches(pairs, tokenizer, tokens, config.max_length, repeat=True, seed=0)
    model.fit(batches, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0)
    return model, tokenizer, tokenizer_path, sentences, data


def given_served_model(path, quick):
    """The model of `path` (a .keras file, e.g. `make demo`'s runs/demo/model.keras), its
    tokenizer (found beside it) and the tokenizer's path, and the sentences to translate."""
    import keras_transformer as kt
    from keras_transformer_cli import run_dir

    model, tokenizer_path = run_dir.load_with_tokenizer(path)  # checked by `served_model_of`
    sentences, _ = served_sentences(quick)
    return model, kt.SubwordTokenizer.load(tokenizer_path), tokenizer_path, sentences


def served_searches(quick=False):
    """{name: {"beam_size", "alpha"}}: beam 4 and greedy search at §6.1's alpha 0.6, and the
    search of the demo's export (demo.flags: beam 4, its alpha), the one profiled; --quick:
    greedy and the demo's search."""
    evaluation = demo_settings.demo_plan().evaluation
    demo = {"beam_size": evaluation.beam_size, "alpha": evaluation.alpha}
    searches = {
        "beam 4": {"beam_size": 4, "alpha": 0.6},
        "greedy": {"beam_size": 1, "alpha": 0.6},
        f"beam {demo['beam_size']}, alpha {demo['alpha']:g}": demo,
    }
    if quick:
        del searches["beam 4"]
    return searches


# Each TensorFlow setting of the served path's probes: its environment. The thread counts are
# TensorFlow Serving's --tensorflow_inter_op_parallelism and --tensorflow_intra_op_parallelism.
TF_SETTINGS = {
    "default": {},
    **{
        f"{name}={value}": {name: value}
        for name, value in (
            ("TF_ENABLE_ONEDNN_OPTS", "0"),
            ("TF_NUM_INTEROP_THREADS", "1"),
            ("TF_NUM_INTRAOP_THREADS", "1"),
        )
    },
}
SERVED_BATCHES = (64, 8, 1)


def export_before(directory, model, tokenizer_path, commit):
    """`model` exported with each search of DIRECTORY/searches.json by the library at git
    `commit` as DIRECTORY/before/SLUG (the served path's "SavedModel before"), in a fresh process
    run from that commit's keras_transformer: the change and what it changed are then timed in
    the same processes, as a machine whose speed moves between days needs."""
    import dataclasses

    import keras_transformer as kt

    code = pathlib.Path(directory) / "before-code"
    code.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "keras_transformer"], capture_output=True
    )
    if archive.returncode:
        console.fail(f"--before-code {commit[:10]}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as files:
        # Python's safe extraction (3.11.4 and later); git's archive of its own tree otherwise.
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        files.extractall(code, **safe)
    defaults = {  # the fields a version without them reads as at their default
        field.name: field.default
        for field in dataclasses.fields(kt.TransformerConfig)
        if field.default is not dataclasses.MISSING
    }
    config = code / "config.json"
    config.write_text(json.dumps({"config": model.config.to_dict(), "defaults": defaults}))
    weights = pathlib.Path(directory) / "served.weights.h5"
    model.save_weights(weights)
    searches = pathlib.Path(directory) / "searches.json"
    before = pathlib.Path(directory) / "before"
    try:
        answer = run_probe(
            "export",
            config,
            weights,
            tokenizer_path,
            searches,
            before,
            env={"PYTHONPATH": ROOT},
            cwd=code,
        )
    except subprocess.CalledProcessError as error:  # e.g. a config field it does not know
        last = (error.stderr or "").strip().splitlines()[-1:] or ["no message"]
        console.fail(
            f"--before-code {commit[:10]}: that commit's library could not export the served "
            f"model: {last[0]}; choose a later commit, or leave --before-code out"
        )
    library = pathlib.Path(answer["library"]).resolve()
    if library != (code / "keras_transformer").resolve():  # e.g. PYTHONSAFEPATH set
        console.fail(
            f"--before-code {commit[:10]}: the export imported {library}, not that "
            "commit's library; unset PYTHONSAFEPATH, or leave --before-code out"
        )


def export_served(directory, model, tokenizer, tokenizer_path, setting):
    """`model` exported with each of `served_searches` (DIRECTORY/searches.json) as SavedModels
    in DIRECTORY/saved and, compiled by XLA, DIRECTORY/xla, by the library at
    `setting.before_code` in DIRECTORY/before if given, converted to CTranslate2 (ct2-float32,
    ct2-int8) and saved as served.keras: the searches."""
    from benchmarks.probes import export_searches
    from serving.ctranslate2 import convert

    searches = served_searches(setting.quick)
    pathlib.Path(directory, "searches.json").write_text(json.dumps(searches))
    export_searches(model, tokenizer, searches, f"{directory}/saved")
    export_searches(model, tokenizer, searches, f"{directory}/xla", jit_compile=True)
    if setting.before_code:
        export_before(directory, model, tokenizer_path, setting.before_code)
    for kind, quantization in (("float32", "none"), ("int8", "int8")):
        convert(model, tokenizer_path, f"{directory}/ct2-{kind}", quantization)
    model.save(f"{directory}/served.keras")
    return searches


def served_path(directory, steps, size, setting):
    """The served path: one model, trained (`train_served_model`) or given
    (`setting.served_model`), exported with each search of `served_searches` as SavedModels
    (DIRECTORY/saved, and DIRECTORY/xla compiled by XLA) and converted to CTranslate2 (float32,
    int8), timed in fresh processes (benchmarks.probes served-path: the engines in turn, best of
    the rounds) on the test split's first `setting.served_sentences` under each TensorFlow
    setting of `setting.tf_settings`, beside the same model exported by the library at git
    `setting.before_code` if given; the whole split translated once by each engine where fewer
    were timed; and, in the first process,
    where the SavedModel's time goes by op type (the demo's search, batch 64 and batch 1), the
    decoder steps of each search under our stop and CTranslate2's, and the CTranslate2
    engine's own work per call."""
    quick = setting.quick
    if setting.served_model:
        model, tokenizer, tokenizer_path, sentences = given_served_model(
            setting.served_model, quick
        )
        tokenizer_path = shutil.copyfile(tokenizer_path, f"{directory}/tokenizer.model")
        data = f"`{setting.served_model}`"
    else:
        model, tokenizer, tokenizer_path, sentences, data = train_served_model(
            directory, steps, size, quick
        )
        shape = "the tiny preset with one layer" if quick else "the demo's shape and vocabulary"
        data = f"a model of {shape} trained {steps} steps on {data}"
    searches = export_served(directory, model, tokenizer, tokenizer_path, setting)
    split_file = pathlib.Path(directory) / "split.txt"
    split_file.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    split = len(sentences)
    sentences = sentences[: setting.served_sentences or None]
    sentences_file = pathlib.Path(directory) / "sentences.txt"
    sentences_file.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    rounds = 1 if quick else 2
    rows, results = [], {}
    for name in setting.tf_settings:
        first = not results  # measures the engine's overhead and profiles the SavedModel
        profile = "profile" if first else "no-profile"
        arguments = (directory, sentences_file, split_file, rounds, profile, *SERVED_BATCHES)
        answers = run_probe("served-path", *arguments, env=TF_SETTINGS[name])
        overhead = answers.pop("overhead")
        if first:
            results = dict(
                engine_overhead=overhead,
                step_profile=answers.pop("profile"),
                step_profile_batch1=answers.pop("profile_batch1"),
                decoder_steps=answers.pop("steps"),
            )
        rows += served_rows(name, answers, len(sentences))
    if not quick:
        results["caches"] = compare_caches(directory, tokenizer_path, sentences, rounds)
    return dict(
        served_model=data,
        served_searches=searches,
        served_sentences=len(sentences),
        served_split=split,
        **({"served_before": described_commit(setting.before_code)} if setting.before_code else {}),
        served_path=rows,
        **results,
    )


# The cache comparison's sentences (the test split's first) and batches: a preallocated cache
# at batch 1 is slow enough that the whole split would take minutes.
CACHE_SENTENCES, CACHE_BATCHES = 200, (8, 1)


def compare_caches(directory, tokenizer_path, sentences, rounds):
    """Beam 4's SavedModel with its self-attention caches growing a position a step (the
    Translator's), preallocated to each batch's bound, or to the model's max_length, timed in
    one fresh process each batch of CACHE_BATCHES (benchmarks.probes export-caches and
    saved-models): {batch: {cache: {"ms_per_sentence", "same_as_first", "sentences"}}}."""
    exported = run_probe(
        "export-caches", f"{directory}/served.keras", tokenizer_path, f"{directory}/caches"
    )["exported"]
    chosen = pathlib.Path(directory) / "cache-sentences.txt"
    chosen.write_text("\n".join(sentences[:CACHE_SENTENCES]) + "\n", encoding="utf-8")
    return {
        str(batch): {
            pathlib.Path(path).name: figures
            for path, figures in run_probe("saved-models", chosen, rounds, batch, *exported).items()
        }
        for batch in CACHE_BATCHES
    }


def served_rows(setting, answers, count):
    """Table rows of one served-path probe: per search and engine, ms per sentence at each
    batch (the best round), and how many translations equal the SavedModel's at batch 64, of
    the timed sentences ("same") and, where the probe translated more, of the whole split
    ("same_split")."""
    split = answers.pop("split", None)
    rows = []
    for search in answers["SavedModel"]:
        reference = answers["SavedModel"][search][str(SERVED_BATCHES[0])]["translations"]
        for engine, searches in answers.items():
            batches = searches[search]
            translations = batches[str(SERVED_BATCHES[0])]["translations"]
            row = dict(
                search=search,
                engine=engine,
                setting=setting,
                ms={b: 1000 * min(f["seconds"]) / count for b, f in batches.items()},
                same=same(translations, reference),
            )
            if split:
                row["same_split"] = same(split[engine][search], split["SavedModel"][search])
            rows.append(row)
    return rows


def best_length(ids):
    """Tokens (eos included) of the first sentence's best output in greedy [B, L] or beam
    [B, K, L] ids."""
    return int(np.count_nonzero(ids.reshape(-1, ids.shape[-1])[0]))


def build_parser():
    parser = flags.parser(__doc__, "benchmarks.bench")
    flags.add_quick(parser)
    parser.add_argument(
        "--repeats", type=flags.COUNT, default=10, help="timed repetitions of each measurement"
    )
    parser.add_argument(
        "--xla",
        choices=["off", "on", "both"],
        default=None,
        help="compile the training steps with XLA (default: off)",
    )
    parser.add_argument(
        "--before-code",
        default=None,
        metavar="COMMIT",
        help="also time the served path's model exported by the library at this git commit, in "
        "the same processes, as the row 'SavedModel before' (default: none, the current code "
        "only)",
    )
    parser.add_argument(
        "--served-model",
        default=None,
        metavar="MODEL.keras",
        help="time the served path on this model, its tokenizer beside it (e.g. `make demo`'s "
        "runs/demo/model.keras; default: a model of the demo's shape trained 1000 steps)",
    )
    parser.add_argument(
        "--served-sentences",
        type=flags.COUNT,
        default=None,
        metavar="N",
        help="time the served path on the first N sentences of the test split (default: all)",
    )
    parser.add_argument(
        "--tf-settings",
        nargs="+",
        choices=list(TF_SETTINGS),
        default=None,
        metavar="SETTING",
        help="the TensorFlow settings of the served path's processes, of "
        f"{', '.join(TF_SETTINGS)} (default: all; with --quick, default)",
    )
    flags.add_parts(parser, list(PARTS))
    flags.add_mixed_precision(parser)
    report.add_before(parser)
    flags.add_output(
        parser,
        f"the Markdown report ('-': standard output; default {RESULTS}) and beside it the raw "
        "results (results.json for README.md, NAME.json for NAME.md)",
    )
    return parser


def plan(args):
    """What a run measures, from its flags."""
    if args.quick:
        presets = [("tiny", 8, 16)]
    else:
        presets = [("small", 32, 32), ("base", 8, 32)]
    parts = [part for part in PARTS if part in (args.parts or PARTS)]
    bf16 = args.mixed_precision == "bf16"
    return types.SimpleNamespace(
        quick=args.quick,
        repeats=1 if args.quick else args.repeats,
        presets=presets,
        xla={"off": [False], "on": [True], "both": [False, True]}[args.xla or "off"],
        bf16=bf16,
        vocab=500 if args.quick else 8000,
        parts=parts,
        before_code=before_code(args, bf16) if "exports" in parts else None,
        served_model=served_model_of(args) if "exports" in parts else None,
        served_sentences=args.served_sentences,
        tf_settings=args.tf_settings or list(TF_SETTINGS)[: 1 if args.quick else None],
    )


def before_code(args, bf16):
    """The full hash of --before-code's commit, or None without it; ends with a usage error
    where this clone has no such commit, or under bfloat16 (the earlier library's export
    rebuilds the model in float32: it would not be the same model)."""
    ref = args.before_code
    if ref is None:
        return None
    if bf16:
        console.fail(
            "--before-code exports the model again in float32; with --mixed-precision bf16 "
            "leave --before-code out",
            status=2,
        )
    commit = git_commit(ref)
    if commit is None:
        console.fail(
            f"--before-code {ref}: not a commit of the clone at {ROOT} (a shallow clone lacks "
            "the history: `git fetch --unshallow`), or git is missing; or leave --before-code out",
            status=2,
        )
    return commit


def served_model_of(args):
    """--served-model's path, or None without it; ends the run, naming the file, where it or
    the tokenizer beside it is missing."""
    from keras_transformer_cli import run_dir

    if args.served_model is None:
        return None
    path = pathlib.Path(args.served_model)
    if not path.is_file():
        console.fail(
            f"--served-model {path}: no such file; give a .keras model (make demo writes "
            "runs/demo/model.keras)"
        )
    tokenizer = run_dir.tokenizer_beside(path)
    if not tokenizer.is_file():
        console.fail(
            f"--served-model {path}: no tokenizer beside it ({tokenizer}); give the model of a "
            "run directory"
        )
    return path


def git_commit(ref):
    """The full hash of the commit `ref` names in this clone, or None."""
    try:
        answer = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:  # no git
        return None
    return None if answer.returncode else answer.stdout.strip()


def described_commit(commit):
    """'abcdef1234 (its subject)'."""
    subject = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%s", commit],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return f"{commit[:10]} ({subject})"


def config_of(setting, preset):
    """`preset` without dropout, at the run's vocabulary and max_length 128; with --quick, one
    layer: the same steps and processes at a smaller cost."""
    import keras_transformer as kt

    layers = {"num_layers": 1} if setting.quick else {}
    return kt.TransformerConfig.preset(
        preset, vocab_size=setting.vocab, dropout=0.0, max_length=128, **layers
    )


def setup_tensorflow(bf16):
    """Sets the dtype policy and memory growth on every GPU; the GPUs."""
    import keras
    import tensorflow as tf

    # Each model and decoding setting is traced once on purpose; TensorFlow would warn of
    # "excessive retracing" across them.
    tf.get_logger().setLevel("ERROR")
    keras.config.set_dtype_policy("mixed_bfloat16" if bf16 else "float32")
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # TensorFlow already started (main called in-process): left as it is
            pass
    return gpus


def run_information(setting, arguments, gpus):
    """The results' first entries: how, where and with what the run measured."""
    import keras
    import keras_hub
    import tensorflow as tf

    device = (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        if gpus
        else "no GPU"
    )
    return dict(
        arguments=" ".join(arguments),
        machine=f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPU cores, {device}",
        policy=keras.config.dtype_policy().name,
        matmul_dtype="bfloat16" if setting.bf16 else "float32",
        date=datetime.date.today().isoformat(),
        versions=dict(
            tensorflow=tf.__version__, keras=keras.__version__, keras_hub=keras_hub.__version__
        ),
        repeats=setting.repeats,
    )


def measure(setting, arguments, gpus):
    """Every part of the benchmark in turn, with a progress bar: the results."""
    import keras

    results = run_information(setting, arguments, gpus)
    progress = keras.utils.Progbar(1 + len(setting.parts), unit_name="part")
    sizes = (256, 512) if setting.quick else (2048, 4096, 8192) if gpus else (512, 1024, 2048, 4096)
    results["matmul_flops"] = matmul_rate(max(setting.repeats, 5), sizes, results["matmul_dtype"])
    progress.add(1)
    for part in setting.parts:
        results.update(PARTS[part](setting, results))
        progress.add(1)
    return results


def measure_padding(setting, results):
    efficiency = padding_efficiency(setting.quick)
    return dict(padding_efficiency={str(k): v for k, v in efficiency.items()})


def measure_memory(setting, results):
    preset, batch, length = setting.presets[0]
    config = config_of(setting, preset)
    return dict(memory=peak_memory(config, batch, length, results["policy"], setting.quick))


def measure_training(setting, results):
    """The training step against the peer for each preset and XLA setting, and under each Keras
    backend (None without JAX)."""
    training = [
        dict(
            preset=preset,
            shape=f"{batch} x {length}",
            xla=jit_compile,
            rows=training_throughput(
                config_of(setting, preset),
                batch,
                length,
                setting.repeats,
                results["matmul_flops"],
                jit_compile,
            ),
        )
        for preset, batch, length in setting.presets
        for jit_compile in setting.xla
    ]
    rounds = 1 if setting.quick else 2
    backends = []
    for preset, batch, length in setting.presets:
        config = config_of(setting, preset)
        rows = backend_throughput(config, batch, length, setting.repeats, rounds)
        if rows is None:
            return dict(training=training, backends=None)
        backends.append(dict(preset=preset, shape=f"{batch} x {length}", rows=rows))
    return dict(training=training, backends=backends)


def measure_decoding(setting, results):
    """Decoding at batch 1 and 32 (--quick: batch 1), on the first preset."""
    preset = setting.presets[0][0]
    length = 8 if setting.quick else 64
    config = config_of(setting, preset)
    decoding = [
        dict(batch=batch, **decoding_speed(config, batch, length, setting.repeats))
        for batch in ((1,) if setting.quick else (1, 32))
    ]
    return dict(decoding_preset=preset, decoding_length=length, decoding=decoding)


def measure_exports(setting, results):
    """The exported SavedModel against XLA, then the served path against CTranslate2."""
    config = config_of(setting, setting.presets[0][0])
    calls = 5 if setting.quick else 20
    steps = 10 if setting.quick else 1000
    with tempfile.TemporaryDirectory() as directory:
        saved_model = saved_model_latency(
            config,
            calls,
            directory,
            thread_settings=(0,) if setting.quick else (0, 1),
            one_process=setting.quick,
        )
    with tempfile.TemporaryDirectory() as directory:
        size = QUICK_SIZE if setting.quick else demo_size()
        served = served_path(directory, steps, size, setting)
    return dict(
        saved_model_preset=setting.presets[0][0],
        saved_model_calls=calls,
        saved_model=saved_model,
        **served,
    )


PARTS = {
    "training": measure_training,
    "decoding": measure_decoding,
    "exports": measure_exports,
    "padding": measure_padding,
    "memory": measure_memory,
}


def write(text, results, output):
    """The report to `output` ('-': stdout) and, beside a file, the raw results."""
    if str(output) == "-":
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")
    raw = output.parent / ("results.json" if output.name == "README.md" else output.stem + ".json")
    raw.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(f"results written to {output} and {raw}")


@console.program
def main(argv=None):
    parser = build_parser()
    args = flags.parse(parser, argv)
    if args.mixed_precision not in ("auto", "off", "bf16"):
        parser.error(f"--mixed-precision {args.mixed_precision}: the benchmarks take off or bf16")
    setting = plan(args)
    output = args.output or pathlib.Path(RESULTS)
    before = report.read_json(args.before, "--before") if args.before else None
    gpus = setup_tensorflow(setting.bf16)
    results = measure(setting, argv if argv is not None else sys.argv[1:], gpus)
    if args.before:
        results["before"] = str(args.before)
    write(report.render(results, before), results, output)


if __name__ == "__main__":
    main()

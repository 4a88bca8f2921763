"""Speed and memory of keras-transformer, each against a peer measured in the same run.

    python -m benchmarks.bench          # CPU, a few minutes; rewrites benchmarks/README.md
    python -m benchmarks.bench --quick --output -   # a tiny setting, for the tests
    python -m benchmarks.bench --gpu    # a GPU: bf16, XLA off and on, the base preset at the
                                        # paper's 25000-token batch; writes benchmarks/GPU.md

Every figure is the median of `--repeats` timed repetitions after warm-up runs, the things
compared timed in turn within each repetition; training speed against the peer is also given as
the quartiles of the per-repetition ratios, to show how steady the machine was.
"""

import argparse
import datetime
import importlib.util
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.probes import PROBE_SENTENCE

RESULTS = "benchmarks/README.md"
ROOT = pathlib.Path(__file__).resolve().parents[1]  # where `python -m benchmarks.probes` runs
# TensorFlow takes nearly all of a GPU's memory at its first operation: the benchmark's own
# process and the fresh processes it starts take only what they use, so that they fit beside it.
GPU_MEMORY_GROWTH = {**os.environ, "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


def run_probe(kind, *arguments, env=None):
    """The JSON answer of `python -m benchmarks.probes KIND ARGUMENTS...`, a fresh process."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.probes", kind, *map(str, arguments)],
        capture_output=True,
        text=True,
        check=True,
        env={**GPU_MEMORY_GROWTH, **(env or {})},
        cwd=ROOT,
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


def peak_memory(config, batch, length, policy):
    """Peak resident host memory (MiB) of a fresh process under the Keras dtype `policy` after 3
    training steps or 3 beam searches, how much of it the work added over the built model, and
    on a GPU the peak of TensorFlow's allocator on GPU:0."""
    rows = {}
    for what in ("training", "decoding"):
        arguments = [json.dumps(config.to_dict()), str(batch), str(length), what, policy]
        before, after, gpu_peak = run_probe("peak-memory", *arguments)
        rows[what] = dict(peak_mib=after / 1024, added_mib=(after - before) / 1024)
        if gpu_peak is not None:
            rows[what]["gpu_peak_mib"] = gpu_peak / 1024
    return rows


def saved_model_latency(config, repeats, directory, thread_settings=(0, 1)):
    """The exported translator (greedy and beam 4, random weights) loaded in a fresh process with
    tensorflow and tensorflow_text only: p50/p99 latency at batch 1 and sentences per second at
    batch 32; beside it, the same model's decoding of the same source ids in this process with
    XLA (batch 1, median), which TensorFlow Serving cannot count on."""
    import tensorflow as tf

    import keras_transformer as kt

    texts = ["Das ist ein kleiner Test, nicht mehr.", "this is a small test, nothing more."] * 50
    tokenizer = kt.SubwordTokenizer.train(texts, 300, f"{directory}/tokenizer.model")
    model = kt.build_transformer(
        config.__class__.from_dict({**config.to_dict(), "vocab_size": tokenizer.vocab_size})
    )
    source = kt.Translator(model, tokenizer).source_ids(tf.constant([PROBE_SENTENCE]))
    searches = {
        "greedy": lambda: kt.greedy_search(model, source, jit_compile=True),
        "beam 4": lambda: kt.beam_search(model, source, beam_size=4, jit_compile=True)[0],
    }
    rows = []
    for name, beam_size in (("greedy", 1), ("beam 4", 4)):
        saved = kt.Translator(model, tokenizer, beam_size=beam_size).save(f"{directory}/{name}")
        xla_seconds = median_seconds(lambda name=name: searches[name]().numpy(), repeats)
        for threads in thread_settings:  # 0: TensorFlow's default, a thread per core
            times = run_probe("saved-model", saved, repeats, threads)
            p50 = float(np.percentile(times["1"], 50))
            rows.append(
                dict(
                    search=name,
                    intra_op_threads=threads,
                    steps=best_length(searches[name]().numpy()),
                    p50_ms=1000 * p50,
                    p99_ms=1000 * float(np.percentile(times["1"], 99)),
                    batch32_sentences_per_second=32 / float(np.median(times["32"])),
                    xla_ms=1000 * xla_seconds,
                    over_xla=p50 / xla_seconds,
                )
            )
    return rows


# The demo's model (Makefile DEMO_SETTINGS): the small preset narrowed to 2+2 layers of 128.
DEMO_SIZE = ("small", dict(d_model=128, d_ff=512, num_layers=2, dropout=0.0, max_length=128))
QUICK_SIZE = ("tiny", dict(dropout=0.0, max_length=32))
COPY_WORDS = "der die das ein kleiner Test ist nicht mehr und heute Haus sehr alt".split()


def copy_pairs(count, seed):
    """A task a model learns in a few hundred steps: copying sentences of 2 to 6 words."""
    rng = np.random.default_rng(seed)
    sentences = [" ".join(rng.choice(COPY_WORDS, rng.integers(2, 7))) for _ in range(count)]
    return [(sentence, sentence) for sentence in sentences]


def ctranslate2_speed(repeats, directory, steps, size=DEMO_SIZE):
    """Beam-4 translation (alpha 0.6) of one trained demo-size model by the exported SavedModel
    (a fresh process, as TensorFlow Serving runs it), by our decoding with XLA in this process,
    and by CTranslate2 in float32 and int8 (this process): ms per sentence at batch 1 and 32,
    each engine's share of translations equal to the SavedModel's. The model (`size`: a preset
    and its overrides) learns to copy for `steps` steps, so that its translations end as a
    trained model's do."""
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.data import Corpus, make_batches
    from serving.ctranslate2 import CTranslate2Translator, convert

    train = copy_pairs(4000, seed=0)
    tokenizer_path = f"{directory}/tokenizer.model"
    tokenizer = kt.SubwordTokenizer.train([s for s, _ in train], 300, tokenizer_path)
    preset, overrides = size
    config = kt.TransformerConfig.preset(
        preset, vocab_size=tokenizer.vocab_size, warmup_steps=100, **overrides
    )
    model = kt.build_transformer(config)
    model.compile(optimizer=kt.create_optimizer(config), loss=kt.LabelSmoothedCrossEntropy())
    batches = make_batches(Corpus(train).dataset(), tokenizer, 1024, 32, repeat=True, seed=0)
    model.fit(batches, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0)
    sentences = [source for source, _ in copy_pairs(32, seed=1)]
    sentences_file = pathlib.Path(directory) / "sentences.txt"
    sentences_file.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    translator = kt.Translator(model, tokenizer, beam_size=4, alpha=0.6)
    reference = [
        t.decode() for t in translator.translate(tf.constant(sentences))["translation"].numpy()
    ]
    saved = run_probe(
        "saved-model", translator.save(f"{directory}/saved"), repeats, 0, sentences_file
    )
    xla = kt.Translator(model, tokenizer, beam_size=4, alpha=0.6, jit_compile=True)
    engines = {
        "XLA, in process": lambda batch: [
            t.decode() for t in xla.translate(tf.constant(batch))["translation"].numpy()
        ]
    }
    for quantization in ("none", "int8"):
        engine = CTranslate2Translator(
            convert(model, tokenizer_path, f"{directory}/ct2-{quantization}", quantization)
        )
        name = f"CTranslate2 {'float32' if quantization == 'none' else quantization}"
        engines[name] = lambda batch, engine=engine: [t for t, _ in engine.translate(batch)]
    rows = [
        dict(
            engine="SavedModel, fresh process",
            batch1_ms=1000 * float(np.median(saved["1"])),
            batch32_ms=1000 * float(np.median(saved["32"])) / 32,
            same=32,
        )
    ]
    for name, translate in engines.items():
        translate(sentences[:1])  # warm-up (and XLA's compilation)
        rows.append(
            dict(
                engine=name,
                batch1_ms=1000 * median_seconds(lambda t=translate: t(sentences[:1]), repeats),
                batch32_ms=1000 * median_seconds(lambda t=translate: t(sentences), repeats) / 32,
                same=sum(a == b for a, b in zip(translate(sentences), reference)),
            )
        )
    return rows


def best_length(ids):
    """Tokens (eos included) of the first sentence's best output in greedy [B, L] or beam
    [B, K, L] ids."""
    return int(np.count_nonzero(ids.reshape(-1, ids.shape[-1])[0]))


def before_saved_model(before, search, threads):
    """Batch-1 p50 ms of an exported search in an earlier run's results (`--before`), or None."""
    for row in before["saved_model"]:
        if (row["search"], row["intra_op_threads"]) == (search, threads):
            return row["p50_ms"]
    return None


def table_header(columns, before_unit, before):
    """The two header lines of a markdown table of `columns` ((name, "l" or "r") pairs: left-
    or right-aligned), and with `before` the earlier run's figure in `before_unit` and the
    speed-up over it."""
    if before:
        columns = (*columns, (f"before: {before_unit}", "r"), ("speed-up", "r"))
    names = " | ".join(name for name, _ in columns)
    rules = " | ".join("---:" if align == "r" else "---" for _, align in columns)
    return [f"| {names} |", f"| {rules} |"]


def before_cells(then, now):
    """The --before columns of a row: the earlier figure and now's speed-up over it."""
    return f" {then:.1f} | {then / now:.2f} |" if then else " | |"


def on_off(flag):
    return "on" if flag else "off"


def before_decoding(before, batch, method, xla):
    """ms/sentence of a decoding row in an earlier run's results (`--before`), or None."""
    for setting in before["decoding"]:
        for row in setting["rows"]:
            if (setting["batch"], row["method"], row["xla"]) == (batch, method, xla):
                return row["ms_per_sentence"]
    return None


def report(results, before=None):
    """The markdown tables of `results`; with `before` (an earlier run's results.json), the
    decoding and SavedModel rows also give that run's figures and the speed-up over them."""
    before_note = (
        f" Before: the same rows in `{results['before']}` (run {before['date']}, "
        f"{before['machine']})."
        if before
        else ""
    )
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m benchmarks.bench`); do not edit by hand. Every figure "
        "is a",
        "ratio against a peer measured in the same run: a model of the same size built from "
        "KerasHub's",
        "`TransformerEncoder`/`TransformerDecoder` (benchmarks/peer.py), or our own decoding "
        "without",
        "its cache (full recomputation each step, the method of the official TensorFlow tutorial).",
        "The raw figures are in `results.json`. On a GPU, `python -m benchmarks.bench --gpu` "
        "writes the",
        "same tables to `GPU.md` (bfloat16, XLA off and on, the base preset at 25000 tokens a "
        "step).",
        "",
        f"`python -m benchmarks.bench {results['arguments']}` on {results['machine']}, "
        f"{results['date']}.",
        f"TensorFlow {results['versions']['tensorflow']}, Keras {results['versions']['keras']}, "
        f"keras-hub {results['versions']['keras_hub']}. Medians of {results['repeats']} "
        "repetitions after warm-up, "
        "the models compared timed in turn within each repetition.",
        f"Keras dtype policy {results['policy']}. Matmul rate of this machine "
        f"({results['matmul_dtype']}, TensorFlow, "
        f"best square size): {results['matmul_flops'] / 1e9:.1f} GFLOP/s.",
        "",
        "## Training step (forward, backward, Adam update)",
        "",
        "| preset | batch x length | XLA | model | parameters | target tokens/s | speed over peer "
        "(quartiles) | MFU |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for setting in results["training"]:
        for name, row in setting["rows"].items():
            ratio = (
                "{1:.2f} ({0:.2f}-{2:.2f})".format(*row["speed_over_peer"])
                if "speed_over_peer" in row
                else "1.00"
            )
            lines.append(
                f"| {setting['preset']} | {setting['shape']} | {'on' if setting['xla'] else 'off'} "
                f"| {name} | {row['params']:,} | "
                f"{row['tokens_per_second']:,.0f} | {ratio} | {100 * row['mfu']:.1f}% |"
            )
    lines += [
        "",
        "The peer's extra parameters are its untied output projection and learned positions "
        "(KerasHub's `TokenAndPositionEmbedding`); MFU counts the same matmul FLOPs for both "
        "(the layer sizes of §3, backward = 2 x forward) over the machine's matmul rate. The speed "
        "over "
        "the peer is the median of the per-repetition ratios of step times (with their quartiles), "
        "which can differ from the ratio of the median throughputs.",
    ]
    lines += ["", "## Keras backends (training step of our model, fresh processes in turn)", ""]
    if results["backends"] is None:
        lines.append("JAX is not installed: `pip install jax` to measure the JAX backend.")
    else:
        lines += [
            "| preset | batch x length | backend | target tokens/s | speed over TensorFlow |",
            "| --- | --- | --- | ---: | ---: |",
        ]
        for setting in results["backends"]:
            for backend, row in setting["rows"].items():
                compiler = "XLA" if backend == "jax" else "tf.function, no XLA"
                lines.append(
                    f"| {setting['preset']} | {setting['shape']} | {backend} ({compiler}) | "
                    f"{row['tokens_per_second']:,.0f} | {row['speed_over_tensorflow']:.2f} |"
                )
    lines += [
        "",
        f"## Decoding ({results['decoding_preset']} preset, random weights, source length 20, "
        f"output up to {results['decoding_length']} tokens)",
        "",
        "Over full recomputation: against our decoding without its cache (XLA off: its growing "
        "prefix has dynamic shapes, which XLA does not compile). Over KerasHub: against the "
        "peer's cached greedy decoding with the same XLA setting." + before_note,
        "",
        *table_header(
            (
                ("batch", "r"),
                ("decoder steps", "r"),
                ("method", "l"),
                ("XLA", "l"),
                ("sentences/s", "r"),
                ("ms/sentence", "r"),
                ("over full recomputation", "r"),
                ("over KerasHub", "r"),
            ),
            "ms/sentence",
            before,
        ),
    ]
    for setting in results["decoding"]:
        rows = {(row["method"], row["xla"]): row for row in setting["rows"]}
        base = rows[("greedy, full recomputation", False)]["ms_per_sentence"]
        for (method, xla), row in rows.items():
            peer = rows[("KerasHub greedy, cached", xla)]["ms_per_sentence"]
            ours = row["ms_per_sentence"]
            over_peer = f"{peer / ours:.2f}" if method == "greedy, cached" else ""
            line = (
                f"| {setting['batch']} | {setting['steps']} | {method} | {on_off(xla)} | "
                f"{row['sentences_per_second']:.1f} | {ours:.1f} | {base / ours:.2f} | "
                f"{over_peer} |"
            )
            if before:
                line += before_cells(before_decoding(before, setting["batch"], method, xla), ours)
            lines.append(line)
    lines += [
        "",
        f"## Exported SavedModel ({results['decoding_preset']} preset, random weights, loaded in "
        "a fresh process)",
        "",
        "The `translate` signature on strings, as TensorFlow Serving runs it (no XLA), beside "
        "the same model decoding the same source ids with XLA in the benchmark's process "
        f"(batch 1; {results['saved_model_calls']} calls each at batch 1, a quarter as many at "
        "batch 32). The SavedModel also tokenizes, detokenizes and computes the alignment. "
        "Threads within an op: TensorFlow's default (one per core) or 1 (TensorFlow Serving's "
        "`--tensorflow_intra_op_parallelism=1`).",
        "",
        *table_header(
            (
                ("search", "l"),
                ("threads within an op", "l"),
                ("decoder steps", "r"),
                ("batch 1 p50 ms", "r"),
                ("p99 ms", "r"),
                ("batch 32 sentences/s", "r"),
                ("XLA, ms", "r"),
                ("SavedModel over XLA", "r"),
            ),
            "p50 ms",
            before,
        ),
    ]
    for row in results["saved_model"]:
        threads = row["intra_op_threads"] or "default"
        line = (
            f"| {row['search']} | {threads} | {row['steps']} | {row['p50_ms']:.1f} | "
            f"{row['p99_ms']:.1f} | {row['batch32_sentences_per_second']:.1f} | "
            f"{row['xla_ms']:.1f} | {row['over_xla']:.2f} |"
        )
        if before:
            then = before_saved_model(before, row["search"], row["intra_op_threads"])
            line += before_cells(then, row["p50_ms"])
        lines.append(line)
    lines += [
        "",
        f"## CTranslate2 (a model of the demo's size trained {results['ctranslate2_steps']} steps "
        "to copy sentences; the tiny preset with --quick)",
        "",
        "Beam 4, alpha 0.6, on 32 held-out sentences: ms per sentence at batch 1 (the first "
        "sentence) and batch 32, and how many of the 32 translations equal the SavedModel's. "
        "The SavedModel runs in a fresh process as TensorFlow Serving would; the others in the "
        "benchmark's process. CTranslate2 from `python -m serving.ctranslate2` (float32, and "
        "`--quantization int8`).",
        "",
        "| engine | batch 1 ms | batch 32 ms/sentence | batch 1 over SavedModel | "
        "batch 32 over SavedModel | same translations |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    saved = results["ctranslate2"][0]
    for row in results["ctranslate2"]:
        lines.append(
            f"| {row['engine']} | {row['batch1_ms']:.1f} | {row['batch32_ms']:.2f} | "
            f"{saved['batch1_ms'] / row['batch1_ms']:.2f} | "
            f"{saved['batch32_ms'] / row['batch32_ms']:.2f} | {row['same']}/32 |"
        )
    efficiency = results["padding_efficiency"]
    lines += [
        "",
        "## Padding efficiency (real tokens / all tokens in batches)",
        "",
        f"Length-bucketed batches: {100 * efficiency['True']:.1f}%; fixed-size batches of the same "
        f"token budget: {100 * efficiency['False']:.1f}%.",
        "",
        "## Peak resident host memory (fresh process, XLA off)",
        "",
        "| work | peak MiB | added by the work, MiB | GPU:0 peak MiB |",
        "| --- | ---: | ---: | ---: |",
    ]
    for what, row in results["memory"].items():
        gpu = f"{row['gpu_peak_mib']:.0f}" if "gpu_peak_mib" in row else "no GPU"
        lines.append(f"| {what} | {row['peak_mib']:.0f} | {row['added_mib']:.0f} | {gpu} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="the tiny preset and one repetition (for tests)"
    )
    parser.add_argument(
        "--repeats", type=int, default=10, help="timed repetitions of each measurement"
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="the GPU setting: bf16, XLA off and on, the base preset at 25000 target tokens",
    )
    parser.add_argument(
        "--xla",
        choices=["off", "on", "both"],
        default=None,
        help="compile the training steps with XLA (default: off; both with --gpu)",
    )
    parser.add_argument(
        "--mixed-precision",
        choices=["off", "bf16"],
        default=None,
        help="the Keras dtype policy (default: off; bf16 with --gpu)",
    )
    parser.add_argument(
        "--before",
        type=pathlib.Path,
        default=None,
        help="an earlier run's results.json: the decoding and SavedModel tables then give its "
        "figures beside this run's, and the speed-up",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="the markdown file to write ('-': stdout; "
        f"default {RESULTS}, benchmarks/GPU.md with --gpu)",
    )
    args = parser.parse_args(argv)
    xla = {"off": [False], "on": [True], "both": [False, True]}[
        args.xla or ("both" if args.gpu else "off")
    ]
    bf16 = (args.mixed_precision or ("bf16" if args.gpu else "off")) == "bf16"
    output = args.output or ("benchmarks/GPU.md" if args.gpu else RESULTS)

    import keras
    import keras_hub
    import tensorflow as tf

    import keras_transformer as kt

    repeats = 1 if args.quick else args.repeats
    if args.quick:
        presets = [("tiny", 8, 16)]
    elif args.gpu:
        presets = [("base", 500, 50)]  # 25000 target tokens a step, the paper's batch (§5.1)
    else:
        presets = [("small", 32, 32), ("base", 8, 32)]
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
    if args.gpu and not gpus:
        parser.error("--gpu: TensorFlow sees no GPU here")
    device = (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        if gpus
        else "no GPU"
    )
    vocab = 500 if args.quick else 8000

    def config_of(preset):
        return kt.TransformerConfig.preset(preset, vocab_size=vocab, dropout=0.0, max_length=128)

    results = dict(
        arguments=" ".join(argv if argv is not None else sys.argv[1:]),
        machine=f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPU cores, {device}",
        policy=keras.config.dtype_policy().name,
        matmul_dtype="bfloat16" if bf16 else "float32",
        date=datetime.date.today().isoformat(),
        versions=dict(
            tensorflow=tf.__version__, keras=keras.__version__, keras_hub=keras_hub.__version__
        ),
        repeats=repeats,
    )
    progress = keras.utils.Progbar(
        7, unit_name="part"
    )  # matmul, training and backends, decoding, SavedModel, CTranslate2, padding, memory
    sizes = (256, 512) if args.quick else (2048, 4096, 8192) if gpus else (512, 1024, 2048, 4096)
    results["matmul_flops"] = matmul_rate(max(repeats, 5), sizes, results["matmul_dtype"])
    progress.update(1)
    results["training"] = [
        dict(
            preset=preset,
            shape=f"{batch} x {length}",
            xla=jit_compile,
            rows=training_throughput(
                config_of(preset), batch, length, repeats, results["matmul_flops"], jit_compile
            ),
        )
        for preset, batch, length in presets
        for jit_compile in xla
    ]
    rounds = 1 if args.quick else 2
    backends = [
        (
            preset,
            batch,
            length,
            backend_throughput(config_of(preset), batch, length, repeats, rounds),
        )
        for preset, batch, length in presets
    ]
    results["backends"] = (
        None
        if backends[0][3] is None
        else [
            dict(preset=preset, shape=f"{batch} x {length}", rows=rows)
            for preset, batch, length, rows in backends
        ]
    )
    progress.update(2)
    length = 8 if args.quick else 64
    results.update(decoding_preset=presets[0][0], decoding_length=length)
    results["decoding"] = [
        dict(batch=batch, **decoding_speed(config_of(presets[0][0]), batch, length, repeats))
        for batch in (1, 32)
    ]
    progress.update(3)
    with tempfile.TemporaryDirectory() as directory:
        results["saved_model_calls"] = 5 if args.quick else 20
        results["saved_model"] = saved_model_latency(
            config_of(presets[0][0]),
            results["saved_model_calls"],
            directory,
            thread_settings=(0,) if args.quick else (0, 1),
        )
        progress.update(4)
        results["ctranslate2_steps"] = 10 if args.quick else 1000
        results["ctranslate2"] = ctranslate2_speed(
            results["saved_model_calls"],
            directory,
            results["ctranslate2_steps"],
            QUICK_SIZE if args.quick else DEMO_SIZE,
        )
    progress.update(5)
    results["padding_efficiency"] = {str(k): v for k, v in padding_efficiency(args.quick).items()}
    progress.update(6)
    results["memory"] = peak_memory(config_of(presets[0][0]), *presets[0][1:], results["policy"])
    progress.update(7)
    before = None
    if args.before:
        results["before"] = str(args.before)
        before = json.loads(args.before.read_text(encoding="utf-8"))
    text = report(results, before)
    if output == "-":
        print(text)
    else:
        output = pathlib.Path(output)
        output.write_text(text, encoding="utf-8")
        raw = output.parent / (
            "results.json" if output.name == "README.md" else output.stem + ".json"
        )
        raw.write_text(json.dumps(results, indent=2), encoding="utf-8")
        print(f"results written to {output} and {raw}")


if __name__ == "__main__":
    main()

"""The Markdown report of a benchmark run (benchmarks/README.md, GPU.md) from its results.json.

    python -m benchmarks.report --results benchmarks/results.json --output benchmarks/README.md

re-renders a report without measuring anything; `python -m benchmarks.bench` measures, then
calls `render`. Each section's prose is a Markdown template below: its paragraphs are wrapped
here for reading and written one line each; `{table}` is the section's table.
"""

import json
import pathlib
import sys

from keras_transformer_cli import console, flags

INTRO = """\
# Benchmarks

Written by `make bench` (`python -m benchmarks.bench`); do not edit by hand. Every figure is a
ratio against a peer measured in the same run: a model of the same size built from KerasHub's
`TransformerEncoder`/`TransformerDecoder` (benchmarks/peer.py), or our own decoding without its
cache (full recomputation each step, the method of the official TensorFlow tutorial). The raw
figures are in `results.json`. On a GPU, `python -m benchmarks.gpu` writes `GPU.md` (JAX,
bfloat16, the base and big presets at 25000 tokens a step, the demo from binarized data).

`{command}` on {machine}, {date}. TensorFlow {tensorflow}, Keras
{keras}, keras-hub {keras_hub}. Medians of {repeats} repetitions after warm-up, the models
compared timed in turn within each repetition. Keras dtype policy {policy}. Matmul rate of this
machine ({matmul_dtype}, TensorFlow, best square size): {gflops:.1f} GFLOP/s.
"""

TRAINING = """\
## Training step (forward, backward, Adam update)

{table}

The peer's extra parameters are its untied output projection and learned positions (KerasHub's
`TokenAndPositionEmbedding`); MFU counts the same matmul FLOPs for both (the layer sizes of §3,
backward = 2 x forward) over the machine's matmul rate. The speed over the peer is the median of
the per-repetition ratios of step times (with their quartiles), which can differ from the ratio
of the median throughputs.
"""

BACKENDS = """\
## Keras backends (training step of our model, fresh processes in turn)

{table}
"""

NO_JAX = "JAX is not installed: `pip install jax` to measure the JAX backend."

DECODING = """\
## Decoding ({decoding_preset} preset, random weights, source length 20, output up to
{decoding_length} tokens)

Over full recomputation: against our decoding without its cache (XLA off: its growing prefix has
dynamic shapes, which XLA does not compile). Over KerasHub: against the peer's cached greedy
decoding with the same XLA setting.{before_note}

{table}
"""

BEFORE_NOTE = " Before: the same rows in `{path}` (run {date}, {machine})."

SAVED_MODEL = """\
## Exported SavedModel ({saved_model_preset} preset, random weights, loaded in a fresh process)

The `translate` signature on strings, as TensorFlow Serving runs it (no XLA), beside the same
model decoding the same source ids with XLA in the benchmark's process (batch 1;
{saved_model_calls} calls each at batch 1, a quarter as many at batch 32). The SavedModel also
tokenizes, detokenizes and computes the alignment. Threads within an op: TensorFlow's default
(one per core) or 1 (TensorFlow Serving's `--tensorflow_intra_op_parallelism=1`).

{table}
"""

SERVED_PATH = """\
## Served path: the SavedModel against CTranslate2 ({served_model})

The {translated} translated by the model's SavedModel exports
(`serving_default`: {searches}; the n-best and the alignment computed too) as TensorFlow Serving
runs them: "SavedModel" without XLA{xla}, and by the same model converted with `python -m
serving.ctranslate2` (float32, and `--quantization int8`) behind our CTranslate2 engine
(`serving.translate --model CT2_DIR`: our tokenization, GNMT's length penalty with the same
alpha), all in one fresh process, in turn, the best of each engine's rounds: ms per sentence
at each batch size (sentences a call), the engine's time over CTranslate2 float32's in the
same process, and how many of its translations at the largest batch equal the
SavedModel's.{split_check}{settings}{served_before}{before_note}

{table}

{overhead}
"""

XLA_ENGINE = (
    ', "SavedModel XLA" exported with `serving.export --jit-compile` (its search one XLA'
    " function: TensorFlow Serving started with `--xla_cpu_compilation_enabled=true`)"
)

DECODER_STEPS = """\
### Decoder steps per sentence (our stopping rule and CTranslate2's)

The served model translating the {sentences} sentences at batch {batch} in the first process,
its steps counted: each sentence's own (it leaves the batch when its search ends, as in
"SavedModel" and in CTranslate2) and the batch's, the loop's steps times its sentences (what
"SavedModel XLA" computes: every sentence until its batch ends). Our beam search stops a
sentence when it has K finished hypotheses and no alive one can beat the K-th under GNMT's
length penalty (log P only falls; lp grows up to the sentence's bound, source length + 50):
the exact K-best. CTranslate2 scores by log P during the search (our engine rescores its K
hypotheses with GNMT's penalty afterwards) and stops a sentence once the best candidate of
a step has ended and K hypotheses have finished (its decoding.cc, length penalty 0); "top beam"
is that rule run in our search, on the same scores, and "same" counts its translations equal to
the exact stop's. Greedy search stops at eos under either rule.{split_steps}

{table}
"""

SPLIT_CHECK = (
    ' "Same as SavedModel, all {split}" counts the same over all {split} test sentences, which'
    " each engine translated once at batch {batch} after the timing."
)

SPLIT_STEPS = (
    " The last two columns: the same over all {split} test sentences (the timed ones, then the"
    " rest at batch {batch})."
)

STEPS_AND_STEP_TIME = """\
### What is left (the decoder steps and the time of a step)

An engine's time a sentence is its decoder steps a sentence times the time of one step of one
sentence, so its time over CTranslate2 float32's is the steps' ratio times the step's. The
steps of the timed sentences (the table above): the SavedModel's and CTranslate2's each
sentence's own, under our exact stop and under CTranslate2's rule ("top beam", greedy search:
eos) counted in our search; the XLA export's its batch's (every sentence until the batch ends;
at batch 1 the sentence's own). TensorFlow setting: {setting}.

{table}

The steps' ratio is the stopping rule's: our beam search returns the exact K best under GNMT's
penalty, and CTranslate2's sooner stop, run in our search, changes translations (the table
above), so the search keeps its own; no faster op removes those steps. The step's ratio is
the graph's: without XLA each op of a step is a kernel of its own that writes its result to
memory (the profiles below: the element-wise rest and the cache's copies beside the matmuls),
where CTranslate2 runs a few fused kernels a step. Fusing them is what XLA does, and the XLA
export's step comes nearest CTranslate2's at batch 1; but XLA needs static shapes, so every
sentence of a batch runs until the batch's last ends (more steps), and its step carries the
whole batch and a cache preallocated to the batch's bound, which at a large batch can cost more
than the graph's shrinking batch and growing cache. TensorFlow's op set has no fused decoder
step without XLA.
"""

CACHES = """\
### Growing or preallocated caches (beam 4, the first {sentences} test sentences)

The served model's beam-4 SavedModel exported three ways (`benchmarks.probes export-caches`):
its self-attention caches growing a position a step and the batch shrinking as sentences end
(the Translator's), or preallocated to each batch's bound (source length + 50, at most
max_length) or to the
model's max_length, written in place by a scatter, every sentence computed until the batch
ends (as under XLA, but run without it). The three in turn in one fresh process per batch size
(default setting), the best of each one's rounds: ms per sentence, over the growing cache's, and
how many translations equal the growing cache's.

{table}
"""

# What each TensorFlow setting of the served path (bench.TF_SETTINGS) changes.
SETTINGS = {
    "TF_ENABLE_ONEDNN_OPTS=0": "`TF_ENABLE_ONEDNN_OPTS=0` turns off TensorFlow's oneDNN kernels",
    "TF_NUM_INTEROP_THREADS=1": (
        "`TF_NUM_INTEROP_THREADS=1` runs one op at a time (TensorFlow Serving's "
        "`--tensorflow_inter_op_parallelism=1`)"
    ),
    "TF_NUM_INTRAOP_THREADS=1": (
        "`TF_NUM_INTRAOP_THREADS=1` runs each op on one thread (TensorFlow Serving's "
        "`--tensorflow_intra_op_parallelism=1`)"
    ),
}

SERVED_BEFORE = (
    " SavedModel before: the same model, its weights exported by the library at commit {}, in"
    " the same processes: the change measured in one run."
)

OVERHEAD = """\
Our CTranslate2 engine's own work per call (tokenizing, GNMT's rescoring of CTranslate2's
hypotheses, detokenizing), measured in the first process at batch 1, beam 4, float32:
{engine:.2f} ms a sentence in all against {translate_batch:.2f} ms for its `translate_batch`
call alone on the same pieces.
"""

STEP_PROFILE = """\
## Where the SavedModel's time goes ({search}, batch {batch})

TensorFlow's profiler over the SavedModel translating the {sentences} sentences at batch
{batch} (default setting): op time by kind, ms per decoding step (the loop's
iterations, {steps} here).{outside} Op times overlap on {cores} cores, so they add up to more
than the wall time.{before_note}

{table}
"""

PADDING = """\
## Padding efficiency (real tokens / all tokens in batches)

Length-bucketed batches: {bucketed:.1f}%; fixed-size batches of the same token budget:
{fixed:.1f}%.
"""

MEMORY = """\
## Peak resident host memory (fresh process, XLA off)

{table}
"""


def fill(template, **fields):
    """`template` with each paragraph on one line, then its `fields` filled in."""
    paragraphs = template.strip().split("\n\n")
    return "\n\n".join(" ".join(paragraph.split("\n")) for paragraph in paragraphs).format(**fields)


def render(results, before=None):
    """The Markdown report of `results`; with `before` (an earlier run's results.json), the
    decoding, SavedModel and served-path rows also give that run's figures and the speed-up
    over them. A run of some parts (`bench --parts`) has only their sections."""
    sections = {
        "training": lambda: fill(TRAINING, table=training_table(results)),
        "backends": lambda: fill(
            BACKENDS, table=backends_table(results) if results["backends"] else NO_JAX
        ),
        "decoding": lambda: decoding(results, before),
        "saved_model": lambda: fill(
            SAVED_MODEL, **results, table=saved_model_table(results, before)
        ),
        "served_path": lambda: served(results, before),
        "step_profile": lambda: step_profile(results, before),
        "padding_efficiency": lambda: padding(results),
        "memory": lambda: fill(MEMORY, table=memory_table(results)),
    }
    texts = [intro(results)] + [make() for key, make in sections.items() if key in results]
    return "\n\n".join(texts) + "\n"


def intro(results):
    gflops = results["matmul_flops"] / 1e9
    command = f"python -m benchmarks.bench {results['arguments']}".rstrip()
    return fill(INTRO, **results, **results["versions"], gflops=gflops, command=command)


def before_note(results, before, key):
    """The sentence naming the earlier run, when it measured `key`."""
    if not before or key not in before:
        return ""
    return BEFORE_NOTE.format(
        path=results["before"], date=before["date"], machine=before["machine"]
    )


def decoding(results, before):
    table = decoding_table(results, before)
    return fill(
        DECODING, **results, before_note=before_note(results, before, "decoding"), table=table
    )


def served(results, before):
    note = before_note(results, before, "served_path")
    overhead = fill(OVERHEAD, **results["engine_overhead"]) if "engine_overhead" in results else ""
    table = served_table(results, before)
    code = results.get("served_before")
    changed = [
        SETTINGS[s]
        for s in dict.fromkeys(r["setting"] for r in results["served_path"])
        if s in SETTINGS
    ]
    settings = (
        f" Further processes (not with --quick) change one TensorFlow setting each: "
        f"{'; '.join(changed)}."
        if changed
        else ""
    )
    xla = any(r["engine"] == "SavedModel XLA" for r in results["served_path"])
    text = fill(
        SERVED_PATH,
        **{
            **results,
            "served_before": SERVED_BEFORE.format(code) if code else "",
            "served_model": served_model(results),
        },
        translated=translated(results),
        split_check=split_check(results),
        searches=searches_text(results.get("served_searches")),
        xla=XLA_ENGINE if xla else "",
        settings=settings,
        before_note=note,
        table=table,
        overhead=overhead,
    ).strip()
    if "decoder_steps" in results:
        steps = results["decoder_steps"]
        split = steps.get("split_sentences")
        text += (
            "\n\n"
            + fill(
                DECODER_STEPS,
                sentences=results["served_sentences"],
                batch=steps["batch"],
                split_steps=SPLIT_STEPS.format(split=split, batch=steps["batch"]) if split else "",
                table=decoder_steps_table(steps, results["served_sentences"]),
            ).strip()
        )
        if xla:
            setting = results["served_path"][0]["setting"]  # the first process's, as the steps
            table = steps_and_step_time_table(results, setting)
            text += "\n\n" + fill(STEPS_AND_STEP_TIME, setting=setting, table=table).strip()
    if "caches" not in results:
        return text
    caches = results["caches"]
    sentences = next(iter(next(iter(caches.values())).values()))["sentences"]
    return text + "\n\n" + fill(CACHES, sentences=sentences, table=caches_table(caches)).strip()


def translated(results):
    """Which test sentences the served path translated: all of the split, or its first N."""
    count, split = results["served_sentences"], results.get("served_split")
    if split in (None, count):
        return f"{count} test sentences"
    return f"first {count} of the {split} test sentences"


def served_model(results):
    """What the served path's model is (a run before `served_model` was recorded: trained)."""
    if "served_model" in results:
        return results["served_model"]
    return (
        f"a model of the demo's shape and vocabulary trained {results['served_steps']} steps on "
        f"{results['served_data']}; the tiny preset with --quick"
    )


def searches_text(searches):
    """The served searches in words (a run before they were recorded: beam 4 and greedy)."""
    if not searches:
        return "beam 4 or greedy search, alpha 0.6"
    words = []
    for name, search in searches.items():
        kind = "greedy" if search["beam_size"] == 1 else f"beam {search['beam_size']}"
        words.append(f"{name} ({kind} search, alpha {search['alpha']:g})")
    return "; ".join(words)


def split_check(results):
    """The sentence on the served table's whole-split column, where it has one."""
    rows = results["served_path"]
    if "same_split" not in rows[0]:
        return ""
    return SPLIT_CHECK.format(split=results["served_split"], batch=list(rows[0]["ms"])[0])


def decoder_steps_table(steps, sentences):
    """Per search and stopping rule: decoder steps a sentence, the batch's steps a sentence,
    and the translations equal to the exact stop's; of the whole split too where counted."""
    split = steps.get("split_sentences")
    columns = (
        *(("search", "l"), ("stop", "l"), ("steps a sentence", "r")),
        *(("batch's steps a sentence", "r"), ("same as exact", "r")),
    )
    if split:
        columns += ((f"steps a sentence, all {split}", "r"), (f"same as exact, all {split}", "r"))
    lines = table_header(columns)
    for name, rules in steps["searches"].items():
        for rule, figures in rules.items():
            cells = [
                name,
                rule,
                f"{figures['per_sentence']:.1f}",
                f"{figures['per_batch_row']:.1f}",
                f"{figures['same']}/{sentences}",
            ]
            if split:
                whole = figures["split"]
                cells += [f"{whole['per_sentence']:.1f}", f"{whole['same']}/{split}"]
            lines.append(row(*cells))
    return "\n".join(lines)


# The engines whose time the steps and the step's time split (default setting), and the
# steps each takes at batch 64: its stopping rule, and whether its batch runs to the end.
STEPPED_ENGINES = {
    "SavedModel": ("exact", "per_sentence"),
    "SavedModel XLA": ("exact", "per_batch_row"),
    "CTranslate2 float32": ("top beam", "per_sentence"),
}


def steps_and_step_time_table(results, setting):
    """Per search, engine (STEPPED_ENGINES) and batch (64 and 1): ms a sentence under
    `setting`, decoder steps a sentence, ms a step of one sentence, and each over CTranslate2
    float32's."""
    columns = (
        *(("search", "l"), ("engine", "l"), ("batch", "r"), ("ms a sentence", "r")),
        *(("steps a sentence", "r"), ("ms a step", "r"), ("time over CTranslate2", "r")),
        *(("steps over CTranslate2's", "r"), ("a step over CTranslate2's", "r")),
    )
    lines = table_header(columns)
    rows = {
        (r["search"], r["engine"]): r for r in results["served_path"] if r["setting"] == setting
    }
    for search, rules in results["decoder_steps"]["searches"].items():
        for batch in ("64", "1"):
            figures = {}
            for engine, (rule, at_64) in STEPPED_ENGINES.items():
                counted = rules.get(rule, rules["exact"])  # greedy: eos under either rule
                steps = counted[at_64 if batch == "64" else "per_sentence"]
                ms = rows[search, engine]["ms"][batch]
                figures[engine] = ms, steps, ms / steps
            peer = figures["CTranslate2 float32"]
            for engine, (ms, steps, step) in figures.items():
                ratios = (ms / peer[0], steps / peer[1], step / peer[2])
                cells = [search, engine, batch, f"{ms:.2f}", f"{steps:.1f}", f"{step:.3f}"]
                lines.append(row(*cells, *(f"{ratio:.2f}" for ratio in ratios)))
    return "\n".join(lines)


def caches_table(caches):
    """The cache comparison's rows: per cache, ms per sentence at each batch, the ratio to the
    growing cache's (the first) and the translations equal to its."""
    batches = list(caches)
    names = list(caches[batches[0]])
    columns = (
        ("cache", "l"),
        *((f"batch {b} ms/sentence", "r") for b in batches),
        *((f"batch {b} over growing", "r") for b in batches),
        *((f"batch {b} same as growing", "r") for b in batches),
    )
    lines = table_header(columns)
    for name in names:
        figures = [caches[b][name] for b in batches]
        growing = [caches[b][names[0]]["ms_per_sentence"] for b in batches]
        lines.append(
            row(
                name,
                *(f"{f['ms_per_sentence']:.2f}" for f in figures),
                *(f"{f['ms_per_sentence'] / g:.2f}" for f, g in zip(figures, growing)),
                *(f"{f['same_as_first']}/{f['sentences']}" for f in figures),
            )
        )
    return "\n".join(lines)


def step_profile(results, before):
    """The profile at batch 64 (`step_profile`) and, where measured, at batch 1."""
    cores = results["machine"].split(", ")[1].split()[0]
    texts = []
    for key, batch in (("step_profile", 64), ("step_profile_batch1", 1)):
        if key in results:
            texts.append(
                fill(
                    STEP_PROFILE,
                    search=results[key].get("search", "beam 4"),
                    batch=batch,
                    sentences=results[key]["sentences"],
                    steps=results[key]["steps"],
                    cores=cores,
                    outside=outside_loop(results[key]),
                    before_note=before_note(results, before, key),
                    table=step_profile_table(results[key], (before or {}).get(key)),
                )
            )
    return "\n\n".join(texts)


def outside_loop(profile):
    """The sentence on the op time outside the search's loop, where the profile measured it."""
    if "outside_loop" not in profile:
        return ""
    calls = -(-profile["sentences"] // profile["batch"])
    return (
        f" Outside the loop (tokenizer, encoder, the alignment's decoder pass: once a call) the"
        f" ops took {1000 * profile['outside_loop'] / calls:.2f} ms a call, counted in the"
        " table too."
    )


def padding(results):
    efficiency = results["padding_efficiency"]
    return fill(PADDING, bucketed=100 * efficiency["True"], fixed=100 * efficiency["False"])


def row(*cells):
    """One row of a Markdown table."""
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def table_header(columns, before_unit=None, before=None):
    """The two header lines of a Markdown table of `columns` ((name, "l" or "r") pairs: left-
    or right-aligned), and with `before` the earlier run's figure in `before_unit` and the
    speed-up over it."""
    if before:
        columns = (*columns, (f"before: {before_unit}", "r"), ("speed-up", "r"))
    names = " | ".join(name for name, _ in columns)
    rules = " | ".join("---:" if align == "r" else "---" for _, align in columns)
    return [f"| {names} |", f"| {rules} |"]


def before_cells(then, now):
    """The --before cells of a row: the earlier figure and now's speed-up over it."""
    return (f"{then:.1f}", f"{then / now:.2f}") if then else ("", "")


def on_off(flag):
    return "on" if flag else "off"


def before_decoding(before, batch, method, xla):
    """ms/sentence of a decoding row in an earlier run's results (`--before`), or None."""
    for setting in before["decoding"]:
        for then in setting["rows"]:
            if (setting["batch"], then["method"], then["xla"]) == (batch, method, xla):
                return then["ms_per_sentence"]
    return None


def before_saved_model(before, search, threads):
    """Batch-1 p50 ms of an exported search in an earlier run's results (`--before`), or None."""
    for then in before["saved_model"]:
        if (then["search"], then["intra_op_threads"]) == (search, threads):
            return then["p50_ms"]
    return None


def training_table(results):
    columns = (
        *(("preset", "l"), ("batch x length", "l"), ("XLA", "l"), ("model", "l")),
        *(("parameters", "r"), ("target tokens/s", "r")),
        *(("speed over peer (quartiles)", "r"), ("MFU", "r")),
    )
    lines = table_header(columns)
    for setting in results["training"]:
        for name, figures in setting["rows"].items():
            ratio = "1.00"
            if "speed_over_peer" in figures:
                ratio = "{1:.2f} ({0:.2f}-{2:.2f})".format(*figures["speed_over_peer"])
            lines.append(
                row(
                    *(setting["preset"], setting["shape"], on_off(setting["xla"]), name),
                    *(f"{figures['params']:,}", f"{figures['tokens_per_second']:,.0f}"),
                    *(ratio, f"{100 * figures['mfu']:.1f}%"),
                )
            )
    return "\n".join(lines)


def backends_table(results):
    columns = (
        *(("preset", "l"), ("batch x length", "l"), ("backend", "l")),
        *(("target tokens/s", "r"), ("speed over TensorFlow", "r")),
    )
    lines = table_header(columns)
    for setting in results["backends"]:
        for backend, figures in setting["rows"].items():
            compiler = "XLA" if backend == "jax" else "tf.function, no XLA"
            lines.append(
                row(
                    *(setting["preset"], setting["shape"], f"{backend} ({compiler})"),
                    f"{figures['tokens_per_second']:,.0f}",
                    f"{figures['speed_over_tensorflow']:.2f}",
                )
            )
    return "\n".join(lines)


def decoding_table(results, before):
    columns = (
        *(("batch", "r"), ("decoder steps", "r"), ("method", "l"), ("XLA", "l")),
        *(("sentences/s", "r"), ("ms/sentence", "r")),
        *(("over full recomputation", "r"), ("over KerasHub", "r")),
    )
    lines = table_header(columns, "ms/sentence", before)
    for setting in results["decoding"]:
        rows = {(figures["method"], figures["xla"]): figures for figures in setting["rows"]}
        base = rows[("greedy, full recomputation", False)]["ms_per_sentence"]
        for (method, xla), figures in rows.items():
            peer = rows[("KerasHub greedy, cached", xla)]["ms_per_sentence"]
            ours = figures["ms_per_sentence"]
            cells = [
                *(setting["batch"], setting["steps"], method, on_off(xla)),
                *(f"{figures['sentences_per_second']:.1f}", f"{ours:.1f}"),
                f"{base / ours:.2f}",
                f"{peer / ours:.2f}" if method == "greedy, cached" else "",
            ]
            if before:
                then = before_decoding(before, setting["batch"], method, xla)
                cells += before_cells(then, ours)
            lines.append(row(*cells))
    return "\n".join(lines)


def saved_model_table(results, before):
    columns = (
        *(("search", "l"), ("threads within an op", "l"), ("decoder steps", "r")),
        *(("batch 1 p50 ms", "r"), ("p99 ms", "r"), ("batch 32 sentences/s", "r")),
        *(("XLA, ms", "r"), ("SavedModel over XLA", "r")),
    )
    lines = table_header(columns, "p50 ms", before)
    for figures in results["saved_model"]:
        cells = [
            figures["search"],
            figures["intra_op_threads"] or "default",
            figures["steps"],
            *(f"{figures[key]:.1f}" for key in ("p50_ms", "p99_ms")),
            f"{figures['batch32_sentences_per_second']:.1f}",
            f"{figures['xla_ms']:.1f}",
            f"{figures['over_xla']:.2f}",
        ]
        if before:
            then = before_saved_model(before, figures["search"], figures["intra_op_threads"])
            cells += before_cells(then, figures["p50_ms"])
        lines.append(row(*cells))
    return "\n".join(lines)


def served_table(results, before):
    rows = results["served_path"]
    batches = list(rows[0]["ms"])  # in the order measured (bench.SERVED_BATCHES)
    earlier = before["served_path"] if before and "served_path" in before else None
    compared = [b for b in batches if earlier and b in earlier[0]["ms"]]
    split = results.get("served_split") if "same_split" in rows[0] else None
    columns = (
        *(("search", "l"), ("engine", "l"), ("TensorFlow", "l")),
        *((f"batch {b} ms/sentence", "r") for b in batches),
        *((f"batch {b} over CTranslate2 float32", "r") for b in batches),
        ("same as SavedModel", "r"),
        *(((f"same as SavedModel, all {split}", "r"),) if split else ()),
        *(column for b in compared for column in ((f"before: batch {b}", "r"), ("speed-up", "r"))),
    )
    lines = table_header(columns)
    for figures in rows:
        float32 = next(
            r
            for r in rows
            if (r["search"], r["setting"], r["engine"])
            == (figures["search"], figures["setting"], "CTranslate2 float32")
        )
        ms = figures["ms"]
        cells = [
            figures["search"],
            figures["engine"],
            figures["setting"],
            *(f"{ms[b]:.2f}" for b in batches),
            *(f"{ms[b] / float32['ms'][b]:.2f}" for b in batches),
            f"{figures['same']}/{results['served_sentences']}",
        ]
        if split:
            cells.append(f"{figures['same_split']}/{split}")
        then = next(
            (
                r
                for r in earlier or ()
                if (r["search"], r["engine"], r["setting"])
                == (figures["search"], figures["engine"], figures["setting"])
            ),
            None,
        )
        for b in compared:
            cells += before_cells(then["ms"][b] if then else None, ms[b])
        lines.append(row(*cells))
    return "\n".join(lines)


# The profile's op types by what they do; the rest are element-wise ops and the loop's own.
OP_KINDS = {
    "matmuls: projections, feed-forward, logits": (
        "MatMul",
        "_MklMatMul",
        "_MklNativeFusedMatMul",
        "_FusedMatMul",
        "BiasAdd",
    ),
    "attention: scores and weighted values (batched matmuls)": (
        "BatchMatMulV2",
        "_MklBatchMatMulV2",
    ),
    "softmax and log-softmax": ("Softmax", "_MklSoftmax", "LogSoftmax"),
    "cache: writes, beam reordering, shrinking (gather, scatter, concat)": (
        "GatherV2",
        "TensorScatterUpdate",
        "ConcatV2",
    ),
    "top-k": ("TopKV2",),
}


def op_kinds(profile):
    """ms per decoding step of each kind of op (OP_KINDS, then the rest), and the wall time."""
    per_step = 1000 / max(profile["steps"], 1)
    kinds = {kind: 0.0 for kind in (*OP_KINDS, "element-wise and the rest")}
    for op, seconds in profile["ops"].items():
        kind = next((k for k, ops in OP_KINDS.items() if op in ops), "element-wise and the rest")
        kinds[kind] += seconds * per_step
    kinds["wall time"] = profile["seconds"] * per_step
    return kinds


def step_profile_table(profile, earlier):
    """The op kinds of `profile` (a probe's step_profile), beside an `earlier` one if given."""
    after = op_kinds(profile)
    then = op_kinds(earlier) if earlier else None
    columns = (("ops", "l"), ("ms per step", "r"), ("share of op time", "r"))
    if then:
        columns += (("before: ms per step", "r"), ("before: share", "r"))
    lines = table_header(columns)
    totals = [
        sum(v for k, v in kinds.items() if k != "wall time") for kinds in (after, then) if kinds
    ]
    for kind, ms in after.items():
        cells = [kind, f"{ms:.2f}", "" if kind == "wall time" else f"{100 * ms / totals[0]:.0f}%"]
        if then:
            share = "" if kind == "wall time" else f"{100 * then[kind] / totals[1]:.0f}%"
            cells += [f"{then[kind]:.2f}", share]
        lines.append(row(*cells))
    return "\n".join(lines)


def memory_table(results):
    columns = (
        ("work", "l"),
        *(("peak MiB", "r"), ("added by the work, MiB", "r"), ("GPU:0 peak MiB", "r")),
    )
    lines = table_header(columns)
    for what, figures in results["memory"].items():
        gpu = f"{figures['gpu_peak_mib']:.0f}" if "gpu_peak_mib" in figures else "no GPU"
        lines.append(row(what, f"{figures['peak_mib']:.0f}", f"{figures['added_mib']:.0f}", gpu))
    return "\n".join(lines)


def markdown_path(results_path):
    """The report beside a results file: results.json -> README.md, GPU.json -> GPU.md."""
    name = "README.md" if results_path.name == "results.json" else results_path.stem + ".md"
    return results_path.parent / name


def add_before(parser, note=""):
    """--before, of this program and benchmarks.bench."""
    parser.add_argument(
        "--before",
        type=pathlib.Path,
        default=None,
        help="an earlier run's results.json: the decoding and SavedModel tables then give its "
        "figures beside the run's, and the speed-up" + note,
    )


def build_parser():
    parser = flags.parser(__doc__, "benchmarks.report")
    results = pathlib.Path("benchmarks/results.json")
    flags.add_table(
        parser, ("--results", pathlib.Path, results, "a benchmark run's results.json (bench.py)")
    )
    flags.add_output(
        parser,
        "the Markdown report ('-': standard output; default: beside the results, README.md for "
        "results.json, NAME.md for NAME.json)",
    )
    add_before(parser, " (default: the one the results name, if any)")
    return parser


def read_json(path, flag):
    """The JSON in `path`, or the program ends with `error: FLAG PATH: why`."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        console.fail(f"{flag} {path}: {error}")


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)
    results = read_json(args.results, "--results")
    if args.before:
        results["before"] = str(args.before)
    before = None
    if "before" in results:
        before = read_json(pathlib.Path(results["before"]), "--before")
    text = render(results, before)
    output = args.output or markdown_path(args.results)
    if str(output) == "-":
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        print(f"report written to {output}")


if __name__ == "__main__":
    main()

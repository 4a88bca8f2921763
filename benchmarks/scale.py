"""Binarizing and loading at scale: `python -m training.binarize` on synthetic corpora of three
sizes with 1 and 2 --workers, beside sentencepiece's own encoder on the same lines, and the
binarized loader beside one H200's appetite. Writes benchmarks/SCALE.md and SCALE.json.

    python -m benchmarks.scale                 # 100,000, 1,000,000 and 4,000,000 pairs
    python -m benchmarks.scale --quick --text pairs.tsv --output /tmp/SCALE.md   # the tests

The corpora: sentences of words drawn from the sentence pairs of the Ding corpus (or --text),
each word with Zipf's law (probability 1/rank, ranked by frequency there), lengths from a gamma
distribution (22.5 words on average), the target about as long as its source, seeded; each size
the first pairs of one stream, written as tsv:DIR in a folder of $TMPDIR that is removed at the
end. One tokenizer of 4,000 pieces (--quick: 1,000 and 3,000 pairs, 400 pieces) is trained on a
sample of the smallest. Each binarize run is a fresh process: its rate is the split's time that
it reports (its start, imports and tokenizer left out), its peak memory the most that it and its
workers held resident together (polled from /proc).
"""

import datetime
import filecmp
import json
import os
import pathlib
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from keras_transformer_cli import console, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPU_RESULTS = ROOT / "benchmarks" / "GPU.json"
SIZES = (100_000, 1_000_000, 4_000_000)
VOCABULARY, QUICK_SIZES, QUICK_VOCABULARY = 4000, (1_000, 3_000), 400
BLOCK = 100_000  # pairs drawn at a time
TOKENIZER_SAMPLE = 100_000  # pairs of the smallest corpus the tokenizer is trained on
ENCODER_PAIRS = 1_000_000  # pairs of the largest corpus sentencepiece alone encodes
PAGE = os.sysconf("SC_PAGE_SIZE")
# The targets ("Done when").
MEMORY_GROWTH, WORKER_SPEEDUP, OF_SENTENCEPIECE, LOADER_OVER_GPU = 1.5, 1.7, 0.75, 10
SPLIT_LINE = re.compile(r"^train: (\d+) pairs read in ([\d.]+) s", re.M)


def ranked_words(pairs):
    """Each side's words ranked by frequency in `pairs`, most frequent first."""
    import collections

    return [
        [word for word, _ in collections.Counter(w for s in side for w in s.split()).most_common()]
        for side in zip(*pairs)
    ]


def draw_sentences(rng, words, lengths):
    """Sentences of `lengths` words each, each word drawn with probability 1/rank."""
    chances = 1 / np.arange(1, len(words) + 1)
    drawn = np.asarray(words, dtype=object)[
        rng.choice(len(words), lengths.sum(), p=chances / chances.sum())
    ].tolist()
    ends = np.cumsum(lengths)
    return [" ".join(drawn[end - length : end]) for end, length in zip(ends, lengths)]


def write_corpora(words, sizes, directory, seed=0):
    """tsv:DIR corpora of each of `sizes` pairs, each the first pairs of one seeded stream;
    returns {size: DIR}."""
    rng = np.random.default_rng(seed)
    folders = {size: directory / f"corpus-{size}" for size in sizes}
    files = {
        size: (folder.mkdir(parents=True) or (folder / "train.tsv").open("w"))
        for size, folder in folders.items()
    }
    for start in range(0, max(sizes), BLOCK):
        count = min(BLOCK, max(sizes) - start)
        source_lengths = np.clip(rng.gamma(2.5, 9.0, count).round(), 1, 120).astype(int)
        target_lengths = np.clip(source_lengths * rng.lognormal(0, 0.15, count), 1, 120)
        sources = draw_sentences(rng, words[0], source_lengths)
        targets = draw_sentences(rng, words[1], target_lengths.round().astype(int))
        lines = [f"{source}\t{target}\n" for source, target in zip(sources, targets)]
        for size, handle in files.items():
            handle.writelines(lines[: max(0, size - start)])
    for handle in files.values():
        handle.close()
    return folders


def train_tokenizer(corpus, vocab_size, path):
    """A tokenizer of `vocab_size` pieces trained on the first pairs of tsv:`corpus`."""
    import keras_transformer as kt

    with (corpus / "train.tsv").open() as lines:
        texts = [
            side
            for _, line in zip(range(TOKENIZER_SAMPLE), lines)
            for side in line.rstrip("\n").split("\t")
        ]
    return kt.SubwordTokenizer.train(texts, vocab_size, path)


def resident_bytes(root):
    """The bytes resident in process `root` and all its descendants, now (from /proc)."""
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        try:
            total += int(pathlib.Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
            for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
                pending += map(int, (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            continue
    return total


def run_binarize(corpus, tokenizer, workers, out):
    """`python -m training.binarize` of tsv:`corpus` into `out` in a fresh process: the pairs
    read, the split's seconds and pairs/s as it reports them, the CPU seconds of the process
    and its workers (their start included), their peak resident memory summed, the machine's
    load average while it ran (its own processes count), and the folder's size."""
    command = [
        sys.executable,
        "-m",
        "training.binarize",
        "--dataset",
        f"tsv:{corpus}",
        "--splits",
        "train",
        "--tokenizer",
        str(tokenizer),
        "--workers",
        str(workers),
        "--output",
        str(out),
    ]
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=ROOT)
        peak, loads = 0, []
        while process.poll() is None:
            peak = max(peak, resident_bytes(process.pid))
            loads.append(os.getloadavg()[0])
            time.sleep(0.2)
        output.seek(0)
        printed = output.read()
    found = SPLIT_LINE.search(printed)
    if process.returncode or not found:
        raise RuntimeError(f"{' '.join(command)} failed: {printed[-2000:]}")
    pairs, seconds = int(found.group(1)), float(found.group(2))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "pairs": pairs,
        "workers": workers,
        "seconds": seconds,
        "pairs_per_second": pairs / seconds,
        "cpu_seconds": sum(getattr(after, f) - getattr(used, f) for f in ("ru_utime", "ru_stime")),
        "peak_bytes": peak,
        "load_average": float(np.mean(loads)),
        "disk_bytes": sum(path.stat().st_size for path in out.iterdir()),
    }


def same_files(first, second):
    """Whether two folders hold the same files, byte for byte."""
    names = sorted(path.name for path in first.iterdir())
    if names != sorted(path.name for path in second.iterdir()):
        return False
    return all(filecmp.cmp(first / name, second / name, shallow=False) for name in names)


def sentencepiece_rate(corpus, tokenizer, limit):
    """Pairs/s of sentencepiece's own encoder (one process, one thread) on both sides of the
    first `limit` pairs of tsv:`corpus`, read a block at a time, only the encoding timed."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(tokenizer))
    seconds, pairs = 0.0, 0
    with (corpus / "train.tsv").open() as lines:
        while pairs < limit:
            block = [line.rstrip("\n").split("\t") for _, line in zip(range(BLOCK), lines)]
            block = block[: limit - pairs]
            if not block:
                break
            sides = list(zip(*block))
            start = time.perf_counter()
            for side in sides:
                processor.encode(list(side), num_threads=1)
            seconds += time.perf_counter() - start
            pairs += len(block)
    return {"pairs": pairs, "pairs_per_second": pairs / seconds}


def loader_rate(folder, tokens_per_batch):
    """Target tokens/s of `Binarized.batches` (one shuffled pass over the train split of
    `folder`, this thread): the real target tokens, and the batches' target slots with their
    padding."""
    from keras_transformer.data.binarized import Binarized

    data = Binarized(folder)
    start = time.perf_counter()
    batches = real = slots = 0
    for _, target_out, _ in data.batches("train", tokens_per_batch, repeat=False):
        batches += 1
        real += int(np.count_nonzero(target_out))
        slots += target_out.size
    seconds = time.perf_counter() - start
    return {
        "tokens_per_batch": tokens_per_batch,
        "batches": batches,
        "seconds": seconds,
        "target_tokens_per_second": real / seconds,
        "target_slots_per_second": slots / seconds,
    }


def gpu_appetite():
    """One accelerator's target tokens/s at the base preset, as benchmarks/GPU.json records."""
    try:
        results = json.loads(GPU_RESULTS.read_text())
        rate = results["models"]["base"]["ours"]["target_tokens_per_second"]
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(
            f"{GPU_RESULTS} holds no base-preset rate ({error}): run python -m benchmarks.gpu"
        ) from None
    info = results["information"]
    return {"device": info["device"], "date": info["date"], "target_tokens_per_second": rate}


def information(argv):
    import sentencepiece

    model = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line),
        platform.machine(),
    )
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{model}, {len(os.sched_getaffinity(0))} CPU cores, "
        f"{os.sysconf('SC_PHYS_PAGES') * PAGE / 2**30:.0f} GiB",
        "load_average": os.getloadavg()[0],
        "niceness": os.nice(0),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sentencepiece": sentencepiece.__version__,
        "arguments": argv,
    }


def targets(results):
    """[(target, measured, met)]: the issue's "Done when" rows that the results so far allow,
    the speeds at the largest size."""
    runs = {(run["size"], run["workers"]): run for run in results["runs"]}
    smallest = min((size for size, _ in runs), default=None)
    largest = {w: run for (size, w), run in runs.items() if size == max(s for s, _ in runs)}
    rows = []
    for workers, run in sorted(largest.items()):
        if run["size"] > smallest and (smallest, workers) in runs:
            growth = run["peak_bytes"] / runs[smallest, workers]["peak_bytes"]
            target = f"peak memory, {workers} worker(s), {run['size']:,} pairs against {smallest:,}"
            rows.append(
                (f"{target}: at most {MEMORY_GROWTH}x", f"{growth:.2f}x", growth <= MEMORY_GROWTH)
            )
    if 1 in largest and 2 in largest:
        speedup = largest[2]["pairs_per_second"] / largest[1]["pairs_per_second"]
        target = f"2 workers against 1: at least {WORKER_SPEEDUP}x"
        rows.append((target, f"{speedup:.2f}x", speedup >= WORKER_SPEEDUP))
    for workers, run in sorted(largest.items()) if "sentencepiece" in results else ():
        share = run["pairs_per_second"] / workers / results["sentencepiece"]["pairs_per_second"]
        target = f"each of {workers} worker(s) against sentencepiece alone"
        rows.append(
            (
                f"{target}: at least {OF_SENTENCEPIECE:.0%}",
                f"{share:.0%}",
                share >= OF_SENTENCEPIECE,
            )
        )
    compared = [run["same_as_first"] for run in runs.values() if "same_as_first" in run]
    if compared:
        target = "the same bytes for any number of workers, at every size"
        rows.append((target, f"{sum(compared)} of {len(compared)} alike", all(compared)))
    if "loader" in results:
        rate = results["loader"]["target_tokens_per_second"]
        ratio = rate / results["gpu"]["target_tokens_per_second"]
        target = f"the loader against one {results['gpu']['device']}: at least {LOADER_OVER_GPU}x"
        rows.append((target, f"{ratio:.1f}x", ratio >= LOADER_OVER_GPU))
    return rows


def report(results):
    """SCALE.md from the results so far."""
    info = results["information"]
    lines = [
        "# Binarizing and loading at scale (`python -m benchmarks.scale`)",
        "",
        f"{info['date']}: {info['machine']}, load average {info['load_average']:.1f} at the "
        f"start, niceness {info['niceness']}; Python {info['python']}, numpy {info['numpy']}, "
        f"sentencepiece {info['sentencepiece']}. Command: "
        f"`{' '.join(['python -m benchmarks.scale', *info['arguments']])}`.",
        "",
        f"Synthetic corpora (see the module's docstring): words of {results['text']} drawn "
        "with Zipf's law, written as tsv:DIR; one tokenizer of "
        f"{results['tokenizer']['vocab_size']:,} pieces. Each `python -m training.binarize` run "
        "is a fresh process; pairs/s from the time it reports for the split (the first split's "
        "time includes the workers' start); CPU per pair: the CPU time of the process and its "
        "workers, their start included, over the pairs; load average: the machine's (1 minute) "
        "while the run ran, its own processes included (on an idle machine about the workers' "
        "number: more means other programs took cores from it); peak memory: the process and "
        "its workers resident together, polled from /proc.",
        "",
        "## The issue's targets",
        "",
        "| target | measured | met |",
        "| --- | ---: | --- |",
        *(
            f"| {target} | {measured} | {'yes' if met else 'no'} |"
            for target, measured, met in targets(results)
        ),
    ]
    lines += runs_section(results)
    if "loader" in results:
        lines += loader_section(results["loader"], results["gpu"])
    return "\n".join(lines) + "\n"


def runs_section(results):
    limit = results.get("sentencepiece", {}).get("pairs_per_second")
    lines = [
        "",
        "## `training.binarize`",
        "",
        "| pairs | workers | pairs/s | each worker, of sentencepiece alone | CPU per pair | "
        "load average | peak memory | disk per million pairs | same bytes as the first |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for run in results.get("runs", []):
        share = f"{run['pairs_per_second'] / run['workers'] / limit:.0%}" if limit else "-"
        same = {True: "yes", False: "no"}.get(run.get("same_as_first"), "-")
        cpu, disk = (run[kind] / run["pairs"] for kind in ("cpu_seconds", "disk_bytes"))
        lines.append(
            f"| {run['size']:,} | {run['workers']} | {run['pairs_per_second']:,.0f} | {share} | "
            f"{cpu * 1e6:,.0f} µs | {run['load_average']:.1f} | "
            f"{run['peak_bytes'] / 2**20:,.0f} MiB | {disk * 1e6 / 2**20:,.0f} MiB | {same} |"
        )
    if limit:
        encoder = results["sentencepiece"]
        lines += [
            "",
            f"sentencepiece alone (`SentencePieceProcessor.encode`, one process, one thread) on "
            f"both sides of the first {encoder['pairs']:,} pairs of the largest corpus: "
            f"{limit:,.0f} pairs/s.",
        ]
    sizes = results.get("corpora", {})
    lines += [
        "",
        "Corpora as TSV: "
        + ", ".join(
            f"{int(size):,} pairs {size_bytes / 2**20:,.0f} MiB"
            for size, size_bytes in sizes.items()
        )
        + ".",
    ]
    return lines


def loader_section(loader, gpu):
    return [
        "",
        f"## The binarized loader at {loader['tokens_per_batch']:,} tokens a batch (base preset)",
        "",
        f"`Binarized.batches` over the largest folder, one shuffled pass in one thread: "
        f"{loader['batches']:,} batches in {loader['seconds']:.1f} s, "
        f"{loader['target_tokens_per_second']:,.0f} target tokens/s "
        f"({loader['target_slots_per_second']:,.0f} with their padding); one {gpu['device']} "
        f"trains the base preset on {gpu['target_tokens_per_second']:,.0f} target tokens/s "
        f"(benchmarks/GPU.md, {gpu['date']}): "
        f"{loader['target_tokens_per_second'] / gpu['target_tokens_per_second']:.1f}x.",
    ]


def text_pairs(path):
    """The pairs whose words the corpora are drawn from: tsv `path`'s, or the Ding corpus's
    sentence pairs (training split)."""
    if path is not None:
        from keras_transformer.data import read_tsv

        return read_tsv(path).pairs
    from keras_transformer.data import ding

    pairs = ding.load("train", ding.prepare(verbose=0)).as_numpy_iterator()
    return [(source.decode(), target.decode()) for source, target in pairs]


def measure(args, results, work, write):
    """Every measurement in turn, `write()` after each: a run cut short keeps its rows."""
    import keras_transformer as kt

    corpora = write_corpora(ranked_words(text_pairs(args.text)), args.sizes, work)
    results["corpora"] = {size: (c / "train.tsv").stat().st_size for size, c in corpora.items()}
    vocab_size = QUICK_VOCABULARY if args.quick else VOCABULARY
    tokenizer = train_tokenizer(corpora[min(args.sizes)], vocab_size, work / "tok.model")
    results["tokenizer"] = {"vocab_size": tokenizer.vocab_size}
    for size in args.sizes:
        outputs = {}
        for workers in args.worker_counts:
            outputs[workers] = work / f"binarized-{size}-{workers}"
            run = {
                "size": size,
                **run_binarize(corpora[size], tokenizer.path, workers, outputs[workers]),
            }
            if workers != args.worker_counts[0]:
                run["same_as_first"] = same_files(outputs[args.worker_counts[0]], outputs[workers])
                shutil.rmtree(outputs[workers])
            results["runs"].append(run)
            write()
        if size != max(args.sizes):
            shutil.rmtree(outputs[args.worker_counts[0]])
    largest = max(args.sizes)
    results["sentencepiece"] = sentencepiece_rate(corpora[largest], tokenizer.path, ENCODER_PAIRS)
    write()
    tokens = kt.TransformerConfig.preset("base", vocab_size=tokenizer.vocab_size).tokens_per_batch
    results["loader"] = loader_rate(work / f"binarized-{largest}-{args.worker_counts[0]}", tokens)
    write()


def build_parser():
    parser = flags.parser(__doc__, "benchmarks.scale")
    parser.add_argument(
        "--sizes",
        type=flags.COUNT,
        nargs="+",
        default=None,
        help=f"the corpora's pairs (default: {' '.join(map(str, SIZES))})",
    )
    parser.add_argument(
        "--worker-counts",
        type=flags.COUNT,
        nargs="+",
        default=[1, 2],
        help="the --workers of training.binarize to compare, each at every size",
    )
    parser.add_argument(
        "--text",
        type=pathlib.Path,
        default=None,
        help="a TSV of pairs whose words the corpora are drawn from (default: the Ding "
        "corpus's sentence pairs)",
    )
    flags.add_quick(parser)
    flags.add_output(
        parser,
        "the report (its data go beside it as .json)",
        default=ROOT / "benchmarks" / "SCALE.md",
    )
    return parser


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)
    args.sizes = sorted(args.sizes or (QUICK_SIZES if args.quick else SIZES))
    if args.text is not None and not args.text.is_file():
        console.fail(f"--text {args.text}: no such file", status=2)
    try:
        gpu = gpu_appetite()
    except ValueError as error:
        console.fail(error)
    results = {
        "information": information(sys.argv[1:] if argv is None else argv),
        "gpu": gpu,
        "text": str(args.text) if args.text else "the Ding corpus's sentence pairs",
        "runs": [],
    }

    def write():
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.with_suffix(".json").write_text(json.dumps(results, indent=2))
        args.output.write_text(report(results))

    work = pathlib.Path(tempfile.mkdtemp(prefix="scale-"))
    try:
        measure(args, results, work, write)
    finally:
        shutil.rmtree(work)
    print(f"written: {args.output}, {args.output.with_suffix('.json')}")


if __name__ == "__main__":
    main()

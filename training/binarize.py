"""Tokenize a dataset's splits once into binarized data (memory-mapped token ids), which
`python -m training.train --dataset binarized:DIR` trains from without TensorFlow, e.g. on a GPU
machine that has only JAX or PyTorch.

    python -m training.binarize --dataset ding --phrases --vocab-size 4000 --output data/ding
    python -m training.binarize --dataset tsv:corpus --tokenizer runs/demo/tokenizer.model \
        --workers 2 --output data/corpus

The tokenizer is --tokenizer, or a run's (--run-dir), or one trained on the training split as
`training.train` trains it (--vocab-size). Pairs a side of which is empty, or longer than
--max-length tokens with its bos or eos, are dropped and counted in DIR/index.json, as the
training pipeline drops them. Each split is read, tokenized (by --workers processes, as
fairseq-preprocess's --workers) and written a chunk at a time, so that memory holds a few chunks
whatever the corpus's size; the folder is the same for any number of workers, and is written
whole or not at all.
"""

import collections
import concurrent.futures
import contextlib
import functools
import itertools
import json
import multiprocessing
import pathlib
import signal
import sys
import time
import typing

import numpy as np

from keras_transformer.data import binarized
from keras_transformer.data.buckets import EMPTY, KEPT, TOO_LONG, drop_reasons
from keras_transformer.text import normalize_text
from keras_transformer_cli import console, flags

from .datasets import check_phrase_flags, phrase_mixture

SPLITS = ("train", "validation", "test")
CHUNK_PAIRS = 2048  # pairs read, tokenized and written at a time


def build_parser():
    parser = flags.parser(__doc__, "training.binarize")
    data = parser.add_argument_group("data")
    flags.add_dataset(data)
    flags.add_phrases(data)
    data.add_argument(
        "--splits",
        nargs="+",
        default=list(SPLITS),
        metavar="SPLIT",
        help="the splits to binarize; all but train also keep their text (the references of "
        "validation BLEU and of the test split)",
    )
    flags.add_corpus_shaping(data)
    flags.add_seed(data)
    vocabulary = parser.add_argument_group(
        "vocabulary: --tokenizer, a --run-dir's, or --vocab-size pieces trained now"
    )
    flags.add_tokenizer(vocabulary)
    flags.add_run_dir(vocabulary, required=False)
    flags.add_output(parser, "the binarized folder, e.g. data/ding (must not exist)", True)
    parser.add_argument(
        "--workers",
        type=flags.COUNT,
        default=1,
        help="processes that tokenize, a chunk of pairs each at a time (1: this process); the "
        "folder is the same for any number",
    )
    return parser


def check(args):
    """Refuses flags that cannot work, naming them."""
    given = [
        flag
        for flag, value in (
            ("--tokenizer", args.tokenizer),
            ("--run-dir", args.run_dir),
            ("--vocab-size", args.vocab_size),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise ValueError(f"give one of --tokenizer, --run-dir and --vocab-size, not {given}")
    check_phrase_flags(
        args.phrases, args.sentence_repeats, args.tag_phrases, args.sentence_alternatives
    )
    if "train" not in args.splits:
        raise ValueError("--splits must include train (what training.train trains on)")
    if len(set(args.splits)) != len(args.splits):
        raise ValueError(f"--splits {' '.join(args.splits)} names a split twice")
    if args.dataset.startswith("binarized:"):
        raise ValueError("--dataset binarized:DIR is binarized already")
    if args.run_dir is not None:
        from keras_transformer_cli.run_dir import RunDirectory

        args.tokenizer = RunDirectory(args.run_dir).tokenizer
        if not args.tokenizer.is_file():
            raise ValueError(f"--run-dir {args.run_dir}: no tokenizer.model in it")
    elif args.tokenizer is not None and not args.tokenizer.is_file():
        raise ValueError(f"--tokenizer {args.tokenizer}: no such file")
    if args.output.exists():
        raise FileExistsError(f"--output {args.output} exists; choose another or remove it")


def tokenizer_for(args, dataset, path):
    """The run's tokenizer, --tokenizer's, or one trained on the training split into `path`."""
    import keras_transformer as kt

    from .datasets import train_tokenizer

    if args.tokenizer:
        path.write_bytes(args.tokenizer.read_bytes())
        return kt.SubwordTokenizer.load(path)
    vocab_size = args.vocab_size or flags.DEFAULT_VOCAB_SIZE
    print(f"training a vocabulary of {vocab_size} pieces on the training split of {dataset.spec}")
    tokenizer = train_tokenizer(dataset, vocab_size, path)
    if tokenizer.vocab_size != vocab_size:
        print(f"the vocabulary has {tokenizer.vocab_size} pieces ({vocab_size} were asked for)")
    return tokenizer


class TokenizedChunk(typing.NamedTuple):
    """A chunk of pairs tokenized: `codes` [3] its pairs counted by drop code (buckets.KEPT,
    EMPTY, TOO_LONG), `ids` {side: the kept pairs' ids end to end}, `lengths` {side: each kept
    pair's length} and, when asked for, `text`: every pair as the lines of SPLIT.pairs.jsonl."""

    codes: np.ndarray
    ids: dict
    lengths: dict
    text: bytes | None


class PairTokenizer:
    """`SubwordTokenizer.tokenize` in Python, for chunks of pairs: `normalize_text`, then
    sentencepiece's own encoder on the tokenizer's model bytes, one thread (as the CTranslate2
    translator tokenizes). It needs no TensorFlow, so that a --workers process starts light.
    Pairs a side of which is empty, or longer than `max_length` tokens with its bos or eos, are
    counted and left out, as the training pipeline drops them."""

    def __init__(self, model_proto, max_length):
        import sentencepiece

        self.processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        self.max_length = max_length

    def encode(self, texts):
        """(the ids of `texts` end to end, int32; each text's length, int64)."""
        ids = self.processor.encode([normalize_text(text) for text in texts], num_threads=1)
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        return np.fromiter(itertools.chain.from_iterable(ids), np.int32, lengths.sum()), lengths

    def __call__(self, task):
        """The TokenizedChunk of `task`: (sources, targets, whether to keep the text)."""
        sources, targets, keep_text = task
        encoded = dict(zip(binarized.SIDES, map(self.encode, (sources, targets))))
        lengths = [encoded[side][1] for side in binarized.SIDES]
        codes = np.where(
            (lengths[0] == 0) | (lengths[1] == 0),
            EMPTY,
            np.where(np.maximum(*lengths) + 1 > self.max_length, TOO_LONG, KEPT),
        )
        kept = codes == KEPT
        return TokenizedChunk(
            np.bincount(codes, minlength=3),
            {side: ids[np.repeat(kept, length)] for side, (ids, length) in encoded.items()},
            {side: length[kept] for side, (_, length) in encoded.items()},
            binarized.text_lines(zip(sources, targets)) if keep_text else None,
        )


_worker = {}  # a --workers process's PairTokenizer


def start_worker(model_proto, max_length):
    """Starts a --workers process: its PairTokenizer; Ctrl-C is the main process's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker["tokenizer"] = PairTokenizer(model_proto, max_length)


def tokenize_in_worker(task):
    return _worker["tokenizer"](task)


def in_order(executor, function, tasks, ahead):
    """function(task) for each of `tasks`, computed by `executor`, in the order of the tasks,
    with at most `ahead` tasks in flight (`Executor.map` would read every task at once)."""
    pending = collections.deque()
    for task in tasks:
        pending.append(executor.submit(function, task))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


@contextlib.contextmanager
def chunk_tokenizer(model_proto, max_length, workers):
    """Yields tokenize(tasks), the TokenizedChunks of the tasks in their order: in this process
    with one worker; else in `workers` processes, started by spawn (fork would copy this
    process's TensorFlow threads mid-flight), two chunks each in flight. A worker that dies
    (killed, out of memory) raises BrokenProcessPool; the workers end with the block."""
    if workers == 1:
        tokenizer = PairTokenizer(model_proto, max_length)
        yield functools.partial(map, tokenizer)
        return
    executor = concurrent.futures.ProcessPoolExecutor(
        workers, multiprocessing.get_context("spawn"), start_worker, (model_proto, max_length)
    )
    try:
        yield functools.partial(in_order, executor, tokenize_in_worker, ahead=2 * workers)
    finally:
        executor.shutdown(cancel_futures=True)


def text_chunks(dataset, split, seed):
    """The split's pairs as (sources, targets) lists of strings, CHUNK_PAIRS at a time: a
    tsv:DIR or folder:DIR corpus read from its files a chunk of lines at a time (corpus_chunks),
    any other through tf.data (`Dataset.read`), so that no corpus is held whole."""
    from keras_transformer.data import corpus_chunks

    if dataset.kind == "tsv":
        chunks = corpus_chunks.tsv_chunks(dataset.root / f"{split}.tsv", CHUNK_PAIRS)
    elif dataset.kind == "folder":
        files = [dataset.root / f"{language}.{split}.txt" for language in dataset.languages]
        chunks = corpus_chunks.parallel_chunks(*files, CHUNK_PAIRS)
    else:
        batches = dataset.read(split, seed=seed).batch(CHUNK_PAIRS).prefetch(2)
        for sources, targets in batches.as_numpy_iterator():
            yield (
                [s.decode("utf-8", "replace") for s in sources],
                [t.decode("utf-8", "replace") for t in targets],
            )
        return
    for pairs in chunks:
        sources, targets = zip(*pairs)
        yield sources, targets


def binarize_split(texts, split, tokenize, max_length, directory):
    """Writes one split into `directory`, its `texts` ((sources, targets) chunks) tokenized by
    `tokenize` (`chunk_tokenizer`) as they are read; returns its index entry."""
    import keras

    keep_text = split != "train"
    codes = np.zeros(3, np.int64)
    progress = keras.utils.Progbar(None, unit_name="pair", verbose=1 if sys.stderr.isatty() else 0)
    start = time.perf_counter()
    with binarized.SplitWriter(directory, split, keep_text) as writer:
        for chunk in tokenize((sources, targets, keep_text) for sources, targets in texts):
            writer.add(chunk.ids, chunk.lengths, chunk.text)
            codes += chunk.codes
            progress.add(int(chunk.codes.sum()))
    seconds = time.perf_counter() - start
    reasons = drop_reasons(max_length)
    entry = {
        "read": int(codes.sum()),
        "pairs": int(codes[KEPT]),
        "dropped": {reasons[code]: int(codes[code]) for code in reasons if codes[code]},
        "tokens": writer.tokens,
        "text": keep_text,
    }
    dropped = ", ".join(f"{reason} {n}" for reason, n in entry["dropped"].items()) or "none"
    print(
        f"{split}: {entry['read']} pairs read in {seconds:.2f} s, {entry['pairs']} kept, dropped: "
        f"{dropped}; {entry['tokens']['source']} source and {entry['tokens']['target']} target "
        "tokens"
    )
    return entry


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)
    try:
        check(args)
        written = binarize(args)
    except (ValueError, FileExistsError) as error:
        console.fail(error)
    print(f"binarized data written to {written}: train with --dataset binarized:{written}")


def binarize(args):
    """Writes the folder of `args` (checked); returns its path."""
    from keras_transformer_cli.files import new_directory

    from .datasets import Dataset

    dataset = Dataset(
        args.dataset,
        args.source_language,
        args.target_language,
        args.data_dir,
        args.download,
        args.phrases,
        args.sentence_repeats,
        args.tag_phrases,
        args.sentence_alternatives,
    )
    with new_directory(args.output) as (directory, _):
        tokenizer = tokenizer_for(args, dataset, directory / binarized.TOKENIZER_FILE)
        splits = binarize_splits(args, dataset, tokenizer, directory)
        if not splits["train"]["pairs"]:
            raise ValueError(
                f"the train split of {dataset.spec} leaves no pair within --max-length "
                f"{args.max_length}: raise --max-length or check the data"
            )
        index = index_of(args, dataset, tokenizer, splits, directory)
        (directory / binarized.INDEX_FILE).write_text(json.dumps(index, indent=2))
    return pathlib.Path(args.output)


def binarize_splits(args, dataset, tokenizer, directory):
    """Writes each of --splits into `directory`; returns {split: its index entry}."""
    splits = {}
    with chunk_tokenizer(tokenizer.model_proto, args.max_length, args.workers) as tokenize:
        for split in args.splits:
            texts = text_chunks(dataset, split, args.seed)
            try:
                splits[split] = binarize_split(texts, split, tokenize, args.max_length, directory)
            except concurrent.futures.BrokenExecutor:
                raise ValueError(
                    f"--workers {args.workers}: a worker process ended abruptly (killed, or out "
                    f"of memory?) while tokenizing the {split} split; run it again"
                ) from None
            except Exception as error:  # a missing file, an unknown tfds split: named
                raise ValueError(
                    f"--splits {split}: the split of {dataset.spec} cannot be read ({error})"
                ) from None
    return splits


def index_of(args, dataset, tokenizer, splits, directory):
    """The folder's index.json (binarized.py's docstring)."""
    return {
        "format": binarized.FORMAT,
        "version": binarized.VERSION,
        "tokenizer": {
            "file": binarized.TOKENIZER_FILE,
            "sha256": binarized.sha256_of(directory / binarized.TOKENIZER_FILE),
            "vocab_size": tokenizer.vocab_size,
        },
        "max_length": args.max_length,
        "dataset": args.dataset,
        "languages": list(dataset.languages),
        "phrases": phrase_mixture(
            args.phrases, args.sentence_repeats, args.tag_phrases, args.sentence_alternatives
        ),
        "seed": args.seed,
        "splits": splits,
    }


if __name__ == "__main__":
    main()

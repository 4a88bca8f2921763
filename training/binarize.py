"""Tokenize a dataset's splits once into binarized data (memory-mapped token ids), which
`python -m training.train --dataset binarized:DIR` trains from without TensorFlow, e.g. on a GPU
machine that has only JAX or PyTorch.

    python -m training.binarize --dataset ding --phrases --vocab-size 4000 --output data/ding
    python -m training.binarize --dataset tsv:corpus --tokenizer runs/demo/tokenizer.model \
        --output data/corpus

The tokenizer is --tokenizer, or a run's (--run-dir), or one trained on the training split as
`training.train` trains it (--vocab-size). Pairs a side of which is empty, or longer than
--max-length tokens with its bos or eos, are dropped and counted in DIR/index.json, as the
training pipeline drops them. The folder is written whole or not at all.
"""

import json
import pathlib
import sys

from keras_transformer_cli import console, flags

from .datasets import check_phrase_flags, phrase_mixture

SPLITS = ("train", "validation", "test")


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


def tokenized(dataset, split, tokenizer, seed, chunk=4096):
    """Yields (sources, targets, source ids, target ids) of the split in chunks: two lists of
    strings and two (flat ids, row offsets) pairs."""

    def tokenize(sources, targets):
        return sources, targets, tokenizer.tokenize(sources), tokenizer.tokenize(targets)

    texts = dataset.read(split, seed=seed).batch(chunk)
    for sources, targets, source_ids, target_ids in texts.map(tokenize).prefetch(2):
        yield (
            [s.decode("utf-8") for s in sources.numpy()],
            [t.decode("utf-8") for t in targets.numpy()],
            *(
                (ids.flat_values.numpy(), ids.row_splits.numpy())
                for ids in (source_ids, target_ids)
            ),
        )


def binarize_split(dataset, split, tokenizer, max_length, directory, seed):
    """Writes one split into `directory`; returns its index entry."""
    import keras
    import numpy as np

    from keras_transformer.data import binarized
    from keras_transformer.data.buckets import EMPTY, KEPT, TOO_LONG, dropped_counts

    kept = {"source": [], "target": []}
    texts, codes = [], []
    progress = keras.utils.Progbar(None, unit_name="pair", verbose=1 if sys.stderr.isatty() else 0)
    for sources, targets, (source_flat, source_rows), (target_flat, target_rows) in tokenized(
        dataset, split, tokenizer, seed
    ):
        lengths = [np.diff(source_rows), np.diff(target_rows)]
        code = np.where(
            (lengths[0] == 0) | (lengths[1] == 0),
            EMPTY,
            np.where(np.maximum(*lengths) + 1 > max_length, TOO_LONG, KEPT),
        )
        for i in np.flatnonzero(code == KEPT):
            kept["source"].append(source_flat[source_rows[i] : source_rows[i + 1]])
            kept["target"].append(target_flat[target_rows[i] : target_rows[i + 1]])
        codes.append(code)
        if split != "train":
            texts += zip(sources, targets)
        progress.add(len(sources))
    codes = np.concatenate(codes) if codes else np.zeros(0, int)
    tokens = binarized.write_split(
        directory, split, kept["source"], kept["target"], texts if split != "train" else None
    )
    entry = {
        "read": len(codes),
        "pairs": len(kept["source"]),
        "dropped": dict(dropped_counts(codes, max_length)),
        "tokens": tokens,
        "text": split != "train",
    }
    dropped = ", ".join(f"{reason} {n}" for reason, n in entry["dropped"].items()) or "none"
    print(
        f"{split}: {entry['read']} pairs read, {entry['pairs']} kept, dropped: {dropped}; "
        f"{tokens['source']} source and {tokens['target']} target tokens"
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
    from keras_transformer.data import binarized
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
        splits = {}
        for split in args.splits:
            try:
                splits[split] = binarize_split(
                    dataset, split, tokenizer, args.max_length, directory, args.seed
                )
            except Exception as error:  # a missing file, an unknown tfds split: named
                raise ValueError(
                    f"--splits {split}: the split of {dataset.spec} cannot be read ({error})"
                ) from None
        if not splits["train"]["pairs"]:
            raise ValueError(
                f"the train split of {dataset.spec} leaves no pair within --max-length "
                f"{args.max_length}: raise --max-length or check the data"
            )
        index = {
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
        (directory / binarized.INDEX_FILE).write_text(json.dumps(index, indent=2))
    return pathlib.Path(args.output)


if __name__ == "__main__":
    main()

"""Parallel text from local files: the `{lang}.{split}.txt` folder layout of
`tfds.TranslateFolder`, and TSV files of `source<TAB>target`.

Every reader returns a `Corpus`: the sentence pairs and a count of what was skipped and why.
Bad input (a missing file, invalid UTF-8, files of different lengths, a TSV line without its
tab) raises `CorpusError` naming the file and line. Lines that are empty on either side are
skipped and counted, never dropped silently.
"""

import collections
import dataclasses
import pathlib

import tensorflow as tf


class CorpusError(ValueError):
    """Bad corpus input; the message names the file and line."""


@dataclasses.dataclass
class Corpus:
    """Sentence pairs and the counts of pairs skipped by reason; `alternatives`, groups of
    other translations a source lists (Ding's), training data only."""

    pairs: list
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    alternatives: list = dataclasses.field(default_factory=list)

    def __len__(self):
        return len(self.pairs)

    def dataset(self):
        """A tf.data.Dataset of (source, target) scalar strings."""
        sources = tf.constant([source for source, _ in self.pairs], tf.string)
        targets = tf.constant([target for _, target in self.pairs], tf.string)
        return tf.data.Dataset.from_tensor_slices((sources, targets))


def read_lines(path):
    """The lines of a UTF-8 text file, without line endings or a byte-order mark."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such file")
    lines = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                lines.append(raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as error:
                raise CorpusError(
                    f"{path}:{number}: invalid UTF-8 at byte {error.start} of the line "
                    f"({raw[max(0, error.start - 10) : error.start + 10]!r})"
                ) from None
    return lines


def pair_lines(pairs):
    """A Corpus of the (source, target) pairs, skipping and counting those with an empty side."""
    corpus = Corpus([])
    for source, target in pairs:
        source, target = source.strip(), target.strip()
        if source and target:
            corpus.pairs.append((source, target))
        else:
            corpus.skipped["empty line"] += 1
    return corpus


def read_parallel_files(source_path, target_path):
    """Pairs line i of `source_path` with line i of `target_path`."""
    sources, targets = read_lines(source_path), read_lines(target_path)
    if len(sources) != len(targets):
        raise CorpusError(
            f"{source_path} has {len(sources)} lines but {target_path} has {len(targets)}; "
            f"parallel files must have one line per sentence pair (first unpaired line: "
            f"{min(len(sources), len(targets)) + 1})"
        )
    return pair_lines(zip(sources, targets))


def read_translate_folder(root, split, source_language, target_language):
    """Reads `root/{source_language}.{split}.txt` and `root/{target_language}.{split}.txt`,
    the layout `tfds.TranslateFolder` reads."""
    root = pathlib.Path(root)
    return read_parallel_files(
        root / f"{source_language}.{split}.txt", root / f"{target_language}.{split}.txt"
    )


def read_tsv(path, reverse=False):
    """Reads lines `source<TAB>target` (the other way round with `reverse`)."""
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t") if line.strip() else ["", ""]
        if len(fields) != 2:
            raise CorpusError(
                f"{path}:{number}: expected 'source<TAB>target' (one tab), found "
                f"{len(fields) - 1} tabs in {line[:60]!r}"
            )
        pairs.append(fields[::-1] if reverse else fields)
    return pair_lines(pairs)

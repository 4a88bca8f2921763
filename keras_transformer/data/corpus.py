"""Parallel text from local files: the `{lang}.{split}.txt` folder layout of
`tfds.TranslateFolder`, and TSV files of `source<TAB>target`.

Every reader returns a `Corpus`: the sentence pairs and a count of what was skipped and why.
Bad input (a missing file, invalid UTF-8, files of different lengths, a TSV line without its
tab) raises `CorpusError` naming the file and line. Lines that are empty on either side are
skipped and counted, never dropped silently. Reading needs no TensorFlow (a serving client reads
its sentences by the same rule); `Corpus.dataset` does.
"""

import collections
import dataclasses
import pathlib


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
        import tensorflow as tf

        sources = tf.constant([source for source, _ in self.pairs], tf.string)
        targets = tf.constant([target for _, target in self.pairs], tf.string)
        return tf.data.Dataset.from_tensor_slices((sources, targets))


UTF8_BOM = b"\xef\xbb\xbf"


def read_lines(path):
    """The sentences of the text file `path`, one a line (`split_lines`); CorpusError naming
    the file when it cannot be read."""
    path = pathlib.Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except OSError as error:
        raise CorpusError(f"{path}: {error.strerror or error}") from None
    return split_lines(data, path)


def split_lines(data, name):
    """The lines of `data`, UTF-8 bytes read from `name`, one sentence each: split at \\n alone
    (a \\r before it dropped), so that form feeds, U+0085 and U+2028, where `str.splitlines`
    would also split, stay inside their sentence; a byte-order mark at the start dropped; no
    empty last line for a final \\n. Bytes that are not UTF-8 raise CorpusError
    `NAME:LINE: not UTF-8 (...)`."""
    data = data.removeprefix(UTF8_BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        column = error.start - line_start
        number = data.count(b"\n", 0, line_start) + 1
        shown = data[line_start:].partition(b"\n")[0][max(0, column - 20) : column + 10]
        raise CorpusError(
            f"{name}:{number}: not UTF-8 (byte {column + 1} of the line, in {shown!r}); convert "
            "it to UTF-8, e.g. with iconv -t UTF-8"
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


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
    return pair_parallel_lines(
        read_lines(source_path), read_lines(target_path), source_path, target_path
    )


def pair_parallel_lines(sources, targets, source_name, target_name):
    """Pairs line i of `sources` with line i of `targets`, the lines of `source_name` and
    `target_name`; CorpusError naming both when their counts differ."""
    if len(sources) != len(targets):
        raise CorpusError(
            f"{source_name} has {len(sources)} lines but {target_name} has {len(targets)}; "
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

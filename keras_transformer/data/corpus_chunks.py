"""The corpora of corpus.py read a chunk of lines at a time, so that a corpus larger than memory
can be binarized: the pairs of `read_tsv` and `read_parallel_files`, in their order, with their
`CorpusError`s (the file and line named; of a file with several faults, the first in reading
order). Needs no TensorFlow.
"""

import itertools
import pathlib

from keras_transformer.data.corpus import UTF8_BOM, CorpusError, pair_lines


def line_chunks(path, size):
    """Lists of `size` lines of the text file `path` (the last one shorter), split and decoded by
    the rule of `corpus.split_lines`: at \\n alone, a \\r before it dropped, a byte-order mark at
    the start dropped; the same CorpusError for the first line that is not UTF-8."""
    path = pathlib.Path(path)
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except OSError as error:
        raise CorpusError(f"{path}: {error.strerror or error}") from None
    with handle:
        number = 1
        while data := list(itertools.islice(handle, size)):  # a binary file splits at \n alone
            if number == 1:
                data[0] = data[0].removeprefix(UTF8_BOM)
            try:
                text = b"".join(data).decode("utf-8")
            except UnicodeDecodeError:
                raise not_utf8(path, number, data) from None
            lines = text.split("\n")[: len(data)]  # the last line's \n leaves an empty string
            yield [line.removesuffix("\r") for line in lines] if "\r" in text else lines
            number += len(data)


def not_utf8(path, first, data):
    """`corpus.split_lines`'s CorpusError for the first line of `data` (lines of bytes, numbered
    from `first`, one of which is not UTF-8) that is not UTF-8."""
    for number, line in enumerate(data, start=first):
        line = line.removesuffix(b"\n")
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            shown = line[max(0, error.start - 20) : error.start + 10]
            return CorpusError(
                f"{path}:{number}: not UTF-8 (byte {error.start + 1} of the line, in {shown!r}); "
                "convert it to UTF-8, e.g. with iconv -t UTF-8"
            )


def tsv_chunks(path, size):
    """Lists of the pairs of `size` lines of the TSV file `path` at a time (those with an empty
    side left out, lists left empty skipped): `read_tsv(path).pairs`, in chunks."""
    number = 1
    for lines in line_chunks(path, size):
        fields = [line.split("\t") if line.strip() else ["", ""] for line in lines]
        if set(map(len, fields)) != {2}:
            offset, row = next((i, row) for i, row in enumerate(fields) if len(row) != 2)
            raise CorpusError(
                f"{path}:{number + offset}: expected 'source<TAB>target' (one tab), found "
                f"{len(row) - 1} tabs in {lines[offset][:60]!r}"
            )
        number += len(lines)
        if pairs := pair_lines(fields).pairs:
            yield pairs


def parallel_chunks(source_path, target_path, size):
    """Lists of the pairs of `size` lines of two parallel files at a time, line i of one with
    line i of the other: `read_parallel_files(...).pairs`, in chunks; CorpusError naming both
    files and their line counts when one ends before the other."""
    sources, targets = line_chunks(source_path, size), line_chunks(target_path, size)
    paired = 0
    for source_lines, target_lines in itertools.zip_longest(sources, targets, fillvalue=[]):
        if len(source_lines) != len(target_lines):  # one file ended: count the other's lines
            ends = ((source_lines, sources), (target_lines, targets))
            counts = [paired + len(lines) + sum(map(len, rest)) for lines, rest in ends]
            raise CorpusError(
                f"{source_path} has {counts[0]} lines but {target_path} has {counts[1]}; "
                "parallel files must have one line per sentence pair (first unpaired line: "
                f"{min(counts) + 1})"
            )
        paired += len(source_lines)
        if pairs := pair_lines(zip(source_lines, target_lines)).pairs:
            yield pairs

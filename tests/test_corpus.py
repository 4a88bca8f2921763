"""Local parallel text: the {lang}.{split}.txt folder layout and TSV files, and bad input."""

import pytest

from keras_transformer.data import CorpusError, read_parallel_files, read_translate_folder, read_tsv
from keras_transformer.data.corpus import read_lines


def write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


def test_translate_folder_reads_like_tfds(tmp_path):
    import tensorflow_datasets as tfds

    write(tmp_path / "de.train.txt", "Guten Morgen.\nDas Haus ist groß.\nJa.\n")
    write(tmp_path / "en.train.txt", "Good morning.\nThe house is big.\nYes.\n")
    corpus = read_translate_folder(tmp_path, "train", "de", "en")
    assert corpus.pairs == [
        ("Guten Morgen.", "Good morning."),
        ("Das Haus ist groß.", "The house is big."),
        ("Ja.", "Yes."),
    ]
    assert not corpus.skipped

    builder = tfds.TranslateFolder(root_dir=str(tmp_path))  # reads the files directly
    reference = {
        (example["de"].decode(), example["en"].decode())
        for example in tfds.as_numpy(builder.as_dataset(split="train"))
    }
    assert set(corpus.pairs) == reference
    assert [
        tuple(s.decode() for s in pair) for pair in corpus.dataset().as_numpy_iterator()
    ] == corpus.pairs


def test_tsv_reader_and_direction(tmp_path):
    path = write(tmp_path / "pairs.tsv", "Hallo Welt.\tHello world.\r\nDanke!\tThanks!\n")
    assert read_tsv(path).pairs == [("Hallo Welt.", "Hello world."), ("Danke!", "Thanks!")]
    assert read_tsv(path, reverse=True).pairs[0] == ("Hello world.", "Hallo Welt.")


def test_empty_lines_are_skipped_and_counted(tmp_path):
    tsv = write(tmp_path / "pairs.tsv", "a\tb\n\n   \nc\t\n\td\ne\tf\n")
    corpus = read_tsv(tsv)
    assert corpus.pairs == [("a", "b"), ("e", "f")]
    assert corpus.skipped == {"empty line": 4}
    write(tmp_path / "de.dev.txt", "eins\n\ndrei\n")
    write(tmp_path / "en.dev.txt", "one\ntwo\n \n")
    folder = read_translate_folder(tmp_path, "dev", "de", "en")
    assert folder.pairs == [("eins", "one")] and folder.skipped == {"empty line": 2}


def test_parallel_files_of_different_lengths(tmp_path):
    source = write(tmp_path / "de.txt", "eins\nzwei\ndrei\n")
    target = write(tmp_path / "en.txt", "one\ntwo\n")
    with pytest.raises(
        CorpusError, match=r"de.txt has 3 lines but .*en.txt has 2.*first unpaired line: 3"
    ):
        read_parallel_files(source, target)


def test_tsv_line_without_tab_names_file_and_line(tmp_path):
    path = write(tmp_path / "pairs.tsv", "a\tb\nno tab here\n")
    with pytest.raises(
        CorpusError, match=r"pairs.tsv:2: expected 'source<TAB>target' \(one tab\), found 0 tabs"
    ):
        read_tsv(path)
    write(path, "a\tb\tc\n")
    with pytest.raises(CorpusError, match=r"pairs.tsv:1: .* found 2 tabs"):
        read_tsv(path)


@pytest.mark.parametrize(
    "data, lines",
    [
        (b"\xef\xbb\xbfHallo.\nWelt.\n", ["Hallo.", "Welt."]),  # a byte-order mark: dropped
        (b"eins\r\nzwei\r\n", ["eins", "zwei"]),  # CRLF
        (b"no final newline", ["no final newline"]),
        (b"a\n\nb\n", ["a", "", "b"]),  # an empty line stays a line
        (b"", []),
        (
            "a\u2028b\u2029c\x0bd\x0ce\x1cf\x1dg\x1eh\x85i\n".encode(),
            ["a\u2028b\u2029c\x0bd\x0ce\x1cf\x1dg\x1eh\x85i"],
        ),
        ("x\ry\n\ufeffz\n".encode(), ["x\ry", "\ufeffz"]),  # a lone \r; a mark past the start
    ],
)
def test_a_text_file_is_one_sentence_per_line_split_at_newlines_only(tmp_path, data, lines):
    """The one rule by which every reader of sentences (corpora, --source, --target, stdin)
    splits a file: at \\n alone, whatever else str.splitlines would split at kept inside the
    sentence, so that line N of the output answers line N of the input."""
    assert read_lines(write(tmp_path / "text.txt", data)) == lines


@pytest.mark.parametrize(
    "data, message",
    [
        (
            b"ok\nbad \xff byte\n",
            r"text.txt:2: not UTF-8 \(byte 5 of the line, in b'bad \\xff byte'\)",
        ),
        (b"\xef\xbb\xbf\xc3(\n", r"text.txt:1: not UTF-8 \(byte 1 of the line"),
        (b"a\nb\nc\xe2\x82", r"text.txt:3: not UTF-8 \(byte 2 of the line"),  # cut at the end
    ],
)
def test_bytes_that_are_not_utf8_are_refused_naming_file_and_line(tmp_path, data, message):
    path = write(tmp_path / "text.txt", data)
    with pytest.raises(CorpusError, match=message + r".*convert it to UTF-8"):
        read_lines(path)
    with pytest.raises(CorpusError, match=message):
        read_tsv(path)


def test_missing_file(tmp_path):
    with pytest.raises(CorpusError, match=r"nowhere.tsv: no such file"):
        read_tsv(tmp_path / "nowhere.tsv")
    with pytest.raises(CorpusError, match=r"de.test.txt: no such file"):
        read_translate_folder(tmp_path, "test", "de", "en")


def test_a_corpus_with_every_line_skipped_is_an_empty_dataset(tmp_path, tokenizer):
    from keras_transformer.data import pipeline_report

    corpus = read_tsv(write(tmp_path / "pairs.tsv", "\n\t\n"))
    assert corpus.pairs == [] and corpus.skipped == {"empty line": 2}
    report = pipeline_report(corpus.dataset(), tokenizer, 256, 32, skipped=corpus.skipped)
    assert (report.read, report.kept, report.batches) == (2, 0, 0)

"""Local parallel text: the {lang}.{split}.txt folder layout and TSV files, and bad input."""

import pytest

from keras_transformer.data import CorpusError, read_parallel_files, read_translate_folder, read_tsv


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


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = write(tmp_path / "pairs.tsv", b"ok\tfine\nbad \xff byte\there\n")
    with pytest.raises(CorpusError, match=r"pairs.tsv:2: invalid UTF-8 at byte 4"):
        read_tsv(path)


def test_missing_file(tmp_path):
    with pytest.raises(CorpusError, match=r"nowhere.tsv: no such file"):
        read_tsv(tmp_path / "nowhere.tsv")
    with pytest.raises(CorpusError, match=r"de.test.txt: no such file"):
        read_translate_folder(tmp_path, "test", "de", "en")


def test_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    path = write(tmp_path / "pairs.tsv", "\ufeffHallo.\tHello.\n")
    assert read_tsv(path).pairs == [("Hallo.", "Hello.")]


def test_a_corpus_with_every_line_skipped_is_an_empty_dataset(tmp_path, tokenizer):
    from keras_transformer.data import pipeline_report

    corpus = read_tsv(write(tmp_path / "pairs.tsv", "\n\t\n"))
    assert corpus.pairs == [] and corpus.skipped == {"empty line": 2}
    report = pipeline_report(corpus.dataset(), tokenizer, 256, 32, skipped=corpus.skipped)
    assert (report.read, report.kept, report.batches) == (2, 0, 0)

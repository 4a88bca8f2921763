"""`python -m training.binarize` in bounded memory: corpora read a chunk at a time
(keras_transformer.data.corpus_chunks) with the pairs and errors of the whole-file readers, ids
made in Python equal to the graph's, files written as the chunks come (binarized.SplitWriter),
the same bytes for any --workers and as the folder the graph pipeline wrote, nothing left by an
interrupted run, and worker processes that never import TensorFlow."""

import json
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import tensorflow as tf
from conftest import synthetic_pairs, write_number_data

import keras_transformer as kt
from keras_transformer.data import binarized, corpus_chunks
from keras_transformer.data.corpus import CorpusError, read_parallel_files, read_tsv
from training import binarize

AWKWARD = [
    "Ｈａｕｓ ﬁx ½ Å Å e\u0301",  # NFKC: full width, a ligature, a fraction, decomposed forms
    "der\u2581Hund \u2581\u2581",  # sentencepiece's own space mark in the text
    "  \t Katze \n",
    "\u3000grün\u00a0",  # spaces that NFKC makes ASCII, then stripped
    "<phrase> das Haus",  # the phrase tag: one piece
    "",
    "日本語 😀 ŝ x\u0085y a\u2028b\x0cc ﾊﾝｶｸ",  # byte fallback, line separators kept
]
HEAVY = {"tensorflow", "keras"}  # what a --workers process must not import
NOT_UTF8 = [b"bad \xff byte", b"\xe2\x82x", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"ok\x80\x80end"]


@pytest.fixture(scope="module")
def tagged_tokenizer(tmp_path_factory):
    """A 400-piece vocabulary with the phrase tag as a piece of its own."""
    texts = [side for pair in synthetic_pairs(400) for side in pair] + ["<phrase> Haus"] * 20
    path = tmp_path_factory.mktemp("tagged") / "tokenizer.model"
    return kt.SubwordTokenizer.train(texts, 400, path, symbols=("<phrase>",))


def test_python_tokenization_is_the_graphs_on_awkward_text(tagged_tokenizer):
    encode = binarize.PairTokenizer(tagged_tokenizer.model_proto, 128).encode
    for strings, graph_input in (
        (AWKWARD, AWKWARD),
        ([b.decode("utf-8", "replace") for b in NOT_UTF8], NOT_UTF8),
    ):
        ids, lengths = encode(strings)
        expected = tagged_tokenizer.tokenize(tf.constant(graph_input))
        np.testing.assert_array_equal(lengths, expected.row_lengths().numpy())
        np.testing.assert_array_equal(ids, expected.flat_values.numpy())
    assert 4 in encode(["<phrase> das Haus"])[0]  # the tag's piece (the first after 0-3)


def corpus(root):
    """tsv:`root` number data with pairs that the reader skips (an empty line), that become
    empty when normalized, and that are too long for --max-length 8."""
    root.mkdir()
    write_number_data(root, (1500, 40, 40))
    for split in ("train", "validation"):
        path = root / f"{split}.tsv"
        lines = path.read_text().splitlines()
        lines[3:3] = ["\u2581\tzwei", "", "eins " * 9 + "\tone"]
        path.write_text("\n".join(lines) + "\n")
    return root


def folder_bytes(directory):
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def written_by_the_graph(data, tokenizer, split, max_length, scratch):
    """({file name: bytes} of a split's arrays and text as the tf.data pipeline wrote them:
    SubwordTokenizer.tokenize over the whole split, the arrays concatenated and np.save'd in
    `scratch`; the pairs kept)."""
    pairs = read_tsv(data / f"{split}.tsv").pairs
    ids = [tokenizer.tokenize(tf.constant(side)) for side in zip(*pairs)]
    lengths = np.stack([side.row_lengths().numpy() for side in ids])
    kept = (lengths.min(axis=0) > 0) & (lengths.max(axis=0) + 1 <= max_length)
    files = {}
    for side, ragged in zip(binarized.SIDES, ids):
        rows = [row for row, keep in zip(ragged.to_list(), kept) if keep]
        offsets = np.concatenate([[0], np.cumsum([len(row) for row in rows])]).astype(np.int64)
        for part, array in (("ids", np.concatenate(rows).astype(np.int32)), ("offsets", offsets)):
            path = scratch / f"{split}.{side}.{part}.npy"
            np.save(path, array)
            files[f"{split}.{side}.{part}.npy"] = path.read_bytes()
    if split != "train":
        lines = "".join(json.dumps(list(pair), ensure_ascii=False) + "\n" for pair in pairs)
        files[f"{split}.pairs.jsonl"] = lines.encode("utf-8")
    return files, int(kept.sum())


@pytest.mark.slow
def test_any_number_of_workers_writes_the_bytes_of_the_graph_pipeline(tmp_path, monkeypatch):
    data = corpus(tmp_path / "data")
    monkeypatch.setattr(binarize, "CHUNK_PAIRS", 256)  # several chunks for each worker
    flags = ["--dataset", f"tsv:{data}", "--max-length", "8", "--splits", "train", "validation"]
    binarize.main([*flags, "--vocab-size", "300", "--output", str(tmp_path / "one")])
    tokenizer = tmp_path / "one" / "tokenizer.model"
    for workers in ("1", "2"):
        out = tmp_path / f"workers-{workers}"
        binarize.main([*flags, "--tokenizer", str(tokenizer), "--workers", workers,
                       "--output", str(out)])  # fmt: skip
        assert folder_bytes(out) == folder_bytes(tmp_path / "one")
    written = folder_bytes(out)
    index = json.loads(written["index.json"])
    for split in ("train", "validation"):
        tokenize = kt.SubwordTokenizer.load(tokenizer)
        files, kept = written_by_the_graph(data, tokenize, split, 8, tmp_path)
        assert {name: written[name] for name in files} == files
        recorded = index["splits"][split]
        read = 2 + (1500 if split == "train" else 40)  # an empty line is not read
        assert recorded["pairs"] == kept and recorded["read"] == read
        assert recorded["dropped"] == {
            "empty after normalization": 1,
            "longer than max_length=8 tokens": recorded["read"] - kept - 1,
        }


def test_the_writer_writes_each_chunk_as_it_comes(tmp_path):
    rng = np.random.default_rng(0)
    lengths = [rng.integers(0, 9, 5000) for _ in range(3)]
    with binarized.SplitWriter(tmp_path, "train", keep_text=False) as writer:
        for chunk in lengths:
            ids = rng.integers(4, 300, chunk.sum()).astype(np.int32)
            size = (tmp_path / "train.source.ids.npy").stat().st_size
            writer.add({"source": ids, "target": ids}, {"source": chunk, "target": chunk})
            assert (tmp_path / "train.source.ids.npy").stat().st_size >= size + ids.nbytes - 8192
    every = np.concatenate(lengths)
    expected = np.concatenate([[0], np.cumsum(every)])
    np.save(tmp_path / "expected.npy", expected)
    written = (tmp_path / "train.target.offsets.npy").read_bytes()
    assert written == (tmp_path / "expected.npy").read_bytes()
    assert writer.tokens == {"source": every.sum(), "target": every.sum()}


def test_workers_is_a_count(capsys):
    with pytest.raises(SystemExit) as exit_info:
        binarize.build_parser().parse_args(["--output", "x", "--workers", "0"])
    message = "argument --workers: expected an integer of at least 1, got 0"
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def test_workers_tokenize_in_order_without_tensorflow(tagged_tokenizer):
    tasks = [(["Haus", ""], ["house", "dog"], True), (["Katze " * 6], ["cat"], False)] * 3
    with binarize.chunk_tokenizer(tagged_tokenizer.model_proto, 6, workers=2) as tokenize:
        chunks = list(tokenize(iter(tasks)))
    codes = [[1, 1, 0], [0, 0, 1]]  # pairs kept, empty, too long
    assert [chunk.codes.tolist() for chunk in chunks] == codes * 3
    assert [chunk.text for chunk in chunks[:2]] == [b'["Haus", "house"]\n["", "dog"]\n', None]
    expected = tagged_tokenizer.tokenize(tf.constant(["Haus"])).flat_values.numpy()
    np.testing.assert_array_equal(chunks[0].ids["source"], expected)
    spawn = multiprocessing.get_context("spawn")
    initargs = (tagged_tokenizer.model_proto, 6)
    with ProcessPoolExecutor(1, spawn, binarize.start_worker, initargs) as executor:
        loaded = executor.submit(eval, f"sorted({HEAVY} & set(__import__('sys').modules))")
        assert loaded.result() == []


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["Ctrl-C", "a worker killed"])
def test_an_interrupted_run_leaves_nothing_and_no_worker(fault, tmp_path, monkeypatch, capsys):
    data = write_number_data(tmp_path)
    monkeypatch.setattr(binarize, "CHUNK_PAIRS", 256)
    add, calls = binarized.SplitWriter.add, []

    def interrupted(writer, *chunk):  # at the third chunk
        calls.append(1)
        if len(calls) == 3 and fault == "Ctrl-C":
            raise KeyboardInterrupt
        if len(calls) == 3:
            os.kill(multiprocessing.active_children()[0].pid, signal.SIGKILL)
        return add(writer, *chunk)

    monkeypatch.setattr(binarized.SplitWriter, "add", interrupted)
    out = tmp_path / "deep" / "out"
    argv = ["--dataset", f"tsv:{data}", "--vocab-size", "300", "--workers", "2", "--output"]
    with pytest.raises(KeyboardInterrupt if fault == "Ctrl-C" else SystemExit) as raised:
        binarize.main([*argv, str(out)])
    if fault == "a worker killed":
        message = "error: --workers 2: a worker process ended abruptly (killed, or out of memory?)"
        assert raised.value.code == 1 and message in capsys.readouterr().err
    assert not (tmp_path / "deep").exists() and multiprocessing.active_children() == []


def write(path, text):
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize("size", [1, 2, 100])
def test_chunks_hold_the_pairs_of_the_whole_file_readers(tmp_path, size):
    lines = "\ufeffeins\tone\r\n \t \nzwei \u2028 drei\ttwo\n\nvier\t\n\tfive\nsechs\tsix"
    tsv = write(tmp_path / "a.tsv", lines)
    chunks = list(corpus_chunks.tsv_chunks(tsv, size))
    assert all(0 < len(chunk) <= size for chunk in chunks)
    pairs = [("eins", "one"), ("zwei \u2028 drei", "two"), ("sechs", "six")]
    assert sum(chunks, []) == read_tsv(tsv).pairs == pairs
    source = write(tmp_path / "de.txt", "\ufeffeins\r\n\nzwei\u2028\ndrei")
    target = write(tmp_path / "en.txt", "one\r\ntwo\n\nthree\n")
    chunks = list(corpus_chunks.parallel_chunks(source, target, size))
    assert sum(chunks, []) == read_parallel_files(source, target).pairs
    assert len(chunks[-1]) and sum(map(len, chunks)) == 2


def same_error(read_whole, read_chunks):
    with pytest.raises(CorpusError) as expected:
        read_whole()
    with pytest.raises(CorpusError) as found:
        list(read_chunks())
    assert str(found.value) == str(expected.value)


@pytest.mark.parametrize(
    "source, target",
    [
        (b"a\nb\nc\n", b"a\nb\n"),  # the source one line longer
        (b"a\n", b"a\nb\nc"),  # the target two
        (b"a\n\xe2\x82x\n", b"a\nb\n"),  # not UTF-8, line 2
        (b"a\n", b"a\nb\nc \xff\n"),  # not UTF-8 beyond the other file's end
    ],
)
@pytest.mark.parametrize("size", [1, 2])
def test_parallel_chunks_fail_as_the_whole_file_reader(tmp_path, source, target, size):
    files = write(tmp_path / "de.txt", source), write(tmp_path / "en.txt", target)
    same_error(
        lambda: read_parallel_files(*files), lambda: corpus_chunks.parallel_chunks(*files, size)
    )


@pytest.mark.parametrize(
    "lines",
    [b"a\tb\nc\td\te\n", b"a\tb\nc\td\ne\n", b"\xef\xbb\xbf\xc3\tb\n", b"a\tb\r\nc\t\xe2\x82x\r\n"],
)
@pytest.mark.parametrize("size", [1, 2])
def test_tsv_chunks_fail_as_the_whole_file_reader(tmp_path, lines, size):
    tsv = write(tmp_path / "a.tsv", lines)
    same_error(lambda: read_tsv(tsv), lambda: corpus_chunks.tsv_chunks(tsv, size))
    with pytest.raises(CorpusError, match="missing.tsv: no such file"):
        list(corpus_chunks.tsv_chunks(tmp_path / "missing.tsv", 1))

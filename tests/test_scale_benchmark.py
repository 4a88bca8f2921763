"""`python -m benchmarks.scale` at a tiny size (the tests' corpus stands in for Ding's text,
which CI cannot fetch): a report with every row, the same bytes from 1 and 2 workers, nothing
left in its working folder, and the bad input it refuses."""

import collections
import json
import tempfile

import pytest
from conftest import synthetic_pairs

from benchmarks import scale


def test_corpora_are_prefixes_of_one_zipfian_stream(tmp_path):
    pairs = synthetic_pairs(300)
    words = scale.ranked_words(pairs)
    for side, ranked in zip(zip(*pairs), words):  # each side's words, most frequent first
        frequency = collections.Counter(word for sentence in side for word in sentence.split())
        assert sorted(ranked) == sorted(frequency)
        assert [frequency[word] for word in ranked] == sorted(frequency.values(), reverse=True)
    folders = scale.write_corpora(words, (250, 1000), tmp_path)
    small, large = ((folders[n] / "train.tsv").read_text().splitlines() for n in (250, 1000))
    assert len(small) == 250 and len(large) == 1000 and large[:250] == small
    assert all(len(line.split("\t")) == 2 and all(line.split("\t")) for line in large)
    drawn = collections.Counter(word for line in large for word in line.split("\t")[1].split())
    assert drawn[words[1][0]] > 5 * drawn[words[1][10]]  # Zipf: 11 times the 11th


@pytest.mark.slow
def test_the_scale_benchmark_runs_at_a_tiny_size(tmp_path, monkeypatch):
    text = tmp_path / "words.tsv"
    text.write_text("".join(f"{de}\t{en}\n" for de, en in synthetic_pairs(300)))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work))  # $TMPDIR
    output = tmp_path / "report" / "SCALE.md"
    scale.main(["--quick", "--text", str(text), "--output", str(output)])
    results = json.loads(output.with_suffix(".json").read_text())
    runs = [(run["size"], run["workers"], run.get("same_as_first")) for run in results["runs"]]
    assert runs == [(1000, 1, None), (1000, 2, True), (3000, 1, None), (3000, 2, True)]
    assert all(run["pairs"] == run["size"] and run["peak_bytes"] > 0 for run in results["runs"])
    assert results["sentencepiece"]["pairs"] == 3000 and results["loader"]["batches"] > 0
    assert results["tokenizer"]["vocab_size"] == 400 and list(work.iterdir()) == []
    report = output.read_text()
    rows = [target for target, _, _ in scale.targets(results)]
    assert len(rows) == 7 and all(f"| {target} |" in report for target in rows)
    assert "| 3,000 | 2 |" in report and "one NVIDIA H200" in report


@pytest.mark.parametrize(
    "argv, status, message",
    [
        (["--text", "/no/such.tsv"], 2, "--text /no/such.tsv: no such file"),
        (["--sizes", "0"], 2, "argument --sizes: expected an integer of at least 1, got 0"),
        (["--worker-counts", "1", "0"], 2, "argument --worker-counts: expected an integer of"),
    ],
)
def test_bad_input_is_one_line(argv, status, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        scale.main([*argv, "--output", str(tmp_path / "SCALE.md")])
    assert exit_info.value.code == status and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_missing_gpu_figure_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(scale, "GPU_RESULTS", tmp_path / "GPU.json")
    with pytest.raises(SystemExit) as exit_info:
        scale.main(["--quick", "--output", str(tmp_path / "SCALE.md")])
    error = capsys.readouterr().err
    assert exit_info.value.code == 1 and f"{tmp_path / 'GPU.json'} holds no base-preset" in error

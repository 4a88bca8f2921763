"""The benchmark runs on a tiny setting and writes its tables (no time is asserted)."""

import json

from benchmarks import bench


def test_benchmark_runs_on_a_tiny_setting(tmp_path):
    output = tmp_path / "results.md"
    bench.main(["--quick", "--output", str(output)])
    text = output.read_text()
    for heading in ("## Training step", "## Decoding", "## Exported SavedModel", "## Padding efficiency", "## Peak resident memory"):
        assert heading in text
    results = json.loads((tmp_path / "results.json").read_text())
    (training,) = results["training"]
    assert set(training["rows"]) == {"keras-transformer", "KerasHub layers"}
    for row in training["rows"].values():
        assert row["tokens_per_second"] > 0 and 0 < row["mfu"] < 1
    assert set(results["decoding"][0]["rows"]) == {"greedy, cached", "greedy, full recomputation", "beam 4, cached", "KerasHub greedy, cached"}
    assert results["padding_efficiency"]["True"] > results["padding_efficiency"]["False"]
    assert results["memory"]["training"]["peak_mib"] > 0

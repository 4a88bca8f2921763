"""The benchmark runs on a tiny setting and writes its tables (no time is asserted); its report
re-renders from a results.json."""

import json
import pathlib

import pytest

from benchmarks import bench, report

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The report's sections of each group of parts the tiny run measures (two groups, two tests
# that pytest's workers run side by side).
HEADINGS = {
    ("training", "decoding", "padding", "memory"): (
        "## Training step",
        "## Keras backends",
        "## Decoding",
        "## Padding efficiency",
        "## Peak resident host memory",
    ),
    ("exports",): (
        "## Exported SavedModel",
        "## Served path",
        "## Where the SavedModel's time goes",
    ),
}
ALL_HEADINGS = [heading for headings in HEADINGS.values() for heading in headings]

# A commit of this repository whose library has no relu_dropout.
OLD_LIBRARY = "d3ad441006d7079812637dae16b27d91fd4ceb3e"


def assert_report(text, headings):
    """Every section of `headings` is there, and every line of prose is whole sentences (a
    paragraph is one line): it ends as a sentence does, not in the middle of one."""
    for heading in headings:
        assert heading in text
    for line in text.splitlines():
        if line.startswith(("## ", "### ")):
            assert line.endswith(")"), line
        elif line and not line.startswith(("# ", "|")):
            assert line.endswith("."), line


def run_tiny(tmp_path, parts, *extra):
    """`bench --quick --parts PARTS EXTRA`: its report, checked (`assert_report`), and results."""
    output = tmp_path / "results.md"
    bench.main(["--quick", "--parts", *parts, *extra, "--output", str(output)])
    text = output.read_text()
    assert_report(text, HEADINGS[parts])
    return text, json.loads((tmp_path / "results.json").read_text())


@pytest.mark.slow
def test_the_training_decoding_and_memory_parts_run_on_a_tiny_setting(tmp_path):
    """The training step against the peer, the backends, decoding, padding and memory."""
    _, results = run_tiny(tmp_path, ("training", "decoding", "padding", "memory"))
    (training,) = results["training"]
    assert set(training["rows"]) == {"keras-transformer", "KerasHub layers"}
    for row in training["rows"].values():
        assert row["tokens_per_second"] > 0 and 0 < row["mfu"] < 1
    low, median, high = training["rows"]["keras-transformer"]["speed_over_peer"]
    assert 0 < low <= median <= high
    (backends,) = results["backends"]  # jax is in the dev extras
    assert set(backends["rows"]) == {"tensorflow", "jax"}
    assert backends["rows"]["tensorflow"]["speed_over_tensorflow"] == 1.0
    assert all(row["tokens_per_second"] > 0 for row in backends["rows"].values())
    assert {(row["method"], row["xla"]) for row in results["decoding"][0]["rows"]} == {
        *(
            (method, xla)
            for method in ("greedy, cached", "beam 4, cached", "KerasHub greedy, cached")
            for xla in (False, True)
        ),
        ("greedy, full recomputation", False),
    }
    assert results["padding_efficiency"]["True"] > results["padding_efficiency"]["False"]
    assert list(results["memory"]) == ["training"]  # --quick: no decoding row
    assert results["memory"]["training"]["peak_mib"] > 0


@pytest.mark.slow
def test_the_exports_run_on_a_tiny_setting(tmp_path):
    """The exported SavedModel and the served path; its "SavedModel before" is the model
    exported by the committed library (git archive HEAD, a fresh process run from it)."""
    # The first 4 of the 8 sentences timed; all 8 checked at batch 64 and their steps counted.
    timed = 4
    extra = ("--before-code", "HEAD", "--served-sentences", str(timed))
    text, results = run_tiny(tmp_path, ("exports",), *extra)
    saved = results["saved_model"]  # the exported model against XLA, same source ids
    assert {(row["search"], row["intra_op_threads"]) for row in saved} == {
        (search, 0) for search in ("greedy", "beam 4")
    }  # --quick: TensorFlow's default threads only
    for row in saved:
        assert row["steps"] > 1 and row["over_xla"] == row["p50_ms"] / row["xla_ms"]
    served = results["served_path"]  # --quick: TensorFlow's default setting only
    searches = ["greedy", "beam 4, alpha 1.2"]  # --quick: greedy and the demo's export's search
    assert list(results["served_searches"]) == searches
    assert [(row["search"], row["engine"], row["setting"]) for row in served] == [
        (search, engine, "default")
        for search in searches
        for engine in (
            "SavedModel",
            "SavedModel XLA",
            "SavedModel before",
            "CTranslate2 float32",
            "CTranslate2 int8",
        )
    ]
    assert (results["served_sentences"], results["served_split"]) == (4, bench.QUICK_SENTENCES)
    for row in served:
        assert list(row["ms"]) == ["64", "8", "1"] and all(ms > 0 for ms in row["ms"].values())
        assert 0 <= row["same"] <= timed and 0 <= row["same_split"] <= bench.QUICK_SENTENCES
        if row["engine"].startswith("SavedModel"):  # XLA's, and HEAD's export of the weights
            assert (row["same"], row["same_split"]) == (timed, bench.QUICK_SENTENCES), row
    assert results["served_before"].startswith(bench.git_commit("HEAD")[:10])
    assert "SavedModel before: the same model" in text
    assert "### Decoder steps per sentence (our stopping rule and CTranslate2's)" in text
    steps = results["decoder_steps"]
    assert steps["batch"] == 64 and list(steps["searches"]) == searches
    assert steps["split_sentences"] == bench.QUICK_SENTENCES
    for search, rules in steps["searches"].items():
        assert list(rules) == (["exact"] if search == "greedy" else ["exact", "top beam"])
        for figures in (*rules.values(), *(r["split"] for r in rules.values())):
            # one call or two: the batch's steps, at most max_length 32
            assert 1 <= figures["per_sentence"] <= figures["per_batch_row"] <= 32
        assert rules["exact"]["same"] == timed
        assert rules["exact"]["split"]["same"] == bench.QUICK_SENTENCES
    assert "### What is left (the decoder steps and the time of a step)" in text
    split = bench.QUICK_SENTENCES
    assert f'"Same as SavedModel, all {split}" counts the same over all {split}' in text
    assert f"| same as SavedModel | same as SavedModel, all {split} |" in text
    assert f"| same as exact | steps a sentence, all {split} | same as exact, all {split} |" in text
    for batch, key in ((64, "step_profile"), (1, "step_profile_batch1")):
        profile = results[key]
        assert profile["batch"] == batch and profile["steps"] > 0
        assert profile["search"] == "beam 4, alpha 1.2"
        assert profile["ops"]["Exp"] > 0 and 0 < profile["outside_loop"]


def test_a_before_code_this_clone_lacks_is_a_usage_error(capsys):
    """--before-code names a commit; one this clone does not have ends the run before it
    measures anything, naming the flag and the way out."""
    with pytest.raises(SystemExit) as stop:
        bench.main(["--quick", "--before-code", "no-such-commit", "--output", "-"])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: --before-code no-such-commit: not a commit of the clone")
    assert "leave --before-code out" in error and len(error.splitlines()) == 1
    # Under bfloat16 the earlier library's float32 export would not be the same model.
    with pytest.raises(SystemExit) as stop:
        bench.main(
            ["--quick", "--before-code", "HEAD", "--mixed-precision", "bf16", "--output", "-"]
        )
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error == (
        "error: --before-code exports the model again in float32; with --mixed-precision bf16 "
        "leave --before-code out"
    )


def test_a_missing_served_model_is_named(tmp_path, capsys):
    """--served-model names a .keras file with its tokenizer beside it; without either the run
    ends before it measures anything, naming the file; an unknown --tf-settings, or
    --served-sentences 0, is a usage error."""
    missing = tmp_path / "model.keras"
    with pytest.raises(SystemExit) as stop:
        bench.main(["--quick", "--parts", "exports", "--served-model", str(missing)])
    assert stop.value.code == 1
    error = capsys.readouterr().err.strip()
    assert error == (
        f"error: --served-model {missing}: no such file; give a .keras model (make demo "
        "writes runs/demo/model.keras)"
    )
    missing.write_bytes(b"")
    with pytest.raises(SystemExit) as stop:
        bench.main(["--quick", "--parts", "exports", "--served-model", str(missing)])
    assert stop.value.code == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: --served-model {missing}: no tokenizer beside it (")
    assert len(error.splitlines()) == 1
    with pytest.raises(SystemExit) as stop:
        bench.main(["--quick", "--tf-settings", "TF_NUM_INTEROP_THREADS=2"])
    assert stop.value.code == 2
    assert "argument --tf-settings: invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        bench.main(["--quick", "--served-sentences", "0"])
    assert stop.value.code == 2
    assert "argument --served-sentences: expected an integer of at least 1, got 0" in (
        capsys.readouterr().err
    )


def test_a_given_served_model_is_loaded_with_its_tokenizer(number_translator, tmp_path):
    """--served-model: the served path's model and tokenizer are the file's (a run's
    model.keras and the tokenizer beside it), its sentences the served path's (with --quick,
    sentences to copy)."""
    model, tokenizer, _ = number_translator
    model.save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "tokenizer.model")
    loaded, loaded_tokenizer, path, sentences = bench.given_served_model(
        tmp_path / "model.keras", quick=True
    )
    assert loaded.config == model.config and path == tmp_path / "tokenizer.model"
    assert loaded_tokenizer.vocab_size == tokenizer.vocab_size
    assert sentences == bench.served_sentences(quick=True)[0]
    assert len(sentences) == bench.QUICK_SENTENCES


def test_decoder_steps_add_up_per_sentence_and_ctranslate2s_stop_ends_sooner(
    number_translator, tmp_path
):
    """The decoder steps of a batch are its sentences' steps each alone (the loop leaves a
    finished sentence), those of the timed sentences apart from the whole split's; at alpha
    1.2 the top beam's stop (CTranslate2's) ends sooner than the exact one on a model that ends
    its translations, with the same translations."""
    from benchmarks import probes

    model, tokenizer, pairs = number_translator
    model.save(tmp_path / "served.keras")
    tokenizer.save(tmp_path / "tokenizer.model")
    sentences = [de for de, _ in pairs[:3]]
    searches = {"beam 4, alpha 1.2": {"beam_size": 4, "alpha": 1.2}}

    def steps(chosen, timed=None):
        counted = probes.decoder_steps(tmp_path, chosen, searches, batch=3, timed=timed)
        assert counted.get("split_sentences") == (3 if timed else None)
        return counted["searches"]["beam 4, alpha 1.2"]

    # The first two timed (one call of two), the third translated after them (a call of one).
    timed, alone = steps(sentences, timed=2), [steps([sentence]) for sentence in sentences]
    for rule in ("exact", "top beam"):
        each = [figures[rule]["per_sentence"] for figures in alone]
        assert timed[rule]["per_sentence"] * 2 == sum(each[:2]), rule
        assert timed[rule]["per_batch_row"] == max(each[:2]) and timed[rule]["same"] == 2
        split = timed[rule]["split"]
        assert split["per_sentence"] * 3 == sum(each) and split["same"] == 3, rule
        assert split["per_batch_row"] * 3 == 2 * max(each[:2]) + each[2], rule
    assert timed["top beam"]["per_sentence"] < timed["exact"]["per_sentence"]


def test_what_is_left_splits_an_engines_time_into_its_steps_and_a_steps_time():
    """Each engine's time over CTranslate2 float32's is its steps' ratio times a step's: the
    SavedModel's steps are each sentence's own, the XLA export's its batch's at batch 64 and the
    sentence's own at batch 1, CTranslate2's those of its stop ("top beam"; greedy: eos)."""
    ms = {
        "SavedModel": {"64": 8.0, "1": 40.0},
        "SavedModel XLA": {"64": 12.0, "1": 20.0},
        "CTranslate2 float32": {"64": 2.0, "1": 10.0},
    }
    searches = {
        "beam 4": {
            "exact": {"per_sentence": 20.0, "per_batch_row": 30.0},
            "top beam": {"per_sentence": 10.0, "per_batch_row": 15.0},
        },
        "greedy": {"exact": {"per_sentence": 5.0, "per_batch_row": 8.0}},
    }
    results = {
        "served_path": [
            dict(search=search, engine=engine, setting=setting, ms=times)
            for setting in ("first", "second")
            for search in searches
            for engine, times in ms.items()
        ],
        "decoder_steps": {"searches": searches},
    }
    lines = report.steps_and_step_time_table(results, "first").splitlines()[2:]
    assert lines[:6] == [
        "| beam 4 | SavedModel | 64 | 8.00 | 20.0 | 0.400 | 4.00 | 2.00 | 2.00 |",
        "| beam 4 | SavedModel XLA | 64 | 12.00 | 30.0 | 0.400 | 6.00 | 3.00 | 2.00 |",
        "| beam 4 | CTranslate2 float32 | 64 | 2.00 | 10.0 | 0.200 | 1.00 | 1.00 | 1.00 |",
        "| beam 4 | SavedModel | 1 | 40.00 | 20.0 | 2.000 | 4.00 | 2.00 | 2.00 |",
        "| beam 4 | SavedModel XLA | 1 | 20.00 | 20.0 | 1.000 | 2.00 | 2.00 | 1.00 |",
        "| beam 4 | CTranslate2 float32 | 1 | 10.00 | 10.0 | 1.000 | 1.00 | 1.00 | 1.00 |",
    ]
    assert lines[6:9] == [
        "| greedy | SavedModel | 64 | 8.00 | 5.0 | 1.600 | 4.00 | 1.00 | 4.00 |",
        "| greedy | SavedModel XLA | 64 | 12.00 | 8.0 | 1.500 | 6.00 | 1.60 | 3.75 |",
        "| greedy | CTranslate2 float32 | 64 | 2.00 | 5.0 | 0.400 | 1.00 | 1.00 | 1.00 |",
    ]


def test_an_export_the_before_code_cannot_make_is_named(tmp_path, capsys):
    """The library at a commit without relu_dropout (OLD_LIBRARY) cannot export a model that sets
    it: the run ends naming the commit and the field."""
    import numpy as np

    import keras_transformer as kt

    if bench.git_commit(OLD_LIBRARY) is None:
        pytest.skip(f"this clone lacks the history of {OLD_LIBRARY[:10]} (a shallow clone)")
    config = kt.TransformerConfig.preset("tiny", vocab_size=64, relu_dropout=0.1)
    model = kt.build_transformer(config)
    model({"source": np.ones((1, 3), "int32"), "target": np.ones((1, 3), "int32")})
    with pytest.raises(SystemExit) as stop:
        bench.export_before(tmp_path, model, tmp_path / "tokenizer.model", OLD_LIBRARY)
    assert stop.value.code == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: --before-code {OLD_LIBRARY[:10]}: that commit's library")
    assert "has no config field for {'relu_dropout': 0.1}" in error
    assert len(error.splitlines()) == 1


def test_report_renders_the_committed_results_without_measuring(tmp_path, capsys):
    """The committed README is what `python -m benchmarks.report` renders from the committed
    results.json; its served path has batches 64, 8 and 1, the SavedModel of an earlier
    library ("SavedModel before", `--before-code`) and of this one in one run under every
    TensorFlow setting, the caches compared and both profiles."""
    output = tmp_path / "README.md"
    report.main(["--results", str(ROOT / "benchmarks/results.json"), "--output", str(output)])
    text = output.read_text(encoding="utf-8")
    assert text == (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert_report(text, ALL_HEADINGS)
    (command,) = [line for line in text.splitlines() if line.startswith("`python -m benchmarks")]
    assert command.startswith("`python -m benchmarks.bench ") and "--parts" not in command
    header = next(line for line in text.splitlines() if "| engine | TensorFlow |" in line)
    assert "| batch 64 ms/sentence | batch 8 ms/sentence | batch 1 ms/sentence |" in header
    for setting in bench.TF_SETTINGS:
        assert f"| beam 4 | SavedModel before | {setting} |" in text
    assert "exported by the library at commit " in text
    assert "| preallocated-bound |" in text and "### Growing or preallocated caches" in text
    assert "(beam 4, alpha 1.2, batch 64)" in text and "(beam 4, alpha 1.2, batch 1)" in text
    capsys.readouterr()
    report.main(["--results", str(ROOT / "benchmarks/results.json"), "--output", "-"])
    assert capsys.readouterr().out == text


def test_the_served_report_renders_from_its_results(tmp_path):
    """benchmarks/SERVED.md (the exports part on make demo's model) is what the report renders
    from SERVED.json: the demo's search beside alpha 0.6, the XLA export's rows, and the decoder
    steps under both stopping rules."""
    output = tmp_path / "SERVED.md"
    report.main(["--results", str(ROOT / "benchmarks/SERVED.json"), "--output", str(output)])
    text = output.read_text(encoding="utf-8")
    assert text == (ROOT / "benchmarks" / "SERVED.md").read_text(encoding="utf-8")
    assert "--served-model runs/demo/model.keras" in text
    for search in ("beam 4", "greedy", "beam 4, alpha 1.2"):
        assert f"| {search} | SavedModel XLA | default |" in text
        assert f"| {search} | exact |" in text
    assert "| beam 4, alpha 1.2 | top beam |" in text


def test_report_adds_an_earlier_runs_figures(tmp_path, monkeypatch):
    """`--before RESULTS.json` (an earlier run: the one kept in benchmarks/ for this) gives the
    decoding, SavedModel and served-path rows that run's figures and the speed-up over them."""
    monkeypatch.chdir(ROOT)
    output = tmp_path / "README.md"
    earlier = "benchmarks/before-served-path.json"
    report.main(
        ["--results", "benchmarks/results.json", "--before", earlier, "--output", str(output)]
    )
    text = output.read_text(encoding="utf-8")
    assert_report(text, ALL_HEADINGS)
    assert "| before: ms/sentence | speed-up |" in text
    assert f"Before: the same rows in `{earlier}` (run 2026-11-24," in text


@pytest.mark.slow
def test_training_benchmark_runs_with_xla_and_bfloat16():
    """The GPU setting's training path (XLA, mixed_bfloat16), on the tiny preset (one layer)
    and the CPU."""
    import keras

    import keras_transformer as kt

    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=300, num_layers=1, dropout=0.0, max_length=32
    )
    keras.config.set_dtype_policy("mixed_bfloat16")
    rows = bench.training_throughput(config, 4, 8, repeats=1, rate=1e12, jit_compile=True)
    assert set(rows) == {"keras-transformer", "KerasHub layers"}
    assert all(row["tokens_per_second"] > 0 for row in rows.values())


@pytest.mark.slow
def test_the_loss_step_probe_trains_the_same_both_ways():
    """The TensorFlow loss whose gradient is written out, and the token accuracy by a max, train
    and count as the formula differentiated by TensorFlow with an argmax accuracy do (the
    probe's two ways start from the same weights, on a batch with padding)."""
    import keras_transformer as kt
    from benchmarks import probes

    config = kt.TransformerConfig.preset("tiny", vocab_size=300, num_layers=1, dropout=0.0)
    answer = probes.loss_step(json.dumps(config.to_dict()), 6, 7, 8)
    assert set(answer["ms"]) == {"library", "differentiated"}
    first, last = answer["first_loss"]["library"], answer["last_loss"]["library"]
    assert first - last > 0.05  # it trained: a wrong gradient would part the two ways
    assert answer["first_loss"]["differentiated"] == pytest.approx(first, rel=1e-6)
    assert answer["last_loss"]["differentiated"] == pytest.approx(last, rel=1e-4)
    accuracies = answer["last_accuracy"]
    assert accuracies["library"] == pytest.approx(accuracies["differentiated"], abs=1e-6)


def test_a_decoding_step_builds_what_its_layers_share_once():
    """In the exported graph's loop, each decoder layer appends its keys and values to its
    growing cache (one concat each), and what the layers share (positions, causal mask: their
    Range ops; the recorded outputs: scatters) is built once per step, whatever the depth."""
    import keras_transformer as kt
    from benchmarks import step_ops

    def step(num_layers):
        config = kt.TransformerConfig.preset(
            "tiny", vocab_size=300, num_layers=num_layers, dropout=0.0
        )
        return step_ops.loop_ops(kt.build_transformer(config), beam_size=1)

    one, three = step(1), step(3)
    assert three["ConcatV2"] - one["ConcatV2"] == 2 * 2
    assert one["Range"] == three["Range"] > 0
    assert one["TensorScatterUpdate"] == three["TensorScatterUpdate"]


def test_benchmark_parts_are_checked(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--parts", "speed", "--output", "-"])
    assert exit_info.value.code == 2
    assert "--parts: invalid choice: 'speed'" in capsys.readouterr().err


def test_make_demo_trains_with_the_settings_of_demo_flags():
    """demo.flags is the one place of the demo's settings: `make demo` passes its flags to
    `training.train`, as the quality report and the benchmarks read them."""
    import subprocess

    from benchmarks import demo_settings

    shown = subprocess.run(
        ["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    (training,) = [line for line in shown.splitlines() if " -m training.train " in line]
    assert f" -m training.train {' '.join(demo_settings.demo_flags())} --max-minutes " in training


def test_the_gpu_demo_run_is_the_demos_model_with_a_gpu_s_batch():
    """benchmarks.gpu trains the demo's model (demo.flags) with its own batch and dropout on
    binarized data, which brings its own vocabulary and phrase mixture: what it passes
    `training.train` must parse and pass the plan's checks."""
    from benchmarks import demo_settings, gpu
    from training import train
    from training.plan import TrainingPlan

    words = ["--dataset", "binarized:data", *gpu.gpu_demo_flags(), "--run-dir", "run"]
    plan = TrainingPlan.from_flags(train.build_parser().parse_args(words))
    demo = demo_settings.demo_plan()
    assert plan.model.preset == demo.model.preset
    assert plan.config_overrides == {
        **demo.config_overrides,
        "dropout": 0.1,
        "tokens_per_batch": 12000,
    }
    assert not plan.data.phrases and plan.data.vocab_size is None

"""The quality study (benchmarks/quality.py): a run trains, scores its decodings on validation
(and test only when marked), and the report is rewritten around hand-written text; a study
continues where it stopped. On a tiny task instead of the Ding corpus."""

import dataclasses
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
from conftest import number_pairs, tiny_flags

from benchmarks import demo_settings, quality, quality_report, quality_runs, quality_train
from keras_transformer.data import ding


def section_of(text, heading):
    """The part of a report from `heading` to the next heading of its level."""
    level = heading.split(" ")[0]
    return text.split(heading, 1)[1].split(f"\n{level} ", 1)[0]


def lever_rows(text):
    """The cells of the lever table's rows (every table of its section but the header)."""
    rows = [
        [cell.strip() for cell in line.strip()[1:-1].split(" | ")]
        for line in section_of(text, "## What each lever gave").splitlines()
        if line.startswith("| ")
    ]
    return [row for row in rows if row[0] not in ("change", "---")]


def results(work_dir, minutes, recorded=()):
    """The results that count for the runs of the study as declared now (`quality.STUDY`)."""
    return quality_runs.results(quality.STUDY, work_dir, minutes, recorded)


@pytest.fixture
def tiny_study(tmp_path, monkeypatch):
    data = tmp_path / "numbers"
    data.mkdir()
    for split, n, seed in (("train", 600, 0), ("validation", 8, 1), ("test", 8, 2)):
        (data / f"{split}.tsv").write_text(
            "".join(f"{de}\t{en}\n" for de, en in number_pairs(n, seed))
        )
    monkeypatch.setattr(
        quality_runs,
        "DEMO_FLAGS",
        (
            *tiny_flags(data),
            "--steps",
            "30",
            "--steps-per-epoch",
            "30",
            "--bleu-sentences",
            "4",
            "--samples",
            "0",
        ),
    )
    monkeypatch.setattr(quality_runs, "CHECKPOINT_EVERY", 10)
    runs = (
        quality.Run("plain", "baseline", decodings=((1, 0.0, 1), (2, 1.0, 3))),
        quality.Run(
            "confirm",
            "confirm",
            ("--set", "dropout=0.0"),
            full_budget=True,
            seed=1,
            decodings=((2, 1.0, 3, 1),),  # with min_length 1
            test=(2, 1.0, 3, 1),
        ),
    )
    monkeypatch.setattr(quality, "STUDY", runs)
    return runs, tmp_path / "work"


@pytest.mark.slow
def test_runs_score_validation_and_only_marked_runs_score_test(
    tiny_study, tmp_path, monkeypatch, capsys
):
    (plain, confirm), work = tiny_study
    quality_train.run_child(plain, work, minutes=5)
    quality_train.run_child(confirm, work, minutes=quality_runs.FULL_MINUTES)
    first = json.loads((work / "plain" / "result.json").read_text())
    assert first["steps"] == 30 and first["minutes"] == 5 and first["flags"] == []
    assert (
        first["definition"] == plain.definition(5)
        and "--max-minutes" in first["definition"]["training_flags"]
    )
    assert 0 < first["training_seconds"] < first["total_seconds"] and first["matmul_gflops"] > 0
    assert [
        (s["split"], s["beam"], s["alpha"], s["averaged"], s["min_length"]) for s in first["scores"]
    ] == [("validation", 1, 0.0, 1, 0), ("validation", 2, 1.0, 3, 0)]  # 0 when not given
    second = json.loads((work / "confirm" / "result.json").read_text())
    assert [(s["split"], s["min_length"]) for s in second["scores"]] == [
        ("validation", 1),
        ("test", 1),
    ]
    assert (work / "confirm" / "translations.test.beam2-alpha1.0-avg3-min1.txt").is_file()
    for score in first["scores"] + second["scores"]:
        assert (
            0 <= score["bleu"] <= 100
            and 0 <= score["chrf"] <= 100
            and 0 < score["brevity_penalty"] <= 1
        )
    # The two runs share one tokenizer, trained by the first, named by the corpus (a digest of
    # its path), the mixture and the size.
    [shared] = [p.name for p in (work / "tokenizers").iterdir()]
    assert re.fullmatch(r"tsv-[0-9a-f]{8}-sentences-300\.model", shared)
    assert json.loads((work / "confirm" / "run.json").read_text())["vocabulary"][
        "tokenizer"
    ].endswith(shared)

    report = tmp_path / "QUALITY.md"
    report.write_text(
        f"# Study\n\nintro kept\n\n{quality_report.TABLE_START}\nold "
        f"table\n{quality_report.TABLE_END}\n\nanalysis kept\n"
    )
    # Records outside the study's runs stay in QUALITY.json across rewrites.
    report.with_suffix(".json").write_text(json.dumps([]))  # the file's first format: runs alone
    measured = {"name": "probe", "date": "d", "machine": "m", "command": "c", "what": "w"}
    quality_report.write_report([], report)
    extra = {**json.loads(report.with_suffix(".json").read_text()), "measurements": [measured]}
    report.with_suffix(".json").write_text(json.dumps(extra))
    # The lever table: the runs no row names get rows of their own (one a lever), so that every
    # run is counted; a row of QUALITY.json's `levers` gives its runs in its decoding against its
    # base in the base's, and counts the runs it names first (among its runs, else its bases).
    quality_report.write_report(results(work, minutes=5), report)
    text = report.read_text()
    assert (
        text.startswith("# Study\n\nintro kept\n")
        and text.endswith("\n\nanalysis kept\n")
        and "old table" not in text
    )
    written = json.loads(report.with_suffix(".json").read_text())
    assert written == {"runs": [first, second], "measurements": [measured]}
    assert quality_report.recorded_results(report) == [first, second]
    rows = lever_rows(text)
    assert [row[0] for row in rows] == ["baseline", "confirm"]  # each run's lever
    assert sum(int(row[1]) for row in rows) == len(written["runs"])
    validation, test = second["scores"]
    top = max(s["bleu"] for s in first["scores"])
    assert rows[0] == ["baseline", "1", "30", "best", f"{top:.2f}", "-", "-", "-"]
    row = {"change": "dropout 0", "runs": ["confirm"], "decision": "chosen", "base": ["plain"]}
    row |= {"decoding": [2, 1.0, 3, 1], "base_decoding": [2, 1.0, 3]}
    levers = {"sections": [{"title": "A", "text": "text", "rows": [row]}]}
    raw = json.loads(report.with_suffix(".json").read_text())
    report.with_suffix(".json").write_text(json.dumps({**raw, "levers": levers}))
    quality_report.write_report([], report)
    plain_then = next(s for s in first["scores"] if s["beam"] == 2)
    assert lever_rows(report.read_text()) == [
        [
            "dropout 0",
            "2",
            "30",
            "2/1/3",
            f"{validation['bleu']:.2f}",
            "-",
            f"{plain_then['bleu']:.2f}",
            "chosen",
        ]
    ]
    # The chosen settings' test split, scored once: here `confirm`'s, were it the chosen run.
    assert "Not scored yet." in section_of(text, "## The test split")
    with monkeypatch.context() as patch:
        patch.setattr(quality, "CHOSEN_FLAGS", confirm.flags)
        patch.setattr(quality, "CHOSEN_DECODING", (2, 1.0, 3, 1))
        quality_report.write_report([], report)
        tested = section_of(report.read_text(), "## The test split")
        assert f"| 1 | {second['date']} | {second['machine']} | 30 | " in tested
        assert f"| {test['bleu']:.2f} | {test['chrf']:.1f} | " in tested
        assert f"`{confirm.name}`" in section_of(report.read_text(), "## The chosen settings")

    # A result from another screening budget, or of a run trained otherwise since, does not
    # count: that run is done again. The report keeps the older result after the others.
    assert [r["name"] for r in results(work, minutes=4)] == ["confirm"]
    with monkeypatch.context() as patch:
        patch.setattr(
            quality,
            "STUDY",
            (plain, dataclasses.replace(confirm, seed=2)),
        )
        assert [r["name"] for r in results(work, minutes=5)] == ["plain"]
        quality_report.write_report(results(work, minutes=5), report)
        assert quality_report.recorded_results(report) == [first, second]
    # Decodings added since do not train it again: they are what it still lacks.
    more = dataclasses.replace(confirm, decodings=((2, 1.0, 3, 1), (1, 0.0, 2)))
    with monkeypatch.context() as patch:
        patch.setattr(quality, "STUDY", (plain, more))
        assert results(work, minutes=5) == [first, second]
        assert more.missing(second) == [(None, "validation", (1, 0.0, 2))]
        assert confirm.missing(second) == []
        # Scored, it takes the tokenizer its run.json names, though the key has changed since
        # (as a new Ding parser changes it).
        patch.setattr(quality.Run, "tokenizer_key", lambda run: "renamed")
        quality_train.run_child(more, work, minutes=more.minutes(5), score_only=True)
        assert more.missing(json.loads((work / "confirm" / "result.json").read_text())) == []
    # Nor does a result of an earlier version of the study (the code it measured has changed).
    with monkeypatch.context() as patch:
        patch.setattr(quality_runs, "STUDY_VERSION", quality_runs.STUDY_VERSION + 1)
        assert results(work, minutes=5) == []
    # In a fresh checkout (no run directories) the report's raw results say what is done.
    recorded = quality_report.recorded_results(report)
    assert results(tmp_path / "fresh", minutes=5, recorded=recorded) == [first, second]

    # A finished run chosen later to confirm the settings gets its test score, in the chosen
    # decoding, without training again; --list says it waits for it.
    chosen = dataclasses.replace(plain, test=(2, 1.0, 3))
    assert chosen.missing(first) == [(None, "test", (2, 1.0, 3))]
    trained = sorted((work / "plain" / "checkpoints").iterdir())
    with monkeypatch.context() as patch:
        patch.setattr(quality, "STUDY", (chosen, confirm))
        capsys.readouterr()  # the training's output so far
        quality.main(["--list", "--work-dir", str(work), "--minutes", "5"])
        assert capsys.readouterr().out.splitlines()[0].startswith("score plain ")
    quality_train.run_child(chosen, work, minutes=5, score_only=True)
    tested = json.loads((work / "plain" / "result.json").read_text())
    assert (
        tested == {**first, "scores": tested["scores"]} and tested["scores"][:2] == first["scores"]
    )
    assert [(s["split"], s["beam"], s["averaged"]) for s in tested["scores"][2:]] == [
        ("test", 2, 3)
    ]
    assert chosen.missing(tested) == [] and tested["definition"] == chosen.definition(5)
    assert sorted((work / "plain" / "checkpoints").iterdir()) == trained

    # A curve point: the run scored as if its budget (5 minutes) had ended at minute 1, with
    # the checkpoints written by then; the last checkpoint was written as the budget ended.
    # Here those of steps 10 and 20 (written 4 min 30 s and 4 min 10 s before the last).
    end = trained[-1].stat().st_mtime
    for before, path in zip((270, 250, 0), trained, strict=True):
        os.utime(path, (end - before,) * 2)
    curved = dataclasses.replace(chosen, budget=5, curve=(1,), curve_decodings=((1, 0.0, 3),))
    assert curved.missing(tested) == [(1, "validation", (1, 0.0, 3)), (1, "test", (2, 1.0, 3))]
    quality_train.run_child(curved, work, minutes=5, score_only=True)
    pointed = json.loads((work / "plain" / "result.json").read_text())
    assert pointed["scores"] == tested["scores"] and curved.missing(pointed) == []
    [point] = pointed["prefixes"]
    assert point["minutes"] == 1 and point["steps"] == 20
    assert [(s["split"], s["averaged"], s["decoding"]) for s in point["scores"]] == [
        ("validation", 2, [1, 0.0, 3, 0]),  # fewer averaged than asked: two were written
        ("test", 2, [2, 1.0, 3, 0]),
    ]
    assert (work / "plain" / "translations.test.beam2-alpha1.0-avg2-at-1min.txt").is_file()
    monkeypatch.setattr(quality, "CURVE_RUNS", ("plain",))
    monkeypatch.setattr(quality, "CURVE_DECODINGS", ((1, 0.0, 3), (2, 1.0, 3)))
    quality_report.write_report([pointed], report)  # replaces the recorded `first`, keeps `second`
    assert quality_report.recorded_results(report) == [pointed, second]
    # The curve: the point, then the whole run, in each decoding (one the point lacks).
    curve = section_of(report.read_text(), "## The learning curve")
    [at_1, whole] = [line for line in curve.splitlines() if line.startswith("| the curve")]
    scores = point["scores"]
    assert at_1 == (
        f"| the curve, 0 | 1 | 20 | {scores[0]['bleu']:.2f} | - | "
        f"{scores[1]['bleu']:.2f} (2/1/3*) |"
    )
    tested_whole = pointed["scores"][-1]
    assert whole == (
        f"| the curve, 0 | 5 | 30 | - | {pointed['scores'][1]['bleu']:.2f} | "
        f"{tested_whole['bleu']:.2f} (2/1/3*) |"
    )
    # A minute before the first checkpoint has nothing to score; a curve needs a budget.
    early = dataclasses.replace(curved, curve=(0.1,))
    with pytest.raises(ValueError, match="plain: no checkpoint was written in its first 0.1 min"):
        quality_train.run_child(early, work, minutes=5, score_only=True)
    with pytest.raises(ValueError, match="a curve needs a budget beyond its last minute"):
        quality.Run("x", "y", curve=(14,), budget=14)


def test_report_without_markers_is_refused(tmp_path):
    report = tmp_path / "QUALITY.md"
    report.write_text("# hand-written, no markers\n")
    with pytest.raises(ValueError, match="lacks the table markers"):
        quality_report.write_report([], report)


def test_list_and_help(tiny_study, capsys):
    _, work = tiny_study
    quality.main(["--list", "--work-dir", str(work), "--minutes", "3"])
    assert capsys.readouterr().out.splitlines() == [
        "todo  plain                        baseline        3 min  ",
        "todo  confirm                      confirm         14 min  --set dropout=0.0",
    ]
    with pytest.raises(SystemExit):
        quality.main(["--only", "nothing", "--work-dir", str(work)])
    assert "no run or lever named nothing" in capsys.readouterr().err
    help_text = subprocess.run(
        [sys.executable, "-m", "benchmarks.quality", "--help"],
        capture_output=True,
        text=True,
        cwd=quality.__file__.rsplit("/benchmarks/", 1)[0],
    ).stdout
    assert "--minutes" in help_text and "--only" in help_text and "Resumable" in help_text


def test_make_demo_trains_and_decodes_as_the_study_chose():
    """demo.flags, what `make demo` trains, is the chosen run's training flags, and its
    averaging, beam and alpha are the chosen decoding's, in which runs of those flags were tested
    on two seeds: the demo cannot drift from what the study measured."""
    from training import train
    from training.plan import parse_overrides

    demo = demo_settings.demo_flags()
    chosen = {run.name: run for run in quality.STUDY}[quality.CHOSEN_RUN]
    assert chosen.seed == 0

    def decoded_at_the_demos_budget(run):
        """The validation decodings of `run` trained, or cut by its curve, at the demo's budget."""
        if run.minutes(quality.SCREEN_MINUTES) == quality.FULL_MINUTES:
            return run.decodings
        return run.curve_decodings if quality.FULL_MINUTES in run.curve else ()

    confirmed = {
        run.seed
        for run in quality.STUDY
        if run.flags == chosen.flags
        and run.test == quality.CHOSEN_DECODING
        and quality.CHOSEN_DECODING in decoded_at_the_demos_budget(run)
    }
    assert confirmed >= {0, 1}
    chosen_decoding = quality_runs.decoding_settings(quality.CHOSEN_DECODING)
    tested = {  # and the study's recorded results hold those test scores
        result["seed"]
        for whole in quality_report.recorded_results(
            pathlib.Path(quality.__file__).with_name("QUALITY.md")
        )
        for result in (whole, *quality_report.curve_points(whole))
        if tuple(result["flags"]) == chosen.flags
        and result["minutes"] == quality.FULL_MINUTES
        and any(
            s["split"] == "test" and quality_runs.decoding_key(s) == chosen_decoding
            for s in result["scores"]
        )
    }
    assert tested >= {0, 1}

    def parsed(flags):
        args = vars(train.build_parser().parse_args([*flags, "--run-dir", "run"]))
        return {**args, "overrides": parse_overrides(args["overrides"])}

    beam, alpha, averaged, min_length = quality_runs.decoding_settings(quality.CHOSEN_DECODING)
    study = parsed(chosen.training_flags(quality.FULL_MINUTES))
    assert parsed([*demo, "--max-minutes", str(quality.FULL_MINUTES)]) == {
        **study,
        "keep_checkpoints": averaged,  # the demo averages the checkpoints it keeps
        "beam_size": beam,
        "alpha": alpha,
    }
    assert min_length == 1  # the Translator's default, which the demo's export uses


def test_every_recorded_run_is_scored_as_the_study_defines_it(tmp_path):
    """A fresh checkout continues the study from QUALITY.json without the runs' checkpoints: a
    recorded run lacking a decoding its definition asks for would send `make quality` to score
    checkpoints that are not there (and fail), so every one is complete."""
    recorded = quality_report.recorded_results(
        pathlib.Path(quality.__file__).with_name("QUALITY.md")
    )
    missing = {
        run.name: run.missing(result)
        for run in quality.STUDY
        if (result := quality_runs.result_of(run, tmp_path, quality.SCREEN_MINUTES, recorded))
    }
    current = [r for r in recorded if r["definition"].get("version") == quality_runs.STUDY_VERSION]
    assert len(missing) == len(current) >= 70  # each recorded run of this version is defined
    assert missing == {name: [] for name in missing}


def test_runs_share_a_tokenizer_only_when_they_train_it_on_the_same_text(monkeypatch):
    """The study trains one tokenizer per vocabulary and training text: a tagged mixture's
    (--tag-phrases) is not an untagged one's, nor one of other repeats, alternatives, size or
    Ding parser."""
    keys = {
        quality.Run("r", "lever", flags).tokenizer_key()
        for flags in (
            quality.CHOSEN_FLAGS,
            (*quality.CHOSEN_FLAGS, "--tag-phrases"),
            (*quality.CHOSEN_FLAGS, "--sentence-alternatives"),
            (*quality.CHOSEN_FLAGS, "--sentence-repeats", "20"),
            (*quality.CHOSEN_FLAGS, "--vocab-size", "16000"),
        )
    }
    assert len(keys) == 5
    same_text = (*quality.CHOSEN_FLAGS, "--set", "norm_first=true", "--seed", "1")
    assert quality.Run("r", "lever", same_text).tokenizer_key() in keys
    # Another dataset is another text.
    other = [
        quality.Run("r", "lever", (*same_text, "--dataset", f"tsv:{path}")).tokenizer_key()
        for path in ("a", "b")
    ]
    assert len({*other, *keys}) == len(keys) + 2
    # A new Ding parser changes the text, and so the key.
    monkeypatch.setattr(ding, "PARSER_VERSION", ding.PARSER_VERSION + 1)
    assert quality.Run("r", "lever", same_text).tokenizer_key() not in keys


REPORT = pathlib.Path(quality.__file__).with_name("QUALITY.md")
MAX_REPORT_LINES = 300


def test_the_report_is_written_from_quality_json(tmp_path):
    """benchmarks/QUALITY.md is what `--report-only` writes from QUALITY.json (neither changes),
    a short report: at most 300 lines of at most 100 columns, every recorded run counted in one
    row of the lever table, none in the rows for runs no lever names."""
    copy = tmp_path / "QUALITY.md"
    copy.write_text(REPORT.read_text())
    copy.with_suffix(".json").write_text(REPORT.with_suffix(".json").read_text())
    quality.main(["--report-only", "--output", str(copy), "--work-dir", str(tmp_path / "none")])
    assert copy.read_text() == REPORT.read_text(), "run python -m benchmarks.quality --report-only"
    assert copy.with_suffix(".json").read_text() == REPORT.with_suffix(".json").read_text()

    text = REPORT.read_text()
    lines = text.splitlines()
    assert len(lines) <= MAX_REPORT_LINES, f"QUALITY.md has {len(lines)} lines"
    assert [n for n, line in enumerate(lines, 1) if len(line) > 100] == []
    data = quality_report.recorded(REPORT)
    rows = lever_rows(text)
    assert sum(int(row[1]) for row in rows) == len(data["runs"]) >= 70
    assert "Runs no row above names" not in text
    for heading in ("## The chosen settings", "## The learning curve", "## The test split"):
        assert heading in text


def test_every_lever_row_names_scored_runs():
    """Each name in the lever table is a recorded run, curve point or measurement, scored on
    validation in the row's decoding (its base in the base's): no cell reads "-" for a typo."""
    named = quality_report.entries(quality_report.recorded(REPORT))
    missing = [
        (trial.change, name)
        for section in quality_report.lever_sections(quality_report.recorded(REPORT))
        for trial in section.trials
        for names, decoding in (
            (trial.runs, trial.decoding),
            (trial.base, trial.base_decoding or trial.decoding),
        )
        for name in names
        if quality_report.scored_in(quality_report.entry(name, named), decoding) is None
    ]
    assert missing == []


def test_the_report_states_the_chosen_settings_and_their_test_split():
    """The report's chosen settings are the demo's command (demo.flags, as `make demo` trains),
    and its test split the chosen runs' test scores in the chosen decoding."""
    from training import train

    text = REPORT.read_text()
    chosen = section_of(text, "## The chosen settings")
    block = chosen.split("```sh\n", 1)[1].split("```", 1)[0]
    words = shlex.split(block.replace("\\\n", " "))
    assert words[:3] == ["python", "-m", "training.train"]
    demo = demo_settings.demo_flags()
    demo += ["--max-minutes", f"{quality.FULL_MINUTES:g}", "--run-dir", "runs/demo"]
    parser = train.build_parser()
    assert vars(parser.parse_args(words[3:])) == vars(parser.parse_args(demo))

    runs = quality_report.chosen_runs(quality_report.recorded_results(REPORT))
    tested = section_of(text, "## The test split")
    assert {r["seed"] for r in runs} >= {0, 1}
    for run in runs:
        assert quality_report.short(run["name"], quality.SMOOTHED_RUN) in chosen
        test = quality_report.scored_in(run, quality.CHOSEN_DECODING, "test")
        assert f"| {run['seed']} | {run['date']} | " in tested
        assert f"| {test['bleu']:.2f} | {test['chrf']:.1f} | {test['brevity_penalty']:.3f} |" in (
            tested
        )


def test_the_study_code_keeps_no_history():
    """The study's modules declare runs and write the report; dates, results and the reasoning
    behind each choice live in QUALITY.json, which keeps every declaration's old comments."""
    sources = sorted(pathlib.Path(quality.__file__).parent.glob("quality*.py"))
    dated = [
        f"{path.name}:{n}"
        for path in sources
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"20\d\d-[01]\d-[0-3]\d", line)
    ]
    assert dated == []
    assert len(pathlib.Path(quality.__file__).read_text().splitlines()) < 500
    notes = quality_report.recorded(REPORT)["declarations_as_written"]
    declared = {run.name for run in quality.STUDY}
    assert {name for note in notes for name in note.get("runs", ())} <= declared

"""A clean console: the programs hide TensorFlow's C++ log lines (keras_transformer_cli/console.py),
`--verbose` and a user's TF_CPP_MIN_LOG_LEVEL bring them back, and `python -m training.summary` (the
end of `make demo`) shows a run's figures and paths. The programs are installed as `kt-...`
commands."""

import configparser
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from conftest import number_pairs
from conftest import run_python as conftest_run_python

from keras_transformer_cli import console
from training import summary

ROOT = pathlib.Path(__file__).resolve().parents[1]

# absl/glog lines (I0000 00:00:1795432264.532217 2622 port.cc:153] ...) and absl's warning about
# them, the oneDNN and cuInit lines among them, sentencepiece's (normalizer.cc(51) LOG(INFO) ...).
TENSORFLOW_LOG_LINE = re.compile(
    r"^[IWEF]\d{4} \d\d:\d\d:\d\d|oneDNN|cuInit|absl::InitializeLog|LOG\(INFO\)", re.M
)


def run_python(*args, env=None, timeout=300):
    """`python ARGS` without the TF_CPP_MIN_LOG_LEVEL of this process (conftest.py sets one)."""
    return conftest_run_python(*args, env={console.LEVEL_VARIABLE: None, **(env or {})})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny `python -m training.train` run with default console settings (it imports TensorFlow,
    trains and loads a tokenizer, exports): (its stderr, its export directory)."""
    root = tmp_path_factory.mktemp("console")
    for split, n, seed in (("train", 200, 0), ("validation", 4, 1), ("test", 4, 2)):
        (root / f"{split}.tsv").write_text(
            "".join(f"{de}\t{en}\n" for de, en in number_pairs(n, seed))
        )
    completed = run_python(
        "-m",
        "training.train",
        "--preset",
        "tiny",
        "--steps",
        "4",
        "--steps-per-epoch",
        "2",
        "--bleu-sentences",
        "0",
        "--dataset",
        f"tsv:{root}",
        "--vocab-size",
        "300",
        "--beam-size",
        "1",
        "--run-dir",
        str(root / "run"),
        "--export-dir",
        str(root / "export"),
    )
    assert "training stopped at step 4" in completed.stderr  # the program's own messages still pass
    return completed.stderr, root / "export"


def run_command(name, *args, status=0, cwd=None):
    """The installed command `name` (beside this Python, as `pip install .` puts it on the PATH),
    run from `cwd`; asserts its exit status."""
    environment = {k: v for k, v in os.environ.items() if k != console.LEVEL_VARIABLE}
    command = [str(pathlib.Path(sys.executable).parent / name), *map(str, args)]
    completed = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=300, env=environment
    )
    assert completed.returncode == status, completed.stdout[-2000:] + completed.stderr[-4000:]
    return completed


def test_every_program_is_installed_as_a_command():
    """setup.cfg's console scripts name every program (a module whose `main` is a
    `console.program`) and nothing else."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = config["options.entry_points"]["console_scripts"].split("\n")
    targets = {line.split("=")[1].strip() for line in scripts if line.strip()}
    programs = set()
    for package in ("training", "serving"):
        for path in (ROOT / package).glob("*.py"):
            if "@console.program\ndef main(" in path.read_text():
                programs.add(f"keras_transformer_cli.{package}.{path.stem}:main")
    assert targets == programs
    refused = run_command("kt-train", "--steps", "0", status=2)
    assert refused.stderr.startswith("usage: kt-train") and "--steps" in refused.stderr


@pytest.mark.slow
def test_programs_hide_tensorflow_log_lines(trained, tmp_path):
    train_stderr, export = trained
    translate = run_command("kt-translate", "--model", export, "eins zwei", cwd=tmp_path)
    assert translate.stdout.count("\n") == 1
    (tmp_path / "de-en").write_text("Das ist gut. :: That is good.\nEr ist da. :: He is there.\n")
    prepared = run_python(
        "-m",
        "training.prepare_ding",
        "--ding-file",
        str(tmp_path / "de-en"),
        "--data-dir",
        str(tmp_path / "cache"),
    )  # imports TensorFlow and tfds
    assert "dataset written to" in prepared.stdout
    for stderr in (train_stderr, translate.stderr, prepared.stderr):
        assert not TENSORFLOW_LOG_LINE.search(stderr), stderr[-3000:]


@pytest.mark.slow
def test_verbose_or_the_environment_brings_them_back(trained):
    _, export = trained
    # --verbose wins over a level inherited from a parent (one that imported the training package)
    verbose = run_python(
        "-m",
        "serving.translate",
        "--verbose",
        "--model",
        str(export),
        "eins zwei",
        env={console.LEVEL_VARIABLE: "3"},
    )
    # tensorflow-text's sentencepiece logs loading the tokenizer, on any machine
    assert "LOG(INFO)" in verbose.stderr and TENSORFLOW_LOG_LINE.search(verbose.stderr), (
        verbose.stderr[-3000:]
    )
    assert verbose.stdout.count("\n") == 1
    mine = run_python(
        "-m",
        "serving.translate",
        "--model",
        str(export),
        "eins zwei",
        env={console.LEVEL_VARIABLE: "0"},
    )
    assert TENSORFLOW_LOG_LINE.search(mine.stderr), mine.stderr[-3000:]


def test_the_filter_applies_the_level_and_finds_verbose(monkeypatch):
    lines = {
        "I": "I0000 00:00:1795432264.532217    2622 port.cc:153] oneDNN custom operations are on.",
        "W": "W1121 10:20:30.123456   77 some_file.cc:12] a warning",
        "E": "E0000 00:00:1795432271.188877 2622 cuda_platform.cc:52] failed call to cuInit: X",
        "absl": "WARNING: All log messages before absl::InitializeLog() is called are written to "
        "STDERR",
        "sentencepiece": "normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use identity "
        "normalization.",
    }
    hidden = {
        level: {
            name for name, line in lines.items() if re.match(console.noise_pattern(level), line)
        }
        for level in (1, 2, 3)
    }
    assert hidden == {
        1: {"I", "absl", "sentencepiece"},
        2: {"I", "W", "absl", "sentencepiece"},
        3: set(lines),
    }
    for kept in (
        "F0000 00:00:1.0 1 file.cc:1] Check failed",
        "WARNING:tensorflow:a Python warning",
        "training stopped at step 4",
        "Traceback (most recent call last):",
    ):
        assert not re.match(console.noise_pattern(3), kept)
    monkeypatch.setattr(
        sys, "orig_argv", ["python", "-X", "utf8", "-m", "serving.translate", "--verb", "x"]
    )
    assert console.is_program_process()
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "pytest", "--verbose"])
    assert not console.is_program_process()


def fake_run(tmp_path, scores=True):
    run, export = tmp_path / "run", tmp_path / "export"
    (run / "checkpoints").mkdir(parents=True)
    for step in (975, 1000, 1018):
        (run / "checkpoints" / f"step-{step:07d}.weights.npz").touch()
    (run / "model.keras").touch()
    for version in (2, 10):
        (export / str(version)).mkdir(parents=True)
        (export / str(version) / "saved_model.pb").touch()
    (export / "11").mkdir()  # no saved_model.pb: not a version
    if scores:
        (run / "translations.test.txt.scores.json").write_text(
            json.dumps(
                {
                    "bleu": 4.4871,
                    "chrf": 25.3149,
                    "chrf++": 23.21,
                    "sentences": 870,
                    "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
                    "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
                }
            )
        )
    return run, export


def test_summary_prints_the_figures_and_paths(tmp_path, capsys):
    run, export = fake_run(tmp_path)
    summary.main(["--run-dir", str(run), "--export-dir", str(export), "--demo"])
    text = capsys.readouterr().out
    for expected in (
        "test BLEU 4.5, chrF 25.3, chrF++ 23.2",
        "tok:13a|smooth:exp",
        "nc:6|nw:0",
        "training steps: 1018",
        f"model:             {run / 'model.keras'}\n",
        f"export:            {export / '10'}\n",
        f"tensorboard --logdir {run / 'logs'}",
        f"{run / 'translations.test.txt'} (missing)",
        f"python -m serving.translate --model {export} ",
        f"python -m training.evaluate --model {run / 'model.keras'} --beam-size 1 "
        f"--output {run / 'translations.test.greedy.txt'}",
        f'make demo DEMO_MINUTES=30 DEMO_ARGS="--keep-checkpoints 160" '
        f"DEMO_DIR={tmp_path / 'run-30-minutes'} DEMO_EXPORT={tmp_path / 'export-30-minutes'}\n",
        ". .venv/bin/activate",
    ):
        assert expected in text, text
    assert "not been scored" not in text


def test_only_a_demo_s_summary_suggests_a_longer_demo(tmp_path, capsys):
    """`make demo` trains the demo's settings: a run trained otherwise is not told to run it
    (the Makefile passes --demo); --demo takes no value."""
    run, export = fake_run(tmp_path)
    text = "\n".join(summary.summary(run, export))
    assert "python -m serving.translate" in text and "make demo" not in text
    assert "make demo DEMO_MINUTES=30" in "\n".join(summary.summary(run, export, demo=True))
    with pytest.raises(SystemExit) as exit_info:
        summary.main(["--run-dir", str(run), "--export-dir", str(export), "--demo=yes"])
    stderr = capsys.readouterr().err
    (error,) = stderr.strip().splitlines()[-1:]
    assert exit_info.value.code == 2
    assert "--demo" in error and "ignored explicit argument 'yes'" in error, stderr


def test_summary_of_a_run_not_scored(tmp_path, capsys):
    run, export = fake_run(tmp_path, scores=False)
    text = "\n".join(summary.summary(run, tmp_path / "no-export"))
    assert "the run has not been scored" in text and "BLEU" not in text
    assert (
        "training steps: 1018" in text
        and f"export:            none in {tmp_path / 'no-export'}" in text
    )
    with pytest.raises(SystemExit) as exit_info:
        summary.main(["--help"])
    assert exit_info.value.code == 0 and "python -m training.summary" in capsys.readouterr().out

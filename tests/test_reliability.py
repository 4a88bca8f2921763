"""Ordinary faults, each ending the way RELIABILITY.md says: one line naming the file, URL or
flag (`error: ...`), status 1, nothing half-written, nothing deleted that the program did not
create. One tiny trained run (module fixture) is copied for the cases that spoil it."""

import http.server
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import threading

import keras
import pytest
from conftest import run_python, tiny_flags, write_number_data

from keras_transformer.exports import latest_version
from keras_transformer_cli import files, flags, versions
from serving import client as serving_client
from serving import ctranslate2, export, translate
from training import average_checkpoints, train


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(flags of a 4-step tiny run, its run directory), trained once."""
    root = write_number_data(tmp_path_factory.mktemp("reliability"), (300, 4, 4))
    run = root / "run"
    run_flags = [*tiny_flags(root), "--steps-per-epoch", "2", "--bleu-sentences", "0"]
    run_flags += ["--beam-size", "1", "--run-dir", str(run)]
    train.main([*run_flags, "--steps", "4"])
    return run_flags, run


def copy_of(trained, tmp_path):
    run_flags, run = trained
    shutil.copytree(run, tmp_path / "run")
    return [str(tmp_path / "run") if f == str(run) else f for f in run_flags], tmp_path / "run"


def fails(capsys, main, argv, *expected, status=1):
    """Runs a program's main: it must exit with `status` and one line holding `expected`."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert exit_info.value.code == status and len(lines) == 1, lines
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def cut(path, size):
    path.write_bytes(path.read_bytes()[:size])


@pytest.mark.slow
def test_a_cut_backup_index_or_weights_file_is_named(trained, tmp_path, capsys):
    run_flags, run = copy_of(trained, tmp_path)
    index = run / "backup" / "backup.json"
    whole = index.read_text()
    index.write_text(whole[: len(whole) // 2])
    fails(capsys, train.main, [*run_flags, "--steps", "6"], f"{index} cannot be read")
    index.write_text(whole)
    weights = run / "backup" / json.loads(whole)["weights"]
    cut(weights, 1000)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    fails(capsys, train.main, [*run_flags, "--steps", "6"], f"{weights} cannot be read")
    assert json.loads(index.read_text())["step"] == 4  # nothing replaced
    # a resume refused changes nothing: run.json still asks for the finished run's 4 steps
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_a_copied_run_directory_names_its_own_files(trained, tmp_path, capsys):
    """run.json records the model and the export inside the run by paths relative to it: the
    copy's finished run names the copy's files, not the original's."""
    run_flags, run = copy_of(trained, tmp_path)
    finished = json.loads((run / "run.json").read_text())["finished"]
    assert finished["model"] == "model.keras" and finished["export"] == "export/1"
    train.main([*run_flags, "--steps", "4"])  # finished: says so, changes nothing
    said = capsys.readouterr().out
    assert f"model {run / 'model.keras'} (" in said and f"export {run / 'export' / '1'};" in said


def test_a_resume_knows_its_tokenizer_by_another_path(tmp_path, monkeypatch):
    """A run recorded --tokenizer's absolute path; resumed from its parent folder with a relative
    path to the same file (as the quality study's score-only child is), it is the same
    vocabulary. Another file is still a vocabulary mismatch naming the flags."""
    from keras_transformer_cli.run_dir import RunDirectory, RunError, RunState
    from training.plan import TrainingPlan

    for name in ("tokenizer.model", "other.model"):
        (tmp_path / name).write_bytes(b"pieces")
    recorded = {"vocabulary": {"tokenizer": str(tmp_path / "tokenizer.model")}}
    state = RunState(RunDirectory(tmp_path / "run"), recorded, 0, None)
    monkeypatch.chdir(tmp_path)
    flag_of = TrainingPlan.flag_of
    state.check({"vocabulary": {"tokenizer": "tokenizer.model"}}, 1, "--steps 1", flag_of)
    with pytest.raises(RunError, match="vocabulary mismatch: .*--vocab-size/--tokenizer/"):
        state.check({"vocabulary": {"tokenizer": "other.model"}}, 1, "--steps 1", flag_of)


def test_every_recorded_setting_names_the_flag_declared_for_it():
    """A resume that disagrees with run.json names the flag of each setting: every setting the
    plan records (and the config fields its flags set) maps to flags the plan declares; other
    config fields to --set."""
    import keras_transformer as kt
    from training.plan import TrainingPlan

    plan = TrainingPlan.from_flags(train.build_parser().parse_args(["--run-dir", "r"]))
    config = kt.TransformerConfig.preset("tiny", vocab_size=40)
    settings = plan.settings(config, ("de", "en"), "float32")
    declared = {action.option_strings[0] for action in train.build_parser()._actions}
    settings_of_flags = [*settings, "config.vocab_size", "config.tokens_per_batch"]
    for setting in [s for s in settings_of_flags if s != "config"]:
        named = TrainingPlan.flag_of(setting).split("/")
        assert set(named) <= declared, setting
    assert TrainingPlan.flag_of("phrases.sentence_repeats").startswith("--phrases/")
    assert TrainingPlan.flag_of("config.d_model") == "--set d_model"


def test_a_resume_must_agree_on_the_phrase_tag(tmp_path):
    """--tag-phrases (and --sentence-alternatives) is recorded with the phrase mixture; an
    untagged mixture's record omits the tag (the default is recorded by omission), and a
    resume that changes the tag is refused naming the flags."""
    from keras_transformer_cli.run_dir import RunDirectory, RunError, RunState
    from training.datasets import phrase_mixture
    from training.plan import TrainingPlan

    tagged = {"phrases": phrase_mixture(True, 10, True, False)}
    assert tagged == {"phrases": {"sentence_repeats": 10, "tag": "<phrase>"}}
    untagged = {"phrases": phrase_mixture(True, 10, False, False)}
    assert untagged == {"phrases": {"sentence_repeats": 10}}
    assert phrase_mixture(False, 1, False, False) is None
    state = RunState(RunDirectory(tmp_path / "run"), tagged, 0, None)
    state.check(tagged, 1, "--steps 1", TrainingPlan.flag_of)
    with pytest.raises(RunError, match="--tag-phrases/--sentence-alternatives: .<phrase>. in"):
        state.check(untagged, 1, "--steps 1", TrainingPlan.flag_of)
    # So with --sentence-alternatives: recorded when given, refused when changed.
    alternatives = {"phrases": phrase_mixture(True, 10, False, True)}
    assert alternatives == {"phrases": {"sentence_repeats": 10, "sentence_alternatives": True}}
    state = RunState(RunDirectory(tmp_path / "alternatives"), alternatives, 0, None)
    with pytest.raises(RunError, match="--sentence-alternatives: True in the run, None now"):
        state.check(untagged, 1, "--steps 1", TrainingPlan.flag_of)


@pytest.mark.slow
def test_a_cut_checkpoint_is_named_by_averaging_training_and_export(trained, tmp_path, capsys):
    run_flags, run = copy_of(trained, tmp_path)
    last = run / "checkpoints" / "step-0000004.weights.npz"
    cut(last, 300)
    fails(capsys, average_checkpoints.main, ["--run-dir", str(run)], f"{last}: not a readable")
    # the training rerun trains on to step 5, then averages steps 2, 4 and 5 and names step 4
    fails(capsys, train.main, [*run_flags, "--steps", "5"], f"{last}: not a readable checkpoint")
    assert [p.name for p in (run / "export").iterdir()] == ["1"]
    export_dir = tmp_path / "exports"
    argv = ["--model", str(last), "--export-dir", str(export_dir)]
    fails(capsys, export.main, argv, f"{last}: not a readable checkpoint")
    assert not export_dir.exists()


@pytest.mark.slow
def test_export_names_a_spoiled_or_foreign_model_and_a_cut_tokenizer(trained, tmp_path, capsys):
    _, run = copy_of(trained, tmp_path)
    model = run / "model.keras"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped = tmp_path / "flipped.keras"
    flipped.write_bytes(bytes(data))
    foreign = tmp_path / "foreign.keras"
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).save(foreign)
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(model.read_bytes()[:2000])
    for path, message in (
        (flipped, "not a readable .keras model"),
        (foreign, "a Keras model, but not a keras-transformer Transformer"),
        (truncated, "not a readable .keras model"),
    ):
        tokenizer = ["--tokenizer", str(run / "tokenizer.model")]
        argv = ["--model", str(path), *tokenizer, "--export-dir", str(tmp_path / "e")]
        fails(capsys, export.main, argv, f"{path}: {message}")
    cut(run / "tokenizer.model", 100)
    argv = ["--model", str(model), "--export-dir", str(tmp_path / "e")]
    fails(capsys, export.main, argv, f"{run / 'tokenizer.model'}: not a readable sentencepiece")
    assert not (tmp_path / "e" / "1").exists()


@pytest.mark.slow
def test_translate_splits_at_newlines_and_skips_an_empty_version(trained, tmp_path, capsys):
    _, run = trained
    exports = tmp_path / "exports"
    shutil.copytree(run / "export", exports)
    (exports / "99").mkdir()  # not a version: no saved_model.pb
    translate.main(["--model", str(exports), "eins zwei"])
    assert len(capsys.readouterr().out.splitlines()) == 1
    stdin = io.TextIOWrapper(io.BytesIO(b"eins\ndrei\x0cvier\xc2\x85f\xc3\xbcnf\r\n"))
    translate.main(["--model", str(exports), "--scores"], stdin=stdin)
    assert len(capsys.readouterr().out.splitlines()) == 2  # split at \n only
    assert latest_version(exports) == exports / "1"


def test_lines_split_at_newlines_only():
    args = flags.parser(__doc__, "x")
    flags.add_sentences(args)
    parsed = args.parse_args([])
    text = "a\x0cb\x85c\u2028d\r\ne\n\nf\n"
    assert flags.read_sentences(parsed, io.StringIO(text)) == ["a\x0cb\x85c\u2028d", "e", "", "f"]
    raw = io.TextIOWrapper(io.BytesIO(b"ok\n\xffx\n"))
    with pytest.raises(ValueError, match=r"standard input:2: not UTF-8"):
        flags.read_sentences(parsed, raw)


class Canned(http.server.BaseHTTPRequestHandler):
    """A server that answers every request with `answer` (content type, body)."""

    answer = ("application/json", b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", self.answer[0])
        self.end_headers()
        self.wfile.write(self.answer[1])

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "answer, message",
    [
        (
            (
                "application/json",
                b'{"predictions": [{"translation": "x", "score": -1.0, '
                b'"alignment": [[1.0]], "tokens": [5]}]}',
            ),
            "the answer lacks the output 'nbest_translations'",
        ),
        (("text/html", b"<html><body>Bad gateway</body></html>"), "the answer is not JSON"),
    ],
)
def test_client_names_the_url_and_the_field_of_a_bad_answer(answer, message, capsys):
    handler = type("Handler", (Canned,), {"answer": answer})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1/models/transformer:predict"
        argv = ["--port", str(server.server_port), "--host", "127.0.0.1", "--retries", "0", "x"]
        fails(capsys, serving_client.main, argv, url, message)
    finally:
        server.shutdown()
        server.server_close()


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.slow
def test_converter_leaves_what_it_did_not_create(trained, tmp_path):
    """An OUT.partial of the user's stays; what a killed conversion of this host left (a dead
    process's temporary) goes, a living one's and another host's stay."""
    _, run = trained
    out = tmp_path / "ct2"
    (tmp_path / "ct2.partial").mkdir()
    (tmp_path / "ct2.partial" / "notes.txt").write_text("mine")
    host = files.socket.gethostname()
    stale = tmp_path / f".ct2.tmp-{host}-{dead_pid()}-abc"
    living = tmp_path / f".ct2.tmp-{host}-{os.getpid()}-def"
    other = tmp_path / f".ct2.tmp-elsewhere-{dead_pid()}-ghi"
    for directory in (stale, living, other):
        directory.mkdir()
    model = keras.models.load_model(run / "model.keras")
    ctranslate2.convert(model, run / "tokenizer.model", out)
    assert (out / "model.bin").is_file()
    assert (tmp_path / "ct2.partial" / "notes.txt").read_text() == "mine"
    assert not stale.exists() and living.exists() and other.exists()


def test_an_export_that_loses_a_race_takes_the_next_version(tmp_path, monkeypatch):
    """Another export renames its version 1 into place between our choice of a number and our
    rename: ours becomes 2, theirs stays."""
    base = tmp_path / "m"
    base.mkdir()
    rename = os.rename

    def racing(source, target):
        if target == base / "1" and not (base / "1").exists():
            (base / "1").mkdir()
            (base / "1" / "saved_model.pb").write_text("theirs")
        return rename(source, target)

    monkeypatch.setattr(versions.os, "rename", racing)
    staging = base / ".staging"
    staging.mkdir()
    (staging / "saved_model.pb").write_text("ours")
    assert versions._publish(staging, base, None) == base / "2"
    assert (base / "1" / "saved_model.pb").read_text() == "theirs"
    assert (base / "2" / "saved_model.pb").read_text() == "ours"


@pytest.mark.slow
def test_a_full_disk_while_backing_up_is_one_line(trained, tmp_path):
    """Under a 2 MB file-size limit the backup (about 3 MB) does not fit: one line naming it,
    status 1, no flood of h5py errors, no crash, no backup file."""
    run_flags, _ = trained
    run = tmp_path / "run"
    argv = [str(run) if f.endswith("/run") else f for f in run_flags]
    limit = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000))"
    program = f"{limit}\nimport sys\nfrom training import train\ntrain.main(sys.argv[1:])"
    completed = run_python("-c", program, *argv, "--steps", "2", status=1)
    lines = completed.stderr.splitlines()
    assert not [line for line in lines if "Traceback" in line or "Exception ignored" in line]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: no space left for "), errors
    assert "step-0000000.weights.h5" in errors[0] and "MiB allowed" in errors[0]
    assert not (run / "backup").exists() or not any((run / "backup").iterdir())
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY


@pytest.mark.slow
def test_a_full_disk_names_the_file_and_where_to_free_space(trained, tmp_path):
    """Under a 200 KB file-size limit, averaging, converting and exporting each end in one line
    naming what they were writing (never a temporary file, never TensorFlow's function-node
    text) and where to free space; nothing is left behind, the export's new folders neither."""
    _, run = trained
    model = str(run / "model.keras")
    runs = []
    for program, argv, written in (
        ("training.average_checkpoints", ["--run-dir", str(run), "--last", "2"], "avg.keras"),
        ("serving.ctranslate2", ["--model", model], "ct2"),
        ("serving.export", ["--model", model, "--export-dir", str(tmp_path / "new" / "m")], "m"),
    ):
        target = tmp_path / ("new/m" if written == "m" else written)
        runs.append((program, argv + ([] if written == "m" else ["--output", str(target)])))
    completed = run_python("-c", FULL_DISK_PROGRAMS, json.dumps(runs))
    statuses = [line for line in completed.stdout.splitlines() if line.startswith("status")]
    assert statuses == ["status 1"] * 3, completed.stdout + completed.stderr[-3000:]
    errors = [line for line in completed.stderr.splitlines() if line.startswith("error")]
    for (_, argv), error in zip(runs, errors, strict=True):
        target = argv[argv.index("--output") + 1] if "--output" in argv else tmp_path / "new/m"
        assert error.startswith(f"error: no space left for {target} (File too large); free some "
                                f"space in {tmp_path} and run it again"), error  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# The programs [(module, argv)] of argv[1], one after another in this process, under a 200 KB
# file-size limit (Python ignores SIGXFSZ: a write past it fails with EFBIG); each one's status
# printed.
FULL_DISK_PROGRAMS = """
import json, resource, runpy, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
for program, argv in json.loads(sys.argv[1]):
    sys.argv = [program, *argv]
    try:
        runpy.run_module(program, run_name="__main__")
        print("status 0", flush=True)
    except SystemExit as stop:
        print(f"status {stop.code}", flush=True)
"""


@pytest.mark.slow
def test_a_directory_or_a_cut_file_where_a_model_file_is_expected_says_so(
    trained, tmp_path, capsys
):
    run_flags, run = trained
    cut = tmp_path / "model.keras"
    cut.write_bytes((run / "model.keras").read_bytes()[:3000])
    (tmp_path / "tokenizer.model").write_bytes((run / "tokenizer.model").read_bytes())
    for program, argv, message in (
        (export, ["--model", str(run), "--export-dir", str(tmp_path / "e")],
         f"--model {run} is a directory; give a .keras model or a step checkpoint"),
        (translate, ["--model", str(cut), "eins"], f"{cut}: not a readable .keras model (not a "
         "whole zip archive: cut, or another kind of file)"),
        (train, [*run_flags[:-2], "--run-dir", str(tmp_path / "r"), "--init-from", str(run)],
         f"--init-from {run} is a directory; give the model file in it (e.g. "
         f"{run / 'model.keras'})"),
    ):  # fmt: skip
        error = fails(capsys, program.main, argv)
        assert error.startswith(f"error: {message}") and "File not found" not in error, error


def test_the_loser_of_two_writers_of_one_folder_names_its_flag(tmp_path):
    """Two conversions (or binarizations) to one --output: the second to finish finds the
    first's folder there and says so, naming --output; its own temporary folder is gone."""
    out = tmp_path / "ct2"
    with pytest.raises(FileExistsError, match=f"--output {out} was written by another process"):
        with files.new_directory(out) as (directory, _):
            (directory / "model.bin").write_text("ours")
            out.mkdir()  # the other writer finished first
            (out / "model.bin").write_text("theirs")
    assert (out / "model.bin").read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]

"""The layout holds: imports run one way (the library; below the programs, `keras_transformer_cli/`;
then training/, serving/ and benchmarks/), importing a program sets nothing up, each flag has one
definition, and every command a program prints for the user parses with that program's parser."""

import ast
import importlib
import json
import pathlib
import shlex
import subprocess

import pytest
from conftest import run_python

from training import summary

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("keras_transformer", "keras_transformer_cli", "training", "serving", "benchmarks")
# What each top-level package may import of the others.
ALLOWED = {
    "keras_transformer": set(),
    "keras_transformer_cli": {"keras_transformer"},
    "training": {"keras_transformer", "keras_transformer_cli"},
    "serving": {"keras_transformer", "keras_transformer_cli"},
    # the benchmarks measure the programs: the quality study drives the training run, the speed
    # tables the CTranslate2 converter
    "benchmarks": {"keras_transformer", "keras_transformer_cli", "training", "serving"},
}
PROGRAMS = [
    f"{package}.{path.stem}"
    for package in ("training", "serving", "benchmarks")
    for path in sorted((ROOT / package).glob("*.py"))
    if "def main(" in path.read_text()
]


def imports_of(path):
    """(line, top-level package) of every import in the file at `path`."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def test_imports_run_one_way():
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for package in LAYERS
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, module in imports_of(path)
        if module in LAYERS and module != package and module not in ALLOWED[package]
    ]
    assert wrong == []
    assert len(PROGRAMS) >= 10  # the scan found the programs


NO_SIDE_EFFECTS = """
import importlib, json, os, subprocess, sys
before = dict(os.environ)
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
children = subprocess.run(
    ["ps", "-o", "pid=", "--ppid", str(os.getpid())], capture_output=True, text=True
).stdout.split()
changed = [k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)]
print(json.dumps({"changed": sorted(changed), "children": len(children) - 1}))  # less ps itself
"""


def test_importing_a_program_sets_nothing_up():
    """No environment variable set and no stderr filter started by an import: `main()` does
    that (`keras_transformer_cli.console.start`)."""
    environment = dict.fromkeys(
        ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "TF_CPU_ALLOCATOR_USE_BFC")
    )  # removed
    completed = run_python("-c", NO_SIDE_EFFECTS, json.dumps(PROGRAMS), env=environment)
    assert json.loads(completed.stdout.splitlines()[-1]) == {"changed": [], "children": 0}


def is_flag_row(node):
    """A row of a flag table: (flag, type, default, help)."""
    return (
        isinstance(node, ast.Tuple)
        and len(node.elts) == 4
        and isinstance(node.elts[0], ast.Constant)
        and str(node.elts[0].value).startswith("--")
        and isinstance(node.elts[1], (ast.Name, ast.Attribute))  # the type
    )


def is_definition(function):
    """Whether a call of `function` defines a flag: add_argument, or
    keras_transformer_cli/flags.py's `Option`."""
    name = getattr(function, "attr", None) or getattr(function, "id", "")
    return name in ("add_argument", "Option")


def option_definitions():
    """{option: [where it is defined]} over every add_argument call and every `Option` (a flag
    of keras_transformer_cli/flags.py, or of training/plan.py's sections) of the programs and of
    keras_transformer_cli/flags.py, and every tuple of a flag table (the benchmarks' flags)."""
    found = {}
    for package in ("keras_transformer_cli", "training", "serving", "benchmarks"):
        for path in sorted((ROOT / package).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and is_definition(node.func):
                    names = node.args
                elif is_flag_row(node):
                    names = node.elts[:1]
                else:
                    continue
                for name in names:
                    if isinstance(name, ast.Constant) and str(name.value).startswith("--"):
                        where = f"{path.relative_to(ROOT)}:{node.lineno}"
                        found.setdefault(name.value, []).append(where)
    return found


def test_each_flag_has_one_definition():
    """One name per concept, defined once with one help text: a flag that two programs take
    comes from keras_transformer_cli/flags.py."""
    definitions = option_definitions()
    expected = {"--run-dir", "--export-dir", "--model", "--output", "--beam-size", "--max-length"}
    assert expected <= set(definitions)
    assert {flag: places for flag, places in definitions.items() if len(places) > 1} == {}


def numeric_options():
    """(program, option, its argparse type) of every option of every program whose type makes
    a number (its default is one, or it parses a digit)."""
    import importlib

    for program in PROGRAMS:
        parser = importlib.import_module(program).build_parser()
        for action in parser._actions:  # argparse's own list: no public one
            kind = action.type
            if kind is None or not action.option_strings or kind is pathlib.Path:
                continue
            try:
                number = isinstance(kind("1"), (int, float))
            except Exception:
                number = True  # refused "1": a number with a range above it, or a non-number
            if number and isinstance(action.default, (int, float, type(None))):
                yield program, action.option_strings[0], kind


def test_every_numeric_flag_is_checked_where_it_is_parsed():
    """No program parses a number with a bare int or float, which takes 0, negatives, nan and
    inf alike: every numeric flag has a type of keras_transformer_cli/flags.py that
    names its range."""
    found = list(numeric_options())
    assert len(found) > 30  # the scan found them
    bare = [f"{program} {option}" for program, option, kind in found if kind in (int, float)]
    assert bare == []


@pytest.mark.parametrize(
    "program, argv, message",
    [
        ("training.train", ["--tokens-per-batch", "0"], "--tokens-per-batch: expected an integer "
         "of at least 1, got 0"),
        ("training.train", ["--vocab-size", "0"], "--vocab-size: expected an integer of at least "
         "261, got 0"),
        ("training.train", ["--max-length", "0"], "--max-length: expected an integer of at least "
         "2, got 0"),
        ("training.train", ["--steps", "-3"], "--steps: expected an integer of at least 1"),
        ("training.train", ["--max-minutes", "nan"], "--max-minutes: expected a number above 0"),
        ("training.train", ["--keep-checkpoints", "0"], "--keep-checkpoints: expected an integer"),
        ("training.train", ["--early-stopping", "0"], "--early-stopping: expected an integer"),
        ("training.train", ["--subword-sampling", "1"], "--subword-sampling: expected a number "
         "in [0, 1), got 1"),
        ("training.train", ["--subword-model", "char"], "--subword-model: invalid choice: 'char'"),
        ("training.binarize", ["--output", "x", "--max-length", "1"], "--max-length: expected"),
        ("training.evaluate", ["--model", "m", "--top-p", "1.5"], "--top-p: expected a number in "
         "(0, 1], got 1.5"),
        ("training.average_checkpoints", ["--run-dir", "r", "--last", "0"], "--last: expected"),
        ("training.average_checkpoints", ["--run-dir", "r", "--last", "2", "--checkpoints", "a"],
         "--checkpoints: not allowed with argument --last"),
        ("serving.client", ["--port", "0"], "--port: expected an integer of at least 1, got 0"),
        ("serving.client", ["--timeout", "-1"], "--timeout: expected a number above 0, got -1"),
        ("serving.translate", ["--model", "m", "--beam-size", "0"], "--beam-size: expected"),
        ("serving.export", ["--model", "m", "--diverse-groups", "0"], "--diverse-groups: "
         "expected an integer of at least 1, got 0"),
        ("serving.export", ["--model", "m", "--diversity", "-1"], "--diversity: expected"),
        ("serving.export", ["--model", "m", "--diversity", "inf"], "--diversity: expected a "
         "finite number of at least 0.0, got inf"),
        ("benchmarks.gpu", ["--data", "d", "--demo-minutes", "inf"], "--demo-minutes: expected"),
    ],
)  # fmt: skip
def test_a_number_out_of_its_range_is_a_usage_error_naming_the_flag(program, argv, message, capsys):
    import importlib

    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(program).build_parser().parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_program_has_help_verbose_and_one_way_to_fail(program):
    module = importlib.import_module(program)
    parser = module.build_parser()
    assert parser.prog == f"python -m {program}"
    assert "--verbose" in parser.format_help()
    assert module.main.__wrapped__  # keras_transformer_cli.console.program: one line and status 1


def parse_command(command):
    """Parses `python -m PROGRAM ARGS  # comment` with PROGRAM's own parser."""
    words = shlex.split(command, comments=True)
    assert words[:2] == ["python", "-m"], command
    return importlib.import_module(words[2]).build_parser().parse_args(words[3:])


def test_the_summary_s_commands_parse(tmp_path):
    run, export = tmp_path / "my run", tmp_path / "export"
    commands = [
        line.strip() for line in summary.summary(run, export) if "python -m" in line.strip()[:9]
    ]
    assert len(commands) == 2
    for command in commands:
        parse_command(command)


def make_demo_command(program, variables):
    """The words after `python -m PROGRAM` in the command `make -n demo NAME=VALUE...` prints
    (`variables`: {NAME: VALUE}): what the recipe runs, the Makefile's defaults filled in."""
    assigned = [f"{name}={value}" for name, value in variables.items()]
    printed = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "demo", *assigned],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.replace("\\\n", " ")
    (line,) = [line for line in printed.splitlines() if f" -m {program} " in line]
    return shlex.split(line.split(f" -m {program} ", 1)[1])


@pytest.mark.parametrize(
    "run, export, fresh_run, fresh_export",
    [
        (
            "runs/demo",
            "exports/transformer",
            "runs/demo-30-minutes",
            "exports/transformer-30-minutes",
        ),
        ("my run/", ".", "my run-30-minutes", None),  # None: beside the working directory
    ],
)
def test_the_summary_s_longer_run_is_a_fresh_one(
    run, export, fresh_run, fresh_export, tmp_path, monkeypatch
):
    """The summary's `make demo DEMO_MINUTES=30 ...` trains a new run in new directories beside
    the run's (its own would train it on, past the top of the curve: benchmarks/QUALITY.md) and
    keeps 160 checkpoints, as the Makefile's recipe receives it; that run's summary suggests no
    third."""
    from serving import translate
    from training import train

    monkeypatch.chdir(tmp_path)
    fresh_export = fresh_export or f"../{tmp_path.name}-30-minutes"
    (line,) = [
        line for line in summary.summary(run, export, demo=True) if line.strip().startswith("make")
    ]
    words = shlex.split(line, comments=True)
    assert words[:2] == ["make", "demo"], line
    variables = dict(word.split("=", 1) for word in words[2:])
    fresh_run, fresh_export = pathlib.Path(fresh_run), pathlib.Path(fresh_export).resolve()
    trained = train.build_parser().parse_args(make_demo_command("training.train", variables))
    assert (trained.run_dir, trained.export_dir.resolve()) == (fresh_run, fresh_export)
    assert (trained.max_minutes, trained.keep_checkpoints) == (30, 160)
    translated = translate.build_parser().parse_args(
        make_demo_command("serving.translate", variables)
    )
    summarized = summary.build_parser().parse_args(make_demo_command("training.summary", variables))
    assert pathlib.Path(translated.model).resolve() == fresh_export
    assert (summarized.run_dir, summarized.export_dir.resolve()) == (fresh_run, fresh_export)
    assert summarized.demo  # the recipe's summary is a demo's
    longer = summary.summary(fresh_run, fresh_export, demo=True)
    assert not any(line.strip().startswith("make") for line in longer)


def test_the_summary_suggests_no_longer_run_where_it_exists(tmp_path):
    """Once the longer run's directory exists, the same command would train it on: not suggested."""
    run, export = tmp_path / "demo", tmp_path / "export"
    assert any(line.strip().startswith("make") for line in summary.summary(run, export, demo=True))
    (tmp_path / "demo-30-minutes").mkdir()
    assert not any(
        line.strip().startswith("make") for line in summary.summary(run, export, demo=True)
    )


def test_the_commands_printed_after_training_parse(tmp_path):
    """The commands a run under another backend than TensorFlow prints, to score and export
    its model (tests/test_train_program.py runs them too)."""
    from training import train
    from training.finish import next_commands
    from training.plan import TrainingPlan

    flags = ["--run-dir", str(tmp_path / "a run"), "--dataset", "folder:/data/x y"]
    flags += ["--source-language", "de", "--target-language", "en", "--data-dir", "/cache"]
    plan = TrainingPlan.from_flags(train.build_parser().parse_args(flags))
    commands = next_commands(plan, tmp_path / "a run" / "model.keras")
    evaluate, export = (parse_command(command) for command in commands)
    assert evaluate.model == tmp_path / "a run" / "model.keras"
    assert (evaluate.dataset, evaluate.source_language, evaluate.target_language) == (
        "folder:/data/x y",
        "de",
        "en",
    )
    assert evaluate.data_dir == pathlib.Path("/cache")
    assert export.export_dir == tmp_path / "a run" / "export"


def test_the_programs_functions_are_short():
    """Functions of the programs and what they share stay under 60 lines (argument parsers,
    which list flags, excepted)."""
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})"
        for package in ("keras_transformer_cli", "training", "serving", "benchmarks")
        for path in sorted((ROOT / package).glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
        and node.name != "build_parser"
        and node.end_lineno - node.lineno + 1 >= 60
    ]
    assert long == []


def test_the_library_s_functions_are_short():
    """No function of the library runs over 60 lines apart from its docstring."""
    long = []
    for path in sorted((ROOT / "keras_transformer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            lines = node.end_lineno - node.lineno + 1
            if ast.get_docstring(node) is not None:
                lines -= node.body[0].end_lineno - node.body[0].lineno + 1
            if lines > 60:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert long == []


def test_the_training_program_s_objects_set_their_attributes_in_init():
    """Every attribute a class of the training program (and of its checkpoints) gives its
    objects is first set in `__init__` (or is a class attribute): a reader finds them all
    there."""
    late = []
    paths = [
        *sorted((ROOT / "training").glob("*.py")),
        ROOT / "keras_transformer_cli/checkpoints.py",
    ]
    for path in paths:
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef):
                continue
            known = {t.id for s in cls.body for t in assigned(s) if isinstance(t, ast.Name)}
            methods = [s for s in cls.body if isinstance(s, ast.FunctionDef)]
            for method in sorted(methods, key=lambda m: m.name != "__init__"):
                for node in ast.walk(method):
                    if (
                        isinstance(node, ast.Attribute)
                        and isinstance(node.ctx, ast.Store)
                        and isinstance(node.value, ast.Name)
                        and node.value.id == "self"
                        and node.attr not in known
                    ):
                        if method.name != "__init__":
                            late.append(f"{path.name}:{node.lineno} {cls.name}.{node.attr}")
                        known.add(node.attr)
    assert late == []


def assigned(statement):
    """The targets a class body's statement assigns."""
    if isinstance(statement, ast.Assign):
        return statement.targets
    return [statement.target] if isinstance(statement, ast.AnnAssign) else []

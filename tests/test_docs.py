"""The README and the pages of docs/: their Python examples run as written, and the pages hold
together, describe the present and name only what exists.

- The README is the front door: at most 150 lines, install, the demo, the tests and the
  documentation index on its first screen, a link to every page of docs/ (each linking back);
  docs/quickstart.md at most 150 lines; relative links resolve; every other page starts with
  what it lets you do; lines outside tables stay within 100 columns.
- Which blocks run: a ```python block whose fence starts at the beginning of a line runs, all of a
  page's blocks in order in one fresh namespace, in a temporary directory (holding a small
  trained model's export where the example loads one); then the page's check below asserts what
  the example claims. A block indented in a list (such as the serving client's in
  docs/serving.md) needs a server or the network, and does not run; nor do ```sh and ```text
  blocks. A page with a runnable block must have a check here.
- The pages describe the present: no date and no commit hash outside CHANGELOG.md and the
  reports under benchmarks/.
- What a page names exists: every `python -m MODULE` (a module of the checkout, or an installed
  tool such as pytest), every `kt-COMMAND` (setup.cfg's console scripts), every `make TARGET` and
  the Makefile variables given to it, every `--flag` given to one of the project's programs
  (its `build_parser()` must accept it; in a Makefile variable, the program the recipe passes
  the variable to), every repository path, every test named as `test_file.py::test_name`, and
  every `kt.NAME` of the library. The Makefile's comments and the server's configuration files
  are read too. Each check is fed a page with a wrong name of each kind, and must fail.
"""

import configparser
import functools
import importlib
import importlib.util
import json
import pathlib
import re
import shlex

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICKSTART = ROOT / "docs" / "quickstart.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
RELIABILITY = ROOT / "RELIABILITY.md"
# The pages whose relative links must resolve (benchmarks/*.md are written by programs).
LINKED_PAGES = [README, *DOCS, RELIABILITY, ROOT / "CHANGELOG.md"]
# The pages whose commands, flags, paths and names must exist (CHANGELOG.md and the reports
# under benchmarks/ are history: they name what existed then).
NAMING_PAGES = [README, *DOCS, RELIABILITY]
# Files whose comments name commands, files and library names: read as pages of prose.
COMMENTED_FILES = [ROOT / "Makefile", *sorted((ROOT / "serving").glob("*.config"))]
# The pages that start with what they let you do, right under their title.
PURPOSE_PAGES = [*DOCS, RELIABILITY]
# The files that describe the present: no date, no commit hash (CHANGELOG.md and the reports
# under benchmarks/ carry them). The notebook's cells are read, not its JSON (cell ids are hex).
PRESENT_FILES = [
    README,
    *DOCS,
    RELIABILITY,
    ROOT / "Makefile",
    ROOT / "setup.cfg",
    ROOT / "colab" / "transformer.ipynb",
    *sorted((ROOT / "serving").glob("*.config")),
]
MAX_README_LINES = 150
MAX_QUICKSTART_LINES = 150
FIRST_SCREEN = 50  # lines
MAX_COLUMNS = 100  # as ruff's line length

RUNNABLE = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)
FENCE = re.compile(r"^\s*```")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# 7 to 40 hex digits with at least one digit and one letter: a commit, as git abbreviates it.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
PURPOSE = re.compile(r"This page \w+ ")

# The checkout's packages; `python -m` of any other name must be an installed tool (pytest).
PACKAGES = ("keras_transformer", "keras_transformer_cli", "training", "serving", "benchmarks")
# Installed, the programs live under keras_transformer_cli (setup.cfg's package_dir).
INSTALLED_AS = {
    "keras_transformer_cli.training.": "training.",
    "keras_transformer_cli.serving.": "serving.",
}
# The folders and files of the checkout whose paths a page may name (runs/, exports/, build/ and
# data/ are what the programs write).
SOURCE_FOLDERS = (*PACKAGES, "tests", "docs", "colab", ".ci")
SOURCE_FILES = ("README.md", "Makefile", "setup.cfg", "CHANGELOG.md", "RELIABILITY.md")
EXAMPLE_SENTENCES = ["Guten Morgen.", "Wo ist der Bahnhof?"]


def check_readme(namespace, directory):
    """The README's example opens an export with `kt.load_translator` and translates: the
    translator it made gives a translation and a finite score per sentence."""
    translator = namespace.get("translator")
    assert translator is not None, "README.md's example makes no `translator`"
    translations = translator.translate(EXAMPLE_SENTENCES)
    assert len(translations) == len(EXAMPLE_SENTENCES)
    for translation in translations:
        assert isinstance(translation.text, str)
        assert np.isfinite(translation.score)
    if "translation" in namespace:  # a loop's last
        assert isinstance(namespace["translation"].text, str)


def check_training(namespace, directory):
    # incremental decoding equals the full pass; the model is saved
    np.testing.assert_allclose(
        namespace["next_token_logits"], namespace["logits"][:, :1], atol=1e-4
    )
    assert (directory / "transformer.keras").exists()
    assert namespace["updates"] == 1  # four micro-batches, one update


CHECKS = {"README.md": check_readme, "docs/training.md": check_training}


def put_saved_models(number_translator, directory):
    """What an example may load, in `directory`: a SavedModel export of a small trained model in
    exports/transformer/1/ (as `make demo` writes it), and the model itself with its tokenizer
    in runs/demo/."""
    import keras_transformer as kt
    from keras_transformer_cli.versions import export_for_serving

    model, tokenizer, _ = number_translator
    export_for_serving(kt.Translator(model, tokenizer), directory / "exports" / "transformer")
    (directory / "runs" / "demo").mkdir(parents=True)
    model.save(directory / "runs" / "demo" / "model.keras")
    tokenizer.save(directory / "runs" / "demo" / "tokenizer.model")


def name(path):
    return path.relative_to(ROOT).as_posix()


def test_every_page_with_a_runnable_example_has_a_check():
    runnable = {name(page) for page in [README, *DOCS] if RUNNABLE.search(page.read_text())}
    assert runnable == set(CHECKS)


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(CHECKS))
def test_examples_run(page, tmp_path, monkeypatch, request):
    path = ROOT / page
    blocks = RUNNABLE.findall(path.read_text())
    assert blocks, f"{page} has no runnable python example"
    if "load_translator" in "".join(blocks):
        put_saved_models(request.getfixturevalue("number_translator"), tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, str(path), "exec"), namespace)
    CHECKS[page](namespace, tmp_path)


def lines_of(path):
    """A page's lines: a Markdown page's all, a commented file's comments (without `#`)."""
    if path.suffix == ".md":
        return path.read_text().splitlines()
    return [re.sub(r"^\s*# ?", "", line) for line in path.read_text().splitlines()
            if line.lstrip().startswith("#")]  # fmt: skip


def prose(path):
    """The page's lines outside fenced code blocks (indented fences included)."""
    inside = False
    for line in lines_of(path):
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            yield line


def code_blocks(path):
    """The lines of each fenced code block of the page (indented ones included)."""
    block = None
    for line in lines_of(path):
        if FENCE.match(line):
            if block is None:
                block = []
            else:
                yield block
                block = None
        elif block is not None:
            block.append(line)


def links(path):
    """The link targets of the page's prose, inline code spans left out."""
    for line in prose(path):
        yield from LINK.findall(re.sub(r"`[^`]*`", "", line))


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    seen, found = {}, set()
    for line in prose(path):
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_the_readme_is_the_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    linked = {(README.parent / target.split("#")[0]).resolve() for target in links(README)}
    assert DOCS, "docs/ has no page"
    assert [name(page) for page in DOCS if page.resolve() not in linked] == []
    for page in DOCS:  # and every page leads back
        back = {(page.parent / target.split("#")[0]).resolve() for target in links(page)}
        assert README.resolve() in back, f"{name(page)} does not link to the README"


def test_the_first_screen_has_install_demo_tests_and_the_documentation():
    screen = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    for what in ("pip install", "make demo", "make test", "## Documentation"):
        assert what in screen, f"README.md's first {FIRST_SCREEN} lines lack {what!r}"


def test_the_quickstart_is_short():
    lines = QUICKSTART.read_text().splitlines()
    assert len(lines) <= MAX_QUICKSTART_LINES, f"docs/quickstart.md has {len(lines)} lines"


def purpose(text):
    """The paragraph under a page's title, if it says what the page lets you do; else None."""
    paragraphs = re.split(r"\n\s*\n", text.strip())
    if len(paragraphs) < 2 or not paragraphs[0].startswith("# "):
        return None
    first = " ".join(paragraphs[1].split())
    return first if PURPOSE.match(first) else None


@pytest.mark.parametrize("page", PURPOSE_PAGES, ids=name)
def test_every_page_starts_with_what_it_lets_you_do(page):
    assert purpose(page.read_text()), (
        f"{name(page)}: the paragraph under its title should say what the page lets you do "
        "('This page lets you ...')"
    )


def long_lines(text):
    """The numbers of a page's lines wider than MAX_COLUMNS, table rows left out (Markdown
    cannot wrap them)."""
    return [
        number
        for number, line in enumerate(text.splitlines(), 1)
        if len(line) > MAX_COLUMNS and not line.lstrip().startswith("|")
    ]


@pytest.mark.parametrize("page", [README, *DOCS, RELIABILITY], ids=name)
def test_lines_stay_within_100_columns(page):
    assert long_lines(page.read_text()) == [], f"{name(page)}: lines wider than {MAX_COLUMNS}"


def test_the_page_shape_checks_can_fail():
    assert purpose("# Title\n\nThis page lets you train.\n") == "This page lets you train."
    assert purpose("# Title\n\nTraining, as it was on the first day.\n") is None
    assert purpose("# Title\n\n## A heading first\n\nThis page lets you train.\n") is None
    assert long_lines("short\n" + "x" * 101 + "\n| " + "y" * 200 + " |\n") == [2]


def broken_links(page):
    """The relative links of the page to a file that is not there, or to a heading that is not
    in the page it names."""
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target} (no such heading)")
    return broken


def test_relative_links_resolve():
    assert [f"{name(page)}: {link}" for page in LINKED_PAGES for link in broken_links(page)] == []


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n## Its part\n\n[part](#its-part), [gone](#its-parts), [none](none.md),\n"
        "[self](page.md#a-page), [web](https://example.org/x.md), `[code](nowhere.md)`.\n"
    )
    assert broken_links(page) == ["#its-parts (no such heading)", "none.md (no such file)"]


def present_text(path):
    """What a reader of the file reads: a notebook's cells, another file whole."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n".join("".join(cell["source"]) for cell in cells)
    return path.read_text()


def dated(text):
    """The dates and commit hashes in a text, each with its line number."""
    for number, line in enumerate(text.splitlines(), 1):
        for found in DATE.findall(line) + COMMIT.findall(line):
            yield number, found


def test_no_date_or_commit_outside_the_changelog_and_the_reports():
    found = [
        f"{name(path)}:{number}: {what}"
        for path in PRESENT_FILES
        for number, what in dated(present_text(path))
    ]
    assert found == [], "history belongs in CHANGELOG.md (or a report under benchmarks/)"


def test_the_date_and_commit_check_can_fail():
    text = "as measured on 2026-11-26 (commit 1a41eae)\nadded, decade, 25000, 0.1, deadbeef"
    assert list(dated(text)) == [(1, "2026-11-26"), (1, "1a41eae")]


# What a page names: modules, commands, Makefile targets and variables, flags, paths, tests and
# the library's names.


@functools.cache
def console_scripts():
    """setup.cfg's kt-* commands, each as the checkout's module (training.train for kt-train)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = {}
    for line in config["options.entry_points"]["console_scripts"].strip().splitlines():
        command, _, target = (part.strip() for part in line.partition("="))
        scripts[command] = checkout_module(target.split(":")[0])
    return scripts


def checkout_module(module):
    for installed, checkout in INSTALLED_AS.items():
        if module.startswith(installed):
            return checkout + module[len(installed) :]
    return module


def module_exists(module):
    """A module of the checkout (a .py file or a package), or an installed tool's."""
    module = checkout_module(module)
    top = module.split(".")[0]
    if top in PACKAGES or top == "tests":
        path = ROOT / module.replace(".", "/")
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
    return importlib.util.find_spec(top) is not None


@functools.cache
def makefile():
    """The Makefile's targets, the variables it reads, and the module whose program each
    variable is passed to in a recipe (DEMO_ARGS: training.train)."""
    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w.-]+)\s*:(?!=)", text, flags=re.M))
    variables = set(re.findall(r"^([A-Z_]+)\s*[?:]?=", text, flags=re.M))
    variables |= set(re.findall(r"\$\(([A-Z_]+)\)", text))
    passed = {}
    for line in text.replace("\\\n", " ").splitlines():
        program = re.search(r"python -m ([\w.]+)", line)
        if line.startswith("\t") and program:
            for variable in re.findall(r"\$\(([A-Z_]+)\)", line[program.end() :]):
                passed.setdefault(variable, program.group(1))
    return targets, variables, passed


@functools.cache
def options(module):
    """The option strings the module's parser accepts; None where it has no build_parser."""
    program = importlib.import_module(module)
    build = getattr(program, "build_parser", None)
    return None if build is None else frozenset(build()._option_string_actions)


def commands(path):
    """Each shell command a page gives: code block lines (continuations joined, comments and
    prompts dropped, split at ; && || |), inline code spans of its prose, and in a commented
    file its comment lines that start with a program (python, kt-*)."""
    for block in code_blocks(path):
        joined = "\n".join(line.rstrip() for line in block).replace("\\\n", " ")
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#.*", "", line).strip()
            yield from (part.strip() for part in re.split(r";|&&|\|\||\|", line) if part.strip())
    text = "\n".join(prose(path))
    for span in re.findall(r"`([^`]+)`", text):
        yield " ".join(span.split())
    if path.suffix != ".md":
        for line in prose(path):
            if re.match(r"\s*(\S*python3?|kt-[\w-]+) ", line):  # not `make`: a verb too
                yield line.strip()


def words(command):
    try:
        return shlex.split(command)
    except ValueError:  # an unbalanced quote in an example cut short
        return command.split()


def invocations(command):
    """(kind, program, the words after it) of each `python -m X`, `kt-X` and `make` in a
    command; a program's name loses the punctuation that ends a sentence or a message
    (`python -m training.train: error: ...`)."""
    found = words(command)
    for index, word in enumerate(found):
        rest = found[index + 1 :]
        if re.fullmatch(r"(\S*/)?python3?", word) and rest[:1] == ["-m"] and len(rest) > 1:
            yield "python -m", rest[1].rstrip(".,:;)"), rest[2:]
        elif re.fullmatch(r"kt-[\w-]+[.,:;)]?", word):
            yield "kt", word.rstrip(".,:;)"), rest
        elif word == "make" and (index == 0 or "=" in found[index - 1]):
            yield "make", None, rest


def flags_of(words_given):
    """The `--flag` words among a command's words (`--flag=value` as `--flag`)."""
    for word in words_given:
        flag = word.split("=")[0]
        if re.fullmatch(r"--[a-z][\w-]*", flag):
            yield flag


def unknown_flags(module, words_given):
    """The flags given to the project's program `module` that its parser does not accept."""
    module = checkout_module(module)
    if module.split(".")[0] not in PACKAGES:
        return []  # pytest, pip, venv: not ours to check
    accepted = options(module)
    if accepted is None:  # no build_parser (benchmarks.probes takes positional arguments)
        return []
    return [flag for flag in flags_of(words_given) if flag not in accepted]


def named_to_make(rest):
    """What the words after `make` name that the Makefile lacks: targets, variables, and the
    flags a variable passes to its recipe's program."""
    targets, variables, passed = makefile()
    missing = []
    for word in rest:
        variable, equals, value = word.partition("=")
        if equals and variable not in variables:
            missing.append(f"make ... {word}: the Makefile reads no {variable}")
        elif equals and variable in passed:
            program = passed[variable]
            for flag in unknown_flags(program, words(value)):
                missing.append(f"make ... {variable}: {program} {flag}: no such flag")
        elif not equals and not word.startswith("-") and word not in targets:
            missing.append(f"make {word}: no such target")
    return missing


def named_in_command(command):
    """What a command names that does not exist, one line each."""
    missing = []
    for kind, program, rest in invocations(command):
        module = program
        if kind == "python -m":
            if re.fullmatch(r"[A-Z_]+", program):
                continue  # a placeholder: `python -m MODULE`
            if not module_exists(program):
                missing.append(f"python -m {program}: no such module")
                continue
        elif kind == "kt":
            module = console_scripts().get(program)
            if module is None:
                missing.append(f"{program}: not a command of setup.cfg")
                continue
        else:
            missing += named_to_make(rest)
            continue
        for flag in unknown_flags(module, rest):
            missing.append(f"{program} {flag}: no such flag")
    return missing


PATH = re.compile(r"[\w.-]+(/[\w.-]+)+")


def missing_path(word):
    """The path the word names where it is a file of the checkout that is not there; else
    None."""
    path = re.sub(r"^[(\[\"']+|[)\]\"',.;:/]+$", "", word.split("::")[0].split("#")[0])
    if not PATH.fullmatch(path):
        return None  # not a path, or one with placeholders (RUN_DIR/..., <version>)
    top = path.split("/")[0]
    if top in SOURCE_FOLDERS:
        return None if (ROOT / path).exists() else path
    if path.endswith(".py") and (ROOT / "keras_transformer" / top).is_dir():
        # layers/encoder.py, as the README's table names the library's modules
        return None if (ROOT / "keras_transformer" / path).exists() else path
    return None  # runs/, exports/, build/, data/: what the programs write


@functools.cache
def functions_in_test_file(file):
    """The test functions of tests/FILE, or None where there is no such file."""
    path = ROOT / "tests" / file
    if not path.is_file():
        return None
    return frozenset(re.findall(r"^def (test_\w+)", path.read_text(), flags=re.M))


def named_tests(spans):
    """What the spans naming tests (`test_file.py::test_name`, then `::test_other` of the same
    file, `test_name_...` for the tests it begins) name that does not exist."""
    missing, file = [], None
    for span in spans:
        match = re.fullmatch(r"(?:tests/)?(test_\w+\.py)?(?:::(test_\w+)(\.\.\.)?)?", span)
        if not match or not any(match.groups()[:2]) or (match[1] is None and file is None):
            continue
        file = match[1] or file
        found = functions_in_test_file(file)
        if found is None:
            missing.append(f"`{span}`: no such file tests/{file}")
        elif match[2] and not any(
            test == match[2] or (match[3] and test.startswith(match[2])) for test in found
        ):
            missing.append(f"`{span}`: no such test in tests/{file}")
    return missing


@functools.cache
def every_flag():
    """The flags of every program of the checkout (each module with a build_parser)."""
    flags = set()
    for folder in ("training", "serving", "benchmarks"):
        for path in sorted((ROOT / folder).glob("*.py")):
            if "\ndef build_parser(" in path.read_text():
                flags |= options(f"{folder}.{path.stem}")
    return frozenset(flags)


def lone_flags(spans):
    """The flags that spans name on their own (`--beam-size`, `--alpha 0.6`) and that no
    program of the project takes; a flag with an underscore is another program's
    (`--tensorflow_inter_op_parallelism`, TensorFlow Serving's)."""
    missing = []
    for span in spans:
        match = re.match(r"(--[a-z][a-z0-9-]*)(?:[ =]|$)", span)
        if match and match[1] not in every_flag():
            missing.append(f"`{match[1]}`: no program takes this flag")
    return missing


LIBRARY_NAME = re.compile(r"\bkt\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


def library_names(text):
    """The names of the library a text uses as `kt.NAME` that it does not have."""
    import keras_transformer

    missing = []
    for dotted in sorted(set(LIBRARY_NAME.findall(text))):
        value = keras_transformer
        for part in dotted.split("."):
            try:
                value = getattr(value, part)
            except (AttributeError, ImportError):
                missing.append(f"kt.{dotted}: the library has no {part!r} there")
                break
    return missing


def named(path):
    """What the page names that does not exist, one line each."""
    missing = []
    seen = set()
    for command in commands(path):
        for line in named_in_command(command):
            if line not in seen:
                seen.add(line)
                missing.append(line)
    text = "\n".join(prose(path))
    spans = re.findall(r"`([^`\n]+)`", text)
    code = "\n".join(line for block in code_blocks(path) for line in block)
    candidates = [span for span in spans if " " not in span]
    if path.suffix != ".md":  # a comment names files in its words, without backticks
        candidates += text.split()
    candidates += [word for command in commands(path) for word in words(command)]
    for path in dict.fromkeys(filter(None, map(missing_path, candidates))):
        missing.append(f"`{path}`: no such file")
    missing += named_tests(spans)
    missing += lone_flags(spans)
    missing += library_names(text + "\n" + code)
    return missing


@pytest.mark.parametrize("page", NAMING_PAGES + COMMENTED_FILES, ids=name)
def test_pages_name_only_what_exists(page):
    assert named(page) == []


def test_the_naming_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Run `python -m training.trian`, `make tests`, `training/plans.py` and\n"
        "`kt-train --no-such-flag`; `kt.load_translater(path)` and `kt.layers.Encodr`.\n"
        "Held by `test_export.py::test_no_such_test`, `::test_score_program`, `test_score_...`,\n"
        "`::test_no_such_either`, `test_no_such_file.py::test_x` and `test_layout.py`.\n"
        "`python -m serving.translate: error: ...` is a message;\n"
        "`--beam-size` 4, `--bleam-size`.\n\n"
        "```sh\n"
        "python -m training.train --preset small \\\n"
        "    --steps-per-epch 10   # a typo\n"
        "make demo DEMO_MINUTS=30\n"
        'make demo DEMO_ARGS="--keep-checkpoints 10 --keep-chekpoints 5"\n'
        "kt-trian --help\n"
        "python -m pytest -k cache\n"
        "docker compose -f serving/docker-compose.yaml up serving\n"
        "```\n\n"
        "```text\n"
        "translator = kt.load_translator('exports/transformer')\n"
        "kt.no_such_function(model)\n"
        "```\n"
    )  # fmt: skip
    assert named(page) == [
        "training.train --steps-per-epch: no such flag",
        "make ... DEMO_MINUTS=30: the Makefile reads no DEMO_MINUTS",
        "make ... DEMO_ARGS: training.train --keep-chekpoints: no such flag",
        "kt-trian: not a command of setup.cfg",
        "python -m training.trian: no such module",
        "make tests: no such target",
        "kt-train --no-such-flag: no such flag",
        "`training/plans.py`: no such file",
        "`serving/docker-compose.yaml`: no such file",
        "`test_export.py::test_no_such_test`: no such test in tests/test_export.py",
        "`::test_no_such_either`: no such test in tests/test_export.py",
        "`test_no_such_file.py::test_x`: no such file tests/test_no_such_file.py",
        "`--bleam-size`: no program takes this flag",
        "kt.layers.Encodr: the library has no 'Encodr' there",
        "kt.load_translater: the library has no 'load_translater' there",
        "kt.no_such_function: the library has no 'no_such_function' there",
    ]


def test_a_commented_file_is_read_for_names(tmp_path):
    config = tmp_path / "models.config"
    config.write_text(
        "# Exports land in exports/transformer/<version>/, written by\n"
        "#   python -m training.train ... --export-dri exports/transformer\n"
        "# or kt.export_saved_model (README, see docs/serving.md and docs/servng.md).\n"
        'model_config_list { config { name: "transformer" } }  # python -m no.such\n'
    )
    assert named(config) == [
        "training.train --export-dri: no such flag",
        "`docs/servng.md`: no such file",
        "kt.export_saved_model: the library has no 'export_saved_model' there",
    ]

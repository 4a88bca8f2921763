"""What `pip install` makes: the wheel adds the project's own names to site-packages and nothing
else (no `training`, `serving` or `common`), and its commands run from a venv outside the
checkout. (The TensorFlow-free install trains in test_binarized.py.)"""

import sysconfig
import zipfile

import pytest
from conftest import new_venv, pip, run_python

OWN_NAMES = {"keras_transformer", "keras_transformer_cli"}


@pytest.mark.slow
def test_the_wheel_holds_the_project_names_only(wheel):
    archive = zipfile.ZipFile(wheel)
    top = {name.split("/")[0] for name in archive.namelist()}
    assert {name for name in top if not name.endswith(".dist-info")} == OWN_NAMES
    entry_points = next(name for name in archive.namelist() if name.endswith("entry_points.txt"))
    commands = archive.read(entry_points).decode()
    assert "kt-translate = keras_transformer_cli.serving.translate:main" in commands


@pytest.mark.slow
def test_the_installed_commands_run_outside_the_checkout(wheel, number_translator, tmp_path):
    """Installed into a fresh venv (its dependencies from this one), the wheel adds only its own
    names, and its `kt-translate` translates with a saved model from another folder, running
    the installed code."""
    bin_dir = new_venv(tmp_path / "venv")
    pip("--no-deps", wheel, python=bin_dir / "python")
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    added = {path.name for path in site.iterdir()} - {"__pycache__"}
    assert {name for name in added if not name.endswith(".dist-info")} == OWN_NAMES
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    model, tokenizer, pairs = number_translator
    model.save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "tokenizer.model")
    outside = {"cwd": tmp_path, "env": {"PYTHONPATH": None}}
    where = "import keras_transformer_cli.serving.translate as t; print(t.__file__)"
    printed = run_python("-c", where, program=bin_dir / "python", **outside).stdout
    assert printed.startswith(str(site))
    translated = run_python(
        "--model", tmp_path / "model.keras", "--beam-size", "1", *[s for s, _ in pairs[:3]],
        program=bin_dir / "kt-translate", **outside,
    )  # fmt: skip
    assert translated.stdout.splitlines() == [t for _, t in pairs[:3]]

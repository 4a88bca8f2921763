"""The Colab notebook runs top to bottom, headless, with the tiny offline settings."""

import json
import pathlib
import re

import nbformat
import pytest
from nbclient import NotebookClient

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "colab" / "transformer.ipynb"


def tagged(notebook, tag):
    return [cell for cell in notebook.cells if tag in cell.metadata.get("tags", [])]


def test_committed_notebook_is_clean():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    text = NOTEBOOK.read_text()
    assert not re.search(r"(api[_-]?key|token|secret|password)\s*[=:]\s*['\"][^'\"]+", text, re.I)
    assert len(tagged(notebook, "colab-install")) == 1 and len(tagged(notebook, "parameters")) == 1
    # Each step points to the paper's section it implements.
    sections = set(
        re.findall(
            r"§\d(?:\.\d)*", "".join(c.source for c in notebook.cells if c.cell_type == "markdown")
        )
    )
    assert {"§3.1", "§3.2.3", "§3.4", "§3.5", "§5.1", "§5.3", "§6.1"} <= sections


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    notebook.cells = [
        c for c in notebook.cells if "colab-install" not in c.metadata.get("tags", [])
    ]
    monkeypatch.setenv("SMOKE", "1")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()

    def text_of(cell):
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")

    (translate,) = tagged(notebook, "translate")
    printed = text_of(translate)
    assert printed.count("greedy:") == 4 and printed.count("beam 4:") == 4
    for cell in tagged(notebook, "plot"):
        assert any("image/png" in o.get("data", {}) for o in cell.outputs), cell.source[:60]
    (export,) = tagged(notebook, "export")
    assert "http://localhost:8501/v1/models/transformer:predict" in text_of(export)
    request = json.loads(re.search(r"curl -d '(.*)' ", text_of(export)).group(1))
    assert request["signature_name"] == "serving_default" and len(request["instances"]) == 2
    work = tmp_path / "transformer-colab"
    assert (work / "exports" / "transformer" / "1" / "saved_model.pb").is_file()
    assert list((work / "logs" / "train").glob("events.out.tfevents.*"))

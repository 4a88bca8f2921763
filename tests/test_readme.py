"""The README's example runs as written (its top-level python blocks; those indented in a
list, such as the serving client's, need a server)."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    assert blocks, "README.md has no python example"
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    import numpy as np

    np.testing.assert_allclose(
        namespace["next_token_logits"], namespace["logits"][:, :1], atol=1e-4
    )
    assert (tmp_path / "transformer.keras").exists()

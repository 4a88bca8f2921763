"""The README and the pages of docs/: their Python examples run as written, and the pages hold
together (the README is the front door: at most 300 lines, linking every page; links resolve).

Which blocks run: a ```python block whose fence starts at the beginning of a line runs, all of a
page's blocks in order in one fresh namespace, in a temporary directory; then the page's check
below asserts what the example claims. A block indented in a list (such as the serving client's
in docs/serving.md) needs a server or the network, and does not run; nor do ```sh and ```text
blocks. A page with a runnable block must have a check here.
"""

import pathlib
import re

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# The pages whose relative links must resolve (benchmarks/*.md are written by programs).
LINKED_PAGES = [README, *DOCS, ROOT / "RELIABILITY.md", ROOT / "CHANGELOG.md"]
MAX_README_LINES = 300

RUNNABLE = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)
FENCE = re.compile(r"^\s*```")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def check_readme(namespace, directory):
    # incremental decoding equals the full pass; the model is saved
    np.testing.assert_allclose(
        namespace["next_token_logits"], namespace["logits"][:, :1], atol=1e-4
    )
    assert (directory / "transformer.keras").exists()


def check_training(namespace, directory):
    assert namespace["updates"] == 1  # four micro-batches, one update


CHECKS = {"README.md": check_readme, "docs/training.md": check_training}


def name(path):
    return path.relative_to(ROOT).as_posix()


def test_every_page_with_a_runnable_example_has_a_check():
    runnable = {name(page) for page in [README, *DOCS] if RUNNABLE.search(page.read_text())}
    assert runnable == set(CHECKS)


@pytest.mark.parametrize("page", sorted(CHECKS))
def test_examples_run(page, tmp_path, monkeypatch):
    path = ROOT / page
    blocks = RUNNABLE.findall(path.read_text())
    assert blocks, f"{page} has no runnable python example"
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, str(path), "exec"), namespace)
    CHECKS[page](namespace, tmp_path)


def prose(path):
    """The page's lines outside fenced code blocks (indented fences included)."""
    inside = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            yield line


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


def test_relative_links_resolve():
    broken = []
    for page in LINKED_PAGES:
        for target in links(page):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{name(page)}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{name(page)}: {target} (no such heading)")
    assert broken == []

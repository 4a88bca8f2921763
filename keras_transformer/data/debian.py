"""A file out of a Debian package, without root: the installed copy, a cached copy, or the
package fetched now with `apt-get download` and unpacked with `dpkg -x` into a cache directory."""

import os
import pathlib
import subprocess
import tempfile

from keras_transformer.data.corpus import CorpusError


def fetch_file(package, path, cache_dir, root="/"):
    """The path of `path` (relative, as the package installs it) from Debian's `package`:
    `root/path` when the package is installed, else `cache_dir/package/path`, fetched into the
    cache first if it is not there. Raises CorpusError naming what failed."""
    installed = pathlib.Path(root) / path
    if installed.is_file():
        return installed
    cache_dir = pathlib.Path(cache_dir)
    package_dir = cache_dir / package
    if (package_dir / path).is_file():
        return package_dir / path
    cache_dir.mkdir(parents=True, exist_ok=True)
    hint = (
        f"fetching {package} needs Debian's apt-get and dpkg; alternatively install the package "
        f"or pass the path of its {pathlib.PurePath(path).name} file"
    )
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".fetch-") as work:
        _run(["apt-get", "download", package], work, hint)
        debs = sorted(pathlib.Path(work).glob(f"{package}_*.deb"))
        if not debs:
            raise CorpusError(f"apt-get download {package} wrote no .deb file in {work}")
        extracted = pathlib.Path(work) / "extracted"
        _run(["dpkg", "-x", str(debs[-1]), str(extracted)], work, hint)
        if not (extracted / path).is_file():
            raise CorpusError(f"{debs[-1].name} holds no {path}")
        os.replace(extracted, package_dir)  # atomic: a half-extracted package is never cached
    return package_dir / path


def _run(command, cwd, hint):
    try:
        completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise CorpusError(f"cannot run {command[0]}: not found; {hint}") from None
    if completed.returncode != 0:
        output = (completed.stderr or completed.stdout).strip()
        extra = (
            " (run 'apt-get update' first if the package is unknown)"
            if "apt-get" in command[0]
            else ""
        )
        raise CorpusError(
            f"'{' '.join(command)}' failed with exit code {completed.returncode}: "
            f"{output[-500:]}{extra}; {hint}"
        )

"""Writing files so that a reader never sees half of one: the programs' one write-then-rename."""

import os
import pathlib
import tempfile


def write_atomically(path, write):
    """Calls write(a temporary path beside `path`, with the same suffixes) and renames the
    result to `path`; returns `path`. A killed writer leaves `path` as it was."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    suffixes = "".join(path.suffixes)
    handle, partial = tempfile.mkstemp(
        prefix=f".{path.name[: len(path.name) - len(suffixes)]}.", suffix=suffixes, dir=path.parent
    )
    os.close(handle)
    try:
        write(partial)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)  # mkstemp's 0600 would hide the file from other users
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return path


def write_text_atomically(path, text):
    return write_atomically(path, lambda partial: pathlib.Path(partial).write_text(text))

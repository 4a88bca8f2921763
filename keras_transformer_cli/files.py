"""Writing files so that a reader never sees half of one: the programs' one write-then-rename."""

import contextlib
import errno
import os
import pathlib
import re
import resource
import shutil
import socket
import tempfile


def temporary_prefix(name):
    """The prefix of this process's temporary files for `name`: `.NAME.tmp-HOST-PID-`."""
    return f".{name}.tmp-{socket.gethostname()}-{os.getpid()}-"


def remove_stale(directory, name):
    """Removes what killed processes of this host left behind for `name` in `directory`
    (their `temporary_prefix` files and directories), and only that: the temporaries of a
    living process or of another host stay."""
    pattern = re.compile(rf"^\.{re.escape(name)}\.tmp-{re.escape(socket.gethostname())}-(\d+)-")
    directory = pathlib.Path(directory)
    for entry in directory.iterdir() if directory.is_dir() else ():
        found = pattern.match(entry.name)
        if found and not alive(int(found.group(1))):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink(missing_ok=True)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


@contextlib.contextmanager
def naming(path):
    """Re-raises a full disk (or a file-size limit) met while writing `path` as an OSError
    that names `path`: a writer often names no file, or a temporary one that is gone."""
    try:
        yield
    except OSError as error:
        if error.errno not in FULL:
            raise
        raise OSError(error.errno, error.strerror or os.strerror(error.errno), str(path)) from None


def write_atomically(path, write):
    """Calls write(a temporary path beside `path`, with the same suffixes) and renames the
    result to `path`; returns `path`. A killed writer leaves `path` as it was, and its
    temporary file is removed by the next write of `path`."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent, path.name)
    suffixes = "".join(path.suffixes)
    handle, partial = tempfile.mkstemp(
        prefix=temporary_prefix(path.name), suffix=suffixes, dir=path.parent
    )
    os.close(handle)
    try:
        with naming(path):
            write(partial)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)  # mkstemp's 0600 would hide the file from other users
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return path


@contextlib.contextmanager
def new_directory(path, flag="--output"):
    """Yields (a new empty directory to fill, a scratch directory beside it); when the block
    ends without error the first is renamed to `path`, which must not exist: a reader sees the
    directory whole or not at all. Whatever the block leaves, and the parents made for `path`,
    are removed otherwise."""
    path = pathlib.Path(path)
    if path.exists():
        raise FileExistsError(f"{flag} {path} exists; choose another {flag} or remove it")
    made = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent, path.name)  # what a killed writer left
    scratch = pathlib.Path(tempfile.mkdtemp(prefix=temporary_prefix(path.name), dir=path.parent))
    try:
        (scratch / "new").mkdir()
        with naming(path):
            yield scratch / "new", scratch
        try:
            os.rename(scratch / "new", path)
        except OSError as error:  # another writer's `path` appeared meanwhile
            if not path.exists():
                raise
            raise FileExistsError(
                f"{flag} {path} was written by another process meanwhile; choose another "
                f"{flag} or remove it"
            ) from error
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for parent in made if not path.exists() else ():
            with contextlib.suppress(OSError):  # not empty: another writer's
                parent.rmdir()


def write_text_atomically(path, text):
    return write_atomically(path, lambda partial: pathlib.Path(partial).write_text(text))


def ensure_room(path, size):
    """Raises OSError(ENOSPC) naming `path` unless a file of `size` bytes fits there: on its
    disk and under the process's file-size limit (RLIMIT_FSIZE). Checked before a writer that
    cannot fail cleanly (h5py floods the console and may crash on a full disk)."""
    path = pathlib.Path(path)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    free = shutil.disk_usage(path.parent if path.parent.exists() else ".").free
    if size > free or limit != resource.RLIM_INFINITY and size > limit:
        room = min(free, limit) if limit != resource.RLIM_INFINITY else free
        raise OSError(
            errno.ENOSPC,
            f"{size / 2**20:.1f} MiB needed, {room / 2**20:.1f} MiB allowed",
            str(path),
        )

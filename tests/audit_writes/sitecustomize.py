"""Put this folder first on PYTHONPATH, with AUDITED_DIR and AUDIT_LOG set, and every write that
Python makes under AUDITED_DIR (a file opened to write, created, renamed, removed, a folder made
or removed) is appended to AUDIT_LOG as a line `EVENT PATH`: Python imports `sitecustomize` at
start-up, and these are the audit events (PEP 578) of those operations. The next sitecustomize
on the path (tests/without_tensorflow's, when listed) runs after it."""

import importlib.machinery
import importlib.util
import os
import sys

AUDITED = os.path.realpath(os.environ["AUDITED_DIR"])
LOG = os.environ["AUDIT_LOG"]
WRITING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
CHANGES = ("os.rename", "os.remove", "os.mkdir", "os.rmdir", "os.truncate", "os.symlink", "os.link")


def inside(path):
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False  # a file descriptor
    path = os.path.realpath(os.fsdecode(path))
    return path == AUDITED or path.startswith(AUDITED + os.sep)


def audit(event, args):
    if event == "open":
        paths = [args[0]] if args[2] & WRITING_FLAGS else []
    elif event in CHANGES or event == "shutil.rmtree":
        paths = args[:2]
    else:
        return
    for path in filter(inside, paths):
        with open(LOG, "a") as log:
            log.write(f"{event} {os.fsdecode(path)}\n")


def run_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


sys.addaudithook(audit)
run_next_sitecustomize()

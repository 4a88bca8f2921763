"""A readable console for the programs: TensorFlow's C++ log lines are hidden unless asked for,
and one way to fail.

Every program's `main()` parses its flags and then calls `start(args.verbose)` before it
imports TensorFlow; importing a program sets nothing. By default `start` sets
TF_CPP_MIN_LOG_LEVEL=3 (no C++ INFO, WARNING or ERROR lines: on a machine without a GPU,
"failed call to cuInit" is an ERROR line).
TensorFlow 2.21 does not apply that variable to what its shared libraries log while they load
(the oneDNN and "Could not find cuda drivers" INFO lines, absl's "WARNING: All log messages before
absl::InitializeLog() ...", each twice), nor does tensorflow-text's own copy of sentencepiece
("normalizer.cc(51) LOG(INFO) ..." whenever a tokenizer is loaded; no option reaches that copy).
So a program (`python -m training.X` or `python -m serving.X`) also sends its stderr through a
small filter process that drops the lines of those formats below the level and passes everything
else on unchanged (Python warnings and tracebacks, progress bars, the programs' own messages).
The filter is a separate process so that it still passes on the last lines of a crash.

A way back: `--verbose` keeps every line; otherwise a TF_CPP_MIN_LOG_LEVEL set by the user wins
(the filter then applies the user's level). A `main()` called by anything else than its own
`python -m` process (pytest, a notebook) only defaults the variable to 1 (INFO hidden) and starts
no filter.
"""

import atexit
import errno
import functools
import os
import pathlib
import subprocess
import sys

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
PROGRAM_PACKAGES = ("training", "serving", "benchmarks")

# Runs in the filter process (python -I -S -c): stdin is the program's stderr, stdout the real
# stderr.
# A line still without its end after 0.2 s (a progress bar redrawn with \r) is passed on as it is.
_FILTER = r"""
import os, re, select, signal, sys
# Ctrl-C is the program's to handle; its traceback still passes
signal.signal(signal.SIGINT, signal.SIG_IGN)
noise, pending, broken = re.compile(sys.argv[1].encode()), b"", False
def write(data):
    global broken
    while data and not broken:
        try:
            data = data[os.write(1, data):]
        except OSError:
            broken = True  # nobody reads stderr any more: keep draining so the program never blocks
while True:
    if pending and not select.select([0], [], [], 0.2)[0]:
        write(pending)
        pending = b""
        continue
    chunk = os.read(0, 65536)
    if not chunk:
        break
    *lines, pending = re.split(rb"(?<=[\r\n])", pending + chunk)
    write(b"".join(line for line in lines if not noise.match(line)))
write(pending)
"""

_started = False


def start(verbose=False):
    """Sets up the process for a program, before TensorFlow is imported: its C++ logs hidden
    unless `verbose` (see the module's docstring), Keras on TensorFlow unless KERAS_BACKEND says
    otherwise, and TensorFlow's pooling (BFC) allocator for host memory. The default allocator
    maps and unmaps every large tensor (a [B, T, vocab] logits tensor is ~100 MB), so each step
    pays page faults on fresh memory, which the pool avoids by reusing freed blocks;
    `TF_CPU_ALLOCATOR_USE_BFC=false` turns it off.
    Later calls do nothing."""
    global _started
    if _started:
        return
    _started = True
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    if not is_program_process():  # a notebook, a script or pytest: only INFO lines hidden
        os.environ.setdefault(LEVEL_VARIABLE, "1")
        return
    if verbose:  # asked for on the command line: wins over an inherited level
        os.environ[LEVEL_VARIABLE] = "0"
    level = os.environ.setdefault(LEVEL_VARIABLE, "3")
    _filter_stderr(int(level) if level.strip().isdigit() else 0)


def installed_command():
    """The name of the installed command (`kt-train`, ...) this process runs, or None."""
    name = pathlib.Path(sys.argv[0]).name
    return name if name.startswith("kt-") else None


def is_program_process():
    """Whether this process is an installed `kt-...` command, or `python -m training.X`,
    `serving.X` or `benchmarks.X`."""
    if installed_command():
        return True
    argv = getattr(sys, "orig_argv", [])
    if "-m" not in argv[1:-1]:
        return False
    return argv[argv.index("-m") + 1].split(".")[0] in PROGRAM_PACKAGES


def program(main):
    """Decorates a program's `main(argv=None, ...)`: any failure ends with one line
    `error: ...` naming the file, URL or flag (`describe`) and status 1; with --verbose it
    raises, traceback and all. A usage error (argparse) keeps its status 2."""

    @functools.wraps(main)
    def run(argv=None, *args, **kwargs):
        words = sys.argv[1:] if argv is None else argv
        try:
            return main(argv, *args, **kwargs)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as error:
            if "--verbose" in words:
                raise
            fail(describe(error))

    return run


def describe(error):
    """One line for a failure: its message, with the file an OSError names and what to do
    about a full disk; an unexpected kind of error says how to see its traceback."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        where = f" for {error.filename}" if error.filename else ""
        room = f" in {existing_parent(error.filename)}" if error.filename else ""
        reason = " ".join(str(error.strerror or error).split())[:200]
        return f"no space left{where} ({reason}); free some space{room} and run it again"
    if isinstance(error, OSError) and error.filename:
        return f"{error.filename}: {error.strerror or error}"
    message = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, (ValueError, OSError, LookupError)):
        return message
    return f"{type(error).__name__}: {message} (--verbose shows the traceback)"


def existing_parent(path):
    """The nearest folder above `path` that exists (what a full disk asks to free space in)."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)
    return parent


def fail(message, status=1):
    """Ends a program with one line on stderr, `error: MESSAGE`, and `status` (1: a failure the
    user can act on; 2: a usage error)."""
    sys.stderr.write(f"error: {message}\n")
    sys.exit(status)


def noise_pattern(level):
    """A regular expression for the C++ log lines that TF_CPP_MIN_LOG_LEVEL=`level` hides:
    absl's (I0000 00:00:1795432264.532217 2622 port.cc:153] ...) and its warning about them,
    and sentencepiece's (normalizer.cc(51) LOG(INFO) ...)."""
    severities = ("INFO", "WARNING", "ERROR")[: max(0, min(level, 3))]
    letters = "".join(name[0] for name in severities)
    return (
        rf"[{letters}]\d{{4}} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] "
        r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
        rf"|\S+\.cc\(\d+\) LOG\(({'|'.join(severities)})\) "
    )


def _filter_stderr(level):
    if level <= 0 or os.name != "posix":
        return
    sys.stderr.flush()
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _FILTER, noise_pattern(level)],
            stdin=subprocess.PIPE,
            stdout=2,
        )
    except OSError:
        return  # a console with C++ log lines is better than no program
    real_stderr = os.dup(2)
    os.dup2(process.stdin.fileno(), 2)
    process.stdin.close()

    def restore():
        """At exit: give the filter its end of input and wait until it has passed everything on."""
        sys.stderr.flush()
        os.dup2(real_stderr, 2)
        try:
            process.wait(timeout=10)  # a child process of the program may still hold the pipe
        except subprocess.TimeoutExpired:
            pass

    atexit.register(restore)

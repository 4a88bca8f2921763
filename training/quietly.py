"""Run a program of the library with the programs' quiet console (training/console.py).

    python -m training.quietly keras_transformer.data.ding        # what `make data` runs
    python -m training.quietly --verbose keras_transformer.data.ding

`python -m keras_transformer.data.ding` imports TensorFlow before its main() runs, and the library
must not change a process's environment or stderr when it is imported; so `make data` and
`make demo` run it through this, which calls the module's main(ARGS) with TensorFlow's C++ log
lines hidden (training/__init__.py has hidden them by the time this runs).
"""

import argparse
import importlib

from training.console import add_verbose_flag


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m training.quietly",
        description="Run `python -m MODULE ARGS...` (MODULE's main(ARGS)) with TensorFlow's C++ log lines hidden.",
    )
    add_verbose_flag(parser)
    parser.add_argument(
        "module", help="a module with a main(argv) function, e.g. keras_transformer.data.ding"
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    args = parser.parse_args(argv)
    importlib.import_module(args.module).main(args.args)


if __name__ == "__main__":
    main()

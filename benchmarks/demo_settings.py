"""The demo's settings: the flags `make demo` gives `python -m training.train`, one flag and its
value a line in demo.flags at the repository root. The Makefile reads that file
(`$(shell cat demo.flags)`), and so do the quality study's report and the benchmarks, here."""

import pathlib
import shlex

DEMO_FLAGS_FILE = pathlib.Path(__file__).resolve().parents[1] / "demo.flags"


def demo_lines():
    """The lines of demo.flags, each a flag and its value (if any) as words."""
    lines = DEMO_FLAGS_FILE.read_text(encoding="utf-8").split("\n")
    return [shlex.split(line) for line in lines if line.strip()]


def demo_flags():
    """The words of demo.flags, as the Makefile gives them to `python -m training.train`."""
    return [word for line in demo_lines() for word in line]


def flags_of(*names):
    """The words of the lines of demo.flags whose flag is one of `names` (e.g. "--preset",
    "--set": the demo's model, under another run's data and schedule)."""
    return [word for line in demo_lines() if line[0] in names for word in line]


def demo_plan():
    """The demo's `training.plan.TrainingPlan`, parsed by `training.train`'s own parser."""
    from training import train
    from training.plan import TrainingPlan

    parser = train.build_parser()
    return TrainingPlan.from_flags(parser.parse_args([*demo_flags(), "--run-dir", "runs/demo"]))

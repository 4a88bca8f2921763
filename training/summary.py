"""Print a run's test BLEU and chrF, its training steps, what its final model is (the average of
which checkpoints, or the best, with its validation figure), where its model, export, TensorBoard
logs and test translations are, and commands to try next.

    python -m training.summary --run-dir runs/demo --export-dir exports/transformer --demo

`make demo` ends with it, passing `--demo`: a run of the demo's settings, to which the commands
add a fresh 30-minute demo (for another run, that would train other settings). It reads only files
(RUN_DIR/translations.test.txt.scores.json, RUN_DIR/checkpoints/step-NNNNNNN.weights.npz,
RUN_DIR/run.json, EXPORT_DIR/<version>/), so it takes no time.
"""

import json
import os
import pathlib
import shlex

from keras_transformer_cli import console, flags
from keras_transformer_cli.run_dir import RunDirectory

LONGER = "-30-minutes"  # the suffix of the longer run's directories


def summary(run_dir, export_dir, demo=False):
    """The summary's lines; with `demo`, the run is `make demo`'s."""
    run, export_dir = RunDirectory(run_dir), pathlib.Path(export_dir)
    from keras_transformer_cli import checkpoints  # Keras, once the console is set up

    lines = [f"Summary of the run in {run}:", *score_lines(run.scores("test"))]
    found = checkpoints.list_checkpoints(run.checkpoints)
    lines.append(
        f"  training steps: {checkpoints.step_of(found[-1])}"
        if found
        else f"  training steps: unknown, {run.checkpoints} holds no step checkpoint"
    )
    lines.append(f"  {'final model:':19}{final_model(run)}")
    from keras_transformer.exports import latest_version

    try:
        export = latest_version(export_dir)
    except FileNotFoundError:
        export = None
    for what, path in (
        ("model", run.model),
        ("export", export),
        ("TensorBoard logs", run.logs),
        ("test translations", run.translations("test")),
    ):
        missing = " (missing)" if path is not None and not path.exists() else ""
        lines.append(f"  {what + ':':19}{path or f'none in {export_dir}'}{missing}")
    return lines + next_lines(run, export_dir, demo)


def final_model(run):
    """What the finished run's model.keras is, as run.json records it (read as JSON alone:
    the summary starts no TensorFlow)."""
    try:
        finished = json.loads(run.settings_file.read_text()).get("finished") or {}
        return finished.get("exported", "unknown: the run has not finished")
    except (OSError, ValueError, AttributeError) as error:
        return f"unknown ({run.settings_file}: {type(error).__name__})"


def score_lines(scores_file):
    """The test scores and their signatures, or why there are none."""
    try:
        scores = json.loads(scores_file.read_text())
        return [
            f"  test BLEU {scores['bleu']:.1f}, chrF {scores['chrf']:.1f}, chrF++ "
            f"{scores['chrf++']:.1f} (sacrebleu)",
            f"    BLEU signature: {scores['bleu_signature']}",
            f"    chrF signature: {scores['chrf_signature']}",
        ]
    except FileNotFoundError:
        return [f"  test scores: none, the run has not been scored ({scores_file} is missing)"]
    except (ValueError, KeyError, TypeError) as error:
        return [
            f"  test scores: {scores_file} is not a scores file ({type(error).__name__}: {error})"
        ]


def next_lines(run, export_dir, demo):
    """Commands to try next (tests/test_layout.py parses each with its program's parser); for a
    run of `make demo` (`demo`), a fresh 30-minute one: `make demo` trains the demo's settings,
    not this run's."""
    quoted = {
        name: shlex.quote(str(path))
        for name, path in (
            ("export", export_dir),
            ("model", run.model),
            ("logs", run.logs),
            ("greedy", run.translations("test.greedy")),
        )
    }
    lines = [
        "",
        "Next, from the repository root after `. .venv/bin/activate`:",
        f'  python -m serving.translate --model {quoted["export"]} "Wie spät ist es?"',
        f"  python -m training.evaluate --model {quoted['model']} --beam-size 1 "
        f"--output {quoted['greedy']}   # test scores with greedy search",
        f"  tensorboard --logdir {quoted['logs']}   # the training curves, at http://localhost:6006",
    ]
    longer = dict(longer_run_dirs(run, export_dir))
    if not demo or run.path.name.endswith(LONGER) or longer["run"].exists():
        return lines  # where the longer run's directory exists, it would train that run on
    longer = {name: shlex.quote(str(path)) for name, path in longer.items()}
    return lines + [
        "  # a fresh 30-minute run that averages its last 160 checkpoints (4000 steps), for a",
        "  # machine that reaches about 8000 steps in 30 minutes (on a slower one, keep the",
        "  # checkpoints of about half its steps, one every 25: docs/quickstart.md):",
        f'  make demo DEMO_MINUTES=30 DEMO_ARGS="--keep-checkpoints 160" '
        f"DEMO_DIR={longer['run']} DEMO_EXPORT={longer['export']}",
    ]


def longer_run_dirs(run, export_dir):
    """New directories beside the run's and the export's for the longer run: the same ones would
    train this run on instead, past the top of the curve (benchmarks/QUALITY.md)."""
    for name, path in (("run", run.path), ("export", export_dir)):
        if path.name in ("", ".."):
            path = pathlib.Path(os.path.normpath(path.absolute()))
        yield name, path.parent / f"{path.name}{LONGER}"


def build_parser():
    parser = flags.parser(__doc__, "training.summary")
    flags.add_run_dir(parser)
    flags.add_export_dir(parser)
    parser.add_argument(
        "--demo",
        action="store_true",
        help="the run is make demo's (the Makefile passes it): also suggest a fresh 30-minute "
        "demo beside it",
    )
    return parser


@console.program
def main(argv=None):
    args = build_parser().parse_args(argv)
    if not args.run_dir.is_dir():
        console.fail(f"--run-dir {args.run_dir} is not a directory")
    print("\n".join(summary(args.run_dir, args.export_dir, args.demo)))


if __name__ == "__main__":
    main()

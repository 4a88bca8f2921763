"""Train and score the study's settings on the Ding corpus, each for the same wall-clock budget,
and write benchmarks/QUALITY.md and benchmarks/QUALITY.json. Resumable: runs with a result are
skipped.

    python -m benchmarks.quality                    # every run of the study not yet done (hours)
    python -m benchmarks.quality --list             # the runs, and which are done
    python -m benchmarks.quality --only baseline    # some runs (names or levers)
    python -m benchmarks.quality --report-only      # the report again, from QUALITY.json

Each run trains `python -m training.train`'s model from the demo's settings before the study with
one lever changed (or several, in the combined runs) for the same wall-clock budget, then
translates the validation split with each decoding setting of the run (beam size, length penalty
alpha, and how many of the last checkpoints, 25 steps apart, are averaged) and scores it with
sacrebleu (BLEU 13a, chrF, chrF++). Settings are chosen on validation only; the test split is
translated only for the runs marked to confirm the chosen settings. A run with a curve is also
scored as if its budget had ended earlier, with the checkpoints written by then.

Each run is a fresh process writing RUN_DIR/result.json; a run with a result for the same training
(there, or in benchmarks/QUALITY.json) is not trained again, so the study continues where it
stopped, also in a fresh checkout; decodings added to a finished run since are scored on its
kept checkpoints. After every run benchmarks/QUALITY.json and the report in benchmarks/QUALITY.md
are rewritten (benchmarks/quality_report.py). This module declares the runs; what they gave, and
the reasoning behind each choice, are in QUALITY.json.
"""

import argparse
import pathlib

from benchmarks import quality_report, quality_train
from benchmarks.quality_runs import FULL_MINUTES, SCREEN_MINUTES, Run, result_of, results
from keras_transformer_cli import console, flags

REPORT = pathlib.Path("benchmarks/QUALITY.md")
# The baseline's decoding lever: (beam, alpha, checkpoints averaged).
DECODINGS = ((1, 0.0, 5), (4, 0.6, 5), (4, 1.0, 5), (4, 1.5, 5), (4, 1.0, 1), (4, 1.0, 20))


def words(text):
    """Flags written as one string."""
    return tuple(text.split())


# The settings the study's stages start from, and the decodings they score. Stage 1 changes one
# lever of the demo's settings; stage 2 starts from FAST (the stage-1 levers that bought steps or
# BLEU, the step cap lifted so that the budget alone ends a run); stage 3 from FAST_PHRASES_RUN
# (stage 2's choice, FAST with the phrase pairs); later levers from BASE_FLAGS, SMOOTHED_FLAGS
# and the chosen settings, each the choice of the levers before it.
NARROW = words("--set d_model=128 --set d_ff=512")
FAST = (*NARROW, *words("--set num_layers=2 --vocab-size 4000 --set dropout=0.0 --steps 100000"))
PHRASES = words("--phrases --sentence-repeats 10")
STAGE_3_CHOICES = words("--set relu_dropout=0.1 --vocab-size 8000 --tokens-per-batch 2000")
BASE_FLAGS = (*FAST, *PHRASES, *STAGE_3_CHOICES)
SMOOTHING_0_2 = words("--set label_smoothing=0.2")
SMOOTHED_FLAGS = (*BASE_FLAGS, *SMOOTHING_0_2)
WIDER_FLAGS = (*SMOOTHED_FLAGS, *words("--set d_model=192 --set d_ff=768"))
FAST_PHRASES_RUN = "fast-phrases-x10"
BASE_RUN = f"{FAST_PHRASES_RUN}-relu-dropout-0.1-vocab-8k-batch-2000"
SMOOTHED_RUN = f"{BASE_RUN}-smoothing-0.2-windows"
WIDER_RUN = f"{SMOOTHED_RUN}-faster-step-d-model-192"
# What the study chose on validation, which `make demo` trains (demo.flags; tests/test_quality.py
# checks that they agree): the run's flags, and the decoding.
CHOSEN_RUN, CHOSEN_FLAGS = WIDER_RUN, WIDER_FLAGS
CHOSEN_DECODING = (4, 1.2, 40, 1)
# Stage 2's decodings: greedy, the demo's beam and a longer-preferring alpha, none ending a
# translation before its first token, and the demo's beam over the last 20 checkpoints.
COMBINED = ((1, 0.0, 5, 1), (4, 0.6, 5, 1), (4, 1.0, 5, 1), (4, 0.6, 20, 1))
LONGER = ((4, 1.0, 20, 1), (4, 1.2, 20, 1), (4, 1.5, 20, 1))  # longer-preferring alphas
LONGER_BEFORE_1_2 = ((4, 1.0, 20, 1), (4, 1.5, 20, 1))
STAGE_3 = COMBINED + LONGER
EARLIER_DECODING = (4, 0.6, 20, 1)  # the test decoding of the choices up to the batch's
TEN_AVERAGED, TWENTY_AVERAGED, FORTY_AVERAGED = (4, 1.0, 10, 1), (4, 1.0, 20, 1), (4, 1.0, 40, 1)
WINDOWS = (TEN_AVERAGED, TWENTY_AVERAGED, FORTY_AVERAGED, (4, 1.0, 80, 1))  # the averaging window
FEWER_AVERAGED = ((4, 1.0, 5, 1), TEN_AVERAGED)
# The search around FORTY_AVERAGED over the same 40 checkpoints: alpha, greedy, a wider beam.
FORTY_SEARCHES = ((4, 0.6, 40, 1), (4, 0.8, 40, 1), CHOSEN_DECODING, (4, 1.5, 40, 1))
FORTY_SEARCHES += ((1, 0.0, 40, 1), (8, 1.0, 40, 1))
WIDER_WINDOWS = ((4, 1.2, 80, 1), (4, 1.2, 160, 1))  # the windows a longer run may want
# The report's learning curve: runs of the latest settings before the width 192, every
# checkpoint kept, in the chosen decoding and the wider windows.
CURVE_RUN = f"{BASE_RUN}-smoothing-0.2-60-minutes"
CURVE_SEED_1 = f"{BASE_RUN}-smoothing-0.2-30-minutes-seed-1"
CURVE_RUNS = (CURVE_RUN, CURVE_SEED_1)
CURVE_DECODINGS = (CHOSEN_DECODING, *WIDER_WINDOWS)
CURVE = {"budget": 60, "kept": 5000}  # a 60-minute run whose checkpoints all stay
FASTER_STEP_WINDOWS = tuple((4, 1.2, averaged, 1) for averaged in (40, 80, 120, 160, 240))


def stage_1(name, lever, flags="", **fields):
    """A stage-1 run: the demo's settings before the study with `flags` added."""
    return Run(name, lever, words(flags), **fields)


def fast(name, lever, flags="", **fields):
    """A stage-2 run: FAST with `flags` added, scored in COMBINED unless `decodings` says
    otherwise."""
    fields.setdefault("decodings", COMBINED)
    return Run(name, lever, (*FAST, *words(flags)), **fields)


def on_fast_phrases(name, lever, flags="", **fields):
    """A stage-3 run: stage 2's choice (FAST_PHRASES_RUN: FAST with the phrase pairs) with
    `flags` added, scored in STAGE_3 unless `decodings` says otherwise."""
    fields.setdefault("decodings", STAGE_3)
    return Run(f"{FAST_PHRASES_RUN}-{name}", lever, (*FAST, *PHRASES, *words(flags)), **fields)


def on_demo(name, lever, flags="", **fields):
    """A run on BASE_FLAGS with `flags` added, scored with 20 and 10 checkpoints averaged unless
    `decodings` says otherwise."""
    fields.setdefault("decodings", (TWENTY_AVERAGED, TEN_AVERAGED))
    return Run(f"{BASE_RUN}-{name}", lever, (*BASE_FLAGS, *words(flags)), **fields)


def on_smoothed(name, lever, flags="", **fields):
    """A run on SMOOTHED_FLAGS with `flags` added, 40 checkpoints kept, scored in the chosen
    decoding unless `kept` and `decodings` say otherwise."""
    fields = {"kept": 40, "decodings": (CHOSEN_DECODING,), **fields}
    return Run(f"{SMOOTHED_RUN}-{name}", lever, (*SMOOTHED_FLAGS, *words(flags)), **fields)


def declare(make, rows, **common):
    """The runs `make` declares from `rows` of (name, lever, flags[, fields]), each with the
    `common` fields too. A row's `seeds` declares one run a seed: `name` for seed 0,
    `name-seed-N` for seed N."""
    runs = []
    for name, lever, added, *more in rows:
        fields = {**common, **(more[0] if more else {})}
        seeds = fields.pop("seeds", None)
        if seeds is None:
            runs.append(make(name, lever, added, **fields))
        for seed in seeds or ():
            named = name if seed == 0 else f"{name}-seed-{seed}"
            runs.append(make(named, lever, added, seed=seed, **fields))
    return tuple(runs)


P10, RV8 = "--phrases --sentence-repeats 10", "--set relu_dropout=0.1 --vocab-size 8000"
SMOOTHED = "--set label_smoothing=0.2"
TWO = {"seeds": (0, 1)}
SEARCHED = {"decodings": (*WINDOWS, *FORTY_SEARCHES), "test": CHOSEN_DECODING}
STUDY = (
    # Stage 1: the demo's settings with its decoding lever, then one lever each.
    Run("baseline", "baseline", decodings=DECODINGS),
    *declare(
        stage_1,
        (
            ("warmup-200", "learning rate", "--set warmup_steps=200"),
            ("lr-x2", "learning rate", "--set learning_rate_scale=2.0"),
            ("d128", "shape", "--set d_model=128 --set d_ff=512"),
            ("layers-2", "shape", "--set num_layers=2"),
            ("pre-norm", "shape", "--set norm_first=true"),
            ("vocab-4k", "vocabulary", "--vocab-size 4000"),
            ("vocab-2k", "vocabulary", "--vocab-size 2000"),
            ("batch-1500", "batch", "--tokens-per-batch 1500"),
            ("dropout-0", "regularization", "--set dropout=0.0"),
            ("phrases-x10", "data", P10),
        ),
    ),
    # Stage 2: FAST, and one lever on it; FAST_PHRASES_RUN (the phrase pairs) confirmed on a
    # second seed.
    *declare(
        fast,
        (
            ("fast", "combined", ""),
            (FAST_PHRASES_RUN, "combined", P10, {"test": EARLIER_DECODING}),
            ("fast-dropout-0.1", "combined", "--set dropout=0.1"),
            ("fast-dropout-0.3", "combined", "--set dropout=0.3"),
            (f"{FAST_PHRASES_RUN}-dropout-0.1", "combined", f"{P10} --set dropout=0.1"),
            (
                f"{FAST_PHRASES_RUN}-seed-1",
                "confirmation",
                P10,
                {"seed": 1, "test": EARLIER_DECODING},
            ),
            ("fast-smoothing-0", "combined", "--set label_smoothing=0.0"),
            ("fast-layers-3", "combined", "--set num_layers=3"),
        ),
    ),
    # Stage 3: one lever on FAST_PHRASES_RUN (subword regularisation, the low-resource levers of
    # Araabi & Monz 2020), then on each choice: ReLU dropout 0.1, then 8000 pieces, then the batch.
    # `again` is FAST_PHRASES_RUN once more: a machine's speed moves from day to day.
    *declare(
        on_fast_phrases,
        (
            ("sampling-0.1", "subword sampling", "--subword-sampling 0.1", TWO),
            ("sampling-0.05", "subword sampling", "--subword-sampling 0.05"),
            ("layers-3", "depth", "--set num_layers=3"),
            ("again", "same day", ""),
            (
                "unigram-sampling-0.5",
                "subword sampling",
                "--subword-model unigram --subword-sampling 0.5",
            ),
            ("attention-dropout-0.1", "attention dropout", "--set attention_dropout=0.1"),
            (
                "relu-dropout-0.1",
                "ReLU dropout",
                "--set relu_dropout=0.1",
                {**TWO, "test": EARLIER_DECODING},
            ),
            ("relu-dropout-0.2", "ReLU dropout", "--set relu_dropout=0.2"),
            (
                "relu-dropout-0.1-smoothing-0.2",
                "label smoothing",
                f"--set relu_dropout=0.1 {SMOOTHED}",
            ),
            (
                "relu-dropout-0.1-vocab-8k",
                "vocabulary size",
                RV8,
                {**TWO, "test": EARLIER_DECODING},
            ),
            ("relu-dropout-0.1-vocab-8k-d192", "width", f"{RV8} --set d_model=192 --set d_ff=768"),
            (
                "relu-dropout-0.1-vocab-16k",
                "vocabulary size",
                "--set relu_dropout=0.1 --vocab-size 16000",
            ),
            (
                "relu-dropout-0.1-vocab-8k-warmup-400",
                "learning rate",
                f"{RV8} --set warmup_steps=400",
            ),
            (
                "relu-dropout-0.1-vocab-8k-batch-2000",
                "batch",
                f"{RV8} --tokens-per-batch 2000",
                {**TWO, "test": TWENTY_AVERAGED},
            ),
            (
                "relu-dropout-0.1-vocab-8k-batch-1500",
                "batch",
                f"{RV8} --tokens-per-batch 1500",
                TWO,
            ),
        ),
    ),
    # The time budget: 60 minutes, also scored as if cut at the curve's minutes (the weights at a
    # step do not depend on the budget). The first was scored before alpha 1.2 joined LONGER.
    fast(
        f"{FAST_PHRASES_RUN}-60-minutes",
        "time budget",
        P10,
        decodings=COMBINED + LONGER_BEFORE_1_2,
        test=EARLIER_DECODING,
        curve=(14, 30),
        curve_decodings=(EARLIER_DECODING, *LONGER_BEFORE_1_2),
        **CURVE,
    ),
    on_fast_phrases(
        "relu-dropout-0.1-60-minutes",
        "time budget",
        "--set relu_dropout=0.1",
        decodings=(EARLIER_DECODING, (4, 1.2, 20, 1)),
        test=EARLIER_DECODING,
        curve=(14, 30),
        curve_decodings=(EARLIER_DECODING, (4, 1.2, 20, 1)),
        **CURVE,
    ),
    on_demo(
        "60-minutes",
        "time budget",
        test=TEN_AVERAGED,
        curve=(14, 20, 25, 30),
        curve_decodings=(TWENTY_AVERAGED, *FEWER_AVERAGED),
        **CURVE,
    ),
    # On BASE_FLAGS: what makes each step count for more on a slower machine (Eq. 3's rate, ReLU
    # dropout, the sentences' repeats, the averaging window), then on a CPU with bfloat16 dot
    # products (precision, pre-norm, a domain tag on the phrase pairs, repeats, d_ff, dropout).
    *declare(
        on_demo,
        (
            ("lr-x2", "learning rate", "--set learning_rate_scale=2.0"),
            ("lr-x0.5", "learning rate", "--set learning_rate_scale=0.5"),
            ("relu-dropout-0", "ReLU dropout", "--set relu_dropout=0.0"),
            (
                "sentence-repeats-20",
                "data",
                "--sentence-repeats 20",
                {**TWO, "test": TWENTY_AVERAGED},
            ),
        ),
    ),
    on_demo(
        "seed-1-again",
        "same machine",
        seed=1,
        test=TEN_AVERAGED,
        decodings=(TWENTY_AVERAGED, *FEWER_AVERAGED),
    ),
    on_demo(
        "sentence-repeats-20-60-minutes",
        "time budget",
        "--sentence-repeats 20",
        test=TWENTY_AVERAGED,
        curve=(14, 20, 25, 30),
        curve_decodings=(TWENTY_AVERAGED,),
        **CURVE,
    ),
    *declare(
        on_demo,
        (
            ("bf16", "precision", "--mixed-precision bf16"),
            ("seed-1-zen-4", "same machine", "", {"seed": 1, "test": TEN_AVERAGED}),
            ("pre-norm", "shape", "--set norm_first=true"),
            ("tag-phrases", "data", "--tag-phrases"),
            ("sentence-repeats-5", "data", "--sentence-repeats 5", TWO),
            ("d-ff-1024", "shape", "--set d_ff=1024"),
            ("pre-norm-lr-x2", "shape", "--set norm_first=true --set learning_rate_scale=2.0"),
            ("dropout-0.05", "regularization", "--set dropout=0.05"),
        ),
    ),
    # The averaging window (WINDOWS) on seeds 0, 1 and 2, beside mixed bfloat16 in it; then two
    # regularizers and d_ff 1024 in it; on label smoothing 0.2 the search (FORTY_SEARCHES) too.
    *declare(
        on_demo,
        (
            ("windows", "decoding", "", {**TWO, "test": FORTY_AVERAGED}),
            ("bf16-windows", "precision", "--mixed-precision bf16", TWO),
            ("windows", "decoding", "", {"seeds": (2,)}),
            ("bf16-windows", "precision", "--mixed-precision bf16", {"seeds": (2,)}),
            ("dropout-0.05-windows", "regularization", "--set dropout=0.05", TWO),
            ("smoothing-0.2-windows", "regularization", SMOOTHED, {**TWO, **SEARCHED}),
            ("d-ff-1024-windows", "shape", "--set d_ff=1024", TWO),
        ),
        kept=80,
        decodings=WINDOWS,
    ),
    # On label smoothing 0.2 with alpha 1.2: Eq. 3's rate x1.5, label smoothing 0.3.
    *declare(
        on_demo,
        (
            ("smoothing-0.2-lr-x1.5", "learning rate", f"{SMOOTHED} --set learning_rate_scale=1.5"),
            ("smoothing-0.3", "regularization", "--set label_smoothing=0.3"),
        ),
        kept=40,
        decodings=(FORTY_AVERAGED, CHOSEN_DECODING),
        **TWO,
    ),
    # The curve of label smoothing 0.2 in CURVE_DECODINGS, and a 30-minute run on seed 1 for the
    # widest window's advice.
    on_demo(
        "smoothing-0.2-60-minutes",
        "time budget",
        SMOOTHED,
        decodings=CURVE_DECODINGS,
        test=CHOSEN_DECODING,
        curve=(14, 30, 45),
        curve_decodings=CURVE_DECODINGS,
        **CURVE,
    ),
    on_demo(
        "smoothing-0.2-30-minutes-seed-1",
        "time budget",
        SMOOTHED,
        seed=1,
        decodings=CURVE_DECODINGS,
        test=WIDER_WINDOWS[-1],
        budget=30,
        kept=160,
    ),
    # On label smoothing 0.2: two heads, attention dropout, and the sentence pairs alone with
    # dropout 0.1; then the Ding parser 5 (a correction of the data), a unigram vocabulary on it,
    # the sentences' other translations (--sentence-alternatives).
    *declare(
        on_demo,
        (
            ("smoothing-0.2-heads-2", "shape", f"{SMOOTHED} --set num_heads=2"),
            (
                "smoothing-0.2-attention-dropout-0.1",
                "regularization",
                f"{SMOOTHED} --set attention_dropout=0.1",
            ),
        ),
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    Run(
        "fast-relu-dropout-0.1-vocab-8k-batch-2000-smoothing-0.2-dropout-0.1",
        "data",
        (*FAST, *STAGE_3_CHOICES, *SMOOTHING_0_2, "--set", "dropout=0.1"),
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    *declare(
        on_smoothed,
        (
            ("ding-parser-5", "data", ""),
            ("ding-parser-5-unigram", "vocabulary", "--subword-model unigram"),
            ("sentence-alternatives", "data", "--sentence-alternatives"),
            # A faster step: the averaging window (40 to 240), the width 192, three layers.
            ("faster-step", "decoding", "", {"kept": 320, "decodings": FASTER_STEP_WINDOWS}),
            (
                "faster-step-d-model-192",
                "shape",
                "--set d_model=192 --set d_ff=768",
                {"test": CHOSEN_DECODING},
            ),
        ),
        **TWO,
    ),
    on_smoothed("faster-step-layers-3", "depth", "--set num_layers=3"),
)


def build_parser():
    parser = flags.parser(__doc__, "benchmarks.quality")
    flags.add_table(
        parser,
        ("--work-dir", pathlib.Path, pathlib.Path("runs/quality"), "where the runs are kept"),
        (
            "--minutes",
            flags.positive,
            SCREEN_MINUTES,
            f"training budget of a screening run, in minutes (default: {SCREEN_MINUTES}); the "
            f"runs that confirm the chosen settings train for the demo's {FULL_MINUTES}",
        ),
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="run only these runs (names, or levers such as 'data')",
    )
    flags.add_output(
        parser, "the report (the raw results go beside it as .json)", default=REPORT, dest="report"
    )
    parser.add_argument(
        "--list", action="store_true", help="list the study's runs and whether each is done"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the report and its .json from the recorded results; train and score nothing",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # one run, in a process
    parser.add_argument("--score-only", action="store_true", help=argparse.SUPPRESS)
    return parser


@console.program
def main(argv=None):
    parser = build_parser()
    args = flags.parse(parser, argv)
    by_name = {run.name: run for run in STUDY}
    if args.child:
        run = by_name[args.child]
        return quality_train.run_child(
            run, args.work_dir, run.minutes(args.minutes), args.score_only
        )
    chosen = [
        run for run in STUDY if not args.only or run.name in args.only or run.lever in args.only
    ]
    unknown = set(args.only or ()) - {r.name for r in STUDY} - {r.lever for r in STUDY}
    if unknown:
        parser.error(f"no run or lever named {', '.join(sorted(unknown))}; see --list")
    recorded = quality_report.recorded_results(args.report)
    found = {run.name: result_of(run, args.work_dir, args.minutes, recorded) for run in STUDY}
    if args.list:
        for run in STUDY:
            result = found[run.name]
            state = "todo" if result is None else "score" if run.missing(result) else "done"
            print(
                f"{state:<5} {run.name:<28} {run.lever:<15} {run.minutes(args.minutes):g} min  "
                f"{' '.join(run.flags)}"
            )
        return None
    if args.report_only:
        quality_report.write_report(
            results(STUDY, args.work_dir, args.minutes, recorded), args.report
        )
        print(f"written: {args.report}, {args.report.with_suffix('.json')}")
        return None
    failed = quality_train.run_study(STUDY, args, chosen, found, recorded)
    if failed:
        console.fail(f"{len(failed)} run(s) failed: {', '.join(failed)}")
    return None


if __name__ == "__main__":
    main()
